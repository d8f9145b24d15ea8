//! The simulated payment provider (`paysim`, a real process with its ledger on disk) against a
//! real 3-node cluster: a charge under the payment attempt's id charges once however often it
//! is asked, and its signed webhook books the hold once; a refund refunds once and never more
//! than was charged; a decline gives the hold back; an outage charges nothing; bad input is
//! refused and changes nothing; the ledger survives `kill -9`; with node 1 killed, webhooks
//! still arrive through another node; a genuine webhook replayed after the tolerance is refused
//! and changes nothing.
//!
//! This cluster has no `--provider-url`, so no payment worker: the test calls the charge as the
//! worker does (with the attempt id as the idempotency key), and the webhooks book. The worker
//! itself is `payments.rs`.

use std::io;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use testkit::webhook::{SIGNATURE_HEADER, sign, wall_clock_s};

use crate::options;
use crate::rest::{Api, Report, Show, WEBHOOK_SECRET, ensure, string_field};

/// The first show id of this file.
const SHOWS: u64 = 340;
/// How long paysim may take to say it listens.
const START_MAX: Duration = Duration::from_secs(10);
/// How long a webhook may take to book a hold.
const BOOKED_MAX: Duration = Duration::from_secs(10);

/// A running paysim: killed (SIGKILL) when dropped.
pub struct Paysim {
    child: Child,
    address: String,
}

impl Paysim {
    /// Starts paysim on a free port with its ledger in `dir`, sending webhooks to any node.
    pub async fn start(api: &Api, dir: &Path, extra: &[&str]) -> io::Result<Paysim> {
        Paysim::start_on(api, dir, "127.0.0.1:0", extra).await
    }

    /// A cluster of `nodes` nodes (with `Api::start`'s credentials) that charges through a
    /// real paysim, and the directory of paysim's ledger (kept while it lives). The provider's
    /// port is chosen before the nodes start, since they are told it.
    ///
    /// # Errors
    ///
    /// When the cluster or paysim does not start.
    pub async fn with_cluster(nodes: u64) -> io::Result<(Api, Paysim, tempfile::TempDir)> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let listen = format!("127.0.0.1:{port}");
        let mut options = options(nodes);
        options.extra_args.extend(["--provider-url".to_owned(), format!("http://{listen}")]);
        let api = Api::start(options).await?;
        let ledger = tempfile::tempdir()?;
        let paysim = Paysim::start_on(&api, ledger.path(), &listen, &[]).await?;
        Ok((api, paysim, ledger))
    }

    /// Starts paysim on `listen` with its ledger in `dir`, sending webhooks to any node: every
    /// node's webhook URL is given, node 1's first, as `cluster.sh` gives them.
    pub async fn start_on(
        api: &Api,
        dir: &Path,
        listen: &str,
        extra: &[&str],
    ) -> io::Result<Paysim> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_paysim"));
        command.args(["--listen", listen, "--data-dir"]).arg(dir);
        for id in api.cluster.node_ids() {
            command.args(["--webhook-url", &api.cluster.url(id, "/v1/payments/webhook")?]);
        }
        command.arg("--webhook-ca-file").arg(api.cluster.ca_file()?);
        let mut child = command
            .args(extra)
            .env("PAYSIM_WEBHOOK_SECRET", WEBHOOK_SECRET)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(START_MAX, lines.next_line())
            .await
            .map_err(|_| io::Error::other("paysim did not say it listens"))??
            .ok_or_else(|| io::Error::other("paysim exited before listening"))?;
        let address = line
            .strip_prefix("paysim listening=")
            .ok_or_else(|| io::Error::other(format!("paysim said {line:?}")))?
            .to_owned();
        Ok(Paysim { child, address })
    }

    /// A call to paysim.
    pub async fn call(
        &self,
        api: &Api,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> io::Result<(u16, Value)> {
        let mut call = api.http.plain().call(method, &self.address, path);
        if let Some(body) = body {
            call = call.json(body);
        }
        let answer = call.send_once().await?;
        Ok((answer.status, answer.body.clone()))
    }

    /// A keyed POST to paysim.
    async fn post(
        &self,
        api: &Api,
        path: &str,
        key: &str,
        body: &Value,
    ) -> io::Result<(u16, Value)> {
        let answer = api
            .http
            .plain()
            .call(Method::POST, &self.address, path)
            .key(key)
            .json(body)
            .send_once()
            .await?;
        Ok((answer.status, answer.body.clone()))
    }

    /// Every record of the ledger.
    pub async fn ledger(&self, api: &Api) -> io::Result<Vec<Value>> {
        let (status, body) = self.call(api, Method::GET, "/ledger", None).await?;
        ensure!(status == 200, "ledger: {status} {body}");
        Ok(body["records"].as_array().cloned().unwrap_or_default())
    }

    /// Sets the behaviour.
    pub async fn control(&self, api: &Api, behaviour: &Value) -> io::Result<()> {
        let (status, body) = self.call(api, Method::PUT, "/control", Some(behaviour)).await?;
        ensure!(status == 200, "control: {status} {body}");
        Ok(())
    }

    /// Kills it (SIGKILL) and reaps it.
    pub async fn kill(mut self) -> io::Result<()> {
        self.child.kill().await
    }
}

