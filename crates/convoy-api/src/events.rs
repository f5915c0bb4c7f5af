//! Cluster events that can make a rejected pod schedulable, and the hints
//! plugins give the queue about them.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::pod_fields::unevaluated_fields;
use crate::pod_info::PodInfo;

/// What kind of object an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventResource {
    /// Any pod.
    Pod,
    /// A pod assigned to a node (upstream `AssignedPod`).
    AssignedPod,
    /// A pod not yet assigned (upstream `UnscheduledPod`).
    UnscheduledPod,
    /// A node.
    Node,
    /// A PodGroup (either API).
    PodGroup,
    /// A PersistentVolumeClaim.
    PersistentVolumeClaim,
    /// A PersistentVolume.
    PersistentVolume,
    /// A StorageClass.
    StorageClass,
    /// A CSINode.
    CSINode,
    /// A CSIDriver.
    CSIDriver,
    /// A CSIStorageCapacity.
    CSIStorageCapacity,
    /// A DeviceClass.
    DeviceClass,
    /// A ResourceSlice.
    ResourceSlice,
    /// A ResourceClaim.
    ResourceClaim,
    /// A DeviceTaintRule.
    DeviceTaintRule,
    /// A custom resource of a kind a plugin registered
    /// ([`crate::objects::custom`]).
    Custom(crate::apis::ApiInfo),
    /// Any resource (used for the periodic flush and "move all").
    WildCard,
}

impl EventResource {
    /// The resource of a [`ClusterObject`](crate::ClusterObject) kind whose
    /// changes the queue hears about (the volume and DRA kinds), if it is
    /// one.
    pub fn of_object(obj: &crate::objects::ClusterObject) -> Option<EventResource> {
        use crate::objects::ClusterObject as O;
        match obj {
            O::PersistentVolumeClaim(_) => Some(EventResource::PersistentVolumeClaim),
            O::PersistentVolume(_) => Some(EventResource::PersistentVolume),
            O::StorageClass(_) => Some(EventResource::StorageClass),
            O::CSINode(_) => Some(EventResource::CSINode),
            O::CSIDriver(_) => Some(EventResource::CSIDriver),
            O::CSIStorageCapacity(_) => Some(EventResource::CSIStorageCapacity),
            O::DeviceClass(_) => Some(EventResource::DeviceClass),
            O::ResourceSlice(_) => Some(EventResource::ResourceSlice),
            O::ResourceClaim(_) => Some(EventResource::ResourceClaim),
            O::DeviceTaintRule(_) => Some(EventResource::DeviceTaintRule),
            _ => None,
        }
    }

    /// Whether an event on `self` is one a registration for `registered` covers.
    pub fn matches(self, registered: EventResource) -> bool {
        use EventResource::*;
        registered == WildCard
            || self == registered
            || (registered == Pod && matches!(self, AssignedPod | UnscheduledPod))
            || (self == Pod && matches!(registered, AssignedPod | UnscheduledPod))
    }
}

/// What happened to the object: a bit set, as upstream's `ActionType`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ActionType(pub u32);

impl ActionType {
    /// Object added.
    pub const ADD: ActionType = ActionType(1);
    /// Object deleted.
    pub const DELETE: ActionType = ActionType(1 << 1);
    /// Node allocatable changed.
    pub const UPDATE_NODE_ALLOCATABLE: ActionType = ActionType(1 << 2);
    /// Node labels changed.
    pub const UPDATE_NODE_LABEL: ActionType = ActionType(1 << 3);
    /// Node taints (or `spec.unschedulable`) changed.
    pub const UPDATE_NODE_TAINT: ActionType = ActionType(1 << 4);
    /// Node conditions changed.
    pub const UPDATE_NODE_CONDITION: ActionType = ActionType(1 << 5);
    /// Node annotations changed.
    pub const UPDATE_NODE_ANNOTATION: ActionType = ActionType(1 << 6);
    /// Pod labels changed.
    pub const UPDATE_POD_LABEL: ActionType = ActionType(1 << 7);
    /// Pod requests went down (in-place resize).
    pub const UPDATE_POD_SCALE_DOWN: ActionType = ActionType(1 << 8);
    /// Pod tolerations changed.
    pub const UPDATE_POD_TOLERATION: ActionType = ActionType(1 << 9);
    /// The pod's scheduling gates were all removed.
    pub const UPDATE_POD_SCHEDULING_GATES_ELIMINATED: ActionType = ActionType(1 << 10);
    /// Any other update.
    pub const UPDATE_OTHER: ActionType = ActionType(1 << 11);
    /// The pod's `status.resourceClaimStatuses` or
    /// `status.extendedResourceClaimStatus` changed (the ResourceClaims
    /// generated for it from templates; upstream
    /// `UpdatePodGeneratedResourceClaim`).
    pub const UPDATE_POD_GENERATED_RESOURCE_CLAIM: ActionType = ActionType(1 << 12);
    /// Any update.
    pub const UPDATE: ActionType = ActionType((1 << 13) - 1 - 0b11);
    /// Anything.
    pub const ALL: ActionType = ActionType((1 << 13) - 1);

    /// Whether the two sets share an action.
    pub fn intersects(self, other: ActionType) -> bool {
        self.0 & other.0 != 0
    }
}

impl std::ops::BitOr for ActionType {
    type Output = ActionType;
    fn bitor(self, rhs: Self) -> Self {
        ActionType(self.0 | rhs.0)
    }
}

