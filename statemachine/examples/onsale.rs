//! A simulated on-sale through the booking core alone (no cluster yet): simulated buyers join a
//! waiting room, hold exact seats chosen from a stale seat map, pay through a simulated provider
//! (success, decline, unknown then late reconciliation), cancel some bookings, and fall back to
//! the waitlist once the show is sold out. Every step is a log entry applied by
//! `statemachine::Group::apply`, with log time advancing 10 ms per entry, so the run is
//! deterministic for a seed.
//!
//! Run: `cargo run --release -p statemachine --example onsale -- [--buyers N] [--seats N] [--seed N]`

use std::collections::BTreeMap;
use std::time::Instant;

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use statemachine::*;

const STEP_MS: u64 = 10;
const START_MS: u64 = 1_700_000_000_000;

struct Options {
    buyers: u64,
    seats: u32,
    window: u32,
    seed: u64,
}

fn parse_options() -> Options {
    let mut options = Options { buyers: 20_000, seats: 5_000, window: 200, seed: 7 };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = |name: &str| -> u64 {
            args.next()
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match flag.as_str() {
            "--buyers" => options.buyers = value("--buyers"),
            "--seats" => options.seats = value("--seats") as u32,
            "--window" => options.window = value("--window") as u32,
            "--seed" => options.seed = value("--seed"),
            "--help" | "-h" => {
                println!("onsale [--buyers N] [--seats N] [--window N] [--seed N]");
                std::process::exit(0);
            }
            other => panic!("unknown flag {other} (try --help)"),
        }
    }
    options
}

/// xorshift64*: a tiny deterministic generator for the simulated buyers (never in the core).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

#[derive(Clone, Debug)]
enum Phase {
    Arriving { at_ms: u64 },
    Queued,
    Granted { ticket: TicketId, tries: u32 },
    Leaving { ticket: TicketId },
    Holding { hold: HoldId, checkout_at_ms: u64 },
    Paying { payment: PaymentId, price: Money, answer_at_ms: u64, reconcile: bool },
    Booked { booking: BookingId, cancel_at_ms: Option<u64> },
    Waitlisted,
    Offered { offer: OfferId, decide_at_ms: u64 },
    Done,
}

struct Buyer {
    phase: Phase,
    arrived_ms: u64,
    key: u64,
    in_flight: bool,
}

#[derive(Default)]
struct Tally {
    hold_attempts: u64,
    conflicts: u64,
    holds: u64,
    bookings: u64,
    declines: u64,
    unknowns: u64,
    refunds: u64,
    cancelled_bookings: u64,
    waitlist_joins: u64,
    offers: u64,
    offers_accepted: u64,
    offers_declined: u64,
    grants: u64,
    gave_up: u64,
    commands: u64,
}

