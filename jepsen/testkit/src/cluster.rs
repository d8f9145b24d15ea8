//! A cluster of real `bookingd` processes on loopback: how it is laid out and started
//! ([`ClusterOptions`], [`Addressing`]), the [`Cluster`] handle that the other modules extend
//! (one concern a file: [`crate::process`], [`crate::faults`], [`crate::skew`],
//! [`crate::membership`], [`crate::observe`]), and the SDK clients it hands out.
//!
//! Each node has its own address, its own directory (`node-<id>/` with `data/`, `stdout.log`,
//! `stderr.log` and the skew file), and reaches its peers through a [`Links`] mesh of fault
//! proxies (node `i`'s `--peers j=` is the proxy of the link `i → j`; or directly, without
//! faults, when [`ClusterOptions::direct_peers`] is set). Never builds anything (the binary must
//! exist), never talks to a node except through the `client` SDK, and never judges the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use client::{Client, Config};
use tokio::sync::MutexGuard;

use crate::error::ClusterError;
use crate::links::Links;
use crate::process::Node;
use crate::proxy::LinkProxy;
use crate::{GroupId, NodeId};

/// How long a membership or leadership call may take, retries included (a learner's catch-up
/// is part of it).
const ADMIN_BUDGET: Duration = Duration::from_secs(20);

/// The nodes' log filter (`RUST_LOG`) unless told otherwise.
const LOG_FILTER: &str = "info,openraft=warn";

/// Held by an [`ClusterOptions::exclusive`] cluster while it lives: such clusters of one
/// process run one at a time (the machine has two cores, and elections with timeouts of a
/// second do not survive four clusters competing for them).
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where the nodes and the link proxies listen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// Node `i` serves on port `port_base` of `127.0.0.(ip_base + i)`; the proxy of link
    /// `i → j` listens on port `port_base + j` of `i`'s address and dials from it, so that a
    /// peer sees the connection come from `i`. Known in advance: for a suite's runs and their
    /// reports, which name the addresses.
    Fixed {
        /// Node `i` listens on `127.0.0.(ip_base + i)`.
        ip_base: u8,
        /// The node's port, and the base of its proxies' ports.
        port_base: u16,
    },
    /// Every node and proxy on a free port of 127.0.0.1 that the system picks: for tests that
    /// run beside other tests on the same loopback. A node's port stays bound by the kit until
    /// the node is spawned, so that no proxy takes it.
    Ephemeral,
}

impl Addressing {
    /// The Jepsen suite's layout: node `i` on `127.0.0.(10 + i)`, ports from `port_base` (two
    /// runs at once need port bases apart by more than the node count).
    pub fn suite(port_base: u16) -> Addressing {
        Addressing::Fixed { ip_base: 10, port_base }
    }
}

