//! End-to-end tests through the Rust SDK (the `client` crate) against a real 3-node cluster, and
//! the fixture the `sdk_*` tests share: a cluster started with an operator credential and a
//! webhook secret, an SDK client of every node holding the operator token, buyer sessions, and
//! payment outcomes delivered as the provider would, by a signed `POST /v1/payments/webhook`
//! (the only HTTP these tests speak: the SDK has no call for it, a provider makes it).
//!
//! This file checks a buyer's whole journey: admission (window 1: strict FIFO), a hold that
//! consumes its grant, checkout, the signed webhook, the confirmed hold, its booking and the seat
//! map, and the next buyer in line granted when the first grant is consumed, seen through a
//! status watch. `sdk_races.rs` checks the seed races, `sdk_routing.rs` leader hints and a dead
//! node, `sdk_errors.rs` the error codes.
//!
//! Reference: issue 4 "Tests that must exist" (end-to-end tests through the SDK) and "SDK and
//! CLI" (routes by show, follows leader hints, retries with the same idempotency key, typed
//! errors); the `statemachine` admission rules (a hold consumes its grant atomically; with a
//! window of 1 the next ticket is granted only then) and payment rules (success confirms a
//! processing hold); shared/DESIGN.md "Outside the state machine" (webhooks signed with
//! HMAC-SHA256 over the raw body).
//!
//! `crate::client` is these tests' own small gRPC client; the SDK is the `client` crate, so it
//! is always named `::client` here.

use std::fmt::Debug;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::client::{Client, Error, NewShow, SeatMapReply, SeatStatus, ShowPlacement, Watch};
use axum::http::Method;
use futures_util::StreamExt;
use serde_json::{Value, json};
use testkit::webhook::{SIGNATURE_HEADER, sign, wall_clock_s};
use testkit::{Cluster, ClusterOptions, NodeId, wait_for};
use tokio::time::Instant;
use tonic::Code;

use crate::rest::{Http, OPERATOR_TOKEN, WEBHOOK_SECRET, ensure};
use crate::{WAIT, options};

/// The first show id of this file.
const SHOWS: u64 = 900;

/// How long a status watch may take to report an expected change.
pub const WATCH_WAIT: Duration = Duration::from_secs(10);

/// The cluster of one `sdk*` test, and what its scenarios share.
pub struct Sdk {
    /// The cluster.
    pub cluster: Cluster,
    /// An SDK client of every node, with the operator token.
    pub client: Client,
    /// The HTTP client the provider's webhooks go through (https, trusting the cluster's CA).
    http: Http,
    /// Makes idempotency keys and event ids unique in the process.
    next: AtomicU64,
}

impl Sdk {
    /// The sum over every node and group of the `/metrics` counter of hold outcomes `outcome`
    /// (`held`, `seat_unavailable`, `other`), which gRPC holds record as REST holds do.
    ///
    /// # Errors
    ///
    /// When a node does not serve its metrics.
    pub async fn hold_outcomes(&self, outcome: &str) -> io::Result<u64> {
        let mut total = 0;
        for id in self.cluster.running() {
            let address = self.cluster.address(id)?;
            let answer = self.http.call(Method::GET, &address, "/metrics").send().await?;
            // booking_hold_outcomes_total{group="1",outcome="held"} 3
            let label = format!(",outcome=\"{outcome}\"}} ");
            for row in
                answer.text.lines().filter(|row| row.starts_with("booking_hold_outcomes_total{"))
            {
                if let Some((_, value)) = row.split_once(&label) {
                    total += value.trim().parse::<u64>().map_err(io::Error::other)?;
                }
            }
        }
        Ok(total)
    }

    /// Starts a cluster of three nodes with the operator credential [`OPERATOR_TOKEN`] and the
    /// webhook secret [`WEBHOOK_SECRET`], and an SDK client of every node.
    ///
    /// # Errors
    ///
    /// As [`crate::start`], or when the SDK refuses the addresses or the token.
    pub async fn start() -> io::Result<Sdk> {
        let options = ClusterOptions {
            operator_token: Some(OPERATOR_TOKEN.to_owned()),
            webhook_secret: Some(WEBHOOK_SECRET.to_owned()),
            ..options(3)
        };
        let cluster = crate::start(options).await?;
        let client = expect_ok("connect", Client::connect(cluster.addresses()))?;
        let client = cluster.trusting(client)?;
        let client = expect_ok("operator token", client.with_operator_token(OPERATOR_TOKEN))?;
        Ok(Sdk { http: Http::of(&cluster), cluster, client, next: AtomicU64::new(0) })
    }

