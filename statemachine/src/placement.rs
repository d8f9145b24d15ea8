//! Placement: which data group holds each show. Recorded by the metadata group (group 0), which
//! every node replicates, so any node can route a request about a show to its group.
//!
//! Owns the show → group map and its rules: a show is placed once, in a data group (never
//! group 0; placing it again in the same group is an idempotent success, in another group
//! `show_exists`), and a placement changes only by a move's relocation from the group it names. Never decides which group to choose (the node
//! does, before proposing) and never touches the shows themselves, which live in the data
//! groups.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::ShowId;
use crate::limits::PLACED_SHOWS_MAX;
use crate::outcome::{Rejection, Reply};

/// The metadata group, which records placement; shows are never placed in it.
pub const METADATA_GROUP: u64 = 0;

/// The show → data group map of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    shows: BTreeMap<ShowId, u64>,
}

impl Placement {
    /// The data group holding `show`, if it was placed.
    pub fn group_of(&self, show: ShowId) -> Option<u64> {
        self.shows.get(&show).copied()
    }

    /// Every placed show and its group, in show order.
    pub fn iter(&self) -> impl Iterator<Item = (ShowId, u64)> + '_ {
        self.shows.iter().map(|(&show, &group)| (show, group))
    }

    /// How many shows are placed.
    pub fn len(&self) -> usize {
        self.shows.len()
    }

    /// Whether no show is placed.
    pub fn is_empty(&self) -> bool {
        self.shows.is_empty()
    }

    /// How many shows each group holds (groups without shows are absent).
    pub fn shows_per_group(&self) -> BTreeMap<u64, u64> {
        let mut counts = BTreeMap::new();
        for &group in self.shows.values() {
            *counts.entry(group).or_insert(0) += 1;
        }
        counts
    }

    /// Places `show` in `group`.
    pub(crate) fn place(&mut self, show: ShowId, group: u64) -> Result<Reply, Rejection> {
        if group == METADATA_GROUP {
            return Err(Rejection::invalid("group: shows are placed in data groups (1 and up)"));
        }
        if show.0 == 0 {
            return Err(Rejection::invalid("show: must be non-zero"));
        }
        match self.shows.get(&show) {
            Some(&placed) if placed == group => Ok(Reply::Placed { show, group }),
            Some(_) => Err(Rejection::ShowExists),
            None if self.shows.len() >= PLACED_SHOWS_MAX => Err(Rejection::GroupFull),
            None => {
                self.shows.insert(show, group);
                Ok(Reply::Placed { show, group })
            }
        }
    }

    /// Places `show` in `to` instead of `from` (a move's third step). Relocating a show that
    /// is in `to` already is a duplicate; one that is in neither is `show_moved` to where it is.
    pub(crate) fn relocate(
        &mut self,
        show: ShowId,
        from: u64,
        to: u64,
    ) -> Result<Reply, Rejection> {
        if from == METADATA_GROUP || to == METADATA_GROUP || from == to {
            return Err(Rejection::invalid("from, to: two different data groups (1 and up)"));
        }
        match self.shows.get_mut(&show) {
            None => Err(Rejection::ShowNotFound),
            Some(placed) if *placed == to => {
                Ok(Reply::Relocated { show, from, to, duplicate: true })
            }
            Some(placed) if *placed == from => {
                *placed = to;
                Ok(Reply::Relocated { show, from, to, duplicate: false })
            }
            Some(placed) => Err(Rejection::ShowMoved { group: *placed }),
        }
    }
}
