//! Membership and leadership changes on a [`Cluster`], through the SDK's admin calls with a
//! long retry budget: remove a node from a group, readmit it the way `bookctl member readmit`
//! does, add a learner, promote, hand the leadership over.
//!
//! Owns the record of what [`Cluster::remove`] changed, so that [`Cluster::heal_all`] can
//! restore it. Never touches a process or a link, and never judges the membership that results:
//! the caller reads it back ([`crate::observe`]).

use std::sync::PoisonError;

use client::MembershipReply;

use crate::cluster::Cluster;
use crate::error::ClusterError;
use crate::{GroupId, NodeId};

impl Cluster {
    /// Removes node `id` from `group`'s membership (voter or learner). The change is
    /// remembered until [`Cluster::readmit`] or [`Cluster::promote`] restores it (also when the
    /// call's outcome is unknown), so that [`Cluster::heal_all`] can.
    ///
    /// # Errors
    ///
    /// The SDK's error: `Rejected` (not applied), `Unavailable` (maybe applied).
    pub async fn remove(
        &self,
        group: GroupId,
        id: NodeId,
    ) -> Result<MembershipReply, ClusterError> {
        self.node(id)?;
        self.removed.lock().unwrap_or_else(PoisonError::into_inner).insert((group, id));
        Ok(self.admin.remove(group, &[id]).await?)
    }

    /// Makes node `id` a voter of `group` again, the way `bookctl member readmit` does, from
    /// wherever the membership stands: added as a learner (waiting until it caught up) unless
    /// it is one, then promoted unless it is a voter already.
    ///
    /// # Errors
    ///
    /// When no leader is agreed on, or a membership call fails.
    pub async fn readmit(
        &self,
        group: GroupId,
        id: NodeId,
    ) -> Result<MembershipReply, ClusterError> {
        let address = self.membership_address(id)?;
        let leader = self.leader_of(group).await?;
        let view = self.group_status(leader, group, false).await?;
        let reply = if view.voters.contains(&id) {
            MembershipReply {
                group_id: group,
                leader_id: leader,
                voters: view.voters,
                learners: view.learners,
                log_index: 0,
            }
        } else {
            if !view.learners.contains(&id) {
                self.admin.add_learner(group, id, &address, true).await?;
            }
            self.admin.promote(group, &[id]).await?
        };
        self.removed.lock().unwrap_or_else(PoisonError::into_inner).remove(&(group, id));
        Ok(reply)
    }

    /// Adds node `id` (at its own client and peer addresses) to `group` as a learner; with `wait`, the answer
    /// comes once it caught up.
    ///
    /// # Errors
    ///
    /// The SDK's error.
    pub async fn add_learner(
        &self,
        group: GroupId,
        id: NodeId,
        wait: bool,
    ) -> Result<MembershipReply, ClusterError> {
        let address = self.membership_address(id)?;
        Ok(self.admin.add_learner(group, id, &address, wait).await?)
    }

    /// Makes learners `ids` voters of `group`; what [`Cluster::remove`] recorded of them is
    /// forgotten, as they are members again.
    ///
    /// # Errors
    ///
    /// The SDK's error.
    pub async fn promote(
        &self,
        group: GroupId,
        ids: &[NodeId],
    ) -> Result<MembershipReply, ClusterError> {
        let reply = self.admin.promote(group, ids).await?;
        let mut removed = self.removed.lock().unwrap_or_else(PoisonError::into_inner);
        for id in ids {
            removed.remove(&(group, *id));
        }
        Ok(reply)
    }

    /// The memberships [`Cluster::remove`] changed that are not restored yet, as
    /// `(group, node)`.
    pub fn removed(&self) -> Vec<(GroupId, NodeId)> {
        self.removed.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().collect()
    }

    /// Hands `group`'s leadership to voter `to`.
    ///
    /// # Errors
    ///
    /// The SDK's error (`Rejected` when `to` is not a voter, `Unavailable`).
    pub async fn transfer_leader(
        &self,
        group: GroupId,
        to: NodeId,
    ) -> Result<MembershipReply, ClusterError> {
        self.node(to)?;
        Ok(self.admin.transfer_leader(group, to).await?)
    }
}
