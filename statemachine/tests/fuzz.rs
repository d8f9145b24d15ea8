//! "No client input can panic `apply`" (shared/CONVENTIONS.md, from TigerBeetle): a command that
//! panics `apply` is a poison pill that crashes every replica on replay.
//!
//! `cargo fuzz` needs a nightly toolchain, so this is a proptest fuzzer instead: fully arbitrary
//! commands (any seat numbers, empty and duplicate holds, any ids, amounts, currency bytes,
//! windows, policies and layouts, batches of up to a few hundred commands and one over the
//! limit), any log time up to `u64::MAX / 2`, and entries whose index goes backwards. Calling
//! `apply` is the assertion; invariants are checked after every entry. Snapshots are fuzzed too:
//! `decode_snapshot` on random, truncated and bit-flipped bytes returns an error or a valid
//! group, never panics.

mod common;

use std::sync::OnceLock;

use common::{Harness, START_MS, proptest_config, session};
use proptest::prelude::*;
use statemachine::limits::*;
use statemachine::*;

// ---------------------------------------------------------------------------------------------
// Arbitrary values, weighted towards values that reach real objects and towards edges.

fn any_id() -> impl Strategy<Value = u64> {
    prop_oneof![
        12 => 0u64..=40,
        2 => any::<u64>(),
        1 => Just(u64::MAX),
        1 => Just(u64::MAX / 2),
    ]
}

/// An id that often names a real object of a small show.
fn near_id() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 1u64..=25, 1 => any_id()]
}

fn show_id() -> impl Strategy<Value = ShowId> {
    prop_oneof![12 => 1u64..=3, 1 => Just(0), 1 => any::<u64>(), 1 => Just(u64::MAX)]
        .prop_map(ShowId)
}

fn session_id() -> impl Strategy<Value = SessionId> {
    prop_oneof![8 => (0u64..3).prop_map(session), 1 => any::<u128>().prop_map(SessionId)]
}

fn small_or_any_u128() -> impl Strategy<Value = u128> {
    prop_oneof![6 => 0u128..6, 1 => any::<u128>(), 1 => Just(u128::MAX)]
}

fn seat() -> impl Strategy<Value = SeatNo> {
    prop_oneof![
        12 => 0u32..40,
        2 => any::<u32>(),
        1 => Just(u32::MAX),
        1 => (SEATS_PER_SHOW_MAX - 3)..=(SEATS_PER_SHOW_MAX + 3),
    ]
}

/// 0..=12 seats as a client may name them: in any order, often with duplicates, sometimes none
/// or too many.
fn seat_list() -> impl Strategy<Value = Vec<SeatNo>> {
    prop_oneof![
        3 => prop::collection::vec(0u32..12, 1..=3),
        1 => prop::collection::vec(seat(), 0..=SEATS_PER_HOLD_MAX + 2),
    ]
}

/// A seat set made from an arbitrary list. A list that is no seat set (none, too many, a seat
/// twice) cannot be a command (`seat_sets_are_checked_on_decode` proves the log refuses it), so
/// what reaches apply is its distinct seats, at most ten, or seat 0.
fn seat_set() -> impl Strategy<Value = SeatSet> {
    seat_list().prop_map(|seats| {
        SeatSet::new(seats.iter().copied()).unwrap_or_else(|_not_a_set| {
            let mut distinct = seats;
            distinct.sort_unstable();
            distinct.dedup();
            distinct.truncate(SEATS_PER_HOLD_MAX);
            SeatSet::new(distinct).unwrap_or_else(|_empty| seats_of(&[0]))
        })
    })
}

fn seats_of(list: &[SeatNo]) -> SeatSet {
    SeatSet::new(list.iter().copied()).expect("a valid seat set")
}

fn currency() -> impl Strategy<Value = Currency> {
    prop_oneof![6 => Just(*b"EUR"), 1 => Just(*b"USD"), 2 => any::<[u8; 3]>()].prop_map(Currency)
}

fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0u64..=10).prop_map(|n| n * 5_000),
        2 => 0u64..=100_000,
        1 => Just(SEAT_PRICE_MINOR_MAX),
        1 => Just(SEAT_PRICE_MINOR_MAX + 1),
        1 => any::<u64>(),
        1 => Just(u64::MAX),
    ]
}

fn prices() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        8 => prop::collection::vec(amount(), 1..=3),
        1 => prop::collection::vec(amount(), 0..=(SEAT_CLASSES_PER_SHOW_MAX + 2)),
        1 => Just(Vec::new()),
    ]
}

fn deadline() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => DEADLINE_MS_MIN..=3_600_000,
        2 => DEADLINE_MS_MIN..=DEADLINE_MS_MAX,
        1 => Just(0),
        1 => Just(DEADLINE_MS_MIN - 1),
        1 => Just(DEADLINE_MS_MAX),
        1 => Just(DEADLINE_MS_MAX + 1),
        1 => any::<u64>(),
        1 => Just(u64::MAX),
    ]
}

