//! What a run's nodes hold while it lasts, and the soak's rule that none of it keeps growing.
//!
//! Every [`SAMPLE_EVERY`] the sampler reads, for each node that runs, its resident memory
//! (`VmRSS` in `/proc/<pid>/status`), the size of its data folder on disk, and the size of the
//! largest last snapshot among its groups (`booking_snapshot_last_bytes` from its `/metrics`).
//! The samples go to `resources.jsonl` in the report. [`judge`] compares each figure at the end
//! of the run with the same figure at its middle: a soak (`jepsen test --soak`) is invalid when
//! one grew by more than [`GROWTH_MAX`] times and by more than its noise floor, which is what a
//! figure that grows with the work done (a state never trimmed, a leak) does between the middle
//! and the end of a long run; a bounded one has stopped growing by the middle.
//!
//! Owns the sampling and the growth rule. Never injects a fault and never judges the history.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use statemachine::check::Verdict;
use testkit::{Cluster, NodeId};

/// How often the nodes are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// The most a figure may grow from the middle of a soak to its end (the largest sample of the
/// last quarter against the largest of the second quarter). A figure that grows in proportion
/// to the work done doubles between the two.
pub const GROWTH_MAX: f64 = 1.5;

/// Growth below these many bytes is noise, whatever the ratio (an allocator's arenas, a
/// RocksDB memtable, a compaction's temporary files): resident memory, data folder, snapshot.
const NOISE_FLOOR: [(&str, u64); 3] =
    [("rss_bytes", 32 << 20), ("data_bytes", 32 << 20), ("snapshot_bytes", 256 << 10)];

/// One node at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// When, ms since the run's start.
    pub time_ms: u64,
    /// The node.
    pub node: NodeId,
    /// Its resident memory; `None` when it did not run (killed) or could not be read.
    pub rss_bytes: Option<u64>,
    /// The size of its data folder.
    pub data_bytes: u64,
    /// The largest last snapshot among its groups; `None` before any was built or when its
    /// metrics could not be read (a paused node).
    pub snapshot_bytes: Option<u64>,
}

impl Sample {
    /// The figure named `name` (one of [`NOISE_FLOOR`]'s).
    fn figure(&self, name: &str) -> Option<u64> {
        match name {
            "rss_bytes" => self.rss_bytes,
            "data_bytes" => Some(self.data_bytes),
            _ => self.snapshot_bytes,
        }
    }
}

/// Samples every node of `cluster` every [`SAMPLE_EVERY`] until `stop` completes; times are
/// measured from `t0`. `http` reads the nodes' metrics (it must trust the cluster's CA).
pub async fn run(
    cluster: &Cluster,
    http: &reqwest::Client,
    t0: Instant,
    stop: impl std::future::Future<Output = ()>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    tokio::pin!(stop);
    loop {
        for id in cluster.node_ids() {
            samples.push(sample(cluster, http, id, t0).await);
        }
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(SAMPLE_EVERY) => {}
        }
    }
    samples
}

/// One sample of node `id`.
async fn sample(cluster: &Cluster, http: &reqwest::Client, id: NodeId, t0: Instant) -> Sample {
    let rss_bytes = cluster.pid(id).and_then(rss_of);
    let data_bytes = cluster.node_dir(id).map(|dir| dir_bytes(&dir.join("data"))).unwrap_or(0);
    let snapshot_bytes = match cluster.url(id, "/metrics") {
        Ok(url) => {
            let answer = http.get(url).timeout(Duration::from_secs(2)).send().await;
            match answer {
                Ok(response) => response.text().await.ok().and_then(|text| snapshot_of(&text)),
                Err(_) => None,
            }
        }
        Err(_) => None,
    };
    Sample {
        time_ms: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
        node: id,
        rss_bytes,
        data_bytes,
        snapshot_bytes,
    }
}

/// The resident memory of process `pid`, from `/proc/<pid>/status`.
fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The bytes of every file under `dir` (0 if it cannot be read).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(metadata) if metadata.is_dir() => dir_bytes(&entry.path()),
            Ok(metadata) => metadata.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The largest `booking_snapshot_last_bytes` of a metrics text (any group); `None` if no group
