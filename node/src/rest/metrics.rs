//! Prometheus metrics of a node: `GET /metrics` in the OpenMetrics text format.
//!
//! Owns the metric names and what they count:
//!
//! - `booking_http_request_duration_seconds{method, route, status_class}`: a histogram of REST
//!   latency by route template (`/v1/holds/{hold_id}`, or `unmatched`) and status class
//!   (`2xx`..`5xx`), recorded by [`track`] around every route. Hold latency is
//!   `route="/v1/shows/{show_id}/holds", method="POST"`.
//! - `booking_hold_outcomes_total{outcome}`: hold attempts by outcome, `held`,
//!   `seat_unavailable` or `other`; the conflict rate is
//!   `rate(booking_hold_outcomes_total{outcome="seat_unavailable"}[1m]) /
//!   sum(rate(booking_hold_outcomes_total[1m]))`. REST holds are classified by [`track`] from
//!   the response (a `503` naming a leader is a redirect, not an outcome, and is not counted);
//!   other APIs call [`Metrics::record_hold`].
//! - Computed at scrape time from each group's state on this node:
//!   `booking_active_hold_age_seconds{group}` (a histogram of live holds by age: wall clock now
//!   minus the hold's leader-stamped creation time; liveness by log time, as the state machine
//!   judges it), `booking_outbox_backlog{group}` (undelivered outbox events), and the Raft
//!   gauges `booking_raft_term`,
//!   `booking_raft_leader_id` (0: none known), `booking_raft_is_leader` (0 or 1),
//!   `booking_raft_last_log_index`, `booking_raft_committed_index` and
//!   `booking_raft_applied_index`, each by `group`.
//!
//! The [`track`] layer hands its [`Metrics`] to the [`metrics`] handler as a request extension,
//! so the handler takes the ordinary `RestState`. Never changes state: a scrape reads each
//! group's applied state once, under its read lock.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use axum::Extension;
use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use openraft::ServerState;
use openraft::async_runtime::WatchReceiver;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use statemachine::Group;

use crate::error::{ApiError, CODE_KEY, LEADER_ADDR_KEY};
use crate::group::HostedGroup;
use crate::rest::RestState;
use crate::service::Service;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The route template whose `POST` makes a hold.
pub const HOLD_ROUTE: &str = "/v1/shows/{show_id}/holds";
/// Upper bounds (seconds) of the active-hold age buckets: the default hold lives 5 minutes, a
/// processing one 2 more.
pub const HOLD_AGE_BUCKETS_S: [f64; 9] = [5.0, 15.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 420.0];

/// What a hold attempt came to.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum HoldOutcome {
    /// The seats were held.
    Held,
    /// A seat was taken (a conflict).
    SeatUnavailable,
    /// Any other refusal or failure.
    Other,
}

impl HoldOutcome {
    /// The outcome of a hold call.
    pub fn of<T>(result: &Result<T, ApiError>) -> HoldOutcome {
        match result {
            Ok(_) => HoldOutcome::Held,
            Err(error) => HoldOutcome::of_code(Some(error.code())),
        }
    }

    fn of_code(code: Option<&str>) -> HoldOutcome {
        match code {
            Some("seat_unavailable") => HoldOutcome::SeatUnavailable,
            _ => HoldOutcome::Other,
        }
    }

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            HoldOutcome::Held => "held",
            HoldOutcome::SeatUnavailable => "seat_unavailable",
            HoldOutcome::Other => "other",
        }
    }
}

impl EncodeLabelValue for HoldOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.name())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status_class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HoldLabels {
    outcome: HoldOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: u64,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// The node's recorded metrics (what handlers and middleware count). Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Histograms<RequestLabels>,
    holds: Family<HoldLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let requests: Histograms<RequestLabels> = Family::new_with_constructor(|| {
            // 0.5 ms .. about 16 s.
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "booking_http_request_duration_seconds",
            "REST request latency by route template and status class",
            requests.clone(),
        );
        let holds = Family::<HoldLabels, Counter>::default();
        registry.register(
            "booking_hold_outcomes",
            "Hold attempts by outcome (held, seat_unavailable, other)",
            holds.clone(),
        );
        Metrics { inner: Arc::new(Inner { registry, requests, holds }) }
    }

