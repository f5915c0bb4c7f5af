//! VolumeBinding's writes on the embedded cluster, completed at once as
//! kube-controller-manager's PV controller and an external provisioner
//! would complete them: a volume given a claim is bound to it (volume and
//! claim `Bound`), a claim given a node gets a volume provisioned there
//! (capacity = request, node affinity = the node's
//! `topology.kubernetes.io/zone`, else its hostname) and bound.

use std::collections::BTreeMap;

use convoy_api::objects::volumes::{
    ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE,
};
use convoy_api::{BindError, ClaimRef, ClusterObject, ClusterUpdate, VolumeWrite};
use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeSpec, PersistentVolumeStatus, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{EmbeddedCluster, State};

/// `topology.kubernetes.io/zone`.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// `kubernetes.io/hostname`.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The provisioner of classes without dynamic provisioning.
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

fn conflict(resource: &str, name: &str) -> BindError {
    BindError::Failed(format!(
        "Operation cannot be fulfilled on {resource} {name:?}: the object has been modified; \
         please apply your changes to the latest version and try again"
    ))
}

fn not_found(resource: &str, name: &str) -> BindError {
    BindError::Failed(format!("{resource} {name:?} not found"))
}

fn claim_key(c: &ClaimRef) -> (&'static str, String) {
    ("PersistentVolumeClaim", format!("{}/{}", c.namespace, c.name))
}

fn annotate(meta: &mut ObjectMeta, key: &str, value: &str) {
    meta.annotations.get_or_insert_with(BTreeMap::new).insert(key.to_string(), value.to_string());
}

/// What the PV controller makes of a new volume: without a phase and a
/// claim, it is `Available` (the phase static binding looks for).
pub(crate) fn admit(obj: ClusterObject) -> ClusterObject {
    let ClusterObject::PersistentVolume(pv) = &obj else { return obj };
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let claimed = pv.spec.as_ref().is_some_and(|s| s.claim_ref.is_some());
    if phase.is_some() || claimed {
        return obj;
    }
    let mut pv = PersistentVolume::clone(pv);
    pv.status =
        Some(PersistentVolumeStatus { phase: Some("Available".into()), ..Default::default() });
    ClusterObject::PersistentVolume(std::sync::Arc::new(pv))
}

impl State {
    fn pv(&self, name: &str) -> Option<PersistentVolume> {
        match self.objects.get(&("PersistentVolume", name.to_string()))? {
            ClusterObject::PersistentVolume(pv) => Some(PersistentVolume::clone(pv)),
            _ => None,
        }
    }

    fn pvc(&self, c: &ClaimRef) -> Option<PersistentVolumeClaim> {
        match self.objects.get(&claim_key(c))? {
            ClusterObject::PersistentVolumeClaim(pvc) => Some(PersistentVolumeClaim::clone(pvc)),
            _ => None,
        }
    }

    fn provisioner(&self, class: &str) -> Option<String> {
        match self.objects.get(&("StorageClass", class.to_string()))? {
            ClusterObject::StorageClass(sc) => Some(sc.provisioner.clone()),
            _ => None,
        }
    }
}

impl EmbeddedCluster {
    /// Stores an object with a new resourceVersion and emits
    /// `ObjectApplied`; returns the version.
    fn store_object(&self, s: &mut State, obj: ClusterObject) -> String {
        let version = s.next_version();
        let obj = match obj {
            ClusterObject::PersistentVolume(pv) => {
                let mut pv = PersistentVolume::clone(&pv);
                pv.metadata.resource_version = Some(version.clone());
                ClusterObject::trimmed(pv)
            }
            ClusterObject::PersistentVolumeClaim(pvc) => {
                let mut pvc = PersistentVolumeClaim::clone(&pvc);
                pvc.metadata.resource_version = Some(version.clone());
                ClusterObject::trimmed(pvc)
            }
            other => other,
        };
        s.objects.insert((obj.kind(), obj.key()), obj.clone());
        self.send(ClusterUpdate::ObjectApplied(obj));
        version
    }

