//! Tests ported from upstream's `interpodaffinity/{filtering,scoring,plugin}_test.go`
//! (kube-scheduler v1.37.2, `InterPodAffinityHostnameFastPath` off). Pods
//! of upstream's tests in namespace "" are in `default` here.

mod extensions;
mod filtering;
mod hints;
mod multiple_nodes;
mod perf;
mod random;
mod scoring;
mod upstream;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{
    ClusterObject, CycleState, FilterPlugin, NodeInfo, NodeInfoLister, NodeList, PodInfo,
    PreFilterPlugin, Status,
};
use convoy_config::{InterPodAffinityArgs, PluginArgs};
use convoy_objects::ClusterObjects;

use super::counts::TopologyCounts;
use super::{
    ERR_REASON_AFFINITY_RULES_NOT_MATCH as AFFINITY,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH as ANTI,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH as EXISTING, InterPodAffinity,
};

const SECURITYSCAN: (&str, &str) = ("service", "securityscan");
const S1: (&str, &str) = ("security", "S1");
const HOSTNAME: &str = "kubernetes.io/hostname";

/// A label selector requirement.
fn expr(key: &str, op: &str, values: &[&str]) -> Value {
    if values.is_empty() {
        json!({"key": key, "operator": op})
    } else {
        json!({"key": key, "operator": op, "values": values})
    }
}

/// A term selecting pods by `matchExpressions`, on a topology key.
fn term(topology_key: &str, exprs: Vec<Value>) -> Value {
    json!({"labelSelector": {"matchExpressions": exprs}, "topologyKey": topology_key})
}

/// Upstream `st.PodAffinityIn`'s term.
fn term_in(key: &str, topology_key: &str, values: &[&str]) -> Value {
    term(topology_key, vec![expr(key, "In", values)])
}

/// Upstream `st.PodAffinityExists`'s term.
fn term_exists(key: &str, topology_key: &str) -> Value {
    term(topology_key, vec![expr(key, "Exists", &[])])
}

/// A term with more fields (`namespaces`, `namespaceSelector`, ...).
fn with(mut term: Value, field: &str, value: Value) -> Value {
    term[field] = value;
    term
}

/// A weighted term.
fn weighted(weight: i32, term: Value) -> Value {
    json!({"weight": weight, "podAffinityTerm": term})
}

/// `spec.affinity` with required affinity and anti-affinity terms (either
/// list may be empty, as upstream's `createPodWithAffinityTerms`).
fn required(affinity: Vec<Value>, anti_affinity: Vec<Value>) -> Value {
    json!({
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti_affinity},
    })
}

/// `spec.affinity` with preferred affinity and anti-affinity terms.
fn preferred(affinity: Vec<Value>, anti_affinity: Vec<Value>) -> Value {
    json!({
        "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": affinity},
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": anti_affinity},
    })
}

/// A pod with labels.
fn pod(name: &str, labels: &[(&str, &str)]) -> PodBuilder {
    labels.iter().fold(PodBuilder::new(name), |b, (k, v)| b.label(k, v))
}

/// Sets `spec.affinity`.
fn affinity(b: PodBuilder, affinity: Value) -> PodBuilder {
    let a = serde_json::from_value(affinity).expect("affinity JSON");
    b.with_spec(move |s| s.affinity = Some(a))
}

/// A node with labels.
fn node(name: &str, labels: &[(&str, &str)]) -> NodeBuilder {
    labels.iter().fold(NodeBuilder::new(name), |b, (k, v)| b.label(k, v))
}

/// The snapshot: each pod on the node its `spec.nodeName` names.
fn snapshot(nodes: Vec<NodeBuilder>, pods: &[PodBuilder]) -> NodeList {
    let mut infos: Vec<NodeInfo> = nodes.into_iter().map(NodeBuilder::info).collect();
    for p in pods {
        let p = p.clone().info();
        let on = p.node_name().expect("existing pods name a node").to_string();
        let n = infos.iter_mut().find(|n| n.name() == on).expect("pod's node exists");
        n.add_pod(p);
    }
    NodeList::of(infos)
}

/// Upstream's test namespaces: `subteam{1,2}.team{1,2}` labelled `team`.
fn namespaces() -> Arc<ClusterObjects> {
    let objects = ClusterObjects::new();
    for (name, team) in [
        ("subteam1.team1", "team1"),
        ("subteam2.team1", "team1"),
        ("subteam1.team2", "team2"),
        ("subteam2.team2", "team2"),
    ] {
        let ns =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"team": team}}}))
                .unwrap();
        objects.apply(&ClusterObject::Namespace(Arc::new(ns)));
    }
    Arc::new(objects)
}

fn plugin_with(args: InterPodAffinityArgs) -> InterPodAffinity {
    InterPodAffinity::new(Some(&PluginArgs::InterPodAffinity(args)), namespaces()).unwrap()
}

fn plugin() -> InterPodAffinity {
    plugin_with(InterPodAffinityArgs::default())
}

fn info(b: &PodBuilder) -> Arc<PodInfo> {
    b.clone().info()
}

/// The counts as `(key, value) -> count`, for comparisons.
fn pairs(c: &TopologyCounts) -> BTreeMap<(String, String), i64> {
    c.pairs().into_iter().map(|(k, v, n)| ((k.to_string(), v.to_string()), n)).collect()
}

/// PreFilter, then Filter on every node: Err with PreFilter's status when
/// it is not Success.
fn run_filter(pod: &PodBuilder, nodes: &NodeList) -> Result<Vec<Status>, Status> {
    let p = plugin();
    let pod = info(pod);
    let mut state = CycleState::new();
    let (result, s) = p.pre_filter(&mut state, &pod, nodes);
    assert!(result.is_none(), "InterPodAffinity never narrows the nodes");
    if !s.is_success() {
        return Err(s);
    }
    Ok(nodes.list().iter().map(|n| p.filter(&state, &pod, n)).collect())
}

fn ok() -> Status {
    Status::success()
}
fn uu(reason: &'static str) -> Status {
    Status::unresolvable(reason)
}
fn u(reason: &'static str) -> Status {
    Status::unschedulable(reason)
}
