//! Forwarding to the leader: "every node serves the whole API and routes each request to its
//! show's group leader". A REST request that this node refuses as `not_leader` with the
//! leader's address (the typed [`ApiError`] the handler's response carries, see
//! `rest/error.rs`) is replayed once, byte for byte (method, path, query, headers, body), to
//! that leader, and the leader's response is returned instead.
//!
//! Owns the replay: the body is buffered first (at most `BODY_BYTES_MAX`, else 400), the
//! request is answered locally, and only a `not_leader` that names a leader's address is
//! forwarded,
//! marked `booking-forwarded: 1` so that the leader never forwards it again (one hop at most:
//! if leadership moved meanwhile, the client gets the leader's own hint). Replaying is safe
//! because the local answer was a refusal that changed nothing (the service refuses before
//! proposing on a node that does not lead; an unknown outcome is `unavailable`, without a hint,
//! and is never forwarded) and every mutation carries its idempotency key. If the leader cannot
//! be reached, or does not answer (body included) within [`FORWARD_TIMEOUT`], the local `503` (with its hint)
//! is returned. gRPC requests (`application/grpc`) are never forwarded: the SDK follows hints.
//! Never decides who leads: the hint comes from the group's membership.

use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http_body_util::Full;
use raft::DialerRef;

use crate::error::{ApiError, LeaderHint};
use crate::http_client::{HttpClient, Roots};
use crate::rest::extract::BODY_BYTES_MAX;

/// The header marking a request one node forwarded to another (never forwarded again).
pub const FORWARDED_HEADER: &str = "booking-forwarded";
/// The response header naming the node a forwarded request was answered by.
pub const FORWARDED_TO_HEADER: &str = "booking-forwarded-to";
/// How long the leader may take to answer, body included: longer than a write may wait for commit
/// (`group::WRITE_TIMEOUT`), so that the leader's own verdict comes back.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(8);
/// How long connecting to the leader may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Headers that belong to one connection and are never replayed.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::HOST,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

/// Replays requests to group leaders over one shared HTTP/1.1 client (pooled connections).
/// Cheap to clone.
#[derive(Clone, Debug)]
pub struct Forwarder {
    client: HttpClient,
    /// `https` when the nodes serve their client port over TLS.
    scheme: &'static str,
}

impl Default for Forwarder {
    fn default() -> Forwarder {
        Forwarder::new(None, None)
    }
}

impl Forwarder {
    /// A forwarder with its own connection pool, connecting over TCP, or through `dialer` (the
    /// node's peer network, simulated under the simulator) when one is given; over https,
    /// verifying the leader against `roots`, when they are given (the nodes serve TLS).
    pub fn new(dialer: Option<DialerRef>, roots: Option<Roots>) -> Forwarder {
        let scheme = if roots.is_some() { "https" } else { "http" };
        Forwarder { client: HttpClient::with_roots(dialer, CONNECT_TIMEOUT, roots), scheme }
    }

    /// Sends the request described by `parts` and `body` to `leader` (`host:port`), marked
    /// forwarded.
    async fn replay(
        &self,
        leader: &str,
        parts: &axum::http::request::Parts,
        body: Bytes,
    ) -> Result<Response, String> {
        let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
        let uri: Uri = format!("{}://{leader}{path}", self.scheme)
            .parse()
            .map_err(|error| format!("uri: {error}"))?;
        let mut request = axum::http::Request::new(Full::new(body));
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        for (name, value) in &parts.headers {
            if !HOP_BY_HOP.contains(name) {
                headers.append(name, value.clone());
            }
        }
        let host = HeaderValue::from_str(leader).map_err(|error| format!("host: {error}"))?;
        headers.insert(header::HOST, host);
        headers.insert(FORWARDED_HEADER, HeaderValue::from_static("1"));
        // The whole answer, body included, within the deadline: a leader that stalls after
        // its headers must not hold this node's request (and its admission permit) for ever.
        let answer = async {
            let response = self.client.pooled().request(request).await?;
            let (parts, body) = response.into_parts();
            let body = http_body_util::BodyExt::collect(body).await?.to_bytes();
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((parts, body))
        };
        let (mut parts, body) = tokio::time::timeout(FORWARD_TIMEOUT, answer)
            .await
            .map_err(|_elapsed| format!("no answer within {FORWARD_TIMEOUT:?}"))?
            .map_err(|error| error.to_string())?;
        for name in [header::CONNECTION, header::TRANSFER_ENCODING, header::UPGRADE] {
            parts.headers.remove(name);
        }
        if let Ok(value) = HeaderValue::from_str(leader) {
            parts.headers.insert(FORWARDED_TO_HEADER, value);
        }
        Ok(Response::from_parts(parts, Body::from(body)))
    }
}

/// The leader address a local refusal names, if it is a `not_leader` that knows one.
fn leader_address(response: &Response) -> Option<String> {
    match response.extensions().get::<ApiError>()? {
        ApiError::NotLeader { leader: Some(LeaderHint { address: Some(address), .. }), .. } => {
            Some(address.clone())
        }
        _ => None,
    }
}

/// The middleware: answers locally, and replays a `not_leader` with a leader address to that
/// leader.
pub async fn forward(State(forwarder): State<Forwarder>, request: Request, next: Next) -> Response {
    // gRPC is never forwarded: the SDK follows leader hints itself.
    if crate::serve::is_grpc(&request) || request.headers().contains_key(FORWARDED_HEADER) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, BODY_BYTES_MAX).await else {
        let error =
            ApiError::InvalidArgument(format!("body: unreadable or over {BODY_BYTES_MAX} bytes"));
        return error.into_response();
    };
    let replay = head_of(&parts);
    let local = next.run(Request::from_parts(parts, Body::from(body.clone()))).await;
    let Some(leader) = leader_address(&local) else {
        return local;
    };
    match forwarder.replay(&leader, &replay, body).await {
        Ok(response) => response,
        Err(error) => {
            tracing::info!(%leader, %error, path = %replay.uri.path(), "forwarding failed");
            local
        }
    }
}

