//! The nemeses: what faults a run injects into a [`Cluster`], when, and the timeline of what
//! was done.
//!
//! A [`Schedule`] alternates quiet and fault periods of seeded random lengths until the run's
//! stop signal: each fault period installs one fault (targeting the given data group's leader
//! where the nemesis is about a leader), and the step after it undoes that fault. Every step is
//! recorded as a [`NemesisEvent`] whose [`StepStatus`] separates what was done (`installed`),
//! what could not apply (`skipped`: a ring on three nodes, no leader to kill, a refused call)
//! and what may or may not have happened (`indeterminate`: a membership call that timed out).
//! Whatever happened, the run ends with [`Cluster::heal_all`].
//!
//! Owns the choice and order of faults. Never judges the cluster (a failed step is recorded,
//! not raised) and never touches a process or link except through [`Cluster`].

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::str::FromStr;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use testkit::skew::skew_text;
use testkit::{Cluster, ClusterError, GroupId, NodeId};

/// The longest clock skew a [`Nemesis::ClockSkew`] step sets, ms (either way).
pub const SKEW_MAX_MS: i64 = 30_000;

/// The shortest clock skew a [`Nemesis::ClockSkew`] step sets, ms: less would hide in the
/// noise of scheduling.
pub const SKEW_MIN_MS: i64 = 1_000;

/// A kind of fault, or a mix of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Nemesis {
    /// No fault: the baseline.
    None,
    /// kill -9 one random node, then restart it.
    KillOne,
    /// kill -9 a random minority (1 of 3, 2 of 5) at once, then restart them.
    KillMinority,
    /// kill -9 the group's leader, then restart it.
    KillLeader,
    /// kill -9 every node, then restart them all.
    KillAll,
    /// SIGSTOP one random node, then SIGCONT it.
    PauseOne,
    /// SIGSTOP the group's leader, then SIGCONT it.
    PauseLeader,
    /// Cut the group's leader off from every peer, then heal.
    PartitionLeader,
    /// Split the nodes into a random majority and minority, then heal.
    PartitionHalves,
    /// Two halves joined by one node that sees both (5 nodes), then heal.
    PartitionBridge,
    /// Each node sees only its two neighbours on a random ring (5 nodes), then heal.
    PartitionRing,
    /// Hand the group's leadership to a random other voter.
    TransferLeader,
    /// Remove a random follower from the group, then readmit it.
    Membership,
    /// Skew the group leader's wall clock by 1-30 s either way (libfaketime), then reset it.
    ClockSkew,
    /// Cut a random half of the client processes (at least one) off from the group's leader
    /// (through the leader's door: the leader stays in the cluster, the other clients reach
    /// it), then let them through again. Their calls in flight are cut (unknown outcomes);
    /// new ones reach the followers only, which send them back to the leader.
    PartitionClients,
    /// Move the workload's shows to another data group (a fenced move: freeze, import,
    /// relocate, activate, drop), then move them back home.
    MoveShow,
    /// Two faults overlapping: the second strikes halfway through the first, the first is
    /// undone while the second lasts (a node restarted inside a partition, a member readmitted
    /// while a node is paused), then the second. The pair is one of [`Nemesis::PAIRS`].
    TwoFaults,
    /// Each fault period picks one of the others that applies.
    Combined,
}

impl Nemesis {
    /// Every nemesis, in the order of the matrix.
    pub const ALL: [Nemesis; 18] = [
        Nemesis::None,
        Nemesis::KillOne,
        Nemesis::KillMinority,
        Nemesis::KillLeader,
        Nemesis::KillAll,
        Nemesis::PauseOne,
        Nemesis::PauseLeader,
        Nemesis::PartitionLeader,
        Nemesis::PartitionHalves,
        Nemesis::PartitionBridge,
        Nemesis::PartitionRing,
        Nemesis::PartitionClients,
        Nemesis::TransferLeader,
        Nemesis::Membership,
        Nemesis::ClockSkew,
        Nemesis::MoveShow,
        Nemesis::TwoFaults,
        Nemesis::Combined,
    ];

    /// The pairs [`Nemesis::TwoFaults`] picks from: a fault, and one that strikes while it
    /// lasts.
    pub const PAIRS: [(Nemesis, Nemesis); 6] = [
        // A partition during a kill: the node comes back into a split cluster.
        (Nemesis::KillOne, Nemesis::PartitionHalves),
        // A pause during a membership change: the member is readmitted while a node is stopped.
        (Nemesis::Membership, Nemesis::PauseOne),
        // Skew during a partition: the leader's clock jumps while it may be cut off.
        (Nemesis::PartitionHalves, Nemesis::ClockSkew),
        // A kill during a partition of the leader: the majority elects, then loses a node.
        (Nemesis::PartitionLeader, Nemesis::KillOne),
        // A leader paused while a node is down: the group may lose its quorum for a while.
        (Nemesis::KillOne, Nemesis::PauseLeader),
        // Clients cut off from the leader, which then dies: they may reach the new one.
        (Nemesis::PartitionClients, Nemesis::KillLeader),
    ];

