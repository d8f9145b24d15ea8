//! `paysim`, the payment provider the project ships for tests and the demo: a separate
//! process with a Stripe-like HTTP API, a durable ledger and signed webhooks back to bookingd.
//!
//! - `POST /v1/charges` (`Idempotency-Key` = bookingd's payment attempt id; body
//!   `{payment_id, amount_minor, currency}`): charges once per key. The same key and payload
//!   again answer the same charge (`replayed: true`) and charge nothing; the same key with
//!   another payload is 409 `idempotency_key_reused`.
//! - `GET /v1/charges/{id}`, `GET /v1/charges/by-key/{key}`: a charge, for reconciliation.
//! - `POST /v1/refunds` (`Idempotency-Key` = the refund id; body `{charge_id, amount_minor}`):
//!   refunds once per key, never more than was charged.
//! - `GET /ledger`: every charge and refund, oldest first, so tests can check money against
//!   bookings; `GET /webhooks`: every webhook delivery, how it went and which URL took it.
//! - `GET /control`, `PUT /control`: the behaviour (`behaviour.rs`), changed at run time.
//!
//! A new charge's outcome goes to bookingd's `POST /v1/payments/webhook`, at any of the nodes
//! given (`--webhook-url`, repeated or comma-separated: every node verifies and forwards to the
//! leader, so any one will do), signed as bookingd checks it (`X-Booking-Signature:
//! t=<unix seconds>,v1=<hex>`, `node::signature`, under `PAYSIM_WEBHOOK_SECRET`, bookingd's
//! development secret if unset), timestamped by paysim's own clock when each request is sent.
//! Each attempt tries the URLs in turn, from a start that rotates from one delivery to the next
//! so the load spreads, moving on at a connection error, a timeout, a 429 or a 5xx, until a
//! node answers 2xx or refuses for good (another 4xx); attempts back off, up to
//! `--webhook-attempts`. Errors are `{code, message}` with a 4xx/5xx status; bad input changes
//! nothing.

pub mod behaviour;
pub mod ledger;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Request, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use raft::{Clock, DialerRef};
use serde::{Deserialize, Serialize};

use crate::http_client::{HttpClient, Roots, SendError};
use crate::rest::webhook::{DEVELOPMENT_WEBHOOK_SECRET, WebhookEvent, WebhookResult};
use crate::signature::{SIGNATURE_HEADER, sign};
use behaviour::{Behaviour, Draws};
use ledger::{Charge, ChargeStatus, Ledger, Record, Refund};

/// The environment variable holding the webhook secret (never a flag: it would show in `ps`).
pub const SECRET_ENV: &str = "PAYSIM_WEBHOOK_SECRET";
/// The longest idempotency key, payment id or charge id accepted, in bytes.
pub const ID_BYTES_MAX: usize = 128;
/// How long one webhook request may take before the node counts as not answering.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting to a node for a webhook may take.
const WEBHOOK_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// `paysim`: a simulated payment provider for the booking cluster.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "paysim", version, about, long_about = None)]
pub struct Args {
    /// The address to serve on (port 0: any free port; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:7700")]
    pub listen: SocketAddr,
    /// The folder of the ledger (created if missing).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// bookingd's webhook endpoint (`https://HOST:PORT/v1/payments/webhook`, or `http://` for
    /// nodes without --client-tls), once per node (repeat the flag or separate with commas): a
    /// delivery goes to whichever answers. No webhooks without it.
    #[arg(long, value_delimiter = ',')]
    pub webhook_url: Vec<String>,
    /// The CA (PEM) that https webhook URLs are verified against: the cluster's CA.
    #[arg(long, value_name = "FILE")]
    pub webhook_ca_file: Option<PathBuf>,
    /// Delivery attempts per webhook before giving up. One attempt tries the URLs in turn until
    /// one answers 2xx or refuses for good; attempts back off 50 ms, doubling up to 2 s.
    #[arg(long, default_value_t = 8)]
    pub webhook_attempts: u32,
    /// Seed of the behaviour's draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The behaviour at start (`PUT /control` changes it).
    #[command(flatten)]
    pub behaviour: Behaviour,
}

