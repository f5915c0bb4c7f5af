//! End to end, WaitForFirstConsumer claims on a cluster that behaves like
//! one: kube-apiserver with kube-controller-manager (the PV binder and the
//! StatefulSet controller), KWOK kubelets, and the test provisioner of
//! `convoy-testenv` as the class's external provisioner. Convoy chooses
//! the node, writes the claim's selected node (or a static volume's
//! `claimRef`) in PreBind and waits until the PV controller has bound the
//! claim; then the pod is bound and runs. A class whose CSI driver
//! publishes CSIStorageCapacity keeps its pod pending until a capacity
//! with room appears, then provisions in that capacity's zone.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use convoy_testenv::{TEST_CSI_PROVISIONER, TEST_PROVISIONER, TestProvisioner};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIStorageCapacity, StorageClass};
use kube::api::{Api, PostParams};
use serde_json::json;

/// A KWOK node in `zone`, labelled with its hostname.
fn zoned_node(name: &str, zone: &str) -> Node {
    let mut n = convoy_testenv::kwok_node(name);
    n.metadata.labels = Some(
        [
            ("kubernetes.io/hostname".to_string(), name.to_string()),
            ("topology.kubernetes.io/zone".to_string(), zone.to_string()),
        ]
        .into(),
    );
    n.status = node(name, "4", "8Gi", "110").status;
    n
}

async fn create_class(client: &kube::Client, name: &str, provisioner: &str) -> Result<()> {
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": name}, "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer"
    }))?;
    Api::<StorageClass>::all(client.clone()).create(&PostParams::default(), &class).await?;
    Ok(())
}

/// The zone (or hostname) a provisioned volume's node affinity names.
fn affinity_value(pv: &PersistentVolume) -> Option<(String, String)> {
    let term = &pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref()?.node_selector_terms[0];
    let e = &term.match_expressions.as_ref()?[0];
    Some((e.key.clone(), e.values.as_ref()?.first()?.clone()))
}

