//! The on-sale benchmark: the same workloads against this cluster, PostgreSQL 15 (two designs)
//! and etcd 3.4, each started on loopback with its data on disk and fsync on, one after
//! another, and one table comparing them.
//!
//! Owns the contract between the load generator and a system under test ([`Backend`] starts
//! a run, [`Target`] serves it) and the order of a whole invocation ([`run_all`]). Never
//! judges a system by its own word: the driver records what was acknowledged and the check
//! compares it with the final state read back.
//!
//! - [`workload`]: shows, seats, attempts, the sold-out rule.
//! - [`driver`]: the closed and open loops, the map readers, the tally and the check.
//! - [`cluster`], [`postgres`], [`etcd`]: the backends and the processes they start.
//! - [`report`]: the table, on stdout and in markdown.
//! - [`usage`]: the CPU time and memory of a backend's processes, from `/proc`.
//! - [`cdn`]: nginx as the first minute's CDN in front of the cluster.
//! - [`plots`]: the sweeps and snapshot costs drawn as SVG.

pub mod cdn;
pub mod cluster;
pub mod driver;
pub mod etcd;
pub mod plots;
pub mod postgres;
pub mod report;
pub mod usage;
pub mod workload;

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::bench::cdn::OriginReads;
use crate::bench::driver::{RunResult, RunSpec};
use crate::bench::workload::{Attempt, Request, Sweep, WorkloadKind};

/// Why a benchmark could not run (a system's wrong answers are not errors: the check reports
/// them).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        source: io::Error,
    },
    /// A system could not be started, set up or read back.
    #[error("{backend}: {message}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The options do not describe a benchmark.
    #[error("invalid options: {0}")]
    Invalid(String),
}

impl BenchError {
    /// A closure that wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> BenchError {
        let context = context.into();
        move |source| BenchError::Io { context, source }
    }

    /// A backend's failure.
    pub fn backend(backend: &'static str, message: impl ToString) -> BenchError {
        BenchError::Backend { backend, message: message.to_string() }
    }
}

/// What one attempt came to, as the backend answered it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every seat is held by this attempt (acknowledged).
    Held,
    /// Cleanly refused because a seat was taken; nothing changed.
    Conflict,
    /// The backend refused or failed for another reason and nothing changed (a deadlock
    /// victim, a limit, an error before commit). Labelled for the report.
    Failed(String),
    /// It may or may not have taken effect (a timeout, a lost connection during commit).
    Unknown(String),
}

/// One read of the first minute, answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Browsed {
    /// How the CDN served it (its `X-Cache-Status`: `HIT`, `MISS`, `EXPIRED`, `UPDATING`,
    /// `STALE`, `REVALIDATED`, `BYPASS`), `none` without the header, `other` for another value.
    pub cache: &'static str,
}

impl Browsed {
    /// The answer the CDN labelled `status`.
    pub fn labelled(status: Option<&str>) -> Browsed {
        const KNOWN: [&str; 7] =
            ["HIT", "MISS", "EXPIRED", "UPDATING", "STALE", "REVALIDATED", "BYPASS"];
        let cache = match status {
            None => "none",
            Some(status) => KNOWN.into_iter().find(|known| *known == status).unwrap_or("other"),
        };
        Browsed { cache }
    }
}

/// A seat held in a backend's final state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldSeat {
    /// The show's index in the run.
    pub show: u32,
    /// The seat.
    pub seat: u32,
    /// The attempt id the backend stored as its owner, where it stores one (PostgreSQL,
    /// etcd); `None` when the backend exposes only the seat's status (the cluster's seat map).
    pub owner: Option<u64>,
}

/// One system, started, that can set up runs. An implementation must: give every run a fresh
/// namespace (new shows, emptied tables, a new key prefix), so that runs never see each
/// other's seats, and be stopped by [`Backend::stop`] (dropping it must also end what it
/// started).
pub trait Backend: Send + Sync {
    /// A run's state.
    type Run: Target;

    /// The column name in the report.
    fn name(&self) -> &'static str;

