//! An in-process cluster for the tests: nodes with their own database in a temporary directory,
//! their own tonic server on a loopback port and one gRPC transport shared by all their groups,
//! and helpers that wait for conditions (leaders, convergence) with a deadline, never a fixed
//! sleep. Owns no assertion about Raft: the tests do.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Config, SnapshotPolicy};
use raft::{
    GroupId, GroupNetwork, GroupReader, Groups, GrpcTransport, NetworkConfig, NodeId,
    PeerTransport, Proposal, Raft, RaftService, Storage,
};
use statemachine::{Command, Digest, Outcome};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long any awaited condition may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// How often a polled condition is checked.
const POLL: Duration = Duration::from_millis(10);

/// How long a node's server may take to stop gracefully before it is aborted.
const SERVER_STOP_MAX: Duration = Duration::from_secs(5);

/// The Raft config of every group: timings fit for many groups on one node, scaled down for
/// tests, and a small snapshot policy that purges the log at once so that a lagging replica must
/// be caught up by snapshot.
pub fn config() -> io::Result<Arc<Config>> {
    let config = Config {
        cluster_name: "cluster-test".to_owned(),
        heartbeat_interval: 150,
        election_timeout_min: 500,
        election_timeout_max: 1_000,
        install_snapshot_timeout: 2_000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(50),
        max_in_snapshot_log_to_keep: 0,
        ..Config::default()
    };
    Ok(Arc::new(config.validate().map_err(io::Error::other)?))
}

/// The leader's wall clock in milliseconds, as it stamps a proposal.
pub fn now_ms() -> u64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

