//! What a group wrote is there after the database is reopened: after a clean close, and after the
//! process is killed without any clean-up (shared/DESIGN.md, "Storage": restart loads the
//! snapshot and replays the log tail).

use std::io;
use std::path::Path;

use openraft::StorageHelper;
use openraft::storage::{RaftLogStorage, RaftStateMachine};
use openraft::{RaftLogReader, RaftSnapshotBuilder};
use raft::{Entry, GroupId, Storage};
use statemachine::Digest;

use crate::common::{
    abort_child, append, booking_log, child_dir, entries, log_id, run_aborting_child, slice,
    to_apply, vote,
};

pub const GROUP: GroupId = 3;
/// The last index written.
pub const LAST_INDEX: u64 = 20;
/// The snapshot covers entries up to here.
const SNAPSHOT_AT: u64 = 12;
/// Entries up to here are committed (and applied before the restart).
pub const COMMITTED_AT: u64 = 15;

/// The digests a writer saw: at the snapshot, and after applying every committed entry.
pub struct Written {
    log: Vec<Entry>,
    at_snapshot: Digest,
    at_committed: Digest,
}

/// Writes the scenario every test here restarts from: the log, a vote, the committed log id, and
/// a snapshot at `SNAPSHOT_AT` with entries applied up to `COMMITTED_AT`. Returns the storage
/// still open: dropping it closes the database cleanly, which a killed process never does.
pub async fn write_scenario(dir: &Path) -> io::Result<(Written, Storage)> {
    let storage = Storage::open(dir)?;
    let mut log_store = storage.log_store(GROUP);
    let mut state_machine = storage.state_machine(GROUP)?;
    let log = booking_log(2, LAST_INDEX);

    append(&mut log_store, log.clone()).await?;
    let syncs_before_vote = storage.wal_sync_count();
    log_store.save_vote(&vote(2)).await?;
    assert!(storage.wal_sync_count() > syncs_before_vote, "a vote is synced before it returns");
    log_store.save_committed(Some(log_id(2, COMMITTED_AT))).await?;

    let reader = state_machine.reader();
    state_machine.apply(to_apply(slice(&log, 0..=SNAPSHOT_AT))).await?;
    let snapshot = state_machine.get_snapshot_builder().await.build_snapshot().await?;
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(2, SNAPSHOT_AT)));
    let at_snapshot = reader.read(|group| group.digest())?;
    state_machine.apply(to_apply(slice(&log, SNAPSHOT_AT + 1..=COMMITTED_AT))).await?;
    let at_committed = reader.read(|group| group.digest())?;
    assert_ne!(at_snapshot, at_committed, "the tail changes the state");
    Ok((Written { log, at_snapshot, at_committed }, storage))
}

/// Reopens the database and checks everything `write_scenario` wrote, then runs openraft's
/// start-up (which must re-apply the committed tail after the snapshot).
async fn check_reopened(dir: &Path, written: &Written) -> io::Result<()> {
    let storage = Storage::open(dir)?;
    let mut log_store = storage.log_store(GROUP);
    let mut state_machine = storage.state_machine(GROUP)?;

    assert_eq!(entries(&mut log_store).await?, written.log);
    assert_eq!(log_store.read_vote().await?, Some(vote(2)));
    assert_eq!(log_store.read_committed().await?, Some(log_id(2, COMMITTED_AT)));
    let state = log_store.get_log_state().await?;
    assert_eq!(state.last_log_id, Some(log_id(2, LAST_INDEX)));

    // The store reopens at its snapshot: it claims only what was persisted.
    let (applied, membership) = state_machine.applied_state().await?;
    assert_eq!(applied, Some(log_id(2, SNAPSHOT_AT)));
    assert_eq!(membership.log_id(), &Some(log_id(2, 0)));
    let snapshot = state_machine.get_current_snapshot().await?.expect("snapshot persisted");
    assert_eq!(snapshot.meta.last_log_id, Some(log_id(2, SNAPSHOT_AT)));
    let reader = state_machine.reader();
    assert_eq!(reader.read(|group| group.digest())?, written.at_snapshot);

    // openraft's start-up re-applies the committed entries after the snapshot.
    let initial =
        StorageHelper::new(&mut log_store, &mut state_machine).with_id(1).get_initial_state().await;
    let initial = initial.map_err(io::Error::other)?;
    assert_eq!(initial.local_committed(), Some(&log_id(2, COMMITTED_AT)));
    assert_eq!(reader.last_applied()?, Some(log_id(2, COMMITTED_AT)));
    assert_eq!(reader.read(|group| group.digest())?, written.at_committed);
    Ok(())
}

#[tokio::test]
async fn a_reopened_database_has_the_log_vote_committed_and_snapshot() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let (written, storage) = write_scenario(dir.path()).await?;
    // The last handle: the database closes and releases its lock.
    drop(storage);
    check_reopened(dir.path(), &written).await
}

/// The directory the killed child writes into; set only in the child.
const CHILD_DIR: &str = "RAFT_TEST_KILLED_WRITER_DIR";

/// Run by `a_killed_writer_loses_nothing_it_was_told_was_durable` in a child process: writes
/// the scenario into `$CHILD_DIR/db` and aborts without closing anything. On its own (without
/// the variable) it does nothing.
#[tokio::test]
async fn killed_writer_child() -> io::Result<()> {
    let Some(dir) = child_dir(CHILD_DIR) else {
        return Ok(());
    };
    let (_written, _open) = write_scenario(&dir.join("db")).await?;
    abort_child(&dir);
}

#[tokio::test]
async fn a_killed_writer_loses_nothing_it_was_told_was_durable() -> io::Result<()> {
    let dir = run_aborting_child("durability::killed_writer_child", CHILD_DIR)?;

    // Whatever the child was told was durable must be there: compute what it computed (the
    // apply is deterministic) and compare.
    let reference = tempfile::tempdir()?;
    let (written, _reference) = write_scenario(reference.path()).await?;
    check_reopened(&dir.path().join("db"), &written).await
}
