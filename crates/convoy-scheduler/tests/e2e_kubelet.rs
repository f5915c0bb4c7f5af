//! Beside real kubelets (kubemark's hollow nodes: the kubelet's own
//! admission, with a fake runtime) and other schedulers, on testenv.
//!
//! - A pod Convoy bound that the kubelet rejects is explained on the pod
//!   and on the node, counted, and its node held and released
//!   (`make test`).
//! - The conflict rate beside kube-scheduler, against two kube-schedulers
//!   doing the same (`make bench-conflicts`; ignored by default): pods
//!   rejected by admission per 1,000 placed.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

/// Waits until `names` are registered and Ready.
async fn wait_nodes_ready(client: &kube::Client, count: usize) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = eventually(Duration::from_secs(300), || async {
        let list = nodes.list(&ListParams::default()).await.ok()?;
        let ready =
            list.items
                .iter()
                .filter(|n| {
                    n.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
                        cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                    })
                })
                .count();
        (ready >= count).then_some(())
    })
    .await;
    ensure!(ready.is_some(), "{count} hollow nodes did not become Ready in 300 s");
    Ok(())
}

fn rejected_by_kubelet(p: &Pod) -> bool {
    p.status.as_ref().is_some_and(|s| {
        s.phase.as_deref() == Some("Failed")
            && s.message.as_deref().is_some_and(|m| m.starts_with("Pod was rejected: "))
    })
}

/// A pod Convoy binds that the kubelet refuses (its `spec.os` names
/// Windows, which the scheduler does not evaluate, as upstream's does
/// not): the kubelet fails it with `PodOSNotSupported`, and Convoy says so
/// on the pod and on the node, counts it, and holds the node for a while.
#[tokio::test]
async fn a_kubelet_rejection_is_explained_on_the_pod_and_the_node() -> Result<()> {
    let cp = ControlPlane::start_cluster().await?;
    let env = cp.env.clone();
    tokio::task::spawn_blocking(move || env.start_hollow_nodes(1, "hollow-", &[])).await??;
    wait_nodes_ready(&cp.client, 1).await?;
    let pods = cp.namespace("kubelet").await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let mut win = pod("win", CONVOY, "100m", "10Mi");
    win.spec.as_mut().expect("spec").os = Some(serde_json::from_value(json!({"name": "windows"}))?);
    create_retrying(&pods, &win).await?;

    let failed = eventually(Duration::from_secs(60), || async {
        let p = pods.get("win").await.ok()?;
        rejected_by_kubelet(&p).then_some(p)
    })
    .await
    .with_context(|| format!("win was not rejected by the kubelet\n{}", sched.tail()))?;
    let status = failed.status.as_ref().expect("status");
    assert_eq!(status.reason.as_deref(), Some("PodOSNotSupported"));
    assert_eq!(node_of(&failed), Some("hollow-0"));

    // The pod's Event, from Convoy (the kubelet writes its own).
    let on_pod = eventually(Duration::from_secs(30), || async {
        let evs = events(&cp.client, "kubelet", "RejectedByKubelet").await.ok()?;
        evs.into_iter().find(|e| {
            e.reporting_controller.as_deref() == Some("convoy-scheduler")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("win")
        })
    })
    .await
    .with_context(|| format!("no RejectedByKubelet Event on the pod\n{}", sched.tail()))?;
    let note = on_pod.note.unwrap_or_default();
    assert!(
        note.starts_with("kubelet on node hollow-0 rejected the pod after convoy-scheduler bound it (PodOSNotSupported: Failed to admit pod as the OS field doesn't match node OS)"),
        "{note}"
    );
    // The node's, in the default namespace (a node has none).
    let on_node = eventually(Duration::from_secs(30), || async {
        let evs = events(&cp.client, "default", "SchedulingConflict").await.ok()?;
        evs.into_iter().find(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("Node") && r.name.as_deref() == Some("hollow-0")
            })
        })
    })
    .await
    .with_context(|| format!("no SchedulingConflict Event on the node\n{}", sched.tail()))?;
    let note = on_node.note.unwrap_or_default();
    assert!(
        note.starts_with(
            "kubelet rejected pod kubelet/win bound by convoy-scheduler (PodOSNotSupported)"
        ),
        "{note}"
    );
    // Counted once (waited for: a CI run once scraped before the count
    // showed, with both Events already written).
    let want = "convoy_kubelet_rejections_total{reason=\"PodOSNotSupported\"} 1";
    let counted = eventually(Duration::from_secs(15), || async {
        metrics(&sched).await.ok().filter(|m| m.contains(want))
    })
    .await;
    ensure!(counted.is_some(), "{want} not in\n{}", metrics(&sched).await?);
    // Held, then offered again.
    let released = eventually(Duration::from_secs(30), || async {
        (sched.count("offered to scheduling again") > 0).then_some(())
    })
    .await;
    ensure!(released.is_some(), "hold never released\n{}", sched.tail());
    let mut next = pod("next", CONVOY, "100m", "10Mi");
    next.spec.as_mut().expect("spec").os = None;
    create_retrying(&pods, &next).await?;
    let bound = wait_bound(&pods, &["next".to_string()], Duration::from_secs(30)).await?;
    assert_eq!(node_of(&bound["next"]), Some("hollow-0"));
    Ok(())
}

