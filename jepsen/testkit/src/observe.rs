//! What the nodes of a [`Cluster`] say about themselves, asked through the SDK's status call:
//! each node's status and view of a group, state digests, the leader a majority agrees on
//! (among the nodes that can answer, or among a given set), and the wait until every replica of
//! a group has applied the same log to the same state.
//!
//! Owns only the asking and the agreement rules; never changes the cluster, and never judges a
//! history (the checkers do). A divergence it sees is reported as such at once, never waited
//! out.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use client::{GroupStatus, StatusReply};
use tokio::task::JoinSet;

use crate::cluster::Cluster;
use crate::error::ClusterError;
use crate::{GroupId, NodeId};

/// What every replica of one group reported once they agreed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Converged {
    /// The applied index every member reached.
    pub applied_index: u64,
    /// The digest of the state at that index.
    pub digest: String,
    /// The members (voters and learners) that reported it.
    pub members: Vec<NodeId>,
}

impl Cluster {
    /// Node `id`'s status (with each group's digest if `with_digest`), one short attempt
    /// ([`crate::ClusterOptions::status_timeout`]).
    ///
    /// # Errors
    ///
    /// When the node does not answer in time.
    pub async fn status(&self, id: NodeId, with_digest: bool) -> Result<StatusReply, ClusterError> {
        let address = self.address(id)?;
        Ok(self.status_client.status(&address, with_digest).await?)
    }

    /// Node `id`'s status of `group`.
    ///
    /// # Errors
    ///
    /// When the node does not answer, or does not host the group.
    pub async fn group_status(
        &self,
        id: NodeId,
        group: GroupId,
        with_digest: bool,
    ) -> Result<GroupStatus, ClusterError> {
        let reply = self.status(id, with_digest).await?;
        reply.groups.into_iter().find(|status| status.group_id == group).ok_or_else(|| {
            ClusterError::WrongState { node: id, state: format!("reports no group {group}") }
        })
    }

    /// The statuses of every node of `among`, asked concurrently; a node that did not answer
    /// maps to why.
    async fn statuses(
        &self,
        among: &[NodeId],
        with_digest: bool,
    ) -> BTreeMap<NodeId, Result<StatusReply, String>> {
        let mut calls = JoinSet::new();
        for &id in among {
            let Ok(address) = self.address(id) else { continue };
            let client = self.status_client.clone();
            calls.spawn(async move {
                let reply = client.status(&address, with_digest).await;
                (id, reply.map_err(|error| error.to_string()))
            });
        }
        let mut statuses = BTreeMap::new();
        while let Some(joined) = calls.join_next().await {
            if let Ok((id, reply)) = joined {
                statuses.insert(id, reply);
            }
        }
        statuses
    }

    /// Every running node's view of `group`, digest included (a paused node's entry says that
    /// it did not answer).
    pub async fn digests(&self, group: GroupId) -> BTreeMap<NodeId, Result<GroupStatus, String>> {
        let statuses = self.statuses(&self.running(), true).await;
        statuses
            .into_iter()
            .map(|(id, reply)| {
                let view = reply.and_then(|reply| {
                    reply
                        .groups
                        .into_iter()
                        .find(|status| status.group_id == group)
                        .ok_or_else(|| format!("reports no group {group}"))
                });
                (id, view)
            })
            .collect()
    }

    /// Waits (until [`crate::ClusterOptions::wait`]) for a node to lead `group` as a majority
    /// of its voters reports, among the nodes that can answer, and returns it.
    ///
    /// # Errors
    ///
    /// When no leader is agreed on in time, or a node crashed.
    pub async fn leader_of(&self, group: GroupId) -> Result<NodeId, ClusterError> {
        self.leader_within(group, self.options.wait).await
    }

    /// As [`Cluster::leader_of`], waiting at most `within`.
    ///
    /// # Errors
    ///
    /// As [`Cluster::leader_of`].
    pub async fn leader_within(
        &self,
        group: GroupId,
        within: Duration,
    ) -> Result<NodeId, ClusterError> {
        self.leader_among_within(group, None, within).await
    }

    /// As [`Cluster::leader_of`], asking only nodes `among` (say, a majority cut off from an
    /// old leader that still believes it leads).
    ///
    /// # Errors
    ///
    /// As [`Cluster::leader_of`].
    pub async fn leader_among(
        &self,
        group: GroupId,
        among: &[NodeId],
    ) -> Result<NodeId, ClusterError> {
        self.leader_among_within(group, Some(among), self.options.wait).await
    }

    /// The leader of `group` agreed on among `among` (every node that can answer if `None`),
    /// waited for at most `within`.
    async fn leader_among_within(
        &self,
        group: GroupId,
        among: Option<&[NodeId]>,
        within: Duration,
    ) -> Result<NodeId, ClusterError> {
        let what = match among {
            Some(among) => format!("a leader of group {group} among {among:?}"),
            None => format!("a leader of group {group}"),
        };
        let waiting = self.waiting(what.clone(), within);
        loop {
            self.check_alive()?;
            self.some_running(&what)?;
            let asked = among.map_or_else(|| self.available(), <[NodeId]>::to_vec);
            let views = self.group_views(group, &asked, false).await;
            match agreed_leader(&views) {
                Some(leader) => return Ok(leader),
                None => waiting.again(describe_views(&views)).await?,
            }
        }
    }

