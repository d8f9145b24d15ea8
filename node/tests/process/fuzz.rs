//! Random requests against the REST and gRPC surfaces of a real 3-node cluster: random methods
//! and paths (the routes' templates with hostile ids, and garbage), random headers (bad and
//! good tokens, huge idempotency keys, odd content types, the forwarding mark), random bodies
//! (mutated JSON, random bytes, deep nesting, over the size limit), and gRPC calls of every
//! method with random, truncated and oversized frames over HTTP/2.
//!
//! What must hold: no answer is a 5xx other than 503, every request is answered (no dropped
//! connection, nothing left hanging; except that a body over the 256 KiB limit, or over TLS any
//! body the node refuses unread, sent over HTTP/1 may find its connection closed before the
//! client reads the refusal, which HTTP/1 allows; counted as status 0), and no node panics or exits. The seed is printed and can be
//! replayed with `BOOKING_FUZZ_SEED`; `BOOKING_FUZZ_REQUESTS` sets how many requests (600 here,
//! `scripts/fuzz.sh` runs more).
//!
//! Reference: issue 17, "A fuzz test of the REST and gRPC surfaces (random paths, headers and
//! bodies, including oversized and malformed ones) finds no panic and no 5xx other than 503".

use std::io;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use node::http_client::{Connector, Roots};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;
use testkit::ClusterOptions;

use crate::options;
use crate::rest::{Api, OPERATOR_TOKEN, ensure};

/// The REST routes' templates (`{}` is replaced by a hostile or ordinary id).
const ROUTES: [&str; 24] = [
    "/v1/sessions",
    "/v1/shows",
    "/v1/shows/{}",
    "/v1/shows/{}/holds",
    "/v1/shows/{}/seats",
    "/v1/shows/{}/availability",
    "/v1/shows/{}/queue",
    "/v1/shows/{}/waitlist",
    "/v1/shows/{}/sales",
    "/v1/holds/{}",
    "/v1/holds/{}/checkout",
    "/v1/holds/{}/events",
    "/v1/queue/{}",
    "/v1/queue/{}/events",
    "/v1/bookings/{}",
    "/v1/bookings/{}/refund",
    "/v1/payments/{}",
    "/v1/payments/webhook",
    "/v1/waitlist/{}",
    "/v1/offers/{}/accept",
    "/v1/search",
    "/v1/catalog/venues",
    "/ops",
    "/openapi.json",
];

/// The gRPC methods asked (and some that do not exist).
const GRPC_METHODS: [&str; 12] = [
    "/booking.v1.BookingService/CreateSession",
    "/booking.v1.BookingService/GetShow",
    "/booking.v1.BookingService/Hold",
    "/booking.v1.BookingService/HoldMany",
    "/booking.v1.BookingService/GetHold",
    "/booking.v1.BookingService/WatchHold",
    "/booking.v1.BookingService/Checkout",
    "/booking.v1.BookingService/Nowhere",
    "/booking.v1.AdminService/Status",
    "/booking.v1.AdminService/AddLearner",
    "/booking.raft.v1.RaftService/AppendEntries",
    "/nothing.Here/At",
];

/// Ids: ordinary, edge and hostile.
const IDS: [&str; 14] = [
    "1",
    "1700",
    "0",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "abc",
    "h-1-2",
    "%00",
    "..%2F..%2Fetc",
    "%F0%9F%8E%AB",
    "9999999999999999999999999999999999",
    "1.5",
    "%E2%80%AE",
];

/// The largest body a node reads.
const BODY_LIMIT: u64 = node::rest::BODY_BYTES_MAX as u64;

/// Whether a request failed because the server closed the connection while the client was
/// still sending its body (which resets the connection, and may cut the answer short).
fn is_closed_while_sending(error: &str) -> bool {
    let reset = error.contains("BrokenPipe") || error.contains("ConnectionReset");
    (error.contains("BodyWrite") && reset) || error.contains("error reading a body")
}

/// How many requests: `BOOKING_FUZZ_REQUESTS`, else 600.
fn requests() -> usize {
    std::env::var("BOOKING_FUZZ_REQUESTS").ok().and_then(|value| value.parse().ok()).unwrap_or(600)
}

fn path(rng: &mut StdRng) -> String {
    if rng.gen_ratio(1, 8) {
        let length = rng.gen_range(0..40);
        let garbage: String =
            (0..length).map(|_| *b"abz09/%._-~?&=#".choose(rng).unwrap_or(&b'a') as char).collect();
        return format!("/{garbage}");
    }
    let template = ROUTES.choose(rng).unwrap_or(&"/");
    let mut path = template.replace("{}", IDS.choose(rng).unwrap_or(&"1"));
    if rng.gen_ratio(1, 4) {
        let key = ["q", "limit", "after", "seats", "x"].choose(rng).unwrap_or(&"q");
        let value = IDS.choose(rng).unwrap_or(&"1");
        path.push_str(&format!("?{key}={value}"));
    }
    path
}

