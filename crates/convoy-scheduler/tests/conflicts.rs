//! Beside other schedulers and real kubelets, on the embedded cluster: a
//! kubelet's rejection explained and its node held, the node checked
//! again just before binding, other schedulers' nominations counted, and a
//! node whose allocatable drops below its pods' requests reported.

use std::sync::Arc;
use std::time::Duration;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{ClusterUpdate, FakeClock};
use convoy_embedded::{EmbeddedCluster, Objects};
use convoy_scheduler::conflicts::{HOLD_TAINT, REJECTION_HOLD};
use convoy_scheduler::decision::{
    Decision, DecisionSink, DeviceViewMismatch, KubeletRejection, Outcome, ResourceShortfall,
};
use convoy_scheduler::{Scheduler, SchedulerOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use parking_lot::Mutex;
use tokio::sync::mpsc::UnboundedReceiver;

#[derive(Default)]
struct Collect {
    decisions: Mutex<Vec<Decision>>,
    rejections: Mutex<Vec<KubeletRejection>>,
    shortfalls: Mutex<Vec<ResourceShortfall>>,
    mismatches: Mutex<Vec<DeviceViewMismatch>>,
}

impl DecisionSink for Collect {
    fn record(&self, d: &Decision) {
        self.decisions.lock().push(d.clone());
    }
    fn record_rejection(&self, r: &KubeletRejection) {
        self.rejections.lock().push(r.clone());
    }
    fn record_shortfall(&self, s: &ResourceShortfall) {
        self.shortfalls.lock().push(s.clone());
    }
    fn record_device_mismatch(&self, m: &DeviceViewMismatch) {
        self.mismatches.lock().push(m.clone());
    }
}

impl Collect {
    fn last_of(&self, pod: &str) -> Option<Outcome> {
        let d = self.decisions.lock();
        d.iter().rev().find(|d| &*d.pod.name == pod).map(|d| d.outcome.clone())
    }
}

struct Setup {
    cluster: Arc<EmbeddedCluster>,
    updates: UnboundedReceiver<ClusterUpdate>,
    clock: FakeClock,
    scheduler: Arc<Scheduler>,
    sink: Arc<Collect>,
}

impl Setup {
    async fn new(nodes: Vec<Node>, pods: Vec<Pod>) -> Setup {
        let (cluster, updates) =
            EmbeddedCluster::new(Objects { nodes, pods, ..Default::default() });
        let clock = FakeClock::new();
        let sink = Arc::new(Collect::default());
        let scheduler = Scheduler::new(SchedulerOptions::embedded(
            convoy_scheduler::load_config(None).unwrap(),
            &cluster,
            Arc::new(clock.clone()),
            sink.clone(),
        ))
        .unwrap();
        let mut s = Setup { cluster, updates, clock, scheduler, sink };
        s.idle().await;
        s
    }

    async fn idle(&mut self) {
        self.scheduler.run_until_idle(&mut self.updates, &self.clock).await;
    }

    /// n1 (4 CPUs); another scheduler's pending pod `theirs` (2 CPUs,
    /// created a moment ago: that scheduler is at work); Convoy's `p` (3
    /// CPUs) scheduled on n1, its binding task spawned and not yet run.
    async fn binding_beside_pending_theirs() -> Setup {
        let mut s = Setup::new(vec![NodeBuilder::new("n1").cpu("4").build()], vec![]).await;
        s.cluster
            .add_pod(PodBuilder::new("theirs").cpu("2").scheduler("default-scheduler").build())
            .unwrap();
        s.cluster.add_pod(PodBuilder::new("p").cpu("3").build()).unwrap();
        s.apply();
        let qpi = s.scheduler.queue().try_pop().expect("p is queued");
        s.scheduler.schedule_one(qpi);
        s
    }

    /// Applies the cluster's pending updates, without scheduling.
    fn apply(&mut self) {
        while let Ok(u) = self.updates.try_recv() {
            self.scheduler.handle_update(u);
        }
    }

    fn node_of(&self, pod: &str) -> Option<String> {
        self.cluster.pod("default", pod)?.spec.as_ref()?.node_name.clone()
    }
}

fn rejected(pod: &Pod, reason: &str, message: &str) -> Pod {
    let mut p = pod.clone();
    let st = p.status.get_or_insert_with(Default::default);
    st.phase = Some("Failed".into());
    st.reason = Some(reason.into());
    st.message = Some(format!("Pod was rejected: {message}"));
    p
}

/// The kubelet rejects a pod Convoy bound (another scheduler's pod took
/// the room): the rejection names the pod that took it and who bound it,
/// the node is held out of scheduling (a pod that would fit there stays
/// pending, told why), and offered again once the hold is over.
#[tokio::test]
async fn a_kubelet_rejection_is_explained_and_holds_the_node() {
    let node = NodeBuilder::new("n1").cpu("4").build();
    let mut s = Setup::new(
        vec![node],
        vec![
            PodBuilder::new("ours").node("n1").cpu("2").build(),
            PodBuilder::new("theirs").node("n1").cpu("2").scheduler("default-scheduler").build(),
        ],
    )
    .await;
    let ours = s.cluster.pod("default", "ours").unwrap();
    let msg = "Node didn't have enough resource: cpu, requested: 2000, used: 3000, capacity: 4000";
    s.cluster.update_pod(rejected(&ours, "OutOfcpu", msg)).unwrap();
    s.apply();

    let rejections = s.sink.rejections.lock().clone();
    let [r] = &rejections[..] else { panic!("one rejection: {rejections:?}") };
    assert_eq!((&*r.node, r.reason.as_str(), &*r.profile), ("n1", "OutOfcpu", "convoy-scheduler"));
    assert_eq!(r.takers_summary(), "default/theirs (default-scheduler)");
    assert_eq!(&*r.reason_label(), "OutOfcpu");
    assert!(r.pod_note().contains(msg), "{}", r.pod_note());
    assert!(r.node_note().starts_with("kubelet rejected pod default/ours bound by convoy-scheduler (OutOfcpu); the room was taken by: default/theirs (default-scheduler)"), "{}", r.node_note());
    let held = s.scheduler.cache().node_info("n1").unwrap();
    assert!(held.taints().iter().any(|t| t.key == HOLD_TAINT), "{:?}", held.taints());

    // A pod that would fit in the room freed is kept off the held node.
    s.cluster.add_pod(PodBuilder::new("next").cpu("1").build()).unwrap();
    s.apply();
    let qpi = s.scheduler.queue().try_pop().expect("next is queued");
    s.scheduler.schedule_one(qpi);
    match s.sink.last_of("next") {
        Some(Outcome::Unschedulable { message }) => assert!(
            message.contains(
                "1 node(s) were held out of scheduling after their kubelet rejected a pod"
            ),
            "{message}"
        ),
        other => panic!("next: {other:?}"),
    }
    assert_eq!(s.node_of("next"), None);

    // The hold ends: the node is offered again.
    s.clock.advance(REJECTION_HOLD + Duration::from_secs(1));
    s.scheduler.release_node_holds();
    let released = s.scheduler.cache().node_info("n1").unwrap();
    assert!(released.taints().is_empty(), "{:?}", released.taints());
    s.idle().await;
    assert_eq!(s.node_of("next").as_deref(), Some("n1"));
}

/// A node update while held keeps the hold (the API server's version has
/// no taint; the cache's copy keeps it until the hold ends).
#[tokio::test]
async fn a_node_update_keeps_the_hold() {
    let mut s = Setup::new(
        vec![NodeBuilder::new("n1").cpu("4").build()],
        vec![PodBuilder::new("ours").node("n1").cpu("2").build()],
    )
    .await;
    let ours = s.cluster.pod("default", "ours").unwrap();
    s.cluster.update_pod(rejected(&ours, "NodeAffinity", "Predicate NodeAffinity failed")).unwrap();
    s.apply();
    assert!(s.sink.rejections.lock()[0].takers.is_empty(), "affinity names nobody");
    let updated = NodeBuilder::new("n1").cpu("4").label("zone", "a").build();
    s.cluster.update_node(updated).unwrap();
    s.apply();
    let info = s.scheduler.cache().node_info("n1").unwrap();
    assert!(info.taints().iter().any(|t| t.key == HOLD_TAINT), "{:?}", info.taints());
    assert_eq!(info.label("zone"), Some("a"), "the update itself is applied");
    s.clock.advance(REJECTION_HOLD);
    s.scheduler.release_node_holds();
    let info = s.scheduler.cache().node_info("n1").unwrap();
    assert!(info.taints().is_empty() && info.label("zone") == Some("a"));
}

/// Another scheduler's pod bound to the chosen node after the scheduling
/// cycle and before the binding call: the binding is not sent, and the
/// pod is told why (and binds elsewhere once room appears).
#[tokio::test]
async fn the_node_is_checked_again_just_before_binding() {
    let mut s = Setup::new(vec![NodeBuilder::new("n1").cpu("4").build()], vec![]).await;
    s.cluster.add_pod(PodBuilder::new("p").cpu("3").build()).unwrap();
    s.apply();
    let qpi = s.scheduler.queue().try_pop().expect("p is queued");
    // The cycle chooses n1; its binding task is spawned, not yet run.
    s.scheduler.schedule_one(qpi);
    s.cluster
        .add_pod(
            PodBuilder::new("theirs").node("n1").cpu("2").scheduler("default-scheduler").build(),
        )
        .unwrap();
    s.apply();
    s.idle().await;
    assert_eq!(s.node_of("p"), None, "p was not bound over theirs");
    let binds = s.cluster.bind_count();
    assert_eq!(binds, 0, "no binding call was made");
    match s.sink.decisions.lock().iter().find(|d| &*d.pod.name == "p").map(|d| &d.outcome) {
        Some(Outcome::Unschedulable { message }) => assert_eq!(
            message,
            "binding rejected: node n1 no longer has room for the pod (Insufficient cpu); bound \
             there since it was chosen, among others: default/theirs (default-scheduler)"
        ),
        other => panic!("p: {other:?}"),
    }
    s.cluster.delete_pod("default", "theirs").unwrap();
    s.idle().await;
    assert_eq!(s.node_of("p").as_deref(), Some("n1"));
}

/// A pending pod of another scheduler nominated to a node (its
/// preemption) keeps its room there: Convoy's pod of lower priority does
/// not take it.
#[tokio::test]
async fn another_schedulers_nomination_keeps_its_room() {
    let theirs = PodBuilder::new("theirs")
        .cpu("3")
        .priority(100)
        .scheduler("default-scheduler")
        .nominated("n1")
        .build();
    let mut s = Setup::new(vec![NodeBuilder::new("n1").cpu("4").build()], vec![theirs]).await;
    s.cluster.add_pod(PodBuilder::new("ours").cpu("2").priority(0).build()).unwrap();
    s.idle().await;
    assert_eq!(s.node_of("ours"), None);
    match s.sink.last_of("ours") {
        Some(Outcome::Unschedulable { message }) => {
            assert!(message.contains("Insufficient cpu"), "{message}")
        }
        other => panic!("ours: {other:?}"),
    }
    // Their nomination cleared (they went elsewhere): the room is free.
    let mut cleared = (*s.cluster.pod("default", "theirs").unwrap()).clone();
    cleared.status.as_mut().unwrap().nominated_node_name = None;
    s.cluster.update_pod(cleared).unwrap();
    s.idle().await;
    assert_eq!(s.node_of("ours").as_deref(), Some("n1"));
}

/// A GPU turns unhealthy: the node's allocatable drops below what its pods
/// request. Reported once, and nothing more that needs a GPU goes there.
#[tokio::test]
async fn a_node_whose_gpus_shrink_below_its_pods_is_reported() {
    let gpu_node =
        |n: &str| NodeBuilder::new("n1").cpu("32").allocatable("nvidia.com/gpu", n).build();
    let mut s = Setup::new(
        vec![gpu_node("8")],
        vec![
            PodBuilder::new("a").node("n1").cpu("1").resource("nvidia.com/gpu", "4").build(),
            PodBuilder::new("b").node("n1").cpu("1").resource("nvidia.com/gpu", "3").build(),
        ],
    )
    .await;
    s.cluster.update_node(gpu_node("6")).unwrap();
    s.apply();
    let shortfalls = s.sink.shortfalls.lock().clone();
    let [f] = &shortfalls[..] else { panic!("one shortfall: {shortfalls:?}") };
    assert_eq!(
        (&*f.node, f.resource.as_str(), f.allocatable, f.requested),
        ("n1", "nvidia.com/gpu", 6, 7)
    );
    assert_eq!(f.pods.len(), 2);
    assert!(
        f.note().starts_with("allocatable nvidia.com/gpu dropped to 6 while its pods request 7"),
        "{}",
        f.note()
    );
    // Still short after another drop: not reported again.
    s.cluster.update_node(gpu_node("5")).unwrap();
    s.apply();
    assert_eq!(s.sink.shortfalls.lock().len(), 1);
    // Nothing more that needs a GPU is placed there; other pods are.
    s.cluster
        .add_pod(PodBuilder::new("gpu").cpu("1").resource("nvidia.com/gpu", "1").build())
        .unwrap();
    s.cluster.add_pod(PodBuilder::new("cpu").cpu("1").build()).unwrap();
    s.idle().await;
    assert_eq!(s.node_of("gpu"), None);
    assert_eq!(s.node_of("cpu").as_deref(), Some("n1"));
    // The GPUs come back: the pending pod is tried again and placed.
    s.cluster.update_node(gpu_node("8")).unwrap();
    s.idle().await;
    assert_eq!(s.node_of("gpu").as_deref(), Some("n1"));
}

/// A replica that does not lead holds the node (its cache follows the
/// cluster) but reports nothing: the leader explains.
#[tokio::test]
async fn a_standby_reports_nothing() {
    let (cluster, _updates) = EmbeddedCluster::new(Objects {
        nodes: vec![NodeBuilder::new("n1").cpu("4").build()],
        pods: vec![PodBuilder::new("ours").node("n1").cpu("2").build()],
        ..Default::default()
    });
    let sink = Arc::new(Collect::default());
    let scheduler = Scheduler::new(SchedulerOptions::embedded(
        convoy_scheduler::load_config(None).unwrap(),
        &cluster,
        Arc::new(FakeClock::new()),
        sink.clone(),
    ))
    .unwrap();
    let ours = cluster.pod("default", "ours").unwrap();
    scheduler.handle_update(ClusterUpdate::NodeAdded(cluster.node("n1").unwrap()));
    scheduler.handle_update(ClusterUpdate::PodAdded(ours.clone()));
    let new = Arc::new(rejected(&ours, "OutOfcpu", "no room"));
    scheduler.handle_update(ClusterUpdate::PodUpdated { old: ours, new });
    assert!(sink.rejections.lock().is_empty());
    let info = scheduler.cache().node_info("n1").unwrap();
    assert!(info.taints().iter().any(|t| t.key == HOLD_TAINT));
}

/// config/beside-default-scheduler.yaml: Convoy places its pods on the
/// nodes of its pool only, whatever the pods say.
#[tokio::test]
async fn the_shipped_split_profile_keeps_to_its_pool() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/beside-default-scheduler.yaml");
    let config = convoy_scheduler::load_config(Some(std::path::Path::new(path))).unwrap();
    let objects = Objects {
        nodes: vec![
            NodeBuilder::new("theirs").cpu("64").build(),
            NodeBuilder::new("ours").cpu("2").label("scheduling.convoy.dev/pool", "convoy").build(),
        ],
        pods: vec![
            PodBuilder::new("a").cpu("1").build(),
            PodBuilder::new("b").cpu("1").build(),
            PodBuilder::new("c").cpu("1").build(),
        ],
        ..Default::default()
    };
    let report = convoy_scheduler::simulate::simulate(config, objects, false).await.unwrap();
    let on = |name: &str| report.pods.iter().find(|p| p.name == name).unwrap().node.clone();
    assert_eq!((on("a").as_deref(), on("b").as_deref()), (Some("ours"), Some("ours")));
    assert_eq!(on("c"), None, "no room left in the pool: {}", report.to_text());
}

