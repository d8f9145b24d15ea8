//! Partitions: a leader cut off from the majority cannot acknowledge a write, while the majority
//! elects a new leader that can; after healing, the old leader steps down, its unreplicated
//! entry is overwritten, and every replica converges on the majority's history.
//!
//! Reference: Raft §5.4 (an entry is committed only once stored on a majority; a leader of a
//! later term overwrites a minority's uncommitted entries) / §8 (a client's write is answered
//! only once committed, so a deposed leader never acknowledges one).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use raft::{GroupId, NodeId, ProposeError, Proposer, ProposerConfig, Raft};
use statemachine::{Command, IdempotencyKey, Outcome, Reply, Seat, SessionId, ShowId};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::commands::{create_show, hold, open_sales};
use crate::faults::{Faults, FaultyTransport};
use crate::harness::{Cluster, WAIT};

const SHOW: u64 = 90;
const SEAT: u32 = 3;
/// The session (and idempotency key) whose hold is proposed on the cut-off old leader.
const OLD_BUYER: u64 = 901;
/// The session (and idempotency key) whose hold is proposed on the majority's new leader.
const NEW_BUYER: u64 = 902;
/// How long the cut-off old leader is given to (wrongly) acknowledge its write.
const CUT_OFF_WRITE_WAIT: Duration = Duration::from_secs(3);

/// The index of the last entry in `raft`'s log.
fn last_log_index(raft: &Raft) -> u64 {
    raft.metrics().borrow_watched().last_log_index.unwrap_or(0)
}

