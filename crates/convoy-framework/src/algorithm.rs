//! The scheduling algorithm of one pod against one snapshot: find feasible
//! nodes (Filter, in parallel, stopping after enough), rank them (Score,
//! NormalizeScore, weights) and pick the best (random among ties), as
//! upstream's `schedulePod`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use convoy_api::{
    Code, CycleState, FilterPlugin, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, NodeToStatus,
    NominatedPods, PodInfo, PostFilterResult, Status,
};
use rand::Rng;
use rayon::prelude::*;

use crate::framework::{Framework, PreFilterNarrowing, filter_block};
use crate::metrics::{FrameworkMetrics, label, timed};

/// Upstream `minFeasibleNodesToFind`.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// Upstream `minFeasibleNodesPercentageToFind`.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: u32 = 5;
/// Below this many nodes to find (Filter) or score, the work runs on the
/// calling thread: waking the pool costs more than it saves. Measured on 2
/// cores with the default plugins (~0.2 µs per node), a parallel pass over
/// 500 nodes was slower than a sequential one (docs/benchmarks.md).
const PARALLEL_THRESHOLD: usize = 2048;
/// Nodes per parallel work item.
const CHUNK: usize = 64;
/// The bounds of a block of nodes filtered plugin by plugin: large enough
/// that each plugin's per-block cost (reading its CycleState, one dynamic
/// call) is spread over many nodes, small enough that a cycle which finds
/// its nodes early filters few it does not need.
const BLOCK_MIN: usize = 16;
const BLOCK_MAX: usize = 256;

/// The `tracing` target of the per-node score events of
/// [`Framework::prioritize`], upstream's V(10) lines: enable it at TRACE
/// (`RUST_LOG=info,convoy::scores=trace`) to see them; when it is off, they
/// cost one check per cycle.
pub const SCORES_TARGET: &str = "convoy::scores";

/// How many feasible nodes to find before scoring, as upstream's
/// `numFeasibleNodesToFind`: all nodes below 100; otherwise the configured
/// percentage, or adaptively `50 - nodes/125` percent (at least 5%), and
/// never fewer than 100.
pub fn num_feasible_nodes_to_find(percentage: Option<u32>, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let mut pct = percentage.unwrap_or(0);
    if pct >= 100 {
        return num_all_nodes;
    }
    if pct == 0 {
        pct = 50u32.saturating_sub((num_all_nodes / 125) as u32);
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND {
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND;
        }
    }
    let n = num_all_nodes * pct as usize / 100;
    n.max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Why no node fits, per node and per plugin.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    /// Status of every rejected node.
    pub node_to_status: NodeToStatus,
    /// Plugins that rejected the pod somewhere (for requeueing).
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// Plugins that returned Pending.
    pub pending_plugins: BTreeSet<&'static str>,
    /// The PreFilter rejection message, if PreFilter rejected the pod.
    pub pre_filter_msg: String,
    /// The PostFilter message (preemption), if any.
    pub post_filter_msg: String,
    /// What PostFilter decided, when it ran (the profile has PostFilter
    /// plugins and the cycle did not skip them).
    pub post_filter: Option<PostFilterOutcome>,
    /// Filter ran and no node fits: the cycle's PostFilter step
    /// ([`Framework::post_filter_phase`], preemption) applies. A pod
    /// rejected as a whole (a refused field, PreFilter) or waiting for its
    /// victims on its nominated node does not preempt.
    pub post_filter_applies: bool,
    /// Nodes not in `node_to_status.map` that `node_to_status.absent`
    /// stands for (nodes a PreFilter result excluded).
    pub absent_nodes: usize,
}

/// The result of the PostFilter phase (preemption).
#[derive(Debug, Clone)]
pub struct PostFilterOutcome {
    /// `None` keeps the pod's nomination as it is; otherwise the nominated
    /// node (or none: clear it) and the victims to preempt.
    pub result: Option<PostFilterResult>,
    /// The phase's status (Success when a plugin found a placement).
    pub status: Status,
}

/// Count of rejected nodes per reason: each status's reasons once per node,
/// plus `absent`'s reasons for that many nodes. Counts on the borrowed
/// reasons and makes one `String` per distinct reason.
fn reasons_histogram<'a>(
    statuses: impl Iterator<Item = &'a Status>,
    absent: Option<(&'a Status, usize)>,
) -> BTreeMap<String, usize> {
    let mut h: BTreeMap<&str, usize> = BTreeMap::new();
    // Rejections mostly repeat one static reason: count runs of the same
    // string (by address, then content) before touching the map.
    let mut run: Option<(&str, usize)> = None;
    for s in statuses {
        for r in s.reasons() {
            let r: &str = r.as_ref();
            match &mut run {
                Some((last, n)) if std::ptr::eq(*last, r) || *last == r => *n += 1,
                _ => {
                    if let Some((last, n)) = run.replace((r, 1)) {
                        *h.entry(last).or_insert(0) += n;
                    }
                }
            }
        }
    }
    if let Some((last, n)) = run {
        *h.entry(last).or_insert(0) += n;
    }
    if let Some((absent, n)) = absent.filter(|(_, n)| *n > 0) {
        for r in absent.reasons() {
            *h.entry(r.as_ref()).or_insert(0) += n;
        }
    }
    h.into_iter().map(|(r, n)| (r.to_string(), n)).collect()
}

