//! Group commit for the RocksDB backend: one background thread per database that makes written
//! data durable by syncing the write-ahead log, and then reports every write waiting on it. (The
//! simulated disk has its own flush task, without threads: see `sim_disk.rs`.)
//!
//! Owns the queue of flush callbacks of every group on the node and the thread that drains it.
//! Writers write first (unsynced: readable at once, durable later), then submit their callback.
//! The thread takes everything queued, calls `flush_wal(true)` once, and completes it all: one
//! sync serves every append, vote, truncation and purge written before it, from every group
//! (snapshots are made durable apart: `Engine::put_durable`). While a sync runs, new callbacks
//! queue up for the next one, so batches grow with load without any added delay when idle.
//! openraft 0.10 accepts flush completions out of order.
//!
//! Must never complete a callback before a sync that started after its write, and never drop a
//! callback without completing it (openraft would wait forever): on shutdown it drains the queue
//! with a last sync; a callback submitted after shutdown fails at once. A failed sync is
//! recorded as the storage's failure (`failure.rs`), and every callback after it fails at once:
//! a later sync that succeeds would not vouch for the writes the failed one lost.

use std::io;
use std::mem;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use openraft::storage::IOFlushed;
use rocksdb::DB;

use crate::error::StoreError;
use crate::failure::Failure;
use crate::types::TypeConfig;

/// The flusher of one database. Dropping it stops the thread after a last sync.
pub(crate) struct Flusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// What the writers and the thread share.
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// WAL syncs done so far (a test and metrics counter).
    syncs: AtomicU64,
    /// Callbacks completed so far.
    completed: AtomicU64,
    /// The storage's first failure: after it, no sync is believed.
    failure: Failure,
}

#[derive(Default)]
struct Queue {
    pending: Vec<IOFlushed<TypeConfig>>,
    closed: bool,
}

impl Shared {
    /// Locks the queue. A panic while holding the lock cannot leave the queue half-updated (every
    /// critical section is a push, a take or a flag), so a poisoned lock is still usable.
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Flusher {
    /// Starts the flusher thread of `db`.
    ///
    /// # Errors
    ///
    /// `Io` if the thread cannot be started.
    pub(crate) fn start(db: Arc<DB>, failure: Failure) -> Result<Flusher, StoreError> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            syncs: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failure,
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("raft-wal-flusher".to_owned())
            .spawn(move || run(&db, &thread_shared))?;
        Ok(Flusher { shared, thread: Some(thread) })
    }

    /// Queues `callback` to be completed after the next WAL sync. The caller must have written
    /// its data before calling this, so that the sync covers it.
    pub(crate) fn submit(&self, callback: IOFlushed<TypeConfig>) {
        if let Err(failed) = self.shared.failure.check() {
            callback.io_completed(Err(io::Error::other(failed)));
            return;
        }
        let mut queue = self.shared.lock();
        if queue.closed {
            drop(queue);
            callback.io_completed(Err(io::Error::other(StoreError::FlusherStopped)));
            return;
        }
        queue.pending.push(callback);
        drop(queue);
        self.shared.wake.notify_one();
    }

    /// WAL syncs done so far.
    pub(crate) fn sync_count(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Flush callbacks completed so far.
    pub(crate) fn completed_count(&self) -> u64 {
        self.shared.completed.load(Ordering::Relaxed)
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            // A panicked flusher has nothing left to report; its callbacks' receivers see it.
            if thread.join().is_err() {
                tracing::error!("the WAL flusher thread panicked");
            }
        }
    }
}

/// The flusher thread: waits for callbacks, syncs once per batch, completes the batch.
fn run(db: &DB, shared: &Shared) {
    loop {
        let batch = {
            let mut queue = shared.lock();
            while queue.pending.is_empty() && !queue.closed {
                queue = shared.wake.wait(queue).unwrap_or_else(PoisonError::into_inner);
            }
            if queue.pending.is_empty() {
                return;
            }
            mem::take(&mut queue.pending)
        };
        // After a failure nothing is synced again: the batch fails with it.
        let result = shared.failure.check().and_then(|()| {
            shared.syncs.fetch_add(1, Ordering::Relaxed);
            db.flush_wal(true).map_err(|error| {
                tracing::error!(%error, callbacks = batch.len(), "WAL sync failed");
                shared.failure.record(format_args!("WAL sync failed: {error}"));
                StoreError::Rocks(error)
            })
        });
        // Counted before completing, so that whoever sees a completion also sees it counted.
        shared.completed.fetch_add(batch.len() as u64, Ordering::Relaxed);
        for callback in batch {
            let outcome = match &result {
                Ok(()) => Ok(()),
                Err(error) => Err(io::Error::other(error.to_string())),
            };
            callback.io_completed(outcome);
        }
    }
}
