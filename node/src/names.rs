//! The wire names of the state machine's enums: the one table both APIs use, REST as JSON
//! strings and gRPC as the string fields of its replies (`state: "held"`, `status: "on_sale"`).
//!
//! Owns every name: each enum here mirrors a state machine enum variant by variant with the
//! name clients see, serializes as that name (for REST, with its OpenAPI schema) and gives it
//! as [`str`] (for gRPC). Names are snake_case and stable; the state names agree with
//! `statemachine::StateName::as_str`, the names the history checkers read (a test holds them
//! equal). Never reads state and never decides anything.

use serde::{Deserialize, Serialize};
use statemachine::{
    Actor, BookingState, EntityKind, HoldStatus, OfferStatus, PaymentStatus, Reason, SeatStatus,
    ShowStatus, StateName, TicketStatus, WaitlistEntryStatus,
};
use utoipa::ToSchema;

use crate::error::ApiError;

/// Bytes (a digest) as lowercase hex: how both APIs name a digest.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Defines an enum of wire names mirroring a state machine enum variant by variant: its JSON
/// form (serde, OpenAPI) and [`str`] form come from the one literal of each variant.
macro_rules! names {
    ($(#[$doc:meta])* $name:ident from $source:ident {
        $($(#[$variant_doc:meta])* $variant:ident = $wire:literal),+ $(,)?
    }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
        pub enum $name {
            $($(#[$variant_doc])* #[serde(rename = $wire)] $variant),+
        }

        impl $name {
            /// Every name, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire),+
                }
            }

            /// The variant whose wire name is `text`, if any.
            pub fn parse(text: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|name| name.as_str() == text)
            }
        }

        impl From<$source> for $name {
            fn from(value: $source) -> $name {
                match value {
                    $($source::$variant { .. } => $name::$variant),+
                }
            }
        }
    };
}

names!(
    /// A show's sales status.
    ShowStatusName from ShowStatus {
        /// Created, sales not open.
        Draft = "draft",
        /// Holds may be made.
        OnSale = "on_sale",
        /// No new holds; existing ones may still be paid.
        Closed = "closed",
        /// Terminal: everything released and refunded.
        Cancelled = "cancelled",
    }
);

names!(
    /// A seat as a buyer browsing the map sees it.
    SeatStatusName from SeatStatus {
        /// Can be held.
        Free = "free",
        /// In a live hold.
        Held = "held",
        /// Sold.
        Booked = "booked",
        /// Kept for or offered to the waitlist.
        Reserved = "reserved",
    }
);

names!(
    /// A hold's state (by log time: an overdue live hold reads as expired).
    HoldStateName from HoldStatus {
        /// Owns its seats.
        Held = "held",
        /// Checkout started; the payment is being processed.
        Processing = "processing",
        /// Paid: it became a booking.
        Confirmed = "confirmed",
        /// Cancelled by its owner or by show cancellation.
        Cancelled = "cancelled",
        /// Its deadline passed.
        Expired = "expired",
    }
);

names!(
    /// A booking's state.
    BookingStateName from BookingState {
        /// The seats are the buyer's.
        Confirmed = "confirmed",
        /// Cancelled; refund work was queued.
        Cancelled = "cancelled",
    }
);

names!(
    /// A payment attempt's state.
    PaymentStateName from PaymentStatus {
        /// Awaiting the provider.
        Pending = "pending",
        /// The provider could not say.
        Unknown = "unknown",
        /// Money taken.
        Succeeded = "succeeded",
        /// Refused.
        Declined = "declined",
        /// Money taken and given back.
        Refunded = "refunded",
    }
);

names!(
    /// An admission ticket's state.
    TicketStateName from TicketStatus {
        /// In line.
        Waiting = "waiting",
        /// Holds a grant: may hold seats until the grant deadline.
        Granted = "granted",
        /// The grant was used by a hold.
        Consumed = "consumed",
        /// Left the line.
        Left = "left",
        /// The grant or the waiting limit ran out.
        Expired = "expired",
    }
);

names!(
    /// A waitlist entry's state.
    EntryStateName from WaitlistEntryStatus {
        /// In line.
        Waiting = "waiting",
        /// Has an open offer.
        Offered = "offered",
        /// Accepted its offer.
        Accepted = "accepted",
        /// Declined its offer.
        Declined = "declined",
        /// Its offer ran out.
        Expired = "expired",
        /// Left the waitlist.
        Left = "left",
    }
);

names!(
    /// A waitlist offer's state.
    OfferStateName from OfferStatus {
        /// May be accepted until its deadline.
        Open = "open",
        /// Accepted: its seats became a hold.
        Accepted = "accepted",
        /// Declined: passed on.
        Declined = "declined",
        /// Its deadline passed.
        Expired = "expired",
        /// Closed by show cancellation.
        Withdrawn = "withdrawn",
    }
);

names!(
    /// A state of any audited entity.
    AuditStateName from StateName {
        /// Hold: owns its seats.
        Held = "held",
        /// Hold: checkout started.
        Processing = "processing",
        /// Hold or booking: confirmed.
        Confirmed = "confirmed",
        /// Hold or booking: cancelled.
        Cancelled = "cancelled",
        /// Hold, ticket, entry or offer: ran out of time.
        Expired = "expired",
        /// Payment: awaiting the provider.
        Pending = "pending",
        /// Payment: the provider could not say.
        Unknown = "unknown",
        /// Payment: money taken.
        Succeeded = "succeeded",
        /// Payment: refused; entry or offer: declined.
        Declined = "declined",
        /// Ticket or entry: in line.
        Waiting = "waiting",
        /// Ticket: holds a grant.
        Granted = "granted",
        /// Ticket: grant used.
        Consumed = "consumed",
        /// Ticket or entry: left.
        Left = "left",
        /// Entry: has an offer.
        Offered = "offered",
        /// Offer: open.
        Open = "open",
        /// Entry or offer: accepted.
        Accepted = "accepted",
        /// Offer: closed by show cancellation.
        Withdrawn = "withdrawn",
        /// Payment: money given back.
        Refunded = "refunded",
        /// Show: created, sales not yet open.
        Draft = "draft",
        /// Show: holds may be made.
        OnSale = "on_sale",
        /// Show: no new holds.
        Closed = "closed",
    }
);

names!(
    /// Why an audited transition happened.
    ReasonName from Reason {
        /// The owner asked for it.
        Requested = "requested",
        /// A deadline passed in log time.
        DeadlinePassed = "deadline_passed",
        /// A ticket waited longer than the show allows.
        WaitingLimit = "waiting_limit",
        /// Checkout started a payment attempt.
        CheckoutStarted = "checkout_started",
        /// The provider reported success in time.
        PaymentSucceeded = "payment_succeeded",
        /// The provider reported success too late: the money is to be refunded.
        LatePayment = "late_payment",
        /// The provider declined.
        PaymentDeclined = "payment_declined",
        /// The provider could not say.
        PaymentUnknown = "payment_unknown",
        /// The show was cancelled.
        ShowCancelled = "show_cancelled",
        /// A grant was used by a hold.
        GrantConsumed = "grant_consumed",
        /// The next in line was served.
        NextInLine = "next_in_line",
        /// An offer was accepted and became a hold.
        OfferAccepted = "offer_accepted",
        /// The admission lane was turned off.
        LaneDisabled = "lane_disabled",
        /// The waitlist was turned off.
        WaitlistDisabled = "waitlist_disabled",
        /// The provider confirmed a refund.
        RefundCompleted = "refund_completed",
        /// The operator set new prices.
        PricesSet = "prices_set",
        /// The operator configured the admission lane.
        AdmissionConfigured = "admission_configured",
        /// The operator configured the waitlist.
        WaitlistConfigured = "waitlist_configured",
        /// The operator set the waitlist's rules.
        WaitlistPolicySet = "waitlist_policy_set",
        /// The waitlist's lottery was drawn.
        LotteryDrawn = "lottery_drawn",
    }
);

names!(
    /// A kind of audited entity, as the audit paths and messages name it.
    EntityKindName from EntityKind {
        /// A hold.
        Hold = "hold",
        /// A booking.
        Booking = "booking",
        /// A payment attempt.
        Payment = "payment",
        /// An admission ticket.
        Ticket = "ticket",
        /// A waitlist entry.
        WaitlistEntry = "waitlist_entry",
        /// A waitlist offer.
        Offer = "offer",
        /// A show's own changes (its id is the show id).
        Show = "show",
    }
);

impl EntityKindName {
    /// The state machine's kind.
    pub fn kind(self) -> EntityKind {
        match self {
            EntityKindName::Hold => EntityKind::Hold,
            EntityKindName::Booking => EntityKind::Booking,
            EntityKindName::Payment => EntityKind::Payment,
            EntityKindName::Ticket => EntityKind::Ticket,
            EntityKindName::WaitlistEntry => EntityKind::WaitlistEntry,
            EntityKindName::Offer => EntityKind::Offer,
            EntityKindName::Show => EntityKind::Show,
        }
    }
}

/// An audited entity kind by its wire name, as both APIs take it.
///
/// # Errors
///
/// `InvalidArgument` for a name that is none, listing the names.
pub fn entity_kind(field: &str, name: &str) -> Result<EntityKind, ApiError> {
    EntityKindName::parse(name).map(EntityKindName::kind).ok_or_else(|| {
        let names: Vec<&str> = EntityKindName::ALL.iter().map(|kind| kind.as_str()).collect();
        ApiError::InvalidArgument(format!("{field}: one of {}; got {name:?}", names.join(", ")))
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_serialize_as_their_wire_names_and_parse_back() {
        for name in ReasonName::ALL {
            assert_eq!(serde_json::to_value(name).unwrap(), name.as_str());
            assert_eq!(ReasonName::parse(name.as_str()), Some(*name));
        }
        assert_eq!(serde_json::to_value(ShowStatusName::OnSale).unwrap(), "on_sale");
        assert_eq!(HoldStateName::from(HoldStatus::Held).as_str(), "held");
        assert_eq!(actor_name(Actor::System), "system");
        assert_eq!(actor_name(Actor::Session(statemachine::SessionId(255))).len(), 8 + 32);
    }

    #[test]
    fn state_names_are_the_state_machine_s_own() {
        for state in StateName::ALL {
            assert_eq!(AuditStateName::from(state).as_str(), state.as_str(), "{state:?}");
        }
        let ours = AuditStateName::ALL.iter().map(|name| name.as_str());
        assert!(ours.eq(StateName::ALL.iter().map(|state| state.as_str())));
    }

    #[test]
    fn entity_kinds_parse_by_name_and_refuse_the_rest() {
        for name in ["hold", "booking", "payment", "ticket", "waitlist_entry", "offer", "show"] {
            let kind = entity_kind("kind", name).unwrap();
            assert_eq!(EntityKindName::from(kind).as_str(), name);
        }
        let error = entity_kind("kind", "holds").unwrap_err();
        assert!(error.to_string().contains("waitlist_entry"), "{error}");
    }
}
