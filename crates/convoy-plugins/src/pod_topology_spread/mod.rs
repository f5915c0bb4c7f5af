//! PodTopologySpread: spreads pods over topology domains (zones, nodes, ...)
//! as their `spec.topologySpreadConstraints` ask; upstream
//! `pkg/scheduler/framework/plugins/podtopologyspread` and
//! `plugins/helper/spread.go` of kube-scheduler **v1.37.2**, with 1.37's
//! default feature gates (NodeInclusionPolicyInPodTopologySpread GA,
//! MatchLabelKeysInPodTopologySpread beta on, TaintTolerationComparisonOperators
//! and InPlacePodVerticalScalingSchedulerPreemption alpha off).
//!
//! * `DoNotSchedule` constraints filter: PreFilter counts the matching pods
//!   per domain over every node of the snapshot that has all the topology
//!   keys and passes the node inclusion policies (from the memo, see below); Filter rejects a node whose
//!   domain would exceed `maxSkew` over the global minimum (0 while fewer than
//!   `minDomains` domains exist) — `node(s) didn't match pod topology spread
//!   constraints` (Unschedulable), or `... (missing required label)`
//!   (UnschedulableAndUnresolvable) for a node without a key.
//! * `ScheduleAnyway` constraints score: `Σ count·ln(size+2) + maxSkew−1`
//!   per node (fewer is better), normalized as upstream (integer division).
//! * Pods without constraints get the default ones: with `defaultingType:
//!   System` hostname maxSkew 3 and zone maxSkew 5 (ScheduleAnyway), with
//!   `List` the args' `defaultConstraints`; their selector is deduced from
//!   the pod's Services and controller (upstream `DefaultSelector`); none
//!   deduced, no constraint.
//!
//! A pod without constraints (and without defaults) costs a Skip.
//!
//! # Counting across cycles
//!
//! Upstream counts the matching pods of every node of the cluster in
//! PreFilter, and again in PreScore, on every cycle: at 5,000 nodes that
//! pass cost more than the rest of the cycle together. Between two cycles
//! of a scheduling run, though, usually only the node the last pod went to
//! has changed, and consecutive pods usually come from one template. So the
//! plugin keeps, between cycles, the per-node counts of a few constraint
//! sets (module `memo`, eight, least recently used evicted), and sums per
//! domain:
//!
//! * A memo's key is everything a node's count depends on besides the node:
//!   the constraints' keys, selectors (with `matchLabelKeys` and default
//!   selectors merged in) and inclusion policies, the pod's namespace, its
//!   required node affinity and tolerations when a policy honors them, and
//!   the extension point (PreFilter needs every key on a node; PreScore
//!   only with the pod's own or listed constraints, and leaves hostname to
//!   Score). `maxSkew`, `minDomains` and the pod's labels are not in it.
//! * Per node position the memo keeps the generation it counted. Every
//!   change to a node takes a new process-wide generation, so equal
//!   generations mean equal content: a cycle compares the snapshot's
//!   generation array ([`NodeInfoLister::generations`]) with the memo's, in
//!   chunks, and recounts only the positions that differ (subtracting their
//!   old contribution, adding the new one); nodes added, removed or
//!   reordered are positions that differ.
//! * Per constraint and domain it keeps the matching pods and the nodes
//!   that count: a domain exists (an entry of upstream's map, for
//!   `minDomains`, and a candidate for the minimum) while one node counts
//!   for it, exactly as upstream creates the entry for an eligible node
//!   with no matching pod. Domain names are interned in an append-only
//!   table, rebuilt with the memo when dead domains outnumber live ones.
//! * The cycle's state shares the sums (`Arc`); the next sync copies them
//!   if a state still holds them (binding in flight). Only hostname
//!   constraints have many domains (one per node, 12 bytes each).
//! * PreFilter's minimum is a scan of the domains' sums; upstream's critical
//!   paths are only built by the first what-if (AddPod/RemovePod), from the
//!   domains in the order of their names. Upstream iterates a Go map there,
//!   in no fixed order; the minimum, which Filter reads, does not depend on
//!   it, and neither does any sequence of what-ifs on one node (preemption's
//!   and nominated pods').
//! * PreScore finds each feasible node's position by its address (an index
//!   the memo keeps, checked against the snapshot's list) and reads its
//!   slots: whether it has every key, its domain per constraint, its own
//!   matching pods for hostname constraints; from them it counts the
//!   feasible domains (the weights) and scores every feasible node. Score
//!   returns that score for a node with the same address and generation,
//!   and reads any other node as upstream does. A feasible node the
//!   snapshot does not have is read from its labels and pods.
//!
//! Exactness is checked by a randomized test against upstream's algorithm
//! counted from scratch (`tests/equivalence.rs`) and by the parity test
//! against kube-scheduler.

