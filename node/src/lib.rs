//! `bookingd`: one node of the booking cluster. Configuration, the gRPC APIs, proto ↔ domain
//! conversion, the one table that maps rejections to gRPC statuses, leader-only workers and
//! placement (which data group holds a show, recorded by the metadata group 0).
//!
//! One file per concept: `config.rs` (command line and TOML), `environment.rs` (what a node runs
//! on: storage, peer network, clock, entropy, connections; the simulator's seam), `node.rs`
//! (start-up, bootstrap, serving, shutdown), `service.rs` (the booking operations every API wraps: routing by
//! placement, proposing on the leader, reading), `group.rs` (one hosted group: writes with a deadline, ReadIndex reads,
//! leader hints, leadership watch), `workers.rs` (leader-only workers: the tick proposer),
//! `error.rs` (API errors and their gRPC mapping), `api/` (the gRPC services), `rest/` (the REST API on the same port). Nothing imports this
//! crate; the daemon is `src/main.rs`, a thin shell over `daemon.rs` (logging, start, signals,
//! stop), which the test-only `src/bin/bookingd-unsafe.rs` shares (the `unsafe-modes` feature).

pub mod api;
pub mod config;
pub mod daemon;
pub mod environment;
pub mod error;
pub mod group;
pub mod node;
pub mod rest;
pub mod service;
pub mod watch;
pub mod workers;

pub use config::{Args, Config};
pub use node::Node;
