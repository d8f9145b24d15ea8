//! The Raft log and vote of one group, stored in the node's shared RocksDB.
//!
//! Owns the group's range of the `logs` column family and its `meta` records (vote, last purged,
//! committed). Never touches another group's keys, and never reports a write durable before the
//! WAL sync that covers it.
//!
//! What an implementation of `RaftLogStorage` must do, and how this one does it:
//!
//! - Entries are readable when `append` returns: they are written to RocksDB (memtable and WAL,
//!   unsynced) before it returns.
//! - The flush callback is called only once the entries are durable: it is queued on the node's
//!   flusher, which syncs the WAL once for everything queued (group commit, see `flusher.rs`).
//! - `save_vote` is durable before it returns: it writes, then waits for the flusher's next sync.
//! - `truncate_after` and `purge` are durable before they return, the same way.
//! - Writes are never reordered: openraft calls one group's store sequentially, each call writes
//!   to RocksDB before returning, and the WAL is replayed in write order, so a durable write
//!   implies that every earlier write is durable too.
//! - No holes: a truncation removes a suffix and a purge a prefix, each as one atomic range
//!   deletion (a purge together with its last-purged record, in one write batch).
//! - `save_committed` is not synced: by the previous point, a committed log id that survives a
//!   crash implies the entries it covers survived too; one that is lost only means that start-up
//!   re-applies less, as without it.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use rocksdb::{IteratorMode, ReadOptions, WriteBatch};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{
    self, CF_LOGS, CF_META, MetaKey, index_of_log_key, log_key, log_key_after, log_keys_end,
    meta_key,
};
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

    fn read_meta<T: DeserializeOwned>(&self, record: MetaKey) -> Result<Option<T>, StoreError> {
        let cf = self.storage.cf(CF_META)?;
        match self.storage.db().get_pinned_cf(cf, meta_key(self.group, record))? {
            None => Ok(None),
            Some(bytes) => codec::decode(record.what(), &bytes).map(Some),
        }
    }

    fn put_meta<T: Serialize>(
        &self,
        batch: &mut WriteBatch,
        record: MetaKey,
        value: &T,
    ) -> Result<(), StoreError> {
        let bytes = codec::encode(record.what(), value)?;
        batch.put_cf(self.storage.cf(CF_META)?, meta_key(self.group, record), bytes);
        Ok(())
    }

    /// Writes `batch` unsynced: readable at once, durable at the flusher's next sync.
    fn write(&self, batch: WriteBatch) -> Result<(), StoreError> {
        self.storage.db().write(batch)?;
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
        if start >= end {
            return Ok(Vec::new());
        }
        let mut options = ReadOptions::default();
        options.set_iterate_upper_bound(end);
        let cf = self.storage.cf(CF_LOGS)?;
        let iterator = self.storage.db().iterator_cf_opt(
            cf,
            options,
            IteratorMode::From(&start, rocksdb::Direction::Forward),
        );
        let mut entries = Vec::new();
        let mut bytes = 0;
        for item in iterator {
            let (key, value) = item?;
            let entry = self.decode_entry(&key, &value)?;
            entries.push(entry);
            bytes += value.len();
            if bytes >= bytes_max {
                break;
            }
        }
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
        let mut options = ReadOptions::default();
        options.set_iterate_lower_bound(log_key(self.group, 0).to_vec());
        options.set_iterate_upper_bound(log_keys_end(self.group).to_vec());
        let cf = self.storage.cf(CF_LOGS)?;
        let mut iterator = self.storage.db().iterator_cf_opt(cf, options, IteratorMode::End);
        match iterator.next() {
            None => Ok(None),
            Some(item) => {
                let (key, value) = item?;
                Ok(Some(self.decode_entry(&key, &value)?.log_id()))
            }
        }
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
        let mut batch = WriteBatch::default();
        self.put_meta(&mut batch, MetaKey::Vote, vote)?;
        self.write(batch)?;
        self.storage.sync().await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let mut batch = WriteBatch::default();
        match committed {
            Some(committed) => self.put_meta(&mut batch, MetaKey::Committed, &committed)?,
            None => {
                batch.delete_cf(self.storage.cf(CF_META)?, meta_key(self.group, MetaKey::Committed))
            }
        }
        Ok(self.write(batch)?)
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
        let cf = self.storage.cf(CF_LOGS)?;
        let mut batch = WriteBatch::default();
        for entry in entries {
            let bytes = codec::encode("log entry", &entry)?;
            batch.put_cf(cf, log_key(self.group, entry.index()), bytes);
        }
        self.write(batch)?;
        self.storage.on_durable(callback);
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = match &last_log_id {
            Some(last) => log_key_after(self.group, last.index()).to_vec(),
            None => log_key(self.group, 0).to_vec(),
        };
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(self.storage.cf(CF_LOGS)?, from, log_keys_end(self.group).to_vec());
        self.write(batch)?;
        self.storage.sync().await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut batch = WriteBatch::default();
        self.put_meta(&mut batch, MetaKey::LastPurged, &log_id)?;
        batch.delete_range_cf(
            self.storage.cf(CF_LOGS)?,
            log_key(self.group, 0).to_vec(),
            log_key_after(self.group, log_id.index()).to_vec(),
        );
        self.write(batch)?;
        self.storage.sync().await
    }
}
