//! The catalog over REST against a real 3-node cluster: the operator builds venues in two
//! cities, a hall with its seat geometry and events; a show made in the hall has exactly the
//! hall's seats and classes (its inventory and its catalog record agree); buyers browse events →
//! venues → halls → shows on every node; the geometry is cacheable for ever (`immutable`,
//! `ETag`, `304`); bad input and conflicts get their codes and change nothing.
//!
//! Reference: issue 16 section 1 (the catalog in the metadata group, show creation from a hall,
//! labels), section 3 (geometry served once per hall, long cache lifetime), seed
//! 002_559b897692c1c8b2.txt section 04 (hall geometry stored once, not per show).

use std::io;

use axum::http::Method;
use serde_json::{Value, json};
use testkit::wait_for;

use crate::rest::{Answer, Api, OPERATOR_TOKEN, Report, ensure};
use crate::{WAIT, options};

/// The first show id of this file.
const SHOWS: u64 = 1_600;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_catalog_browse_and_geometry() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let mut report = Report::default();
    let built = build_catalog(&api).await;
    let built_ok = built.is_ok();
    report.check("the_operator_builds_a_catalog", built.map(|_| ()));
    if built_ok {
        report.check(
            "a_show_in_a_hall_has_the_halls_seats",
            a_show_in_a_hall_has_the_halls_seats(&api).await,
        );
        report.check("buyers_browse_on_every_node", buyers_browse_on_every_node(&api).await);
        report.check("geometry_is_cacheable_for_ever", geometry_is_cacheable_for_ever(&api).await);
        report.check(
            "bad_catalog_input_changes_nothing",
            bad_catalog_input_changes_nothing(&api).await,
        );
    }
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// An operator write on node 1 (following leader hints), answered `status`.
async fn write(api: &Api, method: Method, path: &str, body: Option<Value>) -> io::Result<Answer> {
    let mut call = api.on(1, method, path).token(OPERATOR_TOKEN).key(&api.key("catalog"));
    if let Some(body) = body {
        call = call.json(&body);
    }
    call.send().await
}

fn venue(id: u64, name: &str, city: &str, postal_code: &str, lat: f64, lon: f64) -> Value {
    json!({"venue_id": id, "name": name, "address": "Main Street 1", "city": city,
        "postal_code": postal_code, "latitude": lat, "longitude": lon})
}

/// Hall 11 of venue 1: stalls (class 0) rows A and B of 4 and 5 seats, a balcony (class 1) row
/// C of 3 seats numbered from 10.
fn hall() -> Value {
    json!({"hall_id": 11, "venue_id": 1, "name": "Sala 1", "sections": [
        {"name": "Stalls", "class": 0, "rows": [
            {"label": "A", "count": 4, "x": 0, "y": 0, "dx": 10},
            {"label": "B", "count": 5, "x": 0, "y": 10, "dx": 10}]},
        {"name": "Balcony", "class": 1, "rows": [
            {"label": "C", "first_number": 10, "count": 3, "x": 5, "y": 30, "dx": 10}]}]})
}

fn event(id: u64, title: &str, genre: &str) -> Value {
    json!({"event_id": id, "title": title, "description": "On stage.", "genre": genre,
        "language": "en", "duration_min": 120, "images": ["https://img.example/1.jpg"]})
}

/// Venues 1 (Lisbon) and 2 (Porto), hall 11 in venue 1, events 21 and 22, and show SHOWS of
/// event 21 in hall 11.
async fn build_catalog(api: &Api) -> io::Result<()> {
    let writes = [
        ("/v1/venues", venue(1, "Odeon", "Lisbon", "1100-148", 38.7139, -9.1394)),
        ("/v1/venues", venue(2, "Coliseu", "Porto", "4000-064", 41.1466, -8.6060)),
        ("/v1/halls", hall()),
        ("/v1/events", event(21, "Hamlet", "drama")),
        ("/v1/events", event(22, "The Magic Flute", "opera")),
    ];
    for (path, body) in writes {
        let answer = write(api, Method::POST, path, Some(body.clone())).await?;
        let written = answer.expect(201)?;
        ensure!(written["changed"] == true, "{path}: {}", answer.describe());
        // The same create again is a success that changes nothing.
        let again = write(api, Method::POST, path, Some(body)).await?;
        ensure!(again.expect(200)?["changed"] == false, "{path} again: {}", again.describe());
    }
    let show = json!({"show_id": SHOWS, "currency": "EUR", "prices_minor": [2_000, 3_500],
        "listing": {"event_id": 21, "hall_id": 11, "starts_at_ms": 1_900_000_000_000u64}});
    let answer = write(api, Method::POST, "/v1/shows", Some(show.clone())).await?;
    answer.expect(201)?;
    // A retry (an unknown outcome, say) finds every step done.
    write(api, Method::POST, "/v1/shows", Some(show)).await?.expect(201)?;
    Ok(())
}

