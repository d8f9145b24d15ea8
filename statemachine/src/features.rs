//! Feature levels: what a group may write, so that a rolling upgrade never makes a replica of
//! the previous release read what it cannot.
//!
//! Owns the levels, each group's level and the rules around it. A group starts at level 0, the
//! formats of the previous release (snapshot format 9, no command after `EraseSession`); an
//! operator raises it (`SetFeatureLevel`, proposed only once every node of the cluster runs a
//! build that knows the level) and it never goes down. Below a feature's level the group
//! refuses its commands (`feature_not_enabled`), and its snapshots (and the digests compared
//! between replicas) are written in the previous format, so a replica of the previous release
//! decodes them. This is the seed's "roll out a new state reader-first": every node learns to
//! read a format before any node writes it. Never decides when to raise a level (the operator
//! does, after the node checked every member's build).

use crate::outcome::{Outcome, Rejection, Reply};
use crate::state::Group;

/// The highest feature level this build knows.
pub const FEATURE_LEVEL: u32 = 1;

/// The level of moving shows between groups: `FreezeShow`, `ImportShow`, `ActivateShow`,
/// `DropShow`, `Relocate`, `SetFeatureLevel` itself, and snapshot format 10 (the groups' move
/// records and feature level).
pub const FEATURE_LEVEL_MOVES: u32 = 1;

impl Group {
    /// The group's feature level.
    pub fn feature_level(&self) -> u32 {
        self.feature_level
    }

    /// Refuses a command of a feature above the group's level.
    pub(crate) fn require_level(&self, level: u32) -> Result<(), Rejection> {
        if self.feature_level < level {
            return Err(Rejection::FeatureNotEnabled { level, current: self.feature_level });
        }
        Ok(())
    }

    /// Applies `SetFeatureLevel`: the group's level becomes `level`, which this build must know
    /// and which may not be lower than the group's (the same level again is a duplicate).
    pub(crate) fn set_feature_level(&mut self, level: u32) -> Outcome {
        if level > FEATURE_LEVEL {
            return Err(Rejection::invalid(format!(
                "level: this build knows feature levels up to {FEATURE_LEVEL}"
            )));
        }
        if level < self.feature_level {
            return Err(Rejection::invalid(format!(
                "level: the group is at level {}, and a level never goes down",
                self.feature_level
            )));
        }
        let duplicate = level == self.feature_level;
        self.feature_level = level;
        Ok(Reply::FeatureLevelSet { level, duplicate })
    }
}
