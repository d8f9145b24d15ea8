//! The client port's server, and how it protects the node from more clients than it can serve.
//!
//! Owns the accept loop (TCP, or the simulator's connections), each connection's HTTP/1 and
//! HTTP/2 settings, and the admission of requests. A node that queued every request a flood
//! sent would fall behind on everything, its own Raft heartbeats included (they share the
//! runtime), and lose its leadership; so it bounds each resource and answers at once when one
//! is exhausted, never queueing without bound:
//!
//! - connections: at most `max_connections`; one past the cap is closed as soon as it is
//!   accepted (counted `booking_shed{reason="connections"}`);
//! - streams: at most `max_streams_per_connection` concurrent HTTP/2 streams per connection
//!   (tonic's server sets no limit); an HTTP/1 request's headers must arrive within
//!   `header_deadline`;
//! - requests: at most `max_in_flight` run at once; one more is answered at once, before any
//!   work, with [`ApiError::Overloaded`] (503 / UNAVAILABLE `overloaded`, `Retry-After: 1`;
//!   nothing changed, any node may be retried), and every admitted request is answered within
//!   `request_deadline` (reading its body included), else 503 `unavailable`: the outcome is
//!   unknown, and the caller retries with the same idempotency key.
//!
//! Health checks (`/healthz`), metrics (`/metrics`) and Raft traffic (on the client port only
//! under `--dev` and the simulator) are neither counted nor shed: an operator must be able to
//! see an overloaded node, and peers must not lose their leader to it.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::task::JoinHandle;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tower::ServiceExt;

use crate::config::Config;
use crate::environment::{Accepted, Incoming as Connections};
use crate::error::ApiError;
use crate::metrics::Metrics;

/// How long a stopping server lets its open connections finish what they started.
const DRAIN: Duration = Duration::from_secs(4);

/// Paths that are never counted or shed.
const UNGATED_PREFIXES: [&str; 3] = ["/healthz", "/metrics", "/booking.raft.v1."];

/// Client connections served at once, by default.
pub const MAX_CONNECTIONS_DEFAULT: usize = 10_000;
/// Client requests running at once, by default.
pub const MAX_IN_FLIGHT_DEFAULT: usize = 1_024;
/// HTTP/2 streams per client connection, by default.
pub const MAX_STREAMS_PER_CONNECTION_DEFAULT: u32 = 256;
/// How long a client request may take, by default.
pub const REQUEST_DEADLINE_DEFAULT: Duration = Duration::from_secs(30);
/// How long an HTTP/1 request's headers may take, by default.
pub const HEADER_DEADLINE_DEFAULT: Duration = Duration::from_secs(10);

/// The client port's limits (see the module's documentation).
#[derive(Clone, Debug)]
pub struct ServeSettings {
    /// Connections served at once.
    pub max_connections: usize,
    /// Requests running at once.
    pub max_in_flight: usize,
    /// HTTP/2 streams per connection.
    pub max_streams_per_connection: u32,
    /// How long a request may take to be answered.
    pub request_deadline: Duration,
    /// How long an HTTP/1 request's headers may take.
    pub header_deadline: Duration,
    /// The client port's TLS (`--client-tls`), if it has it.
    pub tls: Option<ClientTls>,
    /// Whether responses carry a `Date` header: not under a simulator, where it would be the
    /// machine's real time and change the bytes of messages from one replay of a seed to the
    /// next.
    pub date_header: bool,
}

impl Default for ServeSettings {
    fn default() -> ServeSettings {
        ServeSettings {
            max_connections: MAX_CONNECTIONS_DEFAULT,
            max_in_flight: MAX_IN_FLIGHT_DEFAULT,
            max_streams_per_connection: MAX_STREAMS_PER_CONNECTION_DEFAULT,
            request_deadline: REQUEST_DEADLINE_DEFAULT,
            header_deadline: HEADER_DEADLINE_DEFAULT,
            tls: None,
            date_header: true,
        }
    }
}

impl ServeSettings {
    /// The settings of `config`.
    pub fn of(config: &Config) -> ServeSettings {
        ServeSettings {
            max_connections: config.max_connections,
            max_in_flight: config.max_in_flight,
            max_streams_per_connection: config.max_streams_per_connection,
            request_deadline: config.request_deadline,
            header_deadline: config.header_deadline,
            tls: config.client_tls.clone(),
            date_header: true,
        }
    }
}

