//! `convoy-bench report`: a static HTML page of the DataItems files in a
//! results directory, in the manner of perf-dash: one trend chart per
//! metric `Name` (the Average line over a Perc50–Perc99 band, one point per
//! result file, oldest first), and, for the newest run, throughput over
//! time from the samples its `.details.json` holds.
//!
//! The page is self-contained: inline CSS and inline SVG, no script, no
//! external asset. Every text from the files is escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::parse_duration;
use crate::dataitems::DataItems;

/// One DataItems file of the results directory.
#[derive(Debug, Clone)]
pub struct ResultFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The timestamp of its name (what follows the last `_`), the sort key.
    pub timestamp: String,
    /// Its contents.
    pub items: DataItems,
}

/// One window of a `.details.json` file (the fields the report uses).
#[derive(Debug, Clone, Deserialize)]
pub struct WindowDetails {
    /// `<test case>/<workload>/<window>`.
    pub name: String,
    /// Pods bound in the window.
    #[serde(default)]
    pub pods: usize,
    /// The sampling interval, a Go duration.
    #[serde(default)]
    pub sample_interval: String,
    /// Pods/s per interval (written by `run` since the report exists).
    #[serde(default)]
    pub throughput: Vec<f64>,
}

/// The timestamp part of `BenchmarkPerfScheduling_benchmark_<topic>_<ts>.json`.
fn timestamp_of(path: &Path) -> String {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    stem.rsplit('_').next().unwrap_or(stem).to_string()
}

/// Reads every DataItems file (`*.json`, not `*.details.json`) of `dir`,
/// sorted by the timestamp in its name. Files that are not DataItems are
/// skipped with a warning.
pub fn load_results(dir: &Path) -> Result<Vec<ResultFile>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !name.ends_with(".json") || name.ends_with(".details.json") {
            continue;
        }
        let parsed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<DataItems>(&t).map_err(|e| e.to_string()));
        match parsed {
            Ok(items) => out.push(ResultFile { timestamp: timestamp_of(&path), path, items }),
            Err(e) => tracing::warn!("{}: not a DataItems file, skipped: {e}", path.display()),
        }
    }
    out.sort_by(|a, b| (&a.timestamp, &a.path).cmp(&(&b.timestamp, &b.path)));
    Ok(out)
}

