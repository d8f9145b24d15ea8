//! The Rust SDK of the booking cluster (and, in `src/bin/bookctl`, the `bookctl` CLI built on
//! it): leader discovery, routing by show and by group, and retries that keep one idempotency
//! key per logical call.
//!
//! Owns talking to nodes over `booking.v1` (the `proto` crate): which node to ask, when to ask
//! again, and mapping a node's status (its gRPC code and `booking-code`) back to [`Error`].
//! Never decides anything about seats, holds or membership (the nodes do), never retries a
//! rejection, and never sends one logical mutation under two keys. It imports only `proto`.
//!
//! - [`Client`]: the handle; [`Config`]: its retry policy; [`Connector`]: opens connections
//!   instead of TCP when given to [`Client::with_connector`] (a simulator's network).
//! - Buyer calls (`booking.rs`): [`Client::create_session`], holds ([`Client::hold`],
//!   [`Client::hold_with_grant`], [`Client::get_hold`], [`Client::cancel_hold`],
//!   [`Client::checkout`]), bookings ([`Client::get_booking`], [`Client::cancel_booking`]), the
//!   admission queue ([`Client::join_queue`], [`Client::get_ticket`], [`Client::leave_queue`]),
//!   the waitlist ([`Client::join_waitlist`], [`Client::get_waitlist_entry`],
//!   [`Client::leave_waitlist`], [`Client::get_offer`], [`Client::accept_offer`],
//!   [`Client::decline_offer`]), payments ([`Client::get_payment`], also the operator's) and
//!   watches ([`Client::watch_hold`], [`Client::watch_ticket`]).
//! - Shows (`shows.rs`): [`Client::list_shows`], [`Client::get_show`],
//!   [`Client::get_seat_map`], [`Client::get_seat_map_linearizable`], a map kept and refreshed
//!   by what changed ([`Client::follow_seat_map`], [`Client::refresh_seat_map`],
//!   `live_map.rs`), and the operator's
//!   [`Client::create_show`], the controls of a show ([`Client::open_sales`],
//!   [`Client::close_sales`], [`Client::cancel_show`], [`Client::set_prices`],
//!   [`Client::configure_admission`], [`Client::configure_waitlist`]),
//!   [`Client::capacity_released`], [`Client::get_audit`] (with
//!   [`Client::with_operator_token`]).
//! - Cluster operations (`client.rs`): [`Client::status`], membership, leadership; backups
//!   (`backup.rs`): [`Client::backup`] into a [`Backup`] file, [`Client::restore`] into fresh
//!   nodes.
//! - [`Error`]: `Rejected` (final, with its typed [`ErrorCode`] and the code's name as sent),
//!   `Unavailable` (budget spent; a mutation's outcome may be unknown), `Transport` (one node
//!   unreachable), `InvalidArgument`.
//!
//! # Example
//!
//! ```no_run
//! use client::{Client, Error, ErrorCode, NewShow};
//!
//! # async fn run() -> Result<(), Error> {
//! let client = Client::connect(vec!["127.0.0.1:7101".into(), "127.0.0.1:7102".into()])?;
//! let show = NewShow { open_sales: true, ..NewShow::uniform(42, 500, 4_500, "EUR") };
//! client.create_show(&show, None).await?;
//! let token = client.create_session().await?;
//! // Retrying with the same key after `Unavailable` returns the stored outcome.
//! let hold = match client.hold(&token, 42, &[54, 55, 56], 1, Some("buyer-7-try-1")).await {
//!     Ok(hold) => hold,
//!     Err(Error::Rejected { code: ErrorCode::SeatUnavailable, .. }) => return Ok(()),
//!     Err(error) => return Err(error),
//! };
//! let checkout = client.checkout(&token, 42, hold.hold_id, None).await?;
//! println!("pay {} {} for payment {}", checkout.amount_minor, checkout.currency, checkout.payment_id);
//! # Ok(())
//! # }
//! ```

mod address;
mod backup;
mod batch;
mod booking;
mod catalog;
pub mod certs;
mod client;
mod connector;
mod error;
mod features;
mod key;
mod live_map;
mod rebalance;
mod retry;
mod route;
mod shows;

pub use crate::backup::{
    BACKUP_FORMAT, BACKUP_VERSION, Backup, BackupFileError, GroupBackup, MANIFEST_FILE, Manifest,
    ManifestGroup, voters_of,
};
pub use crate::batch::HOLD_BATCH_ITEMS_MAX;
pub use crate::booking::Watch;
pub use crate::client::{Client, KeySource, NodeStatus};
pub use crate::connector::{ConnectFuture, Connector, Stream};
pub use crate::error::{BOOKING_CODE, Error, ErrorCode, LEADER_ADDR, LEADER_ID, Result};
pub use crate::key::{
    AUTHORIZATION, IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_LEN_MAX, generate_key, validate_key,
};
pub use crate::live_map::{LiveSeatMap, Refreshed};
pub use crate::rebalance::{PlannedMove, plan_rebalance, show_load};
pub use crate::retry::{
    ATTEMPT_TIMEOUT_DEFAULT_MS, BACKOFF_INITIAL_DEFAULT_MS, BACKOFF_MAX_DEFAULT_MS,
    CONNECT_TIMEOUT_DEFAULT_MS, Config, HINTS_IMMEDIATE_MAX, HOLD_BATCHES_IN_FLIGHT_DEFAULT,
    KEEP_ALIVE_DEFAULT_MS, RETRY_BUDGET_DEFAULT_MS,
};
pub use crate::shows::NewShow;
/// The wire messages the client returns (`booking.v1`), re-exported so that callers need not
/// depend on `proto`.
/// The record a catalog change names (`Client::change_catalog`).
pub use proto::booking::catalog_change_request::Record as CatalogRecord;
pub use proto::booking::{
    AdmissionConfig, AdmissionReply, AuditRecord, AuditReply, BackupHeader, BandClaimReply,
    BookingReply, CapacityReleasedReply, CatalogAction, CatalogChangeReply, CatalogEvent,
    CatalogHall, CatalogRow, CatalogSection, CatalogVenue, CheckoutReply, FeatureLevelReply,
    GroupStatus, HoldReply, LotteryDraw, LotteryReply, MembershipReply, MoveShowRequest,
    OfferReply, OrderKey, PaymentReply, PricesReply, RestoreReply, SalesReply, SearchReply,
    SearchRequest, SearchResult, SeatMapReply, SeatStatus, SessionErasedReply, ShowArchivedReply,
    ShowCancelledReply, ShowListing, ShowMovedReply, ShowPlacement, ShowPolicy, ShowReply,
    StatusReply, TicketReply, WaitlistConfig, WaitlistEntryReply, WaitlistPolicyReply,
    WaitlistReply, WaitlistRules, WaitlistSkip,
};
