//! A full disk under a real node: its data directory on a small tmpfs the test mounts, filled
//! with a file until less than the node's reserve is free. The node must refuse writes with a
//! clear error (507 / RESOURCE_EXHAUSTED `disk_full`, nothing changed), keep serving reads, and
//! take writes again as soon as there is room, losing nothing it acknowledged, across a kill -9
//! and restart too.
//!
//! Reference: issue 20 part 3 ("a full disk ... must make the node refuse writes with a clear
//! error and recover when space returns, losing nothing acknowledged"); shared/DESIGN.md
//! "Storage".

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use tokio::time::Instant;

use crate::client::{Client, booking_code, describe};
use crate::workload::{Held, assert_readable, create_open, hold, hold_each};
use crate::{WAIT, assert_converged, options, start};

/// The tmpfs under node 1's directory.
const TMPFS_BYTES: u64 = 256 << 20;
/// The node's reserve (`--disk-reserve-bytes`).
const RESERVE_BYTES: u64 = 48 << 20;
/// What the filler leaves free: under the reserve, with room for Raft's own writes.
const LEFT_FREE_BYTES: u64 = 16 << 20;

/// A tmpfs mounted for the test, unmounted when dropped (also when the test fails).
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` at `path` (made if missing). Needs root, as the suite runs.
    fn mount(path: &Path, bytes: u64) -> io::Result<Tmpfs> {
        fs::create_dir_all(path)?;
        run(Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={bytes}"))
            .args(["tmpfs".as_ref(), path.as_os_str()]))?;
        Ok(Tmpfs { path: path.to_path_buf() })
    }

    /// The bytes free on it, as `df` shows them.
    fn free_bytes(&self) -> io::Result<u64> {
        let stats = rustix::fs::statvfs(&self.path).map_err(io::Error::from)?;
        Ok(stats.f_bavail * stats.f_frsize)
    }

    /// Writes a file that leaves about `left` bytes free, and returns its path.
    fn fill_leaving(&self, left: u64) -> io::Result<PathBuf> {
        let path = self.path.join("filler");
        let mut file = File::create(&path)?;
        let chunk = vec![0x5a_u8; 1 << 20];
        while self.free_bytes()? > left + chunk.len() as u64 {
            file.write_all(&chunk)?;
        }
        file.sync_all()?;
        Ok(path)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: a node still holding files there must not keep the mount forever.
        if let Err(error) = run(Command::new("umount").arg("-l").arg(&self.path)) {
            eprintln!("unmount {}: {error}", self.path.display());
        }
    }
}

fn run(command: &mut Command) -> io::Result<()> {
    let output = command.output()?;
    if output.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{command:?}: {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// Holds seat after seat of `show` (from `first`) until one is refused, and returns the holds
/// acknowledged before that and the refusal. Every answer but an acknowledgement or `disk_full`
/// fails the test.
async fn hold_until_refused(
    client: &Client,
    show: u64,
    first: u32,
) -> io::Result<(Vec<Held>, tonic::Status)> {
    let mut held = Vec::new();
    let deadline = Instant::now() + WAIT;
    for seat in first.. {
        if Instant::now() > deadline {
            break;
        }
        let token = client.session().await.map_err(|status| io::Error::other(describe(&status)))?;
        match client.hold(&token, show, &[seat]).await {
            Ok(reply) => {
                held.push(Held { token, show_id: show, hold_id: reply.hold_id, seats: vec![seat] })
            }
            Err(status) if booking_code(&status) == "disk_full" => return Ok((held, status)),
            Err(status) => {
                return Err(io::Error::other(format!(
                    "hold of seat {seat}: {}",
                    describe(&status)
                )));
            }
        }
    }
    Err(io::Error::other(format!("no hold refused within {WAIT:?} on a full disk")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_clearly_and_recovers_losing_nothing() -> io::Result<()> {
    let root = tempfile::tempdir()?;
    let tmpfs = Tmpfs::mount(&root.path().join("node-1"), TMPFS_BYTES)?;
    let mut options = options(3);
    options.dir = Some(root.path().to_path_buf());
    options.extra_args = vec!["--disk-reserve-bytes".into(), RESERVE_BYTES.to_string()];
    // The retries below ask as fast as the node answers, with one session.
    options.rate_per_session = Some(1_000_000);
    let cluster = start(options).await?;
    let client = Client::of(&cluster);
    // Node 1 leads group 1 (whose writes its disk must refuse) and not group 2.
    for (group, to) in [(1, 1), (2, 2)] {
        let deadline = Instant::now() + WAIT;
        while cluster.leader_of(group).await? != to {
            if Instant::now() > deadline {
                return Err(io::Error::other(format!("node {to} does not take group {group}")));
            }
            cluster.transfer_leader(group, to).await?;
        }
    }
    let (show, other_show) = (31, 32);
    create_open(&client, show, 1_000, 1).await?;
    create_open(&client, other_show, 1_000, 2).await?;
    let mut acknowledged = hold_each(&client, show, 1..=5, "before", 5).await?;
    println!("node 1's tmpfs: {} bytes free before the filler", tmpfs.free_bytes()?);

    let filler = tmpfs.fill_leaving(LEFT_FREE_BYTES)?;
    println!("filled: {} bytes free, reserve {RESERVE_BYTES}", tmpfs.free_bytes()?);
    let (held, refusal) = hold_until_refused(&client, show, 100).await?;
    println!("{} holds acknowledged before the first refusal: {}", held.len(), describe(&refusal));
    acknowledged.extend(held);
    assert_eq!(refusal.code(), tonic::Code::ResourceExhausted, "{}", describe(&refusal));
    assert!(refusal.message().contains("--disk-reserve-bytes"), "{}", describe(&refusal));
    // Refused means nothing changed: the same seat again is refused the same way.
    let token = client.session().await.map_err(|status| io::Error::other(describe(&status)))?;
    let again = client.hold(&token, show, &[999]).await.expect_err("still no room");
    assert_eq!(booking_code(&again), "disk_full", "{}", describe(&again));
    // Reads are served, and the other group, led elsewhere, still takes writes.
    assert_readable(&client, &acknowledged).await?;
    acknowledged.push(hold(&client, "elsewhere", other_show, &[1]).await?);
    assert!(cluster.running().contains(&1), "the node kept running");

    fs::remove_file(&filler)?;
    println!("filler removed: {} bytes free", tmpfs.free_bytes()?);
    let started = Instant::now();
    let retry = loop {
        match client.hold(&token, show, &[999]).await {
            Ok(reply) => break reply,
            Err(status) if booking_code(&status) == "disk_full" && started.elapsed() < WAIT => {
                tokio::task::yield_now().await;
            }
            Err(status) => return Err(io::Error::other(describe(&status))),
        }
    };
    println!("writes taken again {:?} after the room came back", started.elapsed());
    acknowledged.push(Held { token, show_id: show, hold_id: retry.hold_id, seats: vec![999] });

    // Nothing acknowledged is lost, on the node whose disk filled up either.
    cluster.kill(1).await?;
    cluster.restart(1).await?;
    assert_readable(&client, &acknowledged).await?;
    assert_converged(&cluster).await?;
    cluster.shutdown().await?;
    drop(tmpfs);
    Ok(())
}
