//! A gang that does not fit preempts as one unit (upstream v1.37.2's
//! `PodGroupPostFilter`, `framework/preemption/podgrouppreemption.go`,
//! with the whole cluster as its domain):
//!
//! 1. **Eligibility**: the group (`spec.preemptionPolicy`) or a member
//!    with `preemptionPolicy: Never` →
//!    `not eligible due to preemptionPolicy=Never.`; a member nominated to
//!    a node where a lower-priority pod is still terminating because of a
//!    preemption → `not eligible due to a terminating pod on the nominated
//!    node.` (the group waits for its earlier victims; nominations kept).
//! 2. **Victims**: every unit of lower priority than the group (its
//!    `spec.priority`, else the highest among its members): single pods, and whole running
//!    gangs at their group's priority (see `convoy_plugins::default_preemption::victims`).
//!    None → `No preemption victims found for incoming preemptor`.
//! 3. **Dry run** on a copy of the snapshot: all of them removed, the
//!    members placed one after another as the group cycle places them
//!    (each one's Filter sees the earlier ones); fewer than the group needs
//!    → nothing is preempted.
//! 4. **Reprieve**, most important unit first (those whose eviction would
//!    violate a PodDisruptionBudget first): the unit is added back, and it
//!    stays if every member still passes Filter on the node it was given,
//!    in placement order (upstream's `reprieveVictim`), or — Convoy's
//!    addition — if the group, placed once more around it, still fits
//!    (then that placement is kept). Upstream keeps the first placement,
//!    which may evict a unit another placement would spare.
//! 5. **Fewest victims** — Convoy's addition (issue 35; Volcano #5984
//!    evicted ten pods where one was enough). The reprieve keeps the most
//!    important units, not the most pods: an important pod whose room
//!    alone would do is kept while eight small pods go. When the reprieve
//!    left no PodDisruptionBudget violation, subsets of the units whose
//!    eviction violates none are tried by fewest pods (up to as many as
//!    the reprieve evicts), and among as many pods by fewest nodes with a
//!    victim, then the lower highest priority, then the lower sum of
//!    priorities (upstream's `pickOneNodeForPreemption` order after its
//!    PDB criterion), then the less important units; the first whose
//!    removal lets the group place (the dry run's placement) wins, with
//!    that placement. PDB-violating units are never traded for fewer
//!    victims: when the reprieve had to evict one, its answer stands, as
//!    does it when the search runs out of work (`SEARCH_WORK`).
//! 6. The remaining units are the victims; each placed member is
//!    nominated to its node.
//!
//! Cost: one group placement over the whole cluster plus, per candidate
//! unit, one Filter pass per member on its node and, when that fails, one
//! more group placement; each step copies the
//! node list (`Arc`s), and a node only when it changes. The search of step
//! 5 adds at most `SEARCH_WORK` (2^18) Filter passes of one member on one
//! node, a group placement costing members × nodes of them: exhaustive
//! when the cluster and the victims needed are small (thousands of
//! placements of a 4-member gang on 5 nodes), a handful of placements on
//! thousands of nodes, so the whole stays polynomial. It all runs only for a gang that does
//! not fit.

use std::sync::Arc;

use convoy_api::ObjectLister;
use convoy_api::preemption::GROUP_DOMAIN;
use convoy_api::preemption::terminating_by_preemption;
use convoy_api::{
    CycleState, GroupKey, NodeInfo, NodeList, PodGroup, PodInfo, PodNominator, QueuedPodInfo,
};
use convoy_framework::Framework;
use convoy_gang::group::can_still_succeed;
use convoy_plugins::default_preemption::victims::{
    Gangs, Victim, more_important_victim, split_units_by_pdb,
};
use convoy_plugins::default_preemption::{NOT_ELIGIBLE_NEVER, NOT_ELIGIBLE_TERMINATING};

use crate::decision::PreemptionDecision;
use crate::preempt::{Job, status_nomination};
use crate::scheduler::{LoopState, Scheduler};