    /// The command-line name (kebab-case).
    pub fn name(self) -> &'static str {
        match self {
            Nemesis::None => "none",
            Nemesis::KillOne => "kill-one",
            Nemesis::KillMinority => "kill-minority",
            Nemesis::KillLeader => "kill-leader",
            Nemesis::KillAll => "kill-all",
            Nemesis::PauseOne => "pause-one",
            Nemesis::PauseLeader => "pause-leader",
            Nemesis::PartitionLeader => "partition-leader",
            Nemesis::PartitionHalves => "partition-halves",
            Nemesis::PartitionBridge => "partition-bridge",
            Nemesis::PartitionRing => "partition-ring",
            Nemesis::PartitionClients => "partition-clients",
            Nemesis::TransferLeader => "transfer-leader",
            Nemesis::Membership => "membership",
            Nemesis::ClockSkew => "clock-skew",
            Nemesis::MoveShow => "move-show",
            Nemesis::TwoFaults => "two-faults",
            Nemesis::Combined => "combined",
        }
    }

    /// Whether the nemesis can do anything on `nodes` nodes, with clock skew available or not
    /// (a bridge and a ring need five nodes; clock skew needs libfaketime).
    pub fn applies(self, nodes: u64, skew_supported: bool) -> bool {
        match self {
            Nemesis::PartitionBridge | Nemesis::PartitionRing => nodes >= 5,
            Nemesis::ClockSkew => skew_supported,
            Nemesis::TwoFaults => !Nemesis::pairs(nodes, skew_supported).is_empty(),
            _ => true,
        }
    }

    /// The pairs of [`Nemesis::PAIRS`] whose both faults apply.
    pub fn pairs(nodes: u64, skew_supported: bool) -> Vec<(Nemesis, Nemesis)> {
        Nemesis::PAIRS
            .into_iter()
            .filter(|(first, second)| {
                first.applies(nodes, skew_supported) && second.applies(nodes, skew_supported)
            })
            .collect()
    }

    /// The nemeses [`Nemesis::Combined`] picks from: every fault that applies.
    pub fn mix(nodes: u64, skew_supported: bool) -> Vec<Nemesis> {
        Nemesis::ALL
            .into_iter()
            .filter(|nemesis| !matches!(nemesis, Nemesis::None | Nemesis::Combined))
            .filter(|nemesis| nemesis.applies(nodes, skew_supported))
            .collect()
    }
}

impl fmt::Display for Nemesis {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// A name that is no nemesis's.
#[derive(Debug, thiserror::Error)]
#[error("unknown nemesis `{0}`; expected one of: {names}", names = names())]
pub struct UnknownNemesis(pub String);

/// Every nemesis's name, comma-separated.
fn names() -> String {
    Nemesis::ALL.iter().map(|nemesis| nemesis.name()).collect::<Vec<_>>().join(", ")
}

impl FromStr for Nemesis {
    type Err = UnknownNemesis;

    fn from_str(text: &str) -> Result<Nemesis, UnknownNemesis> {
        let text = text.trim();
        Nemesis::ALL
            .into_iter()
            .find(|nemesis| nemesis.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| UnknownNemesis(text.to_owned()))
    }
}

/// What became of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// It was done.
    Installed,
    /// It did not apply or was refused: nothing changed.
    Skipped,
    /// Its effect is not known (a call timed out, a process did not come back in time).
    Indeterminate,
}

/// Whether a step injects a fault or undoes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Injects a fault.
    Fault,
    /// Undoes one (or, for `heal-all`, every one).
    Heal,
}

