//! The cluster objects besides nodes, pods and PodGroups that plugins read
//! (upstream's informer listers): Namespaces (their labels feed pod
//! affinity's `namespaceSelector`); the Services, ReplicationControllers,
//! ReplicaSets and StatefulSets whose selectors make the default topology
//! spreading constraints; the PodDisruptionBudgets preemption counts; and
//! the PriorityClasses pods' priorities come from; and the
//! PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
//! CSIDrivers and CSIStorageCapacities the volume plugins read; and the
//! DeviceClasses, ResourceSlices, ResourceClaims and DeviceTaintRules of
//! Dynamic Resource Allocation ([`dra`]); and the custom resources of the
//! kinds out-of-tree plugins registered ([`custom`]).
//!
//! This module is the contract: what a [`ClusterObject`] update is, and
//! what plugins can read ([`ObjectLister`], in every plugin's
//! [`Handle`](crate::Handle)). The store that holds the objects and
//! implements it is the `convoy-objects` crate's `ClusterObjects`, which
//! the scheduler fills from its adapter. Only what scheduling reads is kept
//! (labels and selectors; the trimmed volume objects themselves, see
//! [`trim`]).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::apis::{ApiInfo, ServedApis};
use crate::labels::{Labels, Selector};

pub mod custom;
pub mod dra;
pub mod trim;
pub mod volumes;

pub use custom::CustomObject;
pub use dra::{AllocatedDevices, DeviceId, DraStats};

pub use trim::ObjectKind;

/// An object of a kind the scheduler watches besides nodes, pods and
/// PodGroups.
#[derive(Debug, Clone)]
pub enum ClusterObject {
    /// A Namespace (its labels).
    Namespace(Arc<Namespace>),
    /// A Service (its selector).
    Service(Arc<Service>),
    /// A ReplicationController (its selector).
    ReplicationController(Arc<ReplicationController>),
    /// A ReplicaSet (its selector).
    ReplicaSet(Arc<ReplicaSet>),
    /// A StatefulSet (its selector).
    StatefulSet(Arc<StatefulSet>),
    /// A PodDisruptionBudget (its selector and how many disruptions it
    /// allows), `policy/v1`.
    PodDisruptionBudget(Arc<PodDisruptionBudget>),
    /// A PriorityClass (cluster-scoped), `scheduling.k8s.io/v1`.
    PriorityClass(Arc<PriorityClass>),
    /// A PersistentVolumeClaim (trimmed, see [`trim`]).
    PersistentVolumeClaim(Arc<PersistentVolumeClaim>),
    /// A PersistentVolume (cluster-scoped; trimmed, see [`trim`]).
    PersistentVolume(Arc<PersistentVolume>),
    /// A StorageClass (cluster-scoped), `storage.k8s.io/v1`.
    StorageClass(Arc<StorageClass>),
    /// A CSINode (cluster-scoped, named after its node), `storage.k8s.io/v1`.
    CSINode(Arc<CSINode>),
    /// A CSIDriver (cluster-scoped), `storage.k8s.io/v1`.
    CSIDriver(Arc<CSIDriver>),
    /// A CSIStorageCapacity (namespaced), `storage.k8s.io/v1`.
    CSIStorageCapacity(Arc<CSIStorageCapacity>),
    /// A DeviceClass (cluster-scoped), `resource.k8s.io/v1`.
    DeviceClass(Arc<DeviceClass>),
    /// A ResourceSlice (cluster-scoped), `resource.k8s.io/v1`.
    ResourceSlice(Arc<ResourceSlice>),
    /// A ResourceClaim (namespaced), `resource.k8s.io/v1`.
    ResourceClaim(Arc<ResourceClaim>),
    /// A DeviceTaintRule (cluster-scoped), `resource.k8s.io/v1`: a taint
    /// added to the devices its selector matches.
    DeviceTaintRule(Arc<DeviceTaintRule>),
}

