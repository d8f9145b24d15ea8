//! Search over REST against a real 3-node cluster: the operator lists shows of three events
//! at venues in Lisbon and Porto; buyers on every node find a misspelt title, shows near a
//! point (within a radius, nearest first), shows in a time range, and page through results
//! while the operator lists more shows, getting every show that existed throughout exactly
//! once; bad parameters and foreign cursors are refused with the field named.
//!
//! Reference: issue 16 section 2 (tantivy as a derived index on every node; keyword with
//! spelling tolerance, city or postal code, coordinates plus radius, time range, genre; sort by
//! start, distance or relevance; opaque cursors that stay correct while the catalog changes) and
//! section 5 (a misspelt title finds the event, nearby by radius, date ranges, pagination over a
//! catalog being changed concurrently returns every item exactly once), seed
//! 002_559b897692c1c8b2.txt functional requirement 1.

use std::collections::BTreeSet;
use std::io;

use axum::http::Method;
use serde_json::{Value, json};
use testkit::wait_for;

use crate::rest::{Answer, Api, OPERATOR_TOKEN, Report, ensure};
use crate::{WAIT, options};

/// The first show id of this file.
const SHOWS: u64 = 1_800;
/// The shows listed before the searches: six per event.
const LISTED: u64 = 18;
/// The first show's start; show `SHOWS + i` starts `i` hours later.
const START_MS: u64 = 1_900_000_000_000;
const HOUR_MS: u64 = 3_600_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_search() -> io::Result<()> {
    let api = Api::start(options(3)).await?;
    let mut report = Report::default();
    let built = build(&api).await;
    let built_ok = built.is_ok();
    report.check("the_operator_lists_shows", built);
    if built_ok {
        report.check(
            "a_misspelt_title_finds_its_event_on_every_node",
            a_misspelt_title_finds_its_event_on_every_node(&api).await,
        );
        report.check("nearby_within_a_radius", nearby_within_a_radius(&api).await);
        report.check("a_time_range_and_a_genre", a_time_range_and_a_genre(&api).await);
        report.check(
            "paging_while_shows_are_listed_returns_each_once",
            paging_while_shows_are_listed_returns_each_once(&api).await,
        );
        report.check("bad_queries_are_refused", bad_queries_are_refused(&api).await);
    }
    let all_passed = report.all_passed();
    let result = report.finish();
    if all_passed {
        api.shutdown().await?;
    }
    result
}

/// An operator write on node 1 (following leader hints).
async fn write(api: &Api, path: &str, body: Value) -> io::Result<Answer> {
    let call = api.on(1, Method::POST, path).token(OPERATOR_TOKEN).key(&api.key("search"));
    call.json(&body).send().await
}

/// Show `SHOWS + number`: of event 1 + number % 3, in hall 1 + number % 2 (Lisbon, Porto),
/// starting at `starts_at_ms`.
async fn list_show(api: &Api, number: u64, starts_at_ms: u64) -> io::Result<()> {
    let body = json!({"show_id": SHOWS + number, "currency": "EUR", "prices_minor": [1_500],
        "listing": {"event_id": 1 + number % 3, "hall_id": 1 + number % 2,
            "starts_at_ms": starts_at_ms}});
    write(api, "/v1/shows", body).await?.expect(201)?;
    Ok(())
}

/// Venues 1 (Lisbon) and 2 (Porto, about 274 km north), one hall each, events Hamlet
/// (drama), The Magic Flute (opera) and Swan Lake (ballet), and shows 0..LISTED.
async fn build(api: &Api) -> io::Result<()> {
    let venues = [
        (1, "Teatro Nacional", "Lisboa", "1100-201", 38.7148, -9.1405),
        (2, "Coliseu do Porto", "Porto", "4000-064", 41.1466, -8.6060),
    ];
    for (id, name, city, postal_code, latitude, longitude) in venues {
        let venue = json!({"venue_id": id, "name": name, "address": "Rua 1", "city": city,
            "postal_code": postal_code, "latitude": latitude, "longitude": longitude});
        write(api, "/v1/venues", venue).await?.expect(201)?;
        let hall = json!({"hall_id": id, "venue_id": id, "name": "Sala", "sections": [
            {"name": "Plateia", "class": 0, "rows": [{"label": "A", "count": 8, "x": 0, "y": 0}]}]});
        write(api, "/v1/halls", hall).await?.expect(201)?;
    }
    let events = [
        (1, "Hamlet", "drama", "The prince of Denmark."),
        (2, "The Magic Flute", "opera", "Mozart's singspiel."),
        (3, "Swan Lake", "ballet", "Tchaikovsky's ballet."),
    ];
    for (id, title, genre, description) in events {
        let event = json!({"event_id": id, "title": title, "genre": genre, "language": "en",
            "description": description, "duration_min": 150});
        write(api, "/v1/events", event).await?.expect(201)?;
    }
    for number in 0..LISTED {
        list_show(api, number, START_MS + number * HOUR_MS).await?;
    }
    Ok(())
}

