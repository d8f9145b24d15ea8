//! The report folder of a run: `history.jsonl` (the operations, one JSON object per line, as
//! the runner serialized them), `nemesis.jsonl` (the nemesis timeline), `results.json` (the
//! checkers' verdicts) and `timeline.html`, a page with an inline SVG drawing one lane per
//! client process, a bar per operation from invocation to completion coloured by outcome, and
//! the nemesis's fault periods as shaded bands.
//!
//! Owns the files' layout and the drawing, written by hand (no templating or charting
//! dependency); every text that reaches the page is escaped. Never judges the history and never
//! reads anything back: what it writes is what it was given.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::nemesis::{NemesisEvent, Phase, StepStatus};

/// The plot's width, px.
const PLOT_WIDTH: f64 = 1_400.0;
/// The room left of the plot for the lanes' names, px.
const MARGIN_LEFT: f64 = 70.0;
/// The room above the plot for the fault labels, px.
const MARGIN_TOP: f64 = 56.0;
/// The room right of the plot, px.
const MARGIN_RIGHT: f64 = 20.0;
/// The room below the plot for the time axis, px.
const MARGIN_BOTTOM: f64 = 30.0;
/// One lane's height, px.
const LANE_HEIGHT: f64 = 12.0;
/// One bar's height, px (the rest of the lane separates bars of neighbouring lanes).
const BAR_HEIGHT: f64 = 8.0;
/// The narrowest bar, px, so that a quick operation is still seen.
const BAR_WIDTH_MIN: f64 = 1.0;
/// How many rows of fault labels alternate above the plot, so that neighbours do not overlap.
const LABEL_ROWS: usize = 3;

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpOutcome {
    /// It happened (green).
    Ok,
    /// It did not happen (red).
    Fail,
    /// Unknown whether it happened: a timeout (orange).
    Info,
}

impl OpOutcome {
    /// The CSS class of its bars.
    fn class(self) -> &'static str {
        match self {
            OpOutcome::Ok => "ok",
            OpOutcome::Fail => "fail",
            OpOutcome::Info => "info",
        }
    }
}

/// One operation as the timeline draws it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineOp {
    /// The client process (one lane each).
    pub process: u64,
    /// What it called (`hold`, `read`, ...).
    pub function: String,
    /// Its value, for the tooltip (`show 3 seats [4 5]` ...).
    pub label: String,
    /// When it was invoked, ns since the run's start.
    pub start_ns: u64,
    /// When it completed; `None` while it is still open (drawn grey to the end).
    pub end_ns: Option<u64>,
    /// How it completed; ignored while `end_ns` is `None`.
    pub outcome: OpOutcome,
}

/// A shaded period of the timeline: one fault, from its installation to its heal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Band {
    /// Where it starts, ns since the run's start.
    pub start_ns: u64,
    /// Where it ends.
    pub end_ns: u64,
    /// Its short label (`kill node 2`).
    pub label: String,
    /// Its tooltip: the fault and its heal, with their statuses and details.
    pub detail: String,
    /// The CSS class of its colour, by kind of fault.
    pub class: &'static str,
}

/// What a report is made of.
#[derive(Clone, Copy, Debug)]
pub struct Report<'a> {
    /// The page's title (the command that ran, say).
    pub title: &'a str,
    /// The history, one serialized JSON object per line (without or with the line's `\n`).
    pub history: &'a [String],
    /// The nemesis timeline.
    pub nemesis: &'a [NemesisEvent],
    /// The checkers' verdicts.
    pub results: &'a serde_json::Value,
    /// The operations to draw.
    pub ops: &'a [TimelineOp],
}

/// Where a report's files were written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportFiles {
    /// The folder.
    pub dir: PathBuf,
    /// `history.jsonl`.
    pub history: PathBuf,
    /// `nemesis.jsonl`.
    pub nemesis: PathBuf,
    /// `results.json`.
    pub results: PathBuf,
    /// `timeline.html`.
    pub timeline: PathBuf,
}

