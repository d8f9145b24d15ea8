//! Rate limits: a token bucket per session and one per client address, shared by the REST
//! routes (`rest/limits.rs` is their middleware) and the gRPC booking calls (`node.rs` charges
//! them on the one port), so that mixing the two APIs does not double a caller's rate.
//!
//! Owns the buckets and the 429: over either limit a request is answered
//! `ApiError::RateLimited` (429, `rate_limited`, `Retry-After` in whole seconds) before any
//! handler runs. A bucket refills at its rate per second and holds [`BURST_SECONDS`] seconds of
//! it, so a page that fires a few requests at once is not refused. The session key is the
//! bearer token as authentication reads it (after `Bearer `, trimmed; hashed), so a session is
//! one bucket however its header is spaced: a token the cluster issued names one session id,
//! and the token alone determines it. A request without a token is limited by address only;
//! the operator credential is no session and pays only its address bucket, so operating a
//! cluster under load is never throttled by buyers' limits. The address is the TCP peer's IP,
//! never a header a client could forge, and an IPv6 address counts as its /64 (the block one
//! host is given, inside which it can pick addresses freely). Creating a session pays a third
//! bucket, per address, much smaller than the address's request rate: sessions cost nothing to
//! make, so without it one address could mint a fresh session bucket per request. A `HoldMany`
//! call pays every bucket once per item. Buckets are per node: a node counts what it receives.
//!
//! Where the peer address comes from: REST is served by the node's tonic server
//! (`tonic::transport::Server` with `accept_http1`), which puts a
//! `tonic::transport::server::TcpConnectInfo` into every request's extensions (its
//! `ConnectInfoLayer`); axum's `ConnectInfo<SocketAddr>` is there only when a router is served
//! with `into_make_service_with_connect_info` (tests, a plain axum server). Both are read, axum's
//! first; a request with neither is limited by session only.
//!
//! A request another node forwarded (`booking-forwarded`, see `rest/forward.rs`) arrives from that
//! node's address, so all the clients it forwards would share one bucket: such a request skips
//! the address bucket when it comes from the IP of a configured peer (the forwarding node
//! already charged the client's own address). It still pays its session's bucket.
//! Never decides anything about a booking, and never trusts `X-Forwarded-For`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap, Method};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use secrecy::ExposeSecret;

use crate::config::Config;
use crate::error::ApiError;
use crate::sessions::hash128;

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
    /// The classes of routes with a rate of their own (`--route-rate`), per session (per
    /// address for a caller without one).
    routes: BTreeMap<RouteClass, DefaultKeyedRateLimiter<RouteKey>>,
    addresses: DefaultKeyedRateLimiter<IpAddr>,
    /// Sessions created, per address (its /64 for IPv6).
    new_sessions: DefaultKeyedRateLimiter<IpAddr>,
    /// The IPs of the configured peers, whose forwarded requests skip the address bucket.
    peers: BTreeSet<IpAddr>,
    checks: AtomicU64,
    clock: DefaultClock,
}

impl Limits {
    /// Buckets refilling at `per_session` and `per_address` requests a second, each as deep as
    /// [`BURST_SECONDS`] of its rate; forwarded requests from `peers` skip the address bucket.
    pub fn new(per_session: u32, per_address: u32, peers: BTreeSet<IpAddr>) -> Limits {
        Limits::with_quotas(quota(per_session), quota(per_address), peers)
    }

