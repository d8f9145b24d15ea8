//! A small gRPC client of the booking service for the cluster tests, written against
//! `proto/booking.proto` alone, so that the tests of Raft behaviour see the node's gRPC surface
//! (metadata, codes) as it is, without the SDK they would be testing (the `sdk*` tests use the
//! real SDK, the `client` crate): it adds the session token and an idempotency key to every
//! call, and follows the cluster's leader hints. Status, leaders and membership changes are the
//! test kit's (`testkit::Cluster`, through the SDK).
//!
//! A call that fails retryably (UNAVAILABLE with a `booking-code`, or any failure without one,
//! which is the transport's: a refused connection, a reset, an attempt that timed out) is sent
//! again with the same idempotency key: to the node named by `booking-leader-addr` when it is
//! one of the client's nodes, else to the next node, after a backoff, until the call's deadline.
//! Every other error is the call's answer. Owns no assertion about the cluster: the tests do.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use proto::booking::booking_service_client::BookingServiceClient;
use proto::booking::{
    CreateSessionRequest, CreateShowRequest, GetHoldRequest, HoldReply, HoldRequest, SalesReply,
    SeatRange, ShowPlacement, ShowRef,
};
use testkit::{Cluster, NodeId};
use tokio::time::Instant;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, ClientTlsConfig};
use tonic::{Code, Request, Response, Status};

/// How long one attempt of a call may take before it counts as failed (and is retried).
pub const ATTEMPT_MAX: Duration = Duration::from_secs(5);

/// How long a call may keep retrying before its last error is its answer.
pub const CALL_MAX: Duration = Duration::from_secs(30);

/// How long a connection to a node may take.
const CONNECT_MAX: Duration = Duration::from_millis(500);

/// The first and the longest pause between two attempts of a call.
const BACKOFF_MIN: Duration = Duration::from_millis(25);
const BACKOFF_MAX: Duration = Duration::from_millis(400);

/// The price version of a newly created show (the state machine starts at 1).
pub const PRICE_VERSION: u32 = 1;

/// The credential of the operator who creates and opens shows: the one a test cluster's nodes
/// get unless its options say otherwise.
pub const OPERATOR: &str = testkit::OPERATOR_TOKEN_DEFAULT;

/// The machine code of an error (`booking-code`), or `""` for an error the transport made.
pub fn booking_code(status: &Status) -> &str {
    status.metadata().get("booking-code").and_then(|value| value.to_str().ok()).unwrap_or("")
}

/// The node an error names as the leader, if it names one.
fn leader_address(status: &Status) -> Option<String> {
    let hint = status.metadata().get("booking-leader-addr")?.to_str().ok()?;
    (!hint.is_empty()).then(|| hint.to_owned())
}

/// Whether a failed call may be sent again with the same idempotency key: the node says it is
/// not the leader, has no leader or does not know the outcome (UNAVAILABLE), or the failure is
/// the transport's (no `booking-code`).
pub fn is_retryable(status: &Status) -> bool {
    booking_code(status).is_empty() || status.code() == Code::Unavailable
}

/// A short description of an error for messages: gRPC code, booking code and message.
pub fn describe(status: &Status) -> String {
    format!("{:?}/{} ({})", status.code(), booking_code(status), status.message())
}

/// Lazily connected channels, one per node address, shared by clones.
#[derive(Clone, Default)]
struct Channels {
    by_address: Arc<Mutex<BTreeMap<String, Channel>>>,
    /// The cluster's CA, when its nodes serve TLS.
    tls: Option<ClientTlsConfig>,
}

impl Channels {
    /// The channel to `address` (host:port), made on first use; it reconnects by itself after
    /// the node restarts.
    ///
    /// # Errors
    ///
    /// When `address` is not a valid URI authority.
    fn get(&self, address: &str) -> Result<Channel, Status> {
        // Each change is a single insert: a panic elsewhere cannot leave the map half-made.
        let mut channels = self.by_address.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(channel) = channels.get(address) {
            return Ok(channel.clone());
        }
        let endpoint = crate::grpc_endpoint_at(address, self.tls.as_ref())
            .map_err(|error| Status::invalid_argument(format!("address {address}: {error}")))?
            .connect_timeout(CONNECT_MAX)
            .tcp_nodelay(true);
        let channel = endpoint.connect_lazy();
        channels.insert(address.to_owned(), channel.clone());
        Ok(channel)
    }
}

/// What a call is about, to remember where it last succeeded (its group's leader).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Route {
    /// A call about a show, answered by the leader of the show's group.
    Show(u64),
}

/// A per-process counter that keeps the idempotency keys of two clients apart.
static CLIENTS: AtomicU64 = AtomicU64::new(0);

