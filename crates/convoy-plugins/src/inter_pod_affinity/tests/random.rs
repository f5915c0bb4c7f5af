//! Randomized equivalence of the memoized plugin: random clusters (nodes
//! with zone, region and hostname labels, some missing, some hostnames
//! shared; pods with random terms in several namespaces), random sequences
//! of cycles and mutations (pods added and removed, nodes relabelled, added,
//! removed and moved in the list, namespace labels changed). Every cycle,
//! one plugin instance kept across cycles (its memo warm), a fresh instance
//! and a direct transcription of upstream ([`upstream`](super::upstream))
//! must give equal PreFilter, Filter (on every node, also after the
//! PreFilter extensions), PreScore, Score and NormalizeScore results.
//! Deterministic: fixed seeds, own PRNG.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use serde_json::{Value, json};

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{
    ClusterObject, Code, CycleState, FilterPlugin, NodeInfo, NodeInfoLister, NodeList, PodInfo,
    PreFilterExtensions, PreFilterPlugin, PreScorePlugin, ScorePlugin, Status,
};
use convoy_config::{InterPodAffinityArgs, PluginArgs};
use convoy_objects::ClusterObjects;

use super::InterPodAffinity;
use super::upstream::{ref_filter_result, ref_scores};

use convoy_api::testing::TestRng as Rng;

const HOST: &str = "kubernetes.io/hostname";
const KEYS: [&str; 4] = ["zone", HOST, HOST, "region"];
const NAMESPACES: [&str; 4] = ["ns-0", "ns-1", "ns-2", "ns-unknown"];

fn random_selector(rng: &mut Rng) -> Value {
    let app = rng.pick(&["a", "b", "c"]);
    match rng.below(10) {
        0..=3 => json!({"matchLabels": {"app": app}}),
        4 => json!({"matchExpressions": [{"key": "app", "operator": "In", "values": [app, "c"]}]}),
        5 => json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}),
        6 => json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
        7 => json!({"matchLabels": {"app": app, "tier": "y"}}),
        8 => json!({}),
        _ => Value::Null,
    }
}

fn random_term(rng: &mut Rng) -> Value {
    let mut t = json!({"topologyKey": rng.pick(&KEYS)});
    let selector = random_selector(rng);
    if !selector.is_null() {
        t["labelSelector"] = selector;
    }
    if rng.chance(1) {
        // Unparsable: `In` without values.
        t["labelSelector"] = json!({"matchExpressions": [{"key": "app", "operator": "In"}]});
    }
    match rng.below(6) {
        0 => t["namespaces"] = json!(["ns-0", "ns-1"]),
        1 => t["namespaceSelector"] = json!({"matchLabels": {"team": "a"}}),
        2 => t["namespaceSelector"] = json!({}),
        _ => {}
    }
    t
}

fn random_terms(rng: &mut Rng, weighted: bool) -> Vec<Value> {
    let n = match rng.below(10) {
        0..=5 => 0,
        6..=8 => 1,
        _ => 2,
    };
    (0..n)
        .map(|_| {
            let t = random_term(rng);
            if weighted { json!({"weight": 1 + rng.below(100), "podAffinityTerm": t}) } else { t }
        })
        .collect()
}

fn random_affinity(rng: &mut Rng) -> Option<Value> {
    if rng.chance(40) {
        return None;
    }
    Some(json!({
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": random_terms(rng, false),
            "preferredDuringSchedulingIgnoredDuringExecution": random_terms(rng, true),
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": random_terms(rng, false),
            "preferredDuringSchedulingIgnoredDuringExecution": random_terms(rng, true),
        },
    }))
}

fn random_pod(rng: &mut Rng, name: &str) -> PodBuilder {
    let mut b = PodBuilder::new(name).namespace(rng.pick(&NAMESPACES));
    if rng.chance(80) {
        b = b.label("app", rng.pick(&["a", "b", "c"]));
    }
    if rng.chance(50) {
        b = b.label("tier", rng.pick(&["x", "y"]));
    }
    match random_affinity(rng) {
        Some(a) => super::affinity(b, a),
        None => b,
    }
}

