//! The benchmark history kept in the repository:
//! `benches/history/<release>/<test case>_<workload>.json`, one DataItems
//! file per release and workload, as perf-dash keeps one series per job.
//!
//! - [`add`]: files a results directory's DataItems under a release, one
//!   file per workload;
//! - [`report`]: the trend page across releases (one chart per workload
//!   and metric, one point per release, oldest first), drawn by
//!   [`crate::report::render`];
//! - [`check`]: compares a new run's `SchedulingThroughput` with the newest
//!   release's, workload by workload and scheduler by scheduler, and fails
//!   on a drop beyond a stated noise band.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::SCHEDULING_THROUGHPUT;
use crate::dataitems::{DataItem, DataItems};
use crate::report::{ResultFile, load_results, render};

/// The workload a DataItem belongs to: the first two parts of its `Name`
/// (`SchedulingBasic/5000Nodes_10000Pods`).
fn workload_of(item: &DataItem) -> Option<String> {
    let name = item.labels.get("Name")?;
    let mut parts = name.splitn(3, '/');
    Some(format!("{}/{}", parts.next()?, parts.next()?))
}

/// A release directory's sort key: the numbers of `v1.2.3` (then the name).
fn release_key(release: &str) -> (Vec<u64>, String) {
    let numbers =
        release.trim_start_matches('v').split(['.', '-']).map_while(|p| p.parse().ok()).collect();
    (numbers, release.to_string())
}

