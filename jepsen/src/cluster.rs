//! A cluster of real `bookingd` processes on loopback, for the suite's runs: each node on its
//! own address `127.0.0.(ip_base + id)`, with its own data directory and log files, reaching
//! its peers through a [`Links`] mesh of fault proxies (node `i`'s `--peers j=` is the proxy of
//! the link `i → j`; or directly, without faults, when [`ClusterOptions::direct_peers`] is set),
//! and optionally under libfaketime so that its wall clock can be skewed.
//!
//! Owns the processes it spawned and their faults: kill -9 and restart, SIGSTOP and SIGCONT,
//! link cuts, clock skew, membership removal and readmission, leader transfer, and
//! [`Cluster::heal_all`] to undo all of them. Also asks the nodes (through the `client` SDK only)
//! for their status, leaders and state digests. Never builds anything (the binaries must exist),
//! never signals a process it did not spawn (signals go to its own children's pids, which it
//! never reaps behind its own back), and never judges the cluster: the checkers do.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use client::{Client, Config, GroupStatus, MembershipReply, StatusReply};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::proxy::Links;

pub use crate::proxy::NodeId;

/// A Raft group's id: 0 is the metadata group, `1..=groups` hold shows.
pub type GroupId = u64;

/// Where Debian and a few other systems put libfaketime, searched in order when
/// [`ClusterOptions::faketime_library`] is `None`.
pub const LIBFAKETIME_PATHS: [&str; 5] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
];

/// How often a polled condition is checked.
const POLL: Duration = Duration::from_millis(100);

/// How long one status call may take: a paused node never answers, and a poll must go on.
const STATUS_ATTEMPT_MAX: Duration = Duration::from_secs(1);

/// How long a membership or leadership call may take, retries included (a learner's catch-up
/// is part of it).
const ADMIN_BUDGET: Duration = Duration::from_secs(20);

/// How many seconds libfaketime keeps the offset it read from a node's skew file, so that the
/// file is not read on every clock call. It compares whole seconds, so a skew takes effect
/// within about two seconds.
const FAKETIME_CACHE_SECONDS: &str = "1";

/// What a node prints on stdout once it serves.
const LISTENING: &str = "listening=";

/// How many lines of a node's log an error about it carries.
const LOG_TAIL_LINES: usize = 30;

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        source: io::Error,
    },
    /// The options cannot describe a cluster (or the binary is missing).
    #[error("invalid cluster options: {0}")]
    Invalid(String),
    /// The cluster has no such node.
    #[error("no node {0}")]
    NoSuchNode(NodeId),
    /// The node is not in the state the operation needs (killing a stopped node, ...).
    #[error("node {node} {state}")]
    WrongState {
        /// The node.
        node: NodeId,
        /// What is wrong, as a phrase ("does not run", "is paused", ...).
        state: String,
    },
    /// A node exited although nothing killed it: a crash.
    #[error("node {node} exited by itself ({status})\n{log_tail}")]
    Exited {
        /// The node.
        node: NodeId,
        /// Its exit status.
        status: String,
        /// The end of its logs.
        log_tail: String,
    },
    /// A condition did not come true in time.
    #[error("waited {within:?} for {what}; last: {last}")]
    Timeout {
        /// The condition.
        what: String,
        /// How long it was waited for.
        within: Duration,
        /// The last reason it was not true.
        last: String,
    },
    /// Two replicas of a group report different digests at the same applied index.
    #[error("group {group} diverges at applied index {index}: {detail}")]
    Diverged {
        /// The group.
        group: GroupId,
        /// The applied index.
        index: u64,
        /// Which nodes disagree, with their digests.
        detail: String,
    },
    /// Clock skew was asked for but the nodes do not run under libfaketime.
    #[error("clock skew is unavailable: {0}")]
    SkewUnavailable(String),
    /// A call through the SDK failed (membership, leader transfer, status).
    #[error(transparent)]
    Client(#[from] client::Error),
}

