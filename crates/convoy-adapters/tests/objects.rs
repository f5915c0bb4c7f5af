//! The watches of Namespaces, Services, workload controllers and claims
//! against a real API server: listed before `Synced`, trimmed, followed, deleted; and
//! the Helm chart's RBAC (rendered by helm) is enough for every watch to sync. A
//! control plane of its own (the RBAC test installs a ClusterRole).

mod common;

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use convoy_adapters::{WatchOptions, cluster_updates};
use convoy_api::{ClusterObject, ClusterUpdate};
use convoy_testenv::TestEnv;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolumeClaim, ReplicationController, Service,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "adapters-objects";

fn ours(o: &ClusterObject) -> bool {
    let m = o.metadata();
    m.namespace.as_deref() == Some(NS)
        || m.name.as_deref().is_some_and(|n| n.starts_with("adapters-objects"))
}

fn describe(o: &ClusterObject) -> String {
    format!("{} {}", o.kind(), o.key())
}

/// Next update about one of our objects (or `Synced`), skipping others.
async fn next_ours<S>(updates: &mut S, what: &str) -> Result<ClusterUpdate>
where
    S: Stream<Item = ClusterUpdate> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(u) = updates.next().await {
            match &u {
                ClusterUpdate::ObjectApplied(o) | ClusterUpdate::ObjectDeleted(o) if ours(o) => {
                    return Ok(u);
                }
                ClusterUpdate::Synced => return Ok(u),
                _ => {}
            }
        }
        bail!("stream ended")
    })
    .await
    .with_context(|| format!("no {what} within 30 s"))?
}

fn template(app: &str) -> serde_json::Value {
    json!({"metadata": {"labels": {"app": app}},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                    "env": [{"name": "A", "value": "1"}]}]}})
}

async fn create<K>(client: &kube::Client, obj: serde_json::Value) -> Result<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj)?;
    Ok(Api::<K>::namespaced(client.clone(), NS).create(&PostParams::default(), &obj).await?)
}

async fn create_namespace(client: &kube::Client, name: &str, team: &str) -> Result<()> {
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"team": team}}}))?;
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await?;
    Ok(())
}

