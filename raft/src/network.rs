//! The client side of the peer network: how a node's Raft groups reach the same groups on other
//! nodes.
//!
//! Owns the transport seam ([`PeerTransport`]), its gRPC implementation ([`GrpcTransport`]: one
//! tonic `Channel` per peer node, shared by every group, each call tagged with its group id and
//! bounded by a deadline) and the openraft network factory every group is built with
//! ([`GroupNetwork`]). Never decides anything about Raft: it moves openraft's messages and maps
//! transport failures to openraft's errors. Never blocks one group on another's peer: a channel
//! connects lazily, a connect attempt is bounded by `connect_timeout`, and every call by its own
//! deadline.
//!
//! The seam is openraft-multi's `GroupRouter` (one shared router, bound to `(target, group)` by
//! `GroupNetworkAdapter`), extended with [`PeerTransport::on_peer_address`] so that a transport
//! learns peers' addresses from the groups' memberships. A second, lower seam is the [`Dialer`]
//! of [`NetworkConfig`]: the gRPC transport opens its byte streams through it (TCP by default),
//! so a simulator can run this very transport, tonic and HTTP/2 included, over its own network
//! (the server side takes any stream of connections through tonic's `serve_with_incoming`).
//!
//! Failures map to openraft's errors as follows: a call past its deadline is `Timeout`; anything
//! else (no address known, connection refused or reset, the peer has no replica of the group,
//! the peer's group is shutting down, a message that does not decode) is `Unreachable`, so that
//! openraft backs off instead of retrying at once.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openraft::OptionalSend;
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable};
use openraft::network::{RPCOption, RPCTypes, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft_multi::{GroupNetworkAdapter, GroupNetworkFactory, GroupRouter};
use proto::raft::raft_service_client::RaftServiceClient;
use proto::raft::{GroupRequest, SnapshotChunk, SnapshotHeader, snapshot_chunk};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::{Channel, Endpoint, Uri};

use statemachine::inject::{self, Bug};

use crate::types::{GroupId, Node, NodeId, Snapshot, SnapshotData, TypeConfig, Vote};
use crate::wire;

/// The largest gRPC message a node sends or accepts: a replication batch is bounded by
/// [`crate::REPLICATION_BATCH_BYTES_MAX`] (plus one entry), and a snapshot chunk by
/// [`NetworkConfig::snapshot_chunk_bytes`].
pub const MESSAGE_BYTES_MAX: usize = 16 * 1024 * 1024;

const _: () = assert!(crate::log_store::REPLICATION_BATCH_BYTES_MAX < MESSAGE_BYTES_MAX);
/// The HTTP/2 flow-control window of one call, on the peer network and the client API that
/// bookingd serves: a replication message of [`crate::REPLICATION_BATCH_BYTES_MAX`] goes out
/// without waiting for a window update (HTTP/2's default window is 64 KiB).
pub const HTTP2_STREAM_WINDOW_BYTES: u32 = 2 * 1024 * 1024;
/// The HTTP/2 flow-control window of a connection, shared by every call on it.
pub const HTTP2_CONNECTION_WINDOW_BYTES: u32 = 16 * 1024 * 1024;
const _: () = assert!(
    crate::log_store::REPLICATION_BATCH_BYTES_MAX as u64 <= HTTP2_STREAM_WINDOW_BYTES as u64
);

/// A byte stream to a peer, as a [`Dialer`] opens it.
pub trait PeerStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> PeerStream for T {}

/// What [`Dialer::dial`] returns.
pub type DialFuture = Pin<Box<dyn Future<Output = io::Result<Box<dyn PeerStream>>> + Send>>;

/// Opens connections to peers for the gRPC transport.
///
/// An implementation must: open a fresh, ordered, reliable byte stream to the server listening
/// at `address` (`host:port`) or fail; never block the caller (the future does the waiting);
/// let the transport bound the attempt (it applies `connect_timeout` around the future).
pub trait Dialer: Send + Sync + 'static {
    /// Opens a stream to `address`.
    fn dial(&self, address: &str) -> DialFuture;
}

/// A shared [`Dialer`], as [`NetworkConfig`] holds it.
#[derive(Clone)]
pub struct DialerRef(pub Arc<dyn Dialer>);

