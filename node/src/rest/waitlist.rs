//! The waitlist over REST: join a sold-out show's waitlist, read and leave one's entry, accept
//! or decline an offer, and the operator's capacity-released event.
//!
//! Owns the waitlist, offer and capacity JSON shapes and the offer action path
//! (`/v1/offers/{offer_id}:accept` and `:decline`: the router has no parameters with a static
//! suffix, so one route takes the last segment and splits it at its last `:`). A priority band
//! never comes from the body: only from an operator-signed claim (see `sessions.rs`). Never decides who is offered
//! what: the state machine's waitlist does.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use statemachine::{
    CapacityEventId, EntryId, IdempotencyKey, OfferId, OfferView, SeatNo, SessionId, ShowId,
};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::input;
use crate::names::{EntryStateName, OfferStateName};
use crate::operations::{self, EntryWithOffer};
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, JsonBody, Operator, Session};
use crate::rest::ids::{format_id, parse_id, parse_show_id};
use crate::rest::types::{AsOf, Hold};

/// A request to join a waitlist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JoinWaitlistRequest {
    /// Seats wanted together, 1..=10.
    pub quantity: u8,
    /// A priority-band claim the operator issued for this session and show
    /// (`POST /v1/shows/{show_id}/waitlist/claims`); without one the buyer joins as a guest,
    /// served after every claimed band under priority bands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

impl JoinWaitlistRequest {
    /// The party size, checked.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a quantity outside 1..=10.
    pub fn quantity(&self) -> Result<u8, ApiError> {
        input::quantity("quantity", u32::from(self.quantity))
    }
}

/// A waitlist offer: seats kept for one waiter until its deadline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Offer {
    /// The offer (`<show_id>-<n>`).
    pub offer_id: String,
    /// Its show.
    pub show_id: u64,
    /// The waitlist entry it was made to.
    pub entry_id: String,
    /// The seats offered, sorted.
    pub seats: Vec<u32>,
    /// Its state by log time.
    pub state: OfferStateName,
    /// Log time (ms) by which it must be accepted.
    pub deadline_ms: u64,
    /// The hold made by accepting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_id: Option<String>,
    /// When this view was read.
    pub as_of: AsOf,
}

impl Offer {
    /// The JSON shape of an offer of `show`.
    pub fn from_view(show: ShowId, view: &OfferView) -> Offer {
        let offer = &view.offer;
        Offer {
            offer_id: format_id(show, offer.id.0),
            show_id: show.0,
            entry_id: format_id(show, offer.entry.0),
            seats: offer.seats.to_vec(),
            state: view.state.into(),
            deadline_ms: offer.deadline_ms,
            hold_id: offer.hold().map(|hold| format_id(show, hold.0)),
            as_of: view.as_of.into(),
        }
    }
}

/// A waitlist entry and its place in line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WaitlistEntry {
    /// The entry (`<show_id>-<n>`).
    pub entry_id: String,
    /// Its show.
    pub show_id: u64,
    /// Its state by log time.
    pub state: EntryStateName,
    /// Seats wanted together.
    pub quantity: u8,
    /// Waiting entries ahead of it (0 unless waiting).
    pub ahead: u32,
    /// Log time (ms) of joining.
    pub joined_ms: u64,
    /// The ordering policy version it joined under.
    pub policy_version: u32,
    /// Its latest offer, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer: Option<Offer>,
    /// When this view was read.
    pub as_of: AsOf,
}

impl WaitlistEntry {
    /// The JSON shape of an entry of `show` and its offer.
    pub fn from_view(show: ShowId, found: &EntryWithOffer) -> WaitlistEntry {
        let view = &found.entry;
        let entry = &view.entry;
        WaitlistEntry {
            entry_id: format_id(show, entry.id.0),
            show_id: show.0,
            state: view.state.into(),
            quantity: entry.quantity,
            ahead: view.ahead,
            joined_ms: entry.order.joined_ms,
            policy_version: entry.policy_version,
            offer: found.offer.as_ref().map(|offer| Offer::from_view(show, offer)),
            as_of: view.as_of.into(),
        }
    }
}

