//! Bugs found by the property and fuzz tests (tests/properties.rs, tests/fuzz.rs), one named
//! test each, so that a fix cannot silently come undone.

mod common;

use common::*;
use statemachine::*;

/// Found by `properties::rejected_commands_change_nothing`: cancelling a show withdrew an open
/// waitlist offer without telling its waiter (no `ShowCancelled` event, not counted in
/// `waiters_told`), although a cancellation tells every holder, booker and waiter.
#[test]
fn show_cancellation_tells_a_waiter_holding_an_open_offer() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 12);
    h.operator(OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 })
        .unwrap();
    let first = h.held(show, 10, 1, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    h.held(show, 11, 1, &[10, 11]);
    let joined = h.client(show, 1, 1, ClientRequest::JoinWaitlist { quantity: 2, band: 0 });
    assert!(matches!(joined, Ok(Reply::WaitlistJoined { .. })), "{joined:?}");
    // The released seats are offered to the waiter.
    h.client(show, 10, 2, ClientRequest::CancelHold { hold: first.hold }).unwrap();
    let entry = h.show(show).waitlist.active_by_session[&session(1)];
    assert_eq!(h.show(show).waitlist.entries[&entry].state.status(), WaitlistEntryStatus::Offered);

    let reply = h.operator(OperatorCommand::CancelShow { show }).unwrap();
    assert_eq!(
        reply,
        Reply::ShowCancelled {
            show,
            holds_released: 1,
            bookings_refunded: 0,
            waiters_told: 1,
            duplicate: false
        }
    );
    let told: Vec<SessionId> = h
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::ShowCancelled { session } => Some(session),
            _ => None,
        })
        .collect();
    assert_eq!(told, vec![session(1), session(11)]);
}

/// Found by `properties::random_command_sequences_keep_invariants` (its read checks): an offer
/// made earlier in the same entry in which a better-placed waiter joined was reported to that
/// waiter as a skip by someone behind it (`was_ahead: false`), because the read compared log
/// indexes, which are equal within an entry, instead of the show's id order.
#[test]
fn an_offer_made_before_a_join_in_the_same_entry_is_not_a_skip() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 12);
    h.operator(OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 })
        .unwrap();
    let bands = WaitlistRules { ordering: WaitlistOrdering::Bands, wave_offers_max: 0 };
    h.operator(OperatorCommand::ConfigureWaitlistPolicy { show, policy_version: 2, rules: bands })
        .unwrap();
    h.held(show, 10, 1, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let released = h.held(show, 11, 1, &[10, 11]);
    let joined = h.client(show, 1, 1, ClientRequest::JoinWaitlist { quantity: 2, band: 2 });
    assert!(matches!(joined, Ok(Reply::WaitlistJoined { .. })), "{joined:?}");
    // One entry: the release makes an offer to session 1, then session 2 joins in a better band.
    let outcomes = h.apply(vec![
        Harness::client_command(show, 11, 2, ClientRequest::CancelHold { hold: released.hold }),
        Harness::client_command(show, 2, 1, ClientRequest::JoinWaitlist { quantity: 3, band: 0 }),
    ]);
    let Ok(Reply::WaitlistJoined { entry, ahead: 0 }) = outcomes[1] else {
        panic!("expected to join first in line, got {outcomes:?}");
    };
    assert_eq!(h.show(show).waitlist.offers.len(), 1, "session 1 got an offer");
    assert_eq!(h.group.waitlist_skips(show, entry, None), Ok(Vec::new()));
}

/// Found by `properties::each_command_keeps_its_promises`: a session whose holds had all passed
/// their deadline was refused a new hold with `too_many_holds` until a tick expired them, though
/// a command that meets an overdue hold treats it as expired (DESIGN.md "Time").
#[test]
fn overdue_holds_do_not_count_against_the_per_session_limit() {
    let mut h = Harness::new();
    let mut show_spec = spec(1, 10);
    show_spec.policy.holds_per_session_max = 1;
    h.operator(OperatorCommand::CreateShow(show_spec)).unwrap();
    let show = ShowId(1);
    h.operator(OperatorCommand::OpenSales { show }).unwrap();
    let first = h.held(show, 1, 1, &[0]);
    assert_eq!(code(&h.hold(show, 1, 2, &[1])), "too_many_holds");
    h.now = first.deadline_ms;
    // No tick yet: the first hold is overdue, so the session may hold again.
    let second = h.held(show, 1, 3, &[1]);
    assert_eq!(code(&h.hold(show, 1, 4, &[2])), "too_many_holds");
    h.tick().unwrap();
    assert_eq!(h.hold_state(show, first.hold), HoldStatus::Expired);
    assert_eq!(h.hold_state(show, second.hold), HoldStatus::Held);
}

