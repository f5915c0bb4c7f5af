//! DefaultPreemption: the PostFilter plugin that, for a pod that fits
//! nowhere, finds pods of lower priority whose removal would let it fit
//! (upstream `plugins/defaultpreemption` and `framework/preemption`,
//! v1.37.2, async preemption on). A victim is one pod, or a whole running
//! gang at its group's priority (upstream's `DomainVictim` with
//! `disruptionMode: All`; see [`victims`]), when the scheduler hands the
//! plugin its gang state (`Handle::groups`).
//!
//! 1. **Eligibility**: `preemptionPolicy: Never` → `not eligible due to
//!    preemptionPolicy=Never.`; a pod nominated to a node that still hosts
//!    a lower-priority pod terminating because of a preemption waits for
//!    it (`not eligible due to a terminating pod on the nominated node.`),
//!    unless that node now rejects it as unresolvable. Convoy's extension,
//!    off by default: with `replacementPreemptionDelaySeconds`, a pod whose
//!    owner had a pod preempted within that many seconds (its replacement)
//!    does not preempt (`not eligible: a pod of the same owner ...`), which
//!    stops preemption cascades.
//! 2. **Potential nodes**: those whose Filter status is exactly
//!    Unschedulable (UnschedulableAndUnresolvable nodes cannot be helped).
//! 3. **Dry run** ([`victims::select_victims_on_node`]) on copies of the
//!    potential nodes, from a random offset, in parallel over many nodes,
//!    until at least one candidate violates no PodDisruptionBudget and
//!    `max(n × minCandidateNodesPercentage / 100, minCandidateNodesAbsolute)`
//!    candidates are found.
//! 4. **Pick** one candidate ([`pick::pick_one_node`]): fewest PDB
//!    violations, lowest highest victim priority, smallest priority sum,
//!    fewest victims, latest start of the most important victims, first.
//!
//! The plugin does no IO: it returns the node and the victims; the
//! scheduler nominates the pod and deletes the victims off the loop.
//! Messages are upstream's, prefixed `preemption: `.

pub mod pick;
pub mod victims;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use convoy_api::objects::DisruptionBudget;
use convoy_api::preemption::terminating_by_preemption;
use convoy_api::{
    Code, CycleState, Handle, NodeInfo, NodeToStatus, ObjectLister, Plugin, PodInfo,
    PostFilterContext, PostFilterPlugin, PostFilterResult, PreEnqueuePlugin, PreemptionGroups,
    RunningPreemptions, Status, names,
};
use convoy_config::{DefaultPreemptionArgs, PluginArgs};
use lists::Lists;

pub use pick::pick_one_node;
pub use victims::{Gangs, Victim, select_victims_on_node};

/// Message when the pod's `preemptionPolicy` is `Never`.
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// Message when victims of an earlier preemption are still terminating on
/// the pod's nominated node.
pub const NOT_ELIGIBLE_TERMINATING: &str =
    "not eligible due to a terminating pod on the nominated node.";
/// The status of every node preemption did not try or could not help.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// PreEnqueue's message while the pod's preemption is carried out.
pub const WAITING_FOR_PREEMPTION: &str = "waiting for the preemption for this pod to be finished";

/// A node without pods of lower priority.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// One node where preempting `victims` lets the pod fit.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The node.
    pub node: Arc<str>,
    /// The pods to preempt, most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// How many of them violate a PodDisruptionBudget.
    pub num_pdb_violations: usize,
}

/// The DefaultPreemption plugin.
#[derive(Debug)]
pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
    objects: Arc<dyn ObjectLister>,
    groups: Option<Arc<dyn PreemptionGroups>>,
    running: Arc<RunningPreemptions>,
}

impl DefaultPreemption {
    /// Builds the plugin from `DefaultPreemptionArgs` (validated by the
    /// configuration; `None`: upstream's defaults) and the handle's
    /// cluster objects (the PodDisruptionBudgets).
    pub fn new(args: Option<&PluginArgs>, handle: &Handle) -> Result<Self, String> {
        let args = match args {
            None => DefaultPreemptionArgs::default(),
            Some(PluginArgs::DefaultPreemption(a)) => a.clone(),
            Some(other) => return Err(format!("want DefaultPreemptionArgs, got {other:?}")),
        };
        Ok(Self {
            args,
            objects: handle.objects.clone(),
            groups: handle.groups.clone(),
            running: handle.running_preemptions.clone(),
        })
    }

    /// Upstream `calculateNumCandidates`: how many candidates the dry run
    /// keeps, out of `n` potential nodes.
    pub fn num_candidates(&self, n: usize) -> usize {
        let pct = usize::try_from(self.args.min_candidate_nodes_percentage).unwrap_or(0);
        let abs = usize::try_from(self.args.min_candidate_nodes_absolute).unwrap_or(0);
        (n * pct / 100).max(abs).min(n)
    }

