//! Golden snapshots: the bytes of the current snapshot format are pinned, and the fixtures of
//! earlier formats must still decode to the state they held.
//!
//! The fixtures are the encodings of one group, built by `golden/scenario.rs` from commands. A
//! change that alters the encoding of any persisted type fails `the_current_format_is_pinned`:
//! such a change must bump `SNAPSHOT_FORMAT_VERSION`, keep decoding the previous version, and
//! add the new fixture. To write the fixture of the current version, run
//! `STATEMACHINE_GOLDEN_WRITE=1 cargo test --release -p statemachine --test golden`, and commit
//! the file it writes (`tests/golden/v<N>.snapshot`) beside the older ones, which are never
//! rewritten.

mod common;
#[path = "golden/scenario.rs"]
mod scenario;

use std::path::PathBuf;

use statemachine::*;

fn fixture(version: u16) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/v{version}.snapshot"))
}

#[test]
fn the_current_format_is_pinned() {
    let encoded = scenario::build().group.encode_snapshot();
    let path = fixture(SNAPSHOT_FORMAT_VERSION);
    if std::env::var_os("STATEMACHINE_GOLDEN_WRITE").is_some() {
        std::fs::write(&path, &encoded).expect("the fixture is written");
    }
    let pinned = std::fs::read(&path).unwrap_or_else(|error| {
        panic!("no fixture {} ({error}); see this file's header", path.display())
    });
    assert!(
        pinned == encoded,
        "the encoding of the golden scenario changed ({} bytes pinned, {} now): bump \
         SNAPSHOT_FORMAT_VERSION and add a fixture, see this file's header",
        pinned.len(),
        encoded.len()
    );
    let decoded = Group::decode_snapshot(&pinned).expect("the fixture decodes");
    assert_eq!(decoded, scenario::build().group);
}

