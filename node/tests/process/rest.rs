//! An HTTP/1.1 JSON client of the REST API for the process tests (no SDK: hyper-util's pooled
//! client, over TLS trusting the cluster's CA when the nodes serve it), and the fixture the `api_*` tests share: a cluster started with an operator
//! credential and a webhook secret, buyer sessions, shows created through `POST /v1/shows`, and
//! a report that runs a file's scenarios one after the other on one cluster and names each one
//! that failed.
//!
//! A request is sent once ([`Call::send_once`]) or, for the steps a scenario is not about, again
//! with the same idempotency key while the node answers 503 or 429, to the leader it names if
//! it names one ([`Call::send`]), as a client is told to. A server-sent event stream is read frame by frame ([`Call::events`]). Owns no
//! assertion about the cluster beyond the shape every error must have: the tests do.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use node::http_client::{HttpClient, Roots};
use serde_json::{Value, json};
use testkit::{Cluster, ClusterOptions, GroupId, NodeId};
use tokio::time::Instant;

use crate::client::OPERATOR;

/// How long one attempt of a request may take (longer than a node's own 5 s commit wait, so
/// that its 503 is seen rather than our timeout).
pub const ATTEMPT_MAX: Duration = Duration::from_secs(8);

/// How long [`Call::send`] keeps retrying a 503 or 429 before it is its answer.
pub const RETRY_MAX: Duration = Duration::from_secs(10);

