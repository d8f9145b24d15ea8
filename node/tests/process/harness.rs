//! A cluster of real `bookingd` processes on loopback for the tests: each node has its own data
//! directory and log files in a temporary directory, reaches its peers through a [`Links`] mesh
//! of fault proxies, and can be killed (SIGKILL), restarted, wiped, or joined by a node outside
//! the initial set. Helpers ask the nodes for their status, find a group's leader, and wait for
//! conditions with a deadline, never a fixed sleep.
//!
//! Only the children this harness spawned are ever killed, by their own handle (pid), and all of
//! them are killed when the cluster is dropped. A cluster dropped without
//! [`ProcessCluster::shutdown`] (a failed test) prints the tail of every node's log and keeps
//! its directory. Clusters of one test binary run one at a time (the machine has two cores, and
//! elections with timeouts of a second do not survive four clusters competing for them). Owns
//! no assertion about the cluster: the tests do.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::net::{SocketAddr, TcpListener};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use proto::booking::{GroupStatus, StatusReply};
use tokio::sync::MutexGuard;
use tokio::time::Instant;

use crate::client::{Channels, Client, describe};
use crate::proxy::Links;

/// A node's id, the same in every group.
pub type NodeId = u64;

/// A Raft group's id: 0 is the metadata group, `1..=groups` hold shows.
pub type GroupId = u64;

/// How long any awaited condition may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// How often a polled condition is checked.
const POLL: Duration = Duration::from_millis(50);

/// How long one Status call may take.
const STATUS_MAX: Duration = Duration::from_secs(2);

/// How many lines of each node's log a failed test prints.
const LOG_TAIL_LINES: usize = 40;

/// The nodes' log filter unless `RUST_LOG` says otherwise: the daemon's own events, and only
/// openraft's warnings (its info lines, one per snapshot or membership step, would fill the tail
/// a failed test prints).
const LOG_FILTER: &str = "info,openraft=warn";

/// What a node prints on stdout once it serves.
const LISTENING: &str = "listening=";

/// Held by the cluster of the running test: clusters of this binary run one at a time.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How the nodes are started.
#[derive(Clone, Debug)]
pub struct Options {
    /// Data groups (`--groups`).
    pub groups: u64,
    /// Voters of each data group (`--replicas`).
    pub replicas: u64,
    /// Entries between snapshots (`--snapshot-logs`); the daemon's default if `None`.
    pub snapshot_logs: Option<u64>,
    /// Raft heartbeat interval (`--heartbeat-ms`).
    pub heartbeat_ms: u64,
    /// Shortest election timeout (`--election-min-ms`).
    pub election_min_ms: u64,
    /// Longest election timeout (`--election-max-ms`).
    pub election_max_ms: u64,
    /// The operator credential (`--operator-token`); operator calls are open if `None`.
    pub operator_token: Option<String>,
    /// The payment webhook secret (`--webhook-secret`); the daemon's development secret if
    /// `None`.
    pub webhook_secret: Option<String>,
    /// Requests per second one session may make (`--rate-per-session`); the daemon's default
    /// if `None`.
    pub rate_per_session: Option<u32>,
}

impl Default for Options {
    /// Two data groups of three replicas, the daemon's Raft timing (150 ms heartbeats, elections
    /// after 600-1200 ms): short enough for quick failover, long enough for a busy machine.
    fn default() -> Options {
        Options {
            groups: 2,
            replicas: 3,
            snapshot_logs: None,
            heartbeat_ms: 150,
            election_min_ms: 600,
            election_max_ms: 1_200,
            operator_token: None,
            webhook_secret: None,
            rate_per_session: None,
        }
    }
}

/// One node: where it listens, its files, and its process while it runs.
struct NodeProcess {
    id: NodeId,
    listen: SocketAddr,
    data: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
    /// Its address book: `ID=HOST:PORT` of every peer (through the proxies for the initial
    /// nodes).
    peers: String,
    /// The running process; behind a lock so that wait loops (which share the cluster) can
    /// notice that it exited.
    child: Mutex<Option<Child>>,
    /// How many times it was started.
    starts: u32,
}