/// The client: cheap to clone, clones share channels, keys and leader knowledge.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    /// The addresses the client may send to, in the order it tries them.
    nodes: Vec<String>,
    channels: Channels,
    /// Makes this client's idempotency keys unique.
    key_prefix: String,
    next_key: AtomicU64,
    /// Where each route last succeeded.
    leaders: Mutex<BTreeMap<Route, String>>,
    /// Rotates the first node tried for a route with no known leader.
    next_node: AtomicU64,
}

impl Client {
    /// A client of every node `cluster` has (running or not).
    pub fn of(cluster: &Cluster) -> Client {
        Client::new(cluster.addresses(), crate::grpc_tls(cluster))
    }

    /// A client that only talks to nodes `ids` of `cluster` (and follows no leader hint to
    /// another node).
    ///
    /// # Errors
    ///
    /// When the cluster has no such node.
    pub fn of_nodes(cluster: &Cluster, ids: &[NodeId]) -> io::Result<Client> {
        let addresses = ids.iter().map(|&id| cluster.address(id)).collect::<Result<_, _>>()?;
        Ok(Client::new(addresses, crate::grpc_tls(cluster)))
    }

    /// A client of the nodes at `nodes` (host:port of their API), with channels of its own,
    /// over TLS with `tls` when given.
    fn new(nodes: Vec<String>, tls: Option<ClientTlsConfig>) -> Client {
        let number = CLIENTS.fetch_add(1, Ordering::Relaxed);
        Client {
            inner: Arc::new(ClientInner {
                nodes,
                channels: Channels { tls, ..Channels::default() },
                key_prefix: format!("test-{}-{number}", std::process::id()),
                next_key: AtomicU64::new(0),
                leaders: Mutex::new(BTreeMap::new()),
                next_node: AtomicU64::new(0),
            }),
        }
    }

    /// A fresh guest session token, issued by the cluster (any node; each call is a new
    /// session).
    ///
    /// # Errors
    ///
    /// As [`Client::create_show`].
    pub async fn session(&self) -> Result<String, Status> {
        let reply = self
            .call(Route::Show(0), |channel| async move {
                BookingServiceClient::new(channel).create_session(CreateSessionRequest {}).await
            })
            .await?;
        Ok(reply.token)
    }

    /// A fresh idempotency key, never used before by this process.
    pub fn new_key(&self) -> String {
        let number = self.inner.next_key.fetch_add(1, Ordering::Relaxed);
        format!("{}-{number}", self.inner.key_prefix)
    }

    /// Creates show `show_id` with `seats` seats of one class priced 10.00 EUR, in `group_id`
    /// (0: the cluster chooses), and returns where it was placed.
    ///
    /// # Errors
    ///
    /// The node's error, once it is not retryable or the call's deadline passed.
    pub async fn create_show(
        &self,
        show_id: u64,
        seats: u32,
        group_id: u64,
    ) -> Result<ShowPlacement, Status> {
        let message = CreateShowRequest {
            show_id,
            currency: "EUR".to_owned(),
            prices_minor: vec![1_000],
            layout: vec![SeatRange { count: seats, class: 0 }],
            group_id,
            ..CreateShowRequest::default()
        };
        let key = self.new_key();
        self.call(Route::Show(show_id), |channel| {
            let request = booking_request(message.clone(), OPERATOR, Some(&key));
            async move { BookingServiceClient::new(channel).create_show(request?).await }
        })
        .await
    }

    /// Opens the sales of `show_id`.
    ///
    /// # Errors
    ///
    /// As [`Client::create_show`].
    pub async fn open_sales(&self, show_id: u64) -> Result<SalesReply, Status> {
        let key = self.new_key();
        self.call(Route::Show(show_id), |channel| {
            let request = booking_request(ShowRef { show_id }, OPERATOR, Some(&key));
            async move { BookingServiceClient::new(channel).open_sales(request?).await }
        })
        .await
    }

    /// Holds `seats` of `show_id` for the session of `token`, under a fresh idempotency key.
    ///
    /// # Errors
    ///
    /// As [`Client::create_show`]; a seat taken is ABORTED with `seat_unavailable`.
    pub async fn hold(
        &self,
        token: &str,
        show_id: u64,
        seats: &[u32],
    ) -> Result<HoldReply, Status> {
        self.hold_with_key(token, &self.new_key(), show_id, seats).await
    }

    /// As [`Client::hold`], under idempotency key `key` (a retry of an earlier request).
    ///
    /// # Errors
    ///
    /// As [`Client::hold`].
    pub async fn hold_with_key(
        &self,
        token: &str,
        key: &str,
        show_id: u64,
        seats: &[u32],
    ) -> Result<HoldReply, Status> {
        let message = hold_message(show_id, seats);
        self.call(Route::Show(show_id), |channel| {
            let request = booking_request(message.clone(), token, Some(key));
            async move { BookingServiceClient::new(channel).hold(request?).await }
        })
        .await
    }

