//! Scheduling scenarios on the embedded cluster: the whole scheduler (queue,
//! cache, plugins, binding cycle), no API server.

use std::sync::Arc;

use convoy_api::FakeClock;
use convoy_api::ObjectLister;
use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::{EmbeddedBinder, EmbeddedCluster, Objects};
use convoy_scheduler::decision::LogSink;
use convoy_scheduler::simulate::{Report, simulate};
use convoy_scheduler::{Scheduler, SchedulerOptions};
use k8s_openapi::api::core::v1::{Node, Pod};

fn objects(nodes: Vec<Node>, pods: Vec<Pod>) -> Objects {
    Objects { nodes, pods, ..Default::default() }
}

async fn run(nodes: Vec<Node>, pods: Vec<Pod>) -> Report {
    let config = convoy_scheduler::load_config(None).unwrap();
    simulate(config, objects(nodes, pods), false).await.unwrap()
}

fn node_of<'a>(r: &'a Report, name: &str) -> Option<&'a str> {
    r.pods.iter().find(|p| p.name == name).and_then(|p| p.node.as_deref())
}

fn reason_of<'a>(r: &'a Report, name: &str) -> &'a str {
    r.pods.iter().find(|p| p.name == name).and_then(|p| p.reason.as_deref()).unwrap_or("")
}

#[tokio::test]
async fn resource_fit_and_upstream_message() {
    let nodes =
        vec![NodeBuilder::new("a").cpu("1").build(), NodeBuilder::new("b").cpu("1").build()];
    let pods = (0..3).map(|i| PodBuilder::new(&format!("p{i}")).cpu("600m").build()).collect();
    let r = run(nodes, pods).await;
    assert_eq!(r.summary.bound, 2);
    assert_eq!(r.summary.pending, 1);
    let pending = r.pods.iter().find(|p| p.node.is_none()).unwrap();
    assert_eq!(
        pending.reason.as_deref(),
        Some(
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        )
    );
    // Two pods of 600m never share a node of 1 CPU.
    let nodes: Vec<_> = r.pods.iter().filter_map(|p| p.node.clone()).collect();
    assert_ne!(nodes[0], nodes[1]);
}

#[tokio::test]
async fn aggregated_message_counts_each_reason() {
    let mut nodes: Vec<Node> =
        (0..42).map(|i| NodeBuilder::new(&format!("small-{i}")).cpu("1").build()).collect();
    nodes.extend((0..8).map(|i| {
        NodeBuilder::new(&format!("gpu-{i}")).cpu("64").taint("gpu", "true", "NoSchedule").build()
    }));
    let r = run(nodes, vec![PodBuilder::new("big").cpu("2").build()]).await;
    assert_eq!(
        reason_of(&r, "big"),
        "0/50 nodes are available: 42 Insufficient cpu, 8 node(s) had untolerated taint(s). preemption: 0/50 nodes are available: 50 Preemption is not helpful for scheduling."
    );
}