fn policy() -> impl Strategy<Value = ShowPolicy> {
    (
        (deadline(), deadline(), deadline(), deadline(), deadline(), deadline()),
        prop_oneof![8 => 1u32..=4, 1 => Just(0), 1 => Just(HOLDS_PER_SESSION_MAX + 1), 1 => any::<u32>()],
        any::<bool>(),
        // Most policies make the retention cover hold + grace, so that some are valid.
        prop::bool::weighted(0.8),
    )
        .prop_map(|((hold, grace, grant, wait, offer, retention), holds, cancel, cover)| {
            let retention = if cover { hold.saturating_add(grace).max(retention) } else { retention };
            ShowPolicy {
                hold_ttl_ms: hold,
                payment_grace_ms: grace,
                grant_ttl_ms: grant,
                ticket_wait_ms: wait,
                offer_ttl_ms: offer,
                idempotency_retention_ms: retention,
                holds_per_session_max: holds,
                booking_cancel_allowed: cancel,
            }
        })
}

fn range(
    count: impl Strategy<Value = u32>,
    class: impl Strategy<Value = u8>,
) -> impl Strategy<Value = SeatRange> {
    (count, class).prop_map(|(count, class)| SeatRange { count, class })
}

/// Layouts: mostly small, sometimes garbage, at the seat limit (exactly and one over), at the
/// range limit (exactly and one over), or with an empty range.
fn layout() -> impl Strategy<Value = Vec<SeatRange>> {
    let at_limit = (prop::bool::ANY, 1u32..SEATS_PER_SHOW_MAX).prop_map(|(over, split)| {
        let total = SEATS_PER_SHOW_MAX + u32::from(over);
        vec![SeatRange { count: split, class: 0 }, SeatRange { count: total - split, class: 1 }]
    });
    let many_ranges = (LAYOUT_RANGES_PER_SHOW_MAX..=LAYOUT_RANGES_PER_SHOW_MAX + 1)
        .prop_map(|ranges| vec![SeatRange { count: 1, class: 0 }; ranges]);
    prop_oneof![
        40 => prop::collection::vec(range(1u32..=30, 0u8..=2), 1..=3),
        4 => prop::collection::vec(range(any::<u32>(), any::<u8>()), 0..=6),
        2 => prop::collection::vec(range(0u32..=3, 0u8..=1), 1..=3),
        1 => Just(Vec::new()),
        1 => Just(vec![SeatRange { count: u32::MAX, class: 0 }, SeatRange { count: 2, class: 0 }]),
        1 => at_limit,
        1 => many_ranges,
    ]
}

fn show_spec() -> impl Strategy<Value = ShowSpec> {
    (show_id(), currency(), prices(), layout(), policy()).prop_map(
        |(show, currency, prices_minor, layout, policy)| ShowSpec {
            show,
            currency,
            prices_minor,
            layout,
            policy,
        },
    )
}

fn client_request() -> impl Strategy<Value = ClientRequest> {
    let hold = (
        seat_set(),
        prop_oneof![6 => Just(1u32), 2 => 0u32..=3, 1 => any::<u32>()],
        prop::option::of(near_id().prop_map(TicketId)),
    )
        .prop_map(|(seats, price_version, grant)| ClientRequest::Hold {
            seats,
            price_version,
            grant,
        });
    let quantity = prop_oneof![4 => 1u8..=2, 2 => 3u8..=10, 1 => any::<u8>()];
    let band = prop_oneof![4 => 0u8..WAITLIST_BANDS_MAX, 1 => any::<u8>()];
    prop_oneof![
        10 => hold,
        2 => near_id().prop_map(|id| ClientRequest::CancelHold { hold: HoldId(id) }),
        4 => near_id().prop_map(|id| ClientRequest::Checkout { hold: HoldId(id) }),
        2 => near_id().prop_map(|id| ClientRequest::CancelBooking { booking: BookingId(id) }),
        2 => Just(ClientRequest::JoinQueue),
        1 => near_id().prop_map(|id| ClientRequest::LeaveQueue { ticket: TicketId(id) }),
        3 => (quantity, band)
            .prop_map(|(quantity, band)| ClientRequest::JoinWaitlist { quantity, band }),
        1 => near_id().prop_map(|id| ClientRequest::LeaveWaitlist { entry: EntryId(id) }),
        2 => near_id().prop_map(|id| ClientRequest::AcceptOffer { offer: OfferId(id) }),
        1 => near_id().prop_map(|id| ClientRequest::DeclineOffer { offer: OfferId(id) }),
    ]
}

