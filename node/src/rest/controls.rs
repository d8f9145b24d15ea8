//! The operator's controls of an existing show over REST: open and close its sales, cancel it,
//! set its prices, configure its admission lane and its waitlist.
//!
//! Owns their JSON shapes and the order of their checks: the operator credential first (401
//! without a bearer token, 403 with another one), then the idempotency key and the request
//! (400, and nothing is proposed), then one operation of `crate::operations`. Each control sets
//! a state rather than adding to one, so a repeat (under the same key or another) answers as the
//! first call did and changes nothing more; the key is required as on every mutation but not
//! stored. Never judges a rule that needs the show (the state machine does: a price version
//! that is not the next one, prices that are not one per seat class, a window below the grants
//! outstanding, a cancelled show). Opening, closing and setting prices say `duplicate` when the
//! show already was so, and every change a control makes is in the show's audit trail
//! (`GET /v1/audit/show/{show_id}`).

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use statemachine::OperatorCommand;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::input;
use crate::names::ShowStatusName;
use crate::operations;
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, JsonBody, Operator};
use crate::rest::ids::parse_show_id;
use crate::rest::shows::{AdmissionSettings, WaitlistSettings};

/// A show's sales status after the operator opened or closed its sales.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SalesStatus {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
    /// Its sales status now: `on_sale` after opening, `closed` after closing.
    pub status: ShowStatusName,
    /// The show already had this status: nothing changed.
    pub duplicate: bool,
}

impl SalesStatus {
    fn of(changed: &operations::SalesChanged) -> SalesStatus {
        SalesStatus {
            show_id: changed.show.0,
            group_id: changed.group,
            status: changed.status.into(),
            duplicate: changed.duplicate,
        }
    }
}

/// Opens a show's sales (operator): holds may be made. Opening an open show changes nothing and
/// answers `duplicate: true`.
#[utoipa::path(
    post, path = "/v1/shows/{show_id}/open", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("operator" = [])),
    responses(
        (status = 200, description = "The show is on sale", body = SalesStatus),
        (status = 400, description = "Malformed show id or key", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`show_cancelled`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn open_sales(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; opening is idempotent by the show's state.
    _key: Idempotency,
    Path(show_id): Path<String>,
) -> Result<Json<SalesStatus>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let changed =
        operations::change_status(&state.service, OperatorCommand::OpenSales { show }).await?;
    Ok(Json(SalesStatus::of(&changed)))
}

/// Closes a show's sales (operator): no new holds; holds already made may still be paid.
/// Closing a closed show changes nothing and answers `duplicate: true`.
#[utoipa::path(
    post, path = "/v1/shows/{show_id}/close", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("operator" = [])),
    responses(
        (status = 200, description = "The show's sales are closed", body = SalesStatus),
        (status = 400, description = "Malformed show id or key", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`show_cancelled`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn close_sales(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; closing is idempotent by the show's state.
    _key: Idempotency,
    Path(show_id): Path<String>,
) -> Result<Json<SalesStatus>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let changed =
        operations::change_status(&state.service, OperatorCommand::CloseSales { show }).await?;
    Ok(Json(SalesStatus::of(&changed)))
}

/// What cancelling a show did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShowCancelled {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
    /// Live holds released.
    pub holds_released: u32,
    /// Confirmed bookings cancelled, each refunded by the group leader's refund worker.
    pub bookings_refunded: u32,
    /// Admission tickets and waitlist entries told.
    pub waiters_told: u32,
    /// The show was cancelled before: nothing changed (the counts are 0).
    pub duplicate: bool,
}

/// Cancels a show (operator): releases every hold, cancels every confirmed booking with refund
/// work (the group leader refunds each through the payment provider), tells every holder,
/// booker and waiter. Terminal and idempotent: again, it answers `duplicate`.
#[utoipa::path(
    post, path = "/v1/shows/{show_id}/cancel", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    security(("operator" = [])),
    responses(
        (status = 200, description = "The show is cancelled", body = ShowCancelled),
        (status = 400, description = "Malformed show id or key", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn cancel_show(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; cancelling is idempotent by the show's state.
    _key: Idempotency,
    Path(show_id): Path<String>,
) -> Result<Json<ShowCancelled>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let cancelled = operations::cancel_show(&state.service, show).await?;
    Ok(Json(ShowCancelled {
        show_id: cancelled.show.0,
        group_id: cancelled.group,
        holds_released: cancelled.holds_released,
        bookings_refunded: cancelled.bookings_refunded,
        waiters_told: cancelled.waiters_told,
        duplicate: cancelled.duplicate,
    }))
}

/// New prices for a show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PricesRequest {
    /// The new price version: exactly the show's `price_version` plus one.
    pub version: u32,
    /// One price per seat class of the show, in minor units; index = class.
    pub prices_minor: Vec<u64>,
}

/// A show's prices in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PricesSet {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
    /// The price version a hold must quote from now on.
    pub price_version: u32,
    /// One price per seat class, in minor units.
    pub prices_minor: Vec<u64>,
    /// These prices were already in force under this version: nothing changed.
    pub duplicate: bool,
}

