//! Archiving a show that has ended and whose money is settled: it leaves the group for its
//! archive, only in the state that was archived, and the group stops growing with every sale.

mod common;

use common::*;
use sha2::{Digest as _, Sha256};
use statemachine::*;

const SEATS_PER_HOLD: u32 = 10;

/// Sells every seat of a new show in holds of ten, each paid, then closes its sales and
/// acknowledges its outbox events (there are no sinks): an ended, settled show.
fn sell_out(h: &mut Harness, show: u64, seat_count: u32) -> ShowId {
    let show = h.on_sale_show(show, seat_count);
    for buyer in 0..seat_count / SEATS_PER_HOLD {
        let first = buyer * SEATS_PER_HOLD;
        let list: Vec<SeatNo> = (first..first + SEATS_PER_HOLD).collect();
        let who = u64::from(buyer) + 1;
        let receipt = h.held(show, who, 1, &list);
        let (payment, price) = h.checkout(show, who, 2, receipt.hold);
        h.pay_ok(show, payment, u128::from(who) << 32 | u128::from(show.0), price).expect("paid");
    }
    h.operator(OperatorCommand::CloseSales { show }).expect("closed");
    ack_outbox(h);
    show
}

fn ack_outbox(h: &mut Harness) {
    let up_to = h.group.outbox().last_id();
    h.one(Command::AckOutbox { up_to }).expect("acknowledged");
}

fn digest_of(bytes: &[u8]) -> Digest {
    Sha256::digest(bytes).into()
}

/// Exports the show's archive and archives it with the export's digest.
fn archive(h: &mut Harness, show: ShowId) -> (Vec<u8>, Outcome) {
    let bytes = h.group.archive_export(show).expect("the show may be archived");
    let outcome = h.operator(OperatorCommand::ArchiveShow { show, digest: digest_of(&bytes) });
    (bytes, outcome)
}

#[test]
fn an_ended_settled_show_leaves_the_group_for_its_archive() {
    let mut h = Harness::new();
    let show = sell_out(&mut h, 1, 40);
    let other = h.on_sale_show(2, 10);
    let other_hold = h.held(other, 9, 1, &[0, 1]);
    let first_booking = h.group.show(show).unwrap().bookings.keys().next().copied().unwrap();
    let trail = h.group.audit_trail(show, EntityKind::Booking, first_booking.0).to_vec();
    assert!(!trail.is_empty());

    let (bytes, outcome) = archive(&mut h, show);
    let reply = outcome.expect("archived");
    assert_eq!(
        reply,
        Reply::ShowArchived {
            show,
            digest: digest_of(&bytes),
            bytes: bytes.len() as u64,
            duplicate: false
        }
    );

    // The show and its audit are gone; a small record stays; the other show is untouched.
    assert!(h.group.show(show).is_none());
    assert_eq!(h.group.audit().of_show(show).count(), 0);
    let archived = &h.group.archived()[&show];
    assert_eq!(
        (archived.status, archived.seat_count, archived.bookings_confirmed),
        (ShowStatus::Closed, 40, 4)
    );
    assert_eq!(archived.digest, digest_of(&bytes));
    assert_eq!(h.hold_state(other, other_hold.hold), HoldStatus::Held);

    // The archive holds what left: its audit trails read back, every booking and payment.
    let lines = read_archive(&bytes).expect("the archive reads");
    assert_eq!(archived_trail(&lines, EntityKind::Booking, first_booking.0), Some(&trail[..]));
    let count = |pick: fn(&ArchiveLine) -> bool| lines.iter().filter(|line| pick(line)).count();
    assert_eq!(count(|line| matches!(line, ArchiveLine::Booking(_))), 4);
    assert_eq!(count(|line| matches!(line, ArchiveLine::Payment(_))), 4);
    assert_eq!(count(|line| matches!(line, ArchiveLine::Hold(_))), 4);
    assert_eq!(count(|line| matches!(line, ArchiveLine::Show(_))), 1);

    // Any later command about the show is told it is archived, and changes nothing.
    assert_eq!(code(&h.hold(show, 50, 1, &[0])), "show_archived");
    assert_eq!(code(&h.operator(OperatorCommand::OpenSales { show })), "show_archived");
    assert_eq!(code(&h.operator(OperatorCommand::CreateShow(spec(1, 5)))), "show_exists");
    assert_eq!(h.group.show_or_archived(show).unwrap_err(), Rejection::ShowArchived);
    // Archiving again with the same digest is a duplicate; with another, a rejection.
    let again = h.operator(OperatorCommand::ArchiveShow { show, digest: digest_of(&bytes) });
    assert!(matches!(again, Ok(Reply::ShowArchived { duplicate: true, .. })));
    let other_digest = h.operator(OperatorCommand::ArchiveShow { show, digest: [7; 32] });
    assert_eq!(code(&other_digest), "show_archived");

    // The archived record survives a snapshot.
    let decoded = Group::decode_snapshot(&h.group.encode_snapshot()).expect("decodes");
    assert_eq!(decoded, h.group);
}

