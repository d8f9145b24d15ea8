//! Payment attempts over REST: `GET /v1/payments/{payment_id}`, for the buyer who owns the
//! attempt or the operator.
//!
//! Owns the payment JSON shape: the attempt's state (`pending`, `unknown`, `succeeded`,
//! `declined`, `refunded`) and whether money is owed back. Reads linearizably on the group's
//! leader. Never decides anything about money: the state machine and the leader's payment and
//! refund workers do.

use axum::Json;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};
use statemachine::{PaymentId, PaymentView, SessionId, ShowId};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::names::PaymentStateName;
use crate::operations;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::ids::{format_id, parse_id};
use crate::rest::types::{AsOf, Money};

/// A payment attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Payment {
    /// The attempt (`<show_id>-<n>`): the provider's idempotency key for its charge.
    pub payment_id: String,
    /// Its show.
    pub show_id: u64,
    /// The hold it pays for.
    pub hold_id: String,
    /// What it charges.
    pub price: Money,
    /// Its state; `refunded` once the provider gave the money back.
    pub state: PaymentStateName,
    /// Whether its money is owed back and not yet refunded (a late payment, a cancelled
    /// booking): the group leader's refund worker is on it.
    pub refund_owed: bool,
    /// Log time (ms) the attempt was created (checkout).
    pub created_ms: u64,
    /// When this view was read.
    pub as_of: AsOf,
}

impl Payment {
    /// The JSON shape of a payment attempt of `show`.
    pub fn from_view(show: ShowId, view: &PaymentView) -> Payment {
        let payment = &view.payment;
        Payment {
            payment_id: format_id(show, payment.id.0),
            show_id: show.0,
            hold_id: format_id(show, payment.hold.0),
            price: payment.price.into(),
            state: payment.state.status().into(),
            refund_owed: payment.refund_required(),
            created_ms: payment.created_ms,
            as_of: view.as_of.into(),
        }
    }
}

/// Who reads: a session (which must own what it reads) or, without a valid session token, the
/// operator credential (which reads anything); see `Sessions::viewer`.
#[derive(Clone, Copy, Debug)]
pub struct Viewer(pub Option<SessionId>);

impl FromRequestParts<RestState> for Viewer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &RestState) -> Result<Self, ApiError> {
        let authorization =
            parts.headers.get("authorization").and_then(|value| value.to_str().ok());
        Ok(Viewer(state.service.shared().sessions.viewer(authorization)?))
    }
}

/// A payment attempt, read linearizably on its group's leader (the owner, or the operator).
#[utoipa::path(
    get, path = "/v1/payments/{payment_id}", tag = "payments",
    params(("payment_id" = String, Path, description = "`<show_id>-<n>`")),
    security(("session" = []), ("operator" = [])),
    responses(
        (status = 200, description = "The payment attempt", body = Payment),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Neither a session token nor the operator credential", body = ErrorBody),
        (status = 403, description = "`not_owner`", body = ErrorBody),
        (status = 404, description = "`payment_not_found`, `show_not_found`", body = ErrorBody),
        (status = 503, description = "No leader", body = ErrorBody),
    )
)]
pub async fn get_payment(
    State(state): State<RestState>,
    Path(payment_id): Path<String>,
    Viewer(viewer): Viewer,
) -> Result<Json<Payment>, ApiError> {
    let (show, number) = parse_id("payment_id", &payment_id)?;
    let view = operations::get_payment(&state.service, show, PaymentId(number), viewer).await?;
    Ok(Json(Payment::from_view(show, &view)))
}