    /// Counts one hold attempt (for APIs other than REST, which [`track`] counts).
    pub fn record_hold(&self, outcome: HoldOutcome) {
        self.inner.holds.get_or_create(&HoldLabels { outcome }).inc();
    }

    /// Records one REST request.
    fn record_request(&self, method: &Method, route: &str, status: StatusCode, seconds: f64) {
        let labels = RequestLabels {
            method: method.as_str().to_owned(),
            route: route.to_owned(),
            status_class: status_class(status),
        };
        self.inner.requests.get_or_create(&labels).observe(seconds);
    }

    /// The OpenMetrics text of the recorded metrics and of `service`'s groups as of now.
    ///
    /// # Errors
    ///
    /// `Internal` if a group's state cannot be read.
    pub fn render(&self, service: &Service) -> Result<String, ApiError> {
        let scraped = scrape_groups(service.shared().groups.values())?;
        let mut text = String::new();
        let encoded = encode_registry(&mut text, &self.inner.registry)
            .and_then(|()| encode_registry(&mut text, &scraped))
            .and_then(|()| encode_eof(&mut text));
        encoded.map_err(|error| ApiError::Internal(format!("metrics: {error}")))?;
        Ok(text)
    }
}

fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// A registry of the groups' state right now.
fn scrape_groups<'a>(
    groups: impl Iterator<Item = &'a Arc<HostedGroup>>,
) -> Result<Registry, ApiError> {
    let gauge = Family::<GroupLabels, Gauge>::default;
    let (term, leader, is_leader) = (gauge(), gauge(), gauge());
    let (last_log, committed, applied, backlog) = (gauge(), gauge(), gauge(), gauge());
    let ages: Histograms<GroupLabels> =
        Family::new_with_constructor(|| Histogram::new(HOLD_AGE_BUCKETS_S));
    for hosted in groups {
        // This node's clock (the one its proposer stamps entries with), so that under a
        // simulator hold ages follow simulated time.
        let now_ms = hosted.proposer.clock().now_ms();
        let labels = GroupLabels { group: hosted.id };
        let metrics = hosted.raft.metrics().borrow_watched().clone();
        let set = |family: &Family<GroupLabels, Gauge>, value: u64| {
            family.get_or_create(&labels).set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set(&term, metrics.current_term);
        set(&leader, metrics.current_leader.unwrap_or(0));
        set(&is_leader, u64::from(metrics.state == ServerState::Leader));
        set(&last_log, metrics.last_log_index.unwrap_or(0));
        set(&committed, metrics.local_committed.map_or(0, |id| id.index));
        set(&applied, metrics.last_applied.map_or(0, |id| id.index));
        let (pending, hold_ages) = hosted
            .read_local(|group| (group.outbox().len() as u64, live_hold_ages_s(group, now_ms)))?;
        set(&backlog, pending);
        let histogram = ages.get_or_create(&labels);
        for age in hold_ages {
            histogram.observe(age);
        }
    }
    let mut registry = Registry::default();
    registry.register("booking_raft_term", "The group's current Raft term", term);
    registry.register("booking_raft_leader_id", "The group's leader known here (0: none)", leader);
    registry.register("booking_raft_is_leader", "1 if this node leads the group", is_leader);
    registry.register("booking_raft_last_log_index", "The last log index on this node", last_log);
    registry.register("booking_raft_committed_index", "The committed index known here", committed);
    registry.register("booking_raft_applied_index", "The last index applied here", applied);
    registry.register("booking_outbox_backlog", "Outbox events not yet acknowledged", backlog);
    registry.register(
        "booking_active_hold_age_seconds",
        "Live holds (held or processing) by age",
        ages,
    );
    Ok(registry)
}

/// The age (seconds, at wall-clock `now_ms`) of every hold that is live by log time.
fn live_hold_ages_s(group: &Group, now_ms: u64) -> Vec<f64> {
    let log_time_ms = group.log_time_ms();
    let mut ages = Vec::new();
    for show in group.shows() {
        for (_deadline, id) in &show.hold_deadlines {
            let Some(hold) = show.holds.get(id) else { continue };
            if hold.effective_state(log_time_ms).is_live() {
                ages.push(now_ms.saturating_sub(hold.created_ms) as f64 / 1000.0);
            }
        }
    }
    ages
}

/// The middleware: times every request by route template and status class, classifies REST
/// hold attempts, and hands `metrics` to the [`metrics`] handler (a request extension).
pub async fn track(State(metrics): State<Metrics>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    request.extensions_mut().insert(metrics.clone());
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status();
    metrics.record_request(&method, &route, status, started.elapsed().as_secs_f64());
    let redirect = response.headers().contains_key(LEADER_ADDR_KEY);
    if method == Method::POST && route == HOLD_ROUTE && !redirect {
        let outcome = if status.is_success() {
            HoldOutcome::Held
        } else {
            let code = response.headers().get(CODE_KEY).and_then(|code| code.to_str().ok());
            HoldOutcome::of_code(code)
        };
        metrics.record_hold(outcome);
    }
    response
}

/// `router` with every route timed by `metrics`.
pub fn layer(router: Router, metrics: Metrics) -> Router {
    router.layer(middleware::from_fn_with_state(metrics, track))
}

/// Serves the node's metrics: the ones [`track`] records (it hands them to this handler as a
/// request extension) and the groups' state right now.
#[utoipa::path(
    get, path = "/metrics", tag = "node",
    responses(
        (status = 200, description = "Prometheus metrics (OpenMetrics text): REST latency by route and \
            status class, hold outcomes, active holds by age, outbox backlog, and per-group Raft term, \
            leader, last log, committed and applied index", content_type = "application/openmetrics-text",
            body = String),
        (status = 500, description = "A group's state could not be read", body = crate::rest::ErrorBody),
    )
)]
pub async fn metrics(
    State(state): State<RestState>,
    recorded: Option<Extension<Metrics>>,
) -> Response {
    // Without the `track` layer there is nothing recorded, but the groups can still be shown.
    let recorded = recorded.map_or_else(Metrics::new, |Extension(metrics)| metrics);
    match recorded.render(&state.service) {
        Ok(text) => {
            ([(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE))], text).into_response()
        }
        Err(error) => error.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use axum::routing::get;
    use http_body_util::BodyExt;
    use statemachine::SessionId;
    use tower::ServiceExt;

    use super::*;
    use crate::watch::test_node;

    /// A router whose hold route answers as told by the `x-answer` header, and `/metrics`.
    fn app(metrics: Metrics, service: Service) -> Router {
        let hold = |request: Request<Body>| async move {
            match request.headers().get("x-answer").map(|value| value.to_str().unwrap()) {
                Some("taken") => ApiError::from(statemachine::Rejection::SeatUnavailable {
                    seats: Default::default(),
                })
                .into_response(),
                Some("expired") => {
                    ApiError::from(statemachine::Rejection::HoldExpired).into_response()
                }
                Some("redirect") => ApiError::NotLeader {
                    group: 1,
                    leader: Some(crate::error::LeaderHint { id: 2, address: Some("x:1".into()) }),
                }
                .into_response(),
                _ => (StatusCode::CREATED, "held").into_response(),
            }
        };
        layer(
            Router::new()
                .route(HOLD_ROUTE, axum::routing::post(hold))
                .route("/v1/holds/{hold_id}", get(|| async { "hold" }))
                .route("/metrics", get(super::metrics))
                .with_state(RestState { service }),
            metrics,
        )
    }

    fn hold_request(answer: &str) -> Request<Body> {
        Request::post("/v1/shows/3/holds").header("x-answer", answer).body(Body::empty()).unwrap()
    }

    async fn text(app: &Router) -> String {
        let response = app
            .clone()
            .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], CONTENT_TYPE);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    }

    fn value(text: &str, series: &str) -> f64 {
        let line = text
            .lines()
            .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line[series.len()..].trim().parse().unwrap()
    }

    #[test]
    fn hold_outcomes_are_classified_by_code() {
        assert_eq!(HoldOutcome::of::<()>(&Ok(())), HoldOutcome::Held);
        let taken =
            ApiError::from(statemachine::Rejection::SeatUnavailable { seats: Default::default() });
        assert_eq!(HoldOutcome::of::<()>(&Err(taken)), HoldOutcome::SeatUnavailable);
        let expired = ApiError::from(statemachine::Rejection::GrantExpired);
        assert_eq!(HoldOutcome::of::<()>(&Err(expired)), HoldOutcome::Other);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_holds_and_groups_are_exported() {
        let cluster = test_node::start(None).await;
        let show = cluster.open_show(4, 10).await;
        cluster.hold(show, SessionId(1), &[1, 2]).await;
        let metrics = Metrics::new();
        let app = app(metrics, cluster.service.clone());
        for answer in ["held", "held", "taken", "taken", "taken", "expired", "redirect"] {
            app.clone().oneshot(hold_request(answer)).await.unwrap();
        }
        let get_hold = Request::get("/v1/holds/3-1").body(Body::empty()).unwrap();
        app.clone().oneshot(get_hold).await.unwrap();
        let unknown = Request::get("/nowhere").body(Body::empty()).unwrap();
        app.clone().oneshot(unknown).await.unwrap();

        let text = text(&app).await;
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(value(&text, "booking_hold_outcomes_total{outcome=\"held\"}"), 2.0);
        assert_eq!(value(&text, "booking_hold_outcomes_total{outcome=\"seat_unavailable\"}"), 3.0);
        assert_eq!(
            value(&text, "booking_hold_outcomes_total{outcome=\"other\"}"),
            1.0,
            "a redirect is no outcome"
        );
        let holds = "booking_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/shows/{show_id}/holds\"";
        assert_eq!(value(&text, &format!("{holds},status_class=\"2xx\"}}")), 2.0);
        assert_eq!(value(&text, &format!("{holds},status_class=\"4xx\"}}")), 4.0);
        assert_eq!(value(&text, &format!("{holds},status_class=\"5xx\"}}")), 1.0);
        let one_get = "booking_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/holds/{hold_id}\",status_class=\"2xx\"}";
        assert_eq!(value(&text, one_get), 1.0);

        let applied = value(&text, "booking_raft_applied_index{group=\"1\"}");
        assert!(applied >= 3.0, "created, opened, held: {applied}");
        assert!(value(&text, "booking_raft_committed_index{group=\"1\"}") >= applied);
        assert!(value(&text, "booking_raft_last_log_index{group=\"1\"}") >= applied);
        assert_eq!(value(&text, "booking_raft_is_leader{group=\"0\"}"), 1.0);
        assert_eq!(value(&text, "booking_raft_leader_id{group=\"1\"}"), 1.0);
        assert!(value(&text, "booking_raft_term{group=\"1\"}") >= 1.0);
        assert_eq!(value(&text, "booking_active_hold_age_seconds_count{group=\"1\"}"), 1.0);
        assert_eq!(
            value(&text, "booking_active_hold_age_seconds_bucket{le=\"5.0\",group=\"1\"}"),
            1.0
        );
        assert_eq!(value(&text, "booking_active_hold_age_seconds_count{group=\"0\"}"), 0.0);
        assert!(value(&text, "booking_outbox_backlog{group=\"1\"}") >= 0.0);

        // Without the layer, nothing is recorded but the groups are still shown.
        let bare = Router::new()
            .route("/metrics", get(super::metrics))
            .with_state(RestState { service: cluster.service.clone() });
        let text = super::tests::text(&bare).await;
        assert!(text.contains("booking_raft_applied_index{group=\"1\"}"), "{text}");
        assert!(!text.contains("booking_hold_outcomes_total{"), "{text}");
    }
}