/// A capacity-released event: seats an outside system gave back, for the waitlist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacityReleasedRequest {
    /// The show.
    pub show_id: u64,
    /// The sender's event id (1..=128 printable ASCII characters); a repeat is a no-op.
    pub event_id: String,
    /// 1..=1024 distinct free seats.
    pub seats: Vec<u32>,
}

impl CapacityReleasedRequest {
    /// The show, the hashed event id and the sorted seats, checked.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a zero show, a bad event id, or no, too many or repeated seats.
    pub fn into_parts(self) -> Result<(ShowId, CapacityEventId, Vec<SeatNo>), ApiError> {
        let show = input::show_id("show_id", self.show_id)?;
        let event = input::capacity_event_id("event_id", &self.event_id)?;
        let seats = input::released_seats("seats", &self.seats)?;
        Ok((show, event, seats))
    }
}

/// What a capacity-released event did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CapacityReleased {
    /// The show.
    pub show_id: u64,
    /// The sender's event id.
    pub event_id: String,
    /// Seats that went to the waitlist (0 for a duplicate).
    pub seats_released: u32,
    /// Whether this event id had been processed before.
    pub duplicate: bool,
}

/// What `POST /v1/offers/{offer_id}:{action}` asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfferAction {
    /// `:accept`.
    Accept,
    /// `:decline`.
    Decline,
}

/// Splits the last path segment of an offer action at its last `:`.
///
/// # Errors
///
/// `NotFound` (404) for a segment without a known action, like an unknown route.
pub fn split_offer_action(segment: &str) -> Result<(&str, OfferAction), ApiError> {
    let not_found = || ApiError::NotFound(format!("no route /v1/offers/{segment}"));
    let (offer_id, action) = segment.rsplit_once(':').ok_or_else(not_found)?;
    match action {
        "accept" => Ok((offer_id, OfferAction::Accept)),
        "decline" => Ok((offer_id, OfferAction::Decline)),
        _ => Err(not_found()),
    }
}

