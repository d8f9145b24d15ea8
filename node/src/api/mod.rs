//! The gRPC skin of the node, served next to the peer Raft service: `booking.rs`
//! (BookingService over `crate::operations`), `convert.rs` (its proto ↔ domain conversion),
//! `admin.rs` (AdminService), `backup.rs` (its backups and restores of whole groups). Packed seat maps are kept by the shared `crate::seat_maps`.
//! Imports the node's shared concerns and never the REST skin.

mod admin;
mod backup;
mod booking;
pub mod convert;

pub use admin::AdminApi;
pub use booking::BookingApi;