/// How the nodes are started.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Nodes, ids `1..=nodes` (3 or 5 in the suite).
    pub nodes: u64,
    /// Data groups (`--groups`).
    pub groups: u64,
    /// Voters of each data group (`--replicas`).
    pub replicas: u64,
    /// The directory of the run: one subdirectory per node. Created if missing; a node's data
    /// directory must not exist yet (a cluster is founded once). `None`: a fresh temporary
    /// directory, deleted by [`Cluster::shutdown`] and kept, with every node's log tail
    /// printed, when the cluster is dropped without it (a failed test).
    pub dir: Option<PathBuf>,
    /// Where the binary lives; `None`: the directory of the current executable, or its parent
    /// when that is cargo's `deps/` (test binaries).
    pub bin_dir: Option<PathBuf>,
    /// The binary's file name: `bookingd`, or a test-only build such as `bookingd-unsafe`.
    pub binary: String,
    /// Where the nodes and proxies listen.
    pub addressing: Addressing,
    /// Raft heartbeat interval (`--heartbeat-ms`).
    pub heartbeat_ms: u64,
    /// Shortest election timeout (`--election-min-ms`).
    pub election_min_ms: u64,
    /// Longest election timeout (`--election-max-ms`).
    pub election_max_ms: u64,
    /// Entries between snapshots (`--snapshot-logs`); the daemon's default if `None`.
    pub snapshot_logs: Option<u64>,
    /// The tick worker's period (`--tick-ms`); the daemon's default if `None`.
    pub tick_ms: Option<u64>,
    /// The session secret, the same on every node (in a file, `--session-secret-file`);
    /// [`SESSION_SECRET_DEFAULT`] if `None`.
    pub session_secret: Option<String>,
    /// The operator credential (`--operator-token-file`); the clients of [`Cluster::client`]
    /// send it. [`OPERATOR_TOKEN_DEFAULT`] if `None`.
    pub operator_token: Option<String>,
    /// The webhook secret (`--webhook-secret-file`); [`WEBHOOK_SECRET_DEFAULT`] if `None`.
    pub webhook_secret: Option<String>,
    /// The sink secret (`--sink-secret-file`); [`SINK_SECRET_DEFAULT`] if `None`.
    pub sink_secret: Option<String>,
    /// `--rate-per-session`; the daemon's default if `None`.
    pub rate_per_session: Option<u32>,
    /// `--rate-per-address`; the daemon's default if `None`.
    pub rate_per_address: Option<u32>,
    /// `--rate-new-sessions-per-address`; the daemon's default if `None`.
    pub rate_new_sessions_per_address: Option<u32>,
    /// More arguments for every node, after the others.
    pub extra_args: Vec<String>,
    /// Start every node under libfaketime (when it is found) so that [`Cluster::skew`] works.
    pub clock_skew: bool,
    /// The libfaketime library; `None`: the first of [`crate::skew::LIBFAKETIME_PATHS`] that
    /// exists.
    pub faketime_library: Option<PathBuf>,
    /// The nodes' `RUST_LOG`.
    pub log_filter: String,
    /// The longest wait for a node to serve, a leader to be agreed on, or a convergence.
    pub wait: Duration,
    /// How often the cluster's own waits check their condition.
    pub poll: Duration,
    /// How long one status call may take: a paused node never answers, and a poll must go on.
    pub status_timeout: Duration,
    /// The retry policy of the clients [`Cluster::client`] and [`Cluster::new_client`] make.
    pub client_config: Config,
    /// Dial peers directly (`--peers j=<j's listen address>`) instead of through the link
    /// proxies. The proxies still start, but carry nothing, so link faults have no effect: for
    /// the benchmark, which must not pay for a user-space relay of every Raft message on a
    /// small machine. Off by default (link faults need the proxies).
    pub direct_peers: bool,
    /// Serve the client port over TLS (`--client-tls`, with each node's certificate): the
    /// cluster's clients then speak https and trust its CA ([`Cluster::ca_certificate`]). On
    /// by default, as in production.
    pub client_tls: bool,
    /// Whether the cluster waits for every other exclusive cluster of this process to be gone
    /// before it starts, and keeps them waiting while it lives.
    pub exclusive: bool,
    /// Whether the nodes found the cluster (`--bootstrap`) and the start waits for every
    /// group's leader. Off, the nodes start fresh and wait to be given their groups (by a
    /// restore from a backup, `Client::restore`).
    pub bootstrap: bool,
    /// Whether a founded cluster's groups are raised to this build's feature level once they
    /// have leaders (`Client::raise_feature_level`), as `scripts/cluster.sh up` does. Off, they
    /// stay at level 0, the previous release's formats (a rolling upgrade's start).
    pub raise_feature_level: bool,
    /// Put a door (a [`crate::proxy::LinkProxy`]) in front of each node's client port and have
    /// the node advertise the door (`--advertise`), so that every client, and every leader hint
    /// it follows, goes through it: [`Cluster::cut_client`] can then cut one client (known by
    /// the address it dials from, `client::Config::local_address`) off from one node while the
    /// node stays in the cluster. The door dials the node from the client's own address, so the
    /// node's per-address limits still see each client. Off by default (tests that do not cut
    /// clients need no relay).
    pub client_doors: bool,
    /// More environment variables for one node's process, by node (a fault library to preload,
    /// say: an `LD_PRELOAD` here takes the place of libfaketime's, so the two do not mix).
    pub node_env: BTreeMap<NodeId, Vec<(String, String)>>,
}

/// How far above its client port a node's peer port is under [`Addressing::Fixed`] (above the
/// link proxies' ports, `port_base + j`).
pub const PEER_PORT_OFFSET: u16 = 50;

/// The session secret of a cluster whose options give none (at least 32 bytes, as the nodes
/// require; public, for tests only).
pub const SESSION_SECRET_DEFAULT: &str = "testkit-session-secret-0123456789abcdef";
/// The operator credential of a cluster whose options give none.
pub const OPERATOR_TOKEN_DEFAULT: &str = "testkit-operator-token-0123456789abcdef";
/// The webhook secret of a cluster whose options give none.
pub const WEBHOOK_SECRET_DEFAULT: &str = "testkit-webhook-secret-0123456789abcdef";
/// The sink secret of a cluster whose options give none.
pub const SINK_SECRET_DEFAULT: &str = "testkit-sink-secret-0123456789abcdef";

