//! The benchmark's report: one markdown table (rows: run and metric; columns: each backend,
//! then the ratio of this cluster to each peer), followed by how each run ended, its check,
//! its errors by label, and the notes on how every backend was set up.
//!
//! Owns formatting only: every number comes from a [`RunResult`]. Never drops a run that
//! failed its check or had errors: they are printed with the rest.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::bench::driver::RunResult;
use crate::bench::plots;
use crate::bench::workload::{self, Request, Sweep, WorkloadKind};
use crate::bench::{BACKENDS, Options};

/// A sweep meets its cost target when the backend's CPU per attempt varies by at most this
/// factor over the sweep's range (issue 19: "within 2x across each range").
pub const COST_RANGE_MAX: f64 = 2.0;

/// One cell: its text, and its value when a ratio of it means something.
struct Cell {
    text: String,
    value: Option<f64>,
}

impl Cell {
    fn number(value: f64, text: String) -> Cell {
        Cell { text, value: Some(value) }
    }

    fn text(text: impl Into<String>) -> Cell {
        Cell { text: text.into(), value: None }
    }
}

/// A percentile of a histogram of µs, in ms.
fn percentile_ms(histogram: &hdrhistogram::Histogram<u64>, quantile: f64) -> f64 {
    histogram.value_at_quantile(quantile) as f64 / 1_000.0
}

/// A rate with a thousands separator.
fn rate_text(value: f64) -> String {
    let rounded = value.round() as u64;
    let digits = rounded.to_string();
    let mut text = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}

/// The metrics of one run, in row order.
fn metrics(result: &RunResult) -> Vec<(&'static str, Cell)> {
    let tally = &result.tally;
    let decided = tally.decided();
    let attempts = result.per_second(decided);
    let holds = result.per_second(tally.held);
    let seats = result.per_second(tally.seats_held);
    let conflicts = 100.0 * tally.conflicts as f64 / decided.max(1) as f64;
    let total = result.spec.layout.total_seats();
    let sold = 100.0 * tally.seats_held as f64 / total.max(1) as f64;
    let latency = |quantile| {
        let ms = percentile_ms(&tally.latency, quantile);
        Cell::number(ms, format!("{ms:.1}"))
    };
    let failed: u64 = tally.failed.values().sum();
    let unknown: u64 = tally.unknown.values().sum();
    let mut rows = vec![
        ("attempts/s (decided)", Cell::number(attempts, rate_text(attempts))),
        ("holds/s", Cell::number(holds, rate_text(holds))),
        ("seats sold/s", Cell::number(seats, rate_text(seats))),
        ("conflict rate", Cell::number(conflicts, format!("{conflicts:.1}%"))),
        ("errors failed/unknown", Cell::text(format!("{failed}/{unknown}"))),
        ("latency p50 ms", latency(0.5)),
        ("latency p99 ms", latency(0.99)),
        ("latency p99.9 ms", latency(0.999)),
        ("seats sold", Cell::text(format!("{sold:.1}% in {:.1} s", result.elapsed.as_secs_f64()))),
        ("check", Cell::text(if result.check.ok { "ok" } else { "FAILED" })),
    ];
    if let Some(reads) = &result.reads {
        let per_second = result.per_second(reads.reads);
        let read_latency = |quantile| {
            let ms = percentile_ms(&reads.latency, quantile);
            Cell::number(ms, format!("{ms:.1}"))
        };
        let errors: u64 = reads.errors.values().sum();
        rows.push(("map reads/s", Cell::number(per_second, rate_text(per_second))));
        rows.push(("map read p50 ms", read_latency(0.5)));
        rows.push(("map read p99 ms", read_latency(0.99)));
        rows.push(("map read p99.9 ms", read_latency(0.999)));
        rows.push(("map read errors", Cell::text(errors.to_string())));
    }
    if result.spec.workload == WorkloadKind::FirstMinute {
        rows.extend(first_minute_rows(result));
    }
    if let Some(cpu) = plots::cpu_us_per_attempt(result) {
        rows.push(("backend CPU per attempt µs", Cell::number(cpu, format!("{cpu:.0}"))));
    }
    if let Some(costs) = &result.costs {
        let built = costs.snapshots_built as f64;
        rows.push((
            "snapshots built (all nodes)",
            Cell::number(built, costs.snapshots_built.to_string()),
        ));
        let copies = format!(
            "{} in {:.1} ms (max {:.2} ms)",
            costs.state_copies,
            costs.copy_seconds * 1_000.0,
            costs.copy_max_seconds * 1_000.0
        );
        rows.push(("state copies under the lock", Cell::text(copies)));
    }
    rows
}

