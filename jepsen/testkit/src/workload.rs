//! The SDK-calling half of a client process, shared by the Jepsen workloads and the simulator's
//! buyers: a [`Buyer`] runs each mutation and read of `statemachine::check` through the real
//! SDK and records it in the history, remembers what it learned of its own entities
//! ([`Known`]), retries an unknown outcome with the same key until it is settled (as a real
//! client does), and reads everything back after recovery. Also the shows' wire form
//! ([`TestShow`], [`wire_policy`]) and the payment provider's half of a webhook.
//!
//! How an SDK answer becomes a completion ([`complete_error`]): an answer, a business
//! rejection included, is `ok`; a refusal before proposing is `fail`; an unknown outcome of a
//! write is `info`. Owns the operations both suites draw alike on a show with its admission lane
//! or its waitlist on ([`Buyer::admission_step`], [`Buyer::waitlist_step`]); the mix of holds,
//! checkouts and reads, and the order of the draws, stay each suite's own (the simulator's seeds
//! must replay as they always have). Owns no way of delivering a webhook (each suite has its own
//! network); never judges: the checkers do.
//!
//! Every show is created with deadlines of an hour, beyond any run, because the model has no
//! clock (see `statemachine::check::model`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use client::{
    Client, Error, HoldReply, NewShow, SeatStatus as WireSeatStatus, ShowPolicy as WirePolicy,
    TicketReply,
};
use rand::Rng;
use rand::seq::SliceRandom;
use statemachine::check::deadlines::{Step, Trails};
use statemachine::check::history::{Call, Clock, History, Observed, Read};
use statemachine::check::recorder::{Pending, Recorder};
use statemachine::check::workload::{
    CURRENCY, Mutation, PRICE_MINOR, is_refusal, short_deadline_policy, show_setup, test_policy,
};
use statemachine::{
    BookingId, ClientRequest, Command, Currency, EntryId, HoldId, OfferId, PaymentId,
    PaymentOutcome, PaymentResult, ProviderEventId, SeatStatus, SessionId, ShowId, ShowPolicy,
    StateName, TicketId,
};

/// How many rounds of retries [`Buyer::read_back`] gives the unknown outcomes before it reads
/// (the cluster has recovered by then).
const SETTLE_ROUNDS: usize = 5;

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
    /// Whether its holds and payments have the short deadlines of
    /// [`short_deadline_policy`] (the deadline checks judge it, not the model).
    pub short_deadlines: bool,
}