fn random_node(rng: &mut Rng, name: &str) -> NodeInfo {
    if rng.chance(3) {
        return NodeInfo::placeholder(name);
    }
    let mut b = NodeBuilder::new(name);
    if rng.chance(95) {
        if rng.chance(90) {
            let host = if rng.chance(10) { "shared-host" } else { name };
            b = b.label(HOST, host);
        }
        if rng.chance(85) {
            b = b.label("zone", rng.pick(&["z0", "z1", "z2"]));
        }
        if rng.chance(50) {
            b = b.label("region", rng.pick(&["r0", "r1"]));
        }
    }
    b.info()
}

fn set_namespace(objects: &ClusterObjects, name: &str, team: &str) {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"team": team}}}))
            .unwrap();
    objects.apply(&ClusterObject::Namespace(Arc::new(ns)));
}

/// PreFilter then Filter on every node (Skip: every node passes).
fn filter_all(
    p: &InterPodAffinity,
    pod: &PodInfo,
    list: &NodeList,
) -> (Status, Option<CycleState>, Vec<Status>) {
    let mut state = CycleState::new();
    let (_, s) = p.pre_filter(&mut state, pod, list);
    let per_node = match s.code() {
        Code::Success => list.list().iter().map(|n| p.filter(&state, pod, n)).collect(),
        _ => Vec::new(),
    };
    let ok = s.is_success();
    (s, ok.then_some(state), per_node)
}

/// A copy of a node with a node object of its own (equal, at another
/// address), as if the node had been updated without change: the plugin
/// finds no row for it and reads its labels.
fn copy(node: &NodeInfo) -> NodeInfo {
    let mut c = node.clone();
    if let Some(n) = node.node() {
        c.set_node(Arc::new((**n).clone()));
    }
    c
}

/// PreScore, then Score on every node (on `copies` when given) and
/// NormalizeScore.
fn scores(
    p: &InterPodAffinity,
    pod: &PodInfo,
    list: &NodeList,
    copies: Option<&[NodeInfo]>,
) -> Result<Vec<i64>, Status> {
    let mut state = CycleState::new();
    let s = p.pre_score(&mut state, pod, &convoy_api::borrowed(list.list()), list);
    if !s.is_success() {
        return Err(s);
    }
    let mut out: Vec<i64> = match copies {
        Some(c) => c.iter().map(|n| p.score(&state, pod, n).unwrap()).collect(),
        None => list.list().iter().map(|n| p.score(&state, pod, n).unwrap()).collect(),
    };
    assert!(p.normalize_score(&state, pod, &mut out).is_success());
    Ok(out)
}

/// Filter statuses after PreFilter, every node passing when PreFilter
/// skipped (Filter does not run).
fn as_filter_result(
    pre: &Status,
    per_node: Vec<Status>,
    nodes: usize,
) -> Result<Vec<Status>, Status> {
    match pre.code() {
        Code::Success => Ok(per_node),
        Code::Skip => Ok(vec![Status::success(); nodes]),
        _ => Err(pre.clone()),
    }
}

/// The cluster: nodes kept as `Arc`s across cycles, so that unchanged nodes
/// keep their generation, as in the scheduler's snapshot.
struct Cluster {
    nodes: Vec<Arc<NodeInfo>>,
    next: usize,
}

