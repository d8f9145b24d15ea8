//! `bench`: the on-sale benchmark. Starts each selected system on loopback (this cluster,
//! PostgreSQL 15 in two designs, etcd 3.4), runs the same workloads against it, stops it, and
//! prints one table comparing them (also written as markdown, `bench-results/latest.md` by
//! default). `scripts/bench.sh` builds it and runs it.
//!
//! Exit 0 when every run's check passed, 1 when a check failed or a run could not be made,
//! 2 on bad usage, 130 when interrupted (Ctrl-C stops every backend first).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use jepsen::bench::workload::{Sweep, UNCONTENDED_SEATS, WorkloadKind};
use jepsen::bench::{self, BACKENDS, Options, plots, postgres, report};

/// The load generator allocates with mimalloc: with glibc's malloc, allocation was about a
/// fifth of its CPU in the first-minute workload, CPU the systems it measures share.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The on-sale benchmark: this cluster against PostgreSQL and etcd.
#[derive(Debug, Parser)]
#[command(name = "bench", version, about)]
struct Args {
    /// Backends, comma-separated: cluster, cluster-plain (the cluster without TLS on its client
    /// port, to measure what TLS costs), cluster-rest (the cluster over REST, a request per
    /// attempt), pg-for-update, pg-conditional-update, etcd (or pg for both PostgreSQL designs).
    #[arg(long, value_delimiter = ',', default_value = "cluster,cluster-rest,pg,etcd")]
    backends: Vec<String>,
    /// Workloads, comma-separated: on-sale, many-shows, uncontended, map-reads, first-minute
    /// (the seed's first minute over REST through nginx as the CDN: cluster-rest, and the hold
    /// part alone on PostgreSQL and etcd).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "on-sale,many-shows,uncontended,map-reads,first-minute"
    )]
    workloads: Vec<String>,
    /// The first minute's offered rates, requests/s, comma-separated: one run per rate.
    #[arg(long, value_delimiter = ',', default_value = "5000,100000")]
    first_minute_rate: Vec<u32>,
    /// nginx's binary (the first minute's CDN).
    #[arg(long, default_value_os_t = jepsen::bench::cdn::default_bin())]
    nginx_bin: PathBuf,
    /// Concurrent clients, comma-separated: one run per value.
    #[arg(long, value_delimiter = ',', default_value = "256,1024,4096")]
    clients: Vec<u32>,
    /// The longest a run lasts, seconds (it stops earlier once sold out).
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Seats of the on-sale show (and the total of the many-shows workload).
    #[arg(long, default_value_t = 50_000)]
    seats: u32,
    /// Seats of the uncontended workload (shows of 100,000).
    #[arg(long, default_value_t = UNCONTENDED_SEATS)]
    uncontended_seats: u32,
    /// Open-loop offered rates, attempts/s, comma-separated: each adds open-loop runs beside
    /// the closed-loop ones.
    #[arg(long, value_delimiter = ',')]
    rate: Vec<u32>,
    /// Make only the open-loop runs (needs --rate).
    #[arg(long)]
    open_only: bool,
    /// Seat-map readers in the map-reads workload.
    #[arg(long, default_value_t = 32)]
    readers: u32,
    /// PostgreSQL's connection pool bound (clients beyond it wait for a connection).
    #[arg(long, default_value_t = 256)]
    pg_pool_max: u32,
    /// Data groups of the cluster.
    #[arg(long, default_value_t = 4)]
    cluster_groups: u64,
    /// The cluster's entries between snapshots (bookingd --snapshot-logs; its default is
    /// 10,000, lower here so that each run contains several snapshots).
    #[arg(long, default_value_t = 1_000)]
    snapshot_logs: u64,
    /// One more bookingd argument for every node, repeatable, for experiments (e.g.
    /// --cluster-arg=--audit-checkpoint-entries --cluster-arg=0); the report's notes list them.
    #[arg(long = "cluster-arg", allow_hyphen_values = true)]
    cluster_args: Vec<String>,
    /// Where the backends keep their data (fresh directories inside, removed afterwards).
    #[arg(long, default_value_os_t = std::env::temp_dir().join("booking-bench"))]
    data_dir: PathBuf,
    /// PostgreSQL's binaries.
    #[arg(long, default_value_os_t = postgres::default_bin())]
    pg_bin: PathBuf,
    /// etcd's binary.
    #[arg(long, default_value = "etcd")]
    etcd_bin: PathBuf,
    /// The seed of every worker's random source.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The markdown report.
    #[arg(long, default_value = "bench-results/latest.md")]
    out: PathBuf,
    /// Sweeps, comma-separated, each a run per point beside the main table's runs: clients
    /// (C from 64 to 16,384 on the hot show), shows (1 to 10,000 shows sharing the seats),
    /// seats (one show of 1,000 to 100,000 seats); or none. Default: all three (none with
    /// --quick).
    #[arg(long, value_delimiter = ',')]
    sweeps: Option<Vec<String>>,
    /// The backends the sweeps run on, comma-separated (names as for --backends).
    #[arg(long, value_delimiter = ',', default_value = "cluster,pg-conditional-update,etcd")]
    sweep_backends: Vec<String>,
    /// The longest a sweep's run lasts, seconds.
    #[arg(long, default_value_t = 10.0)]
    sweep_duration: f64,
    /// Where the plots go (SVG); default: `plots` beside the report.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// About a minute end to end: C=256 only, 3 s runs, 10,000 seats (100,000 uncontended),
    /// no sweeps.
    #[arg(long)]
    quick: bool,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

