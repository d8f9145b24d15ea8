//! The nemesis of a simulated run: faults drawn from the seed, one at a time, each installed,
//! held for a while and healed, until the fault window closes; then everything is healed.
//!
//! Owns the fault menu: a node cut off from its peers, the cluster split in two, one link cut,
//! power loss of a group's leader, a majority or every node (unsynced writes really lost), a paused
//! node (every message to and from it held, then delivered late), message loss on every link,
//! a leader transfer, a voter removed and added back, a skewed clock on the node that leads
//! (its stamps jump by up to 30 s either way), and buyers cut off from the node that leads
//! (half of the client processes, while the node stays in the cluster), and a broken disk under
//! the node that leads (every sync fails, every write fails, or the disk is full: a node whose
//! write or sync failed stops itself, and its supervisor restarts it a second later, failing
//! again while the disk stays broken). With a provider: its faults (the kit's menu,
//! shared with the Jepsen suite: an outage, slowness past the nodes' call timeout, duplicate,
//! late and out-of-order webhooks, charges that time out, webhooks before the charge call
//! returns), and the provider cut off from every node. Message delay and reordering come from
//! turmoil's latency, drawn per run. Never checks anything.

use std::time::Duration;

use openraft::ServerState;
use openraft::async_runtime::WatchReceiver;
use raft::NodeId;
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

use crate::net;
use crate::workload::sdk;
use crate::world::{Action, PAYSIM_HOST, World};
use node::paysim::behaviour::Behaviour;

/// One fault.
#[derive(Clone, Debug)]
enum Fault {
    /// Node cut off from every peer.
    Isolate(NodeId),
    /// Peers split into two sides.
    Halves(Vec<NodeId>, Vec<NodeId>),
    /// One peer link cut.
    Link(NodeId, NodeId),
    /// Power loss of these nodes.
    Crash(Vec<NodeId>),
    /// Every message to and from the node held.
    Pause(NodeId),
    /// Message loss on every link at this rate.
    Loss(f64),
    /// The group's leadership moved to another voter.
    Transfer { group: u64 },
    /// A voter of the group removed, then added back (learner, then promoted).
    Membership { group: u64, node: NodeId },
    /// The node's clock skewed by this many ms.
    Skew(NodeId, i64),
    /// These client hosts cut off from the node (which stays in the cluster).
    Clients(NodeId, Vec<String>),
    /// The node's disk broken.
    Disk(NodeId, DiskFault),
    /// The provider behaving as the named fault of the kit's menu (its JSON form).
    Provider(&'static str, serde_json::Value),
    /// The provider cut off from every node.
    ProviderCut,
}

/// How a disk is broken.
#[derive(Clone, Copy, Debug)]
enum DiskFault {
    /// Every sync fails (and what it should have made durable is lost at the next restart).
    Sync,
    /// Every write fails.
    Write,
    /// The disk holds only this many bytes more than it does now: under the nodes' reserve
    /// client writes are refused, and a write beyond it fails.
    Full(u64),
}

/// Runs faults until `window` of simulated time has passed since the call, then heals.
pub async fn run(world: &World, rng: &mut StdRng, window: Duration) {
    let admin = sdk(1, world.options.nodes);
    let until = tokio::time::Instant::now() + window;
    let mut count = 0u32;
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(100..700))).await;
        if tokio::time::Instant::now() >= until {
            break;
        }
        let fault = draw(world, rng);
        world.trace.push(format!("nemesis: install {fault:?}"));
        install(world, &admin, &fault).await;
        count += 1;
        let remaining = until.saturating_duration_since(tokio::time::Instant::now());
        let hold = Duration::from_millis(rng.gen_range(200..2_500)).min(remaining);
        tokio::time::sleep(hold).await;
        world.trace.push(format!("nemesis: heal {fault:?}"));
        heal(world, &admin, &fault).await;
    }
    world.trace.push(format!("nemesis: done after {count} faults"));
}

