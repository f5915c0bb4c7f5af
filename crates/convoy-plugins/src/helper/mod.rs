//! Code two or more plugins need (upstream `plugins/helper`): plugins meet
//! here and never import each other's internals.
//!
//! This module itself holds score normalization (every normalizing Score
//! plugin) and access to the objects cluster events carry (every plugin's
//! queueing hints). The submodules, each saying who uses it:
//!
//! - [`node_affinity`]: compiled node selectors and required node affinity
//!   (NodeAffinity, PodTopologySpread, VolumeBinding, DynamicResources and
//!   [`volumes`]).
//! - [`taint`]: toleration matching (TaintToleration, NodeUnschedulable,
//!   PodTopologySpread).
//! - [`volumes`]: claims, PersistentVolumes and their events (the volume
//!   plugins: VolumeBinding, VolumeRestrictions, VolumeZone,
//!   NodeVolumeLimits).
//! - [`resource_names`]: extended and scalar resource names
//!   (NodeResourcesFit, NodeResourcesBalancedAllocation, GpuPlacement).
//! - [`shape_score`]: piecewise-linear scoring shapes (NodeResourcesFit,
//!   VolumeBinding).
//! - [`device_room`]: the devices around a node's DRA allocation, which
//!   DynamicResources computes and GpuPlacement scores on.

pub mod device_room;
pub mod node_affinity;
pub mod resource_names;
pub mod shape_score;
pub mod taint;
pub mod volumes;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use convoy_api::{EventObject, Status};

/// Upstream `helper.DefaultNormalizeScore`: scales the scores so that the
/// highest becomes `max_priority`; with `reverse`, a higher raw score gives a
/// lower final score. All-zero scores stay 0 (or all become `max_priority`
/// when reversed).
pub fn default_normalize_score(max_priority: i64, reverse: bool, scores: &mut [i64]) -> Status {
    let max = scores.iter().copied().max().unwrap_or(0).max(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = max_priority);
        }
        return Status::success();
    }
    for s in scores.iter_mut() {
        let v = max_priority * *s / max;
        *s = if reverse { max_priority - v } else { v };
    }
    Status::success()
}

/// The node an event carries, if it carries one.
pub fn event_node(obj: Option<&EventObject>) -> Option<&Node> {
    match obj? {
        EventObject::Node(n) => Some(n),
        _ => None,
    }
}

/// The node an event carries, shared (to build a `NodeInfo` from it).
pub fn event_node_arc(obj: Option<&EventObject>) -> Option<&Arc<Node>> {
    match obj? {
        EventObject::Node(n) => Some(n),
        _ => None,
    }
}

/// The pod an event carries, if it carries one.
pub fn event_pod(obj: Option<&EventObject>) -> Option<&Pod> {
    match obj? {
        EventObject::Pod(p) => Some(p),
        _ => None,
    }
}

/// Whether a pod object is assigned or nominated to a node (a deleted pod
/// that was neither cannot free anything).
pub fn pod_was_on_a_node(pod: &Pod) -> bool {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("");
    let nominated =
        pod.status.as_ref().and_then(|s| s.nominated_node_name.as_deref()).unwrap_or("");
    !node.is_empty() || !nominated.is_empty()
}

