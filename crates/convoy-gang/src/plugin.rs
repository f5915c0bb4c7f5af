//! `GangScheduling`: the plugin half of gang scheduling (the group cycle
//! itself is in the scheduler's `schedule_group`).
//!
//! - **PreEnqueue** keeps a member out of the active queue until its
//!   PodGroup exists, its pods all name one scheduler, and at least
//!   `minMember` of them exist. The scheduler activates the members when
//!   the quorum is reached, so no per-pod event scan is needed.
//! - **PreFilter and Filter** are the starvation guard: while a group has
//!   waited past `starvationThresholdSeconds`, the nodes of its
//!   reservation plan ([`crate::plan`], made by the scheduler at the
//!   group's failed attempts) are held: pods of lower or equal priority
//!   outside it are rejected there (`UnschedulableAndUnresolvable`) and
//!   scheduled elsewhere as usual (backfill), so room accumulates on those
//!   nodes only. A pod whose `activeDeadlineSeconds` ends before the pods
//!   the plan waits for must be gone by their own declared ends may still
//!   use the held nodes (backfill on held nodes). The pods turned away are
//!   remembered and activated by the scheduler when the group is placed or
//!   the guard lets go.
//! - **Reserve** adds a pod backfilled onto a held node to the pods the
//!   group waits for (Unreserve takes it out again).
//! - **Permit** is the barrier for members that arrive over time: a member
//!   of a group with fewer than `minMember` pods placed waits (holding its
//!   node) up to `scheduleTimeoutSeconds` or `permitWaitingTimeSeconds`;
//!   the member that completes the quorum allows all waiting siblings.
//! - **Unreserve** rejects the waiting siblings of a member that failed,
//!   so a partly placed group never stays reserved.

use std::sync::Arc;
use std::time::Duration;

use std::collections::HashSet;

use convoy_api::{
    ActionType, Clock, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    NodeInfo, NodeInfoLister, ObjectLister, PermitPlugin, Plugin, PodInfo, PreEnqueuePlugin,
    PreFilterPlugin, PreFilterResult, QueueingHint, ReservePlugin, Status, WaitingPods,
};

use crate::args::GangSchedulingArgs;
use crate::state::GangState;

/// The plugin's name, as upstream's (Kubernetes 1.35+).
pub const NAME: &str = "GangScheduling";
/// scheduler-plugins' name for the same job; accepted as an alias so its
/// profiles load unchanged.
pub const COSCHEDULING: &str = "Coscheduling";

/// Gang scheduling for both PodGroup APIs.
pub struct GangScheduling {
    name: &'static str,
    state: Arc<GangState>,
    args: GangSchedulingArgs,
    waiting: Arc<dyn WaitingPods>,
    clock: Arc<dyn Clock>,
    /// Which PodGroup APIs the server serves (every one, unless given).
    objects: Option<Arc<dyn ObjectLister>>,
}

impl std::fmt::Debug for GangScheduling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GangScheduling").field("args", &self.args).finish_non_exhaustive()
    }
}

impl GangScheduling {
    /// A plugin reading `state`, registered as `name` ([`NAME`] or
    /// [`COSCHEDULING`]).
    pub fn new(
        name: &'static str,
        state: Arc<GangState>,
        args: GangSchedulingArgs,
        waiting: Arc<dyn WaitingPods>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { name, state, args, waiting, clock, objects: None }
    }

    /// Reads which PodGroup APIs the server serves from `objects`
    /// ([`ObjectLister::served_apis`]): a member of a group whose API is
    /// not served is refused by name instead of waiting for its group.
    pub fn serving(mut self, objects: Arc<dyn ObjectLister>) -> Self {
        self.objects = Some(objects);
        self
    }

    /// Why the pod's group cannot exist on this server, if it cannot.
    fn unserved(&self, pod: &PodInfo) -> Option<String> {
        let key = pod.group.as_ref()?;
        let served = self.objects.as_ref()?.served_apis();
        served.refusal(key.api.pod_field(), &[key.api.api()])
    }
}

