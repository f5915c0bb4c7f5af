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
    create_group_in_class(cp, api, ns, name, min, None).await
}

/// [`create_group`] with `spec.priorityClassName` (upstream's API only: the
/// API server's Priority admission resolves it into `spec.priority`, the
/// group's priority in preemption).
async fn create_group_in_class(
    cp: &ControlPlane,
    api: PodGroupApi,
    ns: &str,
    name: &str,
    min: u32,
    class: Option<&str>,
) -> Result<()> {
    let mut spec = match api {
        X => json!({ "minMember": min }),
        UP => json!({ "schedulingPolicy": { "gang": { "minCount": min } } }),
    };
    if let Some(class) = class {
        spec["priorityClassName"] = json!(class);
    }
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

/// [`members`] of PriorityClass `class`.
fn members_in_class(
    api: PodGroupApi,
    group: &str,
    n: usize,
    cpu: &str,
    pool: &str,
    class: &str,
) -> Vec<Pod> {
    let mut pods = members(api, group, n, cpu, pool);
    for p in &mut pods {
        p.spec.as_mut().expect("spec").priority_class_name = Some(class.into());
    }
    pods
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

/// A task aborted when dropped: a test that fails early (`?`) must not
/// leave its watch running against a stopped control plane, where it
/// would retry without ever yielding and hang the runtime's shutdown.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    fn abort(&self) {
        self.0.abort();
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Binds {
    /// Watches `ns` until the returned task is aborted (or dropped).
    fn watch(client: &kube::Client, ns: &str) -> (Self, AbortOnDrop) {
        let binds = Binds::default();
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let b = binds.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(e) = events.next().await {
                let pods = match e {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
                    Ok(_) => continue,
                    Err(_) => {
                        // The watcher retries at once: pause, so the task yields.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                for p in pods {
                    if node_of(&p).is_some() {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        b.0.lock().unwrap().entry(name).or_insert_with(Instant::now);
                    }
                }
            }
        });
        (binds, AbortOnDrop(task))
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
                // The condition is written by the status writer after the
                // pods' Events, asynchronously: wait for it, bounded.
                let c = eventually(Duration::from_secs(10), || async {
                    let c = initially_scheduled(&group_json(&cp, UP, ns, g).await.ok()?);
                    c.starts_with("False/Unschedulable").then_some(c)
                })
                .await;
                let last = initially_scheduled(&group_json(&cp, UP, ns, g).await?);
                ensure!(c.is_some(), "{g}: condition {last:?}, expected False/Unschedulable");
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

/// Convoy's default profile (`convoy-scheduler`) with the starvation guard
/// made quick: threshold 3 s, pod backoff 1 s initial, 2 s max.
const STARVATION_CONFIG: &str = "\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  qps: 5000
  burst: 5000
leaderElection:
  leaderElect: false
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
profiles:
- schedulerName: convoy-scheduler
  pluginConfig:
  - name: GangScheduling
    args:
      starvationThresholdSeconds: 3
";

/// A single (non-gang) pod of 800m on nodes of `pool`.
fn single(name: &str, pool: &str) -> Pod {
    let mut p = pod(name, CONVOY, "800m", "100Mi");
    p.spec.as_mut().expect("spec").node_selector =
        Some([("pool".to_string(), pool.to_string())].into());
    p
}

/// (c) Starvation: 16 nodes of 1 cpu, each running a single pod of 800m;
/// a scheduler-plugins group of 16 such pods (minMember 16); then a stream
/// of singles, one round per second: the oldest bound single finishes
/// (deleted) and a new single arrives, so without the guard every freed
/// slot goes to a single and the group never fits. Convoy runs with
/// `starvationThresholdSeconds: 3` and pod backoff 1 s / 2 s max.
///
/// The bound of docs/gang.md with these numbers: round 1 starts after the
/// group's first failed attempt and rounds are at least 1 s apart, so the
/// group starves (3 s) by round 4; from then on no single binds and each
/// round frees a slot for good: the 16th is freed in round 19; the group's
/// next attempt then comes within one backoff (2 s max + 1 s group jitter,
/// + 1 s backoff flush period): placed by round 23. Asserted: seen bound by
/// round 25 (2 rounds for the cycle, 16 binds and the list on a loaded
/// machine); the test fails outright if it is not placed in 60 rounds.
/// Also: the stream really took freed slots before the guard, held singles
/// are told why (`(starvation guard)`), no member was bound while any slot
/// was still held by a single (binds from a watch, deletions timed before
/// their request), and the gang invariant holds at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starving_gang_is_placed_within_bound_behind_a_stream_of_singles() -> Result<()> {
    const NODES: usize = 16;
    const ROUND: Duration = Duration::from_secs(1);
    const BOUND: usize = 23;
    const SLACK: usize = 2;
    const GIVE_UP: usize = 60;
    let began = Instant::now();
    let cp = ControlPlane::start().await?;
    install_crd(&cp)?;
    let ns = "gang-starve";
    let pods = cp.namespace(ns).await?;
    create_nodes(&cp.client, (0..NODES).map(|i| pool_node(&format!("s-{i}"), "s", "1")).collect())
        .await?;
    let mut sched = Scheduler::start_with_config(&cp.env, "convoy-starve", STARVATION_CONFIG)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let (binds, watch) = Binds::watch(&cp.client, ns);

    // The cluster is full of singles.
    let mut running: Vec<String> = (0..NODES).map(|i| format!("single-{i:02}")).collect();
    create_pods(&pods, running.iter().map(|n| single(n, "s")).collect()).await?;
    wait_bound(&pods, &running, Duration::from_secs(30)).await.with_context(|| sched.tail())?;

    create_group(&cp, X, ns, "big", NODES as u32).await?;
    create_pods(&pods, members(X, "big", NODES, "800m", "s")).await?;
    // Its first failed attempt of the whole group starts the threshold, as
    // the members' PodScheduled condition says. (An attempt may come first
    // with only the quorum-completing member, its siblings not yet
    // activated: `0/1 present pods fit (0 placed, minMember 16)`, a
    // Permit-barrier attempt, which does not start it. The PodGroup's Event
    // keeps its first note, so it cannot tell them apart.)
    let whole = eventually(Duration::from_secs(30), || async {
        let all = pods_by_name(&pods).await.ok()?;
        all.iter()
            .any(|(n, p)| {
                n.starts_with("big-") && scheduled_message(p).contains("pods fit (minMember 16)")
            })
            .then_some(())
    })
    .await;
    ensure!(
        whole.is_some(),
        "no whole-group attempt of big: Events {:?}, big-0 {:?}{}",
        group_events(&cp, ns, "big", "FailedScheduling").await?,
        scheduled_message(&pods.get("big-0").await?),
        sched.tail()
    );
    let stream_began = Instant::now();

    let mut deleted: BTreeMap<String, Instant> = BTreeMap::new();
    let mut next = NODES;
    let mut rounds = 0;
    let mut guard_seen = None;
    loop {
        let all = pods_by_name(&pods).await?;
        if bound_with(&all, "big-") > 0 {
            break;
        }
        ensure!(
            rounds < GIVE_UP,
            "the group was not placed in {GIVE_UP} rounds: {}{}",
            all.get("big-0").map(scheduled_message).unwrap_or_default(),
            sched.tail()
        );
        rounds += 1;
        let round_began = tokio::time::Instant::now();
        if guard_seen.is_none()
            && all.iter().any(|(n, p)| {
                n.starts_with("single-") && scheduled_message(p).contains("(starvation guard)")
            })
        {
            guard_seen = Some(rounds);
        }
        // The oldest bound single finishes...
        let done = running.iter().position(|n| all.get(n).is_some_and(|p| node_of(p).is_some()));
        if let Some(i) = done {
            let name = running.remove(i);
            deleted.insert(name.clone(), Instant::now());
            pods.delete(
                &name,
                &DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
            )
            .await?;
        }
        // ... and a new one arrives.
        let name = format!("single-{next:02}");
        next += 1;
        pods.create(&PostParams::default(), &single(&name, "s")).await?;
        running.push(name);
        tokio::time::sleep_until(round_began + ROUND).await;
    }
    let names: Vec<String> = (0..NODES).map(|i| format!("big-{i}")).collect();
    wait_bound(&pods, &names, Duration::from_secs(30)).await.with_context(|| sched.tail())?;
    println!(
        "group of 16 placed after {rounds} rounds, {:?} after its first failed attempt \
         (guard message seen at round {guard_seen:?}); test body {:?}",
        stream_began.elapsed(),
        began.elapsed()
    );
    watch.abort();

    ensure!(
        rounds <= BOUND + SLACK,
        "placed after {rounds} rounds; the bound is {BOUND} (+{SLACK} slack)"
    );
    ensure!(
        guard_seen.is_some() || sched.count("(starvation guard)") > 0,
        "no single was held by the starvation guard{}",
        sched.tail()
    );
    // No member bound while a single still held a slot (each node fits one).
    let seen = binds.0.lock().unwrap().clone();
    let first = names.iter().filter_map(|n| seen.get(n)).min().copied().context("member binds")?;
    let holding: Vec<&String> = seen
        .iter()
        .filter(|(n, t)| n.starts_with("single-") && **t < first)
        .filter(|(n, _)| deleted.get(*n).is_none_or(|d| *d >= first))
        .map(|(n, _)| n)
        .collect();
    ensure!(
        holding.is_empty(),
        "a member bound while singles held slots (a partial gang): {holding:?}"
    );
    let streamed = seen
        .iter()
        .filter(|(n, t)| n.starts_with("single-") && **t < first)
        .filter(|(n, _)| n["single-".len()..].parse::<usize>().is_ok_and(|i| i >= NODES))
        .count();
    ensure!(streamed >= 1, "no streamed single took a freed slot before the guard began");
    check_invariant(&cp, ns, &[(X, "big")]).await?;
    let placed = eventually(Duration::from_secs(15), || async {
        group_events(&cp, ns, "big", "Scheduled").await.ok()?.into_iter().next()
    })
    .await
    .context("no Scheduled Event on PodGroup big")?;
    ensure!(placed == "placed 16/16 pods (minMember 16) on 16 nodes", "big: {placed:?}");
    ensure!(sched.running(), "the scheduler exited{}", sched.tail());
    Ok(())
}

/// (d) An upstream PodGroup (minCount 2) whose pods name different
/// schedulers, Convoy's profile and `default-scheduler` (no kube-scheduler
/// runs here): no pod binds, and the PodGroup gets one FailedScheduling
/// Event saying its pods name different schedulers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_whose_pods_name_different_schedulers_is_rejected_as_a_group() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let ns = "gang-mixed";
    let pods = cp.namespace(ns).await?;
    create_nodes(&cp.client, vec![pool_node("up-0", "up", "4")]).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let (binds, watch) = Binds::watch(&cp.client, ns);

    create_group(&cp, UP, ns, "mix", 2).await?;
    let ours = member(UP, "mix", "mix-0", "100m", "up");
    let mut theirs = member(UP, "mix", "mix-1", "100m", "up");
    theirs.spec.as_mut().expect("spec").scheduler_name = Some("default-scheduler".into());
    create_pods(&pods, vec![ours, theirs]).await?;

    let want = format!(
        "pod group {ns}/mix is rejected: its pods name different schedulers \
         ({CONVOY}, default-scheduler)"
    );
    let note = eventually(Duration::from_secs(30), || async {
        group_events(&cp, ns, "mix", "FailedScheduling").await.ok()?.into_iter().next()
    })
    .await
    .with_context(|| format!("no FailedScheduling Event on PodGroup mix{}", sched.tail()))?;
    ensure!(note.contains("its pods name different schedulers"), "mix: Event note {note:?}");
    ensure!(note == want, "mix: Event note {note:?}, expected {want:?}");

    // Nothing binds, and the decision is not repeated.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = pods_by_name(&pods).await?;
    ensure!(bound_with(&all, "") == 0, "a pod of the rejected group bound");
    let early = binds.before("", Instant::now());
    ensure!(early.is_empty(), "seen bound: {early:?}");
    watch.abort();
    let evs: Vec<_> = events(&cp.client, ns, "FailedScheduling").await?;
    let total: i32 = evs.iter().map(occurrences).sum();
    ensure!(
        total == 1,
        "FailedScheduling Events: {:?}",
        evs.iter().map(|e| &e.note).collect::<Vec<_>>()
    );
    check_invariant(&cp, ns, &[(UP, "mix")]).await?;
    ensure!(sched.running(), "the scheduler exited{}", sched.tail());
    Ok(())
}

/// Gang preemption against a real API server (upstream's PodGroup API): a
/// running priority-0 gang of 2 (one pod per node) and a gang of 2 of
/// priority 1,000,000 (the group's and its members' PriorityClass) that fits only where the low
/// gang runs. The low gang goes whole (`terminationGracePeriodSeconds: 0`:
/// its pods are gone at once, without a kubelet), the high gang binds whole,
/// the `Preempted` Events and the decision line name the group, and no gang
/// is ever bound below its minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_priority_gang_preempts_a_whole_low_priority_gang() -> Result<()> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;

    let cp = ControlPlane::start().await?;
    let ns = "gang-preempt";
    let pods = cp.namespace(ns).await?;
    create_nodes(&cp.client, vec![pool_node("n1", "a", "4"), pool_node("n2", "a", "4")]).await?;
    let class: PriorityClass = serde_json::from_value(json!({
        "metadata": {"name": "urgent"}, "value": 1_000_000
    }))?;
    Api::<PriorityClass>::all(cp.client.clone()).create(&PostParams::default(), &class).await?;
    create_group(&cp, UP, ns, "low", 2).await?;
    let low: Vec<Pod> = members(UP, "low", 2, "3", "a")
        .into_iter()
        .enumerate()
        .map(|(i, mut p)| {
            let spec = p.spec.as_mut().expect("spec");
            spec.node_name = Some(format!("n{}", i + 1));
            spec.termination_grace_period_seconds = Some(0);
            p
        })
        .collect();
    create_pods(&pods, low).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    check_invariant(&cp, ns, &[(UP, "low")]).await?;

    create_group_in_class(&cp, UP, ns, "high", 2, Some("urgent")).await?;
    create_pods(&pods, members_in_class(UP, "high", 2, "3", "a", "urgent")).await?;
    let names = ["high-0".to_string(), "high-1".to_string()];
    let bound =
        wait_bound(&pods, &names, Duration::from_secs(60)).await.with_context(|| sched.tail())?;
    let nodes: std::collections::BTreeSet<_> =
        names.iter().filter_map(|n| node_of(&bound[n])).collect();
    ensure!(nodes.len() == 2, "high gang on {nodes:?}");
    ensure!(!bound.keys().any(|n| n.starts_with("low-")), "low gang remains: {:?}", bound.keys());
    check_invariant(&cp, ns, &[(UP, "low"), (UP, "high")]).await?;

    let uid = groups(&cp, UP, ns).get("high").await?.metadata.uid.unwrap_or_default();
    let note = format!("Preempted by podgroup {uid} on node cluster");
    // Events are written off the loop: the gang may bind before both are
    // visible.
    let preempted = eventually(Duration::from_secs(15), || async {
        let e = events(&cp.client, ns, "Preempted").await.ok()?;
        (e.len() >= 2).then_some(e)
    })
    .await;
    let preempted = match preempted {
        Some(e) => e,
        None => events(&cp.client, ns, "Preempted").await?,
    };
    ensure!(
        preempted.len() == 2 && preempted.iter().all(|e| e.note.as_deref() == Some(&note)),
        "Preempted events: {:?}",
        preempted.iter().map(|e| e.note.clone()).collect::<Vec<_>>()
    );
    ensure!(
        sched.count(&format!("pod group {ns}/high preempts 2 pod(s)")) == 1,
        "one group preemption decision line: {}",
        sched.tail()
    );
    Ok(())
}

