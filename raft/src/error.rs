//! The errors of the raft crate's storage, and their conversion to the `io::Error` that openraft's
//! storage traits return.
//!
//! Owns the error taxonomy only. Never decides what to do about an error (retry, crash, report):
//! openraft turns a storage error into a fatal group, and `node` maps what reaches clients.

use std::io;

/// Why a storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// RocksDB reported an error.
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// A column family this crate creates on open is missing (a bug, or a foreign database).
    #[error("column family `{0}` is missing")]
    MissingColumnFamily(&'static str),
    /// A stored value was written in a format version this build does not read.
    #[error(
        "{what}: stored format version {found} is not supported (this build reads {supported})"
    )]
    UnsupportedFormat {
        /// What was being read.
        what: &'static str,
        /// The version byte found.
        found: u8,
        /// The version this build reads.
        supported: u8,
    },
    /// A value could not be encoded.
    #[error("{what} does not encode: {source}")]
    Encode {
        /// What was being written.
        what: &'static str,
        /// The encoder's error.
        source: postcard::Error,
    },
    /// A stored value does not decode.
    #[error("{what} does not decode: {source}")]
    Decode {
        /// What was being read.
        what: &'static str,
        /// The decoder's error.
        source: postcard::Error,
    },
    /// Snapshot bytes do not restore a group.
    #[error("snapshot: {0}")]
    Snapshot(#[from] statemachine::SnapshotError),
    /// Stored data contradicts itself (a key that does not match its value, a snapshot whose
    /// state does not match its metadata).
    #[error("corrupt storage: {0}")]
    Corrupt(String),
    /// The group's in-memory state is unusable: an apply panicked while holding it.
    #[error("the group state is poisoned: an earlier apply panicked")]
    Poisoned,
    /// The flusher stopped (the database closed, or the runtime of the simulated flush task shut
    /// down) before it could sync this write.
    #[error("the WAL flusher has stopped")]
    FlusherStopped,
    /// The simulated disk this storage was opened on crashed, or a newer storage was opened on
    /// it: this storage belongs to a process that no longer exists, and may not touch the disk.
    #[error("the simulated disk was crashed or reopened since this storage was opened")]
    Fenced,
    /// An earlier write or sync of this storage failed, so it refuses every write and sync
    /// (fail-stop: see `failure.rs`); the node must be restarted.
    #[error("the storage failed earlier and refuses writes until the node restarts: {0}")]
    Failed(String),
    /// The disk has no room for the write, which changed nothing (the simulated disk's full
    /// disk; RocksDB reports its own as `Rocks`).
    #[error("no space left on the disk")]
    NoSpace,
    /// An operating-system error (starting the flusher thread, a failed sync).
    #[error("io: {0}")]
    Io(#[from] io::Error),
}

impl From<StoreError> for io::Error {
    fn from(error: StoreError) -> io::Error {
        match error {
            StoreError::Io(error) => error,
            StoreError::UnsupportedFormat { .. }
            | StoreError::Decode { .. }
            | StoreError::Snapshot(_)
            | StoreError::Corrupt(_) => io::Error::new(io::ErrorKind::InvalidData, error),
            other => io::Error::other(other),
        }
    }
}