/// Found by the fuzz test: a leader stamp near `u64::MAX` made deadlines wrap in release builds,
/// so a hold was born expired and a second buyer got the same seats. Stamps are now clamped.
#[test]
fn a_broken_leader_clock_cannot_make_deadlines_wrap() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 10);
    h.now = u64::MAX - 1_000;
    let first = h.held(show, 1, 1, &[3]);
    assert_eq!(h.group.log_time_ms(), limits::LOG_TIME_MS_MAX);
    assert!(first.deadline_ms > limits::LOG_TIME_MS_MAX);
    assert_eq!(code(&h.hold(show, 2, 1, &[3])), "seat_unavailable");
}

/// Found by the property tests: leaving the waitlist while holding an offer that had already run
/// out (no tick yet) recorded a decline; it is the offer's expiry.
#[test]
fn leaving_with_a_lapsed_offer_records_its_expiry() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 2);
    h.operator(OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 })
        .unwrap();
    let holder = h.held(show, 9, 1, &[0, 1]);
    let joined = h.client(show, 1, 1, ClientRequest::JoinWaitlist { quantity: 1, band: 0 });
    let Ok(Reply::WaitlistJoined { entry, .. }) = joined else { panic!("{joined:?}") };
    h.client(show, 9, 2, ClientRequest::CancelHold { hold: holder.hold }).unwrap();
    assert_eq!(h.show(show).waitlist.entries[&entry].state.status(), WaitlistEntryStatus::Offered);
    h.advance(limits::OFFER_TTL_MS_DEFAULT);
    assert_eq!(
        h.client(show, 1, 2, ClientRequest::LeaveWaitlist { entry }),
        Ok(Reply::WaitlistLeft { entry })
    );
    let waiter = &h.show(show).waitlist.entries[&entry];
    let offer = waiter.offer().unwrap();
    assert_eq!(waiter.state, WaitlistEntryState::Expired { offer });
    assert_eq!(h.show(show).waitlist.offers[&offer].state, OfferState::Expired);
}

/// Found by `properties::random_command_sequences_keep_invariants` (a postcondition of
/// `capacity_released`): released seats that topped up the pool enough to serve the last waiter
/// left one seat over, which the pool freed because nobody waited any more; the postcondition
/// wanted every released seat pooled or offered.
#[test]
fn capacity_that_serves_the_last_waiter_frees_the_seat_left_over() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 14);
    h.operator(OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 })
        .unwrap();
    h.held(show, 10, 1, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let second = h.held(show, 11, 1, &[10, 11]);
    // Two seats are free, fewer than the party of three: the show counts as sold out for it.
    let joined = h.client(show, 1, 1, ClientRequest::JoinWaitlist { quantity: 3, band: 0 });
    assert!(matches!(joined, Ok(Reply::WaitlistJoined { .. })), "{joined:?}");
    h.client(show, 11, 2, ClientRequest::CancelHold { hold: second.hold }).unwrap();
    assert_eq!(h.seat(show, 10), Seat::Pooled, "two pooled seats cannot serve a party of three");

    let released = h.operator(OperatorCommand::CapacityReleased {
        show,
        event: CapacityEventId(1),
        seats: vec![12, 13],
    });
    assert_eq!(
        released,
        Ok(Reply::CapacityReleased {
            event: CapacityEventId(1),
            seats_released: 2,
            duplicate: false
        })
    );
    let offered: Vec<Seat> = (10..=12).map(|seat| h.seat(show, seat)).collect();
    assert!(offered.iter().all(|seat| matches!(seat, Seat::Offered(_))), "{offered:?}");
    assert_eq!(h.seat(show, 13), Seat::Free, "nobody waits for the seat left over");
    assert_eq!(h.group.check_invariants(), Ok(()));
}