/// One step of the nemesis, as `nemesis.jsonl` records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NemesisEvent {
    /// When the step began, ns since the run's start (monotonic).
    pub time_ns: u64,
    /// When it finished, ns since the run's start.
    pub end_ns: u64,
    /// The number of the fault the step injects or undoes: a fault and its heal share it.
    pub step: u64,
    /// The nemesis that chose the step (under `combined`, the one it picked).
    pub nemesis: Nemesis,
    /// Fault or heal.
    pub phase: Phase,
    /// What was done: `kill`, `restart`, `pause`, `resume`, `isolate`, `partition`, `heal`,
    /// `cut-clients`, `restore-clients`, `transfer-leader`, `remove`, `readmit`, `skew`,
    /// `unskew`, `move-show`, `heal-all`.
    pub action: String,
    /// To what, for a human: `node 2`, `[1] | [2 3]`, `node 3 +12.500 s`.
    pub target: String,
    /// The nodes the step acted on.
    pub nodes: Vec<NodeId>,
    /// Installed, skipped or indeterminate.
    pub status: StepStatus,
    /// Why a step was skipped or is indeterminate, or what an installed one found (the new
    /// leader after a transfer); empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// When and where a nemesis strikes.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The nemesis.
    pub nemesis: Nemesis,
    /// The data group whose leader the leader-targeting faults aim at.
    pub group: GroupId,
    /// The seed of every random choice (targets, period lengths, skews).
    pub seed: u64,
    /// The shortest fault period.
    pub fault_min: Duration,
    /// The longest fault period.
    pub fault_max: Duration,
    /// The shortest quiet period (one comes first, and after each heal).
    pub quiet_min: Duration,
    /// The longest quiet period.
    pub quiet_max: Duration,
    /// The largest clock skew, ms (up to [`SKEW_MAX_MS`]).
    pub skew_max_ms: i64,
    /// How long a step waits for the group's leader to be known before it is skipped.
    pub leader_wait: Duration,
    /// The workload's shows and the data group each lives in between faults: what a
    /// [`Nemesis::MoveShow`] step moves away and its heal brings back.
    pub shows: Vec<(u64, GroupId)>,
    /// The addresses the client processes dial from (`testkit::client_source`): whom a
    /// [`Nemesis::PartitionClients`] step cuts off.
    pub clients: Vec<IpAddr>,
}

impl Schedule {
    /// `nemesis` aimed at data group `group`: faults of 3-6 s after quiet periods of 3-6 s
    /// (long enough for an election, which takes up to about 0.8 s with the daemon's timing,
    /// and some work under the new leader), skews up to 30 s.
    pub fn new(nemesis: Nemesis, group: GroupId, seed: u64) -> Schedule {
        Schedule {
            nemesis,
            group,
            seed,
            fault_min: Duration::from_secs(3),
            fault_max: Duration::from_secs(6),
            quiet_min: Duration::from_secs(3),
            quiet_max: Duration::from_secs(6),
            skew_max_ms: SKEW_MAX_MS,
            leader_wait: Duration::from_secs(5),
            shows: Vec::new(),
            clients: Vec::new(),
        }
    }
}

/// How to undo an installed (or maybe installed) fault.
#[derive(Clone, Debug)]
enum Undo {
    /// Start these killed nodes again.
    Restart(Vec<NodeId>),
    /// Continue these paused nodes.
    Resume(Vec<NodeId>),
    /// Open every link.
    HealLinks,
    /// Let every client through every door.
    RestoreClients,
    /// Make the node a voter of the group again.
    Readmit(GroupId, NodeId),
    /// Set the node's clock right.
    Unskew(NodeId),
    /// Move the shows back to their groups.
    MoveBack(Vec<(u64, GroupId)>),
}

/// What installing a fault did.
struct Installed {
    action: &'static str,
    target: String,
    nodes: Vec<NodeId>,
    status: StepStatus,
    detail: String,
    undo: Option<Undo>,
}

impl Installed {
    /// A step that did not apply.
    fn skipped(action: &'static str, detail: impl Into<String>) -> Installed {
        Installed {
            action,
            target: String::new(),
            nodes: Vec::new(),
            status: StepStatus::Skipped,
            detail: detail.into(),
            undo: None,
        }
    }
}

/// The run's stop signal, polled only until it fires.
struct StopSignal<F> {
    future: Pin<Box<F>>,
    fired: bool,
}

impl<F: Future<Output = ()>> StopSignal<F> {
    /// Sleeps `period`, or less if the signal fires; says whether it has fired.
    async fn sleep(&mut self, period: Duration) -> bool {
        if !self.fired {
            tokio::select! {
                () = &mut self.future => self.fired = true,
                () = tokio::time::sleep(period) => {}
            }
        }
        self.fired
    }
}

/// Runs `schedule` against `cluster` until `stop` completes, then heals everything; returns
/// the timeline, with times measured from `t0`.
pub async fn run(
    cluster: &Cluster,
    schedule: &Schedule,
    t0: Instant,
    stop: impl Future<Output = ()>,
) -> Vec<NemesisEvent> {
    run_with(cluster, schedule, t0, stop, |_| {}).await
}

