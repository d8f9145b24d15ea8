//! Deliberately broken builds, for proving that the checks catch what they claim to: each
//! [`Bug`] is a known way to get the booking rules or the replication wrong, planted where it
//! would really happen. The simulator (`scripts/sim.sh --inject NAME --expect-invalid`) and the
//! Jepsen suite (`jepsen test --inject NAME`, running `bookingd-unsafe`) switch one on and must
//! judge the run invalid.
//!
//! Only the `inject` feature can switch a bug on ([`set`]); without it [`on`] is `false`
//! for every bug, a constant the compiler removes with the code behind it, so `bookingd` and the
//! benchmarks carry none of this. The switch is process-wide: a simulated run switches it on for
//! its whole cluster (every replica breaks alike, as one broken release would) and off again
//! before the checkers judge, because the checkers' model is this crate too.

/// A deliberately planted bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bug {
    /// The simulated disk reports writes durable before it syncs them (simulator only: real
    /// disks are the kernel's).
    AckBeforeSync,
    /// The leader counts entries stored on a follower as soon as it sent them, not when the
    /// follower answered: it commits, and acknowledges clients, without a quorum.
    AckBeforeCommit,
    /// A read that must be linearizable is served from the node's own replica, without
    /// ReadIndex or a leadership check, so a deposed leader answers from what it had.
    StaleRead,
    /// The admission lane grants the second waiter in line instead of the first.
    FifoSkip,
    /// Serving the waitlist offers the seats of a new offer to the next waiter as well: two
    /// open offers for one seat.
    TwoOffers,
    /// A failed sync fails only the writes waiting on it, and the storage carries on: the next
    /// sync succeeds and is believed, though the writes before it may be gone (PostgreSQL's
    /// "fsyncgate"). Simulator only: a real disk's sync cannot be made to fail on demand.
    IgnoreFailedSync,
    /// A successful payment confirms its hold though the payment deadline passed, as long as no
    /// tick swept the hold yet (the check of the deadline forgotten, the hold's state trusted).
    ConfirmLate,
    /// A snapshot reads back as ending where the log was purged, though its state holds the
    /// entries after that, and the guards that would refuse it (the restore's check of the
    /// snapshot's position, the store's and the group's applied index) are gone: a restarted
    /// replica, or a follower that installs the snapshot, applies those entries a second time.
    ApplyTwice,
    /// A waitlist offer is accepted though its deadline passed, as long as no sweep expired it
    /// yet (the check of the deadline forgotten, the offer's state trusted).
    AcceptLate,
}

impl Bug {
    /// Every bug, in the order `--list-injections` prints them.
    pub const ALL: [Bug; 9] = [
        Bug::AckBeforeSync,
        Bug::AckBeforeCommit,
        Bug::StaleRead,
        Bug::FifoSkip,
        Bug::TwoOffers,
        Bug::IgnoreFailedSync,
        Bug::ConfirmLate,
        Bug::ApplyTwice,
        Bug::AcceptLate,
    ];

    /// Its command-line name.
    pub const fn name(self) -> &'static str {
        match self {
            Bug::AckBeforeSync => "ack-before-sync",
            Bug::AckBeforeCommit => "ack-before-commit",
            Bug::StaleRead => "stale-read",
            Bug::FifoSkip => "fifo-skip",
            Bug::TwoOffers => "two-offers",
            Bug::IgnoreFailedSync => "ignore-failed-sync",
            Bug::ConfirmLate => "confirm-late",
            Bug::ApplyTwice => "apply-twice",
            Bug::AcceptLate => "accept-late",
        }
    }

    /// Whether real processes can have it (`bookingd-unsafe --inject`); the others exist only
    /// in the simulator.
    pub const fn in_processes(self) -> bool {
        !matches!(self, Bug::AckBeforeSync | Bug::IgnoreFailedSync)
    }

    const fn bit(self) -> u32 {
        1 << self as u32
    }
}

impl std::fmt::Display for Bug {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Bug {
    type Err = String;
    fn from_str(name: &str) -> Result<Bug, String> {
        Bug::ALL.into_iter().find(|bug| bug.name() == name).ok_or_else(|| {
            let names: Vec<&str> = Bug::ALL.iter().map(|bug| bug.name()).collect();
            format!("unknown injection {name:?}: one of {}", names.join(", "))
        })
    }
}

#[cfg(feature = "inject")]
static ACTIVE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Whether `bug` is switched on in this process.
#[cfg(feature = "inject")]
#[inline]
pub fn on(bug: Bug) -> bool {
    ACTIVE.load(std::sync::atomic::Ordering::Relaxed) & bug.bit() != 0
}

/// Whether `bug` is switched on: never, in a build without the `inject` feature.
#[cfg(not(feature = "inject"))]
#[inline(always)]
pub const fn on(bug: Bug) -> bool {
    let _ = bug.bit();
    false
}

/// Switches exactly `bugs` on in this process (none: every bug off).
#[cfg(feature = "inject")]
pub fn set(bugs: &[Bug]) {
    let bits = bugs.iter().fold(0, |bits, bug| bits | bug.bit());
    ACTIVE.store(bits, std::sync::atomic::Ordering::Relaxed);
}

/// The bugs switched on in this process.
pub fn active() -> Vec<Bug> {
    Bug::ALL.into_iter().filter(|bug| on(*bug)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for bug in Bug::ALL {
            assert_eq!(bug.name().parse::<Bug>(), Ok(bug));
        }
        let error = "fifo".parse::<Bug>().expect_err("not a bug's name");
        assert!(error.contains("fifo-skip"), "{error}");
    }
}