fn operator_command() -> impl Strategy<Value = OperatorCommand> {
    let window = prop_oneof![
        8 => 1u32..=3,
        1 => Just(0),
        1 => Just(ADMISSION_WINDOW_MAX),
        1 => Just(ADMISSION_WINDOW_MAX + 1),
        1 => any::<u32>(),
    ];
    let capacity_seats = prop_oneof![
        12 => prop::collection::vec(seat(), 0..=12),
        1 => prop::collection::vec(0u32..2_000, CAPACITY_EVENT_SEATS_MAX..=CAPACITY_EVENT_SEATS_MAX + 1),
    ];
    prop_oneof![
        6 => show_spec().prop_map(OperatorCommand::CreateShow),
        4 => show_id().prop_map(|show| OperatorCommand::OpenSales { show }),
        1 => show_id().prop_map(|show| OperatorCommand::CloseSales { show }),
        1 => prop_oneof![9 => Just(None), 1 => show_id().prop_map(Some)].prop_map(|show| {
            // Rare: a cancelled show rejects most commands.
            match show {
                Some(show) => OperatorCommand::CancelShow { show },
                None => OperatorCommand::OpenSales { show: ShowId(1) },
            }
        }),
        1 => (show_id(), prop_oneof![3 => 0u32..=4, 1 => any::<u32>(), 1 => Just(u32::MAX)], prices())
            .prop_map(|(show, version, prices_minor)| OperatorCommand::SetPrices { show, version, prices_minor }),
        2 => (show_id(), any::<bool>(), window)
            .prop_map(|(show, enabled, window)| OperatorCommand::ConfigureAdmission { show, enabled, window }),
        2 => (show_id(), any::<bool>(), prop_oneof![3 => 0u32..=3, 1 => any::<u32>()]).prop_map(
            |(show, enabled, policy_version)| OperatorCommand::ConfigureWaitlist { show, enabled, policy_version }
        ),
        2 => (show_id(), small_or_any_u128(), capacity_seats).prop_map(|(show, event, seats)| {
            OperatorCommand::CapacityReleased { show, event: CapacityEventId(event), seats }
        }),
    ]
}

fn payment_outcome() -> impl Strategy<Value = PaymentOutcome> {
    let result = prop_oneof![
        3 => (amount(), currency())
            .prop_map(|(amount_minor, currency)| PaymentResult::Succeeded { amount_minor, currency }),
        1 => Just(PaymentResult::Declined),
        1 => Just(PaymentResult::Unknown),
    ];
    (show_id(), near_id(), small_or_any_u128(), result).prop_map(
        |(show, payment, event, result)| PaymentOutcome {
            show,
            payment: PaymentId(payment),
            event: ProviderEventId(event),
            result,
        },
    )
}

fn command() -> impl Strategy<Value = Command> {
    let client = (show_id(), session_id(), small_or_any_u128(), client_request()).prop_map(
        |(show, session, key, request)| {
            Command::Client(ClientCommand { show, session, key: IdempotencyKey(key), request })
        },
    );
    prop_oneof![
        20 => client,
        4 => operator_command().prop_map(Command::Operator),
        5 => payment_outcome().prop_map(Command::Payment),
        2 => (show_id(), near_id())
            .prop_map(|(show, payment)| Command::RefundCompleted { show, payment: PaymentId(payment) }),
        2 => Just(Command::Tick),
        1 => prop_oneof![0u64..=60, any::<u64>(), Just(u64::MAX)].prop_map(|up_to| Command::AckOutbox { up_to }),
        1 => (show_id(), prop_oneof![0u64..=4, any::<u64>()])
            .prop_map(|(show, group)| Command::Place { show, group }),
        3 => delivery_command().prop_map(Command::Delivery),
        1 => (prop_oneof![0u64..=60, any::<u64>()], any::<[u8; 32]>())
            .prop_map(|(index, digest)| Command::AuditDigest { index, digest }),
    ]
}

/// Delivery commands about two sinks (names are checked when a command is decoded, so only
/// valid ones can reach `apply`), with event ids near the outbox's and anywhere.
fn delivery_command() -> impl Strategy<Value = DeliveryCommand> {
    let sink = prop_oneof![4 => Just("sink-a"), 1 => Just("b")]
        .prop_map(|name| SinkName::new(name).expect("a valid name"));
    let event =
        prop_oneof![8 => 0u64..=40, 1 => any::<u64>(), 1 => Just(u64::MAX)].prop_map(OutboxId);
    let failure =
        (event.clone(), any::<u32>(), prop_oneof![3 => Just(String::new()), 1 => ".{0,300}"])
            .prop_map(|(event, attempts, error)| Failure { event, attempts, error });
    let events = prop::collection::vec(event.clone(), 0..6);
    prop_oneof![
        2 => sink.clone().prop_map(|sink| DeliveryCommand::AddSink { sink }),
        1 => sink.clone().prop_map(|sink| DeliveryCommand::RemoveSink { sink }),
        6 => (sink.clone(), events.clone(), prop::collection::vec(failure, 0..3))
            .prop_map(|(sink, delivered, dead)| DeliveryCommand::Report { sink, delivered, dead }),
        2 => (sink, events).prop_map(|(sink, events)| DeliveryCommand::Replay { sink, events }),
    ]
}

/// How an entry's index relates to the last one.
#[derive(Clone, Copy, Debug)]
enum Index {
    Next(u64),
    Same,
    Back(u64),
    /// Near `u64::MAX`: every later entry is at or below it and ignored.
    Last(u64),
}

/// An entry's stamped time: relative to the previous stamp, or absolute.
#[derive(Clone, Copy, Debug)]
enum Time {
    Forward(u64),
    Back(u64),
    At(u64),
}

/// The commands of an entry: generated, or one command repeated past the batch limit.
#[derive(Clone, Debug)]
enum Batch {
    Commands(Vec<Command>),
    Oversized(Command, usize),
}

