//! The audit log: every transition of a hold, booking, payment, ticket, waitlist entry and offer,
//! and every operator change of a show.
//!
//! Owns the record shapes and the per-entity log. Records are written in the same apply as the
//! transition they describe, so the log can answer "why did someone after me get a spot?" from
//! facts rather than guesses. Never decides a transition; never forgets a record, except every record of an archived show
//! (its archive keeps them).

use serde::{Deserialize, Serialize};

use crate::cow::CowMap;
use crate::ids::{Actor, ShowId};
use crate::state::{
    BookingState, HoldState, HoldStatus, OfferState, OfferStatus, PaymentState, PaymentStatus,
    ShowStatus, TicketState, TicketStatus, WaitlistEntryState, WaitlistEntryStatus,
};

/// The kinds of audited entity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityKind {
    /// A hold.
    Hold,
    /// A booking.
    Booking,
    /// A payment attempt.
    Payment,
    /// An admission ticket (and its grant).
    Ticket,
    /// A waitlist entry.
    WaitlistEntry,
    /// A waitlist offer.
    Offer,
    /// A show itself: its sales status, prices and settings, as the operator changed them
    /// (its id is the show's own).
    Show,
}

/// One audited entity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntityRef {
    /// Its show.
    pub show: ShowId,
    /// Its kind.
    pub kind: EntityKind,
    /// Its id within the show.
    pub id: u64,
}

/// A state of any audited entity, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StateName {
    /// Hold: owns its seats.
    Held,
    /// Hold: checkout started.
    Processing,
    /// Hold or booking: confirmed.
    Confirmed,
    /// Hold or booking: cancelled.
    Cancelled,
    /// Hold, ticket, entry or offer: ran out of time.
    Expired,
    /// Payment: awaiting the provider.
    Pending,
    /// Payment: the provider could not say.
    Unknown,
    /// Payment: money taken.
    Succeeded,
    /// Payment: refused; entry or offer: declined.
    Declined,
    /// Ticket or entry: in line.
    Waiting,
    /// Ticket: holds a grant.
    Granted,
    /// Ticket: grant used.
    Consumed,
    /// Ticket or entry: left.
    Left,
    /// Entry: has an offer.
    Offered,
    /// Offer: open.
    Open,
    /// Entry or offer: accepted.
    Accepted,
    /// Offer: closed by show cancellation.
    Withdrawn,
    /// Payment: money given back.
    Refunded,
    /// Show: created, sales not yet open.
    Draft,
    /// Show: holds may be made.
    OnSale,
    /// Show: no new holds.
    Closed,
}

impl StateName {
    /// Every state name, for parsing.
    pub const ALL: [StateName; 21] = [
        StateName::Held,
        StateName::Processing,
        StateName::Confirmed,
        StateName::Cancelled,
        StateName::Expired,
        StateName::Pending,
        StateName::Unknown,
        StateName::Succeeded,
        StateName::Declined,
        StateName::Waiting,
        StateName::Granted,
        StateName::Consumed,
        StateName::Left,
        StateName::Offered,
        StateName::Open,
        StateName::Accepted,
        StateName::Withdrawn,
        StateName::Refunded,
        StateName::Draft,
        StateName::OnSale,
        StateName::Closed,
    ];

    /// The wire name every API uses for the state (`held`, `processing`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            StateName::Held => "held",
            StateName::Processing => "processing",
            StateName::Confirmed => "confirmed",
            StateName::Cancelled => "cancelled",
            StateName::Expired => "expired",
            StateName::Pending => "pending",
            StateName::Unknown => "unknown",
            StateName::Succeeded => "succeeded",
            StateName::Declined => "declined",
            StateName::Waiting => "waiting",
            StateName::Granted => "granted",
            StateName::Consumed => "consumed",
            StateName::Left => "left",
            StateName::Offered => "offered",
            StateName::Open => "open",
            StateName::Accepted => "accepted",
            StateName::Withdrawn => "withdrawn",
            StateName::Refunded => "refunded",
            StateName::Draft => "draft",
            StateName::OnSale => "on_sale",
            StateName::Closed => "closed",
        }
    }

    /// The state of a wire name, if it names one.
    pub fn from_wire(name: &str) -> Option<StateName> {
        StateName::ALL.into_iter().find(|state| state.as_str() == name)
    }
}