fn body(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..9) {
        0 => Vec::new(),
        1 => (0..rng.gen_range(1..512)).map(|_| rng.r#gen::<u8>()).collect(),
        2 => "[".repeat(rng.gen_range(1..400_000)).into_bytes(),
        // Far over the body limit.
        3 => vec![b' '; 3 * 1024 * 1024],
        4 => json!({ "seats": [u64::MAX, -1, "x"], "price_version": -1 }).to_string().into_bytes(),
        5 => json!({ "show_id": u64::MAX, "layout": [{ "count": u32::MAX, "class": 300 }] })
            .to_string()
            .into_bytes(),
        6 => json!({ "seats": (0..2_000).collect::<Vec<_>>(), "price_version": 1 })
            .to_string()
            .into_bytes(),
        7 => b"{\"seats\":[1],\"price_version\":1e999}".to_vec(),
        _ => {
            let mut valid =
                json!({ "seats": [1, 2], "price_version": 1, "q": "x" }).to_string().into_bytes();
            let cut = rng.gen_range(0..valid.len());
            valid.truncate(cut);
            valid
        }
    }
}

fn headers(rng: &mut StdRng, session: &str) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    let authorization = match rng.gen_range(0..6) {
        0 => None,
        1 => Some(format!("Bearer {session}")),
        2 => Some(format!("Bearer   {session}  ")),
        3 => Some(format!("Bearer {OPERATOR_TOKEN}")),
        4 => Some("Bearer".to_owned()),
        _ => Some(format!("Basic {}", "x".repeat(rng.gen_range(0..4_000)))),
    };
    if let Some(value) = authorization {
        headers.push(("authorization".to_owned(), value));
    }
    if rng.gen_bool(0.5) {
        let length = [0, 1, 64, 300, 20_000].choose(rng).copied().unwrap_or(1);
        headers.push(("idempotency-key".to_owned(), "k".repeat(length)));
    }
    let content_type =
        ["application/json", "text/plain", "application/json; charset=latin1", "*/*"]
            .choose(rng)
            .copied()
            .unwrap_or("application/json");
    if rng.gen_bool(0.8) {
        headers.push(("content-type".to_owned(), content_type.to_owned()));
    }
    if rng.gen_ratio(1, 6) {
        headers.push(("booking-forwarded".to_owned(), "1".to_owned()));
    }
    if rng.gen_ratio(1, 6) {
        headers.push(("x-forwarded-for".to_owned(), "::1, 10.0.0.1, garbage".to_owned()));
    }
    if rng.gen_ratio(1, 6) {
        headers.push(("accept".to_owned(), "text/event-stream".to_owned()));
    }
    headers
}

