//! Simulated clients: buyers that drive the cluster through the real SDK over the simulated
//! network, and record every operation in a history the shared checkers judge.
//!
//! Owns the shows of a run (one per kind of traffic: racing multi-seat holds with checkouts and
//! payments, the admission lane, the waitlist of a sold-out show, and single-seat holds against
//! linearizable seat maps), each process's choices, and how the SDK's answers become history
//! completions: an answer, a business rejection included, is `ok`; a refusal before proposing is
//! `fail`; an unknown outcome is `info`, and the process retries it with the same key until it
//! is settled, as a real client does. The payment provider is simulated too: it pays or declines
//! checkouts through the signed REST webhook. Never judges: the checks do.
//!
//! Every deadline of a show is an hour, beyond any run, because the model has no clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use client::{Client, Error, NewShow, SeatStatus as WireSeatStatus, ShowPolicy as WirePolicy};
use hmac::{Hmac, Mac};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sha2::Sha256;
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

use crate::net::{self, TurmoilNet};
use crate::world::WEBHOOK_SECRET;

/// The traffic a show gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Racing holds of 1-4 seats, cancels, checkouts, payments, reads.
    Holds,
    /// Joins of the admission lane, holds with grants, leaves.
    Admission,
    /// Holds and cancels of a tiny show, waitlist joins, offers accepted or declined.
    Waitlist,
    /// Single-seat holds and cancels against linearizable seat maps.
    Register,
}

/// One show of a run.
#[derive(Clone, Debug)]
pub struct SimShow {
    /// Its id.
    pub show: u64,
    /// Its traffic.
    pub kind: Kind,
    /// Its seats.
    pub seats: u32,
}

impl SimShow {
    fn window(&self) -> Option<u32> {
        (self.kind == Kind::Admission).then_some(2)
    }

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
        show.admission_window = self.window();
        show.waitlist = self.kind == Kind::Waitlist;
        show.open_sales = true;
        show
    }

    /// The commands that set the model up as the cluster creates the show.
    pub fn model_setup(&self) -> Vec<Command> {
        show_setup(self.show, self.seats, self.window(), self.kind == Kind::Waitlist)
    }
}

/// The shows of every run: each kind of traffic once, spread over the data groups by id.
pub fn shows() -> Vec<SimShow> {
    vec![
        SimShow { show: 1, kind: Kind::Holds, seats: 8 },
        SimShow { show: 2, kind: Kind::Admission, seats: 12 },
        SimShow { show: 3, kind: Kind::Waitlist, seats: 3 },
        SimShow { show: 4, kind: Kind::Register, seats: 3 },
    ]
}

/// An SDK client over the simulated network, its own node first.
pub fn sdk(first: u64, nodes: u64) -> Client {
    let mut addresses = vec![net::address(first)];
    addresses.extend((1..=nodes).filter(|id| *id != first).map(net::address));
    let config = client::Config {
        retry_budget: Duration::from_secs(3),
        attempt_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_millis(300),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        // turmoil's TCP never resends: a connection that lost a segment stalls until a ping
        // goes unanswered.
        keep_alive: Duration::from_millis(500),
        // Holds go through `HoldMany` once a show's leader is known, as in production.
        hold_batches_in_flight_max: client::HOLD_BATCHES_IN_FLIGHT_DEFAULT,
    };
    // Keys the SDK makes itself (membership calls) must not come from the OS either. Each
    // client gets a number of its own (a run is one process, and makes its clients in a
    // deterministic order).
    static CLIENTS: AtomicU64 = AtomicU64::new(0);
    let client = CLIENTS.fetch_add(1, Ordering::Relaxed);
    let next = AtomicU64::new(0);
    let keys = move || format!("sim-sdk-{client}-{}", next.fetch_add(1, Ordering::Relaxed));
    Client::with_connector(addresses, config, Arc::new(TurmoilNet))
        .expect("valid addresses")
        .with_key_source(Arc::new(keys))
}