/// As [`run`], calling `on_event` with each step as soon as it is done (to log it, or to
/// interleave it with the history).
pub async fn run_with(
    cluster: &Cluster,
    schedule: &Schedule,
    t0: Instant,
    stop: impl Future<Output = ()>,
    mut on_event: impl FnMut(&NemesisEvent),
) -> Vec<NemesisEvent> {
    let mut rng = StdRng::seed_from_u64(schedule.seed);
    let mut stop = StopSignal { future: Box::pin(stop), fired: false };
    let mut events = Vec::new();
    let mut record = |event: NemesisEvent, events: &mut Vec<NemesisEvent>| {
        tracing::info!(
            action = %event.action,
            target = %event.target,
            status = ?event.status,
            detail = %event.detail,
            "nemesis"
        );
        on_event(&event);
        events.push(event);
    };
    let nodes = cluster.options().nodes;
    let mix = Nemesis::mix(nodes, cluster.skew_supported());
    let pairs = Nemesis::pairs(nodes, cluster.skew_supported());
    let mut step = 0;
    if schedule.nemesis != Nemesis::None {
        loop {
            if stop.sleep(between(&mut rng, schedule.quiet_min, schedule.quiet_max)).await {
                break;
            }
            step += 1;
            let nemesis = match schedule.nemesis {
                Nemesis::Combined => mix.choose(&mut rng).copied().unwrap_or(Nemesis::None),
                other => other,
            };
            // The faults of this step: one, or two overlapping (each recorded under its own
            // name, both under this step's number).
            let faults = match nemesis {
                Nemesis::TwoFaults => match pairs.choose(&mut rng) {
                    Some(&(first, second)) => vec![first, second],
                    None => vec![Nemesis::None],
                },
                other => vec![other],
            };
            // Each fault lasts its period, or less when the stop signal comes: the run is over,
            // and what is installed is undone at once. Two faults overlap for half of it.
            let period = between(&mut rng, schedule.fault_min, schedule.fault_max);
            let share = if faults.len() > 1 { period / 2 } else { period };
            let mut undos = Vec::new();
            for (index, &fault) in faults.iter().enumerate() {
                if index > 0 {
                    stop.sleep(share).await;
                }
                let started = since(t0);
                let installed = install(cluster, schedule, fault, &mut rng).await;
                let event = NemesisEvent {
                    time_ns: started,
                    end_ns: since(t0),
                    step,
                    nemesis: fault,
                    phase: Phase::Fault,
                    action: installed.action.to_owned(),
                    target: installed.target,
                    nodes: installed.nodes,
                    status: installed.status,
                    detail: installed.detail,
                };
                record(event, &mut events);
                if let Some(undo) = installed.undo {
                    undos.push((fault, undo));
                }
            }
            // Undone in the order installed: the first while the second still lasts.
            for (index, (fault, undo)) in undos.iter().enumerate() {
                if index == 0 || faults.len() > 1 {
                    stop.sleep(share).await;
                }
                let started = since(t0);
                let (action, nodes, status, detail) = heal(cluster, undo).await;
                let event = NemesisEvent {
                    time_ns: started,
                    end_ns: since(t0),
                    step,
                    nemesis: *fault,
                    phase: Phase::Heal,
                    action: action.to_owned(),
                    target: describe_nodes(&nodes),
                    nodes,
                    status,
                    detail,
                };
                record(event, &mut events);
            }
            if stop.fired {
                break;
            }
        }
    } else {
        stop.sleep(Duration::MAX).await;
    }
    let started = since(t0);
    let healed = cluster.heal_all().await;
    let (status, detail) = match healed {
        Ok(()) => (StepStatus::Installed, String::new()),
        Err(error) => (StepStatus::Indeterminate, error.to_string()),
    };
    let event = NemesisEvent {
        time_ns: started,
        end_ns: since(t0),
        step: step + 1,
        nemesis: schedule.nemesis,
        phase: Phase::Heal,
        action: "heal-all".to_owned(),
        target: "every node and link".to_owned(),
        nodes: cluster.node_ids(),
        status,
        detail,
    };
    record(event, &mut events);
    events
}

