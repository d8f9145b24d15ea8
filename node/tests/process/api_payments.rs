//! Payments and bookings over the REST API against a real 3-node cluster: checkout, the
//! provider's signed webhook (success books the hold, a replay changes nothing, a bad signature
//! is refused, a decline gives the hold back), and reading and cancelling the booking.
//!
//! Reference: shared/DESIGN.md "Outside the state machine" (webhooks verified with HMAC-SHA256
//! over the raw body, here in Stripe's timestamped `t=,v1=` form, deduplicated by provider
//! event id) and the `statemachine` payment rules (success confirms a processing hold;
//! duplicate provider events are no-ops).

use std::io;
use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};
use testkit::webhook::{SIGNATURE_HEADER, sign, wall_clock_s};

use crate::options;
use crate::rest::{Answer, Api, Report, Show, WEBHOOK_SECRET, ensure, seats_of, string_field};

/// How long a server-sent event may take to arrive.
const EVENT_WAIT: Duration = Duration::from_secs(10);

/// The first show id of this file (each scenario uses its own).
const SHOWS: u64 = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_payments_and_bookings() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let mut report = Report::default();
    report.check(
        "signed_success_webhook_books_the_hold_once",
        signed_success_webhook_books_the_hold_once(&api).await,
    );
    report.check("badly_signed_webhook_is_refused", badly_signed_webhook_is_refused(&api).await);
    report.check(
        "declined_payment_gives_the_hold_back",
        declined_payment_gives_the_hold_back(&api).await,
    );
    report.check(
        "booking_is_cancelled_by_its_owner_only",
        booking_is_cancelled_by_its_owner_only(&api).await,
    );
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// A hold of `seats` checked out by a fresh session: the session, the hold id, the payment id.
async fn checked_out(
    api: &Api,
    show: &Show,
    seats: &[u32],
) -> io::Result<(String, String, String)> {
    let (buyer, hold_id, checkout) = api.checked_out(show, seats).await?;
    Ok((buyer, hold_id, string_field(&checkout, "payment_id")?))
}

/// Sends webhook `body` (raw bytes as given) with `signature` to `node`.
async fn webhook(
    api: &Api,
    node: u64,
    body: &Value,
    signature: Option<&str>,
) -> io::Result<Answer> {
    let raw = body.to_string().into_bytes();
    let mut call = api.on(node, Method::POST, "/v1/payments/webhook");
    if let Some(signature) = signature {
        call = call.header(SIGNATURE_HEADER, signature);
    }
    call.raw(raw).send().await
}

/// Sends webhook `body` correctly signed.
async fn signed_webhook(api: &Api, node: u64, body: &Value) -> io::Result<Answer> {
    let signature = sign(WEBHOOK_SECRET, wall_clock_s(), body.to_string().as_bytes());
    webhook(api, node, body, Some(&signature)).await
}

/// Reads hold `hold_id` as `token` on its group's leader.
async fn read_hold(api: &Api, show: &Show, token: &str, hold_id: &str) -> io::Result<Value> {
    let answer = api
        .to_leader(show.group, Method::GET, &format!("/v1/holds/{hold_id}"))
        .await?
        .token(token)
        .send()
        .await?;
    Ok(answer.expect(200)?.clone())
}

