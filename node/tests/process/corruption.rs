//! A flipped bit on a real node's disk: node `follower` of a data group is killed with `kill -9`
//! (so its newest writes are only in RocksDB's write-ahead log), one bit of that log is flipped,
//! and the node is started again. It must refuse to start, saying why and what to do, rather
//! than open without the records after the bad one: those were synced, and it acknowledged
//! them (entries a quorum counted on, votes). Wiped and readmitted, as the message says, it
//! catches up from its peers, and nothing acknowledged is lost.
//!
//! Reference: issue 20 part 3 ("a corrupted record is detected by checksum and never applied
//! or served, and the replica recovers from its peers"); `raft/src/rocks.rs` (the WAL's
//! recovery mode) and the storage test `corruption`, which shows RocksDB's default recovery
//! opening such a log without them.

use std::io;
use std::path::{Path, PathBuf};

use testkit::{ClusterError, ClusterOptions};

use crate::client::Client;
use crate::snapshot::readmit;
use crate::workload::{assert_readable, create_open, hold_each};
use crate::{assert_converged, options, start};

/// The show of the test, placed in data group 1.
const SHOW: u64 = 43;

/// The largest write-ahead log file of the database in `data`: the one with the most records.
fn largest_wal(data: &Path) -> io::Result<PathBuf> {
    let mut largest: Option<(u64, PathBuf)> = None;
    for entry in std::fs::read_dir(data)? {
        let entry = entry?;
        let path = entry.path();
        if path.extension().is_some_and(|extension| extension == "log") {
            let length = entry.metadata()?.len();
            if largest.as_ref().is_none_or(|(most, _)| length > *most) {
                largest = Some((length, path));
            }
        }
    }
    largest.map(|(_, path)| path).ok_or_else(|| io::Error::other("no WAL in the database"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_wal_has_a_flipped_bit_refuses_to_start_and_is_readmitted_empty()
-> io::Result<()> {
    let cluster = start(ClusterOptions { groups: 1, ..options(3) }).await?;
    let client = Client::of(&cluster);
    let group = create_open(&client, SHOW, 1_000, 1).await?;
    let mut holds = hold_each(&client, SHOW, 0..40, "c", 2).await?;
    let leader = cluster.leader_of(group).await?;
    let follower = cluster.running().into_iter().find(|&id| id != leader).expect("three nodes");
    cluster.kill(follower).await?;

    // Halfway into its largest WAL is a record with many after it.
    let wal = largest_wal(&cluster.node_dir(follower)?.join("data"))?;
    let mut bytes = std::fs::read(&wal)?;
    let at = bytes.len() / 2;
    bytes[at] ^= 0x10;
    std::fs::write(&wal, &bytes)?;
    println!(
        "node {follower}: flipped a bit of byte {at} of {} ({} bytes)",
        wal.display(),
        bytes.len()
    );

    match cluster.restart(follower).await {
        Err(ClusterError::Exited { node, status, log_tail }) => {
            assert_eq!(node, follower);
            assert_eq!(status, "exit status: 1", "{log_tail}");
            assert!(
                log_tail.contains("fails RocksDB's checksums") && log_tail.contains("readmit"),
                "the node says why it does not start, and what to do:\n{log_tail}"
            );
        }
        Err(other) => return Err(other.into()),
        Ok(()) => panic!(
            "node {follower} started on a WAL with a flipped bit:\n{}",
            cluster.log_tail(follower, 30)
        ),
    }
    // The other two carry the group meanwhile.
    holds.extend(hold_each(&client, SHOW, 40..60, "c", 2).await?);

    // What the message says: an empty directory, then readmission.
    cluster.wipe(follower).await?;
    cluster.restart(follower).await?;
    readmit(&cluster, follower).await?;
    assert_converged(&cluster).await?;
    assert_readable(&client, &holds).await?;
    println!("{} holds acknowledged, all read back", holds.len());
    Ok(cluster.shutdown().await?)
}
