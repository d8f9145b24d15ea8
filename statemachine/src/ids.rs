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
    /// A venue of the catalog (chosen by the operator, non-zero).
    VenueId(u64)
);
id_type!(
    /// A hall of a venue, with its seat geometry (chosen by the operator, non-zero).
    HallId(u64)
);
id_type!(
    /// An event of the catalog: what a show is a showing of (chosen by the operator, non-zero).
    EventId(u64)
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

/// The seats of one hold, booking, offer or conflict: 1..=`SEATS_PER_HOLD_MAX` distinct seats,
/// in ascending order.
///
/// A `SeatSet` cannot be invalid: [`SeatSet::new`] refuses an empty list, too many seats and a
/// seat named twice, and decoding (a command from the log, a snapshot) refuses the same, so no
/// rule ever meets a malformed set. It is canonical: the seats are sorted on the way in, so two
/// lists of the same seats in another order make equal sets. Two hold requests that name the
/// same seats in another order are therefore the same payload, with the same idempotency
/// fingerprint: a retry may list its seats in any order.
///
/// It encodes as the sequence of its seats (postcard: a length, then each seat), which is the
/// encoding of the `ArrayVec` it replaced.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeatSet(ArrayVec<SeatNo, SEATS_PER_HOLD_MAX>);

/// Why a list of seats is not a [`SeatSet`]. The messages are the ones clients see after
/// `seats: `.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SeatSetError {
    /// No seat was named.
    #[error("1..={SEATS_PER_HOLD_MAX} seats per hold, got 0")]
    Empty,
    /// More than `SEATS_PER_HOLD_MAX` seats were named.
    #[error("1..={SEATS_PER_HOLD_MAX} seats per hold, got {count}")]
    TooMany {
        /// How many were named.
        count: usize,
    },
    /// A seat was named more than once (the lowest such seat).
    #[error("seat {seat} is named twice")]
    Duplicate {
        /// The seat.
        seat: SeatNo,
    },
}

impl SeatSet {
    /// The set of `seats`, in any order.
    ///
    /// # Errors
    ///
    /// [`SeatSetError`] for no seats, more than `SEATS_PER_HOLD_MAX`, or a seat named twice
    /// (checked in that order).
    pub fn new(seats: impl IntoIterator<Item = SeatNo>) -> Result<SeatSet, SeatSetError> {
        let mut set = ArrayVec::new();
        let mut count = 0;
        for seat in seats {
            count += 1;
            if count <= SEATS_PER_HOLD_MAX {
                set.push(seat);
            }
        }
        if count > SEATS_PER_HOLD_MAX {
            return Err(SeatSetError::TooMany { count });
        }
        SeatSet::sorted(set)
    }

    /// The set of one seat.
    pub fn one(seat: SeatNo) -> SeatSet {
        let mut set = ArrayVec::new();
        set.push(seat);
        SeatSet(set)
    }

    /// Sorts `set` and checks it is non-empty and distinct.
    fn sorted(mut set: ArrayVec<SeatNo, SEATS_PER_HOLD_MAX>) -> Result<SeatSet, SeatSetError> {
        if set.is_empty() {
            return Err(SeatSetError::Empty);
        }
        set.sort_unstable();
        if let Some(pair) = set.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(SeatSetError::Duplicate { seat: pair[0] });
        }
        Ok(SeatSet(set))
    }

    /// The seats of `ascending` (strictly increasing, at most `SEATS_PER_HOLD_MAX`), or `None`
    /// if it is empty: the constructor of subsets of sets and of seats taken in order from an
    /// ordered pool.
    ///
    /// # Panics
    ///
    /// If the seats are not strictly increasing or too many (a bug of the caller).
    pub(crate) fn from_ascending(ascending: impl IntoIterator<Item = SeatNo>) -> Option<SeatSet> {
        let mut set = ArrayVec::new();
        for seat in ascending {
            assert!(set.last().is_none_or(|last| *last < seat), "seats are not ascending");
            set.push(seat);
        }
        (!set.is_empty()).then_some(SeatSet(set))
    }

    /// The seats, ascending.
    pub fn as_slice(&self) -> &[SeatNo] {
        &self.0
    }
}

impl std::ops::Deref for SeatSet {
    type Target = [SeatNo];

    fn deref(&self) -> &[SeatNo] {
        &self.0
    }
}

impl AsRef<[SeatNo]> for SeatSet {
    fn as_ref(&self) -> &[SeatNo] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a SeatSet {
    type Item = &'a SeatNo;
    type IntoIter = std::slice::Iter<'a, SeatNo>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl TryFrom<&[SeatNo]> for SeatSet {
    type Error = SeatSetError;

    fn try_from(seats: &[SeatNo]) -> Result<SeatSet, SeatSetError> {
        SeatSet::new(seats.iter().copied())
    }
}

impl<const N: usize> TryFrom<[SeatNo; N]> for SeatSet {
    type Error = SeatSetError;

    fn try_from(seats: [SeatNo; N]) -> Result<SeatSet, SeatSetError> {
        SeatSet::new(seats)
    }
}

impl Serialize for SeatSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter())
    }
}

impl<'de> Deserialize<'de> for SeatSet {
    /// Decodes a sequence of seats and checks it as [`SeatSet::new`] does, without allocating:
    /// an invalid set fails to decode.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SeatSet, D::Error> {
        struct Seats;

        impl<'de> serde::de::Visitor<'de> for Seats {
            type Value = SeatSet;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(formatter, "1..={SEATS_PER_HOLD_MAX} distinct seat numbers")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<SeatSet, A::Error> {
                let mut set = ArrayVec::new();
                while let Some(seat) = seq.next_element::<SeatNo>()? {
                    if set.try_push(seat).is_err() {
                        let count = SEATS_PER_HOLD_MAX + 1 + seq.size_hint().unwrap_or(0);
                        return Err(serde::de::Error::custom(SeatSetError::TooMany { count }));
                    }
                }
                SeatSet::sorted(set).map_err(serde::de::Error::custom)
            }
        }

        deserializer.deserialize_seq(Seats)
    }
}

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
