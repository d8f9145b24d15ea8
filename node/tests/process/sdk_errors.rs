//! Error codes through the Rust SDK against a real 3-node cluster: each arrives as
//! `client::Error::Rejected` with the gRPC code and the `booking-code` of the one table in
//! `node/src/error.rs` (`invalid_argument`, `unauthenticated`, `forbidden`, `show_not_found`,
//! `hold_not_found`, `hold_expired`, `grant_required`), and changes nothing. Input the SDK
//! itself refuses before sending is `client::Error::InvalidArgument` instead. On the same
//! cluster, the operator's controls of a show and the payment read through the SDK: each works,
//! a repeat answers the same, and bad input or a missing credential is refused with its code.
//!
//! Reference: issue 4 "Tests that must exist" (every error code) and "SDK and CLI" (typed
//! errors); issue 15 section 3 (the operator's controls on every surface); shared/DESIGN.md
//! "Errors" (one mapping table, stable codes); the `statemachine` hold rules (1..=10 distinct
//! seats; an expired hold cannot be checked out), admission rules (a hold needs a grant while
//! the lane is on) and price rules (a hold quotes the current price version).

use std::io;

use ::client::{Error, NewShow, SeatStatus, ShowReply};
use testkit::wait_for;
use tonic::Code;

use crate::WAIT;
use crate::rest::{PRICE_VERSION, Report, ensure};
use crate::sdk::{Sdk, expect_ok, expect_rejected, seat_statuses, seats_in};

/// The first show id of this file (each scenario uses its own).
const SHOWS: u64 = 930;

/// A show id no scenario creates.
const MISSING_SHOW: u64 = 999_999;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_error_codes() -> io::Result<()> {
    let sdk = Sdk::start().await?;
    let mut report = Report::default();
    report.check(
        "bad_seat_lists_are_refused_by_the_node",
        bad_seat_lists_are_refused_by_the_node(&sdk).await,
    );
    report.check("forged_token_is_unauthenticated", forged_token_is_unauthenticated(&sdk).await);
    report.check(
        "unknown_show_and_hold_are_not_found",
        unknown_show_and_hold_are_not_found(&sdk).await,
    );
    report.check(
        "expired_hold_cannot_be_checked_out",
        expired_hold_cannot_be_checked_out(&sdk).await,
    );
    report.check("lane_requires_a_grant", lane_requires_a_grant(&sdk).await);
    report.check(
        "operator_calls_need_the_operator_token",
        operator_calls_need_the_operator_token(&sdk).await,
    );
    report.check(
        "the_operator_controls_a_show_through_the_sdk",
        the_operator_controls_a_show_through_the_sdk(&sdk).await,
    );
    let result = report.finish();
    sdk.finish(result).await
}

/// Creates `show` with its sales open; returns its id.
async fn open_show(sdk: &Sdk, show: NewShow) -> io::Result<u64> {
    let show = NewShow { open_sales: true, ..show };
    Ok(sdk.create_show(&show).await?.show_id)
}

/// Eleven seats, a seat twice, no seat, and a seat past the end are refused by the node:
/// INVALID_ARGUMENT with `invalid_argument` (`seat_out_of_range` for the last). The SDK does
/// not check seat lists itself (`hold_with_grant` sends them as given), which the variant shows:
/// `Error::Rejected` is a node's answer, while input the SDK refuses before sending, such as an
/// idempotency key of 129 characters, is `Error::InvalidArgument`. Nothing is held.
async fn bad_seat_lists_are_refused_by_the_node(sdk: &Sdk) -> io::Result<()> {
    let show_id =
        open_show(sdk, NewShow { group_id: 1, ..NewShow::uniform(SHOWS, 20, 1_000, "EUR") })
            .await?;
    let client = &sdk.client;
    let buyer = sdk.session().await?;
    let eleven: Vec<u32> = (0..11).collect();
    let cases: [(&str, &[u32], &str); 4] = [
        ("eleven seats", &eleven, "invalid_argument"),
        ("a seat twice", &[2, 5, 2], "invalid_argument"),
        ("no seat", &[], "invalid_argument"),
        ("seat 20 of 0..20", &[20], "seat_out_of_range"),
    ];
    for (what, seats, code) in cases {
        let result =
            client.hold(&buyer, show_id, seats, PRICE_VERSION, Some(&sdk.key("bad"))).await;
        expect_rejected(what, result, Code::InvalidArgument, code)?;
    }
    let long_key = "k".repeat(129);
    let refused = client.hold(&buyer, show_id, &[1], PRICE_VERSION, Some(&long_key)).await;
    ensure!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "the SDK refuses a 129-character key before sending: {refused:?}"
    );
    let leader = sdk.cluster.leader_of(1).await?;
    let map = expect_ok("the seat map", sdk.client_of(&[leader])?.get_seat_map(show_id).await)?;
    ensure!(
        seats_in(&map, SeatStatus::Free).len() == 20,
        "nothing held: {:?}",
        seat_statuses(&map)
    );
    Ok(())
}