/// The pause between two attempts of [`Call::send`].
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The operator credential of the clusters the REST tests start (also the gRPC helpers' one).
pub const OPERATOR_TOKEN: &str = OPERATOR;

/// The payment webhook secret of the clusters the REST tests start.
pub const WEBHOOK_SECRET: &str = "process-test-webhook-secret-0123456789abcdef";

/// The price version of a new show.
pub const PRICE_VERSION: u32 = 1;

/// Fails the enclosing function (which returns `io::Result`) with a formatted message unless
/// `condition` holds: scenarios report failures instead of panicking, so that the scenarios after
/// a failed one still run on the shared cluster.
macro_rules! ensure {
    ($condition:expr, $($message:tt)+) => {
        if !$condition {
            return Err(std::io::Error::other(format!(
                "{}:{}: {}", file!(), line!(), format!($($message)+)
            )));
        }
    };
}
pub(crate) use ensure;

/// An HTTP/1.1 client of any node of one cluster, cheap to clone.
#[derive(Clone)]
pub struct Http {
    client: HttpClient,
    /// `https` when the cluster serves TLS.
    scheme: &'static str,
}

/// How long connecting (and the TLS handshake) may take.
const CONNECT_MAX: Duration = Duration::from_secs(2);

impl Http {
    /// A client of `cluster`'s nodes: https trusting its CA when they serve TLS.
    ///
    /// # Panics
    ///
    /// If the cluster's CA certificate is unusable (a bug in the test kit).
    pub fn of(cluster: &Cluster) -> Http {
        let roots = (cluster.scheme() == "https").then(|| {
            Roots::from_pem(cluster.ca_certificate().as_bytes())
                .unwrap_or_else(|error| panic!("the cluster's CA: {error}"))
        });
        Http { client: HttpClient::with_roots(None, CONNECT_MAX, roots), scheme: cluster.scheme() }
    }

    /// The same client speaking plain HTTP: for a server outside the cluster (paysim).
    pub fn plain(&self) -> Http {
        Http { scheme: "http", ..self.clone() }
    }

    /// A request of `method` to `path` on the node serving at `address` (host:port).
    pub fn call(&self, method: Method, address: &str, path: &str) -> Call {
        Call {
            http: self.clone(),
            method,
            address: address.to_owned(),
            path: path.to_owned(),
            headers: Vec::new(),
            body: None,
        }
    }
}

/// One request, built up and then sent.
#[derive(Clone)]
pub struct Call {
    http: Http,
    method: Method,
    address: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
}

impl Call {
    /// Adds header `name: value`.
    pub fn header(mut self, name: &str, value: &str) -> Call {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Adds `Authorization: Bearer <token>`.
    pub fn token(self, token: &str) -> Call {
        self.header("authorization", &format!("Bearer {token}"))
    }

    /// Adds `Idempotency-Key: <key>`.
    pub fn key(self, key: &str) -> Call {
        self.header("idempotency-key", key)
    }

    /// Sends `body` as JSON.
    pub fn json(self, body: &Value) -> Call {
        self.raw(body.to_string().into_bytes())
    }

    /// Sends `bytes` as the body, declared `application/json` (whether it is or not).
    pub fn raw(mut self, bytes: Vec<u8>) -> Call {
        self.body = Some(bytes);
        self.header("content-type", "application/json")
    }

    /// What the request is, for messages.
    fn describe(&self) -> String {
        let body = self.body.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
        let body: String = body.chars().take(300).collect();
        format!("{} {} on {} {body}", self.method, self.path, self.address)
    }

    fn request(&self) -> io::Result<Request<Full<Bytes>>> {
        let mut builder = Request::builder()
            .method(self.method.clone())
            .uri(format!("{}://{}{}", self.http.scheme, self.address, self.path));
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        let body = Full::new(Bytes::from(self.body.clone().unwrap_or_default()));
        builder.body(body).map_err(io::Error::other)
    }

    /// Sends the request once and reads the whole answer.
    ///
    /// # Errors
    ///
    /// When the node does not answer within [`ATTEMPT_MAX`] (or the connection fails).
    pub async fn send_once(&self) -> io::Result<Answer> {
        self.send_once_within(ATTEMPT_MAX).await
    }

    /// As [`Call::send_once`], waiting at most `within` for the answer.
    ///
    /// # Errors
    ///
    /// When the node does not answer within `within` (or the connection fails).
    pub async fn send_once_within(&self, within: Duration) -> io::Result<Answer> {
        let request = self.request()?;
        let sent = async {
            let response =
                self.http.client.pooled().request(request).await.map_err(io::Error::other)?;
            let (parts, body) = response.into_parts();
            let bytes = body.collect().await.map_err(io::Error::other)?.to_bytes();
            Ok::<_, io::Error>((parts, bytes))
        };
        let (parts, bytes) = tokio::time::timeout(within, sent)
            .await
            .map_err(|_| io::Error::other(format!("{}: no answer in {within:?}", self.describe())))?
            .map_err(|error| io::Error::other(format!("{}: {error}", self.describe())))?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            request: self.describe(),
            status: parts.status.as_u16(),
            headers: parts.headers,
            text,
            body,
        })
    }

    /// Sends the request, and again (same headers, so the same idempotency key) while the
    /// node answers 503 or 429 (after its `Retry-After`), for up to [`RETRY_MAX`]; the last
    /// answer is returned. A 503 that names the leader (`booking-leader-addr`) is sent there
    /// next, as the SDK does: the steps of a scenario do not depend on forwarding, which
    /// `api_shows.rs` checks with [`Call::send_once`].
    ///
    /// # Errors
    ///
    /// When an attempt gets no answer at all.
    pub async fn send(&self) -> io::Result<Answer> {
        let deadline = Instant::now() + RETRY_MAX;
        let mut call = self.clone();
        loop {
            let answer = call.send_once().await?;
            if !matches!(answer.status, 429 | 503) || Instant::now() >= deadline {
                return Ok(answer);
            }
            let retry_after = answer.header("retry-after").and_then(|s| s.parse().ok());
            let pause = match answer.status {
                429 => Duration::from_secs(retry_after.unwrap_or(1).min(2)),
                _ => RETRY_PAUSE,
            };
            match answer.header("booking-leader-addr") {
                Some(leader) if leader != call.address => call.address = leader.to_owned(),
                _ => tokio::time::sleep(pause).await,
            }
        }
    }

    /// Opens the request as a server-sent event stream: checks the status (200) and the
    /// content type, and returns the stream to read events from.
    ///
    /// # Errors
    ///
    /// When the node does not answer, or answers something else than an event stream.
    pub async fn events(&self) -> io::Result<EventStream> {
        let request = self.request()?;
        let response =
            tokio::time::timeout(ATTEMPT_MAX, self.http.client.pooled().request(request))
                .await
                .map_err(|_| io::Error::other(format!("{}: no answer", self.describe())))?
                .map_err(|error| io::Error::other(format!("{}: {error}", self.describe())))?;
        let (parts, body) = response.into_parts();
        let content_type = parts
            .headers
            .get("content-type")
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if parts.status.as_u16() != 200 || !content_type.starts_with("text/event-stream") {
            let bytes = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
            return Err(io::Error::other(format!(
                "{}: expected 200 text/event-stream, got {} {content_type} {}",
                self.describe(),
                parts.status,
                String::from_utf8_lossy(&bytes)
            )));
        }
        Ok(EventStream { what: self.describe(), body: Body::new(body), buffer: String::new() })
    }
}

