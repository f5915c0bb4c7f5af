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
    let Step::CreateNamespaces(ns) = &p.steps[1] else { panic!("{:?}", p.steps[1]) };
    assert_eq!(ns.names, ["sched-0", "sched-1"]);
    assert_eq!(ns.template, Default::default(), "no template: plain namespaces");
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
            "{opcode: waitForPodGroups}",
            "opcode \"waitForPodGroups\" is an upstream opcode convoy-bench does not support yet",
        ),
        ("{opcode: updateAny}", "updateAny.templatePath is required"),
        (
            "{opcode: updateAny, templatePath: x.yaml, updatePerSecond: -1}",
            "updateAny.updatePerSecond must be >= 0, got -1",
        ),
        ("{opcode: createNodes, count: 1, nodeCount: 3}", "unknown field `nodeCount`"),
        (
            "{opcode: createPods, count: 1, signatureBatchSize: -1}",
            "signatureBatchSize must be >= 0",
        ),
        (
            "{opcode: createPods, count: 1, signatureBatchSizeParam: size}",
            "signatureBatchSizeParam must be a \"$param\" reference",
        ),
        ("{opcode: createNodes}", "createNodes: count or countParam is required"),
        ("{opcode: createNodes, countParam: initNodes}", "must be a \"$param\" reference"),
        ("{opcode: createNodes, count: -1}", "count must be >= 0"),
        ("{opcode: sleep, duration: forever}", "invalid duration \"forever\""),
        (
            "{opcode: barrier, stageRequirement: Bound}",
            "barrier.stageRequirement must be Scheduled or Attempted, got \"Bound\"",
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
            "{opcode: createNodes, count: 1, nodeAllocatableStrategy: {csiNodeAllocatable: {ebs: {limit: 1}}}}",
            "unknown field `limit`",
        ),
        (
            "{opcode: createPods, count: 1, persistentVolumeClaimTemplatePath: pvc.yaml}",
            "persistentVolumeClaimTemplatePath needs persistentVolumeTemplatePath",
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
fn namespace_templates_and_attempted_barriers_plan() {
    let dir = tempfile::tempdir().unwrap();
    let ns = "apiVersion: v1\nkind: Namespace\nmetadata:\n  labels:\n    team: devops\n";
    std::fs::write(dir.path().join("ns.yaml"), ns).unwrap();
    let text = "- name: T\n  workloadTemplate:\n  - {opcode: createNamespaces, prefix: init-ns, countParam: $n, namespaceTemplatePath: ns.yaml}\n  - {opcode: createPods, count: 1, skipWaitToCompletion: true}\n  - {opcode: barrier, stageRequirement: Attempted}\n  - {opcode: barrier, namespaces: [init-ns-0], stageRequirement: Scheduled}\n  - {opcode: createPods, count: 1, collectMetrics: true}\n  workloads:\n  - {name: w, params: {n: 2}}\n";
    let cfg = dir.path().join("perf.yaml");
    std::fs::write(&cfg, text).unwrap();
    let c = load_file(&cfg).unwrap();
    let p = plan(&c, &c.test_cases[0], &c.test_cases[0].workloads[0]).unwrap();
    let Step::CreateNamespaces(s) = &p.steps[0] else { panic!("{:?}", p.steps[0]) };
    let made: Vec<_> = s
        .namespaces()
        .map(|n| (n.metadata.name.unwrap(), n.metadata.labels.unwrap()["team"].clone()))
        .collect();
    assert_eq!(
        made,
        [("init-ns-0".into(), "devops".into()), ("init-ns-1".into(), "devops".into())]
    );
    assert!(matches!(p.steps[2], Step::Barrier { stage: Stage::Attempted, .. }));
    assert!(matches!(p.steps[3], Step::Barrier { stage: Stage::Scheduled, .. }));

    // A template of another kind, or fields a Namespace does not have.
    for (body, want) in [
        ("kind: Pod\nmetadata: {}\n", "kind Pod, expected Namespace"),
        ("metadata: {labels: [a]}\n", "metadata.labels"),
    ] {
        std::fs::write(dir.path().join("ns.yaml"), body).unwrap();
        let c = load_file(&cfg).unwrap();
        let e = plan(&c, &c.test_cases[0], &c.test_cases[0].workloads[0]).unwrap_err();
        assert!(e.contains("(createNamespaces): namespace template") && e.contains(want), "{e}");
    }
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
        "SchedulingWithMixedChurn/5000Nodes_10000Pods",
        "SchedulingSteadyState/5000Nodes",
        "SchedulingPodAffinity/5000Nodes",
        "SchedulingPodAntiAffinity/5000Nodes",
        "SchedulingPreferredPodAffinity/5000Nodes",
        "SchedulingPreferredPodAntiAffinity/5000Nodes",
        "SchedulingRequiredPodAntiAffinityWithNSSelector/5000Nodes",
        "SchedulingPreferredAntiAffinityWithNSSelector/5000Nodes",
        "SchedulingRequiredPodAffinityWithNSSelector/5000Nodes",
        "SchedulingPreferredAffinityWithNSSelector/5000Nodes",
        "TopologySpreading/5000Nodes",
        "PreferredTopologySpreading/5000Nodes",
        "DefaultTopologySpreading/5000Nodes",
    ] {
        assert!(plans.contains_key(name), "{name}");
    }
    for tc in &c.test_cases {
        for w in tc.workloads.iter().filter(|w| w.name.ends_with("00Nodes")) {
            assert!(tc.labels_of(w).contains(&"performance"), "{}/{}", tc.name, w.name);
        }
    }
}

