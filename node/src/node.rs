//! A running `bookingd` node: its database, its transport, every group it hosts, and its two
//! servers: the client port (booking over gRPC and REST, and the admin API) and the peer port
//! (Raft between nodes, behind mutual TLS, and the admin API the bootstrap asks peers). Under
//! `--dev` and in the simulator, the client port serves Raft too, without TLS.
//!
//! Owns start-up (on an [`Environment`]: open its storage, pin the address book, start every
//! group, serve), the one-time bootstrap of the groups this node is the first replica of, and
//! shutdown. Every node hosts every group of the cluster: a replica that is not a member waits
//! idle until an operator adds it, so membership changes never need a restart.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use proto::booking::StatusRequest;
use proto::booking::admin_service_client::AdminServiceClient;
use raft::{
    DialerRef, GroupId, GroupNetwork, Groups, GrpcTransport, NetworkConfig, NodeId, RaftService,
};
use secrecy::ExposeSecret;
use statemachine::METADATA_GROUP;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::api::{AdminApi, BookingApi};
use crate::auditor::{self, Audits};
use crate::config::{Config, ConfigError, initial_voters};
use crate::disk::DiskGuard;
use crate::dispatch::DispatchSettings;
use crate::environment::{Environment, Incoming};
use crate::group::HostedGroup;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::provider::Provider;
use crate::search::SearchIndex;
use crate::serve::ServeSettings;
use crate::service::Service;
use crate::sessions::Sessions;
use crate::sink::Sink;
use crate::workers::WorkerSettings;

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The database could not be opened.
    #[error("database: {0}")]
    Storage(#[from] raft::StoreError),
    /// A group could not start.
    #[error("group {group}: {message}")]
    Group {
        /// The group.
        group: GroupId,
        /// Why.
        message: String,
    },
    /// The peer port's TLS could not be set up.
    #[error("peer TLS: {0}")]
    Tls(String),
    /// The archive directory could not be made.
    #[error("the archive directory ({ARCHIVE_DIR} in the data directory): {source}")]
    Archive {
        /// Why.
        source: std::io::Error,
    },
    /// The snapshot spool directory could not be made or emptied.
    #[error("the snapshot spool ({SNAPSHOT_SPOOL_DIR} in the data directory): {source}")]
    Spool {
        /// Why.
        source: std::io::Error,
    },
    /// The listen address could not be bound.
    #[error("listen on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Where, in its data directory, a node writes the archives of archived shows.
pub const ARCHIVE_DIR: &str = "archive";

/// Where, in its data directory, a node writes snapshots arriving on its peer port while they
/// arrive (`raft::RaftService::with_snapshot_spool`).
pub const SNAPSHOT_SPOOL_DIR: &str = "snapshot-spool";

/// What the API handlers share: this node's identity, its groups, its callers' credentials,
/// limits and metrics.
pub struct Shared {
    /// The node's settings.
    pub config: Config,
    /// Every group of the cluster, hosted here.
    pub groups: BTreeMap<GroupId, Arc<HostedGroup>>,
    /// Session tokens and the operator credential.
    pub sessions: Sessions,
    /// The token buckets every booking call pays, over REST and gRPC alike.
    pub limits: Limits,
    /// What the node counts (`GET /metrics`).
    pub metrics: Metrics,
    /// The node's wall clock, the environment's: the one its proposers stamp entries with. The
    /// API reads it where it needs the time of day (a webhook signature's age), so that a
    /// simulated node reads simulated time and a skewed node its skewed time, never the
    /// machine's clock behind the environment's back.
    pub clock: raft::Clock,
    /// What the auditor found, per group (exported by the metrics).
    pub audits: Audits,
    /// The search index over this node's replica of the catalog.
    pub search: SearchIndex,
    /// Where this node's replicas write the archives of archived shows (none in a simulator).
    pub archives: Option<raft::ArchiveDir>,
    /// The node's storage (its free space and its failure are exported and watched).
    pub storage: raft::Storage,
    /// Refuses client writes while the disk is nearly full.
    pub disk: Arc<DiskGuard>,
}

impl Shared {
    /// The hosted group `group`.
    ///
    /// # Errors
    ///
    /// `NotFound` if the cluster has no such group.
    pub fn group(&self, group: GroupId) -> Result<&Arc<HostedGroup>, crate::error::ApiError> {
        self.groups
            .get(&group)
            .ok_or_else(|| crate::error::ApiError::NotFound(format!("no group {group}")))
    }
}

/// A running node.
pub struct Node {
    shared: Arc<Shared>,
    address: SocketAddr,
    /// Stop the client port's server, and the peer port's.
    stops: Option<(oneshot::Sender<()>, oneshot::Sender<()>)>,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    /// The peer port's server, when the node has one.
    peer_server: Option<(SocketAddr, JoinHandle<Result<(), tonic::transport::Error>>)>,
    bootstrap: Option<JoinHandle<()>>,
    auditor: Option<JoinHandle<()>>,
}

impl Node {
    /// Opens the database, starts every group and serves on `config.listen`; with
    /// `config.bootstrap`, founds (in the background, once every initial peer answers) the
    /// groups this node is the first replica of and that were never initialized.
    ///
    /// # Errors
    ///
    /// [`StartError`] if the database, a group or the listener cannot start.
    pub async fn start(config: Config) -> Result<Node, StartError> {
        let environment = Environment::system(&config)?;
        Node::start_with(config, environment).await
    }

    /// As [`Node::start`], on `environment`: its storage, peer network, clock and entropy, and
    /// its connections to serve instead of a TCP listener when it has them (then
    /// [`Node::address`] is `config.listen`).
    ///
    /// # Errors
    ///
    /// [`StartError`] if the storage, a group or the listener cannot start.
    pub async fn start_with(config: Config, environment: Environment) -> Result<Node, StartError> {
        let raft_config = config.raft()?;
        let Environment { storage, mut network, clock, entropy, incoming } = environment;
        if let Some(peer) = &config.peer {
            network.tls = Some(peer.tls.clone());
        }
        let transport = GrpcTransport::new(config.id, network.clone());
        for (&peer, address) in &config.peers {
            transport.pin_address(peer, address);
        }
        let registry = Groups::new();
        let mut groups = BTreeMap::new();
        let tick = Duration::from_millis(config.tick_ms);
        let provider = match &config.provider_url {
            Some(url) => {
                Some(Provider::new(url, network.dialer.clone()).map_err(ConfigError::Invalid)?)
            }
            None => None,
        };
        let metrics = Metrics::new();
        let dispatch = Some(Arc::new(dispatch_settings(&config, network.dialer.as_ref())?));
        let disk = Arc::new(DiskGuard::new(storage.clone(), config.disk_reserve_bytes));
        for group in config.group_ids() {
            let state_machine = storage.state_machine(group)?;
            let reader = state_machine.reader();
            reader.keep_checkpoints(config.audit_checkpoint_entries)?;
            let group_network = GroupNetwork::new(transport.clone(), group);
            let raft = raft::Raft::new(
                config.id,
                raft_config.clone(),
                group_network,
                storage.log_store(group),
                state_machine,
            )
            .await
            .map_err(|error| StartError::Group { group, message: error.to_string() })?;
            registry.insert(group, raft.clone());
            // Payments live in the data groups only.
            let provider = provider.clone().filter(|_| group != METADATA_GROUP);
            let dispatch = dispatch.clone().filter(|_| group != METADATA_GROUP);
            let workers = WorkerSettings {
                tick,
                provider,
                dispatch,
                metrics: metrics.clone(),
                entropy: entropy.clone(),
                archive_after: (config.archive_after_s > 0)
                    .then(|| Duration::from_secs(config.archive_after_s)),
                retention: (config.retention_s > 0)
                    .then(|| Duration::from_secs(config.retention_s)),
            };
            let hosted = HostedGroup::new(
                group,
                raft,
                reader,
                workers,
                clock.clone(),
                transport.clone(),
                Arc::clone(&disk),
            );
            groups.insert(group, Arc::new(hosted));
        }
        if !config.bootstrap {
            warn_if_pristine(config.id, &groups).await;
        }
        let (incoming, address, simulated) = match incoming {
            Some(incoming) => (incoming, config.listen, true),
            None => {
                let listener = TcpListener::bind(config.listen)
                    .await
                    .map_err(|source| StartError::Listen { address: config.listen, source })?;
                let address = listener
                    .local_addr()
                    .map_err(|source| StartError::Listen { address: config.listen, source })?;
                (crate::serve::tcp_incoming(listener), address, false)
            }
        };
        if config.secrets.development {
            tracing::warn!(
                "--dev: public development secrets stand in for the ones not given; anyone who \
                 knows them can forge sessions and webhooks and call operator APIs (this node \
                 listens on loopback only)"
            );
        }
        let planted = statemachine::inject::active();
        if !planted.is_empty() {
            let names: Vec<&str> = planted.iter().map(|bug| bug.name()).collect();
            tracing::warn!(
                bugs = names.join(","),
                "UNSAFE: deliberately planted bugs are on, for proving the test suites catch \
                 them; never for real sales"
            );
        }
        let sessions = Sessions::with_entropy(
            config.secrets.session.expose_secret(),
            config.secrets.operator.expose_secret(),
            entropy,
        )
        .with_previous(
            config.secrets.session_previous.as_ref().map(|secret| secret.expose_secret()),
        )
        .with_expiry(config.session_ttl_s, clock.clone());
        let limits = Limits::from_config(&config);
        let audits = Audits::default();
        let search = SearchIndex::new();
        let archives = storage.archives().cloned();
        let shared = Arc::new(Shared {
            config,
            groups,
            sessions,
            limits,
            metrics,
            clock,
            audits,
            search,
            archives,
            storage,
            disk,
        });
        // The index is derived from the replica as it was recovered, before serving.
        if let Err(error) = Service::new(shared.clone()).sync_search() {
            tracing::warn!(%error, "the search index could not be built at start; retried on search");
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let (peer_stop, peer_stopped) = oneshot::channel::<()>();
        let mut grpc = tonic::service::Routes::new(
            BookingApi::new(Service::new(shared.clone())).into_server(),
        )
        .add_service(AdminApi::new(shared.clone()).into_server());
        let peer_server = match &shared.config.peer {
            Some(peer) => Some(serve_peers(peer, &registry, &shared, peer_stopped).await?),
            // `--dev` and the simulator: Raft on the client port, without TLS.
            None => {
                let limit = shared.config.snapshot_max_bytes;
                grpc = grpc.add_service(
                    RaftService::new(registry).with_snapshot_limit(limit).into_server(),
                );
                None
            }
        };
        let grpc = grpc.into_axum_router();
        let rest = crate::rest::router(Service::new(shared.clone()), network.dialer.clone());
        let router = one_port(rest, grpc, shared.limits.clone(), shared.metrics.clone());
        let settings =
            ServeSettings { date_header: !simulated, ..ServeSettings::of(&shared.config) };
        let router = crate::serve::gated(router, &settings, shared.metrics.clone());
        let server =
            crate::serve::serve(incoming, router, stopped, settings, shared.metrics.clone());
        let bootstrap =
            shared.config.bootstrap.then(|| tokio::spawn(bootstrap(shared.clone(), network)));
        let auditor = (shared.config.audit_checkpoint_entries > 0).then(|| {
            let groups = shared.groups.values().cloned().collect();
            let interval = Duration::from_millis(shared.config.audit_interval_ms);
            tokio::spawn(auditor::run(groups, shared.audits.clone(), interval))
        });
        let stops = Some((stop, peer_stop));
        Ok(Node { shared, address, stops, server, peer_server, bootstrap, auditor })
    }

    /// Where the node serves clients.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Where the node serves its peers, when it has a peer port.
    pub fn peer_address(&self) -> Option<SocketAddr> {
        self.peer_server.as_ref().map(|(address, _)| *address)
    }

    /// What the API handlers share.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Waits until the node's storage fails (a write or a sync did), and says why. From then on
    /// every write and sync is refused and the groups go fatal: the node must stop, not carry on
    /// (fail-stop; `bookingd` exits, see `daemon.rs`). Never returns while the storage works.
    pub async fn storage_failure(&self) -> String {
        self.shared.storage.failure().await
    }

    /// Stops serving and shuts every group down.
    pub async fn shutdown(mut self) {
        for task in [self.bootstrap.take(), self.auditor.take()].into_iter().flatten() {
            task.abort();
        }
        if let Some((stop, peer_stop)) = self.stops.take() {
            let _ = stop.send(());
            let _ = peer_stop.send(());
        }
        for group in self.shared.groups.values() {
            group.shutdown().await;
        }
        let servers = std::iter::once(&mut self.server)
            .chain(self.peer_server.as_mut().map(|(_, server)| server));
        for server in servers {
            match tokio::time::timeout(Duration::from_secs(5), &mut *server).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => tracing::warn!(%error, "server stopped with an error"),
                Ok(Err(error)) => tracing::warn!(%error, "server task failed"),
                Err(_elapsed) => server.abort(),
            }
        }
    }
}

/// Serves the peer port: Raft between nodes and the admin API (which the bootstrap asks peers
/// for their addresses), behind mutual TLS: a caller needs a certificate of the cluster's CA,
/// and Raft messages must speak for the node it names. Until `stopped` fires.
async fn serve_peers(
    peer: &crate::config::PeerPort,
    registry: &Groups,
    shared: &Arc<Shared>,
    stopped: oneshot::Receiver<()>,
) -> Result<(SocketAddr, JoinHandle<Result<(), tonic::transport::Error>>), StartError> {
    let listener = TcpListener::bind(peer.listen)
        .await
        .map_err(|source| StartError::Listen { address: peer.listen, source })?;
    let address = listener
        .local_addr()
        .map_err(|source| StartError::Listen { address: peer.listen, source })?;
    let server = tonic::transport::Server::builder()
        .tls_config(peer.tls.server().timeout(PEER_HANDSHAKE_TIMEOUT))
        .map_err(|error| StartError::Tls(error.to_string()))?
        .initial_stream_window_size(raft::HTTP2_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(raft::HTTP2_CONNECTION_WINDOW_BYTES)
        .add_service(
            RaftService::new(registry.clone())
                .with_peer_certificates()
                .with_snapshot_limit(shared.config.snapshot_max_bytes)
                .with_snapshot_spool(shared.config.data.join(SNAPSHOT_SPOOL_DIR))
                .map_err(|source| StartError::Spool { source })?
                .into_server(),
        )
        .add_service(AdminApi::new(shared.clone()).into_server());
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let server = tokio::spawn(server.serve_with_incoming_shutdown(incoming, async {
        let _ = stopped.await;
    }));
    tracing::info!(%address, "serving peers (mutual TLS)");
    Ok((address, server))
}

/// How long a connection to the peer port may take to finish its TLS handshake.
const PEER_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `router` on the environment's connections (the simulated payment provider's, under
/// the simulator) until `stopped` fires or its sender is dropped, with the default limits and
/// no `Date` header (see [`ServeSettings::date_header`]).
pub fn serve_incoming(
    incoming: Incoming,
    router: axum::Router,
    stopped: oneshot::Receiver<()>,
) -> JoinHandle<Result<(), tonic::transport::Error>> {
    let settings = ServeSettings { date_header: false, ..ServeSettings::default() };
    crate::serve::serve(incoming, router, stopped, settings, Metrics::new())
}

/// One router for the node's one port: gRPC requests (content type `application/grpc`) go to
/// the gRPC services, the rest to the REST routes (with a JSON 404 for unknown paths). Calls
/// of the gRPC `BookingService` pay the same token buckets as REST calls (per session, per
/// client address), and are refused with RESOURCE_EXHAUSTED and `retry-after` metadata;
/// `AdminService` calls without the operator credential pay the address bucket (those with it
/// are free), and peer Raft traffic is not limited.
fn one_port(
    rest: axum::Router,
    grpc: axum::Router,
    limits: Limits,
    metrics: crate::metrics::Metrics,
) -> axum::Router {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use tower::ServiceExt;
    rest.fallback(move |request: axum::extract::Request| {
        let grpc = grpc.clone();
        let metrics = metrics.clone();
        async move {
            let is_grpc = crate::serve::is_grpc(&request);
            let path = request.uri().path();
            let checked = if !is_grpc {
                Ok(())
            } else if path == "/booking.v1.BookingService/CreateSession" {
                limits
                    .check(request.headers(), request.extensions(), false)
                    .and_then(|()| limits.check_new_session(request.extensions()))
            } else if path.starts_with("/booking.v1.BookingService/") {
                limits.check(request.headers(), request.extensions(), false).and_then(|()| {
                    match crate::limits::RouteClass::of_grpc(path) {
                        Some(class) => limits.check_route(
                            class,
                            request.headers(),
                            request.extensions(),
                            false,
                        ),
                        None => Ok(()),
                    }
                })
            } else if path.starts_with("/booking.v1.AdminService/") {
                limits.check_admin(request.headers(), request.extensions())
            } else {
                Ok(())
            };
            if let Err(error) = checked {
                return crate::serve::refusal(true, error);
            }
            if is_grpc {
                let path = request.uri().path().to_owned();
                let started = std::time::Instant::now();
                let mut response = grpc.oneshot(request).await.into_response();
                let timed = ["/booking.v1.BookingService/", "/booking.v1.AdminService/"];
                if timed.iter().any(|service| path.starts_with(service)) {
                    malformed_is_invalid_argument(&mut response);
                    // An error's status is in the headers (a trailers-only answer); an OK
                    // unary answer's is in the trailers, after these headers.
                    let code = response
                        .headers()
                        .get("grpc-status")
                        .and_then(|value| value.to_str().ok())
                        .unwrap_or("0");
                    // UNIMPLEMENTED: a method nobody defined, which must not become a label.
                    let method = if code == "12" { "unimplemented" } else { path.as_str() };
                    metrics.record_grpc(method, code, started.elapsed().as_secs_f64());
                }
                response
            } else {
                let path = request.uri().path().to_owned();
                let error = crate::error::ApiError::NotFound(format!("no route {path}"));
                (StatusCode::NOT_FOUND, error).into_response()
            }
        }
    })
}

/// Rewrites tonic's refusal of a request it could not decode (a protobuf it cannot parse, a
/// truncated frame, a compression flag nobody negotiated: INTERNAL, before any handler runs,
/// so without the `booking-code` every answer of ours carries) as what it is, the caller's
/// mistake: INVALID_ARGUMENT `invalid_argument`, with tonic's message.
fn malformed_is_invalid_argument(response: &mut axum::response::Response) {
    let headers = response.headers_mut();
    let internal = headers.get("grpc-status").is_some_and(|code| code == "13");
    if internal && !headers.contains_key(proto::booking::metadata::CODE) {
        headers.insert("grpc-status", axum::http::HeaderValue::from_static("3"));
        headers.insert(
            proto::booking::metadata::CODE,
            axum::http::HeaderValue::from_static(crate::error::ErrorCode::InvalidArgument.name()),
        );
    }
}

/// Warns when a node that is not bootstrapping starts with an empty database: either it is new
/// (and waits to be added), or it lost its data, and then it also forgot its votes, so it must
/// be readmitted (removed, added back as learner, promoted) rather than simply rejoin.
async fn warn_if_pristine(id: NodeId, groups: &BTreeMap<GroupId, Arc<HostedGroup>>) {
    for hosted in groups.values() {
        if !matches!(hosted.raft.is_initialized().await, Ok(false)) {
            return;
        }
    }
    tracing::warn!(
        node = id,
        "empty database and no --bootstrap: waiting to be added. If this node was a member \
         before and lost its data, readmit it: `bookctl member readmit --node-id {id} \
         --address <its address>` (removes it from each group, adds it back as a learner that \
         catches up, then promotes it)"
    );
}

/// Founds every group this node is the first initial replica of and that has never been
/// initialized, with the initial voters at the addresses they advertise (asked of each peer, so
/// that memberships, and the leader hints clients get from them, carry advertised addresses
/// rather than this node's routes). Waits for every initial peer to answer first.
async fn bootstrap(shared: Arc<Shared>, network: NetworkConfig) {
    let config = &shared.config;
    let members = config.initial_members();
    let mut to_found = Vec::new();
    for (&group, hosted) in &shared.groups {
        let voters = initial_voters(group, &members, config.replicas);
        if voters.first() != Some(&config.id) {
            continue;
        }
        match hosted.raft.is_initialized().await {
            Ok(false) => to_found.push((group, voters)),
            Ok(true) => {}
            Err(error) => {
                tracing::error!(group, %error, "cannot tell whether the group was founded");
                return;
            }
        }
    }
    if to_found.is_empty() {
        tracing::info!("bootstrap: every group this node would found already exists");
        return;
    }
    let mut addresses = BTreeMap::new();
    addresses.insert(config.id, config.membership_address());
    for (&peer, route) in &config.peers {
        let token = config.secrets.operator.expose_secret();
        addresses.insert(peer, advertised_address(peer, route, &network, token).await);
    }
    for (group, voters) in to_found {
        let nodes: BTreeMap<NodeId, BasicNode> = voters
            .iter()
            .filter_map(|voter| Some((*voter, BasicNode::new(addresses.get(voter)?.clone()))))
            .collect();
        match shared.groups[&group].raft.initialize(nodes).await {
            Ok(()) => tracing::info!(group, ?voters, "bootstrap: founded the group"),
            Err(error) => tracing::warn!(group, %error, "bootstrap: not founded"),
        }
    }
}

/// Asks `peer` (at `route`: its peer port, over mutual TLS when `network` has TLS; through
/// `network`'s dialer when it has one) for the address its memberships should carry, until it
/// answers; the call presents the operator credential `token`, which every `AdminService` call
/// needs.
async fn advertised_address(
    peer: NodeId,
    route: &str,
    network: &NetworkConfig,
    token: &str,
) -> String {
    let mut delay = Duration::from_millis(50);
    loop {
        let answer = async {
            let endpoint =
                network.peer_endpoint(peer, route)?.connect_timeout(network.connect_timeout);
            let mut client = AdminServiceClient::new(network.connect_lazy(&endpoint));
            let mut request = tonic::Request::new(StatusRequest { with_digest: false });
            request.metadata_mut().insert("authorization", format!("Bearer {token}").parse()?);
            let reply = client.status(request).await?.into_inner();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(reply)
        };
        match tokio::time::timeout(Duration::from_secs(2), answer).await {
            Ok(Ok(reply)) if reply.node_id == peer => return reply.address,
            Ok(Ok(reply)) => {
                tracing::error!(peer, route, answered = reply.node_id, "the address book is wrong")
            }
            Ok(Err(error)) => tracing::info!(peer, route, %error, "bootstrap: waiting for peer"),
            Err(_elapsed) => tracing::info!(peer, route, "bootstrap: waiting for peer"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// The outbox dispatcher's settings from the node's: its sinks, signing with the sink secret.
fn dispatch_settings(
    config: &Config,
    dialer: Option<&DialerRef>,
) -> Result<DispatchSettings, StartError> {
    let secret = config.secrets.sink_or_unused();
    let mut sinks = Vec::new();
    for (name, url) in &config.sinks {
        let sink = Sink::new(name.clone(), url, secret, dialer.cloned());
        sinks.push(sink.map_err(ConfigError::Invalid)?);
    }
    Ok(DispatchSettings {
        sinks,
        attempts_max: config.sink_attempts,
        age_max: Duration::from_secs(config.sink_age_max_s),
        concurrency: config.sink_concurrency,
        rate_per_s: config.sink_rate,
    })
}
