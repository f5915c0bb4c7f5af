//! A test provisioner: what a CSI external-provisioner does for
//! WaitForFirstConsumer claims, without a driver.
//!
//! [`TestProvisioner::spawn`] watches PersistentVolumeClaims. A claim that
//! is not bound, is annotated `volume.kubernetes.io/selected-node` (the
//! scheduler chose a node) and whose StorageClass's provisioner is
//! [`TEST_PROVISIONER`] or [`TEST_CSI_PROVISIONER`] gets a PersistentVolume `pvc-<claim uid>`: capacity
//! = the claim's storage request, the claim's access modes and volume
//! mode, the class's reclaim policy, a node affinity on the selected node's
//! `topology.kubernetes.io/zone` label (else its `kubernetes.io/hostname`
//! label, else its name), and `spec.claimRef` naming the claim (with its
//! UID). kube-controller-manager's PV binder (testenv with controllers)
//! then binds the claim to it, as on a real cluster.
//!
//! Claims of other classes are left alone, so several tests may share a
//! control plane. Errors (the node is gone, the API refuses) are printed
//! to stderr and the claim is retried at its next change or the watch's
//! next relist.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

/// The provisioner name a StorageClass sets (`provisioner:`) to have its
/// claims provisioned by [`TestProvisioner`].
pub const TEST_PROVISIONER: &str = "testenv.convoy.dev/provisioner";

/// Another name [`TestProvisioner`] provisions for, valid as a CSIDriver's
/// name: a CSIDriver object of this name with `storageCapacity: true` has
/// schedulers check the CSIStorageCapacity objects of its classes, as for
/// a CSI driver that publishes its free storage.
pub const TEST_CSI_PROVISIONER: &str = "csi.testenv.convoy.dev";

/// `volume.kubernetes.io/selected-node`.
const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// `pv.kubernetes.io/provisioned-by`, as external-provisioner sets it.
const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// A running test provisioner (a tokio task); stopped when dropped.
#[derive(Debug)]
pub struct TestProvisioner {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestProvisioner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestProvisioner {
    /// Starts watching claims in every namespace with `client` (see the
    /// module docs). Call it inside a tokio runtime.
    pub fn spawn(client: kube::Client) -> Self {
        let task = tokio::spawn(async move {
            let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
            let mut events = watcher(claims, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(claim) => {
                        if let Err(e) = provision(&client, &claim).await {
                            eprintln!(
                                "test provisioner: claim {}/{}: {e}",
                                claim.metadata.namespace.as_deref().unwrap_or(""),
                                claim.metadata.name.as_deref().unwrap_or("")
                            );
                        }
                    }
                    Err(e) => eprintln!("test provisioner: watch: {e}"),
                }
            }
        });
        Self { task }
    }
}

/// Creates the volume for `claim` if it is one of ours and waits for one.
async fn provision(client: &kube::Client, claim: &PersistentVolumeClaim) -> crate::Result<()> {
    let spec = claim.spec.clone().unwrap_or_default();
    if spec.volume_name.as_deref().is_some_and(|v| !v.is_empty()) {
        return Ok(());
    }
    let Some(node) = claim.metadata.annotations.as_ref().and_then(|a| a.get(ANN_SELECTED_NODE))
    else {
        return Ok(());
    };
    let Some(class_name) = spec.storage_class_name.clone() else { return Ok(()) };
    let classes: Api<StorageClass> = Api::all(client.clone());
    let Some(class) = classes.get_opt(&class_name).await? else { return Ok(()) };
    if class.provisioner != TEST_PROVISIONER && class.provisioner != TEST_CSI_PROVISIONER {
        return Ok(());
    }
    let node: Node = Api::all(client.clone()).get(node).await?;
    let pv = volume_for(claim, &class, &node);
    match Api::<PersistentVolume>::all(client.clone()).create(&PostParams::default(), &pv).await {
        Ok(_) => Ok(()),
        // Provisioned already (an earlier event of the same claim).
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The volume an external provisioner creates for `claim` on `node`.
pub fn volume_for(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    node: &Node,
) -> PersistentVolume {
    let spec = claim.spec.clone().unwrap_or_default();
    let storage: BTreeMap<_, _> = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| ("storage".to_string(), q.clone()))
        .into_iter()
        .collect();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let (key, value) = match labels.get(ZONE_LABEL) {
        Some(zone) => (ZONE_LABEL, zone.clone()),
        None => (HOSTNAME_LABEL, labels.get(HOSTNAME_LABEL).cloned().unwrap_or(node_name)),
    };
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(format!("pvc-{uid}")),
            annotations: Some([(ANN_PROVISIONED_BY.to_string(), class.provisioner.clone())].into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(storage),
            access_modes: spec.access_modes.clone(),
            volume_mode: spec.volume_mode.clone(),
            storage_class_name: Some(class.metadata.name.clone().unwrap_or_default()),
            persistent_volume_reclaim_policy: Some(
                class.reclaim_policy.clone().unwrap_or_else(|| "Delete".to_string()),
            ),
            claim_ref: Some(ObjectReference {
                kind: Some("PersistentVolumeClaim".into()),
                api_version: Some("v1".into()),
                namespace: claim.metadata.namespace.clone(),
                name: claim.metadata.name.clone(),
                uid: Some(uid),
                ..Default::default()
            }),
            // A volume of no real kind: the PV controller and the scheduler
            // read only the fields above; KWOK mounts nothing.
            host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
                path: format!(
                    "/tmp/testenv-provisioner/{}",
                    claim.metadata.name.as_deref().unwrap_or("")
                ),
                type_: None,
            }),
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
    use super::*;
    use serde_json::json;

    #[test]
    fn the_volume_has_the_claims_size_and_the_nodes_topology() {
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "data-web-0", "namespace": "wfc", "uid": "u1"},
            "spec": {"storageClassName": "wfc", "accessModes": ["ReadWriteOnce"],
                     "volumeMode": "Block", "resources": {"requests": {"storage": "2Gi"}}}
        }))
        .unwrap();
        let class: StorageClass = serde_json::from_value(
            json!({"metadata": {"name": "wfc"}, "provisioner": TEST_PROVISIONER}),
        )
        .unwrap();
        let node = |labels: serde_json::Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}})).unwrap()
        };
        let pv = serde_json::to_value(volume_for(
            &claim,
            &class,
            &node(json!({ZONE_LABEL: "a", HOSTNAME_LABEL: "h1"})),
        ))
        .unwrap();
        assert_eq!(pv["metadata"]["name"], "pvc-u1");
        assert_eq!(
            pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
            TEST_PROVISIONER
        );
        assert_eq!(pv["spec"]["capacity"], json!({"storage": "2Gi"}));
        assert_eq!(pv["spec"]["volumeMode"], "Block");
        assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(pv["spec"]["claimRef"]["uid"], "u1");
        let expr = |pv: &serde_json::Value| {
            pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
                .clone()
        };
        assert_eq!(expr(&pv), json!({"key": ZONE_LABEL, "operator": "In", "values": ["a"]}));
        let pv = serde_json::to_value(volume_for(&claim, &class, &node(json!({})))).unwrap();
        assert_eq!(expr(&pv), json!({"key": HOSTNAME_LABEL, "operator": "In", "values": ["n1"]}));
    }
}