#[test]
fn start_scheduler_plans_once_where_it_is_written() {
    let c = parse(&one_op("{opcode: startScheduler}")).unwrap();
    let p = plan(&c, &c.test_cases[0], &c.test_cases[0].workloads[0]).unwrap();
    assert!(matches!(p.steps[0], Step::StartScheduler));
    assert!(p.starts_scheduler_late());
    let basic = parse(BASIC).unwrap();
    let p = plan(&basic, &basic.test_cases[0], &basic.test_cases[0].workloads[0]).unwrap();
    assert!(!p.starts_scheduler_late());
    let twice = one_op("{opcode: startScheduler}\n  - {opcode: startScheduler}");
    assert!(err(&twice).contains("startScheduler appears more than once"), "{}", err(&twice));
    let e = err(&one_op("{opcode: startScheduler, at: 1}"));
    assert!(e.contains("startScheduler: at: unknown field `at`"), "{e}");
}

#[test]
fn new_ops_reject_bad_input_naming_the_field() {
    let cases = [
        // createPods steady state.
        (
            "{opcode: createPods, count: 1, steadyState: true}",
            "steadyState requires a positive duration",
        ),
        (
            "{opcode: createPods, count: 1, steadyState: true, duration: 0s}",
            "steadyState requires a positive duration",
        ),
        (
            "{opcode: createPods, count: 1, steadyState: true, duration: 1x}",
            "createPods.duration: invalid duration",
        ),
        (
            "{opcode: createPods, count: 1, steadyState: true, duration: 1s, skipWaitToCompletion: true}",
            "skipWaitToCompletion and steadyState cannot both be true",
        ),
        ("{opcode: createPods, count: 1, steadyState: yes}", "steadyState"),
        (
            "{opcode: createPods, count: 1, durationParam: d}",
            "createPods.durationParam must be a \"$param\" reference",
        ),
        (
            "{opcode: createPods, count: 1, steadyStateParam: s}",
            "createPods.steadyStateParam must be a \"$param\"",
        ),
        // createPodSets.
        (
            "{opcode: createPodSets, count: 1, createPodsOp: {count: 1}}",
            "createPodSets.namespacePrefix is required",
        ),
        (
            "{opcode: createPodSets, namespacePrefix: p, createPodsOp: {count: 1}}",
            "createPodSets: count or countParam is required",
        ),
        ("{opcode: createPodSets, count: 1, namespacePrefix: p}", "missing field `createPodsOp`"),
        (
            "{opcode: createPodSets, count: 1, namespacePrefix: p, createPodsOp: {}}",
            "createPodSets.createPodsOp: count or countParam is required",
        ),
        (
            "{opcode: createPodSets, count: 1, namespacePrefix: p, createPodsOp: {opcode: createNodes, count: 1}}",
            "opcode must be createPods",
        ),
        (
            "{opcode: createPodSets, count: 1, namespacePrefix: p, createPodsOp: {count: 1, podCount: 2}}",
            "unknown field `podCount`",
        ),
        // createAny.
        ("{opcode: createAny, namespace: a}", "createAny.templatePath is required"),
        ("{opcode: createAny, templatePath: x.yaml, count: -2}", "createAny.count must be >= 0"),
        (
            "{opcode: createAny, templatePath: x.yaml, countParam: nodes}",
            "createAny.countParam must be a \"$param\"",
        ),
        ("{opcode: createAny, templatePath: x.yaml, template: y}", "unknown field `template`"),
        // createPodGroups.
        (
            "{opcode: createPodGroups, templatePath: x.yaml}",
            "createPodGroups: count or countParam is required",
        ),
        ("{opcode: createPodGroups, count: 1}", "createPodGroups.templatePath is required"),
        (
            "{opcode: createPodGroups, count: 1, templatePath: x.yaml, minMember: 3}",
            "unknown field `minMember`",
        ),
        // churn.
        (
            "{opcode: churn, templatePaths: [a.yaml]}",
            "churn.mode must be one of create, recreate; got \"\"",
        ),
        (
            "{opcode: churn, mode: delete, templatePaths: [a.yaml]}",
            "churn.mode must be one of create, recreate; got \"delete\"",
        ),
        (
            "{opcode: churn, mode: recreate, templatePaths: [a.yaml]}",
            "churn.number must be > 0 in recreate mode, got 0",
        ),
        (
            "{opcode: churn, mode: create, number: -1, templatePaths: [a.yaml]}",
            "churn.number must be >= 0",
        ),
        (
            "{opcode: churn, mode: create, intervalMilliseconds: -5, templatePaths: [a.yaml]}",
            "churn.intervalMilliseconds must be >= 0",
        ),
        ("{opcode: churn, mode: create}", "churn.templatePaths is required"),
        ("{opcode: churn, mode: create, templatePath: a.yaml}", "unknown field `templatePath`"),
    ];
    for (op, want) in cases {
        let e = err(&one_op(op));
        assert!(e.contains(want), "{op}: {e}");
        assert!(e.contains("workloadTemplate[0]"), "{op}: {e}");
    }
}

