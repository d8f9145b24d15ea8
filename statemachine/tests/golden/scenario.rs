//! The golden scenario: one group built by a fixed sequence of commands so that every persisted
//! shape appears in its snapshot at least once.
//!
//! It is written against commands, the most stable interface of the crate, so that the same
//! scenario can be replayed by the code of every snapshot format version: the fixture of the
//! current version is its encoding (`tests/golden/v<N>.snapshot`), and a later version decodes
//! that fixture and compares it with the same scenario built by its own code.
//!
//! What it holds, show by show (times are log time from `START_MS`):
//!
//! - show 1 (20 seats): holds in every state (held, processing, confirmed, cancelled, expired,
//!   and an expired processing hold whose payment succeeded late), bookings confirmed and
//!   cancelled, payments pending, unknown, succeeded, succeeded with refund work and declined, a
//!   hold held again after a declined payment, provider events, a capacity event;
//! - show 2 (10 seats): an admission lane with tickets waiting, granted, consumed, left (with and
//!   without a grant) and expired (a grant that ran out), and a hold that consumed a grant;
//! - show 3 (4 seats): a sold-out waitlist with entries waiting, offered, accepted, declined,
//!   expired and left, offers open, accepted, declined and expired, a hold made from an offer,
//!   and seats pooled;
//! - show 4 (3 seats): a cancelled show (a withdrawn offer, a booking refunded by cancellation,
//!   new prices);
//! - the group: placement of every show, an outbox partly acknowledged, the audit log (every
//!   show's own changes among it), and idempotency records of every client command that
//!   succeeded;
//! - since format 4, delivery to two sinks: events finished in and out of order, dead letters,
//!   one of them asked to be replayed, and the outbox trimmed to what both sinks finished;
//! - since format 6, waitlist policies (shows 5 and 6, see `policies`); since format 7, an
//!   offer made 30 s after its first seat was released (show 7); since format 8, the catalog
//!   (see `catalog`); since format 9, an archived show (show 8); since format 10, moves: show
//!   9 moved out (a redirect stays), show 10 frozen for a move, at feature level 1.

use super::common::*;
use statemachine::*;

const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;

fn ok(outcome: Outcome) -> Reply {
    outcome.unwrap_or_else(|rejection| panic!("the golden scenario expected success: {rejection}"))
}

fn held(h: &mut Harness, show: ShowId, who: u64, k: u64, seats: &[SeatNo]) -> HoldId {
    h.held(show, who, k, seats).hold
}

fn paid(h: &mut Harness, show: ShowId, payment: PaymentId, event: u128, price: Money) -> Reply {
    ok(h.pay_ok(show, payment, event, price))
}

fn cancel_hold(h: &mut Harness, show: ShowId, who: u64, k: u64, hold: HoldId) {
    ok(h.client(show, who, k, ClientRequest::CancelHold { hold }));
}

fn join_queue(h: &mut Harness, show: ShowId, who: u64, k: u64) -> TicketId {
    match ok(h.client(show, who, k, ClientRequest::JoinQueue)) {
        Reply::Queued { ticket, .. } => ticket,
        other => panic!("expected a ticket, got {other:?}"),
    }
}

fn join_waitlist(h: &mut Harness, show: ShowId, who: u64, k: u64, quantity: u8) -> EntryId {
    join_band(h, show, who, k, quantity, 0)
}

fn join_band(h: &mut Harness, show: ShowId, who: u64, k: u64, quantity: u8, band: u8) -> EntryId {
    let request = ClientRequest::JoinWaitlist { quantity, band };
    match ok(h.client(show, who, k, request)) {
        Reply::WaitlistJoined { entry, .. } => entry,
        other => panic!("expected an entry, got {other:?}"),
    }
}

/// The open offer of an entry, found in the outbox (the newest offer made to it).
fn offer_of(h: &Harness, entry: EntryId) -> OfferId {
    h.group
        .outbox()
        .pending()
        .filter_map(|event| match event.event {
            Event::OfferMade { offer, entry: to, .. } if to == entry => Some(offer),
            _ => None,
        })
        .last()
        .expect("an offer was made to the entry")
}

/// Builds the golden group. Every step is checked to succeed (or to end in the state intended),
/// and the harness checks every invariant after every entry.
pub fn build() -> Harness {
    let mut h = build_version_9();
    moves(&mut h);
    h
}