/// A node's whole answer to one request.
#[derive(Debug)]
pub struct Answer {
    /// What was asked, for messages.
    pub request: String,
    /// The HTTP status.
    pub status: u16,
    /// The response headers.
    pub headers: HeaderMap,
    /// The body as text.
    pub text: String,
    /// The body as JSON (`Null` if it is not JSON).
    pub body: Value,
}

impl Answer {
    /// The value of header `name`, if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The request and the answer, for messages.
    pub fn describe(&self) -> String {
        let text: String = self.text.chars().take(600).collect();
        format!("{} -> {} {text}", self.request, self.status)
    }

    /// The JSON body if the status is `status`.
    ///
    /// # Errors
    ///
    /// Any other status, naming the request and the answer.
    pub fn expect(&self, status: u16) -> io::Result<&Value> {
        if self.status != status {
            return Err(io::Error::other(format!("expected {status}: {}", self.describe())));
        }
        Ok(&self.body)
    }

    /// Checks that the answer is error `status` with machine code `code` in the shape every
    /// error has (shared/DESIGN.md "Errors"): a JSON body `{code, message, details}` whose code
    /// the `booking-code` header repeats, and `Retry-After` on 429 and 503. Returns `details`.
    ///
    /// # Errors
    ///
    /// When the answer differs, naming the request and the answer.
    pub fn expect_error(&self, status: u16, code: &str) -> io::Result<&Value> {
        let problem = if self.status != status {
            Some(format!("status is not {status}"))
        } else if self.body["code"] != code {
            Some(format!("body code is not {code}"))
        } else if self.header("booking-code") != Some(code) {
            Some(format!("header booking-code is not {code}"))
        } else if !self.body["message"].is_string() {
            Some("no message".to_owned())
        } else if !self.body["details"].is_object() {
            Some("details is not an object".to_owned())
        } else if (status == 429 || status == 503)
            && self.header("retry-after").and_then(|value| value.parse::<u64>().ok()).is_none()
        {
            Some("no Retry-After seconds".to_owned())
        } else {
            None
        };
        match problem {
            Some(problem) => Err(io::Error::other(format!(
                "expected {status} {code} ({problem}): {}",
                self.describe()
            ))),
            None => Ok(&self.body["details"]),
        }
    }
}

/// One server-sent event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// Its `event:` field (empty if none).
    pub event: String,
    /// Its `data:` lines, joined by newlines.
    pub data: String,
    /// Its `id:` field (empty if none).
    pub id: String,
}

