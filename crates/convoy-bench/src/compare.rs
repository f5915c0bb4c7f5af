//! `convoy-bench compare`: the same workloads with several schedulers, each
//! workload on a fresh private control plane (testenv) per scheduler, and a
//! table of `SchedulingThroughput` averages with Convoy's ratios to
//! kube-scheduler and to the null binder (the API server's ceiling).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use convoy_testenv::{Options as TestEnvOptions, TestEnv};

use crate::config::{Config, SCHEDULING_THROUGHPUT};
use crate::dataitems::DataItems;
use crate::measure::groups::{bind_span_rate, latency_summary, overall_rate};
use crate::run::{Report, RunOptions, api_workload, describe_evictions, evictions_of, run_each};
use crate::table::millis;
use crate::targets::api::{ApiOptions, SchedulerKind};

/// The reports of a comparison, one per scheduler, in the order run.
#[derive(Debug, Clone, Default)]
pub struct Comparison {
    /// `(scheduler, its report)`.
    pub runs: Vec<(SchedulerKind, Report)>,
}

/// Runs the selected workloads once per scheduler, each on a fresh testenv
/// control plane (started and stopped around the workload). `api` gives
/// binaries and sampling; its kubeconfig and scheduler are replaced.
/// `testenv` says what the control plane runs: the API server alone
/// (`TestEnvOptions::API_ONLY`, as upstream scheduler_perf measures) unless
/// `--controllers` asks for kube-controller-manager and KWOK too.
pub fn compare(
    config: &Config,
    opts: &RunOptions,
    api: &ApiOptions,
    schedulers: &[SchedulerKind],
    testenv: TestEnvOptions,
) -> Result<Comparison, String> {
    let mut out = Comparison::default();
    for &scheduler in schedulers {
        tracing::info!(scheduler = scheduler.name(), "comparing");
        let report = run_each(config, opts, |plan| {
            let env = TestEnv::start_with(testenv).map_err(|e| format!("starting testenv: {e}"))?;
            let api =
                ApiOptions { kubeconfig: env.kubeconfig().to_path_buf(), scheduler, ..api.clone() };
            let result = api_workload(plan, &api);
            drop(env);
            result
        })?;
        out.runs.push((scheduler, report));
    }
    Ok(out)
}

impl Comparison {
    /// Whether any workload of any scheduler failed to run (thresholds are
    /// Convoy's and are not checked here).
    pub fn failed(&self) -> bool {
        self.runs.iter().any(|(_, r)| r.results.iter().any(|w| w.error.is_some()))
    }

    /// All DataItems of all schedulers.
    pub fn data_items(&self) -> DataItems {
        DataItems::new(
            self.runs
                .iter()
                .flat_map(|(_, r)| r.results.iter().flat_map(|w| w.items.iter().cloned()))
                .collect(),
        )
    }

    /// Writes all DataItems to `dir`; returns the file.
    pub fn write(&self, dir: &Path, topic: &str) -> std::io::Result<PathBuf> {
        self.data_items().write(dir, topic)
    }

    /// The `Average` throughput of window `name` (`<workload>/<window>`)
    /// with `scheduler`.
    pub fn average(&self, scheduler: SchedulerKind, name: &str) -> Option<f64> {
        self.data_items().data_items.into_iter().find_map(|i| {
            (i.labels.get("Metric").map(String::as_str) == Some(SCHEDULING_THROUGHPUT)
                && i.labels.get("Name").map(String::as_str) == Some(name)
                && i.labels.get("Scheduler").map(String::as_str) == Some(scheduler.name()))
            .then(|| i.data.get("Average").copied())
            .flatten()
        })
    }

    /// The evictions of window `name` (`<workload>/<window>`) with
    /// `scheduler`.
    pub fn window_evictions(&self, scheduler: SchedulerKind, name: &str) -> Option<usize> {
        let (_, report) = self.runs.iter().find(|(s, _)| *s == scheduler)?;
        report.results.iter().find_map(|w| {
            w.windows
                .iter()
                .find(|win| format!("{}/{}", w.name, win.name) == name)
                .map(|win| win.evictions)
        })
    }

