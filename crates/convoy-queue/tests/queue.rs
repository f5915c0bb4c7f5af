//! Behaviour of the scheduling queue, driven by a fake clock and small
//! test plugins defined here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, FakeClock, Plugin,
    PodInfo, PreEnqueuePlugin, QueueSortPlugin, QueuedPodInfo, QueueingHint, Status,
};
use convoy_queue::{
    Failure, IncomingEvent, PendingCounts, ProfileQueueing, QueueConfig, QueueKind, SchedulingQueue,
};

/// Priority, then FIFO by queueing timestamp.
struct PrioritySort;
impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        "PrioritySort"
    }
}
impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (a.pod_info.priority, b.pod_info.priority);
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }
}

/// Gates pods that have `spec.schedulingGates`.
struct Gates;
impl Plugin for Gates {
    fn name(&self) -> &'static str {
        GATES
    }
}
impl PreEnqueuePlugin for Gates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if pod.is_gated() {
            Status::unschedulable("waiting for scheduling gates")
        } else {
            Status::success()
        }
    }
}

const GATES: &str = "SchedulingGates";
/// Registers Node ADD with a hint that skips nodes named "useless".
const FIT: &str = "Fit";
/// Registers UnscheduledPod label updates, without a hint.
const LABELS: &str = "Labels";
/// Returns Pending; registers PodGroup ADD.
const GANG: &str = "Gang";
/// Rejects pods and registers nothing.
const SILENT: &str = "Silent";
/// Registers AssignedPod DELETE with a hint that skips pods labelled
/// `group: mine` (a gang plugin ignoring its own group's departures).
const FREED: &str = "Freed";
const PROFILE: &str = "convoy-scheduler";

fn events() -> HashMap<&'static str, Vec<ClusterEventWithHint>> {
    let fit_hint = |_: &PodInfo, _: Option<&EventObject>, new: Option<&EventObject>| match new {
        Some(EventObject::Node(n)) if n.metadata.name.as_deref() == Some("useless") => {
            QueueingHint::Skip
        }
        _ => QueueingHint::Queue,
    };
    let freed_hint = |_: &PodInfo, old: Option<&EventObject>, _: Option<&EventObject>| match old {
        Some(EventObject::Pod(p))
            if p.metadata.labels.as_ref().and_then(|l| l.get("group")).map(String::as_str)
                == Some("mine") =>
        {
            QueueingHint::Skip
        }
        _ => QueueingHint::Queue,
    };
    HashMap::from([
        (
            FREED,
            vec![ClusterEventWithHint::with_hint(
                EventResource::AssignedPod,
                ActionType::DELETE,
                freed_hint,
            )],
        ),
        (
            GATES,
            vec![ClusterEventWithHint::new(
                EventResource::UnscheduledPod,
                ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
            )],
        ),
        (
            FIT,
            vec![ClusterEventWithHint::with_hint(EventResource::Node, ActionType::ADD, fit_hint)],
        ),
        (
            LABELS,
            vec![ClusterEventWithHint::new(
                EventResource::UnscheduledPod,
                ActionType::UPDATE_POD_LABEL,
            )],
        ),
        (GANG, vec![ClusterEventWithHint::new(EventResource::PodGroup, ActionType::ADD)]),
    ])
}

fn setup() -> (Arc<SchedulingQueue>, FakeClock) {
    setup_with(|_| {})
}

