//! Workloads: concurrent client processes that drive the cluster through the SDK and record
//! every operation in the history, and the final read phase after the faults are healed.
//!
//! Owns the five workloads of the suite: `holds` (all-or-nothing holds of 1-4 seats racing on a
//! few small shows, with cancels, checkouts, payment webhooks and reads), `admission` (joins,
//! grants, holds with grants, leaves), `waitlist` (a sold-out show: joins, releases, offers,
//! accepts, declines), `register` (single-seat holds and cancels against linearizable
//! seat-map reads, the purest linearizability test; half its processes only read) and
//! `payments` (holds, checkouts the cluster's own payment worker charges through the real
//! provider, reads of checked-out holds that find the bookings, and cancelled bookings that
//! the refund worker refunds; judged against the provider's ledger, see `payments.rs`) and
//! `deadlines` (holds, checkouts, payment webhooks, cancels and reads of two shows whose holds
//! expire in 1.5 s and payments in 1 s, so that expiry races them, the second with its admission
//! lane on, its grants expiring in 1.5 s and its tickets after 4 s of waiting, and a third whose
//! waitlist is on, its offers expiring in 2 s while waiters accept, decline and read them;
//! judged by the deadline checks over the answers' log times and the holds', tickets', entries'
//! and offers' audit trails, not by the model): which
//! operation each client process draws from the seed, its deliberate idempotent retries, and
//! how the payment provider's webhook reaches a node (plain HTTP to a random one, once). The
//! SDK calls themselves, what a process knows, and how an answer becomes a history completion
//! are the kit's ([`testkit::workload::Buyer`]), shared with the simulator. Never judges: the
//! checkers do.
//!
//! Every show but the `deadlines` workload's is created with deadlines of an hour, beyond any
//! test, because the model has no clock (see `statemachine::check::model`).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::{Client, Error};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use statemachine::check::history::Read;
use statemachine::check::recorder::Recorder;
use statemachine::check::workload::{Mutation, SHORT_ADMISSION_WINDOW};
use statemachine::{HoldId, ShowId};
use testkit::webhook::{SIGNATURE_HEADER, sign, wall_clock_s};
use testkit::workload::Buyer;
pub use testkit::workload::TestShow;
use tokio::sync::watch;

/// A workload's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Racing all-or-nothing holds with cancels, checkouts, payments and reads.
    Holds,
    /// The admission lane: joins, grants, holds with grants, leaves.
    Admission,
    /// The waitlist of a sold-out show.
    Waitlist,
    /// Single-seat holds and cancels against linearizable seat-map reads.
    Register,
    /// Holds, checkouts paid by the cluster's payment worker through the provider, cancelled
    /// bookings refunded by its refund worker.
    Payments,
    /// Holds, checkouts, payment webhooks, cancels and reads of two shows whose holds and
    /// payments expire within seconds, the second with an admission lane whose grants and
    /// waiting tickets do too (joins, holds with grants, leaves, ticket reads), and a third
    /// whose waitlist's offers do too (joins, entry reads, accepts, declines), judged by the
    /// deadline checks.
    Deadlines,
}

impl Workload {
    /// Every workload.
    pub const ALL: [Workload; 6] = [
        Workload::Holds,
        Workload::Admission,
        Workload::Waitlist,
        Workload::Register,
        Workload::Payments,
        Workload::Deadlines,
    ];

