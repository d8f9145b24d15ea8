//! Shows over REST: the list and one show's summary (from this replica, with `as_of`), the
//! seat map (this replica, stale allowed, labelled `as_of`; or, with
//! `?consistency=linearizable`, the group leader's after ReadIndex), and creating a show
//! (operator). The operator's controls of an existing show are `controls.rs`'s.
//!
//! Owns the show JSON shapes and checking a new show completely before anything is proposed
//! (so a bad layout never leaves a placement behind). Never judges sales rules: the state
//! machine does, and the service routes.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderName, StatusCode, header};
use serde::{Deserialize, Serialize};
use statemachine::{
    EventId, HallId, ListingSpec, OperatorCommand, SeatRange, ShowPolicy, ShowSpec,
};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::input;
use crate::names::{SeatStatusName, ShowStatusName};
use crate::operations::{self, Freshness};
use crate::rest::RestState;
use crate::rest::catalog::{self, Listing};
use crate::rest::error::ErrorBody;
use crate::rest::extract::{Idempotency, JsonBody, Operator};
use crate::rest::ids::parse_show_id;
use crate::rest::types::AsOf;
use crate::service::{ShowSetup, checked_spec};

/// Seats of a show by status, as its seat map counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SeatCounts {
    /// Free seats (a hold past its deadline counts as free, as on the seat map).
    pub free: u32,
    /// Seats in live holds.
    pub held: u32,
    /// Sold seats.
    pub booked: u32,
    /// Seats kept for or offered to the waitlist.
    pub reserved: u32,
}

/// A show's admission lane settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSettings {
    /// Whether holds need an admission grant.
    pub enabled: bool,
    /// Outstanding grants at once (1 is strict FIFO); 1..=10000, default 1.
    #[serde(default = "window_default")]
    pub window: u32,
}

fn window_default() -> u32 {
    1
}

/// A show's waitlist settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitlistSettings {
    /// Whether buyers may join the waitlist once the show is sold out.
    pub enabled: bool,
}

/// A show as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShowSummary {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
    /// Its sales status.
    pub status: ShowStatusName,
    /// Its seats (numbered `0..seat_count`).
    pub seat_count: u32,
    /// Its seats by status.
    pub counts: SeatCounts,
    /// The price version to quote when holding.
    pub price_version: u32,
    /// The currency of every price.
    pub currency: String,
    /// One price per seat class, in minor units; index = class.
    pub prices_minor: Vec<u64>,
    /// The admission lane.
    pub admission: AdmissionSettings,
    /// The waitlist.
    pub waitlist: WaitlistSettings,
    /// The replica state this summary was read from.
    pub as_of: AsOf,
    /// What it is a showing of, where and when (null if it is not in the catalog).
    pub listing: Option<Listing>,
}

impl ShowSummary {
    fn of(summary: &operations::ShowSummary, listing: Option<Listing>) -> ShowSummary {
        ShowSummary {
            show_id: summary.show.0,
            group_id: summary.group,
            status: summary.status.into(),
            seat_count: summary.seat_count,
            counts: SeatCounts {
                free: summary.free,
                held: summary.held,
                booked: summary.booked,
                reserved: summary.reserved,
            },
            price_version: summary.price_version,
            currency: summary.currency.to_string(),
            prices_minor: summary.prices_minor.clone(),
            admission: AdmissionSettings {
                enabled: summary.admission.0,
                window: summary.admission.1,
            },
            waitlist: WaitlistSettings { enabled: summary.waitlist.0 },
            as_of: summary.as_of.into(),
            listing,
        }
    }
}

/// Every show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShowList {
    /// The shows, in id order.
    pub shows: Vec<ShowSummary>,
}

/// How fresh a seat map must be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Consistency {
    /// The answering node's replica: any node serves it, possibly a little stale (see
    /// `as_of`).
    #[default]
    Replica,
    /// The show's group leader, after confirming its leadership with a quorum (ReadIndex): the
    /// map reflects every write acknowledged before the request. A follower forwards the
    /// request to the leader.
    Linearizable,
}

/// The query of `GET /v1/shows/{show_id}/seats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct SeatsQuery {
    /// `replica` (the default) or `linearizable`. An unknown parameter or value is refused
    /// rather than ignored, so that a misspelt request never gets a staler map than it asked
    /// for.
    #[serde(default)]
    #[param(inline)]
    pub consistency: Consistency,
}