    /// Sets up run `spec` (shows, tables, keys, connections, sessions are the target's
    /// business) and returns it.
    fn prepare(&self, spec: &RunSpec)
    -> impl Future<Output = Result<Self::Run, BenchError>> + Send;

    /// Stops what [`Backend`] started.
    fn stop(&mut self) -> impl Future<Output = ()> + Send;

    /// The pids of the processes that serve the runs (their children count with them), for
    /// the CPU and memory each run used; empty when unknown.
    fn processes(&self) -> Vec<u32>;
}

/// One run of one system. An implementation must: answer [`Target::attempt`] with what the
/// system said, never retrying a conflict and never hiding an error; and read the final state
/// in [`Target::final_state`] from the system itself, not from its own records.
pub trait Target: Send + Sync + 'static {
    /// A writer's own state (a session, a connection, a buffer for its keys).
    type Worker: Send + 'static;
    /// A map reader's own state.
    type Reader: Send + 'static;

    /// Worker `index`'s state, made before the clock starts.
    fn worker(&self, index: u32) -> impl Future<Output = Result<Self::Worker, BenchError>> + Send;

    /// Untimed upkeep before an attempt in the closed loop (the cluster rotates its session
    /// here before it reaches the per-session hold limit).
    fn maintain(
        &self,
        worker: &mut Self::Worker,
    ) -> impl Future<Output = Result<(), BenchError>> + Send;

    /// Makes `attempt` and says what came of it.
    fn attempt(
        &self,
        worker: &mut Self::Worker,
        attempt: &Attempt,
    ) -> impl Future<Output = Outcome> + Send;

    /// Map reader `index`'s state; `None` when the backend does not take part in the map-reads
    /// workload.
    fn reader(
        &self,
        index: u32,
    ) -> impl Future<Output = Result<Option<Self::Reader>, BenchError>> + Send;

    /// Reads show `show`'s seat map once; returns how many seats it shows held, or why the
    /// read failed.
    fn read_map(
        &self,
        reader: &mut Self::Reader,
        show: u32,
    ) -> impl Future<Output = Result<u64, String>> + Send;

    /// Every seat held at the end, read back from the system.
    fn final_state(&self) -> impl Future<Output = Result<Vec<HeldSeat>, BenchError>> + Send;

    /// Lines for the report's notes (how the backend was set up for this run).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// What keeping its state has cost the system so far, summed over its nodes; sampled
    /// before and after each run. `None` when the system does not say.
    fn state_costs(&self) -> impl Future<Output = Option<StateCosts>> + Send {
        async { None }
    }

    /// Whether this run serves the first minute's reads (a read tier behind a CDN); without,
    /// the first minute makes its hold part alone.
    fn browses(&self) -> bool {
        false
    }

    /// Makes one read of the first minute (`request` is a read) of show `show` for read lane
    /// `lane`, as an anonymous buyer's browser would; says how the CDN served it, or why it
    /// failed.
    fn browse(
        &self,
        _lane: u32,
        _request: Request,
        _show: u32,
    ) -> impl Future<Output = Result<Browsed, String>> + Send {
        async { Err("no read tier".to_owned()) }
    }

    /// The pids of processes that serve this run beside the backend's own (the first
    /// minute's CDN), whose CPU the report shows apart.
    fn helper_processes(&self) -> Vec<u32> {
        Vec::new()
    }

    /// What reached the origin behind the CDN so far; `None` without one.
    fn origin_reads(&self) -> Option<OriginReads> {
        None
    }

    /// The last snapshot of each group on each node, read after a run; empty when the system
    /// does not say.
    fn snapshot_points(&self) -> impl Future<Output = Vec<SnapshotPoint>> + Send {
        async { Vec::new() }
    }
}

/// One node's last snapshot of one group: how large it was and how long building it took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SnapshotPoint {
    /// Its size, bytes.
    pub bytes: f64,
    /// How long the build took (encoding off the lock, writing, syncing), seconds.
    pub build_seconds: f64,
}