impl fmt::Debug for DialerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DialerRef(..)")
    }
}

/// How the gRPC transport connects and times out.
#[derive(Clone, Debug)]
pub struct NetworkConfig {
    /// How long one attempt to open a connection to a peer may take. A peer that does not
    /// answer costs each call at most this long (and never longer than the call's deadline).
    pub connect_timeout: Duration,
    /// The deadline of a call for which openraft gives none (a zero TTL).
    pub call_timeout_default: Duration,
    /// The shortest deadline of a replication call (AppendEntries; votes, pre-votes and leader
    /// hand-overs keep openraft's deadlines). openraft bounds a replication call by its heartbeat
    /// interval (3/4 of it as the soft TTL: 37 ms with bookingd's 50 ms), which a loaded node
    /// misses now and then; a timed-out append restarts the replication stream, and every write
    /// waiting on it waits for the restart (the benchmark's p99.9 was 155-225 ms on 2 cores).
    /// A longer deadline only delays noticing a silent peer, which HTTP/2 pings and the other
    /// followers' acknowledgements cover.
    pub call_timeout_min: Duration,
    /// The size of one snapshot chunk (capped by openraft's `snapshot_max_chunk_size`).
    pub snapshot_chunk_bytes: usize,
    /// How often an idle connection is probed with HTTP/2 pings, so a dead peer is noticed
    /// without waiting for a call to time out.
    pub keep_alive_interval: Duration,
    /// How connections are opened: `None` for TCP (with `TCP_NODELAY`), or a simulator's network.
    pub dialer: Option<DialerRef>,
    /// Mutual TLS to peers' peer ports (`https`, each peer's certificate checked against the
    /// node it is dialed as), or `None` for plain HTTP/2 (`--dev`, the simulator).
    pub tls: Option<crate::tls::PeerTls>,
}

impl Default for NetworkConfig {
    fn default() -> NetworkConfig {
        NetworkConfig {
            connect_timeout: Duration::from_millis(500),
            call_timeout_default: Duration::from_secs(1),
            call_timeout_min: Duration::from_secs(1),
            snapshot_chunk_bytes: 1024 * 1024,
            keep_alive_interval: Duration::from_secs(5),
            dialer: None,
            tls: None,
        }
    }
}

const _: () = assert!(1024 * 1024 < MESSAGE_BYTES_MAX);

impl NetworkConfig {
    /// The endpoint of peer `target` at `address` (`host:port`, or a URI): `https` with this
    /// node's certificate and `target`'s name expected when [`NetworkConfig::tls`] is set,
    /// `http` otherwise.
    ///
    /// # Errors
    ///
    /// When `address` is not a valid URI, or the TLS settings are refused.
    pub fn peer_endpoint(
        &self,
        target: NodeId,
        address: &str,
    ) -> Result<Endpoint, tonic::transport::Error> {
        let host = address.split_once("://").map_or(address, |(_, host)| host);
        match &self.tls {
            Some(tls) => {
                Endpoint::from_shared(format!("https://{host}"))?.tls_config(tls.client(target))
            }
            None if address.contains("://") => Endpoint::from_shared(address.to_owned()),
            None => Endpoint::from_shared(format!("http://{address}")),
        }
    }

    /// A channel to `endpoint` that connects on its first call, through [`NetworkConfig::dialer`]
    /// when one is set and over TCP otherwise. The endpoint's own settings (its connect timeout,
    /// keep-alive) apply either way. The transport makes its peer channels with it; a node makes
    /// its other calls to peers with it too, so that under a simulator they cross the simulated
    /// network.
    pub fn connect_lazy(&self, endpoint: &Endpoint) -> Channel {
        match &self.dialer {
            None => endpoint.connect_lazy(),
            Some(DialerRef(dialer)) => {
                endpoint.connect_with_connector_lazy(dial_with(Arc::clone(dialer)))
            }
        }
    }
}

