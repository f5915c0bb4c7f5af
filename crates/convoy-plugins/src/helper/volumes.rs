//! Helpers the volume plugins share (upstream
//! `component-helpers/storage/{volume,ephemeral}` and the listers'
//! NotFound texts, v1.37.2): which claim a volume uses, whether a claim is
//! bound, its class, a PersistentVolume's node affinity, and the objects
//! volume events carry.
//!
//! Used by VolumeBinding, VolumeRestrictions, VolumeZone and
//! NodeVolumeLimits; `testing` holds the volume fixtures of their tests.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};

use convoy_api::objects::volumes::{ANN_BIND_COMPLETED, ANN_STORAGE_CLASS};
use convoy_api::{ClusterObject, EventObject, PodInfo, QueueingHint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::helper::node_affinity::{CompiledNodeSelector, NodeView};

/// `volumeBindingMode` of a class whose claims are bound when a pod using
/// them is scheduled.
pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

/// The claim a volume uses: `(name, ephemeral)`. A `persistentVolumeClaim`
/// volume names it; a generic `ephemeral` volume's claim is
/// `<pod>-<volume>` (upstream `ephemeral.VolumeClaimName`). `None` for other
/// volumes.
pub fn volume_claim<'a>(pod: &Pod, v: &'a Volume) -> Option<(Cow<'a, str>, bool)> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some((Cow::Borrowed(c.claim_name.as_str()), false));
    }
    v.ephemeral.as_ref()?;
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    Some((Cow::Owned(format!("{pod_name}-{}", v.name)), true))
}

/// The volumes of a pod.
pub fn pod_volumes(pod: &Pod) -> &[Volume] {
    pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or(&[])
}

/// An object's namespace (`default` when unset, as the loaders default it).
pub fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or("default")
}

/// The claims a pod's `persistentVolumeClaim` volumes name (not its
/// ephemeral volumes' claims).
pub fn pod_claim_names(pod: &Pod) -> impl Iterator<Item = &str> {
    pod_volumes(pod)
        .iter()
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
}

/// Whether a pod uses a claim (`persistentVolumeClaim` or `ephemeral`).
pub fn uses_claims(pod: &Pod) -> bool {
    pod_volumes(pod).iter().any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
}

/// Whether a pod references the claim `namespace/name`, directly or as an
/// ephemeral volume's.
pub fn references_claim(pod: &Pod, namespace: &str, name: &str) -> bool {
    namespace_of(&pod.metadata) == namespace
        && pod_volumes(pod).iter().any(|v| volume_claim(pod, v).is_some_and(|(c, _)| c == name))
}

/// Hint: Queue when the event's claim is one the pod's
/// `persistentVolumeClaim` volumes name, in its namespace (upstream
/// VolumeRestrictions' and VolumeZone's claim hints).
pub fn queue_if_pod_names_claim(
    pod: &PodInfo,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(pvc) = event_pvc(new) else { return QueueingHint::Queue };
    let name = pvc.metadata.name.as_deref().unwrap_or("");
    let named = namespace_of(&pvc.metadata) == pod.namespace()
        && pod_claim_names(&pod.pod).any(|c| c == name);
    if named { QueueingHint::Queue } else { QueueingHint::Skip }
}

