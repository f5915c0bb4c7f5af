//! Binding and status writing against a real API server
//! (one control plane for this binary; each test has its own namespace).

mod common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use common::{eventually, pod};
use convoy_adapters::{ApiBinder, StatusWriter, StatusWriterOptions};
use convoy_api::{BindError, Binder, PodInfo, PodKey};
use convoy_testenv::TestEnv;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

async fn create_pod(pods: &Api<Pod>, name: &str) -> Result<Arc<PodInfo>> {
    let created = pods.create(&PostParams::default(), &pod(name)).await?;
    Ok(Arc::new(PodInfo::new(Arc::new(created))?))
}

#[tokio::test]
async fn binder_binds_and_classifies_conflicts() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "adapters-binder").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let binder = ApiBinder::new(client.clone(), 4);
    let (node_a, node_b): (Arc<str>, Arc<str>) = ("binder-node-a".into(), "binder-node-b".into());

    let p1 = create_pod(&pods, "p1").await?;
    binder.bind(Arc::clone(&p1), Arc::clone(&node_a)).await?;
    let bound = pods.get("p1").await?;
    assert_eq!(bound.spec.and_then(|s| s.node_name).as_deref(), Some(&*node_a));

    assert_eq!(
        binder.bind(Arc::clone(&p1), Arc::clone(&node_a)).await,
        Err(BindError::AlreadyBound)
    );
    match binder.bind(Arc::clone(&p1), Arc::clone(&node_b)).await {
        Err(BindError::Failed(msg)) => assert!(!msg.is_empty()),
        other => panic!("binding a bound pod elsewhere must fail, got {other:?}"),
    }

    // Deleted: an unassigned pod goes away at once.
    let p2 = create_pod(&pods, "p2").await?;
    pods.delete("p2", &DeleteParams::default()).await?;
    eventually(Duration::from_secs(10), || async {
        pods.get_opt("p2").await.ok().and_then(|p| p.is_none().then_some(()))
    })
    .await
    .context("p2 not deleted")?;
    assert!(matches!(binder.bind(p2, Arc::clone(&node_a)).await, Err(BindError::PodGone(_))));

    // Another UID (the pod was recreated under the same name).
    let p3 = create_pod(&pods, "p3").await?;
    let mut stale = (*p3.pod).clone();
    stale.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    let stale = Arc::new(PodInfo::new(Arc::new(stale))?);
    assert!(matches!(binder.bind(stale, Arc::clone(&node_a)).await, Err(BindError::PodGone(_))));
    let p3_now = pods.get("p3").await?;
    assert_eq!(p3_now.spec.and_then(|s| s.node_name), None, "stale UID bound nothing");
    Ok(())
}

async fn events_for(events: &Api<Event>, pod: &str, reason: &str) -> Option<Event> {
    let lp = ListParams::default().fields(&format!("regarding.name={pod}"));
    events.list(&lp).await.ok()?.items.into_iter().find(|e| e.reason.as_deref() == Some(reason))
}

#[tokio::test]
async fn status_writer_records_events_and_condition() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "adapters-status").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let (writer, task) = StatusWriter::new(client.clone(), StatusWriterOptions::default());

    let p1 = create_pod(&pods, "p1").await?;
    let p2 = create_pod(&pods, "p2").await?;
    let message = "0/3 nodes are available: 3 Insufficient cpu.";
    assert!(writer.unschedulable(&p1.key, &p1.uid, message));
    assert!(writer.scheduled(&p2.key, &p2.uid, "status-node-x"));
    assert!(writer.flush(Duration::from_secs(10)).await, "queue drained");
    assert_eq!((writer.dropped(), writer.failed()), (0, 0));

    let failed =
        events_for(&events, "p1", "FailedScheduling").await.context("FailedScheduling event")?;
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.note.as_deref(), Some(message));
    assert_eq!(failed.reporting_controller.as_deref(), Some("convoy-scheduler"));
    let regarding = failed.regarding.context("regarding")?;
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(regarding.uid.as_deref(), Some(&*p1.uid));

    let cond = pods
        .get_status("p1")
        .await?
        .status
        .and_then(|s| s.conditions)
        .and_then(|c| c.into_iter().find(|c| c.type_ == "PodScheduled"))
        .context("PodScheduled condition")?;
    assert_eq!(cond.status, "False");
    assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(cond.message.as_deref(), Some(message));

    let scheduled = events_for(&events, "p2", "Scheduled").await.context("Scheduled event")?;
    assert_eq!(scheduled.type_.as_deref(), Some("Normal"));
    assert_eq!(scheduled.action.as_deref(), Some("Binding"));
    assert_eq!(
        scheduled.note.as_deref(),
        Some(format!("Successfully assigned {ns}/p2 to status-node-x").as_str())
    );

    // The task ends once the writer is gone.
    drop(writer);
    tokio::time::timeout(Duration::from_secs(5), task).await??;
    Ok(())
}

