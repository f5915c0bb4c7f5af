//! What a failed cycle's preemption (PostFilter) leads to, as upstream's
//! failure handler and preemption executor (v1.37.2,
//! `handleSchedulingFailure`, `prepareCandidateAsync`):
//!
//! - the pod's nomination: kept (PostFilter said nothing about it), set to
//!   the node whose victims go, or cleared (preemption would not help, or
//!   the profile does not preempt). The nominator is updated at once, on
//!   the loop, so the next cycle leaves the room to the preemptor;
//! - when victims were chosen: the lower-priority pods nominated to that
//!   node lose their nomination (and are retried at once), and a task off
//!   the loop clears their `status.nominatedNodeName` (unless they were
//!   nominated again meanwhile), preempts every victim (a victim waiting at
//!   Permit is rejected in memory, one already terminating is left alone,
//!   the others get the `DisruptionTarget` condition and are deleted,
//!   through the [`PreemptionActuator`](convoy_api::PreemptionActuator)),
//!   then writes the preemptor's `status.nominatedNodeName`.
//!
//! The preemptor itself fails the cycle as usual: it waits in the
//! unschedulable pool until the victims' deletions (events its rejecting
//! plugins registered) bring it back, and then tries its nominated node
//! first. If an API call failed, or a victim went in memory only (no
//! deletion event will come), the task moves it back to the active queue.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use convoy_api::{PodInfo, PodKey, PodNominator, WaitingPods, names};
use convoy_framework::{Framework, ScheduleError};

use crate::decision::PreemptionDecision;
use crate::scheduler::Scheduler;

/// One preemption to carry out off the loop.
pub(crate) struct Job {
    /// The preemptor (for a group: one of its members).
    pub(crate) preemptor: Arc<PodInfo>,
    /// The PodGroup's UID when a whole group preempts.
    pub(crate) group_uid: Option<Arc<str>>,
    /// The node the victims make room on (a group: `cluster`).
    pub(crate) node: Arc<str>,
    /// The victims.
    pub(crate) victims: Vec<Arc<PodInfo>>,
    /// Lower-priority pods that lost their nomination.
    pub(crate) lower: Vec<Arc<PodInfo>>,
    /// The nominations to write (the preemptor's, or each member's).
    pub(crate) nominations: Vec<(Arc<PodInfo>, Arc<str>)>,
}

/// Nomination writes (`status.nominatedNodeName`) in flight at most.
pub const MAX_NOMINATION_WRITES: usize = 64;

/// `status.nominatedNodeName` as the pod object carries it.
pub(crate) fn status_nomination(pod: &PodInfo) -> Option<&str> {
    crate::handlers::nomination(&pod.pod)
}

impl Scheduler {
    /// `preemptor` preempts `victims`: remembered for the chains, and the
    /// chain it extends when it replaces a pod preempted moments ago.
    pub(crate) fn chain(
        &self,
        preemptor: &PodInfo,
        victims: &[Arc<PodInfo>],
    ) -> Option<crate::decision::PreemptionChain> {
        let (depth, after) = self.running_preemptions.link(preemptor, victims);
        let after = after?;
        let ago = self.clock.now().saturating_duration_since(after.at);
        Some(crate::decision::PreemptionChain { depth, after, ago })
    }

    /// Applies what PostFilter decided for a pod whose cycle failed with
    /// `err`: records the preemption decision, updates the pod's
    /// nomination and starts the preemption. Called before the pod is
    /// requeued.
    pub(crate) fn after_post_filter(
        &self,
        fwk: &Framework,
        pod: &Arc<PodInfo>,
        err: &ScheduleError,
    ) {
        let outcome = match err {
            ScheduleError::Fit(f) => f.diagnosis.post_filter.as_ref(),
            _ => None,
        };
        if let Some(o) = outcome {
            let result = o.result.as_ref();
            let victims = result.map(|r| &r.victims[..]).unwrap_or_default();
            let chain = (!victims.is_empty()).then(|| self.chain(pod, victims)).flatten();
            self.sink.record_preemption(&PreemptionDecision {
                pod: pod.key.clone(),
                profile: fwk.name().clone(),
                priority: pod.priority,
                node: result.and_then(|r| r.nominated_node_name.clone()),
                victims: result
                    .map(|r| r.victims.iter().map(|v| (v.key.clone(), v.priority)).collect())
                    .unwrap_or_default(),
                message: o.status.message(),
                group: None,
                chain,
            });
        }
        let nominator = self.queue.nominator();
        let result = match outcome {
            // PostFilter ran and said nothing about the nomination: keep it.
            Some(o) if o.result.is_none() => return,
            Some(o) => o.result.clone().unwrap_or_default(),
            // No PostFilter, or the cycle failed otherwise: clear it.
            None => Default::default(),
        };
        let Some(node) = result.nominated_node_name else {
            let nominated = nominator.delete(pod);
            if nominated || status_nomination(pod).is_some() {
                self.write_nomination(pod.clone(), None);
            }
            return;
        };
        nominator.nominate(pod.clone(), Some(node.clone()));
        if result.victims.is_empty() {
            if status_nomination(pod) != Some(&*node) {
                self.write_nomination(pod.clone(), Some(node));
            }
            return;
        }
        // The room is the preemptor's now: lower-priority pods nominated
        // here look elsewhere, at once.
        let lower = nominator.clear_lower_priority(&node, pod.priority);
        if !lower.is_empty() {
            self.queue.activate(lower.iter().map(|p| &p.key));
        }
        let job = Job {
            preemptor: pod.clone(),
            group_uid: None,
            node: node.clone(),
            victims: result.victims,
            lower,
            nominations: vec![(pod.clone(), node)],
        };
        self.spawn_preemption(job);
    }

