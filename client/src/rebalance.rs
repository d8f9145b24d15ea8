//! Rebalancing: spreading shows over the data groups by load, one fenced move at a time.
//!
//! Owns the measure of a show's load and the plan. A show's load is the seats still in play:
//! a show on sale (or not yet open) weighs its free, held and reserved seats, since that is
//! what buyers will still come for; a closed show weighs only its held and reserved seats
//! (payments and waitlist offers still running); a cancelled one nothing. The plan repeatedly
//! moves, from the most loaded group to the least loaded one, the show whose load is nearest
//! half the gap between them (any show lighter than the gap narrows it), until no show is
//! lighter than the gap. Never moves anything itself: the client
//! runs the plan through [`Client::move_show`].

use std::collections::BTreeMap;

use proto::booking::{ShowMovedReply, ShowReply};

use crate::client::Client;
use crate::error::{Error, Result};

/// One move of a rebalancing plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedMove {
    /// The show.
    pub show_id: u64,
    /// The group it is in.
    pub from_group: u64,
    /// The group it goes to.
    pub to_group: u64,
    /// Its load.
    pub load: u64,
}

/// A show's load: the seats still in play (see the module docs).
pub fn show_load(show: &ShowReply) -> u64 {
    let in_play = u64::from(show.seats_held) + u64::from(show.seats_reserved);
    match show.status.as_str() {
        "on_sale" | "draft" => in_play + u64::from(show.seats_free),
        "closed" => in_play,
        _ => 0,
    }
}

/// The moves that spread `shows` over `groups` (every data group, those without shows too):
/// from the most loaded group to the least loaded one, the show nearest half the gap between
/// them, until no show is lighter than the gap.
pub fn plan_rebalance(groups: &[u64], shows: &[ShowReply]) -> Vec<PlannedMove> {
    let mut loads: BTreeMap<u64, u64> = groups.iter().map(|&group| (group, 0)).collect();
    let mut placed: Vec<(u64, u64, u64)> = Vec::new();
    for show in shows {
        let load = show_load(show);
        *loads.entry(show.group_id).or_insert(0) += load;
        placed.push((show.show_id, show.group_id, load));
    }
    placed.sort_unstable();
    let mut plan = Vec::new();
    // Each move lowers the sum of squared loads, so this ends; the bound is a backstop.
    for _ in 0..placed.len() {
        let Some((&heavy, &heavy_load)) =
            loads.iter().max_by_key(|&(&group, &load)| (load, u64::MAX - group))
        else {
            break;
        };
        let Some((&light, &light_load)) = loads.iter().min_by_key(|&(&group, &load)| (load, group))
        else {
            break;
        };
        let gap = heavy_load - light_load;
        let candidate = placed
            .iter_mut()
            .filter(|(_, group, load)| *group == heavy && *load > 0 && *load < gap)
            .min_by_key(|(show, _, load)| (gap.abs_diff(2 * *load), *show));
        let Some((show, group, load)) = candidate else { break };
        plan.push(PlannedMove { show_id: *show, from_group: heavy, to_group: light, load: *load });
        *group = light;
        *loads.get_mut(&heavy).expect("a group with shows") -= *load;
        *loads.get_mut(&light).expect("a known group") += *load;
    }
    plan
}

impl Client {
    /// The rebalancing plan for the cluster as it is now: every data group from the first node
    /// that answers a status call, every show and its load from [`Client::list_shows`].
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when no node answers.
    pub async fn rebalance_plan(&self) -> Result<Vec<PlannedMove>> {
        let groups = self
            .cluster_status(false)
            .await
            .into_iter()
            .find_map(|node| node.result.ok())
            .map(|status| {
                status.groups.iter().map(|group| group.group_id).filter(|&id| id != 0).collect()
            })
            .ok_or_else(|| Error::InvalidArgument("no node answered a status call".into()))?;
        let groups: Vec<u64> = groups;
        Ok(plan_rebalance(&groups, &self.list_shows().await?))
    }

    /// Runs the rebalancing plan: each planned move in order, through [`Client::move_show`].
    /// Returns what each move did.
    ///
    /// # Errors
    ///
    /// The first move's error, as [`Client::move_show`]; the moves before it stay made.
    pub async fn rebalance(&self) -> Result<Vec<ShowMovedReply>> {
        let mut moved = Vec::new();
        for planned in self.rebalance_plan().await? {
            moved.push(self.move_show(planned.show_id, planned.to_group).await?);
        }
        Ok(moved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(show_id: u64, group_id: u64, status: &str, free: u32, held: u32) -> ShowReply {
        ShowReply {
            show_id,
            group_id,
            status: status.into(),
            seats_free: free,
            seats_held: held,
            ..ShowReply::default()
        }
    }

    #[test]
    fn a_show_weighs_the_seats_still_in_play() {
        assert_eq!(show_load(&show(1, 1, "on_sale", 90, 10)), 100);
        assert_eq!(show_load(&show(1, 1, "draft", 100, 0)), 100);
        assert_eq!(show_load(&show(1, 1, "closed", 90, 10)), 10);
        assert_eq!(show_load(&show(1, 1, "cancelled", 100, 0)), 0);
    }

    #[test]
    fn the_plan_spreads_shows_from_the_heaviest_group_to_the_lightest() {
        let shows = [
            show(1, 1, "on_sale", 500, 0),
            show(2, 1, "on_sale", 300, 0),
            show(3, 1, "on_sale", 200, 0),
            show(4, 2, "on_sale", 100, 0),
            show(5, 1, "cancelled", 900, 0),
        ];
        let plan = plan_rebalance(&[1, 2, 3], &shows);
        // Group 1 weighs 1,000, group 2 100, group 3 nothing.
        assert_eq!(
            plan,
            [
                PlannedMove { show_id: 1, from_group: 1, to_group: 3, load: 500 },
                PlannedMove { show_id: 3, from_group: 1, to_group: 2, load: 200 },
            ]
        );
        // Balanced as far as whole shows allow: 300, 300, 500; nothing more to do.
        let after: Vec<ShowReply> = shows
            .iter()
            .map(|reply| {
                let moved = plan.iter().find(|planned| planned.show_id == reply.show_id);
                let group_id = moved.map_or(reply.group_id, |planned| planned.to_group);
                ShowReply { group_id, ..reply.clone() }
            })
            .collect();
        assert!(plan_rebalance(&[1, 2, 3], &after).is_empty());
    }

    #[test]
    fn one_hot_show_is_not_moved_back_and_forth() {
        let shows = [show(1, 1, "on_sale", 1_000, 0)];
        assert!(plan_rebalance(&[1, 2], &shows).is_empty());
        assert!(plan_rebalance(&[1], &[]).is_empty());
    }
}
