//! The waitlist of a sold-out show (seed 000, "Booking Waitlist System Design").
//!
//! Owns entries, the pool of released seats kept for waiters, and offers. Entries are served in
//! order of (priority band, join time, sequence); the head of the line is served first even when
//! a later, smaller request would fit (no skipping). Each released seat is in at most one open
//! offer; accepting turns the offer into a hold in the same apply; decline, expiry and leave pass
//! the seats to the next waiter. Every promotion is audited with the order key it followed.
//! Never offers a seat that is not in the pool; never serves a later waiter before an earlier one.

use crate::audit::{EntityKind, OrderKey, Reason, StateName};
use crate::ids::{Actor, CapacityEventId, EntryId, OfferId, SeatNo, SeatSet, SessionId};
use crate::inject::{self, Bug};
use crate::limits::{CAPACITY_EVENT_SEATS_MAX, SEATS_PER_HOLD_MAX, WAITLIST_ENTRIES_LIVE_MAX};
use crate::outbox::Event;
use crate::outcome::{Outcome, Rejection, Reply};
use crate::state::{
    Ctx, HoldState, Offer, OfferState, Seat, Show, WaitlistEntry, WaitlistEntryState,
    WaitlistEntryStatus,
};

impl Show {
    /// Puts the session on the waitlist, if the show is sold out for `quantity` seats.
    pub(crate) fn join_waitlist(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        quantity: u8,
        band: u8,
    ) -> Outcome {
        self.require_not_cancelled()?;
        if !self.waitlist.enabled {
            return Err(Rejection::WaitlistDisabled);
        }
        if let Some(entry) = self.waitlist.active_by_session.get(&session) {
            return Err(Rejection::AlreadyOnWaitlist { entry: *entry });
        }
        if self.waitlist.active_by_session.len() >= WAITLIST_ENTRIES_LIVE_MAX {
            return Err(Rejection::QueueFull { what: "waitlist".into() });
        }
        if self.counts.free >= u32::from(quantity) {
            return Err(Rejection::NotSoldOut { free: self.counts.free });
        }

        let id = EntryId(self.allocate_id());
        let band = self.waitlist.band_for(band);
        let order = OrderKey { band, joined_ms: ctx.now, seq: id.0 };
        let entry = WaitlistEntry {
            id,
            session,
            quantity,
            order,
            joined_index: ctx.index,
            policy_version: self.waitlist.policy_version,
            state: WaitlistEntryState::Waiting,
        };
        let ahead = self.waitlist.ahead_of(&entry);
        self.waitlist.entries.insert(id, entry);
        assert!(self.waitlist.waiting.insert(order));
        assert!(self.waitlist.active_by_session.insert(session, id).is_none());
        let mut transition = self.transition(
            EntityKind::WaitlistEntry,
            id.0,
            None,
            StateName::Waiting,
            Reason::Requested,
        );
        transition.order = Some(order);
        ctx.record(transition);
        self.promote(ctx);
        // The session's active entry is the new one, waiting or offered at once.
        assert!(self.waitlist.entries[&id].state.is_active());
        assert_eq!(self.waitlist.active_by_session[&session], id);
        Ok(Reply::WaitlistJoined { entry: id, ahead })
    }

    /// Takes the owner's entry off the waitlist; an open offer is declined first.
    pub(crate) fn leave_waitlist(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        entry: EntryId,
    ) -> Outcome {
        let found = self.waitlist.entries.get(&entry).ok_or(Rejection::EntryNotFound)?;
        if found.session != session {
            return Err(Rejection::NotOwner);
        }
        match found.state {
            WaitlistEntryState::Waiting => self.end_waiting_entry(ctx, entry, Reason::Requested),
            WaitlistEntryState::Offered { offer } => {
                if self.waitlist.offers[&offer].is_overdue(ctx.now) {
                    // The offer ran out before the waiter left: that is its expiry, not a decline.
                    self.expire_offer(ctx, offer);
                    return Ok(Reply::WaitlistLeft { entry });
                }
                self.close_offer(
                    ctx,
                    offer,
                    OfferState::Declined,
                    WaitlistEntryStatus::Left,
                    Reason::Requested,
                );
            }
            state => return Err(Rejection::EntryNotActive { state: state.status() }),
        }
        self.promote(ctx);
        assert!(!self.waitlist.entries[&entry].state.is_active());
        assert!(!self.waitlist.active_by_session.contains_key(&session));
        Ok(Reply::WaitlistLeft { entry })
    }

