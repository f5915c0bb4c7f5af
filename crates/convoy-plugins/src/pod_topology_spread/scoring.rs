//! PreScore, Score and NormalizeScore of PodTopologySpread (upstream
//! `podtopologyspread/scoring.go`, v1.37.2).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use convoy_api::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, PodInfo, PreScorePlugin, ScorePlugin,
    Status,
};

use super::common::{
    AddressHasher, Constraint, Domains, count_pods_match_selector, has_all_keys, node_labels,
};
use super::memo::{Counts, Purpose, Request, View};
use super::{PodTopologySpread, SCHEDULE_ANYWAY};
use crate::helper::node_affinity::RequiredNodeAffinity;

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
    /// The feasible nodes' scores, by node address (with the node's
    /// generation, which an equal address must also have).
    scores: NodeScores,
}

/// Scores by node address.
type NodeScores = HashMap<usize, (u64, i64), BuildHasherDefault<AddressHasher>>;

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
        feasible: &[&NodeInfo],
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
        let required = RequiredNodeAffinity::of_pod(&pod.pod);
        let purpose = Purpose::Score { require_all };
        let request = Request { purpose, constraints: &constraints, pod, required: &required };
        let s = self.inner.with_memo(&request, all, |view| {
            pre_score_state(&constraints, require_all, pod, feasible, &view)
        });
        state.write(PreScoreState { constraints, ..s });
        Status::success()
    }
}

/// Upstream `initPreScoreState` and PreScore's count, from the memo: the
/// weights from the domains of the feasible nodes, and the score of every
/// feasible node, which Score then reads. A feasible node is read from its
/// memo slots (no label or pod read); one the memo does not know (not in
/// the snapshot) is read as upstream reads it.
fn pre_score_state(
    constraints: &[Constraint],
    require_all: bool,
    pod: &PodInfo,
    feasible: &[&NodeInfo],
    view: &View<'_>,
) -> PreScoreState {
    let counts = view.counts();
    // A node's slots, when the memo has them all: a node not ignored
    // has a domain for every constraint but hostname ones.
    let positions: Vec<Option<usize>> = feasible
        .iter()
        .map(|node| {
            view.position(node).filter(|&p| {
                (require_all && !view.all_keys(p))
                    || constraints
                        .iter()
                        .enumerate()
                        .all(|(c, k)| k.is_hostname() || view.slot(p, c).has_domain())
            })
        })
        .collect();
    // Per constraint: the domains of the feasible nodes not ignored (their
    // number gives the weight), as indices of the memo's domains seen, and
    // values no node counts for.
    let mut seen: Vec<Vec<bool>> = counts.iter().map(|c| vec![false; c.domains.len()]).collect();
    let mut unknown = vec![Domains::default(); constraints.len()];
    let mut sizes = vec![0; constraints.len()];
    let mut ignored = Vec::new();
    let mut n_ignored = 0;
    for (j, node) in feasible.iter().enumerate() {
        let labels = positions[j].is_none().then(|| node_labels(node));
        let is_ignored = match (positions[j], labels) {
            (Some(p), _) => require_all && !view.all_keys(p),
            (None, Some(labels)) => require_all && !has_all_keys(labels, constraints),
            (None, None) => unreachable!(),
        };
        if is_ignored {
            if ignored.is_empty() {
                ignored = vec![false; feasible.len()];
            }
            ignored[j] = true;
            n_ignored += 1;
            continue;
        }
        for (i, c) in constraints.iter().enumerate() {
            // Per-node counts are Score's.
            if c.is_hostname() {
                continue;
            }
            let d = match (positions[j], labels) {
                (Some(p), _) => Some(view.slot(p, i).domain),
                (None, Some(labels)) => {
                    let value = labels.get(&*c.topology_key).map_or("", String::as_str);
                    let d = counts[i].domains.get(value);
                    if d.is_none() && unknown[i].get(value).is_none() {
                        unknown[i].intern(value);
                        sizes[i] += 1;
                    }
                    d
                }
                (None, None) => unreachable!(),
            };
            if let Some(d) = d
                && !seen[i][d as usize]
            {
                seen[i][d as usize] = true;
                sizes[i] += 1;
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
    // The constraints are the caller's (moved in after).
    let mut s = PreScoreState {
        constraints: Vec::new(),
        require_all,
        counts,
        weights,
        ignored,
        scores: NodeScores::default(),
    };
    s.scores.reserve(feasible.len());
    for (j, node) in feasible.iter().enumerate() {
        let score = if s.ignored.get(j).copied().unwrap_or(false) {
            0
        } else if let Some(p) = positions[j] {
            let mut score = 0.0;
            for (i, c) in constraints.iter().enumerate() {
                let slot = view.slot(p, i);
                if !slot.labelled {
                    continue;
                }
                let count = if c.is_hostname() {
                    i64::from(slot.pods)
                } else {
                    s.counts[i].sums.pods_of(slot.domain)
                };
                score += score_for_count(count, c.max_skew, s.weights[i]);
            }
            score.round() as i64
        } else {
            score_of(constraints, require_all, &s.counts, &s.weights, pod, node)
        };
        s.scores.insert(std::ptr::from_ref::<NodeInfo>(node) as usize, (node.generation, score));
    }
    s
}

/// Upstream `Score`, from the node's labels and pods.
fn score_of(
    constraints: &[Constraint],
    require_all: bool,
    counts: &[Counts],
    weights: &[f64],
    pod: &PodInfo,
    node: &NodeInfo,
) -> i64 {
    let labels = node_labels(node);
    if require_all && !has_all_keys(labels, constraints) {
        return 0;
    }
    let mut score = 0.0;
    for (i, c) in constraints.iter().enumerate() {
        let Some(value) = labels.get(&*c.topology_key) else { continue };
        let count = if c.is_hostname() {
            count_pods_match_selector(&node.pods, &c.selector, pod.namespace())
        } else {
            let c = &counts[i];
            c.domains.get(value).map_or(0, |d| c.sums.pods_of(d))
        };
        score += score_for_count(count, c.max_skew, weights[i]);
    }
    score.round() as i64
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
        // PreScore scored the feasible nodes; another node (or a copy
        // with other content) is scored here.
        match s.scores.get(&(node as *const NodeInfo as usize)) {
            Some(&(generation, score)) if generation == node.generation => Ok(score),
            _ => Ok(score_of(&s.constraints, s.require_all, &s.counts, &s.weights, pod, node)),
        }
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
