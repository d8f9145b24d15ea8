//! One simulated run from one seed: the cluster boots, the shows are created, client processes
//! and the nemesis run for a window of simulated time, everything is healed, the processes
//! settle and read back, and then the run is judged.
//!
//! Owns the run's phases and its verdict: the shared linearizability and booking checkers
//! (`statemachine::check`, the same as the Jepsen suite's), replica convergence (every member
//! of every group applied the same index with the same state digest) and liveness (after the
//! faults stop, every group has a leader, every unknown outcome is settled and every process
//! has read back, within a bound of simulated time). Never injects a fault itself.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use rand::SeedableRng;
use rand::rngs::StdRng;
use statemachine::check::Verdict;
use statemachine::check::booking::check_bookings;
use statemachine::check::deadlines::{Step, Trails, check_deadlines};
use statemachine::check::history::History;
use statemachine::check::linearizable::{Budget, check_history};
use statemachine::check::recorder::Recorder;
use statemachine::check::workload::short_deadline_policy;
use statemachine::{ShowId, StateName};
use testkit::ledger;
use testkit::workload::audit_trails;
use tokio::sync::watch;

use crate::nemesis;
use crate::workload::{self, Process};
use crate::world::{self, Options, World, lock};
use node::paysim::Paysim;
use node::paysim::behaviour::Behaviour;
use statemachine::check::ledger::LedgerRecord;

/// Client processes of a run.
const PROCESSES: u64 = 6;
/// How long clients and the nemesis run, simulated.
const WINDOW: Duration = Duration::from_secs(8);
/// How long, after the heal, the cluster has to recover, settle and be read back.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);
/// With a provider: how long, once the processes have read back, the payments have to settle
/// (no attempt pending or unknown, no refund owed); and then the buyers to read their bookings.
const QUIESCE_MAX: Duration = Duration::from_secs(60);

/// What a run found.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// Valid, invalid (a bug) or unknown (the checker ran out of budget).
    pub verdict: Verdict,
    /// Why it is not valid, if it is not.
    pub problems: Vec<String>,
    /// The trace (the replay check compares it whole).
    pub trace: Vec<String>,
    /// Operations recorded, by completion: ok, fail, info.
    pub operations: (u64, u64, u64),
    /// Simulated time at the end.
    pub simulated: Duration,
}

/// What the driver learned before the sim ended.
#[derive(Default)]
struct Facts {
    problems: Vec<String>,
    /// With a provider: the largest id of each show the processes know of.
    largest: BTreeMap<u64, u64>,
    /// With a provider: the payments show's bookings, as the processes read them.
    bookings: Vec<statemachine::check::ledger::ClusterBooking>,
    /// With a provider: the ledger checker's verdict.
    ledger: Option<ledger::Judged>,
    /// The audit trails of each dated show (its holds', tickets', entries' and offers'), read
    /// after the processes read back.
    trails: BTreeMap<u64, Trails>,
}