/// The scenario as snapshot format 9 knew it: everything but moves.
pub fn build_version_9() -> Harness {
    let mut h = build_version_8();
    archived_show(&mut h);
    h
}

/// Version 10: show 9 moved out to group 2 (frozen, then dropped), show 10 frozen for group 3.
fn moves(h: &mut Harness) {
    ok(h.one(Command::SetFeatureLevel { level: FEATURE_LEVEL_MOVES }));
    for show in [9, 10] {
        ok(h.operator(OperatorCommand::CreateShow(spec(show, 4))));
        ok(h.operator(OperatorCommand::OpenSales { show: ShowId(show) }));
        ok(h.client(ShowId(show), 1, 1, Harness::hold_request(&[1], None)));
    }
    ok(h.operator(OperatorCommand::FreezeShow { show: ShowId(9), to: 2 }));
    ok(h.operator(OperatorCommand::DropShow { show: ShowId(9), to: 2 }));
    ok(h.operator(OperatorCommand::FreezeShow { show: ShowId(10), to: 3 }));
    assert!(matches!(h.group.moves().get(&ShowId(9)), Some(ShowMove::Left { to: 2, .. })));
    assert!(matches!(h.group.moves().get(&ShowId(10)), Some(ShowMove::Leaving { to: 3, .. })));
}

/// The scenario as snapshot format 8 knew it: everything but an archived show.
pub fn build_version_8() -> Harness {
    let mut h = build_version_7();
    catalog(&mut h);
    h
}

/// Version 9: an archived show (show 8, created and cancelled before any sale).
fn archived_show(h: &mut Harness) {
    let show = ShowId(8);
    ok(h.operator(OperatorCommand::CreateShow(spec(8, 6))));
    ok(h.operator(OperatorCommand::CancelShow { show }));
    h.advance(MINUTE);
    let bytes = h.group.archive_export(show).expect("a cancelled show with no sale is settled");
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&bytes).into();
    ok(h.operator(OperatorCommand::ArchiveShow { show, digest }));
    assert!(h.group.archived().contains_key(&show));
}

/// The scenario as snapshot format 7 knew it: everything but the catalog.
pub fn build_version_7() -> Harness {
    let mut h = build_version_6();
    lagged_promotion(&mut h);
    h
}

/// Version 8: the catalog. A venue updated, a retired venue with its retired hall, a hall of
/// two sections, an event retired, shows 1 and 2 listed (show 2 rescheduled, then delisted).
fn catalog(h: &mut Harness) {
    let venue = |name: &str| VenueSpec {
        name: name.into(),
        address: "Rua Augusta 1".into(),
        city: "Lisbon".into(),
        postal_code: "1100-048".into(),
        lat_e6: 38_710_000,
        lon_e6: -9_137_000,
    };
    let row = |label: &str, count, y| Row {
        label: label.into(),
        first_number: 1,
        count,
        x: 0,
        y,
        dx: 10,
        dy: 0,
    };
    let hall = |venue| HallSpec {
        venue: VenueId(venue),
        name: "Sala 1".into(),
        sections: vec![
            Section {
                name: "Plateia".into(),
                class: 0,
                rows: vec![row("A", 10, 0), row("B", 10, 10)],
            },
            Section { name: "Balcão".into(), class: 1, rows: vec![row("C", 4, 30)] },
        ],
    };
    let event = EventSpec {
        title: "Hamlet".into(),
        description: "A prince of Denmark.".into(),
        genre: "drama".into(),
        language: "pt-PT".into(),
        duration_min: 180,
        images: vec!["https://img.example/hamlet.jpg".into()],
    };
    let changes = [
        CatalogCommand::Venue { venue: VenueId(1), change: Change::Create(venue("Odeon")) },
        CatalogCommand::Venue { venue: VenueId(1), change: Change::Update(venue("Odeon Lisboa")) },
        CatalogCommand::Venue { venue: VenueId(2), change: Change::Create(venue("Closed")) },
        CatalogCommand::Hall { hall: HallId(1), change: Change::Create(hall(1)) },
        CatalogCommand::Hall { hall: HallId(2), change: Change::Create(hall(2)) },
        CatalogCommand::Hall { hall: HallId(2), change: Change::Retire },
        CatalogCommand::Venue { venue: VenueId(2), change: Change::Retire },
        CatalogCommand::Event { event: EventId(1), change: Change::Create(event.clone()) },
        CatalogCommand::Event { event: EventId(2), change: Change::Create(event) },
        CatalogCommand::Event { event: EventId(2), change: Change::Retire },
        CatalogCommand::Listing {
            show: ShowId(1),
            change: Change::Create(ListingSpec {
                event: EventId(1),
                hall: HallId(1),
                starts_at_ms: START_MS + 60 * MINUTE,
            }),
        },
        CatalogCommand::Listing {
            show: ShowId(2),
            change: Change::Create(ListingSpec {
                event: EventId(1),
                hall: HallId(1),
                starts_at_ms: START_MS + 90 * MINUTE,
            }),
        },
        CatalogCommand::Listing {
            show: ShowId(2),
            change: Change::Update(ListingSpec {
                event: EventId(1),
                hall: HallId(1),
                starts_at_ms: START_MS + 120 * MINUTE,
            }),
        },
        CatalogCommand::Listing { show: ShowId(2), change: Change::Retire },
    ];
    for change in changes {
        ok(h.one(Command::Catalog(change)));
    }
    assert_eq!(h.group.catalog().revision(), h.group.applied_index());
}

