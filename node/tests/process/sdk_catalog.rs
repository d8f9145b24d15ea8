//! The catalog and search through the SDK (gRPC) against a real 3-node cluster: the operator
//! creates a venue, a hall and an event with `change_catalog` (the same create again changes
//! nothing), makes a show in the hall with `create_show` and a listing (its seats are the
//! hall's), renames and retires; a buyer's `search` finds a misspelt title, a show near a point,
//! and stops finding it once its event is retired; a buyer holds seats by their labels and
//! reads them back on the hold and the booking; bad input and conflicts get their codes.
//!
//! Reference: issue 16 section 1 (operator create/update/retire through REST, gRPC, SDK and
//! bookctl, validated with clear errors; creating a show instantiates its seats from the hall)
//! and section 2 (search); section 1's seat ids on the wire as the hall's labels.

use std::io;

use ::client::{
    CatalogAction, CatalogEvent, CatalogHall, CatalogRecord, CatalogRow, CatalogSection,
    CatalogVenue, Client, NewShow, SearchRequest, ShowListing,
};
use testkit::wait_for;
use tonic::Code;

use crate::WAIT;
use crate::rest::{Report, ensure};
use crate::sdk::{Sdk, expect_ok, expect_rejected};

/// The first show id of this file.
const SHOWS: u64 = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_catalog_and_search() -> io::Result<()> {
    let sdk = Sdk::start().await?;
    let mut report = Report::default();
    let built = the_operator_builds_a_catalog(&sdk).await;
    let built_ok = built.is_ok();
    report.check("the_operator_builds_a_catalog", built);
    if built_ok {
        report.check("a_buyer_searches", a_buyer_searches(&sdk).await);
        report.check("a_buyer_names_seats_by_label", a_buyer_names_seats_by_label(&sdk).await);
        report.check("errors_have_their_codes", errors_have_their_codes(&sdk).await);
        report.check(
            "a_retired_event_is_no_longer_found",
            a_retired_event_is_no_longer_found(&sdk).await,
        );
    }
    let result = report.finish();
    sdk.finish(result).await
}

fn venue() -> CatalogRecord {
    CatalogRecord::Venue(CatalogVenue {
        venue_id: 1,
        name: "Coliseu do Porto".into(),
        address: "Rua de Passos Manuel 137".into(),
        city: "Porto".into(),
        postal_code: "4000-385".into(),
        latitude: 41.1466,
        longitude: -8.6060,
    })
}

fn row(label: &str, count: u32, y: i32) -> CatalogRow {
    CatalogRow { label: label.into(), count, y, dx: Some(10), ..CatalogRow::default() }
}

/// Hall 1: stalls row A (8 seats, class 0), balcony row B (4 seats numbered from 20, class 1).
fn hall(labels: [&str; 2]) -> CatalogRecord {
    let balcony = CatalogRow { first_number: Some(20), ..row(labels[1], 4, 20) };
    CatalogRecord::Hall(CatalogHall {
        hall_id: 1,
        venue_id: 1,
        name: "Sala Principal".into(),
        sections: vec![
            CatalogSection { name: "Plateia".into(), class: 0, rows: vec![row(labels[0], 8, 0)] },
            CatalogSection { name: "Balcão".into(), class: 1, rows: vec![balcony] },
        ],
    })
}

fn event(title: &str) -> CatalogRecord {
    CatalogRecord::Event(CatalogEvent {
        event_id: 1,
        title: title.into(),
        description: "Mozart's singspiel.".into(),
        genre: "opera".into(),
        language: "de".into(),
        duration_min: 160,
        images: vec![],
    })
}

async fn change(
    client: &Client,
    action: CatalogAction,
    record: CatalogRecord,
) -> io::Result<::client::CatalogChangeReply> {
    expect_ok("change_catalog", client.change_catalog(action, record, None).await)
}

