//! Failover time: how long after its leader is killed (SIGKILL) each data group acknowledges a
//! write again, over many kills, alone or beside the benchmark's load.
//!
//! Owns the kill cycle, the probes and the report. The cluster is the benchmark's (three
//! `bookingd` nodes with data on disk, started by [`ClusterBackend`]), the load is the
//! benchmark's driver in its open loop, and the probes are what a front end does: SDK calls
//! with the SDK's default retry policy, so the time includes the client finding the new leader.
//!
//! One cycle: the node to kill is the next (in turn) that leads a data group; its groups' terms
//! are read; it is killed and reaped; from then on, each group's time is from the kill until
//! the first probe started after the kill is acknowledged. The node is restarted once every
//! group it led answered (or [`ACK_WAIT`] passed) and waited for until it applied what the
//! leaders had committed, and the terms are read again: a group the killed node did not lead
//! must not have changed term, and one it led should have needed one election. Before the
//! first kill, the load (if any) runs alone for a while and every term change then is a
//! spurious election.
//!
//! Never judges by a node's own word what it can check from the outside: times are the
//! prober's, and the load's end-of-run check compares what was acknowledged with the seat maps
//! read back.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{Client, NewShow, ShowPolicy};
use testkit::{Addressing, Cluster, ClusterOptions, GroupId, NodeId};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

use crate::bench::cluster::{self as bench_cluster, ClusterBackend};
use crate::bench::driver::{self, RunResult, RunSpec};
use crate::bench::workload::WorkloadKind;
use crate::bench::{Backend, BenchError};

/// How long a group may take to acknowledge a write after its leader was killed before the
/// cycle gives up on it (and the run fails).
pub const ACK_WAIT: Duration = Duration::from_secs(20);

/// How long the killed node may take to catch up once it is back.
const CATCH_UP_WAIT: Duration = Duration::from_secs(60);

/// Seats of each probe show: a probe holds the next one.
const PROBE_SEATS: u32 = statemachine::limits::SEATS_PER_SHOW_MAX;

/// Probe calls one group may have in flight; a tick beyond it is skipped (and counted).
const PROBES_IN_FLIGHT_MAX: usize = 256;

/// Sessions' worth of holds each probe keeps at hand in the background.
const TOKENS_AT_HAND: u32 = 4;

/// Probe show ids start here (the benchmark's runs use multiples of 100,000 from 100,001).
const PROBE_SHOW_BASE: u64 = 900_000_000;

/// Raft timing given to every node; `None` fields keep the daemon's defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// `--heartbeat-ms`.
    pub heartbeat_ms: Option<u64>,
    /// `--election-min-ms`.
    pub election_min_ms: Option<u64>,
    /// `--election-max-ms`.
    pub election_max_ms: Option<u64>,
}

/// The benchmark's load beside the kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// The workload.
    pub workload: WorkloadKind,
    /// Hold attempts offered per second (the open loop).
    pub rate: u32,
    /// Concurrent workers.
    pub clients: u32,
    /// Seats of the workload (its shows' total).
    pub seats: u32,
}

/// One measurement.
#[derive(Clone, Debug)]
pub struct Options {
    /// Kills (each of the leader of at least one data group).
    pub kills: u32,
    /// One kill per period (a cycle that takes longer starts the next at once).
    pub period: Duration,
    /// Before the first kill, how long the cluster (and its load) runs untouched.
    pub quiet: Duration,
    /// A new probe per data group this often.
    pub probe_interval: Duration,
    /// Data groups.
    pub groups: u64,
    /// Raft timing.
    pub timing: Timing,
    /// The load, if any.
    pub load: Option<Load>,
    /// Node `i` listens on 127.0.0.`i` from this port.
    pub port_base: u16,
    /// Where the nodes' data lives (a fresh directory inside, removed afterwards).
    pub data_dir: PathBuf,
    /// The load's seed.
    pub seed: u64,
}

