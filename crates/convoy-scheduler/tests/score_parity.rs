//! Score parity with upstream kube-scheduler v1.37.2 on a real API server:
//! pods created one at a time on heterogeneous nodes, as a new user would.
//!
//! Two private control planes get the same nodes (cpu, memory, labels,
//! PreferNoSchedule taints, container images) and a RuntimeClass with pod
//! overhead. Each pod (containers with or without requests, explicit zero
//! requests, init containers and sidecars, pod-level requests, image
//! volumes, preferred node affinity, tolerations) is created in both;
//! upstream (logging every score at `-v=10`) schedules one copy, Convoy the
//! other. Asserted for every pod: Convoy's node is one of the nodes with
//! upstream's best total score, and Convoy's total equals it (or, when
//! upstream scores nothing, both choose the same node or neither binds).
//! When the two break a tie differently, Convoy's copy is moved to
//! upstream's node, so the next pod meets the same cluster on both sides.
//!
//! Seeds: `CONVOY_SCORE_PARITY_SEEDS=4,5` overrides the default; failure
//! messages start with `score parity seed N`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use common::{ControlPlane, Scheduler};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, DeleteParams, PostParams};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

const DEFAULT_SEEDS: [u64; 1] = [4];
const NODES: usize = 12;
const PODS: usize = 40;
const NS: &str = "scores";
const UPSTREAM: &str = "default-scheduler";
const CONVOY: &str = "convoy-scheduler";
const IMAGES: [(&str, i64); 4] =
    [("img/a:1", 300), ("img/b:1", 800), ("img/c:1", 60), ("img/d:1", 1500)];

// ---------------------------------------------------------------- generator

fn gen_node(rng: &mut StdRng, i: usize) -> Value {
    let name = format!("node-{i:02}");
    let cpu = *[2, 4, 6, 8, 16].choose(rng).unwrap();
    let mem = *[4, 8, 12, 16, 32].choose(rng).unwrap();
    let images: Vec<Value> = IMAGES
        .iter()
        .filter(|_| rng.random_bool(0.4))
        .map(|(image, mb)| json!({"names": [image], "sizeBytes": mb * 1024 * 1024}))
        .collect();
    let taints: Vec<Value> = if rng.random_bool(0.2) {
        vec![json!({"key": "soft", "value": "x", "effect": "PreferNoSchedule"})]
    } else {
        vec![]
    };
    let disk = if rng.random_bool(0.5) { "ssd" } else { "hdd" };
    let allocatable = json!({"cpu": cpu.to_string(), "memory": format!("{mem}Gi"), "pods": "110"});
    json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "disk": disk}},
        "spec": {"taints": taints},
        "status": {
            "allocatable": allocatable, "capacity": allocatable, "images": images,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

/// Requests of one container: cpu absent, `0` or 50m..1000m; memory absent
/// or 128Mi..4Gi.
fn gen_requests(rng: &mut StdRng) -> Value {
    let mut req = Map::new();
    match rng.random_range(0..5) {
        0 => {}
        1 => {
            req.insert("cpu".into(), json!("0"));
        }
        _ => {
            req.insert("cpu".into(), json!(format!("{}m", rng.random_range(1..=20) * 50)));
        }
    }
    if rng.random_bool(0.7) {
        req.insert("memory".into(), json!(format!("{}Mi", rng.random_range(1..=32) * 128)));
    }
    json!({ "requests": req })
}

fn gen_pod(rng: &mut StdRng, j: usize) -> Value {
    let image = *["img/a:1", "img/b:1", "img/c", "img/d:1", "other"].choose(rng).unwrap();
    let containers: Vec<Value> = (0..rng.random_range(1..=2))
        .map(|k| json!({"name": format!("c{k}"), "image": image, "resources": gen_requests(rng)}))
        .collect();
    let mut spec = json!({ "containers": containers });
    if rng.random_bool(0.3) {
        let init_image = *["img/a:1", "img/d:1", "x"].choose(rng).unwrap();
        let mut init =
            vec![json!({"name": "init", "image": init_image, "resources": gen_requests(rng)})];
        if rng.random_bool(0.5) {
            init.push(json!({
                "name": "side", "image": "img/c:1", "restartPolicy": "Always",
                "resources": gen_requests(rng),
            }));
        }
        spec["initContainers"] = json!(init);
    }
    if rng.random_bool(0.2) {
        // At least the containers' sum (at most 3 cpu and 12Gi), as the API
        // server requires; the resource not given is defaulted to that sum.
        let mut req = Map::new();
        if rng.random_bool(0.6) {
            req.insert("cpu".into(), json!(format!("{}m", rng.random_range(30..=40) * 100)));
        }
        if req.is_empty() || rng.random_bool(0.5) {
            req.insert("memory".into(), json!(format!("{}Mi", rng.random_range(96..=110) * 128)));
        }
        spec["resources"] = json!({ "requests": req });
    }
    if rng.random_bool(0.2) {
        spec["runtimeClassName"] = json!("overhead");
    }
    if rng.random_bool(0.15) {
        spec["volumes"] = json!([{"name": "iv", "image": {"reference": "img/b:1"}}]);
    }
    if rng.random_bool(0.3) {
        spec["affinity"] = json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": rng.random_range(1..=100),
            "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
        }]}});
    }
    if rng.random_bool(0.3) {
        spec["tolerations"] =
            json!([{"key": "soft", "operator": "Exists", "effect": "PreferNoSchedule"}]);
    }
    json!({ "metadata": {"name": format!("pod-{j:02}")}, "spec": spec })
}