/// A token of the right shape that no node issued (its tag is not the cluster's HMAC) is
/// UNAUTHENTICATED `unauthenticated` on a hold, a read and a queue join; nothing is held.
async fn forged_token_is_unauthenticated(sdk: &Sdk) -> io::Result<()> {
    let show_id =
        open_show(sdk, NewShow { group_id: 2, ..NewShow::uniform(SHOWS + 1, 20, 1_000, "EUR") })
            .await?;
    let client = &sdk.client;
    let genuine = sdk.session().await?;
    // A genuine token's random part and issue time, under a tag no node made.
    let body = genuine.rsplit_once('_').map_or(genuine.as_str(), |(body, _tag)| body);
    let forged = format!("{body}_{}", "00".repeat(16));
    ensure!(forged.len() == genuine.len(), "the forgery has a token's shape: {genuine} {forged}");
    let hold = client.hold(&forged, show_id, &[1], PRICE_VERSION, None).await;
    expect_rejected("a hold", hold, Code::Unauthenticated, "unauthenticated")?;
    let read = client.get_hold(&forged, show_id, 1).await;
    expect_rejected("a read", read, Code::Unauthenticated, "unauthenticated")?;
    let join = client.join_waitlist(&forged, show_id, 1, None).await;
    expect_rejected("a waitlist join", join, Code::Unauthenticated, "unauthenticated")?;
    let leader = sdk.cluster.leader_of(2).await?;
    let map = expect_ok("the seat map", sdk.client_of(&[leader])?.get_seat_map(show_id).await)?;
    ensure!(
        seats_in(&map, SeatStatus::Free).len() == 20,
        "nothing held: {:?}",
        seat_statuses(&map)
    );
    Ok(())
}

/// A show never created is NOT_FOUND `show_not_found` for its summary, its seat map and a hold;
/// a hold id never issued in an existing show is `hold_not_found`.
async fn unknown_show_and_hold_are_not_found(sdk: &Sdk) -> io::Result<()> {
    let client = &sdk.client;
    let buyer = sdk.session().await?;
    let show = client.get_show(MISSING_SHOW).await;
    expect_rejected("its summary", show, Code::NotFound, "show_not_found")?;
    let map = client.get_seat_map(MISSING_SHOW).await;
    expect_rejected("its seat map", map, Code::NotFound, "show_not_found")?;
    let hold = client.hold(&buyer, MISSING_SHOW, &[1], PRICE_VERSION, None).await;
    expect_rejected("a hold", hold, Code::NotFound, "show_not_found")?;
    let show_id =
        open_show(sdk, NewShow { group_id: 1, ..NewShow::uniform(SHOWS + 2, 20, 1_000, "EUR") })
            .await?;
    let read = client.get_hold(&buyer, show_id, 999).await;
    expect_rejected("hold 999", read, Code::NotFound, "hold_not_found")?;
    Ok(())
}

/// A hold of a show whose holds live 1 s, checked out once its deadline has passed:
/// FAILED_PRECONDITION `hold_expired` (a node's answer, never a timeout, which the SDK does not
/// retry), the hold reads `expired` and its seat is free again.
async fn expired_hold_cannot_be_checked_out(sdk: &Sdk) -> io::Result<()> {
    let show = NewShow {
        group_id: 2,
        hold_ttl_ms: 1_000,
        ..NewShow::uniform(SHOWS + 3, 20, 1_000, "EUR")
    };
    let show_id = open_show(sdk, show).await?;
    let client = &sdk.client;
    let buyer = sdk.session().await?;
    let hold = expect_ok(
        "a 1 s hold",
        client.hold(&buyer, show_id, &[4], PRICE_VERSION, Some(&sdk.key("hold"))).await,
    )?;
    ensure!(hold.deadline_ms > 0, "{hold:?}");
    // Waits for the hold to read expired (the leader's tick worker expires it by log time),
    // rather than sleeping for its TTL.
    wait_for("the 1 s hold to expire", WAIT, async || {
        Ok(match client.get_hold(&buyer, show_id, hold.hold_id).await {
            Ok(read) if read.state == "expired" => Ok(()),
            other => Err(format!("{other:?}")),
        })
    })
    .await?;
    let checkout = client.checkout(&buyer, show_id, hold.hold_id, Some(&sdk.key("late"))).await;
    expect_rejected("a late checkout", checkout, Code::FailedPrecondition, "hold_expired")?;
    let read = expect_ok("read the hold", client.get_hold(&buyer, show_id, hold.hold_id).await)?;
    ensure!(read.state == "expired", "{read:?}");
    let map = sdk.seat_map_as_of(show_id, read.as_of_log_index).await?;
    ensure!(
        seats_in(&map, SeatStatus::Free).len() == 20,
        "seat 4 free again: {:?}",
        seat_statuses(&map)
    );
    Ok(())
}

