//! The input of the state machine: log entries and the commands they carry.
//!
//! Owns the command types and their shape checks (`validate`), which need no state. Never decides
//! anything that depends on state: that is the job of the rule modules, in `apply`.

use serde::{Deserialize, Serialize};

use crate::catalog::CatalogCommand;
use crate::delivery::DeliveryCommand;
use crate::ids::{
    BookingId, CapacityEventId, Currency, EntryId, HoldId, IdempotencyKey, OfferId, PaymentId,
    ProviderEventId, SeatNo, SeatSet, SessionId, ShowId, TicketId,
};
use crate::limits::*;
use crate::outcome::Rejection;
use crate::snapshot::Digest;
use crate::state::WaitlistRules;

/// One committed log entry, as the raft layer hands it to `apply`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The log index; entries at or below the last applied index are ignored.
    pub index: u64,
    /// The leader's wall-clock milliseconds when it proposed the entry.
    pub time_ms: u64,
    /// The commands, each of which gets its own outcome.
    pub commands: Vec<Command>,
}

/// A command in a log entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A buyer's request, made under a session and an idempotency key.
    Client(ClientCommand),
    /// An operator's show management.
    Operator(OperatorCommand),
    /// A payment provider's verified outcome for a payment attempt.
    Payment(PaymentOutcome),
    /// Expires whatever is overdue at log time and prunes retention windows.
    Tick,
    /// Trims outbox events up to and including `up_to`, once delivered.
    AckOutbox {
        /// The last delivered event id.
        up_to: u64,
    },
    /// Records that `show` lives in data group `group` (proposed to the metadata group only).
    Place {
        /// The show.
        show: ShowId,
        /// The data group (1 and up).
        group: u64,
    },
    /// The provider confirmed the refund owed on a payment attempt (refund work, from a late
    /// payment or a cancelled booking); a second report is a no-op.
    RefundCompleted {
        /// The show.
        show: ShowId,
        /// The payment attempt refunded.
        payment: PaymentId,
    },
    /// Delivering the outbox to its sinks: a sink added or removed, the dispatcher's report of
    /// what it delivered or gave up on, an operator's replay of dead letters.
    Delivery(DeliveryCommand),
    /// The leader's digest of the group's state right after entry `index` (computed off the
    /// apply path), kept so every replica can compare its own digest at that index.
    AuditDigest {
        /// An entry applied before this one.
        index: u64,
        /// The SHA-256 of the state's snapshot encoding right after it.
        digest: Digest,
    },
    /// A change to the catalog (proposed to the metadata group only).
    Catalog(CatalogCommand),
    /// The group may write the formats and commands of feature level `level` from now on
    /// (proposed once every node of the cluster runs a build that knows it; never lower).
    SetFeatureLevel {
        /// The new level.
        level: u32,
    },
    /// The third step of a move: `show` is placed in data group `to` instead of `from`
    /// (proposed to the metadata group only, once `to` imported the show's frozen state).
    Relocate {
        /// The show.
        show: ShowId,
        /// The group it is placed in now.
        from: u64,
        /// The group it goes to.
        to: u64,
    },
}

/// A buyer's request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCommand {
    /// The show the request is about.
    pub show: ShowId,
    /// The session making it (derived by the node from the bearer token).
    pub session: SessionId,
    /// The client's idempotency key.
    pub key: IdempotencyKey,
    /// What is asked.
    pub request: ClientRequest,
}