/// Runs `options.seed` to its verdict.
pub fn run(options: Options) -> Outcome {
    let seed = options.seed;
    // Every replica breaks alike, as one broken release would.
    statemachine::inject::set(options.bug.as_slice());
    let nodes = options.nodes;
    let world = World::new(options);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut builder = turmoil::Builder::new();
    let max_latency = rand::Rng::gen_range(&mut rng, 2..=40);
    builder
        .rng_seed(seed)
        .epoch(world::epoch())
        .simulation_duration(Duration::from_secs(600))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(max_latency))
        .tcp_capacity(1 << 16);
    if rand::Rng::gen_bool(&mut rng, 0.5) {
        builder.enable_random_order();
    }
    let mut sim = builder.build();
    world.trace.push(format!("seed {seed}: {nodes} nodes, latency 1-{max_latency} ms"));
    for id in world.ids() {
        world.add_node(&mut sim, id);
    }
    world.add_paysim(&mut sim);
    let provider = world.options.provider;

    let recorder = Arc::new(Recorder::new(Box::new(|| {
        u64::try_from(turmoil::sim_elapsed().unwrap_or_default().as_nanos()).unwrap_or(u64::MAX)
    })));
    let facts = Arc::new(Mutex::new(Facts::default()));
    let (start_tx, start) = watch::channel(None::<u32>);
    let (stop_tx, stop) = watch::channel(false);
    let (healed_tx, healed) = watch::channel(false);
    let (read_back_tx, read_back) = watch::channel(0u64);
    let (settled_tx, settled) = watch::channel(false);
    let (done_tx, done) = watch::channel(0u64);

    // The processes.
    for process in 0..PROCESSES {
        let name = format!("client-{process}");
        lock(&world.clients).push(name.clone());
        let (world, recorder, facts) =
            (Arc::clone(&world), Arc::clone(&recorder), Arc::clone(&facts));
        let (mut start, stop, mut healed, done_tx) =
            (start.clone(), stop.clone(), healed.clone(), done_tx.clone());
        let (read_back_tx, mut settled) = (read_back_tx.clone(), settled.clone());
        let host_seed = world::mix(seed, 1_000 + process, 0);
        sim.client(
            name,
            raft::BookingRuntime::scope(host_seed, async move {
                let Ok(version) = start.wait_for(Option::is_some).await.map(|version| *version)
                else {
                    return Ok(());
                };
                let version = version.unwrap_or_default();
                let started =
                    Process::start(process, nodes, seed, recorder, version, provider).await;
                let mut done = match started {
                    Ok(client) => client.run(Duration::from_millis(60), stop).await,
                    Err(error) => {
                        // Sessions are issued by any node without Raft: only a harness bug
                        // or a dead cluster stops this.
                        lock(&facts)
                            .problems
                            .push(format!("process {process}: no session: {error}"));
                        read_back_tx.send_modify(|count| *count += 1);
                        done_tx.send_modify(|count| *count += 1);
                        return Ok(());
                    }
                };
                let _ = healed.wait_for(|go| *go).await;
                done.final_reads().await;
                if done.unresolved() > 0 {
                    lock(&facts).problems.push(format!(
                        "liveness: process {process} still has {} unknown outcomes after recovery",
                        done.unresolved()
                    ));
                }
                if provider {
                    let ids = ledger::known_ids(done.buyer());
                    ledger::merge_ids(&mut lock(&facts).largest, ids);
                }
                read_back_tx.send_modify(|count| *count += 1);
                // With a provider, the buyer reads its bookings once the payments settled.
                let _ = settled.wait_for(|go| *go).await;
                if provider {
                    match ledger::buyer_bookings(done.buyer(), &workload::LEDGER_SHOWS).await {
                        Ok(found) => lock(&facts).bookings.extend(found),
                        Err(error) => lock(&facts)
                            .problems
                            .push(format!("ledger: process {process}: {error}")),
                    }
                }
                world.trace.push(format!("process {process} done"));
                // Leaving, the host's runtime drops its connections in an order that depends on
                // tokio's process-wide task ids: cut the host off first, so that nothing of it
                // reaches the network (or draws from turmoil's randomness).
                for node in world.ids() {
                    turmoil::partition(format!("client-{process}"), crate::net::host(node));
                }
                done_tx.send_modify(|count| *count += 1);
                Ok(())
            }),
        );
    }

    // The driver: set-up, the nemesis, the heal, then liveness and convergence.
    {
        let (world, facts) = (Arc::clone(&world), Arc::clone(&facts));
        let recorder = Arc::clone(&recorder);
        let mut done = done.clone();
        sim.client(
            "driver",
            raft::BookingRuntime::scope(world::mix(seed, 999, 0), async move {
                let admin = workload::sdk(1, nodes);
                match set_up(&world, &admin).await {
                    Ok(version) => start_tx.send_replace(Some(version)),
                    Err(problem) => {
                        lock(&facts).problems.push(problem);
                        return Ok(());
                    }
                };
                let mut nemesis_rng = StdRng::seed_from_u64(world::mix(seed, 4242, 0));
                nemesis::run(&world, &mut nemesis_rng, WINDOW).await;
                stop_tx.send_replace(true);
                if let Err(problem) = heal_all(&world, &admin).await {
                    lock(&facts).problems.push(problem);
                }
                let healed_at = tokio::time::Instant::now();
                world.trace.push("healed");
                healed_tx.send_replace(true);
                let mut deadline = healed_at + RECOVERY_BOUND;
                let mut read_back = read_back.clone();
                let all_read_back = tokio::time::timeout_at(
                    deadline,
                    read_back.wait_for(|count| *count >= PROCESSES),
                )
                .await;
                if all_read_back.is_err() {
                    lock(&facts).problems.push(format!(
                        "liveness: processes not read back {RECOVERY_BOUND:?} after the heal"
                    ));
                }
                for show in workload::shows(provider).iter().filter(|show| show.is_dated()) {
                    match audit_trails(&admin, show.show, &recorder.history(), deadline).await {
                        Ok(trails) => {
                            world.trace.push(trails_read(show.show, &trails));
                            lock(&facts).trails.insert(show.show, trails);
                        }
                        Err(problem) => lock(&facts).problems.push(problem),
                    }
                }
                let settle = match &world.paysim {
                    Some(paysim) => {
                        let largest = lock(&facts).largest.clone();
                        let settled = settle(&world, paysim, &admin, largest).await;
                        deadline = tokio::time::Instant::now() + RECOVERY_BOUND;
                        Some(settled)
                    }
                    None => None,
                };
                settled_tx.send_replace(true);
                let all_done =
                    tokio::time::timeout_at(deadline, done.wait_for(|count| *count >= PROCESSES))
                        .await;
                if all_done.is_err() {
                    lock(&facts).problems.push(format!(
                        "liveness: processes not done {RECOVERY_BOUND:?} after the heal"
                    ));
                }
                if let (Some(settled), Some(paysim)) = (settle, &world.paysim) {
                    let judged = match settled {
                        Ok(settled) => judge_ledger(&world, paysim, &admin, settled, &facts).await,
                        Err(error) => ledger::Judged::unreadable(error),
                    };
                    lock(&facts).ledger = Some(judged);
                }
                if let Err(problem) = leaders_everywhere(&world, deadline).await {
                    lock(&facts).problems.push(problem);
                }
                if let Err(problem) = converged(&world, deadline).await {
                    lock(&facts).problems.push(problem);
                }
                Ok(())
            }),
        );
    }

    loop {
        match sim.step() {
            Ok(true) => break,
            Ok(false) => world.perform(&mut sim),
            Err(error) => {
                lock(&facts).problems.push(format!("simulation: {error}"));
                break;
            }
        }
    }
    // The checkers' model is the state machine too: it must judge by the rules as written.
    statemachine::inject::set(&[]);
    let simulated = sim.elapsed();
    let history = recorder.history();
    let mut problems = std::mem::take(&mut lock(&facts).problems);
    let judged = lock(&facts).ledger.take();
    let trails = std::mem::take(&mut lock(&facts).trails);
    let mut verdict = judge(&history, provider, &trails, &mut problems);
    if provider {
        let ledger_verdict = judged.as_ref().map_or(Verdict::Invalid, |judged| judged.verdict);
        if ledger_verdict != Verdict::Valid {
            let results = judged.map(|judged| judged.results.to_string());
            problems.push(format!(
                "ledger: {ledger_verdict:?}: {}",
                results.unwrap_or_else(|| "never judged".into())
            ));
        }
        verdict = Verdict::combine([verdict, ledger_verdict]);
    }
    let mut trace = world.trace.lines();
    if world.options.verbose {
        for event in &history.events {
            let value = event.value.as_ref().map(|value| format!("{value:?}"));
            trace.push(format!(
                "{:>9.3}s op {} process {} {:?} {} {}",
                event.time_ns as f64 / 1e9,
                event.op,
                event.process,
                event.kind,
                event.f,
                event.error.clone().or(value).unwrap_or_default()
            ));
        }
    }
    trace.push(format!(
        "history: {} events, fingerprint {:016x}",
        history.events.len(),
        fingerprint(&history)
    ));
    let mut counts = (0, 0, 0);
    for event in &history.events {
        match event.kind {
            statemachine::check::history::EventKind::Ok => counts.0 += 1,
            statemachine::check::history::EventKind::Fail => counts.1 += 1,
            statemachine::check::history::EventKind::Info => counts.2 += 1,
            statemachine::check::history::EventKind::Invoke => {}
        }
    }
    drop(sim);
    Outcome { verdict, problems, trace, operations: counts, simulated }
}