/// The scenario as snapshot format 6 knew it: everything but an offer's promotion lag.
pub fn build_version_6() -> Harness {
    let mut h = build_version_5();
    policies(&mut h);
    h
}

/// Version 7: an offer whose seats waited in the pool. Show 7 (2 seats) is sold out to two
/// holds; a waiter wants both; the first seat released waits 30 s for the second.
fn lagged_promotion(h: &mut Harness) {
    let seven = h.on_sale_show(7, 2);
    let on = OperatorCommand::ConfigureWaitlist { show: seven, enabled: true, policy_version: 1 };
    ok(h.operator(on));
    let first = held(h, seven, 1, 1, &[0]);
    let second = held(h, seven, 2, 1, &[1]);
    let entry = join_waitlist(h, seven, 3, 1, 2);
    cancel_hold(h, seven, 1, 2, first);
    assert_eq!(h.show(seven).waitlist.pool.len(), 1, "one seat cannot serve a waiter of two");
    h.advance(30 * SECOND);
    cancel_hold(h, seven, 2, 2, second);
    let offer = &h.show(seven).waitlist.offers[&offer_of(h, entry)];
    assert_eq!(offer.promotion_lag_ms, Some(30 * SECOND));
}

/// Version 6: waitlist policies. Show 5 runs a lottery, drawn, in waves of one and then two,
/// with seats pooled behind a full wave and a drawn waiter still waiting; show 6 orders by
/// priority bands, a claimed band ahead of a guest who joined first.
fn policies(h: &mut Harness) {
    let (five, six) = (ShowId(5), ShowId(6));
    h.on_sale_show(5, 4);
    h.on_sale_show(6, 1);
    for show in [five, six] {
        let on = OperatorCommand::ConfigureWaitlist { show, enabled: true, policy_version: 1 };
        ok(h.operator(on));
    }
    let lottery = WaitlistRules {
        ordering: WaitlistOrdering::Lottery { draw_at_ms: h.group.log_time_ms() },
        wave_offers_max: 1,
    };
    let set = |policy_version, rules| OperatorCommand::ConfigureWaitlistPolicy {
        show: five,
        policy_version,
        rules,
    };
    ok(h.operator(set(2, lottery)));
    let sold_out = held(h, five, 1, 1, &[0, 1, 2, 3]);
    for who in [2, 3, 4] {
        join_waitlist(h, five, who, 1, 1);
    }
    cancel_hold(h, five, 1, 2, sold_out);
    assert_eq!(h.show(five).waitlist.offers.len(), 0, "nobody is served before the draw");
    ok(h.operator(OperatorCommand::DrawLottery { show: five, seed: 42 }));
    ok(h.operator(set(3, WaitlistRules { wave_offers_max: 2, ..lottery })));
    assert_eq!(h.show(five).waitlist.offers.len(), 2);
    assert_eq!(h.show(five).waitlist.policy.drawn.len(), 1);
    assert_eq!(h.show(five).waitlist.pool.len(), 2);

    let bands = WaitlistRules { ordering: WaitlistOrdering::Bands, wave_offers_max: 0 };
    let set =
        OperatorCommand::ConfigureWaitlistPolicy { show: six, policy_version: 2, rules: bands };
    ok(h.operator(set));
    held(h, six, 1, 1, &[0]);
    join_band(h, six, 2, 1, 1, BAND_GUEST);
    join_band(h, six, 3, 1, 1, 0);
}