/// What a buyer asks for. It is its own idempotency fingerprint: every field has one canonical
/// form (a [`SeatSet`] is sorted), so two requests are the same payload exactly when they are
/// equal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientRequest {
    /// Hold exactly these seats, all or nothing.
    Hold {
        /// 1..=10 distinct seats (a set: the order they were named in is not kept).
        seats: SeatSet,
        /// The price version the buyer was quoted.
        price_version: u32,
        /// The admission grant (a granted ticket), required while the show's lane is on.
        grant: Option<TicketId>,
    },
    /// Cancel one's own held hold.
    CancelHold {
        /// The hold.
        hold: HoldId,
    },
    /// Start paying for one's own held hold.
    Checkout {
        /// The hold.
        hold: HoldId,
    },
    /// Cancel one's own confirmed booking.
    CancelBooking {
        /// The booking.
        booking: BookingId,
    },
    /// Join the show's admission lane.
    JoinQueue,
    /// Leave the admission lane (a granted but unused grant is given back).
    LeaveQueue {
        /// The ticket.
        ticket: TicketId,
    },
    /// Join the waitlist of a sold-out show.
    JoinWaitlist {
        /// Seats wanted together, 1..=10.
        quantity: u8,
        /// Priority band, set by the node from the caller's credential; 0 is served first.
        /// Only priority-band ordering uses it (FIFO and lottery put every entry in band 0).
        band: u8,
    },
    /// Leave the waitlist; an active offer is declined.
    LeaveWaitlist {
        /// The entry.
        entry: EntryId,
    },
    /// Accept an offer: its seats become a hold of this session in the same apply.
    AcceptOffer {
        /// The offer.
        offer: OfferId,
    },
    /// Decline an offer: its seats go to the next waiter.
    DeclineOffer {
        /// The offer.
        offer: OfferId,
    },
}

/// An operator's command about one show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OperatorCommand {
    /// Creates a show (sales are not open yet).
    CreateShow(ShowSpec),
    /// Opens sales.
    OpenSales {
        /// The show.
        show: ShowId,
    },
    /// Closes sales: no new holds; existing holds may still be paid.
    CloseSales {
        /// The show.
        show: ShowId,
    },
    /// Cancels the show: every hold is released, every booking gets refund work, every waiter
    /// is told. Terminal.
    CancelShow {
        /// The show.
        show: ShowId,
    },
    /// Sets new prices; holds must quote the new version from now on.
    SetPrices {
        /// The show.
        show: ShowId,
        /// The new version: exactly one more than the current one.
        version: u32,
        /// One price per seat class, in minor units.
        prices_minor: Vec<u64>,
    },
    /// Turns the admission lane on or off and sets its window.
    ConfigureAdmission {
        /// The show.
        show: ShowId,
        /// Whether holds need a grant.
        enabled: bool,
        /// Outstanding grants at once; 1 is strict FIFO.
        window: u32,
    },
    /// Turns the waitlist on or off and sets its ordering policy version.
    ConfigureWaitlist {
        /// The show.
        show: ShowId,
        /// Whether buyers may join.
        enabled: bool,
        /// The policy version recorded on entries and promotions.
        policy_version: u32,
    },
    /// Releases these free seats to the waitlist, once per event id.
    CapacityReleased {
        /// The show.
        show: ShowId,
        /// The sender's event id.
        event: CapacityEventId,
        /// Distinct free seats.
        seats: Vec<SeatNo>,
    },
    /// Sets the waitlist's serving rules (ordering and offer waves) under a new policy version.
    ConfigureWaitlistPolicy {
        /// The show.
        show: ShowId,
        /// The new version, above the current one (or the current one with its rules: a
        /// duplicate).
        policy_version: u32,
        /// The rules.
        rules: WaitlistRules,
    },
    /// Draws the waitlist's lottery with this seed (recorded in the log, so every replica
    /// and every later audit draws the same).
    DrawLottery {
        /// The show.
        show: ShowId,
        /// The seed.
        seed: u64,
    },
    /// Removes an ended, settled show from the group, keeping a small record of it; its
    /// archive (`Group::archive_export`) holds the rest. Applied only if the archive the state
    /// exports has this digest, so a show is removed only in the state that was archived.
    ArchiveShow {
        /// The show.
        show: ShowId,
        /// The SHA-256 of its archive's bytes.
        digest: Digest,
    },
    /// Removes the show's records that ended before `before_ms` (log time, at most the log
    /// time now) and may leave (`Group::compaction_export`), if the segment they make has this
    /// digest.
    CompactShow {
        /// The show.
        show: ShowId,
        /// Records whose last transition is older than this leave.
        before_ms: u64,
        /// The SHA-256 of the segment's bytes.
        digest: Digest,
    },
    /// Deletion on demand: every record of the show that names `session` (its holds,
    /// bookings, payments, tickets, waitlist entries, offers, audit records, outbox events and
    /// dead letters) names `pseudonym` instead, and its idempotency records (what it sent and
    /// was answered) are removed. The pseudonym is drawn by the node, once per command, so the
    /// replicas agree on it and nothing links it back to the session.
    EraseSession {
        /// The show.
        show: ShowId,
        /// The session erased.
        session: SessionId,
        /// What its records name instead: a fresh random id no session has.
        pseudonym: SessionId,
    },
    /// The first step of moving the show to data group `to`: it stops changing here, and every
    /// command and read about it is refused `show_moving` (`Group::show_transfer` exports it).
    FreezeShow {
        /// The show.
        show: ShowId,
        /// The target group.
        to: u64,
    },
    /// The second step, in the target group: the frozen state of the show arrives from group
    /// `from` (checked by its digest), not serving until activated.
    ImportShow {
        /// The show.
        show: ShowId,
        /// The source group.
        from: u64,
        /// Its transfer bytes, as the source exported them.
        state: Vec<u8>,
        /// Their SHA-256, as the source's freeze recorded it.
        digest: Digest,
    },
    /// The fourth step, in the target group, once the metadata group placed the show there: it
    /// serves.
    ActivateShow {
        /// The show.
        show: ShowId,
    },
    /// The last step, in the source group, once the target serves the show: it leaves, and
    /// everything about it is redirected `show_moved` to `to`.
    DropShow {
        /// The show.
        show: ShowId,
        /// The group it went to.
        to: u64,
    },
}

