//! The replicated state of one group, as plain data.
//!
//! Owns the shapes of shows, seats, holds, bookings, payment attempts, the admission lane and the
//! waitlist, plus the one place that changes a seat (so the seat counts stay true). Never holds
//! rules: those live in `hold.rs`, `payment.rs`, `admission.rs`, `waitlist.rs` and friends.
//! Only ordered maps, so that iteration order can never differ between replicas.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::cow::{CowMap, CowSet, CowVec};

use arrayvec::ArrayVec;
use serde::{Deserialize, Serialize};

use crate::archive::ArchivedShow;
use crate::audit::{Audit, AuditRecord, EntityKind, EntityRef, OrderKey, Reason, StateName};
use crate::catalog::Catalog;
use crate::command::ShowPolicy;
use crate::delivery::Delivery;
use crate::digests::Digests;
use crate::idempotency::IdempotencyRecord;
use crate::ids::{
    Actor, BookingId, CapacityEventId, Currency, EntryId, HoldId, IdempotencyKey, Money, OfferId,
    PaymentId, ProviderEventId, SeatNo, SeatSet, SessionId, ShowId, TicketId,
};
use crate::limits::PAYMENT_ATTEMPTS_PER_HOLD_MAX;
use crate::moving::ShowMove;
use crate::outbox::{Event, Outbox};
use crate::placement::Placement;

/// Where a show's sales stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ShowStatus {
    /// Created; sales not yet open.
    Draft,
    /// Holds may be made.
    OnSale,
    /// No new holds; existing holds may still be paid.
    Closed,
    /// Terminal: everything released or refunded.
    Cancelled,
}

/// One seat's allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Seat {
    /// Nobody has it.
    Free,
    /// A live hold (held or processing) has it.
    Held(HoldId),
    /// A confirmed booking has it.
    Booked(BookingId),
    /// Released while buyers wait on the waitlist: kept for them, not yet offered.
    Pooled,
    /// Offered to one waiter.
    Offered(OfferId),
}

/// How many seats are in each allocation state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeatCounts {
    /// Free seats.
    pub free: u32,
    /// Seats of live holds.
    pub held: u32,
    /// Seats of bookings.
    pub booked: u32,
    /// Seats kept for the waitlist.
    pub pooled: u32,
    /// Seats under offer.
    pub offered: u32,
}

/// A hold's state, carrying what only that state has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HoldState {
    /// Owns its seats until its hold deadline (`Hold::hold_deadline_ms`).
    Held,
    /// Checkout started; owns its seats until the payment grace deadline.
    Processing {
        /// The payment attempt in flight (the last of `Hold::payments`).
        payment: PaymentId,
        /// Log time at which the hold expires unless the payment succeeds first.
        deadline_ms: u64,
    },
    /// Became a booking. Terminal.
    Confirmed {
        /// The booking.
        booking: BookingId,
    },
    /// Cancelled by its owner or by show cancellation. Terminal.
    Cancelled,
    /// Its deadline passed, or its payment was declined with no time left. Terminal.
    Expired,
}

/// The name of a [`HoldState`], without its data: what outcomes, read views and wire names
/// carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HoldStatus {
    /// Owns its seats until its deadline.
    Held,
    /// Checkout started; owns its seats until the payment grace deadline.
    Processing,
    /// Became a booking. Terminal.
    Confirmed,
    /// Cancelled by its owner or by show cancellation. Terminal.
    Cancelled,
    /// Its deadline passed, or its payment was declined with no time left. Terminal.
    Expired,
}

impl HoldState {
    /// Its name.
    pub fn status(self) -> HoldStatus {
        match self {
            HoldState::Held => HoldStatus::Held,
            HoldState::Processing { .. } => HoldStatus::Processing,
            HoldState::Confirmed { .. } => HoldStatus::Confirmed,
            HoldState::Cancelled => HoldStatus::Cancelled,
            HoldState::Expired => HoldStatus::Expired,
        }
    }

    /// Whether the hold owns its seats.
    pub fn is_live(self) -> bool {
        self.status().is_live()
    }
}