/// Why a transition happened: a stable reason code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Reason {
    /// The owner asked for it (hold, join, leave, cancel, decline).
    Requested,
    /// A deadline passed in log time.
    DeadlinePassed,
    /// A ticket waited longer than the show allows.
    WaitingLimit,
    /// Checkout started a payment attempt.
    CheckoutStarted,
    /// The provider reported success in time.
    PaymentSucceeded,
    /// The provider reported success too late: the money is to be refunded.
    LatePayment,
    /// The provider declined.
    PaymentDeclined,
    /// The provider could not say.
    PaymentUnknown,
    /// The show was cancelled.
    ShowCancelled,
    /// A grant was used by a hold.
    GrantConsumed,
    /// The next in line was served as capacity or the window allowed.
    NextInLine,
    /// An offer was accepted and became a hold.
    OfferAccepted,
    /// The admission lane was turned off.
    LaneDisabled,
    /// The waitlist was turned off.
    WaitlistDisabled,
    /// The provider confirmed a refund.
    RefundCompleted,
    /// The operator set new prices (a show stays in its status).
    PricesSet,
    /// The operator configured the admission lane.
    AdmissionConfigured,
    /// The operator configured the waitlist.
    WaitlistConfigured,
    /// The operator set the waitlist's rules (ordering, waves).
    WaitlistPolicySet,
    /// The waitlist's lottery was drawn.
    LotteryDrawn,
}

/// The order of a waitlist entry: priority band, then join time, then sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OrderKey {
    /// Priority band (0 first).
    pub band: u8,
    /// Log time of joining.
    pub joined_ms: u64,
    /// The entry id: breaks ties, and names the entry.
    pub seq: u64,
}

/// One transition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The state before (none when created).
    pub from: Option<StateName>,
    /// The state after.
    pub to: StateName,
    /// Why.
    pub reason: Reason,
    /// Who.
    pub actor: Actor,
    /// Log time.
    pub log_time_ms: u64,
    /// Log index.
    pub log_index: u64,
    /// The waitlist ordering policy version in force.
    pub policy_version: u32,
    /// The order key of the waitlist entry served, for promotions.
    pub order: Option<OrderKey>,
}

/// Every audit record of a group, per entity, in log order. Chunked (`CowMap`), so that an
/// apply after a snapshot or checkpoint copies only the chunks it appends to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Audit {
    records: CowMap<EntityRef, Vec<AuditRecord>>,
}

impl Audit {
    /// Appends a record for an entity.
    pub(crate) fn append(&mut self, entity: EntityRef, record: AuditRecord) {
        self.records.get_or_insert_with(entity, Vec::new).push(record);
    }

