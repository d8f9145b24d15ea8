//! Raising the cluster's feature level after a rolling upgrade: once every node runs a build
//! that knows a level, each group is raised to it, and only then do groups write what that
//! level adds (new commands, new state formats), so that no node ever meets what it cannot
//! read.
//!
//! Owns the check (every node the client knows answers, every member of every group is among
//! them, and each knows the level) and the order (data groups first, group 0 last). Never
//! decides what a level contains (`statemachine`'s `features.rs` does).

use std::collections::{BTreeMap, BTreeSet};

use proto::booking::admin_service_client::AdminServiceClient;
use proto::booking::{FeatureLevelReply, SetFeatureLevelRequest};

use crate::client::{Client, Kind};
use crate::error::{Error, Result};
use crate::route::Route;

impl Client {
    /// Raises every group's feature level to `level` (operator call), after checking that every
    /// node answers a status call and runs a build that knows `level`, and that every member of
    /// every group is among those nodes (give the client every node's address). Data groups are
    /// raised first, group 0 last. A group at the level already answers `duplicate`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming a node that did not answer, is a member without being
    /// known, or runs an older build; then nothing was raised. A group's refusal or
    /// [`Error::Unavailable`] as any operator call (the groups before it stay raised: call
    /// again).
    pub async fn raise_feature_level(&self, level: u32) -> Result<Vec<FeatureLevelReply>> {
        let mut builds = BTreeMap::new();
        let mut members = BTreeSet::new();
        let mut groups = BTreeSet::new();
        for node in self.cluster_status(false).await {
            let status = node.result.map_err(|error| {
                Error::InvalidArgument(format!(
                    "node at {} did not answer ({error}): every node must, before a raise",
                    node.address
                ))
            })?;
            builds.insert(status.node_id, status.feature_level_max);
            for group in &status.groups {
                groups.insert(group.group_id);
                members.extend(group.voters.iter().chain(&group.learners).copied());
            }
        }
        for member in members {
            match builds.get(&member) {
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "node {member} is a member of a group but was not asked: give every \
                         node's address"
                    )));
                }
                Some(&known) if known < level => {
                    return Err(Error::InvalidArgument(format!(
                        "node {member} runs a build that knows feature levels up to {known}: \
                         upgrade it before raising to {level}"
                    )));
                }
                Some(_) => {}
            }
        }
        let metadata = self.operator_metadata(true, None)?;
        let mut raised = Vec::new();
        let order = groups
            .iter()
            .copied()
            .filter(|&group| group != 0)
            .chain(groups.first().copied().filter(|&group| group == 0));
        for group_id in order {
            let request = SetFeatureLevelRequest { group_id, level };
            let (reply, _) = self
                .call(Route::Group(group_id), Kind::Mutation, &metadata, |channel| {
                    let request = metadata.request(request);
                    async move { AdminServiceClient::new(channel).set_feature_level(request).await }
                })
                .await?;
            raised.push(reply);
        }
        Ok(raised)
    }
}