/// Test fixtures shared by the plugin tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use convoy_api::{BindError, Binder, EventObject, Handle, NodeInfo, PodInfo, WaitingPods};
    use futures::future::BoxFuture;
    use k8s_openapi::api::core::v1::{Node, Pod};

    /// PreScore over nodes held as `Arc`s, all of them feasible, with an
    /// empty snapshot: the form most plugin tests call it in.
    pub(crate) trait PreScoreOn: convoy_api::PreScorePlugin {
        fn pre_score_on(
            &self,
            state: &mut convoy_api::CycleState,
            pod: &PodInfo,
            nodes: &[Arc<NodeInfo>],
        ) -> convoy_api::Status {
            let all = convoy_api::NodeList::default();
            self.pre_score(state, pod, &convoy_api::borrowed(nodes), &all)
        }
    }

    impl<T: convoy_api::PreScorePlugin + ?Sized> PreScoreOn for T {}

    /// Each node's score from `ScorePlugin::score`, node by node, after
    /// checking that `score_nodes` (the framework's usual path) gives the
    /// same scores; panics on an error or a difference.
    pub(crate) fn score_each(
        plugin: &dyn convoy_api::ScorePlugin,
        state: &convoy_api::CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Vec<i64> {
        let each: Vec<i64> = nodes.iter().map(|n| plugin.score(state, pod, n).unwrap()).collect();
        let mut batch = vec![-1; nodes.len()];
        plugin.score_nodes(state, pod, &convoy_api::borrowed(nodes), &mut batch).unwrap();
        assert_eq!(batch, each, "{}: score_nodes differs from score per node", plugin.name());
        each
    }

    /// `node`'s status from `FilterPlugin::filter`, after checking that
    /// `filter_nodes` (the framework's usual path) agrees with `filter` on
    /// a batch of `node` between two plain nodes: the same nodes kept, in
    /// order, and the same statuses for the others; panics on a difference.
    pub(crate) fn filter_one(
        plugin: &dyn convoy_api::FilterPlugin,
        state: &convoy_api::CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> convoy_api::Status {
        let plain = Arc::new(convoy_api::testing::NodeBuilder::new("plain").info());
        let nodes = [plain.clone(), Arc::new(node.clone()), plain];
        filter_each(plugin, state, pod, &nodes).swap_remove(1)
    }

    /// Each node's status from `FilterPlugin::filter`, after checking that
    /// `filter_nodes` over all of them agrees (see [`filter_one`]).
    pub(crate) fn filter_each(
        plugin: &dyn convoy_api::FilterPlugin,
        state: &convoy_api::CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Vec<convoy_api::Status> {
        let each: Vec<_> = nodes.iter().map(|n| plugin.filter(state, pod, n)).collect();
        let mut kept: Vec<usize> = (0..nodes.len()).collect();
        let mut rejected = Vec::new();
        plugin.filter_nodes(state, pod, nodes, &mut kept, &mut rejected);
        let want_kept: Vec<usize> = (0..nodes.len()).filter(|&i| each[i].is_success()).collect();
        let want_rejected: Vec<_> = (0..nodes.len())
            .filter(|&i| !each[i].is_success())
            .map(|i| (i, each[i].clone()))
            .collect();
        assert_eq!(kept, want_kept, "{}: filter_nodes kept other nodes", plugin.name());
        assert_eq!(rejected, want_rejected, "{}: filter_nodes rejected otherwise", plugin.name());
        each
    }

    /// A binder that answers with a fixed result.
    pub(crate) struct FixedBinder(pub(crate) Result<(), BindError>);

    impl Binder for FixedBinder {
        fn bind(
            &self,
            _pod: Arc<PodInfo>,
            _node: Arc<str>,
        ) -> BoxFuture<'static, Result<(), BindError>> {
            let r = self.0.clone();
            Box::pin(async move { r })
        }
    }

    struct NoWaiting;

    impl WaitingPods for NoWaiting {
        fn allow(&self, _uid: &str, _plugin: &'static str) -> bool {
            false
        }
        fn reject(&self, _uid: &str, _plugin: &'static str, _message: &str) -> bool {
            false
        }
        fn uids(&self) -> Vec<Arc<str>> {
            Vec::new()
        }
    }

    /// A handle whose binder always succeeds, on an empty object store.
    pub(crate) fn handle() -> Handle {
        handle_on(Arc::default())
    }

    /// A handle whose binder always succeeds, reading `objects` (a store
    /// the test fills).
    pub(crate) fn handle_on(objects: Arc<convoy_objects::ClusterObjects>) -> Handle {
        Handle {
            binder: Arc::new(FixedBinder(Ok(()))),
            waiting_pods: Arc::new(NoWaiting),
            profile: Arc::from("convoy-scheduler"),
            objects,
            groups: None,
            running_preemptions: Default::default(),
            dra_stats: Default::default(),
        }
    }

    /// A node event object.
    pub(crate) fn node_obj(n: Node) -> EventObject {
        EventObject::Node(Arc::new(n))
    }

    /// A pod event object.
    pub(crate) fn pod_obj(p: Pod) -> EventObject {
        EventObject::Pod(Arc::new(p))
    }

    /// The node infos of a list of nodes, shared.
    pub(crate) fn infos(nodes: Vec<NodeInfo>) -> Vec<Arc<NodeInfo>> {
        nodes.into_iter().map(Arc::new).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_like_upstream() {
        let cases: [(&[i64], bool, &[i64]); 6] = [
            (&[1, 2, 3, 4], false, &[25, 50, 75, 100]),
            (&[1, 2, 3, 4], true, &[75, 50, 25, 0]),
            (&[0, 0, 0], false, &[0, 0, 0]),
            (&[0, 0, 0], true, &[100, 100, 100]),
            (&[1000, 10, 20, 30], false, &[100, 1, 2, 3]),
            (&[1000, 10, 20, 30], true, &[0, 99, 98, 97]),
        ];
        for (input, reverse, want) in cases {
            let mut s = input.to_vec();
            assert!(default_normalize_score(100, reverse, &mut s).is_success());
            assert_eq!(s, want, "{input:?} reverse={reverse}");
        }
    }
}
