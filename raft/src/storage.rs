//! The node's one RocksDB: opening it with the shared column families, and handing out the
//! per-group stores that live in it.
//!
//! Owns the database handle and its WAL flusher (see `flusher.rs`), both shared by every group on
//! the node. Never interprets a group's records: the log store and the state-machine store do.
//! Each group must have at most one [`LogStore`] and one [`StateMachineStore`] open at a time.

use std::io;
use std::path::Path;
use std::sync::Arc;

use openraft::storage::IOFlushed;
use rocksdb::{
    ColumnFamily, ColumnFamilyDescriptor, DB, DBCompressionType, DBRecoveryMode, Options,
};

use crate::codec::COLUMN_FAMILIES;
use crate::error::StoreError;
use crate::flusher::Flusher;
use crate::log_store::LogStore;
use crate::state_machine::StateMachineStore;
use crate::types::{GroupId, TypeConfig};

/// The node's database, shared by every group. Cheap to clone.
///
/// The database closes when the last clone, and the last store made from it, is dropped; the
/// flusher makes everything written so far durable before that.
#[derive(Clone)]
pub struct Storage {
    inner: Arc<Inner>,
}

struct Inner {
    // Declared first so that it is dropped first: its last sync needs the database open.
    flusher: Flusher,
    db: Arc<DB>,
}

impl Storage {
    /// Opens the database in `path`, creating it and its column families if missing, and starts
    /// its WAL flusher thread.
    ///
    /// # Errors
    ///
    /// `Rocks` if RocksDB cannot open the directory (for instance another process holds it),
    /// `Io` if the flusher thread cannot start.
    pub fn open(path: impl AsRef<Path>) -> Result<Storage, StoreError> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.create_missing_column_families(true);
        // Recovery replays a prefix of the WAL, never a later write without an earlier one: the
        // log store relies on this for writes it does not sync (see `log_store.rs`). It is the
        // default; it is set here because correctness depends on it.
        options.set_wal_recovery_mode(DBRecoveryMode::PointInTime);
        let column_families = COLUMN_FAMILIES.map(|name| {
            let mut cf_options = Options::default();
            // RocksDB is built without compression libraries; say so rather than rely on the
            // default falling back.
            cf_options.set_compression_type(DBCompressionType::None);
            ColumnFamilyDescriptor::new(name, cf_options)
        });
        let db = Arc::new(DB::open_cf_descriptors(&options, path, column_families)?);
        for name in COLUMN_FAMILIES {
            if db.cf_handle(name).is_none() {
                return Err(StoreError::MissingColumnFamily(name));
            }
        }
        let flusher = Flusher::start(Arc::clone(&db))?;
        Ok(Storage { inner: Arc::new(Inner { flusher, db }) })
    }

    /// The log store of `group`.
    pub fn log_store(&self, group: GroupId) -> LogStore {
        LogStore::new(self.clone(), group)
    }

    /// The state-machine store of `group`, restored from the group's persisted snapshot if it has
    /// one (openraft then re-applies the committed log tail after it).
    ///
    /// # Errors
    ///
    /// If the persisted snapshot cannot be read or does not decode.
    pub fn state_machine(&self, group: GroupId) -> Result<StateMachineStore, StoreError> {
        StateMachineStore::open(self.clone(), group)
    }

    /// WAL syncs done since the database was opened. Each completes every write queued before
    /// it, from every group, so under load this grows much slower than the number of writes.
    pub fn wal_sync_count(&self) -> u64 {
        self.inner.flusher.sync_count()
    }

    /// Durability waits (appends, votes, truncations, purges, snapshots) completed so far.
    pub fn flush_completed_count(&self) -> u64 {
        self.inner.flusher.completed_count()
    }

    /// The database.
    pub(crate) fn db(&self) -> &DB {
        &self.inner.db
    }

    /// A column family this crate created on open.
    pub(crate) fn cf(&self, name: &'static str) -> Result<&ColumnFamily, StoreError> {
        self.inner.db.cf_handle(name).ok_or(StoreError::MissingColumnFamily(name))
    }

    /// Queues `callback` for the next WAL sync; everything written before this call is covered.
    pub(crate) fn on_durable(&self, callback: IOFlushed<TypeConfig>) {
        self.inner.flusher.submit(callback);
    }

    /// Waits until everything written before this call is durable.
    pub(crate) async fn sync(&self) -> Result<(), io::Error> {
        self.inner.flusher.sync().await
    }
}
