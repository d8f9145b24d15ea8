//! The outbox dispatcher against real HTTP sinks: a 3-node cluster started with three
//! `--sink`s served by this test process on loopback. `good` always takes what it gets; `flaky`
//! fails (503) until the test lets it recover; `dead` fails until the test revives it. Events
//! come from holds that expire (one `hold_expired` each) on two shows of one data group.
//!
//! Checked: every event reaches `good` while the other two fail, in order per show, signed
//! with the sink secret; `dead` is given up on after `--sink-attempts` failures and its events
//! are listed as dead letters, without slowing `good`; `flaky`, once it recovers, receives
//! every event at least once and in order per show; the leader killed mid-stream is replaced
//! by one that resumes from the replicated positions (every event still delivered, few
//! repeated); a replay of the dead letters, once `dead` is revived, delivers them and empties
//! the list; and at the end no sink has a backlog and the outbox is trimmed.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::Method;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use crate::options;
use crate::rest::{Api, OPERATOR_TOKEN, Report, Show, ensure};

/// The first show id of this file.
const SHOWS: u64 = 420;
/// The sink secret the nodes sign with.
const SINK_SECRET: &str = "process-test-sink-secret-0123456789abcdef";
/// Attempts before a batch is given up on: with backoffs of 100 ms doubling (less up to a
/// quarter), about 2.4-3.1 s of failures, longer than `flaky` fails and shorter than `dead`.
const ATTEMPTS: u32 = 6;

/// A sink served by this process: what it received, and whether it answers 200 or 503.
#[derive(Clone, Default)]
struct TestSink {
    inner: Arc<SinkInner>,
}

#[derive(Default)]
struct SinkInner {
    failing: AtomicBool,
    /// Every event received, in arrival order (repeats included).
    received: Mutex<Vec<Value>>,
    /// Requests whose signature did not verify.
    badly_signed: Mutex<u32>,
    /// Requests answered 503.
    refused: Mutex<u32>,
}

impl TestSink {
    /// Serves the sink on a free port of 127.0.0.1; returns its URL.
    async fn serve(&self) -> io::Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let app = Router::new().route("/events", post(take)).with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(format!("http://{address}/events"))
    }

    fn fail(&self, failing: bool) {
        self.inner.failing.store(failing, Ordering::SeqCst);
    }

    fn received(&self) -> Vec<Value> {
        self.inner.received.lock().unwrap().clone()
    }

    /// The ids of the events received, each once.
    fn ids(&self) -> BTreeSet<String> {
        self.received().iter().map(|event| event["id"].as_str().unwrap_or("?").to_owned()).collect()
    }

    fn badly_signed(&self) -> u32 {
        *self.inner.badly_signed.lock().unwrap()
    }

    fn refused(&self) -> u32 {
        *self.inner.refused.lock().unwrap()
    }
}

