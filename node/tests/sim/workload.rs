//! Simulated clients: buyers that drive the cluster through the real SDK over the simulated
//! network, and record every operation in a history the shared checkers judge.
//!
//! Owns the shows of a run (one per kind of traffic: racing multi-seat holds with checkouts and
//! payments, the admission lane, the waitlist of a sold-out show and of one whose offers expire
//! within seconds, single-seat holds against linearizable seat maps, and, with the provider
//! host, checkouts that the leaders' payment workers charge), each process's choices drawn from the seed, its SDK client over the
//! simulated network, and how a buyer-made payment webhook reaches a node (over simulated
//! TCP, redelivered until a node answers for certain). The SDK calls themselves, what a process
//! knows, the retries of unknown outcomes with the same key, and how an answer becomes a history
//! completion are the kit's ([`testkit::workload::Buyer`]), shared with the Jepsen suite. Never
//! judges: the checks do.
//!
//! Every deadline of a show is an hour, beyond any run, because the model has no clock, but
//! those of the dated shows ([`Kind::Deadlines`], [`Kind::Grants`], [`Kind::Offers`]): their
//! holds expire in 1.5 s and their payments in 1 s, the grants show's grants in 1.5 s and its
//! tickets after 4 s of waiting, the offers show's offers in 1.5 s, and the deadline checks
//! judge them by the log times their answers and audit trails carry.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use client::{Client, Error, NewShow};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use statemachine::check::history::Read;
use statemachine::check::recorder::Recorder;
use statemachine::check::workload::{Mutation, SHORT_ADMISSION_WINDOW};
use statemachine::{Command, HoldId, ShowId};
use testkit::webhook::{SIGNATURE_HEADER, sign};
use testkit::workload::{Buyer, TestShow};
use tokio::sync::watch;

use crate::net::{self, TurmoilNet};
use crate::world::{OPERATOR_TOKEN, WEBHOOK_SECRET, wall_clock_ms};

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
    /// Holds of 1-2 seats, checkouts, payments and reads of a show whose hold and payment
    /// deadlines are shorter than a buyer's pace, so that expiry races them all: judged by the
    /// deadline checks over log time, not by the model (which has no clock).
    Deadlines,
    /// As [`Kind::Deadlines`], on a show whose admission lane is on (a window of two) with
    /// grants and waiting limits as short: joins, holds with grants, leaves, ticket reads race
    /// the lane's deadlines, judged by the deadline checks' grant rules.
    Grants,
    /// Holds and cancels of a tiny show whose waitlist is on, with hold and offer deadlines
    /// as short: the seats of expired holds go to waiters, whose accepts, declines and reads race
    /// their offers' deadlines, judged by the deadline checks' offer rules.
    Offers,
    /// Holds, checkouts the cluster's payment workers charge through the provider host,
    /// cancelled bookings its refund workers refund, reads: judged against the provider's
    /// ledger, not by the model (which sees no payment outcome in the history).
    Payments,
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
    /// The show as the kit creates it and sets the model up.
    fn spec(&self) -> TestShow {
        TestShow {
            show: self.show,
            seats: self.seats,
            admission_window: self.admission_window(),
            waitlist: matches!(self.kind, Kind::Waitlist | Kind::Offers),
            short_deadlines: self.is_dated(),
        }
    }

    /// Its admission window, if its lane is on.
    pub fn admission_window(&self) -> Option<u32> {
        match self.kind {
            Kind::Admission => Some(2),
            Kind::Grants => Some(SHORT_ADMISSION_WINDOW),
            _ => None,
        }
    }

    /// Whether its deadlines are short: judged by the deadline checks, not the model.
    pub fn is_dated(&self) -> bool {
        matches!(self.kind, Kind::Deadlines | Kind::Grants | Kind::Offers)
    }

    /// The SDK request creating the show, on sale at once.
    pub fn new_show(&self) -> NewShow {
        self.spec().new_show()
    }

    /// The commands that set the model up as the cluster creates the show.
    pub fn model_setup(&self) -> Vec<Command> {
        self.spec().model_setup()
    }
}

