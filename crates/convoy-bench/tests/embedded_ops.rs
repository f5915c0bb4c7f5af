//! The ops added for issue 5 on the embedded target, each in a small
//! workload through the real scheduler: `createPodSets`, a steady-state
//! `createPods`, `churn` (both modes, nodes and pods), `createAny`,
//! `createPodGroups` and `--prepare` manifests. Nothing here is timed:
//! durations only bound how long a workload runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use convoy_bench::labels::LabelFilter;
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{Report, RunOptions, load_file, run};

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  generateName: p-
  labels: {app: bench}
spec:
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10.1
    resources:
      requests: {cpu: 100m, memory: 100Mi}
"#;

const CHURN_NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  generateName: node-churn-
status:
  capacity: {pods: "110", cpu: "4", memory: 32Gi}
  conditions:
  - {type: Ready, status: "True"}
"#;

const CHURN_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  generateName: pod-churn-
spec:
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10.1
"#;

const ANY_NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: any-{{.Index}}-of-{{.Count}}
  labels: {zone: "{{.zone}}"}
status:
  capacity: {pods: "110", cpu: "4", memory: 32Gi}
"#;

const SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: svc}
spec:
  ports: [{port: 80}]
"#;

const CONFIG_MAP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
"#;

const LABELLED_NAMESPACE: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  labels: {team: devops}
"#;

const GATED_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {generateName: gated-}
spec:
  schedulingGates: [{name: example.com/hold}]
  containers: [{name: pause, image: registry.k8s.io/pause:3.10.1}]
"#;

const HUGE_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {generateName: huge-}
spec:
  containers:
  - name: pause
    image: registry.k8s.io/pause:3.10.1
    resources: {requests: {cpu: "64"}}
"#;

const POD_GROUP: &str = r#"
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata:
  name: gang-{{.Index}}
spec:
  schedulingPolicy:
    gang: {minCount: {{.podsPerGroup}}}
"#;

const POD_GROUP_XK8S: &str = r#"
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: coscheduling-{{.Index}}
spec:
  minMember: 2
"#;

const CONFIG: &str = r#"
- name: PodSets
  defaultPodTemplatePath: pod.yaml
  workloadTemplate:
  - {opcode: createNodes, count: 5}
  - opcode: createPodSets
    count: 3
    namespacePrefix: set
    createPodsOp:
      opcode: createPods
      countParam: $perSet
      collectMetrics: true
  - {opcode: barrier, namespaces: [set-0, set-1, set-2]}
  workloads:
  - {name: w, labels: [podsets], params: {perSet: 7}}

- name: SteadyState
  defaultPodTemplatePath: pod.yaml
  workloadTemplate:
  - {opcode: createNodes, count: 5}
  - {opcode: createNamespaces, prefix: keep, count: 1}
  - {opcode: createPods, count: 10, namespace: keep-0}
  - opcode: createPods
    countParam: $inFlight
    steadyState: true
    durationParam: $duration
    namespace: steady
    collectMetrics: true
  - {opcode: barrier, namespaces: [steady]}
  - {opcode: deletePods, namespace: steady}
  workloads:
  - {name: w, labels: [steady], params: {inFlight: 20, duration: 300ms}}

- name: Churn
  defaultPodTemplatePath: pod.yaml
  workloadTemplate:
  - {opcode: createNodes, count: 3}
  - opcode: churn
    mode: recreate
    number: 2
    intervalMilliseconds: 10
    templatePaths: [churn-node.yaml, churn-pod.yaml]
  - {opcode: churn, mode: create, number: 3, intervalMilliseconds: 10, namespace: grow, templatePaths: [churn-pod.yaml]}
  - {opcode: sleep, duration: 100ms}
  - {opcode: createPods, count: 30, collectMetrics: true}
  workloads:
  - {name: w, labels: [churn]}

- name: ChurnUnsupportedKind
  workloadTemplate:
  - {opcode: churn, mode: create, templatePaths: [config-map.yaml]}
  - {opcode: createPods, count: 1, collectMetrics: true}
  workloads:
  - {name: w, labels: [churn-config-map]}

- name: ChurnServices
  defaultPodTemplatePath: pod.yaml
  workloadTemplate:
  - {opcode: createNodes, count: 1}
  - {opcode: churn, mode: recreate, number: 2, intervalMilliseconds: 10, templatePaths: [service.yaml, labelled-namespace.yaml]}
  - {opcode: sleep, duration: 100ms}
  - {opcode: createPods, count: 5, collectMetrics: true}
  workloads:
  - {name: w, labels: [churn-service]}

- name: LabelledNamespaces
  defaultPodTemplatePath: pod.yaml
  workloadTemplate:
  - {opcode: createNodes, count: 1}
  - {opcode: createNamespaces, prefix: team, count: 2, namespaceTemplatePath: labelled-namespace.yaml}
  - {opcode: createAny, templatePath: service.yaml, namespace: team-0}
  - {opcode: createPods, count: 5, namespace: team-1, collectMetrics: true}
  workloads:
  - {name: w, labels: [namespaces]}

