//! Property tests of the booking state machine (shared/DESIGN.md "Testing layers", 1).
//!
//! Random command sequences keep every invariant after every entry, every command gets exactly
//! one outcome, idempotent replays return the stored outcome, a rejected command changes nothing,
//! the same log gives the same state on every replica, and snapshots round-trip.
//!
//! Commands are generated as small abstract operations (`Op`) and turned into real commands
//! against the state at the moment they are proposed, so that most of them name real holds,
//! payments, bookings, tickets, entries and offers ("the i-th live hold") and their owners,
//! while some name made-up ids or another session. Shows are small, sessions and idempotency
//! keys few, and time jumps between entries large enough that every kind of deadline passes.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Harness, proptest_config, session};
use proptest::prelude::*;
use statemachine::limits::{HOLD_TTL_MS_DEFAULT, PAYMENT_GRACE_MS_DEFAULT};
use statemachine::*;

/// The ids of the shows a scenario creates, in order.
const SHOW_IDS: [u64; 2] = [7, 8];
/// A show id that no scenario creates.
const MISSING_SHOW: ShowId = ShowId(99);
/// Made-up ids are drawn from 1..=RAW_ID_MAX: per-show ids start at 1, so these often exist.
const RAW_ID_MAX: u8 = 40;

// ---------------------------------------------------------------------------------------------
// Generated operations.

/// How a command names an object of some kind.
#[derive(Clone, Copy, Debug)]
enum Pick {
    /// The i-th live object of the kind (modulo their number), else the i-th of all.
    Live(u8),
    /// The i-th object of the kind, whatever its state.
    Any(u8),
    /// A made-up id, which may or may not exist.
    Raw(u8),
}

/// An idempotency key or provider event id: one of a few (so they are reused), or a fresh one.
#[derive(Clone, Copy, Debug)]
enum Key {
    Small(u8),
    Fresh,
}

/// The admission grant a hold presents.
#[derive(Clone, Copy, Debug)]
enum GrantPick {
    None,
    /// The session's own live ticket, if it has one.
    Own,
    /// Some ticket (a live pick prefers granted tickets); the session becomes its owner.
    Ticket(Pick),
}

#[derive(Clone, Copy, Debug)]
enum Req {
    /// Seats `first`, `first + gap`, ... (wrapping), or with `free` the i-th free seats and the
    /// free seats after it, as a buyer choosing from the seat map would.
    Hold {
        first: u8,
        len: u8,
        gap: u8,
        free: bool,
        stale_price: bool,
        grant: GrantPick,
    },
    CancelHold(Pick),
    Checkout(Pick),
    CancelBooking(Pick),
    JoinQueue,
    LeaveQueue(Pick),
    JoinWaitlist {
        quantity: u8,
        band: u8,
    },
    LeaveWaitlist(Pick),
    AcceptOffer(Pick),
    DeclineOffer(Pick),
}

#[derive(Clone, Copy, Debug)]
enum PayKind {
    Right,
    WrongAmount,
    WrongCurrency,
    Declined,
    Unknown,
}

#[derive(Clone, Copy, Debug)]
enum Version {
    Same,
    Next,
    Back,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// A buyer's request; `owner` makes the session the named object's owner.
    Client {
        show: u8,
        owner: bool,
        session: u8,
        key: Key,
        req: Req,
    },
    /// Exactly an earlier client command again (a client retry).
    Retry(u16),
    Pay {
        show: u8,
        payment: Pick,
        event: Key,
        kind: PayKind,
    },
    /// The provider confirms the refund of a payment attempt (owed or not).
    Refund {
        show: u8,
        payment: Pick,
    },
    ConfigureAdmission {
        show: u8,
        enabled: bool,
        window: u32,
    },
    ConfigureWaitlist {
        show: u8,
        enabled: bool,
        version: Version,
    },
    CapacityReleased {
        show: u8,
        event: u8,
        first: u8,
        len: u8,
    },
    SetPrices {
        show: u8,
        right_version: bool,
        raise: u64,
    },
    /// The waitlist's rules: ordering 0 FIFO, 1 bands, 2 a lottery due now, 3 one due later.
    SetWaitlistPolicy {
        show: u8,
        ordering: u8,
        wave: u32,
        version: Version,
    },
    DrawLottery {
        show: u8,
        seed: u8,
    },
    OpenSales(u8),
    CloseSales(u8),
    CancelShow(u8),
    CreateShowAgain(u8),
    Tick,
    /// Acknowledges up to this fraction (of 254) of the last event id; 255 is beyond it.
    AckOutbox(u8),
    /// A leader's state digest of the entry `back` entries ago (0: this one, refused).
    Digest {
        back: u8,
        byte: u8,
    },
    /// Delivery of the outbox to sink `sink` of three names (a third is added rarely, so many
    /// commands about it are refused).
    Deliver {
        sink: u8,
        op: DeliverOp,
    },
}

#[derive(Clone, Copy, Debug)]
enum DeliverOp {
    Add,
    Remove,
    /// Reports `delivered` events as delivered and `dead` more as given up on, consecutive
    /// from `pick` among the events the sink is not done with and its replays; with `raw`, ids
    /// from `pick` up to one beyond the last event (some invalid) instead.
    Report {
        pick: u8,
        delivered: u8,
        dead: u8,
        raw: bool,
    },
    /// Replays every dead letter, or the one `pick` names.
    Replay {
        all: bool,
        pick: u8,
    },
}

#[derive(Clone, Debug)]
struct ShowSetup {
    seats: u32,
    split: u32,
    policy: ShowPolicy,
    /// The admission window, if the lane starts on.
    admission: Option<u32>,
    /// Whether the waitlist starts on.
    waitlist: bool,
    /// Seats sold before the scenario starts (from seat 0, in holds of up to 4 seats of their own
    /// sessions); hold `i` is paid for if bit `i` of `paid` is set, else left to expire.
    presold: u32,
    paid: u32,
}

/// One log entry to be: a time jump, then commands.
type Step = (u64, Vec<Op>);

fn policy(mix: Mix) -> impl Strategy<Value = ShowPolicy> {
    (
        prop_oneof![2 => Just(HOLD_TTL_MS_DEFAULT), 3 => 1_000u64..=600_000],
        prop_oneof![2 => Just(PAYMENT_GRACE_MS_DEFAULT), 3 => 1_000u64..=300_000],
        1_000u64..=300_000,
        1_000u64..=7_200_000,
        1_000u64..=1_200_000,
        0u64..=7_200_000,
        mix.holds_per_session_min..=4,
        prop::bool::weighted(0.8),
    )
        .prop_map(|(hold, grace, grant, wait, offer, extra, holds, cancel)| ShowPolicy {
            hold_ttl_ms: hold,
            payment_grace_ms: grace,
            grant_ttl_ms: grant,
            ticket_wait_ms: wait,
            offer_ttl_ms: offer,
            idempotency_retention_ms: hold + grace + extra,
            holds_per_session_max: holds,
            booking_cancel_allowed: cancel,
        })
}

