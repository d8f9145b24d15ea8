//! Membership changes under load: while a writer keeps making holds, a fourth node joins every
//! group (learner, caught up, then voter) and node 1 leaves every group; no acknowledged hold is
//! lost, and the replicas of each group's final membership converge.
//!
//! Reference: Raft §6 (cluster membership changes: joint consensus, a new server catches up as
//! a non-voting member first; a removed leader steps down once the new configuration is
//! committed) and shared/DESIGN.md "Ordering, acknowledgement and fencing".

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use testkit::{ClusterError, NodeId, wait_for};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Client;
use crate::workload::{Held, assert_readable, create_open, hold};
use crate::{WAIT, assert_converged, options, start};

/// The shows of the test, one in each data group.
const SHOWS: [(u64, u64); 2] = [(51, 1), (52, 2)];

/// Seats of each show: more than the writer can hold in the test's time.
const SEATS: u32 = 2_000;

/// The node that joins, and the one that leaves.
const JOINING: NodeId = 4;
const LEAVING: NodeId = 1;

/// How many holds the writer must have acknowledged before and after the changes, so that
/// they happen under load.
const HOLDS_AROUND_CHANGES: usize = 5;

/// What the background writer did.
#[derive(Default)]
struct WriterLog {
    /// The holds it got acknowledged.
    acknowledged: Vec<Held>,
    /// Why each of the others failed (the outcome of those is unknown or a rejection).
    failed: Vec<String>,
}

/// A writer making holds one after the other, alternating between the shows, each seat once,
/// each hold for its own session, until stopped.
struct Writer {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicUsize>,
    task: JoinHandle<WriterLog>,
}

impl Writer {
    /// Starts the writer on `client`.
    fn start(client: Client) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(write_until(client, Arc::clone(&stop), Arc::clone(&acknowledged)));
        Writer { stop, acknowledged, task }
    }

    /// How many holds it got acknowledged so far.
    fn acknowledged(&self) -> usize {
        self.acknowledged.load(Ordering::Relaxed)
    }

    /// Waits (until [`WAIT`]) for `more` acknowledged holds than now.
    async fn wait_progress(&self, more: usize) -> io::Result<()> {
        let target = self.acknowledged() + more;
        wait_for(&format!("{more} more acknowledged holds"), WAIT, async || {
            Ok(if self.acknowledged() >= target {
                Ok(())
            } else {
                Err(format!("{} acknowledged", self.acknowledged()))
            })
        })
        .await
    }

    /// Stops it after its current hold and returns what it did.
    async fn stop(self) -> io::Result<WriterLog> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.map_err(io::Error::other)
    }
}

/// The writer's loop: see [`Writer`].
async fn write_until(client: Client, stop: Arc<AtomicBool>, count: Arc<AtomicUsize>) -> WriterLog {
    let mut log = WriterLog::default();
    let mut number: u32 = 0;
    while !stop.load(Ordering::Relaxed) && number < SEATS * 2 {
        let (show, _) = SHOWS[usize::try_from(number % 2).unwrap_or(0)];
        let seat = number / 2;
        match hold(&client, &format!("e-{number}"), show, &[seat]).await {
            Ok(held) => {
                log.acknowledged.push(held);
                count.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => log.failed.push(format!("show {show} seat {seat}: {error}")),
        }
        number += 1;
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_and_remove_node_under_load() -> io::Result<()> {
    let mut cluster = start(options(3)).await?;
    cluster.start_extra(JOINING).await?;
    // Clients of every node, the joining one included (leader hints will name it); the
    // cluster's own admin client learns it too.
    let client = Client::of(&cluster);
    for (show, group) in SHOWS {
        create_open(&client, show, SEATS, group).await?;
    }
    let writer = Writer::start(Client::of(&cluster));
    writer.wait_progress(HOLDS_AROUND_CHANGES).await?;

    let changes = Instant::now();
    for group in cluster.group_ids() {
        let started = Instant::now();
        let added = cluster
            .add_learner(group, JOINING, true)
            .await
            .map_err(|error| failed(&format!("group {group}: add learner {JOINING}"), error))?;
        let promoted = cluster
            .promote(group, &[JOINING])
            .await
            .map_err(|error| failed(&format!("group {group}: promote {JOINING}"), error))?;
        println!(
            "group {group}: node {JOINING} added as learner ({added:?}) and promoted \
             ({promoted:?}) in {:?}",
            started.elapsed()
        );
        assert!(promoted.voters.contains(&JOINING), "group {group}: {promoted:?}");
    }
    writer.wait_progress(HOLDS_AROUND_CHANGES).await?;

    for group in cluster.group_ids() {
        let leader = cluster.leader_of(group).await?;
        let started = Instant::now();
        let removed = match cluster.remove(group, LEAVING).await {
            Ok(removed) => {
                println!(
                    "group {group}: node {LEAVING} removed while node {leader} led ({removed:?}) \
                     in {:?}",
                    started.elapsed()
                );
                removed
            }
            Err(error) if leader == LEAVING => {
                // Reported, then worked around the way an operator would: hand the leadership
                // to a remaining voter first.
                println!(
                    "group {group}: removing its leader {LEAVING} failed ({error}); transferring \
                     the leadership first"
                );
                cluster
                    .transfer_leader(group, JOINING)
                    .await
                    .map_err(|error| failed(&format!("group {group}: transfer"), error))?;
                cluster.remove(group, LEAVING).await.map_err(|error| {
                    failed(&format!("group {group}: remove {LEAVING} after transfer"), error)
                })?
            }
            Err(error) => {
                return Err(failed(&format!("group {group}: remove {LEAVING}"), error));
            }
        };
        assert!(
            !removed.voters.contains(&LEAVING) && !removed.learners.contains(&LEAVING),
            "group {group}: {removed:?}"
        );
        // The group's leader (a new one, if node 1 led) reports the membership without node 1.
        let successor =
            wait_for(&format!("group {group} to run without node {LEAVING}"), WAIT, async || {
                let leader = cluster.leader_of(group).await?;
                let status = cluster.group_status(leader, group, false).await?;
                Ok(if leader != LEAVING && !status.voters.contains(&LEAVING) {
                    Ok(leader)
                } else {
                    Err(format!("leader {leader}, voters {:?}", status.voters))
                })
            })
            .await?;
        println!(
            "group {group}: node {successor} leads {:?} after the removal began",
            started.elapsed()
        );
    }
    println!("membership changes of every group done in {:?}", changes.elapsed());
    writer.wait_progress(HOLDS_AROUND_CHANGES).await?;
    let log = writer.stop().await?;
    println!(
        "writer: {} holds acknowledged, {} failed{}",
        log.acknowledged.len(),
        log.failed.len(),
        log.failed.first().map(|first| format!(", first: {first}")).unwrap_or_default()
    );

    // Node 1 is decommissioned: the cluster serves without it.
    cluster.kill(LEAVING).await?;
    let converged = assert_converged(&cluster).await?;
    for (group, state) in &converged {
        assert!(!state.members.contains(&LEAVING), "group {group}: {state:?}");
        assert!(state.members.contains(&JOINING), "group {group}: {state:?}");
    }
    assert_readable(&client, &log.acknowledged).await?;
    Ok(cluster.shutdown().await?)
}

/// A failed membership call as an error of the test, saying what was attempted.
fn failed(what: &str, error: ClusterError) -> io::Error {
    io::Error::other(format!("{what}: {error}"))
}
