//! Errors of cache operations. Each names the pod (`namespace/name`) and the
//! node involved; the event loop logs them, the scheduling loop treats an
//! `assume_pod` error as an internal error of the cycle.

use convoy_api::PodKey;

/// A cache operation that does not match the cache's state; the cache is left
/// unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// `assume_pod` for a pod the cache already holds (assumed or added).
    #[error("pod {pod} is already in the cache ({state} on node {node}), so it cannot be assumed")]
    PodAlreadyInCache {
        /// The pod.
        pod: PodKey,
        /// The node it is on in the cache.
        node: String,
        /// `assumed` or `added`.
        state: &'static str,
    },
    /// `forget_pod` for a pod that is not assumed (unknown, or confirmed).
    #[error("pod {pod} was not assumed, so it cannot be forgotten")]
    PodNotAssumed {
        /// The pod.
        pod: PodKey,
    },
    /// `forget_pod` for a pod whose `spec.nodeName` is not the node it was
    /// assumed on.
    #[error("pod {pod} was assumed on node {assumed} but is assigned to node {assigned}")]
    AssumedOnDifferentNode {
        /// The pod.
        pod: PodKey,
        /// The node it was assumed on.
        assumed: String,
        /// The node its `spec.nodeName` names.
        assigned: String,
    },
    /// `add_pod` for a pod already confirmed by the watch.
    #[error("pod {pod} was already added on node {node}")]
    PodAlreadyAdded {
        /// The pod.
        pod: PodKey,
        /// The node it is on.
        node: String,
    },
    /// `add_pod` for a pod with no `spec.nodeName` that was not assumed.
    #[error("pod {pod} has no spec.nodeName and was not assumed, so it cannot be added")]
    PodNotAssigned {
        /// The pod.
        pod: PodKey,
    },
    /// `update_pod` or `remove_pod` for a pod the cache does not hold.
    #[error("pod {pod} is not in the cache, so it cannot be {op}")]
    PodNotFound {
        /// The pod.
        pod: PodKey,
        /// `updated` or `removed`.
        op: &'static str,
    },
    /// `remove_node` for a node the cache does not hold (or already removed,
    /// kept only as a placeholder for its pods).
    #[error("node {node} is not in the cache, so it cannot be removed")]
    NodeNotFound {
        /// The node.
        node: String,
    },
}

/// Result of a cache operation.
pub type Result<T, E = CacheError> = std::result::Result<T, E>;
