//! End to end: the `convoy-scheduler` binary against a real kube-apiserver.
//!
//! The scheduler watches every node and pod of its cluster, so each test
//! has a control plane of its own ([`ControlPlane`], at most two at once)
//! and runs the binary as a child process that dies with the test.
//! No kubelet runs: nodes are plain objects, and "bound" means
//! `spec.nodeName` is set.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease as LeaseObject;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams};

/// 50 nodes that each take exactly 10 pods of 100m cpu and 100Mi memory,
/// limited in turn by cpu, memory and the pod count: 500 pods fill the
/// cluster to the last unit of all three, so an overcommit anywhere shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fills_fifty_nodes_exactly_and_leaves_other_schedulers_pods_alone() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let pods = cp.namespace("fill").await?;
    let nodes = (0..50)
        .map(|i| {
            let name = format!("node-{i:02}");
            match i % 3 {
                0 => node(&name, "1", "4Gi", "110"),
                1 => node(&name, "4", "1000Mi", "110"),
                _ => node(&name, "4", "4Gi", "10"),
            }
        })
        .collect();
    create_nodes(&cp.client, nodes).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let theirs: Vec<Pod> =
        (0..5).map(|i| pod(&format!("other-{i}"), "default-scheduler", "100m", "100Mi")).collect();
    let ours: Vec<Pod> =
        (0..500).map(|i| pod(&format!("p-{i:03}"), CONVOY, "100m", "100Mi")).collect();
    let names: Vec<String> = ours.iter().filter_map(|p| p.metadata.name.clone()).collect();
    let started = Instant::now();
    create_pods(&pods, theirs.into_iter().chain(ours).collect()).await?;
    let all =
        wait_bound(&pods, &names, Duration::from_secs(60)).await.with_context(|| sched.tail())?;
    println!("500 pods bound {:?} after the first create", started.elapsed());

    let nodes = Api::<Node>::all(cp.client.clone()).list(&ListParams::default()).await?.items;
    for n in &nodes {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let on: Vec<&Pod> = all.values().filter(|p| node_of(p) == Some(name)).collect();
        for r in ["cpu", "memory"] {
            let used: i64 = on.iter().map(|p| request(p, r)).sum();
            ensure!(
                used <= allocatable(n, r),
                "{name}: {r} requests {used} > allocatable {}",
                allocatable(n, r)
            );
        }
        let count = on.len() as i64 * 1000;
        ensure!(count <= allocatable(n, "pods"), "{name}: {} pods > allocatable", on.len());
    }

    for i in 0..5 {
        let p = &all[&format!("other-{i}")];
        ensure!(
            node_of(p).is_none(),
            "other-{i} (default-scheduler) was bound to {:?}",
            node_of(p)
        );
        ensure!(
            scheduled_message(p) == "no PodScheduled condition",
            "other-{i}: Convoy wrote its status: {}",
            scheduled_message(p)
        );
    }
    let failed = events(&cp.client, "fill", "FailedScheduling").await?;
    ensure!(failed.is_empty(), "no pod should have failed: {:?}", failed.first());
    Ok(())
}

