//! The gRPC `AdminService`: this node's view of its groups, and membership changes.
//!
//! Owns translating operator requests into openraft membership calls on the group's leader
//! (a hint elsewhere): add a learner, promote learners, remove nodes, move a replica (learner,
//! catch up, then one joint-consensus change), transfer leadership; backups and restores of
//! whole groups (`backup.rs`). Never edits a membership
//! by hand and never forces anything: every change is a Raft log entry committed by a quorum.
//! Every call, `Status` included, needs the operator credential: [`OperatorOnly`] checks it
//! before any method runs, so a method added later cannot forget to.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use openraft::{BasicNode, ChangeMembers};
use proto::booking::admin_service_server::{AdminService, AdminServiceServer};
use proto::booking::{
    AddLearnerRequest, BackupRequest, FeatureLevelReply, GroupStatus, MembershipReply,
    MoveReplicaRequest, NodesRequest, RestoreChunk, RestoreReply, SetFeatureLevelRequest,
    StatusReply, StatusRequest, TransferLeaderRequest,
};
use raft::NodeId;
use statemachine::METADATA_GROUP;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

use super::backup::{self, BackupStream};
use crate::error::ApiError;
use crate::group::HostedGroup;
use crate::names::hex;
use crate::node::Shared;

/// How long adding a learner may wait for it to catch up, when asked to wait.
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a membership change may take to commit.
pub const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a leadership transfer may take before it is reported as not done.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(5);

/// The admin API of one node.
pub struct AdminApi {
    shared: Arc<Shared>,
}

impl AdminApi {
    /// The API over this node's groups.
    pub fn new(shared: Arc<Shared>) -> AdminApi {
        AdminApi { shared }
    }

    /// The tonic service, behind the operator credential.
    pub fn into_server(self) -> InterceptedService<AdminServiceServer<AdminApi>, OperatorOnly> {
        let check = OperatorOnly { shared: self.shared.clone() };
        AdminServiceServer::with_interceptor(self, check)
    }

    /// The group `group`, if this node leads it.
    fn led(&self, group: u64) -> Result<&Arc<HostedGroup>, ApiError> {
        let hosted = self.shared.group(group)?;
        if !hosted.is_leader() {
            return Err(hosted.not_leader());
        }
        Ok(hosted)
    }

    fn status_of(&self, hosted: &HostedGroup, with_digest: bool) -> Result<GroupStatus, ApiError> {
        let metrics = hosted.raft.metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let learners: Vec<NodeId> = membership.learner_ids().collect();
        let me = self.shared.config.id;
        let (digest, digest_index) = if with_digest {
            hosted.read_local(|state| (hex(&state.digest()), state.applied_index()))?
        } else {
            (String::new(), 0)
        };
        let feature_level = hosted.read_local(statemachine::Group::feature_level)?;
        let placement = self.shared.group(METADATA_GROUP)?.read_local(|state| {
            if hosted.id == METADATA_GROUP {
                state.placement().len() as u64
            } else {
                state.placement().shows_per_group().get(&hosted.id).copied().unwrap_or(0)
            }
        })?;
        Ok(GroupStatus {
            group_id: hosted.id,
            role: crate::ops::role_name(metrics.state).to_owned(),
            term: metrics.current_term,
            leader_id: metrics.current_leader.unwrap_or(0),
            last_log_index: metrics.last_log_index.unwrap_or(0),
            committed_index: metrics.local_committed.map_or(0, |id| id.index),
            applied_index: metrics.last_applied.map_or(0, |id| id.index),
            snapshot_index: metrics.snapshot.map_or(0, |id| id.index),
            member: voters.contains(&me) || learners.contains(&me),
            voters,
            learners,
            digest,
            digest_index,
            shows: placement,
            fatal: metrics.running_state.is_err(),
            feature_level,
        })
    }

    /// The group's membership as its leader sees it after a change.
    fn membership_reply(&self, hosted: &HostedGroup) -> MembershipReply {
        let metrics = hosted.raft.metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
        MembershipReply {
            group_id: hosted.id,
            leader_id: metrics.current_leader.unwrap_or(0),
            voters: membership.voter_ids().collect(),
            learners: membership.learner_ids().collect(),
            log_index: metrics.membership_config.log_id().map_or(0, |id| id.index),
        }
    }

