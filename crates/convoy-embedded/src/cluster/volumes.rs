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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use convoy_api::testing::NodeBuilder;
    use serde_json::json;

    use super::*;
    use crate::load::Objects;

    fn object<K: convoy_api::objects::trim::ObjectKind + serde::de::DeserializeOwned>(
        v: serde_json::Value,
    ) -> ClusterObject {
        ClusterObject::trimmed(serde_json::from_value::<K>(v).unwrap())
    }

    fn cluster() -> Arc<EmbeddedCluster> {
        let others = vec![
            object::<k8s_openapi::api::storage::v1::StorageClass>(json!({
                "metadata": {"name": "fast"}, "provisioner": "csi.example.com",
                "volumeBindingMode": "WaitForFirstConsumer"})),
            object::<k8s_openapi::api::storage::v1::StorageClass>(json!({
                "metadata": {"name": "local"}, "provisioner": NO_PROVISIONER,
                "volumeBindingMode": "WaitForFirstConsumer"})),
            object::<PersistentVolume>(json!({"metadata": {"name": "pv-1"},
                "spec": {"storageClassName": "local", "capacity": {"storage": "1Gi"}}})),
            object::<PersistentVolumeClaim>(json!({
                "metadata": {"name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "1"},
                "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "3Gi"}}}})),
            object::<PersistentVolumeClaim>(json!({
                "metadata": {"name": "l", "namespace": "ns", "uid": "u2"},
                "spec": {"storageClassName": "local"}})),
        ];
        let nodes = vec![
            NodeBuilder::new("zoned").label(ZONE_LABEL, "z1").build(),
            NodeBuilder::new("plain").build(),
        ];
        EmbeddedCluster::new(Objects { others, nodes, ..Objects::default() }).0
    }

    fn claim(name: &str, uid: &str) -> ClaimRef {
        ClaimRef { namespace: "ns".into(), name: name.into(), uid: uid.into() }
    }

    fn get(c: &EmbeddedCluster, kind: &'static str, key: &str) -> serde_json::Value {
        let s = c.state.lock();
        match s.objects.get(&(kind, key.to_string())).unwrap() {
            ClusterObject::PersistentVolume(v) => serde_json::to_value(&**v).unwrap(),
            ClusterObject::PersistentVolumeClaim(v) => serde_json::to_value(&**v).unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn loaded_volumes_without_phase_are_available() {
        let c = cluster();
        assert_eq!(get(&c, "PersistentVolume", "pv-1")["status"]["phase"], "Available");
    }

    #[test]
    fn a_volume_given_a_claim_is_bound_with_it() {
        let c = cluster();
        let write = VolumeWrite::BindVolume {
            pv: "pv-1".into(),
            resource_version: None,
            claim: claim("l", "u2"),
        };
        let version = c.write_volume_now(write).unwrap();
        let pv = get(&c, "PersistentVolume", "pv-1");
        assert_eq!(pv["metadata"]["resourceVersion"], version.as_str());
        assert_eq!(pv["status"]["phase"], "Bound");
        assert_eq!(pv["spec"]["claimRef"]["uid"], "u2");
        let pvc = get(&c, "PersistentVolumeClaim", "ns/l");
        assert_eq!(pvc["spec"]["volumeName"], "pv-1");
        assert_eq!(pvc["status"]["phase"], "Bound");
        assert_eq!(pvc["metadata"]["annotations"][ANN_BIND_COMPLETED], "yes");
    }

    #[test]
    fn a_stale_version_is_a_conflict() {
        let c = cluster();
        let write = VolumeWrite::SelectNode {
            claim: claim("c", "u1"),
            resource_version: Some("0".into()),
            node: "zoned".into(),
        };
        let err = c.write_volume_now(write).unwrap_err().to_string();
        assert!(err.starts_with("Operation cannot be fulfilled on persistentvolumeclaims \"c\""));
    }

    #[test]
    fn a_claim_given_a_node_gets_a_volume_in_its_zone_or_on_it() {
        for (node, key, value) in [("zoned", ZONE_LABEL, "z1"), ("plain", HOSTNAME_LABEL, "plain")]
        {
            let c = cluster();
            let write = VolumeWrite::SelectNode {
                claim: claim("c", "u1"),
                resource_version: Some("1".into()),
                node: node.into(),
            };
            c.write_volume_now(write).unwrap();
            let pvc = get(&c, "PersistentVolumeClaim", "ns/c");
            assert_eq!(pvc["metadata"]["annotations"][ANN_SELECTED_NODE], node);
            assert_eq!(pvc["spec"]["volumeName"], "pvc-u1");
            let pv = get(&c, "PersistentVolume", "pvc-u1");
            assert_eq!(pv["spec"]["capacity"]["storage"], "3Gi");
            assert_eq!(pv["spec"]["accessModes"], json!(["ReadWriteOnce"]));
            let expr = &pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"]
                [0];
            assert_eq!((expr["key"].as_str(), &expr["values"]), (Some(key), &json!([value])));
        }
    }

    #[test]
    fn without_a_provisioner_the_claim_stays_pending() {
        let c = cluster();
        let write = VolumeWrite::SelectNode {
            claim: claim("l", "u2"),
            resource_version: None,
            node: "plain".into(),
        };
        c.write_volume_now(write).unwrap();
        let pvc = get(&c, "PersistentVolumeClaim", "ns/l");
        assert_eq!(pvc["metadata"]["annotations"][ANN_SELECTED_NODE], "plain");
        assert!(pvc["spec"]["volumeName"].is_null());
    }
}
