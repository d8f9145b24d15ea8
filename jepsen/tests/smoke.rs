//! The CI smoke of the Jepsen suite (about 3 minutes): a few workloads under a few nemeses against
//! real 3-node clusters must be judged valid (the `payments` workload, with the provider's
//! faults, against the provider's ledger), and the deliberately broken node (`bookingd-unsafe
//! --inject BUG`, one run per bug real processes can have) must be judged invalid.
//!
//! Runs the `jepsen` binary as a user would. Needs `bookingd`, `paysim` and `bookingd-unsafe`
//! built next to it (`scripts/test.sh` builds them before the tests); fails, never skips,
//! without them.
//! The `bookingd` must be a verify build (every invariant checked after every applied entry),
//! as `cargo test --workspace` builds it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/release`, where the test's own binaries are.
fn bin_dir() -> PathBuf {
    let jepsen = PathBuf::from(env!("CARGO_BIN_EXE_jepsen"));
    jepsen.parent().expect("the jepsen binary has a folder").to_path_buf()
}

/// Runs one test; returns its exit code and its output.
fn jepsen(args: &[&str], report: &Path) -> (i32, String) {
    for binary in ["bookingd", "paysim", "bookingd-unsafe"] {
        assert!(
            bin_dir().join(binary).exists(),
            "{binary} is not built in {}: run `cargo build --release --workspace --bins` and \
             `cargo build --release -p node --features unsafe-modes --bin bookingd-unsafe`",
            bin_dir().display()
        );
    }
    assert_nodes_verify();
    let output = Command::new(env!("CARGO_BIN_EXE_jepsen"))
        .arg("test")
        .args(args)
        .arg("--report")
        .arg(report)
        .output()
        .expect("jepsen runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

/// The smoke's nodes check every invariant after every applied entry: the `bookingd` that
/// `cargo test --workspace` builds has the node's dev-dependency feature `statemachine/verify`
/// and says so in its version.
fn assert_nodes_verify() {
    let output = Command::new(bin_dir().join("bookingd")).arg("--version").output();
    let version =
        String::from_utf8_lossy(&output.expect("bookingd --version runs").stdout).trim().to_owned();
    assert!(
        version.ends_with("(verify)"),
        "{} is `{version}`, not a verify build: run the smoke through `cargo test --release \
         --workspace`, or build it with `cargo build --release -p node --bin bookingd \
         --features statemachine/verify`",
        bin_dir().join("bookingd").display()
    );
}

fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[test]
fn the_cluster_as_built_passes_a_few_nemeses_and_the_unsafe_node_is_caught() {
    let reports = tempfile::tempdir().expect("a temporary folder");
    let runs: [(&str, &[&str], i32); 15] = [
        (
            "holds under kill-leader",
            &[
                "--workload",
                "holds",
                "--nemesis",
                "kill-leader",
                "--time-limit",
                "15",
                "--seed",
                "11",
                "--port-base",
                "7800",
            ],
            0,
        ),
        (
            "register under partition-leader",
            &[
                "--workload",
                "register",
                "--nemesis",
                "partition-leader",
                "--time-limit",
                "15",
                "--seed",
                "12",
                "--port-base",
                "7820",
            ],
            0,
        ),
        (
            "admission under pause-leader",
            &[
                "--workload",
                "admission",
                "--nemesis",
                "pause-leader",
                "--time-limit",
                "12",
                "--seed",
                "13",
                "--port-base",
                "7840",
            ],
            0,
        ),
        (
            "waitlist under membership",
            &[
                "--workload",
                "waitlist",
                "--nemesis",
                "membership",
                "--time-limit",
                "12",
                "--seed",
                "15",
                "--port-base",
                "7880",
            ],
            0,
        ),
        (
            "payments under kill-leader with provider faults",
            &[
                "--workload",
                "payments",
                "--nemesis",
                "kill-leader",
                "--provider-faults",
                "--time-limit",
                "15",
                "--seed",
                "16",
                "--port-base",
                "7900",
            ],
            0,
        ),
        (
            "holds under move-show",
            &[
                "--workload",
                "holds",
                "--nemesis",
                "move-show",
                "--time-limit",
                "14",
                "--seed",
                "17",
                "--port-base",
                "7920",
            ],
            0,
        ),
        (
            "register on bookingd-unsafe --inject stale-read",
            &[
                "--workload",
                "register",
                "--nemesis",
                "partition-leader",
                "--time-limit",
                "15",
                "--seed",
                "14",
                "--port-base",
                "7860",
                "--inject",
                "stale-read",
            ],
            1,
        ),
        (
            "holds under two-faults",
            &[
                "--workload",
                "holds",
                "--nemesis",
                "two-faults",
                "--time-limit",
                "15",
                "--seed",
                "21",
                "--port-base",
                "8000",
            ],
            0,
        ),
        (
            "register under partition-clients",
            &[
                "--workload",
                "register",
                "--nemesis",
                "partition-clients",
                "--time-limit",
                "12",
                "--seed",
                "22",
                "--port-base",
                "8020",
            ],
            0,
        ),
        (
            "deadlines under clock-skew",
            &[
                "--workload",
                "deadlines",
                "--nemesis",
                "clock-skew",
                "--time-limit",
                "12",
                "--seed",
                "23",
                "--port-base",
                "8040",
            ],
            0,
        ),
        (
            "deadlines on bookingd-unsafe --inject confirm-late",
            &[
                "--workload",
                "deadlines",
                "--nemesis",
                "none",
                "--time-limit",
                "15",
                "--seed",
                "24",
                "--port-base",
                "8060",
                "--inject",
                "confirm-late",
            ],
            1,
        ),
        (
            "deadlines on bookingd-unsafe --inject accept-late",
            &[
                "--workload",
                "deadlines",
                "--nemesis",
                "none",
                "--time-limit",
                "15",
                "--seed",
                "25",
                "--port-base",
                "8080",
                "--inject",
                "accept-late",
            ],
            1,
        ),
        (
            "register on bookingd-unsafe --inject ack-before-commit",
            &[
                "--workload",
                "register",
                "--nemesis",
                "partition-leader",
                "--time-limit",
                "12",
                "--seed",
                "20",
                "--port-base",
                "7980",
                "--inject",
                "ack-before-commit",
            ],
            1,
        ),
        (
            "admission on bookingd-unsafe --inject fifo-skip",
            &[
                "--workload",
                "admission",
                "--nemesis",
                "none",
                "--time-limit",
                "8",
                "--seed",
                "18",
                "--port-base",
                "7940",
                "--inject",
                "fifo-skip",
            ],
            1,
        ),
        (
            "waitlist on bookingd-unsafe --inject two-offers",
            &[
                "--workload",
                "waitlist",
                "--nemesis",
                "none",
                "--time-limit",
                "8",
                "--seed",
                "19",
                "--port-base",
                "7960",
                "--inject",
                "two-offers",
            ],
            1,
        ),
    ];
    // Every bug real processes can have is among the runs, but `apply-twice`: 28 runs of it
    // (deadlines, admission, holds, register and waitlist under kills, partitions and pauses,
    // with snapshots every 20 or 40 entries and sweeps every 0.1-10 s) all stayed valid, the
    // entries applied twice changing nothing (see the README's planted-bug table). The
    // simulator catches it.
    let not_caught = [statemachine::inject::Bug::ApplyTwice];
    for bug in statemachine::inject::Bug::ALL
        .into_iter()
        .filter(|bug| bug.in_processes() && !not_caught.contains(bug))
    {
        assert!(
            runs.iter().any(|(_, args, _)| args.windows(2).any(|w| w == ["--inject", bug.name()])),
            "no smoke run plants {bug}"
        );
    }
    for (what, args, expected) in runs {
        let report = reports.path().join(what.replace(' ', "-"));
        let (code, output) = jepsen(args, &report);
        println!("{what}: exit {code}\n{}", last_lines(&output));
        assert_eq!(
            code,
            expected,
            "{what}: expected exit {expected}, got {code}:\n{}",
            last_lines(&output)
        );
        for file in ["history.jsonl", "nemesis.jsonl", "results.json", "timeline.html"] {
            assert!(report.join(file).exists(), "{what}: the report lacks {file}");
        }
        if args.contains(&"payments") {
            for file in ["ledger.json", "cluster-state.json", "provider.jsonl"] {
                assert!(report.join(file).exists(), "{what}: the report lacks {file}");
            }
        }
    }
}