fn setup_with(f: impl FnOnce(&mut QueueConfig)) -> (Arc<SchedulingQueue>, FakeClock) {
    let clock = FakeClock::new();
    let mut config = QueueConfig::new(Arc::new(clock.clone()), Arc::new(PrioritySort));
    config.profiles.insert(
        PROFILE.to_string(),
        ProfileQueueing { pre_enqueue: vec![Arc::new(Gates)], events: events() },
    );
    f(&mut config);
    (Arc::new(SchedulingQueue::new(config)), clock)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn pod(name: &str) -> Arc<PodInfo> {
    PodBuilder::new(name).info()
}

fn key(name: &str) -> convoy_api::PodKey {
    convoy_api::PodKey::new("default", name)
}

/// Fails a popped pod: rejected by `plugins` (an Error when empty), then
/// done, as the scheduler does.
fn fail(
    q: &SchedulingQueue,
    mut qpi: QueuedPodInfo,
    plugins: &[&'static str],
) -> Option<QueueKind> {
    let uid = qpi.pod_info.uid.clone();
    qpi.unschedulable_plugins = plugins.iter().copied().collect();
    let failure = if plugins.is_empty() { Failure::Error } else { Failure::Unschedulable };
    let kind = q.add_unschedulable_if_not_present(qpi, failure);
    q.done(&uid);
    kind
}

/// Adds a pod, pops it and fails it with `plugins`; returns where it went.
fn add_and_fail(q: &SchedulingQueue, name: &str, plugins: &[&'static str]) -> Option<QueueKind> {
    q.add(pod(name));
    let qpi = q.try_pop().expect("pod pops");
    assert_eq!(qpi.pod_info.key.name.as_ref(), name);
    fail(q, qpi, plugins)
}

fn node_add(name: &str) -> (ClusterEvent, EventObject) {
    (
        ClusterEvent::new(EventResource::Node, ActionType::ADD),
        EventObject::Node(Arc::new(NodeBuilder::new(name).build())),
    )
}

fn names(q: &SchedulingQueue) -> Vec<String> {
    std::iter::from_fn(|| q.try_pop()).map(|p| p.pod_info.key.name.to_string()).collect()
}

#[test]
fn pops_by_priority_then_fifo() {
    let (q, clock) = setup();
    for (name, prio) in [("low", 0), ("high", 10), ("mid", 5), ("high2", 10), ("low2", 0)] {
        q.add(PodBuilder::new(name).priority(prio).info());
        clock.advance(ms(1));
    }
    assert_eq!(q.pending_counts(), PendingCounts { active: 5, ..Default::default() });
    assert_eq!(names(&q), ["high", "high2", "mid", "low", "low2"]);
    assert_eq!(q.in_flight(), 5);
}

#[test]
fn many_pods_pop_in_order_after_updates_and_deletes() {
    let (q, clock) = setup();
    let prio = |i: i32| (i * 7919) % 13;
    for i in 0..500 {
        q.add(PodBuilder::new(&format!("p{i}")).priority(prio(i)).info());
        clock.advance(ms(1));
    }
    for i in (0..500).step_by(3) {
        q.delete(&pod(&format!("p{i}")));
    }
    for i in (1..500).step_by(5) {
        q.update(PodBuilder::new(&format!("p{i}")).priority(prio(i) + 1).info());
    }
    let popped: Vec<QueuedPodInfo> = std::iter::from_fn(|| q.try_pop()).collect();
    // Updating a deleted pod adds it back (i = 6 mod 15: 33 pods).
    assert_eq!(popped.len(), 500 - 167 + 33);
    for w in popped.windows(2) {
        assert!(
            !PrioritySort.less(&w[1], &w[0]),
            "out of order: {} before {}",
            w[0].key(),
            w[1].key()
        );
    }
}

#[test]
fn pop_counts_attempts_and_first_attempt_time() {
    let (q, clock) = setup();
    q.add(pod("p"));
    clock.advance(ms(5));
    let first = q.try_pop().unwrap();
    assert_eq!(first.attempts, 1);
    let t0 = first.initial_attempt_timestamp.expect("set on first pop");
    assert_eq!(fail(&q, first, &[]), Some(QueueKind::Backoff));
    clock.advance(secs(1));
    let second = q.try_pop().unwrap();
    assert_eq!(second.attempts, 2);
    assert_eq!(second.initial_attempt_timestamp, Some(t0));
}

#[test]
fn backoff_doubles_per_attempt_up_to_the_max() {
    let (q, clock) = setup_with(|c| {
        c.initial_backoff = secs(1);
        c.max_backoff = secs(10);
    });
    q.add(pod("p"));
    let mut qpi = q.try_pop().unwrap();
    for (attempt, want) in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 10), (6, 10)] {
        assert_eq!(qpi.attempts, attempt);
        // An error always goes to backoffQ.
        assert_eq!(fail(&q, qpi, &[]), Some(QueueKind::Backoff), "attempt {attempt}");
        clock.advance(secs(want) - ms(1));
        assert_eq!(q.flush_backoff_completed(), 0, "attempt {attempt}: still backing off");
        assert!(q.try_pop().is_none(), "attempt {attempt}: popped before expiry");
        clock.advance(ms(1));
        if attempt % 2 == 0 {
            assert_eq!(q.flush_backoff_completed(), 1);
            assert_eq!(q.queue_of(&key("p")), Some(QueueKind::Active));
        }
        // Odd attempts: pop itself flushes backoffQ when activeQ is empty.
        qpi = q.try_pop().unwrap_or_else(|| panic!("attempt {attempt}: pops after expiry"));
    }
}

/// With activeQ empty, the pod of backoffQ whose backoff ends first is
/// popped at once (upstream's `SchedulerPopFromBackoffQ`), counted as
/// `PopFromBackoffQ`; never a pod whose last attempt was an error, never
/// before a pod of activeQ, and not at all with the feature off.
#[test]
fn pops_from_backoffq_when_activeq_is_empty() {
    let (q, _clock) = setup();
    assert_eq!(add_and_fail(&q, "hinted", &[FIT]), Some(QueueKind::Unschedulable));
    let (ev, node) = node_add("big");
    q.move_all_to_active_or_backoff(ev, None, Some(&node));
    assert_eq!(q.queue_of(&key("hinted")), Some(QueueKind::Backoff));
    q.add(pod("fresh"));
    assert_eq!(names(&q), ["fresh", "hinted"], "activeQ first, then backoffQ");
    let popped = q.incoming().into_iter().find(|c| c.event == IncomingEvent::PopFromBackoff);
    assert_eq!(
        popped.map(|c| (c.queue, c.event.label(), c.count)),
        Some((QueueKind::Active, "PopFromBackoffQ".into(), 1))
    );

    let (q, clock) = setup();
    assert_eq!(add_and_fail(&q, "error", &[]), Some(QueueKind::Backoff));
    assert!(q.try_pop().is_none(), "an error waits out its backoff");
    clock.advance(secs(1));
    assert!(q.try_pop().is_some());

    let (q, clock) = setup_with(|c| c.pop_from_backoff = false);
    add_and_fail(&q, "hinted", &[FIT]);
    let (ev, node) = node_add("big");
    q.move_all_to_active_or_backoff(ev, None, Some(&node));
    assert!(q.try_pop().is_none(), "feature off: the backoff is waited out");
    clock.advance(secs(1));
    assert!(q.try_pop().is_some());
}

/// A waiting `pop` wakes when a pod enters backoffQ.
#[tokio::test]
async fn a_waiting_pop_wakes_for_a_pod_entering_backoffq() {
    let (q, _clock) = setup();
    add_and_fail(&q, "hinted", &[FIT]);
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.pop().await.map(|p| p.pod_info.key.name.to_string()) }
    });
    tokio::task::yield_now().await;
    let (ev, node) = node_add("big");
    q.move_all_to_active_or_backoff(ev, None, Some(&node));
    let got = tokio::time::timeout(Duration::from_secs(5), waiter).await.expect("woken").unwrap();
    assert_eq!(got.as_deref(), Some("hinted"));
}

