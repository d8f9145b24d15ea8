//! Throughput of `Group::apply` on one 50,000-seat show, in commands per second on one core.
//!
//! Three pre-generated, deterministic logs (a tiny xorshift PRNG, no `rand`), each replayed from
//! a fresh clone of its starting group; only `apply` (and dropping its outcomes) is timed:
//!
//! - `apply/on_sale_mix`: a whole on-sale, from opening to sell-out (~9.6 min of log time).
//!   20,000 buyer sessions browse a seat map that is up to ~2 s stale, pick a start seat skewed
//!   80/20 toward the front fifth of the house and ask for the first run of 1..=4 seats that
//!   looked free from there, so most holds collide with someone else's. Successful holds are
//!   checked out 70% (then paid; 4% declined; 5% of provider callbacks delivered twice),
//!   cancelled 12%, or abandoned 18% to expire; 5% of hold attempts are retries of a recent hold
//!   with the same idempotency key; every entry starts with a `Tick`. Log time advances ~0.5 s
//!   per entry, so abandoned holds expire inside the log. The mix is printed before measuring;
//!   with this seed: 294,400 commands = 244,620 holds (86.1% `seat_unavailable`, 13.9% ok,
//!   from 43% ok in the first tenth of the log down to 3% in the last), 21,925 checkouts,
//!   3,772 cancels, 22,933 payment callbacks, 1,150 ticks (4,948 holds expired by ticks); the
//!   show ends with 45,688 seats booked, 4,294 held, 18 free.
//! - `apply/all_conflict`: a sold-out show; every command is a hold of booked seats.
//! - `apply/uncontended`: a fresh show; every command is a hold that succeeds (the house is
//!   partitioned into 1..=4-seat blocks, held in shuffled order).
//!
//! Each is measured twice: `apply` as a follower applies, and `<name>_answering`
//! (`Group::apply_answering`) as the leader does, each write's answer carrying the view of what
//! it wrote.
//!
//! Commands are packed 256 to an entry, as the leader coalesces them. Run with
//! `cargo bench -p statemachine --bench apply -- --warm-up-time 2 --measurement-time 5`.

#![allow(missing_docs)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hint::black_box;

use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use statemachine::*;

const SHOW: ShowId = ShowId(1);
const SEATS: u32 = 50_000;
/// The front fifth of the house, where 80% of buyers start looking.
const FRONT: u32 = SEATS / 5;
const SESSIONS: usize = 20_000;
const ENTRY_COMMANDS: usize = 256;
const START_MS: u64 = 1_700_000_000_000;

/// On-sale mix: log time per entry (jittered by ±100 ms).
const STEP_MS: u64 = 500;
/// On-sale mix: entries in the log.
const ON_SALE_ENTRIES: usize = 1_150;
/// On-sale mix: the seat map a buyer sees is refreshed every this many entries (~2 s).
const MAP_REFRESH_ENTRIES: usize = 4;
/// On-sale mix: percent of hold attempts that are retries of a recent hold (same key, same
/// payload).
const RETRY_PERCENT: u64 = 5;
/// Conflict-only log length, in entries.
const CONFLICT_ENTRIES: usize = 400;

/// xorshift64*: tiny, deterministic, good enough for a workload.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    fn u128(&mut self) -> u128 {
        (u128::from(self.next()) << 64) | u128::from(self.next())
    }
}

/// A log to replay from `start`.
struct Workload {
    start: Group,
    entries: Vec<Entry>,
    commands: u64,
}

impl Workload {
    fn new(start: Group, entries: Vec<Entry>) -> Workload {
        let commands = entries.iter().map(|entry| entry.commands.len() as u64).sum();
        Workload { start, entries, commands }
    }

    /// Replays the log on a clone of `start` (used to check the replay reaches `expected`).
    fn replay(&self) -> Group {
        let mut group = self.start.clone();
        for entry in &self.entries {
            group.apply(entry);
        }
        group
    }
}

