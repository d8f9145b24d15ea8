//! Our stores under a real `openraft::Raft`: a one-node group answers writes with the outcomes
//! of `Group::apply` (through the apply responders), snapshots, and after a restart from the
//! same directory comes back with the same state (snapshot plus the replayed committed tail).

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse};
use openraft::raft::{VoteRequest, VoteResponse};
use openraft::{BasicNode, Config, RaftNetworkV2};
use raft::{GroupReader, Proposal, Raft, Snapshot, Storage, TypeConfig, Vote};
use statemachine::{Command, Digest, Rejection, Reply};

use crate::common::{START_MS, create_show, hold, open_sales};

const GROUP: u64 = 5;
const NODE: u64 = 1;
const WAIT: Option<Duration> = Some(Duration::from_secs(10));

/// The network of a one-node group: there is nobody to talk to.
struct NoPeers;

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;

    async fn new_client(&mut self, _target: u64, _node: &BasicNode) -> NoPeers {
        NoPeers
    }
}

fn unreachable() -> Unreachable<TypeConfig> {
    Unreachable::from_string("a one-node group has no peers")
}

impl RaftNetworkV2<TypeConfig> for NoPeers {
    type SnapshotData = raft::SnapshotData;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(unreachable()))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        Err(RPCError::Unreachable(unreachable()))
    }

    async fn full_snapshot(
        &mut self,
        _vote: Vote,
        _snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        Err(StreamingError::Unreachable(unreachable()))
    }
}

/// Opens the database in `dir`, waiting (at most `WAIT`) for a previous instance to close it:
/// `Raft::shutdown` returns before openraft's state-machine task has dropped its store, and the
/// database stays locked until the last store is dropped.
async fn open_when_released(dir: &Path) -> io::Result<Storage> {
    let deadline = tokio::time::Instant::now() + WAIT.unwrap_or_default();
    loop {
        match Storage::open(dir) {
            Ok(storage) => return Ok(storage),
            Err(error) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(%error, "database still open, retrying");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Starts the group on the database in `dir`.
async fn start(dir: &Path) -> io::Result<(Raft, GroupReader)> {
    let storage = open_when_released(dir).await?;
    let state_machine = storage.state_machine(GROUP)?;
    let reader = state_machine.reader();
    // Purge the log up to each snapshot at once, so a restart must start from the snapshot.
    let config = Config {
        cluster_name: "single-node-test".to_owned(),
        max_in_snapshot_log_to_keep: 0,
        ..Config::default()
    };
    let config = Arc::new(config.validate().map_err(io::Error::other)?);
    let raft = Raft::new(NODE, config, NoPeers, storage.log_store(GROUP), state_machine)
        .await
        .map_err(io::Error::other)?;
    Ok((raft, reader))
}

async fn write(
    raft: &Raft,
    index: u64,
    commands: Vec<Command>,
) -> io::Result<Vec<statemachine::Outcome>> {
    let proposal = Proposal { time_ms: START_MS + index * 1000, commands };
    let response = raft.client_write(proposal).await.map_err(io::Error::other)?;
    Ok(response.data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_node_group_answers_writes_and_restarts_with_the_same_state() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let (before, last_applied) = {
        let (raft, reader) = start(dir.path()).await?;
        raft.initialize(BTreeMap::from([(NODE, BasicNode::new("in-process"))]))
            .await
            .map_err(io::Error::other)?;
        raft.wait(WAIT).current_leader(NODE, "elected").await.map_err(io::Error::other)?;

        let created = write(&raft, 1, vec![create_show(10, 100), open_sales(10)]).await?;
        assert!(matches!(created[..], [Ok(Reply::ShowCreated { .. }), Ok(_)]), "{created:?}");
        // Two buyers race for seat 7 in one entry: the first wins, the second is told why.
        let raced = write(&raft, 2, vec![hold(10, 1, 1, 7), hold(10, 2, 2, 7)]).await?;
        assert!(
            matches!(raced[..], [Ok(Reply::Held(_)), Err(Rejection::SeatUnavailable { .. })]),
            "{raced:?}"
        );

        raft.trigger().snapshot().await.map_err(io::Error::other)?;
        let applied = reader.last_applied()?.expect("entries were applied");
        raft.wait(WAIT).snapshot(applied, "snapshot built").await.map_err(io::Error::other)?;
        raft.wait(WAIT).purged(Some(applied), "log purged").await.map_err(io::Error::other)?;

        // Entries after the snapshot: only the committed log (and `save_committed`) has them.
        for buyer in 3..8 {
            let held = write(&raft, buyer, vec![hold(10, buyer, buyer, 20 + buyer as u32)]).await?;
            assert!(matches!(held[..], [Ok(Reply::Held(_))]), "{held:?}");
        }
        let last_applied = reader.last_applied()?;
        let digest: Digest = reader.read(|group| group.digest())?;
        raft.shutdown().await.map_err(io::Error::other)?;
        (digest, last_applied)
    };

    // Everything was dropped: the database is closed. Start again from the same directory.
    let (raft, reader) = start(dir.path()).await?;
    assert_eq!(reader.last_applied()?, last_applied, "the committed tail is re-applied");
    assert_eq!(reader.read(|group| group.digest())?, before);
    raft.wait(WAIT).current_leader(NODE, "re-elected").await.map_err(io::Error::other)?;
    let again = write(&raft, 9, vec![hold(10, 9, 9, 7)]).await?;
    assert!(
        matches!(again[..], [Err(Rejection::SeatUnavailable { .. })]),
        "seat 7 stays held: {again:?}"
    );
    raft.shutdown().await.map_err(io::Error::other)?;
    Ok(())
}
