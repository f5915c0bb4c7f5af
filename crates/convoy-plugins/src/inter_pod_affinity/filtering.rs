//! PreFilter, Filter and the PreFilter extensions (upstream
//! `interpodaffinity/filtering.go`, kube-scheduler v1.37.2, with the
//! `InterPodAffinityHostnameFastPath` gate off as it is by default: every
//! term, `kubernetes.io/hostname` included, goes through the topology
//! counts).
//!
//! PreFilter counts, per topology pair: existing pods whose required
//! anti-affinity the incoming pod matches (only nodes hosting such pods),
//! and, when the incoming pod has required terms, existing pods matching
//! all its affinity terms and existing pods matching each of its
//! anti-affinity terms (every node). The counts are sums of per-node
//! contributions kept between cycles (see the plugin's module): only the
//! nodes that changed since the entry's last use are walked again. Filter
//! then costs a few array reads per node (a label and hash lookup for a
//! node the rows do not know), and allocates nothing.

use std::sync::Arc;

use convoy_api::labels::{Labels, no_labels};
use convoy_api::{
    AffinityTerm, CycleState, FilterPlugin, NodeInfo, NodeInfoLister, PodInfo, PreFilterExtensions,
    PreFilterPlugin, PreFilterResult, Status,
};

use super::counts::{NodeValues, TopologyCounts};
use super::domains::{NodeRows, RowHint};
use super::memo::Sink;
use super::{InterPodAffinity, Memos, pod_matches_all, term_matches};

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
    /// For each affinity term, the index of its key in `affinity`.
    affinity_keys: Vec<Option<usize>>,
    /// For each anti-affinity term, the index of its key in `anti_affinity`.
    anti_affinity_keys: Vec<Option<usize>>,
    /// The nodes' value ids the counts are read with.
    rows: Option<Arc<NodeRows>>,
    hint: RowHint,
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
    fn satisfies_affinity(&self, at: &NodeValues<'_>) -> bool {
        let terms = self.incoming.affinity.iter().zip(&self.affinity_keys);
        let mut pods_exist = true;
        for (t, &i) in terms {
            match self.affinity.on_node(i, &t.topology_key, at) {
                Some(c) => {
                    if c <= 0 {
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
    fn satisfies_anti_affinity(&self, at: &NodeValues<'_>) -> bool {
        if self.anti_affinity.is_empty() {
            return true;
        }
        let mut terms = self.incoming.anti_affinity.iter().zip(&self.anti_affinity_keys);
        !terms.any(|(t, &i)| {
            self.anti_affinity.on_node(i, &t.topology_key, at).is_some_and(|c| c > 0)
        })
    }

    /// Upstream `satisfyExistingPodsAntiAffinity`.
    fn satisfies_existing_anti_affinity(&self, at: &NodeValues<'_>) -> bool {
        self.existing_anti_affinity.is_empty() || !self.existing_anti_affinity.any_positive_on(at)
    }
}

/// What the counts of existing pods' required anti-affinity depend on
/// besides the nodes: the incoming pod's namespace, labels and namespace
/// labels.
#[derive(Debug)]
pub(super) struct ExistingKey {
    namespace: Arc<str>,
    labels: Labels,
    namespace_labels: Labels,
}

impl ExistingKey {
    fn of(pod: &PodInfo, namespace_labels: &Labels) -> Self {
        Self {
            namespace: pod.key.namespace.clone(),
            labels: pod.labels().clone(),
            namespace_labels: namespace_labels.clone(),
        }
    }

    fn is(&self, pod: &PodInfo, namespace_labels: &Labels) -> bool {
        *self.namespace == *pod.namespace()
            && self.labels == *pod.labels()
            && self.namespace_labels == *namespace_labels
    }
}

/// Upstream `getExistingAntiAffinityCounts`, one node: +1 at `(key, node's
/// value)` for each required anti-affinity term of a pod of the node that
/// the incoming pod matches.
fn existing_anti_affinity_on(pod: &PodInfo, namespace_labels: &Labels, sink: &mut Sink<'_>) {
    for existing in &sink.node().pods_with_required_anti_affinity {
        let Some(a) = existing.affinity.as_deref() else { continue };
        for t in &a.required_anti_affinity {
            if term_matches(t, pod, namespace_labels) {
                sink.add(0, &t.topology_key, 1);
            }
        }
    }
}

/// The incoming pod's required terms, namespaces resolved: what its
/// affinity and anti-affinity counts depend on besides the nodes.
#[derive(Debug, PartialEq)]
pub(super) struct IncomingKey {
    affinity: Vec<AffinityTerm>,
    anti_affinity: Vec<AffinityTerm>,
}

/// The groups of the incoming counts in their memo entry.
const AFFINITY: u8 = 0;
const ANTI_AFFINITY: u8 = 1;

/// Upstream `getIncomingAffinityAntiAffinityCounts`, one node: +1 at each
/// affinity term's `(key, node's value)` for a pod matching all affinity
/// terms, and at an anti-affinity term's for each pod matching it.
fn incoming_on(terms: &IncomingKey, sink: &mut Sink<'_>) {
    let node = sink.node();
    // A node with none of the keys counts nothing.
    let keys = terms.affinity.iter().chain(&terms.anti_affinity);
    if keys.map(|t| node.label(&t.topology_key)).all(|v| v.is_none()) {
        return;
    }
    for existing in &node.pods {
        if pod_matches_all(&terms.affinity, existing) {
            for t in &terms.affinity {
                sink.add(AFFINITY, &t.topology_key, 1);
            }
        }
        for t in &terms.anti_affinity {
            if term_matches(t, existing, no_labels()) {
                sink.add(ANTI_AFFINITY, &t.topology_key, 1);
            }
        }
    }
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
        let ns_labels = namespace_labels.as_deref().unwrap_or(no_labels());
        let mut memos = self.memos();
        let pass = memos.begin(nodes.list().len());
        let Memos { topology, rows, existing_anti_affinity: existing, incoming: memo, .. } =
            &mut *memos;
        let existing = (!with_anti_affinity.is_empty()).then(|| {
            existing.refresh(
                pass,
                topology,
                nodes,
                |k| k.is(pod, ns_labels),
                || ExistingKey::of(pod, ns_labels),
                [],
                |sink| existing_anti_affinity_on(pod, ns_labels, sink),
            )
        });
        // The incoming pod's terms, resolved only when it has some.
        let key = (!no_terms).then(|| IncomingKey {
            affinity: affinity.iter().map(|t| self.merge_namespaces(t)).collect(),
            anti_affinity: anti_affinity.iter().map(|t| self.merge_namespaces(t)).collect(),
        });
        let incoming = key.as_ref().map(|key| {
            let keys = key.affinity.iter().map(|t| (AFFINITY, &t.topology_key));
            let anti_keys = key.anti_affinity.iter().map(|t| (ANTI_AFFINITY, &t.topology_key));
            memo.refresh(
                pass,
                topology,
                nodes,
                |k| k == key,
                || IncomingKey {
                    affinity: key.affinity.clone(),
                    anti_affinity: key.anti_affinity.clone(),
                },
                keys.chain(anti_keys),
                |sink| incoming_on(key, sink),
            )
        });
        // Before the counts are taken: the rows intern the values of nodes
        // that changed, which the counts' value ids must include.
        let rows = rows.sync(topology, nodes);
        let existing_anti_affinity = existing.map(|e| e.counts(0, topology)).unwrap_or_default();
        if no_terms && existing_anti_affinity.is_empty() {
            return (None, Status::skip());
        }
        let (affinity_counts, anti_affinity_counts) = incoming
            .map(|e| (e.counts(AFFINITY, topology), e.counts(ANTI_AFFINITY, topology)))
            .unwrap_or_default();
        drop(memos);
        let IncomingKey { affinity, anti_affinity } =
            key.unwrap_or(IncomingKey { affinity: Vec::new(), anti_affinity: Vec::new() });
        let matches_own_affinity = pod_matches_all(&affinity, pod);
        let key_indices = |terms: &[AffinityTerm], counts: &TopologyCounts| {
            terms.iter().map(|t| counts.key_index(&t.topology_key)).collect()
        };
        let affinity_keys = key_indices(&affinity, &affinity_counts);
        let anti_affinity_keys = key_indices(&anti_affinity, &anti_affinity_counts);
        let incoming = IncomingTerms { affinity, anti_affinity, matches_own_affinity };
        state.write(PreFilterState {
            incoming: Arc::new(incoming),
            namespace_labels,
            existing_anti_affinity,
            affinity: affinity_counts,
            anti_affinity: anti_affinity_counts,
            affinity_keys,
            anti_affinity_keys,
            rows: Some(rows),
            hint: RowHint::default(),
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
        let at = NodeValues::new(s.rows.as_deref(), node, &s.hint);
        if !s.satisfies_affinity(&at) {
            return Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_anti_affinity(&at) {
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_existing_anti_affinity(&at) {
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
