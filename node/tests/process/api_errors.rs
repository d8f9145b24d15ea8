//! Every client error of the REST API against a real 3-node cluster, each with its status,
//! stable code and `{code, message, details}` body: bad input (400) that changes nothing, no or
//! forged session token (401), unknown things (404), and conflicts (409) with the taken seats.
//!
//! Reference: issue 4 "REST" (missing Idempotency-Key on a mutation is 400; malformed JSON,
//! unknown fields, oversized bodies, 11 seats, duplicate seats, seats out of range: clear 400s,
//! nothing changed) and shared/DESIGN.md "Errors".

use std::io;

use axum::http::Method;
use serde_json::json;

use crate::options;
use crate::rest::{Api, Report, ensure, seats_of, string_field};

/// The first show id of this file (each scenario uses its own).
const SHOWS: u64 = 600;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_error_statuses_and_codes() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let mut report = Report::default();
    report.check(
        "bad_input_is_400_and_changes_nothing",
        bad_input_is_400_and_changes_nothing(&api).await,
    );
    report.check("missing_or_forged_tokens_are_401", missing_or_forged_tokens_are_401(&api).await);
    report.check("unknown_things_are_404", unknown_things_are_404(&api).await);
    report.check("conflicts_are_409_with_the_seats", conflicts_are_409_with_the_seats(&api).await);
    report.check(
        "every_edge_answers_with_the_one_error_body",
        every_edge_answers_with_the_one_error_body(&api).await,
    );
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// Missing Idempotency-Key, malformed JSON, an unknown field, no content type, an oversized
/// body, 11 seats, duplicate seats, a seat out of range, no seats: each is 400 and the seat map
/// is unchanged.
async fn bad_input_is_400_and_changes_nothing(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS, 20, 1, json!({})).await?;
    let buyer = api.session().await?;
    let path = format!("/v1/shows/{}/holds", show.id);
    let leader = api.leader(show.group).await?;
    let hold = || api.on(leader, Method::POST, &path).token(&buyer);
    let good = json!({ "seats": [1], "price_version": 1 });

    let cases = [
        ("missing key", hold().json(&good)),
        ("malformed JSON", hold().key(&api.key("k")).raw(b"{\"seats\": [1,".to_vec())),
        (
            "unknown field",
            hold()
                .key(&api.key("k"))
                .json(&json!({ "seats": [1], "price_version": 1, "vip": true })),
        ),
        ("no content type", api.on(leader, Method::POST, &path).token(&buyer).key(&api.key("k"))),
        (
            "oversized body",
            hold().key(&api.key("k")).raw(
                format!("{{\"seats\":[1],\"pad\":\"{}\"}}", "x".repeat(300 * 1024)).into_bytes(),
            ),
        ),
        (
            "11 seats",
            hold()
                .key(&api.key("k"))
                .json(&json!({ "seats": (0..11).collect::<Vec<u32>>(), "price_version": 1 })),
        ),
        ("no seats", hold().key(&api.key("k")).json(&json!({ "seats": [], "price_version": 1 }))),
        (
            "duplicate seats",
            hold().key(&api.key("k")).json(&json!({ "seats": [2, 2], "price_version": 1 })),
        ),
        (
            "seat out of range",
            hold().key(&api.key("k")).json(&json!({ "seats": [3, 20], "price_version": 1 })),
        ),
        (
            "seat as text",
            hold().key(&api.key("k")).json(&json!({ "seats": ["1"], "price_version": 1 })),
        ),
    ];
    for (what, call) in cases {
        let answer = call.send().await?;
        ensure!(answer.status == 400, "{what}: {}", answer.describe());
        let code = answer.body["code"].as_str().unwrap_or("").to_owned();
        ensure!(
            code == "invalid_argument" || code == "seat_out_of_range",
            "{what}: code {code}: {}",
            answer.describe()
        );
        answer.expect_error(400, &code)?;
        ensure!(answer.body["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}");
    }
    let states = api.seat_states(&show).await?;
    ensure!(states.values().all(|state| state == "free"), "bad input changed seats: {states:?}");

    // A bad show spec is refused the same way.
    let spec = api
        .on(1, Method::POST, "/v1/shows")
        .token(crate::rest::OPERATOR_TOKEN)
        .key(&api.key("show"))
        .json(&json!({ "show_id": SHOWS + 1, "currency": "EURO", "prices_minor": [1], "layout": [{ "count": 1, "class": 0 }] }))
        .send()
        .await?;
    spec.expect_error(400, "invalid_argument")?;
    Ok(())
}

/// Buyer calls without a token, with a token this cluster never issued (a forged tag), or with
/// another scheme are 401 `unauthenticated`, and nothing is held.
async fn missing_or_forged_tokens_are_401(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 2, 20, 2, json!({})).await?;
    let real = api.session().await?;
    let mut forged = real.clone();
    let last = forged.pop().unwrap_or('0');
    forged.push(if last == '0' { '1' } else { '0' });
    let path = format!("/v1/shows/{}/holds", show.id);
    let body = json!({ "seats": [1], "price_version": 1 });
    let leader = api.leader(show.group).await?;
    let base = || api.on(leader, Method::POST, &path).key(&api.key("k")).json(&body);
    let cases = [
        ("no token", base()),
        ("forged token", base().token(&forged)),
        ("made-up token", base().token("g1_00000000000000000000000000000000_00")),
        ("basic scheme", base().header("authorization", &format!("Basic {real}"))),
    ];
    for (what, call) in cases {
        let answer = call.send().await?;
        answer
            .expect_error(401, "unauthenticated")
            .map_err(|error| io::Error::other(format!("{what}: {error}")))?;
    }
    let hold = api.hold_ok(&show, &real, &[2]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let read =
        api.on(leader, Method::GET, &format!("/v1/holds/{hold_id}")).token(&forged).send().await?;
    read.expect_error(401, "unauthenticated")?;
    let states = api.seat_states(&show).await?;
    ensure!(states[&1] == "free" && states[&2] == "held", "{states:?}");
    Ok(())
}

