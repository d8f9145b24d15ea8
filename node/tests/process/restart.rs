//! Durability across a whole-cluster crash: holds acknowledged before every node was killed
//! with SIGKILL are all there, with their seats, once the nodes restart on their data.
//!
//! Reference: shared/DESIGN.md "Storage" (an append is reported flushed only after the WAL is
//! synced; restart loads the snapshot and replays the log tail) and Raft §5.4 (a committed entry
//! is on a majority's stable storage).

use std::io;

use tokio::time::Instant;

use crate::client::Client;
use crate::workload::{Held, assert_readable, create_open, hold_each};
use crate::{options, start};

/// The shows of the test, one in each data group.
const SHOWS: [(u64, u64); 2] = [(21, 1), (22, 2)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_holds_survive_restart_of_every_node() -> io::Result<()> {
    let cluster = start(options(3)).await?;
    let client = Client::of(&cluster);
    let mut holds: Vec<Held> = Vec::new();
    for (show, group) in SHOWS {
        create_open(&client, show, 100, group).await?;
        holds.extend(hold_each(&client, show, 1..=5, &format!("b{show}"), 3).await?);
    }

    let nodes = cluster.running();
    for &id in &nodes {
        cluster.kill(id).await?;
    }
    let restarted = Instant::now();
    cluster.restart_all(&nodes).await?;
    println!("every node serves again after {:?}", restarted.elapsed());
    for group in cluster.group_ids() {
        let leader = cluster.leader_of(group).await?;
        println!("group {group}: node {leader} leads, {:?} after the restart", restarted.elapsed());
    }
    assert_readable(&client, &holds).await?;
    println!("all {} holds read back {:?} after the restart", holds.len(), restarted.elapsed());
    Ok(cluster.shutdown().await?)
}
