//! The reservation plan of a starving gang: the nodes where it will land
//! soonest, and the pods it waits for there.
//!
//! A gang that cannot be placed in a busy cluster would wait for room that
//! smaller pods take as soon as it frees. The plan picks the nodes that can
//! hold its pending members once the fewest pods of its priority or lower
//! leave them; while the gang starves, only those nodes are held (no other
//! pod of its priority or lower may take them) and the rest of the cluster
//! keeps scheduling (backfill). Pods of higher priority are not held back
//! and are not waited for. The plan also tells by when the pods it waits
//! for are gone by what they declare ([`Plan::ready_by`]): pods that end
//! before that may use the held nodes meanwhile.
//!
//! The plan is pure arithmetic on the snapshot's resources (what each
//! member needs against what each node would have free), with the
//! members' other constraints (taints, selectors, affinity) checked by the
//! caller's `feasible` on each candidate node. Per node, the pods to wait
//! for are taken in the order they are likely to leave: terminating pods
//! first, then the oldest. Nodes are chosen by fewest pods to wait for per
//! member held, then by the start of the newest pod to wait for (the
//! earlier, the sooner the node is free), then by name; with a required
//! topology key, in the one domain that needs the fewest. With preferred
//! levels, as the group cycle places a group: the plan is made in one
//! domain of the narrowest preferred level (the key with the most distinct
//! values) that can hold the group once its pods leave, the one that needs
//! the fewest; then of the next level; only then across the required
//! domain. A previous plan
//! whose nodes can still hold the gang is kept, so the wait only shrinks
//! while the cluster stays as it is.
//!
//! Cost: one pass over every node's pods, plus `feasible` on the nodes that
//! have room once their pods leave; made only at a starving gang's failed
//! attempts.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use convoy_api::{GroupKey, NodeInfo, PodInfo, PodKey, Resource};

/// What a plan chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The nodes held for the gang, in the order chosen.
    pub nodes: Vec<Arc<str>>,
    /// The pods on them the gang waits for.
    pub waits: Vec<PodKey>,
    /// Each one's [`PodInfo::declared_end`], in the same order.
    pub ends: Vec<Option<i128>>,
}

impl Plan {
    /// By when every pod waited for, except those in `except`, is gone by
    /// what it declares (nanoseconds since the epoch; the earliest time
    /// when none is left); `None` when one of them declares no end. A pod
    /// whose own declared end comes earlier can use the held nodes
    /// meanwhile without delaying the gang.
    pub fn ready_by(&self, except: &HashSet<PodKey>) -> Option<i128> {
        self.waits
            .iter()
            .zip(&self.ends)
            .filter(|(key, _)| !except.contains(*key))
            .try_fold(i128::MIN, |latest, (_, end)| end.map(|e| latest.max(e)))
    }
}

/// One node's offer: how many members it can hold once its pods of the
/// gang's priority or lower leave, and which of them must leave for each
/// count.
#[derive(Debug)]
struct Offer {
    name: Arc<str>,
    /// `leavers[..needed[k - 1]]` must leave for `k` members to fit.
    needed: Vec<usize>,
    /// Those pods, in leaving order.
    leavers: Vec<Arc<PodInfo>>,
}

impl Offer {
    fn slots(&self) -> usize {
        self.needed.len()
    }

    /// Pods to wait for when `k` members go here, and the start of the
    /// newest of them (`i128::MIN` when none).
    fn cost(&self, k: usize) -> (usize, i128) {
        let n = self.needed[k - 1];
        let newest = self.leavers[..n].iter().map(|p| p.start_key()).max().unwrap_or(i128::MIN);
        (n, newest)
    }
}

/// Whether `free` holds `unit` (every resource, and its pod).
fn fits(free: &Resource, unit: &Resource) -> bool {
    free.milli_cpu >= unit.milli_cpu
        && free.memory >= unit.memory
        && free.ephemeral_storage >= unit.ephemeral_storage
        && free.allowed_pods >= unit.allowed_pods.max(1)
        && unit.scalar.iter().all(|(k, v)| free.scalar.get(k).copied().unwrap_or(0) >= *v)
}