/// The scenario is worth pinning only if it reaches every persisted state.
#[test]
fn the_golden_scenario_reaches_every_state() {
    let group = scenario::build().group;
    assert_eq!(group.archived().len(), 1, "an archived show");
    let moves: Vec<&ShowMove> = group.moves().values().collect();
    assert!(moves.iter().any(|record| matches!(record, ShowMove::Left { .. })), "a show moved out");
    assert!(moves.iter().any(|record| matches!(record, ShowMove::Leaving { .. })), "a frozen show");
    let shows: Vec<&Show> = group.shows().collect();
    let holds: Vec<HoldState> =
        shows.iter().flat_map(|show| show.holds.values()).map(|hold| hold.state).collect();
    for status in [
        HoldStatus::Held,
        HoldStatus::Processing,
        HoldStatus::Confirmed,
        HoldStatus::Cancelled,
        HoldStatus::Expired,
    ] {
        assert!(holds.iter().any(|state| state.status() == status), "no hold is {status:?}");
    }
    let bookings: Vec<&Booking> = shows.iter().flat_map(|show| show.bookings.values()).collect();
    for state in [BookingState::Confirmed, BookingState::Cancelled] {
        assert!(bookings.iter().any(|booking| booking.state == state), "no booking is {state:?}");
    }
    let payments: Vec<PaymentState> =
        shows.iter().flat_map(|show| show.payments.values()).map(|payment| payment.state).collect();
    for state in [
        PaymentState::Pending,
        PaymentState::Unknown,
        PaymentState::Succeeded { refund_required: false },
        PaymentState::Succeeded { refund_required: true },
        PaymentState::Declined,
    ] {
        assert!(payments.contains(&state), "no payment is {state:?}");
    }
    let tickets: Vec<TicketState> = shows
        .iter()
        .flat_map(|show| show.lane.tickets.values())
        .map(|ticket| ticket.state)
        .collect();
    let granted_and =
        |status| tickets.iter().any(|state| state.status() == status && state.grant().is_some());
    assert!(tickets.contains(&TicketState::Waiting));
    assert!(granted_and(TicketStatus::Granted) && granted_and(TicketStatus::Consumed));
    assert!(granted_and(TicketStatus::Left) && granted_and(TicketStatus::Expired));
    assert!(tickets.contains(&TicketState::Left { grant: None }));
    let entries: Vec<WaitlistEntryState> = shows
        .iter()
        .flat_map(|show| show.waitlist.entries.values())
        .map(|entry| entry.state)
        .collect();
    for status in [
        WaitlistEntryStatus::Waiting,
        WaitlistEntryStatus::Offered,
        WaitlistEntryStatus::Accepted,
        WaitlistEntryStatus::Declined,
        WaitlistEntryStatus::Expired,
    ] {
        assert!(entries.iter().any(|state| state.status() == status), "no entry is {status:?}");
    }
    assert!(entries.contains(&WaitlistEntryState::Left { offer: None }));
    assert!(
        entries.iter().any(|state| matches!(state, WaitlistEntryState::Left { offer: Some(_) }))
    );
    let offers: Vec<OfferState> = shows
        .iter()
        .flat_map(|show| show.waitlist.offers.values())
        .map(|offer| offer.state)
        .collect();
    for status in [
        OfferStatus::Open,
        OfferStatus::Accepted,
        OfferStatus::Declined,
        OfferStatus::Expired,
        OfferStatus::Withdrawn,
    ] {
        assert!(offers.iter().any(|state| state.status() == status), "no offer is {status:?}");
    }
    assert!(shows.iter().any(|show| !show.waitlist.pool.is_empty()), "no seat is pooled");
    let lags: Vec<Option<u64>> = shows
        .iter()
        .flat_map(|show| show.waitlist.offers.values())
        .map(|offer| offer.promotion_lag_ms)
        .collect();
    assert!(lags.iter().all(Option::is_some), "an offer made now has no promotion lag");
    assert!(lags.iter().any(|lag| lag.is_some_and(|ms| ms > 0)), "every promotion was instant");
    assert!(shows.iter().any(|show| show.status == ShowStatus::Cancelled));
    assert!(shows.iter().all(|show| !show.idempotency.is_empty()));
    assert!(group.outbox().len() > 10 && group.outbox().pending().next().unwrap().id.0 == 6);
    assert!(group.audit().iter().count() > 40);
    assert!(group.audit().iter().any(|(entity, _)| entity.kind == EntityKind::Show));
    assert_eq!(group.placement().len(), 4);
    let sinks: Vec<&Sink> = group.delivery().sinks().map(|(_, sink)| sink).collect();
    assert_eq!(sinks.len(), 2);
    assert!(sinks.iter().any(|sink| !sink.done_above.is_empty()), "no event finished out of order");
    let letters: Vec<&DeadLetter> =
        sinks.iter().flat_map(|sink| sink.dead_letters.values()).collect();
    assert!(
        letters.iter().any(|letter| letter.replay) && letters.iter().any(|letter| !letter.replay)
    );
    assert_eq!(group.digests().iter().count(), 1);
    // Waitlist policies: a drawn lottery with a drawn waiter still waiting, and bands.
    let lottery = shows.iter().find(|show| !show.waitlist.policy.draws.is_empty());
    let lottery = lottery.expect("a drawn lottery");
    assert!(!lottery.waitlist.policy.drawn.is_empty() && lottery.waitlist.policy.changes.len() > 1);
    assert!(shows.iter().any(|show| {
        show.waitlist.policy_now().rules.ordering == WaitlistOrdering::Bands
            && show.waitlist.entries.values().any(|entry| entry.order.band == BAND_GUEST)
    }));
}

/// `group` as a format before 7 held it: its offers recorded no promotion lag.
fn without_lags(mut group: Group) -> Group {
    for show in group.shows.values_mut() {
        for offer in std::sync::Arc::make_mut(show).waitlist.offers.values_mut() {
            offer.promotion_lag_ms = None;
        }
    }
    group
}

