//! The retry policy: how long a logical call may take, how long one attempt may take, and how
//! long to wait between attempts that had no leader hint to follow.
//!
//! Owns the numbers and the backoff sequence. Never sleeps and never calls a node (the call loop
//! in `client.rs` does both).

use std::net::IpAddr;
use std::time::Duration;

/// The default total time a logical call may take, retries and sleeps included.
pub const RETRY_BUDGET_DEFAULT_MS: u64 = 10_000;
/// The default first wait after an attempt that found no leader.
pub const BACKOFF_INITIAL_DEFAULT_MS: u64 = 50;
/// The default longest wait between two attempts. Short because the cluster's failover is (its
/// groups answer again 0.6-0.8 s after a leader's death): with 1 s, a call caught by a kill
/// was answered up to 1.6 s after it, its last wait overshooting the new leader by most of a
/// second; with 250 ms it waits at most a quarter of one past it.
pub const BACKOFF_MAX_DEFAULT_MS: u64 = 250;
/// The default time one attempt may take (admin calls that wait for a catch-up get the whole
/// remaining budget instead).
pub const ATTEMPT_TIMEOUT_DEFAULT_MS: u64 = 3_000;
/// The default time to open a connection to a node.
pub const CONNECT_TIMEOUT_DEFAULT_MS: u64 = 500;
/// The default interval of HTTP/2 pings on a connection, and how long a ping may go unanswered
/// before the connection is dropped and the next call reconnects.
pub const KEEP_ALIVE_DEFAULT_MS: u64 = 10_000;
/// The default of [`Config::hold_batches_in_flight_max`].
pub const HOLD_BATCHES_IN_FLIGHT_DEFAULT: usize = 4;
/// How many leader hints in a row are followed at once; after that each hint waits one backoff,
/// so two nodes with stale views cannot make a call spin.
pub const HINTS_IMMEDIATE_MAX: u32 = 3;

/// How the client retries and bounds its calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The total time a logical call may take before it fails with
    /// [`crate::Error::Unavailable`].
    pub retry_budget: Duration,
    /// The first wait after an attempt without a leader hint; doubled after each such attempt.
    pub backoff_initial: Duration,
    /// The longest wait between two attempts.
    pub backoff_max: Duration,
    /// The time one attempt may take.
    pub attempt_timeout: Duration,
    /// The time to open a connection to a node.
    pub connect_timeout: Duration,
    /// How often an open connection is pinged, and how long a ping may go unanswered before the
    /// connection is dropped (a node cut off without a reset would otherwise hold the
    /// connection, and every call on it would time out, until the operating system gives up).
    pub keep_alive: Duration,
    /// How many `HoldMany` calls the client keeps in flight at once, packing the holds of
    /// concurrent callers into them (holds queue up while every slot is busy, so the next call
    /// carries them all); 0 sends each hold as its own `Hold` call.
    pub hold_batches_in_flight_max: usize,
    /// The local address the client's connections come from (any port); `None` lets the
    /// operating system pick. A front-end on a host with several addresses names the one its
    /// firewall rules know; a test gives each simulated buyer its own, so that a fault can cut
    /// one buyer off from one node (connections through a [`Connector`](crate::Connector)
    /// ignore it).
    pub local_address: Option<IpAddr>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            retry_budget: Duration::from_millis(RETRY_BUDGET_DEFAULT_MS),
            backoff_initial: Duration::from_millis(BACKOFF_INITIAL_DEFAULT_MS),
            backoff_max: Duration::from_millis(BACKOFF_MAX_DEFAULT_MS),
            attempt_timeout: Duration::from_millis(ATTEMPT_TIMEOUT_DEFAULT_MS),
            connect_timeout: Duration::from_millis(CONNECT_TIMEOUT_DEFAULT_MS),
            keep_alive: Duration::from_millis(KEEP_ALIVE_DEFAULT_MS),
            hold_batches_in_flight_max: HOLD_BATCHES_IN_FLIGHT_DEFAULT,
            local_address: None,
        }
    }
}

/// The waits between attempts of one logical call: `initial`, doubling, capped at `max`.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    /// The next wait.
    next: Duration,
    /// The cap.
    max: Duration,
}

impl Backoff {
    /// The sequence of a config.
    pub(crate) fn new(config: &Config) -> Backoff {
        let max = config.backoff_max.max(Duration::from_millis(1));
        Backoff { next: config.backoff_initial.clamp(Duration::from_millis(1), max), max }
    }

    /// Returns the next wait and doubles the one after it, up to the cap.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_initial_up_to_max() {
        let mut backoff = Backoff::new(&Config::default());
        let waits: Vec<u128> = (0..8).map(|_| backoff.next_wait().as_millis()).collect();
        assert_eq!(waits, [50, 100, 200, 250, 250, 250, 250, 250]);
    }

    #[test]
    fn backoff_bounds_hold_for_odd_configs() {
        let config = Config {
            backoff_initial: Duration::ZERO,
            backoff_max: Duration::ZERO,
            ..Config::default()
        };
        let mut backoff = Backoff::new(&config);
        assert_eq!(backoff.next_wait(), Duration::from_millis(1));
        assert_eq!(backoff.next_wait(), Duration::from_millis(1));

        let config = Config {
            backoff_initial: Duration::from_secs(5),
            backoff_max: Duration::from_secs(2),
            ..Config::default()
        };
        let mut backoff = Backoff::new(&config);
        assert_eq!(backoff.next_wait(), Duration::from_secs(2));

        let config = Config { backoff_max: Duration::MAX, ..Config::default() };
        let mut backoff = Backoff::new(&config);
        for _ in 0..200 {
            assert!(backoff.next_wait() <= Duration::MAX);
        }
    }

    #[test]
    fn total_backoff_within_default_budget_takes_many_attempts() {
        // With the defaults, a call that never finds a leader tries about forty times within
        // its 10 s budget (each refused connection fails fast), not hundreds.
        let config = Config::default();
        let mut backoff = Backoff::new(&config);
        let mut slept = Duration::ZERO;
        let mut attempts = 1;
        loop {
            let wait = backoff.next_wait();
            if slept + wait >= config.retry_budget {
                break;
            }
            slept += wait;
            attempts += 1;
        }
        assert!((38..=42).contains(&attempts), "{attempts}");
    }
}
