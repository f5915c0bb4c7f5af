//! End-to-end checks of the ground every later test stands on: a real
//! kube-apiserver v1.37 from testenv, reached over the wire with kube-rs.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use convoy_testenv::TestEnv;
use k8s_openapi::api::core::v1::{Binding, Container, Node, ObjectReference, Pod, PodSpec};
use k8s_openapi::api::scheduling::v1beta1::{
    GangSchedulingPolicy, PodGroup, PodGroupSchedulingPolicy, PodGroupSpec,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use kube::core::{ApiResource, GroupVersionKind};

fn node(name: &str, gpus: u32) -> Node {
    let mut allocatable = BTreeMap::new();
    allocatable.insert("cpu".to_string(), Quantity("4".into()));
    allocatable.insert("memory".to_string(), Quantity("32Gi".into()));
    allocatable.insert("pods".to_string(), Quantity("110".into()));
    if gpus > 0 {
        allocatable.insert("nvidia.com/gpu".to_string(), Quantity(gpus.to_string()));
    }
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{ "type": "Ready", "status": "True" }]
        }
    }))
    .expect("valid node")
}

fn pod(name: &str, scheduler: &str) -> Pod {
    Pod {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        spec: Some(PodSpec {
            scheduler_name: Some(scheduler.to_string()),
            containers: vec![Container {
                name: "main".into(),
                image: Some("registry.k8s.io/pause:3.10".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn binding(pod: &Pod, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    }
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Polls `check` every 100 ms until it returns `Some` or the timeout passes.
async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if let Some(v) = check().await {
            return Some(v);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test]
async fn server_reports_the_pinned_version() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let info = client.apiserver_version().await?;
    assert_eq!(info.git_version, "v1.37.2", "kube-apiserver built with version ldflags");
    Ok(())
}

#[tokio::test]
async fn bind_through_the_binding_subresource() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "bind").await?;

    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.create(&PostParams::default(), &node("bind-gpu-node", 8)).await?;
    let gpus = n.status.and_then(|s| s.allocatable).and_then(|a| a.get("nvidia.com/gpu").cloned());
    assert_eq!(gpus, Some(Quantity("8".into())), "extended resource kept in allocatable");

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let created = pods.create(&PostParams::default(), &pod("p1", "convoy-scheduler")).await?;
    assert!(created.metadata.uid.is_some());

    // A binding whose UID precondition does not match is refused.
    let mut stale = binding(&created, "bind-gpu-node");
    stale.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let err = pods
        .create_subresource::<_, kube::core::Status>(
            "binding",
            "p1",
            &PostParams::default(),
            &stale,
        )
        .await
        .expect_err("stale UID must not bind");
    assert!(is_conflict(&err), "stale UID gives 409, got {err:?}");

    let status: kube::core::Status = pods
        .create_subresource(
            "binding",
            "p1",
            &PostParams::default(),
            &binding(&created, "bind-gpu-node"),
        )
        .await
        .context("first bind")?;
    assert!(status.is_success(), "bind returns a Success status: {status:?}");

    let bound = pods.get("p1").await?;
    assert_eq!(bound.spec.and_then(|s| s.node_name).as_deref(), Some("bind-gpu-node"));

    let err = pods
        .create_subresource::<_, kube::core::Status>(
            "binding",
            "p1",
            &PostParams::default(),
            &binding(&created, "bind-gpu-node"),
        )
        .await
        .expect_err("second bind must fail");
    assert!(is_conflict(&err), "second bind gives 409 Conflict, got {err:?}");
    Ok(())
}

#[tokio::test]
async fn upstream_pod_group_is_served() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "podgroup").await?;
    let groups: Api<PodGroup> = Api::namespaced(client, &ns);
    let pg = PodGroup {
        metadata: ObjectMeta { name: Some("training".into()), ..Default::default() },
        spec: PodGroupSpec {
            scheduling_policy: PodGroupSchedulingPolicy {
                gang: Some(GangSchedulingPolicy { min_count: 8 }),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    groups
        .create(&PostParams::default(), &pg)
        .await
        .context("create scheduling.k8s.io/v1beta1 PodGroup")?;
    let read = groups.get("training").await?;
    assert_eq!(read.spec.scheduling_policy.gang.map(|g| g.min_count), Some(8));
    Ok(())
}

#[tokio::test]
async fn crd_is_installed_and_served() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "crd").await?;
    let path =
        convoy_testenv::repo_root().join("charts/convoy/crds/scheduling.x-k8s.io_podgroups.yaml");
    let text = std::fs::read_to_string(&path)?;
    let crd: CustomResourceDefinition = serde_json::from_value(yaml_to_json(&text)?)?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let gvk = GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "podgroups");
    let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &ar);
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": { "name": "job" },
        "spec": { "minMember": 4, "scheduleTimeoutSeconds": 30 }
    }))?;
    // The CRD is served a moment after it is established.
    let created = eventually(Duration::from_secs(30), || async {
        api.create(&PostParams::default(), &obj).await.ok()
    })
    .await
    .context("PodGroup CRD never served")?;
    assert_eq!(created.data["spec"]["minMember"], 4);
    Ok(())
}

/// Upstream kube-scheduler, the yardstick for later comparisons, binds its
/// own pods and leaves Convoy's alone.
#[tokio::test]
async fn upstream_kube_scheduler_binds_only_its_pods() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "upstream").await?;
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node("upstream-node", 0))
        .await?;

    let config = env.dir().join("kube-scheduler-config.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\n\
             kind: KubeSchedulerConfiguration\n\
             clientConnection:\n  kubeconfig: {}\n  qps: 5000\n  burst: 5000\n\
             leaderElection:\n  leaderElect: false\n\
             profiles:\n- schedulerName: default-scheduler\n",
            env.kubeconfig().display()
        ),
    )?;
    let _scheduler = env.start_kube_scheduler(&config)?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod("theirs", "default-scheduler")).await?;
    pods.create(&PostParams::default(), &pod("ours", "convoy-scheduler")).await?;

    let node = eventually(Duration::from_secs(60), || async {
        pods.get("theirs").await.ok().and_then(|p| p.spec?.node_name)
    })
    .await;
    if node.is_none() {
        let log = std::fs::read_to_string(env.dir().join("kube-scheduler.log")).unwrap_or_default();
        bail!("kube-scheduler did not bind its pod within 60s; its log:\n{log}");
    }
    // Give it time to (wrongly) take ours too, then check it did not.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ours = pods.get("ours").await?;
    assert_eq!(ours.spec.and_then(|s| s.node_name), None, "convoy-scheduler pod left alone");
    Ok(())
}

fn yaml_to_json(text: &str) -> Result<serde_json::Value> {
    Ok(serde_saphyr::from_str(text)?)
}
