//! Preemption on the embedded cluster: the whole scheduler (DefaultPreemption
//! in the default profile, nominations, victims deleted through the
//! embedded cluster's actuator), as `simulate` runs it.

use std::sync::Arc;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{ClusterObject, FakeClock, PodNominator};
use convoy_embedded::{EmbeddedActuator, EmbeddedBinder, EmbeddedCluster, Objects};
use convoy_scheduler::decision::LogSink;
use convoy_scheduler::simulate::{PodResult, Report, simulate};
use convoy_scheduler::{Scheduler, SchedulerOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;

async fn run(objects: Objects) -> Report {
    let config = convoy_scheduler::load_config(None).unwrap();
    simulate(config, objects, false).await.unwrap()
}

fn objects(nodes: Vec<Node>, pods: Vec<Pod>) -> Objects {
    Objects { nodes, pods, ..Default::default() }
}

fn result<'a>(r: &'a Report, name: &str) -> &'a PodResult {
    r.pods.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name}: {}", r.to_text()))
}

fn node(name: &str) -> Node {
    NodeBuilder::new(name).cpu("4").build()
}

fn low(name: &str, node: &str, cpu: &str) -> Pod {
    PodBuilder::new(name).node(node).cpu(cpu).priority(0).build()
}

fn high(cpu: &str) -> PodBuilder {
    PodBuilder::new("high").cpu(cpu).priority(1_000_000)
}

/// The issue's case: a pod of priority 1,000,000 fits only if two
/// priority-0 pods go; they go, and it binds in a later cycle.
#[tokio::test]
async fn preemptor_binds_after_its_victims_go() {
    let r = run(objects(
        vec![node("n1")],
        vec![low("a", "n1", "2"), low("b", "n1", "2"), high("3").build()],
    ))
    .await;
    assert_eq!(result(&r, "high").node.as_deref(), Some("n1"), "{}", r.to_text());
    for victim in ["a", "b"] {
        let v = result(&r, victim);
        assert!(v.evicted, "{v:?}");
        assert_eq!((v.node.as_deref(), v.preemptor.as_deref()), (Some("n1"), Some("default/high")));
    }
    assert_eq!((r.summary.bound, r.summary.pending, r.summary.evicted), (1, 0, 2));
    let text = r.to_text();
    assert!(text.contains("default/a     evicted from n1 by default/high"), "{text}");
    assert!(text.contains("1 bound, 0 pending, 2 evicted"), "{text}");
    let json = serde_json::to_value(&r).unwrap();
    let a = json["pods"].as_array().unwrap().iter().find(|p| p["name"] == "a").unwrap();
    assert_eq!((&a["evicted"], &a["preemptor"]), (&json!(true), &json!("default/high")));
    let h = json["pods"].as_array().unwrap().iter().find(|p| p["name"] == "high").unwrap();
    assert!(h.get("evicted").is_none(), "only victims carry the field: {h}");
}

/// A PodDisruptionBudget that allows no disruption protects its pod when
/// another node's victims are not protected.
#[tokio::test]
async fn budget_protected_pod_is_spared() {
    let pdb = ClusterObject::PodDisruptionBudget(Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "keep", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "keep"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1}
        }))
        .unwrap(),
    ));
    let protected = PodBuilder::new("protected").node("n1").cpu("4").label("app", "keep").build();
    let free = PodBuilder::new("free").node("n2").cpu("4").label("app", "other").build();
    let mut o = objects(vec![node("n1"), node("n2")], vec![protected, free, high("3").build()]);
    o.others.push(pdb);
    let r = run(o).await;
    assert_eq!(result(&r, "high").node.as_deref(), Some("n2"), "{}", r.to_text());
    assert!(result(&r, "free").evicted);
    assert!(r.pods.iter().all(|p| p.name != "protected"), "{}", r.to_text());
}

/// `preemptionPolicy: Never` never evicts anyone.
#[tokio::test]
async fn never_never_evicts() {
    let r = run(objects(
        vec![node("n1")],
        vec![low("a", "n1", "4"), high("3").preemption_policy("Never").build()],
    ))
    .await;
    assert_eq!(r.summary.evicted, 0, "{}", r.to_text());
    assert_eq!(
        result(&r, "high").reason.as_deref(),
        Some(
            "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to \
             preemptionPolicy=Never."
        )
    );
}

/// Pods of equal priority are never victims; the message is upstream's.
#[tokio::test]
async fn equal_priority_is_not_a_victim() {
    let same = PodBuilder::new("same").node("n1").cpu("4").priority(1_000_000).build();
    let r = run(objects(vec![node("n1")], vec![same, high("3").build()])).await;
    assert_eq!(r.summary.evicted, 0);
    assert_eq!(
        result(&r, "high").reason.as_deref(),
        Some(
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: \
             1 No preemption victims found for incoming pod."
        )
    );
}

