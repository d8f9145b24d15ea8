//! openraft glue for the booking cluster: the type config, the log and state-machine stores of
//! many groups sharing one database per node (RocksDB, or a simulated disk under the simulator,
//! behind one storage seam), and the gRPC peer network (one channel per peer node shared by
//! every group, and the service routing peers' requests to the groups).
//!
//! Keeps openraft behind this crate so that an upgrade touches one crate. The booking rules are
//! `statemachine`'s: the stores here persist, replay and snapshot, and never decide.
//!
//! One file per concept: `types.rs` (the type config and what an entry carries), `clock.rs` (the
//! wall clock that stamps entries: the simulator's seam for time), `codec.rs` (the
//! on-disk layout), `storage.rs` (the node's storage), `engine.rs` (the storage seam: what the
//! stores need from a key-value engine), `rocks.rs` (its RocksDB backend), `flusher.rs` (group
//! commit of RocksDB's WAL syncs), `sim_disk.rs` (the simulated disk, its crash model and flush
//! task), `log_store.rs` (one group's log and vote), `state_machine.rs` (one group's applied
//! state and snapshots), `founding.rs` (founding a group again from a backup of its state), `error.rs` (the storage errors), `wire.rs` (the bytes of openraft's
//! messages between nodes), `network.rs` (sending them: the transport seam and its gRPC
//! implementation), `service.rs` (receiving them: the Raft service and the registry of hosted
//! groups), `tls.rs` (who a peer is: mutual TLS and the node id in its certificate, and the
//! client and peer parts of a membership's addresses), `proposer.rs` (the write path of a group on its leader: batching, log time, fencing).
//!
//! ```no_run
//! # fn main() -> Result<(), raft::StoreError> {
//! let storage = raft::Storage::open("/var/lib/bookingd/db")?;
//! let log_store = storage.log_store(7);
//! let state_machine = storage.state_machine(7)?;
//! let reader = state_machine.reader();
//! // One transport per node; one network factory per group over it.
//! let transport = raft::GrpcTransport::new(1, raft::NetworkConfig::default());
//! let network = raft::GroupNetwork::new(transport.clone(), 7);
//! // `raft::Raft::new(node_id, config, network, log_store, state_machine)` runs the group, and
//! // `raft::Groups::insert(7, raft)` routes peers' requests to it.
//! # let _ = (log_store, reader, network);
//! # Ok(())
//! # }
//! ```

mod archive;
mod background;
mod clock;
mod codec;
mod engine;
mod error;
mod failure;
mod flusher;
mod founding;
mod log_store;
mod network;
mod proposer;
mod rocks;
mod runtime;
mod service;
mod sim_disk;
mod state_costs;
mod state_machine;
mod storage;
pub mod tls;
mod types;
mod wire;

pub use archive::ArchiveDir;
pub use clock::{Clock, SystemClock, WallClock};
pub use error::StoreError;
pub use founding::founding_snapshot;
pub use log_store::{LogStore, REPLICATION_BATCH_BYTES_MAX};
pub use network::{
    DialFuture, Dialer, DialerRef, GroupNetwork, GrpcTransport, HTTP2_CONNECTION_WINDOW_BYTES,
    HTTP2_STREAM_WINDOW_BYTES, MESSAGE_BYTES_MAX, NetworkConfig, PeerStream, PeerTransport,
    ReadIndexError,
};
pub use proposer::{BatchCounts, ProposeError, Proposer, ProposerConfig};
pub use runtime::BookingRuntime;
pub use service::{Groups, RaftService, SNAPSHOT_BYTES_MAX};
pub use sim_disk::SimDisk;
pub use state_costs::StateCostCounts;
pub use state_machine::{GroupReader, SnapshotBuilder, StateMachineStore};
pub use storage::Storage;
pub use types::{
    Entry, GroupId, LogId, Node, NodeId, Proposal, Response, Snapshot, SnapshotData, SnapshotMeta,
    StoredMembership, TypeConfig, Vote,
};

/// One Raft group on this node.
pub type Raft = openraft::Raft<TypeConfig, StateMachineStore>;

/// The bytes of `message` (an openraft request) as a node sends it to a peer's Raft service, in
/// `GroupRequest.payload`: for tests that speak to a peer port as a node would.
///
/// # Errors
///
/// When the message does not encode.
pub fn encode_peer_message<T: serde::Serialize>(message: &T) -> Result<Vec<u8>, String> {
    wire::encode("peer message", message).map_err(|error| error.to_string())
}
