//! Holds: all-or-nothing claims of 1..=10 exact seats for one session, with a deadline.
//!
//! Owns creating, cancelling and ending holds, and the one rule for whether a seat can be claimed.
//! An overdue hold is treated as expired by any command that meets it ("checked in the claim, not
//! by a sweeper") and materialized as expired only by a command that succeeds, or by `Tick`.
//! Never releases seats of a hold that is not live; never lets a claim take part of its seats.

use crate::audit::{EntityKind, Reason, StateName};
use crate::ids::{Actor, HoldId, SeatNo, SeatSet, SessionId, TicketId};
use crate::outbox::Event;
use crate::outcome::{HoldReceipt, Outcome, Rejection, Reply};
use crate::state::{
    Ctx, Hold, HoldPayments, HoldState, HoldStatus, Seat, Show, ShowStatus, TicketState,
};

impl Show {
    /// Whether a hold may take this seat at `now_ms`: it is free, or its hold is overdue and no
    /// waiter has a prior claim on seats released now.
    pub(crate) fn seat_claimable(&self, seat: SeatNo, now_ms: u64) -> bool {
        match self.seats[seat as usize] {
            Seat::Free => true,
            Seat::Held(hold) => {
                self.holds[&hold].is_overdue(now_ms) && self.waitlist.waiting.is_empty()
            }
            Seat::Booked(_) | Seat::Pooled | Seat::Offered(_) => false,
        }
    }

    /// The requested seats that cannot be claimed now (`None` when all can).
    pub(crate) fn unavailable_seats(&self, seats: &SeatSet, now_ms: u64) -> Option<SeatSet> {
        SeatSet::from_ascending(
            seats.iter().copied().filter(|seat| !self.seat_claimable(*seat, now_ms)),
        )
    }

    /// Holds exactly `seats` for `session`, or rejects and changes nothing.
    pub(crate) fn hold(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        seats: &SeatSet,
        price_version: u32,
        grant: Option<TicketId>,
    ) -> Outcome {
        let grant = self.judge_hold(session, seats, price_version, grant, ctx.now)?;

        // Decided: from here on every step succeeds.
        self.expire_overdue_owners(ctx, seats);
        if let Some(grant) = grant {
            self.consume_grant(ctx, grant);
            assert!(matches!(self.lane.tickets[&grant].state, TicketState::Consumed { .. }));
        }
        let receipt = self.create_hold(ctx, session, seats, grant, None);
        assert_eq!(receipt.seats, *seats, "a hold holds exactly the seats asked for");
        Ok(Reply::Held(receipt))
    }

    /// Judges a hold at `now_ms` without changing anything: the rejection `hold` would answer,
    /// or the grant it would consume (`None` while the admission lane is off). The one place
    /// the rules of a claim are checked, in their order, for `hold` and for
    /// [`crate::Group::reject_without_log`].
    pub(crate) fn judge_hold(
        &self,
        session: SessionId,
        seats: &SeatSet,
        price_version: u32,
        grant: Option<TicketId>,
        now_ms: u64,
    ) -> Result<Option<TicketId>, Rejection> {
        self.require_on_sale()?;
        self.require_seats_exist(seats)?;
        if price_version != self.price_version {
            return Err(Rejection::PriceVersionMismatch { current: self.price_version });
        }
        let grant = if self.lane.enabled {
            let grant = grant.ok_or(Rejection::GrantRequired)?;
            self.check_grant(session, grant, now_ms)?;
            Some(grant)
        } else {
            None
        };
        let mut live = self.live_holds_by_session.get(&session).copied().unwrap_or(0);
        if live >= self.policy.holds_per_session_max {
            // The session's overdue holds are expired for this claim, whether or not a tick
            // has materialized that yet (only scanned when the session is at its limit).
            let overdue = self
                .hold_deadlines
                .iter()
                .take_while(|(deadline_ms, _)| *deadline_ms <= now_ms)
                .filter(|(_, hold)| self.holds[hold].session == session)
                .count();
            live -= overdue as u32;
        }
        if live >= self.policy.holds_per_session_max {
            return Err(Rejection::TooManyHolds { max: self.policy.holds_per_session_max });
        }
        if let Some(taken) = self.unavailable_seats(seats, now_ms) {
            return Err(Rejection::SeatUnavailable { seats: taken });
        }
        Ok(grant)
    }

    /// Materializes the expiry of overdue holds that own any of `seats`.
    pub(crate) fn expire_overdue_owners(&mut self, ctx: &mut Ctx<'_>, seats: &SeatSet) {
        for seat in seats {
            if let Seat::Held(owner) = self.seats[*seat as usize] {
                assert!(self.holds[&owner].is_overdue(ctx.now), "claimed seat of a live hold");
                self.expire_hold(ctx, owner);
            }
        }
        // With nobody waiting (judged before), the released seats are free again.
        assert!(seats.iter().all(|seat| self.seats[*seat as usize] == Seat::Free));
    }

