//! Topology domains and where a pod's group already is.
//!
//! A domain is a value of a node label (`nvidia.com/gpu.clique=A`,
//! `topology.kubernetes.io/zone=z1`). A member of a PodGroup scores best on
//! a node that already holds members of its group, then on nodes of the
//! narrowest domain holding members, so that a group spans as few nodes and
//! domains as possible.

use std::collections::HashSet;
use std::ops::Deref;
use std::sync::Arc;

use convoy_api::{GroupKey, NodeInfo, PodInfo};

/// The node's domain for a topology label key: the label's value, `None`
/// when the node has no such label (or an empty value). Pure; the gang
/// scheduler uses it to enforce `convoy.dev/required-topology`.
pub fn domain_of<'a>(node: &'a NodeInfo, key: &str) -> Option<&'a str> {
    node.label(key).filter(|v| !v.is_empty())
}

/// Whether `other` is a member of `group` other than `pod` itself, still
/// holding its place (not finished).
fn is_sibling(pod: &PodInfo, group: &GroupKey, other: &PodInfo) -> bool {
    other.group.as_ref() == Some(group)
        && !other.is_terminal()
        && if pod.uid.is_empty() || other.uid.is_empty() {
            other.key != pod.key
        } else {
            other.uid != pod.uid
        }
}

/// Where the members of a pod's group are: the nodes holding them, and for
/// each topology key (same order) the domains holding them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupPlacement {
    nodes: HashSet<Arc<str>>,
    domains: Vec<HashSet<String>>,
}

impl GroupPlacement {
    /// The placement of `pod`'s siblings over `nodes` (their assigned and
    /// assumed pods); `None` when the pod has no group or no sibling is
    /// placed yet.
    pub fn of<N: Deref<Target = NodeInfo>>(
        pod: &PodInfo,
        nodes: &[N],
        keys: &[String],
    ) -> Option<Self> {
        let group = pod.group.as_ref()?;
        let mut out = Self { nodes: HashSet::new(), domains: vec![HashSet::new(); keys.len()] };
        for node in nodes {
            if !node.pods.iter().any(|p| is_sibling(pod, group, p)) {
                continue;
            }
            out.nodes.insert(node.name_arc().clone());
            for (i, key) in keys.iter().enumerate() {
                if let Some(d) = domain_of(node, key) {
                    out.domains[i].insert(d.to_string());
                }
            }
        }
        (!out.nodes.is_empty()).then_some(out)
    }

    /// Nodes holding members of the group.
    pub fn nodes(&self) -> &HashSet<Arc<str>> {
        &self.nodes
    }

    /// How close `node` is to the group, in `0..=max`: `max` on a node
    /// holding members; `max * (K - i) / (K + 1)` when the narrowest key
    /// whose domain holds members is the `i`-th of `K`; 0 elsewhere.
    pub fn closeness(&self, node: &NodeInfo, keys: &[String], max: i64) -> i64 {
        if self.nodes.contains(node.name()) {
            return max;
        }
        let k = keys.len() as i64;
        for (i, key) in keys.iter().enumerate() {
            if domain_of(node, key).is_some_and(|d| self.domains[i].contains(d)) {
                return max * (k - i as i64) / (k + 1);
            }
        }
        0
    }
}
