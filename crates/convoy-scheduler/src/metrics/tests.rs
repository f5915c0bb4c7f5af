//! Unit tests of [`Metrics`](super::Metrics): what each method records and
//! how it is encoded.

use convoy_queue::IncomingEvent;

use super::*;

fn incoming(m: &Metrics, queue: QueueKind, event: IncomingEvent) -> u64 {
    let labels = IncomingLabels { queue: queue.as_str(), event: event.label() };
    m.queue_incoming.get(&labels).map_or(0, |c| c.get())
}

fn count(queue: QueueKind, event: IncomingEvent, count: u64) -> IncomingCount {
    IncomingCount { queue, event, count }
}

#[test]
fn sync_queue_adds_only_the_difference() {
    let m = Metrics::new();
    let (a, b) = (QueueKind::Active, QueueKind::Backoff);
    let add = IncomingEvent::PodAdd;
    let fail = IncomingEvent::ScheduleAttemptFailure;

    m.sync_queue(PendingCounts::default(), &[count(a, add, 3)]);
    assert_eq!(incoming(&m, a, add), 3);

    // Cumulative 3 -> 5: the series moves by 2, to 5.
    m.sync_queue(PendingCounts::default(), &[count(a, add, 5), count(b, fail, 1)]);
    assert_eq!(incoming(&m, a, add), 5);
    assert_eq!(incoming(&m, b, fail), 1);

    // Unchanged counts add nothing; a series missing from a sync keeps
    // its value.
    m.sync_queue(PendingCounts::default(), &[count(a, add, 5)]);
    m.sync_queue(PendingCounts::default(), &[]);
    assert_eq!(incoming(&m, a, add), 5);
    assert_eq!(incoming(&m, b, fail), 1);

    // Same event, other queue: its own series.
    m.sync_queue(PendingCounts::default(), &[count(b, add, 7)]);
    assert_eq!(incoming(&m, a, add), 5);
    assert_eq!(incoming(&m, b, add), 7);
}

#[test]
fn sync_queue_never_moves_a_counter_back() {
    let m = Metrics::new();
    let (q, e) = (QueueKind::Unschedulable, IncomingEvent::BackoffComplete);
    m.sync_queue(PendingCounts::default(), &[count(q, e, 10)]);
    m.sync_queue(PendingCounts::default(), &[count(q, e, 4)]);
    assert_eq!(incoming(&m, q, e), 10);
    m.sync_queue(PendingCounts::default(), &[count(q, e, 12)]);
    assert_eq!(incoming(&m, q, e), 12);
}

#[test]
fn concurrent_syncs_do_not_double_count() {
    let m = Metrics::new();
    let (q, e) = (QueueKind::Active, IncomingEvent::PodAdd);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let m = &m;
            s.spawn(move || {
                for i in 0..1000u64 {
                    m.sync_queue(PendingCounts::default(), &[count(q, e, i * 4 + t)]);
                }
            });
        }
    });
    assert_eq!(incoming(&m, q, e), 3999);
}

#[test]
fn sync_queue_sets_the_pending_gauges() {
    let m = Metrics::new();
    let pending = PendingCounts { active: 4, backoff: 3, unschedulable: 2, gated: 1 };
    m.sync_queue(pending, &[]);
    m.sync_queue(PendingCounts { active: 1, ..pending }, &[]);
    let get = |q: QueueKind| m.pending_pods.get(&QueueLabels { queue: q.as_str() }).unwrap().get();
    assert_eq!(
        [QueueKind::Active, QueueKind::Backoff, QueueKind::Unschedulable, QueueKind::Gated]
            .map(get),
        [1, 3, 2, 1]
    );
}

