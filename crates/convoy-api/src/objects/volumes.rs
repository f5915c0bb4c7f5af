//! Trimming the volume kinds (PersistentVolumeClaim, PersistentVolume,
//! StorageClass, CSINode, CSIDriver, CSIStorageCapacity) to what the volume plugins read (upstream
//! `volumebinding`, `volumerestrictions`, `volumezone`,
//! `nodevolumelimits`, v1.37.2).
//!
//! Unlike the other kinds, these are kept as (trimmed) objects: the plugins
//! read them as upstream's listers return them. Kept besides
//! [`trim_meta`]'s fields: `deletionTimestamp` and the annotations scheduling
//! reads ([`KEPT_ANNOTATIONS`]). A claim keeps its spec and `status.phase`;
//! a volume its spec without mount options and its CSI source without
//! secrets or attributes, and `status.phase`; a StorageClass its
//! provisioner, binding mode and allowed topologies; a CSINode its drivers;
//! a CSIDriver its spec; a CSIStorageCapacity its class, node topology,
//! capacity and maximum volume size.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeClaimStatus, PersistentVolumeStatus,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::ClusterObject;
use super::trim::{ObjectKind, trim_meta};

/// `pv.kubernetes.io/bind-completed`: the PV controller finished binding
/// the claim (upstream `AnnBindCompleted`).
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// `volume.beta.kubernetes.io/storage-class`: the claim's class, read
/// before `spec.storageClassName` (upstream `GetPersistentVolumeClaimClass`).
pub const ANN_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// `volume.kubernetes.io/selected-node`: the node chosen for a delayed
/// binding.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// `pv.kubernetes.io/bound-by-controller`: the volume (or claim) was bound
/// by the PV controller or the scheduler, not by its author (upstream
/// `AnnBoundByController`).
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// `storage.alpha.kubernetes.io/migrated-plugins`: the in-tree plugins a
/// CSINode's drivers serve (CSI migration).
pub const ANN_MIGRATED_PLUGINS: &str = "storage.alpha.kubernetes.io/migrated-plugins";

/// The annotations the volume kinds keep.
pub const KEPT_ANNOTATIONS: &[&str] =
    &[ANN_BIND_COMPLETED, ANN_STORAGE_CLASS, ANN_SELECTED_NODE, ANN_MIGRATED_PLUGINS];

fn trim_volume_meta(meta: &mut ObjectMeta) {
    let deletion = meta.deletion_timestamp.take();
    let annotations = meta.annotations.take().map(|mut a| {
        a.retain(|k, _| KEPT_ANNOTATIONS.contains(&k.as_str()));
        a
    });
    trim_meta(meta);
    meta.deletion_timestamp = deletion;
    meta.annotations = annotations.filter(|a| !a.is_empty());
}

/// Whether two trimmed objects are equal but for `resourceVersion`.
fn same_but_version<K: Clone + PartialEq, F: Fn(&mut K) -> &mut ObjectMeta>(
    a: &K,
    b: &K,
    meta: F,
) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    meta(&mut a).resource_version = None;
    meta(&mut b).resource_version = None;
    a == b
}