    /// A buyer's SDK client (no operator token) of nodes `ids`, in that order: its first call
    /// goes to the first of them.
    ///
    /// # Errors
    ///
    /// When the SDK refuses the addresses.
    pub fn client_of(&self, ids: &[NodeId]) -> io::Result<Client> {
        let addresses = ids.iter().map(|&id| self.cluster.address(id)).collect::<Result<_, _>>()?;
        let client = expect_ok("connect", Client::connect(addresses))?;
        Ok(self.cluster.trusting(client)?)
    }

    /// A fresh idempotency key (or any unique name), never used before by this process.
    pub fn key(&self, what: &str) -> String {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        format!("sdk-{what}-{}-{number}", std::process::id())
    }

    /// A fresh guest session token.
    ///
    /// # Errors
    ///
    /// When the SDK gets none.
    pub async fn session(&self) -> io::Result<String> {
        expect_ok("create a session", self.client.create_session().await)
    }

    /// Creates `show` through the SDK as the operator, and returns where it was placed.
    ///
    /// # Errors
    ///
    /// When the SDK does not create it, or places it in another group than `show` asked for.
    pub async fn create_show(&self, show: &NewShow) -> io::Result<ShowPlacement> {
        let key = self.key("show");
        let placement =
            expect_ok("create a show", self.client.create_show(show, Some(&key)).await)?;
        ensure!(placement.show_id == show.show_id, "created another show: {placement:?}");
        ensure!(
            show.group_id == 0 || placement.group_id == show.group_id,
            "placed in another group: {placement:?}"
        );
        Ok(placement)
    }

    /// Sends the provider's signed `succeeded` webhook for payment `payment_id` of `show_id`
    /// (`amount_minor` EUR) to node `node` over HTTP(S), and returns the 200 answer's body.
    ///
    /// # Errors
    ///
    /// When the node does not answer 200.
    pub async fn pay(
        &self,
        node: NodeId,
        show_id: u64,
        payment_id: u64,
        amount_minor: u64,
    ) -> io::Result<Value> {
        let event = json!({
            "event_id": self.key("evt"),
            // The REST API names a payment `<show>-<payment>`, as it names every entity.
            "payment_id": format!("{show_id}-{payment_id}"),
            "result": "succeeded",
            "amount_minor": amount_minor,
            "currency": "EUR",
        });
        let body = event.to_string().into_bytes();
        let signature = sign(WEBHOOK_SECRET, wall_clock_s(), &body);
        let answer = self
            .http
            .call(Method::POST, &self.cluster.address(node)?, "/v1/payments/webhook")
            .header(SIGNATURE_HEADER, &signature)
            .raw(body)
            .send()
            .await?;
        Ok(answer.expect(200)?.clone())
    }

    /// The seat map of `show_id` from a replica that has applied log index `index` at least
    /// (the SDK reads seat maps from any replica): asked again until one has.
    ///
    /// # Errors
    ///
    /// When no replica answers with such a map within [`WAIT`].
    pub async fn seat_map_as_of(&self, show_id: u64, index: u64) -> io::Result<SeatMapReply> {
        wait_for(&format!("a seat map of show {show_id} as of {index}"), WAIT, async || {
            let map = expect_ok("get the seat map", self.client.get_seat_map(show_id).await)?;
            Ok(if map.as_of_log_index >= index {
                Ok(map)
            } else {
                Err(format!("as of {} only", map.as_of_log_index))
            })
        })
        .await
    }

    /// Shuts the cluster down if `result` is a success; otherwise keeps its files and prints
    /// the nodes' logs (by dropping it). Returns `result`.
    ///
    /// # Errors
    ///
    /// `result`'s error, or a node that crashed.
    pub async fn finish(self, result: io::Result<()>) -> io::Result<()> {
        if result.is_ok() {
            self.cluster.shutdown().await?;
        }
        result
    }
}

/// The value of an SDK call that must succeed.
///
/// # Errors
///
/// The SDK's error, naming the call.
pub fn expect_ok<T>(what: &str, result: Result<T, Error>) -> io::Result<T> {
    result.map_err(|error| io::Error::other(format!("{what}: {error} ({error:?})")))
}

/// Checks that an SDK call was rejected by a node ([`Error::Rejected`], not refused by the SDK
/// before sending) with gRPC code `status` and booking code `code` (the one error table of
/// `node/src/error.rs`), and returns the node's message.
///
/// # Errors
///
/// When the call succeeded or failed otherwise, naming the call and what it got.
pub fn expect_rejected<T: Debug>(
    what: &str,
    result: Result<T, Error>,
    status: Code,
    code: &str,
) -> io::Result<String> {
    match result {
        Err(Error::Rejected { status: got_status, code: got_code, message, .. })
            if got_status == status && got_code.name() == code =>
        {
            Ok(message)
        }
        other => Err(io::Error::other(format!(
            "{what}: expected a rejection {status:?}/{code}, got {other:?}"
        ))),
    }
}

