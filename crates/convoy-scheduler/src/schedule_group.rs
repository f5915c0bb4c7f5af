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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use convoy_api::{CycleState, GroupKey, PodInfo, QueuedPodInfo};
use convoy_framework::{Framework, ScheduleError, ScheduleResult};
use convoy_gang::group::{can_still_succeed, min_resources_available, placement_order};
use convoy_queue::Failure;
use rand::Rng;

use crate::decision::{Decision, GroupDecision, GroupOutcome, Outcome};
use crate::scheduler::Scheduler;

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
        let Some(st) = self.gang.status(&key) else {
            // Deleted meanwhile: requeue; PreEnqueue will hold it.
            let uid = first.pod_info.uid.clone();
            self.queue.add_unschedulable_if_not_present(first, Failure::Unschedulable);
            self.queue.done(&uid);
            return;
        };
        let spec = st.spec.clone().expect("a gang group has a spec");
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

        // 2-3: one snapshot, tentative placements.
        let mut placed: Vec<Placement> = Vec::new();
        let mut failed: Vec<(QueuedPodInfo, ScheduleError)> = Vec::new();
        let mut not_tried: Vec<QueuedPodInfo> = Vec::new();
        let mut first_failure: Option<String> = None;
        let total;
        {
            let mut ls = self.loop_state.lock();
            let ls = &mut *ls;
            self.cache.update_snapshot(&mut ls.snapshot);
            total = ls.snapshot.nodes().len();
            if let Err(msg) = min_resources_available(&spec, ls.snapshot.nodes()) {
                first_failure = Some(msg);
                not_tried = members;
                members = Vec::new();
            }
            let n = members.len();
            for (i, m) in members.into_iter().enumerate() {
                if !can_still_succeed(placed.len(), n - i, target) {
                    not_tried.push(m);
                    continue;
                }
                let mut state = CycleState::new();
                let pod = m.pod_info.clone();
                let r = fwk.schedule_pod(
                    &mut state,
                    &pod,
                    ls.snapshot.nodes(),
                    &mut ls.next_start,
                    &mut ls.rng,
                );
                let result = match r {
                    Ok(r) => r,
                    Err(e) => {
                        first_failure.get_or_insert_with(|| format!("{}: {e}", pod.key));
                        failed.push((m, e));
                        continue;
                    }
                };
                if let Err(e) = self.assume(&pod, &result.node) {
                    first_failure.get_or_insert_with(|| format!("{}: {e}", pod.key));
                    failed.push((
                        m,
                        ScheduleError::Internal(convoy_api::Status::error(e.to_string())),
                    ));
                    continue;
                }
                let s = fwk.run_reserve(&mut state, &pod, &result.node);
                if !s.is_success() {
                    self.forget(&pod);
                    first_failure
                        .get_or_insert_with(|| format!("{}: Reserve: {}", pod.key, s.message()));
                    failed.push((m, ScheduleError::Internal(s)));
                    continue;
                }
                self.cache.update_snapshot(&mut ls.snapshot);
                placed.push(Placement { qpi: m, state, result });
            }
        }

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
            self.gang.record_attempt(&key, true, self.clock.now());
            self.sink.record_group(&group_decision);
            for p in placed {
                let decision = self.member_decision(&fwk, &p, total, &key, started);
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
        let mut members: Vec<QueuedPodInfo> = Vec::with_capacity(tried);
        for mut p in placed.into_iter().rev() {
            fwk.run_unreserve(&mut p.state, &p.qpi.pod_info, &p.result.node);
            self.forget(&p.qpi.pod_info);
            members.push(p.qpi);
        }
        let failures = self.gang.record_attempt(&key, false, self.clock.now());
        let why = first_failure.unwrap_or_else(|| "members are not available".to_string());
        let message = if barrier {
            format!(
                "{fit}/{} present pods fit ({placed_before} placed, minMember {min}): {why}",
                tried
            )
        } else {
            format!("{}/{min} pods fit (minMember {min}): {why}", placed_before + fit)
        };
        group_decision.outcome = GroupOutcome::Unschedulable { message: message.clone() };
        group_decision.nodes.clear();
        self.sink.record_group(&group_decision);

        let mut plugins = std::collections::BTreeSet::new();
        let mut pending = std::collections::BTreeSet::new();
        for (_, e) in &failed {
            if let ScheduleError::Fit(f) = e {
                plugins.extend(f.diagnosis.unschedulable_plugins.iter().copied());
                pending.extend(f.diagnosis.pending_plugins.iter().copied());
            }
        }
        let jitter_max =
            self.gang_args.get(&**fwk.name()).map(|a| a.backoff_jitter()).unwrap_or_default();
        let jitter = if jitter_max.is_zero() {
            jitter_max
        } else {
            let ms = self.loop_state.lock().rng.random_range(0..=jitter_max.as_millis() as u64);
            std::time::Duration::from_millis(ms)
        };
        members.extend(failed.into_iter().map(|(m, _)| m));
        members.extend(not_tried);
        for mut m in members {
            self.sink.record(&Decision {
                pod: m.pod_info.key.clone(),
                uid: (!m.pod_info.uid.is_empty()).then(|| m.pod_info.uid.clone()),
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

    fn member_decision(
        &self,
        fwk: &Framework,
        p: &Placement,
        total: usize,
        key: &GroupKey,
        started: Instant,
    ) -> Decision {
        Decision {
            pod: p.qpi.pod_info.key.clone(),
            uid: (!p.qpi.pod_info.uid.is_empty()).then(|| p.qpi.pod_info.uid.clone()),
            profile: fwk.name().clone(),
            outcome: Outcome::Scheduled { node: p.result.node.clone(), score: p.result.score },
            evaluated: p.result.evaluated,
            feasible: p.result.feasible,
            total,
            rejected: p.result.rejected.clone(),
            attempt: p.qpi.attempts,
            latency: started.elapsed(),
            since_first_attempt: None,
            group: Some(key.clone()),
        }
    }
}
