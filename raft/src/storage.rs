//! The node's storage: the engine every group's stores live in (one RocksDB per node, or a
//! simulated disk under the simulator), and handing out the per-group stores.
//!
//! Owns the engine handle (see `engine.rs`), shared by every group on the node, and the one way
//! to wait for durability. Never interprets a group's records: the log store and the
//! state-machine store do. Each group must have at most one [`LogStore`] and one
//! [`StateMachineStore`] open at a time.

use std::io;
use std::path::Path;
use std::sync::Arc;

use openraft::storage::IOFlushed;
use openraft::type_config::TypeConfigExt;

use crate::archive::ArchiveDir;
use crate::engine::Engine;
use crate::error::StoreError;
use crate::failure::Failure;
use crate::log_store::LogStore;
use crate::rocks::RocksEngine;
use crate::sim_disk::{SimDisk, SimEngine};
use crate::state_machine::StateMachineStore;
use crate::types::{GroupId, TypeConfig};

/// The node's storage, shared by every group. Cheap to clone.
///
/// On RocksDB, the database closes when the last clone, and the last store made from it, is
/// dropped; the flusher makes everything written so far durable before that. On a [`SimDisk`],
/// dropping changes nothing on the disk: writes not yet synced stay volatile, as after a process
/// exit they would stay in the operating system's cache.
#[derive(Clone)]
pub struct Storage {
    engine: Arc<Engine>,
    archives: Option<ArchiveDir>,
    /// The first failed write or sync (see `failure.rs`).
    failure: Failure,
}

impl Storage {
    /// Opens the RocksDB database in `path`, creating it and its column families if missing,
    /// and starts its WAL flusher thread.
    ///
    /// # Errors
    ///
    /// `Corrupt` if RocksDB's checksums reject what the directory holds (a record before the
    /// end of the WAL, a table file), `Rocks` if RocksDB cannot open the directory for another
    /// reason (for instance another process holds it), `Io` if the flusher thread cannot start.
    pub fn open(path: impl AsRef<Path>) -> Result<Storage, StoreError> {
        let failure = Failure::new();
        let engine = RocksEngine::open(path.as_ref(), failure.clone())?;
        Ok(Storage { engine: Arc::new(Engine::Rocks(engine)), archives: None, failure })
    }

    /// Opens a storage on a simulated disk, as a restarted node's process opens its database:
    /// everything on the disk becomes durable (RocksDB's recovery does the same), and the storage
    /// opened on it before, if any, is fenced off (its every operation fails with `Fenced`).
    ///
    /// Uses no thread and no clock: syncs run in a task spawned on the caller's tokio runtime
    /// when a write first waits for durability (see [`SimDisk`] for the crash model).
    pub fn simulated(disk: SimDisk) -> Storage {
        let failure = Failure::new();
        let engine = Engine::Sim(SimEngine::open(disk, failure.clone()));
        Storage { engine: Arc::new(engine), archives: None, failure }
    }

    /// The same storage, with every group's archived shows written to `archives` as their
    /// `ArchiveShow` entries are applied. Without one, a replica keeps no archive (the
    /// simulator's nodes).
    pub fn with_archives(self, archives: ArchiveDir) -> Storage {
        Storage { archives: Some(archives), ..self }
    }

    /// Where archived shows are written, if anywhere.
    pub fn archives(&self) -> Option<&ArchiveDir> {
        self.archives.as_ref()
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

    /// Syncs (of RocksDB's WAL, or of the simulated disk) done since the storage was opened.
    /// Each completes every write queued before it, from every group, so under load this grows
    /// much slower than the number of writes.
    pub fn wal_sync_count(&self) -> u64 {
        self.engine.sync_count()
    }

    /// Durability waits (appends, votes, truncations, purges) completed so far.
    pub fn flush_completed_count(&self) -> u64 {
        self.engine.completed_count()
    }

    /// Why the storage failed, if it did: its first failed write or sync. After it the storage
    /// refuses every write and sync, and the node must stop (see `failure.rs`).
    pub fn failed(&self) -> Option<String> {
        self.failure.get()
    }

    /// Waits until the storage fails, and says why; never returns on a storage that works.
    pub async fn failure(&self) -> String {
        self.failure.wait().await
    }

    /// The bytes the disk under the storage still has room for (for an unprivileged user, as
    /// `df` shows them); `None` if unknown or unlimited (a simulated disk without a capacity).
    pub fn free_bytes(&self) -> Option<u64> {
        self.engine.free_bytes()
    }

    /// The engine the stores read and write.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Queues `callback` for the next sync; everything written before this call is covered.
    pub(crate) fn on_durable(&self, callback: IOFlushed<TypeConfig>) {
        self.engine.on_durable(callback);
    }

    /// Waits until everything written before this call is durable.
    ///
    /// # Errors
    ///
    /// The sync's error, or `FlusherStopped` if the flusher went away without answering.
    pub(crate) async fn sync(&self) -> Result<(), io::Error> {
        let (sender, receiver) = TypeConfig::oneshot();
        self.on_durable(IOFlushed::signal(sender));
        match receiver.await {
            Ok(result) => result,
            Err(_) => Err(io::Error::other(StoreError::FlusherStopped)),
        }
    }
}
