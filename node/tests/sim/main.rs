//! The deterministic simulator: the whole booking cluster in one process, replayable from a
//! seed. Real nodes (`node::Node`: the Raft glue, the gRPC peer network, the state machine, the
//! leader-only workers, the client API) run as turmoil hosts on simulated disks, with simulated
//! TCP and time; simulated buyers drive them through the real SDK; a nemesis drawn from the
//! seed partitions, pauses, crashes (losing unsynced writes), skews clocks, moves leaders and
//! changes membership; the shared checkers of `statemachine::check` judge the history.
//!
//! A test target without libtest's harness, so that it takes its own arguments:
//!
//! ```text
//! cargo test --release --workspace --test sim                      # the CI set (see ci())
//! cargo test --release --workspace --test sim -- --seeds 1..1000   # a long run, with a summary
//! cargo test --release --workspace --test sim -- --seed 7 --trace  # replay one seed, traced
//! ```
//! `scripts/sim.sh` wraps these. Options: `--nodes 3|5` (default: drawn from the seed),
//! `--provider on|off` (the payment provider as a host, its show judged against its ledger;
//! default: on for even seeds),
//! `--inject NAME` (a planted bug, `statemachine::inject`; `--list-injections` names them),
//! `--expect-invalid` (succeed once some seed fails, and stop there: proves a bug is found),
//! `--jobs N` (threads; default: every core).

mod nemesis;
mod net;
mod panics;
mod run;
mod workload;
mod world;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use statemachine::check::Verdict;
use statemachine::inject::Bug;
use world::Options;

/// Seeds that once failed, kept as regression tests (each with what it found), run as they
/// were found: without a provider.
const REGRESSIONS: &[(u64, &str)] = &[
    (7, "a leader restarted after a power loss resumed its term without the entries it lost"),
    (30, "the same: replicas diverged, an acknowledged ticket was lost, a ticket id given twice"),
    (9189, "the deadline checks missed the trail of a hold whose answer was lost (checker gap)"),
];
/// Seeds the CI run checks.
const CI_SEEDS: u64 = 300;
/// Seeds the CI run runs twice, comparing their traces.
const REPLAY_SEEDS: u64 = 30;
/// Seeds of each planted bug's check in CI: one of them must be judged invalid (the check
/// stops at the first).
const CI_BUG_SEEDS: u64 = 100;

/// Parsed arguments.
#[derive(Clone, Copy)]
struct Cli {
    seeds: Option<(u64, u64)>,
    nodes: Option<u64>,
    provider: Option<bool>,
    bug: Option<Bug>,
    trace: bool,
    expect_invalid: bool,
    jobs: u64,
    /// Runs one seed and prints its outcome as JSON (what `many` spawns).
    child: bool,
}

fn parse() -> Result<Cli, String> {
    let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get() as u64);
    let mut cli = Cli {
        seeds: None,
        nodes: None,
        provider: None,
        bug: None,
        trace: false,
        expect_invalid: false,
        jobs: cores,
        child: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--seed" => {
                let seed: u64 = value("--seed")?.parse().map_err(|e| format!("--seed: {e}"))?;
                cli.seeds = Some((seed, seed + 1));
            }
            "--seeds" => {
                let text = value("--seeds")?;
                let (a, b) = text.split_once("..").ok_or("--seeds: expected A..B")?;
                let a = a.parse().map_err(|e| format!("--seeds: {e}"))?;
                let b = b.parse().map_err(|e| format!("--seeds: {e}"))?;
                if a >= b {
                    return Err("--seeds: A..B needs A < B".into());
                }
                cli.seeds = Some((a, b));
            }
            "--nodes" => {
                let nodes = value("--nodes")?.parse().map_err(|e| format!("--nodes: {e}"))?;
                if nodes != 3 && nodes != 5 {
                    return Err("--nodes: 3 or 5".into());
                }
                cli.nodes = Some(nodes);
            }
            "--provider" => {
                cli.provider = match value("--provider")?.as_str() {
                    "on" => Some(true),
                    "off" => Some(false),
                    other => return Err(format!("--provider: on or off, not {other:?}")),
                };
            }
            "--inject" => cli.bug = Some(value("--inject")?.parse()?),
            "--list-injections" => {
                for bug in Bug::ALL {
                    println!("{bug}");
                }
                std::process::exit(0);
            }
            "--trace" => cli.trace = true,
            "--jobs" => {
                let jobs: u64 = value("--jobs")?.parse().map_err(|e| format!("--jobs: {e}"))?;
                cli.jobs = jobs.max(1);
            }
            "--expect-invalid" => cli.expect_invalid = true,
            "--child" => cli.child = true,
            // What cargo test may pass to every test target.
            "--nocapture" | "--quiet" | "-q" | "--color" | "--test-threads" => {}
            other if other.starts_with("--test-threads=") || other.starts_with("--color=") => {}
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(cli)
}

