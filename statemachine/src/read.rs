//! Reads: seat map, hold, booking, payment, ticket, waitlist entry and offer status, audit trail.
//!
//! Owns the read views. Every view is computed at the group's applied index and log time (its
//! `as_of`), and reports deadlines by log time: an overdue hold, grant or offer reads as expired
//! even before a tick materializes it. A `viewer` of `Some(session)` may read only its own
//! entities (`not_owner` otherwise); `None` is an operator. Never changes state.

use serde::{Deserialize, Serialize};

use crate::audit::{AuditRecord, EntityKind, EntityRef, OrderKey, StateName};
use crate::ids::{
    BookingId, Currency, EntryId, HoldId, OfferId, PaymentId, SessionId, ShowId, TicketId,
};
use crate::outcome::Rejection;
use crate::state::{
    Booking, Group, Hold, HoldStatus, Offer, OfferStatus, PaymentAttempt, Seat, Show, ShowStatus,
    TicketStatus, WaitlistEntry, WaitlistEntryStatus, WaitlistRules,
};

/// The log position a read reflects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AsOf {
    /// The applied log index.
    pub log_index: u64,
    /// The log time.
    pub log_time_ms: u64,
}

/// A seat as a buyer browsing the map sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeatStatus {
    /// Can be held.
    Free,
    /// In a live hold.
    Held,
    /// Sold.
    Booked,
    /// Kept for or offered to the waitlist.
    Reserved,
}

/// A show's seat map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeatMap {
    /// The show.
    pub show: ShowId,
    /// Its sales status.
    pub status: ShowStatus,
    /// The price version to quote when holding.
    pub price_version: u32,
    /// The currency.
    pub currency: Currency,
    /// One price per class.
    pub prices_minor: Vec<u64>,
    /// Each seat's class.
    pub classes: Vec<u8>,
    /// Each seat's status.
    pub seats: Vec<SeatStatus>,
    /// When.
    pub as_of: AsOf,
}

/// A hold with its state as of the read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldView {
    /// The hold (its `state` as stored).
    pub hold: Hold,
    /// Its state by log time (an overdue live hold is expired).
    pub state: HoldStatus,
    /// When.
    pub as_of: AsOf,
}

/// A booking as of the read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookingView {
    /// The booking.
    pub booking: Booking,
    /// When.
    pub as_of: AsOf,
}

/// A payment attempt as of the read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentView {
    /// The attempt.
    pub payment: PaymentAttempt,
    /// When.
    pub as_of: AsOf,
}

/// An admission ticket and its place in line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketView {
    /// The ticket.
    pub ticket: TicketId,
    /// Its owner.
    pub session: SessionId,
    /// Its state by log time.
    pub state: TicketStatus,
    /// Waiting tickets ahead of it (0 unless waiting).
    pub ahead: u32,
    /// The grant deadline, if granted.
    pub grant_deadline_ms: Option<u64>,
    /// When.
    pub as_of: AsOf,
}

/// A waitlist entry and its place in line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitlistEntryView {
    /// The entry.
    pub entry: WaitlistEntry,
    /// Its state by log time (an entry whose offer is overdue is expired).
    pub state: WaitlistEntryStatus,
    /// Waiting entries ahead of it (0 unless waiting).
    pub ahead: u32,
    /// When.
    pub as_of: AsOf,
}

/// An offer as of the read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferView {
    /// The offer.
    pub offer: Offer,
    /// Its state by log time (an overdue open offer is expired).
    pub state: OfferStatus,
    /// When.
    pub as_of: AsOf,
}

/// A waitlist entry and its latest offer, read in one step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryWithOffer {
    /// The entry.
    pub entry: WaitlistEntryView,
    /// Its latest offer, if it had one.
    pub offer: Option<OfferView>,
}