/// The first minute's rows: what was offered, the reads per kind, and what the CDN kept from
/// the origin.
fn first_minute_rows(result: &RunResult) -> Vec<(&'static str, Cell)> {
    let mut rows = Vec::new();
    if let Some(offered) = result.offered_holds {
        let offered = f64::from(offered);
        rows.push(("hold attempts offered/s", Cell::number(offered, rate_text(offered))));
    }
    let Some(browse) = &result.browse else { return rows };
    if let Some(rate) = result.spec.rate {
        let rate = f64::from(rate);
        rows.push(("requests offered/s", Cell::number(rate, rate_text(rate))));
    }
    let tally = &result.tally;
    let answered = result.per_second(tally.decided() + tally.errors() + browse.answered());
    rows.push(("requests answered/s", Cell::number(answered, rate_text(answered))));
    for request in Request::READS {
        let Some(reads) = browse.reads.get(&request) else { continue };
        let per_second = result.per_second(reads.reads);
        let (p50, p99) = (percentile_ms(&reads.latency, 0.5), percentile_ms(&reads.latency, 0.99));
        let errors: u64 = reads.errors.values().sum();
        let (rate_row, p50_row, p99_row, errors_row) = match request {
            Request::ShowPage => {
                ("show page reads/s", "show page p50 ms", "show page p99 ms", "show page errors")
            }
            _ => ("seat map reads/s", "seat map p50 ms", "seat map p99 ms", "seat map errors"),
        };
        rows.push((rate_row, Cell::number(per_second, rate_text(per_second))));
        rows.push((p50_row, Cell::number(p50, format!("{p50:.1}"))));
        rows.push((p99_row, Cell::number(p99, format!("{p99:.1}"))));
        rows.push((errors_row, Cell::text(errors.to_string())));
    }
    if let Some(hits) = browse.hit_percent() {
        rows.push(("CDN hit rate", Cell::number(hits, format!("{hits:.2}%"))));
    }
    if let Some(usage) = &result.usage {
        // Where the machine's CPU went, in cores (CPU seconds per second of the run).
        let cores = |seconds: Option<f64>| {
            seconds.map_or_else(
                || "—".to_owned(),
                |seconds| format!("{:.2}", seconds / result.elapsed.as_secs_f64().max(1e-9)),
            )
        };
        let text = format!(
            "nodes {} / CDN {} / generator {}",
            cores(Some(usage.cpu_seconds)),
            cores(usage.helpers_cpu_seconds),
            cores(usage.generator_cpu_seconds)
        );
        rows.push(("CPU cores used", Cell::text(text)));
    }
    if let Some(origin) = &result.origin {
        let per_second = result.per_second(origin.total());
        let text = format!(
            "{per_second:.1} (page {:.1}, map {:.1})",
            result.per_second(origin.show_pages),
            result.per_second(origin.seat_maps)
        );
        rows.push(("origin reads/s", Cell::number(per_second, text)));
    }
    rows
}

/// Bytes as KB or MB, or a dash.
fn bytes_text(bytes: Option<f64>) -> String {
    match bytes {
        Some(bytes) if bytes >= 1e6 => format!("{:.1} MB", bytes / 1e6),
        Some(bytes) if bytes >= 1e3 => format!("{:.1} KB", bytes / 1e3),
        Some(bytes) => format!("{bytes:.0} B"),
        None => "—".to_owned(),
    }
}