/// Writes `report` into `dir` (created if missing; files of the same names are replaced).
///
/// # Errors
///
/// When a file cannot be written.
pub fn write(dir: &Path, report: &Report<'_>) -> io::Result<ReportFiles> {
    fs::create_dir_all(dir)?;
    let files = ReportFiles {
        dir: dir.to_path_buf(),
        history: dir.join("history.jsonl"),
        nemesis: dir.join("nemesis.jsonl"),
        results: dir.join("results.json"),
        timeline: dir.join("timeline.html"),
    };
    let mut history = BufWriter::new(File::create(&files.history)?);
    for line in report.history {
        writeln!(history, "{}", line.trim_end_matches(['\n', '\r']))?;
    }
    history.flush()?;
    let mut nemesis = BufWriter::new(File::create(&files.nemesis)?);
    for event in report.nemesis {
        serde_json::to_writer(&mut nemesis, event)?;
        writeln!(nemesis)?;
    }
    nemesis.flush()?;
    let mut results = serde_json::to_string_pretty(report.results)?;
    results.push('\n');
    fs::write(&files.results, results)?;
    fs::write(&files.timeline, timeline_html(report.title, report.ops, report.nemesis))?;
    Ok(files)
}

/// Escapes `text` for HTML and SVG text and attribute values.
pub fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            // Control characters other than tab and newline are not allowed in XML 1.0.
            character if character.is_control() && !matches!(character, '\t' | '\n') => {
                escaped.push('\u{FFFD}');
            }
            character => escaped.push(character),
        }
    }
    escaped
}

/// The fault periods of a nemesis timeline: each fault that was not skipped, from its start to
/// the end of the heal of the same step (or to its own end when nothing healed it, as for a
/// leader transfer).
pub fn fault_bands(events: &[NemesisEvent]) -> Vec<Band> {
    let heals: BTreeMap<u64, &NemesisEvent> = events
        .iter()
        .filter(|event| event.phase == Phase::Heal && event.action != "heal-all")
        .map(|event| (event.step, event))
        .collect();
    events
        .iter()
        .filter(|event| event.phase == Phase::Fault && event.status != StepStatus::Skipped)
        .map(|fault| {
            let heal = heals.get(&fault.step);
            let mut detail = describe_event(fault);
            if let Some(heal) = heal {
                detail.push('\n');
                detail.push_str(&describe_event(heal));
            }
            Band {
                start_ns: fault.time_ns,
                end_ns: heal.map_or(fault.end_ns, |heal| heal.end_ns).max(fault.time_ns),
                label: format!("{} {}", fault.action, fault.target).trim().to_owned(),
                detail,
                class: band_class(&fault.action),
            }
        })
        .collect()
}

/// One event as a line of a tooltip.
fn describe_event(event: &NemesisEvent) -> String {
    let mut text = format!(
        "{:.3}-{:.3} s {} {} {}: {:?}",
        seconds(event.time_ns),
        seconds(event.end_ns),
        event.nemesis,
        event.action,
        event.target,
        event.status
    );
    if !event.detail.is_empty() {
        let _ = write!(text, " ({})", event.detail);
    }
    text
}

/// The colour class of a fault's band.
fn band_class(action: &str) -> &'static str {
    match action {
        "kill" => "band-kill",
        "pause" => "band-pause",
        "isolate" | "partition" => "band-partition",
        "skew" => "band-skew",
        "remove" => "band-membership",
        _ => "band-other",
    }
}

