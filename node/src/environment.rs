//! What a node runs on: its storage, its peer network, its wall clock, its randomness and the
//! connections it serves. The seam between a node and the world, so that a simulator can run
//! real nodes on a simulated disk, network, clock and random source.
//!
//! Owns the [`Environment`] a node starts with ([`crate::node::Node::start_with`]), the system
//! environment production uses ([`Environment::system`]), and the two seams that have no home in
//! `raft`: [`Entropy`] (where session tokens' randomness comes from) and [`Incoming`] (the
//! connections a node serves when it does not bind TCP itself). Never reads a clock, draws a
//! random byte or opens a socket on its own: only [`Environment::system`] reaches the real world,
//! and only when asked to.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::config::Config;
use crate::node::StartError;

/// What a node runs on. Production uses [`Environment::system`]; a simulator passes its own.
///
/// Not everything goes through it yet: the REST and gRPC rate limits refill on the machine's
/// monotonic clock (a simulator sets them high enough never to bite).
pub struct Environment {
    /// The node's storage (RocksDB at `config.data` in production, archiving shows to its
    /// `archive` directory;
    /// `raft::Storage::simulated(SimDisk)` in a simulator).
    pub storage: raft::Storage,
    /// The peer network settings; its `dialer`, when set, also carries the node's own calls to
    /// peers (bootstrap's status calls) and REST requests forwarded to a leader.
    pub network: raft::NetworkConfig,
    /// The wall clock the leader stamps entries with and the leader-only workers read.
    pub clock: raft::Clock,
    /// Where session tokens' randomness comes from.
    pub entropy: Entropy,
    /// The connections to serve; `None` binds TCP at `config.listen`.
    pub incoming: Option<Incoming>,
}

impl Environment {
    /// The real world: RocksDB at `config.data`, TCP peers with the default network settings,
    /// the machine's clock and the operating system's randomness, serving TCP at
    /// `config.listen`.
    ///
    /// # Errors
    ///
    /// [`StartError::Storage`] if the database cannot be opened.
    pub fn system(config: &Config) -> Result<Environment, StartError> {
        Ok(Environment {
            storage: raft::Storage::open(&config.data)?.with_archives(
                raft::ArchiveDir::open(config.data.join(crate::node::ARCHIVE_DIR))
                    .map_err(|source| StartError::Archive { source })?,
            ),
            network: raft::NetworkConfig::default(),
            clock: raft::Clock::system(),
            entropy: Entropy::system(),
            incoming: None,
        })
    }
}

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Environment")
            .field("network", &self.network)
            .field("clock", &self.clock)
            .field("entropy", &self.entropy)
            .field("incoming", &self.incoming.as_ref().map(|_| ".."))
            .finish_non_exhaustive()
    }
}

/// What [`Entropy`] calls to fill a buffer.
type Fill = dyn Fn(&mut [u8]) -> Result<(), String> + Send + Sync;

/// A source of random bytes. Cheap to clone; clones share the source.
///
/// A source must fill the whole buffer or fail; it may be deterministic (a simulator's seeded
/// generator), since what depends on it (session tokens) only needs to be unguessable in
/// production.
#[derive(Clone)]
pub struct Entropy(Arc<Fill>);

impl Entropy {
    /// The operating system's randomness.
    pub fn system() -> Entropy {
        Entropy::new(|bytes| getrandom::fill(bytes).map_err(|error| error.to_string()))
    }

    /// A source calling `fill`.
    pub fn new(fill: impl Fn(&mut [u8]) -> Result<(), String> + Send + Sync + 'static) -> Entropy {
        Entropy(Arc::new(fill))
    }

    /// Fills `bytes` with random bytes.
    ///
    /// # Errors
    ///
    /// Why the source had none to give.
    pub fn fill(&self, bytes: &mut [u8]) -> Result<(), String> {
        (self.0)(bytes)
    }
}

impl fmt::Debug for Entropy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Entropy(..)")
    }
}

/// Connections a node serves, as a simulator accepts them.
pub type Incoming = Pin<Box<dyn futures_util::Stream<Item = io::Result<Accepted>> + Send>>;

