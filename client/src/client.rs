//! The [`Client`]: one lazily connected channel per node address, leader discovery, and the
//! call loop that retries a logical call (with the same idempotency key) until a leader
//! answers or the retry budget runs out.
//!
//! Owns routing and retrying, and the cluster operations (status, membership). The booking
//! operations built on the call loop live in `shows.rs` and `booking.rs`. Never interprets a
//! reply beyond the placement and membership fields that say where leaders are, and never
//! retries a call a node rejected for good.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use proto::booking::admin_service_client::AdminServiceClient;
use proto::booking::booking_service_client::BookingServiceClient;
use proto::booking::{
    AddLearnerRequest, MembershipReply, MoveReplicaRequest, NodesRequest, StatusReply,
    StatusRequest, TransferLeaderRequest,
};
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic::{Response, Status};

use crate::address;
use crate::batch::{self, HoldQueue};
use crate::connector::{self, Connector};
use crate::error::{self, Delivery, Error, Result, Verdict};
use crate::key::CallMetadata;
use crate::retry::{Backoff, Config, HINTS_IMMEDIATE_MAX};
use crate::route::{Route, Routes};

/// Makes fresh idempotency keys for a [`Client`] (see [`Client::with_key_source`]).
pub type KeySource = Arc<dyn Fn() -> String + Send + Sync>;

/// The HTTP/2 flow-control window of one call: a whole seat map of the largest show (about
/// 200 KB unpacked) fits, so a reply is never held up waiting for a window update.
const HTTP2_STREAM_WINDOW_BYTES: u32 = 1 << 20;
/// The HTTP/2 flow-control window of a connection, shared by every call on it.
const HTTP2_CONNECTION_WINDOW_BYTES: u32 = 8 << 20;

/// The role a node reports for the replica that leads a group.
const ROLE_LEADER: &str = "leader";

/// A handle on a booking cluster. Cheap to clone; clones share channels and leader caches.
///
/// Calls about a show go to the leader of the show's group, calls about a group to the group's
/// leader. The first attempt goes to the cached leader (or the next known node); a node that is
/// not the leader answers with a hint that the next attempt follows at once; without a hint the
/// next known node is tried after a backoff. Every attempt of a mutation carries the same
/// idempotency key, so a retried mutation is applied at most once.
#[derive(Clone)]
pub struct Client {
    /// The state every clone shares.
    inner: Arc<Inner>,
}

/// The shared state of a client.
pub(crate) struct Inner {
    /// How calls are bounded and retried.
    config: Config,
    /// Known addresses and cached leaders. Never held across an await.
    routes: Mutex<Routes>,
    /// One lazily connected channel per address. Never held across an await. Ordered, so that
    /// a dropped client closes its connections in the same order every time (a simulated run
    /// must replay exactly).
    channels: Mutex<BTreeMap<String, Channel>>,
    /// The operator token sent on operator calls, if set. Never held across an await.
    operator_token: Mutex<Option<String>>,
    /// Where fresh idempotency keys come from, if not [`crate::generate_key`]. Never held
    /// across an await.
    key_source: Mutex<Option<KeySource>>,
    /// Opens connections instead of TCP when set (a simulator's network).
    connector: Option<Arc<dyn Connector>>,
    /// The queue of the task that packs concurrent holds into `HoldMany` calls, started on
    /// the first batched hold.
    holds: OnceLock<HoldQueue>,
    /// TLS to every node (https), trusting the cluster's CA, once set.
    tls: OnceLock<tonic::transport::ClientTlsConfig>,
}

/// How the call loop treats a logical call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A read the route's leader answers: no key, each attempt bounded by the attempt timeout.
    Read,
    /// A read any replica answers (seat maps, shows, watches): like `Read`, but the node that
    /// answers is not cached as the route's leader.
    LocalRead,
    /// A mutation: a key, each attempt bounded by the attempt timeout.
    Mutation,
    /// A mutation that may legitimately take long (waiting for a learner to catch up): each
    /// attempt may use the whole remaining budget.
    LongMutation,
}

