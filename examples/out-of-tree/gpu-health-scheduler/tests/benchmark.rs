//! The example's benchmark runs, on the embedded cluster and on a real API
//! server (testenv) with the example's own binary, its prepare hook
//! registering the CRD and the reports: the workloads labelled `short`.

#[path = "common/prepare.rs"]
mod prepare;

use std::path::Path;

fn benchmark() -> convoy_bench::Benchmark {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/performance-config.yaml");
    convoy_bench::Benchmark::new(config)
        .expect("config")
        .registry(convoy_example_gpu_health_scheduler::registry())
        .labels("short")
        .topic("gpu-health")
        .timeout(std::time::Duration::from_secs(60))
        .prepare(prepare::reports(10))
}

/// The benchmark placed its 40 one-GPU pods on the five healthy nodes
/// (odd-numbered), 8 each: none on a node whose report says unhealthy.
fn placed_as_intended(report: &convoy_bench::run::Report) {
    let binds = &report.results[0].binds_per_node;
    let on = |i: usize| binds.get(&format!("gpu-{i}")).copied().unwrap_or(0);
    let unhealthy: usize = (0..10).step_by(2).map(on).sum();
    assert_eq!(unhealthy, 0, "pods on unhealthy nodes: {binds:?}");
    assert!((1..10).step_by(2).all(|i| on(i) == 8), "{binds:?}");
}

fn throughput(report: &convoy_bench::run::Report) -> f64 {
    report.results[0]
        .items
        .iter()
        .find(|i| i.labels.get("Metric").map(String::as_str) == Some("SchedulingThroughput"))
        .and_then(|i| i.data.get("Average").copied())
        .unwrap_or_default()
}

#[test]
fn the_benchmark_runs_on_the_embedded_cluster() {
    let report = benchmark().run_embedded().expect("planned");
    report.check().expect("ran and met its thresholds");
    assert_eq!(report.results.len(), 1);
    placed_as_intended(&report);
    assert!(throughput(&report) > 0.0, "{:?}", report.results[0].items);
}

#[test]
fn the_benchmark_runs_on_an_api_server_with_the_binary() {
    let env = convoy_testenv::TestEnv::start().expect("testenv");
    let binary = Path::new(env!("CARGO_BIN_EXE_gpu-health-scheduler"));
    let report = benchmark().run_api(env.kubeconfig(), binary).expect("planned");
    report.check().expect("ran and met its thresholds");
    let metric = |i: &convoy_bench::dataitems::DataItem| i.labels.get("Metric").cloned();
    let items = &report.results[0].items;
    assert!(
        items.iter().any(|i| metric(i).as_deref() == Some("SchedulingThroughput")),
        "{items:?}"
    );
    placed_as_intended(&report);
}