/// A pod too big for every node is reported (Event and condition, upstream's
/// message), then bound within seconds of a node that fits appearing: the
/// node's arrival requeues it, not the periodic flush. A pod with an
/// in-tree AWS EBS volume (a field Convoy does not evaluate yet) is refused
/// with a message naming it, attempted once, and never bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_pod_is_reported_then_bound_when_a_node_fits() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let pods = cp.namespace("wait").await?;
    let small = vec![node("small-0", "1", "4Gi", "110"), node("small-1", "1", "4Gi", "110")];
    create_nodes(&cp.client, small).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let mut pvc = pod("pvc", CONVOY, "100m", "100Mi");
    pvc.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(serde_json::json!(
        {"name": "data", "awsElasticBlockStore": {"volumeID": "vol-1"}}
    ))?]);
    create_pods(&pods, vec![pod("big", CONVOY, "2", "100Mi"), pvc]).await?;
    let refused = "False/Unschedulable: 0/2 nodes are available: pod uses \
                   spec.volumes[0].awsElasticBlockStore, which this scheduler does not evaluate yet.";
    let seen = eventually(Duration::from_secs(15), || async {
        let p = pods.get("pvc").await.ok()?;
        (scheduled_message(&p) == refused).then_some(())
    })
    .await;
    let p = pods.get("pvc").await?;
    ensure!(
        seen.is_some(),
        "pvc: PodScheduled is {:?}, expected {refused:?}",
        scheduled_message(&p)
    );

    let expected = "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are \
                    available: 2 Preemption is not helpful for scheduling.";
    let event = eventually(Duration::from_secs(15), || async {
        let evs = events(&cp.client, "wait", "FailedScheduling").await.ok()?;
        evs.into_iter()
            .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("big"))
    })
    .await
    .with_context(|| format!("no FailedScheduling event for big{}", sched.tail()))?;
    ensure!(event.type_.as_deref() == Some("Warning"), "event type {:?}", event.type_);
    ensure!(
        event.note.as_deref() == Some(expected),
        "event note {:?}, expected {expected:?}",
        event.note
    );
    let want = format!("False/Unschedulable: {expected}");
    let seen = eventually(Duration::from_secs(15), || async {
        let p = pods.get("big").await.ok()?;
        (scheduled_message(&p) == want).then_some(())
    })
    .await;
    let p = pods.get("big").await?;
    ensure!(seen.is_some(), "PodScheduled is {:?}, expected {want:?}", scheduled_message(&p));
    ensure!(node_of(&p).is_none(), "big bound to {:?} without room", node_of(&p));

    let added = Instant::now();
    create_nodes(&cp.client, vec![node("large", "4", "4Gi", "110")]).await?;
    let names = ["big".to_string()];
    let all =
        wait_bound(&pods, &names, Duration::from_secs(15)).await.with_context(|| sched.tail())?;
    println!("big bound {:?} after the node that fits was created", added.elapsed());
    ensure!(node_of(&all["big"]) == Some("large"), "big bound to {:?}", node_of(&all["big"]));
    let p = pods.get("pvc").await?;
    ensure!(node_of(&p).is_none(), "pvc bound to {:?}", node_of(&p));
    // Neither the new node nor the status writes retried it.
    let attempts = sched.count("wait/pvc is unschedulable");
    ensure!(attempts == 1, "pvc attempted {attempts} times{}", sched.tail());
    Ok(())
}

