//! Unit tests of the gang state and the plugin's verdicts.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use convoy_api::PodInfo;
use convoy_api::testing::PodBuilder;
use convoy_api::{
    Clock, Code, CycleState, FakeClock, FilterPlugin, PermitPlugin, PodGroup, PodKey,
    PreEnqueuePlugin, PreFilterPlugin, ReservePlugin, WaitingPods,
};
use serde_json::json;

use crate::{GangScheduling, GangSchedulingArgs, GangState, NAME, StarvationPolicy};

/// Records allow/reject calls; `1` holds the UIDs said to be waiting.
#[derive(Default)]
struct Waiting(Mutex<Vec<String>>, Mutex<Vec<Arc<str>>>);

impl WaitingPods for Waiting {
    fn allow(&self, uid: &str, _plugin: &'static str) -> bool {
        self.0.lock().unwrap().push(format!("allow {uid}"));
        true
    }
    fn reject(&self, uid: &str, _plugin: &'static str, message: &str) -> bool {
        self.0.lock().unwrap().push(format!("reject {uid}: {message}"));
        true
    }
    fn uids(&self) -> Vec<Arc<str>> {
        self.1.lock().unwrap().clone()
    }
}

fn group(min: u32) -> Arc<PodGroup> {
    Arc::new(
        PodGroup::from_json(&json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"minMember": min, "scheduleTimeoutSeconds": 7}
        }))
        .unwrap(),
    )
}

fn plugin(state: &Arc<GangState>, clock: &FakeClock, waiting: &Arc<Waiting>) -> GangScheduling {
    GangScheduling::new(
        NAME,
        state.clone(),
        GangSchedulingArgs::default(),
        waiting.clone(),
        Arc::new(clock.clone()),
    )
}

#[test]
fn pre_enqueue_waits_for_group_and_quorum() {
    let state = GangState::new();
    let clock = FakeClock::new();
    let waiting = Arc::new(Waiting::default());
    let p = plugin(&state, &clock, &waiting);
    let m =
        |i: usize| PodBuilder::new(&format!("m{i}")).uid(&format!("u{i}")).pod_group("g").info();

    let s = p.pre_enqueue(&m(0));
    assert_eq!(
        (s.code(), s.message()),
        (
            Code::UnschedulableAndUnresolvable,
            "waiting for pod group default/g to be created".into()
        )
    );
    assert!(state.pod_upsert(&m(0)).is_empty());
    assert!(state.apply_group(group(3)).is_empty(), "no quorum yet");
    assert_eq!(
        p.pre_enqueue(&m(0)).message(),
        "waiting for minMember: 1/3 pods of pod group default/g exist"
    );
    assert!(state.pod_upsert(&m(1)).is_empty());
    let quorum = state.pod_upsert(&m(2));
    assert_eq!(quorum.iter().map(|k| k.name.to_string()).collect::<Vec<_>>(), ["m0", "m1", "m2"]);
    assert!(p.pre_enqueue(&m(0)).is_success());
    // A pod without a group is never held.
    assert!(p.pre_enqueue(&PodBuilder::new("solo").info()).is_success());
}

#[test]
fn permit_waits_then_the_last_member_allows_the_others() {
    let state = GangState::new();
    let clock = FakeClock::new();
    let waiting = Arc::new(Waiting::default());
    let p = plugin(&state, &clock, &waiting);
    state.apply_group(group(2));
    let a = PodBuilder::new("a").uid("ua").pod_group("g").info();
    let b = PodBuilder::new("b").uid("ub").pod_group("g").info();
    state.pod_upsert(&a);
    state.pod_upsert(&b);
    let mut cs = CycleState::new();
    state.set_assumed(&a, true);
    let (s, timeout) = p.permit(&mut cs, &a, "n");
    assert_eq!(s.code(), Code::Wait);
    assert_eq!(timeout, Duration::from_secs(7), "the PodGroup's scheduleTimeoutSeconds");
    assert_eq!(s.message(), "waiting at Permit: 1/2 pods of pod group default/g placed");
    waiting.1.lock().unwrap().push(Arc::from("ua"));
    state.set_assumed(&b, true);
    let (s, _) = p.permit(&mut cs, &b, "n");
    assert!(s.is_success());
    assert_eq!(*waiting.0.lock().unwrap(), ["allow ua"]);
}

#[test]
fn unreserve_rejects_waiting_siblings() {
    let state = GangState::new();
    let clock = FakeClock::new();
    let waiting = Arc::new(Waiting::default());
    let p = plugin(&state, &clock, &waiting);
    state.apply_group(group(3));
    let pods: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| PodBuilder::new(n).uid(&format!("u{n}")).pod_group("g").info())
        .collect();
    for pod in &pods {
        state.pod_upsert(pod);
        state.set_assumed(pod, true);
    }
    *waiting.1.lock().unwrap() = vec![Arc::from("ua"), Arc::from("ub"), Arc::from("other")];
    p.unreserve(&mut CycleState::new(), &pods[2], "n");
    let calls = waiting.0.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert!(
        calls.iter().all(|c| c.starts_with("reject u") && c.ends_with("member default/c failed")),
        "{calls:?}"
    );
}