impl GangScheduling {
    /// The pod's siblings waiting at Permit. Cheap when nothing waits (the
    /// usual case: a group placed in one cycle never waits).
    fn waiting_siblings(&self, key: &convoy_api::GroupKey, pod: &PodInfo) -> Vec<Arc<str>> {
        let waiting = self.waiting.uids();
        if waiting.is_empty() {
            return waiting;
        }
        let assumed: std::collections::HashSet<Arc<str>> =
            self.state.assumed_uids(key).into_iter().collect();
        waiting.into_iter().filter(|u| **u != *pod.uid && assumed.contains(u)).collect()
    }
}

impl Plugin for GangScheduling {
    fn name(&self) -> &'static str {
        self.name
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        // PodGroup events: a group created or changed. Member pods arriving
        // are handled by the scheduler activating the group when its quorum
        // is reached. Nodes added or relabelled and pods freeing room help a
        // group rejected by its own rules (minResources, a required domain).
        vec![
            ClusterEventWithHint::new(EventResource::PodGroup, ActionType::ALL),
            ClusterEventWithHint::new(
                EventResource::Node,
                ActionType::ADD
                    | ActionType::UPDATE_NODE_LABEL
                    | ActionType::UPDATE_NODE_ALLOCATABLE,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::AssignedPod,
                ActionType::DELETE,
                is_schedulable_after_pod_delete,
            ),
        ]
    }

    fn as_pre_enqueue(self: Arc<Self>) -> Option<Arc<dyn PreEnqueuePlugin>> {
        Some(self)
    }
    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
    fn as_reserve(self: Arc<Self>) -> Option<Arc<dyn ReservePlugin>> {
        Some(self)
    }
    fn as_permit(self: Arc<Self>) -> Option<Arc<dyn PermitPlugin>> {
        Some(self)
    }
}

impl PreEnqueuePlugin for GangScheduling {
    /// UnschedulableAndUnresolvable while the PodGroup is missing, its pods
    /// name different schedulers, or fewer than `minMember` pods exist.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let Some(key) = &pod.group else { return Status::success() };
        // Its group's API is not served: PreFilter says so, in the pod's
        // status and Events, rather than the pod waiting unseen.
        if self.unserved(pod).is_some() {
            return Status::success();
        }
        let Some(st) = self.state.status(key) else {
            return Status::unresolvable(format!("waiting for pod group {key} to be created"));
        };
        let Some(spec) = &st.spec else {
            return Status::unresolvable(format!("waiting for pod group {key} to be created"));
        };
        if st.schedulers.len() > 1 {
            let names: Vec<&str> = st.schedulers.iter().map(|s| &**s).collect();
            return Status::unresolvable(format!(
                "pod group {key} is rejected: its pods name different schedulers ({})",
                names.join(", ")
            ));
        }
        if !spec.gang || st.satisfied() || st.members >= st.min_member() {
            return Status::success();
        }
        Status::unresolvable(format!(
            "waiting for minMember: {}/{} pods of pod group {key} exist",
            st.members,
            st.min_member()
        ))
    }
}

/// The nodes held for a starving group this cycle, written by PreFilter
/// for Filter and Reserve.
#[derive(Debug, Clone)]
struct Held {
    group: convoy_api::GroupKey,
    nodes: Arc<HashSet<Arc<str>>>,
    /// Whether this pod may still use the held nodes (backfill): it
    /// declares a deadline that ends before the pods the group waits for
    /// there must be gone.
    backfills: bool,
}

/// Whether `pod` ends, by its own `activeDeadlineSeconds` counted from
/// `now` plus `start` (its time to start), no later than `ready_by` (see
/// [`crate::plan::Plan::ready_by`]; `None`: some pod waited for declares no
/// end, so nothing can be sure to be gone first).
fn ends_before(pod: &PodInfo, now: i128, start: Duration, ready_by: Option<i128>) -> bool {
    let started = now.saturating_add(start.as_nanos() as i128);
    pod.deadline_if_started_at(started).zip(ready_by).is_some_and(|(end, ready)| end <= ready)
}

