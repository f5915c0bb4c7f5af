//! End to end, volumes: the `convoy-scheduler` binary against a real
//! kube-apiserver (no controllers). A pod whose claim is bound to a local
//! PersistentVolume lands on the node of the volume's node affinity; a pod
//! whose claim does not exist stays pending with upstream's reason in its
//! PodScheduled condition, and is placed once the claim is created.

mod common;

use std::time::Duration;

use anyhow::{Result, ensure};
use common::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;

fn labelled_node(name: &str) -> k8s_openapi::api::core::v1::Node {
    let mut n = node(name, "4", "8Gi", "110");
    n.metadata.labels = Some([("kubernetes.io/hostname".to_string(), name.to_string())].into());
    n
}

/// A PV on `node` (local, node affinity on the hostname) pre-bound to the
/// claim `vol/<claim>`, and that claim, bound to it.
fn bound_pair(
    pv: &str,
    node: &str,
    claim: &str,
) -> Result<(PersistentVolume, PersistentVolumeClaim)> {
    let pv_obj = serde_json::from_value(json!({
        "metadata": {"name": pv},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "local": {"path": "/mnt/disk"},
            "claimRef": {"namespace": "vol", "name": claim},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
        }
    }))?;
    let pvc_obj = serde_json::from_value(json!({
        "metadata": {"name": claim, "namespace": "vol",
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": pv, "storageClassName": "", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    Ok((pv_obj, pvc_obj))
}

fn pod_with_claim(name: &str, claim: &str) -> Result<Pod> {
    let mut p = pod(name, CONVOY, "100m", "100Mi");
    p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(
        json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}),
    )?]);
    Ok(p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_claims_follow_their_volume_and_missing_claims_wait() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let pods = cp.namespace("vol").await?;
    create_nodes(&cp.client, vec![labelled_node("n0"), labelled_node("n1"), labelled_node("n2")])
        .await?;
    let pvs: Api<PersistentVolume> = Api::all(cp.client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(cp.client.clone(), "vol");
    let (pv, pvc) = bound_pair("pv-n1", "n1", "data")?;
    pvs.create(&PostParams::default(), &pv).await?;
    pvcs.create(&PostParams::default(), &pvc).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    create_pods(
        &pods,
        vec![pod_with_claim("with-claim", "data")?, pod_with_claim("missing", "late")?],
    )
    .await?;
    let all = wait_bound(&pods, &["with-claim".to_string()], Duration::from_secs(20)).await?;
    ensure!(
        node_of(&all["with-claim"]) == Some("n1"),
        "with-claim on {:?}",
        node_of(&all["with-claim"])
    );

    // Upstream's text (VolumeRestrictions' PreFilter, then VolumeBinding's,
    // return the API server's NotFound). Upstream adds `preemption: 0/3
    // nodes are available: 3 Preemption is not helpful for scheduling.`:
    // Convoy runs no PostFilter after a PreFilter rejection.
    let want =
        "False/Unschedulable: 0/3 nodes are available: persistentvolumeclaim \"late\" not found.";
    let seen = eventually(Duration::from_secs(15), || async {
        let p = pods.get("missing").await.ok()?;
        (scheduled_message(&p) == want).then_some(())
    })
    .await;
    let p = pods.get("missing").await?;
    ensure!(
        seen.is_some(),
        "PodScheduled is {:?}, expected {want:?}{}",
        scheduled_message(&p),
        sched.tail()
    );
    ensure!(node_of(&p).is_none(), "missing bound to {:?}", node_of(&p));

    // The claim (and its volume, on n2) appear: the PVC event requeues the pod.
    let (pv, pvc) = bound_pair("pv-n2", "n2", "late")?;
    pvs.create(&PostParams::default(), &pv).await?;
    pvcs.create(&PostParams::default(), &pvc).await?;
    let all = wait_bound(&pods, &["missing".to_string()], Duration::from_secs(20)).await?;
    ensure!(node_of(&all["missing"]) == Some("n2"), "missing on {:?}", node_of(&all["missing"]));
    Ok(())
}