fn entry() -> impl Strategy<Value = (Index, Time, Batch, Vec<u8>)> {
    let index = prop_oneof![
        16 => (1u64..=3).prop_map(Index::Next),
        1 => Just(Index::Same),
        1 => (1u64..=5).prop_map(Index::Back),
        1 => (0u64..=2).prop_map(Index::Last),
    ];
    let time = prop_oneof![
        8 => prop_oneof![Just(0u64), 0u64..=5_000, 0u64..=900_000, 0u64..=DEADLINE_MS_MAX].prop_map(Time::Forward),
        1 => (0u64..=3_600_000).prop_map(Time::Back),
        1 => prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX / 2),
            Just(u64::MAX / 2 - 1),
            Just(u64::MAX / 2 - DEADLINE_MS_MAX),
            0u64..=u64::MAX / 2,
        ]
        .prop_map(Time::At),
    ];
    let batch = prop_oneof![
        160 => prop::collection::vec(command(), 0..=8).prop_map(Batch::Commands),
        32 => prop::collection::vec(command(), 0..=64).prop_map(Batch::Commands),
        8 => prop::collection::vec(command(), 0..=300).prop_map(Batch::Commands),
        // Rare: each costs thousands of rejections.
        1 => (command(), (BATCH_COMMANDS_MAX + 1)..=(BATCH_COMMANDS_MAX + 2))
            .prop_map(|(command, count)| Batch::Oversized(command, count)),
    ];
    (index, time, batch, prop::collection::vec(any::<u8>(), 1..=8))
}

/// A valid show to start from (so that arbitrary commands meet real holds, tickets and offers).
#[derive(Clone, Debug)]
struct Prelude {
    seats: u32,
    lane: Option<u32>,
    waitlist: bool,
}

fn prelude() -> impl Strategy<Value = Option<Vec<Prelude>>> {
    let show = (
        prop_oneof![3 => 3u32..=8, 1 => 9u32..=40],
        prop::option::weighted(0.3, 1u32..=3),
        any::<bool>(),
    )
        .prop_map(|(seats, lane, waitlist)| Prelude { seats, lane, waitlist });
    prop::option::weighted(0.85, prop::collection::vec(show, 1..=3))
}

fn prelude_commands(shows: &[Prelude]) -> Vec<Command> {
    let mut commands = Vec::new();
    for (n, prelude) in shows.iter().enumerate() {
        let show = ShowId(n as u64 + 1);
        commands.push(Command::Operator(OperatorCommand::CreateShow(common::spec(
            show.0,
            prelude.seats,
        ))));
        commands.push(Command::Operator(OperatorCommand::OpenSales { show }));
        if let Some(window) = prelude.lane {
            commands.push(Command::Operator(OperatorCommand::ConfigureAdmission {
                show,
                enabled: true,
                window,
            }));
        }
        commands.push(Command::Operator(OperatorCommand::ConfigureWaitlist {
            show,
            enabled: prelude.waitlist,
            policy_version: 1,
        }));
    }
    commands
}

/// Objects seen in earlier outcomes and outbox events, so that arbitrary commands can be aimed
/// at them: the show, the owner, the id, and the price to pay (for holds and payments).
#[derive(Default)]
struct Known {
    holds: Vec<(ShowId, SessionId, u64)>,
    payments: Vec<(ShowId, SessionId, u64, Money)>,
    bookings: Vec<(ShowId, SessionId, u64)>,
    tickets: Vec<(ShowId, SessionId, u64)>,
    entries: Vec<(ShowId, SessionId, u64)>,
    offers: Vec<(ShowId, SessionId, u64)>,
    last_event: u64,
}

fn choose<T: Copy>(list: &[T], aim: u8) -> Option<T> {
    (!list.is_empty()).then(|| list[list.len() - 1 - usize::from(aim) % list.len().min(8)])
}

impl Known {
    /// Records what the outcomes and the new outbox events name.
    fn learn(&mut self, commands: &[Command], outcomes: &[Outcome], group: &Group) {
        for (command, outcome) in commands.iter().zip(outcomes) {
            let Command::Client(client) = command else { continue };
            let at = (client.show, client.session);
            match outcome {
                Ok(Reply::Held(receipt)) => self.holds.push((at.0, at.1, receipt.hold.0)),
                Ok(Reply::OfferAccepted { hold, .. }) => self.holds.push((at.0, at.1, hold.hold.0)),
                Ok(Reply::CheckoutStarted { payment, price, .. }) => {
                    self.payments.push((at.0, at.1, payment.0, *price));
                }
                Ok(Reply::Queued { ticket, .. }) => self.tickets.push((at.0, at.1, ticket.0)),
                Ok(Reply::WaitlistJoined { entry, .. }) => self.entries.push((at.0, at.1, entry.0)),
                _ => {}
            }
        }
        for event in group.outbox().pending().filter(|event| event.id.0 > self.last_event) {
            match event.event {
                Event::OfferMade { offer, session, .. } => {
                    self.offers.push((event.show, session, offer.0))
                }
                Event::GrantIssued { ticket, session, .. } => {
                    self.tickets.push((event.show, session, ticket.0));
                }
                Event::BookingConfirmed { booking, session, .. } => {
                    self.bookings.push((event.show, session, booking.0));
                }
                _ => {}
            }
        }
        self.last_event = group.outbox().last_id();
    }