impl Event {
    /// The data as JSON (`Null` if it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// An open `text/event-stream` response, read event by event.
pub struct EventStream {
    what: String,
    body: Body,
    buffer: String,
}

impl EventStream {
    /// The next event (comments and keep-alives skipped), waiting at most `within`.
    ///
    /// # Errors
    ///
    /// When no event comes in time, or the stream ends or fails.
    pub async fn next(&mut self, within: Duration) -> io::Result<Event> {
        let deadline = Instant::now() + within;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_event(&block) {
                    return Ok(event);
                }
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .map_err(|_| io::Error::other(format!("{}: no event in {within:?}", self.what)))?;
            match frame {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.push_str(&String::from_utf8_lossy(&data).replace("\r\n", "\n"));
                    }
                }
                Some(Err(error)) => {
                    return Err(io::Error::other(format!("{}: {error}", self.what)));
                }
                None => return Err(io::Error::other(format!("{}: stream ended", self.what))),
            }
        }
    }

    /// Reads events until one satisfies `wanted`, waiting at most `within` in all; returns it
    /// and every event before it.
    ///
    /// # Errors
    ///
    /// As [`EventStream::next`], with the events seen.
    pub async fn until(
        &mut self,
        within: Duration,
        wanted: impl Fn(&Event) -> bool,
    ) -> io::Result<Vec<Event>> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Ok(event) => {
                    let done = wanted(&event);
                    seen.push(event);
                    if done {
                        return Ok(seen);
                    }
                }
                Err(error) => return Err(io::Error::other(format!("{error}; seen {seen:?}"))),
            }
        }
    }
}

/// One event of an event stream block, or `None` for a block of comments only.
fn parse_event(block: &str) -> Option<Event> {
    let mut event = Event::default();
    let mut data = Vec::new();
    let mut any = false;
    for line in block.lines() {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        any = true;
        match field {
            "event" => event.event = value.to_owned(),
            "data" => data.push(value.to_owned()),
            "id" => event.id = value.to_owned(),
            _ => {}
        }
    }
    event.data = data.join("\n");
    any.then_some(event)
}

/// A field of a JSON object as a string (an external id), or an error naming the object.
///
/// # Errors
///
/// When the field is missing or not a string.
pub fn string_field(value: &Value, field: &str) -> io::Result<String> {
    value[field]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other(format!("no string `{field}` in {value}")))
}

/// The seats of a JSON object's `seats` array, as numbers.
///
/// # Errors
///
/// When there is no such array of numbers.
pub fn seats_of(value: &Value) -> io::Result<Vec<u32>> {
    value["seats"]
        .as_array()
        .and_then(|seats| {
            seats.iter().map(|seat| seat.as_u64().and_then(|s| u32::try_from(s).ok())).collect()
        })
        .ok_or_else(|| io::Error::other(format!("no `seats` numbers in {value}")))
}

/// The state of every seat of a seat map (`GET /v1/shows/{id}/seats`), by seat number: the
/// map's `seats` is either a list of states (by seat number from 0) or a list of objects with
/// the seat's number (`seat`) and `state`.
///
/// # Errors
///
/// When the map has neither shape.
pub fn seat_states(map: &Value) -> io::Result<BTreeMap<u32, String>> {
    let unknown = || io::Error::other(format!("not a seat map: {map}"));
    let seats = map["seats"].as_array().ok_or_else(unknown)?;
    let mut states = BTreeMap::new();
    for (position, seat) in seats.iter().enumerate() {
        let (number, state) = match seat {
            Value::String(state) => {
                (u32::try_from(position).map_err(io::Error::other)?, state.as_str())
            }
            Value::Object(fields) => {
                let number = fields
                    .get("seat")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(unknown)?;
                (number, fields.get("state").and_then(Value::as_str).ok_or_else(unknown)?)
            }
            _ => return Err(unknown()),
        };
        states.insert(number, state.to_owned());
    }
    Ok(states)
}

/// The cluster of one `api_*` test file, and what its scenarios share.
pub struct Api {
    /// The cluster.
    pub cluster: Cluster,
    /// The HTTP client.
    pub http: Http,
    /// Makes idempotency keys and event ids unique in the process.
    next: AtomicU64,
}

/// A show a scenario created.
#[derive(Clone, Debug)]
pub struct Show {
    /// Its id.
    pub id: u64,
    /// Its data group.
    pub group: GroupId,
}