/// Upstream's message when the group has nothing below it to preempt.
pub const NO_VICTIMS_FOR_GROUP: &str = "No preemption victims found for incoming preemptor";

/// Each placed member and the node it goes to.
type Assignments = Vec<(Arc<PodInfo>, Arc<str>)>;

/// What a group's preemption decided.
#[derive(Debug)]
pub(crate) enum GroupPostFilter {
    /// Preempt `victims`; nominate each member to its node.
    Preempt {
        /// Each placed member and the node it is nominated to.
        nominations: Assignments,
        /// The victims' pods, unit by unit, most important first.
        victims: Vec<Arc<PodInfo>>,
        /// How many of them violate a PodDisruptionBudget.
        pdb_violations: usize,
    },
    /// The group may not preempt now; its nominations stay.
    NotEligible(&'static str),
    /// Preemption cannot help; the members' nominations end.
    NotHelpful(String),
}

impl GroupPostFilter {
    /// The message, without the `pod group preemption: ` prefix.
    pub(crate) fn message(&self) -> String {
        match self {
            Self::Preempt { victims, .. } => {
                format!("found a placement for podgroup, preempting {} victims", victims.len())
            }
            Self::NotEligible(m) => (*m).to_string(),
            Self::NotHelpful(m) => m.clone(),
        }
    }
}

/// The nodes of the dry run: the snapshot's, copied on write.
#[derive(Clone)]
struct Work {
    nodes: Vec<Arc<NodeInfo>>,
    index: std::collections::HashMap<Arc<str>, usize>,
}

impl Work {
    fn new(nodes: &[Arc<NodeInfo>]) -> Self {
        let index = nodes.iter().enumerate().map(|(i, n)| (n.name_arc().clone(), i)).collect();
        Self { nodes: nodes.to_vec(), index }
    }

    fn node_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        let i = *self.index.get(name)?;
        Some(Arc::make_mut(&mut self.nodes[i]))
    }

    fn remove(&mut self, v: &Victim) {
        for (p, at) in v.pods.iter().zip(&v.nodes) {
            if let Some(n) = self.node_mut(at) {
                n.remove_pod(p);
            }
        }
    }

    fn add(&mut self, v: &Victim) {
        for (p, at) in v.pods.iter().zip(&v.nodes) {
            if let Some(n) = self.node_mut(at) {
                n.add_pod(p.clone());
            }
        }
    }

    fn lister(&self) -> NodeList {
        NodeList::new(self.nodes.clone())
    }
}

/// The work the search for fewer victims may spend, in Filter passes of
/// one member on one node (a group placement costs members × nodes; listing
/// one subset costs one): tens of milliseconds on a small cluster, a few
/// group placements on a large one.
const SEARCH_WORK: usize = 1 << 18;

/// The search for fewer victims: the group, the snapshot's nodes, and the
/// work left.
struct Search<'a> {
    fwk: &'a Framework,
    members: &'a [QueuedPodInfo],
    needed: usize,
    nodes: &'a [Arc<NodeInfo>],
    work: usize,
}

/// How a subset of `units` ranks among those with as many pods: fewer
/// nodes with a victim, then the lower highest priority, then the lower sum
/// of the victims' priorities (upstream's `pickOneNodeForPreemption` order
/// after its PDB criterion).
fn rank(units: &[Victim], set: &[usize]) -> (usize, i32, i64) {
    let mut nodes: Vec<&Arc<str>> = set.iter().flat_map(|&i| &units[i].nodes).collect();
    nodes.sort();
    nodes.dedup();
    let highest = set.iter().map(|&i| units[i].priority).max().unwrap_or(i32::MIN);
    let sum = set.iter().map(|&i| i64::from(units[i].priority) * units[i].pods.len() as i64).sum();
    (nodes.len(), highest, sum)
}

