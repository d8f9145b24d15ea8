//! Version 8 of the snapshot format: the current types, before the group kept its archived
//! shows (version 9 added `Group::archived` at the end of the group).
//!
//! Owns decoding version 8 payloads into the current group: a group before version 9 had no
//! archived show (none could be archived).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::audit::Audit;
use crate::catalog::Catalog;
use crate::delivery::Delivery;
use crate::digests::Digests;
use crate::ids::ShowId;
use crate::outbox::Outbox;
use crate::placement::Placement;
use crate::state::{Group, Show};

/// A group as version 8 encoded it.
#[derive(Deserialize)]
pub(super) struct GroupV8 {
    applied_index: u64,
    log_time_ms: u64,
    shows: BTreeMap<ShowId, Arc<Show>>,
    outbox: Outbox,
    audit: Audit,
    placement: Placement,
    delivery: Delivery,
    digests: Digests,
    catalog: Catalog,
}

impl GroupV8 {
    /// The same state in the current types, with no archived show.
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
            catalog: self.catalog,
            archived: BTreeMap::new(),
            moves: BTreeMap::new(),
            feature_level: 0,
        }
    }
}
