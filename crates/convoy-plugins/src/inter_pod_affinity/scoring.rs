//! PreScore, Score and NormalizeScore (upstream `interpodaffinity/scoring.go`,
//! kube-scheduler v1.37.2).
//!
//! PreScore sums weights per topology pair: for every existing pod `E` on a
//! labelled node, the incoming pod's preferred affinity (+weight) and
//! anti-affinity (−weight) terms `E` matches, and `E`'s required affinity
//! (+hardPodAffinityWeight), preferred affinity (+weight) and preferred
//! anti-affinity (−weight) terms the incoming pod matches, each at `E`'s
//! node's value of the term's key. The sums are kept between cycles per
//! node (see the plugin's module): only nodes that changed are walked again.
//! Score of a node:
//! the sum over the topology keys of the node's pair (may be negative).
//! NormalizeScore: `trunc(100 * ((s - min) / (max - min)))` in floating
//! point, 0 for all when max = min.

use std::sync::Arc;

use convoy_api::labels::{Labels, no_labels};
use convoy_api::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, PodInfo, PreScorePlugin, ScorePlugin,
    Status, WeightedAffinityTerm,
};

use super::counts::{NodeValues, TopologyCounts};
use super::domains::{NodeRows, RowHint};
use super::memo::Sink;
use super::{InterPodAffinity, Memos, term_matches};

const NO_STATE: &str =
    "failed to read \"PreScoreInterPodAffinity\" from cycleState: PreScore did not run";

/// Upstream `preScoreState`: the summed weights per topology pair.
#[derive(Debug)]
pub(super) struct PreScoreState {
    pub(super) topology_score: TopologyCounts,
    /// The nodes' value ids the sums are read with.
    rows: Arc<NodeRows>,
    hint: RowHint,
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

/// What PreScore's sums depend on besides the nodes (and the plugin's
/// args): the incoming pod's namespace, labels and namespace labels (which
/// existing pods' terms match), its preferred terms with namespaces
/// resolved, and whether it has any (then every pod counts, else only pods
/// with affinity).
#[derive(Debug)]
pub(super) struct ScoreKey {
    namespace: Arc<str>,
    labels: Labels,
    namespace_labels: Labels,
    preferred_affinity: Vec<WeightedAffinityTerm>,
    preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    has_constraints: bool,
}

impl ScoreKey {
    fn is(&self, s: &Scorer<'_>) -> bool {
        self.has_constraints == s.has_constraints
            && *self.namespace == *s.incoming.namespace()
            && self.labels == *s.incoming.labels()
            && self.namespace_labels == *s.namespace_labels
            && self.preferred_affinity == s.preferred_affinity
            && self.preferred_anti_affinity == s.preferred_anti_affinity
    }

    fn of(s: &Scorer<'_>) -> Self {
        Self {
            namespace: s.incoming.key.namespace.clone(),
            labels: s.incoming.labels().clone(),
            namespace_labels: s.namespace_labels.clone(),
            preferred_affinity: s.preferred_affinity.clone(),
            preferred_anti_affinity: s.preferred_anti_affinity.clone(),
            has_constraints: s.has_constraints,
        }
    }
}

/// What one cycle's PreScore matches existing pods against.
struct Scorer<'a> {
    incoming: &'a PodInfo,
    namespace_labels: &'a Labels,
    /// The incoming pod's preferred terms, namespaces resolved.
    preferred_affinity: Vec<WeightedAffinityTerm>,
    preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    has_constraints: bool,
    hard_pod_affinity_weight: i32,
}

impl Scorer<'_> {
    /// Upstream `processNode`: every pod of a labelled node (only those
    /// with affinity unless the incoming pod has preferred terms).
    fn node(&self, sink: &mut Sink<'_>) {
        let node = sink.node();
        // A node without labels has no topology value for any term.
        if node.node().and_then(|n| n.metadata.labels.as_ref()).is_none_or(|l| l.is_empty()) {
            return;
        }
        let pods = if self.has_constraints { &node.pods } else { &node.pods_with_affinity };
        for existing in pods {
            self.existing_pod(sink, existing);
        }
    }

    /// Upstream `processExistingPod`.
    fn existing_pod(&self, sink: &mut Sink<'_>, existing: &PodInfo) {
        // The incoming pod's terms have their namespaceSelector resolved:
        // no namespace labels are needed to match existing pods.
        for t in &self.preferred_affinity {
            if term_matches(&t.term, existing, no_labels()) {
                sink.add(0, &t.term.topology_key, i64::from(t.weight));
            }
        }
        for t in &self.preferred_anti_affinity {
            if term_matches(&t.term, existing, no_labels()) {
                sink.add(0, &t.term.topology_key, -i64::from(t.weight));
            }
        }
        let Some(a) = existing.affinity.as_deref() else { return };
        let (incoming, ns_labels) = (self.incoming, self.namespace_labels);
        if self.hard_pod_affinity_weight > 0 {
            for t in &a.required_affinity {
                if term_matches(t, incoming, ns_labels) {
                    sink.add(0, &t.topology_key, i64::from(self.hard_pod_affinity_weight));
                }
            }
        }
        for t in &a.preferred_affinity {
            if term_matches(&t.term, incoming, ns_labels) {
                sink.add(0, &t.term.topology_key, i64::from(t.weight));
            }
        }
        for t in &a.preferred_anti_affinity {
            if term_matches(&t.term, incoming, ns_labels) {
                sink.add(0, &t.term.topology_key, -i64::from(t.weight));
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
        _feasible: &[&NodeInfo],
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
            has_constraints,
            hard_pod_affinity_weight: self.args.hard_pod_affinity_weight,
        };
        // Every node of the list: one without pods with affinity counts
        // nothing when only those count.
        let mut memos = self.memos();
        let pass = memos.begin(all.list().len());
        let Memos { topology, rows, score, .. } = &mut *memos;
        let e = score.refresh(
            pass,
            topology,
            all,
            |k| k.is(&scorer),
            || ScoreKey::of(&scorer),
            [],
            |sink| scorer.node(sink),
        );
        if !e.any_node_counted() {
            return Status::skip();
        }
        // Before the counts are taken (see PreFilter).
        let rows = rows.sync(topology, all);
        let topology_score = e.counts(0, topology);
        state.write(PreScoreState { topology_score, rows, hint: RowHint::default() });
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    /// The summed weights of the node's topology pairs (negative for
    /// anti-affinity); rescaled by `normalize_score`.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state.read::<PreScoreState>().ok_or_else(|| Status::error(NO_STATE))?;
        Ok(s.topology_score.sum_on(&NodeValues::new(Some(&s.rows), node, &s.hint)))
    }

    /// Upstream's min-max normalization, in `f64` and truncated.
    fn normalize_score(&self, state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        if state.read::<PreScoreState>().is_none() {
            return Status::error(NO_STATE);
        }
        // Upstream returns when no topology key has a score map, which a
        // PreScore that did not skip never leaves.
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
