//! The load generator: C workers making attempts in a closed loop (each starts its next
//! attempt when the last one is answered) or an open loop (attempt n is due at n / rate
//! seconds, and its latency counts from then, so a slow system cannot hide its queue: no
//! coordinated omission), seat-map readers beside them in the map-reads workload, the first
//! minute's read lanes (open loops of show pages and seat maps through the CDN, apart from its
//! hold workers), and the check of the final state against what was acknowledged.
//!
//! Owns the hot loop (per-worker random source, tally and histogram, merged once at the end;
//! a few relaxed atomic counters for the progress bar and the sold-out rule), when a run stops
//! (its duration, or [`workload::sold_out`]), and the verdict of the check. Never retries a
//! conflict, never drops an error from the counts, and never trusts a backend's own summary:
//! the check reads every held seat back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::bench::cdn::OriginReads;
use crate::bench::usage;
use crate::bench::workload::{self, Attempt, Layout, Request, Sweep, WorkloadKind};
use crate::bench::{
    BenchError, Browsed, HeldSeat, Options, Outcome, SnapshotPoint, StateCosts, Target,
};

/// The longest one attempt or read may take before it is counted as unknown (the backends'
/// own timeouts are shorter; this bounds a hung connection).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// How often the monitor updates the progress bar and checks whether the run is over.
const MONITOR_TICK: Duration = Duration::from_millis(100);

/// The sold-out rule's window, in monitor ticks (about one second).
const WINDOW_TICKS: usize = 10;

/// The largest latency the histograms record, µs (longer ones are clamped to it).
const LATENCY_MAX_US: u64 = 120_000_000;

/// How many workers set themselves up at once (sessions, connections).
const SETUP_PARALLELISM: usize = 256;

/// One run: a workload at one concurrency, closed or open loop.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The run's number in the invocation, unique: backends name their shows, tables and keys
    /// after it.
    pub index: u32,
    /// The workload.
    pub workload: WorkloadKind,
    /// The shows and how attempts spread over them.
    pub layout: Layout,
    /// Concurrent workers (C).
    pub clients: u32,
    /// The open loop's offered rate, attempts/s; `None` for the closed loop.
    pub rate: Option<u32>,
    /// The longest the run lasts.
    pub duration: Duration,
    /// Seat-map readers (map-reads workload only; 0 otherwise).
    pub readers: u32,
    /// The seed of the workers' random sources.
    pub seed: u64,
    /// `workload C=n` (and `open r/s`), or `sweep <what> <x>`, for the report.
    pub label: String,
    /// The sweep this run is a point of, and its x; `None` for the runs of the main table.
    pub sweep: Option<(Sweep, u32)>,
}

/// Every run of an invocation, in order: per workload, per client count, the closed loop
/// first and then each open-loop rate.
pub fn specs(options: &Options) -> Vec<RunSpec> {
    let mut specs = Vec::new();
    for &workload in &options.workloads {
        let layout = workload.layout(options.seats, options.uncontended_seats);
        if workload == WorkloadKind::FirstMinute {
            // Open loop only, one run per offered rate, in FIRST_MINUTE_CLIENTS lanes of holds
            // and as many of reads.
            for &rate in &options.first_minute_rates {
                specs.push(RunSpec {
                    index: u32::try_from(specs.len()).unwrap_or(u32::MAX),
                    workload,
                    layout,
                    clients: workload::FIRST_MINUTE_CLIENTS,
                    rate: Some(rate),
                    duration: options.duration,
                    readers: 0,
                    seed: options.seed,
                    label: format!("{} open {rate}/s", workload.name()),
                    sweep: None,
                });
            }
            continue;
        }
        for &clients in &options.clients {
            let loops = options
                .closed_loop
                .then_some(None)
                .into_iter()
                .chain(options.rates.iter().map(|&rate| Some(rate)));
            for rate in loops {
                let mut label = format!("{} C={clients}", workload.name());
                if let Some(rate) = rate {
                    label.push_str(&format!(" open {rate}/s"));
                }
                let readers = if workload == WorkloadKind::MapReads { options.readers } else { 0 };
                specs.push(RunSpec {
                    index: u32::try_from(specs.len()).unwrap_or(u32::MAX),
                    workload,
                    layout,
                    clients,
                    rate,
                    duration: options.duration,
                    readers,
                    seed: options.seed,
                    label,
                    sweep: None,
                });
            }
        }
    }
    for &sweep in &options.sweeps {
        for &x in sweep.points() {
            let (clients, layout) = sweep.run_at(x, options.seats);
            let workload =
                if layout.shows > 1 { WorkloadKind::ManyShows } else { WorkloadKind::OnSale };
            specs.push(RunSpec {
                index: u32::try_from(specs.len()).unwrap_or(u32::MAX),
                workload,
                layout,
                clients,
                rate: None,
                duration: options.sweep_duration,
                readers: 0,
                seed: options.seed,
                label: format!("sweep {} {x}", sweep.name()),
                sweep: Some((sweep, x)),
            });
        }
    }
    specs
}

