//! The simulated network's ends: how nodes dial peers, how clients dial nodes, and how nodes
//! accept connections, all over turmoil's TCP (simulated latency, loss and partitions).
//!
//! Owns the adapters between turmoil's streams and the seams of `raft` (peer dialer), `client`
//! (SDK connector) and `node` (incoming connections). Never injects faults itself: the world
//! does that through turmoil.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use node::environment::{Accepted, Incoming};
use raft::{DialFuture, Dialer, PeerStream};

/// The port every simulated node serves on.
pub const PORT: u16 = 7000;

/// The turmoil host name of node `id`.
pub fn host(id: u64) -> String {
    format!("node-{id}")
}

/// The address other nodes and clients reach node `id` at.
pub fn address(id: u64) -> String {
    format!("{}:{PORT}", host(id))
}

/// Opens a turmoil TCP stream to `address` (`host:port`).
async fn connect(address: &str) -> io::Result<turmoil::net::TcpStream> {
    let (host, port) = address.rsplit_once(':').ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("no port in {address}"))
    })?;
    let port: u16 = port.parse().map_err(io::Error::other)?;
    turmoil::net::TcpStream::connect((host.to_owned(), port)).await
}

/// Dials peers (for Raft and bootstrap) and nodes (for the SDK) over turmoil TCP.
pub struct TurmoilNet;

impl Dialer for TurmoilNet {
    fn dial(&self, address: &str) -> DialFuture {
        let address = address.to_owned();
        Box::pin(async move { Ok(Box::new(connect(&address).await?) as Box<dyn PeerStream>) })
    }
}

impl client::Connector for TurmoilNet {
    fn connect(&self, address: &str) -> client::ConnectFuture {
        let address = address.to_owned();
        Box::pin(async move { Ok(Box::new(connect(&address).await?) as Box<dyn client::Stream>) })
    }
}

/// The connections a node accepts on its turmoil listener.
pub async fn incoming() -> io::Result<Incoming> {
    incoming_on(PORT).await
}

/// The connections a host accepts on a turmoil listener at `port`.
pub async fn incoming_on(port: u16) -> io::Result<Incoming> {
    let listener = turmoil::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).await?;
    let local = listener.local_addr().ok();
    let stream =
        futures_util::stream::unfold(listener, move |listener| async move {
            let accepted = listener.accept().await.map(|(stream, remote): (_, SocketAddr)| {
                Accepted { stream: Box::new(stream), local, remote: Some(remote) }
            });
            Some((accepted, listener))
        });
    Ok(Box::pin(stream))
}
