//! One test per booking rule and per race the seeds describe.
//!
//! Seeds: 002 "Design a ticket-booking service" (holds, idempotency, payment, FIFO admission),
//! 000 "Booking Waitlist System Design" (waitlist, offers, audit, outbox).

mod common;

use common::*;
use statemachine::*;

const MINUTE: u64 = 60 * 1_000;

// ---------------------------------------------------------------------------------------------
// Shows

#[test]
fn create_show_builds_layout_with_classes_and_starts_in_draft() {
    let mut h = Harness::new();
    let mut show_spec = spec(1, 10);
    show_spec.layout = vec![SeatRange { count: 4, class: 1 }, SeatRange { count: 6, class: 0 }];
    let reply = h.operator(OperatorCommand::CreateShow(show_spec)).unwrap();
    assert_eq!(reply, Reply::ShowCreated { show: ShowId(1), seats: 10 });
    let show = h.show(ShowId(1));
    assert_eq!(show.status, ShowStatus::Draft);
    assert_eq!(show.seat_classes, vec![1, 1, 1, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(show.counts.free, 10);
    // Sales are not open yet.
    assert_eq!(code(&h.hold(ShowId(1), 1, 1, &[0])), "show_not_on_sale");
    // Seat 0 is class 1 (80.00), seat 9 is class 0 (50.00).
    h.operator(OperatorCommand::OpenSales { show: ShowId(1) }).unwrap();
    let receipt = h.held(ShowId(1), 1, 1, &[0, 9]);
    assert_eq!(receipt.price, eur(13_000));
}

#[test]
fn create_show_rejects_bad_input_and_changes_nothing() {
    let mut h = Harness::new();
    let mut cases = Vec::new();
    let mut zero = spec(1, 1);
    zero.layout = vec![SeatRange { count: 0, class: 0 }];
    cases.push(zero);
    cases.push(spec(1, 100_001));
    let mut no_price = spec(1, 5);
    no_price.layout = vec![SeatRange { count: 5, class: 7 }];
    cases.push(no_price);
    let mut bad_currency = spec(1, 5);
    bad_currency.currency = Currency(*b"eu1");
    cases.push(bad_currency);
    let mut bad_policy = spec(1, 5);
    bad_policy.policy.hold_ttl_ms = 0;
    cases.push(bad_policy);
    let mut no_prices = spec(1, 5);
    no_prices.prices_minor = vec![];
    cases.push(no_prices);
    for case in cases {
        let outcome = h.operator(OperatorCommand::CreateShow(case.clone()));
        assert_eq!(code(&outcome), "invalid_argument", "{case:?}");
    }
    assert_eq!(h.group.shows().count(), 0);
    // The largest show is fine, and a second create with the same id is refused.
    h.operator(OperatorCommand::CreateShow(spec(1, 100_000))).unwrap();
    assert_eq!(code(&h.operator(OperatorCommand::CreateShow(spec(1, 5)))), "show_exists");
}

#[test]
fn closed_sales_stop_new_holds_but_existing_holds_can_pay() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    h.operator(OperatorCommand::CloseSales { show }).unwrap();
    assert_eq!(code(&h.hold(show, 2, 1, &[2])), "show_not_on_sale");
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    let outcome = h.pay_ok(show, payment, 1, price).unwrap();
    assert!(matches!(
        outcome,
        Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { .. }, .. }
    ));
    h.operator(OperatorCommand::OpenSales { show }).unwrap();
    h.held(show, 2, 1, &[2]);
}

#[test]
fn new_prices_need_the_next_version_and_make_old_quotes_stale() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let skip = OperatorCommand::SetPrices { show, version: 3, prices_minor: vec![1, 2] };
    assert_eq!(code(&h.operator(skip)), "price_version_mismatch");
    let wrong_len = OperatorCommand::SetPrices { show, version: 2, prices_minor: vec![1] };
    assert_eq!(code(&h.operator(wrong_len)), "invalid_argument");
    h.operator(OperatorCommand::SetPrices { show, version: 2, prices_minor: vec![6_000, 9_000] })
        .unwrap();
    let stale = h.hold(show, 1, 1, &[0]);
    assert_eq!(stale, Err(Rejection::PriceVersionMismatch { current: 2 }));
    let fresh = h.client(
        show,
        1,
        2,
        ClientRequest::Hold { seats: seats(&[0]), price_version: 2, grant: None },
    );
    let Ok(Reply::Held(receipt)) = fresh else { panic!("{fresh:?}") };
    assert_eq!(receipt.price, eur(6_000));
}

#[test]
fn cancelling_a_show_releases_holds_refunds_bookings_and_tells_every_waiter() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 4);
    // Session 1 books seats 0-1; session 2 holds 2; session 3 is processing 3.
    let booked = h.held(show, 1, 1, &[0, 1]);
    let (payment, price) = h.checkout(show, 1, 2, booked.hold);
    h.pay_ok(show, payment, 1, price).unwrap();
    h.held(show, 2, 1, &[2]);
    let processing = h.held(show, 3, 1, &[3]);
    let (late_payment, late_price) = h.checkout(show, 3, 2, processing.hold);
    // Session 4 waits on the waitlist, session 5 in the admission lane.
    h.operator(OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 })
        .unwrap();
    h.client(show, 4, 1, ClientRequest::JoinWaitlist { quantity: 1, band: 0 }).unwrap();
    h.operator(OperatorCommand::ConfigureAdmission { show, enabled: true, window: 1 }).unwrap();
    h.client(show, 5, 1, ClientRequest::JoinQueue).unwrap();

    let reply = h.operator(OperatorCommand::CancelShow { show }).unwrap();
    assert_eq!(
        reply,
        Reply::ShowCancelled {
            show,
            holds_released: 2,
            bookings_refunded: 1,
            waiters_told: 2,
            duplicate: false
        }
    );
    let cancelled = h.show(show);
    assert_eq!(cancelled.counts.free, 4);
    assert_eq!(cancelled.status, ShowStatus::Cancelled);
    let events = h.events();
    let refunds = events
        .iter()
        .filter(|event| {
            matches!(event, Event::RefundRequired { reason: RefundReason::ShowCancelled, .. })
        })
        .count();
    assert_eq!(refunds, 1);
    for who in 1..=5 {
        assert!(
            events.contains(&Event::ShowCancelled { session: session(who) }),
            "session {who} was not told"
        );
    }
    // Cancelling again changes nothing and says so.
    let events_before = h.events().len();
    let again = h.operator(OperatorCommand::CancelShow { show }).unwrap();
    assert!(matches!(again, Reply::ShowCancelled { duplicate: true, bookings_refunded: 0, .. }));
    assert_eq!(h.events().len(), events_before);
    // Nothing can be held any more, and the in-flight payment's money goes back.
    assert_eq!(code(&h.hold(show, 6, 1, &[0])), "show_cancelled");
    let late = h.pay_ok(show, late_payment, 2, late_price).unwrap();
    assert!(matches!(late, Reply::PaymentRecorded { effect: PaymentEffect::RefundRequired, .. }));
}

#[test]
fn operator_changes_of_a_show_are_audited_and_repeats_answer_duplicate() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 4);
    let status = |h: &mut Harness, command| h.operator(command).unwrap();
    // Opening an open show, closing a closed one: nothing changes, and the answer says so.
    assert_eq!(
        status(&mut h, OperatorCommand::OpenSales { show }),
        Reply::ShowStatusChanged { show, status: ShowStatus::OnSale, duplicate: true }
    );
    assert_eq!(
        status(&mut h, OperatorCommand::CloseSales { show }),
        Reply::ShowStatusChanged { show, status: ShowStatus::Closed, duplicate: false }
    );
    assert_eq!(
        status(&mut h, OperatorCommand::CloseSales { show }),
        Reply::ShowStatusChanged { show, status: ShowStatus::Closed, duplicate: true }
    );
    let prices = OperatorCommand::SetPrices { show, version: 2, prices_minor: vec![6_000, 9_000] };
    assert_eq!(
        h.operator(prices.clone()),
        Ok(Reply::PricesSet { show, version: 2, duplicate: false })
    );
    // The same prices under the same version again (a retry): a duplicate, not a mismatch.
    assert_eq!(h.operator(prices), Ok(Reply::PricesSet { show, version: 2, duplicate: true }));
    let other = OperatorCommand::SetPrices { show, version: 2, prices_minor: vec![7_000, 9_000] };
    assert_eq!(code(&h.operator(other)), "price_version_mismatch");
    let lane = OperatorCommand::ConfigureAdmission { show, enabled: true, window: 2 };
    h.operator(lane.clone()).unwrap();
    h.operator(lane).unwrap();
    h.operator(OperatorCommand::OpenSales { show }).unwrap();
    h.operator(OperatorCommand::CancelShow { show }).unwrap();
    h.operator(OperatorCommand::CancelShow { show }).unwrap();

    // One record per change, none for a repeat, the chain unbroken, the operator the actor.
    let trail = h.group.audit_trail(show, EntityKind::Show, show.0);
    let steps: Vec<(Option<StateName>, StateName, Reason)> =
        trail.iter().map(|record| (record.from, record.to, record.reason)).collect();
    use StateName::{Cancelled, Closed, Draft, OnSale};
    assert_eq!(
        steps,
        [
            (None, Draft, Reason::Requested),
            (Some(Draft), OnSale, Reason::Requested),
            (Some(OnSale), Closed, Reason::Requested),
            (Some(Closed), Closed, Reason::PricesSet),
            (Some(Closed), Closed, Reason::AdmissionConfigured),
            (Some(Closed), OnSale, Reason::Requested),
            (Some(OnSale), Cancelled, Reason::Requested),
        ]
    );
    assert!(trail.iter().all(|record| record.actor == Actor::Operator));
}

