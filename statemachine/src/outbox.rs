//! The outbox: effects that must leave the cluster, appended in the same apply as the change.
//!
//! Owns the event shapes and the trimmed queue. A leader-only dispatcher (in `node`) delivers
//! events at least once to every sink and reports what it did (`delivery.rs`), which trims what
//! every sink is done with; without sinks, it proposes `AckOutbox`. Consumers deduplicate by
//! event id. Never sends anything itself.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::ids::{
    BookingId, EntryId, HoldId, Money, OfferId, OutboxId, PaymentId, SeatSet, SessionId, ShowId,
    TicketId,
};

/// Why money must be returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefundReason {
    /// The payment succeeded after the hold had lost its seats.
    LatePayment,
    /// The buyer cancelled the booking.
    BookingCancelled,
    /// The show was cancelled.
    ShowCancelled,
}

/// Something the outside world must hear about.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A waiter was offered seats.
    OfferMade {
        /// The offer.
        offer: OfferId,
        /// The entry.
        entry: EntryId,
        /// The waiter.
        session: SessionId,
        /// The seats.
        seats: SeatSet,
        /// Log time the offer expires.
        deadline_ms: u64,
    },
    /// A ticket was granted admission.
    GrantIssued {
        /// The ticket.
        ticket: TicketId,
        /// Its owner.
        session: SessionId,
        /// Log time the grant expires.
        deadline_ms: u64,
    },
    /// A hold became a booking.
    BookingConfirmed {
        /// The booking.
        booking: BookingId,
        /// The hold.
        hold: HoldId,
        /// The buyer.
        session: SessionId,
        /// The seats.
        seats: SeatSet,
    },
    /// Money must be returned (refund work, retried with the payment id as its identity).
    RefundRequired {
        /// The payment attempt.
        payment: PaymentId,
        /// The buyer.
        session: SessionId,
        /// The amount.
        price: Money,
        /// Why.
        reason: RefundReason,
    },
    /// A hold ran out of time and released its seats.
    HoldExpired {
        /// The hold.
        hold: HoldId,
        /// Its owner.
        session: SessionId,
    },
    /// The show was cancelled: sent to every holder, booker and waiter.
    ShowCancelled {
        /// The session told.
        session: SessionId,
    },
    /// The provider gave the money of a payment attempt back.
    RefundCompleted {
        /// The payment attempt.
        payment: PaymentId,
        /// The buyer.
        session: SessionId,
        /// The amount.
        price: Money,
    },
}

/// One event with its id and origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxEvent {
    /// Increasing id; consumers deduplicate by it.
    pub id: OutboxId,
    /// The log index that produced it.
    pub log_index: u64,
    /// The log time that produced it.
    pub log_time_ms: u64,
    /// The show.
    pub show: ShowId,
    /// What happened.
    pub event: Event,
}

/// The group's undelivered events, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbox {
    next_id: u64,
    events: VecDeque<OutboxEvent>,
}

impl Outbox {
    /// Every event still held, to be rewritten (a session's erasure).
    pub(crate) fn events_mut(&mut self) -> impl Iterator<Item = &mut OutboxEvent> {
        self.events.iter_mut()
    }

    /// Appends an event with the next id.
    pub(crate) fn push(&mut self, log_index: u64, log_time_ms: u64, show: ShowId, event: Event) {
        self.next_id += 1;
        self.events.push_back(OutboxEvent {
            id: OutboxId(self.next_id),
            log_index,
            log_time_ms,
            show,
            event,
        });
    }

    /// Drops every event with id `<= up_to`; returns how many.
    pub(crate) fn ack(&mut self, up_to: u64) -> u32 {
        let mut trimmed = 0;
        while self.events.front().is_some_and(|event| event.id.0 <= up_to) {
            self.events.pop_front();
            trimmed += 1;
        }
        trimmed
    }

    /// Undelivered events, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &OutboxEvent> {
        self.events.iter()
    }

    /// The event `id`, if it is still in the outbox.
    pub fn get(&self, id: OutboxId) -> Option<&OutboxEvent> {
        // Kept events have consecutive ids: pushed one more each time, trimmed from the front.
        let first = self.events.front()?.id.0;
        let at = usize::try_from(id.0.checked_sub(first)?).ok()?;
        self.events.get(at).filter(|event| event.id == id)
    }

    /// Undelivered event count.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether every event was delivered.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The id the last appended event got (0 before the first).
    pub fn last_id(&self) -> u64 {
        self.next_id
    }

    /// Checks ids are consecutive and end at the counter.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut previous = None;
        for event in &self.events {
            if previous.is_some_and(|previous: u64| event.id.0 != previous + 1)
                || event.id.0 > self.next_id
            {
                return Err(format!("outbox ids out of order at {}", event.id));
            }
            previous = Some(event.id.0);
        }
        if previous.is_some_and(|last| last != self.next_id) {
            return Err(format!("the last outbox event is not {}", self.next_id));
        }
        Ok(())
    }
}