/// What the Raft groups of a node need from the network: openraft-multi's `GroupRouter` for
/// this crate's type config, plus learning where peers listen.
///
/// An implementation must: deliver each call to the replica of `group_id` on `target` or fail
/// with an openraft error; never let a slow or dead peer delay calls to other peers; bound every
/// call by its `RPCOption` (`soft_ttl`; AppendEntries at least `NetworkConfig::call_timeout_min`).
pub trait PeerTransport: GroupRouter<TypeConfig, GroupId, SnapshotData = SnapshotData> {
    /// Records that `target` is reachable at `node` (as a group's membership names it). Called
    /// each time a group opens a client to `target`; cheap when nothing changed.
    fn on_peer_address(&self, target: NodeId, node: &Node);
}

/// The openraft network factory of one group over a shared transport: build one per group with
/// `GroupNetwork::new(transport.clone(), group_id)`.
pub type GroupNetwork<T> = GroupNetworkFactory<T, GroupId>;

impl<T: PeerTransport> RaftNetworkFactory<TypeConfig> for GroupNetworkFactory<T, GroupId> {
    type Network = GroupNetworkAdapter<TypeConfig, GroupId, T>;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> Self::Network {
        self.factory.on_peer_address(target, node);
        GroupNetworkAdapter::new(self.factory.clone(), target, self.group_id)
    }
}

/// The gRPC transport of one node: one lazily connected tonic `Channel` per peer node, shared by
/// every group. Cheap to clone; clones share the channels.
#[derive(Clone)]
pub struct GrpcTransport {
    inner: Arc<Inner>,
}

struct Inner {
    /// This node, named in timeout errors.
    node_id: NodeId,
    config: NetworkConfig,
    /// Peers by node id. A `HashMap` is fine: nothing iterates it.
    peers: Mutex<HashMap<NodeId, Peer>>,
}

/// Why a peer gave no read index.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("read index of group {group_id} from node {target}: {why}")]
pub struct ReadIndexError {
    /// The node asked.
    pub target: NodeId,
    /// The group.
    pub group_id: GroupId,
    /// What went wrong.
    pub why: String,
}

/// A peer node: its address and the one channel every group uses to reach it.
struct Peer {
    address: String,
    /// Set by [`GrpcTransport::pin_address`]: memberships do not move a pinned peer.
    pinned: bool,
    /// `None` if the address is not a valid URI: calls fail as unreachable.
    channel: Option<Channel>,
}

/// Which unary RPC a call is.
#[derive(Clone, Copy, Debug)]
enum Rpc {
    AppendEntries,
    Vote,
    PreVote,
    TransferLeader,
}

impl Rpc {
    fn kind(self) -> RPCTypes {
        match self {
            Rpc::AppendEntries => RPCTypes::AppendEntries,
            Rpc::Vote | Rpc::PreVote => RPCTypes::Vote,
            Rpc::TransferLeader => RPCTypes::TransferLeader,
        }
    }

    fn request_name(self) -> &'static str {
        match self {
            Rpc::AppendEntries => "append-entries request",
            Rpc::Vote => "vote request",
            Rpc::PreVote => "pre-vote request",
            Rpc::TransferLeader => "transfer-leader request",
        }
    }

    fn response_name(self) -> &'static str {
        match self {
            Rpc::AppendEntries => "append-entries response",
            Rpc::Vote => "vote response",
            Rpc::PreVote => "pre-vote response",
            Rpc::TransferLeader => "transfer-leader response",
        }
    }
}

impl GrpcTransport {
    /// The transport of node `node_id`. Opens no connection: each peer's channel is made when
    /// a group first needs the peer, and connects on its first call.
    pub fn new(node_id: NodeId, config: NetworkConfig) -> GrpcTransport {
        GrpcTransport {
            inner: Arc::new(Inner { node_id, config, peers: Mutex::new(HashMap::new()) }),
        }
    }

    /// Dials `target` at `address` from now on, whatever address the groups' memberships name
    /// for it: the node's own address book (its `--peers`) wins over memberships, so that an
    /// operator (or a test's fault proxy) can choose the route to each peer.
    pub fn pin_address(&self, target: NodeId, address: &str) {
        self.set_address(target, address, true);
    }

