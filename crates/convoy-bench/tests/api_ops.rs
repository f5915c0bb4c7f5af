//! The ops added for issue 5 on a real API server (a fresh testenv
//! control plane) with the null binder, so that no scheduler binary is
//! needed: `--prepare` with a CRD waited for until Established and a
//! custom resource of it, `createAny` of a ConfigMap and of pods,
//! `createPodGroups`, `churn` of a Service, `createPodSets`, a
//! steady-state `createPods`, `createNamespaces` with a
//! `namespaceTemplatePath` (labelled namespaces) and a `barrier` with
//! `stageRequirement: Attempted` over gated pods (the API server marks
//! them `PodScheduled=False`, `SchedulingGated`).

use std::time::Duration;

use convoy_bench::labels::LabelFilter;
use convoy_bench::measure::throughput::SampleInterval;
use convoy_bench::targets::api::{ApiOptions, SchedulerKind};
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{RunOptions, parse_str};
use convoy_testenv::TestEnv;

const CONFIG: &str = r#"
- name: Ops
  workloadTemplate:
  - {opcode: createNodes, count: 3}
  - {opcode: createNamespaces, prefix: any, count: 1}
  - {opcode: createAny, namespace: any-0, templatePath: configmap.yaml, count: 3}
  - {opcode: createAny, namespace: any-0, templatePath: widget.yaml}
  - {opcode: createAny, namespace: any-0, templatePath: pod.yaml, count: 2}
  - {opcode: barrier, namespaces: [any-0]}
  - {opcode: churn, mode: recreate, number: 2, intervalMilliseconds: 50, templatePaths: [service.yaml, pod.yaml]}
  - opcode: createPodSets
    count: 2
    namespacePrefix: set
    createPodsOp: {opcode: createPods, count: 5, podTemplatePath: pod.yaml}
  - {opcode: createPods, count: 10, steadyState: true, duration: 2s, namespace: steady, podTemplatePath: pod.yaml, collectMetrics: true}
  workloads:
  - {name: w}
- name: Labelled
  # Runs after Ops, on its nodes.
  workloadTemplate:
  - {opcode: createNamespaces, prefix: team, count: 2, namespaceTemplatePath: namespace.yaml}
  - {opcode: createPods, count: 3, namespace: team-0, podTemplatePath: gated-pod.yaml, skipWaitToCompletion: true}
  - {opcode: barrier, stageRequirement: Attempted}
  - {opcode: createPods, count: 2, namespace: team-1, podTemplatePath: pod.yaml, collectMetrics: true}
  workloads:
  - {name: w}
- name: PodGroups
  workloadTemplate:
  - {opcode: createPodGroups, count: 1, namespace: g, templatePath: podgroup.yaml}
  - {opcode: createPods, count: 1, collectMetrics: true}
  workloads:
  - {name: w}
"#;

const PREPARE: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.bench.convoy.dev
spec:
  group: bench.convoy.dev
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: bench.convoy.dev/v1
kind: Widget
metadata: {name: prepared, namespace: prepared}
spec: {size: 1}
"#;