impl ClusterError {
    fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> ClusterError {
        let context = context.into();
        move |source| ClusterError::Io { context, source }
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
    /// The directory of the run: one subdirectory per node (`node-<id>/` with `data/`,
    /// `stdout.log`, `stderr.log` and the skew file). Created if missing; a node's data
    /// directory must not exist yet (a cluster is founded once).
    pub dir: PathBuf,
    /// Where the binary lives; `None`: the directory of the current executable, or its parent
    /// when that is cargo's `deps/` (test binaries).
    pub bin_dir: Option<PathBuf>,
    /// The binary's file name: `bookingd`, or a test-only build such as `bookingd-unsafe`.
    pub binary: String,
    /// Node `i` listens on `127.0.0.(ip_base + i)`.
    pub ip_base: u8,
    /// Node `i` serves on port `port_base` of its address; the proxy of link `i → j` listens
    /// on port `port_base + j` of `i`'s address.
    pub port_base: u16,
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
    /// `--session-secret`, the same on every node.
    pub session_secret: String,
    /// `--operator-token`; the clients of [`Cluster::client`] send it.
    pub operator_token: String,
    /// `--webhook-secret`.
    pub webhook_secret: String,
    /// `--rate-per-session`: very high, so that the suite measures the cluster, not its limits.
    pub rate_per_session: u32,
    /// `--rate-per-address`: very high, as every client of the suite shares one address.
    pub rate_per_address: u32,
    /// More arguments for every node, after the others.
    pub extra_args: Vec<String>,
    /// Start every node under libfaketime (when it is found) so that [`Cluster::skew`] works.
    pub clock_skew: bool,
    /// The libfaketime library; `None`: the first of [`LIBFAKETIME_PATHS`] that exists.
    pub faketime_library: Option<PathBuf>,
    /// The nodes' `RUST_LOG`.
    pub log_filter: String,
    /// The longest wait for a node to serve, a leader to be agreed on, or a convergence.
    pub wait: Duration,
    /// The retry policy of the clients [`Cluster::client`] and [`Cluster::new_client`] make.
    pub client_config: Config,
    /// Dial peers directly (`--peers j=<j's listen address>`) instead of through the link
    /// proxies. The proxies still start, but carry nothing, so link faults have no effect: for
    /// the benchmark, which must not pay for a user-space relay of every Raft message on a
    /// small machine. Off by default (the suite's link faults need the proxies).
    pub direct_peers: bool,
}

impl ClusterOptions {
    /// `nodes` nodes in `dir`, with two data groups of three replicas, the daemon's Raft timing
    /// (150 ms heartbeats, elections after 600-1200 ms), fixed test secrets, rate limits out of
    /// the way, clock skew on when libfaketime is found, and ports from 7300.
    pub fn new(nodes: u64, dir: impl Into<PathBuf>) -> ClusterOptions {
        ClusterOptions {
            nodes,
            groups: 2,
            replicas: 3,
            dir: dir.into(),
            bin_dir: None,
            binary: "bookingd".to_owned(),
            ip_base: 10,
            port_base: 7300,
            heartbeat_ms: 150,
            election_min_ms: 600,
            election_max_ms: 1_200,
            snapshot_logs: None,
            tick_ms: None,
            session_secret: "jepsen-session-secret-0123456789abcdef".to_owned(),
            operator_token: "jepsen-operator-token".to_owned(),
            webhook_secret: "jepsen-webhook-secret-0123456789abcdef".to_owned(),
            rate_per_session: 1_000_000,
            rate_per_address: 1_000_000,
            extra_args: Vec::new(),
            clock_skew: true,
            faketime_library: None,
            log_filter: "info,openraft=warn".to_owned(),
            wait: Duration::from_secs(30),
            client_config: Config::default(),
            direct_peers: false,
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

    /// The libfaketime library the nodes would run under, if clock skew is on and it exists.
    pub fn faketime_path(&self) -> Option<PathBuf> {
        if !self.clock_skew {
            return None;
        }
        match &self.faketime_library {
            Some(path) => path.is_file().then(|| path.clone()),
            None => LIBFAKETIME_PATHS.iter().map(PathBuf::from).find(|path| path.is_file()),
        }
    }

    /// Node `id`'s IP address.
    fn ip(&self, id: NodeId) -> Result<Ipv4Addr, ClusterError> {
        let last = u64::from(self.ip_base) + id;
        let last = u8::try_from(last)
            .ok()
            .filter(|last| *last < 255)
            .ok_or_else(|| ClusterError::Invalid(format!("no loopback address for node {id}")))?;
        Ok(Ipv4Addr::new(127, 0, 0, last))
    }

    /// The port `port_base + offset`.
    fn port(&self, offset: u64) -> Result<u16, ClusterError> {
        u16::try_from(u64::from(self.port_base) + offset)
            .map_err(|_| ClusterError::Invalid(format!("port {} + {offset}", self.port_base)))
    }
}

/// What one node is doing, as far as the cluster did it.
#[derive(Debug, Default)]
struct NodeState {
    /// The running process (paused or not); `None` once killed, stopped or found exited.
    child: Option<Child>,
    /// Whether it was stopped with SIGSTOP and not continued.
    paused: bool,
    /// How many times it was started.
    starts: u32,
    /// The wall-clock offset it runs with, ms.
    skew_ms: i64,
}

/// One node: where it listens, its files, and its process.
#[derive(Debug)]
struct Node {
    id: NodeId,
    listen: SocketAddr,
    data: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
    skew_file: PathBuf,
    /// Its `--peers`: the proxies of its outgoing links.
    peers: String,
    /// Changed by one step at a time, never held across an await.
    state: Mutex<NodeState>,
    /// Held across a whole process operation (kill, restart, pause, resume), so that two of
    /// them never interleave and a signal never targets a pid that was reaped meanwhile.
    operation: tokio::sync::Mutex<()>,
}

impl Node {
    fn state(&self) -> MutexGuard<'_, NodeState> {
        // Each change is a few assignments without a panic between them.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The last `lines` lines of its stderr (its log) and of its stdout.
    fn log_tail(&self, lines: usize) -> String {
        let mut tail = String::new();
        for (name, path) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let text = fs::read_to_string(path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            let _ = writeln!(tail, "----- node {} {name} ({}) -----", self.id, path.display());
            for line in &all[from..] {
                let _ = writeln!(tail, "{line}");
            }
        }
        tail
    }
}

/// What every replica of one group reported once they agreed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Converged {
    /// The applied index every member reached.
    pub applied_index: u64,
    /// The digest of the state at that index.
    pub digest: String,
    /// The members (voters and learners) that reported it.
    pub members: Vec<NodeId>,
}

/// A cluster of `bookingd` processes. See the module docs. Every method takes `&self`, so that
/// the nemesis and the runner can share it (in an `Arc`); dropping it kills every process it
/// still runs.
pub struct Cluster {
    options: ClusterOptions,
    binary: PathBuf,
    faketime: Option<PathBuf>,
    nodes: BTreeMap<NodeId, Node>,
    links: Links,
    /// The client [`Cluster::client`] hands out clones of.
    client: Client,
    /// Status calls: one short attempt each.
    status_client: Client,
    /// Membership and leadership calls: a long budget.
    admin: Client,
    /// Group memberships [`Cluster::remove`] may have changed and [`Cluster::readmit`] has not
    /// restored yet.
    removed: Mutex<BTreeSet<(GroupId, NodeId)>>,
    /// Nodes found exited without being killed, with their exit status.
    crashes: Mutex<Vec<(NodeId, String)>>,
    /// Set by [`Cluster::stop`]: nothing is started again.
    stopped: AtomicBool,
}

impl Cluster {
    /// Starts nodes `1..=options.nodes`, founding the cluster (`--bootstrap`), each dialing its
    /// peers through its own proxies, and waits until every group has a leader.
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
        fs::create_dir_all(&options.dir)
            .map_err(ClusterError::io(format!("create {}", options.dir.display())))?;