    /// The console table: one row per measured window, Average pods/s per
    /// scheduler, and Convoy's ratios; with preemption, the pods each
    /// scheduler evicted during the window (`EVICTED <scheduler>`).
    pub fn table(&self) -> String {
        let mut names: Vec<String> = Vec::new();
        for (_, r) in &self.runs {
            for w in &r.results {
                for win in &w.windows {
                    let n = format!("{}/{}", w.name, win.name);
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
            }
        }
        let evicted = self.runs.iter().any(|(_, r)| {
            r.results.iter().any(|w| evictions_of(&w.items).is_some_and(|e| e.total > 0))
        });
        let mut header = vec!["NAME".to_string()];
        header.extend(self.runs.iter().map(|(s, _)| s.name().to_string()));
        header.extend(["CONVOY/KUBE-SCHEDULER".into(), "CONVOY/NULL".into()]);
        if evicted {
            header.extend(self.runs.iter().map(|(s, _)| format!("EVICTED {}", s.name())));
        }
        let mut rows = vec![header];
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        for n in &names {
            let mut row = vec![n.clone()];
            row.extend(self.runs.iter().map(|(s, _)| fmt(self.average(*s, n))));
            let convoy = self.average(SchedulerKind::Convoy, n);
            let ratio = |other: SchedulerKind| {
                convoy
                    .zip(self.average(other, n))
                    .filter(|(_, o)| *o > 0.0)
                    .map_or("-".to_string(), |(c, o)| format!("{:.2}x", c / o))
            };
            row.push(ratio(SchedulerKind::KubeScheduler));
            row.push(ratio(SchedulerKind::Null));
            if evicted {
                row.extend(self.runs.iter().map(|(s, _)| {
                    self.window_evictions(*s, n).map_or("-".to_string(), |e| e.to_string())
                }));
            }
            rows.push(row);
        }
        let mut out = crate::table::format(&rows, 1);
        writeln!(out, "(SchedulingThroughput Average, pods/s)").unwrap();
        if evicted {
            writeln!(
                out,
                "(EVICTED: bound pods the scheduler removed during the window, counted from the \
                 cluster's side; totals below)"
            )
            .unwrap();
        }
        for (s, r) in &self.runs {
            for w in &r.results {
                for win in &w.windows {
                    let rate = bind_span_rate(win).map_or("-".to_string(), |v| format!("{v:.1}"));
                    writeln!(
                        out,
                        "{} {}/{}: {} pods bound in a {:.1} s window, {rate} pods/s from the \
                         first bind to the last",
                        s.name(),
                        w.name,
                        win.name,
                        win.pods,
                        win.duration.as_secs_f64()
                    )
                    .unwrap();
                }
                if let Some(e) = evictions_of(&w.items).filter(|_| evicted) {
                    writeln!(out, "{} {}: {}", s.name(), w.name, describe_evictions(&e)).unwrap();
                }
                for i in &w.items {
                    let metric = i.labels.get("Metric").map_or("", String::as_str);
                    if metric != SCHEDULING_THROUGHPUT
                        && !crate::measure::evictions::is_item(i)
                        && !crate::measure::groups::is_group_metric(metric)
                        && let Some((bucket, v)) = i.data.iter().next()
                    {
                        writeln!(
                            out,
                            "{} {}: {} {bucket} {v:.1} {}",
                            s.name(),
                            w.name,
                            i.labels.get("Metric").map_or("", String::as_str),
                            i.unit
                        )
                        .unwrap();
                    }
                }
                if let Some(e) = &w.error {
                    writeln!(out, "{} {}: {e}", s.name(), w.name).unwrap();
                }
            }
        }
        out
    }

    /// The group table of a comparison: per window and scheduler, groups/s
    /// over the window and the created-to-bound latency, with Convoy's ratio
    /// to kube-scheduler (empty when no window measured groups).
    pub fn group_table(&self) -> String {
        let mut rows = vec![
            [
                "NAME",
                "SCHEDULER",
                "GROUPS",
                "GROUPS/S",
                "LAT P50",
                "LAT P90",
                "LAT P99",
                "PODS/S",
                "BIND PODS/S",
            ]
            .map(String::from)
            .to_vec(),
        ];
        let mut rates: BTreeMap<String, BTreeMap<&'static str, f64>> = BTreeMap::new();
        for (s, r) in &self.runs {
            for res in &r.results {
                for w in &res.windows {
                    let Some(g) = &w.groups else { continue };
                    let name = format!("{}/{}", res.name, w.name);
                    let lat = latency_summary(&g.latencies);
                    let rate = overall_rate(w);
                    if let Some(v) = rate {
                        rates.entry(name.clone()).or_default().insert(s.name(), v);
                    }
                    let pods = (w.duration.as_secs_f64() > 0.0)
                        .then(|| w.pods as f64 / w.duration.as_secs_f64());
                    let bind = bind_span_rate(w);
                    rows.push(vec![
                        name,
                        s.name().into(),
                        g.placed.to_string(),
                        rate.map_or("-".into(), |v| format!("{v:.1}")),
                        millis(lat.map(|s| s.perc50)),
                        millis(lat.map(|s| s.perc90)),
                        millis(lat.map(|s| s.perc99)),
                        pods.map_or("-".into(), |v| format!("{v:.1}")),
                        bind.map_or("-".into(), |v| format!("{v:.1}")),
                    ]);
                }
            }
        }
        if rows.len() == 1 {
            return String::new();
        }
        let mut out = crate::table::format(&rows, 1);
        out.push_str(
            "(GROUPS/S, PODS/S: over each window's wall time, pod creation included; BIND PODS/S: \
             from the first bind to the last; LAT: first member created to minCount-th bound, ms)\n",
        );
        for (name, r) in &rates {
            let (convoy, kube) =
                (SchedulerKind::Convoy.name(), SchedulerKind::KubeScheduler.name());
            if let (Some(a), Some(b)) = (r.get(convoy), r.get(kube)) {
                writeln!(out, "{name}: groups/s convoy/kube-scheduler {:.2}x", a / b).unwrap();
            }
        }
        out
    }
}
