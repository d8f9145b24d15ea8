//! The storage-engine seam: the few key-value operations the log and state-machine stores need,
//! in our own terms, dispatched to the backend a `Storage` was opened on (RocksDB on a real node,
//! `SimDisk` under simulation).
//!
//! Owns the contract every backend must keep (see [`Engine`]) and the types that cross the seam
//! ([`Batch`], [`Value`]). Never interprets keys or values (`codec.rs` and the stores do), and
//! never gives one backend a behaviour the other lacks: the stores run unchanged on either, so
//! what the simulator checks is what a node runs.

use std::ops::{ControlFlow, Deref};
use std::sync::Arc;

use openraft::storage::IOFlushed;

use crate::codec::ColumnFamily;
use crate::error::StoreError;
use crate::rocks::{RocksBatch, RocksEngine};
use crate::sim_disk::{SimBatch, SimEngine};
use crate::types::TypeConfig;

/// The key-value engine under a `Storage`: one of the backends, each with the same contract.
///
/// What a backend must do:
///
/// - Keep the column families of [`ColumnFamily::ALL`], each ordered by key bytes.
/// - Apply a [`Batch`] atomically: a read sees all of it or none of it, and so does whatever
///   survives a crash. A write is readable as soon as `Batch::write` returns, and not yet
///   durable.
/// - Make writes durable in write order: after a crash, what survives is every write a completed
///   sync covered and a prefix (possibly empty) of the later ones in write order, never a later
///   write without every earlier one. The log store's unsynced `save_committed` relies on it.
/// - Complete every callback given to `on_durable` exactly once, with `Ok` only after a sync that
///   started after the call (so everything written before the call is durable), with an error
///   if that cannot happen; never drop one (openraft would wait forever). Many callbacks may
///   share one sync (group commit), and they may complete in any order.
/// - Make a [`Engine::put_durable`] durable before it returns, outside the write order of
///   batches: a crash after it keeps the value whatever it does to batches written before, and
///   makes every earlier write of the same column family durable with it (RocksDB's memtable
///   flush does). Keep such a family out of batches: the snapshots, which must not wait behind
///   the log's syncs, nor make them wait.
/// - Read what was written, synced or not: `get`, and the bounded scans `scan` (forward) and
///   `last` (the greatest key), over keys `start <= key < end`. A read that cannot return what
///   was written (RocksDB's checksums reject it, or the disk cannot serve it) fails, and is the
///   storage's failure: the node stops rather than serve, apply or vote from its disk. The
///   simulated disk never alters what it holds.
/// - Count its syncs and completed callbacks, for tests and metrics.
pub(crate) enum Engine {
    /// A RocksDB database and its WAL flusher thread.
    Rocks(RocksEngine),
    /// A simulated disk and its flush task.
    Sim(SimEngine),
}

