//! Holds over the REST API against a real 3-node cluster: made, read, cancelled, expired,
//! streamed as server-sent events, and the seed races of issue 4: two sessions racing for one
//! seat, a retry after a lost response, and access by a session that does not own the hold.
//!
//! Reference: issue 4 "Tests that must exist" (the seed races), shared/DESIGN.md "Idempotency"
//! (the same key and payload return the stored outcome) and "Errors" (409 with the taken seats,
//! 403 not owner, 410 expired).

use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::Method;
use serde_json::json;
use testkit::wait_for;
use tokio::task::JoinSet;

use crate::rest::{Api, Report, ensure, seats_of, string_field};
use crate::{WAIT, options};

/// The first show id of this file (each scenario uses its own).
const SHOWS: u64 = 200;

/// How long a server-sent event may take to arrive.
const EVENT_WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_holds_and_seed_races() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let mut report = Report::default();
    report.check("hold_is_made_read_and_cancelled", hold_is_made_read_and_cancelled(&api).await);
    report.check("two_sessions_race_for_one_seat", two_sessions_race_for_one_seat(&api).await);
    report.check(
        "retry_after_a_lost_response_returns_the_same_hold",
        retry_after_a_lost_response_returns_the_same_hold(&api).await,
    );
    report.check(
        "another_session_cannot_touch_a_hold",
        another_session_cannot_touch_a_hold(&api).await,
    );
    report.check(
        "checkout_starts_one_payment_attempt",
        checkout_starts_one_payment_attempt(&api).await,
    );
    report.check(
        "expired_hold_cannot_be_checked_out",
        expired_hold_cannot_be_checked_out(&api).await,
    );
    report.check("hold_events_stream_a_cancel", hold_events_stream_a_cancel(&api).await);
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// The path of a hold.
fn hold_path(hold_id: &str) -> String {
    format!("/v1/holds/{hold_id}")
}

/// A 201 hold has its string id `<show>-<n>`, its seats, `held`, its price and its deadline; it
/// reads back the same; cancelled, it reads `cancelled` and its seats are free again.
async fn hold_is_made_read_and_cancelled(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS, 20, 1, json!({})).await?;
    let buyer = api.session().await?;
    let hold = api.hold_ok(&show, &buyer, &[7, 5]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    ensure!(hold_id.starts_with(&format!("{}-", show.id)), "hold id {hold_id}");
    ensure!(hold["show_id"] == show.id, "{hold}");
    ensure!(hold["price"]["amount_minor"] == 2_000, "two seats at 10.00: {hold}");
    ensure!(hold["price"]["currency"] == "EUR", "{hold}");
    ensure!(hold["deadline_ms"].as_u64().is_some_and(|d| d > now_ms()), "{hold}");

    let read = api
        .to_leader(show.group, Method::GET, &hold_path(&hold_id))
        .await?
        .token(&buyer)
        .send()
        .await?;
    let body = read.expect(200)?;
    ensure!(body["hold_id"] == hold_id.as_str() && body["state"] == "held", "{}", read.describe());
    ensure!(seats_of(body)? == [5, 7], "{}", read.describe());
    let states = api.seat_states(&show).await?;
    ensure!(states[&5] == "held" && states[&7] == "held" && states[&6] == "free", "{states:?}");

    let cancel = api
        .to_leader(show.group, Method::DELETE, &hold_path(&hold_id))
        .await?
        .token(&buyer)
        .key(&api.key("cancel"))
        .send()
        .await?;
    ensure!(matches!(cancel.status, 200 | 204), "{}", cancel.describe());
    let read = api
        .to_leader(show.group, Method::GET, &hold_path(&hold_id))
        .await?
        .token(&buyer)
        .send()
        .await?;
    ensure!(read.expect(200)?["state"] == "cancelled", "{}", read.describe());
    let states = api.seat_states(&show).await?;
    ensure!(states.values().all(|state| state == "free"), "{states:?}");
    Ok(())
}

