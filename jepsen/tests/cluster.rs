//! The suite's cluster against real `bookingd` processes: start three nodes, kill and restart a
//! leader, isolate one and heal it, pause and resume a node, skew a leader's clock (when
//! libfaketime is installed), take a follower out of a group and readmit it, then heal
//! everything and check that every group's replicas converge to one digest.
//!
//! A second test runs nemesis schedules against a cluster: every step is recorded, steps that
//! cannot apply are skipped, and the run ends healed and converged.
//!
//! Needs the binaries: `cargo build --release --workspace --bins` first (the cluster finds
//! `bookingd` next to the test's `deps/` folder). Uses 127.0.0.11-13 and ports 7400-7413; the
//! tests take turns (the machine has two cores, and elections do not survive two clusters
//! competing for them).
//!
//! Reference: Raft §5.2 (a new leader is elected when the old one is gone), §5.3 (replicas that
//! applied the same log are in the same state).

use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use client::{Client, NewShow};
use jepsen::cluster::{Cluster, ClusterOptions, GroupId, NodeId};
use jepsen::nemesis::{self, Nemesis, Phase, Schedule, StepStatus};

/// Held by the running test: clusters of this binary run one at a time.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _turn = ONE_CLUSTER_AT_A_TIME.lock().await;
    let started = Instant::now();
    let dir = run_dir("cluster");
    let _ = std::fs::remove_dir_all(&dir);
    let options =
        ClusterOptions { groups: 1, port_base: 7400, ..ClusterOptions::new(3, dir.clone()) };
    let cluster = Cluster::start(options).await?;
    println!("started in {:?}; binary {}", started.elapsed(), cluster.binary().display());
    assert_eq!(cluster.addresses(), ["127.0.0.11:7400", "127.0.0.12:7400", "127.0.0.13:7400"]);
    let client = cluster.client();
    let mut show = NewShow::uniform(SHOW, 100, 1_000, "EUR");
    show.group_id = GROUP;
    show.open_sales = true;
    client.create_show(&show, None).await?;
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

    // Everything at once, then heal_all: every group converges.
    let victim = cluster.leader_of(GROUP).await?;
    cluster.kill(victim).await?;
    let paused = cluster.node_ids().into_iter().find(|&id| id != victim).ok_or("no node")?;
    cluster.pause(paused).await?;
    cluster.block_link(paused, victim)?;
    cluster.heal_all().await?;
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
async fn nemesis_schedules_record_every_step_and_end_healed() -> TestResult {
    let _turn = ONE_CLUSTER_AT_A_TIME.lock().await;
    let started = Instant::now();
    let dir = run_dir("nemesis");
    let _ = std::fs::remove_dir_all(&dir);
    let options =
        ClusterOptions { groups: 1, port_base: 7410, ..ClusterOptions::new(3, dir.clone()) };
    let cluster = Cluster::start(options).await?;
    let client = cluster.client();
    let mut show = NewShow::uniform(SHOW, 100, 1_000, "EUR");
    show.group_id = GROUP;
    show.open_sales = true;
    client.create_show(&show, None).await?;
    let t0 = Instant::now();

    // A ring needs five nodes: on three, every step is skipped, and nothing is left to heal.
    let mut ring = Schedule::new(Nemesis::PartitionRing, GROUP, 1);
    ring.quiet_min = Duration::from_millis(200);
    ring.quiet_max = Duration::from_millis(200);
    let events =
        nemesis::run(&cluster, &ring, t0, tokio::time::sleep(Duration::from_secs(1))).await;
    let (last, faults) = events.split_last().ok_or("no event")?;
    assert!(!faults.is_empty());
    for event in faults {
        assert_eq!((event.phase, event.status), (Phase::Fault, StepStatus::Skipped), "{event:?}");
        assert!(event.detail.contains("5 nodes"), "{event:?}");
    }
    assert_eq!((last.action.as_str(), last.status), ("heal-all", StepStatus::Installed));

    // A mix of faults with short periods; each fault is undone by the step of the same number.
    let mut mix = Schedule::new(Nemesis::Combined, GROUP, 5);
    mix.quiet_min = Duration::from_millis(300);
    mix.quiet_max = Duration::from_millis(800);
    mix.fault_min = Duration::from_millis(800);
    mix.fault_max = Duration::from_millis(1_500);
    let mut seen = Vec::new();
    let stop = tokio::time::sleep(Duration::from_secs(10));
    let events =
        nemesis::run_with(&cluster, &mix, t0, stop, |event| seen.push(event.clone())).await;
    assert_eq!(seen, events, "every step is reported as it happens");
    for event in &events {
        println!(
            "{:>7.3}-{:>7.3} s #{} {} {} {} {:?} {}",
            event.time_ns as f64 / 1e9,
            event.end_ns as f64 / 1e9,
            event.step,
            event.nemesis,
            event.action,
            event.target,
            event.status,
            event.detail
        );
    }
    let faults = events.iter().filter(|event| event.phase == Phase::Fault).count();
    assert!(faults >= 3, "{faults} faults in 10 s");
    assert!(events.windows(2).all(|pair| pair[0].time_ns <= pair[1].time_ns), "in time order");
    for fault in events.iter().filter(|event| event.phase == Phase::Fault) {
        assert_ne!(fault.nemesis, Nemesis::Combined, "the mix names what it picked");
        let healed = events.iter().any(|heal| heal.phase == Phase::Heal && heal.step == fault.step);
        let instant = fault.action == "transfer-leader" || fault.status == StepStatus::Skipped;
        assert!(healed || instant, "fault not undone: {fault:?}");
    }
    let last = events.last().ok_or("no event")?;
    assert_eq!(
        (last.action.as_str(), last.status),
        ("heal-all", StepStatus::Installed),
        "{last:?}"
    );

    // Healed: the cluster serves and its replicas agree.
    assert!(cluster.down().is_empty() && cluster.paused().is_empty());
    assert!(cluster.links().blocked().is_empty() && cluster.removed().is_empty());
    hold(&client, &[9]).await?;
    for group in cluster.group_ids() {
        let converged = cluster.wait_converged(group, Duration::from_secs(20)).await?;
        assert_eq!(converged.members, [1, 2, 3], "group {group}");
    }
    assert!(cluster.crashes().is_empty(), "{:?}", cluster.crashes());
    cluster.stop().await;
    std::fs::remove_dir_all(&dir)?;
    println!("done in {:?}", started.elapsed());
    Ok(())
}