/// Nanoseconds as seconds, for labels.
fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The whole page: a title, a legend, the SVG and a table of the nemesis's steps.
pub fn timeline_html(title: &str, ops: &[TimelineOp], nemesis: &[NemesisEvent]) -> String {
    let mut page = String::new();
    let title = escape(title);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 1em; }}\n\
         table {{ border-collapse: collapse; font-size: 12px; }}\n\
         td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: left; }}\n\
         .legend span {{ display: inline-block; padding: 0 8px; margin-right: 6px; }}\n\
         </style>\n</head>\n<body>\n<h1>{title}</h1>\n\
         <p class=\"legend\">{ops} operations of {lanes} processes, {steps} nemesis steps. \
         <span style=\"background:#2e9e44\">ok</span><span style=\"background:#e06666\">fail\
         </span><span style=\"background:#f0a030\">info (unknown)</span>\
         <span style=\"background:#aaaaaa\">still open</span> Hover a bar or a band for details.\
         </p>\n",
        ops = ops.len(),
        lanes = lanes(ops).len(),
        steps = nemesis.len(),
    );
    page.push_str(&timeline_svg(ops, nemesis));
    page.push_str(
        "\n<h2>Nemesis</h2>\n<table>\n<tr><th>start (s)</th><th>end (s)</th>\
                   <th>step</th><th>nemesis</th><th>phase</th><th>action</th><th>target</th>\
                   <th>status</th><th>detail</th></tr>\n",
    );
    for event in nemesis {
        let _ = writeln!(
            page,
            "<tr><td>{:.3}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{:?}</td><td>{}</td>\
             <td>{}</td><td>{:?}</td><td>{}</td></tr>",
            seconds(event.time_ns),
            seconds(event.end_ns),
            event.step,
            escape(event.nemesis.name()),
            event.phase,
            escape(&event.action),
            escape(&event.target),
            event.status,
            escape(&event.detail),
        );
    }
    page.push_str("</table>\n</body>\n</html>\n");
    page
}

/// The lanes: every process, in order, with its row.
fn lanes(ops: &[TimelineOp]) -> BTreeMap<u64, usize> {
    let mut lanes: BTreeMap<u64, usize> = ops.iter().map(|op| (op.process, 0)).collect();
    for (row, lane) in lanes.values_mut().enumerate() {
        *lane = row;
    }
    lanes
}

/// A tick spacing of the time axis, ns: the first of 1-2-5 steps that gives at most about
/// twenty ticks over `span_ns`.
fn tick_step(span_ns: u64) -> u64 {
    const STEPS_MS: [u64; 15] =
        [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000, 60_000];
    STEPS_MS
        .iter()
        .map(|ms| ms * 1_000_000)
        .find(|step| span_ns / step <= 20)
        .unwrap_or_else(|| (span_ns / 20).max(1))
}

