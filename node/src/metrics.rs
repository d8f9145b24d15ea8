//! Prometheus metrics of a node, in the OpenMetrics text format (served at `GET /metrics` by
//! `rest/metrics.rs`).
//!
//! Owns the metric names and what they count:
//!
//! - `booking_http_request_duration_seconds{method, route, status_class}`: a histogram of REST
//!   latency by route template (`/v1/holds/{hold_id}`, or `unmatched`) and status class
//!   (`2xx`..`5xx`), recorded by the REST skin around every route. Hold latency is
//!   `route="/v1/shows/{show_id}/holds", method="POST"`.
//! - `booking_hold_outcomes_total{outcome}`: hold attempts by outcome, `held`,
//!   `seat_unavailable` or `other`; the conflict rate is
//!   `rate(booking_hold_outcomes_total{outcome="seat_unavailable"}[1m]) /
//!   sum(rate(booking_hold_outcomes_total[1m]))`. Counted where a hold is decided, by the
//!   operation both APIs call (`operations.rs`), from its typed result: a hold this node sends
//!   on to the leader is counted there, not here.
//! - Computed at scrape time from each group's state on this node:
//!   `booking_active_hold_age_seconds{group}` (a histogram of live holds by age: wall clock now
//!   minus the hold's leader-stamped creation time; liveness by log time, as the state machine
//!   judges it), `booking_outbox_backlog{group}` (undelivered outbox events), and the Raft
//!   gauges `booking_raft_term`,
//!   `booking_raft_leader_id` (0: none known), `booking_raft_is_leader` (0 or 1),
//!   `booking_raft_last_log_index`, `booking_raft_committed_index` and
//!   `booking_raft_applied_index`, each by `group`.
//!
//! Never changes state: a scrape reads each group's applied state once, under its read lock.

use std::fmt::Write as _;
use std::sync::Arc;

use openraft::ServerState;
use openraft::async_runtime::WatchReceiver;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use statemachine::Group;

use crate::error::{ApiError, ErrorCode};
use crate::group::HostedGroup;
use crate::service::Service;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Upper bounds (seconds) of the active-hold age buckets: the default hold lives 5 minutes, a
/// processing one 2 more.
pub const HOLD_AGE_BUCKETS_S: [f64; 9] = [5.0, 15.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 420.0];

/// What a hold attempt came to.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum HoldOutcome {
    /// The seats were held.
    Held,
    /// A seat was taken (a conflict).
    SeatUnavailable,
    /// Any other refusal or failure.
    Other,
}

impl HoldOutcome {
    /// The outcome of a decided hold.
    pub fn of<T>(result: &Result<T, ApiError>) -> HoldOutcome {
        match result {
            Ok(_) => HoldOutcome::Held,
            Err(error) if error.code() == ErrorCode::SeatUnavailable => {
                HoldOutcome::SeatUnavailable
            }
            Err(_) => HoldOutcome::Other,
        }
    }

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            HoldOutcome::Held => "held",
            HoldOutcome::SeatUnavailable => "seat_unavailable",
            HoldOutcome::Other => "other",
        }
    }
}