/// How a scenario weighs its operations: `GENERAL` exercises everything, `SELL_OUT` sells a show
/// out quickly (no admission lane, few status changes) so that the waitlist gets busy.
#[derive(Clone, Copy, Debug)]
struct Mix {
    hold: u32,
    lane: u32,
    waitlist: u32,
    sales: u32,
    /// The chances that a show starts with its admission lane on, and with its waitlist on.
    admission_on: f64,
    waitlist_on: f64,
    /// Whether shows have 12..=14 seats (else 12..=30, mostly 12..=16).
    small_shows: bool,
    /// The weight of jumps of minutes and of hours (against 20 for jumps of at most 5 s).
    minutes: u32,
    hours: u32,
    holds_per_session_min: u32,
    /// The most seats left unsold by the setup.
    unsold_max: u32,
}

const GENERAL: Mix = Mix {
    hold: 60,
    lane: 4,
    waitlist: 6,
    sales: 2,
    admission_on: 0.3,
    waitlist_on: 0.5,
    small_shows: false,
    minutes: 3,
    hours: 1,
    holds_per_session_min: 1,
    unsold_max: 40,
};
const SELL_OUT: Mix = Mix {
    hold: 80,
    lane: 1,
    waitlist: 10,
    sales: 1,
    admission_on: 0.05,
    waitlist_on: 0.9,
    small_shows: true,
    minutes: 2,
    hours: 0,
    holds_per_session_min: 2,
    unsold_max: 2,
};

fn show_setup(mix: Mix) -> impl Strategy<Value = ShowSetup> {
    (
        if mix.small_shows {
            (12u32..=14).boxed()
        } else {
            prop_oneof![3 => 12u32..=16, 1 => 17u32..=30].boxed()
        },
        any::<u32>(),
        policy(mix),
        prop::option::weighted(mix.admission_on, 1u32..=3),
        prop::bool::weighted(mix.waitlist_on),
        0u32..=mix.unsold_max,
        any::<u32>(),
    )
        .prop_map(|(seats, split, policy, admission, waitlist, unsold, paid)| ShowSetup {
            seats,
            split,
            policy,
            admission,
            waitlist,
            presold: seats.saturating_sub(unsold),
            paid,
        })
}

fn show_pick() -> impl Strategy<Value = u8> {
    prop_oneof![30 => 0u8..2, 1 => Just(u8::MAX)]
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        5 => any::<u8>().prop_map(Pick::Live),
        3 => any::<u8>().prop_map(Pick::Any),
        2 => (1..=RAW_ID_MAX).prop_map(Pick::Raw),
    ]
}

fn key_pick() -> impl Strategy<Value = Key> {
    prop_oneof![3 => (0u8..4).prop_map(Key::Small), 2 => Just(Key::Fresh)]
}

fn grant_pick() -> impl Strategy<Value = GrantPick> {
    prop_oneof![
        2 => Just(GrantPick::None),
        3 => Just(GrantPick::Own),
        4 => pick().prop_map(GrantPick::Ticket),
    ]
}

fn req(mix: Mix) -> impl Strategy<Value = Req> {
    let hold = (
        any::<u8>(),
        1u8..=4,
        1u8..=2,
        prop::bool::weighted(0.5),
        prop::bool::weighted(0.04),
        grant_pick(),
    )
        .prop_map(|(first, len, gap, free, stale_price, grant)| Req::Hold {
            first,
            len,
            gap,
            free,
            stale_price,
            grant,
        });
    prop_oneof![
        mix.hold => hold,
        5 => pick().prop_map(Req::CancelHold),
        12 => pick().prop_map(Req::Checkout),
        3 + mix.waitlist / 2 => pick().prop_map(Req::CancelBooking),
        mix.lane + 1 => Just(Req::JoinQueue),
        mix.lane / 2 + 1 => pick().prop_map(Req::LeaveQueue),
        mix.waitlist => (prop_oneof![1u8..=10, 1u8..=3], 0u8..=2).prop_map(|(quantity, band)| Req::JoinWaitlist { quantity, band }),
        mix.waitlist / 3 => pick().prop_map(Req::LeaveWaitlist),
        mix.waitlist => pick().prop_map(Req::AcceptOffer),
        mix.waitlist / 2 => pick().prop_map(Req::DeclineOffer),
    ]
}

fn pay_kind() -> impl Strategy<Value = PayKind> {
    prop_oneof![
        6 => Just(PayKind::Right),
        1 => Just(PayKind::WrongAmount),
        1 => Just(PayKind::WrongCurrency),
        2 => Just(PayKind::Declined),
        2 => Just(PayKind::Unknown),
    ]
}

fn op(mix: Mix) -> impl Strategy<Value = Op> {
    let client = (show_pick(), prop::bool::weighted(0.75), 0u8..6, key_pick(), req(mix))
        .prop_map(|(show, owner, session, key, req)| Op::Client { show, owner, session, key, req });
    let pay = (
        show_pick(),
        pick(),
        prop_oneof![7 => Just(Key::Fresh), 3 => (0u8..4).prop_map(Key::Small)],
        pay_kind(),
    )
        .prop_map(|(show, payment, event, kind)| Op::Pay { show, payment, event, kind });
    let version =
        prop_oneof![6 => Just(Version::Same), 3 => Just(Version::Next), 1 => Just(Version::Back)];
    let rare = prop_oneof![
        show_pick().prop_map(Op::CancelShow),
        show_pick().prop_map(Op::CreateShowAgain),
    ];
    prop_oneof![
        100 => client,
        12 => any::<u16>().prop_map(Op::Retry),
        16 => pay,
        4 => (show_pick(), pick()).prop_map(|(show, payment)| Op::Refund { show, payment }),
        mix.lane => (show_pick(), prop::bool::weighted(0.6), 1u32..=3).prop_map(|(show, enabled, window)| {
            Op::ConfigureAdmission { show, enabled, window }
        }),
        3 => (show_pick(), prop::bool::weighted(0.7), version.clone()).prop_map(|(show, enabled, version)| {
            Op::ConfigureWaitlist { show, enabled, version }
        }),
        2 => (show_pick(), 0u8..4, any::<u8>(), 1u8..=4).prop_map(|(show, event, first, len)| {
            Op::CapacityReleased { show, event, first, len }
        }),
        1 => (show_pick(), prop::bool::weighted(0.8), 0u64..=2_000).prop_map(
            |(show, right_version, raise)| Op::SetPrices { show, right_version, raise }
        ),
        2 => (show_pick(), 0u8..4, prop_oneof![2 => Just(0u32), 1 => 1u32..=2], version).prop_map(
            |(show, ordering, wave, version)| Op::SetWaitlistPolicy { show, ordering, wave, version }
        ),
        2 => (show_pick(), 0u8..3).prop_map(|(show, seed)| Op::DrawLottery { show, seed }),
        mix.sales => show_pick().prop_map(Op::OpenSales),
        mix.sales.div_ceil(2) => show_pick().prop_map(Op::CloseSales),
        mix.sales.div_ceil(2) => rare,
        7 => Just(Op::Tick),
        2 => any::<u8>().prop_map(Op::AckOutbox),
        8 => (prop_oneof![8 => 0u8..2, 1 => Just(2u8)], deliver_op())
            .prop_map(|(sink, op)| Op::Deliver { sink, op }),
        2 => (0u8..40, 0u8..3).prop_map(|(back, byte)| Op::Digest { back, byte }),
    ]
}

fn deliver_op() -> impl Strategy<Value = DeliverOp> {
    prop_oneof![
        2 => Just(DeliverOp::Add),
        1 => Just(DeliverOp::Remove),
        12 => (any::<u8>(), 0u8..6, prop_oneof![3 => Just(0u8), 1 => 1u8..3], prop::bool::weighted(0.1))
            .prop_map(|(pick, delivered, dead, raw)| DeliverOp::Report { pick, delivered, dead, raw }),
        2 => (prop::bool::weighted(0.5), any::<u8>())
            .prop_map(|(all, pick)| DeliverOp::Replay { all, pick }),
    ]
}

