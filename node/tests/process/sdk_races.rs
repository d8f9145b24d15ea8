//! The seed races of issue 4 through the Rust SDK against a real 3-node cluster: two sessions
//! racing for one seat, access by a session that does not own the hold, a double-tap accept of
//! a waitlist offer, and a retry after an unknown outcome (a hold sent to a leader cut off from
//! its peers) and the same key with another payload.
//!
//! Reference: issue 4 "Tests that must exist" (the seed races); shared/DESIGN.md "Idempotency"
//! (the same key and payload return the stored outcome, another payload under the key is
//! `idempotency_key_reused`); the `statemachine` hold rules (all or nothing, a conflict is
//! `seat_unavailable`), reads (owner-checked: `not_owner`) and waitlist rules (accepting makes
//! a hold in the same apply); the SDK's `Error::Unavailable` (an unknown outcome carries the key
//! to retry with); Raft §5.4 (an uncommitted entry commits later or is overwritten, never both
//! ways).

use std::io;
use std::time::Duration;

use ::client::{Client, Config, Error, HoldReply, NewShow, SeatStatus};
use tokio::task::JoinSet;
use tonic::Code;

use crate::rest::{PRICE_VERSION, Report, ensure};
use crate::sdk::{Sdk, expect_ok, expect_rejected, seat_statuses, seats_in};

/// The first show id of this file (each scenario uses its own).
const SHOWS: u64 = 910;

/// The retry budget and attempt timeout of the client whose hold is sent to a cut-off leader:
/// shorter than an election timeout (600 ms at least), so that the links are usually healed
/// before the followers elect another leader (either way is correct, and checked the same).
const GIVE_UP_AFTER: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_seed_races() -> io::Result<()> {
    let sdk = Sdk::start().await?;
    let mut report = Report::default();
    report.check("two_sessions_race_for_one_seat", two_sessions_race_for_one_seat(&sdk).await);
    report.check(
        "another_session_cannot_touch_a_hold",
        another_session_cannot_touch_a_hold(&sdk).await,
    );
    report.check(
        "double_tap_accept_returns_one_hold",
        double_tap_accept_returns_one_hold(&sdk).await,
    );
    // Last: it cuts a leader off for a moment, which may move leaderships.
    report.check(
        "retry_after_an_unknown_outcome_returns_the_same_hold",
        retry_after_an_unknown_outcome_returns_the_same_hold(&sdk).await,
    );
    let result = report.finish();
    sdk.finish(result).await
}

/// A show of `seats` seats at 10.00 EUR in data group `group`, on sale, with a waitlist if
/// `waitlist`; returns its id.
async fn open_show(
    sdk: &Sdk,
    show_id: u64,
    seats: u32,
    group: u64,
    waitlist: bool,
) -> io::Result<u64> {
    let show = NewShow {
        group_id: group,
        waitlist,
        open_sales: true,
        ..NewShow::uniform(show_id, seats, 1_000, "EUR")
    };
    Ok(sdk.create_show(&show).await?.show_id)
}

/// Two sessions, each with its own SDK client (one knows the nodes as 1, 2, 3, the other as 3,
/// 2, 1), ask for the same seat at the same moment: exactly one gets the hold, the other is
/// rejected with `seat_unavailable` (ABORTED). Repeated for four seats; the seat map then shows
/// the four winners' seats held, and nothing else.
async fn two_sessions_race_for_one_seat(sdk: &Sdk) -> io::Result<()> {
    let show_id = open_show(sdk, SHOWS, 20, 2, false).await?;
    let clients = [sdk.client_of(&[1, 2, 3])?, sdk.client_of(&[3, 2, 1])?];
    let mut last_index = 0;
    for seat in 0..4u32 {
        let mut racers = JoinSet::new();
        for client in &clients {
            let token = sdk.session().await?;
            let client = client.clone();
            let key = sdk.key("race");
            racers.spawn(async move {
                client.hold(&token, show_id, &[seat, seat + 10], PRICE_VERSION, Some(&key)).await
            });
        }
        let mut won: Vec<HoldReply> = Vec::new();
        let mut lost: Vec<Result<HoldReply, Error>> = Vec::new();
        while let Some(result) = racers.join_next().await {
            match result.map_err(io::Error::other)? {
                Ok(hold) => won.push(hold),
                other => lost.push(other),
            }
        }
        ensure!(won.len() == 1 && lost.len() == 1, "seat {seat}: won {won:?}, lost {lost:?}");
        ensure!(won[0].seats == [seat, seat + 10] && won[0].state == "held", "{won:?}");
        for loser in lost {
            let what = format!("seat {seat}'s loser");
            expect_rejected(&what, loser, Code::Aborted, "seat_unavailable")?;
        }
        last_index = last_index.max(won[0].as_of_log_index);
    }
    let map = sdk.seat_map_as_of(show_id, last_index).await?;
    let held = seats_in(&map, SeatStatus::Held);
    ensure!(held == [0, 1, 2, 3, 10, 11, 12, 13], "four winners of two seats: {held:?}");
    // The SDK speaks gRPC: its holds show in the nodes' metrics as the REST ones do.
    let (winners, conflicts) =
        (sdk.hold_outcomes("held").await?, sdk.hold_outcomes("seat_unavailable").await?);
    ensure!(winners >= 4 && conflicts >= 4, "metrics: {winners} held, {conflicts} conflicts");
    Ok(())
}