/// One webhook delivery, as `GET /webhooks` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The event delivered.
    pub event: WebhookEvent,
    /// Attempts made (each tries the URLs in turn).
    pub attempts: u32,
    /// HTTP requests sent, over every attempt and URL.
    #[serde(default)]
    pub requests: u32,
    /// The URL that answered last (`status`): with `delivered`, the node that took it.
    #[serde(default)]
    pub url: Option<String>,
    /// The last HTTP status bookingd answered, if any.
    pub status: Option<u16>,
    /// Whether bookingd accepted it (2xx).
    pub delivered: bool,
}

/// Where and how webhooks go.
#[derive(Clone, Debug)]
pub struct WebhookSettings {
    /// Every node's webhook endpoint (`https://HOST:PORT/v1/payments/webhook`, or `http://`);
    /// at least one.
    pub urls: Vec<String>,
    /// What https URLs are verified against; required when there is one.
    pub roots: Option<Roots>,
    /// The secret they are signed with.
    pub secret: String,
    /// Delivery attempts per webhook (each tries every URL once); at least one.
    pub attempts: u32,
    /// The network they travel on: TCP, or the simulator's when given.
    pub dialer: Option<DialerRef>,
}

impl WebhookSettings {
    /// Checks the settings.
    ///
    /// # Errors
    ///
    /// A message naming the first unusable setting.
    pub fn check(&self) -> Result<(), String> {
        if self.urls.is_empty() {
            return Err("--webhook-url: at least one".into());
        }
        for url in &self.urls {
            let parsed: Uri =
                url.parse().map_err(|_| format!("--webhook-url: not a URL: {url}"))?;
            let scheme = parsed.scheme_str();
            if !matches!(scheme, Some("http" | "https")) || parsed.host().is_none() {
                return Err(format!("--webhook-url: expected https://HOST:PORT/PATH, got {url}"));
            }
            if scheme == Some("https") && self.roots.is_none() {
                return Err(format!("--webhook-url {url}: https needs --webhook-ca-file"));
            }
        }
        if self.attempts == 0 {
            return Err("--webhook-attempts: at least 1".into());
        }
        Ok(())
    }
}

struct Webhooks {
    settings: WebhookSettings,
    /// Where the next delivery starts in `urls` (taken modulo their number).
    next: AtomicUsize,
    client: HttpClient,
}

/// The provider: its ledger, its behaviour and draws, its webhooks and their deliveries, and
/// the clock it stamps and signs by. Shared by its HTTP handlers ([`Paysim::router`]) and,
/// in the simulator, by the run that steers it and reads its ledger.
pub struct Paysim {
    ledger: Mutex<Ledger>,
    behaviour: Mutex<(Behaviour, Draws)>,
    webhooks: Option<Webhooks>,
    deliveries: Mutex<Vec<Delivery>>,
    clock: Clock,
}

impl Paysim {
    /// A provider on `ledger`, behaving as `behaviour` with draws seeded by `seed`, sending
    /// webhooks as `webhooks` says (none without), reading time from `clock`.
    ///
    /// # Errors
    ///
    /// A message when the behaviour or the webhook settings are unusable.
    pub fn new(
        ledger: Ledger,
        behaviour: Behaviour,
        seed: u64,
        webhooks: Option<WebhookSettings>,
        clock: Clock,
    ) -> Result<Arc<Paysim>, String> {
        behaviour.check()?;
        let webhooks = match webhooks {
            Some(settings) => {
                settings.check()?;
                let client = HttpClient::with_roots(
                    settings.dialer.clone(),
                    WEBHOOK_CONNECT_TIMEOUT,
                    settings.roots.clone(),
                );
                Some(Webhooks { settings, next: AtomicUsize::new(0), client })
            }
            None => None,
        };
        Ok(Arc::new(Paysim {
            ledger: Mutex::new(ledger),
            behaviour: Mutex::new((behaviour, Draws::new(seed))),
            webhooks,
            deliveries: Mutex::new(Vec::new()),
            clock,
        }))
    }