/// The largest over the smallest of `values` (`None` with fewer than two, or a zero).
pub fn spread(values: &[f64]) -> Option<f64> {
    let low = values.iter().copied().fold(f64::MAX, f64::min);
    let high = values.iter().copied().fold(0.0, f64::max);
    (values.len() >= 2 && low > 0.0).then(|| high / low)
}

/// The sweeps' section: per sweep a table of every point, whether each backend's CPU per
/// attempt stayed within [`COST_RANGE_MAX`], and its plot.
fn sweeps_markdown(out: &mut String, results: &[RunResult], plots: &[(String, PathBuf)]) {
    if !results.iter().any(|result| result.spec.sweep.is_some()) {
        return;
    }
    let _ = writeln!(out, "\n## How cost grows (sweeps)\n");
    let _ = writeln!(
        out,
        "Each sweep varies one thing and keeps the on-sale's shape otherwise (starts skewed \
         80/20, {} clients, one show of the --seats seats); each point runs on a freshly \
         started backend, so none carries an earlier run's state. Backend CPU is the user and system \
         time of the backend's processes (the cluster's three nodes; PostgreSQL's postmaster \
         and its backends; etcd's three members) while the run lasted, per decided attempt. \
         Memory is their proportional set size (PSS) when the run ended, and how much it grew \
         during the run per acknowledged hold (raft log, idempotency records and audit \
         included); allocators keep freed memory, so growth reads low after a run that freed \
         some, and the exact heap of the cluster's state per seat and per hold is the \
         statemachine's state_size example's to tell.\n",
        Sweep::CLIENTS_FIXED
    );
    for sweep in Sweep::ALL {
        let series = plots::sweep_series(results, sweep);
        let runs: Vec<&RunResult> = results
            .iter()
            .filter(|result| result.spec.sweep.is_some_and(|(of, _)| of == sweep))
            .collect();
        if runs.is_empty() {
            continue;
        }
        let _ = writeln!(out, "### {}\n", sweep.axis());
        let _ = writeln!(
            out,
            "| {} | backend | attempts/s | p99 ms | backend CPU µs/attempt | memory at end | \
             memory growth per hold | seats sold | check |",
            sweep.name()
        );
        let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for result in &runs {
            let x = result.spec.sweep.map_or(0, |(_, x)| x);
            let attempts = plots::attempts_per_second(result).unwrap_or(0.0);
            let cpu = plots::cpu_us_per_attempt(result)
                .map_or_else(|| "—".to_owned(), |cpu| format!("{cpu:.0}"));
            let usage = result.usage;
            let at_end = usage.map(|usage| usage.pss_at_end as f64);
            let per_hold = usage.and_then(|usage| usage.bytes_per_hold(result.tally.held));
            let sold = 100.0 * result.tally.seats_held as f64
                / result.spec.layout.total_seats().max(1) as f64;
            let _ = writeln!(
                out,
                "| {x} | {} | {} | {:.1} | {cpu} | {} | {} | {sold:.0}% in {:.1} s | {} |",
                result.backend,
                rate_text(attempts),
                plots::p99_ms(result).unwrap_or(0.0),
                bytes_text(at_end),
                bytes_text(per_hold),
                result.elapsed.as_secs_f64(),
                if result.check.ok { "ok" } else { "FAILED" }
            );
        }
        let _ = writeln!(out);
        for (backend, points) in &series {
            let costs: Vec<f64> =
                points.iter().filter_map(|(_, result)| plots::cpu_us_per_attempt(result)).collect();
            match spread(&costs) {
                Some(spread) => {
                    let verdict = if spread <= COST_RANGE_MAX { "met" } else { "not met" };
                    let _ = writeln!(
                        out,
                        "- {backend}: CPU per attempt varies {spread:.2}× over the range \
                         (target within {COST_RANGE_MAX}×: {verdict})"
                    );
                }
                None => {
                    let _ = writeln!(out, "- {backend}: CPU per attempt not measured");
                }
            }
        }
        let _ = writeln!(out);
    }
    for (title, path) in plots {
        let _ = writeln!(out, "![{title}]({})\n", path.display());
    }
}