    /// How many peer channels exist (one per peer node, whatever the number of groups).
    pub fn channel_count(&self) -> usize {
        self.peers().values().filter(|peer| peer.channel.is_some()).count()
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Peer>> {
        // The map is replaced entry by entry; a panic elsewhere cannot leave it half-written.
        self.inner.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks `target` (the leader of `group_id`, as the caller believes) for the group's read
    /// index (`RaftService.ReadIndex`): every write acknowledged before the call is at or below
    /// it. A follower that has applied up to it is as fresh as the leader was at the call.
    ///
    /// # Errors
    ///
    /// [`ReadIndexError`] when no index came back within `deadline`: the peer is unreachable,
    /// does not lead the group, or did not answer in time.
    pub async fn read_index(
        &self,
        target: NodeId,
        group_id: GroupId,
        deadline: Duration,
    ) -> Result<u64, ReadIndexError> {
        let failed = |why: String| ReadIndexError { target, group_id, why };
        let channel = self.channel(target).map_err(|error| failed(error.to_string()))?;
        let mut client = Self::client(channel);
        let mut message = tonic::Request::new(GroupRequest { group_id, payload: Vec::new() });
        message.set_timeout(deadline);
        let reply = tokio::time::timeout(deadline, client.read_index(message))
            .await
            .map_err(|_elapsed| failed(format!("no answer within {deadline:?}")))?
            .map_err(|status| failed(format!("{:?}: {}", status.code(), status.message())))?;
        wire::decode("read index", &reply.into_inner().payload)
            .map_err(|error| failed(error.to_string()))
    }

    /// The channel to `target`.
    fn channel(&self, target: NodeId) -> Result<Channel, Unreachable<TypeConfig>> {
        match self.peers().get(&target) {
            Some(Peer { channel: Some(channel), .. }) => Ok(channel.clone()),
            Some(Peer { address, channel: None, .. }) => Err(Unreachable::from_string(format!(
                "node {target}: address `{address}` is not a valid URI"
            ))),
            None => Err(Unreachable::from_string(format!("node {target}: no address known"))),
        }
    }

    /// A client on `channel` with this crate's message limits.
    fn client(channel: Channel) -> RaftServiceClient<Channel> {
        RaftServiceClient::new(channel)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX)
    }

    /// The deadline of a call made with `option`.
    fn deadline(&self, option: &RPCOption) -> Duration {
        let soft = option.soft_ttl();
        if soft.is_zero() { self.inner.config.call_timeout_default } else { soft }
    }

    /// The deadline of a call of `rpc` made with `option`: replication calls get at least
    /// `call_timeout_min`; elections and hand-overs keep openraft's own deadlines.
    fn rpc_deadline(&self, rpc: Rpc, option: &RPCOption) -> Duration {
        let deadline = self.deadline(option);
        match rpc {
            Rpc::AppendEntries => deadline.max(self.inner.config.call_timeout_min),
            Rpc::Vote | Rpc::PreVote | Rpc::TransferLeader => deadline,
        }
    }

    fn timeout(&self, target: NodeId, action: RPCTypes, timeout: Duration) -> Timeout<TypeConfig> {
        Timeout { action, id: self.inner.node_id, target, timeout }
    }

    /// Maps a gRPC status from a peer to openraft's error.
    fn status_error(
        &self,
        target: NodeId,
        group_id: GroupId,
        action: RPCTypes,
        deadline: Duration,
        status: &tonic::Status,
    ) -> RPCError<TypeConfig> {
        if status.code() == tonic::Code::DeadlineExceeded {
            // The peer gave up on the deadline the caller sent it.
            return RPCError::Timeout(self.timeout(target, action, deadline));
        }
        RPCError::Unreachable(Unreachable::from_string(format!(
            "node {target}, group {group_id}: {:?}: {}",
            status.code(),
            status.message()
        )))
    }

    /// Sends one unary request to `group_id` on `target` and decodes its answer.
    async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        target: NodeId,
        group_id: GroupId,
        rpc: Rpc,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<TypeConfig>> {
        let mut client = Self::client(self.channel(target)?);
        let payload = wire::encode(rpc.request_name(), request).map_err(unreachable)?;
        let deadline = self.rpc_deadline(rpc, option);
        let mut message = tonic::Request::new(GroupRequest { group_id, payload });
        // Tells the peer how long the caller waits; the caller enforces it itself below.
        message.set_timeout(deadline);
        let reply = tokio::time::timeout(deadline, async move {
            match rpc {
                Rpc::AppendEntries => client.append_entries(message).await,
                Rpc::Vote => client.vote(message).await,
                Rpc::PreVote => client.pre_vote(message).await,
                Rpc::TransferLeader => client.transfer_leader(message).await,
            }
        })
        .await
        .map_err(|_elapsed| RPCError::Timeout(self.timeout(target, rpc.kind(), deadline)))?
        .map_err(|status| self.status_error(target, group_id, rpc.kind(), deadline, &status))?;
        wire::decode(rpc.response_name(), &reply.into_inner().payload).map_err(unreachable)
    }

    /// Streams `snapshot` to `group_id` on `target`: a header, then the bytes in chunks, each
    /// chunk bounded by the call's deadline (the whole transfer is not: a large snapshot takes
    /// as long as it takes while it keeps moving), then the answer, bounded by the deadline too.
    async fn send_snapshot(
        &self,
        target: NodeId,
        group_id: GroupId,
        vote: Vote,
        snapshot: Snapshot,
        option: &RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let mut client = Self::client(self.channel(target)?);
        let deadline = self.deadline(option);
        let chunk_bytes = option
            .snapshot_chunk_size()
            .unwrap_or(usize::MAX)
            .min(self.inner.config.snapshot_chunk_bytes)
            .max(1);
        let header_payload = wire::encode("snapshot header", &(&vote, &snapshot.meta))
            .map_err(|error| StreamingError::Unreachable(unreachable_from(error)))?;
        let data = snapshot.snapshot;
        let header = SnapshotHeader {
            group_id,
            payload: header_payload,
            total_bytes: u64::try_from(data.len()).unwrap_or(u64::MAX),
        };

        // A channel of one: a chunk is made only once the transport took the previous one, so a
        // stalled peer is noticed by the per-chunk deadline and memory stays at one chunk.
        let (sender, receiver) = tokio::sync::mpsc::channel::<SnapshotChunk>(1);
        let chunks = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|chunk| (chunk, receiver))
        });
        let mut call = std::pin::pin!(client.install_snapshot(chunks));
        let feed = async move {
            let header = SnapshotChunk { chunk: Some(snapshot_chunk::Chunk::Header(header)) };
            let data_chunks = data.chunks(chunk_bytes).map(|bytes| SnapshotChunk {
                chunk: Some(snapshot_chunk::Chunk::Data(bytes.to_vec())),
            });
            for item in std::iter::once(header).chain(data_chunks) {
                match tokio::time::timeout(deadline, sender.send(item)).await {
                    Ok(Ok(())) => {}
                    // The call ended (it failed, or the peer answered early): its result says why.
                    Ok(Err(_closed)) => return true,
                    Err(_elapsed) => return false,
                }
            }
            true
        };
        let snapshot_timeout = || self.timeout(target, RPCTypes::InstallSnapshot, deadline);
        // The call is polled while the chunks are fed (it is what sends them); once every chunk
        // is taken, the answer must come within one more deadline.
        let early_answer = tokio::select! {
            answer = &mut call => Some(answer),
            fed = feed => {
                if !fed {
                    return Err(StreamingError::Timeout(snapshot_timeout()));
                }
                None
            }
        };
        let answer = match early_answer {
            Some(answer) => answer,
            None => tokio::time::timeout(deadline, call)
                .await
                .map_err(|_elapsed| StreamingError::Timeout(snapshot_timeout()))?,
        };
        let reply = answer.map_err(|status| {
            match self.status_error(target, group_id, RPCTypes::InstallSnapshot, deadline, &status)
            {
                RPCError::Timeout(timeout) => StreamingError::Timeout(timeout),
                RPCError::Network(error) => StreamingError::Network(error),
                RPCError::Unreachable(error) => StreamingError::Unreachable(error),
                RPCError::RemoteError(remote) => match remote.source {},
            }
        })?;
        wire::decode("snapshot response", &reply.into_inner().payload)
            .map_err(|error| StreamingError::Unreachable(unreachable_from(error)))
    }
}

