//! End to end, APIs the server does not serve: Kubernetes 1.37 started with
//! parts of `resource.k8s.io` turned off (`--runtime-config`), as a cluster
//! may run it. Convoy becomes ready and binds what it can; a pod that needs
//! what the server does not serve stays pending with a message naming the
//! field and the API; where DRA is served only as `v1beta2`, claims are
//! read, allocated and written in that version.

mod common;
#[path = "common/dra.rs"]
mod dra;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use convoy_testenv::{Options, TestEnv};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

/// A control plane (API server alone) of the newest version with extra
/// kube-apiserver flags, and a ready scheduler.
async fn start(args: &'static [&'static str]) -> Result<(ControlPlane, Scheduler)> {
    let options = Options::API_ONLY.with_apiserver_args(args);
    let env = tokio::task::spawn_blocking(move || TestEnv::start_with(options))
        .await?
        .context("starting testenv")?;
    let cp = ControlPlane::adopt(env).await?;
    create_nodes(&cp.client, vec![node("n0", "8", "8Gi", "110")]).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    Ok((cp, sched))
}

/// Lines of the scheduler's log that report a failed watch.
fn failed_watches(sched: &Scheduler) -> Vec<String> {
    sched.log().lines().filter(|l| l.contains("watch failed")).map(str::to_string).collect()
}

/// A pod without claims binds.
async fn plain_pod_binds(cp: &ControlPlane, sched: &Scheduler, ns: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), ns);
    create_pods(&pods, vec![pod("plain", CONVOY, "100m", "100Mi")]).await?;
    wait_bound(&pods, &["plain".to_string()], Duration::from_secs(20))
        .await
        .with_context(|| sched.tail())?;
    Ok(())
}

/// DeviceTaintRules turned off (a resource of `resource.k8s.io/v1`): ready
/// and binding, pods with claims too; the rules are an empty set, never
/// watched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_and_binding_without_device_taint_rules() -> Result<()> {
    let (cp, sched) =
        start(&["--runtime-config=resource.k8s.io/v1/devicetaintrules=false"]).await?;
    let ns = "no-rules";
    cp.namespace(ns).await?;
    plain_pod_binds(&cp, &sched, ns).await?;
    dra::create(&cp.client, &dra::device_class()).await?;
    dra::create(&cp.client, &dra::slice("n0", dra::A100_40, "clique-a", 2)).await?;
    dra::create(&cp.client, &dra::claim(ns, "one", vec![dra::request("gpu", 1, &[])])).await?;
    let mut p = dra::pod(ns, "user", &[dra::Uses::Claim("one")]);
    p["spec"]["schedulerName"] = json!(CONVOY);
    dra::create(&cp.client, &p).await?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), ns);
    wait_bound(&pods, &["user".to_string()], Duration::from_secs(20))
        .await
        .with_context(|| sched.tail())?;
    ensure!(failed_watches(&sched).is_empty(), "failed watches: {:?}", failed_watches(&sched));
    ensure!(
        sched.count("not served by this API server") >= 1
            && sched.log().lines().any(|l| l.contains("devicetaintrules.resource.k8s.io")),
        "DeviceTaintRules not reported as not served{}",
        sched.tail()
    );
    Ok(())
}

/// `resource.k8s.io/v1` turned off: ready and binding pods without claims;
/// a pod with a claim stays pending, its `PodScheduled` condition and a
/// `FailedScheduling` Event naming `spec.resourceClaims` and the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_and_binding_without_dra() -> Result<()> {
    let (cp, sched) = start(&["--runtime-config=resource.k8s.io/v1=false"]).await?;
    let ns = "no-dra";
    cp.namespace(ns).await?;
    plain_pod_binds(&cp, &sched, ns).await?;
    let mut p = dra::pod(ns, "user", &[dra::Uses::Claim("one")]);
    p["spec"]["schedulerName"] = json!(CONVOY);
    dra::create(&cp.client, &p).await?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), ns);
    let want = "pod uses spec.resourceClaims, which needs resourceclaims.resource.k8s.io (v1 or \
                v1beta2); this API server does not serve it";
    let refused = eventually(Duration::from_secs(20), || async {
        let p = pods.get("user").await.ok()?;
        scheduled_message(&p).contains(want).then_some(p)
    })
    .await;
    let user = pods.get("user").await?;
    ensure!(
        refused.is_some() && node_of(&user).is_none(),
        "user on {:?}: {}{}",
        node_of(&user),
        scheduled_message(&user),
        sched.tail()
    );
    let events = eventually(Duration::from_secs(20), || async {
        let evs = events(&cp.client, ns, "FailedScheduling").await.ok()?;
        evs.into_iter().find(|e| e.note.as_deref().is_some_and(|n| n.contains(want)))
    })
    .await;
    ensure!(events.is_some(), "no FailedScheduling Event naming the API{}", sched.tail());
    ensure!(failed_watches(&sched).is_empty(), "failed watches: {:?}", failed_watches(&sched));
    Ok(())
}

