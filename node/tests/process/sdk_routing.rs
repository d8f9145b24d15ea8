//! Routing through the Rust SDK against a real 3-node cluster: a client that knows only a
//! follower of the show's group reaches the group's leader by following the follower's hint
//! (for a linearizable seat map too, which then shows the hold acknowledged just before), and a
//! client whose first address is a killed node moves on to the next; every call succeeds. The
//! killed node, restarted, converges with the others.
//!
//! Reference: issue 4 "Tests that must exist" (a request sent to a follower) and "SDK and CLI"
//! (connects to any node, learns and caches group leaders, retries with the same idempotency
//! key); README "Errors a client sees" (a node that does not lead the show's group answers
//! UNAVAILABLE with `booking-leader-id`/`booking-leader-addr`); Raft §6.4 (ReadIndex) for the
//! linearizable seat map; Raft §5.3 for the convergence.

use std::io;

use ::client::{NewShow, Refreshed, SeatStatus};
use proto::booking::SeatMapRequest;
use proto::booking::booking_service_client::BookingServiceClient;
use testkit::wait_for;
use tonic::Code;

use crate::WAIT;
use crate::assert_converged;
use crate::client::booking_code;
use crate::rest::{PRICE_VERSION, ensure};
use crate::sdk::{Sdk, expect_ok, seat_statuses, seats_in};

/// The show of this file.
const SHOW: u64 = 920;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_follows_leader_hints_and_skips_a_dead_node() -> io::Result<()> {
    let sdk = Sdk::start().await?;
    let result = follows_leader_hints_and_skips_a_dead_node(&sdk).await;
    sdk.finish(result).await
}

/// A show in data group 1. A client of only a follower of group 1 makes a session, holds,
/// reads the hold (a linearizable read: the leader's) and checks out; it has learned the
/// leader's address from the hint. The follower refuses a linearizable seat map with the
/// leader's hint, and a fresh client of only the follower follows it: the map shows the hold.
/// Then the other follower is killed: a client that lists it
/// first makes a session, holds and reads, moving on to the live nodes. The killed node is
/// restarted and every group's replicas converge.
async fn follows_leader_hints_and_skips_a_dead_node(sdk: &Sdk) -> io::Result<()> {
    let show =
        NewShow { group_id: 1, open_sales: true, ..NewShow::uniform(SHOW, 20, 1_000, "EUR") };
    let show_id = sdk.create_show(&show).await?.show_id;
    let leader = sdk.cluster.leader_of(1).await?;
    let followers: Vec<u64> =
        sdk.cluster.running().into_iter().filter(|&id| id != leader).collect();
    ensure!(followers.len() == 2, "two followers of group 1: {followers:?}");
    let (follower, doomed) = (followers[0], followers[1]);
    println!("group 1: node {leader} leads; the client knows node {follower}; node {doomed} dies");

    let via_follower = sdk.client_of(&[follower])?;
    let buyer = expect_ok("a session via the follower", via_follower.create_session().await)?;
    let hold = expect_ok(
        "a hold via the follower",
        via_follower.hold(&buyer, show_id, &[1, 2], PRICE_VERSION, Some(&sdk.key("hold"))).await,
    )?;
    ensure!(hold.state == "held" && hold.seats == [1, 2], "{hold:?}");
    let leader_address = sdk.cluster.address(leader)?;
    ensure!(
        via_follower.addresses().contains(&leader_address),
        "the client learned the leader {leader_address} from the hint: {:?}",
        via_follower.addresses()
    );
    let read = expect_ok(
        "a linearizable read via the follower",
        via_follower.get_hold(&buyer, show_id, hold.hold_id).await,
    )?;
    ensure!(read.state == "held" && read.hold_id == hold.hold_id, "{read:?}");
    follower_refuses_a_linearizable_seat_map(sdk, follower, show_id, &leader_address).await?;
    let maps_via_follower = sdk.client_of(&[follower])?;
    let map = expect_ok(
        "a linearizable seat map via the follower",
        maps_via_follower.get_seat_map_linearizable(show_id).await,
    )?;
    ensure!(map.linearizable && map.as_of_log_index >= hold.as_of_log_index, "{map:?}");
    ensure!(
        seats_in(&map, SeatStatus::Held) == [1, 2],
        "the hold acknowledged just before: {:?}",
        seat_statuses(&map)
    );
    ensure!(
        maps_via_follower.addresses().contains(&leader_address),
        "the seat map came from the leader {leader_address}: {:?}",
        maps_via_follower.addresses()
    );
    a_kept_map_follows_the_changes(sdk, follower, show_id).await?;
    let checkout = expect_ok(
        "a checkout via the follower",
        via_follower.checkout(&buyer, show_id, hold.hold_id, Some(&sdk.key("checkout"))).await,
    )?;
    ensure!(checkout.hold_id == hold.hold_id && checkout.payment_id != 0, "{checkout:?}");

    sdk.cluster.kill(doomed).await?;
    let dead_first = sdk.client_of(&[doomed, follower, leader])?;
    let buyer = expect_ok("a session, dead node first", dead_first.create_session().await)?;
    let hold = expect_ok(
        "a hold, dead node first",
        dead_first.hold(&buyer, show_id, &[7], PRICE_VERSION, Some(&sdk.key("hold"))).await,
    )?;
    ensure!(hold.state == "held" && hold.seats == [7], "{hold:?}");
    let read = expect_ok(
        "a read, dead node first",
        dead_first.get_hold(&buyer, show_id, hold.hold_id).await,
    )?;
    ensure!(read.state == "held", "{read:?}");
    let summary = expect_ok("the show, dead node first", dead_first.get_show(show_id).await)?;
    ensure!(summary.show_id == show_id && summary.group_id == 1, "{summary:?}");

    sdk.cluster.restart(doomed).await?;
    assert_converged(&sdk.cluster).await?;
    Ok(())
}

