//! The operator's overview over REST: the cluster as the operator's page (`/ops`) draws it.
//! `GET /v1/ops/node` is one node's own replicas (`crate::ops`); `GET /v1/ops/overview` asks
//! every node of the cluster for its view (concurrently, within [`PEER_VIEW_TIMEOUT`]), joins
//! them into each group's replicas with their lag behind the leader, and adds each show's
//! progress from this node's replicas.
//!
//! Owns the joining and the JSON shapes. Both calls need the operator credential, which the
//! overview passes on to the other nodes. A node that does not answer is shown unreachable,
//! never guessed.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Request, header};
use openraft::async_runtime::WatchReceiver;
use serde::{Deserialize, Serialize};
use statemachine::METADATA_GROUP;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::names::ShowStatusName;
use crate::operations;
use crate::ops::{self, NodeView, ReplicaView, Sample};
use crate::rest::RestState;
use crate::rest::error::ErrorBody;
use crate::rest::extract::Operator;

/// How long the overview waits for another node's view.
pub const PEER_VIEW_TIMEOUT: Duration = Duration::from_secs(1);

/// One replica of a group in the overview.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Replica {
    /// The node holding it.
    pub node_id: u64,
    /// The node's address.
    pub address: String,
    /// Whether the node answered.
    pub reachable: bool,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown` (empty if unreachable).
    pub role: String,
    /// Its term.
    pub term: u64,
    /// Its last log index.
    pub last_log_index: u64,
    /// The index it knows committed.
    pub committed_index: u64,
    /// The index its state has applied.
    pub applied_index: u64,
    /// Entries it has yet to apply of the leader's log (null if no leader answered).
    pub lag: Option<u64>,
}

/// One group in the overview.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GroupOverview {
    /// The group.
    pub group_id: u64,
    /// Its leader, as the replicas that answered agree in the highest term (0: none).
    pub leader_id: u64,
    /// That term.
    pub term: u64,
    /// Outbox events not yet trimmed, in the leader's state (null if it did not answer).
    pub outbox_backlog: Option<u64>,
    /// Its replicas, by node.
    pub replicas: Vec<Replica>,
}

/// One point of a show's progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProgressPoint {
    /// When (the answering node's clock, Unix ms).
    pub at_ms: u64,
    /// Free seats.
    pub free: u32,
    /// Held seats.
    pub held: u32,
    /// Booked seats.
    pub booked: u32,
    /// Seats kept for or offered to the waitlist.
    pub reserved: u32,
}

impl From<Sample> for ProgressPoint {
    fn from(sample: Sample) -> ProgressPoint {
        let Sample { at_ms, free, held, booked, reserved } = sample;
        ProgressPoint { at_ms, free, held, booked, reserved }
    }
}

/// A show's on-sale progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShowProgress {
    /// The show.
    pub show_id: u64,
    /// Its data group.
    pub group_id: u64,
    /// Its event's title (null if not in the catalog).
    pub title: Option<String>,
    /// Its sales status.
    pub status: ShowStatusName,
    /// Its seats.
    pub seat_count: u32,
    /// Its seats by status now, and earlier (sampled every 5 s while the page is open).
    pub history: Vec<ProgressPoint>,
}

/// The cluster as the operator's page draws it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Overview {
    /// The node that answered.
    pub node_id: u64,
    /// When (its clock, Unix ms).
    pub at_ms: u64,
    /// Every group.
    pub groups: Vec<GroupOverview>,
    /// Every show this node's replicas know.
    pub shows: Vec<ShowProgress>,
}

/// One node's own replicas (operator).
#[utoipa::path(
    get, path = "/v1/ops/node", tag = "node", security(("operator" = [])),
    responses(
        (status = 200, description = "This node's replicas", body = Object),
        (status = 401, description = "No operator credential", body = ErrorBody),
    )
)]
pub async fn node_view(
    State(state): State<RestState>,
    _operator: Operator,
) -> Result<Json<NodeView>, ApiError> {
    Ok(Json(ops::node_view(state.service.shared())?))
}

/// The cluster's groups, replicas and lag, and each show's progress (operator).
#[utoipa::path(
    get, path = "/v1/ops/overview", tag = "node", security(("operator" = [])),
    responses(
        (status = 200, description = "The overview", body = Overview),
        (status = 401, description = "No operator credential", body = ErrorBody),
    )
)]
pub async fn overview(
    State(state): State<RestState>,
    _operator: Operator,
    headers: HeaderMap,
) -> Result<Json<Overview>, ApiError> {
    let shared = state.service.shared();
    let me = shared.config.id;
    let nodes: BTreeMap<u64, String> = {
        let metadata = shared.group(METADATA_GROUP)?;
        let metrics = metadata.raft.metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
        membership
            .nodes()
            .map(|(id, node)| (*id, raft::tls::client_address(&node.addr).to_owned()))
            .collect()
    };
    let credential = headers.get(header::AUTHORIZATION).cloned();
    let asks = nodes.iter().map(|(&id, address)| {
        let (state, credential) = (&state, credential.clone());
        async move {
            let view = if id == me {
                ops::node_view(state.service.shared()).ok()
            } else {
                peer_view(state, address, credential).await
            };
            (id, view)
        }
    });
    let views: BTreeMap<u64, Option<NodeView>> =
        futures_util::future::join_all(asks).await.into_iter().collect();
    let groups = join(&nodes, &views);

    let now_ms = shared.clock.now_ms();
    let summaries = operations::list_shows(&state.service)?;
    let histories = state.progress.record(&summaries, now_ms);
    let titles = state.service.read_catalog(|group| {
        let catalog = group.catalog();
        summaries
            .iter()
            .map(|summary| {
                let listing = catalog.listing(summary.show)?;
                Some(catalog.event(listing.spec.event)?.spec.title.clone())
            })
            .collect::<Vec<_>>()
    })?;
    let shows = summaries
        .iter()
        .zip(titles)
        .map(|(summary, title)| ShowProgress {
            show_id: summary.show.0,
            group_id: summary.group,
            title,
            status: summary.status.into(),
            seat_count: summary.seat_count,
            history: histories
                .get(&summary.show)
                .map(|history| history.iter().copied().map(ProgressPoint::from).collect())
                .unwrap_or_default(),
        })
        .collect();
    Ok(Json(Overview { node_id: me, at_ms: now_ms, groups, shows }))
}

/// Another node's view, or `None` when it does not answer one in time.
async fn peer_view(
    state: &RestState,
    address: &str,
    credential: Option<axum::http::HeaderValue>,
) -> Option<NodeView> {
    let mut request = Request::get(format!("{}://{address}/v1/ops/node", state.node_scheme));
    if let Some(credential) = credential {
        request = request.header(header::AUTHORIZATION, credential);
    }
    let request = request.body(Bytes::new()).ok()?;
    let answer = state.http.send(request, PEER_VIEW_TIMEOUT).await.ok()?;
    if !answer.status.is_success() {
        return None;
    }
    serde_json::from_slice(&answer.body).ok()
}

/// Each group's replicas from every node's view (`None`: the node did not answer).
fn join(
    nodes: &BTreeMap<u64, String>,
    views: &BTreeMap<u64, Option<NodeView>>,
) -> Vec<GroupOverview> {
    let mut by_group: BTreeMap<u64, Vec<(u64, &ReplicaView)>> = BTreeMap::new();
    for (&node, view) in views {
        for replica in view.iter().flat_map(|view| &view.groups) {
            by_group.entry(replica.group_id).or_default().push((node, replica));
        }
    }
    by_group
        .into_iter()
        .map(|(group_id, replicas)| {
            // The leader the replicas of the highest term name; its own view is the reference.
            let term = replicas.iter().map(|(_, replica)| replica.term).max().unwrap_or(0);
            let leader_id = replicas
                .iter()
                .filter(|(_, replica)| replica.term == term && replica.leader_id != 0)
                .map(|(_, replica)| replica.leader_id)
                .max()
                .unwrap_or(0);
            let leader = replicas
                .iter()
                .find(|(node, replica)| *node == leader_id && replica.role == "leader")
                .map(|(_, replica)| *replica);
            let mut joined: Vec<Replica> = replicas
                .iter()
                .map(|&(node_id, replica)| Replica {
                    node_id,
                    address: nodes.get(&node_id).cloned().unwrap_or_default(),
                    reachable: true,
                    role: replica.role.clone(),
                    term: replica.term,
                    last_log_index: replica.last_log_index,
                    committed_index: replica.committed_index,
                    applied_index: replica.applied_index,
                    lag: leader
                        .map(|leader| leader.last_log_index.saturating_sub(replica.applied_index)),
                })
                .collect();
            for (&node_id, view) in views {
                if view.is_none() {
                    joined.push(unreachable(node_id, nodes));
                }
            }
            joined.sort_by_key(|replica| replica.node_id);
            GroupOverview {
                group_id,
                leader_id,
                term,
                outbox_backlog: leader.map(|leader| leader.outbox_backlog),
                replicas: joined,
            }
        })
        .collect()
}

/// A node that did not answer, shown as such.
fn unreachable(node_id: u64, nodes: &BTreeMap<u64, String>) -> Replica {
    Replica {
        node_id,
        address: nodes.get(&node_id).cloned().unwrap_or_default(),
        reachable: false,
        role: String::new(),
        term: 0,
        last_log_index: 0,
        committed_index: 0,
        applied_index: 0,
        lag: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(group_id: u64, role: &str, term: u64, leader_id: u64, applied: u64) -> ReplicaView {
        ReplicaView {
            group_id,
            role: role.into(),
            term,
            leader_id,
            last_log_index: applied.max(10),
            committed_index: applied,
            applied_index: applied,
            outbox_backlog: 3,
        }
    }

    #[test]
    fn replicas_join_with_their_lag_behind_the_leader_and_silent_nodes_show_unreachable() {
        let nodes: BTreeMap<u64, String> =
            (1..=3).map(|id| (id, format!("127.0.0.1:710{id}"))).collect();
        let views = BTreeMap::from([
            (1, Some(NodeView { node_id: 1, groups: vec![replica(1, "leader", 4, 1, 10)] })),
            (2, Some(NodeView { node_id: 2, groups: vec![replica(1, "follower", 4, 1, 7)] })),
            (3, None),
        ]);
        let groups = join(&nodes, &views);
        assert_eq!(groups.len(), 1);
        let group = &groups[0];
        assert_eq!((group.leader_id, group.term, group.outbox_backlog), (1, 4, Some(3)));
        let lags: Vec<(u64, bool, Option<u64>)> =
            group.replicas.iter().map(|r| (r.node_id, r.reachable, r.lag)).collect();
        assert_eq!(lags, [(1, true, Some(0)), (2, true, Some(3)), (3, false, None)]);
        assert_eq!(group.replicas[2].address, "127.0.0.1:7103");
    }
}
