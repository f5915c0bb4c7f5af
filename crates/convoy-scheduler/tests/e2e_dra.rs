//! End to end, Dynamic Resource Allocation (`resource.k8s.io/v1`): the
//! `convoy-scheduler` binary against kube-apiserver with
//! kube-controller-manager (its resourceclaim controller makes claims from
//! pods' ResourceClaimTemplates, drops gone pods from `reservedFor`,
//! deallocates and deletes unused claims) and KWOK kubelets.
//!
//! Four nodes `gpu-0`..`gpu-3`, labelled with their NVLink domain
//! (`nvidia.com/gpu.clique`: `clique-a` for `gpu-0`, `gpu-1`, `clique-b`
//! for the others), each publishing one ResourceSlice (driver
//! `gpu.example.com`, pool = node) of eight devices with a `productName`,
//! a `cliqueId` and a `memory` capacity. Only `gpu-1`'s devices have 80Gi.
//!
//! - A pod whose template asks for two devices of more than 40Gi (CEL on
//!   the capacity) is bound to `gpu-1`; its generated claim is allocated
//!   there (two results of pool `gpu-1`, node selector `gpu-1`), reserved
//!   for it, and carries the delete-protection finalizer.
//! - A claim no device satisfies keeps its pod pending with upstream's
//!   FitError and a `FailedScheduling` Event, until a node whose slice has
//!   such devices joins (at the end).
//! - Two pods sharing one claim are bound to the claim's node; the claim is
//!   reserved for both.
//! - After a restart of the scheduler, a pod wanting all eight 80Gi
//!   devices waits while the first pod holds two; when that pod is deleted, the controller deletes its claim, the
//!   devices are free again and the waiting pod binds.
//! - Gangs (upstream's PodGroup) of pods with eight devices each: four
//!   members bind, one per node; a second gang of two that must share
//!   one NVLink domain binds nothing while the free nodes are in
//!   different domains, and binds whole in one domain once that domain's
//!   nodes are free.

mod common;
#[path = "common/dra.rs"]
mod dra;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use convoy_adapters::pod_groups::api_resource;
use convoy_api::PodGroupApi;
use dra::{A100_40, A100_80, Gpu, Uses};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

/// The nodes: name, NVLink domain, GPU model.
const NODES: [(&str, &str, Gpu); 4] = [
    ("gpu-0", "clique-a", A100_40),
    ("gpu-1", "clique-a", A100_80),
    ("gpu-2", "clique-b", A100_40),
    ("gpu-3", "clique-b", A100_40),
];

/// A KWOK node in NVLink domain `clique`.
fn gpu_node(name: &str, clique: &str) -> Node {
    let mut n = convoy_testenv::kwok_node(name);
    n.metadata.labels = Some(
        [
            ("kubernetes.io/hostname".to_string(), name.to_string()),
            (dra::CLIQUE_LABEL.to_string(), clique.to_string()),
        ]
        .into(),
    );
    n.status = node(name, "16", "64Gi", "110").status;
    n
}

/// The cluster of [`NODES`] with their slices and the DeviceClass, a
/// namespace `ns` with its ServiceAccount, and a running scheduler.
async fn gpu_cluster(ns: &str) -> Result<(ControlPlane, Api<Pod>, Scheduler)> {
    let cp = ControlPlane::start_cluster().await?;
    let pods = cp.namespace(ns).await?;
    create_nodes(&cp.client, NODES.iter().map(|(n, c, _)| gpu_node(n, c)).collect()).await?;
    dra::create(&cp.client, &dra::device_class()).await?;
    for (n, c, gpu) in NODES {
        dra::create(&cp.client, &dra::slice(n, gpu, c, 8)).await?;
    }
    // Pods are admitted once the controller manager made the namespace's
    // ServiceAccount.
    let accounts: Api<ServiceAccount> = Api::namespaced(cp.client.clone(), ns);
    eventually(Duration::from_secs(20), || async { accounts.get_opt("default").await.ok()? })
        .await
        .context("no default ServiceAccount")?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    Ok((cp, pods, sched))
}