    /// The same limits, with `per_address` sessions a second created per address.
    pub fn with_new_sessions(mut self, per_address: u32) -> Limits {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.new_sessions = DefaultKeyedRateLimiter::keyed(quota(per_address));
        }
        self
    }

    /// The same limits, with a bucket of `rate` requests a second per session (per address
    /// without one) for each class of routes `rates` names.
    pub fn with_route_rates(mut self, rates: &BTreeMap<RouteClass, u32>) -> Limits {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.routes = rates
                .iter()
                .map(|(&class, &rate)| (class, DefaultKeyedRateLimiter::keyed(quota(rate))))
                .collect();
        }
        self
    }

    /// The same limits, with `token` (the operator credential) exempt from the session bucket.
    pub fn with_operator(mut self, token: Option<&str>) -> Limits {
        self.operator = token.and_then(|token| token_key(token.as_bytes()));
        self
    }

    /// The node's limits: `--rate-per-session`, `--rate-per-address`, the IPs of its `--peers`
    /// given as IP literals (host names are not resolved: their forwarded requests pay the
    /// address bucket), and the operator credential exempt from the session bucket.
    pub fn from_config(config: &Config) -> Limits {
        let peers = config
            .peers
            .values()
            .filter_map(|address| address.parse::<SocketAddr>().ok().map(|address| address.ip()))
            .collect();
        Limits::new(config.rate_per_session, config.rate_per_address, peers)
            .with_operator(Some(config.secrets.operator.expose_secret()))
            .with_new_sessions(config.rate_new_sessions_per_address)
            .with_route_rates(&config.route_rates)
    }

    /// Buckets with explicit quotas (tests use tiny ones).
    pub fn with_quotas(per_session: Quota, per_address: Quota, peers: BTreeSet<IpAddr>) -> Limits {
        Limits {
            inner: Arc::new(Inner {
                sessions: DefaultKeyedRateLimiter::keyed(per_session),
                addresses: DefaultKeyedRateLimiter::keyed(per_address),
                new_sessions: DefaultKeyedRateLimiter::keyed(quota(
                    NEW_SESSIONS_PER_ADDRESS_DEFAULT,
                )),
                routes: BTreeMap::new(),
                peers,
                checks: AtomicU64::new(0),
                clock: DefaultClock::default(),
            }),
            operator: None,
        }
    }

    /// Takes one token from the request's session bucket and one from its address bucket. A
    /// request that another node `forwarded` skips the address bucket when it comes from a
    /// peer's IP (the forwarding node charged the client's own address).
    ///
    /// # Errors
    ///
    /// `RateLimited` when either bucket is empty (the other is still charged).
    pub fn check(
        &self,
        headers: &HeaderMap,
        extensions: &Extensions,
        forwarded: bool,
    ) -> Result<(), ApiError> {
        let inner = &self.inner;
        if inner.checks.fetch_add(1, Ordering::Relaxed).is_multiple_of(SWEEP_EVERY_CHECKS) {
            inner.sessions.retain_recent();
            inner.addresses.retain_recent();
            inner.new_sessions.retain_recent();
            for routes in inner.routes.values() {
                routes.retain_recent();
            }
        }
        let session = headers
            .get("authorization")
            .and_then(|value| session_key(value.as_bytes()))
            .filter(|key| self.operator != Some(*key))
            .map(|key| inner.sessions.check_key(&key));
        let address = peer_ip(extensions).filter(|ip| !(forwarded && inner.peers.contains(ip)));
        let address = address.map(|ip| inner.addresses.check_key(&address_key(ip)));
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
    /// Charges an `AdminService` call: with the operator credential it is free (membership
    /// changes and status rounds must never be refused to the operator under load); without
    /// (a call the service refuses anyway), it pays its address's bucket, so that guessing the
    /// credential is as slow as the address's rate.
    ///
    /// # Errors
    ///
    /// `RateLimited` when the address's bucket is empty.
    pub fn check_admin(
        &self,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> Result<(), ApiError> {
        let operator = headers
            .get("authorization")
            .and_then(|value| session_key(value.as_bytes()))
            .is_some_and(|key| self.operator == Some(key));
        if operator {
            return Ok(());
        }
        let inner = &self.inner;
        match peer_ip(extensions).map(|ip| inner.addresses.check_key(&address_key(ip))) {
            Some(Err(not_until)) => {
                Err(limited("this address", not_until.wait_time_from(inner.clock.now())))
            }
            _ => Ok(()),
        }
    }

    /// Charges one `HoldMany` item to its session, whose bare token is `token`: one token from
    /// the session's bucket (the one a call carrying `Authorization: Bearer <token>` pays),
    /// then, when [`RouteClass::Holds`] has a rate, one from the session's holds bucket. The
    /// token is hashed once for both. The call itself paid its address's bucket.
    ///
    /// # Errors
    ///
    /// `RateLimited` when either bucket is empty (the holds bucket is not charged when the
    /// session's was).
    pub fn check_hold_item(&self, token: &str) -> Result<(), ApiError> {
        let Some(key) = token_key(token.as_bytes()) else { return Ok(()) };
        if self.operator == Some(key) {
            return Ok(());
        }
        let inner = &self.inner;
        let now = || inner.clock.now();
        inner
            .sessions
            .check_key(&key)
            .map_err(|not_until| limited("this session", not_until.wait_time_from(now())))?;
        let Some(bucket) = inner.routes.get(&RouteClass::Holds) else { return Ok(()) };
        bucket.check_key(&RouteKey::Session(key)).map_err(|not_until| {
            limited(
                &format!("{} of this session", RouteClass::Holds),
                not_until.wait_time_from(now()),
            )
        })
    }

    /// Takes `count` more tokens from the bucket of the request's address: the items of a
    /// `HoldMany` call beyond the first, which the call's own check paid for.
    ///
    /// # Errors
    ///
    /// `RateLimited` when the bucket lacks them (none is taken then), or when `count` is more
    /// than the bucket can ever hold.
    pub fn check_address_n(&self, extensions: &Extensions, count: u32) -> Result<(), ApiError> {
        let (Some(ip), Some(count)) = (peer_ip(extensions), NonZeroU32::new(count)) else {
            return Ok(());
        };
        let inner = &self.inner;
        match inner.addresses.check_key_n(&address_key(ip), count) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => {
                Err(limited("this address", not_until.wait_time_from(inner.clock.now())))
            }
            Err(_insufficient) => Err(ApiError::RateLimited {
                message: format!("{count} requests at once are more than this address's burst"),
                retry_after_s: 1,
            }),
        }
    }

    /// Charges a request of route class `class` (when that class has a rate) to the caller's
    /// session, or to its address when it sends none. The operator credential is exempt, and
    /// so is a sessionless request a peer forwarded (the forwarding node charged it).
    ///
    /// # Errors
    ///
    /// `RateLimited` when the bucket is empty.
    pub fn check_route(
        &self,
        class: RouteClass,
        headers: &HeaderMap,
        extensions: &Extensions,
        forwarded: bool,
    ) -> Result<(), ApiError> {
        let Some(bucket) = self.inner.routes.get(&class) else { return Ok(()) };
        let key = match headers.get("authorization").and_then(|v| session_key(v.as_bytes())) {
            Some(key) if self.operator == Some(key) => return Ok(()),
            Some(key) => RouteKey::Session(key),
            None => match peer_ip(extensions) {
                Some(ip) if !(forwarded && self.inner.peers.contains(&ip)) => {
                    RouteKey::Address(address_key(ip))
                }
                _ => return Ok(()),
            },
        };
        bucket.check_key(&key).map_err(|not_until| {
            limited(
                &format!("{class} of this caller"),
                not_until.wait_time_from(self.inner.clock.now()),
            )
        })
    }

    /// Takes one token from the new-session bucket of the request's address.
    ///
    /// # Errors
    ///
    /// `RateLimited` when the address has created sessions at its rate.
    pub fn check_new_session(&self, extensions: &Extensions) -> Result<(), ApiError> {
        let Some(ip) = peer_ip(extensions) else { return Ok(()) };
        let inner = &self.inner;
        inner.new_sessions.check_key(&address_key(ip)).map_err(|not_until| {
            limited("this address (new sessions)", not_until.wait_time_from(inner.clock.now()))
        })
    }
}