/// Checkout, then the provider's signed `succeeded` webhook (sent to a follower): the hold is
/// confirmed with a booking whose seats are booked. The same event again, to any node, is a 200
/// no-op (`duplicate`): the same booking, no second one, the seat map unchanged.
async fn signed_success_webhook_books_the_hold_once(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS, 20, 1, json!({})).await?;
    let (buyer, hold_id, payment_id) = checked_out(api, &show, &[2, 3]).await?;
    let event = json!({
        "event_id": api.key("evt"),
        "payment_id": payment_id,
        "result": "succeeded",
        "amount_minor": 2_000,
        "currency": "EUR",
    });
    let follower = api.follower(show.group).await?;
    let first = signed_webhook(api, follower, &event).await?;
    ensure!(first.expect(200)?["effect"] == "confirmed", "{}", first.describe());
    let hold = read_hold(api, &show, &buyer, &hold_id).await?;
    ensure!(hold["state"] == "confirmed", "{hold}");
    let booking_id = string_field(&hold, "booking_id")?;
    ensure!(first.body["booking_id"] == booking_id.as_str(), "{}", first.describe());

    let answer = api
        .to_leader(show.group, Method::GET, &format!("/v1/bookings/{booking_id}"))
        .await?
        .token(&buyer)
        .send()
        .await?;
    let booking = answer.expect(200)?;
    ensure!(
        booking["state"] == "confirmed" && seats_of(booking)? == [2, 3],
        "{}",
        answer.describe()
    );
    ensure!(booking["hold_id"] == hold_id.as_str(), "{}", answer.describe());
    let before = api.seat_states(&show).await?;
    ensure!(before[&2] == "booked" && before[&3] == "booked", "{before:?}");

    for node in [1, 2, 3] {
        let replay = signed_webhook(api, node, &event).await?;
        ensure!(replay.expect(200)?["effect"] == "duplicate", "{}", replay.describe());
    }
    let hold = read_hold(api, &show, &buyer, &hold_id).await?;
    ensure!(hold["state"] == "confirmed" && hold["booking_id"] == booking_id.as_str(), "{hold}");
    let after = api.seat_states(&show).await?;
    ensure!(after == before, "a replayed event changed the seats: {before:?} -> {after:?}");
    let booked = after.values().filter(|state| *state == "booked").count();
    ensure!(booked == 2, "one booking of two seats: {after:?}");
    Ok(())
}

/// A webhook with a wrong signature, a signature of another body, a genuine signature an hour
/// old (a replay), the retired bare `sha256=` form, or none is 401 `unauthenticated` and
/// changes nothing: the hold stays `processing`.
async fn badly_signed_webhook_is_refused(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 1, 20, 2, json!({})).await?;
    let (buyer, hold_id, payment_id) = checked_out(api, &show, &[5]).await?;
    let event = json!({
        "event_id": api.key("evt"), "payment_id": payment_id, "result": "succeeded",
        "amount_minor": 1_000, "currency": "EUR",
    });
    let body = event.to_string();
    let now_s = wall_clock_s();
    let other_body = sign(WEBHOOK_SECRET, now_s, b"{}");
    let other_secret = sign("not-the-secret", now_s, body.as_bytes());
    let an_hour_old = sign(WEBHOOK_SECRET, now_s - 3_600, body.as_bytes());
    let legacy = format!("sha256={}", "0".repeat(64));
    for (signature, why) in [
        (None, "required"),
        (Some(other_body.as_str()), "no v1 signature matches"),
        (Some(other_secret.as_str()), "no v1 signature matches"),
        (Some(an_hour_old.as_str()), "outside the tolerance"),
        (Some(legacy.as_str()), "no longer accepted"),
        (Some("t=1,v1=zz"), "malformed"),
    ] {
        let answer = webhook(api, 1, &event, signature).await?;
        answer.expect_error(401, "unauthenticated")?;
        let message = answer.body["message"].as_str().unwrap_or("");
        ensure!(message.contains(why), "signature {signature:?}: {}", answer.describe());
    }
    let hold = read_hold(api, &show, &buyer, &hold_id).await?;
    ensure!(hold["state"] == "processing", "{hold}");
    Ok(())
}

