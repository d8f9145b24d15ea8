//! Rate limits: a token bucket per session and one per client address, in front of every REST
//! route (the issue: "rate limits per session and per client address, token bucket, 429").
//!
//! Owns the buckets and the 429: over either limit a request is answered
//! `ApiError::RateLimited` (429, `rate_limited`, `Retry-After` in whole seconds) before any
//! handler runs. A bucket refills at its rate per second and holds [`BURST_SECONDS`] seconds of
//! it, so a page that fires a few requests at once is not refused. The session key is the
//! `Authorization` header value (hashed; a request without one is limited by address only);
//! the operator credential is no session and pays only its address bucket, so operating a
//! cluster under load is never throttled by buyers' limits. The address is the TCP peer's IP,
//! never a header a client could forge. Buckets are per node: a node counts what it receives.
//!
//! Where the peer address comes from: REST is served by the node's tonic server
//! (`tonic::transport::Server` with `accept_http1`), which puts a
//! `tonic::transport::server::TcpConnectInfo` into every request's extensions (its
//! `ConnectInfoLayer`); axum's `ConnectInfo<SocketAddr>` is there only when a router is served
//! with `into_make_service_with_connect_info` (tests, a plain axum server). Both are read, axum's
//! first; a request with neither is limited by session only.
//!
//! A request another node forwarded (`booking-forwarded`, see `forward.rs`) arrives from that
//! node's address, so all the clients it forwards would share one bucket: such a request skips
//! the address bucket when it comes from the IP of a configured peer (the forwarding node
//! already charged the client's own address). It still pays its session's bucket.
//! Never decides anything about a booking, and never trusts `X-Forwarded-For`.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Extensions, HeaderMap};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::api::session::hash128;
use crate::config::Config;
use crate::error::ApiError;
use crate::rest::forward::FORWARDED_HEADER;

/// How many seconds of its rate a bucket holds when full.
pub const BURST_SECONDS: u32 = 2;

/// How many checks pass between two sweeps of idle buckets (a bucket that refilled is
/// indistinguishable from a new one and is dropped).
pub const SWEEP_EVERY_CHECKS: u64 = 16_384;

/// The per-session and per-address token buckets of one node. Cheap to clone.
#[derive(Clone)]
pub struct Limits {
    inner: Arc<Inner>,
    /// The session key of the operator credential's `Authorization` value, if there is one.
    operator: Option<u128>,
}

struct Inner {
    sessions: DefaultKeyedRateLimiter<u128>,
    addresses: DefaultKeyedRateLimiter<IpAddr>,
    /// The IPs of the configured peers, whose forwarded requests skip the address bucket.
    peers: BTreeSet<IpAddr>,
    checks: AtomicU64,
    clock: DefaultClock,
}

impl Limits {
    /// Buckets refilling at `per_session` and `per_address` requests a second, each as deep as
    /// [`BURST_SECONDS`] of its rate; forwarded requests from `peers` skip the address bucket.
    pub fn new(per_session: u32, per_address: u32, peers: BTreeSet<IpAddr>) -> Limits {
        let quota = |rate: u32| {
            let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
            let burst =
                rate.saturating_mul(NonZeroU32::new(BURST_SECONDS).unwrap_or(NonZeroU32::MIN));
            Quota::per_second(rate).allow_burst(burst)
        };
        Limits::with_quotas(quota(per_session), quota(per_address), peers)
    }

    /// The same limits, with `token` (the operator credential) exempt from the session bucket.
    pub fn with_operator(mut self, token: Option<&str>) -> Limits {
        self.operator = token.map(|token| session_key(format!("Bearer {token}").as_bytes()));
        self
    }

    /// The node's limits: `--rate-per-session`, `--rate-per-address`, the IPs of its `--peers`
    /// given as IP literals (host names are not resolved: their forwarded requests pay the
    /// address bucket), and `--operator-token` exempt from the session bucket.
    pub fn from_config(config: &Config) -> Limits {
        let peers = config
            .peers
            .values()
            .filter_map(|address| address.parse::<SocketAddr>().ok().map(|address| address.ip()))
            .collect();
        Limits::new(config.rate_per_session, config.rate_per_address, peers)
            .with_operator(config.operator_token.as_deref())
    }

    /// Buckets with explicit quotas (tests use tiny ones).
    pub fn with_quotas(per_session: Quota, per_address: Quota, peers: BTreeSet<IpAddr>) -> Limits {
        Limits {
            inner: Arc::new(Inner {
                sessions: DefaultKeyedRateLimiter::keyed(per_session),
                addresses: DefaultKeyedRateLimiter::keyed(per_address),
                peers,
                checks: AtomicU64::new(0),
                clock: DefaultClock::default(),
            }),
            operator: None,
        }
    }

