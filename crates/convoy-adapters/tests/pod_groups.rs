//! PodGroups against a real API server: an API that is not served does not
//! hold up `Synced` and is found once installed; invalid groups are
//! reported, not applied; status writes on both APIs. A control plane of
//! its own: the test installs a CRD part-way.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use common::eventually;
use convoy_adapters::pod_groups::api_resource;
use convoy_adapters::{
    GroupReport, GroupReportOutcome, StatusWriter, StatusWriterOptions, WatchOptions,
    cluster_updates_reporting,
};
use convoy_api::{ClusterUpdate, GroupKey, PodGroupApi};
use convoy_testenv::TestEnv;
use futures::{Stream, StreamExt};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

const NS: &str = "adapters-groups";

async fn create(client: &kube::Client, api: PodGroupApi, name: &str, spec: Value) -> Result<()> {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": api.api_version(), "kind": "PodGroup",
        "metadata": { "name": name, "namespace": NS }, "spec": spec
    }))?;
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &api_resource(api))
        .create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("creating {name}"))?;
    Ok(())
}

fn install_crd(env: &TestEnv) -> Result<()> {
    let kubectl = convoy_testenv::bin_dir()?.join("kubectl");
    let crd =
        convoy_testenv::repo_root().join("charts/convoy/crds/scheduling.x-k8s.io_podgroups.yaml");
    for args in [
        vec!["apply".to_string(), "-f".into(), crd.display().to_string()],
        vec![
            "wait".into(),
            "--for=condition=Established".into(),
            "crd/podgroups.scheduling.x-k8s.io".into(),
            "--timeout=30s".into(),
        ],
    ] {
        let out = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(env.kubeconfig())
            .args(&args)
            .output()?;
        ensure!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// Describes group updates (and Synced); skips the rest.
fn describe(u: &ClusterUpdate) -> Option<String> {
    match u {
        ClusterUpdate::PodGroupApplied(g) => {
            Some(format!("apply {} min {}", g.key.name, g.min_member))
        }
        ClusterUpdate::PodGroupDeleted(k) => Some(format!("delete {}", k.name)),
        ClusterUpdate::Synced => Some("synced".into()),
        _ => None,
    }
}

/// Collects described updates until `n` are seen or `timeout` passes.
async fn next_n<S: Stream<Item = ClusterUpdate> + Unpin>(
    s: &mut S,
    n: usize,
    timeout: Duration,
) -> Vec<String> {
    let mut seen = Vec::new();
    let _ = tokio::time::timeout(timeout, async {
        while seen.len() < n {
            match s.next().await {
                Some(u) => seen.extend(describe(&u)),
                None => return,
            }
        }
    })
    .await;
    seen
}

async fn group_events(client: &kube::Client, name: &str, reason: &str) -> Vec<Event> {
    let api: Api<Event> = Api::namespaced(client.clone(), NS);
    let all = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    all.into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

async fn condition(client: &kube::Client, name: &str) -> Option<(String, String)> {
    let api = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NS,
        &api_resource(PodGroupApi::Upstream),
    );
    let obj = serde_json::to_value(api.get(name).await.ok()?).ok()?;
    let c = obj
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "PodGroupInitiallyScheduled")?
        .clone();
    Some((c["status"].as_str()?.to_string(), c["message"].as_str()?.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_of_both_apis_are_watched_and_their_status_written() -> Result<()> {
    let env = tokio::task::spawn_blocking(TestEnv::start).await??;
    let client = env.client().await?;
    env.create_namespace(&client, NS).await?;
    create(
        &client,
        PodGroupApi::Upstream,
        "up",
        json!({"schedulingPolicy": {"gang": {"minCount": 3}}}),
    )
    .await?;

    let (writer, _task) = StatusWriter::new(client.clone(), StatusWriterOptions::default());
    let opts = WatchOptions { discovery_interval: Duration::from_secs(1), ..Default::default() };
    let mut updates =
        Box::pin(cluster_updates_reporting(client.clone(), opts, Some(writer.clone())));

    // The x-k8s CRD is missing: Synced comes anyway, after upstream's list.
    let seen = next_n(&mut updates, 2, Duration::from_secs(30)).await;
    ensure!(seen == ["apply up min 3", "synced"], "initial: {seen:?}");

    // Installed later: found by the next discovery; the invalid group is
    // reported in an Event and not applied.
    install_crd(&env)?;
    create(&client, PodGroupApi::XK8s, "bad", json!({"minMember": 2, "scheduleTimeoutSeconds": 0}))
        .await?;
    // A negative minMember, or one beyond 32 bits: the CRD's schema
    // (`minimum: 1`, `format: int32`) refuses them; `PodGroup::from_json`
    // refuses them too, for a server that would not.
    for (name, min) in [("negative", json!(-1)), ("huge", json!(4_294_967_297_i64))] {
        let created = create(&client, PodGroupApi::XK8s, name, json!({"minMember": min})).await;
        let refused = format!("{:#}", created.err().with_context(|| format!("{name} accepted"))?);
        ensure!(refused.contains("spec.minMember"), "{refused}");
    }
    let negative = json!({"schedulingPolicy": {"gang": {"minCount": -1}}});
    let created = create(&client, PodGroupApi::Upstream, "negative", negative).await;
    let refused = format!("{:#}", created.err().context("minCount -1 accepted")?);
    ensure!(refused.contains("minCount"), "{refused}");
    create(&client, PodGroupApi::XK8s, "xg", json!({"minMember": 2})).await?;
    let seen = next_n(&mut updates, 1, Duration::from_secs(30)).await;
    ensure!(seen == ["apply xg min 2"], "after installing the CRD: {seen:?}");
    let ev = eventually(Duration::from_secs(15), || async {
        group_events(&client, "bad", "InvalidPodGroup").await.into_iter().next()
    })
    .await
    .context("no InvalidPodGroup Event")?;
    let note = ev.note.unwrap_or_default();
    ensure!(note.contains("spec.scheduleTimeoutSeconds: must be positive, got 0"), "{note}");

    // Upstream: False with the message, then True, which is terminal.
    let key = GroupKey::new(PodGroupApi::Upstream, NS, "up");
    let report = |outcome| GroupReport { key: key.clone(), uid: String::new(), outcome };
    writer.group(report(GroupReportOutcome::Unschedulable { message: "2/3 pods fit".into() }));
    ensure!(writer.flush(Duration::from_secs(15)).await, "status writer flushed");
    let c = condition(&client, "up").await;
    ensure!(c == Some(("False".into(), "2/3 pods fit".into())), "{c:?}");
    let placed = GroupReportOutcome::Placed {
        placed: 3,
        members: 3,
        min_member: 3,
        nodes: 2,
        waiting: false,
    };
    writer.group(report(placed));
    writer.group(report(GroupReportOutcome::Unschedulable { message: "later".into() }));
    ensure!(writer.flush(Duration::from_secs(15)).await, "status writer flushed");
    let c = condition(&client, "up").await;
    let want = "placed 3/3 pods (minMember 3) on 2 nodes";
    ensure!(c == Some(("True".into(), want.into())), "{c:?}");
    ensure!(!group_events(&client, "up", "FailedScheduling").await.is_empty(), "group Event");
    ensure!(!group_events(&client, "up", "Scheduled").await.is_empty(), "group Event");
    ensure!(writer.failed() == 0, "{} writes failed", writer.failed());

    // Convoy's status writes do not show up as group changes; a deletion does.
    let xkey = GroupKey::new(PodGroupApi::XK8s, NS, "xg");
    writer.group(GroupReport {
        key: xkey,
        uid: String::new(),
        outcome: GroupReportOutcome::Unschedulable { message: "no pods".into() },
    });
    ensure!(writer.flush(Duration::from_secs(15)).await, "status writer flushed");
    let xg =
        Api::<DynamicObject>::namespaced_with(client.clone(), NS, &api_resource(PodGroupApi::XK8s))
            .get("xg")
            .await?;
    let status = &xg.data["status"];
    ensure!(status["phase"] == "Pending" && status["scheduleStartTime"].is_string(), "{status}");
    Api::<DynamicObject>::namespaced_with(client.clone(), NS, &api_resource(PodGroupApi::XK8s))
        .delete("xg", &DeleteParams::default())
        .await?;
    let seen = next_n(&mut updates, 1, Duration::from_secs(15)).await;
    if seen != ["delete xg"] {
        bail!("after the status writes and the deletion: {seen:?}");
    }
    Ok(())
}
