//! The REST skin of the node's metrics (`crate::metrics`): a middleware that times every route
//! by its template and status class, and the `GET /metrics` handler.
//!
//! The [`track`] layer hands its [`Metrics`] to the [`metrics`] handler as a request extension,
//! so the handler takes the ordinary `RestState`. Hold outcomes are not counted here: the
//! service counts them where the hold is decided, from its typed result.

use std::time::Instant;

use axum::Extension;
use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::metrics::{CONTENT_TYPE, Metrics};
use crate::rest::RestState;

/// The middleware: times every request by route template and status class, and hands
/// `metrics` to the [`metrics`] handler (a request extension).
pub async fn track(State(metrics): State<Metrics>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    request.extensions_mut().insert(metrics.clone());
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    let seconds = started.elapsed().as_secs_f64();
    metrics.record_request(method.as_str(), &route, response.status().as_u16(), seconds);
    response
}

/// `router` with every route timed by `metrics`.
pub fn layer(router: Router, metrics: Metrics) -> Router {
    router.layer(middleware::from_fn_with_state(metrics, track))
}

/// Serves the node's metrics: the ones recorded (the [`track`] layer hands them to this handler
/// as a request extension) and the groups' state right now.
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
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use crate::test_node;

    async fn send(app: &axum::Router, request: Request<Body>) -> (StatusCode, String) {
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    fn value(text: &str, series: &str) -> f64 {
        let line = text
            .lines()
            .find(|line| line.starts_with(series) && line[series.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line[series.len()..].trim().parse().unwrap()
    }

    fn hold(token: &str, key: &str, seats: &str) -> Request<Body> {
        Request::post("/v1/shows/4/holds")
            .header("authorization", format!("Bearer {token}"))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(Body::from(format!(r#"{{"seats": {seats}, "price_version": 1}}"#)))
            .unwrap()
    }

    /// Hold outcomes are counted where the hold is decided, from its typed result; the REST
    /// layer times every route; the groups' state is scraped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_holds_and_groups_are_exported() {
        let cluster = test_node::start().await;
        cluster.open_show(4, 10).await;
        let app = crate::rest::router(cluster.service.clone(), None);
        let token = cluster.service.shared().sessions.issue().unwrap();
        let (status, body) = send(&app, hold(&token, "k-1", "[1, 2]")).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        let other = cluster.service.shared().sessions.issue().unwrap();
        for key in ["k-2", "k-3"] {
            let (status, body) = send(&app, hold(&other, key, "[2, 3]")).await;
            assert_eq!(status, StatusCode::CONFLICT, "{body}");
        }
        let (status, _) = send(&app, hold(&other, "k-4", "[99]")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "a seat out of range is decided too");
        let (status, _) = send(&app, hold(&other, "k-5", "[]")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "refused at the edge: no hold decided");
        let unknown = Request::get("/nowhere").body(Body::empty()).unwrap();
        send(&app, unknown).await;

        let (status, text) =
            send(&app, Request::get("/metrics").body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.ends_with("# EOF\n"), "{text}");
        let outcome =
            |outcome| format!("booking_hold_outcomes_total{{group=\"1\",outcome=\"{outcome}\"}}");
        assert_eq!(value(&text, &outcome("held")), 1.0);
        assert_eq!(value(&text, &outcome("seat_unavailable")), 2.0);
        assert_eq!(value(&text, &outcome("other")), 1.0);
        let decided = "booking_decision_duration_seconds_count{group=\"1\",request=\"hold\"}";
        assert_eq!(value(&text, decided), 4.0, "every decided hold is timed");
        let holds = "booking_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/shows/{show_id}/holds\"";
        assert_eq!(value(&text, &format!("{holds},status_class=\"2xx\"}}")), 1.0);
        assert_eq!(value(&text, &format!("{holds},status_class=\"4xx\"}}")), 4.0);
        let applied = value(&text, "booking_raft_applied_index{group=\"1\"}");
        assert!(applied >= 3.0, "created, opened, held: {applied}");
        assert!(value(&text, "booking_raft_committed_index{group=\"1\"}") >= applied);
        assert_eq!(value(&text, "booking_raft_is_leader{group=\"0\"}"), 1.0);
        assert_eq!(value(&text, "booking_raft_leader_id{group=\"1\"}"), 1.0);
        assert_eq!(value(&text, "booking_active_hold_age_seconds_count{group=\"1\"}"), 1.0);
        assert_eq!(value(&text, "booking_active_hold_age_seconds_count{group=\"0\"}"), 0.0);
        assert!(value(&text, "booking_outbox_backlog{group=\"1\"}") >= 0.0);
    }

    /// Waitlist outcomes and every decision are counted by group where they are decided, and
    /// an offer's promotion lag (its seats' wait in the pool) is scraped from the state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waitlist_outcomes_decisions_and_promotion_lags_are_exported() {
        use statemachine::{ClientRequest, OperatorCommand, Reply, SessionId};

        let cluster = test_node::start().await;
        let show = cluster.open_show(5, 2).await;
        let on = OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 };
        cluster.service.operator(on).await.unwrap();
        let (first, second, waiter) = (SessionId(1), SessionId(2), SessionId(3));
        let first_hold = cluster.hold(show, first, &[0]).await;
        let second_hold = cluster.hold(show, second, &[1]).await;
        let join = ClientRequest::JoinWaitlist { quantity: 2, band: 0 };
        let reply = cluster.client(show, waiter, join.clone()).await;
        assert!(matches!(reply, Reply::WaitlistJoined { .. }), "{reply:?}");
        let again = cluster.service.client(statemachine::ClientCommand {
            show,
            session: waiter,
            key: statemachine::IdempotencyKey(7),
            request: join,
        });
        assert!(again.await.is_err(), "a second entry of the same session is refused");
        let app = crate::rest::router(cluster.service.clone(), None);
        let scrape =
            || async { send(&app, Request::get("/metrics").body(Body::empty()).unwrap()).await.1 };
        let lags = "booking_promotion_lag_seconds_count{group=\"1\"}";
        cluster.client(show, first, ClientRequest::CancelHold { hold: first_hold }).await;
        assert_eq!(value(&scrape().await, lags), 0.0, "one seat cannot serve a waiter of two");
        cluster.client(show, second, ClientRequest::CancelHold { hold: second_hold }).await;

        let text = scrape().await;
        assert_eq!(value(&text, lags), 1.0, "the offer of both seats");
        let joins = |outcome| {
            format!(
                "booking_waitlist_outcomes_total{{group=\"1\",operation=\"join\",outcome=\"{outcome}\"}}"
            )
        };
        assert_eq!(value(&text, &joins("ok")), 1.0);
        assert_eq!(value(&text, &joins("already_on_waitlist")), 1.0);
        let decided = |request| {
            format!("booking_decision_duration_seconds_count{{group=\"1\",request=\"{request}\"}}")
        };
        assert_eq!(value(&text, &decided("join_waitlist")), 2.0);
        assert_eq!(value(&text, &decided("cancel_hold")), 2.0);
        assert_eq!(value(&text, &decided("hold")), 2.0);
    }
}