#[test]
fn starvation_guard_holds_lower_priority_pods_only() {
    let state = GangState::new();
    state.set_policy(StarvationPolicy {
        threshold: Duration::from_secs(10),
        max_hold: Duration::from_secs(60),
        ..Default::default()
    });
    let clock = FakeClock::new();
    let waiting = Arc::new(Waiting::default());
    let p = plugin(&state, &clock, &waiting);
    state.apply_group(group(2));
    let member = PodBuilder::new("m").pod_group("g").priority(5).info();
    state.pod_upsert(&member);
    let key = member.group.clone().unwrap();
    state.record_attempt(&key, false, true, clock.now());
    let low = PodBuilder::new("low").priority(5).info();
    let high = PodBuilder::new("high").priority(6).info();
    let nodes = convoy_api::NodeList::default();
    let run = |pod: &Arc<PodInfo>, node: &str| {
        let mut cs = CycleState::new();
        let pre = p.pre_filter(&mut cs, pod, &nodes).1;
        if pre.is_skip() {
            return pre;
        }
        let info = convoy_api::testing::NodeBuilder::new(node).info();
        p.filter(&cs, pod, &info)
    };
    // A plan holding n1, before the threshold: nothing is held.
    let plan = crate::plan::Plan { nodes: vec![Arc::from("n1")], waits: vec![], ends: vec![] };
    state.set_reservation(&key, Some(plan));
    assert!(run(&low, "n1").is_skip(), "held before the threshold");
    // After it, lower or equal priority pods are kept off n1 only.
    clock.advance(Duration::from_secs(11));
    let s = run(&low, "n1");
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "node(s) were reserved for starving pod group default/g (starvation guard)"
    );
    assert!(run(&low, "n2").is_success(), "backfill on the other nodes");
    assert!(run(&high, "n1").is_skip(), "a higher priority pod is not held");
    assert!(run(&member, "n1").is_skip(), "the group's own members are not held");
    // Placed: the plan goes; starving again, no plan: nothing is held.
    state.record_attempt(&key, true, true, clock.now());
    assert!(run(&low, "n1").is_skip());
    state.record_attempt(&key, false, true, clock.now());
    clock.advance(Duration::from_secs(11));
    assert!(run(&low, "n1").is_skip(), "held without a plan");
}

/// Backfill on a held node: a pod whose `activeDeadlineSeconds`, plus the
/// start allowance, ends before the pods the plan waits for must be gone
/// may use it, and the group then waits for it too; a pod that may end
/// later, or declares no deadline, may not; nor may any pod when a pod
/// waited for declares no end.
#[test]
fn a_pod_that_ends_before_the_plan_is_ready_backfills_a_held_node() {
    let state = GangState::new();
    state.set_policy(StarvationPolicy {
        threshold: Duration::from_secs(10),
        max_hold: Duration::from_secs(60),
        backfill_start: Duration::from_secs(2),
    });
    let clock = FakeClock::new();
    let waiting = Arc::new(Waiting::default());
    let p = plugin(&state, &clock, &waiting);
    state.apply_group(group(2));
    let member = PodBuilder::new("m").pod_group("g").info();
    state.pod_upsert(&member);
    let key = member.group.clone().unwrap();
    state.record_attempt(&key, false, true, clock.now());
    let waited = PodBuilder::new("w").info().key.clone();
    let second = 1_000_000_000;
    let t0 = clock.wall();
    // The plan: n1, waiting for w and whichever pods given, with their ends.
    let plan = |more: &[(&PodKey, Option<i128>)], w_end: Option<i128>| {
        let mut waits = vec![waited.clone()];
        let mut ends = vec![w_end];
        for (k, e) in more {
            waits.push((*k).clone());
            ends.push(*e);
        }
        crate::plan::Plan { nodes: vec![Arc::from("n1")], waits, ends }
    };
    // w is gone 20 s from now; the hold starts at 11 s.
    state.set_reservation(&key, Some(plan(&[], Some(t0 + 20 * second))));
    clock.advance(Duration::from_secs(11));
    let nodes = convoy_api::NodeList::default();
    let n1 = convoy_api::testing::NodeBuilder::new("n1").info();
    let place = |pod: &Arc<PodInfo>| {
        let mut cs = CycleState::new();
        assert!(p.pre_filter(&mut cs, pod, &nodes).1.is_success());
        let s = p.filter(&cs, pod, &n1);
        if s.is_success() {
            assert!(p.reserve(&mut cs, pod, "n1").is_success());
        }
        (s, cs)
    };
    let held_off = |pod: PodBuilder| {
        let (s, _) = place(&pod.info());
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{}", s.message());
    };
    // 6 s + 2 s to start <= 9 s left: it backfills, and the group waits
    // for it too.
    let short = PodBuilder::new("short").active_deadline(6).info();
    assert!(place(&short).0.is_success());
    // 8 s + 2 s > 9 s, or no deadline at all: held off.
    held_off(PodBuilder::new("long").active_deadline(8));
    held_off(PodBuilder::new("open"));
    // The plan re-made on the same nodes, short having started late (it
    // may now end after w): backfill is still measured against w alone.
    state.set_reservation(
        &key,
        Some(plan(&[(&short.key, Some(t0 + 40 * second))], Some(t0 + 20 * second))),
    );
    held_off(PodBuilder::new("late").active_deadline(27));
    let brief = PodBuilder::new("brief").active_deadline(1).info();
    let (s, mut cs) = place(&brief);
    assert!(s.is_success());
    // A placement undone (Unreserve) is forgotten; the others are waited for.
    p.unreserve(&mut cs, &brief, "n1");
    assert_eq!(state.waited_pod_left(&waited), Vec::new(), "short still runs there");
    assert_eq!(state.waited_pod_left(&short.key), vec![key.clone()]);
    // A pod waited for declares no end: nothing is sure to leave first.
    state.set_reservation(&key, Some(plan(&[], None)));
    held_off(PodBuilder::new("tiny").active_deadline(1));
}

