//! `jepsen`: runs one test of the suite against real `bookingd` processes and prints its verdict.
//!
//! `cargo run -p jepsen --release -- test --nodes 3 --workload holds --nemesis kill-leader
//! --time-limit 30 --rate 50 --seed 7`; `--workload payments --provider-faults` adds the
//! payment provider (`paysim`, built with the workspace) and its faults. Exit codes: 0 valid, 1 invalid, 2 unknown, 3 the test
//! could not run (a harness problem). Builds nothing: `cargo build --release --workspace --bins`
//! first (and `cargo build --release -p node --features unsafe-modes --bin bookingd-unsafe` for
//! `--inject`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use jepsen::nemesis::Nemesis;
use jepsen::runner::{self, TestOptions};
use jepsen::workload::Workload;
use statemachine::check::Verdict;
use statemachine::check::ledger::{ClusterState, LedgerRecord, LedgerReport, check_ledger};

#[derive(Parser)]
#[command(name = "jepsen", about = "The booking cluster's fault-injection suite")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs one test: cluster, clients, nemesis, recovery, final reads, checks, report.
    Test(TestArgs),
    /// Checks a report's history again (say with more time for the linearizability search).
    Check(CheckArgs),
}

#[derive(clap::Args)]
struct CheckArgs {
    /// The report folder (with history.jsonl and results.json).
    report: PathBuf,
    /// Seconds the linearizability checker may search before answering unknown.
    #[arg(long, default_value_t = 300)]
    check_time: u64,
}

#[derive(clap::Args)]
struct TestArgs {
    /// Nodes in the cluster (3 or 5).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(3..=5))]
    nodes: u64,
    /// holds, admission, waitlist, register or payments.
    #[arg(long, default_value = "holds")]
    workload: Workload,
    /// none, kill-one, kill-minority, kill-leader, kill-all, pause-one, pause-leader,
    /// partition-leader, partition-halves, partition-bridge, partition-ring, transfer-leader,
    /// membership, clock-skew, move-show or combined.
    #[arg(long, default_value = "none")]
    nemesis: Nemesis,
    /// Seconds of clients and faults.
    #[arg(long, default_value_t = 30)]
    time_limit: u64,
    /// Client operations per second, in all.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    /// Client processes.
    #[arg(long, default_value_t = 8)]
    concurrency: u64,
    /// The seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The report folder (default: jepsen-reports/<workload>-<nemesis>-n<nodes>-s<seed>).
    #[arg(long)]
    report: Option<PathBuf>,
    /// The cluster's data folder (default: a temporary folder, removed afterwards).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Where bookingd is (default: next to this executable).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Run the test-only bookingd-unsafe with this planted bug on (ack-before-commit,
    /// stale-read, fifo-skip, two-offers; `bookingd-unsafe --list-injections`): the suite must
    /// judge it invalid.
    #[arg(long, value_name = "BUG")]
    inject: Option<statemachine::inject::Bug>,
    /// The first loopback port to use.
    #[arg(long, default_value_t = 7600)]
    port_base: u16,
    /// Seconds the linearizability checker may search before answering unknown.
    #[arg(long, default_value_t = 120)]
    check_time: u64,
    /// With `--workload payments`: fault the payment provider too (outages, slowness,
    /// duplicate, late and out-of-order webhooks, timeouts), beside the node nemesis.
    #[arg(long)]
    provider_faults: bool,
    /// Judge the run as a soak: each node's memory, data folder and snapshot size (sampled every
    /// 5 s into resources.jsonl in every run) must stop growing by the middle of the run.
    #[arg(long)]
    soak: bool,
    /// Take a snapshot of each group every this many log entries (the nodes'
    /// `--snapshot-logs`; their default if not given), so that a run sees many.
    #[arg(long)]
    snapshot_logs: Option<u64>,
    /// Sweep for expiries every this many milliseconds (the nodes' `--tick-ms`; by default the
    /// nodes' own, or 10 s for the deadlines workload).
    #[arg(long)]
    tick_ms: Option<u64>,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,jepsen=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Test(args) => {
            let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime starts");
            runtime.block_on(test(args))
        }
        Command::Check(args) => check(&args),
    }
}

