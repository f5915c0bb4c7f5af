//! Plugin names this crate refers to, as upstream spells them.

/// `SchedulingGates` (PreEnqueue).
pub const SCHEDULING_GATES: &str = "SchedulingGates";
/// `PrioritySort` (QueueSort).
pub const PRIORITY_SORT: &str = "PrioritySort";
/// `NodeUnschedulable`.
pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
/// `NodeName`.
pub const NODE_NAME: &str = "NodeName";
/// `TaintToleration`.
pub const TAINT_TOLERATION: &str = "TaintToleration";
/// `NodeAffinity`.
pub const NODE_AFFINITY: &str = "NodeAffinity";
/// `NodePorts`.
pub const NODE_PORTS: &str = "NodePorts";
/// `NodeResourcesFit`.
pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
/// `InterPodAffinity`.
pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
/// `PodTopologySpread`.
pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
/// `NodeResourcesBalancedAllocation`.
pub const NODE_RESOURCES_BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
/// `ImageLocality` (Score).
pub const IMAGE_LOCALITY: &str = "ImageLocality";
/// `DefaultBinder`.
pub const DEFAULT_BINDER: &str = "DefaultBinder";
/// `GangScheduling` (PreEnqueue, PreFilter, Reserve, Permit): gangs of
/// both PodGroup APIs; built by the scheduler (`convoy-gang`).
pub const GANG_SCHEDULING: &str = "GangScheduling";
/// `Coscheduling`: scheduler-plugins' name for the same plugin (an
/// alias; enabling it replaces the default `GangScheduling`).
pub const COSCHEDULING: &str = "Coscheduling";
/// `GpuPlacement` (Convoy's own; not in the default set, enabled by a profile).
pub const GPU_PLACEMENT: &str = "GpuPlacement";

/// `DefaultPreemption` (PostFilter).
pub const DEFAULT_PREEMPTION: &str = "DefaultPreemption";

/// `VolumeBinding`: PVCs and generic ephemeral volumes (bound claims'
/// volumes; WaitForFirstConsumer claims bound on the chosen node).
pub const VOLUME_BINDING: &str = "VolumeBinding";
/// `VolumeRestrictions`: in-tree disk conflicts, ReadWriteOncePod PVCs.
pub const VOLUME_RESTRICTIONS: &str = "VolumeRestrictions";
/// `VolumeZone`: the zones of bound PVs.
pub const VOLUME_ZONE: &str = "VolumeZone";
/// `NodeVolumeLimits`: CSI attach limits.
pub const NODE_VOLUME_LIMITS: &str = "NodeVolumeLimits";

// Upstream default plugins (v1.37) Convoy does not implement yet: named
// by the pod-field table (`convoy_api::pod_fields`) and the framework,
// which refuses the pods they would have to evaluate.

/// `DynamicResources`: ResourceClaims and DRA extended resources.
pub const DYNAMIC_RESOURCES: &str = "DynamicResources";
/// `NodeDeclaredFeatures`: node features a pod requires (default since
/// 1.37, when its feature gate went GA).
pub const NODE_DECLARED_FEATURES: &str = "NodeDeclaredFeatures";
