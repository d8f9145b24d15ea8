//! The simulated disk: an in-memory, deterministic stand-in for a node's RocksDB directory with
//! an honest crash model, and the backend of the storage seam (`engine.rs`) that runs on it.
//!
//! Owns the disk's column families (`BTreeMap`s, so every scan is in key order, as in RocksDB),
//! the record of which writes are not yet durable, and the flush task that makes them durable.
//! Never uses an OS thread, the wall clock or a source of randomness: on a single-threaded
//! (simulated) runtime, the same calls in the same order leave the same disk and complete the
//! same callbacks in the same order. Every choice a fault needs (how much a crash keeps) is an
//! argument, so the simulator draws it from its seed.
//!
//! The crash model follows what RocksDB, as `rocks.rs` opens it, can leave after a power loss:
//!
//! - A write batch is readable at once and volatile until a sync. The flush task syncs
//!   everything written so far, so one sync covers every write before it, as `flush_wal(true)`
//!   does.
//! - A crash keeps every batch a completed sync covered, and of the later ones a prefix in write
//!   order, of a length the caller chooses ([`SimDisk::crash`]). RocksDB appends batches to its
//!   WAL in write order, and a crash cuts the part of the tail the file system had not written
//!   back; recovery (`TolerateCorruptedTailRecords`, see `rocks.rs`) replays every record and
//!   drops only a torn last one, so what survives is always a prefix. Memtable flushes do not
//!   change that: a flush persists a prefix of the sequence too. (A bad record with others
//!   after it, a flipped bit or a hole the file system left in the tail, makes RocksDB refuse
//!   to open: the disk does not model it, and the node would stay down until readmitted.)
//! - A durable put (a snapshot: `Engine::put_durable`) skips the WAL, and RocksDB flushes its
//!   column family to a synced table file: it is durable once it returns (after the disk's
//!   sync latency), whatever a crash does to the batches around it, and the flush takes every
//!   earlier unsynced write of its family with it. A crash before it returns loses it.
//! - No torn batches. A RocksDB write batch is one WAL record (checksummed per fragment), and
//!   recovery drops a record it cannot read whole; it never applies part of a batch. A torn
//!   write is therefore a lost batch, which the prefix already covers, and the disk offers no
//!   separate tear.
//! - A process that dies without a power loss loses nothing: the operating system still holds
//!   what it wrote. The simulator models it by dropping the node and opening a new `Storage` on
//!   the same disk without calling `crash`.
//! - Opening a `Storage` recovers the disk: everything on it becomes durable, because RocksDB's
//!   recovery writes the replayed WAL to synced table files before it serves (its default
//!   `avoid_flush_during_recovery = false`). Without this, a node could vote or acknowledge on
//!   the strength of entries a later crash would take back, which a real node cannot.
//! - One process at a time: opening a `Storage`, or crashing the disk, fences off the storage
//!   opened before. Its reads, writes and syncs fail with `Fenced`, so a stale task of a dead
//!   process can neither change the disk nor learn that a write is durable.
//!
//! The disk can also break, as the simulator's nemesis asks ([`SimDisk::fail_syncs`],
//! [`SimDisk::fail_writes`], [`SimDisk::set_capacity`]):
//!
//! - A failed sync is Linux's after a writeback error: the writes it should have made durable
//!   may already be gone, and a later sync succeeds without bringing them back ("fsyncgate").
//!   The disk models the worst of it: after a failed sync, the next crash or open discards
//!   every batch not synced before the failure, and every batch written after it, synced or
//!   not (still a prefix of the write order). Only a storage that stops at the first failed
//!   sync (`failure.rs`) never acknowledged any of them.
//! - A failed write, and a write the disk has no room for, change nothing and fail. RocksDB
//!   stops taking writes after either (its background error), and so does the storage.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::mem;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use openraft::storage::IOFlushed;

use statemachine::inject::{self, Bug};

use crate::codec::ColumnFamily;
use crate::error::StoreError;
use crate::failure::Failure;
use crate::types::TypeConfig;

/// One column family of the simulated disk. Values are shared with readers, so a read copies
/// nothing while the disk is locked.
type Family = BTreeMap<Vec<u8>, Arc<Vec<u8>>>;

/// A simulated disk: what one node's database directory holds, outliving the node's process.
/// Cheap to clone; the clones are the same disk.
///
/// The simulator keeps a handle per node, opens the node's storage on it with
/// [`Storage::simulated`](crate::Storage::simulated), and on a power loss calls
/// [`SimDisk::crash`] before opening a new storage on it for the restarted node. See the module
/// documentation of `sim_disk.rs` for the crash model and why it matches RocksDB.
///
/// The constructor takes no options today; faults the seed should drive later (such as a sync
/// latency) will come as a builder, so that `new` keeps meaning "a perfect disk".
#[derive(Clone, Default)]
pub struct SimDisk {
    disk: Arc<Mutex<Disk>>,
}