/// Another scheduler at work (its pods created a moment ago), and one of
/// its bindings on the chosen node not yet delivered to Convoy: the node's
/// pods are read from the cluster before binding, and the binding is not
/// sent. With no other scheduler at work, nothing is read.
#[tokio::test]
async fn while_another_scheduler_works_the_nodes_pods_are_read_before_binding() {
    let s = Setup::binding_beside_pending_theirs().await;
    // It binds `theirs` to n1; Convoy's watch has not delivered it yet.
    let theirs = s.cluster.pod("default", "theirs").unwrap();
    s.cluster.bind_now(&convoy_api::PodInfo::new(theirs).unwrap(), "n1").unwrap();
    // The binding first waits (at most a second) while `theirs`, which
    // appeared moments ago, is pending as far as Convoy knows.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(s.node_of("p"), None, "p was not bound over theirs");
    match s.sink.decisions.lock().iter().find(|d| &*d.pod.name == "p").map(|d| &d.outcome) {
        Some(Outcome::Unschedulable { message }) => assert_eq!(
            message,
            "binding rejected: node n1 no longer has room for the pod (Insufficient cpu); bound \
             there since it was chosen, among others: default/theirs (default-scheduler); read \
             from the API server, not yet in Convoy's cache: default/theirs (default-scheduler)"
        ),
        other => panic!("p: {other:?}"),
    }
}

