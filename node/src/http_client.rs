//! The node's HTTP client: pooled HTTP/1.1 over TCP, or over the environment's dialer (the
//! simulator's network) when it has one, so that every call a node makes out of itself runs the
//! same code in production and in the simulator.
//!
//! Owns the connector (TCP with a connect timeout and `TCP_NODELAY`, or the dialer, then TLS for
//! an `https` URL, verified against the [`Roots`] the client was made with) and what a
//! failed call means to the caller: [`SendError::NotSent`] when no connection could be made (the
//! request never left, so nothing happened), [`SendError::Unknown`] once it may have been sent
//! (a reset, a timeout, an unreadable answer). Used by the leader forwarder (`rest/forward.rs`),
//! the payment provider's client (`provider.rs`) and the simulated provider's webhooks
//! (`paysim`). Never retries: each caller knows whether its request is safe to repeat.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use raft::{DialerRef, PeerStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;

/// A pooled HTTP/1.1 client. Cheap to clone; clones share the pool.
#[derive(Clone, Debug)]
pub struct HttpClient {
    client: Client<Connector, Full<Bytes>>,
}

/// A whole answer: its status and its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body, read to its end.
    pub body: Bytes,
}

/// Why a call brought no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No connection could be made: the request never left.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The request may have been received, but no whole answer came back.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

/// The certificate authorities an `https` call trusts (the cluster's CA, for calls to other
/// nodes), as the TLS client configuration made from them. Cheap to clone.
#[derive(Clone)]
pub struct Roots(Arc<rustls::ClientConfig>);

impl fmt::Debug for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Roots(..)")
    }
}

impl Roots {
    /// Trusts the certificates of `pem` (one or more), and no others.
    ///
    /// # Errors
    ///
    /// When `pem` holds no certificate, or one rustls refuses as an authority.
    pub fn from_pem(pem: &[u8]) -> Result<Roots, String> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let mut store = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let certificate = certificate.map_err(|error| format!("not PEM: {error}"))?;
            store.add(certificate).map_err(|error| format!("not a CA certificate: {error}"))?;
        }
        if store.is_empty() {
            return Err("no certificate in the CA file".into());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?
            .with_root_certificates(store)
            .with_no_client_auth();
        // This client speaks HTTP/1.1 only; the node's port offers both.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Roots(Arc::new(config)))
    }

    /// The same roots, offering `protocols` in the handshake (ALPN, e.g. `h2` for a client
    /// built HTTP/2-only) instead of `http/1.1`.
    #[must_use]
    pub fn with_alpn(self, protocols: &[&[u8]]) -> Roots {
        let mut config = (*self.0).clone();
        config.alpn_protocols = protocols.iter().map(|protocol| protocol.to_vec()).collect();
        Roots(Arc::new(config))
    }
}

impl HttpClient {
    /// A client with its own pool, connecting over TCP within `connect_timeout`, or through
    /// `dialer` when one is given; plain HTTP only (an `https` URL is not sent).
    pub fn new(dialer: Option<DialerRef>, connect_timeout: Duration) -> HttpClient {
        HttpClient::with_roots(dialer, connect_timeout, None)
    }

    /// As [`HttpClient::new`], and `https` URLs over TLS verified against `roots` (without
    /// roots, an `https` call fails as not sent).
    pub fn with_roots(
        dialer: Option<DialerRef>,
        connect_timeout: Duration,
        roots: Option<Roots>,
    ) -> HttpClient {
        let connector = Connector::new(dialer, connect_timeout, roots);
        HttpClient { client: Client::builder(TokioExecutor::new()).build(connector) }
    }

    /// The pooled client itself, for a caller that streams the answer's body.
    pub fn pooled(&self) -> &Client<Connector, Full<Bytes>> {
        &self.client
    }