/// An offer made to another entry while this one waited: the answer to "why did someone after
/// me get a spot?".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitlistSkip {
    /// The offer.
    pub offer: OfferId,
    /// The entry it went to.
    pub entry: EntryId,
    /// That entry's order key.
    pub order: OrderKey,
    /// Whether that entry was ahead in order (the policy's answer); `false` would be a bug.
    pub was_ahead: bool,
    /// The log index of the offer.
    pub made_index: u64,
    /// The policy version that entry joined under.
    pub policy_version: u32,
    /// The rules of that version: the policy the answer follows.
    pub rules: WaitlistRules,
    /// The lottery's seed, if those rules drew one.
    pub draw_seed: Option<u64>,
    /// That entry's draw key, if it was in the draw (lower keys are served first; entries
    /// that joined after the draw are served after every drawn one, FIFO).
    pub draw_key: Option<u64>,
    /// The asker's draw key, if it was in the draw.
    pub your_draw_key: Option<u64>,
}

impl Group {
    /// The log position of every read right now.
    pub fn as_of(&self) -> AsOf {
        AsOf { log_index: self.applied_index, log_time_ms: self.log_time_ms }
    }

    fn show_for_read(&self, show: ShowId) -> Result<&Show, Rejection> {
        self.show_or_archived(show)
    }

    /// The seat map of a show.
    ///
    /// # Errors
    ///
    /// `ShowNotFound`.
    pub fn seat_map(&self, show: ShowId) -> Result<SeatMap, Rejection> {
        let found = self.show_for_read(show)?;
        let now = self.log_time_ms;
        // A held seat reads free only once its hold is overdue and nobody waits for a seat.
        // The deadline index holds every live hold's deadline (an invariant), so when its
        // earliest is still ahead, or someone waits, every held seat reads held without
        // looking its hold up: a map of a busy show is built per seat, not per hold lookup.
        let none_overdue =
            found.hold_deadlines.first().is_none_or(|&(deadline_ms, _)| deadline_ms > now);
        let held_stays_held = none_overdue || !found.waitlist.waiting.is_empty();
        let seats = (0..found.seat_count())
            .map(|seat| match found.seats[seat as usize] {
                Seat::Free => SeatStatus::Free,
                Seat::Held(_) if held_stays_held => SeatStatus::Held,
                Seat::Held(_) if found.seat_claimable(seat, now) => SeatStatus::Free,
                Seat::Held(_) => SeatStatus::Held,
                Seat::Booked(_) => SeatStatus::Booked,
                Seat::Pooled | Seat::Offered(_) => SeatStatus::Reserved,
            })
            .collect();
        Ok(SeatMap {
            show,
            status: found.status,
            price_version: found.price_version,
            currency: found.currency,
            prices_minor: found.prices_minor.clone(),
            classes: found.seat_classes.clone(),
            seats,
            as_of: self.as_of(),
        })
    }

    /// A hold.
    ///
    /// # Errors
    ///
    /// `ShowNotFound`, `HoldNotFound`, `NotOwner`.
    pub fn hold(
        &self,
        show: ShowId,
        hold: HoldId,
        viewer: Option<SessionId>,
    ) -> Result<HoldView, Rejection> {
        let found = self.show_for_read(show)?.holds.get(&hold).ok_or(Rejection::HoldNotFound)?;
        check_owner(viewer, found.session)?;
        Ok(HoldView {
            state: found.effective_state(self.log_time_ms),
            hold: found.clone(),
            as_of: self.as_of(),
        })
    }

    /// A booking.
    ///
    /// # Errors
    ///
    /// `ShowNotFound`, `BookingNotFound`, `NotOwner`.
    pub fn booking(
        &self,
        show: ShowId,
        booking: BookingId,
        viewer: Option<SessionId>,
    ) -> Result<BookingView, Rejection> {
        let found =
            self.show_for_read(show)?.bookings.get(&booking).ok_or(Rejection::BookingNotFound)?;
        check_owner(viewer, found.session)?;
        Ok(BookingView { booking: found.clone(), as_of: self.as_of() })
    }

