//! The proposer, the write path of a group on its leader: concurrent commands are coalesced into
//! few entries and each caller gets its own command's outcome; a follower refuses with the
//! leader's id; after leadership moves, a proposer on the new leader writes.
//!
//! Reference: shared/DESIGN.md, "Ordering, acknowledgement and fencing" and "Throughput".

use std::io;
use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;
use raft::{NodeId, ProposeError, Proposer, ProposerConfig, Raft};
use statemachine::{Answer, HoldStatus, Reply, ShowId, Written};
use tokio::time::Instant;

use crate::commands::{create_show, hold, open_sales};
use crate::harness::{Cluster, WAIT};

const SHOW: u64 = 80;

/// The index of the last entry in `raft`'s log.
fn last_log_index(raft: &Raft) -> u64 {
    raft.metrics().borrow_watched().last_log_index.unwrap_or(0)
}

/// Asserts that `answer` holds exactly `seat` of [`SHOW`], and carries the hold as its apply
/// left it.
fn assert_held(answer: &Result<Answer, ProposeError>, seat: u32) {
    match answer {
        Ok(Answer { outcome: Ok(Reply::Held(receipt)), written }) => {
            assert_eq!(receipt.show, ShowId(SHOW), "{receipt:?}");
            assert_eq!(receipt.seats.as_slice(), [seat].as_slice(), "{receipt:?}");
            let Some(Ok(Written::Hold(view))) = written.as_deref() else {
                panic!("seat {seat}: the answer carries no hold view: {written:?}")
            };
            assert_eq!((view.hold.id, view.state), (receipt.hold, HoldStatus::Held), "{view:?}");
            assert_eq!(view.hold.seats, receipt.seats, "{view:?}");
        }
        other => panic!("seat {seat}: expected a hold, got {other:?}"),
    }
}

