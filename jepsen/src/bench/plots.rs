//! The benchmark's plots, as SVG: each sweep's attempts/s, p99 latency and CPU per attempt
//! against what it varies (one line per backend), and the cluster's snapshot build time
//! against snapshot size.
//!
//! Owns drawing only: every number comes from a [`RunResult`], as in the report. Never draws
//! a run that failed its check without saying so: such a point is left out and the report
//! lists the run as FAILED.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::bench::driver::RunResult;
use crate::bench::workload::Sweep;

/// A plot's size, pixels: three panels side by side.
const SWEEP_SIZE: (u32, u32) = (1500, 430);
/// The snapshot plot's size, pixels.
const SNAPSHOT_SIZE: (u32, u32) = (640, 430);

/// Each backend's colour, the same in every plot (Tableau's palette).
fn colour_of(backend: &str) -> RGBColor {
    match backend {
        "cluster" => RGBColor(214, 39, 40),
        "cluster-plain" => RGBColor(255, 127, 14),
        "cluster-rest" => RGBColor(227, 119, 194),
        "pg-for-update" => RGBColor(148, 103, 189),
        "pg-conditional-update" => RGBColor(31, 119, 180),
        "etcd" => RGBColor(44, 160, 44),
        _ => RGBColor(127, 127, 127),
    }
}

/// One panel of a sweep's plot: its title and how a run gives its y.
struct Panel {
    title: &'static str,
    value: fn(&RunResult) -> Option<f64>,
    /// A logarithmic y axis (latencies span milliseconds to seconds over a sweep).
    log_y: bool,
}

/// The panels of every sweep's plot.
const PANELS: [Panel; 3] = [
    Panel { title: "attempts/s (decided)", value: attempts_per_second, log_y: false },
    Panel { title: "latency p99, ms (log scale)", value: p99_ms, log_y: true },
    Panel { title: "backend CPU per attempt, µs", value: cpu_us_per_attempt, log_y: false },
];

/// Decided attempts per second.
pub fn attempts_per_second(result: &RunResult) -> Option<f64> {
    Some(result.per_second(result.tally.decided()))
}

/// The 99th percentile latency, ms.
pub fn p99_ms(result: &RunResult) -> Option<f64> {
    Some(result.tally.latency.value_at_quantile(0.99) as f64 / 1_000.0)
}

/// The backend's CPU per decided attempt, µs.
pub fn cpu_us_per_attempt(result: &RunResult) -> Option<f64> {
    result.usage?.cpu_us_per_attempt(result.tally.decided())
}