    /// Fails if no node of the cluster runs: every one crashed (found exited) or was killed.
    fn some_running(&self, what: &str) -> Result<(), ClusterError> {
        if self.down().len() < self.node_ids().len() {
            return Ok(());
        }
        Err(ClusterError::NoneRunning { what: what.to_owned(), crashed: self.crashes() })
    }

    /// The nodes of `among` that answered, with their view of `group`.
    async fn group_views(
        &self,
        group: GroupId,
        among: &[NodeId],
        with_digest: bool,
    ) -> BTreeMap<NodeId, GroupStatus> {
        let statuses = self.statuses(among, with_digest).await;
        statuses
            .into_iter()
            .filter_map(|(id, reply)| {
                let reply = reply.ok()?;
                let view = reply.groups.into_iter().find(|status| status.group_id == group)?;
                Some((id, view))
            })
            .collect()
    }

    /// Waits (until `within`) until every member of `group`'s membership (as its agreed leader
    /// reports it) answers with the same applied index and digest as the leader, with the
    /// leader's commit applied. Fails at once if two replicas ever report different digests at
    /// the same applied index, or a replica stopped the group on a fatal error.
    ///
    /// Reference: Raft §5.3 (State Machine Safety: replicas that applied the same log prefix
    /// are in the same state), shared/DESIGN.md "The state machine" (deterministic apply).
    ///
    /// # Errors
    ///
    /// [`ClusterError::Diverged`], or [`ClusterError::Timeout`] when they do not converge.
    pub async fn wait_converged(
        &self,
        group: GroupId,
        within: Duration,
    ) -> Result<Converged, ClusterError> {
        let mut converged = self.wait_groups_converged(&[group], within).await?;
        converged.remove(&group).ok_or_else(|| ClusterError::Invalid(format!("no group {group}")))
    }

    /// As [`Cluster::wait_converged`], for every group of the cluster at once: they converge
    /// in the same round of status calls.
    ///
    /// # Errors
    ///
    /// As [`Cluster::wait_converged`].
    pub async fn wait_all_converged(
        &self,
        within: Duration,
    ) -> Result<BTreeMap<GroupId, Converged>, ClusterError> {
        let groups: Vec<GroupId> = self.group_ids().collect();
        self.wait_groups_converged(&groups, within).await
    }

    /// See [`Cluster::wait_all_converged`], for `groups`.
    async fn wait_groups_converged(
        &self,
        groups: &[GroupId],
        within: Duration,
    ) -> Result<BTreeMap<GroupId, Converged>, ClusterError> {
        // Every digest seen, by group and index, with the node that reported it first.
        let mut seen: BTreeMap<(GroupId, u64), (NodeId, String)> = BTreeMap::new();
        let names: BTreeSet<GroupId> = groups.iter().copied().collect();
        let what = match groups {
            [group] => format!("group {group}'s replicas to converge"),
            _ => format!("the replicas of groups {names:?} to converge"),
        };
        let waiting = self.waiting(what.clone(), within);
        loop {
            self.check_alive()?;
            self.some_running(&what)?;
            let statuses = self.statuses(&self.available(), true).await;
            let mut views: BTreeMap<GroupId, BTreeMap<NodeId, GroupStatus>> = BTreeMap::new();
            for (id, reply) in statuses {
                let Ok(reply) = reply else { continue };
                for view in reply.groups.into_iter().filter(|view| names.contains(&view.group_id)) {
                    check_view(&mut seen, id, &view)?;
                    views.entry(view.group_id).or_default().insert(id, view);
                }
            }
            let mut converged = BTreeMap::new();
            let mut waiting_for = None;
            for &group in &names {
                let empty = BTreeMap::new();
                match converged_group(views.get(&group).unwrap_or(&empty)) {
                    Ok(state) => {
                        converged.insert(group, state);
                    }
                    Err(reason) => {
                        waiting_for = Some(format!("group {group}: {reason}"));
                        break;
                    }
                }
            }
            match waiting_for {
                None => return Ok(converged),
                Some(reason) => waiting.again(reason).await?,
            }
        }
    }
}

/// Fails if node `id`'s `view` of its group shows a fatal stop, or a digest another node
/// reported differently at the same applied index (recorded in `seen`).
fn check_view(
    seen: &mut BTreeMap<(GroupId, u64), (NodeId, String)>,
    id: NodeId,
    view: &GroupStatus,
) -> Result<(), ClusterError> {
    let group = view.group_id;
    if view.fatal {
        return Err(ClusterError::WrongState {
            node: id,
            state: format!("stopped group {group} on a fatal error"),
        });
    }
    if view.digest.is_empty() {
        return Ok(());
    }
    let first = seen.entry((group, view.digest_index)).or_insert_with(|| (id, view.digest.clone()));
    if first.1 != view.digest {
        return Err(ClusterError::Diverged {
            group,
            index: view.digest_index,
            detail: format!("node {} has {}, node {id} has {}", first.0, first.1, view.digest),
        });
    }
    Ok(())
}

