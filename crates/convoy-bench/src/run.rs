//! `convoy-bench run`: selects workloads, runs each on a fresh target,
//! turns measured windows into DataItems, checks thresholds and writes the
//! results.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{Config, SCHEDULING_THROUGHPUT, TestCase, Workload, format_duration};
use crate::dataitems::{DataItem, DataItems, apply_threshold};
use crate::labels::LabelFilter;
use crate::measure::Window;
use crate::measure::groups::{latency_summary, overall_rate};
use crate::measure::throughput::Summary;
use crate::plan::{Plan, plan};
use crate::table::millis;
use crate::targets::api::ApiOptions;
use crate::targets::embedded::{self, EmbeddedOptions};

/// What to run and where results go.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `TESTCASE[/WORKLOAD]`, each part an unanchored match (`^`/`$`
    /// anchor), as Go's `-bench`.
    pub filter: Option<String>,
    /// Workload label filter (upstream default: `performance`).
    pub labels: LabelFilter,
    /// Topic: names the output file and selects per-topic thresholds.
    pub topic: String,
    /// The embedded target's options.
    pub embedded: EmbeddedOptions,
}

/// The outcome of one workload.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResult {
    /// `<test case>/<workload>`.
    pub name: String,
    /// Measured windows.
    #[serde(skip)]
    pub windows: Vec<Window>,
    /// Its DataItems (thresholds recorded).
    #[serde(skip)]
    pub items: Vec<DataItem>,
    /// The threshold that applied, if any.
    pub threshold: Option<f64>,
    /// Why the workload failed to run.
    pub error: Option<String>,
    /// Threshold violations (upstream's message).
    pub threshold_failure: Option<String>,
    /// Binds per node over the workload (deleted pods included): where the
    /// scheduler put the pods, for a benchmark's own checks.
    #[serde(skip)]
    pub binds_per_node: BTreeMap<String, usize>,
}

/// What one workload measured on a target.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Measured windows.
    pub windows: Vec<Window>,
    /// Its DataItems.
    pub items: Vec<DataItem>,
    /// Binds per node over the workload.
    pub binds_per_node: BTreeMap<String, usize>,
}

impl WorkloadResult {
    /// Whether the workload failed (error or threshold).
    pub fn failed(&self) -> bool {
        self.error.is_some() || self.threshold_failure.is_some()
    }
}

/// All results of a run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One per selected workload, in config order.
    pub results: Vec<WorkloadResult>,
}

/// Whether `pattern` (unanchored, `^`/`$` anchors) matches `name`.
fn part_matches(pattern: &str, name: &str) -> bool {
    let (start, p) = match pattern.strip_prefix('^') {
        Some(p) => (true, p),
        None => (false, pattern),
    };
    let (end, p) = match p.strip_suffix('$') {
        Some(p) => (true, p),
        None => (false, p),
    };
    match (start, end) {
        (true, true) => name == p,
        (true, false) => name.starts_with(p),
        (false, true) => name.ends_with(p),
        (false, false) => name.contains(p),
    }
}

/// The workloads `opts` select, in config order.
pub fn select<'a>(config: &'a Config, opts: &RunOptions) -> Vec<(&'a TestCase, &'a Workload)> {
    let (tc_pat, wl_pat) = match opts.filter.as_deref() {
        Some(f) => match f.split_once('/') {
            Some((a, b)) => (Some(a), Some(b)),
            None => (Some(f), None),
        },
        None => (None, None),
    };
    let mut out = Vec::new();
    for tc in &config.test_cases {
        if tc_pat.is_some_and(|p| !part_matches(p, &tc.name)) {
            continue;
        }
        for w in &tc.workloads {
            if wl_pat.is_some_and(|p| !part_matches(p, &w.name)) {
                continue;
            }
            if opts.labels.matches(tc.labels_of(w)) {
                out.push((tc, w));
            }
        }
    }
    out
}

/// Plans every workload of the config, so that a parameter error anywhere
/// in the file is reported before anything runs.
pub fn plan_all(config: &Config) -> Result<BTreeMap<String, Plan>, String> {
    let mut plans = BTreeMap::new();
    for tc in &config.test_cases {
        for w in &tc.workloads {
            let p = plan(config, tc, w)?;
            plans.insert(p.name.clone(), p);
        }
    }
    Ok(plans)
}

/// The DataItem of a window (`Name` = `<test case>/<workload>/<window>`,
/// as upstream's), `None` without samples.
pub fn data_item(workload: &str, w: &Window) -> DataItem {
    DataItem {
        data: Summary::of(&w.sampled.samples).map(|s| s.data()).unwrap_or_default(),
        unit: "pods/s".into(),
        labels: [
            ("Metric".to_string(), SCHEDULING_THROUGHPUT.to_string()),
            ("Name".to_string(), format!("{workload}/{}", w.name)),
        ]
        .into(),
    }
}