#[test]
fn zero_initial_backoff_skips_backoffq() {
    let (q, _clock) = setup_with(|c| c.initial_backoff = Duration::ZERO);
    assert_eq!(add_and_fail(&q, "p", &[]), Some(QueueKind::Active));
}

#[test]
fn cluster_events_move_only_pods_they_may_help() {
    struct Case {
        name: &'static str,
        rejected_by: &'static [&'static str],
        event: ClusterEvent,
        node: &'static str,
        wait: Duration,
        want: QueueKind,
    }
    let node_add = ClusterEvent::new(EventResource::Node, ActionType::ADD);
    let pod_delete = ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE);
    let cases = [
        Case {
            name: "unrelated event",
            rejected_by: &[FIT],
            event: pod_delete,
            node: "n",
            wait: ms(0),
            want: QueueKind::Unschedulable,
        },
        Case {
            name: "hint says skip",
            rejected_by: &[FIT],
            event: node_add,
            node: "useless",
            wait: ms(0),
            want: QueueKind::Unschedulable,
        },
        Case {
            name: "match, backing off",
            rejected_by: &[FIT],
            event: node_add,
            node: "big",
            wait: ms(500),
            want: QueueKind::Backoff,
        },
        Case {
            name: "match, backoff over",
            rejected_by: &[FIT],
            event: node_add,
            node: "big",
            wait: secs(1),
            want: QueueKind::Active,
        },
        Case {
            name: "one of two plugins matches",
            rejected_by: &[LABELS, FIT],
            event: node_add,
            node: "big",
            wait: secs(2),
            want: QueueKind::Active,
        },
        Case {
            name: "plugin registered nothing",
            rejected_by: &[SILENT],
            event: node_add,
            node: "big",
            wait: secs(2),
            want: QueueKind::Unschedulable,
        },
        Case {
            name: "wildcard moves all",
            rejected_by: &[SILENT],
            event: ClusterEvent::new(EventResource::WildCard, ActionType::ALL),
            node: "n",
            wait: secs(2),
            want: QueueKind::Active,
        },
    ];
    for c in cases {
        let (q, clock) = setup();
        assert_eq!(
            add_and_fail(&q, "p", c.rejected_by),
            Some(QueueKind::Unschedulable),
            "{}",
            c.name
        );
        clock.advance(c.wait);
        let node = EventObject::Node(Arc::new(NodeBuilder::new(c.node).build()));
        let to_active = q.move_all_to_active_or_backoff(c.event, None, Some(&node));
        assert_eq!(q.queue_of(&key("p")), Some(c.want), "{}", c.name);
        assert_eq!(to_active, usize::from(c.want == QueueKind::Active), "{}", c.name);
    }
}