/// The node that leads, according to `views` (node → its view of one group): it says it
/// leads, and a majority of its voters (itself included) name it as leader.
fn agreed_leader(views: &BTreeMap<NodeId, GroupStatus>) -> Option<NodeId> {
    views.iter().find_map(|(&id, status)| {
        if status.role != "leader" || status.leader_id != id {
            return None;
        }
        let agreeing = status
            .voters
            .iter()
            .filter(|voter| views.get(voter).is_some_and(|view| view.leader_id == id))
            .count();
        (agreeing * 2 > status.voters.len()).then_some(id)
    })
}

/// The views of one group, for a timeout's message.
fn describe_views(views: &BTreeMap<NodeId, GroupStatus>) -> String {
    let views: Vec<String> = views
        .iter()
        .map(|(id, view)| {
            format!("{id}: {} leader={} term={}", view.role, view.leader_id, view.term)
        })
        .collect();
    format!("views: {views:?}")
}

/// Whether one group's members agree: see [`Cluster::wait_converged`].
fn converged_group(views: &BTreeMap<NodeId, GroupStatus>) -> Result<Converged, String> {
    let leader = agreed_leader(views)
        .ok_or_else(|| format!("no agreed leader; {}", describe_views(views)))?;
    let leader_view = &views[&leader];
    if leader_view.applied_index != leader_view.committed_index {
        return Err(format!(
            "leader {leader} applied {} of {} committed",
            leader_view.applied_index, leader_view.committed_index
        ));
    }
    let mut members: Vec<NodeId> =
        leader_view.voters.iter().chain(&leader_view.learners).copied().collect();
    members.sort_unstable();
    members.dedup();
    for member in &members {
        let Some(view) = views.get(member) else {
            return Err(format!("member {member} does not answer"));
        };
        if view.digest_index != leader_view.digest_index || view.digest != leader_view.digest {
            return Err(format!(
                "member {member} at {} (applied {}), leader {leader} at {} (applied {})",
                view.digest_index,
                view.applied_index,
                leader_view.digest_index,
                leader_view.applied_index
            ));
        }
    }
    Ok(Converged {
        applied_index: leader_view.digest_index,
        digest: leader_view.digest.clone(),
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(role: &str, leader: NodeId, voters: &[NodeId]) -> GroupStatus {
        GroupStatus {
            role: role.to_owned(),
            leader_id: leader,
            voters: voters.to_vec(),
            ..GroupStatus::default()
        }
    }

    #[test]
    fn a_leader_counts_only_when_a_majority_of_its_voters_name_it() {
        let voters = [1, 2, 3];
        let mut views = BTreeMap::new();
        views.insert(1, view("leader", 1, &voters));
        assert_eq!(agreed_leader(&views), None, "one vote of three");
        views.insert(2, view("follower", 1, &voters));
        assert_eq!(agreed_leader(&views), Some(1));
        // A deposed leader that still believes it leads, and the majority's new leader.
        views.insert(2, view("leader", 2, &voters));
        views.insert(3, view("follower", 2, &voters));
        assert_eq!(agreed_leader(&views), Some(2));
    }

    fn digest_view(digest: &str, index: u64) -> GroupStatus {
        GroupStatus {
            group_id: 1,
            digest: digest.to_owned(),
            digest_index: index,
            applied_index: index,
            committed_index: index,
            ..view("follower", 1, &[1, 2, 3])
        }
    }

    #[test]
    fn members_converge_only_on_the_leaders_digest_and_a_divergence_is_caught_at_once() {
        let mut views = BTreeMap::new();
        views.insert(1, GroupStatus { role: "leader".to_owned(), ..digest_view("aa", 9) });
        views.insert(2, digest_view("aa", 9));
        let waiting = converged_group(&views).expect_err("member 3 does not answer");
        assert!(waiting.contains("member 3"), "{waiting}");
        views.insert(3, digest_view("aa", 7));
        let waiting = converged_group(&views).expect_err("member 3 lags");
        assert!(waiting.contains("member 3 at 7"), "{waiting}");
        views.insert(3, digest_view("aa", 9));
        let converged = converged_group(&views).expect("every member at the leader's digest");
        assert_eq!((converged.applied_index, converged.members), (9, vec![1, 2, 3]));

        let mut seen = BTreeMap::new();
        check_view(&mut seen, 1, &digest_view("aa", 9)).expect("the first digest at 9");
        check_view(&mut seen, 2, &digest_view("bb", 8)).expect("another index");
        let diverged = check_view(&mut seen, 3, &digest_view("cc", 9));
        assert!(
            matches!(diverged, Err(ClusterError::Diverged { group: 1, index: 9, .. })),
            "{diverged:?}"
        );
        let fatal = GroupStatus { fatal: true, ..digest_view("aa", 9) };
        assert!(matches!(check_view(&mut seen, 2, &fatal), Err(ClusterError::WrongState { .. })));
    }
}