/// A fresh group with the show on sale: front fifth premium, then two cheaper classes.
fn on_sale_group() -> Group {
    let spec = ShowSpec {
        show: SHOW,
        currency: Currency(*b"EUR"),
        prices_minor: vec![4_500, 7_500, 12_000],
        layout: vec![
            SeatRange { count: FRONT, class: 2 },
            SeatRange { count: 15_000, class: 1 },
            SeatRange { count: SEATS - FRONT - 15_000, class: 0 },
        ],
        policy: ShowPolicy::default(),
    };
    let mut group = Group::new();
    let outcomes = group.apply(&Entry {
        index: 1,
        time_ms: START_MS,
        commands: vec![
            Command::Operator(OperatorCommand::CreateShow(spec)),
            Command::Operator(OperatorCommand::OpenSales { show: SHOW }),
        ],
    });
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    group
}

/// Random-looking session ids, as the node derives them from bearer tokens.
fn sessions(rng: &mut Rng, count: usize) -> Vec<SessionId> {
    (0..count).map(|_| SessionId(rng.u128())).collect()
}

fn client(session: SessionId, key: IdempotencyKey, request: ClientRequest) -> Command {
    Command::Client(ClientCommand { show: SHOW, session, key, request })
}

/// The `len` seats from `first` on.
fn seat_run(first: u32, len: u32) -> SeatSet {
    SeatSet::new(first..first + len).expect("1..=4 consecutive seats")
}

fn hold_request(seats: SeatSet) -> ClientRequest {
    ClientRequest::Hold { seats, price_version: 1, grant: None }
}

/// Packs commands into entries of `ENTRY_COMMANDS`, with increasing index and time.
fn pack(commands: Vec<Command>, first_index: u64, first_ms: u64, step_ms: u64) -> Vec<Entry> {
    commands
        .chunks(ENTRY_COMMANDS)
        .enumerate()
        .map(|(i, chunk)| Entry {
            index: first_index + i as u64,
            time_ms: first_ms + i as u64 * step_ms,
            commands: chunk.to_vec(),
        })
        .collect()
}

/// 1..=4 contiguous seats starting at a seat skewed 80/20 toward the front fifth.
fn skewed_block(rng: &mut Rng) -> (u32, u32) {
    let len = rng.between(1, 4) as u32;
    let start = if rng.percent(80) {
        rng.below(u64::from(FRONT)) as u32
    } else {
        FRONT + rng.below(u64::from(SEATS - FRONT)) as u32
    };
    (start.min(SEATS - len), len)
}

/// What the on-sale log contains, counted from the outcomes the generator saw.
#[derive(Default)]
struct Mix {
    ticks: u64,
    ticked_expired: u64,
    hold_attempts: u64,
    hold_retries: u64,
    holds_ok: u64,
    holds_replayed: u64,
    holds_conflict: u64,
    hold_other: BTreeMap<&'static str, u64>,
    checkouts: BTreeMap<&'static str, u64>,
    cancels: BTreeMap<&'static str, u64>,
    payments: BTreeMap<&'static str, u64>,
    /// Per tenth of the log: (hold commands, successes).
    phases: [(u64, u64); 10],
}

fn bump(map: &mut BTreeMap<&'static str, u64>, key: &'static str) {
    *map.entry(key).or_insert(0) += 1;
}

fn code(outcome: &Outcome) -> &'static str {
    match outcome {
        Ok(_) => "ok",
        Err(rejection) => rejection.code(),
    }
}

/// Generates the on-sale log by playing buyers against a live copy of the group, so that
/// checkouts, cancels and payments name real holds and payment attempts.
struct OnSale {
    rng: Rng,
    group: Group,
    now: u64,
    sessions: Vec<SessionId>,
    session_index: HashMap<SessionId, usize>,
    busy: Vec<bool>,
    /// Follow-ups that buyers (or the payment provider) send later, by due time.
    due: BTreeMap<(u64, u64), Command>,
    seq: u64,
    recent: Vec<Command>,
    succeeded: HashSet<IdempotencyKey>,
    payment_session: HashMap<PaymentId, usize>,
    /// For each hold length 1..=4 (index len - 1), the first seat at or after `i` that starts
    /// a run of `len` seats free on the buyers' (stale) seat map, or `SEATS`.
    next_fit: [Vec<u32>; 4],
    mix: Mix,
}