/// The contents of a simulated disk.
#[derive(Default)]
struct Disk {
    /// Indexed by `ColumnFamily::position`; what a read sees, synced or not.
    families: [Family; 3],
    /// The batches written since the last sync or recovery, oldest first, each kept as the list
    /// of changes that undo it. Undoing the newest ones restores exactly what a crash leaves.
    unsynced: Vec<Vec<Undo>>,
    /// Bumped by every crash and every open: a storage opened at another generation is fenced.
    generation: u64,
    /// How long a flush task waits (on the runtime's clock, simulated under turmoil) before it
    /// syncs: zero by default.
    sync_latency: std::time::Duration,
    /// A deliberately injected bug: report writes durable before their sync.
    ack_before_sync: bool,
    /// Every sync fails while set.
    fail_syncs: bool,
    /// Every write fails while set.
    fail_writes: bool,
    /// The most bytes (keys and values) the disk holds; `None`: no limit.
    capacity: Option<u64>,
    /// The bytes of every key and value on the disk now.
    used: u64,
    /// A sync failed since the last crash or open: the batches in `unsynced`, and every later
    /// one, are lost at the next crash or open, whatever later syncs say.
    doomed: bool,
}

/// How to take back one change of a batch.
enum Undo {
    /// Puts back what `key` held before a put or a delete (`None`: it was absent).
    Restore { family: ColumnFamily, key: Vec<u8>, previous: Option<Arc<Vec<u8>>> },
    /// Puts back the pairs a range deletion removed.
    Reinsert { family: ColumnFamily, pairs: Vec<(Vec<u8>, Arc<Vec<u8>>)> },
}

impl Undo {
    /// The column family the change was made to.
    fn family(&self) -> ColumnFamily {
        match self {
            Undo::Restore { family, .. } | Undo::Reinsert { family, .. } => *family,
        }
    }
}

impl SimDisk {
    /// An empty disk.
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    /// Loses power: keeps every write batch a completed sync covered and the first
    /// `keep_unsynced` of the later ones in write order, and discards the rest (0 is the strictest
    /// crash; `usize::MAX` keeps everything, as a process kill without power loss would). No
    /// batch is ever kept in part. The storage opened on the disk before is fenced off; open a
    /// new one with `Storage::simulated` to restart the node.
    ///
    /// Returns how many batches were discarded.
    pub fn crash(&self, keep_unsynced: usize) -> usize {
        let mut disk = self.lock();
        let keep = if disk.doomed { 0 } else { keep_unsynced.min(disk.unsynced.len()) };
        disk.doomed = false;
        let discarded = disk.unsynced.split_off(keep);
        let lost = discarded.len();
        // Newest first, and within a batch last change first: each undo then sees the disk as
        // it was right after the change it takes back.
        for batch in discarded.into_iter().rev() {
            for undo in batch.into_iter().rev() {
                disk.undo(undo);
            }
        }
        // The kept batches reached the medium before the power went: a second crash before the
        // next open cannot take them back.
        disk.unsynced.clear();
        disk.generation += 1;
        lost
    }

    /// Makes every later sync wait `latency` (simulated time) first, so a crash can hit the
    /// window between a write and its sync (the simulator draws it from its seed).
    pub fn set_sync_latency(&self, latency: std::time::Duration) {
        self.lock().sync_latency = latency;
    }

    /// Injects a bug on purpose, for the simulator to prove it finds it: every `on_durable`
    /// callback is completed at once, before the sync that makes its writes durable (which still
    /// happens later). Raft then counts unsynced entries towards a quorum, so a power loss of a
    /// majority can lose an acknowledged write. Never set outside such a test.
    pub fn inject_ack_before_sync(&self, inject: bool) {
        self.lock().ack_before_sync = inject;
    }

    /// Breaks (or, with `false`, mends) the disk's syncs: while broken, every sync fails, and
    /// the writes it should have made durable are lost at the next crash or open (see the module
    /// documentation of `sim_disk.rs`).
    pub fn fail_syncs(&self, fail: bool) {
        self.lock().fail_syncs = fail;
    }

    /// Breaks (or mends) the disk's writes: while broken, every write fails and changes nothing.
    pub fn fail_writes(&self, fail: bool) {
        self.lock().fail_writes = fail;
    }

    /// Limits the bytes (keys and values) the disk holds: a write that would go beyond fails
    /// and changes nothing. `None` lifts the limit.
    pub fn set_capacity(&self, capacity: Option<u64>) {
        self.lock().capacity = capacity;
    }

    /// The bytes of every key and value on the disk now.
    pub fn used_bytes(&self) -> u64 {
        self.lock().used
    }

    /// The room left under the disk's capacity; `None` without a limit.
    pub fn free_bytes(&self) -> Option<u64> {
        let disk = self.lock();
        disk.capacity.map(|capacity| capacity.saturating_sub(disk.used))
    }

    /// How many write batches a crash now could discard: those written since the last sync or
    /// recovery. A simulator draws `keep_unsynced` for [`SimDisk::crash`] from `0..=` this.
    pub fn unsynced_batches(&self) -> usize {
        self.lock().unsynced.len()
    }

