//! Queue micro-benchmarks, without an external harness:
//! `cargo bench -p convoy-queue`. Prints nanoseconds per operation.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, Plugin, PodInfo,
    PreEnqueuePlugin, QueueSortPlugin, QueuedPodInfo, QueueingHint, RealClock, Status,
};
use convoy_queue::{Failure, ProfileQueueing, QueueConfig, SchedulingQueue};

struct PrioritySort;
impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        "PrioritySort"
    }
}
impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (a.pod_info.priority, b.pod_info.priority);
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }
}

struct Gates;
impl Plugin for Gates {
    fn name(&self) -> &'static str {
        "SchedulingGates"
    }
}
impl PreEnqueuePlugin for Gates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if pod.is_gated() { Status::unschedulable("gated") } else { Status::success() }
    }
}

fn queue() -> SchedulingQueue {
    let mut config = QueueConfig::new(Arc::new(RealClock), Arc::new(PrioritySort));
    let fit = ClusterEventWithHint::with_hint(
        EventResource::Node,
        ActionType::ADD,
        |_: &PodInfo, _: Option<&EventObject>, _: Option<&EventObject>| QueueingHint::Skip,
    );
    config.profiles.insert(
        "convoy-scheduler".to_string(),
        ProfileQueueing {
            pre_enqueue: vec![Arc::new(Gates)],
            events: HashMap::from([("NodeResourcesFit", vec![fit])]),
        },
    );
    SchedulingQueue::new(config)
}

fn report(what: &str, n: usize, start: Instant) {
    let ns = start.elapsed().as_nanos() as f64 / n as f64;
    println!("{what:<48} {ns:>10.0} ns/op");
}

fn main() {
    const N: usize = 100_000;
    let pods: Vec<Arc<PodInfo>> =
        (0..N).map(|i| PodBuilder::new(&format!("p{i}")).priority((i % 7) as i32).info()).collect();

    let q = queue();
    let start = Instant::now();
    for p in &pods {
        q.add(p.clone());
    }
    report("add (100k pods, PreEnqueue, 7 priorities)", N, start);

    let start = Instant::now();
    let mut popped = Vec::with_capacity(N);
    while let Some(p) = q.try_pop() {
        popped.push(p);
    }
    report("try_pop", N, start);

    // Fill the pool: every pod rejected by NodeResourcesFit.
    let uids: Vec<Arc<str>> = popped.iter().map(|p| p.pod_info.uid.clone()).collect();
    let start = Instant::now();
    for mut p in popped {
        p.unschedulable_plugins.insert("NodeResourcesFit");
        q.add_unschedulable_if_not_present(p, Failure::Unschedulable);
    }
    report("add_unschedulable_if_not_present", N, start);
    let start = Instant::now();
    for uid in &uids {
        q.done(uid);
    }
    report("done (already finished)", N, start);
    assert_eq!(q.pending_counts().unschedulable, N);

    // Events nobody waits for: no per-pod work.
    let assigned = EventObject::Pod(Arc::new(PodBuilder::new("a").node("n").build()));
    let rounds = 100_000;
    let start = Instant::now();
    for _ in 0..rounds {
        black_box(q.assigned_pod_added(&assigned));
    }
    report("move_all, unrelated event, 100k pods in pool", rounds, start);

    // A matching event whose hint says Skip for every pod: per-pod hints.
    let node = EventObject::Node(Arc::new(NodeBuilder::new("n").build()));
    let ev = ClusterEvent::new(EventResource::Node, ActionType::ADD);
    let rounds = 20;
    let start = Instant::now();
    for _ in 0..rounds {
        black_box(q.move_all_to_active_or_backoff(ev, None, Some(&node)));
    }
    report("move_all, matching event, hint Skip (per pod)", rounds * N, start);
    assert_eq!(q.pending_counts().unschedulable, N);

    // Steady state: add, pop, done, one pod at a time.
    let q = queue();
    let start = Instant::now();
    for p in &pods {
        q.add(p.clone());
        let qpi = q.try_pop().expect("pod");
        q.done(&qpi.pod_info.uid);
    }
    report("add + try_pop + done (queue near empty)", N, start);
}