/// built a snapshot yet.
fn snapshot_of(metrics: &str) -> Option<u64> {
    metrics
        .lines()
        .filter(|line| line.starts_with("booking_snapshot_last_bytes{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|bytes| bytes as u64)
        .filter(|bytes| *bytes > 0)
        .max()
}

/// Judges `samples` of a run of `duration`: for each node and figure, the largest sample of the
/// last quarter against the largest of the second quarter. Invalid when one grew by more than
/// [`GROWTH_MAX`] times and its noise floor; unknown when no node has samples in both quarters;
/// valid otherwise. The JSON lists every comparison made and every finding.
pub fn judge(samples: &[Sample], duration: Duration) -> (Verdict, serde_json::Value) {
    let total = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1);
    let middle = (total / 4)..=(total / 2);
    let end = (total * 3 / 4)..=u64::MAX;
    let mut by_node: BTreeMap<NodeId, Vec<&Sample>> = BTreeMap::new();
    for sample in samples {
        by_node.entry(sample.node).or_default().push(sample);
    }
    let mut compared = Vec::new();
    let mut findings = Vec::new();
    for (node, samples) in &by_node {
        for (figure, floor) in NOISE_FLOOR {
            let largest = |window: &std::ops::RangeInclusive<u64>| {
                samples
                    .iter()
                    .filter(|sample| window.contains(&sample.time_ms))
                    .filter_map(|sample| sample.figure(figure))
                    .max()
            };
            let (Some(at_middle), Some(at_end)) = (largest(&middle), largest(&end)) else {
                continue;
            };
            let ratio = at_end as f64 / at_middle.max(1) as f64;
            compared.push(json!({
                "node": node, "figure": figure, "middle": at_middle, "end": at_end,
                "ratio": (ratio * 100.0).round() / 100.0,
            }));
            if ratio > GROWTH_MAX && at_end.saturating_sub(at_middle) > floor {
                findings.push(format!(
                    "node {node}: {figure} grew from {at_middle} at the middle of the run to \
                     {at_end} at its end ({ratio:.2}x)"
                ));
            }
        }
    }
    let verdict = if !findings.is_empty() {
        Verdict::Invalid
    } else if compared.iter().any(|comparison| comparison["figure"] == "rss_bytes") {
        Verdict::Valid
    } else {
        Verdict::Unknown
    };
    let judged = json!({
        "verdict": verdict,
        "rule": format!(
            "the largest sample of the last quarter at most {GROWTH_MAX}x the largest of the \
             second quarter (or within its noise floor)"
        ),
        "samples": samples.len(),
        "compared": compared,
        "findings": findings,
    });
    (verdict, judged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(time_ms: u64, rss_mib: u64, snapshot_kib: Option<u64>) -> Sample {
        Sample {
            time_ms,
            node: 1,
            rss_bytes: Some(rss_mib << 20),
            data_bytes: 10 << 20,
            snapshot_bytes: snapshot_kib.map(|kib| kib << 10),
        }
    }

    #[test]
    fn figures_that_level_off_are_bounded() {
        let samples: Vec<Sample> =
            (0..=100).map(|step| at(step * 1_000, 100 + step.min(30), Some(500))).collect();
        let (verdict, judged) = judge(&samples, Duration::from_secs(100));
        assert_eq!(verdict, Verdict::Valid, "{judged}");
    }

    #[test]
    fn memory_that_grows_with_the_run_is_a_finding() {
        // 2 MiB more every second, over 100 MiB (then the growth hides in what is fixed) and
        // over 20 MiB.
        let samples: Vec<Sample> =
            (0..=100).map(|step| at(step * 1_000, 100 + 2 * step, Some(500))).collect();
        let (verdict, judged) = judge(&samples, Duration::from_secs(100));
        assert_eq!(verdict, Verdict::Valid, "200 -> 300 MiB is 1.5x, within the rule: {judged}");
        let samples: Vec<Sample> =
            (0..=100).map(|step| at(step * 1_000, 20 + 2 * step, Some(500))).collect();
        let (verdict, judged) = judge(&samples, Duration::from_secs(100));
        assert_eq!(verdict, Verdict::Invalid, "120 -> 220 MiB is 1.8x: {judged}");
        assert!(judged["findings"][0].as_str().unwrap_or_default().contains("rss_bytes"));
    }

    #[test]
    fn snapshots_that_keep_growing_are_a_finding_and_small_noise_is_not() {
        let growing: Vec<Sample> =
            (0..=100).map(|step| at(step * 1_000, 100, Some(100 + 20 * step))).collect();
        let (verdict, judged) = judge(&growing, Duration::from_secs(100));
        assert_eq!(verdict, Verdict::Invalid, "{judged}");
        let noisy: Vec<Sample> =
            (0..=100).map(|step| at(step * 1_000, 100, Some(10 + step))).collect();
        let (verdict, judged) = judge(&noisy, Duration::from_secs(100));
        assert_eq!(verdict, Verdict::Valid, "50 KiB of growth is under the floor: {judged}");
    }

    #[test]
    fn too_few_samples_are_unknown() {
        let (verdict, _) = judge(&[at(1_000, 100, None)], Duration::from_secs(100));
        assert_eq!(verdict, Verdict::Unknown);
    }

    #[test]
    fn metrics_text_gives_the_largest_snapshot() {
        let text = "# HELP booking_snapshot_last_bytes x\n\
                    booking_snapshot_last_bytes{group=\"0\"} 0\n\
                    booking_snapshot_last_bytes{group=\"1\"} 2048\n\
                    booking_snapshot_last_bytes{group=\"2\"} 512\n";
        assert_eq!(snapshot_of(text), Some(2048));
        assert_eq!(snapshot_of("booking_snapshot_last_bytes{group=\"1\"} 0\n"), None);
    }
}