/// Checks that `decoded` (an older fixture, migrated) is the group `expected` (the scenario as
/// that version knew it, built by today's code), except for the records of a show's own
/// changes, which the code of formats 2 and 3 did not write.
fn assert_same_but_show_audit(decoded: &Group, expected: &Group) {
    let mut without = without_lags(expected.clone());
    without.audit = Audit::default();
    let mut decoded_without = decoded.clone();
    decoded_without.audit = Audit::default();
    assert_eq!(decoded_without, without, "the migration changed the state");
    let records = |group: &Group| -> Vec<(EntityRef, Vec<AuditRecord>)> {
        group
            .audit()
            .iter()
            .filter(|(entity, _)| entity.kind != EntityKind::Show)
            .map(|(entity, records)| (*entity, records.to_vec()))
            .collect()
    };
    assert_eq!(records(decoded), records(expected), "the migration changed the audit log");
    assert!(!decoded.audit().iter().any(|(entity, _)| entity.kind == EntityKind::Show));
}

/// Version 3 snapshots (written before the group kept its sinks' delivery) decode to the
/// scenario as version 3 knew it, with no sink tracked.
#[test]
fn a_version_3_snapshot_decodes_to_the_state_it_held() {
    let bytes = std::fs::read(fixture(3)).expect("the version 3 fixture exists");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 3);
    let group = Group::decode_snapshot(&bytes).expect("version 3 decodes");
    group.check_invariants().expect("the migrated state keeps every invariant");
    assert_same_but_show_audit(&group, &scenario::build_version_3().group);
    assert_eq!(group.delivery().sinks().count(), 0);
    assert_eq!(group.digests().iter().count(), 0);
}

/// Version 4 snapshots (written before the group kept its leaders' state digests) decode to
/// the scenario as version 4 knew it, with no digest recorded.
#[test]
fn a_version_4_snapshot_decodes_to_the_state_it_held() {
    let bytes = std::fs::read(fixture(4)).expect("the version 4 fixture exists");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 4);
    let group = Group::decode_snapshot(&bytes).expect("version 4 decodes");
    group.check_invariants().expect("the migrated state keeps every invariant");
    assert_eq!(group, without_lags(scenario::build_version_4().group));
    assert_eq!(group.digests().iter().count(), 0);
}

/// Version 5 snapshots (written before waitlists kept their policy) decode to the scenario as
/// version 5 knew it, every waitlist strict FIFO with no wave limit.
#[test]
fn a_version_5_snapshot_decodes_to_the_state_it_held() {
    let bytes = std::fs::read(fixture(5)).expect("the version 5 fixture exists");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 5);
    let group = Group::decode_snapshot(&bytes).expect("version 5 decodes");
    group.check_invariants().expect("the migrated state keeps every invariant");
    assert_eq!(group, without_lags(scenario::build_version_5().group));
    for show in group.shows() {
        assert_eq!(show.waitlist.policy, WaitlistPolicy::default());
    }
}

/// Version 6 snapshots (written before offers kept their promotion lag) decode to the
/// scenario, every offer's lag unknown rather than made up.
#[test]
fn a_version_6_snapshot_decodes_to_the_state_it_held() {
    let bytes = std::fs::read(fixture(6)).expect("the version 6 fixture exists");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 6);
    let group = Group::decode_snapshot(&bytes).expect("version 6 decodes");
    group.check_invariants().expect("the migrated state keeps every invariant");
    assert_eq!(group, without_lags(scenario::build_version_6().group));
    assert!(group.shows().any(|show| !show.waitlist.offers.is_empty()));
}

/// Version 7 snapshots (written before the metadata group kept the catalog) decode to the
/// scenario as version 7 knew it, with an empty catalog.
#[test]
fn a_version_7_snapshot_decodes_to_the_state_it_held() {
    let bytes = std::fs::read(fixture(7)).expect("the version 7 fixture exists");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 7);
    let group = Group::decode_snapshot(&bytes).expect("version 7 decodes");
    group.check_invariants().expect("the migrated state keeps every invariant");
    assert_eq!(group, scenario::build_version_7().group);
    assert_eq!(group.catalog(), &Catalog::default());
}