// ---------------------------------------------------------------- clusters

async fn create_cluster(cp: &ControlPlane, nodes: &[Value]) -> Result<()> {
    cp.env.create_namespace(&cp.client, NS).await?;
    let classes: Api<RuntimeClass> = Api::all(cp.client.clone());
    let class = json!({
        "metadata": {"name": "overhead"}, "handler": "runc",
        "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
    });
    classes.create(&PostParams::default(), &serde_json::from_value(class)?).await?;
    let api: Api<Node> = Api::all(cp.client.clone());
    for n in nodes {
        api.create(&PostParams::default(), &serde_json::from_value(n.clone())?).await?;
    }
    Ok(())
}

async fn create_pod(
    client: &kube::Client,
    pod: &Value,
    scheduler: &str,
    node: Option<&str>,
) -> Result<()> {
    let mut pod = pod.clone();
    pod["spec"]["schedulerName"] = json!(scheduler);
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    api.create(&PostParams::default(), &serde_json::from_value(pod)?).await?;
    Ok(())
}

/// The pod's node once bound; `None` once marked unschedulable (or after
/// 20 s).
async fn decided(client: &kube::Client, name: &str) -> Result<Option<String>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    for _ in 0..200 {
        let p = api.get(name).await?;
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            return Ok(Some(node));
        }
        let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        if conditions
            .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
        {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(None)
}

/// Upstream's total score per node for a pod, from its `-v=10` log.
fn upstream_scores(log: &str, pod: &str) -> BTreeMap<String, i64> {
    let needle = format!("pod=\"{NS}/{pod}\"");
    log.lines()
        .filter(|l| l.contains("Calculated node's final score for pod") && l.contains(&needle))
        .filter_map(|l| {
            let node = l.split("node=\"").nth(1)?.split('"').next()?;
            let score = l.split("score=").nth(1)?.trim().parse().ok()?;
            Some((node.to_string(), score))
        })
        .collect()
}

/// Convoy's total score for the node it chose, from its decision log line.
fn convoy_score(log: &str, pod: &str) -> Option<i64> {
    let needle = format!("pod={NS}/{pod} ");
    log.lines()
        .rev()
        .find(|l| l.contains(&needle) && l.contains("result=\"scheduled\""))
        .and_then(|l| l.split(" score=").nth(1)?.split(' ').next()?.parse().ok())
}