/// Milliseconds between two entries: often none or seconds, sometimes minutes (up to 15), hours
/// (1 to 6) in the general mix only (with `hours: 0` that arm jumps by nothing).
fn jump(mix: Mix) -> impl Strategy<Value = u64> {
    let hours: u64 = if mix.hours == 0 { 0 } else { 6 * 3_600_000 };
    prop_oneof![
        10 => Just(0u64),
        10 => 1u64..=5_000,
        mix.minutes => 5_000u64..=900_000,
        mix.hours.max(1) => hours / 6..=hours,
    ]
}

fn step(mix: Mix, commands_max: usize) -> impl Strategy<Value = Step> {
    (jump(mix), prop::collection::vec(op(mix), 1..=commands_max))
}

/// Shows to create, then entries: two cases in three use the general mix.
fn scenario(
    entries_max: usize,
    commands_max: usize,
) -> impl Strategy<Value = (Vec<ShowSetup>, Vec<Step>)> {
    let with = move |mix: Mix| {
        (
            prop::collection::vec(show_setup(mix), 1..=2),
            prop::collection::vec(step(mix, commands_max), 1..=entries_max),
        )
    };
    prop_oneof![2 => with(GENERAL), 1 => with(SELL_OUT)]
}

// ---------------------------------------------------------------------------------------------
// Turning operations into commands against the current state.

/// The harness, plus what the driver remembers to make commands and to check replays.
struct Driver {
    h: Harness,
    shows: Vec<ShowId>,
    /// The next fresh idempotency key or provider event id.
    fresh: u128,
    /// Client commands made so far, for retries.
    history: Vec<ClientCommand>,
    /// The idempotency model: (show, session, key) → canonical request, reply, expiry.
    replies: BTreeMap<(ShowId, SessionId, IdempotencyKey), (ClientRequest, Reply, u64)>,
    /// Outcomes of every entry of `h.log`, in order.
    outcomes: Vec<Vec<Outcome>>,
}

fn spec_of(show: ShowId, setup: &ShowSetup) -> ShowSpec {
    let class_zero = 1 + setup.split % setup.seats;
    let mut layout = vec![SeatRange { count: class_zero, class: 0 }];
    if class_zero < setup.seats {
        layout.push(SeatRange { count: setup.seats - class_zero, class: 1 });
    }
    ShowSpec {
        show,
        currency: Currency(*b"EUR"),
        prices_minor: vec![5_000, 8_000],
        layout,
        policy: setup.policy,
    }
}

/// The id a pick names among `all` objects, `live` ones preferred by `Pick::Live`.
fn resolve(pick: Pick, all: &[u64], live: &[u64]) -> u64 {
    match pick {
        Pick::Live(i) if !live.is_empty() => live[usize::from(i) % live.len()],
        Pick::Live(i) | Pick::Any(i) if !all.is_empty() => all[usize::from(i) % all.len()],
        Pick::Live(i) | Pick::Any(i) => u64::from(i % RAW_ID_MAX) + 1,
        Pick::Raw(id) => u64::from(id),
    }
}

impl Driver {
    fn new(setups: &[ShowSetup]) -> Driver {
        let mut driver = Driver {
            h: Harness::new(),
            shows: Vec::new(),
            fresh: 1_000,
            history: Vec::new(),
            replies: BTreeMap::new(),
            outcomes: Vec::new(),
        };
        for (setup, id) in setups.iter().zip(SHOW_IDS) {
            let show = ShowId(id);
            let create = Command::Operator(OperatorCommand::CreateShow(spec_of(show, setup)));
            let open = Command::Operator(OperatorCommand::OpenSales { show });
            let outcomes = driver.apply(vec![create, open]);
            assert!(outcomes.iter().all(Result::is_ok), "setup failed: {outcomes:?}");
            driver.shows.push(show);
            driver.presell(show, setup);
            let mut commands = Vec::new();
            if let Some(window) = setup.admission {
                commands.push(Command::Operator(OperatorCommand::ConfigureAdmission {
                    show,
                    enabled: true,
                    window,
                }));
            }
            if setup.waitlist {
                commands.push(Command::Operator(OperatorCommand::ConfigureWaitlist {
                    show,
                    enabled: true,
                    policy_version: 1,
                }));
            }
            if !commands.is_empty() {
                let outcomes = driver.apply(commands);
                assert!(outcomes.iter().all(Result::is_ok), "setup failed: {outcomes:?}");
            }
        }
        driver
    }

