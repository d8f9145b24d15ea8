//! The wire contract: `.proto` files and the tonic/prost code generated from them, no logic.
//!
//! Owns the message and service definitions only. Never encodes, decodes or interprets a
//! payload (the crates that speak a protocol do), and never imports a crate of this workspace.
//!
//! - [`raft`]: the peer-to-peer Raft service (issue 3), every message tagged with its group.
//!
//! The client API (issue 4: `BookingService`, `AdminService`) comes next.

/// `booking.raft.v1`: the Raft service nodes serve to their peers. Requests carry a group id
/// and openraft's message as opaque bytes, encoded by the `raft` crate.
pub mod raft {
    #![allow(missing_docs)]
    tonic::include_proto!("booking.raft.v1");
}
