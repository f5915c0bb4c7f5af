//! InterPodAffinity: required pod affinity and anti-affinity in Filter,
//! preferred terms (and existing pods' terms, by symmetry) in Score, as
//! upstream's `pkg/scheduler/framework/plugins/interpodaffinity`
//! (`plugin.go`, `filtering.go`, `scoring.go`) in kube-scheduler **v1.37.2**,
//! with that release's default feature gates (`InterPodAffinityHostnameFastPath`
//! and `InPlacePodVerticalScalingSchedulerPreemption` off).
//!
//! - [`filtering`]: PreFilter counts matching pods per topology pair; Filter
//!   looks the node's pairs up (upstream's order, messages and codes);
//!   PreFilterExtensions update the counts for preemption.
//! - [`scoring`]: PreScore sums term weights per topology pair; Score reads
//!   the node's pairs; NormalizeScore is upstream's min-max in `f64`.
//! - `memo`: the counts kept between cycles, per node.
//! - `domains` and `counts`: topology values as dense ids, every node's ids,
//!   and the counts as the cycle state holds them.
//! - `hints`: the events that can make a rejected pod schedulable.
//!
//! Pods are taken from the snapshot as they are: assumed (not yet bound)
//! and terminating pods count, as upstream. The incoming pod's
//! `namespaceSelector` is resolved through the watched Namespaces
//! ([`ObjectLister`]); existing pods' terms are matched against the labels
//! of the incoming pod's namespace. `matchLabelKeys`/`mismatchLabelKeys`
//! are not read here: the API server merges them into `labelSelector` when
//! the pod is created (the embedded cluster does the same).
//!
//! # Cost
//!
//! Upstream walks every pod of every node in PreFilter and PreScore, each
//! cycle. Here each of those counts is a sum over nodes of a per-node
//! contribution that depends on the node (its labels and pods) and on a key
//! describing the incoming pod: its resolved required terms (the counts of
//! pods matching them), its namespace, labels and namespace labels (the
//! existing pods' required anti-affinity it matches), or all of those plus
//! its preferred terms (PreScore). The plugin keeps, for the few most
//! recently used keys, every node's contribution with the node's generation
//! and the sums; a cycle compares the snapshot's generation array with the
//! kept one and recomputes only the nodes that changed (between two cycles,
//! the node the last pod went to, and the one whose binding was confirmed).
//! Consecutive pods of one template share their keys, so a cycle costs a
//! scan of two `u64` arrays plus the pods of one or two nodes. The sums are
//! arrays indexed by interned topology value, handed to the cycle state by
//! `Arc` (copied, a `memcpy`, only when a state of an earlier cycle still
//! holds them). Filter and Score find a node's value ids in a table of rows
//! keyed by the node object's address (tried first at the row after the last
//! one found, as the framework visits nodes in list order): a few array
//! reads per node, no label lookup and no hashing of values.
//!
//! Results are upstream's exactly: the sums are the same sums, entries whose
//! count returns to 0 are absent as upstream deletes them, and a node
//! without a row is looked up by label. `tests/random.rs` checks a memoized
//! instance against a fresh one and against a direct transcription of
//! upstream over random clusters, cycles and mutations.
//!
//! A pod without pod affinity, in a cluster where no pod has required
//! anti-affinity, is skipped by PreFilter after two length checks, and by
//! PreScore when no node hosts a pod with affinity, without touching the
//! memo. Filter and Score never allocate. Memory: about 30 bytes per node
//! per kept key, plus the rows and interned values (a few hundred bytes per
//! node in all, nothing per pod; see `memo`).

mod counts;
mod domains;
pub mod filtering;
mod hints;
mod memo;
pub mod scoring;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use convoy_api::labels::{Labels, Selector, no_labels};
use convoy_api::{
    ActionType, AffinityTerm, ClusterEventWithHint, EventResource, FilterPlugin, ObjectLister,
    Plugin, PodInfo, PreFilterPlugin, PreScorePlugin, ScorePlugin, names,
};
use convoy_config::{InterPodAffinityArgs, PluginArgs};

use domains::{RowsMemo, Topology};
use filtering::{ExistingKey, IncomingKey};
use memo::Memo;
use scoring::ScoreKey;

pub use filtering::{
    ERR_REASON_AFFINITY_RULES_NOT_MATCH, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
};

/// The InterPodAffinity plugin.
#[derive(Debug)]
pub struct InterPodAffinity {
    args: InterPodAffinityArgs,
    objects: Arc<dyn ObjectLister>,
    /// Per-node counts kept between cycles (cycles run one at a time; the
    /// lock is for `Sync`).
    memos: Mutex<Memos>,
    resolved: Mutex<Resolved>,
}

impl InterPodAffinity {
    /// Builds the plugin from `InterPodAffinityArgs` (None: the defaults)
    /// and the cluster's Namespaces.
    pub fn new(args: Option<&PluginArgs>, objects: Arc<dyn ObjectLister>) -> Result<Self, String> {
        let args = match args {
            None => InterPodAffinityArgs::default(),
            Some(PluginArgs::InterPodAffinity(a)) => a.clone(),
            Some(other) => {
                return Err(format!("want args to be of type InterPodAffinityArgs, got {other:?}"));
            }
        };
        let w = args.hard_pod_affinity_weight;
        if !(0..=100).contains(&w) {
            return Err(format!(
                "hardPodAffinityWeight: Invalid value: {w}: not in valid range [0, 100]"
            ));
        }
        Ok(Self { args, objects, memos: Mutex::default(), resolved: Mutex::default() })
    }