/// A show's seat map, from one replica or (when asked for) read linearizably.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SeatMap {
    /// The show.
    pub show_id: u64,
    /// Its sales status.
    pub status: ShowStatusName,
    /// The price version to quote when holding.
    pub price_version: u32,
    /// The currency.
    pub currency: String,
    /// One price per class, in minor units.
    pub prices_minor: Vec<u64>,
    /// Each seat's class (an index into `prices_minor`), by seat number.
    pub classes: Vec<u8>,
    /// Each seat's status, by seat number (a hold past its deadline reads as free).
    pub seats: Vec<SeatStatusName>,
    /// How it was read: as asked for.
    pub consistency: Consistency,
    /// The replica state this map was read from (for a `replica` read, stale by at most a few
    /// seconds).
    pub as_of: AsOf,
}

/// A run of consecutive seats of one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SeatRangeRequest {
    /// Seats in the run.
    pub count: u32,
    /// Their class (an index into `prices_minor`).
    pub class: u8,
}

/// Deadlines and rules of a new show; every field defaults to the cluster's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRequest {
    /// How long a hold keeps its seats (default 5 min).
    pub hold_ttl_ms: Option<u64>,
    /// How long a processing hold keeps its seats while its payment resolves (default 2 min).
    pub payment_grace_ms: Option<u64>,
    /// How long an admission grant lives (default 60 s).
    pub grant_ttl_ms: Option<u64>,
    /// How long an admission ticket may wait (default 1 h).
    pub ticket_wait_ms: Option<u64>,
    /// How long a waitlist offer lives (default 10 min).
    pub offer_ttl_ms: Option<u64>,
    /// Live holds one session may have in this show (default 4).
    pub holds_per_session_max: Option<u32>,
    /// Whether buyers may cancel confirmed bookings (default true).
    pub booking_cancel_allowed: Option<bool>,
}

impl PolicyRequest {
    fn policy(&self) -> ShowPolicy {
        let mut policy = ShowPolicy::default();
        policy.hold_ttl_ms = self.hold_ttl_ms.unwrap_or(policy.hold_ttl_ms);
        policy.payment_grace_ms = self.payment_grace_ms.unwrap_or(policy.payment_grace_ms);
        policy.grant_ttl_ms = self.grant_ttl_ms.unwrap_or(policy.grant_ttl_ms);
        policy.ticket_wait_ms = self.ticket_wait_ms.unwrap_or(policy.ticket_wait_ms);
        policy.offer_ttl_ms = self.offer_ttl_ms.unwrap_or(policy.offer_ttl_ms);
        policy.holds_per_session_max =
            self.holds_per_session_max.unwrap_or(policy.holds_per_session_max);
        policy.booking_cancel_allowed =
            self.booking_cancel_allowed.unwrap_or(policy.booking_cancel_allowed);
        policy
    }
}

/// A new show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateShowRequest {
    /// The show's id (non-zero, unused).
    pub show_id: u64,
    /// ISO 4217 code of every price, three upper-case letters.
    pub currency: String,
    /// One price per seat class, in minor units (1..=32 classes).
    pub prices_minor: Vec<u64>,
    /// Consecutive seat ranges from seat 0 (1..=100,000 seats in all); absent for a show in
    /// a hall of the catalog (`listing`), whose seats are the hall's.
    #[serde(default)]
    pub layout: Vec<SeatRangeRequest>,
    /// The show in the catalog: an event in a hall at a time. Its seats, classes and labels
    /// become the hall's; `prices_minor` gives one price per class of the hall.
    #[serde(default)]
    pub listing: Option<ListingRequest>,
    /// Deadlines and rules (defaults when absent).
    #[serde(default)]
    pub policy: Option<PolicyRequest>,
    /// The admission lane (off when absent).
    #[serde(default)]
    pub admission: Option<AdmissionSettings>,
    /// The waitlist (off when absent).
    #[serde(default)]
    pub waitlist: Option<WaitlistSettings>,
    /// Whether to open sales at once (default true).
    #[serde(default)]
    pub open_sales: Option<bool>,
    /// The data group to place it in (default: the one with the fewest shows).
    #[serde(default)]
    pub group_id: Option<u64>,
}

/// Where and when a new show plays, in the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ListingRequest {
    /// The event it is a showing of.
    pub event_id: u64,
    /// The hall it plays in (its seats become the show's).
    pub hall_id: u64,
    /// When it starts (Unix ms).
    pub starts_at_ms: u64,
}