impl Cluster {
    fn name(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}-{}", self.next)
    }

    fn add_pod(&mut self, i: usize, pod: PodBuilder) {
        let on = self.nodes[i].name().to_string();
        Arc::make_mut(&mut self.nodes[i]).add_pod(pod.node(&on).info());
    }

    fn mutate(&mut self, rng: &mut Rng, objects: &ClusterObjects) {
        let n = self.nodes.len();
        match rng.below(100) {
            0..=39 if n > 0 => {
                let name = self.name("p");
                let pod = random_pod(rng, &name);
                self.add_pod(rng.below(n), pod);
            }
            40..=59 if n > 0 => {
                let i = rng.below(n);
                if !self.nodes[i].pods.is_empty() {
                    let p = self.nodes[i].pods[rng.below(self.nodes[i].pods.len())].clone();
                    Arc::make_mut(&mut self.nodes[i]).remove_pod(&p).unwrap();
                }
            }
            60..=69 if n > 0 => {
                // Relabel: the same node with new labels, its pods kept.
                let i = rng.below(n);
                let name = self.nodes[i].name().to_string();
                let fresh = random_node(rng, &name);
                if let Some(node) = fresh.node() {
                    Arc::make_mut(&mut self.nodes[i]).set_node(node.clone());
                }
            }
            70..=77 => {
                let name = self.name("n");
                let node = Arc::new(random_node(rng, &name));
                self.nodes.insert(rng.below(n + 1), node);
            }
            78..=84 if n > 1 => {
                self.nodes.remove(rng.below(n));
            }
            85..=89 if n > 1 => {
                let (a, b) = (rng.below(n), rng.below(n));
                self.nodes.swap(a, b);
            }
            90..=94 => {
                set_namespace(objects, rng.pick(&NAMESPACES[..3]), rng.pick(&["a", "b"]));
            }
            _ => {}
        }
    }
}

/// How much a run exercised: cycles, cycles where Filter rejected some nodes
/// but not all, cycles with scores not all 0, PreFilter extensions checked.
#[derive(Debug, Default)]
struct Coverage {
    cycles: usize,
    mixed_filter: usize,
    scored: usize,
    extensions: usize,
}