/// Everything needed to create a show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowSpec {
    /// The show's id, allocated by the metadata group.
    pub show: ShowId,
    /// The currency of every price.
    pub currency: Currency,
    /// One price per seat class, in minor units; index = class.
    pub prices_minor: Vec<u64>,
    /// Consecutive seat ranges from seat 0: each gives a count of seats and their class.
    pub layout: Vec<SeatRange>,
    /// Deadlines and rules; `ShowPolicy::default()` for the defaults.
    pub policy: ShowPolicy,
}

/// A run of consecutive seats of one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeatRange {
    /// Seats in the run.
    pub count: u32,
    /// Their class (an index into the show's prices).
    pub class: u8,
}

/// A show's deadlines and rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShowPolicy {
    /// How long a hold keeps its seats.
    pub hold_ttl_ms: u64,
    /// How long a processing hold keeps its seats while its payment resolves.
    pub payment_grace_ms: u64,
    /// How long an admission grant lives.
    pub grant_ttl_ms: u64,
    /// How long an admission ticket may wait.
    pub ticket_wait_ms: u64,
    /// How long a waitlist offer lives.
    pub offer_ttl_ms: u64,
    /// How long idempotency records and capacity event ids are kept.
    pub idempotency_retention_ms: u64,
    /// Live holds one session may have in this show.
    pub holds_per_session_max: u32,
    /// Whether buyers may cancel confirmed bookings.
    pub booking_cancel_allowed: bool,
}

impl Default for ShowPolicy {
    fn default() -> Self {
        ShowPolicy {
            hold_ttl_ms: HOLD_TTL_MS_DEFAULT,
            payment_grace_ms: PAYMENT_GRACE_MS_DEFAULT,
            grant_ttl_ms: GRANT_TTL_MS_DEFAULT,
            ticket_wait_ms: TICKET_WAIT_MS_DEFAULT,
            offer_ttl_ms: OFFER_TTL_MS_DEFAULT,
            idempotency_retention_ms: IDEMPOTENCY_RETENTION_MS_DEFAULT,
            holds_per_session_max: 4,
            booking_cancel_allowed: true,
        }
    }
}

