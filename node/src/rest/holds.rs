//! Holds over REST: hold seats, read, cancel and check out a hold.
//!
//! Owns the hold request body (its seats checked by `crate::input`, its grant a ticket of the
//! same show) and the checkout shape. Never judges a seat: the state machine does (taken seats
//! come back as `seat_unavailable` with the seats; seats outside the show as
//! `seat_out_of_range`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use statemachine::{ClientCommand, ClientRequest, HoldId, ShowId, TicketId};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, JsonBody, Session};
use crate::rest::ids::{format_id, parse_id, parse_show_id};
use crate::rest::types::{Hold, Money};
use crate::{input, operations};

/// A request to hold seats.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HoldRequest {
    /// 1..=10 distinct seat numbers, all or nothing (or name them by `seat_labels`).
    #[serde(default)]
    pub seats: Vec<u32>,
    /// 1..=10 distinct seat labels of the show's hall (e.g. `B12`), instead of `seats`, for a
    /// show listed in the catalog.
    #[serde(default)]
    pub seat_labels: Vec<String>,
    /// The price version quoted (the show's `price_version`).
    pub price_version: u32,
    /// The admission grant (a granted ticket of this show), required while its lane is on.
    #[serde(default)]
    pub grant_id: Option<String>,
}

impl HoldRequest {
    /// The state machine request, checked.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for no seats, more than 10, a seat named twice, or a malformed grant
    /// or one of another show.
    pub fn into_request(self, show: ShowId) -> Result<ClientRequest, ApiError> {
        if !self.seat_labels.is_empty() {
            return Err(ApiError::InvalidArgument(
                "seat_labels: resolve them first (HoldRequest::resolve_labels)".into(),
            ));
        }
        let seats = input::seats("seats", &self.seats)?;
        let grant = match self.grant_id {
            None => None,
            Some(text) => {
                let (grant_show, number) = parse_id("grant_id", &text)?;
                if grant_show != show {
                    return Err(ApiError::InvalidArgument(format!(
                        "grant_id: {text} is a ticket of another show"
                    )));
                }
                Some(TicketId(number))
            }
        };
        Ok(ClientRequest::Hold { seats, price_version: self.price_version, grant })
    }
}

impl HoldRequest {
    /// The request with its `seat_labels` turned into seat numbers by the show's hall, as this
    /// node's replica of the catalog knows it (a hall's seats and a listing's hall never
    /// change, so any replica that knows the listing knows the right numbers).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for both or neither of `seats` and `seat_labels`, a label the hall
    /// does not have, or a show that is not listed.
    fn resolve_labels(mut self, state: &RestState, show: ShowId) -> Result<Self, ApiError> {
        match (self.seats.is_empty(), self.seat_labels.is_empty()) {
            (_, true) => return Ok(self),
            (false, false) => {
                return Err(ApiError::InvalidArgument(
                    "seats: name seats by number or by label, not both".into(),
                ));
            }
            (true, false) => {}
        }
        self.seats = state.service.seats_of_labels(show, &self.seat_labels)?;
        self.seat_labels.clear();
        Ok(self)
    }
}

/// A started checkout: the payment attempt to charge and its deadline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Checkout {
    /// The hold, now processing.
    pub hold_id: String,
    /// The payment attempt (stable across checkout retries).
    pub payment_id: String,
    /// What will be charged.
    pub amount: Money,
    /// Log time (ms) by which the payment must succeed.
    pub processing_deadline_ms: u64,
}

/// Holds 1..=10 seats of a show for this session, all or nothing.
#[utoipa::path(
    post, path = "/v1/shows/{show_id}/holds", tag = "holds",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    request_body = HoldRequest,
    security(("session" = [])),
    responses(
        (status = 201, description = "The seats are held until `deadline_ms`", body = Hold),
        (status = 400, description = "Bad seats, JSON or key; `seat_out_of_range`", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`seat_unavailable` (details.seats), `idempotency_key_reused`, `show_not_on_sale`, `price_version_mismatch`, `too_many_holds`, `grant_required`", body = ErrorBody),
        (status = 410, description = "`grant_expired`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown: retry with the same key", body = ErrorBody),
    )
)]
pub async fn create_hold(
    State(state): State<RestState>,
    Path(show_id): Path<String>,
    Session(session): Session,
    Idempotency(key): Idempotency,
    JsonBody(request): JsonBody<HoldRequest>,
) -> Result<(StatusCode, Json<Hold>), ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let request = request.resolve_labels(&state, show)?.into_request(show)?;
    let command = ClientCommand { show, session, key, request };
    let view = operations::hold(&state.service, command).await?;
    let labels = state.service.labels_of(show, view.hold.seats.iter().copied())?;
    Ok((StatusCode::CREATED, Json(Hold { seat_labels: labels, ..Hold::from_view(show, &view) })))
}

