//! Workloads: concurrent client processes that drive the cluster through the SDK and record
//! every operation in the history, and the final read phase after the faults are healed.
//!
//! Owns the four workloads of the suite: `holds` (all-or-nothing holds of 1-4 seats racing on a
//! few small shows, with cancels, checkouts, payment webhooks and reads), `admission` (joins,
//! grants, holds with grants, leaves), `waitlist` (a sold-out show: joins, releases, offers,
//! accepts, declines) and `register` (single-seat holds and cancels against linearizable
//! seat-map reads, the purest linearizability test; half its processes only read). Also how
//! the SDK's answers map to history completions: an answer (a business rejection included) is
//! `ok`, a refusal before proposing is `fail`, an unknown outcome is `info`. Never judges: the
//! checkers do.
//!
//! Every show is created with deadlines of an hour, beyond any test, because the model has no
//! clock (see `statemachine::check::model`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::{Client, Error, NewShow, SeatStatus as WireSeatStatus, ShowPolicy as WirePolicy};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use statemachine::check::history::{Call, Observed, Read};
use statemachine::check::recorder::{Pending, Recorder};
use statemachine::check::workload::{
    CURRENCY, Mutation, PRICE_MINOR, is_refusal, show_setup, test_policy,
};
use statemachine::{
    BookingId, Command, Currency, EntryId, HoldId, OfferId, PaymentId, PaymentOutcome,
    PaymentResult, ProviderEventId, SeatStatus, SessionId, ShowId, StateName, TicketId,
};
use tokio::sync::watch;

use crate::onsale::sign;

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
}

impl Workload {
    /// Every workload.
    pub const ALL: [Workload; 4] =
        [Workload::Holds, Workload::Admission, Workload::Waitlist, Workload::Register];

