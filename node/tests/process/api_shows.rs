//! The REST API's sessions, shows, operator calls, documents and probes, over HTTP(S) against
//! a real 3-node cluster, and a request sent to a follower of the show's group (forwarded to the
//! leader and answered normally). The operator's controls of a show (open, close, prices,
//! admission, waitlist, cancel) are walked through on the same cluster: each works, a repeat
//! answers the same, bad input and a missing or wrong credential change nothing.
//!
//! Reference: issue 4 "REST" (exactly these paths; every node serves the whole API and routes
//! each request to its show's group leader), issue 15 section 3 (the operator's controls) and
//! shared/DESIGN.md "Errors" (401 without a token, 403 without the operator credential, 400 bad
//! input with nothing changed).

use std::collections::BTreeMap;
use std::io;

use axum::http::Method;
use serde_json::{Value, json};
use testkit::wait_for;

use crate::rest::{
    Answer, Api, Call, OPERATOR_TOKEN, Report, Show, ensure, seat_states, string_field,
};
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
    report.check(
        "the_operator_controls_a_show_and_nobody_else_does",
        the_operator_controls_a_show_and_nobody_else_does(&api).await,
    );
    report.check("documents_and_probes_are_served", documents_and_probes_are_served(&api).await);
    report.check(
        "the_alert_rules_name_only_metrics_a_node_serves",
        the_alert_rules_name_only_metrics_a_node_serves(&api).await,
    );
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

/// One of the operator's controls of a show: `method` on `/v1/shows/{show}/{control}` with
/// `body` (none for open, close and cancel).
struct Control {
    method: Method,
    control: &'static str,
    body: Option<Value>,
}

impl Control {
    fn post(control: &'static str) -> Control {
        Control { method: Method::POST, control, body: None }
    }

    fn put(control: &'static str, body: Value) -> Control {
        Control { method: Method::PUT, control, body: Some(body) }
    }

    /// The request on `node` with `token` (none when `None`) and idempotency key `key` (none
    /// when `None`).
    fn call(
        &self,
        api: &Api,
        node: u64,
        show: u64,
        token: Option<&str>,
        key: Option<&str>,
    ) -> Call {
        let path = format!("/v1/shows/{show}/{}", self.control);
        let mut call = api.on(node, self.method.clone(), &path);
        if let Some(token) = token {
            call = call.token(token);
        }
        if let Some(key) = key {
            call = call.key(key);
        }
        match &self.body {
            Some(body) => call.json(body),
            None => call,
        }
    }
}

/// The summary of `show` read on its group's leader (which applied every control it
/// acknowledged), without its `as_of`: what a control changes.
async fn settings(api: &Api, show: &Show) -> io::Result<Value> {
    let path = format!("/v1/shows/{}", show.id);
    let answer = api.to_leader(show.group, Method::GET, &path).await?.send().await?;
    let mut summary = answer.expect(200)?.clone();
    if let Some(fields) = summary.as_object_mut() {
        fields.remove("as_of");
    }
    Ok(summary)
}

/// A hold of `seats` quoting `price_version` (and `grant_id` if given) by `token` on `show`'s
/// leader, under a fresh key; the answer, whatever it is.
async fn hold_quoting(
    api: &Api,
    show: &Show,
    token: &str,
    seats: &[u32],
    price_version: u32,
) -> io::Result<Answer> {
    let path = format!("/v1/shows/{}/holds", show.id);
    let body = json!({ "seats": seats, "price_version": price_version });
    api.to_leader(show.group, Method::POST, &path)
        .await?
        .token(token)
        .key(&api.key("hold"))
        .json(&body)
        .send()
        .await
}

/// `answer` without its `duplicate` field, and that field (`None` when it has none).
fn without_duplicate(answer: &Value) -> (Value, Option<bool>) {
    let mut rest = answer.clone();
    let duplicate = rest.as_object_mut().and_then(|fields| fields.remove("duplicate"));
    (rest, duplicate.and_then(|duplicate| duplicate.as_bool()))
}

/// Sends `control` to the leader of `show`'s group as the operator under `key` twice (a retry
/// after a lost answer) and once more under another key: all three are the same 200 answer,
/// which is returned, except that the repeats say `duplicate: true` where the answer has the
/// field (the control's effect already held: nothing changed).
async fn repeated(api: &Api, show: &Show, control: &Control, key: &str) -> io::Result<Value> {
    let leader = api.leader(show.group).await?;
    let first = control.call(api, leader, show.id, Some(OPERATOR_TOKEN), Some(key)).send().await?;
    let body = first.expect(200)?.clone();
    let (expected, duplicate) = without_duplicate(&body);
    let other_key = api.key("again");
    for repeat_key in [key, other_key.as_str()] {
        let repeat = control.call(api, leader, show.id, Some(OPERATOR_TOKEN), Some(repeat_key));
        let repeat = repeat.send().await?;
        let (rest, repeat_duplicate) = without_duplicate(repeat.expect(200)?);
        ensure!(rest == expected, "a repeat answered otherwise: {}", repeat.describe());
        ensure!(
            repeat_duplicate == duplicate.map(|_| true),
            "a repeat is a duplicate: {}",
            repeat.describe()
        );
    }
    Ok(body)
}