/// The windows of the `.details.json` beside a DataItems file, if any.
pub fn load_details(result: &Path) -> Option<Vec<WindowDetails>> {
    let text = std::fs::read_to_string(result.with_extension("details.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes the report of `dir` to `out`; returns how many result files it
/// covers.
pub fn write_report(dir: &Path, out: &Path) -> Result<usize, String> {
    let results = load_results(dir)?;
    if results.is_empty() {
        return Err(format!("no DataItems file in {}", dir.display()));
    }
    let details = results.last().and_then(|r| load_details(&r.path));
    let html = render(&results, details.as_deref());
    std::fs::write(out, html).map_err(|e| format!("writing {}: {e}", out.display()))?;
    Ok(results.len())
}

/// Escapes text for HTML/SVG content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number for a label: fewer decimals as it grows.
fn num(v: f64) -> String {
    if v.fract() == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}\
.chart{border:1px solid #ddd;background:#fff}\
.axis{stroke:#444;stroke-width:1}.grid{stroke:#eee;stroke-width:1}\
.band{fill:#9ecae1;fill-opacity:.5;stroke:none}\
.avg{fill:none;stroke:#08519c;stroke-width:2}.pt{fill:#08519c}\
.tp{fill:none;stroke:#d94801;stroke-width:1.5}\
text{font-size:11px;fill:#333}.note{color:#666}";

/// Geometry shared by the charts.
const W: f64 = 760.0;
const H: f64 = 280.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 15.0;
const BOTTOM: f64 = 70.0;

/// Maps data to the plot area: x in `[0, x_max]`, y in `[0, y_max]`.
struct Frame {
    x_max: f64,
    y_max: f64,
}

impl Frame {
    fn new(x_max: f64, y_max: f64) -> Self {
        let nice = |v: f64| if v.is_finite() && v > 0.0 { v } else { 1.0 };
        Self { x_max: nice(x_max), y_max: nice(y_max) * 1.1 }
    }
    fn x(&self, v: f64) -> f64 {
        LEFT + (W - LEFT - RIGHT) * v / self.x_max
    }
    fn y(&self, v: f64) -> f64 {
        H - BOTTOM - (H - TOP - BOTTOM) * v / self.y_max
    }

    /// Five labels along the x axis, from 0 to `x_max` (rounded to whole
    /// values when `whole`).
    fn x_ticks(&self, out: &mut String, whole: bool) {
        for k in 0..=4 {
            let mut v = self.x_max * f64::from(k) / 4.0;
            if whole {
                v = v.round();
            }
            write!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                self.x(v),
                H - BOTTOM + 16.0,
                num(v)
            )
            .unwrap();
        }
    }

    /// Opens the SVG and draws the axes, the y grid and labels, and the
    /// axis titles.
    fn open(&self, out: &mut String, aria: &str, x_title: &str, y_title: &str) {
        let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
        write!(
            out,
            "<svg class=\"chart\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" \
             role=\"img\" aria-label=\"{}\">",
            escape(aria)
        )
        .unwrap();
        for k in 0..=4 {
            let v = self.y_max * f64::from(k) / 4.0;
            let y = self.y(v);
            write!(
                out,
                "<line class=\"grid\" x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                x0 - 6.0,
                y + 4.0,
                num(v)
            )
            .unwrap();
        }
        write!(
            out,
            "<line class=\"axis\" x1=\"{x0}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\"/>\
             <line class=\"axis\" x1=\"{x0}\" y1=\"{y0}\" x2=\"{x0}\" y2=\"{y1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">{}</text>",
            (x0 + x1) / 2.0,
            H - 6.0,
            escape(x_title),
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0,
            escape(y_title)
        )
        .unwrap();
    }
}

/// One point of a trend: a result file's values of one metric.
struct Point<'a> {
    timestamp: &'a str,
    file: String,
    data: &'a BTreeMap<String, f64>,
}

/// The trend chart of one metric over the result files.
fn trend_chart(out: &mut String, title: &str, unit: &str, pts: &[Point]) {
    let get = |p: &Point, k: &str| p.data.get(k).copied();
    let avg = |p: &Point| get(p, "Average").unwrap_or(0.0);
    let lo = |p: &Point| get(p, "Perc50").unwrap_or_else(|| avg(p));
    let hi = |p: &Point| get(p, "Perc99").unwrap_or_else(|| avg(p));
    let y_max = pts.iter().map(|p| avg(p).max(hi(p)).max(lo(p))).fold(0.0, f64::max);
    // One slot per result file that has this metric (as perf-dash plots
    // one point per build); a single point sits in the middle.
    let n = pts.len();
    let frame = Frame::new(n.saturating_sub(1).max(1) as f64, y_max);
    let x = |i: usize| if n == 1 { frame.x(0.5) } else { frame.x(i as f64) };
    frame.open(out, title, "result file (timestamp)", unit);
    // Same day throughout: the time of day is enough (and fits).
    let day = |t: &str| t.split('T').next().unwrap_or("").to_string();
    let one_day = pts.iter().all(|p| day(p.timestamp) == day(pts[0].timestamp));
    let step = n.div_ceil(8).max(1);
    for (i, p) in pts.iter().enumerate() {
        if i % step == 0 || i + 1 == n {
            let label = match p.timestamp.split_once('T') {
                Some((_, time)) if one_day => time.trim_end_matches('Z').to_string(),
                _ => p.timestamp.to_string(),
            };
            let (px, py) = (x(i), H - BOTTOM + 14.0);
            write!(
                out,
                "<text x=\"{px:.1}\" y=\"{py:.1}\" text-anchor=\"end\" \
                 transform=\"rotate(-25 {px:.1} {py:.1})\">{}</text>",
                escape(&label)
            )
            .unwrap();
        }
    }
    if !pts.is_empty() {
        let upper =
            pts.iter().enumerate().map(|(i, p)| format!("{:.1},{:.1}", x(i), frame.y(hi(p))));
        let lower =
            pts.iter().enumerate().rev().map(|(i, p)| format!("{:.1},{:.1}", x(i), frame.y(lo(p))));
        let band: Vec<String> = upper.chain(lower).collect();
        write!(out, "<polygon class=\"band\" points=\"{}\"/>", band.join(" ")).unwrap();
        let line: Vec<String> = pts
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{:.1},{:.1}", x(i), frame.y(avg(p))))
            .collect();
        write!(out, "<polyline class=\"avg\" points=\"{}\"/>", line.join(" ")).unwrap();
    }
    for (i, p) in pts.iter().enumerate() {
        let mut tip = format!("{}\n{}", p.timestamp, p.file);
        for (k, v) in p.data {
            write!(tip, "\n{k}: {} {unit}", num(*v)).unwrap();
        }
        write!(
            out,
            "<circle class=\"pt\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\"><title>{}</title></circle>",
            x(i),
            frame.y(avg(p)),
            escape(&tip)
        )
        .unwrap();
    }
    out.push_str("</svg>\n");
}

/// The throughput-over-time chart of one window of the newest run.
fn throughput_chart(out: &mut String, w: &WindowDetails) {
    let interval = parse_duration(&w.sample_interval).ok().filter(|d| !d.is_zero());
    let (scale, x_title) = match interval {
        Some(d) => (d.as_secs_f64(), "seconds since the first sampled tick"),
        None => (1.0, "sample"),
    };
    let n = w.throughput.len();
    let y_max = w.throughput.iter().copied().fold(0.0, f64::max);
    let frame = Frame::new(n as f64 * scale, y_max);
    frame.open(out, &w.name, x_title, "pods/s");
    frame.x_ticks(out, false);
    let line: Vec<String> = w
        .throughput
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{:.1},{:.1}", frame.x((i + 1) as f64 * scale), frame.y(*v)))
        .collect();
    writeln!(
        out,
        "<polyline class=\"tp\" points=\"{}\"><title>{}</title></polyline></svg>",
        line.join(" "),
        escape(&format!("{}: {} samples at {}, {} pods", w.name, n, w.sample_interval, w.pods))
    )
    .unwrap();
}

/// Colours of the series of a [`series_chart`], in order (ColorBrewer
/// Dark2, distinguishable for the common colour blindnesses).
const SERIES_COLOURS: [&str; 8] =
    ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"];

/// One named series of a [`series_chart`].
pub struct Series<'a> {
    /// The legend label.
    pub label: &'a str,
    /// The points, by x.
    pub points: Vec<(f64, f64)>,
}

/// A chart of several series over a shared x axis (each its own colour,
/// with a legend below), as an inline SVG.
pub fn series_chart(out: &mut String, title: &str, x_title: &str, unit: &str, series: &[Series]) {
    let x_max = series.iter().flat_map(|s| &s.points).map(|p| p.0).fold(0.0, f64::max);
    let y_max = series.iter().flat_map(|s| &s.points).map(|p| p.1).fold(0.0, f64::max);
    let frame = Frame::new(x_max, y_max);
    let legend_rows = series.len().div_ceil(3);
    let height = H + 18.0 * legend_rows as f64 + 8.0;
    // The frame draws a chart of height H; the legend goes below it.
    let mut chart = String::new();
    frame.open(&mut chart, title, x_title, unit);
    out.push_str(&chart.replacen(
        &format!("height=\"{H}\" viewBox=\"0 0 {W} {H}\""),
        &format!("height=\"{height}\" viewBox=\"0 0 {W} {height}\""),
        1,
    ));
    // Whole x values (waves) get whole ticks.
    frame.x_ticks(out, series.iter().flat_map(|s| &s.points).all(|p| p.0.fract() == 0.0));
    for (i, s) in series.iter().enumerate() {
        let colour = SERIES_COLOURS[i % SERIES_COLOURS.len()];
        let line: Vec<String> = s
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", frame.x(*x), frame.y(*y)))
            .collect();
        write!(
            out,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\">\
             <title>{}</title></polyline>",
            line.join(" "),
            escape(s.label)
        )
        .unwrap();
        let (lx, ly) = (LEFT + 230.0 * (i % 3) as f64, H + 12.0 + 18.0 * (i / 3) as f64);
        write!(
            out,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"14\" height=\"4\" fill=\"{colour}\"/>\
             <text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
            ly - 5.0,
            lx + 18.0,
            escape(s.label)
        )
        .unwrap();
    }
    out.push_str("</svg>\n");
}

/// A standalone page: `title`, then `body` (already HTML).
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/>\
         <title>{t}</title><style>{STYLE}</style></head><body><h1>{t}</h1>\n{body}</body></html>\n",
        t = escape(title)
    )
}

/// The page for `results` (oldest first) and the newest run's details.
pub fn render(results: &[ResultFile], newest_details: Option<&[WindowDetails]>) -> String {
    // (Metric, Name, the other labels) → unit and points: items that
    // differ in any label (e.g. `Definition`) are different series.
    let mut metrics: BTreeMap<(String, String, String), (String, Vec<Point>)> = BTreeMap::new();
    for f in results {
        let file = f.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        for item in &f.items.data_items {
            let label = |k: &str| item.labels.get(k).cloned().unwrap_or_default();
            let others: Vec<String> = item
                .labels
                .iter()
                .filter(|(k, _)| k.as_str() != "Metric" && k.as_str() != "Name")
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let entry = metrics
                .entry((label("Metric"), label("Name"), others.join(" ")))
                .or_insert_with(|| (item.unit.clone(), Vec::new()));
            entry.1.push(Point { timestamp: &f.timestamp, file: file.clone(), data: &item.data });
        }
    }
    let mut out = String::new();
    writeln!(
        out,
        "<p class=\"note\">{} result files, {} to {}. Line: Average; band: Perc50 to Perc99; \
         hover a point for its values.</p>",
        results.len(),
        escape(results.first().map_or("", |r| r.timestamp.as_str())),
        escape(results.last().map_or("", |r| r.timestamp.as_str())),
    )
    .unwrap();
    for ((metric, name, others), (unit, pts)) in &metrics {
        let metric =
            if others.is_empty() { metric.clone() } else { format!("{metric} ({others})") };
        writeln!(out, "<h2>{} <small>{}</small></h2>", escape(name), escape(&metric)).unwrap();
        trend_chart(&mut out, &format!("{name} {metric}"), unit, pts);
    }
    if let Some(newest) = results.last() {
        writeln!(out, "<h2>Throughput over time, newest run ({})</h2>", escape(&newest.timestamp))
            .unwrap();
        let windows: Vec<&WindowDetails> = newest_details
            .unwrap_or_default()
            .iter()
            .filter(|w| !w.throughput.is_empty())
            .collect();
        if windows.is_empty() {
            out.push_str(
                "<p class=\"note\">No per-sample throughput in this run's .details.json.</p>\n",
            );
        }
        for w in windows {
            writeln!(out, "<h3>{}</h3>", escape(&w.name)).unwrap();
            throughput_chart(&mut out, w);
        }
    }
    page("convoy-bench report", &out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataitems::DataItem;

    fn items(name: &str, avg: f64) -> DataItems {
        let data =
            [("Average", avg), ("Perc50", avg - 5.0), ("Perc90", avg + 5.0), ("Perc99", avg + 9.0)];
        DataItems::new(vec![DataItem {
            data: data.map(|(k, v)| (k.to_string(), v)).into(),
            unit: "pods/s".into(),
            labels: [("Metric", "SchedulingThroughput"), ("Name", name)]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        }])
    }

    /// Tags balance (XHTML-style: void elements are written `<x/>`).
    fn check_balanced(html: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unclosed <") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('!') {
                continue;
            }
            assert!(!tag.contains('<'), "stray < in {tag:?}");
            if let Some(close) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(close), "mismatched </{close}>");
            } else if !tag.ends_with('/') {
                stack.push(tag.split_whitespace().next().unwrap().to_string());
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    /// Items that differ in a label besides Metric and Name (here
    /// `Definition`) are separate series, each with its own chart; the x
    /// axis of a chart has the files holding its metric, labelled by time
    /// of day when they share a date.
    #[test]
    fn other_labels_make_separate_series() {
        let item = |def: &str, avg: f64| DataItem {
            data: [("Average".to_string(), avg)].into(),
            unit: "ms".into(),
            labels: [("Metric", "PodGroupSchedulingLatency"), ("Name", "G/w"), ("Definition", def)]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        };
        let file = |ts: &str| ResultFile {
            path: PathBuf::from(format!("BenchmarkPerfScheduling_benchmark_convoy_{ts}.json")),
            timestamp: ts.to_string(),
            items: DataItems::new(vec![item("group-cycle", 0.4), item("created-to-bound", 200.0)]),
        };
        let html = render(&[file("2026-11-30T07:49:05Z"), file("2026-11-30T07:49:06Z")], None);
        check_balanced(&html);
        assert!(html.contains("PodGroupSchedulingLatency (Definition=group-cycle)"), "{html}");
        assert!(html.contains("PodGroupSchedulingLatency (Definition=created-to-bound)"));
        assert_eq!(html.matches("<svg").count(), 2);
        assert!(html.contains(">07:49:05</text>") && html.contains(">07:49:06</text>"));
    }

    #[test]
    fn report_of_two_runs() {
        let dir = tempfile::tempdir().unwrap();
        let name = "Basic/<500Nodes>&\"x\"/namespace-2";
        let write = |ts: &str, avg: f64| {
            let p = dir.path().join(format!("BenchmarkPerfScheduling_benchmark_convoy_{ts}.json"));
            std::fs::write(&p, serde_json::to_string(&items(name, avg)).unwrap()).unwrap();
            p
        };
        // Written newest first: the report sorts by the name's timestamp.
        let newest = write("2024-01-02T00:00:00Z", 300.0);
        write("2024-01-01T00:00:00Z", 200.0);
        let details = serde_json::json!([{
            "name": name, "target": "embedded", "pods": 1000, "sample_interval": "10ms",
            "samples": 3, "throughput": [100.0, 250.5, 180.0]
        }]);
        std::fs::write(newest.with_extension("details.json"), details.to_string()).unwrap();
        std::fs::write(dir.path().join("notes.json"), "{\"other\": 1}").unwrap();

        let out = dir.path().join("report.html");
        assert_eq!(write_report(dir.path(), &out).unwrap(), 2);
        let html = std::fs::read_to_string(&out).unwrap();
        check_balanced(&html);
        assert!(!html.contains("http"), "external reference in the page");
        assert!(!html.contains("<script"));
        assert!(html.contains("Basic/&lt;500Nodes&gt;&amp;&quot;x&quot;/namespace-2"));
        assert!(!html.contains("<500Nodes>"));
        assert_eq!(html.matches("<polyline class=\"avg\"").count(), 1);
        assert_eq!(html.matches("<polygon class=\"band\"").count(), 1);
        assert_eq!(html.matches("<circle").count(), 2);
        // Oldest first: the first point is the 200 pods/s run.
        let first = html.find("2024-01-01T00:00:00Z\n").unwrap();
        let second = html.find("2024-01-02T00:00:00Z\n").unwrap();
        assert!(first < second);
        assert!(html.contains("Average: 200 pods/s"));
        assert!(html.contains("Perc99: 309 pods/s"));
        // The newest run's throughput over time.
        assert_eq!(html.matches("<polyline class=\"tp\"").count(), 1);
        assert!(html.contains("3 samples at 10ms, 1000 pods"));
        assert!(html.contains("seconds since the first sampled tick"));
    }

    #[test]
    fn series_chart_draws_each_series_with_a_legend() {
        let series = [
            Series { label: "a<b>", points: vec![(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)] },
            Series { label: "c", points: vec![(0.0, 0.0), (2.0, 5.0)] },
        ];
        let mut body = String::new();
        series_chart(&mut body, "free nodes", "wave", "nodes", &series);
        let html = page("t & u", &body);
        check_balanced(&html);
        assert!(!html.contains("http"), "external reference in the page");
        assert!(html.contains("<title>t &amp; u</title>"));
        assert_eq!(html.matches("<polyline").count(), 2);
        assert!(html.contains(">a&lt;b&gt;</text>") && html.contains(">c</text>"));
        assert_eq!(html.matches("<rect").count(), 2, "one legend key per series");
        // The legend sits below the chart: the SVG is taller than H.
        assert!(html.contains(&format!("height=\"{}\"", H + 18.0 + 8.0)));
    }

    #[test]
    fn single_run_without_samples() {
        let dir = tempfile::tempdir().unwrap();
        items("A/B/c", 10.0).write(dir.path(), "convoy").unwrap();
        let results = load_results(dir.path()).unwrap();
        let html = render(&results, None);
        check_balanced(&html);
        assert_eq!(html.matches("<circle").count(), 1);
        assert!(html.contains("No per-sample throughput"));
        assert!(write_report(&dir.path().join("missing"), &dir.path().join("r.html")).is_err());
    }

    #[test]
    fn escapes_everything() {
        assert_eq!(
            escape("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
    }
}
