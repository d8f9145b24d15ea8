//! Deletion on demand: after `EraseSession` in each show it touched, nothing of a session is
//! left in the group's snapshot or in a show's archive, while its bookings, payments and audit
//! stay under a pseudonym and every other session is untouched.

mod common;

use common::*;
use statemachine::*;

/// The session erased: an id whose encodings are found only where it is.
const ERASED: SessionId = SessionId(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834);
/// The pseudonyms the node drew, one per show.
const PSEUDONYMS: [SessionId; 3] = [
    SessionId(0x1111_2222_3333_4444_5555_6666_7777_8888),
    SessionId(0x2222_3333_4444_5555_6666_7777_8888_9999),
    SessionId(0x3333_4444_5555_6666_7777_8888_9999_aaaa),
];
/// The show the session bought in, the one whose waitlist it joined, the one it queued for.
const SALE: ShowId = ShowId(1);
const WAITLIST: ShowId = ShowId(2);
const LANE: ShowId = ShowId(3);

fn by_erased(h: &mut Harness, show: ShowId, k: u64, request: ClientRequest) -> Outcome {
    h.one(Command::Client(ClientCommand { show, session: ERASED, key: key(k), request }))
}

/// The erased session buys two seats, holds and cancels a third, joins a sold-out show's
/// waitlist and a lane; session 7 does the same beside it.
fn on_sale() -> (Harness, HoldId, BookingId) {
    let mut h = Harness::new();
    h.on_sale_show(SALE.0, 20);
    h.on_sale_show(WAITLIST.0, 1);
    h.on_sale_show(LANE.0, 10);
    let waitlist_on =
        OperatorCommand::ConfigureWaitlist { show: WAITLIST, enabled: true, policy_version: 1 };
    h.operator(waitlist_on).expect("waitlist on");
    let lane_on = OperatorCommand::ConfigureAdmission { show: LANE, enabled: true, window: 1 };
    h.operator(lane_on).expect("lane on");

    let hold = match by_erased(&mut h, SALE, 1, Harness::hold_request(&[0, 1], None)) {
        Ok(Reply::Held(receipt)) => receipt.hold,
        other => panic!("expected a hold, got {other:?}"),
    };
    let (payment, price) = match by_erased(&mut h, SALE, 2, ClientRequest::Checkout { hold }) {
        Ok(Reply::CheckoutStarted { payment, price, .. }) => (payment, price),
        other => panic!("expected checkout, got {other:?}"),
    };
    let booking = match h.pay_ok(SALE, payment, 77, price) {
        Ok(Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { booking }, .. }) => booking,
        other => panic!("expected a booking, got {other:?}"),
    };
    let cancelled = match by_erased(&mut h, SALE, 3, Harness::hold_request(&[5], None)) {
        Ok(Reply::Held(receipt)) => receipt.hold,
        other => panic!("expected a hold, got {other:?}"),
    };
    by_erased(&mut h, SALE, 4, ClientRequest::CancelHold { hold: cancelled }).expect("cancelled");
    let other = h.held(SALE, 7, 1, &[9]);
    h.checkout(SALE, 7, 2, other.hold);

    h.held(WAITLIST, 7, 3, &[0]);
    let join = ClientRequest::JoinWaitlist { quantity: 1, band: 0 };
    by_erased(&mut h, WAITLIST, 5, join.clone()).expect("joined the waitlist");
    h.client(WAITLIST, 8, 1, join).expect("another joined");
    by_erased(&mut h, LANE, 6, ClientRequest::JoinQueue).expect("queued");
    h.client(LANE, 7, 4, ClientRequest::JoinQueue).expect("another queued");
    (h, hold, booking)
}

fn erase(h: &mut Harness) {
    for (show, pseudonym) in [SALE, WAITLIST, LANE].into_iter().zip(PSEUDONYMS) {
        let outcome =
            h.operator(OperatorCommand::EraseSession { show, session: ERASED, pseudonym });
        assert!(
            matches!(outcome, Ok(Reply::SessionErased { show: s, records, .. }) if s == show && records > 0),
            "{outcome:?}"
        );
    }
}

/// Whether `bytes` holds `needle` anywhere.
fn contains(bytes: &[u8], needle: &[u8]) -> bool {
    bytes.windows(needle.len()).any(|window| window == needle)
}

/// The session as the snapshot encodes it.
fn encoded(session: SessionId) -> Vec<u8> {
    postcard::to_allocvec(&session).expect("encodes")
}

