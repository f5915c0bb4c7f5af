//! testenv with kube-controller-manager and KWOK behaves like a cluster:
//! KWOK nodes turn Ready with a Lease, Deployments create ReplicaSets and
//! pods that run once bound, PodDisruptionBudgets get a status, deleted pods
//! stay Terminating for their grace period and then go (unless marked never
//! to terminate), PVCs bind, namespaces get their ServiceAccount and are
//! emptied when deleted. One control plane for the file; each test has its
//! own namespace and node names.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use convoy_testenv::{NEVER_TERMINATE_ANNOTATION, TestEnv, kwok_node};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Binding, ConfigMap, Namespace, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    Pod, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::wait::{Condition, await_condition, conditions};
use serde::de::DeserializeOwned;
use serde_json::json;

/// Long enough for a loaded 2-core machine; each wait ends as soon as its
/// condition holds.
const TIMEOUT: Duration = Duration::from_secs(30);

fn env() -> &'static TestEnv {
    TestEnv::shared_with_controllers()
}

/// The tail of one of the testenv's logs, for failure messages.
fn log_tail(name: &str) -> String {
    let text = std::fs::read_to_string(env().dir().join(format!("{name}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Waits (on a watch) until object `name` satisfies `cond`; `None` once it
/// is gone.
async fn wait_until<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    cond: impl Condition<K>,
) -> Result<Option<K>>
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    match tokio::time::timeout(TIMEOUT, await_condition(api.clone(), name, cond)).await {
        Ok(result) => result.with_context(|| format!("watching {name} for {what}")),
        Err(_) => bail!(
            "{name}: no {what} within {TIMEOUT:?}\nkwok.log:\n{}\nkube-controller-manager.log:\n{}",
            log_tail("kwok"),
            log_tail("kube-controller-manager")
        ),
    }
}

/// Waits until object `name` exists and satisfies `cond`.
async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, cond: impl Condition<K>) -> Result<K>
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    wait_until(api, name, what, cond)
        .await?
        .with_context(|| format!("{name} was deleted while waiting for {what}"))
}

/// Waits until the object `name` with this UID is gone.
async fn wait_gone<K>(api: &Api<K>, name: &str, uid: &str) -> Result<()>
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + 'static,
{
    wait_until(api, name, "deletion", conditions::is_deleted(uid)).await.map(|_| ())
}

/// Polls `check` every 100 ms until it returns `Some`, for conditions over
/// lists.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "no {what} within {TIMEOUT:?}\nkube-controller-manager.log:\n{}",
                log_tail("kube-controller-manager")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn node_ready(node: Option<&Node>) -> bool {
    node.and_then(|n| n.status.as_ref()?.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn pod_running(pod: Option<&Pod>) -> bool {
    pod.and_then(|p| p.status.as_ref()).is_some_and(|s| s.phase.as_deref() == Some("Running"))
}

fn from_json<T: DeserializeOwned>(value: serde_json::Value) -> T {
    serde_json::from_value(value).expect("valid object")
}

/// A KWOK node with room for `cpu` CPUs, created and waited for until Ready.
async fn ready_kwok_node(client: &kube::Client, name: &str, cpu: &str) -> Result<Node> {
    let mut node = kwok_node(name);
    let resources: BTreeMap<String, Quantity> = [
        ("cpu".to_string(), Quantity(cpu.into())),
        ("memory".to_string(), Quantity("16Gi".into())),
        ("pods".to_string(), Quantity("110".into())),
    ]
    .into();
    node.status = Some(from_json(json!({ "capacity": resources, "allocatable": resources })));
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.create(&PostParams::default(), &node).await?;
    wait_for(&nodes, name, "Ready condition", |n: Option<&Node>| node_ready(n)).await
}

async fn namespace(client: &kube::Client, name: &str) -> Result<()> {
    env().create_namespace(client, name).await?;
    Ok(())
}

fn pod(name: &str, node: Option<&str>, annotations: serde_json::Value) -> Pod {
    from_json(json!({
        "metadata": { "name": name, "annotations": annotations },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": "100m" } }
            }]
        }
    }))
}