/// Every subset of `units` with `pods` pods in all (indices in increasing
/// order), each step spending one of `work`; `None` when it runs out.
fn subsets_with(units: &[Victim], pods: usize, work: &mut usize) -> Option<Vec<Vec<usize>>> {
    fn walk(
        units: &[Victim],
        from: usize,
        left: usize,
        set: &mut Vec<usize>,
        out: &mut Vec<Vec<usize>>,
        work: &mut usize,
    ) -> Option<()> {
        if left == 0 {
            out.push(set.clone());
            return Some(());
        }
        for i in from..units.len() {
            *work = work.checked_sub(1)?;
            let n = units[i].pods.len();
            if n <= left {
                set.push(i);
                walk(units, i + 1, left - n, set, out, work)?;
                set.pop();
            }
        }
        Some(())
    }
    let mut out = Vec::new();
    walk(units, 0, pods, &mut Vec::new(), &mut out, work)?;
    Some(out)
}

/// The priority a group preempts at: its `spec.priority` (upstream's API,
/// as upstream's `PodGroupPriority`), else the highest among its members.
pub(crate) fn group_priority(spec: &PodGroup, members: &[QueuedPodInfo]) -> i32 {
    let highest = || members.iter().map(|m| m.pod_info.priority).max().unwrap_or(0);
    spec.priority.unwrap_or_else(highest)
}

impl Scheduler {
    /// The group's preemption, carried out: records the decision, sets or
    /// clears the members' nominations, and starts the victims'
    /// preemption off the loop. Returns the message (without the
    /// `pod group preemption: ` prefix) for the group's failure.
    pub(crate) fn preempt_group(
        &self,
        fwk: &Framework,
        key: &GroupKey,
        spec: &PodGroup,
        members: &[QueuedPodInfo],
        needed: usize,
    ) -> String {
        let outcome = self.group_post_filter(fwk, key, spec, members, needed);
        let message = outcome.message();
        let priority = group_priority(spec, members);
        let Some(first) = members.first() else { return message };
        let mut decision = PreemptionDecision {
            pod: first.pod_info.key.clone(),
            profile: fwk.name().clone(),
            priority,
            node: None,
            victims: Vec::new(),
            message: format!("pod group preemption: {message}"),
            group: Some(key.clone()),
            chain: None,
        };
        let nominator = self.queue.nominator().clone();
        match outcome {
            GroupPostFilter::NotEligible(_) => {}
            GroupPostFilter::NotHelpful(_) => {
                for m in members {
                    let nominated = nominator.delete(&m.pod_info);
                    if nominated || status_nomination(&m.pod_info).is_some() {
                        self.write_nomination(m.pod_info.clone(), None);
                    }
                }
            }
            GroupPostFilter::Preempt { nominations, victims, pdb_violations } => {
                tracing::debug!(group = %key, pdb_violations, "pod group preemption chose its victims");
                decision.node = Some(Arc::from(GROUP_DOMAIN));
                decision.victims = victims.iter().map(|v| (v.key.clone(), v.priority)).collect();
                decision.chain = self.chain(&first.pod_info, &victims);
                // The room is the group's: lower-priority pods nominated
                // to its nodes look elsewhere, at once.
                let mut lower = Vec::new();
                for (_, node) in &nominations {
                    lower.extend(nominator.clear_lower_priority(node, priority));
                }
                lower.retain(|p| p.group.as_ref() != Some(key));
                for (pod, node) in &nominations {
                    nominator.nominate(pod.clone(), Some(node.clone()));
                }
                if !lower.is_empty() {
                    self.queue.activate(lower.iter().map(|p| &p.key));
                }
                self.sink.record_preemption(&decision);
                self.spawn_preemption(Job {
                    preemptor: first.pod_info.clone(),
                    group_uid: Some(spec.uid.clone()),
                    node: Arc::from(GROUP_DOMAIN),
                    victims,
                    lower,
                    nominations,
                });
                return message;
            }
        }
        self.sink.record_preemption(&decision);
        message
    }

