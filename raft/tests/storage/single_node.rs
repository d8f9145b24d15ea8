//! Our stores under a real `openraft::Raft`: a one-node group answers writes with the outcomes
//! of `Group::apply` (through the apply responders), snapshots, and after a restart from the
//! same directory comes back with the same state (snapshot plus the replayed committed tail).
//! On a simulated disk, the restart follows a crash: every acknowledged write survives it.

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
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Config, RaftNetworkV2};
use raft::{GroupReader, LogId, Proposal, Raft, SimDisk, Snapshot, Storage, TypeConfig, Vote};
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
    start_on(open_when_released(dir).await?).await
}

/// Starts the group on `storage`.
async fn start_on(storage: Storage) -> io::Result<(Raft, GroupReader)> {
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
    Ok(response.data.into_iter().map(|answer| answer.outcome).collect())
}

/// What the group's first life left behind.
struct FirstLife {
    /// The state when it shut down.
    digest: Digest,
    /// The last entry its snapshot covers (the log is purged up to it).
    snapshot: LogId,
    /// The last entry it applied, and acknowledged.
    last_applied: LogId,
}

/// Initializes the group, writes (seat 7 goes to the first of two racing buyers), snapshots and
/// purges, writes more (buyers 3 to 7 hold seats 23 to 27), and shuts down.
async fn first_life(raft: Raft, reader: &GroupReader) -> io::Result<FirstLife> {
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
    let snapshot = reader.last_applied()?.expect("entries were applied");
    raft.wait(WAIT).snapshot(snapshot, "snapshot built").await.map_err(io::Error::other)?;
    raft.wait(WAIT).purged(Some(snapshot), "log purged").await.map_err(io::Error::other)?;

    // Entries after the snapshot: only the committed log (and `save_committed`) has them.
    for buyer in 3..8 {
        let held = write(&raft, buyer, vec![hold(10, buyer, buyer, 20 + buyer as u32)]).await?;
        assert!(matches!(held[..], [Ok(Reply::Held(_))]), "{held:?}");
    }
    let last_applied = reader.last_applied()?.expect("entries were applied");
    let digest = reader.read(|group| group.digest())?;
    raft.shutdown().await.map_err(io::Error::other)?;
    Ok(FirstLife { digest, snapshot, last_applied })
}

/// Seat 7 and seat 27 (held before and after the snapshot) are still held: new buyers are told
/// so.
async fn check_seats_still_held(raft: &Raft) -> io::Result<()> {
    let again = write(raft, 9, vec![hold(10, 9, 9, 7), hold(10, 10, 10, 27)]).await?;
    assert!(
        matches!(
            again[..],
            [Err(Rejection::SeatUnavailable { .. }), Err(Rejection::SeatUnavailable { .. })]
        ),
        "seats 7 and 27 stay held: {again:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_node_group_answers_writes_and_restarts_with_the_same_state() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let first = {
        let (raft, reader) = start(dir.path()).await?;
        first_life(raft, &reader).await?
    };

    // Everything was dropped: the database is closed. Start again from the same directory.
    let (raft, reader) = start(dir.path()).await?;
    assert_eq!(
        reader.last_applied()?,
        Some(first.last_applied),
        "the committed tail is re-applied"
    );
    assert_eq!(reader.read(|group| group.digest())?, first.digest);
    raft.wait(WAIT).current_leader(NODE, "re-elected").await.map_err(io::Error::other)?;
    check_seats_still_held(&raft).await?;
    raft.shutdown().await.map_err(io::Error::other)?;
    Ok(())
}

/// The same life on a simulated disk and a single-threaded runtime, restarted after a crash.
/// Reference: Raft, Figure 2 (persistent state is on stable storage before answering), and
/// openraft's `IOFlushed` contract: a one-node group commits an entry once it is flushed, and a
/// write is acknowledged only after commit, so every acknowledged write must survive even the
/// strictest crash.
#[tokio::test]
async fn a_one_node_group_on_a_simulated_disk_keeps_its_acknowledged_writes_across_a_crash()
-> io::Result<()> {
    // 0 keeps only what was synced; `usize::MAX` keeps everything, as a process kill would.
    for keep_unsynced in [0, usize::MAX] {
        println!("keep_unsynced = {keep_unsynced}");
        let disk = SimDisk::new();
        let (raft, reader) = start_on(Storage::simulated(disk.clone())).await?;
        let first = first_life(raft, &reader).await?;
        let lost = disk.crash(keep_unsynced);
        println!("the crash discarded {lost} unsynced write batches");

        let storage = Storage::simulated(disk);
        let log_state = storage.log_store(GROUP).get_log_state().await?;
        assert!(
            log_state.last_log_id >= Some(first.last_applied),
            "an acknowledged write was lost: the log ends at {:?}, {} was acknowledged",
            log_state.last_log_id,
            first.last_applied
        );
        let (raft, reader) = start_on(storage).await?;
        // The store starts from its snapshot, and start-up re-applies the log as far as the
        // committed log id says; that id is written unsynced, so a crash may take it back.
        let restarted = reader.last_applied()?.expect("the snapshot survived");
        assert!(restarted >= first.snapshot, "{restarted} before the snapshot");
        assert!(restarted <= first.last_applied, "{restarted} after the last write");
        if keep_unsynced == usize::MAX {
            assert_eq!(restarted, first.last_applied, "nothing was lost");
            assert_eq!(reader.read(|group| group.digest())?, first.digest);
        }
        raft.wait(WAIT).current_leader(NODE, "re-elected").await.map_err(io::Error::other)?;
        // The restarted leader commits its whole surviving log, so everything acknowledged
        // before the crash is applied again.
        let acknowledged = Some(first.last_applied.index());
        raft.wait(WAIT)
            .applied_index_at_least(acknowledged, "log tail re-applied")
            .await
            .map_err(io::Error::other)?;
        check_seats_still_held(&raft).await?;
        raft.shutdown().await.map_err(io::Error::other)?;
    }
    Ok(())
}
