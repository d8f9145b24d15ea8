//! JSON shapes shared by several REST routes: money, `as_of`, the hold, and the state names
//! clients see (snake_case strings mirroring the state machine's enums).
//!
//! Owns the conversion from the state machine's views to these shapes. Never reads state and
//! never decides anything: handlers pass in what the service returned.

use serde::{Deserialize, Serialize};
use statemachine::{
    Actor, BookingState, HoldState, HoldView, OfferState, Reason, Reply, SeatStatus, ShowId,
    ShowStatus, StateName, TicketState, WaitlistEntryState,
};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::rest::ids::format_id;

/// Defines a snake_case JSON enum mirroring a state machine enum variant by variant, with the
/// conversion from it.
macro_rules! mirror {
    ($(#[$doc:meta])* $name:ident from $source:ident {
        $($(#[$variant_doc:meta])* $variant:ident),+ $(,)?
    }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$variant_doc])* $variant),+
        }

        impl From<$source> for $name {
            fn from(value: $source) -> $name {
                match value {
                    $($source::$variant => $name::$variant),+
                }
            }
        }
    };
}

mirror!(
    /// A show's sales status.
    ShowStatusName from ShowStatus {
        /// Created, sales not open.
        Draft,
        /// Holds may be made.
        OnSale,
        /// No new holds; existing ones may still be paid.
        Closed,
        /// Terminal: everything released and refunded.
        Cancelled,
    }
);

mirror!(
    /// A seat as a buyer browsing the map sees it.
    SeatStatusName from SeatStatus {
        /// Can be held.
        Free,
        /// In a live hold.
        Held,
        /// Sold.
        Booked,
        /// Kept for or offered to the waitlist.
        Reserved,
    }
);

mirror!(
    /// A hold's state (by log time: an overdue live hold reads as expired).
    HoldStateName from HoldState {
        /// Owns its seats.
        Held,
        /// Checkout started; the payment is being processed.
        Processing,
        /// Paid: it became a booking.
        Confirmed,
        /// Cancelled by its owner or by show cancellation.
        Cancelled,
        /// Its deadline passed.
        Expired,
    }
);

mirror!(
    /// A booking's state.
    BookingStateName from BookingState {
        /// The seats are the buyer's.
        Confirmed,
        /// Cancelled; refund work was queued.
        Cancelled,
    }
);

mirror!(
    /// An admission ticket's state.
    TicketStateName from TicketState {
        /// In line.
        Waiting,
        /// Holds a grant: may hold seats until the grant deadline.
        Granted,
        /// The grant was used by a hold.
        Consumed,
        /// Left the line.
        Left,
        /// The grant or the waiting limit ran out.
        Expired,
    }
);

mirror!(
    /// A waitlist entry's state.
    EntryStateName from WaitlistEntryState {
        /// In line.
        Waiting,
        /// Has an open offer.
        Offered,
        /// Accepted its offer.
        Accepted,
        /// Declined its offer.
        Declined,
        /// Its offer ran out.
        Expired,
        /// Left the waitlist.
        Left,
    }
);

mirror!(
    /// A waitlist offer's state.
    OfferStateName from OfferState {
        /// May be accepted until its deadline.
        Open,
        /// Accepted: its seats became a hold.
        Accepted,
        /// Declined: passed on.
        Declined,
        /// Its deadline passed.
        Expired,
        /// Closed by show cancellation.
        Withdrawn,
    }
);

mirror!(
    /// A state of any audited entity.
    AuditStateName from StateName {
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
    }
);

mirror!(
    /// Why an audited transition happened.
    ReasonName from Reason {
        /// The owner asked for it.
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
        /// The next in line was served.
        NextInLine,
        /// An offer was accepted and became a hold.
        OfferAccepted,
        /// The admission lane was turned off.
        LaneDisabled,
        /// The waitlist was turned off.
        WaitlistDisabled,
    }
);

/// The log position a read reflects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AsOf {
    /// The group's applied log index.
    pub log_index: u64,
    /// The group's log time (ms since the epoch, leader-stamped, monotonic).
    pub log_time_ms: u64,
}

impl From<statemachine::AsOf> for AsOf {
    fn from(as_of: statemachine::AsOf) -> AsOf {
        AsOf { log_index: as_of.log_index, log_time_ms: as_of.log_time_ms }
    }
}

