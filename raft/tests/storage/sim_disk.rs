//! The simulated disk's crash model under our stores (issue 7, "Storage under simulation"): what
//! a store reported durable survives a crash, what it did not is lost or survives as a prefix in
//! write order, recovery makes what is on the disk durable, a storage from before a crash can no
//! longer touch the disk, and the flush task needs no thread and shares its syncs.
//!
//! Every test runs on a single-threaded runtime, as the simulator does: the flush task runs only
//! when the test awaits, so a test decides exactly which writes a crash finds unsynced.

use std::future::Future;
use std::io;

use openraft::storage::{IOFlushed, RaftLogStorage, RaftStateMachine};
use openraft::type_config::TypeConfigExt;
use openraft::{RaftLogReader, RaftSnapshotBuilder};
use raft::{BookingRuntime, Entry, GroupId, LogStore, SimDisk, Storage, TypeConfig};

use crate::common::{append, blank, booking_log, entries, indexes, log_id, slice, to_apply, vote};

const GROUP: GroupId = 4;

/// Appends `entries` and returns, without waiting for it, what its flush callback will say. On
/// a single-threaded runtime the flush task cannot run before the caller awaits something.
async fn append_unflushed(
    store: &mut LogStore,
    new_entries: Vec<Entry>,
) -> io::Result<impl Future<Output = io::Result<()>> + use<>> {
    let (sender, receiver) = TypeConfig::oneshot();
    store.append(new_entries, IOFlushed::signal(sender)).await?;
    Ok(async move { receiver.await.map_err(io::Error::other)? })
}

#[tokio::test]
async fn flushed_appends_survive_a_crash_and_unflushed_ones_are_lost() -> io::Result<()> {
    let disk = SimDisk::new();
    let storage = Storage::simulated(disk.clone());
    let mut store = storage.log_store(GROUP);
    let log = booking_log(1, 8);

    append(&mut store, slice(&log, 0..=5)).await?;
    assert_eq!(disk.unsynced_batches(), 0, "a reported flush synced the disk");
    let flushed = append_unflushed(&mut store, slice(&log, 6..=8)).await?;
    assert_eq!(indexes(&mut store).await?, (0..=8).collect::<Vec<_>>(), "readable at once");
    assert_eq!(disk.unsynced_batches(), 1);

    assert_eq!(disk.crash(0), 1, "the unflushed append is discarded");
    assert!(flushed.await.is_err(), "a write a crash took back is never reported durable");

    let mut store = Storage::simulated(disk.clone()).log_store(GROUP);
    assert_eq!(entries(&mut store).await?, slice(&log, 0..=5));
    assert_eq!(store.get_log_state().await?.last_log_id, Some(log_id(1, 5)));
    Ok(())
}

#[tokio::test]
async fn a_sync_latency_leaves_a_window_in_which_a_crash_loses_the_write() -> io::Result<()> {
    let disk = SimDisk::new();
    disk.set_sync_latency(std::time::Duration::from_secs(2));
    let storage = Storage::simulated(disk.clone());
    let mut store = storage.log_store(GROUP);
    let log = booking_log(1, 3);
    let flushed = append_unflushed(&mut store, slice(&log, 0..=3)).await?;
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    assert_eq!(disk.unsynced_batches(), 1, "the sync waits out the latency");
    flushed.await?;
    assert_eq!(disk.unsynced_batches(), 0, "and then makes the append durable");
    assert_eq!(disk.crash(0), 0);
    Ok(())
}

/// RocksDB's `PointInTime` recovery replays a prefix of the WAL: a crash keeps the first
/// `keep_unsynced` unsynced batches in write order and never a later one without an earlier.
#[tokio::test]
async fn a_crash_keeps_a_prefix_of_the_unflushed_appends_in_write_order() -> io::Result<()> {
    const UNFLUSHED: u64 = 3;
    for keep_unsynced in 0..=UNFLUSHED + 1 {
        let disk = SimDisk::new();
        let mut store = Storage::simulated(disk.clone()).log_store(GROUP);
        append(&mut store, (1..=2).map(|index| blank(1, index)).collect()).await?;
        let mut flushes = Vec::new();
        for index in 3..3 + UNFLUSHED {
            flushes.push(append_unflushed(&mut store, vec![blank(1, index)]).await?);
        }

        let kept = UNFLUSHED.min(keep_unsynced);
        let lost = disk.crash(usize::try_from(keep_unsynced).expect("small"));
        assert_eq!(lost as u64, UNFLUSHED - kept, "keep {keep_unsynced}");
        for flush in flushes {
            assert!(flush.await.is_err(), "no sync ran, so no append is reported durable");
        }

        let mut store = Storage::simulated(disk).log_store(GROUP);
        let expected: Vec<u64> = (1..=2 + kept).collect();
        assert_eq!(indexes(&mut store).await?, expected, "keep {keep_unsynced}");
    }
    Ok(())
}

