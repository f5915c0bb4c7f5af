//! `benches/config/gang-contention.yaml` (gangs under contention, a queueing
//! GPU stream): every workload plans, and the small `integration-test`
//! workloads run on the embedded target with the gang contention metrics:
//! every gang placed, none partial or deadlocked.

use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::labels::LabelFilter;
use convoy_bench::plan::Step;
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{Config, RunOptions, load_file, run};

fn config() -> Config {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../benches/config/gang-contention.yaml");
    load_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn opts(labels: &str) -> RunOptions {
    RunOptions {
        filter: None,
        labels: LabelFilter::parse(labels),
        topic: "gang-contention".into(),
        embedded: EmbeddedOptions { timeout: Duration::from_secs(60), ..Default::default() },
    }
}

#[test]
fn gang_contention_config_plans_as_a_queue() {
    let plans = convoy_bench::run::plan_all(&config()).unwrap();
    for name in ["GangStarvation/16Nodes", "GangStarvation/64Nodes", "GangTopologyMix/128Nodes"] {
        let step = plans[name]
            .steps
            .iter()
            .find_map(|s| match s {
                Step::CreateGpuJobs(j) => Some(j),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{name}: a createGpuJobs step"));
        assert_eq!(step.backlog, Some(Duration::from_millis(500)), "{name}");
        assert!(plans[name].feature_gates["GenericWorkload"], "{name}");
        assert!(!step.declare_lifetimes, "{name}");
    }
    let deadlines = plans["GangStarvationDeadlines/16Nodes"].steps.iter().find_map(|s| match s {
        Step::CreateGpuJobs(j) => Some(j),
        _ => None,
    });
    assert!(deadlines.unwrap().declare_lifetimes);
}

/// Runs the `integration-test` workload of `test_case` on the embedded
/// target and checks its gang contention metrics: every gang placed,
/// none partial or deadlocked, no evictions. Returns its DataItems.
fn run_small(test_case: &str) -> Vec<convoy_bench::dataitems::DataItem> {
    let mut o = opts("integration-test");
    o.filter = Some(format!("^{test_case}$"));
    let report = run(&config(), &o).unwrap();
    let names: Vec<&str> = report.results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, [format!("{test_case}/16Nodes_10Waves")]);
    let r = &report.results[0];
    assert_eq!(r.error, None, "{}", r.name);
    let metric = |m: &str| {
        r.items
            .iter()
            .find(|i| i.labels["Metric"] == m)
            .unwrap_or_else(|| panic!("{}: no {m} in {:?}", r.name, r.items))
    };
    let c = &metric("GangContention").data;
    assert!(c["Gangs"] >= 2.0, "{}: {c:?}", r.name);
    assert_eq!(c["Placed"], c["Gangs"], "{}: {c:?}", r.name);
    assert_eq!((c["Partial"], c["Deadlocked"]), (0.0, 0.0), "{}: {c:?}", r.name);
    let lat = &metric("GangCreatedToBound").data;
    assert!(lat["Perc50"] > 0.0 && lat["Perc99"] >= lat["Perc50"], "{}: {lat:?}", r.name);
    let util = &metric("GpuUtilization").data;
    assert!(util["MeanArrivalWaves"] > 10.0, "{}: {util:?}", r.name);
    assert_eq!(metric("EvictedPods").data["Total"], 0.0, "{}", r.name);
    r.items.clone()
}

// Two tests, so that the harness runs the two workloads (mostly waiting
// on their waves) side by side.

#[test]
fn small_starvation_workload_places_every_gang_whole() {
    run_small("GangStarvation");
}

#[test]
fn small_starvation_workload_with_declared_lifetimes_places_every_gang_whole() {
    run_small("GangStarvationDeadlines");
}

#[test]
fn small_topology_workload_keeps_each_gang_in_one_rack() {
    let items = run_small("GangTopologyMix");
    let spread = items.iter().find(|i| i.labels["Metric"] == "GpuGangSpread").unwrap();
    assert_eq!(spread.data["DomainsMax"], 1.0, "{:?}", spread.data);
}

#[test]
fn small_preferred_topology_workload_places_every_gang_whole_and_counts_the_fitting_ones() {
    let items = run_small("GangPreferredRack");
    let c = &items.iter().find(|i| i.labels["Metric"] == "GangContention").unwrap().data;
    assert!(c["InOneDomainWhenFitted"] <= c["OneDomainFitted"], "{c:?}");
    assert!(c["OneDomainFitted"] <= c["Placed"], "{c:?}");
}
