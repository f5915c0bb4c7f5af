//! Static SVG bar charts for the documentation: [`bar_chart`] (one value
//! per label) and [`grouped_bar_chart`] (one bar per series in each group,
//! as Convoy beside kube-scheduler and the null binder).
//!
//! Bars are horizontal, so that long workload names stay readable; a bar's
//! length is proportional to its value, from a zero baseline. The output is
//! deterministic (fixed decimals, no timestamp), so a chart regenerated from
//! the same data is the same file byte for byte: the docs' charts are
//! checked against their data that way (`tests/plots.rs`).
//!
//! Every `<rect>` of a chart is a bar (the legend uses circles, the
//! background is the root element's style), one per value given.
//!
//! Two sources of data:
//! - [`PlotData`], a small JSON file (`benches/plots/*.json`) holding
//!   figures copied from `docs/benchmarks-archive.md`; [`write_data_dir`]
//!   renders every file of a directory (`convoy-bench plot`);
//! - DataItems result files, a results directory or the release history:
//!   [`results_charts`] draws `SchedulingThroughput` by node count and by
//!   scheduler (`convoy-bench report --svg DIR`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::SCHEDULING_THROUGHPUT;
use crate::report::{ResultFile, escape};

/// Width of every chart, in pixels.
const WIDTH: f64 = 760.0;
/// Height of one bar.
const BAR: f64 = 14.0;
/// Space between two groups.
const GROUP_GAP: f64 = 10.0;
/// Space right of the longest bar, for its value.
const VALUE_ROOM: f64 = 70.0;
/// Approximate width of one character of an 11 px label.
const CHAR: f64 = 6.3;
/// Series colours, in order (Convoy blue, kube-scheduler orange, null grey).
const COLOURS: [&str; 6] = ["#08519c", "#d94801", "#969696", "#238b45", "#6a51a3", "#b8860b"];

/// A chart's data file (`benches/plots/<name>.json`, drawn to
/// `<name>.svg`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotData {
    /// The chart's title.
    pub title: String,
    /// The values' unit (`pods/s`), shown under the title.
    pub unit: String,
    /// Where the figures come from (a section of the archive); not drawn.
    #[serde(default)]
    pub source: String,
    /// A line under the chart (the plugin sets, the run's conditions).
    #[serde(default)]
    pub note: String,
    /// The series' names, in the order of each group's values; empty or one
    /// name: a plain bar chart without a legend.
    #[serde(default)]
    pub series: Vec<String>,
    /// The groups, top to bottom.
    pub groups: Vec<PlotGroup>,
}

/// One group of bars: one value per series (`null`: not measured, no bar).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotGroup {
    /// The group's label (a workload, with its ratio).
    pub label: String,
    /// One value per series.
    pub values: Vec<Option<f64>>,
}

/// A bar chart: one bar per `(label, value)`, top to bottom.
pub fn bar_chart(title: &str, unit: &str, bars: &[(&str, f64)]) -> String {
    let groups: Vec<(String, Vec<Option<f64>>)> =
        bars.iter().map(|(l, v)| (l.to_string(), vec![Some(*v)])).collect();
    draw(title, unit, "", &[], &groups)
}

/// A grouped bar chart: in each group, one bar per series, in the order of
/// `series` (a group's missing value draws no bar).
pub fn grouped_bar_chart(
    title: &str,
    unit: &str,
    series: &[&str],
    groups: &[(&str, &[Option<f64>])],
) -> String {
    let series: Vec<String> = series.iter().map(|s| s.to_string()).collect();
    let groups: Vec<(String, Vec<Option<f64>>)> =
        groups.iter().map(|(l, v)| (l.to_string(), v.to_vec())).collect();
    draw(title, unit, "", &series, &groups)
}

