//! Two data groups replicated on three nodes over real loopback sockets: writes are answered
//! with the outcomes of apply, every replica converges on the same state, a crashed leader is
//! replaced and the new one accepts writes, and a node that lost its data catches up by
//! snapshot install once the leader has purged the log it would need.
//!
//! Reference: shared/DESIGN.md, "Network" (one channel per peer shared by all groups, snapshots
//! streamed in chunks) and "Storage".

use std::collections::BTreeMap;
use std::io;
use std::time::Instant;

use statemachine::{Rejection, Reply};

use crate::commands::{create_show, hold, open_sales};
use crate::harness::{Cluster, TestNode, WAIT, bind};

const GROUPS: [u64; 2] = [1, 2];
const NODES: [u64; 3] = [1, 2, 3];

/// The show each group sells.
fn show_of(group_id: u64) -> u64 {
    group_id * 10
}

/// Holds written while a node is down: more than the snapshot policy's 50 entries, so every
/// replica that runs snapshots and purges the log behind it.
const HOLDS_WHILE_DOWN: u64 = 60;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_groups_on_three_nodes_replicate_fail_over_and_restore_a_wiped_node() -> io::Result<()>
{
    let mut cluster = Cluster::start(&NODES, &GROUPS).await?;
    let started = Instant::now();
    // Each group is initialized from another node, so that leaders tend to spread.
    for (group_id, node) in GROUPS.into_iter().zip(NODES) {
        cluster.initialize(group_id, node).await?;
    }
    for group_id in GROUPS {
        let leader = cluster.leader(group_id).await?;
        println!("group {group_id}: node {leader} leads, {:?} after start", started.elapsed());
    }

    // Writes carry real booking commands and answer the outcomes of apply.
    for group_id in GROUPS {
        let show = show_of(group_id);
        let created =
            cluster.write(group_id, vec![create_show(show, 100), open_sales(show)]).await?;
        assert!(matches!(created[..], [Ok(Reply::ShowCreated { .. }), Ok(_)]), "{created:?}");
        // Two buyers race for seat 7 in one entry: the first wins, the second is told why.
        let raced = cluster.write(group_id, vec![hold(show, 1, 1, 7), hold(show, 2, 2, 7)]).await?;
        assert!(
            matches!(raced[..], [Ok(Reply::Held(_)), Err(Rejection::SeatUnavailable { .. })]),
            "{raced:?}"
        );
    }
    for group_id in GROUPS {
        cluster.wait_converged(group_id).await?;
        // A leader replicates to both peers, over one channel each whatever the group count.
        let leader = cluster.leader(group_id).await?;
        assert_eq!(cluster.node(leader)?.transport.channel_count(), NODES.len() - 1);
    }

    // The leader of the first group crashes; the survivors elect another that accepts writes.
    let group_id = GROUPS[0];
    let show = show_of(group_id);
    let victim = cluster.leader(group_id).await?;
    let crashed_at = Instant::now();
    cluster.node_mut(victim)?.crash().await?;
    let successor = cluster.leader(group_id).await?;
    let elected_after = crashed_at.elapsed();
    assert_ne!(successor, victim);
    let held = cluster.write(group_id, vec![hold(show, 3, 3, 8)]).await?;
    let accepted_after = crashed_at.elapsed();
    assert!(matches!(held[..], [Ok(Reply::Held(_))]), "{held:?}");
    println!(
        "group {group_id}: leader {victim} crashed; node {successor} leads after \
         {elected_after:?}, first write acknowledged after {accepted_after:?}"
    );

    // While the node is down, both groups move on far enough to snapshot and purge their logs.
    for buyer in 100..100 + HOLDS_WHILE_DOWN {
        let seat = u32::try_from(buyer - 80).map_err(io::Error::other)?;
        for group_id in GROUPS {
            let held =
                cluster.write(group_id, vec![hold(show_of(group_id), buyer, buyer, seat)]).await?;
            assert!(matches!(held[..], [Ok(Reply::Held(_))]), "{held:?}");
        }
    }
    let mut purged = BTreeMap::new();
    for group_id in GROUPS {
        let leader = cluster.leader(group_id).await?;
        let metrics = cluster
            .raft(leader, group_id)?
            .wait(Some(WAIT))
            .metrics(|metrics| metrics.purged.is_some(), "the leader purged its log")
            .await
            .map_err(io::Error::other)?;
        let index = metrics.purged.map_or(0, |log_id| log_id.index());
        println!("group {group_id}: leader {leader} purged its log up to index {index}");
        purged.insert(group_id, index);
    }

    // The crashed node comes back with an empty database under the same id and address.
    let address = cluster.node(victim)?.address;
    let restarted_at = Instant::now();
    let wiped = TestNode::start(victim, bind(address).await?, &GROUPS).await?;
    cluster.nodes.insert(victim, wiped);
    for group_id in GROUPS {
        let purged_index = purged[&group_id];
        // The entries up to the purged index exist nowhere but in a snapshot: reaching them
        // means a snapshot was streamed and installed.
        let metrics = cluster
            .raft(victim, group_id)?
            .wait(Some(WAIT))
            .metrics(
                |metrics| {
                    let reached = |log_id: Option<&raft::LogId>| {
                        log_id.is_some_and(|id| id.index() >= purged_index)
                    };
                    reached(metrics.snapshot.as_ref()) && reached(metrics.last_applied.as_ref())
                },
                "the wiped node installed a snapshot",
            )
            .await
            .map_err(io::Error::other)?;
        println!(
            "group {group_id}: wiped node {victim} installed snapshot {:?} after {:?}",
            metrics.snapshot,
            restarted_at.elapsed()
        );
    }
    // It takes part again: a new write reaches it, and every replica agrees.
    for group_id in GROUPS {
        let held = cluster.write(group_id, vec![hold(show_of(group_id), 9, 9, 90)]).await?;
        assert!(matches!(held[..], [Ok(Reply::Held(_))]), "{held:?}");
        let digest = cluster.wait_converged(group_id).await?;
        println!(
            "group {group_id}: all {} replicas converged, digest {:02x?}",
            NODES.len(),
            &digest[..4]
        );
    }
    cluster.shutdown().await
}
