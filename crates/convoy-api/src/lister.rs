//! What plugins read about the nodes of the cluster during one cycle
//! (upstream `SharedLister().NodeInfos()`): every node of the cycle's
//! snapshot, the short lists of nodes hosting pods with pod affinity, which
//! the inter-pod affinity plugin walks instead of every node, and the number
//! of nodes holding each container image, which ImageLocality reads instead
//! of scanning every node.

use std::collections::HashMap;
use std::sync::Arc;

use crate::images::{ImageStateSummary, ImageStates};
use crate::node_info::NodeInfo;

/// The nodes of one cycle's snapshot. Implemented by the scheduler cache's
/// snapshot, and by [`NodeList`] for tests and tools.
pub trait NodeInfoLister: Sync {
    /// Every node, in the snapshot's (zone-interleaved) order.
    fn list(&self) -> &[Arc<NodeInfo>];
    /// The [`NodeInfo::generation`] of each node of [`list`](Self::list),
    /// in the same order, in one contiguous array: a plugin that keeps
    /// per-node results between cycles (keyed by node position and
    /// generation) finds the nodes that changed with one linear scan,
    /// without touching every node.
    fn generations(&self) -> &[u64];
    /// The nodes with at least one pod with pod affinity or anti-affinity
    /// of any kind (upstream `HavePodsWithAffinityList`).
    fn have_pods_with_affinity_list(&self) -> &[Arc<NodeInfo>];
    /// The nodes with at least one pod with required pod anti-affinity
    /// (upstream `HavePodsWithRequiredAntiAffinityList`).
    fn have_pods_with_required_anti_affinity_list(&self) -> &[Arc<NodeInfo>];
    /// A node by name.
    fn get(&self, name: &str) -> Option<&Arc<NodeInfo>>;
    /// The size of an image name and the number of nodes of the snapshot
    /// that have it (upstream's `ImageStateSummary` with `NumNodes`), `None`
    /// when no node has it. O(1): kept up to date as nodes change, not
    /// counted per call.
    fn image_state(&self, name: &str) -> Option<ImageStateSummary>;
}

/// An owned [`NodeInfoLister`] over a list of nodes.
#[derive(Debug, Clone, Default)]
pub struct NodeList {
    all: Vec<Arc<NodeInfo>>,
    generations: Vec<u64>,
    with_affinity: Vec<Arc<NodeInfo>>,
    with_required_anti_affinity: Vec<Arc<NodeInfo>>,
    index: HashMap<Arc<str>, usize>,
    images: ImageStates,
}

impl NodeList {
    /// A lister over these nodes, in this order.
    pub fn new(nodes: Vec<Arc<NodeInfo>>) -> Self {
        let mut l = Self { all: nodes, ..Default::default() };
        l.generations = l.all.iter().map(|n| n.generation).collect();
        l.with_affinity = affinity_lists(&l.all).0;
        l.with_required_anti_affinity = affinity_lists(&l.all).1;
        l.index = l.all.iter().enumerate().map(|(i, n)| (n.name_arc().clone(), i)).collect();
        l.images = ImageStates::of(l.all.iter().map(|n| &n.images()[..]));
        l
    }

    /// A lister over node infos (tests).
    pub fn of(nodes: impl IntoIterator<Item = NodeInfo>) -> Self {
        Self::new(nodes.into_iter().map(Arc::new).collect())
    }
}

/// The nodes hosting pods with pod affinity of any kind, and those hosting
/// pods with required anti-affinity, in the order of `nodes`.
pub fn affinity_lists(nodes: &[Arc<NodeInfo>]) -> (Vec<Arc<NodeInfo>>, Vec<Arc<NodeInfo>>) {
    let with_affinity: Vec<_> =
        nodes.iter().filter(|n| !n.pods_with_affinity.is_empty()).cloned().collect();
    let with_anti = with_affinity
        .iter()
        .filter(|n| !n.pods_with_required_anti_affinity.is_empty())
        .cloned()
        .collect();
    (with_affinity, with_anti)
}

impl NodeInfoLister for NodeList {
    fn list(&self) -> &[Arc<NodeInfo>] {
        &self.all
    }
    fn generations(&self) -> &[u64] {
        &self.generations
    }
    fn have_pods_with_affinity_list(&self) -> &[Arc<NodeInfo>] {
        &self.with_affinity
    }
    fn have_pods_with_required_anti_affinity_list(&self) -> &[Arc<NodeInfo>] {
        &self.with_required_anti_affinity
    }
    fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.all[i])
    }
    fn image_state(&self, name: &str) -> Option<ImageStateSummary> {
        self.images.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn lists_nodes_with_affinity_pods() {
        let mut a = NodeBuilder::new("a").info();
        a.add_pod(PodBuilder::new("p").pod_anti_affinity("zone", &[("x", "y")]).info());
        let mut b = NodeBuilder::new("b").info();
        b.add_pod(PodBuilder::new("q").preferred_pod_affinity(1, "zone", &[("x", "y")]).info());
        let c = NodeBuilder::new("c").info();
        let l = NodeList::of([a, b, c]);
        let names =
            |v: &[Arc<NodeInfo>]| v.iter().map(|n| n.name().to_string()).collect::<Vec<_>>();
        assert_eq!(names(l.list()), ["a", "b", "c"]);
        assert_eq!(names(l.have_pods_with_affinity_list()), ["a", "b"]);
        assert_eq!(names(l.have_pods_with_required_anti_affinity_list()), ["a"]);
        assert_eq!(l.get("c").unwrap().name(), "c");
        assert!(l.get("zzz").is_none());
    }

    #[test]
    fn counts_nodes_per_image() {
        let l = NodeList::of([
            NodeBuilder::new("a").image("x:1", 10).image("y:1", 5).info(),
            NodeBuilder::new("b").image("x:1", 10).info(),
            NodeBuilder::new("c").info(),
        ]);
        assert_eq!(l.image_state("x:1"), Some(ImageStateSummary { size: 10, num_nodes: 2 }));
        assert_eq!(l.image_state("y:1"), Some(ImageStateSummary { size: 5, num_nodes: 1 }));
        assert_eq!(l.image_state("z:1"), None);
    }
}
