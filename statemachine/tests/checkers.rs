//! The history checkers judge hand-written histories: ones a correct cluster can produce must be
//! valid, and each kind of bug (a double allocation, a stale read after a leader change, a lost
//! acknowledged write, a FIFO skip, a retry answered differently) must be caught.

use std::collections::BTreeMap;

use statemachine::check::Verdict;
use statemachine::check::booking::{CheckReport, check_bookings};
use statemachine::check::history::{Call, Event, EventKind, History, Observed, Read};
use statemachine::check::linearizable::{Budget, ShowLinearizability, check_history};
use statemachine::{
    BookingId, ClientCommand, ClientRequest, Command, Currency, HoldId, IdempotencyKey,
    OperatorCommand, PaymentId, SeatRange, SeatSet, SeatStatus, SessionId, ShowId, ShowPolicy,
    ShowSpec, StateName, TicketId,
};

const SHOW: ShowId = ShowId(7);

/// A show of four seats, on sale; with a one-grant admission lane when `admission`.
fn setup(admission: bool) -> BTreeMap<ShowId, Vec<Command>> {
    let spec = ShowSpec {
        show: SHOW,
        currency: Currency(*b"EUR"),
        prices_minor: vec![1_000],
        layout: vec![SeatRange { count: 4, class: 0 }],
        policy: ShowPolicy::default(),
    };
    let mut commands = vec![
        Command::Operator(OperatorCommand::CreateShow(spec)),
        Command::Operator(OperatorCommand::OpenSales { show: SHOW }),
    ];
    if admission {
        commands.push(Command::Operator(OperatorCommand::ConfigureAdmission {
            show: SHOW,
            enabled: true,
            window: 1,
        }));
    }
    BTreeMap::from([(SHOW, commands)])
}

fn client(session: u128, key: u128, request: ClientRequest) -> Call {
    Call::Write(Command::Client(ClientCommand {
        show: SHOW,
        session: SessionId(session),
        key: IdempotencyKey(key),
        request,
    }))
}

fn hold(session: u128, key: u128, seats: &[u32]) -> Call {
    let seats = SeatSet::new(seats.iter().copied()).expect("a valid seat set");
    client(session, key, ClientRequest::Hold { seats, price_version: 1, grant: None })
}

fn held(hold: u64, seats: &[u32]) -> Observed {
    Observed::Held { hold: HoldId(hold), seats: seats.to_vec() }
}

fn read_seats() -> Call {
    Call::Read(Read::SeatMap { show: SHOW })
}

fn seats(statuses: &[SeatStatus]) -> Observed {
    Observed::Seats { seats: statuses.to_vec() }
}

/// Builds histories: `op(process, call, invoke, complete, outcome)`.
#[derive(Default)]
struct Builder {
    events: Vec<Event>,
    next_op: u64,
}

impl Builder {
    fn op(&mut self, process: u64, call: Call, invoke: u64, end: u64, outcome: Outcome) {
        let op = self.next_op;
        self.next_op += 1;
        let f = call.function().to_owned();
        self.events.push(Event {
            op,
            process,
            kind: EventKind::Invoke,
            f: f.clone(),
            call: call.clone(),
            value: None,
            error: None,
            time_ns: invoke,
            clock: None,
        });
        let (kind, value) = match outcome {
            Outcome::Ok(value) => (EventKind::Ok, Some(value)),
            Outcome::Fail => (EventKind::Fail, None),
            Outcome::Info => (EventKind::Info, None),
        };
        self.events.push(Event {
            op,
            process,
            kind,
            f,
            call,
            value,
            error: None,
            time_ns: end,
            clock: None,
        });
    }

    fn history(mut self) -> History {
        self.events.sort_by_key(|event| event.time_ns);
        History { events: self.events }
    }
}

enum Outcome {
    Ok(Observed),
    Fail,
    Info,
}