/// Hint: Queue when the event's claim is one the pod uses, an ephemeral
/// volume's included (upstream VolumeBinding's and NodeVolumeLimits'
/// claim hints).
pub fn queue_if_pod_uses_claim(
    pod: &PodInfo,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(pvc) = event_pvc(new) else { return QueueingHint::Queue };
    let name = pvc.metadata.name.as_deref().unwrap_or("");
    if references_claim(&pod.pod, namespace_of(&pvc.metadata), name) {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

/// The API server's NotFound text for a claim (what upstream's lister
/// error prints).
pub fn pvc_not_found(name: &str) -> String {
    format!("persistentvolumeclaim {name:?} not found")
}

/// The API server's NotFound text for a PersistentVolume.
pub fn pv_not_found(name: &str) -> String {
    format!("persistentvolume {name:?} not found")
}

/// The API server's NotFound text for a StorageClass.
pub fn storage_class_not_found(name: &str) -> String {
    format!("storageclass.storage.k8s.io {name:?} not found")
}

/// Upstream `ephemeral.VolumeIsForPod`: an ephemeral volume's claim must be
/// controlled by the pod (an owner reference with `controller: true` and
/// the pod's UID).
pub fn claim_is_for_pod(pod: &Pod, pvc: &PersistentVolumeClaim) -> Result<(), String> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let owned = pvc
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid);
    if owned {
        return Ok(());
    }
    Err(format!(
        "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
        namespace_of(&pvc.metadata),
        pvc.metadata.name.as_deref().unwrap_or(""),
        namespace_of(&pod.metadata),
        pod.metadata.name.as_deref().unwrap_or("")
    ))
}

/// The PersistentVolume a claim names (`spec.volumeName`), or `""`.
pub fn claim_volume_name(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()).unwrap_or("")
}

/// Upstream `isPVCFullyBound`: `spec.volumeName` set and the
/// `pv.kubernetes.io/bind-completed` annotation present.
pub fn claim_is_fully_bound(pvc: &PersistentVolumeClaim) -> bool {
    !claim_volume_name(pvc).is_empty()
        && pvc.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(ANN_BIND_COMPLETED))
}

/// Upstream `GetPersistentVolumeClaimClass`: the beta annotation, then
/// `spec.storageClassName`, else `""`.
pub fn claim_class(pvc: &PersistentVolumeClaim) -> &str {
    if let Some(c) = pvc.metadata.annotations.as_ref().and_then(|a| a.get(ANN_STORAGE_CLASS)) {
        return c;
    }
    pvc.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()).unwrap_or("")
}

/// Whether a claim's access modes include `mode`.
pub fn claim_has_access_mode(pvc: &PersistentVolumeClaim, mode: &str) -> bool {
    pvc.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_ref())
        .is_some_and(|m| m.iter().any(|a| a == mode))
}

/// A PersistentVolume's required node affinity, compiled (upstream
/// `CheckNodeAffinity`, which matches the terms against the node's labels
/// only, leniently); `None` when it has none.
pub fn pv_node_affinity(pv: &PersistentVolume) -> Option<CompiledNodeSelector> {
    let required = pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?;
    Some(CompiledNodeSelector::parse_lenient(required))
}

/// Whether a compiled PV node affinity admits a node with these labels.
pub fn pv_affinity_matches(
    affinity: &CompiledNodeSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    affinity.matches(NodeView::of_labels(labels))
}

/// The claim an event carries, if it carries one.
pub fn event_pvc(obj: Option<&EventObject>) -> Option<&PersistentVolumeClaim> {
    match obj? {
        EventObject::Object(ClusterObject::PersistentVolumeClaim(o)) => Some(o),
        _ => None,
    }
}

/// The PersistentVolume an event carries, if it carries one.
pub fn event_pv(obj: Option<&EventObject>) -> Option<&PersistentVolume> {
    match obj? {
        EventObject::Object(ClusterObject::PersistentVolume(o)) => Some(o),
        _ => None,
    }
}

/// The StorageClass an event carries, if it carries one.
pub fn event_storage_class(obj: Option<&EventObject>) -> Option<&StorageClass> {
    match obj? {
        EventObject::Object(ClusterObject::StorageClass(o)) => Some(o),
        _ => None,
    }
}

/// The CSINode an event carries, if it carries one.
pub fn event_csi_node(obj: Option<&EventObject>) -> Option<&CSINode> {
    match obj? {
        EventObject::Object(ClusterObject::CSINode(o)) => Some(o),
        _ => None,
    }
}

/// The CSIDriver an event carries, if it carries one.
pub fn event_csi_driver(obj: Option<&EventObject>) -> Option<&CSIDriver> {
    match obj? {
        EventObject::Object(ClusterObject::CSIDriver(o)) => Some(o),
        _ => None,
    }
}

