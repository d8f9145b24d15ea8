//! End-to-end tests of real `bookingd` processes on loopback (shared/DESIGN.md, testing layer 3),
//! in one binary: clusters of three nodes (and a fourth that joins), their peer links through
//! TCP fault proxies, nodes killed with SIGKILL, restarted, wiped, isolated, added and removed,
//! and clients that follow leader hints. The tests check what a buyer and an operator rely on: an
//! acknowledged hold survives the loss of its leader and of every process, an isolated leader
//! acknowledges nothing, a wiped node catches up by snapshot, membership changes under load lose
//! nothing, and every replica of a group converges on the same state. The `api_*` tests speak
//! plain HTTP to the REST API of such a cluster (`rest.rs`): every path with its success shape,
//! every error status and code, the seed races (two sessions racing for one seat, a double-tap
//! accept, a retry after a lost response, not-owner access), a request sent to a follower,
//! server-sent events and signed payment webhooks; each file runs its scenarios on one cluster
//! and names each one that failed. The `sdk*` tests run the buyer's journey, the seed races,
//! leader hints, a dead node and the error codes through the Rust SDK (the `client` crate).
//!
//! Timings (failover, recovery, catch-up) are printed, never asserted: run with `--nocapture`
//! to see them.

mod api_errors;
mod api_holds;
mod api_limits;
mod api_payments;
mod api_queue;
mod api_shows;
mod api_waitlist;
mod client;
mod convergence;
mod failover;
mod harness;
mod membership;
mod partition;
mod proxy;
mod rest;
mod restart;
mod sdk;
mod sdk_errors;
mod sdk_races;
mod sdk_routing;
mod snapshot;
mod workload;