/// Why a measurement could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FailoverError {
    /// The cluster or its load could not be set up or driven.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// A node could not be killed, restarted or asked.
    #[error(transparent)]
    Cluster(#[from] testkit::ClusterError),
    /// An SDK call of the set-up failed.
    #[error("{0}")]
    Client(String),
    /// The restarted node did not catch up in time.
    #[error("node {node} did not catch up within {CATCH_UP_WAIT:?}: {last}")]
    Behind {
        /// The node.
        node: NodeId,
        /// What it last reported.
        last: String,
    },
}

/// One group's failover in one cycle.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupFailover {
    /// The group.
    pub group: GroupId,
    /// From the kill to the first acknowledged probe started after it; `None` if none within
    /// [`ACK_WAIT`].
    pub first_ack: Option<Duration>,
    /// From the kill to the acknowledgement of the last probe that was in flight at the kill
    /// (the SDK retried it through the failover, backing off); `None` if none was.
    pub caught: Option<Duration>,
    /// Elections the group needed (its term's advance over the cycle).
    pub elections: u64,
}

/// One kill.
#[derive(Clone, Debug, PartialEq)]
pub struct Cycle {
    /// The node killed.
    pub node: NodeId,
    /// The groups it led.
    pub groups: Vec<GroupFailover>,
    /// Groups it did not lead whose term changed during the cycle (restart included).
    pub disturbed: Vec<GroupId>,
    /// Whether the load was still running when the node was killed.
    pub under_load: bool,
}

/// What the probes saw over the whole run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeTally {
    /// Probes acknowledged.
    pub acknowledged: u64,
    /// Probes refused or failed (their outcome known or not), by booking code.
    pub failed: BTreeMap<String, u64>,
    /// Ticks skipped because too many probes were in flight.
    pub skipped: u64,
}

/// A whole measurement.
#[derive(Debug)]
pub struct Report {
    /// What was measured, as asked.
    pub options: Options,
    /// The timing the nodes ran with, as `--heartbeat-ms/--election-min-ms/--election-max-ms`.
    pub timing: (u64, u64, u64),
    /// Term changes of every group while nothing was killed.
    pub quiet_elections: u64,
    /// The nodes' CPU while nothing was killed (probes and load included), cores.
    pub quiet_cpu: Option<f64>,
    /// Every kill, in order.
    pub cycles: Vec<Cycle>,
    /// The probes.
    pub probes: ProbeTally,
    /// The load's run, if there was a load and it finished.
    pub load: Option<RunResult>,
    /// Why the load could not be run or checked.
    pub load_problem: Option<String>,
}

impl Report {
    /// Every group's time to its first acknowledged write, over all cycles, in order; groups
    /// that did not acknowledge within [`ACK_WAIT`] are left out (see [`Report::unanswered`]).
    pub fn times(&self) -> Vec<Duration> {
        let mut times: Vec<Duration> = self
            .cycles
            .iter()
            .flat_map(|cycle| cycle.groups.iter().filter_map(|group| group.first_ack))
            .collect();
        times.sort_unstable();
        times
    }

    /// Group failovers with no acknowledged write within [`ACK_WAIT`].
    pub fn unanswered(&self) -> usize {
        self.cycles
            .iter()
            .flat_map(|cycle| &cycle.groups)
            .filter(|group| group.first_ack.is_none())
            .count()
    }

    /// Elections beyond one per group failover, plus term changes of groups the killed node
    /// did not lead, plus those while nothing was killed.
    pub fn spurious_elections(&self) -> u64 {
        let extra: u64 = self
            .cycles
            .iter()
            .flat_map(|cycle| &cycle.groups)
            .map(|group| group.elections.saturating_sub(1))
            .sum();
        let disturbed: usize = self.cycles.iter().map(|cycle| cycle.disturbed.len()).sum();
        extra + disturbed as u64 + self.quiet_elections
    }

