//! The `payments` workload's world outside the cluster: the payment provider as a real
//! process, the provider nemesis, and the end of a run judged against the provider's ledger.
//!
//! - [`Paysim`]: the project's simulated provider (`paysim`, next to `bookingd`) on
//!   `127.0.0.10` at the run's port base (no node listens there: nodes are `127.0.0.11` and
//!   up), its ledger on disk in the run's data folder, its webhooks signed with the cluster's
//!   secret and sent to any node. Every node is started with `--provider-url` pointing at it,
//!   so the data groups' leader-only payment and refund workers charge and refund through it;
//!   nobody else does.
//! - [`run_faults`]: the provider nemesis (`--provider-faults`), which runs beside whichever
//!   node nemesis the run has: quiet and fault periods of seeded lengths, each fault one of an
//!   outage, slowness (up to past the node's call timeout, so outcomes become unknown),
//!   duplicate webhooks, late webhooks, out-of-order (stale) webhooks, charge calls that time
//!   out after charging, and webhooks delivered before the charge call returns, set and undone
//!   through paysim's `PUT /control`. A tenth of new charges are declined throughout, so that
//!   holds come back and are checked out again.
//! - [`judge`]: after the faults are healed and the clients have read back, waits for the
//!   payments to settle (no attempt `pending` or `unknown`, no refund owed; past
//!   [`QUIESCE_MAX`] that is itself a failure), reads the ledger and the cluster's state (every
//!   payment attempt as the operator reads it, every booking as its buyer reads it, the final
//!   seat maps) and runs `statemachine::check::ledger` on them.
//!
//! Never judges by itself (the ledger checker does) and never stops a process it did not
//! start: paysim is killed through its own child handle.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use client::{Client, Error, SeatStatus as WireSeatStatus};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use statemachine::check::Verdict;
use statemachine::check::ledger::{
    ClusterBooking, ClusterPayment, ClusterState, LedgerRecord, check_ledger,
    payment_status_from_wire,
};
use statemachine::{BookingState, PaymentStatus};
use testkit::workload::Buyer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::nemesis::{Phase, StepStatus};

/// Where the provider listens: an address of the loopback no node uses.
pub const PROVIDER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 10);
/// How long paysim may take to say it listens.
const START_MAX: Duration = Duration::from_secs(10);
/// How long one call to paysim may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the payments may take to settle once every fault is healed; past it the run is
/// invalid (a payment stuck `unknown`, a refund never made).
pub const QUIESCE_MAX: Duration = Duration::from_secs(90);
/// Ids past the largest one seen that are still asked for (a checkout applied after its
/// client gave up would have one).
const ID_SLACK: u64 = 32;
/// Attempts at one read of the final state before it is given up.
const READ_ATTEMPTS: u32 = 40;
/// Reads of payment attempts in flight at once.
const READS_IN_FLIGHT: usize = 8;

/// The provider's address for a run on `port_base`.
pub fn provider_address(port_base: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(PROVIDER_IP), port_base)
}

/// A running paysim, killed (SIGKILL) by [`Paysim::stop`] or when dropped.
pub struct Paysim {
    child: Child,
    address: SocketAddr,
    dir: PathBuf,
    http: reqwest::Client,
}