/// While a show's admission lane is on, a hold without a grant is FAILED_PRECONDITION
/// `grant_required`, and holds nothing.
async fn lane_requires_a_grant(sdk: &Sdk) -> io::Result<()> {
    let show = NewShow {
        group_id: 1,
        admission_window: Some(1),
        ..NewShow::uniform(SHOWS + 4, 20, 1_000, "EUR")
    };
    let show_id = open_show(sdk, show).await?;
    let client = &sdk.client;
    let buyer = sdk.session().await?;
    let hold = client.hold(&buyer, show_id, &[1], PRICE_VERSION, Some(&sdk.key("hold"))).await;
    expect_rejected("a hold without a grant", hold, Code::FailedPrecondition, "grant_required")?;
    let ticket = expect_ok("join the lane", client.join_queue(&buyer, show_id, None).await)?;
    ensure!(ticket.state == "granted", "{ticket:?}");
    let map = sdk.seat_map_as_of(show_id, ticket.as_of_log_index).await?;
    ensure!(
        seats_in(&map, SeatStatus::Free).len() == 20,
        "nothing held: {:?}",
        seat_statuses(&map)
    );
    Ok(())
}

/// Operator calls (create a show, open sales, release capacity, read an audit trail) from a
/// client without the operator token are UNAUTHENTICATED `unauthenticated`; with a buyer's
/// session token in its place they are PERMISSION_DENIED `forbidden`. The show is not created.
async fn operator_calls_need_the_operator_token(sdk: &Sdk) -> io::Result<()> {
    let existing =
        open_show(sdk, NewShow { group_id: 2, ..NewShow::uniform(SHOWS + 5, 20, 1_000, "EUR") })
            .await?;
    let buyer = sdk.session().await?;
    // Two separate clients: `with_operator_token` gives the token to every clone of a client.
    let anonymous = sdk.client_of(&[1, 2, 3])?;
    let impostor = expect_ok(
        "a buyer's token as operator token",
        sdk.client_of(&[1, 2, 3])?.with_operator_token(&buyer),
    )?;
    let new_show = NewShow { open_sales: true, ..NewShow::uniform(SHOWS + 6, 20, 1_000, "EUR") };
    for (who, client, status, code) in [
        ("without a token", &anonymous, Code::Unauthenticated, "unauthenticated"),
        ("with a buyer's token", &impostor, Code::PermissionDenied, "forbidden"),
    ] {
        let created = client.create_show(&new_show, Some(&sdk.key("show"))).await;
        expect_rejected(&format!("create a show {who}"), created, status, code)?;
        let opened = client.open_sales(existing).await;
        expect_rejected(&format!("open sales {who}"), opened, status, code)?;
        let released = client.capacity_released(existing, &sdk.key("evt"), &[1]).await;
        expect_rejected(&format!("release capacity {who}"), released, status, code)?;
        let audit = client.get_audit(existing, "hold", 1).await;
        expect_rejected(&format!("read an audit trail {who}"), audit, status, code)?;
    }
    let missing = sdk.client.get_show(new_show.show_id).await;
    expect_rejected("the show refused", missing, Code::NotFound, "show_not_found")?;
    Ok(())
}

/// The summary of `show_id` as the leader of `group` has applied it, without its `as_of`: what
/// the operator's controls change.
async fn settings(sdk: &Sdk, group: u64, show_id: u64) -> io::Result<ShowReply> {
    let leader = sdk.cluster.leader_of(group).await?;
    let read = sdk.client_of(&[leader])?.get_show(show_id).await;
    let summary = expect_ok("the show's summary", read)?;
    Ok(ShowReply { as_of_log_index: 0, as_of_log_time_ms: 0, ..summary })
}

