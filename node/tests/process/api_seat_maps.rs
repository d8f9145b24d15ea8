//! Seat maps for browsers against a real 3-node cluster: a show's availability is one letter
//! per seat that agrees with its hall's geometry and with the authoritative map, tagged with the
//! replica position it reflects (`ETag`), cacheable inside the 2 s staleness budget
//! (`max-age=1`), `304` for a caller that has it; a stampede of readers costs one rebuild per
//! show at a time; and a follower cut off from its leader answers `503` with `Retry-After`
//! instead of a map a cache would take as fresh, then serves again once it caught up.
//!
//! Reference: issue 16 section 3 (availability per show with `ETag` = `as_of`, `max-age` within
//! the 2 s budget, `304`, one rebuild per show at a time; a follower more than 2 s behind does
//! not serve a map as fresh), shared/DESIGN.md "Ordering, acknowledgement and fencing" (seat-map
//! reads may come from any replica's applied state, stale by at most 2 s).

use std::io;
use std::time::Duration;

use axum::http::Method;
use serde_json::{Value, json};
use testkit::wait_for;

use crate::rest::{Answer, Api, OPERATOR_TOKEN, Report, ensure};
use crate::{WAIT, options};

/// The first show id of this file.
const SHOWS: u64 = 1_700;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_seat_maps_for_browsers() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let mut report = Report::default();
    let made = listed_show(&api).await;
    let made_ok = made.is_ok();
    report.check("a_listed_show_is_made", made.map(|_| ()));
    if made_ok {
        report.check(
            "availability_agrees_with_geometry_and_the_map",
            availability_agrees_with_geometry_and_the_map(&api).await,
        );
        report.check(
            "availability_is_tagged_and_revalidated",
            availability_is_tagged_and_revalidated(&api).await,
        );
        report.check(
            "a_caller_with_a_map_gets_only_the_changes",
            a_caller_with_a_map_gets_only_the_changes(&api).await,
        );
        report.check(
            "a_stampede_costs_one_rebuild_at_a_time",
            a_stampede_costs_one_rebuild_at_a_time(&api).await,
        );
        report.check(
            "the_operator_overview_shows_every_replica_and_the_progress",
            the_operator_overview_shows_every_replica_and_the_progress(&api).await,
        );
        report.check(
            "a_cut_off_follower_does_not_serve_a_fresh_looking_map",
            a_cut_off_follower_does_not_serve_a_fresh_looking_map(&api).await,
        );
    }
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// An operator write on node 1 (following leader hints).
async fn write(api: &Api, method: Method, path: &str, body: Value) -> io::Result<Answer> {
    let call = api.on(1, method, path).token(OPERATOR_TOKEN).key(&api.key("seat-maps"));
    call.json(&body).send().await
}

/// Venue 1, hall 1 (rows A of 6 and B of 4, classes 0 and 1), event 1, and show SHOWS of it,
/// in data group 1.
async fn listed_show(api: &Api) -> io::Result<()> {
    let venue = json!({"venue_id": 1, "name": "Odeon", "address": "Main Street 1",
        "city": "Lisbon", "postal_code": "1100-148", "latitude": 38.71, "longitude": -9.14});
    let hall = json!({"hall_id": 1, "venue_id": 1, "name": "Sala 1", "sections": [
        {"name": "Stalls", "class": 0, "rows": [{"label": "A", "count": 6, "x": 0, "y": 0}]},
        {"name": "Balcony", "class": 1, "rows": [{"label": "B", "count": 4, "x": 0, "y": 2}]}]});
    let event = json!({"event_id": 1, "title": "Hamlet", "genre": "drama", "language": "en",
        "duration_min": 120});
    write(api, Method::POST, "/v1/venues", venue).await?.expect(201)?;
    write(api, Method::POST, "/v1/halls", hall).await?.expect(201)?;
    write(api, Method::POST, "/v1/events", event).await?.expect(201)?;
    let show = json!({"show_id": SHOWS, "currency": "EUR", "prices_minor": [2_000, 3_000],
        "group_id": 1,
        "listing": {"event_id": 1, "hall_id": 1, "starts_at_ms": 1_900_000_000_000u64}});
    write(api, Method::POST, "/v1/shows", show).await?.expect(201)?;
    Ok(())
}

fn availability_path() -> String {
    format!("/v1/shows/{SHOWS}/availability")
}