impl Engine {
    /// An empty write batch for this engine.
    ///
    /// # Errors
    ///
    /// `MissingColumnFamily` if RocksDB lost a column family checked on open (a bug).
    pub(crate) fn batch(&self) -> Result<Batch<'_>, StoreError> {
        match self {
            Engine::Rocks(engine) => Ok(Batch::Rocks(engine.batch()?)),
            Engine::Sim(engine) => Ok(Batch::Sim(engine.batch())),
        }
    }

    /// The value stored under `key`, if any.
    ///
    /// # Errors
    ///
    /// The backend's read error.
    pub(crate) fn get(
        &self,
        family: ColumnFamily,
        key: &[u8],
    ) -> Result<Option<Value<'_>>, StoreError> {
        match self {
            Engine::Rocks(engine) => Ok(engine.get(family, key)?.map(Value::Rocks)),
            Engine::Sim(engine) => Ok(engine.get(family, key)?.map(Value::Sim)),
        }
    }

    /// Calls `visit` with every key and value with `start <= key < end`, in key order, until it
    /// breaks or fails. Nothing is copied for the visit: decode what is needed inside it.
    ///
    /// # Errors
    ///
    /// The backend's read error, or the first error of `visit`.
    pub(crate) fn scan(
        &self,
        family: ColumnFamily,
        start: &[u8],
        end: &[u8],
        visit: impl FnMut(&[u8], &[u8]) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        match self {
            Engine::Rocks(engine) => engine.scan(family, start, end, visit),
            Engine::Sim(engine) => engine.scan(family, start, end, visit),
        }
    }

    /// What `read` makes of the greatest key with `start <= key < end` and its value, or `None`
    /// if the range is empty.
    ///
    /// # Errors
    ///
    /// The backend's read error, or `read`'s.
    pub(crate) fn last<T>(
        &self,
        family: ColumnFamily,
        start: &[u8],
        end: &[u8],
        read: impl FnOnce(&[u8], &[u8]) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        match self {
            Engine::Rocks(engine) => engine.last(family, start, end, read),
            Engine::Sim(engine) => engine.last(family, start, end, read),
        }
    }

    /// Stores `value` under `key` and waits until it is durable, without going through the
    /// write-ahead log every batch's sync goes through: a large value (a snapshot) then neither
    /// waits for the log's syncs nor makes them write its bytes. The blocking work runs off the
    /// async workers.
    ///
    /// # Errors
    ///
    /// The backend's write or sync error; after it the storage has failed (`failure.rs`), and
    /// whether the value survives a restart is unknown.
    pub(crate) async fn put_durable(
        &self,
        family: ColumnFamily,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        match self {
            Engine::Rocks(engine) => engine.put_durable(family, key, value).await,
            Engine::Sim(engine) => engine.put_durable(family, key, value).await,
        }
    }

    /// Queues `callback` for the next sync; everything written before this call is covered.
    pub(crate) fn on_durable(&self, callback: IOFlushed<TypeConfig>) {
        match self {
            Engine::Rocks(engine) => engine.on_durable(callback),
            Engine::Sim(engine) => engine.on_durable(callback),
        }
    }

    /// The bytes the disk has room for, if known.
    pub(crate) fn free_bytes(&self) -> Option<u64> {
        match self {
            Engine::Rocks(engine) => engine.free_bytes(),
            Engine::Sim(engine) => engine.free_bytes(),
        }
    }

    /// Syncs done since this engine was opened.
    pub(crate) fn sync_count(&self) -> u64 {
        match self {
            Engine::Rocks(engine) => engine.sync_count(),
            Engine::Sim(engine) => engine.sync_count(),
        }
    }

    /// `on_durable` callbacks completed since this engine was opened.
    pub(crate) fn completed_count(&self) -> u64 {
        match self {
            Engine::Rocks(engine) => engine.completed_count(),
            Engine::Sim(engine) => engine.completed_count(),
        }
    }
}

/// Writes to apply together, atomically, to the engine that made the batch (it borrows it, so a
/// batch cannot reach another engine).
pub(crate) enum Batch<'a> {
    /// A RocksDB write batch.
    Rocks(RocksBatch<'a>),
    /// The writes of a simulated batch.
    Sim(SimBatch<'a>),
}

impl Batch<'_> {
    /// Stores `value` under `key`. The RocksDB batch copies it into its buffer; the simulated one
    /// keeps it as it is.
    pub(crate) fn put(&mut self, family: ColumnFamily, key: &[u8], value: Vec<u8>) {
        match self {
            Batch::Rocks(batch) => batch.put(family, key, &value),
            Batch::Sim(batch) => batch.put(family, key, value),
        }
    }

    /// Removes `key`, if present.
    pub(crate) fn delete(&mut self, family: ColumnFamily, key: &[u8]) {
        match self {
            Batch::Rocks(batch) => batch.delete(family, key),
            Batch::Sim(batch) => batch.delete(family, key),
        }
    }

    /// Removes every key with `start <= key < end`.
    pub(crate) fn delete_range(&mut self, family: ColumnFamily, start: &[u8], end: &[u8]) {
        match self {
            Batch::Rocks(batch) => batch.delete_range(family, start, end),
            Batch::Sim(batch) => batch.delete_range(family, start, end),
        }
    }

    /// Applies the batch, unsynced: readable at once, durable at the engine's next sync.
    ///
    /// # Errors
    ///
    /// The backend's write error (for the simulated disk, `Fenced` once its process is gone).
    pub(crate) fn write(self) -> Result<(), StoreError> {
        match self {
            Batch::Rocks(batch) => batch.write(),
            Batch::Sim(batch) => batch.write(),
        }
    }
}

/// A value read from an engine: pinned in RocksDB's block cache or memtable, or shared with the
/// simulated disk, so a read copies nothing until it decodes.
pub(crate) enum Value<'a> {
    /// A value pinned by RocksDB.
    Rocks(rocksdb::DBPinnableSlice<'a>),
    /// A value held by the simulated disk.
    Sim(Arc<Vec<u8>>),
}

impl Deref for Value<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Value::Rocks(value) => value,
            Value::Sim(value) => value,
        }
    }
}
