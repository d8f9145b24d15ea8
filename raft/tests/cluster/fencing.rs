//! Writes fenced by the committed leader id: a proposal begun under one leader cannot be
//! appended under another, even when leadership comes back to the same node in a later term.
//!
//! Reference: shared/DESIGN.md, "Ordering, acknowledgement and fencing" (openraft's conditional
//! write, `Raft::write(..).with_leader(..)`).

use std::io;

use openraft::alias::CommittedLeaderIdOf;
use openraft::error::ClientWriteError;
use openraft::impls::ProgressResponder;
use openraft::raft::ClientWriteResult;
use raft::{Proposal, Raft, TypeConfig};
use statemachine::{Command, Reply};

use crate::commands::{create_show, hold, open_sales};
use crate::harness::{Cluster, WAIT, now_ms};

const GROUP: u64 = 7;
const SHOW: u64 = 70;

/// Proposes `commands` on `raft` only if its committed leader is still `leader`, and returns
/// what the write answered.
async fn fenced_write(
    raft: &Raft,
    leader: CommittedLeaderIdOf<TypeConfig>,
    commands: Vec<Command>,
) -> io::Result<ClientWriteResult<TypeConfig>> {
    let (responder, receiver) = ProgressResponder::complete_only();
    let proposal = Proposal { time_ms: now_ms(), commands };
    raft.write(proposal)
        .with_leader(leader)
        .responder(responder)
        .await
        .map_err(io::Error::other)?;
    receiver.await.map_err(io::Error::other)
}

/// As [`fenced_write`], again while the leader refuses without naming another leader (a
/// leader that just took over refuses writes until a quorum has renewed its lease; on a loaded
/// machine that can take a while), until [`WAIT`].
async fn fenced_write_once_leading(
    raft: &Raft,
    leader: CommittedLeaderIdOf<TypeConfig>,
    commands: Vec<Command>,
) -> io::Result<ClientWriteResult<TypeConfig>> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let result = fenced_write(raft, leader, commands.clone()).await?;
        let settling = matches!(
            &result,
            Err(ClientWriteError::ForwardToLeader(forward)) if forward.leader_id.is_none()
        );
        if !settling || tokio::time::Instant::now() >= deadline {
            return Ok(result);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn is_held(result: &ClientWriteResult<TypeConfig>) -> bool {
    matches!(result, Ok(response) if matches!(response.data[..], [statemachine::Answer { outcome: Ok(Reply::Held(_)), .. }]))
}

fn is_fenced(result: &ClientWriteResult<TypeConfig>) -> bool {
    matches!(result, Err(ClientWriteError::ForwardToLeader(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_fenced_by_an_earlier_leader_is_never_appended() -> io::Result<()> {
    let mut cluster = Cluster::start(&[1, 2, 3], &[GROUP]).await?;
    cluster.initialize(GROUP, 1).await?;
    let first = cluster.leader(GROUP).await?;
    cluster.write(GROUP, vec![create_show(SHOW, 50), open_sales(SHOW)]).await?;
    let first_raft = cluster.raft(first, GROUP)?;
    let first_leader_id =
        first_raft.as_leader().map_err(io::Error::other)?.to_committed_leader_id();

    // Under the leader it names, the write goes through.
    let accepted = fenced_write(&first_raft, first_leader_id, vec![hold(SHOW, 1, 1, 1)]).await?;
    assert!(is_held(&accepted), "{accepted:?}");

    // Leadership moves to another node: the write begun under the first leader is refused there.
    let second = cluster.nodes.keys().copied().find(|&id| id != first).unwrap_or(first);
    first_raft.trigger().transfer_leader(second).await.map_err(io::Error::other)?;
    cluster.wait_leader_is(GROUP, second).await?;
    let second_raft = cluster.raft(second, GROUP)?;
    let stale = fenced_write(&second_raft, first_leader_id, vec![hold(SHOW, 2, 2, 2)]).await?;
    assert!(is_fenced(&stale), "{stale:?}");

    // Leadership comes back to the first node in a later term: the same node refuses it too.
    second_raft.trigger().transfer_leader(first).await.map_err(io::Error::other)?;
    cluster.wait_leader_is(GROUP, first).await?;
    let current_leader_id =
        first_raft.as_leader().map_err(io::Error::other)?.to_committed_leader_id();
    assert_ne!(current_leader_id, first_leader_id, "a new term");
    let stale = fenced_write(&first_raft, first_leader_id, vec![hold(SHOW, 3, 3, 2)]).await?;
    assert!(is_fenced(&stale), "{stale:?}");

    // Neither refused write was appended: seat 2 is still free for a write under the current
    // leader, and every replica agrees.
    let fresh =
        fenced_write_once_leading(&first_raft, current_leader_id, vec![hold(SHOW, 4, 4, 2)])
            .await?;
    assert!(is_held(&fresh), "{fresh:?}");
    cluster.wait_converged(GROUP).await?;
    cluster.shutdown().await
}