    /// Whether the measurement holds: every group answered after every kill and the load's
    /// check (if any) passed.
    pub fn ok(&self) -> bool {
        let load_ok = match (&self.options.load, &self.load) {
            (None, _) => true,
            (Some(_), Some(result)) => result.check.ok,
            (Some(_), None) => false,
        };
        self.unanswered() == 0 && !self.cycles.is_empty() && load_ok
    }

    /// The report in markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let (heartbeat, election_min, election_max) = self.timing;
        let load = match &self.options.load {
            None => "no load".to_owned(),
            Some(load) => format!(
                "{} at {} attempts/s offered (open loop, {} clients, {} seats)",
                load.workload.name(),
                load.rate,
                load.clients,
                load.seats
            ),
        };
        let _ = writeln!(
            out,
            "### Failover: {} kills, {load}\n\nThree nodes, {} data groups, heartbeat {heartbeat} \
             ms, elections after {election_min}-{election_max} ms, pre-vote on; a probe per \
             group every {} ms through the SDK (default retry policy).\n",
            self.cycles.len(),
            self.options.groups,
            self.options.probe_interval.as_millis(),
        );
        let times = self.times();
        let ms = |duration: Duration| duration.as_secs_f64() * 1_000.0;
        if times.is_empty() {
            let _ = writeln!(out, "No group acknowledged a write after a kill.\n");
        } else {
            let _ = writeln!(
                out,
                "| group failovers | min | p50 | p90 | max | no answer within {} s | spurious \
                 elections |\n|---|---|---|---|---|---|---|\n| {} | {:.0} ms | {:.0} ms | {:.0} ms \
                 | {:.0} ms | {} | {} |\n",
                ACK_WAIT.as_secs(),
                times.len(),
                ms(times[0]),
                ms(percentile(&times, 50)),
                ms(percentile(&times, 90)),
                ms(times[times.len() - 1]),
                self.unanswered(),
                self.spurious_elections(),
            );
        }
        let mut caught: Vec<Duration> = self
            .cycles
            .iter()
            .flat_map(|cycle| cycle.groups.iter().filter_map(|group| group.caught))
            .collect();
        caught.sort_unstable();
        if !caught.is_empty() {
            let _ = writeln!(
                out,
                "- Calls in flight at the kill (the SDK retrying them, backing off up to {} ms): \
                 the last of each group answered {:.0} ms (p50), {:.0} ms (max) after the kill.",
                client::BACKOFF_MAX_DEFAULT_MS,
                ms(percentile(&caught, 50)),
                ms(caught[caught.len() - 1]),
            );
        }
        let under_load = self.cycles.iter().filter(|cycle| cycle.under_load).count();
        let _ = writeln!(
            out,
            "- Spurious elections: {} while nothing was killed ({} s, the three nodes using {} \
             of a core), {} in groups the killed node did not lead, {} beyond one per failover.",
            self.quiet_elections,
            self.options.quiet.as_secs(),
            self.quiet_cpu.map_or_else(
                || "an unknown share".to_owned(),
                |cores| format!("{:.0}%", cores * 100.0)
            ),
            self.cycles.iter().map(|cycle| cycle.disturbed.len()).sum::<usize>(),
            self.cycles
                .iter()
                .flat_map(|cycle| &cycle.groups)
                .map(|group| group.elections.saturating_sub(1))
                .sum::<u64>(),
        );
        let _ = writeln!(
            out,
            "- Probes: {} acknowledged, {} failed {:?}, {} ticks skipped (too many in flight or \
             no session at hand).",
            self.probes.acknowledged,
            self.probes.failed.values().sum::<u64>(),
            self.probes.failed,
            self.probes.skipped
        );
        if self.options.load.is_some() {
            let _ = writeln!(
                out,
                "- Kills with the load running: {under_load} of {}.",
                self.cycles.len()
            );
            match (&self.load, &self.load_problem) {
                (Some(result), _) => {
                    let tally = &result.tally;
                    let _ = writeln!(
                        out,
                        "- Load: {} attempts held, {} refused (seat taken), {} failed, {} of \
                         unknown outcome over {:.0} s; end-of-run check {}.",
                        tally.held,
                        tally.conflicts,
                        tally.failed.values().sum::<u64>(),
                        tally.unknown.values().sum::<u64>(),
                        result.elapsed.as_secs_f64(),
                        if result.check.ok { "passed" } else { "FAILED" },
                    );
                    if !result.check.ok {
                        for line in &result.check.lines {
                            let _ = writeln!(out, "  - {line}");
                        }
                    }
                }
                (None, Some(problem)) => {
                    let _ = writeln!(out, "- Load: not run or not checked: {problem}.");
                }
                (None, None) => {}
            }
        }
        let _ = writeln!(
            out,
            "\n| kill | node | group: first acknowledged write (elections) |\n|---|---|---|"
        );
        for (index, cycle) in self.cycles.iter().enumerate() {
            let groups: Vec<String> = cycle
                .groups
                .iter()
                .map(|group| match group.first_ack {
                    Some(time) => {
                        format!("{}: {:.0} ms ({})", group.group, ms(time), group.elections)
                    }
                    None => format!("{}: none ({})", group.group, group.elections),
                })
                .collect();
            let disturbed = if cycle.disturbed.is_empty() {
                String::new()
            } else {
                format!("; terms also changed in {:?}", cycle.disturbed)
            };
            let _ = writeln!(
                out,
                "| {} | {} | {}{disturbed} |",
                index + 1,
                cycle.node,
                groups.join(", ")
            );
        }
        out
    }
}

