//! The nemeses against real `bookingd` processes (the kit's cluster, `jepsen/testkit`, whose own
//! tests cover its faults one by one): nemesis schedules run against a cluster, every step is
//! recorded, steps that cannot apply are skipped, and the run ends healed and converged.
//!
//! Needs the binaries: `cargo build --release --workspace --bins` first (the cluster finds
//! `bookingd` next to the test's `deps/` folder). Uses 127.0.0.11-13 and ports 7410-7413.
//!
//! Reference: Raft §5.3 (replicas that applied the same log are in the same state).

use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use client::{Client, NewShow};
use jepsen::nemesis::{self, Nemesis, Phase, Schedule, StepStatus};
use testkit::{Addressing, Cluster, ClusterOptions, GroupId};

/// The show of the test, in data group 1.
const SHOW: u64 = 7;

/// The data group under test.
const GROUP: GroupId = 1;

type TestResult = Result<(), Box<dyn Error>>;

/// A fresh directory for the cluster's files.
fn run_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("jepsen-{name}-{}", std::process::id()))
}

/// Holds `seats` for a fresh session.
async fn hold(client: &Client, seats: &[u32]) -> TestResult {
    let token = client.create_session().await?;
    client.hold(&token, SHOW, seats, 1, None).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nemesis_schedules_record_every_step_and_end_healed() -> TestResult {
    let started = Instant::now();
    let dir = run_dir("nemesis");
    let _ = std::fs::remove_dir_all(&dir);
    let options = ClusterOptions {
        groups: 1,
        addressing: Addressing::suite(7410),
        ..ClusterOptions::new(3, dir.clone())
    };
    let cluster = Cluster::start(options).await?;
    let client = cluster.client();
    let mut show = NewShow::uniform(SHOW, 100, 1_000, "EUR");
    show.group_id = GROUP;
    show.open_sales = true;
    client.create_show(&show, None).await?;
    let t0 = Instant::now();

    // A ring needs five nodes: on three, every step is skipped, and nothing is left to heal.
    let mut ring = Schedule::new(Nemesis::PartitionRing, GROUP, 1);
    ring.quiet_min = Duration::from_millis(200);
    ring.quiet_max = Duration::from_millis(200);
    let events =
        nemesis::run(&cluster, &ring, t0, tokio::time::sleep(Duration::from_secs(1))).await;
    let (last, faults) = events.split_last().ok_or("no event")?;
    assert!(!faults.is_empty());
    for event in faults {
        assert_eq!((event.phase, event.status), (Phase::Fault, StepStatus::Skipped), "{event:?}");
        assert!(event.detail.contains("5 nodes"), "{event:?}");
    }
    assert_eq!((last.action.as_str(), last.status), ("heal-all", StepStatus::Installed));

    // A mix of faults with short periods; each fault is undone by the step of the same number.
    let mut mix = Schedule::new(Nemesis::Combined, GROUP, 5);
    mix.quiet_min = Duration::from_millis(300);
    mix.quiet_max = Duration::from_millis(800);
    mix.fault_min = Duration::from_millis(800);
    mix.fault_max = Duration::from_millis(1_500);
    let mut seen = Vec::new();
    let stop = tokio::time::sleep(Duration::from_secs(10));
    let events =
        nemesis::run_with(&cluster, &mix, t0, stop, |event| seen.push(event.clone())).await;
    assert_eq!(seen, events, "every step is reported as it happens");
    for event in &events {
        println!(
            "{:>7.3}-{:>7.3} s #{} {} {} {} {:?} {}",
            event.time_ns as f64 / 1e9,
            event.end_ns as f64 / 1e9,
            event.step,
            event.nemesis,
            event.action,
            event.target,
            event.status,
            event.detail
        );
    }
    let faults = events.iter().filter(|event| event.phase == Phase::Fault).count();
    assert!(faults >= 3, "{faults} faults in 10 s");
    assert!(events.windows(2).all(|pair| pair[0].time_ns <= pair[1].time_ns), "in time order");
    for fault in events.iter().filter(|event| event.phase == Phase::Fault) {
        assert_ne!(fault.nemesis, Nemesis::Combined, "the mix names what it picked");
        let healed = events.iter().any(|heal| heal.phase == Phase::Heal && heal.step == fault.step);
        let instant = fault.action == "transfer-leader" || fault.status == StepStatus::Skipped;
        assert!(healed || instant, "fault not undone: {fault:?}");
    }
    let last = events.last().ok_or("no event")?;
    assert_eq!(
        (last.action.as_str(), last.status),
        ("heal-all", StepStatus::Installed),
        "{last:?}"
    );

    // Healed: the cluster serves and its replicas agree.
    assert!(cluster.down().is_empty() && cluster.paused().is_empty());
    assert!(cluster.links().blocked().is_empty() && cluster.removed().is_empty());
    hold(&client, &[9]).await?;
    for group in cluster.group_ids() {
        let converged = cluster.wait_converged(group, Duration::from_secs(20)).await?;
        assert_eq!(converged.members, [1, 2, 3], "group {group}");
    }
    assert!(cluster.crashes().is_empty(), "{:?}", cluster.crashes());
    cluster.stop().await;
    std::fs::remove_dir_all(&dir)?;
    println!("done in {:?}", started.elapsed());
    Ok(())
}