/// Deletions racing with bindings. Six nodes of 20 slots (2 cpu, pods of
/// 100m); 100 pods are created at once, every third is deleted shortly after
/// its creation, and node-0 is deleted as soon as a first pod is bound to it.
///
/// - (a) Binding does not check that the node exists, so pods placed on
///   node-0 before the scheduler saw it go may be bound there; they are at
///   most its 20 slots, and no decision line puts a pod there later than
///   2 s after the deletion returned. Pods created once the deletion has
///   settled never land on node-0.
/// - (b) No leak: the free capacity of the remaining nodes, computed from
///   the API server's view, is filled exactly with new pods, which must all
///   bind. A pod forgotten in the cache (assumed, never confirmed or
///   removed) would hold capacity and leave some of them pending.
/// - (c) Bound at most once: every pod UID has at most one `Scheduled`
///   Event occurrence, and at most one `scheduled` decision line; every
///   live pod has exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions_during_binding_leak_nothing_and_bind_nothing_twice() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let ns = "churn";
    let pods = cp.namespace(ns).await?;
    let nodes = (0..6).map(|i| node(&format!("node-{i}"), "2", "8Gi", "110")).collect();
    create_nodes(&cp.client, nodes).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let doomed = |i: usize| i.is_multiple_of(3);
    let create_and_delete = futures::stream::iter(0..100)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let name = format!("a-{i:03}");
                pods.create(&Default::default(), &pod(&name, CONVOY, "100m", "100Mi")).await?;
                if doomed(i) {
                    // Before, during or after its binding.
                    tokio::time::sleep(Duration::from_millis((i as u64 * 7) % 60)).await;
                    pods.delete(
                        &name,
                        &DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
                    )
                    .await?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>();
    let delete_node = async {
        let first_on_node0 = eventually(Duration::from_secs(30), || async {
            let all = pods_by_name(&pods).await.ok()?;
            all.values().any(|p| node_of(p) == Some("node-0")).then_some(())
        })
        .await;
        Api::<Node>::all(cp.client.clone()).delete("node-0", &DeleteParams::default()).await?;
        anyhow::Ok((first_on_node0.is_some(), Timestamp::now()))
    };
    let (created, deleted) = tokio::join!(create_and_delete, delete_node);
    created.into_iter().collect::<Result<Vec<_>>>()?;
    let (node0_had_pods, node0_deleted) = deleted?;
    ensure!(node0_had_pods, "no pod was ever bound to node-0{}", sched.tail());

    // Settle: every surviving pod is bound, somewhere.
    let survivors: Vec<String> =
        (0..100).filter(|i| !doomed(*i)).map(|i| format!("a-{i:03}")).collect();
    let all = wait_bound(&pods, &survivors, Duration::from_secs(30))
        .await
        .with_context(|| sched.tail())?;
    ensure!(all.len() == survivors.len(), "doomed pods still listed: {}", all.len());
    let on_node0 = all.values().filter(|p| node_of(p) == Some("node-0")).count();
    ensure!(on_node0 <= 20, "{on_node0} pods on node-0, which had 20 slots");
    // Bindings in flight when node-0 went may still land there; nothing
    // decided after the scheduler saw the deletion may (2 s of slack).
    let late = node0_deleted + SignedDuration::from_secs(2);
    for p in placements(&sched.log(), ns) {
        ensure!(p.node != "node-0" || p.at < late, "{p:?}: node-0 was deleted at {node0_deleted}");
    }

    // (b) Fill exactly the free capacity seen by the API server.
    let nodes = Api::<Node>::all(cp.client.clone()).list(&ListParams::default()).await?.items;
    let mut free_slots = 0;
    for n in &nodes {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let on: Vec<&Pod> = all.values().filter(|p| node_of(p) == Some(name)).collect();
        let cpu: i64 = on.iter().map(|p| request(p, "cpu")).sum();
        let memory: i64 = on.iter().map(|p| request(p, "memory")).sum();
        let slots = [
            (allocatable(n, "cpu") - cpu) / milli("100m"),
            (allocatable(n, "memory") - memory) / milli("100Mi"),
            allocatable(n, "pods") / 1000 - on.len() as i64,
        ];
        free_slots += slots.into_iter().min().unwrap_or(0);
    }
    ensure!(nodes.len() == 5 && free_slots > 0, "{} nodes, {free_slots} free slots", nodes.len());
    let fill: Vec<Pod> =
        (0..free_slots).map(|i| pod(&format!("b-{i:03}"), CONVOY, "100m", "100Mi")).collect();
    let fill_names: Vec<String> = fill.iter().filter_map(|p| p.metadata.name.clone()).collect();
    create_pods(&pods, fill).await?;
    let all = wait_bound(&pods, &fill_names, Duration::from_secs(30))
        .await
        .with_context(|| format!("filling {free_slots} free slots: a leak?{}", sched.tail()))?;
    // (a) Nothing created after the deletion settled goes to node-0.
    for name in &fill_names {
        ensure!(node_of(&all[name]) != Some("node-0"), "{name} bound to the deleted node-0");
    }
    for n in &nodes {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let cpu: i64 =
            all.values().filter(|p| node_of(p) == Some(name)).map(|p| request(p, "cpu")).sum();
        ensure!(
            cpu == allocatable(n, "cpu"),
            "{name}: {cpu} of {} milli-cpu used",
            allocatable(n, "cpu")
        );
    }

    // (c) Once the status writer has caught up, one Scheduled per live pod.
    let live: BTreeSet<String> = all.values().filter_map(|p| p.metadata.uid.clone()).collect();
    let per_uid = eventually(Duration::from_secs(30), || async {
        let per_uid = scheduled_per_uid(&cp.client, ns).await.ok()?;
        live.iter().all(|u| per_uid.contains_key(u)).then_some(per_uid)
    })
    .await
    .context("a live pod has no Scheduled event")?;
    for (uid, n) in &per_uid {
        ensure!(*n == 1, "pod {uid} has {n} Scheduled events");
    }
    let lines = placements_per_pod(&sched.log(), ns);
    for name in all.keys() {
        ensure!(lines.get(name) == Some(&1), "{name}: {:?} scheduled lines", lines.get(name));
    }
    ensure!(lines.values().all(|n| *n == 1), "a pod was scheduled twice: {lines:?}");
    ensure!(sched.running(), "the scheduler exited{}", sched.tail());
    Ok(())
}