    /// Runs the group's preemption (see the module docs). `members` are in
    /// placement order; `needed` members must fit.
    pub(crate) fn group_post_filter(
        &self,
        fwk: &Framework,
        key: &GroupKey,
        spec: &PodGroup,
        members: &[QueuedPodInfo],
        needed: usize,
    ) -> GroupPostFilter {
        if spec.never_preempts || members.iter().any(|m| m.pod_info.never_preempts()) {
            return GroupPostFilter::NotEligible(NOT_ELIGIBLE_NEVER);
        }
        let priority = group_priority(spec, members);
        let nominator = self.queue.nominator().clone();
        let mut ls = self.loop_state.lock();
        let ls = &mut *ls;
        self.cache.update_snapshot(&mut ls.snapshot);
        let nodes = ls.snapshot.nodes().to_vec();

        // 1) A member still waiting for its earlier victims.
        let saved: Vec<(Arc<PodInfo>, Arc<str>)> = members
            .iter()
            .filter_map(|m| Some((m.pod_info.clone(), nominator.nominated_node(&m.pod_info)?)))
            .collect();
        for (_, node) in &saved {
            let terminating = ls.snapshot.get(node).is_some_and(|n| {
                n.pods.iter().any(|p| p.priority < priority && terminating_by_preemption(&p.pod))
            });
            if terminating {
                return GroupPostFilter::NotEligible(NOT_ELIGIBLE_TERMINATING);
            }
        }

        // 2) Every unit below the group.
        let gangs = Gangs::collect(&nodes, |k| self.gang.gang_priority(k));
        let mut units = gangs.units_below(&nodes, priority, Some(key));
        if units.is_empty() {
            return GroupPostFilter::NotHelpful(NO_VICTIMS_FOR_GROUP.to_string());
        }

        // The members' own nominations would count twice in the dry run
        // (nominated there and placed there): they are set anew below.
        for (pod, _) in &saved {
            nominator.delete(pod);
        }

        // 3) All of them gone: does the group fit?
        let mut work = Work::new(&nodes);
        for u in &units {
            work.remove(u);
        }
        let mut assignments = match self.place_dry(fwk, members, needed, &work, ls) {
            Ok(a) => a,
            Err(why) => return GroupPostFilter::NotHelpful(why),
        };

        // 4) Reprieve the most important first.
        units.sort_by(more_important_victim);
        let pdbs = self.objects.pod_disruption_budgets();
        let (violating, non_violating) = split_units_by_pdb(&units, &pdbs);
        let without_pdb = non_violating.clone();
        let mut victims: Vec<Victim> = Vec::new();
        let mut pdb_violations = 0;
        let candidates = violating.into_iter().chain(non_violating.into_iter().map(|u| (u, 0)));
        for (u, count) in candidates {
            work.add(&u);
            if self.still_fits(fwk, &assignments, &work, ls) {
                continue;
            }
            // Upstream stops here (the placement found without any victim
            // is kept); Convoy places the group once more around the
            // reprieved unit, so that it does not evict a gang that another
            // placement of the members spares.
            if let Ok(other) = self.place_dry(fwk, members, needed, &work, ls) {
                assignments = other;
                continue;
            }
            work.remove(&u);
            pdb_violations += count;
            victims.push(u);
        }
        // 5) Fewer victims than the reprieve left, if the bounded search
        // finds them (never at the price of a PDB violation).
        if pdb_violations == 0 {
            let most = victims.iter().map(|v| v.pods.len()).sum();
            let mut search = Search { fwk, members, needed, nodes: &nodes, work: SEARCH_WORK };
            if let Some((fewer, placed)) = self.fewest_victims(&mut search, &without_pdb, most, ls)
            {
                victims = fewer;
                assignments = placed;
            }
        }
        victims.sort_by(more_important_victim);
        GroupPostFilter::Preempt {
            nominations: assignments,
            victims: victims.into_iter().flat_map(|v| v.pods).collect(),
            pdb_violations,
        }
    }