    /// Locks the disk. Every change under the lock is a map insert or removal that cannot panic
    /// half-way (short of an allocation failure, which aborts), and readers change nothing, so
    /// a lock poisoned by a panicking reader still guards a consistent disk.
    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Locks the disk for the storage opened at `generation`.
    ///
    /// # Errors
    ///
    /// `Fenced` if the disk crashed or was opened again since.
    fn lock_for(&self, generation: u64) -> Result<MutexGuard<'_, Disk>, StoreError> {
        let disk = self.lock();
        if disk.generation != generation {
            return Err(StoreError::Fenced);
        }
        Ok(disk)
    }

    /// Recovers the disk for a new storage: everything on it becomes durable and every storage
    /// opened before is fenced off. Returns the new storage's generation.
    fn recover(&self) -> u64 {
        let mut disk = self.lock();
        if disk.doomed {
            // What the failed sync lost, and every later write with it: as a crash keeping none.
            let lost = mem::take(&mut disk.unsynced);
            for batch in lost.into_iter().rev() {
                for undo in batch.into_iter().rev() {
                    disk.undo(undo);
                }
            }
            disk.doomed = false;
        }
        disk.unsynced.clear();
        disk.generation += 1;
        disk.generation
    }
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let disk = self.lock();
        let mut debug = formatter.debug_struct("SimDisk");
        for family in ColumnFamily::ALL {
            debug.field(family.name(), &disk.families[family.position()].len());
        }
        debug
            .field("unsynced_batches", &disk.unsynced.len())
            .field("generation", &disk.generation)
            .finish()
    }
}

impl Disk {
    fn family(&self, family: ColumnFamily) -> &Family {
        &self.families[family.position()]
    }

    fn family_mut(&mut self, family: ColumnFamily) -> &mut Family {
        &mut self.families[family.position()]
    }

    /// Why a write of `incoming` bytes (and, with `syncs`, a sync with it) fails, if it does:
    /// the disk's writes or syncs are broken, or it has no room.
    fn refuses(&self, incoming: u64, syncs: bool) -> Option<StoreError> {
        if self.fail_writes || (syncs && self.fail_syncs) {
            let what = if self.fail_writes { "write" } else { "sync" };
            return Some(StoreError::Io(io::Error::other(format!(
                "simulated {what} failure (EIO)"
            ))));
        }
        if self.capacity.is_some_and(|capacity| self.used + incoming > capacity) {
            return Some(StoreError::NoSpace);
        }
        None
    }

    /// Applies one change and returns how to take it back.
    fn apply(&mut self, operation: Operation) -> Undo {
        match operation {
            Operation::Put { family, key, value } => {
                self.used += size(&key, &value);
                let previous = self.family_mut(family).insert(key.clone(), Arc::new(value));
                self.forget(&key, previous.as_deref());
                Undo::Restore { family, key, previous }
            }
            Operation::Delete { family, key } => {
                let previous = self.family_mut(family).remove(&key);
                self.forget(&key, previous.as_deref());
                Undo::Restore { family, key, previous }
            }
            Operation::DeleteRange { family, start, end } => {
                let map = self.family_mut(family);
                let keys: Vec<Vec<u8>> =
                    range(map, &start, &end).map(|(key, _)| key.clone()).collect();
                let pairs: Vec<(Vec<u8>, Arc<Vec<u8>>)> = keys
                    .into_iter()
                    .filter_map(|key| map.remove(&key).map(|value| (key, value)))
                    .collect();
                for (key, value) in &pairs {
                    self.forget(key, Some(value));
                }
                Undo::Reinsert { family, pairs }
            }
        }
    }

    fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Restore { family, key, previous } => {
                let now = match previous {
                    Some(previous) => {
                        self.used += size(&key, &previous);
                        self.family_mut(family).insert(key.clone(), previous)
                    }
                    None => self.family_mut(family).remove(&key),
                };
                self.forget(&key, now.as_deref());
            }
            Undo::Reinsert { family, pairs } => {
                for (key, value) in pairs {
                    self.used += size(&key, &value);
                    self.family_mut(family).insert(key, value);
                }
            }
        }
    }

    /// Takes a pair that left the disk off `used`.
    fn forget(&mut self, key: &[u8], value: Option<&Vec<u8>>) {
        if let Some(value) = value {
            self.used -= size(key, value);
        }
    }
}

/// The pairs of `map` with `start <= key < end`; none if `start >= end` (where `BTreeMap::range`
/// would panic instead).
fn range<'a>(
    map: &'a Family,
    start: &[u8],
    end: &[u8],
) -> impl DoubleEndedIterator<Item = (&'a Vec<u8>, &'a Arc<Vec<u8>>)> {
    let bounds = (start < end).then_some((Bound::Included(start), Bound::Excluded(end)));
    bounds.into_iter().flat_map(move |bounds| map.range::<[u8], _>(bounds))
}