fn main() -> ExitCode {
    // `SIM_LOG=turmoil=trace,openraft=debug` logs on stderr, in simulated time order.
    if let Ok(filter) = std::env::var("SIM_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .without_time()
            .init();
    }
    let cli = match parse() {
        Ok(cli) => cli,
        Err(error) => {
            eprintln!("sim: {error}");
            return ExitCode::from(2);
        }
    };
    if cli.child {
        let Some((seed, _)) = cli.seeds else {
            eprintln!("sim: --child needs --seed");
            return ExitCode::from(2);
        };
        let nodes = nodes_of(seed, cli.nodes);
        let provider = provider_of(seed, cli.provider);
        let verbose = cli.trace;
        panics::end_run_on_panic();
        let outcome = run::run(Options { seed, nodes, bug: cli.bug, verbose, provider });
        println!("{}", serde_json::to_string(&outcome).expect("outcomes encode"));
        return ExitCode::SUCCESS;
    }
    let passed = match cli.seeds {
        None => ci(cli.jobs),
        Some((first, end)) => many(&cli, first, end).0,
    };
    if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The nodes of a seed's cluster: 5 for every fourth seed, else 3, unless fixed.
fn nodes_of(seed: u64, fixed: Option<u64>) -> u64 {
    fixed.unwrap_or(if seed % 4 == 3 { 5 } else { 3 })
}

/// Whether a seed's run has the payment provider: even seeds, unless fixed.
fn provider_of(seed: u64, fixed: Option<bool>) -> bool {
    fixed.unwrap_or(seed.is_multiple_of(2))
}

/// The command that replays `seed` with its full trace.
fn replay_command(seed: u64, cli: &Cli) -> String {
    let mut command = format!("bash scripts/sim.sh --seed {seed} --trace");
    if let Some(nodes) = cli.nodes {
        command.push_str(&format!(" --nodes {nodes}"));
    }
    if let Some(provider) = cli.provider {
        command.push_str(if provider { " --provider on" } else { " --provider off" });
    }
    if let Some(bug) = cli.bug {
        command.push_str(&format!(" --inject {bug}"));
    }
    command
}

/// Runs seeds `first..end` on `cli.jobs` threads; prints each failure with its replay command,
/// then a summary. Passes if every seed is valid (or, with `--expect-invalid`, if some is not:
/// then no seed starts after the first invalid one is found).
fn many(cli: &Cli, first: u64, end: u64) -> (bool, BTreeMap<u64, u64>) {
    let started = Instant::now();
    let total = end - first;
    let progress = indicatif::ProgressBar::new(total);
    if cli.trace || total == 1 || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let next = AtomicU64::new(first);
    let found = std::sync::atomic::AtomicBool::new(false);
    let outcomes: Mutex<BTreeMap<u64, run::Outcome>> = Mutex::default();
    // Each seed runs in a process of its own, exactly as its replay command runs it: a run
    // leaves traces in process-wide state (tokio's task ids, which decide the order in which a
    // crashed host's tasks are dropped), so a seed run after others can differ from its replay.
    std::thread::scope(|scope| {
        for _ in 0..cli.jobs.min(total).max(1) {
            scope.spawn(|| {
                loop {
                    if cli.expect_invalid && found.load(Ordering::Relaxed) {
                        return;
                    }
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        return;
                    }
                    let outcome = run_alone(seed, cli);
                    if outcome.verdict == Verdict::Invalid {
                        found.store(true, Ordering::Relaxed);
                    }
                    if outcome.verdict != Verdict::Valid {
                        progress.suspend(|| {
                            println!("seed {seed}: {:?}", outcome.verdict);
                            for problem in &outcome.problems {
                                println!("  {problem}");
                            }
                            println!("  replay: {}", replay_command(seed, cli));
                        });
                    }
                    progress.inc(1);
                    outcomes.lock().unwrap_or_else(PoisonError::into_inner).insert(seed, outcome);
                }
            });
        }
    });
    progress.finish_and_clear();
    let outcomes = outcomes.into_inner().unwrap_or_else(PoisonError::into_inner);
    let (mut valid, mut invalid, mut unknown) = (0u64, Vec::new(), Vec::new());
    let (mut ops, mut simulated) = ((0u64, 0u64, 0u64), 0f64);
    let mut fingerprints = BTreeMap::new();
    for (seed, outcome) in &outcomes {
        fingerprints.insert(*seed, fingerprint(&outcome.trace));
        if cli.trace {
            for line in &outcome.trace {
                println!("{line}");
            }
        }
        ops.0 += outcome.operations.0;
        ops.1 += outcome.operations.1;
        ops.2 += outcome.operations.2;
        simulated += outcome.simulated.as_secs_f64();
        if std::env::var_os("SIM_FINGERPRINTS").is_some() {
            println!("seed {seed}: trace fingerprint {:016x}", fingerprint(&outcome.trace));
        }
        match outcome.verdict {
            Verdict::Valid => valid += 1,
            Verdict::Invalid => invalid.push(*seed),
            Verdict::Unknown => unknown.push(*seed),
        }
    }
    let real = started.elapsed();
    let total = outcomes.len() as u64;
    let end = first + total;
    println!(
        "sim: {total} seeds ({first}..{end}{}, {} jobs): {valid} valid, {} invalid {:?}, {} \
         unknown {:?}; operations {} ok / {} fail / {} info; {simulated:.0} s simulated in \
         {:.1} s real ({:.0} ms per seed per job)",
        cli.bug.map(|bug| format!(", bug planted: {bug}")).unwrap_or_default(),
        cli.jobs,
        invalid.len(),
        invalid,
        unknown.len(),
        unknown,
        ops.0,
        ops.1,
        ops.2,
        real.as_secs_f64(),
        real.as_secs_f64() * 1000.0 * cli.jobs.min(total) as f64 / total.max(1) as f64,
    );
    let passed = if cli.expect_invalid {
        let found = !invalid.is_empty();
        println!("sim: expected an invalid seed: {}", if found { "found" } else { "NOT found" });
        found
    } else {
        invalid.is_empty() && unknown.is_empty()
    };
    (passed, fingerprints)
}