/// What the admission middleware shares: the permits of requests in flight.
#[derive(Clone)]
struct Gate {
    permits: Arc<Semaphore>,
    deadline: Duration,
    metrics: Metrics,
}

/// `router` behind the admission gate: at most `settings.max_in_flight` requests at once, each
/// answered within `settings.request_deadline`.
pub fn gated(router: Router, settings: &ServeSettings, metrics: Metrics) -> Router {
    let gate = Gate {
        permits: Arc::new(Semaphore::new(settings.max_in_flight)),
        deadline: settings.request_deadline,
        metrics,
    };
    router.layer(axum::middleware::from_fn_with_state(gate, admit))
}

/// The middleware: admits a request if a permit is free, else sheds it at once.
async fn admit(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if UNGATED_PREFIXES.iter().any(|prefix| path.starts_with(prefix)) {
        return next.run(request).await;
    }
    let grpc = is_grpc(&request);
    let Ok(permit) = gate.permits.clone().try_acquire_owned() else {
        gate.metrics.record_shed("in_flight");
        let error = ApiError::Overloaded {
            message: "the node is serving as many requests as it can; retry shortly".into(),
            retry_after_s: 1,
        };
        return refusal(grpc, error);
    };
    let answered = tokio::time::timeout(gate.deadline, next.run(request)).await;
    drop(permit);
    match answered {
        Ok(response) => response,
        Err(_elapsed) => {
            gate.metrics.record_shed("deadline");
            let error = ApiError::Unavailable(format!(
                "no answer within the request deadline ({} ms); the outcome is unknown, retry \
                 with the same idempotency key",
                gate.deadline.as_millis()
            ));
            refusal(grpc, error)
        }
    }
}

/// Whether a request is gRPC (`application/grpc...`).
pub fn is_grpc(request: &Request) -> bool {
    request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"))
}

/// The answer refusing a request with `error`: a gRPC status (with `retry-after` metadata when
/// the error has one) for a gRPC request, else the REST error body.
pub fn refusal(grpc: bool, error: ApiError) -> Response {
    if !grpc {
        return error.into_response();
    }
    let retry_after = error.retry_after_s();
    let mut response = tonic::Status::from(error).into_http::<axum::body::Body>();
    if let Some(seconds) = retry_after {
        response.headers_mut().insert("retry-after", seconds.into());
    }
    response
}

/// A TCP listener's connections as the server's [`Connections`].
pub fn tcp_incoming(listener: TcpListener) -> Connections {
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    Box::pin(incoming.map(|accepted| {
        accepted.map(|stream| {
            let info = stream.connect_info();
            Accepted { local: info.local_addr, remote: info.remote_addr, stream: Box::new(stream) }
        })
    }))
}

/// Serves `router` on `incoming` under `settings` until `stopped` fires or its sender is
/// dropped; then stops accepting, asks each open connection to finish (HTTP/2 GOAWAY, HTTP/1
/// after its current request) and waits up to [`DRAIN`] for them. Each request carries its
/// connection's tonic `TcpConnectInfo`, which the rate limits charge.
pub fn serve(
    mut incoming: Connections,
    router: Router,
    mut stopped: oneshot::Receiver<()>,
    settings: ServeSettings,
    metrics: Metrics,
) -> JoinHandle<Result<(), tonic::transport::Error>> {
    let connections = Arc::new(Semaphore::new(settings.max_connections));
    let (closing, closed) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = &mut stopped => break,
                next = incoming.next() => next,
            };
            let accepted = match accepted {
                None => break,
                Some(Err(error)) => {
                    tracing::debug!(%error, "accepting a connection failed");
                    continue;
                }
                Some(Ok(accepted)) => accepted,
            };
            let Ok(permit) = connections.clone().try_acquire_owned() else {
                metrics.record_shed("connections");
                drop(accepted);
                continue;
            };
            let info = accepted.connect_info();
            let connection = Connection::new(router.clone(), &settings, info, closed.clone());
            let tls = settings.tls.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                match tls {
                    None => connection.serve(accepted).await,
                    Some(tls) => match tls.accept(accepted).await {
                        Ok(stream) => connection.serve(stream).await,
                        Err(error) => {
                            metrics.record_shed("handshake");
                            tracing::debug!(%error, "TLS handshake failed");
                        }
                    },
                }
                drop(permit);
            });
        }
        drop(incoming);
        let _ = closing.send(true);
        let all = u32::try_from(settings.max_connections).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(DRAIN, connections.acquire_many(all)).await;
        Ok(())
    })
}

