//! The simulated world of one seed: the turmoil simulation, the nodes running in it (each a
//! real `Node` on a `SimDisk`, with a skewable clock and seeded randomness), the trace, and the
//! actions only the step loop can carry out (power loss and restart need `&mut Sim`).
//!
//! Owns how a node is configured and booted in the simulation, the registry the checks read
//! nodes through, and the trace every replay is compared by. Never decides a fault (the nemesis
//! does) and never judges (the checks do).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use node::config::{Args, Config};
use node::environment::{Entropy, Environment};
use node::node::{Node, Shared};
use node::paysim::ledger::Ledger;
use node::paysim::{Paysim, WebhookSettings};
use openraft::async_runtime::WatchReceiver;
use raft::{BookingRuntime, Clock, DialerRef, NetworkConfig, NodeId, SimDisk, Storage, WallClock};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use statemachine::inject::Bug;

use crate::net::{self, TurmoilNet};

/// The simulated wall clock starts here (turmoil's default would be the real time).
pub const EPOCH_S: u64 = 1_800_000_000;
/// The webhook secret of every simulated node.
pub const WEBHOOK_SECRET: &str = "sim-webhook-secret-0123456789abcdef";
/// The nodes' operator credential; every SDK client of the run carries it (the SDK sends it on
/// operator calls only).
pub const OPERATOR_TOKEN: &str = "sim-operator-token-0123456789abcdef";
/// The nodes' session secret.
const SESSION_SECRET: &str = "sim-session-secret-0123456789abcdef";
/// The turmoil host name of the simulated payment provider.
pub const PAYSIM_HOST: &str = "paysim";
/// The port it serves on.
pub const PAYSIM_PORT: u16 = 7100;

/// What one run is made of, all drawn from the seed except what the caller fixes.
#[derive(Clone, Debug)]
pub struct Options {
    /// The seed.
    pub seed: u64,
    /// Nodes in the cluster (3 or 5).
    pub nodes: u64,
    /// A planted bug, if any (`statemachine::inject`): the run switches it on for its whole
    /// cluster.
    pub bug: Option<Bug>,
    /// Whether the trace also lists every operation of the history (for `--trace`).
    pub verbose: bool,
    /// Whether the payment provider runs as a host: the nodes' payment workers charge and
    /// refund through it, one show's checkouts are paid that way and judged against its
    /// ledger, and the nemesis has provider faults too.
    pub provider: bool,
}

/// A line of the trace, with its simulated time.
#[derive(Clone, Default)]
pub struct Trace(Arc<Mutex<Vec<String>>>);

impl Trace {
    /// Adds `event` at the current simulated time (inside the simulation).
    pub fn push(&self, event: impl AsRef<str>) {
        self.push_at(turmoil::sim_elapsed().unwrap_or_default(), event);
    }

    /// Adds `event` at simulated time `at` (for the step loop, outside any host).
    pub fn push_at(&self, at: Duration, event: impl AsRef<str>) {
        lock(&self.0).push(format!("{:>9.3}s {}", at.as_secs_f64(), event.as_ref()));
    }

    /// The trace so far.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.0).clone()
    }
}

/// Something only the step loop can do.
#[derive(Debug)]
pub enum Action {
    /// Power loss of these nodes: each is cut off, its runtime dropped, its disk crashed.
    Crash(Vec<NodeId>),
    /// Restart of these crashed nodes on what their disks kept.
    Restart(Vec<NodeId>),
    /// The node stopped itself (its storage failed): its process ends, without a power loss,
    /// and its supervisor restarts it [`SUPERVISOR_RESTART`] later, as `systemd` would.
    Stop(NodeId),
    /// Turns message loss on every link to this rate (0 turns it off).
    Loss(f64),
}

/// The simulated wall clock, unskewed: milliseconds since the Unix epoch in simulated time,
/// from [`EPOCH_S`] on (0 outside the simulation). Every node's clock reads it plus its skew;
/// the simulated payment provider signs its webhooks by it, so that the nodes accept them and a
/// seed replays exactly (the real time would differ from one replay to the next).
pub fn wall_clock_ms() -> u64 {
    u64::try_from(turmoil::since_epoch().unwrap_or_default().as_millis()).unwrap_or(u64::MAX)
}

