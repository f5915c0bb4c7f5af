//! `benches/config/gpu-fragmentation.yaml`: every workload plans (the
//! trace's mix file loads with its 112 shapes, every node type resolves),
//! and the small `integration-test` workloads run on the embedded target
//! with the GPU metrics beside throughput.

use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::labels::LabelFilter;
use convoy_bench::plan::Step;
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{Config, RunOptions, load_file, run};

fn config() -> Config {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../benches/config/gpu-fragmentation.yaml");
    load_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn opts(labels: &str) -> RunOptions {
    RunOptions {
        filter: None,
        labels: LabelFilter::parse(labels),
        topic: "gpu".into(),
        embedded: EmbeddedOptions { timeout: Duration::from_secs(120), ..Default::default() },
    }
}

#[test]
fn gpu_config_plans_with_the_traces_mix() {
    let plans = convoy_bench::run::plan_all(&config()).unwrap();
    let trace = &plans["GpuFragmentationTrace/401Nodes"];
    let jobs = trace
        .steps
        .iter()
        .find_map(|s| match s {
            Step::CreateGpuJobs(j) => Some(j),
            _ => None,
        })
        .expect("a createGpuJobs step");
    assert_eq!(jobs.mix.len(), 112, "the trace's shapes");
    let tasks: f64 = jobs.mix.iter().map(|m| m.weight).sum();
    assert_eq!(tasks, 8152.0, "every task of openb_pod_list_default.csv");
    let by_gpus = |g: u32| jobs.mix.iter().filter(|m| m.gpus == g).map(|m| m.weight).sum::<f64>();
    assert_eq!(
        [0, 1, 2, 4, 8].map(by_gpus),
        [1088.0, 6989.0, 16.0, 15.0, 44.0],
        "tasks per GPU count, as the file's header says"
    );
    assert!(jobs.mix.iter().all(|m| m.cpu_milli.is_some() && m.memory_mib.is_some()));
    let nodes = trace.steps.iter().filter(|s| matches!(s, Step::CreateNodes(_))).count();
    assert_eq!(nodes, 11, "one createNodes per node type");
    for name in ["GpuFragmentation/500Nodes", "GpuFragmentationTrace/1205Nodes"] {
        assert!(plans.contains_key(name), "{name}");
    }
}

#[test]
fn small_gpu_workloads_run_with_the_gpu_metrics() {
    let report = run(&config(), &opts("integration-test")).unwrap();
    let names: Vec<&str> = report.results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "GpuFragmentation/50Nodes",
            "GpuFragmentationDra/50Nodes",
            "GpuFragmentationTrace/58Nodes"
        ]
    );
    for r in &report.results {
        assert_eq!(r.error, None, "{}", r.name);
        let item = |metric: &str| {
            r.items
                .iter()
                .find(|i| i.labels.get("Metric").map(String::as_str) == Some(metric))
                .unwrap_or_else(|| panic!("{}: no {metric}", r.name))
        };
        let jobs = item("GpuJobs");
        let total = if r.name.ends_with("50Nodes") { 450.0 } else { 900.0 };
        assert_eq!(jobs.data["Accepted"] + jobs.data["Rejected"], total, "{}", r.name);
        assert_eq!(jobs.data["StalledWaves"], 0.0, "{}", r.name);
        let stranded = item("GpuStrandedAtSaturation");
        assert!(stranded.data["SaturatedWaves"] > 0.0, "{}: the stream saturates", r.name);
        item("GpuUnallocatedAtSaturation");
        item("GpuFullyFreeNodes");
        item("SchedulingThroughput");
        if r.name.starts_with("GpuFragmentationTrace") {
            // The median requested GPU belongs to a 1-GPU task of the
            // trace; its CPU and memory are the trace's.
            assert_eq!(stranded.data["MedianRequest"], 1.0);
            assert_eq!(stranded.data["MedianRequestCpuMilli"], 11300.0);
            assert_eq!(stranded.data["MedianRequestMemoryMiB"], 49152.0);
        } else {
            assert_eq!(stranded.data["MedianRequest"], 4.0);
        }
    }
}