/// The scenario as snapshot format 5 knew it: everything but the waitlists' policies.
pub fn build_version_5() -> Harness {
    let mut h = build_version_4();
    // Version 5: a leader's state digest of an earlier entry, for the replicas to compare
    // theirs with.
    let index = h.group.applied_index() - 3;
    ok(h.one(Command::AuditDigest { index, digest: [7; 32] }));
    h
}

/// The scenario as snapshot format 4 knew it: everything but the leaders' state digests.
pub fn build_version_4() -> Harness {
    let mut h = build_version_3();
    deliver(&mut h);
    h
}

/// The scenario as snapshot formats 2 and 3 knew it: everything but delivery to sinks. (The
/// code of those versions did not audit a show's own changes, so their fixtures hold no
/// `EntityKind::Show` records: compare without them.)
pub fn build_version_3() -> Harness {
    let mut h = Harness::new();
    let (one, two, three, four) = (ShowId(1), ShowId(2), ShowId(3), ShowId(4));
    h.on_sale_show(1, 20);
    h.on_sale_show(2, 10);
    h.on_sale_show(3, 4);
    h.on_sale_show(4, 3);
    for (show, group) in [(one, 1), (two, 1), (three, 1), (four, 2)] {
        ok(h.one(Command::Place { show, group }));
    }
    let waitlist =
        OperatorCommand::ConfigureWaitlist { show: three, enabled: true, policy_version: 2 };
    ok(h.operator(waitlist));

    // Everything that needs a long wait comes first. Show 1: a hold that expires held, and one
    // that expires while processing and is then paid late (refund work). Show 3: an offer that
    // expires.
    let expired = held(&mut h, one, 5, 1, &[6]);
    let late = held(&mut h, one, 8, 1, &[9]);
    let (late_payment, late_price) = h.checkout(one, 8, 2, late);
    let sold_out = held(&mut h, three, 1, 1, &[0, 1, 2, 3]);
    let lets_expire = join_waitlist(&mut h, three, 5, 1, 1);
    cancel_hold(&mut h, three, 1, 2, sold_out);
    let _expired_offer = offer_of(&h, lets_expire);
    h.advance(11 * MINUTE);
    ok(h.tick());
    paid(&mut h, one, late_payment, 100, late_price);
    assert_eq!(h.hold_state(one, expired), HoldStatus::Expired);
    assert_eq!(h.hold_state(one, late), HoldStatus::Expired);

    // Show 2: the admission lane, window 1, and one grant that runs out.
    let lane = OperatorCommand::ConfigureAdmission { show: two, enabled: true, window: 1 };
    ok(h.operator(lane));
    let consumed = join_queue(&mut h, two, 1, 1);
    let request = Harness::hold_request(&[0, 1], Some(consumed));
    ok(h.client(two, 1, 2, request));
    let left_granted = join_queue(&mut h, two, 2, 1);
    let expires = join_queue(&mut h, two, 3, 1);
    ok(h.client(two, 2, 2, ClientRequest::LeaveQueue { ticket: left_granted }));
    let granted = join_queue(&mut h, two, 4, 1);
    let left_waiting = join_queue(&mut h, two, 6, 1);
    ok(h.client(two, 6, 2, ClientRequest::LeaveQueue { ticket: left_waiting }));
    h.advance(61 * SECOND);
    ok(h.tick());
    let _waiting = join_queue(&mut h, two, 5, 1);
    let view = h.group.ticket(two, expires, None).expect("ticket");
    assert_eq!(view.state, TicketStatus::Expired);
    let view = h.group.ticket(two, granted, None).expect("ticket");
    assert_eq!(view.state, TicketStatus::Granted);

    // From here on log time stands still, so nothing above runs out. Show 3: sold out again,
    // with waiters in every state and seats pooled for a waiter who wants more than the pool.
    let first = held(&mut h, three, 1, 3, &[0, 1]);
    let second = held(&mut h, three, 2, 1, &[2, 3]);
    let accepts = join_waitlist(&mut h, three, 3, 1, 1);
    let declines = join_waitlist(&mut h, three, 4, 1, 2);
    let _offered = join_waitlist(&mut h, three, 6, 1, 1);
    let leaves = join_waitlist(&mut h, three, 9, 1, 1);
    let _waits = join_waitlist(&mut h, three, 7, 1, 3);
    ok(h.client(three, 9, 2, ClientRequest::LeaveWaitlist { entry: leaves }));
    cancel_hold(&mut h, three, 1, 4, first);
    let accepted = offer_of(&h, accepts);
    ok(h.client(three, 3, 2, ClientRequest::AcceptOffer { offer: accepted }));
    cancel_hold(&mut h, three, 2, 2, second);
    let declined = offer_of(&h, declines);
    ok(h.client(three, 4, 2, ClientRequest::DeclineOffer { offer: declined }));
    assert_eq!(h.show(three).waitlist.pool.len(), 2);

    // Show 1: holds in every live and final state.
    let _held = held(&mut h, one, 1, 3, &[1, 0]);
    let processing = held(&mut h, one, 2, 1, &[2, 3]);
    h.checkout(one, 2, 2, processing);
    let confirmed = held(&mut h, one, 3, 1, &[4]);
    let (payment, price) = h.checkout(one, 3, 2, confirmed);
    paid(&mut h, one, payment, 101, price);
    let cancelled = held(&mut h, one, 4, 1, &[5]);
    cancel_hold(&mut h, one, 4, 2, cancelled);
    let refunded = held(&mut h, one, 6, 1, &[7]);
    let (payment, price) = h.checkout(one, 6, 2, refunded);
    let booking = match paid(&mut h, one, payment, 102, price) {
        Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { booking }, .. } => booking,
        other => panic!("expected a booking, got {other:?}"),
    };
    ok(h.client(one, 6, 3, ClientRequest::CancelBooking { booking }));
    let declined_then_unknown = held(&mut h, one, 7, 1, &[8, 10]);
    let (payment, _) = h.checkout(one, 7, 2, declined_then_unknown);
    ok(h.pay(one, payment, 103, PaymentResult::Declined));
    let (payment, _) = h.checkout(one, 7, 3, declined_then_unknown);
    ok(h.pay(one, payment, 104, PaymentResult::Unknown));
    let released = OperatorCommand::CapacityReleased {
        show: one,
        event: CapacityEventId(7),
        seats: vec![19, 18],
    };
    ok(h.operator(released));

    // Show 4: cancelled with an open offer and a confirmed booking.
    let waitlist =
        OperatorCommand::ConfigureWaitlist { show: four, enabled: true, policy_version: 1 };
    ok(h.operator(waitlist));
    let booked = held(&mut h, four, 1, 1, &[0]);
    let (payment, price) = h.checkout(four, 1, 2, booked);
    paid(&mut h, four, payment, 200, price);
    let released = held(&mut h, four, 2, 1, &[1, 2]);
    let _withdrawn = join_waitlist(&mut h, four, 3, 1, 1);
    cancel_hold(&mut h, four, 2, 2, released);
    let prices =
        OperatorCommand::SetPrices { show: four, version: 2, prices_minor: vec![6_000, 9_000] };
    ok(h.operator(prices));
    ok(h.operator(OperatorCommand::CancelShow { show: four }));

    // The group: the first few outbox events were delivered.
    ok(h.one(Command::AckOutbox { up_to: 3 }));
    h
}

