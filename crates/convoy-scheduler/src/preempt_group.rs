//! A gang that does not fit preempts as one unit (upstream v1.37.2's
//! `PodGroupPostFilter`, `framework/preemption/podgrouppreemption.go`).
//! Its domain is the whole cluster, or, for a group that requires a
//! topology level, each domain of that level in turn (Convoy's addition:
//! upstream's takes the whole cluster): steps 3 to 5 run in every domain
//! with the units that have a pod there, and the domain whose answer
//! evicts the fewest pods wins (see *Choosing among domains*).
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
//!    (each one's Filter sees the earlier ones), inside the domain, and
//!    first inside one domain of each preferred level, narrowest first, as
//!    the group cycle tries them; fewer than the group needs → nothing is
//!    preempted.
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
//!    that placement. With preferred levels, a subset that lets the group
//!    land in one domain of a narrower level wins over one that ranks
//!    before it among as many pods (the search goes on through that many
//!    pods' subsets until one lands in the narrowest level's domain).
//!    PDB-violating units are never traded for fewer victims: when the
//!    reprieve had to evict one, its answer stands, as does it when the
//!    search runs out of work (`SEARCH_WORK`).
//! 6. The remaining units are the victims; each placed member is
//!    nominated to its node.
//!
//! **Choosing among domains** (a required level): the answer with the
//! fewest PodDisruptionBudget violations, then the fewest victim pods,
//! then the narrowest preferred level the group lands in one domain of,
//! then the ranking of step 5. So the fewest victims come before a
//! preferred placement: a preference never costs a pod more.
//!
//! Cost: one group placement over the whole cluster (over each required
//! domain: together the same nodes, plus one attempt per preferred domain
//! that has the room) plus, per candidate
//! unit, one Filter pass per member on its node and, when that fails, one
//! more group placement; each step copies the
//! node list (`Arc`s), and a node only when it changes. The search of step
//! 5 adds at most `SEARCH_WORK` (2^18) Filter passes of one member on one
//! node across all domains, a group placement costing members × the
//! domain's nodes of them: exhaustive
//! when the cluster and the victims needed are small (thousands of
//! placements of a 4-member gang on 5 nodes), a handful of placements on
//! thousands of nodes, so the whole stays polynomial. It all runs only for a gang that does
//! not fit.

use std::collections::HashSet;
use std::sync::Arc;

use convoy_api::ObjectLister;
use convoy_api::preemption::GROUP_DOMAIN;
use convoy_api::preemption::terminating_by_preemption;
use convoy_api::{
    CycleState, GroupKey, NodeInfo, NodeList, PodGroup, PodInfo, PodNominator, QueuedPodInfo,
};
use convoy_framework::Framework;
use convoy_gang::group::{
    can_still_succeed, domains, has_labels, narrowest_first, preferred_domains,
};
use convoy_plugins::default_preemption::Budgets;
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
/// group placements on a large one. One budget for all the domains.
const SEARCH_WORK: usize = 1 << 18;

/// The group's dry runs: the group, the snapshot's nodes, and the work
/// the search for fewer victims has left.
struct Search<'a> {
    fwk: &'a Framework,
    members: &'a [QueuedPodInfo],
    needed: usize,
    nodes: &'a [Arc<NodeInfo>],
    work: usize,
}

/// Where a dry run places the group: one domain of its required level (the
/// whole cluster without one), and inside it one domain of a preferred
/// level first.
struct Scope<'a> {
    /// The required level's key and this domain's value.
    required: Option<(&'a str, &'a str)>,
    /// The domain's nodes by name (`None`: every node).
    names: Option<HashSet<&'a str>>,
    /// How many nodes the domain has (what a placement costs the search).
    size: usize,
    /// The preferred levels, narrowest first.
    preferred: &'a [Arc<str>],
}

impl Scope<'_> {
    /// Whether `n` is in the domain.
    fn contains(&self, n: &NodeInfo) -> bool {
        self.required.is_none_or(|(k, v)| n.label(k) == Some(v))
    }

    /// Whether the unit has a pod in the domain (only those can make room
    /// there).
    fn touches(&self, u: &Victim) -> bool {
        self.names.as_ref().is_none_or(|names| u.nodes.iter().any(|n| names.contains(&**n)))
    }

    /// ` in KEY=VALUE`, for messages.
    fn describe(&self) -> String {
        self.required.map(|(k, v)| format!(" in {k}={v}")).unwrap_or_default()
    }
}

/// A dry run's placement: each placed member and its node, and the
/// preferred level one domain of which holds the group (its index,
/// narrowest first; the number of levels when none does).
#[derive(Clone)]
struct Placed {
    assignments: Assignments,
    level: usize,
}

/// One domain's answer: the victims, the placement they make room for,
/// and how many of them violate a PodDisruptionBudget.
struct Choice {
    victims: Vec<Victim>,
    placed: Placed,
    pdb_violations: usize,
}