// ---------------------------------------------------------------------------------------------
// Holds

#[test]
fn two_overlapping_holds_one_wins_and_nothing_partial() {
    // Seed 002: A requests 54-56 while B requests 56-57 for show S99.
    let mut h = Harness::new();
    let show = h.on_sale_show(99, 100);
    let outcomes = h.apply(vec![
        Harness::client_command(show, 1, 1, Harness::hold_request(&[54, 55, 56], None)),
        Harness::client_command(show, 2, 1, Harness::hold_request(&[56, 57], None)),
    ]);
    let Ok(Reply::Held(a)) = &outcomes[0] else { panic!("{outcomes:?}") };
    assert_eq!(outcomes[1], Err(Rejection::SeatUnavailable { seats: seats(&[56]) }));
    for seat in [54, 55, 56] {
        assert_eq!(h.seat(show, seat), Seat::Held(a.hold));
    }
    assert_eq!(h.seat(show, 57), Seat::Free, "the loser holds nothing");
    // The other order: B first wins and A gets nothing.
    let show = h.on_sale_show(100, 100);
    let outcomes = h.apply(vec![
        Harness::client_command(show, 2, 1, Harness::hold_request(&[56, 57], None)),
        Harness::client_command(show, 1, 1, Harness::hold_request(&[54, 55, 56], None)),
    ]);
    assert!(outcomes[0].is_ok());
    assert_eq!(outcomes[1], Err(Rejection::SeatUnavailable { seats: seats(&[56]) }));
    assert_eq!(h.seat(show, 54), Seat::Free);
}

#[test]
fn hold_shape_errors_are_rejected_and_change_nothing() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 20);
    // No seats, eleven, or one seat twice is no seat set at all: such a hold cannot be made
    // (nor decoded, see fuzz.rs), so apply never meets one.
    let eleven: Vec<SeatNo> = (0..11).collect();
    assert_eq!(SeatSet::try_from(eleven.as_slice()), Err(SeatSetError::TooMany { count: 11 }));
    assert_eq!(SeatSet::try_from(&[][..]), Err(SeatSetError::Empty));
    assert_eq!(SeatSet::try_from([3, 3]), Err(SeatSetError::Duplicate { seat: 3 }));
    let before = h.group.show(show).unwrap().clone();
    assert_eq!(
        h.hold(show, 1, 3, &[19, 20]),
        Err(Rejection::SeatOutOfRange { seat: 20, seat_count: 20 })
    );
    assert_eq!(code(&h.hold(ShowId(7), 1, 4, &[1])), "show_not_found");
    assert_eq!(h.group.show(show).unwrap(), &before);
}

#[test]
fn a_hold_keeps_its_seats_for_five_minutes_by_default() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[3, 1, 2]);
    assert_eq!(receipt.seats, seats(&[1, 2, 3]), "seats come back sorted");
    assert_eq!(receipt.deadline_ms, h.now + 5 * MINUTE);
    h.advance(5 * MINUTE - 1);
    assert_eq!(code(&h.hold(show, 2, 1, &[2])), "seat_unavailable");
    assert_eq!(h.hold_state(show, receipt.hold), HoldStatus::Held);
    h.advance(1);
    assert_eq!(h.hold_state(show, receipt.hold), HoldStatus::Held, "reads see log time, not ours");
    h.apply(vec![]);
    assert_eq!(h.hold_state(show, receipt.hold), HoldStatus::Expired, "overdue reads as expired");
    assert_eq!(h.show(show).holds[&receipt.hold].state, HoldState::Held, "before a tick stores it");
}

#[test]
fn owner_cancels_a_hold_and_nobody_else_can() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[4, 5]);
    let cancel = ClientRequest::CancelHold { hold: receipt.hold };
    assert_eq!(code(&h.client(show, 2, 1, cancel.clone())), "not_owner");
    assert_eq!(
        h.client(show, 1, 2, cancel.clone()),
        Ok(Reply::HoldCancelled { hold: receipt.hold })
    );
    assert_eq!(h.seat(show, 4), Seat::Free);
    assert_eq!(
        code(&h.client(show, 1, 3, cancel)),
        "hold_not_active",
        "a second cancel under a new key finds it cancelled"
    );
    assert_eq!(
        code(&h.client(show, 1, 4, ClientRequest::CancelHold { hold: HoldId(999) })),
        "hold_not_found"
    );
}

#[test]
fn tick_expires_overdue_holds_and_emits_hold_expired() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[0, 1]);
    h.advance(5 * MINUTE);
    let reply = h.tick().unwrap();
    assert_eq!(reply, Reply::Ticked { expired: 1, more: false });
    assert_eq!(h.show(show).holds[&receipt.hold].state, HoldState::Expired);
    assert_eq!(h.seat(show, 0), Seat::Free);
    assert!(h.events().contains(&Event::HoldExpired { hold: receipt.hold, session: session(1) }));
    let trail = h.group.audit_trail(show, EntityKind::Hold, receipt.hold.0);
    let last = trail.last().unwrap();
    assert_eq!(
        (last.from, last.to, last.reason),
        (Some(StateName::Held), StateName::Expired, Reason::DeadlinePassed)
    );
    assert_eq!(last.actor, Actor::System);
}

#[test]
fn a_claim_expires_an_overdue_hold_without_waiting_for_a_tick() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let old = h.held(show, 1, 1, &[0, 1]);
    h.advance(5 * MINUTE);
    let new = h.held(show, 2, 1, &[1, 2]);
    assert_eq!(h.show(show).holds[&old.hold].state, HoldState::Expired);
    assert_eq!(h.seat(show, 0), Seat::Free, "the old hold's other seat is released too");
    assert_eq!(h.seat(show, 1), Seat::Held(new.hold));
    // The expiry is the system's doing even though session 2's command found it.
    let trail = h.group.audit_trail(show, EntityKind::Hold, old.hold.0);
    assert_eq!(trail.last().unwrap().actor, Actor::System);
}

#[test]
fn a_rejected_claim_does_not_materialize_expiry() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let old = h.held(show, 1, 1, &[0]);
    let other = h.held(show, 3, 1, &[1]);
    h.advance(5 * MINUTE);
    let fresh = h.held(show, 4, 1, &[1]); // Expires hold `other` by claiming its seat.
    assert_eq!(h.show(show).holds[&other.hold].state, HoldState::Expired);
    let before = h.show(show).clone();
    // Seat 0 is overdue (claimable) but seat 1 is live: the whole claim fails, nothing moves.
    assert_eq!(h.hold(show, 2, 1, &[0, 1]), Err(Rejection::SeatUnavailable { seats: seats(&[1]) }));
    assert_eq!(h.show(show), &before);
    assert_eq!(h.show(show).holds[&old.hold].state, HoldState::Held, "stored state unchanged");
    assert_eq!(h.hold_state(show, old.hold), HoldStatus::Expired, "but it reads as expired");
    assert_eq!(h.seat(show, 1), Seat::Held(fresh.hold));
}

#[test]
fn a_session_has_a_bounded_number_of_live_holds() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 20);
    for n in 0..4 {
        h.held(show, 1, n, &[n as SeatNo]);
    }
    assert_eq!(h.hold(show, 1, 9, &[9]), Err(Rejection::TooManyHolds { max: 4 }));
    h.held(show, 2, 1, &[9]);
}

// ---------------------------------------------------------------------------------------------
// Idempotency

#[test]
fn a_retry_after_a_lost_response_returns_the_same_hold_even_after_it_expired() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let first = h.hold(show, 1, 7, &[5, 6]);
    // Same payload, seats in another order: same canonical fingerprint, same reply.
    assert_eq!(h.hold(show, 1, 7, &[6, 5]), first);
    assert_eq!(h.show(show).counts.held, 2, "the retry held nothing more");
    h.advance(10 * MINUTE);
    h.tick().unwrap();
    assert_eq!(h.hold(show, 1, 7, &[5, 6]), first, "the stored outcome outlives the hold");
}

#[test]
fn reusing_a_key_with_another_payload_is_refused() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    h.held(show, 1, 7, &[5, 6]);
    assert_eq!(code(&h.hold(show, 1, 7, &[5])), "idempotency_key_reused");
    assert_eq!(
        code(&h.client(show, 1, 7, ClientRequest::JoinWaitlist { quantity: 1, band: 0 })),
        "idempotency_key_reused"
    );
    // Keys are per session: another session may use the same key.
    h.held(show, 2, 7, &[1]);
}

#[test]
fn seat_unavailable_is_not_stored_so_a_retry_is_judged_afresh() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let blocker = h.held(show, 1, 1, &[3]);
    assert_eq!(code(&h.hold(show, 2, 9, &[3])), "seat_unavailable");
    h.client(show, 1, 2, ClientRequest::CancelHold { hold: blocker.hold }).unwrap();
    let retry = h.hold(show, 2, 9, &[3]);
    assert!(matches!(retry, Ok(Reply::Held(_))), "{retry:?}");
}

#[test]
fn idempotency_records_are_pruned_after_the_retention_window() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let first = h.held(show, 1, 7, &[5]);
    h.advance(24 * 60 * MINUTE - 1);
    h.tick().unwrap();
    assert_eq!(h.hold(show, 1, 7, &[5]), Ok(Reply::Held(first.clone())));
    assert_eq!(h.show(show).idempotency.len(), 1);
    h.advance(1);
    h.tick().unwrap();
    assert!(h.show(show).idempotency.is_empty());
    // After the window the key is new again: a fresh judgement.
    let again = h.held(show, 1, 7, &[5]);
    assert_ne!(again.hold, first.hold);
}

