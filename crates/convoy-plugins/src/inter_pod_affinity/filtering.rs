//! PreFilter, Filter and the PreFilter extensions (upstream
//! `interpodaffinity/filtering.go`, kube-scheduler v1.37.2, with the
//! `InterPodAffinityHostnameFastPath` gate off as it is by default: every
//! term, `kubernetes.io/hostname` included, goes through the topology
//! counts).
//!
//! PreFilter walks the snapshot once and counts, per topology pair:
//! existing pods whose required anti-affinity the incoming pod matches
//! (only nodes hosting such pods), and, when the incoming pod has required
//! terms, existing pods matching all its affinity terms and existing pods
//! matching each of its anti-affinity terms (every node). Filter then costs
//! a few label and hash lookups per node, and allocates nothing.

use std::sync::Arc;

use smallvec::SmallVec;

use convoy_api::labels::{Labels, no_labels};
use convoy_api::{
    AffinityTerm, CycleState, FilterPlugin, NodeInfo, NodeInfoLister, PodInfo, PreFilterExtensions,
    PreFilterPlugin, PreFilterResult, Status,
};

use super::counts::TopologyCounts;
use super::{InterPodAffinity, pod_matches_all, term_matches};

/// Reason when an existing pod's required anti-affinity rejects the pod.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// Reason when the pod's required affinity is not satisfied.
pub const ERR_REASON_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// Reason when the pod's required anti-affinity is not satisfied.
pub const ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't match pod anti-affinity rules";

const NO_STATE: &str =
    "error reading \"PreFilterInterPodAffinity\" from cycleState: PreFilter did not run";

/// The incoming pod's required terms, `namespaceSelector` resolved into
/// `namespaces` (upstream `mergeAffinityTermNamespacesIfNotEmpty`).
#[derive(Debug)]
pub(super) struct IncomingTerms {
    pub(super) affinity: Vec<AffinityTerm>,
    pub(super) anti_affinity: Vec<AffinityTerm>,
    /// Whether the pod matches all its own affinity terms (the first pod of
    /// a group with affinity to itself).
    pub(super) matches_own_affinity: bool,
}

/// Upstream `preFilterState`. Cloned (counts included) by the PreFilter
/// extensions, as upstream's `Clone`.
#[derive(Debug, Clone)]
pub(super) struct PreFilterState {
    pub(super) incoming: Arc<IncomingTerms>,
    /// Labels of the incoming pod's namespace (existing pods' terms may
    /// select it by namespace labels).
    pub(super) namespace_labels: Option<Arc<Labels>>,
    /// Existing pods whose required anti-affinity the incoming pod matches.
    pub(super) existing_anti_affinity: TopologyCounts,
    /// Existing pods matching all the incoming pod's affinity terms.
    pub(super) affinity: TopologyCounts,
    /// Existing pods matching each of the incoming pod's anti-affinity terms.
    pub(super) anti_affinity: TopologyCounts,
}

impl PreFilterState {
    /// Upstream `updateWithPod`: counts `pod` on `node` `n` more times.
    pub(super) fn update_with_pod(
        &mut self,
        incoming: &PodInfo,
        pod: &PodInfo,
        node: &NodeInfo,
        n: i64,
    ) {
        let namespace_labels = self.namespace_labels.as_deref().unwrap_or(no_labels());
        if let Some(a) = pod.affinity.as_deref() {
            for t in &a.required_anti_affinity {
                if term_matches(t, incoming, namespace_labels) {
                    self.existing_anti_affinity.update(node, &t.topology_key, n);
                }
            }
        }
        if pod_matches_all(&self.incoming.affinity, pod) {
            for t in &self.incoming.affinity {
                self.affinity.update(node, &t.topology_key, n);
            }
        }
        for t in &self.incoming.anti_affinity {
            if term_matches(t, pod, no_labels()) {
                self.anti_affinity.update(node, &t.topology_key, n);
            }
        }
    }

    /// Upstream `nodeTopologyMatchesAffinity` (gate off): the node has
    /// every term's topology key and, for each, a pod matching all terms in
    /// its domain; or no such pod exists anywhere and the pod matches its
    /// own terms.
    fn satisfies_affinity(&self, node: &NodeInfo) -> bool {
        let terms = &self.incoming.affinity;
        let mut pods_exist = true;
        for t in terms {
            match node.label(&t.topology_key) {
                Some(v) => {
                    if self.affinity.get(&t.topology_key, v) <= 0 {
                        pods_exist = false;
                    }
                }
                // Every topology label must exist, also for the first pod.
                None => return false,
            }
        }
        pods_exist || (self.affinity.is_empty() && self.incoming.matches_own_affinity)
    }

    /// Upstream `satisfyPodAntiAffinity`.
    fn satisfies_anti_affinity(&self, node: &NodeInfo) -> bool {
        if self.anti_affinity.is_empty() {
            return true;
        }
        !self.incoming.anti_affinity.iter().any(|t| {
            node.label(&t.topology_key)
                .is_some_and(|v| self.anti_affinity.get(&t.topology_key, v) > 0)
        })
    }

    /// Upstream `satisfyExistingPodsAntiAffinity`.
    fn satisfies_existing_anti_affinity(&self, node: &NodeInfo) -> bool {
        self.existing_anti_affinity.is_empty() || !self.existing_anti_affinity.any_positive_on(node)
    }
}

