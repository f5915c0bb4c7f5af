//! `cluster_updates` against a real API server, including an API-server
//! restart. A test binary of its own: the restart would disturb the other
//! tests' connections.

mod common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use common::{eventually, node, pod};
use convoy_adapters::{WatchOptions, cluster_updates};
use convoy_api::ClusterUpdate;
use convoy_testenv::TestEnv;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

const NS: &str = "adapters-watch";
const PREFIX: &str = "adapters-watch-node-";

fn ours_pod(p: &Pod) -> bool {
    p.metadata.namespace.as_deref() == Some(NS)
}

fn ours_node(n: &Node) -> bool {
    n.metadata.name.as_deref().is_some_and(|n| n.starts_with(PREFIX))
}

fn name<K: kube::Resource>(o: &K) -> &str {
    o.meta().name.as_deref().unwrap_or("")
}

/// Next update satisfying `pred`, skipping others; fails after `timeout`.
async fn next_matching<S>(
    updates: &mut S,
    timeout: Duration,
    what: &str,
    mut pred: impl FnMut(&ClusterUpdate) -> bool,
) -> Result<ClusterUpdate>
where
    S: Stream<Item = ClusterUpdate> + Unpin,
{
    tokio::time::timeout(timeout, async {
        while let Some(u) = updates.next().await {
            if pred(&u) {
                return Ok(u);
            }
        }
        bail!("stream ended")
    })
    .await
    .with_context(|| format!("no {what} within {timeout:?}"))?
}

#[tokio::test]
async fn watch_lists_then_follows_changes_across_an_apiserver_restart() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    env.create_namespace(&client, NS).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for i in 1..=2 {
        nodes.create(&PostParams::default(), &node(&format!("{PREFIX}{i}"))).await?;
    }
    for i in 1..=3 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}"))).await?;
    }

    let mut updates = Box::pin(cluster_updates(
        client.clone(),
        WatchOptions { page_size: Some(2), ..Default::default() },
    ));

    // Initial lists: our nodes, then our pods, then Synced.
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(u) = updates.next().await {
            match u {
                ClusterUpdate::NodeAdded(n) if ours_node(&n) => {
                    seen.push(format!("node {}", name(&*n)))
                }
                ClusterUpdate::PodAdded(p) if ours_pod(&p) => {
                    assert!(p.metadata.managed_fields.is_none(), "managedFields trimmed");
                    assert!(p.spec.as_ref().unwrap().containers[0].env.is_none(), "env trimmed");
                    seen.push(format!("pod {}", name(&*p)));
                }
                ClusterUpdate::Synced => {
                    seen.push("synced".into());
                    break;
                }
                ClusterUpdate::NodeAdded(_)
                | ClusterUpdate::PodAdded(_)
                | ClusterUpdate::ObjectApplied(_)
                | ClusterUpdate::ApisServed(_) => {}
                other => panic!("only additions before Synced, got {other:?}"),
            }
        }
    })
    .await
    .context("initial lists not delivered")?;
    assert_eq!(
        seen,
        [
            format!("node {PREFIX}1"),
            format!("node {PREFIX}2"),
            "pod p1".into(),
            "pod p2".into(),
            "pod p3".into(),
            "synced".into()
        ]
    );

    // A label change: PodUpdated with both versions.
    let patch = serde_json::json!({ "metadata": { "labels": { "tier": "gold" } } });
    pods.patch("p1", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let u = next_matching(&mut updates, Duration::from_secs(20), "PodUpdated p1", |u| {
        matches!(u, ClusterUpdate::PodUpdated { new, .. } if ours_pod(new) && name(&**new) == "p1")
    })
    .await?;
    let ClusterUpdate::PodUpdated { old, new } = u else { unreachable!() };
    assert!(old.metadata.labels.as_ref().is_none_or(|l| !l.contains_key("tier")));
    assert_eq!(
        new.metadata.labels.as_ref().and_then(|l| l.get("tier")).map(String::as_str),
        Some("gold")
    );
    assert_ne!(old.metadata.resource_version, new.metadata.resource_version);

    // A deletion.
    pods.delete("p2", &DeleteParams::default()).await?;
    next_matching(
        &mut updates,
        Duration::from_secs(20),
        "PodDeleted p2",
        |u| matches!(u, ClusterUpdate::PodDeleted(p) if ours_pod(p) && name(&**p) == "p2"),
    )
    .await?;

    // The API server restarts; the watchers reconnect on their own.
    let env_ref: &'static TestEnv = env;
    tokio::task::spawn_blocking(move || env_ref.restart_apiserver()).await??;
    let created = eventually(Duration::from_secs(30), || async {
        match pods.create(&PostParams::default(), &pod("p4")).await {
            Ok(p) => Some(p),
            // Created just as the connection broke.
            Err(kube::Error::Api(s)) if s.code == 409 => pods.get("p4").await.ok(),
            Err(_) => None,
        }
    })
    .await
    .context("API server did not come back")?;
    let u = next_matching(
        &mut updates,
        Duration::from_secs(60),
        "PodAdded p4 after restart",
        |u| matches!(u, ClusterUpdate::PodAdded(p) if ours_pod(p) && name(&**p) == "p4"),
    )
    .await?;
    let ClusterUpdate::PodAdded(p) = u else { unreachable!() };
    assert_eq!(p.metadata.uid, created.metadata.uid);
    let _: Arc<Pod> = p;
    Ok(())
}