/// Version 8 snapshots (written before a group kept its archived shows) decode to the scenario
/// as version 8 knew it, with no archived show.
#[test]
fn a_version_8_snapshot_decodes_to_the_state_it_held() {
    let bytes = std::fs::read(fixture(8)).expect("the version 8 fixture exists");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 8);
    let group = Group::decode_snapshot(&bytes).expect("version 8 decodes");
    group.check_invariants().expect("the migrated state keeps every invariant");
    assert_eq!(group, scenario::build_version_8().group);
    assert!(group.archived().is_empty());
}

/// Version 9 snapshots (written before a group kept its shows' moves) decode to the scenario
/// as version 9 knew it, with no move.
#[test]
fn a_version_9_snapshot_decodes_to_the_state_it_held() {
    let bytes = std::fs::read(fixture(9)).expect("the version 9 fixture exists");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 9);
    let group = Group::decode_snapshot(&bytes).expect("version 9 decodes");
    group.check_invariants().expect("the migrated state keeps every invariant");
    assert_eq!(group, scenario::build_version_9().group);
    assert!(group.moves().is_empty());
}

/// A group at feature level 0 is written in format 9 byte for byte as the release before
/// format 10 wrote it (the fixture is that release's), so its replicas read what a replica of
/// this build sends them during a rolling upgrade.
#[test]
fn a_group_at_feature_level_0_is_written_in_format_9() {
    let group = scenario::build_version_9().group;
    assert_eq!(group.feature_level(), 0);
    let pinned = std::fs::read(fixture(9)).expect("the version 9 fixture exists");
    assert!(group.encode_snapshot() == pinned, "format 9 as the previous release wrote it");
    let current = scenario::build().group;
    assert_eq!(current.feature_level(), FEATURE_LEVEL_MOVES);
    let encoded = current.encode_snapshot();
    assert_eq!(u16::from_le_bytes([encoded[4], encoded[5]]), SNAPSHOT_FORMAT_VERSION);
}

/// A snapshot build that reuses what the build before it encoded of each unchanged show
/// (`ShowEncodings`, as the raft crate's builder keeps it) writes exactly the bytes a whole
/// encoding writes: with nothing to reuse, once shows were found unchanged (kept, then reused),
/// and after a kept show was written to (which it encodes again). In format 9 it encodes whole. An audit's digest
/// reuses the same way.
#[test]
fn reusing_unchanged_shows_writes_the_same_bytes() {
    let pinned = std::fs::read(fixture(SNAPSHOT_FORMAT_VERSION)).expect("the fixture exists");
    let mut h = scenario::build();
    let shows = h.group.shows().count();
    let mut encodings = ShowEncodings::default();
    let mut build = |group: &Group, expected: &[u8], counts: (usize, usize), what: &str| {
        assert!(group.encode_snapshot_reusing(&mut encodings) == expected, "{what}");
        assert_eq!((encodings.reused, encodings.encoded), counts, "{what}");
    };
    build(&h.group, &pinned, (0, shows), "nothing to reuse");
    build(&h.group, &pinned, (0, shows), "unchanged once: encoded, now kept");
    build(&h.group, &pinned, (shows, 0), "every show reused");
    let added = h.on_sale_show(900, 4);
    build(&h.group, &h.group.encode_snapshot(), (shows, 1), "a new show");
    build(&h.group, &h.group.encode_snapshot(), (shows, 1), "the new show unchanged once");
    build(&h.group, &h.group.encode_snapshot(), (shows + 1, 0), "every show reused");
    h.held(added, 1, 1, &[0, 1]);
    build(&h.group, &h.group.encode_snapshot(), (shows, 1), "a show written to is encoded again");
    // The auditor's check and digest, the same way.
    let mut audited = ShowEncodings::default();
    for reused in [0, 0, shows + 1] {
        let (invariants, digest) = h.group.audit_reusing(&mut audited);
        assert_eq!((invariants, digest), (Ok(()), h.group.digest()));
        assert_eq!(audited.reused, reused);
    }

    let old = scenario::build_version_9().group;
    let pinned = std::fs::read(fixture(9)).expect("the version 9 fixture exists");
    assert!(old.encode_snapshot_reusing(&mut encodings) == pinned, "format 9, whole");
    assert_eq!((encodings.reused, encodings.encoded), (0, 0));
}