        let mut addresses = BTreeMap::new();
        for id in 1..=options.nodes {
            let ip = IpAddr::V4(options.ip(id)?);
            addresses.insert(id, SocketAddr::new(ip, options.port(0)?));
        }
        let mut proxy_addresses = BTreeMap::new();
        for &from in addresses.keys() {
            for &to in addresses.keys() {
                proxy_addresses
                    .insert((from, to), SocketAddr::new(addresses[&from].ip(), options.port(to)?));
            }
        }
        let links = Links::start(&addresses, |from, to| proxy_addresses[&(from, to)])
            .await
            .map_err(ClusterError::io("start the link proxies"))?;

        let mut nodes = BTreeMap::new();
        for (&id, &listen) in &addresses {
            let dir = options.dir.join(format!("node-{id}"));
            let data = dir.join("data");
            if data.exists() {
                return Err(ClusterError::Invalid(format!(
                    "{} exists: a cluster is founded in a fresh directory",
                    data.display()
                )));
            }
            fs::create_dir_all(&dir)
                .map_err(ClusterError::io(format!("create {}", dir.display())))?;
            let mut peers = Vec::new();
            for &peer in addresses.keys() {
                let via = if peer == id || options.direct_peers {
                    addresses.get(&peer).copied()
                } else {
                    links.address(id, peer)
                };
                let via =
                    via.ok_or_else(|| ClusterError::Invalid(format!("no link {id} -> {peer}")))?;
                peers.push(format!("{peer}={via}"));
            }
            let node = Node {
                id,
                listen,
                data,
                stdout: dir.join("stdout.log"),
                stderr: dir.join("stderr.log"),
                skew_file: dir.join("faketime"),
                peers: peers.join(","),
                state: Mutex::new(NodeState::default()),
                operation: tokio::sync::Mutex::new(()),
            };
            write_skew_file(&node.skew_file, 0)?;
            nodes.insert(id, node);
        }

        let client_addresses: Vec<String> = addresses.values().map(ToString::to_string).collect();
        let make = |config: Config| -> Result<Client, ClusterError> {
            Ok(Client::with_config(client_addresses.clone(), config)?
                .with_operator_token(&options.operator_token)?)
        };
        let client = make(options.client_config.clone())?;
        let status_client = make(Config {
            retry_budget: STATUS_ATTEMPT_MAX,
            attempt_timeout: STATUS_ATTEMPT_MAX,
            ..Config::default()
        })?;
        let admin = make(Config { retry_budget: ADMIN_BUDGET, ..Config::default() })?;
        let cluster = Cluster {
            options,
            binary,
            faketime,
            nodes,
            links,
            client,
            status_client,
            admin,
            removed: Mutex::new(BTreeSet::new()),
            crashes: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        };
        // Every node at once: a founding node asks its peers for their addresses until they
        // answer.
        let ids = cluster.node_ids();
        for &id in &ids {
            cluster.spawn(id, true)?;
        }
        for &id in &ids {
            cluster.wait_serving(id).await?;
        }
        for group in cluster.group_ids() {
            cluster.leader_of(group).await?;
        }
        Ok(cluster)
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// The binary the nodes run.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// Every node id, in order.
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

    /// Every node's client address (`host:port`), in id order.
    pub fn addresses(&self) -> Vec<String> {
        self.nodes.values().map(|node| node.listen.to_string()).collect()
    }

    /// Node `id`'s client address.
    ///
    /// # Errors
    ///
    /// [`ClusterError::NoSuchNode`].
    pub fn address(&self, id: NodeId) -> Result<String, ClusterError> {
        Ok(self.node(id)?.listen.to_string())
    }

    /// Node `id`'s directory (data, logs, skew file).
    ///
    /// # Errors
    ///
    /// [`ClusterError::NoSuchNode`].
    pub fn node_dir(&self, id: NodeId) -> Result<PathBuf, ClusterError> {
        let node = self.node(id)?;
        Ok(node.stdout.parent().map(Path::to_path_buf).unwrap_or_default())
    }

    /// The last `lines` lines of node `id`'s logs (empty for an unknown node).
    pub fn log_tail(&self, id: NodeId, lines: usize) -> String {
        self.nodes.get(&id).map(|node| node.log_tail(lines)).unwrap_or_default()
    }

    /// A client of every node that sends the operator token; clones share channels and leader
    /// caches.
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

    /// A fresh client that knows only nodes `ids` (it may still learn others from hints).
    ///
    /// # Errors
    ///
    /// [`ClusterError::NoSuchNode`], or the SDK refusing the addresses or the token.
    pub fn client_of(&self, ids: &[NodeId]) -> Result<Client, ClusterError> {
        let addresses = ids.iter().map(|&id| self.address(id)).collect::<Result<_, _>>()?;
        Ok(Client::with_config(addresses, self.options.client_config.clone())?
            .with_operator_token(&self.options.operator_token)?)
    }

    /// The proxies between the nodes.
    pub fn links(&self) -> &Links {
        &self.links
    }

    /// The libfaketime library the nodes run under; `None` when clock skew is unavailable.
    pub fn faketime_library(&self) -> Option<&Path> {
        self.faketime.as_deref()
    }

    /// Whether [`Cluster::skew`] can work.
    pub fn skew_supported(&self) -> bool {
        self.faketime.is_some()
    }

    /// The nodes whose process runs (paused ones included), as far as the cluster knows.
    pub fn running(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|node| node.state().child.is_some())
            .map(|node| node.id)
            .collect()
    }

    /// The nodes that run and are not paused: those that can answer.
    pub fn available(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|node| {
                let state = node.state();
                state.child.is_some() && !state.paused
            })
            .map(|node| node.id)
            .collect()
    }

    /// The nodes that do not run (killed, or found exited).
    pub fn down(&self) -> Vec<NodeId> {
        self.nodes
            .values()
            .filter(|node| node.state().child.is_none())
            .map(|node| node.id)
            .collect()
    }

