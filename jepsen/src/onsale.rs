//! The on-sale driver: simulated buyers against a running cluster, through the `client` SDK,
//! with a payment provider: the real `paysim` process when one is given (`Plan::provider`),
//! which the cluster's nodes charge through (`bookingd --provider-url`) while buyers only check
//! out and wait; else each buyer posts the provider's signed webhook itself.
//!
//! Owns the buyer script (session → admission queue → grant → seat map → all-or-nothing hold
//! of 1-4 adjacent seats, retried on conflict → checkout → payment; sold-out buyers join the
//! waitlist and accept or decline its offers), the provider (succeeds, declines, or is never
//! paid: the hold expires and its seats go to the waitlist), the tally, and the end-of-run
//! checks that need no trust in the cluster's own answers: no seat in two confirmed bookings,
//! the seat map agrees with the confirmed bookings, and every replica has the same digest.
//! Never reaches into a node: everything goes through the public API.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use client::{Client, Error, NewShow, SeatStatus};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use testkit::webhook::{SIGNATURE_HEADER, sign, wall_clock_s};

/// What one run does.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The show to create (must not exist).
    pub show_id: u64,
    /// Seats in the show.
    pub seats: u32,
    /// Simulated buyers.
    pub buyers: u32,
    /// Buyers working at once (the rest arrive as others finish).
    pub concurrency: usize,
    /// Outstanding admission grants (the lane's window).
    pub window: u32,
    /// How long a hold keeps its seats (short, so abandoned holds feed the waitlist).
    pub hold_ttl_ms: u64,
    /// Percent of holders who never pay.
    pub abandon_percent: u32,
    /// Percent of payments the provider declines.
    pub decline_percent: u32,
    /// Percent of waitlist offers accepted.
    pub accept_percent: u32,
    /// Percent of confirmed bookings their buyer cancels at once (with a provider: refunded by
    /// the group leader, which the buyer waits to see).
    pub cancel_percent: u32,
    /// The seed of every random choice.
    pub seed: u64,
    /// The longest the buyers may run before the driver stops waiting for them.
    pub time_limit: Duration,
    /// The secret the provider signs webhooks with (the nodes' `--webhook-secret`).
    pub webhook_secret: String,
    /// The payment provider (`paysim`'s base URL) the cluster's nodes charge through: buyers
    /// check out and wait for their holds to settle. Without one, each buyer posts the
    /// provider's webhook itself.
    pub provider: Option<String>,
    /// The operator token for creating the show, if the cluster has one.
    pub operator_token: Option<String>,
}

/// What happened, counted by the driver from the answers it got.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Hold attempts.
    pub hold_attempts: u64,
    /// Holds refused because a seat was taken.
    pub conflicts: u64,
    /// Holds acknowledged.
    pub holds: u64,
    /// Holds left to expire.
    pub abandoned: u64,
    /// Payments the provider declined.
    pub declined: u64,
    /// Bookings confirmed and kept, with their seats.
    pub bookings: Vec<(u64, Vec<u32>)>,
    /// Bookings confirmed, then cancelled by their buyer.
    pub cancelled: u64,
    /// Of those, the ones whose payment the buyer saw refunded.
    pub refunded: u64,
    /// Buyers who joined the waitlist.
    pub waitlist_joins: u64,
    /// Offers buyers received.
    pub offers: u64,
    /// Offers accepted.
    pub offers_accepted: u64,
    /// Buyers who gave up (no grant, sold out and no offer, or an error).
    pub gave_up: u64,
    /// Calls that failed for other reasons, by code.
    pub errors: BTreeMap<String, u64>,
    /// The first such failure of each code, in words (what an operator reads first).
    pub first_errors: BTreeMap<String, String>,
}

/// The run's result.
pub struct Report {
    /// The counts.
    pub tally: Tally,
    /// Hold call latencies, µs.
    pub hold_latency: Histogram<u64>,
    /// How long the buyers ran.
    pub elapsed: Duration,
    /// Buyers that had not finished when the time limit passed.
    pub unfinished: u64,
}

/// Why a run could not be made or checked.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The cluster refused or failed a setup call.
    #[error("{0}")]
    Client(#[from] Error),
    /// An end-of-run check failed: the cluster broke a promise.
    #[error("check failed: {0}")]
    Check(String),
}

