//! Preemption cascades, on the embedded cluster: training (priority 1000)
//! preempts inference (500); the inference ReplicaSet's replacement pod
//! then preempts monitoring (100). Without the guard Convoy does what
//! upstream does (the replacement preempts: a chain of depth 2, logged,
//! counted and reported); with `replacementPreemptionDelaySeconds` the
//! replacement waits and monitoring stays.

use std::sync::Arc;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{ClusterUpdate, FakeClock};
use convoy_embedded::{EmbeddedCluster, Objects};
use convoy_scheduler::decision::{Decision, DecisionSink, Outcome, PreemptionDecision};
use convoy_scheduler::{Scheduler, SchedulerOptions};
use parking_lot::Mutex;
use tokio::sync::mpsc::UnboundedReceiver;

#[derive(Default)]
struct Collect {
    decisions: Mutex<Vec<Decision>>,
    preemptions: Mutex<Vec<PreemptionDecision>>,
}

impl DecisionSink for Collect {
    fn record(&self, d: &Decision) {
        self.decisions.lock().push(d.clone());
    }
    fn record_preemption(&self, d: &PreemptionDecision) {
        self.preemptions.lock().push(d.clone());
    }
}

const CONFIG: &str = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: convoy-scheduler
  pluginConfig:
  - name: DefaultPreemption
    args:
      replacementPreemptionDelaySeconds: 300
";

struct Run {
    cluster: Arc<EmbeddedCluster>,
    updates: UnboundedReceiver<ClusterUpdate>,
    clock: FakeClock,
    scheduler: Arc<Scheduler>,
    sink: Arc<Collect>,
}

/// A full cluster: n1 has the only GPU, used by inference; n2 is full of
/// monitoring. Training, pending, needs the GPU. `more` pods are added.
fn tiers(more: Vec<k8s_openapi::api::core::v1::Pod>) -> Objects {
    let mut pods = vec![
        PodBuilder::new("inference-0")
            .node("n1")
            .cpu("2")
            .resource("nvidia.com/gpu", "1")
            .priority(500)
            .owner("ReplicaSet", "inference")
            .build(),
        PodBuilder::new("monitoring-0")
            .node("n2")
            .cpu("4")
            .priority(100)
            .owner("ReplicaSet", "monitoring")
            .build(),
        PodBuilder::new("training-0")
            .cpu("2")
            .resource("nvidia.com/gpu", "1")
            .priority(1000)
            .owner("Job", "training")
            .build(),
    ];
    pods.extend(more);
    Objects {
        nodes: vec![
            NodeBuilder::new("n1").cpu("4").allocatable("nvidia.com/gpu", "1").build(),
            NodeBuilder::new("n2").cpu("4").build(),
        ],
        pods,
        ..Default::default()
    }
}

/// The scheduler on [`tiers`], run until training has preempted inference
/// and inference's ReplicaSet made its replacement, then until idle.
async fn start(guard: bool) -> Run {
    let (cluster, updates) = EmbeddedCluster::new(tiers(vec![]));
    let clock = FakeClock::new();
    let sink = Arc::new(Collect::default());
    let config = if guard {
        convoy_config::parse_str(
            CONFIG,
            "guard.yaml",
            &convoy_scheduler::registry().known_plugins(),
        )
        .unwrap()
    } else {
        convoy_scheduler::load_config(None).unwrap()
    };
    let scheduler = Scheduler::new(SchedulerOptions::embedded(
        config,
        &cluster,
        Arc::new(clock.clone()),
        sink.clone(),
    ))
    .unwrap();
    let mut run = Run { cluster, updates, clock, scheduler, sink };
    run.idle().await;
    // Training took the GPU: inference-0 is gone. Its ReplicaSet makes a
    // replacement (needs no GPU, only room).
    assert!(run.cluster.pod("default", "inference-0").is_none(), "training preempted inference");
    assert_eq!(run.node_of("training-0").as_deref(), Some("n1"));
    let replacement = PodBuilder::new("inference-1")
        .cpu("4")
        .priority(500)
        .owner("ReplicaSet", "inference")
        .build();
    run.cluster.add_pod(replacement).unwrap();
    run.idle().await;
    run
}

