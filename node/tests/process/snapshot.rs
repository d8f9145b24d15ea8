//! Catch-up by snapshot: a follower that lost its whole database (killed, directory deleted)
//! while the leader purged its log behind a snapshot is restored by the leader sending the
//! snapshot, then the log tail, and ends up in the same state as the other replicas.
//!
//! A wiped node has forgotten its votes as well as its log, so it is readmitted the safe way,
//! as the README's operator procedure says: removed from each group it was a member of, added
//! back as a learner (which never votes) that catches up, then promoted. Leaders never take a
//! member's log going backwards for granted (openraft's `allow_log_reversion` stays off).
//!
//! Reference: Raft §7 (InstallSnapshot: a leader sends a snapshot to a follower that lags too
//! far behind, when the entries it needs were discarded) and shared/DESIGN.md "Network"
//! (snapshots stream in chunks).

use std::io;

use testkit::{Cluster, ClusterOptions, NodeId, wait_for};
use tokio::time::Instant;

use crate::client::Client;
use crate::workload::{assert_readable, create_open, hold_each};
use crate::{WAIT, assert_converged, options, start};

/// The show of the test, placed in data group 1.
const SHOW: u64 = 41;

/// Entries between snapshots: small, so that the log is purged after a few dozen holds.
const SNAPSHOT_LOGS: u64 = 20;

/// Holds written before the follower is wiped, and while it is down (at least; more are written
/// until the leader's log no longer starts at its beginning).
const HOLDS_BEFORE: u32 = 100;
const HOLDS_WHILE_DOWN: u32 = 40;

/// The most holds written while the follower is down, waiting for the leader to purge.
const HOLDS_WHILE_DOWN_MAX: u32 = 400;

/// Holds in flight at once: few, so that they take many log entries.
const CONCURRENCY: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wiped_node_catches_up_by_snapshot() -> io::Result<()> {
    let layout = ClusterOptions { groups: 1, snapshot_logs: Some(SNAPSHOT_LOGS), ..options(3) };
    let cluster = start(layout).await?;
    let client = Client::of(&cluster);
    let group = create_open(&client, SHOW, 1_000, 1).await?;
    let mut holds = hold_each(&client, SHOW, 0..HOLDS_BEFORE, "d", CONCURRENCY).await?;

    let leader = cluster.leader_of(group).await?;
    let follower = cluster.running().into_iter().find(|&id| id != leader).expect("three nodes");
    let before = cluster.group_status(follower, group, false).await?;
    println!(
        "group {group}: follower {follower} at applied {} snapshot {} before the wipe",
        before.applied_index, before.snapshot_index
    );
    cluster.kill(follower).await?;
    cluster.wipe(follower).await?;

    // Writes while it is down, until the leader's snapshot is past the log it keeps behind a
    // snapshot (at most `SNAPSHOT_LOGS` entries): the log no longer starts at index 1, so only
    // a snapshot can restore the empty follower.
    let mut next_seat = HOLDS_BEFORE;
    loop {
        let batch = next_seat..next_seat + HOLDS_WHILE_DOWN;
        holds.extend(hold_each(&client, SHOW, batch, "d", CONCURRENCY).await?);
        next_seat += HOLDS_WHILE_DOWN;
        let leader = cluster.leader_of(group).await?;
        let status = cluster.group_status(leader, group, false).await?;
        println!(
            "group {group}: leader {leader} at applied {} snapshot {} after {} holds",
            status.applied_index,
            status.snapshot_index,
            holds.len()
        );
        if status.snapshot_index > 2 * SNAPSHOT_LOGS {
            break;
        }
        assert!(next_seat < HOLDS_WHILE_DOWN_MAX, "the leader never snapshots: {status:?}");
    }

    cluster.restart(follower).await?;
    let restarted = Instant::now();
    readmit(&cluster, follower).await?;
    wait_for(&format!("node {follower} to catch up"), WAIT, async || {
        let mut lagging = Vec::new();
        for group in cluster.group_ids() {
            let leader = cluster.leader_of(group).await?;
            let target = cluster.group_status(leader, group, false).await?;
            let caught = cluster.group_status(follower, group, false).await;
            match caught {
                Ok(status)
                    if status.applied_index >= target.applied_index
                        && (group == 0 || status.snapshot_index > 0) => {}
                Ok(status) => lagging.push(format!(
                    "group {group}: applied {} snapshot {} of leader's {}",
                    status.applied_index, status.snapshot_index, target.applied_index
                )),
                Err(error) => lagging.push(error.to_string()),
            }
        }
        Ok(if lagging.is_empty() { Ok(()) } else { Err(lagging.join("; ")) })
    })
    .await?;
    let caught = cluster.group_status(follower, group, false).await?;
    println!(
        "group {group}: node {follower} caught up {:?} after its restart, at applied {} from a \
         snapshot of index {}",
        restarted.elapsed(),
        caught.applied_index,
        caught.snapshot_index
    );
    assert_converged(&cluster).await?;
    assert_readable(&client, &holds).await?;
    Ok(cluster.shutdown().await?)
}

/// Readmits the wiped node `id` to every group: removed, added back as a learner that catches
/// up (by snapshot where the log was purged, by log elsewhere), then promoted to voter again.
pub(crate) async fn readmit(cluster: &Cluster, id: NodeId) -> io::Result<()> {
    for group in cluster.group_ids() {
        cluster.remove(group, id).await?;
        cluster.add_learner(group, id, true).await?;
        let membership = cluster.promote(group, &[id]).await?;
        println!("group {group}: node {id} readmitted, voters {:?}", membership.voters);
    }
    Ok(())
}
