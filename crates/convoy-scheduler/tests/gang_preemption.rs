//! Gangs and preemption on the embedded cluster: a running gang is a
//! victim as a whole, and a gang that does not fit preempts as one unit.
//! The gang invariant (`convoy_gang::invariant::partial_groups`) is checked
//! after every step.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use convoy_api::objects::ClusterObject;
use convoy_api::testing::{NodeBuilder, PodBuilder, gang_pod_group};
use convoy_api::{FakeClock, PodGroupApi};
use convoy_embedded::{EmbeddedBinder, EmbeddedCluster, Objects};
use convoy_scheduler::decision::{
    Decision, DecisionSink, GroupDecision, LogSink, PreemptionDecision,
};
use convoy_scheduler::{Scheduler, SchedulerOptions};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

/// Records preemption decisions and the pods' messages.
#[derive(Default)]
struct Sink {
    preemptions: Mutex<Vec<PreemptionDecision>>,
    decisions: Mutex<Vec<Decision>>,
}

impl DecisionSink for Sink {
    fn record(&self, d: &Decision) {
        LogSink.record(d);
        self.decisions.lock().unwrap().push(d.clone());
    }
    fn record_group(&self, d: &GroupDecision) {
        LogSink.record_group(d);
    }
    fn record_preemption(&self, d: &PreemptionDecision) {
        LogSink.record_preemption(d);
        self.preemptions.lock().unwrap().push(d.clone());
    }
}

const CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: convoy-scheduler
  pluginConfig:
  - name: GangScheduling
    args: {podGroupBackoffJitterMilliseconds: 0}
";

struct Env {
    cluster: Arc<EmbeddedCluster>,
    updates: UnboundedReceiver<convoy_api::cluster::ClusterUpdate>,
    scheduler: Arc<Scheduler>,
    clock: FakeClock,
    sink: Arc<Sink>,
}

impl Env {
    fn new(nodes: usize, cpu: &str) -> Self {
        let nodes =
            (0..nodes).map(|i| NodeBuilder::new(&format!("n{i}")).cpu(cpu).build()).collect();
        let (cluster, updates) = EmbeddedCluster::new(Objects { nodes, ..Default::default() });
        let clock = FakeClock::new();
        let known = convoy_config::KnownPlugins::new(convoy_scheduler::registry().names());
        let config = convoy_config::parse_str(CONFIG, "gang.yaml", &known).unwrap();
        let sink = Arc::new(Sink::default());
        let scheduler = Scheduler::new(SchedulerOptions {
            config,
            registry: convoy_scheduler::registry(),
            binder: Arc::new(EmbeddedBinder(cluster.clone())),
            actuator: Arc::new(convoy_embedded::EmbeddedActuator(cluster.clone())),
            clock: Arc::new(clock.clone()),
            sink: sink.clone(),
            seed: Some(1),
            framework_metrics: None,
        })
        .unwrap();
        Self { cluster, updates, scheduler, clock, sink }
    }

    /// A gang of `n` pods (`<name>-<i>`) of `cpu` each at `priority` (an
    /// upstream group's `spec.priority` too).
    fn gang(&self, api: PodGroupApi, name: &str, n: usize, cpu: &str, priority: i32) {
        self.cluster.apply_pod_group(&gang_pod_group(api, name, n, priority)).unwrap();
        for i in 0..n {
            let pod = PodBuilder::new(&format!("{name}-{i}"))
                .cpu(cpu)
                .priority(priority)
                .member_of(api, name);
            self.cluster.add_pod(pod.build()).unwrap();
        }
    }

    /// Runs until idle a few times, moving the clock past every backoff,
    /// and checks the gang invariant after each step.
    async fn settle(&mut self) {
        for _ in 0..6 {
            self.scheduler.run_until_idle(&mut self.updates, &self.clock).await;
            self.assert_invariant();
            self.clock.advance(Duration::from_secs(20));
        }
        self.scheduler.run_until_idle(&mut self.updates, &self.clock).await;
        self.assert_invariant();
    }