impl CreateShowRequest {
    /// The show's spec, setup commands and listing, checked completely: nothing is proposed
    /// for a request that would be refused half-way. A listed show's layout is left empty (its
    /// hall's is filled in, and the spec checked, by `Service::create_listed_show`).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the first problem.
    pub fn into_parts(
        self,
    ) -> Result<(ShowSpec, Vec<OperatorCommand>, Option<ListingSpec>), ApiError> {
        let listing = match self.listing {
            None => None,
            Some(_) if !self.layout.is_empty() => {
                return Err(ApiError::InvalidArgument(
                    "layout: a listed show's seats are its hall's (omit layout)".into(),
                ));
            }
            Some(ListingRequest { event_id, hall_id, starts_at_ms }) => Some(ListingSpec {
                event: EventId(input::nonzero("listing.event_id", event_id)?),
                hall: HallId(input::nonzero("listing.hall_id", hall_id)?),
                starts_at_ms,
            }),
        };
        let listed = listing.is_some();
        let request = CreateShowRequest { listing: None, ..self };
        let (spec, setup) = request.commands(listed)?;
        Ok((spec, setup, listing))
    }

    /// The show's spec and setup commands, checked completely (as [`Self::into_parts`]).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the first problem.
    pub fn into_commands(self) -> Result<(ShowSpec, Vec<OperatorCommand>), ApiError> {
        self.commands(false)
    }

    fn commands(self, listed: bool) -> Result<(ShowSpec, Vec<OperatorCommand>), ApiError> {
        let show = input::show_id("show_id", self.show_id)?;
        let currency = input::currency("currency", &self.currency)?;
        let spec = ShowSpec {
            show,
            currency,
            prices_minor: self.prices_minor,
            layout: self
                .layout
                .iter()
                .map(|range| SeatRange { count: range.count, class: range.class })
                .collect(),
            policy: self.policy.unwrap_or_default().policy(),
        };
        let spec = if listed { spec } else { checked_spec(spec)? };
        let setup = ShowSetup {
            admission: self
                .admission
                .map(|AdmissionSettings { enabled, window }| (enabled, window)),
            waitlist: self.waitlist.map(|WaitlistSettings { enabled }| (enabled, 0)),
            open_sales: self.open_sales.unwrap_or(true),
        }
        .commands(show)?;
        Ok((spec, setup))
    }
}

/// Where a new show lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShowCreated {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
}

/// Lists every show placed in the cluster, each read from this node's replica of its group.
#[utoipa::path(
    get, path = "/v1/shows", tag = "shows",
    responses(
        (status = 200, description = "Every show this node's replicas know", body = ShowList),
        (status = 503, description = "No leader", body = ErrorBody),
    )
)]
pub async fn list_shows(State(state): State<RestState>) -> Result<Json<ShowList>, ApiError> {
    let shows = operations::list_shows(&state.service)?;
    let mut summaries = Vec::with_capacity(shows.len());
    for show in &shows {
        summaries.push(ShowSummary::of(show, catalog::listing_of(&state, show.show)?));
    }
    Ok(Json(ShowList { shows: summaries }))
}