/// The room freed for a preemptor is not taken by a pod of lower priority
/// that comes later: it counts the nominated pod in Filter, and its own
/// preemption finds nothing to gain there.
#[tokio::test]
async fn nomination_keeps_the_room_for_the_preemptor() {
    let mid = PodBuilder::new("mid").cpu("3").priority(500).build();
    let r = run(objects(vec![node("n1")], vec![low("a", "n1", "4"), high("3").build(), mid])).await;
    assert_eq!(result(&r, "high").node.as_deref(), Some("n1"), "{}", r.to_text());
    assert!(result(&r, "mid").node.is_none(), "{}", r.to_text());
    assert_eq!(r.summary.evicted, 1, "only a: {}", r.to_text());
}

/// Priorities come from PriorityClasses when pods name one (as the
/// Priority admission plugin resolves them); an unknown class is refused
/// when the file is loaded, naming the field.
#[tokio::test]
async fn priority_classes_resolve_priorities() {
    let yaml = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch-low}
value: 10
globalDefault: true
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: critical}
value: 1000000
description: dropped when loaded
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "4", memory: 32Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: batch, namespace: default}
spec:
  nodeName: n1
  containers: [{name: c, resources: {requests: {cpu: "4"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: urgent, namespace: default}
spec:
  schedulerName: convoy-scheduler
  priorityClassName: critical
  containers: [{name: c, resources: {requests: {cpu: "2"}}}]
"#;
    let objects = convoy_embedded::parse_objects(yaml, "classes.yaml").unwrap();
    let r = run(objects).await;
    assert_eq!(result(&r, "urgent").node.as_deref(), Some("n1"), "{}", r.to_text());
    assert!(result(&r, "batch").evicted, "{}", r.to_text());

    let unknown = yaml.replace("priorityClassName: critical", "priorityClassName: nope");
    let e = convoy_embedded::parse_objects(&unknown, "classes.yaml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "classes.yaml: document 5 (Pod default/urgent): spec.priorityClassName: no \
         PriorityClass with name nope was found"
    );
}

/// The scheduler's own view: the nomination is recorded, written to the
/// pod, and gone once the pod is bound.
#[tokio::test]
async fn nomination_is_recorded_and_ends_at_binding() {
    let (cluster, mut updates) =
        EmbeddedCluster::new(objects(vec![node("n1")], vec![low("a", "n1", "4")]));
    let clock = FakeClock::new();
    let scheduler = Scheduler::new(SchedulerOptions {
        config: convoy_scheduler::load_config(None).unwrap(),
        registry: convoy_scheduler::registry(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(EmbeddedActuator(cluster.clone())),
        clock: Arc::new(clock.clone()),
        sink: Arc::new(LogSink),
        seed: Some(1),
        framework_metrics: None,
    })
    .unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    cluster.add_pod(high("3").build()).unwrap();
    // One cycle: preempted, nominated, victims not processed yet.
    while let Ok(u) = updates.try_recv() {
        scheduler.handle_update(u);
    }
    let qpi = scheduler.queue().try_pop().unwrap();
    scheduler.schedule_one(qpi);
    let pod = cluster.pod("default", "high").unwrap();
    let info = convoy_api::PodInfo::new(pod).unwrap();
    assert_eq!(scheduler.queue().nominator().nominated_node(&info).as_deref(), Some("n1"));
    scheduler.run_until_idle(&mut updates, &clock).await;
    let pod = cluster.pod("default", "high").unwrap();
    assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    assert!(
        pod.status.as_ref().unwrap().nominated_node_name.is_none(),
        "cleared at binding, as kube-apiserver does"
    );
    assert!(scheduler.queue().nominator().is_empty());
    assert!(cluster.pod("default", "a").is_none());
    assert_eq!(cluster.evictions().len(), 1);
    scheduler.cache().check_invariants().unwrap();
}

fn scheduler_on(cluster: &Arc<EmbeddedCluster>, clock: &FakeClock) -> Arc<Scheduler> {
    Scheduler::new(SchedulerOptions {
        config: convoy_scheduler::load_config(None).unwrap(),
        registry: convoy_scheduler::registry(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(EmbeddedActuator(cluster.clone())),
        clock: Arc::new(clock.clone()),
        sink: Arc::new(LogSink),
        seed: Some(1),
        framework_metrics: None,
    })
    .unwrap()
}

/// A preemptor nominated to n1, whose victim still terminates there, does
/// not take the room on n2: it waits for its victim (no wasted eviction),
/// keeps its nomination, preempts nobody else, and binds on n1 once the
/// victim is gone (its deletion requeues it).
#[tokio::test]
async fn preemptor_waits_for_its_victims_while_they_terminate() {
    let victim = PodBuilder::new("a").node("n1").cpu("4").priority(0).terminating_by_preemption();
    let (cluster, mut updates) = EmbeddedCluster::new(objects(
        vec![node("n1"), node("n2")],
        vec![victim.build(), high("3").nominated("n1").build()],
    ));
    let clock = FakeClock::new();
    let scheduler = scheduler_on(&cluster, &clock);
    scheduler.run_until_idle(&mut updates, &clock).await;
    let pod = cluster.pod("default", "high").unwrap();
    assert!(pod.spec.as_ref().unwrap().node_name.is_none(), "waits for a, not bound on n2");
    assert_eq!(pod.status.as_ref().unwrap().nominated_node_name.as_deref(), Some("n1"));
    let info = convoy_api::PodInfo::new(pod).unwrap();
    assert_eq!(scheduler.queue().nominator().nominated_node(&info).as_deref(), Some("n1"));
    assert!(cluster.evictions().is_empty(), "preempts nobody again");

    // A lower-priority pod does not take the room nominated on n1 (it
    // goes to n2).
    cluster.add_pod(PodBuilder::new("mid").cpu("3").priority(500).build()).unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    let mid = cluster.pod("default", "mid").unwrap();
    assert_eq!(mid.spec.as_ref().unwrap().node_name.as_deref(), Some("n2"));

    // The victim goes: the preemptor binds on its node.
    cluster.delete_pod("default", "a").unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    let pod = cluster.pod("default", "high").unwrap();
    assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    assert!(scheduler.queue().nominator().is_empty());
    assert!(cluster.evictions().is_empty());
    scheduler.cache().check_invariants().unwrap();
}

/// A nominated node that can no longer take the pod (tainted) ends the
/// wait: the pod tries all nodes, as before, at its next attempt.
#[tokio::test]
async fn preemptor_stops_waiting_when_its_node_is_unresolvable() {
    let victim = PodBuilder::new("a").node("n1").cpu("4").priority(0).terminating_by_preemption();
    let (cluster, mut updates) = EmbeddedCluster::new(objects(
        vec![node("n1"), node("n2")],
        vec![victim.build(), high("3").nominated("n1").build()],
    ));
    let clock = FakeClock::new();
    let scheduler = scheduler_on(&cluster, &clock);
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert!(cluster.pod("default", "high").unwrap().spec.as_ref().unwrap().node_name.is_none());
    let mut n1 = (*cluster.node("n1").unwrap()).clone();
    n1.spec.get_or_insert_with(Default::default).taints =
        Some(vec![k8s_openapi::api::core::v1::Taint {
            key: "gone".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
    cluster.update_node(n1).unwrap();
    // The taint does not requeue the pod by itself (its rejecting plugin,
    // NodeResourcesFit, does not register for it): retry it at once.
    scheduler.run_until_idle(&mut updates, &clock).await;
    scheduler.queue().activate([&convoy_api::PodInfo::new(
        cluster.pod("default", "high").unwrap(),
    )
    .unwrap()
    .key]);
    scheduler.run_until_idle(&mut updates, &clock).await;
    let pod = cluster.pod("default", "high").unwrap();
    assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some("n2"));
}

/// An actuator whose deletions wait until the test lets them go, as API
/// calls under load do.
struct SlowActuator {
    inner: EmbeddedActuator,
    gate: Arc<tokio::sync::Semaphore>,
}

impl convoy_api::PreemptionActuator for SlowActuator {
    fn preempt(
        &self,
        victim: Arc<convoy_api::PodInfo>,
        preemptor: Arc<convoy_api::PodInfo>,
        node: Arc<str>,
    ) -> futures::future::BoxFuture<'static, Result<(), convoy_api::PreemptionError>> {
        let (gate, call) = (self.gate.clone(), self.inner.preempt(victim, preemptor, node));
        Box::pin(async move {
            let _permit = gate.acquire().await;
            call.await
        })
    }

    fn set_nominated_node_name(
        &self,
        pod: Arc<convoy_api::PodInfo>,
        node: Option<Arc<str>>,
    ) -> futures::future::BoxFuture<'static, Result<(), convoy_api::PreemptionError>> {
        self.inner.set_nominated_node_name(pod, node)
    }
}

/// Nothing wasted while the victims' deletions are in flight: the
/// preemptor is held (`waiting for the preemption for this pod to be
/// finished`) even when a cluster event would retry it, so it can neither
/// preempt on a second node nor take other room; once its victim is gone
/// it binds where it preempted.
#[tokio::test]
async fn preemptor_is_held_while_its_preemption_is_carried_out() {
    let (cluster, mut updates) = EmbeddedCluster::new(objects(
        vec![node("n1"), node("n2")],
        vec![low("a", "n1", "4"), low("b", "n2", "4")],
    ));
    let clock = FakeClock::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let actuator = SlowActuator { inner: EmbeddedActuator(cluster.clone()), gate: gate.clone() };
    let scheduler = Scheduler::new(SchedulerOptions {
        config: convoy_scheduler::load_config(None).unwrap(),
        registry: convoy_scheduler::registry(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(actuator),
        clock: Arc::new(clock.clone()),
        sink: Arc::new(LogSink),
        seed: Some(1),
        framework_metrics: None,
    })
    .unwrap();
    step(&scheduler, &mut updates);
    cluster.add_pod(high("3").build()).unwrap();
    step(&scheduler, &mut updates);
    assert_eq!(scheduler.preemptions_in_flight(), 1);
    let key = convoy_api::PodKey::new("default", "high");
    // In the unschedulable pool; PreEnqueue runs when something moves it.
    assert_eq!(scheduler.queue().queue_of(&key), Some(convoy_queue::QueueKind::Unschedulable));

    // A node where the pod would fit: it would be retried, and take it
    // (wasting its victim's eviction); it is held instead.
    cluster.add_node(NodeBuilder::new("big").cpu("4").build()).unwrap();
    clock.advance(std::time::Duration::from_secs(20));
    scheduler.queue().flush_backoff_completed();
    step(&scheduler, &mut updates);
    assert_eq!(scheduler.queue().queue_of(&key), Some(convoy_queue::QueueKind::Gated));
    assert!(cluster.evictions().is_empty(), "nothing deleted yet, nobody else preempted");

    gate.add_permits(10);
    scheduler.run_until_idle(&mut updates, &clock).await;
    let pod = cluster.pod("default", "high").unwrap();
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let evicted: Vec<String> =
        cluster.evictions().iter().map(|e| e.victim.name.to_string()).collect();
    assert_eq!(evicted.len(), 1, "one victim only: {evicted:?}");
    let victim_node = if evicted[0] == "a" { "n1" } else { "n2" };
    assert_eq!(bound.as_deref(), Some(victim_node));
    scheduler.cache().check_invariants().unwrap();
}

/// Applies the cluster's updates, then runs one cycle per pod in the
/// active queue.
fn step(
    scheduler: &Arc<Scheduler>,
    updates: &mut tokio::sync::mpsc::UnboundedReceiver<convoy_api::ClusterUpdate>,
) {
    while let Ok(u) = updates.try_recv() {
        scheduler.handle_update(u);
    }
    while let Some(qpi) = scheduler.queue().try_pop() {
        scheduler.schedule_one(qpi);
    }
}

/// A preemption whose victims are all being deleted already (a pod that
/// was ending anyway) holds nobody and activates nobody: the preemptor
/// waits in the unschedulable pool for their deletion, as upstream's does.
/// Activated at once, it found its node still full and preempted the same
/// victim again, as fast as the loop ran, until the victim was gone.
#[tokio::test]
async fn preemptor_of_a_pod_already_ending_waits_for_its_deletion() {
    let mut ending = low("a", "n1", "4");
    let t = k8s_openapi::jiff::Timestamp::from_second(1_767_225_600).unwrap();
    ending.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t));
    let (cluster, mut updates) = EmbeddedCluster::new(objects(vec![node("n1")], vec![ending]));
    let clock = FakeClock::new();
    let scheduler = scheduler_on(&cluster, &clock);
    step(&scheduler, &mut updates);
    cluster.add_pod(high("3").build()).unwrap();
    step(&scheduler, &mut updates);
    // The preemption's task runs (nothing to delete).
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    let key = convoy_api::PodKey::new("default", "high");
    assert_eq!(scheduler.queue().queue_of(&key), Some(convoy_queue::QueueKind::Unschedulable));
    assert_eq!(scheduler.preemptions_in_flight(), 0);
    let info = convoy_api::PodInfo::new(cluster.pod("default", "high").unwrap()).unwrap();
    assert_eq!(scheduler.queue().nominator().nominated_node(&info).as_deref(), Some("n1"));
    assert!(cluster.evictions().is_empty(), "nothing to delete");

    // The victim goes: the preemptor binds where it preempted.
    cluster.delete_pod("default", "a").unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    let pod = cluster.pod("default", "high").unwrap();
    assert_eq!(pod.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    scheduler.cache().check_invariants().unwrap();
}
