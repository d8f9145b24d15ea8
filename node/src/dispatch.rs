//! The outbox dispatcher: a leader-only worker that delivers every outbox event at least once,
//! in order per show, to each configured sink, and reports what it did as commands.
//!
//! Owns when and how often a sink is tried. One task per sink, so a slow or dead sink never
//! delays another: each has its own limit of requests in flight and of requests per second.
//! A sink's events are sent in batches of one show's events in log order, one batch per show
//! at a time, so a show's events arrive in order; different shows go in parallel. A batch that
//! fails is retried after a backoff that doubles (with jitter); after `attempts_max` failures,
//! or once its oldest event is older than `age_max` by this leader's clock, its events are
//! given up on and become dead letters, and the show's later events move on. What was delivered
//! or given up on is reported to the group (`DeliveryCommand::Report`, batched every period),
//! which remembers each sink's position and trims the outbox of what every sink is done with; a
//! new leader starts from that position, so an event is delivered again only if the old leader
//! delivered it but its report was not committed. Dead letters an operator asked to replay are
//! delivered again, out of order. Without sinks, the worker acknowledges the outbox instead, so
//! that events nobody consumes do not pile up (the group never trims what a tracked sink still
//! needs). Never decides anything about delivery state itself: the state machine does
//! (`statemachine::Delivery`), and a deposed leader's reports are fenced by term.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use raft::{GroupId, GroupReader, Proposer};
use statemachine::limits::DELIVERY_REPORT_EVENTS_MAX;
use statemachine::{
    Command, DeliveryCommand, Event, Failure, Group, OutboxEvent, OutboxId, Reply, ShowId, SinkName,
};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::sink::{Sink, WireEvent};

/// How the dispatcher treats its sinks (the same for every sink of a node).
#[derive(Clone, Debug)]
pub struct DispatchSettings {
    /// The sinks, in the order configured.
    pub sinks: Vec<Sink>,
    /// Failed attempts of a batch before its events are given up on.
    pub attempts_max: u32,
    /// Age (by log time against this leader's clock) past which a failing event is given up on.
    pub age_max: Duration,
    /// Requests in flight at once, per sink.
    pub concurrency: usize,
    /// Requests per second, per sink.
    pub rate_per_s: u32,
}

/// Events in one request to a sink.
pub const BATCH_EVENTS_MAX: usize = 64;
/// Events the dispatcher considers per look at the state (per sink): the oldest ones.
const WINDOW_EVENTS_MAX: usize = 8_192;
/// The first wait before a failed batch is tried again; it doubles per failure.
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two tries of one batch.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How often a leader without sinks acknowledges the outbox.
const ACK_PERIOD: Duration = Duration::from_secs(1);

/// Runs the dispatcher of `group` until aborted: a task per sink, or the acknowledging loop
/// when the node has no sinks.
pub async fn run(
    group: GroupId,
    proposer: Arc<Proposer>,
    reader: GroupReader,
    settings: Arc<DispatchSettings>,
    metrics: Metrics,
    period: Duration,
) {
    if settings.sinks.is_empty() {
        return acknowledge(group, &proposer, &reader).await;
    }
    let mut tasks = JoinSet::new();
    for sink in &settings.sinks {
        let worker = SinkWorker {
            group,
            proposer: proposer.clone(),
            reader: reader.clone(),
            sink: Arc::new(sink.clone()),
            settings: settings.clone(),
            metrics: metrics.clone(),
            period,
        };
        tasks.spawn(worker.run());
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(error) = done
            && error.is_panic()
        {
            std::panic::resume_unwind(error.into_panic());
        }
    }
}

