//! A test harness: a group plus a log position, with one-line helpers for each command.
//! Every applied entry is followed by a full invariant check.

#![allow(dead_code, missing_docs)]

use statemachine::*;

pub const START_MS: u64 = 1_700_000_000_000;

pub struct Harness {
    pub group: Group,
    pub index: u64,
    pub now: u64,
    pub log: Vec<Entry>,
}

pub fn session(n: u64) -> SessionId {
    SessionId(u128::from(n) << 64 | 0xabcd)
}

pub fn key(n: u64) -> IdempotencyKey {
    IdempotencyKey(u128::from(n))
}

/// The seat set of `list`, in any order; panics on an invalid list.
pub fn seats(list: &[SeatNo]) -> SeatSet {
    SeatSet::new(list.iter().copied()).expect("a valid seat set")
}

pub fn eur(amount_minor: u64) -> Money {
    Money { amount_minor, currency: Currency(*b"EUR") }
}

/// A show spec: `seats` seats of class 0 at 50.00 EUR, the rest of the spec default.
pub fn spec(show: u64, seat_count: u32) -> ShowSpec {
    ShowSpec {
        show: ShowId(show),
        currency: Currency(*b"EUR"),
        prices_minor: vec![5_000, 8_000],
        layout: vec![SeatRange { count: seat_count, class: 0 }],
        policy: ShowPolicy::default(),
    }
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness { group: Group::new(), index: 0, now: START_MS, log: Vec::new() }
    }

    /// Applies one entry with these commands at the current time; checks invariants.
    pub fn apply(&mut self, commands: Vec<Command>) -> Vec<Outcome> {
        self.index += 1;
        let entry = Entry { index: self.index, time_ms: self.now, commands };
        let outcomes = self.group.apply(&entry);
        self.log.push(entry);
        if let Err(violation) = self.group.check_invariants() {
            panic!("invariant broken after entry {}: {violation}", self.index);
        }
        outcomes
    }

    pub fn one(&mut self, command: Command) -> Outcome {
        self.apply(vec![command]).pop().expect("one outcome")
    }

    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
    }

    pub fn operator(&mut self, command: OperatorCommand) -> Outcome {
        self.one(Command::Operator(command))
    }

    /// Creates a show with `seat_count` seats and opens its sales.
    pub fn on_sale_show(&mut self, show: u64, seat_count: u32) -> ShowId {
        self.operator(OperatorCommand::CreateShow(spec(show, seat_count))).expect("created");
        self.operator(OperatorCommand::OpenSales { show: ShowId(show) }).expect("opened");
        ShowId(show)
    }

    pub fn client_command(show: ShowId, who: u64, k: u64, request: ClientRequest) -> Command {
        Command::Client(ClientCommand { show, session: session(who), key: key(k), request })
    }

    pub fn client(&mut self, show: ShowId, who: u64, k: u64, request: ClientRequest) -> Outcome {
        self.one(Self::client_command(show, who, k, request))
    }

    pub fn hold_request(list: &[SeatNo], grant: Option<TicketId>) -> ClientRequest {
        ClientRequest::Hold { seats: seats(list), price_version: 1, grant }
    }

    pub fn hold(&mut self, show: ShowId, who: u64, k: u64, list: &[SeatNo]) -> Outcome {
        self.client(show, who, k, Self::hold_request(list, None))
    }

    /// Holds and returns the receipt, panicking on rejection.
    pub fn held(&mut self, show: ShowId, who: u64, k: u64, list: &[SeatNo]) -> HoldReceipt {
        match self.hold(show, who, k, list) {
            Ok(Reply::Held(receipt)) => receipt,
            other => panic!("expected a hold, got {other:?}"),
        }
    }

    /// Checks out and returns the payment id and price.
    pub fn checkout(&mut self, show: ShowId, who: u64, k: u64, hold: HoldId) -> (PaymentId, Money) {
        match self.client(show, who, k, ClientRequest::Checkout { hold }) {
            Ok(Reply::CheckoutStarted { payment, price, .. }) => (payment, price),
            other => panic!("expected checkout, got {other:?}"),
        }
    }

    pub fn pay(
        &mut self,
        show: ShowId,
        payment: PaymentId,
        event: u128,
        result: PaymentResult,
    ) -> Outcome {
        self.one(Command::Payment(PaymentOutcome {
            show,
            payment,
            event: ProviderEventId(event),
            result,
        }))
    }

    pub fn pay_ok(
        &mut self,
        show: ShowId,
        payment: PaymentId,
        event: u128,
        price: Money,
    ) -> Outcome {
        self.pay(
            show,
            payment,
            event,
            PaymentResult::Succeeded { amount_minor: price.amount_minor, currency: price.currency },
        )
    }

    pub fn tick(&mut self) -> Outcome {
        self.one(Command::Tick)
    }

    pub fn show(&self, show: ShowId) -> &Show {
        self.group.show(show).expect("show exists")
    }

    pub fn seat(&self, show: ShowId, seat: SeatNo) -> Seat {
        self.show(show).seats[seat as usize]
    }

    pub fn hold_state(&self, show: ShowId, hold: HoldId) -> HoldStatus {
        self.group.hold(show, hold, None).expect("hold exists").state
    }

    /// Outbox events so far, without ids.
    pub fn events(&self) -> Vec<Event> {
        self.group.outbox().pending().map(|event| event.event.clone()).collect()
    }
}

/// The rejection code of an outcome, or "ok".
pub fn code(outcome: &Outcome) -> &'static str {
    match outcome {
        Ok(_) => "ok",
        Err(rejection) => rejection.code(),
    }
}

/// The proptest configuration of the property and fuzz tests: bounded shrinking, and failures
/// become named tests in regressions.rs rather than files in the source tree.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases,
        max_shrink_iters: 2_000,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}