/// One show's summary, from this node's replica of its group: a show's page, which browsers
/// and a CDN may keep for [`SHOW_PAGE_MAX_AGE_S`] (`Cache-Control: public`); as a replica
/// read it may already be behind the leader, by as much as its `as_of` says.
#[utoipa::path(
    get, path = "/v1/shows/{show_id}", tag = "shows",
    params(("show_id" = u64, Path, description = "The show")),
    responses(
        (status = 200, description = "The show (`Cache-Control: public, max-age=1`)", body = ShowSummary),
        (status = 400, description = "Malformed show id", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
    )
)]
pub async fn get_show(
    State(state): State<RestState>,
    Path(show_id): Path<String>,
) -> Result<([(HeaderName, &'static str); 1], Json<ShowSummary>), ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let summary = operations::get_show(&state.service, show).await?;
    let summary = ShowSummary::of(&summary, catalog::listing_of(&state, show)?);
    Ok(([(header::CACHE_CONTROL, SHOW_PAGE_CACHE_CONTROL)], Json(summary)))
}

/// How long a browser or an HTTP cache may keep a show's page, seconds: as long as a seat map
/// (`crate::seat_maps::AVAILABILITY_MAX_AGE_S`), which carries the same counts seat by seat.
pub const SHOW_PAGE_MAX_AGE_S: u64 = crate::seat_maps::AVAILABILITY_MAX_AGE_S;

/// `Cache-Control` of a show's page.
pub const SHOW_PAGE_CACHE_CONTROL: &str = "public, max-age=1";

const _: () = assert!(SHOW_PAGE_MAX_AGE_S == 1, "SHOW_PAGE_CACHE_CONTROL says max-age=1");

/// A show's seat map: from this node's replica (stale allowed, labelled `as_of`), or with
/// `consistency=linearizable` from the show's group leader after ReadIndex.
#[utoipa::path(
    get, path = "/v1/shows/{show_id}/seats", tag = "shows",
    params(("show_id" = u64, Path, description = "The show"), SeatsQuery),
    responses(
        (status = 200, description = "The seat map", body = SeatMap),
        (status = 400, description = "Malformed show id or query", body = ErrorBody),
        (status = 404, description = "`show_not_found`", body = ErrorBody),
        (status = 503, description = "No leader, or leadership not confirmed in time", body = ErrorBody),
    )
)]
pub async fn get_seats(
    State(state): State<RestState>,
    Path(show_id): Path<String>,
    query: Result<Query<SeatsQuery>, QueryRejection>,
) -> Result<Json<SeatMap>, ApiError> {
    let show = parse_show_id("show_id", &show_id)?;
    let Query(query) = query.map_err(|rejection| {
        ApiError::InvalidArgument(format!("query: {}", rejection.body_text()))
    })?;
    let freshness = match query.consistency {
        Consistency::Replica => Freshness::Replica,
        Consistency::Linearizable => Freshness::Linearizable,
    };
    let map = operations::seat_map(&state.service, show, freshness).await?;
    Ok(Json(SeatMap {
        show_id: map.show.0,
        status: map.status.into(),
        price_version: map.price_version,
        currency: map.currency.to_string(),
        prices_minor: map.prices_minor,
        classes: map.classes,
        seats: map.seats.into_iter().map(SeatStatusName::from).collect(),
        consistency: query.consistency,
        as_of: map.as_of.into(),
    }))
}