/// Draws a data file's chart; an error when a group's values do not match
/// the series.
pub fn render(data: &PlotData) -> Result<String, String> {
    let width = data.series.len().max(1);
    for g in &data.groups {
        if g.values.len() != width {
            return Err(format!(
                "group {:?}: {} values for {} series",
                g.label,
                g.values.len(),
                width
            ));
        }
        if let Some(v) = g.values.iter().flatten().find(|v| !v.is_finite() || **v < 0.0) {
            return Err(format!("group {:?}: value {v} is not a finite non-negative", g.label));
        }
    }
    let groups: Vec<(String, Vec<Option<f64>>)> =
        data.groups.iter().map(|g| (g.label.clone(), g.values.clone())).collect();
    Ok(draw(&data.title, &data.unit, &data.note, &data.series, &groups))
}

/// Reads a data file.
pub fn load_data(path: &Path) -> Result<PlotData, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Every chart of a directory of data files: `(<name>.svg, svg)` for each
/// `<name>.json`, sorted by name.
pub fn data_dir_charts(data_dir: &Path) -> Result<Vec<(String, String)>, String> {
    let entries =
        std::fs::read_dir(data_dir).map_err(|e| format!("reading {}: {e}", data_dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let data = load_data(&path)?;
        let svg = render(&data).map_err(|e| format!("{}: {e}", path.display()))?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        out.push((format!("{stem}.svg"), svg));
    }
    Ok(out)
}

/// Writes `charts` into `out_dir` (created if needed); returns the files.
pub fn write_charts(charts: &[(String, String)], out_dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let mut written = Vec::new();
    for (name, svg) in charts {
        let path = out_dir.join(name);
        std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Renders every data file of `data_dir` into `out_dir`; returns the
/// files written.
pub fn write_data_dir(data_dir: &Path, out_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let charts = data_dir_charts(data_dir)?;
    if charts.is_empty() {
        return Err(format!("no *.json data file in {}", data_dir.display()));
    }
    write_charts(&charts, out_dir)
}

/// The node count of a workload named exactly `<n>Nodes`.
fn node_count(workload: &str) -> Option<u64> {
    workload.strip_suffix("Nodes")?.parse().ok()
}

/// The charts of result files (a results directory, or the releases of the
/// history, oldest first), from their `SchedulingThroughput` Averages:
///
/// - `throughput-by-nodes.svg`: the embedded target's items (no
///   `Scheduler` label), one group per test case run at two node counts or
///   more (workloads named `<n>Nodes`), one bar per node count; the newest
///   file holding a series wins;
/// - `throughput-by-scheduler.svg`: the items of a comparison (a
///   `Scheduler` label), one group per file and workload, one bar per
///   scheduler, the group labelled with the file (the release) and
///   Convoy's ratio to kube-scheduler.
///
/// A chart without data is left out.
pub fn results_charts(files: &[ResultFile]) -> Vec<(String, String)> {
    // (test case, node count) -> Average, newest file last so it wins.
    let mut embedded: BTreeMap<(String, u64), f64> = BTreeMap::new();
    // (file, workload) -> scheduler -> Average.
    let mut compared: Vec<Compared> = Vec::new();
    for file in files {
        for item in &file.items.data_items {
            if item.labels.get("Metric").map(String::as_str) != Some(SCHEDULING_THROUGHPUT) {
                continue;
            }
            let (Some(name), Some(avg)) = (item.labels.get("Name"), item.data.get("Average"))
            else {
                continue;
            };
            let mut parts = name.splitn(3, '/');
            let (Some(case), Some(workload)) = (parts.next(), parts.next()) else { continue };
            match item.labels.get("Scheduler") {
                None => {
                    if let Some(n) = node_count(workload) {
                        embedded.insert((case.to_string(), n), *avg);
                    }
                }
                Some(scheduler) => {
                    let key = (file.timestamp.clone(), format!("{case}/{workload}"));
                    let at = match compared.iter().position(|(k, _)| *k == key) {
                        Some(i) => i,
                        None => {
                            compared.push((key, BTreeMap::new()));
                            compared.len() - 1
                        }
                    };
                    compared[at].1.insert(scheduler.clone(), *avg);
                }
            }
        }
    }
    let mut charts = Vec::new();
    if let Some(svg) = by_nodes(&embedded) {
        charts.push(("throughput-by-nodes.svg".to_string(), svg));
    }
    if let Some(svg) = by_scheduler(&compared) {
        charts.push(("throughput-by-scheduler.svg".to_string(), svg));
    }
    charts
}

/// The embedded chart of [`results_charts`].
fn by_nodes(embedded: &BTreeMap<(String, u64), f64>) -> Option<String> {
    let mut cases: BTreeMap<&str, BTreeMap<u64, f64>> = BTreeMap::new();
    for ((case, n), v) in embedded {
        cases.entry(case.as_str()).or_default().insert(*n, *v);
    }
    cases.retain(|_, counts| counts.len() >= 2);
    let mut counts: Vec<u64> = cases.values().flat_map(|c| c.keys().copied()).collect();
    counts.sort_unstable();
    counts.dedup();
    if cases.is_empty() {
        return None;
    }
    let series: Vec<String> = counts.iter().map(|n| format!("{n} nodes")).collect();
    let groups: Vec<(String, Vec<Option<f64>>)> = cases
        .iter()
        .map(|(case, c)| (case.to_string(), counts.iter().map(|n| c.get(n).copied()).collect()))
        .collect();
    Some(draw(
        "Convoy on the embedded cluster, by node count",
        "SchedulingThroughput Average, pods/s",
        "",
        &series,
        &groups,
    ))
}

/// A comparison's averages: (file, workload), then scheduler -> Average.
type Compared = ((String, String), BTreeMap<String, f64>);

/// The comparison chart of [`results_charts`].
fn by_scheduler(compared: &[Compared]) -> Option<String> {
    if compared.is_empty() {
        return None;
    }
    // Convoy, kube-scheduler and the null binder first, then any other.
    let known = ["convoy", "kube-scheduler", "null"];
    let mut series: Vec<String> = known
        .iter()
        .filter(|s| compared.iter().any(|(_, m)| m.contains_key(**s)))
        .map(|s| s.to_string())
        .collect();
    for (_, m) in compared {
        for s in m.keys() {
            if !series.contains(s) {
                series.push(s.clone());
            }
        }
    }
    let groups: Vec<(String, Vec<Option<f64>>)> = compared
        .iter()
        .map(|((file, workload), m)| {
            let ratio = match (m.get("convoy"), m.get("kube-scheduler")) {
                (Some(c), Some(k)) if *k > 0.0 => format!(", {:.2}x", c / k),
                _ => String::new(),
            };
            (
                format!("{workload} ({file}{ratio})"),
                series.iter().map(|s| m.get(s).copied()).collect(),
            )
        })
        .collect();
    Some(draw(
        "Side by side on a real API server",
        "SchedulingThroughput Average, pods/s",
        "",
        &series,
        &groups,
    ))
}

/// A value for a bar's label: fewer decimals as it grows.
fn value_label(v: f64) -> String {
    if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A tick's label: whole numbers without decimals.
fn tick_label(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0}") } else { value_label(v) }
}

/// A round upper bound for the axis: 1, 2 or 5 times a power of ten.
fn axis_max(max: f64) -> f64 {
    if !(max.is_finite() && max > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * p).find(|c| *c >= max).unwrap_or(10.0 * p)
}

/// Draws the chart: title and unit, the legend when there are two series
/// or more, one band per group, the x axis with five ticks, the note.
fn draw(
    title: &str,
    unit: &str,
    note: &str,
    series: &[String],
    groups: &[(String, Vec<Option<f64>>)],
) -> String {
    let per_group = series.len().max(1);
    let longest = groups.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(0);
    let label_w = (longest as f64 * CHAR + 16.0).clamp(80.0, 440.0);
    let plot_w = WIDTH - label_w - VALUE_ROOM;
    let max = groups.iter().flat_map(|(_, v)| v.iter().flatten().copied()).fold(0.0, f64::max);
    let top_max = axis_max(max);
    let legend = series.len() >= 2;
    let mut y = 44.0 + if legend { 20.0 } else { 0.0 };
    let plot_top = y;
    let band = per_group as f64 * BAR + GROUP_GAP;
    let plot_bottom = plot_top + band * groups.len() as f64;
    let height = plot_bottom + 30.0 + if note.is_empty() { 0.0 } else { 18.0 };
    let x_of = |v: f64| label_w + plot_w * v / top_max;

    let mut out = String::new();
    writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {WIDTH:.0} {height:.0}\" role=\"img\" aria-label=\"{}\" \
         font-family=\"sans-serif\" font-size=\"11\" style=\"background:#fff\">",
        escape(title)
    )
    .unwrap();
    writeln!(out, "<title>{}</title>", escape(title)).unwrap();
    writeln!(
        out,
        "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\" fill=\"#222\">{}</text>",
        escape(title)
    )
    .unwrap();
    writeln!(out, "<text x=\"10\" y=\"36\" fill=\"#555\">{}</text>", escape(unit)).unwrap();
    if legend {
        let legend_w: f64 = series.iter().map(|s| 24.0 + s.chars().count() as f64 * CHAR).sum();
        let mut x = label_w.min(WIDTH - legend_w - 10.0).max(10.0);
        for (i, s) in series.iter().enumerate() {
            writeln!(
                out,
                "<circle cx=\"{:.1}\" cy=\"50\" r=\"5\" fill=\"{}\"/>\
                 <text x=\"{:.1}\" y=\"54\" fill=\"#222\">{}</text>",
                x + 5.0,
                COLOURS[i % COLOURS.len()],
                x + 14.0,
                escape(s)
            )
            .unwrap();
            x += 24.0 + s.chars().count() as f64 * CHAR;
        }
    }
    // Grid and ticks.
    for k in 0..=4 {
        let v = top_max * f64::from(k) / 4.0;
        let x = x_of(v);
        writeln!(
            out,
            "<line x1=\"{x:.1}\" y1=\"{plot_top:.1}\" x2=\"{x:.1}\" y2=\"{plot_bottom:.1}\" \
             stroke=\"#e5e5e5\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" \
             fill=\"#555\">{}</text>",
            plot_bottom + 14.0,
            tick_label(v)
        )
        .unwrap();
    }
    for (label, values) in groups {
        let centre = y + per_group as f64 * BAR / 2.0;
        writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#222\">{}</text>",
            label_w - 6.0,
            centre + 4.0,
            escape(label)
        )
        .unwrap();
        for (i, v) in values.iter().enumerate() {
            let top = y + i as f64 * BAR;
            let Some(v) = v else { continue };
            let w = plot_w * v / top_max;
            writeln!(
                out,
                "<rect x=\"{label_w:.1}\" y=\"{:.1}\" width=\"{w:.3}\" height=\"{:.1}\" \
                 fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" fill=\"#222\">{}</text>",
                top + 1.0,
                BAR - 2.0,
                COLOURS[i % COLOURS.len()],
                label_w + w + 4.0,
                top + BAR - 3.0,
                value_label(*v)
            )
            .unwrap();
        }
        y += band;
    }
    writeln!(
        out,
        "<line x1=\"{label_w:.1}\" y1=\"{plot_top:.1}\" x2=\"{label_w:.1}\" \
         y2=\"{plot_bottom:.1}\" stroke=\"#444\"/>"
    )
    .unwrap();
    if !note.is_empty() {
        writeln!(
            out,
            "<text x=\"10\" y=\"{:.1}\" fill=\"#555\">{}</text>",
            plot_bottom + 36.0,
            escape(note)
        )
        .unwrap();
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_maximum_is_round_and_covers_the_values() {
        assert_eq!(axis_max(0.0), 1.0);
        assert_eq!(axis_max(7.0), 10.0);
        assert_eq!(axis_max(563.4), 1000.0);
        assert_eq!(axis_max(200.0), 200.0);
        assert_eq!(axis_max(22_675.0), 25_000.0);
    }

    #[test]
    fn a_group_with_the_wrong_number_of_values_is_refused() {
        let data = PlotData {
            title: "t".into(),
            unit: "u".into(),
            source: String::new(),
            note: String::new(),
            series: vec!["a".into(), "b".into()],
            groups: vec![PlotGroup { label: "g".into(), values: vec![Some(1.0)] }],
        };
        assert!(render(&data).unwrap_err().contains("1 values for 2 series"));
    }
}