/// Reads a status watch until an item satisfies `wanted`, for at most [`WATCH_WAIT`]; returns
/// it and every item before it.
///
/// # Errors
///
/// When the watch fails, ends, or reports no such item in time, with the items seen.
pub async fn watch_until<T: Debug>(
    what: &str,
    watch: &mut Watch<T>,
    wanted: impl Fn(&T) -> bool,
) -> io::Result<Vec<T>> {
    let deadline = Instant::now() + WATCH_WAIT;
    let mut seen = Vec::new();
    loop {
        let item = tokio::time::timeout_at(deadline, watch.next()).await.map_err(|_| {
            io::Error::other(format!("{what}: nothing wanted in {WATCH_WAIT:?}; seen {seen:?}"))
        })?;
        match item {
            Some(Ok(item)) => {
                let done = wanted(&item);
                seen.push(item);
                if done {
                    return Ok(seen);
                }
            }
            Some(Err(error)) => {
                return Err(io::Error::other(format!("{what}: {error}; seen {seen:?}")));
            }
            None => {
                return Err(io::Error::other(format!("{what}: the watch ended; seen {seen:?}")));
            }
        }
    }
}

/// Each seat's status of a seat map, seat 0 first (`Unspecified` for a value this build does
/// not know).
pub fn seat_statuses(map: &SeatMapReply) -> Vec<SeatStatus> {
    map.seats
        .iter()
        .map(|&raw| SeatStatus::try_from(raw).unwrap_or(SeatStatus::Unspecified))
        .collect()
}