/// `resource.k8s.io/v1` off and `v1beta2` on: the DRA kinds are watched
/// as `v1beta2`, the claim is allocated and written in that version, and
/// the pod binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_claims_through_v1beta2() -> Result<()> {
    let (cp, sched) =
        start(&["--runtime-config=resource.k8s.io/v1=false,resource.k8s.io/v1beta2=true"]).await?;
    let ns = "beta";
    cp.namespace(ns).await?;
    let beta = |mut v: Value| {
        v["apiVersion"] = json!("resource.k8s.io/v1beta2");
        v
    };
    let create = |v: Value| {
        let client = cp.client.clone();
        async move {
            let kind = v["kind"].as_str().unwrap_or_default().to_string();
            let plural = match kind.as_str() {
                "DeviceClass" => "deviceclasses".to_string(),
                other => format!("{}s", other.to_lowercase()),
            };
            let ar = kube::api::ApiResource {
                group: "resource.k8s.io".into(),
                version: "v1beta2".into(),
                api_version: "resource.k8s.io/v1beta2".into(),
                kind,
                plural,
            };
            let obj: DynamicObject = serde_json::from_value(v.clone())?;
            let api: Api<DynamicObject> = match v["metadata"]["namespace"].as_str() {
                Some(ns) => Api::namespaced_with(client, ns, &ar),
                None => Api::all_with(client, &ar),
            };
            api.create(&PostParams::default(), &obj).await.with_context(|| format!("{v}"))?;
            anyhow::Ok(())
        }
    };
    create(beta(dra::device_class())).await?;
    create(beta(dra::slice("n0", dra::A100_40, "clique-a", 2))).await?;
    create(beta(dra::claim(ns, "one", vec![dra::request("gpu", 1, &[])]))).await?;
    let mut p = dra::pod(ns, "user", &[dra::Uses::Claim("one")]);
    p["spec"]["schedulerName"] = json!(CONVOY);
    dra::create(&cp.client, &p).await?;
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), ns);
    let all = wait_bound(&pods, &["user".to_string()], Duration::from_secs(20))
        .await
        .with_context(|| sched.tail())?;
    let ar = kube::api::ApiResource {
        group: "resource.k8s.io".into(),
        version: "v1beta2".into(),
        api_version: "resource.k8s.io/v1beta2".into(),
        kind: "ResourceClaim".into(),
        plural: "resourceclaims".into(),
    };
    let claim =
        Api::<DynamicObject>::namespaced_with(cp.client.clone(), ns, &ar).get("one").await?;
    let status = claim.data.get("status").cloned().unwrap_or_default();
    let results = &status["allocation"]["devices"]["results"];
    ensure!(results.as_array().is_some_and(|r| r.len() == 1), "allocation: {status}");
    let uid = all["user"].metadata.uid.clone().unwrap_or_default();
    ensure!(status["reservedFor"][0]["uid"] == json!(uid), "reservedFor: {status}");
    ensure!(
        sched.log().lines().any(|l| l.contains("resourceclaims.resource.k8s.io")
            && l.contains("v1beta2")
            && l.contains("watching")),
        "claims not watched as v1beta2{}",
        sched.tail()
    );
    ensure!(failed_watches(&sched).is_empty(), "failed watches: {:?}", failed_watches(&sched));
    Ok(())
}

/// The `WatchList` feature off (`--feature-gates=WatchList=false`): the
/// server refuses streaming lists (`sendInitialEvents`), which Convoy uses
/// by default. Each watch falls back to LIST and WATCH with a warning;
/// Convoy becomes ready and binds. With no fallback it retried the refused
/// watch forever and never became ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_and_binding_without_streaming_lists() -> Result<()> {
    let (cp, sched) = start(&["--feature-gates=WatchList=false"]).await?;
    let ns = "no-watch-list";
    cp.namespace(ns).await?;
    plain_pod_binds(&cp, &sched, ns).await?;
    // Once per watch (nodes, pods, each object kind), not once per retry.
    let fallbacks = sched.count("refuses streaming lists");
    ensure!(
        (2..40).contains(&fallbacks),
        "{fallbacks} fallbacks to LIST and WATCH reported (one per watch expected){}",
        sched.tail()
    );
    Ok(())
}
