//! The server side of the peer network: the gRPC `RaftService` a node serves to its peers, and
//! the registry of the groups it hosts.
//!
//! Owns routing: each request goes to the local `Raft` of the group it names ([`Groups`], which
//! the node fills and empties at run time), and a snapshot stream is assembled here (in a spool
//! file, or in memory) and handed whole to `Raft::install_full_snapshot`. Never decides anything about Raft (the group's `Raft`
//! answers), and never holds the registry's lock across an await.
//!
//! On a peer port with mutual TLS ([`RaftService::with_peer_certificates`]), every call must
//! come with a node certificate, and a message that speaks for a node (a vote's candidate, an
//! append's or a snapshot's leader, a hand-over's leader) must speak for the node that
//! certificate names: otherwise `UNAUTHENTICATED` or `PERMISSION_DENIED`, before the group sees
//! it.
//!
//! A snapshot stream is judged on its first message, before any data is read: the sender must
//! speak for itself (above), its vote must not be older than the group's (a stale leader gets
//! the group's vote back at once, as Raft answers it, and its data is never read), the size it
//! announces must be within the limit ([`RaftService::with_snapshot_limit`]), and no other
//! snapshot of the group may be arriving (one transfer per group at a time:
//! `RESOURCE_EXHAUSTED`). Then every message must arrive within [`SNAPSHOT_IDLE`] of the last
//! (`DEADLINE_EXCEEDED`), and the bytes may not run past the announced size. With a spool
//! directory ([`RaftService::with_snapshot_spool`], as `bookingd` runs), the bytes go to a file
//! while they arrive and are read back only once whole; a stream cut off leaves no file.
//!
//! Statuses: a group this node does not host is `NOT_FOUND`; bytes that do not decode, a
//! snapshot stream out of order or of the wrong length are `INVALID_ARGUMENT`; a group that is
//! shutting down (or failed) is `UNAVAILABLE`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use openraft::ReadPolicy;
use openraft::error::{LinearizableReadError, RaftError};
use proto::raft::raft_service_server::{self, RaftServiceServer};
use proto::raft::{GroupReply, GroupRequest, SnapshotChunk, snapshot_chunk};
use serde::Serialize;
use tonic::{Request, Response, Status, Streaming};

use crate::network::MESSAGE_BYTES_MAX;
use crate::types::{GroupId, NodeId, Snapshot, SnapshotMeta, Vote};
use crate::{Raft, wire};

/// The largest snapshot a node accepts from a peer, by default.
pub const SNAPSHOT_BYTES_MAX: u64 = 4 * 1024 * 1024 * 1024;
/// How long a snapshot stream may go without a message before it is cut off.
pub const SNAPSHOT_IDLE: Duration = Duration::from_secs(30);

/// The groups a node hosts, by id: where the Raft service routes each request. Cheap to clone;
/// clones share the registry.
#[derive(Clone, Default)]
pub struct Groups {
    groups: Arc<RwLock<BTreeMap<GroupId, Raft>>>,
}

impl Groups {
    /// An empty registry.
    pub fn new() -> Groups {
        Groups::default()
    }

    /// Routes `group_id`'s requests to `raft` from now on, returning the handle it replaces.
    pub fn insert(&self, group_id: GroupId, raft: Raft) -> Option<Raft> {
        self.write().insert(group_id, raft)
    }

    /// Stops routing `group_id`'s requests (they answer `NOT_FOUND`), returning its handle. The
    /// caller shuts the group down.
    pub fn remove(&self, group_id: GroupId) -> Option<Raft> {
        self.write().remove(&group_id)
    }

    /// The handle of `group_id`, if hosted here.
    pub fn get(&self, group_id: GroupId) -> Option<Raft> {
        self.read().get(&group_id).cloned()
    }

    /// The ids of the hosted groups, in order.
    pub fn ids(&self) -> Vec<GroupId> {
        self.read().keys().copied().collect()
    }

