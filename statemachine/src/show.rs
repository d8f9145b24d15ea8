//! Shows: creation from a seat layout, sales status, prices, and cancellation.
//!
//! Owns the show lifecycle (draft → on sale ⇄ closed → cancelled) and the bulk undo of a
//! cancellation. Never decides about single holds, payments or waiters beyond ending them all.

use std::collections::BTreeSet;

use crate::audit::{EntityKind, Reason, StateName};
use crate::command::{ShowSpec, validate_prices};
use crate::cow::{CowMap, CowSet};
use crate::ids::{HoldId, Money, SeatNo, SessionId};
use crate::outbox::{Event, RefundReason};
use crate::outcome::{Outcome, Rejection, Reply};
use crate::state::{
    BookingState, Ctx, HoldState, Lane, OfferState, Seat, SeatCounts, Show, ShowStatus,
    TicketStatus, Waitlist, WaitlistEntryStatus,
};

impl Show {
    /// Builds a show from its spec: every seat free, sales not yet open.
    pub(crate) fn create(spec: &ShowSpec) -> Result<Show, Rejection> {
        let seat_count = spec.validate()?;
        let mut seat_classes = Vec::with_capacity(seat_count as usize);
        for range in &spec.layout {
            seat_classes.extend(std::iter::repeat_n(range.class, range.count as usize));
        }
        assert_eq!(seat_classes.len(), seat_count as usize);
        Ok(Show {
            id: spec.show,
            status: ShowStatus::Draft,
            currency: spec.currency,
            prices_minor: spec.prices_minor.clone(),
            price_version: 1,
            policy: spec.policy,
            seat_classes,
            seats: vec![Seat::Free; seat_count as usize].into(),
            counts: SeatCounts { free: seat_count, ..SeatCounts::default() },
            next_id: 1,
            holds: CowMap::new(),
            hold_deadlines: CowSet::new(),
            live_holds_by_session: CowMap::new(),
            bookings: CowMap::new(),
            payments: CowMap::new(),
            provider_events: CowMap::new(),
            idempotency: CowMap::new(),
            idempotency_deadlines: CowSet::new(),
            lane: Lane { window: 1, ..Lane::default() },
            waitlist: Waitlist { policy_version: 1, ..Waitlist::default() },
        })
    }

    /// Rejects unless the show is on sale.
    pub(crate) fn require_on_sale(&self) -> Result<(), Rejection> {
        match self.status {
            ShowStatus::OnSale => Ok(()),
            ShowStatus::Cancelled => Err(Rejection::ShowCancelled),
            status => Err(Rejection::ShowNotOnSale { status }),
        }
    }

    /// Rejects if the show is cancelled.
    pub(crate) fn require_not_cancelled(&self) -> Result<(), Rejection> {
        if self.status == ShowStatus::Cancelled { Err(Rejection::ShowCancelled) } else { Ok(()) }
    }

    /// Rejects the first seat outside the show.
    pub(crate) fn require_seats_exist(&self, seats: &[SeatNo]) -> Result<(), Rejection> {
        let seat_count = self.seat_count();
        match seats.iter().find(|seat| **seat >= seat_count) {
            Some(&seat) => Err(Rejection::SeatOutOfRange { seat, seat_count }),
            None => Ok(()),
        }
    }

    /// The current price of a set of seats.
    pub(crate) fn quote(&self, seats: &[SeatNo]) -> Money {
        let amount_minor = seats
            .iter()
            .map(|seat| self.prices_minor[usize::from(self.seat_classes[*seat as usize])])
            .sum();
        Money { amount_minor, currency: self.currency }
    }

    /// Records an operator's change of the show in its audit trail: its status before (`None`
    /// when it was just created) and now, and why.
    pub(crate) fn audit_change(&self, ctx: &mut Ctx<'_>, from: Option<ShowStatus>, reason: Reason) {
        let transition = self.transition(
            EntityKind::Show,
            self.id.0,
            from.map(StateName::from),
            self.status.into(),
            reason,
        );
        ctx.record(transition);
    }

    /// Opens sales (again); opening an open show changes nothing and answers `duplicate`.
    pub(crate) fn open_sales(&mut self, ctx: &mut Ctx<'_>) -> Outcome {
        self.change_status(ctx, ShowStatus::OnSale)
    }

    /// Closes sales; closing a closed show changes nothing and answers `duplicate`.
    pub(crate) fn close_sales(&mut self, ctx: &mut Ctx<'_>) -> Outcome {
        self.change_status(ctx, ShowStatus::Closed)
    }

    fn change_status(&mut self, ctx: &mut Ctx<'_>, to: ShowStatus) -> Outcome {
        self.require_not_cancelled()?;
        assert!(to != ShowStatus::Cancelled && self.status != ShowStatus::Cancelled);
        let from = self.status;
        if from == to {
            return Ok(Reply::ShowStatusChanged { show: self.id, status: to, duplicate: true });
        }
        self.status = to;
        self.audit_change(ctx, Some(from), Reason::Requested);
        Ok(Reply::ShowStatusChanged { show: self.id, status: to, duplicate: false })
    }

