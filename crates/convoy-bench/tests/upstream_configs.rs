//! Upstream's own scheduler_perf config files (reconstructed in
//! `tests/fixtures/upstream/`, see its README), loaded unchanged: every
//! workload plans, and the small `integration-test` workloads run on the
//! embedded target. SchedulingWithNodeInclusionPolicy's pods carry a
//! hostname spread constraint with `nodeTaintsPolicy: Honor`: the tainted
//! node is left out of the spread (and filtered by its taint), so the four
//! pods land one per untainted node.

use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::embedded::EmbeddedOptions;
use convoy_bench::labels::LabelFilter;
use convoy_bench::{RunOptions, load_file, run};

fn fixture(topic: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upstream")
        .join(topic)
        .join("performance-config.yaml")
}

#[test]
fn upstream_configs_load_plan_and_run_their_integration_workloads() {
    let cases = [
        ("misc", "SchedulingBasic/5Nodes", 10),
        ("affinity", "SchedulingNodeAffinity/5Nodes", 10),
        ("topology_spreading", "SchedulingWithNodeInclusionPolicy/5Nodes", 4),
    ];
    for (topic, name, pods) in cases {
        let config = load_file(&fixture(topic)).unwrap_or_else(|e| panic!("{topic}: {e}"));
        let plans = convoy_bench::run::plan_all(&config).unwrap_or_else(|e| panic!("{topic}: {e}"));
        assert!(plans.len() >= 3, "{topic}: {:?}", plans.keys());
        let opts = RunOptions {
            filter: None,
            labels: LabelFilter::parse("integration-test"),
            topic: topic.into(),
            embedded: EmbeddedOptions { timeout: Duration::from_secs(60), ..Default::default() },
        };
        let report = run(&config, &opts).unwrap();
        assert_eq!(report.results.len(), 1, "{topic}");
        let r = &report.results[0];
        assert_eq!(r.name, name);
        assert_eq!(r.error, None, "{name}");
        assert_eq!(r.windows.len(), 1, "{name}");
        assert_eq!(r.windows[0].pods, pods, "{name}");
    }
}

#[test]
fn upstream_labels_select_as_upstream() {
    let config = load_file(&fixture("misc")).unwrap();
    let select = |filter: &str| {
        let opts = RunOptions {
            filter: None,
            labels: LabelFilter::parse(filter),
            topic: "misc".into(),
            embedded: EmbeddedOptions::default(),
        };
        convoy_bench::run::select(&config, &opts)
            .iter()
            .map(|(_, w)| w.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(select("performance"), ["500Nodes", "5000Nodes", "5000Nodes_10000Pods"]);
    assert_eq!(select("performance,short"), ["500Nodes", "5000Nodes"]);
    assert_eq!(select("integration-test,-performance"), ["5Nodes"]);
}