    /// Upstream `Evaluator.Preempt`, without the `preemption: ` prefix.
    fn preempt(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
        ctx: &PostFilterContext<'_>,
    ) -> (Option<PostFilterResult>, Status) {
        // 1) Eligibility.
        if let Err(msg) = self.eligible(pod, statuses, ctx) {
            return (None, Status::unschedulable(msg));
        }
        // Convoy's cascade guard: a replacement of a pod preempted
        // moments ago does not preempt in turn.
        let delay = self.args.replacement_preemption_delay_seconds;
        if delay > 0
            && let Some((p, ago)) =
                self.running.replaced_within(pod, Duration::from_secs(delay as u64))
        {
            let msg = format!(
                "not eligible: a pod of the same owner ({}), {}, was preempted {}s ago by {}; \
                 its replacements do not preempt for {delay}s (replacementPreemptionDelaySeconds).",
                p.owner,
                p.victim,
                ago.as_secs(),
                p.preemptor
            );
            return (None, Status::unschedulable(msg));
        }
        // 2) Candidates.
        let all = ctx.nodes.list();
        if all.is_empty() {
            return (None, Status::error("no nodes available"));
        }
        let (candidates, failed, errors) = self.find_candidates(state, pod, statuses, ctx);
        if candidates.is_empty() {
            if let Some(e) = errors.into_iter().next() {
                return (None, e);
            }
            let msg = fit_error_message(all.len(), &failed);
            let clear = PostFilterResult { nominated_node_name: None, victims: Vec::new() };
            return (Some(clear), Status::unschedulable(msg));
        }
        // 3) No extenders. 4) The best candidate.
        let best = pick_one_node(candidates);
        let mut status = Status::new(Code::Success);
        status.push_reason(format!(
            "found a potential placement for pod on node {}, preempting {} victims",
            best.node,
            best.victims.len()
        ));
        (
            Some(PostFilterResult {
                nominated_node_name: Some(best.node.clone()),
                victims: best.victims,
            }),
            status,
        )
    }

    /// The running gangs of the snapshot (none when the scheduler has no
    /// gang state).
    fn gangs(&self, ctx: &PostFilterContext<'_>) -> Gangs {
        match &self.groups {
            Some(g) => Gangs::collect(ctx.nodes.list(), |k| g.gang_priority(k)),
            None => Gangs::default(),
        }
    }

