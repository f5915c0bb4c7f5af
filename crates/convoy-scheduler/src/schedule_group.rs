//! The scheduling cycle of a whole PodGroup, top to bottom (the group
//! counterpart of `schedule_one.rs`):
//!
//! 1. `take_group`: take the group's other pending members out of the
//!    queue, so the group leaves it as one unit, and order them (priority,
//!    largest first, name);
//! 2. `place_group`: take one snapshot; check `minResources` against its
//!    free capacity;
//! 3. `place_in_domains`: place the members one after another against
//!    that snapshot, as a transaction: each placement is assumed in the
//!    cache and reserved, and the snapshot refreshed (one node copied), so
//!    the next member sees it; stop early once `minMember` can no longer be
//!    reached;
//! 4. `commit_group`: commit if at least `minMember` members are placed
//!    (counting members placed before): every placed member goes through
//!    Permit to its binding task; members that did not fit are requeued
//!    one by one;
//! 5. `reject_group`: otherwise undo every placement in reverse
//!    (unreserve, forget) and requeue all members with one shared random
//!    backoff jitter (`requeue_group`): nothing is held between cycles, so
//!    two groups can never deadlock.
//!
//! When fewer members exist than the group still needs (pods arriving over
//! time), all present members must fit; they then wait at the Permit
//! barrier (GangScheduling's Permit) until the others arrive or the
//! timeout rejects them all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use convoy_api::{Code, CycleState, GroupKey, NodeInfo, PodGroup, PodInfo, QueuedPodInfo, Status};
use convoy_framework::{Framework, ScheduleError, ScheduleResult};
use convoy_gang::GroupStatus;
use convoy_gang::group::{
    can_still_succeed, could_fit_empty_cluster, domains, has_labels, min_resources_available,
    placement_order, preferred_domains,
};
use convoy_queue::Failure;
use rand::Rng;

use crate::decision::{Decision, GroupDecision, GroupOutcome, Outcome};
use crate::schedule_one::{scheduled_decision, uid_of};
use crate::scheduler::{LoopState, Scheduler};

/// The tentative placements of one attempt.
#[derive(Default)]
struct Attempt {
    placed: Vec<Placement>,
    failed: Vec<(QueuedPodInfo, ScheduleError)>,
    not_tried: Vec<QueuedPodInfo>,
    first_failure: Option<String>,
    /// Plugins that rejected a member (Unschedulable, Pending): their
    /// events may help the group.
    plugins: BTreeSet<&'static str>,
    pending: BTreeSet<&'static str>,
    /// Whether a member was rejected by some node as Unschedulable (not
    /// unresolvable): removing pods might help it.
    preemptible: bool,
}

/// A member placed tentatively.
struct Placement {
    qpi: QueuedPodInfo,
    state: CycleState,
    result: ScheduleResult,
}

/// What every step of one group cycle reads: the group, its PodGroup and
/// how many members it still needs.
struct GroupCycle {
    fwk: Arc<Framework>,
    key: GroupKey,
    spec: Arc<PodGroup>,
    /// `minMember`.
    min: usize,
    /// Members placed by earlier cycles.
    placed_before: usize,
    /// Members still needed to reach `minMember`.
    needed: usize,
    /// Failed attempts before this one.
    failures_before: u32,
    /// Fewer members present than needed: all present must fit, then wait
    /// at the Permit barrier for the others.
    barrier: bool,
    /// How many members this cycle must place.
    target: usize,
    started: Instant,
}

impl GroupCycle {
    /// The cycle of group `key` (status `st`, PodGroup `spec`) with
    /// `present` members taken out of the queue.
    fn new(
        fwk: Arc<Framework>,
        key: GroupKey,
        st: &GroupStatus,
        spec: Arc<PodGroup>,
        present: usize,
        started: Instant,
    ) -> Self {
        let min = spec.min_member as usize;
        let placed_before = st.placed();
        let needed = min.saturating_sub(placed_before);
        let barrier = present < needed;
        let target = if barrier { present } else { needed };
        Self {
            fwk,
            key,
            spec,
            min,
            placed_before,
            needed,
            failures_before: st.failures,
            barrier,
            target,
            started,
        }
    }

