//! Snapshot format version 2: the layout before states carried their data, and its migration
//! to the current types.
//!
//! Owns the version 2 shapes of exactly the types whose encoding changed in version 3 (holds,
//! payment attempts, tickets, waitlist entries and offers, and the containers that hold them);
//! every other type encodes as it did and is reused as it is. Never encodes: version 2 is only
//! read. A version 2 state whose flat fields disagree with its state (a processing hold with
//! no payment, say) is an error, never a guess.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Deserialize;

use crate::audit::{Audit, OrderKey};
use crate::command::ShowPolicy;
use crate::idempotency::IdempotencyRecord;
use crate::ids::{
    BookingId, CapacityEventId, Currency, EntryId, HoldId, IdempotencyKey, Money, OfferId,
    PaymentId, ProviderEventId, SeatNo, SeatSet, SessionId, ShowId, TicketId,
};
use crate::outbox::Outbox;
use crate::placement::Placement;
// The flat states of version 2 had exactly the variants of today's status names, in the same
// order, so they decode as those (the version 2 fixture in tests/golden pins it).
use crate::state::{
    Booking, Grant, Group, Hold, HoldPayments, HoldState, HoldStatus, Lane, Offer, OfferState,
    OfferStatus, PaymentAttempt, PaymentState, PaymentStatus, Seat, SeatCounts, Show, ShowStatus,
    Ticket, TicketState, TicketStatus, Waitlist, WaitlistEntry, WaitlistEntryState,
    WaitlistEntryStatus,
};

#[derive(Deserialize)]
pub(super) struct GroupV2 {
    applied_index: u64,
    log_time_ms: u64,
    shows: BTreeMap<ShowId, ShowV2>,
    outbox: Outbox,
    audit: Audit,
    placement: Placement,
}

#[derive(Deserialize)]
struct ShowV2 {
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
    holds: BTreeMap<HoldId, HoldV2>,
    hold_deadlines: BTreeSet<(u64, HoldId)>,
    live_holds_by_session: BTreeMap<SessionId, u32>,
    bookings: BTreeMap<BookingId, Booking>,
    payments: BTreeMap<PaymentId, PaymentAttemptV2>,
    provider_events: BTreeMap<ProviderEventId, PaymentId>,
    idempotency: BTreeMap<(SessionId, IdempotencyKey), IdempotencyRecord>,
    idempotency_deadlines: BTreeSet<(u64, SessionId, IdempotencyKey)>,
    lane: LaneV2,
    waitlist: WaitlistV2,
}

#[derive(Deserialize)]
struct HoldV2 {
    id: HoldId,
    session: SessionId,
    seats: SeatSet,
    state: HoldStatus,
    created_ms: u64,
    hold_deadline_ms: u64,
    processing_deadline_ms: Option<u64>,
    price_version: u32,
    price: Money,
    grant: Option<TicketId>,
    offer: Option<OfferId>,
    payment: Option<PaymentId>,
    payment_attempts: u8,
    booking: Option<BookingId>,
}

#[derive(Deserialize)]
struct PaymentAttemptV2 {
    id: PaymentId,
    hold: HoldId,
    session: SessionId,
    price: Money,
    state: PaymentStatus,
    refund_required: bool,
    created_ms: u64,
}

#[derive(Deserialize)]
struct TicketV2 {
    id: TicketId,
    session: SessionId,
    state: TicketStatus,
    joined_ms: u64,
    granted_index: Option<u64>,
    grant_deadline_ms: Option<u64>,
}

#[derive(Deserialize)]
struct LaneV2 {
    enabled: bool,
    window: u32,
    tickets: BTreeMap<TicketId, TicketV2>,
    waiting: BTreeSet<TicketId>,
    granted: BTreeSet<(u64, TicketId)>,
    waiting_deadlines: BTreeSet<(u64, TicketId)>,
    live_by_session: BTreeMap<SessionId, TicketId>,
}

#[derive(Deserialize)]
struct WaitlistEntryV2 {
    id: EntryId,
    session: SessionId,
    quantity: u8,
    order: OrderKey,
    joined_index: u64,
    policy_version: u32,
    state: WaitlistEntryStatus,
    offer: Option<OfferId>,
}

#[derive(Deserialize)]
struct OfferV2 {
    id: OfferId,
    entry: EntryId,
    session: SessionId,
    seats: SeatSet,
    state: OfferStatus,
    made_index: u64,
    deadline_ms: u64,
    hold: Option<HoldId>,
}