mod common;
mod filtering;
mod hints;
mod memo;
mod scoring;

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::TopologySpreadConstraint;

use convoy_api::{
    ActionType, ClusterEventWithHint, EventResource, FilterPlugin, Handle, NodeInfoLister,
    ObjectLister, Plugin, PodInfo, PreFilterPlugin, PreScorePlugin, ScorePlugin, names,
};
use convoy_config::{DefaultingType, PluginArgs, PodTopologySpreadArgs};

pub use common::{
    Constraint, DO_NOT_SCHEDULE, LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE, SCHEDULE_ANYWAY,
};

use common::{default_selector, filter_constraints};
use memo::{Counts, Memos, Request, View};

/// Filter reason when the skew would exceed `maxSkew` (Unschedulable).
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// Filter reason when the node lacks a topology key (UnschedulableAndUnresolvable).
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// The PodTopologySpread plugin.
#[derive(Clone)]
pub struct PodTopologySpread {
    inner: Arc<Inner>,
}

/// What the extension points and the hints share.
struct Inner {
    /// Constraints for pods without their own (their selectors are deduced).
    default_constraints: Vec<TopologySpreadConstraint>,
    /// `defaultingType: System`: nodes missing a key are still scored.
    system_defaulted: bool,
    /// Services and controllers, for the default constraints' selector.
    objects: Arc<dyn ObjectLister>,
    /// Per-node counts kept between cycles (see [`memo`]).
    memos: Mutex<Memos>,
}

/// Kubernetes' built-in default constraints (`defaultingType: System`).
fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    let c = |key: &str, max_skew| TopologySpreadConstraint {
        topology_key: key.to_string(),
        when_unsatisfiable: SCHEDULE_ANYWAY.to_string(),
        max_skew,
        ..Default::default()
    };
    vec![c(LABEL_HOSTNAME, 3), c(LABEL_TOPOLOGY_ZONE, 5)]
}

impl PodTopologySpread {
    /// Builds the plugin from `PodTopologySpreadArgs` (None: the defaults,
    /// `System`); the Handle's cluster objects give the default selector.
    pub fn new(args: Option<&PluginArgs>, handle: &Handle) -> Result<Self, String> {
        let default_args = PodTopologySpreadArgs::default();
        let args = match args {
            None => &default_args,
            Some(PluginArgs::PodTopologySpread(a)) => a,
            Some(other) => {
                return Err(format!(
                    "want args to be of type PodTopologySpreadArgs, got {other:?}"
                ));
            }
        };
        let system_defaulted = args.defaulting_type == DefaultingType::System;
        let default_constraints = if system_defaulted {
            system_default_constraints()
        } else {
            let mut out = Vec::with_capacity(args.default_constraints.len());
            for (i, c) in args.default_constraints.iter().enumerate() {
                let label_selector = match &c.label_selector {
                    None | Some(serde_json::Value::Null) => None,
                    Some(v) => Some(
                        serde_json::from_value(v.clone())
                            .map_err(|e| format!("defaultConstraints[{i}].labelSelector: {e}"))?,
                    ),
                };
                out.push(TopologySpreadConstraint {
                    max_skew: c.max_skew,
                    topology_key: c.topology_key.clone(),
                    when_unsatisfiable: c.when_unsatisfiable.clone(),
                    label_selector,
                    min_domains: c.min_domains,
                    node_affinity_policy: c.node_affinity_policy.clone(),
                    node_taints_policy: c.node_taints_policy.clone(),
                    match_label_keys: (!c.match_label_keys.is_empty())
                        .then(|| c.match_label_keys.clone()),
                });
            }
            out
        };
        Ok(Self {
            inner: Arc::new(Inner {
                default_constraints,
                system_defaulted,
                objects: handle.objects.clone(),
                memos: Mutex::default(),
            }),
        })
    }
}