/// Installs one fault of `nemesis` (never `Combined`, `TwoFaults` or `None`).
async fn install(
    cluster: &Cluster,
    schedule: &Schedule,
    nemesis: Nemesis,
    rng: &mut StdRng,
) -> Installed {
    let all = cluster.node_ids();
    let n = all.len();
    match nemesis {
        Nemesis::None | Nemesis::Combined | Nemesis::TwoFaults => {
            Installed::skipped("none", "nothing to do")
        }
        Nemesis::KillOne => match cluster.running().choose(rng).copied() {
            Some(id) => kill(cluster, vec![id]).await,
            None => Installed::skipped("kill", "no node runs"),
        },
        Nemesis::KillMinority => {
            let mut running = cluster.running();
            running.shuffle(rng);
            running.truncate(n.saturating_sub(1) / 2);
            running.sort_unstable();
            kill(cluster, running).await
        }
        Nemesis::KillLeader => match leader(cluster, schedule).await {
            Ok(id) => kill(cluster, vec![id]).await,
            Err(error) => Installed::skipped("kill", error),
        },
        Nemesis::KillAll => kill(cluster, cluster.running()).await,
        Nemesis::PauseOne => match cluster.available().choose(rng).copied() {
            Some(id) => pause(cluster, id).await,
            None => Installed::skipped("pause", "no node runs unpaused"),
        },
        Nemesis::PauseLeader => match leader(cluster, schedule).await {
            Ok(id) => pause(cluster, id).await,
            Err(error) => Installed::skipped("pause", error),
        },
        Nemesis::PartitionLeader => match leader(cluster, schedule).await {
            Ok(id) => {
                cluster.isolate(id);
                let rest: Vec<NodeId> = all.iter().copied().filter(|&other| other != id).collect();
                partitioned("isolate", vec![vec![id], rest], vec![id])
            }
            Err(error) => Installed::skipped("isolate", error),
        },
        Nemesis::PartitionHalves => {
            let mut shuffled = all.clone();
            shuffled.shuffle(rng);
            let mut minority = shuffled[..n / 2].to_vec();
            let mut majority = shuffled[n / 2..].to_vec();
            minority.sort_unstable();
            majority.sort_unstable();
            let sets = vec![minority, majority];
            cluster.partition(&sets);
            partitioned("partition", sets, all)
        }
        Nemesis::PartitionBridge => {
            if !nemesis.applies(n as u64, true) {
                return Installed::skipped("partition", format!("a bridge needs 5 nodes, not {n}"));
            }
            let mut shuffled = all.clone();
            shuffled.shuffle(rng);
            let bridge = shuffled[0];
            let half = (n - 1) / 2;
            let mut left = shuffled[1..=half].to_vec();
            let mut right = shuffled[half + 1..].to_vec();
            left.sort_unstable();
            right.sort_unstable();
            left.push(bridge);
            right.insert(0, bridge);
            let sets = vec![left, right];
            cluster.partition(&sets);
            let mut installed = partitioned("partition", sets, all);
            installed.detail = format!("node {bridge} bridges the halves");
            installed
        }
        Nemesis::PartitionRing => {
            if !nemesis.applies(n as u64, true) {
                return Installed::skipped("partition", format!("a ring needs 5 nodes, not {n}"));
            }
            let mut ring = all.clone();
            ring.shuffle(rng);
            let sets: Vec<Vec<NodeId>> =
                (0..n).map(|index| vec![ring[index], ring[(index + 1) % n]]).collect();
            cluster.partition(&sets);
            let mut installed = partitioned("partition", sets, all);
            let order: Vec<String> = ring.iter().map(ToString::to_string).collect();
            installed.target = format!("ring {}", order.join(" - "));
            installed
        }
        Nemesis::PartitionClients => partition_clients(cluster, schedule, rng).await,
        Nemesis::TransferLeader => transfer(cluster, schedule, rng).await,
        Nemesis::Membership => membership(cluster, schedule, rng).await,
        Nemesis::MoveShow => move_shows(cluster, schedule, rng).await,
        Nemesis::ClockSkew => {
            if !cluster.skew_supported() {
                return Installed::skipped(
                    "skew",
                    "libfaketime is not available: the nodes' clocks cannot be skewed",
                );
            }
            let id = match leader(cluster, schedule).await {
                Ok(id) => id,
                Err(error) => return Installed::skipped("skew", error),
            };
            let largest = schedule.skew_max_ms.clamp(SKEW_MIN_MS, SKEW_MAX_MS);
            let magnitude = rng.gen_range(SKEW_MIN_MS..=largest);
            let ms = if rng.gen_bool(0.5) { magnitude } else { -magnitude };
            let target = format!("node {id} {} s", skew_text(ms));
            match cluster.skew(id, ms) {
                Ok(()) => Installed {
                    action: "skew",
                    target,
                    nodes: vec![id],
                    status: StepStatus::Installed,
                    detail: String::new(),
                    undo: Some(Undo::Unskew(id)),
                },
                Err(error) => Installed::skipped("skew", error.to_string()),
            }
        }
    }
}

/// The group's leader, within the schedule's wait.
async fn leader(cluster: &Cluster, schedule: &Schedule) -> Result<NodeId, String> {
    cluster
        .leader_within(schedule.group, schedule.leader_wait)
        .await
        .map_err(|error| format!("no leader of group {}: {error}", schedule.group))
}

/// Kills `ids` (an empty list is skipped).
async fn kill(cluster: &Cluster, ids: Vec<NodeId>) -> Installed {
    if ids.is_empty() {
        return Installed::skipped("kill", "no node to kill");
    }
    let mut failures = Vec::new();
    let mut killed = Vec::new();
    for &id in &ids {
        match cluster.kill(id).await {
            Ok(()) => killed.push(id),
            Err(error) => failures.push(error.to_string()),
        }
    }
    let status = if failures.is_empty() {
        StepStatus::Installed
    } else if killed.is_empty() {
        StepStatus::Skipped
    } else {
        StepStatus::Indeterminate
    };
    Installed {
        action: "kill",
        target: describe_nodes(&ids),
        undo: (!killed.is_empty()).then_some(Undo::Restart(killed)),
        nodes: ids,
        status,
        detail: failures.join("; "),
    }
}