#[test]
fn assigned_pod_wrappers_send_their_events() {
    let (q, _clock) = setup_with(|c| {
        let p = c.profiles.get_mut(PROFILE).unwrap();
        p.events.insert(
            "Affinity",
            vec![ClusterEventWithHint::new(EventResource::AssignedPod, ActionType::DELETE)],
        );
        p.events.insert(
            "Spread",
            vec![ClusterEventWithHint::new(EventResource::Pod, ActionType::UPDATE_POD_LABEL)],
        );
    });
    let assigned = EventObject::Pod(Arc::new(PodBuilder::new("a").node("n").build()));
    add_and_fail(&q, "aff", &["Affinity"]);
    add_and_fail(&q, "spread", &["Spread"]);
    assert_eq!(q.assigned_pod_added(&assigned), 0);
    assert_eq!(q.pending_counts().unschedulable, 2);
    q.assigned_pod_updated(&assigned, &assigned, ActionType::UPDATE_POD_LABEL);
    assert_eq!(q.queue_of(&key("spread")), Some(QueueKind::Backoff));
    assert_eq!(q.queue_of(&key("aff")), Some(QueueKind::Unschedulable));
    q.assigned_pod_deleted(&assigned);
    assert_eq!(q.queue_of(&key("aff")), Some(QueueKind::Backoff));
}