#[test]
fn new_ops_on_a_real_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "configmap.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: cm-}\ndata: {i: \"{{.Index}}\"}\n",
        ),
        (
            "widget.yaml",
            "apiVersion: bench.convoy.dev/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 2}\n",
        ),
        (
            "pod.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {generateName: p-}\nspec:\n  containers:\n  - {name: c, image: registry.k8s.io/pause:3.10.1}\n",
        ),
        (
            "service.yaml",
            "apiVersion: v1\nkind: Service\nmetadata: {generateName: svc-}\nspec:\n  ports: [{port: 80}]\n",
        ),
        (
            "namespace.yaml",
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  labels: {team: devops}\n",
        ),
        (
            "gated-pod.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {generateName: gated-}\nspec:\n  schedulingGates: [{name: example.com/hold}]\n  containers:\n  - {name: c, image: registry.k8s.io/pause:3.10.1}\n",
        ),
        (
            "podgroup.yaml",
            "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {name: g}\nspec:\n  schedulingPolicy: {basic: {}}\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let config = parse_str(CONFIG, "ops.yaml", dir.path().to_path_buf()).unwrap();
    let env = TestEnv::start().expect("testenv");
    let mut api = ApiOptions::new(env.kubeconfig().to_path_buf(), SchedulerKind::Null);
    api.sample_interval = SampleInterval::Fixed(Duration::from_millis(100));
    api.timeout = Duration::from_secs(60);
    api.prepare = convoy_bench::any::parse_manifests(PREPARE, "prepare.yaml").unwrap();
    let opts = |filter: &str| RunOptions {
        filter: Some(filter.into()),
        labels: LabelFilter::parse(""),
        topic: "test".into(),
        embedded: EmbeddedOptions::default(),
    };
    let report = convoy_bench::run::run_api(&config, &opts("^Ops$"), &api).unwrap();
    let r = &report.results[0];
    assert_eq!(r.error, None);
    let w = &r.windows[0];
    assert_eq!(w.name, "steady");
    assert!(w.pods > 10, "bound pods are replaced: {w:?}");

    // What the workload left on the API server.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
        use kube::api::{Api, ListParams};
        let client = env.client().await.unwrap();
        let cms = Api::<ConfigMap>::namespaced(client.clone(), "any-0");
        let names: Vec<String> = cms
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .filter(|c| c.starts_with("cm-"))
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        let services = Api::<Service>::namespaced(client.clone(), "namespace-6");
        let svc = services.list(&ListParams::default()).await.unwrap().items;
        assert!(svc.len() <= 2, "recreate keeps at most `number` per template: {}", svc.len());
        for ns in ["set-0", "set-1"] {
            let pods = Api::<Pod>::namespaced(client.clone(), ns);
            assert_eq!(pods.list(&ListParams::default()).await.unwrap().items.len(), 5, "{ns}");
        }
    });

    // Labelled namespaces; the barrier passed over the gated pods.
    let report = convoy_bench::run::run_api(&config, &opts("Labelled"), &api).unwrap();
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows[0].pods, 2);
    rt.block_on(async {
        use k8s_openapi::api::core::v1::Namespace;
        use kube::api::Api;
        let client = env.client().await.unwrap();
        for name in ["team-0", "team-1"] {
            let ns = Api::<Namespace>::all(client.clone()).get(name).await.unwrap();
            assert_eq!(ns.metadata.labels.unwrap_or_default()["team"], "devops", "{name}");
        }
    });

    // testenv's API server may or may not serve scheduling.k8s.io/v1beta1:
    // either the PodGroup is created, or the error names the kind.
    let report = convoy_bench::run::run_api(&config, &opts("PodGroups"), &api).unwrap();
    if let Some(e) = report.results[0].error.as_deref() {
        assert!(
            e.starts_with(
                "workloadTemplate[0]: kind PodGroup (scheduling.k8s.io/v1beta1) is not served"
            ),
            "{e}"
        );
    }
}

/// `startScheduler` on an API server: the pods wait with no scheduler
/// (the null binder starts after them), then are all bound in the window.
#[test]
fn a_backlog_is_bound_once_the_scheduler_starts_on_a_real_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let config = parse_str(
        r#"
- name: Backlog
  workloadTemplate:
  - {opcode: createNodes, count: 2}
  - {opcode: createPods, count: 20, namespace: backlog, skipWaitToCompletion: true}
  - {opcode: sleep, duration: 500ms}
  - {opcode: startCollectingMetrics, name: backlog, namespaces: [backlog]}
  - {opcode: startScheduler}
  - {opcode: barrier, namespaces: [backlog]}
  - {opcode: stopCollectingMetrics}
  workloads:
  - {name: w}
"#,
        "backlog.yaml",
        dir.path().to_path_buf(),
    )
    .unwrap();
    let env = TestEnv::start().expect("testenv");
    let mut api = ApiOptions::new(env.kubeconfig().to_path_buf(), SchedulerKind::Null);
    api.timeout = Duration::from_secs(60);
    let opts = RunOptions {
        filter: None,
        labels: LabelFilter::parse(""),
        topic: "test".into(),
        embedded: EmbeddedOptions::default(),
    };
    let report = convoy_bench::run::run_api(&config, &opts, &api).unwrap();
    let r = &report.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows[0].pods, 20, "every pod of the backlog bound in the window");
}