#[test]
fn a_show_is_archived_only_when_it_has_ended_and_its_money_is_settled() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 20);
    let not_settled = |h: &Harness| h.group.archive_export(show).map(|_| ()).unwrap_err();
    assert!(matches!(not_settled(&h), Rejection::ShowNotSettled { .. }), "on sale");

    let paid = h.held(show, 1, 1, &[0, 1]);
    let (payment, price) = h.checkout(show, 1, 2, paid.hold);
    let live = h.held(show, 2, 1, &[5]);
    h.operator(OperatorCommand::CloseSales { show }).expect("closed");
    let why = |h: &Harness| match h.group.archive_export(show) {
        Err(Rejection::ShowNotSettled { what }) => what.into_owned(),
        other => panic!("expected show_not_settled, got {other:?}"),
    };
    assert_eq!(why(&h), "2 holds are live");
    h.client(show, 2, 2, ClientRequest::CancelHold { hold: live.hold }).expect("cancelled");
    assert_eq!(why(&h), "1 holds are live", "a processing hold is live");
    h.pay(show, payment, 1, PaymentResult::Unknown).expect("unknown");
    assert_eq!(why(&h), "1 holds are live");
    h.pay_ok(show, payment, 2, price).expect("paid");
    assert_eq!(why(&h), "1 outbox events are undelivered");
    ack_outbox(&mut h);
    // A command refused for an unsettled show changes nothing.
    let early = h.operator(OperatorCommand::ArchiveShow { show, digest: [0; 32] });
    assert_eq!(code(&early), "archive_changed", "settled now, but not this digest");

    let (_, outcome) = archive(&mut h, show);
    outcome.expect("archived once settled");
}

#[test]
fn a_show_that_changed_after_its_export_is_not_archived() {
    let mut h = Harness::new();
    let show = sell_out(&mut h, 1, 20);
    let stale = h.group.archive_export(show).expect("exported");
    let booking = h.group.show(show).unwrap().bookings.keys().next().copied().unwrap();
    h.client(show, 1, 3, ClientRequest::CancelBooking { booking }).expect("cancelled");
    // The cancellation owes a refund: the show is not settled at all now.
    let outcome = h.operator(OperatorCommand::ArchiveShow { show, digest: digest_of(&stale) });
    assert_eq!(code(&outcome), "show_not_settled");
    let payment = h.group.show(show).unwrap().bookings[&booking].payment;
    h.one(Command::RefundCompleted { show, payment }).expect("refunded");
    ack_outbox(&mut h);
    let outcome = h.operator(OperatorCommand::ArchiveShow { show, digest: digest_of(&stale) });
    assert_eq!(code(&outcome), "archive_changed", "the refund changed the archive");
    assert!(h.group.show(show).is_some());
    let (_, outcome) = archive(&mut h, show);
    outcome.expect("archived from a fresh export");
}

/// Seed 002 section 15: archive completed shows, so a group's state does not grow with its
/// history. Twenty sales of 500 seats in one group, each archived once it ended, leave the
/// group no bigger than one sale does, but for a small record per archived show; without
/// archiving, the state grows with every sale (so this check can fail).
#[test]
fn twenty_consecutive_sales_leave_the_state_no_bigger_than_one() {
    const SALES: u64 = 20;
    const SEATS: u32 = 500;
    let mut archived = Harness::new();
    let mut kept = Harness::new();
    let mut peaks = Vec::new();
    let mut after = Vec::new();
    for sale in 1..=SALES {
        let show = sell_out(&mut archived, sale, SEATS);
        sell_out(&mut kept, sale, SEATS);
        peaks.push(archived.group.encode_snapshot().len());
        archive(&mut archived, show).1.expect("archived");
        after.push(archived.group.encode_snapshot().len());
    }
    // What an archived show leaves: its record (id, indexes, digest, counts), a few dozen bytes.
    let record_max = 80;
    let allowance = (SALES as usize - 1) * record_max;
    assert!(
        peaks[SALES as usize - 1] <= peaks[0] + allowance,
        "the 20th sale's peak ({} bytes) is bigger than the first's ({} bytes)",
        peaks[SALES as usize - 1],
        peaks[0]
    );
    assert!(after[SALES as usize - 1] <= after[0] + allowance, "after: {after:?}");
    let kept_size = kept.group.encode_snapshot().len();
    println!(
        "snapshot bytes: sale 1 {} (after archiving {}), sale 20 {} (after archiving {}); \
         20 sales kept: {kept_size}",
        peaks[0], after[0], peaks[19], after[19]
    );
    assert!(
        kept_size > 10 * peaks[0],
        "without archiving the state grows with every sale ({kept_size} bytes after 20 sales, \
         {} after one)",
        peaks[0]
    );
}