#[test]
fn pending_plugin_queue_skips_backoff() {
    let (q, _clock) = setup();
    q.add(pod("p"));
    let mut qpi = q.try_pop().unwrap();
    qpi.pending_plugins.insert(GANG);
    assert_eq!(
        q.add_unschedulable_if_not_present(qpi, Failure::Unschedulable),
        Some(QueueKind::Unschedulable)
    );
    let pg = ClusterEvent::new(EventResource::PodGroup, ActionType::ADD);
    assert_eq!(q.move_all_to_active_or_backoff(pg, None, None), 1);
    assert_eq!(q.queue_of(&key("p")), Some(QueueKind::Active));
}

#[test]
fn events_during_the_attempt_are_not_missed() {
    let pod_delete = ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE);
    let (node_ev, big) = node_add("big");
    type Case = (&'static str, Option<ClusterEvent>, &'static [&'static str], QueueKind);
    // (case, event while in flight, rejecting plugins (none: an error), expected)
    let cases: [Case; 5] = [
        ("no event", None, &[FIT], QueueKind::Unschedulable),
        ("unrelated event", Some(pod_delete), &[FIT], QueueKind::Unschedulable),
        ("matching event", Some(node_ev), &[FIT], QueueKind::Backoff),
        ("matching event, one of two rejectors", Some(node_ev), &[SILENT, FIT], QueueKind::Backoff),
        ("error", None, &[], QueueKind::Backoff),
    ];
    for (name, event, plugins, want) in cases {
        let (q, _clock) = setup();
        q.add(pod("p"));
        let qpi = q.try_pop().unwrap();
        if let Some(ev) = event {
            q.move_all_to_active_or_backoff(ev, None, Some(&big));
        }
        assert_eq!(fail(&q, qpi, plugins), Some(want), "{name}");
        assert_eq!(q.in_flight(), 0, "{name}");
    }
    // An event before the pop does not count.
    let (q, _clock) = setup();
    add_and_fail(&q, "other", &[FIT]);
    q.add(pod("p"));
    q.move_all_to_active_or_backoff(
        ClusterEvent::new(EventResource::Node, ActionType::ADD),
        None,
        Some(&big),
    );
    q.flush_backoff_completed();
    let mut popped: Vec<QueuedPodInfo> = std::iter::from_fn(|| q.try_pop()).collect();
    popped.retain(|p| p.pod_info.key.name.as_ref() == "p");
    q.move_all_to_active_or_backoff(pod_delete, None, None);
    assert_eq!(fail(&q, popped.pop().unwrap(), &[FIT]), Some(QueueKind::Unschedulable));
}

/// A failed binding cycle's release moves the pods it may help, never the
/// released pod itself, and pods in flight meanwhile run the hints on it
/// (unlike other events seen in flight, kept by type only).
#[test]
fn binding_released_runs_hints_for_pods_in_flight() {
    let mine = PodBuilder::new("sibling").label("group", "mine").info();
    let other = PodBuilder::new("stranger").info();
    // (case, released pod, expected for a pod in flight rejected by FREED)
    let cases =
        [("own group", &mine, QueueKind::Unschedulable), ("other", &other, QueueKind::Backoff)];
    for (name, released, want) in cases {
        let (q, _clock) = setup();
        q.add(pod("p"));
        let qpi = q.try_pop().unwrap();
        q.binding_released(released);
        assert_eq!(fail(&q, qpi, &[FREED]), Some(want), "{name}");
    }
    // In the pool: moved unless the hint skips, and never the released pod.
    let (q, _clock) = setup();
    add_and_fail(&q, "p", &[FREED]);
    add_and_fail(&q, "sibling", &[FREED]);
    q.binding_released(&mine);
    assert_eq!(q.queue_of(&key("p")), Some(QueueKind::Unschedulable));
    q.binding_released(&PodBuilder::new("sibling").info());
    assert_eq!(q.queue_of(&key("p")), Some(QueueKind::Backoff));
    assert_eq!(q.queue_of(&key("sibling")), Some(QueueKind::Unschedulable), "not moved by itself");
}

#[test]
fn updates_and_deletes_during_the_attempt() {
    let (q, _clock) = setup();
    // A label update while in flight: the requeued pod is the new version,
    // and LABELS' registration sends it to backoffQ.
    q.add(pod("p"));
    let qpi = q.try_pop().unwrap();
    q.update(PodBuilder::new("p").label("app", "web").info());
    assert_eq!(q.queue_of(&key("p")), None, "in flight: not queued by the update");
    assert_eq!(fail(&q, qpi, &[LABELS]), Some(QueueKind::Backoff));
    q.activate([&key("p")]);
    let again = q.try_pop().unwrap();
    assert_eq!(again.pod_info.pod.metadata.labels.as_ref().unwrap()["app"], "web");
    // A deletion while in flight: the pod is dropped.
    q.delete(&again.pod_info.clone());
    assert_eq!(fail(&q, again, &[FIT]), None);
    assert!(q.is_empty());
    // Activation while in flight: straight back to activeQ.
    q.add(pod("a"));
    let qpi = q.try_pop().unwrap();
    q.activate([&key("a")]);
    assert_eq!(fail(&q, qpi, &[FIT]), Some(QueueKind::Active));
}

#[test]
fn gated_pod_waits_for_its_gates_to_go() {
    let (q, _clock) = setup();
    q.add(PodBuilder::new("g").gate("example.com/wait").info());
    assert_eq!(q.pending_counts(), PendingCounts { gated: 1, ..Default::default() });
    assert!(q.try_pop().is_none());
    // Events and updates that keep the gate change nothing.
    let (ev, node) = node_add("big");
    q.move_all_to_active_or_backoff(ev, None, Some(&node));
    q.update(PodBuilder::new("g").gate("example.com/wait").label("x", "y").info());
    assert_eq!(q.queue_of(&key("g")), Some(QueueKind::Gated));
    // Removing the gate releases it, straight to activeQ (never attempted).
    q.update(pod("g"));
    assert_eq!(q.pending_counts(), PendingCounts { active: 1, ..Default::default() });
    let qpi = q.try_pop().unwrap();
    assert!(!qpi.gated);
    assert!(qpi.unschedulable_plugins.contains(GATES));
}

/// Gates pods labelled `group` until its flag is set; registers PodGroup
/// ADD (a PreEnqueue verdict that depends on more than the pod).
struct GroupGate(Arc<AtomicBool>);
impl Plugin for GroupGate {
    fn name(&self) -> &'static str {
        "GroupGate"
    }
}
impl PreEnqueuePlugin for GroupGate {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let grouped = pod.pod.metadata.labels.as_ref().is_some_and(|l| l.contains_key("group"));
        if grouped && !self.0.load(Ordering::SeqCst) {
            Status::pending("group incomplete")
        } else {
            Status::success()
        }
    }
}