/// Creates `pod` (JSON) for Convoy.
async fn create_pod(client: &kube::Client, mut pod: Value) -> Result<()> {
    pod["spec"]["schedulerName"] = json!(CONVOY);
    dra::create(client, &pod).await
}

/// The pod's claims, in `spec.resourceClaims` order, once they all exist.
async fn claims_of(cp: &ControlPlane, ns: &str, pod: &str) -> Result<Vec<ResourceClaim>> {
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), ns);
    let claims: Api<ResourceClaim> = Api::namespaced(cp.client.clone(), ns);
    let found = eventually(Duration::from_secs(10), || async {
        let p = pods.get(pod).await.ok()?;
        let mut out = Vec::new();
        for name in dra::claim_names(&p) {
            out.push(claims.get(&name?).await.ok()?);
        }
        Some(out)
    })
    .await;
    found.with_context(|| format!("{ns}/{pod}: claims not created"))
}

/// Waits until the pod's PodScheduled condition reads `want`.
async fn wait_message(pods: &Api<Pod>, name: &str, want: &str, sched: &Scheduler) -> Result<()> {
    let seen = eventually(Duration::from_secs(20), || async {
        let p = pods.get(name).await.ok()?;
        (scheduled_message(&p) == want).then_some(())
    })
    .await;
    let got = pods.get(name).await?;
    ensure!(
        seen.is_some() && node_of(&got).is_none(),
        "{name} on {:?}, PodScheduled {:?}, expected {want:?}{}",
        node_of(&got),
        scheduled_message(&got),
        sched.tail()
    );
    Ok(())
}

/// Deletes pods at once (no grace period).
async fn delete_pods(pods: &Api<Pod>, names: &[&str]) -> Result<()> {
    let dp = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
    for n in names {
        pods.delete(n, &dp).await.with_context(|| format!("deleting {n}"))?;
    }
    Ok(())
}