impl ClusterObject {
    /// The object's kind (`Namespace`, `Service`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            ClusterObject::Namespace(_) => "Namespace",
            ClusterObject::Service(_) => "Service",
            ClusterObject::ReplicationController(_) => "ReplicationController",
            ClusterObject::ReplicaSet(_) => "ReplicaSet",
            ClusterObject::StatefulSet(_) => "StatefulSet",
            ClusterObject::PodDisruptionBudget(_) => "PodDisruptionBudget",
            ClusterObject::PriorityClass(_) => "PriorityClass",
            ClusterObject::PersistentVolumeClaim(_) => "PersistentVolumeClaim",
            ClusterObject::PersistentVolume(_) => "PersistentVolume",
            ClusterObject::StorageClass(_) => "StorageClass",
            ClusterObject::CSINode(_) => "CSINode",
            ClusterObject::CSIDriver(_) => "CSIDriver",
            ClusterObject::CSIStorageCapacity(_) => "CSIStorageCapacity",
            ClusterObject::DeviceClass(_) => "DeviceClass",
            ClusterObject::ResourceSlice(_) => "ResourceSlice",
            ClusterObject::ResourceClaim(_) => "ResourceClaim",
            ClusterObject::DeviceTaintRule(_) => "DeviceTaintRule",
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            ClusterObject::Namespace(o) => &o.metadata,
            ClusterObject::Service(o) => &o.metadata,
            ClusterObject::ReplicationController(o) => &o.metadata,
            ClusterObject::ReplicaSet(o) => &o.metadata,
            ClusterObject::StatefulSet(o) => &o.metadata,
            ClusterObject::PodDisruptionBudget(o) => &o.metadata,
            ClusterObject::PriorityClass(o) => &o.metadata,
            ClusterObject::PersistentVolumeClaim(o) => &o.metadata,
            ClusterObject::PersistentVolume(o) => &o.metadata,
            ClusterObject::StorageClass(o) => &o.metadata,
            ClusterObject::CSINode(o) => &o.metadata,
            ClusterObject::CSIDriver(o) => &o.metadata,
            ClusterObject::CSIStorageCapacity(o) => &o.metadata,
            ClusterObject::DeviceClass(o) => &o.metadata,
            ClusterObject::ResourceSlice(o) => &o.metadata,
            ClusterObject::ResourceClaim(o) => &o.metadata,
            ClusterObject::DeviceTaintRule(o) => &o.metadata,
        }
    }

    /// `namespace/name`, or `name` for a cluster-scoped kind (Namespace,
    /// PriorityClass, PersistentVolume, StorageClass, CSINode, CSIDriver,
    /// DeviceClass, ResourceSlice, DeviceTaintRule).
    pub fn key(&self) -> String {
        let m = self.metadata();
        let name = m.name.as_deref().unwrap_or("");
        match self {
            ClusterObject::Namespace(_)
            | ClusterObject::PriorityClass(_)
            | ClusterObject::PersistentVolume(_)
            | ClusterObject::StorageClass(_)
            | ClusterObject::CSINode(_)
            | ClusterObject::CSIDriver(_)
            | ClusterObject::DeviceClass(_)
            | ClusterObject::ResourceSlice(_)
            | ClusterObject::DeviceTaintRule(_) => name.to_string(),
            _ => format!("{}/{name}", m.namespace.as_deref().unwrap_or("default")),
        }
    }
}

/// An object's `(namespace, name)`, the key of the namespaced kinds
/// (namespace `default` when unset, as the API server defaults it).
pub fn ns_name(m: &ObjectMeta) -> (Arc<str>, Arc<str>) {
    (
        Arc::from(m.namespace.as_deref().unwrap_or("default")),
        Arc::from(m.name.as_deref().unwrap_or("")),
    )
}