    /// Whether `a` places the group: all present members behind a Permit
    /// barrier, else at least the members still needed.
    fn succeeded(&self, a: &Attempt) -> bool {
        if self.barrier {
            a.failed.is_empty() && a.not_tried.is_empty() && !a.placed.is_empty()
        } else {
            a.placed.len() >= self.target
        }
    }

    /// The group's decision for attempt `a`, as placed (step 5 turns it
    /// into a rejection).
    fn decision(&self, a: &Attempt) -> GroupDecision {
        let mut nodes: BTreeMap<Arc<str>, usize> = BTreeMap::new();
        for p in &a.placed {
            *nodes.entry(p.result.node.clone()).or_default() += 1;
        }
        GroupDecision {
            group: self.key.clone(),
            uid: (!self.spec.uid.is_empty()).then(|| self.spec.uid.clone()),
            profile: self.fwk.name().clone(),
            outcome: GroupOutcome::Placed,
            placed: a.placed.len(),
            members: a.placed.len() + a.failed.len() + a.not_tried.len(),
            placed_before: self.placed_before,
            min_member: self.min,
            nodes,
            failures_before: self.failures_before,
            barrier: self.barrier,
            latency: self.started.elapsed(),
        }
    }
}

impl Scheduler {
    /// The group whose cycle should place this pod: the pod's profile has
    /// gang scheduling enabled, and its PodGroup exists with a gang policy
    /// and fewer than `minMember` members placed. `None`: schedule the pod
    /// alone (no group, basic policy, or a late member of a placed group).
    pub(crate) fn gang_cycle_needed(&self, fwk: &Framework, pod: &PodInfo) -> Option<GroupKey> {
        let key = pod.group.as_ref()?;
        if !self.gang_args.contains_key(&**fwk.name()) {
            return None;
        }
        let st = self.gang.status(key)?;
        (st.is_gang() && !st.satisfied()).then(|| key.clone())
    }

    /// Activates the pods the starvation guard turned away, once it has
    /// let go (called after a group is placed and by the periodic tick).
    pub fn release_held_pods(&self) {
        let held = self.gang.release_held(self.clock.now());
        if !held.is_empty() {
            self.queue.activate(&held);
        }
    }

    /// Places the group of `first` (just popped) in one cycle: the steps
    /// of the module documentation, one function each.
    pub(crate) fn schedule_group(
        self: &Arc<Self>,
        fwk: Arc<Framework>,
        first: QueuedPodInfo,
        key: GroupKey,
        started: Instant,
    ) {
        // The PodGroup deleted meanwhile (its members may outlive it, so
        // its status can remain without a spec): requeue; PreEnqueue holds
        // the pod until a group exists again.
        let Some((st, spec)) = self.gang.status(&key).and_then(|st| {
            let spec = st.spec.clone()?;
            Some((st, spec))
        }) else {
            let uid = first.pod_info.uid.clone();
            self.queue.add_unschedulable_if_not_present(first, Failure::Unschedulable);
            self.queue.done(&uid);
            return;
        };

        // 1: the whole group leaves the queue.
        let members = self.take_group(&key, first);
        let cycle = GroupCycle::new(fwk, key, &st, spec, members.len(), started);

        // 2-3: one snapshot, tentative placements (in one topology domain
        // after another when the group requires one).
        let (attempt, total) = self.place_group(&cycle, members);

        let decision = cycle.decision(&attempt);
        if cycle.succeeded(&attempt) {
            // 4: commit.
            self.commit_group(&cycle, attempt, decision, total);
        } else {
            // 5: undo in reverse and requeue the whole group.
            self.reject_group(&cycle, attempt, decision, total);
        }
    }

    /// Step 1: `first` and the group's other pending members, taken out of
    /// the queue, in placement order (priority, largest first, name).
    fn take_group(&self, key: &GroupKey, first: QueuedPodInfo) -> Vec<QueuedPodInfo> {
        let others: Vec<_> = self
            .gang
            .pending_members(key)
            .into_iter()
            .filter(|k| *k != first.pod_info.key)
            .collect();
        let mut members = vec![first];
        members.extend(self.queue.take(&others));
        placement_order(&mut members);
        members
    }

