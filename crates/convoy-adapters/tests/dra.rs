//! Dynamic Resource Allocation against a real API server: the DRA kinds
//! are listed, trimmed and followed; [`ApiBinder`]'s ResourceClaim writes
//! (Reserve, Unreserve, Deallocate) do what upstream's DynamicResources
//! does, under the Helm chart's ClusterRole; and, with the controllers, a
//! pod's ResourceClaimTemplate becomes a claim whose name reaches the
//! scheduler in the pod's `status.resourceClaimStatuses`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use convoy_adapters::{ApiBinder, WatchOptions, cluster_updates};
use convoy_api::objects::dra::{ANN_POD_CLAIM_NAME, CLAIM_FINALIZER};
use convoy_api::{BindError, Binder, ClaimWrite, ClusterObject, ClusterUpdate};
use convoy_testenv::TestEnv;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimTemplate,
    ResourceSlice,
};
use kube::api::{Api, PostParams};
use serde_json::json;

const DRIVER: &str = "gpu.adapters-dra.example.com";

/// Next update about one of `ns`'s claims or our cluster-scoped DRA
/// objects (or `Synced`), skipping the rest.
async fn next_dra<S>(updates: &mut S, ns: &str, what: &str) -> Result<ClusterUpdate>
where
    S: Stream<Item = ClusterUpdate> + Unpin,
{
    let ours = |o: &ClusterObject| match o {
        ClusterObject::DeviceClass(_)
        | ClusterObject::ResourceSlice(_)
        | ClusterObject::DeviceTaintRule(_) => {
            o.metadata().name.as_deref().is_some_and(|n| n.starts_with("adapters-dra"))
        }
        ClusterObject::ResourceClaim(_) => o.metadata().namespace.as_deref() == Some(ns),
        _ => false,
    };
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

async fn create_cluster<K>(client: &kube::Client, obj: serde_json::Value) -> Result<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj)?;
    Ok(Api::<K>::all(client.clone()).create(&PostParams::default(), &obj).await?)
}

async fn create_in<K>(client: &kube::Client, ns: &str, obj: serde_json::Value) -> Result<K>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj)?;
    Ok(Api::<K>::namespaced(client.clone(), ns).create(&PostParams::default(), &obj).await?)
}

fn allocation(device: &str) -> Result<AllocationResult> {
    Ok(serde_json::from_value(json!({
        "devices": {"results": [{"request": "gpu", "driver": DRIVER,
                                 "pool": "adapters-dra-node", "device": device}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["adapters-dra-node"]}]}]}
    }))?)
}

fn reserved_uids(claim: &ResourceClaim) -> Vec<String> {
    let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref());
    reserved.into_iter().flatten().map(|r| r.uid.clone()).collect()
}