/// A config using every new op, with its templates in a temporary directory.
fn new_ops_config(dir: &std::path::Path) -> Config {
    for f in ["node.yaml", "pod.yaml", "pg.yaml", "any.yaml"] {
        std::fs::write(dir.join(f), "apiVersion: v1\nkind: Pod\n").unwrap();
    }
    let text = r#"
- name: T
  workloadTemplate:
  - {opcode: createNamespaces, prefix: ns, count: 1}
  - opcode: churn
    mode: recreate
    number: 2
    templatePaths: [node.yaml, pod.yaml]
  - opcode: createPodSets
    countParam: $sets
    namespacePrefix: set
    createPodsOp:
      opcode: createPods
      countParam: $perSet
      templateParams: {x: $x}
  - {opcode: createAny, templatePath: any.yaml}
  - {opcode: createPodGroups, countParam: $groups, templatePath: pg.yaml, templateParams: {size: $size}}
  - opcode: createPods
    count: 4
    steadyStateParam: $steady
    durationParam: $d
    collectMetrics: true
  - {opcode: churn, mode: create, intervalMilliseconds: 20, namespace: c, templatePaths: [pod.yaml]}
  - {opcode: createPods, count: 1, steadyState: true, duration: 2s}
  workloads:
  - name: w
    params: {sets: 3, perSet: 2, x: 7, groups: 5, size: 3, steady: true, d: 10s}
"#;
    let path = dir.join("perf.yaml");
    std::fs::write(&path, text).unwrap();
    load_file(&path).unwrap()
}

