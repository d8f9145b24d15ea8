//! Leader-only workers, in-process: three `Node`s in one test process, each with its own
//! RocksDB in a temporary directory and its own gRPC server on loopback.
//!
//! Reference: shared/DESIGN.md, "Ordering, acknowledgement and fencing" (leader-only workers
//! start on gaining leadership and stop on losing it) and "Time" (a leader-only worker proposes
//! `Tick` so that overdue holds are released on time).

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use node::{Args, Config, Node};
use proto::booking::booking_service_client::BookingServiceClient;
use proto::booking::{CreateSessionRequest, CreateShowRequest, HoldRequest, SeatRange, ShowRef};
use statemachine::{HoldId, HoldState, ShowId};
use tokio::time::Instant;

/// How long any awaited condition may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

/// Free loopback addresses for `count` nodes (bound, then released for the nodes to bind).
fn free_addresses(count: usize) -> Vec<SocketAddr> {
    let listeners: Vec<TcpListener> =
        (0..count).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    listeners.iter().map(|listener| listener.local_addr().unwrap()).collect()
}

/// Starts a 3-node cluster with 2 data groups in this process.
async fn start_cluster(dir: &tempfile::TempDir) -> Vec<Node> {
    let addresses = free_addresses(3);
    let peers: Vec<(u64, String)> = addresses
        .iter()
        .enumerate()
        .map(|(i, address)| (i as u64 + 1, address.to_string()))
        .collect();
    let mut nodes = Vec::new();
    for (i, address) in addresses.iter().enumerate() {
        let args = Args {
            id: Some(i as u64 + 1),
            data: Some(dir.path().join(format!("n{}", i + 1))),
            listen: Some(*address),
            peers: peers.clone(),
            bootstrap: true,
            groups: Some(2),
            heartbeat_ms: Some(100),
            election_min_ms: Some(400),
            election_max_ms: Some(800),
            // Raft on the client port, without TLS: an in-process test's nodes.
            plain_peers: true,
            ..Args::default()
        };
        let config = Config::load_with(args, &node::secrets::test_env).unwrap();
        nodes.push(Node::start(config).await.unwrap());
    }
    nodes
}

/// Waits until exactly one node leads `group` with its workers running, and no other node runs
/// them (that node being `expected`, if given); returns the leader's index.
async fn wait_single_worker(nodes: &[Node], group: u64, expected: Option<usize>) -> usize {
    let deadline = Instant::now() + WAIT;
    loop {
        let running: Vec<usize> = (0..nodes.len())
            .filter(|&i| nodes[i].shared().groups[&group].workers_running())
            .collect();
        if let [only] = running[..]
            && nodes[only].shared().groups[&group].is_leader()
            && expected.is_none_or(|expected| expected == only)
        {
            return only;
        }
        assert!(Instant::now() < deadline, "group {group}: workers run on {running:?}");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_only_on_the_leader_and_follow_a_leadership_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start_cluster(&dir).await;
    let leader = wait_single_worker(&nodes, 1, None).await;
    let target = (leader + 1) % nodes.len();
    let raft = &nodes[leader].shared().groups[&1].raft;
    raft.trigger().transfer_leader(target as u64 + 1).await.unwrap();
    // The old leader's workers stop, and only the new leader's run.
    wait_single_worker(&nodes, 1, Some(target)).await;
    for node in nodes {
        node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tick_worker_expires_an_overdue_hold_without_any_client_write() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = start_cluster(&dir).await;
    let leader = wait_single_worker(&nodes, 1, None).await;
    let address = format!("http://{}", nodes[leader].address());
    let mut client = BookingServiceClient::connect(address).await.unwrap();
    let create = CreateShowRequest {
        show_id: 5,
        currency: "EUR".into(),
        prices_minor: vec![1_000],
        layout: vec![SeatRange { count: 10, class: 0 }],
        group_id: 1,
        hold_ttl_ms: 1_000,
        ..CreateShowRequest::default()
    };
    // Group 0 (placement) may be led by another node, or not yet: try every node until one
    // answers (the placement is idempotent, so a retry after an unknown outcome is safe).
    let deadline = Instant::now() + WAIT;
    let created = 'created: loop {
        for node in &nodes {
            let address = format!("http://{}", node.address());
            let mut other = BookingServiceClient::connect(address).await.unwrap();
            let mut request = tonic::Request::new(create.clone());
            request.metadata_mut().insert("idempotency-key", "create-5".parse().unwrap());
            request.metadata_mut().insert("authorization", operator());
            if let Ok(reply) = other.create_show(request).await {
                break 'created reply.into_inner();
            }
        }
        assert!(Instant::now() < deadline, "no node created the show");
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(created.group_id, 1);
    let mut open = tonic::Request::new(ShowRef { show_id: 5 });
    open.metadata_mut().insert("idempotency-key", "open-5".parse().unwrap());
    open.metadata_mut().insert("authorization", operator());
    client.open_sales(open).await.unwrap();
    let mut hold = tonic::Request::new(HoldRequest {
        show_id: 5,
        seats: vec![1, 2],
        price_version: 1,
        ..HoldRequest::default()
    });
    let token = client.create_session(CreateSessionRequest {}).await.unwrap().into_inner().token;
    hold.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    hold.metadata_mut().insert("idempotency-key", "hold-1".parse().unwrap());
    let held = client.hold(hold).await.unwrap().into_inner();
    assert_eq!(held.state, "held");
    // No client writes from here on: only the tick worker can turn the stored state to expired.
    let stored = |node: &Node| {
        node.shared().groups[&1]
            .read_local(|state| {
                state.show(ShowId(5)).map(|show| show.holds[&HoldId(held.hold_id)].state)
            })
            .unwrap()
    };
    let deadline = Instant::now() + WAIT;
    while nodes.iter().any(|node| stored(node) != Some(HoldState::Expired)) {
        assert!(Instant::now() < deadline, "the hold was not expired on every replica");
        tokio::time::sleep(POLL).await;
    }
    for node in nodes {
        node.shutdown().await;
    }
}

/// The `authorization` value of the operator credential the nodes of this file run with.
fn operator() -> tonic::metadata::MetadataValue<tonic::metadata::Ascii> {
    format!("Bearer {}", node::secrets::TEST_OPERATOR_TOKEN).parse().unwrap()
}
