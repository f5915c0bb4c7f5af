//! The cluster objects besides nodes, pods and PodGroups that plugins read
//! (upstream's informer listers): Namespaces (their labels feed pod
//! affinity's `namespaceSelector`); the Services, ReplicationControllers,
//! ReplicaSets and StatefulSets whose selectors make the default topology
//! spreading constraints; the PodDisruptionBudgets preemption counts; and
//! the PriorityClasses pods' priorities come from; and the
//! PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
//! CSIDrivers and CSIStorageCapacities the volume plugins read; and the
//! DeviceClasses, ResourceSlices, ResourceClaims and DeviceTaintRules of
//! Dynamic Resource Allocation ([`dra`]).
//!
//! The scheduler applies every [`ClusterObject`] update to one
//! [`ClusterObjects`] store, which every profile's plugins share through the
//! [`Handle`](crate::Handle). Only what scheduling reads is kept (labels and
//! selectors; the trimmed volume objects themselves, see [`trim`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::labels::{Labels, Selector};

pub mod custom;
pub mod dra;
pub mod trim;
pub mod volumes;

pub use custom::{CustomObject, CustomObjects};
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

type NsName = (Arc<str>, Arc<str>);

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

/// The PriorityClasses every API server creates at start-up
/// (`system-cluster-critical`, `system-node-critical`).
pub fn system_priority_classes() -> [PriorityClassInfo; 2] {
    [
        PriorityClassInfo {
            name: Arc::from("system-cluster-critical"),
            value: 2_000_000_000,
            global_default: false,
            preemption_policy: None,
        },
        PriorityClassInfo {
            name: Arc::from("system-node-critical"),
            value: 2_000_001_000,
            global_default: false,
            preemption_policy: None,
        },
    ]
}

/// The class the Priority admission plugin resolves `name` to: the named
/// one (the system classes are always known; an unknown name is an error
/// naming `spec.priorityClassName`), or with no name the `globalDefault`
/// class (the lowest if several), or none.
fn resolve_priority_class(
    name: &str,
    classes: &[PriorityClassInfo],
) -> Result<Option<PriorityClassInfo>, String> {
    if name.is_empty() {
        return Ok(classes.iter().filter(|c| c.global_default).min_by_key(|c| c.value).cloned());
    }
    let system = system_priority_classes();
    let found = classes.iter().chain(system.iter()).find(|c| *c.name == *name);
    found.cloned().map(Some).ok_or_else(|| {
        format!("spec.priorityClassName: no PriorityClass with name {name} was found")
    })
}

/// What the Priority admission plugin decides for a new pod (upstream
/// `plugin/pkg/admission/priority`, v1.37.2): a pod that sets
/// `spec.priority` keeps it; otherwise `spec.priorityClassName` is resolved
/// (an unknown name refuses the pod, naming the field), or the
/// `globalDefault` class (the lowest if several), or priority 0. The
/// class's `preemptionPolicy` is copied when the pod sets none. `classes`
/// are the cluster's PriorityClasses; the system classes are always known.
pub fn admit_priority(
    spec: &mut k8s_openapi::api::core::v1::PodSpec,
    classes: &[PriorityClassInfo],
) -> Result<(), String> {
    if spec.priority.is_some() {
        return Ok(());
    }
    let name = spec.priority_class_name.as_deref().unwrap_or("");
    match resolve_priority_class(name, classes)? {
        Some(c) => {
            spec.priority = Some(c.value);
            spec.priority_class_name = Some(c.name.to_string());
            if spec.preemption_policy.is_none() {
                spec.preemption_policy =
                    Some(c.preemption_policy.clone().unwrap_or("PreemptLowerPriority".into()));
            }
        }
        None => {
            spec.priority = Some(0);
            if spec.preemption_policy.is_none() {
                spec.preemption_policy = Some("PreemptLowerPriority".into());
            }
        }
    }
    Ok(())
}

