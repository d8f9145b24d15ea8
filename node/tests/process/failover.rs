//! Failover after a crash: an acknowledged hold survives the SIGKILL of its group's leader, the
//! new leader accepts writes, and it still refuses the held seats to anyone else.
//!
//! Reference: Raft §5.4.1 (Election restriction / Leader Completeness: an entry committed in
//! one term is in the log of every leader of a later term) and shared/DESIGN.md "Ordering,
//! acknowledgement and fencing" (a write is acknowledged only after quorum commit and apply).

use std::io;

use tokio::time::Instant;

use crate::client::{Client, booking_code};
use crate::workload::{assert_readable, create_open, hold};
use crate::{options, start};

/// The show of the test, placed in data group 1.
const SHOW: u64 = 7;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_hold_survives_leader_kill() -> io::Result<()> {
    let cluster = start(options(3)).await?;
    let client = Client::of(&cluster);
    let group = create_open(&client, SHOW, 100, 1).await?;
    let first = hold(&client, "first", SHOW, &[1, 2, 3]).await?;

    let leader = cluster.leader_of(group).await?;
    cluster.kill(leader).await?;
    let killed = Instant::now();
    // The client retries (other nodes, leader hints) until a new leader acknowledges.
    hold(&client, "second", SHOW, &[10]).await?;
    println!(
        "group {group}: node {leader} killed; a new leader acknowledged a hold after {:?}",
        killed.elapsed()
    );
    let new_leader = cluster.leader_of(group).await?;
    assert_ne!(new_leader, leader, "the killed node cannot lead");

    // The hold acknowledged before the crash is still there, and still owns its seats.
    assert_readable(&client, std::slice::from_ref(&first)).await?;
    let rival_token = client.session().await.map_err(io::Error::other)?;
    let rival = client.hold(&rival_token, SHOW, &[2, 3, 4]).await;
    match rival {
        Err(status) => assert_eq!(booking_code(&status), "seat_unavailable", "{status:?}"),
        Ok(reply) => panic!("seats 2 and 3 are held by {first:?}, yet sold again: {reply:?}"),
    }
    Ok(cluster.shutdown().await?)
}