impl ClusterOptions {
    /// The operator credential the nodes get and the cluster's clients send.
    pub fn operator(&self) -> &str {
        self.operator_token.as_deref().unwrap_or(OPERATOR_TOKEN_DEFAULT)
    }

    /// The webhook secret the nodes get.
    pub fn webhook(&self) -> &str {
        self.webhook_secret.as_deref().unwrap_or(WEBHOOK_SECRET_DEFAULT)
    }

    /// Each secret's flag, the name of the file it is written to, and its value.
    pub(crate) fn secret_files(&self) -> [(&'static str, &'static str, &str); 4] {
        [
            (
                "--session-secret-file",
                "session",
                self.session_secret.as_deref().unwrap_or(SESSION_SECRET_DEFAULT),
            ),
            ("--operator-token-file", "operator", self.operator()),
            ("--webhook-secret-file", "webhook", self.webhook()),
            (
                "--sink-secret-file",
                "sink",
                self.sink_secret.as_deref().unwrap_or(SINK_SECRET_DEFAULT),
            ),
        ]
    }

    /// A suite's run of `nodes` nodes in `dir`: two data groups of three replicas, the
    /// daemon's Raft timing (50 ms heartbeats, elections after 200-400 ms), fixed test
    /// secrets, rate limits out of the way (the suite measures the cluster, and every client
    /// shares one address), clock skew on when libfaketime is found, nodes on 127.0.0.11 and
    /// up with ports from 7300, polls every 100 ms and status calls of at most a second (five
    /// nodes under faults are asked often), and no turn to wait for (a run has one cluster).
    pub fn new(nodes: u64, dir: impl Into<PathBuf>) -> ClusterOptions {
        ClusterOptions {
            dir: Some(dir.into()),
            addressing: Addressing::suite(7300),
            session_secret: Some("jepsen-session-secret-0123456789abcdef".to_owned()),
            operator_token: Some("jepsen-operator-token-0123456789abcdef".to_owned()),
            webhook_secret: Some("jepsen-webhook-secret-0123456789abcdef".to_owned()),
            rate_per_session: Some(1_000_000),
            rate_per_address: Some(1_000_000),
            rate_new_sessions_per_address: Some(1_000_000),
            clock_skew: true,
            poll: Duration::from_millis(100),
            status_timeout: Duration::from_secs(1),
            exclusive: false,
            log_filter: LOG_FILTER.to_owned(),
            ..ClusterOptions::ephemeral(nodes)
        }
    }

    /// A test's cluster of `nodes` nodes beside other tests: free ports of 127.0.0.1, a
    /// temporary directory, two data groups of three replicas, the daemon's Raft timing (50 ms
    /// heartbeats, elections after 200-400 ms: see `node::config::ELECTION_MIN_MS_DEFAULT`), its
    /// own secrets and limits, the test's `RUST_LOG` for the nodes, no clock
    /// skew, polls every [`crate::wait::POLL`], status calls of at most two seconds, and one
    /// such cluster of the process at a time.
    pub fn ephemeral(nodes: u64) -> ClusterOptions {
        ClusterOptions {
            nodes,
            groups: 2,
            replicas: 3,
            dir: None,
            bin_dir: None,
            binary: "bookingd".to_owned(),
            addressing: Addressing::Ephemeral,
            heartbeat_ms: 50,
            election_min_ms: 200,
            election_max_ms: 400,
            snapshot_logs: None,
            tick_ms: None,
            session_secret: None,
            operator_token: None,
            webhook_secret: None,
            sink_secret: None,
            rate_per_session: None,
            rate_per_address: None,
            rate_new_sessions_per_address: None,
            extra_args: Vec::new(),
            clock_skew: false,
            faketime_library: None,
            // The daemon's own events, and only openraft's warnings (its info lines, one per
            // snapshot or membership step, would fill the tail a failed test prints), unless
            // the test's own `RUST_LOG` says otherwise.
            log_filter: std::env::var("RUST_LOG").unwrap_or_else(|_| LOG_FILTER.to_owned()),
            wait: Duration::from_secs(30),
            poll: crate::wait::POLL,
            status_timeout: Duration::from_secs(2),
            client_config: Config::default(),
            direct_peers: false,
            client_tls: true,
            exclusive: true,
            bootstrap: true,
            raise_feature_level: true,
            client_doors: false,
            node_env: BTreeMap::new(),
        }
    }