    /// Sells the first `setup.presold` seats of a show, to sessions of their own.
    fn presell(&mut self, show: ShowId, setup: &ShowSetup) {
        let seats: Vec<SeatNo> = (0..setup.presold).collect();
        let mut holds = Vec::new();
        for (n, chunk) in seats.chunks(4).enumerate() {
            let who = session(100 + 10 * show.0 + n as u64);
            let request = ClientRequest::Hold {
                seats: SeatSet::new(chunk.iter().copied()).expect("four distinct seats"),
                price_version: 1,
                grant: None,
            };
            let key = IdempotencyKey(self.fresh());
            let outcome = self.apply(vec![Command::Client(ClientCommand {
                show,
                session: who,
                key,
                request,
            })]);
            match &outcome[..] {
                [Ok(Reply::Held(receipt))] if setup.paid >> n & 1 == 1 => {
                    holds.push((who, receipt.hold))
                }
                [Ok(_)] => {}
                other => panic!("presale hold failed: {other:?}"),
            }
        }
        for (who, hold) in holds {
            let key = IdempotencyKey(self.fresh());
            let request = ClientRequest::Checkout { hold };
            let outcome = self.apply(vec![Command::Client(ClientCommand {
                show,
                session: who,
                key,
                request,
            })]);
            let [Ok(Reply::CheckoutStarted { payment, price, .. })] = outcome[..] else {
                panic!("presale checkout failed: {outcome:?}");
            };
            let event = ProviderEventId(self.fresh());
            let result = PaymentResult::Succeeded {
                amount_minor: price.amount_minor,
                currency: price.currency,
            };
            let outcome =
                self.apply(vec![Command::Payment(PaymentOutcome { show, payment, event, result })]);
            assert!(matches!(
                outcome[..],
                [Ok(Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { .. }, .. })]
            ));
        }
    }

    fn show_id(&self, show: u8) -> ShowId {
        if show == u8::MAX {
            MISSING_SHOW
        } else {
            self.shows[usize::from(show) % self.shows.len()]
        }
    }

    fn fresh(&mut self) -> u128 {
        self.fresh += 1;
        self.fresh
    }

    fn key(&mut self, key: Key) -> u128 {
        match key {
            Key::Small(n) => u128::from(n),
            Key::Fresh => self.fresh(),
        }
    }

    /// The id named by `pick` among a show's objects of one kind, and its owner if it exists.
    fn object(&self, show: ShowId, kind: EntityKind, pick: Pick) -> (u64, Option<SessionId>) {
        let Some(found) = self.h.group.show(show) else { return (resolve(pick, &[], &[]), None) };
        let (all, live): (Vec<u64>, Vec<u64>) = match kind {
            EntityKind::Hold => (
                found.holds.keys().map(|id| id.0).collect(),
                found
                    .holds
                    .values()
                    .filter(|hold| hold.state.is_live())
                    .map(|hold| hold.id.0)
                    .collect(),
            ),
            EntityKind::Booking => (
                found.bookings.keys().map(|id| id.0).collect(),
                found
                    .bookings
                    .values()
                    .filter(|booking| booking.state == BookingState::Confirmed)
                    .map(|booking| booking.id.0)
                    .collect(),
            ),
            EntityKind::Payment => (
                found.payments.keys().map(|id| id.0).collect(),
                found
                    .payments
                    .values()
                    .filter(|payment| !payment.state.is_final())
                    .map(|payment| payment.id.0)
                    .collect(),
            ),
            EntityKind::Ticket => (
                found.lane.tickets.keys().map(|id| id.0).collect(),
                found.lane.live_by_session.values().map(|id| id.0).collect(),
            ),
            EntityKind::WaitlistEntry => (
                found.waitlist.entries.keys().map(|id| id.0).collect(),
                found.waitlist.active_by_session.values().map(|id| id.0).collect(),
            ),
            EntityKind::Offer => (
                found.waitlist.offers.keys().map(|id| id.0).collect(),
                found.waitlist.offer_deadlines.iter().map(|(_, id)| id.0).collect(),
            ),
            EntityKind::Show => (vec![show.0], vec![show.0]),
        };
        let id = resolve(pick, &all, &live);
        let owner = match kind {
            EntityKind::Hold => found.holds.get(&HoldId(id)).map(|hold| hold.session),
            EntityKind::Booking => {
                found.bookings.get(&BookingId(id)).map(|booking| booking.session)
            }
            EntityKind::Payment => {
                found.payments.get(&PaymentId(id)).map(|payment| payment.session)
            }
            EntityKind::Ticket => {
                found.lane.tickets.get(&TicketId(id)).map(|ticket| ticket.session)
            }
            EntityKind::WaitlistEntry => {
                found.waitlist.entries.get(&EntryId(id)).map(|entry| entry.session)
            }
            EntityKind::Offer => found.waitlist.offers.get(&OfferId(id)).map(|offer| offer.session),
            EntityKind::Show => None,
        };
        (id, owner)
    }

    /// A granted ticket if the pick is live and any is granted, else like `object`.
    fn grant(&self, show: ShowId, pick: Pick) -> (u64, Option<SessionId>) {
        if let (Pick::Live(i), Some(found)) = (pick, self.h.group.show(show)) {
            let granted: Vec<_> = found.lane.granted.iter().map(|(_, ticket)| *ticket).collect();
            if !granted.is_empty() {
                let ticket = granted[usize::from(i) % granted.len()];
                return (ticket.0, Some(found.lane.tickets[&ticket].session));
            }
        }
        self.object(show, EntityKind::Ticket, pick)
    }

    /// A client request, and the owner of the object it names (if it names one that exists).
    fn request(
        &self,
        show: ShowId,
        session: SessionId,
        req: Req,
    ) -> (ClientRequest, Option<SessionId>) {
        match req {
            Req::Hold { first, len, gap, free, stale_price, grant } => {
                let found = self.h.group.show(show);
                let seat_count = found.map_or(30, Show::seat_count);
                let out_of_range = first >= 250;
                let start = if out_of_range {
                    seat_count + u32::from(first - 250)
                } else {
                    u32::from(first) % seat_count
                };
                let free_seats: Vec<SeatNo> = found.map_or(Vec::new(), |found| {
                    (0..seat_count)
                        .filter(|seat| found.seats[*seat as usize] == Seat::Free)
                        .collect()
                });
                let mut seats = Vec::new();
                if free && !out_of_range && !free_seats.is_empty() {
                    let skip = usize::from(first) % free_seats.len();
                    seats.extend(free_seats.iter().copied().skip(skip).take(usize::from(len)));
                } else {
                    for n in 0..u32::from(len) {
                        let seat = start + n * u32::from(gap);
                        seats.push(if out_of_range { seat } else { seat % seat_count });
                    }
                }
                // Wrapping around a small show may name a seat twice, which is no seat set (the
                // node refuses it before proposing, and `seat_sets_are_checked_on_decode` in
                // fuzz.rs covers it): the distinct seats are what reaches apply.
                seats.sort_unstable();
                seats.dedup();
                let seats = SeatSet::new(seats).expect("1..=4 distinct seats");
                let price_version =
                    found.map_or(1, |found| found.price_version) - u32::from(stale_price);
                let (grant, owner) = match grant {
                    GrantPick::None => (None, None),
                    GrantPick::Own => (
                        found.and_then(|found| found.lane.live_by_session.get(&session).copied()),
                        None,
                    ),
                    GrantPick::Ticket(pick) => {
                        let (ticket, owner) = self.grant(show, pick);
                        (Some(TicketId(ticket)), owner)
                    }
                };
                (ClientRequest::Hold { seats, price_version, grant }, owner)
            }
            Req::CancelHold(pick) => {
                let (hold, owner) = self.object(show, EntityKind::Hold, pick);
                (ClientRequest::CancelHold { hold: HoldId(hold) }, owner)
            }
            Req::Checkout(pick) => {
                let (hold, owner) = self.object(show, EntityKind::Hold, pick);
                (ClientRequest::Checkout { hold: HoldId(hold) }, owner)
            }
            Req::CancelBooking(pick) => {
                let (booking, owner) = self.object(show, EntityKind::Booking, pick);
                (ClientRequest::CancelBooking { booking: BookingId(booking) }, owner)
            }
            Req::JoinQueue => (ClientRequest::JoinQueue, None),
            Req::LeaveQueue(pick) => {
                let (ticket, owner) = self.object(show, EntityKind::Ticket, pick);
                (ClientRequest::LeaveQueue { ticket: TicketId(ticket) }, owner)
            }
            Req::JoinWaitlist { quantity, band } => {
                (ClientRequest::JoinWaitlist { quantity, band }, None)
            }
            Req::LeaveWaitlist(pick) => {
                let (entry, owner) = self.object(show, EntityKind::WaitlistEntry, pick);
                (ClientRequest::LeaveWaitlist { entry: EntryId(entry) }, owner)
            }
            Req::AcceptOffer(pick) => {
                let (offer, owner) = self.object(show, EntityKind::Offer, pick);
                (ClientRequest::AcceptOffer { offer: OfferId(offer) }, owner)
            }
            Req::DeclineOffer(pick) => {
                let (offer, owner) = self.object(show, EntityKind::Offer, pick);
                (ClientRequest::DeclineOffer { offer: OfferId(offer) }, owner)
            }
        }
    }

    /// The waitlist policy version `version` names: the show's current one, the next, or the
    /// one before (which the rules refuse).
    fn waitlist_version(&self, show: ShowId, version: Version) -> u32 {
        let current = self.h.group.show(show).map_or(1, |found| found.waitlist.policy_version);
        match version {
            Version::Same => current,
            Version::Next => current + 1,
            Version::Back => current.wrapping_sub(1),
        }
    }

    fn command(&mut self, op: &Op) -> Command {
        match *op {
            Op::Client { show, owner, session: who, key: k, req } => {
                let show = self.show_id(show);
                let session = session(u64::from(who));
                let (request, found_owner) = self.request(show, session, req);
                let session = match (owner, found_owner) {
                    (true, Some(found_owner)) => found_owner,
                    _ => session,
                };
                let command =
                    ClientCommand { show, session, key: IdempotencyKey(self.key(k)), request };
                self.history.push(command.clone());
                Command::Client(command)
            }
            Op::Retry(i) => match self.history.len() {
                0 => Command::Tick,
                len => Command::Client(self.history[usize::from(i) % len].clone()),
            },
            Op::Pay { show, payment, event, kind } => {
                let show = self.show_id(show);
                let (payment, _) = self.object(show, EntityKind::Payment, payment);
                let payment = PaymentId(payment);
                let price = self
                    .h
                    .group
                    .show(show)
                    .and_then(|found| found.payments.get(&payment))
                    .map_or(common::eur(5_000), |attempt| attempt.price);
                let result = match kind {
                    PayKind::Right => PaymentResult::Succeeded {
                        amount_minor: price.amount_minor,
                        currency: price.currency,
                    },
                    PayKind::WrongAmount => PaymentResult::Succeeded {
                        amount_minor: price.amount_minor + 1,
                        currency: price.currency,
                    },
                    PayKind::WrongCurrency => PaymentResult::Succeeded {
                        amount_minor: price.amount_minor,
                        currency: Currency(*b"USD"),
                    },
                    PayKind::Declined => PaymentResult::Declined,
                    PayKind::Unknown => PaymentResult::Unknown,
                };
                let event = ProviderEventId(self.key(event));
                Command::Payment(PaymentOutcome { show, payment, event, result })
            }
            Op::Refund { show, payment } => {
                let show = self.show_id(show);
                let (payment, _) = self.object(show, EntityKind::Payment, payment);
                Command::RefundCompleted { show, payment: PaymentId(payment) }
            }
            Op::ConfigureAdmission { show, enabled, window } => {
                let show = self.show_id(show);
                Command::Operator(OperatorCommand::ConfigureAdmission { show, enabled, window })
            }
            Op::ConfigureWaitlist { show, enabled, version } => {
                let show = self.show_id(show);
                let policy_version = self.waitlist_version(show, version);
                Command::Operator(OperatorCommand::ConfigureWaitlist {
                    show,
                    enabled,
                    policy_version,
                })
            }
            Op::CapacityReleased { show, event, first, len } => {
                let show = self.show_id(show);
                let seat_count = self.h.group.show(show).map_or(30, Show::seat_count);
                let seats =
                    (0..u32::from(len)).map(|n| (u32::from(first) + n) % seat_count).collect();
                let event = CapacityEventId(u128::from(event));
                Command::Operator(OperatorCommand::CapacityReleased { show, event, seats })
            }
            Op::SetWaitlistPolicy { show, ordering, wave, version } => {
                let show = self.show_id(show);
                let policy_version = self.waitlist_version(show, version);
                let ordering = match ordering {
                    0 => WaitlistOrdering::Fifo,
                    1 => WaitlistOrdering::Bands,
                    due => WaitlistOrdering::Lottery {
                        draw_at_ms: self.h.now + if due == 2 { 0 } else { 60_000 },
                    },
                };
                let rules = WaitlistRules { ordering, wave_offers_max: wave };
                Command::Operator(OperatorCommand::ConfigureWaitlistPolicy {
                    show,
                    policy_version,
                    rules,
                })
            }
            Op::DrawLottery { show, seed } => {
                let show = self.show_id(show);
                Command::Operator(OperatorCommand::DrawLottery { show, seed: u64::from(seed) })
            }
            Op::SetPrices { show, right_version, raise } => {
                let show = self.show_id(show);
                let found = self.h.group.show(show);
                let current = found.map_or(1, |found| found.price_version);
                let prices_minor = found.map_or(vec![5_000, 8_000], |found| {
                    found.prices_minor.iter().map(|price| price + raise).collect()
                });
                let version = current + u32::from(right_version);
                Command::Operator(OperatorCommand::SetPrices { show, version, prices_minor })
            }
            Op::OpenSales(show) => {
                Command::Operator(OperatorCommand::OpenSales { show: self.show_id(show) })
            }
            Op::CloseSales(show) => {
                Command::Operator(OperatorCommand::CloseSales { show: self.show_id(show) })
            }
            Op::CancelShow(show) => {
                Command::Operator(OperatorCommand::CancelShow { show: self.show_id(show) })
            }
            Op::CreateShowAgain(show) => {
                let show = self.show_id(show);
                let setup = ShowSetup {
                    seats: 12,
                    split: 0,
                    policy: ShowPolicy::default(),
                    admission: None,
                    waitlist: false,
                    presold: 0,
                    paid: 0,
                };
                Command::Operator(OperatorCommand::CreateShow(spec_of(show, &setup)))
            }
            Op::Tick => Command::Tick,
            Op::AckOutbox(fraction) => {
                let last = self.h.group.outbox().last_id();
                let up_to =
                    if fraction == u8::MAX { last + 1 } else { last * u64::from(fraction) / 254 };
                Command::AckOutbox { up_to }
            }
            Op::Deliver { sink, op } => Command::Delivery(self.delivery(sink, op)),
            Op::Digest { back, byte } => {
                // The entry carrying it is the next one.
                let index = (self.h.group.applied_index() + 1).saturating_sub(u64::from(back));
                Command::AuditDigest { index, digest: [byte; 32] }
            }
        }
    }

    /// A delivery command about sink `sink` (`sink-0`, `sink-1`, `sink-2`).
    fn delivery(&self, sink: u8, op: DeliverOp) -> DeliveryCommand {
        let sink = SinkName::new(&format!("sink-{sink}")).expect("a valid name");
        let group = &self.h.group;
        let last = group.outbox().last_id();
        let tracked = group.delivery().sink(&sink);
        match op {
            DeliverOp::Add => DeliveryCommand::AddSink { sink },
            DeliverOp::Remove => DeliveryCommand::RemoveSink { sink },
            DeliverOp::Report { pick, delivered, dead, raw } => {
                let candidates: Vec<u64> = if raw {
                    (u64::from(pick) % (last + 2)..=last + 1).collect()
                } else {
                    let owed = group
                        .outbox()
                        .pending()
                        .map(|event| event.id.0)
                        .filter(|id| tracked.is_some_and(|tracked| !tracked.is_done(*id)));
                    let replays = tracked
                        .into_iter()
                        .flat_map(|tracked| tracked.replays().map(|letter| letter.event.id.0));
                    let all: Vec<u64> = replays.chain(owed).collect();
                    let from = if all.is_empty() { 0 } else { usize::from(pick) % all.len() };
                    all[from..].to_vec()
                };
                let mut ids = candidates.into_iter().map(OutboxId);
                let delivered = ids.by_ref().take(usize::from(delivered)).collect();
                let dead = ids
                    .take(usize::from(dead))
                    .map(|event| Failure { event, attempts: 3, error: "HTTP 503".into() })
                    .collect();
                DeliveryCommand::Report { sink, delivered, dead }
            }
            DeliverOp::Replay { all, pick } => {
                let letters: Vec<OutboxId> = tracked
                    .map(|tracked| tracked.dead_letters.values().map(|letter| letter.event.id))
                    .into_iter()
                    .flatten()
                    .collect();
                let events = match (all, letters.len()) {
                    (true, _) => Vec::new(),
                    (false, 0) => vec![OutboxId(u64::from(pick))],
                    (false, len) => vec![letters[usize::from(pick) % len]],
                };
                DeliveryCommand::Replay { sink, events }
            }
        }
    }

    /// Applies one entry (invariants are checked by the harness) and checks its outcomes.
    fn apply(&mut self, commands: Vec<Command>) -> Vec<Outcome> {
        let outcomes = self.h.apply(commands.clone());
        assert_eq!(outcomes.len(), commands.len(), "one outcome per command");
        self.check_replays(&commands, &outcomes);
        self.outcomes.push(outcomes.clone());
        outcomes
    }

    /// Applies one generated step as one entry.
    fn step(&mut self, (jump, ops): &Step) -> Vec<Outcome> {
        self.h.advance(*jump);
        let commands = ops.iter().map(|op| self.command(op)).collect();
        self.apply(commands)
    }

    /// Checks the idempotency model: within retention, the same keyed request gets the stored
    /// reply and another request under the key gets `idempotency_key_reused`; only successes
    /// are stored.
    fn check_replays(&mut self, commands: &[Command], outcomes: &[Outcome]) {
        let now = self.h.group.log_time_ms();
        for (command, outcome) in commands.iter().zip(outcomes) {
            let Command::Client(client) = command else { continue };
            let canonical = client.request.clone();
            if canonical.validate().is_err() {
                continue;
            }
            let Some(show) = self.h.group.show(client.show) else { continue };
            let slot = (client.show, client.session, client.key);
            match self.replies.get(&slot) {
                Some((request, reply, expires_ms)) if *expires_ms > now => {
                    if *request == canonical {
                        assert_eq!(
                            outcome,
                            &Ok(reply.clone()),
                            "a retry must get the stored reply"
                        );
                    } else {
                        assert_eq!(outcome, &Err(Rejection::IdempotencyKeyReused), "{client:?}");
                    }
                }
                _ => {
                    assert_ne!(
                        outcome,
                        &Err(Rejection::IdempotencyKeyReused),
                        "no live record under this key: {client:?}"
                    );
                    if let Ok(reply) = outcome {
                        let expires_ms = now + show.policy.idempotency_retention_ms;
                        self.replies.insert(slot, (canonical, reply.clone(), expires_ms));
                    }
                }
            }
        }
    }
}