/// The node's offer for members of size `unit`, at most `max` of them;
/// `None` when it can hold none even once its pods leave.
fn offer(
    node: &NodeInfo,
    unit: &Resource,
    max: usize,
    priority: i32,
    own: &GroupKey,
) -> Option<Offer> {
    node.node()?;
    if node.unschedulable() || node.invalid.is_some() {
        return None;
    }
    let mut leavers: Vec<Arc<PodInfo>> = node
        .pods
        .iter()
        .filter(|p| p.priority <= priority && p.group.as_ref() != Some(own))
        .cloned()
        .collect();
    leavers.sort_by_key(|p| (!p.is_terminating(), p.start_key()));
    let mut free = node.allocatable.clone();
    free.sub(&node.requested);
    let mut needed = Vec::new();
    let mut gone = 0;
    while needed.len() < max {
        while !fits(&free, unit) && gone < leavers.len() {
            free.add(&leavers[gone].requests.requests);
            gone += 1;
        }
        if !fits(&free, unit) {
            break;
        }
        free.sub(unit);
        needed.push(gone);
    }
    (!needed.is_empty()).then(|| Offer { name: node.name_arc().clone(), needed, leavers })
}

/// Chooses nodes among `offers` for `count` members: a previous plan's
/// nodes if they still hold them all, else greedily by fewest pods to wait
/// for per member, newest such pod earliest, then name. The plan and its
/// total wait, or `None` if the offers cannot hold `count`.
fn choose(offers: &[&Offer], count: usize, previous: &HashSet<Arc<str>>) -> Option<(Plan, usize)> {
    let kept: Vec<&Offer> = offers.iter().copied().filter(|o| previous.contains(&o.name)).collect();
    let chosen: Vec<(&Offer, usize)> = if !previous.is_empty()
        && kept.len() == previous.len()
        && kept.iter().map(|o| o.slots()).sum::<usize>() >= count
    {
        let mut left = count;
        kept.into_iter()
            .map(|o| {
                let k = o.slots().min(left);
                left -= k;
                (o, k)
            })
            .filter(|(_, k)| *k > 0)
            .collect()
    } else {
        if offers.iter().map(|o| o.slots()).sum::<usize>() < count {
            return None;
        }
        let mut left = count;
        let mut taken = vec![false; offers.len()];
        let mut chosen = Vec::new();
        while left > 0 {
            let best = offers
                .iter()
                .enumerate()
                .filter(|(i, _)| !taken[*i])
                .map(|(i, o)| {
                    let k = o.slots().min(left);
                    let (waits, newest) = o.cost(k);
                    // Pods to wait for per member, compared without division.
                    ((waits * count / k, newest, o.name.clone()), i, k)
                })
                .min_by(|a, b| a.0.cmp(&b.0))?;
            let (_, i, k) = best;
            taken[i] = true;
            left -= k;
            chosen.push((offers[i], k));
        }
        chosen
    };
    let mut plan = Plan { nodes: Vec::new(), waits: Vec::new(), ends: Vec::new() };
    for (o, k) in chosen {
        plan.nodes.push(o.name.clone());
        for p in &o.leavers[..o.needed[k - 1]] {
            plan.waits.push(p.key.clone());
            plan.ends.push(p.declared_end());
        }
    }
    let total = plan.waits.len();
    Some((plan, total))
}

/// The topology levels of a group: the label key whose value all its
/// nodes must share, and the keys of the narrower domains it prefers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Levels<'a> {
    /// `convoy.dev/required-topology` (or upstream's constraint).
    pub required: Option<&'a str>,
    /// `convoy.dev/preferred-topology`, in any order.
    pub preferred: &'a [Arc<str>],
}

impl<'a> Levels<'a> {
    /// Only a required level (or none).
    pub fn required(key: Option<&'a str>) -> Self {
        Self { required: key, preferred: &[] }
    }
}

/// The plan for `count` pending members of group `own`, each no larger
/// than `unit`, at `priority`: see the module docs. `levels`: the label
/// key whose value all the nodes must share and the preferred narrower
/// ones. `previous`: the nodes of the
/// plan in force, kept while they still hold the gang. `feasible`: whether
/// a member passes the profile's other filters on a node once the pods the
/// plan would wait for there are gone (given the node as it is now).
#[allow(clippy::too_many_arguments)]
pub fn plan(
    nodes: &[Arc<NodeInfo>],
    unit: &Resource,
    count: usize,
    priority: i32,
    own: &GroupKey,
    levels: Levels<'_>,
    previous: &HashSet<Arc<str>>,
    mut feasible: impl FnMut(&NodeInfo) -> bool,
) -> Option<Plan> {
    if count == 0 {
        return None;
    }
    let offers: Vec<(&NodeInfo, Option<&str>, Offer)> = nodes
        .iter()
        .filter_map(|n| {
            let domain = match levels.required {
                Some(key) => Some(n.label(key)?),
                None => None,
            };
            let o = offer(n, unit, count, priority, own)?;
            feasible(n).then_some((&**n, domain, o))
        })
        .collect();
    let best = |key: Option<&str>| {
        let mut domains: BTreeMap<(Option<&str>, Option<&str>), Vec<&Offer>> = BTreeMap::new();
        for (n, required, o) in &offers {
            let narrower = match key {
                Some(k) => match n.label(k) {
                    Some(v) => Some(v),
                    None => continue,
                },
                None => None,
            };
            domains.entry((*required, narrower)).or_default().push(o);
        }
        domains
            .values()
            .filter_map(|offers| choose(offers, count, previous))
            .min_by_key(|(plan, total)| (*total, plan.nodes.len()))
            .map(|(plan, _)| plan)
    };
    crate::group::narrowest_first(nodes, levels.preferred)
        .into_iter()
        .find_map(|(k, _)| best(Some(k)))
        .or_else(|| best(None))
}