/// Runs one seed; returns what did not match (empty when in parity).
async fn check_seed(seed: u64) -> Result<Vec<String>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let nodes: Vec<Value> = (0..NODES).map(|i| gen_node(&mut rng, i)).collect();
    let pods: Vec<Value> = (0..PODS).map(|j| gen_pod(&mut rng, j)).collect();
    let (up, ours) = tokio::try_join!(ControlPlane::start(), ControlPlane::start())?;
    tokio::try_join!(create_cluster(&up, &nodes), create_cluster(&ours, &nodes))
        .with_context(|| format!("score parity seed {seed}: creating the nodes"))?;

    let config = up.env.dir().join("kube-scheduler-config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             clientConnection:\n  kubeconfig: {}\n  qps: 5000\n  burst: 5000\n\
             leaderElection:\n  leaderElect: false\n",
            up.env.kubeconfig().display()
        ),
    )?;
    let _upstream = up.env.start_kube_scheduler_with_args(&config, &["-v=10"])?;
    let upstream_log = up.env.dir().join("kube-scheduler.log");
    let mut convoy = Scheduler::start(&ours.env, "convoy", common::Lease::None)?;
    convoy.wait_ready(Duration::from_secs(30)).await?;

    let mut problems = Vec::new();
    let mut scored = 0;
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().expect("named");
        create_pod(&up.client, pod, UPSTREAM, None).await?;
        create_pod(&ours.client, pod, CONVOY, None).await?;
        let (u, c) = tokio::try_join!(decided(&up.client, name), decided(&ours.client, name))?;
        // The decision lines are written right after binding.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let scores = upstream_scores(&std::fs::read_to_string(&upstream_log)?, name);
        let best = scores.values().max().copied();
        scored += usize::from(best.is_some());
        let in_parity = match (&c, best) {
            (Some(c), Some(best)) => {
                scores.get(c) == Some(&best) && convoy_score(&convoy.log(), name) == Some(best)
            }
            _ => u == c,
        };
        if !in_parity {
            let spec = up_spec(&up.client, name).await.unwrap_or_default();
            problems.push(format!(
                "score parity seed {seed}: {name}: upstream {u:?} (best {best:?}; all {scores:?}), \
                 convoy {c:?} with {:?}\n    stored spec: {spec}",
                convoy_score(&convoy.log(), name)
            ));
        }
        if u != c {
            // Keep both clusters the same: Convoy's copy goes where upstream's is.
            let api: Api<Pod> = Api::namespaced(ours.client.clone(), NS);
            api.delete(name, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
                .await?;
            while api.get_opt(name).await?.is_some() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if let Some(u) = &u {
                create_pod(&ours.client, pod, "nobody", Some(u)).await?;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    eprintln!(
        "score parity seed {seed}: {PODS} pods, {scored} scored by upstream, {} not in parity",
        problems.len()
    );
    if !problems.is_empty() {
        problems.push(convoy.tail());
    }
    Ok(problems)
}

/// The pod as upstream's API server stored it (defaults applied).
async fn up_spec(client: &kube::Client, name: &str) -> Result<String> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    Ok(serde_json::to_string(&api.get(name).await?.spec)?)
}

fn seeds() -> Vec<u64> {
    match std::env::var("CONVOY_SCORE_PARITY_SEEDS") {
        Ok(s) if !s.trim().is_empty() => s
            .split(',')
            .map(|x| {
                x.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("CONVOY_SCORE_PARITY_SEEDS: bad seed {x:?}"))
            })
            .collect(),
        _ => DEFAULT_SEEDS.to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convoy_scores_as_upstream_pod_after_pod() {
    let mut report = Vec::new();
    for seed in seeds() {
        match check_seed(seed).await {
            Ok(problems) => report.extend(problems),
            Err(e) => report.push(format!("score parity seed {seed}: {e:#}")),
        }
    }
    assert!(
        report.is_empty(),
        "{}\n(rerun with CONVOY_SCORE_PARITY_SEEDS=<seed>)",
        report.join("\n")
    );
}