// ---------------------------------------------------------------------------------------------
// Checkout and payment

#[test]
fn checkout_moves_a_hold_to_processing_once_and_retries_get_the_same_attempt() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1, 2]);
    h.advance(MINUTE);
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    assert_eq!(price, eur(10_000), "amount comes from the quote");
    assert_eq!(h.hold_state(show, receipt.hold), HoldStatus::Processing);
    let deadline = h.show(show).holds[&receipt.hold].deadline_ms();
    assert_eq!(deadline, h.now + 2 * MINUTE);
    // A retry under another key: same attempt, no second grace extension.
    h.advance(MINUTE);
    let (again, _) = h.checkout(show, 1, 3, receipt.hold);
    assert_eq!(again, payment);
    assert_eq!(h.show(show).holds[&receipt.hold].deadline_ms(), deadline);
    assert_eq!(h.show(show).payments.len(), 1);
    assert_eq!(
        code(&h.client(show, 2, 1, ClientRequest::Checkout { hold: receipt.hold })),
        "not_owner"
    );
    assert_eq!(
        code(&h.client(show, 1, 4, ClientRequest::CancelHold { hold: receipt.hold })),
        "payment_in_progress"
    );
}

#[test]
fn checkout_of_an_overdue_hold_is_hold_expired() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    h.advance(5 * MINUTE);
    assert_eq!(
        code(&h.client(show, 1, 2, ClientRequest::Checkout { hold: receipt.hold })),
        "hold_expired"
    );
}

#[test]
fn payment_success_in_time_confirms_a_booking() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1, 2]);
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    let reply = h.pay_ok(show, payment, 100, price).unwrap();
    let Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { booking }, .. } = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(h.seat(show, 1), Seat::Booked(booking));
    assert_eq!(h.hold_state(show, receipt.hold), HoldStatus::Confirmed);
    let view = h.group.booking(show, booking, Some(session(1))).unwrap();
    assert_eq!(view.booking.seats, seats(&[1, 2]));
    assert_eq!(
        code(
            &h.group
                .booking(show, booking, Some(session(2)))
                .map(|_| Reply::HoldCancelled { hold: HoldId(0) })
        ),
        "not_owner"
    );
    assert!(
        h.events().iter().any(
            |event| matches!(event, Event::BookingConfirmed { booking: b, .. } if *b == booking)
        )
    );
}

#[test]
fn payment_success_just_before_the_deadline_wins_over_expiry() {
    // Seed 002, race A: confirmation wins; the later expiry finds it confirmed and does nothing.
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    h.advance(2 * MINUTE - 100);
    let reply = h.pay_ok(show, payment, 1, price).unwrap();
    assert!(matches!(
        reply,
        Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { .. }, .. }
    ));
    h.advance(MINUTE);
    assert_eq!(h.tick().unwrap(), Reply::Ticked { expired: 0, more: false });
    assert_eq!(h.hold_state(show, receipt.hold), HoldStatus::Confirmed);
    assert_eq!(code(&h.hold(show, 2, 1, &[1])), "seat_unavailable");
}

#[test]
fn expiry_before_payment_success_turns_the_money_into_refund_work() {
    // Seed 002, race B: expiry wins; the late success must not take the seat back.
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    h.advance(2 * MINUTE);
    h.tick().unwrap();
    let taker = h.held(show, 2, 1, &[1]);
    let reply = h.pay_ok(show, payment, 1, price).unwrap();
    assert_eq!(reply, Reply::PaymentRecorded { payment, effect: PaymentEffect::RefundRequired });
    assert_eq!(h.seat(show, 1), Seat::Held(taker.hold), "late money never takes seats back");
    let attempt = &h.show(show).payments[&payment];
    assert_eq!(attempt.state, PaymentState::Succeeded { refund_required: true });
    assert!(attempt.refund_required());
    assert!(h.events().contains(&Event::RefundRequired {
        payment,
        session: session(1),
        price,
        reason: RefundReason::LatePayment
    }));
}

#[test]
fn late_success_without_a_tick_expires_the_hold_and_becomes_refund_work() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    h.advance(2 * MINUTE);
    let reply = h.pay_ok(show, payment, 1, price).unwrap();
    assert_eq!(reply, Reply::PaymentRecorded { payment, effect: PaymentEffect::RefundRequired });
    assert_eq!(h.show(show).holds[&receipt.hold].state, HoldState::Expired);
    assert_eq!(h.seat(show, 1), Seat::Free);
}

#[test]
fn a_decline_with_time_left_returns_the_hold_to_held() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    let (payment, _) = h.checkout(show, 1, 2, receipt.hold);
    let reply = h.pay(show, payment, 1, PaymentResult::Declined).unwrap();
    assert_eq!(
        reply,
        Reply::PaymentRecorded {
            payment,
            effect: PaymentEffect::Declined { hold_state: HoldStatus::Held }
        }
    );
    let hold = &h.show(show).holds[&receipt.hold];
    assert_eq!(hold.deadline_ms(), receipt.deadline_ms, "the original deadline, not a new one");
    // The buyer may try again with a new attempt.
    let (second, _) = h.checkout(show, 1, 3, receipt.hold);
    assert_ne!(second, payment);
}

#[test]
fn a_decline_after_the_hold_deadline_releases_the_seats() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    h.advance(4 * MINUTE);
    let (payment, _) = h.checkout(show, 1, 2, receipt.hold);
    h.advance(MINUTE + 1); // Past the 5-minute hold deadline, inside the payment grace.
    let reply = h.pay(show, payment, 1, PaymentResult::Declined).unwrap();
    assert_eq!(
        reply,
        Reply::PaymentRecorded {
            payment,
            effect: PaymentEffect::Declined { hold_state: HoldStatus::Expired }
        }
    );
    assert_eq!(h.seat(show, 1), Seat::Free);
}

#[test]
fn an_unknown_outcome_keeps_the_hold_processing_until_reconciled() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    let reply = h.pay(show, payment, 1, PaymentResult::Unknown).unwrap();
    assert_eq!(reply, Reply::PaymentRecorded { payment, effect: PaymentEffect::Unknown });
    assert_eq!(h.hold_state(show, receipt.hold), HoldStatus::Processing);
    assert_eq!(h.show(show).payments[&payment].state, PaymentState::Unknown);
    let reply = h.pay_ok(show, payment, 2, price).unwrap();
    assert!(matches!(
        reply,
        Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { .. }, .. }
    ));
}

#[test]
fn duplicate_provider_events_are_no_ops() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    h.pay_ok(show, payment, 42, price).unwrap();
    let before = h.show(show).clone();
    let events_before = h.group.outbox().len();
    for event in [42, 43] {
        let reply = h.pay_ok(show, payment, event, price).unwrap();
        assert_eq!(
            reply,
            Reply::PaymentRecorded {
                payment,
                effect: PaymentEffect::Duplicate { state: PaymentStatus::Succeeded }
            }
        );
    }
    let reply = h.pay(show, payment, 44, PaymentResult::Declined).unwrap();
    assert!(matches!(
        reply,
        Reply::PaymentRecorded { effect: PaymentEffect::Duplicate { .. }, .. }
    ));
    assert_eq!(h.show(show), &before);
    assert_eq!(h.group.outbox().len(), events_before);
}

#[test]
fn a_payment_with_another_amount_or_currency_is_rejected() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    let short =
        PaymentResult::Succeeded { amount_minor: price.amount_minor - 1, currency: price.currency };
    assert_eq!(code(&h.pay(show, payment, 1, short)), "payment_mismatch");
    let dollars =
        PaymentResult::Succeeded { amount_minor: price.amount_minor, currency: Currency(*b"USD") };
    assert_eq!(code(&h.pay(show, payment, 2, dollars)), "payment_mismatch");
    assert_eq!(h.show(show).payments[&payment].state, PaymentState::Pending);
    assert_eq!(code(&h.pay(show, PaymentId(999), 3, PaymentResult::Declined)), "payment_not_found");
}

#[test]
fn a_hold_gets_at_most_three_payment_attempts() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    for attempt in 0..3 {
        let (payment, _) = h.checkout(show, 1, 10 + attempt, receipt.hold);
        h.pay(show, payment, u128::from(attempt), PaymentResult::Declined).unwrap();
    }
    assert_eq!(
        code(&h.client(show, 1, 20, ClientRequest::Checkout { hold: receipt.hold })),
        "payment_attempts_exhausted"
    );
}

// ---------------------------------------------------------------------------------------------
// Bookings

fn book(h: &mut Harness, show: ShowId, who: u64, list: &[SeatNo]) -> BookingId {
    let receipt = h.held(show, who, 1_000 + list[0] as u64, list);
    let (payment, price) = h.checkout(show, who, 2_000 + list[0] as u64, receipt.hold);
    match h.pay_ok(show, payment, u128::from(payment.0) << 32, price) {
        Ok(Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { booking }, .. }) => booking,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_owner_cancels_a_booking_seats_return_and_refund_work_is_queued() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let booking = book(&mut h, show, 1, &[2, 3]);
    let cancel = ClientRequest::CancelBooking { booking };
    assert_eq!(code(&h.client(show, 2, 1, cancel.clone())), "not_owner");
    assert_eq!(h.client(show, 1, 1, cancel.clone()), Ok(Reply::BookingCancelled { booking }));
    assert_eq!(h.seat(show, 2), Seat::Free);
    assert!(h.events().iter().any(|event| matches!(
        event,
        Event::RefundRequired { reason: RefundReason::BookingCancelled, .. }
    )));
    assert_eq!(code(&h.client(show, 1, 2, cancel)), "booking_not_cancellable");
}