/// The seats of a seat map in status `status`.
pub fn seats_in(map: &SeatMapReply, status: SeatStatus) -> Vec<u32> {
    (0u32..).zip(seat_statuses(map)).filter(|(_, s)| *s == status).map(|(seat, _)| seat).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_buyer_journey_from_queue_to_booking() -> io::Result<()> {
    let sdk = Sdk::start().await?;
    let result = buyer_journey_from_queue_to_booking(&sdk).await;
    sdk.finish(result).await
}

/// A show of 10 seats at 15.00 EUR with an admission lane of window 1 and a waitlist, on sale.
/// The first buyer's ticket is granted, the second waits and watches its ticket. The first holds
/// seats 3-4 with its grant (consuming it: the second is granted, and its watch says so), checks
/// out, and the provider's signed webhook confirms the payment: the hold reads `confirmed` with
/// a booking, the booking reads back with the hold's seats and payment, and the seat map shows
/// exactly seats 3-4 booked. The second buyer then holds with its own grant.
async fn buyer_journey_from_queue_to_booking(sdk: &Sdk) -> io::Result<()> {
    let client = &sdk.client;
    let new_show = NewShow {
        group_id: 1,
        admission_window: Some(1),
        waitlist: true,
        open_sales: true,
        ..NewShow::uniform(SHOWS, 10, 1_500, "EUR")
    };
    let placement = sdk.create_show(&new_show).await?;
    let show_id = placement.show_id;
    // The SDK reads a show's summary from any replica: one that has not yet applied the
    // show's placement says `show_not_found`, one that has not applied the opening of sales
    // says `draft` (each with the log position it reflects). Asked again until one is current.
    let summary = wait_for("a summary of the show on sale", WAIT, async || {
        match client.get_show(show_id).await {
            Ok(summary) if summary.status == "on_sale" => Ok(Ok(summary)),
            Ok(summary) => Ok(Err(format!("{summary:?}"))),
            Err(error) if error.booking_code() == Some("show_not_found") => {
                Ok(Err(error.to_string()))
            }
            Err(error) => Err(io::Error::other(format!("get the show: {error}"))),
        }
    })
    .await?;
    ensure!(summary.seat_count == 10 && summary.group_id == placement.group_id, "{summary:?}");
    ensure!(
        summary.admission.is_some_and(|lane| lane.enabled && lane.window == 1),
        "admission lane: {summary:?}"
    );
    ensure!(summary.waitlist.is_some_and(|waitlist| waitlist.enabled), "waitlist: {summary:?}");
    let price_version = summary.price_version;

    let (first, second) = (sdk.session().await?, sdk.session().await?);
    let first_ticket = expect_ok(
        "first joins the lane",
        client.join_queue(&first, show_id, Some(&sdk.key("join"))).await,
    )?;
    ensure!(
        first_ticket.state == "granted" && first_ticket.grant_deadline_ms > 0,
        "the first in line is granted at once: {first_ticket:?}"
    );
    let second_ticket = expect_ok(
        "second joins the lane",
        client.join_queue(&second, show_id, Some(&sdk.key("join"))).await,
    )?;
    ensure!(
        second_ticket.state == "waiting",
        "a window of 1 grants one ticket at a time: {second_ticket:?}"
    );
    let mut second_watch = expect_ok(
        "second watches its ticket",
        client.watch_ticket(&second, show_id, second_ticket.ticket_id).await,
    )?;

    let hold = expect_ok(
        "first holds with its grant",
        client
            .hold_with_grant(
                &first,
                show_id,
                &[4, 3],
                price_version,
                first_ticket.ticket_id,
                Some(&sdk.key("hold")),
            )
            .await,
    )?;
    ensure!(hold.state == "held" && hold.seats == [3, 4], "{hold:?}");
    ensure!(hold.grant_ticket_id == first_ticket.ticket_id, "the grant it consumed: {hold:?}");
    ensure!(hold.price_minor == 3_000 && hold.currency == "EUR", "two seats at 15.00: {hold:?}");
    let ticket = expect_ok(
        "first reads its ticket",
        client.get_ticket(&first, show_id, first_ticket.ticket_id).await,
    )?;
    ensure!(ticket.state == "consumed", "the hold consumed the grant: {ticket:?}");
    watch_until("second's ticket watch", &mut second_watch, |ticket| ticket.state == "granted")
        .await?;
    let ticket = expect_ok(
        "second reads its ticket",
        client.get_ticket(&second, show_id, second_ticket.ticket_id).await,
    )?;
    ensure!(ticket.state == "granted" && ticket.grant_deadline_ms > 0, "{ticket:?}");

    let checkout = expect_ok(
        "first checks out",
        client.checkout(&first, show_id, hold.hold_id, Some(&sdk.key("checkout"))).await,
    )?;
    ensure!(checkout.hold_id == hold.hold_id && checkout.payment_id != 0, "{checkout:?}");
    ensure!(checkout.amount_minor == 3_000 && checkout.currency == "EUR", "{checkout:?}");
    let mut hold_watch = expect_ok(
        "first watches its hold",
        client.watch_hold(&first, show_id, hold.hold_id).await,
    )?;

    let follower = {
        let leader = sdk.cluster.leader_of(placement.group_id).await?;
        sdk.cluster.running().into_iter().find(|&id| id != leader).unwrap_or(leader)
    };
    let paid = sdk.pay(follower, show_id, checkout.payment_id, checkout.amount_minor).await?;
    ensure!(paid["effect"] == "confirmed", "the webhook's answer: {paid}");
    watch_until("first's hold watch", &mut hold_watch, |hold| hold.state == "confirmed").await?;

    let confirmed =
        expect_ok("first reads its hold", client.get_hold(&first, show_id, hold.hold_id).await)?;
    ensure!(
        confirmed.state == "confirmed" && confirmed.booking_id != 0,
        "a paid hold is confirmed with a booking: {confirmed:?}"
    );
    ensure!(confirmed.payment_id == checkout.payment_id, "{confirmed:?}");
    ensure!(paid["booking_id"] == format!("{show_id}-{}", confirmed.booking_id), "{paid}");
    let booking = expect_ok(
        "first reads its booking",
        client.get_booking(&first, show_id, confirmed.booking_id).await,
    )?;
    ensure!(booking.state == "confirmed" && booking.seats == [3, 4], "{booking:?}");
    ensure!(
        booking.hold_id == hold.hold_id && booking.payment_id == checkout.payment_id,
        "{booking:?}"
    );
    ensure!(booking.price_minor == 3_000 && booking.currency == "EUR", "{booking:?}");
    let map = sdk.seat_map_as_of(show_id, confirmed.as_of_log_index).await?;
    ensure!(seats_in(&map, SeatStatus::Booked) == [3, 4], "{:?}", seat_statuses(&map));
    ensure!(seats_in(&map, SeatStatus::Free).len() == 8, "{:?}", seat_statuses(&map));

    let second_hold = expect_ok(
        "second holds with its grant",
        client
            .hold_with_grant(
                &second,
                show_id,
                &[5],
                price_version,
                second_ticket.ticket_id,
                Some(&sdk.key("hold")),
            )
            .await,
    )?;
    ensure!(second_hold.state == "held" && second_hold.seats == [5], "{second_hold:?}");
    let map = sdk.seat_map_as_of(show_id, second_hold.as_of_log_index).await?;
    ensure!(seats_in(&map, SeatStatus::Held) == [5], "{:?}", seat_statuses(&map));
    ensure!(seats_in(&map, SeatStatus::Booked) == [3, 4], "{:?}", seat_statuses(&map));
    Ok(())
}