impl Paysim {
    /// Starts `binary` on `listen` with its ledger in `dir`, sending webhooks signed with
    /// `secret` to every node of `nodes` (host:port), its draws seeded with `seed`.
    ///
    /// # Errors
    ///
    /// A message when it cannot be started or does not say it listens in time.
    pub async fn start(
        binary: &Path,
        listen: SocketAddr,
        dir: &Path,
        nodes: &[String],
        secret: &str,
        seed: u64,
    ) -> Result<Paysim, String> {
        if !binary.is_file() {
            return Err(format!(
                "{} not found; build it first: cargo build --release --workspace --bins",
                binary.display()
            ));
        }
        std::fs::create_dir_all(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
        let log = dir.join("stderr.log");
        let stderr =
            std::fs::File::create(&log).map_err(|error| format!("{}: {error}", log.display()))?;
        let mut command = Command::new(binary);
        command
            .arg("--listen")
            .arg(listen.to_string())
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--seed")
            .arg(seed.to_string());
        for node in nodes {
            command.arg("--webhook-url").arg(format!("http://{node}/v1/payments/webhook"));
        }
        let mut child = command
            .env("PAYSIM_WEBHOOK_SECRET", secret)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("{}: {error}", binary.display()))?;
        let stdout = child.stdout.take().ok_or("paysim's stdout is not piped")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = match tokio::time::timeout(START_MAX, lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                return Err(format!("paysim exited before listening; see {}", log.display()));
            }
            Ok(Err(error)) => return Err(format!("paysim's stdout: {error}")),
            Err(_) => return Err(format!("paysim did not listen within {START_MAX:?}")),
        };
        if line.strip_prefix("paysim listening=") != Some(listen.to_string().as_str()) {
            return Err(format!("paysim said {line:?}, expected it to listen on {listen}"));
        }
        // Whatever else it prints is read, so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|error| format!("an HTTP client: {error}"))?;
        Ok(Paysim { child, address: listen, dir: dir.to_path_buf(), http })
    }

    /// The provider's base URL, as the nodes' `--provider-url` names it.
    pub fn url(address: SocketAddr) -> String {
        format!("http://{address}")
    }

    /// The folder of its ledger and log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    async fn call(&self, request: reqwest::RequestBuilder, what: &str) -> Result<Value, String> {
        let response = request.send().await.map_err(|error| format!("paysim {what}: {error}"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|error| format!("paysim {what}: HTTP {status}: unreadable answer: {error}"))?;
        if !status.is_success() {
            return Err(format!("paysim {what}: HTTP {status}: {body}"));
        }
        Ok(body)
    }

    /// Sets the provider's behaviour (fields left out take their defaults: `{}` is a provider
    /// without faults).
    ///
    /// # Errors
    ///
    /// A message when paysim refuses or does not answer.
    pub async fn behave(&self, behaviour: &Value) -> Result<(), String> {
        let url = format!("http://{}/control", self.address);
        self.call(self.http.put(url).json(behaviour), "PUT /control").await.map(|_| ())
    }

    /// Every record of the ledger, oldest first.
    ///
    /// # Errors
    ///
    /// A message when paysim does not answer or its ledger does not parse.
    pub async fn ledger(&self) -> Result<Vec<LedgerRecord>, String> {
        let url = format!("http://{}/ledger", self.address);
        let body = self.call(self.http.get(url), "GET /ledger").await?;
        serde_json::from_value(body["records"].clone())
            .map_err(|error| format!("paysim GET /ledger: not a ledger: {error}"))
    }

    /// Kills it (SIGKILL, through its own child handle) and reaps it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// One step of the provider nemesis, as `provider.jsonl` records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderEvent {
    /// When the step began, ns since the run's start.
    pub time_ns: u64,
    /// When it finished.
    pub end_ns: u64,
    /// The fault the step injects or undoes (0: the baseline set at the start).
    pub step: u64,
    /// Fault or heal.
    pub phase: Phase,
    /// `baseline`, `outage`, `slow`, `duplicate-webhooks`, `late-webhooks`,
    /// `out-of-order-webhooks`, `timeouts`, `webhook-before-reply`, `heal` or `heal-all`.
    pub action: String,
    /// The behaviour set.
    pub behaviour: Value,
    /// Installed, or indeterminate when paysim did not confirm it.
    pub status: StepStatus,
    /// Why it is indeterminate.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// The behaviour between faults: a tenth of new charges declined.
fn baseline() -> Value {
    json!({ "decline_ratio": 0.1 })
}

/// One fault, drawn with `rng`: its name and the behaviour that makes it.
fn draw_fault(rng: &mut StdRng) -> (&'static str, Value) {
    let mut behaviour = baseline();
    let (name, fields) = match rng.gen_range(0..7) {
        0 => ("outage", json!({ "outage": true })),
        // Past 5 s the node's call times out: the charge is made, its outcome unknown.
        1 => ("slow", json!({ "latency_ms": rng.gen_range(1_000..=6_500) })),
        2 => ("duplicate-webhooks", json!({ "duplicate_ratio": 1.0 })),
        3 => ("late-webhooks", json!({ "webhook_delay_ms": rng.gen_range(2_000..=8_000) })),
        4 => ("out-of-order-webhooks", json!({ "out_of_order_ratio": 1.0 })),
        5 => ("timeouts", json!({ "timeout_ratio": 0.5 })),
        _ => (
            "webhook-before-reply",
            json!({ "webhook_before_reply": true, "duplicate_ratio": 0.5 }),
        ),
    };
    if let (Some(all), Some(fields)) = (behaviour.as_object_mut(), fields.as_object()) {
        all.extend(fields.clone());
    }
    (name, behaviour)
}