impl OnSale {
    fn new(start: &Group) -> OnSale {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let sessions = sessions(&mut rng, SESSIONS);
        let session_index = sessions.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        OnSale {
            rng,
            group: start.clone(),
            now: start.log_time_ms(),
            sessions,
            session_index,
            busy: vec![false; SESSIONS],
            due: BTreeMap::new(),
            seq: 0,
            recent: Vec::new(),
            succeeded: HashSet::new(),
            payment_session: HashMap::new(),
            next_fit: Default::default(),
            mix: Mix::default(),
        }
    }

    /// Takes a new picture of the seat map, as buyers' browsers would show it.
    fn refresh_map(&mut self) {
        let show = self.group.show(SHOW).expect("the show");
        let n = SEATS as usize;
        let mut free_run = vec![0u32; n + 1];
        for i in (0..n).rev() {
            free_run[i] = if show.seats[i] == Seat::Free { free_run[i + 1] + 1 } else { 0 };
        }
        for (slot, next_fit) in self.next_fit.iter_mut().enumerate() {
            let len = slot as u32 + 1;
            next_fit.clear();
            next_fit.resize(n + 1, SEATS);
            for i in (0..n).rev() {
                next_fit[i] = if free_run[i] >= len { i as u32 } else { next_fit[i + 1] };
            }
        }
    }

    fn key(&mut self) -> IdempotencyKey {
        IdempotencyKey(self.rng.u128())
    }

    fn later(&mut self, lo_ms: u64, hi_ms: u64, command: Command) {
        let at = self.now + self.rng.between(lo_ms, hi_ms);
        self.seq += 1;
        self.due.insert((at, self.seq), command);
    }

    /// A new hold attempt by a buyer without a hold in hand.
    fn new_hold(&mut self) -> Command {
        let mut who = self.rng.below(SESSIONS as u64) as usize;
        for _ in 0..8 {
            if !self.busy[who] {
                break;
            }
            who = self.rng.below(SESSIONS as u64) as usize;
        }
        let (start, len) = skewed_block(&mut self.rng);
        let fits = &self.next_fit[len as usize - 1];
        let mut first = fits[start as usize];
        if first == SEATS {
            first = fits[0]; // nothing free behind: look from the front row
        }
        if first == SEATS {
            first = start; // looks sold out: try the seats anyway
        }
        let seats = seat_run(first, len);
        let key = self.key();
        let command = client(self.sessions[who], key, hold_request(seats));
        if self.recent.len() < 1_024 {
            self.recent.push(command.clone());
        } else {
            let slot = self.rng.below(1_024) as usize;
            self.recent[slot] = command.clone();
        }
        command
    }

    fn entry(&mut self, index: u64, phase: usize) -> Entry {
        self.now += STEP_MS - 100 + self.rng.below(201);
        let mut commands = Vec::with_capacity(ENTRY_COMMANDS);
        commands.push(Command::Tick);
        while commands.len() < ENTRY_COMMANDS {
            if let Some(first) = self.due.first_entry()
                && first.key().0 <= self.now
            {
                commands.push(first.remove());
            } else if !self.recent.is_empty() && self.rng.percent(RETRY_PERCENT) {
                let slot = self.rng.below(self.recent.len() as u64) as usize;
                commands.push(self.recent[slot].clone());
                self.mix.hold_retries += 1;
            } else {
                commands.push(self.new_hold());
            }
        }
        let entry = Entry { index, time_ms: self.now, commands };
        let outcomes = self.group.apply(&entry);
        for (command, outcome) in entry.commands.iter().zip(&outcomes) {
            self.observe(command, outcome, phase);
        }
        entry
    }