fn linearizability(history: &History, admission: bool) -> ShowLinearizability {
    let mut results =
        check_history(history, &setup(admission), 1_000, Budget::default(), &mut || true)
            .expect("checkable");
    assert_eq!(results.len(), 1);
    results.remove(0)
}

fn booking_check(history: &History, name: &str) -> CheckReport {
    check_bookings(history)
        .expect("well formed")
        .into_iter()
        .find(|report| report.check == name)
        .expect("check exists")
}

#[test]
fn a_race_for_one_seat_with_one_winner_is_valid() {
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[2]), 10, 40, Outcome::Ok(held(1, &[2])));
    history.op(2, hold(2, 2, &[2, 3]), 15, 35, Outcome::Ok(Observed::rejected("seat_unavailable")));
    history.op(3, hold(3, 3, &[3]), 20, 30, Outcome::Ok(held(1, &[3])));
    let history = history.history();
    // Two orders are possible only one way: hold 3 first (its seat 3 makes op 2 fail anyway).
    let verdict = linearizability(&history, false);
    assert_eq!(verdict.verdict, Verdict::Invalid, "ids must follow one log order: {verdict:?}");

    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[2]), 10, 40, Outcome::Ok(held(2, &[2])));
    history.op(2, hold(2, 2, &[2, 3]), 15, 35, Outcome::Ok(Observed::rejected("seat_unavailable")));
    history.op(3, hold(3, 3, &[3]), 20, 30, Outcome::Ok(held(1, &[3])));
    history.op(
        3,
        read_seats(),
        50,
        60,
        Outcome::Ok(seats(&[
            SeatStatus::Free,
            SeatStatus::Free,
            SeatStatus::Held,
            SeatStatus::Held,
        ])),
    );
    let history = history.history();
    let verdict = linearizability(&history, false);
    assert_eq!(verdict.verdict, Verdict::Valid, "{verdict:?}");
    for report in check_bookings(&history).expect("well formed") {
        assert_eq!(report.verdict, Verdict::Valid, "{report:?}");
    }
}

#[test]
fn a_double_allocation_is_caught() {
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[1]), 10, 20, Outcome::Ok(held(1, &[1])));
    history.op(2, hold(2, 2, &[1, 2]), 30, 40, Outcome::Ok(held(2, &[1, 2])));
    let history = history.history();
    assert_eq!(linearizability(&history, false).verdict, Verdict::Invalid);
    let report = booking_check(&history, "no_double_allocation");
    assert_eq!(report.verdict, Verdict::Invalid, "{report:?}");
    assert!(report.problems[0].contains("seat 1"), "{report:?}");
}

#[test]
fn a_seat_released_by_a_cancel_may_be_held_again() {
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[1]), 10, 20, Outcome::Ok(held(1, &[1])));
    history.op(
        1,
        client(1, 2, ClientRequest::CancelHold { hold: HoldId(1) }),
        30,
        40,
        Outcome::Info,
    );
    history.op(2, hold(2, 3, &[1]), 35, 45, Outcome::Ok(held(2, &[1])));
    let history = history.history();
    assert_eq!(linearizability(&history, false).verdict, Verdict::Valid);
    assert_eq!(booking_check(&history, "no_double_allocation").verdict, Verdict::Valid);
}

