//! The store of the cluster objects besides nodes, pods and PodGroups that
//! plugins read: one [`ClusterObjects`] per scheduler, which the scheduler
//! fills with the [`ClusterObject`] updates its adapter reports and every
//! profile's plugins read through [`convoy_api::ObjectLister`] (upstream's
//! informer caches and listers). What each kind keeps is said in
//! [`convoy_api::objects`]; Namespaces keep their labels, the selector
//! kinds their selectors, the volume and DRA kinds their trimmed objects.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use convoy_api::objects::{
    AllocatedDevices, ClusterObject, CustomObject, DisruptionBudget, ObjectLister,
    PriorityClassInfo, ns_name,
};
use convoy_api::{ApiInfo, Labels, Selector, ServedApis};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

mod custom;

pub use custom::CustomObjects;

type NsName = (Arc<str>, Arc<str>);

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
    served: Arc<ServedApis>,
}

/// The store of [`ClusterObject`]s: one writer (the scheduler's event
/// path), many readers (plugins, once per cycle, or once per node for the
/// CSINodes). Reads take a short read lock and return shared values.
#[derive(Debug, Default)]
pub struct ClusterObjects {
    inner: RwLock<Inner>,
    custom: CustomObjects,
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

    /// The custom resources of the kinds plugins registered, for their
    /// writer (plugins read them through [`ObjectLister`]).
    pub fn custom(&self) -> &CustomObjects {
        &self.custom
    }

    /// Records what discovery found; returns whether it changed.
    pub fn set_served_apis(&self, served: Arc<ServedApis>) -> bool {
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

impl ObjectLister for ClusterObjects {
    fn served_apis(&self) -> Arc<ServedApis> {
        self.read().served.clone()
    }

    fn device_class(&self, name: &str) -> Option<Arc<DeviceClass>> {
        self.read().device_classes.get(name).cloned()
    }

    fn device_classes(&self) -> Vec<Arc<DeviceClass>> {
        self.read().device_classes.values().cloned().collect()
    }

    fn resource_slices(&self) -> (Vec<Arc<ResourceSlice>>, u64) {
        let st = self.read();
        (st.resource_slices.values().cloned().collect(), st.resource_slices_version)
    }

    fn resource_slices_version(&self) -> u64 {
        self.read().resource_slices_version
    }

    fn device_taint_rules(&self) -> (Vec<Arc<DeviceTaintRule>>, u64) {
        let st = self.read();
        (st.device_taint_rules.values().cloned().collect(), st.device_taint_rules_version)
    }

    fn device_taint_rules_version(&self) -> u64 {
        self.read().device_taint_rules_version
    }

    fn resource_claim(&self, namespace: &str, name: &str) -> Option<Arc<ResourceClaim>> {
        self.read().resource_claims.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    fn visit_allocated_devices(&self, f: &mut dyn FnMut(&AllocatedDevices)) {
        f(&self.read().allocated)
    }

    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.read().pvcs.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    fn pv(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.read().pvs.get(name).cloned()
    }

    fn storage_class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.read().storage_classes.get(name).cloned()
    }

    fn pvs_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>> {
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

    fn csi_node(&self, node: &str) -> Option<Arc<CSINode>> {
        self.read().csi_nodes.get(node).cloned()
    }

    fn csi_driver(&self, name: &str) -> Option<Arc<CSIDriver>> {
        self.read().csi_drivers.get(name).cloned()
    }

    fn csi_storage_capacities(&self) -> Vec<Arc<CSIStorageCapacity>> {
        self.read().csi_storage_capacities.values().cloned().collect()
    }

    fn pod_disruption_budgets(&self) -> Vec<Arc<DisruptionBudget>> {
        self.read().pdbs.values().cloned().collect()
    }

    fn priority_classes(&self) -> Vec<Arc<PriorityClassInfo>> {
        let mut v: Vec<_> = self.read().priority_classes.values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    fn namespace_labels(&self, name: &str) -> Option<Arc<Labels>> {
        self.read().namespaces.get(name).cloned()
    }

    fn namespaces_version(&self) -> u64 {
        self.read().namespaces_version
    }

    fn namespaces_matching(&self, selector: &Selector) -> Vec<Arc<str>> {
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

    fn service_selectors(&self, namespace: &str) -> Vec<Arc<Labels>> {
        self.read()
            .services
            .get(namespace)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    fn replication_controller_selector(&self, namespace: &str, name: &str) -> Option<Arc<Labels>> {
        self.read().replication_controllers.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    fn replica_set_selector(&self, namespace: &str, name: &str) -> Option<Arc<LabelSelector>> {
        self.read().replica_sets.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    fn stateful_set_selector(&self, namespace: &str, name: &str) -> Option<Arc<LabelSelector>> {
        self.read().stateful_sets.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    fn custom_objects(&self, api: &ApiInfo) -> Vec<Arc<CustomObject>> {
        self.custom.list(api)
    }

    fn custom_object(
        &self,
        api: &ApiInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<CustomObject>> {
        self.custom.get(api, namespace, name)
    }

    fn custom_version(&self, api: &ApiInfo) -> u64 {
        self.custom.version(api)
    }
}

#[cfg(test)]
mod tests;