/// A PodDisruptionBudget as preemption reads it (upstream
/// `filterPodsWithPDBViolation`, v1.37.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisruptionBudget {
    /// `metadata.namespace`.
    pub namespace: Arc<str>,
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `spec.selector`, compiled; `None` when it selects nothing: absent,
    /// empty (upstream v1.37 counts an empty selector as matching nothing
    /// here, unlike the disruption controller) or invalid.
    pub selector: Option<Selector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// The names in `status.disruptedPods` (evictions the API server has
    /// already counted).
    pub disrupted_pods: std::collections::BTreeSet<String>,
}

impl DisruptionBudget {
    /// Reads a PodDisruptionBudget.
    pub fn of(pdb: &PodDisruptionBudget) -> Self {
        let (ns, name) = ns_name(&pdb.metadata);
        let sel = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
        let empty = sel.is_none_or(|s| {
            s.match_labels.as_ref().is_none_or(|m| m.is_empty())
                && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
        });
        let selector = if empty { None } else { Selector::from_label_selector(sel).ok() };
        let status = pdb.status.as_ref();
        Self {
            namespace: ns,
            name,
            selector,
            disruptions_allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
            disrupted_pods: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// Whether the budget covers a pod (same namespace, labels matched by
    /// the selector; a pod without labels is never covered, as upstream).
    pub fn covers(&self, namespace: &str, labels: &Labels) -> bool {
        *self.namespace == *namespace
            && !labels.is_empty()
            && self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }
}

/// A PriorityClass as admission reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClassInfo {
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `value`.
    pub value: i32,
    /// `globalDefault`.
    pub global_default: bool,
    /// `preemptionPolicy` (`PreemptLowerPriority` when unset, as the API
    /// server defaults it).
    pub preemption_policy: Option<String>,
}

impl PriorityClassInfo {
    /// Reads a PriorityClass.
    pub fn of(pc: &PriorityClass) -> Self {
        Self {
            name: Arc::from(pc.metadata.name.as_deref().unwrap_or("")),
            value: pc.value.unwrap_or(0),
            global_default: pc.global_default.unwrap_or(false),
            preemption_policy: pc.preemption_policy.clone(),
        }
    }
}

/// What plugins read of the [`ClusterObject`]s (upstream's listers), from
/// the store every profile shares through the [`Handle`](crate::Handle).
/// Reads are short and return shared values; a plugin never writes here
/// (the scheduler applies the adapter's updates).
pub trait ObjectLister: Send + Sync + std::fmt::Debug {
    /// Which optional APIs the server serves ([`crate::apis`]): all of
    /// them until discovery says otherwise.
    fn served_apis(&self) -> Arc<ServedApis>;

    /// A DeviceClass by name.
    fn device_class(&self, name: &str) -> Option<Arc<DeviceClass>>;

    /// Every DeviceClass, in no particular order.
    fn device_classes(&self) -> Vec<Arc<DeviceClass>>;

    /// Every ResourceSlice, sorted by name, with
    /// [`resource_slices_version`](Self::resource_slices_version) at the
    /// time they were read.
    fn resource_slices(&self) -> (Vec<Arc<ResourceSlice>>, u64);

    /// A number that changes whenever a ResourceSlice is added, changed or
    /// deleted.
    fn resource_slices_version(&self) -> u64;

    /// Every DeviceTaintRule, sorted by name, with
    /// [`device_taint_rules_version`](Self::device_taint_rules_version) at
    /// the time they were read.
    fn device_taint_rules(&self) -> (Vec<Arc<DeviceTaintRule>>, u64);

    /// A number that changes whenever a DeviceTaintRule is added, changed
    /// or deleted.
    fn device_taint_rules_version(&self) -> u64;

    /// A ResourceClaim by namespace and name.
    fn resource_claim(&self, namespace: &str, name: &str) -> Option<Arc<ResourceClaim>>;

    /// Calls `f` once with the devices held by the allocations of the
    /// claims in the store (upstream's allocated-devices tracker), under
    /// the store's read lock: keep `f` short (one node's search). Not a
    /// copy, so that claim updates never copy the index. Plugins call
    /// `with_allocated_devices` (on `dyn ObjectLister`), which returns
    /// `f`'s result.
    fn visit_allocated_devices(&self, f: &mut dyn FnMut(&AllocatedDevices));