#[test]
fn a_completed_refund_is_recorded_once_and_only_where_money_is_owed() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let booking = book(&mut h, show, 1, &[2, 3]);
    let payment = h.show(show).bookings[&booking].payment;
    let refund = Command::RefundCompleted { show, payment };
    // A confirmed booking owes nothing back: refused, and nothing changes.
    let before = h.show(show).payments[&payment].clone();
    assert_eq!(code(&h.one(refund.clone())), "invalid_argument");
    assert_eq!(h.show(show).payments[&payment], before);
    let unknown = Command::RefundCompleted { show, payment: PaymentId(999) };
    assert_eq!(code(&h.one(unknown)), "payment_not_found");

    h.client(show, 1, 1, ClientRequest::CancelBooking { booking }).unwrap();
    assert!(h.show(show).payments[&payment].refund_required());
    assert_eq!(h.one(refund.clone()), Ok(Reply::RefundRecorded { payment, duplicate: false }));
    let attempt = &h.show(show).payments[&payment];
    assert_eq!(attempt.state, PaymentState::Refunded);
    assert!(!attempt.refund_required());
    let price = attempt.price;
    assert!(h.events().contains(&Event::RefundCompleted { payment, session: session(1), price }));
    let trail = h.group.audit_trail(show, EntityKind::Payment, payment.0);
    let last = trail.last().unwrap();
    assert_eq!((last.from, last.to), (Some(StateName::Succeeded), StateName::Refunded));
    assert_eq!((last.reason, last.actor), (Reason::RefundCompleted, Actor::Provider));

    let events = h.events().len();
    assert_eq!(h.one(refund), Ok(Reply::RefundRecorded { payment, duplicate: true }));
    assert_eq!(h.events().len(), events, "a second report tells nobody again");
    assert_eq!(h.show(show).bookings[&booking].state, BookingState::Cancelled);
}

#[test]
fn bookings_cannot_be_cancelled_when_the_show_forbids_it() {
    let mut h = Harness::new();
    let mut show_spec = spec(1, 10);
    show_spec.policy.booking_cancel_allowed = false;
    h.operator(OperatorCommand::CreateShow(show_spec)).unwrap();
    h.operator(OperatorCommand::OpenSales { show: ShowId(1) }).unwrap();
    let booking = book(&mut h, ShowId(1), 1, &[2]);
    assert_eq!(
        code(&h.client(ShowId(1), 1, 1, ClientRequest::CancelBooking { booking })),
        "booking_not_cancellable"
    );
}

// ---------------------------------------------------------------------------------------------
// Admission

fn lane_show(h: &mut Harness, window: u32) -> ShowId {
    let show = h.on_sale_show(1, 20);
    h.operator(OperatorCommand::ConfigureAdmission { show, enabled: true, window }).unwrap();
    show
}

fn join_queue(h: &mut Harness, show: ShowId, who: u64) -> (TicketId, TicketStatus) {
    match h.client(show, who, 500, ClientRequest::JoinQueue) {
        Ok(Reply::Queued { ticket, state, .. }) => (ticket, state),
        other => panic!("{other:?}"),
    }
}

fn grant_hold(
    h: &mut Harness,
    show: ShowId,
    who: u64,
    k: u64,
    list: &[SeatNo],
    grant: TicketId,
) -> Outcome {
    h.client(show, who, k, Harness::hold_request(list, Some(grant)))
}

#[test]
fn a_strict_fifo_lane_grants_one_at_a_time_in_join_order() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 1);
    let (a, a_state) = join_queue(&mut h, show, 1);
    let (b, b_state) = join_queue(&mut h, show, 2);
    let (c, _) = join_queue(&mut h, show, 3);
    assert_eq!((a_state, b_state), (TicketStatus::Granted, TicketStatus::Waiting));
    let view = h.group.ticket(show, c, Some(session(3))).unwrap();
    assert_eq!((view.state, view.ahead), (TicketStatus::Waiting, 1));
    // A's hold consumes A's grant atomically, and B is granted in the same apply.
    grant_hold(&mut h, show, 1, 1, &[0], a).unwrap();
    assert_eq!(h.show(show).lane.tickets[&a].state.status(), TicketStatus::Consumed);
    assert_eq!(h.show(show).lane.tickets[&b].state.status(), TicketStatus::Granted);
    assert_eq!(h.show(show).lane.tickets[&c].state.status(), TicketStatus::Waiting);
    let grants: Vec<TicketId> = h
        .events()
        .iter()
        .filter_map(|event| match event {
            Event::GrantIssued { ticket, .. } => Some(*ticket),
            _ => None,
        })
        .collect();
    assert_eq!(grants, vec![a, b]);
}

#[test]
fn while_the_lane_is_on_a_hold_needs_the_sessions_own_live_grant() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 1);
    let (a, _) = join_queue(&mut h, show, 1);
    let (b, _) = join_queue(&mut h, show, 2);
    assert_eq!(code(&h.hold(show, 1, 1, &[0])), "grant_required");
    assert_eq!(code(&grant_hold(&mut h, show, 2, 1, &[0], a)), "not_owner");
    assert_eq!(code(&grant_hold(&mut h, show, 2, 2, &[0], b)), "ticket_not_active", "b waits");
    assert_eq!(code(&grant_hold(&mut h, show, 1, 3, &[0], TicketId(999))), "ticket_not_found");
    grant_hold(&mut h, show, 1, 4, &[0], a).unwrap();
}

#[test]
fn a_rejected_hold_keeps_its_grant() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 2);
    let (a, _) = join_queue(&mut h, show, 1);
    let (b, _) = join_queue(&mut h, show, 2);
    grant_hold(&mut h, show, 1, 1, &[5], a).unwrap();
    assert_eq!(code(&grant_hold(&mut h, show, 2, 1, &[5], b)), "seat_unavailable");
    assert_eq!(h.show(show).lane.tickets[&b].state.status(), TicketStatus::Granted);
    grant_hold(&mut h, show, 2, 2, &[6], b).unwrap();
}

#[test]
fn an_unused_grant_expires_and_the_next_ticket_is_granted() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 1);
    let (a, _) = join_queue(&mut h, show, 1);
    let (b, _) = join_queue(&mut h, show, 2);
    h.advance(MINUTE);
    assert_eq!(code(&grant_hold(&mut h, show, 1, 1, &[0], a)), "grant_expired");
    h.tick().unwrap();
    assert_eq!(h.show(show).lane.tickets[&a].state.status(), TicketStatus::Expired);
    assert_eq!(h.show(show).lane.tickets[&b].state.status(), TicketStatus::Granted);
    grant_hold(&mut h, show, 2, 1, &[0], b).unwrap();
}

#[test]
fn a_consumed_grants_later_expiry_never_releases_the_hold() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 1);
    let (a, _) = join_queue(&mut h, show, 1);
    let receipt = match grant_hold(&mut h, show, 1, 1, &[0], a).unwrap() {
        Reply::Held(receipt) => receipt,
        other => panic!("{other:?}"),
    };
    h.advance(MINUTE + 1); // Past the grant's deadline, well inside the hold's.
    h.tick().unwrap();
    assert_eq!(h.hold_state(show, receipt.hold), HoldStatus::Held);
    assert_eq!(h.show(show).lane.tickets[&a].state.status(), TicketStatus::Consumed);
}

#[test]
fn leaving_the_lane_passes_the_grant_on() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 1);
    let (a, _) = join_queue(&mut h, show, 1);
    let (b, _) = join_queue(&mut h, show, 2);
    assert_eq!(code(&h.client(show, 2, 1, ClientRequest::LeaveQueue { ticket: a })), "not_owner");
    h.client(show, 1, 1, ClientRequest::LeaveQueue { ticket: a }).unwrap();
    assert_eq!(h.show(show).lane.tickets[&a].state.status(), TicketStatus::Left);
    assert_eq!(h.show(show).lane.tickets[&b].state.status(), TicketStatus::Granted);
    assert_eq!(
        code(&h.client(show, 1, 2, ClientRequest::LeaveQueue { ticket: a })),
        "ticket_not_active"
    );
    assert_eq!(code(&h.client(show, 2, 9, ClientRequest::JoinQueue)), "already_queued");
}

#[test]
fn a_ticket_that_waits_past_the_limit_expires() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 1);
    let (a, _) = join_queue(&mut h, show, 1);
    grant_hold(&mut h, show, 1, 1, &[0], a).unwrap();
    let (b, _) = join_queue(&mut h, show, 2);
    let (c, _) = join_queue(&mut h, show, 3);
    // B is granted and never uses it; C waits behind B for an hour.
    assert_eq!(h.show(show).lane.tickets[&b].state.status(), TicketStatus::Granted);
    h.advance(60 * MINUTE);
    h.apply(vec![]);
    assert_eq!(h.group.ticket(show, c, None).unwrap().state, TicketStatus::Expired);
    h.tick().unwrap();
    let trail = h.group.audit_trail(show, EntityKind::Ticket, c.0);
    assert_eq!(trail.last().unwrap().reason, Reason::WaitingLimit);
    // The session may join again afterwards.
    join_queue(&mut h, show, 3);
}