    fn name(self) -> &'static str {
        match self {
            Workload::Holds => "holds",
            Workload::Admission => "admission",
            Workload::Waitlist => "waitlist",
            Workload::Register => "register",
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

/// One show a workload uses: how the cluster creates it and how the model is set up alike.
#[derive(Clone, Debug)]
pub struct TestShow {
    /// The show id.
    pub show: u64,
    /// Its seats.
    pub seats: u32,
    /// The admission window, if the lane is on.
    pub admission_window: Option<u32>,
    /// Whether the waitlist is on.
    pub waitlist: bool,
}

impl TestShow {
    /// The SDK request creating the show, on sale at once.
    pub fn new_show(&self) -> NewShow {
        let policy = test_policy();
        let mut show = NewShow::uniform(self.show, self.seats, PRICE_MINOR, CURRENCY);
        show.hold_ttl_ms = policy.hold_ttl_ms;
        show.policy = WirePolicy {
            hold_ttl_ms: policy.hold_ttl_ms,
            payment_grace_ms: policy.payment_grace_ms,
            grant_ttl_ms: policy.grant_ttl_ms,
            ticket_wait_ms: policy.ticket_wait_ms,
            offer_ttl_ms: policy.offer_ttl_ms,
            idempotency_retention_ms: policy.idempotency_retention_ms,
            holds_per_session_max: policy.holds_per_session_max,
            booking_cancel_allowed: Some(policy.booking_cancel_allowed),
        };
        show.admission_window = self.admission_window;
        show.waitlist = self.waitlist;
        show.open_sales = true;
        show
    }

    /// The commands that set the model up the way the cluster creates the show.
    pub fn model_setup(&self) -> Vec<Command> {
        show_setup(self.show, self.seats, self.admission_window, self.waitlist)
    }
}

/// The shows of a workload; ids start at `first_show`.
pub fn shows_of(workload: Workload, first_show: u64) -> Vec<TestShow> {
    let show = |offset: u64, seats, admission_window, waitlist| TestShow {
        show: first_show + offset,
        seats,
        admission_window,
        waitlist,
    };
    match workload {
        Workload::Holds => vec![show(0, 8, None, false), show(1, 8, None, false)],
        Workload::Admission => vec![show(0, 12, Some(2), false)],
        Workload::Waitlist => vec![show(0, 4, None, true)],
        Workload::Register => vec![show(0, 3, None, false)],
    }
}

/// What the clients share.
pub struct Context {
    /// Plain HTTP, for the payment provider's webhooks.
    pub http: reqwest::Client,
    /// Every node's client address (host:port).
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

/// What one client process knows about its own entities, for its next choices and the final
/// reads.
#[derive(Default)]
struct Known {
    /// Holds by (show, hold): their seats, and whether they may still be live.
    holds: BTreeMap<(u64, u64), (Vec<u32>, bool)>,
    /// Checkouts by (show, payment): the hold and the amount.
    payments: BTreeMap<(u64, u64), (u64, u64)>,
    /// Payments already answered (not to pay twice with different outcomes).
    paid: BTreeMap<(u64, u64), ()>,
    bookings: BTreeMap<(u64, u64), ()>,
    tickets: BTreeMap<(u64, u64), bool>,
    /// Tickets used up (consumed by a hold, left, or no longer active): only read at the end.
    past_tickets: BTreeMap<(u64, u64), ()>,
    entries: BTreeMap<(u64, u64), Option<u64>>,
    offers: BTreeMap<(u64, u64), ()>,
}

/// One client process: its session and what it knows.
struct Process {
    id: u64,
    /// Its own SDK client: its own channels and leader cache, its own node first (as a Jepsen
    /// client is bound to a node), so that a node cut off from the others keeps serving the
    /// processes bound to it for as long as it believes it may.
    client: Client,
    token: String,
    session: SessionId,
    rng: StdRng,
    known: Known,
    next_key: u64,
    /// The last mutation and its key, for deliberate idempotent retries.
    last: Option<(Mutation, String)>,
    /// Mutations whose outcome is unknown, to retry with their keys until it is known.
    unresolved: Vec<(Mutation, String)>,
}

/// Runs one client process per client in `clients` until `stop` turns true, at about `rate`
/// operations per second in all; then, once `final_phase` turns true, each reads back
/// everything it knows.
pub async fn run(
    context: Arc<Context>,
    clients: Vec<Client>,
    rate: f64,
    seed: u64,
    stop: watch::Receiver<bool>,
    final_phase: watch::Receiver<bool>,
) -> Result<(), Error> {
    let mut tasks = Vec::new();
    let processes = clients.len() as u64;
    for (id, client) in (0..).zip(clients) {
        let token = client.create_session().await?;
        let session = SessionId(context.recorder.number(&token));
        let process = Process {
            id,
            client,
            token,
            session,
            rng: StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(id)),
            known: Known::default(),
            next_key: 0,
            last: None,
            unresolved: Vec::new(),
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
    for task in tasks {
        // A panicking client is a harness bug: surface it.
        task.await.expect("client task panicked");
    }
    Ok(())
}

async fn drive(
    context: Arc<Context>,
    mut process: Process,
    pause: Duration,
    stop: watch::Receiver<bool>,
    mut final_phase: watch::Receiver<bool>,
) {
    while !*stop.borrow() {
        let began = Instant::now();
        step(&context, &mut process).await;
        let jitter = process.rng.gen_range(0.5..1.5);
        let wait = pause.mul_f64(jitter).saturating_sub(began.elapsed());
        tokio::time::sleep(wait).await;
    }
    let _ = final_phase.wait_for(|go| *go).await;
    final_reads(&context, &mut process).await;
}

/// One operation of the workload, chosen at random from what the process can do now.
async fn step(context: &Context, process: &mut Process) {
    if !process.unresolved.is_empty() {
        let (mutation, key) = process.unresolved.remove(0);
        mutate(context, process, mutation, Some(key)).await;
        return;
    }
    let roll = process.rng.gen_range(0..100);
    if roll < 5
        && let Some((mutation, key)) = process.last.clone()
    {
        // An idempotent retry of the last mutation, with its key.
        mutate(context, process, mutation, Some(key)).await;
        return;
    }
    let show = context.shows.choose(&mut process.rng).map_or(0, |show| show.show);
    let seats = context.shows.iter().find(|s| s.show == show).map_or(1, |s| s.seats);
    match context.workload {
        Workload::Register => {
            // Odd processes only read: a reader never fails over to another node because of a
            // write, so while its node is cut off it keeps asking that node, and a node that
            // answers reads it cannot vouch for is caught.
            if process.id % 2 == 1 || roll < 30 {
                read(context, process, Read::SeatMap { show: ShowId(show) }).await;
            } else if let Some(hold) = live_hold(process, show)
                && roll < 70
            {
                mutate(context, process, Mutation::CancelHold { show, hold }, None).await;
            } else {
                let seat = process.rng.gen_range(0..seats);
                mutate(
                    context,
                    process,
                    Mutation::Hold { show, seats: vec![seat], grant: None },
                    None,
                )
                .await;
            }
        }
        Workload::Holds => {
            if roll < 45 {
                let count = process.rng.gen_range(1..=4).min(seats);
                let start = process.rng.gen_range(0..=seats - count);
                let wanted = (start..start + count).collect();
                mutate(context, process, Mutation::Hold { show, seats: wanted, grant: None }, None)
                    .await;
            } else if roll < 60 {
                if let Some(hold) = live_hold(process, show) {
                    mutate(context, process, Mutation::CancelHold { show, hold }, None).await;
                }
            } else if roll < 68 {
                if let Some(hold) = live_hold(process, show) {
                    mutate(context, process, Mutation::Checkout { show, hold }, None).await;
                }
            } else if roll < 76 {
                pay(context, process, show).await;
            } else if roll < 86 {
                if let Some(hold) = any_hold(process, show) {
                    let read_hold = Read::Hold {
                        show: ShowId(show),
                        session: process.session,
                        hold: HoldId(hold),
                    };
                    read(context, process, read_hold).await;
                }
            } else {
                read(context, process, Read::SeatMap { show: ShowId(show) }).await;
            }
        }
        Workload::Admission => {
            let ticket = process
                .known
                .tickets
                .iter()
                .rev()
                .find(|(k, _)| k.0 == show)
                .map(|(k, g)| (k.1, *g));
            match ticket {
                None => mutate(context, process, Mutation::JoinQueue { show }, None).await,
                Some((ticket, granted)) => {
                    if roll < 35 {
                        let read_ticket = Read::Ticket {
                            show: ShowId(show),
                            session: process.session,
                            ticket: TicketId(ticket),
                        };
                        read(context, process, read_ticket).await;
                    } else if roll < 60 && granted {
                        let seat = process.rng.gen_range(0..seats);
                        let hold = Mutation::Hold { show, seats: vec![seat], grant: Some(ticket) };
                        mutate(context, process, hold, None).await;
                    } else if roll < 75 {
                        mutate(context, process, Mutation::LeaveQueue { show, ticket }, None).await;
                    } else if let Some(hold) = live_hold(process, show) {
                        mutate(context, process, Mutation::CancelHold { show, hold }, None).await;
                    } else {
                        read(context, process, Read::SeatMap { show: ShowId(show) }).await;
                    }
                }
            }
        }
        Workload::Waitlist => {
            let entry = process
                .known
                .entries
                .iter()
                .rev()
                .find(|(k, _)| k.0 == show)
                .map(|(k, o)| (k.1, *o));
            if roll < 25 {
                let seat = process.rng.gen_range(0..seats);
                mutate(
                    context,
                    process,
                    Mutation::Hold { show, seats: vec![seat], grant: None },
                    None,
                )
                .await;
            } else if roll < 40 {
                if let Some(hold) = live_hold(process, show) {
                    mutate(context, process, Mutation::CancelHold { show, hold }, None).await;
                }
            } else if let Some((entry, offer)) = entry {
                if let Some(offer) = offer
                    && roll < 70
                {
                    let mutation = if process.rng.gen_bool(0.5) {
                        Mutation::AcceptOffer { show, offer }
                    } else {
                        Mutation::DeclineOffer { show, offer }
                    };
                    mutate(context, process, mutation, None).await;
                } else {
                    let read_entry = Read::Entry {
                        show: ShowId(show),
                        session: process.session,
                        entry: EntryId(entry),
                    };
                    read(context, process, read_entry).await;
                }
            } else if roll < 70 {
                mutate(context, process, Mutation::JoinWaitlist { show }, None).await;
            } else {
                read(context, process, Read::SeatMap { show: ShowId(show) }).await;
            }
        }
    }
}

fn live_hold(process: &mut Process, show: u64) -> Option<u64> {
    let live: Vec<u64> = process
        .known
        .holds
        .iter()
        .filter(|((s, _), (_, live))| *s == show && *live)
        .map(|((_, hold), _)| *hold)
        .collect();
    live.choose(&mut process.rng).copied()
}

fn any_hold(process: &mut Process, show: u64) -> Option<u64> {
    let all: Vec<u64> =
        process.known.holds.keys().filter(|(s, _)| *s == show).map(|(_, hold)| *hold).collect();
    all.choose(&mut process.rng).copied()
}

/// Runs a mutation through the SDK and records it; `key` repeats an earlier one.
async fn mutate(context: &Context, process: &mut Process, mutation: Mutation, key: Option<String>) {
    let key = key.unwrap_or_else(|| {
        process.next_key += 1;
        format!("jepsen-p{}-k{}", process.id, process.next_key)
    });
    // Holds quote the price version the show was created with.
    let call =
        mutation.command(process.session, context.recorder.number(&key), context.price_version);
    let pending = context.recorder.invoke(process.id, Call::Write(call));
    process.last = Some((mutation.clone(), key.clone()));
    let (mutation_again, key_again) = (mutation.clone(), key.clone());
    let client = process.client.clone();
    let token = process.token.clone();
    let token = token.as_str();
    let key = Some(key.as_str());
    let version = context.price_version;
    let answer: Result<Observed, Error> = match mutation {
        Mutation::Hold { show, ref seats, grant } => client
            .hold_with_grant(token, show, seats, version, grant.unwrap_or(0), key)
            .await
            .map(|reply| {
                process.known.holds.insert((show, reply.hold_id), (reply.seats.clone(), true));
                if let Some(ticket) = grant {
                    process.known.tickets.remove(&(show, ticket));
                    process.known.past_tickets.insert((show, ticket), ());
                }
                Observed::Held { hold: HoldId(reply.hold_id), seats: reply.seats }
            }),
        Mutation::CancelHold { show, hold } => {
            client.cancel_hold(token, show, hold, key).await.map(|_| {
                if let Some(known) = process.known.holds.get_mut(&(show, hold)) {
                    known.1 = false;
                }
                Observed::Done
            })
        }
        Mutation::Checkout { show, hold } => {
            client.checkout(token, show, hold, key).await.map(|reply| {
                if let Some(known) = process.known.holds.get_mut(&(show, hold)) {
                    known.1 = false;
                }
                process.known.payments.insert((show, reply.payment_id), (hold, reply.amount_minor));
                Observed::CheckoutStarted {
                    hold: HoldId(hold),
                    payment: PaymentId(reply.payment_id),
                }
            })
        }
        Mutation::JoinQueue { show } => client.join_queue(token, show, key).await.map(|reply| {
            let granted = reply.state == "granted";
            process.known.tickets.insert((show, reply.ticket_id), granted);
            Observed::Queued { ticket: TicketId(reply.ticket_id) }
        }),
        Mutation::LeaveQueue { show, ticket } => {
            let answer = client.leave_queue(token, show, ticket, key).await;
            if matches!(&answer, Ok(_) | Err(Error::Rejected { .. })) {
                // Left, or no longer active (consumed, left before): join again next time.
                process.known.tickets.remove(&(show, ticket));
                process.known.past_tickets.insert((show, ticket), ());
            }
            answer.map(|_| Observed::Done)
        }
        Mutation::JoinWaitlist { show } => {
            client.join_waitlist(token, show, 1, key).await.map(|reply| {
                process.known.entries.insert((show, reply.entry_id), None);
                Observed::WaitlistJoined { entry: EntryId(reply.entry_id) }
            })
        }
        Mutation::AcceptOffer { show, offer } => {
            client.accept_offer(token, show, offer, key).await.map(|reply| {
                process.known.holds.insert((show, reply.hold_id), (reply.seats.clone(), true));
                process.known.offers.insert((show, offer), ());
                forget_offer(process, show, offer);
                Observed::Held { hold: HoldId(reply.hold_id), seats: reply.seats }
            })
        }
        Mutation::DeclineOffer { show, offer } => {
            client.decline_offer(token, show, offer, key).await.map(|_| {
                process.known.offers.insert((show, offer), ());
                forget_offer(process, show, offer);
                Observed::Done
            })
        }
    };
    let unknown = match answer {
        Ok(value) => {
            context.recorder.ok(pending, value);
            false
        }
        Err(error) => complete_error(&context.recorder, pending, &error, true),
    };
    if unknown {
        // As a real client would: retry with the same key until the outcome is known.
        process.unresolved.push((mutation_again, key_again));
    }
}

fn forget_offer(process: &mut Process, show: u64, offer: u64) {
    let entries: Vec<_> = process
        .known
        .entries
        .iter()
        .filter(|(key, known)| key.0 == show && **known == Some(offer))
        .map(|(key, _)| *key)
        .collect();
    for key in entries {
        process.known.entries.remove(&key);
    }
}

/// Records an SDK error: a business rejection is an answer (`ok`); anything the state machine
/// never saw is `fail`; an unknown outcome of a write is `info`.
/// Returns whether the outcome is unknown (recorded as `info`).
fn complete_error(recorder: &Recorder, pending: Pending, error: &Error, write: bool) -> bool {
    match error {
        Error::Rejected { code_name: code, .. } if !is_refusal(code) => {
            recorder.ok(pending, Observed::rejected(code.clone()));
            false
        }
        Error::Rejected { .. } | Error::InvalidArgument(_) => {
            recorder.fail(pending, error.to_string());
            false
        }
        Error::Unavailable { .. } | Error::Transport { .. }
            if write
                && (error.is_outcome_unknown() || matches!(error, Error::Transport { .. })) =>
        {
            recorder.info(pending, error.to_string());
            true
        }
        Error::Unavailable { .. } | Error::Transport { .. } => {
            recorder.fail(pending, error.to_string());
            false
        }
    }
}

/// A read through the SDK (linearizable: hold, ticket, entry, offer, booking reads go to the
/// leader with ReadIndex; the seat map asks for its linearizable variant).
async fn read(context: &Context, process: &mut Process, what: Read) {
    let pending = context.recorder.invoke(process.id, Call::Read(what.clone()));
    let client = process.client.clone();
    let token = process.token.clone();
    let token = token.as_str();
    let entity = |state: &str, seats: Vec<u32>, offer: Option<OfferId>| {
        StateName::from_wire(state)
            .map(|state| Observed::Entity { state, seats, offer })
            .unwrap_or_else(|| Observed::rejected(format!("unknown_state:{state}")))
    };
    let answer: Result<Observed, Error> = match what {
        Read::SeatMap { show } => client.get_seat_map_linearizable(show.0).await.map(|map| {
            let seats = map.seats().map(seat_status).collect();
            Observed::Seats { seats }
        }),
        Read::Hold { show, hold, .. } => client
            .get_hold(token, show.0, hold.0)
            .await
            .map(|reply| entity(&reply.state, reply.seats, None)),
        Read::Booking { show, booking, .. } => client
            .get_booking(token, show.0, booking.0)
            .await
            .map(|reply| entity(&reply.state, reply.seats, None)),
        Read::Ticket { show, ticket, .. } => {
            client.get_ticket(token, show.0, ticket.0).await.map(|reply| {
                let granted = reply.state == "granted";
                if let Some(known) = process.known.tickets.get_mut(&(show.0, ticket.0)) {
                    *known = granted;
                }
                entity(&reply.state, Vec::new(), None)
            })
        }
        Read::Entry { show, entry, .. } => {
            client.get_waitlist_entry(token, show.0, entry.0).await.map(|reply| {
                let offer = reply
                    .offer
                    .as_ref()
                    .filter(|offer| offer.offer_id != 0)
                    .map(|offer| offer.offer_id);
                if reply.state == "offered"
                    && let Some(known) = process.known.entries.get_mut(&(show.0, entry.0))
                {
                    *known = offer;
                }
                entity(&reply.state, Vec::new(), offer.map(OfferId))
            })
        }
        Read::Offer { show, offer, .. } => client
            .get_offer(token, show.0, offer.0)
            .await
            .map(|reply| entity(&reply.state, reply.seats, None)),
    };
    match answer {
        Ok(value) => context.recorder.ok(pending, value),
        Err(error) => {
            complete_error(&context.recorder, pending, &error, false);
        }
    }
}

fn seat_status(status: WireSeatStatus) -> SeatStatus {
    match status {
        WireSeatStatus::Held => SeatStatus::Held,
        WireSeatStatus::Booked => SeatStatus::Booked,
        WireSeatStatus::Reserved => SeatStatus::Reserved,
        _ => SeatStatus::Free,
    }
}

/// The simulated payment provider pays (or declines) one of the process's checkouts through a
/// signed webhook to a random node.
async fn pay(context: &Context, process: &mut Process, show: u64) {
    let unpaid: Vec<(u64, (u64, u64))> = process
        .known
        .payments
        .iter()
        .filter(|(key, _)| key.0 == show && !process.known.paid.contains_key(key))
        .map(|(key, value)| (key.1, *value))
        .collect();
    let Some(&(payment, (_hold, amount))) = unpaid.choose(&mut process.rng) else { return };
    let declined = process.rng.gen_bool(0.25);
    process.known.paid.insert((show, payment), ());
    let event_id = format!("jepsen-evt-{show}-{payment}");
    let result = if declined {
        PaymentResult::Declined
    } else {
        PaymentResult::Succeeded { amount_minor: amount, currency: Currency(*b"EUR") }
    };
    let call = Call::Write(Command::Payment(PaymentOutcome {
        show: ShowId(show),
        payment: PaymentId(payment),
        event: ProviderEventId(context.recorder.number(&event_id)),
        result,
    }));
    let body = if declined {
        serde_json::json!({ "event_id": event_id, "payment_id": format!("{show}-{payment}"), "result": "declined" })
    } else {
        serde_json::json!({
            "event_id": event_id,
            "payment_id": format!("{show}-{payment}"),
            "result": "succeeded",
            "amount_minor": amount,
            "currency": CURRENCY,
        })
    };
    let pending = context.recorder.invoke(process.id, call);
    let bytes = serde_json::to_vec(&body).expect("JSON values encode");
    let signature = sign(&context.webhook_secret, &bytes);
    let node = context.nodes.choose(&mut process.rng).cloned().unwrap_or_default();
    let sent = context
        .http
        .post(format!("http://{node}/v1/payments/webhook"))
        .header("content-type", "application/json")
        .header("x-booking-signature", &signature)
        .body(bytes)
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) => return context.recorder.info(pending, format!("webhook: {error}")),
    };
    let status = response.status();
    let reply: serde_json::Value = response.json().await.unwrap_or_default();
    if status.is_success() {
        let effect = reply["effect"].as_str().unwrap_or("?").to_owned();
        let booking = reply["booking_id"]
            .as_str()
            .and_then(|id| id.rsplit('-').next())
            .and_then(|id| id.parse().ok())
            .map(BookingId);
        if let Some(booking) = booking {
            process.known.bookings.insert((show, booking.0), ());
        }
        context.recorder.ok(
            pending,
            Observed::PaymentRecorded { payment: PaymentId(payment), effect, booking },
        );
    } else if status.is_client_error() && status.as_u16() != 429 {
        let code = reply["code"].as_str().unwrap_or("unknown").to_owned();
        context.recorder.ok(pending, Observed::rejected(code));
    } else {
        context.recorder.info(pending, format!("webhook: HTTP {status}: {reply}"));
    }
}

/// After recovery: every entity the process knows of is read back, and each show's seat map.
async fn final_reads(context: &Context, process: &mut Process) {
    // Settle the unknown outcomes first (a few tries each: the cluster has recovered).
    for _ in 0..5 {
        let unresolved = std::mem::take(&mut process.unresolved);
        if unresolved.is_empty() {
            break;
        }
        for (mutation, key) in unresolved {
            mutate(context, process, mutation, Some(key)).await;
        }
    }
    let show_id = ShowId;
    let session = process.session;
    let mut reads: Vec<Read> = Vec::new();
    for &(show, hold) in process.known.holds.keys() {
        reads.push(Read::Hold { show: show_id(show), session, hold: HoldId(hold) });
    }
    for &(show, booking) in process.known.bookings.keys() {
        reads.push(Read::Booking { show: show_id(show), session, booking: BookingId(booking) });
    }
    for &(show, ticket) in process.known.tickets.keys().chain(process.known.past_tickets.keys()) {
        reads.push(Read::Ticket { show: show_id(show), session, ticket: TicketId(ticket) });
    }
    for &(show, entry) in process.known.entries.keys() {
        reads.push(Read::Entry { show: show_id(show), session, entry: EntryId(entry) });
    }
    for &(show, offer) in process.known.offers.keys() {
        reads.push(Read::Offer { show: show_id(show), session, offer: OfferId(offer) });
    }
    if process.id == 0 {
        for show in &context.shows {
            reads.push(Read::SeatMap { show: show_id(show.show) });
        }
    }
    for what in reads {
        read(context, process, what).await;
    }
}