/// What keeping a system's state cost: snapshots built, and the copies of shared state that
/// applies made under their group's write lock (the cluster's `booking_state_copies_total`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateCosts {
    /// Snapshots built, over every node and group.
    pub snapshots_built: u64,
    /// Applies that copied shared state.
    pub state_copies: u64,
    /// Their total time, seconds.
    pub copy_seconds: f64,
    /// The longest copy any node has made since it started, seconds.
    pub copy_max_seconds: f64,
}

impl StateCosts {
    /// What happened between `before` and `self` (the longest copy is since the start).
    pub fn since(&self, before: &StateCosts) -> StateCosts {
        StateCosts {
            snapshots_built: self.snapshots_built.saturating_sub(before.snapshots_built),
            state_copies: self.state_copies.saturating_sub(before.state_copies),
            copy_seconds: (self.copy_seconds - before.copy_seconds).max(0.0),
            copy_max_seconds: self.copy_max_seconds,
        }
    }
}

/// The names of the backends, in column order. `cluster` serves its clients over TLS, as it runs
/// in production; `cluster-plain` is the same cluster without it (`--client-tls` off), to
/// measure what TLS costs; `cluster-rest` is the cluster driven over REST, an HTTP request per
/// attempt, as a front end in another language would drive it.
pub const BACKENDS: [&str; 6] =
    ["cluster", "cluster-plain", "cluster-rest", "pg-for-update", "pg-conditional-update", "etcd"];

/// The backends that make the first minute: the cluster over REST behind the CDN, and the
/// others' hold part alone.
pub const FIRST_MINUTE_BACKENDS: [&str; 4] =
    ["cluster-rest", "pg-for-update", "pg-conditional-update", "etcd"];

/// Everything an invocation does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Backends to run, among [`BACKENDS`].
    pub backends: Vec<String>,
    /// Workloads to run.
    pub workloads: Vec<WorkloadKind>,
    /// Concurrent clients, one run per value.
    pub clients: Vec<u32>,
    /// The longest a run lasts.
    pub duration: Duration,
    /// Seats of the on-sale (and the total of the many-shows workload).
    pub seats: u32,
    /// Seats of the uncontended workload.
    pub uncontended_seats: u32,
    /// Open-loop offered rates (attempts/s); each adds runs beside the closed-loop ones.
    pub rates: Vec<u32>,
    /// Whether the closed-loop runs are made (off: only the open-loop ones).
    pub closed_loop: bool,
    /// Seat-map readers of the map-reads workload.
    pub readers: u32,
    /// PostgreSQL's connection pool bound.
    pub pg_pool_max: u32,
    /// Data groups of the cluster.
    pub cluster_groups: u64,
    /// The cluster's `--snapshot-logs`: entries between snapshots.
    pub snapshot_logs: u64,
    /// More `bookingd` arguments for every node (experiments: `--audit-checkpoint-entries 0`).
    pub cluster_args: Vec<String>,
    /// Where the backends keep their data (a fresh directory per backend is made inside).
    pub data_dir: PathBuf,
    /// PostgreSQL's binaries.
    pub pg_bin: PathBuf,
    /// etcd's binary.
    pub etcd_bin: PathBuf,
    /// The seed of every worker's random source.
    pub seed: u64,
    /// Show a progress bar.
    pub progress: bool,
    /// The sweeps to make (one run per point), beside the main table's runs.
    pub sweeps: Vec<Sweep>,
    /// The backends the sweeps run on, among [`BACKENDS`].
    pub sweep_backends: Vec<String>,
    /// The longest a sweep's run lasts.
    pub sweep_duration: Duration,
    /// Where the plots are written (SVG).
    pub plots_dir: PathBuf,
    /// The first minute's offered rates, requests/s, one run per rate.
    pub first_minute_rates: Vec<u32>,
    /// nginx's binary (the first minute's CDN).
    pub nginx_bin: PathBuf,
}