    /// Removes every group and returns their handles, in group order.
    pub fn clear(&self) -> Vec<(GroupId, Raft)> {
        std::mem::take(&mut *self.write()).into_iter().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<GroupId, Raft>> {
        // Every change is one map operation: a panic elsewhere cannot leave it half-done.
        self.groups.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<GroupId, Raft>> {
        self.groups.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The Raft service of one node: routes peers' requests to the node's groups.
#[derive(Clone)]
pub struct RaftService {
    groups: Groups,
    /// Whether callers must present a node certificate that matches the node they speak for.
    authenticate: bool,
    /// The largest snapshot accepted.
    snapshot_bytes_max: u64,
    /// The groups a snapshot is arriving for now.
    receiving: Arc<Mutex<BTreeSet<GroupId>>>,
    /// Where an arriving snapshot is written while it arrives (`None`: in memory).
    spool: Option<Arc<PathBuf>>,
}

/// An arriving snapshot's bytes: in memory, or in a file of the spool directory, removed when
/// this is dropped (whether the transfer completed, failed or was cut off).
enum Arriving {
    Memory(Vec<u8>),
    Disk { file: tokio::io::BufWriter<tokio::fs::File>, path: SpoolFile, written: usize },
}

/// A spool file, removed when dropped.
struct SpoolFile(PathBuf);

impl Drop for SpoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Arriving {
    /// Room for a snapshot of `total` bytes: a file `group-<id>.part` in `spool`, or memory
    /// (reserving at most one message up front: the sender's claim is checked as bytes arrive).
    async fn new(spool: Option<&Path>, group_id: GroupId, total: usize) -> io::Result<Arriving> {
        match spool {
            None => Ok(Arriving::Memory(Vec::with_capacity(total.min(MESSAGE_BYTES_MAX)))),
            Some(dir) => {
                let path = SpoolFile(dir.join(format!("group-{group_id}.part")));
                let file = tokio::fs::File::create(&path.0).await?;
                Ok(Arriving::Disk { file: tokio::io::BufWriter::new(file), path, written: 0 })
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Arriving::Memory(data) => data.len(),
            Arriving::Disk { written, .. } => *written,
        }
    }

    async fn push(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Arriving::Memory(data) => data.extend_from_slice(bytes),
            Arriving::Disk { file, written, .. } => {
                tokio::io::AsyncWriteExt::write_all(file, bytes).await?;
                *written += bytes.len();
            }
        }
        Ok(())
    }

    /// The whole snapshot, read back once it has all arrived (the state machine decodes it into
    /// memory); the spool file is removed.
    async fn finish(self) -> io::Result<Vec<u8>> {
        match self {
            Arriving::Memory(data) => Ok(data),
            Arriving::Disk { mut file, path, .. } => {
                tokio::io::AsyncWriteExt::flush(&mut file).await?;
                drop(file);
                tokio::fs::read(&path.0).await
            }
        }
    }
}

/// A group's snapshot transfer in progress; ends it when dropped.
struct Receiving {
    receiving: Arc<Mutex<BTreeSet<GroupId>>>,
    group_id: GroupId,
}

impl Drop for Receiving {
    fn drop(&mut self) {
        self.receiving.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.group_id);
    }
}

impl RaftService {
    /// The service routing to `groups`, taking any caller: for a node's client port under
    /// `--dev`, and for the simulator's network.
    pub fn new(groups: Groups) -> RaftService {
        RaftService {
            groups,
            authenticate: false,
            snapshot_bytes_max: SNAPSHOT_BYTES_MAX,
            receiving: Arc::default(),
            spool: None,
        }
    }

    /// Writes each arriving snapshot to a file in `dir` while it arrives, instead of holding it
    /// in memory: a slow or stalled sender holds a file, not the node's memory, until the stream
    /// is whole (or cut off, when the file is removed). Files a crash left in `dir` are removed
    /// here: a transfer is never resumed.
    ///
    /// # Errors
    ///
    /// When `dir` cannot be made or emptied.
    pub fn with_snapshot_spool(self, dir: impl Into<PathBuf>) -> io::Result<RaftService> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|extension| extension == "part") {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(RaftService { spool: Some(Arc::new(dir)), ..self })
    }

    /// Refuses a snapshot announced larger than `bytes`, before reading any of it.
    pub fn with_snapshot_limit(self, bytes: u64) -> RaftService {
        RaftService { snapshot_bytes_max: bytes, ..self }
    }

    /// Marks a snapshot of `group_id` as arriving, unless one already is.
    fn start_receiving(&self, group_id: GroupId) -> Result<Receiving, Status> {
        let mut receiving = self.receiving.lock().unwrap_or_else(PoisonError::into_inner);
        if !receiving.insert(group_id) {
            return Err(Status::resource_exhausted(format!(
                "group {group_id}: a snapshot is already arriving"
            )));
        }
        Ok(Receiving { receiving: self.receiving.clone(), group_id })
    }

    /// Requires every caller to present a node certificate (served behind mutual TLS), and
    /// every message that speaks for a node to speak for that certificate's node.
    pub fn with_peer_certificates(self) -> RaftService {
        RaftService { authenticate: true, ..self }
    }

    /// The node the caller's certificate names, when callers are authenticated.
    fn caller<T>(&self, request: &Request<T>) -> Result<Option<NodeId>, Status> {
        if self.authenticate { crate::tls::caller_node(request).map(Some) } else { Ok(None) }
    }

    /// The tonic server of this service, with this crate's message limits; add it to a
    /// `tonic::transport::Server`.
    pub fn into_server(self) -> RaftServiceServer<RaftService> {
        RaftServiceServer::new(self)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX)
    }

    fn group(&self, group_id: GroupId) -> Result<Raft, Status> {
        self.groups.get(group_id).ok_or_else(|| {
            Status::not_found(format!("group {group_id} is not hosted on this node"))
        })
    }
}

/// Refuses a message that speaks for `claimed` from a caller whose certificate names another
/// node.
fn check_speaks_for(caller: Option<NodeId>, claimed: NodeId, what: &str) -> Result<(), Status> {
    match caller {
        Some(caller) if caller != claimed => Err(Status::permission_denied(format!(
            "node {caller}'s certificate cannot send a {what} of node {claimed}"
        ))),
        _ => Ok(()),
    }
}

/// The node `vote` is for (a candidate, or the leader it was granted to).
fn node_of_vote(vote: &Vote) -> NodeId {
    use openraft::vote::RaftLeaderId;
    *vote.leader_id().node_id()
}

fn invalid(error: impl Display) -> Status {
    Status::invalid_argument(error.to_string())
}

fn unavailable(group_id: GroupId, error: impl Display) -> Status {
    Status::unavailable(format!("group {group_id}: {error}"))
}

fn reply<T: Serialize>(what: &'static str, value: &T) -> Result<Response<GroupReply>, Status> {
    let payload = wire::encode(what, value).map_err(|error| Status::internal(error.to_string()))?;
    Ok(Response::new(GroupReply { payload }))
}

#[tonic::async_trait]
impl raft_service_server::RaftService for RaftService {
    async fn append_entries(
        &self,
        request: Request<GroupRequest>,
    ) -> Result<Response<GroupReply>, Status> {
        let caller = self.caller(&request)?;
        let GroupRequest { group_id, payload } = request.into_inner();
        let raft = self.group(group_id)?;
        let rpc: openraft::raft::AppendEntriesRequest<crate::TypeConfig> =
            wire::decode("append-entries request", &payload).map_err(invalid)?;
        check_speaks_for(caller, node_of_vote(&rpc.vote), "append-entries request")?;
        let answer =
            raft.append_entries(rpc).await.map_err(|error| unavailable(group_id, error))?;
        reply("append-entries response", &answer)
    }

