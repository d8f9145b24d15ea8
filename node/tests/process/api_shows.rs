//! The REST API's sessions, shows, operator calls, documents and probes, over plain HTTP against
//! a real 3-node cluster, and a request sent to a follower of the show's group (forwarded to the
//! leader and answered normally).
//!
//! Reference: issue 4 "REST" (exactly these paths; every node serves the whole API and routes
//! each request to its show's group leader) and shared/DESIGN.md "Errors" (401 without a token,
//! 403 without the operator credential).

use std::collections::BTreeMap;
use std::io;

use axum::http::Method;
use serde_json::{Value, json};
use testkit::wait_for;

use crate::rest::{Api, OPERATOR_TOKEN, Report, ensure, seat_states, string_field};
use crate::{WAIT, options};

/// The first show id of this file (each scenario uses its own).
const SHOWS: u64 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_shows_sessions_and_forwarding() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let mut report = Report::default();
    report.check(
        "sessions_are_issued_by_the_cluster",
        sessions_are_issued_by_the_cluster(&api).await,
    );
    report
        .check("shows_are_created_listed_and_read", shows_are_created_listed_and_read(&api).await);
    report.check("a_draft_show_sells_nothing", a_draft_show_sells_nothing(&api).await);
    report.check(
        "operator_calls_need_the_credential",
        operator_calls_need_the_credential(&api).await,
    );
    report.check(
        "the_operator_reads_the_audit_trail",
        the_operator_reads_the_audit_trail(&api).await,
    );
    report
        .check("a_follower_forwards_to_the_leader", a_follower_forwards_to_the_leader(&api).await);
    report.check("documents_and_probes_are_served", documents_and_probes_are_served(&api).await);
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// `POST /v1/sessions` on any node issues a fresh, long, distinct token; a token is accepted
/// by every node.
async fn sessions_are_issued_by_the_cluster(api: &Api) -> io::Result<()> {
    let mut tokens = Vec::new();
    for node in 1..=3 {
        let answer = api.on(node, Method::POST, "/v1/sessions").send().await?;
        let token = string_field(answer.expect(201)?, "token")?;
        // At least 128 random bits, hex-encoded.
        ensure!(token.len() >= 32, "short token {token}");
        tokens.push(token);
    }
    tokens.sort();
    tokens.dedup();
    ensure!(tokens.len() == 3, "tokens repeat: {tokens:?}");
    let show = api.create_show(SHOWS, 10, 1, json!({})).await?;
    for node in 1..=3 {
        let path = format!("/v1/shows/{}/holds", show.id);
        let answer = api
            .on(node, Method::POST, &path)
            .token(&tokens[0])
            .key(&api.key("session-check"))
            .json(&json!({ "seats": [node], "price_version": 1 }))
            .send()
            .await?;
        answer.expect(201)?;
    }
    Ok(())
}

/// A created show is listed, read, and its seat map has every seat free with `as_of`; creating
/// it again with the identical request succeeds (create is idempotent for an identical spec).
async fn shows_are_created_listed_and_read(api: &Api) -> io::Result<()> {
    let show_id = SHOWS + 1;
    let fields = json!({
        "prices_minor": [1_500, 900],
        "layout": [{ "count": 6, "class": 0 }, { "count": 4, "class": 1 }],
        "policy": { "hold_ttl_ms": 120_000 },
    });
    let show = api.create_show(show_id, 10, 2, fields.clone()).await?;
    ensure!(show.group == 2, "placed in {show:?}");
    // The same request again (a retry after a lost answer, on another node's admission) is
    // the same creation, not a conflict.
    let retried = api.create_show(show_id, 10, 2, fields).await?;
    ensure!(retried.group == show.group, "the retry placed it in {retried:?}");

    let listed = api.on(2, Method::GET, "/v1/shows").send().await?;
    let list = listed.expect(200)?;
    let shows = list.as_array().or_else(|| list["shows"].as_array());
    let found = shows.is_some_and(|shows| shows.iter().any(|s| s["show_id"] == show_id));
    ensure!(found, "show {show_id} not listed: {}", listed.describe());

    let read = api.on(3, Method::GET, &format!("/v1/shows/{show_id}")).send().await?;
    let body = read.expect(200)?;
    ensure!(body["show_id"] == show_id, "{}", read.describe());

    let map = api.on(1, Method::GET, &format!("/v1/shows/{show_id}/seats")).send().await?;
    let body = map.expect(200)?;
    let states = seat_states(body)?;
    ensure!(states.len() == 10, "10 seats expected: {}", map.describe());
    ensure!(states.values().all(|state| state == "free"), "{}", map.describe());
    ensure!(!body["as_of"].is_null(), "no as_of: {}", map.describe());

    let again = api
        .on(1, Method::POST, "/v1/shows")
        .token(OPERATOR_TOKEN)
        .key(&api.key("show-again"))
        .json(&json!({
            "show_id": show_id, "currency": "EUR", "prices_minor": [1],
            "layout": [{ "count": 1, "class": 0 }],
        }))
        .send()
        .await?;
    again.expect_error(409, "show_exists")?;
    Ok(())
}