fn bound_volume(c: &PersistentVolumeClaim) -> Option<String> {
    let phase = c.status.as_ref()?.phase.as_deref()?;
    (phase == "Bound").then(|| c.spec.as_ref()?.volume_name.clone()).flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_set_claims_are_provisioned_in_their_pods_zone() -> Result<()> {
    let cp = ControlPlane::start_cluster().await?;
    let pods = cp.namespace("wfc").await?;
    let nodes: Vec<Node> =
        [("a-0", "a"), ("b-0", "b"), ("c-0", "c")].iter().map(|(n, z)| zoned_node(n, z)).collect();
    create_nodes(&cp.client, nodes).await?;
    create_class(&cp.client, "wfc-test", TEST_PROVISIONER).await?;
    let _provisioner = TestProvisioner::spawn(cp.client.clone());
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "wfc"},
        "spec": {
            "serviceName": "web",
            "replicas": 3,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "schedulerName": CONVOY,
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]
                }
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"storageClassName": "wfc-test", "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    }))?;
    Api::<StatefulSet>::namespaced(cp.client.clone(), "wfc")
        .create(&PostParams::default(), &set)
        .await?;

    let names = ["web-0", "web-1", "web-2"];
    let running = eventually(Duration::from_secs(90), || async {
        let all = pods_by_name(&pods).await.ok()?;
        names
            .iter()
            .all(|n| {
                all.get(*n).and_then(|p| p.status.as_ref()?.phase.clone()).as_deref()
                    == Some("Running")
            })
            .then_some(all)
    })
    .await;
    let all = match running {
        Some(all) => all,
        None => {
            let claims = Api::<PersistentVolumeClaim>::namespaced(cp.client.clone(), "wfc")
                .list(&Default::default())
                .await?;
            anyhow::bail!(
                "pods not Running: {:?}\nclaims: {:?}{}",
                pods_by_name(&pods)
                    .await?
                    .values()
                    .map(|p| (node_of(p).map(str::to_string), scheduled_message(p)))
                    .collect::<Vec<_>>(),
                claims.items.iter().map(|c| (&c.metadata.name, &c.status)).collect::<Vec<_>>(),
                sched.tail()
            );
        }
    };

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cp.client.clone(), "wfc");
    let pvs: Api<PersistentVolume> = Api::all(cp.client.clone());
    let node_api: Api<Node> = Api::all(cp.client.clone());
    for name in names {
        let node = node_of(&all[name]).context("bound")?.to_string();
        let claim = claims.get(&format!("data-{name}")).await?;
        let volume = bound_volume(&claim).with_context(|| format!("{name}'s claim: {claim:?}"))?;
        let annotations = claim.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            annotations.get("volume.kubernetes.io/selected-node") == Some(&node),
            "{name}: selected node {:?}, runs on {node}",
            annotations.get("volume.kubernetes.io/selected-node")
        );
        let pv = pvs.get(&volume).await?;
        let zone = node_api.get(&node).await?.metadata.labels.unwrap_or_default()
            ["topology.kubernetes.io/zone"]
            .clone();
        ensure!(
            affinity_value(&pv) == Some(("topology.kubernetes.io/zone".into(), zone.clone())),
            "{name} on {node} (zone {zone}), its volume {volume}: {:?}",
            affinity_value(&pv)
        );
        ensure!(
            pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"),
            "{volume}: {:?}",
            pv.status
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_local_volume_brings_its_pod_to_its_node() -> Result<()> {
    let cp = ControlPlane::start_cluster().await?;
    let pods = cp.namespace("local").await?;
    let nodes: Vec<Node> =
        [("n-0", "a"), ("n-1", "a"), ("n-2", "b")].iter().map(|(n, z)| zoned_node(n, z)).collect();
    create_nodes(&cp.client, nodes).await?;
    create_class(&cp.client, "local-wfc", "kubernetes.io/no-provisioner").await?;
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "local-n-1"},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-wfc",
            "local": {"path": "/mnt/disk"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n-1"]}]}]}}
        }
    }))?;
    Api::<PersistentVolume>::all(cp.client.clone()).create(&PostParams::default(), &pv).await?;
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "local"},
        "spec": {"storageClassName": "local-wfc", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "5Gi"}}}
    }))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cp.client.clone(), "local");
    claims.create(&PostParams::default(), &claim).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let mut p: Pod = pod("user", CONVOY, "100m", "100Mi");
    p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}),
    )?]);
    // The namespace's ServiceAccount comes from the controller manager.
    let created = eventually(Duration::from_secs(20), || async {
        pods.create(&PostParams::default(), &p).await.ok()
    })
    .await;
    ensure!(created.is_some(), "creating the pod");
    let all = wait_bound(&pods, &["user".to_string()], Duration::from_secs(30)).await?;
    ensure!(node_of(&all["user"]) == Some("n-1"), "user on {:?}", node_of(&all["user"]));
    let claim = claims.get("data").await?;
    ensure!(bound_volume(&claim).as_deref() == Some("local-n-1"), "claim: {:?}", claim);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_storage_capacity_holds_then_places_the_pod() -> Result<()> {
    let cp = ControlPlane::start_cluster().await?;
    let pods = cp.namespace("cap").await?;
    let nodes: Vec<Node> =
        [("a-0", "a"), ("b-0", "b"), ("c-0", "c")].iter().map(|(n, z)| zoned_node(n, z)).collect();
    create_nodes(&cp.client, nodes).await?;
    let driver: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": TEST_CSI_PROVISIONER}, "spec": {"storageCapacity": true}
    }))?;
    Api::<CSIDriver>::all(cp.client.clone()).create(&PostParams::default(), &driver).await?;
    create_class(&cp.client, "tracked", TEST_CSI_PROVISIONER).await?;
    // Zone a has too little; b and c publish nothing yet.
    let capacities: Api<CSIStorageCapacity> = Api::namespaced(cp.client.clone(), "cap");
    let capacity = |zone: &str, size: &str| -> Result<CSIStorageCapacity> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": format!("tracked-{zone}"), "namespace": "cap"},
            "storageClassName": "tracked",
            "nodeTopology": {"matchLabels": {"topology.kubernetes.io/zone": zone}},
            "capacity": size
        }))?)
    };
    capacities.create(&PostParams::default(), &capacity("a", "1Gi")?).await?;
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "cap"},
        "spec": {"storageClassName": "tracked", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "5Gi"}}}
    }))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cp.client.clone(), "cap");
    claims.create(&PostParams::default(), &claim).await?;
    let _provisioner = TestProvisioner::spawn(cp.client.clone());
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let mut p: Pod = pod("user", CONVOY, "100m", "100Mi");
    p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}),
    )?]);
    pods.create(&PostParams::default(), &p).await?;
    let want = "False/Unschedulable: 0/3 nodes are available: 3 node(s) did not have enough \
                free storage. preemption: 0/3 nodes are available: 3 Preemption is not helpful \
                for scheduling.";
    let seen = eventually(Duration::from_secs(15), || async {
        let p = pods.get("user").await.ok()?;
        (scheduled_message(&p) == want).then_some(())
    })
    .await;
    let got = pods.get("user").await?;
    ensure!(
        seen.is_some() && node_of(&got).is_none(),
        "user on {:?}, PodScheduled {:?}, expected {want:?}{}",
        node_of(&got),
        scheduled_message(&got),
        sched.tail()
    );

    // Zone b publishes room: the CSIStorageCapacity event requeues the pod.
    capacities.create(&PostParams::default(), &capacity("b", "100Gi")?).await?;
    let all = wait_bound(&pods, &["user".to_string()], Duration::from_secs(30)).await?;
    ensure!(node_of(&all["user"]) == Some("b-0"), "user on {:?}", node_of(&all["user"]));
    let claim = claims.get("data").await?;
    let volume = bound_volume(&claim).with_context(|| format!("claim: {claim:?}"))?;
    let pv = Api::<PersistentVolume>::all(cp.client.clone()).get(&volume).await?;
    ensure!(
        affinity_value(&pv) == Some(("topology.kubernetes.io/zone".into(), "b".into())),
        "{volume}: {:?}",
        affinity_value(&pv)
    );
    Ok(())
}