- name: AttemptedBarrier
  defaultPodTemplatePath: pod.yaml
  workloadTemplate:
  - {opcode: createNodes, count: 1}
  - {opcode: createPods, count: 3, podTemplatePath: gated-pod.yaml, skipWaitToCompletion: true}
  - {opcode: createPods, count: 2, podTemplatePath: huge-pod.yaml, skipWaitToCompletion: true}
  - {opcode: createPods, count: 2, skipWaitToCompletion: true}
  - {opcode: barrier, stageRequirement: Attempted}
  - {opcode: createPods, count: 5, collectMetrics: true}
  workloads:
  - {name: w, labels: [attempted]}

- name: ScheduledBarrier
  defaultPodTemplatePath: pod.yaml
  workloadTemplate:
  - {opcode: createNodes, count: 1}
  - {opcode: createPods, count: 3, podTemplatePath: gated-pod.yaml, skipWaitToCompletion: true}
  - {opcode: barrier}
  - {opcode: createPods, count: 5, collectMetrics: true}
  workloads:
  - {name: w, labels: [scheduled]}

- name: CreateAny
  defaultPodTemplatePath: pod.yaml
  workloadTemplate:
  - opcode: createAny
    templatePath: any-node.yaml
    countParam: $nodes
    templateParams: {zone: $zone}
  - {opcode: createAny, templatePath: pod.yaml, namespace: extra}
  - {opcode: createPods, count: 10, collectMetrics: true}
  - {opcode: barrier, namespaces: [extra]}
  workloads:
  - {name: w, labels: [any], params: {nodes: 2, zone: z1}}

- name: CreateAnyErrors
  workloadTemplate:
  - {opcode: createNodes, count: 1}
  - {opcode: createAny, templatePath: $template, namespace: $namespace}
  - {opcode: createPods, count: 1, collectMetrics: true}
  workloads:
  - {name: ConfigMap, labels: [any-config-map], params: {}}

- name: PodGroups
  workloadTemplate:
  - {opcode: createNodes, count: 1}
  - {opcode: createNamespaces, prefix: gang-ns, count: 2}
  - opcode: createPodGroups
    count: 2
    namespace: gang-ns-0
    templatePath: pod-group.yaml
    templateParams: {podsPerGroup: 3}
  - {opcode: createPods, count: 1, collectMetrics: true}
  - opcode: createAny
    namespace: gang-ns-1
    templatePath: pod-group-xk8s.yaml
    count: 2
  workloads:
  - {name: w, labels: [podgroups]}

- name: PodGroupsTwice
  workloadTemplate:
  - {opcode: createNodes, count: 1}
  - {opcode: createPodGroups, count: 1, namespace: gang-ns-0, templatePath: pod-group.yaml, templateParams: {podsPerGroup: 1}}
  - {opcode: createAny, namespace: gang-ns-0, templatePath: pod-group.yaml, templateParams: {podsPerGroup: 1}}
  - {opcode: createPods, count: 1, collectMetrics: true}
  workloads:
  - {name: w, labels: [podgroups-twice]}

- name: Prepared
  defaultPodTemplatePath: pod.yaml
  workloadTemplate:
  - {opcode: createPods, count: 10, collectMetrics: true}
  workloads:
  - {name: w, labels: [prepared]}
"#;

fn setup(dir: &Path) -> PathBuf {
    let files = [
        ("pod.yaml", POD),
        ("churn-node.yaml", CHURN_NODE),
        ("churn-pod.yaml", CHURN_POD),
        ("any-node.yaml", ANY_NODE),
        ("service.yaml", SERVICE),
        ("config-map.yaml", CONFIG_MAP),
        ("labelled-namespace.yaml", LABELLED_NAMESPACE),
        ("gated-pod.yaml", GATED_POD),
        ("huge-pod.yaml", HUGE_POD),
        ("pod-group.yaml", POD_GROUP),
        ("pod-group-xk8s.yaml", POD_GROUP_XK8S),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    // createAny's template and namespace are not params upstream: the
    // error workload names them literally.
    let config = CONFIG.replace(
        "templatePath: $template, namespace: $namespace",
        "templatePath: config-map.yaml, namespace: a",
    );
    let path = dir.join("perf.yaml");
    std::fs::write(&path, config).unwrap();
    path
}

fn run_label(label: &str, embedded: EmbeddedOptions) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let config = load_file(&setup(dir.path())).unwrap();
    let opts = RunOptions {
        filter: None,
        labels: LabelFilter::parse(label),
        topic: "test".into(),
        embedded: EmbeddedOptions {
            timeout: embedded.timeout.min(Duration::from_secs(60)),
            ..embedded
        },
    };
    let report = run(&config, &opts).unwrap();
    assert_eq!(report.results.len(), 1, "{label}");
    report
}

