//! `benches/config/gang-config.yaml` (upstream's GangScheduling shape and
//! its scheduler-plugins twin): it loads and plans, its workloads carry
//! upstream's names and params, and the small `integration-test` workloads
//! run on the embedded target with the group metrics beside throughput.

use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::labels::LabelFilter;
use convoy_bench::measure::groups::{
    DEF_CREATED_TO_BOUND, DEF_GROUP_CYCLE, POD_GROUP_SCHEDULING_LATENCY, POD_GROUP_THROUGHPUT,
};
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{Config, RunOptions, load_file, run};

fn config() -> Config {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../benches/config/gang-config.yaml");
    load_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn opts(filter: Option<&str>, labels: &str) -> RunOptions {
    RunOptions {
        filter: filter.map(String::from),
        labels: LabelFilter::parse(labels),
        topic: "gang".into(),
        embedded: EmbeddedOptions { timeout: Duration::from_secs(60), ..Default::default() },
    }
}

#[test]
fn gang_config_plans_with_upstreams_workloads() {
    let config = config();
    let plans = convoy_bench::run::plan_all(&config).unwrap();
    for name in [
        "GangScheduling/500Nodes_100Gangs_300Pods",
        "GangScheduling/5000Nodes_1000Gangs_3000Pods",
        "GangScheduling/5000Nodes_2000Gangs_6000Pods",
        "GangScheduling/5000Nodes_3000Gangs_9000Pods",
        "GangScheduling/5000Nodes_10Gangs_10000Pods_1000PerGroup",
        "GangSchedulingXK8s/500Nodes_100Gangs_300Pods",
    ] {
        assert!(plans.contains_key(name), "{name} in {:?}", plans.keys());
    }
    assert!(plans["GangScheduling/500Nodes_100Gangs_300Pods"].feature_gates["GenericWorkload"]);
    let selected = |filter: Option<&str>, labels: &str| -> Vec<String> {
        convoy_bench::run::select(&config, &opts(filter, labels))
            .iter()
            .map(|(tc, w)| format!("{}/{}", tc.name, w.name))
            .collect()
    };
    // The quick workloads: `performance` + `short` at 500 nodes.
    assert_eq!(
        selected(None, "performance,+short"),
        [
            "GangScheduling/500Nodes_100Gangs_300Pods",
            "GangSchedulingXK8s/500Nodes_100Gangs_300Pods"
        ]
    );
    assert_eq!(selected(Some("^GangScheduling$"), "performance").len(), 5);
}

#[test]
fn small_gang_workloads_run_with_group_metrics() {
    let config = config();
    let report = run(&config, &opts(None, "integration-test")).unwrap();
    let names: Vec<&str> = report.results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["GangScheduling/10Nodes_3Gangs", "GangSchedulingXK8s/10Nodes_3Gangs"]);
    for r in &report.results {
        assert_eq!(r.error, None, "{}", r.name);
        assert_eq!(r.windows.len(), 1, "{}", r.name);
        let w = &r.windows[0];
        assert_eq!(w.pods, 9, "{}: 3 gangs of 3", r.name);
        let g = w.groups.as_ref().unwrap_or_else(|| panic!("{}: no group metrics", r.name));
        assert_eq!(g.placed, 3, "{}", r.name);
        assert_eq!(g.latencies.len(), 3, "{}", r.name);
        // Each group is placed in one cycle (no failed attempt: 10 nodes
        // hold 3 gangs of 100m pods easily).
        assert_eq!((g.cycles.len(), g.failed_cycles), (3, 0), "{}", r.name);
        let item = |metric: &str, definition: Option<&str>| {
            r.items.iter().find(|i| {
                i.labels.get("Metric").map(String::as_str) == Some(metric)
                    && i.labels.get("Definition").map(String::as_str) == definition
            })
        };
        for (metric, def, unit) in [
            (POD_GROUP_SCHEDULING_LATENCY, Some(DEF_CREATED_TO_BOUND), "ms"),
            (POD_GROUP_SCHEDULING_LATENCY, Some(DEF_GROUP_CYCLE), "ms"),
        ] {
            let i = item(metric, def).unwrap_or_else(|| panic!("{}: {metric} {def:?}", r.name));
            assert_eq!(i.unit, unit);
            assert_eq!(i.labels["Name"], format!("{}/gang-ns-0", r.name));
            for bucket in ["Average", "Perc50", "Perc90", "Perc99"] {
                assert!(i.data[bucket] >= 0.0, "{}: {metric} {bucket}", r.name);
            }
            assert!(i.data["Perc50"] <= i.data["Perc99"]);
        }
        // Groups per second needs at least two sampling ticks after the
        // first complete group; with 3 groups it may have none.
        if let Some(i) = item(POD_GROUP_THROUGHPUT, None) {
            assert_eq!(i.unit, "groups/s");
        }
    }
}
