//! Tests ported from upstream's `filtering_test.go`, `scoring_test.go` and
//! `plugin_test.go` (v1.37.2): same clusters, same expectations. Cases that
//! only exist to test a disabled feature gate are left out (the gates are
//! GA/locked or on in 1.37).

mod args;
mod equivalence;
mod filtering;
mod hints;
mod memo;
mod pre_filter;
mod reference;
mod scoring;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::json;

use convoy_api::testing::{NodeBuilder, PodBuilder, match_labels};
use convoy_api::{ClusterObject, NodeInfo, NodeList, PodInfo};
use convoy_config::{PluginArgs, PodTopologySpreadArgs};

use super::PodTopologySpread;
use crate::helper::testing::{handle, handle_on};
use convoy_objects::ClusterObjects;

/// `st.MakeLabelSelector().Exists(key)`.
pub(super) fn exists(key: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.to_string(),
            operator: "Exists".to_string(),
            values: None,
        }]),
        ..Default::default()
    })
}

/// `fooSelector`.
pub(super) fn foo() -> Option<LabelSelector> {
    exists("foo")
}

/// `barSelector`.
pub(super) fn bar() -> Option<LabelSelector> {
    exists("bar")
}

/// A `matchLabels` selector.
pub(super) fn labels(pairs: &[(&str, &str)]) -> Option<LabelSelector> {
    Some(match_labels(pairs))
}

/// `SpreadConstraint(maxSkew, key, when, selector, nil, nil, nil, nil)`.
pub(super) fn tsc(
    max_skew: i32,
    key: &str,
    when: &str,
    selector: Option<LabelSelector>,
) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: key.to_string(),
        when_unsatisfiable: when.to_string(),
        label_selector: selector,
        ..Default::default()
    }
}

/// What the tests add to [`PodBuilder`].
pub(super) trait PodExt: Sized {
    /// Appends a topology spread constraint.
    fn constraint(self, c: TopologySpreadConstraint) -> Self;
    /// A required node affinity term `key op values`.
    fn node_affinity(self, key: &str, op: &str, values: &[&str]) -> Self;
}

impl PodExt for PodBuilder {
    fn constraint(self, c: TopologySpreadConstraint) -> Self {
        self.with_spec(|s| s.topology_spread_constraints.get_or_insert_with(Vec::new).push(c))
    }

    fn node_affinity(self, key: &str, op: &str, values: &[&str]) -> Self {
        let affinity = serde_json::from_value(json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": key, "operator": op, "values": values}]}
            ]}
        }}))
        .unwrap();
        self.with_spec(|s| s.affinity = Some(affinity))
    }
}

/// The incoming pod `p` with labels.
pub(super) fn pod(labels: &[(&str, &str)]) -> PodBuilder {
    labels.iter().fold(PodBuilder::new("p"), |b, (k, v)| b.label(k, v))
}

/// A pod bound to `node`, with labels.
pub(super) fn on(name: &str, node: &str, labels: &[(&str, &str)]) -> Pod {
    labels.iter().fold(PodBuilder::new(name).node(node), |b, (k, v)| b.label(k, v)).build()
}

/// A pod being deleted (`metadata.deletionTimestamp` set).
pub(super) fn terminating(mut p: Pod) -> Pod {
    p.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2020-01-01T00:00:00Z")).unwrap());
    p
}

/// A node with labels.
pub(super) fn node(name: &str, labels: &[(&str, &str)]) -> NodeBuilder {
    labels.iter().fold(NodeBuilder::new(name), |b, (k, v)| b.label(k, v))
}

/// A node labelled `zone` and `node` (upstream's usual four-node cluster).
pub(super) fn zn(name: &str, zone: &str) -> NodeBuilder {
    node(name, &[("zone", zone), ("node", name)])
}

/// node-a, node-b in zone1 and node-x, node-y in zone2.
pub(super) fn four_nodes() -> Vec<NodeBuilder> {
    vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")]
}

/// The node infos of `nodes` with `pods` placed by `spec.nodeName`.
pub(super) fn infos(nodes: Vec<NodeBuilder>, pods: &[Pod]) -> Vec<Arc<NodeInfo>> {
    nodes
        .into_iter()
        .map(|n| {
            let mut info = n.info();
            for p in pods {
                if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(info.name()) {
                    info.add_pod(Arc::new(PodInfo::new(Arc::new(p.clone())).unwrap()));
                }
            }
            Arc::new(info)
        })
        .collect()
}

/// A snapshot lister of `nodes` with `pods`.
pub(super) fn cluster(nodes: Vec<NodeBuilder>, pods: &[Pod]) -> NodeList {
    NodeList::new(infos(nodes, pods))
}

/// The plugin with default args (System) and no cluster objects.
pub(super) fn plugin() -> PodTopologySpread {
    PodTopologySpread::new(None, &handle()).unwrap()
}

/// `defaultingType: List` with these constraints, and these cluster objects.
pub(super) fn plugin_with(
    defaults: Vec<TopologySpreadConstraint>,
    objects: &[ClusterObject],
) -> PodTopologySpread {
    let args = PodTopologySpreadArgs {
        defaulting_type: convoy_config::DefaultingType::List,
        default_constraints: defaults
            .into_iter()
            .map(|c| serde_json::from_value(serde_json::to_value(c).unwrap()).unwrap())
            .collect(),
    };
    plugin_args(args, objects)
}

/// The plugin with these args and cluster objects.
pub(super) fn plugin_args(
    args: PodTopologySpreadArgs,
    objects: &[ClusterObject],
) -> PodTopologySpread {
    let store = Arc::new(ClusterObjects::new());
    for o in objects {
        store.apply(o);
    }
    let h = handle_on(store);
    PodTopologySpread::new(Some(&PluginArgs::PodTopologySpread(args)), &h).unwrap()
}

/// A Service in `default` selecting `selector`.
pub(super) fn service(name: &str, selector: &[(&str, &str)]) -> ClusterObject {
    let selector: BTreeMap<&str, &str> = selector.iter().copied().collect();
    ClusterObject::Service(Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": selector}
        }))
        .unwrap(),
    ))
}

/// A ReplicaSet or StatefulSet in `default` with a `matchLabels` selector.
pub(super) fn workload(kind: &str, name: &str, selector: &[(&str, &str)]) -> ClusterObject {
    let selector: BTreeMap<&str, &str> = selector.iter().copied().collect();
    let v = json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": selector}, "template": {}}
    });
    match kind {
        "ReplicaSet" => ClusterObject::ReplicaSet(Arc::new(serde_json::from_value(v).unwrap())),
        "StatefulSet" => ClusterObject::StatefulSet(Arc::new(
            serde_json::from_value(json!({
                "metadata": v["metadata"],
                "spec": {"selector": v["spec"]["selector"], "template": {}, "serviceName": ""}
            }))
            .unwrap(),
        )),
        other => panic!("{other}"),
    }
}

/// The info of a pod.
pub(super) fn info(p: Pod) -> Arc<PodInfo> {
    Arc::new(PodInfo::new(Arc::new(p)).unwrap())
}