    /// A payment attempt.
    ///
    /// # Errors
    ///
    /// `ShowNotFound`, `PaymentNotFound`, `NotOwner`.
    pub fn payment(
        &self,
        show: ShowId,
        payment: PaymentId,
        viewer: Option<SessionId>,
    ) -> Result<PaymentView, Rejection> {
        let found =
            self.show_for_read(show)?.payments.get(&payment).ok_or(Rejection::PaymentNotFound)?;
        check_owner(viewer, found.session)?;
        Ok(PaymentView { payment: found.clone(), as_of: self.as_of() })
    }

    /// Every payment attempt whose outcome the provider has not told yet (`pending` or
    /// `unknown`), oldest first per show: the work of the leader's payment worker. Scans every
    /// attempt of every show in the group.
    pub fn unsettled_payments(&self) -> Vec<(ShowId, PaymentAttempt)> {
        self.shows
            .iter()
            .filter(|(show, _)| self.serves(**show))
            .flat_map(|(show, found)| {
                found
                    .payments
                    .values()
                    .filter(|attempt| !attempt.state.is_final())
                    .map(|attempt| (*show, attempt.clone()))
            })
            .collect()
    }

    /// Every payment attempt whose money must be given back and has not been yet (a late
    /// payment, a cancelled booking): the work of the leader's refund worker. Scans every
    /// attempt of every show in the group.
    pub fn refunds_owed(&self) -> Vec<(ShowId, PaymentAttempt)> {
        self.shows
            .iter()
            .filter(|(show, _)| self.serves(**show))
            .flat_map(|(show, found)| {
                found
                    .payments
                    .values()
                    .filter(|attempt| attempt.refund_required())
                    .map(|attempt| (*show, attempt.clone()))
            })
            .collect()
    }

    /// An admission ticket (and grant) and its place in line.
    ///
    /// # Errors
    ///
    /// `ShowNotFound`, `TicketNotFound`, `NotOwner`.
    pub fn ticket(
        &self,
        show: ShowId,
        ticket: TicketId,
        viewer: Option<SessionId>,
    ) -> Result<TicketView, Rejection> {
        let found_show = self.show_for_read(show)?;
        let found = found_show.lane.tickets.get(&ticket).ok_or(Rejection::TicketNotFound)?;
        check_owner(viewer, found.session)?;
        let state = found_show.ticket_effective_state(found, self.log_time_ms);
        let ahead = if state == TicketStatus::Waiting {
            found_show
                .lane
                .waiting
                .range(..ticket)
                .filter(|other| {
                    let other = &found_show.lane.tickets[other];
                    found_show.ticket_effective_state(other, self.log_time_ms)
                        == TicketStatus::Waiting
                })
                .count() as u32
        } else {
            0
        };
        Ok(TicketView {
            ticket,
            session: found.session,
            state,
            ahead,
            grant_deadline_ms: found.state.grant().map(|grant| grant.deadline_ms),
            as_of: self.as_of(),
        })
    }

    /// A waitlist entry and its place in line.
    ///
    /// # Errors
    ///
    /// `ShowNotFound`, `EntryNotFound`, `NotOwner`.
    pub fn waitlist_entry(
        &self,
        show: ShowId,
        entry: EntryId,
        viewer: Option<SessionId>,
    ) -> Result<WaitlistEntryView, Rejection> {
        let found_show = self.show_for_read(show)?;
        let found = found_show.waitlist.entries.get(&entry).ok_or(Rejection::EntryNotFound)?;
        check_owner(viewer, found.session)?;
        let mut state = found.state.status();
        if let Some(offer) = found.offer()
            && found_show.waitlist.offers[&offer].is_overdue(self.log_time_ms)
        {
            state = WaitlistEntryStatus::Expired;
        }
        let ahead = if state == WaitlistEntryStatus::Waiting {
            found_show.waitlist.ahead_of(found)
        } else {
            0
        };
        Ok(WaitlistEntryView { entry: found.clone(), state, ahead, as_of: self.as_of() })
    }

