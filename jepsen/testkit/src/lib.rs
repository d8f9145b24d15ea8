//! Test support shared by the node's process tests, the deterministic simulator and the Jepsen
//! suite, kept once as raft-rs keeps its `harness/`: a helper two suites need is never copied.
//!
//! Talks to the cluster only through the `client` SDK (and plain HTTP where a payment provider
//! would), uses `statemachine` only as the model of the histories it records, and imports
//! neither `node` nor `jepsen`. Owns no verdict: the tests and the checkers judge.
//!
//! - [`cluster`]: a [`Cluster`] of real `bookingd` processes on loopback, its options and its
//!   clients; [`process`]: their lifecycle (spawn, kill -9, restart, wipe, pause, extra nodes,
//!   crash detection, stop); [`faults`]: link faults through the [`links`] mesh of [`proxy`]
//!   fault proxies, and healing everything; [`skew`]: clock skew through libfaketime;
//!   [`membership`]: remove, readmit, add a learner, promote, transfer leadership;
//!   [`observe`]: status, leaders and convergence; [`wait`]: conditions with a deadline.
//! - [`workload`]: the SDK-calling half of a client process that both the Jepsen workloads and
//!   the simulator's buyers run (the mutations and reads, what it knows, how an SDK answer
//!   becomes a history completion, the shows' wire form); [`webhook`]: the provider's timestamped
//!   signature; [`ledger`]: the end of a run whose payments a provider made, judged against its
//!   ledger; [`provider`]: the provider nemesis's menu of behaviours.

pub mod cluster;
pub mod error;
pub mod faults;
pub mod ledger;
pub mod links;
pub mod membership;
pub mod observe;
pub mod process;
pub mod provider;
pub mod proxy;
pub mod skew;
pub mod wait;
pub mod webhook;
pub mod workload;

pub use cluster::{
    Addressing, Cluster, ClusterOptions, OPERATOR_TOKEN_DEFAULT, SESSION_SECRET_DEFAULT,
    SINK_SECRET_DEFAULT, WEBHOOK_SECRET_DEFAULT,
};
pub use error::ClusterError;
pub use observe::Converged;
pub use wait::{Waiting, wait_for};

/// The address client `index` of a suite dials from (`client::Config::local_address`):
/// 127.0.1.1 and up, 254 of them, then the first again. A client's own address is what lets a
/// node's door cut it off alone ([`Cluster::cut_client`]).
pub fn client_source(index: usize) -> std::net::IpAddr {
    let last = u8::try_from(index % 254 + 1).unwrap_or(1);
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 1, last))
}

/// A node's id, the same in every group.
pub type NodeId = u64;

/// A Raft group's id: 0 is the metadata group, `1..=groups` hold shows.
pub type GroupId = u64;
