use std::collections::BTreeMap;

use convoy_api::{ClusterObject, ClusterUpdate, PodKey};
use convoy_embedded::{EmbeddedCluster, Objects};
use k8s_openapi::api::core::v1::{Namespace, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use serde_json::Value;

use super::churn::EmbeddedChurner;
use super::{Attempts, Embedded, observe};
use crate::measure::evictions::Evictions;
use crate::measure::throughput::SampleInterval;
use crate::plan::{NamespacesStep, Plan, PodsStep, Step, TemplateSource};
use crate::runner::churn::Churner;
use crate::runner::tracker::PodTracker;
use crate::runner::{self, Options};

fn target(cluster: std::sync::Arc<EmbeddedCluster>) -> Embedded {
    let tracker = std::sync::Arc::new(Mutex::new(PodTracker::default()));
    let attempts =
        std::sync::Arc::new(Attempts { last_failure: Mutex::default(), tracker: tracker.clone() });
    Embedded::new(cluster, tracker, attempts, "convoy-scheduler".into())
}

fn labelled(team: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            labels: Some(BTreeMap::from([("team".to_string(), team.to_string())])),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The namespaces the cluster holds, with their `team` label.
fn namespaces(cluster: &EmbeddedCluster) -> BTreeMap<String, Option<String>> {
    cluster
        .objects()
        .into_iter()
        .filter_map(|o| match o {
            ClusterObject::Namespace(ns) => Some((
                ns.metadata.name.clone().unwrap_or_default(),
                ns.metadata.labels.as_ref().and_then(|l| l.get("team").cloned()),
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn namespaces_reach_the_cluster_with_their_labels() {
    let (cluster, _updates) = EmbeddedCluster::new(Objects::default());
    let mut target = target(cluster.clone());
    let create = |names: &[&str], team: &str| {
        Step::CreateNamespaces(NamespacesStep {
            names: names.iter().map(|n| n.to_string()).collect(),
            template: Box::new(labelled(team)),
        })
    };
    // Pods in a namespace nobody created: created plain, as upstream's
    // createNamespaceIfNotPresent.
    let pods = PodsStep {
        op_index: 1,
        count: 1,
        namespace: "namespace-1".into(),
        template: TemplateSource::Builtin,
        params: Default::default(),
        collect_metrics: false,
        skip_wait: true,
        steady: None,
        volumes: None,
        signature_batch: None,
    };
    let plan = Plan {
        name: "T/w".into(),
        scheduler_config: None,
        feature_gates: Default::default(),
        steps: vec![
            create(&["team-0", "team-1"], "devops"),
            Step::CreatePods(pods),
            // An existing namespace is kept as it is.
            create(&["team-1", "team-2"], "qa"),
        ],
        origins: Vec::new(),
    };
    let tracker = target.tracker.clone();
    let opts = Options {
        sample_interval: SampleInterval::Auto,
        timeout: std::time::Duration::from_secs(10),
        progress: false,
        prepare: &[],
    };
    runner::run(&plan, &mut target, &tracker, opts).await.unwrap();
    let want = BTreeMap::from([
        ("namespace-1".to_string(), None),
        ("team-0".to_string(), Some("devops".to_string())),
        ("team-1".to_string(), Some("devops".to_string())),
        ("team-2".to_string(), Some("qa".to_string())),
    ]);
    assert_eq!(namespaces(&cluster), want);
}

#[tokio::test]
async fn deleting_a_pod_with_finalizers_only_marks_it() {
    let (cluster, _updates) = EmbeddedCluster::new(Objects::default());
    let target = target(cluster.clone());
    let mut pod = Pod::default();
    pod.metadata.name = Some("p".into());
    pod.metadata.namespace = Some("ns".into());
    pod.metadata.finalizers = Some(vec!["test.k8s.io/finalizer".into()]);
    target.add_pod(pod.clone()).unwrap();
    pod.metadata.name = Some("q".into());
    pod.metadata.finalizers = None;
    target.add_pod(pod).unwrap();
    target.delete("ns", "p").unwrap();
    target.delete("ns", "q").unwrap();
    let p = cluster.pod("ns", "p").expect("kept until its finalizers are removed");
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(0));
    assert!(cluster.pod("ns", "q").is_none());
    target.delete("ns", "p").unwrap();
    assert!(target.delete("ns", "q").unwrap_err().contains("not found"));
}

/// Feeds the cluster's updates so far to the tracker, as the scheduler's
/// update stream does in a run.
fn drain(target: &Embedded, rx: &mut tokio::sync::mpsc::UnboundedReceiver<ClusterUpdate>) {
    while let Ok(u) = rx.try_recv() {
        observe(&target.tracker, &u);
    }
}

#[tokio::test]
async fn evictions_are_bound_pods_the_benchmark_did_not_delete() {
    let (cluster, mut rx) = EmbeddedCluster::new(Objects::default());
    let target = target(cluster.clone());
    for name in ["mine", "victim", "marked"] {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("ns".into());
        pod.spec = Some(PodSpec { node_name: Some("node-1".into()), ..Default::default() });
        cluster.add_pod(pod).unwrap();
    }
    drain(&target, &mut rx);
    target.tracker.lock().start_window("w".into(), vec!["ns".into()], None).unwrap();
    // The benchmark's delete (deletePods records it first, then deletes):
    // not an eviction.
    target.tracker.lock().own_deletes.mark("ns", "mine");
    target.delete("ns", "mine").unwrap();
    // A preemptor's: deleted by someone else.
    cluster.delete_pod("ns", "victim").unwrap();
    // Marked first (DisruptionTarget), then deleted.
    let mut marked = Pod::clone(&cluster.pod("ns", "marked").unwrap());
    marked.status = Some(PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    cluster.update_pod(marked).unwrap();
    cluster.delete_pod("ns", "marked").unwrap();
    drain(&target, &mut rx);
    let w = target.tracker.lock().stop_window(SampleInterval::Auto).unwrap();
    assert_eq!(w.evictions, 2);
    let e = target.tracker.lock().evictions;
    assert_eq!(e, Evictions { total: 2, in_windows: 2, disruption_target: 1 });
}

#[tokio::test]
async fn churn_creates_upstreams_preemptors_with_their_priority() {
    let (cluster, _rx) = EmbeddedCluster::new(Objects::default());
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/upstream/default_preemption/templates/pod-high-priority.yaml"
    ))
    .unwrap();
    let template = serde_saphyr::from_str::<Value>(&text).unwrap();
    let churner = EmbeddedChurner {
        cluster: cluster.clone(),
        templates: vec![template],
        namespace: "namespace-2".into(),
        scheduler_name: "convoy-scheduler".into(),
        op_index: 2,
        serial: Default::default(),
        own_deletes: Default::default(),
    };
    let a = churner.create(0).await.unwrap();
    let b = churner.create(0).await.unwrap();
    assert_ne!(a, b);
    let pod = cluster.pod("namespace-2", &a).unwrap();
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.priority, Some(9999999));
    assert_eq!(spec.scheduler_name.as_deref(), Some("convoy-scheduler"));
    assert_eq!(spec.termination_grace_period_seconds, Some(0));
    churner.delete(0, b.clone()).await;
    assert!(cluster.pod("namespace-2", &b).is_none());
    assert!(churner.own_deletes.contains(&PodKey::new("namespace-2", &b)));
}
