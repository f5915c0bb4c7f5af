//! The Dynamic Resource Allocation kinds (`resource.k8s.io/v1`) the
//! DynamicResources plugin reads: DeviceClasses, ResourceSlices,
//! ResourceClaims and DeviceTaintRules (upstream `plugins/dynamicresources`,
//! v1.37.2).
//!
//! They are kept whole but for metadata: a class's selectors and config, a
//! slice's devices and a claim's spec and status are what the allocator
//! reads. Metadata keeps [`trim_meta`]'s fields, `deletionTimestamp` and
//! `finalizers` (a claim being deleted cannot be used; PreBind adds the
//! delete-protection finalizer).
//!
//! [`AllocatedDevices`] is the set of devices allocated by the claims the
//! store holds (upstream `allocatedDevices`), kept up to date as claims
//! change so that a scheduling cycle does not walk every claim.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::ClusterObject;
use super::trim::{ObjectKind, trim_meta};

/// The finalizer a claim allocated by the scheduler carries (upstream
/// `resourceapi.Finalizer`).
pub const CLAIM_FINALIZER: &str = "resource.kubernetes.io/delete-protection";

fn trim_dra_meta(meta: &mut ObjectMeta) {
    let deletion = meta.deletion_timestamp.take();
    let finalizers = meta.finalizers.take();
    let annotations = meta.annotations.take();
    let generation = meta.generation.take();
    trim_meta(meta);
    meta.deletion_timestamp = deletion;
    meta.finalizers = finalizers;
    meta.generation = generation;
    // Claims generated for a pod name it here (upstream
    // `resource.kubernetes.io/pod-claim-name`); other annotations go.
    meta.annotations = annotations
        .map(|mut a| {
            a.retain(|k, _| k == ANN_POD_CLAIM_NAME);
            a
        })
        .filter(|a| !a.is_empty());
}

/// `resource.kubernetes.io/pod-claim-name`: the pod's `spec.resourceClaims`
/// entry a generated claim was made for.
pub const ANN_POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";

fn same_but_version<T: Clone + PartialEq>(
    a: &T,
    b: &T,
    meta: impl Fn(&mut T) -> &mut ObjectMeta,
) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    meta(&mut a).resource_version = None;
    meta(&mut b).resource_version = None;
    a == b
}

impl ObjectKind for DeviceClass {
    const KIND: &'static str = "DeviceClass";
    fn trim(&mut self) {
        trim_dra_meta(&mut self.metadata);
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::DeviceClass(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_but_version(self, other, |o| &mut o.metadata)
    }
}

impl ObjectKind for ResourceSlice {
    const KIND: &'static str = "ResourceSlice";
    fn trim(&mut self) {
        trim_dra_meta(&mut self.metadata);
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::ResourceSlice(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_but_version(self, other, |o| &mut o.metadata)
    }
}

impl ObjectKind for DeviceTaintRule {
    const KIND: &'static str = "DeviceTaintRule";
    fn trim(&mut self) {
        trim_dra_meta(&mut self.metadata);
        // The status (its `EvictionInProgress` condition) is the eviction
        // controller's; the scheduler reads only the spec, as upstream's
        // ResourceSlice tracker.
        self.status = None;
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::DeviceTaintRule(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_but_version(self, other, |o| &mut o.metadata)
    }
}

impl ObjectKind for ResourceClaim {
    const KIND: &'static str = "ResourceClaim";
    fn trim(&mut self) {
        trim_dra_meta(&mut self.metadata);
        // Drivers' per-device status is not read by scheduling.
        if let Some(s) = self.status.as_mut() {
            s.devices = None;
        }
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::ResourceClaim(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        // A claim's resourceVersion matters: PreBind writes it and waits for
        // the watch to catch up.
        self == other
    }
}

/// A device, as allocation results name it: driver, pool and device name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// `spec.driver` of its slice.
    pub driver: Arc<str>,
    /// `spec.pool.name` of its slice.
    pub pool: Arc<str>,
    /// `spec.devices[].name`.
    pub device: Arc<str>,
}

impl DeviceId {
    /// Builds an id.
    pub fn new(driver: &str, pool: &str, device: &str) -> Self {
        Self { driver: Arc::from(driver), pool: Arc::from(pool), device: Arc::from(device) }
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// The devices a claim's allocation holds exclusively (results with
/// `adminAccess: true` do not hold their device, as upstream).
pub fn claim_devices(claim: &ResourceClaim) -> Vec<DeviceId> {
    let Some(alloc) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
        return Vec::new();
    };
    let Some(devices) = alloc.devices.as_ref() else { return Vec::new() };
    devices
        .results
        .iter()
        .flatten()
        .filter(|r| r.admin_access != Some(true))
        .map(|r| DeviceId::new(&r.driver, &r.pool, &r.device))
        .collect()
}

/// How many allocated claims hold each device (a count, so that two
/// claims written with the same device, which the API server does not
/// prevent, are both forgotten only when both are gone).
#[derive(Debug, Default, Clone)]
pub struct AllocatedDevices {
    held: HashMap<DeviceId, u32, foldhash::fast::RandomState>,
}

impl AllocatedDevices {
    /// Whether some allocated claim holds the device.
    pub fn contains(&self, id: &DeviceId) -> bool {
        self.held.contains_key(id)
    }