/// Waits until none of the claims exists any more.
async fn wait_claims_gone(cp: &ControlPlane, ns: &str, names: &[String]) -> Result<()> {
    let claims: Api<ResourceClaim> = Api::namespaced(cp.client.clone(), ns);
    let gone = eventually(Duration::from_secs(30), || async {
        for n in names {
            if claims.get_opt(n).await.ok()?.is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
    let left: Vec<_> = claims
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|c| names.contains(c.metadata.name.as_ref().unwrap()))
        .map(|c| (c.metadata.name.clone(), c.metadata.finalizers.clone(), c.status.clone()))
        .collect();
    ensure!(gone.is_some(), "claims not deleted within 30 s: {left:?}");
    Ok(())
}

fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

fn pool(node: &str) -> BTreeSet<(String, String)> {
    [(dra::DRIVER.to_string(), node.to_string())].into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_allocated_shared_and_freed_on_gpu_nodes() -> Result<()> {
    let ns = "dra";
    let (cp, pods, sched) = gpu_cluster(ns).await?;
    let started = std::time::Instant::now();

    // (a) Two devices of more than 40Gi: only gpu-1 has them.
    let big = dra::template(ns, "two-big", vec![dra::request("gpu", 2, &[dra::MORE_THAN_40GI])]);
    dra::create(&cp.client, &big).await?;
    create_pod(&cp.client, dra::pod(ns, "big", &[Uses::Template("two-big")])).await?;
    let all = wait_bound(&pods, &["big".to_string()], Duration::from_secs(30))
        .await
        .with_context(|| sched.tail())?;
    ensure!(node_of(&all["big"]) == Some("gpu-1"), "big on {:?}", node_of(&all["big"]));
    let claims = claims_of(&cp, ns, "big").await?;
    ensure!(claims.len() == 1, "big's claims: {claims:?}");
    let big_claim = claims[0].metadata.name.clone().context("named")?;
    let a = dra::allocated(&claims[0]).with_context(|| format!("not allocated: {claims:?}"))?;
    ensure!(a.pools == pool("gpu-1") && a.devices.len() == 2, "big's allocation: {a:?}");
    ensure!(a.nodes == ["gpu-1"], "big's allocation's node selector: {a:?}");
    ensure!(a.reserved_for == [uid(&all["big"])], "big's claim reserved for {:?}", a.reserved_for);
    let finalizers = claims[0].metadata.finalizers.clone().unwrap_or_default();
    ensure!(finalizers.iter().any(|f| f == dra::FINALIZER), "finalizers {finalizers:?}");

    // (d) A product no node has.
    let h200 =
        dra::template(ns, "h200", vec![dra::request("gpu", 1, &[&dra::product_is("NVIDIA H200")])]);
    dra::create(&cp.client, &h200).await?;
    create_pod(&cp.client, dra::pod(ns, "nowhere", &[Uses::Template("h200")])).await?;
    let want = "False/Unschedulable: 0/4 nodes are available: 4 cannot allocate all claims. \
                preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.";
    wait_message(&pods, "nowhere", want, &sched).await?;
    // The Event is written off the scheduling loop: wait for it.
    let note = eventually(Duration::from_secs(10), || async {
        let failed = events(&cp.client, ns, "FailedScheduling").await.ok()?;
        failed
            .into_iter()
            .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("nowhere"))
            .and_then(|e| e.note)
    })
    .await;
    ensure!(
        note.as_deref() == want.strip_prefix("False/Unschedulable: "),
        "FailedScheduling of nowhere: {note:?}"
    );

    // (b) One 40GB device shared by two pods, created together.
    let shared = dra::claim(
        ns,
        "shared",
        vec![dra::request("gpu", 1, &[&dra::product_is(A100_40.product)])],
    );
    dra::create(&cp.client, &shared).await?;
    for p in ["share-0", "share-1"] {
        create_pod(&cp.client, dra::pod(ns, p, &[Uses::Claim("shared")])).await?;
    }
    let names = ["share-0".to_string(), "share-1".to_string()];
    let all =
        wait_bound(&pods, &names, Duration::from_secs(30)).await.with_context(|| sched.tail())?;
    let on = node_of(&all["share-0"]).context("bound")?.to_string();
    ensure!(
        node_of(&all["share-1"]) == Some(on.as_str()),
        "share-1 on {:?}, share-0 on {on}",
        node_of(&all["share-1"])
    );
    ensure!(on != "gpu-1", "a 40GB device on {on}");
    let c = claims_of(&cp, ns, "share-0").await?.remove(0);
    let a = dra::allocated(&c).with_context(|| format!("shared not allocated: {c:?}"))?;
    ensure!(
        a.pools == pool(&on) && a.devices.len() == 1 && a.nodes == [on.clone()],
        "shared: {a:?}"
    );
    let reserved: BTreeSet<_> = a.reserved_for.iter().cloned().collect();
    let users: BTreeSet<_> = [uid(&all["share-0"]), uid(&all["share-1"])].into();
    ensure!(
        reserved == users && a.reserved_for.len() == 2,
        "shared reserved for {:?}",
        a.reserved_for
    );

    // A new scheduler process knows the allocated devices from the
    // claims it lists.
    drop(sched);
    let mut sched = Scheduler::start(&cp.env, "convoy-2", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    // (e) All eight 80Gi devices: gpu-1 has six free while big holds two.
    let eight =
        dra::template(ns, "eight-big", vec![dra::request("gpu", 8, &[dra::MORE_THAN_40GI])]);
    dra::create(&cp.client, &eight).await?;
    create_pod(&cp.client, dra::pod(ns, "all-big", &[Uses::Template("eight-big")])).await?;
    let want = "False/Unschedulable: 0/4 nodes are available: 4 cannot allocate all claims. \
                preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.";
    wait_message(&pods, "all-big", want, &sched).await?;
    delete_pods(&pods, &["big"]).await?;
    wait_claims_gone(&cp, ns, &[big_claim]).await?;
    let all = wait_bound(&pods, &["all-big".to_string()], Duration::from_secs(30))
        .await
        .with_context(|| sched.tail())?;
    ensure!(node_of(&all["all-big"]) == Some("gpu-1"), "all-big on {:?}", node_of(&all["all-big"]));
    let c = claims_of(&cp, ns, "all-big").await?.remove(0);
    let a = dra::allocated(&c).with_context(|| format!("all-big's claim: {c:?}"))?;
    ensure!(a.pools == pool("gpu-1") && a.devices.len() == 8, "all-big's allocation: {a:?}");
    let nowhere = pods.get("nowhere").await?;
    ensure!(node_of(&nowhere).is_none(), "nowhere bound to {:?}", node_of(&nowhere));

    // (f) A node with H200s joins and publishes its slice: the pending pod
    // is tried again and binds there.
    create_nodes(&cp.client, vec![gpu_node("gpu-4", "clique-c")]).await?;
    let h200 = Gpu { product: "NVIDIA H200", memory: "141Gi" };
    dra::create(&cp.client, &dra::slice("gpu-4", h200, "clique-c", 8)).await?;
    let all = wait_bound(&pods, &["nowhere".to_string()], Duration::from_secs(30))
        .await
        .with_context(|| sched.tail())?;
    ensure!(node_of(&all["nowhere"]) == Some("gpu-4"), "nowhere on {:?}", node_of(&all["nowhere"]));
    let c = claims_of(&cp, ns, "nowhere").await?.remove(0);
    let a = dra::allocated(&c).with_context(|| format!("nowhere's claim: {c:?}"))?;
    ensure!(a.pools == pool("gpu-4") && a.devices.len() == 1, "nowhere's allocation: {a:?}");
    println!("DRA scenarios done in {:.1?}", started.elapsed());
    ensure!(sched.count("panicked") == 0, "the scheduler panicked{}", sched.tail());
    Ok(())
}

/// Creates upstream's PodGroup `ns/name` (gang of `min`), its members
/// required in one NVLink domain when `one_clique`.
async fn create_gang(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
    min: u32,
    one_clique: bool,
) -> Result<()> {
    let api = PodGroupApi::Upstream;
    let mut obj = json!({
        "apiVersion": api.api_version(), "kind": "PodGroup",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "schedulingPolicy": { "gang": { "minCount": min } } },
    });
    if one_clique {
        obj["metadata"]["annotations"] =
            json!({ convoy_api::pod_group::REQUIRED_TOPOLOGY_ANNOTATION: dra::CLIQUE_LABEL });
    }
    let groups: Api<DynamicObject> =
        Api::namespaced_with(cp.client.clone(), ns, &api_resource(api));
    groups
        .create(&PostParams::default(), &serde_json::from_value(obj)?)
        .await
        .with_context(|| format!("creating PodGroup {ns}/{name}"))?;
    Ok(())
}

/// Members `<group>-0..n` of `group`, each with a claim for all eight
/// devices of a node (template `eight`).
async fn create_members(cp: &ControlPlane, ns: &str, group: &str, n: usize) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{group}-{i}");
        let mut p = dra::pod(ns, &name, &[Uses::Template("eight")]);
        p["spec"]["schedulingGroup"] = json!({ "podGroupName": group });
        create_pod(&cp.client, p).await?;
        names.push(name);
    }
    Ok(names)
}

