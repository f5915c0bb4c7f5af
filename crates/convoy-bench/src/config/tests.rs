use std::path::PathBuf;

use super::*;
use crate::plan::{NodeStrategy, Step, TemplateSource, plan};

fn parse(text: &str) -> Result<Config, ConfigError> {
    parse_str(text, "test.yaml", PathBuf::from("/nonexistent"))
}

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

const BASIC: &str = r#"
- name: SchedulingBasic
  featureGates: {SchedulerQueueingHints: true}
  labels: [misc]
  workloadTemplate:
  - opcode: createNodes
    countParam: $initNodes
    labelNodePrepareStrategy: {labelKey: zone, labelValues: [a, b]}
  - opcode: createNamespaces
    prefix: sched
    count: 2
  - opcode: createPods
    countParam: $initPods
    namespace: sched-0
    skipWaitToCompletion: true
  - opcode: barrier
    namespaces: [sched-0]
  - opcode: sleep
    durationParam: $pause
  - opcode: createPods
    countParam: $groups
    countMultiplierParam: $perGroup
    collectMetrics: true
    templateParams: {perGroup: $perGroup, fixed: 3}
  - opcode: deletePods
    namespace: sched-0
    labelSelector: {app: x}
    deletePodsPerSecond: 10
  - opcode: startCollectingMetrics
    name: late
    namespaces: [sched-1]
  - opcode: stopCollectingMetrics
  workloads:
  - name: 5Nodes
    labels: [short]
    threshold: 100
    params: {initNodes: 5, initPods: 5, groups: 2, perGroup: 3, pause: 10ms}
  - name: ByTopic
    threshold: {misc: 50}
    thresholdMetricSelector: {name: SchedulingThroughput, dataBucket: Perc50}
    params: {initNodes: 5, initPods: 5, groups: 2, perGroup: 3, pause: 1s}
"#;

#[test]
fn parses_upstream_format() {
    let c = parse(BASIC).unwrap();
    let tc = &c.test_cases[0];
    assert_eq!(tc.name, "SchedulingBasic");
    assert_eq!(tc.workload_template.len(), 9);
    assert!(tc.feature_gates["SchedulerQueueingHints"]);
    assert_eq!(tc.labels_of(&tc.workloads[0]), vec!["misc", "short"]);
    assert_eq!(tc.workloads[0].threshold.as_ref().unwrap().for_topic("x"), Some(100.0));
    let by_topic = tc.workloads[1].threshold.as_ref().unwrap();
    assert_eq!(by_topic.for_topic("misc"), Some(50.0));
    assert_eq!(by_topic.for_topic("other"), None);
    assert_eq!(tc.selector_of(&tc.workloads[1]).data_bucket.as_deref(), Some("Perc50"));
    assert_eq!(tc.selector_of(&tc.workloads[0]), ThresholdMetricSelector::default());
}

#[test]
fn plans_resolve_params_and_defaults() {
    let c = parse(BASIC).unwrap();
    let tc = &c.test_cases[0];
    let p = plan(&c, tc, &tc.workloads[0]).unwrap();
    assert_eq!(p.name, "SchedulingBasic/5Nodes");
    let Step::CreateNodes(nodes) = &p.steps[0] else { panic!("{:?}", p.steps[0]) };
    assert_eq!(nodes.count, 5);
    assert_eq!(nodes.template, TemplateSource::Builtin);
    assert!(matches!(&nodes.strategy, Some(NodeStrategy::Label { key, .. }) if key == "zone"));
    assert_eq!(p.steps[1], Step::CreateNamespaces(vec!["sched-0".into(), "sched-1".into()]));
    let Step::CreatePods(measured) = &p.steps[5] else { panic!() };
    assert_eq!(measured.count, 6, "countMultiplierParam multiplies");
    assert_eq!(measured.namespace, "namespace-5", "default namespace is namespace-<opIndex>");
    assert!(measured.collect_metrics);
    assert_eq!(measured.params["perGroup"], crate::template::Value::Int(3));
    assert_eq!(measured.params["fixed"], crate::template::Value::Int(3));
    assert_eq!(p.steps[4], Step::Sleep(std::time::Duration::from_millis(10)));
    assert_eq!(p.feature_gates.len(), 1);
}

#[test]
fn unused_and_undefined_params_are_errors() {
    let c = parse(&BASIC.replace("pause: 10ms}", "pause: 10ms, extra: 1, more: 2}")).unwrap();
    let tc = &c.test_cases[0];
    let e = plan(&c, tc, &tc.workloads[0]).unwrap_err();
    assert_eq!(e, "SchedulingBasic/5Nodes: parameters defined but unused: extra, more");

    let c = parse(&BASIC.replace(
        "initPods: 5, groups: 2, perGroup: 3, pause: 10ms",
        "initPods: 5, groups: 2, perGroup: 3",
    ))
    .unwrap();
    let tc = &c.test_cases[0];
    let e = plan(&c, tc, &tc.workloads[0]).unwrap_err();
    assert!(e.contains("workloadTemplate[4] (sleep): parameter pause is undefined"), "{e}");

    let c = parse(&BASIC.replace(
        "initNodes: 5, initPods: 5, groups: 2, perGroup: 3, pause: 10ms",
        "initNodes: five, initPods: 5, groups: 2, perGroup: 3, pause: 10ms",
    ))
    .unwrap();
    let tc = &c.test_cases[0];
    let e = plan(&c, tc, &tc.workloads[0]).unwrap_err();
    assert!(e.contains("parameter $initNodes must be an integer"), "{e}");
}

