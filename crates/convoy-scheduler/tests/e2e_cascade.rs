//! A preemption cascade on a cluster that behaves like one (ReplicaSets
//! replace their pods, KWOK runs them), three tiers on a full cluster:
//! training (1000) needs the only GPU, where inference (500) runs;
//! inference's replacement then finds room only where monitoring (100)
//! runs. Upstream kube-scheduler and Convoy without the guard do the same
//! (the cascade); Convoy with `replacementPreemptionDelaySeconds` stops it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

fn kwok_node(name: &str, gpus: Option<&str>) -> Node {
    let mut n = convoy_testenv::kwok_node(name);
    let mut res = json!({"cpu": "4", "memory": "4Gi", "pods": "110"});
    if let Some(g) = gpus {
        res["nvidia.com/gpu"] = g.into();
    }
    n.status = Some(serde_json::from_value(json!({"capacity": res, "allocatable": res})).unwrap());
    n
}

fn template(scheduler: &str, class: &str, cpu: &str, gpu: bool) -> serde_json::Value {
    let mut requests = json!({"cpu": cpu, "memory": "100Mi"});
    if gpu {
        requests["nvidia.com/gpu"] = "1".into();
    }
    json!({
        "schedulerName": scheduler,
        "priorityClassName": class,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": requests.clone(), "limits": requests}}]
    })
}

async fn replica_set(client: &kube::Client, name: &str, spec: serde_json::Value) -> Result<()> {
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}
    }))?;
    Api::<ReplicaSet>::namespaced(client.clone(), "cascade")
        .create(&PostParams::default(), &rs)
        .await?;
    Ok(())
}

/// `app → node` of the pods that run (bound, not terminating), and the
/// pending ones as `app → None`.
async fn placement(pods: &Api<Pod>) -> Result<BTreeMap<String, Vec<Option<String>>>> {
    let mut out: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    for p in pods.list(&ListParams::default()).await?.items {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let app = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app").cloned())
            .unwrap_or_else(|| p.metadata.name.clone().unwrap_or_default());
        out.entry(app).or_default().push(node_of(&p).map(str::to_string));
    }
    for v in out.values_mut() {
        v.sort();
    }
    Ok(out)
}

/// Waits until the placement has not changed for 5 s; returns it.
async fn settled(pods: &Api<Pod>) -> Result<BTreeMap<String, Vec<Option<String>>>> {
    let mut last = placement(pods).await?;
    let mut since = tokio::time::Instant::now();
    let deadline = since + Duration::from_secs(90);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = placement(pods).await?;
        if now != last {
            last = now;
            since = tokio::time::Instant::now();
        } else if since.elapsed() >= Duration::from_secs(5) {
            return Ok(last);
        }
        ensure!(tokio::time::Instant::now() < deadline, "never settled: {last:?}");
    }
}

enum Side {
    Upstream,
    Convoy { guard: bool },
}

