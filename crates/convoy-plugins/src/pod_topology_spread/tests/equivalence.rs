//! Randomized equivalence: the plugin, whose memos live across cycles,
//! against a fresh plugin each cycle and against upstream's algorithm
//! counted from scratch ([`reference`](super::reference)), over random
//! clusters (zone, hostname and rack labels, some missing or empty, taints),
//! random incoming pods (hard and soft constraints, minDomains, inclusion
//! policies, selectors, matchLabelKeys, namespaces, default constraints from
//! Services, ReplicaSets and StatefulSets), and random mutations between
//! cycles (pods added, removed, relabelled, terminating; nodes added,
//! removed, relabelled, retainted, reordered; placeholders; objects
//! changed). Every PreFilter, Filter (also after what-ifs), PreScore, Score
//! and NormalizeScore result must be identical. Deterministic: fixed seeds,
//! own PRNG.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{
    ClusterObject, CycleState, FilterPlugin, Handle, NodeInfo, NodeInfoLister, NodeList, PodInfo,
    PreFilterPlugin, PreScorePlugin, ScorePlugin, Status,
};
use convoy_config::{DefaultingType, PluginArgs, PodTopologySpreadArgs};

use super::super::{DO_NOT_SCHEDULE as DNS, LABEL_HOSTNAME as HOST, SCHEDULE_ANYWAY as SA};
use super::*;
use crate::helper::testing::handle_on;

const ZONE: &str = "topology.kubernetes.io/zone";
const RACK: &str = "rack";
const NAMESPACES: [&str; 3] = ["default", "ns1", "ns2"];

use convoy_api::testing::TestRng as Rng;

fn requirement(key: &str, op: &str, values: &[&str]) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.to_string(),
            operator: op.to_string(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }]),
        ..Default::default()
    })
}

fn random_selector(rng: &mut Rng) -> Option<LabelSelector> {
    match rng.below(10) {
        0 => None,
        1 => Some(LabelSelector::default()),
        2 => labels(&[("app", "a")]),
        3 => labels(&[("app", "b")]),
        4 => exists("app"),
        5 => requirement("tier", "In", &["x"]),
        6 => requirement("app", "NotIn", &["a"]),
        7 => requirement("tier", "DoesNotExist", &[]),
        8 if rng.chance(15) => requirement("app", "Bogus", &["a"]),
        _ => labels(&[("app", "a"), ("tier", "x")]),
    }
}

fn random_constraint(rng: &mut Rng) -> TopologySpreadConstraint {
    let key = match rng.below(20) {
        0 => "missing",
        n if n < 8 => ZONE,
        n if n < 14 => HOST,
        _ => RACK,
    };
    let when = if rng.chance(50) { DNS } else { SA };
    let policy = |rng: &mut Rng| match rng.below(3) {
        0 => None,
        1 => Some("Honor".to_string()),
        _ => Some("Ignore".to_string()),
    };
    let mut c = tsc(1 + rng.below(3) as i32, key, when, random_selector(rng));
    if when == DNS && rng.chance(30) {
        c.min_domains = Some(1 + rng.below(5) as i32);
    }
    c.node_affinity_policy = policy(rng);
    c.node_taints_policy = policy(rng);
    if rng.chance(20) {
        c.match_label_keys = Some(vec![rng.pick(&["tier", "app"]).to_string()]);
    }
    c
}

fn random_labels(rng: &mut Rng, b: PodBuilder) -> PodBuilder {
    let b = match rng.below(3) {
        0 => b.label("app", "a"),
        1 => b.label("app", "b"),
        _ => b,
    };
    match rng.below(3) {
        0 => b.label("tier", "x"),
        1 => b.label("tier", "y"),
        _ => b,
    }
}

/// An incoming pod's template: everything but the name.
fn random_template(rng: &mut Rng) -> PodBuilder {
    let ns = rng.pick(&NAMESPACES);
    let mut b = random_labels(rng, PodBuilder::new("t").namespace(ns));
    if rng.chance(60) {
        for _ in 0..1 + rng.below(3) {
            b = b.constraint(random_constraint(rng));
        }
    }
    if rng.chance(40) {
        let kind = rng.pick(&["ReplicaSet", "StatefulSet", "ReplicationController"]);
        b = b.owner(kind, rng.pick(&["rs1", "rs2", "gone"]));
    }
    if rng.chance(15) {
        b = b.node_selector(RACK, "r1");
    }
    if rng.chance(15) {
        b = b.node_affinity(ZONE, "In", &["z1", "z2"]);
    }
    if rng.chance(30) {
        b = b.with_spec(|s| {
            s.tolerations = Some(vec![Toleration {
                key: Some("t".to_string()),
                operator: Some("Exists".to_string()),
                ..Default::default()
            }])
        });
    }
    b
}