/// The bytes a pair takes on the simulated disk.
fn size(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

/// One change of a simulated batch.
enum Operation {
    Put { family: ColumnFamily, key: Vec<u8>, value: Vec<u8> },
    Delete { family: ColumnFamily, key: Vec<u8> },
    DeleteRange { family: ColumnFamily, start: Vec<u8>, end: Vec<u8> },
}

/// The storage-seam backend on a [`SimDisk`]: one per `Storage::simulated`.
pub(crate) struct SimEngine {
    shared: Arc<SimShared>,
}

/// What the engine and its flush task share.
struct SimShared {
    disk: SimDisk,
    /// The disk's generation when this engine opened it.
    generation: u64,
    queue: Mutex<FlushQueue>,
    /// Syncs done so far.
    syncs: AtomicU64,
    /// Callbacks completed so far.
    completed: AtomicU64,
    /// The storage's first failure: after it, nothing is written or synced.
    failure: Failure,
}

/// Callbacks waiting for the next sync.
#[derive(Default)]
struct FlushQueue {
    /// `None`: a sync still owed for a callback already completed (the injected bug).
    pending: Vec<Option<IOFlushed<TypeConfig>>>,
    /// A flush task is spawned and has not yet drained the queue: the next callbacks join it.
    scheduled: bool,
}

impl SimEngine {
    /// Opens `disk`: recovers it (everything on it becomes durable) and fences off the engine
    /// opened on it before.
    pub(crate) fn open(disk: SimDisk, failure: Failure) -> SimEngine {
        let generation = disk.recover();
        let shared = SimShared {
            disk,
            generation,
            queue: Mutex::new(FlushQueue::default()),
            syncs: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failure,
        };
        SimEngine { shared: Arc::new(shared) }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Disk>, StoreError> {
        self.shared.disk.lock_for(self.shared.generation)
    }

    /// A second engine on the disk of `engine`, at the same generation and without the
    /// recovery an open does: a process that carries on after a failure with a fresh record of
    /// failures (for a test of what the disk does then).
    #[cfg(test)]
    fn open_without_recovery(engine: &SimEngine, failure: Failure) -> SimEngine {
        let shared = SimShared {
            disk: engine.shared.disk.clone(),
            generation: engine.shared.generation,
            queue: Mutex::new(FlushQueue::default()),
            syncs: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failure,
        };
        SimEngine { shared: Arc::new(shared) }
    }

    /// An empty batch.
    pub(crate) fn batch(&self) -> SimBatch<'_> {
        SimBatch { engine: self, operations: Vec::new() }
    }

    /// See [`Engine::get`](crate::engine::Engine::get).
    pub(crate) fn get(
        &self,
        family: ColumnFamily,
        key: &[u8],
    ) -> Result<Option<Arc<Vec<u8>>>, StoreError> {
        Ok(self.lock()?.family(family).get(key).cloned())
    }

    /// See [`Engine::scan`](crate::engine::Engine::scan).
    pub(crate) fn scan(
        &self,
        family: ColumnFamily,
        start: &[u8],
        end: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<ControlFlow<()>, StoreError>,
    ) -> Result<(), StoreError> {
        let disk = self.lock()?;
        for (key, value) in range(disk.family(family), start, end) {
            if visit(key, value)?.is_break() {
                break;
            }
        }
        Ok(())
    }

    /// See [`Engine::last`](crate::engine::Engine::last).
    pub(crate) fn last<T>(
        &self,
        family: ColumnFamily,
        start: &[u8],
        end: &[u8],
        read: impl FnOnce(&[u8], &[u8]) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let disk = self.lock()?;
        match range(disk.family(family), start, end).next_back() {
            None => Ok(None),
            Some((key, value)) => read(key, value).map(Some),
        }
    }

    /// See [`Engine::put_durable`](crate::engine::Engine::put_durable): waits out the disk's sync
    /// latency (on the runtime's clock, simulated under turmoil), as a real node waits for its
    /// flush, then writes. A crash meanwhile fences this engine off, and the put never happens.
    pub(crate) async fn put_durable(
        &self,
        family: ColumnFamily,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        let latency = self.shared.disk.lock().sync_latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        self.write_durable(family, &key, value)
    }

    /// Stores `value` under `key`, durable at once. Like RocksDB's flush of the family's
    /// memtable, it also makes every earlier unsynced write of `family` durable: a crash no
    /// longer takes those back. A broken disk (its writes or its syncs) or a full one refuses
    /// it, changing nothing.
    fn write_durable(
        &self,
        family: ColumnFamily,
        key: &[u8],
        value: Vec<u8>,
    ) -> Result<(), StoreError> {
        let failure = &self.shared.failure;
        failure.check()?;
        let mut disk = self.lock()?;
        if let Some(error) = disk.refuses(size(key, &value), true) {
            drop(disk);
            failure.record(format_args!("durable write failed: {error}"));
            return Err(error);
        }
        let key = key.to_vec();
        // Durable at once: nothing to undo.
        let _durable = disk.apply(Operation::Put { family, key, value });
        for batch in &mut disk.unsynced {
            batch.retain(|undo| undo.family() != family);
        }
        Ok(())
    }

    /// Queues `callback` for the flush task, spawning one on the current runtime if none is
    /// pending. The sync happens when that task runs, not now: until then a crash can still
    /// discard the write, as on a real disk, and every callback queued meanwhile shares the
    /// sync (group commit).
    pub(crate) fn on_durable(&self, callback: IOFlushed<TypeConfig>) {
        if let Err(failed) = self.shared.failure.check() {
            self.shared.completed.fetch_add(1, Ordering::Relaxed);
            callback.io_completed(Err(io::Error::other(failed)));
            return;
        }
        let callback = if self.shared.disk.lock().ack_before_sync {
            self.shared.completed.fetch_add(1, Ordering::Relaxed);
            callback.io_completed(Ok(()));
            None
        } else {
            Some(callback)
        };
        let mut queue = self.shared.lock_queue();
        queue.pending.push(callback);
        if queue.scheduled {
            return;
        }
        queue.scheduled = true;
        drop(queue);
        let task = FlushTask { shared: Some(Arc::clone(&self.shared)) };
        match tokio::runtime::Handle::try_current() {
            // The sync waits out the disk's latency on the runtime's clock (simulated time
            // under turmoil), so that a crash can land between a write and its sync.
            Ok(runtime) => {
                let latency = self.shared.disk.lock().sync_latency;
                drop(runtime.spawn(async move {
                    if !latency.is_zero() {
                        tokio::time::sleep(latency).await;
                    }
                    task.run()
                }))
            }
            // Outside a runtime there is nothing to defer to: syncing now is still correct.
            Err(_) => task.run(),
        }
    }

    /// See [`SimDisk::free_bytes`].
    pub(crate) fn free_bytes(&self) -> Option<u64> {
        self.shared.disk.free_bytes()
    }

    /// Syncs done since this engine was opened.
    pub(crate) fn sync_count(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// `on_durable` callbacks completed since this engine was opened.
    pub(crate) fn completed_count(&self) -> u64 {
        self.shared.completed.load(Ordering::Relaxed)
    }
}

impl SimShared {
    /// Locks the flush queue; every critical section is a push, a take or a flag, so a poisoned
    /// lock still guards a consistent queue.
    fn lock_queue(&self) -> MutexGuard<'_, FlushQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Syncs and completes callbacks until the queue is empty, then lets the next callback spawn
    /// a new task.
    fn flush(&self) {
        loop {
            let callbacks = {
                let mut queue = self.lock_queue();
                if queue.pending.is_empty() {
                    queue.scheduled = false;
                    return;
                }
                mem::take(&mut queue.pending)
            };
            let synced = self.failure.check().and_then(|()| self.sync());
            let callbacks: Vec<_> = callbacks.into_iter().flatten().collect();
            // Counted before completing, so that whoever sees a completion also sees it counted.
            self.completed.fetch_add(callbacks.len() as u64, Ordering::Relaxed);
            for callback in callbacks {
                callback.io_completed(match &synced {
                    Ok(()) => Ok(()),
                    Err(error) => Err(io::Error::other(error.to_string())),
                });
            }
        }
    }

    /// Makes everything written so far durable, or says why not: this engine was fenced off
    /// (whatever it wrote may be gone and its callbacks must not hear otherwise), or the disk's
    /// sync failed, which is the storage's failure from now on.
    fn sync(&self) -> Result<(), StoreError> {
        let mut disk = self.disk.lock_for(self.generation)?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if disk.fail_syncs {
            disk.doomed = true;
            drop(disk);
            let error = StoreError::Io(io::Error::other("simulated sync failure (EIO)"));
            // The planted bug: fail this sync's waiters only, and believe the next sync.
            if !inject::on(Bug::IgnoreFailedSync) {
                self.failure.record(format_args!("sync failed: {error}"));
            }
            return Err(error);
        }
        // After a failed sync the disk reports success again, as Linux does, but what the failed
        // one lost stays lost, and so does everything after it: nothing becomes durable.
        if !disk.doomed {
            disk.unsynced.clear();
        }
        Ok(())
    }

    /// Completes every queued callback with an error, without a sync.
    fn fail_pending(&self) {
        let callbacks = {
            let mut queue = self.lock_queue();
            queue.scheduled = false;
            mem::take(&mut queue.pending)
        };
        let callbacks: Vec<_> = callbacks.into_iter().flatten().collect();
        self.completed.fetch_add(callbacks.len() as u64, Ordering::Relaxed);
        for callback in callbacks {
            callback.io_completed(Err(io::Error::other(StoreError::FlusherStopped)));
        }
    }
}

/// A spawned flush. If its runtime drops it before it runs (the simulated process is gone), it
/// fails the queued callbacks instead of dropping them, and never syncs: a dying process must
/// not make its writes durable behind the crash model's back.
struct FlushTask {
    /// `None` once the task ran.
    shared: Option<Arc<SimShared>>,
}

impl FlushTask {
    fn run(mut self) {
        if let Some(shared) = self.shared.take() {
            shared.flush();
        }
    }
}

impl Drop for FlushTask {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.fail_pending();
        }
    }
}