/// Two replicas on one lease: only the leader binds; after it is killed
/// (SIGKILL, no release) the standby takes over once the 3 s lease expires
/// and binds the next batch. Every pod is bound exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_when_the_leader_is_killed() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let ns = "ha";
    let pods = cp.namespace(ns).await?;
    let nodes = (0..3).map(|i| node(&format!("node-{i}"), "8", "16Gi", "110")).collect();
    create_nodes(&cp.client, nodes).await?;
    let lease = "convoy-e2e-failover";
    let mut a = Scheduler::start(&cp.env, "convoy-a", Lease::Named(lease))?;
    let mut b = Scheduler::start(&cp.env, "convoy-b", Lease::Named(lease))?;
    a.wait_ready(Duration::from_secs(30)).await?;
    b.wait_ready(Duration::from_secs(30)).await?;

    const LEADING: &str = "leading: scheduling starts";
    let batch = |prefix: &str| -> Vec<Pod> {
        (0..30).map(|i| pod(&format!("{prefix}-{i:02}"), CONVOY, "100m", "100Mi")).collect()
    };
    let first: Vec<String> = (0..30).map(|i| format!("one-{i:02}")).collect();
    create_pods(&pods, batch("one")).await?;
    let all = wait_bound(&pods, &first, Duration::from_secs(30))
        .await
        .with_context(|| format!("{}{}", a.tail(), b.tail()))?;
    let leading = (a.count(LEADING), b.count(LEADING));
    ensure!(
        leading == (1, 0) || leading == (0, 1),
        "exactly one replica leads, got {leading:?}{}{}",
        a.tail(),
        b.tail()
    );
    let (leader, standby) = if leading.0 == 1 { (&mut a, &mut b) } else { (&mut b, &mut a) };
    let placed = |s: &Scheduler| placements(&s.log(), ns).len();
    wait_decisions(leader, ns, 30).await;
    ensure!(placed(standby) == 0, "the standby scheduled pods{}", standby.tail());
    ensure!(placed(leader) == 30, "{} decision lines{}", placed(leader), leader.tail());

    // Scheduled events of the first batch, all from the leader.
    let uids: BTreeSet<String> = all.values().filter_map(|p| p.metadata.uid.clone()).collect();
    let evs = eventually(Duration::from_secs(15), || async {
        let evs = events(&cp.client, ns, "Scheduled").await.ok()?;
        (evs.len() >= 30).then_some(evs)
    })
    .await
    .context("30 Scheduled events")?;
    for e in &evs {
        ensure!(
            e.reporting_instance.as_deref() == Some(leader.name.as_str()),
            "Scheduled event reported by {:?}, the leader is {}",
            e.reporting_instance,
            leader.name
        );
    }

    leader.kill();
    let killed = Instant::now();
    let second: Vec<String> = (0..30).map(|i| format!("two-{i:02}")).collect();
    create_pods(&pods, batch("two")).await?;
    let took_over = eventually(Duration::from_secs(15), || async {
        (standby.count(LEADING) == 1).then(|| killed.elapsed())
    })
    .await
    .with_context(|| format!("the standby never took over{}", standby.tail()))?;
    println!("standby leads {took_over:?} after the leader was killed (lease 3 s)");
    ensure!(took_over < Duration::from_secs(8), "takeover took {took_over:?}");
    let all = wait_bound(&pods, &second, Duration::from_secs(15))
        .await
        .with_context(|| standby.tail())?;
    wait_decisions(standby, ns, 30).await;
    ensure!(placed(standby) == 30, "{} decision lines{}", placed(standby), standby.tail());

    // Every pod of both batches: exactly one Scheduled occurrence, the
    // second batch's from the new leader.
    let uids: BTreeSet<String> =
        uids.into_iter().chain(all.values().filter_map(|p| p.metadata.uid.clone())).collect();
    let per_uid = eventually(Duration::from_secs(15), || async {
        let per_uid = scheduled_per_uid(&cp.client, ns).await.ok()?;
        (per_uid.len() >= 60).then_some(per_uid)
    })
    .await
    .context("60 Scheduled events")?;
    ensure!(per_uid.keys().cloned().collect::<BTreeSet<_>>() == uids, "events for other UIDs");
    ensure!(per_uid.values().all(|n| *n == 1), "a pod has several Scheduled events: {per_uid:?}");
    for e in events(&cp.client, ns, "Scheduled").await? {
        let pod = e.regarding.as_ref().and_then(|r| r.name.clone()).unwrap_or_default();
        if pod.starts_with("two-") {
            ensure!(e.reporting_instance.as_deref() == Some(standby.name.as_str()), "{pod}: {e:?}");
        }
    }
    let held = Api::<LeaseObject>::namespaced(cp.client.clone(), "default").get(lease).await?;
    let holder = held.spec.and_then(|s| s.holder_identity);
    ensure!(holder.as_deref() == Some(standby.name.as_str()), "lease held by {holder:?}");
    Ok(())
}