    /// Sends one hold to the node at `address` and nothing else: no retry, no leader hint
    /// followed, and an error (without `booking-code`) if no answer came within `wait`.
    ///
    /// # Errors
    ///
    /// The node's error, or the transport's.
    pub async fn hold_once_on(
        &self,
        address: &str,
        token: &str,
        key: &str,
        show_id: u64,
        seats: &[u32],
        wait: Duration,
    ) -> Result<HoldReply, Status> {
        let channel = self.inner.channels.get(address)?;
        let request = booking_request(hold_message(show_id, seats), token, Some(key))?;
        let mut booking = BookingServiceClient::new(channel);
        match tokio::time::timeout(wait, booking.hold(request)).await {
            Ok(answer) => answer.map(Response::into_inner),
            Err(_elapsed) => Err(Status::deadline_exceeded(format!("no answer after {wait:?}"))),
        }
    }

    /// Reads hold `hold_id` of `show_id`, owned by the session of `token`, linearizably.
    ///
    /// # Errors
    ///
    /// As [`Client::create_show`].
    pub async fn get_hold(
        &self,
        token: &str,
        show_id: u64,
        hold_id: u64,
    ) -> Result<HoldReply, Status> {
        let message = GetHoldRequest { show_id, hold_id };
        self.call(Route::Show(show_id), |channel| {
            let request = booking_request(message, token, None);
            async move { BookingServiceClient::new(channel).get_hold(request?).await }
        })
        .await
    }

    /// Sends `attempt` to the leader of `route` until it succeeds, fails for good, or
    /// [`CALL_MAX`] passed (then the last error is the answer). See the module docs.
    async fn call<T, F, Fut>(&self, route: Route, mut attempt: F) -> Result<T, Status>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let deadline = Instant::now() + CALL_MAX;
        let mut address = self.first_address(route);
        let mut backoff = BACKOFF_MIN;
        loop {
            let channel = self.inner.channels.get(&address)?;
            let answer = match tokio::time::timeout(ATTEMPT_MAX, attempt(channel)).await {
                Ok(answer) => answer,
                Err(_elapsed) => Err(Status::deadline_exceeded(format!(
                    "{address}: no answer in {ATTEMPT_MAX:?}"
                ))),
            };
            let status = match answer {
                Ok(response) => {
                    self.leaders().insert(route, address);
                    return Ok(response.into_inner());
                }
                Err(status) => status,
            };
            if !is_retryable(&status) || Instant::now() >= deadline {
                return Err(status);
            }
            self.leaders().remove(&route);
            match leader_address(&status).filter(|hint| self.inner.nodes.contains(hint)) {
                // A hint to another node is followed at once, a hint to this one (the leader
                // has no answer yet) after a pause.
                Some(hint) if hint != address => address = hint,
                Some(_) => tokio::time::sleep(backoff).await,
                None => {
                    tokio::time::sleep(backoff).await;
                    address = self.next_address(&address);
                }
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Where a call about `route` goes first: its last leader, or the next node in turn.
    fn first_address(&self, route: Route) -> String {
        if let Some(leader) = self.leaders().get(&route) {
            return leader.clone();
        }
        let turn = self.inner.next_node.fetch_add(1, Ordering::Relaxed);
        let position = usize::try_from(turn).unwrap_or(0) % self.inner.nodes.len().max(1);
        self.inner.nodes.get(position).cloned().unwrap_or_default()
    }

    /// The node after `address` in the client's list.
    fn next_address(&self, address: &str) -> String {
        let nodes = &self.inner.nodes;
        let position = nodes.iter().position(|node| node == address).map_or(0, |at| at + 1);
        nodes.get(position % nodes.len().max(1)).cloned().unwrap_or_default()
    }

    fn leaders(&self) -> std::sync::MutexGuard<'_, BTreeMap<Route, String>> {
        // Each change is a single insert or remove: a panic elsewhere cannot leave it half-made.
        self.inner.leaders.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The hold request for `seats` of `show_id` at the current price version.
fn hold_message(show_id: u64, seats: &[u32]) -> HoldRequest {
    HoldRequest {
        show_id,
        seats: seats.to_vec(),
        price_version: PRICE_VERSION,
        grant_ticket_id: 0,
        seat_labels: Vec::new(),
    }
}

/// `message` with the session token of `token` and, for a mutation, idempotency key `key`.
fn booking_request<T>(message: T, token: &str, key: Option<&str>) -> Result<Request<T>, Status> {
    let mut request = Request::new(message);
    let authorization = MetadataValue::try_from(format!("Bearer {token}"))
        .map_err(|error| Status::invalid_argument(format!("token: {error}")))?;
    request.metadata_mut().insert("authorization", authorization);
    if let Some(key) = key {
        let key = MetadataValue::try_from(key)
            .map_err(|error| Status::invalid_argument(format!("key: {error}")))?;
        request.metadata_mut().insert("idempotency-key", key);
    }
    Ok(request)
}
