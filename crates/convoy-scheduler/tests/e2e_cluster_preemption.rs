//! Preemption on a cluster that behaves like one: kube-apiserver with
//! kube-controller-manager (the disruption controller computes the PDBs'
//! `disruptionsAllowed`) and KWOK kubelets (bound pods go Running; a
//! deleted pod terminates at the end of its grace period, as a kubelet
//! would end it). No finalizer or zero grace period stands in for a
//! kubelet here.

mod common;

use std::time::Duration;

use anyhow::{Result, ensure};
use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, PostParams};

/// A KWOK node with `cpu` CPUs (4Gi, 110 pods).
fn kwok_node(name: &str, cpu: &str) -> Node {
    let mut n = convoy_testenv::kwok_node(name);
    let resources = node(name, cpu, "4Gi", "110").status;
    n.status = resources;
    n
}

/// A pod bound to `node` (as if scheduled earlier), labelled `app`,
/// requesting `cpu`, ended `grace` seconds after its deletion.
fn running(name: &str, node: &str, app: &str, cpu: &str, grace: i64) -> Pod {
    let mut p = pod(name, CONVOY, cpu, "100Mi");
    p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
    let spec = p.spec.as_mut().expect("spec");
    spec.node_name = Some(node.into());
    spec.termination_grace_period_seconds = Some(grace);
    p
}

async fn create_class(client: &kube::Client, name: &str, value: i32, never: bool) -> Result<()> {
    let mut class = serde_json::json!({ "metadata": { "name": name }, "value": value });
    if never {
        class["preemptionPolicy"] = "Never".into();
    }
    let class: PriorityClass = serde_json::from_value(class)?;
    Api::<PriorityClass>::all(client.clone()).create(&PostParams::default(), &class).await?;
    Ok(())
}

/// Waits until every named pod runs (KWOK's kubelet took it).
async fn wait_running(api: &Api<Pod>, names: &[&str]) -> Result<()> {
    let ok = eventually(Duration::from_secs(30), || async {
        let all = pods_by_name(api).await.ok()?;
        names
            .iter()
            .all(|n| {
                all.get(*n).and_then(|p| p.status.as_ref()?.phase.clone()).as_deref()
                    == Some("Running")
            })
            .then_some(())
    })
    .await;
    ensure!(ok.is_some(), "pods {names:?} not Running: {:?}", pods_by_name(api).await?.keys());
    Ok(())
}