/// Runs `seed` in a child process (this test binary with `--child`), as a replay would, with
/// `cli`'s nodes, provider, bug and trace.
///
/// # Panics
///
/// If the child cannot be started. A child that dies without answering (a panic that unwound
/// out of the simulation, an abort) is an invalid run: its replay command shows why.
fn run_alone(seed: u64, cli: &Cli) -> run::Outcome {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = std::process::Command::new(exe);
    command.args(["--child", "--seed", &seed.to_string()]);
    if let Some(nodes) = cli.nodes {
        command.args(["--nodes", &nodes.to_string()]);
    }
    if let Some(provider) = cli.provider {
        command.args(["--provider", if provider { "on" } else { "off" }]);
    }
    if let Some(bug) = cli.bug {
        command.args(["--inject", bug.name()]);
    }
    if cli.trace {
        command.arg("--trace");
    }
    let output = command.stderr(std::process::Stdio::inherit()).output().expect("a child run");
    let text = String::from_utf8_lossy(&output.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|error| run::Outcome {
        verdict: Verdict::Invalid,
        problems: vec![format!(
            "the run died without an outcome ({}): it answered {last:?} ({error})",
            output.status
        )],
        trace: Vec::new(),
        operations: (0, 0, 0),
        simulated: std::time::Duration::ZERO,
    })
}