/// Binds `pod` to `node` through the binding subresource, as a scheduler.
async fn bind(pods: &Api<Pod>, pod: &Pod, node: &str) -> Result<()> {
    let name = pod.metadata.name.clone().context("pod name")?;
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    let _: kube::core::Status =
        pods.create_subresource("binding", &name, &PostParams::default(), &binding).await?;
    Ok(())
}

/// A Deployment of `replicas` pods labelled `app: <name>`, whose pods
/// terminate at once (grace period 0) so that cascading deletion is quick.
fn deployment(name: &str, replicas: i32) -> Deployment {
    from_json(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": { "requests": { "cpu": "100m" } }
                    }]
                }
            }
        }
    }))
}

/// Waits for `count` pods labelled `app: <app>`, then binds the unbound ones
/// to `node` and waits until all run.
async fn bind_and_run(pods: &Api<Pod>, app: &str, count: usize, node: &str) -> Result<Vec<Pod>> {
    let selector = ListParams::default().labels(&format!("app={app}"));
    let created = eventually(&format!("{count} pods of {app}"), || async {
        let list = pods.list(&selector).await?.items;
        Ok((list.len() == count).then_some(list))
    })
    .await?;
    for p in created.iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
    {
        bind(pods, p, node).await?;
    }
    let mut running = Vec::new();
    for p in &created {
        let name = p.metadata.name.as_deref().context("pod name")?;
        running
            .push(wait_for(pods, name, "phase Running", |p: Option<&Pod>| pod_running(p)).await?);
    }
    Ok(running)
}

#[tokio::test]
async fn kwok_node_becomes_ready_with_a_lease_and_plain_nodes_are_left_alone() -> Result<()> {
    let client = env().client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    // First, so that KWOK has seen it by the time the other one is Ready.
    let plain: Node = from_json(json!({ "metadata": { "name": "cluster-plain" } }));
    nodes.create(&PostParams::default(), &plain).await?;
    nodes.create(&PostParams::default(), &kwok_node("cluster-kwok")).await?;

    let node =
        wait_for(&nodes, "cluster-kwok", "Ready condition", |n: Option<&Node>| node_ready(n))
            .await?;
    let status = node.status.context("status")?;
    let allocatable = status.allocatable.context("allocatable")?;
    ensure!(allocatable.get("cpu") == Some(&Quantity("32".into())), "{allocatable:?}");
    ensure!(allocatable.get("pods") == Some(&Quantity("110".into())), "{allocatable:?}");
    let info = status.node_info.context("nodeInfo")?;
    ensure!(info.kubelet_version.starts_with("kwok-"), "{info:?}");
    let conditions: Vec<(String, String)> =
        status.conditions.unwrap_or_default().into_iter().map(|c| (c.type_, c.status)).collect();
    for (kind, want) in [
        ("Ready", "True"),
        ("MemoryPressure", "False"),
        ("DiskPressure", "False"),
        ("PIDPressure", "False"),
    ] {
        ensure!(
            conditions.iter().any(|(t, s)| t == kind && s == want),
            "{kind}={want} in {conditions:?}"
        );
    }

    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = wait_for(&leases, "cluster-kwok", "node Lease", |l: Option<&Lease>| {
        l.and_then(|l| l.spec.as_ref()?.renew_time.as_ref()).is_some()
    })
    .await?;
    let spec = lease.spec.context("lease spec")?;
    ensure!(spec.lease_duration_seconds == Some(40), "{spec:?}");

    let plain = nodes.get("cluster-plain").await?;
    ensure!(plain.status.and_then(|s| s.conditions).is_none(), "plain node untouched");
    ensure!(leases.get_opt("cluster-plain").await?.is_none(), "no Lease for the plain node");
    Ok(())
}

