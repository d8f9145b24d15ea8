//! Histories: what clients asked of the cluster and what they saw, one event per line.
//!
//! Owns the history format shared by the Jepsen suite (real processes) and the simulator (one
//! process): an [`Event`] is the invocation or the completion of one operation by one client
//! process, at a monotonic time; completions are `ok` (the cluster answered, a business
//! rejection included), `fail` (the operation certainly did not happen) or `info` (unknown: it
//! may have happened, now or at any later time). Never decides whether a history is valid: the
//! checkers do, and never records anything itself (clocks and locks are the recorder's).
//!
//! Calls carry the domain [`Command`] a write becomes in the log (sessions and idempotency keys
//! mapped by the recorder to stable numbers), or a [`Read`]; values are [`Observed`], a compact
//! form of a reply that both the real API's answers and the model's outcomes map onto.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::audit::StateName;
use crate::command::{ClientRequest, Command};
use crate::ids::{
    BookingId, EntryId, HoldId, OfferId, PaymentId, SeatNo, SessionId, ShowId, TicketId,
};
use crate::read::SeatStatus;

/// Whether an event invokes an operation or completes it, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The client sent the request.
    Invoke,
    /// The cluster answered (a business rejection is an answer too).
    Ok,
    /// The operation certainly did not take effect (refused before it could be proposed).
    Fail,
    /// The outcome is unknown (timeout, connection lost): it may take effect at any later time.
    Info,
}

/// A read a client makes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Read {
    /// The show's seat map, read linearizably.
    SeatMap {
        /// The show.
        show: ShowId,
    },
    /// One hold, as its owner reads it.
    Hold {
        /// The show.
        show: ShowId,
        /// The reader.
        session: SessionId,
        /// The hold.
        hold: HoldId,
    },
    /// One booking, as its owner reads it.
    Booking {
        /// The show.
        show: ShowId,
        /// The reader.
        session: SessionId,
        /// The booking.
        booking: BookingId,
    },
    /// One admission ticket, as its owner reads it.
    Ticket {
        /// The show.
        show: ShowId,
        /// The reader.
        session: SessionId,
        /// The ticket.
        ticket: TicketId,
    },
    /// One waitlist entry, as its owner reads it.
    Entry {
        /// The show.
        show: ShowId,
        /// The reader.
        session: SessionId,
        /// The entry.
        entry: EntryId,
    },
    /// One waitlist offer, as its owner reads it.
    Offer {
        /// The show.
        show: ShowId,
        /// The reader.
        session: SessionId,
        /// The offer.
        offer: OfferId,
    },
}

/// What a client asked: a write (the command it becomes in the log) or a read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Call {
    /// A mutation.
    Write(Command),
    /// A read.
    Read(Read),
}

impl Call {
    /// The show the call is about, if it is about one (histories are checked per show).
    pub fn show(&self) -> Option<ShowId> {
        match self {
            Call::Write(command) => command.show(),
            Call::Read(read) => Some(read.show()),
        }
    }

    /// The operation's name, as history files and reports show it.
    pub fn function(&self) -> &'static str {
        match self {
            Call::Write(Command::Client(client)) => match client.request {
                ClientRequest::Hold { grant: Some(_), .. } => "hold_with_grant",
                ref request => request.name(),
            },
            Call::Write(Command::Payment(_)) => "payment",
            Call::Write(Command::Operator(_)) => "operator",
            Call::Write(Command::Place { .. }) => "place",
            Call::Write(Command::Tick) => "tick",
            Call::Write(Command::AckOutbox { .. }) => "ack_outbox",
            Call::Write(Command::RefundCompleted { .. }) => "refund_completed",
            Call::Write(Command::Delivery(_)) => "delivery",
            Call::Write(Command::AuditDigest { .. }) => "audit_digest",
            Call::Write(Command::Catalog(_)) => "catalog",
            Call::Write(Command::Relocate { .. }) => "relocate",
            Call::Write(Command::SetFeatureLevel { .. }) => "set_feature_level",
            Call::Read(Read::SeatMap { .. }) => "read_seats",
            Call::Read(Read::Hold { .. }) => "read_hold",
            Call::Read(Read::Booking { .. }) => "read_booking",
            Call::Read(Read::Ticket { .. }) => "read_ticket",
            Call::Read(Read::Entry { .. }) => "read_entry",
            Call::Read(Read::Offer { .. }) => "read_offer",
        }
    }

    /// The session and idempotency key of a client write: calls sharing them are retries.
    pub fn idempotency(&self) -> Option<(SessionId, u128)> {
        match self {
            Call::Write(Command::Client(client)) => Some((client.session, client.key.0)),
            _ => None,
        }
    }
}

