//! End-to-end tests of real `bookingd` processes on loopback (shared/DESIGN.md, testing layer 3),
//! in one binary: clusters of three nodes (and a fourth that joins), their peer links through
//! TCP fault proxies, nodes killed with SIGKILL, restarted, wiped, isolated, added and removed,
//! and clients that follow leader hints. The tests check what a buyer and an operator rely on: an
//! acknowledged hold survives the loss of its leader and of every process, an isolated leader
//! acknowledges nothing, a wiped node catches up by snapshot, membership changes under load lose
//! nothing, and every replica of a group converges on the same state. The `api_*` tests speak
//! HTTP over TLS (as every client of these clusters does: `ClusterOptions::client_tls`) to the REST API of such a cluster (`rest.rs`): every path with its success shape,
//! every error status and code, the seed races (two sessions racing for one seat, a double-tap
//! accept, a retry after a lost response, not-owner access), a request sent to a follower,
//! server-sent events and signed payment webhooks; each file runs its scenarios on one cluster
//! and names each one that failed. The `sdk*` tests run the buyer's journey, the seed races,
//! leader hints, a dead node and the error codes through the Rust SDK (the `client` crate).
//!
//! The clusters are the test kit's (`testkit::Cluster`, shared with the Jepsen suite): real
//! processes on free ports of 127.0.0.1, one cluster of this binary at a time, a temporary
//! directory kept (with every node's log tail printed) when a test fails. [`options`],
//! [`start`] and [`assert_converged`] are this binary's settings and its printed timings.
//!
//! Timings (failover, recovery, catch-up) are printed, never asserted: run with `--nocapture`
//! to see them.

mod api_catalog;
mod api_errors;
mod api_holds;
mod api_limits;
mod api_payments;
mod api_queue;
mod api_search;
mod api_seat_maps;
mod api_shows;
mod api_waitlist;
mod api_waitlist_policies;
mod archive;
mod backup;
mod browser;
mod client;
mod client_tls;
mod convergence;
mod corruption;
mod disk_full;
mod failover;
mod fsync_failure;
mod fuzz;
mod membership;
mod moving;
mod outbox;
mod overload;
mod partition;
mod payments;
mod paysim;
mod rest;
mod restart;
mod sdk;
mod sdk_catalog;
mod sdk_errors;
mod sdk_races;
mod sdk_routing;
mod security;
mod snapshot;
mod workload;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::Duration;

use testkit::{Cluster, ClusterOptions, Converged, GroupId, NodeId};
use tokio::time::Instant;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// How long any awaited condition may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// The kit's test cluster of `nodes` nodes (see [`ClusterOptions::ephemeral`]), running the
/// `bookingd` cargo built for these tests.
pub fn options(nodes: u64) -> ClusterOptions {
    let binary = Path::new(env!("CARGO_BIN_EXE_bookingd"));
    ClusterOptions {
        bin_dir: binary.parent().map(Path::to_path_buf),
        wait: WAIT,
        ..ClusterOptions::ephemeral(nodes)
    }
}

/// The TLS a gRPC client of `cluster` needs: its CA, when its nodes serve TLS.
pub fn grpc_tls(cluster: &Cluster) -> Option<ClientTlsConfig> {
    cluster.options().client_tls.then(|| {
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(cluster.ca_certificate()))
    })
}

/// A gRPC endpoint of the client port at `address` (`host:port`): https with `tls` when given.
///
/// # Errors
///
/// When `address` is not a URI authority, or tonic refuses the TLS settings.
pub fn grpc_endpoint_at(address: &str, tls: Option<&ClientTlsConfig>) -> io::Result<Endpoint> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint =
        Endpoint::from_shared(format!("{scheme}://{address}")).map_err(io::Error::other)?;
    match tls {
        Some(tls) => endpoint.tls_config(tls.clone()).map_err(io::Error::other),
        None => Ok(endpoint),
    }
}

/// A connected gRPC channel to node `id`'s client port, over TLS when the cluster serves it.
///
/// # Errors
///
/// When the node is unknown or cannot be reached.
pub async fn grpc_channel(cluster: &Cluster, id: NodeId) -> io::Result<tonic::transport::Channel> {
    let endpoint = grpc_endpoint_at(&cluster.address(id)?, grpc_tls(cluster).as_ref())?;
    endpoint.connect().await.map_err(io::Error::other)
}

/// Starts a cluster with `options` and prints which node leads each group, and how long after
/// the start.
///
/// # Errors
///
/// When a node cannot be started or does not serve, or a group elects no leader, within
/// [`WAIT`].
pub async fn start(options: ClusterOptions) -> io::Result<Cluster> {
    let started = Instant::now();
    let cluster = Cluster::start(options).await?;
    for group in cluster.group_ids() {
        let leader = cluster.leader_of(group).await?;
        println!("group {group}: node {leader} leads, {:?} after start", started.elapsed());
    }
    Ok(cluster)
}

/// Waits (until [`WAIT`]) until every replica of every group of `cluster` has applied the same
/// log to the same state (see [`Cluster::wait_all_converged`]), and prints each group's state.
///
/// Reference: Raft §5.3 (State Machine Safety: replicas that applied the same log prefix are in
/// the same state), shared/DESIGN.md "The state machine" (deterministic apply).
///
/// # Errors
///
/// When the replicas diverge or do not converge in time.
pub async fn assert_converged(cluster: &Cluster) -> io::Result<BTreeMap<GroupId, Converged>> {
    let started = Instant::now();
    let converged = cluster.wait_all_converged(WAIT).await?;
    for (group, state) in &converged {
        println!(
            "group {group}: members {:?} converged at applied index {} digest {} ({:?})",
            state.members,
            state.applied_index,
            &state.digest[..state.digest.len().min(16)],
            started.elapsed()
        );
    }
    Ok(converged)
}
