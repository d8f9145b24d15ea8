//! Moving a show between groups: frozen in the source, imported in the target, activated, then
//! dropped from the source. Everything the show held (holds, bookings, payments, the lane in
//! FIFO order, the waitlist, idempotency records, audit trails) arrives unchanged, at no moment
//! do both groups serve it, and each step refuses what it must, changing nothing.

mod common;

use common::*;
use statemachine::*;

const SHOW: ShowId = ShowId(1);
const SOURCE: u64 = 1;
const TARGET: u64 = 2;

/// A show with a held hold (key 1 of session 7), a booking, a lane of three tickets (one
/// granted) and a sold-out companion show's waitlist.
fn on_sale() -> (Harness, HoldReceipt, BookingId) {
    let mut h = Harness::new();
    h.one(Command::SetFeatureLevel { level: FEATURE_LEVEL_MOVES }).expect("raised");
    h.on_sale_show(SHOW.0, 10);
    let held = h.held(SHOW, 7, 1, &[0, 1]);
    let bought = h.held(SHOW, 8, 1, &[2]);
    let (payment, price) = h.checkout(SHOW, 8, 2, bought.hold);
    let booking = match h.pay_ok(SHOW, payment, 1, price) {
        Ok(Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { booking }, .. }) => booking,
        other => panic!("expected a booking, got {other:?}"),
    };
    let lane = OperatorCommand::ConfigureAdmission { show: SHOW, enabled: true, window: 1 };
    h.operator(lane).expect("lane on");
    for who in [20, 21, 22] {
        h.client(SHOW, who, 1, ClientRequest::JoinQueue).expect("queued");
    }
    (h, held, booking)
}

/// The freeze, as a source replica's apply would answer it.
fn freeze(h: &mut Harness) -> (Digest, u64) {
    match h.operator(OperatorCommand::FreezeShow { show: SHOW, to: TARGET }) {
        Ok(Reply::ShowFrozen { digest, bytes, duplicate: false, .. }) => (digest, bytes),
        other => panic!("expected a freeze, got {other:?}"),
    }
}

fn import(show: ShowId, from: u64, state: Vec<u8>, digest: Digest) -> OperatorCommand {
    OperatorCommand::ImportShow { show, from, state, digest }
}

/// A harness of another group whose clock is behind the source's.
fn target() -> Harness {
    let mut h = Harness::new();
    h.now -= 5_000;
    h.one(Command::SetFeatureLevel { level: FEATURE_LEVEL_MOVES }).expect("raised");
    h.on_sale_show(99, 3);
    h
}