/// The show's inventory (seat count, classes by seat, prices) is the hall's geometry, seat by
/// seat, and its summary names its event, hall and venue.
async fn a_show_in_a_hall_has_the_halls_seats(api: &Api) -> io::Result<()> {
    let geometry = api.on(1, Method::GET, "/v1/halls/11/geometry").send().await?;
    let geometry = geometry.expect(200)?.clone();
    let seats = geometry["seats"].as_array().cloned().unwrap_or_default();
    let labels: Vec<&str> = seats.iter().filter_map(|seat| seat["label"].as_str()).collect();
    ensure!(
        labels == ["A1", "A2", "A3", "A4", "B1", "B2", "B3", "B4", "B5", "C10", "C11", "C12"],
        "labels: {labels:?}"
    );
    let path = format!("/v1/shows/{SHOWS}/seats?consistency=linearizable");
    let leader_of = |body: &Value| body["group_id"].as_u64().unwrap_or(1);
    let summary = api.on(1, Method::GET, &format!("/v1/shows/{SHOWS}")).send().await?;
    let summary = summary.expect(200)?.clone();
    let map = api.to_leader(leader_of(&summary), Method::GET, &path).await?.send().await?;
    let map = map.expect(200)?;
    let classes: Vec<u64> = seats.iter().filter_map(|seat| seat["class"].as_u64()).collect();
    let show_classes: Vec<u64> =
        map["classes"].as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
    ensure!(classes == show_classes, "hall classes {classes:?}, show classes {show_classes:?}");
    ensure!(summary["seat_count"] == seats.len(), "seat count: {summary}");
    ensure!(map["prices_minor"] == json!([2_000, 3_500]), "prices: {map}");
    let listing = &summary["listing"];
    ensure!(
        listing["event_id"] == 21
            && listing["hall_id"] == 11
            && listing["venue_id"] == 1
            && listing["title"] == "Hamlet"
            && listing["city"] == "Lisbon"
            && listing["starts_at_ms"] == 1_900_000_000_000u64,
        "listing: {listing}"
    );
    Ok(())
}

/// Every node's replica serves the browse path events → venues → halls → shows.
async fn buyers_browse_on_every_node(api: &Api) -> io::Result<()> {
    for node in 1..=3 {
        let get = async |path: &str| -> io::Result<Value> {
            Ok(api.on(node, Method::GET, path).send().await?.expect(200)?.clone())
        };
        // A follower's replica may be a moment behind: wait until it has the show listed.
        wait_for(&format!("node {node} lists the show"), WAIT, async || {
            let shows = get("/v1/events/21/shows").await?;
            let ids: Vec<u64> = shows["shows"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|show| show["show_id"].as_u64())
                .collect();
            Ok(if ids == [SHOWS] { Ok(()) } else { Err(format!("shows {ids:?}")) })
        })
        .await?;
        let events = get("/v1/events").await?;
        ensure!(events["events"].as_array().map(Vec::len) == Some(2), "events: {events}");
        let opera = get("/v1/events?genre=Opera").await?;
        ensure!(opera["events"][0]["event_id"] == 22, "opera: {opera}");
        let hamlet = get("/v1/events/21").await?;
        let venues: Vec<&Value> = hamlet["venues"].as_array().into_iter().flatten().collect();
        ensure!(venues.len() == 1 && venues[0]["venue_id"] == 1, "hamlet's venues: {hamlet}");
        let porto = get("/v1/venues?city=porto").await?;
        ensure!(
            porto["venues"].as_array().map(Vec::len) == Some(1)
                && porto["venues"][0]["venue_id"] == 2,
            "porto: {porto}"
        );
        let postal = get("/v1/venues?postal_code=1100-148").await?;
        ensure!(postal["venues"][0]["latitude"] == 38.7139, "postal: {postal}");
        let odeon = get("/v1/venues/1").await?;
        ensure!(
            odeon["halls"][0]["hall_id"] == 11 && odeon["halls"][0]["seat_count"] == 12,
            "odeon: {odeon}"
        );
        let hall = get("/v1/halls/11").await?;
        ensure!(hall["venue"]["name"] == "Odeon", "hall: {hall}");
        let shows = get("/v1/halls/11/shows?from_ms=1900000000000").await?;
        ensure!(shows["shows"][0]["show_id"] == SHOWS, "hall shows: {shows}");
        let none = get("/v1/halls/11/shows?until_ms=1900000000000").await?;
        ensure!(none["shows"].as_array().is_some_and(Vec::is_empty), "before: {none}");
    }
    Ok(())
}