/// Runs the scenario on its own control plane; the placement it ends in.
async fn run(side: Side) -> Result<BTreeMap<String, Vec<Option<String>>>> {
    let cp = ControlPlane::start_cluster().await?;
    let pods = cp.namespace("cascade").await?;
    for (name, value) in [("training", 1000), ("inference", 500), ("monitoring", 100)] {
        let class: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))?;
        Api::<PriorityClass>::all(cp.client.clone()).create(&PostParams::default(), &class).await?;
    }
    let name = match side {
        Side::Upstream => "upstream-scheduler",
        Side::Convoy { .. } => CONVOY,
    };
    let _upstream;
    let mut convoy = None;
    match side {
        Side::Upstream => {
            let path = cp.env.dir().join("upstream.yaml");
            std::fs::write(
                &path,
                format!(
                    "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                     clientConnection:\n  kubeconfig: {}\nleaderElection:\n  leaderElect: false\n\
                     profiles:\n- schedulerName: {name}\n",
                    cp.env.kubeconfig().display()
                ),
            )?;
            _upstream = cp.env.start_kube_scheduler(&path)?;
        }
        Side::Convoy { guard } => {
            let args = if guard {
                "  pluginConfig:\n  - name: DefaultPreemption\n    args:\n      \
                 replacementPreemptionDelaySeconds: 300\n"
            } else {
                ""
            };
            let yaml = format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                 clientConnection:\n  qps: 5000\n  burst: 5000\nleaderElection:\n  leaderElect: false\n\
                 profiles:\n- schedulerName: {CONVOY}\n{args}"
            );
            let mut s = Scheduler::start_with_config(&cp.env, "convoy", &yaml)?;
            s.wait_ready(Duration::from_secs(30)).await?;
            convoy = Some(s);
        }
    }
    let tail = |c: &Option<Scheduler>| c.as_ref().map(|s| s.tail()).unwrap_or_default();
    // Inference alone on n1 (the GPU node), then monitoring alone on n2.
    create_nodes(&cp.client, vec![kwok_node("n1", Some("1"))]).await?;
    replica_set(&cp.client, "inference", template(name, "inference", "3", false)).await?;
    let on = |app: &'static str, node: &'static str| {
        let pods = pods.clone();
        async move {
            let p = placement(&pods).await.ok()?;
            (p.get(app)? == &vec![Some(node.to_string())]).then_some(())
        }
    };
    eventually(Duration::from_secs(60), || on("inference", "n1"))
        .await
        .with_context(|| format!("inference not on n1\n{}", tail(&convoy)))?;
    create_nodes(&cp.client, vec![kwok_node("n2", None)]).await?;
    replica_set(&cp.client, "monitoring", template(name, "monitoring", "3", false)).await?;
    eventually(Duration::from_secs(60), || on("monitoring", "n2"))
        .await
        .with_context(|| format!("monitoring not on n2\n{}", tail(&convoy)))?;
    // Training needs the GPU.
    let training: Pod = serde_json::from_value(json!({
        "metadata": {"name": "training", "labels": {"app": "training"}},
        "spec": template(name, "training", "2", true)
    }))?;
    create_retrying(&pods, &training).await?;
    eventually(Duration::from_secs(60), || on("training", "n1"))
        .await
        .with_context(|| format!("training not on n1\n{}", tail(&convoy)))?;
    let end = settled(&pods).await?;
    if let Some(c) = &convoy {
        let chains = c.count("preemption chain of depth 2");
        let guard = matches!(side, Side::Convoy { guard: true });
        ensure!((chains > 0) != guard, "chain lines: {chains} (guard {guard})\n{}", c.tail());
    }
    Ok(end)
}

fn expect(app: &str, nodes: &[Option<&str>]) -> (String, Vec<Option<String>>) {
    (app.to_string(), nodes.iter().map(|n| n.map(str::to_string)).collect())
}

/// Without the guard, Convoy ends where kube-scheduler ends: training on
/// n1, inference's replacement on n2 (it preempted monitoring), and
/// monitoring's replacement pending (nothing below it to preempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_guard_convoy_cascades_as_kube_scheduler() -> Result<()> {
    let (upstream, convoy) =
        tokio::try_join!(run(Side::Upstream), run(Side::Convoy { guard: false }))?;
    let want: BTreeMap<_, _> = [
        expect("inference", &[Some("n2")]),
        expect("monitoring", &[None]),
        expect("training", &[Some("n1")]),
    ]
    .into();
    assert_eq!(upstream, want, "kube-scheduler");
    assert_eq!(convoy, upstream, "Convoy without the guard");
    Ok(())
}

/// With `replacementPreemptionDelaySeconds: 300` the cascade stops at the
/// first preemption: inference's replacement waits, monitoring keeps n2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_guard_the_cascade_stops() -> Result<()> {
    let end = run(Side::Convoy { guard: true }).await?;
    let want: BTreeMap<_, _> = [
        expect("inference", &[None]),
        expect("monitoring", &[Some("n2")]),
        expect("training", &[Some("n1")]),
    ]
    .into();
    assert_eq!(end, want);
    Ok(())
}