/// A template with one thing changed that the memo's key must capture.
fn variant(rng: &mut Rng, b: PodBuilder) -> PodBuilder {
    let constraint = |rng: &mut Rng, b: PodBuilder, f: fn(&mut TopologySpreadConstraint)| {
        let pick = rng.next_u64() as usize;
        b.with_spec(|s| {
            if let Some(cs) = s.topology_spread_constraints.as_mut().filter(|cs| !cs.is_empty()) {
                let n = cs.len();
                f(&mut cs[pick % n]);
            }
        })
    };
    fn flip(p: &mut Option<String>) {
        *p = match p.as_deref() {
            Some("Honor") => Some("Ignore".to_string()),
            _ => Some("Honor".to_string()),
        }
    }
    match rng.below(10) {
        5 => constraint(rng, b, |c| flip(&mut c.node_taints_policy)),
        6 => constraint(rng, b, |c| flip(&mut c.node_affinity_policy)),
        7 => b.with_spec(|s| {
            // Hard for soft and soft for hard.
            for c in s.topology_spread_constraints.iter_mut().flatten() {
                c.when_unsatisfiable =
                    if c.when_unsatisfiable == DNS { SA } else { DNS }.to_string();
                c.min_domains = None;
            }
        }),
        8 => constraint(rng, b, |c| c.topology_key = RACK.to_string()),
        9 => {
            // The pod of the ReplicaSet `web`, with the System default
            // constraints or with the same constraints of its own.
            let b = b.label("app", "a").with_spec(|s| s.topology_spread_constraints = None);
            if rng.chance(50) {
                b.owner("ReplicaSet", "web")
            } else {
                let c = |skew, key| tsc(skew, key, SA, labels(&[("app", "a")]));
                b.constraint(c(3, HOST)).constraint(c(5, ZONE))
            }
        }
        0 => b.namespace(rng.pick(&NAMESPACES)),
        1 => b.with_spec(|s| {
            s.tolerations = match s.tolerations {
                Some(_) => None,
                None => Some(vec![Toleration {
                    key: Some("t".to_string()),
                    operator: Some("Exists".to_string()),
                    ..Default::default()
                }]),
            }
        }),
        2 => b.with_spec(|s| {
            s.node_selector = match s.node_selector {
                Some(_) => None,
                None => Some([(RACK.to_string(), "r2".to_string())].into()),
            }
        }),
        3 => b.with_spec(|s| {
            s.affinity = match s.affinity {
                Some(_) => None,
                None => {
                    let b = PodBuilder::new("x").node_affinity(ZONE, "NotIn", &["z3"]);
                    b.build().spec.unwrap().affinity
                }
            }
        }),
        _ => {
            let tier = rng.pick(&["x", "y", "z"]);
            random_labels(rng, b).label("tier", tier)
        }
    }
}

/// A pod already on a node.
fn random_pod(rng: &mut Rng, name: &str, node: &str) -> Arc<PodInfo> {
    let ns = if rng.chance(70) { "default" } else { rng.pick(&NAMESPACES) };
    let mut pod = random_labels(rng, PodBuilder::new(name).namespace(ns).node(node)).build();
    if rng.chance(10) {
        pod = terminating(pod);
    }
    info(pod)
}

fn random_node(rng: &mut Rng, name: &str) -> Arc<k8s_openapi::api::core::v1::Node> {
    let mut b = NodeBuilder::new(name);
    match rng.below(20) {
        0 => {}
        1 => b = b.label(HOST, "shared-host"),
        _ => b = b.label(HOST, name),
    }
    match rng.below(20) {
        0 | 1 => {}
        2 => b = b.label(ZONE, ""),
        _ => b = b.label(ZONE, rng.pick(&["z1", "z2", "z3"])),
    }
    if rng.chance(70) {
        b = b.label(RACK, rng.pick(&["r1", "r2", "r3", "r4"]));
    }
    match rng.below(10) {
        0 | 1 => b = b.taint("t", "v", "NoSchedule"),
        2 => b = b.taint("t2", "", "NoExecute"),
        3 => b = b.taint("t3", "", "PreferNoSchedule"),
        _ => {}
    }
    Arc::new(b.build())
}

