//! The Rust SDK of the booking cluster (and, in `src/bin/bookctl`, the `bookctl` CLI built on
//! it): leader discovery, routing by show and by group, and retries that keep one idempotency
//! key per logical call.
//!
//! Owns talking to nodes over `booking.v1` (the `proto` crate): which node to ask, when to ask
//! again, and mapping a node's status (its gRPC code and `booking-code`) back to [`Error`].
//! Never decides anything about seats, holds or membership (the nodes do), never retries a
//! rejection, and never sends one logical mutation under two keys. It imports only `proto`.
//!
//! - [`Client`]: the handle; [`Config`]: its retry policy.
//! - [`Error`]: `Rejected` (final, with its code), `Unavailable` (budget spent; a mutation's
//!   outcome may be unknown), `Transport` (one node unreachable), `InvalidArgument`.
//!
//! # Example
//!
//! ```no_run
//! use client::{Client, Error, NewShow};
//!
//! # async fn run() -> Result<(), Error> {
//! let client = Client::connect(vec!["127.0.0.1:7101".into(), "127.0.0.1:7102".into()])?;
//! let placement = client.create_show(&NewShow::uniform(42, 500, 4_500, "EUR"), None).await?;
//! client.open_sales(placement.show_id).await?;
//! // Retrying with the same key after `Unavailable` returns the stored outcome.
//! match client.hold("session-token", 42, &[54, 55, 56], 1, Some("buyer-7-try-1")).await {
//!     Ok(hold) => println!("hold {} until {}", hold.hold_id, hold.deadline_ms),
//!     Err(Error::Rejected { code, .. }) if code == "seat_unavailable" => println!("taken"),
//!     Err(error) => return Err(error),
//! }
//! # Ok(())
//! # }
//! ```

mod address;
mod client;
mod error;
mod key;
mod retry;
mod route;

pub use crate::client::{Client, NewShow, NodeStatus};
pub use crate::error::{
    BOOKING_CODE, Error, LEADER_ADDR, LEADER_ID, NO_LEADER, NOT_LEADER, Result,
};
pub use crate::key::{
    AUTHORIZATION, IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_LEN_MAX, generate_key, validate_key,
};
pub use crate::retry::{
    ATTEMPT_TIMEOUT_DEFAULT_MS, BACKOFF_INITIAL_DEFAULT_MS, BACKOFF_MAX_DEFAULT_MS,
    CONNECT_TIMEOUT_DEFAULT_MS, Config, HINTS_IMMEDIATE_MAX, RETRY_BUDGET_DEFAULT_MS,
};
/// The wire messages the client returns (`booking.v1`), re-exported so that callers need not
/// depend on `proto`.
pub use proto::booking::{GroupStatus, HoldReply, MembershipReply, ShowPlacement, StatusReply};
