//! Helpers shared by the storage tests: log ids, entries with real booking commands, an append
//! that waits for its flush callback the way openraft does, and running one check on each
//! storage backend.

use std::collections::BTreeSet;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};

use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, IOFlushed, RaftLogStorage};
use openraft::type_config::TypeConfigExt;
use openraft::vote::RaftLeaderIdExt;
use openraft::{Membership, RaftLogReader};
use raft::{Entry, LogId, LogStore, Node, Proposal, SimDisk, Storage, TypeConfig, Vote};
use statemachine::Command;

pub use crate::commands::{create_show, hold, open_sales};

/// The node every test entry was proposed by.
pub const LEADER: u64 = 1;

/// The log time of the first entry.
pub const START_MS: u64 = 1_700_000_000_000;

/// A log id proposed by [`LEADER`] in `term`.
pub fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(openraft::alias::LeaderIdOf::<TypeConfig>::new_committed(term, LEADER), index)
}

/// A vote for [`LEADER`] in `term`, committed.
pub fn vote(term: u64) -> Vote {
    Vote::new_committed(term, LEADER)
}

/// A blank entry (what a new leader proposes first).
pub fn blank(term: u64, index: u64) -> Entry {
    Entry::new_blank(log_id(term, index))
}

/// A membership entry making `voters` the voters.
pub fn membership(term: u64, index: u64, voters: &[u64]) -> Entry {
    let voters: BTreeSet<u64> = voters.iter().copied().collect();
    let membership = Membership::<u64, Node>::new_with_defaults(vec![voters], []);
    Entry::new_membership(log_id(term, index), membership)
}

/// A normal entry carrying `commands`, stamped one second after the previous index.
pub fn normal(term: u64, index: u64, commands: Vec<Command>) -> Entry {
    Entry::new_normal(log_id(term, index), Proposal { time_ms: START_MS + index * 1000, commands })
}

/// A log from index 0 to `last_index`, as a group's log starts: the initial membership entry at
/// index 0, a show, sales opened, then one hold per entry (each buyer takes the next seat; every
/// other entry also has a second buyer try the same seat, which is rejected).
pub fn booking_log(term: u64, last_index: u64) -> Vec<Entry> {
    (0..=last_index)
        .map(|index| match index {
            0 => membership(term, 0, &[1, 2, 3]),
            1 => normal(term, 1, vec![create_show(10, 500)]),
            2 => normal(term, 2, vec![open_sales(10)]),
            _ => {
                let seat = u32::try_from(index).expect("small index");
                let mut commands = vec![hold(10, index, index, seat)];
                if index % 2 == 0 {
                    commands.push(hold(10, index + 1000, index, seat));
                }
                normal(term, index, commands)
            }
        })
        .collect()
}

/// Appends `entries` and returns once the store reports them flushed.
pub async fn append(store: &mut LogStore, entries: Vec<Entry>) -> io::Result<()> {
    let (sender, receiver) = TypeConfig::oneshot();
    store.append(entries, IOFlushed::signal(sender)).await?;
    receiver.await.map_err(io::Error::other)?
}

/// The indexes of every entry of `store`, read from the start.
pub async fn indexes(store: &mut LogStore) -> io::Result<Vec<u64>> {
    let entries = store.try_get_log_entries(0..).await?;
    Ok(entries.iter().map(|entry| entry.index()).collect())
}

/// Every entry of `store`.
pub async fn entries(store: &mut LogStore) -> io::Result<Vec<Entry>> {
    store.try_get_log_entries(0..).await
}

/// `entries` as the stream `RaftStateMachine::apply` takes, with no client waiting on them.
pub fn to_apply(
    entries: Vec<Entry>,
) -> impl futures_util::Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin {
    futures_util::stream::iter(entries.into_iter().map(|entry| Ok((entry, None))))
}

/// The entries of `log` with index in `range`.
pub fn slice(log: &[Entry], range: std::ops::RangeInclusive<u64>) -> Vec<Entry> {
    log.iter().filter(|entry| range.contains(&entry.index())).cloned().collect()
}

/// Runs `check` on a fresh RocksDB database and then on a fresh simulated disk: the stores are
/// the same code on both, and must behave the same.
pub async fn on_each_backend<F, Fut>(check: F) -> io::Result<()>
where
    F: Fn(Storage) -> Fut,
    Fut: Future<Output = io::Result<()>>,
{
    let labelled = |backend: &str, error: io::Error| {
        io::Error::new(error.kind(), format!("on {backend}: {error}"))
    };
    // Printed so that a failed assertion (whose output the harness shows) names its backend.
    println!("on RocksDB");
    let dir = tempfile::tempdir()?;
    check(Storage::open(dir.path())?).await.map_err(|error| labelled("RocksDB", error))?;
    println!("on a simulated disk");
    check(Storage::simulated(SimDisk::new()))
        .await
        .map_err(|error| labelled("a simulated disk", error))
}

/// Runs the test `child` of this test binary in a child process, with the environment variable
/// `variable` naming a fresh directory (the child's cue that it is one), and returns that
/// directory once the child has aborted after leaving its marker (see [`abort_child`]).
pub fn run_aborting_child(child: &str, variable: &str) -> io::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let status = Process::new(std::env::current_exe()?)
        .args(["--exact", child, "--test-threads", "1", "--quiet"])
        .env(variable, dir.path())
        .stdout(Stdio::null())
        .status()?;
    assert!(!status.success(), "{child} aborts after writing: {status}");
    assert!(dir.path().join("written").exists(), "{child} wrote what it should: {status}");
    Ok(dir)
}

/// In a test run by [`run_aborting_child`], the directory to write into; `None` when the test
/// runs on its own (it then does nothing).
pub fn child_dir(variable: &str) -> Option<PathBuf> {
    std::env::var_os(variable).map(PathBuf::from)
}

/// Ends a child: leaves the marker in `dir` and aborts. With its databases still open, no
/// destructor runs: no clean close, no last flush of the WAL or of a memtable, as after
/// `kill -9`.
pub fn abort_child(dir: &Path) -> ! {
    if let Err(error) = std::fs::write(dir.join("written"), b"") {
        panic!("the child's marker: {error}");
    }
    std::process::abort();
}
