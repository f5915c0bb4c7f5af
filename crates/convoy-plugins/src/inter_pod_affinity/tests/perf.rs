//! The plugin's own cost per scheduling cycle at 5,000 nodes, in upstream
//! scheduler_perf's inter-pod affinity workloads (same templates, init pods
//! and namespaces), and the memory its memo keeps. Ignored (timing, not a
//! check); run with
//! `cargo test --release -p convoy-plugins perf_ -- --ignored --nocapture`.
//!
//! Each cycle runs what the framework would: PreFilter, Filter from a
//! rotating start until 500 nodes fit, PreScore, Score and NormalizeScore on
//! those; the pod then goes to a best-scored node with the fewest pods (the
//! resource scorers' spreading, roughly), which changes that node, as
//! binding does. Only the plugin's calls are timed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use serde_json::{Value, json};

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{
    ClusterObject, CycleState, FilterPlugin, NodeInfo, NodeInfoLister, NodeList, PodInfo,
    PreFilterPlugin, PreScorePlugin, ScorePlugin,
};
use convoy_objects::ClusterObjects;

use super::InterPodAffinity;

const NODES: usize = 5000;
const MEASURED: usize = 1000;
const TO_FIND: usize = 500;
const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

fn term(color: &str, key: &str, namespaces: Option<&[&str]>) -> Value {
    let mut t = json!({"labelSelector": {"matchLabels": {"color": color}}, "topologyKey": key});
    match namespaces {
        Some(ns) => t["namespaces"] = json!(ns),
        None => t["namespaceSelector"] = json!({"matchLabels": {"team": "devops"}}),
    }
    t
}

/// A template: labels `color`, one term of the given kind.
fn template(color: &str, kind: &str, key: &str, namespaces: Option<&[&str]>) -> Value {
    let t = term(color, key, namespaces);
    let (side, list, t) = match kind {
        "required" => ("podAffinity", "requiredDuringSchedulingIgnoredDuringExecution", t),
        "anti" => ("podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", t),
        "preferred" => (
            "podAffinity",
            "preferredDuringSchedulingIgnoredDuringExecution",
            json!({"weight": 1, "podAffinityTerm": t}),
        ),
        _ => (
            "podAntiAffinity",
            "preferredDuringSchedulingIgnoredDuringExecution",
            json!({"weight": 1, "podAffinityTerm": t}),
        ),
    };
    json!({ side: { list: [t] } })
}

struct Workload {
    name: &'static str,
    zone: bool,
    /// `(namespace, pods)` created before the measured pods.
    init: Vec<(String, usize)>,
    measured_namespace: &'static str,
    affinity: Value,
    color: &'static str,
}

fn workloads() -> Vec<Workload> {
    let sched = Some(&["sched-1", "sched-0"][..]);
    let plain = |name, zone, init, color, kind, key| Workload {
        name,
        zone,
        init: vec![("sched-0".to_string(), init)],
        measured_namespace: "sched-1",
        affinity: template(color, kind, key, sched),
        color,
    };
    let selected = |name, zone, per_ns, color, kind, key| Workload {
        name,
        zone,
        init: (0..100).map(|i| (format!("init-ns-{i}"), per_ns)).collect(),
        measured_namespace: "measure-ns-0",
        affinity: template(color, kind, key, None),
        color,
    };
    vec![
        plain("SchedulingPodAffinity", true, 5000, "blue", "required", ZONE),
        plain("SchedulingPodAntiAffinity", false, 1000, "green", "anti", HOST),
        plain("SchedulingPreferredPodAffinity", false, 5000, "red", "preferred", HOST),
        plain("SchedulingPreferredPodAntiAffinity", false, 5000, "yellow", "preferred-anti", HOST),
        selected(
            "SchedulingRequiredPodAntiAffinityWithNSSelector",
            false,
            40,
            "green",
            "anti",
            HOST,
        ),
        selected(
            "SchedulingPreferredAntiAffinityWithNSSelector",
            false,
            40,
            "green",
            "preferred-anti",
            HOST,
        ),
        selected("SchedulingRequiredPodAffinityWithNSSelector", true, 50, "blue", "required", ZONE),
        selected("SchedulingPreferredAffinityWithNSSelector", false, 50, "red", "preferred", HOST),
    ]
}