/// The API server restarts while pods are being scheduled: the restart
/// begins once 30 of the first 100 pods exist, so the rest are created (with
/// retries) and bound around the outage, and their watch events, bindings
/// and status writes may fail. 100 more pods follow once the server is back.
/// The scheduler process rides it out (watches relist, failed bindings are
/// retried) and binds all 200 within 60 s of the restart, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovers_from_an_api_server_restart() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let ns = "restart";
    let pods = cp.namespace(ns).await?;
    let nodes = (0..4).map(|i| node(&format!("node-{i}"), "64", "128Gi", "110")).collect();
    create_nodes(&cp.client, nodes).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let created = AtomicUsize::new(0);
    let create_before = futures::stream::iter(0..100)
        .map(|i| {
            let (pods, created) = (pods.clone(), &created);
            async move {
                create_retrying(&pods, pod(&format!("before-{i:03}"), CONVOY, "100m", "100Mi"))
                    .await?;
                created.fetch_add(1, Ordering::Relaxed);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>();
    let restart = async {
        while created.load(Ordering::Relaxed) < 30 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let began = Instant::now();
        let at_start = created.load(Ordering::Relaxed);
        let bound = pods_by_name(&pods).await?.values().filter(|p| node_of(p).is_some()).count();
        let env = cp.env.clone();
        // Blocks until the new server is ready; the scheduler keeps running.
        tokio::task::spawn_blocking(move || env.restart_apiserver())
            .await?
            .context("restarting kube-apiserver")?;
        println!(
            "kube-apiserver restarted in {:?}, begun with {} pods created, {bound} bound",
            began.elapsed(),
            at_start,
        );
        anyhow::Ok(began)
    };
    let (before, began) = tokio::join!(create_before, restart);
    before.into_iter().collect::<Result<Vec<_>>>()?;
    let began = began?;

    // A fresh client: the old one's connections died with the server.
    let client = cp.env.client().await?;
    let pods_after: Api<Pod> = Api::namespaced(client.clone(), ns);
    let after: Vec<Pod> =
        (0..100).map(|i| pod(&format!("after-{i:03}"), CONVOY, "100m", "100Mi")).collect();
    create_pods(&pods_after, after).await?;
    let names: Vec<String> =
        (0..100).flat_map(|i| [format!("before-{i:03}"), format!("after-{i:03}")]).collect();
    let left = Duration::from_secs(60).saturating_sub(began.elapsed());
    wait_bound(&pods_after, &names, left).await.with_context(|| sched.tail())?;
    println!("all 200 pods bound {:?} after the restart began", began.elapsed());
    ensure!(sched.running(), "the scheduler exited{}", sched.tail());

    let lines = placements_per_pod(&sched.log(), ns);
    ensure!(lines.values().all(|n| *n == 1), "a pod was scheduled twice: {lines:?}");
    Ok(())
}

/// Creates a pod, retrying while the API server is away; a conflict means
/// an earlier attempt succeeded but its answer was lost.
async fn create_retrying(api: &Api<Pod>, pod: Pod) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        match api.create(&Default::default(), &pod).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e).context("creating a pod across the restart"),
        }
    }
}