/// The operator's controls of a show, in turn, on a show of two seat classes:
///
/// - without a bearer token every control is 401 `unauthenticated`, with a buyer's token 403
///   `forbidden` (cancel included), and bad input is 400 `invalid_argument` (a missing key, a
///   malformed id, unknown fields, prices that are none, too many, too large or not one per
///   class of the show, version 0, a window of 0 or 10001): the show's summary is unchanged;
/// - closing sales refuses new holds (409 `show_not_on_sale`), reopening allows them; each
///   answers the show's status, the same again under the same key or another;
/// - new prices under version 2 are in the summary; a hold quoting version 1 is then 409
///   `price_version_mismatch` naming version 2, one quoting 2 pays the new price; the same
///   prices again say `duplicate`; a version that skips one is 409 too;
/// - the admission lane on makes a hold without a grant 409 `grant_required`, off again lets
///   it through; the waitlist on and off is in the summary (the control sent to a follower is
///   forwarded);
/// - cancelling releases the live holds, again says `duplicate`, and every control of the
///   cancelled show is 409 `show_cancelled`;
/// - the show's audit trail (`GET /v1/audit/show/{id}`) has one operator record per change,
///   from its creation to its cancellation, and none for a repeat or a refused call.
async fn the_operator_controls_a_show_and_nobody_else_does(api: &Api) -> io::Result<()> {
    let fields = json!({
        "prices_minor": [1_000, 500],
        "layout": [{ "count": 6, "class": 0 }, { "count": 4, "class": 1 }],
    });
    let show = api.create_show(SHOWS + 7, 10, 1, fields).await?;
    let buyer = api.session().await?;
    let before = settings(api, &show).await?;
    ensure!(before["status"] == "on_sale" && before["price_version"] == 1, "{before}");

    let controls = [
        Control::post("open"),
        Control::post("close"),
        Control::post("cancel"),
        Control::put("prices", json!({ "version": 2, "prices_minor": [2_000, 800] })),
        Control::put("admission", json!({ "enabled": true, "window": 2 })),
        Control::put("waitlist", json!({ "enabled": true })),
    ];
    let leader = api.leader(show.group).await?;
    for control in &controls {
        let key = api.key("no-credential");
        let anonymous = control.call(api, leader, show.id, None, Some(&key)).send().await?;
        anonymous.expect_error(401, "unauthenticated")?;
        let impostor = control.call(api, leader, show.id, Some(&buyer), Some(&key)).send().await?;
        impostor.expect_error(403, "forbidden")?;
        let keyless = control.call(api, leader, show.id, Some(OPERATOR_TOKEN), None).send().await?;
        keyless.expect_error(400, "invalid_argument")?;
        for bad_id in ["0", "x7"] {
            let path = format!("/v1/shows/{bad_id}/{}", control.control);
            let mut call = api.on(leader, control.method.clone(), &path);
            call = call.token(OPERATOR_TOKEN).key(&key);
            if let Some(body) = &control.body {
                call = call.json(body);
            }
            call.send().await?.expect_error(400, "invalid_argument")?;
        }
    }
    let bad_bodies = [
        Control::put("prices", json!({ "version": 0, "prices_minor": [2_000, 800] })),
        Control::put("prices", json!({ "version": 2, "prices_minor": [] })),
        Control::put("prices", json!({ "version": 2, "prices_minor": [2_000, 800, 100] })),
        Control::put("prices", json!({ "version": 2, "prices_minor": [2_000] })),
        Control::put("prices", json!({ "version": 2, "prices_minor": [100_000_000_001_u64, 1] })),
        Control::put("prices", json!({ "version": 2, "prices_minor": [1, 1], "currency": "USD" })),
        Control::put("prices", json!({ "version": "2", "prices_minor": [1, 1] })),
        Control::put("admission", json!({ "enabled": true, "window": 0 })),
        Control::put("admission", json!({ "enabled": true, "window": 10_001 })),
        Control::put("admission", json!({ "window": 5 })),
        Control::put("admission", json!({ "enabled": true, "lanes": 2 })),
        Control::put("waitlist", json!({ "enabled": "yes" })),
        Control::put("waitlist", json!({ "enabled": true, "policy_version": 2 })),
    ];
    for control in &bad_bodies {
        let key = api.key("bad");
        let answer = control.call(api, leader, show.id, Some(OPERATOR_TOKEN), Some(&key));
        answer.send().await?.expect_error(400, "invalid_argument")?;
    }
    let after = settings(api, &show).await?;
    ensure!(after == before, "refused calls changed the show: {before} -> {after}");
    api.hold_ok(&show, &buyer, &[0]).await?;

    // Sales: closed refuses new holds, open again allows them.
    let closed = repeated(api, &show, &Control::post("close"), &api.key("close")).await?;
    ensure!(closed["status"] == "closed" && closed["group_id"] == show.group, "{closed}");
    ensure!(closed["duplicate"] == false, "the first close changed the status: {closed}");
    let refused = hold_quoting(api, &show, &buyer, &[1], 1).await?;
    refused.expect_error(409, "show_not_on_sale")?;
    let opened = repeated(api, &show, &Control::post("open"), &api.key("open")).await?;
    ensure!(opened["status"] == "on_sale" && opened["duplicate"] == false, "{opened}");
    hold_quoting(api, &show, &buyer, &[1], 1).await?.expect(201)?;

    // Prices: version 2 is in force (the same prices again are a duplicate); a hold quoting
    // version 1 is refused, one quoting 2 pays the new price of its class.
    let prices = Control::put("prices", json!({ "version": 2, "prices_minor": [2_000, 800] }));
    let leader = api.leader(show.group).await?;
    let body = repeated(api, &show, &prices, &api.key("prices")).await?;
    ensure!(body["price_version"] == 2 && body["prices_minor"] == json!([2_000, 800]), "{body}");
    ensure!(body["duplicate"] == false, "the first call set the prices: {body}");
    let summary = settings(api, &show).await?;
    ensure!(summary["price_version"] == 2, "{summary}");
    ensure!(summary["prices_minor"] == json!([2_000, 800]), "{summary}");
    let stale = hold_quoting(api, &show, &buyer, &[2], 1).await?;
    let details = stale.expect_error(409, "price_version_mismatch")?;
    ensure!(details["current_price_version"] == 2, "{}", stale.describe());
    let fresh = hold_quoting(api, &show, &buyer, &[7], 2).await?;
    let hold = fresh.expect(201)?;
    ensure!(hold["price"]["amount_minor"] == 800, "seat 7 is of class 1: {}", fresh.describe());
    let skipping = Control::put("prices", json!({ "version": 4, "prices_minor": [1, 1] }));
    let skipped = skipping.call(api, leader, show.id, Some(OPERATOR_TOKEN), Some(&api.key("skip")));
    let skipped = skipped.send().await?;
    let details = skipped.expect_error(409, "price_version_mismatch")?;
    ensure!(details["current_price_version"] == 2, "{}", skipped.describe());

    // Admission: on, a hold without a grant is refused; off, it goes through.
    let on = Control::put("admission", json!({ "enabled": true, "window": 2 }));
    let lane = repeated(api, &show, &on, &api.key("lane-on")).await?;
    ensure!(lane["enabled"] == true && lane["window"] == 2, "{lane}");
    let summary = settings(api, &show).await?;
    ensure!(summary["admission"] == json!({ "enabled": true, "window": 2 }), "{summary}");
    let ungranted = hold_quoting(api, &show, &buyer, &[3], 2).await?;
    ungranted.expect_error(409, "grant_required")?;
    let off = Control::put("admission", json!({ "enabled": false }));
    let lane = repeated(api, &show, &off, &api.key("lane-off")).await?;
    ensure!(lane["enabled"] == false && lane["window"] == 1, "{lane}");
    hold_quoting(api, &show, &buyer, &[3], 2).await?.expect(201)?;

    // Waitlist: on (sent to a follower, which forwards it), then off; its policy version stays.
    let follower = api.follower(show.group).await?;
    let on = Control::put("waitlist", json!({ "enabled": true }));
    let key = api.key("waitlist-on");
    let forwarded = on.call(api, follower, show.id, Some(OPERATOR_TOKEN), Some(&key));
    let forwarded = forwarded.send_once().await?;
    let waitlist = forwarded.expect(200)?;
    ensure!(waitlist["enabled"] == true && waitlist["policy_version"] == 1, "{waitlist}");
    ensure!(forwarded.header("booking-forwarded-to").is_some(), "{:?}", forwarded.headers);
    let again = repeated(api, &show, &on, &key).await?;
    ensure!(&again == waitlist, "{again} after {waitlist}");
    ensure!(settings(api, &show).await?["waitlist"]["enabled"] == true, "waitlist on");
    let off = Control::put("waitlist", json!({ "enabled": false }));
    let waitlist = repeated(api, &show, &off, &api.key("waitlist-off")).await?;
    ensure!(waitlist["enabled"] == false && waitlist["policy_version"] == 1, "{waitlist}");
    ensure!(settings(api, &show).await?["waitlist"]["enabled"] == false, "waitlist off");

    // Cancel: the four live holds are released; again it is a duplicate; and the show is
    // beyond every other control.
    let leader = api.leader(show.group).await?;
    let cancel = Control::post("cancel");
    let key = api.key("cancel");
    let first = cancel.call(api, leader, show.id, Some(OPERATOR_TOKEN), Some(&key)).send().await?;
    let body = first.expect(200)?;
    ensure!(body["holds_released"] == 4 && body["duplicate"] == false, "{}", first.describe());
    let again = repeated(api, &show, &cancel, &key).await?;
    ensure!(again["duplicate"] == true && again["holds_released"] == 0, "{again}");
    let states = api.seat_states(&show).await?;
    ensure!(states.values().all(|state| state == "free"), "{states:?}");
    for control in &controls[..2] {
        let call = control.call(api, leader, show.id, Some(OPERATOR_TOKEN), Some(&api.key("late")));
        call.send().await?.expect_error(409, "show_cancelled")?;
    }
    for control in &controls[3..] {
        let call = control.call(api, leader, show.id, Some(OPERATOR_TOKEN), Some(&api.key("late")));
        call.send().await?.expect_error(409, "show_cancelled")?;
    }
    ensure!(settings(api, &show).await?["status"] == "cancelled", "cancelled");

    // The audit trail: every change, in order, by the operator; repeats and refusals left none.
    let path = format!("/v1/audit/show/{}", show.id);
    let trail = api.on(leader, Method::GET, &path).token(OPERATOR_TOKEN).send().await?;
    let records = trail.expect(200)?["records"].as_array().cloned().unwrap_or_default();
    let changes: Vec<(String, String)> = records
        .iter()
        .map(|record| (record["to"].to_string(), record["reason"].to_string()))
        .collect();
    let expected: Vec<(String, String)> = [
        ("draft", "requested"),
        ("on_sale", "requested"),
        ("closed", "requested"),
        ("on_sale", "requested"),
        ("on_sale", "prices_set"),
        ("on_sale", "admission_configured"),
        ("on_sale", "admission_configured"),
        ("on_sale", "waitlist_configured"),
        ("on_sale", "waitlist_configured"),
        ("cancelled", "requested"),
    ]
    .iter()
    .map(|(to, reason)| (json!(to).to_string(), json!(reason).to_string()))
    .collect();
    ensure!(changes == expected, "{changes:?} != {expected:?}: {}", trail.describe());
    ensure!(records.iter().all(|record| record["actor"] == "operator"), "{}", trail.describe());
    let buyer_read = api.on(leader, Method::GET, &path).token(&buyer).send().await?;
    buyer_read.expect_error(403, "forbidden")?;
    Ok(())
}