/// The whole report as markdown; `plots` are the drawn plots' titles and paths (relative to
/// the report).
pub fn markdown(
    options: &Options,
    all_results: &[RunResult],
    problems: &[String],
    plots: &[(String, PathBuf)],
) -> String {
    let mut out = String::new();
    // The main table has the runs that are not points of a sweep; the sweeps have their own.
    let main: Vec<RunResult> =
        all_results.iter().filter(|result| result.spec.sweep.is_none()).cloned().collect();
    let results = &main[..];
    let backends: Vec<&str> = BACKENDS
        .into_iter()
        .filter(|name| results.iter().any(|result| result.backend == *name))
        .collect();
    let peers: Vec<&str> = if backends.contains(&"cluster") {
        backends.iter().copied().filter(|name| *name != "cluster").collect()
    } else {
        Vec::new()
    };
    let _ = writeln!(out, "# On-sale benchmark\n");
    let workloads: Vec<&str> = options.workloads.iter().map(|kind| kind.name()).collect();
    let _ = writeln!(
        out,
        "Workloads {}; clients {:?}; at most {} s per run; {} seats (on-sale, many-shows: split \
         over {} shows; uncontended: {} seats in shows of {}); {}; seed {}.\n",
        workloads.join(", "),
        options.clients,
        options.duration.as_secs_f64(),
        options.seats,
        workload::MANY_SHOWS,
        options.uncontended_seats,
        workload::SEATS_PER_SHOW_MAX,
        match (options.closed_loop, options.rates.is_empty()) {
            (_, true) => "closed loop".to_owned(),
            (true, false) => format!("closed loop and open loop at {:?} attempts/s", options.rates),
            (false, false) => format!("open loop at {:?} attempts/s", options.rates),
        },
        options.seed
    );

    let mut header = vec!["run".to_owned(), "metric".to_owned()];
    header.extend(backends.iter().map(|name| (*name).to_owned()));
    header.extend(peers.iter().map(|peer| format!("cluster/{peer}")));
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(header.len()));
    let mut labels: Vec<&str> = Vec::new();
    for result in results {
        if !labels.contains(&result.spec.label.as_str()) {
            labels.push(&result.spec.label);
        }
    }
    for label in &labels {
        let per_backend: Vec<Option<Vec<(&'static str, Cell)>>> = backends
            .iter()
            .map(|name| {
                results
                    .iter()
                    .find(|result| result.backend == *name && result.spec.label == *label)
                    .map(metrics)
            })
            .collect();
        // The longest row list (a backend that took part in the map reads or counts its
        // snapshots has more rows); each backend's cells are found by the row's name.
        let names: Vec<&'static str> = per_backend
            .iter()
            .flatten()
            .max_by_key(|rows| rows.len())
            .map(|rows| rows.iter().map(|(name, _)| *name).collect())
            .unwrap_or_default();
        for (row, name) in names.iter().enumerate() {
            let mut cells = vec![if row == 0 { (*label).to_owned() } else { String::new() }];
            cells.push((*name).to_owned());
            let value_of = |backend: usize| -> Option<&Cell> {
                let rows = per_backend[backend].as_ref()?;
                rows.iter().find(|(metric, _)| metric == name).map(|(_, cell)| cell)
            };
            for index in 0..backends.len() {
                cells
                    .push(value_of(index).map_or_else(|| "—".to_owned(), |cell| cell.text.clone()));
            }
            let cluster = backends.iter().position(|name| *name == "cluster");
            for peer in &peers {
                let peer_index = backends.iter().position(|name| name == peer);
                let ratio = match (
                    cluster.and_then(value_of).and_then(|cell| cell.value),
                    peer_index.and_then(value_of).and_then(|cell| cell.value),
                ) {
                    (Some(ours), Some(theirs)) if theirs > 0.0 => format!("{:.2}×", ours / theirs),
                    _ => "—".to_owned(),
                };
                cells.push(ratio);
            }
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }

    sweeps_markdown(&mut out, all_results, plots);

    let _ = writeln!(out, "\n## Runs\n");
    for result in all_results {
        let _ = writeln!(
            out,
            "- **{} {}**: stopped by {}; {:.1} s.",
            result.backend,
            result.spec.label,
            result.stop_reason,
            result.elapsed.as_secs_f64()
        );
        for line in &result.check.lines {
            let _ = writeln!(out, "  - check: {line}");
        }
        for (label, count) in &result.tally.failed {
            let _ = writeln!(out, "  - failed ({count}): {label}");
        }
        for (label, count) in &result.tally.unknown {
            let _ = writeln!(out, "  - unknown outcome ({count}): {label}");
        }
        if let Some(reads) = &result.reads {
            for (label, count) in &reads.errors {
                let _ = writeln!(out, "  - map read error ({count}): {label}");
            }
        }
    }
    if !problems.is_empty() {
        let _ = writeln!(out, "\n## Problems\n");
        for problem in problems {
            let _ = writeln!(out, "- {problem}");
        }
    }

    let _ = writeln!(out, "\n## Notes\n");
    let mut notes = BTreeSet::new();
    for result in all_results {
        for note in &result.notes {
            notes.insert(note.clone());
        }
    }
    let general = [
        "Attempts decided = holds acknowledged + clean conflict rejections; errors (failed: \
         refused without effect for another reason; unknown: may have taken effect) are counted \
         apart and not in the rates. Latency covers every attempt, whatever its outcome; in the \
         open loop it counts from when the attempt was due (no coordinated omission)."
            .to_owned(),
        format!(
            "Each attempt holds k contiguous seats, k uniform in 1..=4, all or nothing; starts \
             are skewed {}/{} (that share of starts in the first {}% of a show) except in the \
             uncontended workload (uniform). Sold-out rule: a run stops at its duration or once \
             {}% of the seats are sold, or once {}% are sold and under {}% of the attempts of the \
             last second succeeded (the seats left are scattered gaps the requests rarely fit).",
            workload::HOT_STARTS_PERCENT,
            workload::HOT_FRONT_PERCENT,
            workload::HOT_FRONT_PERCENT,
            workload::SOLD_OUT_PERCENT,
            workload::STALL_SOLD_PERCENT,
            workload::STALL_SUCCESS_PERCENT
        ),
        format!(
            "The cluster caps a show at {} seats, so the uncontended workload's seats are shows \
             of {} (seat i in show i / {}) for every backend; many-shows splits the seats over \
             {} shows (PostgreSQL: a show column; etcd: a key prefix per show; the cluster: \
             shows round-robin over its data groups).",
            workload::SEATS_PER_SHOW_MAX,
            workload::SEATS_PER_SHOW_MAX,
            workload::SEATS_PER_SHOW_MAX,
            workload::MANY_SHOWS
        ),
        "Check: after each run the final state is read back from the backend and compared with \
         the acknowledged attempts: no seat in two acknowledged holds (oversell), every \
         acknowledged seat held (by that attempt where the backend stores owners), and no held \
         seat that neither an acknowledged attempt nor one of unknown outcome explains."
            .to_owned(),
        format!(
            "Every backend runs alone on this machine ({} CPUs) with the load generator beside \
             it, one after another.",
            std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
        ),
    ];
    for note in general.iter().chain(&notes) {
        let _ = writeln!(out, "- {note}");
    }
    if options.workloads.contains(&WorkloadKind::FirstMinute) {
        let _ = writeln!(
            out,
            "- First minute (the seed's): open loop at {:?} requests/s offered, {}% of them \
             hold attempts on the on-sale's show (in {} lanes of their own) and the rest, \
             evenly, reads of its page or its whole seat map (in as many lanes), so that a slow \
             hold never delays a read; latency counts from when each request was due. The cluster (cluster-rest) takes them all through nginx as the \
             CDN; PostgreSQL and etcd, without a read tier, make the hold part alone at the \
             same hold rate. The run lasts its duration (no sold-out stop). CDN hit rate: \
             reads the CDN answered from its cache (HIT, or UPDATING while one request \
             refreshes the entry) over all reads answered; origin reads: GETs nginx sent to a \
             node.",
            options.first_minute_rates,
            workload::HOLD_PERCENT,
            workload::FIRST_MINUTE_CLIENTS,
        );
    }
    if options.workloads.contains(&WorkloadKind::MapReads) {
        let _ = writeln!(
            out,
            "- Map reads: {} readers of the hot show's seat map beside the on-sale's writers, \
             spread over the nodes (members) of each system.",
            options.readers
        );
    }
    out
}

/// Whether every run passed its check.
pub fn all_ok(results: &[RunResult]) -> bool {
    results.iter().all(|result| result.check.ok)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::bench::Browsed;
    use crate::bench::cdn::OriginReads;
    use crate::bench::driver::{BrowseTally, Check, RunSpec, RunUsage, Tally};
    use crate::bench::workload::{Layout, Skew};

    #[test]
    fn the_first_minute_reports_reads_per_kind_the_hit_rate_and_the_origin_rate() {
        let mut browse = BrowseTally::default();
        let mut held = Tally::new(0);
        held.held = 100;
        held.conflicts = 900;
        for _ in 0..3 {
            browse.record_answer(Request::ShowPage, Browsed::labelled(Some("HIT")), 2_000);
        }
        browse.record_answer(Request::SeatMap, Browsed::labelled(Some("UPDATING")), 4_000);
        browse.record_answer(Request::SeatMap, Browsed::labelled(Some("EXPIRED")), 9_000);
        let result = RunResult {
            backend: "cluster-rest",
            spec: RunSpec {
                index: 0,
                workload: WorkloadKind::FirstMinute,
                layout: Layout::split(50_000, 1, Skew::Front),
                clients: workload::FIRST_MINUTE_CLIENTS,
                rate: Some(10_000),
                duration: Duration::from_secs(10),
                readers: 0,
                seed: 7,
                label: "first-minute open 10000/s".to_owned(),
                sweep: None,
            },
            elapsed: Duration::from_secs(10),
            stop_reason: "duration".to_owned(),
            tally: held,
            reads: None,
            browse: Some(browse),
            origin: Some(OriginReads { show_pages: 10, seat_maps: 11, other: 0 }),
            offered_holds: Some(2_000),
            check: Check { ok: true, lines: Vec::new() },
            notes: Vec::new(),
            costs: None,
            usage: Some(RunUsage {
                cpu_seconds: 5.0,
                pss_at_start: 0,
                pss_at_end: 0,
                helpers_cpu_seconds: Some(2.0),
                generator_cpu_seconds: None,
            }),
            snapshots: Vec::new(),
        };
        let rows: Vec<(&str, String)> =
            first_minute_rows(&result).into_iter().map(|(name, cell)| (name, cell.text)).collect();
        let row =
            |name: &str| rows.iter().find(|(row, _)| *row == name).map(|(_, text)| text.as_str());
        assert_eq!(row("hold attempts offered/s"), Some("2,000"));
        assert_eq!(row("requests offered/s"), Some("10,000"));
        // 1,000 holds decided and 5 reads in 10 s.
        assert_eq!(row("requests answered/s"), Some("101"));
        assert_eq!(row("show page p50 ms"), Some("2.0"));
        assert_eq!(row("seat map p99 ms"), Some("9.0"));
        // HIT and UPDATING come from the cache; EXPIRED went to the origin.
        assert_eq!(row("CDN hit rate"), Some("80.00%"));
        assert_eq!(row("origin reads/s"), Some("2.1 (page 1.0, map 1.1)"));
        assert_eq!(row("CPU cores used"), Some("nodes 0.50 / CDN 0.20 / generator —"));
    }
}
