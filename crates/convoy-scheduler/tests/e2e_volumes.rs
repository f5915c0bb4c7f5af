//! End to end, volumes: the `convoy-scheduler` binary against a real
//! kube-apiserver (no controllers). A pod whose claim is bound to a local
//! PersistentVolume lands on the node of the volume's node affinity; a pod
//! whose claim does not exist stays pending with upstream's reason in its
//! PodScheduled condition, and is placed once the claim is created. A pod
//! whose bound volume is labelled with a zone goes to that zone; a pod
//! whose ReadWriteOncePod claim another pod uses stays pending with
//! upstream's message; a node at its CSI attach limit (CSINode
//! `allocatable.count`) is skipped.

mod common;

use std::time::Duration;

use anyhow::{Result, ensure};
use common::*;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, PostParams};
use serde_json::json;

fn zoned_node(name: &str, zone: &str) -> k8s_openapi::api::core::v1::Node {
    let mut n = labelled_node(name);
    n.metadata.labels.as_mut().unwrap().insert("topology.kubernetes.io/zone".into(), zone.into());
    n
}

/// A PV pre-bound to `vol/<claim>` (`spec` adds to or replaces its spec:
/// the volume source, access modes), its `labels`, and the claim, bound
/// to it with the same access modes.
fn pair(
    claim: &str,
    labels: serde_json::Value,
    spec: serde_json::Value,
) -> Result<(PersistentVolume, PersistentVolumeClaim)> {
    let mut pv = json!({
        "metadata": {"name": format!("pv-{claim}"), "labels": labels},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "claimRef": {"namespace": "vol", "name": claim},
        }
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        pv["spec"][k] = v.clone();
    }
    let pvc = json!({
        "metadata": {"name": claim, "namespace": "vol",
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": format!("pv-{claim}"), "storageClassName": "",
                 "accessModes": pv["spec"]["accessModes"].clone(),
                 "resources": {"requests": {"storage": "1Gi"}}}
    });
    Ok((serde_json::from_value(pv)?, serde_json::from_value(pvc)?))
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_read_write_once_pod_claims_and_attach_limits() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let pods = cp.namespace("vol").await?;
    create_nodes(
        &cp.client,
        vec![zoned_node("a-0", "a"), zoned_node("b-0", "b"), zoned_node("c-0", "c")],
    )
    .await?;
    // CSI attach limits of 1 on a-0 and b-0, 3 on c-0.
    let csi_nodes: Api<CSINode> = Api::all(cp.client.clone());
    for (node, count) in [("a-0", 1), ("b-0", 1), ("c-0", 3)] {
        let c = serde_json::from_value(json!({
            "metadata": {"name": node},
            "spec": {"drivers": [{"name": "csi.e2e.dev", "nodeID": node,
                                  "allocatable": {"count": count}}]}
        }))?;
        csi_nodes.create(&PostParams::default(), &c).await?;
    }
    let pvs: Api<PersistentVolume> = Api::all(cp.client.clone());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(cp.client.clone(), "vol");
    let csi = |h: &str| json!({"csi": {"driver": "csi.e2e.dev", "volumeHandle": h}});
    let host = json!({"hostPath": {"path": "/mnt/x"}});
    let rwop = json!({"hostPath": {"path": "/mnt/x"}, "accessModes": ["ReadWriteOncePod"]});
    for (claim, labels, spec) in [
        ("zonal", json!({"topology.kubernetes.io/zone": "b"}), host.clone()),
        ("solo", json!({}), rwop),
        ("attached-a", json!({}), csi("attached-a")),
        ("attached-c", json!({}), csi("attached-c")),
        ("fresh", json!({}), csi("fresh")),
    ] {
        let (pv, pvc) = pair(claim, labels, spec)?;
        pvs.create(&PostParams::default(), &pv).await?;
        pvcs.create(&PostParams::default(), &pvc).await?;
    }
    // Already running: a CSI volume on a-0 (its limit) and on c-0, and the
    // ReadWriteOncePod claim's holder on c-0.
    let mut running = Vec::new();
    for (name, node, claim) in [
        ("holder-a", "a-0", "attached-a"),
        ("holder-c", "c-0", "attached-c"),
        ("holder", "c-0", "solo"),
    ] {
        let mut p = pod_with_claim(name, claim)?;
        let spec = p.spec.as_mut().unwrap();
        spec.node_name = Some(node.into());
        spec.scheduler_name = Some("nobody".into());
        running.push(p);
    }
    create_pods(&pods, running).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    create_pods(&pods, vec![pod_with_claim("zonal", "zonal")?, pod_with_claim("second", "solo")?])
        .await?;
    let all = wait_bound(&pods, &["zonal".to_string()], Duration::from_secs(20)).await?;
    ensure!(node_of(&all["zonal"]) == Some("b-0"), "zonal on {:?}", node_of(&all["zonal"]));

    // Upstream's text: VolumeRestrictions rejects every node; preemption
    // finds no victim (the holder has the same priority).
    let want = "False/Unschedulable: 0/3 nodes are available: 3 node(s) unavailable due to \
                PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another \
                pod. preemption: 0/3 nodes are available: 3 No preemption victims found for \
                incoming pod.";
    let seen = eventually(Duration::from_secs(15), || async {
        let p = pods.get("second").await.ok()?;
        (scheduled_message(&p) == want).then_some(())
    })
    .await;
    let p = pods.get("second").await?;
    ensure!(
        seen.is_some() && node_of(&p).is_none(),
        "second on {:?}, PodScheduled {:?}, expected {want:?}{}",
        node_of(&p),
        scheduled_message(&p),
        sched.tail()
    );

    // b-0 holds no CSI volume yet but the zonal pod's, which is not CSI;
    // a-0 is at its limit: of a-0 and b-0, only b-0 fits; the pod must not
    // go to a-0 (c-0 would also do).
    let mut fresh = pod_with_claim("fresh", "fresh")?;
    fresh.spec.as_mut().unwrap().affinity = Some(serde_json::from_value(json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                   "values": ["a-0", "b-0"]}]}]}}
    }))?);
    create_pods(&pods, vec![fresh]).await?;
    let all = wait_bound(&pods, &["fresh".to_string()], Duration::from_secs(20)).await?;
    ensure!(node_of(&all["fresh"]) == Some("b-0"), "fresh on {:?}", node_of(&all["fresh"]));

    // Now b-0 is at its limit too: a second new CSI volume restricted to
    // a-0 and b-0 fits nowhere, with upstream's reasons.
    let (pv, pvc) = pair("fresh-2", json!({}), csi("fresh-2"))?;
    pvs.create(&PostParams::default(), &pv).await?;
    pvcs.create(&PostParams::default(), &pvc).await?;
    let mut late = pod_with_claim("late", "fresh-2")?;
    late.spec.as_mut().unwrap().affinity = all["fresh"].spec.as_ref().unwrap().affinity.clone();
    create_pods(&pods, vec![late]).await?;
    let want = "False/Unschedulable: 0/3 nodes are available: 1 node(s) didn't match Pod's node \
                affinity/selector, 2 node(s) exceed max volume count. preemption: 0/3 nodes are \
                available: 1 Preemption is not helpful for scheduling, 2 No preemption victims \
                found for incoming pod.";
    let seen = eventually(Duration::from_secs(15), || async {
        let p = pods.get("late").await.ok()?;
        (scheduled_message(&p) == want).then_some(())
    })
    .await;
    let p = pods.get("late").await?;
    ensure!(
        seen.is_some() && node_of(&p).is_none(),
        "late on {:?}, PodScheduled {:?}, expected {want:?}{}",
        node_of(&p),
        scheduled_message(&p),
        sched.tail()
    );
    Ok(())
}
