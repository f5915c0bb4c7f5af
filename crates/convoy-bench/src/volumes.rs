//! The storage objects of upstream's volume workloads (`volumes/` of
//! scheduler_perf), built as upstream's executor builds them (v1.37.2):
//!
//! - `createPods` with `persistentVolumeTemplatePath` and
//!   `persistentVolumeClaimTemplatePath` (`CreatePodWithPersistentVolume`
//!   in `runners.go`, with `bindVolume` true): pod `i` of the op gets one
//!   volume `vol`, the claim `pvc-<i>` of its namespace, bound to the
//!   PersistentVolume `<namespace>-vol-<i>` (`spec.volumeName`, `claimRef`,
//!   both with `status.phase: Bound`). No PV controller is needed: the
//!   scheduler only finds the claims bound.
//! - `createNodes` with `nodeAllocatableStrategy`: a CSINode per node
//!   (`NodeAllocatableStrategy.createCSINode`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimStatus,
    PersistentVolumeClaimVolumeSource, PersistentVolumeStatus, Pod, Volume,
};
use k8s_openapi::api::storage::v1::{CSINode, CSINodeDriver, CSINodeSpec, VolumeNodeResources};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::any::typed;
use crate::plan::{CsiNodeTemplate, TemplateSource, VolumeTemplates};

/// The annotation listing a node's in-tree plugins migrated to CSI
/// (`v1.MigratedPluginsAnnotationKey`).
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";

/// One pod's claim and the volume bound to it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimAndVolume {
    /// `pvc-<i>` in the pod's namespace, `spec.volumeName` set, `Bound`.
    pub claim: PersistentVolumeClaim,
    /// `<namespace>-vol-<i>`, `claimRef` to the claim, `Bound`.
    pub volume: PersistentVolume,
}

/// The decoded volume and claim files of a `createPods`.
#[derive(Debug, Clone)]
pub struct PodVolumes {
    volume: PersistentVolume,
    claim: PersistentVolumeClaim,
}

fn decode<T: serde::de::DeserializeOwned>(t: &TemplateSource, what: &str) -> Result<T, String> {
    let TemplateSource::File { path, text } = t else {
        return Err(format!("{what}: a template file is required"));
    };
    let at = |e: String| format!("{what} {}: {e}", path.display());
    let v: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| at(e.to_string()))?;
    typed(v).map_err(at)
}

impl PodVolumes {
    /// Reads the two files (plain YAML, as upstream's `getSpecFromFile`).
    pub fn new(t: &VolumeTemplates) -> Result<Self, String> {
        Ok(Self {
            volume: decode(&t.volume, "persistentVolumeTemplatePath")?,
            claim: decode(&t.claim, "persistentVolumeClaimTemplatePath")?,
        })
    }

    /// The claim of pod `index` in `namespace`.
    pub fn claim_name(index: usize) -> String {
        format!("pvc-{index}")
    }

    /// Pod `index`'s claim and volume, as upstream's
    /// `getCustomVolumeFactory` and `CreatePodWithPersistentVolume` make
    /// them: an AWS EBS volume's `volumeID` is `vol-<index>`, a CSI
    /// volume's `volumeHandle` the volume's name.
    pub fn for_pod(&self, namespace: &str, index: usize) -> ClaimAndVolume {
        let claim_name = Self::claim_name(index);
        let mut volume = self.volume.clone();
        let name = format!("{namespace}-vol-{index}");
        volume.metadata.name = Some(name.clone());
        let spec = volume.spec.get_or_insert_with(Default::default);
        if let Some(csi) = &mut spec.csi {
            csi.volume_handle = name.clone();
        } else if let Some(ebs) = &mut spec.aws_elastic_block_store {
            ebs.volume_id = format!("vol-{index}");
        }
        spec.claim_ref = Some(ObjectReference {
            kind: Some("PersistentVolumeClaim".into()),
            namespace: Some(namespace.into()),
            name: Some(claim_name.clone()),
            api_version: Some("v1".into()),
            ..Default::default()
        });
        volume.status =
            Some(PersistentVolumeStatus { phase: Some("Bound".into()), ..Default::default() });

        let mut claim = self.claim.clone();
        claim.metadata.name = Some(claim_name);
        claim.metadata.namespace = Some(namespace.into());
        claim.spec.get_or_insert_with(Default::default).volume_name = Some(name);
        claim.status =
            Some(PersistentVolumeClaimStatus { phase: Some("Bound".into()), ..Default::default() });
        ClaimAndVolume { claim, volume }
    }

