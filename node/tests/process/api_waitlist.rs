//! The waitlist over the REST API against a real 3-node cluster: joining a sold-out show,
//! capacity released by the operator (deduplicated by event id), leaving, offers made in line
//! order when a hold is cancelled, declining, and the double-tap accept of issue 4's seed races.
//!
//! Reference: the `statemachine` waitlist rules (the head of the line is never skipped for a
//! smaller party; accepting makes a hold in the same apply; capacity events are deduplicated by
//! id) and shared/DESIGN.md "Idempotency" (the same key and payload return the stored outcome).

use std::io;
use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::api_waitlist_policies as policies;
use crate::options;
use crate::rest::{Api, OPERATOR_TOKEN, Report, Show, ensure, seats_of, string_field};

/// The first show id of this file (each scenario uses its own).
const SHOWS: u64 = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_waitlist_and_offers() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let mut report = Report::default();
    report.check(
        "released_seats_are_offered_in_line_and_accepted_once",
        released_seats_are_offered_in_line_and_accepted_once(&api).await,
    );
    report.check(
        "bands_serve_a_claimed_member_before_an_earlier_guest",
        policies::bands_serve_a_claimed_member_before_an_earlier_guest(&api, SHOWS + 1).await,
    );
    report.check(
        "the_leader_draws_a_lottery_at_its_time",
        policies::the_leader_draws_a_lottery_at_its_time(&api, SHOWS + 2).await,
    );
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// Joins the waitlist of `show` for `quantity` seats as `token`; returns the 201 entry.
async fn join(api: &Api, show: &Show, token: &str, quantity: u8) -> io::Result<Value> {
    let answer = api
        .to_leader(show.group, Method::POST, &format!("/v1/resources/{}/waitlist:join", show.id))
        .await?
        .token(token)
        .key(&api.key("join"))
        .json(&json!({ "quantity": quantity }))
        .send()
        .await?;
    let entry = answer.expect(201)?.clone();
    ensure!(entry["state"] == "waiting", "{}", answer.describe());
    Ok(entry)
}

/// Reads entry `entry_id` as `token`.
async fn entry(api: &Api, show: &Show, token: &str, entry_id: &str) -> io::Result<Value> {
    let answer = api
        .to_leader(show.group, Method::GET, &format!("/v1/waitlist/{entry_id}"))
        .await?
        .token(token)
        .send()
        .await?;
    Ok(answer.expect(200)?.clone())
}

/// Sends a capacity-released event as the operator; returns the answer's body.
async fn capacity_released(
    api: &Api,
    show: &Show,
    event_id: &str,
    seats: &[u32],
) -> io::Result<Value> {
    let answer = api
        .on(1, Method::POST, "/v1/internal/capacity-released")
        .token(OPERATOR_TOKEN)
        .key(&api.key("capacity"))
        .json(&json!({ "show_id": show.id, "event_id": event_id, "seats": seats }))
        .send()
        .await?;
    ensure!(matches!(answer.status, 200 | 201), "{}", answer.describe());
    Ok(answer.body.clone())
}

/// How long a server-sent event may take to arrive.
const EVENT_WAIT: Duration = Duration::from_secs(10);