fn since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs the provider nemesis until `stop` completes: the baseline at once, then (when
/// `faults`) quiet periods of 2-4 s and faults of 2-5 s drawn from `seed`; then the provider
/// is healed for good (`{}`: no declines either, so that the run can settle). Returns the
/// steps, timed from `t0`.
pub async fn run_faults(
    paysim: &Paysim,
    faults: bool,
    seed: u64,
    t0: Instant,
    stop: impl Future<Output = ()>,
) -> Vec<ProviderEvent> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x7061_7973_696d);
    let mut events = Vec::new();
    let mut step = 0;
    let set = |step: u64, phase: Phase, action: &'static str, behaviour: Value| {
        let began = since(t0);
        async move {
            let (status, detail) = match paysim.behave(&behaviour).await {
                Ok(()) => (StepStatus::Installed, String::new()),
                Err(error) => (StepStatus::Indeterminate, error),
            };
            tracing::info!(action, %behaviour, ?status, detail, "provider nemesis");
            ProviderEvent {
                time_ns: began,
                end_ns: since(t0),
                step,
                phase,
                action: action.to_owned(),
                behaviour,
                status,
                detail,
            }
        }
    };
    events.push(set(0, Phase::Heal, "baseline", baseline()).await);
    let mut stop = std::pin::pin!(stop);
    let mut stopped = false;
    while faults && !stopped {
        let quiet = Duration::from_millis(rng.gen_range(2_000..=4_000));
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(quiet) => {}
        }
        step += 1;
        let (name, behaviour) = draw_fault(&mut rng);
        events.push(set(step, Phase::Fault, name, behaviour).await);
        let period = Duration::from_millis(rng.gen_range(2_000..=5_000));
        tokio::select! {
            () = &mut stop => stopped = true,
            () = tokio::time::sleep(period) => {}
        }
        events.push(set(step, Phase::Heal, "heal", baseline()).await);
    }
    if !stopped && !faults {
        stop.await;
    }
    events.push(set(step, Phase::Heal, "heal-all", json!({})).await);
    events
}

/// What [`judge`] found, for the results and the report folder.
pub struct Judged {
    /// The verdict: the ledger checker's, invalid if the payments never settled, unknown if the
    /// final state could not be read.
    pub verdict: Verdict,
    /// The `ledger` part of `results.json`.
    pub results: Value,
    /// The ledger as read (for `ledger.json`), if it was.
    pub ledger: Option<Vec<LedgerRecord>>,
    /// The cluster's state as read (for `cluster-state.json`), if it was.
    pub state: Option<ClusterState>,
}