#[tokio::test]
async fn deployment_pods_run_once_bound_and_go_with_it() -> Result<()> {
    let client = env().client().await?;
    let ns = "cluster-deploy";
    namespace(&client, ns).await?;
    ready_kwok_node(&client, "cluster-deploy-node", "4").await?;

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    deployments.create(&PostParams::default(), &deployment("web", 2)).await?;

    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let rs = eventually("ReplicaSet of web with 2 replicas", || async {
        let list = replicasets.list(&ListParams::default()).await?.items;
        Ok(list.into_iter().find(|rs| rs.spec.replicas == Some(2)))
    })
    .await?;
    let owner = rs.metadata.owner_references.clone().unwrap_or_default();
    ensure!(
        owner
            .iter()
            .any(|o| o.kind == "Deployment" && o.name == "web" && o.controller == Some(true)),
        "ReplicaSet owned by the Deployment: {owner:?}"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let running = bind_and_run(&pods, "web", 2, "cluster-deploy-node").await?;
    let rs_name = rs.metadata.name.as_deref().context("ReplicaSet name")?;
    for p in &running {
        let owners = p.metadata.owner_references.clone().unwrap_or_default();
        ensure!(owners.iter().any(|o| o.kind == "ReplicaSet" && o.name == rs_name), "{owners:?}");
        let status = p.status.as_ref().context("status")?;
        ensure!(status.start_time.is_some(), "startTime set: {status:?}");
        ensure!(status.pod_ip.as_deref().is_some_and(|ip| ip.starts_with("10.244.")), "{status:?}");
        let ready =
            status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
        ensure!(ready, "Ready: {status:?}");
    }
    wait_for(&deployments, "web", "2 available replicas", |d: Option<&Deployment>| {
        d.and_then(|d| d.status.as_ref()?.available_replicas) == Some(2)
    })
    .await?;

    // The garbage collector takes the ReplicaSet and its pods with it.
    deployments.delete("web", &DeleteParams::default()).await?;
    eventually("ReplicaSet and pods gone", || async {
        let rs_left = replicasets.list(&ListParams::default()).await?.items.len();
        let pods_left = pods.list(&ListParams::default()).await?.items.len();
        Ok((rs_left == 0 && pods_left == 0).then_some(()))
    })
    .await
}

#[tokio::test]
async fn pdb_disruptions_allowed_follow_ready_pods() -> Result<()> {
    let client = env().client().await?;
    let ns = "cluster-pdb";
    namespace(&client, ns).await?;
    ready_kwok_node(&client, "cluster-pdb-node", "4").await?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb: PodDisruptionBudget = from_json(json!({
        "metadata": { "name": "db" },
        "spec": { "minAvailable": 1, "selector": { "matchLabels": { "app": "db" } } }
    }));
    pdbs.create(&PostParams::default(), &pdb).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    deployments.create(&PostParams::default(), &deployment("db", 2)).await?;

    // Two pods expected, none healthy yet: no disruption allowed.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually("2 pods of db", || async {
        let n = pods.list(&ListParams::default().labels("app=db")).await?.items.len();
        Ok((n == 2).then_some(()))
    })
    .await?;
    let status = |p: Option<&PodDisruptionBudget>| p.and_then(|p| p.status.clone());
    let before =
        wait_for(&pdbs, "db", "status for 2 pending pods", |p: Option<&PodDisruptionBudget>| {
            status(p).is_some_and(|s| s.expected_pods == Some(2))
        })
        .await?;
    let before = before.status.context("status")?;
    ensure!(
        before.current_healthy.unwrap_or(0) == 0 && before.disruptions_allowed.unwrap_or(0) == 0,
        "{before:?}"
    );

    bind_and_run(&pods, "db", 2, "cluster-pdb-node").await?;
    let after = wait_for(&pdbs, "db", "disruptionsAllowed 1", |p: Option<&PodDisruptionBudget>| {
        status(p).is_some_and(|s| s.disruptions_allowed == Some(1))
    })
    .await?;
    let after = after.status.context("status")?;
    ensure!(after.current_healthy == Some(2) && after.desired_healthy == Some(1), "{after:?}");
    Ok(())
}