/// The show whose payments the provider makes, in a run with one.
pub const PAYMENTS_SHOW: u64 = 1;
/// The show whose deadlines race its buyers.
pub const DEADLINES_SHOW: u64 = 5;
/// The show whose lane's deadlines race its buyers too.
pub const GRANTS_SHOW: u64 = 6;
/// The show whose waitlist's offers race their deadlines.
pub const OFFERS_SHOW: u64 = 7;
/// With a provider: the shows whose checkouts the leaders' payment workers charge, judged by
/// the ledger checker (the dated shows' buyers then send no webhooks either).
pub const LEDGER_SHOWS: [u64; 3] = [PAYMENTS_SHOW, DEADLINES_SHOW, GRANTS_SHOW];

/// The shows of a run: each kind of traffic once, spread over the data groups by id. With a
/// provider, the first show's checkouts are paid by the cluster's own workers through it
/// ([`Kind::Payments`]); without, by the buyers' webhooks ([`Kind::Holds`]).
pub fn shows(provider: bool) -> Vec<SimShow> {
    let first = if provider { Kind::Payments } else { Kind::Holds };
    vec![
        SimShow { show: PAYMENTS_SHOW, kind: first, seats: 8 },
        SimShow { show: 2, kind: Kind::Admission, seats: 12 },
        SimShow { show: 3, kind: Kind::Waitlist, seats: 3 },
        SimShow { show: 4, kind: Kind::Register, seats: 3 },
        SimShow { show: DEADLINES_SHOW, kind: Kind::Deadlines, seats: 4 },
        SimShow { show: GRANTS_SHOW, kind: Kind::Grants, seats: 4 },
        SimShow { show: OFFERS_SHOW, kind: Kind::Offers, seats: 3 },
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
        // The simulated network's connector makes the connections.
        local_address: None,
    };
    // Keys the SDK makes itself (membership calls) must not come from the OS either. Each
    // client gets a number of its own (a run is one process, and makes its clients in a
    // deterministic order).
    static CLIENTS: AtomicU64 = AtomicU64::new(0);
    let client = CLIENTS.fetch_add(1, Ordering::Relaxed);
    let next = AtomicU64::new(0);
    let keys = move || format!("sim-sdk-{client}-{}", next.fetch_add(1, Ordering::Relaxed));
    Client::with_connector(addresses, config, Arc::new(TurmoilNet))
        .and_then(|client| client.with_operator_token(OPERATOR_TOKEN))
        .expect("valid addresses")
        .with_key_source(Arc::new(keys))
}