#[derive(Deserialize)]
struct WaitlistV2 {
    enabled: bool,
    policy_version: u32,
    entries: BTreeMap<EntryId, WaitlistEntryV2>,
    waiting: BTreeSet<OrderKey>,
    active_by_session: BTreeMap<SessionId, EntryId>,
    offers: BTreeMap<OfferId, OfferV2>,
    offer_deadlines: BTreeSet<(u64, OfferId)>,
    pool: BTreeSet<SeatNo>,
    capacity_events: BTreeMap<CapacityEventId, u64>,
    capacity_event_deadlines: BTreeSet<(u64, CapacityEventId)>,
}

/// Rejects a version 2 record whose fields disagree with its state.
macro_rules! require {
    ($value:expr, $($message:tt)+) => {
        $value.ok_or_else(|| format!($($message)+))?
    };
}

impl GroupV2 {
    /// The same state in the current types.
    ///
    /// # Errors
    ///
    /// A message naming the first record whose fields disagree with its state.
    pub(super) fn migrate(self) -> Result<Group, String> {
        let mut shows = BTreeMap::new();
        for (id, show) in self.shows {
            let show = show.migrate().map_err(|violation| format!("show {id}: {violation}"))?;
            shows.insert(id, Arc::new(show));
        }
        Ok(Group {
            applied_index: self.applied_index,
            log_time_ms: self.log_time_ms,
            shows,
            outbox: self.outbox,
            audit: self.audit,
            placement: self.placement,
            delivery: Default::default(),
            digests: Default::default(),
            catalog: Default::default(),
            archived: Default::default(),
            moves: Default::default(),
            feature_level: 0,
        })
    }
}

impl ShowV2 {
    fn migrate(self) -> Result<Show, String> {
        // Version 2 kept a hold's latest attempt and a count; version 3 keeps every attempt,
        // which the payments of the show name by their hold.
        let mut attempts: BTreeMap<HoldId, HoldPayments> = BTreeMap::new();
        for attempt in self.payments.values() {
            let list = attempts.entry(attempt.hold).or_default();
            list.try_push(attempt.id)
                .map_err(|_full| format!("hold {}: too many payment attempts", attempt.hold))?;
        }
        let mut holds = BTreeMap::new();
        for (id, hold) in self.holds {
            let payments = attempts.remove(&id).unwrap_or_default();
            holds.insert(
                id,
                hold.migrate(payments).map_err(|violation| format!("hold {id}: {violation}"))?,
            );
        }
        if let Some(hold) = attempts.keys().next() {
            return Err(format!("payments of hold {hold}, which does not exist"));
        }
        let mut payments = BTreeMap::new();
        for (id, attempt) in self.payments {
            payments.insert(
                id,
                attempt.migrate().map_err(|violation| format!("payment {id}: {violation}"))?,
            );
        }
        Ok(Show {
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
            holds: holds.into(),
            hold_deadlines: self.hold_deadlines.into(),
            live_holds_by_session: self.live_holds_by_session.into(),
            bookings: self.bookings.into(),
            payments: payments.into(),
            provider_events: self.provider_events.into(),
            idempotency: self.idempotency.into(),
            idempotency_deadlines: self.idempotency_deadlines.into(),
            lane: self.lane.migrate()?,
            waitlist: self.waitlist.migrate()?,
        })
    }
}

impl HoldV2 {
    fn migrate(self, payments: HoldPayments) -> Result<Hold, String> {
        if usize::from(self.payment_attempts) != payments.len()
            || self.payment != payments.last().copied()
        {
            return Err(format!(
                "{} attempts, latest {:?}, but its payments are {payments:?}",
                self.payment_attempts, self.payment
            ));
        }
        let state = match self.state {
            HoldStatus::Held => HoldState::Held,
            HoldStatus::Processing => HoldState::Processing {
                payment: require!(self.payment, "processing without a payment"),
                deadline_ms: require!(self.processing_deadline_ms, "processing without a deadline"),
            },
            HoldStatus::Confirmed => HoldState::Confirmed {
                booking: require!(self.booking, "confirmed without a booking"),
            },
            HoldStatus::Cancelled => HoldState::Cancelled,
            HoldStatus::Expired => HoldState::Expired,
        };
        // Version 2 left the grace deadline behind when a processing hold ended (it read the
        // field only while processing), so on a final hold it is dropped; a held hold never
        // had one (a declined payment cleared it).
        if matches!(state, HoldState::Held) && self.processing_deadline_ms.is_some() {
            return Err("held with a processing deadline".to_owned());
        }
        if !matches!(state, HoldState::Confirmed { .. }) && self.booking.is_some() {
            return Err(format!("{:?} with a booking", self.state));
        }
        Ok(Hold {
            id: self.id,
            session: self.session,
            seats: self.seats,
            state,
            created_ms: self.created_ms,
            hold_deadline_ms: self.hold_deadline_ms,
            price_version: self.price_version,
            price: self.price,
            grant: self.grant,
            offer: self.offer,
            payments,
        })
    }
}