    /// Points a command at a known object (for half of the `aim` values), as its owner would.
    fn aim(&self, command: &mut Command, aim: u8) {
        if aim >= 128 {
            return;
        }
        match command {
            Command::Client(client) => {
                let target = match &mut client.request {
                    ClientRequest::Hold { grant, .. } => {
                        choose(&self.tickets, aim).map(|(show, session, id)| {
                            if grant.is_some() {
                                *grant = Some(TicketId(id));
                            }
                            (show, session)
                        })
                    }
                    ClientRequest::CancelHold { hold } | ClientRequest::Checkout { hold } => {
                        choose(&self.holds, aim).map(|(show, session, id)| {
                            *hold = HoldId(id);
                            (show, session)
                        })
                    }
                    ClientRequest::CancelBooking { booking } => {
                        choose(&self.bookings, aim).map(|(show, session, id)| {
                            *booking = BookingId(id);
                            (show, session)
                        })
                    }
                    ClientRequest::LeaveQueue { ticket } => {
                        choose(&self.tickets, aim).map(|(show, session, id)| {
                            *ticket = TicketId(id);
                            (show, session)
                        })
                    }
                    ClientRequest::LeaveWaitlist { entry } => {
                        choose(&self.entries, aim).map(|(show, session, id)| {
                            *entry = EntryId(id);
                            (show, session)
                        })
                    }
                    ClientRequest::AcceptOffer { offer }
                    | ClientRequest::DeclineOffer { offer } => {
                        choose(&self.offers, aim).map(|(show, session, id)| {
                            *offer = OfferId(id);
                            (show, session)
                        })
                    }
                    ClientRequest::JoinQueue | ClientRequest::JoinWaitlist { .. } => None,
                };
                if let Some((show, session)) = target {
                    client.show = show;
                    client.session = session;
                }
            }
            Command::Payment(outcome) => {
                if let Some((show, _, id, price)) = choose(&self.payments, aim) {
                    outcome.show = show;
                    outcome.payment = PaymentId(id);
                    if let (PaymentResult::Succeeded { amount_minor, currency }, true) =
                        (&mut outcome.result, !aim.is_multiple_of(4))
                    {
                        (*amount_minor, *currency) = (price.amount_minor, price.currency);
                    }
                }
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Snapshots to mutate.

/// Groups with every kind of entity, in every state the scripts reach, encoded.
fn rich_snapshots() -> &'static [Vec<u8>] {
    static SNAPSHOTS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SNAPSHOTS.get_or_init(|| {
        let mut h = Harness::new();
        let mut snapshots = vec![h.group.encode_snapshot()];
        // Show 1: holds in every state, bookings, payments, refund work.
        let show = h.on_sale_show(1, 20);
        let paid = h.held(show, 1, 1, &[0, 1]);
        let (payment, price) = h.checkout(show, 1, 2, paid.hold);
        h.pay_ok(show, payment, 1, price).unwrap();
        let unknown = h.held(show, 2, 1, &[2, 3, 4]);
        let (payment, _) = h.checkout(show, 2, 2, unknown.hold);
        h.pay(show, payment, 2, PaymentResult::Unknown).unwrap();
        let cancelled = h.held(show, 3, 1, &[5]);
        h.client(show, 3, 2, ClientRequest::CancelHold { hold: cancelled.hold }).unwrap();
        h.held(show, 4, 1, &[6, 7]);
        let late = h.held(show, 5, 1, &[8]);
        let (payment, price) = h.checkout(show, 5, 2, late.hold);
        h.advance(10 * 60 * 1_000);
        h.pay_ok(show, payment, 3, price).unwrap();
        let booked = h.held(show, 6, 1, &[9]);
        let (payment, price) = h.checkout(show, 6, 2, booked.hold);
        let Ok(Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { booking }, .. }) =
            h.pay_ok(show, payment, 4, price)
        else {
            panic!("expected a booking");
        };
        h.client(show, 6, 3, ClientRequest::CancelBooking { booking }).unwrap();
        h.held(show, 7, 1, &[10]);
        snapshots.push(h.group.encode_snapshot());
        // Show 2: an admission lane with granted, waiting, consumed and left tickets.
        let lane = h.on_sale_show(2, 10);
        h.operator(OperatorCommand::ConfigureAdmission { show: lane, enabled: true, window: 1 })
            .unwrap();
        let mut tickets = Vec::new();
        for who in 1..=4 {
            match h.client(lane, who, 10, ClientRequest::JoinQueue) {
                Ok(Reply::Queued { ticket, .. }) => tickets.push(ticket),
                other => panic!("expected a ticket, got {other:?}"),
            }
        }
        h.client(lane, 1, 11, Harness::hold_request(&[0], Some(tickets[0]))).unwrap();
        h.client(lane, 3, 11, ClientRequest::LeaveQueue { ticket: tickets[2] }).unwrap();
        snapshots.push(h.group.encode_snapshot());
        // Show 3: sold out, with waiters, an open offer, an accepted and a declined one.
        let sold = h.on_sale_show(3, 6);
        h.operator(OperatorCommand::ConfigureWaitlist {
            show: sold,
            enabled: true,
            policy_version: 1,
        })
        .unwrap();
        let a = h.held(sold, 1, 20, &[0, 1]);
        let b = h.held(sold, 2, 20, &[2, 3]);
        let c = h.held(sold, 3, 20, &[4, 5]);
        for who in 4..=7 {
            h.client(
                sold,
                who,
                21,
                ClientRequest::JoinWaitlist { quantity: 1, band: (who % 3) as u8 },
            )
            .unwrap();
        }
        for (who, hold) in [(1, a.hold), (2, b.hold), (3, c.hold)] {
            h.client(sold, who, 22, ClientRequest::CancelHold { hold }).unwrap();
        }
        let offers: Vec<(OfferId, SessionId)> =
            h.show(sold).waitlist.offers.values().map(|offer| (offer.id, offer.session)).collect();
        let owner =
            |session: SessionId| (4..=7).find(|who| common::session(*who) == session).unwrap();
        let (accepted, accepter) = offers[0];
        h.client(sold, owner(accepter), 23, ClientRequest::AcceptOffer { offer: accepted })
            .unwrap();
        let (declined, decliner) = offers[1];
        h.client(sold, owner(decliner), 23, ClientRequest::DeclineOffer { offer: declined })
            .unwrap();
        h.operator(OperatorCommand::CapacityReleased {
            show: ShowId(1),
            event: CapacityEventId(9),
            seats: vec![19],
        })
        .unwrap();
        snapshots.push(h.group.encode_snapshot());
        // Every show, cancelled or closed, and some events acknowledged.
        h.operator(OperatorCommand::CancelShow { show: lane }).unwrap();
        h.operator(OperatorCommand::CloseSales { show }).unwrap();
        h.one(Command::AckOutbox { up_to: 3 }).unwrap();
        snapshots.push(h.group.encode_snapshot());
        snapshots
    })
}

/// A change to a valid snapshot.
#[derive(Clone, Debug)]
enum Mutation {
    Truncate(usize),
    FlipBits(Vec<(usize, u8)>),
    SetByte(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Append(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => any::<usize>().prop_map(Mutation::Truncate),
        4 => prop::collection::vec((any::<usize>(), 0u8..8), 1..=4).prop_map(Mutation::FlipBits),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::SetByte(at, byte)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert(at, byte)),
        1 => any::<usize>().prop_map(Mutation::Remove),
        1 => prop::collection::vec(any::<u8>(), 1..=8).prop_map(Mutation::Append),
    ]
}

fn mutate(bytes: &mut Vec<u8>, mutation: &Mutation) {
    let len = bytes.len();
    match mutation {
        Mutation::Truncate(at) => bytes.truncate(at % len),
        Mutation::FlipBits(flips) => {
            for (at, bit) in flips {
                bytes[at % len] ^= 1 << bit;
            }
        }
        Mutation::SetByte(at, byte) => bytes[at % len] = *byte,
        Mutation::Insert(at, byte) => bytes.insert(at % (len + 1), *byte),
        Mutation::Remove(at) => {
            bytes.remove(at % len);
        }
        Mutation::Append(tail) => bytes.extend_from_slice(tail),
    }
}

/// Decoding either fails or gives a group that passes its invariants and snapshots again.
fn check_decode(bytes: &[u8]) {
    if let Ok(group) = Group::decode_snapshot(bytes) {
        assert_eq!(group.check_invariants(), Ok(()));
        let again = Group::decode_snapshot(&group.encode_snapshot()).expect("re-encoded snapshot");
        assert!(again == group);
    }
}

// ---------------------------------------------------------------------------------------------
// Fuzz tests.

proptest! {
    #![proptest_config(proptest_config(20_000))]

    /// Arbitrary entries never panic `apply`, always get one outcome per command (none when at
    /// or below the applied index), and keep every invariant; the final state snapshots.
    #[test]
    fn arbitrary_entries_never_panic_apply(
        prelude in prelude(),
        start in prop_oneof![4 => Just(START_MS), 1 => Just(0u64), 1 => 0u64..=u64::MAX / 2],
        entries in prop::collection::vec(entry(), 1..=8),
    ) {
        let mut group = Group::new();
        let (mut index, mut time) = (0u64, start);
        if let Some(shows) = prelude {
            index += 1;
            let commands = prelude_commands(&shows);
            let outcomes = group.apply(&Entry { index, time_ms: time, commands });
            prop_assert!(outcomes.iter().all(Result::is_ok), "{:?}", outcomes);
        }
        let mut known = Known::default();
        // Snapshots as the raft crate builds them, reusing unchanged shows, in the current
        // format: always the bytes of a whole encoding.
        let mut encodings = ShowEncodings::default();
        for (step, stamp, batch, aims) in entries {
            index = match step {
                Index::Next(delta) => index.saturating_add(delta),
                Index::Same => index,
                Index::Back(delta) => index.saturating_sub(delta),
                Index::Last(below) => u64::MAX - below,
            };
            time = match stamp {
                Time::Forward(delta) => time.saturating_add(delta).min(u64::MAX / 2),
                Time::Back(delta) => time.saturating_sub(delta),
                Time::At(at) => at,
            };
            let commands = match batch {
                Batch::Commands(mut commands) => {
                    for (at, command) in commands.iter_mut().enumerate() {
                        known.aim(command, aims[at % aims.len()]);
                    }
                    commands
                }
                Batch::Oversized(command, count) => vec![command; count],
            };
            let applied_before = group.applied_index();
            let entry = Entry { index, time_ms: time, commands };
            let outcomes = group.apply(&entry);
            known.learn(&entry.commands, &outcomes, &group);
            if index > applied_before {
                prop_assert_eq!(outcomes.len(), entry.commands.len());
                prop_assert_eq!(group.applied_index(), index);
            } else {
                prop_assert!(outcomes.is_empty());
                prop_assert_eq!(group.applied_index(), applied_before);
            }
            if let Err(violation) = group.check_invariants() {
                panic!("invariant broken after entry {index}: {violation}");
            }
            let mut current = group.clone();
            current.feature_level = current.feature_level.max(FEATURE_LEVEL_MOVES);
            prop_assert!(
                current.encode_snapshot_reusing(&mut encodings) == current.encode_snapshot(),
                "a build reusing unchanged shows wrote other bytes after entry {}", index
            );
        }
        let bytes = group.encode_snapshot();
        let restored = Group::decode_snapshot(&bytes).expect("a snapshot decodes");
        prop_assert!(restored == group);
    }
}

proptest! {
    #![proptest_config(proptest_config(20_000))]

    /// Random bytes, with or without a valid header, never panic `decode_snapshot`.
    #[test]
    fn random_bytes_never_panic_decode(
        header in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..=512),
    ) {
        let mut input = if header { rich_snapshots()[0][..6].to_vec() } else { Vec::new() };
        input.extend_from_slice(&bytes);
        check_decode(&input);
    }

    /// Truncated, bit-flipped and otherwise damaged valid snapshots decode to an error or to a
    /// valid group, never a panic.
    #[test]
    fn damaged_snapshots_never_panic_decode(
        which in any::<usize>(),
        mutations in prop::collection::vec(mutation(), 1..=3),
    ) {
        let snapshots = rich_snapshots();
        let mut bytes = snapshots[which % snapshots.len()].clone();
        for mutation in &mutations {
            if bytes.is_empty() {
                break;
            }
            mutate(&mut bytes, mutation);
        }
        check_decode(&bytes);
    }
}

proptest! {
    #![proptest_config(proptest_config(10_000))]

    /// Log entries arrive as postcard bytes (raft/src/codec.rs): damaged bytes either fail to
    /// decode or decode to an entry that `apply` takes without panicking.
    #[test]
    fn damaged_entry_bytes_never_panic_apply(
        commands in prop::collection::vec(command(), 1..=6),
        mutations in prop::collection::vec(mutation(), 1..=3),
    ) {
        let mut group = decode_target().clone();
        let index = group.applied_index() + 1;
        let entry = Entry { index, time_ms: group.log_time_ms() + 1_000, commands };
        let mut bytes = postcard::to_stdvec(&entry).expect("an entry encodes");
        for mutation in &mutations {
            if bytes.is_empty() {
                break;
            }
            mutate(&mut bytes, mutation);
        }
        if let Ok(decoded) = postcard::from_bytes::<Entry>(&bytes) {
            let outcomes = group.apply(&decoded);
            if decoded.index > index - 1 {
                prop_assert_eq!(outcomes.len(), decoded.commands.len());
            }
            if let Err(violation) = group.check_invariants() {
                panic!("invariant broken by {decoded:?}: {violation}");
            }
        }
    }
}

/// The group the decoded-entry fuzzer applies to: the richest snapshot.
fn decode_target() -> &'static Group {
    static TARGET: OnceLock<Group> = OnceLock::new();
    TARGET.get_or_init(|| {
        let snapshots = rich_snapshots();
        Group::decode_snapshot(&snapshots[snapshots.len() - 2]).expect("a rich snapshot decodes")
    })
}

