//! The gRPC skin of the node, served next to the peer Raft service: `booking.rs`
//! (BookingService over `crate::operations`), `convert.rs` (its proto ↔ domain conversion),
//! `admin.rs` (AdminService), and `seat_maps.rs` (packed seat maps, encoded once per applied
//! position). Imports the node's shared concerns and never the REST skin.

mod admin;
mod booking;
pub mod convert;
mod seat_maps;

pub use admin::AdminApi;
pub use booking::BookingApi;
