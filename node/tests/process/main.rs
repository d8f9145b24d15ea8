//! End-to-end tests of real `bookingd` processes on loopback (shared/DESIGN.md, testing layer 3),
//! in one binary: clusters of three nodes (and a fourth that joins), their peer links through
//! TCP fault proxies, nodes killed with SIGKILL, restarted, wiped, isolated, added and removed,
//! and clients that follow leader hints. The tests check what a buyer and an operator rely on: an
//! acknowledged hold survives the loss of its leader and of every process, an isolated leader
//! acknowledges nothing, a wiped node catches up by snapshot, membership changes under load lose
//! nothing, and every replica of a group converges on the same state.
//!
//! Timings (failover, recovery, catch-up) are printed, never asserted: run with `--nocapture`
//! to see them.

mod client;
mod convergence;
mod failover;
mod harness;
mod membership;
mod partition;
mod proxy;
mod restart;
mod snapshot;
mod workload;