/// Pauses node `id`.
async fn pause(cluster: &Cluster, id: NodeId) -> Installed {
    let (status, detail, undo) = match cluster.pause(id).await {
        Ok(()) => (StepStatus::Installed, String::new(), Some(Undo::Resume(vec![id]))),
        Err(error) => (StepStatus::Skipped, error.to_string(), None),
    };
    Installed {
        action: "pause",
        target: describe_nodes(&[id]),
        nodes: vec![id],
        status,
        detail,
        undo,
    }
}

/// A partition into `sets` (already installed) that cut off `nodes`.
fn partitioned(action: &'static str, sets: Vec<Vec<NodeId>>, nodes: Vec<NodeId>) -> Installed {
    Installed {
        action,
        target: describe_sets(&sets),
        nodes,
        status: StepStatus::Installed,
        detail: String::new(),
        undo: Some(Undo::HealLinks),
    }
}

/// Cuts a random half of the schedule's clients (at least one) off from the group's leader.
async fn partition_clients(cluster: &Cluster, schedule: &Schedule, rng: &mut StdRng) -> Installed {
    if !cluster.has_client_doors() || schedule.clients.is_empty() {
        return Installed::skipped("cut-clients", "the cluster has no client doors or no clients");
    }
    let leader = match leader(cluster, schedule).await {
        Ok(id) => id,
        Err(error) => return Installed::skipped("cut-clients", error),
    };
    let count = schedule.clients.len().div_ceil(2);
    let mut cut: Vec<IpAddr> = schedule.clients.choose_multiple(rng, count).copied().collect();
    cut.sort_unstable();
    let mut failures = Vec::new();
    for &source in &cut {
        if let Err(error) = cluster.cut_client(leader, source) {
            failures.push(error.to_string());
        }
    }
    let listed: Vec<String> = cut.iter().map(ToString::to_string).collect();
    let (status, undo) = if failures.is_empty() {
        (StepStatus::Installed, Some(Undo::RestoreClients))
    } else {
        (StepStatus::Skipped, None)
    };
    Installed {
        action: "cut-clients",
        target: format!("clients {} from node {leader}", listed.join(" ")),
        nodes: vec![leader],
        status,
        detail: failures.join("; "),
        undo,
    }
}

/// Hands the group's leadership to a random other voter.
async fn transfer(cluster: &Cluster, schedule: &Schedule, rng: &mut StdRng) -> Installed {
    let (leader, voters) = match leader_and_voters(cluster, schedule).await {
        Ok(found) => found,
        Err(error) => return Installed::skipped("transfer-leader", error),
    };
    let others: Vec<NodeId> = voters.into_iter().filter(|&voter| voter != leader).collect();
    let Some(&to) = others.choose(rng) else {
        return Installed::skipped("transfer-leader", format!("node {leader} is the only voter"));
    };
    let target = format!("node {leader} -> node {to}");
    let (status, detail) = match cluster.transfer_leader(schedule.group, to).await {
        Ok(reply) => (StepStatus::Installed, format!("leader now {}", reply.leader_id)),
        Err(error) => (classify(&error), error.to_string()),
    };
    Installed {
        action: "transfer-leader",
        target,
        nodes: vec![leader, to],
        status,
        detail,
        undo: None,
    }
}

/// Removes a random follower from the group (to be readmitted by the heal).
async fn membership(cluster: &Cluster, schedule: &Schedule, rng: &mut StdRng) -> Installed {
    let (leader, voters) = match leader_and_voters(cluster, schedule).await {
        Ok(found) => found,
        Err(error) => return Installed::skipped("remove", error),
    };
    let followers: Vec<NodeId> = voters.into_iter().filter(|&voter| voter != leader).collect();
    let Some(&id) = followers.choose(rng) else {
        return Installed::skipped("remove", format!("group {} has no follower", schedule.group));
    };
    let target = format!("node {id} from group {}", schedule.group);
    let (status, detail) = match cluster.remove(schedule.group, id).await {
        Ok(reply) => (StepStatus::Installed, format!("voters now {:?}", reply.voters)),
        Err(error) => (classify(&error), error.to_string()),
    };
    // A refused removal changed nothing; any other outcome is undone.
    let undo = (status != StepStatus::Skipped).then_some(Undo::Readmit(schedule.group, id));
    Installed { action: "remove", target, nodes: vec![id], status, detail, undo }
}

/// The group's leader and its voters, as the leader reports them.
async fn leader_and_voters(
    cluster: &Cluster,
    schedule: &Schedule,
) -> Result<(NodeId, Vec<NodeId>), String> {
    let leader = leader(cluster, schedule).await?;
    let view = cluster
        .group_status(leader, schedule.group, false)
        .await
        .map_err(|error| format!("status of leader {leader}: {error}"))?;
    Ok((leader, view.voters))
}