#[test]
fn a_show_moves_with_everything_it_held_and_only_one_group_serves_it_at_a_time() {
    let (mut source, held, booking) = on_sale();
    let before = source.group.show(SHOW).expect("here").clone();
    let trail = source.group.audit_trail(SHOW, EntityKind::Hold, held.hold.0).to_vec();
    let source_time = source.group.log_time_ms();
    let (digest, bytes) = freeze(&mut source);

    // Frozen: every command and read is refused, ticks leave it be, the state stays as frozen.
    source.advance(before.policy.hold_ttl_ms + 1);
    assert_eq!(code(&source.hold(SHOW, 9, 1, &[5])), "show_moving");
    assert_eq!(
        code(&source.client(SHOW, 7, 9, ClientRequest::CancelHold { hold: held.hold })),
        "show_moving"
    );
    let cancel = OperatorCommand::CloseSales { show: SHOW };
    assert_eq!(code(&source.operator(cancel)), "show_moving");
    assert!(matches!(source.tick(), Ok(Reply::Ticked { expired: 0, .. })));
    assert!(!source.group.has_due(u64::MAX / 2), "a frozen show is never due");
    assert_eq!(source.group.hold(SHOW, held.hold, None).unwrap_err(), Rejection::ShowMoving);
    assert_eq!(source.group.seat_map(SHOW).unwrap_err(), Rejection::ShowMoving);
    assert_eq!(source.group.show(SHOW), Some(&before));
    assert!(source.group.unsettled_payments().is_empty() && source.group.refunds_owed().is_empty());
    // Freezing again for the same group is a duplicate; for another, refused.
    let again = source.operator(OperatorCommand::FreezeShow { show: SHOW, to: TARGET });
    assert!(
        matches!(again, Ok(Reply::ShowFrozen { duplicate: true, digest: d, .. }) if d == digest)
    );
    let elsewhere = source.operator(OperatorCommand::FreezeShow { show: SHOW, to: 3 });
    assert_eq!(code(&elsewhere), "show_moving");

    let (state, exported) = source.group.show_transfer(SHOW).expect("frozen shows export");
    assert_eq!((exported, state.len() as u64), (digest, bytes));

    // Imported: not serving until activated; a second import of the same bytes is a duplicate.
    let mut target = target();
    assert!(target.group.log_time_ms() < source_time);
    let imported = target.operator(import(SHOW, SOURCE, state.clone(), digest));
    assert!(matches!(imported, Ok(Reply::ShowImported { duplicate: false, .. })), "{imported:?}");
    assert!(target.group.log_time_ms() >= source_time, "the show's time never goes back");
    let again = target.operator(import(SHOW, SOURCE, state.clone(), digest));
    assert!(matches!(again, Ok(Reply::ShowImported { duplicate: true, .. })), "{again:?}");
    assert_eq!(code(&target.hold(SHOW, 9, 1, &[5])), "show_moving");
    assert_eq!(target.group.hold(SHOW, held.hold, None).unwrap_err(), Rejection::ShowMoving);

    let activated = target.operator(OperatorCommand::ActivateShow { show: SHOW });
    assert!(matches!(activated, Ok(Reply::ShowActivated { from: SOURCE, duplicate: false, .. })));
    let dropped = source.operator(OperatorCommand::DropShow { show: SHOW, to: TARGET });
    assert!(matches!(dropped, Ok(Reply::ShowDropped { duplicate: false, .. })), "{dropped:?}");

    // The target serves exactly what the source froze.
    assert_eq!(target.group.show(SHOW), Some(&before));
    assert_eq!(target.group.audit_trail(SHOW, EntityKind::Hold, held.hold.0), trail.as_slice());
    assert_eq!(target.group.booking(SHOW, booking, None).expect("moved").booking.id, booking);
    let positions: Vec<(SessionId, u32)> = [20, 21, 22]
        .into_iter()
        .map(|who| {
            let ticket = *before.lane.live_by_session.get(&session(who)).expect("queued");
            let view = target.group.ticket(SHOW, ticket, None).expect("moved");
            (view.session, view.ahead)
        })
        .collect();
    assert_eq!(positions, [(session(20), 0), (session(21), 0), (session(22), 1)]);
    // A retry of a request the source decided gets the stored answer; a new one is decided.
    let retried = target.hold(SHOW, 7, 1, &[0, 1]);
    assert!(matches!(retried, Ok(Reply::Held(ref receipt)) if receipt.hold == held.hold));
    assert_eq!(code(&target.hold(SHOW, 9, 1, &[5])), "grant_required");
    let grant = *before.lane.live_by_session.get(&session(20)).expect("granted");
    let taken = target.client(SHOW, 20, 2, Harness::hold_request(&[1], Some(grant)));
    assert_eq!(code(&taken), "seat_unavailable");
    let free = target.client(SHOW, 20, 3, Harness::hold_request(&[5], Some(grant)));
    assert!(matches!(free, Ok(Reply::Held(_))), "{free:?}");

    // The source keeps only a redirect: no show, no audit.
    assert_eq!(code(&source.hold(SHOW, 9, 3, &[6])), "show_moved");
    assert_eq!(
        source.group.hold(SHOW, held.hold, None).unwrap_err(),
        Rejection::ShowMoved { group: TARGET }
    );
    assert!(source.group.show(SHOW).is_none());
    assert!(source.group.audit_trail(SHOW, EntityKind::Hold, held.hold.0).is_empty());
    let again = source.operator(OperatorCommand::DropShow { show: SHOW, to: TARGET });
    assert!(matches!(again, Ok(Reply::ShowDropped { duplicate: true, .. })));
    let again = target.operator(OperatorCommand::ActivateShow { show: SHOW });
    assert!(matches!(again, Ok(Reply::ShowActivated { duplicate: true, .. })));
    assert!(matches!(
        target.group.moves().get(&SHOW),
        Some(ShowMove::Arrived { from: SOURCE, .. })
    ));

    // And back: the source's redirect gives way to the show arriving again.
    let (digest, _) = match target.operator(OperatorCommand::FreezeShow { show: SHOW, to: SOURCE })
    {
        Ok(Reply::ShowFrozen { digest, bytes, .. }) => (digest, bytes),
        other => panic!("expected a freeze, got {other:?}"),
    };
    let (state, _) = target.group.show_transfer(SHOW).expect("frozen");
    let back = source.operator(import(SHOW, TARGET, state, digest));
    assert!(matches!(back, Ok(Reply::ShowImported { duplicate: false, .. })), "{back:?}");
    source.operator(OperatorCommand::ActivateShow { show: SHOW }).expect("serves again");
    target.operator(OperatorCommand::DropShow { show: SHOW, to: SOURCE }).expect("left");
    assert_eq!(code(&source.hold(SHOW, 9, 4, &[6])), "grant_required");
    assert_eq!(code(&target.hold(SHOW, 9, 4, &[7])), "show_moved");

    // Move records survive a snapshot.
    for h in [&source, &target] {
        let decoded = Group::decode_snapshot(&h.group.encode_snapshot()).expect("decodes");
        assert_eq!(&decoded, &h.group);
    }
}