/// One node's clock: simulated time plus a skew the nemesis sets.
struct SimClock {
    skew_ms: Arc<AtomicI64>,
}

impl WallClock for SimClock {
    fn now_ms(&self) -> u64 {
        let now = i64::try_from(wall_clock_ms()).unwrap_or(i64::MAX);
        u64::try_from(now.saturating_add(self.skew_ms.load(Ordering::Relaxed))).unwrap_or(0)
    }
}

/// The world of one run, shared by the hosts, the clients, the nemesis and the step loop.
pub struct World {
    /// The run's options.
    pub options: Options,
    /// The trace.
    pub trace: Trace,
    /// Every node's disk, outliving its restarts.
    disks: BTreeMap<NodeId, SimDisk>,
    /// Every node's clock skew, in ms.
    skews: BTreeMap<NodeId, Arc<AtomicI64>>,
    /// How often each node has booted.
    boots: BTreeMap<NodeId, AtomicU64>,
    /// The nodes that run now.
    running: Mutex<BTreeMap<NodeId, Arc<Shared>>>,
    /// Nodes crashed and not yet restarted.
    down: Mutex<BTreeSet<NodeId>>,
    /// Nodes that stopped themselves, each with when its supervisor restarts it (simulated
    /// time since the start); a power loss meanwhile leaves the restart to the nemesis.
    stopped: Mutex<BTreeMap<NodeId, Duration>>,
    /// Actions for the step loop.
    actions: Mutex<VecDeque<Action>>,
    /// The step loop's randomness (what a power loss keeps).
    rng: Mutex<StdRng>,
    /// Every client host's name (and the provider's), for cutting crashed nodes off.
    pub clients: Mutex<Vec<String>>,
    /// The payment provider, when the run has one.
    pub paysim: Option<Arc<Paysim>>,
}

impl World {
    /// A world for `options`.
    pub fn new(options: Options) -> Arc<World> {
        let mut rng = StdRng::seed_from_u64(options.seed ^ 0x5EED_D15C);
        let ids = 1..=options.nodes;
        let disks: BTreeMap<NodeId, SimDisk> = ids
            .clone()
            .map(|id| {
                let disk = SimDisk::new();
                // Fast disks, or slow ones whose sync outlasts a replication round trip.
                let sync_ms =
                    if rng.gen_bool(0.5) { rng.gen_range(1..=5) } else { rng.gen_range(10..=60) };
                disk.set_sync_latency(Duration::from_millis(sync_ms));
                if options.bug == Some(Bug::AckBeforeSync) {
                    disk.inject_ack_before_sync(true);
                }
                (id, disk)
            })
            .collect();
        let paysim = options.provider.then(|| {
            let webhooks = WebhookSettings {
                urls: (1..=options.nodes)
                    .map(|id| format!("http://{}/v1/payments/webhook", net::address(id)))
                    .collect(),
                roots: None,
                secret: WEBHOOK_SECRET.to_owned(),
                attempts: 8,
                dialer: Some(DialerRef(Arc::new(TurmoilNet))),
            };
            // Stamps and signs by the unskewed simulated clock, as a provider's own would.
            let clock = Clock::new(SimClock { skew_ms: Arc::default() });
            let seed = options.seed ^ 0x7061_7973;
            let behaviour = crate::nemesis::provider_behaviour(testkit::provider::baseline());
            Paysim::new(Ledger::in_memory(), behaviour, seed, Some(webhooks), clock)
                .expect("the simulator's provider settings are valid")
        });
        Arc::new(World {
            paysim,
            trace: Trace::default(),
            skews: ids.clone().map(|id| (id, Arc::default())).collect(),
            boots: ids.map(|id| (id, AtomicU64::new(0))).collect(),
            disks,
            running: Mutex::default(),
            down: Mutex::default(),
            stopped: Mutex::default(),
            actions: Mutex::default(),
            rng: Mutex::new(rng),
            clients: Mutex::default(),
            options,
        })
    }

    /// Every node id.
    pub fn ids(&self) -> Vec<NodeId> {
        (1..=self.options.nodes).collect()
    }

    /// The running nodes.
    pub fn running(&self) -> BTreeMap<NodeId, Arc<Shared>> {
        lock(&self.running).clone()
    }