#[tokio::test]
async fn deleted_pod_terminates_after_its_grace_period_unless_marked() -> Result<()> {
    let client = env().client().await?;
    let ns = "cluster-delete";
    namespace(&client, ns).await?;
    ready_kwok_node(&client, "cluster-delete-node", "4").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let node = Some("cluster-delete-node");
    pods.create(&PostParams::default(), &pod("graceful", node, json!({}))).await?;
    let stuck = json!({ NEVER_TERMINATE_ANNOTATION: "true" });
    pods.create(&PostParams::default(), &pod("stuck", node, stuck)).await?;
    let graceful = wait_for(&pods, "graceful", "Running", |p: Option<&Pod>| pod_running(p)).await?;
    wait_for(&pods, "stuck", "Running", |p: Option<&Pod>| pod_running(p)).await?;

    let grace = DeleteParams { grace_period_seconds: Some(2), ..Default::default() };
    let deleted_at = tokio::time::Instant::now();
    pods.delete("graceful", &grace).await?;
    pods.delete("stuck", &grace).await?;

    // Terminating for the grace period, like a pod whose containers take
    // their time, then gone.
    let terminating = pods.get_opt("graceful").await?.context("graceful still there")?;
    ensure!(terminating.metadata.deletion_timestamp.is_some(), "{terminating:?}");
    wait_gone(&pods, "graceful", graceful.metadata.uid.as_deref().context("uid")?).await?;
    let took = deleted_at.elapsed();
    // deletionTimestamp (now + 2 s) is kept to the second.
    ensure!(took >= Duration::from_secs(1), "removed after {took:?}, before its grace period");

    // The marked pod outlives its own deadline.
    let stuck = pods.get("stuck").await?;
    let deadline = stuck.metadata.deletion_timestamp.clone().context("stuck is Terminating")?.0;
    let left = Duration::try_from(deadline.duration_since(Timestamp::now())).unwrap_or_default();
    tokio::time::sleep(left + Duration::from_secs(1)).await;
    let stuck = pods.get_opt("stuck").await?.context("never-terminate pod removed")?;
    ensure!(pod_running(Some(&stuck)), "still Running: {:?}", stuck.status);

    // Grace period 0 removes it without KWOK.
    pods.delete("stuck", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
        .await?;
    wait_gone(&pods, "stuck", stuck.metadata.uid.as_deref().context("uid")?).await
}

#[tokio::test]
async fn pvc_binds_and_can_be_deleted() -> Result<()> {
    let client = env().client().await?;
    let ns = "cluster-pvc";
    namespace(&client, ns).await?;
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv: PersistentVolume = from_json(json!({
        "metadata": { "name": "cluster-pvc-pv" },
        "spec": {
            "capacity": { "storage": "1Gi" },
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual",
            "hostPath": { "path": "/tmp/cluster-pvc-pv" }
        }
    }));
    pvs.create(&PostParams::default(), &pv).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let claim: PersistentVolumeClaim = from_json(json!({
        "metadata": { "name": "data" },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "manual",
            "resources": { "requests": { "storage": "1Gi" } }
        }
    }));
    claims.create(&PostParams::default(), &claim).await?;
    let bound = wait_for(&claims, "data", "phase Bound", |c: Option<&PersistentVolumeClaim>| {
        c.and_then(|c| c.status.as_ref()?.phase.as_deref()) == Some("Bound")
    })
    .await?;
    let finalizers = bound.metadata.finalizers.clone().unwrap_or_default();
    ensure!(finalizers.iter().any(|f| f == "kubernetes.io/pvc-protection"), "{finalizers:?}");
    let volume = bound.spec.as_ref().and_then(|s| s.volume_name.as_deref());
    ensure!(volume == Some("cluster-pvc-pv"), "bound to {volume:?}");

    // The protection controller lifts the finalizer of an unused claim.
    claims.delete("data", &DeleteParams::default()).await?;
    wait_gone(&claims, "data", bound.metadata.uid.as_deref().context("uid")?).await
}

#[tokio::test]
async fn namespace_gets_a_service_account_and_deletion_completes() -> Result<()> {
    let client = env().client().await?;
    let ns = "cluster-ns";
    namespace(&client, ns).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    wait_for(&accounts, "default", "default ServiceAccount", |a: Option<&ServiceAccount>| {
        a.is_some()
    })
    .await?;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    maps.create(&PostParams::default(), &from_json(json!({ "metadata": { "name": "c" } }))).await?;

    // Emptied by the namespace controller (about 5 s: it looks again a few
    // seconds after deleting the content).
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let uid = namespaces.get(ns).await?.metadata.uid.context("uid")?;
    namespaces.delete(ns, &DeleteParams::default()).await?;
    wait_gone(&namespaces, ns, &uid).await
}