/// Runs every paysim scenario on one cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paysim_against_a_real_cluster() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let dir = tempfile::tempdir()?;
    let mut report = Report::default();
    report.check(
        "a_charge_charges_once_and_its_webhook_books_the_hold",
        a_charge_charges_once_and_its_webhook_books_the_hold(&api, &dir.path().join("a")).await,
    );
    report.check(
        "declines_outages_and_bad_input_charge_nothing",
        declines_outages_and_bad_input_charge_nothing(&api, &dir.path().join("b")).await,
    );
    report.check(
        "a_webhook_replayed_after_the_tolerance_is_refused",
        a_webhook_replayed_after_the_tolerance_is_refused(&api).await,
    );
    // Last: it kills node 1 (and starts it again at the end).
    report.check(
        "webhooks_reach_another_node_while_node_1_is_down",
        webhooks_reach_another_node_while_node_1_is_down(&api, &dir.path().join("c")).await,
    );
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// The state of hold `hold_id`, read on its group's leader, once it is not `processing` or
/// after [`BOOKED_MAX`].
pub async fn settled_hold(api: &Api, show: &Show, token: &str, hold_id: &str) -> io::Result<Value> {
    let deadline = tokio::time::Instant::now() + BOOKED_MAX;
    loop {
        let answer = api
            .to_leader(show.group, Method::GET, &format!("/v1/holds/{hold_id}"))
            .await?
            .token(token)
            .send()
            .await?;
        let hold = answer.expect(200)?.clone();
        if hold["state"] != "processing" || tokio::time::Instant::now() >= deadline {
            return Ok(hold);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The charges of a ledger.
pub fn charges(ledger: &[Value]) -> Vec<&Value> {
    ledger.iter().filter(|record| record["kind"] == "charge").collect()
}

/// Checkout, then the charge under the attempt id, three times: one charge in the ledger, the
/// later calls `replayed`; its webhook (delivered twice, and followed by a stale `unknown`)
/// books the hold once. A refund under one key, twice: one refund; more than is left is
/// refused. After `kill -9` and a restart on the same folder the ledger is the same and the
/// same key still charges nothing.
async fn a_charge_charges_once_and_its_webhook_books_the_hold(
    api: &Api,
    dir: &Path,
) -> io::Result<()> {
    let paysim =
        Paysim::start(api, dir, &["--duplicate-ratio", "1", "--out-of-order-ratio", "1"]).await?;
    let show = api.create_show(SHOWS, 20, 1, json!({})).await?;
    let (buyer, hold_id, checkout) = api.checked_out(&show, &[2, 3]).await?;
    let payment_id = string_field(&checkout, "payment_id")?;
    let charge = json!({
        "payment_id": payment_id,
        "amount_minor": checkout["amount"]["amount_minor"],
        "currency": checkout["amount"]["currency"],
    });
    let mut ids = Vec::new();
    for attempt in 0..3 {
        let (status, body) = paysim.post(api, "/v1/charges", &payment_id, &charge).await?;
        ensure!(status == 200 && body["status"] == "succeeded", "charge: {status} {body}");
        ensure!(body["replayed"] == (attempt > 0), "attempt {attempt}: {body}");
        ids.push(string_field(&body, "id")?);
    }
    ensure!(ids.iter().all(|id| *id == ids[0]), "one charge: {ids:?}");
    let other = json!({ "payment_id": payment_id, "amount_minor": 1, "currency": "EUR" });
    let (status, body) = paysim.post(api, "/v1/charges", &payment_id, &other).await?;
    ensure!(status == 409 && body["code"] == "idempotency_key_reused", "{status} {body}");

    let hold = settled_hold(api, &show, &buyer, &hold_id).await?;
    ensure!(hold["state"] == "confirmed", "the webhook booked the hold: {hold}");
    let states = api.seat_states(&show).await?;
    ensure!(states.values().filter(|state| *state == "booked").count() == 2, "{states:?}");
    let deadline = tokio::time::Instant::now() + BOOKED_MAX;
    let deliveries = loop {
        let (_, deliveries) = paysim.call(api, Method::GET, "/webhooks", None).await?;
        let deliveries = deliveries.as_array().cloned().unwrap_or_default();
        if deliveries.len() >= 3 || tokio::time::Instant::now() >= deadline {
            break deliveries;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    ensure!(deliveries.len() == 3, "the event twice and a stale unknown: {deliveries:?}");
    ensure!(deliveries.iter().all(|d| d["delivered"] == true), "{deliveries:?}");
    ensure!(deliveries[0]["event"] == deliveries[1]["event"], "{deliveries:?}");
    ensure!(deliveries[2]["event"]["result"] == "unknown", "{deliveries:?}");
    let hold = settled_hold(api, &show, &buyer, &hold_id).await?;
    ensure!(hold["state"] == "confirmed", "a stale unknown changed nothing: {hold}");

    let refund = json!({ "charge_id": ids[0], "amount_minor": 500 });
    let (first, body) = paysim.post(api, "/v1/refunds", "refund-1", &refund).await?;
    ensure!(first == 200 && body["replayed"] == false, "{first} {body}");
    let (again, body) = paysim.post(api, "/v1/refunds", "refund-1", &refund).await?;
    ensure!(again == 200 && body["replayed"] == true, "{again} {body}");
    let too_much = json!({ "charge_id": ids[0], "amount_minor": 1_501 });
    let (status, body) = paysim.post(api, "/v1/refunds", "refund-2", &too_much).await?;
    ensure!(status == 409 && body["code"] == "exceeds_charge", "{status} {body}");

    let before = paysim.ledger(api).await?;
    ensure!(charges(&before).len() == 1, "{before:?}");
    ensure!(before.iter().filter(|r| r["kind"] == "refund").count() == 1, "{before:?}");
    paysim.kill().await?;
    let paysim = Paysim::start(api, dir, &[]).await?;
    let after = paysim.ledger(api).await?;
    ensure!(after == before, "the ledger survived kill -9: {before:?} -> {after:?}");
    let (status, body) = paysim.post(api, "/v1/charges", &payment_id, &charge).await?;
    ensure!(status == 200 && body["replayed"] == true, "{status} {body}");
    ensure!(charges(&paysim.ledger(api).await?).len() == 1, "no second charge after restart");
    paysim.kill().await
}

/// A declined charge's webhook gives the hold back (`held`); during an outage a charge is 503
/// and recorded nowhere; a charge without a key, with an unknown field or a zero amount, and a
/// behaviour out of range are 400 and change nothing.
async fn declines_outages_and_bad_input_charge_nothing(api: &Api, dir: &Path) -> io::Result<()> {
    let paysim = Paysim::start(api, dir, &["--decline-ratio", "1"]).await?;
    let show = api.create_show(SHOWS + 1, 20, 2, json!({})).await?;
    let (buyer, hold_id, checkout) = api.checked_out(&show, &[7]).await?;
    let payment_id = string_field(&checkout, "payment_id")?;
    let charge = json!({
        "payment_id": payment_id,
        "amount_minor": checkout["amount"]["amount_minor"],
        "currency": checkout["amount"]["currency"],
    });
    let (status, body) = paysim.post(api, "/v1/charges", &payment_id, &charge).await?;
    ensure!(status == 200 && body["status"] == "declined", "{status} {body}");
    let hold = settled_hold(api, &show, &buyer, &hold_id).await?;
    ensure!(hold["state"] == "held", "a decline gives the hold back: {hold}");

    paysim.control(api, &json!({ "outage": true })).await?;
    let (status, body) = paysim.post(api, "/v1/charges", "during-outage", &charge).await?;
    ensure!(status == 503 && body["code"] == "outage", "{status} {body}");
    paysim.control(api, &json!({})).await?;

    let bad = [
        json!({ "payment_id": payment_id, "amount_minor": 0, "currency": "EUR" }),
        json!({ "payment_id": payment_id, "amount_minor": 5, "currency": "eur" }),
        json!({ "payment_id": payment_id, "amount_minor": 5, "currency": "EUR", "tip": 1 }),
    ];
    for body in &bad {
        let (status, answer) = paysim.post(api, "/v1/charges", "bad", body).await?;
        ensure!(status == 400 && answer["code"] == "invalid_argument", "{body}: {status} {answer}");
    }
    let (status, answer) = paysim.call(api, Method::POST, "/v1/charges", Some(&charge)).await?;
    ensure!(status == 400, "no Idempotency-Key: {status} {answer}");
    let (status, answer) =
        paysim.call(api, Method::PUT, "/control", Some(&json!({ "decline_ratio": 2 }))).await?;
    ensure!(status == 400, "ratio out of range: {status} {answer}");
    let (_, behaviour) = paysim.call(api, Method::GET, "/control", None).await?;
    ensure!(behaviour["decline_ratio"] == 0.0, "the refused change changed nothing: {behaviour}");

    let ledger = paysim.ledger(api).await?;
    ensure!(charges(&ledger).len() == 1, "only the declined charge: {ledger:?}");
    paysim.kill().await
}

/// The webhook URL of node `id`, as paysim is given it.
fn webhook_url(api: &Api, id: u64) -> io::Result<String> {
    Ok(api.cluster.url(id, "/v1/payments/webhook")?)
}

/// A genuine `succeeded` webhook for a checkout, signed under the right secret but 10 minutes
/// ago (as a captured delivery replayed later would be), is refused by every node with 401
/// `unauthenticated` whose message names the tolerance, and changes nothing: the hold stays
/// `processing`, its seats held. The same body signed now books it.
///
/// Reference: Stripe's replay protection (a signed timestamp checked against a tolerance).
async fn a_webhook_replayed_after_the_tolerance_is_refused(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 2, 20, 1, json!({})).await?;
    let (buyer, hold_id, checkout) = api.checked_out(&show, &[4, 5]).await?;
    let body = json!({
        "event_id": api.key("evt"),
        "payment_id": string_field(&checkout, "payment_id")?,
        "result": "succeeded",
        "amount_minor": checkout["amount"]["amount_minor"],
        "currency": checkout["amount"]["currency"],
    })
    .to_string();
    let post = |node: u64, signature: String| {
        api.on(node, Method::POST, "/v1/payments/webhook")
            .header(SIGNATURE_HEADER, &signature)
            .raw(body.clone().into_bytes())
    };
    let seats_before = api.seat_states(&show).await?;
    let ten_minutes_ago = sign(WEBHOOK_SECRET, wall_clock_s() - 600, body.as_bytes());
    for node in [1, 2, 3] {
        let answer = post(node, ten_minutes_ago.clone()).send_once().await?;
        answer.expect_error(401, "unauthenticated")?;
        let message = answer.body["message"].as_str().unwrap_or("");
        ensure!(message.contains("outside the tolerance"), "{}", answer.describe());
    }
    let answer = api
        .to_leader(show.group, Method::GET, &format!("/v1/holds/{hold_id}"))
        .await?
        .token(&buyer)
        .send()
        .await?;
    let hold = answer.expect(200)?;
    ensure!(hold["state"] == "processing", "the replay changed nothing: {hold}");
    let seats_after = api.seat_states(&show).await?;
    ensure!(seats_after == seats_before, "{seats_before:?} -> {seats_after:?}");

    let fresh = sign(WEBHOOK_SECRET, wall_clock_s(), body.as_bytes());
    let answer = post(1, fresh).send().await?;
    ensure!(answer.expect(200)?["effect"] == "confirmed", "{}", answer.describe());
    Ok(())
}

/// paysim is given every node's webhook URL (node 1's first). With node 1 killed, a charge's
/// webhook is still delivered, through another node, and books the hold: the delivery's first
/// request went to node 1 (the first delivery of a fresh paysim starts at the first URL), found
/// nobody, and moved on at once. Node 1 is started again afterwards.
async fn webhooks_reach_another_node_while_node_1_is_down(api: &Api, dir: &Path) -> io::Result<()> {
    let paysim = Paysim::start(api, dir, &["--webhook-attempts", "20"]).await?;
    let show = api.create_show(SHOWS + 3, 20, 2, json!({})).await?;
    // The session and the checkout are made on node 1 before it goes down.
    let (buyer, hold_id, checkout) = api.checked_out(&show, &[6]).await?;
    let payment_id = string_field(&checkout, "payment_id")?;
    api.cluster.kill(1).await?;
    let charge = json!({
        "payment_id": payment_id,
        "amount_minor": checkout["amount"]["amount_minor"],
        "currency": checkout["amount"]["currency"],
    });
    let (status, body) = paysim.post(api, "/v1/charges", &payment_id, &charge).await?;
    ensure!(status == 200 && body["status"] == "succeeded", "charge: {status} {body}");
    let hold = settled_hold(api, &show, &buyer, &hold_id).await?;
    ensure!(hold["state"] == "confirmed", "the webhook booked the hold without node 1: {hold}");

    let (_, deliveries) = paysim.call(api, Method::GET, "/webhooks", None).await?;
    let deliveries = deliveries.as_array().cloned().unwrap_or_default();
    ensure!(deliveries.len() == 1, "one delivery: {deliveries:?}");
    let delivery = &deliveries[0];
    let node_1 = webhook_url(api, 1)?;
    let others = [webhook_url(api, 2)?, webhook_url(api, 3)?];
    ensure!(delivery["delivered"] == true && delivery["status"] == 200, "{delivery}");
    ensure!(others.iter().any(|url| delivery["url"] == url.as_str()), "{delivery} {others:?}");
    ensure!(delivery["url"] != node_1.as_str(), "{delivery}");
    ensure!(delivery["requests"].as_u64().unwrap_or(0) >= 2, "node 1 was tried first: {delivery}");
    paysim.kill().await?;
    api.cluster.restart(1).await?;
    Ok(())
}