    /// Nodes crashed and not yet restarted.
    pub fn down(&self) -> BTreeSet<NodeId> {
        lock(&self.down).clone()
    }

    /// Sets node `id`'s clock skew.
    pub fn set_skew(&self, id: NodeId, skew_ms: i64) {
        self.skews[&id].store(skew_ms, Ordering::Relaxed);
    }

    /// Queues `action` for the step loop.
    pub fn act(&self, action: Action) {
        let ids = match &action {
            Action::Crash(ids) => ids.as_slice(),
            Action::Stop(id) => std::slice::from_ref(id),
            Action::Restart(_) | Action::Loss(_) => &[],
        };
        if !ids.is_empty() {
            let mut running = lock(&self.running);
            let mut down = lock(&self.down);
            for id in ids {
                running.remove(id);
                down.insert(*id);
            }
        }
        lock(&self.actions).push_back(action);
    }

    /// Node `id`'s disk.
    pub fn disk(&self, id: NodeId) -> &SimDisk {
        &self.disks[&id]
    }

    /// Carries out the queued actions (called by the step loop between steps).
    pub fn perform(&self, sim: &mut turmoil::Sim<'_>) {
        // The supervisor: a node that stopped itself restarts when its time comes.
        let due: Vec<NodeId> = lock(&self.stopped)
            .iter()
            .filter(|(_, at)| **at <= sim.elapsed())
            .map(|(id, _)| *id)
            .collect();
        if !due.is_empty() {
            lock(&self.actions).push_back(Action::Restart(due));
        }
        loop {
            let Some(action) = lock(&self.actions).pop_front() else { return };
            match action {
                Action::Stop(id) => {
                    // It sends nothing more: cut off first, as for a power loss.
                    for other in self.hosts_but(id) {
                        sim.partition(net::host(id), other);
                    }
                    sim.crash(net::host(id));
                    lock(&self.stopped).insert(id, sim.elapsed() + SUPERVISOR_RESTART);
                    self.trace.push_at(sim.elapsed(), format!("node {id} stopped"));
                }
                Action::Crash(ids) => {
                    for id in ids {
                        // A power loss of a stopped node: the nemesis restarts it.
                        lock(&self.stopped).remove(&id);
                        // A machine that loses power sends nothing: cut it off first, so that
                        // the sockets the crash drops (in an order that depends on tokio's
                        // process-global task ids) never reach the network or draw from
                        // turmoil's rng.
                        for other in self.hosts_but(id) {
                            sim.partition(net::host(id), other);
                        }
                        sim.crash(net::host(id));
                        let disk = &self.disks[&id];
                        let unsynced = disk.unsynced_batches();
                        // Half the power losses keep nothing unsynced, the strictest crash.
                        let keep = {
                            let mut rng = lock(&self.rng);
                            if rng.gen_bool(0.5) { 0 } else { rng.gen_range(0..=unsynced) }
                        };
                        let lost = disk.crash(keep);
                        self.trace.push_at(
                            sim.elapsed(),
                            format!(
                                "power loss of node {id}: kept {keep}, lost {lost} unsynced batches"
                            ),
                        );
                    }
                }
                Action::Restart(ids) => {
                    for id in ids {
                        lock(&self.stopped).remove(&id);
                        // Restarted already (by its supervisor, or an earlier restart).
                        if !lock(&self.down).contains(&id) {
                            continue;
                        }
                        for other in self.hosts_but(id) {
                            sim.repair(net::host(id), other);
                        }
                        lock(&self.down).remove(&id);
                        self.trace.push_at(sim.elapsed(), format!("restart node {id}"));
                        sim.bounce(net::host(id));
                    }
                }
                Action::Loss(rate) => {
                    self.trace.push_at(sim.elapsed(), format!("message loss {rate}"));
                    sim.set_fail_rate(rate);
                }
            }
        }
    }

    /// Every other host of the simulation.
    fn hosts_but(&self, id: NodeId) -> Vec<String> {
        let mut hosts: Vec<String> =
            self.ids().into_iter().filter(|other| *other != id).map(net::host).collect();
        hosts.extend(lock(&self.clients).iter().cloned());
        hosts
    }

