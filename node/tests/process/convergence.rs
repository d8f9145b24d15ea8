//! Convergence: after writes to shows in every data group stop, every replica of every group
//! applies the same entries and holds the same state.
//!
//! Reference: Raft §5.3 (Log Matching and State Machine Safety: replicas that applied the same
//! index applied the same entries) and shared/DESIGN.md "The state machine" (apply is
//! deterministic: the same log gives the same digest on every replica).

use std::io;

use testkit::ClusterOptions;
use tokio::task::JoinSet;

use crate::client::Client;
use crate::workload::{assert_readable, create_open, hold_each};
use crate::{assert_converged, options, start};

/// Data groups of the test, each with one show.
const GROUPS: u64 = 4;

/// Holds per show.
const HOLDS: u32 = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_converge_after_quiescence() -> io::Result<()> {
    let cluster = start(ClusterOptions { groups: GROUPS, ..options(3) }).await?;
    let client = Client::of(&cluster);
    let shows: Vec<u64> = (1..=GROUPS).map(|group| 60 + group).collect();
    for (&show, group) in shows.iter().zip(1..=GROUPS) {
        create_open(&client, show, 100, group).await?;
    }
    // Every show is written at once, so that the groups' logs advance side by side.
    let mut writers = JoinSet::new();
    for &show in &shows {
        let client = client.clone();
        writers
            .spawn(async move { hold_each(&client, show, 0..HOLDS, &format!("f{show}"), 3).await });
    }
    let mut holds = Vec::new();
    while let Some(written) = writers.join_next().await {
        holds.extend(written.map_err(io::Error::other)??);
    }

    let converged = assert_converged(&cluster).await?;
    for group in 1..=GROUPS {
        let state = &converged[&group];
        assert_eq!(state.members.len(), 3, "group {group}: {state:?}");
    }
    assert_readable(&client, &holds).await?;
    Ok(cluster.shutdown().await?)
}