/// What the writers did, counted from the answers they got.
#[derive(Clone, Debug)]
pub struct Tally {
    /// Attempts acknowledged.
    pub held: u64,
    /// Seats in acknowledged attempts.
    pub seats_held: u64,
    /// Attempts cleanly refused because a seat was taken.
    pub conflicts: u64,
    /// Attempts that failed without effect, by label.
    pub failed: BTreeMap<String, u64>,
    /// Attempts whose outcome is unknown, by label.
    pub unknown: BTreeMap<String, u64>,
    /// Latency of every attempt, whatever its outcome, µs (closed loop: from its start; open
    /// loop: from when it was due).
    pub latency: Histogram<u64>,
    /// The acknowledged attempts, for the check.
    pub successes: Vec<Attempt>,
    /// The attempts of unknown outcome, for the check.
    pub unknowns: Vec<Attempt>,
}

impl Tally {
    pub(crate) fn new(expected_successes: usize) -> Tally {
        Tally {
            held: 0,
            seats_held: 0,
            conflicts: 0,
            failed: BTreeMap::new(),
            unknown: BTreeMap::new(),
            latency: histogram(),
            successes: Vec::with_capacity(expected_successes),
            unknowns: Vec::new(),
        }
    }

    /// Attempts decided: acknowledged plus cleanly refused.
    pub fn decided(&self) -> u64 {
        self.held + self.conflicts
    }

    /// Attempts that failed or whose outcome is unknown.
    pub fn errors(&self) -> u64 {
        self.failed.values().sum::<u64>() + self.unknown.values().sum::<u64>()
    }

    fn merge(&mut self, other: Tally) {
        self.held += other.held;
        self.seats_held += other.seats_held;
        self.conflicts += other.conflicts;
        for (label, count) in other.failed {
            *self.failed.entry(label).or_insert(0) += count;
        }
        for (label, count) in other.unknown {
            *self.unknown.entry(label).or_insert(0) += count;
        }
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        self.successes.extend(other.successes);
        self.unknowns.extend(other.unknowns);
    }
}

/// What the map readers did.
#[derive(Clone, Debug)]
pub struct ReadTally {
    /// Reads answered.
    pub reads: u64,
    /// Reads that failed, by message (first 80 characters).
    pub errors: BTreeMap<String, u64>,
    /// Read latency, µs.
    pub latency: Histogram<u64>,
    /// Held seats the last answered read showed.
    pub last_held: u64,
}

impl ReadTally {
    fn new() -> ReadTally {
        ReadTally { reads: 0, errors: BTreeMap::new(), latency: histogram(), last_held: 0 }
    }

    fn merge(&mut self, other: ReadTally) {
        self.reads += other.reads;
        for (label, count) in other.errors {
            *self.errors.entry(label).or_insert(0) += count;
        }
        let _ = self.latency.add(&other.latency);
        self.last_held = self.last_held.max(other.last_held);
    }
}

/// What the first minute's reads did: per kind of read, and how the CDN served them.
#[derive(Clone, Debug, Default)]
pub struct BrowseTally {
    /// Per kind of read: answered, failed, latency from when each was due.
    pub reads: BTreeMap<Request, ReadTally>,
    /// Answered reads by the CDN's `X-Cache-Status` (`HIT`, `MISS`, `UPDATING`, ...).
    pub cache: BTreeMap<&'static str, u64>,
}

impl BrowseTally {
    /// Records one answered read that took `micros` µs.
    pub fn record_answer(&mut self, request: Request, browsed: Browsed, micros: u64) {
        let tally = self.reads.entry(request).or_insert_with(ReadTally::new);
        tally.reads += 1;
        tally.latency.saturating_record(micros.clamp(1, LATENCY_MAX_US));
        *self.cache.entry(browsed.cache).or_insert(0) += 1;
    }

