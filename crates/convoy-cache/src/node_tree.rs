//! The order in which snapshots list nodes: round-robin across zones, as
//! upstream's `nodeTree`, so that a scheduler that stops after finding
//! "enough" feasible nodes spreads its search over all zones.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

/// `topology.kubernetes.io/zone`.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// `topology.kubernetes.io/region`.
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
/// Deprecated `failure-domain.beta.kubernetes.io/zone`, read when the GA label
/// is absent (as upstream).
pub const LABEL_ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
/// Deprecated `failure-domain.beta.kubernetes.io/region`.
pub const LABEL_REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";

/// The zone key of a node, as upstream's `GetZoneKey`: region and zone
/// joined by `":\0:"`, or `""` when the node has neither label.
pub fn zone_key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let get = |ga: &str, beta: &str| -> String {
        labels.and_then(|l| l.get(ga).or_else(|| l.get(beta))).cloned().unwrap_or_default()
    };
    let zone = get(LABEL_ZONE, LABEL_ZONE_BETA);
    let region = get(LABEL_REGION, LABEL_REGION_BETA);
    if zone.is_empty() && region.is_empty() { String::new() } else { format!("{region}:\0:{zone}") }
}

/// Node names grouped by zone; zones and the nodes in each zone keep their
/// insertion order.
#[derive(Debug, Default)]
pub(crate) struct NodeTree {
    zones: Vec<Zone>,
    /// Every node in the tree, so that adding stays O(1) at 5,000 nodes.
    members: HashSet<Arc<str>>,
}

#[derive(Debug)]
struct Zone {
    key: String,
    nodes: Vec<Arc<str>>,
}

impl NodeTree {
    /// Adds a node at the end of its zone (a new zone goes last).
    pub(crate) fn add(&mut self, name: Arc<str>, zone: &str) {
        let z = match self.zones.iter().position(|z| z.key == zone) {
            Some(i) => &mut self.zones[i],
            None => {
                self.zones.push(Zone { key: zone.to_string(), nodes: Vec::new() });
                self.zones.last_mut().expect("just pushed")
            }
        };
        if self.members.insert(name.clone()) {
            z.nodes.push(name);
        }
    }

    /// Removes a node from its zone, keeping the order of the others; drops
    /// the zone when it becomes empty. Returns whether the node was there.
    pub(crate) fn remove(&mut self, name: &str, zone: &str) -> bool {
        let Some(zi) = self.zones.iter().position(|z| z.key == zone) else {
            return false;
        };
        let z = &mut self.zones[zi];
        let Some(ni) = z.nodes.iter().position(|n| &**n == name) else {
            return false;
        };
        z.nodes.remove(ni);
        if z.nodes.is_empty() {
            self.zones.remove(zi);
        }
        self.members.remove(name);
        true
    }

    /// Number of nodes.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// Calls `f` on every node: the first node of each zone, then the second
    /// of each zone, and so on.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Arc<str>)) {
        let rounds = self.zones.iter().map(|z| z.nodes.len()).max().unwrap_or(0);
        for i in 0..rounds {
            for z in &self.zones {
                if let Some(n) = z.nodes.get(i) {
                    f(n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::testing::NodeBuilder;

    fn order(t: &NodeTree) -> Vec<String> {
        let mut v = Vec::new();
        t.for_each(|n| v.push(n.to_string()));
        v
    }

    #[test]
    fn round_robin_across_zones_in_insertion_order() {
        let mut t = NodeTree::default();
        for (n, z) in [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b"), ("c1", "c"), ("c2", "c")]
        {
            t.add(Arc::from(n), z);
        }
        assert_eq!(order(&t), ["a1", "b1", "c1", "a2", "c2", "a3"]);
        assert_eq!(t.len(), 6);

        assert!(t.remove("b1", "b"));
        assert!(!t.remove("b1", "b"));
        assert!(!t.remove("a1", "zzz"));
        assert_eq!(order(&t), ["a1", "c1", "a2", "c2", "a3"]);
        // Zone b was dropped; it comes back last.
        t.add(Arc::from("b2"), "b");
        assert_eq!(order(&t), ["a1", "c1", "b2", "a2", "c2", "a3"]);
        // Adding twice is a no-op.
        t.add(Arc::from("b2"), "b");
        assert_eq!(t.len(), 6);
    }

    #[test]
    fn zone_keys() {
        let cases = [
            (NodeBuilder::new("n"), ""),
            (NodeBuilder::new("n").label(LABEL_ZONE, "z1"), ":\0:z1"),
            (NodeBuilder::new("n").label(LABEL_ZONE_BETA, "z1"), ":\0:z1"),
            (NodeBuilder::new("n").label(LABEL_ZONE, "z1").label(LABEL_ZONE_BETA, "old"), ":\0:z1"),
            (NodeBuilder::new("n").label(LABEL_REGION, "r").label(LABEL_ZONE, "z"), "r:\0:z"),
            (NodeBuilder::new("n").label(LABEL_REGION_BETA, "r"), "r:\0:"),
        ];
        for (b, want) in cases {
            assert_eq!(zone_key(&b.build()), want);
        }
    }
}