/// A fault from the menu, with its targets.
fn draw(world: &World, rng: &mut StdRng) -> Fault {
    let ids = world.ids();
    let n = ids.len();
    let node = *ids.choose(rng).expect("nodes");
    let group = rng.gen_range(0..=crate::world::DATA_GROUPS);
    let majority = |rng: &mut StdRng| {
        let mut shuffled = ids.clone();
        shuffled.shuffle(rng);
        shuffled.truncate(n / 2 + 1);
        shuffled
    };
    // Power losses weigh most: they are what storage and recovery bugs need. A run with a
    // provider also draws its faults.
    let menu = if world.paysim.is_some() { 23 } else { 20 };
    match rng.gen_range(0..menu) {
        0 | 1 => Fault::Isolate(leader(world, group).unwrap_or(node)),
        2 => {
            let mut shuffled = ids.clone();
            shuffled.shuffle(rng);
            let cut = rng.gen_range(1..n);
            let (one, other) = shuffled.split_at(cut);
            Fault::Halves(one.to_vec(), other.to_vec())
        }
        3 => {
            let peers: Vec<NodeId> = ids.iter().copied().filter(|id| *id != node).collect();
            Fault::Link(node, *peers.choose(rng).expect("peers"))
        }
        4 | 5 => Fault::Crash(vec![leader(world, group).unwrap_or(node)]),
        6 | 7 => Fault::Crash(majority(rng)),
        8 | 9 => Fault::Crash(ids.clone()),
        10 => Fault::Pause(leader(world, group).unwrap_or(node)),
        11 => Fault::Loss(rng.gen_range(0.005..0.05)),
        12 => Fault::Transfer { group },
        13 => Fault::Membership { group: rng.gen_range(1..=crate::world::DATA_GROUPS), node },
        14 | 15 => {
            let skew = rng.gen_range(-30_000..=30_000);
            Fault::Skew(leader(world, group).unwrap_or(node), skew)
        }
        16 => {
            // The buyers' hosts (the provider's is listed among the clients too).
            let clients: Vec<String> = crate::world::lock(&world.clients)
                .iter()
                .filter(|host| host.starts_with("client-"))
                .cloned()
                .collect();
            let mut cut: Vec<String> =
                clients.choose_multiple(rng, clients.len().div_ceil(2)).cloned().collect();
            cut.sort_unstable();
            Fault::Clients(leader(world, group).unwrap_or(node), cut)
        }
        17..=19 => {
            let fault = match rng.gen_range(0..3) {
                0 => DiskFault::Sync,
                1 => DiskFault::Write,
                _ => DiskFault::Full(rng.gen_range(0..4 * crate::world::SIM_DISK_RESERVE_BYTES)),
            };
            Fault::Disk(leader(world, group).unwrap_or(node), fault)
        }
        20 | 21 => {
            let (name, behaviour) = testkit::provider::draw_fault(rng);
            Fault::Provider(name, behaviour)
        }
        _ => Fault::ProviderCut,
    }
}

/// The node leading `group` now, by its own metrics (the highest term wins).
pub fn leader(world: &World, group: u64) -> Option<NodeId> {
    world
        .running()
        .iter()
        .filter_map(|(id, shared)| {
            let metrics = shared.groups.get(&group)?.raft.metrics().borrow_watched().clone();
            (metrics.state == ServerState::Leader).then_some((metrics.current_term, *id))
        })
        .max()
        .map(|(_, id)| id)
}

async fn install(world: &World, admin: &client::Client, fault: &Fault) {
    match fault {
        Fault::Isolate(node) => cut(&[*node], &others(world, *node)),
        Fault::Halves(one, other) => cut(one, other),
        Fault::Link(a, b) => turmoil::partition(net::host(*a), net::host(*b)),
        Fault::Crash(nodes) => world.act(Action::Crash(nodes.clone())),
        Fault::Pause(node) => {
            for other in hosts_but(world, *node) {
                turmoil::hold(net::host(*node), other);
            }
        }
        Fault::Loss(rate) => world.act(Action::Loss(*rate)),
        Fault::Transfer { group } => {
            let Some(from) = leader(world, *group) else {
                return world.trace.push("nemesis: no leader to transfer from");
            };
            let to = others(world, from).into_iter().find(|id| !world.down().contains(id));
            let Some(to) = to else { return };
            let answer = admin.transfer_leader(*group, to).await;
            world
                .trace
                .push(format!("nemesis: transfer group {group} {from} -> {to}: {}", ok(&answer)));
        }
        Fault::Membership { group, node } => {
            let answer = admin.remove(*group, &[*node]).await;
            world.trace.push(format!("nemesis: remove {node} from group {group}: {}", ok(&answer)));
        }
        Fault::Skew(node, skew) => world.set_skew(*node, *skew),
        Fault::Clients(node, clients) => {
            for client in clients {
                turmoil::partition(net::host(*node), client.as_str());
            }
        }
        Fault::Disk(node, fault) => {
            let disk = world.disk(*node);
            match fault {
                DiskFault::Sync => disk.fail_syncs(true),
                DiskFault::Write => disk.fail_writes(true),
                DiskFault::Full(room) => disk.set_capacity(Some(disk.used_bytes() + room)),
            }
        }
        Fault::Provider(name, behaviour) => {
            world.trace.push(format!("nemesis: provider behaves as {name}"));
            set_provider(world, behaviour.clone());
        }
        Fault::ProviderCut => {
            for node in world.ids() {
                turmoil::partition(PAYSIM_HOST, net::host(node));
            }
        }
    }
}

