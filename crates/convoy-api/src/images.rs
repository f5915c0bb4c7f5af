//! Container images on nodes, for ImageLocality: each node's images
//! (`status.images`) and the cluster-wide count of nodes holding each image
//! name, kept as kube-scheduler v1.37.2's cache keeps its `imageStates`
//! (`pkg/scheduler/backend/cache/cache.go`, `addNodeImageStates` and
//! `removeNodeImageStates`).
//!
//! The count is maintained incrementally by whoever owns the nodes (the
//! scheduler cache on node add, update and removal) and handed to plugins
//! through [`NodeInfoLister::image_state`](crate::NodeInfoLister::image_state),
//! so a plugin reads it in O(1) per image instead of scanning every node.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

/// One image name present on a node, with the size the node reports for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeImage {
    /// One of the image's names (`registry/repo:tag` or `repo@sha256:...`).
    pub name: Arc<str>,
    /// `sizeBytes` of the image.
    pub size: i64,
}

/// A node's image names, sorted by name, each once (the first image that
/// lists a name gives its size, as upstream's per-node `ImageStates`).
pub fn node_images(node: &Node) -> Vec<NodeImage> {
    let mut v: Vec<NodeImage> = node
        .status
        .as_ref()
        .and_then(|s| s.images.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|image| {
            let size = image.size_bytes.unwrap_or(0);
            image
                .names
                .iter()
                .flatten()
                .map(move |n| NodeImage { name: Arc::from(n.as_str()), size })
        })
        .collect();
    // Stable: among equal names the first listed stays first.
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v.dedup_by(|b, a| a.name == b.name);
    v
}

/// Upstream `ImageStateSummary` as a snapshot sees it: an image name's size
/// and the number of nodes that have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageStateSummary {
    /// Size of the image, from the first node that reported the name while
    /// no node had it (upstream keeps that size while any node has it).
    pub size: i64,
    /// Number of nodes with the image.
    pub num_nodes: usize,
}

/// Image name → [`ImageStateSummary`] over a set of nodes (upstream cache's
/// `imageStates`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageStates {
    states: HashMap<Arc<str>, ImageStateSummary>,
}

impl ImageStates {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counts over the given nodes' images, added in order.
    pub fn of<'a>(nodes: impl IntoIterator<Item = &'a [NodeImage]>) -> Self {
        let mut s = Self::new();
        for images in nodes {
            s.add_node(images);
        }
        s
    }

    /// The state of an image name, if some node has it.
    pub fn get(&self, name: &str) -> Option<ImageStateSummary> {
        self.states.get(name).copied()
    }

    /// Number of distinct image names.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Whether no node has any image.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// Upstream `addNodeImageStates`: one more node has each of `images`
    /// (names unique, as [`node_images`] gives them); a name no node had
    /// takes this node's size.
    pub fn add_node(&mut self, images: &[NodeImage]) {
        for image in images {
            self.states
                .entry(image.name.clone())
                .and_modify(|s| s.num_nodes += 1)
                .or_insert(ImageStateSummary { size: image.size, num_nodes: 1 });
        }
    }

    /// Upstream `removeNodeImageStates`: one node fewer has each of
    /// `images`; a name no node has any more is dropped.
    pub fn remove_node(&mut self, images: &[NodeImage]) {
        for image in images {
            if let Some(s) = self.states.get_mut(&*image.name) {
                s.num_nodes -= 1;
                if s.num_nodes == 0 {
                    self.states.remove(&*image.name);
                }
            }
        }
    }

    /// Whether replacing a node's `old` images by `new` (remove, then add,
    /// as upstream's `UpdateNode`) changes anything: the lists differ, or an
    /// image only this node has would take a new size.
    pub fn update_changes(&self, old: &[NodeImage], new: &[NodeImage]) -> bool {
        old != new
            || new.iter().any(|i| {
                self.states.get(&*i.name).is_some_and(|s| s.num_nodes == 1 && s.size != i.size)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::NodeBuilder;

    fn images(node: NodeBuilder) -> Vec<NodeImage> {
        node_images(&node.build())
    }

    #[test]
    fn node_images_are_sorted_and_unique() {
        let mut n = NodeBuilder::new("n").image("b:1", 10).image("a:1", 20).build();
        // One image listing a name twice, and a second image with the same name.
        n.status.as_mut().unwrap().images.as_mut().unwrap()[0]
            .names
            .as_mut()
            .unwrap()
            .push("b:1".to_string());
        n.status.as_mut().unwrap().images.as_mut().unwrap().push(
            k8s_openapi::api::core::v1::ContainerImage {
                names: Some(vec!["a:1".to_string()]),
                size_bytes: Some(99),
            },
        );
        let got: Vec<(String, i64)> =
            node_images(&n).into_iter().map(|i| (i.name.to_string(), i.size)).collect();
        assert_eq!(got, [("a:1".to_string(), 20), ("b:1".to_string(), 10)]);
    }

    #[test]
    fn counts_follow_nodes_and_keep_the_first_size() {
        let a = images(NodeBuilder::new("a").image("x", 100).image("y", 5));
        let b = images(NodeBuilder::new("b").image("x", 200));
        let mut s = ImageStates::new();
        s.add_node(&a);
        s.add_node(&b);
        assert_eq!(s.get("x"), Some(ImageStateSummary { size: 100, num_nodes: 2 }));
        assert_eq!(s.get("y"), Some(ImageStateSummary { size: 5, num_nodes: 1 }));
        s.remove_node(&a);
        // Still on b, with the size a reported first.
        assert_eq!(s.get("x"), Some(ImageStateSummary { size: 100, num_nodes: 1 }));
        assert_eq!(s.get("y"), None);
        // b is now the only holder: re-adding it would take its own size.
        assert!(s.update_changes(&b, &b));
        s.remove_node(&b);
        s.add_node(&b);
        assert_eq!(s.get("x"), Some(ImageStateSummary { size: 200, num_nodes: 1 }));
        assert!(!s.update_changes(&b, &b));
        assert_eq!(s.len(), 1);
        s.remove_node(&b);
        assert!(s.is_empty());
    }
}
