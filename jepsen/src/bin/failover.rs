//! `failover`: kills the leader of a data group again and again, and measures how long each
//! group takes to acknowledge a write after its leader's death, alone or beside the benchmark's
//! load; prints the distribution and every kill, in markdown (also written to `--out`).
//!
//! `scripts/failover.sh` builds the binaries and runs it with and without load. Exit 0 when
//! every group answered after every kill and the load's check passed, 1 otherwise, 2 on bad
//! usage or when the cluster cannot be set up.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use jepsen::bench::workload::WorkloadKind;
use jepsen::failover::{self, Load, Options, Timing};

/// Failover time of a three-node cluster under kill -9.
#[derive(Debug, Parser)]
#[command(name = "failover", version, about)]
struct Args {
    /// Kills, each of a node that leads at least one data group.
    #[arg(long, default_value_t = 20)]
    kills: u32,
    /// Seconds between kills.
    #[arg(long, default_value_t = 8.0)]
    period: f64,
    /// Seconds the cluster (and its load) runs before the first kill; term changes then are
    /// spurious elections.
    #[arg(long, default_value_t = 30.0)]
    quiet: f64,
    /// A new probe hold per data group every this many ms.
    #[arg(long, default_value_t = 20)]
    probe_ms: u64,
    /// Data groups.
    #[arg(long, default_value_t = 4)]
    groups: u64,
    /// `bookingd --heartbeat-ms` (default: the daemon's).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// `bookingd --election-min-ms` (default: the daemon's).
    #[arg(long)]
    election_min_ms: Option<u64>,
    /// `bookingd --election-max-ms` (default: the daemon's).
    #[arg(long)]
    election_max_ms: Option<u64>,
    /// Hold attempts per second of the benchmark's load beside the kills (open loop); 0: none.
    #[arg(long, default_value_t = 0)]
    load_rate: u32,
    /// The load's workload (as the benchmark names them).
    #[arg(long, default_value = "uncontended")]
    load_workload: String,
    /// The load's concurrent workers.
    #[arg(long, default_value_t = 256)]
    load_clients: u32,
    /// The load's seats.
    #[arg(long, default_value_t = 1_000_000)]
    load_seats: u32,
    /// Node `i` listens on 127.0.0.`i` from this port.
    #[arg(long, default_value_t = 7650)]
    port_base: u16,
    /// Where the nodes keep their data (a fresh directory inside, removed afterwards).
    #[arg(long, default_value_os_t = std::env::temp_dir().join("booking-failover"))]
    data_dir: PathBuf,
    /// The load's seed.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The report's file (markdown).
    #[arg(long, default_value = "bench-results/failover.md")]
    out: PathBuf,
}

/// `seconds` as a duration, if it is one.
fn seconds(seconds: f64, flag: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{flag}: not a duration: {seconds}"))
}

/// The options `args` describe.
fn options(args: &Args) -> Result<Options, String> {
    let load = if args.load_rate == 0 {
        None
    } else {
        let workload = WorkloadKind::parse(&args.load_workload)
            .filter(|kind| {
                matches!(
                    kind,
                    WorkloadKind::OnSale | WorkloadKind::ManyShows | WorkloadKind::Uncontended
                )
            })
            .ok_or_else(|| {
                format!(
                    "--load-workload {:?}: on-sale, many-shows or uncontended",
                    args.load_workload
                )
            })?;
        Some(Load {
            workload,
            rate: args.load_rate,
            clients: args.load_clients.max(1),
            seats: args.load_seats.max(4),
        })
    };
    if args.kills == 0 || args.groups == 0 || args.probe_ms == 0 {
        return Err("--kills, --groups and --probe-ms must be positive".to_owned());
    }
    Ok(Options {
        kills: args.kills,
        period: seconds(args.period, "--period")?,
        quiet: seconds(args.quiet, "--quiet")?,
        probe_interval: Duration::from_millis(args.probe_ms),
        groups: args.groups,
        timing: Timing {
            heartbeat_ms: args.heartbeat_ms,
            election_min_ms: args.election_min_ms,
            election_max_ms: args.election_max_ms,
        },
        load,
        port_base: args.port_base,
        data_dir: args.data_dir.clone(),
        seed: args.seed,
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    let options = match options(&args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("failover: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("failover: cannot start the runtime: {error}");
            return ExitCode::from(2);
        }
    };
    // Ctrl-C drops the run, and with it the nodes (killed) and their directory.
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = failover::run(options) => Some(outcome),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    let report = match outcome {
        None => {
            eprintln!("failover: interrupted; every node stopped");
            return ExitCode::from(130);
        }
        Some(Err(error)) => {
            eprintln!("failover: {error}");
            return ExitCode::from(2);
        }
        Some(Ok(report)) => report,
    };
    let text = report.markdown();
    println!("{text}");
    if let Some(parent) = args.out.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(&args.out, &text) {
        Ok(()) => eprintln!("failover: report written to {}", args.out.display()),
        Err(error) => eprintln!("failover: cannot write {}: {error}", args.out.display()),
    }
    if report.ok() {
        ExitCode::SUCCESS
    } else {
        eprintln!("failover: a group did not answer after a kill, or the load's check failed");
        ExitCode::FAILURE
    }
}