/// A map kept by a client of `follower` only (seats 1 and 2 held): after a hold of seat 3 the
/// follower sends only the seats changed since the map's position, and the patched map is the
/// replica's whole map.
async fn a_kept_map_follows_the_changes(sdk: &Sdk, follower: u64, show_id: u64) -> io::Result<()> {
    let reader = sdk.client_of(&[follower])?;
    let mut kept = expect_ok("follow the seat map", reader.follow_seat_map(show_id).await)?;
    ensure!(kept.classes.len() == 20 && kept.seats.len() == 20, "{kept:?}");
    // Another client holds, so that the reader never learns the leader and keeps asking the
    // follower, whose rebuilds its map's positions are.
    let buyer = expect_ok("a session", sdk.client.create_session().await)?;
    let hold = expect_ok(
        "a hold of seat 3",
        sdk.client.hold(&buyer, show_id, &[3], PRICE_VERSION, Some(&sdk.key("hold"))).await,
    )?;
    let held = SeatStatus::Held as u8;
    let refreshed = wait_for("the kept map with seat 3 held", WAIT, async || {
        let refreshed = expect_ok("refresh", reader.refresh_seat_map(&mut kept).await)?;
        Ok(if kept.seats[3] == held { Ok(refreshed) } else { Err(format!("{kept:?}")) })
    })
    .await?;
    ensure!(matches!(refreshed, Refreshed::Changes(n) if n >= 1), "{refreshed:?}: {kept:?}");
    ensure!(kept.as_of_log_index >= hold.as_of_log_index && kept.group_id == 1, "{kept:?}");
    let taken: Vec<usize> = (0..20).filter(|&seat| kept.seats[seat] != 1).collect();
    ensure!(taken == [1, 2, 3], "seats 1 to 3 held, no other taken: {kept:?}");
    Ok(())
}

/// Asks `follower` (not the leader of the show's group) for a linearizable seat map once,
/// without the SDK: it must refuse with UNAVAILABLE `not_leader` and the leader's address, as
/// it refuses every read only the leader may serve.
///
/// # Errors
///
/// When the follower cannot be reached or answers otherwise.
async fn follower_refuses_a_linearizable_seat_map(
    sdk: &Sdk,
    follower: u64,
    show_id: u64,
    leader_address: &str,
) -> io::Result<()> {
    let mut direct = BookingServiceClient::new(crate::grpc_channel(&sdk.cluster, follower).await?);
    let request = SeatMapRequest { show_id, linearizable: true, ..SeatMapRequest::default() };
    match direct.get_seat_map(request).await {
        Err(status)
            if status.code() == Code::Unavailable
                && booking_code(&status) == "not_leader"
                && status
                    .metadata()
                    .get("booking-leader-addr")
                    .is_some_and(|hint| hint.to_str().ok() == Some(leader_address)) =>
        {
            Ok(())
        }
        other => Err(io::Error::other(format!(
            "a follower must refuse a linearizable seat map with the leader's hint: {other:?}"
        ))),
    }
}