/// A hold request as any encoder could write it: its seats a plain list, not a `SeatSet`. It
/// has the shape of `ClientRequest::Hold` (the first variant), so its bytes decode as one.
#[derive(serde::Serialize)]
enum RawRequest {
    Hold { seats: Vec<SeatNo>, price_version: u32, grant: Option<TicketId> },
}

proptest! {
    #![proptest_config(proptest_config(4_000))]

    /// A command from the log or the wire decodes only if its seats are a seat set, and then
    /// to the canonical (sorted) set: an empty list, more than ten seats or a seat named twice
    /// is a decode error, never a `SeatSet` that breaks its own rules.
    #[test]
    fn seat_sets_are_checked_on_decode(seats in seat_list(), grant in prop::option::of(near_id())) {
        let raw = RawRequest::Hold { seats: seats.clone(), price_version: 1, grant: grant.map(TicketId) };
        let bytes = postcard::to_stdvec(&raw).expect("encodes");
        let decoded = postcard::from_bytes::<ClientRequest>(&bytes);
        match SeatSet::new(seats.iter().copied()) {
            Ok(set) => {
                let mut sorted = seats.clone();
                sorted.sort_unstable();
                prop_assert_eq!(set.as_slice(), sorted.as_slice());
                let expected = ClientRequest::Hold { seats: set, price_version: 1, grant: grant.map(TicketId) };
                prop_assert_eq!(decoded.expect("a seat set decodes"), expected);
            }
            Err(error) => {
                let mut distinct = seats.clone();
                distinct.sort_unstable();
                distinct.dedup();
                let why = match seats.len() {
                    0 => SeatSetError::Empty,
                    count if count > SEATS_PER_HOLD_MAX => SeatSetError::TooMany { count },
                    _ => {
                        let twice = distinct.iter().copied().find(|seat| {
                            seats.iter().filter(|named| *named == seat).count() > 1
                        });
                        SeatSetError::Duplicate { seat: twice.expect("a seat named twice") }
                    }
                };
                prop_assert_eq!(error, why);
                prop_assert!(decoded.is_err(), "{:?} decoded to {:?}", seats, decoded);
            }
        }
    }
}