/// A hold of `seats` by a fresh session on the show's leader.
async fn hold(api: &Api, seats: &[u32]) -> io::Result<()> {
    let token = api.session().await?;
    let body = json!({"seats": seats, "price_version": 1});
    let path = format!("/v1/shows/{SHOWS}/holds");
    let answer = api.to_leader(1, Method::POST, &path).await?;
    answer.token(&token).key(&api.key("hold")).json(&body).send().await?.expect(201)?;
    Ok(())
}

/// One letter per seat of the hall's geometry; a held seat is `H` on every node once applied
/// there, as on the leader's linearizable map.
async fn availability_agrees_with_geometry_and_the_map(api: &Api) -> io::Result<()> {
    hold(api, &[2, 7]).await?;
    let geometry = api.on(2, Method::GET, "/v1/halls/1/geometry").send().await?;
    let seats = geometry.expect(200)?["seats"].as_array().map(Vec::len).unwrap_or(0);
    let linearizable = format!("/v1/shows/{SHOWS}/seats?consistency=linearizable");
    let map = api.to_leader(1, Method::GET, &linearizable).await?.send().await?;
    let statuses: Vec<String> = map.expect(200)?["seats"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|status| status.as_str().map(|status| status[..1].to_uppercase()))
        .collect();
    let expected: String = statuses.concat();
    ensure!(expected == "FFHFFFFHFF", "the leader's map: {expected}");
    for node in 1..=3 {
        // A follower serves once it has applied the hold (it confirms freshness first).
        wait_for(&format!("node {node} shows the hold"), WAIT, async || {
            let answer = api.on(node, Method::GET, &availability_path()).send().await?;
            let body = answer.expect(200)?;
            let letters = body["seats"].as_str().unwrap_or_default();
            ensure!(letters.len() == seats, "{} letters for {seats} seats", letters.len());
            ensure!(body["seat_count"] == seats, "{}", answer.describe());
            Ok(if letters == expected { Ok(()) } else { Err(letters.to_owned()) })
        })
        .await?;
    }
    Ok(())
}

/// `ETag` names the position (`"<show>-<group>.<log index>"`, the same on every replica of it),
/// `Cache-Control` lets a browser keep it for one second, `If-None-Match` gets a `304` until a
/// write changes the map, and then a new tag.
async fn availability_is_tagged_and_revalidated(api: &Api) -> io::Result<()> {
    let leader = api.leader(1).await?;
    let first = api.on(leader, Method::GET, &availability_path()).send().await?;
    let body = first.expect(200)?.clone();
    let etag = first.header("etag").unwrap_or_default().to_owned();
    let index = body["as_of"]["log_index"].as_u64().unwrap_or(0);
    let version = body["version"].as_str().unwrap_or_default();
    ensure!(version == format!("1.{index}"), "version {version} for {body}");
    ensure!(etag == format!("\"{SHOWS}-{version}\""), "ETag {etag} for {body}");
    let cache = first.header("cache-control").unwrap_or_default();
    ensure!(cache.contains("max-age=1"), "Cache-Control: {cache}");
    let again = api
        .on(leader, Method::GET, &availability_path())
        .header("if-none-match", &etag)
        .send()
        .await?;
    ensure!(again.status == 304 && again.text.is_empty(), "revalidation: {}", again.describe());
    ensure!(again.header("etag") == Some(etag.as_str()), "304's ETag: {}", again.describe());
    hold(api, &[0]).await?;
    // The map is rebuilt within its refresh (50 ms): the old tag is then stale.
    wait_for("a new tag after the hold", WAIT, async || {
        let answer = api
            .on(leader, Method::GET, &availability_path())
            .header("if-none-match", &etag)
            .send()
            .await?;
        Ok(match answer.status {
            200 if answer.header("etag") != Some(etag.as_str()) => {
                let letters = answer.body["seats"].as_str().unwrap_or_default().to_owned();
                ensure!(letters.starts_with('H'), "seat 0 after its hold: {letters}");
                Ok(())
            }
            _ => Err(answer.describe()),
        })
    })
    .await
}