/// What the Priority admission plugin decides for a new upstream
/// (`scheduling.k8s.io`) PodGroup, its JSON form changed in place (upstream
/// `admitPodGroup`, v1.37.2): as [`admit_priority`] for pods, a group that
/// sets `spec.priority` keeps it; otherwise `spec.priorityClassName` is
/// resolved (an unknown name refuses the group, naming the field), or the
/// `globalDefault` class, or priority 0; the class's `preemptionPolicy` is
/// copied when the group sets none. Objects of other APIs are unchanged.
pub fn admit_pod_group_priority(
    group: &mut serde_json::Value,
    classes: &[PriorityClassInfo],
) -> Result<(), String> {
    use serde_json::Value;
    if group.get("apiVersion").and_then(Value::as_str)
        != Some(crate::pod_group::UPSTREAM_API_VERSION)
    {
        return Ok(());
    }
    let Some(root) = group.as_object_mut() else { return Ok(()) };
    let spec = root.entry("spec").or_insert_with(|| Value::Object(Default::default()));
    let Some(spec) = spec.as_object_mut() else { return Ok(()) };
    if spec.get("priority").is_some_and(|p| !p.is_null()) {
        return Ok(());
    }
    let name = spec.get("priorityClassName").and_then(Value::as_str).unwrap_or("");
    let (value, class_name, policy) = match resolve_priority_class(name, classes)? {
        Some(c) => (c.value, c.name.to_string(), c.preemption_policy.clone()),
        None => (0, String::new(), None),
    };
    spec.insert("priority".into(), Value::from(value));
    if !class_name.is_empty() {
        spec.insert("priorityClassName".into(), Value::from(class_name));
    }
    if let Some(policy) = policy {
        spec.entry("preemptionPolicy").or_insert(Value::from(policy));
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Inner {
    namespaces: HashMap<Arc<str>, Arc<Labels>>,
    /// Bumped on every Namespace added, changed or deleted.
    namespaces_version: u64,
    /// Services with a selector, by namespace then name (a Service without
    /// a selector selects no pod).
    services: HashMap<Arc<str>, BTreeMap<Arc<str>, Arc<Labels>>>,
    replication_controllers: HashMap<NsName, Arc<Labels>>,
    replica_sets: HashMap<NsName, Arc<LabelSelector>>,
    stateful_sets: HashMap<NsName, Arc<LabelSelector>>,
    /// PodDisruptionBudgets, sorted by namespace and name.
    pdbs: BTreeMap<NsName, Arc<DisruptionBudget>>,
    priority_classes: HashMap<Arc<str>, Arc<PriorityClassInfo>>,
    pvcs: HashMap<NsName, Arc<PersistentVolumeClaim>>,
    pvs: HashMap<Arc<str>, Arc<PersistentVolume>>,
    storage_classes: HashMap<Arc<str>, Arc<StorageClass>>,
    /// Read once per node a pod with claims is filtered on (NodeVolumeLimits):
    /// the fast hasher.
    csi_nodes: HashMap<Arc<str>, Arc<CSINode>, foldhash::fast::RandomState>,
    csi_drivers: HashMap<Arc<str>, Arc<CSIDriver>>,
    /// Sorted by namespace and name.
    csi_storage_capacities: BTreeMap<NsName, Arc<CSIStorageCapacity>>,
    device_classes: HashMap<Arc<str>, Arc<DeviceClass>>,
    /// Sorted by name.
    resource_slices: BTreeMap<Arc<str>, Arc<ResourceSlice>>,
    /// Bumped on every ResourceSlice added, changed or deleted.
    resource_slices_version: u64,
    resource_claims: HashMap<NsName, Arc<ResourceClaim>>,
    /// Sorted by name.
    device_taint_rules: BTreeMap<Arc<str>, Arc<DeviceTaintRule>>,
    /// Bumped on every DeviceTaintRule added, changed or deleted.
    device_taint_rules_version: u64,
    /// The devices the held claims' allocations hold.
    allocated: AllocatedDevices,
    /// Which optional APIs the server serves (all, until told otherwise).
    served: Arc<crate::apis::ServedApis>,
}

/// The store of [`ClusterObject`]s: one writer (the scheduler's event
/// path), many readers (plugins, once per cycle, or once per node for the
/// CSINodes). Reads take a short read lock and return shared values.
#[derive(Debug, Default)]
pub struct ClusterObjects {
    inner: RwLock<Inner>,
    custom: CustomObjects,
}

fn ns_name(m: &ObjectMeta) -> NsName {
    (
        Arc::from(m.namespace.as_deref().unwrap_or("default")),
        Arc::from(m.name.as_deref().unwrap_or("")),
    )
}

impl ClusterObjects {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The custom resources of the kinds plugins registered
    /// ([`custom`]).
    pub fn custom(&self) -> &CustomObjects {
        &self.custom
    }

    /// Which optional APIs the server serves ([`crate::apis`]): all of
    /// them until [`set_served_apis`](Self::set_served_apis) says
    /// otherwise.
    pub fn served_apis(&self) -> Arc<crate::apis::ServedApis> {
        self.read().served.clone()
    }

    /// Records what discovery found; returns whether it changed.
    pub fn set_served_apis(&self, served: Arc<crate::apis::ServedApis>) -> bool {
        let mut st = self.write();
        if *st.served == *served {
            return false;
        }
        st.served = served;
        true
    }

    /// An object was added or changed. Returns the version it replaces
    /// for the volume kinds (PersistentVolumeClaim, PersistentVolume,
    /// StorageClass, CSINode, CSIDriver, CSIStorageCapacity) and the DRA
    /// kinds (DeviceClass, ResourceSlice, ResourceClaim, DeviceTaintRule), whose changes
    /// the queue hears about;
    /// `None` for the others, and for an object not held before.
    pub fn apply(&self, obj: &ClusterObject) -> Option<ClusterObject> {
        let mut st = self.write();
        let m = obj.metadata();
        match obj {
            ClusterObject::PersistentVolumeClaim(o) => {
                return st
                    .pvcs
                    .insert(ns_name(m), o.clone())
                    .map(ClusterObject::PersistentVolumeClaim);
            }
            ClusterObject::PersistentVolume(o) => {
                return st.pvs.insert(ns_name(m).1, o.clone()).map(ClusterObject::PersistentVolume);
            }
            ClusterObject::StorageClass(o) => {
                return st
                    .storage_classes
                    .insert(ns_name(m).1, o.clone())
                    .map(ClusterObject::StorageClass);
            }
            ClusterObject::CSINode(o) => {
                return st.csi_nodes.insert(ns_name(m).1, o.clone()).map(ClusterObject::CSINode);
            }
            ClusterObject::CSIDriver(o) => {
                return st
                    .csi_drivers
                    .insert(ns_name(m).1, o.clone())
                    .map(ClusterObject::CSIDriver);
            }
            ClusterObject::CSIStorageCapacity(o) => {
                return st
                    .csi_storage_capacities
                    .insert(ns_name(m), o.clone())
                    .map(ClusterObject::CSIStorageCapacity);
            }
            ClusterObject::DeviceClass(o) => {
                return st
                    .device_classes
                    .insert(ns_name(m).1, o.clone())
                    .map(ClusterObject::DeviceClass);
            }
            ClusterObject::ResourceSlice(o) => {
                st.resource_slices_version += 1;
                return st
                    .resource_slices
                    .insert(ns_name(m).1, o.clone())
                    .map(ClusterObject::ResourceSlice);
            }
            ClusterObject::DeviceTaintRule(o) => {
                st.device_taint_rules_version += 1;
                return st
                    .device_taint_rules
                    .insert(ns_name(m).1, o.clone())
                    .map(ClusterObject::DeviceTaintRule);
            }
            ClusterObject::ResourceClaim(o) => {
                let old = st.resource_claims.insert(ns_name(m), o.clone());
                let allocated = &mut st.allocated;
                if let Some(old) = &old {
                    allocated.remove(old);
                }
                allocated.add(o);
                return old.map(ClusterObject::ResourceClaim);
            }
            ClusterObject::Namespace(ns) => {
                let labels = ns.metadata.labels.clone().unwrap_or_default();
                st.namespaces.insert(ns_name(m).1, Arc::new(labels));
                st.namespaces_version += 1;
            }
            ClusterObject::Service(s) => {
                let (ns, name) = ns_name(m);
                match s.spec.as_ref().and_then(|s| s.selector.clone()) {
                    Some(sel) => {
                        st.services.entry(ns).or_default().insert(name, Arc::new(sel));
                    }
                    None => {
                        if let Some(by_name) = st.services.get_mut(&ns) {
                            by_name.remove(&name);
                        }
                    }
                }
            }
            ClusterObject::ReplicationController(rc) => {
                let sel = rc.spec.as_ref().and_then(|s| s.selector.clone()).unwrap_or_default();
                st.replication_controllers.insert(ns_name(m), Arc::new(sel));
            }
            ClusterObject::ReplicaSet(rs) => {
                let sel = rs.spec.selector.clone();
                st.replica_sets.insert(ns_name(m), Arc::new(sel));
            }
            ClusterObject::StatefulSet(ss) => {
                let sel = ss.spec.selector.clone();
                st.stateful_sets.insert(ns_name(m), Arc::new(sel));
            }
            ClusterObject::PodDisruptionBudget(pdb) => {
                st.pdbs.insert(ns_name(m), Arc::new(DisruptionBudget::of(pdb)));
            }
            ClusterObject::PriorityClass(pc) => {
                let pc = PriorityClassInfo::of(pc);
                st.priority_classes.insert(pc.name.clone(), Arc::new(pc));
            }
        }
        None
    }

    /// An object was deleted.
    pub fn delete(&self, obj: &ClusterObject) {
        let mut st = self.write();
        let key = ns_name(obj.metadata());
        match obj {
            ClusterObject::Namespace(_) => {
                st.namespaces.remove(&key.1);
                st.namespaces_version += 1;
            }
            ClusterObject::Service(_) => {
                if let Some(by_name) = st.services.get_mut(&key.0) {
                    by_name.remove(&key.1);
                    if by_name.is_empty() {
                        st.services.remove(&key.0);
                    }
                }
            }
            ClusterObject::ReplicationController(_) => {
                st.replication_controllers.remove(&key);
            }
            ClusterObject::ReplicaSet(_) => {
                st.replica_sets.remove(&key);
            }
            ClusterObject::StatefulSet(_) => {
                st.stateful_sets.remove(&key);
            }
            ClusterObject::PodDisruptionBudget(_) => {
                st.pdbs.remove(&key);
            }
            ClusterObject::PriorityClass(_) => {
                st.priority_classes.remove(&key.1);
            }
            ClusterObject::PersistentVolumeClaim(_) => {
                st.pvcs.remove(&key);
            }
            ClusterObject::PersistentVolume(_) => {
                st.pvs.remove(&key.1);
            }
            ClusterObject::StorageClass(_) => {
                st.storage_classes.remove(&key.1);
            }
            ClusterObject::CSINode(_) => {
                st.csi_nodes.remove(&key.1);
            }
            ClusterObject::CSIDriver(_) => {
                st.csi_drivers.remove(&key.1);
            }
            ClusterObject::CSIStorageCapacity(_) => {
                st.csi_storage_capacities.remove(&key);
            }
            ClusterObject::DeviceClass(_) => {
                st.device_classes.remove(&key.1);
            }
            ClusterObject::ResourceSlice(_) => {
                st.resource_slices_version += 1;
                st.resource_slices.remove(&key.1);
            }
            ClusterObject::DeviceTaintRule(_) => {
                st.device_taint_rules_version += 1;
                st.device_taint_rules.remove(&key.1);
            }
            ClusterObject::ResourceClaim(_) => {
                if let Some(old) = st.resource_claims.remove(&key) {
                    st.allocated.remove(&old);
                }
            }
        }
    }

    /// A DeviceClass by name.
    pub fn device_class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self.read().device_classes.get(name).cloned()
    }

    /// Every DeviceClass, in no particular order.
    pub fn device_classes(&self) -> Vec<Arc<DeviceClass>> {
        self.read().device_classes.values().cloned().collect()
    }

    /// Every ResourceSlice, sorted by name, with
    /// [`resource_slices_version`](Self::resource_slices_version) at the
    /// time they were read.
    pub fn resource_slices(&self) -> (Vec<Arc<ResourceSlice>>, u64) {
        let st = self.read();
        (st.resource_slices.values().cloned().collect(), st.resource_slices_version)
    }

    /// A number that changes whenever a ResourceSlice is added, changed or
    /// deleted.
    pub fn resource_slices_version(&self) -> u64 {
        self.read().resource_slices_version
    }

    /// Every DeviceTaintRule, sorted by name, with
    /// [`device_taint_rules_version`](Self::device_taint_rules_version) at
    /// the time they were read.
    pub fn device_taint_rules(&self) -> (Vec<Arc<DeviceTaintRule>>, u64) {
        let st = self.read();
        (st.device_taint_rules.values().cloned().collect(), st.device_taint_rules_version)
    }

    /// A number that changes whenever a DeviceTaintRule is added, changed
    /// or deleted.
    pub fn device_taint_rules_version(&self) -> u64 {
        self.read().device_taint_rules_version
    }

    /// A ResourceClaim by namespace and name.
    pub fn resource_claim(&self, namespace: &str, name: &str) -> Option<Arc<ResourceClaim>> {
        self.read().resource_claims.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    /// Runs `f` on the devices held by the allocations of the claims in
    /// the store (upstream's allocated-devices tracker), under the store's
    /// read lock: keep `f` short (one node's search). Not a copy, so that
    /// claim updates never copy the index.
    pub fn with_allocated_devices<R>(&self, f: impl FnOnce(&AllocatedDevices) -> R) -> R {
        f(&self.read().allocated)
    }

    /// A PersistentVolumeClaim by namespace and name (upstream's PVC
    /// lister).
    pub fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.read().pvcs.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    /// A PersistentVolume by name.
    pub fn pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.read().pvs.get(name).cloned()
    }

    /// A StorageClass by name.
    pub fn storage_class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.read().storage_classes.get(name).cloned()
    }

    /// The PersistentVolumes of a StorageClass (`spec.storageClassName`;
    /// `""`: those without one), sorted by name (upstream's PV cache
    /// `ListPVs(class)`, whose order is the informer's).
    pub fn pvs_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>> {
        let mut pvs: Vec<_> = self
            .read()
            .pvs
            .values()
            .filter(|pv| {
                pv.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("")
                    == class
            })
            .cloned()
            .collect();
        pvs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        pvs
    }

    /// The CSINode of a node (named after it).
    pub fn csi_node(&self, node: &str) -> Option<Arc<CSINode>> {
        self.read().csi_nodes.get(node).cloned()
    }

    /// A CSIDriver by name (upstream's CSIDriver lister).
    pub fn csi_driver(&self, name: &str) -> Option<Arc<CSIDriver>> {
        self.read().csi_drivers.get(name).cloned()
    }

    /// Every CSIStorageCapacity, sorted by namespace and name (upstream's
    /// lister returns them in no particular order).
    pub fn csi_storage_capacities(&self) -> Vec<Arc<CSIStorageCapacity>> {
        self.read().csi_storage_capacities.values().cloned().collect()
    }

    /// Every PodDisruptionBudget, sorted by namespace and name (preemption
    /// lists them once per attempt).
    pub fn pod_disruption_budgets(&self) -> Vec<Arc<DisruptionBudget>> {
        self.read().pdbs.values().cloned().collect()
    }

    /// Every PriorityClass, sorted by name.
    pub fn priority_classes(&self) -> Vec<Arc<PriorityClassInfo>> {
        let mut v: Vec<_> = self.read().priority_classes.values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The labels of a namespace; `None` when the namespace is unknown.
    pub fn namespace_labels(&self, name: &str) -> Option<Arc<Labels>> {
        self.read().namespaces.get(name).cloned()
    }

    /// A number that changes whenever a Namespace is added, changed or
    /// deleted: what a plugin derived from the namespaces (such as the
    /// namespaces a selector selects) stays valid while it is unchanged.
    pub fn namespaces_version(&self) -> u64 {
        self.read().namespaces_version
    }

    /// The names of the namespaces whose labels match, sorted.
    pub fn namespaces_matching(&self, selector: &Selector) -> Vec<Arc<str>> {
        let mut v: Vec<Arc<str>> = self
            .read()
            .namespaces
            .iter()
            .filter(|(_, l)| selector.matches(l))
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }

    /// The selectors of the Services in a namespace that have one, by name.
    pub fn service_selectors(&self, namespace: &str) -> Vec<Arc<Labels>> {
        self.read()
            .services
            .get(namespace)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// A ReplicationController's selector (empty when it has none).
    pub fn replication_controller_selector(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Labels>> {
        self.read().replication_controllers.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    /// A ReplicaSet's selector.
    pub fn replica_set_selector(&self, namespace: &str, name: &str) -> Option<Arc<LabelSelector>> {
        self.read().replica_sets.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    /// A StatefulSet's selector.
    pub fn stateful_set_selector(&self, namespace: &str, name: &str) -> Option<Arc<LabelSelector>> {
        self.read().stateful_sets.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    /// How many objects of each kind are held (for logs and tests).
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let st = self.read();
        BTreeMap::from([
            ("Namespace", st.namespaces.len()),
            ("Service", st.services.values().map(BTreeMap::len).sum()),
            ("ReplicationController", st.replication_controllers.len()),
            ("ReplicaSet", st.replica_sets.len()),
            ("StatefulSet", st.stateful_sets.len()),
            ("PodDisruptionBudget", st.pdbs.len()),
            ("PriorityClass", st.priority_classes.len()),
            ("PersistentVolumeClaim", st.pvcs.len()),
            ("PersistentVolume", st.pvs.len()),
            ("StorageClass", st.storage_classes.len()),
            ("CSINode", st.csi_nodes.len()),
            ("CSIDriver", st.csi_drivers.len()),
            ("CSIStorageCapacity", st.csi_storage_capacities.len()),
            ("DeviceClass", st.device_classes.len()),
            ("ResourceSlice", st.resource_slices.len()),
            ("ResourceClaim", st.resource_claims.len()),
            ("DeviceTaintRule", st.device_taint_rules.len()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    macro_rules! obj {
        ($v:expr) => {
            Arc::new(serde_json::from_value($v).unwrap())
        };
    }

    /// Upstream PodGroups get their priority as the Priority admission
    /// plugin gives it; scheduler-plugins' are left alone.
    #[test]
    fn pod_group_priority_is_admitted_from_its_class() {
        let class = |name: &str, value, default, policy: Option<&str>| PriorityClassInfo {
            name: Arc::from(name),
            value,
            global_default: default,
            preemption_policy: policy.map(String::from),
        };
        let classes = [class("urgent", 1000, false, Some("Never")), class("base", 5, true, None)];
        let group = |spec: serde_json::Value| json!({"apiVersion": "scheduling.k8s.io/v1beta1", "metadata": {"name": "g"}, "spec": spec});
        let admit = |mut g: serde_json::Value, classes: &[PriorityClassInfo]| {
            admit_pod_group_priority(&mut g, classes).map(|()| g["spec"].clone())
        };
        let spec = admit(group(json!({"priorityClassName": "urgent"})), &classes).unwrap();
        assert_eq!(
            spec,
            json!({"priorityClassName": "urgent", "priority": 1000, "preemptionPolicy": "Never"})
        );
        let spec = admit(group(json!({})), &classes).unwrap();
        assert_eq!(spec, json!({"priorityClassName": "base", "priority": 5}));
        assert_eq!(admit(group(json!({})), &[]).unwrap(), json!({"priority": 0}));
        let kept = json!({"priorityClassName": "gone", "priority": 7});
        assert_eq!(admit(group(kept.clone()), &[]).unwrap(), kept, "a dump keeps its priority");
        let err = admit(group(json!({"priorityClassName": "gone"})), &classes).unwrap_err();
        assert_eq!(err, "spec.priorityClassName: no PriorityClass with name gone was found");
        let x = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "spec": {"minMember": 2}});
        assert_eq!(admit(x.clone(), &classes).unwrap(), x["spec"]);
    }

    #[test]
    fn keeps_labels_and_selectors() {
        let s = ClusterObjects::new();
        let ns = ClusterObject::Namespace(obj!(
            json!({"metadata": {"name": "a", "labels": {"team": "x"}}})
        ));
        s.apply(&ns);
        s.apply(&ClusterObject::Namespace(obj!(json!({"metadata": {"name": "b"}}))));
        let team = Selector::from_set(&[("team".to_string(), "x".to_string())].into());
        let v = s.namespaces_version();
        assert_eq!(s.namespaces_matching(&team), vec![Arc::from("a")]);
        assert_eq!(s.namespaces_matching(&Selector::everything()).len(), 2);
        assert_eq!(s.namespace_labels("a").unwrap().get("team").unwrap(), "x");
        s.delete(&ns);
        assert!(s.namespace_labels("a").is_none());
        assert_ne!(s.namespaces_version(), v, "a namespace change changes the version");

        let svc =
            ClusterObject::Service(obj!(json!({"metadata": {"name": "web", "namespace": "n"},
            "spec": {"selector": {"app": "web"}}})));
        s.apply(&svc);
        s.apply(&ClusterObject::Service(obj!(
            json!({"metadata": {"name": "headless", "namespace": "n"}, "spec": {}})
        )));
        assert_eq!(s.service_selectors("n").len(), 1);
        s.delete(&svc);
        assert!(s.service_selectors("n").is_empty());

        let rs =
            ClusterObject::ReplicaSet(obj!(json!({"metadata": {"name": "r", "namespace": "n"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}})));
        s.apply(&rs);
        assert!(s.replica_set_selector("n", "r").is_some());
        assert!(s.stateful_set_selector("n", "r").is_none());
        assert_eq!(rs.key(), "n/r");
        assert_eq!(s.counts()["ReplicaSet"], 1);
    }

    #[test]
    fn keeps_disruption_budgets_and_priority_classes() {
        let s = ClusterObjects::new();
        let pdb = |name: &str, selector: serde_json::Value| {
            ClusterObject::PodDisruptionBudget(obj!(json!({
                "metadata": {"name": name, "namespace": "n"},
                "spec": {"selector": selector},
                "status": {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1,
                           "expectedPods": 2, "disruptedPods": {"p1": "2026-01-01T00:00:00Z"}}
            })))
        };
        s.apply(&pdb("b", json!({"matchLabels": {"app": "web"}})));
        s.apply(&pdb("a", json!({})));
        let all = s.pod_disruption_budgets();
        assert_eq!(all.iter().map(|p| &*p.name).collect::<Vec<_>>(), ["a", "b"]);
        assert!(all[0].selector.is_none(), "an empty selector matches nothing");
        let web: Labels = [("app".to_string(), "web".to_string())].into();
        assert!(all[1].covers("n", &web));
        assert!(!all[1].covers("other", &web));
        assert!(!all[1].covers("n", &Labels::new()), "a pod without labels is never covered");
        assert_eq!(all[1].disruptions_allowed, 1);
        assert!(all[1].disrupted_pods.contains("p1"));
        s.delete(&pdb("a", json!({})));
        assert_eq!(s.pod_disruption_budgets().len(), 1);

        let pc = ClusterObject::PriorityClass(obj!(
            json!({"metadata": {"name": "high"}, "value": 1000, "globalDefault": true})
        ));
        assert_eq!(pc.key(), "high");
        s.apply(&pc);
        assert_eq!(s.priority_classes()[0].value, 1000);
        assert_eq!(s.counts()["PriorityClass"], 1);
        s.delete(&pc);
        assert!(s.priority_classes().is_empty());
    }

    #[test]
    fn keeps_volume_objects_and_returns_the_replaced_version() {
        let s = ClusterObjects::new();
        let pvc = |volume: &str| {
            ClusterObject::PersistentVolumeClaim(obj!(json!({
                "metadata": {"name": "data", "namespace": "n"}, "spec": {"volumeName": volume}
            })))
        };
        assert!(s.apply(&pvc("")).is_none(), "a new claim replaces nothing");
        let old = s.apply(&pvc("pv1")).expect("the claim was held");
        assert_eq!(old.key(), "n/data");
        assert_eq!(
            s.pvc("n", "data").unwrap().spec.as_ref().unwrap().volume_name.as_deref(),
            Some("pv1")
        );
        assert!(s.pvc("other", "data").is_none());
        let kinds = [
            ClusterObject::PersistentVolume(obj!(json!({"metadata": {"name": "pv1"}}))),
            ClusterObject::StorageClass(obj!(
                json!({"metadata": {"name": "fast"}, "provisioner": "p"})
            )),
            ClusterObject::CSINode(obj!(
                json!({"metadata": {"name": "node-1"}, "spec": {"drivers": []}})
            )),
            ClusterObject::CSIDriver(obj!(
                json!({"metadata": {"name": "d"}, "spec": {"storageCapacity": true}})
            )),
            ClusterObject::CSIStorageCapacity(obj!(
                json!({"metadata": {"name": "c2", "namespace": "n"}, "storageClassName": "fast"})
            )),
            ClusterObject::CSIStorageCapacity(obj!(
                json!({"metadata": {"name": "c1", "namespace": "n"}, "storageClassName": "fast"})
            )),
        ];
        for o in &kinds {
            assert!(s.apply(o).is_none());
        }
        assert!(s.pv("pv1").is_some() && s.storage_class("fast").is_some());
        assert_eq!(kinds[2].key(), "node-1");
        assert!(s.csi_node("node-1").is_some());
        assert_eq!(kinds[3].key(), "d");
        assert!(s.csi_driver("d").is_some_and(|d| d.spec.storage_capacity == Some(true)));
        assert_eq!(kinds[4].key(), "n/c2");
        let names: Vec<_> =
            s.csi_storage_capacities().iter().map(|c| c.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["c1", "c2"], "sorted by namespace and name");
        assert!(s.apply(&kinds[4]).is_some(), "the replaced version is returned");
        s.delete(&kinds[4]);
        assert_eq!(s.counts()["CSIStorageCapacity"], 1);
        assert!(
            s.apply(&ClusterObject::Namespace(obj!(json!({"metadata": {"name": "a"}})))).is_none()
        );
        s.delete(&pvc(""));
        s.delete(&kinds[1]);
        assert!(s.pvc("n", "data").is_none() && s.storage_class("fast").is_none());
        assert_eq!(s.counts()["PersistentVolume"], 1);
    }

    #[test]
    fn admits_priorities_as_the_api_server() {
        let classes = [
            PriorityClassInfo {
                name: Arc::from("high"),
                value: 1000,
                global_default: false,
                preemption_policy: Some("Never".into()),
            },
            PriorityClassInfo {
                name: Arc::from("low"),
                value: 10,
                global_default: true,
                preemption_policy: None,
            },
        ];
        let admit = |spec: serde_json::Value, classes: &[PriorityClassInfo]| {
            let mut spec: k8s_openapi::api::core::v1::PodSpec =
                serde_json::from_value(spec).unwrap();
            admit_priority(&mut spec, classes)
                .map(|()| (spec.priority, spec.preemption_policy, spec.priority_class_name))
        };
        let s = |v: &str| Some(v.to_string());
        let cases: Vec<(serde_json::Value, &[PriorityClassInfo], Result<_, String>)> = vec![
            (json!({"containers": [], "priority": 7}), &classes[..], Ok((Some(7), None, None))),
            (
                json!({"containers": [], "priorityClassName": "high"}),
                &classes[..],
                Ok((Some(1000), s("Never"), s("high"))),
            ),
            (
                json!({"containers": []}),
                &classes[..],
                Ok((Some(10), s("PreemptLowerPriority"), s("low"))),
            ),
            (json!({"containers": []}), &[][..], Ok((Some(0), s("PreemptLowerPriority"), None))),
            (
                json!({"containers": [], "priorityClassName": "system-node-critical"}),
                &[][..],
                Ok((Some(2_000_001_000), s("PreemptLowerPriority"), s("system-node-critical"))),
            ),
            (
                json!({"containers": [], "priorityClassName": "nope"}),
                &classes[..],
                Err("spec.priorityClassName: no PriorityClass with name nope was found".to_string()),
            ),
        ];
        for (spec, classes, want) in cases {
            assert_eq!(admit(spec.clone(), classes), want, "{spec}");
        }
    }
}