/// A signed `declined` webhook with time left gives the hold back: it reads `held` and can be
/// checked out again.
async fn declined_payment_gives_the_hold_back(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 2, 20, 1, json!({})).await?;
    let (buyer, hold_id, payment_id) = checked_out(api, &show, &[8]).await?;
    let event =
        json!({ "event_id": api.key("evt"), "payment_id": payment_id, "result": "declined" });
    signed_webhook(api, 2, &event).await?.expect(200)?;
    let hold = read_hold(api, &show, &buyer, &hold_id).await?;
    ensure!(hold["state"] == "held", "{hold}");
    let states = api.seat_states(&show).await?;
    ensure!(states[&8] == "held", "{states:?}");
    let again = api
        .to_leader(show.group, Method::POST, &format!("/v1/holds/{hold_id}/checkout"))
        .await?
        .token(&buyer)
        .key(&api.key("checkout-again"))
        .send()
        .await?;
    let retry = string_field(again.expect(201)?, "payment_id")?;
    ensure!(retry != payment_id, "a second attempt is a new payment: {}", again.describe());
    Ok(())
}

/// Another session may neither read nor cancel a booking (403); its owner cancels it (200,
/// `cancelled`) and its seats are free again. The owner's server-sent events follow it all:
/// the payment `pending`, then `succeeded`, then owing a refund; the booking `confirmed`, then
/// `cancelled` (the end of its stream); a stranger's streams are refused before they start.
async fn booking_is_cancelled_by_its_owner_only(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 3, 20, 2, json!({})).await?;
    let (buyer, hold_id, payment_id) = checked_out(api, &show, &[0, 1]).await?;
    let stranger = api.session().await?;
    let follower = api.follower(show.group).await?;
    let payment_events = format!("/v1/payments/{payment_id}/events");
    let refused = api.on(follower, Method::GET, &payment_events).token(&stranger).send().await?;
    refused.expect_error(403, "not_owner")?;
    let mut payment = api.on(follower, Method::GET, &payment_events).token(&buyer).events().await?;
    let first = payment.next(EVENT_WAIT).await?;
    ensure!(first.event == "payment" && first.json()["state"] == "pending", "{first:?}");
    let event = json!({
        "event_id": api.key("evt"), "payment_id": payment_id, "result": "succeeded",
        "amount_minor": 2_000, "currency": "EUR",
    });
    signed_webhook(api, 3, &event).await?.expect(200)?;
    payment.until(EVENT_WAIT, |event| event.json()["state"] == "succeeded").await?;
    let hold = read_hold(api, &show, &buyer, &hold_id).await?;
    let booking_id = string_field(&hold, "booking_id")?;
    let path = format!("/v1/bookings/{booking_id}");
    let mut booking =
        api.on(follower, Method::GET, &format!("{path}/events")).token(&buyer).events().await?;
    let first = booking.next(EVENT_WAIT).await?;
    ensure!(first.event == "booking" && first.json()["state"] == "confirmed", "{first:?}");
    let leader = api.leader(show.group).await?;
    api.on(leader, Method::GET, &path)
        .token(&stranger)
        .send()
        .await?
        .expect_error(403, "not_owner")?;
    let cancel =
        api.on(leader, Method::DELETE, &path).token(&stranger).key(&api.key("x")).send().await?;
    cancel.expect_error(403, "not_owner")?;
    let cancel =
        api.on(leader, Method::DELETE, &path).token(&buyer).key(&api.key("cancel")).send().await?;
    ensure!(cancel.expect(200)?["state"] == "cancelled", "{}", cancel.describe());
    booking.until(EVENT_WAIT, |event| event.json()["state"] == "cancelled").await?;
    payment.until(EVENT_WAIT, |event| event.json()["refund_owed"] == true).await?;
    let read = api.on(leader, Method::GET, &path).token(&buyer).send().await?;
    ensure!(read.expect(200)?["state"] == "cancelled", "{}", read.describe());
    let states = api.seat_states(&show).await?;
    ensure!(states[&0] == "free" && states[&1] == "free", "{states:?}");
    let missing = api
        .on(leader, Method::GET, &format!("/v1/bookings/{}-999", show.id))
        .token(&buyer)
        .send()
        .await?;
    missing.expect_error(404, "booking_not_found")?;
    Ok(())
}
