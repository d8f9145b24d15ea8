//! The wire contract: `.proto` files and the tonic/prost code generated from them, no logic.
//!
//! Owns the message and service definitions only. Never encodes, decodes or interprets a
//! payload (the crates that speak a protocol do), and never imports a crate of this workspace.
//!
//! - [`raft`]: the peer-to-peer Raft service, every message tagged with its group.
//! - [`booking`]: the client and operator API (`BookingService`, `AdminService`) every node
//!   serves on the same address; its errors carry a stable code and a leader hint in metadata.

/// `booking.raft.v1`: the Raft service nodes serve to their peers. Requests carry a group id
/// and openraft's message as opaque bytes, encoded by the `raft` crate.
pub mod raft {
    #![allow(missing_docs, clippy::doc_lazy_continuation)]
    tonic::include_proto!("booking.raft.v1");
}

/// `booking.v1`: the client and operator API every node serves. See `proto/booking.proto` for
/// the metadata (session token, idempotency key, error code, leader hint) every call carries.
pub mod booking {
    #![allow(missing_docs, clippy::doc_lazy_continuation)]
    tonic::include_proto!("booking.v1");
}

/// The shared byte buffers of `bytes` fields mapped to them (`booking.v1.SeatMapReply`).
pub use prost::bytes::Bytes;