/// Version 4: two sinks. `sink-a` finished events 4 to 7 (6 given up on) and 9 (so 8 is a gap);
/// `sink-b` delivered 4 and gave up on 5, which an operator asked to replay. The outbox is
/// trimmed to what both finished (up to 5).
fn deliver(h: &mut Harness) {
    let (a, b) = (SinkName::new("sink-a").unwrap(), SinkName::new("sink-b").unwrap());
    for sink in [&a, &b] {
        ok(h.one(Command::Delivery(DeliveryCommand::AddSink { sink: sink.clone() })));
    }
    let failure =
        |event: u64| Failure { event: OutboxId(event), attempts: 8, error: "HTTP 503".into() };
    let report = |sink: &SinkName, delivered: &[u64], dead: Vec<Failure>| {
        let delivered = delivered.iter().copied().map(OutboxId).collect();
        Command::Delivery(DeliveryCommand::Report { sink: sink.clone(), delivered, dead })
    };
    ok(h.one(report(&a, &[4, 5, 7], vec![failure(6)])));
    ok(h.one(report(&a, &[9], Vec::new())));
    ok(h.one(report(&b, &[4], vec![failure(5)])));
    let replay = DeliveryCommand::Replay { sink: b, events: vec![OutboxId(5)] };
    ok(h.one(Command::Delivery(replay)));
}