#[test]
fn a_wider_window_grants_several_at_once_but_never_more() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 3);
    let states: Vec<TicketStatus> = (1..=5).map(|who| join_queue(&mut h, show, who).1).collect();
    assert_eq!(
        states,
        vec![
            TicketStatus::Granted,
            TicketStatus::Granted,
            TicketStatus::Granted,
            TicketStatus::Waiting,
            TicketStatus::Waiting
        ]
    );
    assert_eq!(
        code(&h.client(show, 6, 1, ClientRequest::LeaveQueue { ticket: TicketId(999) })),
        "ticket_not_found"
    );
}

#[test]
fn turning_the_lane_off_expires_its_tickets_and_holds_need_no_grant() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 1);
    let (a, _) = join_queue(&mut h, show, 1);
    h.operator(OperatorCommand::ConfigureAdmission { show, enabled: false, window: 1 }).unwrap();
    assert_eq!(h.show(show).lane.tickets[&a].state.status(), TicketStatus::Expired);
    h.held(show, 2, 1, &[0]);
    assert_eq!(code(&h.client(show, 3, 1, ClientRequest::JoinQueue)), "admission_disabled");
    let zero = OperatorCommand::ConfigureAdmission { show, enabled: true, window: 0 };
    assert_eq!(code(&h.operator(zero)), "invalid_argument");
}

// ---------------------------------------------------------------------------------------------
// Waitlist

/// A sold-out show of `seat_count` seats (session 100 holds them all), waitlist on.
fn sold_out_show(h: &mut Harness, seat_count: u32) -> (ShowId, Vec<BookingId>) {
    let show = h.on_sale_show(1, seat_count);
    let mut bookings = Vec::new();
    for seat in 0..seat_count {
        bookings.push(book(h, show, 100 + u64::from(seat), &[seat]));
    }
    h.operator(OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 })
        .unwrap();
    (show, bookings)
}

fn join_waitlist(h: &mut Harness, show: ShowId, who: u64, quantity: u8, band: u8) -> EntryId {
    match h.client(show, who, 600, ClientRequest::JoinWaitlist { quantity, band }) {
        Ok(Reply::WaitlistJoined { entry, .. }) => entry,
        other => panic!("{other:?}"),
    }
}

fn offers(h: &Harness) -> Vec<(OfferId, SessionId, SeatSet)> {
    h.events()
        .into_iter()
        .filter_map(|event| match event {
            Event::OfferMade { offer, session, seats, .. } => Some((offer, session, seats)),
            _ => None,
        })
        .collect()
}

fn cancel_booking(h: &mut Harness, show: ShowId, booking: BookingId) {
    let owner = h.show(show).bookings[&booking].session;
    h.one(Command::Client(ClientCommand {
        show,
        session: owner,
        key: IdempotencyKey(u128::from(booking.0) + 77),
        request: ClientRequest::CancelBooking { booking },
    }))
    .unwrap();
}

#[test]
fn joining_needs_a_sold_out_show_and_one_active_entry_per_session() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 2);
    assert_eq!(
        code(&h.client(show, 1, 1, ClientRequest::JoinWaitlist { quantity: 1, band: 0 })),
        "waitlist_disabled"
    );
    h.operator(OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 })
        .unwrap();
    assert_eq!(
        h.client(show, 1, 2, ClientRequest::JoinWaitlist { quantity: 1, band: 0 }),
        Err(Rejection::NotSoldOut { free: 2 })
    );
    // With one free seat, a party of two may wait.
    h.held(show, 9, 1, &[0]);
    let entry = join_waitlist(&mut h, show, 1, 2, 0);
    assert_eq!(
        h.client(show, 1, 3, ClientRequest::JoinWaitlist { quantity: 2, band: 0 }),
        Err(Rejection::AlreadyOnWaitlist { entry })
    );
    assert_eq!(
        code(&h.client(show, 2, 1, ClientRequest::JoinWaitlist { quantity: 11, band: 0 })),
        "invalid_argument"
    );
    assert_eq!(
        code(&h.client(show, 2, 1, ClientRequest::JoinWaitlist { quantity: 1, band: 8 })),
        "invalid_argument"
    );
}

#[test]
fn a_cancelled_booking_is_offered_to_the_head_of_the_waitlist() {
    let mut h = Harness::new();
    let (show, bookings) = sold_out_show(&mut h, 3);
    let first = join_waitlist(&mut h, show, 1, 1, 0);
    h.advance(1);
    let second = join_waitlist(&mut h, show, 2, 1, 0);
    let view = h.group.waitlist_entry(show, second, Some(session(2))).unwrap();
    assert_eq!(view.ahead, 1);
    cancel_booking(&mut h, show, bookings[1]);
    let made = offers(&h);
    assert_eq!(made.len(), 1);
    let (offer, to, offered) = made[0].clone();
    assert_eq!((to, offered.clone()), (session(1), seats(&[1])));
    assert_eq!(h.seat(show, 1), Seat::Offered(offer));
    assert_eq!(h.show(show).waitlist.entries[&first].state.status(), WaitlistEntryStatus::Offered);
    // Nobody else can hold the offered seat meanwhile.
    assert_eq!(code(&h.hold(show, 3, 1, &[1])), "seat_unavailable");
    let map = h.group.seat_map(show).unwrap();
    assert_eq!(map.seats[1], SeatStatus::Reserved);
}

#[test]
fn a_double_tap_accept_returns_the_same_hold() {
    let mut h = Harness::new();
    let (show, bookings) = sold_out_show(&mut h, 2);
    join_waitlist(&mut h, show, 1, 1, 0);
    cancel_booking(&mut h, show, bookings[0]);
    let (offer, _, _) = offers(&h)[0].clone();
    assert_eq!(code(&h.client(show, 2, 1, ClientRequest::AcceptOffer { offer })), "not_owner");
    let outcomes = h.apply(vec![
        Harness::client_command(show, 1, 1, ClientRequest::AcceptOffer { offer }),
        Harness::client_command(show, 1, 1, ClientRequest::AcceptOffer { offer }),
        Harness::client_command(show, 1, 2, ClientRequest::AcceptOffer { offer }),
    ]);
    let Ok(Reply::OfferAccepted { hold, .. }) = &outcomes[0] else { panic!("{outcomes:?}") };
    assert_eq!(outcomes[1], outcomes[0], "same key: the stored outcome");
    assert_eq!(outcomes[2], outcomes[0], "another key: the offer is already this hold");
    assert_eq!(h.seat(show, 0), Seat::Held(hold.hold));
    assert_eq!(h.show(show).holds.values().filter(|hold| hold.offer == Some(offer)).count(), 1);
    // The hold from an offer is paid like any other.
    let (payment, price) = h.checkout(show, 1, 3, hold.hold);
    let paid = h.pay_ok(show, payment, 9, price).unwrap();
    assert!(matches!(paid, Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { .. }, .. }));
}

#[test]
fn accepting_an_expired_offer_fails_and_the_next_waiter_gets_the_seat() {
    let mut h = Harness::new();
    let (show, bookings) = sold_out_show(&mut h, 2);
    let first = join_waitlist(&mut h, show, 1, 1, 0);
    let second = join_waitlist(&mut h, show, 2, 1, 0);
    cancel_booking(&mut h, show, bookings[0]);
    let (offer, _, _) = offers(&h)[0].clone();
    h.advance(10 * MINUTE);
    assert_eq!(code(&h.client(show, 1, 1, ClientRequest::AcceptOffer { offer })), "offer_expired");
    assert_eq!(h.group.offer(show, offer, None).unwrap().state, OfferStatus::Expired);
    h.tick().unwrap();
    assert_eq!(h.show(show).waitlist.entries[&first].state.status(), WaitlistEntryStatus::Expired);
    assert_eq!(h.show(show).waitlist.entries[&second].state.status(), WaitlistEntryStatus::Offered);
    let made = offers(&h);
    assert_eq!(made.len(), 2);
    assert_eq!((made[1].1, made[1].2.clone()), (session(2), seats(&[0])));
    assert_eq!(code(&h.client(show, 1, 2, ClientRequest::AcceptOffer { offer })), "offer_expired");
}

#[test]
fn declining_moves_the_chance_to_the_next_waiter() {
    let mut h = Harness::new();
    let (show, bookings) = sold_out_show(&mut h, 2);
    join_waitlist(&mut h, show, 1, 1, 0);
    join_waitlist(&mut h, show, 2, 1, 0);
    cancel_booking(&mut h, show, bookings[0]);
    let (offer, _, _) = offers(&h)[0].clone();
    h.client(show, 1, 1, ClientRequest::DeclineOffer { offer }).unwrap();
    assert_eq!(
        h.client(show, 1, 2, ClientRequest::DeclineOffer { offer }),
        Ok(Reply::OfferDeclined { offer })
    );
    assert_eq!(
        code(&h.client(show, 1, 3, ClientRequest::AcceptOffer { offer })),
        "offer_not_active"
    );
    let made = offers(&h);
    assert_eq!(made[1].1, session(2));
}

#[test]
fn leaving_while_offered_declines_and_leaving_while_waiting_leaves() {
    let mut h = Harness::new();
    let (show, bookings) = sold_out_show(&mut h, 2);
    let first = join_waitlist(&mut h, show, 1, 1, 0);
    let second = join_waitlist(&mut h, show, 2, 1, 0);
    let third = join_waitlist(&mut h, show, 3, 1, 0);
    h.client(show, 2, 1, ClientRequest::LeaveWaitlist { entry: second }).unwrap();
    cancel_booking(&mut h, show, bookings[0]);
    h.client(show, 1, 1, ClientRequest::LeaveWaitlist { entry: first }).unwrap();
    let entries = &h.show(show).waitlist.entries;
    assert_eq!(entries[&first].state.status(), WaitlistEntryStatus::Left);
    assert_eq!(entries[&second].state.status(), WaitlistEntryStatus::Left);
    assert_eq!(
        entries[&third].state.status(),
        WaitlistEntryStatus::Offered,
        "the seat went to the third"
    );
    assert_eq!(
        code(&h.client(show, 1, 2, ClientRequest::LeaveWaitlist { entry: first })),
        "entry_not_active"
    );
}