    /// Creates a live hold of seats that are free or offered to this session, with the current
    /// quote; returns its receipt.
    pub(crate) fn create_hold(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        seats: &SeatSet,
        grant: Option<TicketId>,
        offer: Option<crate::ids::OfferId>,
    ) -> HoldReceipt {
        let id = HoldId(self.allocate_id());
        let deadline_ms = ctx.now + self.policy.hold_ttl_ms;
        let price = self.quote(seats);
        let held_before = self.counts.held;
        let live_before = self.live_holds_by_session.get(&session).copied().unwrap_or(0);
        for seat in seats {
            let expected = match offer {
                Some(offer) => Seat::Offered(offer),
                None => Seat::Free,
            };
            assert_eq!(self.seats[*seat as usize], expected, "a hold takes only claimable seats");
            self.set_seat(*seat, Seat::Held(id));
        }
        let hold = Hold {
            id,
            session,
            seats: seats.clone(),
            state: HoldState::Held,
            created_ms: ctx.now,
            hold_deadline_ms: deadline_ms,
            price_version: self.price_version,
            price,
            grant,
            offer,
            payments: HoldPayments::new(),
        };
        self.holds.insert(id, hold);
        assert!(self.hold_deadlines.insert((deadline_ms, id)));
        *self.live_holds_by_session.get_or_insert_with(session, || 0) += 1;
        let reason = if offer.is_some() { Reason::OfferAccepted } else { Reason::Requested };
        let transition = self.transition(EntityKind::Hold, id.0, None, StateName::Held, reason);
        ctx.record(transition);
        // The hold owns exactly its seats, and the counts moved by exactly them.
        assert!(seats.iter().all(|seat| self.seats[*seat as usize] == Seat::Held(id)));
        assert_eq!(self.counts.held, held_before + seats.len() as u32);
        assert_eq!(self.live_holds_by_session[&session], live_before + 1);
        HoldReceipt { show: self.id, hold: id, seats: seats.clone(), price, deadline_ms }
    }

    /// Cancels the owner's held hold.
    pub(crate) fn cancel_hold(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        hold: HoldId,
    ) -> Outcome {
        let found = self.holds.get(&hold).ok_or(Rejection::HoldNotFound)?;
        if found.session != session {
            return Err(Rejection::NotOwner);
        }
        match found.effective_state(ctx.now) {
            HoldStatus::Held => {}
            HoldStatus::Processing => return Err(Rejection::PaymentInProgress),
            HoldStatus::Expired => return Err(Rejection::HoldExpired),
            state => return Err(Rejection::HoldNotActive { state }),
        }
        self.end_hold(ctx, hold, HoldState::Cancelled, Reason::Requested);
        assert_eq!(self.holds[&hold].state, HoldState::Cancelled);
        Ok(Reply::HoldCancelled { hold })
    }

    /// Expires a live hold whose deadline passed (the system's doing, whoever's command found it).
    pub(crate) fn expire_hold(&mut self, ctx: &mut Ctx<'_>, hold: HoldId) {
        assert!(self.holds[&hold].is_overdue(ctx.now), "expiring a hold before its deadline");
        let actor = ctx.actor;
        ctx.actor = Actor::System;
        self.end_hold(ctx, hold, HoldState::Expired, Reason::DeadlinePassed);
        ctx.actor = actor;
    }

    /// Ends a live hold: it leaves the deadline index and its seats are released.
    pub(crate) fn end_hold(
        &mut self,
        ctx: &mut Ctx<'_>,
        hold: HoldId,
        to: HoldState,
        reason: Reason,
    ) {
        assert!(matches!(to, HoldState::Cancelled | HoldState::Expired), "a hold ends {to:?}");
        let found = self.holds.get_mut(&hold).expect("ending a known hold");
        let from = found.state;
        assert!(from.is_live(), "ending a hold that is not live");
        let deadline_ms = found.deadline_ms();
        found.state = to;
        let session = found.session;
        let seats = found.seats.clone();
        let held_before = self.counts.held;
        assert!(self.hold_deadlines.remove(&(deadline_ms, hold)));
        self.forget_live_hold(session);
        if to == HoldState::Expired {
            ctx.emit(self.id, Event::HoldExpired { hold, session });
        }
        let transition =
            self.transition(EntityKind::Hold, hold.0, Some(from.into()), to.into(), reason);
        ctx.record(transition);
        for seat in &seats {
            assert_eq!(self.seats[*seat as usize], Seat::Held(hold));
        }
        self.release_seats(ctx, &seats);
        // No seat points at the ended hold, and only its seats left the held count.
        assert!(seats.iter().all(|seat| self.seats[*seat as usize] != Seat::Held(hold)));
        assert_eq!(self.counts.held, held_before - seats.len() as u32);
        assert_eq!(self.holds[&hold].state, to);
    }

    /// Lowers a session's live hold count.
    pub(crate) fn forget_live_hold(&mut self, session: SessionId) {
        let count = self.live_holds_by_session.get_mut(&session).expect("a live hold is counted");
        *count -= 1;
        if *count == 0 {
            self.live_holds_by_session.remove(&session);
        }
    }

    /// Returns seats to sale: to the waitlist's pool while anyone waits (and the show is not
    /// cancelled), else free; then serves the waitlist.
    pub(crate) fn release_seats(&mut self, ctx: &mut Ctx<'_>, seats: &[SeatNo]) {
        let to_pool = self.status != ShowStatus::Cancelled && !self.waitlist.waiting.is_empty();
        let free_before = self.counts.free;
        for seat in seats {
            if to_pool {
                self.set_seat(*seat, Seat::Pooled);
                self.waitlist.pool_seat(*seat, ctx.now);
            } else {
                self.set_seat(*seat, Seat::Free);
            }
        }
        if to_pool {
            self.promote(ctx);
        } else {
            assert_eq!(self.counts.free, free_before + seats.len() as u32);
        }
    }
}