impl HoldStatus {
    /// Whether a hold in this state owns its seats.
    pub fn is_live(self) -> bool {
        matches!(self, HoldStatus::Held | HoldStatus::Processing)
    }
}

/// The payment attempts of one hold, oldest first.
pub type HoldPayments = ArrayVec<PaymentId, { PAYMENT_ATTEMPTS_PER_HOLD_MAX as usize }>;

/// A hold of 1..=10 seats for one session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    /// Its id.
    pub id: HoldId,
    /// Its owner.
    pub session: SessionId,
    /// Its seats.
    pub seats: SeatSet,
    /// Its state.
    pub state: HoldState,
    /// Log time it was made.
    pub created_ms: u64,
    /// Log time at which it expires while held. Kept through checkout: a declined payment with
    /// time left returns the hold to held with this deadline.
    pub hold_deadline_ms: u64,
    /// The price version quoted.
    pub price_version: u32,
    /// The quoted total (the price snapshot that later price changes cannot alter).
    pub price: Money,
    /// The admission grant it consumed, if any.
    pub grant: Option<TicketId>,
    /// The waitlist offer it came from, if any.
    pub offer: Option<OfferId>,
    /// Every payment attempt checkout made for it, oldest first.
    pub payments: HoldPayments,
}

impl Hold {
    /// The log time at which the live hold stops owning its seats: the payment deadline while
    /// processing, the hold deadline otherwise.
    pub fn deadline_ms(&self) -> u64 {
        match self.state {
            HoldState::Processing { deadline_ms, .. } => deadline_ms,
            _ => self.hold_deadline_ms,
        }
    }

    /// Whether the hold is live and its deadline has passed at `now_ms`.
    pub fn is_overdue(&self, now_ms: u64) -> bool {
        self.state.is_live() && self.deadline_ms() <= now_ms
    }

    /// The state a reader should see at `now_ms`: an overdue live hold reads as expired.
    pub fn effective_state(&self, now_ms: u64) -> HoldStatus {
        if self.is_overdue(now_ms) { HoldStatus::Expired } else { self.state.status() }
    }

    /// Whether the hold is processing `payment` (the attempt in flight).
    pub fn is_processing(&self, payment: PaymentId) -> bool {
        matches!(self.state, HoldState::Processing { payment: in_flight, .. } if in_flight == payment)
    }

    /// The latest payment attempt, once checkout started (the one in flight while processing).
    pub fn payment(&self) -> Option<PaymentId> {
        self.payments.last().copied()
    }

    /// The booking it became, if confirmed.
    pub fn booking(&self) -> Option<BookingId> {
        match self.state {
            HoldState::Confirmed { booking } => Some(booking),
            _ => None,
        }
    }

    /// Payment attempts made so far.
    pub fn payment_attempts(&self) -> u8 {
        self.payments.len() as u8
    }
}

/// A booking's lifecycle. No state has data of its own, so it is its own name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BookingState {
    /// Owns its seats.
    Confirmed,
    /// Cancelled by its owner or by show cancellation; refund work was queued. Terminal.
    Cancelled,
}

/// A confirmed hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Booking {
    /// Its id.
    pub id: BookingId,
    /// The hold it came from.
    pub hold: HoldId,
    /// Its owner.
    pub session: SessionId,
    /// Its seats.
    pub seats: SeatSet,
    /// The payment that paid for it.
    pub payment: PaymentId,
    /// What was paid.
    pub price: Money,
    /// Its state.
    pub state: BookingState,
    /// Log time it was confirmed.
    pub created_ms: u64,
}

/// A payment attempt's state, carrying what only that state has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PaymentState {
    /// Created by checkout; the provider has not answered.
    Pending,
    /// The provider could not say; to be reconciled.
    Unknown,
    /// Money taken.
    Succeeded {
        /// Whether the money bought nothing (a late payment) or its booking was cancelled, so
        /// that it must be returned.
        refund_required: bool,
    },
    /// Refused. Terminal.
    Declined,
    /// Money taken and given back (refund work the provider confirmed). Terminal.
    Refunded,
}