/// A pod that does not fit is explained before the `Scheduled` Events
/// queued ahead of it: after a burst of bindings its condition and
/// `FailedScheduling` Event do not wait behind minutes of `Scheduled`
/// Events.
#[tokio::test]
async fn status_writer_explains_a_pending_pod_before_queued_scheduled_events() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "adapters-status-order").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    // One write at once, then one a second: written in arrival order, the
    // condition would come after ten Scheduled Events, 11 s from now.
    let opts = StatusWriterOptions { qps: 1.0, burst: 1, ..StatusWriterOptions::default() };
    let (writer, _task) = StatusWriter::new(client.clone(), opts);
    let pending = create_pod(&pods, "pending").await?;
    for i in 0..10 {
        assert!(writer.scheduled(&PodKey::new(&ns, &format!("bound-{i}")), "uid", "node-x"));
    }
    let message = "0/3 nodes are available: 3 Insufficient cpu.";
    assert!(writer.unschedulable(&pending.key, &pending.uid, message));

    let condition = eventually(Duration::from_secs(30), || async {
        let status = pods.get_status("pending").await.ok()?.status?;
        status.conditions?.into_iter().find(|c| c.type_ == "PodScheduled")
    })
    .await
    .context("PodScheduled condition")?;
    assert_eq!(condition.message.as_deref(), Some(message));
    // The condition is patched first, the FailedScheduling Event one
    // token (1 s) later; the Scheduled Events only after both.
    let written = eventually(Duration::from_secs(30), || async {
        let written = events.list(&ListParams::default()).await.ok()?.items;
        written.iter().any(|e| e.reason.as_deref() == Some("FailedScheduling")).then_some(written)
    })
    .await
    .context("FailedScheduling Event")?;
    let scheduled = written.iter().filter(|e| e.reason.as_deref() == Some("Scheduled")).count();
    assert!(scheduled < 10, "{scheduled} Scheduled Events were written before the explanation");
    Ok(())
}

/// A later FailedScheduling with another message is visible through the
/// API (a new Event), and a repeat of it counts in its series.
#[tokio::test]
async fn status_writer_shows_a_new_message_and_counts_repeats() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "adapters-series").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let (writer, _task) = StatusWriter::new(client.clone(), StatusWriterOptions::default());
    let p = create_pod(&pods, "p").await?;

    let (first, second) = (
        "0/3 nodes are available: 3 Insufficient cpu.",
        "0/4 nodes are available: 4 Insufficient memory.",
    );
    for message in [first, second, second, second] {
        assert!(writer.unschedulable(&p.key, &p.uid, message));
        assert!(writer.flush(Duration::from_secs(10)).await, "queue drained");
    }
    assert_eq!(writer.failed(), 0);
    let lp = ListParams::default().fields("regarding.name=p");
    let failed: Vec<Event> = events
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .collect();
    let count = |note: &str| {
        let e = failed.iter().find(|e| e.note.as_deref() == Some(note));
        e.map(|e| e.series.as_ref().map_or(1, |s| s.count))
    };
    assert_eq!(failed.len(), 2, "one Event per message: {failed:?}");
    assert_eq!(count(first), Some(1));
    assert_eq!(count(second), Some(3), "the repeats count in the second message's series");
    Ok(())
}

