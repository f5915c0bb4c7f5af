//! PreScore, Score and NormalizeScore (upstream `interpodaffinity/scoring.go`,
//! kube-scheduler v1.37.2).
//!
//! PreScore sums weights per topology pair, once per cycle: for every
//! existing pod `E` on a labelled node, the incoming pod's preferred
//! affinity (+weight) and anti-affinity (−weight) terms `E` matches, and
//! `E`'s required affinity (+hardPodAffinityWeight), preferred affinity
//! (+weight) and preferred anti-affinity (−weight) terms the incoming pod
//! matches, each at `E`'s node's value of the term's key. Score of a node:
//! the sum over the topology keys of the node's pair (may be negative).
//! NormalizeScore: `trunc(100 * ((s - min) / (max - min)))` in floating
//! point, 0 for all when max = min.

use std::sync::Arc;

use convoy_api::labels::no_labels;
use convoy_api::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, PodInfo, PreScorePlugin, ScorePlugin,
    Status, WeightedAffinityTerm,
};

use super::counts::TopologyCounts;
use super::{InterPodAffinity, term_matches};

const NO_STATE: &str =
    "failed to read \"PreScoreInterPodAffinity\" from cycleState: PreScore did not run";

/// Upstream `preScoreState`: the summed weights per topology pair.
#[derive(Debug)]
pub(super) struct PreScoreState {
    pub(super) topology_score: TopologyCounts,
}

/// Whether the pod has preferred pod affinity or anti-affinity terms, read
/// from the spec as upstream's `hasConstraints`.
fn has_preferred_terms(pod: &PodInfo) -> bool {
    let Some(a) = pod.spec().affinity.as_ref() else { return false };
    let affinity = a
        .pod_affinity
        .as_ref()
        .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref());
    let anti = a
        .pod_anti_affinity
        .as_ref()
        .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref());
    affinity.is_some_and(|t| !t.is_empty()) || anti.is_some_and(|t| !t.is_empty())
}

/// The sums PreScore builds.
#[derive(Default)]
struct Sums {
    scores: TopologyCounts,
    /// Whether any term counted (upstream: some node's score map is not
    /// empty), even if the weights summed to 0.
    counted: bool,
}

impl Sums {
    fn add(&mut self, node: &NodeInfo, key: &Arc<str>, weight: i64) {
        if let Some(v) = node.label(key) {
            self.scores.add(key, v, weight);
            self.counted = true;
        }
    }
}

/// What one cycle's PreScore matches existing pods against.
struct Scorer<'a> {
    incoming: &'a PodInfo,
    namespace_labels: &'a convoy_api::Labels,
    /// The incoming pod's preferred terms, namespaces resolved.
    preferred_affinity: Vec<WeightedAffinityTerm>,
    preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    hard_pod_affinity_weight: i32,
}

impl Scorer<'_> {
    /// Upstream `processExistingPod`.
    fn existing_pod(&self, sums: &mut Sums, node: &NodeInfo, existing: &PodInfo) {
        // The incoming pod's terms have their namespaceSelector resolved:
        // no namespace labels are needed to match existing pods.
        for t in &self.preferred_affinity {
            if term_matches(&t.term, existing, no_labels()) {
                sums.add(node, &t.term.topology_key, i64::from(t.weight));
            }
        }
        for t in &self.preferred_anti_affinity {
            if term_matches(&t.term, existing, no_labels()) {
                sums.add(node, &t.term.topology_key, -i64::from(t.weight));
            }
        }
        let Some(a) = existing.affinity.as_deref() else { return };
        let (incoming, ns_labels) = (self.incoming, self.namespace_labels);
        if self.hard_pod_affinity_weight > 0 {
            for t in &a.required_affinity {
                if term_matches(t, incoming, ns_labels) {
                    sums.add(node, &t.topology_key, i64::from(self.hard_pod_affinity_weight));
                }
            }
        }
        for t in &a.preferred_affinity {
            if term_matches(&t.term, incoming, ns_labels) {
                sums.add(node, &t.term.topology_key, i64::from(t.weight));
            }
        }
        for t in &a.preferred_anti_affinity {
            if term_matches(&t.term, incoming, ns_labels) {
                sums.add(node, &t.term.topology_key, -i64::from(t.weight));
            }
        }
    }
}

impl PreScorePlugin for InterPodAffinity {
    /// Skip when `ignorePreferredTermsOfExistingPods` is set and the pod has
    /// no preferred terms, or when no term counts anywhere; Error when the
    /// pod's terms cannot be parsed.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[Arc<NodeInfo>],
        all: &dyn NodeInfoLister,
    ) -> Status {
        let has_constraints = has_preferred_terms(pod);
        if self.args.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        // Unless the pod has preferred terms, only pods with affinity count.
        let nodes = if has_constraints { all.list() } else { all.have_pods_with_affinity_list() };
        let affinity = pod.affinity.as_deref();
        if let Some(e) = affinity.and_then(|a| a.parse_error.as_deref()) {
            return Status::error(format!("failed to parse pod: {e}"));
        }
        if nodes.is_empty() {
            return Status::skip();
        }
        let merge = |terms: &[WeightedAffinityTerm]| -> Vec<WeightedAffinityTerm> {
            terms
                .iter()
                .map(|t| WeightedAffinityTerm {
                    term: self.merge_namespaces(&t.term),
                    weight: t.weight,
                })
                .collect()
        };
        let namespace_labels = self.objects.namespace_labels(pod.namespace());
        let scorer = Scorer {
            incoming: pod,
            namespace_labels: namespace_labels.as_deref().unwrap_or(no_labels()),
            preferred_affinity: affinity.map(|a| merge(&a.preferred_affinity)).unwrap_or_default(),
            preferred_anti_affinity: affinity
                .map(|a| merge(&a.preferred_anti_affinity))
                .unwrap_or_default(),
            hard_pod_affinity_weight: self.args.hard_pod_affinity_weight,
        };
        let mut sums = Sums::default();
        for node in nodes {
            // A node without labels has no topology value for any term.
            if node.node().and_then(|n| n.metadata.labels.as_ref()).is_none_or(|l| l.is_empty()) {
                continue;
            }
            let pods = if has_constraints { &node.pods } else { &node.pods_with_affinity };
            for existing in pods {
                scorer.existing_pod(&mut sums, node, existing);
            }
        }
        if !sums.counted {
            return Status::skip();
        }
        state.write(PreScoreState { topology_score: sums.scores });
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    /// The summed weights of the node's topology pairs (negative for
    /// anti-affinity); rescaled by `normalize_score`.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state.read::<PreScoreState>().ok_or_else(|| Status::error(NO_STATE))?;
        Ok(s.topology_score.sum_on(node))
    }

    /// Upstream's min-max normalization, in `f64` and truncated.
    fn normalize_score(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        let Some(s) = state.read::<PreScoreState>() else { return Status::error(NO_STATE) };
        if s.topology_score.keys() == 0 {
            return Status::success();
        }
        normalize(scores);
        Status::success()
    }
}

/// `score = trunc(MaxNodeScore * ((s - min) / (max - min)))`, 0 for every
/// node when all scores are equal.
pub(super) fn normalize(scores: &mut [i64]) {
    let (Some(&min), Some(&max)) = (scores.iter().min(), scores.iter().max()) else { return };
    let diff = max.wrapping_sub(min);
    for s in scores.iter_mut() {
        let f =
            if diff > 0 { MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64) } else { 0.0 };
        *s = f as i64;
    }
}
