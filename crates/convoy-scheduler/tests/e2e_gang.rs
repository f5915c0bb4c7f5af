//! End to end, gang scheduling: the `convoy-scheduler` binary against a
//! real kube-apiserver, with PodGroups of both APIs (scheduler-plugins'
//! CRD, installed from `charts/convoy/crds` in each control plane, and
//! upstream's `scheduling.k8s.io/v1beta1`, which testenv serves).
//!
//! Each test runs one scenario for both APIs at once, on two node pools
//! kept apart by a `pool` node label and the pods' nodeSelector, with pods
//! created before their PodGroup for one API and after it for the other.
//! A watch on the test's pods records every bind with its time, so that a
//! bind while a group could not fit (a partial gang) fails the test even
//! if it is undone later.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use convoy_adapters::pod_groups::api_resource;
use convoy_api::{PodGroup, PodGroupApi};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

const X: PodGroupApi = PodGroupApi::XK8s;
const UP: PodGroupApi = PodGroupApi::Upstream;

/// Installs scheduler-plugins' PodGroup CRD with testenv's kubectl and
/// waits until it is established.
fn install_crd(cp: &ControlPlane) -> Result<()> {
    let kubectl = convoy_testenv::bin_dir()?.join("kubectl");
    let crd =
        convoy_testenv::repo_root().join("charts/convoy/crds/scheduling.x-k8s.io_podgroups.yaml");
    let kubeconfig = cp.env.kubeconfig();
    for args in [
        vec!["apply", "-f", crd.to_str().context("CRD path")?],
        vec![
            "wait",
            "--for=condition=Established",
            "crd/podgroups.scheduling.x-k8s.io",
            "--timeout=30s",
        ],
    ] {
        let out = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(&args)
            .output()
            .context("running kubectl")?;
        ensure!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The PodGroup API of `api` in `ns`.
fn groups(cp: &ControlPlane, api: PodGroupApi, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(cp.client.clone(), ns, &api_resource(api))
}

/// Creates a gang PodGroup of `min` members.
async fn create_group(
    cp: &ControlPlane,
    api: PodGroupApi,
    ns: &str,
    name: &str,
    min: u32,
) -> Result<()> {
    let spec = match api {
        X => json!({ "minMember": min }),
        UP => json!({ "schedulingPolicy": { "gang": { "minCount": min } } }),
    };
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": api.api_version(), "kind": "PodGroup",
        "metadata": { "name": name, "namespace": ns }, "spec": spec
    }))?;
    groups(cp, api, ns)
        .create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("creating PodGroup {ns}/{name}"))?;
    Ok(())
}

/// A member of `group` asking for `cpu`, on nodes of `pool` only.
fn member(api: PodGroupApi, group: &str, name: &str, cpu: &str, pool: &str) -> Pod {
    let mut p = pod(name, CONVOY, cpu, "100Mi");
    let spec = p.spec.as_mut().expect("spec");
    spec.node_selector = Some([("pool".to_string(), pool.to_string())].into());
    match api {
        X => {
            p.metadata.labels = Some(
                [(convoy_api::pod_group::POD_GROUP_LABEL.to_string(), group.to_string())].into(),
            );
        }
        UP => {
            spec.scheduling_group = Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
                pod_group_name: Some(group.to_string()),
            });
        }
    }
    p
}

fn members(api: PodGroupApi, group: &str, n: usize, cpu: &str, pool: &str) -> Vec<Pod> {
    (0..n).map(|i| member(api, group, &format!("{group}-{i}"), cpu, pool)).collect()
}

/// A node of `pool`.
fn pool_node(name: &str, pool: &str, cpu: &str) -> Node {
    let mut n = node(name, cpu, "8Gi", "110");
    n.metadata.labels = Some([("pool".to_string(), pool.to_string())].into());
    n
}

/// Every bind seen by a watch on a namespace: pod name and when.
#[derive(Clone, Default)]
struct Binds(Arc<Mutex<BTreeMap<String, Instant>>>);