/// A pod of priority 1,000,000 needs 3 of a node's 4 CPUs. Both nodes hold
/// two 2-CPU pods of priority 0; those on `n1` are covered by a PDB that
/// allows no disruption, those on `n2` by none. Convoy evicts the two pods
/// on `n2` (the candidate with no PDB violation), which terminate after
/// their 2 s grace period; the preemptor binds on `n2` only once they are
/// gone, and runs. The protected pods are never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemptor_binds_after_its_victims_terminate_and_spares_the_pdb() -> Result<()> {
    let cp = ControlPlane::start_cluster().await?;
    let pods = cp.namespace("preempt").await?;
    create_nodes(&cp.client, vec![kwok_node("n1", "4"), kwok_node("n2", "4")]).await?;
    create_class(&cp.client, "urgent", 1_000_000, false).await?;
    for (name, node, app) in [
        ("safe-0", "n1", "safe"),
        ("safe-1", "n1", "safe"),
        ("free-0", "n2", "free"),
        ("free-1", "n2", "free"),
    ] {
        create_retrying(&pods, &running(name, node, app, "2", 2)).await?;
    }
    wait_running(&pods, &["safe-0", "safe-1", "free-0", "free-1"]).await?;
    let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "safe" },
        "spec": { "minAvailable": 2, "selector": { "matchLabels": { "app": "safe" } } }
    }))?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cp.client.clone(), "preempt");
    pdbs.create(&PostParams::default(), &pdb).await?;
    // The disruption controller has counted the healthy pods: 0 allowed.
    let counted = eventually(Duration::from_secs(30), || async {
        let s = pdbs.get("safe").await.ok()?.status?;
        (s.current_healthy == Some(2) && s.disruptions_allowed == Some(0)).then_some(())
    })
    .await;
    ensure!(counted.is_some(), "PDB status not computed: {:?}", pdbs.get("safe").await?.status);

    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let mut high = pod("high", CONVOY, "3", "100Mi");
    high.spec.as_mut().expect("spec").priority_class_name = Some("urgent".into());
    create_retrying(&pods, &high).await?;

    // The victims are on n2, and are still terminating for a while.
    let terminating = eventually(Duration::from_secs(20), || async {
        let all = pods_by_name(&pods).await.ok()?;
        ["free-0", "free-1"]
            .iter()
            .all(|n| all.get(*n).is_some_and(|p| p.metadata.deletion_timestamp.is_some()))
            .then_some(all)
    })
    .await;
    let Some(all) = terminating else {
        anyhow::bail!("victims on n2 not preempted: {}", sched.tail());
    };
    ensure!(node_of(&all["high"]).is_none(), "bound while its victims still run");
    ensure!(
        all["high"].status.as_ref().and_then(|s| s.nominated_node_name.as_deref()) == Some("n2")
            || sched.count("preempts 2 pod(s) on n2") == 1,
        "not nominated to n2: {}",
        sched.tail()
    );

    // KWOK ends them at their deadline; then the preemptor binds there.
    let bound = wait_bound(&pods, &["high".to_string()], Duration::from_secs(30)).await?;
    ensure!(node_of(&bound["high"]) == Some("n2"), "high on {:?}", node_of(&bound["high"]));
    ensure!(
        !bound.contains_key("free-0") && !bound.contains_key("free-1"),
        "the preemptor bound while a victim still existed"
    );
    wait_running(&pods, &["high"]).await?;
    let all = pods_by_name(&pods).await?;
    for name in ["safe-0", "safe-1"] {
        ensure!(
            all.get(name).is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "{name}, protected by the PDB, was touched"
        );
    }
    ensure!(sched.count("preempts") == 1, "more than one preemption: {}", sched.tail());
    Ok(())
}

/// A pod whose PriorityClass says `preemptionPolicy: Never` waits for room
/// and evicts nobody; it binds once a pod ends on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_policy_never_never_evicts() -> Result<()> {
    let cp = ControlPlane::start_cluster().await?;
    let pods = cp.namespace("polite").await?;
    create_nodes(&cp.client, vec![kwok_node("n1", "4")]).await?;
    create_class(&cp.client, "polite", 1_000_000, true).await?;
    for name in ["low-0", "low-1"] {
        create_retrying(&pods, &running(name, "n1", "low", "2", 1)).await?;
    }
    wait_running(&pods, &["low-0", "low-1"]).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let mut high = pod("high", CONVOY, "3", "100Mi");
    high.spec.as_mut().expect("spec").priority_class_name = Some("polite".into());
    create_retrying(&pods, &high).await?;

    let refused = eventually(Duration::from_secs(20), || async {
        let p = pods.get("high").await.ok()?;
        scheduled_message(&p).contains("not eligible due to preemptionPolicy=Never").then_some(())
    })
    .await;
    ensure!(refused.is_some(), "no Never message: {}", scheduled_message(&pods.get("high").await?));
    // Give a wrong preemption every chance to happen.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = pods_by_name(&pods).await?;
    for name in ["low-0", "low-1"] {
        ensure!(
            all.get(name).is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "{name} was evicted by a Never pod"
        );
    }
    ensure!(node_of(&all["high"]).is_none(), "bound without room");
    ensure!(sched.count("preempts") == 0, "a preemption happened: {}", sched.tail());

    // Room made by someone else: the pod binds.
    for name in ["low-0", "low-1"] {
        pods.delete(name, &Default::default()).await?;
    }
    let bound = wait_bound(&pods, &["high".to_string()], Duration::from_secs(30)).await?;
    ensure!(node_of(&bound["high"]) == Some("n1"));
    Ok(())
}