    /// Adds node `id` to the simulation: its host boots it (again after every restart).
    pub fn add_node(self: &Arc<World>, sim: &mut turmoil::Sim<'_>, id: NodeId) {
        let world = Arc::clone(self);
        sim.host(net::host(id), move || {
            let boot = world.boots[&id].fetch_add(1, Ordering::Relaxed);
            let seed = mix(world.options.seed, id, boot);
            BookingRuntime::scope(seed, Arc::clone(&world).run_node(id, boot))
        });
    }

    /// Adds the payment provider's host (never crashed: its faults are its behaviour and its
    /// links), serving paysim's HTTP API on [`PAYSIM_PORT`].
    pub fn add_paysim(self: &Arc<World>, sim: &mut turmoil::Sim<'_>) {
        let Some(paysim) = self.paysim.clone() else { return };
        lock(&self.clients).push(PAYSIM_HOST.to_owned());
        let seed = mix(self.options.seed, 777, 0);
        sim.host(PAYSIM_HOST, move || {
            let paysim = Arc::clone(&paysim);
            BookingRuntime::scope(seed, async move {
                let incoming = net::incoming_on(PAYSIM_PORT).await?;
                let (_keep, stopped) = tokio::sync::oneshot::channel();
                let _server = node::node::serve_incoming(incoming, paysim.router(), stopped);
                std::future::pending::<()>().await;
                Ok(())
            })
        });
    }

    /// Boots node `id` and keeps it running until the host crashes.
    async fn run_node(self: Arc<World>, id: NodeId, boot: u64) -> turmoil::Result {
        let config = self.config(id)?;
        let network = NetworkConfig {
            connect_timeout: Duration::from_millis(300),
            call_timeout_default: Duration::from_millis(500),
            keep_alive_interval: Duration::from_millis(500),
            dialer: Some(DialerRef(Arc::new(TurmoilNet))),
            ..NetworkConfig::default()
        };
        let skew_ms = Arc::clone(&self.skews[&id]);
        let entropy = Mutex::new(StdRng::seed_from_u64(mix(self.options.seed ^ 0xE17, id, boot)));
        let storage = Storage::simulated(self.disks[&id].clone());
        let environment = Environment {
            storage: storage.clone(),
            network,
            clock: Clock::new(SimClock { skew_ms }),
            entropy: Entropy::new(move |bytes: &mut [u8]| {
                lock(&entropy).fill_bytes(bytes);
                Ok(())
            }),
            incoming: Some(net::incoming().await?),
        };
        let node = match Node::start_with(config, environment).await {
            Ok(node) => node,
            // A disk that fails at start-up stops the node as it would a running one.
            Err(error) => match storage.failed() {
                Some(reason) => return self.stop(id, &reason).await,
                None => return Err(error.into()),
            },
        };
        let shared = Arc::clone(node.shared());
        self.trace.push(format!("node {id} booted (boot {boot})"));
        // Always, not only with --trace: the watchers are tasks of the node's runtime, and a
        // replay must run exactly what the first run ran.
        for (group, hosted) in &shared.groups {
            watch_metrics(&self.trace, id, *group, hosted.raft.clone());
        }
        lock(&self.running).insert(id, shared);
        // The node runs in tasks of this host's runtime; keep it until the host is crashed, or
        // until its storage fails and it stops itself (fail-stop, as `bookingd` exits).
        let reason = node.storage_failure().await;
        self.stop(id, &reason).await
    }

    /// Node `id` stops itself because its storage failed: the step loop ends its process.
    async fn stop(&self, id: NodeId, reason: &str) -> turmoil::Result {
        self.trace.push(format!("node {id} stops: storage failed: {reason}"));
        self.act(Action::Stop(id));
        std::future::pending::<()>().await;
        Ok(())
    }