#[cfg(test)]
mod tests {
    use convoy_api::testing::{NodeBuilder, PodBuilder};

    use super::*;

    fn gpu_node(name: &str, rack: &str, pods: &[(&str, i64, i32, i64)]) -> Arc<NodeInfo> {
        let mut info = NodeBuilder::new(name)
            .cpu("64")
            .memory("256Gi")
            .allocatable("nvidia.com/gpu", "8")
            .label("rack", rack)
            .info();
        for (i, (pod, gpus, priority, started)) in pods.iter().enumerate() {
            let p = PodBuilder::new(&format!("{name}-{pod}-{i}"))
                .node(name)
                .cpu("1")
                .resource("nvidia.com/gpu", &gpus.to_string())
                .priority(*priority)
                .started(*started)
                .info();
            info.add_pod(p);
        }
        Arc::new(info)
    }

    fn unit(gpus: i64) -> Resource {
        let mut r = Resource { milli_cpu: 1000, allowed_pods: 1, ..Default::default() };
        r.set("nvidia.com/gpu", gpus);
        r
    }

    fn own() -> GroupKey {
        GroupKey::new(convoy_api::PodGroupApi::Upstream, "default", "train")
    }

    #[test]
    fn waits_for_the_fewest_pods_and_the_oldest() {
        // Two members of 8 GPUs: n1 (one 8-GPU pod) and n3 (two 4-GPU
        // pods, started long ago) against n2 (eight 1-GPU pods).
        let nodes = vec![
            gpu_node("n1", "a", &[("big", 8, 0, 100)]),
            gpu_node("n2", "a", &(0..8).map(|_| ("s", 1, 0, 10)).collect::<Vec<_>>()),
            gpu_node("n3", "a", &[("h1", 4, 0, 5), ("h2", 4, 0, 6)]),
            gpu_node("n4", "a", &[("h3", 4, 0, 50), ("h4", 4, 0, 60)]),
        ];
        let p = plan(&nodes, &unit(8), 2, 0, &own(), Levels::default(), &HashSet::new(), |_| true)
            .unwrap();
        assert_eq!(p.nodes, vec![Arc::from("n1"), Arc::from("n3")]);
        assert_eq!(p.waits.len(), 3);
    }

    #[test]
    fn ready_by_is_the_latest_declared_end_of_the_pods_waited_for() {
        let node = |name: &str, pods: Vec<PodBuilder>| {
            let mut info = NodeBuilder::new(name).cpu("8").info();
            for p in pods {
                info.add_pod(p.node(name).cpu("4").info());
            }
            Arc::new(info)
        };
        let cpu = |n| Resource { milli_cpu: n, allowed_pods: 1, ..Default::default() };
        let second = 1_000_000_000i128;
        let epoch = 1_767_225_600 * second;
        // n1: deadlines ending at 30 s and 25 s; n2: one with none.
        let nodes = [
            node(
                "n1",
                vec![
                    PodBuilder::new("a").started(10).active_deadline(20),
                    PodBuilder::new("b").started(5).active_deadline(20),
                ],
            ),
            node("n2", vec![PodBuilder::new("c").started(1), PodBuilder::new("d").started(2)]),
        ];
        let one = |nodes: &[Arc<NodeInfo>]| {
            plan(nodes, &cpu(8000), 1, 0, &own(), Levels::default(), &HashSet::new(), |_| true)
                .unwrap()
        };
        let none = HashSet::new();
        let p = one(&nodes[..1]);
        assert_eq!(p.ready_by(&none), Some(epoch + 30 * second));
        let a = PodBuilder::new("a").info().key.clone();
        assert_eq!(p.ready_by(&[a].into()), Some(epoch + 25 * second), "without a");
        assert_eq!(one(&nodes[1..]).ready_by(&none), None, "c and d may run for ever");
        // A pod being deleted is gone by its deletionTimestamp.
        let gone = PodBuilder::new("e").started(1).terminating_by_preemption();
        let p = one(&[node("n3", vec![gone])]);
        assert_eq!(p.ready_by(&none), Some(epoch));
    }