/// One accepted connection's server: the router as a hyper service, and the HTTP settings.
struct Connection {
    service: ConnectionService,
    builder: hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    closing: watch::Receiver<bool>,
}

/// The router as a tower service of hyper requests.
type ConnectionService =
    tower::util::BoxCloneService<axum::http::Request<Incoming>, Response, std::convert::Infallible>;

impl Connection {
    /// The server of a connection from `info`, finishing gracefully once `closing` turns true.
    fn new(
        router: Router,
        settings: &ServeSettings,
        info: TcpConnectInfo,
        closing: watch::Receiver<bool>,
    ) -> Connection {
        let service = tower::service_fn(move |mut request: axum::http::Request<Incoming>| {
            request.extensions_mut().insert(info.clone());
            let http1 = request.version() < axum::http::Version::HTTP_2;
            let read = Arc::new(AtomicBool::new(request.body().is_end_stream()));
            let request = request.map(|body| Tracked { inner: body, read: read.clone() });
            let answered = router.clone().oneshot(request.map(axum::body::Body::new));
            async move {
                let mut response = answered.await?;
                if http1 && !read.load(Ordering::Relaxed) {
                    // Answered without reading the whole body (a refusal before the body was
                    // needed): hyper cannot reuse the connection, so say so, or a keep-alive
                    // client would send its next request on a connection about to close.
                    response.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let mut builder =
            hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
        builder
            .http1()
            .auto_date_header(settings.date_header)
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(settings.header_deadline);
        builder
            .http2()
            .auto_date_header(settings.date_header)
            .timer(hyper_util::rt::TokioTimer::new())
            .max_concurrent_streams(settings.max_streams_per_connection)
            .initial_stream_window_size(raft::HTTP2_STREAM_WINDOW_BYTES)
            .initial_connection_window_size(raft::HTTP2_CONNECTION_WINDOW_BYTES);
        Connection { service: ConnectionService::new(service), builder, closing }
    }
}

impl Connection {
    /// Serves `stream` until the connection ends, or finishes it gracefully once `closing`
    /// turns true.
    async fn serve(self, stream: impl AsyncRead + AsyncWrite + Send + Unpin + 'static) {
        let Connection { service, builder, mut closing } = self;
        let connection = builder.serve_connection(
            hyper_util::rt::TokioIo::new(stream),
            hyper_util::service::TowerToHyperService::new(service),
        );
        tokio::pin!(connection);
        let closed = async move {
            // The guard `wait_for` returns is dropped here, not held across the next await.
            let _ = closing.wait_for(|closing| *closing).await.is_ok();
        };
        let ended = tokio::select! {
            ended = connection.as_mut() => ended,
            () = closed => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(error) = ended {
            tracing::debug!(%error, "connection ended with an error");
        }
    }
}

/// The client port's TLS: the node's certificate (`--tls-cert-file`, `--tls-key-file`; its
/// `--host` names are the client addresses), offering HTTP/2 and HTTP/1.1 (browsers and curl
/// speak either; the SDK speaks HTTP/2), no client certificates, and a deadline for the
/// handshake. Its `Debug` shows no key.
#[derive(Clone)]
pub struct ClientTls {
    acceptor: tokio_rustls::TlsAcceptor,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientTls(..)")
    }
}

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);

impl ClientTls {
    /// The TLS of a certificate chain and its key, both PEM.
    ///
    /// # Errors
    ///
    /// When the certificate or key cannot be read, or do not go together.
    pub fn from_pem(certificate: &[u8], key: &[u8]) -> Result<ClientTls, String> {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_slice_iter(certificate)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| format!("certificate: {error}"))?;
        if chain.is_empty() {
            return Err("certificate: no certificate in the file".into());
        }
        // The error names the problem, never the key's bytes.
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|error| format!("key: {error}"))?;
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|error| format!("certificate and key: {error}"))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(ClientTls { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)) })
    }

    /// The handshake on `stream`, within [`HANDSHAKE_DEADLINE`].
    async fn accept<IO: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: IO,
    ) -> std::io::Result<tokio_rustls::server::TlsStream<IO>> {
        tokio::time::timeout(HANDSHAKE_DEADLINE, self.acceptor.accept(stream))
            .await
            .map_err(|_elapsed| std::io::Error::other("no TLS handshake within its deadline"))?
    }
}

