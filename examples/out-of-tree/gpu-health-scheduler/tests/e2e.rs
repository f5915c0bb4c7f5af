//! The example scheduler on a real API server (testenv): the GpuHealth CRD
//! installed, node agents' reports created, the `gpu-health-scheduler`
//! binary serving. GPU pods keep off unhealthy GPUs; a pod that fits only
//! on unhealthy GPUs waits with GpuHealth's reason and binds once its node's
//! report improves (the queueing hint on the custom resource).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn gpu_node(name: &str) -> Result<Node> {
    let r = json!({"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"});
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": r, "capacity": r,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))?)
}

fn gpu_pod(name: &str, gpus: u32) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"schedulerName": "gpu-health", "containers": [{
            "name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()},
                          "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
    }))?)
}

fn scheduled_message(p: &Pod) -> String {
    let c = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    let c = c.and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"));
    c.and_then(|c| c.message.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_keep_off_unhealthy_gpus_until_reports_improve() -> Result<()> {
    let env = tokio::task::spawn_blocking(convoy_testenv::TestEnv::start).await??;
    let client = env.client().await?;
    let crd: CustomResourceDefinition =
        serde_json::from_value(yaml(convoy_example_gpu_health::CRD)?)?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await?;
    let established = eventually(Duration::from_secs(20), || async {
        let c = crds.get("gpuhealths.example.com").await.ok()?;
        let conditions = c.status?.conditions?;
        conditions.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
    })
    .await;
    ensure!(established.is_some(), "CRD not established");

    let nodes: Api<Node> = Api::all(client.clone());
    for n in ["gpu-0", "gpu-1"] {
        nodes.create(&PostParams::default(), &gpu_node(n)?).await?;
    }
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1alpha1".into(),
        api_version: "example.com/v1alpha1".into(),
        kind: "GpuHealth".into(),
        plural: "gpuhealths".into(),
    };
    let reports: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    for (node, bad) in [("gpu-0", 8), ("gpu-1", 4)] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1alpha1", "kind": "GpuHealth",
            "metadata": {"name": node}, "spec": {"unhealthy": bad}
        }))?;
        reports.create(&PostParams::default(), &obj).await?;
    }

    let dir = env.dir();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/gpu-health.yaml");
    let text = std::fs::read_to_string(&config)?.replace(
        "kind: KubeSchedulerConfiguration\n",
        "kind: KubeSchedulerConfiguration\nleaderElection:\n  leaderElect: false\n\
         clientConnection:\n  qps: 500\n  burst: 500\n",
    );
    let config = dir.join("gpu-health.yaml");
    std::fs::write(&config, text)?;
    let log = dir.join("gpu-health-scheduler.log");
    let _sched = Killed(
        Command::new(env!("CARGO_BIN_EXE_gpu-health-scheduler"))
            .arg("--config")
            .arg(&config)
            .arg("--kubeconfig")
            .arg(env.kubeconfig())
            .args(["--http-addr", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?,
    );
    let tail = || std::fs::read_to_string(&log).unwrap_or_default();

    env.create_namespace(&client, "gpus").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "gpus");
    // 4 healthy GPUs on gpu-1, none on gpu-0: two pods of 2 fit there, a
    // third waits.
    for name in ["a", "b", "c"] {
        pods.create(&PostParams::default(), &gpu_pod(name, 2)?).await?;
    }
    let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
    let settled = eventually(Duration::from_secs(30), || async {
        let all = pods.list(&Default::default()).await.ok()?.items;
        let bound = all.iter().filter(|p| node_of(p).is_some()).count();
        let waiting =
            all.iter().any(|p| scheduled_message(p).contains("node(s) had unhealthy GPUs"));
        (bound == 2 && waiting).then_some(all)
    })
    .await
    .with_context(|| format!("pods not placed as expected\n{}", tail()))?;
    for p in &settled {
        ensure!(node_of(p).as_deref() != Some("gpu-0"), "a pod on gpu-0\n{}", tail());
    }

    // The agent reports gpu-0 healthy again: the waiting pod binds there.
    let patch = json!({"spec": {"unhealthy": 0}});
    reports.patch("gpu-0", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let placed = eventually(Duration::from_secs(30), || async {
        let all = pods.list(&Default::default()).await.ok()?.items;
        let on_zero = all.iter().filter(|p| node_of(p).as_deref() == Some("gpu-0")).count();
        (all.iter().all(|p| node_of(p).is_some()) && on_zero == 1).then_some(())
    })
    .await;
    ensure!(placed.is_some(), "the waiting pod did not bind on gpu-0\n{}", tail());
    Ok(())
}

/// The CRD file, YAML, as JSON.
fn yaml(text: &str) -> Result<serde_json::Value> {
    let docs = convoy_bench::any::parse_manifests(text, "crd.yaml").map_err(anyhow::Error::msg)?;
    docs.into_iter().next().context("one document")
}