#[test]
fn new_ops_plan_as_upstream_unrolls_them() {
    use crate::plan::ChurnMode;
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let c = new_ops_config(dir.path());
    let tc = &c.test_cases[0];
    let p = plan(&c, tc, &tc.workloads[0]).unwrap();
    // createNamespaces, churn, 3 pod sets, createAny, createPodGroups, steady createPods, churn, steady.
    assert_eq!(p.steps.len(), 10);
    assert_eq!(p.origins, [0, 1, 2, 2, 2, 3, 4, 5, 6, 7]);
    let Step::Churn(churn) = &p.steps[1] else { panic!("{:?}", p.steps[1]) };
    assert_eq!(churn.mode, ChurnMode::Recreate { number: 2 });
    assert_eq!(churn.interval, Duration::from_millis(500), "upstream's default interval");
    assert_eq!(churn.namespace, "namespace-1");
    assert_eq!(churn.templates.len(), 2);
    for (k, step) in p.steps[2..5].iter().enumerate() {
        let Step::CreatePods(s) = step else { panic!("{step:?}") };
        assert_eq!(s.namespace, format!("set-{k}"));
        assert_eq!(s.count, 2);
        assert_eq!(s.op_index, 2 + k, "unrolled index");
        assert_eq!(s.params["x"], crate::template::Value::Int(7));
        assert_eq!(s.steady, None);
    }
    let Step::CreateAny(any) = &p.steps[5] else { panic!() };
    assert_eq!((any.count, any.namespace.as_deref()), (1, None));
    let Step::CreatePodGroups(pg) = &p.steps[6] else { panic!() };
    assert_eq!(pg.count, 5);
    assert_eq!(pg.namespace.as_deref(), Some("namespace-6"), "namespace-<unrolled index>");
    assert_eq!(pg.params["size"], crate::template::Value::Int(3));
    let Step::CreatePods(steady) = &p.steps[7] else { panic!() };
    assert_eq!(steady.steady, Some(Duration::from_secs(10)));
    assert_eq!(steady.namespace, "namespace-7");
    let Step::Churn(create) = &p.steps[8] else { panic!() };
    assert_eq!(create.mode, ChurnMode::Create { limit: None });
    assert_eq!((create.interval, create.namespace.as_str()), (Duration::from_millis(20), "c"));
    let Step::CreatePods(fixed) = &p.steps[9] else { panic!() };
    assert_eq!(fixed.steady, Some(Duration::from_secs(2)));
}

#[test]
fn new_ops_param_errors_name_the_op() {
    let dir = tempfile::tempdir().unwrap();
    let c = new_ops_config(dir.path());
    let mut tc = c.test_cases[0].clone();
    let w = &mut tc.workloads[0];
    w.params.insert("steady".into(), serde_json::json!("yes"));
    let e = plan(&c, &tc, &tc.workloads[0]).unwrap_err();
    assert!(
        e.contains("workloadTemplate[5] (createPods): parameter $steady must be a boolean"),
        "{e}"
    );
    let mut tc = c.test_cases[0].clone();
    tc.workloads[0].params.insert("d".into(), serde_json::json!("0s"));
    let e = plan(&c, &tc, &tc.workloads[0]).unwrap_err();
    assert!(e.contains("steadyState requires a positive duration"), "{e}");
    let mut tc = c.test_cases[0].clone();
    tc.workloads[0].params.remove("perSet");
    let e = plan(&c, &tc, &tc.workloads[0]).unwrap_err();
    assert!(
        e.contains("workloadTemplate[2] (createPodSets): parameter perSet is undefined"),
        "{e}"
    );
}