/// A request body that notes when it has been read to its end.
struct Tracked {
    inner: Incoming,
    read: Arc<AtomicBool>,
}

impl Body for Tracked {
    type Data = <Incoming as Body>::Data;
    type Error = <Incoming as Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::StatusCode;
    use axum::routing::any;
    use tokio::sync::Notify;

    use super::*;

    /// A router whose `/slow` answers only once `release` is notified, behind a gate of one
    /// permit and a deadline of `deadline`.
    fn one_at_a_time(release: Arc<Notify>, deadline: Duration) -> Router {
        let slow = any(move || {
            let release = release.clone();
            async move {
                release.notified().await;
                "slow"
            }
        });
        let router = Router::new()
            .route("/slow", slow)
            .route("/fast", any(|| async { "fast" }))
            .route("/healthz", any(|| async { "ok" }))
            .route("/booking.v1.BookingService/GetShow", any(|| async { "grpc" }));
        let settings =
            ServeSettings { max_in_flight: 1, request_deadline: deadline, ..Default::default() };
        gated(router, &settings, Metrics::new())
    }

    fn get(path: &str) -> Request {
        Request::get(path).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn a_request_past_the_cap_is_shed_at_once_and_health_checks_are_not() {
        let release = Arc::new(Notify::new());
        let app = one_at_a_time(release.clone(), Duration::from_secs(60));
        let held = tokio::spawn(app.clone().oneshot(get("/slow")));
        // Until the slow request holds the one permit.
        let shed = loop {
            let response = app.clone().oneshot(get("/fast")).await.unwrap();
            if response.status() == StatusCode::SERVICE_UNAVAILABLE {
                break response;
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(shed.headers()["retry-after"], "1");
        assert_eq!(shed.headers()["booking-code"], "overloaded");
        let grpc = Request::post("/booking.v1.BookingService/GetShow")
            .header("content-type", "application/grpc")
            .body(Body::empty())
            .unwrap();
        let refused = app.clone().oneshot(grpc).await.unwrap();
        assert_eq!(refused.status(), StatusCode::OK, "a gRPC refusal is a status, not HTTP");
        assert_eq!(refused.headers()["grpc-status"], "14", "UNAVAILABLE");
        assert_eq!(refused.headers()["booking-code"], "overloaded");
        assert_eq!(refused.headers()["retry-after"], "1");
        let health = app.clone().oneshot(get("/healthz")).await.unwrap();
        assert_eq!(health.status(), StatusCode::OK);
        release.notify_one();
        assert_eq!(held.await.unwrap().unwrap().status(), StatusCode::OK);
        let after = app.oneshot(get("/fast")).await.unwrap();
        assert_eq!(after.status(), StatusCode::OK, "the permit came back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_past_its_deadline_is_answered_unavailable_and_frees_its_permit() {
        let app = one_at_a_time(Arc::new(Notify::new()), Duration::from_secs(2));
        let late = app.clone().oneshot(get("/slow")).await.unwrap();
        assert_eq!(late.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(late.headers()["booking-code"], "unavailable");
        let after = app.oneshot(get("/fast")).await.unwrap();
        assert_eq!(after.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_closed_and_the_server_drains_on_stop() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new().route("/fast", any(|| async { "fast" }));
        let settings = ServeSettings { max_connections: 1, ..Default::default() };
        let (stop, stopped) = oneshot::channel();
        let metrics = Metrics::new();
        let server = serve(tcp_incoming(listener), router, stopped, settings, metrics);
        let request = b"GET /fast HTTP/1.1\r\nhost: x\r\n\r\n";
        let mut first = tokio::net::TcpStream::connect(address).await.unwrap();
        first.write_all(request).await.unwrap();
        let mut answer = [0_u8; 12];
        first.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200");
        let mut second = tokio::net::TcpStream::connect(address).await.unwrap();
        let _ = second.write_all(request).await;
        let mut rest = Vec::new();
        let read = second.read_to_end(&mut rest).await;
        assert!(read.is_err() || rest.is_empty(), "the second connection was served: {rest:?}");
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
