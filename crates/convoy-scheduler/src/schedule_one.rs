//! The scheduling cycle of one pod, top to bottom, as upstream's
//! `schedule_one.go`:
//!
//! 1. take a fresh snapshot of the cache (only changed nodes are copied);
//! 2. run the profile's algorithm: PreFilter, Filter (a pod nominated to a
//!    node tries it first), PreScore, Score, NormalizeScore, pick the best
//!    node;
//! 3. a pod that fits nowhere runs PostFilter (preemption) and fails the
//!    cycle: its victims are preempted off the loop, it is nominated to
//!    their node and requeued (`preempt.rs`);
//! 4. assume the pod on the chosen node in the cache, so the next cycle
//!    sees it;
//! 5. Reserve, then Permit;
//! 6. hand the pod to its binding cycle (the node checked once more
//!    against the freshest cache, then PreBind, Bind, PostBind) and
//!    return at once: the loop never waits on the network. The loop starts
//!    the binding cycles of the pods it scheduled as one task every few
//!    pods and whenever it would wait for a pod ([`Scheduler::start_bindings`]):
//!    one task spawned (and one idle worker woken) per batch, not per pod.
//!
//! Any failure after step 4 undoes what was done, in reverse (unreserve,
//! forget the assumed pod) and requeues the pod.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use convoy_api::{CycleState, PodInfo, QueuedPodInfo, Status};
use convoy_framework::{Framework, ScheduleError, ScheduleResult};
use convoy_queue::Failure;
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::decision::{Decision, Outcome};
use crate::scheduler::{Binding, Scheduler};

impl Scheduler {
    /// Schedules one pod popped from the queue. Returns once the pod is
    /// assumed and its binding cycle started, or requeued.
    pub fn schedule_one(self: &Arc<Self>, qpi: QueuedPodInfo) {
        self.schedule(qpi);
        self.start_bindings();
    }

