//! The gRPC APIs a node serves next to the peer Raft service: `booking.rs` (BookingService),
//! `convert.rs` (its proto ↔ domain conversion and request checks), `admin.rs`
//! (AdminService), `session.rs` (who calls, under which idempotency key), and `seat_maps.rs`
//! (packed seat maps, encoded once per applied position).

mod admin;
mod booking;
pub mod convert;
mod seat_maps;
pub mod session;

pub use admin::AdminApi;
pub use booking::BookingApi;