    /// Accepts the owner's open offer: its seats become the session's hold in this apply.
    /// Accepting an offer already accepted returns the same hold (a double tap is harmless).
    pub(crate) fn accept_offer(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        offer: OfferId,
    ) -> Outcome {
        let found = self.owned_offer(session, offer)?;
        match found.state {
            OfferState::Open if found.is_overdue(ctx.now) && !inject::on(Bug::AcceptLate) => {
                return Err(Rejection::OfferExpired);
            }
            OfferState::Open => {}
            OfferState::Accepted { hold } => {
                let hold = &self.holds[&hold];
                let receipt = crate::outcome::HoldReceipt {
                    show: self.id,
                    hold: hold.id,
                    seats: hold.seats.clone(),
                    price: hold.price,
                    deadline_ms: hold.hold_deadline_ms,
                };
                return Ok(Reply::OfferAccepted { offer, hold: receipt });
            }
            OfferState::Expired => return Err(Rejection::OfferExpired),
            OfferState::Declined | OfferState::Withdrawn => {
                return Err(Rejection::OfferNotActive);
            }
        }
        self.require_not_cancelled()?;

        let seats = found.seats.clone();
        let entry = found.entry;
        let deadline_ms = found.deadline_ms;
        assert!(self.waitlist.offer_deadlines.remove(&(deadline_ms, offer)));
        let receipt = self.create_hold(ctx, session, &seats, None, Some(offer));
        let found = self.waitlist.offers.get_mut(&offer).expect("known offer");
        found.state = OfferState::Accepted { hold: receipt.hold };
        let waiter = self.waitlist.entries.get_mut(&entry).expect("an offer's entry exists");
        waiter.state = WaitlistEntryState::Accepted { offer };
        assert_eq!(self.waitlist.active_by_session.remove(&session), Some(entry));
        let transition = self.transition(
            EntityKind::Offer,
            offer.0,
            Some(StateName::Open),
            StateName::Accepted,
            Reason::OfferAccepted,
        );
        ctx.record(transition);
        let transition = self.transition(
            EntityKind::WaitlistEntry,
            entry.0,
            Some(StateName::Offered),
            StateName::Accepted,
            Reason::OfferAccepted,
        );
        ctx.record(transition);
        // The offer became the hold, which owns exactly the offered seats.
        let hold = &self.holds[&receipt.hold];
        assert_eq!((hold.offer, hold.state, &hold.seats), (Some(offer), HoldState::Held, &seats));
        assert_eq!(self.waitlist.offers[&offer].state, OfferState::Accepted { hold: hold.id });
        assert!(!self.waitlist.offer_deadlines.contains(&(deadline_ms, offer)));
        // The accepted offer left the wave: the next waiter may be served.
        self.promote(ctx);
        Ok(Reply::OfferAccepted { offer, hold: receipt })
    }

    /// The offer, if `session` owns it.
    fn owned_offer(&self, session: SessionId, offer: OfferId) -> Result<&Offer, Rejection> {
        let found = self.waitlist.offers.get(&offer).ok_or(Rejection::OfferNotFound)?;
        if found.session != session {
            return Err(Rejection::NotOwner);
        }
        Ok(found)
    }

    /// Declines the owner's open offer: its seats go to the next waiter.
    pub(crate) fn decline_offer(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        offer: OfferId,
    ) -> Outcome {
        let found = self.owned_offer(session, offer)?;
        match found.state {
            OfferState::Open if found.is_overdue(ctx.now) => return Err(Rejection::OfferExpired),
            OfferState::Open => {}
            OfferState::Declined => return Ok(Reply::OfferDeclined { offer }),
            OfferState::Expired => return Err(Rejection::OfferExpired),
            OfferState::Accepted { .. } | OfferState::Withdrawn => {
                return Err(Rejection::OfferNotActive);
            }
        }
        self.close_offer(
            ctx,
            offer,
            OfferState::Declined,
            WaitlistEntryStatus::Declined,
            Reason::Requested,
        );
        self.promote(ctx);
        assert_eq!(self.waitlist.offers[&offer].state, OfferState::Declined);
        Ok(Reply::OfferDeclined { offer })
    }