impl PaymentAttemptV2 {
    fn migrate(self) -> Result<PaymentAttempt, String> {
        let state = match self.state {
            PaymentStatus::Succeeded => {
                PaymentState::Succeeded { refund_required: self.refund_required }
            }
            _ if self.refund_required => return Err(format!("{:?} with refund work", self.state)),
            PaymentStatus::Pending => PaymentState::Pending,
            PaymentStatus::Unknown => PaymentState::Unknown,
            PaymentStatus::Declined => PaymentState::Declined,
            // Format 2 had no refunded state: refund work was never completed.
            PaymentStatus::Refunded => return Err("refunded, which format 2 cannot hold".into()),
        };
        Ok(PaymentAttempt {
            id: self.id,
            hold: self.hold,
            session: self.session,
            price: self.price,
            state,
            created_ms: self.created_ms,
        })
    }
}

impl LaneV2 {
    fn migrate(self) -> Result<Lane, String> {
        let mut tickets = BTreeMap::new();
        for (id, ticket) in self.tickets {
            tickets.insert(
                id,
                ticket.migrate().map_err(|violation| format!("ticket {id}: {violation}"))?,
            );
        }
        Ok(Lane {
            enabled: self.enabled,
            window: self.window,
            tickets: tickets.into(),
            waiting: self.waiting.into(),
            granted: self.granted.into(),
            waiting_deadlines: self.waiting_deadlines.into(),
            live_by_session: self.live_by_session.into(),
        })
    }
}

impl TicketV2 {
    fn migrate(self) -> Result<Ticket, String> {
        let grant = match (self.granted_index, self.grant_deadline_ms) {
            (Some(index), Some(deadline_ms)) => Some(Grant { index, deadline_ms }),
            (None, None) => None,
            (index, deadline_ms) => {
                return Err(format!("granted at {index:?} with deadline {deadline_ms:?}"));
            }
        };
        let state = match (self.state, grant) {
            (TicketStatus::Waiting, None) => TicketState::Waiting,
            (TicketStatus::Granted, Some(grant)) => TicketState::Granted { grant },
            (TicketStatus::Consumed, Some(grant)) => TicketState::Consumed { grant },
            (TicketStatus::Left, grant) => TicketState::Left { grant },
            (TicketStatus::Expired, grant) => TicketState::Expired { grant },
            (state, grant) => return Err(format!("{state:?} with grant {grant:?}")),
        };
        Ok(Ticket { id: self.id, session: self.session, state, joined_ms: self.joined_ms })
    }
}

impl WaitlistV2 {
    fn migrate(self) -> Result<Waitlist, String> {
        let mut entries = BTreeMap::new();
        for (id, entry) in self.entries {
            entries.insert(
                id,
                entry.migrate().map_err(|violation| format!("entry {id}: {violation}"))?,
            );
        }
        let mut offers = BTreeMap::new();
        for (id, offer) in self.offers {
            offers.insert(
                id,
                offer.migrate().map_err(|violation| format!("offer {id}: {violation}"))?,
            );
        }
        Ok(Waitlist {
            enabled: self.enabled,
            policy_version: self.policy_version,
            entries: entries.into(),
            waiting: self.waiting.into(),
            active_by_session: self.active_by_session.into(),
            offers: offers.into(),
            offer_deadlines: self.offer_deadlines.into(),
            pool: self.pool,
            capacity_events: self.capacity_events,
            capacity_event_deadlines: self.capacity_event_deadlines,
            policy: Default::default(),
            pooled_since: Default::default(),
        })
    }
}

impl WaitlistEntryV2 {
    fn migrate(self) -> Result<WaitlistEntry, String> {
        let state = match (self.state, self.offer) {
            (WaitlistEntryStatus::Waiting, None) => WaitlistEntryState::Waiting,
            (WaitlistEntryStatus::Offered, Some(offer)) => WaitlistEntryState::Offered { offer },
            (WaitlistEntryStatus::Accepted, Some(offer)) => WaitlistEntryState::Accepted { offer },
            (WaitlistEntryStatus::Declined, Some(offer)) => WaitlistEntryState::Declined { offer },
            (WaitlistEntryStatus::Expired, Some(offer)) => WaitlistEntryState::Expired { offer },
            (WaitlistEntryStatus::Left, offer) => WaitlistEntryState::Left { offer },
            (state, offer) => return Err(format!("{state:?} with offer {offer:?}")),
        };
        Ok(WaitlistEntry {
            id: self.id,
            session: self.session,
            quantity: self.quantity,
            order: self.order,
            joined_index: self.joined_index,
            policy_version: self.policy_version,
            state,
        })
    }
}