/// A show of 4 seats: A holds 0-2, B waits for 2 seats, the operator releases seat 3 (once, its
/// replay a no-op) to the pool, C and E wait for 1 each, E leaves. A cancels: B (the head) is
/// offered 0-1 and C seat 2. A stranger may not accept B's offer; C declines; B double-taps
/// accept with one key (both get the same hold), and a third tap with another key gets that
/// hold or 409 `offer_not_active`, never a second hold.
async fn released_seats_are_offered_in_line_and_accepted_once(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS, 4, 1, json!({ "waitlist": { "enabled": true } })).await?;
    let tokens: Vec<String> = {
        let mut tokens = Vec::new();
        for _ in 0..4 {
            tokens.push(api.session().await?);
        }
        tokens
    };
    let (a, b, c, e) = (&tokens[0], &tokens[1], &tokens[2], &tokens[3]);
    let hold = api.hold_ok(&show, a, &[0, 1, 2]).await?;
    let hold_id = string_field(&hold, "hold_id")?;

    let b_entry = string_field(&join(api, &show, b, 2).await?, "entry_id")?;
    // B follows its entry on a follower: waiting, then offered, then accepted (the end).
    let follower = api.follower(show.group).await?;
    let mut b_events = api
        .on(follower, Method::GET, &format!("/v1/waitlist/{b_entry}/events"))
        .token(b)
        .events()
        .await?;
    let first = b_events.next(EVENT_WAIT).await?;
    ensure!(first.event == "entry" && first.json()["state"] == "waiting", "{first:?}");
    let event_id = api.key("released");
    let first = capacity_released(api, &show, &event_id, &[3]).await?;
    ensure!(first["seats_released"] == 1 && first["duplicate"] == false, "{first}");
    let replay = capacity_released(api, &show, &event_id, &[3]).await?;
    ensure!(replay["duplicate"] == true, "{replay}");
    let states = api.seat_states(&show).await?;
    ensure!(states[&3] == "reserved", "seat 3 kept for the waitlist: {states:?}");

    let c_entry = string_field(&join(api, &show, c, 1).await?, "entry_id")?;
    let e_entry = string_field(&join(api, &show, e, 1).await?, "entry_id")?;
    let read = entry(api, &show, c, &c_entry).await?;
    ensure!(read["state"] == "waiting" && read["ahead"] == 1, "C waits behind B: {read}");
    let left = api
        .to_leader(show.group, Method::DELETE, &format!("/v1/waitlist/{e_entry}"))
        .await?
        .token(e)
        .key(&api.key("leave"))
        .send()
        .await?;
    ensure!(left.expect(200)?["state"] == "left", "{}", left.describe());

    let cancel = api
        .to_leader(show.group, Method::DELETE, &format!("/v1/holds/{hold_id}"))
        .await?
        .token(a)
        .key(&api.key("cancel"))
        .send()
        .await?;
    cancel.expect(200)?;
    let b_read = entry(api, &show, b, &b_entry).await?;
    ensure!(b_read["state"] == "offered", "{b_read}");
    let b_offer = string_field(&b_read["offer"], "offer_id")?;
    ensure!(seats_of(&b_read["offer"])? == [0, 1], "the head gets the lowest seats: {b_read}");
    let c_read = entry(api, &show, c, &c_entry).await?;
    let c_offer = string_field(&c_read["offer"], "offer_id")?;
    ensure!(seats_of(&c_read["offer"])? == [2], "{c_read}");

    let offer_call = |token: &str, offer: &str, action: &str, key: &str| {
        api.on(1, Method::POST, &format!("/v1/offers/{offer}:{action}")).token(token).key(key)
    };
    let stolen = offer_call(c, &b_offer, "accept", &api.key("steal")).send().await?;
    stolen.expect_error(403, "not_owner")?;
    let declined = offer_call(c, &c_offer, "decline", &api.key("decline")).send().await?;
    ensure!(declined.expect(200)?["state"] == "declined", "{}", declined.describe());

    // The double tap: one key, two requests at once, to two nodes.
    let key = api.key("accept");
    let mut taps = JoinSet::new();
    for node in [2, 3] {
        let call =
            api.on(node, Method::POST, &format!("/v1/offers/{b_offer}:accept")).token(b).key(&key);
        taps.spawn(async move { call.send().await });
    }
    let mut holds = Vec::new();
    while let Some(tap) = taps.join_next().await {
        let answer = tap.map_err(io::Error::other)??;
        let hold = answer.expect(201)?;
        ensure!(seats_of(hold)? == [0, 1] && hold["state"] == "held", "{}", answer.describe());
        ensure!(hold["offer_id"] == b_offer.as_str(), "{}", answer.describe());
        holds.push(string_field(hold, "hold_id")?);
    }
    ensure!(holds[0] == holds[1], "one key made two holds: {holds:?}");
    let third = offer_call(b, &b_offer, "accept", &api.key("accept-again")).send().await?;
    match third.status {
        201 => ensure!(third.body["hold_id"] == holds[0].as_str(), "{}", third.describe()),
        _ => {
            third.expect_error(409, "offer_not_active")?;
        }
    }
    let states = api.seat_states(&show).await?;
    let held: Vec<u32> = states.iter().filter(|(_, s)| *s == "held").map(|(n, _)| *n).collect();
    ensure!(held == [0, 1], "one hold of the offered seats: {states:?}");
    ensure!(states[&2] == "free" && states[&3] == "free", "nobody waits any more: {states:?}");
    let b_read = entry(api, &show, b, &b_entry).await?;
    ensure!(b_read["state"] == "accepted", "{b_read}");
    let seen = b_events.until(EVENT_WAIT, |event| event.json()["state"] == "accepted").await?;
    let offered = seen.iter().find(|event| event.json()["state"] == "offered");
    ensure!(
        offered.is_some_and(|event| event.json()["offer"]["offer_id"] == b_offer.as_str()),
        "no event of B's offer before its acceptance: {seen:?}"
    );
    Ok(())
}
