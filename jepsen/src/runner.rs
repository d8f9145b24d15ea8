//! One Jepsen test, end to end: start the cluster (and, for the `payments` workload, the
//! payment provider it charges through), create the workload's shows, run the clients and the
//! nemeses together, heal, wait for recovery, read everything back, check, and write the report.
//!
//! Owns the order of those phases and the verdict (valid, invalid, unknown) with the exit codes
//! the command line gives them (0, 1, 2). Separates what the system did from harness failures:
//! a cluster that cannot start, or shows that cannot be created, is a harness error (exit 3),
//! never a verdict. Never builds anything: the binaries must exist.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::{Client, Config};
use serde_json::json;
use statemachine::check::Verdict;
use statemachine::check::booking::check_bookings;
use statemachine::check::deadlines::{Step, Trails as ShowTrails, check_deadlines};
use statemachine::check::history::{Completion, History};
use statemachine::check::linearizable::{Budget, check_history};
use statemachine::check::recorder::Recorder;
use statemachine::check::workload::short_deadline_policy;
use statemachine::{HoldId, ShowId};
use testkit::{Addressing, Cluster, ClusterOptions};
use tokio::sync::watch;

use crate::nemesis::{self, Nemesis, NemesisEvent, Schedule};
use crate::payments;
use crate::report::{self, OpOutcome, Report, TimelineOp};
use crate::resources;
use crate::workload::{self, Context, Workload};

/// What one test does.
#[derive(Clone, Debug)]
pub struct TestOptions {
    /// Nodes: 3 or 5.
    pub nodes: u64,
    /// The workload.
    pub workload: Workload,
    /// The nemesis.
    pub nemesis: Nemesis,
    /// How long clients and nemesis run.
    pub time_limit: Duration,
    /// Client operations per second, in all.
    pub rate: f64,
    /// Client processes.
    pub concurrency: u64,
    /// The seed of every random choice.
    pub seed: u64,
    /// Where the report goes.
    pub report_dir: PathBuf,
    /// Where the cluster's data and logs go.
    pub data_dir: PathBuf,
    /// Where the bookingd binary is (default: next to this executable).
    pub bin_dir: Option<PathBuf>,
    /// The binary's name: `bookingd`, or the test-only `bookingd-unsafe`.
    pub binary: String,
    /// Extra arguments for every node (`--inject BUG` with `bookingd-unsafe`).
    pub node_args: Vec<String>,
    /// The first loopback port the cluster may use.
    pub port_base: u16,
    /// How long the linearizability checker may search, in all.
    pub check_time: Duration,
    /// Run the provider nemesis beside the node nemesis (the `payments` workload only).
    pub provider_faults: bool,
    /// Judge the nodes' resources as a soak: memory, data folder and snapshots must stop
    /// growing ([`crate::resources::judge`]). They are sampled in every run.
    pub soak: bool,
    /// The nodes' tick period, when not their default (nor, for the deadlines workload,
    /// [`DEADLINES_TICK_MS`]).
    pub tick_ms: Option<u64>,
}

/// How a test ended.
#[derive(Clone, Debug)]
pub struct TestResult {
    /// The combined verdict.
    pub verdict: Verdict,
    /// The results document (also in `results.json`).
    pub results: serde_json::Value,
    /// Where the report is.
    pub report_dir: PathBuf,
}