impl NodeProcess {
    fn child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        // Each change is a single assignment: a panic elsewhere cannot leave it half-made.
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
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

/// A cluster of `bookingd` processes. See the module docs.
pub struct ProcessCluster {
    options: Options,
    nodes: BTreeMap<NodeId, NodeProcess>,
    links: Links,
    channels: Channels,
    /// A client of every node, for the status calls.
    admin: Client,
    dir: Option<tempfile::TempDir>,
    /// Whether the test got to [`ProcessCluster::shutdown`].
    finished: bool,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl ProcessCluster {
    /// Starts nodes `1..=n` with `options`, founding the cluster (`--bootstrap`), each
    /// dialing its peers through its own proxies, and waits until every group has a leader.
    ///
    /// # Errors
    ///
    /// When a node cannot be started or does not serve, or a group elects no leader, within
    /// [`WAIT`].
    pub async fn start(n: u64, options: Options) -> io::Result<ProcessCluster> {
        let one_at_a_time = ONE_CLUSTER_AT_A_TIME.lock().await;
        let dir = tempfile::Builder::new().prefix("bookingd-process-").tempdir()?;
        // The ports stay bound until each node is spawned, so that no proxy takes one.
        let mut ports = BTreeMap::new();
        for id in 1..=n {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            ports.insert(id, listener);
        }
        let mut addresses = BTreeMap::new();
        for (&id, listener) in &ports {
            addresses.insert(id, listener.local_addr()?);
        }
        let links = Links::start(&addresses).await?;
        let channels = Channels::default();
        let admin =
            Client::new(addresses.values().map(ToString::to_string).collect(), channels.clone());
        let mut cluster = ProcessCluster {
            options,
            nodes: BTreeMap::new(),
            links,
            channels,
            admin,
            dir: Some(dir),
            finished: false,
            _one_at_a_time: one_at_a_time,
        };
        for (&id, &listen) in &addresses {
            let peers = addresses
                .keys()
                .map(|&peer| {
                    let via =
                        if peer == id { Some(listen) } else { cluster.links.address(id, peer) };
                    via.map(|address| format!("{peer}={address}"))
                        .ok_or_else(|| io::Error::other(format!("no link {id} -> {peer}")))
                })
                .collect::<io::Result<Vec<_>>>()?
                .join(",");
            cluster.add_node(id, listen, peers)?;
        }
        let started = Instant::now();
        for id in 1..=n {
            drop(ports.remove(&id));
            cluster.spawn(id, true)?;
        }
        for id in 1..=n {
            cluster.wait_serving(id).await?;
        }
        for group in cluster.group_ids() {
            let leader = cluster.leader_of(group).await?;
            println!("group {group}: node {leader} leads, {:?} after start", started.elapsed());
        }
        Ok(cluster)
    }

    /// Records node `id` (not started) with its files under the cluster's directory.
    fn add_node(&mut self, id: NodeId, listen: SocketAddr, peers: String) -> io::Result<()> {
        let root = self.root()?.to_path_buf();
        let node = NodeProcess {
            id,
            listen,
            data: root.join(format!("node-{id}")),
            stdout: root.join(format!("node-{id}.stdout")),
            stderr: root.join(format!("node-{id}.log")),
            peers,
            child: Mutex::new(None),
            starts: 0,
        };
        self.nodes.insert(id, node);
        Ok(())
    }

    /// The cluster's temporary directory.
    fn root(&self) -> io::Result<&Path> {
        self.dir.as_ref().map(tempfile::TempDir::path).ok_or_else(|| io::Error::other("no dir"))
    }

    /// Every group of the cluster: the metadata group 0 and the data groups.
    pub fn group_ids(&self) -> RangeInclusive<GroupId> {
        0..=self.options.groups
    }

    /// The proxies between the initial nodes.
    pub fn links(&self) -> &Links {
        &self.links
    }

    fn node(&self, id: NodeId) -> io::Result<&NodeProcess> {
        self.nodes.get(&id).ok_or_else(|| io::Error::other(format!("no node {id}")))
    }

    fn node_mut(&mut self, id: NodeId) -> io::Result<&mut NodeProcess> {
        self.nodes.get_mut(&id).ok_or_else(|| io::Error::other(format!("no node {id}")))
    }

    /// The address node `id` serves its API on (and advertises).
    ///
    /// # Panics
    ///
    /// If the cluster has no node `id` (a mistake in the test).
    pub fn address(&self, id: NodeId) -> String {
        match self.nodes.get(&id) {
            Some(node) => node.listen.to_string(),
            None => panic!("no node {id}"),
        }
    }

    /// A client of every node the cluster has (running or not).
    pub fn client(&self) -> Client {
        self.client_of(&self.nodes.keys().copied().collect::<Vec<_>>())
    }

    /// A client that only talks to nodes `ids` (and follows no leader hint to another node).
    pub fn client_of(&self, ids: &[NodeId]) -> Client {
        let addresses = ids.iter().map(|&id| self.address(id)).collect();
        Client::new(addresses, self.channels.clone())
    }

    /// The nodes whose process runs (as far as the harness started and did not kill them).
    pub fn running(&self) -> Vec<NodeId> {
        self.nodes.values().filter(|node| node.child().is_some()).map(|node| node.id).collect()
    }

    /// Spawns node `id`'s process, with `--bootstrap` if `bootstrap`, its output appended to its
    /// files after a line that says which start this is.
    fn spawn(&mut self, id: NodeId, bootstrap: bool) -> io::Result<()> {
        let options = self.options.clone();
        let node = self.node_mut(id)?;
        if node.child().is_some() {
            return Err(io::Error::other(format!("node {id} already runs")));
        }
        node.starts += 1;
        let mut command = Command::new(env!("CARGO_BIN_EXE_bookingd"));
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
            .arg(options.election_max_ms.to_string());
        if let Some(entries) = options.snapshot_logs {
            command.arg("--snapshot-logs").arg(entries.to_string());
        }
        if let Some(token) = &options.operator_token {
            command.arg("--operator-token").arg(token);
        }
        if let Some(secret) = &options.webhook_secret {
            command.arg("--webhook-secret").arg(secret);
        }
        if let Some(rate) = options.rate_per_session {
            command.arg("--rate-per-session").arg(rate.to_string());
        }
        if bootstrap {
            command.arg("--bootstrap");
        }
        let banner = format!("===== start {} of node {id}: {command:?}\n", node.starts);
        let mut stdout = append(&node.stdout)?;
        let mut stderr = append(&node.stderr)?;
        stdout.write_all(banner.as_bytes())?;
        stderr.write_all(banner.as_bytes())?;
        let log_filter = std::env::var("RUST_LOG").unwrap_or_else(|_| LOG_FILTER.to_owned());
        let child = command
            .env("RUST_LOG", log_filter)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()?;
        *node.child() = Some(child);
        Ok(())
    }

    /// Waits (until [`WAIT`]) for node `id`'s latest start to print that it serves.
    async fn wait_serving(&self, id: NodeId) -> io::Result<()> {
        let node = self.node(id)?;
        let banner = format!("===== start {} of node {id}:", node.starts);
        wait_for(&format!("node {id} to serve"), WAIT, async || {
            self.check_alive()?;
            let text = fs::read_to_string(&node.stdout)?;
            let latest = text.rsplit_once(&banner).map_or("", |(_, after)| after);
            Ok(if latest.contains(LISTENING) {
                Ok(())
            } else {
                Err(format!("no `{LISTENING}` line on stdout yet"))
            })
        })
        .await
    }

    /// Kills node `id` with SIGKILL (no chance to flush or say goodbye) and reaps it.
    ///
    /// # Errors
    ///
    /// When it does not run.
    pub fn kill(&mut self, id: NodeId) -> io::Result<()> {
        let node = self.node_mut(id)?;
        let Some(mut child) = node.child().take() else {
            return Err(io::Error::other(format!("node {id} does not run")));
        };
        // `Child::kill` sends SIGKILL on unix, to this child's pid only.
        child.kill()?;
        child.wait()?;
        Ok(())
    }

    /// Starts node `id` again on its data (without `--bootstrap`) and waits until it serves.
    ///
    /// # Errors
    ///
    /// When it runs already, or does not serve within [`WAIT`].
    pub async fn restart(&mut self, id: NodeId) -> io::Result<()> {
        self.spawn(id, false)?;
        self.wait_serving(id).await
    }

    /// Starts nodes `ids` again on their data, all at once, and waits until each serves.
    ///
    /// # Errors
    ///
    /// As [`ProcessCluster::restart`].
    pub async fn restart_all(&mut self, ids: &[NodeId]) -> io::Result<()> {
        for &id in ids {
            self.spawn(id, false)?;
        }
        for &id in ids {
            self.wait_serving(id).await?;
        }
        Ok(())
    }

    /// Deletes node `id`'s data directory; the node must be stopped.
    ///
    /// # Errors
    ///
    /// When it runs, or the directory cannot be removed.
    pub fn wipe(&mut self, id: NodeId) -> io::Result<()> {
        let node = self.node(id)?;
        if node.child().is_some() {
            return Err(io::Error::other(format!("node {id} runs: kill it before wiping it")));
        }
        match fs::remove_dir_all(&node.data) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }

    /// Starts node `id`, not one of the initial nodes, on a fresh port with an empty database:
    /// it hosts no group until an operator adds it. It dials the initial nodes directly (no
    /// proxy), and they dial it at the address its membership carries.
    ///
    /// # Errors
    ///
    /// When `id` is taken, or the node does not serve within [`WAIT`].
    pub async fn start_extra(&mut self, id: NodeId) -> io::Result<()> {
        if self.nodes.contains_key(&id) {
            return Err(io::Error::other(format!("node {id} exists already")));
        }
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let listen = listener.local_addr()?;
        let mut peers: Vec<String> =
            self.nodes.values().map(|node| format!("{}={}", node.id, node.listen)).collect();
        peers.push(format!("{id}={listen}"));
        self.add_node(id, listen, peers.join(","))?;
        drop(listener);
        self.spawn(id, false)?;
        self.wait_serving(id).await
    }

    /// Fails if a node the harness started has exited by itself (crashed), with its log's tail.
    ///
    /// # Errors
    ///
    /// When a node exited.
    pub fn check_alive(&self) -> io::Result<()> {
        for node in self.nodes.values() {
            let exited = match node.child().as_mut() {
                Some(child) => child.try_wait()?,
                None => None,
            };
            if let Some(status) = exited {
                return Err(io::Error::other(format!(
                    "node {} exited by itself ({status})\n{}",
                    node.id,
                    node.log_tail(LOG_TAIL_LINES)
                )));
            }
        }
        Ok(())
    }

    /// Node `id`'s status (with each group's digest if `with_digest`), one attempt.
    ///
    /// # Errors
    ///
    /// When the node does not answer within a couple of seconds.
    pub async fn status(&self, id: NodeId, with_digest: bool) -> io::Result<StatusReply> {
        self.admin
            .status_of(&self.address(id), with_digest, STATUS_MAX)
            .await
            .map_err(|status| io::Error::other(format!("node {id} status: {}", describe(&status))))
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
    ) -> io::Result<GroupStatus> {
        let reply = self.status(id, with_digest).await?;
        reply
            .groups
            .into_iter()
            .find(|status| status.group_id == group)
            .ok_or_else(|| io::Error::other(format!("node {id} reports no group {group}")))
    }

    /// Waits (until [`WAIT`]) for a running node to lead `group` as a majority of its voters
    /// reports, and returns it.
    ///
    /// # Errors
    ///
    /// When no leader is agreed on in time, or a node crashed.
    pub async fn leader_of(&self, group: GroupId) -> io::Result<NodeId> {
        self.leader_among(group, &self.running()).await
    }

    /// As [`ProcessCluster::leader_of`], asking only nodes `among` (say, a majority cut off
    /// from an old leader that still believes it leads).
    ///
    /// # Errors
    ///
    /// As [`ProcessCluster::leader_of`].
    pub async fn leader_among(&self, group: GroupId, among: &[NodeId]) -> io::Result<NodeId> {
        wait_for(&format!("a leader of group {group} among {among:?}"), WAIT, async || {
            self.check_alive()?;
            let mut statuses = BTreeMap::new();
            for &id in among {
                if let Ok(status) = self.group_status(id, group, false).await {
                    statuses.insert(id, status);
                }
            }
            Ok(agreed_leader(&statuses).ok_or_else(|| {
                let views: Vec<String> = statuses
                    .iter()
                    .map(|(id, s)| {
                        format!("{id}: {} leader={} term={}", s.role, s.leader_id, s.term)
                    })
                    .collect();
                format!("views: {views:?}")
            }))
        })
        .await
    }

    /// Kills every node, marks the test as finished (so nothing is printed) and deletes the
    /// cluster's directory.
    ///
    /// # Errors
    ///
    /// When a node exited by itself before (a crash the test did not notice).
    pub fn shutdown(mut self) -> io::Result<()> {
        let crashed = self.check_alive();
        self.kill_all();
        crashed?;
        self.finished = true;
        Ok(())
    }

    /// Kills every node the harness started and still runs, by its own handle.
    fn kill_all(&mut self) {
        for node in self.nodes.values() {
            if let Some(mut child) = node.child().take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        self.kill_all();
        if self.finished {
            return;
        }
        // A failed test: show what the nodes said, and keep their files.
        for node in self.nodes.values() {
            eprintln!("{}", node.log_tail(LOG_TAIL_LINES));
        }
        if let Some(dir) = self.dir.take() {
            eprintln!("cluster files kept in {}", dir.keep().display());
        }
    }
}

/// The node that leads, according to `statuses` (node → its view of one group): it says it
/// leads, and a majority of its voters (itself included) name it as leader.
fn agreed_leader(statuses: &BTreeMap<NodeId, GroupStatus>) -> Option<NodeId> {
    statuses.iter().find_map(|(&id, status)| {
        if status.role != "leader" || status.leader_id != id {
            return None;
        }
        let agreeing = status
            .voters
            .iter()
            .filter(|voter| statuses.get(voter).is_some_and(|view| view.leader_id == id))
            .count();
        (agreeing * 2 > status.voters.len()).then_some(id)
    })
}

/// Opens `path` for appending, creating it.
fn append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Calls `check` every [`POLL`] until it answers `Ok(Ok(value))`, and returns the value; fails
/// at once if it answers `Err`, and after `within` with the last reason it gave for waiting
/// (`Ok(Err(reason))`).
///
/// # Errors
///
/// `check`'s error, or a timeout naming `what` and the last reason.
pub async fn wait_for<T>(
    what: &str,
    within: Duration,
    mut check: impl AsyncFnMut() -> io::Result<Result<T, String>>,
) -> io::Result<T> {
    let deadline = Instant::now() + within;
    loop {
        let reason = match check().await? {
            Ok(value) => return Ok(value),
            Err(reason) => reason,
        };
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!("waited {within:?} for {what}; last: {reason}")));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What every replica of one group reported once they agreed.
#[derive(Clone, Debug)]
pub struct Converged {
    /// The applied index every member reached.
    pub applied_index: u64,
    /// The digest of the state at that index.
    pub digest: String,
    /// The members (voters and learners) that reported it.
    pub members: Vec<NodeId>,
}

/// Waits (until [`WAIT`]) until, for every group, every member of the group's current
/// membership (as its leader reports it) runs and reports the same applied index as the leader,
/// with the leader's commit applied, and checks that their digests are equal. Fails at once if
/// two replicas ever report different digests at the same applied index, or a group stopped on
/// a fatal error.
///
/// Reference: Raft §5.3 (State Machine Safety: replicas that applied the same log prefix are in
/// the same state), shared/DESIGN.md "The state machine" (deterministic apply).
///
/// # Errors
///
/// When the replicas diverge or do not converge in time.
pub async fn assert_converged(
    cluster: &ProcessCluster,
) -> io::Result<BTreeMap<GroupId, Converged>> {
    // Every digest seen, by group and index, with the node that reported it first.
    let mut seen: BTreeMap<(GroupId, u64), (NodeId, String)> = BTreeMap::new();
    let started = Instant::now();
    let converged = wait_for("every group's replicas to converge", WAIT, async || {
        cluster.check_alive()?;
        let mut views: BTreeMap<GroupId, BTreeMap<NodeId, GroupStatus>> = BTreeMap::new();
        for id in cluster.running() {
            let Ok(reply) = cluster.status(id, true).await else { continue };
            for status in reply.groups {
                if status.fatal {
                    return Err(io::Error::other(format!(
                        "node {id}: group {} stopped on a fatal error: {status:?}",
                        status.group_id
                    )));
                }
                if !status.digest.is_empty() {
                    let key = (status.group_id, status.digest_index);
                    let first = seen.entry(key).or_insert_with(|| (id, status.digest.clone()));
                    if first.1 != status.digest {
                        return Err(io::Error::other(format!(
                            "group {} diverges at applied index {}: node {} has {}, node {id} has {}",
                            status.group_id, status.digest_index, first.0, first.1, status.digest
                        )));
                    }
                }
                views.entry(status.group_id).or_default().insert(id, status);
            }
        }
        let mut result = BTreeMap::new();
        for group in cluster.group_ids() {
            let Some(statuses) = views.get(&group) else {
                return Ok(Err(format!("no node reports group {group}")));
            };
            match converged_group(statuses) {
                Ok(converged) => result.insert(group, converged),
                Err(reason) => return Ok(Err(format!("group {group}: {reason}"))),
            };
        }
        Ok(Ok(result))
    })
    .await?;
    for (group, state) in &converged {
        println!(
            "group {group}: members {:?} converged at applied index {} digest {} ({:?})",
            state.members,
            state.applied_index,
            &state.digest[..state.digest.len().min(16)],
            started.elapsed()
        );
    }
    Ok(converged)
}

/// Whether one group's members agree: see [`assert_converged`].
fn converged_group(statuses: &BTreeMap<NodeId, GroupStatus>) -> Result<Converged, String> {
    let leader = agreed_leader(statuses).ok_or("no agreed leader")?;
    let leader_view = &statuses[&leader];
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
        let Some(view) = statuses.get(member) else {
            return Err(format!("member {member} does not answer"));
        };
        if view.digest_index != leader_view.digest_index || view.digest != leader_view.digest {
            return Err(format!(
                "member {member} at {} ({}), leader {leader} at {} ({})",
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
