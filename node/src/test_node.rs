//! A one-node cluster in this process, for the unit tests of the modules that serve watches,
//! webhooks, metrics and operations over a real group (the process tests use real `bookingd`
//! processes instead, through `testkit`).

use std::time::Duration;

use statemachine::{
    ClientCommand, ClientRequest, Currency, HoldId, IdempotencyKey, OperatorCommand, PaymentId,
    Reply, SeatRange, SessionId, ShowId, ShowPolicy, ShowSpec,
};

use crate::service::Service;
use crate::{Args, Config, Node};

/// A running one-node cluster with one data group, and its data directory.
pub struct OneNode {
    /// The node.
    pub node: Node,
    /// Its booking operations.
    pub service: Service,
    _dir: tempfile::TempDir,
}

/// Starts a one-node cluster with the secrets of [`crate::secrets::Secrets::for_tests`], and
/// waits until it leads every group.
pub async fn start() -> OneNode {
    let dir = tempfile::tempdir().unwrap();
    let address = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let args = Args {
        id: Some(1),
        data: Some(dir.path().join("n1")),
        listen: Some(address),
        bootstrap: true,
        groups: Some(1),
        heartbeat_ms: Some(50),
        election_min_ms: Some(150),
        election_max_ms: Some(300),
        // No background auditor: a test that counts log entries must not meet its proposals
        // (the auditor's own test drives it by hand).
        audit_checkpoint_entries: Some(0),
        // Raft on the client port, without TLS: an in-process test's node.
        plain_peers: true,
        ..Args::default()
    };
    let config = Config::load_with(args, &crate::secrets::test_env).unwrap();
    let node = Node::start(config).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !node.shared().groups.values().all(|group| group.is_leader()) {
        assert!(tokio::time::Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let service = Service::new(node.shared().clone());
    OneNode { node, service, _dir: dir }
}

impl OneNode {
    /// Creates show `show` with `seats` seats at 25.00 EUR each and opens its sales.
    pub async fn open_show(&self, show: u64, seats: u32) -> ShowId {
        let show = ShowId(show);
        let spec = ShowSpec {
            show,
            currency: Currency(*b"EUR"),
            prices_minor: vec![2_500],
            layout: vec![SeatRange { count: seats, class: 0 }],
            policy: ShowPolicy::default(),
        };
        let setup = vec![OperatorCommand::OpenSales { show }];
        self.service.create_show(spec, 0, setup).await.unwrap();
        show
    }

    /// Holds `seats` of `show` for `session`.
    pub async fn hold(&self, show: ShowId, session: SessionId, seats: &[u32]) -> HoldId {
        let price_version =
            self.service.read_local(show, |group| group.seat_map(show)).await.unwrap();
        let request = ClientRequest::Hold {
            seats: seats.try_into().unwrap(),
            price_version: price_version.price_version,
            grant: None,
        };
        match self.client(show, session, request).await {
            Reply::Held(receipt) => receipt.hold,
            other => panic!("not held: {other:?}"),
        }
    }

    /// Starts checkout of `hold`: its payment attempt.
    pub async fn checkout(&self, show: ShowId, session: SessionId, hold: HoldId) -> PaymentId {
        match self.client(show, session, ClientRequest::Checkout { hold }).await {
            Reply::CheckoutStarted { payment, .. } => payment,
            other => panic!("no checkout: {other:?}"),
        }
    }

    /// Proposes `request` for `session` under a fresh idempotency key.
    pub async fn client(&self, show: ShowId, session: SessionId, request: ClientRequest) -> Reply {
        let mut key = [0u8; 16];
        getrandom::fill(&mut key).unwrap();
        let key = IdempotencyKey(u128::from_be_bytes(key));
        self.service.client(ClientCommand { show, session, key, request }).await.unwrap().reply
    }

    /// The data group's applied index on this node.
    pub fn applied_index(&self) -> u64 {
        self.node.shared().groups[&1].read_local(|group| group.as_of().log_index).unwrap()
    }
}