/// The value at `percent` of sorted `times` (nearest rank).
fn percentile(times: &[Duration], percent: usize) -> Duration {
    let rank = (times.len() * percent).div_ceil(100).max(1);
    times[rank.min(times.len()) - 1]
}

/// One data group's probe: SDK holds of successive seats of a show of the group.
struct Probe {
    group: GroupId,
    show: u64,
    price_version: u32,
    client: Client,
    /// Session tokens with how many holds each may still make in the show.
    tokens: Mutex<Vec<(String, u32)>>,
    next_seat: AtomicU32,
    in_flight: AtomicU64,
    /// When each acknowledged probe started and was acknowledged.
    acks: Mutex<Vec<(Instant, Instant)>>,
    /// Failed probes, by booking code (or the error's kind).
    failed: Mutex<BTreeMap<String, u64>>,
    skipped: AtomicU64,
}

impl Probe {
    /// Tops the tokens up to at least `holds` holds, making sessions (before a kill, so that no
    /// session has to be made while a leader is down).
    async fn refill(&self, holds: u32) -> Result<(), FailoverError> {
        loop {
            let available: u32 = lock(&self.tokens).iter().map(|(_, left)| *left).sum();
            if available >= holds {
                return Ok(());
            }
            let token = self
                .client
                .create_session()
                .await
                .map_err(|error| FailoverError::Client(format!("a probe session: {error}")))?;
            lock(&self.tokens).push((token, bench_cluster::HOLDS_PER_SESSION));
        }
    }