    /// A waitlist entry and its latest offer, if it had one, in one read.
    ///
    /// # Errors
    ///
    /// As [`Group::waitlist_entry`].
    pub fn waitlist_entry_with_offer(
        &self,
        show: ShowId,
        entry: EntryId,
        viewer: Option<SessionId>,
    ) -> Result<EntryWithOffer, Rejection> {
        let entry = self.waitlist_entry(show, entry, viewer)?;
        let offer = match entry.entry.offer() {
            Some(offer) => Some(self.offer(show, offer, viewer)?),
            None => None,
        };
        Ok(EntryWithOffer { entry, offer })
    }

    /// An offer.
    ///
    /// # Errors
    ///
    /// `ShowNotFound`, `OfferNotFound`, `NotOwner`.
    pub fn offer(
        &self,
        show: ShowId,
        offer: OfferId,
        viewer: Option<SessionId>,
    ) -> Result<OfferView, Rejection> {
        let found = self
            .show_for_read(show)?
            .waitlist
            .offers
            .get(&offer)
            .ok_or(Rejection::OfferNotFound)?;
        check_owner(viewer, found.session)?;
        let state = if found.is_overdue(self.log_time_ms) {
            OfferStatus::Expired
        } else {
            found.state.status()
        };
        Ok(OfferView { offer: found.clone(), state, as_of: self.as_of() })
    }

    /// The audit trail of one entity, oldest first (operator read).
    pub fn audit_trail(&self, show: ShowId, kind: EntityKind, id: u64) -> &[AuditRecord] {
        self.audit.of(EntityRef { show, kind, id })
    }

    /// Every offer made to another entry while `entry` was waiting, with that entry's order key
    /// and whether it was ahead: the audited answer to "why did someone after me get a spot?".
    ///
    /// # Errors
    ///
    /// `ShowNotFound`, `EntryNotFound`, `NotOwner`.
    pub fn waitlist_skips(
        &self,
        show: ShowId,
        entry: EntryId,
        viewer: Option<SessionId>,
    ) -> Result<Vec<WaitlistSkip>, Rejection> {
        let found_show = self.show_for_read(show)?;
        let found = found_show.waitlist.entries.get(&entry).ok_or(Rejection::EntryNotFound)?;
        check_owner(viewer, found.session)?;
        let stopped_waiting = self
            .audit_trail(show, EntityKind::WaitlistEntry, entry.0)
            .iter()
            .find(|record| record.from == Some(StateName::Waiting))
            .map_or(u64::MAX, |record| record.log_index);
        Ok(found_show
            .waitlist
            .offers
            .values()
            .filter(|offer| offer.entry != entry)
            // Made after the entry joined: ids come from one counter per show, so this also
            // orders an offer and a join of the same apply (their log index is equal).
            .filter(|offer| offer.id.0 > entry.0)
            .filter_map(|offer| {
                let waitlist = &found_show.waitlist;
                let other = &waitlist.entries[&offer.entry];
                let was_ahead = waitlist.serving_key(other) < waitlist.serving_key(found);
                let policy = waitlist.policy_at(other.policy_version);

                // Offers of the apply that ended this entry's wait count only if made before it.
                let during_wait = offer.made_index < stopped_waiting
                    || (offer.made_index == stopped_waiting && was_ahead);
                during_wait.then_some(WaitlistSkip {
                    offer: offer.id,
                    entry: offer.entry,
                    order: other.order,
                    was_ahead,
                    made_index: offer.made_index,
                    policy_version: other.policy_version,
                    rules: policy.rules,
                    draw_seed: policy.draw.map(|draw| draw.seed),
                    draw_key: waitlist.drawn_key(other),
                    your_draw_key: waitlist.drawn_key(found),
                })
            })
            .collect())
    }
}

fn check_owner(viewer: Option<SessionId>, owner: SessionId) -> Result<(), Rejection> {
    match viewer {
        Some(session) if session != owner => Err(Rejection::NotOwner),
        _ => Ok(()),
    }
}