    /// Steps 2-3: one snapshot, `minResources` checked against its free
    /// capacity, then the members' tentative placements. Returns them
    /// with the number of nodes in the snapshot.
    fn place_group(&self, cycle: &GroupCycle, members: Vec<QueuedPodInfo>) -> (Attempt, usize) {
        let mut ls = self.loop_state.lock();
        let ls = &mut *ls;
        self.cache.update_snapshot(&mut ls.snapshot);
        let total = ls.snapshot.nodes().len();
        let attempt = if let Err(msg) = min_resources_available(&cycle.spec, ls.snapshot.nodes()) {
            Attempt { first_failure: Some(msg), not_tried: members, ..Default::default() }
        } else {
            self.place_in_domains(cycle, members, ls)
        };
        (attempt, total)
    }

    /// Step 3: one required domain after another (the whole cluster
    /// without one); in each, the preferred levels' domains first,
    /// narrowest level first. The first attempt that fits is kept, the
    /// others undone; the plugins that rejected a member in any of them
    /// are kept with it.
    fn place_in_domains(
        &self,
        cycle: &GroupCycle,
        members: Vec<QueuedPodInfo>,
        ls: &mut LoopState,
    ) -> Attempt {
        let GroupCycle { fwk, spec, barrier, target, .. } = cycle;
        let (barrier, target) = (*barrier, *target);
        let fits = |a: &Attempt| {
            if barrier {
                a.failed.is_empty() && a.not_tried.is_empty()
            } else {
                a.placed.len() >= target
            }
        };
        let mut attempt = Attempt::default();
        let (mut plugins, mut pending) = (BTreeSet::new(), BTreeSet::new());
        let mut preemptible = false;
        let required = spec.required_topology.clone();
        let scopes: Vec<Option<String>> = match &required {
            Some(topology) => {
                domains(ls.snapshot.nodes(), topology).into_iter().map(|(v, _)| Some(v)).collect()
            }
            None => vec![None],
        };
        let mut tried_domains = Vec::new();
        let mut remaining = members;
        let mut done = false;
        for value in scopes {
            let base: Vec<(&str, &str)> = match (&required, &value) {
                (Some(t), Some(v)) => vec![(&**t, v.as_str())],
                _ => Vec::new(),
            };
            if !spec.preferred_topology.is_empty() {
                let in_base: Vec<Arc<NodeInfo>> =
                    ls.snapshot.nodes().iter().filter(|n| has_labels(n, &base)).cloned().collect();
                let preferred = preferred_domains(&in_base, &spec.preferred_topology, &remaining);
                for (key, v) in &preferred {
                    let mut scope = base.clone();
                    scope.push((&**key, v.as_str()));
                    let a = self.place(fwk, remaining, &scope, target, ls);
                    if fits(&a) {
                        attempt = a;
                        remaining = Vec::new();
                        done = true;
                        break;
                    }
                    remaining = self.undo(fwk, a);
                    self.cache.update_snapshot(&mut ls.snapshot);
                }
                if done {
                    break;
                }
            }
            let a = self.place(fwk, remaining, &base, target, ls);
            if fits(&a) || required.is_none() {
                attempt = a;
                remaining = Vec::new();
                break;
            }
            tried_domains.push(format!(
                "{}: {}/{target} fit",
                value.as_deref().unwrap_or_default(),
                a.placed.len()
            ));
            plugins.extend(a.plugins.iter().copied());
            pending.extend(a.pending.iter().copied());
            preemptible |= a.preemptible;
            remaining = self.undo(fwk, a);
            self.cache.update_snapshot(&mut ls.snapshot);
        }
        if let (Some(topology), false) = (&required, remaining.is_empty()) {
            attempt.first_failure = Some(format!(
                "no single {topology} domain fits the group (required by annotation {}){}",
                convoy_api::pod_group::REQUIRED_TOPOLOGY_ANNOTATION,
                if tried_domains.is_empty() {
                    String::from(": no node has the label")
                } else {
                    format!(" [{}]", tried_domains.join(", "))
                }
            ));
            attempt.not_tried = remaining;
        }
        attempt.plugins.extend(plugins);
        attempt.pending.extend(pending);
        attempt.preemptible |= preemptible;
        attempt
    }