/// The backends `names` select (`pg` is both PostgreSQL designs, `all` every backend).
fn backends_named(names: &[String]) -> Result<Vec<String>, String> {
    let mut backends = Vec::new();
    for name in names {
        let names: Vec<&str> = match name.as_str() {
            "pg" | "postgres" => vec!["pg-for-update", "pg-conditional-update"],
            "all" => BACKENDS.to_vec(),
            name if BACKENDS.contains(&name) => vec![name],
            other => return Err(format!("unknown backend {other:?} (known: {BACKENDS:?}, pg)")),
        };
        backends.extend(names.into_iter().map(str::to_owned));
    }
    Ok(backends)
}

/// The sweeps `names` select (`none`: no sweep).
fn sweeps_named(names: &[String]) -> Result<Vec<Sweep>, String> {
    let mut sweeps = Vec::new();
    for name in names {
        if name == "none" {
            continue;
        }
        let sweep = Sweep::parse(name).ok_or_else(|| {
            let known: Vec<&str> = Sweep::ALL.iter().map(|sweep| sweep.name()).collect();
            format!("unknown sweep {name:?} (known: {known:?}, none)")
        })?;
        if !sweeps.contains(&sweep) {
            sweeps.push(sweep);
        }
    }
    Ok(sweeps)
}

/// `seconds` as a duration, if it is a positive number (`flag` names it in the error).
fn positive_seconds(seconds: f64, flag: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| format!("{flag} {seconds} is not a positive number of seconds"))
}

/// The options `args` describe, or why they do not describe a benchmark.
fn options(args: &Args) -> Result<Options, String> {
    let backends = backends_named(&args.backends)?;
    let sweep_backends = backends_named(&args.sweep_backends)?;
    let sweeps = match &args.sweeps {
        Some(names) => sweeps_named(names)?,
        None if args.quick => Vec::new(),
        None => Sweep::ALL.to_vec(),
    };
    let sweep_duration = positive_seconds(args.sweep_duration, "--sweep-duration")?;
    let plots_dir = args.plots.clone().unwrap_or_else(|| {
        args.out.parent().map_or_else(|| PathBuf::from("plots"), |parent| parent.join("plots"))
    });
    let mut workloads = Vec::new();
    for name in &args.workloads {
        let kind = WorkloadKind::parse(name).ok_or_else(|| {
            let known: Vec<&str> = WorkloadKind::ALL.iter().map(|kind| kind.name()).collect();
            format!("unknown workload {name:?} (known: {known:?})")
        })?;
        if !workloads.contains(&kind) {
            workloads.push(kind);
        }
    }
    if args.open_only && args.rate.is_empty() {
        return Err("--open-only needs --rate".to_owned());
    }
    if args.first_minute_rate.contains(&0) {
        return Err("--first-minute-rate must be positive".to_owned());
    }
    let duration = positive_seconds(args.duration, "--duration")?;
    if args.clients.is_empty() || args.clients.contains(&0) || args.seats < 4 {
        return Err("--clients must be positive and --seats at least 4".to_owned());
    }
    let mut options = Options {
        backends,
        workloads,
        clients: args.clients.clone(),
        duration,
        seats: args.seats,
        uncontended_seats: args.uncontended_seats.max(4),
        rates: args.rate.clone(),
        closed_loop: !args.open_only,
        readers: args.readers,
        pg_pool_max: args.pg_pool_max,
        cluster_groups: args.cluster_groups.max(1),
        snapshot_logs: args.snapshot_logs.max(1),
        cluster_args: args.cluster_args.clone(),
        data_dir: args.data_dir.clone(),
        pg_bin: args.pg_bin.clone(),
        etcd_bin: args.etcd_bin.clone(),
        seed: args.seed,
        progress: !args.no_progress,
        sweeps,
        sweep_backends,
        sweep_duration,
        plots_dir,
        first_minute_rates: args.first_minute_rate.clone(),
        nginx_bin: args.nginx_bin.clone(),
    };
    if args.quick {
        options.clients = vec![256];
        options.duration = Duration::from_secs(3);
        options.seats = 10_000;
        options.uncontended_seats = 100_000;
    }
    Ok(options)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = match options(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("bench: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("bench: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    // Ctrl-C drops the run, and with it every backend: the cluster's nodes and etcd's members
    // are killed, PostgreSQL is stopped, and their directories removed.
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = bench::run_all(&options) => Some(outcome),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    let Some((results, problems)) = outcome else {
        eprintln!("bench: interrupted; every backend stopped");
        return ExitCode::from(130);
    };
    let plots = match plots::draw_all(&results, &options.plots_dir) {
        Ok(plots) => plots,
        Err(error) => {
            eprintln!("bench: cannot draw the plots: {error}");
            Vec::new()
        }
    };
    // The report links each plot relative to itself where it can.
    let report_dir = args.out.parent().unwrap_or(std::path::Path::new(""));
    let plots: Vec<(String, PathBuf)> = plots
        .into_iter()
        .map(|(title, path)| {
            let relative = path.strip_prefix(report_dir).map(PathBuf::from).unwrap_or(path);
            (title, relative)
        })
        .collect();
    let text = report::markdown(&options, &results, &problems, &plots);
    println!("{text}");
    if let Some(parent) = args.out.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(&args.out, &text) {
        Ok(()) => eprintln!("bench: report written to {}", args.out.display()),
        Err(error) => eprintln!("bench: cannot write {}: {error}", args.out.display()),
    }
    if report::all_ok(&results) && problems.is_empty() && !results.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("bench: a check failed or a run could not be made (see the report)");
        ExitCode::FAILURE
    }
}