    /// Step 5 of the module docs: the first subset of `units`, by fewest
    /// pods (at most `most`) then [`rank`], whose removal lets the group
    /// place; `None` when none is found before the search's work runs out.
    fn fewest_victims(
        &self,
        s: &mut Search<'_>,
        units: &[Victim],
        most: usize,
        ls: &mut LoopState,
    ) -> Option<(Vec<Victim>, Assignments)> {
        // Least important first, so that of two subsets that rank the same
        // the one listed first (and kept) spares the more important units.
        let units: Vec<Victim> = units.iter().rev().cloned().collect();
        let units = &units[..];
        let placement = (s.members.len() * s.nodes.len()).max(1);
        let base = Work::new(s.nodes);
        for pods in 1..=most {
            let mut subsets = subsets_with(units, pods, &mut s.work)?;
            subsets.sort_by_cached_key(|set| rank(units, set));
            for set in subsets {
                s.work = s.work.checked_sub(placement)?;
                let mut work = base.clone();
                for &i in &set {
                    work.remove(&units[i]);
                }
                if let Ok(placed) = self.place_dry(s.fwk, s.members, s.needed, &work, ls) {
                    return Some((set.into_iter().map(|i| units[i].clone()).collect(), placed));
                }
            }
        }
        None
    }

    /// Places the members against `work` (the group cycle's order and
    /// rules, nothing assumed); the placed members and their nodes when at
    /// least `needed` fit.
    fn place_dry(
        &self,
        fwk: &Framework,
        members: &[QueuedPodInfo],
        needed: usize,
        work: &Work,
        ls: &mut LoopState,
    ) -> Result<Assignments, String> {
        let mut work = work.clone();
        let mut placed: Assignments = Vec::new();
        let mut first_failure = None;
        let n = members.len();
        for (i, m) in members.iter().enumerate() {
            if !can_still_succeed(placed.len(), n - i, needed) {
                break;
            }
            let lister = work.lister();
            let mut state = CycleState::new();
            state.skip_post_filter = true;
            let pod = &m.pod_info;
            let nodes = convoy_api::NodeInfoLister::list(&lister);
            match fwk.schedule_pod(&mut state, pod, &lister, nodes, &mut ls.next_start, &mut ls.rng)
            {
                Ok(r) => {
                    if let Some(node) = work.node_mut(&r.node) {
                        node.add_pod(pod.clone());
                    }
                    placed.push((pod.clone(), r.node));
                }
                Err(e) => {
                    first_failure.get_or_insert_with(|| format!("{}: {e}", pod.key));
                }
            }
        }
        if placed.len() >= needed {
            return Ok(placed);
        }
        Err(format!(
            "{}/{needed} pods fit even after preempting every pod of lower priority{}",
            placed.len(),
            first_failure.map(|f| format!(": {f}")).unwrap_or_default()
        ))
    }

    /// Whether every placed member still passes Filter on its node of
    /// `work`, in placement order (each one added before the next).
    fn still_fits(
        &self,
        fwk: &Framework,
        assignments: &[(Arc<PodInfo>, Arc<str>)],
        work: &Work,
        ls: &mut LoopState,
    ) -> bool {
        let mut work = work.clone();
        for (pod, node) in assignments {
            let lister = work.lister();
            let Some(target) = convoy_api::NodeInfoLister::get(&lister, node).cloned() else {
                return false;
            };
            let mut state = CycleState::new();
            state.skip_post_filter = true;
            let mut start = 0;
            let r = fwk.schedule_pod(&mut state, pod, &lister, &[target], &mut start, &mut ls.rng);
            if r.is_err() {
                return false;
            }
            if let Some(n) = work.node_mut(node) {
                n.add_pod(pod.clone());
            }
        }
        true
    }
}