impl Choice {
    /// The order answers are chosen in (lowest first; see the module
    /// docs, *Choosing among domains*).
    fn cost(&self) -> (usize, usize, usize, (usize, i32, i64)) {
        let all: Vec<usize> = (0..self.victims.len()).collect();
        let pods = self.victims.iter().map(|v| v.pods.len()).sum();
        (self.pdb_violations, pods, self.placed.level, rank(&self.victims, &all))
    }
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
        units.sort_by(more_important_victim);

        // The members' own nominations would count twice in the dry run
        // (nominated there and placed there): they are set anew below.
        for (pod, _) in &saved {
            nominator.delete(pod);
        }

        // The domains: each of the required level's, or the whole cluster.
        let levels: Vec<Arc<str>> = narrowest_first(&nodes, &spec.preferred_topology)
            .into_iter()
            .map(|(k, _)| k.clone())
            .collect();
        let required = spec.required_topology.as_deref();
        let by_value = required.map(|k| domains(&nodes, k)).unwrap_or_default();
        let scopes: Vec<Scope<'_>> = match required {
            Some(k) => by_value
                .iter()
                .map(|(v, ns)| Scope {
                    required: Some((k, v.as_str())),
                    names: Some(ns.iter().map(|n| n.name()).collect()),
                    size: ns.len(),
                    preferred: &levels,
                })
                .collect(),
            None => {
                vec![Scope { required: None, names: None, size: nodes.len(), preferred: &levels }]
            }
        };
        if let (Some(k), true) = (required, scopes.is_empty()) {
            return GroupPostFilter::NotHelpful(format!("no node has the label {k}"));
        }

        // 3) and 4) in each domain.
        let pdbs = self.objects.pod_disruption_budgets();
        let mut search = Search { fwk, members, needed, nodes: &nodes, work: SEARCH_WORK };
        let mut answers: Vec<(&Scope<'_>, Choice, Vec<Victim>)> = Vec::new();
        let mut first_failure = None;
        for scope in &scopes {
            let here: Vec<Victim> = units.iter().filter(|u| scope.touches(u)).cloned().collect();
            if here.is_empty() {
                continue;
            }
            match self.reprieve(&search, &here, &pdbs, scope, ls) {
                Ok((choice, without_pdb)) => answers.push((scope, choice, without_pdb)),
                Err(why) => {
                    first_failure.get_or_insert(why);
                }
            }
        }
        answers.sort_by_cached_key(|(_, c, _)| c.cost());
        let searchable: Vec<(&Scope<'_>, Vec<Victim>)> = answers
            .iter_mut()
            .filter(|(_, c, _)| c.pdb_violations == 0)
            .map(|(scope, _, without_pdb)| (*scope, std::mem::take(without_pdb)))
            .collect();
        let Some((_, mut best, _)) = answers.into_iter().next() else {
            return GroupPostFilter::NotHelpful(
                first_failure.unwrap_or_else(|| NO_VICTIMS_FOR_GROUP.to_string()),
            );
        };

        // 5) Fewer victims than the best answer, if the bounded search
        // finds them (never at the price of a PDB violation), the best
        // domain first.
        if best.pdb_violations == 0 {
            for (scope, units) in searchable {
                let most = best.cost().1;
                match self.fewest_victims(&mut search, &units, most, scope, ls) {
                    Some(c) if c.cost() < best.cost() => best = c,
                    _ if search.work == 0 => break,
                    _ => {}
                }
            }
        }
        let Choice { mut victims, placed, pdb_violations } = best;
        victims.sort_by(more_important_victim);
        GroupPostFilter::Preempt {
            nominations: placed.assignments,
            victims: victims.into_iter().flat_map(|v| v.pods).collect(),
            pdb_violations,
        }
    }

    /// Steps 3 and 4 of the module docs in one domain: every unit of
    /// `units` (most important first) removed, the group placed, then each
    /// unit added back if the group still fits. The domain's answer, and
    /// the units whose eviction violates no PodDisruptionBudget (what step
    /// 5 may search).
    fn reprieve(
        &self,
        s: &Search<'_>,
        units: &[Victim],
        pdbs: &Budgets,
        scope: &Scope<'_>,
        ls: &mut LoopState,
    ) -> Result<(Choice, Vec<Victim>), String> {
        let Search { fwk, members, needed, .. } = *s;
        let mut work = Work::new(s.nodes);
        for u in units {
            work.remove(u);
        }
        let mut placed = self.place_dry(fwk, members, needed, &work, scope, ls)?;
        let (violating, non_violating) = split_units_by_pdb(units, pdbs);
        let without_pdb = non_violating.clone();
        let mut victims: Vec<Victim> = Vec::new();
        let mut pdb_violations = 0;
        let candidates = violating.into_iter().chain(non_violating.into_iter().map(|u| (u, 0)));
        for (u, count) in candidates {
            work.add(&u);
            if self.still_fits(fwk, &placed.assignments, &work, ls) {
                continue;
            }
            // Upstream stops here (the placement found without any victim
            // is kept); Convoy places the group once more around the
            // reprieved unit, so that it does not evict a gang that another
            // placement of the members spares.
            if let Ok(other) = self.place_dry(fwk, members, needed, &work, scope, ls) {
                placed = other;
                continue;
            }
            work.remove(&u);
            pdb_violations += count;
            victims.push(u);
        }
        Ok((Choice { victims, placed, pdb_violations }, without_pdb))
    }

    /// Step 5 of the module docs in one domain: the first subset of
    /// `units`, by fewest pods (at most `most`) then [`rank`], whose
    /// removal lets the group place, preferring among as many pods one
    /// that lets it land in a narrower preferred level's domain; `None`
    /// when none is found before the search's work runs out.
    fn fewest_victims(
        &self,
        s: &mut Search<'_>,
        units: &[Victim],
        most: usize,
        scope: &Scope<'_>,
        ls: &mut LoopState,
    ) -> Option<Choice> {
        // Least important first, so that of two subsets that rank the same
        // the one listed first (and kept) spares the more important units.
        let units: Vec<Victim> = units.iter().rev().cloned().collect();
        let units = &units[..];
        let placement = (s.members.len() * scope.size).max(1);
        let base = Work::new(s.nodes);
        for pods in 1..=most {
            let mut subsets = subsets_with(units, pods, &mut s.work)?;
            subsets.sort_by_cached_key(|set| rank(units, set));
            let mut found: Option<(Vec<usize>, Placed)> = None;
            for set in subsets {
                let Some(left) = s.work.checked_sub(placement) else {
                    s.work = 0;
                    break;
                };
                s.work = left;
                let mut work = base.clone();
                for &i in &set {
                    work.remove(&units[i]);
                }
                let Ok(placed) = self.place_dry(s.fwk, s.members, s.needed, &work, scope, ls)
                else {
                    continue;
                };
                if found.as_ref().is_none_or(|(_, f)| placed.level < f.level) {
                    let narrowest = placed.level == 0;
                    found = Some((set, placed));
                    if narrowest {
                        break;
                    }
                }
            }
            if let Some((set, placed)) = found {
                let victims = set.into_iter().map(|i| units[i].clone()).collect();
                return Some(Choice { victims, placed, pdb_violations: 0 });
            }
            if s.work == 0 {
                return None;
            }
        }
        None
    }

    /// Places the members against `work` (the group cycle's order and
    /// rules, nothing assumed) inside the scope's domain: in one domain of
    /// a preferred level first (narrowest level first, best fit within a
    /// level, as the group cycle), then anywhere in the domain. The placed
    /// members and their nodes when at least `needed` fit.
    fn place_dry(
        &self,
        fwk: &Framework,
        members: &[QueuedPodInfo],
        needed: usize,
        work: &Work,
        scope: &Scope<'_>,
        ls: &mut LoopState,
    ) -> Result<Placed, String> {
        let base: Vec<(&str, &str)> = scope.required.into_iter().collect();
        let levels = scope.preferred;
        if !levels.is_empty() {
            let in_domain: Vec<Arc<NodeInfo>> =
                work.nodes.iter().filter(|n| scope.contains(n)).cloned().collect();
            for (key, value) in preferred_domains(&in_domain, levels, members) {
                let level = levels.iter().position(|k| *k == key).unwrap_or(levels.len());
                let mut labels = base.clone();
                labels.push((&key, &value));
                if let Ok(assignments) = self.place_in(fwk, members, needed, work, &labels, ls) {
                    return Ok(Placed { assignments, level });
                }
            }
        }
        match self.place_in(fwk, members, needed, work, &base, ls) {
            Ok(assignments) => Ok(Placed { assignments, level: levels.len() }),
            Err((placed, first_failure)) => Err(format!(
                "{placed}/{needed} pods fit{} even after preempting every pod of lower priority{}{}",
                scope.describe(),
                if scope.required.is_some() { " there" } else { "" },
                first_failure.map(|f| format!(": {f}")).unwrap_or_default()
            )),
        }
    }

    /// Places the members one after another on the nodes of `work` that
    /// have every label `(key, value)` of `labels`; the placements when at
    /// least `needed` fit, else how many fit and the first failure.
    fn place_in(
        &self,
        fwk: &Framework,
        members: &[QueuedPodInfo],
        needed: usize,
        work: &Work,
        labels: &[(&str, &str)],
        ls: &mut LoopState,
    ) -> Result<Assignments, (usize, Option<String>)> {
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
            let all = convoy_api::NodeInfoLister::list(&lister);
            let scoped: Vec<Arc<NodeInfo>>;
            let nodes = if labels.is_empty() {
                all
            } else {
                scoped = all.iter().filter(|n| has_labels(n, labels)).cloned().collect();
                &scoped
            };
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
        if placed.len() >= needed { Ok(placed) } else { Err((placed.len(), first_failure)) }
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
