//! The RocksDB backend of the storage seam: the node's one database with the shared column
//! families, and its WAL flusher thread (see `flusher.rs`).
//!
//! Owns the database handle, the options it is opened with, and the translation of the seam's
//! operations (`engine.rs`) into RocksDB calls. Never interprets keys or values, and never syncs
//! on the write path: durability is the flusher's job, once for everything queued (but for a
//! durable put, which flushes its own family and waits).

use std::path::Path;
use std::sync::Arc;

use openraft::AsyncRuntime;
use openraft::storage::IOFlushed;
use rocksdb::{
    ColumnFamilyDescriptor, DB, DBCompressionType, DBPinnableSlice, DBRecoveryMode, FlushOptions,
    Options, ReadOptions, WriteBatch, WriteOptions,
};

use crate::codec::ColumnFamily;
use crate::error::StoreError;
use crate::failure::Failure;
use crate::flusher::Flusher;
use crate::runtime::BookingRuntime;
use crate::types::TypeConfig;

/// A RocksDB database and its flusher.
pub(crate) struct RocksEngine {
    // Declared first so that it is dropped first: its last sync needs the database open.
    flusher: Flusher,
    db: Arc<DB>,
    /// The first failed write or sync; after it every write is refused.
    failure: Failure,
}

impl RocksEngine {
    /// Opens the database in `path`, creating it and its column families if missing, and starts
    /// its WAL flusher thread.
    ///
    /// # Errors
    ///
    /// `Corrupt` if RocksDB's checksums reject what the directory holds (a record before the
    /// end of the WAL, a table file), `Rocks` if RocksDB cannot open the directory for another
    /// reason (for instance another process holds it), `Io` if the flusher thread cannot start.
    pub(crate) fn open(path: &Path, failure: Failure) -> Result<RocksEngine, StoreError> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        // Recovery replays a prefix of the WAL, never a later write without an earlier one (the
        // log store relies on this for writes it does not sync, see `log_store.rs`), and it
        // refuses to open when a record its checksum rejects is followed by others. Only the
        // last record may be torn: a crash cuts the tail the WAL had not synced, and only the
        // tail. RocksDB's default, `PointInTime`, stopped at the first bad record and opened
        // without it and everything after it, synced or not: a flipped bit in the WAL silently
        // took acknowledged entries and votes with it (the storage test `corruption` proves the
        // difference). etcd's WAL and TiKV's raft-engine draw the same line.
        options.set_wal_recovery_mode(DBRecoveryMode::TolerateCorruptedTailRecords);
        let column_families = ColumnFamily::ALL.map(|family| {
            let mut cf_options = Options::default();
            // RocksDB is built without compression libraries; say so rather than rely on the
            // default falling back.
            cf_options.set_compression_type(DBCompressionType::None);
            ColumnFamilyDescriptor::new(family.name(), cf_options)
        });
        let db = DB::open_cf_descriptors(&options, path, column_families).map_err(|error| {
            if error.kind() == rocksdb::ErrorKind::Corruption {
                StoreError::Corrupt(format!(
                    "the database in {} fails RocksDB's checksums ({error}), so this node cannot \
                     vouch for what it acknowledged: move the directory aside, start the node \
                     on an empty one, and readmit it (`bookctl member readmit`)",
                    path.display()
                ))
            } else {
                StoreError::Rocks(error)
            }
        })?;
        let db = Arc::new(db);
        for family in ColumnFamily::ALL {
            if db.cf_handle(family.name()).is_none() {
                return Err(StoreError::MissingColumnFamily(family.name()));
            }
        }
        let flusher = Flusher::start(Arc::clone(&db), failure.clone())?;
        Ok(RocksEngine { flusher, db, failure })
    }

    /// The handle of a column family created on open.
    fn handle(&self, family: ColumnFamily) -> Result<&rocksdb::ColumnFamily, StoreError> {
        self.db.cf_handle(family.name()).ok_or(StoreError::MissingColumnFamily(family.name()))
    }

    /// An empty batch, with the column family handles resolved once for all its writes.
    pub(crate) fn batch(&self) -> Result<RocksBatch<'_>, StoreError> {
        let [logs, meta, snapshots] = ColumnFamily::ALL;
        let handles = [self.handle(logs)?, self.handle(meta)?, self.handle(snapshots)?];
        Ok(RocksBatch { engine: self, batch: WriteBatch::default(), handles })
    }

    /// See [`Engine::get`](crate::engine::Engine::get).
    pub(crate) fn get(
        &self,
        family: ColumnFamily,
        key: &[u8],
    ) -> Result<Option<DBPinnableSlice<'_>>, StoreError> {
        self.db.get_pinned_cf(self.handle(family)?, key).map_err(|error| self.read_failed(error))
    }

    /// The error of a failed read. A read RocksDB's checksums rejected (`Corruption`) or the
    /// disk could not serve (`IOError`) is also the storage's failure: the data is not what
    /// was written, so this node must not serve, apply or vote from it, and a restart will
    /// not mend it (the node must be readmitted with an empty disk). Other errors are only
    /// this read's.
    fn read_failed(&self, error: rocksdb::Error) -> StoreError {
        if matches!(error.kind(), rocksdb::ErrorKind::Corruption | rocksdb::ErrorKind::IOError) {
            self.failure.record(format_args!(
                "a read failed ({error}): if the data is corrupt, restarting will not mend it; \
                 move the data directory aside, start the node on an empty one, and readmit it \
                 (`bookctl member readmit`)"
            ));
        }
        StoreError::Rocks(error)
    }

    /// See [`Engine::scan`](crate::engine::Engine::scan).
    pub(crate) fn scan(
        &self,
        family: ColumnFamily,
        start: &[u8],
        end: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<std::ops::ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        if start >= end {
            return Ok(());
        }
        let mut options = ReadOptions::default();
        options.set_iterate_upper_bound(end.to_vec());
        // A raw iterator lends its key and value in place; the boxed iterator would copy both.
        let mut iterator = self.db.raw_iterator_cf_opt(self.handle(family)?, options);
        iterator.seek(start);
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            if visit(key, value)?.is_break() {
                return Ok(());
            }
            iterator.next();
        }
        // An invalid iterator is either the end of the range or a failed read: tell them apart.
        iterator.status().map_err(|error| self.read_failed(error))
    }

    /// See [`Engine::last`](crate::engine::Engine::last).
    pub(crate) fn last<T>(
        &self,
        family: ColumnFamily,
        start: &[u8],
        end: &[u8],
        read: impl FnOnce(&[u8], &[u8]) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        if start >= end {
            return Ok(None);
        }
        let mut options = ReadOptions::default();
        options.set_iterate_lower_bound(start.to_vec());
        options.set_iterate_upper_bound(end.to_vec());
        let mut iterator = self.db.raw_iterator_cf_opt(self.handle(family)?, options);
        iterator.seek_to_last();
        match (iterator.key(), iterator.value()) {
            (Some(key), Some(value)) => read(key, value).map(Some),
            _ => {
                iterator.status().map_err(|error| self.read_failed(error))?;
                Ok(None)
            }
        }
    }

    /// See [`Engine::put_durable`](crate::engine::Engine::put_durable): a write without the WAL,
    /// then a flush of the family's memtable to a synced table file, waited for, on tokio's
    /// blocking pool (not on the background threads: RocksDB's writers queue behind this
    /// write's copy into the memtable, which must not run at a lower priority than they do).
    /// RocksDB records the flushed family's progress in its synced manifest, so recovery
    /// neither needs the WAL for the value nor replays an older write of the family over it.
    pub(crate) async fn put_durable(
        &self,
        family: ColumnFamily,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        self.failure.check()?;
        let (db, failure) = (Arc::clone(&self.db), self.failure.clone());
        let name = family.name();
        <BookingRuntime as AsyncRuntime>::spawn_blocking(move || {
            let handle = db.cf_handle(name).ok_or(StoreError::MissingColumnFamily(name))?;
            let mut write = WriteOptions::default();
            write.disable_wal(true);
            let mut flush = FlushOptions::default();
            flush.set_wait(true);
            db.put_cf_opt(handle, &key, &value, &write)
                .and_then(|()| db.flush_cf_opt(handle, &flush))
                .map_err(|error| {
                    failure.record(format_args!("durable write failed: {error}"));
                    StoreError::Rocks(error)
                })
        })
        .await?
    }

    /// Queues `callback` on the flusher thread for its next WAL sync.
    pub(crate) fn on_durable(&self, callback: IOFlushed<TypeConfig>) {
        self.flusher.submit(callback);
    }

    /// The bytes the file system of the database's directory has free for an unprivileged
    /// user; `None` if it cannot be asked.
    pub(crate) fn free_bytes(&self) -> Option<u64> {
        let stats = rustix::fs::statvfs(self.db.path()).ok()?;
        Some(stats.f_bavail.saturating_mul(stats.f_frsize))
    }

    /// Syncs done since this engine was opened.
    pub(crate) fn sync_count(&self) -> u64 {
        self.flusher.sync_count()
    }

    /// `on_durable` callbacks completed since this engine was opened.
    pub(crate) fn completed_count(&self) -> u64 {
        self.flusher.completed_count()
    }
}