    /// The claims and volumes of pods `0..count` of `namespace`.
    pub fn all(&self, namespace: &str, count: usize) -> Vec<ClaimAndVolume> {
        (0..count).map(|i| self.for_pod(namespace, i)).collect()
    }
}

/// Gives pod `index` its claim as its only volume, replacing the
/// template's volumes, as upstream does.
pub fn attach_claim(pod: &mut Pod, index: usize) {
    pod.spec.get_or_insert_with(Default::default).volumes = Some(vec![Volume {
        name: "vol".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: PodVolumes::claim_name(index),
            read_only: None,
        }),
        ..Default::default()
    }]);
}

/// The CSINode of node `node`.
pub fn csi_node(t: &CsiNodeTemplate, node: &str) -> CSINode {
    CSINode {
        metadata: ObjectMeta {
            name: Some(node.into()),
            annotations: Some(BTreeMap::from([(
                MIGRATED_PLUGINS_ANNOTATION.to_string(),
                t.migrated_plugins.join(","),
            )])),
            ..Default::default()
        },
        spec: CSINodeSpec {
            drivers: t
                .drivers
                .iter()
                .map(|(name, count)| CSINodeDriver {
                    name: name.clone(),
                    node_id: node.into(),
                    allocatable: count.map(|c| VolumeNodeResources { count: Some(c) }),
                    topology_keys: None,
                })
                .collect(),
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn file(text: &str) -> TemplateSource {
        TemplateSource::File { path: "t.yaml".into(), text: Arc::from(text) }
    }

    fn templates(volume: &str) -> PodVolumes {
        let claim = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  annotations:\n    \
                     pv.kubernetes.io/bind-completed: \"true\"\nspec:\n  accessModes: \
                     [ReadOnlyMany]\n  resources: {requests: {storage: 1Gi}}\n";
        PodVolumes::new(&VolumeTemplates { volume: file(volume), claim: file(claim) }).unwrap()
    }

    #[test]
    fn csi_and_ebs_volumes_are_named_and_bound_as_upstream() {
        let csi = templates(
            "apiVersion: v1\nkind: PersistentVolume\nspec:\n  capacity: {storage: 1Gi}\n  \
             csi: {driver: ebs.csi.aws.com}\n",
        )
        .for_pod("namespace-2", 7);
        assert_eq!(csi.volume.metadata.name.as_deref(), Some("namespace-2-vol-7"));
        let spec = csi.volume.spec.as_ref().unwrap();
        assert_eq!(spec.csi.as_ref().unwrap().volume_handle, "namespace-2-vol-7");
        let r = spec.claim_ref.as_ref().unwrap();
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref()),
            (Some("namespace-2"), Some("pvc-7"))
        );
        assert_eq!(csi.volume.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
        assert_eq!(csi.claim.metadata.name.as_deref(), Some("pvc-7"));
        assert_eq!(
            csi.claim.spec.as_ref().unwrap().volume_name.as_deref(),
            Some("namespace-2-vol-7")
        );
        assert_eq!(csi.claim.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
        assert!(
            csi.claim
                .metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key("pv.kubernetes.io/bind-completed")
        );

        let ebs = templates(
            "apiVersion: v1\nkind: PersistentVolume\nspec:\n  awsElasticBlockStore: \
             {volumeID: <volume-id>}\n",
        )
        .for_pod("namespace-1", 3);
        let spec = ebs.volume.spec.as_ref().unwrap();
        assert_eq!(spec.aws_elastic_block_store.as_ref().unwrap().volume_id, "vol-3");
    }

    #[test]
    fn csi_node_has_drivers_and_migrated_plugins() {
        let t = CsiNodeTemplate {
            drivers: BTreeMap::from([("ebs.csi.aws.com".to_string(), Some(39))]),
            migrated_plugins: vec!["kubernetes.io/aws-ebs".into()],
        };
        let c = csi_node(&t, "n1");
        assert_eq!(c.spec.drivers[0].node_id, "n1");
        assert_eq!(c.spec.drivers[0].allocatable.as_ref().unwrap().count, Some(39));
        let ann = c.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[MIGRATED_PLUGINS_ANNOTATION], "kubernetes.io/aws-ebs");
    }
}