fn object(kind: &str, name: &str, ns: &str, selector: &[(&str, &str)]) -> ClusterObject {
    let selector: std::collections::BTreeMap<&str, &str> = selector.iter().copied().collect();
    let meta = serde_json::json!({"name": name, "namespace": ns});
    let v = |spec| serde_json::json!({"metadata": meta, "spec": spec});
    match kind {
        "Service" => ClusterObject::Service(Arc::new(
            serde_json::from_value(v(serde_json::json!({"selector": selector}))).unwrap(),
        )),
        "ReplicationController" => ClusterObject::ReplicationController(Arc::new(
            serde_json::from_value(v(serde_json::json!({"selector": selector}))).unwrap(),
        )),
        "ReplicaSet" => ClusterObject::ReplicaSet(Arc::new(
            serde_json::from_value(v(serde_json::json!({
                "selector": {"matchLabels": selector}, "template": {}
            })))
            .unwrap(),
        )),
        _ => ClusterObject::StatefulSet(Arc::new(
            serde_json::from_value(v(serde_json::json!({
                "selector": {"matchLabels": selector}, "template": {}, "serviceName": ""
            })))
            .unwrap(),
        )),
    }
}

fn random_object(rng: &mut Rng) -> ClusterObject {
    let kind = rng.pick(&["Service", "ReplicaSet", "StatefulSet", "ReplicationController"]);
    let name = if kind == "Service" { rng.pick(&["s1", "s2"]) } else { rng.pick(&["rs1", "rs2"]) };
    let selector: &[(&str, &str)] = match rng.below(4) {
        0 => &[("app", "a")],
        1 => &[("tier", "x")],
        2 => &[("app", "b"), ("tier", "y")],
        _ => &[],
    };
    object(kind, name, rng.pick(&NAMESPACES), selector)
}

/// The cluster as the cache would hold it: nodes shared with the lists of
/// earlier cycles, copied on write (a write takes a new generation).
struct World {
    rng: Rng,
    nodes: Vec<Arc<NodeInfo>>,
    /// A placeholder (pods on a node not seen yet), in the list or not.
    placeholder: Option<Arc<NodeInfo>>,
    serial: usize,
    /// The object store `handle` reads, which the test changes.
    objects: Arc<convoy_objects::ClusterObjects>,
    handle: Handle,
}

impl World {
    fn new(seed: u64, n: usize) -> Self {
        let objects = Arc::new(convoy_objects::ClusterObjects::new());
        let mut w = Self {
            rng: Rng(seed),
            nodes: Vec::new(),
            placeholder: None,
            serial: 0,
            objects: objects.clone(),
            handle: handle_on(objects),
        };
        for _ in 0..n {
            w.add_node();
        }
        for _ in 0..3 * n {
            w.add_pod();
        }
        for _ in 0..4 {
            let o = random_object(&mut w.rng);
            w.objects.apply(&o);
        }
        w.objects.apply(&object("ReplicaSet", "web", "default", &[("app", "a")]));
        w
    }

    fn name(&mut self, prefix: &str) -> String {
        self.serial += 1;
        format!("{prefix}-{}", self.serial)
    }

    fn add_node(&mut self) {
        let name = self.name("node");
        let node = NodeInfo::new(random_node(&mut self.rng, &name));
        let at = self.rng.below(self.nodes.len() + 1);
        self.nodes.insert(at, Arc::new(node));
    }

    fn add_pod(&mut self) {
        if self.nodes.is_empty() {
            return;
        }
        let i = self.rng.below(self.nodes.len());
        let name = self.name("pod");
        let pod = random_pod(&mut self.rng, &name, self.nodes[i].name());
        Arc::make_mut(&mut self.nodes[i]).add_pod(pod);
    }

    /// Places a pod made from `template` on a random node, as a binding would.
    fn bind(&mut self, template: &PodBuilder) {
        if self.nodes.is_empty() {
            return;
        }
        let i = self.rng.below(self.nodes.len());
        let name = self.name("bound");
        let node = self.nodes[i].name().to_string();
        let mut pod = template.clone().node(&node).build();
        pod.metadata.name = Some(name.clone());
        pod.metadata.uid = Some(name);
        Arc::make_mut(&mut self.nodes[i]).add_pod(info(pod));
    }