/// A pod that fails again before its condition is written takes one place
/// in the queue, with its latest message: a burst of retries of a few pods
/// cannot fill the queue and crowd out a pod not explained yet.
#[tokio::test]
async fn status_writer_keeps_one_condition_per_pod_with_the_latest_message() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "adapters-status-latest").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // Room for two writes, one write a second: the retries below all come
    // while the first write waits.
    let opts =
        StatusWriterOptions { capacity: 2, qps: 1.0, burst: 1, ..StatusWriterOptions::default() };
    let (writer, _task) = StatusWriter::new(client.clone(), opts);
    let (a, b) = (create_pod(&pods, "a").await?, create_pod(&pods, "b").await?);
    for i in 0..50 {
        assert!(writer.unschedulable_condition(&a.key, &a.uid, &format!("a attempt {i}")));
    }
    assert!(writer.unschedulable_condition(&b.key, &b.uid, "b attempt 0"));
    assert_eq!(writer.dropped(), 0, "retries of one pod take one place");
    assert!(writer.flush(Duration::from_secs(20)).await, "queue drained");
    let message = |name: &'static str| {
        let pods = pods.clone();
        async move {
            let status = pods.get_status(name).await.ok()?.status?;
            let c = status.conditions?.into_iter().find(|c| c.type_ == "PodScheduled")?;
            c.message
        }
    };
    assert_eq!(message("a").await.as_deref(), Some("a attempt 49"), "the latest message");
    assert_eq!(message("b").await.as_deref(), Some("b attempt 0"));
    Ok(())
}

#[tokio::test]
async fn status_writer_drops_when_full_and_never_blocks() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "adapters-status-full").await?;
    // One write at once, then one per 1000 s: the task stalls on its second.
    let opts = StatusWriterOptions {
        capacity: 2,
        scheduled_capacity: 2,
        qps: 0.001,
        burst: 1,
        ..StatusWriterOptions::default()
    };
    let (writer, task) = StatusWriter::new(client, opts);
    let key = PodKey::new(&ns, "ghost");
    let started = tokio::time::Instant::now();
    let accepted = (0..50).filter(|_| writer.scheduled(&key, "uid", "n")).count();
    assert!(started.elapsed() < Duration::from_secs(1), "never waits");
    assert!((2..=4).contains(&accepted), "capacity 2 (+ what the task took): {accepted}");
    assert_eq!(writer.dropped(), 50 - accepted as u64);
    assert!(!writer.flush(Duration::from_millis(200)).await, "cannot drain while stalled");
    task.abort();
    Ok(())
}

#[tokio::test]
async fn connect_from_kubeconfig_with_rate_limit() -> Result<()> {
    let env = TestEnv::shared();
    let client = convoy_adapters::connect(Some(env.kubeconfig()), 5.0, 2).await?;
    let t0 = tokio::time::Instant::now();
    for _ in 0..6 {
        client.apiserver_version().await?;
    }
    // Two at once, then four at 5/s: at least 0.8 s.
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(750), "rate limited: {took:?}");

    let unlimited = convoy_adapters::connect(Some(env.kubeconfig()), 0.0, 0).await?;
    let t0 = tokio::time::Instant::now();
    for _ in 0..6 {
        unlimited.apiserver_version().await?;
    }
    assert!(t0.elapsed() < took, "qps 0 disables the limit");

    let missing =
        convoy_adapters::connect(Some(std::path::Path::new("/nonexistent/kubeconfig")), 5.0, 2)
            .await;
    assert!(matches!(missing, Err(convoy_adapters::AdapterError::Kubeconfig { .. })));
    Ok(())
}

#[tokio::test]
async fn watch_with_streaming_lists_syncs() -> Result<()> {
    use convoy_adapters::{WatchOptions, cluster_updates};
    use convoy_api::ClusterUpdate;
    use futures::StreamExt;

    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = env.create_namespace(&client, "adapters-streaming").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.create(&PostParams::default(), &pod("s1")).await?;
    let mut updates = Box::pin(cluster_updates(
        client,
        WatchOptions { streaming_lists: true, page_size: None, ..Default::default() },
    ));
    let mut found = false;
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(u) = updates.next().await {
            match u {
                ClusterUpdate::PodAdded(p) if p.metadata.namespace.as_deref() == Some(&*ns) => {
                    found = true
                }
                ClusterUpdate::Synced => break,
                _ => {}
            }
        }
    })
    .await
    .context("streaming list never synced")?;
    assert!(found, "listed pod delivered before Synced");
    Ok(())
}
