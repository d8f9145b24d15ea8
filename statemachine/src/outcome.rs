//! The output of the state machine: one outcome per command.
//!
//! Owns the reply and rejection types and their stable machine codes. A rejection is a value, not
//! an error of `apply`: the command that got it changed nothing. Never maps codes to HTTP or gRPC
//! statuses: that table lives in `node`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::catalog::CatalogKind;
use crate::delivery::SinkName;
use crate::ids::{
    BookingId, CapacityEventId, EntryId, HoldId, Money, OfferId, OutboxId, PaymentId, SeatSet,
    ShowId, TicketId,
};
use crate::snapshot::Digest;
use crate::state::{
    HoldStatus, PaymentStatus, ShowStatus, TicketStatus, WaitlistEntryStatus, WaitlistRules,
};

/// What one command produced: a reply, or a rejection that changed nothing.
pub type Outcome = Result<Reply, Rejection>;

/// A command's successful effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// The show exists now, with sales not yet open.
    ShowCreated {
        /// The show.
        show: ShowId,
        /// Its seat count.
        seats: u32,
    },
    /// The show is placed in `group` (now or before, in the same group).
    Placed {
        /// The show.
        show: ShowId,
        /// Its data group.
        group: u64,
    },
    /// The show's sales status is now `status`.
    ShowStatusChanged {
        /// The show.
        show: ShowId,
        /// Its status.
        status: ShowStatus,
        /// Whether the show already had this status: nothing changed.
        duplicate: bool,
    },
    /// The show is cancelled; counts of what was undone.
    ShowCancelled {
        /// The show.
        show: ShowId,
        /// Live holds released.
        holds_released: u32,
        /// Bookings given refund work.
        bookings_refunded: u32,
        /// Waiters (admission tickets and waitlist entries) told.
        waiters_told: u32,
        /// Whether the show was cancelled before: nothing changed (the counts are 0).
        duplicate: bool,
    },
    /// New prices are in force.
    PricesSet {
        /// The show.
        show: ShowId,
        /// The new price version.
        version: u32,
        /// Whether these prices were already in force under this version: nothing changed.
        duplicate: bool,
    },
    /// The admission lane is configured.
    AdmissionConfigured {
        /// The show.
        show: ShowId,
        /// Whether holds need a grant.
        enabled: bool,
        /// Outstanding grants at once.
        window: u32,
    },
    /// The waitlist is configured.
    WaitlistConfigured {
        /// The show.
        show: ShowId,
        /// Whether buyers may join.
        enabled: bool,
        /// The ordering policy version.
        policy_version: u32,
    },
    /// A capacity-released event was processed (or had been, if `duplicate`).
    CapacityReleased {
        /// The event.
        event: CapacityEventId,
        /// Seats that went to the waitlist (0 for a duplicate).
        seats_released: u32,
        /// Whether this event id had been processed before.
        duplicate: bool,
    },
    /// A hold was created.
    Held(HoldReceipt),
    /// A hold was cancelled and its seats released.
    HoldCancelled {
        /// The hold.
        hold: HoldId,
    },
    /// Checkout started (or had started): the payment attempt to charge and its deadline.
    CheckoutStarted {
        /// The hold, now processing.
        hold: HoldId,
        /// The payment attempt, stable across checkout retries.
        payment: PaymentId,
        /// What to charge, from the hold's quote.
        price: Money,
        /// Log time by which the payment must succeed.
        deadline_ms: u64,
    },
    /// A provider outcome was recorded.
    PaymentRecorded {
        /// The payment attempt.
        payment: PaymentId,
        /// What it did.
        effect: PaymentEffect,
    },
    /// A booking was cancelled; its seats returned and refund work was queued.
    BookingCancelled {
        /// The booking.
        booking: BookingId,
    },
    /// The session has an admission ticket.
    Queued {
        /// The ticket (and grant) id.
        ticket: TicketId,
        /// Its state right after joining (granted at once when the window has room).
        state: TicketStatus,
        /// The grant deadline, if granted.
        grant_deadline_ms: Option<u64>,
    },
    /// The session left the admission lane.
    QueueLeft {
        /// The ticket.
        ticket: TicketId,
    },
    /// The session is on the waitlist.
    WaitlistJoined {
        /// The entry.
        entry: EntryId,
        /// Waiting entries ahead of it when it joined.
        ahead: u32,
    },
    /// The session left the waitlist.
    WaitlistLeft {
        /// The entry.
        entry: EntryId,
    },
    /// An offer was accepted (or had been): its seats are a hold of the session.
    OfferAccepted {
        /// The offer.
        offer: OfferId,
        /// The hold made from it.
        hold: HoldReceipt,
    },
    /// An offer was declined and passed on.
    OfferDeclined {
        /// The offer.
        offer: OfferId,
    },
    /// A tick expired or pruned `expired` objects; `more` says whether others are still due.
    Ticked {
        /// Objects expired or pruned.
        expired: u32,
        /// Whether another tick is needed right away.
        more: bool,
    },
    /// Outbox events up to `up_to` were trimmed.
    OutboxAcked {
        /// The last trimmed id.
        up_to: u64,
        /// Events trimmed.
        trimmed: u32,
    },
    /// A refund was recorded (`duplicate`: it had been before, and nothing changed).
    RefundRecorded {
        /// The payment attempt refunded.
        payment: PaymentId,
        /// Whether the refund was already recorded.
        duplicate: bool,
    },
    /// An outbox sink is tracked (now, or before if `duplicate`).
    SinkAdded {
        /// The sink.
        sink: SinkName,
        /// The first event id owed to it.
        owed_from: u64,
        /// Whether it was tracked already: nothing changed.
        duplicate: bool,
    },
    /// An outbox sink is no longer tracked.
    SinkRemoved {
        /// The sink.
        sink: SinkName,
        /// Its dead letters, dropped with it.
        dead_letters_dropped: u32,
        /// Outbox events trimmed because no remaining sink needs them.
        trimmed: u32,
    },
    /// A dispatcher's report was recorded.
    DeliveryRecorded {
        /// The sink.
        sink: SinkName,
        /// Every event up to this id is now delivered to it or given up on.
        done_up_to: u64,
        /// Events newly delivered (reported again: not counted).
        delivered: u32,
        /// Events newly given up on.
        dead_lettered: u32,
        /// Outbox events trimmed because every sink is done with them.
        trimmed: u32,
    },
    /// Dead letters will be delivered again.
    ReplayRequested {
        /// The sink.
        sink: SinkName,
        /// Dead letters marked for replay.
        events: u32,
    },
    /// A leader's state digest was recorded (or was before, if `duplicate`).
    DigestRecorded {
        /// The entry it is the state after.
        index: u64,
        /// Whether a digest of that entry was kept already (or is older than any kept).
        duplicate: bool,
        /// Whether a digest kept before for the index is this one.
        matches: bool,
    },
    /// The waitlist's rules are set (or were, if `duplicate`).
    WaitlistPolicySet {
        /// The show.
        show: ShowId,
        /// The policy version now in force.
        policy_version: u32,
        /// Its rules.
        rules: WaitlistRules,
        /// Whether this version had these rules already.
        duplicate: bool,
    },
    /// The lottery is drawn (or was, with this seed, if `duplicate`).
    LotteryDrawn {
        /// The show.
        show: ShowId,
        /// The seed.
        seed: u64,
        /// Entries in the draw.
        entries: u32,
        /// Whether it was drawn before.
        duplicate: bool,
    },
    /// A catalog record was created, updated or retired (or already was as asked).
    CatalogChanged {
        /// The kind of record.
        kind: CatalogKind,
        /// Its id (a listing's is its show's).
        id: u64,
        /// The catalog's revision afterwards: the log index of its last change.
        revision: u64,
        /// Whether anything changed (false: the record already was as asked).
        changed: bool,
    },
    /// The show left the group for its archive (now or before, with the same archive).
    ShowArchived {
        /// The show.
        show: ShowId,
        /// The SHA-256 of its archive.
        digest: Digest,
        /// The archive's length in bytes.
        bytes: u64,
        /// Whether it was archived before: nothing changed.
        duplicate: bool,
    },
    /// Records of the show that ended before a bound left the state for an archive segment.
    ShowCompacted {
        /// The show.
        show: ShowId,
        /// Records removed (holds, payments, tickets, waitlist entries, offers).
        records: u32,
        /// The segment's length in bytes.
        bytes: u64,
    },
    /// A session's identity left one show's records: they name the pseudonym instead, and its
    /// idempotency records are gone.
    SessionErased {
        /// The show.
        show: ShowId,
        /// Records that named the session (holds, bookings, payments, tickets, waitlist
        /// entries, offers, audit records, outbox events, dead letters) and now name the
        /// pseudonym.
        records: u32,
        /// Idempotency records of the session removed.
        idempotency_records: u32,
    },
    /// The show stopped changing here for a move (now or before, to the same group).
    ShowFrozen {
        /// The show.
        show: ShowId,
        /// The target group.
        to: u64,
        /// The SHA-256 of its transfer bytes.
        digest: Digest,
        /// Their length.
        bytes: u64,
        /// Whether it was frozen before: nothing changed.
        duplicate: bool,
    },
    /// The frozen state of a show arrived here (now or before, the same bytes).
    ShowImported {
        /// The show.
        show: ShowId,
        /// The source group.
        from: u64,
        /// The SHA-256 of the bytes imported.
        digest: Digest,
        /// Whether it was imported before: nothing changed.
        duplicate: bool,
    },
    /// An imported show serves here (now or before).
    ShowActivated {
        /// The show.
        show: ShowId,
        /// The group it came from.
        from: u64,
        /// Whether it served before: nothing changed.
        duplicate: bool,
    },
    /// A frozen show left this group (now or before) for `to`.
    ShowDropped {
        /// The show.
        show: ShowId,
        /// The group it went to.
        to: u64,
        /// Whether it had left before: nothing changed.
        duplicate: bool,
    },
    /// The group's feature level is now `level` (or already was).
    FeatureLevelSet {
        /// The level.
        level: u32,
        /// Whether the group was at that level already: nothing changed.
        duplicate: bool,
    },
    /// The metadata group placed a show in another group (now or before).
    Relocated {
        /// The show.
        show: ShowId,
        /// The group it was placed in.
        from: u64,
        /// The group it is placed in now.
        to: u64,
        /// Whether it was placed there before: nothing changed.
        duplicate: bool,
    },
}

