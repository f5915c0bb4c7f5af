//! Which pods must go from one node for the preemptor to fit (upstream
//! `SelectVictimsOnNode` and `FilterVictimsWithPDBViolation`, v1.37.2).
//!
//! A victim is a unit ([`Victim`]): one pod, or every running pod of a gang
//! group, on whatever node it runs (upstream v1.37's `DomainVictim` of a
//! PodGroup with `disruptionMode: All`). A unit is removed and reprieved
//! whole, at its priority (a gang's: the group's), so a running gang is
//! never left below its minimum by a preemption.

use std::cmp::{Ordering, Reverse};
use std::collections::HashMap;
use std::sync::Arc;

use convoy_api::{CycleState, FilterRunner, GroupKey, NodeInfo, NodeInfoLister, PodInfo, Status};

use super::{Budgets, NO_VICTIMS};

/// Upstream `MoreImportantVictim` for single pods: higher priority first,
/// then the one that started earlier.
pub fn more_important(a: &PodInfo, b: &PodInfo) -> Ordering {
    (Reverse(a.priority), a.start_key()).cmp(&(Reverse(b.priority), b.start_key()))
}

/// One preemption unit: a pod, or all running pods of a gang group.
#[derive(Debug, Clone)]
pub struct Victim {
    /// The pods that go together (for a gang, on every node).
    pub pods: Vec<Arc<PodInfo>>,
    /// The node of each pod (an assumed pod has no `spec.nodeName` yet).
    pub nodes: Vec<Arc<str>>,
    /// The unit's priority (a gang's: the group's).
    pub priority: i32,
    /// The gang group, if the unit is one.
    pub group: Option<GroupKey>,
}

impl Victim {
    /// A single pod on `node`, at its own priority.
    pub fn pod(pod: Arc<PodInfo>, node: Arc<str>) -> Self {
        Self { priority: pod.priority, pods: vec![pod], nodes: vec![node], group: None }
    }

    /// The earliest start among the unit's pods.
    pub fn earliest_start(&self) -> i128 {
        self.pods.iter().map(|p| p.start_key()).min().unwrap_or(i128::MAX)
    }
}

/// Upstream `MoreImportantVictim` (v1.37.2): higher priority; then a group
/// before a single pod; then the larger unit; then the earlier start.
pub fn more_important_victim(a: &Victim, b: &Victim) -> Ordering {
    let key = |v: &Victim| {
        (Reverse(v.priority), Reverse(v.group.is_some()), Reverse(v.pods.len()), v.earliest_start())
    };
    key(a).cmp(&key(b))
}

/// The running pods of every gang group, by group, with the group's
/// priority: built once per preemption attempt from the snapshot.
#[derive(Debug, Default, Clone)]
pub struct Gangs {
    by_group: HashMap<GroupKey, Victim>,
}

impl Gangs {
    /// Collects the gang members among the pods of `nodes`; `priority`
    /// says whether a group is a gang and at what priority it is preempted.
    pub fn collect(nodes: &[Arc<NodeInfo>], priority: impl Fn(&GroupKey) -> Option<i32>) -> Self {
        let mut by_group: HashMap<GroupKey, Victim> = HashMap::new();
        let mut not_gang: Vec<GroupKey> = Vec::new();
        for n in nodes {
            for p in &n.pods {
                let Some(key) = p.group.as_ref() else { continue };
                if let Some(v) = by_group.get_mut(key) {
                    v.pods.push(p.clone());
                    v.nodes.push(n.name_arc().clone());
                    continue;
                }
                if not_gang.contains(key) {
                    continue;
                }
                match priority(key) {
                    Some(prio) => {
                        let v = Victim {
                            pods: vec![p.clone()],
                            nodes: vec![n.name_arc().clone()],
                            priority: prio,
                            group: Some(key.clone()),
                        };
                        by_group.insert(key.clone(), v);
                    }
                    None => not_gang.push(key.clone()),
                }
            }
        }
        Self { by_group }
    }