impl TestShow {
    /// The SDK request creating the show with the model's policy, on sale at once.
    pub fn new_show(&self) -> NewShow {
        let policy = if self.short_deadlines { short_deadline_policy() } else { test_policy() };
        let mut show = NewShow::uniform(self.show, self.seats, PRICE_MINOR, CURRENCY);
        show.hold_ttl_ms = policy.hold_ttl_ms;
        show.policy = wire_policy(&policy);
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

/// The state machine's show policy as the SDK sends it. Every field is named, so that a new
/// policy field cannot be forgotten here: the tests would create shows the model does not
/// describe.
pub fn wire_policy(policy: &ShowPolicy) -> WirePolicy {
    let &ShowPolicy {
        hold_ttl_ms,
        payment_grace_ms,
        grant_ttl_ms,
        ticket_wait_ms,
        offer_ttl_ms,
        idempotency_retention_ms,
        holds_per_session_max,
        booking_cancel_allowed,
    } = policy;
    WirePolicy {
        booking_cancel_allowed: Some(booking_cancel_allowed),
        hold_ttl_ms,
        payment_grace_ms,
        grant_ttl_ms,
        ticket_wait_ms,
        offer_ttl_ms,
        idempotency_retention_ms,
        holds_per_session_max,
    }
}

/// A seat's status on the wire as the model names it.
pub fn seat_status(status: WireSeatStatus) -> SeatStatus {
    match status {
        WireSeatStatus::Held => SeatStatus::Held,
        WireSeatStatus::Booked => SeatStatus::Booked,
        WireSeatStatus::Reserved => SeatStatus::Reserved,
        _ => SeatStatus::Free,
    }
}

/// What a hold answer (a write's or a read's) says of time: its `as_of`, its deadline while it
/// is live, and its state.
pub fn hold_clock(reply: &HoldReply) -> Clock {
    let state = StateName::from_wire(&reply.state);
    let live = matches!(state, Some(StateName::Held | StateName::Processing));
    Clock {
        log_index: reply.as_of_log_index,
        log_time_ms: reply.as_of_log_time_ms,
        deadline_ms: live.then_some(reply.deadline_ms),
        state,
    }
}

/// What a ticket answer (a join's, a leave's or a read's) says of time: its `as_of`, its grant's
/// deadline while granted, and its state.
pub fn ticket_clock(reply: &TicketReply) -> Clock {
    let state = StateName::from_wire(&reply.state);
    Clock {
        log_index: reply.as_of_log_index,
        log_time_ms: reply.as_of_log_time_ms,
        deadline_ms: (state == Some(StateName::Granted)).then_some(reply.grant_deadline_ms),
        state,
    }
}

/// What an entry or offer read says of time (`as_of`: its log index and log time): its state,
/// and the offer's deadline while the entry is offered or the offer open.
fn waitlist_clock(state: &str, offer_deadline_ms: Option<u64>, as_of: (u64, u64)) -> Clock {
    let state = StateName::from_wire(state);
    let live = matches!(state, Some(StateName::Offered | StateName::Open));
    Clock {
        log_index: as_of.0,
        log_time_ms: as_of.1,
        deadline_ms: offer_deadline_ms.filter(|_| live),
        state,
    }
}

/// How far past the largest id an answer named [`audit_trails`] looks for holds and tickets: a
/// hold or a join whose answer was lost to a fault still made one (its retry with the same key
/// finds it, but the ids after it may have gone to writes nobody heard back from).
const PROBE_AHEAD: u64 = 16;

/// The audit trails of `show` that the deadline checks (`statemachine::check::deadlines`)
/// judge the answers in `history` against, read through `operator` (a client with the
/// operator token) until `deadline`: every hold; when the history joined the show's admission
/// lane, every ticket; and when it asked to join the show's waitlist, every entry and offer.
/// Each id up to a little past the largest any answer named is
/// tried, not only the ids answers named: a hold whose answer was lost still holds its seats
/// (the seat-map check must know it; simulator seed 9189), and the grant and offer checks must
/// see the whole line.
///
/// # Errors
///
/// A trail that could not be read by `deadline`, or one naming a state the checks do not know.
pub async fn audit_trails(
    operator: &Client,
    show: u64,
    history: &History,
    deadline: tokio::time::Instant,
) -> Result<Trails, String> {
    let answers = || {
        history
            .events
            .iter()
            .filter(|event| event.call.show() == Some(ShowId(show)))
            .filter_map(|event| event.value.as_ref().map(|value| (&event.call, value)))
    };
    let joined = answers().any(|(_, value)| matches!(value, Observed::Queued { .. }));
    // Asked, not answered: a join whose answer was lost still puts its waiter in line.
    let waitlisted = history.events.iter().any(|event| match &event.call {
        Call::Write(Command::Client(client)) => {
            client.show == ShowId(show)
                && matches!(client.request, ClientRequest::JoinWaitlist { .. })
        }
        _ => false,
    });
    let largest = answers()
        .filter_map(|(_, value)| match value {
            Observed::Held { hold, .. } => Some(hold.0),
            Observed::Queued { ticket } => Some(ticket.0),
            Observed::CheckoutStarted { payment, .. } => Some(payment.0),
            Observed::WaitlistJoined { entry } => Some(entry.0),
            Observed::Entity { offer: Some(offer), .. } => Some(offer.0),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let mut trails = Trails::default();
    // Each read is linearizable on its own, and the sweeps go on: up to the earliest read's
    // position, every trail is whole.
    let mut complete_to = u64::MAX;
    for id in 1..=largest + PROBE_AHEAD {
        if let Some((steps, as_of)) = audit_trail(operator, show, HOLD, id, deadline).await? {
            trails.holds.insert(HoldId(id), steps);
            complete_to = complete_to.min(as_of);
            continue;
        }
        if joined
            && let Some((steps, as_of)) = audit_trail(operator, show, TICKET, id, deadline).await?
        {
            trails.tickets.insert(TicketId(id), steps);
            complete_to = complete_to.min(as_of);
            continue;
        }
        if !waitlisted {
            continue;
        }
        if let Some((steps, as_of)) = audit_trail(operator, show, ENTRY, id, deadline).await? {
            trails.entries.insert(EntryId(id), steps);
            complete_to = complete_to.min(as_of);
        } else if let Some((steps, as_of)) =
            audit_trail(operator, show, OFFER, id, deadline).await?
        {
            trails.offers.insert(OfferId(id), steps);
            complete_to = complete_to.min(as_of);
        }
    }
    trails.complete_to = (complete_to != u64::MAX).then_some(complete_to);
    Ok(trails)
}

/// An audited kind: its name in an audit request, and the code of the rejection that says the
/// show has no such entity.
type Audited = (&'static str, &'static str);
const HOLD: Audited = ("hold", "hold_not_found");
const TICKET: Audited = ("ticket", "ticket_not_found");
const ENTRY: Audited = ("waitlist_entry", "entry_not_found");
const OFFER: Audited = ("offer", "offer_not_found");

/// One entity's audit trail, retried until `deadline`, with the log index it was read at; `None`
/// when the show has no such entity (`ticket_not_found`, ...: the id is another kind's, or no
/// one's).
async fn audit_trail(
    operator: &Client,
    show: u64,
    (kind, missing): Audited,
    id: u64,
    deadline: tokio::time::Instant,
) -> Result<Option<(Vec<Step>, u64)>, String> {
    let reply = loop {
        match operator.get_audit(show, kind, id).await {
            Ok(reply) => break reply,
            Err(Error::Rejected { code_name, .. }) if code_name == missing => {
                return Ok(None);
            }
            Err(error) if tokio::time::Instant::now() > deadline => {
                return Err(format!("deadlines: the audit of {kind} {id}: {error}"));
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    };
    let state = |name: &str| {
        StateName::from_wire(name)
            .ok_or_else(|| format!("deadlines: {kind} {id}'s audit names {name:?}"))
    };
    let mut steps = Vec::new();
    for record in reply.records {
        let from = if record.from.is_empty() { None } else { Some(state(&record.from)?) };
        let (log_index, log_time_ms) = (record.log_index, record.log_time_ms);
        let (to, reason) = (state(&record.to)?, record.reason);
        steps.push(Step { from, to, reason, log_index, log_time_ms });
    }
    Ok(Some((steps, reply.as_of_log_index)))
}

/// Records an SDK error: a business rejection is an answer (`ok`); anything the state machine
/// never saw is `fail`; an unknown outcome of a write is `info`. Returns whether the outcome is
/// unknown (recorded as `info`).
pub fn complete_error(recorder: &Recorder, pending: Pending, error: &Error, write: bool) -> bool {
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

/// What one client process knows of its own entities, for its next choices and the final
/// reads. Keys are `(show, entity)`.
#[derive(Debug, Default)]
pub struct Known {
    /// Holds, and whether each may still be live.
    pub holds: BTreeMap<(u64, u64), bool>,
    /// Checkouts: payment → the amount to pay.
    pub payments: BTreeMap<(u64, u64), u64>,
    /// Payments already answered by the provider (not to pay twice with different outcomes).
    pub paid: BTreeSet<(u64, u64)>,
    /// Bookings the provider's answers (or reads of checked-out holds) named.
    pub bookings: BTreeSet<(u64, u64)>,
    /// Bookings a cancel was sent for (whatever came of it).
    pub cancelled_bookings: BTreeSet<(u64, u64)>,
    /// Holds checked out: hold → its latest payment attempt.
    pub checkouts: BTreeMap<(u64, u64), u64>,
    /// Admission tickets, and whether each was last seen granted.
    pub tickets: BTreeMap<(u64, u64), bool>,
    /// Tickets used up (consumed by a hold, left, or no longer active): only read at the end.
    pub past_tickets: BTreeSet<(u64, u64)>,
    /// Waitlist entries, and their offer once seen.
    pub entries: BTreeMap<(u64, u64), Option<u64>>,
    /// Entries read as ended (their offer expired, or it ended otherwise) or whose offer was
    /// refused as no longer open: only read at the end.
    pub past_entries: BTreeSet<(u64, u64)>,
    /// Offers accepted or declined.
    pub offers: BTreeSet<(u64, u64)>,
}

impl Known {
    /// One of the holds of `show` that may still be live, chosen with `rng`.
    pub fn live_hold(&self, show: u64, rng: &mut impl Rng) -> Option<u64> {
        let live: Vec<u64> = self
            .holds
            .iter()
            .filter(|((s, _), live)| *s == show && **live)
            .map(|((_, hold), _)| *hold)
            .collect();
        live.choose(rng).copied()
    }

    /// Any hold of `show`, live or not, chosen with `rng`.
    pub fn any_hold(&self, show: u64, rng: &mut impl Rng) -> Option<u64> {
        let all: Vec<u64> =
            self.holds.keys().filter(|(s, _)| *s == show).map(|(_, hold)| *hold).collect();
        all.choose(rng).copied()
    }

    /// One of the checked-out holds of `show`, chosen with `rng`.
    pub fn checked_out_hold(&self, show: u64, rng: &mut impl Rng) -> Option<u64> {
        let holds: Vec<u64> =
            self.checkouts.keys().filter(|(s, _)| *s == show).map(|(_, hold)| *hold).collect();
        holds.choose(rng).copied()
    }

    /// One of the bookings of `show` not cancelled yet, chosen with `rng`.
    pub fn uncancelled_booking(&self, show: u64, rng: &mut impl Rng) -> Option<u64> {
        let bookings: Vec<u64> = self
            .bookings
            .iter()
            .filter(|key| key.0 == show && !self.cancelled_bookings.contains(key))
            .map(|(_, booking)| *booking)
            .collect();
        bookings.choose(rng).copied()
    }

    /// The newest ticket of `show`, and whether it was last seen granted.
    pub fn last_ticket(&self, show: u64) -> Option<(u64, bool)> {
        self.tickets.iter().rev().find(|(key, _)| key.0 == show).map(|(key, g)| (key.1, *g))
    }

    /// The newest waitlist entry of `show`, and its offer once seen.
    pub fn last_entry(&self, show: u64) -> Option<(u64, Option<u64>)> {
        self.entries.iter().rev().find(|(key, _)| key.0 == show).map(|(key, o)| (key.1, *o))
    }

    /// What an answer to accepting or declining `offer` of `show` (an `error`, or none) teaches:
    /// answered, the offer is to be read back at the end and its entry's turn is over; refused
    /// as expired or no longer open, the entry's turn is over too (read back at the end).
    fn offer_answered(&mut self, show: u64, offer: u64, error: Option<&Error>) {
        let over = match error {
            None => true,
            Some(Error::Rejected { code_name, .. }) => {
                matches!(code_name.as_str(), "offer_expired" | "offer_not_active")
            }
            Some(_) => false,
        };
        if !over {
            return;
        }
        if error.is_none() {
            self.offers.insert((show, offer));
        }
        let ended: Vec<(u64, u64)> = self
            .entries
            .iter()
            .filter(|(key, seen)| key.0 == show && **seen == Some(offer))
            .map(|(key, _)| *key)
            .collect();
        for key in ended {
            self.entries.remove(&key);
            if error.is_some() {
                self.past_entries.insert(key);
            }
        }
    }
}

/// A payment the provider is about to report, invoked in the history: the webhook's body to
/// deliver, and what [`Buyer::payment_answer`] needs to read the node's answer.
pub struct Payment {
    /// The history's pending operation.
    pub pending: Pending,
    /// The show.
    pub show: u64,
    /// The payment attempt.
    pub payment: u64,
    /// The webhook's JSON body, to be signed as it is sent.
    pub body: Vec<u8>,
}

/// The SDK-calling half of one client process: see the module docs.
pub struct Buyer {
    id: u64,
    client: Client,
    token: String,
    session: SessionId,
    known: Known,
    /// Names this suite's keys and provider events (`jepsen`, `sim`).
    prefix: &'static str,
    next_key: u64,
    /// Mutations whose outcome is unknown, to retry with their keys until it is known.
    unresolved: Vec<(Mutation, String)>,
    /// The last mutation and its key, for a deliberate idempotent retry.
    last: Option<(Mutation, String)>,
    recorder: Arc<Recorder>,
    /// The price version holds quote (the one the shows were created with).
    price_version: u32,
}

impl Buyer {
    /// Process `id` of the history, on `client`, with a fresh session; its keys and provider
    /// events are named after `prefix`.
    ///
    /// # Errors
    ///
    /// If no session could be created.
    pub async fn start(
        id: u64,
        client: Client,
        recorder: Arc<Recorder>,
        price_version: u32,
        prefix: &'static str,
    ) -> Result<Buyer, Error> {
        let token = client.create_session().await?;
        let session = SessionId(recorder.number(&token));
        Ok(Buyer {
            id,
            client,
            token,
            session,
            known: Known::default(),
            prefix,
            next_key: 0,
            unresolved: Vec::new(),
            last: None,
            recorder,
            price_version,
        })
    }

    /// Its process id in the history.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its session, as the model numbers it.
    pub fn session(&self) -> SessionId {
        self.session
    }

    /// Its SDK client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Its session token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// What it knows of its own entities.
    pub fn known(&self) -> &Known {
        &self.known
    }

    /// A fresh idempotency key of this process.
    pub fn new_key(&mut self) -> String {
        self.next_key += 1;
        format!("{}-p{}-k{}", self.prefix, self.id, self.next_key)
    }

    /// The oldest mutation whose outcome is still unknown, with its key, taken to be retried.
    pub fn take_unresolved(&mut self) -> Option<(Mutation, String)> {
        (!self.unresolved.is_empty()).then(|| self.unresolved.remove(0))
    }

    /// How many mutations have an outcome still unknown.
    pub fn unresolved(&self) -> usize {
        self.unresolved.len()
    }

    /// The last mutation run, with its key: sent again, it is a deliberate idempotent retry.
    pub fn last(&self) -> Option<(Mutation, String)> {
        self.last.clone()
    }

    /// One operation on `show`, a show of `seats` seats whose admission lane is on, drawn from
    /// `roll` (0..100) and `rng` as both suites draw it: join the lane while the process has no
    /// ticket; with one, read it (35%), hold a seat with its grant if granted (25%), leave
    /// (15%), else cancel a live hold or read the seat map.
    pub async fn admission_step(&mut self, show: u64, seats: u32, roll: u32, rng: &mut impl Rng) {
        let Some((ticket, granted)) = self.known.last_ticket(show) else {
            return self.mutate_fresh(Mutation::JoinQueue { show }).await;
        };
        if roll < 35 {
            let (show, session, ticket) = (ShowId(show), self.session, TicketId(ticket));
            self.read(Read::Ticket { show, session, ticket }).await;
        } else if roll < 60 && granted {
            let seat = rng.gen_range(0..seats);
            self.mutate_fresh(Mutation::Hold { show, seats: vec![seat], grant: Some(ticket) })
                .await;
        } else if roll < 75 {
            self.mutate_fresh(Mutation::LeaveQueue { show, ticket }).await;
        } else if let Some(hold) = self.known.live_hold(show, rng) {
            self.mutate_fresh(Mutation::CancelHold { show, hold }).await;
        } else {
            self.read(Read::SeatMap { show: ShowId(show) }).await;
        }
    }

    /// One operation on `show`, a small show of `seats` seats with its waitlist on, drawn from
    /// `roll` (0..100) and `rng` as both suites draw it: hold a seat (25%), cancel a live hold
    /// (15%); with a waitlist entry, accept or decline its offer (30%, if one was seen) or read
    /// the entry; without one, join the waitlist (30%) or read the seat map.
    pub async fn waitlist_step(&mut self, show: u64, seats: u32, roll: u32, rng: &mut impl Rng) {
        let entry = self.known.last_entry(show);
        if roll < 25 {
            let seat = rng.gen_range(0..seats);
            self.mutate_fresh(Mutation::Hold { show, seats: vec![seat], grant: None }).await;
        } else if roll < 40 {
            if let Some(hold) = self.known.live_hold(show, rng) {
                self.mutate_fresh(Mutation::CancelHold { show, hold }).await;
            }
        } else if let Some((entry, offer)) = entry {
            if let Some(offer) = offer
                && roll < 70
            {
                let mutation = if rng.gen_bool(0.5) {
                    Mutation::AcceptOffer { show, offer }
                } else {
                    Mutation::DeclineOffer { show, offer }
                };
                self.mutate_fresh(mutation).await;
            } else {
                let (show, session, entry) = (ShowId(show), self.session, EntryId(entry));
                self.read(Read::Entry { show, session, entry }).await;
            }
        } else if roll < 70 {
            self.mutate_fresh(Mutation::JoinWaitlist { show }).await;
        } else {
            self.read(Read::SeatMap { show: ShowId(show) }).await;
        }
    }

    /// One operation on `show` (of `seats` seats), a show with short deadlines whose waitlist
    /// is on, drawn from `roll` (0..100) and `rng` as both suites draw it: with an offer seen,
    /// accept it (60%) or decline it (15%); with an entry, read it (to 80%: it learns of its
    /// offer, or that its turn is over); without one, join the waitlist (40%); else hold a seat
    /// (to 85%), cancel a live hold (to 95%) or read an offer it answered. Holds and offers
    /// expire within seconds, so a freed seat goes to the next waiter while the waiters before
    /// it race their offers' deadlines.
    pub async fn offers_step(&mut self, show: u64, seats: u32, roll: u32, rng: &mut impl Rng) {
        match self.known.last_entry(show) {
            Some((_, Some(offer))) if roll < 75 => {
                let mutation = if roll < 60 {
                    Mutation::AcceptOffer { show, offer }
                } else {
                    Mutation::DeclineOffer { show, offer }
                };
                return self.mutate_fresh(mutation).await;
            }
            Some((entry, _)) if roll < 80 => {
                let (show, session, entry) = (ShowId(show), self.session, EntryId(entry));
                return self.read(Read::Entry { show, session, entry }).await;
            }
            None if roll < 40 => return self.mutate_fresh(Mutation::JoinWaitlist { show }).await,
            _ => {}
        }
        if roll < 85 {
            let seat = rng.gen_range(0..seats);
            self.mutate_fresh(Mutation::Hold { show, seats: vec![seat], grant: None }).await;
        } else if roll < 95 {
            if let Some(hold) = self.known.live_hold(show, rng) {
                self.mutate_fresh(Mutation::CancelHold { show, hold }).await;
            }
        } else {
            let answered: Vec<u64> =
                self.known.offers.iter().filter(|key| key.0 == show).map(|key| key.1).collect();
            if let Some(&offer) = answered.choose(rng) {
                let (show, session, offer) = (ShowId(show), self.session, OfferId(offer));
                self.read(Read::Offer { show, session, offer }).await;
            }
        }
    }

    /// The draw both [`Buyer::payments_step`] and [`Buyer::deadlines_step`] begin with: below 35,
    /// hold 1-2 adjacent seats of `show` (of `seats` seats); else check a live hold out.
    async fn hold_or_check_out(&mut self, show: u64, seats: u32, roll: u32, rng: &mut impl Rng) {
        if roll < 35 {
            let count = rng.gen_range(1..=2).min(seats);
            let start = rng.gen_range(0..=seats - count);
            let wanted = (start..start + count).collect();
            self.mutate_fresh(Mutation::Hold { show, seats: wanted, grant: None }).await;
        } else if let Some(hold) = self.known.live_hold(show, rng) {
            self.mutate_fresh(Mutation::Checkout { show, hold }).await;
        }
    }

    /// One operation on `show` (of `seats` seats) whose payments the cluster's own payment
    /// worker makes through a real provider, drawn from `roll` (0..100) and `rng` as both suites
    /// draw it: hold 1-2 seats (35%), check a live hold out (20%: nobody in the history pays),
    /// read a checked-out hold (20%: it learns the booking the hold became, or that a declined
    /// payment gave it back), cancel one of its bookings (10%: the refund worker gives the money
    /// back), cancel a live hold (7%), else read the seat map.
    pub async fn payments_step(&mut self, show: u64, seats: u32, roll: u32, rng: &mut impl Rng) {
        if roll < 55 {
            self.hold_or_check_out(show, seats, roll, rng).await;
        } else if roll < 75 {
            if let Some(hold) = self.known.checked_out_hold(show, rng) {
                self.read_checked_out_hold(show, hold).await;
            }
        } else if roll < 85 {
            if let Some(booking) = self.known.uncancelled_booking(show, rng) {
                self.mutate_fresh(Mutation::CancelBooking { show, booking }).await;
            }
        } else if roll < 92 {
            if let Some(hold) = self.known.live_hold(show, rng) {
                self.mutate_fresh(Mutation::CancelHold { show, hold }).await;
            }
        } else {
            self.read(Read::SeatMap { show: ShowId(show) }).await;
        }
    }

    /// One operation on `show` (of `seats` seats), a show with short deadlines, drawn from
    /// `roll` (0..100) and `rng` as both suites draw it: hold 1-2 seats (35%), check a live hold
    /// out (20%), pay one of its checkouts (20%: returns `true`, and the caller delivers the
    /// provider's webhook its own way, [`Buyer::payment`]; with the cluster's own payment
    /// workers, it does nothing), cancel a live hold (5%), read one of its holds (10%), else
    /// read the seat map. Its holds expire within seconds, so the checkouts, payments and
    /// cancels race their deadlines.
    pub async fn deadlines_step(
        &mut self,
        show: u64,
        seats: u32,
        roll: u32,
        rng: &mut impl Rng,
    ) -> bool {
        if roll < 55 {
            self.hold_or_check_out(show, seats, roll, rng).await;
        } else if roll < 75 {
            return true;
        } else {
            self.cancel_or_read(show, roll, (80, 90), rng).await;
        }
        false
    }

    /// The draw both [`Buyer::deadlines_step`] and [`Buyer::grants_step`] end with: below
    /// `cancel`, cancel a live hold of `show`; below `read`, read one of its holds; else read the
    /// seat map.
    async fn cancel_or_read(
        &mut self,
        show: u64,
        roll: u32,
        (cancel, read): (u32, u32),
        rng: &mut impl Rng,
    ) {
        if roll < cancel {
            if let Some(hold) = self.known.live_hold(show, rng) {
                self.mutate_fresh(Mutation::CancelHold { show, hold }).await;
            }
        } else if roll < read {
            if let Some(hold) = self.known.any_hold(show, rng) {
                let (show, session, hold) = (ShowId(show), self.session, HoldId(hold));
                self.read(Read::Hold { show, session, hold }).await;
            }
        } else {
            self.read(Read::SeatMap { show: ShowId(show) }).await;
        }
    }

    /// One operation on `show` (of `seats` seats), a show with short deadlines whose admission
    /// lane is on, drawn from `roll` (0..100) and `rng` as both suites draw it: join the lane
    /// while the process has no ticket; with one, read it (25%), hold 1-2 seats with its grant
    /// if last seen granted (25%, else check a live hold out), leave (5%), check a live hold out
    /// (10%), pay one of its checkouts (15%: returns `true`, as [`Buyer::deadlines_step`]),
    /// cancel a live hold (5%), read one of its holds (8%), else read the seat map. Grants
    /// expire within seconds and tickets wait a few seconds at most, so the holds, leaves and
    /// reads race the lane's deadlines as the checkouts and payments race the holds'.
    pub async fn grants_step(
        &mut self,
        show: u64,
        seats: u32,
        roll: u32,
        rng: &mut impl Rng,
    ) -> bool {
        let Some((ticket, granted)) = self.known.last_ticket(show) else {
            self.mutate_fresh(Mutation::JoinQueue { show }).await;
            return false;
        };
        if roll < 25 {
            let (show, session, ticket) = (ShowId(show), self.session, TicketId(ticket));
            self.read(Read::Ticket { show, session, ticket }).await;
        } else if roll < 50 && granted {
            let count = rng.gen_range(1..=2).min(seats);
            let start = rng.gen_range(0..=seats - count);
            let wanted = (start..start + count).collect();
            self.mutate_fresh(Mutation::Hold { show, seats: wanted, grant: Some(ticket) }).await;
        } else if (50..55).contains(&roll) {
            self.mutate_fresh(Mutation::LeaveQueue { show, ticket }).await;
        } else if roll < 65 {
            if let Some(hold) = self.known.live_hold(show, rng) {
                self.mutate_fresh(Mutation::Checkout { show, hold }).await;
            }
        } else if roll < 80 {
            return true;
        } else {
            self.cancel_or_read(show, roll, (85, 93), rng).await;
        }
        false
    }

    /// As [`Buyer::mutate`], under a fresh key.
    pub async fn mutate_fresh(&mut self, mutation: Mutation) {
        let key = self.new_key();
        self.mutate(mutation, key).await;
    }

    /// Runs `mutation` under idempotency key `key` (a fresh one, or an earlier one to retry)
    /// through the SDK and records it; an unknown outcome is kept to be retried with `key`.
    /// It becomes the [`Buyer::last`] mutation.
    pub async fn mutate(&mut self, mutation: Mutation, key: String) {
        let call = mutation.command(self.session, self.recorder.number(&key), self.price_version);
        let pending = self.recorder.invoke(self.id, Call::Write(call));
        self.last = Some((mutation.clone(), key.clone()));
        let (client, token) = (self.client.clone(), self.token.clone());
        let (token, key_ref, version) = (token.as_str(), Some(key.as_str()), self.price_version);
        let known = &mut self.known;
        // What a hold or ticket answer says of time (the other answers' clocks are not checked).
        let mut clock = None;
        let answer: Result<Observed, Error> = match mutation.clone() {
            Mutation::Hold { show, seats, grant } => {
                let answer = client
                    .hold_with_grant(token, show, &seats, version, grant.unwrap_or(0), key_ref)
                    .await;
                // Used, or lost (expired, left): the next step joins again.
                let spent = match &answer {
                    Ok(_) => true,
                    Err(Error::Rejected { code_name, .. }) => {
                        matches!(code_name.as_str(), "grant_expired" | "ticket_not_active")
                    }
                    Err(_) => false,
                };
                if let Some(ticket) = grant.filter(|_| spent) {
                    known.tickets.remove(&(show, ticket));
                    known.past_tickets.insert((show, ticket));
                }
                answer.map(|reply| {
                    clock = Some(hold_clock(&reply));
                    known.holds.insert((show, reply.hold_id), true);
                    Observed::Held { hold: HoldId(reply.hold_id), seats: reply.seats }
                })
            }
            Mutation::CancelHold { show, hold } => {
                client.cancel_hold(token, show, hold, key_ref).await.map(|reply| {
                    clock = Some(hold_clock(&reply));
                    known.holds.insert((show, hold), false);
                    Observed::Done
                })
            }
            Mutation::Checkout { show, hold } => {
                client.checkout(token, show, hold, key_ref).await.map(|reply| {
                    known.holds.insert((show, hold), false);
                    known.checkouts.insert((show, hold), reply.payment_id);
                    known.payments.insert((show, reply.payment_id), reply.amount_minor);
                    let payment = PaymentId(reply.payment_id);
                    Observed::CheckoutStarted { hold: HoldId(hold), payment }
                })
            }
            Mutation::CancelBooking { show, booking } => {
                // Sent: whatever comes of it, the booking is not to be cancelled again with a
                // fresh key (an unknown outcome is retried with this one).
                known.cancelled_bookings.insert((show, booking));
                client.cancel_booking(token, show, booking, key_ref).await.map(|_| Observed::Done)
            }
            Mutation::JoinQueue { show } => {
                client.join_queue(token, show, key_ref).await.map(|reply| {
                    clock = Some(ticket_clock(&reply));
                    known.tickets.insert((show, reply.ticket_id), reply.state == "granted");
                    Observed::Queued { ticket: TicketId(reply.ticket_id) }
                })
            }
            Mutation::LeaveQueue { show, ticket } => {
                let answer = client.leave_queue(token, show, ticket, key_ref).await;
                if matches!(&answer, Ok(_) | Err(Error::Rejected { .. })) {
                    // Left, or no longer active (consumed, left before): join again next time.
                    known.tickets.remove(&(show, ticket));
                    known.past_tickets.insert((show, ticket));
                }
                answer.map(|reply| {
                    clock = Some(ticket_clock(&reply));
                    Observed::Done
                })
            }
            Mutation::JoinWaitlist { show } => {
                client.join_waitlist(token, show, 1, key_ref).await.map(|reply| {
                    known.entries.insert((show, reply.entry_id), None);
                    Observed::WaitlistJoined { entry: EntryId(reply.entry_id) }
                })
            }
            Mutation::AcceptOffer { show, offer } => {
                let answer = client.accept_offer(token, show, offer, key_ref).await;
                known.offer_answered(show, offer, answer.as_ref().err());
                answer.map(|reply| {
                    clock = Some(hold_clock(&reply));
                    known.holds.insert((show, reply.hold_id), true);
                    Observed::Held { hold: HoldId(reply.hold_id), seats: reply.seats }
                })
            }
            Mutation::DeclineOffer { show, offer } => {
                let answer = client.decline_offer(token, show, offer, key_ref).await;
                known.offer_answered(show, offer, answer.as_ref().err());
                answer.map(|_| Observed::Done)
            }
        };
        let unknown = match answer {
            Ok(value) => {
                self.recorder.ok_at(pending, value, clock);
                false
            }
            Err(error) => complete_error(&self.recorder, pending, &error, true),
        };
        if unknown {
            // As a real client would: retry with the same key until the outcome is known.
            self.unresolved.push((mutation, key));
        }
    }

    /// A read through the SDK and its record: linearizable (hold, booking, ticket, entry and
    /// offer reads go to the leader with ReadIndex; the seat map asks for its linearizable
    /// variant).
    pub async fn read(&mut self, what: Read) {
        let pending = self.recorder.invoke(self.id, Call::Read(what.clone()));
        let (client, token) = (self.client.clone(), self.token.clone());
        let token = token.as_str();
        let entity = |state: &str, seats: Vec<u32>, offer: Option<OfferId>| {
            StateName::from_wire(state)
                .map(|state| Observed::Entity { state, seats, offer })
                .unwrap_or_else(|| Observed::rejected(format!("unknown_state:{state}")))
        };
        let known = &mut self.known;
        let mut clock = None;
        let answer: Result<Observed, Error> = match what {
            Read::SeatMap { show } => client.get_seat_map_linearizable(show.0).await.map(|map| {
                clock = Some(Clock {
                    log_index: map.as_of_log_index,
                    log_time_ms: map.as_of_log_time_ms,
                    deadline_ms: None,
                    state: None,
                });
                Observed::Seats { seats: map.seats().map(seat_status).collect() }
            }),
            Read::Hold { show, hold, .. } => {
                client.get_hold(token, show.0, hold.0).await.map(|reply| {
                    clock = Some(hold_clock(&reply));
                    entity(&reply.state, reply.seats, None)
                })
            }
            Read::Booking { show, booking, .. } => client
                .get_booking(token, show.0, booking.0)
                .await
                .map(|reply| entity(&reply.state, reply.seats, None)),
            Read::Ticket { show, ticket, .. } => {
                client.get_ticket(token, show.0, ticket.0).await.map(|reply| {
                    clock = Some(ticket_clock(&reply));
                    let key = (show.0, ticket.0);
                    if matches!(reply.state.as_str(), "waiting" | "granted") {
                        if let Some(granted) = known.tickets.get_mut(&key) {
                            *granted = reply.state == "granted";
                        }
                    } else if known.tickets.remove(&key).is_some() {
                        // Used, left or expired: the next step joins again.
                        known.past_tickets.insert(key);
                    }
                    entity(&reply.state, Vec::new(), None)
                })
            }
            Read::Entry { show, entry, .. } => {
                client.get_waitlist_entry(token, show.0, entry.0).await.map(|reply| {
                    let offered = reply.offer.as_ref().filter(|offer| offer.offer_id != 0);
                    let offer = offered.map(|offer| offer.offer_id);
                    let key = (show.0, entry.0);
                    if reply.state == "offered"
                        && let Some(known) = known.entries.get_mut(&key)
                    {
                        *known = offer;
                    } else if reply.state != "waiting" && known.entries.remove(&key).is_some() {
                        // Its turn is over (its offer expired, or ended otherwise): the next
                        // step joins again.
                        known.past_entries.insert(key);
                    }
                    let deadline_ms = offered.map(|offer| offer.deadline_ms);
                    let as_of = (reply.as_of_log_index, reply.as_of_log_time_ms);
                    clock = Some(waitlist_clock(&reply.state, deadline_ms, as_of));
                    entity(&reply.state, Vec::new(), offer.map(OfferId))
                })
            }
            Read::Offer { show, offer, .. } => {
                client.get_offer(token, show.0, offer.0).await.map(|reply| {
                    let as_of = (reply.as_of_log_index, reply.as_of_log_time_ms);
                    clock = Some(waitlist_clock(&reply.state, Some(reply.deadline_ms), as_of));
                    entity(&reply.state, reply.seats, None)
                })
            }
        };
        match answer {
            Ok(value) => self.recorder.ok_at(pending, value, clock),
            Err(error) => {
                complete_error(&self.recorder, pending, &error, false);
            }
        }
    }

    /// Reads one of its checked-out holds, `hold` of `show`, as [`Buyer::read`] does, and learns
    /// from the answer what the payment worker made of it: the booking it became (to be
    /// cancelled, and read back at the end), or that it is held again (its payment declined), so
    /// that it may be checked out again or cancelled.
    pub async fn read_checked_out_hold(&mut self, show: u64, hold: u64) {
        let what = Read::Hold { show: ShowId(show), session: self.session, hold: HoldId(hold) };
        let pending = self.recorder.invoke(self.id, Call::Read(what));
        match self.client.get_hold(&self.token, show, hold).await {
            Ok(reply) => {
                if reply.booking_id != 0 {
                    self.known.bookings.insert((show, reply.booking_id));
                }
                if reply.state == "held" {
                    self.known.holds.insert((show, hold), true);
                }
                let clock = hold_clock(&reply);
                let observed = StateName::from_wire(&reply.state)
                    .map(|state| Observed::Entity { state, seats: reply.seats, offer: None })
                    .unwrap_or_else(|| {
                        Observed::rejected(format!("unknown_state:{}", reply.state))
                    });
                self.recorder.ok_at(pending, observed, Some(clock));
            }
            Err(error) => {
                complete_error(&self.recorder, pending, &error, false);
            }
        }
    }

    /// After recovery: settles the unknown outcomes (a few rounds of retries with their keys),
    /// then reads back every entity the process knows of, and process 0 the seat map of each of
    /// `shows`.
    pub async fn read_back(&mut self, shows: &[u64]) {
        for _ in 0..SETTLE_ROUNDS {
            let unresolved = std::mem::take(&mut self.unresolved);
            if unresolved.is_empty() {
                break;
            }
            for (mutation, key) in unresolved {
                self.mutate(mutation, key).await;
            }
        }
        let session = self.session;
        let known = &self.known;
        let mut reads: Vec<Read> = Vec::new();
        for &(show, hold) in known.holds.keys() {
            reads.push(Read::Hold { show: ShowId(show), session, hold: HoldId(hold) });
        }
        for &(show, booking) in &known.bookings {
            reads.push(Read::Booking { show: ShowId(show), session, booking: BookingId(booking) });
        }
        for &(show, ticket) in known.tickets.keys().chain(&known.past_tickets) {
            reads.push(Read::Ticket { show: ShowId(show), session, ticket: TicketId(ticket) });
        }
        for &(show, entry) in known.entries.keys().chain(&known.past_entries) {
            reads.push(Read::Entry { show: ShowId(show), session, entry: EntryId(entry) });
        }
        for &(show, offer) in &known.offers {
            reads.push(Read::Offer { show: ShowId(show), session, offer: OfferId(offer) });
        }
        if self.id == 0 {
            reads.extend(shows.iter().map(|&show| Read::SeatMap { show: ShowId(show) }));
        }
        for what in reads {
            self.read(what).await;
        }
    }

    /// The provider's report of one of the process's unpaid checkouts of `show` (chosen with
    /// `rng`): paid, or declined one time in four. Invoked in the history as the payment
    /// outcome command the webhook proposes; the caller delivers [`Payment::body`] and reads the
    /// answer with [`Buyer::payment_answer`]. `None` when nothing of `show` is unpaid.
    pub fn payment(&mut self, show: u64, rng: &mut impl Rng) -> Option<Payment> {
        let unpaid: Vec<(u64, u64)> = self
            .known
            .payments
            .iter()
            .filter(|(key, _)| key.0 == show && !self.known.paid.contains(key))
            .map(|(key, amount)| (key.1, *amount))
            .collect();
        let &(payment, amount) = unpaid.choose(rng)?;
        let declined = rng.gen_bool(0.25);
        self.known.paid.insert((show, payment));
        let event_id = format!("{}-evt-{show}-{payment}", self.prefix);
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
            // The REST API names a payment `<show>-<payment>`, as it names every entity.
            "payment_id": format!("{show}-{payment}"),
            "result": if declined { "declined" } else { "succeeded" },
        });
        if !declined {
            body["amount_minor"] = amount.into();
            body["currency"] = CURRENCY.into();
        }
        let body = serde_json::to_vec(&body).expect("JSON values encode");
        let pending = self.recorder.invoke(self.id, call);
        Some(Payment { pending, show, payment, body })
    }

    /// What a node's answer to a payment webhook (its HTTP status and JSON body) says, for the
    /// history: the recorded effect on success (the booking it names is remembered), the code
    /// of a client error (429 aside), or `None` when the outcome is unknown.
    pub fn payment_answer(
        &mut self,
        payment: &Payment,
        status: u16,
        reply: &serde_json::Value,
    ) -> Option<Observed> {
        if (200..300).contains(&status) {
            let effect = reply["effect"].as_str().unwrap_or("?").to_owned();
            let booking = reply["booking_id"]
                .as_str()
                .and_then(|id| id.rsplit('-').next())
                .and_then(|id| id.parse().ok())
                .map(BookingId);
            if let Some(booking) = booking {
                self.known.bookings.insert((payment.show, booking.0));
            }
            let payment = PaymentId(payment.payment);
            Some(Observed::PaymentRecorded { payment, effect, booking })
        } else if (400..500).contains(&status) && status != 429 {
            let code = reply["code"].as_str().unwrap_or("unknown").to_owned();
            Some(Observed::rejected(code))
        } else {
            None
        }
    }

    /// The history the process records in.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use statemachine::check::history::EventKind;
    use tonic::Code;

    use super::*;

    #[test]
    fn the_wire_policy_carries_every_field_of_the_models() {
        let policy = test_policy();
        let wire = wire_policy(&policy);
        assert_eq!(wire.hold_ttl_ms, policy.hold_ttl_ms);
        assert_eq!(wire.payment_grace_ms, policy.payment_grace_ms);
        assert_eq!(wire.grant_ttl_ms, policy.grant_ttl_ms);
        assert_eq!(wire.ticket_wait_ms, policy.ticket_wait_ms);
        assert_eq!(wire.offer_ttl_ms, policy.offer_ttl_ms);
        assert_eq!(wire.idempotency_retention_ms, policy.idempotency_retention_ms);
        assert_eq!(wire.holds_per_session_max, policy.holds_per_session_max);
        assert_eq!(wire.booking_cancel_allowed, Some(policy.booking_cancel_allowed));
        let show = TestShow {
            show: 7,
            seats: 4,
            admission_window: Some(2),
            waitlist: true,
            short_deadlines: false,
        };
        let request = show.new_show();
        assert_eq!((request.show_id, request.admission_window), (7, Some(2)));
        assert!(request.waitlist && request.open_sales);
        assert_eq!(request.hold_ttl_ms, policy.hold_ttl_ms);
    }

    #[test]
    fn known_entities_are_found_per_show_and_the_newest_first() {
        let mut known = Known::default();
        known.holds.insert((1, 10), true);
        known.holds.insert((1, 11), false);
        known.holds.insert((2, 20), true);
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(known.live_hold(1, &mut rng), Some(10), "hold 11 is not live");
        assert_eq!(known.live_hold(3, &mut rng), None);
        assert!(matches!(known.any_hold(1, &mut rng), Some(10 | 11)));
        known.tickets.insert((1, 5), false);
        known.tickets.insert((1, 6), true);
        known.tickets.insert((2, 7), false);
        assert_eq!(known.last_ticket(1), Some((6, true)));
        known.entries.insert((2, 3), Some(9));
        assert_eq!(known.last_entry(2), Some((3, Some(9))));
        assert_eq!(known.last_entry(1), None);
    }

    /// How `error` completes an operation, and whether it is left unknown.
    fn completion_of(error: &Error, write: bool) -> (bool, EventKind) {
        let recorder = Recorder::new(Box::new(|| 0));
        let pending = recorder.invoke(0, Call::Read(Read::SeatMap { show: ShowId(1) }));
        let unknown = complete_error(&recorder, pending, error, write);
        let kind = recorder.history().events.last().map(|event| event.kind);
        (unknown, kind.expect("a completion"))
    }

    #[test]
    fn rejections_are_answers_refusals_fail_and_unknown_writes_are_info() {
        let rejected = Error::Rejected {
            status: Code::Aborted,
            code: client::ErrorCode::SeatUnavailable,
            code_name: "seat_unavailable".to_owned(),
            message: String::new(),
        };
        assert_eq!(completion_of(&rejected, true), (false, EventKind::Ok));
        let refused = Error::InvalidArgument("no seats".to_owned());
        assert_eq!(completion_of(&refused, true), (false, EventKind::Fail));
        let transport = Error::Transport {
            address: "127.0.0.1:1".to_owned(),
            status: Code::Unavailable,
            message: "connection reset".to_owned(),
        };
        // A write cut off in flight may have been applied; a read changes nothing.
        assert_eq!(completion_of(&transport, true), (true, EventKind::Info));
        assert_eq!(completion_of(&transport, false), (false, EventKind::Fail));
    }
}
