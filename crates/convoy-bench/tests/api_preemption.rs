//! Upstream's preemption cases on a real API server with upstream
//! kube-scheduler and Convoy: `compare` runs the verbatim
//! `default_preemption` and `workload_preemption` fixtures' smallest
//! workloads, each on a fresh testenv control plane (the API server alone,
//! as upstream's scheduler_perf). testenv runs the Priority admission plugin, so the
//! templates' `spec.priority` goes through PriorityClasses; the victims
//! (grace period 0) are gone at their DELETE; `EvictedPods` counts them.
//!
//! PreemptionBasic/5Nodes: 5 nodes of 4 CPUs hold 4 low-priority pods of
//! 900m each (400m free); each of the 5 preemptors (3970m) needs all 4 pods
//! of a node gone, so exactly 20 victims, each marked `DisruptionTarget`
//! before its DELETE, by either scheduler: Convoy evicts no more than
//! upstream.

mod common;

use common::convoy_scheduler;

use std::path::PathBuf;
use std::time::Duration;

use convoy_bench::compare::compare;
use convoy_bench::labels::LabelFilter;
use convoy_bench::measure::evictions::Evictions;
use convoy_bench::measure::throughput::SampleInterval;
use convoy_bench::run::evictions_of;
use convoy_bench::targets::api::{ApiOptions, SchedulerKind};
use convoy_bench::targets::embedded::EmbeddedOptions;
use convoy_bench::{RunOptions, load_file};

fn fixture(topic: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upstream")
        .join(topic)
        .join("performance-config.yaml")
}

fn api() -> ApiOptions {
    let mut api = ApiOptions::new(PathBuf::new(), SchedulerKind::KubeScheduler);
    api.sample_interval = SampleInterval::Fixed(Duration::from_millis(10));
    api.timeout = Duration::from_secs(120);
    api
}

fn opts(filter: &str) -> RunOptions {
    RunOptions {
        filter: Some(filter.into()),
        labels: LabelFilter::parse(""),
        topic: "preemption".into(),
        embedded: EmbeddedOptions::default(),
    }
}

#[test]
fn both_schedulers_evict_upstreams_victims_on_testenv() {
    let config = load_file(&fixture("default_preemption")).unwrap();
    let mut api = api();
    api.convoy_binary = Some(convoy_scheduler());
    let cmp = compare(
        &config,
        &opts("^PreemptionBasic$/^5Nodes$"),
        &api,
        &[SchedulerKind::KubeScheduler, SchedulerKind::Convoy, SchedulerKind::Null],
        convoy_testenv::Options::API_ONLY,
    )
    .unwrap();
    println!("{}", cmp.table());
    for (s, report) in &cmp.runs[..2] {
        let r = &report.results[0];
        assert_eq!(r.error, None, "{}", s.name());
        assert_eq!(r.windows[0].pods, 5, "{}: every preemptor bound", s.name());
        let e = evictions_of(&r.items).unwrap();
        assert_eq!(
            e,
            Evictions { total: 20, in_windows: 20, disruption_target: 20 },
            "{}",
            s.name()
        );
        assert_eq!(r.windows[0].evictions, 20, "{}", s.name());
    }
    // The null binder places the preemptors on full nodes: no victims.
    let (_, null) = &cmp.runs[2];
    let r = &null.results[0];
    assert_eq!(r.error, None);
    assert_eq!(evictions_of(&r.items).unwrap().total, 0);
    assert!(cmp.table().contains("EVICTED kube-scheduler"), "{}", cmp.table());
}

/// A gang preempting single pods (`GenericWorkload` passed to
/// kube-scheduler; PodGroup `priority` through a PriorityClass): the gang
/// of 2 × 3970m evicts the 5 low-priority pods (40m each) of each node.
#[test]
fn kube_scheduler_gang_preemption_on_testenv() {
    let config = load_file(&fixture("workload_preemption")).unwrap();
    let cmp = compare(
        &config,
        &opts("^GangPreemptionBasic$/^2Nodes"),
        &api(),
        &[SchedulerKind::KubeScheduler],
        convoy_testenv::Options::API_ONLY,
    )
    .unwrap();
    println!("{}", cmp.table());
    let r = &cmp.runs[0].1.results[0];
    assert_eq!(r.error, None);
    assert_eq!(r.windows[0].pods, 2, "the gang bound");
    let e = evictions_of(&r.items).unwrap();
    assert_eq!(e.total, 10, "{e:?}");
}