    /// The nodes paused with SIGSTOP.
    pub fn paused(&self) -> Vec<NodeId> {
        self.nodes.values().filter(|node| node.state().paused).map(|node| node.id).collect()
    }

    /// Each node's wall-clock skew, ms (0 for none).
    pub fn skews(&self) -> BTreeMap<NodeId, i64> {
        self.nodes.values().map(|node| (node.id, node.state().skew_ms)).collect()
    }

    /// Node `id`'s pid while it runs.
    pub fn pid(&self, id: NodeId) -> Option<u32> {
        self.nodes.get(&id).and_then(|node| node.state().child.as_ref().and_then(Child::id))
    }

    /// The nodes that exited without being killed, with their exit status, since the start.
    pub fn crashes(&self) -> Vec<(NodeId, String)> {
        self.crashes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn node(&self, id: NodeId) -> Result<&Node, ClusterError> {
        self.nodes.get(&id).ok_or(ClusterError::NoSuchNode(id))
    }

    /// Spawns node `id`'s process, with `--bootstrap` if `bootstrap`, its output appended to
    /// its files after a line that says which start this is.
    fn spawn(&self, id: NodeId, bootstrap: bool) -> Result<(), ClusterError> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(ClusterError::WrongState {
                node: id,
                state: "belongs to a stopped cluster".into(),
            });
        }
        let options = &self.options;
        let node = self.node(id)?;
        let mut state = node.state();
        if state.child.is_some() {
            return Err(ClusterError::WrongState { node: id, state: "runs already".into() });
        }
        let mut command = Command::new(&self.binary);
        command
            .arg("--id")
            .arg(id.to_string())
            .arg("--data")
            .arg(&node.data)
            .arg("--listen")
            .arg(node.listen.to_string())
            .arg("--peers")
            .arg(&node.peers)
            .arg("--groups")
            .arg(options.groups.to_string())
            .arg("--replicas")
            .arg(options.replicas.to_string())
            .arg("--heartbeat-ms")
            .arg(options.heartbeat_ms.to_string())
            .arg("--election-min-ms")
            .arg(options.election_min_ms.to_string())
            .arg("--election-max-ms")
            .arg(options.election_max_ms.to_string())
            .arg("--session-secret")
            .arg(&options.session_secret)
            .arg("--operator-token")
            .arg(&options.operator_token)
            .arg("--webhook-secret")
            .arg(&options.webhook_secret)
            .arg("--rate-per-session")
            .arg(options.rate_per_session.to_string())
            .arg("--rate-per-address")
            .arg(options.rate_per_address.to_string());
        if let Some(entries) = options.snapshot_logs {
            command.arg("--snapshot-logs").arg(entries.to_string());
        }
        if let Some(tick) = options.tick_ms {
            command.arg("--tick-ms").arg(tick.to_string());
        }
        if bootstrap {
            command.arg("--bootstrap");
        }
        command.args(&options.extra_args);
        command.env("RUST_LOG", &options.log_filter);
        if let Some(library) = &self.faketime {
            // The wall clock follows the node's skew file (re-read about every second); the
            // monotonic clock is left alone, so that Raft's and tokio's timers are undisturbed.
            command
                .env("LD_PRELOAD", library)
                .env("FAKETIME_TIMESTAMP_FILE", &node.skew_file)
                .env("FAKETIME_CACHE_DURATION", FAKETIME_CACHE_SECONDS)
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        if self.faketime.is_some() {
            sweep_stale_faketime_files();
        }
        state.starts += 1;
        let banner = format!("===== start {} of node {id}: {command:?}\n", state.starts);
        let mut stdout = append(&node.stdout)?;
        let mut stderr = append(&node.stderr)?;
        stdout.write_all(banner.as_bytes()).map_err(ClusterError::io("write a log banner"))?;
        stderr.write_all(banner.as_bytes()).map_err(ClusterError::io("write a log banner"))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            // A cluster dropped without `stop` (a panicking runner) still kills its nodes.
            .kill_on_drop(true)
            .spawn()
            .map_err(ClusterError::io(format!("spawn {}", self.binary.display())))?;
        state.child = Some(child);
        state.paused = false;
        Ok(())
    }

    /// Waits (until [`ClusterOptions::wait`]) for node `id`'s latest start to print that it
    /// serves, and to answer a status call.
    async fn wait_serving(&self, id: NodeId) -> Result<(), ClusterError> {
        let node = self.node(id)?;
        let banner = format!("===== start {} of node {id}:", node.state().starts);
        let address = node.listen.to_string();
        let waiting = Waiting::new(format!("node {id} to serve"), self.options.wait);
        loop {
            self.check_alive()?;
            let text = fs::read_to_string(&node.stdout).unwrap_or_default();
            let latest = text.rsplit_once(&banner).map_or("", |(_, after)| after);
            let last = if latest.contains(LISTENING) {
                match self.status_client.status(&address, false).await {
                    Ok(_) => return Ok(()),
                    Err(error) => error.to_string(),
                }
            } else {
                format!("no `{LISTENING}` line on stdout yet")
            };
            waiting.again(last).await?;
        }
    }

    /// Fails if a node the cluster started has exited by itself (crashed), with its log's
    /// tail; the node is then counted as down (and recorded in [`Cluster::crashes`]).
    ///
    /// # Errors
    ///
    /// [`ClusterError::Exited`] for the first node found exited.
    pub fn check_alive(&self) -> Result<(), ClusterError> {
        for node in self.nodes.values() {
            let exited = {
                let mut state = node.state();
                let status = match state.child.as_mut() {
                    Some(child) => child.try_wait().map_err(ClusterError::io("wait for a node"))?,
                    None => None,
                };
                if status.is_some() {
                    state.child = None;
                    state.paused = false;
                }
                status
            };
            if let Some(status) = exited {
                let status = status.to_string();
                self.crashes
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((node.id, status.clone()));
                return Err(ClusterError::Exited {
                    node: node.id,
                    status,
                    log_tail: node.log_tail(LOG_TAIL_LINES),
                });
            }
        }
        Ok(())
    }