/// The name of a [`PaymentState`], without its data: what outcomes and wire names carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PaymentStatus {
    /// Created by checkout; the provider has not answered.
    Pending,
    /// The provider could not say; to be reconciled.
    Unknown,
    /// Money taken.
    Succeeded,
    /// Refused. Terminal.
    Declined,
    /// Money taken and given back. Terminal.
    Refunded,
}

impl PaymentState {
    /// Its name.
    pub fn status(self) -> PaymentStatus {
        match self {
            PaymentState::Pending => PaymentStatus::Pending,
            PaymentState::Unknown => PaymentStatus::Unknown,
            PaymentState::Succeeded { .. } => PaymentStatus::Succeeded,
            PaymentState::Declined => PaymentStatus::Declined,
            PaymentState::Refunded => PaymentStatus::Refunded,
        }
    }

    /// Whether the provider's answer is final.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            PaymentState::Succeeded { .. } | PaymentState::Declined | PaymentState::Refunded
        )
    }
}

/// One charge against a hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentAttempt {
    /// Its id: the provider's idempotency identity.
    pub id: PaymentId,
    /// The hold it pays for.
    pub hold: HoldId,
    /// The hold's owner.
    pub session: SessionId,
    /// What to charge.
    pub price: Money,
    /// Its state.
    pub state: PaymentState,
    /// Log time it was created.
    pub created_ms: u64,
}

impl PaymentAttempt {
    /// Whether money arrived that bought nothing, or whose booking was cancelled, and must be
    /// returned.
    pub fn refund_required(&self) -> bool {
        matches!(self.state, PaymentState::Succeeded { refund_required: true })
    }
}

/// An admission grant: the right to hold seats until a deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    /// Log index at which the ticket was granted.
    pub index: u64,
    /// Log time at which the grant expires unless a hold consumes it.
    pub deadline_ms: u64,
}

/// An admission ticket's state, carrying what only that state has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TicketState {
    /// In line.
    Waiting,
    /// Holds a live grant.
    Granted {
        /// The grant.
        grant: Grant,
    },
    /// Its grant was used by a hold. Terminal.
    Consumed {
        /// The grant it used.
        grant: Grant,
    },
    /// Left by its owner (or the show was cancelled). Terminal.
    Left {
        /// The grant it gave back, if it had one.
        grant: Option<Grant>,
    },
    /// Its grant or its waiting limit ran out, or the lane was turned off. Terminal.
    Expired {
        /// The grant that ran out, if it had one.
        grant: Option<Grant>,
    },
}

/// The name of a [`TicketState`], without its data: what outcomes, read views and wire names
/// carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TicketStatus {
    /// In line.
    Waiting,
    /// Holds a live grant.
    Granted,
    /// Its grant was used by a hold. Terminal.
    Consumed,
    /// Left by its owner (or the show was cancelled). Terminal.
    Left,
    /// Its grant or its waiting limit ran out, or the lane was turned off. Terminal.
    Expired,
}

impl TicketState {
    /// Its name.
    pub fn status(self) -> TicketStatus {
        match self {
            TicketState::Waiting => TicketStatus::Waiting,
            TicketState::Granted { .. } => TicketStatus::Granted,
            TicketState::Consumed { .. } => TicketStatus::Consumed,
            TicketState::Left { .. } => TicketStatus::Left,
            TicketState::Expired { .. } => TicketStatus::Expired,
        }
    }

    /// The grant the ticket has or had, if it was ever granted.
    pub fn grant(self) -> Option<Grant> {
        match self {
            TicketState::Waiting => None,
            TicketState::Granted { grant } | TicketState::Consumed { grant } => Some(grant),
            TicketState::Left { grant } | TicketState::Expired { grant } => grant,
        }
    }

    /// Whether the ticket is in line or holds a live grant.
    pub fn is_live(self) -> bool {
        matches!(self, TicketState::Waiting | TicketState::Granted { .. })
    }
}