fn bound_of<'a>(
    all: &'a std::collections::BTreeMap<String, Pod>,
    prefix: &str,
) -> Vec<(&'a str, &'a str)> {
    all.iter()
        .filter(|(n, _)| n.starts_with(prefix))
        .filter_map(|(n, p)| Some((n.as_str(), node_of(p)?)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_of_gpu_pods_bind_whole_in_one_clique_or_not_at_all() -> Result<()> {
    let ns = "dra-gang";
    let (cp, pods, sched) = gpu_cluster(ns).await?;
    let started = std::time::Instant::now();
    dra::create(&cp.client, &dra::template(ns, "eight", vec![dra::request("gpu", 8, &[])])).await?;

    // Four members of eight devices: one per node.
    create_gang(&cp, ns, "train", 4, false).await?;
    let train = create_members(&cp, ns, "train", 4).await?;
    let all =
        wait_bound(&pods, &train, Duration::from_secs(30)).await.with_context(|| sched.tail())?;
    let nodes: BTreeSet<&str> = train.iter().filter_map(|n| node_of(&all[n])).collect();
    ensure!(nodes.len() == 4, "train on {:?}", bound_of(&all, "train"));
    for name in &train {
        let on = node_of(&all[name]).context("bound")?;
        let c = claims_of(&cp, ns, name).await?.remove(0);
        let a = dra::allocated(&c).with_context(|| format!("{name}'s claim: {c:?}"))?;
        ensure!(a.pools == pool(on) && a.devices.len() == 8, "{name} on {on}: {a:?}");
        ensure!(
            a.reserved_for == [uid(&all[name])],
            "{name}'s claim reserved for {:?}",
            a.reserved_for
        );
    }

    // A gang of two that must share one clique: no device is free.
    create_gang(&cp, ns, "second", 2, true).await?;
    let second = create_members(&cp, ns, "second", 2).await?;
    let refused = eventually(Duration::from_secs(20), || async {
        let p = pods.get("second-0").await.ok()?;
        scheduled_message(&p).starts_with("False/Unschedulable: pod group").then_some(())
    })
    .await;
    ensure!(
        refused.is_some(),
        "second-0: {}{}",
        scheduled_message(&pods.get("second-0").await?),
        sched.tail()
    );

    // Free gpu-0 (clique-a) and gpu-2 (clique-b): two free nodes, in
    // different cliques.
    let on = |node: &str| -> Result<String> {
        Ok(train
            .iter()
            .find(|n| node_of(&all[*n]) == Some(node))
            .context("a member per node")?
            .clone())
    };
    let (on0, on1, on2) = (on("gpu-0")?, on("gpu-1")?, on("gpu-2")?);
    let claim_of = |name: &str| dra::claim_names(&all[name]).remove(0).unwrap_or_default();
    delete_pods(&pods, &[&on0, &on2]).await?;
    wait_claims_gone(&cp, ns, &[claim_of(&on0), claim_of(&on2)]).await?;
    // An attempt that saw both free nodes: one member fits in each clique.
    let both_free = "[clique-a: 1/2 fit, clique-b: 1/2 fit]";
    let retried = eventually(Duration::from_secs(30), || async {
        (sched.count(both_free) > 0).then_some(())
    })
    .await;
    ensure!(
        retried.is_some(),
        "no attempt of second saw gpu-0 and gpu-2 free ({both_free}){}",
        sched.tail()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = pods_by_name(&pods).await?;
    ensure!(
        bound_of(&now, "second").is_empty(),
        "second bound across cliques: {:?}",
        bound_of(&now, "second")
    );

    // Free gpu-1 too: clique-a is free, the gang binds there whole.
    delete_pods(&pods, &[&on1]).await?;
    let all2 =
        wait_bound(&pods, &second, Duration::from_secs(45)).await.with_context(|| sched.tail())?;
    let placed: BTreeSet<&str> = second.iter().filter_map(|n| node_of(&all2[n])).collect();
    ensure!(placed == ["gpu-0", "gpu-1"].into(), "second on {placed:?}");
    for name in &second {
        let on = node_of(&all2[name]).context("bound")?;
        let c = claims_of(&cp, ns, name).await?.remove(0);
        let a = dra::allocated(&c).with_context(|| format!("{name}'s claim: {c:?}"))?;
        ensure!(a.pools == pool(on) && a.devices.len() == 8, "{name} on {on}: {a:?}");
    }
    println!("DRA gangs done in {:.1?}", started.elapsed());
    Ok(())
}
