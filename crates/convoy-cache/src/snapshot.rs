//! The per-cycle view of the cluster: an immutable list of nodes the
//! scheduling cycle reads without taking the cache's lock.

use std::collections::HashMap;
use std::sync::Arc;

use convoy_api::lister::affinity_lists;
use convoy_api::{ImageStateSummary, ImageStates, NodeInfo, NodeInfoLister, next_generation};

/// The nodes a scheduling cycle sees, refreshed at the start of each cycle by
/// [`Cache::update_snapshot`](crate::Cache::update_snapshot).
///
/// Holds only real nodes (no placeholders for pods on unknown nodes), in the
/// zone-interleaved order of upstream's `nodeTree`: the first node of each
/// zone, then the second of each zone, ... (zones and nodes in insertion
/// order). Nodes are shared with the cache (`Arc`); the cache copies a node
/// on its next write while a snapshot still holds it, so a snapshot never
/// changes under a cycle.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub(crate) nodes: Vec<Arc<NodeInfo>>,
    /// `nodes[i].generation` for every `i` (see
    /// [`NodeInfoLister::generations`]).
    pub(crate) generations: Vec<u64>,
    pub(crate) index: HashMap<Arc<str>, usize>,
    /// Nodes with pods with pod affinity of any kind, in `nodes` order.
    pub(crate) with_affinity: Vec<Arc<NodeInfo>>,
    /// The position in `nodes` of each node of `with_affinity`.
    with_affinity_at: Vec<u32>,
    /// Nodes with pods with required pod anti-affinity, in `nodes` order.
    pub(crate) with_required_anti_affinity: Vec<Arc<NodeInfo>>,
    /// The position in `nodes` of each node of `with_required_anti_affinity`.
    with_required_anti_affinity_at: Vec<u32>,
    pub(crate) generation: u64,
    /// Image name → size and number of nodes with it, shared with the cache
    /// as of this snapshot (upstream's `ImageStateSummary.NumNodes`; see
    /// [`NodeInfoLister::image_state`]).
    pub(crate) images: Arc<ImageStates>,
    /// Reused buffer for `update_snapshot` (empty between calls).
    pub(crate) scratch: Vec<Arc<NodeInfo>>,
}

impl Snapshot {
    /// An empty snapshot; the first `update_snapshot` fills it completely.
    pub fn new() -> Self {
        Self::default()
    }

    /// A snapshot of the given nodes, in the given order (tests and tools;
    /// the scheduler gets its snapshot from the cache).
    pub fn from_nodes(nodes: impl IntoIterator<Item = NodeInfo>) -> Self {
        let mut s = Self {
            nodes: nodes.into_iter().map(Arc::new).collect(),
            generation: next_generation(),
            ..Self::default()
        };
        s.rebuild_index();
        s.rebuild_affinity_lists();
        s.images = Arc::new(ImageStates::of(s.nodes.iter().map(|n| &n.images()[..])));
        s
    }

    /// All nodes, in zone-interleaved order.
    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    /// A node by name.
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// A new value after every update that found changes (so it changes
    /// whenever the content does); 0 for a snapshot never filled. Taken from
    /// [`next_generation`], so it is at least the generation of every node in
    /// the snapshot.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Recomputes the lists of nodes with affinity pods (after the list of
    /// nodes changed).
    pub(crate) fn rebuild_affinity_lists(&mut self) {
        (self.with_affinity, self.with_required_anti_affinity) = affinity_lists(&self.nodes);
        let positions = |pred: fn(&NodeInfo) -> bool| -> Vec<u32> {
            (0..self.nodes.len()).filter(|&i| pred(&self.nodes[i])).map(position).collect()
        };
        self.with_affinity_at = positions(|n| !n.pods_with_affinity.is_empty());
        self.with_required_anti_affinity_at =
            positions(|n| !n.pods_with_required_anti_affinity.is_empty());
    }

    /// Puts the node at position `i` (just replaced) in, out of, or anew in
    /// the lists of nodes with affinity pods, as it now belongs. Upstream
    /// rebuilds both lists whenever such a node changed; replacing one entry
    /// gives the same lists without touching every node (an `Arc` clone and
    /// drop each).
    pub(crate) fn update_affinity_lists(&mut self, i: usize) {
        let node = &self.nodes[i];
        place(
            &mut self.with_affinity,
            &mut self.with_affinity_at,
            i,
            node,
            !node.pods_with_affinity.is_empty(),
        );
        place(
            &mut self.with_required_anti_affinity,
            &mut self.with_required_anti_affinity_at,
            i,
            node,
            !node.pods_with_required_anti_affinity.is_empty(),
        );
    }

    pub(crate) fn rebuild_index(&mut self) {
        self.generations.clear();
        self.generations.extend(self.nodes.iter().map(|n| n.generation));
        self.index.clear();
        self.index.reserve(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            self.index.insert(n.name_arc().clone(), i);
        }
    }
}

fn position(i: usize) -> u32 {
    u32::try_from(i).expect("fewer than 2^32 nodes")
}

/// Makes `node`, at position `i` of the snapshot, a member of `list` (kept
/// in snapshot order, with each member's position in `at`) or not.
fn place(
    list: &mut Vec<Arc<NodeInfo>>,
    at: &mut Vec<u32>,
    i: usize,
    node: &Arc<NodeInfo>,
    member: bool,
) {
    let i = position(i);
    match (at.binary_search(&i), member) {
        (Ok(j), true) => list[j] = node.clone(),
        (Ok(j), false) => {
            list.remove(j);
            at.remove(j);
        }
        (Err(j), true) => {
            list.insert(j, node.clone());
            at.insert(j, i);
        }
        (Err(_), false) => {}
    }
}

impl NodeInfoLister for Snapshot {
    fn list(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
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
        Snapshot::get(self, name)
    }
    fn image_state(&self, name: &str) -> Option<ImageStateSummary> {
        self.images.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::testing::NodeBuilder;

    #[test]
    fn from_nodes_keeps_order_and_indexes() {
        let s = Snapshot::from_nodes(["b", "a", "c"].map(|n| NodeBuilder::new(n).info()));
        let names: Vec<_> = s.nodes().iter().map(|n| n.name()).collect();
        assert_eq!(names, ["b", "a", "c"]);
        assert_eq!(s.get("a").unwrap().name(), "a");
        assert!(s.get("zzz").is_none());
        assert_eq!(s.len(), 3);
        assert!(!s.is_empty());
        assert!(s.generation() > 0);
        assert!(Snapshot::new().is_empty());
        assert_eq!(Snapshot::new().generation(), 0);
    }
}
