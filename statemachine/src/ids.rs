//! Identifiers and small value types shared by every rule.
//!
//! Owns the newtypes that name shows, seats, holds and the rest, and the seat set of one hold.
//! Never allocates identifiers: ids are allocated by the show that owns them, in log order.

use arrayvec::ArrayVec;
use serde::{Deserialize, Serialize};

use crate::limits::SEATS_PER_HOLD_MAX;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub $inner);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// A show: the unit of inventory; lives in exactly one group.
    ShowId(u64)
);
id_type!(
    /// A hold of 1..=10 seats, unique within its show.
    HoldId(u64)
);
id_type!(
    /// A confirmed booking, unique within its show.
    BookingId(u64)
);
id_type!(
    /// A payment attempt, unique within its show; the provider's idempotency identity.
    PaymentId(u64)
);
id_type!(
    /// An admission ticket; its value is also its place in the lane (a grant is a granted ticket).
    TicketId(u64)
);
id_type!(
    /// A waitlist entry, unique within its show; its value breaks ties in waitlist order.
    EntryId(u64)
);
id_type!(
    /// A waitlist offer, unique within its show.
    OfferId(u64)
);
id_type!(
    /// An outbox event, increasing in log order within a group.
    OutboxId(u64)
);
id_type!(
    /// A session: the node passes a hash of the unguessable session token, never the token.
    SessionId(u128)
);
id_type!(
    /// A client's idempotency key, as a 128-bit hash made by the node from the request header.
    IdempotencyKey(u128)
);
id_type!(
    /// A payment provider's event id (hashed by the node), used to drop duplicate callbacks.
    ProviderEventId(u128)
);
id_type!(
    /// A capacity-released event id chosen by its sender, used to drop duplicate deliveries.
    CapacityEventId(u128)
);

/// A seat's number within its show: `0..seat_count`.
pub type SeatNo = u32;

/// The seats of one hold, offer or conflict: at most `SEATS_PER_HOLD_MAX`, kept sorted.
pub type SeatSet = ArrayVec<SeatNo, SEATS_PER_HOLD_MAX>;

/// An ISO 4217 currency code, e.g. `*b"EUR"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Currency(pub [u8; 3]);

impl Currency {
    /// Whether the code is three ASCII upper-case letters.
    pub fn is_valid(&self) -> bool {
        self.0.iter().all(u8::is_ascii_uppercase)
    }
}

impl std::fmt::Display for Currency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in self.0 {
            write!(f, "{}", char::from(byte))?;
        }
        Ok(())
    }
}

/// An amount of money in minor units (cents) of a currency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Money {
    /// Minor units.
    pub amount_minor: u64,
    /// The currency.
    pub currency: Currency,
}

/// Who caused a transition, as recorded in the audit log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Actor {
    /// A buyer's session.
    Session(SessionId),
    /// An operator (show management, capacity events, outbox acknowledgement).
    Operator,
    /// The payment provider, through a verified callback or reconciliation.
    Provider,
    /// The cluster itself: expiry by log time, promotion of the next waiter.
    System,
}