    async fn vote(&self, request: Request<GroupRequest>) -> Result<Response<GroupReply>, Status> {
        let caller = self.caller(&request)?;
        let GroupRequest { group_id, payload } = request.into_inner();
        let raft = self.group(group_id)?;
        let rpc: openraft::raft::VoteRequest<crate::TypeConfig> =
            wire::decode("vote request", &payload).map_err(invalid)?;
        check_speaks_for(caller, node_of_vote(&rpc.vote), "vote request")?;
        let answer = raft.vote(rpc).await.map_err(|error| unavailable(group_id, error))?;
        reply("vote response", &answer)
    }

    async fn pre_vote(
        &self,
        request: Request<GroupRequest>,
    ) -> Result<Response<GroupReply>, Status> {
        let caller = self.caller(&request)?;
        let GroupRequest { group_id, payload } = request.into_inner();
        let raft = self.group(group_id)?;
        let rpc: openraft::raft::VoteRequest<crate::TypeConfig> =
            wire::decode("pre-vote request", &payload).map_err(invalid)?;
        check_speaks_for(caller, node_of_vote(&rpc.vote), "pre-vote request")?;
        let answer = raft.pre_vote(rpc).await.map_err(|error| unavailable(group_id, error))?;
        reply("pre-vote response", &answer)
    }