impl Diagnosis {
    /// A rejection of the pod as a whole (PreFilter, or a refused field):
    /// the status stands for all `nodes`, its message for the reasons.
    fn rejected_by_all(status: Status, nodes: usize) -> Self {
        let mut diagnosis = Diagnosis { pre_filter_msg: status.message(), ..Default::default() };
        if status.code() == Code::Pending {
            diagnosis.pending_plugins.insert(status.plugin());
        } else {
            diagnosis.unschedulable_plugins.insert(status.plugin());
        }
        diagnosis.node_to_status.absent = Some(status);
        diagnosis.absent_nodes = nodes;
        diagnosis
    }

    /// The pod waits for the victims it preempted on its nominated node
    /// `node`, which rejected it with `status`: the node's status names the
    /// plugins whose events requeue the pod (a pod deleted there ends the
    /// wait), the other nodes stand untried, and the PostFilter outcome
    /// keeps the nomination without preempting again.
    fn waiting_for_victims(node: &Arc<str>, status: Status, nodes: usize) -> Self {
        let msg = waiting_for_victims_message(node);
        let mut diagnosis = Diagnosis { pre_filter_msg: msg.clone(), ..Default::default() };
        diagnosis.record(node.clone(), status);
        if nodes > 1 {
            diagnosis.node_to_status.absent = Some(Status::unschedulable(msg.clone()));
            diagnosis.absent_nodes = nodes - 1;
        }
        diagnosis.post_filter =
            Some(PostFilterOutcome { result: None, status: Status::unschedulable(msg) });
        diagnosis
    }

    fn record(&mut self, node: Arc<str>, status: Status) {
        if status.code() == Code::Pending {
            self.pending_plugins.insert(status.plugin());
        } else if !status.plugin().is_empty() {
            self.unschedulable_plugins.insert(status.plugin());
        }
        self.node_to_status.map.insert(node, status);
    }

    /// Count of rejected nodes per reason (the reasons histogram),
    /// including the nodes a PreFilter result excluded.
    pub fn reasons(&self) -> BTreeMap<String, usize> {
        let absent = self.node_to_status.absent.as_ref().map(|s| (s, self.absent_nodes));
        reasons_histogram(self.node_to_status.map.values(), absent)
    }

    /// Nodes rejected: evaluated by Filter, or excluded by PreFilter.
    pub fn rejected_nodes(&self) -> usize {
        self.node_to_status.map.len() + self.absent_nodes
    }
}

/// Why a pod nominated to `node` fails while the victims it preempted there
/// terminate (the FitError reads `0/N nodes are available: waiting for the
/// pods preempted on node X to terminate.`).
pub fn waiting_for_victims_message(node: &str) -> String {
    format!("waiting for the pods preempted on node {node} to terminate")
}

/// No node fits the pod: upstream's `FitError`, whose message is the one
/// users know (`0/5000 nodes are available: 4200 Insufficient cpu, ...`).
#[derive(Debug, Clone)]
pub struct FitError {
    /// Nodes in the snapshot.
    pub num_all_nodes: usize,
    /// Why.
    pub diagnosis: Diagnosis,
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available:", self.num_all_nodes)?;
        let d = &self.diagnosis;
        if !d.pre_filter_msg.is_empty() {
            write!(f, " {}.", d.pre_filter_msg)?;
        } else {
            let mut items: Vec<String> =
                d.reasons().into_iter().map(|(reason, n)| format!("{n} {reason}")).collect();
            items.sort();
            if !items.is_empty() {
                write!(f, " {}.", items.join(", "))?;
            }
        }
        if !d.post_filter_msg.is_empty() {
            write!(f, " {}", d.post_filter_msg)?;
        }
        Ok(())
    }
}

/// Where the pod goes, and how the decision was reached.
#[derive(Debug, Clone)]
pub struct ScheduleResult {
    /// The chosen node.
    pub node: Arc<str>,
    /// Its total weighted score.
    pub score: i64,
    /// Nodes evaluated by Filter.
    pub evaluated: usize,
    /// Nodes that passed Filter.
    pub feasible: usize,
    /// Nodes rejected, by reason (for the decision log).
    pub rejected: BTreeMap<String, usize>,
}

/// Why scheduling failed.
#[derive(Debug, Clone)]
pub enum ScheduleError {
    /// No node fits.
    Fit(Box<FitError>),
    /// The snapshot holds no node.
    NoNodes,
    /// A plugin returned an Error.
    Internal(Status),
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::Fit(e) => e.fmt(f),
            ScheduleError::NoNodes => f.write_str("no nodes available to schedule pods"),
            ScheduleError::Internal(s) => write!(f, "{s}"),
        }
    }
}