#[test]
fn the_head_of_the_line_is_not_skipped_for_a_smaller_request() {
    let mut h = Harness::new();
    let (show, bookings) = sold_out_show(&mut h, 3);
    let pair = join_waitlist(&mut h, show, 1, 2, 0);
    let single = join_waitlist(&mut h, show, 2, 1, 0);
    cancel_booking(&mut h, show, bookings[0]);
    assert!(offers(&h).is_empty(), "one seat does not fit the head's party of two");
    assert_eq!(h.seat(show, 0), Seat::Pooled);
    cancel_booking(&mut h, show, bookings[2]);
    let made = offers(&h);
    assert_eq!(made.len(), 1);
    assert_eq!((made[0].1, made[0].2.clone()), (session(1), seats(&[0, 2])));
    assert_eq!(h.show(show).waitlist.entries[&single].state.status(), WaitlistEntryStatus::Waiting);
    assert_eq!(h.show(show).waitlist.entries[&pair].state.status(), WaitlistEntryStatus::Offered);
}

#[test]
fn a_duplicate_capacity_event_is_a_no_op() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 4);
    for seat in 0..2 {
        book(&mut h, show, 100 + u64::from(seat), &[seat]);
    }
    h.operator(OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 })
        .unwrap();
    // Two free seats, parties of three wait.
    join_waitlist(&mut h, show, 1, 3, 0);
    join_waitlist(&mut h, show, 2, 3, 0);
    let release =
        OperatorCommand::CapacityReleased { show, event: CapacityEventId(5), seats: vec![3, 2] };
    assert_eq!(
        h.operator(release.clone()),
        Ok(Reply::CapacityReleased {
            event: CapacityEventId(5),
            seats_released: 2,
            duplicate: false
        })
    );
    let before = h.show(show).clone();
    assert_eq!(
        h.operator(release),
        Ok(Reply::CapacityReleased {
            event: CapacityEventId(5),
            seats_released: 0,
            duplicate: true
        })
    );
    assert_eq!(h.show(show), &before);
    let taken =
        OperatorCommand::CapacityReleased { show, event: CapacityEventId(6), seats: vec![0] };
    assert_eq!(code(&h.operator(taken)), "seat_unavailable");
    let twice =
        OperatorCommand::CapacityReleased { show, event: CapacityEventId(7), seats: vec![1, 1] };
    assert_eq!(code(&h.operator(twice)), "invalid_argument");
}

#[test]
fn a_higher_priority_band_goes_first_and_the_audit_says_why() {
    let mut h = Harness::new();
    let (show, bookings) = sold_out_show(&mut h, 2);
    let bands = WaitlistRules { ordering: WaitlistOrdering::Bands, wave_offers_max: 0 };
    let set = OperatorCommand::ConfigureWaitlistPolicy { show, policy_version: 2, rules: bands };
    h.operator(set).unwrap();
    let early = join_waitlist(&mut h, show, 1, 1, 1);
    h.advance(MINUTE);
    let vip = join_waitlist(&mut h, show, 2, 1, 0);
    cancel_booking(&mut h, show, bookings[0]);
    assert_eq!(offers(&h)[0].1, session(2), "band 0 is served before an earlier band 1");
    // "Why did someone after me get a spot?"
    let skips = h.group.waitlist_skips(show, early, Some(session(1))).unwrap();
    assert_eq!(skips.len(), 1);
    assert_eq!(skips[0].entry, vip);
    assert!(skips[0].was_ahead);
    assert_eq!(skips[0].order.band, 0);
    let trail = h.group.audit_trail(show, EntityKind::WaitlistEntry, vip.0);
    let promotion = trail.last().unwrap();
    assert_eq!((promotion.to, promotion.reason), (StateName::Offered, Reason::NextInLine));
    assert_eq!(promotion.order.unwrap().band, 0);
    assert_eq!(promotion.policy_version, 2);
    assert_eq!(skips[0].rules, bands);
}

#[test]
fn turning_the_waitlist_off_ends_waiting_entries_and_frees_the_pool() {
    let mut h = Harness::new();
    let (show, bookings) = sold_out_show(&mut h, 2);
    let entry = join_waitlist(&mut h, show, 1, 2, 0);
    cancel_booking(&mut h, show, bookings[0]);
    assert_eq!(h.seat(show, 0), Seat::Pooled);
    h.operator(OperatorCommand::ConfigureWaitlist { show, enabled: false, policy_version: 1 })
        .unwrap();
    assert_eq!(h.show(show).waitlist.entries[&entry].state.status(), WaitlistEntryStatus::Left);
    assert_eq!(h.seat(show, 0), Seat::Free);
    let back = OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 0 };
    assert_eq!(code(&h.operator(back)), "invalid_argument");
}

// ---------------------------------------------------------------------------------------------
// Audit, outbox, reads, batches

#[test]
fn the_audit_trail_records_every_transition_of_a_hold() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    let created_index = h.index;
    let (payment, price) = h.checkout(show, 1, 2, receipt.hold);
    h.advance(1_000);
    h.pay_ok(show, payment, 1, price).unwrap();
    let trail = h.group.audit_trail(show, EntityKind::Hold, receipt.hold.0);
    let steps: Vec<_> =
        trail.iter().map(|record| (record.from, record.to, record.reason, record.actor)).collect();
    assert_eq!(
        steps,
        vec![
            (None, StateName::Held, Reason::Requested, Actor::Session(session(1))),
            (
                Some(StateName::Held),
                StateName::Processing,
                Reason::CheckoutStarted,
                Actor::Session(session(1))
            ),
            (
                Some(StateName::Processing),
                StateName::Confirmed,
                Reason::PaymentSucceeded,
                Actor::Provider
            ),
        ]
    );
    assert_eq!(trail[0].log_index, created_index);
    assert_eq!(trail[2].log_time_ms, h.now);
    let payment_trail = h.group.audit_trail(show, EntityKind::Payment, payment.0);
    assert_eq!(payment_trail.last().unwrap().to, StateName::Succeeded);
}

#[test]
fn outbox_ids_increase_and_ack_trims_delivered_events() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    for n in 0..3 {
        h.held(show, n, 1, &[n as SeatNo]);
    }
    h.advance(5 * MINUTE);
    h.tick().unwrap();
    let ids: Vec<u64> = h.group.outbox().pending().map(|event| event.id.0).collect();
    assert_eq!(ids, vec![1, 2, 3]);
    assert_eq!(
        h.one(Command::AckOutbox { up_to: 2 }),
        Ok(Reply::OutboxAcked { up_to: 2, trimmed: 2 })
    );
    assert_eq!(h.group.outbox().len(), 1);
    assert_eq!(code(&h.one(Command::AckOutbox { up_to: 9 })), "invalid_argument");
    assert_eq!(
        h.one(Command::AckOutbox { up_to: 2 }),
        Ok(Reply::OutboxAcked { up_to: 2, trimmed: 0 })
    );
}

#[test]
fn the_seat_map_is_labelled_as_of_and_shows_overdue_holds_as_free() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 4);
    h.held(show, 1, 1, &[0]);
    book(&mut h, show, 2, &[1]);
    let map = h.group.seat_map(show).unwrap();
    assert_eq!(
        map.seats,
        vec![SeatStatus::Held, SeatStatus::Booked, SeatStatus::Free, SeatStatus::Free]
    );
    assert_eq!(map.as_of, AsOf { log_index: h.index, log_time_ms: h.now });
    // Overdue but not yet expired by a tick (another entry moved log time on): free already,
    // while a live hold whose deadline is ahead still reads held.
    h.advance(5 * MINUTE);
    h.held(show, 3, 3, &[2]);
    let map = h.group.seat_map(show).unwrap();
    assert!(matches!(h.group.show(show).unwrap().seats[0], statemachine::Seat::Held(_)));
    assert_eq!(
        map.seats,
        vec![SeatStatus::Free, SeatStatus::Booked, SeatStatus::Held, SeatStatus::Free]
    );
    h.tick().unwrap();
    let map = h.group.seat_map(show).unwrap();
    assert_eq!(map.seats[0], SeatStatus::Free);
    assert_eq!(map.price_version, 1);
}

#[test]
fn reads_of_another_sessions_objects_are_not_owner() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 4);
    let receipt = h.held(show, 1, 1, &[0]);
    assert_eq!(
        h.group.hold(show, receipt.hold, Some(session(2))).unwrap_err(),
        Rejection::NotOwner
    );
    assert!(h.group.hold(show, receipt.hold, Some(session(1))).is_ok());
    assert!(h.group.hold(show, receipt.hold, None).is_ok(), "operators read everything");
    assert_eq!(h.group.hold(show, HoldId(77), None).unwrap_err(), Rejection::HoldNotFound);
}

#[test]
fn one_bad_command_never_affects_the_others_in_its_batch() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let outcomes = h.apply(vec![
        Harness::client_command(show, 1, 1, Harness::hold_request(&[1], None)),
        Harness::client_command(show, 2, 1, Harness::hold_request(&[99], None)),
        Harness::client_command(ShowId(5), 3, 1, Harness::hold_request(&[2], None)),
        Harness::client_command(show, 4, 1, Harness::hold_request(&[1], None)),
        Harness::client_command(show, 5, 1, Harness::hold_request(&[2], None)),
    ]);
    let codes: Vec<_> = outcomes.iter().map(code).collect();
    assert_eq!(codes, vec!["ok", "seat_out_of_range", "show_not_found", "seat_unavailable", "ok"]);
}