    /// Applies one of VolumeBinding's writes and completes it (see the
    /// module docs); returns the written object's resourceVersion. Fails
    /// as the API server would: the object is missing, or it changed since
    /// the given resourceVersion.
    pub fn write_volume_now(&self, write: VolumeWrite) -> Result<String, BindError> {
        let mut s = self.state.lock();
        match write {
            VolumeWrite::BindVolume { pv, resource_version, claim } => {
                let mut volume = s.pv(&pv).ok_or_else(|| not_found("persistentvolumes", &pv))?;
                if resource_version.is_some()
                    && volume.metadata.resource_version != resource_version
                {
                    return Err(conflict("persistentvolumes", &pv));
                }
                let pvc = s
                    .pvc(&claim)
                    .ok_or_else(|| not_found("persistentvolumeclaims", &claim.name))?;
                annotate(&mut volume.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
                volume.spec.get_or_insert_with(Default::default).claim_ref =
                    Some(object_ref(&claim));
                let version = self.bind(&mut s, volume, pvc);
                Ok(version)
            }
            VolumeWrite::SelectNode { claim, resource_version, node } => {
                let mut pvc = s
                    .pvc(&claim)
                    .ok_or_else(|| not_found("persistentvolumeclaims", &claim.name))?;
                if resource_version.is_some() && pvc.metadata.resource_version != resource_version {
                    return Err(conflict("persistentvolumeclaims", &claim.name));
                }
                annotate(&mut pvc.metadata, ANN_SELECTED_NODE, &node);
                let version = self.store_object(
                    &mut s,
                    ClusterObject::PersistentVolumeClaim(std::sync::Arc::new(pvc.clone())),
                );
                pvc.metadata.resource_version = Some(version.clone());
                let class = claim_class(&pvc);
                let provisioner = s.provisioner(&class).unwrap_or_default();
                if provisioner.is_empty() || provisioner == NO_PROVISIONER {
                    // Nobody provisions: the claim stays pending, as on a
                    // cluster without the class's provisioner.
                    return Ok(version);
                }
                let Some(n) = s.nodes.get(node.as_str()).cloned() else {
                    return Ok(version);
                };
                let volume = provisioned_volume(&pvc, &claim, &class, &n);
                self.bind(&mut s, volume, pvc);
                Ok(version)
            }
        }
    }

    /// The PV controller's binding: the volume `Bound` to the claim, the
    /// claim `Bound` to the volume (`spec.volumeName`, `bind-completed`).
    /// Returns the volume's new resourceVersion.
    fn bind(
        &self,
        s: &mut State,
        mut pv: PersistentVolume,
        mut pvc: PersistentVolumeClaim,
    ) -> String {
        let name = pv.metadata.name.clone().unwrap_or_default();
        pv.status =
            Some(PersistentVolumeStatus { phase: Some("Bound".into()), ..Default::default() });
        let version =
            self.store_object(s, ClusterObject::PersistentVolume(std::sync::Arc::new(pv)));
        pvc.spec.get_or_insert_with(Default::default).volume_name = Some(name);
        annotate(&mut pvc.metadata, ANN_BIND_COMPLETED, "yes");
        annotate(&mut pvc.metadata, ANN_BOUND_BY_CONTROLLER, "yes");
        let status = pvc.status.get_or_insert_with(Default::default);
        status.phase = Some("Bound".into());
        self.store_object(s, ClusterObject::PersistentVolumeClaim(std::sync::Arc::new(pvc)));
        version
    }
}

fn object_ref(c: &ClaimRef) -> ObjectReference {
    ObjectReference {
        kind: Some("PersistentVolumeClaim".into()),
        api_version: Some("v1".into()),
        namespace: Some(c.namespace.clone()),
        name: Some(c.name.clone()),
        uid: Some(c.uid.clone()),
        ..Default::default()
    }
}

fn claim_class(pvc: &PersistentVolumeClaim) -> String {
    pvc.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(convoy_api::objects::volumes::ANN_STORAGE_CLASS))
        .cloned()
        .or_else(|| pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
        .unwrap_or_default()
}

/// The volume a provisioner creates for a claim on a node: named
/// `pvc-<claim uid>` (as external-provisioner names them), the requested
/// capacity, the claim's access modes and volume mode, reachable from the
/// node's zone (or the node alone), already claimed.
pub(crate) fn provisioned_volume(
    pvc: &PersistentVolumeClaim,
    claim: &ClaimRef,
    class: &str,
    node: &k8s_openapi::api::core::v1::Node,
) -> PersistentVolume {
    let spec = pvc.spec.clone().unwrap_or_default();
    let capacity = spec.resources.as_ref().and_then(|r| r.requests.clone()).unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let (key, value) = match labels.get(ZONE_LABEL) {
        Some(zone) => (ZONE_LABEL, zone.clone()),
        None => (HOSTNAME_LABEL, labels.get(HOSTNAME_LABEL).cloned().unwrap_or(node_name)),
    };
    let uid = if claim.uid.is_empty() { claim.name.clone() } else { claim.uid.clone() };
    let mut meta = ObjectMeta { name: Some(format!("pvc-{uid}")), ..Default::default() };
    annotate(&mut meta, "pv.kubernetes.io/provisioned-by", "convoy-embedded");
    PersistentVolume {
        metadata: meta,
        spec: Some(PersistentVolumeSpec {
            capacity: Some(capacity.into_iter().filter(|(k, _)| k == "storage").collect()),
            access_modes: spec.access_modes.clone(),
            volume_mode: spec.volume_mode.clone(),
            storage_class_name: Some(class.to_string()),
            claim_ref: Some(object_ref(claim)),
            persistent_volume_reclaim_policy: Some("Delete".into()),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: key.to_string(),
                            operator: "In".into(),
                            values: Some(vec![value]),
                        }]),
                        ..Default::default()
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    }
}
