//! Booking commands the cluster tests propose: real `statemachine` commands, so that replicas
//! converge on real state.

use statemachine::{
    ClientCommand, ClientRequest, Command, Currency, IdempotencyKey, OperatorCommand, SeatRange,
    SeatSet, SessionId, ShowId, ShowPolicy, ShowSpec,
};

/// A show of `seats` seats at one price.
pub fn create_show(show: u64, seats: u32) -> Command {
    Command::Operator(OperatorCommand::CreateShow(ShowSpec {
        show: ShowId(show),
        currency: Currency(*b"EUR"),
        prices_minor: vec![5_000],
        layout: vec![SeatRange { count: seats, class: 0 }],
        policy: ShowPolicy::default(),
    }))
}

/// Opens sales of `show`.
pub fn open_sales(show: u64) -> Command {
    Command::Operator(OperatorCommand::OpenSales { show: ShowId(show) })
}

/// Session `buyer` holds `seat` of `show` under idempotency key `key`.
pub fn hold(show: u64, buyer: u64, key: u64, seat: u32) -> Command {
    Command::Client(ClientCommand {
        show: ShowId(show),
        session: SessionId(u128::from(buyer)),
        key: IdempotencyKey(u128::from(key)),
        request: ClientRequest::Hold { seats: SeatSet::one(seat), price_version: 1, grant: None },
    })
}