/// Why a test could not run (a harness problem, not a verdict on the cluster).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The cluster did not start or misbehaved outside the test's faults.
    #[error("cluster: {0}")]
    Cluster(#[from] testkit::ClusterError),
    /// A set-up call failed.
    #[error("set-up: {0}")]
    Setup(String),
    /// The report could not be written.
    #[error("report: {0}")]
    Report(#[from] std::io::Error),
}

/// Runs one test.
///
/// # Errors
///
/// A [`HarnessError`] when the test could not run; the cluster's misbehaviour is a verdict.
pub async fn run(options: &TestOptions) -> Result<TestResult, HarnessError> {
    let mut cluster_options = ClusterOptions::new(options.nodes, &options.data_dir);
    cluster_options.binary = options.binary.clone();
    cluster_options.bin_dir = options.bin_dir.clone();
    cluster_options.extra_args = options.node_args.clone();
    cluster_options.addressing = Addressing::suite(options.port_base);
    // Each process dials from an address of its own through the nodes' doors, so that the
    // `partition-clients` nemesis can cut processes off from a node.
    cluster_options.client_doors = true;
    if options.workload == Workload::Deadlines {
        // The expiry sweep lags deadlines by up to 10 s, as it would behind a busy or new
        // leader: a command must judge a deadline itself, never trust that the sweep ran.
        cluster_options.tick_ms = Some(DEADLINES_TICK_MS);
    }
    if options.tick_ms.is_some() {
        cluster_options.tick_ms = options.tick_ms;
    }
    let payments = options.workload == Workload::Payments;
    if options.provider_faults && !payments {
        return Err(HarnessError::Setup("--provider-faults needs --workload payments".into()));
    }
    let provider = payments::provider_address(options.port_base);
    if payments {
        // Every node's leader-only workers charge and refund through the provider.
        let url = payments::Paysim::url(provider);
        cluster_options.extra_args.extend(["--provider-url".to_owned(), url]);
    }
    let cluster = Arc::new(Cluster::start(cluster_options).await?);
    let paysim = if payments {
        let binary = cluster.binary().with_file_name("paysim");
        let secret = cluster.options().webhook().to_owned();
        let dir = options.data_dir.join("paysim");
        let nodes = node_urls(&cluster)?;
        let ca = cluster.ca_file()?;
        let started =
            payments::Paysim::start(&binary, provider, &dir, &nodes, &ca, &secret, options.seed);
        match started.await {
            Ok(paysim) => Some(paysim),
            Err(error) => {
                cluster.stop().await;
                return Err(HarnessError::Setup(format!("paysim: {error}")));
            }
        }
    } else {
        None
    };
    let outcome = run_on(options, &cluster, paysim.as_ref()).await;
    if let Some(paysim) = paysim {
        paysim.stop().await;
    }
    cluster.stop().await;
    outcome
}

async fn run_on(
    options: &TestOptions,
    cluster: &Arc<Cluster>,
    paysim: Option<&payments::Paysim>,
) -> Result<TestResult, HarnessError> {
    let client = cluster.client();
    let shows = workload::shows_of(options.workload, first_show(options.seed));
    let mut group = 1;
    let mut homes = Vec::new();
    for show in &shows {
        let placement = client
            .create_show(&show.new_show(), Some(&format!("jepsen-show-{}", show.show)))
            .await
            .map_err(|error| HarnessError::Setup(format!("create show {}: {error}", show.show)))?;
        group = placement.group_id;
        homes.push((show.show, placement.group_id));
    }
    // Linearizable: a replica that has not applied the creation yet must not answer.
    let map = client
        .get_seat_map_linearizable(shows[0].show)
        .await
        .map_err(|error| HarnessError::Setup(format!("seat map: {error}")))?;

    let origin = Instant::now();
    let since_origin = move || u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let recorder = Arc::new(Recorder::new(Box::new(since_origin)));
    let context = Arc::new(Context {
        http: crate::http::client(Some(cluster.ca_certificate())).map_err(HarnessError::Setup)?,
        nodes: node_urls(cluster)?,
        // The suite's options always set it (`ClusterOptions::new`).
        webhook_secret: cluster.options().webhook().to_owned(),
        recorder: Arc::clone(&recorder),
        workload: options.workload,
        shows: shows.clone(),
        price_version: map.price_version,
    });
    let (stop_clients, stop_clients_rx) = watch::channel(false);
    let (final_phase, final_phase_rx) = watch::channel(false);
    // Process p is bound to node p mod n: it asks that node first.
    let nodes = cluster.node_ids();
    let mut process_clients = Vec::new();
    for process in 0..options.concurrency as usize {
        let mut order = nodes.clone();
        order.rotate_left(process % nodes.len());
        let addresses = order.iter().map(|&id| cluster.address(id)).collect::<Result<_, _>>()?;
        let config =
            Config { local_address: Some(testkit::client_source(process)), ..client_config() };
        let client = Client::with_config(addresses, config)
            .map_err(|error| HarnessError::Setup(format!("client: {error}")))?;
        process_clients.push(cluster.trusting(client)?);
    }
    let clients = tokio::spawn(workload::run(
        Arc::clone(&context),
        process_clients,
        options.rate,
        options.seed,
        stop_clients_rx,
        final_phase_rx,
    ));

    // The nemeses run as long as the clients; each heals everything when told to stop. The
    // provider's runs beside the node nemesis, whichever that is.
    let mut schedule = Schedule::new(options.nemesis, group, options.seed);
    schedule.shows = homes;
    schedule.clients = (0..options.concurrency as usize).map(testkit::client_source).collect();
    let time_limit = options.time_limit;
    let node_faults = nemesis::run(cluster, &schedule, origin, tokio::time::sleep(time_limit));
    let provider_faults = async {
        match paysim {
            Some(paysim) => {
                let stop = tokio::time::sleep(time_limit);
                payments::run_faults(paysim, options.provider_faults, options.seed, origin, stop)
                    .await
            }
            None => Vec::new(),
        }
    };
    let sampling = resources::run(cluster, &context.http, origin, tokio::time::sleep(time_limit));
    let (timeline, provider_timeline, samples): (Vec<NemesisEvent>, _, _) =
        tokio::join!(node_faults, provider_faults, sampling);
    stop_clients.send_replace(true);

    // Recovery: every group elects a leader and the replicas converge; then the final reads.
    let mut recovery = Vec::new();
    if let Err(error) = cluster.heal_all().await {
        // A node that crashed (and crashes again when restarted) is the finding, judged below
        // with the history: the heal failing because of it is not a harness problem.
        if cluster.crashes().is_empty() {
            return Err(error.into());
        }
        let first_line = error.to_string().lines().next().unwrap_or_default().to_owned();
        recovery.push(json!({ "heal": first_line }));
    }
    for group in cluster.group_ids() {
        match cluster.leader_within(group, Duration::from_secs(30)).await {
            Ok(leader) => recovery.push(json!({ "group": group, "leader": leader })),
            Err(error) => recovery.push(json!({ "group": group, "error": error.to_string() })),
        }
    }
    final_phase.send_replace(true);
    let buyers = match tokio::time::timeout(Duration::from_secs(120), clients).await {
        Ok(Ok(Ok(buyers))) => buyers,
        Ok(Ok(Err(error))) => return Err(HarnessError::Setup(format!("clients: {error}"))),
        Ok(Err(error)) => return Err(HarnessError::Setup(format!("client task: {error}"))),
        Err(_) => return Err(HarnessError::Setup("final reads did not finish in 120 s".into())),
    };
    let history = recorder.history();

    // The deadlines: each show's holds', tickets', waitlist entries' and offers' audit trails,
    // which the deadline checks judge the answers by.
    let trails = if options.workload == Workload::Deadlines {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut read = Ok(BTreeMap::new());
        for show in &shows {
            let trails = testkit::workload::audit_trails(&client, show.show, &history, deadline);
            match (trails.await, &mut read) {
                (Ok(trails), Ok(read)) => drop(read.insert(show.show, trails)),
                (Err(error), _) => read = Err(error),
                (Ok(_), Err(_)) => {}
            }
        }
        if let Ok(trails) = &read {
            let text = serde_json::to_string_pretty(trails).unwrap_or_default();
            std::fs::create_dir_all(&options.report_dir)?;
            std::fs::write(options.report_dir.join(TRAILS_FILE), text + "\n")?;
        }
        Some(read)
    } else {
        None
    };

    // The money: once the payments settle, the provider's ledger against the cluster's state.
    let judged = match paysim {
        Some(paysim) => {
            let show_ids: Vec<u64> = shows.iter().map(|show| show.show).collect();
            Some(payments::judge(paysim, &client, &buyers, &show_ids).await)
        }
        None => None,
    };

    // Replica convergence, per group.
    let mut convergence = Vec::new();
    let mut converged = Verdict::Valid;
    for group in cluster.group_ids() {
        match cluster.wait_converged(group, Duration::from_secs(30)).await {
            Ok(done) => convergence.push(json!({
                "group": group,
                "verdict": "valid",
                "applied_index": done.applied_index,
                "digest": done.digest,
                "members": done.members,
            })),
            Err(error) => {
                converged = Verdict::Invalid;
                convergence.push(json!({
                    "group": group, "verdict": "invalid", "error": error.to_string(),
                }));
            }
        }
    }

    let trails = trails.as_ref().map(|trails| trails.as_ref().map_err(String::as_str));
    let checked = check(&history, options.workload, options.seed, options.check_time, trails);
    let Checked { linearizable, linearizability, booking, bookings } = checked;
    // A node that exited by itself (a panic on a broken invariant, say) is a finding too.
    let crashes: Vec<_> = cluster
        .crashes()
        .into_iter()
        .map(|(node, why)| json!({ "node": node, "crash": why }))
        .collect();
    let stayed_up = if crashes.is_empty() { Verdict::Valid } else { Verdict::Invalid };
    let ledger_verdict = judged.as_ref().map(|judged| judged.verdict);
    let (bounded, resources) = resources::judge(&samples, options.time_limit);
    let soak_verdict = options.soak.then_some(bounded);
    let verdict = Verdict::combine(
        [
            linearizable,
            Some(booking),
            Some(converged),
            Some(stayed_up),
            ledger_verdict,
            soak_verdict,
        ]
        .into_iter()
        .flatten(),
    );
    let linearizability = match linearizable {
        Some(verdict) => json!({ "verdict": verdict, "shows": linearizability }),
        None => json!({ "verdict": "not_applicable", "reason": linearizability }),
    };
    let mut results = json!({
        "verdict": verdict,
        "workload": options.workload.to_string(),
        "nemesis": options.nemesis.to_string(),
        "provider_faults": options.provider_faults,
        "nodes": options.nodes,
        "seed": options.seed,
        "time_limit_s": options.time_limit.as_secs_f64(),
        "operations": summary(&history),
        "linearizability": linearizability,
        "booking": { "verdict": booking, "checks": bookings },
        "convergence": { "verdict": converged, "groups": convergence },
        "recovery": recovery,
        "unexpected_exits": crashes,
        "resources": resources,
        "soak": options.soak,
    });
    if let Some(judged) = &judged {
        results["ledger"] = judged.results.clone();
        results["provider_nemesis"] = serde_json::to_value(&provider_timeline).unwrap_or_default();
    }

    let lines: Vec<String> = history
        .events
        .iter()
        .map(|event| serde_json::to_string(event).unwrap_or_default())
        .collect();
    let ops = timeline_ops(&history);
    let title = format!(
        "jepsen test --nodes {} --workload {} --nemesis {} --seed {}",
        options.nodes, options.workload, options.nemesis, options.seed
    );
    report::write(
        &options.report_dir,
        &Report {
            title: &title,
            history: &lines,
            nemesis: &timeline,
            results: &results,
            ops: &ops,
        },
    )?;
    if let Some(judged) = &judged {
        write_payments_files(&options.report_dir, judged, &provider_timeline)?;
    }
    let samples: Vec<String> =
        samples.iter().map(|sample| serde_json::to_string(sample).unwrap_or_default()).collect();
    std::fs::write(options.report_dir.join("resources.jsonl"), samples.join("\n") + "\n")?;
    Ok(TestResult { verdict, results, report_dir: options.report_dir.clone() })
}

/// The `payments` workload's extra report files: `ledger.json` (the provider's records as
/// read at the end), `cluster-state.json` (the payments, bookings and booked seats the ledger
/// was judged against; `jepsen check` judges the two again) and `provider.jsonl` (the
/// provider nemesis's steps).
fn write_payments_files(
    dir: &std::path::Path,
    judged: &payments::Judged,
    provider_timeline: &[payments::ProviderEvent],
) -> std::io::Result<()> {
    fn pretty<T: serde::Serialize>(value: &T) -> serde_json::Result<String> {
        serde_json::to_string_pretty(value).map(|text| text + "\n")
    }
    if let Some(ledger) = &judged.ledger {
        std::fs::write(dir.join(LEDGER_FILE), pretty(ledger)?)?;
    }
    if let Some(state) = &judged.state {
        std::fs::write(dir.join(CLUSTER_STATE_FILE), pretty(state)?)?;
    }
    let mut lines = String::new();
    for event in provider_timeline {
        lines.push_str(&serde_json::to_string(event)?);
        lines.push('\n');
    }
    std::fs::write(dir.join("provider.jsonl"), lines)
}

/// The SDK settings of the client processes: a short retry budget, so that a call caught by a
/// fault ends (as `info` when its outcome is unknown) instead of riding the fault out, which
/// keeps indeterminate operations in the histories the checkers judge.
fn client_config() -> Config {
    Config {
        retry_budget: Duration::from_secs(3),
        attempt_timeout: Duration::from_millis(1_500),
        ..Config::default()
    }
}

/// The first show id of a test with `seed` (tests of different seeds use different shows).
pub fn first_show(seed: u64) -> u64 {
    1_000 + seed % 1_000 * 10
}

/// The `payments` workload's ledger as read at the end of a test, in its report folder.
pub const LEDGER_FILE: &str = "ledger.json";
/// The cluster's final state the ledger was judged against, in the report folder.
pub const CLUSTER_STATE_FILE: &str = "cluster-state.json";

/// The checkers' verdicts on a history.
pub struct Checked {
    /// Linearizability, all shows; `None` where it does not apply (the `payments` workload).
    pub linearizable: Option<Verdict>,
    /// Per show (or why it does not apply).
    pub linearizability: serde_json::Value,
    /// The booking checks, all of them.
    pub booking: Verdict,
    /// Each check.
    pub bookings: serde_json::Value,
}

/// The tick worker's period (`--tick-ms`) of the `deadlines` workload's nodes: a hundred times
/// the default, so that the sweep of overdue holds and grants lags their deadlines by up to
/// 10 s: nearly every expiry is found by the command that meets it, and a payment that comes
/// late has a window of seconds in which only the command itself can refuse it (with a sweep
/// every second, the smoke's `confirm-late` run was caught in 4 of 5 runs; every 10 s, 6 of 6).
pub const DEADLINES_TICK_MS: u64 = 10_000;

/// The `deadlines` workload's audit trails (by show: its holds' and tickets') as read at the
/// end of a test, in its report folder (`jepsen check` judges them again).
pub const TRAILS_FILE: &str = "audit-trails.json";

/// The audit trails of a `deadlines` test, by show, or why they could not be read.
pub type Trails<'a> = Result<&'a BTreeMap<u64, ShowTrails>, &'a str>;

/// The trails in a report's [`TRAILS_FILE`]: by show, or, as tests before the grant checks wrote
/// them, the holds' trails of `first_show` alone.
///
/// # Errors
///
/// Text that is neither.
pub fn parse_trails(text: &str, first_show: u64) -> Result<BTreeMap<u64, ShowTrails>, String> {
    serde_json::from_str(text).or_else(|error| {
        let holds: BTreeMap<HoldId, Vec<Step>> =
            serde_json::from_str(text).map_err(|_| error.to_string())?;
        Ok(BTreeMap::from([(first_show, ShowTrails { holds, ..ShowTrails::default() })]))
    })
}

/// Runs the linearizability checker (for at most `check_time`) and the booking checks on the
/// history of a test of `workload` with `seed`; for the `deadlines` workload, the deadline
/// checks of each show with its audit `trails` (its holds', tickets', entries' and offers')
/// instead (the model has
/// no clock, and the booking checks assume no deadline passes).
pub fn check(
    history: &History,
    workload: Workload,
    seed: u64,
    check_time: Duration,
    trails: Option<Trails<'_>>,
) -> Checked {
    let shows = workload::shows_of(workload, first_show(seed));
    if workload == Workload::Deadlines {
        let reason = "the shows' holds, payments, grants and offers expire within seconds and the \
                      model has no clock; the deadline checks judge them";
        let (booking, bookings) = match trails {
            Some(Ok(trails)) => {
                let mut verdicts = Vec::new();
                let mut by_show = serde_json::Map::new();
                for show in &shows {
                    let (id, window) = (ShowId(show.show), show.admission_window);
                    let (verdict, reports) = match trails.get(&show.show) {
                        None => (Verdict::Unknown, json!({ "error": "no audit trails" })),
                        Some(trails) => {
                            let policy = short_deadline_policy();
                            match check_deadlines(history, id, &policy, window, trails) {
                                Ok(reports) => (
                                    Verdict::combine(reports.iter().map(|report| report.verdict)),
                                    serde_json::to_value(&reports).unwrap_or_default(),
                                ),
                                Err(error) => {
                                    (Verdict::Unknown, json!({ "error": error.to_string() }))
                                }
                            }
                        }
                    };
                    verdicts.push(verdict);
                    by_show.insert(format!("show {}", show.show), reports);
                }
                (Verdict::combine(verdicts), serde_json::Value::Object(by_show))
            }
            Some(Err(error)) => (Verdict::Unknown, json!({ "error": error })),
            None => (Verdict::Unknown, json!({ "error": "no audit trails" })),
        };
        return Checked { linearizable: None, linearizability: json!(reason), booking, bookings };
    }
    let setups = shows.iter().map(|show| (statemachine::ShowId(show.show), show.model_setup()));
    let setups: BTreeMap<_, _> = setups.collect();
    let deadline = Instant::now() + check_time;
    let (linearizable, linearizability) = if workload == Workload::Payments {
        // The model cannot follow this workload: its payment outcomes and refund completions
        // are proposed by the leaders' workers, not by any client, so they are not in the
        // history, and the model would keep every checked-out hold `processing` for ever while
        // the cluster (rightly) confirms it. The money is judged against the provider's ledger
        // instead (`ledger` in the results); the model-free booking checks still run.
        let reason = "payment outcomes and refunds are proposed by the cluster's own workers, \
                      so they are not in the history the model replays; the ledger checker \
                      judges them";
        (None, json!(reason))
    } else {
        let linearizability = check_history(history, &setups, 0, Budget::default(), &mut || {
            Instant::now() < deadline
        });
        match linearizability {
            Ok(shows) => {
                let verdict = Verdict::combine(shows.iter().map(|show| show.verdict));
                (Some(verdict), serde_json::to_value(&shows).unwrap_or_default())
            }
            Err(error) => (Some(Verdict::Unknown), json!({ "error": error.to_string() })),
        }
    };
    let (booking, bookings) = match check_bookings(history) {
        Ok(reports) => {
            let verdict = Verdict::combine(reports.iter().map(|report| report.verdict));
            (verdict, serde_json::to_value(&reports).unwrap_or_default())
        }
        Err(error) => (Verdict::Unknown, json!({ "error": error.to_string() })),
    };
    Checked { linearizable, linearizability, booking, bookings }
}

/// Counts of operations by completion.
fn summary(history: &History) -> serde_json::Value {
    let Ok(operations) = history.operations() else { return json!(null) };
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for operation in &operations {
        let kind = match &operation.completion {
            Completion::Ok { value, .. } if value.rejection().is_some() => "rejected",
            Completion::Ok { .. } => "ok",
            Completion::Fail { .. } => "fail",
            Completion::Unknown => "info",
        };
        *counts.entry(kind).or_insert(0) += 1;
    }
    json!({ "total": operations.len(), "by_completion": counts })
}

/// The operations as the timeline draws them.
fn timeline_ops(history: &History) -> Vec<TimelineOp> {
    let Ok(operations) = history.operations() else { return Vec::new() };
    let completed: BTreeMap<u64, u64> = history
        .events
        .iter()
        .filter(|event| event.kind != statemachine::check::history::EventKind::Invoke)
        .map(|event| (event.op, event.time_ns))
        .collect();
    operations
        .iter()
        .map(|operation| {
            let (outcome, label) = match &operation.completion {
                Completion::Ok { value, .. } => (OpOutcome::Ok, format!("{value:?}")),
                Completion::Fail { .. } => (OpOutcome::Fail, "fail".to_owned()),
                Completion::Unknown => (OpOutcome::Info, "unknown".to_owned()),
            };
            TimelineOp {
                process: operation.process,
                function: operation.call.function().to_owned(),
                label: format!("{:?} → {label}", operation.call),
                start_ns: operation.invoke_ns,
                end_ns: completed.get(&operation.op).copied(),
                outcome,
            }
        })
        .collect()
}

/// Every node's base URL (`https://host:port` when the nodes serve TLS).
fn node_urls(cluster: &Cluster) -> Result<Vec<String>, HarnessError> {
    Ok(cluster.node_ids().into_iter().map(|id| cluster.url(id, "")).collect::<Result<_, _>>()?)
}