/// Sets a show's prices (operator) under the next price version: from then on a hold quoting
/// an older version is refused 409 `price_version_mismatch`. Holds already made keep the price
/// they were quoted. The version and prices in force asked for again (a retry) answer
/// `duplicate: true`.
#[utoipa::path(
    put, path = "/v1/shows/{show_id}/prices", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    request_body = PricesRequest,
    security(("operator" = [])),
    responses(
        (status = 200, description = "The prices are in force", body = PricesSet),
        (status = 400, description = "Malformed show id, key or JSON; no price, too many, one too large, or not one per seat class of the show; version 0", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`price_version_mismatch` (`details.current_price_version`), `show_cancelled`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn set_prices(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; a price version is set once, so the version is the
    // request's identity.
    _key: Idempotency,
    Path(show_id): Path<String>,
    JsonBody(request): JsonBody<PricesRequest>,
) -> Result<Json<PricesSet>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let version = input::price_version("version", request.version)?;
    let prices_minor = input::prices("prices_minor", &request.prices_minor)?;
    let set = operations::set_prices(&state.service, show, version, prices_minor).await?;
    Ok(Json(PricesSet {
        show_id: set.show.0,
        group_id: set.group,
        price_version: set.version,
        prices_minor: set.prices_minor,
        duplicate: set.duplicate,
    }))
}

/// A show's admission lane as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AdmissionConfigured {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
    /// Whether holds need an admission grant.
    pub enabled: bool,
    /// Grants outstanding at once (1 is strict FIFO).
    pub window: u32,
}

/// Turns a show's admission lane on or off and sets its window (operator), with the checks of
/// show creation (`window` 1..=10000, default 1). While it is on, a hold needs a grant (409
/// `grant_required` without); turning it off ends every ticket in line.
#[utoipa::path(
    put, path = "/v1/shows/{show_id}/admission", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    request_body = AdmissionSettings,
    security(("operator" = [])),
    responses(
        (status = 200, description = "The lane is configured", body = AdmissionConfigured),
        (status = 400, description = "Malformed show id, key or JSON; a window out of 1..=10000 or below the grants outstanding", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`show_cancelled`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn configure_admission(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; the lane's settings are set, not added to.
    _key: Idempotency,
    Path(show_id): Path<String>,
    JsonBody(request): JsonBody<AdmissionSettings>,
) -> Result<Json<AdmissionConfigured>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let window = input::admission_window("window", request.window)?;
    let configured =
        operations::configure_admission(&state.service, show, request.enabled, window).await?;
    Ok(Json(AdmissionConfigured {
        show_id: configured.show.0,
        group_id: configured.group,
        enabled: configured.enabled,
        window: configured.window,
    }))
}

/// A show's waitlist as configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WaitlistConfigured {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
    /// Whether buyers may join once the show is sold out.
    pub enabled: bool,
    /// The ordering policy version in force (kept as it was).
    pub policy_version: u32,
}

/// Turns a show's waitlist on or off (operator), keeping its ordering policy version. Turning
/// it off ends every waiting entry (open offers run their course).
#[utoipa::path(
    put, path = "/v1/shows/{show_id}/waitlist", tag = "shows",
    params(
        ("show_id" = u64, Path, description = "The show"),
        ("Idempotency-Key" = String, Header, description = "Required on every mutation"),
    ),
    request_body = WaitlistSettings,
    security(("operator" = [])),
    responses(
        (status = 200, description = "The waitlist is configured", body = WaitlistConfigured),
        (status = 400, description = "Malformed show id, key or JSON", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 409, description = "`show_cancelled`", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn configure_waitlist(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; the waitlist's setting is set, not added to.
    _key: Idempotency,
    Path(show_id): Path<String>,
    JsonBody(request): JsonBody<WaitlistSettings>,
) -> Result<Json<WaitlistConfigured>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let configured = operations::configure_waitlist(&state.service, show, request.enabled).await?;
    Ok(Json(WaitlistConfigured {
        show_id: configured.show.0,
        group_id: configured.group,
        enabled: configured.enabled,
        policy_version: configured.policy_version,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn control_bodies_refuse_unknown_fields_and_missing_ones() {
        let prices: PricesRequest =
            serde_json::from_value(json!({"version": 2, "prices_minor": [4500, 3000]})).unwrap();
        assert_eq!((prices.version, prices.prices_minor.as_slice()), (2, &[4_500, 3_000][..]));
        for body in [
            json!({"version": 2}),
            json!({"prices_minor": [1]}),
            json!({"version": 2, "prices_minor": [1], "currency": "EUR"}),
            json!({"version": -1, "prices_minor": [1]}),
        ] {
            assert!(serde_json::from_value::<PricesRequest>(body.clone()).is_err(), "{body}");
        }
        // The admission body is the one of show creation: the window defaults to 1.
        let admission: AdmissionSettings =
            serde_json::from_value(json!({"enabled": true})).unwrap();
        assert_eq!((admission.enabled, admission.window), (true, 1));
        assert!(serde_json::from_value::<AdmissionSettings>(json!({"window": 5})).is_err());
        assert!(serde_json::from_value::<WaitlistSettings>(json!({"enabled": 1})).is_err());
        assert!(
            serde_json::from_value::<WaitlistSettings>(json!({"enabled": true, "policy": 2}))
                .is_err()
        );
    }

    #[test]
    fn sales_status_names_the_status_on_the_wire() {
        let status = SalesStatus {
            show_id: 4,
            group_id: 1,
            status: ShowStatusName::Closed,
            duplicate: true,
        };
        assert_eq!(
            serde_json::to_value(status).unwrap(),
            json!({"show_id": 4, "group_id": 1, "status": "closed", "duplicate": true})
        );
    }
}