    /// Step 4: the group is placed. Every placed member goes through
    /// Permit to its binding task (the group is reported once they are
    /// all bound); members beyond `minMember` that did not fit are
    /// requeued one by one.
    fn commit_group(
        self: &Arc<Self>,
        cycle: &GroupCycle,
        attempt: Attempt,
        decision: GroupDecision,
        total: usize,
    ) {
        let GroupCycle { fwk, key, barrier, started, .. } = cycle;
        let Attempt { placed, failed, not_tried, .. } = attempt;
        self.gang.record_attempt(key, true, true, self.clock.now());
        if *barrier || placed.is_empty() {
            self.sink.record_group(&decision);
        } else {
            // Reported once every member placed here is bound
            // (binding_cycle's group_member_bound).
            self.group_reports.lock().insert(key.clone(), (decision, placed.len()));
        }
        for p in placed {
            let node = p.result.node.clone();
            let decision =
                scheduled_decision(fwk, &p.qpi, p.result, total, *started, Some(key.clone()));
            self.permit_and_bind(fwk.clone(), p.qpi, p.state, node, decision);
        }
        // Members beyond minMember that did not fit: alone from now on.
        for (m, e) in failed {
            self.fail(fwk, m, e, total, *started);
        }
        for m in not_tried {
            let uid = m.pod_info.uid.clone();
            self.queue.add_unschedulable_if_not_present(m, Failure::Error);
            self.queue.done(&uid);
        }
        self.release_held_pods();
    }

    /// Step 5: the group is not placed. Every placement is undone in
    /// reverse; the group's starvation and reservation are updated, it
    /// preempts as one unit when that may help, its decision is recorded,
    /// its members waiting at Permit are rejected, and all its members are
    /// requeued ([`requeue_group`](Self::requeue_group)).
    fn reject_group(
        &self,
        cycle: &GroupCycle,
        attempt: Attempt,
        mut decision: GroupDecision,
        total: usize,
    ) {
        let GroupCycle { fwk, key, spec, min, placed_before, needed, barrier, .. } = cycle;
        let (min, placed_before, needed, barrier) = (*min, *placed_before, *needed, *barrier);
        let Attempt { placed, failed, not_tried, first_failure, preemptible, plugins, pending } =
            attempt;
        let fit = placed.len();
        let tried = decision.members;
        let mut members =
            self.undo(fwk, Attempt { placed, failed, not_tried, ..Default::default() });
        placement_order(&mut members);
        let may_starve = {
            let ls = self.loop_state.lock();
            could_fit_empty_cluster(&members, needed, ls.snapshot.nodes())
        };
        let failures = self.gang.record_attempt(key, false, may_starve, self.clock.now());
        // The nodes it will land on soonest, held once it starves.
        if may_starve && !barrier {
            self.plan_reservation(fwk, key, spec, &members, needed);
        } else {
            self.gang.set_reservation(key, None);
        }
        let why = first_failure.unwrap_or_else(|| "members are not available".to_string());
        // The group preempts as one unit (not for a Permit barrier or a
        // failure of the group rules themselves), inside one domain of its
        // required level if it has one.
        let preemption = (fwk.has_post_filter_plugins() && !barrier && preemptible)
            .then(|| self.preempt_group(fwk, key, spec, &members, needed));
        let message = if barrier {
            format!(
                "{fit}/{} present pods fit ({placed_before} placed, minMember {min}): {why}",
                tried
            )
        } else {
            format!("{}/{min} pods fit (minMember {min}): {why}", placed_before + fit)
        };
        let message = match preemption {
            Some(p) => format!("{message} pod group preemption: {p}"),
            None => message,
        };
        decision.outcome = GroupOutcome::Unschedulable { message: message.clone() };
        decision.nodes.clear();
        self.sink.record_group(&decision);
        // Members placed by earlier cycles and waiting at Permit would hold
        // their nodes (and devices) for a group that cannot complete now:
        // they are rejected too, so nothing is held between cycles (the
        // "optimistic rejection" of scheduler-plugins' Coscheduling
        // PostFilter). Their binding cycles requeue them and free what
        // they held for the pods it blocked.
        if placed_before > 0 {
            let why = format!("pod group {key}: {message}");
            for uid in self.gang.assumed_uids(key) {
                convoy_api::WaitingPods::reject(&*self.waiting_pods, &uid, convoy_gang::NAME, &why);
            }
        }
        self.requeue_group(cycle, members, plugins, pending, &message, total);
        tracing::debug!(group = %key, failures, "group attempt failed");
    }