#[test]
fn an_oversized_batch_is_rejected_whole() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let commands = vec![Command::Tick; limits::BATCH_COMMANDS_MAX + 1];
    let outcomes = h.apply(commands);
    assert_eq!(outcomes.len(), limits::BATCH_COMMANDS_MAX + 1);
    assert!(outcomes.iter().all(|outcome| code(outcome) == "invalid_argument"));
    h.held(show, 1, 1, &[1]);
}

#[test]
fn log_time_never_goes_back_and_replayed_entries_change_nothing() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1]);
    let before = h.group.clone();
    // A leader with a slow clock stamps an earlier time: log time stays where it was.
    h.now -= 60_000;
    h.tick().unwrap();
    assert_eq!(h.group.log_time_ms(), before.log_time_ms());
    // An entry at or below the applied index is ignored.
    let old = h.log[2].clone();
    let mut replayed = h.group.clone();
    assert!(replayed.apply(&old).is_empty());
    assert_eq!(replayed, h.group);
    assert_eq!(h.hold_state(show, receipt.hold), HoldStatus::Held);
}

#[test]
fn snapshots_restore_the_group_exactly_and_refuse_garbage() {
    let mut h = Harness::new();
    let (show, bookings) = sold_out_show(&mut h, 3);
    join_waitlist(&mut h, show, 1, 1, 0);
    cancel_booking(&mut h, show, bookings[0]);
    let bytes = h.group.encode_snapshot();
    let restored = Group::decode_snapshot(&bytes).unwrap();
    assert_eq!(restored, h.group);
    assert_eq!(restored.digest(), h.group.digest());
    assert!(matches!(Group::decode_snapshot(b"nope"), Err(SnapshotError::BadMagic)));
    let mut newer = bytes.clone();
    newer[4] = 99;
    assert!(matches!(Group::decode_snapshot(&newer), Err(SnapshotError::UnsupportedVersion(99))));
    assert!(Group::decode_snapshot(&bytes[..bytes.len() - 1]).is_err());
}

#[test]
fn the_window_cannot_shrink_below_the_grants_already_outstanding() {
    let mut h = Harness::new();
    let show = lane_show(&mut h, 3);
    for who in 1..=3 {
        join_queue(&mut h, show, who);
    }
    let shrink = OperatorCommand::ConfigureAdmission { show, enabled: true, window: 1 };
    assert_eq!(code(&h.operator(shrink.clone())), "invalid_argument");
    assert_eq!(h.show(show).lane.window, 3);
    // Once the grants ran out, the window may shrink.
    h.advance(MINUTE);
    h.operator(shrink).unwrap();
    assert_eq!(h.show(show).lane.window, 1);
    assert!(h.show(show).lane.granted.is_empty());
}

#[test]
fn a_show_is_placed_once_and_its_placement_never_moves() {
    let mut h = Harness::new();
    let show = ShowId(7);
    let placed = h.one(Command::Place { show, group: 2 }).unwrap();
    assert_eq!(placed, Reply::Placed { show, group: 2 });
    // Placing it again in the same group is an idempotent success.
    assert_eq!(h.one(Command::Place { show, group: 2 }).unwrap(), placed);
    // Another group is refused, and changes nothing.
    let before = h.group.placement().clone();
    assert_eq!(code(&h.one(Command::Place { show, group: 3 })), "show_exists");
    assert_eq!(h.group.placement(), &before);
    assert_eq!(h.group.placement().group_of(show), Some(2));
    assert_eq!(h.group.placement().shows_per_group(), [(2, 1)].into());
}

#[test]
fn shows_are_never_placed_in_the_metadata_group_or_under_id_zero() {
    let mut h = Harness::new();
    assert_eq!(
        code(&h.one(Command::Place { show: ShowId(1), group: METADATA_GROUP })),
        "invalid_argument"
    );
    assert_eq!(code(&h.one(Command::Place { show: ShowId(0), group: 1 })), "invalid_argument");
    assert!(h.group.placement().is_empty());
}

#[test]
fn has_due_says_whether_a_tick_would_do_anything() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    let receipt = h.held(show, 1, 1, &[1, 2]);
    assert!(!h.group.has_due(h.group.log_time_ms()));
    assert!(h.group.has_due(receipt.deadline_ms));
    h.advance(receipt.deadline_ms - h.group.log_time_ms());
    assert!(matches!(h.tick().unwrap(), Reply::Ticked { expired: 1, more: false }));
    assert!(!h.group.has_due(receipt.deadline_ms));
}

/// A write's answer carries the entity as the entry that decided it left it: a hold and a
/// join in one entry each answer their view, as of that entry; a rejection and a tick carry
/// none; a retry carries the entity as it is now.
#[test]
fn a_write_answers_the_view_of_what_it_wrote() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 3);
    h.index += 1;
    let entry = Entry {
        index: h.index,
        time_ms: h.now,
        commands: vec![
            Harness::client_command(show, 1, 1, Harness::hold_request(&[0, 1], None)),
            Harness::client_command(show, 2, 1, Harness::hold_request(&[1], None)),
            Command::Tick,
        ],
    };
    let answers = h.group.apply_answering(&entry);
    let [held, refused, tick] = answers.as_slice() else { panic!("{answers:?}") };
    let Some(Ok(Written::Hold(view))) = held.written.as_deref() else { panic!("{held:?}") };
    let Ok(Reply::Held(receipt)) = &held.outcome else { panic!("{held:?}") };
    assert_eq!(view, &h.group.hold(show, receipt.hold, Some(session(1))).unwrap());
    assert_eq!((view.state, view.as_of.log_index), (HoldStatus::Held, h.index));
    assert!(matches!(refused.outcome, Err(Rejection::SeatUnavailable { .. })), "{refused:?}");
    assert_eq!((&refused.written, &tick.written), (&None, &None));

    // The same request again: the stored reply, and the hold as it is now (processing).
    h.checkout(show, 1, 2, receipt.hold);
    h.index += 1;
    let retry = Entry {
        index: h.index,
        time_ms: h.now,
        commands: vec![Harness::client_command(show, 1, 1, Harness::hold_request(&[0, 1], None))],
    };
    let [again] = h.group.apply_answering(&retry).try_into().expect("one answer");
    assert_eq!(again.outcome, held.outcome);
    let Some(Ok(Written::Hold(now))) = again.written.as_deref() else { panic!("{again:?}") };
    assert_eq!(now.state, HoldStatus::Processing);
}

// ---------------------------------------------------------------------------------------------
// Outbox delivery to sinks

fn sink(name: &str) -> SinkName {
    SinkName::new(name).unwrap()
}

fn deliver(sink: &SinkName, delivered: &[u64], dead: &[u64]) -> Command {
    Command::Delivery(DeliveryCommand::Report {
        sink: sink.clone(),
        delivered: delivered.iter().copied().map(OutboxId).collect(),
        dead: dead
            .iter()
            .map(|event| Failure { event: OutboxId(*event), attempts: 8, error: "HTTP 503".into() })
            .collect(),
    })
}

/// A group with `events` outbox events (expired holds, one per seat) on a show of 20 seats.
fn with_events(events: u64) -> Harness {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 20);
    for n in 0..events {
        h.held(show, n, 1, &[n as SeatNo]);
    }
    h.advance(5 * MINUTE);
    h.tick().unwrap();
    assert_eq!(h.group.outbox().last_id(), events);
    h
}

fn pending_ids(h: &Harness) -> Vec<u64> {
    h.group.outbox().pending().map(|event| event.id.0).collect()
}

#[test]
fn an_event_leaves_the_outbox_once_every_sink_is_done_with_it() {
    let mut h = with_events(4);
    let (a, b) = (sink("a"), sink("b"));
    let add = |sink: &SinkName| Command::Delivery(DeliveryCommand::AddSink { sink: sink.clone() });
    assert_eq!(
        h.one(add(&a)),
        Ok(Reply::SinkAdded { sink: a.clone(), owed_from: 1, duplicate: false })
    );
    h.one(add(&b)).unwrap();
    assert_eq!(
        h.one(add(&a)),
        Ok(Reply::SinkAdded { sink: a.clone(), owed_from: 1, duplicate: true })
    );
    // Sink a finishes 1-3; b finishes 1 only: the outbox keeps what b still needs.
    assert_eq!(
        h.one(deliver(&a, &[1, 2, 3], &[])),
        Ok(Reply::DeliveryRecorded {
            sink: a.clone(),
            done_up_to: 3,
            delivered: 3,
            dead_lettered: 0,
            trimmed: 0
        })
    );
    let recorded = h.one(deliver(&b, &[1], &[])).unwrap();
    assert!(matches!(recorded, Reply::DeliveryRecorded { done_up_to: 1, trimmed: 1, .. }));
    assert_eq!(pending_ids(&h), [2, 3, 4]);
    // An acknowledgement cannot trim past what a sink needs.
    assert_eq!(
        h.one(Command::AckOutbox { up_to: 4 }),
        Ok(Reply::OutboxAcked { up_to: 1, trimmed: 0 })
    );
    assert_eq!(pending_ids(&h), [2, 3, 4]);
    // Removing b leaves a's needs: 4.
    assert_eq!(
        h.one(Command::Delivery(DeliveryCommand::RemoveSink { sink: b.clone() })),
        Ok(Reply::SinkRemoved { sink: b.clone(), dead_letters_dropped: 0, trimmed: 2 })
    );
    assert_eq!(pending_ids(&h), [4]);
    // A sink added now is owed what is still in the outbox, and everything after.
    assert_eq!(
        h.one(add(&b)),
        Ok(Reply::SinkAdded { sink: b.clone(), owed_from: 4, duplicate: false })
    );
    h.group.check_invariants().unwrap();
}