/// The paths of issue 4 and of the operator's controls, with their parameters written as `{}`.
const DOCUMENTED_PATHS: [&str; 28] = [
    "/v1/sessions",
    "/v1/shows",
    "/v1/shows/{}",
    "/v1/shows/{}/seats",
    "/v1/shows/{}/open",
    "/v1/shows/{}/close",
    "/v1/shows/{}/cancel",
    "/v1/shows/{}/prices",
    "/v1/shows/{}/admission",
    "/v1/shows/{}/waitlist",
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

/// Every metric the shipped alert rules (`node/prometheus/alerts.yml`) name is one a real node
/// serves, so a renamed metric cannot leave an alert that never fires; and the auditor's gauges
/// say the state is sound.
async fn the_alert_rules_name_only_metrics_a_node_serves(api: &Api) -> io::Result<()> {
    let rules =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/prometheus/alerts.yml"))?;
    let mut named: Vec<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("expr:"))
        .flat_map(|expr| expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|word| word.starts_with("booking_"))
        .collect();
    named.sort_unstable();
    named.dedup();
    ensure!(named.len() >= 6, "the rules name too few metrics: {named:?}");
    let metrics = api.on(1, Method::GET, "/metrics").send().await?;
    metrics.expect(200)?;
    // Series labelled by outbox sink exist only once a sink is configured, and this cluster
    // has none.
    const PER_SINK: [&str; 1] = ["booking_outbox_dead_letters"];
    let missing: Vec<&str> = named
        .iter()
        .copied()
        .filter(|name| !PER_SINK.contains(name))
        .filter(|name| !metrics.text.contains(&format!("# TYPE {name} ")))
        .collect();
    ensure!(missing.is_empty(), "the alert rules name metrics no node serves: {missing:?}");
    for sound in
        ["booking_invariants_ok{group=\"1\"} 1", "booking_replica_digest_matches{group=\"1\"} 1"]
    {
        ensure!(metrics.text.contains(sound), "no `{sound}` in {}", metrics.text);
    }
    Ok(())
}
