//! Prometheus metrics of a node, in the OpenMetrics text format (served at `GET /metrics` by
//! `rest/metrics.rs`).
//!
//! Owns the metric names and what they count:
//!
//! - `booking_http_request_duration_seconds{method, route, status_class}`: a histogram of REST
//!   latency by route template (`/v1/holds/{hold_id}`, or `unmatched`) and status class
//!   (`2xx`..`5xx`), recorded by the REST skin around every route. Hold latency is
//!   `route="/v1/shows/{show_id}/holds", method="POST"`, checkout's
//!   `route="/v1/holds/{hold_id}/checkout"`.
//! - `booking_grpc_request_duration_seconds{method, code}`: the same for gRPC calls of the
//!   client and operator services (`method="BookingService/Hold"`, `code` the status number,
//!   `0` OK), timed by the node's one port up to the response's headers.
//! - `booking_hold_outcomes_total{group, outcome}`: hold attempts by outcome, `held`,
//!   `seat_unavailable` or `other`; the conflict rate is
//!   `sum by (group) (rate(booking_hold_outcomes_total{outcome="seat_unavailable"}[1m])) /
//!   sum by (group) (rate(booking_hold_outcomes_total[1m]))`. Counted where a hold is decided,
//!   on the leader of the show's group (`Service::client`, which both APIs call through
//!   `operations.rs`), from its typed result: a hold this node sends on to the leader is
//!   counted there, not here. `booking_waitlist_outcomes_total{group, operation, outcome}`
//!   counts waitlist joins and offer accepts alike (`outcome` is `ok` or the error code:
//!   duplicate joins are `already_on_waitlist`). `booking_decision_duration_seconds{group,
//!   request}` times every buyer's request decided there (`hold`, `checkout`, `accept_offer`,
//!   ...: from the leader taking it to its answer, a cheap rejection's read or a proposal's
//!   commit and apply), whichever API it came through.
//! - `booking_seat_map_builds_total{api, fresh}`: seat maps built for sharing
//!   (`crate::seat_maps`), by API (`grpc`, `rest`) and whether the replica had confirmed it was
//!   fresh; under a stampede of readers it grows by one per show per refresh, not per reader.
//!   `booking_seat_map_answers_total{api, form}` counts the shared maps served, by the form they
//!   went out in (`whole`, `compact`: 2 bits per seat, `changes`: only the seats changed since
//!   the caller's map), which says how often readers' maps were ones the node could patch.
//! - `booking_outbox_deliveries_total{sink, result}`,
//!   `booking_outbox_delivery_latency_seconds{sink}` (event log time to delivery) and, for
//!   offers alone, `booking_offer_delivery_latency_seconds{sink}` (offer made to offer
//!   delivered), recorded by the dispatcher while this node leads.
//! - Computed at scrape time from each group's state on this node, each by `group`:
//!   `booking_active_hold_age_seconds` (a histogram of live holds by age: wall clock now minus
//!   the hold's leader-stamped creation time; liveness by log time, as the state machine judges
//!   it), `booking_outbox_backlog` (undelivered outbox events), per sink
//!   `booking_outbox_sink_backlog`, `booking_outbox_dead_letters` and
//!   `booking_outbox_oldest_undelivered_age_seconds`; the money in motion:
//!   `booking_payments_unsettled{state}` and `booking_payment_oldest_age_seconds{state}`
//!   (`pending`, `unknown`), `booking_refunds_owed` and `booking_refund_oldest_age_seconds`; the
//!   waiting room and waitlist: `booking_admission_wait_seconds` (a histogram of every granted
//!   ticket's wait from joining to its grant, by log time), `booking_grants_overdue` and
//!   `booking_offers_overdue` (past their deadline, not yet expired by a tick),
//!   `booking_waitlist_pooled_seats` (released seats not yet offered) and
//!   `booking_waitlist_oldest_pooled_age_seconds` (how long the longest-kept of them has waited
//!   for an offer so far, by log time; a lottery not drawn or a full wave of offers makes it
//!   grow by design, a stuck promotion by accident), `booking_promotion_lag_seconds` (a
//!   histogram of every offer's promotion lag: its seats' wait from release to the offer, as the
//!   state machine recorded it; offers made before snapshot format 7 are not counted); the
//!   proposer's
//!   `booking_proposals_total` and `booking_proposed_commands_total` (their ratio is the mean
//!   batch size); what keeping the state costs (`raft::StateCostCounts`):
//!   `booking_snapshots_built_total`, `booking_snapshots_installed_total`, the shows builds
//!   reused and encoded afresh (`booking_snapshot_shows_reused_total`,
//!   `booking_snapshot_shows_encoded_total`),
//!   `booking_snapshot_last_build_seconds`, `booking_snapshot_last_install_seconds`,
//!   `booking_snapshot_last_bytes`, and the copies an apply made of state a snapshot, backup or
//!   checkpoint still shared, `booking_state_copies_total`, `booking_state_copy_max_seconds`
//!   and `booking_state_copy_seconds_total`; the auditor's findings (`crate::auditor`): `booking_invariants_ok`,
//!   `booking_audit_checked_index`, `booking_replica_digest_matches` and
//!   `booking_audit_compared_index`; and the Raft gauges `booking_raft_term`,
//!   `booking_raft_leader_id` (0: none known), `booking_raft_is_leader` (0 or 1),
//!   `booking_raft_last_log_index`, `booking_raft_committed_index` and
//!   `booking_raft_applied_index`.
//!
//! The node's disk: `booking_disk_free_bytes` (free on the data directory's file system; absent
//! where the storage cannot say) and `booking_disk_reserve_bytes` (under it, client writes are
//! refused: `crate::disk`).
//!
//! The alert rules that ship with the project (`node/prometheus/alerts.yml`) read these names;
//! a process test checks that every name they use is served.
//!
//! Never changes state: a scrape reads each group's applied state once, under its read lock.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use openraft::ServerState;
use openraft::async_runtime::WatchReceiver;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;