    /// Whether there is no running gang.
    pub fn is_empty(&self) -> bool {
        self.by_group.is_empty()
    }

    /// The running gang `pod` belongs to, if any.
    fn gang_of(&self, pod: &PodInfo) -> Option<&Victim> {
        pod.group.as_ref().and_then(|k| self.by_group.get(k))
    }

    /// The priority a pod is preempted at: its gang group's, or its own.
    pub fn priority_of(&self, pod: &PodInfo) -> i32 {
        self.gang_of(pod).map_or(pod.priority, |v| v.priority)
    }

    /// The unit a pod running on `node` is preempted with.
    pub fn unit_of(&self, pod: &Arc<PodInfo>, node: &Arc<str>) -> Victim {
        match self.gang_of(pod) {
            Some(v) => v.clone(),
            None => Victim::pod(pod.clone(), node.clone()),
        }
    }

    /// Every unit (pods and gangs) running on `nodes` whose priority is
    /// below `priority`, except the pods of `own` (the preemptor's group).
    pub fn units_below(
        &self,
        nodes: &[Arc<NodeInfo>],
        priority: i32,
        own: Option<&GroupKey>,
    ) -> Vec<Victim> {
        let mut seen: Vec<&GroupKey> = Vec::new();
        let mut out = Vec::new();
        for n in nodes {
            for p in &n.pods {
                if let Some(g) = p.group.as_ref() {
                    if Some(g) == own || seen.contains(&g) {
                        continue;
                    }
                    if self.by_group.contains_key(g) {
                        seen.push(g);
                    }
                }
                let v = self.unit_of(p, n.name_arc());
                if v.priority < priority {
                    out.push(v);
                }
            }
        }
        out
    }
}

/// Upstream `FilterVictimsWithPDBViolation`: splits `victims` (in
/// importance order) into those whose eviction would take a
/// PodDisruptionBudget below zero and the others, keeping the order. Each
/// budget's `disruptionsAllowed` is spent in that order; a pod already in
/// a budget's `disruptedPods` does not spend it; a pod stops at the first
/// budget it takes below zero (v1.37).
pub fn split_by_pdb(
    victims: &[Arc<PodInfo>],
    pdbs: &Budgets,
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let none: Arc<str> = Arc::from("");
    let units: Vec<Victim> = victims.iter().map(|p| Victim::pod(p.clone(), none.clone())).collect();
    let (violating, non_violating) = split_units_by_pdb(&units, pdbs);
    let pods = |vs: Vec<Victim>| vs.into_iter().flat_map(|v| v.pods).collect();
    (pods(violating.into_iter().map(|(v, _)| v).collect()), pods(non_violating))
}

/// [`split_by_pdb`] over units: a unit violates when any of its pods does
/// (upstream v1.37: a group victim is atomic), and counts how many of its
/// pods do.
pub fn split_units_by_pdb(
    victims: &[Victim],
    pdbs: &Budgets,
) -> (Vec<(Victim, usize)>, Vec<Victim>) {
    let mut allowed: Vec<i64> = pdbs.iter().map(|p| i64::from(p.disruptions_allowed)).collect();
    let mut pod_violates = |v: &PodInfo| {
        for (i, pdb) in pdbs.iter().enumerate() {
            if !pdb.covers(v.namespace(), v.labels()) || pdb.disrupted_pods.contains(&*v.key.name) {
                continue;
            }
            allowed[i] -= 1;
            if allowed[i] < 0 {
                return true;
            }
        }
        false
    };
    let (mut violating, mut non_violating) = (Vec::new(), Vec::new());
    for v in victims {
        let count = v.pods.iter().filter(|p| pod_violates(p)).count();
        if count > 0 { violating.push((v.clone(), count)) } else { non_violating.push(v.clone()) }
    }
    (violating, non_violating)
}