/// The changes of one simulated write batch, applied together by [`SimBatch::write`].
pub(crate) struct SimBatch<'a> {
    engine: &'a SimEngine,
    operations: Vec<Operation>,
}

impl SimBatch<'_> {
    /// Stores `value` under `key` when the batch is written.
    pub(crate) fn put(&mut self, family: ColumnFamily, key: &[u8], value: Vec<u8>) {
        self.operations.push(Operation::Put { family, key: key.to_vec(), value });
    }

    /// Removes `key` when the batch is written.
    pub(crate) fn delete(&mut self, family: ColumnFamily, key: &[u8]) {
        self.operations.push(Operation::Delete { family, key: key.to_vec() });
    }

    /// Removes every key with `start <= key < end` when the batch is written.
    pub(crate) fn delete_range(&mut self, family: ColumnFamily, start: &[u8], end: &[u8]) {
        let (start, end) = (start.to_vec(), end.to_vec());
        self.operations.push(Operation::DeleteRange { family, start, end });
    }

    /// Applies every change under one lock (atomic for readers), and records the batch as
    /// unsynced. An empty batch records nothing, as it would write nothing to a WAL.
    pub(crate) fn write(self) -> Result<(), StoreError> {
        let failure = &self.engine.shared.failure;
        failure.check()?;
        let mut disk = self.engine.lock()?;
        if self.operations.is_empty() {
            return Ok(());
        }
        let incoming: u64 = self
            .operations
            .iter()
            .map(|operation| match operation {
                Operation::Put { key, value, .. } => size(key, value),
                Operation::Delete { .. } | Operation::DeleteRange { .. } => 0,
            })
            .sum();
        if let Some(error) = disk.refuses(incoming, false) {
            drop(disk);
            failure.record(format_args!("write failed: {error}"));
            return Err(error);
        }
        let undo = self.operations.into_iter().map(|operation| disk.apply(operation)).collect();
        disk.unsynced.push(undo);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use openraft::type_config::TypeConfigExt;

    use super::*;

    const LOGS: ColumnFamily = ColumnFamily::Logs;

    /// Every pair of the `logs` family, as strings.
    fn contents(engine: &SimEngine) -> Vec<(String, String)> {
        let mut pairs = Vec::new();
        engine
            .scan(LOGS, b"", b"\xff", |key, value| {
                let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
                pairs.push((text(key), text(value)));
                Ok(ControlFlow::Continue(()))
            })
            .expect("the engine is open");
        pairs
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected.iter().map(|&(key, value)| (key.to_owned(), value.to_owned())).collect()
    }

    /// A disk holding a=1, b=2, c=3 durably, then three unsynced batches: (a=10, a=11, delete b),
    /// (delete a..d), (b=20).
    fn disk_with_three_unsynced_batches() -> Result<(SimDisk, SimEngine), StoreError> {
        let disk = SimDisk::new();
        let first = SimEngine::open(disk.clone(), Failure::new());
        let mut batch = first.batch();
        for (key, value) in [("a", "1"), ("b", "2"), ("c", "3")] {
            batch.put(LOGS, key.as_bytes(), value.as_bytes().to_vec());
        }
        batch.write()?;
        // Opening again recovers the disk: the three pairs are durable.
        let engine = SimEngine::open(disk.clone(), Failure::new());
        let mut batch = engine.batch();
        batch.put(LOGS, b"a", b"10".to_vec());
        batch.put(LOGS, b"a", b"11".to_vec());
        batch.delete(LOGS, b"b");
        batch.write()?;
        let mut batch = engine.batch();
        batch.delete_range(LOGS, b"a", b"d");
        batch.write()?;
        let mut batch = engine.batch();
        batch.put(LOGS, b"b", b"20".to_vec());
        batch.write()?;
        engine.batch().write()?;
        Ok((disk, engine))
    }

    #[test]
    fn a_crash_undoes_overwrites_deletes_and_range_deletes_newest_first() -> Result<(), StoreError>
    {
        let expected = [
            pairs(&[("a", "1"), ("b", "2"), ("c", "3")]),
            pairs(&[("a", "11"), ("c", "3")]),
            pairs(&[]),
            pairs(&[("b", "20")]),
        ];
        for (keep, expected) in expected.iter().enumerate() {
            let (disk, engine) = disk_with_three_unsynced_batches()?;
            assert_eq!(contents(&engine), pairs(&[("b", "20")]), "every write is readable");
            assert_eq!(disk.unsynced_batches(), 3, "an empty batch is no batch");
            assert_eq!(disk.crash(keep), 3 - keep);
            assert!(matches!(engine.get(LOGS, b"b"), Err(StoreError::Fenced)));
            let recovered = SimEngine::open(disk, Failure::new());
            assert_eq!(&contents(&recovered), expected, "keep {keep}");
        }
        let (disk, _engine) = disk_with_three_unsynced_batches()?;
        assert_eq!(disk.crash(usize::MAX), 0);
        assert_eq!(contents(&SimEngine::open(disk, Failure::new())), pairs(&[("b", "20")]));
        Ok(())
    }

    #[test]
    fn empty_or_inverted_ranges_read_nothing() -> Result<(), StoreError> {
        let (_disk, engine) = disk_with_three_unsynced_batches()?;
        for (start, end) in [(&b"b"[..], &b"b"[..]), (b"c", b"a")] {
            let mut visited = 0;
            engine.scan(LOGS, start, end, |_, _| {
                visited += 1;
                Ok(ControlFlow::Continue(()))
            })?;
            assert_eq!(visited, 0);
            assert_eq!(engine.last(LOGS, start, end, |_, _| Ok(()))?, None);
        }
        assert_eq!(engine.last(LOGS, b"a", b"c", |key, _| Ok(key.to_vec()))?, Some(b"b".to_vec()));
        Ok(())
    }

    #[test]
    fn a_sync_makes_every_earlier_batch_durable() -> Result<(), StoreError> {
        let (disk, engine) = disk_with_three_unsynced_batches()?;
        // Outside a runtime, `on_durable` syncs at once.
        let (sender, receiver) = TypeConfig::oneshot();
        engine.on_durable(IOFlushed::signal(sender));
        assert_eq!(disk.unsynced_batches(), 0, "synced before `on_durable` returned");
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        assert!(matches!(runtime.block_on(receiver), Ok(Ok(()))));
        assert_eq!((engine.sync_count(), engine.completed_count()), (1, 1));
        assert_eq!(disk.crash(0), 0);
        assert_eq!(contents(&SimEngine::open(disk, Failure::new())), pairs(&[("b", "20")]));
        Ok(())
    }

    /// Waits for one durability callback of `engine` and returns its outcome.
    fn durable(engine: &SimEngine) -> Result<(), String> {
        let (sender, receiver) = TypeConfig::oneshot();
        engine.on_durable(IOFlushed::signal(sender));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|error| error.to_string())?;
        match runtime.block_on(receiver) {
            Ok(result) => result.map_err(|error| error.to_string()),
            Err(_) => Err("the callback was dropped".to_owned()),
        }
    }

    fn put(engine: &SimEngine, key: &str, value: &str) -> Result<(), StoreError> {
        let mut batch = engine.batch();
        batch.put(LOGS, key.as_bytes(), value.as_bytes().to_vec());
        batch.write()
    }

    #[test]
    fn a_failed_sync_stops_the_storage_and_loses_what_it_did_not_sync() -> Result<(), StoreError> {
        let disk = SimDisk::new();
        let failure = Failure::new();
        let engine = SimEngine::open(disk.clone(), failure.clone());
        put(&engine, "a", "1")?;
        assert_eq!(durable(&engine), Ok(()));
        put(&engine, "b", "2")?;
        disk.fail_syncs(true);
        let error = durable(&engine).expect_err("the sync fails");
        assert!(error.contains("sync failure"), "{error}");
        assert!(failure.get().is_some_and(|reason| reason.contains("sync failed")));
        // The disk works again, but the storage does not carry on: every write and durability
        // wait is refused.
        disk.fail_syncs(false);
        assert!(matches!(put(&engine, "c", "3"), Err(StoreError::Failed(_))));
        let error = durable(&engine).expect_err("refused after the failure");
        assert!(error.contains("failed earlier"), "{error}");
        // Readers still see the unsynced write, as the page cache would...
        assert_eq!(contents(&engine), pairs(&[("a", "1"), ("b", "2")]));
        // ...but the restarted node does not: the failed sync lost it.
        let restarted = SimEngine::open(disk.clone(), Failure::new());
        assert_eq!(contents(&restarted), pairs(&[("a", "1")]));
        assert_eq!(disk.used_bytes(), 2, "what is left: a=1");
        Ok(())
    }

    #[test]
    fn after_a_failed_sync_a_later_sync_that_succeeds_vouches_for_nothing() -> Result<(), StoreError>
    {
        // A storage that ignored the failure (the planted bug's behaviour, done here by hand
        // with a fresh failure record) hears `Ok` from the next sync; the disk still loses
        // everything from the failed sync on, which is why the storage must stop.
        let disk = SimDisk::new();
        let engine = SimEngine::open(disk.clone(), Failure::new());
        put(&engine, "a", "1")?;
        disk.fail_syncs(true);
        assert!(durable(&engine).is_err());
        disk.fail_syncs(false);
        let carrying_on = SimEngine::open_without_recovery(&engine, Failure::new());
        put(&carrying_on, "b", "2")?;
        assert_eq!(durable(&carrying_on), Ok(()), "Linux reports the retried sync as done");
        assert_eq!(disk.crash(usize::MAX), 2, "a and b are lost all the same");
        assert_eq!(contents(&SimEngine::open(disk, Failure::new())), pairs(&[]));
        Ok(())
    }

    #[test]
    fn a_failed_or_full_write_changes_nothing_and_stops_the_storage() -> Result<(), StoreError> {
        let disk = SimDisk::new();
        let engine = SimEngine::open(disk.clone(), Failure::new());
        put(&engine, "a", "1")?;
        disk.fail_writes(true);
        assert!(matches!(put(&engine, "b", "2"), Err(StoreError::Io(_))));
        disk.fail_writes(false);
        assert!(matches!(put(&engine, "b", "2"), Err(StoreError::Failed(_))));
        assert_eq!(contents(&engine), pairs(&[("a", "1")]));

        let engine = SimEngine::open(disk.clone(), Failure::new());
        disk.set_capacity(Some(disk.used_bytes() + 3));
        assert_eq!(disk.free_bytes(), Some(3));
        put(&engine, "b", "2")?;
        assert_eq!(disk.free_bytes(), Some(1));
        assert!(matches!(put(&engine, "c", "3"), Err(StoreError::NoSpace)));
        assert_eq!(contents(&engine), pairs(&[("a", "1"), ("b", "2")]));
        // Room again: a restarted storage writes; the failed one stays stopped.
        disk.set_capacity(None);
        assert!(matches!(put(&engine, "c", "3"), Err(StoreError::Failed(_))));
        let restarted = SimEngine::open(disk.clone(), Failure::new());
        put(&restarted, "c", "3")?;
        assert_eq!(contents(&restarted), pairs(&[("a", "1"), ("b", "2"), ("c", "3")]));
        Ok(())
    }

    #[test]
    fn a_durable_put_outlives_a_crash_with_its_family_but_not_the_other_batches()
    -> Result<(), StoreError> {
        const SNAPSHOTS: ColumnFamily = ColumnFamily::Snapshots;
        let (disk, engine) = disk_with_three_unsynced_batches()?;
        let mut batch = engine.batch();
        batch.put(SNAPSHOTS, b"old", b"batched".to_vec());
        batch.put(LOGS, b"z", b"26".to_vec());
        batch.write()?;
        engine.write_durable(SNAPSHOTS, b"new", b"durable".to_vec())?;
        assert_eq!(engine.get(SNAPSHOTS, b"new")?.as_deref(), Some(&b"durable".to_vec()));
        assert_eq!(disk.unsynced_batches(), 4, "the batches are not synced by it");
        assert_eq!(engine.sync_count(), 0);

        assert_eq!(disk.crash(0), 4);
        let recovered = SimEngine::open(disk.clone(), Failure::new());
        assert_eq!(contents(&recovered), pairs(&[("a", "1"), ("b", "2"), ("c", "3")]));
        // The earlier write of the same family became durable with it, as RocksDB's flush of
        // the family's memtable makes it.
        assert_eq!(recovered.get(SNAPSHOTS, b"new")?.as_deref(), Some(&b"durable".to_vec()));
        assert_eq!(recovered.get(SNAPSHOTS, b"old")?.as_deref(), Some(&b"batched".to_vec()));
        let logs: usize =
            contents(&recovered).iter().map(|(key, value)| key.len() + value.len()).sum();
        assert_eq!(disk.used_bytes(), (logs + "newdurable".len() + "oldbatched".len()) as u64);
        Ok(())
    }

    #[test]
    fn a_broken_or_full_disk_refuses_a_durable_put_and_stops_the_storage() -> Result<(), StoreError>
    {
        const SNAPSHOTS: ColumnFamily = ColumnFamily::Snapshots;
        for break_disk in [
            |disk: &SimDisk| disk.fail_syncs(true),
            |disk: &SimDisk| disk.fail_writes(true),
            |disk: &SimDisk| disk.set_capacity(Some(disk.used_bytes() + 1)),
        ] {
            let disk = SimDisk::new();
            let failure = Failure::new();
            let engine = SimEngine::open(disk.clone(), failure.clone());
            engine.write_durable(SNAPSHOTS, b"a", b"1".to_vec())?;
            break_disk(&disk);
            assert!(engine.write_durable(SNAPSHOTS, b"b", b"2".to_vec()).is_err());
            assert!(failure.get().is_some_and(|reason| reason.contains("durable write failed")));
            assert_eq!(engine.get(SNAPSHOTS, b"b")?, None, "it changed nothing");
            assert!(matches!(
                engine.write_durable(SNAPSHOTS, b"c", b"3".to_vec()),
                Err(StoreError::Failed(_))
            ));
        }
        Ok(())
    }

    #[test]
    fn used_bytes_follow_writes_deletes_and_crashes() -> Result<(), StoreError> {
        let (disk, engine) = disk_with_three_unsynced_batches()?;
        let sum = |engine: &SimEngine| -> u64 {
            contents(engine).iter().map(|(key, value)| (key.len() + value.len()) as u64).sum()
        };
        assert_eq!(disk.used_bytes(), sum(&engine));
        for keep in 0..=3 {
            let (disk, _engine) = disk_with_three_unsynced_batches()?;
            disk.crash(keep);
            let recovered = SimEngine::open(disk.clone(), Failure::new());
            assert_eq!(disk.used_bytes(), sum(&recovered), "keep {keep}");
        }
        Ok(())
    }
}