/// One of this session's holds, read linearizably on its group's leader.
#[utoipa::path(
    get, path = "/v1/holds/{hold_id}", tag = "holds",
    params(("hold_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = [])),
    responses(
        (status = 200, description = "The hold", body = Hold),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`hold_not_found`, `show_not_found`", body = ErrorBody),
        (status = 503, description = "No leader", body = ErrorBody),
    )
)]
pub async fn get_hold(
    State(state): State<RestState>,
    Path(hold_id): Path<String>,
    Session(session): Session,
) -> Result<Json<Hold>, ApiError> {
    let (show, number) = parse_id("hold_id", &hold_id)?;
    let view = operations::get_hold(&state.service, show, HoldId(number), session).await?;
    let labels = state.service.labels_of(show, view.hold.seats.iter().copied())?;
    Ok(Json(Hold { seat_labels: labels, ..Hold::from_view(show, &view) }))
}

/// Cancels one of this session's held holds; its seats are released.
#[utoipa::path(
    delete, path = "/v1/holds/{hold_id}", tag = "holds",
    params(
        ("hold_id" = String, Path, description = "`<show_id>-<n>`"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("session" = [])),
    responses(
        (status = 200, description = "The cancelled hold", body = Hold),
        (status = 400, description = "Malformed id or key", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`hold_not_found`", body = ErrorBody),
        (status = 409, description = "`hold_not_active`, `payment_in_progress`, `idempotency_key_reused`", body = ErrorBody),
        (status = 410, description = "`hold_expired`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn cancel_hold(
    State(state): State<RestState>,
    Path(hold_id): Path<String>,
    Session(session): Session,
    Idempotency(key): Idempotency,
) -> Result<Json<Hold>, ApiError> {
    let (show, number) = parse_id("hold_id", &hold_id)?;
    let view = operations::cancel_hold(&state.service, show, session, key, HoldId(number)).await?;
    Ok(Json(Hold::from_view(show, &view)))
}

/// Starts paying for one of this session's held holds (retries get the same attempt).
#[utoipa::path(
    post, path = "/v1/holds/{hold_id}/checkout", tag = "holds",
    params(
        ("hold_id" = String, Path, description = "`<show_id>-<n>`"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("session" = [])),
    responses(
        (status = 201, description = "The payment attempt and its deadline", body = Checkout),
        (status = 400, description = "Malformed id or key", body = ErrorBody),
        (status = 401, description = "No session token", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`hold_not_found`", body = ErrorBody),
        (status = 409, description = "`hold_not_active`, `payment_attempts_exhausted`, `idempotency_key_reused`", body = ErrorBody),
        (status = 410, description = "`hold_expired`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn checkout(
    State(state): State<RestState>,
    Path(hold_id): Path<String>,
    Session(session): Session,
    Idempotency(key): Idempotency,
) -> Result<(StatusCode, Json<Checkout>), ApiError> {
    let (show, number) = parse_id("hold_id", &hold_id)?;
    let started = operations::checkout(&state.service, show, session, key, HoldId(number)).await?;
    Ok((
        StatusCode::CREATED,
        Json(Checkout {
            hold_id: format_id(show, started.hold.0),
            payment_id: format_id(show, started.payment.0),
            amount: started.price.into(),
            processing_deadline_ms: started.deadline_ms,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hold(value: serde_json::Value) -> Result<ClientRequest, ApiError> {
        let request: HoldRequest = serde_json::from_value(value)
            .map_err(|error| ApiError::InvalidArgument(error.to_string()))?;
        request.into_request(ShowId(41))
    }

    #[test]
    fn a_hold_request_becomes_a_sorted_seat_set_with_its_grant() {
        let request = hold(json!({"seats": [56, 54, 55], "price_version": 2, "grant_id": "41-3"}));
        assert_eq!(
            request.unwrap(),
            ClientRequest::Hold {
                seats: [54, 55, 56].as_slice().try_into().unwrap(),
                price_version: 2,
                grant: Some(TicketId(3)),
            }
        );
        let ten: Vec<u32> = (0..10).collect();
        assert!(hold(json!({"seats": ten, "price_version": 1})).is_ok());
    }

    #[test]
    fn bad_hold_requests_are_400s() {
        let eleven: Vec<u32> = (0..11).collect();
        for body in [
            json!({"seats": eleven, "price_version": 1}),
            json!({"seats": [], "price_version": 1}),
            json!({"seats": [4, 5, 4], "price_version": 1}),
            json!({"seats": [-1], "price_version": 1}),
            json!({"seats": [1], "price_version": 1, "session": "x"}),
            json!({"seats": [1]}),
            json!({"seats": "1", "price_version": 1}),
            json!({"seats": [1], "price_version": 1, "grant_id": "42-3"}),
            json!({"seats": [1], "price_version": 1, "grant_id": "3"}),
            json!({"seats": [1], "price_version": 1, "grant_id": 3}),
        ] {
            let error = hold(body.clone()).unwrap_err();
            assert_eq!(error.http_status(), 400, "{body}: {error}");
        }
    }

    #[test]
    fn a_checkout_serializes_with_external_ids() {
        let checkout = Checkout {
            hold_id: "41-7".into(),
            payment_id: "41-8".into(),
            amount: Money { amount_minor: 100, currency: "EUR".into() },
            processing_deadline_ms: 5,
        };
        assert_eq!(
            serde_json::to_value(checkout).unwrap(),
            json!({"hold_id": "41-7", "payment_id": "41-8",
                "amount": {"amount_minor": 100, "currency": "EUR"}, "processing_deadline_ms": 5})
        );
    }
}