impl Binds {
    /// Watches `ns` until the returned task is aborted.
    fn watch(client: &kube::Client, ns: &str) -> (Self, tokio::task::JoinHandle<()>) {
        let binds = Binds::default();
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let b = binds.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(e) = events.next().await {
                let pods = match e {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
                    _ => continue,
                };
                for p in pods {
                    if node_of(&p).is_some() {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        b.0.lock().unwrap().entry(name).or_insert_with(Instant::now);
                    }
                }
            }
        });
        (binds, task)
    }

    /// Pods whose name starts with `prefix` seen bound before `at`.
    fn before(&self, prefix: &str, at: Instant) -> Vec<String> {
        let binds = self.0.lock().unwrap();
        binds
            .iter()
            .filter(|(n, t)| n.starts_with(prefix) && **t < at)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// The group's Events of `reason` (on the PodGroup object).
async fn group_events(
    cp: &ControlPlane,
    ns: &str,
    group: &str,
    reason: &str,
) -> Result<Vec<String>> {
    Ok(events(&cp.client, ns, reason)
        .await?
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("PodGroup") && r.name.as_deref() == Some(group)
            })
        })
        .map(|e| e.note.unwrap_or_default())
        .collect())
}

/// The PodGroup as JSON.
async fn group_json(cp: &ControlPlane, api: PodGroupApi, ns: &str, name: &str) -> Result<Value> {
    Ok(serde_json::to_value(groups(cp, api, ns).get(name).await?)?)
}

/// `PodGroupInitiallyScheduled` as `status/reason: message`.
fn initially_scheduled(obj: &Value) -> String {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "PodGroupInitiallyScheduled"))
        .map(|c| {
            format!(
                "{}/{}: {}",
                c["status"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or(""),
                c["message"].as_str().unwrap_or("")
            )
        })
        .unwrap_or_else(|| "no condition".into())
}

/// Bound pods per name prefix.
fn bound_with(pods: &BTreeMap<String, Pod>, prefix: &str) -> usize {
    pods.iter().filter(|(n, p)| n.starts_with(prefix) && node_of(p).is_some()).count()
}

/// The gang invariant over the namespace's pods and the given groups.
async fn check_invariant(cp: &ControlPlane, ns: &str, gs: &[(PodGroupApi, &str)]) -> Result<()> {
    let pods: Vec<Arc<Pod>> = pods_by_name(&Api::namespaced(cp.client.clone(), ns))
        .await?
        .into_values()
        .map(Arc::new)
        .collect();
    let mut specs = Vec::new();
    for (api, name) in gs {
        specs.push(Arc::new(PodGroup::from_json(&group_json(cp, *api, ns, name).await?)?));
    }
    let partial = convoy_gang::invariant::partial_groups(&pods, &specs);
    ensure!(partial.is_empty(), "partially bound groups: {partial:?}");
    Ok(())
}

