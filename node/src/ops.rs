//! What the operator's page shows, as the node's own state knows it: each hosted replica's Raft
//! position (role, term, leader, last, committed and applied index) and its group's outbox
//! backlog, and each show's on-sale progress (free, held, booked and reserved seats) sampled
//! over time.
//!
//! Owns the views and the progress samples. A node knows only its own replicas: the REST skin
//! asks every node for its view and joins them into one picture of the cluster. Progress is
//! sampled when the page asks (at most every [`PROGRESS_SAMPLE_MS`]), not by a background task,
//! so a node nobody watches does no work for it; its history starts when an operator first
//! opens the page on that node. Never changes state.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use openraft::ServerState;
use openraft::async_runtime::WatchReceiver;
use serde::{Deserialize, Serialize};
use statemachine::ShowId;

use crate::error::ApiError;
use crate::node::Shared;
use crate::operations::ShowSummary;

/// How often a show's progress is sampled at most.
pub const PROGRESS_SAMPLE_MS: u64 = 5_000;

/// Samples kept per show: an hour at one per [`PROGRESS_SAMPLE_MS`].
pub const PROGRESS_SAMPLES_MAX: usize = 720;

/// Shows whose progress is kept (the lowest-numbered are dropped beyond it).
pub const PROGRESS_SHOWS_MAX: usize = 256;

/// The wire name of a Raft role.
pub fn role_name(state: ServerState) -> &'static str {
    match state {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// One replica of a group as its node sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaView {
    /// The group.
    pub group_id: u64,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: String,
    /// Its term.
    pub term: u64,
    /// The leader it knows of (0: none).
    pub leader_id: u64,
    /// Its last log index.
    pub last_log_index: u64,
    /// The index it knows committed.
    pub committed_index: u64,
    /// The index its state has applied.
    pub applied_index: u64,
    /// Outbox events of the group not yet trimmed, in this replica's state.
    pub outbox_backlog: u64,
}

/// One node's replicas.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    /// The node.
    pub node_id: u64,
    /// Its replicas, by group.
    pub groups: Vec<ReplicaView>,
}

/// This node's replicas, now.
///
/// # Errors
///
/// `Internal` if a group's state cannot be read.
pub fn node_view(shared: &Shared) -> Result<NodeView, ApiError> {
    let mut groups = Vec::with_capacity(shared.groups.len());
    for hosted in shared.groups.values() {
        let metrics = hosted.raft.metrics().borrow_watched().clone();
        let outbox_backlog = hosted.read_local(|group| group.outbox().len() as u64)?;
        groups.push(ReplicaView {
            group_id: hosted.id,
            role: role_name(metrics.state).to_owned(),
            term: metrics.current_term,
            leader_id: metrics.current_leader.unwrap_or(0),
            last_log_index: metrics.last_log_index.unwrap_or(0),
            committed_index: metrics.local_committed.map_or(0, |id| id.index),
            applied_index: metrics.last_applied.map_or(0, |id| id.index),
            outbox_backlog,
        });
    }
    Ok(NodeView { node_id: shared.config.id, groups })
}

/// A show's seats by status at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// When (this node's clock, Unix ms).
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

/// Each show's progress samples on this node.
#[derive(Debug, Default)]
pub struct Progress {
    samples: Mutex<BTreeMap<ShowId, VecDeque<Sample>>>,
}

impl Progress {
    /// Records `shows` (summaries read now) at `now_ms`, unless the last sample is younger
    /// than [`PROGRESS_SAMPLE_MS`]; returns each show's samples, oldest first.
    pub fn record(&self, shows: &[ShowSummary], now_ms: u64) -> BTreeMap<ShowId, Vec<Sample>> {
        // Each change is one push or pop; a panic cannot leave a history half written.
        let mut samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        for show in shows {
            if !samples.contains_key(&show.show) && samples.len() >= PROGRESS_SHOWS_MAX {
                samples.pop_first();
            }
            let history = samples.entry(show.show).or_default();
            let due = history
                .back()
                .is_none_or(|last| now_ms.saturating_sub(last.at_ms) >= PROGRESS_SAMPLE_MS);
            if due {
                if history.len() >= PROGRESS_SAMPLES_MAX {
                    history.pop_front();
                }
                history.push_back(Sample {
                    at_ms: now_ms,
                    free: show.free,
                    held: show.held,
                    booked: show.booked,
                    reserved: show.reserved,
                });
            }
        }
        shows
            .iter()
            .map(|show| {
                let history = samples.get(&show.show).map(|h| h.iter().copied().collect());
                (show.show, history.unwrap_or_default())
            })
            .collect()
    }
}