/// One node's answer to a status call, or why there is none.
#[derive(Debug)]
pub struct NodeStatus {
    /// The address that was asked.
    pub address: String,
    /// Its status, or the error.
    pub result: Result<StatusReply>,
}

impl fmt::Debug for Client {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Client")
            .field("addresses", &self.addresses())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for the cluster that the nodes at `addresses` (`host:port`, any subset of the
    /// cluster) belong to, with the default [`Config`]. Connects lazily: nothing is sent until
    /// the first call.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the list is empty or an address is malformed.
    pub fn connect(addresses: Vec<String>) -> Result<Client> {
        Client::with_config(addresses, Config::default())
    }

    /// Like [`Client::connect`], with a chosen retry policy.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the list is empty or an address is malformed.
    pub fn with_config(addresses: Vec<String>, config: Config) -> Result<Client> {
        Client::build(addresses, config, None)
    }

    /// Like [`Client::with_config`], with every connection to a node opened by `connector`
    /// instead of TCP: a deterministic simulator's network, or an in-process transport. The
    /// connector is asked for each address in its normalized `host:port` spelling, whether
    /// given here or learned from a leader hint; each attempt to connect is still bounded by
    /// [`Config::connect_timeout`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the list is empty or an address is malformed.
    pub fn with_connector(
        addresses: Vec<String>,
        config: Config,
        connector: Arc<dyn Connector>,
    ) -> Result<Client> {
        Client::build(addresses, config, Some(connector))
    }

    /// A client for `addresses` that connects through `connector`, or over TCP without one.
    fn build(
        addresses: Vec<String>,
        config: Config,
        connector: Option<Arc<dyn Connector>>,
    ) -> Result<Client> {
        let mut normalized: Vec<String> = Vec::with_capacity(addresses.len());
        for text in &addresses {
            let address = address::normalize(text)?;
            if !normalized.contains(&address) {
                normalized.push(address);
            }
        }
        if normalized.is_empty() {
            return Err(Error::InvalidArgument("no node address given".into()));
        }
        Ok(Client {
            inner: Arc::new(Inner {
                config,
                routes: Mutex::new(Routes::new(normalized)),
                channels: Mutex::new(BTreeMap::new()),
                operator_token: Mutex::new(None),
                key_source: Mutex::new(None),
                connector,
                holds: OnceLock::new(),
                tls: OnceLock::new(),
            }),
        })
    }

    /// Makes the keys of mutations the caller gives no key for (membership calls, opening and
    /// closing sales, capacity events, calls with `None`) with `source` instead of the operating
    /// system's randomness. For a simulator, whose runs must replay exactly; a source must never
    /// repeat a key. Clones share it.
    pub fn with_key_source(self, source: KeySource) -> Client {
        *lock(&self.inner.key_source) = Some(source);
        self
    }

    /// A client on shared state (the batching task's way back to its client).
    pub(crate) fn from_inner(inner: Arc<Inner>) -> Client {
        Client { inner }
    }

    /// The queue of the hold-batching task, started on first use (inside a tokio runtime).
    pub(crate) fn hold_queue(&self) -> &HoldQueue {
        self.inner.holds.get_or_init(|| {
            batch::start(Arc::downgrade(&self.inner), self.inner.config.hold_batches_in_flight_max)
        })
    }

    /// `key`, or a fresh one from the key source when there is a source and no key.
    pub(crate) fn key_or_fresh(&self, key: Option<&str>) -> Option<String> {
        match key {
            Some(key) => Some(key.to_owned()),
            None => lock(&self.inner.key_source).as_ref().map(|source| source()),
        }
    }

    /// Sends `token` as `authorization: Bearer <token>` on operator calls (creating shows,
    /// opening and closing sales, capacity events, audit trails) and on every admin call
    /// (status, membership changes): the nodes refuse those calls without it. Clones share it.
    ///
    /// ```no_run
    /// # fn run() -> client::Result<()> {
    /// let client = client::Client::connect(vec!["127.0.0.1:7101".into()])?
    ///     .with_operator_token("s3cret-operator-token")?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty token or one with spaces or non-ASCII.
    pub fn with_operator_token(self, token: &str) -> Result<Client> {
        // Checks the token the way every call will send it.
        CallMetadata::default().with_token(Some(token))?;
        *lock(&self.inner.operator_token) = Some(token.trim().to_owned());
        Ok(self)
    }

    /// Speaks https to every node (their `--client-tls`), trusting the certificates the CA of
    /// `ca_pem` signed (the cluster's `ca.crt` from `bookctl certs init`) for the host each node
    /// is addressed by. Set it before the first call.
    ///
    /// ```no_run
    /// # fn run() -> client::Result<()> {
    /// let ca = std::fs::read_to_string("cluster-data/tls/ca.crt").expect("the cluster's CA");
    /// let client = client::Client::connect(vec!["127.0.0.1:7101".into()])?
    ///     .with_ca_certificate(&ca)?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `ca_pem` holds no PEM certificate, or TLS was already set.
    pub fn with_ca_certificate(self, ca_pem: &str) -> Result<Client> {
        if !ca_pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(Error::InvalidArgument("the CA file holds no PEM certificate".into()));
        }
        let certificate = tonic::transport::Certificate::from_pem(ca_pem);
        let tls = tonic::transport::ClientTlsConfig::new().ca_certificate(certificate);
        self.inner
            .tls
            .set(tls)
            .map_err(|_| Error::InvalidArgument("the client's TLS is already set".into()))?;
        // Channels made before (none, if it is set first) would stay plain.
        lock(&self.inner.channels).clear();
        Ok(self)
    }