    /// Kills node `id` with SIGKILL (no chance to flush or say goodbye) and reaps it. A paused
    /// node is killed too.
    ///
    /// # Errors
    ///
    /// When it does not run.
    pub async fn kill(&self, id: NodeId) -> Result<(), ClusterError> {
        let node = self.node(id)?;
        let _operation = node.operation.lock().await;
        let child = {
            let mut state = node.state();
            state.paused = false;
            state.child.take()
        };
        let Some(mut child) = child else {
            return Err(ClusterError::WrongState { node: id, state: "does not run".into() });
        };
        self.forget_faketime_files(&child);
        // SIGKILL to this child's pid only; it also ends a stopped process.
        child.start_kill().map_err(ClusterError::io(format!("kill node {id}")))?;
        child.wait().await.map_err(ClusterError::io(format!("reap node {id}")))?;
        Ok(())
    }

    /// Starts node `id` again on its data (without `--bootstrap`) and waits until it serves.
    ///
    /// # Errors
    ///
    /// When it runs already, or does not serve within [`ClusterOptions::wait`].
    pub async fn restart(&self, id: NodeId) -> Result<(), ClusterError> {
        self.restart_all(&[id]).await
    }

    /// Starts nodes `ids` again on their data, all at once (a majority restarted one at a time
    /// could not elect anyone until the last), and waits until each serves.
    ///
    /// # Errors
    ///
    /// As [`Cluster::restart`].
    pub async fn restart_all(&self, ids: &[NodeId]) -> Result<(), ClusterError> {
        // In id order and once each: the locks are taken in one order by everyone, and a
        // second lock of the same node would wait forever.
        let ids: BTreeSet<NodeId> = ids.iter().copied().collect();
        let mut guards = Vec::with_capacity(ids.len());
        for &id in &ids {
            guards.push(self.node(id)?.operation.lock().await);
        }
        for &id in &ids {
            self.spawn(id, false)?;
        }
        drop(guards);
        for &id in &ids {
            self.wait_serving(id).await?;
        }
        Ok(())
    }

    /// Stops node `id` with SIGSTOP: it neither answers nor times anything out until resumed.
    ///
    /// # Errors
    ///
    /// When it does not run, is paused already, or the signal cannot be sent.
    pub async fn pause(&self, id: NodeId) -> Result<(), ClusterError> {
        self.signal(id, true).await
    }

    /// Continues node `id` with SIGCONT.
    ///
    /// # Errors
    ///
    /// When it does not run, is not paused, or the signal cannot be sent.
    pub async fn resume(&self, id: NodeId) -> Result<(), ClusterError> {
        self.signal(id, false).await
    }

    /// Sends SIGSTOP (`stop`) or SIGCONT to node `id`'s own pid, with the system's `kill`
    /// command (this crate forbids the unsafe code a direct call would need).
    async fn signal(&self, id: NodeId, stop: bool) -> Result<(), ClusterError> {
        let node = self.node(id)?;
        // Held until the signal is sent: the pid cannot be reaped (and reused) meanwhile.
        let _operation = node.operation.lock().await;
        let pid = {
            let state = node.state();
            if state.paused == stop {
                let phrase = if stop { "is paused already" } else { "is not paused" };
                return Err(ClusterError::WrongState { node: id, state: phrase.into() });
            }
            state.child.as_ref().and_then(Child::id)
        };
        let Some(pid) = pid else {
            return Err(ClusterError::WrongState { node: id, state: "does not run".into() });
        };
        let name = if stop { "STOP" } else { "CONT" };
        let status = Command::new("kill")
            .arg("-s")
            .arg(name)
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .status()
            .await
            .map_err(ClusterError::io(format!("run kill -s {name} for node {id}")))?;
        if !status.success() {
            return Err(ClusterError::Io {
                context: format!("kill -s {name} {pid} (node {id})"),
                source: io::Error::other(status.to_string()),
            });
        }
        node.state().paused = stop;
        Ok(())
    }

    /// Cuts every link to and from node `id` (clients still reach it directly).
    pub fn isolate(&self, id: NodeId) {
        self.links.isolate(id);
    }

    /// Cuts every link whose two ends share none of `sets` (see [`Links::partition`]).
    pub fn partition(&self, sets: &[Vec<NodeId>]) {
        self.links.partition(sets);
    }

    /// Cuts the one directed link `from → to`.
    ///
    /// # Errors
    ///
    /// [`ClusterError::Invalid`] when there is no such link.
    pub fn block_link(&self, from: NodeId, to: NodeId) -> Result<(), ClusterError> {
        if self.links.block(from, to) {
            Ok(())
        } else {
            Err(ClusterError::Invalid(format!("no link {from} -> {to}")))
        }
    }

    /// Opens every link.
    pub fn heal(&self) {
        self.links.heal_all();
    }

    /// Sets node `id`'s wall clock `ms` milliseconds off the real one (negative: behind); 0
    /// removes the skew. Takes effect within about two seconds (libfaketime's cache).
    ///
    /// # Errors
    ///
    /// [`ClusterError::SkewUnavailable`] when the nodes do not run under libfaketime.
    pub fn skew(&self, id: NodeId, ms: i64) -> Result<(), ClusterError> {
        let node = self.node(id)?;
        if self.faketime.is_none() {
            let why = if self.options.clock_skew {
                format!("libfaketime not found (looked at {LIBFAKETIME_PATHS:?}); install it")
            } else {
                "the cluster was started without it".to_owned()
            };
            return Err(ClusterError::SkewUnavailable(why));
        }
        write_skew_file(&node.skew_file, ms)?;
        node.state().skew_ms = ms;
        Ok(())
    }

