//! A gang that failed and may starve gets a reservation plan
//! ([`convoy_gang::plan`]): the nodes it will land on soonest. The
//! `GangScheduling` plugin holds them once the gang has waited past the
//! starvation threshold; the rest of the cluster keeps scheduling. When the
//! last pod the plan waits for leaves, the gang is tried at once.

use convoy_api::{CycleState, GroupKey, NodeInfoLister, PodGroup, QueuedPodInfo, Resource};
use convoy_framework::Framework;

use crate::preempt_group::group_priority;
use crate::scheduler::Scheduler;

impl Scheduler {
    /// Makes (or re-makes) the plan of group `key` after a failed attempt
    /// of `members` (in placement order), `needed` of which must fit; clears
    /// it when none can be made.
    pub(crate) fn plan_reservation(
        &self,
        fwk: &Framework,
        key: &GroupKey,
        spec: &PodGroup,
        members: &[QueuedPodInfo],
        needed: usize,
    ) {
        let Some(first) = members.first() else { return };
        let priority = group_priority(spec, members);
        // Every member as large as the largest: the plan may hold a little
        // more than the smaller members need, never less.
        let mut unit = Resource::default();
        for m in members {
            unit.max_with(&m.pod_info.requests.requests);
        }
        let previous = self.gang.reserved_for(key);
        let plan = {
            let mut ls = self.loop_state.lock();
            self.cache.update_snapshot(&mut ls.snapshot);
            let snapshot = &ls.snapshot;
            // The member's other constraints, checked on each candidate
            // node as it would be once its pods of the group's priority or
            // lower are gone (the resources are the plan's arithmetic).
            let mut state = CycleState::new();
            state.skip_post_filter = true;
            let (subset, status) = fwk.run_pre_filter(&mut state, &first.pod_info, snapshot);
            if !status.is_success() {
                tracing::debug!(group = %key, status = %status.message(), "no reservation plan: PreFilter rejects the group's first member");
                None
            } else {
                let allowed = subset.and_then(|r| r.node_names);
                convoy_gang::plan::plan(
                    NodeInfoLister::list(snapshot),
                    &unit,
                    needed,
                    priority,
                    key,
                    convoy_gang::plan::Levels {
                        required: spec.required_topology.as_deref(),
                        preferred: &spec.preferred_topology,
                    },
                    &previous,
                    |node| {
                        if allowed.as_ref().is_some_and(|a| !a.contains(node.name())) {
                            return false;
                        }
                        let mut cleared = node.clone();
                        for p in &node.pods {
                            if p.priority <= priority && p.group.as_ref() != Some(key) {
                                cleared.remove_pod(p);
                            }
                        }
                        fwk.run_filter(&state, &first.pod_info, &cleared).is_success()
                    },
                )
            }
        };
        let changed = plan.as_ref().is_none_or(|p| {
            p.nodes.len() != previous.len() || p.nodes.iter().any(|n| !previous.contains(n))
        });
        match &plan {
            Some(p) if changed => tracing::info!(
                group = %key,
                nodes = p.nodes.len(),
                waits = p.waits.len(),
                "reservation plan: {} node(s) held for the group once it starves, waiting for {} pod(s) to leave them{}",
                p.nodes.len(),
                p.waits.len(),
                ready_in(p.ready_by(&Default::default()), self.clock.wall())
            ),
            Some(_) => {}
            None => {
                tracing::debug!(group = %key, "no reservation plan: no set of nodes can hold the group even once its priority's pods leave")
            }
        }
        self.gang.set_reservation(key, plan);
    }
}

/// How the log tells by when the pods a plan waits for are gone by their
/// declared ends (backfill on its nodes is then possible).
fn ready_in(ready_by: Option<i128>, now: i128) -> String {
    match ready_by {
        Some(t) if t > now => {
            format!(
                " (all gone by their declared deadlines within {:.0} s)",
                (t - now) as f64 / 1e9
            )
        }
        Some(_) => String::new(),
        None => " (some declare no deadline: no backfill there)".into(),
    }
}