/// A hash of a trace (FNV-1a over its lines).
fn fingerprint(trace: &[String]) -> u64 {
    trace
        .iter()
        .flat_map(|line| line.bytes().chain([b'\n']))
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
        })
}

/// The CI set: the regression seeds and the first `CI_SEEDS` seeds valid; two seeds replaying
/// with identical full traces and `REPLAY_SEEDS` seeds with identical trace fingerprints; the
/// every planted bug found within `CI_BUG_SEEDS` seeds.
fn ci(jobs: u64) -> bool {
    let mut passed = true;
    let plain = Cli {
        seeds: None,
        nodes: None,
        provider: None,
        bug: None,
        trace: false,
        expect_invalid: false,
        jobs,
        child: false,
    };
    let as_found = Cli { provider: Some(false), ..plain };
    for &(seed, found) in REGRESSIONS {
        let outcome = run_alone(seed, &as_found);
        println!("sim: regression seed {seed} ({found}): {:?}", outcome.verdict);
        passed &= outcome.verdict == Verdict::Valid;
    }
    let (valid, fingerprints) = many(&plain, 1, 1 + CI_SEEDS);
    passed &= valid;
    passed &= replays_identically(2) && replays_identically(3);
    // A second run of the first seeds must give every one of them the trace it had.
    let (_, again) = many(&plain, 1, 1 + REPLAY_SEEDS);
    let differing: Vec<u64> = again
        .iter()
        .filter(|(seed, print)| fingerprints.get(seed) != Some(print))
        .map(|(seed, _)| *seed)
        .collect();
    if differing.is_empty() {
        println!("sim: seeds 1..={REPLAY_SEEDS} run again: every trace identical");
    } else {
        println!("sim: seeds 1..={REPLAY_SEEDS} run again: DIFFERENT traces for {differing:?}");
        passed = false;
    }
    for bug in Bug::ALL {
        let buggy = Cli { bug: Some(bug), expect_invalid: true, ..plain };
        passed &= many(&buggy, 1, 1 + CI_BUG_SEEDS).0;
    }
    println!("sim: {}", if passed { "passed" } else { "FAILED" });
    passed
}

/// Whether two runs of `seed`, each in a process of its own, produce the same trace, line for
/// line (the trace with every operation of the history, as `--trace` prints it).
fn replays_identically(seed: u64) -> bool {
    let traced = Cli {
        seeds: None,
        nodes: None,
        provider: None,
        bug: None,
        trace: true,
        expect_invalid: false,
        jobs: 1,
        child: false,
    };
    let first = run_alone(seed, &traced).trace;
    let second = run_alone(seed, &traced).trace;
    if first == second {
        println!("sim: seed {seed} replays identically ({} trace lines)", first.len());
        return true;
    }
    let at = first
        .iter()
        .zip(&second)
        .position(|(a, b)| a != b)
        .unwrap_or(first.len().min(second.len()));
    println!("sim: seed {seed} does NOT replay identically; traces part at line {at}:");
    for (a, b) in first.iter().zip(&second).skip(at.saturating_sub(2)).take(5) {
        println!("  {a}\n  {b}");
    }
    false
}