    /// Keeps [`TOKENS_AT_HAND`] sessions' worth of holds at hand, for ever (aborted at the end):
    /// a cycle that outlasts its period must not run out.
    async fn keep_refilled(self: Arc<Probe>) {
        let holds = bench_cluster::HOLDS_PER_SESSION * TOKENS_AT_HAND;
        loop {
            // A failure (no node answered in the SDK's budget) is tried again at the next turn.
            let _ = self.refill(holds).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A token with a hold left, spent.
    fn take_token(&self) -> Option<String> {
        let mut tokens = lock(&self.tokens);
        let (token, left) = tokens.iter_mut().find(|(_, left)| *left > 0)?;
        *left -= 1;
        let token = token.clone();
        tokens.retain(|(_, left)| *left > 0);
        Some(token)
    }

    /// One probe, in the background.
    fn fire(self: &Arc<Probe>) {
        if self.in_flight.load(Ordering::Relaxed) as usize >= PROBES_IN_FLIGHT_MAX {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(token) = self.take_token() else {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let seat = self.next_seat.fetch_add(1, Ordering::Relaxed);
        if seat > PROBE_SEATS {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let probe = Arc::clone(self);
        tokio::spawn(async move {
            let started = Instant::now();
            let held =
                probe.client.hold(&token, probe.show, &[seat], probe.price_version, None).await;
            match held {
                Ok(_) => lock(&probe.acks).push((started, Instant::now())),
                Err(error) => {
                    let label = match error.booking_code() {
                        Some(code) => code.to_owned(),
                        None if error.is_outcome_unknown() => "outcome unknown".to_owned(),
                        None => "unavailable".to_owned(),
                    };
                    *lock(&probe.failed).entry(label).or_insert(0) += 1;
                }
            }
            probe.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// From `killed` to the acknowledgement of the last probe that was in flight at `killed`
    /// and acknowledged after it: how long a caller caught by the kill waited after it.
    fn caught_since(&self, killed: Instant) -> Option<Duration> {
        lock(&self.acks)
            .iter()
            .filter(|(started, acked)| *started < killed && *acked > killed)
            .map(|(_, acked)| acked.duration_since(killed))
            .max()
    }

    /// From `killed` to the acknowledgement of the first probe started at or after it.
    fn first_ack_since(&self, killed: Instant) -> Option<Duration> {
        lock(&self.acks)
            .iter()
            .filter(|(started, _)| *started >= killed)
            .map(|(_, acked)| acked.duration_since(killed))
            .min()
    }
}

/// Locks `mutex`, whatever a panicking holder left (the data are tallies).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Each group's term and leader, as the nodes that answer report them: the highest term any
/// node reports, and the node that says it leads in that term (if one does).
async fn terms(cluster: &Cluster) -> BTreeMap<GroupId, (u64, Option<NodeId>)> {
    let mut terms: BTreeMap<GroupId, (u64, Option<NodeId>)> = BTreeMap::new();
    for id in cluster.available() {
        let Ok(status) = cluster.status(id, false).await else { continue };
        for group in status.groups {
            let entry = terms.entry(group.group_id).or_insert((0, None));
            if group.term > entry.0 {
                *entry = (group.term, None);
            }
            if group.term == entry.0 && group.role == "leader" {
                entry.1 = Some(id);
            }
        }
    }
    terms
}

/// Waits until every data group has a leader in the terms the nodes report, and returns them.
async fn settled_terms(
    cluster: &Cluster,
) -> Result<BTreeMap<GroupId, (u64, Option<NodeId>)>, FailoverError> {
    for group in cluster.group_ids() {
        cluster.leader_of(group).await?;
    }
    Ok(terms(cluster).await)
}

/// Waits until `node`, restarted, has applied in every group what its leader had committed
/// when it came back (under load the replicas are never all at one index, so the cluster's
/// convergence wait would wait for a lull).
async fn wait_caught_up(cluster: &Cluster, node: NodeId) -> Result<(), FailoverError> {
    let mut targets: BTreeMap<GroupId, u64> = BTreeMap::new();
    for group in cluster.group_ids() {
        let leader = cluster.leader_of(group).await?;
        let status = cluster.group_status(leader, group, false).await?;
        targets.insert(group, status.committed_index);
    }
    let deadline = Instant::now() + CATCH_UP_WAIT;
    loop {
        let last = match cluster.status(node, false).await {
            Ok(status) => {
                let behind: Vec<String> = targets
                    .iter()
                    .filter_map(|(group, target)| {
                        let applied = status
                            .groups
                            .iter()
                            .find(|view| view.group_id == *group)
                            .map_or(0, |view| view.applied_index);
                        (applied < *target)
                            .then(|| format!("group {group} at {applied} of {target}"))
                    })
                    .collect();
                if behind.is_empty() {
                    return Ok(());
                }
                behind.join(", ")
            }
            Err(error) => error.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(FailoverError::Behind { node, last });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Makes the measurement.
///
/// # Errors
///
/// When the cluster, its probes or its load cannot be set up, or a node cannot be killed or
/// restarted. A group that does not answer after a kill is not an error: the report says so.
pub async fn run(options: Options) -> Result<Report, FailoverError> {
    let bench = bench_options(&options);
    let timing = options.timing;
    let port_base = options.port_base;
    let mut backend =
        ClusterBackend::start_tuned(&bench, true, false, |nodes: &mut ClusterOptions| {
            nodes.addressing = Addressing::Fixed { ip_base: 0, port_base };
            if let Some(heartbeat) = timing.heartbeat_ms {
                nodes.heartbeat_ms = heartbeat;
            }
            if let Some(min) = timing.election_min_ms {
                nodes.election_min_ms = min;
            }
            if let Some(max) = timing.election_max_ms {
                nodes.election_max_ms = max;
            }
        })
        .await?;
    let outcome = measure(&options, &bench, &backend).await;
    backend.stop().await;
    outcome
}

/// The measurement on a started cluster.
async fn measure(
    options: &Options,
    bench: &crate::bench::Options,
    backend: &ClusterBackend,
) -> Result<Report, FailoverError> {
    let cluster = backend.cluster();
    let nodes = cluster.options();
    let timing = (nodes.heartbeat_ms, nodes.election_min_ms, nodes.election_max_ms);
    let probes = make_probes(cluster).await?;
    let per_period =
        u32::try_from(options.period.as_millis() / options.probe_interval.as_millis().max(1) + 1)
            .unwrap_or(u32::MAX);
    for probe in &probes {
        probe.refill(per_period.saturating_mul(2)).await?;
    }

    // The load, for the whole run: until the last kill's cycle ends (or, at the latest, ten
    // times the periods the run should take; kills after the load ended are reported as such).
    let stop_load = Arc::new(AtomicBool::new(false));
    let load = match options.load {
        None => None,
        Some(load) => {
            let spec = load_spec(options, load);
            let run = backend.prepare(&spec).await?;
            let processes = backend.processes();
            let bench = bench.clone();
            let stop = Arc::clone(&stop_load);
            Some(tokio::spawn(async move {
                driver::run_until("cluster", run, &spec, &bench, &processes, &stop).await
            }))
        }
    };

    let ticker = {
        let probes = probes.clone();
        let interval = options.probe_interval;
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                for probe in &probes {
                    probe.fire();
                }
            }
        })
    };
    let refillers: Vec<JoinHandle<()>> =
        probes.iter().map(|probe| tokio::spawn(Arc::clone(probe).keep_refilled())).collect();
    let cycles = kill_cycles(cluster, options, &probes, per_period, load.as_ref()).await;
    stop_load.store(true, Ordering::Relaxed);
    ticker.abort();
    for refiller in refillers {
        refiller.abort();
    }
    let (cycles, quiet_elections, quiet_cpu) = cycles?;

    let (load, load_problem) = match load {
        None => (None, None),
        Some(handle) => match handle.await {
            Ok(Ok(result)) => (Some(result), None),
            Ok(Err(error)) => (None, Some(error.to_string())),
            Err(error) => (None, Some(format!("the load's task failed: {error}"))),
        },
    };
    let mut tally = ProbeTally::default();
    for probe in &probes {
        tally.acknowledged += lock(&probe.acks).len() as u64;
        for (label, count) in lock(&probe.failed).iter() {
            *tally.failed.entry(label.clone()).or_insert(0) += count;
        }
        tally.skipped += probe.skipped.load(Ordering::Relaxed);
    }
    Ok(Report {
        options: options.clone(),
        timing,
        quiet_elections,
        quiet_cpu,
        cycles,
        probes: tally,
        load,
        load_problem,
    })
}

/// The pids of the nodes that run.
fn nodes_pids(cluster: &Cluster) -> Vec<u32> {
    cluster.node_ids().into_iter().filter_map(|id| cluster.pid(id)).collect()
}

/// The quiet time, then every kill; returns the cycles and the term changes while quiet.
async fn kill_cycles(
    cluster: &Cluster,
    options: &Options,
    probes: &[Arc<Probe>],
    per_period: u32,
    load: Option<&JoinHandle<Result<RunResult, BenchError>>>,
) -> Result<(Vec<Cycle>, u64, Option<f64>), FailoverError> {
    let before = settled_terms(cluster).await?;
    let processes: Vec<u32> = nodes_pids(cluster);
    let usage_before = crate::bench::usage::sample(&processes);
    let quiet_started = Instant::now();
    tokio::time::sleep(options.quiet).await;
    let quiet_cpu = match (usage_before, crate::bench::usage::sample(&processes)) {
        (Some(before), Some(after)) => {
            Some((after.cpu_seconds - before.cpu_seconds) / quiet_started.elapsed().as_secs_f64())
        }
        _ => None,
    };
    let after = settled_terms(cluster).await?;
    let quiet_elections: u64 = after
        .iter()
        .map(|(group, (term, _))| term.saturating_sub(before.get(group).map_or(*term, |t| t.0)))
        .sum();

    let nodes = cluster.node_ids();
    let mut cycles = Vec::new();
    for index in 0..options.kills {
        let started = Instant::now();
        let before = settled_terms(cluster).await?;
        let leads = |node: NodeId| -> Vec<GroupId> {
            before
                .iter()
                .filter(|(group, (_, leader))| {
                    cluster.data_group_ids().contains(*group) && *leader == Some(node)
                })
                .map(|(group, _)| *group)
                .collect()
        };
        // The next node in turn that leads a data group.
        let Some(node) = (0..nodes.len())
            .map(|offset| nodes[(index as usize + offset) % nodes.len()])
            .find(|node| !leads(*node).is_empty())
        else {
            continue;
        };
        let led = leads(node);
        // Every group the node led, the metadata group too: each needs an election.
        let led_any: Vec<GroupId> = before
            .iter()
            .filter(|(_, (_, leader))| *leader == Some(node))
            .map(|(group, _)| *group)
            .collect();
        for probe in probes {
            probe.refill(per_period.saturating_mul(2)).await?;
        }
        let under_load = load.is_some_and(|handle| !handle.is_finished());
        cluster.kill(node).await?;
        let killed = Instant::now();
        let led_probes: Vec<&Arc<Probe>> =
            probes.iter().filter(|probe| led.contains(&probe.group)).collect();
        loop {
            let answered = led_probes.iter().all(|probe| probe.first_ack_since(killed).is_some());
            if answered || killed.elapsed() >= ACK_WAIT {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let first_acks: Vec<(GroupId, Option<Duration>)> =
            led_probes.iter().map(|probe| (probe.group, probe.first_ack_since(killed))).collect();
        cluster.restart(node).await?;
        wait_caught_up(cluster, node).await?;
        let after = settled_terms(cluster).await?;
        let advance = |group: GroupId| {
            let old = before.get(&group).map_or(0, |(term, _)| *term);
            after.get(&group).map_or(0, |(term, _)| term.saturating_sub(old))
        };
        let groups = first_acks
            .into_iter()
            .zip(&led_probes)
            .map(|((group, first_ack), probe)| GroupFailover {
                group,
                first_ack,
                caught: probe.caught_since(killed),
                elections: advance(group),
            })
            .collect();
        let disturbed = cluster
            .group_ids()
            .filter(|group| !led_any.contains(group) && advance(*group) > 0)
            .collect();
        cycles.push(Cycle { node, groups, disturbed, under_load });
        let next = started + options.period;
        tokio::time::sleep_until(next).await;
    }
    Ok((cycles, quiet_elections, quiet_cpu))
}

/// A probe show in every data group, with its client.
async fn make_probes(cluster: &Cluster) -> Result<Vec<Arc<Probe>>, FailoverError> {
    let mut probes = Vec::new();
    for group in cluster.data_group_ids() {
        let client = cluster.new_client()?;
        let show = PROBE_SHOW_BASE + group;
        let mut new = NewShow::uniform(show, PROBE_SEATS, 1_000, "EUR");
        new.open_sales = true;
        new.group_id = group;
        new.policy =
            ShowPolicy { holds_per_session_max: bench_cluster::HOLDS_PER_SESSION, ..new.policy };
        client
            .create_show(&new, None)
            .await
            .map_err(|error| FailoverError::Client(format!("create probe show {show}: {error}")))?;
        let price_version = bench_cluster::ready_price_version(&client, show).await?;
        probes.push(Arc::new(Probe {
            group,
            show,
            price_version,
            client,
            tokens: Mutex::new(Vec::new()),
            next_seat: AtomicU32::new(1),
            in_flight: AtomicU64::new(0),
            acks: Mutex::new(Vec::new()),
            failed: Mutex::new(BTreeMap::new()),
            skipped: AtomicU64::new(0),
        }));
    }
    Ok(probes)
}

/// The load's run: the workload's layout, in the open loop, for the quiet time and every
/// period with a margin.
fn load_spec(options: &Options, load: Load) -> RunSpec {
    let duration = (options.quiet + options.period * options.kills) * 10;
    RunSpec {
        index: 0,
        workload: load.workload,
        layout: load.workload.layout(load.seats, load.seats),
        clients: load.clients,
        rate: Some(load.rate),
        duration,
        readers: 0,
        seed: options.seed,
        label: format!("{} open {}/s beside kills", load.workload.name(), load.rate),
        sweep: None,
    }
}

/// The benchmark's options the cluster and the load are made with.
fn bench_options(options: &Options) -> crate::bench::Options {
    let seats = options.load.map_or(10_000, |load| load.seats);
    crate::bench::Options {
        backends: vec!["cluster".to_owned()],
        workloads: options.load.map(|load| load.workload).into_iter().collect(),
        clients: vec![options.load.map_or(1, |load| load.clients)],
        duration: options.quiet + options.period * options.kills,
        seats,
        uncontended_seats: seats,
        rates: options.load.map(|load| load.rate).into_iter().collect(),
        closed_loop: false,
        readers: 0,
        pg_pool_max: 1,
        cluster_groups: options.groups,
        snapshot_logs: 10_000,
        cluster_args: Vec::new(),
        data_dir: options.data_dir.clone(),
        pg_bin: PathBuf::new(),
        etcd_bin: PathBuf::new(),
        seed: options.seed,
        progress: false,
        sweeps: Vec::new(),
        sweep_backends: Vec::new(),
        sweep_duration: Duration::from_secs(1),
        plots_dir: options.data_dir.join("plots"),
        first_minute_rates: Vec::new(),
        nginx_bin: PathBuf::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_the_nearest_rank() {
        let times: Vec<Duration> = (1..=20).map(Duration::from_millis).collect();
        assert_eq!(percentile(&times, 50), Duration::from_millis(10));
        assert_eq!(percentile(&times, 90), Duration::from_millis(18));
        assert_eq!(percentile(&times, 100), Duration::from_millis(20));
        assert_eq!(percentile(&times[..1], 50), Duration::from_millis(1));
    }
}
