//! Version 9 of the snapshot format: the current types, before the group kept its shows' moves
//! (version 10 added `Group::moves` at the end of the group).
//!
//! Owns decoding version 9 payloads into the current group (a group before version 10 had no
//! move record, no show could move, and was at feature level 0), and encoding a group at
//! feature level 0 in version 9, which the previous release reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::archive::ArchivedShow;
use crate::audit::Audit;
use crate::catalog::Catalog;
use crate::delivery::Delivery;
use crate::digests::Digests;
use crate::ids::ShowId;
use crate::outbox::Outbox;
use crate::placement::Placement;
use crate::state::{Group, Show};

/// A group as version 9 encoded it.
#[derive(Deserialize)]
pub(super) struct GroupV9 {
    applied_index: u64,
    log_time_ms: u64,
    shows: BTreeMap<ShowId, Arc<Show>>,
    outbox: Outbox,
    audit: Audit,
    placement: Placement,
    delivery: Delivery,
    digests: Digests,
    catalog: Catalog,
    archived: BTreeMap<ShowId, ArchivedShow>,
}

impl GroupV9 {
    /// The same state in the current types, with no move record.
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
            archived: self.archived,
            moves: BTreeMap::new(),
            feature_level: 0,
        }
    }
}

/// A group at feature level 0 as version 9 encodes it: the same fields in the same order,
/// borrowed.
#[derive(Serialize)]
pub(super) struct GroupV9Ref<'a> {
    applied_index: u64,
    log_time_ms: u64,
    shows: &'a BTreeMap<ShowId, Arc<Show>>,
    outbox: &'a Outbox,
    audit: &'a Audit,
    placement: &'a Placement,
    delivery: &'a Delivery,
    digests: &'a Digests,
    catalog: &'a Catalog,
    archived: &'a BTreeMap<ShowId, ArchivedShow>,
}

impl<'a> GroupV9Ref<'a> {
    /// The fields of `group` that version 9 has.
    pub(super) fn of(group: &'a Group) -> GroupV9Ref<'a> {
        GroupV9Ref {
            applied_index: group.applied_index,
            log_time_ms: group.log_time_ms,
            shows: &group.shows,
            outbox: &group.outbox,
            audit: &group.audit,
            placement: &group.placement,
            delivery: &group.delivery,
            digests: &group.digests,
            catalog: &group.catalog,
            archived: &group.archived,
        }
    }
}