    /// Takes one token from the request's session bucket and one from its address bucket.
    ///
    /// # Errors
    ///
    /// `RateLimited` when either bucket is empty (the other is still charged).
    pub fn check(&self, headers: &HeaderMap, extensions: &Extensions) -> Result<(), ApiError> {
        let inner = &self.inner;
        if inner.checks.fetch_add(1, Ordering::Relaxed).is_multiple_of(SWEEP_EVERY_CHECKS) {
            inner.sessions.retain_recent();
            inner.addresses.retain_recent();
        }
        let session = headers
            .get("authorization")
            .map(|value| session_key(value.as_bytes()))
            .filter(|key| self.operator != Some(*key))
            .map(|key| inner.sessions.check_key(&key));
        let address = peer_ip(extensions)
            .filter(|ip| !(headers.contains_key(FORWARDED_HEADER) && inner.peers.contains(ip)));
        let address = address.map(|ip| inner.addresses.check_key(&ip));
        if let Some(Err(not_until)) = session {
            return Err(limited("this session", not_until.wait_time_from(inner.clock.now())));
        }
        if let Some(Err(not_until)) = address {
            return Err(limited("this address", not_until.wait_time_from(inner.clock.now())));
        }
        Ok(())
    }
}

impl Limits {
    /// Takes one token from the bucket of the session whose bare token is `token`: the bucket
    /// a call carrying `Authorization: Bearer <token>` pays. Each item of a `HoldMany` call pays
    /// its session's bucket this way (the call itself pays its address's bucket once).
    ///
    /// # Errors
    ///
    /// `RateLimited` when the bucket is empty.
    pub fn check_session(&self, token: &str) -> Result<(), ApiError> {
        let key = session_key(format!("Bearer {}", token.trim()).as_bytes());
        if self.operator == Some(key) {
            return Ok(());
        }
        let inner = &self.inner;
        inner.sessions.check_key(&key).map_err(|not_until| {
            limited("this session", not_until.wait_time_from(inner.clock.now()))
        })
    }
}

/// The bucket key of an `Authorization` value (a hash: tokens are not kept in memory).
fn session_key(authorization: &[u8]) -> u128 {
    hash128(b"rate-limit-session", authorization)
}

fn limited(who: &str, wait: Duration) -> ApiError {
    let retry_after_s = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    ApiError::RateLimited {
        message: format!("too many requests from {who}; retry after {retry_after_s} s"),
        retry_after_s: retry_after_s.max(1),
    }
}

/// The TCP peer's IP: axum's `ConnectInfo` if the server provides it, else tonic's.
pub fn peer_ip(extensions: &Extensions) -> Option<IpAddr> {
    if let Some(ConnectInfo(address)) = extensions.get::<ConnectInfo<SocketAddr>>() {
        return Some(address.ip());
    }
    let tonic = extensions.get::<tonic::transport::server::TcpConnectInfo>()?;
    tonic.remote_addr().map(|address| address.ip())
}

/// The middleware: 429 over a limit, else the request goes on.
pub async fn enforce(State(limits): State<Limits>, request: Request, next: Next) -> Response {
    match limits.check(request.headers(), request.extensions()) {
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
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::get;
    use tower::ServiceExt;

    use super::*;

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
        limits.check_session("tok").unwrap();
        let (code, _) = status(&app, request(Some("Bearer tok"), None, false)).await;
        assert_eq!(code, StatusCode::OK);
        // Two tokens taken, one by an item and one by a call: both ways are now refused.
        assert_eq!(limits.check_session(" tok ").unwrap_err().code(), "rate_limited");
        let (code, _) = status(&app, request(Some("Bearer tok"), None, false)).await;
        assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
        // Another session has its own bucket, and the operator credential none.
        limits.check_session("other").unwrap();
        for _ in 0..5 {
            limits.check_session("op").unwrap();
        }
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

    #[test]
    fn the_config_trusts_peers_given_as_ip_literals_and_names_the_operator() {
        let config = crate::Config::load(crate::Args {
            id: Some(1),
            data: Some("/tmp/unused".into()),
            listen: Some("127.0.0.1:1".parse().unwrap()),
            peers: vec![(2, "10.1.2.3:7102".into()), (3, "node-3.example:7103".into())],
            operator_token: Some("op".into()),
            ..crate::Args::default()
        })
        .unwrap();
        let limits = Limits::from_config(&config);
        assert_eq!(limits.inner.peers, BTreeSet::from(["10.1.2.3".parse().unwrap()]));
        assert_eq!(limits.operator, Some(session_key(b"Bearer op")));
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