/// Plans the selected workloads, so that a parameter error in any of them
/// is reported before anything runs. Workloads not selected are not
/// planned: as upstream's `patchParams`, which runs per workload, a
/// workload upstream itself cannot plan (dra/'s `empty_100nodes` passes no
/// `measurePods`) fails only when it is selected.
pub fn plan_selected(config: &Config, opts: &RunOptions) -> Result<BTreeMap<String, Plan>, String> {
    let mut plans = BTreeMap::new();
    for (tc, w) in select(config, opts) {
        let p = plan(config, tc, w)?;
        plans.insert(p.name.clone(), p);
    }
    Ok(plans)
}

/// Runs the selected workloads one after the other on the embedded
/// target. Returns an error only when a selected workload has a planning
/// error;
/// workload failures are in the report.
pub fn run(config: &Config, opts: &RunOptions) -> Result<Report, String> {
    run_each(config, opts, |plan| {
        let outcome = embedded::run(plan, &opts.embedded).map_err(|e| e.to_string())?;
        let windows = outcome.windows;
        let mut items: Vec<DataItem> =
            windows.iter().map(|win| data_item(&plan.name, win)).collect();
        items.extend(windows.iter().flat_map(|win| crate::measure::groups::items(&plan.name, win)));
        items.push(crate::measure::evictions::item(&plan.name, &outcome.evictions));
        items.extend(crate::gpu::outcomes_items(
            &plan.name,
            &plan.take_gpu_outcomes(),
            &Default::default(),
        ));
        Ok(Measured { windows, items, binds_per_node: outcome.binds_per_node })
    })
}

/// Runs the selected workloads on the API server of `api.kubeconfig`
/// (fresh state per workload is the caller's job). Throughput items carry
/// a `Scheduler` label; the scheduler's peak memory and CPU time are extra
/// items.
pub fn run_api(config: &Config, opts: &RunOptions, api: &ApiOptions) -> Result<Report, String> {
    run_each(config, opts, |plan| api_workload(plan, api))
}

/// One workload on the API-server target: its windows and DataItems.
pub fn api_workload(plan: &Plan, api: &ApiOptions) -> Result<Measured, String> {
    let outcome = crate::targets::api::run(plan, api).map_err(|e| e.to_string())?;
    let scheduler = api.scheduler.name();
    let mut items: Vec<DataItem> = outcome
        .windows
        .iter()
        .map(|win| {
            let mut item = data_item(&plan.name, win);
            item.labels.insert("Scheduler".into(), scheduler.into());
            item
        })
        .collect();
    for win in &outcome.windows {
        for mut item in crate::measure::groups::items(&plan.name, win) {
            item.labels.insert("Scheduler".into(), scheduler.into());
            items.push(item);
        }
    }
    let mut evicted = crate::measure::evictions::item(&plan.name, &outcome.evictions);
    evicted.labels.insert("Scheduler".into(), scheduler.into());
    items.push(evicted);
    let labels = [("Scheduler".to_string(), scheduler.to_string())].into();
    items.extend(crate::gpu::outcomes_items(&plan.name, &plan.take_gpu_outcomes(), &labels));
    if let Some(u) = &outcome.usage {
        items.extend(crate::targets::api::usage_items(&plan.name, api.scheduler, u));
    }
    Ok(Measured { windows: outcome.windows, items, binds_per_node: outcome.binds_per_node })
}

/// Runs the selected workloads one after the other with `target`, which
/// returns a workload's windows and DataItems.
pub fn run_each(
    config: &Config,
    opts: &RunOptions,
    mut target: impl FnMut(&Plan) -> Result<Measured, String>,
) -> Result<Report, String> {
    let plans = plan_selected(config, opts)?;
    let mut report = Report::default();
    for (tc, w) in select(config, opts) {
        let plan = &plans[&format!("{}/{}", tc.name, w.name)];
        if !plan.feature_gates.is_empty() {
            tracing::info!(
                workload = %plan.name,
                "featureGates {:?} are kube-scheduler's and not applicable to Convoy: ignored",
                plan.feature_gates
            );
        }
        tracing::info!(workload = %plan.name, "running");
        let mut result = WorkloadResult {
            name: plan.name.clone(),
            windows: Vec::new(),
            items: Vec::new(),
            threshold: w.threshold.as_ref().and_then(|t| t.for_topic(&opts.topic)),
            error: None,
            threshold_failure: None,
            binds_per_node: BTreeMap::new(),
        };
        match target(plan) {
            Ok(Measured { windows, items, binds_per_node }) => {
                result.items = items;
                result.binds_per_node = binds_per_node;
                for win in &windows {
                    if win.sampled.samples.is_empty() {
                        tracing::warn!(
                            "Failed to measure SchedulingThroughput for {}/{}: {} pods bound in \
                             {:?}; increase pods and/or nodes to make scheduling take longer",
                            plan.name,
                            win.name,
                            win.pods,
                            win.duration
                        );
                    }
                }
                result.windows = windows;
                if let Some(t) = result.threshold {
                    result.threshold_failure =
                        apply_threshold(&mut result.items, t, &tc.selector_of(w)).err();
                }
            }
            Err(e) => result.error = Some(e),
        }
        report.results.push(result);
    }
    Ok(report)
}