fn failure(r: Result<Arc<ResourceClaim>, BindError>) -> Result<String> {
    match r {
        Err(BindError::Failed(m)) => Ok(m),
        other => bail!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn dra_objects_are_watched_and_claims_written_as_upstream() -> Result<()> {
    let env = TestEnv::shared();
    let admin = env.client().await?;
    let ns = "adapters-dra";
    env.create_namespace(&admin, ns).await?;
    let client = common::chart_client(env, "convoy-dra", "adapters-dra-rbac").await?;

    create_cluster::<DeviceClass>(
        &admin,
        json!({"metadata": {"name": "adapters-dra-gpu"},
               "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}]}}),
    )
    .await?;
    create_cluster::<ResourceSlice>(
        &admin,
        json!({"metadata": {"name": "adapters-dra-node-gpus"},
               "spec": {"driver": DRIVER, "nodeName": "adapters-dra-node",
                        "pool": {"name": "adapters-dra-node", "generation": 1,
                                 "resourceSliceCount": 1},
                        "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}}),
    )
    .await?;
    create_cluster::<DeviceTaintRule>(
        &admin,
        json!({"metadata": {"name": "adapters-dra-taint"},
               "spec": {"deviceSelector": {"driver": DRIVER, "device": "gpu-1"},
                        "taint": {"key": "example.com/broken", "effect": "NoSchedule"}}}),
    )
    .await?;
    let created = create_in::<ResourceClaim>(
        &admin,
        ns,
        json!({"metadata": {"name": "gpu"},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                   "deviceClassName": "adapters-dra-gpu"}}]}}}),
    )
    .await?;
    let uid = created.metadata.uid.clone().context("uid")?;

    // Listed before Synced, through the chart's ClusterRole, trimmed.
    let mut updates = Box::pin(cluster_updates(client.clone(), WatchOptions::default()));
    let mut listed = Vec::new();
    loop {
        match next_dra(&mut updates, ns, "initial lists").await? {
            ClusterUpdate::Synced => break,
            ClusterUpdate::ObjectApplied(o) => {
                ensure!(o.metadata().managed_fields.is_none(), "managedFields trimmed: {o:?}");
                if let ClusterObject::ResourceSlice(s) = &o {
                    let devices: Vec<_> =
                        s.spec.devices.iter().flatten().map(|d| &d.name).collect();
                    ensure!(devices == ["gpu-0", "gpu-1"], "{s:?}");
                    ensure!(s.spec.node_name.as_deref() == Some("adapters-dra-node"), "{s:?}");
                }
                if let ClusterObject::DeviceTaintRule(r) = &o {
                    let sel = r.spec.device_selector.as_ref().context("deviceSelector")?;
                    ensure!(sel.device.as_deref() == Some("gpu-1"), "{r:?}");
                    ensure!(r.spec.taint.effect == "NoSchedule", "{r:?}");
                    ensure!(r.status.is_none(), "status trimmed: {r:?}");
                }
                listed.push(format!("{} {}", o.kind(), o.key()));
            }
            other => bail!("only additions before Synced, got {other:?}"),
        }
    }
    listed.sort();
    ensure!(
        listed
            == [
                "DeviceClass adapters-dra-gpu",
                "DeviceTaintRule adapters-dra-taint",
                "ResourceClaim adapters-dra/gpu",
                "ResourceSlice adapters-dra-node-gpus"
            ],
        "{listed:?}"
    );

    let binder = ApiBinder::new(client.clone(), 8);
    let claims = Api::<ResourceClaim>::namespaced(admin.clone(), ns);
    let reserve = |allocation: Option<AllocationResult>, pod: &str, uid: &str| {
        binder.write_claim(ClaimWrite::Reserve {
            namespace: ns.into(),
            name: "gpu".into(),
            uid: uid.into(),
            allocation,
            pod_name: pod.into(),
            pod_uid: format!("uid-{pod}"),
        })
    };

    // Reserve with an allocation: finalizer, allocation and reservation.
    let written = reserve(Some(allocation("gpu-0")?), "p1", &uid).await?;
    ensure!(written.metadata.managed_fields.is_none(), "returned trimmed: {written:?}");
    let stored = claims.get("gpu").await?;
    ensure!(written.metadata.resource_version == stored.metadata.resource_version);
    ensure!(
        stored.metadata.finalizers.as_deref() == Some(&[CLAIM_FINALIZER.to_string()][..]),
        "{stored:?}"
    );
    let status = stored.status.as_ref().context("status")?;
    ensure!(status.allocation == Some(allocation("gpu-0")?), "{status:?}");
    let reserved = status.reserved_for.as_deref().context("reservedFor")?;
    ensure!(reserved.len() == 1, "{reserved:?}");
    let (r, want_group) = (&reserved[0], None::<String>);
    ensure!(r.resource == "pods" && r.name == "p1" && r.uid == "uid-p1", "{r:?}");
    ensure!(r.api_group == want_group || r.api_group.as_deref() == Some(""), "{r:?}");
    // The watch follows: the finalizer's update, then the status's.
    loop {
        match next_dra(&mut updates, ns, "the allocated claim").await? {
            ClusterUpdate::ObjectApplied(ClusterObject::ResourceClaim(c)) => {
                ensure!(c.metadata.finalizers.is_some(), "finalizer first: {c:?}");
                if reserved_uids(&c) == ["uid-p1"] {
                    break;
                }
            }
            other => bail!("{other:?}"),
        }
    }

    // Allocated meanwhile; another claim under the same name.
    let m = failure(reserve(Some(allocation("gpu-1")?), "p2", &uid).await)?;
    ensure!(m == "claim adapters-dra/gpu got allocated elsewhere in the meantime", "{m}");
    let m = failure(reserve(None, "p2", "another-uid").await)?;
    ensure!(m == "claim adapters-dra/gpu got deleted in the meantime", "{m}");

    // A second reservation of the allocated claim; the first again is a no-op.
    reserve(None, "p2", &uid).await?;
    let again = reserve(None, "p1", &uid).await?;
    ensure!(reserved_uids(&again) == ["uid-p1", "uid-p2"], "{again:?}");
    let m = failure(
        binder
            .write_claim(ClaimWrite::Deallocate {
                namespace: ns.into(),
                name: "gpu".into(),
                uid: uid.clone(),
            })
            .await,
    )?;
    ensure!(m == "claim adapters-dra/gpu is in use by other consumers", "{m}");

    // Unreserve removes one entry.
    let unreserve = |pod: &str| {
        binder.write_claim(ClaimWrite::Unreserve {
            namespace: ns.into(),
            name: "gpu".into(),
            pod_uid: format!("uid-{pod}"),
        })
    };
    let after = unreserve("p2").await?;
    ensure!(reserved_uids(&after) == ["uid-p1"], "{after:?}");
    ensure!(reserved_uids(&claims.get("gpu").await?) == ["uid-p1"]);

    // Deallocate (reserved for the pod that could not be placed, as
    // upstream's PostFilter allows): allocation and reservation gone, the
    // finalizer stays.
    let cleared = binder
        .write_claim(ClaimWrite::Deallocate {
            namespace: ns.into(),
            name: "gpu".into(),
            uid: uid.clone(),
        })
        .await?;
    let stored = claims.get("gpu").await?;
    for c in [&*cleared, &stored] {
        let s = c.status.as_ref();
        ensure!(s.is_none_or(|s| s.allocation.is_none() && s.reserved_for.is_none()), "{c:?}");
    }
    ensure!(
        stored.metadata.finalizers.as_deref() == Some(&[CLAIM_FINALIZER.to_string()][..]),
        "{stored:?}"
    );
    // Nothing reserved any more: the patch has nothing to delete.
    let still = unreserve("p1").await?;
    ensure!(reserved_uids(&still).is_empty(), "{still:?}");

    // Allocated again: the finalizer is in place already.
    let again = reserve(Some(allocation("gpu-1")?), "p3", &uid).await?;
    ensure!(reserved_uids(&again) == ["uid-p3"], "{again:?}");
    let finalizers = claims.get("gpu").await?.metadata.finalizers.unwrap_or_default();
    ensure!(finalizers == [CLAIM_FINALIZER], "{finalizers:?}");

    // Concurrent reservations conflict with one another; each reads the
    // claim again and retries until it is in.
    let writes: Vec<_> = (0..5).map(|i| reserve(None, &format!("q{i}"), &uid)).collect::<Vec<_>>();
    for r in futures::future::join_all(writes).await {
        r?;
    }
    let mut uids = reserved_uids(&claims.get("gpu").await?);
    uids.sort();
    ensure!(uids == ["uid-p3", "uid-q0", "uid-q1", "uid-q2", "uid-q3", "uid-q4"], "{uids:?}");

    // A claim reserved for a pod that runs is not deallocated.
    let held = create_in::<ResourceClaim>(
        &admin,
        ns,
        json!({"metadata": {"name": "held"},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                   "deviceClassName": "adapters-dra-gpu"}}]}}}),
    )
    .await?;
    let held_uid = held.metadata.uid.clone().context("uid")?;
    let mut runner = common::pod("runner");
    runner.spec.as_mut().context("spec")?.node_name = Some("adapters-dra-node".into());
    let runner =
        Api::<Pod>::namespaced(admin.clone(), ns).create(&PostParams::default(), &runner).await?;
    binder
        .write_claim(ClaimWrite::Reserve {
            namespace: ns.into(),
            name: "held".into(),
            uid: held_uid.clone(),
            allocation: Some(allocation("gpu-0")?),
            pod_name: "runner".into(),
            pod_uid: runner.metadata.uid.clone().context("pod uid")?,
        })
        .await?;
    let m = failure(
        binder
            .write_claim(ClaimWrite::Deallocate {
                namespace: ns.into(),
                name: "held".into(),
                uid: held_uid,
            })
            .await,
    )?;
    ensure!(m == "claim adapters-dra/held is in use by other consumers", "{m}");
    let held = claims.get("held").await?;
    ensure!(held.status.as_ref().is_some_and(|s| s.allocation.is_some()), "{held:?}");

    // Gone.
    let m = failure(
        binder
            .write_claim(ClaimWrite::Unreserve {
                namespace: ns.into(),
                name: "none".into(),
                pod_uid: "uid-p1".into(),
            })
            .await,
    )?;
    ensure!(m == "claim adapters-dra/none got deleted in the meantime", "{m}");
    Ok(())
}