    /// The end of step 5: every member is recorded unschedulable with the
    /// group's `message` and requeued with the plugins that rejected any
    /// member (the first member an event moves takes the others along) and
    /// one shared random backoff jitter.
    fn requeue_group(
        &self,
        cycle: &GroupCycle,
        members: Vec<QueuedPodInfo>,
        mut plugins: BTreeSet<&'static str>,
        pending: BTreeSet<&'static str>,
        message: &str,
        total: usize,
    ) {
        let GroupCycle { fwk, key, started, .. } = cycle;
        if plugins.is_empty() && pending.is_empty() {
            // Rejected by the group rules themselves (minResources, a
            // required domain, early abort): GangScheduling's events
            // (nodes, freed pods, PodGroups) may help.
            plugins.insert(convoy_gang::NAME);
        }
        let jitter_max =
            self.gang_args.get(&**fwk.name()).map(|a| a.backoff_jitter()).unwrap_or_default();
        let jitter = if jitter_max.is_zero() {
            jitter_max
        } else {
            let ms = self.loop_state.lock().rng.random_range(0..=jitter_max.as_millis() as u64);
            std::time::Duration::from_millis(ms)
        };
        for mut m in members {
            self.sink.record(&Decision {
                pod: m.pod_info.key.clone(),
                uid: uid_of(&m.pod_info),
                profile: fwk.name().clone(),
                outcome: Outcome::Unschedulable { message: format!("pod group {key}: {message}") },
                evaluated: 0,
                feasible: 0,
                total,
                rejected: BTreeMap::new(),
                attempt: m.attempts,
                latency: started.elapsed(),
                since_first_attempt: None,
                group: Some(key.clone()),
            });
            // Events that may help any member may help the group: the
            // first member to move takes the others along.
            m.unschedulable_plugins = plugins.clone();
            m.pending_plugins = pending.clone();
            m.backoff_jitter = jitter;
            let uid = m.pod_info.uid.clone();
            self.queue.add_unschedulable_if_not_present(m, Failure::Unschedulable);
            self.queue.done(&uid);
        }
    }

    /// Places `members` one after another against the loop's snapshot
    /// (restricted to the nodes that have every label `(key, value)` of
    /// `scope`), assuming and reserving each, refreshing the snapshot in
    /// between; stops trying once `target` is out of reach.
    fn place(
        &self,
        fwk: &Framework,
        members: Vec<QueuedPodInfo>,
        scope: &[(&str, &str)],
        target: usize,
        ls: &mut LoopState,
    ) -> Attempt {
        let mut a = Attempt::default();
        let n = members.len();
        for (i, m) in members.into_iter().enumerate() {
            if !can_still_succeed(a.placed.len(), n - i, target) {
                a.not_tried.push(m);
                continue;
            }
            let mut state = CycleState::new();
            // Members preempt nobody one by one: the group preempts as one
            // unit after a failed attempt (preempt_group.rs).
            state.skip_post_filter = true;
            let pod = m.pod_info.clone();
            let scoped: Vec<Arc<NodeInfo>>;
            let nodes = if scope.is_empty() {
                ls.snapshot.nodes()
            } else {
                scoped =
                    ls.snapshot.nodes().iter().filter(|n| has_labels(n, scope)).cloned().collect();
                &scoped
            };
            let r = fwk.schedule_pod(
                &mut state,
                &pod,
                &ls.snapshot,
                nodes,
                &mut ls.next_start,
                &mut ls.rng,
            );
            let result = match r {
                Ok(r) => r,
                Err(e) => {
                    a.first_failure.get_or_insert_with(|| format!("{}: {e}", pod.key));
                    if let ScheduleError::Fit(f) = &e {
                        a.plugins.extend(f.diagnosis.unschedulable_plugins.iter().copied());
                        a.pending.extend(f.diagnosis.pending_plugins.iter().copied());
                        let statuses = &f.diagnosis.node_to_status;
                        a.preemptible |= statuses
                            .map
                            .values()
                            .chain(statuses.absent.as_ref())
                            .any(|s| s.code() == Code::Unschedulable);
                    }
                    a.failed.push((m, e));
                    continue;
                }
            };
            if let Err(e) = self.assume(&pod, &result.node) {
                a.first_failure.get_or_insert_with(|| format!("{}: {e}", pod.key));
                a.failed.push((m, ScheduleError::Internal(Status::error(e.to_string()))));
                continue;
            }
            let s = fwk.run_reserve(&mut state, &pod, &result.node);
            if !s.is_success() {
                self.forget(&pod);
                a.first_failure
                    .get_or_insert_with(|| format!("{}: Reserve: {}", pod.key, s.message()));
                a.failed.push((m, ScheduleError::Internal(s)));
                continue;
            }
            self.cache.update_snapshot(&mut ls.snapshot);
            a.placed.push(Placement { qpi: m, state, result });
        }
        a
    }