struct Shared {
    client: Client,
    http: reqwest::Client,
    nodes: Vec<String>,
    plan: Plan,
    tally: Mutex<Tally>,
    latency: Mutex<Histogram<u64>>,
}

impl Shared {
    fn tally(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn error(&self, error: &Error) {
        let code = error.booking_code().unwrap_or("transport").to_owned();
        let mut tally = self.tally();
        tally.first_errors.entry(code.clone()).or_insert_with(|| error.to_string());
        *tally.errors.entry(code).or_insert(0) += 1;
    }
}

/// Sets the payment provider's decline ratio to `decline_percent` (`PUT /control`, every other
/// behaviour at its default).
///
/// # Errors
///
/// The provider did not answer, or refused the setting.
pub async fn configure_provider(provider: &str, decline_percent: u32) -> Result<(), String> {
    let behaviour = serde_json::json!({ "decline_ratio": f64::from(decline_percent) / 100.0 });
    let response = reqwest::Client::new()
        .put(format!("{provider}/control"))
        .json(&behaviour)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|error| error.to_string())?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!("{}: {}", response.status(), response.text().await.unwrap_or_default()))
    }
}

/// Creates the show (admission and waitlist on, sales open).
///
/// # Errors
///
/// The cluster's refusal.
pub async fn create_show(client: &Client, plan: &Plan) -> Result<u64, RunError> {
    let mut show = NewShow::uniform(plan.show_id, plan.seats, 4_500, "EUR");
    show.hold_ttl_ms = plan.hold_ttl_ms;
    show.admission_window = Some(plan.window);
    show.waitlist = true;
    show.open_sales = true;
    let placement = client.create_show(&show, None).await?;
    Ok(placement.group_id)
}

