//! End to end on the embedded target: a tiny workload (10 nodes, 50 pods)
//! through the real scheduler, producing a DataItems file; a threshold that
//! cannot be met fails as upstream's does; a workload that cannot finish
//! times out with the scheduler's reason.

use std::path::Path;
use std::time::Duration;

use convoy_bench::dataitems::DataItems;
use convoy_bench::labels::LabelFilter;
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{RunOptions, load_file, run};

const CONFIG: &str = r#"
- name: Tiny
  defaultPodTemplatePath: templates/pod.yaml
  featureGates: {SchedulerQueueingHints: true}
  workloadTemplate:
  - opcode: createNodes
    countParam: $nodes
    labelNodePrepareStrategy: {labelKey: zone, labelValues: [a, b]}
  - opcode: createPods
    countParam: $initPods
    skipWaitToCompletion: true
    templateParams: {group: 1}
  - opcode: barrier
  - opcode: createPods
    countParam: $pods
    collectMetrics: true
    templateParams: {group: $group}
  - opcode: startCollectingMetrics
    name: window
    namespaces: [late]
  - opcode: createPods
    count: 20
    namespace: late
    templateParams: {group: 2}
  - opcode: stopCollectingMetrics
  - opcode: deletePods
    namespace: late
  workloads:
  - name: 10Nodes_50Pods
    labels: [short]
    params: {nodes: 10, initPods: 5, pods: 50, group: 7}
  - name: Impossible
    labels: [impossible]
    threshold: 1e12
    params: {nodes: 10, initPods: 5, pods: 50, group: 7}
- name: TooBig
  workloadTemplate:
  - {opcode: createNodes, count: 1}
  - {opcode: createPods, count: 1, collectMetrics: true, podTemplatePath: templates/huge.yaml}
  workloads:
  - {name: w, labels: [toobig]}
"#;

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  generateName: tiny-
  labels:
    index: "{{.Index}}"
    group: "g{{ Mod .Index .group }}"
spec:
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10.1
    resources:
      requests: {cpu: 100m, memory: 500Mi}
"#;

const HUGE: &str = r#"
spec:
  containers:
  - name: c
    image: x
    resources:
      requests: {cpu: "64"}
"#;

fn setup(dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(dir.join("templates/pod.yaml"), POD).unwrap();
    std::fs::write(dir.join("templates/huge.yaml"), HUGE).unwrap();
    let path = dir.join("perf.yaml");
    std::fs::write(&path, CONFIG).unwrap();
    path
}

fn opts(label: &str) -> RunOptions {
    RunOptions {
        filter: None,
        labels: LabelFilter::parse(label),
        topic: "test".into(),
        embedded: EmbeddedOptions { timeout: Duration::from_secs(60), ..Default::default() },
    }
}

#[test]
fn tiny_workload_produces_data_items() {
    let dir = tempfile::tempdir().unwrap();
    let config = load_file(&setup(dir.path())).unwrap();
    let report = run(&config, &opts("short")).unwrap();
    assert_eq!(report.results.len(), 1);
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert!(!report.failed());
    assert_eq!(r.windows.len(), 2);
    assert_eq!(r.windows[0].name, "namespace-3");
    assert_eq!(r.windows[0].pods, 50, "all measured pods bound inside the window");
    assert_eq!(r.windows[1].name, "window");
    assert_eq!(r.windows[1].pods, 20);
    assert!(!r.windows[0].sampled.samples.is_empty(), "{:?}", r.windows[0]);

    let out = dir.path().join("out");
    let path = report.write(&out, "test").unwrap();
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("BenchmarkPerfScheduling_benchmark_test_"), "{name}");
    let items: DataItems = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(items.version, "v1");
    // Two windows' throughput and the workload's EvictedPods (none).
    assert_eq!(items.data_items.len(), 3);
    let evicted = &items.data_items[2];
    assert_eq!(evicted.labels["Metric"], "EvictedPods");
    assert_eq!(evicted.labels["Name"], "Tiny/10Nodes_50Pods");
    assert_eq!(evicted.data["Total"], 0.0);
    assert!(!report.table().contains("EVICTED"), "no column without evictions");
    let item = &items.data_items[0];
    assert_eq!(item.unit, "pods/s");
    assert_eq!(item.labels["Metric"], "SchedulingThroughput");
    assert_eq!(item.labels["Name"], "Tiny/10Nodes_50Pods/namespace-3");
    for key in ["Average", "Perc50", "Perc90", "Perc95", "Perc99"] {
        assert!(item.data[key] > 0.0, "{key}: {:?}", item.data);
    }
    assert!(path.with_extension("details.json").exists());
    assert!(report.table().contains("Tiny/10Nodes_50Pods/namespace-3"));
}

#[test]
fn a_backlog_is_bound_once_the_scheduler_starts() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/config/performance-config.yaml");
    let config = load_file(&path).unwrap();
    let mut o = opts("short");
    o.filter = Some("^SchedulingBacklog$/^5Nodes$".into());
    let report = run(&config, &o).unwrap();
    assert_eq!(report.results.len(), 1);
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows.len(), 1);
    assert_eq!(r.windows[0].name, "backlog");
    assert_eq!(r.windows[0].pods, 10, "the backlog is bound inside the window");
    let (first, last) = r.windows[0].bind_span.unwrap();
    assert!(first <= last);
}

#[test]
fn threshold_failure_is_reported_as_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let config = load_file(&setup(dir.path())).unwrap();
    let report = run(&config, &opts("impossible")).unwrap();
    assert!(report.failed());
    let r = &report.results[0];
    assert_eq!(r.error, None);
    let failure = r.threshold_failure.as_deref().unwrap();
    assert!(
        failure.starts_with(
            "Tiny/Impossible/namespace-3: expected \"SchedulingThroughput\" \"Average\" to be higher: got "
        ),
        "{failure}"
    );
    assert!(failure.ends_with("want 1000000000000.000000"), "{failure}");
    assert_eq!(r.items[0].data["AverageThreshold"], 1e12);
}

#[test]
fn unschedulable_pods_time_out_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = load_file(&setup(dir.path())).unwrap();
    let mut o = opts("toobig");
    o.embedded.timeout = Duration::from_millis(500);
    let report = run(&config, &o).unwrap();
    let e = report.results[0].error.as_deref().unwrap();
    assert!(e.starts_with("workloadTemplate[1]: timed out"), "{e}");
    assert!(e.contains("0/1 scheduled") && e.contains("Insufficient cpu"), "{e}");
}
