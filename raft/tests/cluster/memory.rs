//! The gRPC transport over a network that is not TCP: three nodes whose peers reach each other
//! through in-memory byte streams, opened by a [`Dialer`] and served through tonic's
//! `serve_with_incoming`, the way the deterministic simulator (issue 7) will run the real peer
//! network over its own. A group elects a leader, replicates writes and converges.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::stream;
use openraft::BasicNode;
use raft::{
    DialFuture, Dialer, DialerRef, GroupNetwork, Groups, GrpcTransport, NetworkConfig, NodeId,
    PeerStream, Proposal, Raft, RaftService, Storage,
};
use tokio::io::DuplexStream;
use tokio::sync::mpsc;

use crate::commands;
use crate::harness::{config, now_ms};

const GROUP: u64 = 5;
const WAIT: Duration = Duration::from_secs(20);

/// Listening addresses and the queues of streams their servers accept.
#[derive(Default)]
struct MemoryNetwork {
    listeners: Mutex<BTreeMap<String, mpsc::UnboundedSender<DuplexStream>>>,
}

impl MemoryNetwork {
    /// The connections a server at `address` accepts, as tonic's incoming stream.
    fn listen(
        &self,
        address: &str,
    ) -> impl futures_util::Stream<Item = Result<DuplexStream, io::Error>> + use<> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(address.to_owned(), sender);
        stream::unfold(receiver, |mut receiver| async move {
            let accepted = receiver.recv().await?;
            Some((Ok(accepted), receiver))
        })
    }
}

struct MemoryDialer(Arc<MemoryNetwork>);

impl Dialer for MemoryDialer {
    fn dial(&self, address: &str) -> DialFuture {
        let listeners = self.0.listeners.lock().unwrap_or_else(PoisonError::into_inner);
        let sender = listeners.get(address).cloned();
        let address = address.to_owned();
        Box::pin(async move {
            let sender = sender.ok_or_else(|| {
                io::Error::new(io::ErrorKind::ConnectionRefused, format!("nothing at {address}"))
            })?;
            let (ours, theirs) = tokio::io::duplex(64 * 1024);
            sender.send(theirs).map_err(|_| {
                io::Error::new(io::ErrorKind::ConnectionRefused, format!("{address} is gone"))
            })?;
            Ok(Box::new(ours) as Box<dyn PeerStream>)
        })
    }
}

struct MemoryNode {
    raft: Raft,
    reader: raft::GroupReader,
    _dir: tempfile::TempDir,
}

fn address(id: NodeId) -> String {
    format!("node-{id}.memory:7000")
}

async fn start(id: NodeId, network: &Arc<MemoryNetwork>) -> io::Result<MemoryNode> {
    let dir = tempfile::tempdir()?;
    let storage = Storage::open(dir.path())?;
    let network_config = NetworkConfig {
        dialer: Some(DialerRef(Arc::new(MemoryDialer(Arc::clone(network))))),
        ..NetworkConfig::default()
    };
    let transport = GrpcTransport::new(id, network_config);
    let state_machine = storage.state_machine(GROUP)?;
    let reader = state_machine.reader();
    let raft = Raft::new(
        id,
        config()?,
        GroupNetwork::new(transport, GROUP),
        storage.log_store(GROUP),
        state_machine,
    )
    .await
    .map_err(io::Error::other)?;
    let groups = Groups::new();
    groups.insert(GROUP, raft.clone());
    let incoming = network.listen(&address(id));
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RaftService::new(groups).into_server())
            .serve_with_incoming(incoming),
    );
    Ok(MemoryNode { raft, reader, _dir: dir })
}

async fn leader(nodes: &BTreeMap<NodeId, MemoryNode>) -> io::Result<NodeId> {
    let deadline = Instant::now() + WAIT;
    loop {
        for (id, node) in nodes {
            if node.raft.ensure_linearizable(openraft::ReadPolicy::ReadIndex).await.is_ok() {
                return Ok(*id);
            }
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other("no leader over the memory network"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn hold(node: &MemoryNode, buyer: u64, seat: u32) -> io::Result<()> {
    let commands = vec![commands::hold(1, buyer, buyer, seat)];
    let proposal = Proposal { time_ms: now_ms(), commands };
    let response = node.raft.client_write(proposal).await.map_err(io::Error::other)?;
    assert!(response.data[0].outcome.is_ok(), "{:?}", response.data);
    Ok(())
}

async fn applied_everywhere(
    nodes: &BTreeMap<NodeId, MemoryNode>,
    ids: &[NodeId],
) -> io::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let mut digests = BTreeSet::new();
        let mut applied = BTreeSet::new();
        for id in ids {
            let reader = &nodes[id].reader;
            applied.insert(reader.last_applied()?.map(|log_id| log_id.index));
            digests.insert(reader.read(|group| group.digest())?);
        }
        if applied.len() == 1 && digests.len() == 1 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!("replicas differ: applied {applied:?}")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_transport_runs_over_any_byte_stream() -> io::Result<()> {
    let network = Arc::new(MemoryNetwork::default());
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start(id, &network).await?);
    }
    let members: BTreeMap<NodeId, BasicNode> =
        (1..=3).map(|id| (id, BasicNode::new(address(id)))).collect();
    nodes[&1].raft.initialize(members).await.map_err(io::Error::other)?;
    let first = leader(&nodes).await?;
    let setup = vec![commands::create_show(1, 10), commands::open_sales(1)];
    let proposal = Proposal { time_ms: now_ms(), commands: setup };
    nodes[&first].raft.client_write(proposal).await.map_err(io::Error::other)?;
    hold(&nodes[&first], 1, 0).await?;
    applied_everywhere(&nodes, &[1, 2, 3]).await?;

    for seat in 1..5 {
        hold(&nodes[&first], 10 + u64::from(seat), seat).await?;
    }
    applied_everywhere(&nodes, &[1, 2, 3]).await?;

    for node in nodes.values() {
        node.raft.shutdown().await.map_err(io::Error::other)?;
    }
    Ok(())
}