impl GroupRouter<TypeConfig, GroupId> for GrpcTransport {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &self,
        target: NodeId,
        group_id: GroupId,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        if inject::on(Bug::AckBeforeCommit) && !rpc.entries.is_empty() {
            // The planted bug: the entries are sent, but the leader counts them stored on the
            // follower before the follower said so, and so commits (and answers clients)
            // without a quorum that has them. A conflict still comes back on the next
            // heartbeat.
            let transport = self.clone();
            tokio::spawn(async move {
                let sent: Result<AppendEntriesResponse<TypeConfig>, _> =
                    transport.call(target, group_id, Rpc::AppendEntries, &rpc, &option).await;
                drop(sent);
            });
            return Ok(AppendEntriesResponse::Success);
        }
        self.call(target, group_id, Rpc::AppendEntries, &rpc, &option).await
    }

    async fn vote(
        &self,
        target: NodeId,
        group_id: GroupId,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(target, group_id, Rpc::Vote, &rpc, &option).await
    }

    async fn pre_vote(
        &self,
        target: NodeId,
        group_id: GroupId,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(target, group_id, Rpc::PreVote, &rpc, &option).await
    }

    async fn full_snapshot(
        &self,
        target: NodeId,
        group_id: GroupId,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            answer = self.send_snapshot(target, group_id, vote, snapshot, &option) => answer,
        }
    }

    async fn transfer_leader(
        &self,
        target: NodeId,
        group_id: GroupId,
        request: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call(target, group_id, Rpc::TransferLeader, &request, &option).await
    }
}