/// Waits (until [`WAIT`]) for one of `among` to lead `group_id` with a committed vote, as its
/// own metrics and those of the others of `among` report it, and returns it.
async fn wait_leader_among(
    cluster: &Cluster,
    group_id: GroupId,
    among: &[NodeId],
) -> io::Result<NodeId> {
    let deadline = Instant::now() + WAIT;
    loop {
        for &id in among {
            let raft = cluster.raft(id, group_id)?;
            let leads = raft.metrics().borrow_watched().current_leader == Some(id);
            if leads && raft.as_leader().is_ok() {
                return Ok(id);
            }
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!(
                "group {group_id}: none of {among:?} leads after {WAIT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (until [`WAIT`]) for `raft` (node `id`) to have stepped down and to follow another
/// node.
async fn wait_follows(raft: &Raft, id: NodeId) -> io::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        if matches!(raft.as_leader(), Err(forward) if forward.leader_id.is_some_and(|leader| leader != id))
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!(
                "node {id} still leads or knows no other leader after {WAIT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`NEW_BUYER`]'s hold of [`SEAT`].
fn hold_new_seat() -> Command {
    hold(SHOW, NEW_BUYER, NEW_BUYER, SEAT)
}

/// Proposes `command` on the majority's leader, starting with `leader`, and returns the leader
/// that applied it and its reply. A proposal refused as not on the leader was not appended: it
/// is proposed again on the majority's leader of the moment (a freshly elected leader may lose
/// its place to another election on the majority's side), until [`WAIT`].
async fn write_on_majority(
    cluster: &Cluster,
    group_id: GroupId,
    majority: &[NodeId],
    mut leader: NodeId,
    command: Command,
) -> io::Result<(NodeId, Reply)> {
    let deadline = Instant::now() + WAIT;
    loop {
        let proposer = Proposer::new(cluster.raft(leader, group_id)?, ProposerConfig::default());
        match proposer.propose(command.clone()).await.map(|answer| answer.outcome) {
            Ok(Ok(reply)) => return Ok((leader, reply)),
            Err(refused @ ProposeError::NotLeader { .. }) if Instant::now() < deadline => {
                println!("group {group_id}: node {leader} refused ({refused}), proposing again");
                // The majority may still be settling an election: back off a little.
                tokio::time::sleep(Duration::from_millis(10)).await;
                leader = wait_leader_among(cluster, group_id, majority).await?;
            }
            other => {
                return Err(io::Error::other(format!(
                    "node {leader}: expected a successful write, got {other:?}"
                )));
            }
        }
    }
}

/// Waits (until [`WAIT`]) for the log of `raft` (node `id`) to reach `index`.
async fn wait_log_reaches(raft: &Raft, id: NodeId, index: u64) -> io::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        if last_log_index(raft) >= index {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!(
                "node {id}: log at {} did not reach {index} after {WAIT:?}",
                last_log_index(raft)
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Asserts that a write proposed on a cut-off leader was not acknowledged: it is still pending
/// after `wait`, or it failed (not the leader, or outcome unknown). A committed write would
/// answer `Ok`, even with a rejection.
async fn assert_not_acknowledged(
    pending: &mut JoinHandle<Result<Outcome, ProposeError>>,
    wait: Duration,
    when: &str,
) -> io::Result<()> {
    match tokio::time::timeout(wait, pending).await {
        Err(_elapsed) => println!("{when}: the cut-off leader's write is still unanswered"),
        Ok(joined) => {
            let answer = joined.map_err(io::Error::other)?;
            println!("{when}: the cut-off leader's write answered {answer:?}");
            assert!(
                matches!(
                    answer,
                    Err(ProposeError::NotLeader { .. } | ProposeError::Unavailable(_))
                ),
                "{when}: a leader cut off from the majority acknowledged a write: {answer:?}"
            );
        }
    }
    Ok(())
}

/// Checks, on every replica, that [`SEAT`] of [`SHOW`] is held by [`NEW_BUYER`]'s hold only and
/// that nothing of [`OLD_BUYER`]'s write was applied.
fn assert_only_new_hold(cluster: &Cluster, group_id: GroupId) -> io::Result<()> {
    for node in cluster.running() {
        node.reader(group_id)?
            .read(|group| {
                let show = &group.shows[&ShowId(SHOW)];
                let holds: Vec<_> = show.holds.values().collect();
                assert_eq!(holds.len(), 1, "node {}: holds {holds:?}", node.id);
                let held = holds[0];
                assert_eq!(held.session, SessionId(u128::from(NEW_BUYER)), "node {}", node.id);
                assert_eq!(held.seats.as_slice(), [SEAT].as_slice(), "node {}", node.id);
                assert_eq!(show.seats[SEAT as usize], Seat::Held(held.id), "node {}", node.id);
                let old_session = SessionId(u128::from(OLD_BUYER));
                let old_key = (old_session, IdempotencyKey(u128::from(OLD_BUYER)));
                assert!(!show.idempotency.contains_key(&old_key), "node {}", node.id);
                assert!(!show.live_holds_by_session.contains_key(&old_session), "node {}", node.id);
            })
            .map_err(io::Error::other)?;
    }
    Ok(())
}

/// What a test cuts: the leader's side (the leader and the followers cut off with it) and the
/// majority's side.
struct Sides {
    /// The followers on the old leader's side.
    with_leader: Vec<NodeId>,
    /// The nodes on the other side: a majority.
    majority: Vec<NodeId>,
}

/// The test body shared by the isolation and the partition tests, on a cluster of `nodes`:
/// `cut(faults, leader, others)` separates the leader (and perhaps some followers) from a
/// majority and says how.
async fn cut_off_leader_cannot_acknowledge(
    group_id: GroupId,
    nodes: &[NodeId],
    cut: impl FnOnce(&Faults, NodeId, &[NodeId]) -> Sides,
) -> io::Result<()> {
    let faults = Faults::new();
    let mut cluster = Cluster::start_with(nodes, &[group_id], |id, transport| {
        FaultyTransport::new(id, transport, faults.clone())
    })
    .await?;
    cluster.initialize(group_id, nodes[0]).await?;
    // The first election may still be settling: the harness proposes again on a new leader.
    cluster.write(group_id, vec![create_show(SHOW, 8), open_sales(SHOW)]).await?;
    cluster.wait_converged(group_id).await?;
    let old = cluster.leader(group_id).await?;
    let old_raft = cluster.raft(old, group_id)?;
    let old_proposer = Arc::new(Proposer::new(old_raft.clone(), ProposerConfig::default()));

    // Cut the leader off, then propose a hold through it.
    let others: Vec<NodeId> = nodes.iter().copied().filter(|&id| id != old).collect();
    let before = last_log_index(&old_raft);
    let sides = cut(&faults, old, &others);
    let cut_at = Instant::now();
    let mut pending = tokio::spawn({
        let proposer = Arc::clone(&old_proposer);
        async move {
            proposer
                .propose(hold(SHOW, OLD_BUYER, OLD_BUYER, SEAT))
                .await
                .map(|answer| answer.outcome)
        }
    });

    // Meanwhile the majority elects a new leader, which holds the same seat for another session.
    let new = wait_leader_among(&cluster, group_id, &sides.majority).await?;
    println!(
        "group {group_id}: the majority elected node {new} {:?} after node {old} was cut off",
        cut_at.elapsed()
    );
    let (writer, reply) =
        write_on_majority(&cluster, group_id, &sides.majority, new, hold_new_seat()).await?;
    println!("group {group_id}: node {writer} held seat {SEAT} for session {NEW_BUYER}");
    match reply {
        Reply::Held(receipt) => assert_eq!(receipt.seats.as_slice(), [SEAT].as_slice()),
        other => panic!("expected a hold, got {other:?}"),
    }

    // The old leader appended its hold (it was not refused at the door), and replicated it to
    // the followers on its side, but never acknowledged it: they are not a majority.
    let appended = last_log_index(&old_raft);
    assert!(appended > before, "the cut-off leader appended nothing");
    for &follower in &sides.with_leader {
        wait_log_reaches(&cluster.raft(follower, group_id)?, follower, appended).await?;
    }
    let waited = cut_at.elapsed();
    assert_not_acknowledged(&mut pending, CUT_OFF_WRITE_WAIT.saturating_sub(waited), "cut off")
        .await?;

    // Heal: the old leader steps down, its entry is overwritten, and every replica converges.
    faults.heal();
    println!("group {group_id}: {} messages dropped while cut off", faults.dropped());
    wait_follows(&old_raft, old).await?;
    assert_not_acknowledged(&mut pending, WAIT, "healed").await?;
    pending.abort();
    cluster.wait_converged(group_id).await?;
    assert_only_new_hold(&cluster, group_id)?;
    drop(old_proposer);
    cluster.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_isolated_old_leader_cannot_acknowledge_a_write() -> io::Result<()> {
    // Reference: Raft §5.4 / §8.
    cut_off_leader_cannot_acknowledge(11, &[1, 2, 3], |faults, leader, others| {
        faults.isolate(leader);
        Sides { with_leader: Vec::new(), majority: others.to_vec() }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_minority_partition_cannot_commit() -> io::Result<()> {
    // Reference: Raft §5.4 / §8: the leader on the minority side of a 1|2 partition of three
    // nodes, then of a 2|3 partition of five (where its entry reaches a follower and is still
    // not committed).
    cut_off_leader_cannot_acknowledge(12, &[1, 2, 3], |faults, leader, others| {
        faults.partition(&[leader], others);
        Sides { with_leader: Vec::new(), majority: others.to_vec() }
    })
    .await?;
    cut_off_leader_cannot_acknowledge(13, &[1, 2, 3, 4, 5], |faults, leader, others| {
        let (with_leader, majority) = others.split_at(1);
        faults.partition(&[leader, with_leader[0]], majority);
        Sides { with_leader: with_leader.to_vec(), majority: majority.to_vec() }
    })
    .await
}