/// A place in a show's admission lane.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ticket {
    /// Its id, which is also its place in line.
    pub id: TicketId,
    /// Its owner.
    pub session: SessionId,
    /// Its state.
    pub state: TicketState,
    /// Log time it joined.
    pub joined_ms: u64,
}

/// A show's admission lane (strict FIFO when the window is 1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lane {
    /// Whether holds need a grant.
    pub enabled: bool,
    /// Outstanding grants allowed at once.
    pub window: u32,
    /// Every ticket, by id (= order).
    pub tickets: CowMap<TicketId, Ticket>,
    /// Waiting tickets, in order.
    pub waiting: CowSet<TicketId>,
    /// Granted tickets by grant deadline.
    pub granted: CowSet<(u64, TicketId)>,
    /// Waiting tickets by waiting-limit deadline.
    pub waiting_deadlines: CowSet<(u64, TicketId)>,
    /// Each session's live (waiting or granted) ticket.
    pub live_by_session: CowMap<SessionId, TicketId>,
}

/// A waitlist entry's state, carrying what only that state has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WaitlistEntryState {
    /// In line.
    Waiting,
    /// Has an open offer.
    Offered {
        /// The offer.
        offer: OfferId,
    },
    /// Accepted its offer. Terminal.
    Accepted {
        /// The offer.
        offer: OfferId,
    },
    /// Declined its offer. Terminal.
    Declined {
        /// The offer.
        offer: OfferId,
    },
    /// Let its offer expire. Terminal.
    Expired {
        /// The offer.
        offer: OfferId,
    },
    /// Left (or the show was cancelled, or the waitlist turned off). Terminal.
    Left {
        /// The offer it had when it left, if any (declined, or withdrawn by cancellation).
        offer: Option<OfferId>,
    },
}

/// The name of a [`WaitlistEntryState`], without its data: what outcomes, read views and wire
/// names carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum WaitlistEntryStatus {
    /// In line.
    Waiting,
    /// Has an open offer.
    Offered,
    /// Accepted its offer. Terminal.
    Accepted,
    /// Declined its offer. Terminal.
    Declined,
    /// Let its offer expire. Terminal.
    Expired,
    /// Left (or the show was cancelled, or the waitlist turned off). Terminal.
    Left,
}

impl WaitlistEntryState {
    /// Its name.
    pub fn status(self) -> WaitlistEntryStatus {
        match self {
            WaitlistEntryState::Waiting => WaitlistEntryStatus::Waiting,
            WaitlistEntryState::Offered { .. } => WaitlistEntryStatus::Offered,
            WaitlistEntryState::Accepted { .. } => WaitlistEntryStatus::Accepted,
            WaitlistEntryState::Declined { .. } => WaitlistEntryStatus::Declined,
            WaitlistEntryState::Expired { .. } => WaitlistEntryStatus::Expired,
            WaitlistEntryState::Left { .. } => WaitlistEntryStatus::Left,
        }
    }

    /// The offer the entry has or had, once promoted.
    pub fn offer(self) -> Option<OfferId> {
        match self {
            WaitlistEntryState::Waiting => None,
            WaitlistEntryState::Offered { offer }
            | WaitlistEntryState::Accepted { offer }
            | WaitlistEntryState::Declined { offer }
            | WaitlistEntryState::Expired { offer } => Some(offer),
            WaitlistEntryState::Left { offer } => offer,
        }
    }

    /// Whether the entry is waiting or offered.
    pub fn is_active(self) -> bool {
        matches!(self, WaitlistEntryState::Waiting | WaitlistEntryState::Offered { .. })
    }
}

/// A session's place on a show's waitlist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitlistEntry {
    /// Its id (the tie-breaker of its order key).
    pub id: EntryId,
    /// Its owner.
    pub session: SessionId,
    /// Seats wanted together.
    pub quantity: u8,
    /// Its order: priority band, join time, sequence.
    pub order: OrderKey,
    /// Log index at which it joined.
    pub joined_index: u64,
    /// The ordering policy version in force when it joined.
    pub policy_version: u32,
    /// Its state.
    pub state: WaitlistEntryState,
}