/// Per-window details the DataItems do not carry (sampling interval, pods).
#[derive(Debug, Clone, Serialize)]
struct WindowDetails<'a> {
    name: String,
    target: &'a str,
    pods: usize,
    window_seconds: f64,
    first_bind_seconds: Option<f64>,
    last_bind_seconds: Option<f64>,
    sample_interval: String,
    samples: usize,
    /// The samples themselves (pods/s, one per `sample_interval`, in time
    /// order from the first sampled tick), for `convoy-bench report`.
    throughput: Vec<f64>,
    threshold: Option<f64>,
    error: Option<&'a str>,
    threshold_failure: Option<&'a str>,
}

impl Report {
    /// Whether any workload failed.
    pub fn failed(&self) -> bool {
        self.results.iter().any(WorkloadResult::failed)
    }

    /// All DataItems.
    pub fn data_items(&self) -> DataItems {
        DataItems::new(self.results.iter().flat_map(|r| r.items.iter().cloned()).collect())
    }

    /// Writes the DataItems file and, beside it, `<same>.details.json` with
    /// the sampling interval and pod counts of each window. Returns the
    /// DataItems file.
    pub fn write(&self, dir: &Path, topic: &str) -> std::io::Result<PathBuf> {
        let path = self.data_items().write(dir, topic)?;
        let mut details = Vec::new();
        for r in &self.results {
            let base = WindowDetails {
                name: r.name.clone(),
                target: r
                    .items
                    .first()
                    .and_then(|i| i.labels.get("Scheduler"))
                    .map_or("embedded", |s| s.as_str()),
                pods: 0,
                window_seconds: 0.0,
                first_bind_seconds: None,
                last_bind_seconds: None,
                sample_interval: String::new(),
                samples: 0,
                throughput: Vec::new(),
                threshold: r.threshold,
                error: r.error.as_deref(),
                threshold_failure: r.threshold_failure.as_deref(),
            };
            if r.windows.is_empty() {
                details.push(base.clone());
            }
            for w in &r.windows {
                details.push(WindowDetails {
                    name: format!("{}/{}", r.name, w.name),
                    pods: w.pods,
                    window_seconds: w.duration.as_secs_f64(),
                    first_bind_seconds: w.bind_span.map(|s| s.0.as_secs_f64()),
                    last_bind_seconds: w.bind_span.map(|s| s.1.as_secs_f64()),
                    sample_interval: format_duration(w.sampled.interval),
                    samples: w.sampled.samples.len(),
                    throughput: w.sampled.samples.clone(),
                    ..base.clone()
                });
            }
        }
        let json = serde_json::to_string_pretty(&details).map_err(std::io::Error::other)?;
        std::fs::write(path.with_extension("details.json"), json + "\n")?;
        Ok(path)
    }