    /// Node `id`'s configuration: small timeouts, snapshots every few entries, no rate limits.
    fn config(&self, id: NodeId) -> Result<Config, node::config::ConfigError> {
        let nodes = self.options.nodes;
        let peers =
            (1..=nodes).filter(|peer| *peer != id).map(|peer| (peer, net::address(peer))).collect();
        let secrets = |name: &str| match name {
            "BOOKING_SESSION_SECRET" => Some(SESSION_SECRET.to_owned()),
            "BOOKING_OPERATOR_TOKEN" => Some(OPERATOR_TOKEN.to_owned()),
            "BOOKING_WEBHOOK_SECRET" => Some(WEBHOOK_SECRET.to_owned()),
            _ => None,
        };
        let args = Args {
            id: Some(id),
            data: Some("/simulated".into()),
            listen: Some(format!("0.0.0.0:{}", net::PORT).parse().expect("a socket address")),
            advertise: Some(net::address(id)),
            peers,
            bootstrap: true,
            groups: Some(DATA_GROUPS),
            replicas: Some(usize::try_from(nodes).unwrap_or(3)),
            heartbeat_ms: Some(100),
            election_min_ms: Some(400),
            election_max_ms: Some(800),
            snapshot_logs: Some(24),
            tick_ms: Some(100),
            // The defaults (a week, 30 days): nothing in a simulated run lives that long.
            archive_after_s: None,
            retention_s: None,
            // The default (300 s), which absorbs the nemesis's skew of up to 30 s.
            webhook_tolerance_s: None,
            // With a provider, every group leader's payment worker charges through it; without,
            // outcomes come only as the buyers' own webhooks.
            provider_url: self
                .options
                .provider
                .then(|| format!("http://{PAYSIM_HOST}:{PAYSIM_PORT}")),
            // No outbox sinks: each group leader acknowledges its outbox instead.
            sinks: Vec::new(),
            sink_attempts: None,
            sink_age_max_s: None,
            sink_concurrency: None,
            sink_rate: None,
            // No auditor: it checks and digests on a blocking thread, outside the simulator's
            // control, so a seed would no longer replay exactly.
            audit_interval_ms: None,
            audit_checkpoint_entries: Some(0),
            rate_per_session: Some(1_000_000),
            rate_per_address: Some(1_000_000),
            rate_new_sessions_per_address: Some(1_000_000),
            route_rate: Vec::new(),
            snapshot_max_bytes: None,
            // The simulated disk is small: a full-disk fault leaves a few KiB.
            disk_reserve_bytes: Some(SIM_DISK_RESERVE_BYTES),
            max_connections: None,
            max_in_flight: None,
            max_streams_per_connection: None,
            request_deadline_ms: None,
            header_deadline_ms: None,
            client_tls: false,
            config: None,
            session_secret_file: None,
            session_secret_previous_file: None,
            session_ttl_s: None,
            operator_token_file: None,
            webhook_secret_file: None,
            sink_secret_file: None,
            dev: false,
            // The simulator's nodes keep Raft on the client port, over its simulated network.
            peer_listen: None,
            peer_advertise: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            plain_peers: true,
        };
        Config::load_with(args, &secrets)
    }
}

/// How long after a node stopped itself its supervisor restarts it.
pub const SUPERVISOR_RESTART: Duration = Duration::from_secs(1);

/// The free space under which a simulated node refuses client writes.
pub const SIM_DISK_RESERVE_BYTES: u64 = 16 * 1024;

/// Data groups of the simulated cluster (plus the metadata group 0).
pub const DATA_GROUPS: u64 = 2;

/// Records every change of a group's Raft metrics on node `id`: the finest replay check.
fn watch_metrics(trace: &Trace, id: NodeId, group: u64, raft: raft::Raft) {
    let trace = trace.clone();
    tokio::spawn(async move {
        let mut metrics = raft.metrics();
        let mut last = String::new();
        loop {
            let line = {
                let m = metrics.borrow_watched();
                format!(
                    "node {id} group {group}: {:?} term {} leader {:?} last_log {:?} committed \
                     {:?} applied {:?} snapshot {:?}",
                    m.state,
                    m.current_term,
                    m.current_leader,
                    m.last_log_index,
                    m.local_committed.map(|log| log.index),
                    m.last_applied.map(|log| log.index),
                    m.snapshot.map(|log| log.index),
                )
            };
            if line != last {
                trace.push(&line);
                last = line;
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    });
}

/// A seed for one boot of one node, from the run's seed.
pub fn mix(seed: u64, id: NodeId, boot: u64) -> u64 {
    let mut x =
        seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ boot.wrapping_mul(0xD1B5_4A32_D192_ED03);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

/// The simulated epoch.
pub fn epoch() -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_secs(EPOCH_S)
}

/// Locks `mutex`; every critical section here is a push, a take or an insert.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