impl Options {
    /// Whether backend `name` makes run `spec`: a sweep's run on the sweep backends, any other
    /// on the main ones.
    pub fn runs(&self, name: &str, spec: &RunSpec) -> bool {
        // The first minute is made over HTTP through a CDN: the SDK's backends sit it out.
        if spec.workload == WorkloadKind::FirstMinute && !FIRST_MINUTE_BACKENDS.contains(&name) {
            return false;
        }
        let backends = if spec.sweep.is_some() { &self.sweep_backends } else { &self.backends };
        backends.iter().any(|selected| selected == name)
    }
}

/// Runs every selected backend through every run of `options`, one backend at a time (started,
/// run, stopped), and returns the results in order. The main table's runs share one start of
/// each backend (later runs see the state earlier ones left, as a system in service does);
/// each point of a sweep gets a freshly started backend, so that a sweep measures what it
/// varies and not what earlier runs left behind. A backend that cannot start is reported and
/// skipped; the others still run.
pub async fn run_all(options: &Options) -> (Vec<RunResult>, Vec<String>) {
    let mut results = Vec::new();
    let mut problems = Vec::new();
    let all_specs = driver::specs(options);
    for name in BACKENDS {
        let specs: Vec<RunSpec> =
            all_specs.iter().filter(|spec| options.runs(name, spec)).cloned().collect();
        let (main, sweeps): (Vec<RunSpec>, Vec<RunSpec>) =
            specs.into_iter().partition(|spec| spec.sweep.is_none());
        let mut batches: Vec<Vec<RunSpec>> = Vec::new();
        if !main.is_empty() {
            batches.push(main);
        }
        batches.extend(sweeps.into_iter().map(|spec| vec![spec]));
        for batch in &batches {
            match start_and_run(name, batch, options).await {
                Some(Ok((mut backend_results, mut backend_problems))) => {
                    results.append(&mut backend_results);
                    problems.append(&mut backend_problems);
                }
                Some(Err(error)) => problems.push(format!("{name}: not run: {error}")),
                None => {}
            }
        }
    }
    (results, problems)
}

/// Starts backend `name`, makes `specs` on it and stops it; `None` for an unknown name.
async fn start_and_run(
    name: &str,
    specs: &[RunSpec],
    options: &Options,
) -> Option<Result<(Vec<RunResult>, Vec<String>), BenchError>> {
    // Each PostgreSQL design gets a freshly initialised server of its own, so that neither
    // inherits the other's bloat, WAL or cache.
    let outcome = match name {
        "cluster" | "cluster-plain" | "cluster-rest" => {
            let (tls, rest) = (name != "cluster-plain", name == "cluster-rest");
            match cluster::ClusterBackend::start(options, tls, rest).await {
                Ok(backend) => run_backend(backend, specs, options).await,
                Err(error) => Err(error),
            }
        }
        "pg-for-update" | "pg-conditional-update" => {
            let design = if name == "pg-for-update" {
                postgres::Design::ForUpdate
            } else {
                postgres::Design::ConditionalUpdate
            };
            match postgres::PostgresBackend::start(options, design).await {
                Ok(backend) => run_backend(backend, specs, options).await,
                Err(error) => Err(error),
            }
        }
        "etcd" => match etcd::EtcdBackend::start(options).await {
            Ok(backend) => run_backend(backend, specs, options).await,
            Err(error) => Err(error),
        },
        _ => return None,
    };
    Some(outcome)
}

/// Every run of `specs` against one started backend, which is stopped afterwards.
async fn run_backend<B: Backend>(
    mut backend: B,
    specs: &[RunSpec],
    options: &Options,
) -> Result<(Vec<RunResult>, Vec<String>), BenchError> {
    let mut results = Vec::new();
    let mut problems = Vec::new();
    let processes = backend.processes();
    for spec in specs {
        match backend.prepare(spec).await {
            Ok(target) => {
                match driver::run(backend.name(), target, spec, options, &processes).await {
                    Ok(result) => results.push(result),
                    Err(error) => {
                        problems.push(format!("{} {}: {error}", backend.name(), spec.label))
                    }
                }
            }
            Err(error) => {
                problems.push(format!("{} {}: setup: {error}", backend.name(), spec.label))
            }
        }
    }
    backend.stop().await;
    Ok((results, problems))
}