    /// The HTTP API, served on whatever listener the caller has.
    pub fn router(self: &Arc<Paysim>) -> Router {
        router(Arc::clone(self))
    }

    /// Changes the behaviour, as `PUT /control` does.
    ///
    /// # Errors
    ///
    /// The first setting out of range; nothing changes then.
    pub fn set_behaviour(&self, behaviour: Behaviour) -> Result<(), String> {
        behaviour.check()?;
        tracing::info!(?behaviour, "behaviour changed");
        lock(&self.behaviour).0 = behaviour;
        Ok(())
    }

    /// Every record of the ledger, oldest first (what `GET /ledger` lists).
    pub fn records(&self) -> Vec<Record> {
        lock(&self.ledger).records().to_vec()
    }

    /// Every webhook delivery so far (what `GET /webhooks` lists).
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.deliveries).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An error answer: `{code, message}`.
#[derive(Debug)]
struct Refusal(StatusCode, &'static str, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        #[derive(Serialize)]
        struct Body<'a> {
            code: &'a str,
            message: String,
        }
        (self.0, Json(Body { code: self.1, message: self.2 })).into_response()
    }
}

fn invalid(message: impl Into<String>) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, "invalid_argument", message.into())
}

fn storage(error: &std::io::Error) -> Refusal {
    Refusal(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("ledger: {error}"))
}

fn idempotency_key(headers: &HeaderMap) -> Result<String, Refusal> {
    let key = headers
        .get("idempotency-key")
        .ok_or_else(|| invalid("Idempotency-Key: required"))?
        .to_str()
        .map_err(|_| invalid("Idempotency-Key: visible ASCII only"))?;
    check_id("Idempotency-Key", key)?;
    Ok(key.to_owned())
}

fn check_id(name: &str, id: &str) -> Result<(), Refusal> {
    if id.is_empty() || id.len() > ID_BYTES_MAX || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(format!("{name}: 1..={ID_BYTES_MAX} visible ASCII characters")));
    }
    Ok(())
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Refusal> {
    serde_json::from_slice(body).map_err(|error| invalid(format!("body: {error}")))
}