#[test]
fn each_step_refuses_what_it_must_and_changes_nothing() {
    let (mut source, _, _) = on_sale();
    let mut target = target();
    let untouched = target.group.clone();
    let refused = |h: &mut Harness, command: OperatorCommand, expected: &str| {
        let before = h.group.clone();
        let outcome = h.operator(command);
        assert_eq!(code(&outcome), expected, "{outcome:?}");
        let mut after = h.group.clone();
        after.applied_index = before.applied_index;
        assert_eq!(after, before, "a refused step changed the group");
    };

    // Nothing to export or drop before a freeze; nothing to activate before an import.
    assert_eq!(code(&Err(source.group.show_transfer(SHOW).unwrap_err())), "invalid_argument");
    refused(&mut source, OperatorCommand::DropShow { show: SHOW, to: TARGET }, "invalid_argument");
    refused(&mut target, OperatorCommand::ActivateShow { show: SHOW }, "show_not_found");
    refused(&mut target, OperatorCommand::ActivateShow { show: ShowId(99) }, "invalid_argument");
    refused(&mut source, OperatorCommand::FreezeShow { show: SHOW, to: 0 }, "invalid_argument");
    refused(
        &mut source,
        OperatorCommand::FreezeShow { show: ShowId(5), to: TARGET },
        "show_not_found",
    );

    let (digest, _) = freeze(&mut source);
    let (state, _) = source.group.show_transfer(SHOW).expect("frozen");
    refused(&mut source, OperatorCommand::DropShow { show: SHOW, to: 3 }, "invalid_argument");

    // Bytes that are not what the digest says, or not this show, or damaged.
    let damaged = state[..state.len() - 3].to_vec();
    refused(&mut target, import(SHOW, SOURCE, damaged.clone(), digest), "invalid_argument");
    let damaged_digest = sha(&damaged);
    refused(&mut target, import(SHOW, SOURCE, damaged, damaged_digest), "invalid_argument");
    refused(&mut target, import(ShowId(2), SOURCE, state.clone(), digest), "invalid_argument");
    refused(&mut target, import(SHOW, 0, state.clone(), digest), "invalid_argument");
    let mut garbage = b"BKSX".to_vec();
    garbage.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_le_bytes());
    garbage.extend_from_slice(&[0xff; 40]);
    let garbage_digest = sha(&garbage);
    refused(&mut target, import(SHOW, SOURCE, garbage, garbage_digest), "invalid_argument");
    // Over a show that serves in the target, or into the group that froze it.
    let other_state = {
        let mut h = Harness::new();
        h.one(Command::SetFeatureLevel { level: FEATURE_LEVEL_MOVES }).expect("raised");
        h.on_sale_show(99, 3);
        h.operator(OperatorCommand::FreezeShow { show: ShowId(99), to: TARGET }).expect("frozen");
        h.group.show_transfer(ShowId(99)).expect("frozen")
    };
    refused(&mut target, import(ShowId(99), 3, other_state.0, other_state.1), "show_exists");
    refused(&mut source, import(SHOW, TARGET, state.clone(), digest), "show_moving");
    assert_eq!(target.group.shows().count(), untouched.shows().count());
    assert!(target.group.moves().is_empty());
}

