//! End to end: a pod the API server accepts but Convoy cannot evaluate (an
//! amount beyond its 64-bit counters) is refused with the field named, on
//! the pod (Event, `PodScheduled` condition) and in the log, and blocks no
//! other pod; a later FailedScheduling with another message shows it.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_pod_is_refused_by_name_and_blocks_nothing() -> Result<()> {
    let cp = ControlPlane::start().await?;
    let pods = cp.namespace("bad-input").await?;
    create_nodes(&cp.client, vec![node("n1", "2", "4Gi", "110")]).await?;
    let mut sched = Scheduler::start(&cp.env, "convoy", Lease::None)?;
    sched.wait_ready(Duration::from_secs(30)).await?;

    // 1e20 cores: valid for the API server, more millicores than an i64.
    create_pods(&pods, vec![pod("huge", CONVOY, "1e20", "100Mi")]).await?;
    create_pods(&pods, vec![pod("ok", CONVOY, "500m", "100Mi")]).await?;
    let all = wait_bound(&pods, &["ok".to_string()], Duration::from_secs(15))
        .await
        .with_context(|| sched.tail())?;
    ensure!(node_of(&all["ok"]) == Some("n1"), "ok bound to {:?}", node_of(&all["ok"]));

    let field = "invalid pod: spec.containers[0].resources.requests[cpu]: invalid quantity";
    let event = eventually(Duration::from_secs(15), || async {
        let evs = events(&cp.client, "bad-input", "FailedScheduling").await.ok()?;
        evs.into_iter()
            .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("huge"))
    })
    .await
    .with_context(|| format!("no FailedScheduling event for huge{}", sched.tail()))?;
    let note = event.note.unwrap_or_default();
    ensure!(note.starts_with(field) && note.ends_with("too large"), "event note {note:?}");
    let want = format!("False/Unschedulable: {note}");
    let seen = eventually(Duration::from_secs(15), || async {
        let p = pods.get("huge").await.ok()?;
        (scheduled_message(&p) == want).then_some(())
    })
    .await;
    let p = pods.get("huge").await?;
    ensure!(seen.is_some(), "PodScheduled is {:?}, expected {want:?}", scheduled_message(&p));
    ensure!(node_of(&p).is_none(), "huge bound to {:?}", node_of(&p));
    let logged = sched.count("refusing a pod the scheduler cannot read");
    ensure!(logged == 1, "refusal logged {logged} times{}", sched.tail());

    // Another message for a pod that stays pending is visible as its own
    // Event: a node with room but a taint the pod does not tolerate.
    create_pods(&pods, vec![pod("big", CONVOY, "3", "100Mi")]).await?;
    let first = eventually(Duration::from_secs(15), || async {
        let evs = events(&cp.client, "bad-input", "FailedScheduling").await.ok()?;
        evs.into_iter()
            .find(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("big"))
            .and_then(|e| e.note)
    })
    .await
    .context("no FailedScheduling event for big")?;
    ensure!(first.starts_with("0/1 nodes are available: 1 Insufficient cpu."), "{first}");
    let mut tainted = node("n2", "4", "4Gi", "110");
    tainted.spec = Some(serde_json::from_value(serde_json::json!({
        "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    }))?);
    create_nodes(&cp.client, vec![tainted]).await?;
    let second = "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s).";
    let notes = eventually(Duration::from_secs(30), || async {
        let evs = events(&cp.client, "bad-input", "FailedScheduling").await.ok()?;
        let notes: Vec<String> = evs
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("big"))
            .filter_map(|e| e.note)
            .collect();
        notes.iter().any(|n| n.starts_with(second)).then_some(notes)
    })
    .await
    .with_context(|| {
        let log = sched.log();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("big")).collect();
        format!("the second message never showed as an Event; big's lines:\n{}", lines.join("\n"))
    })?;
    ensure!(notes.contains(&first), "the first message is kept: {notes:?}");
    Ok(())
}
