//! Rate limits: a token bucket per session and one per client address, shared by the REST
//! routes (`rest/limits.rs` is their middleware) and the gRPC booking calls (`node.rs` charges
//! them on the one port), so that mixing the two APIs does not double a caller's rate.
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
//! A request another node forwarded (`booking-forwarded`, see `rest/forward.rs`) arrives from that
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

use axum::extract::ConnectInfo;
use axum::http::{Extensions, HeaderMap};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

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
        }
        let session = headers
            .get("authorization")
            .map(|value| session_key(value.as_bytes()))
            .filter(|key| self.operator != Some(*key))
            .map(|key| inner.sessions.check_key(&key));
        let address = peer_ip(extensions).filter(|ip| !(forwarded && inner.peers.contains(ip)));
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
