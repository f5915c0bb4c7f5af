//! The SVG writer's output is well-formed and true to its data, and the
//! docs' plots (`docs/img/*.svg`) are exactly what their data gives:
//! `benches/plots/*.json` through `convoy-bench plot`, and the release
//! history (`benches/history/`) through `convoy-bench report --history
//! benches/history --svg docs/img`. A plot edited by hand, or data changed
//! without regenerating its plot, fails here.

use std::path::{Path, PathBuf};

use convoy_bench::plot::{bar_chart, data_dir_charts, grouped_bar_chart, results_charts};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Checks that `svg` is one `<svg>` element whose tags balance (a small
/// XML check: start, end and self-closing tags, no stray `<` or `&`).
fn assert_well_formed(svg: &str) {
    assert!(svg.starts_with("<svg "), "does not start with <svg: {}", &svg[..svg.len().min(40)]);
    assert!(svg.trim_end().ends_with("</svg>"), "does not end with </svg>");
    let mut stack: Vec<&str> = Vec::new();
    let mut rest = svg;
    let mut closed_root = false;
    while let Some(open) = rest.find('<') {
        let text = &rest[..open];
        check_text(text);
        let close = rest[open..].find('>').expect("unterminated tag") + open;
        let tag = &rest[open + 1..close];
        assert!(!tag.contains('<'), "'<' inside a tag: {tag}");
        assert!(!closed_root, "content after </svg>: <{tag}>");
        if let Some(name) = tag.strip_prefix('/') {
            let top = stack.pop().unwrap_or_else(|| panic!("</{name}> closes nothing"));
            assert_eq!(top, name.trim(), "</{name}> closes <{top}>");
            closed_root = stack.is_empty();
        } else {
            let name = tag.split_whitespace().next().unwrap_or_default().trim_end_matches('/');
            assert!(!name.is_empty(), "empty tag");
            check_attributes(tag);
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        rest = &rest[close + 1..];
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed tags: {stack:?}");
}

/// Text between tags: entities only as `&name;` or `&#nn;`, no `>`.
fn check_text(text: &str) {
    assert!(!text.contains('>'), "stray '>' in text {text:?}");
    for (i, _) in text.match_indices('&') {
        let end = text[i..].find(';').map(|e| i + e).expect("'&' without ';'");
        let entity = &text[i + 1..end];
        assert!(
            ["amp", "lt", "gt", "quot", "#39"].contains(&entity),
            "unknown entity &{entity}; in {text:?}"
        );
    }
}

/// Attribute values are quoted, so the quotes of a tag come in pairs.
fn check_attributes(tag: &str) {
    assert_eq!(tag.matches('"').count() % 2, 0, "unbalanced quotes in <{tag}>");
    check_text(&tag.replace('>', ""));
}

/// The numeric value of attribute `name` in a tag.
fn attribute(tag: &str, name: &str) -> f64 {
    let key = format!(" {name}=\"");
    let start = tag.find(&key).unwrap_or_else(|| panic!("no {name} in {tag}")) + key.len();
    let end = tag[start..].find('"').unwrap() + start;
    tag[start..end].parse().unwrap()
}

/// The `<rect ...>` tags of a chart: its bars.
fn bars(svg: &str) -> Vec<&str> {
    svg.match_indices("<rect ").map(|(i, _)| &svg[i..i + svg[i..].find('>').unwrap()]).collect()
}

/// Bar lengths (bars are horizontal: their width) are proportional to
/// `values`, all from the same baseline.
fn assert_proportional(svg: &str, values: &[f64]) {
    let rects = bars(svg);
    assert_eq!(rects.len(), values.len(), "one rect per value");
    let x0 = attribute(rects[0], "x");
    let scale = values
        .iter()
        .zip(&rects)
        .find(|(v, _)| **v > 0.0)
        .map(|(v, r)| attribute(r, "width") / v)
        .expect("a positive value");
    for (v, r) in values.iter().zip(&rects) {
        assert_eq!(attribute(r, "x"), x0, "bars share a baseline: {r}");
        let w = attribute(r, "width");
        assert!((w - v * scale).abs() < 0.01, "bar of {v}: width {w}, expected {}", v * scale);
        assert!(attribute(r, "height") > 0.0);
    }
}

#[test]
fn bar_chart_is_well_formed_with_one_bar_per_value() {
    let values = [563.4, 290.1, 0.0, 1_102.9];
    let labels = ["Convoy", "kube-scheduler <v1.37>", "none & nothing", "null binder \"ceiling\""];
    let data: Vec<(&str, f64)> = labels.iter().copied().zip(values).collect();
    let svg = bar_chart("Throughput & ratios", "pods/s", &data);
    assert_well_formed(&svg);
    assert_proportional(&svg, &values);
    assert!(svg.contains("kube-scheduler &lt;v1.37&gt;"), "labels are escaped");
    // The longest bar stays inside the chart.
    let widest =
        bars(&svg).iter().map(|r| attribute(r, "x") + attribute(r, "width")).fold(0.0, f64::max);
    assert!(widest <= 760.0, "{widest}");
}

#[test]
fn grouped_bar_chart_draws_each_series_and_skips_missing_values() {
    let groups: [(&str, &[Option<f64>]); 2] = [
        ("SchedulingBasic (1.94x)", &[Some(563.4), Some(290.1), Some(568.6)]),
        ("PreemptionBasic, first bind to last", &[Some(160.5), Some(34.6), None]),
    ];
    let svg = grouped_bar_chart("t", "pods/s", &["Convoy", "kube-scheduler", "null"], &groups);
    assert_well_formed(&svg);
    assert_proportional(&svg, &[563.4, 290.1, 568.6, 160.5, 34.6]);
    // One legend entry per series, in the series' colours.
    assert_eq!(svg.matches("<circle ").count(), 3);
    let rects = bars(&svg);
    assert_eq!(
        rects[0].contains("#08519c"),
        rects[3].contains("#08519c"),
        "same series, same colour"
    );
}

#[test]
fn the_well_formedness_check_catches_broken_svg() {
    for broken in [
        "<svg a=\"1\"><text>x</svg>",
        "<svg a=\"1\"><text>a < b</text></svg>",
        "<svg a=\"1\"><text>a & b</text></svg>",
        "<g></g>",
    ] {
        let caught = std::panic::catch_unwind(|| assert_well_formed(broken)).is_err();
        assert!(caught, "not caught: {broken}");
    }
}

#[test]
fn docs_plots_are_regenerated_exactly_from_their_data() {
    let root = root();
    let mut charts = data_dir_charts(&root.join("benches/plots")).unwrap();
    let history = convoy_bench::history::load(&root.join("benches/history")).unwrap();
    charts.extend(results_charts(&history));
    assert!(charts.len() >= 11, "{} charts", charts.len());
    let mut stale = Vec::new();
    for (name, svg) in &charts {
        assert_well_formed(svg);
        let path = root.join("docs/img").join(name);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != *svg {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "plots differ from their data (regenerate: `convoy-bench plot` and `convoy-bench report \
         --history benches/history --svg docs/img`, from the workspace root): {stale:?}"
    );
    // Every plot the page shows has its data.
    let page = std::fs::read_to_string(root.join("docs/benchmarks.md")).unwrap();
    for (i, _) in page.match_indices("](img/") {
        let name = &page[i + 6..i + page[i..].find(')').unwrap()];
        assert!(charts.iter().any(|(n, _)| n == name), "docs/benchmarks.md shows {name}, no data");
    }
}

#[test]
fn each_data_file_bar_matches_its_figure() {
    let root = root();
    let dir = root.join("benches/plots");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = convoy_bench::plot::load_data(&path).unwrap();
        let svg = convoy_bench::plot::render(&data).unwrap();
        let values: Vec<f64> =
            data.groups.iter().flat_map(|g| g.values.iter().flatten().copied()).collect();
        assert_proportional(&svg, &values);
    }
}