/// `?since=<version>` of a map this node built: only the seats changed since, which patch the
/// kept letters into the whole map of the same version; a `since` that is not a version is
/// refused with `400`.
async fn a_caller_with_a_map_gets_only_the_changes(api: &Api) -> io::Result<()> {
    let node = api.follower(1).await?;
    let first = api.on(node, Method::GET, &availability_path()).send().await?;
    let body = first.expect(200)?.clone();
    let mut letters: Vec<char> = body["seats"].as_str().unwrap_or_default().chars().collect();
    let since = body["version"].as_str().unwrap_or_default().to_owned();
    ensure!(letters.len() == 10 && letters[5] == 'F', "seat 5 before its hold: {body}");
    hold(api, &[5]).await?;
    let path = format!("{}?since={since}", availability_path());
    let (changes, whole) = wait_for("changes with seat 5 held", WAIT, async || {
        let changes = api.on(node, Method::GET, &path).send().await?;
        let changes = changes.expect(200)?.clone();
        let whole = api.on(node, Method::GET, &availability_path()).send().await?;
        let whole = whole.expect(200)?.clone();
        let seats = changes["changed_seats"].as_array().cloned().unwrap_or_default();
        Ok(if changes["version"] == whole["version"] && seats.contains(&json!(5)) {
            Ok((changes, whole))
        } else {
            Err(format!("changes {changes}, whole map {whole}"))
        })
    })
    .await?;
    ensure!(changes["changes_since"] == json!(since), "changes since {since}: {changes}");
    ensure!(changes.get("seats").is_none(), "changes only: {changes}");
    let seats = changes["changed_seats"].as_array().cloned().unwrap_or_default();
    let now: Vec<char> = changes["changed"].as_str().unwrap_or_default().chars().collect();
    ensure!(seats.len() == now.len(), "a status per changed seat: {changes}");
    for (seat, status) in seats.iter().zip(now) {
        let seat = seat.as_u64().unwrap_or(u64::MAX) as usize;
        ensure!(seat < letters.len(), "seat {seat} out of range: {changes}");
        letters[seat] = status;
    }
    let patched: String = letters.into_iter().collect();
    ensure!(patched.chars().nth(5) == Some('H'), "seat 5 after its hold: {patched}");
    ensure!(Some(patched.as_str()) == whole["seats"].as_str(), "{patched} patched, {whole}");
    let metrics = api.on(node, Method::GET, "/metrics").send().await?;
    let counted = metrics.text.lines().any(|line| {
        line.starts_with("booking_seat_map_answers_total{")
            && line.contains("api=\"rest\"")
            && line.contains("form=\"changes\"")
            && line.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n >= 1)
    });
    ensure!(counted, "answers with changes counted: {}", metrics.text);
    for bad in ["x", "1", "1.0", "1.2.3"] {
        let path = format!("{}?since={bad}", availability_path());
        let answer = api.on(node, Method::GET, &path).send().await?;
        answer.expect_error(400, "invalid_argument")?;
    }
    Ok(())
}