    fn assert_invariant(&self) {
        let partial = convoy_gang::invariant::partial_groups(
            &self.cluster.pods(),
            &self.cluster.pod_groups(),
        );
        assert!(partial.is_empty(), "groups bound below minMember: {partial:?}");
    }

    fn bound(&self, prefix: &str) -> usize {
        self.cluster
            .pods()
            .iter()
            .filter(|p| p.metadata.name.as_deref().unwrap_or("").starts_with(prefix))
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .count()
    }

    fn evicted(&self) -> Vec<String> {
        let mut v: Vec<String> =
            self.cluster.evictions().iter().map(|e| e.victim.name.to_string()).collect();
        v.sort();
        v
    }
}

const APIS: [PodGroupApi; 2] = [PodGroupApi::XK8s, PodGroupApi::Upstream];

/// A high-priority gang of 4 on a full cluster: whole lower-priority gangs
/// go (never part of one), the gang binds whole, the decision line names
/// the group.
#[tokio::test]
async fn high_gang_evicts_whole_low_gangs_and_binds_whole() {
    for api in APIS {
        let mut env = Env::new(4, "4");
        env.gang(api, "low-a", 4, "2", 0);
        env.gang(api, "low-b", 4, "2", 0);
        env.settle().await;
        assert_eq!((env.bound("low-a"), env.bound("low-b")), (4, 4), "{api:?}");

        env.gang(api, "high", 4, "3", 1000);
        env.settle().await;
        assert_eq!(env.bound("high"), 4, "{api:?}: {:?}", env.evicted());
        let evicted = env.evicted();
        assert_eq!(evicted.len(), 8, "{api:?}: {evicted:?}");
        assert!(env.bound("low-").eq(&0), "{api:?}");

        let p = env.sink.preemptions.lock().unwrap().clone();
        let by_group: Vec<_> = p.iter().filter(|d| d.node.is_some()).collect();
        assert_eq!(by_group.len(), 1, "{p:?}");
        assert_eq!(by_group[0].group.as_ref().map(|g| &*g.name), Some("high"));
        assert_eq!(by_group[0].victims.len(), 8);
        assert_eq!(
            by_group[0].message,
            "pod group preemption: found a placement for podgroup, preempting 8 victims"
        );
    }
}

/// Only as much as needed goes: one low gang's room is enough for the
/// high gang, and the other low gang stays whole.
#[tokio::test]
async fn high_gang_evicts_only_the_gangs_it_needs() {
    let mut env = Env::new(4, "4");
    env.gang(PodGroupApi::XK8s, "low-a", 2, "4", 0);
    env.gang(PodGroupApi::XK8s, "low-b", 2, "4", 10);
    env.settle().await;
    assert_eq!((env.bound("low-a"), env.bound("low-b")), (2, 2));

    env.gang(PodGroupApi::XK8s, "high", 2, "3", 1000);
    env.settle().await;
    assert_eq!(env.bound("high"), 2, "{:?}", env.evicted());
    // The lower priority gang goes, the other is reprieved.
    assert_eq!(env.evicted(), ["low-a-0", "low-a-1"]);
    assert_eq!(env.bound("low-b"), 2);
}

/// A gang that cannot fit even after evicting everything of lower
/// priority evicts nothing, and says so.
#[tokio::test]
async fn gang_that_cannot_fit_evicts_nothing() {
    let mut env = Env::new(3, "4");
    env.gang(PodGroupApi::Upstream, "low", 3, "2", 0);
    env.settle().await;
    assert_eq!(env.bound("low"), 3);

    env.gang(PodGroupApi::Upstream, "high", 4, "3", 1000);
    env.settle().await;
    assert_eq!(env.bound("high"), 0);
    assert!(env.evicted().is_empty(), "{:?}", env.evicted());
    assert_eq!(env.bound("low"), 3);
    let d = env.sink.decisions.lock().unwrap();
    let last = d.iter().rev().find(|d| d.pod.name.starts_with("high")).unwrap();
    let convoy_scheduler::decision::Outcome::Unschedulable { message } = &last.outcome else {
        panic!("{last:?}")
    };
    assert!(
        message.contains(
            "pod group preemption: 3/4 pods fit even after preempting every pod of lower priority"
        ),
        "{message}"
    );
}