#[tokio::test]
async fn a_saved_vote_survives_a_crash_and_an_unsynced_committed_id_may_not() -> io::Result<()> {
    let disk = SimDisk::new();
    let mut store = Storage::simulated(disk.clone()).log_store(GROUP);
    append(&mut store, (1..=3).map(|index| blank(2, index)).collect()).await?;
    store.save_vote(&vote(2)).await?;
    assert_eq!(disk.unsynced_batches(), 0, "a vote is durable before `save_vote` returns");
    // `save_committed` is not synced (see log_store.rs): losing it only re-applies less.
    store.save_committed(Some(log_id(2, 3))).await?;
    assert_eq!(store.read_committed().await?, Some(log_id(2, 3)), "readable at once");

    assert_eq!(disk.crash(0), 1);
    let mut store = Storage::simulated(disk.clone()).log_store(GROUP);
    assert_eq!(store.read_vote().await?, Some(vote(2)));
    assert_eq!(store.read_committed().await?, None);
    assert_eq!(indexes(&mut store).await?, vec![1, 2, 3]);

    // A second vote overwrites the first durably, and survives a crash too.
    store.save_vote(&vote(3)).await?;
    disk.crash(0);
    let mut store = Storage::simulated(disk).log_store(GROUP);
    assert_eq!(store.read_vote().await?, Some(vote(3)));
    Ok(())
}

/// Reference: openraft #511 (a committed entry lost after purge). A snapshot is synced before
/// openraft learns of it, so the log it covers can be purged and a crash loses neither.
#[tokio::test]
async fn a_snapshot_persisted_before_a_purge_survives_a_crash() -> io::Result<()> {
    let disk = SimDisk::new();
    let storage = Storage::simulated(disk.clone());
    let mut log_store = storage.log_store(GROUP);
    let mut state_machine = storage.state_machine(GROUP)?;
    let log = booking_log(1, 14);
    append(&mut log_store, log.clone()).await?;
    state_machine.apply(to_apply(slice(&log, 0..=10))).await?;
    let built = state_machine.get_snapshot_builder().await.build_snapshot().await?;
    assert_eq!(built.meta.last_log_id, Some(log_id(1, 10)));
    let at_snapshot = state_machine.reader().read(|group| group.digest())?;
    log_store.purge(log_id(1, 10)).await?;
    log_store.truncate_after(Some(log_id(1, 12))).await?;
    assert_eq!(disk.unsynced_batches(), 0, "purge and truncation are durable when they return");

    assert_eq!(disk.crash(0), 0);
    let storage = Storage::simulated(disk);
    let mut log_store = storage.log_store(GROUP);
    let mut state_machine = storage.state_machine(GROUP)?;
    let (applied, _) = state_machine.applied_state().await?;
    assert_eq!(applied, Some(log_id(1, 10)));
    assert_eq!(state_machine.reader().read(|group| group.digest())?, at_snapshot);
    let current = state_machine.get_current_snapshot().await?.expect("the snapshot survived");
    assert_eq!(current.meta, built.meta);
    assert_eq!(current.snapshot, built.snapshot);
    let state = log_store.get_log_state().await?;
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 10)));
    assert_eq!(state.last_log_id, Some(log_id(1, 12)));
    assert_eq!(entries(&mut log_store).await?, slice(&log, 11..=12));
    Ok(())
}

/// A snapshot is made durable beside the log rather than by the log's sync: persisting one
/// neither syncs appends written before it (which would make them wait for its bytes) nor needs
/// them, so a crash right after it keeps the snapshot and loses the unsynced appends.
#[tokio::test]
async fn a_snapshot_is_durable_without_syncing_the_log() -> io::Result<()> {
    // In a seed scope the snapshot's work runs inline, as under the simulator, so the flush task
    // of the unsynced append cannot run before the test crashes the disk.
    BookingRuntime::scope(1, async {
        let disk = SimDisk::new();
        let storage = Storage::simulated(disk.clone());
        let mut log_store = storage.log_store(GROUP);
        let mut state_machine = storage.state_machine(GROUP)?;
        let log = booking_log(1, 12);
        append(&mut log_store, slice(&log, 0..=10)).await?;
        state_machine.apply(to_apply(slice(&log, 0..=10))).await?;
        let flushed = append_unflushed(&mut log_store, slice(&log, 11..=12)).await?;
        let syncs = storage.wal_sync_count();
        let built = state_machine.get_snapshot_builder().await.build_snapshot().await?;
        assert_eq!(built.meta.last_log_id, Some(log_id(1, 10)));
        assert_eq!(storage.wal_sync_count(), syncs, "the snapshot synced no log");
        assert_eq!(disk.unsynced_batches(), 1, "the append is still unsynced");

        assert_eq!(disk.crash(0), 1);
        assert!(flushed.await.is_err(), "the lost append is never reported durable");
        let storage = Storage::simulated(disk);
        let mut log_store = storage.log_store(GROUP);
        let mut state_machine = storage.state_machine(GROUP)?;
        let current = state_machine.get_current_snapshot().await?.expect("the snapshot survived");
        assert_eq!(current.meta, built.meta);
        assert_eq!(current.snapshot, built.snapshot);
        assert_eq!(entries(&mut log_store).await?, slice(&log, 0..=10));
        Ok(())
    })
    .await
}