#[test]
fn the_metadata_group_relocates_a_show_only_from_where_it_is() {
    let mut h = Harness::new();
    h.one(Command::SetFeatureLevel { level: FEATURE_LEVEL_MOVES }).expect("raised");
    h.one(Command::Place { show: SHOW, group: SOURCE }).expect("placed");
    let relocate = |from, to| Command::Relocate { show: SHOW, from, to };
    assert_eq!(code(&h.one(relocate(3, TARGET))), "show_moved");
    assert_eq!(code(&h.one(relocate(SOURCE, SOURCE))), "invalid_argument");
    assert_eq!(code(&h.one(relocate(SOURCE, 0))), "invalid_argument");
    assert_eq!(
        code(&h.one(Command::Relocate { show: ShowId(5), from: 1, to: 2 })),
        "show_not_found"
    );
    assert_eq!(h.group.placement().group_of(SHOW), Some(SOURCE));
    let moved = h.one(relocate(SOURCE, TARGET));
    assert!(matches!(moved, Ok(Reply::Relocated { duplicate: false, .. })), "{moved:?}");
    let again = h.one(relocate(SOURCE, TARGET));
    assert!(matches!(again, Ok(Reply::Relocated { duplicate: true, .. })), "{again:?}");
    assert_eq!(h.group.placement().group_of(SHOW), Some(TARGET));
    // Placing it again where it was is no longer a duplicate: it lives elsewhere.
    assert_eq!(code(&h.one(Command::Place { show: SHOW, group: SOURCE })), "show_exists");
}

#[test]
fn below_the_moves_feature_level_every_step_is_refused_and_the_level_only_rises() {
    let mut h = Harness::new();
    h.on_sale_show(SHOW.0, 4);
    h.one(Command::Place { show: SHOW, group: SOURCE }).expect("placed");
    let before = h.group.clone();
    let steps = [
        Command::Operator(OperatorCommand::FreezeShow { show: SHOW, to: TARGET }),
        Command::Operator(import(ShowId(5), SOURCE, vec![1], sha(&[1]))),
        Command::Operator(OperatorCommand::ActivateShow { show: SHOW }),
        Command::Operator(OperatorCommand::DropShow { show: SHOW, to: TARGET }),
        Command::Relocate { show: SHOW, from: SOURCE, to: TARGET },
    ];
    for step in steps {
        let outcome = h.one(step);
        assert_eq!(
            outcome,
            Err(Rejection::FeatureNotEnabled { level: FEATURE_LEVEL_MOVES, current: 0 })
        );
        assert_eq!(code(&outcome), "feature_not_enabled");
    }
    let mut after = h.group.clone();
    after.applied_index = before.applied_index;
    assert_eq!(after, before, "refused steps changed nothing");

    let above = h.one(Command::SetFeatureLevel { level: FEATURE_LEVEL + 1 });
    assert_eq!(code(&above), "invalid_argument");
    let raised = h.one(Command::SetFeatureLevel { level: FEATURE_LEVEL_MOVES });
    assert_eq!(raised, Ok(Reply::FeatureLevelSet { level: FEATURE_LEVEL_MOVES, duplicate: false }));
    let again = h.one(Command::SetFeatureLevel { level: FEATURE_LEVEL_MOVES });
    assert_eq!(again, Ok(Reply::FeatureLevelSet { level: FEATURE_LEVEL_MOVES, duplicate: true }));
    assert_eq!(code(&h.one(Command::SetFeatureLevel { level: 0 })), "invalid_argument");
    assert!(h.operator(OperatorCommand::FreezeShow { show: SHOW, to: TARGET }).is_ok());
    // Raised, the group is written in the current format, which keeps the level.
    let encoded = h.group.encode_snapshot();
    assert_eq!(u16::from_le_bytes([encoded[4], encoded[5]]), SNAPSHOT_FORMAT_VERSION);
    assert_eq!(Group::decode_snapshot(&encoded).expect("decodes").feature_level(), 1);
}

fn sha(bytes: &[u8]) -> Digest {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).into()
}