    /// Undoes every fault: opens every link, resumes paused nodes, removes clock skew, restarts
    /// the nodes that are down (killed or crashed) and waits until they serve, and readmits the
    /// nodes [`Cluster::remove`] took out of a group. Every step is tried even when an earlier
    /// one failed.
    ///
    /// # Errors
    ///
    /// The first step that failed, with how many did.
    pub async fn heal_all(&self) -> Result<(), ClusterError> {
        let mut errors = Vec::new();
        self.links.heal_all();
        for id in self.paused() {
            if let Err(error) = self.resume(id).await {
                errors.push(error);
            }
        }
        for (id, skew) in self.skews() {
            if skew != 0
                && let Err(error) = self.skew(id, 0)
            {
                errors.push(error);
            }
        }
        // A crashed node is recorded (see `crashes`) before it is started again.
        let _ = self.check_alive();
        let down = self.down();
        if !down.is_empty()
            && let Err(error) = self.restart_all(&down).await
        {
            errors.push(error);
        }
        let removed: Vec<(GroupId, NodeId)> =
            self.removed.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().collect();
        for (group, id) in removed {
            if let Err(error) = self.readmit(group, id).await {
                errors.push(error);
            }
        }
        let count = errors.len();
        match errors.into_iter().next() {
            None => Ok(()),
            Some(first) if count == 1 => Err(first),
            Some(first) => Err(ClusterError::Invalid(format!(
                "{count} healing steps failed; the first: {first}"
            ))),
        }
    }

    /// Node `id`'s status (with each group's digest if `with_digest`), one short attempt.
    ///
    /// # Errors
    ///
    /// When the node does not answer within a second.
    pub async fn status(&self, id: NodeId, with_digest: bool) -> Result<StatusReply, ClusterError> {
        let address = self.address(id)?;
        Ok(self.status_client.status(&address, with_digest).await?)
    }

    /// Node `id`'s status of `group`.
    ///
    /// # Errors
    ///
    /// When the node does not answer, or does not host the group.
    pub async fn group_status(
        &self,
        id: NodeId,
        group: GroupId,
        with_digest: bool,
    ) -> Result<GroupStatus, ClusterError> {
        let reply = self.status(id, with_digest).await?;
        reply.groups.into_iter().find(|status| status.group_id == group).ok_or_else(|| {
            ClusterError::WrongState { node: id, state: format!("reports no group {group}") }
        })
    }

    /// The statuses of every node of `among`, asked concurrently; a node that did not answer
    /// maps to why.
    async fn statuses(
        &self,
        among: &[NodeId],
        with_digest: bool,
    ) -> BTreeMap<NodeId, Result<StatusReply, String>> {
        let mut calls = JoinSet::new();
        for &id in among {
            let Ok(address) = self.address(id) else { continue };
            let client = self.status_client.clone();
            calls.spawn(async move {
                let reply = client.status(&address, with_digest).await;
                (id, reply.map_err(|error| error.to_string()))
            });
        }
        let mut statuses = BTreeMap::new();
        while let Some(joined) = calls.join_next().await {
            if let Ok((id, reply)) = joined {
                statuses.insert(id, reply);
            }
        }
        statuses
    }

    /// Every running node's view of `group`, digest included (a paused node's entry says that
    /// it did not answer).
    pub async fn digests(&self, group: GroupId) -> BTreeMap<NodeId, Result<GroupStatus, String>> {
        let statuses = self.statuses(&self.running(), true).await;
        statuses
            .into_iter()
            .map(|(id, reply)| {
                let view = reply.and_then(|reply| {
                    reply
                        .groups
                        .into_iter()
                        .find(|status| status.group_id == group)
                        .ok_or_else(|| format!("reports no group {group}"))
                });
                (id, view)
            })
            .collect()
    }

    /// Waits (until [`ClusterOptions::wait`]) for a node to lead `group` as a majority of its
    /// voters reports, among the nodes that can answer, and returns it.
    ///
    /// # Errors
    ///
    /// When no leader is agreed on in time, or a node crashed.
    pub async fn leader_of(&self, group: GroupId) -> Result<NodeId, ClusterError> {
        self.leader_within(group, self.options.wait).await
    }

    /// As [`Cluster::leader_of`], waiting at most `within`.
    ///
    /// # Errors
    ///
    /// As [`Cluster::leader_of`].
    pub async fn leader_within(
        &self,
        group: GroupId,
        within: Duration,
    ) -> Result<NodeId, ClusterError> {
        let waiting = Waiting::new(format!("a leader of group {group}"), within);
        loop {
            self.check_alive()?;
            let views = self.group_views(group, &self.available(), false).await;
            match agreed_leader(&views) {
                Some(leader) => return Ok(leader),
                None => waiting.again(describe_views(&views)).await?,
            }
        }
    }

    /// The nodes of `among` that answered, with their view of `group`.
    async fn group_views(
        &self,
        group: GroupId,
        among: &[NodeId],
        with_digest: bool,
    ) -> BTreeMap<NodeId, GroupStatus> {
        let statuses = self.statuses(among, with_digest).await;
        statuses
            .into_iter()
            .filter_map(|(id, reply)| {
                let reply = reply.ok()?;
                let view = reply.groups.into_iter().find(|status| status.group_id == group)?;
                Some((id, view))
            })
            .collect()
    }

    /// Waits (until `within`) until every member of `group`'s membership (as its agreed leader
    /// reports it) answers with the same applied index and digest as the leader, with the
    /// leader's commit applied. Fails at once if two replicas ever report different digests at
    /// the same applied index.
    ///
    /// Reference: Raft §5.3 (State Machine Safety: replicas that applied the same log prefix
    /// are in the same state), shared/DESIGN.md "The state machine" (deterministic apply).
    ///
    /// # Errors
    ///
    /// [`ClusterError::Diverged`], or [`ClusterError::Timeout`] when they do not converge.
    pub async fn wait_converged(
        &self,
        group: GroupId,
        within: Duration,
    ) -> Result<Converged, ClusterError> {
        let mut seen: BTreeMap<u64, (NodeId, String)> = BTreeMap::new();
        let waiting = Waiting::new(format!("group {group}'s replicas to converge"), within);
        loop {
            self.check_alive()?;
            let views = self.group_views(group, &self.available(), true).await;
            for (&id, view) in &views {
                if view.fatal {
                    return Err(ClusterError::WrongState {
                        node: id,
                        state: format!("stopped group {group} on a fatal error"),
                    });
                }
                if view.digest.is_empty() {
                    continue;
                }
                let first =
                    seen.entry(view.digest_index).or_insert_with(|| (id, view.digest.clone()));
                if first.1 != view.digest {
                    return Err(ClusterError::Diverged {
                        group,
                        index: view.digest_index,
                        detail: format!(
                            "node {} has {}, node {id} has {}",
                            first.0, first.1, view.digest
                        ),
                    });
                }
            }
            match converged_group(&views) {
                Ok(converged) => return Ok(converged),
                Err(reason) => waiting.again(reason).await?,
            }
        }
    }