/// Two sessions ask for the same seat at the same moment, through different nodes: exactly one
/// gets 201, the other 409 `seat_unavailable` naming the seat. Repeated over several seats.
async fn two_sessions_race_for_one_seat(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 1, 20, 2, json!({})).await?;
    for seat in 0..5u32 {
        let mut racers = JoinSet::new();
        for node in [1, 3] {
            let token = api.session().await?;
            let call = api
                .on(node, Method::POST, &format!("/v1/shows/{}/holds", show.id))
                .token(&token)
                .key(&api.key("race"))
                .json(&json!({ "seats": [seat, seat + 10], "price_version": 1 }));
            racers.spawn(async move { call.send().await });
        }
        let mut answers = Vec::new();
        while let Some(answer) = racers.join_next().await {
            answers.push(answer.map_err(io::Error::other)??);
        }
        let won: Vec<_> = answers.iter().filter(|a| a.status == 201).collect();
        let lost: Vec<_> = answers.iter().filter(|a| a.status != 201).collect();
        ensure!(won.len() == 1 && lost.len() == 1, "seat {seat}: {answers:?}");
        let details = lost[0].expect_error(409, "seat_unavailable")?;
        let taken = seats_of(details)?;
        ensure!(taken.contains(&seat), "seat {seat} not named: {}", lost[0].describe());
    }
    let states = api.seat_states(&show).await?;
    let held = states.values().filter(|state| *state == "held").count();
    ensure!(held == 10, "five winners of two seats each: {states:?}");
    Ok(())
}

/// A hold whose answer was lost (the client gave up before it came) is sent again with the same
/// Idempotency-Key, to another node: the answer is one hold, the same on every retry, and the
/// seat map shows its seats held once. The same key with another payload is 409
/// `idempotency_key_reused`.
async fn retry_after_a_lost_response_returns_the_same_hold(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 2, 20, 1, json!({})).await?;
    let buyer = api.session().await?;
    let key = api.key("lost");
    let body = json!({ "seats": [1, 2, 3], "price_version": 1 });
    let path = format!("/v1/shows/{}/holds", show.id);
    let leader = api.leader(show.group).await?;
    // The first attempt is abandoned as soon as it is sent: the node may or may not apply it.
    let lost = api.on(leader, Method::POST, &path).token(&buyer).key(&key).json(&body);
    let _ = tokio::time::timeout(Duration::from_millis(5), lost.send_once()).await;

    let mut hold_ids = Vec::new();
    for node in [leader, leader % 3 + 1, leader] {
        let answer =
            api.on(node, Method::POST, &path).token(&buyer).key(&key).json(&body).send().await?;
        let hold = answer.expect(201)?;
        ensure!(seats_of(hold)? == [1, 2, 3], "{}", answer.describe());
        hold_ids.push(string_field(hold, "hold_id")?);
    }
    ensure!(hold_ids.iter().all(|id| *id == hold_ids[0]), "retries made holds {hold_ids:?}");
    let states = api.seat_states(&show).await?;
    let held: Vec<u32> = states.iter().filter(|(_, s)| *s == "held").map(|(n, _)| *n).collect();
    ensure!(held == [1, 2, 3], "one hold of 1-3 expected: {states:?}");

    let other = json!({ "seats": [4], "price_version": 1 });
    let reused =
        api.on(leader, Method::POST, &path).token(&buyer).key(&key).json(&other).send().await?;
    reused.expect_error(409, "idempotency_key_reused")?;
    let states = api.seat_states(&show).await?;
    ensure!(states[&4] == "free", "{states:?}");
    Ok(())
}

/// Another session may not read, cancel or check out a hold (403 `not_owner`), and the hold is
/// untouched.
async fn another_session_cannot_touch_a_hold(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 3, 20, 2, json!({})).await?;
    let owner = api.session().await?;
    let stranger = api.session().await?;
    let hold = api.hold_ok(&show, &owner, &[9]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let leader = api.leader(show.group).await?;
    let path = hold_path(&hold_id);
    let read = api.on(leader, Method::GET, &path).token(&stranger).send().await?;
    read.expect_error(403, "not_owner")?;
    let cancel =
        api.on(leader, Method::DELETE, &path).token(&stranger).key(&api.key("x")).send().await?;
    cancel.expect_error(403, "not_owner")?;
    let checkout = api
        .on(leader, Method::POST, &format!("{path}/checkout"))
        .token(&stranger)
        .key(&api.key("x"))
        .send()
        .await?;
    checkout.expect_error(403, "not_owner")?;
    let read = api.on(leader, Method::GET, &path).token(&owner).send().await?;
    ensure!(read.expect(200)?["state"] == "held", "{}", read.describe());
    Ok(())
}