    /// Whether calls go over TLS ([`Client::with_ca_certificate`]).
    pub fn is_tls(&self) -> bool {
        self.inner.tls.get().is_some()
    }

    /// The metadata of an operator call: `key` (a fresh one when `None`) for a mutation, and
    /// the operator token when one is set.
    pub(crate) fn operator_metadata(
        &self,
        mutation: bool,
        key: Option<&str>,
    ) -> Result<CallMetadata> {
        let key = self.key_or_fresh(key);
        let metadata = if mutation {
            CallMetadata::mutation(key.as_deref())?
        } else {
            CallMetadata::default()
        };
        let token = lock(&self.inner.operator_token).clone();
        metadata.with_token(token.as_deref())
    }

    /// The retry policy.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Every node address the client knows: the given ones, then those learned from hints.
    pub fn addresses(&self) -> Vec<String> {
        self.routes().addresses().to_vec()
    }

    /// One node's view of every group it hosts (one attempt, not retried elsewhere); with
    /// `with_digest`, each group's state digest too.
    ///
    /// # Errors
    ///
    /// [`Error::Transport`] when the node did not answer within the attempt timeout,
    /// [`Error::Rejected`] when it refused, [`Error::InvalidArgument`] for a malformed address.
    pub async fn status(&self, address: &str, with_digest: bool) -> Result<StatusReply> {
        let address = address::normalize(address)?;
        let channel = self.channel(&address)?;
        let request = self.operator_metadata(false, None)?.request(StatusRequest { with_digest });
        let call = async move { AdminServiceClient::new(channel).status(request).await };
        let timeout = self.inner.config.attempt_timeout;
        let status = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(reply)) => {
                let reply = reply.into_inner();
                self.learn_from_status(&address, &reply);
                return Ok(reply);
            }
            Ok(Err(status)) => status,
            Err(_) => Status::deadline_exceeded(format!("no answer within {timeout:?}")),
        };
        if error::booking_code(&status).is_some() {
            return Err(Error::rejected(&status));
        }
        Err(Error::Transport { address, status: status.code(), message: error::describe(&status) })
    }

    /// Every known node's status, asked concurrently, in the order of [`Client::addresses`].
    pub async fn cluster_status(&self, with_digest: bool) -> Vec<NodeStatus> {
        let addresses = self.addresses();
        let calls = addresses.iter().map(|address| self.status(address, with_digest));
        let results = futures_util::future::join_all(calls).await;
        addresses
            .into_iter()
            .zip(results)
            .map(|(address, result)| NodeStatus { address, result })
            .collect()
    }

    /// Adds node `node_id` (serving at `address`: its client address, and on a cluster with peer
    /// ports ` peer=` and its peer address) to a group as a learner; with `wait`, returns
    /// once it has caught up with the leader's log (the attempt may then use the whole budget).
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`], [`Error::Unavailable`], [`Error::InvalidArgument`].
    pub async fn add_learner(
        &self,
        group_id: u64,
        node_id: u64,
        address: &str,
        wait: bool,
    ) -> Result<MembershipReply> {
        let address = address::normalize_member(address)?;
        let request = AddLearnerRequest { group_id, node_id, address, wait };
        let kind = if wait { Kind::LongMutation } else { Kind::Mutation };
        self.membership(group_id, kind, |channel, metadata| {
            let request = metadata.request(request.clone());
            async move { AdminServiceClient::new(channel).add_learner(request).await }
        })
        .await
    }

    /// Makes learners of a group voters.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (not a learner, ...), [`Error::Unavailable`].
    pub async fn promote(&self, group_id: u64, node_ids: &[u64]) -> Result<MembershipReply> {
        let request = NodesRequest { group_id, node_ids: node_ids.to_vec() };
        self.membership(group_id, Kind::Mutation, |channel, metadata| {
            let request = metadata.request(request.clone());
            async move { AdminServiceClient::new(channel).promote(request).await }
        })
        .await
    }

    /// Removes nodes (voters or learners) from a group.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (would leave no voter, ...), [`Error::Unavailable`].
    pub async fn remove(&self, group_id: u64, node_ids: &[u64]) -> Result<MembershipReply> {
        let request = NodesRequest { group_id, node_ids: node_ids.to_vec() };
        self.membership(group_id, Kind::Mutation, |channel, metadata| {
            let request = metadata.request(request.clone());
            async move { AdminServiceClient::new(channel).remove(request).await }
        })
        .await
    }

    /// Moves a group's replica from node `from` to node `to` (serving at `to_address`): adds it
    /// as a learner, waits for it to catch up, then swaps the voters in one joint change. The
    /// attempt may use the whole budget.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`], [`Error::Unavailable`], [`Error::InvalidArgument`].
    pub async fn move_replica(
        &self,
        group_id: u64,
        from_node_id: u64,
        to_node_id: u64,
        to_address: &str,
    ) -> Result<MembershipReply> {
        let to_address = address::normalize_member(to_address)?;
        let request = MoveReplicaRequest { group_id, from_node_id, to_node_id, to_address };
        self.membership(group_id, Kind::LongMutation, |channel, metadata| {
            let request = metadata.request(request.clone());
            async move { AdminServiceClient::new(channel).move_replica(request).await }
        })
        .await
    }

    /// Hands a group's leadership to voter `to_node_id`.
    ///
    /// # Errors
    ///
    /// [`Error::Rejected`] (not a voter, ...), [`Error::Unavailable`].
    pub async fn transfer_leader(&self, group_id: u64, to_node_id: u64) -> Result<MembershipReply> {
        let request = TransferLeaderRequest { group_id, to_node_id };
        let reply = self
            .membership(group_id, Kind::Mutation, |channel, metadata| {
                let request = metadata.request(request);
                async move { AdminServiceClient::new(channel).transfer_leader(request).await }
            })
            .await?;
        if reply.leader_id != to_node_id {
            // The hand-over may still be under way: find the leader afresh next time.
            self.routes().forget_group_leader(group_id);
        }
        Ok(reply)
    }

    /// Runs a membership call at the group's leader, found by a status round when it is not
    /// cached, and records the leader the reply names.
    async fn membership<F, Fut>(
        &self,
        group_id: u64,
        kind: Kind,
        mut attempt: F,
    ) -> Result<MembershipReply>
    where
        F: FnMut(Channel, &CallMetadata) -> Fut,
        Fut: Future<Output = Result<Response<MembershipReply>, Status>>,
    {
        if self.routes().leader(Route::Group(group_id)).is_none() {
            // Learns every reporting leader; errors are for the call below to meet.
            self.cluster_status(false).await;
        }
        let metadata = self.operator_metadata(true, None)?;
        let (reply, _) = self
            .call(Route::Group(group_id), kind, &metadata, |channel| attempt(channel, &metadata))
            .await?;
        let mut routes = self.routes();
        if let Some(address) = routes.node_address(reply.leader_id).map(str::to_owned) {
            routes.learn_group_leader(group_id, &address);
        }
        Ok(reply)
    }

    /// Records what a status reply says about nodes and leaders.
    fn learn_from_status(&self, address: &str, reply: &StatusReply) {
        let mut routes = self.routes();
        routes.learn_node(reply.node_id, address);
        for group in &reply.groups {
            if group.role == ROLE_LEADER && !group.fatal {
                routes.learn_group_leader(group.group_id, address);
            }
        }
    }

    /// Runs one logical call: attempts at the route's leader, following hints at once and
    /// moving to the next known node after a backoff otherwise, until an attempt succeeds, a
    /// node rejects the call for good, or the retry budget is spent. Returns the reply and the
    /// address that gave it.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        route: Route,
        kind: Kind,
        metadata: &CallMetadata,
        mut attempt: F,
    ) -> Result<(T, String)>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let config = &self.inner.config;
        let started = Instant::now();
        let deadline = started + config.retry_budget;
        let mut backoff = Backoff::new(config);
        let mut target = self.routes().first_target(route);
        let mut attempts: u32 = 0;
        let mut hints_in_a_row: u32 = 0;
        let mut outcome_unknown = kind.is_mutation() && metadata.is_maybe_applied();
        // The call's failure, after its last attempt ended with `status`.
        let unavailable =
            |status: &Status, attempts: u32, outcome_unknown: bool| Error::Unavailable {
                attempts,
                elapsed: started.elapsed(),
                status: status.code(),
                booking_code: error::booking_code(status).map(str::to_owned),
                message: error::describe(status),
                outcome_unknown,
                idempotency_key: metadata.key().map(str::to_owned),
            };
        // Addresses this call could not connect to: a hint to one of them (a node that has not
        // yet noticed its leader died) is not followed, else two nodes could be tried forever.
        let mut unreachable: Vec<String> = Vec::new();
        loop {
            attempts += 1;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let timeout = match kind {
                Kind::LongMutation => remaining,
                Kind::Read | Kind::LocalRead | Kind::Mutation => {
                    config.attempt_timeout.min(remaining)
                }
            };
            let channel = self.channel(&target)?;
            let status = match tokio::time::timeout(timeout, attempt(channel)).await {
                Ok(Ok(response)) => {
                    if kind != Kind::LocalRead {
                        self.routes().on_success(route, &target);
                    }
                    return Ok((response.into_inner(), target));
                }
                Ok(Err(status)) => status,
                Err(_) => Status::deadline_exceeded(format!("no answer within {timeout:?}")),
            };
            let (hint, delivery) = match error::classify(&status) {
                // An attempt before may have been applied, and this answer is a refusal made
                // before the rules saw the call (a full disk, a rate limit, ...): it says
                // nothing about that attempt, so the outcome stays unknown. Any other final
                // answer stands: under the same key a command applied before answers as it did.
                Verdict::Final if outcome_unknown && error::refused_before_rules(&status) => {
                    return Err(unavailable(&status, attempts, outcome_unknown));
                }
                Verdict::Final => return Err(Error::rejected(&status)),
                Verdict::Retry { hint, delivery } => (hint, delivery),
            };
            outcome_unknown |= kind.is_mutation() && delivery == Delivery::Unknown;
            if delivery == Delivery::NotSent {
                if !unreachable.contains(&target) {
                    unreachable.push(target.clone());
                }
            } else {
                unreachable.retain(|address| *address != target);
            }
            tracing::debug!(
                ?route,
                %target,
                attempts,
                code = ?status.code(),
                booking_code = error::booking_code(&status),
                hint = hint.as_ref().map(|hint| hint.address.as_str()),
                message = status.message(),
                "attempt failed, retrying"
            );
            let wait = {
                let mut routes = self.routes();
                routes.on_failure(route, &target);
                match hint {
                    Some(hint)
                        if hint.address != target && !unreachable.contains(&hint.address) =>
                    {
                        match hint.node_id {
                            Some(node_id) => routes.learn_node(node_id, &hint.address),
                            None => routes.learn_address(&hint.address),
                        }
                        target = hint.address;
                        hints_in_a_row += 1;
                        if hints_in_a_row > HINTS_IMMEDIATE_MAX {
                            backoff.next_wait()
                        } else {
                            Duration::ZERO
                        }
                    }
                    _ => {
                        hints_in_a_row = 0;
                        target = routes.next_address(Some(&target));
                        backoff.next_wait()
                    }
                }
            };
            if Instant::now() + wait >= deadline {
                return Err(unavailable(&status, attempts, outcome_unknown));
            }
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
    }

    /// The channel of an address, made (lazily connecting) on first use.
    pub(crate) fn channel(&self, address: &str) -> Result<Channel> {
        let mut channels = lock(&self.inner.channels);
        if let Some(channel) = channels.get(address) {
            return Ok(channel.clone());
        }
        let tls = self.inner.tls.get();
        let uri = address::uri(address, tls.is_some());
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|error| Error::InvalidArgument(format!("node address {address}: {error}")))?
            .connect_timeout(self.inner.config.connect_timeout)
            // HTTP/2's default 64 KiB windows stall a 100 KB seat map for a round trip.
            .initial_stream_window_size(Some(HTTP2_STREAM_WINDOW_BYTES))
            .initial_connection_window_size(Some(HTTP2_CONNECTION_WINDOW_BYTES))
            .http2_keep_alive_interval(self.inner.config.keep_alive)
            .keep_alive_timeout(self.inner.config.keep_alive)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true)
            .local_address(self.inner.config.local_address);
        let endpoint = match tls {
            None => endpoint,
            Some(tls) => endpoint.tls_config(tls.clone()).map_err(|error| {
                Error::InvalidArgument(format!("TLS to node {address}: {error}"))
            })?,
        };
        let channel = match &self.inner.connector {
            None => endpoint.connect_lazy(),
            Some(connector) => {
                endpoint.connect_with_connector_lazy(connector::connect_with(Arc::clone(connector)))
            }
        };
        channels.insert(address.to_owned(), channel.clone());
        Ok(channel)
    }

    /// The caches, locked.
    pub(crate) fn routes(&self) -> MutexGuard<'_, Routes> {
        lock(&self.inner.routes)
    }

    /// Runs one logical `BookingService` call: `rpc` is given a client on the attempt's channel
    /// and the message wrapped with `metadata`, once per attempt.
    pub(crate) async fn booking_call<M, T, F, Fut>(
        &self,
        route: Route,
        kind: Kind,
        metadata: &CallMetadata,
        message: M,
        rpc: F,
    ) -> Result<(T, String)>
    where
        M: Clone,
        F: Fn(BookingServiceClient<Channel>, tonic::Request<M>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        self.call(route, kind, metadata, |channel| {
            rpc(BookingServiceClient::new(channel), metadata.request(message.clone()))
        })
        .await
    }
}

impl Kind {
    /// Whether calls of this kind change state (and so carry an idempotency key).
    fn is_mutation(self) -> bool {
        matches!(self, Kind::Mutation | Kind::LongMutation)
    }
}

/// Locks a mutex of the client's caches; a panic elsewhere cannot leave them half-changed
/// (every change is one insert or remove), so a poisoned lock is used as is.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