    async fn change(
        &self,
        hosted: &HostedGroup,
        change: ChangeMembers<NodeId, BasicNode>,
    ) -> Result<(), ApiError> {
        let changed =
            tokio::time::timeout(CHANGE_TIMEOUT, hosted.raft.change_membership(change, false));
        match changed.await {
            Err(_elapsed) => Err(ApiError::Unavailable(format!(
                "group {}: the change did not commit within {CHANGE_TIMEOUT:?}",
                hosted.id
            ))),
            Ok(Err(error)) => Err(hosted.raft_error(error)),
            Ok(Ok(_response)) => Ok(()),
        }
    }

    async fn add_learner(
        &self,
        hosted: &HostedGroup,
        node: NodeId,
        address: &str,
        wait: bool,
    ) -> Result<(), ApiError> {
        if node == 0 || address.is_empty() {
            return Err(ApiError::InvalidArgument("node_id and address are required".into()));
        }
        if self.shared.config.peer.is_some() && !raft::tls::names_peer_address(address) {
            return Err(ApiError::InvalidArgument(format!(
                "address `{address}` names no peer port: give `<client address> \
                 peer=<peer address>` (`bookctl member ... --peer-address`), as node {node} reports \
                 it (`bookctl status --json`: `reported_address`)"
            )));
        }
        let timeout = if wait { CATCH_UP_TIMEOUT } else { CHANGE_TIMEOUT };
        let added = hosted.raft.add_learner(node, BasicNode::new(address), wait);
        match tokio::time::timeout(timeout, added).await {
            Err(_elapsed) => Err(ApiError::Unavailable(format!(
                "group {}: node {node} did not catch up within {timeout:?}",
                hosted.id
            ))),
            Ok(Err(error)) => Err(hosted.raft_error(error)),
            Ok(Ok(_response)) => Ok(()),
        }
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusReply>, Status> {
        let with_digest = request.into_inner().with_digest;
        let mut groups = Vec::new();
        for hosted in self.shared.groups.values() {
            groups.push(self.status_of(hosted, with_digest)?);
        }
        Ok(Response::new(StatusReply {
            node_id: self.shared.config.id,
            address: self.shared.config.membership_address(),
            groups,
            feature_level_max: statemachine::FEATURE_LEVEL,
        }))
    }

    async fn set_feature_level(
        &self,
        request: Request<SetFeatureLevelRequest>,
    ) -> Result<Response<FeatureLevelReply>, Status> {
        let request = request.into_inner();
        let hosted = self.led(request.group_id)?;
        if request.level > statemachine::FEATURE_LEVEL {
            return Err(ApiError::InvalidArgument(format!(
                "level: this node's build knows feature levels up to {}",
                statemachine::FEATURE_LEVEL
            ))
            .into());
        }
        let command = statemachine::Command::SetFeatureLevel { level: request.level };
        let answer = hosted.propose(command).await?;
        match answer.outcome.map_err(ApiError::Rejected)? {
            statemachine::Reply::FeatureLevelSet { level, duplicate } => {
                Ok(Response::new(FeatureLevelReply { group_id: hosted.id, level, duplicate }))
            }
            other => Err(ApiError::unexpected(other).into()),
        }
    }

    async fn add_learner(
        &self,
        request: Request<AddLearnerRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let request = request.into_inner();
        let hosted = self.led(request.group_id)?;
        AdminApi::add_learner(self, hosted, request.node_id, &request.address, request.wait)
            .await?;
        Ok(Response::new(self.membership_reply(hosted)))
    }

    async fn promote(
        &self,
        request: Request<NodesRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let request = request.into_inner();
        let hosted = self.led(request.group_id)?;
        let nodes = node_set(&request.node_ids)?;
        self.change(hosted, ChangeMembers::AddVoterIds(nodes)).await?;
        Ok(Response::new(self.membership_reply(hosted)))
    }

    async fn remove(
        &self,
        request: Request<NodesRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let request = request.into_inner();
        let hosted = self.led(request.group_id)?;
        let nodes = node_set(&request.node_ids)?;
        let voters: BTreeSet<NodeId> = hosted.raft.voter_ids().collect();
        let (as_voters, as_learners): (BTreeSet<NodeId>, BTreeSet<NodeId>) =
            nodes.into_iter().partition(|node| voters.contains(node));
        if !as_voters.is_empty() {
            // `retain = false` in `change`: removed voters do not stay on as learners.
            self.change(hosted, ChangeMembers::RemoveVoters(as_voters)).await?;
        }
        if !as_learners.is_empty() {
            self.change(hosted, ChangeMembers::RemoveNodes(as_learners)).await?;
        }
        Ok(Response::new(self.membership_reply(hosted)))
    }

    async fn move_replica(
        &self,
        request: Request<MoveReplicaRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let request = request.into_inner();
        let hosted = self.led(request.group_id)?;
        let mut voters: BTreeSet<NodeId> = hosted.raft.voter_ids().collect();
        if !voters.contains(&request.from_node_id) {
            return Err(ApiError::InvalidArgument(format!(
                "from_node_id: node {} is not a voter of group {}",
                request.from_node_id, hosted.id
            ))
            .into());
        }
        if voters.contains(&request.to_node_id) {
            return Err(ApiError::InvalidArgument(format!(
                "to_node_id: node {} is already a voter of group {}",
                request.to_node_id, hosted.id
            ))
            .into());
        }
        AdminApi::add_learner(self, hosted, request.to_node_id, &request.to_address, true).await?;
        voters.remove(&request.from_node_id);
        voters.insert(request.to_node_id);
        self.change(hosted, ChangeMembers::ReplaceAllVoters(voters)).await?;
        Ok(Response::new(self.membership_reply(hosted)))
    }

    async fn transfer_leader(
        &self,
        request: Request<TransferLeaderRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let request = request.into_inner();
        let hosted = self.led(request.group_id)?;
        let to = request.to_node_id;
        if !hosted.raft.voter_ids().any(|voter| voter == to) {
            return Err(ApiError::InvalidArgument(format!(
                "to_node_id: node {to} is not a voter of group {}",
                hosted.id
            ))
            .into());
        }
        if to != hosted.node_id() {
            hosted
                .raft
                .trigger()
                .transfer_leader(to)
                .await
                .map_err(|fatal| ApiError::Internal(fatal.to_string()))?;
            let moved = hosted
                .raft
                .wait(Some(TRANSFER_TIMEOUT))
                .metrics(|metrics| metrics.current_leader == Some(to), "leader moved")
                .await;
            if let Err(error) = moved {
                return Err(ApiError::Unavailable(format!("group {}: {error}", hosted.id)).into());
            }
        }
        Ok(Response::new(self.membership_reply(hosted)))
    }

    type BackupStream = BackupStream;

    async fn backup(
        &self,
        request: Request<BackupRequest>,
    ) -> Result<Response<BackupStream>, Status> {
        let hosted = self.led(request.into_inner().group_id)?;
        Ok(Response::new(backup::take(hosted).await?))
    }

    async fn restore(
        &self,
        request: Request<Streaming<RestoreChunk>>,
    ) -> Result<Response<RestoreReply>, Status> {
        Ok(Response::new(backup::restore(&self.shared, request.into_inner()).await?))
    }
}

/// Refuses a call without the operator credential (`authorization: Bearer <token>`):
/// UNAUTHENTICATED without one, PERMISSION_DENIED (`forbidden`) with another.
#[derive(Clone)]
pub struct OperatorOnly {
    shared: Arc<Shared>,
}

impl Interceptor for OperatorOnly {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let authorization =
            request.metadata().get("authorization").and_then(|value| value.to_str().ok());
        self.shared.sessions.operator(authorization)?;
        Ok(request)
    }
}

fn node_set(ids: &[NodeId]) -> Result<BTreeSet<NodeId>, ApiError> {
    if ids.is_empty() || ids.contains(&0) {
        return Err(ApiError::InvalidArgument("node_ids: one or more non-zero ids".into()));
    }
    Ok(ids.iter().copied().collect())
}