/// A process that exits without a power loss leaves its writes in the operating system's cache,
/// and RocksDB's recovery flushes what it replays: a later crash cannot take them back.
#[tokio::test]
async fn reopening_keeps_unflushed_writes_and_makes_them_durable() -> io::Result<()> {
    let disk = SimDisk::new();
    let mut store = Storage::simulated(disk.clone()).log_store(GROUP);
    let flushed = append_unflushed(&mut store, (1..=4).map(|index| blank(1, index)).collect());
    let flushed = flushed.await?;
    drop(store);

    let mut store = Storage::simulated(disk.clone()).log_store(GROUP);
    assert_eq!(disk.unsynced_batches(), 0, "recovery made the disk durable");
    assert!(flushed.await.is_err(), "the old process's flush never ran, so it never said yes");
    disk.crash(0);
    assert_eq!(indexes(&mut store).await.ok(), None, "a crash fences the running storage");
    let mut store = Storage::simulated(disk).log_store(GROUP);
    assert_eq!(indexes(&mut store).await?, vec![1, 2, 3, 4]);
    Ok(())
}

#[tokio::test]
async fn a_storage_from_before_a_crash_can_no_longer_touch_the_disk() -> io::Result<()> {
    let disk = SimDisk::new();
    let old = Storage::simulated(disk.clone());
    let mut old_store = old.log_store(GROUP);
    append(&mut old_store, vec![blank(1, 1)]).await?;
    disk.crash(0);

    let (sender, _receiver) = TypeConfig::oneshot();
    let appended = old_store.append([blank(1, 2)], IOFlushed::signal(sender)).await;
    assert!(appended.is_err(), "a dead process cannot write");
    assert!(old_store.save_vote(&vote(1)).await.is_err());
    assert!(old_store.read_vote().await.is_err(), "nor read");
    assert!(old.state_machine(GROUP).is_err());

    let mut store = Storage::simulated(disk.clone()).log_store(GROUP);
    assert_eq!(indexes(&mut store).await?, vec![1]);
    assert_eq!(store.read_vote().await?, None);
    // Opening a newer storage fences the older one the same way, without a crash.
    assert!(indexes(&mut old_store).await.is_err());
    Ok(())
}

/// The flush task runs on the caller's runtime. A runtime shut down before it ran (the simulated
/// process is gone) fails the callbacks instead of dropping them, and syncs nothing.
#[test]
fn a_flush_dropped_with_its_runtime_fails_its_callbacks_and_syncs_nothing() -> io::Result<()> {
    let disk = SimDisk::new();
    let storage = Storage::simulated(disk.clone());
    let dying = tokio::runtime::Builder::new_current_thread().build()?;
    let flushed = dying.block_on(async {
        let mut store = storage.log_store(GROUP);
        append_unflushed(&mut store, vec![blank(1, 1)]).await
    })?;
    drop(dying);
    assert_eq!(disk.unsynced_batches(), 1, "the dying runtime synced nothing");

    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    assert!(runtime.block_on(flushed).is_err(), "the callback heard that no sync ran");
    // The storage itself still works on a runtime that runs its flush tasks.
    runtime.block_on(async {
        let mut store = storage.log_store(GROUP);
        append(&mut store, vec![blank(1, 2)]).await
    })?;
    assert_eq!(disk.unsynced_batches(), 0);
    Ok(())
}

/// Reference: shared/DESIGN.md, "Storage" (one flusher completes many groups' appends with one
/// sync). Every group pipelines its appends, as an openraft follower does.
#[tokio::test]
async fn pipelined_appends_of_many_groups_share_simulated_syncs() -> io::Result<()> {
    const GROUPS: u64 = 8;
    const APPENDS_PER_GROUP: u64 = 100;
    let storage = Storage::simulated(SimDisk::new());

    let mut tasks = Vec::new();
    for group in 0..GROUPS {
        let mut store = storage.log_store(group);
        tasks.push(tokio::spawn(async move {
            let mut flushes = Vec::new();
            for index in 1..=APPENDS_PER_GROUP {
                flushes.push(append_unflushed(&mut store, vec![blank(1, index)]).await?);
            }
            for flush in flushes {
                flush.await?;
            }
            io::Result::Ok(store)
        }));
    }
    for task in tasks {
        let mut store = task.await.map_err(io::Error::other)??;
        assert_eq!(indexes(&mut store).await?, (1..=APPENDS_PER_GROUP).collect::<Vec<_>>());
    }

    let appends = GROUPS * APPENDS_PER_GROUP;
    let syncs = storage.wal_sync_count();
    println!("{appends} pipelined appends from {GROUPS} groups completed by {syncs} syncs");
    assert!(syncs >= 1);
    assert!(syncs < appends, "{syncs} syncs for {appends} appends");
    assert_eq!(storage.flush_completed_count(), appends);
    Ok(())
}