    #[test]
    fn higher_priority_pods_are_not_waited_for() {
        let nodes = vec![
            gpu_node("n1", "a", &[("important", 8, 100, 1)]),
            gpu_node("n2", "a", &[("a", 4, 0, 1), ("b", 4, 0, 2)]),
        ];
        let p = plan(&nodes, &unit(8), 1, 0, &own(), Levels::default(), &HashSet::new(), |_| true)
            .unwrap();
        assert_eq!(p.nodes, vec![Arc::from("n2")]);
        assert!(
            plan(&nodes, &unit(8), 2, 0, &own(), Levels::default(), &HashSet::new(), |_| true)
                .is_none()
        );
    }

    #[test]
    fn a_free_node_needs_no_wait_and_a_node_holds_several_members() {
        let nodes = vec![gpu_node("n1", "a", &[("x", 1, 0, 1)]), gpu_node("n2", "a", &[])];
        let p = plan(&nodes, &unit(4), 2, 0, &own(), Levels::default(), &HashSet::new(), |_| true)
            .unwrap();
        assert_eq!(p, Plan { nodes: vec![Arc::from("n2")], waits: vec![], ends: vec![] });
    }

    #[test]
    fn one_domain_of_the_required_topology() {
        // Rack a has the cheapest node but not room for both members.
        let nodes = vec![
            gpu_node("a1", "a", &[]),
            gpu_node("a2", "a", &[("h", 8, 100, 1)]),
            gpu_node("b1", "b", &[("x", 2, 0, 1)]),
            gpu_node("b2", "b", &[("y", 2, 0, 1)]),
        ];
        let p = plan(
            &nodes,
            &unit(8),
            2,
            0,
            &own(),
            Levels::required(Some("rack")),
            &HashSet::new(),
            |_| true,
        )
        .unwrap();
        assert_eq!(p.nodes.len(), 2);
        assert!(p.nodes.iter().all(|n| n.starts_with('b')), "{p:?}");
    }

    #[test]
    fn a_preferred_level_is_planned_in_one_domain_when_one_can_hold_the_group() {
        // Across racks, a1 and b1 are free now; in one rack, a needs one
        // pod to leave (a2) and b two (b2's).
        let nodes = vec![
            gpu_node("a1", "a", &[]),
            gpu_node("a2", "a", &[("x", 1, 0, 1)]),
            gpu_node("b1", "b", &[]),
            gpu_node("b2", "b", &[("y", 1, 0, 1), ("z", 1, 0, 2)]),
        ];
        let anywhere =
            plan(&nodes, &unit(8), 2, 0, &own(), Levels::default(), &HashSet::new(), |_| true);
        assert_eq!(anywhere.unwrap().nodes, vec![Arc::from("a1"), Arc::from("b1")]);
        let racks = [Arc::from("rack")];
        let levels = Levels { required: None, preferred: &racks };
        let p = plan(&nodes, &unit(8), 2, 0, &own(), levels, &HashSet::new(), |_| true).unwrap();
        assert_eq!(p.nodes, vec![Arc::from("a1"), Arc::from("a2")]);
        assert_eq!(p.waits.len(), 1);
        // No rack can hold three: the plan falls back to the whole cluster.
        let p = plan(&nodes, &unit(8), 3, 0, &own(), levels, &HashSet::new(), |_| true).unwrap();
        assert_eq!(p.nodes.len(), 3, "{p:?}");
    }

    #[test]
    fn a_previous_plan_that_still_holds_is_kept_and_infeasible_nodes_are_not_chosen() {
        let nodes = vec![
            gpu_node("n1", "a", &[]),
            gpu_node("n2", "a", &[("x", 8, 0, 1)]),
            gpu_node("n3", "a", &[]),
        ];
        let previous: HashSet<Arc<str>> = [Arc::from("n2")].into();
        let p =
            plan(&nodes, &unit(8), 1, 0, &own(), Levels::default(), &previous, |_| true).unwrap();
        assert_eq!(p.nodes, vec![Arc::from("n2")]);
        let p = plan(&nodes, &unit(8), 1, 0, &own(), Levels::default(), &HashSet::new(), |n| {
            n.name() != "n1"
        })
        .unwrap();
        assert_eq!(p.nodes, vec![Arc::from("n3")]);
    }
}