/// The CSIStorageCapacity an event carries, if it carries one.
pub fn event_csi_storage_capacity(obj: Option<&EventObject>) -> Option<&CSIStorageCapacity> {
    match obj? {
        EventObject::Object(ClusterObject::CSIStorageCapacity(o)) => Some(o),
        _ => None,
    }
}

/// Test fixtures for the volume plugins: claims, volumes, classes and pods
/// that use them.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use convoy_api::ClusterObject;
    use convoy_api::testing::PodBuilder;
    use convoy_objects::ClusterObjects;
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Volume};
    use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
    use serde_json::{Value, json};

    /// A claim in `default` bound to `pv` (bind-completed) or unbound (`""`).
    pub(crate) fn pvc(name: &str, pv: &str, class: &str) -> PersistentVolumeClaim {
        let mut v = json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"volumeName": pv, "storageClassName": class}});
        if !pv.is_empty() {
            v["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
        }
        serde_json::from_value(v).unwrap()
    }

    /// A claim from JSON (namespace `default` unless given).
    pub(crate) fn pvc_json(mut v: Value) -> PersistentVolumeClaim {
        if v["metadata"]["namespace"].is_null() {
            v["metadata"]["namespace"] = json!("default");
        }
        serde_json::from_value(v).unwrap()
    }

    /// A PersistentVolume from JSON.
    pub(crate) fn pv_json(v: Value) -> PersistentVolume {
        serde_json::from_value(v).unwrap()
    }

    /// A StorageClass with a binding mode.
    pub(crate) fn class(name: &str, mode: Option<&str>) -> StorageClass {
        serde_json::from_value(json!({"metadata": {"name": name}, "provisioner": "csi.example.com",
            "volumeBindingMode": mode}))
        .unwrap()
    }

    /// A CSINode from JSON.
    pub(crate) fn csi_node(v: Value) -> CSINode {
        serde_json::from_value(v).unwrap()
    }

    /// A `persistentVolumeClaim` volume.
    pub(crate) fn claim_volume(name: &str, claim: &str) -> Volume {
        serde_json::from_value(json!({"name": name, "persistentVolumeClaim": {"claimName": claim}}))
            .unwrap()
    }

    /// A generic ephemeral volume.
    pub(crate) fn ephemeral_volume(name: &str) -> Volume {
        serde_json::from_value(
            json!({"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}),
        )
        .unwrap()
    }

    /// A volume from JSON.
    pub(crate) fn volume(v: Value) -> Volume {
        serde_json::from_value(v).unwrap()
    }

    /// A pod builder with these volumes.
    pub(crate) fn pod_with(name: &str, volumes: Vec<Volume>) -> PodBuilder {
        PodBuilder::new(name).with_spec(move |s| s.volumes = Some(volumes))
    }

    /// A store holding these objects.
    pub(crate) fn store(objects: Vec<ClusterObject>) -> Arc<ClusterObjects> {
        let s = Arc::new(ClusterObjects::new());
        for o in &objects {
            s.apply(o);
        }
        s
    }

    /// Wraps a claim.
    pub(crate) fn obj_pvc(p: PersistentVolumeClaim) -> ClusterObject {
        ClusterObject::PersistentVolumeClaim(Arc::new(p))
    }

    /// Wraps a PersistentVolume.
    pub(crate) fn obj_pv(p: PersistentVolume) -> ClusterObject {
        ClusterObject::PersistentVolume(Arc::new(p))
    }

    /// Wraps a StorageClass.
    pub(crate) fn obj_class(c: StorageClass) -> ClusterObject {
        ClusterObject::StorageClass(Arc::new(c))
    }

    /// Wraps a CSINode.
    pub(crate) fn obj_csi_node(c: CSINode) -> ClusterObject {
        ClusterObject::CSINode(Arc::new(c))
    }
}
