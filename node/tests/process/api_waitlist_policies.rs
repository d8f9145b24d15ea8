//! The waitlist's policies over the REST API of a real cluster (run on the cluster of
//! `api_waitlist.rs`): priority bands from operator-signed claims, and a lottery that the
//! group leader's worker draws at its time with a seed recorded in the log.
//!
//! Reference: seed 000 "Fairness" (FIFO, priority bands, lottery, waves; policy versions and
//! "why was I skipped" answered from records) and the state machine's `waitlist_policy.rs`.

use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::Method;
use serde_json::{Value, json};
use statemachine::{EntryId, draw_key};

use crate::rest::{Api, OPERATOR_TOKEN, Show, ensure, string_field};

/// How long the draw worker may take once a lottery is due.
const DRAW_WAIT: Duration = Duration::from_secs(20);

async fn put_policy(api: &Api, show: &Show, rules: &Value) -> io::Result<crate::rest::Answer> {
    api.on(2, Method::PUT, &format!("/v1/shows/{}/waitlist/policy", show.id))
        .token(OPERATOR_TOKEN)
        .key(&api.key("policy"))
        .json(rules)
        .send()
        .await
}

async fn get_policy(api: &Api, show: &Show) -> io::Result<Value> {
    let answer = api
        .on(3, Method::GET, &format!("/v1/shows/{}/waitlist/policy", show.id))
        .token(OPERATOR_TOKEN)
        .send()
        .await?;
    Ok(answer.expect(200)?.clone())
}

/// Joins as `token`, with `claim` if given; returns the answer, whatever it is.
async fn join(
    api: &Api,
    show: &Show,
    token: &str,
    claim: Option<&str>,
) -> io::Result<crate::rest::Answer> {
    let mut body = json!({ "quantity": 1 });
    if let Some(claim) = claim {
        body["claim"] = json!(claim);
    }
    api.on(1, Method::POST, &format!("/v1/resources/{}/waitlist:join", show.id))
        .token(token)
        .key(&api.key("join"))
        .json(&body)
        .send()
        .await
}

async fn cancel_hold(api: &Api, show: &Show, token: &str, hold: &Value) -> io::Result<()> {
    let hold_id = string_field(hold, "hold_id")?;
    let cancel = api
        .to_leader(show.group, Method::DELETE, &format!("/v1/holds/{hold_id}"))
        .await?
        .token(token)
        .key(&api.key("cancel"))
        .send()
        .await?;
    cancel.expect(200)?;
    Ok(())
}

async fn entry(api: &Api, token: &str, entry_id: &str) -> io::Result<Value> {
    let answer =
        api.on(2, Method::GET, &format!("/v1/waitlist/{entry_id}")).token(token).send().await?;
    Ok(answer.expect(200)?.clone())
}

/// A show of one seat under priority bands: a guest joins first, then a member with a claim
/// the operator issued for the member's session; the released seat is offered to the member,
/// and the guest's audit says why (the bands policy, the member's band). A claim is good only
/// for its session and show and cannot be edited; a band in the body is refused; the ordering
/// cannot change while anyone waits, and setting the rules in force again is a duplicate.
pub async fn bands_serve_a_claimed_member_before_an_earlier_guest(
    api: &Api,
    show_id: u64,
) -> io::Result<()> {
    let show = api.create_show(show_id, 1, 1, json!({ "waitlist": { "enabled": true } })).await?;
    let (holder, guest, member) =
        (api.session().await?, api.session().await?, api.session().await?);
    let hold = api.hold_ok(&show, &holder, &[0]).await?;

    let bands = json!({ "ordering": "bands" });
    let set = put_policy(api, &show, &bands).await?;
    let set = set.expect(200)?.clone();
    ensure!(set["rules"]["ordering"] == "bands" && set["duplicate"] == false, "{set}");
    let version = set["policy_version"].as_u64().unwrap_or(0);
    let again = put_policy(api, &show, &bands).await?;
    let again = again.expect(200)?;
    ensure!(again["duplicate"] == true && again["policy_version"] == version, "{again}");

    let guest_entry = join(api, &show, &guest, None).await?;
    let guest_entry = string_field(guest_entry.expect(201)?, "entry_id")?;
    let claim_call = |token: &str, band: u32| {
        api.on(3, Method::POST, &format!("/v1/shows/{}/waitlist/claims", show.id))
            .token(OPERATOR_TOKEN)
            .key(&api.key("claim"))
            .json(&json!({ "session_token": token, "band": band }))
    };
    let claim = claim_call(&member, 1).send().await?;
    let claim = string_field(claim.expect(201)?, "claim")?;
    claim_call(&member, 7).send().await?.expect_error(400, "invalid_argument")?;
    let stranger = api
        .on(3, Method::POST, &format!("/v1/shows/{}/waitlist/claims", show.id))
        .token(&guest)
        .key(&api.key("claim"))
        .json(&json!({ "session_token": guest, "band": 0 }))
        .send()
        .await?;
    stranger.expect_error(403, "forbidden")?;
    // Someone else's claim, an edited one and a band of one's own say are refused.
    join(api, &show, &holder, Some(&claim)).await?.expect_error(403, "forbidden")?;
    let edited = claim.replacen("_1_", "_0_", 1);
    join(api, &show, &member, Some(&edited)).await?.expect_error(403, "forbidden")?;
    let own_say = api
        .on(1, Method::POST, &format!("/v1/resources/{}/waitlist:join", show.id))
        .token(&member)
        .key(&api.key("join"))
        .json(&json!({ "quantity": 1, "band": 0 }))
        .send()
        .await?;
    own_say.expect_error(400, "invalid_argument")?;
    let member_entry = join(api, &show, &member, Some(&claim)).await?;
    let member_entry = string_field(member_entry.expect(201)?, "entry_id")?;
    let read = entry(api, &guest, &guest_entry).await?;
    ensure!(read["ahead"] == 1, "the member is ahead of the earlier guest: {read}");

    let fifo = put_policy(api, &show, &json!({ "ordering": "fifo" })).await?;
    let refused = fifo.expect_error(409, "waitlist_in_use")?;
    ensure!(refused["waiting"] == 2, "{refused}");

    cancel_hold(api, &show, &holder, &hold).await?;
    let member_read = entry(api, &member, &member_entry).await?;
    ensure!(member_read["state"] == "offered", "{member_read}");
    let guest_read = entry(api, &guest, &guest_entry).await?;
    ensure!(guest_read["state"] == "waiting", "{guest_read}");
    let audit = api
        .on(1, Method::GET, &format!("/v1/audit/entry/{guest_entry}"))
        .token(OPERATOR_TOKEN)
        .send()
        .await?;
    let audit = audit.expect(200)?;
    let skip = &audit["skips"][0];
    ensure!(
        skip["entry_id"] == member_entry.as_str()
            && skip["was_ahead"] == true
            && skip["order"]["band"] == 1
            && skip["rules"]["ordering"] == "bands"
            && skip["policy_version"] == version,
        "the guest's answer names the policy and the band: {audit}"
    );
    Ok(())
}

