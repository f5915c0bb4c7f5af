//! End to end on a real API server: `compare` runs a tiny workload (5
//! nodes, 20 pods) with Convoy's binary, upstream kube-scheduler and the
//! null binder, each on a fresh testenv control plane, and writes one
//! DataItems file with every scheduler's throughput and resource use.

mod common;

use common::convoy_scheduler;

use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::compare::compare;
use convoy_bench::dataitems::DataItems;
use convoy_bench::labels::LabelFilter;
use convoy_bench::measure::throughput::SampleInterval;
use convoy_bench::targets::api::{ApiOptions, SchedulerKind};
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{RunOptions, parse_str};

const CONFIG: &str = r#"
- name: Tiny
  workloadTemplate:
  - opcode: createNodes
    countParam: $nodes
  - opcode: createNamespaces
    prefix: init
    count: 1
  - opcode: createPods
    countParam: $initPods
    namespace: init-0
    skipWaitToCompletion: true
  - opcode: barrier
  - opcode: createPods
    countParam: $pods
    collectMetrics: true
  workloads:
  - name: 5Nodes_20Pods
    params: {nodes: 5, initPods: 5, pods: 15}
"#;

#[test]
fn compare_three_schedulers_on_testenv() {
    let convoy = convoy_scheduler();
    let config = parse_str(CONFIG, "tiny.yaml", PathBuf::from(".")).expect("config");
    let opts = RunOptions {
        filter: Some("Tiny/5Nodes_20Pods".into()),
        labels: LabelFilter::parse(""),
        topic: "compare".into(),
        embedded: EmbeddedOptions::default(),
    };
    let mut api = ApiOptions::new(PathBuf::new(), SchedulerKind::Convoy);
    api.convoy_binary = Some(convoy);
    // Finer than upstream's 1 s so that a 15-pod window yields samples.
    api.sample_interval = SampleInterval::Fixed(Duration::from_millis(10));
    api.timeout = Duration::from_secs(60);
    let cmp = compare(&config, &opts, &api, &SchedulerKind::ALL, convoy_testenv::Options::API_ONLY)
        .expect("compare");
    println!("{}", cmp.table());

    assert_eq!(cmp.runs.len(), 3);
    for (scheduler, report) in &cmp.runs {
        let r = &report.results[0];
        assert_eq!(r.error, None, "{}", scheduler.name());
        assert_eq!(r.windows.len(), 1, "{}", scheduler.name());
        assert_eq!(r.windows[0].pods, 15, "{}: all measured pods bound", scheduler.name());
    }

    let dir = tempfile::tempdir().unwrap();
    let path = cmp.write(dir.path(), "compare").unwrap();
    let items: DataItems = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let has = |metric: &str, scheduler: SchedulerKind| {
        items.data_items.iter().any(|i| {
            i.labels.get("Metric").map(String::as_str) == Some(metric)
                && i.labels.get("Scheduler").map(String::as_str) == Some(scheduler.name())
                && i.labels.get("Name").is_some_and(|n| n.starts_with("Tiny/5Nodes_20Pods"))
        })
    };
    for s in SchedulerKind::ALL {
        assert!(has("SchedulingThroughput", s), "{} throughput in {items:?}", s.name());
    }
    for s in [SchedulerKind::Convoy, SchedulerKind::KubeScheduler] {
        assert!(has("SchedulerPeakMemory", s), "{} memory", s.name());
        assert!(has("SchedulerCPUTime", s), "{} CPU", s.name());
    }
    assert!(!has("SchedulerPeakMemory", SchedulerKind::Null));
}
