//! The auditor: on every node, off the apply path, checks each group's state against every
//! invariant and compares its digest with the leader's at the same log index.
//!
//! Owns when the checks run and what they conclude. Every replica keeps a checkpoint of its
//! group's state after each entry whose index is a multiple of `--audit-checkpoint-entries`
//! (`raft::GroupReader::keep_checkpoints`); the auditor takes it, checks `check_invariants` and
//! computes the state's digest on a blocking thread (applies go on meanwhile; a show unchanged
//! since the last audit is neither checked nor encoded again, `Group::audit_reusing`), and
//! keeps its last digests. On the group's leader it also proposes its digest
//! (`Command::AuditDigest`), so the leader's digest reaches every replica through the log; each
//! replica compares its own digest at that index with the leader's. A broken invariant or a
//! digest that differs is logged at error level, loudly, and exported as a gauge
//! (`crate::metrics`), for the alert rules. Never repairs anything and never changes state but
//! by that one proposal.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use raft::GroupId;
use statemachine::limits::AUDIT_DIGESTS_KEPT;
use statemachine::{Command, Digest, ShowEncodings};

use crate::group::HostedGroup;

/// What the auditor knows of one group on this node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupAudit {
    /// The last checkpoint index checked (0: none yet).
    pub checked_index: u64,
    /// The first broken invariant found, if any (it stays: a broken state does not mend).
    pub violation: Option<String>,
    /// The last index whose digest was compared with the leader's (0: none yet).
    pub compared_index: u64,
    /// The first index at which this replica's digest differed from the leader's, if any.
    pub diverged_at: Option<u64>,
    /// This replica's last digests, by index.
    digests: VecDeque<(u64, Digest)>,
}

/// The auditor's findings, per group, shared with the metrics. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Audits {
    groups: Arc<Mutex<BTreeMap<GroupId, GroupAudit>>>,
    /// What the last audit of each group found of its shows: the next one checks and encodes
    /// again only the shows written to since (`statemachine::ShowEncodings`).
    encodings: Arc<Mutex<BTreeMap<GroupId, ShowEncodings>>>,
}

impl Audits {
    /// What is known of every group audited so far.
    pub fn snapshot(&self) -> BTreeMap<GroupId, GroupAudit> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<GroupId, GroupAudit>> {
        // Every update replaces whole fields; a panic cannot leave one half-written.
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs the auditor over `groups` every `interval` until the node stops.
pub async fn run(groups: Vec<Arc<HostedGroup>>, audits: Audits, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        for hosted in &groups {
            audit(hosted, &audits).await;
        }
    }
}

/// Records what the check of the checkpoint at `index` found.
fn record(
    audits: &Audits,
    group: GroupId,
    index: u64,
    invariants: Result<(), String>,
    digest: Digest,
) {
    let mut all = audits.lock();
    let found = all.entry(group).or_default();
    found.checked_index = index;
    if let Err(violation) = invariants {
        tracing::error!(
            group,
            index,
            %violation,
            "INVARIANT VIOLATED: this replica's state breaks a booking invariant"
        );
        found.violation.get_or_insert(violation);
    }
    found.digests.push_back((index, digest));
    while found.digests.len() > AUDIT_DIGESTS_KEPT {
        found.digests.pop_front();
    }
}

/// Checks `hosted`'s latest checkpoint, if a new one was kept, then compares this replica's
/// digests with the leader's recorded ones.
pub(crate) async fn audit(hosted: &Arc<HostedGroup>, audits: &Audits) {
    let group = hosted.id;
    let checkpoint = match hosted.reader.take_checkpoint() {
        Ok(checkpoint) => checkpoint,
        Err(error) => {
            tracing::error!(group, %error, "auditor cannot read the state");
            return;
        }
    };
    if let Some((index, state)) = checkpoint {
        let encodings = Arc::clone(&audits.encodings);
        // A long check no buyer waits on: at a lower priority than serving.
        let checked = raft::BookingRuntime::spawn_background(move || {
            let mut all = encodings.lock().unwrap_or_else(PoisonError::into_inner);
            state.audit_reusing(all.entry(group).or_default())
        })
        .await;
        let Ok((invariants, digest)) = checked else { return };
        record(audits, group, index, invariants, digest);
        if hosted.is_leader() {
            // Recorded in the log so every replica compares with it; a refusal (a stale index
            // on a new leader) or a lost proposal only skips one comparison.
            let proposed = hosted.propose(Command::AuditDigest { index, digest }).await;
            if let Err(error) = proposed {
                tracing::debug!(group, index, %error, "audit digest not recorded");
            }
        }
    }
    let leaders = match hosted.read_local(|state| {
        state.digests().iter().map(|(index, digest)| (index, *digest)).collect::<Vec<_>>()
    }) {
        Ok(leaders) => leaders,
        Err(error) => {
            tracing::error!(group, %error, "auditor cannot read the leaders' digests");
            return;
        }
    };
    let mut all = audits.lock();
    let found = all.entry(group).or_default();
    for (index, theirs) in leaders {
        let Some((_, ours)) = found.digests.iter().find(|(at, _)| *at == index) else { continue };
        if *ours != theirs && found.diverged_at.is_none() {
            tracing::error!(
                group,
                index,
                "REPLICAS DIVERGED: this replica's state after entry {index} differs from the leader's"
            );
            found.diverged_at = Some(index);
        }
        found.compared_index = found.compared_index.max(index);
    }
}

#[cfg(test)]
mod tests {
    use statemachine::SessionId;

    use super::*;
    use crate::test_node;

    /// Holds a fresh seat (one log entry each) until the group has applied at least `index`.
    async fn apply_past(cluster: &test_node::OneNode, show: statemachine::ShowId, index: u64) {
        while cluster.applied_index() < index {
            let seat = u32::try_from(cluster.applied_index()).unwrap();
            cluster.hold(show, SessionId(1_000 + u128::from(seat)), &[seat]).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_replica_whose_digest_differs_from_the_leaders_is_flagged() {
        let cluster = test_node::start().await;
        let hosted = cluster.node.shared().group(1).unwrap().clone();
        hosted.reader.keep_checkpoints(4).unwrap();
        let show = cluster.open_show(7, 100).await;
        let audits = Audits::default();

        // A checkpoint checked: invariants kept; the leader records its digest, and its own
        // digest matches it at that index.
        apply_past(&cluster, show, 5).await;
        audit(&hosted, &audits).await;
        audit(&hosted, &audits).await;
        let found = audits.snapshot()[&1].clone();
        assert!(found.checked_index >= 4 && found.checked_index % 4 == 0, "{found:?}");
        assert_eq!(found.violation, None);
        assert_eq!((found.compared_index, found.diverged_at), (found.checked_index, None));

        // Another digest recorded first for the next checkpoint (as a diverged leader would):
        // this replica's differs, and it says so.
        let next = found.checked_index + 4;
        apply_past(&cluster, show, next + 1).await;
        let bogus = Command::AuditDigest { index: next, digest: [0; 32] };
        hosted.propose(bogus).await.unwrap().outcome.unwrap();
        // The checkpoint kept may be a later one: check until the one at `next` is compared.
        while audits.snapshot()[&1].compared_index < next {
            apply_past(&cluster, show, cluster.applied_index() + 1).await;
            audit(&hosted, &audits).await;
        }
        let found = audits.snapshot()[&1].clone();
        assert_eq!(found.diverged_at, Some(next), "{found:?}");
        assert_eq!(found.violation, None);
    }
}