/// Unknown shows, holds, tickets, entries, offers and paths are 404 with their codes.
async fn unknown_things_are_404(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 3, 20, 1, json!({})).await?;
    let buyer = api.session().await?;
    let id = show.id;
    let get = |path: String| api.on(2, Method::GET, &path).token(&buyer);
    let cases = [
        (get("/v1/shows/999999".into()), "show_not_found"),
        (get("/v1/shows/999999/seats".into()), "show_not_found"),
        (get(format!("/v1/holds/{id}-999")), "hold_not_found"),
        (get("/v1/holds/999999-1".into()), "show_not_found"),
        (get(format!("/v1/bookings/{id}-999")), "booking_not_found"),
        (get(format!("/v1/queue/{id}-999")), "ticket_not_found"),
        (get(format!("/v1/waitlist/{id}-999")), "entry_not_found"),
        (
            api.on(2, Method::POST, &format!("/v1/offers/{id}-999:accept"))
                .token(&buyer)
                .key(&api.key("k")),
            "offer_not_found",
        ),
        (get("/v1/no-such-path".into()), "not_found"),
    ];
    for (call, code) in cases {
        call.send().await?.expect_error(404, code)?;
    }
    let hold = api
        .to_leader(show.group, Method::POST, "/v1/shows/999999/holds")
        .await?
        .token(&buyer)
        .key(&api.key("k"))
        .json(&json!({ "seats": [1], "price_version": 1 }))
        .send()
        .await?;
    hold.expect_error(404, "show_not_found")?;
    Ok(())
}

/// A hold of seats partly taken is 409 `seat_unavailable` naming exactly the taken seats, and
/// holds nothing; a key reused with another payload is 409 `idempotency_key_reused`; a stale
/// price version is 409 `price_version_mismatch`.
async fn conflicts_are_409_with_the_seats(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 4, 20, 2, json!({})).await?;
    let (first, second) = (api.session().await?, api.session().await?);
    api.hold_ok(&show, &first, &[5, 6]).await?;
    let taken = api.hold(&show, &second, &api.key("k"), &[4, 5, 6, 7]).await?;
    let details = taken.expect_error(409, "seat_unavailable")?;
    ensure!(seats_of(details)? == [5, 6], "the taken seats: {}", taken.describe());
    let states = api.seat_states(&show).await?;
    ensure!(states[&4] == "free" && states[&7] == "free", "all or nothing: {states:?}");

    let key = api.key("reused");
    api.hold(&show, &second, &key, &[10]).await?.expect(201)?;
    api.hold(&show, &second, &key, &[11]).await?.expect_error(409, "idempotency_key_reused")?;
    let states = api.seat_states(&show).await?;
    ensure!(states[&11] == "free", "{states:?}");

    let stale = api
        .to_leader(show.group, Method::POST, &format!("/v1/shows/{}/holds", show.id))
        .await?
        .token(&second)
        .key(&api.key("k"))
        .json(&json!({ "seats": [12], "price_version": 7 }))
        .send()
        .await?;
    stale.expect_error(409, "price_version_mismatch")?;
    Ok(())
}

/// The API's edges, tried as a new user would: a method a route lacks is 405 with `Allow` and
/// the error body (not an empty one); an operator's create-show or capacity event without an
/// `Idempotency-Key` is 400 like every other mutation, and creates nothing; `POST /v1/sessions`
/// refuses unknown fields like every other route.
async fn every_edge_answers_with_the_one_error_body(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 5, 20, 1, json!({})).await?;
    let buyer = api.session().await?;
    let hold = api.hold_ok(&show, &buyer, &[1]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let put = api.on(2, Method::PUT, &format!("/v1/holds/{hold_id}")).token(&buyer);
    let answer = put.key(&api.key("k")).json(&json!({})).send().await?;
    answer.expect_error(405, "method_not_allowed")?;
    let allow = answer.header("allow").unwrap_or_default();
    ensure!(allow.contains("GET") && allow.contains("DELETE"), "{}", answer.describe());
    let delete = api.on(3, Method::DELETE, "/v1/shows").send().await?;
    delete.expect_error(405, "method_not_allowed")?;

    let unkeyed = api
        .on(1, Method::POST, "/v1/shows")
        .token(crate::rest::OPERATOR_TOKEN)
        .json(&json!({ "show_id": SHOWS + 6, "currency": "EUR", "prices_minor": [1],
            "layout": [{ "count": 1, "class": 0 }] }))
        .send()
        .await?;
    unkeyed.expect_error(400, "invalid_argument")?;
    let read = api.on(2, Method::GET, &format!("/v1/shows/{}", SHOWS + 6)).send().await?;
    read.expect_error(404, "show_not_found")?;
    let capacity = api
        .on(1, Method::POST, "/v1/internal/capacity-released")
        .token(crate::rest::OPERATOR_TOKEN)
        .json(&json!({ "show_id": show.id, "event_id": api.key("event"), "seats": [2] }))
        .send()
        .await?;
    capacity.expect_error(400, "invalid_argument")?;

    let sessions = |body: serde_json::Value| api.on(1, Method::POST, "/v1/sessions").json(&body);
    sessions(json!({ "vip": true })).send().await?.expect_error(400, "invalid_argument")?;
    sessions(json!({})).send().await?.expect(201)?;
    Ok(())
}