/// Refuses every call during an outage, then waits the configured latency.
async fn enter(sim: &Paysim) -> Result<(), Refusal> {
    let (outage, latency_ms) = {
        let behaviour = &lock(&sim.behaviour).0;
        (behaviour.outage, behaviour.latency_ms)
    };
    if outage {
        return Err(Refusal(StatusCode::SERVICE_UNAVAILABLE, "outage", "provider outage".into()));
    }
    tokio::time::sleep(Duration::from_millis(latency_ms)).await;
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChargeRequest {
    payment_id: String,
    amount_minor: u64,
    currency: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct ChargeReply {
    #[serde(flatten)]
    charge: Charge,
    replayed: bool,
}

async fn create_charge(
    State(sim): State<Arc<Paysim>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    let key = idempotency_key(&headers)?;
    let request: ChargeRequest = parse(&body)?;
    check_id("payment_id", &request.payment_id)?;
    if request.amount_minor == 0 {
        return Err(invalid("amount_minor: must be positive"));
    }
    if request.currency.len() != 3 || !request.currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(invalid("currency: three upper-case letters (ISO 4217)"));
    }
    enter(&sim).await?;
    let (charge, fresh, times_out) = {
        let mut ledger = lock(&sim.ledger);
        match ledger.charge_by_key(&key) {
            Some(existing) => {
                let same = existing.payment_id == request.payment_id
                    && existing.amount_minor == request.amount_minor
                    && existing.currency == request.currency;
                if !same {
                    return Err(Refusal(
                        StatusCode::CONFLICT,
                        "idempotency_key_reused",
                        "this key charged another payload".into(),
                    ));
                }
                (existing.clone(), false, false)
            }
            None => {
                let (declined, times_out) = {
                    let (behaviour, draws) = &mut *lock(&sim.behaviour);
                    (draws.happens(behaviour.decline_ratio), draws.happens(behaviour.timeout_ratio))
                };
                let charge = Charge {
                    id: ledger.next_charge_id(),
                    key,
                    payment_id: request.payment_id,
                    amount_minor: request.amount_minor,
                    currency: request.currency,
                    status: if declined { ChargeStatus::Declined } else { ChargeStatus::Succeeded },
                    at_ms: sim.clock.now_ms(),
                };
                ledger.record_charge(charge.clone()).map_err(|error| storage(&error))?;
                (charge, true, times_out)
            }
        }
    };
    if fresh {
        let before_reply = lock(&sim.behaviour).0.webhook_before_reply;
        let delivering = Arc::clone(&sim);
        let notify = charge.clone();
        if before_reply {
            notify_charge(delivering, notify).await;
        } else {
            tokio::spawn(notify_charge(delivering, notify));
        }
    }
    if times_out {
        return Err(Refusal(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout",
            "the charge's outcome is unknown: read it by its key".into(),
        ));
    }
    Ok(Json(ChargeReply { charge, replayed: !fresh }).into_response())
}

async fn get_charge(
    State(sim): State<Arc<Paysim>>,
    Path(id): Path<String>,
) -> Result<Json<Charge>, Refusal> {
    lock(&sim.ledger).charge(&id).cloned().map(Json).ok_or_else(|| not_found("charge"))
}

async fn get_charge_by_key(
    State(sim): State<Arc<Paysim>>,
    Path(key): Path<String>,
) -> Result<Json<Charge>, Refusal> {
    lock(&sim.ledger).charge_by_key(&key).cloned().map(Json).ok_or_else(|| not_found("charge"))
}

fn not_found(what: &str) -> Refusal {
    Refusal(StatusCode::NOT_FOUND, "not_found", format!("no such {what}"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundRequest {
    charge_id: String,
    amount_minor: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct RefundReply {
    #[serde(flatten)]
    refund: Refund,
    replayed: bool,
}

async fn create_refund(
    State(sim): State<Arc<Paysim>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<RefundReply>, Refusal> {
    let key = idempotency_key(&headers)?;
    let request: RefundRequest = parse(&body)?;
    check_id("charge_id", &request.charge_id)?;
    if request.amount_minor == 0 {
        return Err(invalid("amount_minor: must be positive"));
    }
    enter(&sim).await?;
    let mut ledger = lock(&sim.ledger);
    if let Some(existing) = ledger.refund_by_key(&key) {
        if existing.charge_id != request.charge_id || existing.amount_minor != request.amount_minor
        {
            return Err(Refusal(
                StatusCode::CONFLICT,
                "idempotency_key_reused",
                "this key refunded another payload".into(),
            ));
        }
        return Ok(Json(RefundReply { refund: existing.clone(), replayed: true }));
    }
    let charge = ledger.charge(&request.charge_id).ok_or_else(|| not_found("charge"))?;
    if charge.status != ChargeStatus::Succeeded {
        return Err(Refusal(
            StatusCode::CONFLICT,
            "charge_not_succeeded",
            "only a succeeded charge can be refunded".into(),
        ));
    }
    let left = charge.amount_minor - ledger.refunded_minor(&charge.id);
    if request.amount_minor > left {
        return Err(Refusal(
            StatusCode::CONFLICT,
            "exceeds_charge",
            format!("{left} minor units are left to refund on this charge"),
        ));
    }
    let refund = Refund {
        id: ledger.next_refund_id(),
        key,
        charge_id: request.charge_id,
        amount_minor: request.amount_minor,
        at_ms: sim.clock.now_ms(),
    };
    ledger.record_refund(refund.clone()).map_err(|error| storage(&error))?;
    Ok(Json(RefundReply { refund, replayed: false }))
}

#[derive(Debug, Serialize, Deserialize)]
struct LedgerReply {
    records: Vec<Record>,
}

async fn get_ledger(State(sim): State<Arc<Paysim>>) -> Json<LedgerReply> {
    Json(LedgerReply { records: sim.records() })
}

async fn get_webhooks(State(sim): State<Arc<Paysim>>) -> Json<Vec<Delivery>> {
    Json(sim.deliveries())
}

async fn get_control(State(sim): State<Arc<Paysim>>) -> Json<Behaviour> {
    Json(lock(&sim.behaviour).0.clone())
}

async fn put_control(
    State(sim): State<Arc<Paysim>>,
    body: Bytes,
) -> Result<Json<Behaviour>, Refusal> {
    let behaviour: Behaviour = parse(&body)?;
    sim.set_behaviour(behaviour.clone()).map_err(invalid)?;
    Ok(Json(behaviour))
}

/// Tells bookingd what came of a new charge: its event, maybe twice, maybe followed by a stale
/// `unknown` event, after the configured delay.
async fn notify_charge(sim: Arc<Paysim>, charge: Charge) {
    let Some(webhooks) = &sim.webhooks else { return };
    let (delay_ms, twice, stale) = {
        let (behaviour, draws) = &mut *lock(&sim.behaviour);
        let twice = draws.happens(behaviour.duplicate_ratio);
        (behaviour.webhook_delay_ms, twice, draws.happens(behaviour.out_of_order_ratio))
    };
    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    let succeeded = charge.status == ChargeStatus::Succeeded;
    let event = WebhookEvent {
        event_id: format!("evt_{}", charge.id),
        payment_id: charge.payment_id.clone(),
        result: if succeeded { WebhookResult::Succeeded } else { WebhookResult::Declined },
        amount_minor: succeeded.then_some(charge.amount_minor),
        currency: succeeded.then(|| charge.currency.clone()),
    };
    deliver(&sim, webhooks, event.clone()).await;
    if twice {
        deliver(&sim, webhooks, event).await;
    }
    if stale {
        let late = WebhookEvent {
            event_id: format!("evt_{}_stale", charge.id),
            payment_id: charge.payment_id,
            result: WebhookResult::Unknown,
            amount_minor: None,
            currency: None,
        };
        deliver(&sim, webhooks, late).await;
    }
}

/// What one request of a delivery came to.
enum Answered {
    /// A node took it (2xx).
    Accepted,
    /// A node refused it for good (a 4xx other than 429): no node will take it.
    Refused,
    /// No answer, a timeout, a 429 or a 5xx: another node, or a later attempt, may take it.
    Retry,
}

/// Posts `event` until a node accepts it (2xx), refuses it for good (4xx but 429), or the
/// attempts run out. Each attempt tries every URL once, in turn, starting where this delivery
/// was told to (the start rotates from one delivery to the next); a failure at one node says
/// nothing of the others, so the next is tried at once, and only a whole attempt that failed
/// backs off (50 ms, doubling up to 2 s), since then the cluster itself cannot take it yet (say,
/// while a group elects a leader).
async fn deliver(sim: &Paysim, webhooks: &Webhooks, event: WebhookEvent) {
    let body = serde_json::to_vec(&event).expect("an event encodes");
    let mut delivery =
        Delivery { event, attempts: 0, requests: 0, url: None, status: None, delivered: false };
    let (urls, attempts) = (&webhooks.settings.urls, webhooks.settings.attempts);
    let count = urls.len();
    let start = webhooks.next.fetch_add(1, Ordering::Relaxed) % count;
    let mut backoff = Duration::from_millis(50);
    'attempts: while delivery.attempts < attempts {
        delivery.attempts += 1;
        for offset in 0..count {
            let url = &urls[(start + offset) % count];
            delivery.requests += 1;
            match send(sim, webhooks, url, &body, &mut delivery).await {
                Answered::Accepted => {
                    delivery.delivered = true;
                    break 'attempts;
                }
                Answered::Refused => break 'attempts,
                Answered::Retry => {}
            }
        }
        if delivery.attempts < attempts {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }
    if !delivery.delivered {
        tracing::warn!(
            event = delivery.event.event_id,
            attempts = delivery.attempts,
            status = delivery.status,
            "webhook not delivered"
        );
    }
    lock(&sim.deliveries).push(delivery);
}

/// Sends `body` to `url` once, signed now by paysim's clock (so that a delivery retried for a
/// while is never refused as stale), and records the answer in `delivery`.
async fn send(
    sim: &Paysim,
    webhooks: &Webhooks,
    url: &str,
    body: &[u8],
    delivery: &mut Delivery,
) -> Answered {
    let signature = sign(&webhooks.settings.secret, sim.clock.now_ms() / 1_000, body);
    let request = Request::post(url)
        .header(SIGNATURE_HEADER, signature)
        .header("content-type", "application/json")
        .body(Bytes::copy_from_slice(body));
    let request = match request {
        Ok(request) => request,
        Err(error) => {
            tracing::warn!(url, %error, "webhook URL unusable");
            return Answered::Refused;
        }
    };
    let response = match webhooks.client.send(request, WEBHOOK_TIMEOUT).await {
        Ok(response) => response,
        Err(SendError::NotSent(error) | SendError::Unknown(error)) => {
            tracing::debug!(event = delivery.event.event_id, url, %error, "webhook not taken");
            return Answered::Retry;
        }
    };
    let status = response.status;
    delivery.status = Some(status.as_u16());
    delivery.url = Some(url.to_owned());
    if status.is_success() {
        Answered::Accepted
    } else if status.is_client_error() && status != StatusCode::TOO_MANY_REQUESTS {
        tracing::warn!(event = delivery.event.event_id, url, %status, "webhook refused");
        Answered::Refused
    } else {
        tracing::debug!(event = delivery.event.event_id, url, %status, "webhook not taken");
        Answered::Retry
    }
}

/// The HTTP routes, on `sim`.
fn router(sim: Arc<Paysim>) -> Router {
    Router::new()
        .route("/v1/charges", post(create_charge))
        .route("/v1/charges/{id}", get(get_charge))
        .route("/v1/charges/by-key/{key}", get(get_charge_by_key))
        .route("/v1/refunds", post(create_refund))
        .route("/ledger", get(get_ledger))
        .route("/webhooks", get(get_webhooks))
        .route("/control", get(get_control).put(put_control))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(sim)
}

/// Runs the provider until SIGINT or SIGTERM. Prints `paysim listening=<address>` on stdout
/// once it serves. Exit code 2 for unusable settings, 1 when it cannot start.
pub async fn run(args: Args) -> ExitCode {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    if let Err(problem) = args.behaviour.check() {
        eprintln!("paysim: {problem}");
        return ExitCode::from(2);
    }
    let ledger = match Ledger::open(&args.data_dir) {
        Ok(ledger) => ledger,
        Err(error) => {
            eprintln!("paysim: {}: {error}", args.data_dir.display());
            return ExitCode::FAILURE;
        }
    };
    let secret = std::env::var(SECRET_ENV).unwrap_or_else(|_| {
        tracing::warn!("{SECRET_ENV} unset: signing webhooks with the development secret");
        DEVELOPMENT_WEBHOOK_SECRET.to_owned()
    });
    let urls: Vec<String> = args
        .webhook_url
        .iter()
        .map(|url| url.trim().to_owned())
        .filter(|url| !url.is_empty())
        .collect();
    let roots = match &args.webhook_ca_file {
        None => None,
        Some(path) => match std::fs::read(path)
            .map_err(|error| error.to_string())
            .and_then(|pem| Roots::from_pem(&pem))
        {
            Ok(roots) => Some(roots),
            Err(problem) => {
                eprintln!("paysim: --webhook-ca-file {}: {problem}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let webhooks = (!urls.is_empty()).then(|| WebhookSettings {
        urls,
        roots,
        secret,
        attempts: args.webhook_attempts.max(1),
        dialer: None,
    });
    let sim = match Paysim::new(ledger, args.behaviour, args.seed, webhooks, Clock::system()) {
        Ok(sim) => sim,
        Err(problem) => {
            eprintln!("paysim: {problem}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("paysim: {}: {error}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let address = listener.local_addr().map_or(args.listen, |address| address);
    println!("paysim listening={address}");
    let served = axum::serve(listener, sim.router()).with_graceful_shutdown(stopped()).await;
    if let Err(error) = served {
        eprintln!("paysim: {error}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

async fn stopped() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => return std::future::pending().await,
        };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