/// One accepted connection.
///
/// The server hands its addresses to request handlers as tonic's `TcpConnectInfo`, the same
/// extension a TCP connection gives, so the rate limits (`rest/limits.rs`) charge the remote
/// address whichever way the connection came.
pub struct Accepted {
    /// The connection's bytes.
    pub stream: Box<dyn raft::PeerStream>,
    /// The address it was accepted at, if known.
    pub local: Option<SocketAddr>,
    /// The address it came from, if known.
    pub remote: Option<SocketAddr>,
}

impl fmt::Debug for Accepted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Accepted")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .finish_non_exhaustive()
    }
}

impl Connected for Accepted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        TcpConnectInfo { local_addr: self.local, remote_addr: self.remote }
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::time::Duration;

    use openraft::async_runtime::WatchReceiver;
    use proto::booking::admin_service_client::AdminServiceClient;
    use proto::booking::booking_service_client::BookingServiceClient;
    use proto::booking::{CreateSessionRequest, StatusRequest};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::mpsc;
    use tonic::transport::Endpoint;

    use super::*;
    use crate::config::Args;
    use crate::node::Node;

    /// Where every in-memory connection says it comes from.
    const CALLER: &str = "10.9.0.100:40000";

    /// An in-memory network: each node listens on an unbounded channel of accepted duplex
    /// streams, and dialling an address hands the node there the other end of a new one.
    #[derive(Clone, Default)]
    struct Wires(Arc<Mutex<BTreeMap<String, mpsc::UnboundedSender<io::Result<Accepted>>>>>);

    impl Wires {
        fn listen(&self, address: SocketAddr) -> Incoming {
            let (sender, receiver) = mpsc::unbounded_channel();
            self.0.lock().unwrap().insert(address.to_string(), sender);
            Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(receiver))
        }

        fn network(&self) -> raft::NetworkConfig {
            let dialer = raft::DialerRef(Arc::new(self.clone()));
            raft::NetworkConfig { dialer: Some(dialer), ..raft::NetworkConfig::default() }
        }
    }

    impl raft::Dialer for Wires {
        fn dial(&self, address: &str) -> raft::DialFuture {
            let sender = self.0.lock().unwrap().get(address).cloned();
            let local = address.parse().ok();
            Box::pin(async move {
                let refused = || io::Error::from(io::ErrorKind::ConnectionRefused);
                let (near, far) = tokio::io::duplex(64 * 1024);
                let remote = Some(CALLER.parse().unwrap());
                let accepted = Accepted { stream: Box::new(far), local, remote };
                sender.ok_or_else(refused)?.send(Ok(accepted)).map_err(|_| refused())?;
                Ok(Box::new(near) as Box<dyn raft::PeerStream>)
            })
        }
    }

    /// A clock stopped at one instant.
    struct StoppedClock(u64);

    impl raft::WallClock for StoppedClock {
        fn now_ms(&self) -> u64 {
            self.0
        }
    }

    const STOPPED_AT_MS: u64 = 1_700_000_000_000;

    fn config(id: u64, peer: u64, bootstrap: bool) -> Config {
        let address = |id: u64| format!("10.9.0.{id}:7101");
        let args = Args {
            id: Some(id),
            data: Some("/nonexistent/not-opened".into()),
            listen: Some(address(id).parse().unwrap()),
            peers: vec![(peer, address(peer))],
            bootstrap,
            groups: Some(1),
            replicas: Some(2),
            heartbeat_ms: Some(50),
            election_min_ms: Some(150),
            election_max_ms: Some(300),
            // Bursts of two: the third call from one address is refused.
            rate_per_address: Some(1),
            // Raft on the client port: nodes on a simulated network.
            plain_peers: true,
            ..Args::default()
        };
        Config::load_with(args, &crate::secrets::test_env).unwrap()
    }

    fn environment(wires: &Wires, config: &Config, entropy: Entropy) -> Environment {
        Environment {
            storage: raft::Storage::simulated(raft::SimDisk::default()),
            network: wires.network(),
            clock: raft::Clock::new(StoppedClock(STOPPED_AT_MS)),
            entropy,
            incoming: Some(wires.listen(config.listen)),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_nodes_found_and_serve_a_cluster_without_tcp() {
        let wires = Wires::default();
        let (one, two) = (config(1, 2, true), config(2, 1, false));
        let sevens = Entropy::new(|bytes| {
            bytes.fill(0x77);
            Ok(())
        });
        let two = Node::start_with(two.clone(), environment(&wires, &two, sevens)).await.unwrap();
        let one = Node::start_with(one.clone(), environment(&wires, &one, Entropy::system()))
            .await
            .unwrap();
        assert_eq!(two.address(), "10.9.0.2:7101".parse().unwrap());

        // Founding needs node 2's advertised address, asked through the wires: nothing here
        // listens on TCP.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let founded = |node: &Node| {
            node.shared().groups.values().all(|group| {
                let metrics = group.raft.metrics().borrow_watched().clone();
                let members = metrics.membership_config.membership().voter_ids().count();
                metrics.current_leader.is_some() && members == 2
            })
        };
        while !(founded(&one) && founded(&two)) {
            assert!(tokio::time::Instant::now() < deadline, "the cluster was not founded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for group in one.shared().groups.values() {
            assert_eq!(group.proposer.clock().now_ms(), STOPPED_AT_MS);
        }

        let channel = wires.network().connect_lazy(&Endpoint::from_static("http://10.9.0.2:7101"));
        // Every admin call needs the operator credential, the bootstrap's included. (Node 1 is
        // asked without: a refused admin call pays its address's bucket, which node 2's
        // sessions below count on.)
        let other = wires.network().connect_lazy(&Endpoint::from_static("http://10.9.0.1:7101"));
        let mut anonymous = AdminServiceClient::new(other);
        let refused = anonymous.status(StatusRequest { with_digest: false }).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        let mut admin = AdminServiceClient::new(channel.clone());
        let mut request = tonic::Request::new(StatusRequest { with_digest: false });
        let bearer = format!("Bearer {}", crate::secrets::TEST_OPERATOR_TOKEN);
        request.metadata_mut().insert("authorization", bearer.parse().unwrap());
        let status = admin.status(request).await.unwrap().into_inner();
        assert_eq!((status.node_id, status.address.as_str()), (2, "10.9.0.2:7101"));
        let mut booking = BookingServiceClient::new(channel);
        let session = booking.create_session(CreateSessionRequest {}).await.unwrap().into_inner();
        assert!(session.token.starts_with(&format!("g2_{}_", "77".repeat(16))), "{session:?}");
        // The rate limits see the caller's address the connection was accepted with.
        booking.create_session(CreateSessionRequest {}).await.unwrap();
        let refused = booking.create_session(CreateSessionRequest {}).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");

        one.shutdown().await;
        two.shutdown().await;
    }

    #[test]
    fn entropy_fills_from_its_source() {
        let sevens = Entropy::new(|bytes| {
            bytes.fill(7);
            Ok(())
        });
        let mut bytes = [0u8; 4];
        sevens.clone().fill(&mut bytes).unwrap();
        assert_eq!(bytes, [7; 4]);
        let dry = Entropy::new(|_| Err("dry".to_owned()));
        assert_eq!(dry.fill(&mut bytes).unwrap_err(), "dry");
        let mut random = [0u8; 32];
        Entropy::system().fill(&mut random).unwrap();
        assert_ne!(random, [0u8; 32]);
    }

    #[tokio::test]
    async fn an_accepted_connection_carries_bytes_and_its_addresses() {
        let (near, mut far) = tokio::io::duplex(64);
        let remote: SocketAddr = "10.0.0.7:5000".parse().unwrap();
        let mut accepted = Accepted { stream: Box::new(near), local: None, remote: Some(remote) };
        assert_eq!(accepted.connect_info().remote_addr(), Some(remote));
        accepted.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        far.write_all(b"pong").await.unwrap();
        accepted.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"pong");
    }
}