/// What one process knows of its own entities.
#[derive(Default)]
struct Known {
    /// Holds: their seats and whether they may still be live.
    holds: BTreeMap<(u64, u64), bool>,
    /// Checkouts: payment → amount.
    payments: BTreeMap<(u64, u64), u64>,
    paid: BTreeMap<(u64, u64), ()>,
    bookings: BTreeMap<(u64, u64), ()>,
    /// Tickets: whether granted.
    tickets: BTreeMap<(u64, u64), bool>,
    past_tickets: BTreeMap<(u64, u64), ()>,
    /// Waitlist entries: their offer, once seen.
    entries: BTreeMap<(u64, u64), Option<u64>>,
    offers: BTreeMap<(u64, u64), ()>,
}

/// One client process.
pub struct Process {
    id: u64,
    client: Client,
    token: String,
    session: SessionId,
    rng: StdRng,
    known: Known,
    next_key: u64,
    unresolved: Vec<(Mutation, String)>,
    recorder: Arc<Recorder>,
    shows: Vec<SimShow>,
    nodes: u64,
    price_version: u32,
}

impl Process {
    /// Process `id`, bound to node `1 + id % nodes`, with its own session.
    ///
    /// # Errors
    ///
    /// If no session could be created.
    pub async fn start(
        id: u64,
        nodes: u64,
        seed: u64,
        recorder: Arc<Recorder>,
        price_version: u32,
    ) -> Result<Process, Error> {
        let client = sdk(1 + id % nodes, nodes);
        let token = client.create_session().await?;
        let session = SessionId(recorder.number(&token));
        Ok(Process {
            id,
            client,
            token,
            session,
            rng: StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(id)),
            known: Known::default(),
            next_key: 0,
            unresolved: Vec::new(),
            recorder,
            shows: shows(),
            nodes,
            price_version,
        })
    }

    /// Runs operations about `pause` apart until `stop` turns true, then reads back.
    pub async fn run(mut self, pause: Duration, stop: watch::Receiver<bool>) -> Self {
        while !*stop.borrow() {
            self.step().await;
            let jitter = self.rng.gen_range(0.5..1.5);
            tokio::time::sleep(pause.mul_f64(jitter)).await;
        }
        self
    }

    /// One operation, chosen from what the process can do now.
    async fn step(&mut self) {
        if !self.unresolved.is_empty() {
            let (mutation, key) = self.unresolved.remove(0);
            self.mutate(mutation, Some(key)).await;
            return;
        }
        let show = self.shows.choose(&mut self.rng).cloned().expect("shows");
        let (id, seats) = (show.show, show.seats);
        let roll = self.rng.gen_range(0..100);
        match show.kind {
            Kind::Register => {
                if self.id % 2 == 1 || roll < 30 {
                    self.read(Read::SeatMap { show: ShowId(id) }).await;
                } else if let Some(hold) = self.live_hold(id)
                    && roll < 65
                {
                    self.mutate(Mutation::CancelHold { show: id, hold }, None).await;
                } else {
                    let seat = self.rng.gen_range(0..seats);
                    self.mutate(Mutation::Hold { show: id, seats: vec![seat], grant: None }, None)
                        .await;
                }
            }
            Kind::Holds => {
                if roll < 40 {
                    let count = self.rng.gen_range(1..=4).min(seats);
                    let start = self.rng.gen_range(0..=seats - count);
                    let wanted = (start..start + count).collect();
                    self.mutate(Mutation::Hold { show: id, seats: wanted, grant: None }, None)
                        .await;
                } else if roll < 55 {
                    if let Some(hold) = self.live_hold(id) {
                        self.mutate(Mutation::CancelHold { show: id, hold }, None).await;
                    }
                } else if roll < 65 {
                    if let Some(hold) = self.live_hold(id) {
                        self.mutate(Mutation::Checkout { show: id, hold }, None).await;
                    }
                } else if roll < 75 {
                    self.pay(id).await;
                } else if roll < 87 {
                    let holds: Vec<u64> =
                        self.known.holds.keys().filter(|k| k.0 == id).map(|k| k.1).collect();
                    if let Some(&hold) = holds.choose(&mut self.rng) {
                        let session = self.session;
                        self.read(Read::Hold { show: ShowId(id), session, hold: HoldId(hold) })
                            .await;
                    }
                } else {
                    self.read(Read::SeatMap { show: ShowId(id) }).await;
                }
            }
            Kind::Admission => {
                let ticket = self
                    .known
                    .tickets
                    .iter()
                    .rev()
                    .find(|(k, _)| k.0 == id)
                    .map(|(k, g)| (k.1, *g));
                match ticket {
                    None => self.mutate(Mutation::JoinQueue { show: id }, None).await,
                    Some((ticket, granted)) => {
                        if roll < 35 {
                            let (show, session) = (ShowId(id), self.session);
                            self.read(Read::Ticket { show, session, ticket: TicketId(ticket) })
                                .await;
                        } else if roll < 60 && granted {
                            let seat = self.rng.gen_range(0..seats);
                            let hold =
                                Mutation::Hold { show: id, seats: vec![seat], grant: Some(ticket) };
                            self.mutate(hold, None).await;
                        } else if roll < 75 {
                            self.mutate(Mutation::LeaveQueue { show: id, ticket }, None).await;
                        } else if let Some(hold) = self.live_hold(id) {
                            self.mutate(Mutation::CancelHold { show: id, hold }, None).await;
                        } else {
                            self.read(Read::SeatMap { show: ShowId(id) }).await;
                        }
                    }
                }
            }
            Kind::Waitlist => {
                let entry = self
                    .known
                    .entries
                    .iter()
                    .rev()
                    .find(|(k, _)| k.0 == id)
                    .map(|(k, o)| (k.1, *o));
                if roll < 25 {
                    let seat = self.rng.gen_range(0..seats);
                    self.mutate(Mutation::Hold { show: id, seats: vec![seat], grant: None }, None)
                        .await;
                } else if roll < 40 {
                    if let Some(hold) = self.live_hold(id) {
                        self.mutate(Mutation::CancelHold { show: id, hold }, None).await;
                    }
                } else if let Some((entry, offer)) = entry {
                    if let Some(offer) = offer
                        && roll < 70
                    {
                        let mutation = if self.rng.gen_bool(0.5) {
                            Mutation::AcceptOffer { show: id, offer }
                        } else {
                            Mutation::DeclineOffer { show: id, offer }
                        };
                        self.mutate(mutation, None).await;
                    } else {
                        let (show, session) = (ShowId(id), self.session);
                        self.read(Read::Entry { show, session, entry: EntryId(entry) }).await;
                    }
                } else if roll < 70 {
                    self.mutate(Mutation::JoinWaitlist { show: id }, None).await;
                } else {
                    self.read(Read::SeatMap { show: ShowId(id) }).await;
                }
            }
        }
    }

    fn live_hold(&mut self, show: u64) -> Option<u64> {
        let live: Vec<u64> = self
            .known
            .holds
            .iter()
            .filter(|((s, _), live)| *s == show && **live)
            .map(|((_, hold), _)| *hold)
            .collect();
        live.choose(&mut self.rng).copied()
    }

    /// Runs a mutation through the SDK and records it; `key` repeats an earlier one.
    async fn mutate(&mut self, mutation: Mutation, key: Option<String>) {
        let key = key.unwrap_or_else(|| {
            self.next_key += 1;
            format!("sim-p{}-k{}", self.id, self.next_key)
        });
        let call = mutation.command(self.session, self.recorder.number(&key), self.price_version);
        let pending = self.recorder.invoke(self.id, Call::Write(call));
        let (client, token) = (self.client.clone(), self.token.clone());
        let (token, key_ref, version) = (token.as_str(), Some(key.as_str()), self.price_version);
        let known = &mut self.known;
        let answer: Result<Observed, Error> = match mutation.clone() {
            Mutation::Hold { show, seats, grant } => client
                .hold_with_grant(token, show, &seats, version, grant.unwrap_or(0), key_ref)
                .await
                .map(|reply| {
                    known.holds.insert((show, reply.hold_id), true);
                    if let Some(ticket) = grant {
                        known.tickets.remove(&(show, ticket));
                        known.past_tickets.insert((show, ticket), ());
                    }
                    Observed::Held { hold: HoldId(reply.hold_id), seats: reply.seats }
                }),
            Mutation::CancelHold { show, hold } => {
                client.cancel_hold(token, show, hold, key_ref).await.map(|_| {
                    known.holds.insert((show, hold), false);
                    Observed::Done
                })
            }
            Mutation::Checkout { show, hold } => {
                client.checkout(token, show, hold, key_ref).await.map(|reply| {
                    known.holds.insert((show, hold), false);
                    known.payments.insert((show, reply.payment_id), reply.amount_minor);
                    let payment = PaymentId(reply.payment_id);
                    Observed::CheckoutStarted { hold: HoldId(hold), payment }
                })
            }
            Mutation::JoinQueue { show } => {
                client.join_queue(token, show, key_ref).await.map(|reply| {
                    known.tickets.insert((show, reply.ticket_id), reply.state == "granted");
                    Observed::Queued { ticket: TicketId(reply.ticket_id) }
                })
            }
            Mutation::LeaveQueue { show, ticket } => {
                let answer = client.leave_queue(token, show, ticket, key_ref).await;
                if matches!(&answer, Ok(_) | Err(Error::Rejected { .. })) {
                    known.tickets.remove(&(show, ticket));
                    known.past_tickets.insert((show, ticket), ());
                }
                answer.map(|_| Observed::Done)
            }
            Mutation::JoinWaitlist { show } => {
                client.join_waitlist(token, show, 1, key_ref).await.map(|reply| {
                    known.entries.insert((show, reply.entry_id), None);
                    Observed::WaitlistJoined { entry: EntryId(reply.entry_id) }
                })
            }
            Mutation::AcceptOffer { show, offer } => {
                client.accept_offer(token, show, offer, key_ref).await.map(|reply| {
                    known.holds.insert((show, reply.hold_id), true);
                    known.offers.insert((show, offer), ());
                    known.entries.retain(|k, o| !(k.0 == show && *o == Some(offer)));
                    Observed::Held { hold: HoldId(reply.hold_id), seats: reply.seats }
                })
            }
            Mutation::DeclineOffer { show, offer } => {
                client.decline_offer(token, show, offer, key_ref).await.map(|_| {
                    known.offers.insert((show, offer), ());
                    known.entries.retain(|k, o| !(k.0 == show && *o == Some(offer)));
                    Observed::Done
                })
            }
        };
        let unknown = match answer {
            Ok(value) => {
                self.recorder.ok(pending, value);
                false
            }
            Err(error) => complete_error(&self.recorder, pending, &error, true),
        };
        if unknown {
            self.unresolved.push((mutation, key));
        }
    }

    /// A linearizable read through the SDK.
    async fn read(&mut self, what: Read) {
        let pending = self.recorder.invoke(self.id, Call::Read(what.clone()));
        let (client, token) = (self.client.clone(), self.token.clone());
        let token = token.as_str();
        let entity = |state: &str, seats: Vec<u32>, offer: Option<OfferId>| {
            StateName::from_wire(state)
                .map(|state| Observed::Entity { state, seats, offer })
                .unwrap_or_else(|| Observed::rejected(format!("unknown_state:{state}")))
        };
        let known = &mut self.known;
        let answer: Result<Observed, Error> = match what {
            Read::SeatMap { show } => client
                .get_seat_map_linearizable(show.0)
                .await
                .map(|map| Observed::Seats { seats: map.seats().map(seat_status).collect() }),
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
                    if let Some(granted) = known.tickets.get_mut(&(show.0, ticket.0)) {
                        *granted = reply.state == "granted";
                    }
                    entity(&reply.state, Vec::new(), None)
                })
            }
            Read::Entry { show, entry, .. } => {
                client.get_waitlist_entry(token, show.0, entry.0).await.map(|reply| {
                    let offer =
                        reply.offer.as_ref().map(|offer| offer.offer_id).filter(|id| *id != 0);
                    if reply.state == "offered"
                        && let Some(known) = known.entries.get_mut(&(show.0, entry.0))
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
            Ok(value) => self.recorder.ok(pending, value),
            Err(error) => {
                complete_error(&self.recorder, pending, &error, false);
            }
        }
    }

    /// The simulated payment provider pays or declines one of the process's checkouts with a
    /// signed webhook, to one node after another until one answers for certain.
    async fn pay(&mut self, show: u64) {
        let unpaid: Vec<(u64, u64)> = self
            .known
            .payments
            .iter()
            .filter(|(key, _)| key.0 == show && !self.known.paid.contains_key(key))
            .map(|(key, amount)| (key.1, *amount))
            .collect();
        let Some(&(payment, amount)) = unpaid.choose(&mut self.rng) else { return };
        let declined = self.rng.gen_bool(0.25);
        self.known.paid.insert((show, payment), ());
        let event_id = format!("sim-evt-{show}-{payment}");
        let result = if declined {
            PaymentResult::Declined
        } else {
            PaymentResult::Succeeded { amount_minor: amount, currency: Currency(*b"EUR") }
        };
        let call = Call::Write(Command::Payment(PaymentOutcome {
            show: ShowId(show),
            payment: PaymentId(payment),
            event: ProviderEventId(self.recorder.number(&event_id)),
            result,
        }));
        let mut body = serde_json::json!({
            "event_id": event_id,
            "payment_id": format!("{show}-{payment}"),
            "result": if declined { "declined" } else { "succeeded" },
        });
        if !declined {
            body["amount_minor"] = amount.into();
            body["currency"] = CURRENCY.into();
        }
        let bytes = serde_json::to_vec(&body).expect("JSON values encode");
        let pending = self.recorder.invoke(self.id, call);
        // As a provider does, the webhook is redelivered (to one node after another) until a
        // node answers for certain. Only the first delivery's answer is recorded as such: after a
        // delivery with an unknown outcome, a later one may be answered `duplicate`, which is
        // not what the payment's own application answered, so the operation stays unknown.
        let mut unknown: Option<String> = None;
        let first = self.rng.gen_range(1..=self.nodes);
        for attempt in 0..self.nodes * 2 {
            let node = 1 + (first - 1 + attempt) % self.nodes;
            let answer = match webhook(node, &bytes).await {
                Ok((status, reply)) if (200..300).contains(&status) => {
                    let effect = reply["effect"].as_str().unwrap_or("?").to_owned();
                    let booking = reply["booking_id"]
                        .as_str()
                        .and_then(|id| id.rsplit('-').next())
                        .and_then(|id| id.parse().ok())
                        .map(BookingId);
                    if let Some(booking) = booking {
                        self.known.bookings.insert((show, booking.0), ());
                    }
                    let payment = PaymentId(payment);
                    Some(Observed::PaymentRecorded { payment, effect, booking })
                }
                Ok((status, reply)) if (400..500).contains(&status) && status != 429 => {
                    let code = reply["code"].as_str().unwrap_or("unknown").to_owned();
                    Some(Observed::rejected(code))
                }
                Ok((status, reply)) => {
                    unknown.get_or_insert(format!("HTTP {status}: {reply}"));
                    None
                }
                Err(error) => {
                    unknown.get_or_insert(error);
                    None
                }
            };
            match (answer, &unknown) {
                (Some(value), None) => return self.recorder.ok(pending, value),
                (Some(_), Some(first)) => {
                    return self.recorder.info(pending, format!("webhook: {first}; redelivered"));
                }
                (None, _) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let first = unknown.unwrap_or_default();
        self.recorder.info(pending, format!("webhook: {first}"));
    }

    /// After recovery: settles unknown outcomes, then reads back everything the process knows.
    pub async fn final_reads(&mut self) {
        for _ in 0..5 {
            let unresolved = std::mem::take(&mut self.unresolved);
            if unresolved.is_empty() {
                break;
            }
            for (mutation, key) in unresolved {
                self.mutate(mutation, Some(key)).await;
            }
        }
        let session = self.session;
        let known = &self.known;
        let mut reads: Vec<Read> = Vec::new();
        for &(show, hold) in known.holds.keys() {
            reads.push(Read::Hold { show: ShowId(show), session, hold: HoldId(hold) });
        }
        for &(show, booking) in known.bookings.keys() {
            reads.push(Read::Booking { show: ShowId(show), session, booking: BookingId(booking) });
        }
        for &(show, ticket) in known.tickets.keys().chain(known.past_tickets.keys()) {
            reads.push(Read::Ticket { show: ShowId(show), session, ticket: TicketId(ticket) });
        }
        for &(show, entry) in known.entries.keys() {
            reads.push(Read::Entry { show: ShowId(show), session, entry: EntryId(entry) });
        }
        for &(show, offer) in known.offers.keys() {
            reads.push(Read::Offer { show: ShowId(show), session, offer: OfferId(offer) });
        }
        if self.id == 0 {
            reads.extend(self.shows.iter().map(|show| Read::SeatMap { show: ShowId(show.show) }));
        }
        for what in reads {
            self.read(what).await;
        }
    }

    /// Mutations whose outcome is still unknown.
    pub fn unresolved(&self) -> usize {
        self.unresolved.len()
    }
}

/// Records an SDK error: a business rejection is an answer (`ok`); anything the state machine
/// never saw is `fail`; an unknown outcome of a write is `info`. Returns whether it was `info`.
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

fn seat_status(status: WireSeatStatus) -> SeatStatus {
    match status {
        WireSeatStatus::Held => SeatStatus::Held,
        WireSeatStatus::Booked => SeatStatus::Booked,
        WireSeatStatus::Reserved => SeatStatus::Reserved,
        _ => SeatStatus::Free,
    }
}

/// Posts a signed payment webhook to node `node` over the simulated network (HTTP/1.1 on the
/// node's one port); returns the status and the JSON body.
async fn webhook(node: u64, body: &[u8]) -> Result<(u16, serde_json::Value), String> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    let signature: String =
        mac.finalize().into_bytes().iter().map(|byte| format!("{byte:02x}")).collect();
    let exchange = async {
        let stream = turmoil::net::TcpStream::connect((net::host(node), net::PORT))
            .await
            .map_err(|error| format!("connect: {error}"))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|error| format!("handshake: {error}"))?;
        tokio::spawn(connection);
        let request = hyper::Request::post("/v1/payments/webhook")
            .header("host", net::address(node))
            .header("content-type", "application/json")
            .header("x-booking-signature", format!("sha256={signature}"))
            .body(http_body_util::Full::new(hyper::body::Bytes::copy_from_slice(body)))
            .map_err(|error| error.to_string())?;
        let response = sender.send_request(request).await.map_err(|error| error.to_string())?;
        let status = response.status().as_u16();
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .map_err(|error| error.to_string())?
            .to_bytes();
        Ok((status, serde_json::from_slice(&bytes).unwrap_or_default()))
    };
    match tokio::time::timeout(Duration::from_secs(10), exchange).await {
        Ok(answer) => answer,
        Err(_elapsed) => Err("no answer within 10 s".into()),
    }
}
