//! The disk-space guard: a node whose data directory's file system is nearly full refuses client
//! writes, before they reach the log, and takes them again as soon as there is room.
//!
//! Owns the reserve rule and a cached probe of the free space. Never touches the disk itself
//! (the storage asks the file system) and never stops the node: a disk that does fill up fails a
//! write, and the storage's fail-stop (`raft`'s `failure.rs`) stops the node instead. The reserve
//! is what keeps that rare: Raft's own traffic (a follower's appends, votes, snapshots) and the
//! leader's expiries still have room after client writes stop, as etcd's space quota and
//! CockroachDB's ballast keep theirs.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::ApiError;

/// The free space kept in reserve unless `--disk-reserve-bytes` says otherwise.
pub const RESERVE_BYTES_DEFAULT: u64 = 64 << 20;

/// How long a probe of the free space is trusted: a write checks it at most this often, not
/// once per request.
const PROBE_TTL: Duration = Duration::from_millis(100);

/// Refuses client writes while the disk is nearly full.
pub struct DiskGuard {
    storage: raft::Storage,
    reserve_bytes: u64,
    probe: Mutex<Option<(Instant, Option<u64>)>>,
}

impl DiskGuard {
    /// A guard of `storage` keeping `reserve_bytes` free (0: never refuses).
    pub fn new(storage: raft::Storage, reserve_bytes: u64) -> DiskGuard {
        DiskGuard { storage, reserve_bytes, probe: Mutex::new(None) }
    }

    /// The free bytes, probed at most every [`PROBE_TTL`] (on the runtime's clock: simulated
    /// time under the simulator); `None` if the storage cannot say.
    pub fn free_bytes(&self) -> Option<u64> {
        let now = Instant::now();
        let mut probe = self.probe.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match *probe {
            Some((at, free)) if now.duration_since(at) < PROBE_TTL => free,
            _ => {
                let free = self.storage.free_bytes();
                *probe = Some((now, free));
                free
            }
        }
    }

    /// `Ok` if a client write may be proposed now.
    ///
    /// # Errors
    ///
    /// `DiskFull` while the free space is under the reserve.
    pub fn check_write(&self) -> Result<(), ApiError> {
        if self.reserve_bytes == 0 {
            return Ok(());
        }
        match self.free_bytes() {
            Some(free) if free < self.reserve_bytes => Err(ApiError::DiskFull(format!(
                "the node's disk has {free} bytes free, under its reserve of {} \
                 (--disk-reserve-bytes): writes are refused until there is room, reads are served",
                self.reserve_bytes
            ))),
            _ => Ok(()),
        }
    }
}
