//! NodeAffinity: Filter on `spec.nodeSelector` and the required node
//! affinity (plus the scheduler-enforced `addedAffinity`), Score by the
//! weights of the matching preferred terms (upstream `plugins/nodeaffinity`
//! and `component-helpers/scheduling/corev1/nodeaffinity`, v1.37.2).
//!
//! Score, as v1.37.2: the sum of the weights of the matching preferred
//! terms of the pod and of `addedAffinity` (terms with weight 0 or no
//! requirement dropped; a requirement with an invalid key or value is an
//! error in PreScore), then `DefaultNormalizeScore(100, false)`: `100 *
//! score / max`, integer division. Upstream's table:
//! `tests::node_affinity_priority`.
//!
//! Selectors are compiled once per cycle (PreFilter/PreScore) into the
//! `CycleState`; Filter and Score only match.

use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeAffinity as NodeAffinitySpec;

use convoy_api::{
    ActionType, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    MAX_NODE_SCORE, NodeInfo, NodeInfoLister, Plugin, PodInfo, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, QueueingHint, ScorePlugin, Status, names,
};
use convoy_config::PluginArgs;

use crate::helper::node_affinity::{
    CompiledNodeSelector, NodeView, PreferredTerms, RequiredNodeAffinity, required_node_names,
    required_terms,
};
use crate::helper::{default_normalize_score, event_node};

/// Reason when the pod's nodeSelector or required affinity does not match.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// Reason when the scheduler-enforced `addedAffinity` does not match.
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
/// Reason when the required terms name disjoint sets of nodes.
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

/// The NodeAffinity plugin.
#[derive(Debug, Default, Clone)]
pub struct NodeAffinity {
    added_node_selector: Option<Arc<CompiledNodeSelector>>,
    added_pref_terms: Option<PreferredTerms>,
}

/// PreFilter state: the pod's compiled required placement.
struct PreFilterState(RequiredNodeAffinity);

/// PreScore state: the pod's compiled preferred terms.
struct PreScoreState(Option<PreferredTerms>);

impl NodeAffinity {
    /// Builds the plugin from `NodeAffinityArgs` (None: no added affinity).
    pub fn new(args: Option<&PluginArgs>) -> Result<Self, String> {
        let added = match args {
            None => None,
            Some(PluginArgs::NodeAffinity(a)) => a.added_affinity.clone(),
            Some(other) => {
                return Err(format!("want args to be of type NodeAffinityArgs, got {other:?}"));
            }
        };
        let Some(value) = added.filter(|v| !v.is_null()) else { return Ok(Self::default()) };
        let spec: NodeAffinitySpec =
            serde_json::from_value(value).map_err(|e| format!("addedAffinity: {e}"))?;
        let added_node_selector = spec
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .map(|ns| CompiledNodeSelector::parse(ns).map(Arc::new))
            .transpose()
            .map_err(|e| {
                format!("addedAffinity.requiredDuringSchedulingIgnoredDuringExecution: {e}")
            })?;
        let added_pref_terms = match spec
            .preferred_during_scheduling_ignored_during_execution
            .as_deref()
        {
            Some(terms) if !terms.is_empty() => {
                Some(PreferredTerms::parse(terms).map_err(|e| {
                    format!("addedAffinity.preferredDuringSchedulingIgnoredDuringExecution: {e}")
                })?)
            }
            _ => None,
        };
        Ok(Self { added_node_selector, added_pref_terms })
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        names::NODE_AFFINITY
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let added = self.added_node_selector.clone();
        vec![ClusterEventWithHint::with_hint(
            EventResource::Node,
            ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            move |pod, old, new| is_schedulable_after_node_change(added.as_deref(), pod, old, new),
        )]
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

impl PreFilterPlugin for NodeAffinity {
    /// Skip when there is nothing to check; UnschedulableAndUnresolvable
    /// `pod affinity terms conflict` when the name fields exclude every
    /// node; a node subset when every required term names nodes.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        let required = required_terms(&pod.pod);
        if required.is_none()
            && self.added_node_selector.is_none()
            && pod.spec().node_selector.is_none()
        {
            return (None, Status::skip());
        }
        state.write(PreFilterState(RequiredNodeAffinity::of_pod(&pod.pod)));
        let Some(required) = required else { return (None, Status::success()) };
        match required_node_names(required) {
            None => (None, Status::success()),
            Some(names) if names.is_empty() => (None, Status::unresolvable(ERR_REASON_CONFLICT)),
            Some(names) => (
                Some(PreFilterResult {
                    node_names: Some(names.into_iter().map(Arc::from).collect()),
                }),
                Status::success(),
            ),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    /// UnschedulableAndUnresolvable, `node(s) didn't match Pod's node
    /// affinity/selector` (or `... scheduler-enforced node affinity`).
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let view = NodeView::of_info(node);
        if let Some(added) = &self.added_node_selector
            && !added.matches(view)
        {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        let fits = match state.read::<PreFilterState>() {
            Some(s) => s.0.matches(view),
            // PreFilter disabled: compile here (slow path).
            None => RequiredNodeAffinity::of_pod(&pod.pod).matches(view),
        };
        if fits { Status::success() } else { Status::unresolvable(ERR_REASON_POD) }
    }
}

fn pod_preferred_terms(pod: &PodInfo) -> Result<Option<PreferredTerms>, String> {
    let terms = pod
        .spec()
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.preferred_during_scheduling_ignored_during_execution.as_deref());
    match terms {
        Some(t) if !t.is_empty() => PreferredTerms::parse(t).map(Some),
        _ => Ok(None),
    }
}

impl PreScorePlugin for NodeAffinity {
    /// Skip when neither the pod nor `addedAffinity` has preferred terms;
    /// Error when a preferred term cannot be parsed.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[&NodeInfo],
        _all: &dyn NodeInfoLister,
    ) -> Status {
        let preferred = match pod_preferred_terms(pod) {
            Ok(p) => p,
            Err(e) => {
                return Status::error(format!(
                    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution: {e}"
                ));
            }
        };
        if preferred.is_none() && self.added_pref_terms.is_none() {
            return Status::skip();
        }
        state.write(PreScoreState(preferred));
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    /// The sum of the weights of the preferred terms the node matches.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let view = NodeView::of_info(node);
        let mut count = self.added_pref_terms.as_ref().map_or(0, |t| t.score(view));
        match state.read::<PreScoreState>() {
            Some(s) => count += s.0.as_ref().map_or(0, |t| t.score(view)),
            None => {
                let p = pod_preferred_terms(pod).map_err(Status::error)?;
                count += p.as_ref().map_or(0, |t| t.score(view));
            }
        }
        Ok(count)
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores)
    }
}

/// Queue when the new node matches the enforced and the pod's required
/// affinity, and the old one (if any) did not.
fn is_schedulable_after_node_change(
    added: Option<&CompiledNodeSelector>,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(modified) = event_node(new) else { return QueueingHint::Queue };
    let modified = NodeView::of_node(modified);
    if added.is_some_and(|a| !a.matches(modified)) {
        return QueueingHint::Skip;
    }
    let required = RequiredNodeAffinity::of_pod(&pod.pod);
    if !required.matches(modified) {
        return QueueingHint::Skip;
    }
    match event_node(old) {
        None => QueueingHint::Queue,
        Some(original) if !required.matches(NodeView::of_node(original)) => QueueingHint::Queue,
        Some(_) => QueueingHint::Skip,
    }
}

#[cfg(test)]
mod tests;