    /// The binary to run: see [`ClusterOptions::bin_dir`].
    ///
    /// # Errors
    ///
    /// [`ClusterError::Invalid`] when it is not found.
    pub fn binary_path(&self) -> Result<PathBuf, ClusterError> {
        let candidates = match &self.bin_dir {
            Some(dir) => vec![dir.join(&self.binary)],
            None => {
                let exe = std::env::current_exe().map_err(ClusterError::io("current exe"))?;
                let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
                // Test binaries live in target/<profile>/deps, one below the binaries.
                let mut candidates = vec![dir.join(&self.binary)];
                if dir.file_name().is_some_and(|name| name == "deps")
                    && let Some(parent) = dir.parent()
                {
                    candidates.push(parent.join(&self.binary));
                }
                candidates
            }
        };
        candidates.iter().find(|path| path.is_file()).cloned().ok_or_else(|| {
            ClusterError::Invalid(format!(
                "{} not found (looked at {candidates:?}); build it first: cargo build --release \
                 --workspace --bins",
                self.binary
            ))
        })
    }

    /// Where node `id` serves its peer port (its client port being `listen`), and the port it
    /// holds until it is spawned (ephemeral addressing only): under [`Addressing::Fixed`],
    /// [`PEER_PORT_OFFSET`] above the client port.
    pub(crate) fn peer_listen(
        &self,
        id: NodeId,
        listen: SocketAddr,
    ) -> Result<(SocketAddr, Option<TcpListener>), ClusterError> {
        match self.addressing {
            Addressing::Fixed { .. } => {
                let port = listen.port().checked_add(PEER_PORT_OFFSET).ok_or_else(|| {
                    ClusterError::Invalid(format!("no peer port for node {id} above {listen}"))
                })?;
                Ok((SocketAddr::new(listen.ip(), port), None))
            }
            Addressing::Ephemeral => self.listen(id),
        }
    }

    /// Where node `id` serves, and the port it holds until it is spawned (ephemeral
    /// addressing only).
    pub(crate) fn listen(
        &self,
        id: NodeId,
    ) -> Result<(SocketAddr, Option<TcpListener>), ClusterError> {
        match self.addressing {
            Addressing::Fixed { ip_base, port_base } => {
                let ip = IpAddr::V4(fixed_ip(ip_base, id)?);
                Ok((SocketAddr::new(ip, port_base), None))
            }
            Addressing::Ephemeral => {
                let listener = free_listener()?;
                let address = listener.local_addr().map_err(ClusterError::io("local address"))?;
                Ok((address, Some(listener)))
            }
        }
    }

    /// Where node `id`'s client door listens, the node serving on `listen`: under
    /// [`Addressing::Fixed`] on the port of the link `id → id`, which no proxy uses.
    pub(crate) fn door_listen(
        &self,
        id: NodeId,
        listen: SocketAddr,
    ) -> Result<SocketAddr, ClusterError> {
        self.proxy_listen(listen, id)
    }

    /// Where the proxy of link `from → to` listens, `from` serving on `from_address`.
    pub(crate) fn proxy_listen(
        &self,
        from_address: SocketAddr,
        to: NodeId,
    ) -> Result<SocketAddr, ClusterError> {
        match self.addressing {
            Addressing::Fixed { port_base, .. } => {
                let port = u16::try_from(u64::from(port_base) + to)
                    .map_err(|_| ClusterError::Invalid(format!("port {port_base} + {to}")))?;
                Ok(SocketAddr::new(from_address.ip(), port))
            }
            Addressing::Ephemeral => Ok(SocketAddr::new(from_address.ip(), 0)),
        }
    }
}

/// The ports [`free_listener`] picks from: below Linux's default range for the source ports
/// of outgoing connections (`/proc/sys/net/ipv4/ip_local_port_range`, 32768-60999), and above
/// the fixed ports of the suites and benchmarks.
const FREE_PORTS: std::ops::Range<u16> = 20_000..32_768;

/// A listener on a free loopback port, held until the node is spawned. The port is released
/// just before the node binds it, and a port of the kernel's ephemeral range can be taken in
/// between as the source port of any outgoing connection (the nodes already started, and
/// their proxies, dial while the next one starts): a process test failed with "Address
/// already in use" that way. A port of [`FREE_PORTS`] is never handed out to a connection, so
/// only another bind can take it. Falls back to any free port.
fn free_listener() -> Result<TcpListener, ClusterError> {
    use rand::Rng as _;
    let mut rng = rand::thread_rng();
    for _ in 0..64 {
        let port = rng.gen_range(FREE_PORTS);
        if let Ok(listener) = TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            return Ok(listener);
        }
    }
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(ClusterError::io("bind a free loopback port"))
}