fn one_op(op: &str) -> String {
    format!(
        "- name: T\n  workloadTemplate:\n  - {op}\n  - {{opcode: createPods, count: 1, collectMetrics: true}}\n  workloads:\n  - name: w\n"
    )
}

#[test]
fn unknown_opcodes_and_fields_are_errors_naming_them() {
    let cases = [
        ("{opcode: frobnicate}", "unknown opcode \"frobnicate\""),
        (
            "{opcode: churn, mode: create}",
            "opcode \"churn\" is an upstream opcode convoy-bench does not support yet",
        ),
        ("{opcode: createNodes, count: 1, nodeCount: 3}", "unknown field `nodeCount`"),
        (
            "{opcode: createPods, count: 1, steadyState: true}",
            "createPods.steadyState is an upstream field convoy-bench does not support yet",
        ),
        ("{opcode: createNodes}", "createNodes: count or countParam is required"),
        ("{opcode: createNodes, countParam: initNodes}", "must be a \"$param\" reference"),
        ("{opcode: createNodes, count: -1}", "count must be >= 0"),
        ("{opcode: sleep, duration: forever}", "invalid duration \"forever\""),
        (
            "{opcode: barrier, stageRequirement: Attempted}",
            "stageRequirement: Attempted is an upstream field",
        ),
        (
            "{opcode: createPods, count: 1, collectMetrics: true, skipWaitToCompletion: true}",
            "cannot both be true",
        ),
        ("{count: 1}", "missing field `opcode`"),
        (
            "{opcode: createNodes, count: 1, labelNodePrepareStrategy: {labelKey: a, labelValues: [b]}, uniqueNodeLabelStrategy: {labelKey: c}}",
            "at most one node strategy",
        ),
        (
            "{opcode: createNodes, count: 1, nodeAllocatableStrategy: {csiNodeAllocatable: {ebs: {count: 1}}}}",
            "csiNodeAllocatable is an upstream field",
        ),
    ];
    for (op, want) in cases {
        let e = err(&one_op(op));
        assert!(e.contains(want), "{op}: {e}");
        assert!(e.starts_with("test.yaml: "), "{e}");
    }
    // The location of decode errors names the op.
    let e = err(&one_op("{opcode: createNodes, count: 1, nodeCount: 3}"));
    assert!(e.contains("workloadTemplate[0]"), "{e}");
}

#[test]
fn test_case_rules() {
    let ok = one_op("{opcode: createNodes, count: 1}");
    assert!(parse(&ok).is_ok());
    let cases = [
        (format!("{ok}{ok}"), "duplicate test case name"),
        (ok.replace("  - name: w\n", "  - name: w\n  - name: w\n"), "duplicate workload name"),
        (ok.replace(", collectMetrics: true", ""), "no op collects metrics"),
        (ok.replace("  workloads:\n  - name: w\n", "  workloads: []\n"), "no workloads"),
        (ok.replace("  - name: w\n", "  - name: w\n    bogus: 1\n"), "unknown field `bogus`"),
        (ok.replace("- name: T\n", "- name: T\n  frobs: 1\n"), "unknown field `frobs`"),
        (
            ok.replace("- name: T\n", "- name: T\n  metricsCollectorConfig: {metrics: {}}\n"),
            "metricsCollectorConfig is not supported yet",
        ),
        (
            ok.replace(
                "  - name: w\n",
                "  - name: w\n    thresholdMetricSelector: {name: scheduler_x}\n",
            ),
            "measures only SchedulingThroughput",
        ),
    ];
    for (text, want) in cases {
        let e = err(&text);
        assert!(e.contains(want), "{want}: {e}");
    }
}

#[test]
fn template_paths_are_relative_to_the_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pod.yaml"), "metadata: {generateName: p-}\n").unwrap();
    let text = "- name: T\n  defaultPodTemplatePath: pod.yaml\n  workloadTemplate:\n  - {opcode: createPods, count: 1, collectMetrics: true}\n  - {opcode: createPods, count: 1, podTemplatePath: missing.yaml}\n  workloads:\n  - name: w\n";
    let cfg = dir.path().join("perf.yaml");
    std::fs::write(&cfg, text).unwrap();
    let c = load_file(&cfg).unwrap();
    let e = plan(&c, &c.test_cases[0], &c.test_cases[0].workloads[0]).unwrap_err();
    assert!(
        e.contains("workloadTemplate[1] (createPods): reading template")
            && e.contains("missing.yaml"),
        "{e}"
    );
}

#[test]
fn shipped_config_is_valid() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../benches/config/performance-config.yaml");
    let c = load_file(&path).unwrap();
    let plans = crate::run::plan_all(&c).unwrap();
    for name in [
        "SchedulingBasic/500Nodes",
        "SchedulingNodeAffinity/5000Nodes",
        "SchedulingWithTaints/500Nodes",
    ] {
        assert!(plans.contains_key(name), "{name}");
    }
    for tc in &c.test_cases {
        for w in tc.workloads.iter().filter(|w| w.name.ends_with("00Nodes")) {
            assert!(tc.labels_of(w).contains(&"performance"), "{}/{}", tc.name, w.name);
        }
    }
}
