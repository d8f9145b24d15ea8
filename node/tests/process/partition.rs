//! A partition: a leader cut off from its peers by the proxies cannot acknowledge a hold, while
//! the majority elects a new leader that sells the same seats; after healing, the old leader's
//! write is gone and the seats belong to the acknowledged hold alone.
//!
//! Reference: Raft §5.4 (an entry is committed only once stored on a majority; a later leader
//! overwrites a minority's uncommitted entries), §8 (a client is answered only once its write
//! is committed), and shared/DESIGN.md "Ordering, acknowledgement and fencing" (a leader that
//! lost its term cannot acknowledge anything).

use std::io;
use std::time::Duration;

use testkit::wait_for;
use tokio::time::Instant;
use tonic::Code;

use crate::client::{Client, booking_code, describe};
use crate::workload::{assert_readable, create_open, hold, sorted};
use crate::{WAIT, assert_converged, options, start};

/// The show of the test, placed in data group 1.
const SHOW: u64 = 31;

/// The seats both sides of the partition try to sell.
const SEATS: [u32; 2] = [5, 6];

/// How long the isolated old leader is given to (wrongly) acknowledge its hold: longer than the
/// node's own commit wait (5 s), so that its answer is seen rather than our timeout.
const CUT_OFF_WRITE_WAIT: Duration = Duration::from_secs(7);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_leader_cannot_acknowledge() -> io::Result<()> {
    let cluster = start(options(3)).await?;
    let client = Client::of(&cluster);
    let group = create_open(&client, SHOW, 100, 1).await?;
    // A first hold, so that the group's leader has served a write before it is cut off.
    hold(&client, "warm-up", SHOW, &[1]).await?;
    let old_leader = cluster.leader_of(group).await?;
    let majority: Vec<u64> = cluster.running().into_iter().filter(|&id| id != old_leader).collect();

    cluster.links().isolate(old_leader);
    let isolated = Instant::now();
    println!("group {group}: leader {old_leader} isolated from {majority:?}");

    // The old leader is asked directly (the client is not cut off from it), once.
    let old_token = client.session().await.map_err(io::Error::other)?;
    let old_key = client.new_key();
    let old_address = cluster.address(old_leader)?;
    let old_attempt = {
        let (client, token, key) = (client.clone(), old_token.clone(), old_key.clone());
        tokio::spawn(async move {
            client.hold_once_on(&old_address, &token, &key, SHOW, &SEATS, CUT_OFF_WRITE_WAIT).await
        })
    };
    // Meanwhile the majority elects a leader, which sells the same seats.
    let majority_client = Client::of_nodes(&cluster, &majority)?;
    let acknowledged = hold(&majority_client, "majority-side-buyer", SHOW, &SEATS).await?;
    println!(
        "group {group}: the majority's new leader acknowledged a hold {:?} after the isolation",
        isolated.elapsed()
    );
    let new_leader = cluster.leader_among(group, &majority).await?;
    match old_attempt.await.map_err(io::Error::other)? {
        Ok(reply) => panic!("the isolated leader {old_leader} acknowledged a hold: {reply:?}"),
        Err(status) => {
            println!("the isolated leader answered {}", describe(&status));
            // An answer of the node's own (not our timeout) says the outcome is unknown.
            if !booking_code(&status).is_empty() {
                assert_eq!(status.code(), Code::Unavailable, "{}", describe(&status));
            }
        }
    }

    cluster.links().heal_all();
    let healed = Instant::now();
    wait_for(&format!("node {old_leader} to follow node {new_leader}"), WAIT, async || {
        let status = cluster.group_status(old_leader, group, false).await;
        Ok(match status {
            Ok(status) if status.role != "leader" && status.leader_id == new_leader => Ok(()),
            Ok(status) => Err(format!("{} with leader {}", status.role, status.leader_id)),
            Err(error) => Err(error.to_string()),
        })
    })
    .await?;
    println!("node {old_leader} follows node {new_leader} {:?} after healing", healed.elapsed());

    // The acknowledged hold owns the seats; the old leader's request, sent again under the
    // same idempotency key, is judged afresh (it was never committed, so nothing is stored
    // under its key) and finds the seats taken.
    assert_readable(&client, std::slice::from_ref(&acknowledged)).await?;
    assert_eq!(acknowledged.seats, sorted(&SEATS));
    match client.hold_with_key(&old_token, &old_key, SHOW, &SEATS).await {
        Err(status) => assert_eq!(booking_code(&status), "seat_unavailable", "{status:?}"),
        Ok(reply) => panic!("the isolated leader's hold exists after healing: {reply:?}"),
    }
    let third_token = client.session().await.map_err(io::Error::other)?;
    match client.hold(&third_token, SHOW, &SEATS[..1]).await {
        Err(status) => assert_eq!(booking_code(&status), "seat_unavailable", "{status:?}"),
        Ok(reply) => panic!("seat {} sold twice: {reply:?}", SEATS[0]),
    }
    assert_converged(&cluster).await?;
    Ok(cluster.shutdown().await?)
}