/// Checkout answers 201 with the payment attempt and its processing deadline, the same attempt
/// on a retry with the same key; the hold reads `processing`.
async fn checkout_starts_one_payment_attempt(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 4, 20, 1, json!({})).await?;
    let buyer = api.session().await?;
    let hold = api.hold_ok(&show, &buyer, &[0, 1]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let key = api.key("checkout");
    let checkout = api
        .to_leader(show.group, Method::POST, &format!("/v1/holds/{hold_id}/checkout"))
        .await?
        .token(&buyer)
        .key(&key);
    let first = checkout.send().await?;
    let body = first.expect(201)?;
    ensure!(body["hold_id"] == hold_id.as_str(), "{}", first.describe());
    let payment_id = string_field(body, "payment_id")?;
    ensure!(!body["amount"].is_null(), "no amount: {}", first.describe());
    ensure!(
        body["processing_deadline_ms"].as_u64().is_some_and(|d| d > now_ms()),
        "{}",
        first.describe()
    );
    let again = checkout.send().await?;
    ensure!(again.expect(201)?["payment_id"] == payment_id.as_str(), "{}", again.describe());
    let read = api
        .to_leader(show.group, Method::GET, &hold_path(&hold_id))
        .await?
        .token(&buyer)
        .send()
        .await?;
    ensure!(read.expect(200)?["state"] == "processing", "{}", read.describe());
    Ok(())
}

/// Milliseconds since the epoch on this machine (the nodes stamp log time with the same clock).
fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// A hold of a show whose holds live 1 s, checked out after its deadline: 410 `hold_expired`,
/// and its seats are free again.
async fn expired_hold_cannot_be_checked_out(api: &Api) -> io::Result<()> {
    let show =
        api.create_show(SHOWS + 5, 20, 2, json!({ "policy": { "hold_ttl_ms": 1_000 } })).await?;
    let buyer = api.session().await?;
    let hold = api.hold_ok(&show, &buyer, &[4]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let deadline = hold["deadline_ms"].as_u64().unwrap_or(0);
    ensure!(deadline > 0 && deadline <= now_ms() + 1_500, "a 1 s hold: {hold}");
    // Waits for the hold to read expired (the leader's tick worker expires it by log time),
    // rather than sleeping for its TTL.
    wait_for("the 1 s hold to expire", WAIT, async || {
        let read = api
            .to_leader(show.group, Method::GET, &hold_path(&hold_id))
            .await?
            .token(&buyer)
            .send()
            .await?;
        Ok(if read.body["state"] == "expired" { Ok(()) } else { Err(read.describe()) })
    })
    .await?;
    let checkout = api
        .to_leader(show.group, Method::POST, &format!("/v1/holds/{hold_id}/checkout"))
        .await?
        .token(&buyer)
        .key(&api.key("late"))
        .send()
        .await?;
    checkout.expect_error(410, "hold_expired")?;
    let read = api
        .to_leader(show.group, Method::GET, &hold_path(&hold_id))
        .await?
        .token(&buyer)
        .send()
        .await?;
    ensure!(read.expect(200)?["state"] == "expired", "{}", read.describe());
    let states = api.seat_states(&show).await?;
    ensure!(states[&4] == "free", "{states:?}");
    Ok(())
}

/// A subscriber of `GET /v1/holds/{id}/events` sees the hold's state change when its owner
/// cancels it.
async fn hold_events_stream_a_cancel(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 6, 20, 1, json!({})).await?;
    let buyer = api.session().await?;
    let hold = api.hold_ok(&show, &buyer, &[11]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let follower = api.follower(show.group).await?;
    let mut events = api
        .on(follower, Method::GET, &format!("/v1/holds/{hold_id}/events"))
        .token(&buyer)
        .events()
        .await?;
    let cancel = api
        .to_leader(show.group, Method::DELETE, &hold_path(&hold_id))
        .await?
        .token(&buyer)
        .key(&api.key("cancel"))
        .send()
        .await?;
    ensure!(matches!(cancel.status, 200 | 204), "{}", cancel.describe());
    let seen = events.until(EVENT_WAIT, |event| event.json()["state"] == "cancelled").await?;
    let last = seen.last().map(|event| event.json()).unwrap_or_default();
    ensure!(
        last["hold_id"] == hold_id.as_str() || last.to_string().contains(&hold_id),
        "the event does not name the hold: {seen:?}"
    );
    Ok(())
}