    async fn transfer_leader(
        &self,
        request: Request<GroupRequest>,
    ) -> Result<Response<GroupReply>, Status> {
        let caller = self.caller(&request)?;
        let GroupRequest { group_id, payload } = request.into_inner();
        let raft = self.group(group_id)?;
        let rpc: openraft::raft::TransferLeaderRequest<crate::TypeConfig> =
            wire::decode("transfer-leader request", &payload).map_err(invalid)?;
        check_speaks_for(caller, node_of_vote(rpc.from_leader()), "transfer-leader request")?;
        let answer =
            raft.handle_transfer_leader(rpc).await.map_err(|error| unavailable(group_id, error))?;
        reply("transfer-leader response", &answer)
    }

    async fn read_index(
        &self,
        request: Request<GroupRequest>,
    ) -> Result<Response<GroupReply>, Status> {
        // Any node of the cluster may ask.
        self.caller(&request)?;
        let group_id = request.into_inner().group_id;
        let raft = self.group(group_id)?;
        // The lease answers without a round trip; when it lapsed, ReadIndex asks a quorum.
        let linearizer = match raft.get_read_linearizer(ReadPolicy::LeaseRead).await {
            Ok(linearizer) => Ok(linearizer),
            Err(_lapsed) => raft.get_read_linearizer(ReadPolicy::ReadIndex).await,
        };
        match linearizer {
            Ok(linearizer) => reply("read index", &linearizer.read_log_id().index()),
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(_))) => {
                Err(Status::failed_precondition(format!("group {group_id}: not the leader here")))
            }
            Err(error) => Err(unavailable(group_id, error)),
        }
    }

    async fn install_snapshot(
        &self,
        request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<GroupReply>, Status> {
        let caller = self.caller(&request)?;
        let mut chunks = request.into_inner();
        let first = chunks.message().await?.and_then(|chunk| chunk.chunk);
        let Some(snapshot_chunk::Chunk::Header(header)) = first else {
            return Err(invalid("a snapshot stream must start with its header"));
        };
        let group_id = header.group_id;
        let raft = self.group(group_id)?;
        let (vote, meta): (Vote, SnapshotMeta) =
            wire::decode("snapshot header", &header.payload).map_err(invalid)?;
        check_speaks_for(caller, node_of_vote(&vote), "snapshot")?;
        let current =
            openraft::async_runtime::watch::WatchReceiver::borrow_watched(&raft.metrics()).vote;
        if vote.partial_cmp(&current) == Some(Ordering::Less) {
            // A deposed leader: Raft's answer is the group's vote, which makes it step down.
            let answer = openraft::raft::SnapshotResponse::<crate::TypeConfig>::new(current);
            return reply("snapshot response", &answer);
        }
        let limit = self.snapshot_bytes_max;
        if header.total_bytes > limit {
            return Err(invalid(format!(
                "group {group_id}: a snapshot of {} bytes is over the limit of {limit}",
                header.total_bytes
            )));
        }
        let _receiving = self.start_receiving(group_id)?;
        let total = usize::try_from(header.total_bytes).map_err(invalid)?;
        let spool = self.spool.as_deref().map(PathBuf::as_path);
        let mut data = Arriving::new(spool, group_id, total)
            .await
            .map_err(|error| spool_failed(group_id, &error))?;
        loop {
            let next =
                tokio::time::timeout(SNAPSHOT_IDLE, chunks.message()).await.map_err(|_| {
                    Status::deadline_exceeded(format!(
                        "group {group_id}: no snapshot data for {SNAPSHOT_IDLE:?}"
                    ))
                })?;
            let Some(chunk) = next? else { break };
            let Some(snapshot_chunk::Chunk::Data(bytes)) = chunk.chunk else {
                return Err(invalid(format!(
                    "group {group_id}: expected snapshot data after the header"
                )));
            };
            if data.len() + bytes.len() > total {
                return Err(invalid(format!(
                    "group {group_id}: snapshot bytes beyond the announced {total}"
                )));
            }
            data.push(&bytes).await.map_err(|error| spool_failed(group_id, &error))?;
        }
        if data.len() != total {
            return Err(invalid(format!(
                "group {group_id}: snapshot stream ended after {} of {total} bytes",
                data.len()
            )));
        }
        let data = data.finish().await.map_err(|error| spool_failed(group_id, &error))?;
        let snapshot = Snapshot { meta, snapshot: data };
        let answer = raft
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(|error| unavailable(group_id, error))?;
        reply("snapshot response", &answer)
    }
}

/// A snapshot that could not be written to or read from the spool: the node's fault, so the
/// leader tries again later.
fn spool_failed(group_id: GroupId, error: &io::Error) -> Status {
    Status::unavailable(format!("group {group_id}: the snapshot spool: {error}"))
}
