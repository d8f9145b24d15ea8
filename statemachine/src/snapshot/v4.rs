//! Version 4 of the snapshot format: the current types, before the group kept its leaders'
//! state digests (version 5 added `Group::digests` at the end).
//!
//! Owns decoding version 4 payloads into the current group: every field but the digests (and
//! the waitlists' policy, see `v5.rs`) is encoded as it is now, and a version 4 group had recorded no digest, so its record is empty.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::v5::{ShowV5, migrate_shows};
use crate::audit::Audit;
use crate::delivery::Delivery;
use crate::ids::ShowId;
use crate::outbox::Outbox;
use crate::placement::Placement;
use crate::state::Group;

/// A group as version 4 encoded it.
#[derive(Deserialize)]
pub(super) struct GroupV4 {
    applied_index: u64,
    log_time_ms: u64,
    shows: BTreeMap<ShowId, ShowV5>,
    outbox: Outbox,
    audit: Audit,
    placement: Placement,
    delivery: Delivery,
}

impl GroupV4 {
    /// The same state in the current types: no digest was recorded.
    pub(super) fn migrate(self) -> Group {
        Group {
            applied_index: self.applied_index,
            log_time_ms: self.log_time_ms,
            shows: migrate_shows(self.shows),
            outbox: self.outbox,
            audit: self.audit,
            placement: self.placement,
            delivery: self.delivery,
            digests: Default::default(),
            catalog: Default::default(),
            archived: Default::default(),
            moves: Default::default(),
            feature_level: 0,
        }
    }
}