/// Checks that a snapshot restores the same group.
fn check_snapshot_round_trip(group: &Group) {
    let bytes = group.encode_snapshot();
    let restored = Group::decode_snapshot(&bytes).expect("a snapshot decodes");
    assert!(restored == *group, "the restored group differs");
    assert_eq!(restored.digest(), group.digest());
    assert_eq!(restored.encode_snapshot(), bytes, "re-encoding gives the same bytes");
}

/// Names the first part in which two groups differ (for readable failures).
fn difference(a: &Group, b: &Group) -> Option<String> {
    macro_rules! compare {
        ($a:expr, $b:expr, $($field:ident),+) => {
            $(if $a.$field != $b.$field {
                return Some(format!("{}: {:?} != {:?}", stringify!($field), $a.$field, $b.$field));
            })+
        };
    }
    compare!(a, b, applied_index, log_time_ms, outbox, audit);
    let ids: BTreeSet<_> = a.shows.keys().chain(b.shows.keys()).collect();
    for id in ids {
        let (Some(x), Some(y)) = (a.shows.get(id), b.shows.get(id)) else {
            return Some(format!("show {id} exists in one group only"));
        };
        compare!(
            x,
            y,
            status,
            currency,
            prices_minor,
            price_version,
            policy,
            seat_classes,
            seats,
            counts,
            next_id,
            holds,
            hold_deadlines,
            live_holds_by_session,
            bookings,
            payments,
            provider_events,
            idempotency,
            idempotency_deadlines,
            lane,
            waitlist
        );
    }
    (a != b).then(|| "the groups differ".to_owned())
}