fn pod(w: &Workload, name: &str, namespace: &str) -> PodBuilder {
    let b = PodBuilder::new(name).namespace(namespace).label("color", w.color);
    super::affinity(b, w.affinity.clone())
}

/// Time spent in the plugin: PreFilter, Filter (on `filtered` nodes),
/// PreScore with Score and NormalizeScore.
#[derive(Default)]
struct Spent {
    pre_filter: Duration,
    filter: Duration,
    filtered: usize,
    score: Duration,
}

impl std::ops::AddAssign for Spent {
    fn add_assign(&mut self, o: Self) {
        self.pre_filter += o.pre_filter;
        self.filter += o.filter;
        self.filtered += o.filtered;
        self.score += o.score;
    }
}

/// One cycle as the framework runs it; returns the node chosen and the time
/// spent in the plugin.
fn cycle(p: &InterPodAffinity, pod: &PodInfo, list: &NodeList, start: usize) -> (usize, Spent) {
    let nodes = list.list();
    let t = Instant::now();
    let mut state = CycleState::new();
    let (_, s) = p.pre_filter(&mut state, pod, list);
    let pre_filter = t.elapsed();
    let t = Instant::now();
    let mut feasible = Vec::new();
    let mut filtered = 0;
    for i in 0..nodes.len() {
        let at = (start + i) % nodes.len();
        filtered += 1;
        if s.is_skip() || p.filter(&state, pod, &nodes[at]).is_success() {
            feasible.push(at);
            if feasible.len() == TO_FIND {
                break;
            }
        }
    }
    let filter = t.elapsed();
    let fit: Vec<Arc<NodeInfo>> = feasible.iter().map(|&i| nodes[i].clone()).collect();
    let t = Instant::now();
    let mut scores = vec![0; fit.len()];
    if p.pre_score(&mut state, pod, &convoy_api::borrowed(&fit), list).is_success() {
        for (s, n) in scores.iter_mut().zip(&fit) {
            *s = p.score(&state, pod, n).unwrap();
        }
        assert!(p.normalize_score(&state, pod, &mut scores).is_success());
    }
    let spent = Spent { pre_filter, filter, filtered, score: t.elapsed() };
    // No node fits: none chosen (only the memory test makes such pods).
    let Some(best) = scores.iter().copied().max() else { return (0, spent) };
    let chosen = feasible
        .iter()
        .zip(&scores)
        .filter(|(_, s)| **s == best)
        .map(|(&i, _)| i)
        .min_by_key(|&i| nodes[i].pods.len())
        .unwrap();
    (chosen, spent)
}

fn run(w: &Workload) -> (Spent, usize, usize) {
    let objects = ClusterObjects::new();
    let mut names: Vec<String> = w.init.iter().map(|(n, _)| n.clone()).collect();
    names.push(w.measured_namespace.to_string());
    for name in &names {
        let ns: Namespace = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"team": "devops"}}}),
        )
        .unwrap();
        objects.apply(&ClusterObject::Namespace(Arc::new(ns)));
    }
    let p = InterPodAffinity::new(None, Arc::new(objects)).unwrap();
    let mut nodes: Vec<Arc<NodeInfo>> = (0..NODES)
        .map(|i| {
            let name = format!("node-{i}");
            let b = NodeBuilder::new(&name).label(HOST, &name);
            Arc::new(if w.zone { b.label(ZONE, "zone1") } else { b }.info())
        })
        .collect();
    let mut pods = 0;
    for (ns, count) in &w.init {
        for _ in 0..*count {
            let i = pods % NODES;
            let on = nodes[i].name().to_string();
            let pi = pod(w, &format!("init-{pods}"), ns).node(&on).info();
            Arc::make_mut(&mut nodes[i]).add_pod(pi);
            pods += 1;
        }
    }
    let mut spent = Spent::default();
    let mut start = 0;
    for k in 0..MEASURED {
        let list = NodeList::new(nodes.clone());
        let incoming = pod(w, &format!("measured-{k}"), w.measured_namespace).info();
        let (chosen, t) = cycle(&p, &incoming, &list, start);
        // The first cycle builds the memo: not counted.
        if k > 0 {
            spent += t;
        }
        start = (start + TO_FIND) % NODES;
        let on = nodes[chosen].name().to_string();
        let bound = pod(w, &format!("measured-{k}"), w.measured_namespace).node(&on).info();
        Arc::make_mut(&mut nodes[chosen]).add_pod(bound);
        pods += 1;
    }
    (spent, p.memo_heap_bytes(), pods)
}

