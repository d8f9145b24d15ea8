//! The kit's cluster against real `bookingd` processes, as the Jepsen suite lays it out (fixed
//! addresses, libfaketime): start three nodes, kill and restart a leader, isolate one and heal
//! it, pause and resume a node, skew a leader's clock (when libfaketime is installed), take a
//! follower out of a group and readmit it, cut one client off from the leader through its
//! door, then heal everything and check that every group's replicas converge to one digest. A second test lays a cluster out as the node's process tests
//! do (free ports, a temporary directory): a node wiped and one outside the initial set.
//!
//! Needs the binaries: `cargo build --release --workspace --bins` first (the cluster finds
//! `bookingd` next to the test's `deps/` folder). The first test uses 127.0.0.11-13 and ports
//! 7400-7403; the tests take turns (the machine has two cores, and elections do not survive two
//! clusters competing for them).
//!
//! Reference: Raft §5.2 (a new leader is elected when the old one is gone), §5.3 (replicas that
//! applied the same log are in the same state).

use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use client::{Client, NewShow};
use testkit::{Addressing, Cluster, ClusterOptions, GroupId, NodeId, wait_for};

/// The show of the test, in data group 1.
const SHOW: u64 = 7;

/// The data group under test.
const GROUP: GroupId = 1;

/// How long a skewed leader's clock may take to be read again by libfaketime (it rereads the
/// skew file when a whole second has passed since it last read it), with room.
const SKEW_SETTLES: Duration = Duration::from_secs(5);

/// The skew the test sets, ms.
const SKEW_MS: i64 = 20_000;

type TestResult = Result<(), Box<dyn Error>>;

/// A fresh directory for the cluster's files.
fn run_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("jepsen-{name}-{}", std::process::id()))
}

/// Creates [`SHOW`] in [`GROUP`], 100 seats on sale.
async fn create_show(client: &Client) -> TestResult {
    let mut show = NewShow::uniform(SHOW, 100, 1_000, "EUR");
    show.group_id = GROUP;
    show.open_sales = true;
    client.create_show(&show, None).await?;
    Ok(())
}

/// Holds `seats` for a fresh session; returns the hold's log time.
async fn hold(client: &Client, seats: &[u32]) -> Result<u64, Box<dyn Error>> {
    let token = client.create_session().await?;
    let hold = client.hold(&token, SHOW, seats, 1, None).await?;
    Ok(hold.as_of_log_time_ms)
}

