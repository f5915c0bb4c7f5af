//! End to end, GPUs: the `convoy-scheduler` binary with the bundled
//! `config/gpu-cluster.yaml` (profile `convoy-gpu`, GpuPlacement) against a
//! real kube-apiserver, next to a second process on the default profile as
//! the control. The embedded counterpart is `tests/gpu.rs`.
//!
//! One control plane; no kubelet runs: nodes are plain objects with
//! `nvidia.com/gpu` in their status, and "bound" means `spec.nodeName` is set.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use convoy_testenv::TestEnv;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};

const GPU: &str = "nvidia.com/gpu";
const GPU_PROFILE: &str = "convoy-gpu";
/// The sequence of `gpu_profile_fragments_less_than_the_default_profile`.
const SIZES: [i64; 10] = [1, 2, 1, 4, 2, 1, 1, 4, 8, 8];
/// The node a pod of another scheduler fills before Convoy starts.
const HELD: &str = "gpu-held";

/// 4 nodes of 8 GPUs per pool, plus [`HELD`] in the `gpu` pool, all 8 of
/// its GPUs taken by a pod bound directly (`spec.nodeName`, schedulerName
/// `default-scheduler`) before either scheduler starts.
///
/// - `convoy-gpu` (pool `gpu`): the pods of [`SIZES`], created one after the
///   other, each once the previous is bound, all bind, both 8-GPU pods
///   included; the four free nodes end exactly full and [`HELD`] holds only
///   the other scheduler's pod.
/// - the default profile (pool `default`, the same sequence): as on the
///   embedded cluster, the small pods are spread, both 8-GPU pods are
///   reported `Insufficient nvidia.com/gpu`, 16 GPUs stay free but stranded.
/// - no node's GPU requests, summed over the API server's pods, exceed its
///   allocatable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_profile_places_every_gpu_and_respects_other_schedulers_gpus() -> Result<()> {
    let began = Instant::now();
    let cp = ControlPlane::start().await?;
    let ns = "gpu";
    let pods = cp.namespace(ns).await?;
    let mut nodes: Vec<Node> = (0..4)
        .flat_map(|i| {
            [gpu_node(&format!("gpu-{i}"), "gpu"), gpu_node(&format!("dflt-{i}"), "default")]
        })
        .collect();
    nodes.push(gpu_node(HELD, "gpu"));
    create_nodes(&cp.client, nodes).await?;
    let mut theirs = gpu_pod("theirs", "default-scheduler", "gpu", 8);
    theirs.spec.as_mut().unwrap().node_name = Some(HELD.into());
    pods.create(&PostParams::default(), &theirs).await?;

    let mut gpu = start_gpu_scheduler(&cp.env)?;
    let mut dflt = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    gpu.wait_ready(Duration::from_secs(30)).await?;
    dflt.wait_ready(Duration::from_secs(30)).await?;
    let started = Instant::now();

    // Both sequences at once: disjoint pools, each in a fixed order.
    let ours = async {
        for (i, g) in SIZES.iter().enumerate() {
            let name = format!("g{i:02}-{g}gpu");
            pods.create(&PostParams::default(), &gpu_pod(&name, GPU_PROFILE, "gpu", *g)).await?;
            wait_bound(&pods, std::slice::from_ref(&name), Duration::from_secs(15))
                .await
                .with_context(|| gpu.tail())?;
        }
        anyhow::Ok(started.elapsed())
    };
    let control = async {
        for (i, g) in SIZES.iter().enumerate() {
            let name = format!("d{i:02}-{g}gpu");
            pods.create(&PostParams::default(), &gpu_pod(&name, CONVOY, "default", *g)).await?;
            if *g < 8 {
                wait_bound(&pods, std::slice::from_ref(&name), Duration::from_secs(15))
                    .await
                    .with_context(|| dflt.tail())?;
                continue;
            }
            // Stranded: reported unschedulable for lack of GPUs.
            let reported = eventually(Duration::from_secs(15), || async {
                let p = pods.get(&name).await.ok()?;
                let msg = scheduled_message(&p);
                (msg.starts_with("False/Unschedulable")
                    && msg.contains("Insufficient nvidia.com/gpu"))
                .then_some(())
            })
            .await;
            let p = pods.get(&name).await?;
            ensure!(
                reported.is_some(),
                "{name} (default profile): {:?}, on {:?}{}",
                scheduled_message(&p),
                node_of(&p),
                dflt.tail()
            );
        }
        anyhow::Ok(started.elapsed())
    };
    let (ours, control) = tokio::join!(ours, control);
    println!("convoy-gpu: 10 pods bound in {:?}; default profile done in {:?}", ours?, control?);

    // The API server's view: every pod of every namespace.
    let all = Api::<Pod>::all(cp.client.clone()).list(&ListParams::default()).await?.items;
    let nodes = Api::<Node>::all(cp.client.clone()).list(&ListParams::default()).await?.items;
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    for p in &all {
        if let Some(n) = node_of(p) {
            *used.entry(n.to_string()).or_default() += request(p, GPU) / 1000;
        }
    }
    let mut free: BTreeMap<String, i64> = BTreeMap::new();
    for n in &nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        let (cap, u) = (allocatable(n, GPU) / 1000, used.get(&name).copied().unwrap_or(0));
        ensure!(cap == 8, "{name}: allocatable {cap} GPUs");
        ensure!(u <= cap, "{name}: {u} GPUs requested, {cap} allocatable: {used:?}");
        free.insert(name, cap - u);
    }
    let by_name: BTreeMap<&str, &Pod> =
        all.iter().filter_map(|p| Some((p.metadata.name.as_deref()?, p))).collect();

    // convoy-gpu: all bound, 32 GPUs on the 4 free nodes, none beside theirs.
    for (i, g) in SIZES.iter().enumerate() {
        let name = format!("g{i:02}-{g}gpu");
        let on = by_name.get(name.as_str()).and_then(|p| node_of(p));
        ensure!(on.is_some_and(|n| n.starts_with("gpu-")), "{name} on {on:?}");
        ensure!(on != Some(HELD), "{name} bound to {HELD}, whose 8 GPUs were taken");
    }
    let on_held: Vec<&str> = all
        .iter()
        .filter(|p| node_of(p) == Some(HELD))
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    ensure!(on_held == ["theirs"], "pods on {HELD}: {on_held:?}");
    // HELD was a candidate (its selector matches): only its GPUs ruled it out.
    let log = gpu.log();
    let first = log.lines().find(|l| l.contains(" scheduled gpu/g00-1gpu on "));
    ensure!(
        first.is_some_and(|l| l.contains("rejected=1 Insufficient nvidia.com/gpu")),
        "the first decision does not name {HELD} as short of GPUs: {first:?}"
    );
    for p in placements(&log, ns) {
        ensure!(p.node != HELD, "decision line {p:?}: {HELD} had no free GPU");
    }
    let gpu_free: Vec<i64> = (0..4).map(|i| free[&format!("gpu-{i}")]).collect();
    ensure!(gpu_free == [0, 0, 0, 0], "convoy-gpu left GPUs free: {free:?}");
    let placed = placements_per_pod(&log, ns);
    ensure!(
        placed.len() == SIZES.len() && placed.values().all(|n| *n == 1),
        "convoy-gpu decision lines: {placed:?}"
    );

    // Default profile, the embedded scenario's numbers: 2 pending, 16 GPUs
    // free on nodes that all have some in use.
    let pending: Vec<String> = SIZES
        .iter()
        .enumerate()
        .map(|(i, g)| format!("d{i:02}-{g}gpu"))
        .filter(|n| by_name.get(n.as_str()).is_none_or(|p| node_of(p).is_none()))
        .collect();
    ensure!(pending == ["d08-8gpu", "d09-8gpu"], "default profile pending: {pending:?}");
    let dflt_free: Vec<i64> = (0..4).map(|i| free[&format!("dflt-{i}")]).collect();
    let stranded: i64 = dflt_free.iter().filter(|f| **f < 8).sum();
    ensure!(
        dflt_free.iter().all(|f| *f < 8) && stranded == 16,
        "default profile free GPUs per node {dflt_free:?}"
    );

    ensure!(gpu.running(), "convoy-gpu exited{}", gpu.tail());
    ensure!(dflt.running(), "the default-profile scheduler exited{}", dflt.tail());
    println!("test body {:?}", began.elapsed());
    Ok(())
}