/// A gRPC body: a frame of random protobuf bytes, a truncated one, one that claims more than it
/// carries or more than any limit, or no frame at all.
fn grpc_body(rng: &mut StdRng) -> Vec<u8> {
    let payload: Vec<u8> = (0..rng.gen_range(0..256)).map(|_| rng.r#gen::<u8>()).collect();
    let length = u32::try_from(payload.len()).unwrap_or(0);
    let mut frame = Vec::new();
    match rng.gen_range(0..5) {
        0 => {
            frame.push(0);
            frame.extend(length.to_be_bytes());
            frame.extend(payload);
        }
        1 => {
            frame.push(0);
            frame.extend((length + 100).to_be_bytes());
            frame.extend(payload);
        }
        2 => {
            frame.push(0);
            frame.extend(u32::MAX.to_be_bytes());
        }
        // Compressed, which nobody negotiated.
        3 => {
            frame.push(1);
            frame.extend(length.to_be_bytes());
            frame.extend(payload);
        }
        _ => frame.extend(payload),
    }
    frame
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_requests_get_no_5xx_but_503_and_no_node_panics() -> io::Result<()> {
    let seed = std::env::var("BOOKING_FUZZ_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("fuzz: seed {seed} (BOOKING_FUZZ_SEED={seed} replays it)");
    let layout = ClusterOptions {
        rate_per_session: Some(1_000_000),
        rate_per_address: Some(1_000_000),
        rate_new_sessions_per_address: Some(1_000_000),
        ..options(3)
    };
    let api = Api::start(layout).await?;
    api.create_show(1_700, 100, 1, json!({})).await?;
    let session = api.session().await?;
    // Over TLS (the cluster's default), offering each client's protocol in the handshake.
    let roots =
        Roots::from_pem(api.cluster.ca_certificate().as_bytes()).map_err(io::Error::other)?;
    let tls = |alpn: &[u8]| {
        let roots = roots.clone().with_alpn(&[alpn]);
        Connector::new(
            None,
            Duration::from_secs(2),
            api.cluster.options().client_tls.then_some(roots),
        )
    };
    let http1 = HyperClient::builder(TokioExecutor::new()).build(tls(b"http/1.1"));
    let http2 = HyperClient::builder(TokioExecutor::new()).http2_only(true).build(tls(b"h2"));
    let scheme = api.cluster.scheme();
    let tls = api.cluster.options().client_tls;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut failures = Vec::new();
    let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
    let mut grpc_codes = std::collections::BTreeMap::<String, u64>::new();
    let addresses = api.cluster.addresses();
    for number in 0..requests() {
        let address = addresses.choose(&mut rng).cloned().unwrap_or_default();
        let grpc = rng.gen_ratio(1, 4);
        let (request, client) = if grpc {
            let method = GRPC_METHODS.choose(&mut rng).unwrap_or(&"/");
            let mut builder = Request::post(format!("{scheme}://{address}{method}"))
                .header("content-type", "application/grpc")
                .header("te", "trailers");
            for (name, value) in headers(&mut rng, &session) {
                if name != "content-type" {
                    builder = builder.header(name, value);
                }
            }
            (builder.body(Full::new(Bytes::from(grpc_body(&mut rng)))), &http2)
        } else {
            let method = [Method::GET, Method::POST, Method::PUT, Method::DELETE, Method::PATCH]
                .choose(&mut rng)
                .cloned()
                .unwrap_or(Method::GET);
            let mut builder = Request::builder()
                .method(method)
                .uri(format!("{scheme}://{address}{}", path(&mut rng)));
            for (name, value) in headers(&mut rng, &session) {
                builder = builder.header(name, value);
            }
            let client = if rng.gen_ratio(1, 3) { &http2 } else { &http1 };
            (builder.body(Full::new(Bytes::from(body(&mut rng)))), client)
        };
        let request = request.map_err(io::Error::other)?;
        let size = hyper::body::Body::size_hint(request.body()).exact().unwrap_or(0);
        let asked = format!("#{number} {} {} ({size} bytes)", request.method(), request.uri());
        let answered = tokio::time::timeout(Duration::from_secs(20), async {
            let response = client.request(request).await.map_err(|error| format!("{error:?}"))?;
            let (parts, body) = response.into_parts();
            // Server-sent events never end by themselves: the head is the answer.
            if parts.headers.get("content-type").is_some_and(|t| t == "text/event-stream") {
                return Ok((parts, Bytes::new()));
            }
            let body = body.collect().await.map_err(|error| error.to_string())?.to_bytes();
            Ok::<_, String>((parts, body))
        })
        .await;
        match answered {
            Err(_elapsed) => failures.push(format!("{asked}: no answer in 20 s")),
            // HTTP/1 has no way to refuse a body but to answer and close the connection while
            // the client still sends: it may see the close before the answer. Over plain TCP
            // that happens only past the body limit (below it, the kernel's buffers take the
            // rest); over TLS to any body the server answers without reading (a 401 or 404).
            Ok(Err(error))
                if (size > BODY_LIMIT || (tls && size > 0)) && is_closed_while_sending(&error) =>
            {
                *statuses.entry(0).or_default() += 1;
            }
            Ok(Err(error)) => failures.push(format!("{asked}: {error}")),
            Ok(Ok((parts, body))) => {
                let status = parts.status.as_u16();
                *statuses.entry(status).or_default() += 1;
                if let Some(code) = parts.headers.get("grpc-status") {
                    let code = code.to_str().unwrap_or("?").to_owned();
                    let message = parts
                        .headers
                        .get("grpc-message")
                        .map(|m| m.to_str().unwrap_or("?").to_owned());
                    *grpc_codes.entry(code.clone()).or_default() += 1;
                    if code == "13" || code == "2" {
                        failures.push(format!("{asked}: gRPC status {code} {message:?}"));
                    }
                }
                if status >= 500 && status != 503 {
                    let text = String::from_utf8_lossy(&body);
                    failures.push(format!("{asked}: {status} {}", &text[..text.len().min(300)]));
                }
            }
        }
        if failures.len() >= 20 {
            break;
        }
    }
    println!("fuzz: HTTP statuses {statuses:?}, gRPC statuses {grpc_codes:?}");
    api.cluster.check_alive()?;
    for id in api.cluster.node_ids() {
        let log = api.cluster.log_tail(id, usize::MAX);
        ensure!(!log.contains("panicked"), "node {id} panicked:\n{}", api.cluster.log_tail(id, 40));
    }
    ensure!(
        failures.is_empty(),
        "seed {seed}: {} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    api.shutdown().await
}