    /// The records of one entity, oldest first.
    pub fn of(&self, entity: EntityRef) -> &[AuditRecord] {
        self.records.get(&entity).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Every entity of one show with records, in order, and its records.
    pub fn of_show(&self, show: ShowId) -> impl Iterator<Item = (&EntityRef, &[AuditRecord])> {
        let first = EntityRef { show, kind: EntityKind::Hold, id: 0 };
        self.records
            .range(first..)
            .take_while(move |(entity, _)| entity.show == show)
            .map(|(entity, records)| (entity, records.as_slice()))
    }

    /// The records of one show's entities, to be rewritten (a session's erasure).
    pub(crate) fn of_show_mut(&mut self, show: ShowId) -> impl Iterator<Item = &mut AuditRecord> {
        let first = EntityRef { show, kind: EntityKind::Hold, id: 0 };
        self.records
            .range_mut(first..)
            .take_while(move |(entity, _)| entity.show == show)
            .flat_map(|(_, records)| records.iter_mut())
    }

    /// Forgets one entity's records (compacted: its records live on in an archive segment).
    pub(crate) fn remove(&mut self, entity: EntityRef) {
        self.records.remove(&entity);
    }

    /// Forgets every record of one show (archived: its records live on in its archive).
    pub(crate) fn remove_show(&mut self, show: ShowId) {
        let first = EntityRef { show, kind: EntityKind::Hold, id: 0 };
        match show.0.checked_add(1) {
            Some(next) => {
                let next = EntityRef { show: ShowId(next), kind: EntityKind::Hold, id: 0 };
                self.records.remove_range(first..next);
            }
            None => self.records.remove_range(first..),
        }
    }

    /// Every entity with records, in order, and its records.
    pub fn iter(&self) -> impl Iterator<Item = (&EntityRef, &[AuditRecord])> {
        self.records.iter().map(|(entity, records)| (entity, records.as_slice()))
    }
}

impl From<ShowStatus> for StateName {
    fn from(status: ShowStatus) -> Self {
        match status {
            ShowStatus::Draft => StateName::Draft,
            ShowStatus::OnSale => StateName::OnSale,
            ShowStatus::Closed => StateName::Closed,
            ShowStatus::Cancelled => StateName::Cancelled,
        }
    }
}

impl From<HoldStatus> for StateName {
    fn from(state: HoldStatus) -> Self {
        match state {
            HoldStatus::Held => StateName::Held,
            HoldStatus::Processing => StateName::Processing,
            HoldStatus::Confirmed => StateName::Confirmed,
            HoldStatus::Cancelled => StateName::Cancelled,
            HoldStatus::Expired => StateName::Expired,
        }
    }
}

impl From<BookingState> for StateName {
    fn from(state: BookingState) -> Self {
        match state {
            BookingState::Confirmed => StateName::Confirmed,
            BookingState::Cancelled => StateName::Cancelled,
        }
    }
}

impl From<PaymentStatus> for StateName {
    fn from(state: PaymentStatus) -> Self {
        match state {
            PaymentStatus::Pending => StateName::Pending,
            PaymentStatus::Unknown => StateName::Unknown,
            PaymentStatus::Succeeded => StateName::Succeeded,
            PaymentStatus::Declined => StateName::Declined,
            PaymentStatus::Refunded => StateName::Refunded,
        }
    }
}

impl From<TicketStatus> for StateName {
    fn from(state: TicketStatus) -> Self {
        match state {
            TicketStatus::Waiting => StateName::Waiting,
            TicketStatus::Granted => StateName::Granted,
            TicketStatus::Consumed => StateName::Consumed,
            TicketStatus::Left => StateName::Left,
            TicketStatus::Expired => StateName::Expired,
        }
    }
}

impl From<WaitlistEntryStatus> for StateName {
    fn from(state: WaitlistEntryStatus) -> Self {
        match state {
            WaitlistEntryStatus::Waiting => StateName::Waiting,
            WaitlistEntryStatus::Offered => StateName::Offered,
            WaitlistEntryStatus::Accepted => StateName::Accepted,
            WaitlistEntryStatus::Declined => StateName::Declined,
            WaitlistEntryStatus::Expired => StateName::Expired,
            WaitlistEntryStatus::Left => StateName::Left,
        }
    }
}

impl From<OfferStatus> for StateName {
    fn from(state: OfferStatus) -> Self {
        match state {
            OfferStatus::Open => StateName::Open,
            OfferStatus::Accepted => StateName::Accepted,
            OfferStatus::Declined => StateName::Declined,
            OfferStatus::Expired => StateName::Expired,
            OfferStatus::Withdrawn => StateName::Withdrawn,
        }
    }
}

/// Names a data-carrying state by its status.
macro_rules! state_name_from_state {
    ($($state:ident),+) => {
        $(
            impl From<$state> for StateName {
                fn from(state: $state) -> Self {
                    state.status().into()
                }
            }
        )+
    };
}

state_name_from_state!(HoldState, PaymentState, TicketState, WaitlistEntryState, OfferState);