impl Api {
    /// Starts a cluster with `options`, with the operator credential [`OPERATOR_TOKEN`] and the
    /// webhook secret [`WEBHOOK_SECRET`].
    ///
    /// # Errors
    ///
    /// As [`crate::start`].
    pub async fn start(options: ClusterOptions) -> io::Result<Api> {
        let options = ClusterOptions {
            operator_token: Some(OPERATOR_TOKEN.to_owned()),
            webhook_secret: Some(WEBHOOK_SECRET.to_owned()),
            ..options
        };
        let cluster = crate::start(options).await?;
        Ok(Api { http: Http::of(&cluster), cluster, next: AtomicU64::new(0) })
    }

    /// A fresh idempotency key (or any unique name), never used before by this process.
    pub fn key(&self, what: &str) -> String {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{what}-{}-{number}", std::process::id())
    }

    /// A request to node `node`.
    ///
    /// # Panics
    ///
    /// If the cluster has no node `node` (a mistake in the test).
    pub fn on(&self, node: NodeId, method: Method, path: &str) -> Call {
        let address = self.cluster.address(node).unwrap_or_else(|error| panic!("{error}"));
        self.http.call(method, &address, path)
    }

    /// The node leading `group` now.
    ///
    /// # Errors
    ///
    /// As [`Cluster::leader_of`].
    pub async fn leader(&self, group: GroupId) -> io::Result<NodeId> {
        Ok(self.cluster.leader_of(group).await?)
    }

    /// A running node that does not lead `group` now.
    ///
    /// # Errors
    ///
    /// As [`Cluster::leader_of`], or when every running node leads it (one node).
    pub async fn follower(&self, group: GroupId) -> io::Result<NodeId> {
        let leader = self.leader(group).await?;
        self.cluster
            .running()
            .into_iter()
            .find(|&id| id != leader)
            .ok_or_else(|| io::Error::other(format!("no follower of group {group}")))
    }

    /// A request to the node leading `group` now.
    ///
    /// # Errors
    ///
    /// As [`Cluster::leader_of`].
    pub async fn to_leader(&self, group: GroupId, method: Method, path: &str) -> io::Result<Call> {
        Ok(self.on(self.leader(group).await?, method, path))
    }

    /// A fresh guest session token from `POST /v1/sessions` on node 1.
    ///
    /// # Errors
    ///
    /// When the answer is not 201 with a `token`.
    pub async fn session(&self) -> io::Result<String> {
        let answer = self.on(1, Method::POST, "/v1/sessions").send().await?;
        string_field(answer.expect(201)?, "token")
    }

    /// Creates a show with `POST /v1/shows` (operator, on node 1): `fields` (an object) over the
    /// defaults `{show_id, currency: EUR, prices_minor: [1000], layout: [{count: seats, class:
    /// 0}], group_id}`. Sales are open unless `fields` says `open_sales: false`.
    ///
    /// # Errors
    ///
    /// When the answer is not 201 with the show's id and group.
    pub async fn create_show(
        &self,
        show_id: u64,
        seats: u32,
        group: GroupId,
        fields: Value,
    ) -> io::Result<Show> {
        let mut body = json!({
            "show_id": show_id,
            "currency": "EUR",
            "prices_minor": [1_000],
            "layout": [{ "count": seats, "class": 0 }],
            "group_id": group,
        });
        if let (Some(body), Some(fields)) = (body.as_object_mut(), fields.as_object()) {
            body.extend(fields.clone());
        }
        let answer = self
            .on(1, Method::POST, "/v1/shows")
            .token(OPERATOR_TOKEN)
            .key(&self.key("show"))
            .json(&body)
            .send()
            .await?;
        let created = answer.expect(201)?;
        ensure!(created["show_id"] == show_id, "created another show: {}", answer.describe());
        let placed = created["group_id"].as_u64().unwrap_or(0);
        ensure!(group == 0 || placed == group, "placed in another group: {}", answer.describe());
        Ok(Show { id: show_id, group: placed })
    }