/// A booking paid by the cluster's own payment worker (no payment in the history) and then
/// cancelled by its owner releases the owner's checked-out hold: its seat may be held and booked
/// again, and the two bookings, both once read confirmed, are not a double allocation. Without
/// the cancel, the same history is one.
#[test]
fn a_cancelled_bookings_seats_may_be_booked_again() {
    let booking_read = |session: u128, booking: u64| {
        Call::Read(Read::Booking {
            show: SHOW,
            session: SessionId(session),
            booking: BookingId(booking),
        })
    };
    let confirmed = || {
        Outcome::Ok(Observed::Entity { state: StateName::Confirmed, seats: vec![1], offer: None })
    };
    let build = |cancel: bool| {
        let mut history = Builder::default();
        history.op(1, hold(1, 1, &[1]), 10, 20, Outcome::Ok(held(1, &[1])));
        let checkout = client(1, 2, ClientRequest::Checkout { hold: HoldId(1) });
        let started = Observed::CheckoutStarted { hold: HoldId(1), payment: PaymentId(2) };
        history.op(1, checkout, 30, 40, Outcome::Ok(started));
        history.op(1, booking_read(1, 3), 50, 60, confirmed());
        if cancel {
            let cancel = client(1, 3, ClientRequest::CancelBooking { booking: BookingId(3) });
            history.op(1, cancel, 70, 80, Outcome::Ok(Observed::Done));
        }
        history.op(2, hold(2, 4, &[1]), 90, 100, Outcome::Ok(held(4, &[1])));
        history.op(2, booking_read(2, 6), 150, 160, confirmed());
        history.history()
    };
    let report = booking_check(&build(true), "no_double_allocation");
    assert_eq!(report.verdict, Verdict::Valid, "{report:?}");
    let report = booking_check(&build(false), "no_double_allocation");
    assert_eq!(report.verdict, Verdict::Invalid, "{report:?}");
    assert_eq!(report.problems.len(), 2, "the hold and the two bookings: {report:?}");
}

#[test]
fn a_stale_read_after_a_leader_change_is_caught() {
    // The new leader acknowledged the hold; a read that began after that acknowledgement was
    // served by the deposed leader, which had not seen it.
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[0]), 10, 20, Outcome::Ok(held(1, &[0])));
    history.op(2, read_seats(), 30, 40, Outcome::Ok(seats(&[SeatStatus::Free; 4])));
    let history = history.history();
    let verdict = linearizability(&history, false);
    assert_eq!(verdict.verdict, Verdict::Invalid);
    assert!(
        verdict.explanation.as_deref().unwrap_or_default().contains("read_seats"),
        "{verdict:?}"
    );

    // The same read overlapping the hold may see either state.
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[0]), 10, 35, Outcome::Ok(held(1, &[0])));
    history.op(2, read_seats(), 30, 40, Outcome::Ok(seats(&[SeatStatus::Free; 4])));
    assert_eq!(linearizability(&history.history(), false).verdict, Verdict::Valid);
}

#[test]
fn a_lost_acknowledged_write_is_caught() {
    let read_hold = Call::Read(Read::Hold { show: SHOW, session: SessionId(1), hold: HoldId(1) });
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[3]), 10, 20, Outcome::Ok(held(1, &[3])));
    history.op(1, read_hold, 100, 110, Outcome::Ok(Observed::rejected("hold_not_found")));
    let history = history.history();
    assert_eq!(linearizability(&history, false).verdict, Verdict::Invalid);
    let report = booking_check(&history, "acknowledged_writes_survive");
    assert_eq!(report.verdict, Verdict::Invalid, "{report:?}");
}

