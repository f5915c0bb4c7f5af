//! Leader election has a budget of its own: a burst of bindings at a small
//! client budget (qps 5, burst 5) never delays the lease's renewals past
//! their deadline (2 s). With one token bucket for everything, the renewals
//! waited behind hundreds of queued bindings and the leader lost its lease.

mod common;

use std::time::Duration;

use anyhow::{Result, ensure};
use common::*;

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
    let lost = sched.count("leader election lost");
    ensure!(lost == 0, "the leader lost its lease {lost} time(s)\n{}", sched.tail());
    ensure!(sched.running(), "the leader exited\n{}", sched.tail());
    bound?;
    Ok(())
}