async fn the_operator_builds_a_catalog(sdk: &Sdk) -> io::Result<()> {
    let client = &sdk.client;
    for record in [venue(), hall(["A", "B"]), event("The Magic Flute")] {
        let first = change(client, CatalogAction::Create, record.clone()).await?;
        ensure!(first.changed, "created: {first:?}");
        let again = change(client, CatalogAction::Create, record).await?;
        ensure!(!again.changed && again.id == first.id, "{again:?}");
    }
    let listing = ShowListing { event_id: 1, hall_id: 1, starts_at_ms: 1_900_000_000_000 };
    let show = NewShow {
        prices_minor: vec![6_000, 3_500],
        layout: vec![],
        listing: Some(listing),
        open_sales: true,
        ..NewShow::uniform(SHOWS, 0, 0, "EUR")
    };
    let placed = sdk.create_show(&show).await?;
    ensure!(placed.show_id == SHOWS, "{placed:?}");
    // The show's seats are the hall's: 8 of class 0, then 4 of class 1.
    let map = expect_ok("seat map", client.get_seat_map_linearizable(SHOWS).await)?;
    ensure!(map.classes == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1], "classes: {:?}", map.classes);
    ensure!(map.prices_minor == [6_000, 3_500], "prices: {:?}", map.prices_minor);
    // A rename is an update that changes something.
    let renamed = change(client, CatalogAction::Update, event("Die Zauberflöte")).await?;
    ensure!(renamed.changed && renamed.kind == "event", "{renamed:?}");
    Ok(())
}

/// What `search` finds now, by show id.
async fn found(client: &Client, request: SearchRequest) -> io::Result<Vec<u64>> {
    let reply = expect_ok("search", client.search(&request).await)?;
    Ok(reply.results.iter().map(|result| result.show_id).collect())
}

async fn a_buyer_searches(sdk: &Sdk) -> io::Result<()> {
    let client = &sdk.client;
    // Any node answers from its replica: wait until the one asked has the rename.
    wait_for("a misspelt title is found", WAIT, async || {
        let request = SearchRequest {
            q: "zauberflote".into(),
            sort: "relevance".into(),
            ..Default::default()
        };
        Ok(if found(client, request).await? == [SHOWS] { Ok(()) } else { Err("not yet".into()) })
    })
    .await?;
    let near = SearchRequest {
        lat: Some(41.15),
        lon: Some(-8.61),
        radius_km: Some(5.0),
        sort: "distance".into(),
        ..Default::default()
    };
    let reply = expect_ok("search near", client.search(&near).await)?;
    let first = reply.results.first().cloned().unwrap_or_default();
    ensure!(first.show_id == SHOWS && first.city == "Porto", "near: {reply:?}");
    ensure!(first.distance_km.is_some_and(|km| km < 1.0), "distance: {first:?}");
    let far = SearchRequest { lat: Some(38.72), lon: Some(-9.14), radius_km: Some(50.0), ..near };
    ensure!(found(client, far).await?.is_empty(), "Porto is not within 50 km of Lisbon");
    Ok(())
}

/// A hold of `A1` and `B20` (seats 0 and 8): the reply, the hold read back and, once paid, the
/// booking name both numbers and labels; a label the hall lacks holds nothing.
async fn a_buyer_names_seats_by_label(sdk: &Sdk) -> io::Result<()> {
    let client = &sdk.client;
    let buyer = sdk.session().await?;
    let missing = client.hold_labels(&buyer, SHOWS, &["A1", "Z9"], 1, 0, None).await;
    let message = expect_rejected(
        "a label the hall lacks",
        missing,
        Code::InvalidArgument,
        "invalid_argument",
    )?;
    ensure!(message.contains("Z9"), "{message}");
    let key = sdk.key("labels");
    let held = client.hold_labels(&buyer, SHOWS, &["B20", "A1"], 1, 0, Some(&key)).await;
    let held = expect_ok("hold A1 and B20", held)?;
    ensure!(held.seats == [0, 8] && held.seat_labels == ["A1", "B20"], "{held:?}");
    ensure!(held.price_minor == 9_500, "6000 + 3500: {held:?}");
    let read = expect_ok("read the hold", client.get_hold(&buyer, SHOWS, held.hold_id).await)?;
    ensure!(read.seat_labels == ["A1", "B20"], "{read:?}");
    let checkout = client.checkout(&buyer, SHOWS, held.hold_id, Some(&sdk.key("pay"))).await;
    let checkout = expect_ok("checkout", checkout)?;
    let paid = sdk.pay(1, SHOWS, checkout.payment_id, checkout.amount_minor).await?;
    ensure!(paid["effect"] == "confirmed", "the webhook's answer: {paid}");
    let confirmed = expect_ok("read the hold", client.get_hold(&buyer, SHOWS, held.hold_id).await)?;
    ensure!(confirmed.booking_id != 0, "{confirmed:?}");
    let booking = client.get_booking(&buyer, SHOWS, confirmed.booking_id).await;
    let booking = expect_ok("read the booking", booking)?;
    ensure!(booking.seats == [0, 8] && booking.seat_labels == ["A1", "B20"], "{booking:?}");
    Ok(())
}

