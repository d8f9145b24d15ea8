//! Checkout and payment outcomes.
//!
//! Owns payment attempts: checkout commits an attempt (with the amount from the hold's quote)
//! before any provider is called, and outcomes come back as commands. Success confirms a booking
//! only if the hold is still processing that attempt, before its deadline, owning every seat;
//! otherwise the money becomes refund work: late money never takes seats back. Never calls a
//! provider; never charges twice for one attempt.

use crate::audit::{EntityKind, Reason, StateName};
use crate::command::{PaymentOutcome, PaymentResult};
use crate::ids::{BookingId, HoldId, Money, PaymentId, SessionId};
use crate::inject::{self, Bug};
use crate::outbox::{Event, RefundReason};
use crate::outcome::{Outcome, PaymentEffect, Rejection, Reply};
use crate::state::{
    Booking, BookingState, Ctx, HoldState, HoldStatus, PaymentAttempt, PaymentState, Seat, Show,
};

impl Show {
    /// Moves the owner's held hold to processing with a new payment attempt; a hold already
    /// processing returns its current attempt (stable across checkout retries).
    pub(crate) fn checkout(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        hold: HoldId,
    ) -> Outcome {
        self.require_not_cancelled()?;
        let found = self.holds.get(&hold).ok_or(Rejection::HoldNotFound)?;
        if found.session != session {
            return Err(Rejection::NotOwner);
        }
        match found.state {
            _ if found.is_overdue(ctx.now) => return Err(Rejection::HoldExpired),
            HoldState::Held => {}
            HoldState::Processing { payment, deadline_ms } => {
                return Ok(Reply::CheckoutStarted {
                    hold,
                    payment,
                    price: found.price,
                    deadline_ms,
                });
            }
            HoldState::Expired => return Err(Rejection::HoldExpired),
            state => return Err(Rejection::HoldNotActive { state: state.status() }),
        }
        // The attempt list holds at most `PAYMENT_ATTEMPTS_PER_HOLD_MAX`.
        if found.payments.is_full() {
            return Err(Rejection::PaymentAttemptsExhausted);
        }

        let payment = PaymentId(self.allocate_id());
        let deadline_ms = ctx.now + self.policy.payment_grace_ms;
        let found = self.holds.get_mut(&hold).expect("checked above");
        let old_deadline_ms = found.deadline_ms();
        found.state = HoldState::Processing { payment, deadline_ms };
        found.payments.push(payment);
        let price = found.price;
        assert!(self.hold_deadlines.remove(&(old_deadline_ms, hold)));
        assert!(self.hold_deadlines.insert((deadline_ms, hold)));
        self.payments.insert(
            payment,
            PaymentAttempt {
                id: payment,
                hold,
                session,
                price,
                state: PaymentState::Pending,
                created_ms: ctx.now,
            },
        );
        let transition = self.transition(
            EntityKind::Hold,
            hold.0,
            Some(StateName::Held),
            StateName::Processing,
            Reason::CheckoutStarted,
        );
        ctx.record(transition);
        let transition = self.transition(
            EntityKind::Payment,
            payment.0,
            None,
            StateName::Pending,
            Reason::CheckoutStarted,
        );
        ctx.record(transition);
        // The hold processes exactly the new attempt, under its grace deadline.
        let found = &self.holds[&hold];
        assert_eq!(found.state, HoldState::Processing { payment, deadline_ms });
        assert_eq!(found.payment(), Some(payment));
        assert!(self.hold_deadlines.contains(&(deadline_ms, hold)));
        Ok(Reply::CheckoutStarted { hold, payment, price, deadline_ms })
    }