impl WaitlistEntry {
    /// Its offer, once promoted.
    pub fn offer(&self) -> Option<OfferId> {
        self.state.offer()
    }
}

/// An offer's state, carrying what only that state has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OfferState {
    /// Open until its deadline.
    Open,
    /// Turned into a hold. Terminal.
    Accepted {
        /// The hold it became.
        hold: HoldId,
    },
    /// Declined by its waiter. Terminal.
    Declined,
    /// Its deadline passed. Terminal.
    Expired,
    /// Closed because the show was cancelled. Terminal.
    Withdrawn,
}

/// The name of an [`OfferState`], without its data: what read views and wire names carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OfferStatus {
    /// Open until its deadline.
    Open,
    /// Turned into a hold. Terminal.
    Accepted,
    /// Declined by its waiter. Terminal.
    Declined,
    /// Its deadline passed. Terminal.
    Expired,
    /// Closed because the show was cancelled. Terminal.
    Withdrawn,
}

impl OfferState {
    /// Its name.
    pub fn status(self) -> OfferStatus {
        match self {
            OfferState::Open => OfferStatus::Open,
            OfferState::Accepted { .. } => OfferStatus::Accepted,
            OfferState::Declined => OfferStatus::Declined,
            OfferState::Expired => OfferStatus::Expired,
            OfferState::Withdrawn => OfferStatus::Withdrawn,
        }
    }
}

/// Released seats offered to one waiter until a deadline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// Its id.
    pub id: OfferId,
    /// The entry it was made to.
    pub entry: EntryId,
    /// That entry's owner.
    pub session: SessionId,
    /// The seats offered.
    pub seats: SeatSet,
    /// Its state.
    pub state: OfferState,
    /// Log index at which it was made.
    pub made_index: u64,
    /// Log time at which it expires.
    pub deadline_ms: u64,
    /// How long its seats waited in the pool for it (the longest-kept seat's wait, by log
    /// time): the promotion lag. `None` for an offer made before snapshot format 7.
    pub promotion_lag_ms: Option<u64>,
}

impl Offer {
    /// Whether the offer is open and its deadline has passed at `now_ms`.
    pub fn is_overdue(&self, now_ms: u64) -> bool {
        self.state == OfferState::Open && self.deadline_ms <= now_ms
    }

    /// The hold it became, once accepted.
    pub fn hold(&self) -> Option<HoldId> {
        match self.state {
            OfferState::Accepted { hold } => Some(hold),
            _ => None,
        }
    }
}

/// A show's waitlist: ordered entries, the seat pool kept for them, and their offers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waitlist {
    /// Whether buyers may join.
    pub enabled: bool,
    /// The ordering policy version.
    pub policy_version: u32,
    /// Every entry, by id.
    pub entries: CowMap<EntryId, WaitlistEntry>,
    /// Waiting entries in serving order.
    pub waiting: CowSet<OrderKey>,
    /// Each session's active (waiting or offered) entry.
    pub active_by_session: CowMap<SessionId, EntryId>,
    /// Every offer, by id.
    pub offers: CowMap<OfferId, Offer>,
    /// Open offers by deadline.
    pub offer_deadlines: CowSet<(u64, OfferId)>,
    /// Released seats kept for waiters, lowest first.
    pub pool: BTreeSet<SeatNo>,
    /// Processed capacity events and the log time they may be forgotten.
    pub capacity_events: BTreeMap<CapacityEventId, u64>,
    /// The same, by forget time.
    pub capacity_event_deadlines: BTreeSet<(u64, CapacityEventId)>,
    /// How it serves: its rules, their history, and a lottery's draw.
    pub policy: WaitlistPolicy,
    /// The log time each pooled seat entered the pool (its keys are the pool's seats): how long
    /// released capacity waits for an offer, the promotion lag an operator watches.
    pub pooled_since: BTreeMap<SeatNo, u64>,
}