    /// Puts new prices in force under the next price version. Asking again for the version in
    /// force with the prices in force (a retry whose answer was lost) answers `duplicate`.
    pub(crate) fn set_prices(
        &mut self,
        ctx: &mut Ctx<'_>,
        version: u32,
        prices_minor: Vec<u64>,
    ) -> Outcome {
        self.require_not_cancelled()?;
        validate_prices(&prices_minor)?;
        if prices_minor.len() != self.prices_minor.len() {
            return Err(Rejection::invalid("prices_minor: one price per existing seat class"));
        }
        if version == self.price_version && prices_minor == self.prices_minor {
            return Ok(Reply::PricesSet { show: self.id, version, duplicate: true });
        }
        if Some(version) != self.price_version.checked_add(1) {
            return Err(Rejection::PriceVersionMismatch { current: self.price_version });
        }
        assert_eq!(prices_minor.len(), self.prices_minor.len());
        self.prices_minor = prices_minor;
        self.price_version = version;
        self.audit_change(ctx, Some(self.status), Reason::PricesSet);
        Ok(Reply::PricesSet { show: self.id, version, duplicate: false })
    }

    /// Cancels the show: releases every live hold, refunds every booking, ends every ticket,
    /// entry and offer, and tells every session involved once.
    pub(crate) fn cancel(&mut self, ctx: &mut Ctx<'_>) -> Reply {
        if self.status == ShowStatus::Cancelled {
            return Reply::ShowCancelled {
                show: self.id,
                holds_released: 0,
                bookings_refunded: 0,
                waiters_told: 0,
                duplicate: true,
            };
        }
        let from = self.status;
        self.status = ShowStatus::Cancelled;
        self.audit_change(ctx, Some(from), Reason::Requested);
        let mut told: BTreeSet<SessionId> = BTreeSet::new();

        let live_holds: Vec<HoldId> = self.hold_deadlines.iter().map(|(_, hold)| *hold).collect();
        for hold in &live_holds {
            told.insert(self.holds[hold].session);
            self.end_hold(ctx, *hold, HoldState::Cancelled, Reason::ShowCancelled);
        }

        let mut bookings_refunded = 0;
        let booking_ids: Vec<_> = self
            .bookings
            .values()
            .filter(|booking| booking.state == BookingState::Confirmed)
            .map(|booking| booking.id)
            .collect();
        for booking in booking_ids {
            told.insert(self.bookings[&booking].session);
            self.end_booking(ctx, booking, RefundReason::ShowCancelled, Reason::ShowCancelled);
            bookings_refunded += 1;
        }

        let mut waiters_told = 0;
        let live_tickets: Vec<_> = self.lane.live_by_session.values().copied().collect();
        for ticket in live_tickets {
            let session = self.lane.tickets[&ticket].session;
            self.end_ticket(ctx, ticket, TicketStatus::Left, Reason::ShowCancelled);
            told.insert(session);
            waiters_told += 1;
        }
        self.lane.enabled = false;

        let open_offers: Vec<_> =
            self.waitlist.offer_deadlines.iter().map(|(_, offer)| *offer).collect();
        for offer in open_offers {
            // A waiter holding an open offer is a waiter too: it is told and counted.
            told.insert(self.waitlist.offers[&offer].session);
            waiters_told += 1;
            self.close_offer(
                ctx,
                offer,
                OfferState::Withdrawn,
                WaitlistEntryStatus::Left,
                Reason::ShowCancelled,
            );
        }
        let waiting: Vec<_> = self.waitlist.active_by_session.values().copied().collect();
        for entry in waiting {
            let session = self.waitlist.entries[&entry].session;
            self.end_waiting_entry(ctx, entry, Reason::ShowCancelled);
            told.insert(session);
            waiters_told += 1;
        }
        self.waitlist.enabled = false;
        // With nobody waiting, promotion returns the pool and the withdrawn offers' seats.
        self.promote(ctx);
        // Everything was undone: every seat free, nothing live, nobody waiting.
        assert_eq!(self.counts.free, self.seat_count(), "a cancelled show has only free seats");
        assert!(self.hold_deadlines.is_empty() && self.live_holds_by_session.is_empty());
        assert!(self.lane.live_by_session.is_empty() && self.lane.granted.is_empty());
        assert!(self.waitlist.active_by_session.is_empty() && self.waitlist.pool.is_empty());
        assert!(self.waitlist.offer_deadlines.is_empty());

        for session in told {
            ctx.emit(self.id, Event::ShowCancelled { session });
        }
        Reply::ShowCancelled {
            show: self.id,
            holds_released: live_holds.len() as u32,
            bookings_refunded,
            waiters_told,
            duplicate: false,
        }
    }
}