/// A node whose device plugin reports 8 GPUs while its DRA driver publishes
/// 7 for the DeviceClass naming that extended resource: reported once, not
/// again while nothing changes, and again when the counts change.
#[tokio::test]
async fn a_device_plugin_and_a_dra_driver_that_disagree_are_reported() {
    use convoy_api::ClusterObject;
    use serde_json::json;
    let node =
        |gpus: &str| NodeBuilder::new("n1").cpu("8").allocatable("example.com/gpu", gpus).build();
    let mut s = Setup::new(vec![node("8")], vec![]).await;
    let class = json!({
        "metadata": {"name": "gpu.example.com"},
        "spec": {"extendedResourceName": "example.com/gpu",
                 "selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}
    });
    s.cluster
        .apply_object(ClusterObject::DeviceClass(Arc::new(serde_json::from_value(class).unwrap())))
        .unwrap();
    let slice = |n: usize| {
        let devices: Vec<_> = (0..n).map(|i| json!({"name": format!("gpu-{i}")})).collect();
        ClusterObject::ResourceSlice(Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "n1-gpus"},
                "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                         "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                         "devices": devices}
            }))
            .unwrap(),
        ))
    };
    s.cluster.apply_object(slice(7)).unwrap();
    s.apply();
    let found = s.sink.mismatches.lock().clone();
    let [m] = &found[..] else { panic!("one mismatch: {found:?}") };
    assert_eq!((m.allocatable, m.devices, m.class.as_str()), (8, 7, "gpu.example.com"));
    assert!(m.note().starts_with("the device plugin reports 8 example.com/gpu (allocatable) while ResourceSlices publish 7 devices of DeviceClass gpu.example.com"), "{}", m.note());
    s.cluster.apply_object(slice(7)).unwrap();
    s.apply();
    assert_eq!(s.sink.mismatches.lock().len(), 1, "the same difference is reported once");
    s.cluster.apply_object(slice(8)).unwrap();
    s.apply();
    assert_eq!(s.sink.mismatches.lock().len(), 1, "agreeing: nothing to report");
    s.cluster.update_node(node("6")).unwrap();
    s.apply();
    let found = s.sink.mismatches.lock().clone();
    assert_eq!(found.len(), 2);
    assert_eq!((found[1].allocatable, found[1].devices), (6, 8));
}

/// The other scheduler's binding reaches Convoy's cache while Convoy's
/// binding gives way: the cache is checked again after the wait.
#[tokio::test]
async fn the_cache_is_checked_again_after_giving_way() {
    let mut s = Setup::binding_beside_pending_theirs().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let theirs = s.cluster.pod("default", "theirs").unwrap();
    s.cluster.bind_now(&convoy_api::PodInfo::new(theirs).unwrap(), "n1").unwrap();
    s.apply();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.node_of("p"), None, "p was not bound over theirs");
    match s.sink.decisions.lock().iter().find(|d| &*d.pod.name == "p").map(|d| &d.outcome) {
        Some(Outcome::Unschedulable { message }) => assert!(
            message.starts_with(
                "binding rejected: node n1 no longer has room for the pod (Insufficient cpu)"
            ),
            "{message}"
        ),
        other => panic!("p: {other:?}"),
    }
}
