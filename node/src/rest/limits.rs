//! The REST skin of the rate limits (`crate::limits`): a middleware in front of every route
//! that charges the request's session and address buckets and answers 429 (`rate_limited`,
//! `Retry-After` in whole seconds) before any handler runs; `POST /v1/sessions` also pays its
//! address's new-session bucket. A request forwarded by another node (`booking-forwarded`) skips
//! the address bucket when it comes from a peer.

use axum::Router;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::limits::{Limits, RouteClass};
use crate::rest::forward::FORWARDED_HEADER;

/// The middleware: 429 over a limit, else the request goes on.
pub async fn enforce(State(limits): State<Limits>, request: Request, next: Next) -> Response {
    let forwarded = request.headers().contains_key(FORWARDED_HEADER);
    let mut checked = limits.check(request.headers(), request.extensions(), forwarded);
    if checked.is_ok() && request.method() == Method::POST && request.uri().path() == "/v1/sessions"
    {
        checked = limits.check_new_session(request.extensions());
    }
    if checked.is_ok()
        && let Some(class) = RouteClass::of_rest(request.method(), request.uri().path())
    {
        checked = limits.check_route(class, request.headers(), request.extensions(), forwarded);
    }
    match checked {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

/// `router` with every route rate limited by `limits`.
pub fn layer(router: Router, limits: Limits) -> Router {
    router.layer(middleware::from_fn_with_state(limits, enforce))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::net::SocketAddr;
    use std::num::NonZeroU32;

    use axum::body::Body;
    use axum::extract::ConnectInfo;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use governor::Quota;
    use tower::ServiceExt;

    use super::*;
    use crate::limits::peer_ip;

    fn app(limits: Limits) -> Router {
        layer(Router::new().route("/x", get(|| async { "ok" })), limits)
    }

    fn request(authorization: Option<&str>, peer: Option<&str>, forwarded: bool) -> Request<Body> {
        let mut request = Request::get("/x");
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        if forwarded {
            request = request.header(FORWARDED_HEADER, "1");
        }
        let mut request = request.body(Body::empty()).unwrap();
        if let Some(peer) = peer {
            let address: SocketAddr = peer.parse().unwrap();
            request.extensions_mut().insert(ConnectInfo(address));
        }
        request
    }

    fn per_minute(count: u32) -> Quota {
        Quota::per_minute(NonZeroU32::new(count).unwrap())
    }

    async fn status(app: &Router, request: Request<Body>) -> (StatusCode, Option<String>) {
        let response = app.clone().oneshot(request).await.unwrap();
        let retry = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        (response.status(), retry)
    }

    #[tokio::test]
    async fn a_hold_many_item_pays_the_bucket_its_session_pays_on_every_call() {
        let limits = Limits::with_quotas(per_minute(2), per_minute(1000), BTreeSet::new())
            .with_operator(Some("op"));
        let app = app(limits.clone());
        limits.check_hold_item("tok").unwrap();
        let (code, _) = status(&app, request(Some("Bearer tok"), None, false)).await;
        assert_eq!(code, StatusCode::OK);
        // Two tokens taken, one by an item and one by a call: both ways are now refused.
        assert_eq!(limits.check_hold_item(" tok ").unwrap_err().code().name(), "rate_limited");
        let (code, _) = status(&app, request(Some("Bearer tok"), None, false)).await;
        assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
        // Another session has its own bucket, and the operator credential none.
        limits.check_hold_item("other").unwrap();
        for _ in 0..5 {
            limits.check_hold_item("op").unwrap();
        }
    }

    #[tokio::test]
    async fn a_route_class_with_a_rate_is_refused_past_it_and_other_routes_are_not() {
        let rates = [(RouteClass::Search, 1)].into_iter().collect();
        let limits = Limits::with_quotas(per_minute(1000), per_minute(1000), BTreeSet::new())
            .with_operator(Some("op"))
            .with_route_rates(&rates);
        let app = layer(
            Router::new()
                .route("/v1/search", get(|| async { "found" }))
                .route("/v1/shows/{id}/seats", get(|| async { "seats" })),
            limits.clone(),
        );
        let call = |path: &str, token: &str, peer: &str| {
            let mut request = Request::get(path).header("authorization", format!("Bearer {token}"));
            if token.is_empty() {
                request = Request::get(path);
            }
            let mut request = request.body(Body::empty()).unwrap();
            request.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().unwrap()));
            request
        };
        // A burst of two seconds of the rate, then 429 with Retry-After for this session only.
        for _ in 0..2 {
            assert_eq!(status(&app, call("/v1/search", "a", "10.0.0.1:1")).await.0, StatusCode::OK);
        }
        let (code, retry) = status(&app, call("/v1/search?q=x", "a", "10.0.0.1:1")).await;
        assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
        assert!(retry.is_some_and(|seconds| seconds.parse::<u64>().unwrap() >= 1));
        assert_eq!(
            status(&app, call("/v1/shows/1/seats", "a", "10.0.0.1:1")).await.0,
            StatusCode::OK
        );
        assert_eq!(status(&app, call("/v1/search", "b", "10.0.0.1:1")).await.0, StatusCode::OK);
        // Without a session the address pays; the operator never does.
        for _ in 0..2 {
            assert_eq!(status(&app, call("/v1/search", "", "10.0.0.2:1")).await.0, StatusCode::OK);
        }
        assert_eq!(
            status(&app, call("/v1/search", "", "10.0.0.2:1")).await.0,
            StatusCode::TOO_MANY_REQUESTS
        );
        for _ in 0..5 {
            assert_eq!(
                status(&app, call("/v1/search", "op", "10.0.0.2:1")).await.0,
                StatusCode::OK
            );
        }
        // A HoldMany item pays the holds bucket only when that class has a rate.
        limits.check_hold_item("a").unwrap();
        let holds = [(RouteClass::Holds, 1)].into_iter().collect();
        let limits = Limits::with_quotas(per_minute(1000), per_minute(1000), BTreeSet::new())
            .with_route_rates(&holds);
        for _ in 0..2 {
            limits.check_hold_item(" a ").unwrap();
        }
        let refused = limits.check_hold_item("a").unwrap_err();
        assert_eq!(refused.code().name(), "rate_limited");
        limits.check_hold_item("b").unwrap();
    }

    #[test]
    fn rest_and_grpc_routes_share_their_class() {
        use axum::http::Method as M;
        let rest = |method: M, path: &str| RouteClass::of_rest(&method, path);
        assert_eq!(rest(M::POST, "/v1/shows/7/holds"), Some(RouteClass::Holds));
        assert_eq!(RouteClass::of_grpc("/booking.v1.BookingService/Hold"), Some(RouteClass::Holds));
        assert_eq!(rest(M::POST, "/v1/holds/h-1-2/checkout"), Some(RouteClass::Checkout));
        assert_eq!(rest(M::POST, "/v1/shows/7/queue"), Some(RouteClass::Queue));
        assert_eq!(rest(M::POST, "/v1/resources/show-7/waitlist:join"), Some(RouteClass::Waitlist));
        assert_eq!(rest(M::GET, "/v1/search"), Some(RouteClass::Search));
        assert_eq!(rest(M::GET, "/v1/shows/7/availability"), Some(RouteClass::SeatMaps));
        assert_eq!(
            RouteClass::of_grpc("/booking.v1.BookingService/GetSeatMap"),
            Some(RouteClass::SeatMaps)
        );
        assert_eq!(rest(M::POST, "/v1/payments/webhook"), Some(RouteClass::Webhook));
        assert_eq!(rest(M::GET, "/v1/shows/7/holds"), None, "the method counts");
        assert_eq!(rest(M::POST, "/v1/shows/7/holds/x"), None);
        assert_eq!(RouteClass::of_grpc("/booking.v1.AdminService/Status"), None);
        assert_eq!(RouteClass::of_grpc("/booking.v1.BookingService/HoldMany"), None, "per item");
        assert_eq!(crate::limits::parse_route_rate(" holds = 20 "), Ok((RouteClass::Holds, 20)));
        assert_eq!(crate::limits::parse_route_rate("seat-maps=5"), Ok((RouteClass::SeatMaps, 5)));
        for bad in ["holds", "holds=0", "holds=-1", "bogus=3", "=3"] {
            assert!(crate::limits::parse_route_rate(bad).is_err(), "{bad}");
        }
        assert!(crate::limits::parse_route_rate("bogus=3").unwrap_err().contains("seat-maps"));
    }

    #[tokio::test]
    async fn the_whitespace_trick_shares_a_bucket() {
        let app = app(Limits::with_quotas(per_minute(2), per_minute(1000), BTreeSet::new()));
        for header in ["Bearer a", "Bearer  a"] {
            assert_eq!(status(&app, request(Some(header), None, false)).await.0, StatusCode::OK);
        }
        for header in ["Bearer a ", "Bearer \ta", "Bearer     a"] {
            let (code, _) = status(&app, request(Some(header), None, false)).await;
            assert_eq!(code, StatusCode::TOO_MANY_REQUESTS, "{header:?} got a bucket of its own");
        }
    }

    #[tokio::test]
    async fn creating_sessions_pays_a_bucket_of_its_own_per_address() {
        let limits = Limits::with_quotas(per_minute(1000), per_minute(1000), BTreeSet::new())
            .with_new_sessions(1);
        let app = layer(
            Router::new()
                .route("/v1/sessions", axum::routing::post(|| async { "token" }))
                .route("/x", get(|| async { "ok" })),
            limits,
        );
        let create = |peer: &str| {
            let mut request = Request::post("/v1/sessions").body(Body::empty()).unwrap();
            let address: SocketAddr = peer.parse().unwrap();
            request.extensions_mut().insert(ConnectInfo(address));
            request
        };
        // Bursts of two from one address; then refused, though its request bucket is full.
        for _ in 0..2 {
            assert_eq!(status(&app, create("10.0.0.1:1")).await.0, StatusCode::OK);
        }
        assert_eq!(status(&app, create("10.0.0.1:2")).await.0, StatusCode::TOO_MANY_REQUESTS);
        let other = request(None, Some("10.0.0.1:3"), false);
        assert_eq!(status(&app, other).await.0, StatusCode::OK, "other calls go on");
        // Another IPv6 address of the same /64 is the same address; another /64 is not.
        for _ in 0..2 {
            assert_eq!(status(&app, create("[2001:db8::1]:1")).await.0, StatusCode::OK);
        }
        let same = create("[2001:db8::ffff:1]:1");
        assert_eq!(status(&app, same).await.0, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(status(&app, create("[2001:db8:0:1::1]:1")).await.0, StatusCode::OK);
    }

    #[test]
    fn a_hold_many_call_pays_its_address_once_per_item() {
        let limits = Limits::with_quotas(per_minute(1000), per_minute(5), BTreeSet::new());
        let mut extensions = axum::http::Extensions::new();
        extensions.insert(ConnectInfo("10.0.0.7:1".parse::<SocketAddr>().unwrap()));
        // The call's own check, then its 3 other items: 4 of the 5.
        limits.check(&axum::http::HeaderMap::new(), &extensions, false).unwrap();
        limits.check_address_n(&extensions, 3).unwrap();
        let refused = limits.check_address_n(&extensions, 2).unwrap_err();
        assert_eq!(refused.code().name(), "rate_limited");
        // None was taken by the refused batch: one item still fits.
        limits.check_address_n(&extensions, 1).unwrap();
        assert!(limits.check_address_n(&extensions, 6).is_err(), "more than the burst");
    }

    #[tokio::test]
    async fn a_session_over_its_bucket_gets_429_with_retry_after() {
        let app = app(Limits::with_quotas(per_minute(2), per_minute(1000), BTreeSet::new()));
        for _ in 0..2 {
            assert_eq!(
                status(&app, request(Some("Bearer a"), None, false)).await.0,
                StatusCode::OK
            );
        }
        let response = app.clone().oneshot(request(Some("Bearer a"), None, false)).await.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["booking-code"], "rate_limited");
        let retry: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=30).contains(&retry), "one token a 30 s: {retry}");
        // Another session has its own bucket.
        assert_eq!(status(&app, request(Some("Bearer b"), None, false)).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn the_operator_pays_only_its_address_bucket() {
        let limits = Limits::with_quotas(per_minute(1), per_minute(3), BTreeSet::new());
        let app = app(limits.with_operator(Some("op")));
        for _ in 0..3 {
            let operator = request(Some("Bearer op"), Some("10.0.0.1:1"), false);
            assert_eq!(status(&app, operator).await.0, StatusCode::OK);
        }
        let operator = request(Some("Bearer op"), Some("10.0.0.1:1"), false);
        assert_eq!(status(&app, operator).await.0, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(status(&app, request(Some("Bearer x"), None, false)).await.0, StatusCode::OK);
        let (code, _) = status(&app, request(Some("Bearer x"), None, false)).await;
        assert_eq!(code, StatusCode::TOO_MANY_REQUESTS, "a session is still limited");
    }

    #[tokio::test]
    async fn a_bucket_holds_two_seconds_of_its_rate() {
        let app = app(Limits::new(1, 1_000, BTreeSet::new()));
        let mut passed = 0;
        for _ in 0..20 {
            if status(&app, request(Some("Bearer a"), None, false)).await.0 == StatusCode::OK {
                passed += 1;
            }
        }
        // Two at once, and perhaps one more refilled if the loop took a second.
        assert!((2..=3).contains(&passed), "{passed} passed");
    }

    #[tokio::test]
    async fn an_address_bucket_is_shared_by_every_session_from_it() {
        let app = app(Limits::with_quotas(per_minute(100), per_minute(3), BTreeSet::new()));
        for token in ["Bearer a", "Bearer b", "Bearer c"] {
            let (code, _) = status(&app, request(Some(token), Some("10.0.0.1:5000"), false)).await;
            assert_eq!(code, StatusCode::OK);
        }
        let (code, retry) =
            status(&app, request(Some("Bearer d"), Some("10.0.0.1:6000"), false)).await;
        assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
        assert!(retry.is_some());
        let (code, _) = status(&app, request(None, Some("10.0.0.1:7000"), false)).await;
        assert_eq!(code, StatusCode::TOO_MANY_REQUESTS, "no session: limited by address alone");
        let (code, _) = status(&app, request(Some("Bearer d"), Some("10.0.0.2:5000"), false)).await;
        assert_eq!(code, StatusCode::OK, "another address has its own bucket");
    }

    #[tokio::test]
    async fn forwarded_requests_skip_the_address_bucket_only_from_peers() {
        let peers = BTreeSet::from(["10.0.0.9".parse().unwrap()]);
        let app = app(Limits::with_quotas(per_minute(100), per_minute(1), peers));
        for _ in 0..5 {
            let forwarded = request(Some("Bearer a"), Some("10.0.0.9:1"), true);
            assert_eq!(status(&app, forwarded).await.0, StatusCode::OK);
        }
        assert_eq!(status(&app, request(None, Some("10.0.0.8:1"), true)).await.0, StatusCode::OK);
        let spoofed = request(None, Some("10.0.0.8:1"), true);
        assert_eq!(status(&app, spoofed).await.0, StatusCode::TOO_MANY_REQUESTS);
    }

    /// The node's server is tonic's: it must hand the peer address to REST routes.
    #[tokio::test]
    async fn the_tonic_server_gives_routes_the_peer_address() {
        let router = Router::new().route(
            "/peer",
            get(|request: Request<Body>| async move {
                peer_ip(request.extensions()).map(|ip| ip.to_string()).unwrap_or_default()
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tonic::transport::Server::builder()
            .accept_http1(true)
            .add_routes(tonic::service::Routes::from(router))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        let server = tokio::spawn(server);
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Body>();
        let uri = format!("http://{address}/peer");
        let response = client.get(uri.parse().unwrap()).await.unwrap();
        let body = http_body_util::BodyExt::collect(response.into_body()).await.unwrap();
        assert_eq!(body.to_bytes(), "127.0.0.1");
        server.abort();
    }
}