    /// The console table.
    pub fn table(&self) -> String {
        // EVICTED only where a workload evicted pods (preemption).
        let evicted =
            self.results.iter().any(|r| evictions_of(&r.items).is_some_and(|e| e.total > 0));
        let mut header = vec![
            "NAME",
            "PODS",
            "WINDOW",
            "INTERVAL",
            "SAMPLES",
            "AVERAGE",
            "PERC50",
            "PERC90",
            "PERC99",
            "THRESHOLD",
            "RESULT",
        ];
        if evicted {
            header.insert(header.len() - 2, "EVICTED");
        }
        let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for r in &self.results {
            let status = if r.error.is_some() {
                "ERROR"
            } else if r.threshold_failure.is_some() {
                "FAIL"
            } else {
                "ok"
            };
            let threshold = r.threshold.map(|t| format!("{t:.0}")).unwrap_or_else(|| "-".into());
            if r.windows.is_empty() {
                let mut row = vec![r.name.clone()];
                row.extend(std::iter::repeat_n("-".to_string(), 8 + usize::from(evicted)));
                row.extend([threshold.clone(), status.into()]);
                rows.push(row);
            }
            for w in &r.windows {
                let s = Summary::of(&w.sampled.samples);
                let f = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or("-".into());
                let mut row = vec![
                    format!("{}/{}", r.name, w.name),
                    w.pods.to_string(),
                    format!("{:.3}s", w.duration.as_secs_f64()),
                    format_duration(w.sampled.interval),
                    w.sampled.samples.len().to_string(),
                    f(s.map(|s| s.average)),
                    f(s.map(|s| s.perc50)),
                    f(s.map(|s| s.perc90)),
                    f(s.map(|s| s.perc99)),
                    threshold.clone(),
                    status.into(),
                ];
                if evicted {
                    row.insert(row.len() - 2, w.evictions.to_string());
                }
                rows.push(row);
            }
        }
        let mut out = crate::table::format(&rows, 1);
        writeln!(
            out,
            "(throughput in pods/s, sampled at INTERVAL as upstream samples each second)"
        )
        .unwrap();
        if evicted {
            writeln!(
                out,
                "(EVICTED: bound pods others removed during the window; see EvictedPods)"
            )
            .unwrap();
        }
        for r in &self.results {
            if let Some(e) = evictions_of(&r.items).filter(|e| e.total > 0) {
                writeln!(out, "{}: {}", r.name, describe_evictions(&e)).unwrap();
            }
            if let Some(e) = &r.error {
                writeln!(out, "{}: {e}", r.name).unwrap();
            }
            if let Some(e) = &r.threshold_failure {
                writeln!(out, "{e}").unwrap();
            }
        }
        out
    }

    /// The group table of a run (empty when no window measured groups).
    pub fn group_table(&self) -> String {
        let mut rows = vec![
            [
                "NAME",
                "GROUPS",
                "GROUPS/S",
                "AVG/S",
                "LAT P50",
                "LAT P90",
                "LAT P99",
                "CYCLE P50",
                "CYCLE P99",
                "FAILED",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for r in &self.results {
            for w in &r.windows {
                let Some(g) = &w.groups else { continue };
                let lat = latency_summary(&g.latencies);
                let cyc = latency_summary(&g.cycles);
                let avg = Summary::of(&g.sampled.samples).map(|s| s.average);
                rows.push(vec![
                    format!("{}/{}", r.name, w.name),
                    g.placed.to_string(),
                    overall_rate(w).map_or("-".into(), |v| format!("{v:.1}")),
                    avg.map_or("-".into(), |v| format!("{v:.1}")),
                    millis(lat.map(|s| s.perc50)),
                    millis(lat.map(|s| s.perc90)),
                    millis(lat.map(|s| s.perc99)),
                    millis(cyc.map(|s| s.perc50)),
                    millis(cyc.map(|s| s.perc99)),
                    g.failed_cycles.to_string(),
                ]);
            }
        }
        if rows.len() == 1 {
            return String::new();
        }
        let mut out = crate::table::format(&rows, 1);
        out.push_str(
            "(GROUPS/S: groups complete over the window; AVG/S: upstream-style mean of samples; \
             LAT: first member created to minCount-th bound, ms; CYCLE: Convoy's group cycle, ms)\n",
        );
        out
    }
}

/// The `EvictedPods` counts among a workload's DataItems.
pub fn evictions_of(items: &[DataItem]) -> Option<crate::measure::evictions::Evictions> {
    let i = items.iter().find(|i| crate::measure::evictions::is_item(i))?;
    let get = |k: &str| i.data.get(k).copied().unwrap_or(0.0) as usize;
    Some(crate::measure::evictions::Evictions {
        total: get("Total"),
        in_windows: get("InWindows"),
        disruption_target: get("DisruptionTarget"),
    })
}

/// `EvictedPods 20 (20 in measured windows, 20 with DisruptionTarget)`.
pub fn describe_evictions(e: &crate::measure::evictions::Evictions) -> String {
    format!(
        "{} {} ({} in measured windows, {} with DisruptionTarget)",
        crate::measure::evictions::METRIC,
        e.total,
        e.in_windows,
        e.disruption_target
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_parts_are_unanchored_with_anchors() {
        assert!(part_matches("Basic", "SchedulingBasic"));
        assert!(part_matches("^Scheduling", "SchedulingBasic"));
        assert!(!part_matches("^Basic", "SchedulingBasic"));
        assert!(part_matches("^5000Nodes$", "5000Nodes"));
        assert!(!part_matches("^5000Nodes$", "5000Nodes_10000Pods"));
    }
}