impl OfferV2 {
    fn migrate(self) -> Result<Offer, String> {
        let state = match (self.state, self.hold) {
            (OfferStatus::Open, None) => OfferState::Open,
            (OfferStatus::Accepted, Some(hold)) => OfferState::Accepted { hold },
            (OfferStatus::Declined, None) => OfferState::Declined,
            (OfferStatus::Expired, None) => OfferState::Expired,
            (OfferStatus::Withdrawn, None) => OfferState::Withdrawn,
            (state, hold) => return Err(format!("{state:?} with hold {hold:?}")),
        };
        Ok(Offer {
            id: self.id,
            entry: self.entry,
            session: self.session,
            seats: self.seats,
            state,
            made_index: self.made_index,
            deadline_ms: self.deadline_ms,
            promotion_lag_ms: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(state: HoldStatus) -> HoldV2 {
        HoldV2 {
            id: HoldId(1),
            session: SessionId(1),
            seats: SeatSet::new([3, 4]).expect("a seat set"),
            state,
            created_ms: 1_000,
            hold_deadline_ms: 301_000,
            processing_deadline_ms: None,
            price_version: 1,
            price: Money { amount_minor: 100, currency: Currency(*b"EUR") },
            grant: None,
            offer: None,
            payment: None,
            payment_attempts: 0,
            booking: None,
        }
    }

    fn attempts(payments: &[u64]) -> HoldPayments {
        payments.iter().map(|payment| PaymentId(*payment)).collect()
    }

    #[test]
    fn a_processing_hold_takes_its_payment_and_deadline_into_its_state() {
        let mut processing = hold(HoldStatus::Processing);
        processing.processing_deadline_ms = Some(421_000);
        processing.payment = Some(PaymentId(2));
        processing.payment_attempts = 1;
        let migrated = processing.migrate(attempts(&[2])).expect("consistent");
        let state = HoldState::Processing { payment: PaymentId(2), deadline_ms: 421_000 };
        assert_eq!((migrated.state, migrated.payments), (state, attempts(&[2])));
    }

    #[test]
    fn flat_fields_that_contradict_the_state_are_refused() {
        let mut no_deadline = hold(HoldStatus::Processing);
        no_deadline.payment = Some(PaymentId(2));
        no_deadline.payment_attempts = 1;
        let refused = no_deadline.migrate(attempts(&[2])).unwrap_err();
        assert!(refused.contains("processing without a deadline"), "{refused}");
        let refused = hold(HoldStatus::Confirmed).migrate(attempts(&[])).unwrap_err();
        assert!(refused.contains("confirmed without a booking"), "{refused}");
        let mut held_with_deadline = hold(HoldStatus::Held);
        held_with_deadline.processing_deadline_ms = Some(421_000);
        assert!(held_with_deadline.migrate(attempts(&[])).is_err());
        let mut expired_after_checkout = hold(HoldStatus::Expired);
        expired_after_checkout.processing_deadline_ms = Some(421_000);
        expired_after_checkout.payment = Some(PaymentId(2));
        expired_after_checkout.payment_attempts = 1;
        let expired = expired_after_checkout.migrate(attempts(&[2])).expect("a stale deadline");
        assert_eq!((expired.state, expired.deadline_ms()), (HoldState::Expired, 301_000));
        let mut held_with_booking = hold(HoldStatus::Held);
        held_with_booking.booking = Some(BookingId(5));
        assert!(held_with_booking.migrate(attempts(&[])).is_err());
        let mut miscounted = hold(HoldStatus::Held);
        miscounted.payment = Some(PaymentId(2));
        miscounted.payment_attempts = 2;
        assert!(miscounted.migrate(attempts(&[2])).is_err(), "two attempts counted, one exists");

        let ticket = |state, granted_index, grant_deadline_ms| TicketV2 {
            id: TicketId(1),
            session: SessionId(1),
            state,
            joined_ms: 0,
            granted_index,
            grant_deadline_ms,
        };
        assert!(ticket(TicketStatus::Granted, None, None).migrate().is_err());
        assert!(ticket(TicketStatus::Consumed, Some(3), None).migrate().is_err());
        assert!(ticket(TicketStatus::Waiting, Some(3), Some(9)).migrate().is_err());
        let left = ticket(TicketStatus::Left, Some(3), Some(9)).migrate().expect("consistent");
        assert_eq!(
            left.state,
            TicketState::Left { grant: Some(Grant { index: 3, deadline_ms: 9 }) }
        );

        let payment = |state, refund_required| PaymentAttemptV2 {
            id: PaymentId(2),
            hold: HoldId(1),
            session: SessionId(1),
            price: Money { amount_minor: 100, currency: Currency(*b"EUR") },
            state,
            refund_required,
            created_ms: 0,
        };
        assert!(payment(PaymentStatus::Declined, true).migrate().is_err());
        let refunded = payment(PaymentStatus::Succeeded, true).migrate().expect("consistent");
        assert!(refunded.refund_required());
    }
}