#[tokio::test]
async fn taints_and_tolerations() {
    let nodes =
        vec![NodeBuilder::new("gpu").taint("nvidia.com/gpu", "present", "NoSchedule").build()];
    let pods = vec![
        PodBuilder::new("plain").build(),
        PodBuilder::new("tolerant").toleration("nvidia.com/gpu", None, "NoSchedule").build(),
    ];
    let r = run(nodes, pods).await;
    assert_eq!(node_of(&r, "tolerant"), Some("gpu"));
    assert_eq!(node_of(&r, "plain"), None);
    assert_eq!(
        reason_of(&r, "plain"),
        "0/1 nodes are available: 1 node(s) had untolerated taint(s). preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    );
}

#[tokio::test]
async fn node_selector_and_required_affinity() {
    let nodes = vec![
        NodeBuilder::new("a").label("zone", "a").build(),
        NodeBuilder::new("b").label("zone", "b").build(),
    ];
    let affinity: k8s_openapi::api::core::v1::Affinity = serde_json::from_value(serde_json::json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
        ]}}
    }))
    .unwrap();
    let pods = vec![
        PodBuilder::new("sel").node_selector("zone", "a").build(),
        PodBuilder::new("aff").with_spec(|s| s.affinity = Some(affinity)).build(),
        PodBuilder::new("none").node_selector("zone", "c").build(),
    ];
    let r = run(nodes, pods).await;
    assert_eq!(node_of(&r, "sel"), Some("a"));
    assert_eq!(node_of(&r, "aff"), Some("b"));
    assert_eq!(
        reason_of(&r, "none"),
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

#[tokio::test]
async fn host_ports_conflict() {
    let nodes = vec![NodeBuilder::new("only").build()];
    let pods = vec![
        PodBuilder::new("a").host_port(8080).build(),
        PodBuilder::new("b").host_port(8080).build(),
    ];
    let r = run(nodes, pods).await;
    assert_eq!(r.summary.bound, 1);
    let pending = r.pods.iter().find(|p| p.node.is_none()).unwrap();
    assert_eq!(
        pending.reason.as_deref(),
        Some(
            "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
        )
    );
}

#[tokio::test]
async fn scheduling_gates_hold_pods() {
    let r = run(
        vec![NodeBuilder::new("n").build()],
        vec![PodBuilder::new("gated").gate("example.com/wait").build()],
    )
    .await;
    assert_eq!(node_of(&r, "gated"), None);
    assert_eq!(reason_of(&r, "gated"), "waiting for scheduling gates: [example.com/wait]");
}

#[tokio::test]
async fn other_schedulers_pods_are_left_alone_but_counted() {
    let nodes = vec![NodeBuilder::new("n").cpu("1").build()];
    let theirs =
        PodBuilder::new("theirs").scheduler("default-scheduler").cpu("900m").node("n").build();
    let pods = vec![
        theirs,
        PodBuilder::new("ours").cpu("500m").build(),
        PodBuilder::new("pending-theirs").scheduler("default-scheduler").build(),
    ];
    let r = run(nodes, pods).await;
    assert_eq!(r.pods.len(), 1, "only pending pods of Convoy's profiles are considered");
    assert_eq!(
        reason_of(&r, "ours"),
        "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    );
}

#[tokio::test]
async fn least_allocated_spreads_pods() {
    let nodes = (0..4).map(|i| NodeBuilder::new(&format!("n{i}")).build()).collect();
    let pods =
        (0..4).map(|i| PodBuilder::new(&format!("p{i}")).cpu("1").memory("1Gi").build()).collect();
    let r = run(nodes, pods).await;
    let mut used: Vec<_> = r.pods.iter().filter_map(|p| p.node.clone()).collect();
    used.sort();
    used.dedup();
    assert_eq!(used.len(), 4, "one pod per node: {:?}", r.pods);
}

#[tokio::test]
async fn many_pods_never_overcommit() {
    let nodes: Vec<Node> = (0..20).map(|i| NodeBuilder::new(&format!("n{i}")).build()).collect();
    // 20 nodes x 4 CPU = 80 CPU; 1000 pods x 100m = 100 CPU: 800 fit.
    let pods = (0..1000)
        .map(|i| PodBuilder::new(&format!("p{i}")).cpu("100m").memory("100Mi").build())
        .collect();
    let r = run(nodes, pods).await;
    assert_eq!(r.summary.bound, 800);
    assert_eq!(r.summary.pending, 200);
    let mut per_node = std::collections::HashMap::new();
    for p in &r.pods {
        if let Some(n) = &p.node {
            *per_node.entry(n.clone()).or_insert(0) += 1;
        }
    }
    assert!(per_node.values().all(|&c| c == 40), "{per_node:?}");
}

/// The whole scheduler on an embedded cluster, with a fake clock.
fn scheduler_on(cluster: &Arc<EmbeddedCluster>) -> (Arc<Scheduler>, FakeClock) {
    let clock = FakeClock::new();
    let scheduler = Scheduler::new(SchedulerOptions {
        config: convoy_scheduler::load_config(None).unwrap(),
        registry: convoy_scheduler::registry(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(convoy_embedded::EmbeddedActuator(cluster.clone())),
        clock: Arc::new(clock.clone()),
        sink: Arc::new(LogSink),
        seed: Some(1),
        framework_metrics: None,
    })
    .unwrap();
    (scheduler, clock)
}

/// A rejected pod is retried when a node that fits arrives, and not before.
#[tokio::test]
async fn node_added_requeues_the_pod() {
    let (cluster, mut updates) = EmbeddedCluster::new(objects(
        vec![NodeBuilder::new("small").cpu("1").build()],
        vec![PodBuilder::new("big").cpu("2").build()],
    ));
    let (scheduler, clock) = scheduler_on(&cluster);
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(cluster.bound_count(), 0);
    assert_eq!(scheduler.queue().pending_counts().unschedulable, 1);

    // A node that fits arrives: the pod moves without waiting for a periodic flush.
    cluster.add_node(NodeBuilder::new("big-node").cpu("8").build()).unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    let pod = cluster.pod("default", "big").unwrap();
    assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some("big-node"));
}

/// A taint removed from a node releases the pods it rejected.
#[tokio::test]
async fn taint_removed_requeues_the_pod() {
    let tainted = NodeBuilder::new("n").taint("maintenance", "", "NoSchedule").build();
    let (cluster, mut updates) =
        EmbeddedCluster::new(objects(vec![tainted], vec![PodBuilder::new("p").build()]));
    let (scheduler, clock) = scheduler_on(&cluster);
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(cluster.bound_count(), 0);
    cluster.update_node(NodeBuilder::new("n").build()).unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(cluster.bound_count(), 1);
    scheduler.cache().check_invariants().unwrap();
}

/// A bound pod deleted frees its resources for a pending one.
#[tokio::test]
async fn pod_deleted_requeues_the_pod() {
    let (cluster, mut updates) = EmbeddedCluster::new(objects(
        vec![NodeBuilder::new("n").cpu("1").build()],
        vec![PodBuilder::new("first").cpu("800m").build()],
    ));
    let (scheduler, clock) = scheduler_on(&cluster);
    scheduler.run_until_idle(&mut updates, &clock).await;
    cluster.add_pod(PodBuilder::new("second").cpu("800m").build()).unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(cluster.bound_count(), 1);
    cluster.delete_pod("default", "first").unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    let second = cluster.pod("default", "second").unwrap();
    assert_eq!(second.spec.as_ref().unwrap().node_name.as_deref(), Some("n"));
}

#[tokio::test]
async fn bundled_example_runs() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/examples/cluster.yaml");
    let objects = convoy_embedded::load_file(std::path::Path::new(path)).unwrap();
    let config = convoy_scheduler::load_config(None).unwrap();
    let r = simulate(config, objects, false).await.unwrap();
    // The outcome the file's header promises.
    assert_eq!((r.summary.bound, r.summary.pending), (10, 6));
    let node = |name: &str| r.pods.iter().find(|p| p.name == name).and_then(|p| p.node.clone());
    assert!(node("pretrain-0").is_some() && node("pretrain-1").is_some(), "the gang fits whole");
    assert!((0..3).all(|i| node(&format!("finetune-{i}")).is_none()), "no partial gang");
    assert_eq!(node("edge-1").as_deref(), Some("cpu-b2"));
    for p in &r.pods {
        assert!(p.node.is_some() != p.reason.is_some(), "{p:?}");
    }
}

/// Nodes a PreFilter result excludes are counted in the message, with the
/// plugin that excluded them, as upstream.
#[tokio::test]
async fn prefilter_subset_is_counted_in_the_message() {
    let nodes = vec![
        NodeBuilder::new("a").cpu("1").build(),
        NodeBuilder::new("b").build(),
        NodeBuilder::new("c").build(),
    ];
    let affinity: k8s_openapi::api::core::v1::Affinity = serde_json::from_value(serde_json::json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
        ]}}
    }))
    .unwrap();
    let pod = PodBuilder::new("pinned").cpu("2").with_spec(|s| s.affinity = Some(affinity)).build();
    let r = run(nodes, vec![pod]).await;
    assert_eq!(
        reason_of(&r, "pinned"),
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    );
}