fn check(args: &CheckArgs) -> ExitCode {
    let read = |name: &str| std::fs::read_to_string(args.report.join(name));
    let (Ok(results), Ok(lines)) = (read("results.json"), read("history.jsonl")) else {
        eprintln!("{}: no results.json and history.jsonl", args.report.display());
        return ExitCode::from(3);
    };
    let results: serde_json::Value = serde_json::from_str(&results).unwrap_or_default();
    let workload = results["workload"].as_str().and_then(|name| name.parse::<Workload>().ok());
    let (Some(workload), Some(seed)) = (workload, results["seed"].as_u64()) else {
        eprintln!("{}: results.json names no workload and seed", args.report.display());
        return ExitCode::from(3);
    };
    let events: Result<Vec<_>, _> = lines.lines().map(serde_json::from_str).collect();
    let Ok(events) = events else {
        eprintln!("{}: history.jsonl does not parse", args.report.display());
        return ExitCode::from(3);
    };
    let history = statemachine::check::history::History { events };
    let began = std::time::Instant::now();
    let trails = (workload == Workload::Deadlines).then(|| {
        read(runner::TRAILS_FILE)
            .map_err(|error| format!("{}: {error}", runner::TRAILS_FILE))
            .and_then(|text| runner::parse_trails(&text, runner::first_show(seed)))
    });
    let trails = trails.as_ref().map(|trails| trails.as_ref().map_err(String::as_str));
    let check_time = Duration::from_secs(args.check_time);
    let checked = runner::check(&history, workload, seed, check_time, trails);
    match checked.linearizable {
        Some(verdict) => println!(
            "linearizability {} ({:.1} s): {}",
            verdict_name(verdict),
            began.elapsed().as_secs_f64(),
            checked.linearizability
        ),
        None => println!("linearizability not applicable: {}", checked.linearizability),
    }
    println!("booking {}: {}", verdict_name(checked.booking), checked.bookings);
    let mut verdicts = vec![checked.booking];
    verdicts.extend(checked.linearizable);
    if workload == Workload::Payments {
        let ledger = check_ledger_again(&args.report);
        match &ledger {
            Ok(report) => println!(
                "ledger {}: {}",
                verdict_name(report.verdict),
                serde_json::to_string(report).unwrap_or_default()
            ),
            Err(problem) => println!("ledger unknown: {problem}"),
        }
        verdicts.push(ledger.map_or(Verdict::Unknown, |report| report.verdict));
    }
    let verdict = Verdict::combine(verdicts);
    ExitCode::from(match verdict {
        Verdict::Valid => 0,
        Verdict::Invalid => 1,
        Verdict::Unknown => 2,
    })
}

/// The ledger checker on a report's `ledger.json` and `cluster-state.json`.
fn check_ledger_again(report: &std::path::Path) -> Result<LedgerReport, String> {
    let read = |name: &str| {
        let path = report.join(name);
        let text = std::fs::read_to_string(&path)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        Ok::<_, String>((path, text))
    };
    let (path, text) = read(runner::LEDGER_FILE)?;
    let ledger: Vec<LedgerRecord> =
        serde_json::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
    let (path, text) = read(runner::CLUSTER_STATE_FILE)?;
    let state: ClusterState =
        serde_json::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
    check_ledger(&ledger, &state).map_err(|error| error.to_string())
}