/// Undoes a fault: the action, the nodes, and how it went.
async fn heal(cluster: &Cluster, undo: &Undo) -> (&'static str, Vec<NodeId>, StepStatus, String) {
    let outcome = |result: Result<(), ClusterError>| match result {
        Ok(()) => (StepStatus::Installed, String::new()),
        Err(error) => (StepStatus::Indeterminate, error.to_string()),
    };
    match undo {
        Undo::Restart(ids) => {
            let (status, detail) = outcome(cluster.restart_all(ids).await);
            ("restart", ids.clone(), status, detail)
        }
        Undo::Resume(ids) => {
            let mut failures = Vec::new();
            for &id in ids {
                if let Err(error) = cluster.resume(id).await {
                    failures.push(error.to_string());
                }
            }
            let status =
                if failures.is_empty() { StepStatus::Installed } else { StepStatus::Indeterminate };
            ("resume", ids.clone(), status, failures.join("; "))
        }
        Undo::HealLinks => {
            cluster.heal();
            ("heal", cluster.node_ids(), StepStatus::Installed, String::new())
        }
        Undo::RestoreClients => {
            let nodes: BTreeSet<NodeId> =
                cluster.cut_clients().into_iter().map(|(id, _)| id).collect();
            cluster.restore_clients();
            ("restore-clients", nodes.into_iter().collect(), StepStatus::Installed, String::new())
        }
        Undo::Readmit(group, id) => {
            let (status, detail) = match cluster.readmit(*group, *id).await {
                Ok(reply) => (StepStatus::Installed, format!("voters now {:?}", reply.voters)),
                Err(error) => (StepStatus::Indeterminate, error.to_string()),
            };
            ("readmit", vec![*id], status, detail)
        }
        Undo::Unskew(id) => {
            let (status, detail) = outcome(cluster.skew(*id, 0));
            ("unskew", vec![*id], status, detail)
        }
        Undo::MoveBack(shows) => {
            let (status, detail) = move_each(cluster, shows).await;
            ("move-show", Vec::new(), status, detail)
        }
    }
}

/// Moves every show of the schedule from its group to one other data group, chosen at random
/// (to be moved back by the heal).
async fn move_shows(cluster: &Cluster, schedule: &Schedule, rng: &mut StdRng) -> Installed {
    let groups = cluster.options().groups;
    if schedule.shows.is_empty() || groups < 2 {
        return Installed::skipped(
            "move-show",
            format!("{} shows to move over {groups} data groups", schedule.shows.len()),
        );
    }
    let moves: Vec<(u64, GroupId)> = schedule
        .shows
        .iter()
        .map(|&(show, home)| {
            let others: Vec<GroupId> = (1..=groups).filter(|&group| group != home).collect();
            (show, others.choose(rng).copied().unwrap_or(home))
        })
        .collect();
    let target = moves
        .iter()
        .map(|(show, to)| format!("show {show} -> group {to}"))
        .collect::<Vec<_>>()
        .join(", ");
    let (status, detail) = move_each(cluster, &moves).await;
    // A move refused at its first step changed nothing; any other outcome is undone.
    let undo = (status != StepStatus::Skipped).then(|| Undo::MoveBack(schedule.shows.clone()));
    Installed { action: "move-show", target, nodes: Vec::new(), status, detail, undo }
}

/// Moves each show to its group, in order: installed when every move was made, skipped when
/// every one was refused (nothing changed), indeterminate otherwise (a move may be half done:
/// the next move of the show finishes it).
async fn move_each(cluster: &Cluster, moves: &[(u64, GroupId)]) -> (StepStatus, String) {
    let client = cluster.client();
    let mut details = Vec::new();
    let mut statuses = Vec::new();
    for &(show, to) in moves {
        match client.move_show(show, to).await {
            Ok(moved) => {
                statuses.push(StepStatus::Installed);
                details.push(format!(
                    "show {show}: group {} -> {to}, {} bytes, unserved {} ms",
                    moved.from_group, moved.state_bytes, moved.unserved_ms
                ));
            }
            Err(error) => {
                details.push(format!("show {show}: {error}"));
                statuses.push(classify(&ClusterError::Client(error)));
            }
        }
    }
    let status = if statuses.iter().all(|status| *status == StepStatus::Installed) {
        StepStatus::Installed
    } else if statuses.iter().all(|status| *status == StepStatus::Skipped) {
        StepStatus::Skipped
    } else {
        StepStatus::Indeterminate
    };
    (status, details.join("; "))
}

/// Whether a failed call changed nothing (`Skipped`: refused, or never sent) or may have
/// (`Indeterminate`: a node may have applied it before the answer was lost).
fn classify(error: &ClusterError) -> StepStatus {
    match error {
        ClusterError::Client(
            client::Error::Rejected { .. } | client::Error::InvalidArgument(_),
        ) => StepStatus::Skipped,
        ClusterError::Client(error @ client::Error::Unavailable { .. }) => {
            if error.is_outcome_unknown() { StepStatus::Indeterminate } else { StepStatus::Skipped }
        }
        ClusterError::Client(client::Error::Transport { .. }) | ClusterError::Timeout { .. } => {
            StepStatus::Indeterminate
        }
        _ => StepStatus::Skipped,
    }
}

