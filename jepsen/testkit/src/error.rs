//! Why a cluster operation failed: one error type for every part of the kit, so that a nemesis
//! can tell an unknown outcome from a refusal, and a test returning `io::Result` can use `?`.
//!
//! Owns only the error's variants and conversions; never decides what a failure means for a
//! test (a nemesis step, a verdict): its callers do.

use std::io;
use std::time::Duration;

use crate::{GroupId, NodeId};

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
    /// No node of the cluster runs (each exited by itself or was killed), so waiting for
    /// one to answer would only run out the clock.
    #[error("no node runs while waiting for {what} (crashed: {crashed:?})")]
    NoneRunning {
        /// What was waited for.
        what: String,
        /// The crashes recorded so far: node and exit status.
        crashed: Vec<(NodeId, String)>,
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
    /// A mapper of an `io::Error` to [`ClusterError::Io`] saying what was being done.
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> ClusterError {
        let context = context.into();
        move |source| ClusterError::Io { context, source }
    }
}

impl From<ClusterError> for io::Error {
    /// Lets a test that returns `io::Result` use `?` on the kit's calls; the message is kept
    /// whole (a crash carries its node's log tail).
    fn from(error: ClusterError) -> io::Error {
        match error {
            ClusterError::Io { context, source } => {
                io::Error::new(source.kind(), format!("{context}: {source}"))
            }
            other => io::Error::other(other),
        }
    }
}