/// Upstream `SelectVictimsOnNode`, on a copy of the node and of the cycle
/// state (made only when the node has a pod of lower priority, so the many
/// nodes of a busy cluster without one cost no copy): removes every unit
/// of lower priority with a pod there (a gang's pods on other nodes only through the PreFilter
/// extensions, with the snapshot's `nodes`, as upstream), checks the
/// preemptor fits, then adds back as many units as still let it fit —
/// first those whose eviction would violate a PDB, then the others, most
/// important first. Returns the victims' pods (unit by unit, most
/// important first) and how many of them violate a PDB; or the status of a
/// node preemption cannot help (UnschedulableAndUnresolvable
/// [`NO_VICTIMS`], or the Filter status without the victims), or an Error.
pub fn select_victims_on_node(
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    pdbs: &Budgets,
    gangs: &Gangs,
    nodes: &dyn NodeInfoLister,
    runner: &dyn FilterRunner,
) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
    let own = pod.group.as_ref();
    let mut potential: Vec<Victim> = Vec::new();
    for p in &node.pods {
        // Most pods on a node the dry run visits are not victims: their
        // priority is checked before a unit is built for them.
        if p.group.as_ref().is_some_and(|g| Some(g) == own) || gangs.priority_of(p) >= pod.priority
        {
            continue;
        }
        let v = gangs.unit_of(p, node.name_arc());
        let dup = v.group.is_some() && potential.iter().any(|u| u.group == v.group);
        if !dup {
            potential.push(v);
        }
    }
    if potential.is_empty() {
        return Err(Status::unresolvable(NO_VICTIMS));
    }
    let (mut state, mut node) = (state.clone(), node.clone());
    let (state, node) = (&mut state, &mut node);
    let main = node.name_arc().clone();
    let remove = |state: &mut CycleState, node: &mut NodeInfo, v: &Victim| {
        for (p, at) in v.pods.iter().zip(&v.nodes) {
            if *at == main {
                node.remove_pod(p);
                ok(runner.run_pre_filter_extension_remove_pod(state, pod, p, node))?;
            } else if let Some(remote) = nodes.get(at) {
                ok(runner.run_pre_filter_extension_remove_pod(state, pod, p, remote))?;
            }
        }
        Ok::<(), Status>(())
    };
    let add = |state: &mut CycleState, node: &mut NodeInfo, v: &Victim| {
        for (p, at) in v.pods.iter().zip(&v.nodes) {
            if *at == main {
                node.add_pod(p.clone());
                ok(runner.run_pre_filter_extension_add_pod(state, pod, p, node))?;
            } else if let Some(remote) = nodes.get(at) {
                ok(runner.run_pre_filter_extension_add_pod(state, pod, p, remote))?;
            }
        }
        Ok::<(), Status>(())
    };
    for v in &potential {
        remove(state, node, v)?;
    }
    // If the pod does not fit even without them, this node cannot help
    // (a preemptor whose required affinity needs a victim is not handled,
    // as upstream).
    ok(runner.run_filter_plugins_with_nominated_pods(state, pod, node))?;

    potential.sort_by(more_important_victim);
    let (violating, non_violating) = split_units_by_pdb(&potential, pdbs);
    let mut victims: Vec<Victim> = Vec::new();
    let mut reprieve = |state: &mut CycleState, node: &mut NodeInfo, v: &Victim| {
        add(state, node, v)?;
        let fits = runner.run_filter_plugins_with_nominated_pods(state, pod, node).is_success();
        if !fits {
            remove(state, node, v)?;
            victims.push(v.clone());
        }
        Ok::<bool, Status>(fits)
    };
    let mut violations = 0;
    for (v, count) in &violating {
        if !reprieve(state, node, v)? {
            violations += count;
        }
    }
    for v in &non_violating {
        reprieve(state, node, v)?;
    }
    if !violating.is_empty() && !non_violating.is_empty() {
        victims.sort_by(more_important_victim);
    }
    Ok((victims.into_iter().flat_map(|v| v.pods).collect(), violations))
}

fn ok(s: Status) -> Result<(), Status> {
    if s.is_success() { Ok(()) } else { Err(s) }
}