/// The sessions a show cancellation must tell: holders, bookers and waiters.
fn sessions_involved(show: &Show) -> BTreeSet<SessionId> {
    let mut sessions = BTreeSet::new();
    sessions
        .extend(show.holds.values().filter(|hold| hold.state.is_live()).map(|hold| hold.session));
    sessions.extend(
        show.bookings
            .values()
            .filter(|booking| booking.state == BookingState::Confirmed)
            .map(|booking| booking.session),
    );
    sessions.extend(show.lane.live_by_session.keys());
    sessions.extend(show.waitlist.active_by_session.keys());
    sessions
}

/// Applies every generated command in an entry of its own and calls `check` with the state
/// before (its applied index and log time already advanced like the entry's), the command, its
/// outcome and the state after; then checks audit trails and the snapshot round trip.
fn one_command_per_entry(
    setups: &[ShowSetup],
    steps: &[Step],
    mut check: impl FnMut(&Group, &Command, &Outcome, &Group),
) {
    let mut driver = Driver::new(setups);
    for (jump, ops) in steps {
        driver.h.advance(*jump);
        for op in ops {
            let command = driver.command(op);
            let mut before = driver.h.group.clone();
            let outcome = driver.apply(vec![command.clone()]).pop().expect("one outcome");
            let after = &driver.h.group;
            before.applied_index = after.applied_index;
            before.log_time_ms = after.log_time_ms;
            check(&before, &command, &outcome, after);
        }
    }
    check_audit_trails(&driver.h.group);
    check_reads(&driver.h.group);
    check_snapshot_round_trip(&driver.h.group);
}