/// What a successful hold gives the buyer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldReceipt {
    /// The show.
    pub show: ShowId,
    /// The hold.
    pub hold: HoldId,
    /// Its seats, sorted.
    pub seats: SeatSet,
    /// The quoted total.
    pub price: Money,
    /// Log time at which the hold expires unless checked out.
    pub deadline_ms: u64,
}

/// What a provider outcome did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PaymentEffect {
    /// The hold became this booking.
    Confirmed {
        /// The booking.
        booking: BookingId,
    },
    /// Money arrived but the seats were no longer the hold's: refund work was queued.
    RefundRequired,
    /// The charge was refused; the hold is held again (time remained) or expired.
    Declined {
        /// The hold's state afterwards.
        hold_state: HoldStatus,
    },
    /// The provider could not say; the attempt stays processing.
    Unknown,
    /// The provider event was already processed, or the attempt already final: nothing changed.
    Duplicate {
        /// The attempt's state.
        state: PaymentStatus,
    },
}

/// Why a command changed nothing. Each variant has a stable machine code (`code`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Rejection {
    /// The command's shape is wrong (bad seat, too many seats, bad limit, ...).
    #[error("invalid argument: {message}")]
    InvalidArgument {
        /// What is wrong.
        message: Cow<'static, str>,
    },
    /// No such show in this group.
    #[error("show not found")]
    ShowNotFound,
    /// A show with this id exists.
    #[error("show already exists")]
    ShowExists,
    /// The group holds as many shows as it may.
    #[error("the group holds its maximum number of shows")]
    GroupFull,
    /// The show's status does not allow this.
    #[error("not allowed while the show is {status:?}")]
    ShowNotOnSale {
        /// The show's status.
        status: ShowStatus,
    },
    /// The show is cancelled.
    #[error("the show is cancelled")]
    ShowCancelled,
    /// A seat is outside the show.
    #[error("seat {seat} does not exist (the show has {seat_count} seats)")]
    SeatOutOfRange {
        /// The first seat out of range.
        seat: u32,
        /// The show's seat count.
        seat_count: u32,
    },
    /// Some requested seats are taken: nothing was held.
    #[error("seats unavailable: {seats:?}")]
    SeatUnavailable {
        /// The requested seats that are taken.
        seats: SeatSet,
    },
    /// The quoted price version is not current.
    #[error("price version {current} is current")]
    PriceVersionMismatch {
        /// The current version.
        current: u32,
    },
    /// The session has as many live holds in this show as it may.
    #[error("at most {max} live holds per session")]
    TooManyHolds {
        /// The limit.
        max: u32,
    },
    /// The lane is on and no grant was presented.
    #[error("an admission grant is required")]
    GrantRequired,
    /// No such ticket or grant.
    #[error("admission ticket not found")]
    TicketNotFound,
    /// The grant's deadline passed.
    #[error("the admission grant expired")]
    GrantExpired,
    /// The ticket is not in a state that allows this.
    #[error("the admission ticket is {state:?}")]
    TicketNotActive {
        /// Its state.
        state: TicketStatus,
    },
    /// The admission lane is off.
    #[error("the admission lane is off")]
    AdmissionDisabled,
    /// The session already has a live ticket.
    #[error("already in the admission lane with ticket {ticket}")]
    AlreadyQueued {
        /// The live ticket.
        ticket: TicketId,
    },
    /// Too many live tickets or waitlist entries.
    #[error("the {what} is full")]
    QueueFull {
        /// Which queue.
        what: Cow<'static, str>,
    },
    /// The entity belongs to another session.
    #[error("owned by another session")]
    NotOwner,
    /// No such hold.
    #[error("hold not found")]
    HoldNotFound,
    /// The hold's deadline passed.
    #[error("the hold expired")]
    HoldExpired,
    /// The hold is in a state that does not allow this.
    #[error("the hold is {state:?}")]
    HoldNotActive {
        /// Its state.
        state: HoldStatus,
    },
    /// A payment attempt is in flight: the hold cannot be cancelled now.
    #[error("a payment is in progress")]
    PaymentInProgress,
    /// The hold used up its payment attempts.
    #[error("no payment attempts left")]
    PaymentAttemptsExhausted,
    /// No such payment attempt.
    #[error("payment attempt not found")]
    PaymentNotFound,
    /// The provider's amount or currency is not the attempt's.
    #[error("payment of {got:?} does not match the expected {expected:?}")]
    PaymentMismatch {
        /// The attempt's price.
        expected: Money,
        /// What the provider reported.
        got: Money,
    },
    /// No such booking.
    #[error("booking not found")]
    BookingNotFound,
    /// The booking cannot be cancelled (policy, or already cancelled).
    #[error("the booking cannot be cancelled")]
    BookingNotCancellable,
    /// The waitlist is off.
    #[error("the waitlist is off")]
    WaitlistDisabled,
    /// Enough seats are free: buy them instead of waiting.
    #[error("{free} seats are free")]
    NotSoldOut {
        /// Free seats.
        free: u32,
    },
    /// The session already has an active entry.
    #[error("already on the waitlist with entry {entry}")]
    AlreadyOnWaitlist {
        /// The active entry.
        entry: EntryId,
    },
    /// No such entry.
    #[error("waitlist entry not found")]
    EntryNotFound,
    /// The entry is not active.
    #[error("the waitlist entry is {state:?}")]
    EntryNotActive {
        /// Its state.
        state: WaitlistEntryStatus,
    },
    /// No such offer.
    #[error("offer not found")]
    OfferNotFound,
    /// The offer's deadline passed.
    #[error("the offer expired")]
    OfferExpired,
    /// The offer is not open (accepted, declined, or withdrawn).
    #[error("the offer is not active")]
    OfferNotActive,
    /// The idempotency key was used with another payload.
    #[error("idempotency key reused with another payload")]
    IdempotencyKeyReused,
    /// The group tracks no outbox sink of this name.
    #[error("sink not found")]
    SinkNotFound,
    /// The sink has no dead letter for this event.
    #[error("no dead letter for event {event}")]
    DeadLetterNotFound {
        /// The event asked for.
        event: OutboxId,
    },
    /// The waitlist's ordering cannot change while buyers wait on it.
    #[error("{waiting} buyers wait on the waitlist: its ordering cannot change now")]
    WaitlistInUse {
        /// Waiting entries.
        waiting: u32,
    },
    /// The waitlist's ordering is not a lottery.
    #[error("the waitlist's ordering is not a lottery")]
    NotALottery,
    /// The lottery's draw time has not come (log time).
    #[error("the lottery may be drawn from {draw_at_ms} ms (log time)")]
    LotteryNotDue {
        /// The earliest log time of the draw.
        draw_at_ms: u64,
    },
    /// The lottery was drawn with another seed.
    #[error("the lottery was drawn already, with seed {seed}")]
    LotteryAlreadyDrawn {
        /// The seed it was drawn with.
        seed: u64,
    },
    /// No such catalog record.
    #[error("{} not found", kind.name())]
    CatalogNotFound {
        /// The kind of record.
        kind: CatalogKind,
    },
    /// A different catalog record with this id exists.
    #[error("another {} exists with this id", kind.name())]
    CatalogExists {
        /// The kind of record.
        kind: CatalogKind,
    },
    /// The catalog record is retired: it can be neither changed nor referenced.
    #[error("the {} is retired", kind.name())]
    CatalogRetired {
        /// The kind of record.
        kind: CatalogKind,
    },
    /// The show was archived: it is no longer in the group (its audit is in its archive).
    #[error("the show is archived")]
    ShowArchived,
    /// The show cannot be archived yet.
    #[error("the show is not settled: {what}")]
    ShowNotSettled {
        /// What remains to settle.
        what: Cow<'static, str>,
    },
    /// The show changed since its archive was exported: export it again.
    #[error("the show changed since its archive was exported")]
    ArchiveChanged,
    /// The show is moving between groups (frozen here, or arrived and not serving yet): retry
    /// in a moment.
    #[error("the show is moving to another group; retry in a moment")]
    ShowMoving,
    /// The command belongs to a feature level the group has not been raised to yet (some node
    /// of the cluster may run a build that cannot read it).
    #[error("feature level {level} is not enabled (the group is at level {current})")]
    FeatureNotEnabled {
        /// The level the command needs.
        level: u32,
        /// The group's level.
        current: u32,
    },
    /// The show moved to another group: ask that group.
    #[error("the show moved to group {group}")]
    ShowMoved {
        /// Where it is now.
        group: u64,
    },
}

