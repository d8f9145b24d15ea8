//! `bookingd`: one node of the booking cluster. Configuration, the gRPC APIs, proto ↔ domain
//! conversion, the one table that maps rejections to gRPC statuses, leader-only workers and
//! placement (which data group holds a show, recorded by the metadata group 0).
//!
//! One file per concept. The node: `config.rs` (command line and TOML), `environment.rs` (what
//! a node runs on: storage, peer network, clock, entropy, connections; the simulator's seam),
//! `node.rs` (start-up, bootstrap, serving, shutdown), `group.rs` (one hosted group: writes
//! with a deadline, ReadIndex reads, leader hints, leadership watch), `workers.rs` (leader-only
//! workers: the tick proposer and the payment worker), `provider.rs` (the payment provider's
//! HTTP API as the node calls it), `http_client.rs` (the pooled HTTP client every outgoing call
//! uses, over TCP or the environment's dialer).
//!
//! What both APIs share, beside each other: `service.rs` (routing by placement, proposing on
//! the leader, reading), `operations.rs` (one function per API operation: the command a
//! request is, the view its answer shows, the count of decided holds), `input.rs` (request
//! checks that need no state: seats into a `SeatSet` at the edge, ids, quantities),
//! `sessions.rs` (who calls: session tokens, the operator credential, idempotency keys),
//! `limits.rs` (token buckets), `metrics.rs` (what the node counts), `names.rs` (the wire
//! names of every state), `watch.rs` (status streams), `seat_maps.rs` (seat maps encoded once
//! per rebuild, one rebuild per show at a time, fresh only when confirmed), `ops.rs` (what the
//! operator's page shows: each replica's Raft position, each show's progress), `search.rs` (a
//! tantivy index derived from the replica's catalog: keywords with typos, place, distance,
//! time, genre, keyset cursors), `error.rs` (the one table of error
//! codes, gRPC and HTTP statuses), `signature.rs` (signed webhooks, Stripe's timestamped
//! scheme, with no transport in it: the webhook endpoint verifies with it, paysim and the outbox
//! dispatcher sign with it).
//!
//! The two skins over them, which import those and never each other: `api/` (the gRPC
//! services) and `rest/` (the REST API on the same port). Nothing imports this crate; the
//! daemon is `src/main.rs`, a thin shell over `daemon.rs` (logging, start, signals, stop), which
//! the test-only `src/bin/bookingd-unsafe.rs` shares (the `unsafe-modes` feature).
//!
//! Beside the node, `paysim/` is the simulated payment provider the project ships (its own
//! process, `src/bin/paysim.rs`, or a host of the simulator): it imports only the webhook
//! contract (`rest/webhook.rs` and `signature.rs`) and the HTTP client, and nothing of the node
//! imports it.

pub mod api;
pub mod auditor;
pub mod config;
pub mod daemon;
pub mod disk;
pub mod dispatch;
pub mod environment;
pub mod error;
pub mod group;
pub mod http_client;
pub mod input;
pub mod limits;
pub mod metrics;
pub mod names;
pub mod node;
pub mod operations;
pub mod ops;
pub mod paysim;
pub mod provider;
pub mod rest;
pub mod search;
pub mod seat_maps;
pub mod secrets;
pub mod serve;
pub mod service;
pub mod sessions;
pub mod signature;
pub mod sink;
pub mod watch;
pub mod workers;

#[cfg(test)]
pub(crate) mod test_node;

pub use config::{Args, Config};
pub use node::Node;

/// The version `bookingd --version` prints: the crate's, and `(verify)` in a build whose state
/// machine checks every invariant after every applied entry (the `statemachine/verify`
/// feature, which the workspace's tests turn on; the Jepsen smoke checks it is on).
pub const VERSION: &str = if statemachine::VERIFY {
    concat!(env!("CARGO_PKG_VERSION"), " (verify)")
} else {
    env!("CARGO_PKG_VERSION")
};