/// Node `id`'s address under [`Addressing::Fixed`].
fn fixed_ip(ip_base: u8, id: NodeId) -> Result<Ipv4Addr, ClusterError> {
    let last = u64::from(ip_base) + id;
    let last = u8::try_from(last)
        .ok()
        .filter(|last| *last < 255)
        .ok_or_else(|| ClusterError::Invalid(format!("no loopback address for node {id}")))?;
    Ok(Ipv4Addr::new(127, 0, 0, last))
}

/// A cluster of `bookingd` processes. See the module docs. Every method but the few that add
/// a node or end the cluster takes `&self`, so that a nemesis and a runner can share it (in an
/// `Arc`); dropping it kills every process it still runs.
pub struct Cluster {
    pub(crate) options: ClusterOptions,
    pub(crate) binary: PathBuf,
    pub(crate) faketime: Option<PathBuf>,
    /// The cluster's CA: it issues each node's certificate for the peer port.
    pub(crate) authority: client::certs::Issued,
    pub(crate) nodes: BTreeMap<NodeId, Node>,
    pub(crate) links: Links,
    /// The client doors, when [`ClusterOptions::client_doors`] is on: one per node, in front
    /// of its client port.
    pub(crate) doors: BTreeMap<NodeId, LinkProxy>,
    /// The client [`Cluster::client`] hands out clones of.
    pub(crate) client: Client,
    /// Status calls: one short attempt each.
    pub(crate) status_client: Client,
    /// Membership and leadership calls: a long budget.
    pub(crate) admin: Client,
    /// Group memberships [`Cluster::remove`] may have changed and [`Cluster::readmit`] (or
    /// [`Cluster::promote`]) has not restored yet.
    pub(crate) removed: Mutex<BTreeSet<(GroupId, NodeId)>>,
    /// Nodes found exited without being killed, with their exit status.
    pub(crate) crashes: Mutex<Vec<(NodeId, String)>>,
    /// Set by [`Cluster::stop`]: nothing is started again.
    pub(crate) stopped: AtomicBool,
    /// The temporary directory when [`ClusterOptions::dir`] is `None`.
    pub(crate) temporary: Option<tempfile::TempDir>,
    /// The directory of the run.
    pub(crate) root: PathBuf,
    /// Whether [`Cluster::shutdown`] ended the cluster (a temporary directory is then deleted).
    pub(crate) finished: bool,
    /// Held while the cluster lives, when it is [`ClusterOptions::exclusive`].
    pub(crate) _one_at_a_time: Option<MutexGuard<'static, ()>>,
}