/// (a) A group of 8 (minMember 8) where only 7 fit binds nothing, is
/// reported once as a group (aggregated FailedScheduling Event on the
/// PodGroup, no per-pod FailedScheduling, members' PodScheduled=False,
/// upstream's PodGroupInitiallyScheduled=False), and binds whole within
/// seconds of a node being added. scheduler-plugins' group: pods created
/// before the group; upstream's: after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_that_does_not_fit_binds_nothing_then_all_when_a_node_is_added() -> Result<()> {
    let cp = ControlPlane::start().await?;
    install_crd(&cp)?;
    let ns = "gang-fit";
    let pods = cp.namespace(ns).await?;
    let mut nodes = Vec::new();
    for pool in ["x", "up"] {
        nodes.extend((0..7).map(|i| pool_node(&format!("{pool}-{i}"), pool, "1")));
    }
    create_nodes(&cp.client, nodes).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let (binds, watch) = Binds::watch(&cp.client, ns);

    create_pods(&pods, members(X, "xg", 8, "1", "x")).await?;
    create_group(&cp, X, ns, "xg", 8).await?;
    create_group(&cp, UP, ns, "ug", 8).await?;
    create_pods(&pods, members(UP, "ug", 8, "1", "up")).await?;

    // Both groups are reported as groups.
    for g in ["xg", "ug"] {
        let note = eventually(Duration::from_secs(30), || async {
            group_events(&cp, ns, g, "FailedScheduling").await.ok()?.into_iter().next()
        })
        .await
        .with_context(|| format!("no FailedScheduling Event on PodGroup {g}{}", sched.tail()))?;
        ensure!(note.contains("(minMember 8)"), "{g}: Event note {note:?}");
    }
    let want_false = "False/Unschedulable: ";
    let cond = eventually(Duration::from_secs(15), || async {
        let c = initially_scheduled(&group_json(&cp, UP, ns, "ug").await.ok()?);
        c.starts_with(want_false).then_some(c)
    })
    .await;
    let obj = group_json(&cp, UP, ns, "ug").await?;
    ensure!(cond.is_some(), "ug: condition {:?}, expected {want_false}", initially_scheduled(&obj));
    let member_cond = eventually(Duration::from_secs(15), || async {
        let p = pods.get("ug-0").await.ok()?;
        scheduled_message(&p).starts_with("False/Unschedulable: pod group").then_some(())
    })
    .await;
    ensure!(member_cond.is_some(), "ug-0: {}", scheduled_message(&pods.get("ug-0").await?));
    let per_pod: Vec<_> = events(&cp.client, ns, "FailedScheduling")
        .await?
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Pod"))
        .collect();
    ensure!(
        per_pod.is_empty(),
        "per-pod FailedScheduling Events for gang members: {:?}",
        per_pod.first()
    );
    let x = group_json(&cp, X, ns, "xg").await?;
    ensure!(x.pointer("/status/phase") == Some(&json!("Scheduling")), "xg status {}", x["status"]);
    ensure!(x.pointer("/status/scheduleStartTime").is_some(), "xg status {}", x["status"]);

    // Nothing bound while the groups could not fit; then a node per pool.
    let all = pods_by_name(&pods).await?;
    ensure!(bound_with(&all, "") == 0, "bound while the groups could not fit");
    let added = Instant::now();
    create_nodes(&cp.client, vec![pool_node("x-7", "x", "1"), pool_node("up-7", "up", "1")])
        .await?;
    let names: Vec<String> =
        ["xg", "ug"].iter().flat_map(|g| (0..8).map(move |i| format!("{g}-{i}"))).collect();
    wait_bound(&pods, &names, Duration::from_secs(30)).await.with_context(|| sched.tail())?;
    println!("both groups of 8 bound {:?} after the nodes were added", added.elapsed());
    let early = binds.before("", added);
    ensure!(early.is_empty(), "bound before a node was added (a partial gang): {early:?}");
    watch.abort();
    check_invariant(&cp, ns, &[(X, "xg"), (UP, "ug")]).await?;

    let cond = eventually(Duration::from_secs(15), || async {
        let c = initially_scheduled(&group_json(&cp, UP, ns, "ug").await.ok()?);
        c.starts_with("True/Scheduled: placed 8/8 pods (minMember 8) on 8 nodes").then_some(c)
    })
    .await;
    let obj = group_json(&cp, UP, ns, "ug").await?;
    ensure!(cond.is_some(), "ug: condition {:?} after binding", initially_scheduled(&obj));
    for g in ["xg", "ug"] {
        let placed = eventually(Duration::from_secs(15), || async {
            group_events(&cp, ns, g, "Scheduled").await.ok()?.into_iter().next()
        })
        .await
        .with_context(|| format!("no Scheduled Event on PodGroup {g}"))?;
        ensure!(placed == "placed 8/8 pods (minMember 8) on 8 nodes", "{g}: {placed:?}");
    }
    // No kubelet runs the pods: scheduler-plugins' group stays Scheduling.
    let x = group_json(&cp, X, ns, "xg").await?;
    ensure!(x.pointer("/status/phase") == Some(&json!("Scheduling")), "xg status {}", x["status"]);
    ensure!(sched.running(), "the scheduler exited{}", sched.tail());
    Ok(())
}

