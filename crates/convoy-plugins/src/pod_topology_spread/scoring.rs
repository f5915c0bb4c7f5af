//! PreScore, Score and NormalizeScore of PodTopologySpread (upstream
//! `podtopologyspread/scoring.go`, v1.37.2).

use std::sync::Arc;

use convoy_api::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, PodInfo, PreScorePlugin, ScorePlugin,
    Status,
};

use super::common::{Constraint, Domains, count_pods_match_selector, has_all_keys, node_labels};
use super::memo::{Counts, Purpose, Request};
use super::{PodTopologySpread, SCHEDULE_ANYWAY};
use crate::node_affinity::selector::RequiredNodeAffinity;

/// What PreScore computes for Score: per soft constraint, the matching pods
/// per domain over all nodes and the weight.
#[derive(Debug)]
pub(super) struct PreScoreState {
    pub(super) constraints: Vec<Constraint>,
    /// Nodes missing a topology key are ignored (scored 0): always with
    /// the pod's own constraints or listed defaults, not with System ones.
    pub(super) require_all: bool,
    /// Per constraint: matching pods per domain over all nodes, from the
    /// memo (none for hostname, counted on the node at Score). Upstream
    /// keeps only the domains of feasible nodes, the only ones Score reads.
    pub(super) counts: Vec<Counts>,
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
        // Upstream counts the matching pods of every node after listing the
        // feasible domains; the memo counts them for every domain.
        let counts: Vec<Counts> = if constraints.iter().all(Constraint::is_hostname) {
            vec![Counts::default(); constraints.len()]
        } else {
            let required = RequiredNodeAffinity::of_pod(&pod.pod);
            let purpose = Purpose::Score { require_all };
            let request = Request { purpose, constraints: &constraints, pod, required: &required };
            self.inner.counts(&request, all)
        };
        // Per constraint: the domains of the feasible nodes not ignored
        // (their number gives the weight), as indices of the memo's domains
        // seen, and values no node counts for.
        let mut seen: Vec<Vec<bool>> =
            counts.iter().map(|c| vec![false; c.domains.len()]).collect();
        let mut unknown = vec![Domains::default(); constraints.len()];
        let mut sizes = vec![0; constraints.len()];
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
                match counts[i].domains.get(value) {
                    Some(d) if !seen[i][d as usize] => {
                        seen[i][d as usize] = true;
                        sizes[i] += 1;
                    }
                    Some(_) => {}
                    None => {
                        if unknown[i].get(value).is_none() {
                            unknown[i].intern(value);
                            sizes[i] += 1;
                        }
                    }
                }
            }
        }
        let weights = constraints
            .iter()
            .zip(&sizes)
            .map(|(c, &size)| {
                let size = if c.is_hostname() { feasible.len() - n_ignored } else { size };
                topology_normalizing_weight(size)
            })
            .collect();
        state.write(PreScoreState { constraints, require_all, counts, weights, ignored });
        Status::success()
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
                let c = &s.counts[i];
                c.domains.get(value).map_or(0, |d| c.sums.pods_of(d))
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