/// The hold of `session` (numbered as in the scenario) on exactly `seats`.
fn hold_of<'a>(show: &'a Show, session: u64, seats: &[SeatNo]) -> &'a Hold {
    let session = common::session(session);
    show.holds
        .values()
        .find(|hold| hold.session == session && hold.seats.as_slice() == seats)
        .unwrap_or_else(|| panic!("no hold of {session} on {seats:?}"))
}

fn ticket_of(show: &Show, session: u64) -> TicketState {
    let session = common::session(session);
    show.lane.tickets.values().find(|ticket| ticket.session == session).expect("a ticket").state
}

fn entry_of(show: &Show, session: u64) -> WaitlistEntryState {
    let session = common::session(session);
    let mut entries = show.waitlist.entries.values();
    entries.rfind(|entry| entry.session == session).expect("an entry").state
}

/// Version 2 snapshots (written before states carried their data) still decode, migrated to
/// the current types: to exactly the group the same commands build now, with the data each
/// state needs taken from the old flat fields.
#[test]
fn a_version_2_snapshot_decodes_to_the_state_it_held() {
    let bytes = std::fs::read(fixture(2)).expect("the version 2 fixture exists");
    assert_eq!(u16::from_le_bytes([bytes[4], bytes[5]]), 2);
    let group = Group::decode_snapshot(&bytes).expect("version 2 decodes");
    group.check_invariants().expect("the migrated state keeps every invariant");
    assert_same_but_show_audit(&group, &scenario::build_version_3().group);

    let now = group.log_time_ms();
    let one = group.show(ShowId(1)).expect("show 1");
    let grace_ms = one.policy.payment_grace_ms;
    // A processing hold carries its payment (pending) and its grace deadline.
    let processing = hold_of(one, 2, &[2, 3]);
    let HoldState::Processing { payment, deadline_ms } = processing.state else {
        panic!("{:?}", processing.state);
    };
    assert_eq!(
        (deadline_ms, one.payments[&payment].state),
        (now + grace_ms, PaymentState::Pending)
    );
    assert_eq!(processing.payments.as_slice(), [payment]);
    // A hold whose first payment was declined keeps both attempts; the second is in flight.
    let retried = hold_of(one, 7, &[8, 10]);
    let attempts: Vec<PaymentState> =
        retried.payments.iter().map(|payment| one.payments[payment].state).collect();
    assert_eq!(attempts, [PaymentState::Declined, PaymentState::Unknown]);
    assert!(retried.is_processing(retried.payments[1]));
    // A confirmed hold names its booking, which names it back.
    let confirmed = hold_of(one, 3, &[4]);
    let booking = confirmed.booking().expect("confirmed");
    assert_eq!(
        (one.bookings[&booking].hold, one.bookings[&booking].state),
        (confirmed.id, BookingState::Confirmed)
    );
    assert_eq!(one.seats[4], Seat::Booked(booking));
    // Money that came late, and money of a cancelled booking, are refund work.
    let late = hold_of(one, 8, &[9]);
    assert_eq!(late.state, HoldState::Expired);
    let late_payment = late.payment().expect("it was checked out");
    assert_eq!(
        one.payments[&late_payment].state,
        PaymentState::Succeeded { refund_required: true }
    );
    let cancelled = hold_of(one, 6, &[7]).booking().expect("confirmed, then cancelled");
    assert_eq!(one.bookings[&cancelled].state, BookingState::Cancelled);
    assert!(one.payments[&one.bookings[&cancelled].payment].refund_required());
    assert_eq!(
        (hold_of(one, 1, &[0, 1]).state, hold_of(one, 4, &[5]).state),
        (HoldState::Held, HoldState::Cancelled)
    );

    // Tickets keep the grant they had: consumed, given back, run out, or live.
    let two = group.show(ShowId(2)).expect("show 2");
    let TicketState::Consumed { grant: consumed } = ticket_of(two, 1) else { panic!() };
    assert_eq!(
        hold_of(two, 1, &[0, 1]).grant.map(|ticket| two.lane.tickets[&ticket].state),
        Some(TicketState::Consumed { grant: consumed })
    );
    assert!(matches!(ticket_of(two, 2), TicketState::Left { grant: Some(_) }));
    let TicketState::Expired { grant: Some(ran_out) } = ticket_of(two, 3) else { panic!() };
    assert!(ran_out.deadline_ms <= now && ran_out.index > consumed.index);
    let TicketState::Granted { grant: live } = ticket_of(two, 4) else { panic!() };
    assert!(
        live.deadline_ms > now
            && two.lane.granted.contains(&(live.deadline_ms, TicketId(live_ticket(two, 4))))
    );
    assert_eq!(
        (ticket_of(two, 5), ticket_of(two, 6)),
        (TicketState::Waiting, TicketState::Left { grant: None })
    );

    // Entries and offers point at each other through their states.
    let three = group.show(ShowId(3)).expect("show 3");
    let WaitlistEntryState::Accepted { offer: accepted } = entry_of(three, 3) else { panic!() };
    let OfferState::Accepted { hold } = three.waitlist.offers[&accepted].state else { panic!() };
    assert_eq!(three.holds[&hold].offer, Some(accepted));
    let WaitlistEntryState::Declined { offer: declined } = entry_of(three, 4) else { panic!() };
    assert_eq!(three.waitlist.offers[&declined].state, OfferState::Declined);
    let WaitlistEntryState::Expired { offer: expired } = entry_of(three, 5) else { panic!() };
    assert_eq!(three.waitlist.offers[&expired].state, OfferState::Expired);
    let WaitlistEntryState::Offered { offer: open } = entry_of(three, 6) else { panic!() };
    assert_eq!(three.waitlist.offers[&open].state, OfferState::Open);
    assert_eq!(three.waitlist.offers[&open].seats.as_slice(), [3]);
    assert_eq!(
        (entry_of(three, 7), entry_of(three, 9)),
        (WaitlistEntryState::Waiting, WaitlistEntryState::Left { offer: None })
    );
    assert_eq!(three.waitlist.pool.iter().copied().collect::<Vec<_>>(), [1, 2]);

    // The cancelled show withdrew its open offer and refunded its booking.
    let four = group.show(ShowId(4)).expect("show 4");
    assert_eq!(four.status, ShowStatus::Cancelled);
    let WaitlistEntryState::Left { offer: Some(withdrawn) } = entry_of(four, 3) else { panic!() };
    assert_eq!(four.waitlist.offers[&withdrawn].state, OfferState::Withdrawn);
    assert!(four.bookings.values().all(|booking| booking.state == BookingState::Cancelled));
    assert_eq!(four.price_version, 2);

    // The group-wide parts were reused unchanged.
    assert_eq!(group.outbox().pending().next().map(|event| event.id.0), Some(4));
    assert_eq!(group.placement().group_of(ShowId(4)), Some(2));
    let trail = group.audit_trail(ShowId(1), EntityKind::Hold, retried.id.0);
    let states: Vec<StateName> = trail.iter().map(|record| record.to).collect();
    assert_eq!(
        states,
        [StateName::Held, StateName::Processing, StateName::Held, StateName::Processing]
    );
}

fn live_ticket(show: &Show, session: u64) -> u64 {
    show.lane.live_by_session[&common::session(session)].0
}
