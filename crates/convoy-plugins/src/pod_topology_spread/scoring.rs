//! PreScore, Score and NormalizeScore of PodTopologySpread (upstream
//! `podtopologyspread/scoring.go`, v1.37.2).

use std::sync::Arc;

use convoy_api::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, PodInfo, PreScorePlugin, ScorePlugin,
    Status,
};

use super::common::{Constraint, Domains, count_pods_match_selector, has_all_keys, node_labels};
use super::{PodTopologySpread, SCHEDULE_ANYWAY};
use crate::node_affinity::selector::RequiredNodeAffinity;

/// What PreScore computes for Score: per soft constraint, the matching pods
/// of the domains present among the feasible nodes, and the weights.
#[derive(Debug)]
pub(super) struct PreScoreState {
    pub(super) constraints: Vec<Constraint>,
    /// Nodes missing a topology key are ignored (scored 0): always with
    /// the pod's own constraints or listed defaults, not with System ones.
    pub(super) require_all: bool,
    /// Per constraint: the domains of the feasible nodes (none for hostname).
    pub(super) domains: Vec<Domains>,
    /// Per constraint: matching pods per domain index, over all nodes.
    pub(super) counts: Vec<Vec<i64>>,
    /// Per constraint: `ln(domains + 2)` (upstream `topologyNormalizingWeight`).
    pub(super) weights: Vec<f64>,
    /// Per feasible node (Score's order): ignored; empty when none is.
    pub(super) ignored: Vec<bool>,
}

/// Upstream `topologyNormalizingWeight`.
fn topology_normalizing_weight(size: usize) -> f64 {
    ((size + 2) as f64).ln()
}

/// Upstream `scoreForCount`: `count · weight + maxSkew − 1`.
fn score_for_count(count: i64, max_skew: i32, weight: f64) -> f64 {
    count as f64 * weight + f64::from(max_skew - 1)
}

impl PreScorePlugin for PodTopologySpread {
    /// Skip when the snapshot has no node or the pod has no `ScheduleAnyway`
    /// constraint (own or default); Error when a selector cannot be parsed.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        feasible: &[Arc<NodeInfo>],
        all: &dyn NodeInfoLister,
    ) -> Status {
        if all.list().is_empty() {
            return Status::skip();
        }
        let own = pod.spec().topology_spread_constraints.as_ref().is_some_and(|c| !c.is_empty());
        let require_all = own || !self.inner.system_defaulted;
        let constraints = match self.inner.constraints(pod, SCHEDULE_ANYWAY) {
            Ok(c) => c,
            Err(e) => return Status::error(format!("calculating preScoreState: {e}")),
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        let n = constraints.len();
        let mut domains = vec![Domains::default(); n];
        let mut counts: Vec<Vec<i64>> = vec![Vec::new(); n];
        let mut ignored = Vec::new();
        let mut n_ignored = 0;
        for (j, node) in feasible.iter().enumerate() {
            let labels = node_labels(node);
            if require_all && !has_all_keys(labels, &constraints) {
                if ignored.is_empty() {
                    ignored = vec![false; feasible.len()];
                }
                ignored[j] = true;
                n_ignored += 1;
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                // Per-node counts are computed at Score.
                if c.is_hostname() {
                    continue;
                }
                let value = labels.get(&*c.topology_key).map_or("", String::as_str);
                if domains[i].intern(value) as usize == counts[i].len() {
                    counts[i].push(0);
                }
            }
        }
        let weights = constraints
            .iter()
            .zip(&domains)
            .map(|(c, d)| {
                let size = if c.is_hostname() { feasible.len() - n_ignored } else { d.len() };
                topology_normalizing_weight(size)
            })
            .collect();
        if domains.iter().any(|d| !d.is_empty()) {
            count_over_all_nodes(&constraints, &domains, &mut counts, require_all, pod, all);
        }
        state.write(PreScoreState { constraints, require_all, domains, counts, weights, ignored });
        Status::success()
    }
}

/// Adds the matching pods of every node (eligible by the inclusion
/// policies, and having all keys if required) to the domains present among
/// the feasible nodes.
fn count_over_all_nodes(
    constraints: &[Constraint],
    domains: &[Domains],
    counts: &mut [Vec<i64>],
    require_all: bool,
    pod: &PodInfo,
    all: &dyn NodeInfoLister,
) {
    let required = RequiredNodeAffinity::of_pod(&pod.pod);
    let tolerations = pod.spec().tolerations.as_deref().unwrap_or(&[]);
    let ns = pod.namespace();
    for node in all.list() {
        let labels = node_labels(node);
        if node.node().is_none() || (require_all && !has_all_keys(labels, constraints)) {
            continue;
        }
        for (i, c) in constraints.iter().enumerate() {
            let value = labels.get(&*c.topology_key).map_or("", String::as_str);
            // Only domains of feasible nodes count (never hostname ones).
            let Some(d) = domains[i].get(value) else { continue };
            if !c.includes_node(node, &required, tolerations) {
                continue;
            }
            counts[i][d as usize] += count_pods_match_selector(&node.pods, &c.selector, ns);
        }
    }
}

const NO_PRE_SCORE_STATE: &str =
    "error reading \"PreScorePodTopologySpread\" from cycleState: not found";

impl ScorePlugin for PodTopologySpread {
    /// `round(Σ count·weight + maxSkew − 1)` over the constraints whose key
    /// the node has (hostname counts from the node's own pods); 0 for an
    /// ignored node. Fewer matching pods is better: NormalizeScore reverses.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>() else {
            return Err(Status::error(NO_PRE_SCORE_STATE));
        };
        let labels = node_labels(node);
        if s.require_all && !has_all_keys(labels, &s.constraints) {
            return Ok(0);
        }
        let mut score = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = labels.get(&*c.topology_key) else { continue };
            let count = if c.is_hostname() {
                count_pods_match_selector(&node.pods, &c.selector, pod.namespace())
            } else {
                s.domains[i].get(value).map_or(0, |d| s.counts[i][d as usize])
            };
            score += score_for_count(count, c.max_skew, s.weights[i]);
        }
        Ok(score.round() as i64)
    }

    /// Upstream: ignored nodes get 0; the others
    /// `100 · (max + min − score) / max` (integer division; 100 each when
    /// `max` is 0), min and max over the nodes not ignored.
    fn normalize_score(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        let Some(s) = state.read::<PreScoreState>() else {
            return Status::error(NO_PRE_SCORE_STATE);
        };
        let ignored = |j: usize| s.ignored.get(j).copied().unwrap_or(false);
        let mut min = i64::MAX;
        let mut max = 0;
        for (j, &score) in scores.iter().enumerate() {
            if !ignored(j) {
                min = min.min(score);
                max = max.max(score);
            }
        }
        for (j, score) in scores.iter_mut().enumerate() {
            *score = if ignored(j) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *score) / max
            };
        }
        Status::success()
    }
}