/// Joins a sold-out show's waitlist (`resource_id` is the show id).
#[utoipa::path(
    post, path = "/v1/resources/{resource_id}/waitlist:join", tag = "waitlist",
    params(
        ("resource_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    request_body = JoinWaitlistRequest,
    security(("session" = [])),
    responses(
        (status = 201, description = "The entry and the waiters ahead of it", body = WaitlistEntry),
        (status = 400, description = "Bad quantity, JSON, key or claim", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "A claim not issued for this session and show, or expired", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`waitlist_disabled`, `not_sold_out`, `already_on_waitlist`, `show_cancelled`, `idempotency_key_reused`", body = ErrorBody),
        (status = 429, description = "`queue_full`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn join_waitlist(
    State(state): State<RestState>,
    Path(resource_id): Path<String>,
    Session(session): Session,
    Idempotency(key): Idempotency,
    JsonBody(request): JsonBody<JoinWaitlistRequest>,
) -> Result<(StatusCode, Json<WaitlistEntry>), ApiError> {
    let show = parse_show_id("resource_id", &resource_id)?;
    let quantity = request.quantity()?;
    let band = operations::waitlist_band(&state.service, show, session, request.claim.as_deref())?;
    let joined =
        operations::join_waitlist(&state.service, show, session, key, quantity, band).await?;
    Ok((StatusCode::CREATED, Json(WaitlistEntry::from_view(show, &joined))))
}

/// One of this session's waitlist entries, its place in line and its offer, read
/// linearizably.
#[utoipa::path(
    get, path = "/v1/waitlist/{entry_id}", tag = "waitlist",
    params(("entry_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = [])),
    responses(
        (status = 200, description = "The entry", body = WaitlistEntry),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`entry_not_found`", body = ErrorBody),
        (status = 503, description = "No leader", body = ErrorBody),
    )
)]
pub async fn get_entry(
    State(state): State<RestState>,
    Path(entry_id): Path<String>,
    Session(session): Session,
) -> Result<Json<WaitlistEntry>, ApiError> {
    let (show, number) = parse_id("entry_id", &entry_id)?;
    let found = operations::get_entry(&state.service, show, EntryId(number), session).await?;
    Ok(Json(WaitlistEntry::from_view(show, &found)))
}

/// Leaves the waitlist; an open offer is declined and passed on.
#[utoipa::path(
    delete, path = "/v1/waitlist/{entry_id}", tag = "waitlist",
    params(
        ("entry_id" = String, Path, description = "`<show_id>-<n>`"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The entry, left", body = WaitlistEntry),
        (status = 400, description = "Malformed id or key", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`entry_not_found`", body = ErrorBody),
        (status = 409, description = "`entry_not_active`, `idempotency_key_reused`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn leave_waitlist(
    State(state): State<RestState>,
    Path(entry_id): Path<String>,
    Session(session): Session,
    Idempotency(key): Idempotency,
) -> Result<Json<WaitlistEntry>, ApiError> {
    let (show, number) = parse_id("entry_id", &entry_id)?;
    let entry = EntryId(number);
    let left = operations::leave_waitlist(&state.service, show, session, key, entry).await?;
    Ok(Json(WaitlistEntry::from_view(show, &left)))
}

/// Accepts an offer: its seats become a hold of this session (201 Hold).
#[utoipa::path(
    post, path = "/v1/offers/{offer_id}:accept", tag = "waitlist",
    params(
        ("offer_id" = String, Path, description = "`<show_id>-<n>`"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("session" = [])),
    responses(
        (status = 201, description = "The hold made from the offer", body = Hold),
        (status = 400, description = "Malformed id or key", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`offer_not_found`", body = ErrorBody),
        (status = 409, description = "`offer_not_active`, `too_many_holds`, `idempotency_key_reused`", body = ErrorBody),
        (status = 410, description = "`offer_expired`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn accept_offer(
    state: &RestState,
    show: ShowId,
    offer: OfferId,
    session: SessionId,
    key: IdempotencyKey,
) -> Result<Response, ApiError> {
    let view = operations::accept_offer(&state.service, show, session, key, offer).await?;
    Ok((StatusCode::CREATED, Json(Hold::from_view(show, &view))).into_response())
}

/// Declines an offer: its seats go to the next waiter (200 Offer).
#[utoipa::path(
    post, path = "/v1/offers/{offer_id}:decline", tag = "waitlist",
    params(
        ("offer_id" = String, Path, description = "`<show_id>-<n>`"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The declined offer", body = Offer),
        (status = 400, description = "Malformed id or key", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`offer_not_found`", body = ErrorBody),
        (status = 409, description = "`offer_not_active`, `idempotency_key_reused`", body = ErrorBody),
        (status = 410, description = "`offer_expired`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn decline_offer(
    state: &RestState,
    show: ShowId,
    offer: OfferId,
    session: SessionId,
    key: IdempotencyKey,
) -> Result<Response, ApiError> {
    let view = operations::decline_offer(&state.service, show, session, key, offer).await?;
    Ok(Json(Offer::from_view(show, &view)).into_response())
}

/// Serves `POST /v1/offers/{offer_id}:accept` and `:decline` through [`accept_offer`] and
/// [`decline_offer`] (which the OpenAPI document describes): an unknown action is a 404
/// before the session or key is looked at.
pub async fn offer_action(
    State(state): State<RestState>,
    Path(segment): Path<String>,
    session: Result<Session, ApiError>,
    key: Result<Idempotency, ApiError>,
) -> Result<Response, ApiError> {
    let (offer_id, action) = split_offer_action(&segment)?;
    let (show, number) = parse_id("offer_id", offer_id)?;
    let Session(session) = session?;
    let Idempotency(key) = key?;
    let offer = OfferId(number);
    match action {
        OfferAction::Accept => accept_offer(&state, show, offer, session, key).await,
        OfferAction::Decline => decline_offer(&state, show, offer, session, key).await,
    }
}

/// Releases free seats of a show to its waitlist (operator), once per event id.
#[utoipa::path(
    post, path = "/v1/internal/capacity-released", tag = "waitlist",
    params(("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    request_body = CapacityReleasedRequest,
    security(("operator" = [])),
    responses(
        (status = 200, description = "What the event did", body = CapacityReleased),
        (status = 400, description = "Bad seats, event id or JSON; `seat_out_of_range`", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`seat_unavailable` (seats not free), `show_cancelled`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn capacity_released(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; the event id is what deduplicates a delivery.
    _key: Idempotency,
    JsonBody(request): JsonBody<CapacityReleasedRequest>,
) -> Result<Json<CapacityReleased>, ApiError> {
    let event_id = request.event_id.clone();
    let (show, event, seats) = request.into_parts()?;
    let released = operations::capacity_released(&state.service, show, event, seats).await?;
    Ok(Json(CapacityReleased {
        show_id: show.0,
        event_id,
        seats_released: released.seats_released,
        duplicate: released.duplicate,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn offer_actions_split_at_the_last_colon() {
        assert_eq!(split_offer_action("41-3:accept").unwrap(), ("41-3", OfferAction::Accept));
        assert_eq!(split_offer_action("41-3:decline").unwrap(), ("41-3", OfferAction::Decline));
        assert_eq!(split_offer_action("a:b:decline").unwrap().0, "a:b");
        for bad in ["41-3", "41-3:", "41-3:take", "41-3:ACCEPT", ":x"] {
            let error = split_offer_action(bad).unwrap_err();
            assert_eq!(error.http_status(), 404, "{bad}");
        }
        // A known action with a malformed id is a 400, not a 404.
        let (id, _) = split_offer_action("seven:accept").unwrap();
        assert_eq!(parse_id("offer_id", id).unwrap_err().http_status(), 400);
    }

    #[test]
    fn a_join_takes_a_quantity_and_a_claim_but_never_a_band() {
        let parse = |value: serde_json::Value| {
            serde_json::from_value::<JoinWaitlistRequest>(value)
                .map_err(|error| ApiError::InvalidArgument(error.to_string()))
                .and_then(|request| request.quantity())
        };
        assert_eq!(parse(json!({"quantity": 2, "claim": "c1_x"})).unwrap(), 2);
        assert_eq!(parse(json!({"quantity": 2})).unwrap(), 2);
        for bad in [
            json!({"quantity": 0}),
            json!({"quantity": 11}),
            json!({"quantity": 300}),
            json!({"quantity": 2, "band": 0}),
            json!({}),
        ] {
            assert_eq!(parse(bad.clone()).unwrap_err().http_status(), 400, "{bad}");
        }
    }

    #[test]
    fn capacity_events_are_checked_and_hashed_by_id() {
        let request = |seats: Vec<u32>, event: &str| CapacityReleasedRequest {
            show_id: 41,
            event_id: event.into(),
            seats,
        };
        let (show, event, seats) = request(vec![3, 1], "evt-1").into_parts().unwrap();
        assert_eq!((show, seats.as_slice()), (ShowId(41), &[1, 3][..]));
        assert_eq!(request(vec![1, 3], "evt-1").into_parts().unwrap().1, event);
        assert_ne!(request(vec![1], "evt-2").into_parts().unwrap().1, event);
        assert!(request(vec![], "e").into_parts().is_err());
        assert!(request(vec![1, 1], "e").into_parts().is_err());
        assert!(request(vec![1], "").into_parts().is_err());
        assert!(request((0..1025).collect(), "e").into_parts().is_err());
        let zero = CapacityReleasedRequest { show_id: 0, event_id: "e".into(), seats: vec![1] };
        assert!(zero.into_parts().is_err());
    }
}