/// The leader of the show's group is cut off from its peers, and a client that knows only it
/// and gives up after [`GIVE_UP_AFTER`] sends a hold there: the leader proposes it but cannot
/// commit it, so the SDK fails with `Unavailable`, outcome unknown, carrying the caller's key.
/// The links are healed (the entry then commits, or a new leader drops it). Retried with the
/// same key through two other clients, the hold is one hold, the same on each retry, and the
/// seat map shows its seats held once. The same key with other seats is
/// `idempotency_key_reused` (ABORTED) and holds nothing.
async fn retry_after_an_unknown_outcome_returns_the_same_hold(sdk: &Sdk) -> io::Result<()> {
    let show_id = open_show(sdk, SHOWS + 1, 20, 1, false).await?;
    let buyer = sdk.session().await?;
    let key = sdk.key("lost");
    let leader = sdk.cluster.leader_of(1).await?;
    let config =
        Config { retry_budget: GIVE_UP_AFTER, attempt_timeout: GIVE_UP_AFTER, ..Config::default() };
    let hasty = expect_ok(
        "connect the hasty client",
        Client::with_config(vec![sdk.cluster.address(leader)?], config),
    )?;
    let hasty = sdk.cluster.trusting(hasty)?;
    sdk.cluster.links().isolate(leader);
    let first = hasty.hold(&buyer, show_id, &[1, 2, 3], PRICE_VERSION, Some(&key)).await;
    sdk.cluster.links().heal_all();
    match first {
        Err(Error::Unavailable { outcome_unknown: true, idempotency_key, .. }) => ensure!(
            idempotency_key.as_deref() == Some(key.as_str()),
            "the error carries the key to retry with: {idempotency_key:?}"
        ),
        other => {
            return Err(io::Error::other(format!(
                "an isolated leader's hold: expected an unknown outcome, got {other:?}"
            )));
        }
    }

    let mut holds = Vec::new();
    for client in [&sdk.client, &sdk.client_of(&[3, 2, 1])?] {
        let retry = client.hold(&buyer, show_id, &[1, 2, 3], PRICE_VERSION, Some(&key)).await;
        holds.push(expect_ok("retry with the same key", retry)?);
    }
    let now_leading = sdk.cluster.leader_of(1).await?;
    println!("group 1: node {leader} was cut off; node {now_leading} leads after the retries");
    let hold_ids: Vec<u64> = holds.iter().map(|hold| hold.hold_id).collect();
    ensure!(hold_ids[0] == hold_ids[1], "two retries made holds {hold_ids:?}");
    ensure!(holds.iter().all(|hold| hold.seats == [1, 2, 3]), "{holds:?}");

    let reused = sdk.client.hold(&buyer, show_id, &[4], PRICE_VERSION, Some(&key)).await;
    expect_rejected("the same key for seat 4", reused, Code::Aborted, "idempotency_key_reused")?;
    let map = sdk.seat_map_as_of(show_id, holds[1].as_of_log_index).await?;
    let held = seats_in(&map, SeatStatus::Held);
    ensure!(held == [1, 2, 3], "one hold of 1-3, seat 4 free: {:?}", seat_statuses(&map));
    Ok(())
}

