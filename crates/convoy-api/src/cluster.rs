//! The stream of cluster updates every adapter produces (the API-server
//! watches, the embedded cluster, benchmarks) and the scheduler consumes.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

/// One change in the cluster, as a watch reports it.
#[derive(Debug, Clone)]
pub enum ClusterUpdate {
    /// A node appeared (or was listed).
    NodeAdded(Arc<Node>),
    /// A node changed.
    NodeUpdated {
        /// Before.
        old: Arc<Node>,
        /// After.
        new: Arc<Node>,
    },
    /// A node was deleted.
    NodeDeleted(Arc<Node>),
    /// A pod appeared (or was listed).
    PodAdded(Arc<Pod>),
    /// A pod changed (including being bound: `spec.nodeName` set).
    PodUpdated {
        /// Before.
        old: Arc<Pod>,
        /// After.
        new: Arc<Pod>,
    },
    /// A pod was deleted.
    PodDeleted(Arc<Pod>),
    /// A PodGroup (either API) appeared or changed.
    PodGroupApplied(Arc<crate::pod_group::PodGroup>),
    /// A PodGroup was deleted.
    PodGroupDeleted(crate::pod_group::GroupKey),
    /// A Namespace, Service, ReplicationController, ReplicaSet or
    /// StatefulSet appeared or changed.
    ObjectApplied(crate::objects::ClusterObject),
    /// One of those was deleted.
    ObjectDeleted(crate::objects::ClusterObject),
    /// A custom resource of a kind a plugin registered appeared or changed
    /// ([`crate::objects::custom`]).
    CustomApplied(std::sync::Arc<crate::objects::CustomObject>),
    /// One was deleted.
    CustomDeleted(std::sync::Arc<crate::objects::CustomObject>),
    /// Which optional APIs the server serves, and in which version
    /// ([`crate::apis`]): sent by the API adapter before `Synced` and
    /// whenever discovery finds a change. The embedded cluster serves
    /// every API and never sends it.
    ApisServed(std::sync::Arc<crate::apis::ServedApis>),
    /// The initial lists are complete: scheduling may start.
    Synced,
}