/// Gang preemption inside a required topology domain against a real API
/// server: two racks of two 4-CPU nodes, each node running one 3-CPU pod:
/// in rack r1 of priority 0 (n1) and 50 (n2), in r2 of 0 (n3) and 10 (n4).
/// A gang of two 3-CPU members of priority 1,000,000 requires one rack
/// (`convoy.dev/required-topology`, on upstream's API). The two
/// lowest-priority pods (n1, n3) would make room in two racks; within one
/// rack, r2's pair (highest priority 10) goes rather than r1's (50): the
/// gang binds on n3 and n4, and the pods of r1 stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_preempts_inside_one_domain_of_its_required_topology() -> Result<()> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;

    let cp = ControlPlane::start().await?;
    let ns = "gang-preempt-rack";
    let pods = cp.namespace(ns).await?;
    let rack_node = |name: &str, rack: &str| {
        let mut n = pool_node(name, "a", "4");
        n.metadata.labels.get_or_insert_default().insert("rack".into(), rack.into());
        n
    };
    create_nodes(
        &cp.client,
        vec![
            rack_node("n1", "r1"),
            rack_node("n2", "r1"),
            rack_node("n3", "r2"),
            rack_node("n4", "r2"),
        ],
    )
    .await?;
    let classes = Api::<PriorityClass>::all(cp.client.clone());
    for (name, value) in [("urgent", 1_000_000), ("p50", 50), ("p10", 10)] {
        let class: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value}))?;
        classes.create(&PostParams::default(), &class).await?;
    }
    let running: Vec<Pod> = [("n1", None), ("n2", Some("p50")), ("n3", None), ("n4", Some("p10"))]
        .into_iter()
        .map(|(node, class)| {
            let mut p = pod(&format!("on-{node}"), CONVOY, "3", "100Mi");
            let spec = p.spec.as_mut().expect("spec");
            spec.node_name = Some(node.into());
            spec.termination_grace_period_seconds = Some(0);
            spec.priority_class_name = class.map(String::from);
            p
        })
        .collect();
    create_pods(&pods, running).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let group: DynamicObject = serde_json::from_value(json!({
        "apiVersion": UP.api_version(), "kind": "PodGroup",
        "metadata": {"name": "high", "namespace": ns,
                     "annotations": {"convoy.dev/required-topology": "rack"}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "priorityClassName": "urgent"}
    }))?;
    groups(&cp, UP, ns).create(&PostParams::default(), &group).await?;
    create_pods(&pods, members_in_class(UP, "high", 2, "3", "a", "urgent")).await?;
    let names = ["high-0".to_string(), "high-1".to_string()];
    let bound =
        wait_bound(&pods, &names, Duration::from_secs(60)).await.with_context(|| sched.tail())?;
    let nodes: std::collections::BTreeSet<_> =
        names.iter().filter_map(|n| node_of(&bound[n])).collect();
    ensure!(nodes == ["n3", "n4"].into(), "high gang on {nodes:?}");
    let left: std::collections::BTreeSet<String> =
        bound.keys().filter(|n| n.starts_with("on-")).cloned().collect();
    ensure!(left == ["on-n1".to_string(), "on-n2".to_string()].into(), "pods left: {left:?}");
    ensure!(
        sched.count(&format!("pod group {ns}/high preempts 2 pod(s)")) == 1,
        "one group preemption decision line: {}",
        sched.tail()
    );
    check_invariant(&cp, ns, &[(UP, "high")]).await?;
    Ok(())
}