fn main() {
    let options = parse_options();
    let mut rng = Rng(options.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let show = ShowId(1);
    let mut group = Group::new();
    let mut index = 0;
    let mut now = START_MS;
    let mut apply = |group: &mut Group, now: u64, commands: Vec<Command>| -> Vec<Outcome> {
        index += 1;
        group.apply(&Entry { index, time_ms: now, commands })
    };

    // The show: three price classes, waiting room and waitlist on.
    let third = options.seats / 3;
    let spec = ShowSpec {
        show,
        currency: Currency(*b"EUR"),
        prices_minor: vec![12_000, 8_000, 5_000],
        layout: vec![
            SeatRange { count: third, class: 0 },
            SeatRange { count: third, class: 1 },
            SeatRange { count: options.seats - 2 * third, class: 2 },
        ],
        policy: ShowPolicy::default(),
    };
    let setup = vec![
        Command::Operator(OperatorCommand::CreateShow(spec)),
        Command::Operator(OperatorCommand::ConfigureAdmission {
            show,
            enabled: true,
            window: options.window,
        }),
        Command::Operator(OperatorCommand::ConfigureWaitlist {
            show,
            enabled: true,
            policy_version: 1,
        }),
        Command::Operator(OperatorCommand::OpenSales { show }),
    ];
    for outcome in apply(&mut group, now, setup) {
        outcome.expect("the demo show is valid");
    }

    // Buyers arrive over the first 20 simulated seconds, most of them in the first two.
    let mut buyers: Vec<Buyer> = (0..options.buyers)
        .map(|n| {
            let at_ms = if rng.chance(70) { rng.below(2_000) } else { rng.below(20_000) };
            Buyer {
                phase: Phase::Arriving { at_ms: START_MS + at_ms },
                arrived_ms: 0,
                key: n << 20,
                in_flight: false,
            }
        })
        .collect();
    let mut by_ticket: BTreeMap<TicketId, usize> = BTreeMap::new();
    let mut by_entry: BTreeMap<EntryId, usize> = BTreeMap::new();
    let mut tally = Tally::default();
    let mut time_to_seat = Histogram::<u64>::new(3).expect("histogram");
    let mut map = group.seat_map(show).expect("show exists");
    let mut map_refreshed_ms = now;

    let progress = ProgressBar::new(u64::from(options.seats));
    progress.set_style(
        ProgressStyle::with_template("{spinner} on-sale [{bar:40}] {pos}/{len} seats sold {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    let wall = Instant::now();
    let session_of = |buyer: usize| SessionId(0x5e55_0000_0000 + buyer as u128);

    loop {
        now += STEP_MS;
        // The map buyers see is refreshed every 500 ms: stale, as a cached map would be.
        if now - map_refreshed_ms >= 500 {
            map = group.seat_map(show).expect("show exists");
            map_refreshed_ms = now;
        }
        let free: Vec<u32> = map
            .seats
            .iter()
            .enumerate()
            .filter(|(_, status)| **status == SeatStatus::Free)
            .map(|(seat, _)| seat as u32)
            .collect();
        let mut commands = Vec::new();
        let mut owners = Vec::new();
        for (n, buyer) in buyers.iter_mut().enumerate() {
            if buyer.in_flight {
                continue;
            }
            let session = session_of(n);
            let mut request = |buyer: &mut Buyer, request: ClientRequest| {
                buyer.key += 1;
                buyer.in_flight = true;
                commands.push(Command::Client(ClientCommand {
                    show,
                    session,
                    key: IdempotencyKey(u128::from(buyer.key)),
                    request,
                }));
                owners.push(n);
            };
            match buyer.phase.clone() {
                Phase::Arriving { at_ms } if at_ms <= now => {
                    buyer.arrived_ms = now;
                    request(buyer, ClientRequest::JoinQueue);
                }
                Phase::Granted { ticket, .. } => {
                    // Pick 1-4 contiguous seats that look free on the stale map, front first.
                    let want = 1 + rng.below(4) as usize;
                    if free.len() < want {
                        request(
                            buyer,
                            ClientRequest::JoinWaitlist { quantity: want as u8, band: 0 },
                        );
                        continue;
                    }
                    // Skewed 80/20 toward the front of what looks free, as buyers prefer.
                    let span = if rng.chance(80) { free.len().div_ceil(5) } else { free.len() };
                    let start = free[rng.below(span as u64) as usize];
                    let seats = SeatSet::new(
                        (start..start + want as u32).filter(|seat| *seat < options.seats),
                    )
                    .expect("the start seat is in the show");
                    tally.hold_attempts += 1;
                    request(
                        buyer,
                        ClientRequest::Hold {
                            seats,
                            price_version: map.price_version,
                            grant: Some(ticket),
                        },
                    );
                }
                Phase::Leaving { ticket } => request(buyer, ClientRequest::LeaveQueue { ticket }),
                Phase::Holding { hold, checkout_at_ms } if checkout_at_ms <= now => {
                    request(buyer, ClientRequest::Checkout { hold });
                }
                Phase::Booked { booking, cancel_at_ms: Some(at_ms) } if at_ms <= now => {
                    request(buyer, ClientRequest::CancelBooking { booking });
                }
                Phase::Offered { offer, decide_at_ms } if decide_at_ms <= now => {
                    if rng.chance(80) {
                        request(buyer, ClientRequest::AcceptOffer { offer });
                    } else {
                        request(buyer, ClientRequest::DeclineOffer { offer });
                    }
                }
                _ => {}
            }
        }
        // The simulated payment provider answers attempts whose time has come.
        for (n, buyer) in buyers.iter_mut().enumerate() {
            if let Phase::Paying { payment, price, answer_at_ms, reconcile } = buyer.phase.clone()
                && answer_at_ms <= now
                && !buyer.in_flight
            {
                let roll = rng.below(100);
                let result = if reconcile || roll < 88 {
                    PaymentResult::Succeeded {
                        amount_minor: price.amount_minor,
                        currency: price.currency,
                    }
                } else if roll < 96 {
                    PaymentResult::Declined
                } else {
                    PaymentResult::Unknown
                };
                buyer.in_flight = true;
                commands.push(Command::Payment(PaymentOutcome {
                    show,
                    payment,
                    event: ProviderEventId(u128::from(payment.0) << 8 | u128::from(reconcile)),
                    result,
                }));
                owners.push(n);
            }
        }
        let tick = now.is_multiple_of(100);
        if tick {
            commands.push(Command::Tick);
        }
        tally.commands += commands.len() as u64;
        let outcomes = apply(&mut group, now, commands);

        for (position, outcome) in outcomes.into_iter().enumerate() {
            let Some(&n) = owners.get(position) else { continue };
            let buyer = &mut buyers[n];
            buyer.in_flight = false;
            match (buyer.phase.clone(), outcome) {
                (_, Ok(Reply::Queued { ticket, state, .. })) => {
                    by_ticket.insert(ticket, n);
                    buyer.phase = if state == TicketStatus::Granted {
                        Phase::Granted { ticket, tries: 0 }
                    } else {
                        Phase::Queued
                    };
                }
                (_, Ok(Reply::Held(receipt))) => {
                    tally.holds += 1;
                    time_to_seat.record(now - buyer.arrived_ms).expect("in range");
                    buyer.phase = Phase::Holding {
                        hold: receipt.hold,
                        checkout_at_ms: now + 2_000 + rng.below(20_000),
                    };
                }
                (Phase::Granted { ticket, tries }, Err(Rejection::SeatUnavailable { .. })) => {
                    tally.conflicts += 1;
                    buyer.phase = if tries + 1 >= 5 {
                        Phase::Leaving { ticket }
                    } else {
                        Phase::Granted { ticket, tries: tries + 1 }
                    };
                }
                (Phase::Leaving { .. }, _) => {
                    tally.gave_up += 1;
                    buyer.phase = Phase::Done;
                }
                (Phase::Granted { .. }, Err(_)) => {
                    // Grant expired or similar: queue again.
                    buyer.phase = Phase::Arriving { at_ms: now + 1_000 };
                }
                (_, Ok(Reply::CheckoutStarted { payment, price, .. })) => {
                    buyer.phase = Phase::Paying {
                        payment,
                        price,
                        answer_at_ms: now + 500 + rng.below(5_000),
                        reconcile: false,
                    };
                }
                (Phase::Holding { .. }, Err(_)) => buyer.phase = Phase::Done,
                (
                    Phase::Paying { payment, price, .. },
                    Ok(Reply::PaymentRecorded { effect, .. }),
                ) => match effect {
                    PaymentEffect::Confirmed { booking } => {
                        tally.bookings += 1;
                        let cancel_at_ms = rng.chance(3).then(|| now + 5_000 + rng.below(30_000));
                        buyer.phase = Phase::Booked { booking, cancel_at_ms };
                    }
                    PaymentEffect::Declined { hold_state: HoldStatus::Held } => {
                        tally.declines += 1;
                        let hold = group.payment(show, payment, None).expect("known").payment.hold;
                        buyer.phase = Phase::Holding { hold, checkout_at_ms: now + 1_000 };
                    }
                    PaymentEffect::Declined { .. } => {
                        tally.declines += 1;
                        buyer.phase = Phase::Done;
                    }
                    PaymentEffect::Unknown => {
                        tally.unknowns += 1;
                        buyer.phase = Phase::Paying {
                            payment,
                            price,
                            answer_at_ms: now + 30_000,
                            reconcile: true,
                        };
                    }
                    PaymentEffect::RefundRequired => {
                        tally.refunds += 1;
                        buyer.phase = Phase::Done;
                    }
                    PaymentEffect::Duplicate { .. } => buyer.phase = Phase::Done,
                },
                (Phase::Booked { .. }, Ok(Reply::BookingCancelled { .. })) => {
                    tally.cancelled_bookings += 1;
                    buyer.phase = Phase::Done;
                }
                (_, Ok(Reply::WaitlistJoined { entry, .. })) => {
                    tally.waitlist_joins += 1;
                    by_entry.insert(entry, n);
                    buyer.phase = Phase::Waitlisted;
                }
                (_, Ok(Reply::OfferAccepted { hold, .. })) => {
                    tally.offers_accepted += 1;
                    buyer.phase = Phase::Holding { hold: hold.hold, checkout_at_ms: now + 1_000 };
                }
                (_, Ok(Reply::OfferDeclined { .. })) => {
                    tally.offers_declined += 1;
                    buyer.phase = Phase::Done;
                }
                (_, Err(Rejection::NotSoldOut { .. })) => {
                    buyer.phase = Phase::Arriving { at_ms: now + 500 };
                }
                (_, _) => buyer.phase = Phase::Done,
            }
        }
        // Outbox: grants and offers reach their buyers; then the events are acknowledged.
        let mut last = None;
        for event in group.outbox().pending() {
            last = Some(event.id.0);
            match event.event {
                Event::GrantIssued { ticket, .. } => {
                    tally.grants += 1;
                    if let Some(&n) = by_ticket.get(&ticket)
                        && matches!(buyers[n].phase, Phase::Queued | Phase::Granted { .. })
                    {
                        buyers[n].phase = Phase::Granted { ticket, tries: 0 };
                    }
                }
                Event::OfferMade { offer, entry, .. } => {
                    tally.offers += 1;
                    if let Some(&n) = by_entry.get(&entry) {
                        buyers[n].phase =
                            Phase::Offered { offer, decide_at_ms: now + 1_000 + rng.below(60_000) };
                    }
                }
                _ => {}
            }
        }
        if let Some(up_to) = last {
            apply(&mut group, now, vec![Command::AckOutbox { up_to }]);
        }

        let counts = group.show(show).expect("show exists").counts;
        progress.set_position(u64::from(counts.booked));
        progress.set_message(format!("t={:.1}s", (now - START_MS) as f64 / 1_000.0));
        let settled = buyers.iter().all(|buyer| {
            matches!(
                buyer.phase,
                Phase::Done
                    | Phase::Booked { cancel_at_ms: None, .. }
                    | Phase::Waitlisted
                    | Phase::Queued
            )
        });
        if settled || now - START_MS > 15 * 60 * 1_000 {
            break;
        }
    }
    progress.finish();
    let wall = wall.elapsed();

    let final_show = group.show(show).expect("show exists");
    let invariants = group.check_invariants();
    let digest: String = group.digest().iter().take(8).map(|byte| format!("{byte:02x}")).collect();
    println!();
    println!(
        "on-sale of {} seats to {} buyers (seed {}), admission window {}",
        options.seats, options.buyers, options.seed, options.window
    );
    println!("  simulated time        {:.1} s", (now - START_MS) as f64 / 1_000.0);
    println!(
        "  seats sold            {} of {} ({} bookings, {} cancelled by buyers)",
        final_show.counts.booked, options.seats, tally.bookings, tally.cancelled_bookings
    );
    println!(
        "  hold attempts         {} ({} held, {} conflicts = {:.0}%)",
        tally.hold_attempts,
        tally.holds,
        tally.conflicts,
        100.0 * tally.conflicts as f64 / tally.hold_attempts.max(1) as f64
    );
    let in_line = buyers.iter().filter(|buyer| matches!(buyer.phase, Phase::Queued)).count();
    println!(
        "  admission grants      {} ({} buyers gave up after 5 conflicts, {} still in line)",
        tally.grants, tally.gave_up, in_line
    );
    println!(
        "  payments              {} declined, {} unknown then reconciled, {} late (refund work)",
        tally.declines, tally.unknowns, tally.refunds
    );
    println!(
        "  waitlist              {} joined, {} offers, {} accepted, {} declined",
        tally.waitlist_joins, tally.offers, tally.offers_accepted, tally.offers_declined
    );
    println!(
        "  time to seats         p50 {:.2} s, p99 {:.2} s (simulated, join to hold)",
        time_to_seat.value_at_quantile(0.5) as f64 / 1_000.0,
        time_to_seat.value_at_quantile(0.99) as f64 / 1_000.0
    );
    println!(
        "  apply throughput      {} commands in {:.2} s wall = {:.0} commands/s",
        tally.commands,
        wall.as_secs_f64(),
        tally.commands as f64 / wall.as_secs_f64()
    );
    println!("  log                   {} entries, state digest {digest}…", group.applied_index());
    match invariants {
        Ok(()) => println!(
            "  invariants            ok (no seat in two holds or bookings, FIFO grants and offers, indexes consistent)"
        ),
        Err(violation) => {
            println!("  invariants            BROKEN: {violation}");
            std::process::exit(1);
        }
    }
}