    fn observe(&mut self, command: &Command, outcome: &Outcome, phase: usize) {
        match command {
            Command::Tick => {
                self.mix.ticks += 1;
                if let Ok(Reply::Ticked { expired, .. }) = outcome {
                    self.mix.ticked_expired += u64::from(*expired);
                }
            }
            Command::Client(ClientCommand { session, key, request, .. }) => {
                let who = self.session_index[session];
                match request {
                    ClientRequest::Hold { .. } => self.observe_hold(who, *key, outcome, phase),
                    ClientRequest::Checkout { .. } => {
                        bump(&mut self.mix.checkouts, code(outcome));
                        if let Ok(Reply::CheckoutStarted { payment, price, .. }) = outcome {
                            let result = if self.rng.percent(4) {
                                PaymentResult::Declined
                            } else {
                                PaymentResult::Succeeded {
                                    amount_minor: price.amount_minor,
                                    currency: price.currency,
                                }
                            };
                            let event = ProviderEventId(self.rng.u128());
                            let paid =
                                PaymentOutcome { show: SHOW, payment: *payment, event, result };
                            self.payment_session.insert(*payment, who);
                            if self.rng.percent(5) {
                                // The provider delivers its callback twice.
                                self.later(5_000, 20_000, Command::Payment(paid.clone()));
                            }
                            self.later(2_000, 15_000, Command::Payment(paid));
                        } else {
                            self.busy[who] = false;
                        }
                    }
                    ClientRequest::CancelHold { .. } => {
                        bump(&mut self.mix.cancels, code(outcome));
                        self.busy[who] = false;
                    }
                    other => panic!("the generator does not send {other:?}"),
                }
            }
            Command::Payment(paid) => {
                let label = match outcome {
                    Ok(Reply::PaymentRecorded { effect, .. }) => match effect {
                        PaymentEffect::Confirmed { .. } => "confirmed",
                        PaymentEffect::RefundRequired => "refund_required",
                        PaymentEffect::Declined { .. } => "declined",
                        PaymentEffect::Unknown => "unknown",
                        PaymentEffect::Duplicate { .. } => "duplicate",
                    },
                    other => code(other),
                };
                bump(&mut self.mix.payments, label);
                // A declined buyer gives up and lets the hold lapse.
                if let Some(who) = self.payment_session.get(&paid.payment) {
                    self.busy[*who] = false;
                }
            }
            other => panic!("the generator does not send {other:?}"),
        }
    }

    fn observe_hold(&mut self, who: usize, key: IdempotencyKey, outcome: &Outcome, phase: usize) {
        self.mix.hold_attempts += 1;
        self.mix.phases[phase].0 += 1;
        match outcome {
            Ok(Reply::Held(receipt)) => {
                self.mix.phases[phase].1 += 1;
                if !self.succeeded.insert(key) {
                    self.mix.holds_replayed += 1;
                    return;
                }
                self.mix.holds_ok += 1;
                self.busy[who] = true;
                let session = self.sessions[who];
                let hold = receipt.hold;
                let roll = self.rng.below(100);
                if roll < 70 {
                    let key = self.key();
                    let checkout = client(session, key, ClientRequest::Checkout { hold });
                    self.later(10_000, 90_000, checkout);
                } else if roll < 82 {
                    let key = self.key();
                    let cancel = client(session, key, ClientRequest::CancelHold { hold });
                    self.later(5_000, 60_000, cancel);
                } else {
                    // Abandoned: the hold expires at its deadline; the buyer moves on.
                    self.busy[who] = false;
                }
            }
            Err(Rejection::SeatUnavailable { .. }) => self.mix.holds_conflict += 1,
            other => bump(&mut self.mix.hold_other, code(other)),
        }
    }