/// The `rest` seat-map builds counted by `/metrics` on `node`, fresh or not.
async fn builds(api: &Api, node: u64) -> io::Result<u64> {
    let metrics = api.on(node, Method::GET, "/metrics").send().await?;
    ensure!(metrics.status == 200, "{}", metrics.describe());
    Ok(metrics
        .text
        .lines()
        .filter(|line| line.starts_with("booking_seat_map_builds_total{") && line.contains("rest"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}

/// 200 readers at once (half revalidating) on one follower: every one gets the map, and the
/// node builds it about once per refresh, not once per reader.
async fn a_stampede_costs_one_rebuild_at_a_time(api: &Api) -> io::Result<()> {
    let node = api.follower(1).await?;
    // One write, so that the next read must rebuild, once the follower applied it: it learns
    // of the commit only with the leader's next message (a heartbeat every 50 ms), and before
    // that its unchanged map is served from the cache without a build.
    hold(api, &[9]).await?;
    api.cluster
        .wait_converged(1, WAIT)
        .await
        .map_err(|error| io::Error::other(error.to_string()))?;
    let before = builds(api, node).await?;
    let started = tokio::time::Instant::now();
    let readers = (0..200).map(|reader| {
        let mut call = api.on(node, Method::GET, &availability_path());
        if reader % 2 == 1 {
            call = call.header("if-none-match", "\"0-0\"");
        }
        async move { call.send_once().await }
    });
    let answers = futures_util::future::join_all(readers).await;
    let elapsed = started.elapsed();
    for answer in answers {
        let answer = answer?;
        ensure!(answer.status == 200, "a reader got {}", answer.describe());
    }
    let built = builds(api, node).await? - before;
    // One rebuild serves every reader waiting; a new one is due only every 50 ms.
    let allowed = 1 + elapsed.as_millis() as u64 / 50;
    println!("200 readers in {elapsed:?}: {built} builds (at most {allowed} allowed)");
    ensure!(built >= 1 && built <= allowed, "{built} builds for 200 readers in {elapsed:?}");
    Ok(())
}

/// `GET /v1/ops/overview` (operator only) joins every node's view: each group has one leader
/// that all three replicas follow, with each replica's lag; the show's progress adds up to its
/// seats.
async fn the_operator_overview_shows_every_replica_and_the_progress(api: &Api) -> io::Result<()> {
    let path = "/v1/ops/overview";
    api.on(2, Method::GET, path).send().await?.expect_error(401, "unauthenticated")?;
    let answer = api.on(2, Method::GET, path).token(OPERATOR_TOKEN).send().await?;
    let overview = answer.expect(200)?;
    let groups = overview["groups"].as_array().cloned().unwrap_or_default();
    ensure!(groups.len() == 3, "groups 0..=2: {overview}");
    for group in &groups {
        let leader = group["leader_id"].as_u64().unwrap_or(0);
        let replicas = group["replicas"].as_array().cloned().unwrap_or_default();
        ensure!(replicas.len() == 3, "three replicas: {group}");
        let leaders: Vec<u64> = replicas
            .iter()
            .filter(|replica| replica["role"] == "leader")
            .filter_map(|replica| replica["node_id"].as_u64())
            .collect();
        ensure!(leaders == [leader], "one leader, the one named: {group}");
        for replica in &replicas {
            ensure!(replica["reachable"] == true && replica["lag"].is_u64(), "{replica}");
        }
        ensure!(group["outbox_backlog"].is_u64(), "{group}");
    }
    let show = overview["shows"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|show| show["show_id"] == SHOWS)
        .cloned()
        .unwrap_or_default();
    ensure!(show["title"] == "Hamlet" && show["seat_count"] == 10, "{show}");
    let last = show["history"].as_array().and_then(|history| history.last()).cloned();
    let last = last.unwrap_or_default();
    let total: u64 = ["free", "held", "booked", "reserved"]
        .iter()
        .filter_map(|status| last[*status].as_u64())
        .sum();
    ensure!(total == 10 && last["held"].as_u64() >= Some(1), "progress: {last}");
    Ok(())
}

/// A follower cut off from the rest answers `503` with `Retry-After` while the others serve
/// the new hold, and serves the current map again once healed.
async fn a_cut_off_follower_does_not_serve_a_fresh_looking_map(api: &Api) -> io::Result<()> {
    let cut_off = api.follower(1).await?;
    let others: Vec<u64> = (1..=3).filter(|&node| node != cut_off).collect();
    api.cluster.links().isolate(cut_off);
    let result = async {
        // Wait out any map the node built before the cut (it is served for 50 ms at most).
        tokio::time::sleep(Duration::from_millis(200)).await;
        hold(api, &[4]).await?;
        let answer = api.on(cut_off, Method::GET, &availability_path()).send_once().await?;
        answer.expect_error(503, "unavailable")?;
        ensure!(answer.header("retry-after").is_some(), "no Retry-After: {}", answer.describe());
        ensure!(answer.header("etag").is_none(), "a 503 with an ETag: {}", answer.describe());
        for &node in &others {
            let answer = api.on(node, Method::GET, &availability_path()).send().await?;
            let letters = answer.expect(200)?["seats"].as_str().unwrap_or_default().to_owned();
            ensure!(letters.chars().nth(4) == Some('H'), "node {node}: {letters}");
        }
        Ok(())
    }
    .await;
    api.cluster.links().heal_all();
    result?;
    wait_for(&format!("node {cut_off} serves again"), WAIT, async || {
        let answer = api.on(cut_off, Method::GET, &availability_path()).send_once().await?;
        Ok(match answer.status {
            200 if answer.body["seats"].as_str().and_then(|s| s.chars().nth(4)) == Some('H') => {
                Ok(())
            }
            _ => Err(answer.describe()),
        })
    })
    .await
}