/// A single high-priority pod that needs one node's room takes a whole
/// 2-node low-priority gang, not one member.
#[tokio::test]
async fn single_pod_evicts_a_whole_gang() {
    for api in APIS {
        let mut env = Env::new(2, "4");
        env.gang(api, "low", 2, "3", 0);
        env.settle().await;
        assert_eq!(env.bound("low"), 2);

        let high = PodBuilder::new("high").cpu("2").priority(1000).build();
        env.cluster.add_pod(high).unwrap();
        env.settle().await;
        assert_eq!(env.bound("high"), 1, "{api:?}");
        assert_eq!(env.evicted(), ["low-0", "low-1"], "{api:?}");
        let p = env.sink.preemptions.lock().unwrap().clone();
        let d = p.iter().find(|d| d.node.is_some()).unwrap();
        assert_eq!(d.victims.len(), 2);
        assert!(d.message.ends_with("preempting 2 victims"), "{}", d.message);
    }
}

/// A single pod prefers a node whose victim is one pod over a node whose
/// victim is a whole gang (more victims cost more).
#[tokio::test]
async fn single_pod_prefers_one_pod_over_a_gang() {
    let mut env = Env::new(3, "4");
    env.gang(PodGroupApi::XK8s, "low", 2, "3", 0);
    env.settle().await;
    let free = env
        .cluster
        .pods()
        .iter()
        .flat_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .fold(vec!["n0", "n1", "n2"], |mut v, n| {
            v.retain(|x| *x != n);
            v
        });
    assert_eq!(free.len(), 1);
    let single: Pod = PodBuilder::new("single").node(free[0]).cpu("3").priority(0).build();
    env.cluster.add_pod(single).unwrap();
    env.settle().await;

    let high = PodBuilder::new("high").cpu("2").priority(1000).build();
    env.cluster.add_pod(high).unwrap();
    env.settle().await;
    assert_eq!(env.bound("high"), 1);
    assert_eq!(env.evicted(), ["single"]);
    assert_eq!(env.bound("low"), 2);
}

/// A gang with a member of `preemptionPolicy: Never` evicts nobody, and
/// says why.
#[tokio::test]
async fn gang_with_a_never_member_evicts_nothing() {
    let mut env = Env::new(2, "4");
    env.gang(PodGroupApi::XK8s, "low", 2, "3", 0);
    env.settle().await;
    env.cluster
        .apply_pod_group(&json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "high", "namespace": "default"},
            "spec": {"minMember": 2}
        }))
        .unwrap();
    for i in 0..2 {
        let b = PodBuilder::new(&format!("high-{i}")).cpu("3").priority(1000).pod_group("high");
        let b = if i == 1 { b.preemption_policy("Never") } else { b };
        env.cluster.add_pod(b.build()).unwrap();
    }
    env.settle().await;
    assert!(env.evicted().is_empty(), "{:?}", env.evicted());
    assert_eq!((env.bound("high"), env.bound("low")), (0, 2));
    let d = env.sink.decisions.lock().unwrap();
    let last = d.iter().rev().find(|d| d.pod.name.starts_with("high")).unwrap();
    let convoy_scheduler::decision::Outcome::Unschedulable { message } = &last.outcome else {
        panic!("{last:?}")
    };
    assert!(
        message.ends_with("pod group preemption: not eligible due to preemptionPolicy=Never."),
        "{message}"
    );
}

