//! Values at the edge of what the configuration types hold never crash the
//! scheduler: a configuration built in code (a binary of your own), which
//! the loader's bounds never saw.

use std::sync::Arc;
use std::time::Duration;

use convoy_api::FakeClock;
use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::{EmbeddedCluster, Objects};
use convoy_scheduler::decision::LogSink;
use convoy_scheduler::{Scheduler, SchedulerOptions};

/// Backoffs of `u64::MAX` seconds (`Instant + Duration` would overflow): a
/// pod that does not fit goes to backoff, and the scheduler goes on.
#[tokio::test]
async fn huge_backoffs_do_not_overflow_the_clock() {
    let mut config = convoy_scheduler::load_config(None).unwrap();
    config.pod_initial_backoff_seconds = u64::MAX;
    config.pod_max_backoff_seconds = u64::MAX;
    let (cluster, mut updates) = EmbeddedCluster::new(Objects {
        nodes: vec![NodeBuilder::new("n1").cpu("1").build()],
        pods: vec![
            PodBuilder::new("big").cpu("2").build(),
            PodBuilder::new("small").cpu("1").build(),
        ],
        ..Default::default()
    });
    let clock = FakeClock::new();
    let scheduler = Scheduler::new(SchedulerOptions::embedded(
        config,
        &cluster,
        Arc::new(clock.clone()),
        Arc::new(LogSink),
    ))
    .unwrap();
    while let Ok(u) = updates.try_recv() {
        scheduler.handle_update(u);
    }
    for _ in 0..2 {
        if let Some(qpi) = scheduler.queue().try_pop() {
            scheduler.schedule_one(qpi);
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    scheduler.queue().flush_backoff_completed();
    let bound = cluster.pod("default", "small").unwrap().spec.as_ref().unwrap().node_name.clone();
    assert_eq!(bound.as_deref(), Some("n1"));
    assert!(cluster.pod("default", "big").unwrap().spec.as_ref().unwrap().node_name.is_none());
}

/// A replica that lost its lease (fenced) sends no binding and deletes no
/// victim, even for pods its loop had already scheduled: with room on n2
/// the pod would bind; without it, it would preempt `low`.
#[tokio::test]
async fn a_fenced_replica_writes_nothing() {
    for room in [true, false] {
        let mut nodes = vec![NodeBuilder::new("n1").cpu("2").build()];
        if room {
            nodes.push(NodeBuilder::new("n2").cpu("2").build());
        }
        let (cluster, mut updates) = EmbeddedCluster::new(Objects {
            nodes,
            pods: vec![
                PodBuilder::new("low").node("n1").cpu("2").priority(0).build(),
                PodBuilder::new("p").cpu("1").priority(10).build(),
            ],
            ..Default::default()
        });
        let scheduler = Scheduler::new(SchedulerOptions::embedded(
            convoy_scheduler::load_config(None).unwrap(),
            &cluster,
            Arc::new(FakeClock::new()),
            Arc::new(LogSink),
        ))
        .unwrap();
        while let Ok(u) = updates.try_recv() {
            scheduler.handle_update(u);
        }
        let qpi = scheduler.queue().try_pop().expect("p is queued");
        scheduler.fence();
        scheduler.schedule_one(qpi);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(cluster.bind_count(), 0, "no binding sent (room: {room})");
        assert!(cluster.pod("default", "low").is_some(), "no victim deleted");
        assert!(cluster.evictions().is_empty());
    }
}
