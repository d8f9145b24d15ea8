//! Waiting for a condition with a deadline, never a fixed sleep: [`Waiting`] for the kit's own
//! loops (and any whose future must be `Send`), [`wait_for`] for a test's condition.
//!
//! Owns only the polling and the timeout's message (the last reason the condition was not
//! true); never decides what the condition is.

use std::io;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::ClusterError;

/// How often [`Waiting`] polls unless told otherwise, and [`wait_for`] always: a test's
/// conditions are cheap calls on loopback.
pub const POLL: Duration = Duration::from_millis(50);

/// A wait for a condition, polled until a deadline.
///
/// A plain loop around [`Waiting::again`] rather than a helper taking an async closure: the
/// futures of such closures are not provably `Send`, and a runner spawns what waits here.
pub struct Waiting {
    what: String,
    within: Duration,
    poll: Duration,
    deadline: Instant,
}

impl Waiting {
    /// Starts waiting `within` for `what`, polling every [`POLL`].
    pub fn new(what: impl Into<String>, within: Duration) -> Waiting {
        Waiting { what: what.into(), within, poll: POLL, deadline: Instant::now() + within }
    }

    /// The same wait, polled every `poll` instead.
    pub fn every(self, poll: Duration) -> Waiting {
        Waiting { poll, ..self }
    }

    /// Sleeps one poll before the next check, or fails with `last`, the last reason the
    /// condition was not true, once the deadline has passed.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Timeout`] after the deadline.
    pub async fn again(&self, last: String) -> Result<(), ClusterError> {
        if Instant::now() >= self.deadline {
            return Err(ClusterError::Timeout {
                what: self.what.clone(),
                within: self.within,
                last,
            });
        }
        tokio::time::sleep(self.poll).await;
        Ok(())
    }
}

/// Calls `check` every [`POLL`] until it answers `Ok(Ok(value))`, and returns the value; fails
/// at once if it answers `Err`, and after `within` with the last reason it gave for waiting
/// (`Ok(Err(reason))`). For tests that return `io::Result` (the kit's errors convert with `?`).
///
/// # Errors
///
/// `check`'s error, or a timeout naming `what` and the last reason.
pub async fn wait_for<T>(
    what: &str,
    within: Duration,
    mut check: impl AsyncFnMut() -> io::Result<Result<T, String>>,
) -> io::Result<T> {
    let waiting = Waiting::new(what, within);
    loop {
        match check().await? {
            Ok(value) => return Ok(value),
            Err(reason) => waiting.again(reason).await?,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_condition_that_stays_false_times_out_with_its_last_reason() {
        let mut calls = 0;
        let error = wait_for("the impossible", Duration::from_millis(120), async || {
            calls += 1;
            Ok(Err::<(), _>(format!("call {calls}")))
        })
        .await
        .expect_err("never true");
        let message = error.to_string();
        assert!(message.contains("the impossible") && message.contains("last: call"), "{message}");
        assert!(calls >= 2, "polled {calls} times");
    }

    #[tokio::test]
    async fn a_condition_that_comes_true_returns_its_value_and_an_error_ends_the_wait()
    -> io::Result<()> {
        let mut calls = 0;
        let value = wait_for("the third call", Duration::from_secs(5), async || {
            calls += 1;
            Ok(if calls == 3 { Ok(calls) } else { Err("not yet".to_owned()) })
        })
        .await?;
        assert_eq!(value, 3);
        let failed = wait_for("a broken check", Duration::from_secs(5), async || {
            Err::<Result<(), String>, _>(io::Error::other("broken"))
        })
        .await;
        assert_eq!(failed.expect_err("the check fails").to_string(), "broken");
        Ok(())
    }
}