#[test]
fn pod_sets_unroll_into_one_measured_create_pods_per_namespace() {
    let report = run_label("podsets", EmbeddedOptions::default());
    let r = &report.results[0];
    assert_eq!(r.error, None);
    let names: Vec<_> = r.windows.iter().map(|w| (w.name.as_str(), w.pods)).collect();
    assert_eq!(names, [("set-0", 7), ("set-1", 7), ("set-2", 7)]);
}

#[test]
fn steady_state_replaces_bound_pods_until_the_duration() {
    let report = run_label("steady", EmbeddedOptions::default());
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows.len(), 1);
    let w = &r.windows[0];
    assert_eq!(w.name, "steady");
    // Each bound pod is replaced, so more pods are bound than are ever
    // present; the window lasts the whole duration.
    assert!(w.pods > 20, "{w:?}");
    assert!(w.duration >= Duration::from_millis(300), "{w:?}");
}

#[test]
fn churn_runs_in_the_background_in_both_modes() {
    let report = run_label("churn", EmbeddedOptions::default());
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows[0].pods, 30);
}

#[test]
fn churn_refuses_kinds_the_embedded_target_cannot_hold() {
    let report = run_label("churn-config-map", EmbeddedOptions::default());
    let e = report.results[0].error.as_deref().unwrap();
    assert!(
        e.starts_with("workloadTemplate[0]: churn: kind ConfigMap (v1) is not supported"),
        "{e}"
    );
}

#[test]
fn churn_services_and_namespaces() {
    let report = run_label("churn-service", EmbeddedOptions::default());
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows[0].pods, 5);
}

#[test]
fn labelled_namespaces_and_services_are_created() {
    let report = run_label("namespaces", EmbeddedOptions::default());
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows[0].pods, 5);
}

#[test]
fn attempted_barrier_passes_on_gated_and_unschedulable_pods() {
    let report = run_label("attempted", EmbeddedOptions::default());
    let r = &report.results[0];
    assert_eq!(r.error, None, "gated pods carry PodScheduled=False, unschedulable ones were tried");
    assert_eq!(r.windows[0].pods, 5);

    // The default stage waits for the gated pods to be bound: never.
    let short = EmbeddedOptions { timeout: Duration::from_millis(300), ..Default::default() };
    let report = run_label("scheduled", short);
    let e = report.results[0].error.as_deref().unwrap();
    assert!(e.starts_with("workloadTemplate[2]: timed out") && e.contains("0/3 scheduled"), "{e}");
}

#[test]
fn create_any_makes_nodes_and_pods_from_templates() {
    let report = run_label("any", EmbeddedOptions::default());
    let r = &report.results[0];
    assert_eq!(r.error, None, "the two createAny nodes hold the pods");
    assert_eq!(r.windows[0].pods, 10);
}

#[test]
fn create_any_refuses_other_kinds_naming_them() {
    let report = run_label("any-config-map", EmbeddedOptions::default());
    let e = report.results[0].error.as_deref().unwrap();
    assert!(
        e.starts_with(
            "workloadTemplate[1]: kind ConfigMap (v1) is not supported on the embedded target"
        ),
        "{e}"
    );
}

#[test]
fn create_pod_groups_on_the_embedded_target() {
    let report = run_label("podgroups", EmbeddedOptions::default());
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows[0].pods, 1);

    let report = run_label("podgroups-twice", EmbeddedOptions::default());
    let e = report.results[0].error.as_deref().unwrap();
    assert_eq!(
        e,
        "workloadTemplate[2]: PodGroup gang-ns-0/gang-0 (scheduling.k8s.io/v1beta1) already exists"
    );
}

#[test]
fn prepare_manifests_create_objects_and_skip_crds() {
    let manifests = convoy_bench::any::parse_manifests(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec: {group: example.com}
---
apiVersion: v1
kind: Node
metadata: {name: prepared-node}
status:
  capacity: {pods: "110", cpu: "4", memory: 32Gi}
"#,
        "prepare.yaml",
    )
    .unwrap();
    let report =
        run_label("prepared", EmbeddedOptions { prepare: manifests, ..Default::default() });
    let r = &report.results[0];
    assert_eq!(r.error, None, "the prepared node holds the pods");
    assert_eq!(r.windows[0].pods, 10);

    let bad = convoy_bench::any::parse_manifests(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        "prepare.yaml",
    )
    .unwrap();
    let report = run_label("prepared", EmbeddedOptions { prepare: bad, ..Default::default() });
    let e = report.results[0].error.as_deref().unwrap();
    assert!(e.starts_with("prepare: kind ConfigMap (v1) is not supported"), "{e}");
}
