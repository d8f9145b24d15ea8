//! The gRPC APIs a node serves next to the peer Raft service: `booking.rs` (BookingService),
//! `convert.rs` (its proto ↔ domain conversion and request checks), `admin.rs`
//! (AdminService), and `session.rs` (who calls, under which idempotency key).

mod admin;
mod booking;
pub mod convert;
pub mod session;

pub use admin::AdminApi;
pub use booking::BookingApi;