impl Cluster {
    /// Starts nodes `1..=options.nodes`, founding the cluster (`--bootstrap`, unless
    /// [`ClusterOptions::bootstrap`] is off), each dialing its peers through its own proxies,
    /// and waits until every group has a leader (when founded).
    ///
    /// # Errors
    ///
    /// When the options are unusable, the binary is missing, a port cannot be bound, or a node
    /// does not serve or a group elects no leader within [`ClusterOptions::wait`].
    pub async fn start(options: ClusterOptions) -> Result<Cluster, ClusterError> {
        if options.nodes == 0 || options.groups == 0 || options.replicas == 0 {
            return Err(ClusterError::Invalid("nodes, groups and replicas start at 1".into()));
        }
        let binary = options.binary_path()?;
        let faketime = options.faketime_path();
        let one_at_a_time =
            if options.exclusive { Some(ONE_CLUSTER_AT_A_TIME.lock().await) } else { None };
        let temporary = match &options.dir {
            Some(_) => None,
            None => Some(
                tempfile::Builder::new()
                    .prefix("bookingd-cluster-")
                    .tempdir()
                    .map_err(ClusterError::io("make a temporary directory"))?,
            ),
        };
        let root = match (&options.dir, &temporary) {
            (Some(dir), _) => dir.clone(),
            (None, Some(temporary)) => temporary.path().to_path_buf(),
            (None, None) => unreachable!("a temporary directory is made when none is given"),
        };
        fs::create_dir_all(&root)
            .map_err(ClusterError::io(format!("create {}", root.display())))?;

        // The ports of ephemeral nodes stay bound until each node is spawned.
        let mut addresses = BTreeMap::new();
        let mut peer_addresses = BTreeMap::new();
        let mut held = BTreeMap::new();
        for id in 1..=options.nodes {
            let (address, listener) = options.listen(id)?;
            let (peer_address, peer_listener) = options.peer_listen(id, address)?;
            addresses.insert(id, address);
            peer_addresses.insert(id, peer_address);
            held.insert(id, (listener, peer_listener));
        }
        // The links carry Raft traffic: they lead to the peer ports (TLS passes through them
        // untouched), from proxies beside each node's client address.
        let mut proxy_addresses = BTreeMap::new();
        for (&from, &address) in &addresses {
            for &to in addresses.keys() {
                proxy_addresses.insert((from, to), options.proxy_listen(address, to)?);
            }
        }
        let links = Links::start(&peer_addresses, |from, to| proxy_addresses[&(from, to)])
            .await
            .map_err(ClusterError::io("start the link proxies"))?;
        let authority = client::certs::new_authority("testkit cluster", 30)
            .map_err(|error| ClusterError::Invalid(error.to_string()))?;
        let mut doors = BTreeMap::new();
        if options.client_doors {
            for (&id, &listen) in &addresses {
                doors.insert(id, start_door(&options, id, listen).await?);
            }
        }
        // What clients dial: the doors when there are.
        let client_addresses = addresses
            .iter()
            .map(|(&id, &listen)| (id, doors.get(&id).map_or(listen, LinkProxy::address)))
            .collect();

        let mut nodes = BTreeMap::new();
        for (&id, &listen) in &addresses {
            let mut peers = Vec::new();
            for &peer in addresses.keys() {
                let via = if peer == id || options.direct_peers {
                    peer_addresses.get(&peer).copied()
                } else {
                    links.address(id, peer)
                };
                let via =
                    via.ok_or_else(|| ClusterError::Invalid(format!("no link {id} -> {peer}")))?;
                peers.push(format!("{peer}={via}"));
            }
            let ports = (listen, peer_addresses[&id]);
            nodes.insert(id, Node::create(&root, id, ports, peers.join(","))?);
        }

        let (client, status_client, admin) =
            clients(&options, &client_addresses, &authority.certificate_pem)?;
        let cluster = Cluster {
            options,
            binary,
            faketime,
            authority,
            nodes,
            links,
            doors,
            client,
            status_client,
            admin,
            removed: Mutex::new(BTreeSet::new()),
            crashes: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            temporary,
            root,
            finished: false,
            _one_at_a_time: one_at_a_time,
        };
        // Every node at once: a founding node asks its peers for their addresses until they
        // answer.
        let ids = cluster.node_ids();
        let bootstrap = cluster.options.bootstrap;
        for &id in &ids {
            drop(held.remove(&id));
            cluster.spawn(id, bootstrap)?;
        }
        for &id in &ids {
            cluster.wait_serving(id).await?;
        }
        if bootstrap {
            for group in cluster.group_ids() {
                cluster.leader_of(group).await?;
            }
            if cluster.options.raise_feature_level {
                cluster.client.raise_feature_level(statemachine::FEATURE_LEVEL).await?;
            }
        }
        Ok(cluster)
    }

    /// Makes the cluster's clients again, of every node it has now (after
    /// [`Cluster::start_extra`]).
    pub(crate) fn renew_clients(&mut self) -> Result<(), ClusterError> {
        let addresses = self.nodes.keys().map(|&id| (id, self.client_address(id))).collect();
        (self.client, self.status_client, self.admin) =
            clients(&self.options, &addresses, &self.authority.certificate_pem)?;
        Ok(())
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// The binary the nodes run.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The directory of the run (a temporary one unless [`ClusterOptions::dir`] names it).
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// Every node id, in order (extra nodes included).
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// Every group of the cluster: the metadata group 0 and the data groups.
    pub fn group_ids(&self) -> RangeInclusive<GroupId> {
        0..=self.options.groups
    }

    /// The data groups (those that hold shows).
    pub fn data_group_ids(&self) -> RangeInclusive<GroupId> {
        1..=self.options.groups
    }

    /// Every node's client address (`host:port`: its door's, when it has one), in id order.
    pub fn addresses(&self) -> Vec<String> {
        self.nodes.keys().map(|&id| self.client_address(id).to_string()).collect()
    }

    /// Node `id`'s client address (its door's, when it has one: what it advertises).
    ///
    /// # Errors
    ///
    /// [`ClusterError::NoSuchNode`].
    pub fn address(&self, id: NodeId) -> Result<String, ClusterError> {
        self.node(id)?;
        Ok(self.client_address(id).to_string())
    }

    /// Where clients reach node `id` (which must exist): its door, or its client port.
    pub(crate) fn client_address(&self, id: NodeId) -> SocketAddr {
        match self.doors.get(&id) {
            Some(door) => door.address(),
            None => self.nodes[&id].listen,
        }
    }

    /// The scheme of the nodes' client ports: `https` under [`ClusterOptions::client_tls`].
    pub fn scheme(&self) -> &'static str {
        if self.options.client_tls { "https" } else { "http" }
    }

