//! Data that is not what was written is never served: RocksDB's checksums find a flipped bit,
//! and the storage refuses to open or stops, rather than carry on without what the bad record
//! held (issue 20, part 3). A torn last record of the WAL, which is what a crash leaves of a
//! write it had not synced, is still dropped quietly, with everything before it kept.
//!
//! The databases are written by a child process that aborts with them open (as `kill -9`
//! would), so the newest writes are still in the WAL, not in table files.

use std::io;
use std::path::{Path, PathBuf};

use openraft::RaftLogReader;
use openraft::storage::RaftLogStorage;
use raft::{Storage, StoreError};

use crate::common::{
    abort_child, append, booking_log, child_dir, entries, log_id, run_aborting_child, slice, vote,
};
use crate::durability::{COMMITTED_AT, GROUP, LAST_INDEX, write_scenario};

/// The last index the child appends after the snapshot.
const LATER_INDEX: u64 = 40;
/// The committed index the child saves last, without a sync.
const LATER_COMMITTED_AT: u64 = 30;

/// The directory the child writes into; set only in the child.
const CHILD_DIR: &str = "RAFT_TEST_CORRUPTION_WRITER_DIR";

/// Run in a child process by [`killed_writer`]: writes the durability scenario (whose snapshot
/// flushes and starts a new WAL) into `$CHILD_DIR/db`, then, into that WAL, entries up to
/// `LATER_INDEX` and a vote for term 3, each synced, and last the committed id
/// `LATER_COMMITTED_AT`, not synced (as the log store saves it); aborts with the database
/// open. On its own (without the variable) it does nothing.
#[tokio::test]
async fn corruption_writer_child() -> io::Result<()> {
    let Some(dir) = child_dir(CHILD_DIR) else {
        return Ok(());
    };
    let (_written, storage) = write_scenario(&dir.join("db")).await?;
    let mut log_store = storage.log_store(GROUP);
    let later = slice(&booking_log(2, LATER_INDEX), LAST_INDEX + 1..=LATER_INDEX);
    append(&mut log_store, later).await?;
    log_store.save_vote(&vote(3)).await?;
    log_store.save_committed(Some(log_id(2, LATER_COMMITTED_AT))).await?;
    abort_child(&dir);
}

/// Runs [`corruption_writer_child`] and returns the directory holding its database (`db`).
fn killed_writer() -> io::Result<tempfile::TempDir> {
    run_aborting_child("corruption::corruption_writer_child", CHILD_DIR)
}

/// The files of `db` whose names end in `.{extension}`, in name order (RocksDB numbers them in
/// the order it made them).
fn files(db: &Path, extension: &str) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(db)? {
        let path = entry?.path();
        if path.extension().is_some_and(|found| found == extension) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// The WAL the newest writes went to.
fn newest_wal(db: &Path) -> io::Result<PathBuf> {
    let wals = files(db, "log")?;
    Ok(wals.last().cloned().expect("the database has a WAL"))
}

/// Flips one bit of the byte at `at` in `file`.
fn flip(file: &Path, at: usize) -> io::Result<()> {
    let mut bytes = std::fs::read(file)?;
    assert!(at < bytes.len(), "{} has {} bytes", file.display(), bytes.len());
    bytes[at] ^= 0x10;
    std::fs::write(file, bytes)
}

#[tokio::test]
async fn the_killed_writers_database_opens_with_everything_it_wrote() -> io::Result<()> {
    // The control for the tests below: untouched, the database holds every write, the unsynced
    // committed id too (the operating system kept it).
    let dir = killed_writer()?;
    let storage = Storage::open(dir.path().join("db"))?;
    let mut log_store = storage.log_store(GROUP);
    assert_eq!(entries(&mut log_store).await?, booking_log(2, LATER_INDEX));
    assert_eq!(log_store.read_vote().await?, Some(vote(3)));
    assert_eq!(log_store.read_committed().await?, Some(log_id(2, LATER_COMMITTED_AT)));
    assert_eq!(storage.failed(), None);
    Ok(())
}

#[tokio::test]
async fn a_flipped_bit_before_the_end_of_the_wal_refuses_the_open_rather_than_drop_what_follows()
-> io::Result<()> {
    let dir = killed_writer()?;
    let db = dir.path().join("db");
    let wal = newest_wal(&db)?;
    // A third of the way in is inside the record of the appended entries, which the vote and
    // the committed id follow.
    let length = usize::try_from(std::fs::metadata(&wal)?.len()).expect("a small file");
    flip(&wal, length / 3)?;
    match Storage::open(&db) {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains("readmit"), "the error says what to do: {message}");
            Ok(())
        }
        Err(other) => panic!("the flipped bit is not reported as corruption: {other}"),
        Ok(storage) => {
            // What RocksDB's `PointInTime` recovery did: open at the bad record, without it and
            // without the synced writes after it.
            let mut log_store = storage.log_store(GROUP);
            let last = log_store.get_log_state().await?.last_log_id;
            let voted = log_store.read_vote().await?;
            panic!(
                "opened a WAL with a flipped bit: the log ends at {last:?} (written to \
                 {LATER_INDEX}), the vote is {voted:?} (written: term 3)"
            )
        }
    }
}

#[tokio::test]
async fn a_torn_last_record_of_the_wal_is_dropped_and_everything_before_it_kept() -> io::Result<()>
{
    let dir = killed_writer()?;
    let db = dir.path().join("db");
    let wal = newest_wal(&db)?;
    // The last record is the committed id, never synced: a crash may leave part of it.
    let length = std::fs::metadata(&wal)?.len();
    std::fs::OpenOptions::new().write(true).open(&wal)?.set_len(length - 3)?;
    let storage = Storage::open(&db)?;
    let mut log_store = storage.log_store(GROUP);
    assert_eq!(entries(&mut log_store).await?, booking_log(2, LATER_INDEX));
    assert_eq!(log_store.read_vote().await?, Some(vote(3)));
    assert_eq!(
        log_store.read_committed().await?,
        Some(log_id(2, COMMITTED_AT)),
        "the torn write is gone, the one before it is there"
    );
    assert_eq!(storage.failed(), None);
    Ok(())
}

#[tokio::test]
async fn a_flipped_bit_in_a_table_file_fails_the_read_and_stops_the_storage() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_written, storage) = write_scenario(dir.path()).await?;
    // A clean close writes every memtable to a table file.
    drop(storage);
    let tables = files(dir.path(), "sst")?;
    assert!(!tables.is_empty(), "the close wrote table files");
    // A table file starts with its data blocks: byte 50 is in the first key or value.
    for table in &tables {
        flip(table, 50)?;
    }
    let storage = Storage::open(dir.path())?;
    assert_eq!(storage.failed(), None, "nothing was read yet");
    let mut log_store = storage.log_store(GROUP);
    let read = log_store.try_get_log_entries(0..).await;
    assert!(read.is_err(), "the log reads back despite a flipped bit: {read:?}");
    let restored = storage.state_machine(GROUP).map(|_| ());
    assert!(restored.is_err(), "the snapshot restores despite a flipped bit");
    let failure = storage.failed().expect("a corrupt read is the storage's failure");
    assert!(failure.contains("readmit"), "the failure says what to do: {failure}");
    // Fail-stop: nothing more is written.
    let refused = log_store.save_vote(&vote(3)).await;
    assert!(refused.is_err(), "a write after the failure was taken");
    Ok(())
}