    /// How many devices are held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether no device is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The held devices, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &DeviceId> {
        self.held.keys()
    }

    /// Counts the devices a claim's allocation holds (the store, as a
    /// claim is added or changed).
    pub fn add(&mut self, claim: &ResourceClaim) {
        for id in claim_devices(claim) {
            *self.held.entry(id).or_default() += 1;
        }
    }

    /// Forgets the devices a claim's allocation held (the store, as a
    /// claim is deleted or changed).
    pub fn remove(&mut self, claim: &ResourceClaim) {
        for id in claim_devices(claim) {
            if let Some(n) = self.held.get_mut(&id) {
                *n -= 1;
                if *n == 0 {
                    self.held.remove(&id);
                }
            }
        }
    }
}

/// What DynamicResources counts, for the scheduler's metrics: one
/// instance per scheduler, shared by its profiles through the
/// [`Handle`](crate::Handle). Counters only go up.
#[derive(Debug, Default)]
pub struct DraStats {
    /// Filter's allocation searches that found devices on a node.
    pub allocations_found: std::sync::atomic::AtomicU64,
    /// Filter's allocation searches that found none (`cannot allocate all
    /// claims`, an invalid pool).
    pub allocations_not_found: std::sync::atomic::AtomicU64,
    /// Filter's allocation searches that failed (a CEL error, a timeout).
    pub allocation_errors: std::sync::atomic::AtomicU64,
    /// Claims whose allocation PreBind wrote.
    pub claims_allocated: std::sync::atomic::AtomicU64,
    /// Claims PostFilter deallocated.
    pub claims_deallocated: std::sync::atomic::AtomicU64,
}

impl DraStats {
    /// Adds one to a counter.
    pub fn inc(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &std::sync::atomic::AtomicU64) -> u64 {
        counter.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(devices: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "n", "annotations": {"a": "b"},
                         "finalizers": [CLAIM_FINALIZER]},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": devices}},
                       "devices": [{"driver": "d", "pool": "p", "device": "x"}]}
        }))
        .unwrap()
    }

    #[test]
    fn trims_metadata_and_driver_status_only() {
        let mut c = claim(json!([]));
        c.trim();
        assert_eq!(c.metadata.finalizers.as_deref(), Some(&[CLAIM_FINALIZER.to_string()][..]));
        assert!(c.metadata.annotations.is_none());
        assert!(c.status.as_ref().unwrap().devices.is_none());
        assert!(c.status.as_ref().unwrap().allocation.is_some());
    }

    #[test]
    fn device_taint_rules_keep_their_spec_and_lose_their_status() {
        let mut r: DeviceTaintRule = serde_json::from_value(json!({
            "metadata": {"name": "r", "managedFields": [{"manager": "m"}], "resourceVersion": "1"},
            "spec": {"deviceSelector": {"driver": "d", "pool": "p", "device": "x"},
                     "taint": {"key": "k", "value": "v", "effect": "NoExecute",
                               "timeAdded": "2026-01-01T00:00:00Z"}},
            "status": {"conditions": [{"type": "EvictionInProgress", "status": "True",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "r", "message": ""}]}
        }))
        .unwrap();
        let spec = r.spec.clone();
        r.trim();
        assert!(r.status.is_none() && r.metadata.managed_fields.is_none());
        assert_eq!(r.spec, spec);
        let mut changed = r.clone();
        changed.metadata.resource_version = Some("2".into());
        assert!(r.same_for_scheduling(&changed));
        changed.spec.taint.effect = "NoSchedule".into();
        assert!(!r.same_for_scheduling(&changed));
    }

    #[test]
    fn counts_devices_held_by_allocated_claims_without_admin_access() {
        let r = |dev: &str, admin: bool| json!({"request": "r", "driver": "d", "pool": "p", "device": dev, "adminAccess": admin});
        let a = claim(json!([r("gpu-0", false), r("gpu-1", true)]));
        let b = claim(json!([r("gpu-0", false)]));
        let mut held = AllocatedDevices::default();
        held.add(&a);
        held.add(&b);
        assert_eq!(held.len(), 1, "admin access holds no device");
        held.remove(&a);
        assert!(held.contains(&DeviceId::new("d", "p", "gpu-0")), "b still holds it");
        held.remove(&b);
        assert!(held.is_empty());
    }
}