/// Preemption against a real API server: a pod of priority 1,000,000 (from
/// its PriorityClass) fits on the only node if both priority-0 pods bound
/// there go. No kubelet runs here to finish a graceful termination, so the
/// victims carry a finalizer of the test: they stay terminating, with the
/// scheduler's `DisruptionTarget` condition, while the preemptor waits,
/// nominated to their node (and preempts nobody else meanwhile). Once the
/// test removes the finalizers (`terminationGracePeriodSeconds: 0`: the
/// pods are gone at once), the preemptor binds there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn high_priority_pod_preempts_two_low_priority_pods() -> Result<()> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use kube::api::{Patch, PatchParams, PostParams};

    let cp = ControlPlane::start().await?;
    let pods = cp.namespace("preempt").await?;
    create_nodes(&cp.client, vec![node("n1", "4", "4Gi", "110")]).await?;
    let class: PriorityClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "urgent"}, "value": 1_000_000
    }))?;
    Api::<PriorityClass>::all(cp.client.clone()).create(&PostParams::default(), &class).await?;
    let victims: Vec<Pod> = ["low-0", "low-1"]
        .iter()
        .map(|name| {
            let mut p = pod(name, CONVOY, "2", "100Mi");
            p.metadata.finalizers = Some(vec!["convoy.test/hold".into()]);
            let spec = p.spec.as_mut().unwrap();
            spec.node_name = Some("n1".into());
            spec.termination_grace_period_seconds = Some(0);
            p
        })
        .collect();
    create_pods(&pods, victims).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    let mut high = pod("high", CONVOY, "3", "100Mi");
    high.spec.as_mut().unwrap().priority_class_name = Some("urgent".into());
    let high = pods.create(&PostParams::default(), &high).await?;
    let high_uid = high.metadata.uid.clone().unwrap_or_default();

    // Both victims terminating, marked by the scheduler; the preemptor
    // nominated to their node, not bound.
    let condition = |p: &Pod| {
        p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "DisruptionTarget").map(
            |c| {
                format!(
                    "{}/{}: {}",
                    c.status,
                    c.reason.as_deref().unwrap_or(""),
                    c.message.as_deref().unwrap_or("")
                )
            },
        )
    };
    let want = "True/PreemptionByScheduler: convoy-scheduler: preempting to accommodate a \
                higher priority pod";
    let marked = eventually(Duration::from_secs(30), || async {
        let all = pods_by_name(&pods).await.ok()?;
        ["low-0", "low-1"]
            .iter()
            .all(|n| {
                all.get(*n).is_some_and(|p| {
                    p.metadata.deletion_timestamp.is_some() && condition(p).as_deref() == Some(want)
                })
            })
            .then_some(())
    })
    .await;
    ensure!(
        marked.is_some(),
        "victims not preempted: {:?}{}",
        pods_by_name(&pods).await?,
        sched.tail()
    );
    let nominated = eventually(Duration::from_secs(15), || async {
        let p = pods.get("high").await.ok()?;
        p.status.as_ref()?.nominated_node_name.clone()
    })
    .await;
    ensure!(nominated.as_deref() == Some("n1"), "nominatedNodeName {nominated:?}{}", sched.tail());
    ensure!(node_of(&pods.get("high").await?).is_none(), "bound while the victims remain");
    // Events are written off the scheduling path: wait for both.
    let preempted = eventually(Duration::from_secs(15), || async {
        let evs = events(&cp.client, "preempt", "Preempted").await.ok()?;
        (evs.len() >= 2).then_some(evs)
    })
    .await
    .unwrap_or_default();
    let note = format!("Preempted by pod {high_uid} on node n1");
    ensure!(
        preempted.len() == 2 && preempted.iter().all(|e| e.note.as_deref() == Some(&note)),
        "Preempted events: {preempted:?}"
    );
    let failed = events(&cp.client, "preempt", "FailedScheduling").await?;
    let message = "0/1 nodes are available: 1 Insufficient cpu. preemption: found a potential \
                   placement for pod on node n1, preempting 2 victims";
    ensure!(
        failed.iter().any(|e| e.note.as_deref() == Some(message)),
        "FailedScheduling events: {:?}",
        failed.iter().map(|e| e.note.clone()).collect::<Vec<_>>()
    );
    ensure!(
        sched.count("preempts 2 pod(s) on n1") == 1,
        "one preemption decision line: {}",
        sched.tail()
    );

    // The victims go: the preemptor binds on their node.
    for name in ["low-0", "low-1"] {
        let patch = serde_json::json!({"metadata": {"finalizers": null}});
        pods.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    }
    let bound = wait_bound(&pods, &["high".to_string()], Duration::from_secs(30))
        .await
        .with_context(|| sched.tail())?;
    ensure!(node_of(&bound["high"]) == Some("n1"), "high on {:?}", node_of(&bound["high"]));
    ensure!(!bound.contains_key("low-0") && !bound.contains_key("low-1"), "victims remain");
    Ok(())
}