/// The SVG: lanes of operation bars over the nemesis's bands, with a time axis.
pub fn timeline_svg(ops: &[TimelineOp], nemesis: &[NemesisEvent]) -> String {
    let lanes = lanes(ops);
    let bands = fault_bands(nemesis);
    let span_ns = ops
        .iter()
        .map(|op| op.end_ns.unwrap_or(op.start_ns).max(op.start_ns))
        .chain(nemesis.iter().map(|event| event.end_ns))
        .max()
        .unwrap_or(0)
        .max(1);
    // Open operations run to the end of the plot.
    let x = |ns: u64| MARGIN_LEFT + (ns.min(span_ns) as f64) * PLOT_WIDTH / span_ns as f64;
    let plot_height = (lanes.len().max(1) as f64) * LANE_HEIGHT;
    let width = MARGIN_LEFT + PLOT_WIDTH + MARGIN_RIGHT;
    let height = MARGIN_TOP + plot_height + MARGIN_BOTTOM;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"10\">\n\
         <style>\n\
         .ok {{ fill: #2e9e44; }} .fail {{ fill: #e06666; }} .info {{ fill: #f0a030; }} \
         .open {{ fill: #aaaaaa; }}\n\
         .band-kill {{ fill: #e06666; }} .band-pause {{ fill: #9b6fd0; }} \
         .band-partition {{ fill: #5b8fd9; }} .band-skew {{ fill: #d9c35b; }} \
         .band-membership {{ fill: #5bbf9a; }} .band-other {{ fill: #999999; }}\n\
         .band {{ fill-opacity: 0.18; }} .band-edge {{ fill-opacity: 0.8; }}\n\
         .lane {{ fill: #555555; }} .axis {{ stroke: #555555; }} .grid {{ stroke: #eeeeee; }}\n\
         </style>\n"
    );
    // The time axis and its grid, under everything else.
    let step = tick_step(span_ns);
    let axis_y = MARGIN_TOP + plot_height;
    let mut tick = 0;
    while tick <= span_ns {
        let at = x(tick);
        let _ = writeln!(
            svg,
            "<line class=\"grid\" x1=\"{at:.1}\" y1=\"{MARGIN_TOP:.1}\" x2=\"{at:.1}\" \
             y2=\"{axis_y:.1}\"/><text x=\"{at:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}s\
             </text>",
            axis_y + 14.0,
            trim_seconds(seconds(tick))
        );
        tick += step;
    }
    let _ = writeln!(
        svg,
        "<line class=\"axis\" x1=\"{MARGIN_LEFT:.1}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" \
         y2=\"{axis_y:.1}\"/>",
        MARGIN_LEFT + PLOT_WIDTH
    );
    // The fault bands, each with an edge at its start and a label above the plot.
    for (index, band) in bands.iter().enumerate() {
        let start = x(band.start_ns);
        let band_width = (x(band.end_ns) - start).max(BAR_WIDTH_MIN);
        let label_y = 12.0 + (index % LABEL_ROWS) as f64 * 14.0;
        let detail = escape(&band.detail);
        let _ = writeln!(
            svg,
            "<g><title>{detail}</title>\
             <rect class=\"band {class}\" x=\"{start:.2}\" y=\"{label_top:.1}\" \
             width=\"{band_width:.2}\" height=\"{band_height:.1}\"/>\
             <rect class=\"band-edge {class}\" x=\"{start:.2}\" y=\"{label_top:.1}\" \
             width=\"1\" height=\"{band_height:.1}\"/>\
             <text x=\"{text_x:.2}\" y=\"{label_y:.1}\">{label}</text></g>",
            class = band.class,
            label_top = label_y + 2.0,
            band_height = axis_y - label_y - 2.0,
            text_x = start + 2.0,
            label = escape(&band.label),
        );
    }
    // The lanes' names.
    for (process, row) in &lanes {
        let _ = writeln!(
            svg,
            "<text class=\"lane\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">p{process}</text>",
            MARGIN_LEFT - 6.0,
            MARGIN_TOP + (*row as f64) * LANE_HEIGHT + BAR_HEIGHT,
        );
    }
    // The operations.
    for op in ops {
        let row = lanes.get(&op.process).copied().unwrap_or(0);
        let start = x(op.start_ns);
        let end = x(op.end_ns.unwrap_or(span_ns).max(op.start_ns));
        let class = if op.end_ns.is_some() { op.outcome.class() } else { "open" };
        let ended = match op.end_ns {
            Some(end_ns) => {
                format!("{} after {:.3} ms", class, end_ns.saturating_sub(op.start_ns) as f64 / 1e6)
            }
            None => "still open".to_owned(),
        };
        let tooltip = format!(
            "p{} {} {}\n{ended}, invoked at {:.3} s",
            op.process,
            op.function,
            op.label,
            seconds(op.start_ns)
        );
        let _ = writeln!(
            svg,
            "<rect class=\"{class}\" x=\"{start:.2}\" y=\"{:.1}\" width=\"{:.2}\" \
             height=\"{BAR_HEIGHT:.1}\"><title>{}</title></rect>",
            MARGIN_TOP + (row as f64) * LANE_HEIGHT,
            (end - start).max(BAR_WIDTH_MIN),
            escape(&tooltip),
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Seconds without trailing zeros: `1.5`, `2`, `0.05`.
fn trim_seconds(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::Nemesis;

    fn op(process: u64, start_ns: u64, end_ns: Option<u64>, outcome: OpOutcome) -> TimelineOp {
        TimelineOp {
            process,
            function: "hold".to_owned(),
            label: "seats [1 2]".to_owned(),
            start_ns,
            end_ns,
            outcome,
        }
    }

    fn event(
        step: u64,
        phase: Phase,
        action: &str,
        range: (u64, u64),
        status: StepStatus,
    ) -> NemesisEvent {
        NemesisEvent {
            time_ns: range.0,
            end_ns: range.1,
            step,
            nemesis: Nemesis::KillLeader,
            phase,
            action: action.to_owned(),
            target: "node 2".to_owned(),
            nodes: vec![2],
            status,
            detail: String::new(),
        }
    }

    #[test]
    fn markup_characters_are_escaped() {
        assert_eq!(
            escape(r#"<script>alert("x" & 'y')</script>"#),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
        assert_eq!(escape("bell\u{7}"), "bell\u{FFFD}");
        assert_eq!(escape("plain text"), "plain text");
    }

    #[test]
    fn operations_are_bars_coloured_by_outcome_with_escaped_tooltips() {
        let mut ops = vec![
            op(1, 0, Some(1_000_000), OpOutcome::Ok),
            op(1, 2_000_000, Some(3_000_000), OpOutcome::Fail),
            op(7, 0, Some(5_000_000), OpOutcome::Info),
            op(9, 4_000_000, None, OpOutcome::Ok),
        ];
        ops[0].label = "<b>&</b>".to_owned();
        let svg = timeline_svg(&ops, &[]);
        assert!(svg.starts_with("<svg "));
        assert_eq!(svg.matches("<rect class=\"ok\"").count(), 1);
        assert_eq!(svg.matches("<rect class=\"fail\"").count(), 1);
        assert_eq!(svg.matches("<rect class=\"info\"").count(), 1);
        assert_eq!(svg.matches("<rect class=\"open\"").count(), 1, "an open op is grey");
        assert!(svg.contains("&lt;b&gt;&amp;&lt;/b&gt;"), "{svg}");
        assert!(!svg.contains("<b>"));
        for lane in ["p1", "p7", "p9"] {
            assert!(svg.contains(&format!(">{lane}</text>")), "lane {lane}");
        }
    }

    #[test]
    fn a_fault_is_a_band_until_its_heal_and_skipped_steps_are_not() {
        let events = vec![
            event(1, Phase::Fault, "kill", (10, 20), StepStatus::Installed),
            event(1, Phase::Heal, "restart", (50, 70), StepStatus::Installed),
            event(2, Phase::Fault, "partition", (80, 81), StepStatus::Skipped),
            event(3, Phase::Fault, "transfer-leader", (90, 95), StepStatus::Indeterminate),
            event(4, Phase::Heal, "heal-all", (100, 120), StepStatus::Installed),
        ];
        let bands = fault_bands(&events);
        assert_eq!(bands.len(), 2);
        assert_eq!((bands[0].start_ns, bands[0].end_ns), (10, 70));
        assert_eq!(bands[0].label, "kill node 2");
        assert_eq!(bands[0].class, "band-kill");
        assert!(bands[0].detail.contains("restart"));
        assert_eq!((bands[1].start_ns, bands[1].end_ns), (90, 95));
        let html = timeline_html("run <1>", &[op(1, 0, Some(100), OpOutcome::Ok)], &events);
        assert!(html.contains("<title>run &lt;1&gt;</title>"));
        assert_eq!(html.matches("<rect class=\"band ").count(), 2);
        assert_eq!(html.matches("<tr><td>").count(), events.len());
    }

    #[test]
    fn ticks_are_few_and_round() {
        assert_eq!(tick_step(60_000_000_000), 5_000_000_000);
        assert_eq!(tick_step(1_000_000), 1_000_000);
        assert_eq!(trim_seconds(1.5), "1.5");
        assert_eq!(trim_seconds(2.0), "2");
    }

    #[test]
    fn the_folder_holds_the_four_files() -> io::Result<()> {
        let dir = std::env::temp_dir().join(format!("jepsen-report-test-{}", std::process::id()));
        let history = vec!["{\"process\":1}\n".to_owned(), "{\"process\":2}".to_owned()];
        let events = vec![event(1, Phase::Fault, "kill", (1, 2), StepStatus::Installed)];
        let results = serde_json::json!({ "valid": true });
        let ops = [op(1, 0, Some(10), OpOutcome::Ok)];
        let report = Report {
            title: "t",
            history: &history,
            nemesis: &events,
            results: &results,
            ops: &ops,
        };
        let files = write(&dir, &report)?;
        assert_eq!(fs::read_to_string(&files.history)?, "{\"process\":1}\n{\"process\":2}\n");
        let nemesis = fs::read_to_string(&files.nemesis)?;
        assert_eq!(nemesis.lines().count(), 1);
        assert!(nemesis.contains("\"status\":\"installed\""));
        let read: serde_json::Value = serde_json::from_str(&fs::read_to_string(&files.results)?)?;
        assert_eq!(read, results);
        assert!(fs::read_to_string(&files.timeline)?.contains("<svg "));
        fs::remove_dir_all(&dir)
    }
}