/// One client process: the kit's buyer on its own SDK client, and its own choices.
pub struct Process {
    buyer: Buyer,
    rng: StdRng,
    shows: Vec<SimShow>,
    nodes: u64,
    /// Whether the provider host runs (its payments are then the leaders' workers' to make).
    provider: bool,
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
        provider: bool,
    ) -> Result<Process, Error> {
        let client = sdk(1 + id % nodes, nodes);
        let buyer = Buyer::start(id, client, recorder, price_version, "sim").await?;
        Ok(Process {
            buyer,
            rng: StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(id)),
            shows: shows(provider),
            nodes,
            provider,
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
        if let Some((mutation, key)) = self.buyer.take_unresolved() {
            self.buyer.mutate(mutation, key).await;
            return;
        }
        let show = self.shows.choose(&mut self.rng).cloned().expect("shows");
        let (id, seats) = (show.show, show.seats);
        let roll: u32 = self.rng.gen_range(0..100);
        match show.kind {
            Kind::Register => {
                if self.buyer.id() % 2 == 1 || roll < 30 {
                    self.buyer.read(Read::SeatMap { show: ShowId(id) }).await;
                } else if let Some(hold) = self.buyer.known().live_hold(id, &mut self.rng)
                    && roll < 65
                {
                    self.buyer.mutate_fresh(Mutation::CancelHold { show: id, hold }).await;
                } else {
                    let seat = self.rng.gen_range(0..seats);
                    self.buyer
                        .mutate_fresh(Mutation::Hold { show: id, seats: vec![seat], grant: None })
                        .await;
                }
            }
            Kind::Holds => {
                if roll < 40 {
                    let count = self.rng.gen_range(1..=4).min(seats);
                    let start = self.rng.gen_range(0..=seats - count);
                    let wanted = (start..start + count).collect();
                    self.buyer
                        .mutate_fresh(Mutation::Hold { show: id, seats: wanted, grant: None })
                        .await;
                } else if roll < 55 {
                    if let Some(hold) = self.buyer.known().live_hold(id, &mut self.rng) {
                        self.buyer.mutate_fresh(Mutation::CancelHold { show: id, hold }).await;
                    }
                } else if roll < 65 {
                    if let Some(hold) = self.buyer.known().live_hold(id, &mut self.rng) {
                        self.buyer.mutate_fresh(Mutation::Checkout { show: id, hold }).await;
                    }
                } else if roll < 75 {
                    self.pay(id).await;
                } else if roll < 87 {
                    if let Some(hold) = self.buyer.known().any_hold(id, &mut self.rng) {
                        let session = self.buyer.session();
                        self.buyer
                            .read(Read::Hold { show: ShowId(id), session, hold: HoldId(hold) })
                            .await;
                    }
                } else {
                    self.buyer.read(Read::SeatMap { show: ShowId(id) }).await;
                }
            }
            Kind::Deadlines | Kind::Grants => {
                let pay = if show.kind == Kind::Grants {
                    self.buyer.grants_step(id, seats, roll, &mut self.rng).await
                } else {
                    self.buyer.deadlines_step(id, seats, roll, &mut self.rng).await
                };
                // With the provider host, the leaders' payment workers pay every checkout.
                if pay && !self.provider {
                    self.pay(id).await;
                }
            }
            Kind::Payments => self.buyer.payments_step(id, seats, roll, &mut self.rng).await,
            Kind::Admission => self.buyer.admission_step(id, seats, roll, &mut self.rng).await,
            Kind::Waitlist => self.buyer.waitlist_step(id, seats, roll, &mut self.rng).await,
            Kind::Offers => self.buyer.offers_step(id, seats, roll, &mut self.rng).await,
        }
    }

    /// The simulated payment provider pays or declines one of the process's checkouts with a
    /// signed webhook, to one node after another until one answers for certain. Each delivery
    /// is signed when it is sent, by simulated time (never the real time, which would make the
    /// nodes refuse it and a replay differ).
    async fn pay(&mut self, show: u64) {
        let Some(payment) = self.buyer.payment(show, &mut self.rng) else { return };
        // As a provider does, the webhook is redelivered (to one node after another) until a
        // node answers for certain. Only the first delivery's answer is recorded as such: after a
        // delivery with an unknown outcome, a later one may be answered `duplicate`, which is
        // not what the payment's own application answered, so the operation stays unknown.
        let mut unknown: Option<String> = None;
        let first = self.rng.gen_range(1..=self.nodes);
        for attempt in 0..self.nodes * 2 {
            let node = 1 + (first - 1 + attempt) % self.nodes;
            let signature = sign(WEBHOOK_SECRET, wall_clock_ms() / 1_000, &payment.body);
            let answer = match webhook(node, &payment.body, &signature).await {
                Ok((status, reply)) => {
                    let answer = self.buyer.payment_answer(&payment, status, &reply);
                    if answer.is_none() {
                        unknown.get_or_insert(format!("HTTP {status}: {reply}"));
                    }
                    answer
                }
                Err(error) => {
                    unknown.get_or_insert(error);
                    None
                }
            };
            match (answer, &unknown) {
                (Some(value), None) => return self.buyer.recorder().ok(payment.pending, value),
                (Some(_), Some(first)) => {
                    let why = format!("webhook: {first}; redelivered");
                    return self.buyer.recorder().info(payment.pending, why);
                }
                (None, _) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let first = unknown.unwrap_or_default();
        self.buyer.recorder().info(payment.pending, format!("webhook: {first}"));
    }

    /// After recovery: settles unknown outcomes, then reads back everything the process knows.
    pub async fn final_reads(&mut self) {
        let shows: Vec<u64> = self.shows.iter().map(|show| show.show).collect();
        self.buyer.read_back(&shows).await;
    }

    /// Mutations whose outcome is still unknown.
    pub fn unresolved(&self) -> usize {
        self.buyer.unresolved()
    }

    /// The buyer, for the ledger's reads.
    pub fn buyer(&self) -> &Buyer {
        &self.buyer
    }
}

/// Posts a payment webhook signed `signature` to node `node` over the simulated network
/// (HTTP/1.1 on the node's one port); returns the status and the JSON body.
async fn webhook(
    node: u64,
    body: &[u8],
    signature: &str,
) -> Result<(u16, serde_json::Value), String> {
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
            .header(SIGNATURE_HEADER, signature)
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