    fn print_mix(&self, commands: u64) {
        let mix = &self.mix;
        let pct = |n: u64, of: u64| 100.0 * n as f64 / of.max(1) as f64;
        let show = self.group.show(SHOW).expect("the show");
        let sum = |map: &BTreeMap<&'static str, u64>| map.values().sum::<u64>();
        eprintln!(
            "on_sale_mix: {commands} commands in {ON_SALE_ENTRIES} entries of {ENTRY_COMMANDS}, {:.1} min of log time",
            (self.now - START_MS) as f64 / 60_000.0
        );
        eprintln!(
            "  holds    {:>7} ({:.1}% of commands; {} are same-key retries)",
            mix.hold_attempts,
            pct(mix.hold_attempts, commands),
            mix.hold_retries
        );
        eprintln!(
            "    ok {:.1}% (new {}, replayed {}), seat_unavailable {:.1}%, other {:?}",
            pct(mix.holds_ok + mix.holds_replayed, mix.hold_attempts),
            mix.holds_ok,
            mix.holds_replayed,
            pct(mix.holds_conflict, mix.hold_attempts),
            mix.hold_other
        );
        let phases: Vec<String> =
            mix.phases.iter().map(|(n, ok)| format!("{:.0}%", pct(*ok, *n))).collect();
        eprintln!("    hold success by tenth of the log: {}", phases.join(" "));
        eprintln!("  checkouts {:>6} {:?}", sum(&mix.checkouts), mix.checkouts);
        eprintln!("  cancels   {:>6} {:?}", sum(&mix.cancels), mix.cancels);
        eprintln!("  payments  {:>6} {:?}", sum(&mix.payments), mix.payments);
        eprintln!(
            "  ticks     {:>6} (expired or pruned {} objects)",
            mix.ticks, mix.ticked_expired
        );
        eprintln!(
            "  at the end: {:?}; {} holds, {} bookings, {} idempotency records, {} outbox events",
            show.counts,
            show.holds.len(),
            show.bookings.len(),
            show.idempotency.len(),
            self.group.outbox().len()
        );
    }
}

/// The whole on-sale, from opening to past sell-out.
fn on_sale_workload() -> Workload {
    let start = on_sale_group();
    let mut generator = OnSale::new(&start);
    let mut entries = Vec::with_capacity(ON_SALE_ENTRIES);
    for i in 0..ON_SALE_ENTRIES {
        if i % MAP_REFRESH_ENTRIES == 0 {
            generator.refresh_map();
        }
        let index = start.applied_index() + 1 + i as u64;
        entries.push(generator.entry(index, i * 10 / ON_SALE_ENTRIES));
    }
    let workload = Workload::new(start, entries);
    generator.print_mix(workload.commands);
    assert!(workload.replay() == generator.group, "replay is deterministic");
    workload
}

/// A sold-out show (every seat booked), then holds of booked seats only.
fn all_conflict_workload() -> Workload {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut group = on_sale_group();
    let mut index = group.applied_index();
    let mut apply = |group: &mut Group, commands: Vec<Command>| -> Vec<Outcome> {
        let mut outcomes = Vec::new();
        for entry in pack(commands, index + 1, START_MS, 0) {
            index = entry.index;
            outcomes.extend(group.apply(&entry));
        }
        outcomes
    };
    // Sell the house in blocks of four, one buyer per block.
    let buyers = sessions(&mut rng, SEATS as usize / 4);
    let holds: Vec<Command> = buyers
        .iter()
        .enumerate()
        .map(|(i, buyer)| {
            let first = i as u32 * 4;
            client(*buyer, IdempotencyKey(rng.u128()), hold_request(seat_run(first, 4)))
        })
        .collect();
    let held = apply(&mut group, holds);
    let checkouts = buyers
        .iter()
        .zip(&held)
        .map(|(buyer, outcome)| match outcome {
            Ok(Reply::Held(receipt)) => client(
                *buyer,
                IdempotencyKey(rng.u128()),
                ClientRequest::Checkout { hold: receipt.hold },
            ),
            other => panic!("setup hold failed: {other:?}"),
        })
        .collect();
    let started = apply(&mut group, checkouts);
    let payments = started
        .iter()
        .map(|outcome| match outcome {
            Ok(Reply::CheckoutStarted { payment, price, .. }) => Command::Payment(PaymentOutcome {
                show: SHOW,
                payment: *payment,
                event: ProviderEventId(rng.u128()),
                result: PaymentResult::Succeeded {
                    amount_minor: price.amount_minor,
                    currency: price.currency,
                },
            }),
            other => panic!("setup checkout failed: {other:?}"),
        })
        .collect();
    let paid = apply(&mut group, payments);
    assert!(paid.iter().all(|outcome| matches!(
        outcome,
        Ok(Reply::PaymentRecorded { effect: PaymentEffect::Confirmed { .. }, .. })
    )));
    assert_eq!(group.show(SHOW).expect("the show").counts.booked, SEATS);

    let buyers = sessions(&mut rng, SESSIONS);
    let commands: Vec<Command> = (0..CONFLICT_ENTRIES * ENTRY_COMMANDS)
        .map(|_| {
            let who = buyers[rng.below(SESSIONS as u64) as usize];
            let (start, len) = skewed_block(&mut rng);
            client(who, IdempotencyKey(rng.u128()), hold_request(seat_run(start, len)))
        })
        .collect();
    let time_ms = group.log_time_ms() + 1_000;
    let entries = pack(commands, index + 1, time_ms, STEP_MS);
    let workload = Workload::new(group, entries);
    let mut check = workload.start.clone();
    for entry in &workload.entries {
        for outcome in check.apply(entry) {
            assert!(matches!(outcome, Err(Rejection::SeatUnavailable { .. })), "{outcome:?}");
        }
    }
    eprintln!(
        "all_conflict: {} holds, every one seat_unavailable against a sold-out show \
         ({} bookings, {} idempotency records)",
        workload.commands,
        check.show(SHOW).expect("the show").bookings.len(),
        check.show(SHOW).expect("the show").idempotency.len(),
    );
    workload
}