/// Waits for a leader of [`GROUP`] other than `old`.
async fn new_leader(cluster: &Cluster, old: NodeId) -> Result<NodeId, Box<dyn Error>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let leader = cluster.leader_of(GROUP).await?;
        if leader != old {
            return Ok(leader);
        }
        if Instant::now() > deadline {
            return Err(format!("node {old} still leads group {GROUP}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_survives_kill_isolation_pause_skew_and_membership_then_converges() -> TestResult {
    let started = Instant::now();
    let dir = run_dir("cluster");
    let _ = std::fs::remove_dir_all(&dir);
    let options = ClusterOptions {
        groups: 1,
        addressing: Addressing::suite(7400),
        exclusive: true,
        client_doors: true,
        ..ClusterOptions::new(3, dir.clone())
    };
    let cluster = Cluster::start(options).await?;
    println!("started in {:?}; binary {}", started.elapsed(), cluster.binary().display());
    // Clients dial each node's door, on the port of the node's link to itself.
    assert_eq!(cluster.addresses(), ["127.0.0.11:7401", "127.0.0.12:7402", "127.0.0.13:7403"]);
    let client = cluster.client();
    create_show(&client).await?;
    hold(&client, &[0]).await?;

    // kill -9 of the leader: the others elect another, which serves; the old one comes back.
    let first = cluster.leader_of(GROUP).await?;
    cluster.kill(first).await?;
    assert_eq!(cluster.down(), [first]);
    let second = new_leader(&cluster, first).await?;
    hold(&client, &[1]).await?;
    cluster.restart(first).await?;
    assert!(cluster.down().is_empty());
    println!("kill {first} -> leader {second}, restarted ({:?})", started.elapsed());

    // The leader cut off from its peers: the majority elects another.
    cluster.isolate(second);
    assert_eq!(cluster.links().blocked().len(), 4);
    let third = new_leader(&cluster, second).await?;
    hold(&client, &[2]).await?;
    cluster.heal();
    assert!(cluster.links().blocked().is_empty());
    println!("isolate {second} -> leader {third}, healed ({:?})", started.elapsed());

    // A paused follower: the group goes on without it.
    let follower = cluster.node_ids().into_iter().find(|&id| id != third).ok_or("no follower")?;
    cluster.pause(follower).await?;
    assert_eq!(cluster.paused(), [follower]);
    assert!(!cluster.available().contains(&follower));
    hold(&client, &[3]).await?;
    cluster.resume(follower).await?;
    assert!(cluster.paused().is_empty());
    println!("pause {follower}, resumed ({:?})", started.elapsed());

    // The leader's wall clock ahead: the log time it stamps follows it, once libfaketime has
    // read the skew file again (within about two seconds).
    if cluster.skew_supported() {
        let leader = cluster.leader_of(GROUP).await?;
        cluster.skew(leader, SKEW_MS)?;
        assert_eq!(cluster.skews()[&leader], SKEW_MS);
        let deadline = Instant::now() + SKEW_SETTLES;
        let mut seat = 10;
        loop {
            let now_ms = u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis())?;
            let stamped = hold(&client, &[seat]).await?;
            if stamped >= now_ms + 15_000 {
                println!(
                    "skew {leader} by {SKEW_MS} ms: log time ahead by {} ms",
                    stamped - now_ms
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "log time {stamped} is not ahead of the real time {now_ms} by the skew"
            );
            seat += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    } else {
        let error = cluster.skew(1, SKEW_MS).expect_err("no libfaketime, no skew").to_string();
        println!("clock skew skipped: {error}");
    }

    // A follower out of the group and back in.
    let leader = cluster.leader_of(GROUP).await?;
    let out = cluster.node_ids().into_iter().find(|&id| id != leader).ok_or("no follower")?;
    let removed = cluster.remove(GROUP, out).await?;
    assert!(!removed.voters.contains(&out), "{removed:?}");
    assert_eq!(cluster.removed(), [(GROUP, out)]);
    hold(&client, &[5]).await?;
    let readmitted = cluster.readmit(GROUP, out).await?;
    assert!(readmitted.voters.contains(&out), "{readmitted:?}");
    assert!(cluster.removed().is_empty());
    println!("remove {out} and readmit ({:?})", started.elapsed());

    // A client cut off from the leader by the leader's door: its hold fails (it never gets
    // there, and the other nodes send it back to the leader), while the leader stays in the
    // group and other clients hold. Let through again, it holds the same seat: the refused hold
    // was never applied.
    let leader = cluster.leader_of(GROUP).await?;
    let source = testkit::client_source(0);
    let config = client::Config {
        local_address: Some(source),
        retry_budget: Duration::from_secs(3),
        attempt_timeout: Duration::from_secs(1),
        ..client::Config::default()
    };
    let cut_off = cluster.trusting(Client::with_config(cluster.addresses(), config)?)?;
    let token = cut_off.create_session().await?;
    cluster.cut_client(leader, source)?;
    assert_eq!(cluster.cut_clients(), [(leader, source)]);
    let refused = cut_off.hold(&token, SHOW, &[20], 1, None).await;
    assert!(refused.is_err(), "a client cut off from the leader held: {refused:?}");
    hold(&client, &[21]).await?;
    assert_eq!(cluster.leader_of(GROUP).await?, leader, "cutting a client moved the leader");
    cluster.restore_clients();
    assert!(cluster.cut_clients().is_empty());
    cut_off.hold(&token, SHOW, &[20], 1, None).await?;
    println!("client {source} cut off from leader {leader}, let through ({:?})", started.elapsed());

    // Everything at once, then heal_all: every group converges.
    let victim = cluster.leader_of(GROUP).await?;
    cluster.kill(victim).await?;
    let paused = cluster.node_ids().into_iter().find(|&id| id != victim).ok_or("no node")?;
    cluster.pause(paused).await?;
    cluster.block_link(paused, victim)?;
    cluster.cut_client(paused, source)?;
    cluster.heal_all().await?;
    assert!(cluster.cut_clients().is_empty());
    assert!(cluster.down().is_empty() && cluster.paused().is_empty());
    assert!(cluster.links().blocked().is_empty());
    assert!(cluster.skews().values().all(|&skew| skew == 0));
    hold(&client, &[6]).await?;
    for group in cluster.group_ids() {
        let converged = cluster.wait_converged(group, Duration::from_secs(20)).await?;
        assert_eq!(converged.members, [1, 2, 3], "group {group}");
        println!("group {group} converged at {}", converged.applied_index);
    }
    let digests = cluster.digests(GROUP).await;
    assert_eq!(digests.len(), 3);
    let mut seen = Vec::new();
    for (id, view) in &digests {
        let view = view.as_ref().map_err(|error| format!("node {id}: {error}"))?;
        seen.push((view.digest_index, view.digest.clone()));
    }
    seen.dedup();
    assert_eq!(seen.len(), 1, "digests differ: {digests:?}");
    assert!(cluster.crashes().is_empty(), "{:?}", cluster.crashes());

    let pids: Vec<u32> = cluster.node_ids().iter().filter_map(|&id| cluster.pid(id)).collect();
    cluster.stop().await;
    assert!(cluster.running().is_empty());
    for pid in pids {
        assert!(!PathBuf::from(format!("/proc/{pid}")).exists(), "pid {pid} survived stop");
    }
    std::fs::remove_dir_all(&dir)?;
    println!("done in {:?}", started.elapsed());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_cluster_on_free_ports_takes_in_a_wiped_extra_node_and_cleans_up() -> TestResult {
    let started = Instant::now();
    let options = ClusterOptions { groups: 1, ..ClusterOptions::ephemeral(3) };
    let mut cluster = Cluster::start(options).await?;
    let dir = cluster.dir().to_path_buf();
    for address in cluster.addresses() {
        assert!(address.starts_with("127.0.0.1:"), "{address}");
    }
    let client = cluster.client();
    create_show(&client).await?;
    hold(&client, &[0]).await?;

    // Node 4, outside the initial set: it hosts nothing, so its database can go.
    cluster.start_extra(4).await?;
    assert_eq!(cluster.node_ids(), [1, 2, 3, 4]);
    let status = cluster.status(4, false).await?;
    assert!(
        status.groups.iter().all(|group| !group.member),
        "a node nobody added is a member of no group: {status:?}"
    );
    let error = cluster.wipe(4).await.expect_err("a running node is not wiped").to_string();
    assert!(error.contains("kill it before wiping it"), "{error}");
    cluster.kill(4).await?;
    cluster.wipe(4).await?;
    assert!(!cluster.node_dir(4)?.join("data").exists(), "wiped");
    cluster.restart(4).await?;

    // It joins the data group as a learner that catches up, then votes.
    cluster.add_learner(GROUP, 4, true).await?;
    let promoted = cluster.promote(GROUP, &[4]).await?;
    assert!(promoted.voters.contains(&4), "{promoted:?}");
    hold(&client, &[1]).await?;
    let leader =
        wait_for("a leader that counts node 4's vote", Duration::from_secs(30), async || {
            let leader = cluster.leader_of(GROUP).await?;
            let view = cluster.group_status(leader, GROUP, false).await?;
            Ok(if view.voters.contains(&4) { Ok(leader) } else { Err(format!("{view:?}")) })
        })
        .await?;
    let converged = cluster.wait_all_converged(Duration::from_secs(30)).await?;
    assert_eq!(converged[&GROUP].members, [1, 2, 3, 4], "led by {leader}");
    assert_eq!(converged[&0].members, [1, 2, 3], "the metadata group was left alone");

    cluster.shutdown().await?;
    assert!(!dir.exists(), "a finished test's directory is deleted");
    println!("done in {:?}", started.elapsed());
    Ok(())
}