    /// Applies a verified provider outcome to its attempt.
    pub(crate) fn apply_payment(&mut self, ctx: &mut Ctx<'_>, outcome: &PaymentOutcome) -> Outcome {
        let attempt = self.payments.get(&outcome.payment).ok_or(Rejection::PaymentNotFound)?;
        let payment = attempt.id;
        if self.provider_events.contains_key(&outcome.event) {
            return Ok(Reply::PaymentRecorded {
                payment,
                effect: PaymentEffect::Duplicate { state: attempt.state.status() },
            });
        }
        if let PaymentResult::Succeeded { amount_minor, currency } = outcome.result {
            let got = Money { amount_minor, currency };
            if got != attempt.price {
                return Err(Rejection::PaymentMismatch { expected: attempt.price, got });
            }
        }
        let duplicate = match outcome.result {
            PaymentResult::Succeeded { .. } => {
                matches!(attempt.state, PaymentState::Succeeded { .. })
            }
            PaymentResult::Declined | PaymentResult::Unknown => attempt.state.is_final(),
        };
        if duplicate {
            return Ok(Reply::PaymentRecorded {
                payment,
                effect: PaymentEffect::Duplicate { state: attempt.state.status() },
            });
        }
        assert!(self.provider_events.insert(outcome.event, payment).is_none());
        let effect = match outcome.result {
            PaymentResult::Succeeded { .. } => self.on_payment_succeeded(ctx, payment),
            PaymentResult::Declined => self.on_payment_declined(ctx, payment),
            PaymentResult::Unknown => {
                self.set_payment_state(ctx, payment, PaymentState::Unknown, Reason::PaymentUnknown);
                PaymentEffect::Unknown
            }
        };
        // The attempt and its hold say what the effect says.
        let attempt = &self.payments[&payment];
        let hold = &self.holds[&attempt.hold];
        match effect {
            PaymentEffect::Confirmed { booking } => {
                assert_eq!(hold.state, HoldState::Confirmed { booking });
                assert_eq!(attempt.state, PaymentState::Succeeded { refund_required: false });
            }
            PaymentEffect::RefundRequired => assert!(attempt.refund_required()),
            PaymentEffect::Declined { hold_state } => {
                assert_eq!(attempt.state, PaymentState::Declined);
                assert_eq!(hold.effective_state(ctx.now), hold_state);
            }
            PaymentEffect::Unknown => assert_eq!(attempt.state, PaymentState::Unknown),
            PaymentEffect::Duplicate { .. } => unreachable!("a duplicate returned above"),
        }
        Ok(Reply::PaymentRecorded { payment, effect })
    }

    /// Records that the provider gave back the money of `payment`, which owes a refund: it
    /// becomes `refunded` and the buyer is told. A second report is a duplicate; a payment that
    /// owes nothing is refused and nothing changes.
    pub(crate) fn complete_refund(&mut self, ctx: &mut Ctx<'_>, payment: PaymentId) -> Outcome {
        let attempt = self.payments.get(&payment).ok_or(Rejection::PaymentNotFound)?;
        match attempt.state {
            PaymentState::Refunded => {
                return Ok(Reply::RefundRecorded { payment, duplicate: true });
            }
            PaymentState::Succeeded { refund_required: true } => {}
            state => {
                return Err(Rejection::invalid(format!(
                    "payment: owes no refund (it is {:?})",
                    state.status()
                )));
            }
        }
        let (session, price) = (attempt.session, attempt.price);
        self.set_payment_state(ctx, payment, PaymentState::Refunded, Reason::RefundCompleted);
        ctx.emit(self.id, Event::RefundCompleted { payment, session, price });
        assert_eq!(self.payments[&payment].state, PaymentState::Refunded);
        Ok(Reply::RefundRecorded { payment, duplicate: false })
    }

    fn on_payment_succeeded(&mut self, ctx: &mut Ctx<'_>, payment: PaymentId) -> PaymentEffect {
        let succeeded = PaymentState::Succeeded { refund_required: false };
        self.set_payment_state(ctx, payment, succeeded, Reason::PaymentSucceeded);
        let hold_id = self.payments[&payment].hold;
        let hold = &self.holds[&hold_id];
        let confirmable = hold.is_processing(payment)
            && (!hold.is_overdue(ctx.now) || inject::on(Bug::ConfirmLate))
            && hold.seats.iter().all(|seat| self.seats[*seat as usize] == Seat::Held(hold_id));
        if confirmable {
            let booking = self.confirm(ctx, hold_id, payment);
            return PaymentEffect::Confirmed { booking };
        }
        if self.holds[&hold_id].is_overdue(ctx.now) {
            self.expire_hold(ctx, hold_id);
        }
        let attempt = self.payments.get_mut(&payment).expect("known payment");
        attempt.state = PaymentState::Succeeded { refund_required: true };
        let (session, price) = (attempt.session, attempt.price);
        ctx.emit(
            self.id,
            Event::RefundRequired { payment, session, price, reason: RefundReason::LatePayment },
        );
        let transition = self.transition(
            EntityKind::Payment,
            payment.0,
            Some(StateName::Succeeded),
            StateName::Succeeded,
            Reason::LatePayment,
        );
        ctx.record(transition);
        PaymentEffect::RefundRequired
    }