/// Upstream `getExistingAntiAffinityCounts`: over the nodes hosting pods
/// with required anti-affinity, +1 at `(key, node's value)` for each such
/// term the incoming pod matches.
fn existing_anti_affinity_counts(
    pod: &PodInfo,
    namespace_labels: &Labels,
    nodes: &[Arc<NodeInfo>],
) -> TopologyCounts {
    let mut counts = TopologyCounts::default();
    for node in nodes {
        for existing in &node.pods_with_required_anti_affinity {
            let Some(a) = existing.affinity.as_deref() else { continue };
            for t in &a.required_anti_affinity {
                if term_matches(t, pod, namespace_labels)
                    && let Some(v) = node.label(&t.topology_key)
                {
                    counts.add(&t.topology_key, v, 1);
                }
            }
        }
    }
    counts
}

/// Upstream `getIncomingAffinityAntiAffinityCounts`: over every pod of
/// every node, +1 at each term's `(key, node's value)` for a pod matching
/// all affinity terms, and for each anti-affinity term a pod matches.
fn incoming_counts(
    terms: &IncomingTerms,
    nodes: &[Arc<NodeInfo>],
) -> (TopologyCounts, TopologyCounts) {
    let mut affinity = TopologyCounts::default();
    let mut anti_affinity = TopologyCounts::default();
    if terms.affinity.is_empty() && terms.anti_affinity.is_empty() {
        return (affinity, anti_affinity);
    }
    let mut values: SmallVec<[Option<&str>; 4]> = SmallVec::new();
    for node in nodes {
        // The node's value of each term's key, looked up once per node; a
        // node with none of the keys records nothing.
        values.clear();
        let keys = terms.affinity.iter().chain(&terms.anti_affinity);
        values.extend(keys.map(|t| node.label(&t.topology_key)));
        if values.iter().all(Option::is_none) {
            continue;
        }
        let (aff_values, anti_values) = values.split_at(terms.affinity.len());
        for existing in &node.pods {
            if pod_matches_all(&terms.affinity, existing) {
                for (t, v) in terms.affinity.iter().zip(aff_values) {
                    if let Some(v) = v {
                        affinity.add(&t.topology_key, v, 1);
                    }
                }
            }
            for (t, v) in terms.anti_affinity.iter().zip(anti_values) {
                if let Some(v) = v
                    && term_matches(t, existing, no_labels())
                {
                    anti_affinity.add(&t.topology_key, v, 1);
                }
            }
        }
    }
    (affinity, anti_affinity)
}

impl PreFilterPlugin for InterPodAffinity {
    /// Skip when the pod has no required terms and no existing pod's
    /// required anti-affinity matches it; UnschedulableAndUnresolvable
    /// `parsing pod: ...` when its terms cannot be parsed.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        let (affinity, anti_affinity) = match pod.affinity.as_deref() {
            Some(a) => {
                if let Some(e) = &a.parse_error {
                    return (None, Status::unresolvable(format!("parsing pod: {e}")));
                }
                (&a.required_affinity[..], &a.required_anti_affinity[..])
            }
            None => (&[][..], &[][..]),
        };
        let with_anti_affinity = nodes.have_pods_with_required_anti_affinity_list();
        let no_terms = affinity.is_empty() && anti_affinity.is_empty();
        // The common case costs nothing: every count would be empty.
        if no_terms && with_anti_affinity.is_empty() {
            return (None, Status::skip());
        }
        let namespace_labels = self.objects.namespace_labels(pod.namespace());
        let existing_anti_affinity = existing_anti_affinity_counts(
            pod,
            namespace_labels.as_deref().unwrap_or(no_labels()),
            with_anti_affinity,
        );
        if no_terms && existing_anti_affinity.is_empty() {
            return (None, Status::skip());
        }
        let affinity: Vec<AffinityTerm> =
            affinity.iter().map(|t| self.merge_namespaces(t)).collect();
        let anti_affinity = anti_affinity.iter().map(|t| self.merge_namespaces(t)).collect();
        let matches_own_affinity = pod_matches_all(&affinity, pod);
        let incoming = IncomingTerms { affinity, anti_affinity, matches_own_affinity };
        let (affinity, anti_affinity) = incoming_counts(&incoming, nodes.list());
        state.write(PreFilterState {
            incoming: Arc::new(incoming),
            namespace_labels,
            existing_anti_affinity,
            affinity,
            anti_affinity,
        });
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl FilterPlugin for InterPodAffinity {
    /// In upstream's order: UnschedulableAndUnresolvable `node(s) didn't
    /// match pod affinity rules`; Unschedulable `node(s) didn't match pod
    /// anti-affinity rules`; Unschedulable `node(s) didn't satisfy existing
    /// pods anti-affinity rules`. Error when PreFilter did not run.
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>() else { return Status::error(NO_STATE) };
        if !s.satisfies_affinity(node) {
            return Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_anti_affinity(node) {
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_existing_anti_affinity(node) {
            return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        Status::success()
    }
}

/// Upstream `AddPod`/`RemovePod`: the counts with one pod more or fewer on
/// a node (preemption's what-ifs, nominated pods).
fn update_state(
    state: &mut CycleState,
    incoming: &PodInfo,
    pod: &PodInfo,
    node: &NodeInfo,
    n: i64,
) -> Status {
    let Some(s) = state.read::<PreFilterState>() else { return Status::error(NO_STATE) };
    let mut s = s.clone();
    s.update_with_pod(incoming, pod, node, n);
    state.write(s);
    Status::success()
}

impl PreFilterExtensions for InterPodAffinity {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        update_state(state, pod_to_schedule, pod_to_add, node, 1)
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        update_state(state, pod_to_schedule, pod_to_remove, node, -1)
    }
}