    fn name(self) -> &'static str {
        match self {
            Workload::Holds => "holds",
            Workload::Admission => "admission",
            Workload::Waitlist => "waitlist",
            Workload::Register => "register",
            Workload::Payments => "payments",
            Workload::Deadlines => "deadlines",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = String;

    fn from_str(name: &str) -> Result<Workload, String> {
        Workload::ALL.into_iter().find(|workload| workload.name() == name).ok_or_else(|| {
            let names: Vec<_> = Workload::ALL.iter().map(|workload| workload.name()).collect();
            format!("unknown workload {name:?}: one of {}", names.join(", "))
        })
    }
}

/// The shows of a workload; ids start at `first_show`.
pub fn shows_of(workload: Workload, first_show: u64) -> Vec<TestShow> {
    let show = |offset: u64, seats, admission_window, waitlist| TestShow {
        show: first_show + offset,
        seats,
        admission_window,
        waitlist,
        short_deadlines: workload == Workload::Deadlines,
    };
    match workload {
        Workload::Holds => vec![show(0, 8, None, false), show(1, 8, None, false)],
        Workload::Admission => vec![show(0, 12, Some(2), false)],
        Workload::Waitlist => vec![show(0, 4, None, true)],
        Workload::Register => vec![show(0, 3, None, false)],
        Workload::Payments => vec![show(0, 16, None, false), show(1, 16, None, false)],
        Workload::Deadlines => vec![
            show(0, 4, None, false),
            show(1, 4, Some(SHORT_ADMISSION_WINDOW), false),
            show(2, 3, None, true),
        ],
    }
}

/// What the clients share.
pub struct Context {
    /// HTTP for the payment provider's webhooks (https, trusting the cluster's CA).
    pub http: reqwest::Client,
    /// Every node's base URL (`https://host:port`).
    pub nodes: Vec<String>,
    /// The secret webhooks are signed with.
    pub webhook_secret: String,
    /// The history.
    pub recorder: Arc<Recorder>,
    /// The workload.
    pub workload: Workload,
    /// Its shows.
    pub shows: Vec<TestShow>,
    /// The price version holds quote.
    pub price_version: u32,
}

/// One client process: the kit's buyer (its own SDK client, with its own channels and leader
/// cache and its own node first, as a Jepsen client is bound to a node, so that a node cut off
/// from the others keeps serving the processes bound to it for as long as it believes it may),
/// and the seed of its choices.
struct Process {
    buyer: Buyer,
    rng: StdRng,
}

/// Runs one client process per client in `clients` until `stop` turns true, at about `rate`
/// operations per second in all; then, once `final_phase` turns true, each reads back
/// everything it knows. Returns the buyers, with what they know (the `payments` workload reads
/// the cluster's final state through them).
pub async fn run(
    context: Arc<Context>,
    clients: Vec<Client>,
    rate: f64,
    seed: u64,
    stop: watch::Receiver<bool>,
    final_phase: watch::Receiver<bool>,
) -> Result<Vec<Buyer>, Error> {
    let mut tasks = Vec::new();
    let processes = clients.len() as u64;
    for (id, client) in (0..).zip(clients) {
        let recorder = Arc::clone(&context.recorder);
        let buyer = Buyer::start(id, client, recorder, context.price_version, "jepsen").await?;
        let process = Process {
            buyer,
            rng: StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(id)),
        };
        let pause = Duration::from_secs_f64(processes as f64 / rate.max(0.1));
        tasks.push(tokio::spawn(drive(
            Arc::clone(&context),
            process,
            pause,
            stop.clone(),
            final_phase.clone(),
        )));
    }
    let mut buyers = Vec::new();
    for task in tasks {
        // A panicking client is a harness bug: surface it.
        buyers.push(task.await.expect("client task panicked"));
    }
    Ok(buyers)
}

async fn drive(
    context: Arc<Context>,
    mut process: Process,
    pause: Duration,
    stop: watch::Receiver<bool>,
    mut final_phase: watch::Receiver<bool>,
) -> Buyer {
    while !*stop.borrow() {
        let began = Instant::now();
        step(&context, &mut process).await;
        let jitter = process.rng.gen_range(0.5..1.5);
        let wait = pause.mul_f64(jitter).saturating_sub(began.elapsed());
        tokio::time::sleep(wait).await;
    }
    let _ = final_phase.wait_for(|go| *go).await;
    let shows: Vec<u64> = context.shows.iter().map(|show| show.show).collect();
    process.buyer.read_back(&shows).await;
    process.buyer
}