impl PreFilterPlugin for GangScheduling {
    /// UnschedulableAndUnresolvable for a member of a group whose API the
    /// server does not serve. The starvation guard: for a pod outside the
    /// starving group whose priority is not higher than the group's, the
    /// group's reservation plan is read for Filter; Skip otherwise (Filter
    /// then costs nothing).
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        if let Some(refusal) = self.unserved(pod) {
            return (None, Status::unresolvable(refusal));
        }
        let Some((s, hold)) = self.state.reservation_in_force(self.clock.now()) else {
            return (None, Status::skip());
        };
        if pod.group.as_ref() == Some(&s.key) || pod.priority > s.priority {
            return (None, Status::skip());
        }
        let start = self.state.policy().backfill_start;
        let backfills = ends_before(pod, self.clock.wall(), start, hold.ready_by);
        if !backfills {
            self.state.hold(&pod.key);
        }
        state.write(Held { group: s.key, nodes: hold.nodes, backfills });
        (None, Status::success())
    }
}

impl FilterPlugin for GangScheduling {
    /// UnschedulableAndUnresolvable on a node held for the starving group
    /// (preempting there would not help: the room is the group's).
    /// A pod that ends before the group can land there (backfill) passes.
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.read::<Held>() {
            Some(held) if !held.backfills && held.nodes.contains(node.name()) => {
                Status::unresolvable(format!(
                    "node(s) were reserved for starving pod group {} (starvation guard)",
                    held.group
                ))
            }
            _ => Status::success(),
        }
    }
}

impl ReservePlugin for GangScheduling {
    /// A pod backfilled onto a held node joins the pods the group waits
    /// for.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        if let Some(held) = state.read::<Held>().filter(|h| h.nodes.contains(node)) {
            self.state.backfilled(&held.group, &pod.key);
        }
        Status::success()
    }

    /// Forgets a backfilled pod; rejects every sibling waiting at Permit:
    /// the group is not placed partly.
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        if let Some(held) = state.read::<Held>().filter(|h| h.nodes.contains(node)) {
            self.state.backfill_undone(&held.group, &pod.key);
        }
        let Some(key) = &pod.group else { return };
        for uid in self.waiting_siblings(key, pod) {
            let msg = format!("pod group {key}: member {} failed", pod.key);
            self.waiting.reject(&uid, self.name, &msg);
        }
    }
}

impl PermitPlugin for GangScheduling {
    /// Success once `minMember` members are placed (allowing the waiting
    /// siblings); Wait otherwise.
    fn permit(&self, _state: &mut CycleState, pod: &PodInfo, _node: &str) -> (Status, Duration) {
        let Some(key) = &pod.group else { return (Status::success(), Duration::ZERO) };
        let Some(st) = self.state.status(key) else {
            return (Status::success(), Duration::ZERO);
        };
        if !st.is_gang() || st.satisfied() {
            for uid in self.waiting_siblings(key, pod) {
                self.waiting.allow(&uid, self.name);
            }
            return (Status::success(), Duration::ZERO);
        }
        let timeout = st
            .spec
            .as_ref()
            .and_then(|s| s.schedule_timeout)
            .unwrap_or(Duration::from_secs(self.args.permit_waiting_time_seconds));
        let msg = format!(
            "waiting at Permit: {}/{} pods of pod group {key} placed",
            st.placed(),
            st.min_member()
        );
        (Status::with_reason(convoy_api::Code::Wait, msg), timeout)
    }
}

/// A pod that frees room may let a rejected group in, unless it is one of
/// the group's own members: when a group is rejected (a Permit timeout, a
/// failed group cycle) its members leave their nodes together, and each
/// departure is an assigned pod's deletion; requeueing the group on its own
/// departures would place it again at once, to be rejected again.
fn is_schedulable_after_pod_delete(
    pod: &PodInfo,
    old: Option<&EventObject>,
    _new: Option<&EventObject>,
) -> QueueingHint {
    match (old, &pod.group) {
        (Some(EventObject::Pod(old)), Some(group))
            if convoy_api::pod_group::group_key_of(old).as_ref() == Some(group) =>
        {
            QueueingHint::Skip
        }
        _ => QueueingHint::Queue,
    }
}