/// Checks what one command's reply promises against the states before and after it:
///
/// - a hold is rejected with `seat_unavailable` for exactly the requested seats that the seat
///   map (a read of the state before, at the command's log time) does not show free, and a new
///   hold takes only seats shown free, at the current quote, until now + the hold TTL (the
///   leader may answer `seat_unavailable` from that read without a log entry);
/// - a new checkout puts the hold in processing with the hold's quote as the price;
/// - a payment confirms a booking only for the processing attempt of its hold before the
///   deadline, and late money becomes refund work;
/// - a show cancellation tells every session that held, booked or waited, exactly once.
fn check_promises(before: &Group, command: &Command, outcome: &Outcome, after: &Group) {
    let now = after.log_time_ms();
    let new_events: Vec<&OutboxEvent> =
        after.outbox().pending().filter(|event| event.id.0 > before.outbox().last_id()).collect();
    match (command, outcome) {
        (Command::Client(client), _) => {
            let Some(was) = before.show(client.show) else { return };
            let replayed = was
                .idempotency
                .get(&(client.session, client.key))
                .is_some_and(|record| record.expires_ms > now);
            if replayed {
                return;
            }
            match (&client.request, outcome) {
                (
                    ClientRequest::Hold { seats, .. },
                    Err(Rejection::SeatUnavailable { seats: taken }),
                ) => {
                    let map = before.seat_map(client.show).expect("the show exists");
                    let shown_taken: Vec<SeatNo> = seats
                        .iter()
                        .copied()
                        .filter(|seat| map.seats[*seat as usize] != SeatStatus::Free)
                        .collect();
                    assert_eq!(
                        taken.as_slice(),
                        shown_taken,
                        "seat_unavailable names the taken seats"
                    );
                }
                (ClientRequest::Hold { seats, .. }, Ok(Reply::Held(receipt))) => {
                    let map = before.seat_map(client.show).expect("the show exists");
                    let requested = seats.as_slice();
                    assert_eq!(&receipt.seats, seats);
                    for seat in requested {
                        assert_eq!(map.seats[*seat as usize], SeatStatus::Free, "seat {seat}");
                        let now_held =
                            after.show(client.show).expect("exists").seats[*seat as usize];
                        assert_eq!(now_held, Seat::Held(receipt.hold));
                    }
                    let amount_minor = requested
                        .iter()
                        .map(|seat| was.prices_minor[usize::from(was.seat_classes[*seat as usize])])
                        .sum();
                    assert_eq!(receipt.price, Money { amount_minor, currency: was.currency });
                    assert_eq!(receipt.deadline_ms, now + was.policy.hold_ttl_ms);
                    let made = &after.show(client.show).expect("exists").holds[&receipt.hold];
                    if was.lane.enabled {
                        // The hold consumed the session's own live grant.
                        let grant = made.grant.expect("a hold under the lane has a grant");
                        let ticket = &was.lane.tickets[&grant];
                        let TicketState::Granted { grant: granted } = ticket.state else {
                            panic!("the grant a hold consumed was {:?}", ticket.state);
                        };
                        assert_eq!(ticket.session, client.session);
                        assert!(granted.deadline_ms > now);
                        let used = &after.show(client.show).expect("exists").lane.tickets[&grant];
                        assert_eq!(used.state, TicketState::Consumed { grant: granted });
                    } else {
                        assert_eq!(made.grant, None);
                    }
                }
                (ClientRequest::Hold { .. }, Err(Rejection::TooManyHolds { max })) => {
                    // An overdue hold is expired for whoever meets it, tick or not.
                    let live = was
                        .holds
                        .values()
                        .filter(|hold| hold.session == client.session && hold.state.is_live())
                        .filter(|hold| !hold.is_overdue(now))
                        .count();
                    assert!(
                        live as u32 >= *max,
                        "too_many_holds with {live} live holds (max {max})"
                    );
                }
                (
                    ClientRequest::Checkout { hold },
                    Ok(Reply::CheckoutStarted { payment, price, deadline_ms, .. }),
                ) => {
                    let found = &after.show(client.show).expect("exists").holds[hold];
                    assert_eq!(
                        found.state,
                        HoldState::Processing { payment: *payment, deadline_ms: *deadline_ms }
                    );
                    assert_eq!(found.payment(), Some(*payment));
                    assert_eq!(found.price, *price);
                    assert_eq!(found.deadline_ms(), *deadline_ms);
                    assert!(*deadline_ms > now);
                    let held = &was.holds[hold];
                    if let HoldState::Processing { payment: in_flight, .. } = held.state {
                        // A retry of checkout under another key: the same attempt, nothing else.
                        assert_eq!(in_flight, *payment);
                        assert_eq!(
                            was.payments.len(),
                            after.show(client.show).expect("exists").payments.len()
                        );
                    }
                }
                _ => {}
            }
        }
        (Command::Payment(payment), Ok(Reply::PaymentRecorded { effect, .. })) => {
            let was = before.show(payment.show).expect("the show exists");
            let attempt = &was.payments[&payment.payment];
            let hold = &was.holds[&attempt.hold];
            match effect {
                PaymentEffect::Confirmed { booking } => {
                    assert!(hold.is_processing(payment.payment), "{:?}", hold.state);
                    assert!(
                        hold.deadline_ms() > now,
                        "money after the deadline confirmed a booking"
                    );
                    let booked = &after.show(payment.show).expect("exists").bookings[booking];
                    assert_eq!((booked.hold, booked.created_ms), (attempt.hold, now));
                }
                PaymentEffect::RefundRequired => {
                    assert!(new_events.iter().any(|event| matches!(
                        event.event,
                        Event::RefundRequired { payment: refunded, reason: RefundReason::LatePayment, .. }
                            if refunded == payment.payment
                    )));
                }
                PaymentEffect::Duplicate { .. } => {
                    assert!(difference(before, after).is_none(), "a duplicate changed the state");
                }
                PaymentEffect::Declined { .. } | PaymentEffect::Unknown => {}
            }
        }
        (
            &Command::RefundCompleted { show, payment },
            Ok(Reply::RefundRecorded { payment: recorded, duplicate }),
        ) => {
            assert_eq!(*recorded, payment);
            let was = &before.show(show).expect("the show exists").payments[&payment];
            let is = &after.show(show).expect("the show exists").payments[&payment];
            assert_eq!(is.state, PaymentState::Refunded);
            if *duplicate {
                assert_eq!(was.state, PaymentState::Refunded);
                assert!(difference(before, after).is_none(), "a duplicate changed the state");
            } else {
                assert!(was.refund_required(), "refunded money nobody owed: {:?}", was.state);
            }
        }
        (Command::Tick, Ok(Reply::Ticked { more: false, .. })) => {
            // Nothing is left due.
            for show in after.shows() {
                let overdue_hold =
                    show.hold_deadlines.first().is_some_and(|(deadline, _)| *deadline <= now);
                let overdue_offer = show
                    .waitlist
                    .offer_deadlines
                    .first()
                    .is_some_and(|(deadline, _)| *deadline <= now);
                let overdue_grant =
                    show.lane.granted.first().is_some_and(|(deadline, _)| *deadline <= now);
                let overdue_wait = show
                    .lane
                    .waiting_deadlines
                    .first()
                    .is_some_and(|(deadline, _)| *deadline <= now);
                let overdue_record = show
                    .idempotency_deadlines
                    .first()
                    .is_some_and(|(deadline, _, _)| *deadline <= now);
                assert!(
                    !(overdue_hold
                        || overdue_offer
                        || overdue_grant
                        || overdue_wait
                        || overdue_record),
                    "show {}: a tick left something due",
                    show.id
                );
            }
        }
        (Command::Operator(OperatorCommand::CancelShow { show }), Ok(reply)) => {
            let was = before.show(*show).expect("cancelled a known show");
            let mut told = Vec::new();
            for event in &new_events {
                if let Event::ShowCancelled { session } = event.event {
                    assert_eq!(event.show, *show);
                    told.push(session);
                }
            }
            let told_set: BTreeSet<_> = told.iter().copied().collect();
            assert_eq!(told.len(), told_set.len(), "told once each");
            if was.status != ShowStatus::Cancelled {
                assert_eq!(told_set, sessions_involved(was), "{reply:?}");
            }
        }
        _ => {}
    }
}

/// Checks that every entity's audit trail is a chain (each record starts where the previous one
/// ended) that ends in the entity's state, and that every trail names an existing entity.
fn check_audit_trails(group: &Group) {
    let mut expected: BTreeMap<EntityRef, StateName> = BTreeMap::new();
    for show in group.shows() {
        let mut add = |kind: EntityKind, id: u64, state: StateName| {
            expected.insert(EntityRef { show: show.id, kind, id }, state);
        };
        show.holds.values().for_each(|x| add(EntityKind::Hold, x.id.0, x.state.into()));
        show.bookings.values().for_each(|x| add(EntityKind::Booking, x.id.0, x.state.into()));
        show.payments.values().for_each(|x| add(EntityKind::Payment, x.id.0, x.state.into()));
        show.lane.tickets.values().for_each(|x| add(EntityKind::Ticket, x.id.0, x.state.into()));
        show.waitlist
            .entries
            .values()
            .for_each(|x| add(EntityKind::WaitlistEntry, x.id.0, x.state.into()));
        show.waitlist.offers.values().for_each(|x| add(EntityKind::Offer, x.id.0, x.state.into()));
        add(EntityKind::Show, show.id.0, show.status.into());
    }
    let trails: BTreeMap<EntityRef, &[AuditRecord]> =
        group.audit().iter().map(|(entity, records)| (*entity, records)).collect();
    assert_eq!(
        trails.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "audited entities and existing entities differ"
    );
    for (entity, records) in trails {
        let mut state = None;
        for record in records {
            assert_eq!(record.from, state, "{entity:?}: broken audit chain {records:?}");
            state = Some(record.to);
        }
        assert_eq!(
            state,
            Some(expected[&entity]),
            "{entity:?}: the trail does not end in its state"
        );
    }
}