/// Two lists of the same seats in another order are the same seat set, and so the same hold
/// payload: one idempotency fingerprint.
#[test]
fn a_seat_set_is_canonical() {
    assert_eq!(seats_of(&[7, 2, 5]), seats_of(&[2, 5, 7]));
    assert_eq!(seats_of(&[7, 2, 5]).as_slice(), [2, 5, 7]);
    assert_eq!(SeatSet::new([]), Err(SeatSetError::Empty));
    assert_eq!(SeatSet::new(0..11), Err(SeatSetError::TooMany { count: 11 }));
    assert_eq!(SeatSet::new([4, 2, 4, 2]), Err(SeatSetError::Duplicate { seat: 2 }));
    assert_eq!(SeatSetError::Duplicate { seat: 4 }.to_string(), "seat 4 is named twice");
    assert_eq!(SeatSetError::TooMany { count: 12 }.to_string(), "1..=10 seats per hold, got 12");
}

/// A hold of 11 seats cannot be expressed (`SeatSet` holds at most 10) and does not decode
/// from the wire or the log: it is an error, not a panic.
#[test]
fn an_eleven_seat_hold_does_not_decode() {
    let ten = SeatSet::new(0..10).expect("ten seats");
    let request = ClientRequest::Hold { seats: ten, price_version: 1, grant: None };
    let bytes = postcard::to_stdvec(&request).expect("encodes");
    let ten_seats: Vec<u8> = std::iter::once(10).chain(0..10).collect();
    let at = bytes.windows(ten_seats.len()).position(|window| window == ten_seats).expect("found");
    let mut eleven = bytes[..at].to_vec();
    eleven.push(11);
    eleven.extend(0..11);
    eleven.extend_from_slice(&bytes[at + ten_seats.len()..]);
    assert!(postcard::from_bytes::<ClientRequest>(&bytes).is_ok());
    assert!(postcard::from_bytes::<ClientRequest>(&eleven).is_err());
}