    fn some_pod(&mut self) -> Option<(usize, Arc<PodInfo>)> {
        let with_pods: Vec<usize> =
            (0..self.nodes.len()).filter(|&i| !self.nodes[i].pods.is_empty()).collect();
        if with_pods.is_empty() {
            return None;
        }
        let i = self.rng.pick(&with_pods);
        let p = self.nodes[i].pods[self.rng.below(self.nodes[i].pods.len())].clone();
        Some((i, p))
    }

    fn mutate(&mut self, template: &PodBuilder) {
        match self.rng.below(100) {
            0..40 => self.bind(template),
            40..50 => self.add_pod(),
            50..60 => {
                if let Some((i, p)) = self.some_pod() {
                    Arc::make_mut(&mut self.nodes[i]).remove_pod(&p);
                }
            }
            60..68 => {
                // Relabelled (or marked terminating): the same pod, updated.
                if let Some((i, p)) = self.some_pod() {
                    let node = self.nodes[i].name().to_string();
                    let name = p.pod.metadata.name.clone().unwrap();
                    let updated = random_pod(&mut self.rng, &name, &node);
                    let n = Arc::make_mut(&mut self.nodes[i]);
                    n.remove_pod(&p);
                    n.add_pod(updated);
                }
            }
            68..78 => {
                if !self.nodes.is_empty() {
                    let i = self.rng.below(self.nodes.len());
                    let name = self.nodes[i].name().to_string();
                    let node = random_node(&mut self.rng, &name);
                    Arc::make_mut(&mut self.nodes[i]).set_node(node);
                }
            }
            78..84 => self.add_node(),
            84..90 => {
                if self.nodes.len() > 1 {
                    let i = self.rng.below(self.nodes.len());
                    self.nodes.remove(i);
                }
            }
            90..93 => {
                // Reordered (a snapshot rebuilt in another order).
                for i in (1..self.nodes.len()).rev() {
                    let j = self.rng.below(i + 1);
                    self.nodes.swap(i, j);
                }
            }
            93..96 => {
                self.placeholder = match self.placeholder {
                    Some(_) => None,
                    None => {
                        let name = self.name("ghost");
                        let mut p = NodeInfo::placeholder(&name);
                        p.add_pod(random_pod(&mut self.rng, "ghost-pod", &name));
                        Some(Arc::new(p))
                    }
                };
            }
            _ => {
                let o = random_object(&mut self.rng);
                if self.rng.chance(30) {
                    self.objects.delete(&o);
                } else {
                    self.objects.apply(&o);
                }
            }
        }
    }

    fn list(&mut self) -> NodeList {
        let mut nodes = self.nodes.clone();
        if let Some(p) = &self.placeholder {
            let at = self.rng.below(nodes.len() + 1);
            nodes.insert(at, p.clone());
        }
        NodeList::new(nodes)
    }
}

/// A Status's code and message (statuses compare by what they say).
fn said(s: &Status) -> (convoy_api::Code, String) {
    (s.code(), s.message())
}

fn args(list: bool) -> Option<PluginArgs> {
    list.then(|| {
        let c = |key: &str, when: &str, skew: i32, min_domains: Option<i32>| {
            let mut c = tsc(skew, key, when, None);
            c.min_domains = min_domains;
            serde_json::from_value(serde_json::to_value(c).unwrap()).unwrap()
        };
        PluginArgs::PodTopologySpread(PodTopologySpreadArgs {
            defaulting_type: DefaultingType::List,
            default_constraints: vec![
                c(ZONE, DNS, 1, Some(2)),
                c(HOST, SA, 2, None),
                c(RACK, SA, 1, None),
            ],
        })
    })
}

/// One plugin's results for one cycle.
#[derive(Debug, PartialEq)]
struct Results {
    pre_filter: (convoy_api::Code, String),
    filter: Vec<(convoy_api::Code, String)>,
    /// Filter after each what-if.
    what_ifs: Vec<Vec<(convoy_api::Code, String)>>,
    pre_score: (convoy_api::Code, String),
    scores: Option<(Vec<i64>, Vec<i64>)>,
}

/// What-ifs: pods added to or removed from one node.
type WhatIfs = Vec<(Arc<PodInfo>, Arc<NodeInfo>, i64)>;