    /// Sends `request` and reads its whole answer, all within `timeout`.
    ///
    /// # Errors
    ///
    /// [`SendError`]: whether the request may have been received.
    pub async fn send(
        &self,
        request: Request<Bytes>,
        timeout: Duration,
    ) -> Result<Answer, SendError> {
        let exchange = async {
            let response = self.client.request(request.map(Full::new)).await.map_err(|error| {
                if error.is_connect() {
                    SendError::NotSent(error.to_string())
                } else {
                    SendError::Unknown(error.to_string())
                }
            })?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|error| SendError::Unknown(format!("reading the answer: {error}")))?
                .to_bytes();
            Ok(Answer { status, body })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_elapsed| SendError::Unknown(format!("no answer within {timeout:?}")))?
    }
}

/// Opens the client's connections: TCP, or the node's dialer, with TLS on top for `https`.
#[derive(Clone, Debug)]
pub struct Connector {
    tcp: HttpConnector,
    dialer: Option<DialerRef>,
    connect_timeout: Duration,
    roots: Option<Roots>,
}

/// One connection, however it was opened.
pub struct Stream(TokioIo<Box<dyn PeerStream>>);

impl Connector {
    /// Connections over TCP within `connect_timeout` (`TCP_NODELAY`), or through `dialer`, and
    /// TLS verified against `roots` for `https` URLs: for a caller that builds its own client
    /// (HTTP/2, say) over them.
    pub fn new(
        dialer: Option<DialerRef>,
        connect_timeout: Duration,
        roots: Option<Roots>,
    ) -> Connector {
        let mut tcp = HttpConnector::new();
        tcp.set_connect_timeout(Some(connect_timeout));
        tcp.set_nodelay(true);
        // The scheme is ours to handle: TLS is added for `https`.
        tcp.enforce_http(false);
        Connector { tcp, dialer, connect_timeout, roots }
    }
}

impl tower::Service<Uri> for Connector {
    type Response = Stream;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Stream, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.tcp.poll_ready(context).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let https = uri.scheme_str() == Some("https");
        let tls = match (https, &self.roots) {
            (false, _) => None,
            (true, Some(Roots(config))) => {
                let host = uri.host().unwrap_or_default().trim_matches(['[', ']']);
                match ServerName::try_from(host.to_owned()) {
                    Ok(name) => Some((tokio_rustls::TlsConnector::from(Arc::clone(config)), name)),
                    Err(error) => {
                        let error = format!("https host {host:?}: {error}");
                        return Box::pin(async move { Err(error.into()) });
                    }
                }
            }
            (true, None) => {
                return Box::pin(async { Err("an https URL, but no CA to verify it with".into()) });
            }
        };
        let connecting: Self::Future = match &self.dialer {
            None => {
                let connecting = self.tcp.call(uri);
                Box::pin(async move {
                    let stream = connecting.await?.into_inner();
                    Ok(Stream(TokioIo::new(Box::new(stream) as Box<dyn PeerStream>)))
                })
            }
            Some(DialerRef(dialer)) => {
                // The dialer takes `host:port`; a URL without a port means its scheme's.
                let default_port = if https { 443 } else { 80 };
                let address = uri
                    .host()
                    .map(|host| format!("{host}:{}", uri.port_u16().unwrap_or(default_port)));
                let (dialer, timeout) = (std::sync::Arc::clone(dialer), self.connect_timeout);
                Box::pin(async move {
                    let address = address.ok_or("a URL without a host")?;
                    let dialing = dialer.dial(&address);
                    let stream = tokio::time::timeout(timeout, dialing)
                        .await
                        .map_err(|_elapsed| "connect timed out")??;
                    Ok(Stream(TokioIo::new(stream)))
                })
            }
        };
        let Some((connector, name)) = tls else { return connecting };
        let timeout = self.connect_timeout;
        Box::pin(async move {
            let Stream(plain) = connecting.await?;
            let handshake = connector.connect(name, plain.into_inner());
            let stream = tokio::time::timeout(timeout, handshake)
                .await
                .map_err(|_elapsed| "TLS handshake timed out")??;
            Ok(Stream(TokioIo::new(Box::new(stream) as Box<dyn PeerStream>)))
        })
    }
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for Stream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(context, buffer)
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(context, buffer)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(context)
    }
}