/// Checks the signature (`t=<s>,v1=<hex>` over `"<t>." + body`), then takes the batch (or
/// refuses it while failing).
async fn take(State(sink): State<TestSink>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let signature =
        headers.get(node::signature::SIGNATURE_HEADER).and_then(|value| value.to_str().ok());
    if !signed(signature.unwrap_or(""), &body) {
        *sink.inner.badly_signed.lock().unwrap() += 1;
        return StatusCode::UNAUTHORIZED;
    }
    if sink.inner.failing.load(Ordering::SeqCst) {
        *sink.inner.refused.lock().unwrap() += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let Ok(batch) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let events = batch["events"].as_array().cloned().unwrap_or_default();
    sink.inner.received.lock().unwrap().extend(events);
    StatusCode::OK
}

/// Whether `header` signs `body` under the sink secret, as the node's own check would verify
/// a payment webhook (the same scheme), against this machine's clock.
fn signed(header: &str, body: &[u8]) -> bool {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let tolerance_s = node::signature::TOLERANCE_S_DEFAULT;
    node::signature::verify(SINK_SECRET, Some(header), body, now_s, tolerance_s).is_ok()
}

/// Runs every scenario on one cluster delivering to three sinks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbox_reaches_every_sink() -> io::Result<()> {
    let (good, flaky, dead) = (TestSink::default(), TestSink::default(), TestSink::default());
    flaky.fail(true);
    dead.fail(true);
    let sinks = format!(
        "good={},flaky={},dead={}",
        good.serve().await?,
        flaky.serve().await?,
        dead.serve().await?
    );
    let mut options = options(3);
    options.sink_secret = Some(SINK_SECRET.to_owned());
    options
        .extra_args
        .extend(["--sink", &sinks, "--sink-attempts", &ATTEMPTS.to_string()].map(str::to_owned));
    let api = Api::start(options).await?;
    let mut report = Report::default();
    let run = Run { api: &api, good: &good, flaky: &flaky, dead: &dead };
    let shows = run.shows().await?;
    report.check("a_healthy_sink_gets_every_event_while_others_fail", run.healthy(&shows).await);
    // `flaky` recovers at once: it failed a few times, fewer than would give its events up.
    flaky.fail(false);
    report.check("a_dead_sink_is_dead_lettered", run.dead_lettered(&shows).await);
    report.check("a_recovered_sink_gets_everything_in_order", run.recovered(&shows).await);
    report.check("a_new_leader_resumes_delivery", run.new_leader(&shows).await);
    report.check("replayed_dead_letters_are_delivered", run.replayed(&shows).await);
    report.check("an_offer_is_delivered_and_timed", run.offer_delivered().await);
    report.check("nothing_is_left_behind", run.nothing_left(&shows).await);
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

struct Run<'a> {
    api: &'a Api,
    good: &'a TestSink,
    flaky: &'a TestSink,
    dead: &'a TestSink,
}

/// How long a delivery may take to show up.
const WAIT: Duration = Duration::from_secs(30);