    /// The URL of `path` (starting with `/`) on node `id`'s client port.
    ///
    /// # Errors
    ///
    /// [`ClusterError::NoSuchNode`].
    pub fn url(&self, id: NodeId, path: &str) -> Result<String, ClusterError> {
        self.node(id)?;
        Ok(format!("{}://{}{path}", self.scheme(), self.client_address(id)))
    }

    /// Where the cluster's CA certificate is written, for a process that reads it from a file
    /// (`paysim --webhook-ca-file`, `bookctl --ca-file`).
    ///
    /// # Errors
    ///
    /// When the file cannot be written.
    pub fn ca_file(&self) -> Result<PathBuf, ClusterError> {
        let path = self.root.join("ca.crt");
        if !path.exists() {
            fs::write(&path, &self.authority.certificate_pem)
                .map_err(ClusterError::io(format!("write {}", path.display())))?;
        }
        Ok(path)
    }

    /// Node `id`'s peer port (Raft between nodes, mutual TLS).
    ///
    /// # Errors
    ///
    /// [`ClusterError::NoSuchNode`].
    pub fn peer_address(&self, id: NodeId) -> Result<SocketAddr, ClusterError> {
        Ok(self.node(id)?.peer_listen)
    }

    /// The address memberships carry for node `id`: `<client> peer=<peer port>`, as the node
    /// reports it in its status.
    ///
    /// # Errors
    ///
    /// [`ClusterError::NoSuchNode`].
    pub fn membership_address(&self, id: NodeId) -> Result<String, ClusterError> {
        let node = self.node(id)?;
        Ok(format!("{} peer={}", self.client_address(id), node.peer_listen))
    }

    /// The cluster's CA certificate (PEM), which signed every node's certificate.
    pub fn ca_certificate(&self) -> &str {
        &self.authority.certificate_pem
    }

    /// A certificate and key for node `id` from the cluster's CA (whether or not the node
    /// exists): what a test presents to a peer port as that node.
    ///
    /// # Errors
    ///
    /// When the certificate cannot be made.
    pub fn issue_certificate(&self, id: NodeId) -> Result<client::certs::Issued, ClusterError> {
        client::certs::issue_node(&self.authority, id, &[], 1)
            .map_err(|error| ClusterError::Invalid(error.to_string()))
    }

    /// Node `id`'s directory (data, logs, skew file).
    ///
    /// # Errors
    ///
    /// [`ClusterError::NoSuchNode`].
    pub fn node_dir(&self, id: NodeId) -> Result<PathBuf, ClusterError> {
        Ok(self.node(id)?.dir.clone())
    }

    /// A client of every node that sends the operator token (when there is one); clones share
    /// channels and leader caches.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A fresh client of every node (its own channels and leader cache), with
    /// [`ClusterOptions::client_config`] and the operator token.
    ///
    /// # Errors
    ///
    /// Only if the SDK refuses the addresses or the token.
    pub fn new_client(&self) -> Result<Client, ClusterError> {
        self.client_of(&self.node_ids())
    }

    /// A fresh client that knows only nodes `ids` (it may still learn others from hints), in
    /// that order, with the operator token.
    ///
    /// # Errors
    ///
    /// [`ClusterError::NoSuchNode`], or the SDK refusing the addresses or the token.
    pub fn client_of(&self, ids: &[NodeId]) -> Result<Client, ClusterError> {
        let addresses = ids.iter().map(|&id| self.address(id)).collect::<Result<_, _>>()?;
        let config = self.options.client_config.clone();
        make_client(&self.options, addresses, config, &self.authority.certificate_pem)
    }

    /// `client` made to trust the cluster's CA when its nodes serve TLS (a client a test
    /// builds itself, with a configuration of its own).
    ///
    /// # Errors
    ///
    /// Only if the SDK refuses the CA certificate.
    pub fn trusting(&self, client: Client) -> Result<Client, ClusterError> {
        Ok(if self.options.client_tls {
            client.with_ca_certificate(&self.authority.certificate_pem)?
        } else {
            client
        })
    }