/// `GET /v1/search?{query}` on `node`.
async fn search(api: &Api, node: u64, query: &str) -> io::Result<Answer> {
    api.on(node, Method::GET, &format!("/v1/search?{query}")).send().await
}

/// The shows of a 200 answer, in order.
fn shows_of(answer: &Answer) -> io::Result<Vec<u64>> {
    let body = answer.expect(200)?;
    Ok(body["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|result| result["show_id"].as_u64())
        .collect())
}

/// The shows of event `event` among the first `LISTED`, in start order.
fn of_event(event: u64) -> Vec<u64> {
    (0..LISTED).filter(|number| 1 + number % 3 == event).map(|number| SHOWS + number).collect()
}

async fn a_misspelt_title_finds_its_event_on_every_node(api: &Api) -> io::Result<()> {
    for node in 1..=3 {
        // A follower's replica may be a moment behind: wait until it has every show.
        wait_for(&format!("node {node} finds every Hamlet"), WAIT, async || {
            let found = shows_of(&search(api, node, "q=hamlte&limit=100").await?)?;
            Ok(if found == of_event(1) { Ok(()) } else { Err(format!("{found:?}")) })
        })
        .await?;
        let answer = search(api, node, "q=magic%20flut&sort=relevance").await?;
        let found = shows_of(&answer)?;
        ensure!(found == of_event(2), "magic flut on node {node}: {found:?}");
        ensure!(answer.body["results"][0]["title"] == "The Magic Flute", "{}", answer.describe());
        // A venue's name and city are keywords too, accents and case ignored.
        let found = shows_of(&search(api, node, "q=coliseu&limit=100").await?)?;
        ensure!(found.len() as u64 == LISTED / 2, "coliseu: {found:?}");
        let found = shows_of(&search(api, node, "city=LISBOA&limit=100").await?)?;
        ensure!(found.len() as u64 == LISTED / 2, "city=LISBOA: {found:?}");
        let found = shows_of(&search(api, node, "postal_code=4000%20064&limit=100").await?)?;
        ensure!(found.iter().all(|show| (show - SHOWS) % 2 == 1), "postal: {found:?}");
    }
    Ok(())
}

/// Within 20 km of Lisbon's centre only the Lisbon venue's shows; sorted by distance from
/// Porto, Porto's shows come first, each with its distance.
async fn nearby_within_a_radius(api: &Api) -> io::Result<()> {
    let answer = search(api, 2, "lat=38.7223&lon=-9.1393&radius_km=20&limit=100").await?;
    let found = shows_of(&answer)?;
    ensure!(
        found.len() as u64 == LISTED / 2
            && found.iter().all(|show| (show - SHOWS).is_multiple_of(2)),
        "near Lisbon: {found:?}"
    );
    let distance = answer.body["results"][0]["distance_km"].as_f64().unwrap_or(-1.0);
    ensure!((0.5..1.5).contains(&distance), "Teatro Nacional is ~0.9 km away: {distance}");
    let answer = search(api, 3, "lat=41.15&lon=-8.61&sort=distance&limit=100").await?;
    let found = shows_of(&answer)?;
    ensure!(found.len() as u64 == LISTED, "every show has a distance: {found:?}");
    let first_half: Vec<u64> = found.iter().take(LISTED as usize / 2).copied().collect();
    ensure!(first_half.iter().all(|show| (show - SHOWS) % 2 == 1), "Porto first: {found:?}");
    let far = answer.body["results"][LISTED as usize - 1]["distance_km"].as_f64().unwrap_or(0.0);
    ensure!((260.0..290.0).contains(&far), "Lisbon is ~274 km from Porto: {far}");
    Ok(())
}

/// `[from_ms, until_ms)` keeps the shows starting in it; `genre` one event's.
async fn a_time_range_and_a_genre(api: &Api) -> io::Result<()> {
    let (from, until) = (START_MS + 3 * HOUR_MS, START_MS + 7 * HOUR_MS);
    let found =
        shows_of(&search(api, 1, &format!("from_ms={from}&until_ms={until}&limit=100")).await?)?;
    let expected: Vec<u64> = (3..7).map(|number| SHOWS + number).collect();
    ensure!(found == expected, "hours 3..7: {found:?}");
    let found = shows_of(&search(api, 1, "genre=Ballet&limit=100").await?)?;
    ensure!(found == of_event(3), "ballet: {found:?}");
    Ok(())
}

/// Pages of 4, and after each page the operator lists one more show between the first ones
/// (some land before the position the cursor holds, some after): every show listed before the first page comes exactly once, nothing comes
/// twice, and the pages keep start order. (The index's own test pages while another thread
/// inserts; this one runs through real nodes, where each listing is several log entries.)
async fn paging_while_shows_are_listed_returns_each_once(api: &Api) -> io::Result<()> {
    let mut seen = Vec::new();
    let mut starts = Vec::new();
    let mut cursor: Option<String> = None;
    let mut new_shows = (LISTED..LISTED + 8).enumerate();
    for _page in 0..20 {
        let mut query = "limit=4".to_owned();
        if let Some(cursor) = &cursor {
            query.push_str(&format!("&cursor={cursor}"));
        }
        let answer = search(api, 2, &query).await?;
        seen.extend(shows_of(&answer)?);
        let results = answer.body["results"].as_array().cloned().unwrap_or_default();
        starts.extend(results.iter().filter_map(|result| result["starts_at_ms"].as_u64()));
        cursor = answer.body["next_cursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
        if let Some((step, number)) = new_shows.next() {
            // Page `step + 1` ended at hour `4 * step + 3`: even steps land before it, odd ones
            // after it.
            let hour_halves = 8 * step as u64 + 1 + if step % 2 == 1 { 10 } else { 0 };
            let starts_at_ms = START_MS + hour_halves * HOUR_MS / 2;
            list_show(api, number, starts_at_ms).await?;
            // Node 2 answers the next page: wait until its replica has the new show.
            wait_for(&format!("node 2 finds show {}", SHOWS + number), WAIT, async || {
                let found = shows_of(&search(api, 2, "limit=100").await?)?;
                Ok(if found.contains(&(SHOWS + number)) {
                    Ok(())
                } else {
                    Err(format!("{found:?}"))
                })
            })
            .await?;
        }
    }
    println!("paged {} shows while 8 were listed: {seen:?}", seen.len());
    let unique: BTreeSet<u64> = seen.iter().copied().collect();
    ensure!(unique.len() == seen.len(), "a show came twice: {seen:?}");
    for number in 0..LISTED {
        ensure!(unique.contains(&(SHOWS + number)), "show {} missing: {seen:?}", SHOWS + number);
    }
    let new_seen = seen.iter().filter(|&&show| show >= SHOWS + LISTED).count();
    ensure!(new_seen > 0 && new_seen < 8, "the new shows should land on both sides: {seen:?}");
    ensure!(starts.windows(2).all(|pair| pair[0] <= pair[1]), "not in start order: {starts:?}");
    Ok(())
}

async fn bad_queries_are_refused(api: &Api) -> io::Result<()> {
    let cases = [
        ("limit=0", "limit"),
        ("sort=distance", "sort"),
        ("sort=relevance", "sort"),
        ("lat=91&lon=0", "lat"),
        ("lat=38", "lat"),
        ("radius_km=5", "lat"),
        ("cursor=garbage", "cursor"),
        ("colour=red", "query"),
    ];
    for (query, field) in cases {
        let answer = search(api, 1, query).await?;
        let message = answer.body["message"].as_str().unwrap_or_default().to_owned();
        answer.expect_error(400, "invalid_argument")?;
        ensure!(message.contains(field), "{query}: {message}");
    }
    // A cursor is refused under other filters.
    let first = search(api, 1, "limit=2").await?;
    let cursor = first.expect(200)?["next_cursor"].as_str().unwrap_or_default().to_owned();
    let answer = search(api, 1, &format!("limit=2&genre=opera&cursor={cursor}")).await?;
    answer.expect_error(400, "invalid_argument")?;
    Ok(())
}