/// The geometry is served `immutable` with an `ETag`, and `If-None-Match` gets a `304`.
async fn geometry_is_cacheable_for_ever(api: &Api) -> io::Result<()> {
    let answer = api.on(2, Method::GET, "/v1/halls/11/geometry").send().await?;
    answer.expect(200)?;
    let cache = answer.header("cache-control").unwrap_or_default().to_owned();
    ensure!(cache.contains("immutable") && cache.contains("max-age=31536000"), "{cache}");
    let etag = answer.header("etag").unwrap_or_default().to_owned();
    ensure!(!etag.is_empty(), "no ETag: {}", answer.describe());
    let again = api
        .on(3, Method::GET, "/v1/halls/11/geometry")
        .header("if-none-match", &etag)
        .send()
        .await?;
    ensure!(again.status == 304, "If-None-Match: {}", again.describe());
    let missing = api.on(1, Method::GET, "/v1/halls/99/geometry").send().await?;
    missing.expect_error(404, "catalog_not_found")?;
    Ok(())
}

/// Bad input is a 400 naming the field, conflicts have their codes, and none of them changes
/// the catalog or places a show.
async fn bad_catalog_input_changes_nothing(api: &Api) -> io::Result<()> {
    let before = api.on(1, Method::GET, "/v1/venues/1").send().await?.expect(200)?.clone();
    let mut twice = hall();
    twice["hall_id"] = json!(12);
    twice["sections"][1]["rows"][0]["label"] = json!("A");
    let answer = write(api, Method::POST, "/v1/halls", Some(twice)).await?;
    let message = answer.body["message"].as_str().unwrap_or_default().to_owned();
    answer.expect_error(400, "invalid_argument")?;
    ensure!(message.contains("used twice"), "{message}");

    let other = venue(1, "Another", "Lisbon", "1100-148", 38.0, -9.0);
    let answer = write(api, Method::POST, "/v1/venues", Some(other)).await?;
    ensure!(
        answer.expect_error(409, "catalog_exists")?["kind"] == "venue",
        "{}",
        answer.describe()
    );
    let bad = venue(3, "Nowhere", "Lisbon", "1100-148", 91.0, 0.0);
    write(api, Method::POST, "/v1/venues", Some(bad))
        .await?
        .expect_error(400, "invalid_argument")?;
    let update = venue(9, "Ghost", "Lisbon", "1100-148", 0.0, 0.0);
    let answer = write(api, Method::PUT, "/v1/venues/9", Some(update)).await?;
    answer.expect_error(404, "catalog_not_found")?;
    let unauthenticated = api
        .on(1, Method::POST, "/v1/venues")
        .key(&api.key("catalog"))
        .json(&venue(4, "Free", "Lisbon", "1100-148", 0.0, 0.0))
        .send()
        .await?;
    ensure!(unauthenticated.status == 401, "{}", unauthenticated.describe());

    // A retired event gets no new show, and the refusal places nothing.
    write(api, Method::DELETE, "/v1/events/22", None).await?.expect(200)?;
    let show = SHOWS + 1;
    let body = json!({"show_id": show, "currency": "EUR", "prices_minor": [1, 2],
        "listing": {"event_id": 22, "hall_id": 11, "starts_at_ms": 1_900_000_000_000u64}});
    let answer = write(api, Method::POST, "/v1/shows", Some(body.clone())).await?;
    answer.expect_error(409, "catalog_retired")?;
    let mut one_price = body;
    one_price["listing"]["event_id"] = json!(21);
    one_price["prices_minor"] = json!([1]);
    let answer = write(api, Method::POST, "/v1/shows", Some(one_price)).await?;
    answer.expect_error(400, "invalid_argument")?;
    let absent = api.on(1, Method::GET, &format!("/v1/shows/{show}")).send().await?;
    absent.expect_error(404, "show_not_found")?;
    let events = api.on(1, Method::GET, "/v1/events").send().await?;
    ensure!(events.expect(200)?["events"].as_array().map(Vec::len) == Some(1), "retired shown");

    let after = api.on(1, Method::GET, "/v1/venues/1").send().await?.expect(200)?.clone();
    ensure!(after["venue"] == before["venue"], "venue 1 changed: {before} -> {after}");
    Ok(())
}