/// Files the DataItems of `results` (a `convoy-bench run` or `compare`
/// output directory; every DataItems file in it) under
/// `history/<release>/`, one file per workload; returns the files written.
/// Items already filed for the release and workload are kept, unless a new
/// item has the same labels (the same metric of the same scheduler), which
/// replaces it: the embedded run and the testenv comparison of a release go
/// to the same files.
pub fn add(history: &Path, release: &str, results: &Path) -> Result<Vec<PathBuf>, String> {
    let mut by_workload: BTreeMap<String, Vec<DataItem>> = BTreeMap::new();
    for f in load_results(results)? {
        for item in f.items.data_items {
            if let Some(w) = workload_of(&item) {
                by_workload.entry(w).or_default().push(item);
            }
        }
    }
    if by_workload.is_empty() {
        return Err(format!("no DataItems in {}", results.display()));
    }
    let dir = history.join(release);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for (workload, items) in by_workload {
        let path = dir.join(format!("{}.json", workload.replace('/', "_")));
        let mut kept: Vec<DataItem> = match std::fs::read_to_string(&path) {
            Ok(text) => {
                serde_json::from_str::<DataItems>(&text)
                    .map_err(|e| format!("{}: {e}", path.display()))?
                    .data_items
            }
            Err(_) => Vec::new(),
        };
        kept.retain(|old| !items.iter().any(|new| new.labels == old.labels));
        kept.extend(items);
        let json =
            serde_json::to_string_pretty(&DataItems::new(kept)).map_err(|e| e.to_string())?;
        std::fs::write(&path, json + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// Every release of `history`, oldest first, its files merged into one
/// [`ResultFile`] whose timestamp is the release.
pub fn load(history: &Path) -> Result<Vec<ResultFile>, String> {
    let entries =
        std::fs::read_dir(history).map_err(|e| format!("reading {}: {e}", history.display()))?;
    let mut releases = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if !path.is_dir() {
            continue;
        }
        let release = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let items: Vec<DataItem> =
            load_results(&path)?.into_iter().flat_map(|f| f.items.data_items).collect();
        if !items.is_empty() {
            releases.push(ResultFile { path, timestamp: release, items: DataItems::new(items) });
        }
    }
    releases.sort_by_key(|r| release_key(&r.timestamp));
    Ok(releases)
}

/// Writes the trend page of `history` to `out`; returns how many releases
/// it covers.
pub fn report(history: &Path, out: &Path) -> Result<usize, String> {
    let releases = load(history)?;
    if releases.is_empty() {
        return Err(format!("no release in {}", history.display()));
    }
    let html = render(&releases, None);
    std::fs::write(out, html).map_err(|e| format!("writing {}: {e}", out.display()))?;
    Ok(releases.len())
}

/// A throughput item's series: its `Name` and its `Scheduler` (empty on
/// the embedded target).
fn series(item: &DataItem) -> Option<(String, String)> {
    if item.labels.get("Metric").map(String::as_str) != Some(SCHEDULING_THROUGHPUT) {
        return None;
    }
    let name = item.labels.get("Name")?.clone();
    Some((name, item.labels.get("Scheduler").cloned().unwrap_or_default()))
}

/// Compares Convoy's `SchedulingThroughput` averages in `current` (a
/// results directory) with those of the newest release of `history`: a
/// series (workload window; the embedded target's, or Convoy's on an API
/// server) more than `band` (0.15: 15 %) below it is a regression. The
/// other schedulers of a comparison (kube-scheduler, the null binder) are
/// not checked, only printed beside Convoy's as ratios. Returns one line
/// per compared series; an error listing the regressions, if any. Series
/// only one side has are not compared.
pub fn check(history: &Path, current: &Path, band: f64) -> Result<Vec<String>, String> {
    let releases = load(history)?;
    let previous = releases.last().ok_or_else(|| format!("no release in {}", history.display()))?;
    let average = |items: &[DataItem]| -> BTreeMap<(String, String), f64> {
        items.iter().filter_map(|i| Some((series(i)?, *i.data.get("Average")?))).collect()
    };
    let before = average(&previous.items.data_items);
    let now: Vec<DataItem> =
        load_results(current)?.into_iter().flat_map(|f| f.items.data_items).collect();
    let now = average(&now);
    let mut lines = Vec::new();
    let mut regressions = Vec::new();
    for ((name, scheduler), value) in &now {
        if !scheduler.is_empty() && scheduler != "convoy" {
            continue;
        }
        let Some(old) = before.get(&(name.clone(), scheduler.clone())) else { continue };
        let ratio = if *old > 0.0 { value / old } else { 1.0 };
        let who = if scheduler.is_empty() { String::new() } else { format!(" [{scheduler}]") };
        let others: Vec<String> = ["kube-scheduler", "null"]
            .iter()
            .filter_map(|o| {
                let theirs = now.get(&(name.clone(), o.to_string()))?;
                (*theirs > 0.0).then(|| format!("{:.2}x {o}", value / theirs))
            })
            .collect();
        let others =
            if others.is_empty() { String::new() } else { format!("; {}", others.join(", ")) };
        let line = format!(
            "{name}{who}: {value:.1} pods/s, {:.2}x {} ({old:.1}){others}",
            ratio, previous.timestamp
        );
        if ratio < 1.0 - band {
            regressions.push(format!("{line}: below the {:.0} % noise band", band * 100.0));
        }
        lines.push(line);
    }
    if regressions.is_empty() { Ok(lines) } else { Err(regressions.join("\n")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, scheduler: Option<&str>, average: f64) -> DataItem {
        let mut labels: BTreeMap<String, String> =
            [("Metric".into(), SCHEDULING_THROUGHPUT.into()), ("Name".into(), name.into())].into();
        if let Some(s) = scheduler {
            labels.insert("Scheduler".into(), s.into());
        }
        DataItem { data: [("Average".into(), average)].into(), unit: "pods/s".into(), labels }
    }

    fn results(dir: &Path, items: Vec<DataItem>) {
        std::fs::create_dir_all(dir).unwrap();
        DataItems::new(items).write(dir, "t").unwrap();
    }

    #[test]
    fn add_report_and_check_across_releases() {
        let root = std::env::temp_dir().join(format!("convoy-history-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let history = root.join("history");
        let run = |n: &str, items| {
            let dir = root.join(n);
            results(&dir, items);
            dir
        };
        let first = run(
            "r1",
            vec![
                item("SchedulingBasic/5000Nodes/namespace-1", Some("convoy"), 500.0),
                item("SchedulingBasic/5000Nodes/namespace-1", Some("kube-scheduler"), 250.0),
                item("Other/1Node/namespace-1", None, 10.0),
            ],
        );
        let written = add(&history, "v0.10.0", &first).unwrap();
        assert_eq!(written.len(), 2, "one file per workload");
        // A second run of the release adds its items to the same files.
        let more =
            run("r1b", vec![item("SchedulingBasic/5000Nodes/namespace-1", Some("null"), 600.0)]);
        add(&history, "v0.10.0", &more).unwrap();
        let text = std::fs::read_to_string(&written[1]).unwrap_or_default()
            + &std::fs::read_to_string(&written[0]).unwrap_or_default();
        assert!(text.contains("\"null\"") && text.contains("\"kube-scheduler\""), "{text}");
        let second =
            run("r2", vec![item("SchedulingBasic/5000Nodes/namespace-1", Some("convoy"), 520.0)]);
        add(&history, "v0.9.0", &second).unwrap();
        // Releases sort by number, not by name.
        let releases: Vec<String> =
            load(&history).unwrap().into_iter().map(|r| r.timestamp).collect();
        assert_eq!(releases, ["v0.9.0", "v0.10.0"]);
        let out = root.join("trend.html");
        assert_eq!(report(&history, &out).unwrap(), 2);
        let page = std::fs::read_to_string(&out).unwrap();
        assert!(page.contains("SchedulingBasic/5000Nodes/namespace-1") && page.contains("v0.9.0"));

        // Against v0.10.0: within the band, then below it.
        let ok =
            run("r3", vec![item("SchedulingBasic/5000Nodes/namespace-1", Some("convoy"), 460.0)]);
        let lines = check(&history, &ok, 0.15).unwrap();
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("0.92x v0.10.0"), "{lines:?}");
        // Only Convoy's series are checked; the others are ratios beside it.
        let mixed = run(
            "r5",
            vec![
                item("SchedulingBasic/5000Nodes/namespace-1", Some("convoy"), 500.0),
                item("SchedulingBasic/5000Nodes/namespace-1", Some("kube-scheduler"), 100.0),
            ],
        );
        let lines = check(&history, &mixed, 0.15).unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].ends_with("5.00x kube-scheduler"), "{lines:?}");
        let slow =
            run("r4", vec![item("SchedulingBasic/5000Nodes/namespace-1", Some("convoy"), 300.0)]);
        let err = check(&history, &slow, 0.15).unwrap_err();
        assert!(err.contains("below the 15 % noise band"), "{err}");
        std::fs::remove_dir_all(&root).ok();
    }
}