async fn errors_have_their_codes(sdk: &Sdk) -> io::Result<()> {
    let client = &sdk.client;
    let twice = client.change_catalog(CatalogAction::Create, hall(["A", "A"]), None).await;
    let message =
        expect_rejected("a label twice", twice, Code::InvalidArgument, "invalid_argument")?;
    ensure!(message.contains("used twice"), "{message}");
    let mut other = hall(["A", "B"]);
    if let CatalogRecord::Hall(hall) = &mut other {
        hall.sections[0].rows[0].count = 9;
    }
    let moved = client.change_catalog(CatalogAction::Create, other, None).await;
    expect_rejected("another hall under the id", moved, Code::Aborted, "catalog_exists")?;
    let mut missing = event("Nothing");
    if let CatalogRecord::Event(event) = &mut missing {
        event.event_id = 99;
    }
    let update = client.change_catalog(CatalogAction::Update, missing, None).await;
    expect_rejected("update of a missing event", update, Code::NotFound, "catalog_not_found")?;
    let listing = CatalogRecord::ListingShowId(SHOWS);
    let relist = client.change_catalog(CatalogAction::Update, listing, None).await;
    expect_rejected("a listing updated", relist, Code::InvalidArgument, "invalid_argument")?;
    let buyer = sdk.client_of(&[1, 2, 3])?;
    let anonymous = buyer.change_catalog(CatalogAction::Create, venue(), None).await;
    expect_rejected("no operator token", anonymous, Code::Unauthenticated, "unauthenticated")?;
    let cursor = SearchRequest { cursor: "garbage".into(), ..Default::default() };
    let message = expect_rejected(
        "a garbage cursor",
        client.search(&cursor).await,
        Code::InvalidArgument,
        "invalid_argument",
    )?;
    ensure!(message.contains("cursor"), "{message}");
    Ok(())
}

async fn a_retired_event_is_no_longer_found(sdk: &Sdk) -> io::Result<()> {
    let client = &sdk.client;
    let retired = change(client, CatalogAction::Retire, event("")).await?;
    ensure!(retired.changed, "{retired:?}");
    wait_for("the retired event's show leaves the results", WAIT, async || {
        let request = SearchRequest { q: "zauberflote".into(), ..Default::default() };
        Ok(if found(client, request).await?.is_empty() { Ok(()) } else { Err("found".into()) })
    })
    .await?;
    // A retired event takes no new show.
    let listing = ShowListing { event_id: 1, hall_id: 1, starts_at_ms: 1_900_000_000_000 };
    let show = NewShow {
        prices_minor: vec![1, 2],
        layout: vec![],
        listing: Some(listing),
        ..NewShow::uniform(SHOWS + 1, 0, 0, "EUR")
    };
    let refused = client.create_show(&show, None).await;
    expect_rejected(
        "a show of a retired event",
        refused,
        Code::FailedPrecondition,
        "catalog_retired",
    )?;
    Ok(())
}