    fn record(&mut self, request: Request, answer: Result<Browsed, String>, latency: Duration) {
        match answer {
            Ok(browsed) => self.record_answer(request, browsed, micros(latency)),
            Err(message) => {
                let label: String = message.chars().take(80).collect();
                let tally = self.reads.entry(request).or_insert_with(ReadTally::new);
                *tally.errors.entry(label).or_insert(0) += 1;
            }
        }
    }

    fn merge(&mut self, other: BrowseTally) {
        for (request, tally) in other.reads {
            self.reads.entry(request).or_insert_with(ReadTally::new).merge(tally);
        }
        for (status, count) in other.cache {
            *self.cache.entry(status).or_insert(0) += count;
        }
    }

    /// Reads answered, of every kind.
    pub fn answered(&self) -> u64 {
        self.reads.values().map(|tally| tally.reads).sum()
    }

    /// The share of answered reads the CDN served from its cache (fresh, or being refreshed
    /// by another request), percent; `None` without reads.
    pub fn hit_percent(&self) -> Option<f64> {
        let answered: u64 = self.cache.values().sum();
        let hits: u64 =
            ["HIT", "UPDATING", "STALE"].iter().filter_map(|status| self.cache.get(status)).sum();
        (answered > 0).then(|| 100.0 * hits as f64 / answered as f64)
    }
}

/// A latency as histogram µs.
fn micros(latency: Duration) -> u64 {
    u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).clamp(1, LATENCY_MAX_US)
}

/// The verdict of the end-of-run check.
#[derive(Clone, Debug, Default)]
pub struct Check {
    /// Whether every promise held.
    pub ok: bool,
    /// What was compared, one finding per line.
    pub lines: Vec<String>,
}

/// One run's outcome, ready for the report.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The backend's column name.
    pub backend: &'static str,
    /// The run.
    pub spec: RunSpec,
    /// From the first attempt until the last one was answered.
    pub elapsed: Duration,
    /// Why the run ended (its duration, or a sold-out reason).
    pub stop_reason: String,
    /// The writers' tally (without the per-attempt lists).
    pub tally: Tally,
    /// The readers' tally, in the map-reads workload when the backend takes part.
    pub reads: Option<ReadTally>,
    /// The first minute's reads, when the backend has a read tier for them.
    pub browse: Option<BrowseTally>,
    /// What reached the origin behind the CDN during the run (the first minute).
    pub origin: Option<OriginReads>,
    /// The hold attempts offered per second (open loop), when the rate was fixed.
    pub offered_holds: Option<u32>,
    /// The check.
    pub check: Check,
    /// The backend's notes about this run.
    pub notes: Vec<String>,
    /// What keeping its state cost the system during the run, if it says.
    pub costs: Option<StateCosts>,
    /// What the backend's processes used, when they can be read.
    pub usage: Option<RunUsage>,
    /// The size and build time of the last snapshot of each group on each node after the run
    /// (the cluster's), for the plot of build time against state size.
    pub snapshots: Vec<SnapshotPoint>,
}

/// What a backend's processes used around one run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunUsage {
    /// CPU time from the first attempt until the last one was answered, seconds.
    pub cpu_seconds: f64,
    /// Memory when the clock started (shows made, workers set up), bytes.
    pub pss_at_start: u64,
    /// Memory when the last attempt was answered, bytes.
    pub pss_at_end: u64,
    /// CPU time of the processes beside the backend (the first minute's CDN), seconds.
    pub helpers_cpu_seconds: Option<f64>,
    /// CPU time of the load generator (this process, without the backends it started),
    /// seconds.
    pub generator_cpu_seconds: Option<f64>,
}

impl RunUsage {
    /// CPU per decided attempt, µs (`None` without attempts).
    pub fn cpu_us_per_attempt(&self, decided: u64) -> Option<f64> {
        (decided > 0).then(|| self.cpu_seconds * 1e6 / decided as f64)
    }

    /// Memory the run added per acknowledged hold, bytes (`None` when it shrank or none).
    pub fn bytes_per_hold(&self, holds: u64) -> Option<f64> {
        let grown = self.pss_at_end.checked_sub(self.pss_at_start)?;
        (holds > 0).then(|| grown as f64 / holds as f64)
    }
}