impl Run {
    async fn idle(&mut self) {
        self.scheduler.run_until_idle(&mut self.updates, &self.clock).await;
    }

    fn node_of(&self, pod: &str) -> Option<String> {
        self.cluster.pod("default", pod)?.spec.as_ref()?.node_name.clone()
    }
}

/// Without the guard, as upstream: the replacement preempts monitoring,
/// and the chain (depth 2) is reported with the preemption it follows.
#[tokio::test]
async fn without_the_guard_the_replacement_preempts_as_upstream() {
    let run = start(false).await;
    assert!(run.cluster.pod("default", "monitoring-0").is_none(), "monitoring preempted");
    assert_eq!(run.node_of("inference-1").as_deref(), Some("n2"));
    let preemptions = run.sink.preemptions.lock().clone();
    let with_victims: Vec<_> = preemptions.iter().filter(|p| !p.victims.is_empty()).collect();
    assert_eq!(with_victims.len(), 2, "{preemptions:#?}");
    assert!(with_victims[0].chain.is_none(), "training replaces nobody");
    let chain = with_victims[1].chain.as_ref().expect("the replacement extends a chain");
    assert_eq!(chain.depth, 2);
    assert_eq!(chain.after.owner, "ReplicaSet default/inference");
    assert_eq!(&*chain.after.victim.name, "inference-0");
    assert_eq!(&*chain.after.preemptor.name, "training-0");
    assert_eq!(
        chain.summary(),
        "default/training-0 preempted default/inference-0 (ReplicaSet default/inference) 0s before"
    );
}

/// With `replacementPreemptionDelaySeconds: 300`: the replacement does not
/// preempt, says why, and monitoring stays; after the delay it may.
#[tokio::test]
async fn with_the_guard_the_replacement_waits_and_monitoring_stays() {
    let mut run = start(true).await;
    assert_eq!(run.node_of("monitoring-0").as_deref(), Some("n2"), "monitoring stays");
    assert_eq!(run.node_of("inference-1"), None);
    let message = run
        .sink
        .decisions
        .lock()
        .iter()
        .rev()
        .find(|d| &*d.pod.name == "inference-1")
        .map(|d| d.outcome.clone());
    match message {
        Some(Outcome::Unschedulable { message }) => assert!(
            message.contains(
                "preemption: not eligible: a pod of the same owner (ReplicaSet default/inference), \
                 default/inference-0, was preempted 0s ago by default/training-0; its replacements \
                 do not preempt for 300s (replacementPreemptionDelaySeconds)."
            ),
            "{message}"
        ),
        other => panic!("inference-1: {other:?}"),
    }
    let chains = run.sink.preemptions.lock().iter().filter(|p| p.chain.is_some()).count();
    assert_eq!(chains, 0);
    // The guard delays, it does not forbid: after the delay the
    // replacement may preempt (a cluster event or the periodic flush
    // retries it).
    run.clock.advance(std::time::Duration::from_secs(301));
    run.scheduler.queue().flush_unschedulable_leftover();
    run.idle().await;
    assert_eq!(run.node_of("inference-1").as_deref(), Some("n2"));
}

/// `simulate` shows the chain: the replacement is pending in the input
/// (as in a dump taken after its ReplicaSet made it).
#[tokio::test]
async fn simulate_shows_the_chain() {
    let replacement =
        PodBuilder::new("inference-1").cpu("4").priority(500).owner("ReplicaSet", "inference");
    let objects = tiers(vec![replacement.build()]);
    let config = convoy_scheduler::load_config(None).unwrap();
    let report = convoy_scheduler::simulate::simulate(config, objects, false).await.unwrap();
    let text = report.to_text();
    assert!(
        text.contains(
            "preemption chain of depth 2: default/training-0 preempted default/inference-0 \
             (ReplicaSet default/inference) 0s before; its replacement default/inference-1 then \
             preempted default/monitoring-0"
        ),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["chains"][0]["depth"], 2, "{json}");
}