impl Run<'_> {
    /// Two shows in data group 1 whose holds expire after a second.
    async fn shows(&self) -> io::Result<Vec<Show>> {
        let mut shows = Vec::new();
        for id in [SHOWS, SHOWS + 1] {
            let policy = json!({ "policy": { "hold_ttl_ms": 1_000 } });
            shows.push(self.api.create_show(id, 30, 1, policy).await?);
        }
        Ok(shows)
    }

    /// Makes `count` holds on each show (one seat each, from `first`), which then expire:
    /// one `hold_expired` event each. Returns the hold ids.
    async fn expiring_holds(
        &self,
        shows: &[Show],
        first: u32,
        count: u32,
    ) -> io::Result<BTreeSet<String>> {
        let mut holds = BTreeSet::new();
        for seat in first..first + count {
            for show in shows {
                let buyer = self.api.session().await?;
                let hold = self.api.hold_ok(show, &buyer, &[seat]).await?;
                holds.insert(hold["hold_id"].as_str().unwrap_or("?").to_owned());
            }
        }
        Ok(holds)
    }

    /// Waits until `sink` has received a `hold_expired` event for every hold of `holds`.
    async fn until_expired(&self, sink: &TestSink, holds: &BTreeSet<String>) -> io::Result<()> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let seen: BTreeSet<String> = sink
                .received()
                .iter()
                .filter(|event| event["type"] == "hold_expired")
                .filter_map(|event| event["hold_id"].as_str().map(str::to_owned))
                .collect();
            if holds.is_subset(&seen) {
                return Ok(());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "{} of {} expiries delivered within {WAIT:?}",
                holds.intersection(&seen).count(),
                holds.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `good` gets every event while `flaky` and `dead` fail; signed right, in order per show.
    async fn healthy(&self, shows: &[Show]) -> io::Result<()> {
        let holds = self.expiring_holds(shows, 0, 5).await?;
        self.until_expired(self.good, &holds).await?;
        ensure!(
            self.good.badly_signed() == 0,
            "good saw {} bad signatures",
            self.good.badly_signed()
        );
        ensure!(self.flaky.refused() > 0, "flaky was never tried");
        in_order_per_show(&self.good.received())
    }

    /// `dead` fails every attempt: its events are dead letters after `ATTEMPTS` tries each.
    async fn dead_lettered(&self, _shows: &[Show]) -> io::Result<()> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let letters = self.dead_letters("dead").await?;
            let expiries =
                letters.iter().filter(|letter| letter["event"]["type"] == "hold_expired").count();
            if expiries >= 10 {
                for letter in &letters {
                    ensure!(
                        letter["attempts"] == json!(ATTEMPTS),
                        "a letter after other than {ATTEMPTS} attempts: {letter}"
                    );
                    ensure!(letter["error"] == "HTTP 503", "{letter}");
                    ensure!(letter["replay"] == false, "{letter}");
                }
                return Ok(());
            }
            ensure!(tokio::time::Instant::now() < deadline, "{expiries} dead letters: {letters:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `flaky`, recovered, receives every event `good` has, in order per show.
    async fn recovered(&self, _shows: &[Show]) -> io::Result<()> {
        let expected = self.good.ids();
        let deadline = tokio::time::Instant::now() + WAIT;
        while !expected.is_subset(&self.flaky.ids()) {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "flaky has {} of {} events",
                self.flaky.ids().intersection(&expected).count(),
                expected.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        in_order_per_show(&self.flaky.received())
    }

    /// The group's leader is killed while `good` refuses, so its events are owed, not
    /// delivered; the next leader delivers them from the replicated positions once `good`
    /// takes them again, with what the old leader delivered but had not reported repeated.
    async fn new_leader(&self, shows: &[Show]) -> io::Result<()> {
        let leader = self.api.leader(1).await?;
        let before = self.good.received().len();
        let refused = self.good.refused();
        self.good.fail(true);
        let holds = self.expiring_holds(shows, 5, 4).await?;
        // The holds expire after a second; `good` refuses a try or two (fewer than give up).
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        self.api.cluster.kill(leader).await?;
        self.good.fail(false);
        ensure!(self.good.refused() > refused, "good was not tried while it refused");
        self.until_expired(self.good, &holds).await?;
        self.until_expired(self.flaky, &holds).await?;
        self.api.cluster.restart(leader).await?;
        let received = self.good.received();
        let mut seen: BTreeSet<&str> =
            received[..before].iter().filter_map(|event| event["id"].as_str()).collect();
        let new = &received[before..];
        let again =
            new.iter().filter(|event| !seen.insert(event["id"].as_str().unwrap_or("?"))).count();
        println!(
            "outbox: after the leader change, good received {} events, {again} again",
            new.len()
        );
        // The new leader starts from the replicated positions: what the old one delivered and
        // reported is not sent again, and it delivered nothing of these while `good` refused
        // (nor did the old leader once restarted: workers start only after a quorum confirms
        // the node leads).
        ensure!(
            again == 0,
            "{again} repeats: the new leader did not resume from the reported position"
        );
        in_order_per_show(&received)?;
        in_order_per_show(&self.flaky.received())
    }

    /// `dead` revives; a replay of its dead letters delivers them and empties the list.
    async fn replayed(&self, _shows: &[Show]) -> io::Result<()> {
        self.dead.fail(false);
        let letters = self.dead_letters("dead").await?;
        ensure!(!letters.is_empty(), "no dead letters to replay");
        let path = "/v1/outbox/groups/1/sinks/dead/replay";
        let answer = self
            .api
            .on(1, Method::POST, path)
            .token(OPERATOR_TOKEN)
            .key(&self.api.key("replay"))
            .json(&json!({}))
            .send()
            .await?;
        let marked = answer.expect(200)?["events"].as_u64().unwrap_or(0);
        ensure!(marked as usize == letters.len(), "{marked} marked of {}", letters.len());
        let wanted: BTreeSet<String> = letters
            .iter()
            .filter_map(|letter| letter["event"]["id"].as_str().map(str::to_owned))
            .collect();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let left = self.dead_letters("dead").await?;
            if left.is_empty() && wanted.is_subset(&self.dead.ids()) {
                return Ok(());
            }
            ensure!(tokio::time::Instant::now() < deadline, "still dead: {left:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// A waitlist offer reaches `good`, and the node that delivered it timed it from the offer
    /// being made (`booking_offer_delivery_latency_seconds`).
    async fn offer_delivered(&self) -> io::Result<()> {
        let waitlist = json!({ "waitlist": { "enabled": true } });
        let show = self.api.create_show(SHOWS + 2, 1, 1, waitlist).await?;
        let (holder, waiter) = (self.api.session().await?, self.api.session().await?);
        let hold = self.api.hold_ok(&show, &holder, &[0]).await?;
        let hold_id = hold["hold_id"].as_str().unwrap_or("?").to_owned();
        let join = format!("/v1/resources/{}/waitlist:join", show.id);
        let joined = self.api.to_leader(show.group, Method::POST, &join).await?;
        let joined = joined.token(&waiter).key(&self.api.key("join"));
        joined.json(&json!({ "quantity": 1 })).send().await?.expect(201)?;
        let cancel = format!("/v1/holds/{hold_id}");
        let cancel = self.api.to_leader(show.group, Method::DELETE, &cancel).await?;
        cancel.token(&holder).key(&self.api.key("cancel")).send().await?.expect(200)?;
        let deadline = tokio::time::Instant::now() + WAIT;
        let offered = |event: &Value| event["type"] == "offer_made" && event["show_id"] == show.id;
        while !self.good.received().iter().any(offered) {
            ensure!(tokio::time::Instant::now() < deadline, "no offer delivered within {WAIT:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let series = "booking_offer_delivery_latency_seconds_count{sink=\"good\"} ";
        let mut timed = 0;
        for node in 1..=3 {
            let metrics = self.api.on(node, Method::GET, "/metrics").send().await?;
            metrics.expect(200)?;
            for value in metrics.text.lines().filter_map(|line| line.strip_prefix(series)) {
                timed += value.trim().parse::<u64>().map_err(io::Error::other)?;
            }
        }
        ensure!(timed >= 1, "the delivered offer was not timed");
        Ok(())
    }

    /// Every sink caught up, and the group kept no event every sink had.
    async fn nothing_left(&self, _shows: &[Show]) -> io::Result<()> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let leader = self.api.leader(1).await?;
            let answer = self
                .api
                .on(leader, Method::GET, "/v1/outbox/sinks")
                .token(OPERATOR_TOKEN)
                .send()
                .await?;
            let sinks: Vec<Value> =
                answer.expect(200)?["sinks"].as_array().cloned().unwrap_or_default();
            let ours: Vec<&Value> = sinks.iter().filter(|sink| sink["group_id"] == 1).collect();
            let names: BTreeSet<&str> =
                ours.iter().filter_map(|sink| sink["sink"].as_str()).collect();
            ensure!(names == BTreeSet::from(["dead", "flaky", "good"]), "{sinks:?}");
            let idle = ours.iter().all(|sink| sink["backlog"] == 0 && sink["dead_letters"] == 0);
            let metrics = self.api.on(leader, Method::GET, "/metrics").send().await?;
            let trimmed = metrics.text.contains("booking_outbox_backlog{group=\"1\"} 0");
            if idle && trimmed {
                return Ok(());
            }
            ensure!(tokio::time::Instant::now() < deadline, "not idle: {ours:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn dead_letters(&self, sink: &str) -> io::Result<Vec<Value>> {
        let leader = self.api.leader(1).await?;
        let path = format!("/v1/outbox/dead-letters?sink={sink}&group_id=1");
        let answer = self.api.on(leader, Method::GET, &path).token(OPERATOR_TOKEN).send().await?;
        Ok(answer.expect(200)?["dead_letters"].as_array().cloned().unwrap_or_default())
    }
}

/// Checks every show's events arrived in order: the first arrival of each event, taken in
/// arrival order, has increasing numbers within its show.
fn in_order_per_show(received: &[Value]) -> io::Result<()> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for event in received {
        let id = event["id"].as_str().unwrap_or("?").to_owned();
        if !seen.insert(id.clone()) {
            continue;
        }
        let (show, seq) =
            (event["show_id"].as_u64().unwrap_or(0), event["seq"].as_u64().unwrap_or(0));
        if let Some(previous) = last.insert(show, seq) {
            ensure!(previous < seq, "show {show}: event {seq} arrived after {previous}");
        }
    }
    Ok(())
}