    /// Upstream `PodEligibleToPreemptOthers`.
    fn eligible(
        &self,
        pod: &PodInfo,
        statuses: &NodeToStatus,
        ctx: &PostFilterContext<'_>,
    ) -> Result<(), &'static str> {
        if pod.never_preempts() {
            return Err(NOT_ELIGIBLE_NEVER);
        }
        let Some(nominated) = ctx.runner.nominated_node(pod) else { return Ok(()) };
        let status = statuses.map.get(&nominated).or(statuses.absent.as_ref());
        if status.is_some_and(|s| s.code() == Code::UnschedulableAndUnresolvable) {
            return Ok(());
        }
        if let Some(node) = ctx.nodes.get(&nominated) {
            let terminating = node
                .pods
                .iter()
                .any(|p| p.priority < pod.priority && terminating_by_preemption(&p.pod));
            if terminating {
                return Err(NOT_ELIGIBLE_TERMINATING);
            }
        }
        Ok(())
    }

    /// Upstream `findCandidates` and `DryRunPreemption`: the candidates
    /// (those violating no PDB first), the status of every node tried
    /// that is not one, and the errors met.
    #[allow(clippy::type_complexity)]
    fn find_candidates(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
        ctx: &PostFilterContext<'_>,
    ) -> (Vec<Candidate>, Vec<(Arc<str>, Status)>, Vec<Status>) {
        let potential: Vec<&Arc<NodeInfo>> = ctx
            .nodes
            .list()
            .iter()
            .filter(|n| {
                statuses
                    .map
                    .get(n.name_arc())
                    .or(statuses.absent.as_ref())
                    .is_some_and(|s| s.code() == Code::Unschedulable)
            })
            .collect();
        let n = potential.len();
        if n == 0 {
            tracing::debug!(pod = %pod.key, "preemption will not help schedule the pod on any node");
            return (Vec::new(), Vec::new(), Vec::new());
        }
        let pdbs = self.objects.pod_disruption_budgets();
        let gangs = self.gangs(ctx);
        let offset = (ctx.random % n as u64) as usize;
        let wanted = self.num_candidates(n);
        let lists = Lists::new(wanted);
        let stop = AtomicBool::new(false);
        let check = |i: usize| {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let node = potential[(offset + i) % n];
            match select_victims_on_node(state, pod, node, &pdbs, &gangs, ctx.nodes, ctx.runner) {
                Ok((victims, _)) if victims.is_empty() => {
                    let e = Status::error(format!(
                        "expected at least one victim pod on node {:?}",
                        node.name()
                    ));
                    lists.failed(node.name_arc().clone(), e);
                }
                Ok((victims, violations)) => {
                    let c = Candidate {
                        node: node.name_arc().clone(),
                        victims,
                        num_pdb_violations: violations,
                    };
                    if lists.add(c) {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                Err(s) => lists.failed(node.name_arc().clone(), s),
            }
        };
        ctx.runner.parallelize(n, &check);
        lists.into_parts()
    }
}

/// The dry run's results, filled from several threads.
mod lists {
    use std::sync::{Arc, Mutex};

    use convoy_api::{Code, Status};

    use super::Candidate;

    #[derive(Default)]
    struct Inner {
        non_violating: Vec<Candidate>,
        violating: Vec<Candidate>,
        failed: Vec<(Arc<str>, Status)>,
        errors: Vec<Status>,
    }

    /// Upstream's two bounded candidate lists and the failed nodes.
    pub(super) struct Lists {
        capacity: usize,
        inner: Mutex<Inner>,
    }

    impl Lists {
        pub(super) fn new(capacity: usize) -> Self {
            Self { capacity, inner: Mutex::new(Inner::default()) }
        }

        fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
            self.inner.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// Adds a candidate (dropped once its list is full); true when the
        /// dry run may stop: a candidate violating no PDB exists and
        /// enough were found.
        pub(super) fn add(&self, c: Candidate) -> bool {
            let mut l = self.lock();
            let list =
                if c.num_pdb_violations == 0 { &mut l.non_violating } else { &mut l.violating };
            if list.len() < self.capacity {
                list.push(c);
            }
            !l.non_violating.is_empty()
                && l.non_violating.len() + l.violating.len() >= self.capacity
        }

        pub(super) fn failed(&self, node: Arc<str>, status: Status) {
            let mut l = self.lock();
            if status.code() == Code::Error {
                l.errors.push(status.clone());
            }
            l.failed.push((node, status));
        }

        #[allow(clippy::type_complexity)]
        pub(super) fn into_parts(self) -> (Vec<Candidate>, Vec<(Arc<str>, Status)>, Vec<Status>) {
            let mut l = self.inner.into_inner().unwrap_or_else(|e| e.into_inner());
            l.non_violating.append(&mut l.violating);
            (l.non_violating, l.failed, l.errors)
        }
    }
}

/// Upstream's FitError text for the nodes preemption could not help:
/// `0/N nodes are available: <count> <reason>, ...` (sorted), every node
/// not in `failed` counted as [`NOT_HELPFUL`].
pub fn fit_error_message(num_all_nodes: usize, failed: &[(Arc<str>, Status)]) -> String {
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for (_, s) in failed {
        for r in s.reasons() {
            *reasons.entry(r.to_string()).or_insert(0) += 1;
        }
    }
    if failed.len() < num_all_nodes {
        *reasons.entry(NOT_HELPFUL.to_string()).or_insert(0) += num_all_nodes - failed.len();
    }
    let mut items: Vec<String> = reasons.into_iter().map(|(r, n)| format!("{n} {r}")).collect();
    items.sort();
    let mut msg = format!("0/{num_all_nodes} nodes are available:");
    if !items.is_empty() {
        msg.push(' ');
        msg.push_str(&items.join(", "));
        msg.push('.');
    }
    msg
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        names::DEFAULT_PREEMPTION
    }

    fn as_post_filter(self: Arc<Self>) -> Option<Arc<dyn PostFilterPlugin>> {
        Some(self)
    }

    fn as_pre_enqueue(self: Arc<Self>) -> Option<Arc<dyn PreEnqueuePlugin>> {
        Some(self)
    }
}

impl PreEnqueuePlugin for DefaultPreemption {
    /// Upstream's (v1.37.2, async preemption): a pod whose preemption is
    /// still being carried out waits, UnschedulableAndUnresolvable, until
    /// its victims are seen terminating (see
    /// [`convoy_api::RunningPreemptions`]); the scheduler then activates it.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if self.running.is_running(&pod.uid) {
            return Status::unresolvable(WAITING_FOR_PREEMPTION);
        }
        Status::success()
    }
}

impl PostFilterPlugin for DefaultPreemption {
    /// Success with the node and the victims; Unschedulable with upstream's
    /// message when the pod may not or need not preempt (no result: the
    /// nomination is kept) or when preemption would not help (a result
    /// without a node: the nomination is cleared); Error when a plugin
    /// failed during the dry run and no candidate was found.
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
        ctx: &PostFilterContext<'_>,
    ) -> (Option<PostFilterResult>, Status) {
        let (result, status) = self.preempt(state, pod, statuses, ctx);
        let msg = status.message();
        if msg.is_empty() {
            return (result, status);
        }
        let mut prefixed = Status::new(status.code());
        prefixed.push_reason(format!("preemption: {msg}"));
        (result, prefixed)
    }
}

/// What preemption reads of the cluster's PodDisruptionBudgets.
pub type Budgets = [Arc<DisruptionBudget>];

#[cfg(test)]
mod tests;