/// Runs `plan.buyers` buyers against the show, calling `progress(done, sold)` as they finish.
/// Webhooks (without a provider) go to `nodes` (base URLs, `https://host:port`) through `http`.
pub async fn run(
    client: Client,
    http: reqwest::Client,
    nodes: Vec<String>,
    plan: Plan,
    progress: impl Fn(u64, u64) + Send + Sync + 'static,
) -> Report {
    let shared = Arc::new(Shared {
        client,
        http,
        nodes,
        plan: plan.clone(),
        tally: Mutex::new(Tally::default()),
        latency: Mutex::new(Histogram::new(3).expect("3 significant digits are valid")),
    });
    let started = Instant::now();
    let progress = Arc::new(progress);
    let semaphore = Arc::new(tokio::sync::Semaphore::new(plan.concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    for buyer in 0..plan.buyers {
        let permit = semaphore.clone().acquire_owned().await.expect("the semaphore stays open");
        let (shared, progress, done) = (shared.clone(), progress.clone(), done.clone());
        tasks.spawn(async move {
            let mut rng = StdRng::seed_from_u64(plan.seed ^ (u64::from(buyer) << 20));
            buy(&shared, &mut rng).await;
            drop(permit);
            let finished = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let sold: u64 =
                shared.tally().bookings.iter().map(|(_, seats)| seats.len() as u64).sum();
            progress(finished, sold);
        });
        if started.elapsed() > plan.time_limit {
            break;
        }
    }
    let deadline = tokio::time::Instant::now() + plan.time_limit.saturating_sub(started.elapsed());
    while let Ok(Some(_)) = tokio::time::timeout_at(deadline, tasks.join_next()).await {}
    let unfinished = tasks.len() as u64;
    tasks.abort_all();
    let tally = shared.tally().clone();
    let hold_latency = shared.latency.lock().unwrap_or_else(PoisonError::into_inner).clone();
    Report { tally, hold_latency, elapsed: started.elapsed(), unfinished }
}

/// One buyer, start to finish.
async fn buy(shared: &Shared, rng: &mut StdRng) {
    let plan = &shared.plan;
    let client = &shared.client;
    let Ok(token) = client.create_session().await else {
        shared.tally().gave_up += 1;
        return;
    };
    let want: u32 = rng.gen_range(1..=4);
    // The waiting room: join, then wait for the grant (or for the sale to end).
    let ticket = match client.join_queue(&token, plan.show_id, None).await {
        Ok(ticket) => ticket,
        Err(error) => {
            shared.error(&error);
            shared.tally().gave_up += 1;
            return;
        }
    };
    let mut state = ticket.state.clone();
    while state == "waiting" {
        tokio::time::sleep(Duration::from_millis(200)).await;
        match client.get_ticket(&token, plan.show_id, ticket.ticket_id).await {
            Ok(ticket) => state = ticket.state,
            Err(error) => {
                shared.error(&error);
                break;
            }
        }
    }
    if state != "granted" {
        shared.tally().gave_up += 1;
        return;
    }
    // Granted: pick seats from a (possibly stale) seat map, hold all or nothing, retry on
    // conflict with a fresh map.
    for _attempt in 0..5 {
        let map = match client.get_seat_map(plan.show_id).await {
            Ok(map) => map,
            Err(error) => {
                shared.error(&error);
                break;
            }
        };
        let free: Vec<u32> = map
            .seats
            .iter()
            .enumerate()
            .filter(|(_, status)| **status == SeatStatus::Free as i32)
            .map(|(seat, _)| seat as u32)
            .collect();
        let Some(seats) = pick(&free, want, rng) else {
            // Sold out (as far as the map says): give the grant back and wait for an offer.
            let _ = client.leave_queue(&token, plan.show_id, ticket.ticket_id, None).await;
            waitlist(shared, rng, &token, want).await;
            return;
        };
        shared.tally().hold_attempts += 1;
        let began = Instant::now();
        let held = client
            .hold_with_grant(
                &token,
                plan.show_id,
                &seats,
                map.price_version,
                ticket.ticket_id,
                None,
            )
            .await;
        record_latency(shared, began);
        match held {
            Ok(hold) => {
                shared.tally().holds += 1;
                pay(shared, rng, &token, hold.hold_id, hold.seats).await;
                return;
            }
            Err(error) if error.booking_code() == Some("seat_unavailable") => {
                shared.tally().conflicts += 1;
            }
            Err(error) => {
                shared.error(&error);
                break;
            }
        }
    }
    shared.tally().gave_up += 1;
}

/// `count` adjacent free seats, as near the front as a buyer would try (a random pick among the
/// first few runs), or any `count` free seats when no run is long enough.
fn pick(free: &[u32], count: u32, rng: &mut StdRng) -> Option<Vec<u32>> {
    let count = count as usize;
    if free.len() < count {
        return None;
    }
    let runs: Vec<usize> = (0..=free.len() - count)
        .filter(|&start| free[start + count - 1] - free[start] == count as u32 - 1)
        .collect();
    let start = match runs.len() {
        0 => return Some(free[..count].to_vec()),
        runs_len => runs[rng.gen_range(0..runs_len.min(8))],
    };
    Some(free[start..start + count].to_vec())
}

fn record_latency(shared: &Shared, began: Instant) {
    let micros = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
    let _ = shared.latency.lock().unwrap_or_else(PoisonError::into_inner).record(micros.max(1));
}

/// Pays for a hold (or abandons it), through checkout and the simulated provider.
async fn pay(shared: &Shared, rng: &mut StdRng, token: &str, hold_id: u64, seats: Vec<u32>) {
    let plan = &shared.plan;
    if rng.gen_range(0..100) < plan.abandon_percent {
        shared.tally().abandoned += 1;
        return;
    }
    let checkout = match shared.client.checkout(token, plan.show_id, hold_id, None).await {
        Ok(checkout) => checkout,
        Err(error) => {
            shared.error(&error);
            return;
        }
    };
    if plan.provider.is_some() {
        // The cluster's payment worker charges the attempt through the provider; the buyer
        // only waits for the hold to settle.
        match settled(shared, token, hold_id).await {
            Some((state, booking)) if state == "confirmed" => {
                if rng.gen_range(0..100) < plan.cancel_percent {
                    cancel(shared, token, booking, checkout.payment_id).await;
                } else {
                    shared.tally().bookings.push((booking, seats));
                }
            }
            // A decline gives the hold back; this buyer gives up and lets it expire.
            Some((state, _)) if state == "held" => shared.tally().declined += 1,
            Some((state, _)) => {
                *shared.tally().errors.entry(format!("settled {state}")).or_insert(0) += 1;
            }
            None => *shared.tally().errors.entry("not settled".into()).or_insert(0) += 1,
        }
        return;
    }
    let declined = rng.gen_range(0..100) < plan.decline_percent;
    let event_id = format!("evt-{}-{}-{}", plan.show_id, checkout.payment_id, rng.r#gen::<u64>());
    let body = if declined {
        serde_json::json!({
            "event_id": event_id,
            "payment_id": format!("{}-{}", plan.show_id, checkout.payment_id),
            "result": "declined",
        })
    } else {
        serde_json::json!({
            "event_id": event_id,
            "payment_id": format!("{}-{}", plan.show_id, checkout.payment_id),
            "result": "succeeded",
            "amount_minor": checkout.amount_minor,
            "currency": checkout.currency,
        })
    };
    let answer = webhook(shared, rng, &body).await;
    match answer {
        Some(reply) if reply["effect"] == "confirmed" && !declined => {
            let booking = reply["booking_id"].as_str().unwrap_or_default();
            let booking = booking.rsplit('-').next().and_then(|id| id.parse().ok()).unwrap_or(0);
            shared.tally().bookings.push((booking, seats));
        }
        Some(_) if declined => shared.tally().declined += 1,
        Some(reply) => {
            let code = format!("webhook:{}", reply["effect"].as_str().unwrap_or("?"));
            *shared.tally().errors.entry(code).or_insert(0) += 1;
        }
        None => *shared.tally().errors.entry("webhook".into()).or_insert(0) += 1,
    }
}

/// Cancels a confirmed booking, then waits (at most 10 s) until its payment reads refunded:
/// the group leader's refund worker gives the money back through the provider.
async fn cancel(shared: &Shared, token: &str, booking: u64, payment: u64) {
    let show = shared.plan.show_id;
    if let Err(error) = shared.client.cancel_booking(token, show, booking, None).await {
        shared.error(&error);
        return;
    }
    shared.tally().cancelled += 1;
    for _attempt in 0..100 {
        match shared.client.get_payment(Some(token), show, payment).await {
            Ok(payment) if payment.state == "refunded" => {
                shared.tally().refunded += 1;
                return;
            }
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    *shared.tally().errors.entry("not refunded".into()).or_insert(0) += 1;
}

/// The state hold `hold_id` settled in once the cluster's payment worker recorded the
/// provider's answer, and its booking (0 unless confirmed), read through the SDK until it is no
/// longer processing (at most 10 s); `None` if it never settled.
async fn settled(shared: &Shared, token: &str, hold_id: u64) -> Option<(String, u64)> {
    for _attempt in 0..100 {
        match shared.client.get_hold(token, shared.plan.show_id, hold_id).await {
            Ok(hold) if hold.state != "processing" => return Some((hold.state, hold.booking_id)),
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    None
}

/// Posts a signed webhook to some node (any node forwards it to the leader); the node's JSON
/// answer, or `None` if no node accepted it.
async fn webhook(
    shared: &Shared,
    rng: &mut StdRng,
    body: &serde_json::Value,
) -> Option<serde_json::Value> {
    let bytes = serde_json::to_vec(body).expect("JSON values encode");
    for _attempt in 0..10 {
        // Signed again for every attempt, by the wall clock, as a provider signs each delivery.
        let signature = sign(&shared.plan.webhook_secret, wall_clock_s(), &bytes);
        let node = &shared.nodes[rng.gen_range(0..shared.nodes.len())];
        let sent = shared
            .http
            .post(format!("{node}/v1/payments/webhook"))
            .header("content-type", "application/json")
            .header(SIGNATURE_HEADER, &signature)
            .body(bytes.clone())
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => return response.json().await.ok(),
            // The same event again is a no-op, so retrying after an unknown outcome is safe.
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    None
}

/// A sold-out buyer: joins the waitlist and waits for an offer, then accepts (and pays) or
/// declines it.
async fn waitlist(shared: &Shared, rng: &mut StdRng, token: &str, want: u32) {
    let plan = &shared.plan;
    let client = &shared.client;
    let entry = match client.join_waitlist(token, plan.show_id, want, None).await {
        Ok(entry) => entry,
        Err(error) => {
            if error.booking_code() != Some("not_sold_out") {
                shared.error(&error);
            }
            shared.tally().gave_up += 1;
            return;
        }
    };
    shared.tally().waitlist_joins += 1;
    let waited = Instant::now();
    while waited.elapsed() < plan.time_limit / 4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let Ok(now) = client.get_waitlist_entry(token, plan.show_id, entry.entry_id).await else {
            continue;
        };
        let Some(offer) = now.offer.filter(|offer| offer.state == "open") else {
            if now.state != "waiting" && now.state != "offered" {
                break;
            }
            continue;
        };
        shared.tally().offers += 1;
        if rng.gen_range(0..100) >= plan.accept_percent {
            let _ = client.decline_offer(token, plan.show_id, offer.offer_id, None).await;
            break;
        }
        match client.accept_offer(token, plan.show_id, offer.offer_id, None).await {
            Ok(hold) => {
                shared.tally().offers_accepted += 1;
                pay(shared, rng, token, hold.hold_id, hold.seats).await;
            }
            Err(error) => shared.error(&error),
        }
        return;
    }
    let _ = client.leave_waitlist(token, plan.show_id, entry.entry_id, None).await;
    shared.tally().gave_up += 1;
}

/// The end-of-run checks, none of which trusts the cluster's own bookkeeping: no seat in two
/// confirmed bookings; every seat of a confirmed booking is booked in the seat map and the map
/// books no other seat (once holds in payment have settled); every replica of every group
/// reaches the same digest. Returns a line per check.
///
/// # Errors
///
/// [`RunError::Check`] naming the first broken promise.
pub async fn check(client: &Client, plan: &Plan, tally: &Tally) -> Result<Vec<String>, RunError> {
    let mut lines = Vec::new();
    let mut owner: BTreeMap<u32, u64> = BTreeMap::new();
    for (booking, seats) in &tally.bookings {
        for &seat in seats {
            if let Some(other) = owner.insert(seat, *booking) {
                return Err(RunError::Check(format!(
                    "seat {seat} is in bookings {other} and {booking}"
                )));
            }
        }
    }
    lines.push(format!("no seat in two confirmed bookings ({} seats sold)", owner.len()));
    // Linearizable: the answering replica must have applied every confirmed booking.
    let map = client.get_seat_map_linearizable(plan.show_id).await?;
    let booked: BTreeSet<u32> = map
        .seats
        .iter()
        .enumerate()
        .filter(|(_, status)| **status == SeatStatus::Booked as i32)
        .map(|(seat, _)| seat as u32)
        .collect();
    let confirmed: BTreeSet<u32> = owner.keys().copied().collect();
    if let Some(missing) = confirmed.difference(&booked).next() {
        return Err(RunError::Check(format!("confirmed seat {missing} is not booked in the map")));
    }
    let unknown: Vec<u32> = booked.difference(&confirmed).copied().collect();
    if unknown.is_empty() {
        lines.push("the seat map books exactly the confirmed seats".to_owned());
    } else {
        // A booking whose webhook answer was lost is booked but not in our tally: allowed, and
        // said.
        lines.push(format!(
            "the seat map books every confirmed seat, and {} more whose confirmation this \
             driver did not see",
            unknown.len()
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let statuses = client.cluster_status(true).await;
        let mut by_group: BTreeMap<u64, BTreeSet<(u64, String)>> = BTreeMap::new();
        for status in statuses.iter().filter_map(|node| node.result.as_ref().ok()) {
            for group in status.groups.iter().filter(|group| group.member) {
                by_group
                    .entry(group.group_id)
                    .or_default()
                    .insert((group.digest_index, group.digest.clone()));
            }
        }
        if by_group.values().all(|digests| digests.len() == 1) {
            lines.push(format!(
                "every replica of {} groups has the same state digest",
                by_group.len()
            ));
            return Ok(lines);
        }
        if Instant::now() > deadline {
            return Err(RunError::Check(format!("replicas differ after 30 s: {by_group:?}")));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buyers_pick_adjacent_free_seats_or_none() {
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(pick(&[3, 4, 5, 9], 3, &mut rng), Some(vec![3, 4, 5]));
        assert_eq!(pick(&[1, 3, 5], 2, &mut rng), Some(vec![1, 3]));
        assert_eq!(pick(&[1], 2, &mut rng), None);
    }
}
