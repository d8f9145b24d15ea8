//! The client port over TLS (`bookingd --client-tls`), against a real 3-node cluster whose
//! every node serves REST and gRPC over rustls with its certificate from the cluster's CA: the
//! SDK (trusting that CA) runs a buyer's first steps and the operator's status calls over https;
//! REST answers over TLS with HTTP/1.1 (what curl and browsers may choose) and HTTP/2; and the
//! port refuses what it must: a plain-HTTP request and a plain gRPC call get no answer, a client
//! that does not trust the cluster's CA fails its handshake (so it never sends a token), and an
//! SDK without the CA cannot reach the cluster.
//!
//! Reference: issue 17, "TLS with rustls on the client port (gRPC and REST alike) ... The SDK
//! and `bookctl` speak `https` with a CA file", and its test "a client without TLS is refused
//! where TLS is required".

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use testkit::ClusterOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

use crate::options;
use crate::rest::{Report, ensure};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_speak_tls_and_plain_ones_are_refused() -> io::Result<()> {
    let cluster = crate::start(ClusterOptions { client_tls: true, ..options(3) }).await?;
    let mut report = Report::default();
    report.check("the_sdk_speaks_https", the_sdk_speaks_https(&cluster).await);
    report.check("rest_answers_over_tls", rest_answers_over_tls(&cluster).await);
    report.check("plain_clients_get_no_answer", plain_clients_get_no_answer(&cluster).await);
    report.check(
        "a_client_that_does_not_trust_the_ca_is_refused",
        a_client_that_does_not_trust_the_ca_is_refused(&cluster).await,
    );
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        cluster.shutdown().await?;
    }
    result
}

/// The cluster's own SDK client speaks https (the cluster found its leaders through it); a
/// buyer's session and the operator's status go through it too.
async fn the_sdk_speaks_https(cluster: &testkit::Cluster) -> io::Result<()> {
    let client = cluster.client();
    ensure!(client.is_tls(), "the cluster's client is not set for TLS");
    let token = client.create_session().await.map_err(io::Error::other)?;
    ensure!(!token.is_empty(), "no session token over TLS");
    let status = cluster.status(1, false).await?;
    ensure!(!status.groups.is_empty(), "node 1's status over TLS has no group");
    Ok(())
}

/// A TLS client trusting `ca` (PEM), offering `alpn`.
fn tls_client(ca: &str, alpn: &[&[u8]]) -> io::Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(certificate.map_err(io::Error::other)?).map_err(io::Error::other)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// A TLS connection to `address` (`ip:port`) by `connector`, verifying the node's certificate
/// names that IP.
async fn tls_connect(
    connector: &tokio_rustls::TlsConnector,
    address: &str,
) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let ip = address.rsplit_once(':').map_or(address, |(ip, _)| ip).to_owned();
    let name = ServerName::try_from(ip).map_err(io::Error::other)?;
    let tcp = TcpStream::connect(address).await?;
    tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| io::Error::other("no handshake within 10 s"))?
}

/// `GET /healthz` and a session over https, with HTTP/1.1 and with HTTP/2 as ALPN picks.
async fn rest_answers_over_tls(cluster: &testkit::Cluster) -> io::Result<()> {
    let address = cluster.address(2)?;
    for (alpn, version) in [(b"http/1.1".as_slice(), "HTTP/1.1"), (b"h2".as_slice(), "HTTP/2")] {
        let connector = tls_client(cluster.ca_certificate(), &[alpn])?;
        let stream = tls_connect(&connector, &address).await?;
        let negotiated = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        ensure!(negotiated.as_deref() == Some(alpn), "{version}: ALPN chose {negotiated:?}");
        let io = TokioIo::new(stream);
        let request = |method: &str, path: &str| {
            axum::http::Request::builder()
                .method(method)
                .uri(format!("https://{address}{path}"))
                .header("host", address.as_str())
                .body(Full::new(Bytes::new()))
                .map_err(io::Error::other)
        };
        // Each answer is read to its end before the next request, and each request waits for
        // the connection to be ready: an HTTP/1.1 connection takes the next request only once
        // the previous response's body is consumed (hyper refuses one sent earlier with
        // "connection was not ready", which depends on timing).
        let mut answers = Vec::new();
        if alpn == b"h2" {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .map_err(io::Error::other)?;
            tokio::spawn(connection);
            for (method, path) in [("GET", "/healthz"), ("POST", "/v1/sessions")] {
                sender.ready().await.map_err(io::Error::other)?;
                let response =
                    sender.send_request(request(method, path)?).await.map_err(io::Error::other)?;
                answers.push(read_answer(response).await?);
            }
        } else {
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(io).await.map_err(io::Error::other)?;
            tokio::spawn(connection);
            for (method, path) in [("GET", "/healthz"), ("POST", "/v1/sessions")] {
                sender.ready().await.map_err(io::Error::other)?;
                let response =
                    sender.send_request(request(method, path)?).await.map_err(io::Error::other)?;
                answers.push(read_answer(response).await?);
            }
        }
        let [(health, _), (status, body)] =
            <[_; 2]>::try_from(answers).map_err(|_| io::Error::other("two answers expected"))?;
        ensure!(health == 200, "{version} /healthz: {health}");
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        ensure!(status == 201 && body["token"].is_string(), "{version} session: {status} {body}");
    }
    Ok(())
}

/// A response's status and its whole body.
async fn read_answer(
    response: axum::http::Response<hyper::body::Incoming>,
) -> io::Result<(axum::http::StatusCode, Bytes)> {
    let status = response.status();
    let body = response.into_body().collect().await.map_err(io::Error::other)?.to_bytes();
    Ok((status, body))
}

/// A plain HTTP/1.1 request gets no HTTP answer (the bytes are not a TLS hello), and the SDK
/// without the CA (plain HTTP/2) reaches no node.
async fn plain_clients_get_no_answer(cluster: &testkit::Cluster) -> io::Result<()> {
    let address = cluster.address(1)?;
    let mut plain = TcpStream::connect(&address).await?;
    plain.write_all(b"GET /healthz HTTP/1.1\r\nhost: node\r\n\r\n").await?;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut answer)).await;
    ensure!(read.is_ok(), "the node kept a plain connection open without answering");
    ensure!(
        !answer.starts_with(b"HTTP/"),
        "a plain request got an HTTP answer: {}",
        String::from_utf8_lossy(&answer)
    );
    let config = client::Config {
        retry_budget: Duration::from_secs(2),
        attempt_timeout: Duration::from_secs(1),
        ..client::Config::default()
    };
    let sdk = client::Client::with_config(vec![address], config).map_err(io::Error::other)?;
    let session = sdk.create_session().await;
    ensure!(session.is_err(), "a plain SDK client got a session from a TLS port: {session:?}");
    Ok(())
}

/// A client trusting another CA fails its handshake: it never gets to send a request.
async fn a_client_that_does_not_trust_the_ca_is_refused(
    cluster: &testkit::Cluster,
) -> io::Result<()> {
    let stranger = client::certs::new_authority("stranger", 1).map_err(io::Error::other)?;
    let connector = tls_client(&stranger.certificate_pem, &[b"h2", b"http/1.1"])?;
    let handshake = tls_connect(&connector, &cluster.address(3)?).await;
    ensure!(handshake.is_err(), "a client trusting another CA completed the handshake");
    Ok(())
}
