//! The outbox: effects that must leave the cluster, appended in the same apply as the change.
//!
//! Owns the event shapes and the trimmed queue. A leader-only dispatcher (in `node`) delivers
//! events at least once to every sink and reports what it did (`delivery.rs`), which trims what
//! every sink is done with; without sinks, it proposes `AckOutbox`. Consumers deduplicate by
//! event id. Never sends anything itself.

use serde::{Deserialize, Serialize};

use crate::cow::CowMap;
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

/// The group's undelivered events, oldest first, by id. Chunked (`CowMap`), so that an apply
/// after a snapshot or checkpoint copies only the last chunk, and an acknowledgement drops whole
/// chunks; it encodes as the sequence of events.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outbox {
    next_id: u64,
    #[serde(with = "events_in_order")]
    events: CowMap<u64, OutboxEvent>,
}

/// The events as a sequence, oldest first (the encoding of the `VecDeque` they once were).
mod events_in_order {
    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::OutboxEvent;
    use crate::cow::CowMap;

    pub fn serialize<S: Serializer>(
        events: &CowMap<u64, OutboxEvent>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(events.len()))?;
        for event in events.values() {
            seq.serialize_element(event)?;
        }
        seq.end()
    }

    /// Keyed by each event's own id; `Outbox::check` (run on every decoded snapshot) rejects
    /// ids that are not consecutive, which also covers a repeated id.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<CowMap<u64, OutboxEvent>, D::Error> {
        let events = Vec::<OutboxEvent>::deserialize(deserializer)?;
        let count = events.len();
        let map: CowMap<u64, OutboxEvent> =
            events.into_iter().map(|event| (event.id.0, event)).collect();
        if map.len() != count {
            return Err(serde::de::Error::custom("an outbox event id repeats"));
        }
        Ok(map)
    }
}

impl Outbox {
    /// Every event still held, to be rewritten (a session's erasure).
    pub(crate) fn events_mut(&mut self) -> impl Iterator<Item = &mut OutboxEvent> {
        self.events.values_mut()
    }

    /// Appends an event with the next id.
    pub(crate) fn push(&mut self, log_index: u64, log_time_ms: u64, show: ShowId, event: Event) {
        self.next_id += 1;
        let event = OutboxEvent { id: OutboxId(self.next_id), log_index, log_time_ms, show, event };
        self.events.insert(self.next_id, event);
    }

    /// Drops every event with id `<= up_to`; returns how many.
    pub(crate) fn ack(&mut self, up_to: u64) -> u32 {
        let mut trimmed = 0;
        while self.events.first_key_value().is_some_and(|(&id, _)| id <= up_to) {
            self.events.pop_first();
            trimmed += 1;
        }
        trimmed
    }

    /// Undelivered events, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &OutboxEvent> {
        self.events.values()
    }

    /// The event `id`, if it is still in the outbox.
    pub fn get(&self, id: OutboxId) -> Option<&OutboxEvent> {
        self.events.get(&id.0)
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
        for event in self.events.values() {
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