    /// A PersistentVolumeClaim by namespace and name (upstream's PVC
    /// lister).
    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;

    /// A PersistentVolume by name.
    fn pv(&self, name: &str) -> Option<Arc<PersistentVolume>>;

    /// A StorageClass by name.
    fn storage_class(&self, name: &str) -> Option<Arc<StorageClass>>;

    /// The PersistentVolumes of a StorageClass (`spec.storageClassName`;
    /// `""`: those without one), sorted by name (upstream's PV cache
    /// `ListPVs(class)`, whose order is the informer's).
    fn pvs_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>>;

    /// The CSINode of a node (named after it).
    fn csi_node(&self, node: &str) -> Option<Arc<CSINode>>;

    /// A CSIDriver by name (upstream's CSIDriver lister).
    fn csi_driver(&self, name: &str) -> Option<Arc<CSIDriver>>;

    /// Every CSIStorageCapacity, sorted by namespace and name (upstream's
    /// lister returns them in no particular order).
    fn csi_storage_capacities(&self) -> Vec<Arc<CSIStorageCapacity>>;

    /// Every PodDisruptionBudget, sorted by namespace and name (preemption
    /// lists them once per attempt).
    fn pod_disruption_budgets(&self) -> Vec<Arc<DisruptionBudget>>;

    /// Every PriorityClass, sorted by name.
    fn priority_classes(&self) -> Vec<Arc<PriorityClassInfo>>;

    /// The labels of a namespace; `None` when the namespace is unknown.
    fn namespace_labels(&self, name: &str) -> Option<Arc<Labels>>;

    /// A number that changes whenever a Namespace is added, changed or
    /// deleted: what a plugin derived from the namespaces (such as the
    /// namespaces a selector selects) stays valid while it is unchanged.
    fn namespaces_version(&self) -> u64;

    /// The names of the namespaces whose labels match, sorted.
    fn namespaces_matching(&self, selector: &Selector) -> Vec<Arc<str>>;

    /// The selectors of the Services in a namespace that have one, by name.
    fn service_selectors(&self, namespace: &str) -> Vec<Arc<Labels>>;

    /// A ReplicationController's selector (empty when it has none).
    fn replication_controller_selector(&self, namespace: &str, name: &str) -> Option<Arc<Labels>>;

    /// A ReplicaSet's selector.
    fn replica_set_selector(&self, namespace: &str, name: &str) -> Option<Arc<LabelSelector>>;

    /// A StatefulSet's selector.
    fn stateful_set_selector(&self, namespace: &str, name: &str) -> Option<Arc<LabelSelector>>;

    /// Every custom resource of `api` (a kind a plugin registered with
    /// `Registry::watch_kind`), by `namespace/name`.
    fn custom_objects(&self, api: &ApiInfo) -> Vec<Arc<CustomObject>>;

    /// One custom resource of `api` by namespace (`None` for a
    /// cluster-scoped kind) and name.
    fn custom_object(
        &self,
        api: &ApiInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<CustomObject>>;

    /// A number bumped on every change of `api`'s custom resources: a
    /// plugin that derives something from them recomputes it only when it
    /// changed.
    fn custom_version(&self, api: &ApiInfo) -> u64;
}

impl dyn ObjectLister + '_ {
    /// Runs `f` on the devices held by the allocations of the claims in
    /// the store (upstream's allocated-devices tracker), under the store's
    /// read lock, and returns its result: keep `f` short (one node's
    /// search).
    pub fn with_allocated_devices<R>(&self, f: impl FnOnce(&AllocatedDevices) -> R) -> R {
        let mut f = Some(f);
        let mut out = None;
        self.visit_allocated_devices(&mut |devices| out = f.take().map(|f| f(devices)));
        out.expect("an ObjectLister's visit_allocated_devices calls its function once")
    }
}