#[test]
fn incoming_counter_is_exported_with_total_suffix_and_upstream_event_label() {
    let m = Metrics::new();
    m.sync_queue(
        PendingCounts::default(),
        &[count(QueueKind::Active, IncomingEvent::PodUpdate, 2)],
    );
    let text = m.encode();
    assert!(
        text.contains(
            "scheduler_queue_incoming_pods_total{queue=\"active\",event=\"UnscheduledPodUpdate\"} 2\n"
        ),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn status_writes_dropped_follows_the_writers_count() {
    let m = Metrics::new();
    m.sync_status_writes_dropped(3);
    m.sync_status_writes_dropped(2);
    m.status_write_dropped();
    assert_eq!(m.status_writes_dropped.get(), 4);
    m.sync_status_writes_dropped(9);
    assert!(m.encode().contains("\nconvoy_status_writes_dropped_total 9\n"));
}

#[test]
fn attempts_label_is_capped_as_upstream() {
    assert_eq!(attempts_label(1), "1");
    assert_eq!(attempts_label(14), "14");
    assert_eq!(attempts_label(15), "15+");
    assert_eq!(attempts_label(u32::MAX), "15+");
}

#[test]
fn about_one_cycle_in_ten_is_sampled() {
    let m = Metrics::new();
    let sampled = (0..10_000).filter(|_| m.sample_plugin_metrics()).count();
    assert!((950..=1050).contains(&sampled), "{sampled}");
    // Evenly spread: every window of 100 cycles has some.
    let m = Metrics::new();
    let flags: Vec<bool> = (0..10_000).map(|_| m.sample_plugin_metrics()).collect();
    assert!(flags.chunks(100).all(|w| (5..=15).contains(&w.iter().filter(|&&b| b).count())));
}

#[test]
fn histogram_buckets_are_upstream() {
    let m = Metrics::new();
    let p: Arc<str> = Arc::from("convoy-scheduler");
    m.observe_extension_point("Filter", "Success", &p, Duration::from_micros(150));
    m.observe_plugin("NodeResourcesFit", "Filter", "Success", Duration::from_micros(3));
    m.observe_sli(2, Duration::from_millis(30));
    let text = m.encode();
    for line in [
        "scheduler_framework_extension_point_duration_seconds_bucket{le=\"0.0002\",extension_point=\"Filter\",status=\"Success\",profile=\"convoy-scheduler\"} 1\n",
        "scheduler_framework_extension_point_duration_seconds_bucket{le=\"0.0001\",extension_point=\"Filter\",status=\"Success\",profile=\"convoy-scheduler\"} 0\n",
        "scheduler_plugin_execution_duration_seconds_bucket{le=\"0.00001\",plugin=\"NodeResourcesFit\",extension_point=\"Filter\",status=\"Success\"} 1\n",
        "scheduler_plugin_execution_duration_seconds_bucket{le=\"0.000015\",plugin=\"NodeResourcesFit\",extension_point=\"Filter\",status=\"Success\"} 1\n",
        "scheduler_plugin_execution_duration_seconds_bucket{le=\"0.0000225\",plugin=\"NodeResourcesFit\",extension_point=\"Filter\",status=\"Success\"} 1\n",
        "scheduler_pod_scheduling_sli_duration_seconds_bucket{le=\"0.04\",attempts=\"2\"} 1\n",
        "scheduler_pod_scheduling_sli_duration_seconds_bucket{le=\"0.02\",attempts=\"2\"} 0\n",
        "scheduler_pod_scheduling_attempts_bucket{le=\"2.0\"} 1\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    // Bucket counts: 12 + 1, 20 + 1, 20 + 1 (`+Inf`).
    let buckets = |name: &str| text.lines().filter(|l| l.starts_with(name)).count();
    assert_eq!(buckets("scheduler_framework_extension_point_duration_seconds_bucket"), 13);
    assert_eq!(buckets("scheduler_plugin_execution_duration_seconds_bucket"), 21);
    assert_eq!(buckets("scheduler_pod_scheduling_sli_duration_seconds_bucket"), 21);
}

#[test]
fn build_info_names_version_commit_and_compiler() {
    let text = Metrics::new().encode();
    let line = format!(
        "convoy_build_info{{version=\"{VERSION}\",commit=\"{GIT_COMMIT}\",rust_version=\"{RUST_VERSION}\"}} 1\n"
    );
    assert!(text.contains(&line), "missing {line:?} in\n{text}");
    assert_eq!(VERSION, env!("CARGO_PKG_VERSION"));
    assert!(RUST_VERSION.starts_with("1."), "{RUST_VERSION}");
}

#[cfg(target_os = "linux")]
#[test]
fn process_metrics_are_read_at_scrape_time() {
    let text = Metrics::new().encode();
    for name in PROCESS_METRICS {
        let sample = text.lines().find(|l| l.starts_with(&format!("{name} ")));
        let value: f64 = sample
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} sample in\n{text}"));
        assert!(value >= 0.0, "{name} {value}");
    }
    assert!(text.contains("# TYPE process_cpu_seconds counter\n"), "{text}");
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn names_cover_every_encoded_metric() {
    let m = Metrics::new();
    let names: std::collections::HashSet<&str> = m.names().iter().map(|n| &**n).collect();
    assert_eq!(names.len(), m.names().len(), "a name declared twice: {:?}", m.names());
    // The series that exist from the start (pending pods, build info,
    // the process metrics) are encoded under the names declared.
    let text = m.encode();
    let mut seen = 0;
    for line in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let (name, kind) = line.split_once(' ').unwrap();
        let sample = if kind == "counter" { format!("{name}_total") } else { name.to_string() };
        assert!(names.contains(&*sample), "{sample} is encoded but not in names()");
        seen += 1;
    }
    assert!(seen >= 2, "{text}");
    assert!(names.contains("scheduler_schedule_attempts_total"));
    assert!(names.contains("scheduler_pending_pods"));
}

#[tokio::test(start_paused = true)]
async fn leader_status_follows_the_elector() {
    let m = Arc::new(Metrics::new());
    let status = |m: &Metrics| {
        m.leader_status.get(&LeaseLabels { name: "convoy".to_string() }).map(|g| g.get())
    };
    assert_eq!(status(&m), None, "no series before the elector starts");
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(m.clone().follow_leader("convoy".to_string(), rx));
    tokio::task::yield_now().await;
    assert_eq!(status(&m), Some(0), "a standby exports 0");
    tx.send(true).unwrap();
    tokio::task::yield_now().await;
    assert_eq!(status(&m), Some(1));
    assert!(
        m.encode().contains("\nleader_election_master_status{name=\"convoy\"} 1\n"),
        "{}",
        m.encode()
    );
    tx.send(false).unwrap();
    tokio::task::yield_now().await;
    assert_eq!(status(&m), Some(0));
    tx.send(true).unwrap();
    tokio::task::yield_now().await;
    assert_eq!(status(&m), Some(1));
    // The elector ends while leading: no longer the leader.
    drop(tx);
    task.await.unwrap();
    assert_eq!(status(&m), Some(0));
}

#[test]
fn dra_counters_follow_the_plugins_counts() {
    use convoy_api::objects::DraStats;
    let m = Metrics::new();
    let stats = DraStats::default();
    m.sync_dra(&stats);
    assert!(!m.encode().contains("convoy_dra_allocation_attempts_total{"), "no series yet");
    DraStats::inc(&stats.allocations_found);
    DraStats::inc(&stats.allocations_found);
    DraStats::inc(&stats.allocations_not_found);
    DraStats::inc(&stats.claims_allocated);
    m.sync_dra(&stats);
    m.sync_dra(&stats);
    let text = m.encode();
    assert!(
        text.contains("convoy_dra_allocation_attempts_total{result=\"allocated\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("convoy_dra_allocation_attempts_total{result=\"unschedulable\"} 1"),
        "{text}"
    );
    assert!(text.contains("convoy_dra_claim_writes_total{write=\"allocate\"} 1"), "{text}");
}