/// One operation of the workload, chosen at random from what the process can do now.
async fn step(context: &Context, process: &mut Process) {
    if let Some((mutation, key)) = process.buyer.take_unresolved() {
        process.buyer.mutate(mutation, key).await;
        return;
    }
    let roll: u32 = process.rng.gen_range(0..100);
    if roll < 5
        && let Some((mutation, key)) = process.buyer.last()
    {
        // An idempotent retry of the last mutation, with its key.
        process.buyer.mutate(mutation, key).await;
        return;
    }
    let show = context.shows.choose(&mut process.rng).map_or(0, |show| show.show);
    let seats = context.shows.iter().find(|s| s.show == show).map_or(1, |s| s.seats);
    match context.workload {
        Workload::Register => {
            // Odd processes only read: a reader never fails over to another node because of a
            // write, so while its node is cut off it keeps asking that node, and a node that
            // answers reads it cannot vouch for is caught.
            if process.buyer.id() % 2 == 1 || roll < 30 {
                process.buyer.read(Read::SeatMap { show: ShowId(show) }).await;
            } else if let Some(hold) = process.buyer.known().live_hold(show, &mut process.rng)
                && roll < 70
            {
                process.buyer.mutate_fresh(Mutation::CancelHold { show, hold }).await;
            } else {
                let seat = process.rng.gen_range(0..seats);
                process
                    .buyer
                    .mutate_fresh(Mutation::Hold { show, seats: vec![seat], grant: None })
                    .await;
            }
        }
        Workload::Holds => {
            if roll < 45 {
                let count = process.rng.gen_range(1..=4).min(seats);
                let start = process.rng.gen_range(0..=seats - count);
                let wanted = (start..start + count).collect();
                process
                    .buyer
                    .mutate_fresh(Mutation::Hold { show, seats: wanted, grant: None })
                    .await;
            } else if roll < 60 {
                if let Some(hold) = process.buyer.known().live_hold(show, &mut process.rng) {
                    process.buyer.mutate_fresh(Mutation::CancelHold { show, hold }).await;
                }
            } else if roll < 68 {
                if let Some(hold) = process.buyer.known().live_hold(show, &mut process.rng) {
                    process.buyer.mutate_fresh(Mutation::Checkout { show, hold }).await;
                }
            } else if roll < 76 {
                pay(context, process, show).await;
            } else if roll < 86 {
                if let Some(hold) = process.buyer.known().any_hold(show, &mut process.rng) {
                    let read_hold = Read::Hold {
                        show: ShowId(show),
                        session: process.buyer.session(),
                        hold: HoldId(hold),
                    };
                    process.buyer.read(read_hold).await;
                }
            } else {
                process.buyer.read(Read::SeatMap { show: ShowId(show) }).await;
            }
        }
        Workload::Payments => {
            process.buyer.payments_step(show, seats, roll, &mut process.rng).await;
        }
        Workload::Deadlines => {
            let spec = context.shows.iter().find(|s| s.show == show);
            let pay_now = if spec.is_some_and(|spec| spec.waitlist) {
                process.buyer.offers_step(show, seats, roll, &mut process.rng).await;
                false
            } else if spec.is_some_and(|spec| spec.admission_window.is_some()) {
                process.buyer.grants_step(show, seats, roll, &mut process.rng).await
            } else {
                process.buyer.deadlines_step(show, seats, roll, &mut process.rng).await
            };
            if pay_now {
                pay(context, process, show).await;
            }
        }
        Workload::Admission => {
            process.buyer.admission_step(show, seats, roll, &mut process.rng).await;
        }
        Workload::Waitlist => {
            process.buyer.waitlist_step(show, seats, roll, &mut process.rng).await;
        }
    }
}

/// The simulated payment provider pays (or declines) one of the process's checkouts through a
/// signed webhook to a random node, once: an answer that is not certain is `info`. It signs
/// with the machine's wall clock, as a provider would; the node checks the timestamp against its
/// own clock, which the clock-skew nemesis moves by up to 30 s, well inside the tolerance.
async fn pay(context: &Context, process: &mut Process, show: u64) {
    let Some(payment) = process.buyer.payment(show, &mut process.rng) else { return };
    let signature = sign(&context.webhook_secret, wall_clock_s(), &payment.body);
    let node = context.nodes.choose(&mut process.rng).cloned().unwrap_or_default();
    let sent = context
        .http
        .post(format!("{node}/v1/payments/webhook"))
        .header("content-type", "application/json")
        .header(SIGNATURE_HEADER, &signature)
        .body(payment.body.clone())
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => return context.recorder.info(payment.pending, format!("webhook: {error}")),
    };
    let status = response.status();
    let reply: serde_json::Value = response.json().await.unwrap_or_default();
    match process.buyer.payment_answer(&payment, status.as_u16(), &reply) {
        Some(value) => context.recorder.ok(payment.pending, value),
        None => {
            context.recorder.info(payment.pending, format!("webhook: HTTP {status}: {reply}"));
        }
    }
}