impl Read {
    /// The show read.
    pub fn show(&self) -> ShowId {
        match *self {
            Read::SeatMap { show }
            | Read::Hold { show, .. }
            | Read::Booking { show, .. }
            | Read::Ticket { show, .. }
            | Read::Entry { show, .. }
            | Read::Offer { show, .. } => show,
        }
    }
}

/// What a client saw: a compact form of a reply onto which both the API's answers and the
/// model's outcomes map, so that the two can be compared.
///
/// Deadlines, prices and `as_of` labels are left out: the model has no clock (see `model.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Observed {
    /// A business rejection, by its stable code (`seat_unavailable`, `hold_not_found`, ...).
    Rejected {
        /// The code.
        code: String,
    },
    /// A cancel, leave or decline succeeded.
    Done,
    /// A hold exists now: made by a hold, or by accepting an offer.
    Held {
        /// The hold.
        hold: HoldId,
        /// Its seats, sorted.
        seats: Vec<SeatNo>,
    },
    /// Checkout started (or had started).
    CheckoutStarted {
        /// The hold.
        hold: HoldId,
        /// The payment attempt.
        payment: PaymentId,
    },
    /// A payment outcome was recorded.
    PaymentRecorded {
        /// The payment attempt.
        payment: PaymentId,
        /// What it did: `confirmed`, `refund_required`, `declined`, `unknown` or `duplicate`.
        effect: String,
        /// The booking it confirmed, if it confirmed one.
        booking: Option<BookingId>,
    },
    /// The session has an admission ticket. (Whether it was granted at once is left out: the
    /// API answers a join with the ticket as read after the join, a read of its own.)
    Queued {
        /// The ticket.
        ticket: TicketId,
    },
    /// The session is on the waitlist.
    WaitlistJoined {
        /// The entry.
        entry: EntryId,
    },
    /// A show-management command succeeded.
    Managed,
    /// A seat map: each seat's status, in seat order.
    Seats {
        /// The statuses.
        seats: Vec<SeatStatus>,
    },
    /// A read of one hold, booking, ticket, entry or offer: its state, and its seats where it
    /// has any.
    Entity {
        /// Its state.
        state: StateName,
        /// Its seats (empty for tickets and entries).
        seats: Vec<SeatNo>,
        /// A waitlist entry's current offer, if it has one (always `None` for the others).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        offer: Option<OfferId>,
    },
}

impl Observed {
    /// A rejection with `code`.
    pub fn rejected(code: impl Into<String>) -> Observed {
        Observed::Rejected { code: code.into() }
    }

    /// The rejection code, if this is a rejection.
    pub fn rejection(&self) -> Option<&str> {
        match self {
            Observed::Rejected { code } => Some(code),
            _ => None,
        }
    }
}

/// One event of a history: an invocation or a completion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The operation: its invocation and completion share this id.
    pub op: u64,
    /// The client process (one operation at a time per process).
    pub process: u64,
    /// Invoke, ok, fail or info.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// The operation's name (redundant with `call`, for readers of the file).
    pub f: String,
    /// What was asked.
    pub call: Call,
    /// What was seen (completions `ok`, and `fail` when the refusal is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Observed>,
    /// The error, for `fail` and `info` completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Nanoseconds since the test began, from a monotonic clock.
    pub time_ns: u64,
    /// For an `ok` completion whose answer came from a log entry: where in the log and when in
    /// log time it was true, and the deadline it named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<Clock>,
}