impl EncodeLabelValue for HoldOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.name())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status_class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HoldLabels {
    outcome: HoldOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupLabels {
    group: u64,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// The node's recorded metrics (what handlers and middleware count). Cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    requests: Histograms<RequestLabels>,
    holds: Family<HoldLabels, Counter>,
    deliveries: Family<DeliveryLabels, Counter>,
    delivery_latency: Histograms<SinkLabels>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    sink: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabels {
    sink: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupSinkLabels {
    group: u64,
    sink: String,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Empty metrics.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let requests: Histograms<RequestLabels> = Family::new_with_constructor(|| {
            // 0.5 ms .. about 16 s.
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "booking_http_request_duration_seconds",
            "REST request latency by route template and status class",
            requests.clone(),
        );
        let holds = Family::<HoldLabels, Counter>::default();
        registry.register(
            "booking_hold_outcomes",
            "Hold attempts by outcome (held, seat_unavailable, other)",
            holds.clone(),
        );
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        registry.register(
            "booking_outbox_deliveries",
            "Outbox events sent to a sink by this node while it led, by result (delivered, \
             failed: an attempt that will be retried, dead_lettered)",
            deliveries.clone(),
        );
        let delivery_latency: Histograms<SinkLabels> = Family::new_with_constructor(|| {
            // 1 ms .. about 9 hours: an event delivered after a long outage is still counted.
            Histogram::new(exponential_buckets(0.001, 3.0, 16))
        });
        registry.register(
            "booking_outbox_delivery_latency_seconds",
            "Time from an outbox event's log time to its delivery, by sink",
            delivery_latency.clone(),
        );
        Metrics {
            inner: Arc::new(Inner { registry, requests, holds, deliveries, delivery_latency }),
        }
    }

    /// Counts one outbox event sent to `sink` with `result` (`delivered`, `failed`,
    /// `dead_lettered`), and a delivered event's age.
    pub fn record_delivery(&self, sink: &str, result: &'static str, age_s: Option<f64>) {
        let labels = DeliveryLabels { sink: sink.to_owned(), result };
        self.inner.deliveries.get_or_create(&labels).inc();
        if let Some(age_s) = age_s {
            self.inner
                .delivery_latency
                .get_or_create(&SinkLabels { sink: sink.to_owned() })
                .observe(age_s);
        }
    }

    /// Counts one decided hold attempt.
    pub fn record_hold(&self, outcome: HoldOutcome) {
        self.inner.holds.get_or_create(&HoldLabels { outcome }).inc();
    }

    /// Records one REST request: its method, route template, HTTP status and duration.
    pub fn record_request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let labels = RequestLabels {
            method: method.to_owned(),
            route: route.to_owned(),
            status_class: status_class(status),
        };
        self.inner.requests.get_or_create(&labels).observe(seconds);
    }

    /// The OpenMetrics text of the recorded metrics and of `service`'s groups as of now.
    ///
    /// # Errors
    ///
    /// `Internal` if a group's state cannot be read.
    pub fn render(&self, service: &Service) -> Result<String, ApiError> {
        let scraped = scrape_groups(service.shared().groups.values())?;
        let mut text = String::new();
        let encoded = encode_registry(&mut text, &self.inner.registry)
            .and_then(|()| encode_registry(&mut text, &scraped))
            .and_then(|()| encode_eof(&mut text));
        encoded.map_err(|error| ApiError::Internal(format!("metrics: {error}")))?;
        Ok(text)
    }
}

fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// A registry of the groups' state right now.
fn scrape_groups<'a>(
    groups: impl Iterator<Item = &'a Arc<HostedGroup>>,
) -> Result<Registry, ApiError> {
    let gauge = Family::<GroupLabels, Gauge>::default;
    let (term, leader, is_leader) = (gauge(), gauge(), gauge());
    let (last_log, committed, applied, backlog) = (gauge(), gauge(), gauge(), gauge());
    let ages: Histograms<GroupLabels> =
        Family::new_with_constructor(|| Histogram::new(HOLD_AGE_BUCKETS_S));
    let sink_gauge = Family::<GroupSinkLabels, Gauge>::default;
    let (sink_backlog, dead_letters, oldest_age) = (sink_gauge(), sink_gauge(), sink_gauge());
    for hosted in groups {
        // This node's clock (the one its proposer stamps entries with), so that under a
        // simulator hold ages follow simulated time.
        let now_ms = hosted.proposer.clock().now_ms();
        let labels = GroupLabels { group: hosted.id };
        let metrics = hosted.raft.metrics().borrow_watched().clone();
        let set = |family: &Family<GroupLabels, Gauge>, value: u64| {
            family.get_or_create(&labels).set(i64::try_from(value).unwrap_or(i64::MAX));
        };
        set(&term, metrics.current_term);
        set(&leader, metrics.current_leader.unwrap_or(0));
        set(&is_leader, u64::from(metrics.state == ServerState::Leader));
        set(&last_log, metrics.last_log_index.unwrap_or(0));
        set(&committed, metrics.local_committed.map_or(0, |id| id.index));
        set(&applied, metrics.last_applied.map_or(0, |id| id.index));
        let (pending, hold_ages, sinks) = hosted.read_local(|group| {
            (group.outbox().len() as u64, live_hold_ages_s(group, now_ms), sink_backlogs(group))
        })?;
        set(&backlog, pending);
        for sink in sinks {
            let labels = GroupSinkLabels { group: hosted.id, sink: sink.name };
            let set = |family: &Family<GroupSinkLabels, Gauge>, value: u64| {
                family.get_or_create(&labels).set(i64::try_from(value).unwrap_or(i64::MAX));
            };
            set(&sink_backlog, sink.backlog);
            set(&dead_letters, sink.dead_letters);
            set(
                &oldest_age,
                sink.oldest_ms.map_or(0, |oldest| now_ms.saturating_sub(oldest) / 1_000),
            );
        }
        let histogram = ages.get_or_create(&labels);
        for age in hold_ages {
            histogram.observe(age);
        }
    }
    let mut registry = Registry::default();
    registry.register("booking_raft_term", "The group's current Raft term", term);
    registry.register("booking_raft_leader_id", "The group's leader known here (0: none)", leader);
    registry.register("booking_raft_is_leader", "1 if this node leads the group", is_leader);
    registry.register("booking_raft_last_log_index", "The last log index on this node", last_log);
    registry.register("booking_raft_committed_index", "The committed index known here", committed);
    registry.register("booking_raft_applied_index", "The last index applied here", applied);
    registry.register("booking_outbox_backlog", "Outbox events not yet acknowledged", backlog);
    registry.register(
        "booking_outbox_sink_backlog",
        "Outbox events a sink has not had yet (neither delivered nor given up on)",
        sink_backlog,
    );
    registry.register(
        "booking_outbox_dead_letters",
        "Events given up on for a sink, kept until replayed",
        dead_letters,
    );
    registry.register(
        "booking_outbox_oldest_undelivered_age_seconds",
        "Age of the oldest event a sink has not had yet (0: none)",
        oldest_age,
    );
    registry.register(
        "booking_active_hold_age_seconds",
        "Live holds (held or processing) by age",
        ages,
    );
    Ok(registry)
}

/// One tracked sink's delivery, as a scrape reads it.
struct SinkBacklog {
    name: String,
    backlog: u64,
    dead_letters: u64,
    /// Log time of the oldest event the sink has not had yet.
    oldest_ms: Option<u64>,
}

/// Every tracked sink of `group`: what it has not had yet, and its dead letters.
fn sink_backlogs(group: &Group) -> Vec<SinkBacklog> {
    group
        .delivery()
        .sinks()
        .map(|(name, sink)| {
            let mut owed = group.outbox().pending().filter(|event| !sink.is_done(event.id.0));
            let oldest_ms = owed.next().map(|event| event.log_time_ms);
            SinkBacklog {
                name: name.to_string(),
                backlog: u64::from(oldest_ms.is_some()) + owed.count() as u64,
                dead_letters: sink.dead_letters.len() as u64,
                oldest_ms,
            }
        })
        .collect()
}

/// The age (seconds, at wall-clock `now_ms`) of every hold that is live by log time.
fn live_hold_ages_s(group: &Group, now_ms: u64) -> Vec<f64> {
    let log_time_ms = group.log_time_ms();
    let mut ages = Vec::new();
    for show in group.shows() {
        for (_deadline, id) in &show.hold_deadlines {
            let Some(hold) = show.holds.get(id) else { continue };
            if hold.effective_state(log_time_ms).is_live() {
                ages.push(now_ms.saturating_sub(hold.created_ms) as f64 / 1000.0);
            }
        }
    }
    ages
}
