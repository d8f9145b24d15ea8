//! Bookings: confirmed holds, and their cancellation by the owner.
//!
//! Owns the buyer-facing cancellation rule: allowed while the show's policy allows it and the
//! show is not cancelled; the seats return (to the waitlist first) and the payment becomes refund
//! work. Never creates a booking: only a successful payment does (`payment.rs`).

use crate::audit::Reason;
use crate::ids::{BookingId, SessionId};
use crate::outbox::RefundReason;
use crate::outcome::{Outcome, Rejection, Reply};
use crate::state::{BookingState, Ctx, Show};

impl Show {
    /// Cancels the owner's confirmed booking.
    pub(crate) fn cancel_booking(
        &mut self,
        ctx: &mut Ctx<'_>,
        session: SessionId,
        booking: BookingId,
    ) -> Outcome {
        self.require_not_cancelled()?;
        let found = self.bookings.get(&booking).ok_or(Rejection::BookingNotFound)?;
        if found.session != session {
            return Err(Rejection::NotOwner);
        }
        if !self.policy.booking_cancel_allowed || found.state != BookingState::Confirmed {
            return Err(Rejection::BookingNotCancellable);
        }
        self.end_booking(ctx, booking, RefundReason::BookingCancelled, Reason::Requested);
        assert_eq!(self.bookings[&booking].state, BookingState::Cancelled);
        Ok(Reply::BookingCancelled { booking })
    }
}