/// A show created with `open_sales: false` refuses holds (409 `show_not_on_sale`).
async fn a_draft_show_sells_nothing(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 2, 10, 1, json!({ "open_sales": false })).await?;
    let token = api.session().await?;
    let answer = api.hold(&show, &token, &api.key("draft"), &[1]).await?;
    answer.expect_error(409, "show_not_on_sale")?;
    let states = api.seat_states(&show).await?;
    ensure!(states.values().all(|state| state == "free"), "{states:?}");
    Ok(())
}

/// Operator calls refuse a caller without a token (401) and a buyer's token (403).
async fn operator_calls_need_the_credential(api: &Api) -> io::Result<()> {
    let buyer = api.session().await?;
    let spec = json!({
        "show_id": SHOWS + 3, "currency": "EUR", "prices_minor": [1_000],
        "layout": [{ "count": 5, "class": 0 }],
    });
    let create = |token: Option<&str>| {
        let call = api.on(2, Method::POST, "/v1/shows").key(&api.key("op")).json(&spec);
        match token {
            Some(token) => call.token(token),
            None => call,
        }
    };
    create(None).send().await?.expect_error(401, "unauthenticated")?;
    create(Some(&buyer)).send().await?.expect_error(403, "forbidden")?;
    let read = api.on(3, Method::GET, &format!("/v1/shows/{}", SHOWS + 3)).send().await?;
    read.expect_error(404, "show_not_found")?;

    let show = api.create_show(SHOWS + 4, 5, 1, json!({ "waitlist": { "enabled": true } })).await?;
    let released = api
        .on(1, Method::POST, "/v1/internal/capacity-released")
        .token(&buyer)
        .key(&api.key("capacity"))
        .json(&json!({ "show_id": show.id, "event_id": api.key("event"), "seats": [1] }))
        .send()
        .await?;
    released.expect_error(403, "forbidden")?;
    let hold = api.hold_ok(&show, &buyer, &[2]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let audit =
        api.on(2, Method::GET, &format!("/v1/audit/hold/{hold_id}")).token(&buyer).send().await?;
    audit.expect_error(403, "forbidden")?;
    let audit = api.on(2, Method::GET, &format!("/v1/audit/hold/{hold_id}")).send().await?;
    audit.expect_error(401, "unauthenticated")?;
    Ok(())
}

/// `GET /v1/audit/hold/{id}` (operator) lists the hold's transitions: made, then cancelled.
async fn the_operator_reads_the_audit_trail(api: &Api) -> io::Result<()> {
    let show = api.create_show(SHOWS + 5, 5, 2, json!({})).await?;
    let buyer = api.session().await?;
    let hold = api.hold_ok(&show, &buyer, &[0, 1]).await?;
    let hold_id = string_field(&hold, "hold_id")?;
    let cancel = api
        .to_leader(show.group, Method::DELETE, &format!("/v1/holds/{hold_id}"))
        .await?
        .token(&buyer)
        .key(&api.key("cancel"))
        .send()
        .await?;
    ensure!(matches!(cancel.status, 200 | 204), "{}", cancel.describe());
    let answer = api
        .on(1, Method::GET, &format!("/v1/audit/hold/{hold_id}"))
        .token(OPERATOR_TOKEN)
        .send()
        .await?;
    let body = answer.expect(200)?;
    let records = first_array(body).unwrap_or_default();
    ensure!(records.len() >= 2, "two transitions expected: {}", answer.describe());
    ensure!(answer.text.contains("cancel"), "no cancellation in {}", answer.describe());
    let unknown = api
        .on(1, Method::GET, &format!("/v1/audit/hold/{}-999", show.id))
        .token(OPERATOR_TOKEN)
        .send()
        .await?;
    ensure!(
        unknown.status == 404 || first_array(&unknown.body).is_some_and(|r| r.is_empty()),
        "an unknown hold has an audit trail: {}",
        unknown.describe()
    );
    Ok(())
}

/// The first array in `value`: itself, or the first field that is an array.
fn first_array(value: &Value) -> Option<Vec<Value>> {
    match value {
        Value::Array(items) => Some(items.clone()),
        Value::Object(fields) => fields.values().find_map(|v| v.as_array().cloned()),
        _ => None,
    }
}

/// Every request sent to a follower of the show's group is forwarded to its leader and
/// answered as the leader would: create a show, hold, read, cancel. A linearizable seat map
/// asked of the follower (forwarded too) shows the hold acknowledged just before, and then its
/// cancellation, at once: no waiting for the follower's replica to catch up.
///
/// Reference: Raft §6.4 (ReadIndex: a leader confirms its leadership with a quorum and serves
/// a read at or after the commit index it saw, so the read reflects every acknowledged write).
async fn a_follower_forwards_to_the_leader(api: &Api) -> io::Result<()> {
    let show_id = SHOWS + 6;
    let metadata_follower = api.follower(0).await?;
    let created = api
        .on(metadata_follower, Method::POST, "/v1/shows")
        .token(OPERATOR_TOKEN)
        .key(&api.key("show"))
        .json(&json!({
            "show_id": show_id, "currency": "EUR", "prices_minor": [1_000],
            "layout": [{ "count": 20, "class": 0 }], "group_id": 1,
        }))
        .send_once()
        .await?;
    created.expect(201)?;

    let follower = api.follower(1).await?;
    let buyer = api.session().await?;
    let held = api
        .on(follower, Method::POST, &format!("/v1/shows/{show_id}/holds"))
        .token(&buyer)
        .key(&api.key("forwarded"))
        .json(&json!({ "seats": [3, 4], "price_version": 1 }))
        .send_once()
        .await?;
    let hold = held.expect(201)?;
    let hold_id = string_field(hold, "hold_id")?;
    ensure!(hold_id.starts_with(&format!("{show_id}-")), "hold id {hold_id}");
    let map = linearizable_map_via(api, follower, show_id).await?;
    let held = |seat: u32| map.get(&seat).is_some_and(|state| state == "held");
    ensure!(held(3) && held(4), "the hold just acknowledged: {map:?}");
    ensure!(map.values().filter(|state| *state == "free").count() == 18, "{map:?}");
    let misspelt = api
        .on(follower, Method::GET, &format!("/v1/shows/{show_id}/seats?consistency=strong"))
        .send_once()
        .await?;
    misspelt.expect_error(400, "invalid_argument")?;

    let read = api
        .on(follower, Method::GET, &format!("/v1/holds/{hold_id}"))
        .token(&buyer)
        .send_once()
        .await?;
    ensure!(read.expect(200)?["hold_id"] == hold_id.as_str(), "{}", read.describe());
    // The follower's own seat map catches up (it may be stale by a moment, never by more).
    wait_for("the follower's seat map to show the hold", WAIT, async || {
        let map = api
            .on(follower, Method::GET, &format!("/v1/shows/{show_id}/seats"))
            .send_once()
            .await?;
        let states = seat_states(map.expect(200)?)?;
        Ok(
            if states.get(&3).is_some_and(|s| s == "held")
                && states.get(&4).is_some_and(|s| s == "held")
            {
                Ok(())
            } else {
                Err(format!("{states:?}"))
            },
        )
    })
    .await?;
    let cancel = api
        .on(follower, Method::DELETE, &format!("/v1/holds/{hold_id}"))
        .token(&buyer)
        .key(&api.key("cancel"))
        .send_once()
        .await?;
    ensure!(matches!(cancel.status, 200 | 204), "{}", cancel.describe());
    let map = linearizable_map_via(api, follower, show_id).await?;
    ensure!(map.values().all(|state| state == "free"), "the cancellation just made: {map:?}");
    let show = crate::rest::Show { id: show_id, group: 1 };
    let states = api.seat_states(&show).await?;
    ensure!(states.values().all(|state| state == "free"), "{states:?}");
    Ok(())
}

/// The seat states of `GET /v1/shows/{show_id}/seats?consistency=linearizable` sent once to
/// `follower`, checking that the follower forwarded it and the answer says `linearizable`.
///
/// # Errors
///
/// When the answer is not a forwarded 200 linearizable seat map.
async fn linearizable_map_via(
    api: &Api,
    follower: u64,
    show_id: u64,
) -> io::Result<BTreeMap<u32, String>> {
    let path = format!("/v1/shows/{show_id}/seats?consistency=linearizable");
    let answer = api.on(follower, Method::GET, &path).send_once().await?;
    let body = answer.expect(200)?;
    ensure!(body["consistency"] == "linearizable", "{}", answer.describe());
    let follower_address = api.cluster.address(follower)?;
    ensure!(
        answer.header("booking-forwarded-to").is_some_and(|to| to != follower_address),
        "a follower forwards a linearizable read to the leader: {:?}",
        answer.headers
    );
    seat_states(body)
}

/// The paths of issue 4, with their parameters written as `{}`.
const DOCUMENTED_PATHS: [&str; 22] = [
    "/v1/sessions",
    "/v1/shows",
    "/v1/shows/{}",
    "/v1/shows/{}/seats",
    "/v1/shows/{}/holds",
    "/v1/holds/{}",
    "/v1/holds/{}/checkout",
    "/v1/holds/{}/events",
    "/v1/bookings/{}",
    "/v1/payments/webhook",
    "/v1/shows/{}/queue",
    "/v1/queue/{}",
    "/v1/queue/{}/events",
    "/v1/resources/{}/waitlist:join",
    "/v1/waitlist/{}",
    "/v1/offers/{}:accept",
    "/v1/offers/{}:decline",
    "/v1/internal/capacity-released",
    "/v1/audit/{}/{}",
    "/healthz",
    "/metrics",
    "/openapi.json",
];

/// `path` with each `{parameter}` written as `{}`.
fn without_parameter_names(path: &str) -> String {
    let mut out = String::new();
    let mut in_parameter = false;
    for character in path.chars() {
        match character {
            '{' => {
                in_parameter = true;
                out.push_str("{}");
            }
            '}' => in_parameter = false,
            _ if in_parameter => {}
            _ => out.push(character),
        }
    }
    out
}

/// `GET /openapi.json` documents every path of the issue; `/metrics` is Prometheus text;
/// `/healthz` answers on every node.
async fn documents_and_probes_are_served(api: &Api) -> io::Result<()> {
    let answer = api.on(2, Method::GET, "/openapi.json").send().await?;
    let document = answer.expect(200)?;
    ensure!(document["openapi"].is_string(), "not an OpenAPI document: {}", answer.describe());
    let documented: Vec<String> = document["paths"]
        .as_object()
        .map(|paths| paths.keys().map(|path| without_parameter_names(path)).collect())
        .unwrap_or_default();
    let missing: Vec<&str> = DOCUMENTED_PATHS
        .iter()
        .copied()
        .filter(|path| !documented.iter().any(|d| d == path))
        .collect();
    ensure!(missing.is_empty(), "undocumented paths {missing:?}; documented {documented:?}");

    let metrics = api.on(3, Method::GET, "/metrics").send().await?;
    metrics.expect(200)?;
    ensure!(metrics.text.contains("# TYPE"), "not Prometheus text: {}", metrics.describe());
    for node in 1..=3 {
        api.on(node, Method::GET, "/healthz").send().await?.expect(200)?;
    }
    Ok(())
}