/// How a waitlist orders its waiters (seed 000, "fairness is a policy").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitlistOrdering {
    /// Earliest join first (every entry is in band 0). The default.
    #[default]
    Fifo,
    /// Priority bands (0 first), FIFO inside each band; a band comes from an operator-signed
    /// claim, never from the buyer's own say.
    Bands,
    /// A lottery among the waiters, drawn by the operator at or after `draw_at_ms` (log time)
    /// with a seed recorded in the log; nobody is served before the draw, and later joiners
    /// are served after every drawn entry, FIFO.
    Lottery {
        /// The earliest log time of the draw.
        draw_at_ms: u64,
    },
}

/// A waitlist's serving rules: its ordering and its offer waves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitlistRules {
    /// The ordering.
    pub ordering: WaitlistOrdering,
    /// Open offers at once (a wave); 0 offers every released seat that serves a waiter at once.
    pub wave_offers_max: u32,
}

/// A lottery's draw, as the log recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LotteryDraw {
    /// The operator's seed: each entry's draw key is derived from it and the entry id.
    pub seed: u64,
    /// The log index of the draw.
    pub index: u64,
    /// The show's next id at the draw: the entries below it that were waiting are in the draw
    /// (ids come from one counter per show, so this orders a join and the draw of one entry).
    pub id_bound: u64,
    /// The log time of the draw.
    pub drawn_ms: u64,
    /// Entries in the draw.
    pub entries: u32,
}

/// The rules a policy version set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyChange {
    /// The rules.
    pub rules: WaitlistRules,
    /// The version that set this ordering (a change of waves keeps it): a lottery's draw is
    /// kept under it.
    pub ordering_since: u32,
}

/// The rules in force at a policy version, and its lottery's draw if drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyInForce {
    /// The rules.
    pub rules: WaitlistRules,
    /// The lottery's draw, once drawn (a lottery ordering only).
    pub draw: Option<LotteryDraw>,
}

/// A waitlist's policy state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitlistPolicy {
    /// Every change of rules, by the policy version it took effect at. A version's rules are
    /// those of the latest change at or before it (the defaults before any), so entries and
    /// promotions, which carry their version, name the rules they followed.
    pub changes: BTreeMap<u32, PolicyChange>,
    /// Each lottery's draw, by the version that set its ordering.
    pub draws: BTreeMap<u32, LotteryDraw>,
    /// Drawn entries still waiting, in serving order: (draw key, entry).
    pub drawn: BTreeSet<(u64, EntryId)>,
}

/// A show: its inventory and everything that competes for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Show {
    /// Its id.
    pub id: ShowId,
    /// Its sales status.
    pub status: ShowStatus,
    /// The currency of its prices.
    pub currency: Currency,
    /// One price per class, minor units.
    pub prices_minor: Vec<u64>,
    /// The price (quote) version.
    pub price_version: u32,
    /// Its deadlines and rules.
    pub policy: ShowPolicy,
    /// Each seat's class.
    pub seat_classes: Vec<u8>,
    /// Each seat's allocation, in shared chunks: the first write after a snapshot build copies
    /// the chunk it lands in, not every seat.
    pub seats: CowVec<Seat>,
    /// Seat counts per allocation state.
    pub counts: SeatCounts,
    /// The next id for any entity of this show.
    pub next_id: u64,
    /// Every hold.
    pub holds: CowMap<HoldId, Hold>,
    /// Live holds by deadline.
    pub hold_deadlines: CowSet<(u64, HoldId)>,
    /// Live holds per session.
    pub live_holds_by_session: CowMap<SessionId, u32>,
    /// Every booking.
    pub bookings: CowMap<BookingId, Booking>,
    /// Every payment attempt.
    pub payments: CowMap<PaymentId, PaymentAttempt>,
    /// Provider events already processed.
    pub provider_events: CowMap<ProviderEventId, PaymentId>,
    /// Stored outcomes by (session, key).
    pub idempotency: CowMap<(SessionId, IdempotencyKey), IdempotencyRecord>,
    /// The same, by forget time.
    pub idempotency_deadlines: CowSet<(u64, SessionId, IdempotencyKey)>,
    /// The admission lane.
    pub lane: Lane,
    /// The waitlist.
    pub waitlist: Waitlist,
}