/// A show of two seats under a lottery due in two seconds: five buyers join, the seats are
/// released and nobody is offered them; an early draw is refused `lottery_not_due`; the group
/// leader's worker draws at the time with a seed of its own, recorded (GET policy shows it);
/// the two offers go to the two lowest draw keys that seed gives; a draw with another seed is
/// refused, and the same seed answers `duplicate`.
pub async fn the_leader_draws_a_lottery_at_its_time(api: &Api, show_id: u64) -> io::Result<()> {
    let show = api.create_show(show_id, 2, 1, json!({ "waitlist": { "enabled": true } })).await?;
    let holder = api.session().await?;
    let hold = api.hold_ok(&show, &holder, &[0, 1]).await?;
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_err(io::Error::other)?;
    let draw_at_ms = now_ms.as_millis() as u64 + 2_000;
    let lottery = json!({ "ordering": "lottery", "draw_at_ms": draw_at_ms });
    let set = put_policy(api, &show, &lottery).await?;
    ensure!(set.expect(200)?["rules"]["draw_at_ms"] == draw_at_ms, "{}", set.describe());

    let mut buyers = Vec::new();
    for _ in 0..5 {
        let token = api.session().await?;
        let joined = join(api, &show, &token, None).await?;
        let entry_id = string_field(joined.expect(201)?, "entry_id")?;
        buyers.push((token, entry_id));
    }
    cancel_hold(api, &show, &holder, &hold).await?;
    for (token, entry_id) in &buyers {
        let read = entry(api, token, entry_id).await?;
        ensure!(read["state"] == "waiting", "served before the draw: {read}");
    }
    let draw_call = |seed: u64| {
        api.on(2, Method::POST, &format!("/v1/shows/{}/waitlist/draw", show.id))
            .token(OPERATOR_TOKEN)
            .key(&api.key("draw"))
            .json(&json!({ "seed": seed }))
    };
    let early = draw_call(1).send().await?;
    if early.status != 200 {
        // Unless this machine is so slow that the draw time has come already.
        early.expect_error(409, "lottery_not_due")?;
    }

    let deadline = tokio::time::Instant::now() + DRAW_WAIT;
    let draw = loop {
        let policy = get_policy(api, &show).await?;
        if let Some(draw) = policy.get("draw") {
            break draw.clone();
        }
        ensure!(tokio::time::Instant::now() < deadline, "not drawn in time: {policy}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ensure!(draw["entries"] == 5, "{draw}");
    let seed = draw["seed"].as_u64().unwrap_or(0);
    let number = |entry_id: &str| -> u64 {
        entry_id.rsplit('-').next().and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    let mut by_key: Vec<(u64, usize)> = buyers
        .iter()
        .enumerate()
        .map(|(at, (_, entry_id))| (draw_key(seed, EntryId(number(entry_id))), at))
        .collect();
    by_key.sort_unstable();
    for (rank, (_, at)) in by_key.iter().enumerate() {
        let (token, entry_id) = &buyers[*at];
        let read = entry(api, token, entry_id).await?;
        let expected = if rank < 2 { "offered" } else { "waiting" };
        ensure!(read["state"] == expected, "draw rank {rank} (seed {seed}): {read}");
    }
    let other = draw_call(seed.wrapping_add(1)).send().await?;
    let refused = other.expect_error(409, "lottery_already_drawn")?;
    ensure!(refused["seed"] == seed, "{refused}");
    let same = draw_call(seed).send().await?;
    ensure!(same.expect(200)?["duplicate"] == true, "{}", same.describe());
    Ok(())
}
