//! Upstream's algorithm as written (v1.37.2 `calPreFilterState`, `Filter`,
//! `updateWithPod`, `initPreScoreState`, `PreScore`, `Score`,
//! `NormalizeScore`), counting every node on every call with plain maps:
//! the oracle of the equivalence test. Only the constraints (with their
//! defaults and selectors) come from the plugin.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use convoy_api::{MAX_NODE_SCORE, NodeInfo, NodeInfoLister, PodInfo, Status};

use super::super::common::{Constraint, count_pods_match_selector, has_all_keys, node_labels};
use super::super::{
    DO_NOT_SCHEDULE, ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread, SCHEDULE_ANYWAY,
};
use crate::helper::node_affinity::RequiredNodeAffinity;

const MAX_MATCH_NUM: i64 = i32::MAX as i64;

/// Upstream's `preFilterState` (the minimum is recomputed from the map,
/// which is what the critical paths give for what-ifs on one node).
#[derive(Debug, Clone)]
pub(super) struct PreFilter {
    constraints: Vec<Constraint>,
    counts: Vec<HashMap<String, i64>>,
}

/// PreFilter: `Ok(None)` for Skip, `Err` with the status's message for an error.
pub(super) fn pre_filter(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    all: &dyn NodeInfoLister,
) -> Result<Option<PreFilter>, String> {
    let constraints = pl
        .inner
        .constraints(pod, DO_NOT_SCHEDULE)
        .map_err(|e| format!("get constraints from pod: {e}"))?;
    if constraints.is_empty() {
        return Ok(None);
    }
    let required = RequiredNodeAffinity::of_pod(&pod.pod);
    let tolerations = pod.spec().tolerations.as_deref().unwrap_or(&[]);
    let mut counts = vec![HashMap::new(); constraints.len()];
    for node in all.list() {
        let labels = node_labels(node);
        if node.node().is_none() || !has_all_keys(labels, &constraints) {
            continue;
        }
        for (i, c) in constraints.iter().enumerate() {
            if !c.includes_node(node, &required, tolerations) {
                continue;
            }
            let value = labels.get(&*c.topology_key).cloned().unwrap_or_default();
            let n = count_pods_match_selector(&node.pods, &c.selector, pod.namespace());
            *counts[i].entry(value).or_insert(0) += n;
        }
    }
    Ok(Some(PreFilter { constraints, counts }))
}

impl PreFilter {
    /// Upstream `Filter`.
    pub(super) fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Status {
        let labels = node_labels(node);
        for (i, c) in self.constraints.iter().enumerate() {
            let Some(value) = labels.get(&*c.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let counts = &self.counts[i];
            let min = if (counts.len() as i64) < i64::from(c.min_domains) {
                0
            } else {
                counts.values().copied().min().unwrap_or(MAX_MATCH_NUM)
            };
            let self_match = i64::from(c.selector.matches(pod.labels()));
            let skew = counts.get(value).copied().unwrap_or(0) + self_match - min;
            if skew > i64::from(c.max_skew) {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }

    /// Upstream `updateWithPod`.
    pub(super) fn update(
        &mut self,
        preemptor: &PodInfo,
        updated: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) {
        let labels = node_labels(node);
        if updated.namespace() != preemptor.namespace()
            || node.node().is_none()
            || !has_all_keys(labels, &self.constraints)
        {
            return;
        }
        let required = RequiredNodeAffinity::of_pod(&preemptor.pod);
        let tolerations = preemptor.spec().tolerations.as_deref().unwrap_or(&[]);
        for (i, c) in self.constraints.iter().enumerate() {
            if !c.selector.matches(updated.labels())
                || !c.includes_node(node, &required, tolerations)
            {
                continue;
            }
            let value = labels.get(&*c.topology_key).cloned().unwrap_or_default();
            *self.counts[i].entry(value).or_insert(0) += delta;
        }
    }
}

/// The raw and the normalized scores of the feasible nodes.
pub(super) type Scores = (Vec<i64>, Vec<i64>);

/// PreScore, Score and NormalizeScore: `Ok(None)` for Skip, else the
/// scores; `Err` with the message.
pub(super) fn scores(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    feasible: &[Arc<NodeInfo>],
    all: &dyn NodeInfoLister,
) -> Result<Option<Scores>, String> {
    if all.list().is_empty() {
        return Ok(None);
    }
    let own = pod.spec().topology_spread_constraints.as_ref().is_some_and(|c| !c.is_empty());
    let require_all = own || !pl.inner.system_defaulted;
    let constraints = pl
        .inner
        .constraints(pod, SCHEDULE_ANYWAY)
        .map_err(|e| format!("calculating preScoreState: {e}"))?;
    if constraints.is_empty() {
        return Ok(None);
    }
    // initPreScoreState.
    let mut counts: Vec<HashMap<String, i64>> = vec![HashMap::new(); constraints.len()];
    let mut ignored = HashSet::new();
    for node in feasible {
        let labels = node_labels(node);
        if require_all && !has_all_keys(labels, &constraints) {
            ignored.insert(node.name().to_string());
            continue;
        }
        for (i, c) in constraints.iter().enumerate() {
            if c.is_hostname() {
                continue;
            }
            let value = labels.get(&*c.topology_key).cloned().unwrap_or_default();
            counts[i].entry(value).or_insert(0);
        }
    }
    let weights: Vec<f64> = constraints
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let size =
                if c.is_hostname() { feasible.len() - ignored.len() } else { counts[i].len() };
            ((size + 2) as f64).ln()
        })
        .collect();
    // PreScore's count over all nodes.
    let required = RequiredNodeAffinity::of_pod(&pod.pod);
    let tolerations = pod.spec().tolerations.as_deref().unwrap_or(&[]);
    for node in all.list() {
        let labels = node_labels(node);
        if node.node().is_none() || (require_all && !has_all_keys(labels, &constraints)) {
            continue;
        }
        for (i, c) in constraints.iter().enumerate() {
            if !c.includes_node(node, &required, tolerations) {
                continue;
            }
            let value = labels.get(&*c.topology_key).map_or("", String::as_str);
            if let Some(n) = counts[i].get_mut(value) {
                *n += count_pods_match_selector(&node.pods, &c.selector, pod.namespace());
            }
        }
    }
    // Score.
    let raw: Vec<i64> = feasible
        .iter()
        .map(|node| {
            if ignored.contains(node.name()) {
                return 0;
            }
            let labels = node_labels(node);
            let mut score = 0.0;
            for (i, c) in constraints.iter().enumerate() {
                let Some(value) = labels.get(&*c.topology_key) else { continue };
                let n = if c.is_hostname() {
                    count_pods_match_selector(&node.pods, &c.selector, pod.namespace())
                } else {
                    counts[i][value]
                };
                score += n as f64 * weights[i] + f64::from(c.max_skew - 1);
            }
            score.round() as i64
        })
        .collect();
    // NormalizeScore.
    let mut min = i64::MAX;
    let mut max = 0;
    for (node, &s) in feasible.iter().zip(&raw) {
        if !ignored.contains(node.name()) {
            min = min.min(s);
            max = max.max(s);
        }
    }
    let normalized = feasible
        .iter()
        .zip(&raw)
        .map(|(node, &s)| {
            if ignored.contains(node.name()) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - s) / max
            }
        })
        .collect();
    Ok(Some((raw, normalized)))
}