use statemachine::{ClientRequest, EntityKind, Group, PaymentStatus, StateName};

use crate::auditor::GroupAudit;

use crate::error::{ApiError, ErrorCode};
use crate::group::HostedGroup;
use crate::service::Service;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Upper bounds (seconds) of the active-hold age buckets: the default hold lives 5 minutes, a
/// processing one 2 more.
pub const HOLD_AGE_BUCKETS_S: [f64; 9] = [5.0, 15.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 420.0];
/// Upper bounds (seconds) of the wait-to-admission buckets: a ticket may wait up to an hour.
pub const ADMISSION_WAIT_BUCKETS_S: [f64; 10] =
    [0.1, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 600.0, 1_800.0, 3_600.0];

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
    group: u64,
    outcome: HoldOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    group: u64,
    /// The request's name (`hold`, `checkout`, ...: `ClientRequest::name`).
    request: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GrpcLabels {
    /// `BookingService/Hold`: the service (without its package) and the method.
    method: String,
    /// The gRPC status code's number as text (`0` is OK).
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitlistLabels {
    group: u64,
    /// `join` or `accept`.
    operation: &'static str,
    /// `ok`, or the error code's wire name (`already_on_waitlist`, `offer_expired`, ...).
    outcome: &'static str,
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
    grpc_requests: Histograms<GrpcLabels>,
    holds: Family<HoldLabels, Counter>,
    decisions: Histograms<DecisionLabels>,
    waitlist: Family<WaitlistLabels, Counter>,
    deliveries: Family<DeliveryLabels, Counter>,
    delivery_latency: Histograms<SinkLabels>,
    offer_delivery_latency: Histograms<SinkLabels>,
    seat_map_builds: Family<SeatMapBuildLabels, Counter>,
    seat_map_answers: Family<SeatMapAnswerLabels, Counter>,
    shed: Family<ShedLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShedLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SeatMapBuildLabels {
    api: &'static str,
    fresh: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SeatMapAnswerLabels {
    api: &'static str,
    form: &'static str,
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
        let grpc_requests: Histograms<GrpcLabels> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16)));
        registry.register(
            "booking_grpc_request_duration_seconds",
            "gRPC call latency of the client and operator services, by method and status code \
             (to the response's headers: a stream's start)",
            grpc_requests.clone(),
        );
        let holds = Family::<HoldLabels, Counter>::default();
        registry.register(
            "booking_hold_outcomes",
            "Hold attempts decided by this node as its group's leader, by group and outcome \
             (held, seat_unavailable, other)",
            holds.clone(),
        );
        let decisions: Histograms<DecisionLabels> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16)));
        registry.register(
            "booking_decision_duration_seconds",
            "Time for this node, as its group's leader, to decide a buyer's request (its cheap \
             rejection's read, or its proposal's commit and apply), by group and request",
            decisions.clone(),
        );
        let waitlist = Family::<WaitlistLabels, Counter>::default();
        registry.register(
            "booking_waitlist_outcomes",
            "Waitlist joins and offer accepts decided on this node, by group and outcome (ok or \
             the error code: a duplicate join is already_on_waitlist)",
            waitlist.clone(),
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
        let offer_delivery_latency: Histograms<SinkLabels> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 3.0, 16)));
        registry.register(
            "booking_offer_delivery_latency_seconds",
            "Time from a waitlist offer being made (its event's log time) to its delivery, by sink",
            offer_delivery_latency.clone(),
        );
        let seat_map_builds = Family::<SeatMapBuildLabels, Counter>::default();
        registry.register(
            "booking_seat_map_builds",
            "Seat maps built by this node for sharing (one rebuild per show at a time serves \
             every caller waiting for it), by API (grpc, rest) and whether the replica was \
             confirmed fresh (true, false)",
            seat_map_builds.clone(),
        );
        let seat_map_answers = Family::<SeatMapAnswerLabels, Counter>::default();
        registry.register(
            "booking_seat_map_answers",
            "Shared seat maps served, by API (grpc, rest) and the form they went out in (whole; \
             compact: 2 bits per seat; changes: only the seats changed since the caller's map)",
            seat_map_answers.clone(),
        );
        let shed = Family::<ShedLabels, Counter>::default();
        registry.register(
            "booking_shed",
            "Client work the node refused to protect itself, by reason: in_flight (a request \
             past --max-in-flight, answered 503 overloaded), deadline (a request past \
             --request-deadline-ms, answered 503 unavailable), connections (a connection past \
             --max-connections, closed), handshake (a TLS handshake that failed or ran late)",
            shed.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                registry,
                requests,
                grpc_requests,
                holds,
                decisions,
                waitlist,
                deliveries,
                delivery_latency,
                offer_delivery_latency,
                seat_map_builds,
                seat_map_answers,
                shed,
            }),
        }
    }

    /// Counts one request or connection shed for `reason` (see `booking_shed`'s help).
    pub fn record_shed(&self, reason: &'static str) {
        self.inner.shed.get_or_create(&ShedLabels { reason }).inc();
    }

    /// Counts one seat map built for sharing by `api`, confirmed `fresh` or not.
    pub fn record_seat_map_build(&self, api: &'static str, fresh: bool) {
        let labels = SeatMapBuildLabels { api, fresh: if fresh { "true" } else { "false" } };
        self.inner.seat_map_builds.get_or_create(&labels).inc();
    }

    /// Counts one shared seat map served by `api` in `form` (`whole`, `compact`, `changes`).
    pub fn record_seat_map_answer(&self, api: &'static str, form: &'static str) {
        self.inner.seat_map_answers.get_or_create(&SeatMapAnswerLabels { api, form }).inc();
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

    /// Records a delivered waitlist offer's age (offer made to delivered) at `sink`.
    pub fn record_offer_delivered(&self, sink: &str, age_s: f64) {
        let labels = SinkLabels { sink: sink.to_owned() };
        self.inner.offer_delivery_latency.get_or_create(&labels).observe(age_s);
    }

    /// Records a buyer's request decided by this node as `group`'s leader: how long it took,
    /// and for holds, waitlist joins and offer accepts, what it came to.
    pub fn record_decision<T>(
        &self,
        group: u64,
        request: &ClientRequest,
        result: &Result<T, ApiError>,
        seconds: f64,
    ) {
        let name = request.name();
        self.inner
            .decisions
            .get_or_create(&DecisionLabels { group, request: name })
            .observe(seconds);
        let operation = match request {
            ClientRequest::Hold { .. } => {
                let outcome = HoldOutcome::of(result);
                self.inner.holds.get_or_create(&HoldLabels { group, outcome }).inc();
                return;
            }
            ClientRequest::JoinWaitlist { .. } => "join",
            ClientRequest::AcceptOffer { .. } => "accept",
            _ => return,
        };
        let outcome = match result {
            Ok(_) => "ok",
            Err(error) => error.code().name(),
        };
        self.inner.waitlist.get_or_create(&WaitlistLabels { group, operation, outcome }).inc();
    }

    /// Records one gRPC call of the client or operator API: `path` is
    /// `/booking.v1.BookingService/Hold`, `code` the status code's number.
    pub fn record_grpc(&self, path: &str, code: &str, seconds: f64) {
        let method = path.trim_start_matches('/').trim_start_matches("booking.v1.");
        let labels = GrpcLabels { method: method.to_owned(), code: code.to_owned() };
        self.inner.grpc_requests.get_or_create(&labels).observe(seconds);
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
        let shared = service.shared();
        let scraped = scrape_groups(shared.groups.values(), &shared.audits.snapshot())?;
        let disk = scrape_disk(&shared.disk, shared.config.disk_reserve_bytes);
        let mut text = String::new();
        let encoded = encode_registry(&mut text, &self.inner.registry)
            .and_then(|()| encode_registry(&mut text, &scraped))
            .and_then(|()| encode_registry(&mut text, &disk))
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

/// A registry of the node's disk: its free space (when the storage can say) and its reserve.
fn scrape_disk(disk: &crate::disk::DiskGuard, reserve_bytes: u64) -> Registry {
    let mut registry = Registry::default();
    let gauge = |bytes: u64| {
        let gauge = Gauge::<i64, std::sync::atomic::AtomicI64>::default();
        gauge.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        gauge
    };
    if let Some(free) = disk.free_bytes() {
        registry.register(
            "booking_disk_free_bytes",
            "Bytes free on the data directory's file system",
            gauge(free),
        );
    }
    registry.register(
        "booking_disk_reserve_bytes",
        "Free bytes under which client writes are refused (--disk-reserve-bytes)",
        gauge(reserve_bytes),
    );
    registry
}

/// A registry of the groups' state right now, and of what the auditor found.
fn scrape_groups<'a>(
    groups: impl Iterator<Item = &'a Arc<HostedGroup>>,
    audits: &BTreeMap<u64, GroupAudit>,
) -> Result<Registry, ApiError> {
    let gauge = Family::<GroupLabels, Gauge>::default;
    let (term, leader, is_leader) = (gauge(), gauge(), gauge());
    let (last_log, committed, applied, backlog) = (gauge(), gauge(), gauge(), gauge());
    let ages: Histograms<GroupLabels> =
        Family::new_with_constructor(|| Histogram::new(HOLD_AGE_BUCKETS_S));
    let sink_gauge = Family::<GroupSinkLabels, Gauge>::default;
    let (sink_backlog, dead_letters, oldest_age) = (sink_gauge(), sink_gauge(), sink_gauge());
    let state_gauge = Family::<GroupStateLabels, Gauge>::default;
    let (payments, payment_oldest_age) = (state_gauge(), state_gauge());
    let (refunds_owed, refund_oldest_age) = (gauge(), gauge());
    let (overdue_grants, overdue_offers) = (gauge(), gauge());
    let (invariants_ok, checked_index) = (gauge(), gauge());
    let (digests_match, compared_index) = (gauge(), gauge());
    let (pooled, pooled_oldest_age) = (gauge(), gauge());
    let counter = Family::<GroupLabels, Counter>::default;
    let (proposals, proposed_commands) = (counter(), counter());
    let (snapshots_built, snapshots_installed, state_copies) = (counter(), counter(), counter());
    let (shows_reused, shows_encoded) = (counter(), counter());
    let seconds = Family::<GroupLabels, Gauge<f64, AtomicU64>>::default;
    let (last_build, last_install, copy_max) = (seconds(), seconds(), seconds());
    let copy_total = Family::<GroupLabels, Counter<f64, AtomicU64>>::default();
    let snapshot_bytes = gauge();
    let admission_waits: Histograms<GroupLabels> =
        Family::new_with_constructor(|| Histogram::new(ADMISSION_WAIT_BUCKETS_S));
    let promotion_lags: Histograms<GroupLabels> =
        Family::new_with_constructor(|| Histogram::new(ADMISSION_WAIT_BUCKETS_S));
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
        let batches = hosted.proposer.batches();
        proposals.get_or_create(&labels).inc_by(batches.entries());
        proposed_commands.get_or_create(&labels).inc_by(batches.commands());
        let costs = hosted.reader.costs();
        snapshots_built.get_or_create(&labels).inc_by(costs.snapshots_built);
        snapshots_installed.get_or_create(&labels).inc_by(costs.snapshots_installed);
        shows_reused.get_or_create(&labels).inc_by(costs.snapshot_shows_reused);
        shows_encoded.get_or_create(&labels).inc_by(costs.snapshot_shows_encoded);
        state_copies.get_or_create(&labels).inc_by(costs.state_copies);
        last_build.get_or_create(&labels).set(costs.last_build.as_secs_f64());
        last_install.get_or_create(&labels).set(costs.last_install.as_secs_f64());
        copy_max.get_or_create(&labels).set(costs.state_copy_max.as_secs_f64());
        copy_total.get_or_create(&labels).inc_by(costs.state_copy_total.as_secs_f64());
        set(&snapshot_bytes, costs.last_snapshot_bytes);
        let (pending, hold_ages, sinks, money, overdue) = hosted.read_local(|group| {
            (
                group.outbox().len() as u64,
                live_hold_ages_s(group, now_ms),
                sink_backlogs(group),
                money_backlogs(group),
                overdue_grants_and_offers(group),
            )
        })?;
        let (waits, lags, pool, pooled_oldest_ms) = hosted.read_local(|group| {
            let pool: usize = group.shows().map(|show| show.waitlist.pool.len()).sum();
            let oldest = group.shows().filter_map(|show| show.waitlist.oldest_pooled_ms()).min();
            (admission_waits_s(group), promotion_lags_s(group), pool as u64, oldest)
        })?;
        let waited = admission_waits.get_or_create(&labels);
        for wait_s in waits {
            waited.observe(wait_s);
        }
        let lagged = promotion_lags.get_or_create(&labels);
        for lag_s in lags {
            lagged.observe(lag_s);
        }
        set(&pooled, pool);
        set(
            &pooled_oldest_age,
            pooled_oldest_ms.map_or(0, |oldest| now_ms.saturating_sub(oldest) / 1_000),
        );
        set(&backlog, pending);
        for (state, count, oldest_ms) in [
            ("pending", money.pending, money.pending_oldest_ms),
            ("unknown", money.unknown, money.unknown_oldest_ms),
        ] {
            let labels = GroupStateLabels { group: hosted.id, state };
            payments.get_or_create(&labels).set(count as i64);
            let age_s = oldest_ms.map_or(0, |oldest| now_ms.saturating_sub(oldest) / 1_000);
            payment_oldest_age.get_or_create(&labels).set(age_s as i64);
        }
        set(&refunds_owed, money.refunds_owed);
        set(
            &refund_oldest_age,
            money.refund_oldest_ms.map_or(0, |oldest| now_ms.saturating_sub(oldest) / 1_000),
        );
        set(&overdue_grants, overdue.0);
        set(&overdue_offers, overdue.1);
        let audit = audits.get(&hosted.id).cloned().unwrap_or_default();
        set(&invariants_ok, u64::from(audit.violation.is_none()));
        set(&checked_index, audit.checked_index);
        set(&digests_match, u64::from(audit.diverged_at.is_none()));
        set(&compared_index, audit.compared_index);
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
    registry.register(
        "booking_snapshots_built",
        "Snapshots this node built of the group since it started",
        snapshots_built,
    );
    registry.register(
        "booking_snapshots_installed",
        "Snapshots this node installed from the group's leader since it started",
        snapshots_installed,
    );
    registry.register(
        "booking_snapshot_shows_reused",
        "Shows whose encoding and check snapshot builds here reused (unchanged since the last)",
        shows_reused,
    );
    registry.register(
        "booking_snapshot_shows_encoded",
        "Shows snapshot builds here encoded and checked afresh (written to since the last)",
        shows_encoded,
    );
    registry.register(
        "booking_snapshot_last_build_seconds",
        "How long the last snapshot build took here (encoding off the lock, writing, syncing)",
        last_build,
    );
    registry.register(
        "booking_snapshot_last_install_seconds",
        "How long the last snapshot install took here (decoding, checking, writing, syncing)",
        last_install,
    );
    registry.register(
        "booking_snapshot_last_bytes",
        "The size of the last snapshot built or installed here",
        snapshot_bytes,
    );
    registry.register(
        "booking_state_copies",
        "Applies that copied the group's state because a snapshot, backup or checkpoint shared it",
        state_copies,
    );
    registry.register(
        "booking_state_copy_max_seconds",
        "The longest such copy, held under the group's write lock (applies and reads wait)",
        copy_max,
    );
    registry.register("booking_state_copy_seconds", "The time all such copies took", copy_total);
    registry.register(
        "booking_proposals",
        "Log entries this node's proposer proposed for the group while leading (each a batch)",
        proposals,
    );
    registry.register(
        "booking_proposed_commands",
        "Commands those entries carried: over booking_proposals_total, the mean batch size",
        proposed_commands,
    );
    registry.register(
        "booking_admission_wait_seconds",
        "Admission tickets of the group's shows by their wait from joining the line to their \
         grant, over the shows' lives (log time)",
        admission_waits,
    );
    registry.register(
        "booking_waitlist_pooled_seats",
        "Released seats kept for waiters and not yet offered to one",
        pooled,
    );
    registry.register(
        "booking_waitlist_oldest_pooled_age_seconds",
        "How long the longest-kept released seat has waited for an offer so far (0: none \
         pooled)",
        pooled_oldest_age,
    );
    registry.register(
        "booking_promotion_lag_seconds",
        "Waitlist offers of the group's shows by their promotion lag: how long their seats \
         waited from release to the offer (log time; offers made before snapshot format 7 \
         recorded none)",
        promotion_lags,
    );
    registry.register(
        "booking_payments_unsettled",
        "Payment attempts the provider has not answered for, by state (pending, unknown)",
        payments,
    );
    registry.register(
        "booking_payment_oldest_age_seconds",
        "Age of the oldest unsettled payment attempt, by state (0: none)",
        payment_oldest_age,
    );
    registry.register(
        "booking_refunds_owed",
        "Payment attempts whose money is owed back",
        refunds_owed,
    );
    registry.register(
        "booking_refund_oldest_age_seconds",
        "Time since the oldest owed refund became owed (0: none)",
        refund_oldest_age,
    );
    registry.register(
        "booking_grants_overdue",
        "Admission grants past their deadline not yet expired by a tick",
        overdue_grants,
    );
    registry.register(
        "booking_offers_overdue",
        "Waitlist offers past their deadline not yet expired by a tick",
        overdue_offers,
    );
    registry.register(
        "booking_invariants_ok",
        "1 while every checkpoint of the group's state on this node kept every invariant",
        invariants_ok,
    );
    registry.register(
        "booking_audit_checked_index",
        "The last checkpoint index the auditor checked here",
        checked_index,
    );
    registry.register(
        "booking_replica_digest_matches",
        "1 while this replica's state digests equal the leader's at every compared index",
        digests_match,
    );
    registry.register(
        "booking_audit_compared_index",
        "The last index at which this replica's digest was compared with the leader's",
        compared_index,
    );
    Ok(registry)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupStateLabels {
    group: u64,
    state: &'static str,
}

/// The group's money still in motion, as a scrape reads it.
#[derive(Default)]
struct MoneyBacklog {
    pending: u64,
    pending_oldest_ms: Option<u64>,
    unknown: u64,
    unknown_oldest_ms: Option<u64>,
    refunds_owed: u64,
    /// Log time the oldest owed refund became owed (its payment's last transition).
    refund_oldest_ms: Option<u64>,
}

/// Unsettled payment attempts by state, and owed refunds, with the oldest of each.
fn money_backlogs(group: &Group) -> MoneyBacklog {
    let mut backlog = MoneyBacklog::default();
    let older =
        |oldest: &mut Option<u64>, ms: u64| *oldest = Some(oldest.map_or(ms, |o| o.min(ms)));
    for (_, attempt) in group.unsettled_payments() {
        let (count, oldest) = match attempt.state.status() {
            PaymentStatus::Unknown => (&mut backlog.unknown, &mut backlog.unknown_oldest_ms),
            _ => (&mut backlog.pending, &mut backlog.pending_oldest_ms),
        };
        *count += 1;
        older(oldest, attempt.created_ms);
    }
    for (show, attempt) in group.refunds_owed() {
        backlog.refunds_owed += 1;
        let trail = group.audit_trail(show, EntityKind::Payment, attempt.id.0);
        let since = trail.last().map_or(attempt.created_ms, |record| record.log_time_ms);
        older(&mut backlog.refund_oldest_ms, since);
    }
    backlog
}

/// For every ticket that was ever granted, the time from joining the line to its grant.
fn admission_waits_s(group: &Group) -> Vec<f64> {
    let mut waits = Vec::new();
    for show in group.shows() {
        for ticket in show.lane.tickets.values().filter(|ticket| ticket.state.grant().is_some()) {
            let trail = group.audit_trail(show.id, EntityKind::Ticket, ticket.id.0);
            if let Some(granted) = trail.iter().find(|record| record.to == StateName::Granted) {
                let wait_ms = granted.log_time_ms.saturating_sub(ticket.joined_ms);
                waits.push(wait_ms as f64 / 1_000.0);
            }
        }
    }
    waits
}

/// Every offer's promotion lag that was recorded (offers made since snapshot format 7).
fn promotion_lags_s(group: &Group) -> Vec<f64> {
    group
        .shows()
        .flat_map(|show| show.waitlist.offers.values())
        .filter_map(|offer| offer.promotion_lag_ms)
        .map(|lag_ms| lag_ms as f64 / 1_000.0)
        .collect()
}

/// Grants and open offers whose deadline passed by log time but that no tick expired yet.
fn overdue_grants_and_offers(group: &Group) -> (u64, u64) {
    let now = group.log_time_ms();
    let mut overdue = (0, 0);
    for show in group.shows() {
        overdue.0 +=
            show.lane.granted.iter().take_while(|(deadline, _)| *deadline <= now).count() as u64;
        overdue.1 += show
            .waitlist
            .offer_deadlines
            .iter()
            .take_while(|(deadline, _)| *deadline <= now)
            .count() as u64;
    }
    overdue
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