/// Another session may not read, cancel or check out a hold (`not_owner`, PERMISSION_DENIED);
/// the owner still reads it `held`.
async fn another_session_cannot_touch_a_hold(sdk: &Sdk) -> io::Result<()> {
    let show_id = open_show(sdk, SHOWS + 2, 20, 2, false).await?;
    let client = &sdk.client;
    let (owner, stranger) = (sdk.session().await?, sdk.session().await?);
    let hold = expect_ok(
        "the owner holds seat 9",
        client.hold(&owner, show_id, &[9], PRICE_VERSION, Some(&sdk.key("hold"))).await,
    )?;
    let read = client.get_hold(&stranger, show_id, hold.hold_id).await;
    expect_rejected("a stranger reads the hold", read, Code::PermissionDenied, "not_owner")?;
    let cancel = client.cancel_hold(&stranger, show_id, hold.hold_id, None).await;
    expect_rejected("a stranger cancels the hold", cancel, Code::PermissionDenied, "not_owner")?;
    let checkout = client.checkout(&stranger, show_id, hold.hold_id, None).await;
    expect_rejected("a stranger checks out", checkout, Code::PermissionDenied, "not_owner")?;
    let read = expect_ok("the owner reads", client.get_hold(&owner, show_id, hold.hold_id).await)?;
    ensure!(read.state == "held" && read.seats == [9], "{read:?}");
    Ok(())
}

/// A show of 2 seats with a waitlist: A holds both, B joins the waitlist for 2, A cancels, and B
/// is offered seats 0-1 in the same step. B double-taps accept with one key, the two taps at
/// once through two clients: both get the same hold of the offer's seats. A third tap under
/// another key gets that hold or `offer_not_active`, never a second hold; the entry reads
/// `accepted` and the seat map shows seats 0-1 held once.
async fn double_tap_accept_returns_one_hold(sdk: &Sdk) -> io::Result<()> {
    let show_id = open_show(sdk, SHOWS + 3, 2, 1, true).await?;
    let client = &sdk.client;
    let (a, b) = (sdk.session().await?, sdk.session().await?);
    let a_hold = expect_ok(
        "A holds both seats",
        client.hold(&a, show_id, &[0, 1], PRICE_VERSION, Some(&sdk.key("hold"))).await,
    )?;
    let entry = expect_ok(
        "B joins the waitlist",
        client.join_waitlist(&b, show_id, 2, Some(&sdk.key("join"))).await,
    )?;
    ensure!(entry.state == "waiting" && entry.quantity == 2, "{entry:?}");
    expect_ok(
        "A cancels",
        client.cancel_hold(&a, show_id, a_hold.hold_id, Some(&sdk.key("cancel"))).await,
    )?;
    let entry = expect_ok(
        "B reads its entry",
        client.get_waitlist_entry(&b, show_id, entry.entry_id).await,
    )?;
    let offer = entry.offer.clone().unwrap_or_default();
    ensure!(entry.state == "offered" && offer.state == "open", "{entry:?}");
    ensure!(offer.seats == [0, 1] && offer.entry_id == entry.entry_id, "{entry:?}");

    let key = sdk.key("accept");
    let mut taps = JoinSet::new();
    for client in [sdk.client_of(&[2, 3, 1])?, sdk.client_of(&[3, 1, 2])?] {
        let (token, key) = (b.clone(), key.clone());
        taps.spawn(async move {
            client.accept_offer(&token, show_id, offer.offer_id, Some(&key)).await
        });
    }
    let mut holds = Vec::new();
    while let Some(tap) = taps.join_next().await {
        let hold = expect_ok("a tap of accept", tap.map_err(io::Error::other)?)?;
        ensure!(hold.seats == [0, 1] && hold.state == "held", "{hold:?}");
        ensure!(hold.offer_id == offer.offer_id, "{hold:?}");
        holds.push(hold);
    }
    ensure!(holds[0].hold_id == holds[1].hold_id, "one key made two holds: {holds:?}");
    let third = client.accept_offer(&b, show_id, offer.offer_id, Some(&sdk.key("again"))).await;
    match third {
        Ok(hold) => ensure!(hold.hold_id == holds[0].hold_id, "a second hold: {hold:?}"),
        other => {
            expect_rejected("a third tap", other, Code::Aborted, "offer_not_active")?;
        }
    }
    let entry = expect_ok(
        "B reads its entry",
        client.get_waitlist_entry(&b, show_id, entry.entry_id).await,
    )?;
    ensure!(entry.state == "accepted", "{entry:?}");
    let index = holds.iter().map(|hold| hold.as_of_log_index).max().unwrap_or(0);
    let map = sdk.seat_map_as_of(show_id, index.max(entry.as_of_log_index)).await?;
    ensure!(seats_in(&map, SeatStatus::Held) == [0, 1], "{:?}", seat_statuses(&map));
    Ok(())
}
