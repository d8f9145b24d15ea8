//! Version 6 of the snapshot format: the current types, before an offer kept its promotion lag
//! (version 7 added `Offer::promotion_lag_ms` at the end of each offer).
//!
//! Owns decoding version 6 payloads into the current group, and the offer as versions 3 to 6
//! encoded it: an offer made before version 7 recorded no lag, so its lag is unknown (`None`),
//! never a made-up zero.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::v5::{EarlierWaitlist, GroupV5};
use crate::audit::OrderKey;
use crate::ids::{CapacityEventId, EntryId, OfferId, SeatNo, SeatSet, SessionId};
use crate::state::{Offer, OfferState, Waitlist, WaitlistEntry, WaitlistPolicy};

/// A group as version 6 encoded it: shows as version 5 encoded them, around version 6's
/// waitlists.
pub(super) type GroupV6 = GroupV5<WaitlistV6>;

/// A waitlist as version 6 encoded it: its offers without their lag.
#[derive(Deserialize)]
pub(super) struct WaitlistV6 {
    enabled: bool,
    policy_version: u32,
    entries: BTreeMap<EntryId, WaitlistEntry>,
    waiting: BTreeSet<OrderKey>,
    active_by_session: BTreeMap<SessionId, EntryId>,
    offers: BTreeMap<OfferId, OfferV6>,
    offer_deadlines: BTreeSet<(u64, OfferId)>,
    pool: BTreeSet<SeatNo>,
    capacity_events: BTreeMap<CapacityEventId, u64>,
    capacity_event_deadlines: BTreeSet<(u64, CapacityEventId)>,
    policy: WaitlistPolicy,
    pooled_since: BTreeMap<SeatNo, u64>,
}

impl EarlierWaitlist for WaitlistV6 {
    fn migrate(self) -> Waitlist {
        Waitlist {
            enabled: self.enabled,
            policy_version: self.policy_version,
            entries: self.entries.into(),
            waiting: self.waiting.into(),
            active_by_session: self.active_by_session.into(),
            offers: self.offers.into_iter().map(|(id, offer)| (id, offer.migrate())).collect(),
            offer_deadlines: self.offer_deadlines.into(),
            pool: self.pool,
            capacity_events: self.capacity_events,
            capacity_event_deadlines: self.capacity_event_deadlines,
            policy: self.policy,
            pooled_since: self.pooled_since,
        }
    }
}

/// An offer as versions 3 to 6 encoded it.
#[derive(Deserialize)]
pub(super) struct OfferV6 {
    id: OfferId,
    entry: EntryId,
    session: SessionId,
    seats: SeatSet,
    state: OfferState,
    made_index: u64,
    deadline_ms: u64,
}

impl OfferV6 {
    /// The same offer in the current type, its promotion lag unknown.
    pub(super) fn migrate(self) -> Offer {
        Offer {
            id: self.id,
            entry: self.entry,
            session: self.session,
            seats: self.seats,
            state: self.state,
            made_index: self.made_index,
            deadline_ms: self.deadline_ms,
            promotion_lag_ms: None,
        }
    }
}