/// A class of routes with a rate of its own on top of the session and address buckets
/// (`--route-rate CLASS=N`): the same class on REST and gRPC, so that either API pays one
/// bucket. Each is keyed on the caller's session (its address when it sends none).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    strum::EnumString,
    strum::Display,
    strum::VariantNames,
)]
#[strum(serialize_all = "kebab-case")]
pub enum RouteClass {
    /// `POST /v1/shows/{id}/holds`; gRPC `Hold`, and `HoldMany` once per item.
    Holds,
    /// `POST /v1/holds/{id}/checkout`; gRPC `Checkout`.
    Checkout,
    /// `POST /v1/shows/{id}/queue`; gRPC `JoinQueue`.
    Queue,
    /// `POST /v1/resources/{id}/waitlist:join`; gRPC `JoinWaitlist`.
    Waitlist,
    /// `GET /v1/search`; gRPC `Search`.
    Search,
    /// `GET /v1/shows/{id}/seats` and `/availability`; gRPC `GetSeatMap`.
    SeatMaps,
    /// `POST /v1/payments/webhook` (keyed on the provider's address: it sends no session).
    Webhook,
}

impl RouteClass {
    /// The class of a REST request, if it has one.
    pub fn of_rest(method: &Method, path: &str) -> Option<RouteClass> {
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        match (method.as_str(), segments.as_slice()) {
            ("POST", ["", "v1", "shows", _, "holds"]) => Some(RouteClass::Holds),
            ("POST", ["", "v1", "holds", _, "checkout"]) => Some(RouteClass::Checkout),
            ("POST", ["", "v1", "shows", _, "queue"]) => Some(RouteClass::Queue),
            ("POST", ["", "v1", "resources", _, "waitlist:join"]) => Some(RouteClass::Waitlist),
            ("GET", ["", "v1", "search"]) => Some(RouteClass::Search),
            ("GET", ["", "v1", "shows", _, "seats" | "availability"]) => Some(RouteClass::SeatMaps),
            ("POST", ["", "v1", "payments", "webhook"]) => Some(RouteClass::Webhook),
            _ => None,
        }
    }