#[tokio::test]
async fn templates_become_claims_named_in_the_pod_status() -> Result<()> {
    let env = TestEnv::shared_with_controllers();
    let client = env.client().await?;
    let ns = "adapters-dra-templates";
    env.create_namespace(&client, ns).await?;
    create_in::<ResourceClaimTemplate>(
        &client,
        ns,
        json!({"metadata": {"name": "gpu-template"},
               "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                   "deviceClassName": "adapters-dra-gpu"}}]}}}}),
    )
    .await?;

    let mut updates = Box::pin(cluster_updates(client.clone(), WatchOptions::default()));
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(u) = updates.next().await {
            if matches!(u, ClusterUpdate::Synced) {
                return;
            }
        }
    })
    .await
    .context("no Synced within 30 s")?;

    let mut pod = common::pod("trainer");
    let spec = pod.spec.as_mut().context("spec")?;
    spec.resource_claims = Some(vec![serde_json::from_value(
        json!({"name": "gpu", "resourceClaimTemplateName": "gpu-template"}),
    )?]);
    spec.containers[0].resources =
        Some(serde_json::from_value(json!({"claims": [{"name": "gpu"}]}))?);
    Api::<Pod>::namespaced(client.clone(), ns).create(&PostParams::default(), &pod).await?;

    // The controller creates the claim, then names it in the pod's status;
    // the pod update that carries the name keeps it through the trim.
    let (mut claim, mut named) = (None, None);
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(u) = updates.next().await {
            match u {
                ClusterUpdate::ObjectApplied(ClusterObject::ResourceClaim(c))
                    if c.metadata.namespace.as_deref() == Some(ns) =>
                {
                    claim = Some(c);
                }
                ClusterUpdate::PodUpdated { new, .. }
                    if new.metadata.namespace.as_deref() == Some(ns) =>
                {
                    let statuses =
                        new.status.as_ref().and_then(|s| s.resource_claim_statuses.clone());
                    if let Some(s) = statuses.filter(|s| !s.is_empty()) {
                        named = Some((s, new.clone()));
                    }
                }
                _ => {}
            }
            if claim.is_some() && named.is_some() {
                return;
            }
        }
    })
    .await
    .with_context(|| format!("claim {claim:?} and named claim {named:?} within 30 s"))?;
    let (claim, (statuses, pod)) = (claim.context("claim")?, named.context("named")?);
    let claim_name = claim.metadata.name.clone().context("claim name")?;
    ensure!(statuses.len() == 1 && statuses[0].name == "gpu", "{statuses:?}");
    ensure!(statuses[0].resource_claim_name.as_deref() == Some(&*claim_name), "{statuses:?}");
    ensure!(claim_name.starts_with("trainer-gpu-"), "{claim_name}");
    let annotations = claim.metadata.annotations.clone().unwrap_or_default();
    ensure!(annotations.get(ANN_POD_CLAIM_NAME).map(String::as_str) == Some("gpu"), "{claim:?}");
    let owner = claim.metadata.owner_references.as_deref().unwrap_or_default();
    ensure!(owner.iter().any(|o| o.kind == "Pod" && Some(&o.uid) == pod.metadata.uid.as_ref()));
    ensure!(pod.spec.as_ref().is_some_and(|s| s.containers[0].env.is_none()), "pod trimmed");
    Ok(())
}
