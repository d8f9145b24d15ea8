//! A failed fsync under a real node: node 1 runs with a fault library preloaded
//! (`fail_fsync.c`: while a trigger file exists, every fsync and fdatasync fails with EIO, as a
//! disk's failed writeback reports it), leads a data group, and takes holds; then its syncs
//! start failing. The node must stop at once (fail-stop: exit code 74, "storage failed" in its
//! log) rather than carry on and acknowledge writes that a later sync cannot vouch for
//! (PostgreSQL's "fsyncgate"); the other two elect a new leader and take the holds; restarted on
//! a disk that works again, the node catches up, and nothing acknowledged is lost.
//!
//! Reference: issue 20 part 3 ("a node whose sync failed stops (fail-stop) rather than
//! acknowledging anything after it"; "a real-process fail-stop after a failed fsync");
//! `raft/src/failure.rs`; shared/DESIGN.md "Storage".

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use testkit::ClusterError;
use tokio::time::Instant;

use crate::client::Client;
use crate::workload::{assert_readable, create_open, hold, hold_each};
use crate::{WAIT, assert_converged, options, start};

/// The exit code of a node whose storage failed (`node/src/daemon.rs`, BSD's `EX_IOERR`).
const STORAGE_FAILED_EXIT: &str = "exit status: 74";

/// Compiles the fault library into `dir` with the system's C compiler, and returns its path.
fn fault_library(dir: &Path) -> io::Result<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/process/fail_fsync.c");
    let library = dir.join("libfailfsync.so");
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&library)
        .arg(&source)
        .arg("-ldl")
        .output()?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "cc {}: {}: {}",
            source.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(library)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_fsync_fails_stops_and_loses_nothing_acknowledged() -> io::Result<()> {
    let root = tempfile::tempdir()?;
    let library = fault_library(root.path())?;
    let trigger = root.path().join("fail-fsync");
    let mut options = options(3);
    options.dir = Some(root.path().join("cluster"));
    let env = [("LD_PRELOAD", library.as_path()), ("FAIL_FSYNC_WHEN", trigger.as_path())];
    let env = env.iter().map(|(name, path)| (name.to_string(), path.display().to_string()));
    options.node_env.insert(1, env.collect());
    let cluster = start(options).await?;
    let client = Client::of(&cluster);
    // Node 1 leads group 1: every hold of the show waits for node 1's own sync before it is
    // acknowledged.
    let deadline = Instant::now() + WAIT;
    while cluster.leader_of(1).await? != 1 {
        if Instant::now() > deadline {
            return Err(io::Error::other("node 1 does not take group 1"));
        }
        cluster.transfer_leader(1, 1).await?;
    }
    let show = 41;
    create_open(&client, show, 1_000, 1).await?;
    let mut acknowledged = hold_each(&client, show, 1..=5, "before", 5).await?;

    File::create(&trigger)?;
    // Holds go on. The first that node 1 must sync fails its sync: it must stop. Holds asked
    // meanwhile may fail or be answered by the new leader; only the answered ones must survive.
    let started = Instant::now();
    let status = 'stopped: {
        for seat in 100_u32.. {
            if started.elapsed() > WAIT {
                return Err(io::Error::other(format!(
                    "node 1 still runs {WAIT:?} after its syncs began to fail:\n{}",
                    cluster.log_tail(1, 30)
                )));
            }
            let name = format!("during {seat}");
            match hold(&client, &name, show, &[seat]).await {
                Ok(held) => acknowledged.push(held),
                Err(error) => println!("{name}: {error}"),
            }
            match cluster.check_alive() {
                Ok(()) => {}
                Err(ClusterError::Exited { node: 1, status, .. }) => break 'stopped status,
                Err(error) => return Err(error.into()),
            }
        }
        unreachable!("the seats run out only after the wait does")
    };
    println!("node 1 stopped {:?} after its syncs began to fail: {status}", started.elapsed());
    assert_eq!(status, STORAGE_FAILED_EXIT, "{}", cluster.log_tail(1, 30));
    let log = cluster.log_tail(1, 30);
    assert!(log.contains("storage failed"), "node 1's log says why it stopped:\n{log}");
    // The other two took over.
    acknowledged.push(hold(&client, "after", show, &[900]).await?);

    // Restarted on a disk that syncs again, node 1 catches up; nothing acknowledged is lost.
    fs::remove_file(&trigger)?;
    cluster.restart(1).await?;
    assert_readable(&client, &acknowledged).await?;
    assert_converged(&cluster).await?;
    println!("{} holds acknowledged, all read back", acknowledged.len());
    cluster.shutdown().await?;
    Ok(())
}