/// A write the cluster acknowledged and then lost, with its id handed out again to another
/// request (as a hold or waitlist join accepted by a show's old group after its state was
/// copied to the new one would be, if the move's fence failed): the id given twice is caught,
/// and so is the owner's later read that answers `not_owner` or other seats.
#[test]
fn a_lost_write_whose_id_was_given_again_is_caught() {
    let read_hold = |session: u128| {
        Call::Read(Read::Hold { show: SHOW, session: SessionId(session), hold: HoldId(5) })
    };
    let held_entity = |seats: Vec<u32>| {
        Outcome::Ok(Observed::Entity { state: StateName::Held, seats, offer: None })
    };
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[1]), 10, 20, Outcome::Ok(held(5, &[1])));
    history.op(2, hold(2, 2, &[2]), 30, 40, Outcome::Ok(held(5, &[2])));
    history.op(1, read_hold(1), 50, 60, Outcome::Ok(Observed::rejected("not_owner")));
    history.op(2, read_hold(2), 50, 60, held_entity(vec![2]));
    let history = history.history();
    let report = booking_check(&history, "ids_given_once");
    assert_eq!(report.verdict, Verdict::Invalid, "{report:?}");
    assert!(report.problems[0].contains("hold 5"), "{report:?}");
    let report = booking_check(&history, "acknowledged_writes_survive");
    assert_eq!(report.verdict, Verdict::Invalid, "{report:?}");
    // Reads by the other session see the first write's id with its own seats: lost too.
    assert_eq!(report.problems.len(), 2, "{report:?}");

    // Waitlist entries carry nothing but their id: given twice is the tell.
    let join = |session: u128| {
        client(session, 10 + session, ClientRequest::JoinWaitlist { quantity: 1, band: 0 })
    };
    let joined = Outcome::Ok(Observed::WaitlistJoined { entry: statemachine::EntryId(3) });
    let mut history = Builder::default();
    history.op(1, join(1), 10, 20, joined);
    let joined = Outcome::Ok(Observed::WaitlistJoined { entry: statemachine::EntryId(3) });
    history.op(2, join(2), 30, 40, joined);
    let report = booking_check(&history.history(), "ids_given_once");
    assert_eq!(report.verdict, Verdict::Invalid, "{report:?}");
}

/// One id answered to one request several times is not given twice: a retry with the same key,
/// and an offer accepted again under another key (the same hold comes back).
#[test]
fn retries_and_repeated_acceptances_give_one_id() {
    let accept =
        |key: u128| client(1, key, ClientRequest::AcceptOffer { offer: statemachine::OfferId(4) });
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[1]), 10, 20, Outcome::Ok(held(1, &[1])));
    history.op(1, hold(1, 1, &[1]), 30, 40, Outcome::Ok(held(1, &[1])));
    history.op(1, accept(2), 50, 60, Outcome::Ok(held(2, &[3])));
    history.op(1, accept(3), 70, 80, Outcome::Ok(held(2, &[3])));
    let report = booking_check(&history.history(), "ids_given_once");
    assert_eq!(report.verdict, Verdict::Valid, "{report:?}");
    assert_eq!(report.examined, 4, "{report:?}");
}

#[test]
fn an_unknown_write_may_or_may_not_have_happened() {
    let read_hold = Call::Read(Read::Hold { show: SHOW, session: SessionId(1), hold: HoldId(1) });
    let held_entity = Observed::Entity { state: StateName::Held, seats: vec![3], offer: None };
    // Applied after all, later than its invocation.
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[3]), 10, 20, Outcome::Info);
    history.op(2, read_seats(), 30, 40, Outcome::Ok(seats(&[SeatStatus::Free; 4])));
    history.op(3, read_hold.clone(), 50, 60, Outcome::Ok(held_entity));
    assert_eq!(linearizability(&history.history(), false).verdict, Verdict::Valid);
    // Never applied.
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[3]), 10, 20, Outcome::Info);
    history.op(3, read_hold, 50, 60, Outcome::Ok(Observed::rejected("hold_not_found")));
    assert_eq!(linearizability(&history.history(), false).verdict, Verdict::Valid);
    // A failed write never happened: a read that shows it is invalid.
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[3]), 10, 20, Outcome::Fail);
    history.op(
        2,
        read_seats(),
        30,
        40,
        Outcome::Ok(seats(&[
            SeatStatus::Free,
            SeatStatus::Free,
            SeatStatus::Free,
            SeatStatus::Held,
        ])),
    );
    assert_eq!(linearizability(&history.history(), false).verdict, Verdict::Invalid);
}

