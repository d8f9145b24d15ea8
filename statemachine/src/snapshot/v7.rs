//! Version 7 of the snapshot format: the current types, before the group kept the catalog
//! (version 8 added `Group::catalog` at the end of the group).
//!
//! Owns decoding version 7 payloads into the current group: a group before version 8 had an
//! empty catalog (none could be recorded).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::audit::Audit;
use crate::delivery::Delivery;
use crate::digests::Digests;
use crate::ids::ShowId;
use crate::outbox::Outbox;
use crate::placement::Placement;
use crate::state::{Group, Show};

/// A group as version 7 encoded it.
#[derive(Deserialize)]
pub(super) struct GroupV7 {
    applied_index: u64,
    log_time_ms: u64,
    shows: BTreeMap<ShowId, Arc<Show>>,
    outbox: Outbox,
    audit: Audit,
    placement: Placement,
    delivery: Delivery,
    digests: Digests,
}

impl GroupV7 {
    /// The same state in the current types, its catalog empty.
    pub(super) fn migrate(self) -> Group {
        Group {
            applied_index: self.applied_index,
            log_time_ms: self.log_time_ms,
            shows: self.shows,
            outbox: self.outbox,
            audit: self.audit,
            placement: self.placement,
            delivery: self.delivery,
            digests: self.digests,
            catalog: Default::default(),
            archived: Default::default(),
            moves: Default::default(),
            feature_level: 0,
        }
    }
}