/// Waits for the payments to settle, reads the ledger and the cluster's final state, and runs
/// the ledger checker. `client` sends the operator token; `buyers` are the run's client
/// processes (each reads back its own holds and bookings); `shows` the shows under test.
pub async fn judge(paysim: &Paysim, client: &Client, buyers: &[Buyer], shows: &[u64]) -> Judged {
    let began = Instant::now();
    let unreadable = |error: String| Judged {
        verdict: Verdict::Unknown,
        results: json!({ "verdict": Verdict::Unknown, "error": error }),
        ledger: None,
        state: None,
    };
    let mut largest = largest_ids(buyers);
    // Waits until every attempt has settled, reading them all each round (a checkout whose
    // client gave up may still be applied, with an id past the largest seen).
    let (payments, unsettled) = loop {
        match paysim.ledger().await {
            Ok(ledger) => {
                for (show, id) in ledger.iter().filter_map(payment_of) {
                    let entry = largest.entry(show).or_insert(0);
                    *entry = (*entry).max(id);
                }
            }
            Err(error) => return unreadable(error),
        }
        let payments = match read_payments(client, shows, &largest).await {
            Ok(payments) => payments,
            Err(error) => return unreadable(error),
        };
        let unsettled: Vec<String> = payments
            .iter()
            .filter(|payment| {
                payment.refund_owed
                    || matches!(payment.state, PaymentStatus::Pending | PaymentStatus::Unknown)
            })
            .map(|payment| payment.payment_id.clone())
            .collect();
        if unsettled.is_empty() || began.elapsed() >= QUIESCE_MAX {
            break (payments, unsettled);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let waited_s = began.elapsed().as_secs_f64();
    let quiesced = unsettled.is_empty();
    if !quiesced {
        tracing::warn!(?unsettled, "payments did not settle within {QUIESCE_MAX:?}");
    }
    let (bookings, booked_seats) = match read_bookings(client, buyers, shows).await {
        Ok(read) => read,
        Err(error) => return unreadable(error),
    };
    let ledger = match paysim.ledger().await {
        Ok(ledger) => ledger,
        Err(error) => return unreadable(error),
    };
    let state = ClusterState { payments, bookings, booked_seats };
    let quiesce = json!({
        "verdict": if quiesced { Verdict::Valid } else { Verdict::Invalid },
        "waited_s": waited_s,
        "limit_s": QUIESCE_MAX.as_secs(),
        "unsettled": unsettled,
    });
    let (verdict, results) = match check_ledger(&ledger, &state) {
        Ok(report) => {
            let quiet = if quiesced { Verdict::Valid } else { Verdict::Invalid };
            let verdict = Verdict::combine([report.verdict, quiet]);
            (verdict, json!({ "verdict": verdict, "quiesce": quiesce, "report": report }))
        }
        Err(error) => (
            Verdict::Unknown,
            json!({ "verdict": Verdict::Unknown, "quiesce": quiesce, "error": error.to_string() }),
        ),
    };
    Judged { verdict, results, ledger: Some(ledger), state: Some(state) }
}

/// `<show>-<n>` as its two numbers.
fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (show, number) = id.split_once('-')?;
    Some((show.parse().ok()?, number.parse().ok()?))
}

/// The attempt a ledger charge names.
fn payment_of(record: &LedgerRecord) -> Option<(u64, u64)> {
    match record {
        LedgerRecord::Charge(charge) => parse_id(&charge.payment_id),
        LedgerRecord::Refund(_) => None,
    }
}

/// The largest id of each show that any buyer knows of (holds, payments, bookings; they share
/// one sequence per show).
fn largest_ids(buyers: &[Buyer]) -> BTreeMap<u64, u64> {
    let mut largest: BTreeMap<u64, u64> = BTreeMap::new();
    for buyer in buyers {
        let known = buyer.known();
        let ids = known
            .holds
            .keys()
            .chain(known.payments.keys())
            .chain(known.bookings.iter())
            .copied()
            .chain(known.checkouts.iter().map(|(&(show, _), &payment)| (show, payment)));
        for (show, id) in ids {
            let entry = largest.entry(show).or_insert(0);
            *entry = (*entry).max(id);
        }
    }
    largest
}

/// Whether an SDK error is worth another try (no leader yet, a node down, a timeout).
fn transient(error: &Error) -> bool {
    matches!(error, Error::Unavailable { .. } | Error::Transport { .. })
}

/// `read` until it answers or fails for good, up to [`READ_ATTEMPTS`] times; the last error.
async fn retrying<T, Read, Answer>(what: &str, mut read: Read) -> Result<T, Error>
where
    Read: FnMut() -> Answer,
    Answer: Future<Output = Result<T, Error>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        match read().await {
            Err(error) if transient(&error) && attempt < READ_ATTEMPTS => {
                tracing::debug!(what, %error, "final read: trying again");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            answer => return answer,
        }
    }
}

/// Whether `error` is the rejection `code`.
fn rejected_with(error: &Error, code: &str) -> bool {
    matches!(error, Error::Rejected { code_name, .. } if code_name == code)
}

/// Every payment attempt of `shows`, as the operator reads it: each id up to the largest seen
/// (plus [`ID_SLACK`]) that names an attempt.
async fn read_payments(
    client: &Client,
    shows: &[u64],
    largest: &BTreeMap<u64, u64>,
) -> Result<Vec<ClusterPayment>, String> {
    let mut payments = Vec::new();
    for &show in shows {
        let last = largest.get(&show).copied().unwrap_or(0) + ID_SLACK;
        let mut reads = tokio::task::JoinSet::new();
        let mut next = 1;
        let mut found = BTreeMap::new();
        loop {
            while reads.len() < READS_IN_FLIGHT && next <= last {
                let (client, id) = (client.clone(), next);
                next += 1;
                reads.spawn(async move {
                    let what = format!("payment {show}-{id}");
                    let read = retrying(&what, || client.get_payment(None, show, id)).await;
                    (id, read)
                });
            }
            let Some(done) = reads.join_next().await else { break };
            let (id, read) = done.map_err(|error| format!("a payment read: {error}"))?;
            match read {
                Ok(reply) => {
                    found.insert(id, reply);
                }
                Err(error) if rejected_with(&error, "payment_not_found") => {}
                Err(error) => return Err(format!("payment {show}-{id}: {error}")),
            }
        }
        for (id, reply) in found {
            let state = payment_status_from_wire(&reply.state)
                .ok_or_else(|| format!("payment {show}-{id}: unknown state {:?}", reply.state))?;
            payments.push(ClusterPayment {
                payment_id: format!("{show}-{id}"),
                hold_id: format!("{show}-{}", reply.hold_id),
                amount_minor: reply.amount_minor,
                state,
                refund_owed: reply.refund_owed,
            });
        }
    }
    Ok(payments)
}