/// Issue 18 section 1: terminal records of a live show older than the retention window leave
/// the state for an archive segment; whatever a live record or money still names stays.
#[test]
fn terminal_records_older_than_the_window_leave_a_live_show() {
    let mut h = Harness::new();
    let show = h.on_sale_show(1, 20);
    let cancelled = h.held(show, 1, 1, &[0, 1]);
    h.client(show, 1, 2, ClientRequest::CancelHold { hold: cancelled.hold }).expect("cancelled");
    let expiring = h.held(show, 2, 1, &[2]);
    let declined = h.held(show, 3, 1, &[3]);
    let (declined_payment, _) = h.checkout(show, 3, 2, declined.hold);
    h.pay(show, declined_payment, 1, PaymentResult::Declined).expect("declined");
    h.client(show, 3, 3, ClientRequest::CancelHold { hold: declined.hold }).expect("cancelled");
    let paid = h.held(show, 4, 1, &[4]);
    let (payment, price) = h.checkout(show, 4, 2, paid.hold);
    h.pay_ok(show, payment, 2, price).expect("paid");
    h.advance(ShowPolicy::default().hold_ttl_ms);
    h.tick().expect("ticked");
    assert_eq!(h.hold_state(show, expiring.hold), HoldStatus::Expired);
    let trail = h.group.audit_trail(show, EntityKind::Hold, cancelled.hold.0).to_vec();
    h.advance(10 * 60_000);
    let live = h.held(show, 5, 1, &[6]);
    let before_ms = h.now - 5 * 60_000;

    assert_eq!(
        code(&h.operator(OperatorCommand::CompactShow {
            show,
            before_ms: h.now + 1,
            digest: [0; 32]
        })),
        "invalid_argument"
    );
    let (bytes, records) = h.group.compaction_export(show, before_ms).expect("exported");
    assert_eq!(records, 4, "three ended holds and the declined payment");
    let digest = digest_of(&bytes);
    let outcome = h.operator(OperatorCommand::CompactShow { show, before_ms, digest });
    assert_eq!(outcome, Ok(Reply::ShowCompacted { show, records: 4, bytes: bytes.len() as u64 }));
    let holds: Vec<HoldId> = h.group.show(show).unwrap().holds.keys().copied().collect();
    assert_eq!(holds, [paid.hold, live.hold], "the confirmed and the live hold stay");
    assert!(h.group.show(show).unwrap().payments.contains_key(&payment));
    assert!(!h.group.show(show).unwrap().payments.contains_key(&declined_payment));
    assert!(h.group.audit_trail(show, EntityKind::Hold, cancelled.hold.0).is_empty());
    let lines = read_archive(&bytes).expect("the segment reads");
    assert_eq!(archived_trail(&lines, EntityKind::Hold, cancelled.hold.0), Some(&trail[..]));
    assert!(matches!(lines[1], ArchiveLine::Before { before_ms: b } if b == before_ms));

    // Again with the same digest: the records are gone, so the segment is not the same.
    let again = h.operator(OperatorCommand::CompactShow { show, before_ms, digest });
    assert_eq!(code(&again), "archive_changed");
    let (_, left) = h.group.compaction_export(show, h.now).expect("exported");
    assert_eq!(left, 0, "nothing else may leave: {left}");
    // The show still sells, and its state still round-trips.
    h.held(show, 6, 1, &[0, 1, 2, 3]);
    let decoded = Group::decode_snapshot(&h.group.encode_snapshot()).expect("decodes");
    assert_eq!(decoded, h.group);
}