/// A verified outcome from the payment provider.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentOutcome {
    /// The show.
    pub show: ShowId,
    /// The payment attempt.
    pub payment: PaymentId,
    /// The provider's event id; a second event with the same id is a no-op.
    pub event: ProviderEventId,
    /// What the provider said.
    pub result: PaymentResult,
}

/// What the provider said about a payment attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PaymentResult {
    /// The money was taken.
    Succeeded {
        /// Minor units charged.
        amount_minor: u64,
        /// The currency charged.
        currency: Currency,
    },
    /// The charge was refused.
    Declined,
    /// The provider could not say (timeout): the attempt stays processing until reconciled.
    Unknown,
}

impl Command {
    /// The show a command is about, if any (`Tick`, `AckOutbox` and delivery are group-wide).
    pub fn show(&self) -> Option<ShowId> {
        match self {
            Command::Client(command) => Some(command.show),
            Command::Operator(command) => Some(command.show()),
            Command::Payment(outcome) => Some(outcome.show),
            Command::Place { show, .. }
            | Command::RefundCompleted { show, .. }
            | Command::Relocate { show, .. } => Some(*show),
            Command::Tick
            | Command::AckOutbox { .. }
            | Command::Delivery(_)
            | Command::AuditDigest { .. }
            | Command::SetFeatureLevel { .. }
            | Command::Catalog(_) => None,
        }
    }
}

impl OperatorCommand {
    /// The show this command is about.
    pub fn show(&self) -> ShowId {
        match self {
            OperatorCommand::CreateShow(spec) => spec.show,
            OperatorCommand::OpenSales { show }
            | OperatorCommand::CloseSales { show }
            | OperatorCommand::CancelShow { show }
            | OperatorCommand::SetPrices { show, .. }
            | OperatorCommand::ConfigureAdmission { show, .. }
            | OperatorCommand::ConfigureWaitlist { show, .. }
            | OperatorCommand::CapacityReleased { show, .. }
            | OperatorCommand::ConfigureWaitlistPolicy { show, .. }
            | OperatorCommand::DrawLottery { show, .. }
            | OperatorCommand::ArchiveShow { show, .. }
            | OperatorCommand::CompactShow { show, .. }
            | OperatorCommand::EraseSession { show, .. }
            | OperatorCommand::FreezeShow { show, .. }
            | OperatorCommand::ImportShow { show, .. }
            | OperatorCommand::ActivateShow { show }
            | OperatorCommand::DropShow { show, .. } => *show,
        }
    }
}

impl ClientRequest {
    /// Checks the shape of the fields whose types allow more than the rules do (a hold's seats
    /// need no check: a [`SeatSet`] cannot be invalid).
    ///
    /// # Errors
    ///
    /// `Rejection::InvalidArgument` naming the first problem.
    pub fn validate(&self) -> Result<(), Rejection> {
        match *self {
            ClientRequest::JoinWaitlist { quantity, band } => {
                if quantity == 0 || usize::from(quantity) > SEATS_PER_HOLD_MAX {
                    return Err(Rejection::invalid("quantity: must be 1..=10"));
                }
                if band >= WAITLIST_BANDS_MAX {
                    return Err(Rejection::invalid("band: must be below 8"));
                }
                Ok(())
            }
            ClientRequest::Hold { .. }
            | ClientRequest::CancelHold { .. }
            | ClientRequest::Checkout { .. }
            | ClientRequest::CancelBooking { .. }
            | ClientRequest::JoinQueue
            | ClientRequest::LeaveQueue { .. }
            | ClientRequest::LeaveWaitlist { .. }
            | ClientRequest::AcceptOffer { .. }
            | ClientRequest::DeclineOffer { .. } => Ok(()),
        }
    }

    /// The request's name, as metrics and reports show it (`hold`, `checkout`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            ClientRequest::Hold { .. } => "hold",
            ClientRequest::CancelHold { .. } => "cancel_hold",
            ClientRequest::Checkout { .. } => "checkout",
            ClientRequest::CancelBooking { .. } => "cancel_booking",
            ClientRequest::JoinQueue => "join_queue",
            ClientRequest::LeaveQueue { .. } => "leave_queue",
            ClientRequest::JoinWaitlist { .. } => "join_waitlist",
            ClientRequest::LeaveWaitlist { .. } => "leave_waitlist",
            ClientRequest::AcceptOffer { .. } => "accept_offer",
            ClientRequest::DeclineOffer { .. } => "decline_offer",
        }
    }
}