#[test]
fn gated_pod_released_by_its_plugin_event() {
    let open = Arc::new(AtomicBool::new(false));
    let (q, _clock) = setup_with(|c| {
        let p = c.profiles.get_mut(PROFILE).unwrap();
        p.pre_enqueue.push(Arc::new(GroupGate(open.clone())));
        p.events.insert(
            "GroupGate",
            vec![ClusterEventWithHint::new(EventResource::PodGroup, ActionType::ADD)],
        );
    });
    q.add(PodBuilder::new("g").label("group", "x").info());
    assert_eq!(q.queue_of(&key("g")), Some(QueueKind::Gated));
    let group_add = ClusterEvent::new(EventResource::PodGroup, ActionType::ADD);
    // Its plugin's event re-runs PreEnqueue: still rejected, it stays.
    assert_eq!(q.move_all_to_active_or_backoff(group_add, None, None), 0);
    assert_eq!(q.queue_of(&key("g")), Some(QueueKind::Gated));
    open.store(true, Ordering::SeqCst);
    // Another plugin's event does not release it.
    let (ev, node) = node_add("big");
    q.move_all_to_active_or_backoff(ev, None, Some(&node));
    assert_eq!(q.queue_of(&key("g")), Some(QueueKind::Gated));
    // Its own does.
    assert_eq!(q.move_all_to_active_or_backoff(group_add, None, None), 1);
    let qpi = q.try_pop().unwrap();
    assert_eq!(qpi.attempts, 1);
    assert!(qpi.unschedulable_plugins.contains("GroupGate"));
}