impl std::ops::BitOrAssign for ActionType {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 13] = [
            "Add",
            "Delete",
            "UpdateNodeAllocatable",
            "UpdateNodeLabel",
            "UpdateNodeTaint",
            "UpdateNodeCondition",
            "UpdateNodeAnnotation",
            "UpdatePodLabel",
            "UpdatePodScaleDown",
            "UpdatePodToleration",
            "UpdatePodSchedulingGatesEliminated",
            "UpdateOther",
            "UpdatePodGeneratedResourceClaim",
        ];
        let names: Vec<&str> =
            (0..NAMES.len()).filter(|i| self.0 & (1 << i) != 0).map(|i| NAMES[i]).collect();
        write!(f, "{}", names.join("|"))
    }
}

/// A cluster event: a resource and what happened to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterEvent {
    /// The resource.
    pub resource: EventResource,
    /// What happened.
    pub action: ActionType,
}

impl ClusterEvent {
    /// Builds an event.
    pub const fn new(resource: EventResource, action: ActionType) -> Self {
        Self { resource, action }
    }

    /// Whether this (actual) event is covered by a `registered` one.
    pub fn matches(&self, registered: &ClusterEvent) -> bool {
        self.resource.matches(registered.resource) && self.action.intersects(registered.action)
    }

    /// A short label for logs and metrics (`NodeAdd`, `AssignedPodDelete`, ...).
    pub fn label(&self) -> String {
        match self.resource {
            EventResource::Custom(api) => format!("{}{:?}", api.kind, self.action),
            resource => format!("{resource:?}{:?}", self.action),
        }
    }
}

/// The objects an event carries (old and new state).
#[derive(Debug, Clone)]
pub enum EventObject {
    /// A pod.
    Pod(Arc<Pod>),
    /// A node.
    Node(Arc<Node>),
    /// A PodGroup (either API).
    PodGroup(Arc<crate::pod_group::PodGroup>),
    /// One of the watched [`ClusterObject`](crate::ClusterObject)s (the
    /// volume kinds: their hints read the objects).
    Object(crate::objects::ClusterObject),
    /// A custom resource ([`crate::objects::custom`]).
    Custom(Arc<crate::objects::CustomObject>),
    /// Any other object, by kind and `namespace/name`.
    Other {
        /// Kind.
        kind: &'static str,
        /// `namespace/name` or `name`.
        key: String,
    },
}

/// What a plugin tells the queue about an event for a pod it rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueingHint {
    /// The event cannot help this pod: leave it where it is.
    Skip,
    /// The event may help: move the pod back to be retried.
    Queue,
}

/// A hint function: given the rejected pod and the event's old and new
/// objects, may the event make the pod schedulable? Keep these small, pure
/// and cheap; they run on the event path.
pub type QueueingHintFn =
    Arc<dyn Fn(&PodInfo, Option<&EventObject>, Option<&EventObject>) -> QueueingHint + Send + Sync>;

/// An event a plugin registers, with an optional hint (no hint = always
/// Queue).
#[derive(Clone)]
pub struct ClusterEventWithHint {
    /// The event.
    pub event: ClusterEvent,
    /// The hint, if any.
    pub hint: Option<QueueingHintFn>,
}

impl fmt::Debug for ClusterEventWithHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterEventWithHint")
            .field("event", &self.event)
            .field("hint", &self.hint.is_some())
            .finish()
    }
}

impl ClusterEventWithHint {
    /// An event without a hint.
    pub fn new(resource: EventResource, action: ActionType) -> Self {
        Self { event: ClusterEvent::new(resource, action), hint: None }
    }

    /// An event with a hint.
    pub fn with_hint(
        resource: EventResource,
        action: ActionType,
        hint: impl Fn(&PodInfo, Option<&EventObject>, Option<&EventObject>) -> QueueingHint
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self { event: ClusterEvent::new(resource, action), hint: Some(Arc::new(hint)) }
    }
}

/// The queueing hint of [`UNEVALUATED_FIELDS`](crate::pod_fields::UNEVALUATED_FIELDS)
/// (pods the framework refuses for fields Convoy does not evaluate) for an
/// update of the pod itself: retry only if the fields it uses that Convoy does not evaluate
/// changed (volumes, claims and these container fields are immutable, so in
/// practice a refused pod waits for its deletion, or the periodic flush).
pub fn unevaluated_fields_hint(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let uses = |o: Option<&EventObject>| match o {
        Some(EventObject::Pod(p)) => p.spec.as_ref().map(unevaluated_fields),
        _ => None,
    };
    if uses(old) == uses(new) { QueueingHint::Skip } else { QueueingHint::Queue }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching() {
        let node_add = ClusterEvent::new(EventResource::Node, ActionType::ADD);
        let reg =
            ClusterEvent::new(EventResource::Node, ActionType::ADD | ActionType::UPDATE_NODE_TAINT);
        assert!(node_add.matches(&reg));
        let pod_del = ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE);
        assert!(pod_del.matches(&ClusterEvent::new(EventResource::Pod, ActionType::DELETE)));
        assert!(!pod_del.matches(&reg));
        assert!(pod_del.matches(&ClusterEvent::new(EventResource::WildCard, ActionType::ALL)));
        assert_eq!(format!("{:?}", ActionType::ADD | ActionType::DELETE), "Add|Delete");
        assert!(ActionType::UPDATE.intersects(ActionType::UPDATE_NODE_LABEL));
        assert!(!ActionType::UPDATE.intersects(ActionType::ADD));
        let claims = ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM;
        assert!(ActionType::UPDATE.intersects(claims) && ActionType::ALL.intersects(claims));
        assert!(!ActionType::UPDATE_OTHER.intersects(claims));
        assert_eq!(format!("{claims:?}"), "UpdatePodGeneratedResourceClaim");
    }
}
