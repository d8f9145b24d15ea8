//! The connector seam: how a [`Client`](crate::Client) opens its connections to nodes when they
//! are not to go over the operating system's TCP (a deterministic simulator's network, an
//! in-process transport in tests).
//!
//! Owns the [`Connector`] trait and the tower service that makes one usable by tonic. Never
//! decides which node to ask or when to retry (the call loop in `client.rs` does), and never
//! bounds an attempt's time itself (the client's connect timeout does).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::transport::Uri;

/// A byte stream to a node, as a [`Connector`] opens it.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// What [`Connector::connect`] returns.
pub type ConnectFuture = Pin<Box<dyn Future<Output = io::Result<Box<dyn Stream>>> + Send>>;

/// Opens connections to nodes instead of TCP (a simulator's network).
///
/// For every connection the client asks for, an implementation must:
///
/// - open a fresh stream to the server at `address`, which is the normalized `host:port` the
///   client knows the node by (as given to [`Client::with_connector`](crate::Client::with_connector)
///   or learned from a leader hint), never a URI;
/// - deliver bytes in order and reliably for as long as the stream is open, as TCP would, and
///   report a lost connection as an error or end of stream;
/// - never block the calling thread: all waiting happens in the returned future;
/// - fail with an [`io::Error`] when the node cannot be reached (the client then treats the
///   node as unreachable for that attempt, as it would a refused TCP connection).
///
/// The client bounds every attempt with its connect timeout
/// ([`Config::connect_timeout`](crate::Config::connect_timeout)), so a future that never
/// completes costs an attempt that long and no longer.
pub trait Connector: Send + Sync + 'static {
    /// Opens a stream to the node at `address` (`host:port`).
    fn connect(&self, address: &str) -> ConnectFuture;
}

/// The tower service tonic calls to open a channel's connection through `connector`: rebuilds
/// the node's `host:port` from the URI tonic connects to and wraps the stream for hyper.
pub(crate) fn connect_with(
    connector: Arc<dyn Connector>,
) -> impl tower::Service<
    Uri,
    Response = TokioIo<Box<dyn Stream>>,
    Error = io::Error,
    Future = impl Future<Output = io::Result<TokioIo<Box<dyn Stream>>>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |uri: Uri| {
        let connector = Arc::clone(&connector);
        async move {
            let address = address_of(&uri)?;
            connector.connect(&address).await.map(TokioIo::new)
        }
    })
}

/// The `host:port` of a node's URI (`http://host:port`), as the client spells addresses.
fn address_of(uri: &Uri) -> io::Result<String> {
    let host_port = uri.authority().and_then(|authority| {
        authority.port_u16().map(|port| format!("{}:{port}", authority.host()))
    });
    host_port.ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("no host:port in {uri}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address;

    #[test]
    fn the_uri_of_a_normalized_address_gives_it_back() {
        for text in ["node-1:7000", "127.0.0.1:7101", "[::1]:7101", "Node-2.Local:80"] {
            let normalized = address::normalize(text).unwrap();
            let uri: Uri = address::uri(&normalized, false).parse().unwrap();
            assert_eq!(address_of(&uri).unwrap(), normalized);
        }
    }

    #[test]
    fn a_uri_without_a_port_is_refused() {
        let uri: Uri = "http://node-1".parse().unwrap();
        assert_eq!(address_of(&uri).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }
}