    /// Holds `seats` of `show` for `token` under `key` on the leader of its group (retrying a
    /// 503 with the same key), and returns the answer, whatever it is.
    ///
    /// # Errors
    ///
    /// When no node answers.
    pub async fn hold(
        &self,
        show: &Show,
        token: &str,
        key: &str,
        seats: &[u32],
    ) -> io::Result<Answer> {
        let body = json!({ "seats": seats, "price_version": PRICE_VERSION });
        let path = format!("/v1/shows/{}/holds", show.id);
        self.to_leader(show.group, Method::POST, &path)
            .await?
            .token(token)
            .key(key)
            .json(&body)
            .send()
            .await
    }

    /// As [`Api::hold`], for a fresh key, and checks the answer is a 201 hold of exactly
    /// `seats`; returns the hold.
    ///
    /// # Errors
    ///
    /// When the hold is not made as asked.
    pub async fn hold_ok(&self, show: &Show, token: &str, seats: &[u32]) -> io::Result<Value> {
        let answer = self.hold(show, token, &self.key("hold"), seats).await?;
        let hold = answer.expect(201)?.clone();
        let mut asked = seats.to_vec();
        asked.sort_unstable();
        ensure!(
            seats_of(&hold)? == asked && hold["state"] == "held",
            "not a hold of {seats:?}: {}",
            answer.describe()
        );
        Ok(hold)
    }

    /// A hold of `seats` made and checked out by a fresh session: the session, the hold id and
    /// the checkout's answer (`payment_id`, `amount`).
    ///
    /// # Errors
    ///
    /// A call failed or answered otherwise than 201.
    pub async fn checked_out(
        &self,
        show: &Show,
        seats: &[u32],
    ) -> io::Result<(String, String, Value)> {
        let buyer = self.session().await?;
        let hold = self.hold_ok(show, &buyer, seats).await?;
        let hold_id = string_field(&hold, "hold_id")?;
        let answer = self
            .to_leader(show.group, Method::POST, &format!("/v1/holds/{hold_id}/checkout"))
            .await?
            .token(&buyer)
            .key(&self.key("checkout"))
            .send()
            .await?;
        Ok((buyer, hold_id, answer.expect(201)?.clone()))
    }

    /// The seat map of `show` (from the leader of its group, so it includes every write
    /// acknowledged before), by seat number.
    ///
    /// # Errors
    ///
    /// When the map cannot be read.
    pub async fn seat_states(&self, show: &Show) -> io::Result<BTreeMap<u32, String>> {
        let path = format!("/v1/shows/{}/seats", show.id);
        let answer = self.to_leader(show.group, Method::GET, &path).await?.send().await?;
        seat_states(answer.expect(200)?)
    }

    /// Kills every node and deletes the cluster's files.
    ///
    /// # Errors
    ///
    /// As [`Cluster::shutdown`].
    pub async fn shutdown(self) -> io::Result<()> {
        Ok(self.cluster.shutdown().await?)
    }
}

/// The outcome of every scenario a test file runs on its one cluster.
#[derive(Default)]
pub struct Report {
    failed: Vec<String>,
    passed: Vec<&'static str>,
}

impl Report {
    /// Records scenario `name`'s `result` and prints it.
    pub fn check(&mut self, name: &'static str, result: io::Result<()>) {
        match result {
            Ok(()) => {
                println!("scenario {name}: ok");
                self.passed.push(name);
            }
            Err(error) => {
                println!("scenario {name}: FAILED: {error}");
                self.failed.push(format!("{name}: {error}"));
            }
        }
    }

    /// Whether every scenario so far passed.
    pub fn all_passed(&self) -> bool {
        self.failed.is_empty()
    }

    /// Ok if every scenario passed, else an error naming each failure.
    ///
    /// # Errors
    ///
    /// When a scenario failed.
    pub fn finish(self) -> io::Result<()> {
        if self.failed.is_empty() {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "{} scenario(s) failed, {} passed:\n{}",
            self.failed.len(),
            self.passed.len(),
            self.failed.join("\n")
        )))
    }
}