/// Creates a show (operator): places it, creates it, then configures admission and the
/// waitlist and opens sales as asked; with a `listing`, its seats are the hall's and it is
/// listed in the catalog last.
#[utoipa::path(
    post, path = "/v1/shows", tag = "shows",
    params(("Idempotency-Key" = String, Header, description = "Required on every mutation")),
    request_body = CreateShowRequest,
    security(("operator" = [])),
    responses(
        (status = 201, description = "The show exists", body = ShowCreated),
        (status = 400, description = "Bad layout, prices, policy, JSON or key", body = ErrorBody),
        (status = 401, description = "No bearer token", body = ErrorBody),
        (status = 403, description = "Not the operator credential", body = ErrorBody),
        (status = 404, description = "`catalog_not_found`: the listing's event, hall or venue", body = ErrorBody),
        (status = 409, description = "`show_exists`, `catalog_retired`, `catalog_exists` (listed otherwise)", body = ErrorBody),
        (status = 503, description = "No leader, or the outcome is unknown", body = ErrorBody),
    )
)]
pub async fn create_show(
    State(state): State<RestState>,
    _operator: Operator,
    // Required as on every mutation; a show is idempotent by its id and spec (a retry finds the
    // show as this request would make it), so the key itself is not stored.
    _key: Idempotency,
    JsonBody(request): JsonBody<CreateShowRequest>,
) -> Result<(StatusCode, Json<ShowCreated>), ApiError> {
    let group = request.group_id.unwrap_or(0);
    let (spec, setup, listing) = request.into_parts()?;
    let placed = match listing {
        Some(listing) => state.service.create_listed_show(spec, listing, group, setup).await?,
        None => state.service.create_show(spec, group, setup).await?,
    };
    Ok((StatusCode::CREATED, Json(ShowCreated { show_id: placed.show.0, group_id: placed.group })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(value: serde_json::Value) -> Result<CreateShowRequest, serde_json::Error> {
        serde_json::from_value(value)
    }

    #[test]
    fn a_minimal_show_opens_sales_with_default_policy() {
        let body = json!({"show_id": 41, "currency": "EUR", "prices_minor": [4500],
            "layout": [{"count": 500, "class": 0}]});
        let (spec, setup) = request(body).unwrap().into_commands().unwrap();
        assert_eq!(spec.show.0, 41);
        assert_eq!(spec.policy, ShowPolicy::default());
        assert_eq!(setup, vec![OperatorCommand::OpenSales { show: spec.show }]);
    }

    #[test]
    fn a_full_show_configures_admission_and_waitlist_before_opening() {
        let body = json!({"show_id": 2, "currency": "USD", "prices_minor": [100, 200],
            "layout": [{"count": 10, "class": 1}, {"count": 5, "class": 0}],
            "policy": {"hold_ttl_ms": 60000, "booking_cancel_allowed": false},
            "admission": {"enabled": true, "window": 3}, "waitlist": {"enabled": true},
            "open_sales": false, "group_id": 2});
        let parsed = request(body).unwrap();
        assert_eq!(parsed.group_id, Some(2));
        let (spec, setup) = parsed.into_commands().unwrap();
        assert_eq!(spec.policy.hold_ttl_ms, 60_000);
        assert!(!spec.policy.booking_cancel_allowed);
        let show = spec.show;
        assert_eq!(
            setup,
            vec![
                OperatorCommand::ConfigureAdmission { show, enabled: true, window: 3 },
                OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 },
            ]
        );
    }

    #[test]
    fn bad_shows_are_refused_before_anything_is_proposed() {
        let base = json!({"show_id": 1, "currency": "EUR", "prices_minor": [1],
            "layout": [{"count": 5, "class": 0}]});
        let with = |key: &str, value: serde_json::Value| {
            let mut body = base.clone();
            body[key] = value;
            body
        };
        // Shapes serde refuses: unknown fields anywhere, wrong types, a class beyond u8.
        for body in [
            with("extra", json!(1)),
            with("layout", json!([{"count": 5, "class": 0, "row": "A"}])),
            with("layout", json!([{"count": 5, "class": 300}])),
            with("policy", json!({"hold_ttl": 5})),
            with("admission", json!({"enabled": true, "lanes": 2})),
            with("show_id", json!(-1)),
        ] {
            assert!(request(body.clone()).is_err(), "{body}");
        }
        // Shapes the checks refuse with a 400.
        for body in [
            with("show_id", json!(0)),
            with("currency", json!("EURO")),
            with("currency", json!("eur")),
            with("prices_minor", json!([])),
            with("layout", json!([])),
            with("layout", json!([{"count": 0, "class": 0}])),
            with("layout", json!([{"count": 5, "class": 1}])),
            with("layout", json!([{"count": 100001, "class": 0}])),
            with("policy", json!({"hold_ttl_ms": 0})),
            with("policy", json!({"holds_per_session_max": 0})),
            with("admission", json!({"enabled": true, "window": 0})),
        ] {
            let error = request(body.clone()).unwrap().into_commands().unwrap_err();
            assert_eq!(error.http_status(), 400, "{body}: {error}");
        }
    }

    #[test]
    fn seat_maps_are_read_from_the_replica_unless_linearizable_is_asked_for() {
        let query = |uri: &str| Query::<SeatsQuery>::try_from_uri(&uri.parse().unwrap());
        let read = |uri: &str| query(uri).unwrap().0.consistency;
        assert_eq!(read("/v1/shows/1/seats"), Consistency::Replica);
        assert_eq!(read("/v1/shows/1/seats?consistency=replica"), Consistency::Replica);
        assert_eq!(read("/v1/shows/1/seats?consistency=linearizable"), Consistency::Linearizable);
        // A misspelt value or parameter must not quietly give a replica's map.
        assert!(query("/v1/shows/1/seats?consistency=strong").is_err());
        assert!(query("/v1/shows/1/seats?consistancy=linearizable").is_err());
    }

    #[test]
    fn a_summary_serializes_with_nested_settings() {
        use crate::names::ShowStatusName;
        let summary = ShowSummary {
            show_id: 1,
            group_id: 2,
            status: ShowStatusName::OnSale,
            seat_count: 3,
            counts: SeatCounts { free: 1, held: 1, booked: 1, reserved: 0 },
            price_version: 1,
            currency: "EUR".into(),
            prices_minor: vec![100],
            admission: AdmissionSettings { enabled: false, window: 1 },
            waitlist: WaitlistSettings { enabled: true },
            as_of: AsOf { log_index: 9, log_time_ms: 10 },
            listing: None,
        };
        assert_eq!(
            serde_json::to_value(&summary).unwrap(),
            json!({"show_id": 1, "group_id": 2, "status": "on_sale", "seat_count": 3,
                "counts": {"free": 1, "held": 1, "booked": 1, "reserved": 0},
                "price_version": 1, "currency": "EUR", "prices_minor": [100],
                "admission": {"enabled": false, "window": 1}, "waitlist": {"enabled": true},
                "as_of": {"log_index": 9, "log_time_ms": 10}, "listing": null})
        );
    }
}