/// The operator's controls through the SDK, on one show: a client without the operator token
/// is UNAUTHENTICATED and one with a buyer's token PERMISSION_DENIED on each (cancel included);
/// bad prices and windows are INVALID_ARGUMENT and change nothing; closing sales refuses holds
/// (`show_not_on_sale`) until they are opened again, a repeat of each saying `duplicate`; new
/// prices make a hold quoting the old version `price_version_mismatch`, and the same prices
/// again say `duplicate`; the lane on makes a hold without a grant `grant_required`; the
/// waitlist goes on and off keeping its policy version; a payment is read by its owner and the
/// operator, not by a stranger or an anonymous client; cancelling releases the holds and again
/// says `duplicate`; the show's audit trail has one operator record per change.
async fn the_operator_controls_a_show_through_the_sdk(sdk: &Sdk) -> io::Result<()> {
    let show = NewShow { group_id: 2, ..NewShow::uniform(SHOWS + 7, 20, 1_000, "EUR") };
    let show_id = open_show(sdk, show).await?;
    let client = &sdk.client;
    let buyer = sdk.session().await?;
    let before = settings(sdk, 2, show_id).await?;

    let anonymous = sdk.client_of(&[1, 2, 3])?;
    let impostor = expect_ok(
        "a buyer's token as operator token",
        sdk.client_of(&[1, 2, 3])?.with_operator_token(&buyer),
    )?;
    for (who, other, status, code) in [
        ("without a token", &anonymous, Code::Unauthenticated, "unauthenticated"),
        ("with a buyer's token", &impostor, Code::PermissionDenied, "forbidden"),
    ] {
        let closed = other.close_sales(show_id).await;
        expect_rejected(&format!("close sales {who}"), closed, status, code)?;
        let cancelled = other.cancel_show(show_id).await;
        expect_rejected(&format!("cancel the show {who}"), cancelled, status, code)?;
        let prices = other.set_prices(show_id, 2, &[5]).await;
        expect_rejected(&format!("set prices {who}"), prices, status, code)?;
        let lane = other.configure_admission(show_id, true, 1).await;
        expect_rejected(&format!("turn the lane on {who}"), lane, status, code)?;
        let waitlist = other.configure_waitlist(show_id, true).await;
        expect_rejected(&format!("turn the waitlist on {who}"), waitlist, status, code)?;
    }
    let invalid = Code::InvalidArgument;
    let refused = client.set_prices(show_id, 0, &[2_000]).await;
    expect_rejected("price version 0", refused, invalid, "invalid_argument")?;
    let refused = client.set_prices(show_id, 2, &[]).await;
    expect_rejected("no price", refused, invalid, "invalid_argument")?;
    let refused = client.set_prices(show_id, 2, &[2_000, 900]).await;
    expect_rejected("a price for a class the show lacks", refused, invalid, "invalid_argument")?;
    let refused = client.configure_admission(show_id, true, 0).await;
    expect_rejected("window 0", refused, invalid, "invalid_argument")?;
    let refused = client.configure_admission(show_id, true, 10_001).await;
    expect_rejected("window 10001", refused, invalid, "invalid_argument")?;
    let after = settings(sdk, 2, show_id).await?;
    ensure!(after == before, "refused calls changed the show: {before:?} -> {after:?}");

    // Sales: closed refuses holds, open again allows them; repeats answer the same.
    for repeat in [false, true] {
        let closed = expect_ok("close sales", client.close_sales(show_id).await)?;
        ensure!(closed.status == "closed" && closed.group_id == 2, "{closed:?}");
        ensure!(closed.duplicate == repeat, "{closed:?}");
    }
    let hold = client.hold(&buyer, show_id, &[1], PRICE_VERSION, Some(&sdk.key("closed"))).await;
    expect_rejected("a hold while closed", hold, Code::FailedPrecondition, "show_not_on_sale")?;
    for repeat in [false, true] {
        let opened = expect_ok("open sales", client.open_sales(show_id).await)?;
        ensure!(opened.status == "on_sale" && opened.duplicate == repeat, "{opened:?}");
    }
    let held = client.hold(&buyer, show_id, &[1], PRICE_VERSION, Some(&sdk.key("open"))).await;
    let held = expect_ok("a hold while open", held)?;

    // Prices: version 2 in force; the old version is refused, the new one pays the new price.
    for repeat in [false, true] {
        let prices = expect_ok("set prices", client.set_prices(show_id, 2, &[2_000]).await)?;
        ensure!(prices.price_version == 2 && prices.prices_minor == [2_000], "{prices:?}");
        ensure!(prices.duplicate == repeat, "{prices:?}");
    }
    let other = client.set_prices(show_id, 2, &[2_500]).await;
    let mismatch = "price_version_mismatch";
    expect_rejected("other prices under v2", other, Code::FailedPrecondition, mismatch)?;
    let summary = settings(sdk, 2, show_id).await?;
    ensure!(summary.price_version == 2 && summary.prices_minor == [2_000], "{summary:?}");
    let stale = client.hold(&buyer, show_id, &[2], PRICE_VERSION, Some(&sdk.key("v1"))).await;
    expect_rejected(
        "a hold quoting v1",
        stale,
        Code::FailedPrecondition,
        "price_version_mismatch",
    )?;
    let fresh = expect_ok("a hold quoting v2", client.hold(&buyer, show_id, &[2], 2, None).await)?;
    ensure!(fresh.price_minor == 2_000, "{fresh:?}");

    // Admission on: a hold without a grant is refused; off: it goes through.
    for _ in 0..2 {
        let lane = expect_ok("lane on", client.configure_admission(show_id, true, 3).await)?;
        ensure!(lane.enabled && lane.window == 3, "{lane:?}");
    }
    let ungranted = client.hold(&buyer, show_id, &[3], 2, Some(&sdk.key("lane"))).await;
    expect_rejected(
        "a hold without a grant",
        ungranted,
        Code::FailedPrecondition,
        "grant_required",
    )?;
    let lane = expect_ok("lane off", client.configure_admission(show_id, false, 1).await)?;
    ensure!(!lane.enabled, "{lane:?}");
    expect_ok("a hold with the lane off", client.hold(&buyer, show_id, &[3], 2, None).await)?;

    // Waitlist on and off, its policy version kept.
    for enabled in [true, true, false] {
        let waitlist =
            expect_ok("the waitlist", client.configure_waitlist(show_id, enabled).await)?;
        ensure!(waitlist.enabled == enabled && waitlist.policy_version == 1, "{waitlist:?}");
        let summary = settings(sdk, 2, show_id).await?;
        ensure!(summary.waitlist.is_some_and(|w| w.enabled == enabled), "{summary:?}");
    }

    // A payment: its owner and the operator read it; a stranger and an anonymous client do not.
    let checkout = client.checkout(&buyer, show_id, held.hold_id, None).await;
    let checkout = expect_ok("checkout", checkout)?;
    let mine = client.get_payment(Some(&buyer), show_id, checkout.payment_id).await;
    let mine = expect_ok("the owner reads the payment", mine)?;
    ensure!(mine.state == "pending" && mine.hold_id == held.hold_id, "{mine:?}");
    ensure!(mine.amount_minor == 1_000 && !mine.refund_owed, "quoted at version 1: {mine:?}");
    let operator = client.get_payment(None, show_id, checkout.payment_id).await;
    let operator = expect_ok("the operator reads the payment", operator)?;
    ensure!(operator.payment_id == mine.payment_id && operator.state == mine.state, "{operator:?}");
    let stranger = sdk.session().await?;
    let read = client.get_payment(Some(&stranger), show_id, checkout.payment_id).await;
    expect_rejected("a stranger's read", read, Code::PermissionDenied, "not_owner")?;
    let read = anonymous.get_payment(None, show_id, checkout.payment_id).await;
    expect_rejected("an anonymous read", read, Code::Unauthenticated, "unauthenticated")?;
    let read = client.get_payment(None, show_id, 999).await;
    expect_rejected("payment 999", read, Code::NotFound, "payment_not_found")?;

    // Cancel: the three holds are released (one of them processing); again, a duplicate.
    let cancelled = expect_ok("cancel the show", client.cancel_show(show_id).await)?;
    ensure!(cancelled.holds_released == 3 && !cancelled.duplicate, "{cancelled:?}");
    let again = expect_ok("cancel it again", client.cancel_show(show_id).await)?;
    ensure!(again.duplicate && again.holds_released == 0, "{again:?}");
    let late = client.open_sales(show_id).await;
    expect_rejected("open a cancelled show", late, Code::FailedPrecondition, "show_cancelled")?;
    ensure!(settings(sdk, 2, show_id).await?.status == "cancelled", "cancelled");

    // The audit trail: created, opened, closed, opened, prices, lane on and off, waitlist on
    // and off, cancelled; repeats and refusals left no record.
    let trail = expect_ok("the show's trail", client.get_audit(show_id, "show", show_id).await)?;
    let reasons: Vec<&str> = trail.records.iter().map(|record| record.reason.as_str()).collect();
    ensure!(
        reasons
            == [
                "requested",
                "requested",
                "requested",
                "requested",
                "prices_set",
                "admission_configured",
                "admission_configured",
                "waitlist_configured",
                "waitlist_configured",
                "requested",
            ],
        "{trail:?}"
    );
    let last = trail.records.last().map(|record| (record.to.as_str(), record.actor.as_str()));
    ensure!(last == Some(("cancelled", "operator")), "{trail:?}");
    Ok(())
}
