//! Version 3 of the snapshot format: the current types, before the group kept its outbox
//! sinks' delivery (version 4 added `Group::delivery` at the end) and its leaders' state
//! digests (version 5).
//!
//! Owns decoding version 3 payloads into the current group: every field but the delivery (and
//! the digests and the waitlists' policy) is encoded as it is now, and a version 3 group tracked no sink, so its delivery is empty.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::v5::{ShowV5, migrate_shows};
use crate::audit::Audit;
use crate::ids::ShowId;
use crate::outbox::Outbox;
use crate::placement::Placement;
use crate::state::Group;

/// A group as version 3 encoded it.
#[derive(Deserialize)]
pub(super) struct GroupV3 {
    applied_index: u64,
    log_time_ms: u64,
    shows: BTreeMap<ShowId, ShowV5>,
    outbox: Outbox,
    audit: Audit,
    placement: Placement,
}

impl GroupV3 {
    /// The same state in the current types: no sink was tracked.
    pub(super) fn migrate(self) -> Group {
        Group {
            applied_index: self.applied_index,
            log_time_ms: self.log_time_ms,
            shows: migrate_shows(self.shows),
            outbox: self.outbox,
            audit: self.audit,
            placement: self.placement,
            delivery: Default::default(),
            digests: Default::default(),
            catalog: Default::default(),
            archived: Default::default(),
            moves: Default::default(),
            feature_level: 0,
        }
    }
}