/// Binds `address`, retrying (until [`WAIT`]) while a previous server still holds it.
pub async fn bind(address: SocketAddr) -> io::Result<TcpListener> {
    let deadline = Instant::now() + WAIT;
    loop {
        match TcpListener::bind(address).await {
            Ok(listener) => return Ok(listener),
            Err(error) if Instant::now() < deadline => {
                tracing::debug!(%error, %address, "address still in use, retrying");
                tokio::time::sleep(POLL).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// A running node's gRPC server.
struct Server {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

/// One node: a database, a transport, the groups it hosts and the server peers reach them by.
pub struct TestNode {
    /// The node's id, the same in every group.
    pub id: NodeId,
    /// Where its server listens.
    pub address: SocketAddr,
    /// The gRPC transport shared by all its groups (under whatever wrapper they send through).
    pub transport: GrpcTransport,
    groups: Groups,
    readers: BTreeMap<GroupId, GroupReader>,
    server: Option<Server>,
    dir: tempfile::TempDir,
}

impl TestNode {
    /// Starts node `id` on `listener` with an empty database, hosting `group_ids` (not
    /// initialized: a group learns its membership from `initialize` or from its leader).
    pub async fn start(
        id: NodeId,
        listener: TcpListener,
        group_ids: &[GroupId],
    ) -> io::Result<TestNode> {
        TestNode::start_with(id, listener, group_ids, |transport| transport).await
    }

    /// As [`TestNode::start`], but its groups send through `wrap(transport)` (for instance a
    /// transport that drops messages on a test's command) instead of the gRPC transport itself.
    pub async fn start_with<T: PeerTransport>(
        id: NodeId,
        listener: TcpListener,
        group_ids: &[GroupId],
        wrap: impl FnOnce(GrpcTransport) -> T,
    ) -> io::Result<TestNode> {
        let address = listener.local_addr()?;
        let dir = tempfile::tempdir()?;
        let storage = Storage::open(dir.path())?;
        let transport = GrpcTransport::new(id, NetworkConfig::default());
        let sender = wrap(transport.clone());
        let groups = Groups::new();
        let mut readers = BTreeMap::new();
        let config = config()?;
        for &group_id in group_ids {
            let state_machine = storage.state_machine(group_id)?;
            readers.insert(group_id, state_machine.reader());
            let network = GroupNetwork::new(sender.clone(), group_id);
            let log_store = storage.log_store(group_id);
            let raft = Raft::new(id, Arc::clone(&config), network, log_store, state_machine)
                .await
                .map_err(io::Error::other)?;
            groups.insert(group_id, raft);
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let server = tonic::transport::Server::builder()
            .add_service(
                RaftService::new(groups.clone())
                    .with_snapshot_spool(dir.path().join("spool"))?
                    .into_server(),
            )
            .serve_with_incoming_shutdown(incoming, async {
                // A dropped sender stops the server too.
                let _ = stopped.await;
            });
        let task = tokio::spawn(server);
        Ok(TestNode {
            id,
            address,
            transport,
            groups,
            readers,
            server: Some(Server { stop, task }),
            dir,
        })
    }

    /// Where its snapshot service writes arriving snapshots.
    pub fn spool_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("spool")
    }

    /// Whether the node runs (it was not crashed).
    pub fn is_running(&self) -> bool {
        self.server.is_some()
    }

    /// The node's replica of `group_id`, if it runs one.
    pub fn raft(&self, group_id: GroupId) -> Option<Raft> {
        self.groups.get(group_id)
    }

    /// The read handle on the node's replica of `group_id`.
    pub fn reader(&self, group_id: GroupId) -> io::Result<&GroupReader> {
        self.readers
            .get(&group_id)
            .ok_or_else(|| io::Error::other(format!("node {} hosts no group {group_id}", self.id)))
    }

    /// Stops the node as a crash would, as far as its peers can tell: every group stops and its
    /// server goes away. Its database is left as it is.
    pub async fn crash(&mut self) -> io::Result<()> {
        for (_group_id, raft) in self.groups.clear() {
            raft.shutdown().await.map_err(io::Error::other)?;
        }
        if let Some(mut server) = self.server.take() {
            let _ = server.stop.send(());
            match tokio::time::timeout(SERVER_STOP_MAX, &mut server.task).await {
                Ok(result) => result.map_err(io::Error::other)?.map_err(io::Error::other)?,
                Err(_elapsed) => server.task.abort(),
            }
        }
        Ok(())
    }
}

/// Several nodes hosting the same groups.
pub struct Cluster {
    /// The nodes by id.
    pub nodes: BTreeMap<NodeId, TestNode>,
}

impl Cluster {
    /// Starts `node_ids`, each on a fresh loopback port, each hosting every one of `group_ids`.
    pub async fn start(node_ids: &[NodeId], group_ids: &[GroupId]) -> io::Result<Cluster> {
        Cluster::start_with(node_ids, group_ids, |_id, transport| transport).await
    }

    /// As [`Cluster::start`], but node `id`'s groups send through `wrap(id, transport)`.
    pub async fn start_with<T: PeerTransport>(
        node_ids: &[NodeId],
        group_ids: &[GroupId],
        wrap: impl Fn(NodeId, GrpcTransport) -> T,
    ) -> io::Result<Cluster> {
        let mut nodes = BTreeMap::new();
        for &id in node_ids {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let node =
                TestNode::start_with(id, listener, group_ids, |transport| wrap(id, transport))
                    .await?;
            nodes.insert(id, node);
        }
        Ok(Cluster { nodes })
    }

    /// Every node and the address its Raft service listens on.
    pub fn members(&self) -> BTreeMap<NodeId, BasicNode> {
        self.nodes
            .iter()
            .map(|(&id, node)| (id, BasicNode::new(node.address.to_string())))
            .collect()
    }

    /// Makes every node a voter of `group_id`, from node `on`.
    pub async fn initialize(&self, group_id: GroupId, on: NodeId) -> io::Result<()> {
        self.raft(on, group_id)?.initialize(self.members()).await.map_err(io::Error::other)
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> io::Result<&TestNode> {
        self.nodes.get(&id).ok_or_else(|| io::Error::other(format!("no node {id}")))
    }

    /// The node `id`, to crash or replace it.
    pub fn node_mut(&mut self, id: NodeId) -> io::Result<&mut TestNode> {
        self.nodes.get_mut(&id).ok_or_else(|| io::Error::other(format!("no node {id}")))
    }

    /// Node `id`'s running replica of `group_id`.
    pub fn raft(&self, id: NodeId, group_id: GroupId) -> io::Result<Raft> {
        self.node(id)?.raft(group_id).ok_or_else(|| {
            io::Error::other(format!("node {id} runs no replica of group {group_id}"))
        })
    }

    /// The running nodes.
    pub fn running(&self) -> impl Iterator<Item = &TestNode> {
        self.nodes.values().filter(|node| node.is_running())
    }

    /// Waits (until [`WAIT`]) for a running node to lead `group_id` with a committed vote, and
    /// returns it.
    pub async fn leader(&self, group_id: GroupId) -> io::Result<NodeId> {
        let deadline = Instant::now() + WAIT;
        loop {
            let leader = self.running().find_map(|node| {
                let raft = node.raft(group_id)?;
                raft.as_leader().is_ok().then_some(node.id)
            });
            if let Some(leader) = leader {
                return Ok(leader);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "group {group_id}: no leader after {WAIT:?}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits (until [`WAIT`]) for node `id` to lead `group_id`.
    pub async fn wait_leader_is(&self, group_id: GroupId, id: NodeId) -> io::Result<()> {
        let deadline = Instant::now() + WAIT;
        loop {
            if self.raft(id, group_id)?.as_leader().is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "group {group_id}: node {id} does not lead after {WAIT:?}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Proposes `commands` on `group_id`'s leader and returns their outcomes once committed and
    /// applied. A proposal refused before it was appended (the node was not the leader any
    /// more) is proposed again to the next leader, until [`WAIT`].
    pub async fn write(
        &self,
        group_id: GroupId,
        commands: Vec<Command>,
    ) -> io::Result<Vec<Outcome>> {
        let deadline = Instant::now() + WAIT;
        loop {
            let leader = self.leader(group_id).await?;
            let proposal = Proposal { time_ms: now_ms(), commands: commands.clone() };
            match self.raft(leader, group_id)?.client_write(proposal).await {
                Ok(response) => {
                    return Ok(response.data.into_iter().map(|answer| answer.outcome).collect());
                }
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))
                    if Instant::now() < deadline =>
                {
                    tracing::debug!(%forward, "not the leader any more, proposing again");
                    tokio::time::sleep(POLL).await;
                }
                Err(error) => return Err(io::Error::other(error)),
            }
        }
    }

    /// Waits (until [`WAIT`]) until every running replica of `group_id` has applied the same
    /// entries as its leader, then checks that they all have the same state, and returns it.
    pub async fn wait_converged(&self, group_id: GroupId) -> io::Result<Digest> {
        let deadline = Instant::now() + WAIT;
        loop {
            let leader = self.leader(group_id).await?;
            let target = self.node(leader)?.reader(group_id)?.last_applied()?;
            let mut applied = Vec::new();
            for node in self.running() {
                applied.push((node.id, node.reader(group_id)?.last_applied()?));
            }
            if applied.iter().all(|(_, last)| *last == target) {
                let mut digests = Vec::new();
                for node in self.running() {
                    digests.push((node.id, node.reader(group_id)?.read(|group| group.digest())?));
                }
                let (_, first) = &digests[0];
                if digests.iter().any(|(_, digest)| digest != first) {
                    return Err(io::Error::other(format!(
                        "group {group_id}: replicas at {target:?} diverge: {digests:?}"
                    )));
                }
                return Ok(*first);
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "group {group_id}: replicas did not reach {target:?} after {WAIT:?}: {applied:?}"
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Crashes every running node.
    pub async fn shutdown(&mut self) -> io::Result<()> {
        for node in self.nodes.values_mut() {
            node.crash().await?;
        }
        Ok(())
    }
}