/// A fresh show held block by block: every hold succeeds.
fn uncontended_workload() -> Workload {
    let mut rng = Rng(0xd1b5_4a32_d192_ed03);
    let start = on_sale_group();
    let mut blocks = Vec::new();
    let mut seat = 0;
    while seat < SEATS {
        let len = (rng.between(1, 4) as u32).min(SEATS - seat);
        blocks.push((seat, len));
        seat += len;
    }
    for i in (1..blocks.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        blocks.swap(i, j);
    }
    let buyers = sessions(&mut rng, SESSIONS);
    let commands = blocks
        .iter()
        .enumerate()
        .map(|(i, (first, len))| {
            let seats = seat_run(*first, *len);
            client(buyers[i % SESSIONS], IdempotencyKey(rng.u128()), hold_request(seats))
        })
        .collect();
    let entries = pack(commands, start.applied_index() + 1, START_MS + 1_000, STEP_MS);
    let workload = Workload::new(start, entries);
    let mut check = workload.start.clone();
    for entry in &workload.entries {
        for outcome in check.apply(entry) {
            assert!(matches!(outcome, Ok(Reply::Held(_))), "{outcome:?}");
        }
    }
    assert_eq!(check.show(SHOW).expect("the show").counts.held, SEATS);
    eprintln!(
        "uncontended: {} holds, every one succeeds (the whole house ends up held)",
        workload.commands
    );
    workload
}

fn bench(c: &mut Criterion, name: &str, workload: &Workload) {
    let mut group = c.benchmark_group("apply");
    group.throughput(Throughput::Elements(workload.commands));
    // One iteration replays the whole log, so every sample does the same work.
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.bench_function(name, |b| {
        b.iter_batched(
            || workload.start.clone(),
            |mut group| {
                for entry in &workload.entries {
                    black_box(group.apply(black_box(entry)));
                }
                group // dropped outside the timed part
            },
            BatchSize::LargeInput,
        );
    });
    // As a leader applies: each write's answer carries the view of what it wrote.
    group.bench_function(format!("{name}_answering"), |b| {
        b.iter_batched(
            || workload.start.clone(),
            |mut group| {
                for entry in &workload.entries {
                    black_box(group.apply_answering(black_box(entry)));
                }
                group
            },
            BatchSize::LargeInput,
        );
    });
    group.finish();
}

fn apply(c: &mut Criterion) {
    bench(c, "on_sale_mix", &on_sale_workload());
    bench(c, "all_conflict", &all_conflict_workload());
    bench(c, "uncontended", &uncontended_workload());
}

criterion_group!(benches, apply);
criterion_main!(benches);