    /// The class of a gRPC call (`/package.Service/Method`), if it has one. `HoldMany` is
    /// charged per item by the service, not here.
    pub fn of_grpc(path: &str) -> Option<RouteClass> {
        match path.strip_prefix("/booking.v1.BookingService/")? {
            "Hold" => Some(RouteClass::Holds),
            "Checkout" => Some(RouteClass::Checkout),
            "JoinQueue" => Some(RouteClass::Queue),
            "JoinWaitlist" => Some(RouteClass::Waitlist),
            "Search" => Some(RouteClass::Search),
            "GetSeatMap" => Some(RouteClass::SeatMaps),
            _ => None,
        }
    }
}

/// Parses `--route-rate CLASS=N` (N requests a second, at least 1).
///
/// # Errors
///
/// A message naming the known classes, or the bad rate.
pub fn parse_route_rate(text: &str) -> Result<(RouteClass, u32), String> {
    use strum::VariantNames;
    let (class, rate) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}`: expected CLASS=REQUESTS_PER_SECOND"))?;
    let class = class.trim().parse::<RouteClass>().map_err(|_| {
        format!(
            "`{}`: no such route class (known: {})",
            class.trim(),
            RouteClass::VARIANTS.join(", ")
        )
    })?;
    let rate = rate.trim().parse::<u32>().ok().filter(|rate| *rate >= 1).ok_or_else(|| {
        format!("`{text}`: the rate is a whole number of requests a second, at least 1")
    })?;
    Ok((class, rate))
}

/// Who a route bucket belongs to: the session, or the address of a caller without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RouteKey {
    Session(u128),
    Address(IpAddr),
}

/// Sessions a second one address may create by default (bursts of twice as many): a front end
/// that makes sessions for its buyers makes many from one address, a flood of them far more.
pub const NEW_SESSIONS_PER_ADDRESS_DEFAULT: u32 = 100;

/// A bucket refilling at `rate` a second, [`BURST_SECONDS`] of it deep.
fn quota(rate: u32) -> Quota {
    let rate = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
    let burst = rate.saturating_mul(NonZeroU32::new(BURST_SECONDS).unwrap_or(NonZeroU32::MIN));
    Quota::per_second(rate).allow_burst(burst)
}

/// The session bucket key of an `Authorization` value: its bearer token as authentication
/// reads it (after `Bearer `, trimmed), hashed (tokens are not kept in memory); `None` without
/// a token.
fn session_key(authorization: &[u8]) -> Option<u128> {
    let token = std::str::from_utf8(authorization).ok()?.strip_prefix("Bearer ")?;
    token_key(token.as_bytes())
}

/// The session bucket key of a bare token, trimmed; `None` for an empty one.
fn token_key(token: &[u8]) -> Option<u128> {
    let token = token.trim_ascii();
    (!token.is_empty()).then(|| hash128(b"rate-limit-session", token))
}

/// The address bucket key of `ip`: itself for IPv4 (and IPv4-mapped IPv6), its /64 for IPv6.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
        },
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_trusts_peers_given_as_ip_literals_and_names_the_operator() {
        let args = crate::Args {
            id: Some(1),
            data: Some("/tmp/unused".into()),
            listen: Some("127.0.0.1:1".parse().unwrap()),
            peers: vec![(2, "10.1.2.3:7102".into()), (3, "node-3.example:7103".into())],
            // Raft on the client port: nodes on a simulated network.
            plain_peers: true,
            ..crate::Args::default()
        };
        let config = crate::Config::load_with(args, &crate::secrets::test_env).unwrap();
        let limits = Limits::from_config(&config);
        assert_eq!(limits.inner.peers, BTreeSet::from(["10.1.2.3".parse().unwrap()]));
        let operator = format!("Bearer  {} ", crate::secrets::TEST_OPERATOR_TOKEN);
        assert_eq!(limits.operator, session_key(operator.as_bytes()));
        assert_eq!(config.rate_new_sessions_per_address, NEW_SESSIONS_PER_ADDRESS_DEFAULT);
    }

    #[test]
    fn an_ipv6_address_counts_as_its_slash_64() {
        let key = |text: &str| address_key(text.parse().unwrap());
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:ffff:0:0:9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:10.0.0.1"), key("10.0.0.1"));
        assert_ne!(key("10.0.0.1"), key("10.0.0.2"));
    }

    #[test]
    fn a_token_is_one_bucket_however_its_header_is_spaced() {
        let key = |header: &str| session_key(header.as_bytes());
        assert_eq!(key("Bearer tok"), key("Bearer   tok  "));
        assert_eq!(key("Bearer tok"), token_key(b" tok"));
        assert_ne!(key("Bearer tok"), key("Bearer tok2"));
        assert_eq!(key("Bearer "), None);
        assert_eq!(key("Basic tok"), None);
    }
}