#[test]
fn leftover_flush_retries_old_pods_but_not_gated_ones() {
    let (q, clock) = setup_with(|c| c.max_in_unschedulable = secs(300));
    add_and_fail(&q, "p", &[SILENT]);
    q.add(PodBuilder::new("g").gate("w").info());
    clock.advance(secs(240));
    assert_eq!(q.flush_unschedulable_leftover(), 0);
    assert_eq!(
        q.pending_counts(),
        PendingCounts { unschedulable: 1, gated: 1, ..Default::default() }
    );
    clock.advance(secs(61));
    assert_eq!(q.flush_unschedulable_leftover(), 1);
    assert_eq!(q.pending_counts(), PendingCounts { active: 1, gated: 1, ..Default::default() });
    assert!(q.incoming().iter().any(|c| c.queue == QueueKind::Active
        && c.event == IncomingEvent::UnschedulableTimeout
        && c.count == 1));
}

#[test]
fn delete_from_every_queue() {
    let (q, _clock) = setup();
    add_and_fail(&q, "backoff", &[]);
    add_and_fail(&q, "pool", &[FIT]);
    q.add(pod("active"));
    q.add(PodBuilder::new("gated").gate("w").info());
    q.add(pod("active2"));
    assert_eq!(
        q.pending_counts(),
        PendingCounts { active: 2, backoff: 1, unschedulable: 1, gated: 1 }
    );
    for name in ["backoff", "pool", "gated", "active"] {
        q.delete(&pod(name));
        assert_eq!(q.queue_of(&key(name)), None, "{name}");
    }
    assert_eq!(q.pending_counts(), PendingCounts { active: 1, ..Default::default() });
    assert_eq!(names(&q), ["active2"]);
    q.delete(&pod("unknown"));
}

#[test]
fn update_in_every_queue() {
    let (q, clock) = setup();
    for name in ["a", "b", "c"] {
        q.add(pod(name));
        clock.advance(ms(1));
    }
    // activeQ: re-ordered by the new priority.
    q.update(PodBuilder::new("c").priority(100).info());
    let first = q.try_pop().unwrap();
    assert_eq!(first.pod_info.key.name.as_ref(), "c");
    assert_eq!(first.pod_info.priority, 100);
    // backoffQ: updated in place, still backing off.
    let a = q.try_pop().unwrap();
    let b = q.try_pop().unwrap();
    assert_eq!(fail(&q, a, &[]), Some(QueueKind::Backoff));
    q.update(PodBuilder::new("a").label("v", "2").info());
    assert_eq!(q.queue_of(&key("a")), Some(QueueKind::Backoff));
    // Pool: an update no rejecting plugin registered changes nothing; one
    // LABELS registered moves the pod.
    assert_eq!(fail(&q, b, &[LABELS]), Some(QueueKind::Unschedulable));
    q.update(PodBuilder::new("b").priority(3).info());
    assert_eq!(q.queue_of(&key("b")), Some(QueueKind::Unschedulable));
    q.update(PodBuilder::new("b").priority(3).label("v", "2").info());
    assert_eq!(q.queue_of(&key("b")), Some(QueueKind::Backoff));
    clock.advance(secs(1));
    let popped = names(&q);
    assert_eq!(popped.len(), 2);
    // An unknown pod is added.
    q.update(pod("new"));
    assert_eq!(q.queue_of(&key("new")), Some(QueueKind::Active));
    // Adding a known pod updates it.
    q.add(PodBuilder::new("new").priority(7).info());
    assert_eq!(q.pending_counts().active, 1);
    assert_eq!(q.try_pop().unwrap().pod_info.priority, 7);
}