/// Proposes `command` on `proposer`, again while its node refuses without naming another
/// leader (a leader that just took over refuses writes until a quorum has renewed its lease),
/// until [`WAIT`].
async fn propose_once_leading(
    proposer: &Proposer,
    command: statemachine::Command,
) -> Result<Answer, ProposeError> {
    let deadline = Instant::now() + WAIT;
    loop {
        let outcome = proposer.propose(command.clone()).await;
        if outcome != Err(ProposeError::NotLeader { leader: None }) || Instant::now() >= deadline {
            return outcome;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Waits (until [`WAIT`]) for `raft` to know that `leader` leads its group.
async fn wait_knows_leader(raft: &Raft, leader: NodeId) -> io::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        if matches!(raft.as_leader(), Err(forward) if forward.leader_id == Some(leader)) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!("node does not know leader {leader}")));
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_commands_are_coalesced_and_each_caller_gets_its_outcome() -> io::Result<()> {
    const GROUP: u64 = 8;
    const CALLERS: u32 = 200;
    let mut cluster = Cluster::start(&[1, 2, 3], &[GROUP]).await?;
    cluster.initialize(GROUP, 1).await?;
    cluster.write(GROUP, vec![create_show(SHOW, 256), open_sales(SHOW)]).await?;
    let leader = cluster.leader(GROUP).await?;
    let raft = cluster.raft(leader, GROUP)?;
    let proposer = Arc::new(Proposer::new(raft.clone(), ProposerConfig::default()));

    let before = last_log_index(&raft);
    let mut callers = Vec::new();
    for caller in 1..=CALLERS {
        let proposer = Arc::clone(&proposer);
        let command = hold(SHOW, u64::from(caller), u64::from(caller), caller);
        callers.push(tokio::spawn(async move { proposer.propose(command).await }));
    }
    let mut outcomes = Vec::new();
    for caller in callers {
        outcomes.push(caller.await.map_err(io::Error::other)?);
    }
    let entries = last_log_index(&raft) - before;
    println!("{CALLERS} concurrent proposals used {entries} log entries");

    assert_eq!(outcomes.len(), CALLERS as usize);
    for (seat, outcome) in (1..=CALLERS).zip(&outcomes) {
        assert_held(outcome, seat);
    }
    assert!(entries >= 1, "no entry was appended");
    assert!(entries < u64::from(CALLERS), "{entries} entries for {CALLERS} commands");
    cluster.wait_converged(GROUP).await?;
    cluster.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_refuses_with_the_leader_id() -> io::Result<()> {
    const GROUP: u64 = 9;
    let mut cluster = Cluster::start(&[1, 2, 3], &[GROUP]).await?;
    cluster.initialize(GROUP, 1).await?;
    cluster.write(GROUP, vec![create_show(SHOW, 16), open_sales(SHOW)]).await?;
    cluster.wait_converged(GROUP).await?;
    let leader = cluster.leader(GROUP).await?;
    let follower = cluster.nodes.keys().copied().find(|&id| id != leader).unwrap_or(leader);
    let follower_raft = cluster.raft(follower, GROUP)?;
    wait_knows_leader(&follower_raft, leader).await?;

    let before = last_log_index(&follower_raft);
    let proposer = Proposer::new(follower_raft.clone(), ProposerConfig::default());
    let refused = proposer.propose(hold(SHOW, 1, 1, 1)).await;
    assert_eq!(refused, Err(ProposeError::NotLeader { leader: Some(leader) }));

    // Nothing was appended: the seat is still free for the leader's proposer.
    let on_leader = Proposer::new(cluster.raft(leader, GROUP)?, ProposerConfig::default());
    assert_held(&on_leader.propose(hold(SHOW, 2, 2, 1)).await, 1);
    assert_eq!(last_log_index(&cluster.raft(leader, GROUP)?), before + 1);
    cluster.wait_converged(GROUP).await?;
    cluster.shutdown().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_leadership_moves_a_proposer_on_the_new_leader_writes() -> io::Result<()> {
    const GROUP: u64 = 10;
    let mut cluster = Cluster::start(&[1, 2, 3], &[GROUP]).await?;
    cluster.initialize(GROUP, 1).await?;
    cluster.write(GROUP, vec![create_show(SHOW, 16), open_sales(SHOW)]).await?;
    let first = cluster.leader(GROUP).await?;
    let first_raft = cluster.raft(first, GROUP)?;
    let old = Proposer::new(first_raft.clone(), ProposerConfig::default());
    assert_held(&old.propose(hold(SHOW, 1, 1, 1)).await, 1);

    let second = cluster.nodes.keys().copied().find(|&id| id != first).unwrap_or(first);
    first_raft.trigger().transfer_leader(second).await.map_err(io::Error::other)?;
    cluster.wait_leader_is(GROUP, second).await?;
    wait_knows_leader(&first_raft, second).await?;

    // The old leader's proposer refuses and points at the new leader.
    let refused = old.propose(hold(SHOW, 2, 2, 2)).await;
    assert_eq!(refused, Err(ProposeError::NotLeader { leader: Some(second) }));

    // A proposer on the new leader writes; seat 2 was not taken by the refused command.
    let new = Proposer::new(cluster.raft(second, GROUP)?, ProposerConfig::default());
    assert_held(&propose_once_leading(&new, hold(SHOW, 3, 3, 2)).await, 2);
    let batch = futures_util::future::join_all(
        (4..8u32).map(|seat| new.propose(hold(SHOW, u64::from(seat), u64::from(seat), seat))),
    )
    .await;
    for (seat, outcome) in (4..8u32).zip(&batch) {
        assert_held(outcome, seat);
    }
    drop((old, new));
    cluster.wait_converged(GROUP).await?;
    cluster.shutdown().await
}

/// A clock that always reads one time (the simulator gives nodes clocks of their own).
struct FixedClock(u64);

impl raft::WallClock for FixedClock {
    fn now_ms(&self) -> u64 {
        self.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_stamped_with_the_proposers_clock() -> io::Result<()> {
    const GROUP: u64 = 11;
    let mut cluster = Cluster::start(&[1, 2, 3], &[GROUP]).await?;
    cluster.initialize(GROUP, 1).await?;
    cluster.write(GROUP, vec![create_show(SHOW, 8), open_sales(SHOW)]).await?;
    let leader = cluster.leader(GROUP).await?;
    // A day ahead of every real stamp so far: log time must become exactly this.
    let skewed = crate::harness::now_ms() + 24 * 60 * 60 * 1_000;
    let clock = raft::Clock::new(FixedClock(skewed));
    let proposer =
        Proposer::with_clock(cluster.raft(leader, GROUP)?, ProposerConfig::default(), clock);
    assert_eq!(proposer.clock().now_ms(), skewed);
    assert_held(&proposer.propose(hold(SHOW, 1, 1, 3)).await, 3);
    cluster.wait_converged(GROUP).await?;
    for node in [1, 2, 3] {
        let log_time =
            cluster.node(node)?.reader(GROUP)?.read(|group| group.as_of().log_time_ms)?;
        assert_eq!(log_time, skewed, "node {node}");
    }
    cluster.shutdown().await
}