/// A RocksDB write batch and the column family handles it writes to.
pub(crate) struct RocksBatch<'a> {
    engine: &'a RocksEngine,
    batch: WriteBatch,
    /// Indexed by `ColumnFamily::position`.
    handles: [&'a rocksdb::ColumnFamily; 3],
}

impl RocksBatch<'_> {
    /// Stores `value` under `key` when the batch is written.
    pub(crate) fn put(&mut self, family: ColumnFamily, key: &[u8], value: &[u8]) {
        self.batch.put_cf(self.handles[family.position()], key, value);
    }

    /// Removes `key` when the batch is written.
    pub(crate) fn delete(&mut self, family: ColumnFamily, key: &[u8]) {
        self.batch.delete_cf(self.handles[family.position()], key);
    }

    /// Removes every key with `start <= key < end` when the batch is written.
    pub(crate) fn delete_range(&mut self, family: ColumnFamily, start: &[u8], end: &[u8]) {
        self.batch.delete_range_cf(self.handles[family.position()], start, end);
    }

    /// Writes the batch to the memtable and the WAL, unsynced.
    pub(crate) fn write(self) -> Result<(), StoreError> {
        self.engine.failure.check()?;
        self.engine.db.write(self.batch).map_err(|error| {
            // RocksDB itself stops taking writes after a failed WAL write (its background error);
            // the failure makes the node stop too, rather than answer with half its groups.
            self.engine.failure.record(format_args!("write failed: {error}"));
            StoreError::Rocks(error)
        })
    }
}
