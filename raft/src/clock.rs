//! Wall-clock time as a node reads it: the leader's stamp on every entry (which apply turns
//! into log time) and the leader-only workers' "is anything due" check.
//!
//! Owns the [`WallClock`] seam and its system implementation. The simulator gives each node a
//! clock of its own, driven by simulated time and skewable, so that a run is replayable and a
//! skewed leader can be tested. Never used for deciding anything in the state machine: log time
//! is decided by apply (`max(previous, stamped)`), whatever a clock says.

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock milliseconds since the Unix epoch.
///
/// An implementation must: be cheap (it is read for every proposed entry); never panic; and may
/// jump or go backwards (apply keeps log time monotonic).
pub trait WallClock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The machine's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> u64 {
        let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
    }
}

/// A shared clock. Cheap to clone. The default is the machine's clock.
#[derive(Clone)]
pub struct Clock(Arc<dyn WallClock>);

impl Clock {
    /// The machine's clock.
    pub fn system() -> Clock {
        Clock(Arc::new(SystemClock))
    }

    /// A clock reading `source`.
    pub fn new(source: impl WallClock) -> Clock {
        Clock(Arc::new(source))
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        self.0.now_ms()
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock(..)")
    }
}