/// Without sinks: every [`ACK_PERIOD`], acknowledges every event in the outbox.
async fn acknowledge(group: GroupId, proposer: &Proposer, reader: &GroupReader) {
    let mut interval = tokio::time::interval(ACK_PERIOD);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let last = match reader.read(|state| {
            let outbox = state.outbox();
            (!outbox.is_empty()).then(|| outbox.last_id())
        }) {
            Ok(last) => last,
            Err(error) => {
                tracing::error!(group, %error, "outbox acknowledger cannot read the state");
                return;
            }
        };
        let Some(up_to) = last else { continue };
        match proposer.propose(Command::AckOutbox { up_to }).await.map(|answer| answer.outcome) {
            Ok(Ok(_)) => {}
            Ok(Err(rejection)) => tracing::warn!(group, %rejection, "outbox ack refused"),
            // Also answered while a new leader's term is not yet committed: try again.
            Err(error) => tracing::debug!(group, %error, "outbox ack not committed"),
        }
    }
}

/// Which events a request carries: one show's, in order, or dead letters being replayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Lane {
    Show(ShowId),
    Replay,
}

/// What the dispatcher knows of a lane beyond the replicated state.
#[derive(Debug, Default)]
struct LaneState {
    /// A request is in flight.
    in_flight: bool,
    /// Failed attempts of the lane's first batch so far.
    failures: u32,
    /// Not to be tried before this.
    retry_at: Option<Instant>,
}

/// A request's result, back from its task.
struct Sent {
    lane: Lane,
    events: Vec<OutboxEvent>,
    result: Result<(), String>,
}

/// What the state says the sink still needs, as the dispatcher reads it.
struct Owed {
    /// Whether the group tracks the sink.
    tracked: bool,
    /// Events not done and not finished here, by lane, each lane's first batch in order.
    lanes: BTreeMap<Lane, Vec<OutboxEvent>>,
    /// Event ids finished here that the state now counts as done (their report committed).
    settled: Vec<u64>,
}

struct SinkWorker {
    group: GroupId,
    proposer: Arc<Proposer>,
    reader: GroupReader,
    sink: Arc<Sink>,
    settings: Arc<DispatchSettings>,
    metrics: Metrics,
    period: Duration,
}