/// When an answer was true by the log: the position and the log time it reflects (the API's
/// `as_of` labels), and what it said of time. Kept out of [`Observed`], which the model (it has
/// no clock) must reproduce; the deadline checks read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clock {
    /// The log index the answer reflects: a write's deciding entry, a read's applied index.
    pub log_index: u64,
    /// The group's log time at that index (ms since the Unix epoch).
    pub log_time_ms: u64,
    /// The deadline the answer names: a live hold's (its hold deadline while held, its payment
    /// deadline while processing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// The entity's state by log time, where the value leaves it out (a hold answer's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateName>,
}

/// How an operation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Answered with this value at this time.
    Ok {
        /// When.
        time_ns: u64,
        /// What.
        value: Observed,
        /// When by the log, if the answer said.
        clock: Option<Clock>,
    },
    /// Certainly not applied.
    Fail {
        /// When.
        time_ns: u64,
    },
    /// Unknown: possibly applied at any time after the invocation. An operation whose
    /// completion is missing from the history is unknown too.
    Unknown,
}

/// An operation: an invocation paired with its completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// Its id.
    pub op: u64,
    /// Its client process.
    pub process: u64,
    /// What was asked.
    pub call: Call,
    /// When it was invoked.
    pub invoke_ns: u64,
    /// How it ended.
    pub completion: Completion,
}

impl Operation {
    /// The value seen, if it was answered.
    pub fn value(&self) -> Option<&Observed> {
        match &self.completion {
            Completion::Ok { value, .. } => Some(value),
            _ => None,
        }
    }

    /// When by the log the answer was true, if it was answered and said.
    pub fn clock(&self) -> Option<&Clock> {
        match &self.completion {
            Completion::Ok { clock, .. } => clock.as_ref(),
            _ => None,
        }
    }

    /// When it completed, if it completed definitely (ok or fail).
    pub fn complete_ns(&self) -> Option<u64> {
        match self.completion {
            Completion::Ok { time_ns, .. } | Completion::Fail { time_ns } => Some(time_ns),
            Completion::Unknown => None,
        }
    }

    /// Whether the cluster answered with a success (not a rejection).
    pub fn succeeded(&self) -> bool {
        self.value().is_some_and(|value| value.rejection().is_none())
    }
}

/// A whole history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The events, in the order they were recorded.
    pub events: Vec<Event>,
}

/// Why a history cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// A completion without an invocation, or a second invocation or completion of one op.
    #[error("malformed history: {0}")]
    Malformed(String),
}

impl History {
    /// Pairs invocations with completions, in invocation order.
    ///
    /// # Errors
    ///
    /// `Malformed` if an op is completed without an invocation, or invoked or completed twice.
    pub fn operations(&self) -> Result<Vec<Operation>, HistoryError> {
        let mut operations: Vec<Operation> = Vec::new();
        let mut position: BTreeMap<u64, usize> = BTreeMap::new();
        let mut completed: BTreeMap<u64, ()> = BTreeMap::new();
        for event in &self.events {
            match event.kind {
                EventKind::Invoke => {
                    if position.insert(event.op, operations.len()).is_some() {
                        return Err(HistoryError::Malformed(format!(
                            "op {} invoked twice",
                            event.op
                        )));
                    }
                    operations.push(Operation {
                        op: event.op,
                        process: event.process,
                        call: event.call.clone(),
                        invoke_ns: event.time_ns,
                        completion: Completion::Unknown,
                    });
                }
                kind => {
                    let Some(&index) = position.get(&event.op) else {
                        return Err(HistoryError::Malformed(format!(
                            "op {} completed but never invoked",
                            event.op
                        )));
                    };
                    if completed.insert(event.op, ()).is_some() {
                        return Err(HistoryError::Malformed(format!(
                            "op {} completed twice",
                            event.op
                        )));
                    }
                    operations[index].completion = match (kind, &event.value) {
                        (EventKind::Ok, Some(value)) => Completion::Ok {
                            time_ns: event.time_ns,
                            value: value.clone(),
                            clock: event.clock.clone(),
                        },
                        (EventKind::Ok, None) => {
                            return Err(HistoryError::Malformed(format!(
                                "op {} is ok without a value",
                                event.op
                            )));
                        }
                        (EventKind::Fail, _) => Completion::Fail { time_ns: event.time_ns },
                        _ => Completion::Unknown,
                    };
                }
            }
        }
        Ok(operations)
    }
}