/// A sweep's points for each backend, in the order the backends first appear: `(x, result)`
/// for every run of `sweep` that passed its check.
pub fn sweep_series(
    results: &[RunResult],
    sweep: Sweep,
) -> Vec<(&'static str, Vec<(f64, &RunResult)>)> {
    let mut series: Vec<(&'static str, Vec<(f64, &RunResult)>)> = Vec::new();
    for result in results {
        let Some((of, x)) = result.spec.sweep else { continue };
        if of != sweep || !result.check.ok {
            continue;
        }
        let at = match series.iter().position(|(name, _)| *name == result.backend) {
            Some(at) => at,
            None => {
                series.push((result.backend, Vec::new()));
                series.len() - 1
            }
        };
        series[at].1.push((f64::from(x), result));
    }
    for (_, points) in &mut series {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

/// Draws every sweep of `results` and the snapshot costs into `dir`; returns each plot's
/// title and file.
///
/// # Errors
///
/// When the directory cannot be made or a plot cannot be written.
pub fn draw_all(results: &[RunResult], dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    std::fs::create_dir_all(dir).map_err(|error| format!("create {}: {error}", dir.display()))?;
    let mut drawn = Vec::new();
    for sweep in Sweep::ALL {
        let series = sweep_series(results, sweep);
        if series.is_empty() {
            continue;
        }
        let path = dir.join(format!("sweep-{}.svg", sweep.name()));
        draw_sweep(&path, sweep, &series)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        drawn.push((format!("How cost grows with {}", sweep.axis()), path));
    }
    let points = snapshot_points(results);
    if !points.is_empty() {
        let path = dir.join("snapshot-build.svg");
        draw_snapshots(&path, &points).map_err(|error| format!("{}: {error}", path.display()))?;
        drawn.push(("Snapshot build time against snapshot size (cluster)".to_owned(), path));
    }
    Ok(drawn)
}

/// Every distinct snapshot point of the cluster's runs, (MB, ms).
pub fn snapshot_points(results: &[RunResult]) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    for result in results.iter().filter(|result| result.backend == "cluster") {
        for point in &result.snapshots {
            let point = (point.bytes / 1e6, point.build_seconds * 1e3);
            if !points.contains(&point) {
                points.push(point);
            }
        }
    }
    points
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw_sweep(
    path: &Path,
    sweep: Sweep,
    series: &[(&'static str, Vec<(f64, &RunResult)>)],
) -> DrawResult {
    let root = SVGBackend::new(path, SWEEP_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let xs = series.iter().flat_map(|(_, points)| points.iter().map(|(x, _)| *x));
    let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let (x_min, x_max) = (x_min / 1.3, x_max * 1.3);
    for (area, panel) in root.split_evenly((1, PANELS.len())).iter().zip(&PANELS) {
        let lines: Vec<(&str, Vec<(f64, f64)>)> = series
            .iter()
            .map(|(name, points)| {
                let values =
                    points.iter().filter_map(|(x, result)| Some((*x, (panel.value)(result)?)));
                (*name, values.collect())
            })
            .collect();
        let ys = || lines.iter().flat_map(|(_, points)| points.iter().map(|(_, y)| *y));
        let y_max = ys().fold(0.0, f64::max).max(1e-9) * 1.15;
        let y_min = ys().fold(f64::MAX, f64::min).min(y_max) / 1.3;
        // The same chart on a linear or a logarithmic y axis (their coordinate types differ).
        macro_rules! panel_chart {
            ($y_range:expr) => {{
                let mut chart = ChartBuilder::on(area)
                    .caption(panel.title, ("sans-serif", 18))
                    .margin(12)
                    .x_label_area_size(42)
                    .y_label_area_size(64)
                    .build_cartesian_2d((x_min..x_max).log_scale(), $y_range)?;
                chart
                    .configure_mesh()
                    .x_desc(sweep.axis())
                    .x_label_formatter(&|x| compact(*x))
                    .y_label_formatter(&|y| compact(*y))
                    .draw()?;
                for (name, points) in &lines {
                    let color = colour_of(name);
                    chart
                        .draw_series(LineSeries::new(
                            points.iter().copied(),
                            color.stroke_width(2),
                        ))?
                        .label(*name)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
                    chart.draw_series(
                        points.iter().map(|&point| Circle::new(point, 3, color.filled())),
                    )?;
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperLeft)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .draw()?;
            }};
        }
        if panel.log_y {
            panel_chart!((y_min.max(1e-9)..y_max).log_scale());
        } else {
            panel_chart!(0.0..y_max);
        }
    }
    root.present()?;
    Ok(())
}

fn draw_snapshots(path: &Path, points: &[(f64, f64)]) -> DrawResult {
    let root = SVGBackend::new(path, SNAPSHOT_SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let x_max = points.iter().map(|(x, _)| *x).fold(0.0, f64::max).max(1e-9) * 1.1;
    let y_max = points.iter().map(|(_, y)| *y).fold(0.0, f64::max).max(1e-9) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption("snapshot build (encode, write, sync) per group and node", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart.configure_mesh().x_desc("snapshot size, MB").y_desc("build time, ms").draw()?;
    let color = colour_of("cluster");
    chart.draw_series(points.iter().map(|&point| Circle::new(point, 3, color.filled())))?;
    root.present()?;
    Ok(())
}

/// A tick label: 16384 as 16k, 0.5 as 0.5.
fn compact(value: f64) -> String {
    if value >= 1_000_000.0 {
        format!("{}M", trim(value / 1_000_000.0))
    } else if value >= 1_000.0 {
        format!("{}k", trim(value / 1_000.0))
    } else {
        trim(value)
    }
}

/// A number with at most one decimal and no trailing `.0`.
fn trim(value: f64) -> String {
    let text = format!("{value:.1}");
    text.strip_suffix(".0").map_or(text.clone(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bench::SnapshotPoint;
    use crate::bench::driver::{Check, RunSpec, RunUsage, Tally};
    use crate::bench::workload::{Layout, Skew, WorkloadKind};

    /// A run of `backend` at point `x` of the clients sweep: `decided` attempts in one second
    /// for `cpu_seconds` of CPU, latencies of `latency_ms`.
    pub(crate) fn point(
        backend: &'static str,
        x: u32,
        decided: u64,
        cpu_seconds: f64,
        latency_ms: u64,
        ok: bool,
    ) -> RunResult {
        let mut tally = Tally::new(0);
        tally.held = decided / 10;
        tally.seats_held = tally.held * 2;
        tally.conflicts = decided - tally.held;
        tally.latency.record(latency_ms * 1_000).unwrap();
        RunResult {
            backend,
            spec: RunSpec {
                index: 0,
                workload: WorkloadKind::OnSale,
                layout: Layout::split(50_000, 1, Skew::Front),
                clients: x,
                rate: None,
                duration: Duration::from_secs(1),
                readers: 0,
                seed: 7,
                label: format!("sweep clients {x}"),
                sweep: Some((Sweep::Clients, x)),
            },
            elapsed: Duration::from_secs(1),
            stop_reason: "duration".to_owned(),
            tally,
            reads: None,
            browse: None,
            origin: None,
            offered_holds: None,
            check: Check { ok, lines: Vec::new() },
            notes: Vec::new(),
            costs: None,
            usage: Some(RunUsage {
                cpu_seconds,
                pss_at_start: 2_000_000,
                pss_at_end: 3_000_000,
                helpers_cpu_seconds: None,
                generator_cpu_seconds: None,
            }),
            snapshots: vec![SnapshotPoint { bytes: 2e6, build_seconds: 0.05 }],
        }
    }

    #[test]
    fn a_sweep_is_drawn_with_a_line_per_backend_and_failed_runs_left_out() {
        let results = vec![
            point("cluster", 64, 20_000, 0.4, 5, true),
            point("cluster", 256, 40_000, 1.0, 9, true),
            point("pg-conditional-update", 64, 5_000, 0.8, 30, true),
            point("pg-conditional-update", 256, 7_000, 1.2, 60, false),
        ];
        let series = sweep_series(&results, Sweep::Clients);
        let counts: Vec<(&str, usize)> =
            series.iter().map(|(name, points)| (*name, points.len())).collect();
        assert_eq!(counts, vec![("cluster", 2), ("pg-conditional-update", 1)]);
        assert!(sweep_series(&results, Sweep::Shows).is_empty());
        assert_eq!(cpu_us_per_attempt(&results[1]), Some(25.0));

        let dir = tempfile::tempdir().unwrap();
        let drawn = draw_all(&results, dir.path()).unwrap();
        let files: Vec<String> = drawn
            .iter()
            .map(|(_, path)| path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files, vec!["sweep-clients.svg", "snapshot-build.svg"]);
        let svg = std::fs::read_to_string(&drawn[0].1).unwrap();
        for text in PANELS.iter().map(|panel| panel.title).chain(["cluster", "pg-conditional"]) {
            assert!(svg.contains(text), "the plot has no {text:?}");
        }
    }

    #[test]
    fn the_report_marks_each_backends_cost_range_against_the_target() {
        let results = vec![
            point("cluster", 64, 20_000, 0.4, 5, true),
            point("cluster", 256, 40_000, 1.0, 9, true),
            point("etcd", 64, 5_000, 0.5, 30, true),
            point("etcd", 256, 5_000, 1.5, 60, true),
        ];
        let options = crate::bench::Options {
            backends: vec!["cluster".to_owned()],
            workloads: Vec::new(),
            clients: vec![256],
            duration: Duration::from_secs(1),
            seats: 50_000,
            uncontended_seats: 100_000,
            rates: Vec::new(),
            closed_loop: true,
            readers: 0,
            pg_pool_max: 256,
            cluster_groups: 4,
            snapshot_logs: 1_000,
            cluster_args: Vec::new(),
            data_dir: std::env::temp_dir(),
            pg_bin: std::env::temp_dir(),
            etcd_bin: std::env::temp_dir(),
            seed: 7,
            progress: false,
            sweeps: vec![Sweep::Clients],
            sweep_backends: vec!["cluster".to_owned(), "etcd".to_owned()],
            sweep_duration: Duration::from_secs(1),
            plots_dir: std::env::temp_dir(),
            first_minute_rates: vec![crate::bench::workload::FIRST_MINUTE_RATE],
            nginx_bin: PathBuf::from("nginx"),
        };
        let plots = vec![("How cost grows".to_owned(), std::path::PathBuf::from("plots/x.svg"))];
        let text = crate::bench::report::markdown(&options, &results, &[], &plots);
        // 20 and 25 µs per attempt: within 2x; 100 and 300: not.
        assert!(
            text.contains(
                "- cluster: CPU per attempt varies 1.25× over the range (target within 2×: met)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "- etcd: CPU per attempt varies 3.00× over the range (target within 2×: not met)"
            ),
            "{text}"
        );
        assert!(text.contains("| 256 | cluster | 40,000 | 9.0 | 25 | 3.0 MB | 250 B |"), "{text}");
        assert!(text.contains("![How cost grows](plots/x.svg)"));
        // Sweep points stay out of the main table.
        assert!(!text.contains("| sweep clients 64 |"), "{text}");
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(compact(16_384.0), "16.4k");
        assert_eq!(compact(64.0), "64");
        assert_eq!(compact(100_000.0), "100k");
        assert_eq!(compact(2_500_000.0), "2.5M");
        assert_eq!(compact(0.5), "0.5");
    }
}