impl RunResult {
    /// `count` per second of the run.
    pub fn per_second(&self, count: u64) -> f64 {
        count as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A latency histogram, µs, three significant digits.
fn histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts (low 1, high well above 2 * low).
    Histogram::new_with_bounds(1, LATENCY_MAX_US, 3)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

/// The counters the workers bump for the monitor.
#[derive(Default)]
struct Live {
    stop: AtomicBool,
    decided: AtomicU64,
    held: AtomicU64,
    seats_sold: AtomicU64,
    errors: AtomicU64,
}

/// Runs `spec` against `target` and checks the final state. `processes` are the backend's
/// root processes, sampled when the clock starts and stops.
///
/// # Errors
///
/// When a worker or reader cannot be set up, or the final state cannot be read.
pub async fn run<T: Target>(
    backend: &'static str,
    target: T,
    spec: &RunSpec,
    options: &Options,
    processes: &[u32],
) -> Result<RunResult, BenchError> {
    run_until(backend, target, spec, options, processes, &AtomicBool::new(false)).await
}

/// As [`run`], ending early (as if its duration had passed) once `stop` is set: a load beside
/// something else that decides when it has had enough (the failover measurement).
///
/// # Errors
///
/// As [`run`].
pub async fn run_until<T: Target>(
    backend: &'static str,
    target: T,
    spec: &RunSpec,
    options: &Options,
    processes: &[u32],
    stop: &AtomicBool,
) -> Result<RunResult, BenchError> {
    let target = Arc::new(target);
    let workers = make_workers(&target, spec.clients).await?;
    let mut readers = Vec::new();
    for index in 0..spec.readers {
        if let Some(reader) = target.reader(index).await? {
            readers.push(reader);
        }
    }

    let browses = spec.workload == WorkloadKind::FirstMinute && target.browses();
    // The first minute's holds run at their share of the rate (alone, on a target without a
    // read tier); its reads, where the target serves them, in lanes of their own at the rest,
    // so that a slow hold never delays a read.
    let hold_rate = offered_holds(spec);
    let costs_before = target.state_costs().await;
    let origin_before = target.origin_reads();
    let helpers = target.helper_processes();
    let usage_at_start = usage::sample(processes);
    let helpers_at_start = usage::sample(&helpers);
    let generator_at_start = usage::own_cpu_seconds();
    let live = Arc::new(Live::default());
    let started = Instant::now();
    let mut writer_tasks = JoinSet::new();
    let expected_successes = usize::try_from(spec.layout.total_seats() / u64::from(spec.clients))
        .unwrap_or(0)
        .min(4_096);
    for (index, worker) in (0u32..).zip(workers) {
        let (target, live, spec) = (target.clone(), live.clone(), spec.clone());
        let rng = StdRng::seed_from_u64(
            spec.seed ^ (u64::from(index) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let tally = Tally::new(expected_successes);
        writer_tasks.spawn(async move {
            match hold_rate {
                None => closed_loop(&*target, worker, index, &spec, rng, tally, &live).await,
                Some(rate) => {
                    let open = OpenLoop::new(index, rate, started);
                    open_loop(&*target, worker, &spec, open, rng, tally, &live).await
                }
            }
        });
    }
    let mut browse_tasks = JoinSet::new();
    if let (true, Some(rate)) = (browses, spec.rate) {
        let read_rate = (rate - offered_holds(spec).unwrap_or(0)).max(1);
        for lane in 0..spec.clients {
            let (target, live, spec) = (target.clone(), live.clone(), spec.clone());
            let rng = StdRng::seed_from_u64(
                !spec.seed ^ (u64::from(lane) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            let open = OpenLoop::new(lane, read_rate, started);
            browse_tasks.spawn(async move { browse_loop(&*target, &spec, open, rng, &live).await });
        }
    }
    let mut reader_tasks = JoinSet::new();
    let reader_count = readers.len();
    for reader in readers {
        let (target, live) = (target.clone(), live.clone());
        reader_tasks.spawn(async move { read_loop(&*target, reader, &live).await });
    }

    let stop_reason = monitor(spec, &live, started, options.progress, stop).await;
    live.stop.store(true, Ordering::SeqCst);
    let mut tally = Tally::new(0);
    while let Some(joined) = writer_tasks.join_next().await {
        match joined {
            Ok(worker_tally) => tally.merge(worker_tally),
            Err(error) => {
                *tally.failed.entry(format!("worker panicked: {error}")).or_insert(0) += 1;
            }
        }
    }
    let mut browse = browses.then(BrowseTally::default);
    while let Some(joined) = browse_tasks.join_next().await {
        if let (Some(browse), Ok(lane)) = (browse.as_mut(), joined) {
            browse.merge(lane);
        }
    }
    let elapsed = started.elapsed();
    let helpers_cpu = match (helpers_at_start, usage::sample(&helpers)) {
        (Some(start), Some(end)) => Some((end.cpu_seconds - start.cpu_seconds).max(0.0)),
        _ => None,
    };
    let generator_cpu = match (generator_at_start, usage::own_cpu_seconds()) {
        (Some(start), Some(end)) => Some((end - start).max(0.0)),
        _ => None,
    };
    let usage = match (usage_at_start, usage::sample(processes)) {
        (Some(start), Some(end)) => Some(RunUsage {
            cpu_seconds: (end.cpu_seconds - start.cpu_seconds).max(0.0),
            pss_at_start: start.pss_bytes,
            pss_at_end: end.pss_bytes,
            helpers_cpu_seconds: helpers_cpu,
            generator_cpu_seconds: generator_cpu,
        }),
        _ => None,
    };
    let mut reads = (reader_count > 0).then(ReadTally::new);
    while let Some(joined) = reader_tasks.join_next().await {
        if let (Some(reads), Ok(reader_tally)) = (reads.as_mut(), joined) {
            reads.merge(reader_tally);
        }
    }

    let costs = match (costs_before, target.state_costs().await) {
        (Some(before), Some(after)) => Some(after.since(&before)),
        _ => None,
    };
    let origin = match (origin_before, target.origin_reads()) {
        (Some(before), Some(after)) => Some(after.since(&before)),
        _ => None,
    };
    let snapshots = target.snapshot_points().await;
    let held = target.final_state().await?;
    let check = check(&spec.layout, &tally.successes, &tally.unknowns, &held);
    let notes = target.notes();
    // The per-attempt lists served the check; the report needs only the counts.
    tally.successes = Vec::new();
    tally.unknowns = Vec::new();
    Ok(RunResult {
        backend,
        spec: spec.clone(),
        elapsed,
        stop_reason,
        tally,
        reads,
        browse,
        origin,
        offered_holds: hold_rate,
        check,
        notes,
        costs,
        usage,
        snapshots,
    })
}

/// The hold attempts offered per second in run `spec` (open loop): the first minute's share of
/// its requests, or the whole rate.
fn offered_holds(spec: &RunSpec) -> Option<u32> {
    spec.rate.map(|rate| {
        if spec.workload == WorkloadKind::FirstMinute {
            (rate * workload::HOLD_PERCENT / 100).max(1)
        } else {
            rate
        }
    })
}

/// Every worker's state, made [`SETUP_PARALLELISM`] at a time, in index order.
async fn make_workers<T: Target>(
    target: &Arc<T>,
    clients: u32,
) -> Result<Vec<T::Worker>, BenchError> {
    let mut workers: Vec<Option<T::Worker>> = (0..clients).map(|_| None).collect();
    let mut pending = JoinSet::new();
    let mut next = 0u32;
    loop {
        while next < clients && pending.len() < SETUP_PARALLELISM {
            let target = target.clone();
            let index = next;
            pending.spawn(async move { (index, target.worker(index).await) });
            next += 1;
        }
        let Some(joined) = pending.join_next().await else { break };
        let (index, worker) = joined.map_err(|error| BenchError::Invalid(error.to_string()))?;
        let slot =
            usize::try_from(index).map_err(|error| BenchError::Invalid(error.to_string()))?;
        workers[slot] = Some(worker?);
    }
    Ok(workers.into_iter().flatten().collect())
}

/// Updates the progress bar until the run is over; returns why it is.
async fn monitor(
    spec: &RunSpec,
    live: &Live,
    started: Instant,
    progress: bool,
    stop: &AtomicBool,
) -> String {
    let total = spec.layout.total_seats();
    let bar = if progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:<34} {elapsed:>4} {bar:30} {percent:>3}% sold  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(spec.label.clone());
    let mut window: std::collections::VecDeque<(u64, u64)> =
        std::collections::VecDeque::with_capacity(WINDOW_TICKS + 1);
    let mut ticker = tokio::time::interval(MONITOR_TICK);
    let reason = loop {
        ticker.tick().await;
        let decided = live.decided.load(Ordering::Relaxed);
        let held = live.held.load(Ordering::Relaxed);
        let sold = live.seats_sold.load(Ordering::Relaxed);
        let errors = live.errors.load(Ordering::Relaxed);
        window.push_back((decided, held));
        if window.len() > WINDOW_TICKS + 1 {
            window.pop_front();
        }
        let elapsed = started.elapsed();
        bar.set_position(sold.min(total));
        let rate = decided as f64 / elapsed.as_secs_f64().max(1e-3);
        let conflicts = 100.0 * decided.saturating_sub(held) as f64 / decided.max(1) as f64;
        bar.set_message(format!(
            "{rate:>7.0} attempts/s  {conflicts:>3.0}% conflicts  {errors} errors"
        ));
        if elapsed >= spec.duration {
            break format!("duration ({} s)", spec.duration.as_secs_f64());
        }
        if stop.load(Ordering::Relaxed) {
            break format!("stopped after {:.0} s", elapsed.as_secs_f64());
        }
        // The first minute goes on after the show sells out: its buyers still browse, and
        // the holds that can no longer succeed must still be refused.
        if spec.workload == WorkloadKind::FirstMinute {
            continue;
        }
        if window.len() == WINDOW_TICKS + 1 {
            let (first_decided, first_held) = window[0];
            if let Some(reason) =
                workload::sold_out(total, sold, decided - first_decided, held - first_held)
            {
                break reason.to_owned();
            }
        } else if let Some(reason) = workload::sold_out(total, sold, 0, 0) {
            break reason.to_owned();
        }
    };
    bar.finish_and_clear();
    reason
}

/// Records one answered attempt.
fn record(tally: &mut Tally, live: &Live, attempt: &Attempt, outcome: Outcome, latency: Duration) {
    tally.latency.saturating_record(micros(latency));
    match outcome {
        Outcome::Held => {
            tally.held += 1;
            tally.seats_held += u64::from(attempt.count);
            tally.successes.push(*attempt);
            live.held.fetch_add(1, Ordering::Relaxed);
            live.decided.fetch_add(1, Ordering::Relaxed);
            live.seats_sold.fetch_add(u64::from(attempt.count), Ordering::Relaxed);
        }
        Outcome::Conflict => {
            tally.conflicts += 1;
            live.decided.fetch_add(1, Ordering::Relaxed);
        }
        Outcome::Failed(label) => {
            *tally.failed.entry(label).or_insert(0) += 1;
            live.errors.fetch_add(1, Ordering::Relaxed);
        }
        Outcome::Unknown(label) => {
            *tally.unknown.entry(label).or_insert(0) += 1;
            tally.unknowns.push(*attempt);
            live.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Makes one attempt, bounded by [`ATTEMPT_TIMEOUT`].
async fn attempt_once<T: Target>(target: &T, worker: &mut T::Worker, attempt: &Attempt) -> Outcome {
    match tokio::time::timeout(ATTEMPT_TIMEOUT, target.attempt(worker, attempt)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Unknown("generator timeout".to_owned()),
    }
}

/// One worker of the closed loop: the next attempt starts when the last is answered.
async fn closed_loop<T: Target>(
    target: &T,
    mut worker: T::Worker,
    index: u32,
    spec: &RunSpec,
    mut rng: StdRng,
    mut tally: Tally,
    live: &Live,
) -> Tally {
    let mut sequence = 0u64;
    while !live.stop.load(Ordering::Relaxed) {
        if let Err(error) = target.maintain(&mut worker).await {
            // Upkeep failing (no session) is an error the report shows; the pause keeps a
            // broken backend from turning this loop into a spin.
            *tally.failed.entry(format!("upkeep: {error}")).or_insert(0) += 1;
            live.errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let attempt = spec.layout.attempt(&mut rng, (u64::from(index) << 32) | sequence);
        sequence += 1;
        let begun = Instant::now();
        let outcome = attempt_once(target, &mut worker, &attempt).await;
        record(&mut tally, live, &attempt, outcome, begun.elapsed());
    }
    tally
}

/// One lane's place in an open loop of C lanes: lane `index` makes requests `index`,
/// `index + C`, ..., request n due at `started + n / rate`.
#[derive(Clone, Copy, Debug)]
struct OpenLoop {
    /// The lane's index, of C.
    index: u32,
    /// Requests per second, over every lane.
    rate: u32,
    /// When request 0 was due.
    started: Instant,
    /// The lane's next request.
    n: u64,
}

impl OpenLoop {
    fn new(index: u32, rate: u32, started: Instant) -> OpenLoop {
        OpenLoop { index, rate, started, n: u64::from(index) }
    }

    /// Waits until the lane's next request is due and says when that was; `None` once the
    /// run is over.
    async fn next(&mut self, spec: &RunSpec, live: &Live) -> Option<Instant> {
        let rate = u64::from(self.rate.max(1));
        let due = self.started + Duration::from_nanos(self.n.saturating_mul(1_000_000_000) / rate);
        if live.stop.load(Ordering::Relaxed) || due.duration_since(self.started) >= spec.duration {
            return None;
        }
        tokio::time::sleep_until(due).await;
        if live.stop.load(Ordering::Relaxed) {
            return None;
        }
        self.n += u64::from(spec.clients);
        Some(due)
    }
}

/// One worker of the open loop: worker `index` of C makes attempts `index`, `index + C`, ...,
/// attempt n due at `started + n / rate`; its latency counts from then.
async fn open_loop<T: Target>(
    target: &T,
    mut worker: T::Worker,
    spec: &RunSpec,
    mut open: OpenLoop,
    mut rng: StdRng,
    mut tally: Tally,
    live: &Live,
) -> Tally {
    let index = open.index;
    let mut sequence = 0u64;
    while let Some(due) = open.next(spec, live).await {
        let attempt = spec.layout.attempt(&mut rng, (u64::from(index) << 32) | sequence);
        sequence += 1;
        // Upkeep is part of the attempt here: the clock started when the attempt was due.
        let outcome = match target.maintain(&mut worker).await {
            Ok(()) => attempt_once(target, &mut worker, &attempt).await,
            Err(error) => Outcome::Failed(format!("upkeep: {error}")),
        };
        record(&mut tally, live, &attempt, outcome, due.elapsed());
    }
    tally
}

/// One lane of the first minute's reads, an open loop like [`open_loop`]'s: each read a show
/// page or a seat map, evenly, of the on-sale's show; its latency counts from when it was due.
async fn browse_loop<T: Target>(
    target: &T,
    spec: &RunSpec,
    mut open: OpenLoop,
    mut rng: StdRng,
    live: &Live,
) -> BrowseTally {
    let mut tally = BrowseTally::default();
    while let Some(due) = open.next(spec, live).await {
        let request = Request::READS[usize::from(rng.gen_bool(0.5))];
        let answer = match tokio::time::timeout(
            ATTEMPT_TIMEOUT,
            target.browse(open.index, request, 0),
        )
        .await
        {
            Ok(answer) => answer,
            Err(_) => Err("generator timeout".to_owned()),
        };
        tally.record(request, answer, due.elapsed());
    }
    tally
}

/// One seat-map reader: reads the hot show (index 0) until the writers stop.
async fn read_loop<T: Target>(target: &T, mut reader: T::Reader, live: &Live) -> ReadTally {
    let mut tally = ReadTally::new();
    while !live.stop.load(Ordering::Relaxed) {
        let begun = Instant::now();
        let answer = tokio::time::timeout(ATTEMPT_TIMEOUT, target.read_map(&mut reader, 0)).await;
        match answer {
            Ok(Ok(held)) => {
                tally.reads += 1;
                tally.last_held = held;
                tally.latency.saturating_record(micros(begun.elapsed()));
            }
            Ok(Err(message)) => {
                let label: String = message.chars().take(80).collect();
                *tally.errors.entry(label).or_insert(0) += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(_) => *tally.errors.entry("generator timeout".to_owned()).or_insert(0) += 1,
        }
    }
    tally
}

/// Compares the final state `held` with the acknowledged attempts `successes` (and those of
/// unknown outcome, `unknowns`): no seat in two acknowledged attempts (oversell), no seat twice
/// in the final state, every acknowledged seat held (by its attempt, where the backend names
/// owners), and no held seat that no acknowledged attempt explains, except seats of attempts of
/// unknown outcome. The held seats then equal the acknowledged ones plus those unknowns that
/// took effect.
pub fn check(
    layout: &Layout,
    successes: &[Attempt],
    unknowns: &[Attempt],
    held: &[HeldSeat],
) -> Check {
    const NONE: u64 = u64::MAX;
    let total = usize::try_from(layout.total_seats()).unwrap_or(usize::MAX);
    let per_show = u64::from(layout.seats_per_show);
    let slot = |show: u32, seat: u32| -> Option<usize> {
        (show < layout.shows && seat < layout.seats_per_show)
            .then(|| usize::try_from(u64::from(show) * per_show + u64::from(seat)).ok())
            .flatten()
    };
    let mut owner = vec![NONE; total];
    let mut maybe = vec![false; total];
    let mut acknowledged_seats = 0u64;
    let mut oversold = 0u64;
    for attempt in successes {
        for seat in attempt.seats() {
            acknowledged_seats += 1;
            if let Some(index) = slot(attempt.show, seat) {
                if owner[index] == NONE {
                    owner[index] = attempt.id;
                } else {
                    oversold += 1;
                }
            }
        }
    }
    for attempt in unknowns {
        for seat in attempt.seats() {
            if let Some(index) = slot(attempt.show, seat) {
                maybe[index] = true;
            }
        }
    }
    let mut seen = vec![false; total];
    let (mut outside, mut twice, mut wrong_owner, mut from_unknown, mut unexplained) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for seat in held {
        let Some(index) = slot(seat.show, seat.seat) else {
            outside += 1;
            continue;
        };
        if seen[index] {
            twice += 1;
            continue;
        }
        seen[index] = true;
        if owner[index] != NONE {
            if seat.owner.is_some_and(|stored| stored != owner[index]) {
                wrong_owner += 1;
            }
        } else if maybe[index] {
            from_unknown += 1;
        } else {
            unexplained += 1;
        }
    }
    let missing =
        owner.iter().zip(&seen).filter(|(owner, seen)| **owner != NONE && !**seen).count() as u64;
    let held_count = held.len() as u64;
    let ok = oversold == 0
        && outside == 0
        && twice == 0
        && wrong_owner == 0
        && missing == 0
        && unexplained == 0;
    let mut lines = vec![
        format!(
            "{} acknowledged holds of {acknowledged_seats} seats; {held_count} seats held in \
             the final state ({from_unknown} of them from {} attempts of unknown outcome)",
            successes.len(),
            unknowns.len()
        ),
        format!("oversell (seats in two acknowledged holds): {oversold}"),
    ];
    let mut problem = |count: u64, what: &str| {
        if count > 0 {
            lines.push(format!("FAILED: {count} {what}"));
        }
    };
    problem(twice, "seats listed twice in the final state");
    problem(outside, "held seats outside the run's shows");
    problem(wrong_owner, "seats held by another attempt than the one acknowledged");
    problem(missing, "acknowledged seats not held in the final state");
    problem(unexplained, "held seats that no acknowledged attempt explains");
    if ok {
        lines.push(format!(
            "ok: seats held = seats of acknowledged holds{}",
            if from_unknown > 0 { " + seats of unknown attempts that took effect" } else { "" }
        ));
    }
    Check { ok, lines }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::workload::Skew;

    fn attempt(id: u64, first: u32, count: u8) -> Attempt {
        Attempt { id, show: 0, first, count }
    }

    fn held(seats: &[(u32, Option<u64>)]) -> Vec<HeldSeat> {
        seats.iter().map(|&(seat, owner)| HeldSeat { show: 0, seat, owner }).collect()
    }

    #[test]
    fn the_check_passes_when_the_final_state_is_exactly_the_acknowledged_seats() {
        let layout = Layout::split(100, 1, Skew::Front);
        let successes = [attempt(1, 0, 2), attempt(2, 5, 1)];
        let state = held(&[(0, Some(1)), (1, Some(1)), (5, Some(2))]);
        let verdict = check(&layout, &successes, &[], &state);
        assert!(verdict.ok, "{:?}", verdict.lines);
    }

    #[test]
    fn the_check_catches_oversell_missing_and_unexplained_seats() {
        let layout = Layout::split(100, 1, Skew::Front);
        let oversold = [attempt(1, 0, 2), attempt(2, 1, 2)];
        let state = held(&[(0, None), (1, None), (2, None)]);
        assert!(!check(&layout, &oversold, &[], &state).ok);
        let missing = check(&layout, &[attempt(1, 0, 2)], &[], &held(&[(0, None)]));
        assert!(!missing.ok);
        let unexplained = check(&layout, &[], &[], &held(&[(9, None)]));
        assert!(!unexplained.ok);
        let wrong_owner = check(&layout, &[attempt(1, 0, 1)], &[], &held(&[(0, Some(2))]));
        assert!(!wrong_owner.ok);
    }

    #[test]
    fn seats_of_unknown_attempts_may_or_may_not_be_held() {
        let layout = Layout::split(100, 1, Skew::Front);
        let unknown = [attempt(3, 10, 2)];
        assert!(check(&layout, &[], &unknown, &held(&[(10, None), (11, None)])).ok);
        assert!(check(&layout, &[], &unknown, &[]).ok);
    }
}