#[test]
fn a_fifo_skip_of_the_admission_lane_is_caught() {
    let join = |session: u128| client(session, 100 + session, ClientRequest::JoinQueue);
    let read_ticket = |session: u128, ticket: u64| {
        Call::Read(Read::Ticket {
            show: SHOW,
            session: SessionId(session),
            ticket: TicketId(ticket),
        })
    };
    let entity = |state| Observed::Entity { state, seats: Vec::new(), offer: None };
    let queued = |ticket: u64| Observed::Queued { ticket: TicketId(ticket) };

    // Correct: ticket 1 is granted at once; when it leaves, ticket 2 is next.
    let mut history = Builder::default();
    history.op(1, join(1), 10, 20, Outcome::Ok(queued(1)));
    history.op(2, join(2), 30, 40, Outcome::Ok(queued(2)));
    history.op(3, join(3), 50, 60, Outcome::Ok(queued(3)));
    history.op(
        1,
        client(1, 9, ClientRequest::LeaveQueue { ticket: TicketId(1) }),
        70,
        80,
        Outcome::Ok(Observed::Done),
    );
    history.op(2, read_ticket(2, 2), 90, 100, Outcome::Ok(entity(StateName::Granted)));
    history.op(3, read_ticket(3, 3), 90, 100, Outcome::Ok(entity(StateName::Waiting)));
    let history = history.history();
    assert_eq!(linearizability(&history, true).verdict, Verdict::Valid);
    assert_eq!(booking_check(&history, "grants_in_fifo_order").verdict, Verdict::Valid);

    // A skip: ticket 3 was granted while ticket 2 still waited.
    let mut history = Builder::default();
    history.op(1, join(1), 10, 20, Outcome::Ok(queued(1)));
    history.op(2, join(2), 30, 40, Outcome::Ok(queued(2)));
    history.op(3, join(3), 50, 60, Outcome::Ok(queued(3)));
    history.op(
        1,
        client(1, 9, ClientRequest::LeaveQueue { ticket: TicketId(1) }),
        70,
        80,
        Outcome::Ok(Observed::Done),
    );
    history.op(3, read_ticket(3, 3), 90, 100, Outcome::Ok(entity(StateName::Granted)));
    history.op(2, read_ticket(2, 2), 110, 120, Outcome::Ok(entity(StateName::Waiting)));
    let history = history.history();
    assert_eq!(linearizability(&history, true).verdict, Verdict::Invalid);
    let report = booking_check(&history, "grants_in_fifo_order");
    assert_eq!(report.verdict, Verdict::Invalid, "{report:?}");
}

#[test]
fn a_retry_answered_differently_is_caught() {
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[0]), 10, 20, Outcome::Ok(held(1, &[0])));
    history.op(1, hold(1, 1, &[0]), 30, 40, Outcome::Ok(held(1, &[0])));
    let history = history.history();
    assert_eq!(linearizability(&history, false).verdict, Verdict::Valid);
    assert_eq!(booking_check(&history, "retries_answer_alike").verdict, Verdict::Valid);

    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[0]), 10, 20, Outcome::Ok(held(1, &[0])));
    history.op(1, hold(1, 1, &[0]), 30, 40, Outcome::Ok(held(2, &[0])));
    let history = history.history();
    assert_eq!(linearizability(&history, false).verdict, Verdict::Invalid);
    assert_eq!(booking_check(&history, "retries_answer_alike").verdict, Verdict::Invalid);
}

#[test]
fn out_of_budget_is_unknown_not_valid() {
    // Many concurrent unknown holds on distinct seats then a read that matches no subset: the
    // search has to try many orders.
    let mut history = Builder::default();
    for session in 0..4_u32 {
        history.op(
            u64::from(session),
            hold(u128::from(session), 1, &[session]),
            10,
            20,
            Outcome::Info,
        );
    }
    history.op(9, read_seats(), 30, 40, Outcome::Ok(seats(&[SeatStatus::Booked; 4])));
    let history = history.history();
    let results =
        check_history(&history, &setup(false), 1_000, Budget { steps_max: 3 }, &mut || true)
            .expect("checkable");
    assert_eq!(results[0].verdict, Verdict::Unknown, "{results:?}");
    let results = check_history(&history, &setup(false), 1_000, Budget::default(), &mut || true)
        .expect("checkable");
    assert_eq!(results[0].verdict, Verdict::Invalid, "{results:?}");
}