/// A group whose pending pods were all deleted (its PodGroup left behind)
/// holds nobody back.
#[test]
fn a_group_without_pending_pods_does_not_starve() {
    let state = GangState::new();
    state.set_policy(StarvationPolicy {
        threshold: Duration::from_secs(10),
        max_hold: Duration::from_secs(60),
        ..Default::default()
    });
    let clock = FakeClock::new();
    state.apply_group(group(2));
    let member = PodBuilder::new("m").pod_group("g").priority(5).info();
    state.pod_upsert(&member);
    let key = member.group.clone().unwrap();
    state.record_attempt(&key, false, true, clock.now());
    clock.advance(Duration::from_secs(11));
    assert!(state.starving(clock.now()).is_some());
    state.pod_removed(&member);
    assert!(state.starving(clock.now()).is_none());
}

/// The status's counts are kept as members come, move and go; after every
/// step they equal a recount of what was done.
#[test]
fn status_counts_follow_every_change() {
    let state = GangState::new();
    state.apply_group(group(2));
    let key = group(2).key.clone();
    // (name, scheduler, priority, bound?)
    let pod = |i: usize, scheduler: &str, priority: i32, bound: bool| {
        let mut b = PodBuilder::new(&format!("m{i}"))
            .uid(&format!("u{i}"))
            .pod_group("g")
            .scheduler(scheduler)
            .priority(priority);
        if bound {
            b = b.node("n1");
        }
        b.info()
    };
    // Expected per member: (scheduler, priority, place 0/1/2).
    let mut want: std::collections::BTreeMap<usize, (&str, i32, usize)> = Default::default();
    let check = |want: &std::collections::BTreeMap<usize, (&str, i32, usize)>| {
        let s = state.status(&key).unwrap();
        let count = |p| want.values().filter(|m| m.2 == p).count();
        assert_eq!((s.pending, s.assumed, s.bound), (count(0), count(1), count(2)), "{want:?}");
        assert_eq!(s.members, want.len());
        let mut names: Vec<&str> = want.values().map(|m| m.0).collect();
        names.sort();
        names.dedup();
        assert_eq!(s.schedulers.iter().map(|n| &**n).collect::<Vec<_>>(), names);
        assert_eq!(s.priority, want.values().map(|m| m.1).max().unwrap_or(0));
    };
    for i in 0..6 {
        let sched = if i == 4 { "other" } else { "convoy" };
        state.pod_upsert(&pod(i, sched, i as i32, false));
        want.insert(i, (sched, i as i32, 0));
        check(&want);
    }
    assert!(state.mixed_schedulers_to_report(&key).is_some());
    state.set_assumed(&pod(1, "convoy", 1, false), true);
    want.get_mut(&1).unwrap().2 = 1;
    check(&want);
    state.set_assumed(&pod(1, "convoy", 1, false), true); // again: no change
    check(&want);
    state.pod_upsert(&pod(1, "convoy", 1, true)); // bound
    want.get_mut(&1).unwrap().2 = 2;
    check(&want);
    state.set_assumed(&pod(2, "convoy", 2, false), true);
    state.set_assumed(&pod(2, "convoy", 2, false), false); // forgotten
    check(&want);
    state.pod_removed(&pod(4, "other", 4, false)); // the other scheduler's pod
    want.remove(&4);
    check(&want);
    assert!(state.mixed_schedulers_to_report(&key).is_none());
    state.pod_removed(&pod(5, "convoy", 5, false)); // the highest priority
    want.remove(&5);
    check(&want);
    state.pod_upsert(&pod(3, "convoy", 9, false)); // priority changed
    want.insert(3, ("convoy", 9, 0));
    check(&want);
}

