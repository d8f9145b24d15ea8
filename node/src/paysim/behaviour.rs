//! How the simulated provider behaves, set per run (flags) and changed at run time
//! (`PUT /control`): ratios of declines and timeouts, latency, webhook delay, duplicate and
//! out-of-order webhooks, a webhook delivered before the charge call returns, an outage.
//!
//! Owns the draws: a seeded xorshift generator, so one seed and one order of calls give the
//! same decisions. Never touches the ledger.

use serde::{Deserialize, Serialize};

/// The provider's behaviour. Every ratio is in `0.0..=1.0`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct Behaviour {
    /// Share of new charges declined.
    #[arg(long, default_value_t = 0.0)]
    pub decline_ratio: f64,
    /// Share of new charges recorded whose call then answers 504 (the caller cannot know the
    /// outcome and must read the charge).
    #[arg(long, default_value_t = 0.0)]
    pub timeout_ratio: f64,
    /// Added to every charge and refund call, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Wait before the first delivery of a charge's webhook, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub webhook_delay_ms: u64,
    /// Share of webhooks delivered twice (the same event id).
    #[arg(long, default_value_t = 0.0)]
    pub duplicate_ratio: f64,
    /// Share of charges whose webhook is followed by a stale `unknown` event for the same
    /// payment (an earlier state arriving late, with its own event id).
    #[arg(long, default_value_t = 0.0)]
    pub out_of_order_ratio: f64,
    /// Deliver a charge's webhook before answering the charge call.
    #[arg(long)]
    pub webhook_before_reply: bool,
    /// Refuse every charge and refund call with 503, recording nothing.
    #[arg(long)]
    pub outage: bool,
}

impl Default for Behaviour {
    fn default() -> Behaviour {
        Behaviour {
            decline_ratio: 0.0,
            timeout_ratio: 0.0,
            latency_ms: 0,
            webhook_delay_ms: 0,
            duplicate_ratio: 0.0,
            out_of_order_ratio: 0.0,
            webhook_before_reply: false,
            outage: false,
        }
    }
}

/// The longest latency or webhook delay accepted, in milliseconds.
pub const DELAY_MS_MAX: u64 = 60_000;

impl Behaviour {
    /// Checks every field.
    ///
    /// # Errors
    ///
    /// The first field out of range, by name.
    pub fn check(&self) -> Result<(), String> {
        for (name, ratio) in [
            ("decline_ratio", self.decline_ratio),
            ("timeout_ratio", self.timeout_ratio),
            ("duplicate_ratio", self.duplicate_ratio),
            ("out_of_order_ratio", self.out_of_order_ratio),
        ] {
            if !(0.0..=1.0).contains(&ratio) {
                return Err(format!("{name}: must be in 0.0..=1.0, got {ratio}"));
            }
        }
        for (name, ms) in
            [("latency_ms", self.latency_ms), ("webhook_delay_ms", self.webhook_delay_ms)]
        {
            if ms > DELAY_MS_MAX {
                return Err(format!("{name}: at most {DELAY_MS_MAX}, got {ms}"));
            }
        }
        Ok(())
    }
}

/// A seeded xorshift64* generator: the provider's only randomness.
#[derive(Clone, Debug)]
pub struct Draws(u64);

impl Draws {
    /// A generator from `seed` (any value; 0 is mapped to a fixed non-zero state).
    pub fn new(seed: u64) -> Draws {
        Draws(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed })
    }

    /// Whether an event of probability `ratio` happens this time.
    pub fn happens(&mut self, ratio: f64) -> bool {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        let unit = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        unit < ratio
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_of_zero_and_one_are_never_and_always() {
        let mut draws = Draws::new(7);
        assert!((0..1_000).all(|_| !draws.happens(0.0)));
        assert!((0..1_000).all(|_| draws.happens(1.0)));
        let half = (0..10_000).filter(|_| draws.happens(0.5)).count();
        assert!((4_500..5_500).contains(&half), "{half}");
    }

    #[test]
    fn out_of_range_settings_are_named() {
        let bad = Behaviour { decline_ratio: 1.5, ..Behaviour::default() };
        assert_eq!(bad.check().unwrap_err(), "decline_ratio: must be in 0.0..=1.0, got 1.5");
        let slow = Behaviour { latency_ms: DELAY_MS_MAX + 1, ..Behaviour::default() };
        assert!(slow.check().unwrap_err().starts_with("latency_ms"));
        assert_eq!(Behaviour::default().check(), Ok(()));
    }
}