fn example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/examples").join(name)
}

/// A dump of a real cluster: its assigned pods are the existing load
/// (finished ones are not), other schedulers' pending pods are neither load
/// nor placed, and the pods appended for Convoy land where there is room.
#[tokio::test]
async fn cluster_dump_runs() {
    let objects = convoy_embedded::load_file(&example("dump.yaml")).unwrap();
    let config = convoy_scheduler::load_config(None).unwrap();
    let r = simulate(config, objects, false).await.unwrap();
    // The outcome the file's header promises.
    let considered: Vec<&str> = r.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(considered, ["import-0", "reindex-0"], "only the pods for convoy-scheduler");
    assert_eq!(node_of(&r, "import-0"), Some("node-c"));
    assert_eq!(
        reason_of(&r, "reindex-0"),
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    );
    let text = r.to_text();
    assert!(
        text.starts_with(
            "skipped 2 ConfigMap: not used for scheduling\n\
             skipped 1 Deployment: not used for scheduling\n\
             skipped 1 Job: not used for scheduling\n\n\
             prod/import-0   -> node-c\n"
        ),
        "{text}"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["skipped"], serde_json::json!({"ConfigMap": 2, "Deployment": 1, "Job": 1}));
}

/// The Namespaces, Services, ReplicaSets and StatefulSets of a dump reach
/// the store plugins read (namespace labels; the selectors of the default
/// topology spreading constraints).
#[tokio::test]
async fn cluster_dump_feeds_the_object_store() {
    let objects = convoy_embedded::load_file(&example("dump.yaml")).unwrap();
    let (cluster, mut updates) = EmbeddedCluster::new(objects);
    let (scheduler, clock) = scheduler_on(&cluster);
    scheduler.run_until_idle(&mut updates, &clock).await;
    let store = scheduler.objects();
    assert_eq!(store.namespace_labels("prod").unwrap()["team"], "web");
    assert_eq!(store.service_selectors("prod").len(), 1);
    assert!(store.service_selectors("default").is_empty(), "the kubernetes Service selects no pod");
    let rs = store.replica_set_selector("prod", "web-7d4b9c6f5").unwrap();
    assert_eq!(rs.match_labels.as_ref().unwrap()["app"], "web");
    assert!(store.stateful_set_selector("prod", "db").is_some());
    assert_eq!(
        store.counts(),
        [
            ("CSIDriver", 0),
            ("CSINode", 0),
            ("CSIStorageCapacity", 0),
            ("DeviceClass", 0),
            ("DeviceTaintRule", 0),
            ("Namespace", 3),
            ("PersistentVolume", 0),
            ("PersistentVolumeClaim", 0),
            ("PodDisruptionBudget", 0),
            ("PriorityClass", 0),
            ("ReplicaSet", 2),
            ("ReplicationController", 0),
            ("ResourceClaim", 0),
            ("ResourceSlice", 0),
            ("Service", 1),
            ("StatefulSet", 1),
            ("StorageClass", 0)
        ]
        .into()
    );
}