    /// The memo, emptied if a panic left it half updated.
    fn memos(&self) -> MutexGuard<'_, Memos> {
        self.memos.lock().unwrap_or_else(|e: PoisonError<_>| {
            let mut m = e.into_inner();
            *m = Memos::default();
            self.memos.clear_poison();
            m
        })
    }

    /// Approximate heap bytes of the per-node counts kept between cycles
    /// (for memory reports).
    pub fn memo_heap_bytes(&self) -> usize {
        self.memos().heap_bytes()
    }

    /// Upstream `mergeAffinityTermNamespacesIfNotEmpty`, for the incoming
    /// pod's terms: a `namespaceSelector` other than `{}` is replaced by the
    /// names of the namespaces it selects now (added to `namespaces`).
    ///
    /// The names are kept per selector while the namespaces do not change
    /// (pods of one template resolve the same selector every cycle).
    fn merge_namespaces(&self, term: &AffinityTerm) -> AffinityTerm {
        let mut t = term.clone();
        if t.namespace_selector.is_everything() {
            return t;
        }
        if !t.namespace_selector.is_nothing() {
            // The version first: names read after it are at least as new.
            let version = self.objects.namespaces_version();
            let mut resolved = self.resolved.lock().unwrap_or_else(PoisonError::into_inner);
            if resolved.version != version {
                resolved.version = version;
                resolved.entries.clear();
            }
            let known = resolved.entries.iter().find(|(selector, listed, _)| {
                *selector == t.namespace_selector && *listed == t.namespaces
            });
            t.namespaces = match known {
                Some((_, _, names)) => names.clone(),
                None => {
                    let mut names = t.namespaces.to_vec();
                    names.extend(self.objects.namespaces_matching(&t.namespace_selector));
                    names.sort();
                    names.dedup();
                    let names = names.into_boxed_slice();
                    if resolved.entries.len() == RESOLVED_SELECTORS {
                        resolved.entries.remove(0);
                    }
                    let entry = (t.namespace_selector.clone(), t.namespaces.clone(), names.clone());
                    resolved.entries.push(entry);
                    names
                }
            };
        }
        t.namespace_selector = Selector::Nothing;
        t
    }
}

/// Selectors whose namespaces the plugin keeps.
const RESOLVED_SELECTORS: usize = 16;

/// Namespace names, sorted.
type Names = Box<[Arc<str>]>;

/// The namespaces incoming pods' `namespaceSelector`s selected: `(selector,
/// namespaces listed, all the names)`, valid while the namespaces' version
/// is `version`.
#[derive(Debug, Default)]
struct Resolved {
    version: u64,
    entries: Vec<(Selector, Names, Names)>,
}

/// Upstream `AffinityTerm.Matches` for a pod of the snapshot.
fn term_matches(t: &AffinityTerm, pod: &PodInfo, namespace_labels: &Labels) -> bool {
    t.matches(pod.namespace(), pod.labels(), namespace_labels)
}

/// Upstream `podMatchesAllAffinityTerms`: false for no terms. The terms are
/// the incoming pod's (namespaces resolved), so no namespace labels.
fn pod_matches_all(terms: &[AffinityTerm], pod: &PodInfo) -> bool {
    !terms.is_empty() && terms.iter().all(|t| term_matches(t, pod, no_labels()))
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        names::INTER_POD_AFFINITY
    }

    /// Upstream's three registrations. Upstream's `TargetPod` (the pending
    /// pod's own update) is Convoy's `UnscheduledPod`: the queue reports a
    /// pending pod's update as that event and no other unscheduled-pod
    /// event.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                EventResource::AssignedPod,
                ActionType::ADD | ActionType::UPDATE_POD_LABEL | ActionType::DELETE,
                hints::is_schedulable_after_assigned_pod_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::UnscheduledPod,
                ActionType::UPDATE_POD_LABEL,
                hints::is_schedulable_after_target_pod_update_label,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
                hints::is_schedulable_after_node_change,
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

/// Values of one key that may be stale before everything is rebuilt, beyond
/// twice the number of nodes (few in tests, so that they rebuild).
const STALE_SLACK: usize = if cfg!(test) { 0 } else { 1024 };

/// Everything the plugin keeps between cycles: the memos of its three
/// kinds of counts (the mechanism is in `memo`; the keys belong to the
/// phase that counts, `filtering` and `scoring`).
#[derive(Debug, Default)]
struct Memos {
    pass: u64,
    topology: Topology,
    /// Every node's value ids.
    rows: RowsMemo,
    /// Existing pods' required anti-affinity the incoming pod matches.
    existing_anti_affinity: Memo<ExistingKey>,
    /// Existing pods matching the incoming pod's required terms.
    incoming: Memo<IncomingKey>,
    /// PreScore's sums.
    score: Memo<ScoreKey>,
}

impl Memos {
    /// Starts a PreFilter or PreScore over `nodes` nodes; returns the pass
    /// number. Drops everything when stale topology values pile up.
    fn begin(&mut self, nodes: usize) -> u64 {
        if self.topology.too_large(nodes, STALE_SLACK) {
            *self = Self { pass: self.pass, ..Self::default() };
        }
        self.pass += 1;
        self.pass
    }

    /// Approximate heap bytes held.
    fn heap_bytes(&self) -> usize {
        self.topology.heap_bytes()
            + self.rows.heap_bytes()
            + self.existing_anti_affinity.heap_bytes()
            + self.incoming.heap_bytes()
            + self.score.heap_bytes()
    }
}

#[cfg(test)]
mod tests;