#[test]
fn activate_moves_pods_now() {
    let (q, _clock) = setup();
    add_and_fail(&q, "backoff", &[]);
    add_and_fail(&q, "pool", &[FIT]);
    q.add(PodBuilder::new("gated").gate("w").info());
    assert_eq!(q.activate([&key("backoff"), &key("pool"), &key("gated"), &key("none")]), 2);
    assert_eq!(q.pending_counts(), PendingCounts { active: 2, gated: 1, ..Default::default() });
    assert!(q.incoming().iter().any(|c| c.event == IncomingEvent::ForceActivate && c.count == 2));
}

#[test]
fn already_present_pod_is_not_added_twice() {
    let (q, _clock) = setup();
    q.add(pod("p"));
    let qpi = q.try_pop().unwrap();
    q.add(pod("p")); // in flight: recorded as an update
    assert_eq!(q.queue_of(&key("p")), None);
    let mut stale = qpi.clone();
    stale.pod_info = PodBuilder::new("p").uid("other").info();
    assert_eq!(fail(&q, qpi, &[FIT]), Some(QueueKind::Unschedulable));
    // A second failure report for the same key is ignored.
    assert_eq!(fail(&q, stale, &[FIT]), None);
}

#[test]
fn incoming_counters_by_queue_and_event() {
    let (q, _clock) = setup();
    add_and_fail(&q, "b", &[FIT]);
    q.add(pod("a"));
    let (ev, node) = node_add("big");
    q.move_all_to_active_or_backoff(ev, None, Some(&node));
    let mut got: Vec<(QueueKind, String, u64)> =
        q.incoming().into_iter().map(|c| (c.queue, c.event.label(), c.count)).collect();
    got.sort();
    let want = [
        (QueueKind::Active, "PodAdd".to_string(), 2),
        (QueueKind::Backoff, "NodeAdd".to_string(), 1),
        (QueueKind::Unschedulable, "ScheduleAttemptFailure".to_string(), 1),
    ];
    assert_eq!(got, want);
}

#[test]
fn pods_of_unknown_profiles_have_no_preenqueue() {
    let (q, _clock) = setup();
    q.add(PodBuilder::new("g").scheduler("other").gate("w").info());
    assert_eq!(q.queue_of(&key("g")), Some(QueueKind::Active));
}

#[tokio::test]
async fn pop_waits_for_add_and_close_ends_it() {
    let (q, _clock) = setup();
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.pop().await.map(|p| p.pod_info.key.name.to_string()) }
    });
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    q.add(pod("p"));
    assert_eq!(waiter.await.unwrap().as_deref(), Some("p"));

    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.pop().await.is_none() })
        })
        .collect();
    tokio::task::yield_now().await;
    q.close();
    for w in waiters {
        assert!(w.await.unwrap(), "pop returns None after close");
    }
    q.add(pod("late"));
    assert!(q.pop().await.is_none());
    assert!(q.try_pop().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_poppers_get_every_pod_once() {
    let (q, _clock) = setup();
    let poppers: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut n = 0;
                while q.pop().await.is_some() {
                    n += 1;
                }
                n
            })
        })
        .collect();
    for i in 0..2000 {
        q.add(pod(&format!("p{i}")));
        if i % 100 == 0 {
            tokio::task::yield_now().await;
        }
    }
    while q.pending_counts().active > 0 {
        tokio::task::yield_now().await;
    }
    q.close();
    let mut total = 0;
    for p in poppers {
        total += p.await.unwrap();
    }
    assert_eq!(total, 2000);
}