/// One Filter pass: the plugins that run this cycle, the pods nominated to
/// nodes that the pod must leave room for, and the shared progress of a
/// parallel pass (stop once enough nodes fit).
struct Pass<'a> {
    filters: Vec<&'a Arc<dyn FilterPlugin>>,
    nominated: Option<&'a NominatedPods>,
    /// The node Filter starts from: traversal position `p` is node
    /// `(start + p) % nodes.len()`.
    start: usize,
    found: AtomicUsize,
    to_find: usize,
    stop: AtomicBool,
}

struct Chunk {
    /// Feasible nodes, by index into the nodes filtered, in traversal
    /// order (indices, not `Arc`s: no reference count touched per node).
    feasible: Vec<usize>,
    /// Rejected nodes, by index into the nodes filtered (no name copied:
    /// only a pod that fits nowhere needs them by name).
    rejected: Vec<(usize, Status)>,
    processed: usize,
    error: Option<Status>,
}

impl Framework {
    /// Schedules one pod on `nodes`, a snapshot's nodes or a subset of them
    /// (one topology domain of a gang); `snapshot` is the whole snapshot,
    /// which plugins that count pods across the cluster read. `next_start`
    /// is the rotating index Filter starts from (so successive pods spread
    /// their search over the whole cluster); it is advanced by the nodes
    /// processed.
    pub fn schedule_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &dyn NodeInfoLister,
        nodes: &[Arc<NodeInfo>],
        next_start: &mut usize,
        rng: &mut impl Rng,
    ) -> Result<ScheduleResult, ScheduleError> {
        if nodes.is_empty() {
            return Err(ScheduleError::NoNodes);
        }
        let fit_error = |diagnosis| {
            ScheduleError::Fit(Box::new(FitError { num_all_nodes: nodes.len(), diagnosis }))
        };

        // A field Convoy does not evaluate yet: refused before any plugin
        // runs, as a PreFilter rejection would be (every node, one message).
        if let Some(status) = self.refusal(pod) {
            return Err(fit_error(Diagnosis::rejected_by_all(status, nodes.len())));
        }
        // The pods nominated to nodes that this pod must leave room for;
        // `None` (no cost) when nothing is nominated.
        let nominated = self.nominated_for(pod);

        // PreFilter.
        self.begin_cycle(state);
        let metrics = self.metrics.clone();
        let (pre, status) = timed(
            metrics.as_ref(),
            "PreFilter",
            &self.name,
            || self.run_pre_filter(state, pod, snapshot),
            |(_, s)| label(s),
        );
        if !status.is_success() {
            if !status.is_rejected() {
                return Err(ScheduleError::Internal(status));
            }
            // No PostFilter for this, unlike upstream: the default plugins'
            // PreFilter rejections are unresolvable (preemption cannot
            // help), and a pod GangScheduling's starvation guard holds back
            // (Unschedulable) must not preempt others.
            return Err(fit_error(Diagnosis::rejected_by_all(status, nodes.len())));
        }

        // A pod nominated to a node (it preempted there) tries that node
        // first: if it fits, it goes there, unscored (upstream
        // `evaluateNominatedNode`).
        if let Some(node) = self.nominated_node(pod, snapshot, nodes) {
            let filters = self.active_filters(state);
            let s =
                self.run_filters_with_nominated(&filters, state, pod, &node, nominated.as_ref());
            if s.is_success() {
                return Ok(ScheduleResult {
                    node: node.name_arc().clone(),
                    score: 0,
                    evaluated: 1,
                    feasible: 1,
                    rejected: BTreeMap::new(),
                });
            }
            if !s.is_rejected() {
                return Err(ScheduleError::Internal(s));
            }
            // Its victims still terminate there: it waits for them rather
            // than taking room that appears elsewhere meanwhile (their
            // evictions would be wasted). The cycle fails without trying the
            // other nodes and without PostFilter, and the outcome keeps the
            // nomination. A node that can no longer take the pod
            // (unresolvable) falls through to all nodes, as upstream.
            if s.code() == Code::Unschedulable && self.waits_for_victims(state, pod, &node) {
                return Err(fit_error(Diagnosis::waiting_for_victims(
                    node.name_arc(),
                    s,
                    nodes.len(),
                )));
            }
        }
        let subset: Vec<Arc<NodeInfo>>;
        let candidates: &[Arc<NodeInfo>] = match pre.and_then(|r| r.node_names) {
            Some(names) => {
                let whole = nodes.len() == snapshot.list().len()
                    && std::ptr::eq(nodes.as_ptr(), snapshot.list().as_ptr());
                subset = if whole && names.len() * 16 < nodes.len() {
                    // A few names among many nodes (a DaemonSet pod's one
                    // node): looked up, not hashed against every node. In
                    // name order, so the result is the same every time
                    // (upstream walks the set in Go's random map order).
                    let mut found: Vec<Arc<NodeInfo>> =
                        names.iter().filter_map(|n| snapshot.get(n).cloned()).collect();
                    found.sort_by(|a, b| a.name().cmp(b.name()));
                    found
                } else {
                    nodes.iter().filter(|n| names.contains(n.name())).cloned().collect()
                };
                &subset
            }
            None => nodes,
        };

        // Filter.
        let to_find =
            num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, candidates.len());
        let start = if candidates.len() == nodes.len() { *next_start % nodes.len() } else { 0 };
        let chunk = timed(
            metrics.as_ref(),
            "Filter",
            &self.name,
            || self.find_feasible(state, pod, candidates, to_find, start, nominated.as_ref()),
            |c| match (&c.error, c.feasible.is_empty()) {
                (Some(_), _) => "Error",
                (None, true) => "Unschedulable",
                (None, false) => "Success",
            },
        );
        if let Some(e) = chunk.error {
            return Err(ScheduleError::Internal(e));
        }
        if candidates.len() == nodes.len() {
            *next_start = (start + chunk.processed) % nodes.len();
        }
        let absent = (candidates.len() < nodes.len()).then(|| {
            let plugins =
                state.read::<PreFilterNarrowing>().map(|n| n.0.join(" ")).unwrap_or_default();
            let status =
                Status::unresolvable(format!("node(s) didn't satisfy plugin(s) [{plugins}]"));
            (status, nodes.len() - candidates.len())
        });
        if chunk.feasible.is_empty() {
            // Only a pod that fits nowhere needs the per-node statuses
            // (PostFilter, the FitError); the others get the histogram.
            let mut diagnosis = Diagnosis::default();
            // Sized once: growing it node by node rehashed it about ten
            // times at 1,000 nodes.
            diagnosis.node_to_status.map.reserve(chunk.rejected.len());
            for (i, s) in chunk.rejected {
                diagnosis.record(candidates[i].name_arc().clone(), s);
            }
            if let Some((status, n)) = absent {
                diagnosis.node_to_status.absent = Some(status);
                diagnosis.absent_nodes = n;
            }
            // PostFilter (preemption) is the caller's next step.
            diagnosis.post_filter_applies = true;
            return Err(fit_error(diagnosis));
        }
        let rejected = reasons_histogram(
            chunk.rejected.iter().map(|(_, s)| s),
            absent.as_ref().map(|(s, n)| (s, *n)),
        );
        if let [only] = chunk.feasible[..] {
            return Ok(ScheduleResult {
                node: candidates[only].name_arc().clone(),
                score: 0,
                evaluated: chunk.processed,
                feasible: 1,
                rejected,
            });
        }

        // Score.
        let feasible: Vec<&NodeInfo> = chunk.feasible.iter().map(|&i| &*candidates[i]).collect();
        let totals =
            self.prioritize(state, pod, &feasible, snapshot).map_err(ScheduleError::Internal)?;
        let (best, score) = select_host(&totals, rng);
        Ok(ScheduleResult {
            node: feasible[best].name_arc().clone(),
            score,
            evaluated: chunk.processed,
            feasible: feasible.len(),
            rejected,
        })
    }

    /// Filters the nodes at traversal positions `positions` (see
    /// [`Pass::start`]), in that order,
    /// until enough fit. Batched (each plugin over a block of nodes, each
    /// such call timed in a sampled cycle); node by node when some pod is
    /// nominated (each node needs its own nominated pods).
    fn filter_range(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        positions: std::ops::Range<usize>,
        pass: &Pass<'_>,
        parallel: bool,
    ) -> Chunk {
        let metrics = self.plugin_metrics(state);
        if pass.nominated.is_some() {
            let order = positions.map(|p| (pass.start + p) % nodes.len());
            return self.filter_each(state, pod, nodes, order, pass, parallel);
        }
        filter_batched(state, pod, nodes, positions, pass, parallel, metrics)
    }

    /// [`filter_range`](Self::filter_range) node by node, each node with
    /// the pods nominated to it and each plugin call timed when sampled.
    fn filter_each(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        order: impl Iterator<Item = usize>,
        pass: &Pass<'_>,
        parallel: bool,
    ) -> Chunk {
        let mut c = Chunk { feasible: Vec::new(), rejected: Vec::new(), processed: 0, error: None };
        for i in order {
            if parallel && pass.stop.load(Ordering::Relaxed) {
                break;
            }
            let node = &nodes[i];
            // Nominated pods cost one lookup per node, and only in cycles
            // where some pod is nominated; the other cycles run the plain
            // filters directly.
            let s =
                self.run_filters_with_nominated(&pass.filters, state, pod, node, pass.nominated);
            c.processed += 1;
            if s.is_success() {
                c.feasible.push(i);
                let found = if parallel {
                    pass.found.fetch_add(1, Ordering::Relaxed) + 1
                } else {
                    c.feasible.len()
                };
                if found >= pass.to_find {
                    pass.stop.store(true, Ordering::Relaxed);
                    if !parallel {
                        break;
                    }
                }
            } else if s.is_rejected() {
                c.rejected.push((i, s));
            } else {
                pass.stop.store(true, Ordering::Relaxed);
                c.error = Some(s);
                break;
            }
        }
        c
    }

    fn find_feasible(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        to_find: usize,
        start: usize,
        nominated: Option<&NominatedPods>,
    ) -> Chunk {
        let n = nodes.len();
        let pass = Pass {
            filters: self.active_filters(state),
            nominated,
            start,
            found: AtomicUsize::new(0),
            to_find,
            stop: AtomicBool::new(false),
        };
        let pool = self
            .pool
            .as_ref()
            .filter(|p| p.current_num_threads() > 1 && to_find >= PARALLEL_THRESHOLD);
        let Some(pool) = pool else {
            return self.filter_range(state, pod, nodes, 0..n, &pass, false);
        };
        let chunks = n.div_ceil(CHUNK);
        let parts: Vec<Chunk> = pool.install(|| {
            (0..chunks)
                .into_par_iter()
                .map(|c| {
                    let lo = c * CHUNK;
                    let hi = (lo + CHUNK).min(n);
                    self.filter_range(state, pod, nodes, lo..hi, &pass, true)
                })
                .collect()
        });
        let mut all =
            Chunk { feasible: Vec::new(), rejected: Vec::new(), processed: 0, error: None };
        for p in parts {
            all.feasible.extend(p.feasible);
            all.rejected.extend(p.rejected);
            all.processed += p.processed;
            all.error = all.error.or(p.error);
        }
        all.feasible.truncate(to_find);
        all
    }

    /// Runs PreScore and Score over the feasible nodes, normalizes each
    /// plugin's scores, applies the weights and returns each node's total.
    /// With [`SCORES_TARGET`] enabled at TRACE, logs each plugin's weighted
    /// score and each total per node, as upstream does at V(10).
    pub fn prioritize(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        snapshot: &dyn NodeInfoLister,
    ) -> Result<Vec<i64>, Status> {
        if self.score.is_empty() {
            return Ok(vec![1; nodes.len()]);
        }
        let metrics = self.metrics.clone();
        let s = timed(
            metrics.as_ref(),
            "PreScore",
            &self.name,
            || self.run_pre_score(state, pod, nodes, snapshot),
            label,
        );
        if !s.is_success() {
            return Err(s);
        }
        let state: &CycleState = state;
        let score_start = std::time::Instant::now();
        let plugin_metrics = self.plugin_metrics(state);
        let plugins: Vec<_> = self
            .score
            .iter()
            .filter(|(p, _)| !state.skip_score_plugins.contains(&p.name()))
            .collect();
        let k = plugins.len();
        let n = nodes.len();
        let score_node = |node: &NodeInfo, out: &mut [i64]| -> Result<(), Status> {
            for (j, (p, _)) in plugins.iter().enumerate() {
                let started = plugin_metrics.map(|_| std::time::Instant::now());
                let r = p.score(state, pod, node);
                if let (Some(m), Some(t)) = (plugin_metrics, started) {
                    let status = r.as_ref().map_or_else(label, |_| "Success");
                    m.plugin(p.name(), "Score", status, t.elapsed());
                }
                out[j] = r.map_err(|s| s.with_plugin(p.name()))?;
            }
            Ok(())
        };
        // Plugin-major scores: plugin j's column is `scores[j * n..(j + 1) * n]`.
        let mut scores = vec![0i64; n * k];
        let pool =
            self.pool.as_ref().filter(|p| p.current_num_threads() > 1 && n >= PARALLEL_THRESHOLD);
        if k == 0 || pool.is_none() {
            // The common cycle: one call per plugin over all nodes, so each
            // plugin reads its cycle state once, not once per node; in a
            // sampled cycle each call is one observation.
            for (j, (p, _)) in plugins.iter().enumerate() {
                let started = plugin_metrics.map(|_| std::time::Instant::now());
                let r = p.score_nodes(state, pod, nodes, &mut scores[j * n..(j + 1) * n]);
                if let (Some(m), Some(t)) = (plugin_metrics, started) {
                    let status = r.as_ref().map_or_else(label, |_| "Success");
                    m.plugin(p.name(), "Score", status, t.elapsed());
                }
                r.map_err(|s| s.with_plugin(p.name()))?;
            }
        } else {
            // Node by node, in parallel over nodes (each plugin call timed
            // in a sampled cycle); node-major, then transposed.
            let mut by_node = vec![0i64; n * k];
            match pool {
                Some(pool) => pool.install(|| {
                    by_node.par_chunks_mut(k * CHUNK).enumerate().try_for_each(|(c, out)| {
                        for (i, o) in out.chunks_mut(k).enumerate() {
                            score_node(nodes[c * CHUNK + i], o)?;
                        }
                        Ok::<(), Status>(())
                    })
                })?,
                None => {
                    for (i, o) in by_node.chunks_mut(k.max(1)).enumerate().take(n) {
                        score_node(nodes[i], o)?;
                    }
                }
            }
            for i in 0..n {
                for j in 0..k {
                    scores[j * n + i] = by_node[i * k + j];
                }
            }
        }
        let mut totals = vec![0i64; n];
        // Each plugin's weighted score per node (node-major), kept only when
        // someone reads the score events.
        let mut weighted = if tracing::enabled!(target: SCORES_TARGET, tracing::Level::TRACE) {
            Some(vec![0i64; n * k])
        } else {
            None
        };
        for (j, (p, weight)) in plugins.iter().enumerate() {
            let column = &mut scores[j * n..(j + 1) * n];
            let s = p.normalize_score(state, pod, column);
            if !s.is_success() {
                return Err(s.with_plugin(p.name()));
            }
            for i in 0..n {
                let v = column[i];
                if !(0..=MAX_NODE_SCORE).contains(&v) {
                    return Err(Status::error(format!(
                        "plugin {} returned an invalid score {v} for node {}, should be in [0, {MAX_NODE_SCORE}]",
                        p.name(),
                        nodes[i].name()
                    )));
                }
                totals[i] += v * weight;
                if let Some(w) = &mut weighted {
                    w[i * k + j] = v * weight;
                }
            }
        }
        if let Some(w) = &weighted {
            let names: Vec<&str> = plugins.iter().map(|(p, _)| p.name()).collect();
            log_scores(pod, nodes, &names, w, &totals);
        }
        if let Some(m) = &self.metrics {
            m.extension_point("Score", "Success", &self.name, score_start.elapsed());
        }
        Ok(totals)
    }
}