/// Reads every entity as its owner, as another session and as an operator, and checks that no
/// waitlist entry reports an offer to a waiter that was not ahead of it ("why did someone after
/// me get a spot?" must have the answer "nobody did").
fn check_reads(group: &Group) {
    let stranger = SessionId(u128::MAX);
    for show in group.shows() {
        let id = show.id;
        for hold in show.holds.values() {
            assert_eq!(
                group.hold(id, hold.id, Some(hold.session)).map(|view| view.hold.id),
                Ok(hold.id)
            );
            assert_eq!(group.hold(id, hold.id, Some(stranger)).err(), Some(Rejection::NotOwner));
        }
        for booking in show.bookings.values() {
            assert!(group.booking(id, booking.id, Some(booking.session)).is_ok());
        }
        for payment in show.payments.values() {
            assert!(group.payment(id, payment.id, Some(payment.session)).is_ok());
        }
        for ticket in show.lane.tickets.values() {
            assert!(group.ticket(id, ticket.id, Some(ticket.session)).is_ok());
        }
        for offer in show.waitlist.offers.values() {
            assert!(group.offer(id, offer.id, Some(offer.session)).is_ok());
        }
        for entry in show.waitlist.entries.values() {
            assert!(group.waitlist_entry(id, entry.id, Some(entry.session)).is_ok());
            let skips = group.waitlist_skips(id, entry.id, None).expect("the entry exists");
            for skip in skips {
                assert!(skip.was_ahead, "entry {} was skipped: {skip:?}", entry.id);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(proptest_config(20_000))]

    /// Random sequences of entries (1..=4 commands each, time jumps between them) against one or
    /// two small shows: invariants hold after every entry, every command gets one outcome,
    /// replays follow the idempotency model, and the final state survives a snapshot.
    #[test]
    fn random_command_sequences_keep_invariants((setups, steps) in scenario(40, 4)) {
        let mut driver = Driver::new(&setups);
        for step in &steps {
            driver.step(step);
        }
        // Let every deadline pass, then expire and prune everything.
        driver.h.advance(8 * 24 * 60 * 60 * 1_000);
        loop {
            let outcome = driver.apply(vec![Command::Tick]).pop().expect("one outcome");
            if outcome == Ok(Reply::Ticked { expired: 0, more: false }) {
                break;
            }
        }
        check_audit_trails(&driver.h.group);
        check_reads(&driver.h.group);
        check_snapshot_round_trip(&driver.h.group);
        for show in driver.h.group.shows() {
            // Waiters never expire, so pooled and newly offered seats may remain.
            prop_assert_eq!(show.counts.held, 0);
            prop_assert!(show.idempotency.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(proptest_config(4_000))]

    /// Every command, applied alone in its own entry, either succeeds or leaves the state as it
    /// was (but for the applied index and log time, which every entry advances).
    #[test]
    fn rejected_commands_change_nothing((setups, steps) in scenario(40, 3)) {
        one_command_per_entry(&setups, &steps, |before, command, outcome, after| {
            if outcome.is_ok() {
                return;
            }
            if let Some(difference) = difference(before, after) {
                panic!("{command:?} got {outcome:?} but changed {difference}");
            }
            assert_eq!(before.digest(), after.digest());
        });
    }

    /// A leader's rejection without a log entry is exactly apply's: for every command,
    /// `reject_without_log` on the state before it, at the entry's time, answers
    /// `seat_unavailable` if and only if applying it does, with the same seats.
    #[test]
    fn rejections_without_a_log_entry_are_applys((setups, steps) in scenario(40, 3)) {
        one_command_per_entry(&setups, &steps, |before, command, outcome, after| {
            let Command::Client(client) = command else { return };
            let cheap = before.reject_without_log(client, after.log_time_ms());
            match outcome {
                Err(rejection @ Rejection::SeatUnavailable { .. }) => {
                    assert_eq!(cheap.as_ref(), Some(rejection), "{command:?}");
                }
                _ => assert_eq!(cheap, None, "{command:?} got {outcome:?}"),
            }
        });
    }

    /// Every command, applied alone in its own entry, does what its reply says: see
    /// `check_promises`. At the end, every entity's audit trail leads to its state.
    #[test]
    fn each_command_keeps_its_promises((setups, steps) in scenario(40, 3)) {
        one_command_per_entry(&setups, &steps, check_promises);
    }

    /// Two replicas applying the same log, the second answering as a leader does
    /// (`apply_answering`), agree on every outcome and on the digest after every entry; re-delivering an entry at or below the applied index changes nothing; a replica
    /// restored from a snapshot taken midway and fed the rest of the log ends the same.
    #[test]
    fn same_log_same_digest(
        (setups, steps) in scenario(30, 4),
        redeliver in prop::collection::vec(any::<u16>(), 1..=40),
        cut in any::<u16>(),
    ) {
        let mut driver = Driver::new(&setups);
        for step in &steps {
            driver.step(step);
        }
        let log = &driver.h.log;
        let cut = usize::from(cut) % log.len();
        let (mut first, mut second) = (Group::new(), Group::new());
        let mut restored = None;
        for (at, entry) in log.iter().enumerate() {
            let outcomes = first.apply(entry);
            prop_assert_eq!(&outcomes, &driver.outcomes[at]);
            // The second replica answers as a leader does (`apply_answering`): the same
            // outcomes, and building the views changes nothing (the digests below agree).
            let answers = second.apply_answering(entry);
            let answered: Vec<Outcome> = answers.iter().map(|a| a.outcome.clone()).collect();
            prop_assert_eq!(&answered, &outcomes);
            for (answer, command) in answers.iter().zip(&entry.commands) {
                let writes = matches!(command, Command::Client(_)) && answer.outcome.is_ok();
                prop_assert!(writes || answer.written.is_none(), "{answer:?}");
            }
            let digest = first.digest();
            prop_assert_eq!(digest, second.digest());
            let earlier = &log[usize::from(redeliver[at % redeliver.len()]) % (at + 1)];
            prop_assert!(second.apply(earlier).is_empty(), "a re-delivered entry has no outcomes");
            prop_assert!(second.apply(entry).is_empty());
            prop_assert_eq!(second.digest(), digest, "a re-delivered entry changed the state");
            if let Some(restored) = &mut restored {
                let restored: &mut Group = restored;
                prop_assert_eq!(&restored.apply(entry), &outcomes);
            }
            if at == cut {
                restored = Some(Group::decode_snapshot(&first.encode_snapshot()).expect("decodes"));
            }
        }
        prop_assert_eq!(first.digest(), driver.h.group.digest());
        prop_assert_eq!(restored.expect("restored at the cut").digest(), first.digest());
    }
}