impl ObjectKind for PersistentVolumeClaim {
    const KIND: &'static str = "PersistentVolumeClaim";
    fn trim(&mut self) {
        trim_volume_meta(&mut self.metadata);
        if let Some(s) = self.spec.as_mut() {
            s.data_source = None;
            s.data_source_ref = None;
        }
        self.status = self
            .status
            .take()
            .map(|s| PersistentVolumeClaimStatus { phase: s.phase, ..Default::default() });
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::PersistentVolumeClaim(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_but_version(self, other, |o| &mut o.metadata)
    }
}

impl ObjectKind for PersistentVolume {
    const KIND: &'static str = "PersistentVolume";
    fn trim(&mut self) {
        trim_volume_meta(&mut self.metadata);
        if let Some(s) = self.spec.as_mut() {
            s.mount_options = None;
            s.csi = s.csi.take().map(|c| CSIPersistentVolumeSource {
                driver: c.driver,
                volume_handle: c.volume_handle,
                read_only: c.read_only,
                ..Default::default()
            });
        }
        self.status = self
            .status
            .take()
            .map(|s| PersistentVolumeStatus { phase: s.phase, ..Default::default() });
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::PersistentVolume(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_but_version(self, other, |o| &mut o.metadata)
    }
}

impl ObjectKind for StorageClass {
    const KIND: &'static str = "StorageClass";
    fn trim(&mut self) {
        trim_volume_meta(&mut self.metadata);
        self.parameters = None;
        self.mount_options = None;
        self.reclaim_policy = None;
        self.allow_volume_expansion = None;
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::StorageClass(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_but_version(self, other, |o| &mut o.metadata)
    }
}

impl ObjectKind for CSINode {
    const KIND: &'static str = "CSINode";
    fn trim(&mut self) {
        trim_volume_meta(&mut self.metadata);
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::CSINode(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_but_version(self, other, |o| &mut o.metadata)
    }
}

impl ObjectKind for CSIDriver {
    const KIND: &'static str = "CSIDriver";
    fn trim(&mut self) {
        trim_volume_meta(&mut self.metadata);
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::CSIDriver(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_but_version(self, other, |o| &mut o.metadata)
    }
}

impl ObjectKind for CSIStorageCapacity {
    const KIND: &'static str = "CSIStorageCapacity";
    fn trim(&mut self) {
        trim_volume_meta(&mut self.metadata);
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::CSIStorageCapacity(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_but_version(self, other, |o| &mut o.metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn trimmed<K>(v: Value) -> Value
    where
        K: ObjectKind + k8s_openapi::serde::de::DeserializeOwned + k8s_openapi::serde::Serialize,
    {
        let mut obj: K = serde_json::from_value(v).unwrap();
        obj.trim();
        serde_json::to_value(&obj).unwrap()
    }

    fn meta() -> Value {
        json!({"name": "data", "namespace": "ns", "uid": "u", "resourceVersion": "3",
               "deletionTimestamp": "2026-01-01T00:00:00Z",
               "managedFields": [{"manager": "m"}],
               "annotations": {"pv.kubernetes.io/bind-completed": "yes",
                               "kubectl.kubernetes.io/last-applied-configuration": "{}"}})
    }

    fn kept_meta() -> Value {
        json!({"name": "data", "namespace": "ns", "uid": "u", "resourceVersion": "3",
               "deletionTimestamp": "2026-01-01T00:00:00Z",
               "annotations": {"pv.kubernetes.io/bind-completed": "yes"}})
    }

    #[test]
    fn keeps_what_the_volume_plugins_read() {
        let claim_spec = json!({"accessModes": ["ReadWriteOncePod"], "volumeName": "pv1",
            "storageClassName": "fast", "resources": {"requests": {"storage": "1Gi"}}});
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "PersistentVolumeClaim",
                trimmed::<PersistentVolumeClaim>(json!({"metadata": meta(),
                    "spec": claim_spec.clone(),
                    "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}})),
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": kept_meta(), "spec": claim_spec,
                       "status": {"phase": "Bound"}}),
            ),
            (
                "PersistentVolume",
                trimmed::<PersistentVolume>(json!({"metadata": meta(),
                    "spec": {"capacity": {"storage": "1Gi"}, "mountOptions": ["ro"],
                             "csi": {"driver": "d", "volumeHandle": "h",
                                     "volumeAttributes": {"a": "b"}}},
                    "status": {"phase": "Bound", "message": "m"}})),
                json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": kept_meta(),
                       "spec": {"capacity": {"storage": "1Gi"},
                                "csi": {"driver": "d", "volumeHandle": "h"}},
                       "status": {"phase": "Bound"}}),
            ),
            (
                "StorageClass",
                trimmed::<StorageClass>(json!({"metadata": meta(), "provisioner": "p",
                    "volumeBindingMode": "WaitForFirstConsumer", "parameters": {"a": "b"},
                    "reclaimPolicy": "Delete"})),
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                       "metadata": kept_meta(), "provisioner": "p",
                       "volumeBindingMode": "WaitForFirstConsumer"}),
            ),
            (
                "CSINode",
                trimmed::<CSINode>(json!({"metadata": meta(), "spec": {"drivers": [
                    {"name": "d", "nodeID": "n", "allocatable": {"count": 3}}]}})),
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                       "metadata": kept_meta(), "spec": {"drivers": [
                    {"name": "d", "nodeID": "n", "allocatable": {"count": 3}}]}}),
            ),
        ];
        for (kind, got, want) in cases {
            assert_eq!(got, want, "{kind}");
        }
    }

    #[test]
    fn same_for_scheduling_ignores_the_version_only() {
        let pvc = |rv: &str, volume: &str| -> PersistentVolumeClaim {
            let mut o: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": "c", "namespace": "n", "resourceVersion": rv},
                "spec": {"volumeName": volume},
                "status": {"capacity": {"storage": rv}}
            }))
            .unwrap();
            o.trim();
            o
        };
        assert!(pvc("1", "a").same_for_scheduling(&pvc("2", "a")));
        assert!(!pvc("1", "a").same_for_scheduling(&pvc("2", "b")));
    }
}