/// The common Filter pass over the nodes at traversal positions
/// `positions` (see [`Framework::filter_range`]): each plugin filters a
/// block of nodes at a time; sequentially, the outcome is exactly that of
/// filtering node by node and stopping at the node that completes
/// `pass.to_find` (or at the first error).
fn filter_batched(
    state: &CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    positions: std::ops::Range<usize>,
    pass: &Pass<'_>,
    parallel: bool,
    metrics: Option<&Arc<dyn FrameworkMetrics>>,
) -> Chunk {
    let start = pass.start;
    let mut c = Chunk { feasible: Vec::new(), rejected: Vec::new(), processed: 0, error: None };
    let n = nodes.len();
    let mut next = positions.start;
    let mut block = Vec::with_capacity(BLOCK_MAX);
    let mut rejected = Vec::new();
    while next < positions.end {
        if parallel && pass.stop.load(Ordering::Relaxed) {
            break;
        }
        // A block as large as the nodes still to find (all of them may
        // fit), so a cycle filters few nodes it then discards.
        let want = if parallel {
            CHUNK
        } else {
            (pass.to_find - c.feasible.len()).clamp(BLOCK_MIN, BLOCK_MAX)
        };
        let end = (next + want).min(positions.end);
        block.clear();
        block.extend((next..end).map(|p| (start + p) % n));
        rejected.clear();
        filter_block(&pass.filters, state, pod, nodes, &mut block, &mut rejected, metrics);
        // The traversal position of a node of this block.
        let position = |i: usize| (i + n - start) % n;
        // Sequentially, the block is cut after the node that completes
        // the count: what lies beyond was never needed, as if the nodes
        // had been filtered one by one.
        let mut last = end;
        if !parallel && c.feasible.len() + block.len() >= pass.to_find {
            let cut = pass.to_find - c.feasible.len();
            last = position(block[cut - 1]) + 1;
            block.truncate(cut);
            rejected.retain(|&(i, _)| position(i) < last);
        }
        if let Some(k) = rejected
            .iter()
            .enumerate()
            .filter(|(_, (_, s))| !s.is_rejected())
            .min_by_key(|(_, (i, _))| position(*i))
            .map(|(k, _)| k)
        {
            // An error ends the pass, as at its node one by one.
            pass.stop.store(true, Ordering::Relaxed);
            let (i, s) = rejected.swap_remove(k);
            let at = position(i);
            c.processed += at + 1 - next;
            c.feasible.extend(block.iter().copied().filter(|&j| position(j) < at));
            c.rejected.extend(rejected.drain(..).filter(|(j, _)| position(*j) < at));
            c.error = Some(s);
            break;
        }
        c.processed += last - next;
        c.feasible.extend_from_slice(&block);
        c.rejected.append(&mut rejected);
        next = last;
        let found = if parallel {
            pass.found.fetch_add(block.len(), Ordering::Relaxed) + block.len()
        } else {
            c.feasible.len()
        };
        if found >= pass.to_find {
            pass.stop.store(true, Ordering::Relaxed);
            if !parallel {
                break;
            }
        }
    }
    c
}

