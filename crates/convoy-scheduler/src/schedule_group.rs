//! The scheduling cycle of a whole PodGroup, top to bottom (the group
//! counterpart of `schedule_one.rs`):
//!
//! 1. take the group's other pending members out of the queue, so the
//!    group leaves it as one unit, and order them (priority, largest
//!    first, name);
//! 2. take one snapshot; check `minResources` against its free capacity;
//! 3. place the members one after another against that snapshot, as a
//!    transaction: each placement is assumed in the cache and reserved, and
//!    the snapshot refreshed (one node copied), so the next member sees it;
//!    stop early once `minMember` can no longer be reached;
//! 4. commit if at least `minMember` members are placed (counting members
//!    placed before): every placed member goes through Permit to its
//!    binding task; members that did not fit are requeued one by one;
//! 5. otherwise undo every placement in reverse (unreserve, forget) and
//!    requeue all members with one shared random backoff jitter: nothing
//!    is held between cycles, so two groups can never deadlock.
//!
//! When fewer members exist than the group still needs (pods arriving over
//! time), all present members must fit; they then wait at the Permit
//! barrier (GangScheduling's Permit) until the others arrive or the
//! timeout rejects them all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use convoy_api::{Code, CycleState, GroupKey, NodeInfo, PodInfo, QueuedPodInfo, Status};
use convoy_framework::{Framework, ScheduleError, ScheduleResult};
use convoy_gang::group::{
    can_still_succeed, could_fit_empty_cluster, domains, min_resources_available, placement_order,
    preferred_domains,
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

    /// Places the group of `first` (just popped) in one cycle.
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
        let min = spec.min_member as usize;
        let placed_before = st.placed();
        let needed = min.saturating_sub(placed_before);

        // 1: the whole group leaves the queue.
        let others: Vec<_> = self
            .gang
            .pending_members(&key)
            .into_iter()
            .filter(|k| *k != first.pod_info.key)
            .collect();
        let mut members = vec![first];
        members.extend(self.queue.take(&others));
        placement_order(&mut members);
        let barrier = members.len() < needed;
        let target = if barrier { members.len() } else { needed };

        // 2-3: one snapshot, tentative placements (in one topology domain
        // after another when the group requires one).
        let mut attempt = Attempt::default();
        let (mut plugins, mut pending) = (BTreeSet::new(), BTreeSet::new());
        let total;
        {
            let mut ls = self.loop_state.lock();
            let ls = &mut *ls;
            self.cache.update_snapshot(&mut ls.snapshot);
            total = ls.snapshot.nodes().len();
            if let Err(msg) = min_resources_available(&spec, ls.snapshot.nodes()) {
                attempt.first_failure = Some(msg);
                attempt.not_tried = members;
            } else {
                // One required domain after another (the whole cluster
                // without one); in each, the preferred levels' domains
                // first, narrowest level first.
                let fits = |a: &Attempt| {
                    if barrier {
                        a.failed.is_empty() && a.not_tried.is_empty()
                    } else {
                        a.placed.len() >= target
                    }
                };
                let required = spec.required_topology.clone();
                let scopes: Vec<Option<String>> = match &required {
                    Some(topology) => domains(ls.snapshot.nodes(), topology)
                        .into_iter()
                        .map(|(v, _)| Some(v))
                        .collect(),
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
                        let in_base: Vec<Arc<NodeInfo>> = ls
                            .snapshot
                            .nodes()
                            .iter()
                            .filter(|n| base.iter().all(|(k, v)| n.label(k) == Some(*v)))
                            .cloned()
                            .collect();
                        let preferred =
                            preferred_domains(&in_base, &spec.preferred_topology, &remaining);
                        for (key, v) in &preferred {
                            let mut scope = base.clone();
                            scope.push((&**key, v.as_str()));
                            let a = self.place(&fwk, remaining, &scope, target, ls);
                            if fits(&a) {
                                attempt = a;
                                remaining = Vec::new();
                                done = true;
                                break;
                            }
                            remaining = self.undo(&fwk, a);
                            self.cache.update_snapshot(&mut ls.snapshot);
                        }
                        if done {
                            break;
                        }
                    }
                    let a = self.place(&fwk, remaining, &base, target, ls);
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
                    remaining = self.undo(&fwk, a);
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
            }
        }
        plugins.extend(attempt.plugins.iter().copied());
        pending.extend(attempt.pending.iter().copied());
        let Attempt { placed, failed, not_tried, first_failure, preemptible, .. } = attempt;

        let success = if barrier {
            failed.is_empty() && not_tried.is_empty() && !placed.is_empty()
        } else {
            placed.len() >= target
        };
        let mut nodes: BTreeMap<Arc<str>, usize> = BTreeMap::new();
        for p in &placed {
            *nodes.entry(p.result.node.clone()).or_default() += 1;
        }
        let tried = placed.len() + failed.len() + not_tried.len();
        let mut group_decision = GroupDecision {
            group: key.clone(),
            uid: (!spec.uid.is_empty()).then(|| spec.uid.clone()),
            profile: fwk.name().clone(),
            outcome: GroupOutcome::Placed,
            placed: placed.len(),
            members: tried,
            placed_before,
            min_member: min,
            nodes,
            failures_before: st.failures,
            barrier,
            latency: started.elapsed(),
        };

        if success {
            // 4: commit.
            self.gang.record_attempt(&key, true, true, self.clock.now());
            if barrier || placed.is_empty() {
                self.sink.record_group(&group_decision);
            } else {
                // Reported once every member placed here is bound
                // (binding_cycle's group_member_bound).
                self.group_reports.lock().insert(key.clone(), (group_decision, placed.len()));
            }
            for p in placed {
                let decision =
                    scheduled_decision(&fwk, &p.qpi, p.result, total, started, Some(key.clone()));
                self.permit_and_bind(fwk.clone(), p.qpi, p.state, decision);
            }
            // Members beyond minMember that did not fit: alone from now on.
            for (m, e) in failed {
                self.fail(&fwk, m, e, total, started);
            }
            for m in not_tried {
                let uid = m.pod_info.uid.clone();
                self.queue.add_unschedulable_if_not_present(m, Failure::Error);
                self.queue.done(&uid);
            }
            self.release_held_pods();
            return;
        }

        // 5: undo in reverse and requeue the whole group.
        let fit = placed.len();
        let mut members =
            self.undo(&fwk, Attempt { placed, failed, not_tried, ..Default::default() });
        placement_order(&mut members);
        let may_starve = {
            let ls = self.loop_state.lock();
            could_fit_empty_cluster(&members, needed, ls.snapshot.nodes())
        };
        let failures = self.gang.record_attempt(&key, false, may_starve, self.clock.now());
        // The nodes it will land on soonest, held once it starves.
        if may_starve && !barrier {
            self.plan_reservation(&fwk, &key, &spec, &members, needed);
        } else {
            self.gang.set_reservation(&key, None);
        }
        let why = first_failure.unwrap_or_else(|| "members are not available".to_string());
        // The group preempts as one unit (not for a Permit barrier, a
        // required topology, or a failure of the group rules themselves).
        let preemption = (fwk.has_post_filter_plugins()
            && !barrier
            && spec.required_topology.is_none()
            && preemptible)
            .then(|| self.preempt_group(&fwk, &key, &spec, &members, needed));
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
        group_decision.outcome = GroupOutcome::Unschedulable { message: message.clone() };
        group_decision.nodes.clear();
        self.sink.record_group(&group_decision);
        // Members placed by earlier cycles and waiting at Permit would hold
        // their nodes (and devices) for a group that cannot complete now:
        // they are rejected too, so nothing is held between cycles (the
        // "optimistic rejection" of scheduler-plugins' Coscheduling
        // PostFilter). Their binding cycles requeue them and free what
        // they held for the pods it blocked.
        if placed_before > 0 {
            let why = format!("pod group {key}: {message}");
            for uid in self.gang.assumed_uids(&key) {
                convoy_api::WaitingPods::reject(&*self.waiting_pods, &uid, convoy_gang::NAME, &why);
            }
        }

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
        tracing::debug!(group = %key, failures, "group attempt failed");
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
                scoped = ls
                    .snapshot
                    .nodes()
                    .iter()
                    .filter(|n| scope.iter().all(|(k, v)| n.label(k) == Some(*v)))
                    .cloned()
                    .collect();
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
