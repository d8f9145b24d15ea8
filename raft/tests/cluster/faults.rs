//! A fault-injecting transport for the tests: [`FaultyTransport`] wraps a node's
//! [`GrpcTransport`] and, before each call, consults a [`Faults`] table the test controls
//! (`isolate`, `partition`, `heal`). A call across a cut link is dropped on the sending side and
//! fails as openraft's `Unreachable`, as a dead peer's would.
//!
//! Every node's outgoing calls go through its own `FaultyTransport`, which knows its node id, so
//! cutting the link on the sender's side cuts both directions: requests and the answers they
//! would have had. A call already under way when a link is cut completes. Owns no assertion
//! about Raft: the tests do.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::OptionalSend;
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{Backoff, RPCOption};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft_multi::GroupRouter;
use raft::{
    GroupId, GrpcTransport, Node, NodeId, PeerTransport, Snapshot, SnapshotData, TypeConfig, Vote,
};

/// Which links are cut: shared by every node's [`FaultyTransport`] and changed by the test.
/// Cheap to clone; clones share the table.
#[derive(Clone, Default)]
pub struct Faults {
    inner: Arc<FaultsInner>,
}

#[derive(Default)]
struct FaultsInner {
    cuts: Mutex<Cuts>,
    /// How many calls were dropped so far.
    dropped: AtomicU64,
}

#[derive(Default)]
struct Cuts {
    /// Nodes cut from every other node.
    isolated: BTreeSet<NodeId>,
    /// Cut links, each as `(lower id, higher id)`.
    links: BTreeSet<(NodeId, NodeId)>,
}

impl Faults {
    /// A table with no fault.
    pub fn new() -> Faults {
        Faults::default()
    }

    fn cuts(&self) -> std::sync::MutexGuard<'_, Cuts> {
        // Each change is a single insert or clear: a panic elsewhere cannot leave it half-made.
        self.inner.cuts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops every message to and from `node`.
    pub fn isolate(&self, node: NodeId) {
        self.cuts().isolated.insert(node);
    }

    /// Drops every message between a node of `side_a` and a node of `side_b`; links within a
    /// side are kept.
    pub fn partition(&self, side_a: &[NodeId], side_b: &[NodeId]) {
        let mut cuts = self.cuts();
        for &a in side_a {
            for &b in side_b {
                cuts.links.insert((a.min(b), a.max(b)));
            }
        }
    }

    /// Removes every fault.
    pub fn heal(&self) {
        let mut cuts = self.cuts();
        cuts.isolated.clear();
        cuts.links.clear();
    }

    /// Whether a message from `from` to `to` is delivered.
    pub fn delivers(&self, from: NodeId, to: NodeId) -> bool {
        let cuts = self.cuts();
        !cuts.isolated.contains(&from)
            && !cuts.isolated.contains(&to)
            && !cuts.links.contains(&(from.min(to), from.max(to)))
    }

    /// How many calls were dropped so far.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }
}

/// Node `node_id`'s transport: its gRPC transport behind the shared [`Faults`] table.
#[derive(Clone)]
pub struct FaultyTransport {
    node_id: NodeId,
    inner: GrpcTransport,
    faults: Faults,
}

impl FaultyTransport {
    /// Node `node_id`'s calls over `inner`, dropped as `faults` says.
    pub fn new(node_id: NodeId, inner: GrpcTransport, faults: Faults) -> FaultyTransport {
        FaultyTransport { node_id, inner, faults }
    }

    /// `Ok` if a message to `target` is delivered, and the error of a dead peer if it is dropped.
    fn check(&self, target: NodeId, group_id: GroupId) -> Result<(), Unreachable<TypeConfig>> {
        if self.faults.delivers(self.node_id, target) {
            return Ok(());
        }
        self.faults.inner.dropped.fetch_add(1, Ordering::Relaxed);
        Err(Unreachable::from_string(format!(
            "node {} to node {target}, group {group_id}: dropped by the test's faults",
            self.node_id
        )))
    }
}

impl GroupRouter<TypeConfig, GroupId> for FaultyTransport {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &self,
        target: NodeId,
        group_id: GroupId,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.check(target, group_id)?;
        self.inner.append_entries(target, group_id, rpc, option).await
    }

    async fn vote(
        &self,
        target: NodeId,
        group_id: GroupId,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.check(target, group_id)?;
        self.inner.vote(target, group_id, rpc, option).await
    }

    async fn pre_vote(
        &self,
        target: NodeId,
        group_id: GroupId,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.check(target, group_id)?;
        self.inner.pre_vote(target, group_id, rpc, option).await
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
        self.check(target, group_id).map_err(StreamingError::Unreachable)?;
        self.inner.full_snapshot(target, group_id, vote, snapshot, cancel, option).await
    }

    async fn transfer_leader(
        &self,
        target: NodeId,
        group_id: GroupId,
        request: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.check(target, group_id)?;
        self.inner.transfer_leader(target, group_id, request, option).await
    }

    fn backoff(&self) -> Option<Backoff> {
        self.inner.backoff()
    }
}

impl PeerTransport for FaultyTransport {
    fn on_peer_address(&self, target: NodeId, node: &Node) {
        self.inner.on_peer_address(target, node);
    }
}