/// The verdict: the checkers on the history, and the problems the driver found. With a
/// provider, the model checks every show but the payments show: its payment outcomes and
/// refunds are proposed by the cluster's own workers, so they are not in the history, and the
/// model would keep its checked-out holds `processing` for ever (the ledger judges them; the
/// model-free booking checks still read the whole history). The dated shows are judged by the
/// deadline checks alone, with their audit `trails` (by show): their holds, grants and offers
/// expire, which neither the model nor the booking checks (both assume no deadline passes) can
/// follow.
fn judge(
    history: &History,
    provider: bool,
    trails: &BTreeMap<u64, Trails>,
    problems: &mut Vec<String>,
) -> Verdict {
    let shows = workload::shows(provider);
    let modelled: Vec<_> = shows
        .iter()
        .filter(|show| show.kind != workload::Kind::Payments && !show.is_dated())
        .collect();
    let setups: BTreeMap<_, _> =
        modelled.iter().map(|show| (statemachine::ShowId(show.show), show.model_setup())).collect();
    let modelled_history = History {
        events: history
            .events
            .iter()
            .filter(|event| event.call.show().is_none_or(|show| setups.contains_key(&show)))
            .cloned()
            .collect(),
    };
    // What the driver found (liveness, convergence, set-up) is a failure whatever the checkers say.
    let mut verdicts = if problems.is_empty() { Vec::new() } else { vec![Verdict::Invalid] };
    let budget = Budget { steps_max: 500_000 };
    match check_history(&modelled_history, &setups, 0, budget, &mut || true) {
        Ok(shows) => {
            for show in shows {
                if show.verdict != Verdict::Valid {
                    problems.push(format!(
                        "linearizability of show {}: {:?} after {} steps: {}",
                        show.show.0,
                        show.verdict,
                        show.steps,
                        show.explanation.unwrap_or_default()
                    ));
                }
                verdicts.push(show.verdict);
            }
        }
        Err(error) => {
            problems.push(format!("history: {error}"));
            verdicts.push(Verdict::Invalid);
        }
    }
    let dated: Vec<_> = shows.iter().filter(|show| show.is_dated()).collect();
    let undated = History {
        events: history
            .events
            .iter()
            .filter(|event| {
                event.call.show().is_none_or(|id| dated.iter().all(|show| show.show != id.0))
            })
            .cloned()
            .collect(),
    };
    let policy = short_deadline_policy();
    let mut checks = vec![("booking checks".to_owned(), check_bookings(&undated))];
    for show in dated {
        let Some(trails) = trails.get(&show.show) else {
            problems.push(format!("deadlines: show {}'s audit trails were never read", show.show));
            return Verdict::Invalid;
        };
        let window = show.admission_window();
        let checked = check_deadlines(history, ShowId(show.show), &policy, window, trails);
        checks.push((format!("show {}", show.show), checked));
    }
    for (what, checked) in checks {
        match checked {
            Ok(reports) => {
                for report in reports {
                    if report.verdict != Verdict::Valid {
                        problems.push(format!(
                            "{what}: {}: {:?}: {:?}",
                            report.check, report.verdict, report.problems
                        ));
                    }
                    verdicts.push(report.verdict);
                }
            }
            Err(error) => {
                problems.push(format!("history: {error}"));
                verdicts.push(Verdict::Invalid);
            }
        }
    }
    Verdict::combine(verdicts)
}