    /// Writes a nomination off the loop (failures are logged: the next
    /// attempt writes again).
    pub(crate) fn write_nomination(&self, pod: Arc<PodInfo>, node: Option<Arc<str>>) {
        if self.is_fenced() {
            return;
        }
        // At most MAX_NOMINATION_WRITES in flight: under churn, a write
        // that finds them all taken is dropped (the nomination itself is
        // kept in memory and counted by Filter; the pod's next attempt
        // writes it again).
        let Ok(slot) = self.nomination_writes.clone().try_acquire_owned() else {
            tracing::warn!(
                pod = %pod.key,
                "status.nominatedNodeName not written: {MAX_NOMINATION_WRITES} nomination writes \
                 already in flight"
            );
            return;
        };
        let actuator = self.actuator.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let key = pod.key.clone();
            if let Err(e) = actuator.set_nominated_node_name(pod, node).await {
                tracing::warn!(pod = %key, error = %e, "writing status.nominatedNodeName failed");
            }
        });
    }

    /// Preempts the victims off the loop; see the module docs.
    pub(crate) fn spawn_preemption(&self, job: Job) {
        if self.is_fenced() {
            tracing::warn!(preemptor = %job.preemptor.key, "this replica lost its lease: no victim is deleted");
            return;
        }
        let Job { preemptor, group_uid, node, victims, lower, nominations } = job;
        let actuator = self.actuator.clone();
        let waiting = self.waiting_pods.clone();
        let queue = self.queue.clone();
        let in_flight = self.preemptions_in_flight.clone();
        let nominator = self.queue.nominator().clone();
        in_flight.fetch_add(1, Ordering::AcqRel);
        // The preemptors wait (DefaultPreemption's PreEnqueue) until every
        // victim is seen terminating: popped earlier, a preemptor would
        // find its victims still running and preempt again, elsewhere.
        // Victims already being deleted (as the cycle saw them) get no API
        // call and are not waited for; when all are, nobody is held and
        // nobody activated (upstream's executor starts nothing either): the
        // preemptor waits in the unschedulable pool, with its backoff, for
        // an event (their deletion). Activated at once, it would find its
        // node still full, preempt the same victims again, and again, as
        // fast as the loop runs, until they are gone.
        let running = self.running_preemptions.clone();
        let mut preemptors: Vec<(Arc<str>, PodKey)> =
            nominations.iter().map(|(p, _)| (p.uid.clone(), p.key.clone())).collect();
        if !preemptors.iter().any(|(uid, _)| *uid == preemptor.uid) {
            preemptors.push((preemptor.uid.clone(), preemptor.key.clone()));
        }
        let victim_uids: Vec<Arc<str>> =
            victims.iter().filter(|v| !v.is_terminating()).map(|v| v.uid.clone()).collect();
        let ticket = (!victim_uids.is_empty()).then(|| running.start(&preemptors, &victim_uids));
        // A victim whose deletion the event handler processed between this
        // cycle's snapshot and `start` was never seen by `observed`: the
        // handler updates the cache before it calls `observed`, so the
        // cache tells.
        for v in victims.iter().filter(|v| ticket.is_some() && !v.is_terminating()) {
            let live = v.node_name().and_then(|n| self.cache.node_info(n)).is_some_and(|n| {
                n.pods.iter().any(|p| p.uid == v.uid && p.pod.metadata.deletion_timestamp.is_none())
            });
            if !live {
                running.observed(&v.uid);
            }
        }
        tokio::spawn(async move {
            // First (as upstream's executor), the status of the lower pods
            // that lost their nomination here. Not of one nominated again
            // since (it was activated at once and may have preempted
            // elsewhere already): its own write sets its status, and this
            // one, landing after it, would clear the newer nomination.
            for p in lower.into_iter().filter(|p| status_nomination(p).is_some()) {
                if nominator.nominated_node(&p).is_some() {
                    continue;
                }
                let key = p.key.clone();
                if let Err(e) = actuator.set_nominated_node_name(p, None).await {
                    tracing::warn!(pod = %key, error = %e, "clearing status.nominatedNodeName failed");
                }
            }
            let mut no_event: Vec<Arc<str>> = Vec::new();
            let mut deletions = Vec::with_capacity(victims.len());
            for v in victims {
                if v.is_terminating() {
                    tracing::debug!(victim = %v.key, "victim is already being deleted");
                    continue;
                }
                if WaitingPods::reject(&*waiting, &v.uid, names::DEFAULT_PREEMPTION, "preempted") {
                    no_event.push(v.uid.clone());
                    tracing::info!(
                        preemptor = %preemptor.key, victim = %v.key, node = %node,
                        "preempted a pod waiting at Permit (in scheduler memory)"
                    );
                    continue;
                }
                let (key, uid) = (v.key.clone(), v.uid.clone());
                let f = match &group_uid {
                    None => actuator.preempt(v, preemptor.clone(), node.clone()),
                    Some(g) => actuator.preempt_for_group(v, preemptor.clone(), g.clone()),
                };
                deletions.push(async move { (key, uid, f.await) });
            }
            for (victim, uid, r) in futures::future::join_all(deletions).await {
                if let Err(e) = r {
                    no_event.push(uid);
                    tracing::warn!(
                        preemptor = %preemptor.key, %victim, node = %node, error = %e,
                        "preempting a victim failed"
                    );
                }
            }
            for (pod, node) in &nominations {
                if status_nomination(pod) == Some(&**node) {
                    continue;
                }
                let r = actuator.set_nominated_node_name(pod.clone(), Some(node.clone())).await;
                if let Err(e) = r {
                    tracing::warn!(
                        pod = %pod.key, error = %e,
                        "writing status.nominatedNodeName failed"
                    );
                }
            }
            // Released now if every victim was already seen terminating or
            // will produce no event (failed, removed in memory); else when
            // the last one is seen (`Scheduler::victim_observed`).
            if let Some(ticket) = ticket {
                let ready = running.actuated(ticket, &no_event);
                if !ready.is_empty() {
                    queue.activate(ready.iter());
                }
            }
            in_flight.fetch_sub(1, Ordering::AcqRel);
        });
    }

    /// Preemptions that held their preemptors too long after their API
    /// calls (a victim's event was lost): their preemptors are released.
    pub(crate) fn release_expired_preemptions(&self) {
        let expired = self.running_preemptions.expire();
        if !expired.is_empty() {
            tracing::warn!(
                preemptors = ?expired.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "preemptions released {}s after their API calls without seeing every victim terminate",
                convoy_api::RunningPreemptions::MAX_HOLD.as_secs()
            );
            self.queue.activate(expired.iter());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use convoy_api::testing::PodBuilder;
    use convoy_api::{FakeClock, PodInfo, PreemptionActuator, PreemptionError};
    use convoy_embedded::{EmbeddedBinder, EmbeddedCluster, Objects};
    use futures::future::BoxFuture;

    use super::MAX_NOMINATION_WRITES;
    use crate::decision::LogSink;
    use crate::scheduler::{Scheduler, SchedulerOptions};

    /// Nomination writes that never finish (an API server that stopped
    /// answering).
    #[derive(Default)]
    struct Stuck(Arc<AtomicUsize>);

    impl PreemptionActuator for Stuck {
        fn preempt(
            &self,
            _: Arc<PodInfo>,
            _: Arc<PodInfo>,
            _: Arc<str>,
        ) -> BoxFuture<'static, Result<(), PreemptionError>> {
            Box::pin(std::future::pending())
        }
        fn set_nominated_node_name(
            &self,
            _: Arc<PodInfo>,
            _: Option<Arc<str>>,
        ) -> BoxFuture<'static, Result<(), PreemptionError>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn nomination_writes_in_flight_are_capped() {
        let (cluster, _updates) = EmbeddedCluster::new(Objects::default());
        let started = Arc::new(AtomicUsize::new(0));
        let scheduler = Scheduler::new(SchedulerOptions {
            config: crate::load_config(None).unwrap(),
            registry: crate::registry(),
            binder: Arc::new(EmbeddedBinder(cluster)),
            actuator: Arc::new(Stuck(started.clone())),
            clock: Arc::new(FakeClock::new()),
            sink: Arc::new(LogSink),
            seed: Some(1),
            framework_metrics: None,
        })
        .unwrap();
        for i in 0..(MAX_NOMINATION_WRITES + 36) {
            let pod = PodBuilder::new(&format!("p{i}")).info();
            scheduler.write_nomination(pod, Some(Arc::from("n1")));
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(started.load(Ordering::SeqCst), MAX_NOMINATION_WRITES);
    }
}