    fn on_payment_declined(&mut self, ctx: &mut Ctx<'_>, payment: PaymentId) -> PaymentEffect {
        self.set_payment_state(ctx, payment, PaymentState::Declined, Reason::PaymentDeclined);
        let hold_id = self.payments[&payment].hold;
        let hold = &self.holds[&hold_id];
        if !hold.is_processing(payment) {
            return PaymentEffect::Declined { hold_state: hold.effective_state(ctx.now) };
        }
        if hold.is_overdue(ctx.now) {
            self.expire_hold(ctx, hold_id);
            return PaymentEffect::Declined { hold_state: HoldStatus::Expired };
        }
        if hold.hold_deadline_ms <= ctx.now {
            self.end_hold(ctx, hold_id, HoldState::Expired, Reason::PaymentDeclined);
            return PaymentEffect::Declined { hold_state: HoldStatus::Expired };
        }
        // Time remains on the original hold: it is held again, with its original deadline.
        let hold = self.holds.get_mut(&hold_id).expect("known hold");
        let processing_deadline_ms = hold.deadline_ms();
        hold.state = HoldState::Held;
        let hold_deadline_ms = hold.hold_deadline_ms;
        assert!(self.hold_deadlines.remove(&(processing_deadline_ms, hold_id)));
        assert!(self.hold_deadlines.insert((hold_deadline_ms, hold_id)));
        let transition = self.transition(
            EntityKind::Hold,
            hold_id.0,
            Some(StateName::Processing),
            StateName::Held,
            Reason::PaymentDeclined,
        );
        ctx.record(transition);
        PaymentEffect::Declined { hold_state: HoldStatus::Held }
    }

    fn set_payment_state(
        &mut self,
        ctx: &mut Ctx<'_>,
        payment: PaymentId,
        to: PaymentState,
        reason: Reason,
    ) {
        let attempt = self.payments.get_mut(&payment).expect("known payment");
        let from = attempt.state;
        attempt.state = to;
        let transition =
            self.transition(EntityKind::Payment, payment.0, Some(from.into()), to.into(), reason);
        ctx.record(transition);
    }

    /// Turns a processing hold that owns all its seats into a booking.
    fn confirm(&mut self, ctx: &mut Ctx<'_>, hold_id: HoldId, payment: PaymentId) -> BookingId {
        let booking = BookingId(self.allocate_id());
        let (held_before, booked_before) = (self.counts.held, self.counts.booked);
        let hold = self.holds.get_mut(&hold_id).expect("known hold");
        assert!(hold.is_processing(payment), "confirming a hold not processing {payment}");
        let deadline_ms = hold.deadline_ms();
        hold.state = HoldState::Confirmed { booking };
        let (session, seats, price) = (hold.session, hold.seats.clone(), hold.price);
        assert!(self.hold_deadlines.remove(&(deadline_ms, hold_id)));
        self.forget_live_hold(session);
        for seat in &seats {
            assert_eq!(self.seats[*seat as usize], Seat::Held(hold_id));
            self.set_seat(*seat, Seat::Booked(booking));
        }
        let seat_count = seats.len() as u32;
        assert_eq!(
            (self.counts.held, self.counts.booked),
            (held_before - seat_count, booked_before + seat_count)
        );
        self.bookings.insert(
            booking,
            Booking {
                id: booking,
                hold: hold_id,
                session,
                seats: seats.clone(),
                payment,
                price,
                state: BookingState::Confirmed,
                created_ms: ctx.now,
            },
        );
        ctx.emit(self.id, Event::BookingConfirmed { booking, hold: hold_id, session, seats });
        let transition = self.transition(
            EntityKind::Hold,
            hold_id.0,
            Some(StateName::Processing),
            StateName::Confirmed,
            Reason::PaymentSucceeded,
        );
        ctx.record(transition);
        let transition = self.transition(
            EntityKind::Booking,
            booking.0,
            None,
            StateName::Confirmed,
            Reason::PaymentSucceeded,
        );
        ctx.record(transition);
        booking
    }

    /// Ends a confirmed booking: its seats return and its payment becomes refund work.
    pub(crate) fn end_booking(
        &mut self,
        ctx: &mut Ctx<'_>,
        booking: BookingId,
        refund: RefundReason,
        reason: Reason,
    ) {
        let booked_before = self.counts.booked;
        let found = self.bookings.get_mut(&booking).expect("known booking");
        assert_eq!(found.state, BookingState::Confirmed);
        found.state = BookingState::Cancelled;
        let (payment, session, price, seats) =
            (found.payment, found.session, found.price, found.seats.clone());
        let attempt = self.payments.get_mut(&payment).expect("a booking's payment exists");
        assert_eq!(attempt.state, PaymentState::Succeeded { refund_required: false });
        attempt.state = PaymentState::Succeeded { refund_required: true };
        ctx.emit(self.id, Event::RefundRequired { payment, session, price, reason: refund });
        let transition = self.transition(
            EntityKind::Booking,
            booking.0,
            Some(StateName::Confirmed),
            StateName::Cancelled,
            reason,
        );
        ctx.record(transition);
        for seat in &seats {
            assert_eq!(self.seats[*seat as usize], Seat::Booked(booking));
        }
        self.release_seats(ctx, &seats);
        // No seat points at the ended booking, and only its seats left the booked count.
        assert!(seats.iter().all(|seat| self.seats[*seat as usize] != Seat::Booked(booking)));
        assert_eq!(self.counts.booked, booked_before - seats.len() as u32);
        assert!(self.payments[&payment].refund_required());
    }
}