/// A GPU turns unhealthy: the node's allocatable `nvidia.com/gpu` drops
/// (written to its status as the kubelet writes what its device plugin
/// reports) below what its bound pods request. Convoy says so on the node
/// and in its metrics, and places nothing more that needs a GPU there.
#[tokio::test]
async fn a_gpu_that_disappears_is_reported_and_not_used() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let pods = cp.namespace("gpus").await?;
    let gpu_node = |gpus: &str| -> Result<Node> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": "gpu-0"},
            "status": {"capacity": {"cpu": "32", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": gpus},
                       "allocatable": {"cpu": "32", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": gpus},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))?)
    };
    create_nodes(&cp.client, vec![gpu_node("8")?]).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let with_gpus = |name: &str, gpus: &str| -> Result<Pod> {
        let mut p = pod(name, CONVOY, "1", "10Mi");
        let c = &mut p.spec.as_mut().expect("spec").containers[0];
        let r = c.resources.as_mut().expect("resources");
        r.requests.as_mut().expect("requests").insert(
            "nvidia.com/gpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(gpus.into()),
        );
        r.limits = r.requests.clone();
        Ok(p)
    };
    create_retrying(&pods, &with_gpus("a", "4")?).await?;
    create_retrying(&pods, &with_gpus("b", "3")?).await?;
    wait_bound(&pods, &["a".to_string(), "b".to_string()], Duration::from_secs(30)).await?;

    // Two of the eight GPUs fail: the device plugin reports 6.
    let nodes: Api<Node> = Api::all(cp.client.clone());
    let patch = json!({"status": {"capacity": {"nvidia.com/gpu": "6"}, "allocatable": {"nvidia.com/gpu": "6"}}});
    nodes
        .patch_status("gpu-0", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await?;
    let event = eventually(Duration::from_secs(30), || async {
        let evs = events(&cp.client, "default", "ResourceShortfall").await.ok()?;
        evs.into_iter()
            .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("gpu-0"))
    })
    .await
    .with_context(|| format!("no ResourceShortfall Event on gpu-0\n{}", sched.tail()))?;
    let note = event.note.unwrap_or_default();
    assert!(
        note.starts_with(
            "allocatable nvidia.com/gpu dropped to 6 while its pods request 7 (gpus/a, gpus/b)"
        ),
        "{note}"
    );
    let metrics = metrics(&sched).await?;
    assert!(
        metrics.contains("convoy_node_resource_shortfalls_total{resource=\"nvidia.com/gpu\"} 1"),
        "{metrics}"
    );
    // Nothing more that needs a GPU goes there; a pod without one does.
    create_retrying(&pods, &with_gpus("c", "1")?).await?;
    create_retrying(&pods, &pod("d", CONVOY, "1", "10Mi")).await?;
    wait_bound(&pods, &["d".to_string()], Duration::from_secs(30)).await?;
    let c = eventually(Duration::from_secs(30), || async {
        let p = pods.get("c").await.ok()?;
        let message = scheduled_message(&p);
        message.contains("Insufficient nvidia.com/gpu").then_some(p)
    })
    .await
    .with_context(|| format!("c not reported Insufficient nvidia.com/gpu\n{}", sched.tail()))?;
    assert_eq!(node_of(&c), None);
    Ok(())
}

async fn metrics(sched: &Scheduler) -> Result<String> {
    http_body(sched.http, "/metrics").await.context("GET /metrics failed")
}

/// One scheduler's share of a conflict round.
#[derive(Debug, Default, Clone, Copy)]
struct Share {
    placed: usize,
    rejected: usize,
    pending: usize,
}

/// Creates `per_scheduler` pods of `cpu` for each of `schedulers` at the
/// same moment (interleaved), waits until nothing changes for 5 s, and
/// counts each scheduler's placements and kubelet rejections.
async fn conflict_round(
    pods: &Api<Pod>,
    schedulers: &[&str],
    per_scheduler: usize,
    cpu: &str,
    round: usize,
) -> Result<BTreeMap<String, Share>> {
    let mut batch = Vec::new();
    for i in 0..per_scheduler {
        for s in schedulers {
            batch.push(pod(&format!("r{round}-{s}-{i}"), s, cpu, "10Mi"));
        }
    }
    let created: Vec<_> = futures::stream::iter(batch)
        .map(|p| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &p).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    for c in created {
        c?;
    }
    let mut last = String::new();
    let mut stable_since = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(180);
    let shares = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let list = pods.list(&ListParams::default()).await?.items;
        let mut shares: BTreeMap<String, Share> = BTreeMap::new();
        let mut fingerprint = String::new();
        for p in list.iter().filter(|p| {
            p.metadata.name.as_deref().is_some_and(|n| n.starts_with(&format!("r{round}-")))
        }) {
            let s = p.spec.as_ref().and_then(|s| s.scheduler_name.clone()).unwrap_or_default();
            let share = shares.entry(s).or_default();
            let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            if rejected_by_kubelet(p) {
                share.rejected += 1;
            } else if node_of(p).is_some() && phase == "Running" {
                share.placed += 1;
            } else {
                share.pending += 1;
            }
            fingerprint.push_str(&format!(
                "{}{phase}{:?};",
                p.metadata.name.as_deref().unwrap_or(""),
                node_of(p)
            ));
        }
        if fingerprint != last {
            last = fingerprint;
            stable_since = Instant::now();
        } else if stable_since.elapsed() > Duration::from_secs(5) || Instant::now() > deadline {
            break shares;
        }
    };
    Ok(shares)
}

