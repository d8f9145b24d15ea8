//! What a group's state costs per seat and per hold, in memory and in its snapshot, before and
//! after its shows are archived: the numbers in the README's operations section.
//!
//! Builds one group with `--shows` shows of `--seats` seats each, sells each out in paid holds
//! of `--hold-seats` seats (each hold also has one expired hold before it, as an on-sale leaves
//! many), closes each show and acknowledges its outbox, then archives them one by one. Memory
//! is the heap the group holds (counted by `stats_alloc`'s instrumented system allocator), the
//! snapshot its `encode_snapshot` length.
//!
//! It also times what a snapshot or an auditor checkpoint costs the apply path: the view they
//! take (`Group::clone`, which shares every show and audit and outbox chunk), one show's copy,
//! the first apply to a show while such a view is alive (what `Arc::make_mut` copies in the raft
//! crate's apply, under the group's write lock), and `encode_snapshot` (done off the lock), each
//! the fastest of three runs; then a snapshot build after one show changed, reusing the other
//! shows' bytes and checks (`encode_snapshot_reusing`), against encoding them all.
//!
//! Run: `cargo run --release -p statemachine --example state_size -- [--shows N] [--seats N]
//! [--hold-seats N]`

use std::alloc::System;

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

use statemachine::*;

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes live on the heap now.
fn live() -> usize {
    let stats = ALLOCATOR.stats();
    // A reallocation counts its growth as allocated and its shrinking as deallocated.
    stats.bytes_allocated.saturating_sub(stats.bytes_deallocated)
}

const START_MS: u64 = 1_700_000_000_000;

struct Log {
    group: Group,
    index: u64,
    now: u64,
}

impl Log {
    fn apply(&mut self, command: Command) -> Outcome {
        self.index += 1;
        self.now += 10;
        let entry = Entry { index: self.index, time_ms: self.now, commands: vec![command] };
        self.group.apply(&entry).pop().expect("one outcome")
    }

    fn client(&mut self, show: ShowId, session: u64, key: u64, request: ClientRequest) -> Outcome {
        self.apply(Command::Client(ClientCommand {
            show,
            session: SessionId(u128::from(session) << 64 | 0xabcd),
            key: IdempotencyKey(u128::from(key)),
            request,
        }))
    }
}

fn option(name: &str, default: u32) -> u32 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1))
        .map(|value| value.parse().unwrap_or_else(|_| panic!("{name}: a number")))
        .unwrap_or(default)
}

/// Sells out show `id`: every seat in a paid hold of `hold_seats`, each after one hold of the
/// same seats that expired; then closes it and acknowledges the outbox.
fn sell_out(log: &mut Log, id: u64, seats: u32, hold_seats: u32) -> (ShowId, u32) {
    let show = ShowId(id);
    let spec = ShowSpec {
        show,
        currency: Currency(*b"EUR"),
        prices_minor: vec![5_000],
        layout: vec![SeatRange { count: seats, class: 0 }],
        policy: ShowPolicy::default(),
    };
    log.apply(Command::Operator(OperatorCommand::CreateShow(spec))).expect("created");
    log.apply(Command::Operator(OperatorCommand::OpenSales { show })).expect("opened");
    let hold_ttl_ms = ShowPolicy::default().hold_ttl_ms;
    let mut holds = 0;
    for (buyer, first) in (0..seats).step_by(hold_seats as usize).enumerate() {
        let buyer = buyer as u64 + 1;
        let list = SeatSet::new(first..(first + hold_seats).min(seats)).expect("seats");
        let hold = |seats: SeatSet| ClientRequest::Hold { seats, price_version: 1, grant: None };
        // One that expires: its owner never pays.
        log.client(show, buyer + (1 << 40), 1, hold(list.clone())).expect("held");
        log.now += hold_ttl_ms;
        log.apply(Command::Tick).expect("ticked");
        let Ok(Reply::Held(receipt)) = log.client(show, buyer, 1, hold(list)) else {
            panic!("held again")
        };
        let checkout = ClientRequest::Checkout { hold: receipt.hold };
        let Ok(Reply::CheckoutStarted { payment, price, .. }) =
            log.client(show, buyer, 2, checkout)
        else {
            panic!("checked out")
        };
        log.apply(Command::Payment(PaymentOutcome {
            show,
            payment,
            event: ProviderEventId(u128::from(buyer) << 32 | u128::from(id)),
            result: PaymentResult::Succeeded {
                amount_minor: price.amount_minor,
                currency: price.currency,
            },
        }))
        .expect("paid");
        holds += 2;
    }
    log.apply(Command::Operator(OperatorCommand::CloseSales { show })).expect("closed");
    let up_to = log.group.outbox().last_id();
    log.apply(Command::AckOutbox { up_to }).expect("acknowledged");
    (show, holds)
}

