//! Criterion benchmark of PodTopologySpread's scheduling cycle at 5,000
//! nodes (three zones, hostname labels, 5,000 pods already placed): PreFilter
//! and Filter over 500 nodes, PreScore, Score and NormalizeScore over 500
//! feasible nodes, then a pod of the same template bound to one node (the
//! only change between two cycles, as in a scheduling run; the oldest of
//! 2,000 bound pods goes). Four pod shapes: a hard zone constraint, a soft
//! one, a hard hostname one (maxSkew 1), and a ReplicaSet's pod under the
//! System default constraints (hostname and zone, soft). `fresh` builds
//! the plugin every cycle: counting every node, as upstream does.
//!
//! ```sh
//! cargo bench -p convoy-plugins --bench pod_topology_spread
//! ```

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{
    BindError, Binder, ClusterObject, CycleState, FilterPlugin, Handle, ImageStateSummary,
    NodeInfo, NodeInfoLister, PodInfo, PreFilterPlugin, PreScorePlugin, ScorePlugin, WaitingPods,
};
use convoy_plugins::PodTopologySpread;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::future::BoxFuture;

const NODES: usize = 5000;
const EVALUATED: usize = 500;
const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

struct NoBinder;
impl Binder for NoBinder {
    fn bind(&self, _: Arc<PodInfo>, _: Arc<str>) -> BoxFuture<'static, Result<(), BindError>> {
        Box::pin(async { Ok(()) })
    }
}

struct NoWaiting;
impl WaitingPods for NoWaiting {
    fn allow(&self, _: &str, _: &'static str) -> bool {
        false
    }
    fn reject(&self, _: &str, _: &'static str, _: &str) -> bool {
        false
    }
    fn uids(&self) -> Vec<Arc<str>> {
        Vec::new()
    }
}

/// The snapshot as the scheduler's cache keeps it: nodes and their
/// generations, one node replaced per bind.
struct Cluster {
    nodes: Vec<Arc<NodeInfo>>,
    generations: Vec<u64>,
}

impl NodeInfoLister for Cluster {
    fn list(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }
    fn generations(&self) -> &[u64] {
        &self.generations
    }
    fn have_pods_with_affinity_list(&self) -> &[Arc<NodeInfo>] {
        &[]
    }
    fn have_pods_with_required_anti_affinity_list(&self) -> &[Arc<NodeInfo>] {
        &[]
    }
    fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.nodes.iter().find(|n| n.name() == name)
    }
    fn image_state(&self, _: &str) -> Option<ImageStateSummary> {
        None
    }
}

fn cluster() -> Cluster {
    let nodes: Vec<Arc<NodeInfo>> = (0..NODES)
        .map(|i| {
            let name = format!("node-{i}");
            let mut n = NodeBuilder::new(&name)
                .label(HOST, &name)
                .label(ZONE, ["moon-1", "moon-2", "moon-3"][i % 3])
                .info();
            let pod = PodBuilder::new(&format!("init-{i}")).namespace("namespace-1").node(&name);
            n.add_pod(pod.info());
            Arc::new(n)
        })
        .collect();
    let generations = nodes.iter().map(|n| n.generation).collect();
    Cluster { nodes, generations }
}

fn cycle(pl: &PodTopologySpread, pod: &PodInfo, c: &Cluster, start: usize) {
    let evaluated: Vec<&NodeInfo> =
        (0..EVALUATED).map(|i| &*c.nodes[(start + i) % NODES]).collect();
    let mut state = CycleState::new();
    let (_, s) = pl.pre_filter(&mut state, pod, c);
    if s.is_success() {
        for n in &evaluated {
            black_box(pl.filter(&state, pod, n));
        }
    }
    let s = pl.pre_score(&mut state, pod, &evaluated, c);
    if s.is_success() {
        let mut scores: Vec<i64> =
            evaluated.iter().map(|n| pl.score(&state, pod, n).unwrap()).collect();
        pl.normalize_score(&state, pod, &mut scores);
        black_box(scores);
    }
}

fn pod_topology_spread(c: &mut Criterion) {
    let mut g = c.benchmark_group("PodTopologySpread");
    let spread = |skew: i32, key: &str, when: &str| {
        PodBuilder::new("p").namespace("spread").label("color", "blue").spread(
            skew,
            key,
            when,
            &[("color", "blue")],
        )
    };
    let shapes = [
        ("hard-zone", spread(5, ZONE, "DoNotSchedule")),
        ("soft-zone", spread(5, ZONE, "ScheduleAnyway")),
        ("hard-hostname", spread(1, HOST, "DoNotSchedule")),
        (
            "default",
            PodBuilder::new("p").namespace("spread").label("app", "web").owner("ReplicaSet", "web"),
        ),
    ];
    let rs: ClusterObject = ClusterObject::ReplicaSet(Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "spread"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {}}
        }))
        .unwrap(),
    ));
    for (name, template) in shapes {
        for fresh in [false, true] {
            let objects = Arc::new(convoy_objects::ClusterObjects::new());
            objects.apply(&rs);
            let handle = Handle {
                binder: Arc::new(NoBinder),
                waiting_pods: Arc::new(NoWaiting),
                profile: Arc::from("convoy-scheduler"),
                objects,
                groups: None,
                running_preemptions: Default::default(),
                dra_stats: Default::default(),
            };
            let mut c = cluster();
            let kept = PodTopologySpread::new(None, &handle).unwrap();
            let pod = template.clone().info();
            let mut i = 0usize;
            // The last 2,000 pods bound (as many as the embedded benchmark
            // measures), the oldest unbound as a new one is bound.
            let mut bound: VecDeque<(usize, Arc<PodInfo>)> = VecDeque::new();
            g.throughput(Throughput::Elements(1));
            let label = if fresh { "fresh" } else { "memo" };
            g.bench_function(format!("{name}/{label}/5000Nodes"), |b| {
                b.iter(|| {
                    i += 1;
                    let fresh_plugin;
                    let pl = if fresh {
                        fresh_plugin = PodTopologySpread::new(None, &handle).unwrap();
                        &fresh_plugin
                    } else {
                        &kept
                    };
                    cycle(pl, &pod, &c, i * EVALUATED);
                    // Bind a pod of the template on one node.
                    let j = (i * 7919) % NODES;
                    let node = c.nodes[j].name().to_string();
                    let pod = template.clone().node(&node).uid(&format!("bound-{i}")).info();
                    Arc::make_mut(&mut c.nodes[j]).add_pod(pod.clone());
                    c.generations[j] = c.nodes[j].generation;
                    bound.push_back((j, pod));
                    if bound.len() > 2000 {
                        let (j, pod) = bound.pop_front().unwrap();
                        Arc::make_mut(&mut c.nodes[j]).remove_pod(&pod);
                        c.generations[j] = c.nodes[j].generation;
                    }
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, pod_topology_spread);
criterion_main!(benches);