/// Deletes every pod of the namespace and waits until they are gone (the
/// kubelets have released them).
async fn clear(pods: &Api<Pod>) -> Result<()> {
    pods.delete_collection(&Default::default(), &ListParams::default()).await?;
    let gone = eventually(Duration::from_secs(120), || async {
        pods.list(&ListParams::default()).await.ok()?.items.is_empty().then_some(())
    })
    .await;
    ensure!(gone.is_some(), "pods not gone after 120 s");
    Ok(())
}

fn kube_scheduler_config(env: &convoy_testenv::TestEnv, name: &str) -> Result<std::path::PathBuf> {
    let rest =
        format!("leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {name}\n");
    Ok(env.kube_scheduler_config(name, &rest)?)
}

/// Sums of several rounds: per 1,000 placed.
fn per_thousand(s: &Share) -> f64 {
    if s.placed + s.rejected == 0 {
        return 0.0;
    }
    1000.0 * s.rejected as f64 / (s.placed + s.rejected) as f64
}

/// Convoy beside kube-scheduler, against two kube-schedulers, placing pods
/// on the same hollow nodes at the same moment. Run with `make
/// bench-conflicts` (`CONFLICT_NODES`, `CONFLICT_PODS` per scheduler,
/// `CONFLICT_ROUNDS`).
#[tokio::test]
#[ignore = "a measurement (several minutes): make bench-conflicts"]
async fn conflicts_beside_kube_scheduler() -> Result<()> {
    let var = |k: &str, d: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (nodes, per, rounds) =
        (var("CONFLICT_NODES", 20), var("CONFLICT_PODS", 60), var("CONFLICT_ROUNDS", 3));
    // 250m pods on 1-CPU nodes: four per node, as the 1-CPU pods on
    // 4-CPU nodes; each scheduler alone could fill 3/4 of the cluster.
    let cpu = "250m";
    let cp = ControlPlane::start_cluster().await?;
    let env = cp.env.clone();
    tokio::task::spawn_blocking(move || env.start_hollow_nodes(nodes, "hollow-", &[])).await??;
    wait_nodes_ready(&cp.client, nodes).await?;
    let pods = cp.namespace("conflicts").await?;

    let mut totals: BTreeMap<&str, BTreeMap<String, Share>> = BTreeMap::new();
    // Baseline: two kube-schedulers.
    {
        let a = cp.env.start_named_kube_scheduler(
            "ks-a",
            &kube_scheduler_config(&cp.env, "ks-a")?,
            &[],
        )?;
        let b = cp.env.start_named_kube_scheduler(
            "ks-b",
            &kube_scheduler_config(&cp.env, "ks-b")?,
            &[],
        )?;
        tokio::time::sleep(Duration::from_secs(10)).await;
        for round in 0..rounds {
            let shares = conflict_round(&pods, &["ks-a", "ks-b"], per, cpu, round).await?;
            eprintln!("two kube-schedulers, round {round}: {shares:?}");
            add(totals.entry("baseline").or_default(), shares);
            clear(&pods).await?;
        }
        drop((a, b));
    }
    // Convoy beside kube-scheduler.
    {
        let ks = cp.env.start_named_kube_scheduler(
            "ks-a",
            &kube_scheduler_config(&cp.env, "ks-a")?,
            &[],
        )?;
        let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
        sched.wait_ready(Duration::from_secs(30)).await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        for round in rounds..2 * rounds {
            let shares = conflict_round(&pods, &[CONVOY, "ks-a"], per, cpu, round).await?;
            eprintln!("Convoy beside kube-scheduler, round {round}: {shares:?}");
            let convoy_rejected = shares.get(CONVOY).map_or(0, |s| s.rejected);
            // Every rejection of a pod Convoy bound is explained.
            let explained = eventually(Duration::from_secs(30), || async {
                let evs = events(&cp.client, "conflicts", "RejectedByKubelet").await.ok()?;
                let n = evs
                    .iter()
                    .filter(|e| e.reporting_controller.as_deref() == Some("convoy-scheduler"))
                    .filter(|e| {
                        e.regarding
                            .as_ref()
                            .and_then(|r| r.name.as_deref())
                            .is_some_and(|n| n.starts_with(&format!("r{round}-")))
                    })
                    .count();
                (n >= convoy_rejected).then_some(n)
            })
            .await;
            ensure!(
                explained.is_some(),
                "round {round}: {convoy_rejected} rejections, not all explained\n{}",
                sched.tail()
            );
            add(totals.entry("convoy").or_default(), shares);
            clear(&pods).await?;
        }
        drop(ks);
    }
    let baseline = &totals["baseline"];
    let both = baseline.values().fold(Share::default(), |a, s| Share {
        placed: a.placed + s.placed,
        rejected: a.rejected + s.rejected,
        pending: a.pending + s.pending,
    });
    let convoy = totals["convoy"].get(CONVOY).copied().unwrap_or_default();
    let beside = totals["convoy"].get("ks-a").copied().unwrap_or_default();
    eprintln!(
        "CONFLICTS nodes={nodes} pods/scheduler={per} rounds={rounds}: two kube-schedulers \
         {:.1} rejected per 1,000 placed ({both:?}); Convoy {:.1} per 1,000 ({convoy:?}), \
         kube-scheduler beside it {:.1} ({beside:?})",
        per_thousand(&both),
        per_thousand(&convoy),
        per_thousand(&beside)
    );
    ensure!(
        per_thousand(&convoy) <= per_thousand(&both) / 2.0,
        "Convoy's rejection rate is over half the baseline's"
    );
    Ok(())
}

fn add(into: &mut BTreeMap<String, Share>, shares: BTreeMap<String, Share>) {
    for (k, s) in shares {
        let t = into.entry(k).or_default();
        t.placed += s.placed;
        t.rejected += s.rejected;
        t.pending += s.pending;
    }
}
