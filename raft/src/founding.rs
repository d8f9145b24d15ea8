//! Founding a group from a backup of its state: the snapshot and vote a fresh replica installs
//! (openraft's `Raft::install_full_snapshot`) so that the group starts again at the backup's
//! log index, with a new membership, and catches its other voters up by snapshot as usual.
//!
//! Owns the log ids and the vote of a refounded group; never judges the state itself (the
//! state machine's install decodes and checks it, as for any snapshot from a peer).
//!
//! Why these values:
//! - The snapshot keeps the backup's log index: the state records the index it was applied up
//!   to, and a store skips entries at or below it, so the refounded log must go on after it.
//! - Its last log id names the backup's term and the founder as leader. Any leader id would do
//!   on a cluster that never saw the old one; the founder's is one its peers will accept.
//! - The vote is committed (installing a snapshot is what a follower does, on its leader's
//!   word) for node 0, which is never a member, one term later: it is above the snapshot's log
//!   id, as openraft requires, and names no real leader. The founder then stands for election
//!   at once (`trigger().elect()`), in the next term.

use std::collections::{BTreeMap, BTreeSet};

use openraft::Membership;
use openraft::alias::LeaderIdOf;
use openraft::vote::RaftLeaderIdExt;

use crate::types::{
    GroupId, LogId, Node, NodeId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership,
    TypeConfig, Vote,
};

/// No node: the leader the founder's vote names before it stands for election.
const NO_NODE: NodeId = 0;

/// What a fresh replica installs to found `group` from a backup taken at `log_index` in
/// `log_term`: the vote to install under and the snapshot (the backup's `state`, with `voters`
/// as its membership).
///
/// # Errors
///
/// When `voters` is empty or does not hold `founder`, or names node 0.
pub fn founding_snapshot(
    group: GroupId,
    founder: NodeId,
    log_index: u64,
    log_term: u64,
    voters: BTreeMap<NodeId, Node>,
    state: SnapshotData,
) -> Result<(Vote, Snapshot), String> {
    if !voters.contains_key(&founder) {
        return Err(format!("group {group}: the founder, node {founder}, is not among the voters"));
    }
    if voters.contains_key(&NO_NODE) {
        return Err(format!("group {group}: node ids start at 1"));
    }
    let log_id = LogId::new(LeaderIdOf::<TypeConfig>::new_committed(log_term, founder), log_index);
    let ids: BTreeSet<NodeId> = voters.keys().copied().collect();
    let membership =
        Membership::new(vec![ids], voters).map_err(|error| format!("group {group}: {error}"))?;
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: StoredMembership::new(Some(log_id), membership),
    };
    let vote = Vote::new_committed(log_term.saturating_add(1), NO_NODE);
    Ok((vote, Snapshot { meta, snapshot: state }))
}