/// Closes the sale, settles the other buyer's payment and acknowledges the outbox: the show
/// may be archived; its archive's bytes.
fn archive_of_sale(h: &mut Harness) -> Vec<u8> {
    h.operator(OperatorCommand::CloseSales { show: SALE }).expect("closed");
    let pending: Vec<(PaymentId, Money)> = h
        .show(SALE)
        .payments
        .values()
        .filter(|payment| !payment.state.is_final())
        .map(|payment| (payment.id, payment.price))
        .collect();
    for (at, (payment, price)) in pending.into_iter().enumerate() {
        h.pay_ok(SALE, payment, 1_000 + at as u128, price).expect("paid");
    }
    let up_to = h.group.outbox().last_id();
    h.one(Command::AckOutbox { up_to }).expect("acknowledged");
    h.group.archive_export(SALE).expect("the sale may be archived")
}

#[test]
fn nothing_of_an_erased_session_is_left_in_a_snapshot_or_an_archive() {
    // Without the erasure, the snapshot and the archive name the session: the checks below can
    // fail.
    let (mut kept, _, _) = on_sale();
    assert!(contains(&kept.group.encode_snapshot(), &encoded(ERASED)));
    assert!(contains(&archive_of_sale(&mut kept), ERASED.0.to_string().as_bytes()));

    let (mut h, hold, booking) = on_sale();
    let bookings_before = h.show(SALE).bookings.len();
    erase(&mut h);
    let snapshot = h.group.encode_snapshot();
    assert!(!contains(&snapshot, &encoded(ERASED)), "the snapshot names the erased session");
    for pseudonym in PSEUDONYMS {
        assert!(contains(&snapshot, &encoded(pseudonym)));
    }
    assert_eq!(Group::decode_snapshot(&snapshot).expect("decodes"), h.group);

    // The booking, its payment and its audit stay, under the pseudonym; the session no longer
    // reads them.
    let [sale_pseudonym, ..] = PSEUDONYMS;
    assert_eq!(h.show(SALE).bookings.len(), bookings_before);
    assert_eq!(h.group.booking(SALE, booking, Some(sale_pseudonym)).unwrap().booking.hold, hold);
    assert!(h.group.booking(SALE, booking, Some(ERASED)).is_err());
    assert!(h.group.hold(SALE, hold, Some(ERASED)).is_err());
    let trail = h.group.audit_trail(SALE, EntityKind::Hold, hold.0);
    assert!(!trail.is_empty());
    assert!(trail.iter().all(|record| record.actor != Actor::Session(ERASED)));
    assert!(trail.iter().any(|record| record.actor == Actor::Session(sale_pseudonym)));
    // Its idempotency records are gone: the same key and request is a new request now (the
    // seats are the pseudonym's, so it is refused).
    let again = by_erased(&mut h, SALE, 1, Harness::hold_request(&[0, 1], None));
    assert_eq!(code(&again), "seat_unavailable");
    // The other sessions keep their records.
    assert_eq!(h.show(SALE).holds.values().filter(|held| held.session == session(7)).count(), 1);
    assert_eq!(h.show(WAITLIST).waitlist.entries.len(), 2);
    assert_eq!(h.show(LANE).lane.tickets.values().filter(|t| t.session == session(7)).count(), 1);

    // The archive made afterwards names only the pseudonym.
    let archive = archive_of_sale(&mut h);
    assert!(!contains(&archive, ERASED.0.to_string().as_bytes()), "the archive names it");
    assert!(contains(&archive, sale_pseudonym.0.to_string().as_bytes()));
}

#[test]
fn an_erasure_is_refused_when_its_pseudonym_would_merge_two_sessions() {
    let (mut h, _, _) = on_sale();
    let before = h.group.clone();
    let erase =
        |show, pseudonym| OperatorCommand::EraseSession { show, session: ERASED, pseudonym };
    assert_eq!(code(&h.operator(erase(SALE, ERASED))), "invalid_argument");
    assert_eq!(code(&h.operator(erase(SALE, session(7)))), "invalid_argument");
    assert_eq!(code(&h.operator(erase(ShowId(99), PSEUDONYMS[0]))), "show_not_found");
    assert_eq!(h.group.shows().collect::<Vec<_>>(), before.shows().collect::<Vec<_>>());
    // A session the show never saw: nothing to rename.
    let unknown = OperatorCommand::EraseSession {
        show: SALE,
        session: SessionId(5),
        pseudonym: PSEUDONYMS[0],
    };
    let outcome = h.operator(unknown);
    assert!(
        matches!(outcome, Ok(Reply::SessionErased { records: 0, idempotency_records: 0, .. })),
        "{outcome:?}"
    );
}