/// A copy of a request head: method, URI, version and headers (not the extensions, which
/// belong to this node's connection).
fn head_of(parts: &axum::http::request::Parts) -> axum::http::request::Parts {
    let mut request = axum::http::Request::new(());
    *request.method_mut() = parts.method.clone();
    *request.uri_mut() = parts.uri.clone();
    *request.version_mut() = parts.version;
    *request.headers_mut() = parts.headers.clone();
    request.into_parts().0
}

/// `router` with every route forwarded to its leader when this node is not it, over TCP or
/// through `dialer`.
pub fn layer(router: Router, dialer: Option<DialerRef>, roots: Option<Roots>) -> Router {
    router.layer(middleware::from_fn_with_state(Forwarder::new(dialer, roots), forward))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use axum::Json;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::any;
    use http_body_util::BodyExt;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use super::*;

    /// A "leader" that echoes what it received.
    async fn echo_server() -> SocketAddr {
        async fn echo(request: Request) -> Json<Value> {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.unwrap().to_bytes();
            let header = |name: &str| {
                parts.headers.get(name).map(|value| value.to_str().unwrap().to_owned())
            };
            Json(json!({
                "method": parts.method.as_str(),
                "uri": parts.uri.to_string(),
                "body": String::from_utf8(body.to_vec()).unwrap(),
                "forwarded": header(FORWARDED_HEADER),
                "authorization": header("authorization"),
                "idempotency_key": header("idempotency-key"),
                "host": header("host"),
            }))
        }
        serve(Router::new().fallback(any(echo))).await
    }

    async fn serve(router: Router) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        address
    }

    /// A "follower": refuses every request with a hint to `leader`, except `/local` which it
    /// answers itself with the body it got, and `/no-leader` which has no hint.
    fn follower(leader: Option<String>) -> Router {
        let hint = move || ApiError::NotLeader {
            group: 1,
            leader: Some(LeaderHint { id: 2, address: leader.clone() }),
        };
        let refuse = move || {
            let hint = hint.clone();
            async move { hint().into_response() }
        };
        layer(
            Router::new()
                .route("/local", any(|body: Bytes| async move { body }))
                .route(
                    "/no-leader",
                    any(|| async { ApiError::NotLeader { group: 1, leader: None } }),
                )
                .route("/v1/{*rest}", any(refuse)),
            None,
            None,
        )
    }

    async fn json_of(response: Response) -> Value {
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap()
    }

    fn post(path: &str, headers: &[(&str, &str)], body: &str) -> Request {
        let mut request = axum::http::Request::post(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(Body::from(body.to_owned())).unwrap()
    }

    #[tokio::test]
    async fn a_refused_request_is_replayed_to_the_leader_once() {
        let leader = echo_server().await;
        let follower_address = serve(follower(Some(leader.to_string()))).await;
        let client = HttpClient::new(None, CONNECT_TIMEOUT);
        let request =
            axum::http::Request::post(format!("http://{follower_address}/v1/shows/4/holds?dry=1"))
                .header("authorization", "Bearer t")
                .header("idempotency-key", "k-1")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(br#"{"seats":[1,2]}"#)))
                .unwrap();
        let response = client.pooled().request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[FORWARDED_TO_HEADER], leader.to_string());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let echoed: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            echoed,
            json!({
                "method": "POST", "uri": "/v1/shows/4/holds?dry=1", "body": r#"{"seats":[1,2]}"#,
                "forwarded": "1", "authorization": "Bearer t", "idempotency_key": "k-1",
                "host": leader.to_string(),
            })
        );
    }

    #[tokio::test]
    async fn forwarded_grpc_hintless_and_unreachable_requests_get_the_local_answer() {
        let leader = echo_server().await;
        let app = follower(Some(leader.to_string()));
        let forwarded = post("/v1/x", &[(FORWARDED_HEADER, "1")], "");
        let response = app.clone().oneshot(forwarded).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "never a second hop");
        let grpc = post("/v1/x", &[("content-type", "application/grpc")], "");
        let response = app.clone().oneshot(grpc).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "gRPC is never forwarded");
        let response = app.clone().oneshot(post("/no-leader", &[], "")).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(json_of(response).await["code"], "no_leader");

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let unreachable = follower(Some(closed.to_string()));
        let response = unreachable.oneshot(post("/v1/x", &[], "{}")).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let headers: HeaderMap = response.headers().clone();
        assert_eq!(headers[proto::booking::metadata::LEADER_ADDR], closed.to_string());
        assert_eq!(headers["retry-after"], "1");
        assert_eq!(json_of(response).await["code"], "not_leader");
    }

    #[tokio::test]
    async fn local_answers_pass_through_with_their_body_and_oversized_bodies_are_refused() {
        let app = follower(None);
        let response = app.clone().oneshot(post("/local", &[], "payload")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.into_body().collect().await.unwrap().to_bytes(), "payload");
        let huge = "x".repeat(BODY_BYTES_MAX + 1);
        let response = app.oneshot(post("/local", &[], &huge)).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(json_of(response).await["code"], "invalid_argument");
    }
}