    /// Undoes an attempt's placements in reverse (unreserve, forget) and
    /// returns all its members: placed, failed and not tried.
    fn undo(&self, fwk: &Framework, a: Attempt) -> Vec<QueuedPodInfo> {
        let mut members = Vec::with_capacity(a.placed.len() + a.failed.len() + a.not_tried.len());
        for mut p in a.placed.into_iter().rev() {
            fwk.run_unreserve(&mut p.state, &p.qpi.pod_info, &p.result.node);
            self.forget(&p.qpi.pod_info);
            members.push(p.qpi);
        }
        members.extend(a.failed.into_iter().map(|(m, _)| m));
        members.extend(a.not_tried);
        members
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use convoy_api::testing::{NodeBuilder, PodBuilder};
    use convoy_api::{FakeClock, GroupKey, PodGroupApi};
    use convoy_embedded::{EmbeddedCluster, Objects};

    use crate::decision::LogSink;
    use crate::scheduler::{Scheduler, SchedulerOptions};

    /// The events task deletes the PodGroup after the loop routed its
    /// member to the group cycle and before the cycle reads the group
    /// (its members outlive it, so its status stays, without a spec): the
    /// pod is requeued, nothing panics, nothing binds.
    #[tokio::test]
    async fn a_group_deleted_before_its_cycle_reads_it_requeues_the_pod() {
        let (cluster, mut updates) = EmbeddedCluster::new(Objects {
            nodes: vec![NodeBuilder::new("n1").cpu("4").build()],
            ..Default::default()
        });
        let scheduler = Scheduler::new(SchedulerOptions::embedded(
            crate::load_config(None).unwrap(),
            &cluster,
            Arc::new(FakeClock::new()),
            Arc::new(LogSink),
        ))
        .unwrap();
        let group = serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "default"}, "spec": {"minMember": 2}
        });
        cluster.apply_pod_group(&group).unwrap();
        for i in 0..2 {
            cluster
                .add_pod(PodBuilder::new(&format!("w{i}")).cpu("1").pod_group("train").build())
                .unwrap();
        }
        while let Ok(u) = updates.try_recv() {
            scheduler.handle_update(u);
        }
        let qpi = scheduler.queue().try_pop().expect("a member is queued");
        let key = GroupKey::new(PodGroupApi::XK8s, "default", "train");
        cluster.delete_pod_group(&key).unwrap();
        while let Ok(u) = updates.try_recv() {
            scheduler.handle_update(u);
        }
        let status = scheduler.gang().status(&key).expect("the members keep the group's status");
        assert!(status.spec.is_none());
        let fwk = scheduler.profiles()["convoy-scheduler"].clone();
        scheduler.schedule_group(fwk, qpi, key, std::time::Instant::now());
        assert_eq!(cluster.bound_count(), 0);
        let c = scheduler.queue().pending_counts();
        assert_eq!(
            c.active + c.backoff + c.unschedulable + c.gated,
            2,
            "both members still queued"
        );
    }
}