    /// Removes node `id` from `group`'s membership (voter or learner). The change is
    /// remembered until [`Cluster::readmit`] restores it (also when the call's outcome is
    /// unknown), so that [`Cluster::heal_all`] can.
    ///
    /// # Errors
    ///
    /// The SDK's error: `Rejected` (not applied), `Unavailable` (maybe applied).
    pub async fn remove(
        &self,
        group: GroupId,
        id: NodeId,
    ) -> Result<MembershipReply, ClusterError> {
        self.node(id)?;
        self.removed.lock().unwrap_or_else(PoisonError::into_inner).insert((group, id));
        Ok(self.admin.remove(group, &[id]).await?)
    }

    /// Makes node `id` a voter of `group` again, the way `bookctl member readmit` does, from
    /// wherever the membership stands: added as a learner (waiting until it caught up) unless
    /// it is one, then promoted unless it is a voter already.
    ///
    /// # Errors
    ///
    /// When no leader is agreed on, or a membership call fails.
    pub async fn readmit(
        &self,
        group: GroupId,
        id: NodeId,
    ) -> Result<MembershipReply, ClusterError> {
        let address = self.address(id)?;
        let leader = self.leader_of(group).await?;
        let view = self.group_status(leader, group, false).await?;
        let reply = if view.voters.contains(&id) {
            MembershipReply {
                group_id: group,
                leader_id: leader,
                voters: view.voters,
                learners: view.learners,
                log_index: 0,
            }
        } else {
            if !view.learners.contains(&id) {
                self.admin.add_learner(group, id, &address, true).await?;
            }
            self.admin.promote(group, &[id]).await?
        };
        self.removed.lock().unwrap_or_else(PoisonError::into_inner).remove(&(group, id));
        Ok(reply)
    }

    /// The memberships [`Cluster::remove`] changed that are not restored yet, as
    /// `(group, node)`.
    pub fn removed(&self) -> Vec<(GroupId, NodeId)> {
        self.removed.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().collect()
    }

    /// Hands `group`'s leadership to voter `to`.
    ///
    /// # Errors
    ///
    /// The SDK's error (`Rejected` when `to` is not a voter, `Unavailable`).
    pub async fn transfer_leader(
        &self,
        group: GroupId,
        to: NodeId,
    ) -> Result<MembershipReply, ClusterError> {
        self.node(to)?;
        Ok(self.admin.transfer_leader(group, to).await?)
    }

    /// Kills every node the cluster started and still runs (paused ones too), by its own
    /// handle, and reaps it; nothing is started again afterwards. Links stay as they are.
    pub async fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        for node in self.nodes.values() {
            let _operation = node.operation.lock().await;
            let child = node.state().child.take();
            if let Some(mut child) = child {
                self.forget_faketime_files(&child);
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            node.state().paused = false;
        }
    }

    /// Removes the names of the shared memory and semaphore libfaketime made for `child`
    /// (`/dev/shm/faketime_shm_<pid>`, `/dev/shm/sem.faketime_sem_<pid>`): it removes them
    /// itself only on a clean exit, which SIGKILL never is, and a leftover name makes a later
    /// process with the same pid fail to start under libfaketime. Called before the child is
    /// killed, while the pid is certainly still this child's (unreaped), so that no other
    /// process's files are ever touched; the process keeps its mapping.
    fn forget_faketime_files(&self, child: &Child) {
        if self.faketime.is_none() {
            return;
        }
        let Some(pid) = child.id() else { return };
        for name in [format!("faketime_shm_{pid}"), format!("sem.faketime_sem_{pid}")] {
            let path = Path::new("/dev/shm").join(name);
            if let Err(error) = fs::remove_file(&path)
                && error.kind() != io::ErrorKind::NotFound
            {
                tracing::debug!(path = %path.display(), %error, "cannot remove a libfaketime file");
            }
        }
    }
}

impl Drop for Cluster {
    /// Kills every process still running (a runner that failed before [`Cluster::stop`]);
    /// tokio reaps them.
    fn drop(&mut self) {
        for node in self.nodes.values() {
            let child = node.state().child.take();
            if let Some(mut child) = child {
                self.forget_faketime_files(&child);
                let _ = child.start_kill();
            }
        }
    }
}

/// The node that leads, according to `views` (node → its view of one group): it says it
/// leads, and a majority of its voters (itself included) name it as leader.
fn agreed_leader(views: &BTreeMap<NodeId, GroupStatus>) -> Option<NodeId> {
    views.iter().find_map(|(&id, status)| {
        if status.role != "leader" || status.leader_id != id {
            return None;
        }
        let agreeing = status
            .voters
            .iter()
            .filter(|voter| views.get(voter).is_some_and(|view| view.leader_id == id))
            .count();
        (agreeing * 2 > status.voters.len()).then_some(id)
    })
}

/// The views of one group, for a timeout's message.
fn describe_views(views: &BTreeMap<NodeId, GroupStatus>) -> String {
    let views: Vec<String> = views
        .iter()
        .map(|(id, view)| {
            format!("{id}: {} leader={} term={}", view.role, view.leader_id, view.term)
        })
        .collect();
    format!("views: {views:?}")
}