#[test]
fn a_report_repeated_by_a_new_leader_changes_nothing() {
    let mut h = with_events(3);
    let a = sink("a");
    h.one(Command::Delivery(DeliveryCommand::AddSink { sink: a.clone() })).unwrap();
    h.one(deliver(&a, &[1, 2], &[3])).unwrap();
    let before = h.group.clone();
    let again = h.one(deliver(&a, &[1, 2], &[3])).unwrap();
    assert!(matches!(
        again,
        Reply::DeliveryRecorded { delivered: 0, dead_lettered: 0, trimmed: 0, .. }
    ));
    assert_eq!(h.group.delivery(), before.delivery());
    assert_eq!(h.group.outbox(), before.outbox());
}

#[test]
fn events_finished_out_of_order_move_the_position_once_the_gap_closes() {
    // Another show's events may be delivered before the first show's next one.
    let mut h = with_events(5);
    let a = sink("a");
    h.one(Command::Delivery(DeliveryCommand::AddSink { sink: a.clone() })).unwrap();
    let done_up_to = |h: &Harness| h.group.delivery().sink(&sink("a")).unwrap().done_up_to;
    h.one(deliver(&a, &[2, 4], &[])).unwrap();
    assert_eq!(done_up_to(&h), 0);
    assert_eq!(pending_ids(&h), [1, 2, 3, 4, 5]);
    h.one(deliver(&a, &[1], &[])).unwrap();
    assert_eq!(done_up_to(&h), 2);
    h.one(deliver(&a, &[3], &[])).unwrap();
    assert_eq!(done_up_to(&h), 4);
    assert_eq!(pending_ids(&h), [5]);
    h.group.check_invariants().unwrap();
}

#[test]
fn a_dead_letter_keeps_its_event_until_a_replay_is_delivered() {
    let mut h = with_events(3);
    let a = sink("a");
    h.one(Command::Delivery(DeliveryCommand::AddSink { sink: a.clone() })).unwrap();
    let recorded = h.one(deliver(&a, &[1, 3], &[2])).unwrap();
    assert!(matches!(
        recorded,
        Reply::DeliveryRecorded { done_up_to: 3, dead_lettered: 1, trimmed: 3, .. }
    ));
    // The outbox let the event go; the dead letter kept it.
    assert!(h.group.outbox().is_empty());
    let letter = &h.group.delivery().sink(&a).unwrap().dead_letters[&2];
    assert_eq!((letter.event.id, letter.attempts, letter.replay), (OutboxId(2), 8, false));
    assert_eq!(letter.error, "HTTP 503");
    // A delivery report of a letter nobody asked to replay is a stale repeat: ignored.
    h.one(deliver(&a, &[2], &[])).unwrap();
    assert!(h.group.delivery().sink(&a).unwrap().dead_letters.contains_key(&2));
    // Replay: unknown letters are refused whole; then asked, failed again, asked, delivered.
    let replay = |events: &[u64]| {
        Command::Delivery(DeliveryCommand::Replay {
            sink: sink("a"),
            events: events.iter().copied().map(OutboxId).collect(),
        })
    };
    assert_eq!(code(&h.one(replay(&[2, 1]))), "dead_letter_not_found");
    assert!(!h.group.delivery().sink(&a).unwrap().dead_letters[&2].replay);
    assert_eq!(h.one(replay(&[])), Ok(Reply::ReplayRequested { sink: a.clone(), events: 1 }));
    h.one(deliver(&a, &[], &[2])).unwrap();
    let letter = &h.group.delivery().sink(&a).unwrap().dead_letters[&2];
    assert_eq!((letter.attempts, letter.replay), (16, false));
    h.one(replay(&[2])).unwrap();
    let recorded = h.one(deliver(&a, &[2], &[])).unwrap();
    assert!(matches!(recorded, Reply::DeliveryRecorded { delivered: 1, .. }));
    let found = h.group.delivery().sink(&a).unwrap();
    assert!(found.dead_letters.is_empty());
    assert_eq!((found.delivered_total, found.dead_lettered_total), (3, 1));
    h.group.check_invariants().unwrap();
}

#[test]
fn bad_delivery_commands_are_refused_and_change_nothing() {
    let mut h = with_events(3);
    let a = sink("a");
    h.one(Command::Delivery(DeliveryCommand::AddSink { sink: a.clone() })).unwrap();
    let before = h.group.clone();
    for (command, expected) in [
        (deliver(&a, &[4], &[]), "invalid_argument"),
        (deliver(&a, &[0], &[]), "invalid_argument"),
        (deliver(&a, &[1, 1], &[]), "invalid_argument"),
        (deliver(&a, &[1], &[1]), "invalid_argument"),
        (deliver(&a, &[1], &[9]), "invalid_argument"),
        (deliver(&sink("b"), &[1], &[]), "sink_not_found"),
        (Command::Delivery(DeliveryCommand::RemoveSink { sink: sink("b") }), "sink_not_found"),
        (
            Command::Delivery(DeliveryCommand::Replay { sink: sink("b"), events: Vec::new() }),
            "sink_not_found",
        ),
        (
            Command::Delivery(DeliveryCommand::Report {
                sink: a.clone(),
                delivered: (1..=4_097).map(OutboxId).collect(),
                dead: Vec::new(),
            }),
            "invalid_argument",
        ),
    ] {
        assert_eq!(code(&h.one(command.clone())), expected, "{command:?}");
        assert_eq!(h.group.delivery(), before.delivery());
        assert_eq!(h.group.outbox(), before.outbox());
    }
    for name in ["", "A", "a b", "sink/1", &"x".repeat(33)] {
        assert!(SinkName::new(name).is_err(), "{name:?}");
    }
    // A name that the checks refuse cannot be decoded either.
    assert!(serde_json::from_str::<SinkName>("\"Bad\"").is_err());
}

#[test]
fn a_sink_keeps_at_most_its_dead_letter_limit_and_counts_what_it_dropped() {
    use statemachine::limits::{DEAD_LETTERS_PER_SINK_MAX, DELIVERY_REPORT_EVENTS_MAX};
    let events = DEAD_LETTERS_PER_SINK_MAX as u64 + 2;
    let mut h = Harness::new();
    let show = h.on_sale_show(1, events as u32);
    let a = sink("a");
    h.one(Command::Delivery(DeliveryCommand::AddSink { sink: a.clone() })).unwrap();
    // One expired hold, so one event, per seat: holds made in a few large entries.
    let holds: Vec<Command> = (0..events)
        .map(|n| Harness::client_command(show, n, 1, Harness::hold_request(&[n as SeatNo], None)))
        .collect();
    for batch in holds.chunks(4_096) {
        assert!(h.apply(batch.to_vec()).iter().all(Result::is_ok));
    }
    h.advance(5 * MINUTE);
    assert!(matches!(h.tick(), Ok(Reply::Ticked { more: false, .. })));
    assert_eq!(h.group.outbox().len() as u64, events);
    // Every event is given up on, oldest first.
    let ids: Vec<u64> = (1..=events).collect();
    for chunk in ids.chunks(DELIVERY_REPORT_EVENTS_MAX) {
        h.one(deliver(&a, &[], chunk)).unwrap();
    }
    let found = h.group.delivery().sink(&a).unwrap();
    assert_eq!(found.dead_letters.len(), DEAD_LETTERS_PER_SINK_MAX);
    assert_eq!((found.dead_lettered_total, found.dead_letters_dropped), (events, 2));
    // The oldest went first.
    assert_eq!(found.dead_letters.keys().next(), Some(&3));
    assert!(h.group.outbox().is_empty());
}

#[test]
fn a_leader_digest_is_kept_once_per_entry_and_only_for_applied_entries() {
    let mut h = with_events(2);
    let applied = h.group.applied_index();
    let digest = |index, byte| Command::AuditDigest { index, digest: [byte; 32] };
    assert_eq!(
        h.one(digest(applied, 1)),
        Ok(Reply::DigestRecorded { index: applied, duplicate: false, matches: true })
    );
    // Another leader's digest of the same entry: the first stays, and the answer says whether
    // they agree.
    assert_eq!(
        h.one(digest(applied, 2)),
        Ok(Reply::DigestRecorded { index: applied, duplicate: true, matches: false })
    );
    assert_eq!(h.group.digests().at(applied), Some(&[1; 32]));
    // Not an entry applied before the one carrying the command: refused, nothing kept.
    for ahead in [None, Some(1), Some(6)] {
        // 0, the entry carrying the command itself, or one not applied yet.
        let index = ahead.map_or(0, |ahead| h.group.applied_index() + ahead);
        assert_eq!(code(&h.one(digest(index, 3))), "invalid_argument", "{index}");
    }
    // Only the newest are kept.
    for _ in 0..statemachine::limits::AUDIT_DIGESTS_KEPT {
        let last = h.group.applied_index();
        h.one(digest(last, 4)).unwrap();
    }
    assert_eq!(h.group.digests().iter().count(), statemachine::limits::AUDIT_DIGESTS_KEPT);
    assert_eq!(h.group.digests().at(applied), None);
    h.group.check_invariants().unwrap();
}