/// Upstream's V(10) lines of `prioritizeNodes` (`schedule_one.go`, v1.37.2),
/// at TRACE on [`SCORES_TARGET`], in upstream's order: each node's score of
/// each plugin that was not skipped (normalized and weighted), then each
/// node's total. `weighted` is node-major, one column per plugin of `names`.
fn log_scores(
    pod: &PodInfo,
    nodes: &[&NodeInfo],
    names: &[&str],
    weighted: &[i64],
    totals: &[i64],
) {
    for (i, node) in nodes.iter().enumerate() {
        for (j, plugin) in names.iter().enumerate() {
            tracing::trace!(
                target: SCORES_TARGET,
                pod = %pod.key, plugin, node = node.name(), score = weighted[i * names.len() + j],
                "Plugin scored node for pod"
            );
        }
    }
    for (node, score) in nodes.iter().zip(totals) {
        tracing::trace!(
            target: SCORES_TARGET,
            pod = %pod.key, node = node.name(), score,
            "Calculated node's final score for pod"
        );
    }
}

/// The index and score of the best node; ties are broken uniformly at
/// random (reservoir sampling, as upstream).
pub fn select_host(totals: &[i64], rng: &mut impl Rng) -> (usize, i64) {
    let mut best = 0;
    let mut best_score = i64::MIN;
    let mut ties = 0u32;
    for (i, &s) in totals.iter().enumerate() {
        if s > best_score {
            best = i;
            best_score = s;
            ties = 1;
        } else if s == best_score {
            ties += 1;
            if rng.random_range(0..ties) == 0 {
                best = i;
            }
        }
    }
    (best, best_score)
}

