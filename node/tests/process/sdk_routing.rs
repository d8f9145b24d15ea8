//! Routing through the Rust SDK against a real 3-node cluster: a client that knows only a
//! follower of the show's group reaches the group's leader by following the follower's hint,
//! and a client whose first address is a killed node moves on to the next; every call succeeds.
//! The killed node, restarted, converges with the others.
//!
//! Reference: issue 4 "Tests that must exist" (a request sent to a follower) and "SDK and CLI"
//! (connects to any node, learns and caches group leaders, retries with the same idempotency
//! key); README "Errors a client sees" (a node that does not lead the show's group answers
//! UNAVAILABLE with `booking-leader-id`/`booking-leader-addr`); Raft §5.3 for the convergence.

use std::io;

use ::client::NewShow;

use crate::harness::assert_converged;
use crate::rest::{PRICE_VERSION, ensure};
use crate::sdk::{Sdk, expect_ok};

/// The show of this file.
const SHOW: u64 = 920;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_follows_leader_hints_and_skips_a_dead_node() -> io::Result<()> {
    let mut sdk = Sdk::start().await?;
    let result = follows_leader_hints_and_skips_a_dead_node(&mut sdk).await;
    sdk.finish(result)
}

/// A show in data group 1. A client of only a follower of group 1 makes a session, holds,
/// reads the hold (a linearizable read: the leader's) and checks out; it has learned the
/// leader's address from the hint. Then the other follower is killed: a client that lists it
/// first makes a session, holds and reads, moving on to the live nodes. The killed node is
/// restarted and every group's replicas converge.
async fn follows_leader_hints_and_skips_a_dead_node(sdk: &mut Sdk) -> io::Result<()> {
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
    let leader_address = sdk.cluster.address(leader);
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
    let checkout = expect_ok(
        "a checkout via the follower",
        via_follower.checkout(&buyer, show_id, hold.hold_id, Some(&sdk.key("checkout"))).await,
    )?;
    ensure!(checkout.hold_id == hold.hold_id && checkout.payment_id != 0, "{checkout:?}");

    sdk.cluster.kill(doomed)?;
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