    /// Turns the waitlist on or off; turning it off ends every waiting entry (open offers run
    /// their course).
    pub(crate) fn configure_waitlist(
        &mut self,
        ctx: &mut Ctx<'_>,
        enabled: bool,
        policy_version: u32,
    ) -> Outcome {
        self.require_not_cancelled()?;
        if policy_version < self.waitlist.policy_version {
            return Err(Rejection::invalid("policy_version: must not go back"));
        }
        let changed =
            (self.waitlist.enabled, self.waitlist.policy_version) != (enabled, policy_version);
        self.waitlist.enabled = enabled;
        self.waitlist.policy_version = policy_version;
        if changed {
            self.audit_change(ctx, Some(self.status), Reason::WaitlistConfigured);
        }
        if !enabled {
            let waiting: Vec<EntryId> =
                self.waitlist.waiting.iter().map(|order| EntryId(order.seq)).collect();
            for entry in waiting {
                self.end_waiting_entry(ctx, entry, Reason::WaitlistDisabled);
            }
        }
        self.promote(ctx);
        assert!(enabled || self.waitlist.waiting.is_empty(), "a waitlist turned off has no line");
        Ok(Reply::WaitlistConfigured { show: self.id, enabled, policy_version })
    }

    /// Releases free seats to the waitlist, once per event id.
    pub(crate) fn capacity_released(
        &mut self,
        ctx: &mut Ctx<'_>,
        event: CapacityEventId,
        mut seats: Vec<SeatNo>,
    ) -> Outcome {
        self.require_not_cancelled()?;
        if seats.is_empty() || seats.len() > CAPACITY_EVENT_SEATS_MAX {
            return Err(Rejection::invalid(format!(
                "seats: must name 1..={CAPACITY_EVENT_SEATS_MAX} seats"
            )));
        }
        seats.sort_unstable();
        if seats.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(Rejection::invalid("seats: a seat is named twice"));
        }
        self.require_seats_exist(&seats)?;
        if let Some(forget_ms) = self.waitlist.capacity_events.get(&event)
            && *forget_ms > ctx.now
        {
            return Ok(Reply::CapacityReleased { event, seats_released: 0, duplicate: true });
        }
        // The first taken seats, as many as a rejection names.
        let taken = SeatSet::from_ascending(
            seats
                .iter()
                .copied()
                .filter(|seat| self.seats[*seat as usize] != Seat::Free)
                .take(SEATS_PER_HOLD_MAX),
        );
        if let Some(taken) = taken {
            return Err(Rejection::SeatUnavailable { seats: taken });
        }

