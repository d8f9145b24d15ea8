//! JSON shapes shared by several REST routes: money, `as_of` and the hold. State names come
//! from `crate::names`, the one table both APIs use.
//!
//! Owns the conversion from the state machine's views to these shapes. Never reads state and
//! never decides anything: handlers pass in what the operations returned.

use serde::{Deserialize, Serialize};
use statemachine::{HoldView, ShowId};
use utoipa::ToSchema;

use crate::names::HoldStateName;
use crate::rest::ids::format_id;

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
    /// Their labels in the show's hall (e.g. `B12`), in the order of `seats`, for a show
    /// listed in the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seat_labels: Option<Vec<String>>,
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
            seat_labels: None,
            state: view.state.into(),
            price: hold.price.into(),
            price_version: hold.price_version,
            deadline_ms: hold.deadline_ms(),
            payment_id: hold.payment().map(|payment| format_id(show, payment.0)),
            booking_id: hold.booking().map(|booking| format_id(show, booking.0)),
            offer_id: hold.offer.map(|offer| format_id(show, offer.0)),
            as_of: view.as_of.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use statemachine::{Currency, HoldId, HoldState, HoldStatus, OfferId, PaymentId, SessionId};

    #[test]
    fn a_hold_serializes_with_external_ids_and_snake_case_states() {
        let view = HoldView {
            hold: statemachine::Hold {
                id: HoldId(7),
                session: SessionId(1),
                seats: [54, 55].as_slice().try_into().unwrap(),
                state: HoldState::Processing { payment: PaymentId(8), deadline_ms: 421_000 },
                created_ms: 1_000,
                hold_deadline_ms: 301_000,
                price_version: 1,
                price: statemachine::Money { amount_minor: 9_000, currency: Currency(*b"EUR") },
                grant: None,
                offer: Some(OfferId(3)),
                payments: [PaymentId(8)].into_iter().collect(),
            },
            state: HoldStatus::Processing,
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
}