/// A show may have exactly `SEATS_PER_SHOW_MAX` seats, not one more; the largest show works
/// end to end (a hold of its last seat, a tick, a snapshot).
#[test]
fn the_largest_show_works_and_one_seat_more_is_rejected() {
    let mut h = Harness::new();
    let mut too_big = common::spec(1, SEATS_PER_SHOW_MAX);
    too_big.layout.push(SeatRange { count: 1, class: 1 });
    assert_eq!(common::code(&h.operator(OperatorCommand::CreateShow(too_big))), "invalid_argument");
    let show = h.on_sale_show(1, SEATS_PER_SHOW_MAX);
    let last = SEATS_PER_SHOW_MAX - 1;
    h.held(show, 1, 1, &[0, last]);
    assert_eq!(common::code(&h.hold(show, 2, 1, &[last + 1])), "seat_out_of_range");
    h.advance(DEADLINE_MS_MAX);
    h.tick().unwrap();
    check_decode(&h.group.encode_snapshot());
}

/// Every strict prefix of a valid snapshot is an error.
#[test]
fn every_truncated_snapshot_is_an_error() {
    for snapshot in rich_snapshots() {
        for len in 0..snapshot.len() {
            assert!(
                Group::decode_snapshot(&snapshot[..len]).is_err(),
                "prefix of {len} bytes decoded"
            );
        }
        check_decode(snapshot);
    }
}

/// Every single-bit flip of every valid snapshot decodes to an error or to a valid group.
#[test]
fn every_single_bit_flip_is_handled() {
    for snapshot in rich_snapshots() {
        let mut bytes = snapshot.clone();
        for at in 0..bytes.len() {
            for bit in 0..8 {
                bytes[at] ^= 1 << bit;
                check_decode(&bytes);
                bytes[at] ^= 1 << bit;
            }
        }
    }
}