/// A per-plugin count of statuses (for tests and logs).
pub fn count_by_plugin(statuses: &HashMap<Arc<str>, Status>) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for s in statuses.values() {
        *m.entry(s.plugin()).or_insert(0) += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::run_filters;
    use convoy_api::Plugin;
    use convoy_api::testing::{NodeBuilder, PodBuilder};
    use rand::SeedableRng;
    use std::time::Duration;

    /// A Filter plugin that decides by the number in the node's name
    /// (`n7` is 7).
    struct ByIndex(&'static str, fn(usize) -> Status);

    impl Plugin for ByIndex {
        fn name(&self) -> &'static str {
            self.0
        }
    }

    impl FilterPlugin for ByIndex {
        fn filter(&self, _state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
            (self.1)(node.name()[1..].parse().unwrap())
        }
    }

    /// Records plugin observations (a sampled cycle).
    #[derive(Default)]
    struct Observed(parking_lot::Mutex<Vec<(&'static str, &'static str)>>);

    impl FrameworkMetrics for Observed {
        fn sample(&self) -> bool {
            true
        }
        fn extension_point(&self, _: &'static str, _: &'static str, _: &Arc<str>, _: Duration) {}
        fn plugin(&self, plugin: &'static str, _: &'static str, status: &'static str, _: Duration) {
            self.0.lock().push((plugin, status));
        }
    }

    /// The batched Filter pass gives what filtering node by node gives:
    /// the same feasible nodes, the same nodes processed (so the next
    /// cycle starts at the same node), the same rejections with the
    /// rejecting plugin named, and the same error, whatever the block
    /// boundaries; timed (a sampled cycle) or not.
    #[test]
    fn batched_filter_is_node_by_node_filter() {
        let log = Arc::new(Observed::default());
        let observed: Arc<dyn FrameworkMetrics> = log.clone();
        let plugins: Vec<Arc<dyn FilterPlugin>> = vec![
            Arc::new(ByIndex("Thirds", |i| {
                if i % 3 == 0 { Status::unschedulable("third") } else { Status::success() }
            })),
            Arc::new(ByIndex("Sevens", |i| {
                if i % 7 == 1 { Status::unresolvable("seven") } else { Status::success() }
            })),
            Arc::new(ByIndex("Broken", |i| {
                if i == 777 { Status::error("broken") } else { Status::success() }
            })),
        ];
        let pod = PodBuilder::new("p").info();
        let state = CycleState::new();
        for n in [1, 5, 40, 300, 1000] {
            let nodes: Vec<Arc<NodeInfo>> =
                (0..n).map(|i| Arc::new(NodeBuilder::new(&format!("n{i}")).info())).collect();
            for (with, to_find) in [(2, 1), (2, 10), (3, 17), (3, 100), (2, 257), (3, 2000)] {
                let filters: Vec<_> = plugins.iter().take(with).collect();
                for start in [0, 1, n / 2, n - 1] {
                    let pass = || Pass {
                        filters: filters.clone(),
                        nominated: None,
                        start,
                        found: AtomicUsize::new(0),
                        to_find,
                        stop: AtomicBool::new(false),
                    };
                    let got = filter_batched(&state, &pod, &nodes, 0..n, &pass(), false, None);
                    let timed =
                        filter_batched(&state, &pod, &nodes, 0..n, &pass(), false, Some(&observed));
                    // Node by node, as upstream's sequential loop.
                    let (mut feasible, mut rejected, mut processed, mut error) =
                        (Vec::new(), Vec::new(), 0, None);
                    for p in 0..n {
                        let i = (start + p) % n;
                        let s = run_filters(&filters, &state, &pod, &nodes[i], None);
                        processed += 1;
                        if s.is_success() {
                            feasible.push(i);
                            if feasible.len() >= to_find {
                                break;
                            }
                        } else if s.is_rejected() {
                            rejected.push((i, s));
                        } else {
                            error = Some(s);
                            break;
                        }
                    }
                    let case =
                        format!("{n} nodes, {with} plugins, to_find {to_find}, start {start}");
                    assert_eq!(timed.feasible, got.feasible, "{case}: timed feasible");
                    assert_eq!(timed.processed, got.processed, "{case}: timed processed");
                    assert_eq!(timed.rejected, got.rejected, "{case}: timed rejected");
                    assert_eq!(timed.error, got.error, "{case}: timed error");
                    let got_feasible: Vec<usize> = got
                        .feasible
                        .iter()
                        .map(|&f| nodes[f].name()[1..].parse().unwrap())
                        .collect();
                    assert_eq!(got_feasible, feasible, "{case}: feasible");
                    assert_eq!(got.processed, processed, "{case}: processed");
                    let mut got_rejected = got.rejected;
                    got_rejected.sort_by_key(|(i, _)| (i + n - start) % n);
                    assert_eq!(got_rejected, rejected, "{case}: rejected");
                    assert_eq!(got.error, error, "{case}: error");
                }
            }
        }
        // One observation per plugin call over a block, with its outcome.
        let seen = std::mem::take(&mut *log.0.lock());
        assert!(seen.contains(&("Thirds", "Unschedulable")), "{seen:?}");
        assert!(seen.contains(&("Sevens", "UnschedulableAndUnresolvable")), "{seen:?}");
        assert!(seen.contains(&("Broken", "Success")), "{seen:?}");
    }

    #[test]
    fn feasible_nodes_to_find_as_upstream() {
        let cases = [
            (None, 10, 10),
            (None, 99, 99),
            (None, 1000, 420), // 50 - 8 = 42%
            (None, 5000, 500), // 50 - 40 = 10%
            (None, 6000, 300), // 50 - 48 = 2% -> 5%
            (Some(1), 5000, 100),
            (Some(100), 5000, 5000),
            (Some(50), 1000, 500),
        ];
        for (pct, all, want) in cases {
            assert_eq!(num_feasible_nodes_to_find(pct, all), want, "{pct:?} of {all}");
        }
    }

    #[test]
    fn select_host_picks_max_and_spreads_ties() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        assert_eq!(select_host(&[1, 5, 3], &mut rng), (1, 5));
        let mut seen = [0; 3];
        for _ in 0..300 {
            seen[select_host(&[7, 7, 7], &mut rng).0] += 1;
        }
        assert!(seen.iter().all(|&c| c > 50), "ties spread: {seen:?}");
    }

    #[test]
    fn reasons_histogram_counts_nodes_per_reason() {
        let mut many = Status::unschedulable("Insufficient cpu");
        many.push_reason(std::borrow::Cow::Borrowed("Insufficient memory"));
        let statuses = [Status::unschedulable("Insufficient cpu"), many];
        let absent = Status::unresolvable("node(s) didn't satisfy plugin(s) [X]");
        let h = reasons_histogram(statuses.iter(), Some((&absent, 5)));
        let want: BTreeMap<String, usize> = [
            ("Insufficient cpu".to_string(), 2),
            ("Insufficient memory".to_string(), 1),
            ("node(s) didn't satisfy plugin(s) [X]".to_string(), 5),
        ]
        .into();
        assert_eq!(h, want);
        assert!(reasons_histogram(statuses.iter(), Some((&absent, 0))).len() == 2);
    }

    #[test]
    fn fit_error_message_is_upstreams() {
        let mut d = Diagnosis::default();
        for i in 0..3 {
            d.record(
                Arc::from(format!("a{i}")),
                Status::unschedulable("Insufficient cpu").with_plugin("NodeResourcesFit"),
            );
        }
        d.record(
            Arc::from("b"),
            Status::unresolvable("node(s) had untolerated taint(s)").with_plugin("TaintToleration"),
        );
        let mut e = FitError { num_all_nodes: 4, diagnosis: d };
        assert_eq!(
            e.to_string(),
            "0/4 nodes are available: 1 node(s) had untolerated taint(s), 3 Insufficient cpu."
        );
        // The PostFilter message follows verbatim (upstream adds no period).
        e.diagnosis.post_filter_msg = "preemption: 0/4 nodes are available: 4 Preemption is \
            not helpful for scheduling."
            .to_string();
        assert_eq!(
            e.to_string(),
            "0/4 nodes are available: 1 node(s) had untolerated taint(s), 3 Insufficient cpu. \
             preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
        );
        assert_eq!(
            e.diagnosis.unschedulable_plugins.iter().copied().collect::<Vec<_>>(),
            vec!["NodeResourcesFit", "TaintToleration"]
        );
    }
}
