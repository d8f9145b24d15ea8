//! The black-box fault-injection suite (issue 5: processes, nemeses, workloads, histories and
//! checkers, with `statemachine` as the model) and the on-sale driver it shares with the demo
//! and the benchmark.
//!
//! Talks to the cluster only through `client` (and plain HTTP for what the payment provider
//! sends). Nothing imports this crate.
//!
//! - [`onsale`]: simulated buyers through the waiting room, holds, checkout, a simulated payment
//!   provider and the waitlist, with end-of-run checks.

pub mod onsale;