/// Every booking the buyers have (each reads its own holds, to find the bookings they became,
/// and then each booking), and each show's booked seats in its final linearizable seat map.
async fn read_bookings(
    client: &Client,
    buyers: &[Buyer],
    shows: &[u64],
) -> Result<(Vec<ClusterBooking>, BTreeMap<u64, Vec<u32>>), String> {
    let mut bookings = Vec::new();
    for buyer in buyers {
        let (sdk, token) = (buyer.client(), buyer.token());
        let known = buyer.known();
        let mut found: BTreeSet<(u64, u64)> = known.bookings.clone();
        let holds: BTreeSet<(u64, u64)> =
            known.holds.keys().chain(known.checkouts.keys()).copied().collect();
        for (show, hold) in holds {
            let what = format!("hold {show}-{hold}");
            let reply = retrying(&what, || sdk.get_hold(token, show, hold)).await;
            match reply {
                Ok(reply) if reply.booking_id != 0 => {
                    found.insert((show, reply.booking_id));
                }
                Ok(_) => {}
                // A hold whose creation the buyer saw as unknown may never have been made.
                Err(error) if rejected_with(&error, "hold_not_found") => {}
                Err(error) => return Err(format!("{what}: {error}")),
            }
        }
        for (show, booking) in found {
            let what = format!("booking {show}-{booking}");
            let reply = retrying(&what, || sdk.get_booking(token, show, booking))
                .await
                .map_err(|error| format!("{what}: {error}"))?;
            let state = match reply.state.as_str() {
                "confirmed" => BookingState::Confirmed,
                "cancelled" => BookingState::Cancelled,
                other => return Err(format!("{what}: unknown state {other:?}")),
            };
            bookings.push(ClusterBooking {
                booking_id: format!("{show}-{booking}"),
                show,
                payment_id: format!("{show}-{}", reply.payment_id),
                amount_minor: reply.price_minor,
                seats: reply.seats,
                state,
            });
        }
    }
    let mut booked_seats = BTreeMap::new();
    for &show in shows {
        let what = format!("seat map of show {show}");
        let map = retrying(&what, || client.get_seat_map_linearizable(show))
            .await
            .map_err(|error| format!("{what}: {error}"))?;
        let booked = (0..)
            .zip(map.seats())
            .filter(|(_, status)| *status == WireSeatStatus::Booked)
            .map(|(seat, _)| seat)
            .collect();
        booked_seats.insert(show, booked);
    }
    Ok((bookings, booked_seats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_listens_where_no_node_does() {
        assert_eq!(provider_address(7600).to_string(), "127.0.0.10:7600");
        assert_eq!(Paysim::url(provider_address(7800)), "http://127.0.0.10:7800");
    }

    #[test]
    fn faults_are_behaviours_paysim_accepts_and_keep_the_baseline() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut names = BTreeSet::new();
        for _ in 0..200 {
            let (name, behaviour) = draw_fault(&mut rng);
            names.insert(name);
            assert_eq!(behaviour["decline_ratio"], 0.1, "{name}: {behaviour}");
            let fields = behaviour.as_object().expect("an object");
            let known = [
                "decline_ratio",
                "timeout_ratio",
                "latency_ms",
                "webhook_delay_ms",
                "duplicate_ratio",
                "out_of_order_ratio",
                "webhook_before_reply",
                "outage",
            ];
            assert!(fields.keys().all(|field| known.contains(&field.as_str())), "{behaviour}");
            assert!(behaviour["latency_ms"].as_u64().is_none_or(|ms| ms <= 60_000));
        }
        assert_eq!(names.len(), 7, "{names:?}");
    }

    #[test]
    fn ids_name_their_show() {
        assert_eq!(parse_id("1010-42"), Some((1010, 42)));
        assert_eq!(parse_id("refund-1010-42"), None);
        assert_eq!(parse_id("1010"), None);
    }
}