/// The whole replicated state of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// The last applied log index.
    pub applied_index: u64,
    /// Log time: the maximum leader stamp applied so far.
    pub log_time_ms: u64,
    /// The group's shows, each shared with any snapshot or checkpoint until it is written to
    /// (the encoding is the same as without the `Arc`).
    pub shows: BTreeMap<ShowId, Arc<Show>>,
    /// Events that must leave the cluster.
    pub outbox: Outbox,
    /// Every transition, per entity.
    pub audit: Audit,
    /// Which data group holds each show (kept by the metadata group only).
    pub placement: Placement,
    /// What each outbox sink was given, and its dead letters.
    pub delivery: Delivery,
    /// The leaders' digests of the state at checkpoint indexes.
    pub digests: Digests,
    /// What buyers browse: venues, halls, events, listings (kept by the metadata group only).
    pub catalog: Catalog,
    /// What stays of each archived show.
    pub archived: BTreeMap<ShowId, ArchivedShow>,
    /// Where each show that moved in or out of this group is in its move.
    pub moves: BTreeMap<ShowId, ShowMove>,
    /// What the group may write (`features.rs`): 0 is the previous release's formats.
    pub feature_level: u32,
}

/// The effects context of one command: log position, and the group-wide logs it writes to.
pub(crate) struct Ctx<'a> {
    /// Log time.
    pub now: u64,
    /// Log index.
    pub index: u64,
    /// Who issued the command.
    pub actor: Actor,
    pub audit: &'a mut Audit,
    pub outbox: &'a mut Outbox,
}

/// What one audit call records, beyond its entity and states.
pub(crate) struct Transition {
    pub entity: EntityRef,
    pub from: Option<StateName>,
    pub to: StateName,
    pub reason: Reason,
    /// Overrides the command's actor (e.g. expiry inside a buyer's command is the system's).
    pub actor: Option<Actor>,
    pub order: Option<OrderKey>,
    pub policy_version: u32,
}

impl Ctx<'_> {
    /// Appends an audit record for a transition.
    pub fn record(&mut self, transition: Transition) {
        self.audit.append(
            transition.entity,
            AuditRecord {
                from: transition.from,
                to: transition.to,
                reason: transition.reason,
                actor: transition.actor.unwrap_or(self.actor),
                log_time_ms: self.now,
                log_index: self.index,
                policy_version: transition.policy_version,
                order: transition.order,
            },
        );
    }

    /// Appends an outbox event for a show.
    pub fn emit(&mut self, show: ShowId, event: Event) {
        self.outbox.push(self.index, self.now, show, event);
    }
}

impl Show {
    /// Allocates the next id of this show.
    pub(crate) fn allocate_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Sets one seat's allocation, keeping the counts true.
    pub(crate) fn set_seat(&mut self, seat: SeatNo, to: Seat) {
        let slot = &mut self.seats[seat as usize];
        let from = *slot;
        *slot = to;
        let from_count = counter(&mut self.counts, from);
        *from_count = from_count.checked_sub(1).expect("seat counts are consistent");
        *counter(&mut self.counts, to) += 1;
    }

    /// An audit transition of an entity of this show.
    pub(crate) fn transition(
        &self,
        kind: EntityKind,
        id: u64,
        from: Option<StateName>,
        to: StateName,
        reason: Reason,
    ) -> Transition {
        Transition {
            entity: EntityRef { show: self.id, kind, id },
            from,
            to,
            reason,
            actor: None,
            order: None,
            policy_version: self.waitlist.policy_version,
        }
    }

    /// The seat count.
    pub fn seat_count(&self) -> u32 {
        self.seats.len() as u32
    }
}

fn counter(counts: &mut SeatCounts, seat: Seat) -> &mut u32 {
    match seat {
        Seat::Free => &mut counts.free,
        Seat::Held(_) => &mut counts.held,
        Seat::Booked(_) => &mut counts.booked,
        Seat::Pooled => &mut counts.pooled,
        Seat::Offered(_) => &mut counts.offered,
    }
}