fn main() {
    let shows = option("--shows", 5);
    let seats = option("--seats", 10_000);
    let hold_seats = option("--hold-seats", 4);
    let empty = live();
    let mut log = Log { group: Group::new(), index: 0, now: START_MS };
    let mut sold = Vec::new();
    let mut holds = 0;
    for id in 1..=u64::from(shows) {
        let (show, made) = sell_out(&mut log, id, seats, hold_seats);
        sold.push(show);
        holds += made;
    }
    let memory = live() - empty;
    let snapshot = log.group.encode_snapshot().len();
    let seat_total = u64::from(shows) * u64::from(seats);
    println!(
        "{shows} sold-out shows of {seats} seats, {holds} holds of {hold_seats} seats (half \
         expired, half paid): memory {memory} bytes ({:.0}/seat, {:.0}/hold), snapshot \
         {snapshot} bytes ({:.0}/seat, {:.0}/hold)",
        memory as f64 / seat_total as f64,
        memory as f64 / f64::from(holds),
        snapshot as f64 / seat_total as f64,
        snapshot as f64 / f64::from(holds),
    );
    let fastest = |work: &mut dyn FnMut()| {
        (0..3)
            .map(|_| {
                let started = std::time::Instant::now();
                work();
                started.elapsed()
            })
            .min()
            .expect("three runs")
    };
    let copy = fastest(&mut || drop(std::hint::black_box(log.group.clone())));
    let show = log.group.shows().next().expect("a show").clone();
    let copy_show = fastest(&mut || drop(std::hint::black_box(show.clone())));
    drop(show);
    // The stall itself: the first write after a clone shares the group, as a snapshot builder or
    // a checkpoint holds it (a hold attempt on sold seats: rejected, but it takes its show to
    // change like any client command).
    let mut stalls = Vec::new();
    for _ in 0..3 {
        let shared = log.group.clone();
        let taken = SeatSet::new(0..1).expect("seats");
        let attempt = ClientRequest::Hold { seats: taken, price_version: 1, grant: None };
        let started = std::time::Instant::now();
        let _ = log.client(ShowId(1), u64::MAX - 1, 1, attempt);
        stalls.push(started.elapsed());
        drop(std::hint::black_box(shared));
    }
    let stall = stalls.into_iter().min().expect("three runs");
    let encode = fastest(&mut || drop(std::hint::black_box(log.group.encode_snapshot())));
    println!(
        "a snapshot's or checkpoint's view (Group::clone) took {:.2} ms; copying one show {:.1} ms; \
         the first apply to a show after such a view {:.2} ms; encode_snapshot {:.1} ms",
        copy.as_secs_f64() * 1_000.0,
        copy_show.as_secs_f64() * 1_000.0,
        stall.as_secs_f64() * 1_000.0,
        encode.as_secs_f64() * 1_000.0,
    );
    // A build as the raft crate makes it (at feature level 1: format 10), after one command to
    // one show: the other shows' bytes and checks are reused.
    log.apply(Command::SetFeatureLevel { level: FEATURE_LEVEL_MOVES }).expect("raised");
    let whole = fastest(&mut || drop(std::hint::black_box(log.group.encode_snapshot())));
    let mut encodings = ShowEncodings::default();
    drop(log.group.encode_snapshot_reusing(&mut encodings));
    let mut rebuilds = Vec::new();
    for key in 2..5 {
        let taken = SeatSet::new(0..1).expect("seats");
        let attempt = ClientRequest::Hold { seats: taken, price_version: 1, grant: None };
        let _ = log.client(ShowId(1), u64::MAX - 1, key, attempt);
        let started = std::time::Instant::now();
        drop(std::hint::black_box(log.group.encode_snapshot_reusing(&mut encodings)));
        rebuilds.push(started.elapsed());
    }
    let rebuild = rebuilds.into_iter().min().expect("three runs");
    println!(
        "a snapshot build after one show of {shows} changed, at feature level 1: {:.1} ms reusing \
         the other shows' bytes and checks ({} reused), {:.1} ms encoding and checking all",
        rebuild.as_secs_f64() * 1_000.0,
        encodings.reused,
        whole.as_secs_f64() * 1_000.0,
    );
    let mut archive_bytes = 0;
    let started = std::time::Instant::now();
    for show in sold {
        let bytes = log.group.archive_export(show).expect("settled");
        archive_bytes += bytes.len();
        let digest = archive_digest(&bytes);
        let command = Command::Operator(OperatorCommand::ArchiveShow { show, digest });
        log.apply(command).expect("archived");
    }
    // Each show's archive is exported twice, as on a replica: once to write it, once by the
    // command's apply to check its digest.
    let archiving = started.elapsed();
    let memory = live() - empty;
    let snapshot = log.group.encode_snapshot().len();
    println!(
        "after archiving every show: memory {memory} bytes, snapshot {snapshot} bytes ({} per \
         archived show); the archives: {archive_bytes} bytes ({:.0}/seat); exporting and \
         applying them took {} ms ({:.0} ms per show)",
        snapshot / shows as usize,
        archive_bytes as f64 / seat_total as f64,
        archiving.as_millis(),
        archiving.as_secs_f64() * 1_000.0 / f64::from(shows),
    );
}