#[test]
fn histories_round_trip_through_serde() {
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[0]), 10, 20, Outcome::Ok(held(1, &[0])));
    let history = history.history();
    for event in &history.events {
        let line = serde_json::to_string(event).expect("encodes");
        assert!(line.contains(r#""f":"hold""#), "{line}");
        let back: Event = serde_json::from_str(&line).expect("decodes");
        assert_eq!(&back, event);
    }
    assert!(
        serde_json::to_string(&history.events[0]).expect("encodes").contains(r#""type":"invoke""#)
    );
}

#[test]
fn unknown_attempts_settled_by_a_retry_are_one_operation() {
    // Four sessions each hold a seat of a four-seat show, with an unknown first attempt that a
    // retry under the same key settles.
    let mut history = Builder::default();
    for session in 0..4_u32 {
        let seat = session;
        let start = u64::from(session) * 100;
        history.op(
            u64::from(session),
            hold(u128::from(session), 1, &[seat]),
            start,
            start + 10,
            Outcome::Info,
        );
    }
    // Every unknown attempt is retried after the others began; the answers are the stored ones.
    for session in 0..4_u32 {
        let start = 1_000 + u64::from(session) * 10;
        let hold_id = u64::from(session) + 1;
        history.op(
            u64::from(session),
            hold(u128::from(session), 1, &[session]),
            start,
            start + 5,
            Outcome::Ok(held(hold_id, &[session])),
        );
    }
    history.op(9, read_seats(), 2_000, 2_010, Outcome::Ok(seats(&[SeatStatus::Held; 4])));
    let history = history.history();
    let verdict = linearizability(&history, false);
    assert_eq!(verdict.verdict, Verdict::Valid, "{verdict:?}");
    // Four operations, not eight: each settled attempt folded into its answer.
    assert_eq!(verdict.operations, 5, "{verdict:?}");

    // A settled retry still has to agree with the reads: the seat was held by the answer.
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[2]), 10, 20, Outcome::Info);
    history.op(1, hold(1, 1, &[2]), 50, 60, Outcome::Ok(held(1, &[2])));
    history.op(2, read_seats(), 70, 80, Outcome::Ok(seats(&[SeatStatus::Free; 4])));
    assert_eq!(linearizability(&history.history(), false).verdict, Verdict::Invalid);
}

#[test]
fn a_rejection_is_not_stored_so_its_retry_may_succeed() {
    // The first attempt found the seat taken; the hold was cancelled; the retry under the same
    // key is judged afresh and succeeds. Only a stored success must be replayed.
    let mut history = Builder::default();
    history.op(1, hold(1, 1, &[0]), 10, 20, Outcome::Ok(held(1, &[0])));
    history.op(2, hold(2, 7, &[0]), 30, 40, Outcome::Ok(Observed::rejected("seat_unavailable")));
    history.op(
        1,
        client(1, 2, ClientRequest::CancelHold { hold: HoldId(1) }),
        50,
        60,
        Outcome::Ok(Observed::Done),
    );
    history.op(2, hold(2, 7, &[0]), 70, 80, Outcome::Ok(held(2, &[0])));
    // And a success replayed: the same answer again.
    history.op(2, hold(2, 7, &[0]), 90, 100, Outcome::Ok(held(2, &[0])));
    let history = history.history();
    assert_eq!(linearizability(&history, false).verdict, Verdict::Valid);
    assert_eq!(booking_check(&history, "retries_answer_alike").verdict, Verdict::Valid);
}

#[test]
fn state_names_round_trip_through_their_wire_names() {
    for state in StateName::ALL {
        assert_eq!(StateName::from_wire(state.as_str()), Some(state));
    }
    assert_eq!(StateName::from_wire("Held"), None, "wire names are lower case");
}