async fn test(args: TestArgs) -> ExitCode {
    if let Some(bug) = args.inject.filter(|bug| !bug.in_processes()) {
        eprintln!("--inject {bug}: that bug exists only in the simulator (scripts/sim.sh)");
        return ExitCode::from(3);
    }
    if args.provider_faults && args.workload != Workload::Payments {
        eprintln!("--provider-faults needs --workload payments");
        return ExitCode::from(3);
    }
    let name = format!(
        "{}-{}{}-n{}-s{}{}",
        args.workload,
        args.nemesis,
        if args.provider_faults { "+provider" } else { "" },
        args.nodes,
        args.seed,
        args.inject.map(|bug| format!("-{bug}")).unwrap_or_default()
    );
    let report_dir =
        args.report.clone().unwrap_or_else(|| PathBuf::from("jepsen-reports").join(&name));
    let temporary = match &args.data {
        Some(_) => None,
        None => match tempfile::Builder::new().prefix("jepsen-").tempdir() {
            Ok(dir) => Some(dir),
            Err(error) => {
                eprintln!("cannot make a data folder: {error}");
                return ExitCode::from(3);
            }
        },
    };
    let data_dir = args
        .data
        .clone()
        .or_else(|| temporary.as_ref().map(|dir| dir.path().to_path_buf()))
        .unwrap_or_default();
    let (binary, mut node_args) = match args.inject {
        Some(bug) => ("bookingd-unsafe".to_owned(), vec!["--inject".to_owned(), bug.to_string()]),
        None => ("bookingd".to_owned(), Vec::new()),
    };
    if let Some(entries) = args.snapshot_logs {
        node_args.extend(["--snapshot-logs".to_owned(), entries.to_string()]);
    }
    let options = TestOptions {
        nodes: args.nodes,
        workload: args.workload,
        nemesis: args.nemesis,
        time_limit: Duration::from_secs(args.time_limit),
        rate: args.rate,
        concurrency: args.concurrency,
        seed: args.seed,
        report_dir,
        data_dir,
        bin_dir: args.bin_dir.clone(),
        binary,
        node_args,
        port_base: args.port_base,
        check_time: Duration::from_secs(args.check_time),
        provider_faults: args.provider_faults,
        soak: args.soak,
        tick_ms: args.tick_ms,
    };
    let reproduce = format!(
        "cargo run -p jepsen --release -- test --nodes {} --workload {} --nemesis {} \
         --time-limit {} --rate {} --concurrency {} --seed {}{}{}{}{}{}",
        args.nodes,
        args.workload,
        args.nemesis,
        args.time_limit,
        args.rate,
        args.concurrency,
        args.seed,
        if args.provider_faults { " --provider-faults" } else { "" },
        args.inject.map(|bug| format!(" --inject {bug}")).unwrap_or_default(),
        if args.soak { " --soak" } else { "" },
        args.snapshot_logs.map(|entries| format!(" --snapshot-logs {entries}")).unwrap_or_default(),
        args.tick_ms.map(|ms| format!(" --tick-ms {ms}")).unwrap_or_default()
    );
    // On Ctrl-C (or the matrix script's timeout) the test's future is dropped, and with it the
    // cluster, which kills the processes it started.
    let outcome = tokio::select! {
        outcome = runner::run(&options) => outcome,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("{name}: interrupted; the cluster was stopped");
            return ExitCode::from(3);
        }
    };
    match outcome {
        Ok(result) => {
            let verdict = result.verdict;
            let ledger = match result.results.get("ledger") {
                Some(ledger) => {
                    let summary = &ledger["report"]["summary"];
                    format!(
                        ", ledger {} ({} charges succeeded, {} declined, {} refunds, {} bookings \
                         confirmed, settled in {:.1} s)",
                        ledger["verdict"],
                        summary["charges_succeeded"],
                        summary["charges_declined"],
                        summary["refunds"],
                        summary["bookings_confirmed"],
                        ledger["quiesce"]["waited_s"].as_f64().unwrap_or(f64::NAN)
                    )
                }
                None => String::new(),
            };
            // Operations whose outcome the client never learned: the checkers' hardest case.
            let operations = &result.results["operations"];
            let unknown = operations["by_completion"]["info"].as_u64().unwrap_or(0);
            let total = operations["total"].as_u64().unwrap_or(0);
            println!(
                "{name}: {} (linearizability {}, booking {}, convergence {}{ledger}, resources {}{}; \
                 {total} operations, {unknown} of unknown outcome); report: {}",
                verdict_name(verdict),
                result.results["linearizability"]["verdict"],
                result.results["booking"]["verdict"],
                result.results["convergence"]["verdict"],
                result.results["resources"]["verdict"],
                if args.soak { "" } else { " (not judged: no --soak)" },
                result.report_dir.join("timeline.html").display()
            );
            if verdict != Verdict::Valid {
                println!("reproduce: {reproduce}");
            }
            ExitCode::from(match verdict {
                Verdict::Valid => 0,
                Verdict::Invalid => 1,
                Verdict::Unknown => 2,
            })
        }
        Err(error) => {
            eprintln!("{name}: the test could not run: {error}");
            eprintln!("reproduce: {reproduce}");
            ExitCode::from(3)
        }
    }
}

fn verdict_name(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Valid => "valid",
        Verdict::Invalid => "INVALID",
        Verdict::Unknown => "unknown",
    }
}