impl SinkWorker {
    /// Delivers to one sink until aborted, or until the state cannot be read.
    async fn run(self) {
        let name = self.sink.name().clone();
        let rate = NonZeroU32::new(self.settings.rate_per_s.max(1)).expect("at least one");
        let limiter: Arc<DefaultDirectRateLimiter> =
            Arc::new(RateLimiter::direct(Quota::per_second(rate)));
        let permits = Arc::new(Semaphore::new(self.settings.concurrency.max(1)));
        let mut lanes: BTreeMap<Lane, LaneState> = BTreeMap::new();
        // Events delivered or given up on here whose report has not been seen committed yet.
        let mut finished: BTreeSet<u64> = BTreeSet::new();
        let mut report = Report::default();
        let mut tasks: JoinSet<Sent> = JoinSet::new();
        let mut interval = tokio::time::interval(self.period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::info!(group = self.group, sink = %name, "outbox dispatcher started");
        loop {
            tokio::select! {
                _ = interval.tick() => {
                    if !report.is_empty() {
                        self.flush(&mut report).await;
                    }
                }
                Some(done) = tasks.join_next() => {
                    match done {
                        Ok(sent) => self.on_sent(sent, &mut lanes, &mut finished, &mut report),
                        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                        Err(_) => {}
                    }
                }
            }
            let owed = match self.reader.read(|state| owed(state, &name, &finished)) {
                Ok(owed) => owed,
                Err(error) => {
                    tracing::error!(group = self.group, sink = %name, %error, "dispatcher cannot read the state; stopping");
                    return;
                }
            };
            if !owed.tracked {
                self.add_sink().await;
                continue;
            }
            for id in owed.settled {
                finished.remove(&id);
            }
            lanes.retain(|lane, state| state.in_flight || owed.lanes.contains_key(lane));
            let now = Instant::now();
            for (lane, events) in owed.lanes {
                let state = lanes.entry(lane).or_default();
                if state.in_flight || state.retry_at.is_some_and(|at| at > now) {
                    continue;
                }
                let Ok(permit) = permits.clone().try_acquire_owned() else { break };
                state.in_flight = true;
                let (sink, limiter, group) = (self.sink.clone(), limiter.clone(), self.group);
                let clock = self.proposer.clock().clone();
                tasks.spawn(async move {
                    limiter.until_ready().await;
                    let wire = events.iter().map(|event| WireEvent::of(group, event)).collect();
                    let result = sink.deliver(wire, clock.now_ms() / 1_000).await;
                    drop(permit);
                    Sent { lane, events, result }
                });
            }
        }
    }

    /// Proposes `AddSink` for this sink; on failure, waits before the caller looks again.
    /// (`NotLeader` is also the answer while this leader's term is not yet committed: the
    /// worker is aborted when this node really stops leading.)
    async fn add_sink(&self) {
        let command = DeliveryCommand::AddSink { sink: self.sink.name().clone() };
        match self.proposer.propose(Command::Delivery(command)).await.map(|answer| answer.outcome) {
            Ok(Ok(Reply::SinkAdded { owed_from, .. })) => {
                tracing::info!(group = self.group, sink = %self.sink.name(), owed_from, "sink tracked");
            }
            Ok(outcome) => {
                tracing::error!(group = self.group, sink = %self.sink.name(), ?outcome, "sink refused");
                tokio::time::sleep(RETRY_MAX).await;
            }
            Err(error) => {
                tracing::debug!(group = self.group, %error, "sink not added yet");
                tokio::time::sleep(self.period).await;
            }
        }
    }

    /// Takes in a request's result: its events are finished (delivered, or given up on once
    /// the lane failed `attempts_max` times or its oldest event is too old), or the lane waits
    /// out a backoff.
    fn on_sent(
        &self,
        sent: Sent,
        lanes: &mut BTreeMap<Lane, LaneState>,
        finished: &mut BTreeSet<u64>,
        report: &mut Report,
    ) {
        let name = self.sink.name().as_str();
        let state = lanes.entry(sent.lane).or_default();
        state.in_flight = false;
        let now_ms = self.proposer.clock().now_ms();
        match sent.result {
            Ok(()) => {
                state.failures = 0;
                state.retry_at = None;
                for event in &sent.events {
                    let age_s = now_ms.saturating_sub(event.log_time_ms) as f64 / 1_000.0;
                    self.metrics.record_delivery(name, "delivered", Some(age_s));
                    if matches!(event.event, Event::OfferMade { .. }) {
                        self.metrics.record_offer_delivered(name, age_s);
                    }
                    finished.insert(event.id.0);
                    report.delivered.push(event.id);
                }
            }
            Err(error) => {
                state.failures += 1;
                self.metrics.record_delivery(name, "failed", None);
                let oldest_ms =
                    sent.events.iter().map(|event| event.log_time_ms).min().unwrap_or(now_ms);
                let too_old =
                    now_ms.saturating_sub(oldest_ms) > self.settings.age_max.as_millis() as u64;
                if state.failures >= self.settings.attempts_max || too_old {
                    tracing::warn!(
                        group = self.group, sink = name, events = sent.events.len(),
                        attempts = state.failures, %error, "giving up: dead letters"
                    );
                    for event in &sent.events {
                        self.metrics.record_delivery(name, "dead_lettered", None);
                        finished.insert(event.id.0);
                        report.dead.push(Failure {
                            event: event.id,
                            attempts: state.failures,
                            error: error.clone(),
                        });
                    }
                    state.failures = 0;
                    state.retry_at = None;
                } else {
                    tracing::debug!(group = self.group, sink = name, attempts = state.failures, %error, "delivery failed");
                    let wait = RETRY_FIRST
                        .saturating_mul(1 << state.failures.min(16).saturating_sub(1))
                        .min(RETRY_MAX);
                    state.retry_at = Some(Instant::now() + crate::workers::jittered(wait, name));
                }
            }
        }
    }

    /// Proposes the report, in pieces of at most `DELIVERY_REPORT_EVENTS_MAX` events; what was
    /// committed leaves it, the rest waits for the next period.
    async fn flush(&self, report: &mut Report) {
        while !report.is_empty() {
            let (delivered, dead) = report.take(DELIVERY_REPORT_EVENTS_MAX);
            let command = DeliveryCommand::Report {
                sink: self.sink.name().clone(),
                delivered: delivered.clone(),
                dead: dead.clone(),
            };
            match self
                .proposer
                .propose(Command::Delivery(command))
                .await
                .map(|answer| answer.outcome)
            {
                Ok(Ok(_)) => {}
                Ok(Err(rejection)) => {
                    // A report is built from what the state owed; a refusal is a bug here or
                    // a sink removed meanwhile. Either way, asking again would not change it.
                    tracing::error!(group = self.group, sink = %self.sink.name(), %rejection, "delivery report refused");
                }
                Err(error) => {
                    tracing::debug!(group = self.group, %error, "delivery report not committed; again next period");
                    report.put_back(delivered, dead);
                    return;
                }
            }
        }
    }
}

/// Deliveries and failures not yet reported to the group.
#[derive(Debug, Default)]
struct Report {
    delivered: Vec<OutboxId>,
    dead: Vec<Failure>,
}

impl Report {
    fn is_empty(&self) -> bool {
        self.delivered.is_empty() && self.dead.is_empty()
    }

