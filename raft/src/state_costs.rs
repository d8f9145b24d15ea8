//! What keeping one group's state costs on this node: snapshots built and installed, and the
//! copies an apply makes of the state while a snapshot builder, a backup or an auditor
//! checkpoint still shares it (`Arc::make_mut` under the group's write lock: the stall every
//! apply and read behind it waits out).
//!
//! Counted by the state-machine store, read by the node's metrics and by the benchmark, which
//! reports how many snapshots each run contained. Times are wall-clock measurements only; no
//! decision depends on them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The counters, shared by a store and its readers.
#[derive(Debug, Default)]
pub(crate) struct StateCosts {
    built: AtomicU64,
    build_micros_last: AtomicU64,
    bytes_last: AtomicU64,
    shows_reused: AtomicU64,
    shows_encoded: AtomicU64,
    installed: AtomicU64,
    install_micros_last: AtomicU64,
    copies: AtomicU64,
    copy_micros_total: AtomicU64,
    copy_micros_max: AtomicU64,
}

/// The counters as they were when read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateCostCounts {
    /// Snapshots this node built of the group since it started.
    pub snapshots_built: u64,
    /// How long the last build took: encoding off the lock, then writing and syncing it.
    pub last_build: Duration,
    /// The size of the last snapshot built or installed.
    pub last_snapshot_bytes: u64,
    /// Shows whose bytes and checks builds reused, unchanged since the build before
    /// (`statemachine::ShowEncodings`).
    pub snapshot_shows_reused: u64,
    /// Shows builds encoded and checked afresh.
    pub snapshot_shows_encoded: u64,
    /// Snapshots this node installed from a leader.
    pub snapshots_installed: u64,
    /// How long the last install took: decoding, checking, writing and syncing it.
    pub last_install: Duration,
    /// Applies that had to copy the state because something else still shared it.
    pub state_copies: u64,
    /// Their total time under the write lock.
    pub state_copy_total: Duration,
    /// The longest of them.
    pub state_copy_max: Duration,
}

fn micros(took: Duration) -> u64 {
    u64::try_from(took.as_micros()).unwrap_or(u64::MAX)
}

impl StateCosts {
    pub(crate) fn built(&self, took: Duration, bytes: usize, shows: (usize, usize)) {
        self.built.fetch_add(1, Ordering::Relaxed);
        self.build_micros_last.store(micros(took), Ordering::Relaxed);
        self.bytes_last.store(bytes as u64, Ordering::Relaxed);
        let (reused, encoded) = shows;
        self.shows_reused.fetch_add(reused as u64, Ordering::Relaxed);
        self.shows_encoded.fetch_add(encoded as u64, Ordering::Relaxed);
    }

    pub(crate) fn installed(&self, took: Duration, bytes: usize) {
        self.installed.fetch_add(1, Ordering::Relaxed);
        self.install_micros_last.store(micros(took), Ordering::Relaxed);
        self.bytes_last.store(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn copied(&self, took: Duration) {
        self.copies.fetch_add(1, Ordering::Relaxed);
        self.copy_micros_total.fetch_add(micros(took), Ordering::Relaxed);
        self.copy_micros_max.fetch_max(micros(took), Ordering::Relaxed);
    }

    pub(crate) fn counts(&self) -> StateCostCounts {
        let duration = |micros: &AtomicU64| Duration::from_micros(micros.load(Ordering::Relaxed));
        StateCostCounts {
            snapshots_built: self.built.load(Ordering::Relaxed),
            last_build: duration(&self.build_micros_last),
            last_snapshot_bytes: self.bytes_last.load(Ordering::Relaxed),
            snapshot_shows_reused: self.shows_reused.load(Ordering::Relaxed),
            snapshot_shows_encoded: self.shows_encoded.load(Ordering::Relaxed),
            snapshots_installed: self.installed.load(Ordering::Relaxed),
            last_install: duration(&self.install_micros_last),
            state_copies: self.copies.load(Ordering::Relaxed),
            state_copy_total: duration(&self.copy_micros_total),
            state_copy_max: duration(&self.copy_micros_max),
        }
    }
}