impl Rejection {
    /// An `InvalidArgument` with this message.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Rejection {
        Rejection::InvalidArgument { message: message.into() }
    }

    /// The stable machine code, as clients see it.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::InvalidArgument { .. } => "invalid_argument",
            Rejection::ShowNotFound => "show_not_found",
            Rejection::ShowExists => "show_exists",
            Rejection::GroupFull => "group_full",
            Rejection::ShowNotOnSale { .. } => "show_not_on_sale",
            Rejection::ShowCancelled => "show_cancelled",
            Rejection::SeatOutOfRange { .. } => "seat_out_of_range",
            Rejection::SeatUnavailable { .. } => "seat_unavailable",
            Rejection::PriceVersionMismatch { .. } => "price_version_mismatch",
            Rejection::TooManyHolds { .. } => "too_many_holds",
            Rejection::GrantRequired => "grant_required",
            Rejection::TicketNotFound => "ticket_not_found",
            Rejection::GrantExpired => "grant_expired",
            Rejection::TicketNotActive { .. } => "ticket_not_active",
            Rejection::AdmissionDisabled => "admission_disabled",
            Rejection::AlreadyQueued { .. } => "already_queued",
            Rejection::QueueFull { .. } => "queue_full",
            Rejection::NotOwner => "not_owner",
            Rejection::HoldNotFound => "hold_not_found",
            Rejection::HoldExpired => "hold_expired",
            Rejection::HoldNotActive { .. } => "hold_not_active",
            Rejection::PaymentInProgress => "payment_in_progress",
            Rejection::PaymentAttemptsExhausted => "payment_attempts_exhausted",
            Rejection::PaymentNotFound => "payment_not_found",
            Rejection::PaymentMismatch { .. } => "payment_mismatch",
            Rejection::BookingNotFound => "booking_not_found",
            Rejection::BookingNotCancellable => "booking_not_cancellable",
            Rejection::WaitlistDisabled => "waitlist_disabled",
            Rejection::NotSoldOut { .. } => "not_sold_out",
            Rejection::AlreadyOnWaitlist { .. } => "already_on_waitlist",
            Rejection::EntryNotFound => "entry_not_found",
            Rejection::EntryNotActive { .. } => "entry_not_active",
            Rejection::OfferNotFound => "offer_not_found",
            Rejection::OfferExpired => "offer_expired",
            Rejection::OfferNotActive => "offer_not_active",
            Rejection::IdempotencyKeyReused => "idempotency_key_reused",
            Rejection::SinkNotFound => "sink_not_found",
            Rejection::DeadLetterNotFound { .. } => "dead_letter_not_found",
            Rejection::WaitlistInUse { .. } => "waitlist_in_use",
            Rejection::NotALottery => "not_a_lottery",
            Rejection::LotteryNotDue { .. } => "lottery_not_due",
            Rejection::LotteryAlreadyDrawn { .. } => "lottery_already_drawn",
            Rejection::CatalogNotFound { .. } => "catalog_not_found",
            Rejection::CatalogExists { .. } => "catalog_exists",
            Rejection::CatalogRetired { .. } => "catalog_retired",
            Rejection::ShowArchived => "show_archived",
            Rejection::ShowNotSettled { .. } => "show_not_settled",
            Rejection::ArchiveChanged => "archive_changed",
            Rejection::ShowMoving => "show_moving",
            Rejection::ShowMoved { .. } => "show_moved",
            Rejection::FeatureNotEnabled { .. } => "feature_not_enabled",
        }
    }
}