/// (b) Two groups each needing 60% of their pool, created at the same
/// instant: one binds whole, the other binds nothing; once the first
/// group's pods are deleted, the second binds whole. scheduler-plugins'
/// groups: created before their pods; upstream's: after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gangs_racing_for_one_cluster_never_share_it() -> Result<()> {
    let cp = ControlPlane::start().await?;
    install_crd(&cp)?;
    let ns = "gang-race";
    let pods = cp.namespace(ns).await?;
    let mut nodes = Vec::new();
    for pool in ["x", "up"] {
        // 10 slots of 1 cpu per pool; each group needs 6.
        nodes.extend((0..5).map(|i| pool_node(&format!("{pool}-{i}"), pool, "2")));
    }
    create_nodes(&cp.client, nodes).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let (binds, watch) = Binds::watch(&cp.client, ns);

    let (xa, xb, ua, ub) = ("xa", "xb", "ua", "ub");
    for g in [xa, xb] {
        create_group(&cp, X, ns, g, 6).await?;
    }
    let mut all = members(X, xa, 6, "1", "x");
    all.extend(members(X, xb, 6, "1", "x"));
    all.extend(members(UP, ua, 6, "1", "up"));
    all.extend(members(UP, ub, 6, "1", "up"));
    create_pods(&pods, all).await?;
    let (a, b) = tokio::join!(create_group(&cp, UP, ns, ua, 6), create_group(&cp, UP, ns, ub, 6));
    a?;
    b?;

    // Per pool: one group whole, the other nothing, and it stays so.
    let settled = eventually(Duration::from_secs(30), || async {
        let all = pods_by_name(&pods).await.ok()?;
        let counts: Vec<usize> = [xa, xb, ua, ub].iter().map(|g| bound_with(&all, g)).collect();
        let pool_done = |i: usize| {
            let mut c = [counts[i], counts[i + 1]];
            c.sort();
            c == [0, 6]
        };
        (pool_done(0) && pool_done(2)).then_some(counts)
    })
    .await;
    let counts = settled.with_context(|| format!("no winner per pool{}", sched.tail()))?;
    for (g, api) in [(xa, X), (xb, X), (ua, UP), (ub, UP)] {
        if bound_with(&pods_by_name(&pods).await?, g) == 0 {
            let note = eventually(Duration::from_secs(30), || async {
                group_events(&cp, ns, g, "FailedScheduling").await.ok()?.into_iter().next()
            })
            .await
            .with_context(|| format!("no FailedScheduling Event on the losing group {g}"))?;
            ensure!(note.contains("(minMember 6)"), "{g}: {note:?}");
            if api == UP {
                let c = initially_scheduled(&group_json(&cp, UP, ns, g).await?);
                ensure!(c.starts_with("False/Unschedulable"), "{g}: {c}");
            }
        }
    }
    let all = pods_by_name(&pods).await?;
    let now: Vec<usize> = [xa, xb, ua, ub].iter().map(|g| bound_with(&all, g)).collect();
    ensure!(now == counts, "bindings moved after settling: {counts:?} then {now:?}");
    check_invariant(&cp, ns, &[(X, xa), (X, xb), (UP, ua), (UP, ub)]).await?;

    // Delete the winners' pods: the losers bind whole.
    let winners: Vec<&str> =
        [xa, xb, ua, ub].into_iter().filter(|g| bound_with(&all, g) == 6).collect();
    let losers: Vec<&str> =
        [xa, xb, ua, ub].into_iter().filter(|g| bound_with(&all, g) == 0).collect();
    let deleted = Instant::now();
    for g in &winners {
        for i in 0..6 {
            pods.delete(
                &format!("{g}-{i}"),
                &DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
            )
            .await?;
        }
    }
    let names: Vec<String> =
        losers.iter().flat_map(|g| (0..6).map(move |i| format!("{g}-{i}"))).collect();
    wait_bound(&pods, &names, Duration::from_secs(30)).await.with_context(|| sched.tail())?;
    println!(
        "losers {losers:?} bound {:?} after the winners' pods were deleted",
        deleted.elapsed()
    );
    for g in &losers {
        let early = binds.before(g, deleted);
        ensure!(early.is_empty(), "{g} bound before the winners left (a partial gang): {early:?}");
    }
    watch.abort();
    check_invariant(&cp, ns, &[(X, xa), (X, xb), (UP, ua), (UP, ub)]).await?;
    ensure!(sched.running(), "the scheduler exited{}", sched.tail());
    Ok(())
}