impl ShowPolicy {
    /// Checks every deadline and limit is within bounds.
    ///
    /// # Errors
    ///
    /// `Rejection::InvalidArgument` naming the first field out of bounds.
    pub fn validate(&self) -> Result<(), Rejection> {
        let deadlines = [
            ("hold_ttl_ms", self.hold_ttl_ms),
            ("payment_grace_ms", self.payment_grace_ms),
            ("grant_ttl_ms", self.grant_ttl_ms),
            ("ticket_wait_ms", self.ticket_wait_ms),
            ("offer_ttl_ms", self.offer_ttl_ms),
            ("idempotency_retention_ms", self.idempotency_retention_ms),
        ];
        for (name, value) in deadlines {
            if !(DEADLINE_MS_MIN..=DEADLINE_MS_MAX).contains(&value) {
                return Err(Rejection::invalid(format!(
                    "{name}: must be {DEADLINE_MS_MIN}..={DEADLINE_MS_MAX} ms"
                )));
            }
        }
        if self.idempotency_retention_ms < self.hold_ttl_ms + self.payment_grace_ms {
            return Err(Rejection::invalid(
                "idempotency_retention_ms: must cover hold_ttl_ms + payment_grace_ms",
            ));
        }
        if self.holds_per_session_max == 0 || self.holds_per_session_max > HOLDS_PER_SESSION_MAX {
            return Err(Rejection::invalid(format!(
                "holds_per_session_max: must be 1..={HOLDS_PER_SESSION_MAX}"
            )));
        }
        Ok(())
    }
}

impl ShowSpec {
    /// Checks the layout, prices and policy; returns the seat count.
    ///
    /// # Errors
    ///
    /// `Rejection::InvalidArgument` naming the first problem.
    pub fn validate(&self) -> Result<u32, Rejection> {
        if !self.currency.is_valid() {
            return Err(Rejection::invalid("currency: must be three upper-case letters"));
        }
        validate_prices(&self.prices_minor)?;
        if self.layout.is_empty() || self.layout.len() > LAYOUT_RANGES_PER_SHOW_MAX {
            return Err(Rejection::invalid(format!(
                "layout: must have 1..={LAYOUT_RANGES_PER_SHOW_MAX} ranges"
            )));
        }
        let mut seat_count: u32 = 0;
        for range in &self.layout {
            if range.count == 0 {
                return Err(Rejection::invalid("layout: a range has no seats"));
            }
            if usize::from(range.class) >= self.prices_minor.len() {
                return Err(Rejection::invalid("layout: a range names a class without a price"));
            }
            seat_count = seat_count
                .checked_add(range.count)
                .filter(|count| *count <= SEATS_PER_SHOW_MAX)
                .ok_or_else(|| {
                    Rejection::invalid(format!("layout: at most {SEATS_PER_SHOW_MAX} seats"))
                })?;
        }
        self.policy.validate()?;
        Ok(seat_count)
    }
}

/// Checks a price list: 1..=32 classes, each price within bounds.
pub(crate) fn validate_prices(prices_minor: &[u64]) -> Result<(), Rejection> {
    if prices_minor.is_empty() || prices_minor.len() > SEAT_CLASSES_PER_SHOW_MAX {
        return Err(Rejection::invalid(format!(
            "prices_minor: must have 1..={SEAT_CLASSES_PER_SHOW_MAX} classes"
        )));
    }
    if prices_minor.iter().any(|price| *price > SEAT_PRICE_MINOR_MAX) {
        return Err(Rejection::invalid(format!(
            "prices_minor: a price exceeds {SEAT_PRICE_MINOR_MAX}"
        )));
    }
    Ok(())
}