/// An amount of money.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Money {
    /// Minor units (cents).
    pub amount_minor: u64,
    /// ISO 4217 code, e.g. `EUR`.
    pub currency: String,
}

impl From<statemachine::Money> for Money {
    fn from(money: statemachine::Money) -> Money {
        Money { amount_minor: money.amount_minor, currency: money.currency.to_string() }
    }
}

/// A hold of 1..=10 seats.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Hold {
    /// The hold (`<show_id>-<n>`).
    pub hold_id: String,
    /// Its show.
    pub show_id: u64,
    /// Its seats, sorted.
    pub seats: Vec<u32>,
    /// Its state by log time.
    pub state: HoldStateName,
    /// The quoted total.
    pub price: Money,
    /// The price version quoted.
    pub price_version: u32,
    /// Log time (ms) at which the hold expires: the hold deadline, or while processing the
    /// payment deadline.
    pub deadline_ms: u64,
    /// The payment attempt, once checkout started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payment_id: Option<String>,
    /// The booking, once paid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booking_id: Option<String>,
    /// The waitlist offer it was made from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer_id: Option<String>,
    /// When this view was read.
    pub as_of: AsOf,
}

impl Hold {
    /// The JSON shape of a hold of `show`.
    pub fn from_view(show: ShowId, view: &HoldView) -> Hold {
        let hold = &view.hold;
        Hold {
            hold_id: format_id(show, hold.id.0),
            show_id: show.0,
            seats: hold.seats.to_vec(),
            state: view.state.into(),
            price: hold.price.into(),
            price_version: hold.price_version,
            deadline_ms: hold.deadline_ms(),
            payment_id: hold.payment.map(|payment| format_id(show, payment.0)),
            booking_id: hold.booking.map(|booking| format_id(show, booking.0)),
            offer_id: hold.offer.map(|offer| format_id(show, offer.0)),
            as_of: view.as_of.into(),
        }
    }
}

/// Who caused an audited transition: `session:<32 hex>` (the hash of a session token, never
/// the token), `operator`, `provider` or `system`.
pub fn actor_name(actor: Actor) -> String {
    match actor {
        Actor::Session(session) => format!("session:{:032x}", session.0),
        Actor::Operator => "operator".to_owned(),
        Actor::Provider => "provider".to_owned(),
        Actor::System => "system".to_owned(),
    }
}

/// The error for a reply of the wrong kind (a bug: each command has one kind of reply).
pub fn unexpected(reply: Reply) -> ApiError {
    ApiError::Internal(format!("unexpected reply {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use statemachine::{Currency, HoldId, OfferId, PaymentId, SessionId};

    #[test]
    fn a_hold_serializes_with_external_ids_and_snake_case_states() {
        let view = HoldView {
            hold: statemachine::Hold {
                id: HoldId(7),
                session: SessionId(1),
                seats: [54, 55].as_slice().try_into().unwrap(),
                state: HoldState::Processing,
                created_ms: 1_000,
                hold_deadline_ms: 301_000,
                processing_deadline_ms: Some(421_000),
                price_version: 1,
                price: statemachine::Money { amount_minor: 9_000, currency: Currency(*b"EUR") },
                grant: None,
                offer: Some(OfferId(3)),
                payment: Some(PaymentId(8)),
                payment_attempts: 1,
                booking: None,
            },
            state: HoldState::Processing,
            as_of: statemachine::AsOf { log_index: 12, log_time_ms: 2_000 },
        };
        let value = serde_json::to_value(Hold::from_view(ShowId(41), &view)).unwrap();
        assert_eq!(
            value,
            json!({
                "hold_id": "41-7", "show_id": 41, "seats": [54, 55], "state": "processing",
                "price": {"amount_minor": 9000, "currency": "EUR"}, "price_version": 1,
                "deadline_ms": 421000, "payment_id": "41-8", "offer_id": "41-3",
                "as_of": {"log_index": 12, "log_time_ms": 2000},
            })
        );
    }

    #[test]
    fn state_names_are_snake_case() {
        assert_eq!(serde_json::to_value(ShowStatusName::OnSale).unwrap(), json!("on_sale"));
        assert_eq!(serde_json::to_value(ReasonName::DeadlinePassed).unwrap(), "deadline_passed");
        assert_eq!(actor_name(Actor::Session(SessionId(255))), format!("session:{:032x}", 255));
        assert_eq!(actor_name(Actor::System), "system");
    }
}