/// A leader whose lease is taken (here overwritten with a 1 s lease that
/// nobody renews) stops, logs `leaderelection lost` and exits non-zero
/// promptly, without writing the lease again on its way out: no release,
/// no re-acquiring the expired lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_exits_without_touching_it_again() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let lease = "convoy-e2e-lost";
    let leases = Api::<LeaseObject>::namespaced(cp.client.clone(), "default");
    let mut a = Scheduler::start(&cp.env, "convoy-lost", Lease::Named(lease))?;
    a.wait_ready(Duration::from_secs(30)).await?;
    eventually(Duration::from_secs(10), || async {
        let held = leases.get(lease).await.ok()?;
        let holder = held.spec?.holder_identity?;
        (holder == "convoy-lost").then_some(())
    })
    .await
    .with_context(|| format!("convoy-lost never took the lease{}", a.tail()))?;

    let mut taken = leases.get(lease).await?;
    let spec = taken.spec.as_mut().context("lease spec")?;
    spec.holder_identity = Some("intruder".into());
    spec.lease_duration_seconds = Some(1);
    let taken = leases.replace(lease, &Default::default(), &taken).await?;
    let overwritten = Instant::now();

    let status = a
        .wait_exit(Duration::from_secs(6))
        .await
        .with_context(|| format!("still running 6 s after losing its lease{}", a.tail()))?;
    println!("exited {:?} after its lease was taken ({status})", overwritten.elapsed());
    ensure!(!status.success(), "exit status {status}{}", a.tail());
    ensure!(a.count("leaderelection lost") >= 1, "no 'leaderelection lost'{}", a.tail());
    let now = leases.get(lease).await?;
    ensure!(
        now.metadata.resource_version == taken.metadata.resource_version,
        "the lease was written after the loss: {:?}{}",
        now.spec,
        a.tail()
    );
    Ok(())
}
