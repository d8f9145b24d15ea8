//! The black-box fault-injection suite (issue 5: processes, nemeses, workloads, histories and
//! checkers, with `statemachine` as the model) and the on-sale driver it shares with the demo
//! and the benchmark.
//!
//! Talks to the cluster only through `client` (and plain HTTP for what the payment provider
//! sends). Nothing imports this crate.
//!
//! - [`onsale`]: simulated buyers through the waiting room, holds, checkout, a simulated payment
//!   provider and the waitlist, with end-of-run checks.
//! - [`nemesis`]: the faults and their schedule, on a `testkit::Cluster` (real `bookingd`
//!   processes on 127.0.0.x with a fault proxy per link, kept in `jepsen/testkit` with the rest
//!   of the test support the node's tests and the simulator share).
//! - [`workload`]: the suite's five workloads: which operations each client process draws, run
//!   through the kit's `testkit::workload::Buyer`, which records the history with
//!   `statemachine::check::recorder` (whose checkers, shared with the simulator, judge it).
//! - [`payments`]: the `payments` workload's provider (`paysim` as a real process), the
//!   provider nemesis, and the end of a run judged against the provider's ledger.
//! - [`runner`]: one test end to end; [`report`]: its folder and timeline.
//! - [`bench`]: the on-sale benchmark against this cluster, PostgreSQL and etcd (the `bench`
//!   binary, `scripts/bench.sh`).
//! - [`failover`]: how long each group takes to acknowledge a write after its leader is
//!   killed, alone or beside the benchmark's load (the `failover` binary,
//!   `scripts/failover.sh`).

pub mod bench;
pub mod failover;
pub mod http;
pub mod nemesis;
pub mod onsale;
pub mod payments;
pub mod report;
pub mod resources;
pub mod runner;
pub mod workload;