/// What the audit trails read of `show` hold: how many of each kind, and how many offers ended
/// each way (so a trace shows whether offers raced their deadlines).
fn trails_read(show: u64, trails: &Trails) -> String {
    let ended = |to: StateName| {
        let last = |steps: &&Vec<Step>| steps.last().is_some_and(|step| step.to == to);
        trails.offers.values().filter(last).count()
    };
    format!(
        "show {show}: trails of {} holds, {} tickets, {} entries, {} offers ({} accepted, {} \
         declined, {} expired)",
        trails.holds.len(),
        trails.tickets.len(),
        trails.entries.len(),
        trails.offers.len(),
        ended(StateName::Accepted),
        ended(StateName::Declined),
        ended(StateName::Expired),
    )
}

/// Creates every show (retrying under one key each), waits until each is readable
/// linearizably, and returns the price version holds quote.
async fn set_up(world: &World, admin: &client::Client) -> Result<u32, String> {
    let mut version = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for show in workload::shows(world.options.provider) {
        let key = format!("sim-create-{}", show.show);
        loop {
            match admin.create_show(&show.new_show(), Some(&key)).await {
                Ok(_) => break,
                Err(error) if tokio::time::Instant::now() > deadline => {
                    return Err(format!("set-up: show {}: {error}", show.show));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        loop {
            match admin.get_seat_map_linearizable(show.show).await {
                Ok(map) => {
                    version = map.price_version;
                    break;
                }
                Err(error) if tokio::time::Instant::now() > deadline => {
                    return Err(format!("set-up: seat map {}: {error}", show.show));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    world.trace.push("set-up done");
    Ok(version)
}

/// The provider's ledger as the checker reads it (the same JSON `GET /ledger` answers).
fn ledger_of(paysim: &Paysim) -> Result<Vec<LedgerRecord>, String> {
    let records = serde_json::to_value(paysim.records()).map_err(|error| error.to_string())?;
    serde_json::from_value(records).map_err(|error| format!("not a ledger: {error}"))
}

/// Waits for the payments to settle, as the Jepsen suite does, and traces how it went.
async fn settle(
    world: &World,
    paysim: &Paysim,
    admin: &client::Client,
    largest: BTreeMap<u64, u64>,
) -> Result<ledger::Settled, String> {
    let shows = workload::LEDGER_SHOWS;
    let mut read = || std::future::ready(ledger_of(paysim));
    let settled = ledger::settle(&mut read, admin, &shows, largest, QUIESCE_MAX).await?;
    world.trace.push(format!(
        "payments: {} attempts, {} unsettled after {:.1} s",
        settled.payments.len(),
        settled.unsettled.len(),
        settled.waited_s
    ));
    Ok(settled)
}

/// The ledger checker on the settled payments, the bookings the processes read and the final
/// seat map.
async fn judge_ledger(
    world: &World,
    paysim: &Paysim,
    admin: &client::Client,
    settled: ledger::Settled,
    facts: &Mutex<Facts>,
) -> ledger::Judged {
    let shows = workload::LEDGER_SHOWS;
    let seats = match ledger::booked_seats(admin, &shows).await {
        Ok(seats) => seats,
        Err(error) => return ledger::Judged::unreadable(error),
    };
    let records = match ledger_of(paysim) {
        Ok(records) => records,
        Err(error) => return ledger::Judged::unreadable(error),
    };
    let (charges, refunds) = records.iter().fold((0, 0), |(c, r), record| match record {
        LedgerRecord::Charge(_) => (c + 1, r),
        LedgerRecord::Refund(_) => (c, r + 1),
    });
    let bookings = std::mem::take(&mut lock(facts).bookings);
    world.trace.push(format!(
        "ledger: {charges} charges, {refunds} refunds, {} bookings read",
        bookings.len()
    ));
    ledger::verdict(settled, bookings, seats, records)
}

/// Heals everything: every link repaired and released, every crashed node restarted, no loss,
/// no skew, every removed voter added back.
///
/// # Errors
///
/// If a restarted node is not running within the recovery bound.
async fn heal_all(world: &World, admin: &client::Client) -> Result<(), String> {
    // Disks first, so that no node stops itself after the restarts below.
    for id in world.ids() {
        crate::nemesis::mend_disk(world, id);
    }
    let down: Vec<_> = world.down().into_iter().collect();
    if !down.is_empty() {
        world.act(world::Action::Restart(down));
    }
    world.act(world::Action::Loss(0.0));
    let ids = world.ids();
    if let Some(paysim) = &world.paysim {
        // No declines either, so that the run can settle.
        paysim.set_behaviour(Behaviour::default())?;
        for node in &ids {
            turmoil::repair(world::PAYSIM_HOST, crate::net::host(*node));
            turmoil::release(world::PAYSIM_HOST, crate::net::host(*node));
        }
    }
    for a in &ids {
        world.set_skew(*a, 0);
        for b in &ids {
            if a < b {
                turmoil::repair(crate::net::host(*a), crate::net::host(*b));
                turmoil::release(crate::net::host(*a), crate::net::host(*b));
            }
        }
        for client in lock(&world.clients).iter() {
            turmoil::release(crate::net::host(*a), client.clone());
        }
    }
    // Wait for the restarted nodes, then put back any voter a membership fault left out.
    let deadline = tokio::time::Instant::now() + RECOVERY_BOUND;
    while world.running().len() < ids.len() {
        if tokio::time::Instant::now() > deadline {
            let down: Vec<_> = ids.iter().filter(|id| !world.running().contains_key(id)).collect();
            return Err(format!(
                "liveness: nodes {down:?} not running {RECOVERY_BOUND:?} after the heal"
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for group in 1..=world::DATA_GROUPS {
        for node in &ids {
            nemesis::readmit(world, admin, group, *node).await;
        }
    }
    Ok(())
}

/// Every group has a leader that committed in its term (checked on the leaders' own metrics).
async fn leaders_everywhere(world: &World, deadline: tokio::time::Instant) -> Result<(), String> {
    loop {
        let missing: Vec<u64> = (0..=world::DATA_GROUPS)
            .filter(|group| nemesis::leader(world, *group).is_none())
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("liveness: groups {missing:?} have no leader after the heal"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every member of every group applied the same index and has the same state digest.
async fn converged(world: &World, deadline: tokio::time::Instant) -> Result<(), String> {
    loop {
        let mut differing = Vec::new();
        let running = world.running();
        for group in 0..=world::DATA_GROUPS {
            let Some(voters) = nemesis::voters(world, group) else {
                differing.push(format!("group {group}: no leader"));
                continue;
            };
            let mut states = BTreeMap::new();
            for voter in voters {
                let Some(hosted) = running.get(&voter).and_then(|shared| shared.groups.get(&group))
                else {
                    differing.push(format!("group {group}: node {voter} not running"));
                    continue;
                };
                let applied = hosted.reader.last_applied().ok().flatten().map(|log| log.index);
                let digest = hosted.reader.read(|state| format!("{:?}", state.digest())).ok();
                let committed =
                    hosted.raft.metrics().borrow_watched().local_committed.map(|log| log.index);
                states.insert(voter, (applied, committed, digest));
            }
            let first = states.values().next().cloned();
            if states.values().any(|state| Some(state) != first.as_ref()) {
                differing.push(format!("group {group}: {states:?}"));
            }
        }
        if differing.is_empty() {
            world.trace.push("converged");
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            if let Some(detail) = first_difference(world) {
                differing.push(detail);
            }
            return Err(format!("convergence: {}", differing.join("; ")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Where the states of two replicas of a group first differ (their debug forms, side by side).
fn first_difference(world: &World) -> Option<String> {
    let running = world.running();
    for group in 0..=world::DATA_GROUPS {
        let states: Vec<(u64, String)> = running
            .iter()
            .filter_map(|(id, shared)| {
                let hosted = shared.groups.get(&group)?;
                Some((*id, hosted.reader.read(|state| format!("{state:?}")).ok()?))
            })
            .collect();
        for pair in states.windows(2) {
            let ((a, left), (b, right)) = (&pair[0], &pair[1]);
            if left != right {
                let at = left.bytes().zip(right.bytes()).position(|(x, y)| x != y).unwrap_or(0);
                let from = at.saturating_sub(300);
                let cut = |text: &str| {
                    text.get(from..(at + 300).min(text.len())).unwrap_or("").to_owned()
                };
                return Some(format!(
                    "group {group} first differs at byte {at}: node {a}: ...{}... node {b}: ...{}...",
                    cut(left),
                    cut(right)
                ));
            }
        }
    }
    None
}

/// A hash of the history, for the trace (FNV-1a over its JSON).
fn fingerprint(history: &History) -> u64 {
    let text = serde_json::to_string(&history.events).unwrap_or_default();
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    })
}