/// A random duration in `[low, high]` (ms resolution).
fn between(rng: &mut StdRng, low: Duration, high: Duration) -> Duration {
    let low = u64::try_from(low.as_millis()).unwrap_or(u64::MAX);
    let high = u64::try_from(high.as_millis()).unwrap_or(u64::MAX).max(low);
    Duration::from_millis(rng.gen_range(low..=high))
}

/// Nanoseconds since `t0` (saturating).
fn since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// "node 2" or "nodes 1 3".
fn describe_nodes(ids: &[NodeId]) -> String {
    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    match ids.len() {
        0 => "no node".to_owned(),
        1 => format!("node {}", list[0]),
        _ => format!("nodes {}", list.join(" ")),
    }
}

/// "[1] | [2 3]".
fn describe_sets(sets: &[Vec<NodeId>]) -> String {
    let sets: Vec<String> = sets
        .iter()
        .map(|set| {
            let ids: Vec<String> = set.iter().map(ToString::to_string).collect();
            format!("[{}]", ids.join(" "))
        })
        .collect();
    sets.join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles only if a run can be spawned on the runtime (its future is `Send`), as a
    /// runner does to inject faults while its clients work.
    #[allow(dead_code)]
    fn run_is_send<'a>(
        cluster: &'a Cluster,
        schedule: &'a Schedule,
    ) -> impl Future<Output = Vec<NemesisEvent>> + Send + 'a {
        run(cluster, schedule, Instant::now(), std::future::ready(()))
    }

    #[test]
    fn every_nemesis_name_round_trips() {
        for nemesis in Nemesis::ALL {
            let name = nemesis.to_string();
            assert_eq!(name.parse::<Nemesis>().ok(), Some(nemesis), "{name}");
            // The serialized form is the same kebab-case name.
            let json = serde_json::to_string(&nemesis).expect("a nemesis serializes");
            assert_eq!(json, format!("\"{name}\""));
        }
        assert_eq!("Partition-Ring".parse::<Nemesis>().ok(), Some(Nemesis::PartitionRing));
        let error = "partition-moon".parse::<Nemesis>().expect_err("no such nemesis").to_string();
        assert!(error.contains("partition-moon") && error.contains("kill-leader"), "{error}");
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = Nemesis::ALL.iter().map(|nemesis| nemesis.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Nemesis::ALL.len());
    }

    #[test]
    fn the_mix_leaves_out_what_cannot_apply() {
        let three = Nemesis::mix(3, false);
        assert!(!three.contains(&Nemesis::PartitionRing));
        assert!(!three.contains(&Nemesis::PartitionBridge));
        assert!(!three.contains(&Nemesis::ClockSkew));
        assert!(!three.contains(&Nemesis::None) && !three.contains(&Nemesis::Combined));
        let five = Nemesis::mix(5, true);
        assert_eq!(five.len(), Nemesis::ALL.len() - 2);
    }

    #[test]
    fn events_serialize_with_lowercase_statuses() {
        let event = NemesisEvent {
            time_ns: 5,
            end_ns: 7,
            step: 1,
            nemesis: Nemesis::KillLeader,
            phase: Phase::Fault,
            action: "kill".to_owned(),
            target: "node 2".to_owned(),
            nodes: vec![2],
            status: StepStatus::Indeterminate,
            detail: String::new(),
        };
        let json = serde_json::to_value(&event).expect("an event serializes");
        assert_eq!(json["status"], "indeterminate");
        assert_eq!(json["nemesis"], "kill-leader");
        assert_eq!(json["phase"], "fault");
        assert!(json.get("detail").is_none(), "an empty detail is left out");
        let back: NemesisEvent = serde_json::from_value(json).expect("and parses back");
        assert_eq!(back, event);
    }

    #[test]
    fn descriptions_read_naturally() {
        assert_eq!(describe_nodes(&[2]), "node 2");
        assert_eq!(describe_nodes(&[1, 3]), "nodes 1 3");
        assert_eq!(describe_sets(&[vec![1], vec![2, 3]]), "[1] | [2 3]");
    }

    #[test]
    fn periods_stay_within_their_bounds() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..100 {
            let period = between(&mut rng, Duration::from_secs(3), Duration::from_secs(6));
            assert!((Duration::from_secs(3)..=Duration::from_secs(6)).contains(&period));
        }
        let fixed = between(&mut rng, Duration::from_secs(2), Duration::from_secs(1));
        assert_eq!(fixed, Duration::from_secs(2), "a high bound below the low one is the low");
    }
}