/// Whether one group's members agree: see [`Cluster::wait_converged`].
fn converged_group(views: &BTreeMap<NodeId, GroupStatus>) -> Result<Converged, String> {
    let leader = agreed_leader(views)
        .ok_or_else(|| format!("no agreed leader; {}", describe_views(views)))?;
    let leader_view = &views[&leader];
    if leader_view.applied_index != leader_view.committed_index {
        return Err(format!(
            "leader {leader} applied {} of {} committed",
            leader_view.applied_index, leader_view.committed_index
        ));
    }
    let mut members: Vec<NodeId> =
        leader_view.voters.iter().chain(&leader_view.learners).copied().collect();
    members.sort_unstable();
    members.dedup();
    for member in &members {
        let Some(view) = views.get(member) else {
            return Err(format!("member {member} does not answer"));
        };
        if view.digest_index != leader_view.digest_index || view.digest != leader_view.digest {
            return Err(format!(
                "member {member} at {} (applied {}), leader {leader} at {} (applied {})",
                view.digest_index,
                view.applied_index,
                leader_view.digest_index,
                leader_view.applied_index
            ));
        }
    }
    Ok(Converged {
        applied_index: leader_view.digest_index,
        digest: leader_view.digest.clone(),
        members,
    })
}

/// Removes the libfaketime files of processes that no longer exist, whoever started them (a
/// node that crashed, a runner that was killed before it could kill its nodes): libfaketime
/// creates `/dev/shm/faketime_shm_<pid>` (and its semaphore) exclusively at start, so a
/// leftover name makes the next process that gets the same pid (pids wrap at 32768 here) exit
/// at once. Only names of exactly that form whose pid has no `/proc` entry are removed, as
/// libfaketime's README advises; a process alive under that pid keeps its files.
fn sweep_stale_faketime_files() {
    let Ok(entries) = fs::read_dir("/dev/shm") else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let pid = name
            .strip_prefix("faketime_shm_")
            .or_else(|| name.strip_prefix("sem.faketime_sem_"))
            .filter(|pid| !pid.is_empty() && pid.bytes().all(|byte| byte.is_ascii_digit()));
        let Some(pid) = pid else { continue };
        if !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The text of a skew file: libfaketime's relative offset, in seconds with milliseconds.
pub fn skew_text(ms: i64) -> String {
    if ms == 0 {
        return "+0".to_owned();
    }
    let sign = if ms < 0 { '-' } else { '+' };
    let magnitude = ms.unsigned_abs();
    format!("{sign}{}.{:03}", magnitude / 1_000, magnitude % 1_000)
}

/// Writes a skew file whole: to a temporary file renamed over it, so that libfaketime never
/// reads half of one.
fn write_skew_file(path: &Path, ms: i64) -> Result<(), ClusterError> {
    let temporary = path.with_extension("new");
    fs::write(&temporary, format!("{}\n", skew_text(ms)))
        .map_err(ClusterError::io(format!("write {}", temporary.display())))?;
    fs::rename(&temporary, path).map_err(ClusterError::io(format!("rename to {}", path.display())))
}

/// Opens `path` for appending, creating it.
fn append(path: &Path) -> Result<File, ClusterError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(ClusterError::io(format!("open {}", path.display())))
}

/// A wait for a condition, polled every [`POLL`] until a deadline.
///
/// A plain loop around [`Waiting::again`] rather than a helper taking an async closure: the
/// futures of such closures are not provably `Send`, and a runner spawns what waits here.
struct Waiting {
    what: String,
    within: Duration,
    deadline: Instant,
}

impl Waiting {
    /// Starts waiting `within` for `what`.
    fn new(what: String, within: Duration) -> Waiting {
        Waiting { what, within, deadline: Instant::now() + within }
    }

    /// Sleeps one [`POLL`] before the next check, or fails with the last reason the condition
    /// was not true once the deadline has passed.
    async fn again(&self, last: String) -> Result<(), ClusterError> {
        if Instant::now() >= self.deadline {
            return Err(ClusterError::Timeout {
                what: self.what.clone(),
                within: self.within,
                last,
            });
        }
        tokio::time::sleep(POLL).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_files_hold_libfaketime_offsets_in_seconds() {
        assert_eq!(skew_text(0), "+0");
        assert_eq!(skew_text(1_500), "+1.500");
        assert_eq!(skew_text(-30_000), "-30.000");
        assert_eq!(skew_text(-7), "-0.007");
    }

    #[test]
    fn nodes_get_their_own_loopback_address_and_links_their_own_port() {
        let options = ClusterOptions::new(5, "/nonexistent");
        assert_eq!(options.ip(1).ok(), Some(Ipv4Addr::new(127, 0, 0, 11)));
        assert_eq!(options.ip(5).ok(), Some(Ipv4Addr::new(127, 0, 0, 15)));
        assert!(options.ip(245).is_err(), "127.0.0.255 is no node's address");
        assert_eq!(options.port(3).ok(), Some(7303));
        let high = ClusterOptions { port_base: 65_534, ..options };
        assert!(high.port(2).is_err());
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

    fn view(role: &str, leader: NodeId, voters: &[NodeId]) -> GroupStatus {
        GroupStatus {
            role: role.to_owned(),
            leader_id: leader,
            voters: voters.to_vec(),
            ..GroupStatus::default()
        }
    }

    #[test]
    fn a_leader_counts_only_when_a_majority_of_its_voters_name_it() {
        let voters = [1, 2, 3];
        let mut views = BTreeMap::new();
        views.insert(1, view("leader", 1, &voters));
        assert_eq!(agreed_leader(&views), None, "one vote of three");
        views.insert(2, view("follower", 1, &voters));
        assert_eq!(agreed_leader(&views), Some(1));
        // A deposed leader that still believes it leads, and the majority's new leader.
        views.insert(2, view("leader", 2, &voters));
        views.insert(3, view("follower", 2, &voters));
        assert_eq!(agreed_leader(&views), Some(2));
    }
}