impl PeerTransport for GrpcTransport {
    fn on_peer_address(&self, target: NodeId, node: &Node) {
        self.set_address(target, crate::tls::peer_address(&node.addr), false);
    }
}

impl GrpcTransport {
    /// Points `target`'s channel at `address` (a new channel if the address changed), unless
    /// the peer is pinned and this is not a pin.
    fn set_address(&self, target: NodeId, address: &str, pin: bool) {
        let mut peers = self.peers();
        if let Some(peer) = peers.get_mut(&target) {
            if peer.pinned && !pin {
                return;
            }
            if peer.address == address {
                peer.pinned |= pin;
                return;
            }
        }
        let channel = match self.inner.config.peer_endpoint(target, address) {
            Ok(endpoint) => {
                let endpoint = endpoint
                    .connect_timeout(self.inner.config.connect_timeout)
                    .tcp_nodelay(true)
                    .initial_stream_window_size(crate::HTTP2_STREAM_WINDOW_BYTES)
                    .initial_connection_window_size(crate::HTTP2_CONNECTION_WINDOW_BYTES)
                    .http2_keep_alive_interval(self.inner.config.keep_alive_interval)
                    .keep_alive_timeout(self.inner.config.keep_alive_interval)
                    .keep_alive_while_idle(true);
                Some(self.inner.config.connect_lazy(&endpoint))
            }
            Err(error) => {
                tracing::warn!(peer = target, %address, %error, "invalid peer address");
                None
            }
        };
        let peer = Peer { address: address.to_owned(), pinned: pin, channel };
        if let Some(previous) = peers.insert(target, peer) {
            tracing::info!(peer = target, from = %previous.address, to = %address, "peer moved");
        }
    }
}

/// The tower connector tonic calls to open a channel's connection through `dialer`.
fn dial_with(
    dialer: Arc<dyn Dialer>,
) -> impl tower::Service<
    Uri,
    Response = hyper_util::rt::TokioIo<Box<dyn PeerStream>>,
    Error = io::Error,
    Future = impl Future<Output = io::Result<hyper_util::rt::TokioIo<Box<dyn PeerStream>>>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |uri: Uri| {
        let dialer = Arc::clone(&dialer);
        async move {
            let address = uri.authority().map(|authority| authority.as_str().to_owned());
            let address = address.ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("no host:port in {uri}"))
            })?;
            dialer.dial(&address).await.map(hyper_util::rt::TokioIo::new)
        }
    })
}

fn unreachable_from(error: wire::WireError) -> Unreachable<TypeConfig> {
    Unreachable::from_string(error.to_string())
}

fn unreachable(error: wire::WireError) -> RPCError<TypeConfig> {
    RPCError::Unreachable(unreachable_from(error))
}