impl Inner {
    /// Upstream `getConstraints` / `initPreScoreState`'s choice: the pod's
    /// own constraints with this `whenUnsatisfiable`, or, for a pod with
    /// none, the default ones. Errors say which (`obtaining pod's hard
    /// topology spread constraints: ...`).
    fn constraints(&self, pod: &PodInfo, action: &str) -> Result<Vec<Constraint>, String> {
        let kind = if action == DO_NOT_SCHEDULE { "hard" } else { "soft" };
        let own = pod.spec().topology_spread_constraints.as_deref().unwrap_or(&[]);
        if !own.is_empty() {
            return filter_constraints(own, pod.labels(), action)
                .map_err(|e| format!("obtaining pod's {kind} topology spread constraints: {e}"));
        }
        self.default_constraints_for(pod, action)
            .map_err(|e| format!("setting default {kind} topology spread constraints: {e}"))
    }

    /// Upstream `buildDefaultConstraints`: the default constraints with
    /// this action, all with the pod's default selector; none when that
    /// selector selects everything. (The selector is deduced before the
    /// constraints are built, which allocates nothing for the usual pod
    /// without Services or controller; upstream builds them first, which
    /// changes nothing: default constraints have no selector to fail on.)
    fn default_constraints_for(
        &self,
        pod: &PodInfo,
        action: &str,
    ) -> Result<Vec<Constraint>, String> {
        if !self.default_constraints.iter().any(|c| c.when_unsatisfiable == action) {
            return Ok(Vec::new());
        }
        let selector = default_selector(pod, &*self.objects);
        if selector.is_everything() {
            return Ok(Vec::new());
        }
        let mut constraints = filter_constraints(&self.default_constraints, pod.labels(), action)?;
        for c in &mut constraints {
            c.selector = selector.clone();
        }
        Ok(constraints)
    }
}

impl Inner {
    /// The counts of a request's constraints over every node, from the
    /// memo of its key.
    fn counts(&self, request: &Request<'_>, nodes: &dyn NodeInfoLister) -> Vec<Counts> {
        self.with_memo(request, nodes, |view| view.counts())
    }

    /// The memo of a request, synced to `nodes`, read by `f`.
    fn with_memo<R>(
        &self,
        request: &Request<'_>,
        nodes: &dyn NodeInfoLister,
        f: impl FnOnce(View<'_>) -> R,
    ) -> R {
        let mut memos = self.memos.lock().unwrap_or_else(|poisoned| {
            // A panic during an update may have left a memo half counted.
            let mut memos = poisoned.into_inner();
            memos.clear();
            self.memos.clear_poison();
            memos
        });
        memos.with(request, nodes, f)
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        names::POD_TOPOLOGY_SPREAD
    }

    /// Upstream's three registrations. Its `TargetPod` (an update of the
    /// rejected pod itself) is Convoy's `UnscheduledPod`: the queue sends
    /// that event only to the pod that changed.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let (a, t, n) = (self.inner.clone(), self.inner.clone(), self.inner.clone());
        vec![
            ClusterEventWithHint::with_hint(
                EventResource::AssignedPod,
                ActionType::ADD | ActionType::UPDATE_POD_LABEL | ActionType::DELETE,
                move |pod, old, new| hints::after_assigned_pod_change(&a, pod, old, new),
            ),
            ClusterEventWithHint::with_hint(
                EventResource::UnscheduledPod,
                ActionType::UPDATE_POD_TOLERATION | ActionType::UPDATE_POD_LABEL,
                move |pod, old, new| hints::after_target_pod_change(&t, pod, old, new),
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD
                    | ActionType::DELETE
                    | ActionType::UPDATE_NODE_LABEL
                    | ActionType::UPDATE_NODE_TAINT,
                move |pod, old, new| hints::after_node_change(&n, pod, old, new),
            ),
        ]
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        Some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
