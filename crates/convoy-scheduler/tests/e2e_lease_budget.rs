//! Leader election has a budget of its own: a burst of bindings at a small
//! client budget (qps 5, burst 5) never delays the lease's renewals past
//! their deadline (2 s). With one token bucket for everything, the renewals
//! waited behind hundreds of queued bindings and the leader lost its lease.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use tokio::time::Instant;

/// Lease losses in a replica's log (the elector's line, and the loop's
/// for a loss before scheduling started).
fn lease_losses(s: &Scheduler) -> usize {
    s.count("leaderelection lost") + s.count("leader election lost")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_bindings_does_not_cost_the_lease() -> Result<()> {
    let cp = ControlPlane::start().await?;
    create_nodes(
        &cp.client,
        (0..10).map(|i| node(&format!("n{i}"), "64", "256Gi", "110")).collect(),
    )
    .await?;
    let pods = cp.namespace("burst").await?;
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1\n\
                kind: KubeSchedulerConfiguration\n\
                clientConnection:\n  qps: 5\n  burst: 5\n\
                leaderElection:\n  leaderElect: true\n  resourceName: budget\n  \
                resourceNamespace: default\n  leaseDuration: 3s\n  renewDeadline: 2s\n  \
                retryPeriod: 500ms\n";
    let mut sched = Scheduler::start_with_config(&cp.env, "convoy", yaml)?;
    sched.wait_ready(Duration::from_secs(30)).await?;
    let count = 150;
    let names: Vec<String> = (0..count).map(|i| format!("p{i}")).collect();
    create_pods(&pods, names.iter().map(|n| pod(n, CONVOY, "100m", "10Mi")).collect()).await?;
    // 150 bindings at 5 per second: half a minute of queued bindings.
    let bound = wait_bound(&pods, &names, Duration::from_secs(120)).await;
    let lost = lease_losses(&sched);
    ensure!(lost == 0, "the leader lost its lease {lost} time(s)\n{}", sched.tail());
    ensure!(sched.running(), "the leader exited\n{}", sched.tail());
    bound?;
    Ok(())
}

/// A knob of [`burst_at_the_charts_settings`] from the environment.
fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Two replicas at the chart's settings (client qps 50 and burst 100 per
/// client; lease 15 s, renew deadline 10 s, retry 2 s), 500 nodes, a burst
/// of 6,000 pods created as fast as the API server takes them: counts lease
/// losses (the target is none) and measures the binding rate the client
/// budget allows. `make bench-chart-settings`; `CONVOY_BURST_QPS`,
/// `CONVOY_BURST_BURST`, `CONVOY_BURST_NODES`, `CONVOY_BURST_PODS` vary it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement (minutes): make bench-chart-settings"]
async fn burst_at_the_charts_settings() -> Result<()> {
    let (qps, burst): (f64, u32) =
        (knob("CONVOY_BURST_QPS", 50.0), knob("CONVOY_BURST_BURST", 100));
    let (nodes, count): (usize, usize) =
        (knob("CONVOY_BURST_NODES", 500), knob("CONVOY_BURST_PODS", 6000));
    let cp = ControlPlane::start().await?;
    create_nodes(
        &cp.client,
        (0..nodes).map(|i| node(&format!("n{i:03}"), "32", "256Gi", "110")).collect(),
    )
    .await?;
    let pods = cp.namespace("burst").await?;
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\n\
         kind: KubeSchedulerConfiguration\n\
         clientConnection:\n  qps: {qps}\n  burst: {burst}\n\
         leaderElection:\n  leaderElect: true\n  resourceName: chart\n  \
         resourceNamespace: default\n  leaseDuration: 15s\n  renewDeadline: 10s\n  \
         retryPeriod: 2s\n"
    );
    let mut replicas = [
        Scheduler::start_with_config(&cp.env, "convoy-a", &yaml)?,
        Scheduler::start_with_config(&cp.env, "convoy-b", &yaml)?,
    ];
    for r in &mut replicas {
        r.wait_ready(Duration::from_secs(120)).await?;
    }
    let names: Vec<String> = (0..count).map(|i| format!("p{i:05}")).collect();
    let t0 = Instant::now();
    create_pods(&pods, names.iter().map(|n| pod(n, CONVOY, "100m", "10Mi")).collect()).await?;
    let created = t0.elapsed();
    let timeout = Duration::from_secs_f64(120.0 + 3.0 * count as f64 / qps.max(1.0));
    wait_bound(&pods, &names, timeout).await.context("not all bound")?;
    let all_bound = t0.elapsed();
    let lost: Vec<usize> = replicas.iter().map(lease_losses).collect();
    let exited: Vec<bool> = replicas.iter_mut().map(|r| !r.running()).collect();
    println!(
        "chart settings: qps {qps}, burst {burst}; {nodes} nodes, {count} pods created in {:.1} s, \
         all bound after {:.1} s ({:.0} pods/s from the first creation); lease losses {lost:?}, \
         exited {exited:?}",
        created.as_secs_f64(),
        all_bound.as_secs_f64(),
        count as f64 / all_bound.as_secs_f64()
    );
    ensure!(
        lost.iter().all(|l| *l == 0),
        "lease losses {lost:?}{}{}",
        replicas[0].tail(),
        replicas[1].tail()
    );
    Ok(())
}
