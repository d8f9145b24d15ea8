//! Bookings over REST: read and cancel one's own confirmed booking.
//!
//! Owns the booking JSON shape. Never decides whether a booking may be cancelled: the show's
//! policy in the state machine does (`booking_not_cancellable`).

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use statemachine::{BookingId, BookingView, ShowId};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::names::BookingStateName;
use crate::operations;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, Session};
use crate::rest::ids::{format_id, parse_id};
use crate::rest::types::{AsOf, Money};

/// A confirmed (or cancelled) booking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Booking {
    /// The booking (`<show_id>-<n>`).
    pub booking_id: String,
    /// Its show.
    pub show_id: u64,
    /// The hold it was made from.
    pub hold_id: String,
    /// Its seats, sorted.
    pub seats: Vec<u32>,
    /// Their labels in the show's hall (e.g. `B12`), in the order of `seats`, for a show
    /// listed in the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seat_labels: Option<Vec<String>>,
    /// Its state.
    pub state: BookingStateName,
    /// What was paid.
    pub price: Money,
    /// The payment attempt that paid it.
    pub payment_id: String,
    /// Log time (ms) of the confirmation.
    pub created_ms: u64,
    /// When this view was read.
    pub as_of: AsOf,
}

impl Booking {
    /// The JSON shape of a booking of `show`.
    pub fn from_view(show: ShowId, view: &BookingView) -> Booking {
        let booking = &view.booking;
        Booking {
            booking_id: format_id(show, booking.id.0),
            show_id: show.0,
            hold_id: format_id(show, booking.hold.0),
            seats: booking.seats.to_vec(),
            seat_labels: None,
            state: booking.state.into(),
            price: booking.price.into(),
            payment_id: format_id(show, booking.payment.0),
            created_ms: booking.created_ms,
            as_of: view.as_of.into(),
        }
    }
}

/// One of this session's bookings, read linearizably on its group's leader.
#[utoipa::path(
    get, path = "/v1/bookings/{booking_id}", tag = "bookings",
    params(("booking_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = [])),
    responses(
        (status = 200, description = "The booking", body = Booking),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`booking_not_found`, `show_not_found`", body = ErrorBody),
        (status = 503, description = "No leader", body = ErrorBody),
    )
)]
pub async fn get_booking(
    State(state): State<RestState>,
    Path(booking_id): Path<String>,
    Session(session): Session,
) -> Result<Json<Booking>, ApiError> {
    let (show, number) = parse_id("booking_id", &booking_id)?;
    let view = operations::get_booking(&state.service, show, BookingId(number), session).await?;
    let labels = state.service.labels_of(show, view.booking.seats.iter().copied())?;
    Ok(Json(Booking { seat_labels: labels, ..Booking::from_view(show, &view) }))
}

/// Cancels one of this session's bookings: its seats return (to the waitlist first) and
/// refund work is queued.
#[utoipa::path(
    delete, path = "/v1/bookings/{booking_id}", tag = "bookings",
    params(
        ("booking_id" = String, Path, description = "`<show_id>-<n>`"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The cancelled booking", body = Booking),
        (status = 400, description = "Malformed id or key", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`booking_not_found`", body = ErrorBody),
        (status = 409, description = "`booking_not_cancellable`, `idempotency_key_reused`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn cancel_booking(
    State(state): State<RestState>,
    Path(booking_id): Path<String>,
    Session(session): Session,
    Idempotency(key): Idempotency,
) -> Result<Json<Booking>, ApiError> {
    let (show, number) = parse_id("booking_id", &booking_id)?;
    let booking = BookingId(number);
    let view = operations::cancel_booking(&state.service, show, session, key, booking).await?;
    Ok(Json(Booking::from_view(show, &view)))
}