#[test]
#[ignore = "timing; run in release with --nocapture"]
fn perf_per_cycle_at_5000_nodes() {
    println!(
        "{:48} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7}",
        "workload (µs per cycle)", "all", "PreFilt", "Filter", "nodes", "Score", "memo B", "B/node"
    );
    for w in workloads() {
        let (t, bytes, pods) = run(&w);
        let us = |d: Duration| d.as_secs_f64() * 1e6 / (MEASURED - 1) as f64;
        println!(
            "{:48} {:>8.1} {:>8.1} {:>8.1} {:>8} {:>8.1} {:>9} {:>7.0}  {pods} pods",
            w.name,
            us(t.pre_filter + t.filter + t.score),
            us(t.pre_filter),
            us(t.filter),
            t.filtered / (MEASURED - 1),
            us(t.score),
            bytes,
            bytes as f64 / NODES as f64
        );
    }
}

/// The memo's memory is linear in nodes and does not grow with pods: a
/// node's contribution has one item per topology key it counts at, however
/// many pods count there.
#[test]
fn memo_memory_follows_nodes_not_pods() {
    let bytes_with = |nodes: usize, pods_per_node: usize| {
        let objects = Arc::new(ClusterObjects::new());
        let p = InterPodAffinity::new(None, objects).unwrap();
        let w = &workloads()[0];
        let mut infos: Vec<NodeInfo> = (0..nodes)
            .map(|i| {
                let name = format!("node-{i}");
                NodeBuilder::new(&name)
                    .label(HOST, &name)
                    .label(ZONE, &format!("z{}", i % 3))
                    .info()
            })
            .collect();
        for (i, n) in infos.iter_mut().enumerate() {
            for j in 0..pods_per_node {
                let anti = super::affinity(
                    PodBuilder::new(&format!("p-{i}-{j}"))
                        .namespace("sched-0")
                        .label("color", "blue"),
                    template("blue", "anti", HOST, Some(&["sched-0"])),
                );
                n.add_pod(pod(w, &format!("a-{i}-{j}"), "sched-0").node(n.name()).info());
                n.add_pod(anti.node(n.name()).info());
            }
        }
        let list = NodeList::of(infos);
        // More templates than entries kept: every entry filled.
        for (k, color) in ["blue", "green", "red", "yellow", "white", "black"].iter().enumerate() {
            for (kind, key) in [("required", ZONE), ("anti", HOST), ("preferred", HOST)] {
                let a = template(color, kind, key, Some(&["sched-0", "sched-1"]));
                let b = PodBuilder::new(&format!("in-{k}-{kind}")).namespace("sched-1");
                let incoming = super::affinity(b.label("color", color), a).info();
                cycle(&p, &incoming, &list, 0);
            }
        }
        p.memo_heap_bytes()
    };
    let small = bytes_with(300, 1);
    let more_pods = bytes_with(300, 8);
    let more_nodes = bytes_with(1200, 1);
    assert!(more_pods < small * 11 / 10, "8x the pods: {small} -> {more_pods} bytes");
    assert!(more_nodes < small * 5, "4x the nodes: {small} -> {more_nodes} bytes");
    assert!(more_nodes / 1200 < 1000, "{} bytes per node", more_nodes / 1200);
}