    /// [`schedule_one`](Self::schedule_one) without starting the binding
    /// cycle: a pod scheduled joins the batch the loop starts with
    /// [`start_bindings`](Self::start_bindings).
    pub(crate) fn schedule(self: &Arc<Self>, qpi: QueuedPodInfo) {
        let started = Instant::now();
        let pod = qpi.pod_info.clone();
        let Some(fwk) = self.profiles.get(pod.scheduler_name()).cloned() else {
            self.queue.done(&pod.uid);
            return;
        };
        if self.cache.is_assumed(&pod.uid) {
            // Already placed by an earlier attempt whose binding is in flight.
            self.queue.done(&pod.uid);
            return;
        }
        // A member of a gang that is not placed yet: the whole group is
        // placed in one cycle (schedule_group.rs).
        if let Some(group) = self.gang_cycle_needed(&fwk, &pod) {
            self.schedule_group(fwk, qpi, group, started);
            return;
        }

        // 1-2: snapshot and algorithm.
        let mut state = CycleState::new();
        let (result, total) = {
            let mut ls = self.loop_state.lock();
            let ls = &mut *ls;
            self.cache.update_snapshot(&mut ls.snapshot);
            let (snapshot, nodes) = (&ls.snapshot, ls.snapshot.nodes());
            let mut r = fwk.schedule_pod(
                &mut state,
                &pod,
                snapshot,
                nodes,
                &mut ls.next_start,
                &mut ls.rng,
            );
            // 3: PostFilter, on the same snapshot, for a pod no node fits.
            if let Err(ScheduleError::Fit(fit)) = &mut r
                && fit.diagnosis.post_filter_applies
            {
                fwk.post_filter_phase(&state, &pod, snapshot, &mut fit.diagnosis, &mut ls.rng);
            }
            (r, nodes.len())
        };
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                // Fits nowhere (after preempting, perhaps), or failed.
                self.fail(&fwk, qpi, e, total, started);
                return;
            }
        };
        let node = result.node.clone();
        let decision = scheduled_decision(&fwk, &qpi, result, total, started, None);

        // 4: assume.
        if let Err(e) = self.assume(&pod, &node) {
            self.fail_after_assume(&fwk, qpi, decision, Status::error(e.to_string()), false);
            return;
        }

        // 5: Reserve and Permit.
        let s = fwk.run_reserve(&mut state, &pod, &node);
        if !s.is_success() {
            self.forget(&pod);
            self.fail_after_assume(&fwk, qpi, decision, s, false);
            return;
        }
        self.permit_and_bind(fwk, qpi, state, node, decision);
    }

    /// Steps 5 (Permit) and 6 (binding task) for a pod assumed and
    /// reserved on `node` (the node of its `decision`).
    pub(crate) fn permit_and_bind(
        self: &Arc<Self>,
        fwk: Arc<Framework>,
        qpi: QueuedPodInfo,
        mut state: CycleState,
        node: Arc<str>,
        decision: Decision,
    ) {
        let pod = qpi.pod_info.clone();
        let wait = match fwk.run_permit(&mut state, &pod, &node) {
            Ok(w) => w,
            Err(s) => {
                fwk.run_unreserve(&mut state, &pod, &node);
                self.forget(&pod);
                self.fail_after_assume(&fwk, qpi, decision, s, false);
                return;
            }
        };

        // 6: binding cycle, asynchronously, in the loop's next batch.
        self.binds_in_flight.fetch_add(1, Ordering::AcqRel);
        self.bindings.lock().push(Binding { fwk, qpi, state, wait, node, decision });
    }

    /// Starts the binding cycles of the pods scheduled since the last call,
    /// as one task running them concurrently (each still binds, fails or
    /// waits at Permit on its own). Spawning a task per pod cost the loop a
    /// wake-up of an idle worker per pod (an eventfd write, about a tenth
    /// of a cycle at 5,000 nodes); a batch costs one.
    pub(crate) fn start_bindings(self: &Arc<Self>) {
        let batch = std::mem::take(&mut *self.bindings.lock());
        if batch.is_empty() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let mut running: FuturesUnordered<_> = batch
                .into_iter()
                .map(|b| async {
                    this.binding_cycle(b).await;
                    this.binds_in_flight.fetch_sub(1, Ordering::AcqRel);
                })
                .collect();
            while running.next().await.is_some() {}
        });
    }

    /// Upstream's `bindingCycle`: waits at Permit if a plugin asked to,
    /// checks the node once more, then PreBind, Bind and PostBind; a
    /// failure undoes the reservation and requeues the pod.
    async fn binding_cycle(self: &Arc<Self>, binding: Binding) {
        let Binding { fwk, qpi, state, wait, node, decision } = binding;
        let pod = qpi.pod_info.clone();
        if let Some(wait) = wait {
            let s = wait.wait().await;
            if !s.is_success() {
                self.binding_cycle_failed(&fwk, qpi, state, &node, decision, s);
                return;
            }
        }
        // Fencing: a replica that lost its lease starts no write.
        if self.is_fenced() {
            let s = Status::error("this replica lost its lease: the binding is not sent");
            self.binding_cycle_failed(&fwk, qpi, state, &node, decision, s);
            return;
        }
        // The freshest view of the node, just before the binding call:
        // another scheduler's pods delivered since the cycle chose it may
        // have taken the room (see `conflicts.rs`); the pod then goes back
        // to the queue as if Filter had rejected the node.
        let taken = match self.room_taken(&pod, &node) {
            Some(why) => Some(why),
            None => self.room_taken_fresh(&pod, &node).await,
        };
        if let Some(why) = taken {
            // No plugin named: any cluster event retries it.
            let s = Status::unschedulable(why);
            self.binding_cycle_failed(&fwk, qpi, state, &node, decision, s);
            return;
        }
        let shared = Arc::new(state);
        let s = fwk.run_bind(shared.clone(), pod.clone(), node.clone()).await;
        let state = Arc::try_unwrap(shared).unwrap_or_else(|s| (*s).clone());
        if !s.is_success() {
            self.binding_cycle_failed(&fwk, qpi, state, &node, decision, s);
            return;
        }
        self.cache.finish_binding(&pod);
        fwk.run_post_bind(&state, &pod, &node);
        let mut decision = decision;
        decision.since_first_attempt = qpi.initial_attempt_timestamp.map(|t| t.elapsed());
        self.sink.record(&decision);
        self.group_member_bound(&pod, true);
        self.queue.done(&pod.uid);
    }

    /// A member of a placed group was bound (`true`) or its binding cycle
    /// failed: the group's report goes out with its last binding, or never
    /// (the group is tried again and reported then).
    fn group_member_bound(&self, pod: &PodInfo, bound: bool) {
        let Some(key) = &pod.group else { return };
        let mut reports = self.group_reports.lock();
        let Some((_, left)) = reports.get_mut(key) else { return };
        *left = left.saturating_sub(1);
        if !bound {
            reports.remove(key);
        } else if *left == 0 {
            let (decision, _) = reports.remove(key).expect("present");
            drop(reports);
            self.sink.record_group(&decision);
        }
    }

    /// Upstream's `handleBindingCycleError`: undo the reservation and
    /// requeue the pod; what it held (its node's resources, its devices in
    /// flight) is free again, and the pending pods hear of it as of an
    /// assigned pod's deletion (the pod itself is not moved by it; the
    /// members of its pod group rejected with it are kept where they are
    /// by the gang plugin's queueing hint).
    fn binding_cycle_failed(
        &self,
        fwk: &Framework,
        qpi: QueuedPodInfo,
        mut state: CycleState,
        node: &str,
        decision: Decision,
        status: Status,
    ) {
        let pod = qpi.pod_info.clone();
        fwk.run_unreserve(&mut state, &pod, node);
        self.forget(&pod);
        self.group_member_bound(&pod, false);
        self.fail_after_assume(fwk, qpi, decision, status, true);
        self.queue.binding_released(&pod);
    }

    /// Assumes the pod on the node in the cache (and tells the gang
    /// state); a nomination of the pod ends, as upstream's.
    pub(crate) fn assume(&self, pod: &Arc<PodInfo>, node: &str) -> convoy_cache::Result<()> {
        self.cache.assume_pod(pod.clone(), node)?;
        self.gang.set_assumed(pod, true);
        self.queue.nominator().delete(pod);
        Ok(())
    }

    /// Undoes [`assume`](Self::assume) after a failed attempt.
    pub(crate) fn forget(&self, pod: &PodInfo) {
        if let Err(e) = self.cache.forget_pod(pod) {
            tracing::debug!(pod = %pod.key, error = %e, "forget after a failed attempt");
        }
        self.gang.set_assumed(pod, false);
    }

    /// No node fits, or the algorithm failed: apply what preemption
    /// decided (the pod's nomination, victims preempted off the loop; see
    /// `preempt.rs`), record why and requeue. The pod fails this cycle even
    /// when it preempted, as upstream: it binds in a later one.
    pub(crate) fn fail(
        &self,
        fwk: &Framework,
        mut qpi: QueuedPodInfo,
        err: ScheduleError,
        total: usize,
        started: Instant,
    ) {
        let pod = qpi.pod_info.clone();
        self.after_post_filter(fwk, &pod, &err);
        let evaluated = match &err {
            ScheduleError::Fit(fit) => fit.diagnosis.node_to_status.map.len(),
            _ => 0,
        };
        let (outcome, rejected, is_error) = match &err {
            ScheduleError::Fit(fit) => {
                qpi.unschedulable_plugins = fit.diagnosis.unschedulable_plugins.clone();
                qpi.pending_plugins = fit.diagnosis.pending_plugins.clone();
                (
                    Outcome::Unschedulable { message: fit.to_string() },
                    fit.diagnosis.reasons(),
                    false,
                )
            }
            ScheduleError::NoNodes => {
                (Outcome::Unschedulable { message: err.to_string() }, BTreeMap::new(), false)
            }
            ScheduleError::Internal(s) => {
                (Outcome::Error { message: s.to_string() }, BTreeMap::new(), true)
            }
        };
        self.sink.record(&Decision {
            pod: qpi.pod_info.key.clone(),
            uid: uid_of(&qpi.pod_info),
            profile: fwk.name().clone(),
            outcome,
            evaluated,
            feasible: 0,
            total,
            rejected,
            attempt: qpi.attempts,
            latency: started.elapsed(),
            since_first_attempt: None,
            group: None,
        });
        let requeued = self.queue.add_unschedulable_if_not_present(
            qpi,
            if is_error { Failure::Error } else { Failure::Unschedulable },
        );
        if requeued.is_none() {
            // Deleted meanwhile: no nomination outlives the pod.
            self.queue.nominator().delete(&pod);
        }
        self.queue.done(&pod.uid);
    }

    /// A failure after the pod was assumed (Reserve, Permit or Bind): the
    /// caller has already undone the reservation.
    fn fail_after_assume(
        &self,
        fwk: &Framework,
        mut qpi: QueuedPodInfo,
        mut decision: Decision,
        status: Status,
        binding: bool,
    ) {
        let rejected = status.is_rejected();
        if rejected && !status.plugin().is_empty() {
            qpi.unschedulable_plugins.insert(status.plugin());
        }
        let what = if binding { "binding rejected" } else { "running Reserve/Permit" };
        decision.outcome = if rejected {
            Outcome::Unschedulable { message: format!("{what}: {}", status.message()) }
        } else {
            Outcome::Error { message: format!("{what}: {status}") }
        };
        decision.profile = fwk.name().clone();
        self.sink.record(&decision);
        let uid = qpi.pod_info.uid.clone();
        self.queue.add_unschedulable_if_not_present(
            qpi,
            if rejected { Failure::Unschedulable } else { Failure::Error },
        );
        self.queue.done(&uid);
    }
}

/// The decision of a pod the algorithm placed on `result.node` (recorded
/// once its binding succeeds); `group` when placed by a group cycle.
pub(crate) fn scheduled_decision(
    fwk: &Framework,
    qpi: &QueuedPodInfo,
    result: ScheduleResult,
    total: usize,
    started: Instant,
    group: Option<convoy_api::GroupKey>,
) -> Decision {
    Decision {
        pod: qpi.pod_info.key.clone(),
        uid: uid_of(&qpi.pod_info),
        profile: fwk.name().clone(),
        outcome: Outcome::Scheduled { node: result.node, score: result.score },
        evaluated: result.evaluated,
        feasible: result.feasible,
        total,
        rejected: result.rejected,
        attempt: qpi.attempts,
        latency: started.elapsed(),
        since_first_attempt: None,
        group,
    }
}

pub(crate) fn uid_of(pod: &PodInfo) -> Option<Arc<str>> {
    (!pod.uid.is_empty()).then(|| pod.uid.clone())
}