/// Namespaces load (their labels feed namespaceSelector), a ConfigMap is
/// skipped with one note, printed before the table.
#[tokio::test]
async fn simulate_notes_skipped_kinds() {
    let text = "apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Namespace, metadata: {name: team-a, labels: {team: a}}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: settings, namespace: team-a}, data: {a: b}}
- apiVersion: v1
  kind: Node
  metadata: {name: n1}
  status: {allocatable: {cpu: \"2\", pods: \"10\"}}
- apiVersion: v1
  kind: Pod
  metadata: {name: p, namespace: team-a}
  spec: {schedulerName: convoy-scheduler, containers: [{name: c}]}
";
    let objects = convoy_embedded::parse_objects(text, "t.yaml").unwrap();
    assert_eq!(objects.others.len(), 1);
    let config = convoy_scheduler::load_config(None).unwrap();
    let r = simulate(config, objects, false).await.unwrap();
    let out = r.to_text();
    let notes: Vec<&str> = out.lines().filter(|l| l.starts_with("skipped")).collect();
    assert_eq!(notes, ["skipped 1 ConfigMap: not used for scheduling"]);
    assert!(out.contains("team-a/p  -> n1"), "{out}");
}

/// The command itself prints the notes on stdout, before the table.
#[test]
fn simulate_command_prints_skip_notes() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_convoy-scheduler"))
        .args(["simulate", "--cluster"])
        .arg(example("dump.yaml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("skipped 2 ConfigMap: not used for scheduling\n"), "{stdout}");
    assert!(stdout.contains("prod/reindex-0  pending: 0/3 nodes are available"), "{stdout}");
}

fn volume(v: serde_json::Value) -> k8s_openapi::api::core::v1::Volume {
    serde_json::from_value(v).unwrap()
}

fn with_pvc(b: PodBuilder, claim: &str) -> PodBuilder {
    let v =
        volume(serde_json::json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}));
    b.with_spec(|s| s.volumes = Some(vec![v]))
}

fn with_ebs(b: PodBuilder) -> PodBuilder {
    let v = volume(serde_json::json!({"name": "data", "awsElasticBlockStore": {"volumeID": "v"}}));
    b.with_spec(|s| s.volumes = Some(vec![v]))
}

fn with_device_class_request(b: PodBuilder) -> PodBuilder {
    b.resource("deviceclass.resource.kubernetes.io/gpu", "1")
}

fn with_resource_claim(b: PodBuilder) -> PodBuilder {
    let claim =
        serde_json::from_value(serde_json::json!({"name": "gpu", "resourceClaimName": "gpu-0"}));
    b.with_spec(|s| s.resource_claims = Some(vec![claim.unwrap()]))
}

/// Never a silent wrong answer: an in-tree AWS EBS volume (its attach
/// limit) and a DeviceClass's implicit extended resource are fields Convoy
/// does not evaluate yet, so
/// those pods stay pending with a message naming
/// the field, and are attempted once (no node or pod event retries them);
/// the others, volumes upstream ignores included, are placed.
#[tokio::test]
async fn pods_using_unevaluated_fields_are_refused_once() {
    let nodes = (0..6).map(|i| NodeBuilder::new(&format!("n{i}")).cpu("4").build()).collect();
    let scratch = volume(serde_json::json!({"name": "scratch", "emptyDir": {}}));
    let pods = vec![
        // Attempted first (priority): the bindings that follow are events.
        with_ebs(PodBuilder::new("ebs").priority(100)).build(),
        with_device_class_request(PodBuilder::new("claim").priority(100)).build(),
        PodBuilder::new("plain-0").cpu("1").build(),
        PodBuilder::new("plain-1").cpu("1").build(),
        PodBuilder::new("scratch").cpu("1").with_spec(|s| s.volumes = Some(vec![scratch])).build(),
    ];
    // A refused pod with no rejecting plugin would be retried after every
    // backoff, forever: the run would never become idle.
    let r = tokio::time::timeout(std::time::Duration::from_secs(60), run(nodes, pods))
        .await
        .expect("the refused pods spin");
    assert_eq!((r.summary.bound, r.summary.pending), (3, 2));
    assert_eq!(node_of(&r, "ebs"), None);
    assert_eq!(
        reason_of(&r, "ebs"),
        "0/6 nodes are available: pod uses spec.volumes[0].awsElasticBlockStore, which this \
         scheduler does not evaluate yet."
    );
    assert_eq!(
        reason_of(&r, "claim"),
        "0/6 nodes are available: pod uses \
         spec.containers[0].resources.requests[deviceclass.resource.kubernetes.io/gpu], which \
         this scheduler does not evaluate yet."
    );
    assert!(node_of(&r, "scratch").is_some());
    // One attempt per pod: the refused ones did not spin on the bindings.
    assert_eq!(r.cycle_latency.attempts, 5);
    // `convoy-scheduler simulate` prints the message.
    let text = r.to_text();
    let line = text.lines().find(|l| l.starts_with("default/ebs ")).unwrap_or_default();
    assert!(
        line.ends_with(
            " pending: 0/6 nodes are available: pod uses spec.volumes[0].awsElasticBlockStore, \
             which this scheduler does not evaluate yet."
        ),
        "{text}"
    );
}

/// A profile that disables every upstream plugin reading a field ignores
/// it, as upstream would: the pod with a (missing) PVC, the one with an
/// EBS volume and the one with a (missing) ResourceClaim are placed.
#[tokio::test]
async fn disabled_upstream_plugins_ignore_their_fields() {
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: convoy-scheduler
  plugins:
    multiPoint:
      disabled: [{name: VolumeBinding}, {name: VolumeRestrictions}, {name: NodeVolumeLimits},
                 {name: DynamicResources}]
    preFilter:
      disabled: [{name: VolumeZone}]
    filter:
      disabled: [{name: VolumeZone}]
";
    let known = convoy_config::KnownPlugins::new(convoy_scheduler::registry().names());
    let config = convoy_config::parse_str(yaml, "volumes-off.yaml", &known).unwrap();
    let nodes = vec![NodeBuilder::new("n").build()];
    let pods = vec![
        with_pvc(PodBuilder::new("pvc"), "data-0").build(),
        with_ebs(PodBuilder::new("ebs")).build(),
        with_resource_claim(PodBuilder::new("claim")).build(),
    ];
    let r = simulate(config, objects(nodes, pods), false).await.unwrap();
    assert_eq!(node_of(&r, "pvc"), Some("n"));
    assert_eq!(node_of(&r, "ebs"), Some("n"));
    assert_eq!(node_of(&r, "claim"), Some("n"));
}
