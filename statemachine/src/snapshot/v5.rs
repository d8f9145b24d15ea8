//! Version 5 of the snapshot format: the current types, before the waitlist kept its policy
//! (version 6 added `Waitlist::policy` at the end of each show's waitlist: its rules, their
//! history, a lottery's draw) and before an offer kept its promotion lag (version 7).
//!
//! Owns decoding version 5 payloads (and, through `ShowV5`, versions 3, 4 and 6, which encoded
//! shows the same way around their waitlists) into the current group: a waitlist before version
//! 6 ran the default rules, strict FIFO with no wave limit, and had drawn nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Deserialize;

use crate::audit::{Audit, OrderKey};
use crate::command::ShowPolicy;
use crate::delivery::Delivery;
use crate::digests::Digests;
use crate::idempotency::IdempotencyRecord;
use crate::ids::{
    BookingId, CapacityEventId, Currency, EntryId, HoldId, IdempotencyKey, OfferId, PaymentId,
    ProviderEventId, SeatNo, SessionId, ShowId,
};
use crate::outbox::Outbox;
use crate::placement::Placement;
use crate::state::{
    Booking, Group, Hold, Lane, PaymentAttempt, Seat, SeatCounts, Show, ShowStatus, Waitlist,
    WaitlistEntry,
};

use super::v6::OfferV6;

/// A waitlist as some earlier version encoded it, and how it reads in the current types.
pub(super) trait EarlierWaitlist {
    /// The same waitlist in the current types.
    fn migrate(self) -> Waitlist;
}

/// A group as version 5 encoded it (and version 6, with its waitlists: see `v6.rs`).
#[derive(Deserialize)]
pub(super) struct GroupV5<W = WaitlistV5> {
    applied_index: u64,
    log_time_ms: u64,
    shows: BTreeMap<ShowId, ShowV5<W>>,
    outbox: Outbox,
    audit: Audit,
    placement: Placement,
    delivery: Delivery,
    digests: Digests,
}

impl<W: EarlierWaitlist> GroupV5<W> {
    /// The same state in the current types.
    pub(super) fn migrate(self) -> Group {
        Group {
            applied_index: self.applied_index,
            log_time_ms: self.log_time_ms,
            shows: migrate_shows(self.shows),
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

/// Shows as versions 3 to 6 encoded them, in the current types.
pub(super) fn migrate_shows<W: EarlierWaitlist>(
    shows: BTreeMap<ShowId, ShowV5<W>>,
) -> BTreeMap<ShowId, Arc<Show>> {
    shows.into_iter().map(|(id, show)| (id, Arc::new(show.migrate()))).collect()
}

/// A show as versions 3 to 6 encoded it, around the waitlist of its version.
#[derive(Deserialize)]
pub(super) struct ShowV5<W = WaitlistV5> {
    id: ShowId,
    status: ShowStatus,
    currency: Currency,
    prices_minor: Vec<u64>,
    price_version: u32,
    policy: ShowPolicy,
    seat_classes: Vec<u8>,
    seats: Vec<Seat>,
    counts: SeatCounts,
    next_id: u64,
    holds: BTreeMap<HoldId, Hold>,
    hold_deadlines: BTreeSet<(u64, HoldId)>,
    live_holds_by_session: BTreeMap<SessionId, u32>,
    bookings: BTreeMap<BookingId, Booking>,
    payments: BTreeMap<PaymentId, PaymentAttempt>,
    provider_events: BTreeMap<ProviderEventId, PaymentId>,
    idempotency: BTreeMap<(SessionId, IdempotencyKey), IdempotencyRecord>,
    idempotency_deadlines: BTreeSet<(u64, SessionId, IdempotencyKey)>,
    lane: Lane,
    waitlist: W,
}

impl<W: EarlierWaitlist> ShowV5<W> {
    fn migrate(self) -> Show {
        Show {
            id: self.id,
            status: self.status,
            currency: self.currency,
            prices_minor: self.prices_minor,
            price_version: self.price_version,
            policy: self.policy,
            seat_classes: self.seat_classes,
            seats: self.seats.into(),
            counts: self.counts,
            next_id: self.next_id,
            holds: self.holds.into(),
            hold_deadlines: self.hold_deadlines.into(),
            live_holds_by_session: self.live_holds_by_session.into(),
            bookings: self.bookings.into(),
            payments: self.payments.into(),
            provider_events: self.provider_events.into(),
            idempotency: self.idempotency.into(),
            idempotency_deadlines: self.idempotency_deadlines.into(),
            lane: self.lane,
            waitlist: self.waitlist.migrate(),
        }
    }
}

/// A waitlist as versions 3 to 5 encoded it: no policy.
#[derive(Deserialize)]
pub(super) struct WaitlistV5 {
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
}

impl EarlierWaitlist for WaitlistV5 {
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
            policy: Default::default(),
            // A pool kept before version 6 recorded no times: `date_pools` dates its seats at
            // the group's log time, so none looks older than it is.
            pooled_since: Default::default(),
        }
    }
}