#[test]
fn a_group_whose_api_is_not_served_is_refused_by_name() {
    use convoy_api::apis::POD_GROUPS_X_K8S;
    use convoy_api::{NodeList, ServedApis, Serving};
    use convoy_objects::ClusterObjects;
    let state = GangState::new();
    let clock = FakeClock::new();
    let waiting = Arc::new(Waiting::default());
    let objects = Arc::new(ClusterObjects::new());
    let p = plugin(&state, &clock, &waiting).serving(objects.clone());
    let m = PodBuilder::new("m0").uid("u0").pod_group("g").info();
    assert!(!p.pre_enqueue(&m).is_success(), "waits for its group while the API is served");
    let mut served = ServedApis::all();
    served.set(POD_GROUPS_X_K8S, Serving::NotServed);
    objects.set_served_apis(Arc::new(served));
    // Through PreEnqueue, refused at PreFilter (so the pod's status and
    // Events say why); a pod outside any group is not concerned.
    assert!(p.pre_enqueue(&m).is_success());
    let nodes = NodeList::of(Vec::new());
    let (_, s) = p.pre_filter(&mut CycleState::new(), &m, &nodes);
    assert_eq!(
        (s.code(), s.message()),
        (
            Code::UnschedulableAndUnresolvable,
            "pod uses metadata.labels[scheduling.x-k8s.io/pod-group], which needs \
             podgroups.scheduling.x-k8s.io (v1alpha1); this API server does not serve it"
                .into()
        )
    );
    let (_, s) = p.pre_filter(&mut CycleState::new(), &PodBuilder::new("x").info(), &nodes);
    assert!(s.is_skip(), "nothing starves: Skip");
}

/// Two gangs waiting at once: the second's failed attempts make its own
/// plan, which must not replace the starving group's (it did when one slot
/// held the plan of whichever group failed last: the starving group was then
/// never held for, and in a stream of gangs none was placed before arrivals
/// stopped).
#[test]
fn another_group_s_plan_does_not_replace_the_starving_group_s() {
    let state = GangState::new();
    state.set_policy(StarvationPolicy {
        threshold: Duration::from_secs(10),
        max_hold: Duration::from_secs(60),
        ..Default::default()
    });
    let clock = FakeClock::new();
    let named = |name: &str| {
        Arc::new(
            PodGroup::from_json(&json!({
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"minMember": 2}
            }))
            .unwrap(),
        )
    };
    state.apply_group(named("a"));
    state.apply_group(named("b"));
    let a = PodBuilder::new("a-0").pod_group("a").info();
    let b = PodBuilder::new("b-0").pod_group("b").info();
    state.pod_upsert(&a);
    state.pod_upsert(&b);
    let (ka, kb) = (a.group.clone().unwrap(), b.group.clone().unwrap());
    let plan = |node: &str, waits: &[&str]| crate::plan::Plan {
        nodes: vec![Arc::from(node)],
        waits: waits.iter().map(|w| PodBuilder::new(w).info().key.clone()).collect(),
        ends: waits.iter().map(|_| None).collect(),
    };
    // a fails first, then b; each makes its plan.
    state.record_attempt(&ka, false, true, clock.now());
    state.set_reservation(&ka, Some(plan("n1", &["x"])));
    clock.advance(Duration::from_secs(1));
    state.record_attempt(&kb, false, true, clock.now());
    state.set_reservation(&kb, Some(plan("n2", &["x", "y"])));
    clock.advance(Duration::from_secs(10));
    let (starving, hold) =
        state.reservation_in_force(clock.now()).expect("a starves with its plan");
    assert_eq!(starving.key, ka);
    assert_eq!(hold.nodes.iter().map(|n| &**n).collect::<Vec<_>>(), ["n1"]);
    assert_eq!(*state.reserved_for(&kb), [Arc::from("n2")].into_iter().collect());
    // x was the last pod a's plan waited for; b still waits for y.
    assert_eq!(state.waited_pod_left(&PodBuilder::new("x").info().key), vec![ka.clone()]);
    assert_eq!(state.waited_pod_left(&PodBuilder::new("y").info().key), vec![kb.clone()]);
    // a placed: its plan goes, b's stays and is in force once b starves.
    state.record_attempt(&ka, true, true, clock.now());
    assert!(state.reserved_for(&ka).is_empty());
    let (starving, _) = state.reservation_in_force(clock.now()).expect("b starves next");
    assert_eq!(starving.key, kb);
}