        let forget_ms = ctx.now + self.policy.idempotency_retention_ms;
        if let Some(previous) = self.waitlist.capacity_events.insert(event, forget_ms) {
            assert!(self.waitlist.capacity_event_deadlines.remove(&(previous, event)));
        }
        assert!(self.waitlist.capacity_event_deadlines.insert((forget_ms, event)));
        let seats_released = if self.waitlist.waiting.is_empty() {
            0
        } else {
            for seat in &seats {
                self.set_seat(*seat, Seat::Pooled);
                self.waitlist.pool_seat(*seat, ctx.now);
            }
            self.promote(ctx);
            seats.len() as u32
        };
        // The seats went to the waitlist (pooled or offered), or are free with nobody waiting:
        // they stayed free, or an offer served the last waiter and the rest of the pool was
        // freed.
        let nobody_waits = self.waitlist.waiting.is_empty();
        let released = |seat: &SeatNo| match self.seats[*seat as usize] {
            Seat::Pooled | Seat::Offered(_) => true,
            Seat::Free => nobody_waits,
            Seat::Held(_) | Seat::Booked(_) => false,
        };
        assert!(if seats_released == 0 {
            seats.iter().all(|seat| self.seats[*seat as usize] == Seat::Free)
        } else {
            seats.iter().all(released)
        });
        Ok(Reply::CapacityReleased { event, seats_released, duplicate: false })
    }

    /// Serves the waitlist: while the next in line (by the policy: see `waitlist_policy.rs`)
    /// fits in the pool, offers it the lowest pooled seats. With nobody waiting (or the show
    /// cancelled), the pool is freed. The policy may hold serving back: a lottery not yet
    /// drawn, or a full wave of open offers.
    pub(crate) fn promote(&mut self, ctx: &mut Ctx<'_>) {
        let actor = ctx.actor;
        ctx.actor = Actor::System;
        loop {
            if self.waitlist.waiting.is_empty()
                || self.status == crate::state::ShowStatus::Cancelled
            {
                while let Some((seat, _)) = self.waitlist.unpool_first() {
                    self.set_seat(seat, Seat::Free);
                }
                break;
            }
            let Some(head) = self.waitlist.next_in_line() else { break };
            let entry = EntryId(head.seq);
            let quantity = usize::from(self.waitlist.entries[&entry].quantity);
            if self.waitlist.pool.len() < quantity {
                break;
            }
            // The pool is ordered, so the lowest seats come out ascending.
            let unpooled: Vec<(SeatNo, u64)> =
                (0..quantity).filter_map(|_| self.waitlist.unpool_first()).collect();
            let pooled_ms = unpooled.iter().map(|(_, since)| *since).min();
            let seats = SeatSet::from_ascending(unpooled.into_iter().map(|(seat, _)| seat))
                .expect("the head entry wants at least one seat and the pool has enough");
            let lag_ms = ctx.now.saturating_sub(pooled_ms.expect("at least one seat"));
            if inject::on(Bug::TwoOffers) {
                self.offer_again(ctx, entry, &seats);
            }
            self.make_offer(ctx, entry, head, seats, lag_ms);
        }
        ctx.actor = actor;
        // Nobody waits and nothing is pooled, or the pool cannot serve the next in line, or the
        // policy holds serving back.
        if self.waitlist.waiting.is_empty() || self.status == crate::state::ShowStatus::Cancelled {
            assert!(self.waitlist.pool.is_empty());
        } else if let Some(head) = self.waitlist.next_in_line() {
            let quantity = self.waitlist.entries[&EntryId(head.seq)].quantity;
            assert!(self.waitlist.pool.len() < usize::from(quantity));
        }
    }

    /// The planted bug [`Bug::TwoOffers`]: offers `seats`, which the head of the line is about
    /// to be offered, to another waiter as well, if it wants as many.
    fn offer_again(&mut self, ctx: &mut Ctx<'_>, head: EntryId, seats: &SeatSet) {
        let other =
            self.waitlist.waiting.iter().map(|order| EntryId(order.seq)).find(|e| *e != head);
        let Some(entry) = other else { return };
        if usize::from(self.waitlist.entries[&entry].quantity) != seats.len() {
            return;
        }
        let offer = OfferId(self.allocate_id());
        let deadline_ms = ctx.now + self.policy.offer_ttl_ms;
        self.open_offer(ctx, offer, entry, seats.clone(), deadline_ms, 0);
    }

    fn make_offer(
        &mut self,
        ctx: &mut Ctx<'_>,
        entry: EntryId,
        order: OrderKey,
        seats: SeatSet,
        promotion_lag_ms: u64,
    ) {
        let offer = OfferId(self.allocate_id());
        let offered_before = self.counts.offered;
        let deadline_ms = ctx.now + self.policy.offer_ttl_ms;
        for seat in &seats {
            assert_eq!(self.seats[*seat as usize], Seat::Pooled);
            self.set_seat(*seat, Seat::Offered(offer));
        }
        let offered = seats.len() as u32;
        self.open_offer(ctx, offer, entry, seats, deadline_ms, promotion_lag_ms);
        assert_eq!(self.counts.offered, offered_before + offered);
        let mut transition = self.transition(
            EntityKind::WaitlistEntry,
            entry.0,
            Some(StateName::Waiting),
            StateName::Offered,
            Reason::NextInLine,
        );
        transition.order = Some(order);
        ctx.record(transition);
        let mut transition =
            self.transition(EntityKind::Offer, offer.0, None, StateName::Open, Reason::NextInLine);
        transition.order = Some(order);
        ctx.record(transition);
    }

    /// Makes `offer` of `seats` to the waiting `entry`, open until `deadline_ms`, and tells the
    /// outbox; the caller has set the seats aside and records the transitions.
    fn open_offer(
        &mut self,
        ctx: &mut Ctx<'_>,
        offer: OfferId,
        entry: EntryId,
        seats: SeatSet,
        deadline_ms: u64,
        promotion_lag_ms: u64,
    ) {
        self.waitlist.stop_waiting(entry);
        let waiter = self.waitlist.entries.get_mut(&entry).expect("a waiting entry exists");
        assert_eq!(waiter.state, WaitlistEntryState::Waiting);
        waiter.state = WaitlistEntryState::Offered { offer };
        let session = waiter.session;
        let made = Offer {
            id: offer,
            entry,
            session,
            seats: seats.clone(),
            state: OfferState::Open,
            made_index: ctx.index,
            deadline_ms,
            promotion_lag_ms: Some(promotion_lag_ms),
        };
        self.waitlist.offers.insert(offer, made);
        assert!(self.waitlist.offer_deadlines.insert((deadline_ms, offer)));
        ctx.emit(self.id, Event::OfferMade { offer, entry, session, seats, deadline_ms });
    }

    /// Closes an open offer as `to` (declined, expired or withdrawn): the entry takes
    /// `entry_to` (declined, expired or left), the seats are released (to the pool while others
    /// wait). The caller promotes afterwards.
    pub(crate) fn close_offer(
        &mut self,
        ctx: &mut Ctx<'_>,
        offer: OfferId,
        to: OfferState,
        entry_to: WaitlistEntryStatus,
        reason: Reason,
    ) {
        assert!(
            matches!(to, OfferState::Declined | OfferState::Expired | OfferState::Withdrawn),
            "an offer closes {to:?}"
        );
        let entry_to = match entry_to {
            WaitlistEntryStatus::Declined => WaitlistEntryState::Declined { offer },
            WaitlistEntryStatus::Expired => WaitlistEntryState::Expired { offer },
            WaitlistEntryStatus::Left => WaitlistEntryState::Left { offer: Some(offer) },
            other => panic!("an offered entry cannot become {other:?}"),
        };
        let offered_before = self.counts.offered;
        let found = self.waitlist.offers.get_mut(&offer).expect("closing a known offer");
        assert_eq!(found.state, OfferState::Open);
        found.state = to;
        let (entry, seats, deadline_ms) = (found.entry, found.seats.clone(), found.deadline_ms);
        assert!(self.waitlist.offer_deadlines.remove(&(deadline_ms, offer)));
        let waiter = self.waitlist.entries.get_mut(&entry).expect("an offer's entry exists");
        assert_eq!(waiter.state, WaitlistEntryState::Offered { offer });
        waiter.state = entry_to;
        let session = waiter.session;
        assert_eq!(self.waitlist.active_by_session.remove(&session), Some(entry));
        let transition =
            self.transition(EntityKind::Offer, offer.0, Some(StateName::Open), to.into(), reason);
        ctx.record(transition);
        let transition = self.transition(
            EntityKind::WaitlistEntry,
            entry.0,
            Some(StateName::Offered),
            entry_to.into(),
            reason,
        );
        ctx.record(transition);
        for seat in &seats {
            assert_eq!(self.seats[*seat as usize], Seat::Offered(offer));
        }
        // Straight to the pool (or free): promotion is the caller's next step.
        let to_pool =
            self.status != crate::state::ShowStatus::Cancelled && !self.waitlist.waiting.is_empty();
        for seat in &seats {
            if to_pool {
                self.set_seat(*seat, Seat::Pooled);
                self.waitlist.pool_seat(*seat, ctx.now);
            } else {
                self.set_seat(*seat, Seat::Free);
            }
        }
        // No seat points at the closed offer, and only its seats left the offered count.
        assert!(seats.iter().all(|seat| self.seats[*seat as usize] != Seat::Offered(offer)));
        assert_eq!(self.counts.offered, offered_before - seats.len() as u32);
    }

    /// Expires an overdue open offer and serves the next waiter.
    pub(crate) fn expire_offer(&mut self, ctx: &mut Ctx<'_>, offer: OfferId) {
        assert!(self.waitlist.offers[&offer].is_overdue(ctx.now), "expiring an offer early");
        let actor = ctx.actor;
        ctx.actor = Actor::System;
        self.close_offer(
            ctx,
            offer,
            OfferState::Expired,
            WaitlistEntryStatus::Expired,
            Reason::DeadlinePassed,
        );
        ctx.actor = actor;
        self.promote(ctx);
    }

    /// Ends a waiting entry as left.
    pub(crate) fn end_waiting_entry(&mut self, ctx: &mut Ctx<'_>, entry: EntryId, reason: Reason) {
        self.waitlist.stop_waiting(entry);
        let waiter = self.waitlist.entries.get_mut(&entry).expect("ending a known entry");
        assert_eq!(waiter.state, WaitlistEntryState::Waiting);
        waiter.state = WaitlistEntryState::Left { offer: None };
        let session = waiter.session;
        assert_eq!(self.waitlist.active_by_session.remove(&session), Some(entry));
        let transition = self.transition(
            EntityKind::WaitlistEntry,
            entry.0,
            Some(StateName::Waiting),
            StateName::Left,
            reason,
        );
        ctx.record(transition);
    }
}