    /// The proxies between the initial nodes.
    pub fn links(&self) -> &Links {
        &self.links
    }

    pub(crate) fn node(&self, id: NodeId) -> Result<&Node, ClusterError> {
        self.nodes.get(&id).ok_or(ClusterError::NoSuchNode(id))
    }

    /// Records node `id`, not started, with its files under the run's directory.
    pub(crate) fn add_node(
        &mut self,
        id: NodeId,
        ports: (SocketAddr, SocketAddr),
        peers: String,
    ) -> Result<(), ClusterError> {
        let node = Node::create(&self.root, id, ports, peers)?;
        self.nodes.insert(id, node);
        Ok(())
    }
}

/// The cluster's own clients of `addresses`: the one it hands out, the status client (one
/// short attempt) and the admin client (a long budget).
fn clients(
    options: &ClusterOptions,
    addresses: &BTreeMap<NodeId, SocketAddr>,
    ca: &str,
) -> Result<(Client, Client, Client), ClusterError> {
    let addresses: Vec<String> = addresses.values().map(ToString::to_string).collect();
    let client = make_client(options, addresses.clone(), options.client_config.clone(), ca)?;
    let status = Config {
        retry_budget: options.status_timeout,
        attempt_timeout: options.status_timeout,
        ..Config::default()
    };
    let status_client = make_client(options, addresses.clone(), status, ca)?;
    let admin = Config { retry_budget: ADMIN_BUDGET, ..Config::default() };
    let admin = make_client(options, addresses, admin, ca)?;
    Ok((client, status_client, admin))
}

/// Starts node `id`'s client door in front of `listen`.
pub(crate) async fn start_door(
    options: &ClusterOptions,
    id: NodeId,
    listen: SocketAddr,
) -> Result<LinkProxy, ClusterError> {
    let at = options.door_listen(id, listen)?;
    LinkProxy::start_door(at, listen)
        .await
        .map_err(ClusterError::io(format!("start node {id}'s client door on {at}")))
}

/// An SDK client of `addresses` with `config`, sending the operator token on operator calls,
/// over https trusting the cluster's CA `ca` when the nodes serve TLS.
fn make_client(
    options: &ClusterOptions,
    addresses: Vec<String>,
    config: Config,
    ca: &str,
) -> Result<Client, ClusterError> {
    let client = Client::with_config(addresses, config)?.with_operator_token(options.operator())?;
    Ok(if options.client_tls { client.with_ca_certificate(ca)? } else { client })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_nodes_get_their_own_loopback_address_and_links_their_own_port() {
        let options = ClusterOptions::new(5, "/nonexistent");
        let (first, held) = options.listen(1).expect("node 1's address");
        assert!(held.is_none(), "fixed addresses hold no port");
        assert_eq!(first, "127.0.0.11:7300".parse().expect("an address"));
        let (fifth, _) = options.listen(5).expect("node 5's address");
        assert_eq!(fifth, "127.0.0.15:7300".parse().expect("an address"));
        assert!(options.listen(245).is_err(), "127.0.0.255 is no node's address");
        let proxy = options.proxy_listen(first, 3).expect("a proxy address");
        assert_eq!(proxy, "127.0.0.11:7303".parse().expect("an address"));
        let high = ClusterOptions {
            addressing: Addressing::Fixed { ip_base: 10, port_base: 65_534 },
            ..options
        };
        assert!(high.proxy_listen(first, 2).is_err());
    }

    #[test]
    fn ephemeral_nodes_hold_a_free_port_until_spawned() {
        let options = ClusterOptions::ephemeral(3);
        let (address, held) = options.listen(1).expect("a free port");
        let held = held.expect("an ephemeral port is held");
        assert_eq!(held.local_addr().ok(), Some(address));
        assert!(address.ip().is_loopback() && address.port() != 0);
        let proxy = options.proxy_listen(address, 2).expect("a proxy address");
        assert_eq!((proxy.ip(), proxy.port()), (address.ip(), 0), "the system picks its port");
    }

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let options = ClusterOptions {
            bin_dir: Some(PathBuf::from("/nonexistent")),
            ..ClusterOptions::new(3, "/nonexistent")
        };
        let error = options.binary_path().expect_err("no binary there").to_string();
        assert!(error.contains("cargo build --release"), "{error}");
    }
}
