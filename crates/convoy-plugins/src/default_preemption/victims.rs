//! Which pods must go from one node for the preemptor to fit (upstream
//! `SelectVictimsOnNode` and `FilterVictimsWithPDBViolation`, v1.37.2).

use std::cmp::{Ordering, Reverse};
use std::sync::Arc;

use convoy_api::{CycleState, FilterRunner, NodeInfo, PodInfo, Status};

use super::{Budgets, NO_VICTIMS};

/// A pod's start time as a sortable key: nanoseconds since the epoch, or
/// "now" (later than any start) when it has not started, as upstream's
/// `GetPodStartTime`.
pub fn start_key(pod: &PodInfo) -> i128 {
    pod.start_time().map_or(i128::MAX, |t| t.0.as_nanosecond())
}

/// Upstream `MoreImportantVictim` for single pods: higher priority first,
/// then the one that started earlier.
pub fn more_important(a: &PodInfo, b: &PodInfo) -> Ordering {
    (Reverse(a.priority), start_key(a)).cmp(&(Reverse(b.priority), start_key(b)))
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
    let mut allowed: Vec<i64> = pdbs.iter().map(|p| i64::from(p.disruptions_allowed)).collect();
    let (mut violating, mut non_violating) = (Vec::new(), Vec::new());
    for v in victims {
        let mut violates = false;
        for (i, pdb) in pdbs.iter().enumerate() {
            if !pdb.covers(v.namespace(), v.labels()) || pdb.disrupted_pods.contains(&*v.key.name) {
                continue;
            }
            allowed[i] -= 1;
            if allowed[i] < 0 {
                violates = true;
                break;
            }
        }
        if violates { violating.push(v.clone()) } else { non_violating.push(v.clone()) }
    }
    (violating, non_violating)
}

/// Upstream `SelectVictimsOnNode`, on a copy of the node (`node`) and of
/// the cycle state (`state`): removes every pod of lower priority, checks
/// the preemptor fits, then adds back as many as still let it fit — first
/// those whose eviction would violate a PDB, then the others, most
/// important first. Returns the victims (most important first) and how
/// many of them violate a PDB; or the status of a node preemption cannot
/// help (UnschedulableAndUnresolvable [`NO_VICTIMS`], or the Filter status
/// without the victims), or an Error.
pub fn select_victims_on_node(
    state: &mut CycleState,
    pod: &PodInfo,
    node: &mut NodeInfo,
    pdbs: &Budgets,
    runner: &dyn FilterRunner,
) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
    let mut potential: Vec<Arc<PodInfo>> =
        node.pods.iter().filter(|p| p.priority < pod.priority).cloned().collect();
    if potential.is_empty() {
        return Err(Status::unresolvable(NO_VICTIMS));
    }
    let remove = |state: &mut CycleState, node: &mut NodeInfo, v: &PodInfo| {
        node.remove_pod(v);
        ok(runner.run_pre_filter_extension_remove_pod(state, pod, v, node))
    };
    for v in &potential {
        remove(state, node, v)?;
    }
    // If the pod does not fit even without them, this node cannot help
    // (a preemptor whose required affinity needs a victim is not handled,
    // as upstream).
    ok(runner.run_filter_plugins_with_nominated_pods(state, pod, node))?;

    potential.sort_by(|a, b| more_important(a, b));
    let (violating, non_violating) = split_by_pdb(&potential, pdbs);
    let mut victims = Vec::new();
    let mut reprieve = |state: &mut CycleState, node: &mut NodeInfo, v: &Arc<PodInfo>| {
        node.add_pod(v.clone());
        ok(runner.run_pre_filter_extension_add_pod(state, pod, v, node))?;
        let fits = runner.run_filter_plugins_with_nominated_pods(state, pod, node).is_success();
        if !fits {
            remove(state, node, v)?;
            victims.push(v.clone());
        }
        Ok::<bool, Status>(fits)
    };
    let mut violations = 0;
    for v in &violating {
        if !reprieve(state, node, v)? {
            violations += 1;
        }
    }
    for v in &non_violating {
        reprieve(state, node, v)?;
    }
    if !violating.is_empty() && !non_violating.is_empty() {
        victims.sort_by(|a, b| more_important(a, b));
    }
    Ok((victims, violations))
}

fn ok(s: Status) -> Result<(), Status> {
    if s.is_success() { Ok(()) } else { Err(s) }
}