/// A ready node of 8 GPUs, 64 cpu, 512Gi, 110 pods, labelled `pool`.
fn gpu_node(name: &str, pool: &str) -> Node {
    let resources = serde_json::json!({ "cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8" });
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": { "pool": pool } },
        "status": {
            "allocatable": resources,
            "capacity": resources,
            "conditions": [{ "type": "Ready", "status": "True" }]
        }
    }))
    .expect("valid node")
}

/// A pod for `scheduler` in `pool` asking for `gpus` GPUs, 4 cpu and 16Gi
/// (as in `tests/gpu.rs`); an extended resource needs its limit set.
fn gpu_pod(name: &str, scheduler: &str, pool: &str, gpus: i64) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": { "pool": pool },
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {
                    "requests": { "cpu": "4", "memory": "16Gi", GPU: gpus.to_string() },
                    "limits": { GPU: gpus.to_string() }
                }
            }]
        }
    }))
    .expect("valid pod")
}

/// `convoy-scheduler` with `config/gpu-cluster.yaml` unchanged but for the
/// connection settings the other end-to-end tests use (no leader election,
/// high client qps). Stderr goes to `<testenv dir>/convoy-gpu.log`.
fn start_gpu_scheduler(env: &TestEnv) -> Result<Scheduler> {
    let bundled =
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/gpu-cluster.yaml"));
    let yaml = std::fs::read_to_string(&bundled)
        .with_context(|| format!("reading {}", bundled.display()))?;
    let yaml = format!(
        "{yaml}\nclientConnection:\n  qps: 5000\n  burst: 5000\n\
         leaderElection:\n  leaderElect: false\n"
    );
    Scheduler::start_with_config(env, GPU_PROFILE, &yaml)
}