    /// Takes up to `max` events' worth, delivered ones first.
    fn take(&mut self, max: usize) -> (Vec<OutboxId>, Vec<Failure>) {
        let delivered: Vec<OutboxId> =
            self.delivered.drain(..self.delivered.len().min(max)).collect();
        let room = max - delivered.len();
        let dead = self.dead.drain(..self.dead.len().min(room)).collect();
        (delivered, dead)
    }

    fn put_back(&mut self, delivered: Vec<OutboxId>, dead: Vec<Failure>) {
        self.delivered.splice(0..0, delivered);
        self.dead.splice(0..0, dead);
    }
}

/// What `sink` is still owed in `state`: per show, the first batch of the events it has not
/// finished (and that were not finished here), oldest shows first; the dead letters asked to
/// be replayed; and which of `finished` the state counts as done now.
fn owed(state: &Group, sink: &SinkName, finished: &BTreeSet<u64>) -> Owed {
    let Some(tracked) = state.delivery().sink(sink) else {
        return Owed { tracked: false, lanes: BTreeMap::new(), settled: Vec::new() };
    };
    let mut lanes: BTreeMap<Lane, Vec<OutboxEvent>> = BTreeMap::new();
    // An event finished here was delivered (or given up on) already, so the show's next events
    // may go: order holds because a show has one request in flight at a time.
    let owed_events = state
        .outbox()
        .pending()
        .filter(|event| !tracked.is_done(event.id.0) && !finished.contains(&event.id.0))
        .take(WINDOW_EVENTS_MAX);
    for event in owed_events {
        let batch = lanes.entry(Lane::Show(event.show)).or_default();
        if batch.len() < BATCH_EVENTS_MAX {
            batch.push(event.clone());
        }
    }
    let replays: Vec<OutboxEvent> = tracked
        .replays()
        .filter(|letter| !finished.contains(&letter.event.id.0))
        .take(BATCH_EVENTS_MAX)
        .map(|letter| letter.event.clone())
        .collect();
    if !replays.is_empty() {
        lanes.insert(Lane::Replay, replays);
    }
    // A replayed letter stays finished here until its report lands: then it is no longer
    // asked to be replayed (delivered or failed again).
    let settled = finished
        .iter()
        .copied()
        .filter(|id| {
            let replaying = tracked.dead_letters.get(id).is_some_and(|letter| letter.replay);
            tracked.is_done(*id) && !replaying
        })
        .collect();
    Owed { tracked: true, lanes, settled }
}