/// An upstream PodGroup applied as given (its priority admitted from its
/// class as the API server does), with `n` members of `cpu` each at
/// `member_priority`.
fn upstream_gang(env: &Env, name: &str, n: usize, cpu: &str, member_priority: i32, spec: Value) {
    let mut spec = spec;
    spec["schedulingPolicy"] = json!({"gang": {"minCount": n}});
    env.cluster
        .apply_pod_group(&json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": spec
        }))
        .unwrap();
    for i in 0..n {
        let b = PodBuilder::new(&format!("{name}-{i}")).cpu(cpu).priority(member_priority);
        env.cluster.add_pod(b.scheduling_group(name).build()).unwrap();
    }
}

/// An upstream PodGroup preempts at its own `spec.priority`, not its
/// members' (upstream's `PodGroupPriority`): members of priority 1000 in a
/// group of priority 0 evict nobody; members of priority 0 in a group whose
/// class gives it 1000 evict the low gang.
#[tokio::test]
async fn an_upstream_group_preempts_at_its_own_priority() {
    let mut env = Env::new(2, "4");
    env.gang(PodGroupApi::XK8s, "low", 2, "3", 10);
    env.settle().await;
    assert_eq!(env.bound("low"), 2);

    // No class, no global default: admission gives the group priority 0.
    upstream_gang(&env, "loud", 2, "3", 1000, json!({}));
    env.settle().await;
    assert!(env.evicted().is_empty(), "{:?}", env.evicted());
    assert_eq!(env.bound("loud"), 0);
    let d = env.sink.decisions.lock().unwrap().clone();
    let last = d.iter().rev().find(|d| d.pod.name.starts_with("loud")).unwrap();
    let convoy_scheduler::decision::Outcome::Unschedulable { message } = &last.outcome else {
        panic!("{last:?}")
    };
    assert!(message.contains("No preemption victims found"), "{message}");
    env.cluster.delete_pod("default", "loud-0").unwrap();
    env.cluster.delete_pod("default", "loud-1").unwrap();

    let class: PriorityClass =
        serde_json::from_value(json!({"metadata": {"name": "urgent"}, "value": 1000})).unwrap();
    env.cluster.apply_object(ClusterObject::PriorityClass(Arc::new(class))).unwrap();
    upstream_gang(&env, "quiet", 2, "3", 0, json!({"priorityClassName": "urgent"}));
    let pg = env.cluster.pod_groups().into_iter().find(|g| &*g.key.name == "quiet").unwrap();
    assert_eq!(pg.priority, Some(1000), "admitted from the class");
    env.settle().await;
    assert_eq!(env.bound("quiet"), 2, "{:?}", env.evicted());
    assert_eq!(env.evicted(), ["low-0", "low-1"]);
}

/// An upstream PodGroup with `preemptionPolicy: Never` evicts nobody, and
/// says why.
#[tokio::test]
async fn an_upstream_group_that_never_preempts_evicts_nothing() {
    let mut env = Env::new(2, "4");
    env.gang(PodGroupApi::XK8s, "low", 2, "3", 0);
    env.settle().await;
    upstream_gang(
        &env,
        "high",
        2,
        "3",
        1000,
        json!({"priority": 1000, "preemptionPolicy": "Never"}),
    );
    env.settle().await;
    assert!(env.evicted().is_empty(), "{:?}", env.evicted());
    assert_eq!((env.bound("high"), env.bound("low")), (0, 2));
    let d = env.sink.decisions.lock().unwrap();
    let last = d.iter().rev().find(|d| d.pod.name.starts_with("high")).unwrap();
    let convoy_scheduler::decision::Outcome::Unschedulable { message } = &last.outcome else {
        panic!("{last:?}")
    };
    assert!(
        message.ends_with("pod group preemption: not eligible due to preemptionPolicy=Never."),
        "{message}"
    );
}