#[tokio::test]
async fn objects_are_listed_trimmed_followed_and_deleted() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    create_namespace(&client, NS, "a").await?;
    create::<Service>(
        &client,
        json!({"metadata": {"name": "web"},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    )
    .await?;
    create::<ReplicaSet>(
        &client,
        json!({"metadata": {"name": "web-7d4b9", "labels": {"app": "web"}},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                        "template": template("web")}}),
    )
    .await?;

    let mut updates = Box::pin(cluster_updates(client.clone(), WatchOptions::default()));

    // The initial lists, ours among them, come before Synced, trimmed.
    let mut listed = Vec::new();
    loop {
        match next_ours(&mut updates, "initial lists").await? {
            ClusterUpdate::Synced => break,
            ClusterUpdate::ObjectApplied(o) => {
                ensure!(o.metadata().managed_fields.is_none(), "managedFields trimmed: {o:?}");
                match &o {
                    ClusterObject::Namespace(ns) => {
                        ensure!(ns.spec.is_none() && ns.status.is_none(), "{ns:?}");
                        let team = ns.metadata.labels.as_ref().and_then(|l| l.get("team"));
                        ensure!(team.map(String::as_str) == Some("a"), "labels kept: {ns:?}");
                    }
                    ClusterObject::Service(s) => {
                        let spec = s.spec.as_ref().context("spec kept")?;
                        ensure!(spec.selector.as_ref().is_some_and(|s| s["app"] == "web"));
                        ensure!(spec.ports.is_none() && spec.cluster_ip.is_none(), "{spec:?}");
                    }
                    ClusterObject::ReplicaSet(rs) => {
                        ensure!(rs.spec.template.is_none() && rs.status.is_none(), "{rs:?}");
                        let sel = rs.spec.selector.match_labels.as_ref();
                        ensure!(sel.is_some_and(|l| l["app"] == "web"), "{rs:?}");
                        ensure!(rs.metadata.uid.is_some() && rs.metadata.labels.is_some());
                    }
                    other => bail!("unexpected {other:?}"),
                }
                listed.push(describe(&o));
            }
            other => bail!("only additions before Synced, got {other:?}"),
        }
    }
    listed.sort();
    ensure!(
        listed
            == [
                format!("Namespace {NS}"),
                format!("ReplicaSet {NS}/web-7d4b9"),
                format!("Service {NS}/web")
            ],
        "{listed:?}"
    );

    // Created after Synced.
    create::<StatefulSet>(
        &client,
        json!({"metadata": {"name": "db"},
               "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "db"}},
                        "template": template("db")}}),
    )
    .await?;
    create::<ReplicationController>(
        &client,
        json!({"metadata": {"name": "legacy"},
               "spec": {"replicas": 0, "selector": {"app": "web"}, "template": template("web")}}),
    )
    .await?;
    let mut seen = Vec::new();
    for _ in 0..2 {
        match next_ours(&mut updates, "StatefulSet and ReplicationController").await? {
            ClusterUpdate::ObjectApplied(o) => {
                if let ClusterObject::StatefulSet(ss) = &o {
                    ensure!(ss.spec.template == Default::default(), "template dropped: {ss:?}");
                }
                seen.push(describe(&o));
            }
            other => bail!("{other:?}"),
        }
    }
    seen.sort();
    ensure!(
        seen == [format!("ReplicationController {NS}/legacy"), format!("StatefulSet {NS}/db")],
        "{seen:?}"
    );

    // A claim keeps only the annotations scheduling reads; its binding (the
    // bind-completed annotation) is passed on, a change of another
    // annotation is not (the binding, patched after it, comes next).
    create::<PersistentVolumeClaim>(
        &client,
        json!({"metadata": {"name": "data", "annotations": {"note": "a"}},
               "spec": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await?;
    match next_ours(&mut updates, "claim").await? {
        ClusterUpdate::ObjectApplied(ClusterObject::PersistentVolumeClaim(c)) => {
            ensure!(c.metadata.annotations.is_none(), "{c:?}");
            ensure!(c.status.as_ref().is_some_and(|s| s.phase.as_deref() == Some("Pending")));
        }
        other => bail!("{other:?}"),
    }
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), NS);
    for annotations in [json!({"note": "b"}), json!({"pv.kubernetes.io/bind-completed": "yes"})] {
        let patch = json!({"metadata": {"annotations": annotations}});
        claims.patch("data", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    match next_ours(&mut updates, "claim binding").await? {
        ClusterUpdate::ObjectApplied(ClusterObject::PersistentVolumeClaim(c)) => {
            let a = c.metadata.annotations.as_ref().context("annotations")?;
            ensure!(a.keys().collect::<Vec<_>>() == ["pv.kubernetes.io/bind-completed"], "{c:?}");
        }
        other => bail!("{other:?}"),
    }

    // A label change of the namespace is passed on.
    let patch = json!({"metadata": {"labels": {"team": "b"}}});
    Api::<Namespace>::all(client.clone())
        .patch(NS, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    match next_ours(&mut updates, "namespace label change").await? {
        ClusterUpdate::ObjectApplied(ClusterObject::Namespace(ns)) => {
            let team = ns.metadata.labels.as_ref().and_then(|l| l.get("team"));
            ensure!(team.map(String::as_str) == Some("b"), "{ns:?}");
        }
        other => bail!("{other:?}"),
    }

    // Deletions.
    Api::<Service>::namespaced(client.clone(), NS).delete("web", &DeleteParams::default()).await?;
    Api::<ReplicaSet>::namespaced(client.clone(), NS)
        .delete("web-7d4b9", &DeleteParams::default())
        .await?;
    let mut deleted = Vec::new();
    for _ in 0..2 {
        match next_ours(&mut updates, "deletions").await? {
            ClusterUpdate::ObjectDeleted(o) => deleted.push(describe(&o)),
            other => bail!("{other:?}"),
        }
    }
    deleted.sort();
    ensure!(
        deleted == [format!("ReplicaSet {NS}/web-7d4b9"), format!("Service {NS}/web")],
        "{deleted:?}"
    );

    // A namespace: Terminating (nothing scheduling reads changes, so no
    // update), then gone once finalized (there is no namespace controller
    // here to finalize it).
    let gone = "adapters-objects-gone";
    create_namespace(&client, gone, "c").await?;
    match next_ours(&mut updates, "second namespace").await? {
        ClusterUpdate::ObjectApplied(o) if describe(&o) == format!("Namespace {gone}") => {}
        other => bail!("{other:?}"),
    }
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces.delete(gone, &DeleteParams::default()).await?;
    let mut ns = namespaces.get(gone).await?;
    ns.spec = None;
    namespaces.replace_subresource("finalize", gone, &PostParams::default(), &ns).await?;
    match next_ours(&mut updates, "namespace deletion").await? {
        ClusterUpdate::ObjectDeleted(o) if describe(&o) == format!("Namespace {gone}") => {}
        other => bail!("{other:?}"),
    }
    Ok(())
}

/// The chart's RBAC as `helm template` renders it, applied with its
/// ServiceAccount; the watches run on a TokenRequest token of that
/// ServiceAccount.
#[tokio::test]
async fn chart_rbac_is_enough_to_sync() -> Result<()> {
    let (name, namespace) = ("convoy-rbac", "adapters-rbac");
    let client = common::chart_client(TestEnv::shared(), name, namespace).await?;

    // Nothing more than listing: a Service cannot be read by name.
    let denied = Api::<Service>::namespaced(client.clone(), namespace).get("any").await;
    ensure!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
        "get on services is not granted: {denied:?}"
    );

    let mut updates = Box::pin(cluster_updates(client, WatchOptions::default()));
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(u) = updates.next().await {
            if matches!(u, ClusterUpdate::Synced) {
                return;
            }
        }
    })
    .await
    .context("the chart's ClusterRole does not let every watch list")?;
    Ok(())
}