async fn heal(world: &World, admin: &client::Client, fault: &Fault) {
    match fault {
        Fault::Isolate(node) => mend(world, &[*node], &others(world, *node)),
        Fault::Halves(one, other) => mend(world, one, other),
        Fault::Link(a, b) => turmoil::repair(net::host(*a), net::host(*b)),
        Fault::Crash(nodes) => world.act(Action::Restart(nodes.clone())),
        Fault::Pause(node) => {
            for other in hosts_but(world, *node) {
                turmoil::release(net::host(*node), other);
            }
        }
        Fault::Loss(_) => world.act(Action::Loss(0.0)),
        Fault::Transfer { .. } => {}
        Fault::Membership { group, node } => readmit(world, admin, *group, *node).await,
        Fault::Skew(node, _) => world.set_skew(*node, 0),
        // A node that stopped meanwhile is restarted by its supervisor.
        Fault::Disk(node, _) => mend_disk(world, *node),
        Fault::Clients(node, clients) => {
            // A crashed node stays cut off until its restart repairs its links.
            if !world.down().contains(node) {
                for client in clients {
                    turmoil::repair(net::host(*node), client.as_str());
                }
            }
        }
        Fault::Provider(..) => set_provider(world, testkit::provider::baseline()),
        Fault::ProviderCut => {
            let down = world.down();
            // A crashed node stays cut off until its restart repairs its links.
            for node in world.ids().into_iter().filter(|node| !down.contains(node)) {
                turmoil::repair(PAYSIM_HOST, net::host(node));
            }
        }
    }
}

/// Node `node`'s disk works again, with no limit.
pub fn mend_disk(world: &World, node: NodeId) {
    let disk = world.disk(node);
    disk.fail_syncs(false);
    disk.fail_writes(false);
    disk.set_capacity(None);
}

/// paysim's behaviour from its JSON form (the kit's menu).
///
/// # Panics
///
/// If paysim refuses a behaviour of the menu: the kit and the provider disagree.
pub fn provider_behaviour(json: serde_json::Value) -> Behaviour {
    serde_json::from_value(json).expect("paysim takes every behaviour of the kit's menu")
}

/// Sets the provider's behaviour.
fn set_provider(world: &World, json: serde_json::Value) {
    let Some(paysim) = &world.paysim else { return };
    paysim.set_behaviour(provider_behaviour(json)).expect("the menu's behaviours are in range");
}

/// Adds `node` back to `group` as a voter if it is not one, until that is done (bounded).
pub async fn readmit(world: &World, admin: &client::Client, group: u64, node: NodeId) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::time::Instant::now() < deadline {
        if voters(world, group).is_some_and(|voters| voters.contains(&node)) {
            return;
        }
        let added = admin.add_learner(group, node, &net::address(node), true).await;
        let promoted = match added {
            Ok(_) => admin.promote(group, &[node]).await.map(|_| ()),
            Err(error) => Err(error),
        };
        world.trace.push(format!("nemesis: readmit {node} to group {group}: {}", ok(&promoted)));
        if promoted.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The voters of `group` as its leader sees them.
pub fn voters(world: &World, group: u64) -> Option<Vec<NodeId>> {
    let leader = leader(world, group)?;
    let running = world.running();
    let metrics = running.get(&leader)?.groups.get(&group)?.raft.metrics().borrow_watched().clone();
    Some(metrics.membership_config.membership().voter_ids().collect())
}

fn ok<T>(answer: &Result<T, client::Error>) -> String {
    match answer {
        Ok(_) => "ok".into(),
        Err(error) => format!("{error}"),
    }
}

fn others(world: &World, node: NodeId) -> Vec<NodeId> {
    world.ids().into_iter().filter(|id| *id != node).collect()
}

/// Every host but `node`: its peers and every client.
fn hosts_but(world: &World, node: NodeId) -> Vec<String> {
    let mut hosts: Vec<String> = others(world, node).into_iter().map(net::host).collect();
    hosts.extend(crate::world::lock(&world.clients).iter().cloned());
    hosts
}

fn cut(one: &[NodeId], other: &[NodeId]) {
    for a in one {
        for b in other {
            turmoil::partition(net::host(*a), net::host(*b));
        }
    }
}

fn mend(world: &World, one: &[NodeId], other: &[NodeId]) {
    let down = world.down();
    for a in one {
        for b in other {
            // A crashed node stays cut off until its restart repairs its links.
            if !down.contains(a) && !down.contains(b) {
                turmoil::repair(net::host(*a), net::host(*b));
            }
        }
    }
}