fn run_plugin(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    list: &NodeList,
    feasible: &[Arc<NodeInfo>],
    what_ifs: &WhatIfs,
) -> (Results, CycleState, CycleState) {
    let nodes = list.list();
    let mut pf_state = CycleState::new();
    let (_, pf) = pl.pre_filter(&mut pf_state, pod, list);
    let filter_all =
        |state: &CycleState| nodes.iter().map(|n| said(&pl.filter(state, pod, n))).collect();
    let (filter, what_ifs) = if pf.is_success() {
        let filter = filter_all(&pf_state);
        let mut state = pf_state.clone();
        let ext = pl.pre_filter_extensions().unwrap();
        let mut after = Vec::new();
        for (p, node, delta) in what_ifs {
            let s = if *delta > 0 {
                ext.add_pod(&mut state, pod, p, node)
            } else {
                ext.remove_pod(&mut state, pod, p, node)
            };
            assert!(s.is_success(), "{s}");
            after.push(filter_all(&state));
        }
        (filter, after)
    } else {
        (Vec::new(), Vec::new())
    };
    let mut ps_state = CycleState::new();
    let ps = pl.pre_score(&mut ps_state, pod, &convoy_api::borrowed(feasible), list);
    let scores = ps.is_success().then(|| {
        let raw: Vec<i64> = feasible.iter().map(|n| pl.score(&ps_state, pod, n).unwrap()).collect();
        let mut normalized = raw.clone();
        assert!(pl.normalize_score(&ps_state, pod, &mut normalized).is_success());
        (raw, normalized)
    });
    let results = Results { pre_filter: said(&pf), filter, what_ifs, pre_score: said(&ps), scores };
    (results, pf_state, ps_state)
}

fn run_reference(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    list: &NodeList,
    feasible: &[Arc<NodeInfo>],
    what_ifs: &WhatIfs,
) -> Results {
    let nodes = list.list();
    let (pre_filter, filter, after) = match reference::pre_filter(pl, pod, list) {
        Err(e) => (said(&Status::error(e)), Vec::new(), Vec::new()),
        Ok(None) => (said(&Status::skip()), Vec::new(), Vec::new()),
        Ok(Some(mut s)) => {
            let filter_all = |s: &reference::PreFilter| -> Vec<_> {
                nodes.iter().map(|n| said(&s.filter(pod, n))).collect()
            };
            let filter = filter_all(&s);
            let mut after = Vec::new();
            for (p, node, delta) in what_ifs {
                s.update(pod, p, node, *delta);
                after.push(filter_all(&s));
            }
            (said(&Status::success()), filter, after)
        }
    };
    let (pre_score, scores) = match reference::scores(pl, pod, feasible, list) {
        Err(e) => (said(&Status::error(e)), None),
        Ok(None) => (said(&Status::skip()), None),
        Ok(Some(s)) => (said(&Status::success()), Some(s)),
    };
    Results { pre_filter, filter, what_ifs: after, pre_score, scores }
}

/// A cycle's long-lived states, checked again later (they share counts
/// with the memos, which must not change them).
struct Earlier {
    pod: Arc<PodInfo>,
    list: NodeList,
    feasible: Vec<Arc<NodeInfo>>,
    pf_state: CycleState,
    ps_state: CycleState,
    results: Results,
}

fn recheck(pl: &PodTopologySpread, e: &Earlier) {
    if e.results.pre_filter.0 == convoy_api::Code::Success {
        let filter: Vec<_> =
            e.list.list().iter().map(|n| said(&pl.filter(&e.pf_state, &e.pod, n))).collect();
        assert_eq!(filter, e.results.filter, "an earlier cycle's Filter changed");
    }
    if let Some((raw, _)) = &e.results.scores {
        let now: Vec<i64> =
            e.feasible.iter().map(|n| pl.score(&e.ps_state, &e.pod, n).unwrap()).collect();
        assert_eq!(&now, raw, "an earlier cycle's Score changed");
    }
}

