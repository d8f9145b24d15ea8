//! The openraft type configuration of every booking group, and the names the rest of the crate
//! uses for openraft's generic types.
//!
//! Owns what a log entry carries ([`Proposal`]: the leader's log time and a batch of commands) and
//! what applying it answers ([`Response`]: one answer per command, its outcome and the view of
//! what it wrote). Never decides anything about
//! bookings: the commands are opaque here and are judged only by `statemachine` in apply.

use std::fmt;

use serde::{Deserialize, Serialize};
use statemachine::{Answer, Command};

/// A Raft group's id. Group 0 is the metadata group; the others hold shows.
pub type GroupId = u64;

/// A node's id, the same in every group the node is a member of.
pub type NodeId = u64;

/// What a node is to its peers: the address its Raft service listens on.
pub type Node = openraft::BasicNode;

/// The application data of one log entry: a batch of commands stamped by the leader.
///
/// The leader coalesces concurrent client commands of a group into one proposal, so one WAL sync
/// and one replication round serve them all (shared/DESIGN.md, "Throughput").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// The leader's wall-clock milliseconds when it proposed the entry. Apply turns it into log
    /// time (`max(previous, stamped)`), so followers never read their own clocks.
    pub time_ms: u64,
    /// The commands, each of which gets its own outcome.
    pub commands: Vec<Command>,
}

impl fmt::Display for Proposal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "proposal(time_ms: {}, commands: {})", self.time_ms, self.commands.len())
    }
}

/// What applying one entry answers: one answer per command of its proposal, in order
/// (`Group::apply_answering`: the outcome, and the view of the entity a client command wrote).
/// Blank and membership entries answer an empty vector. Answers go to the proposer's callers
/// only; they are never persisted.
pub type Response = Vec<Answer>;

openraft::declare_raft_types!(
    /// The openraft type configuration of every booking group.
    pub TypeConfig:
        D = Proposal,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
        AsyncRuntime = crate::runtime::BookingRuntime,
);

/// The snapshot payload handed to and from openraft: a group encoded by
/// `statemachine::Group::encode_snapshot` (which carries its own magic and format version).
pub type SnapshotData = Vec<u8>;

/// A log id (the leader that proposed the entry, and its index).
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
/// A log entry as stored in the log.
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
/// A vote (the term and the candidate or leader it was granted to).
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
/// A membership config together with the log id of the entry that carried it.
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
/// The metadata of a snapshot: the last log id and membership it covers.
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot: its metadata and its bytes.
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