fn run_seed(seed: u64, cycles: usize, cov: &mut Coverage) {
    let mut rng = Rng(seed);
    let objects = Arc::new(ClusterObjects::new());
    for ns in &NAMESPACES[..3] {
        set_namespace(&objects, ns, rng.pick(&["a", "b"]));
    }
    let args = InterPodAffinityArgs {
        hard_pod_affinity_weight: rng.pick(&[0, 1, 5]),
        ignore_preferred_terms_of_existing_pods: rng.chance(25),
    };
    let plugin_args = PluginArgs::InterPodAffinity(args.clone());
    let new_plugin = || InterPodAffinity::new(Some(&plugin_args), objects.clone()).unwrap();
    let memoized = new_plugin();
    let mut cluster = Cluster { nodes: Vec::new(), next: 0 };
    for _ in 0..8 + rng.below(16) {
        let name = cluster.name("n");
        cluster.nodes.push(Arc::new(random_node(&mut rng, &name)));
    }
    for _ in 0..cluster.nodes.len() * 2 {
        let name = cluster.name("p");
        let pod = random_pod(&mut rng, &name);
        let i = rng.below(cluster.nodes.len());
        cluster.add_pod(i, pod);
    }
    // More templates than the memo keeps entries, so that entries are evicted.
    let templates: Vec<PodBuilder> =
        (0..6).map(|i| random_pod(&mut rng, &format!("t{i}"))).collect();
    for cycle in 0..cycles {
        let ctx = format!("seed {seed} cycle {cycle}");
        let list = NodeList::new(cluster.nodes.clone());
        let name = cluster.name("in");
        let pod = if rng.chance(80) {
            let t = templates[rng.below(templates.len())].clone();
            let mut pod = t.build();
            pod.metadata.name = Some(name.clone());
            pod.metadata.uid = Some(name.clone());
            Arc::new(PodInfo::new(Arc::new(pod)).unwrap())
        } else {
            random_pod(&mut rng, &name).info()
        };
        let fresh = new_plugin();
        let n = list.list().len();

        // PreFilter and Filter.
        let (pre, state, per_node) = filter_all(&memoized, &pod, &list);
        let (fresh_pre, _, fresh_per_node) = filter_all(&fresh, &pod, &list);
        assert_eq!(pre, fresh_pre, "{ctx}: PreFilter, memoized vs fresh");
        assert_eq!(per_node, fresh_per_node, "{ctx}: Filter, memoized vs fresh");
        let rejected = per_node.iter().filter(|s| !s.is_success()).count();
        cov.cycles += 1;
        cov.mixed_filter += usize::from(rejected > 0 && rejected < n);
        // Nodes the memo has no row for (copies with node objects of their
        // own) are looked up by label, with the same results.
        let copies: Vec<NodeInfo> = list.list().iter().map(|n| copy(n)).collect();
        if let Some(state) = &state {
            let on_copies: Vec<Status> =
                copies.iter().map(|n| memoized.filter(state, &pod, n)).collect();
            assert_eq!(per_node, on_copies, "{ctx}: Filter on copies of the nodes");
        }
        let got = as_filter_result(&pre, per_node, n);
        assert_eq!(got, ref_filter_result(&objects, &pod, &list), "{ctx}: Filter vs upstream");

        // PreFilter extensions: the counts with a pod removed, then a pod
        // added, as PreFilter on the cluster changed so.
        if let Some(state) = state.filter(|_| n > 0 && rng.chance(40)) {
            cov.extensions += 1;
            let i = rng.below(n);
            let node = list.list()[i].clone();
            let mut state = state.clone();
            let mut changed: Vec<Arc<NodeInfo>> = list.list().to_vec();
            if !node.pods.is_empty() {
                let victim = node.pods[rng.below(node.pods.len())].clone();
                assert!(memoized.remove_pod(&mut state, &pod, &victim, &node).is_success());
                Arc::make_mut(&mut changed[i]).remove_pod(&victim).unwrap();
            }
            let added = random_pod(&mut rng, &cluster.name("added")).node(node.name()).info();
            assert!(memoized.add_pod(&mut state, &pod, &added, &node).is_success());
            Arc::make_mut(&mut changed[i]).add_pod(added);
            let changed = NodeList::new(changed);
            let after: Vec<Status> =
                list.list().iter().map(|n| memoized.filter(&state, &pod, n)).collect();
            let want = ref_filter_result(&objects, &pod, &changed);
            assert_eq!(Ok(after), want, "{ctx}: Filter after the PreFilter extensions");
        }

        // PreScore, Score, NormalizeScore.
        let got = scores(&memoized, &pod, &list, None);
        cov.scored += usize::from(got.as_ref().is_ok_and(|v| v.iter().any(|&s| s != 0)));
        assert_eq!(got, scores(&fresh, &pod, &list, None), "{ctx}: scores, memoized vs fresh");
        let on_copies = scores(&memoized, &pod, &list, Some(&copies));
        assert_eq!(got, on_copies, "{ctx}: scores on copies of the nodes");
        assert_eq!(got, ref_scores(&objects, &args, &pod, &list), "{ctx}: scores vs upstream");

        // The pod is bound sometimes, as the scheduler would; then the
        // cluster changes.
        if n > 0 && pod.affinity.as_ref().is_none_or(|a| a.parse_error.is_none()) && rng.chance(50)
        {
            let i = rng.below(n);
            let on = cluster.nodes[i].name().to_string();
            let mut p = (*pod.pod).clone();
            p.spec.as_mut().unwrap().node_name = Some(on);
            Arc::make_mut(&mut cluster.nodes[i])
                .add_pod(Arc::new(PodInfo::new(Arc::new(p)).unwrap()));
        }
        for _ in 0..rng.below(3) {
            cluster.mutate(&mut rng, &objects);
        }
    }
}

#[test]
fn memoized_results_equal_fresh_and_upstream() {
    let mut cov = Coverage::default();
    for seed in 1..=24 {
        run_seed(seed, 150, &mut cov);
    }
    // The random clusters exercise what they are meant to.
    assert!(cov.mixed_filter * 2 > cov.cycles, "{cov:?}");
    assert!(cov.scored * 2 > cov.cycles, "{cov:?}");
    assert!(cov.extensions * 5 > cov.cycles, "{cov:?}");
}