fn run_seed(seed: u64, nodes: usize, cycles: usize) {
    let mut w = World::new(seed, nodes);
    let templates: Vec<PodBuilder> = (0..6).map(|_| random_template(&mut w.rng)).collect();
    let plugins: Vec<(Option<PluginArgs>, PodTopologySpread)> = [false, true]
        .into_iter()
        .map(|list| {
            let a = args(list);
            let pl = PodTopologySpread::new(a.as_ref(), &w.handle).unwrap();
            (a, pl)
        })
        .collect();
    let mut earlier: Vec<Option<Earlier>> = vec![None, None];
    let mut template = templates[0].clone();
    for cycle in 0..cycles {
        for _ in 0..w.rng.below(4) {
            w.mutate(&template);
        }
        template = match w.rng.below(100) {
            0..70 => templates[w.rng.below(templates.len())].clone(),
            70..90 => {
                let t = templates[w.rng.below(templates.len())].clone();
                variant(&mut w.rng, t)
            }
            _ => random_template(&mut w.rng),
        };
        let name = w.name("incoming");
        let mut pod = template.clone().build();
        pod.metadata.name = Some(name.clone());
        pod.metadata.uid = Some(name);
        let pod = info(pod);
        let list = w.list();
        // Feasible nodes: a random subset, in random order (Score's order).
        let mut feasible: Vec<Arc<NodeInfo>> =
            list.list().iter().filter(|n| n.node().is_some()).cloned().collect();
        for i in (1..feasible.len()).rev() {
            let j = w.rng.below(i + 1);
            feasible.swap(i, j);
        }
        feasible.truncate(w.rng.below(feasible.len() + 1));
        if w.rng.chance(10) {
            // A node the snapshot does not have (read from its labels).
            let name = w.name("unlisted");
            let mut node = NodeInfo::new(random_node(&mut w.rng, &name));
            node.add_pod(random_pod(&mut w.rng, "unlisted-pod", &name));
            feasible.insert(w.rng.below(feasible.len() + 1), Arc::new(node));
        }
        // What-ifs on one node (as preemption and nominated pods make
        // them), now and then one the snapshot does not have.
        let mut what_ifs = WhatIfs::new();
        let on = if list.list().is_empty() || w.rng.chance(10) {
            // With domains no node of the snapshot has.
            let name = w.name("outside");
            let node =
                NodeBuilder::new(&name).label(HOST, &name).label(ZONE, "z9").label(RACK, "r9");
            Arc::new(node.info())
        } else {
            list.list()[w.rng.below(list.list().len())].clone()
        };
        for k in 0..w.rng.below(4) {
            let p = if w.rng.chance(50) && !on.pods.is_empty() {
                what_ifs.push((on.pods[w.rng.below(on.pods.len())].clone(), on.clone(), -1));
                continue;
            } else if w.rng.chance(50) {
                random_pod(&mut w.rng, &format!("what-if-{k}"), on.name())
            } else {
                // A pod like the incoming one (its selectors likely match).
                let mut p = template.clone().node(on.name()).build();
                p.metadata.name = Some(format!("what-if-{k}"));
                p.metadata.uid = p.metadata.name.clone();
                info(p)
            };
            what_ifs.push((p, on.clone(), 1));
        }
        for (j, (a, pl)) in plugins.iter().enumerate() {
            let (kept, pf_state, ps_state) = run_plugin(pl, &pod, &list, &feasible, &what_ifs);
            let fresh = PodTopologySpread::new(a.as_ref(), &w.handle).unwrap();
            let (fresh, _, _) = run_plugin(&fresh, &pod, &list, &feasible, &what_ifs);
            let oracle = run_reference(pl, &pod, &list, &feasible, &what_ifs);
            let at = format!("seed {seed}, cycle {cycle}, plugin {j}, pod {:?}", pod.pod.spec);
            assert_eq!(kept, fresh, "memo vs fresh plugin: {at}");
            assert_eq!(kept, oracle, "memo vs upstream's algorithm: {at}");
            if let Some(e) = &earlier[j] {
                recheck(pl, e);
            }
            if w.rng.chance(50) {
                earlier[j] = Some(Earlier {
                    pod: pod.clone(),
                    list: list.clone(),
                    feasible: feasible.clone(),
                    pf_state,
                    ps_state,
                    results: kept,
                });
            }
        }
    }
    for (_, pl) in &plugins {
        assert!(pl.inner.memos.lock().unwrap().len() <= super::super::memo::MEMO_CAPACITY);
    }
}

#[test]
fn memoized_results_equal_upstreams_from_scratch() {
    for seed in 0..12 {
        run_seed(seed, 5 + (seed as usize % 4) * 8, 250);
    }
}

/// Long runs with node churn: dead domains pile up and memos are rebuilt.
#[test]
fn memoized_results_equal_under_node_churn() {
    for seed in 100..103 {
        run_seed(seed, 12, 1200);
    }
}
