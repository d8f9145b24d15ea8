//! The Raft log and vote of one group, stored in the node's shared storage engine (RocksDB, or
//! the simulator's `SimDisk`: the code here is the same for both).
//!
//! Owns the group's range of the `logs` column family and its `meta` records (vote, last purged,
//! committed). Never touches another group's keys, never reports a write durable before the sync
//! that covers it, and never calls an engine directly: only through the seam of `engine.rs`.
//!
//! What an implementation of `RaftLogStorage` must do, and how this one does it:
//!
//! - Entries are readable when `append` returns: they are written to the engine (for RocksDB,
//!   memtable and WAL, unsynced) before it returns.
//! - The flush callback is called only once the entries are durable: it is queued on the
//!   engine's flusher, which syncs once for everything queued (group commit, see `flusher.rs`
//!   and `sim_disk.rs`).
//! - `save_vote` is durable before it returns: it writes, then waits for the flusher's next sync.
//! - `truncate_after` and `purge` are durable before they return, the same way.
//! - Writes are never reordered: openraft calls one group's store sequentially, each call writes
//!   to the engine before returning, and every engine makes writes durable in write order (the
//!   WAL is replayed in write order), so a durable write implies that every earlier write is
//!   durable too.
//! - No holes: a truncation removes a suffix and a purge a prefix, each as one atomic range
//!   deletion (a purge together with its last-purged record, in one write batch).
//! - `save_committed` is not synced: by the previous point, a committed log id that survives a
//!   crash implies the entries it covers survived too; one that is lost only means that start-up
//!   re-applies less, as without it.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, ControlFlow, RangeBounds};

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{
    self, ColumnFamily, MetaKey, index_of_log_key, log_key, log_key_after, log_keys_end, meta_key,
};
use crate::engine::Batch;
use crate::error::StoreError;
use crate::storage::Storage;
use crate::types::{Entry, GroupId, LogId, TypeConfig, Vote};

/// The most encoded bytes `limited_get_log_entries` returns (at least one entry is always
/// returned). It bounds one replication message well below tonic's 4 MiB default limit.
pub const REPLICATION_BATCH_BYTES_MAX: usize = 1024 * 1024;

/// The log store of one group. Cheap to clone; the clones are the group's log readers.
#[derive(Clone)]
pub struct LogStore {
    storage: Storage,
    group: GroupId,
}

impl LogStore {
    pub(crate) fn new(storage: Storage, group: GroupId) -> LogStore {
        LogStore { storage, group }
    }

    /// The group this store belongs to.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// The id of the last entry purged from the log, if any was.
    pub(crate) fn last_purged(&self) -> Result<Option<LogId>, StoreError> {
        self.read_meta(MetaKey::LastPurged)
    }

    fn read_meta<T: DeserializeOwned>(&self, record: MetaKey) -> Result<Option<T>, StoreError> {
        match self.storage.engine().get(ColumnFamily::Meta, &meta_key(self.group, record))? {
            None => Ok(None),
            Some(bytes) => codec::decode(record.what(), &bytes).map(Some),
        }
    }

    fn put_meta<T: Serialize>(
        &self,
        batch: &mut Batch<'_>,
        record: MetaKey,
        value: &T,
    ) -> Result<(), StoreError> {
        let bytes = codec::encode(record.what(), value)?;
        batch.put(ColumnFamily::Meta, &meta_key(self.group, record), bytes);
        Ok(())
    }

    /// Reads the entries with index in `range`, in order, stopping early (after at least one
    /// entry) once `bytes_max` encoded bytes are read.
    fn read_entries(
        &self,
        range: impl RangeBounds<u64>,
        bytes_max: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let start = match range.start_bound() {
            Bound::Included(&index) => log_key(self.group, index).to_vec(),
            Bound::Excluded(&index) => log_key_after(self.group, index).to_vec(),
            Bound::Unbounded => log_key(self.group, 0).to_vec(),
        };
        let end = match range.end_bound() {
            Bound::Included(&index) => log_key_after(self.group, index).to_vec(),
            Bound::Excluded(&index) => log_key(self.group, index).to_vec(),
            Bound::Unbounded => log_keys_end(self.group).to_vec(),
        };
        let mut entries = Vec::new();
        let mut bytes = 0;
        self.storage.engine().scan(ColumnFamily::Logs, &start, &end, |key, value| {
            entries.push(self.decode_entry(key, value)?);
            bytes += value.len();
            Ok(if bytes >= bytes_max { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
        })?;
        Ok(entries)
    }

    /// Decodes a stored entry and checks that it is stored under its own index.
    fn decode_entry(&self, key: &[u8], value: &[u8]) -> Result<Entry, StoreError> {
        let index = index_of_log_key(self.group, key)?;
        let entry: Entry = codec::decode("log entry", value)?;
        if entry.index() != index {
            return Err(StoreError::Corrupt(format!(
                "group {}: entry {} stored under index {index}",
                self.group,
                entry.log_id()
            )));
        }
        Ok(entry)
    }

    /// The log id of the group's last present entry.
    fn last_entry_log_id(&self) -> Result<Option<LogId>, StoreError> {
        self.storage.engine().last(
            ColumnFamily::Logs,
            &log_key(self.group, 0),
            &log_keys_end(self.group),
            |key, value| Ok(self.decode_entry(key, value)?.log_id()),
        )
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(self.read_entries(range, usize::MAX)?)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.read_meta(MetaKey::Vote)?)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(self.read_entries(start..end, REPLICATION_BATCH_BYTES_MAX)?)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let last_purged_log_id: Option<LogId> = self.read_meta(MetaKey::LastPurged)?;
        let last_log_id = match self.last_entry_log_id()? {
            Some(last) => Some(last),
            None => last_purged_log_id,
        };
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut batch = self.storage.engine().batch()?;
        self.put_meta(&mut batch, MetaKey::Vote, vote)?;
        batch.write()?;
        self.storage.sync().await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let mut batch = self.storage.engine().batch()?;
        match committed {
            Some(committed) => self.put_meta(&mut batch, MetaKey::Committed, &committed)?,
            None => batch.delete(ColumnFamily::Meta, &meta_key(self.group, MetaKey::Committed)),
        }
        Ok(batch.write()?)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.read_meta(MetaKey::Committed)?)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = self.storage.engine().batch()?;
        for entry in entries {
            let bytes = codec::encode("log entry", &entry)?;
            batch.put(ColumnFamily::Logs, &log_key(self.group, entry.index()), bytes);
        }
        batch.write()?;
        self.storage.on_durable(callback);
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = match &last_log_id {
            Some(last) => log_key_after(self.group, last.index()).to_vec(),
            None => log_key(self.group, 0).to_vec(),
        };
        let mut batch = self.storage.engine().batch()?;
        batch.delete_range(ColumnFamily::Logs, &from, &log_keys_end(self.group));
        batch.write()?;
        self.storage.sync().await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut batch = self.storage.engine().batch()?;
        self.put_meta(&mut batch, MetaKey::LastPurged, &log_id)?;
        batch.delete_range(
            ColumnFamily::Logs,
            &log_key(self.group, 0),
            &log_key_after(self.group, log_id.index()),
        );
        batch.write()?;
        self.storage.sync().await
    }
}
