//! NodeResourcesBalancedAllocation (Score; upstream
//! `noderesources/balanced_allocation.go`, v1.37.2): favours placing the pod
//! where it improves the node's balance, the closeness of its resource
//! fractions (requested / allocatable) to each other. Since Kubernetes 1.36
//! (kubernetes/kubernetes#135573) the score is the change in balance that
//! the pod brings, centred on 75, not the balance after placing it.
//!
//! On a server of Kubernetes 1.34 or 1.35 (the version discovery read,
//! [`convoy_api::ServedApis::server_version`]) the plugin scores as that
//! version's kube-scheduler does: the balance after placing the pod
//! ([`balanced_resource_score`] of the requests with the pod). The score
//! parity test checks both against kube-scheduler of the same version.

use std::sync::Arc;

use convoy_api::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, ObjectLister, Plugin, PodInfo,
    PreScorePlugin, ScorePlugin, Status, names,
};
use convoy_config::{NodeResourcesBalancedAllocationArgs, PluginArgs};

use super::resource_allocation::{ResourceAllocationScorer, Values};

/// The NodeResourcesBalancedAllocation plugin.
#[derive(Debug, Clone)]
pub struct BalancedAllocation {
    scorer: ResourceAllocationScorer,
    /// Where the server's version is read (newest formula without it).
    objects: Option<Arc<dyn ObjectLister>>,
}

/// PreScore state: the pod's request of each balanced resource, and the
/// formula of the server's version.
struct PreScoreState(Values, Formula);

/// Which version's formula scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Formula {
    /// Kubernetes 1.36 and later: the change in balance.
    ChangeInBalance,
    /// Kubernetes 1.34 and 1.35: the balance after placing the pod.
    Balance,
}

impl BalancedAllocation {
    /// Builds the plugin from `NodeResourcesBalancedAllocationArgs` (None:
    /// cpu and memory).
    pub fn new(args: Option<&PluginArgs>) -> Result<Self, String> {
        let defaults;
        let args = match args {
            None => {
                defaults = NodeResourcesBalancedAllocationArgs::default();
                &defaults
            }
            Some(PluginArgs::NodeResourcesBalancedAllocation(a)) => a,
            Some(other) => {
                return Err(format!(
                    "want args to be of type NodeResourcesBalancedAllocationArgs, got {other:?}"
                ));
            }
        };
        if args.resources.is_empty() {
            return Err("resources: resources not found".to_string());
        }
        Ok(Self { scorer: ResourceAllocationScorer::new(&args.resources, true), objects: None })
    }

    /// Scores with the formula of the server's version, read from
    /// `objects` ([`ObjectLister::served_apis`]) once per cycle.
    pub fn following(mut self, objects: Arc<dyn ObjectLister>) -> Self {
        self.objects = Some(objects);
        self
    }

    fn formula(&self) -> Formula {
        match &self.objects {
            Some(o) if !o.served_apis().server_at_least(36) => Formula::Balance,
            _ => Formula::ChangeInBalance,
        }
    }
}

/// Upstream `balancedResourceScorer` (`noderesources/balanced_allocation.go`,
/// v1.37.2): the change in the node's balance the pod brings,
/// `50 + (50 + with - without) / 2` in integer arithmetic, where `with` and
/// `without` are [`balanced_resource_score`] of the node with and without
/// the pod (each in 50..=100). 75 means no change; 100 the best
/// improvement, 50 the worst degradation.
#[inline]
pub fn balanced_resource_scorer(requested: &[i64], allocated: &[i64], allocatable: &[i64]) -> i64 {
    let with_pod = balanced_resource_score(requested, allocatable);
    let without_pod = balanced_resource_score(allocated, allocatable);
    MAX_NODE_SCORE / 2 + (MAX_NODE_SCORE / 2 + with_pod - without_pod) / 2
}

/// Upstream `balancedResourceScore` (v1.37.2): `(1 - std) * 100`, truncated,
/// over the fractions (capped at 1) of the resources with allocatable > 0;
/// for two resources `std = |f1 - f2| / 2`, for one or none 0.
#[inline]
pub fn balanced_resource_score(requested: &[i64], allocatable: &[i64]) -> i64 {
    let fraction = |r: i64, a: i64| (r as f64 / a as f64).min(1.0);
    // Two resources (the default cpu and memory), without the loop: the
    // same arithmetic in the same order as below.
    if let (&[r0, r1], &[a0, a1]) = (requested, allocatable) {
        let std = if a0 != 0 && a1 != 0 {
            ((fraction(r0, a0) - fraction(r1, a1)) / 2.0).abs()
        } else {
            0.0
        };
        return ((1.0 - std) * MAX_NODE_SCORE as f64) as i64;
    }
    // One pass keeps the first two fractions (the common case, cpu and
    // memory); a third resource or more takes a second pass for the
    // variance, recomputing the fractions in the same order.
    let scored = || requested.iter().zip(allocatable).filter(|(_, a)| **a != 0);
    let (mut n, mut total, mut first, mut second) = (0usize, 0.0, 0.0, 0.0);
    for (&r, &a) in scored() {
        let f = fraction(r, a);
        match n {
            0 => first = f,
            1 => second = f,
            _ => {}
        }
        total += f;
        n += 1;
    }
    let std = match n {
        0 | 1 => 0.0,
        2 => ((first - second) / 2.0).abs(),
        n => {
            let mean = total / n as f64;
            let sum: f64 = scored()
                .map(|(&r, &a)| {
                    let f = fraction(r, a);
                    (f - mean) * (f - mean)
                })
                .sum();
            (sum / n as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        names::NODE_RESOURCES_BALANCED_ALLOCATION
    }
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        Some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl PreScorePlugin for BalancedAllocation {
    /// Skip for a pod that requests none of the balanced resources (a
    /// best-effort pod would otherwise pile onto one node; upstream #129138).
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[&NodeInfo],
        _all: &dyn NodeInfoLister,
    ) -> Status {
        let requests = self.scorer.pod_requests(pod);
        if requests.iter().all(|r| *r == 0) {
            return Status::skip();
        }
        state.write(PreScoreState(requests, self.formula()));
        Status::success()
    }
}

impl ScorePlugin for BalancedAllocation {
    /// 50..=100 (see [`balanced_resource_scorer`]); 0 without PreScore for
    /// a pod that requests none of the resources.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let mut out = [0];
        self.score_into(state, pod, std::iter::once(node), &mut out);
        Ok(out[0])
    }

    /// [`score`](Self::score) for every node, the state read once.
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        out: &mut [i64],
    ) -> Result<(), Status> {
        self.score_into(state, pod, nodes.iter().map(|n| &**n), out);
        Ok(())
    }
}

impl BalancedAllocation {
    /// Each node's score into `out`, the pod's requests taken once (from
    /// PreScore, or computed when PreScore did not run: then all 0 for a
    /// pod that requests none of the resources).
    fn score_into<'a>(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: impl Iterator<Item = &'a NodeInfo>,
        out: &mut [i64],
    ) {
        let computed;
        let (requests, formula) = match state.read::<PreScoreState>() {
            Some(s) => (&s.0, s.1),
            None => {
                computed = self.scorer.pod_requests(pod);
                if computed.iter().all(|r| *r == 0) {
                    out.fill(0);
                    return;
                }
                (&computed, self.formula())
            }
        };
        // One loop per formula, so each scorer is inlined (not a call
        // through a pointer per node).
        match formula {
            Formula::ChangeInBalance => {
                for (node, o) in nodes.zip(out) {
                    *o = self.scorer.with_node_amounts(node, requests, balanced_resource_scorer);
                }
            }
            Formula::Balance => {
                for (node, o) in nodes.zip(out) {
                    *o = self
                        .scorer
                        .with_node_amounts(node, requests, |r, _, a| balanced_resource_score(r, a));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use convoy_api::testing::{NodeBuilder, PodBuilder};
    use convoy_config::ResourceSpec;
    use convoy_objects::ClusterObjects;

    use super::*;
    use crate::helper::testing::PreScoreOn;
    use crate::helper::testing::infos;

    fn scores(ba: &BalancedAllocation, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Vec<i64> {
        let mut state = CycleState::new();
        assert!(ba.pre_score_on(&mut state, pod, nodes).is_success());
        crate::helper::testing::score_each(ba, &state, pod, nodes)
    }

    #[test]
    fn formula() {
        let cases = [
            (&[3000, 5000][..], &[4000, 10000][..], 87), // std = |0.75 - 0.5| / 2 = 0.125
            (&[3000, 5000], &[6000, 10000], 100),
            (&[0, 0], &[4000, 10000], 100),
            (&[8000, 5000], &[4000, 10000], 75), // cpu capped at 1: |1 - 0.5| / 2
            (&[1, 0], &[2, 0], 100),             // one resource scored: std 0
            // Three resources: fractions 0.2, 0.5, 0.8 → std = sqrt(0.06) = 0.2449.
            (&[2, 5, 8], &[10, 10, 10], 75),
        ];
        for (req, alloc, want) in cases {
            assert_eq!(balanced_resource_score(req, alloc), want, "{req:?} {alloc:?}");
        }
    }

    #[test]
    fn scorer_is_the_change_in_balance() {
        // (requested with the pod, allocated before, allocatable, score).
        let cases = [
            // Balance 100 -> 87: 50 + (50 - 13) / 2 = 68.
            (&[3000, 5000][..], &[0, 0][..], &[4000, 10000][..], 68),
            // No change: 75.
            (&[3000, 5000], &[0, 0], &[6000, 10000], 75),
            // 50 -> 100, the best improvement.
            (&[3000, 5000], &[3000, 0], &[3000, 5000], 100),
            // 100 -> 50, the worst degradation.
            (&[0, 5000], &[0, 0], &[3000, 5000], 50),
            // Integer division truncates: 85 -> 82 gives 50 + 47 / 2 = 73.
            (&[6000, 5000], &[3000, 0], &[10000, 20000], 73),
        ];
        for (req, allocated, alloc, want) in cases {
            assert_eq!(balanced_resource_scorer(req, allocated, alloc), want, "{req:?} {alloc:?}");
        }
    }

    #[test]
    fn follows_the_server_version() {
        let objects = Arc::new(ClusterObjects::new());
        let ba = BalancedAllocation::new(None).unwrap().following(objects.clone());
        let n = NodeBuilder::new("n").cpu("4000m").memory("10000").info();
        let pod = PodBuilder::new("p").cpu("3000m").memory("5000").info();
        let nodes = infos(vec![n]);
        // 1.37: the change in balance, 100 -> 87: 68.
        assert_eq!(scores(&ba, &pod, &nodes), vec![68]);
        for (version, want) in [("v1.34.4", 87), ("v1.35.4", 87), ("v1.36.3", 68)] {
            let mut served = convoy_api::ServedApis::all();
            served.server_version = Some(version.into());
            objects.set_served_apis(Arc::new(served));
            assert_eq!(scores(&ba, &pod, &nodes), vec![want], "{version}");
        }
    }

    #[test]
    fn counts_existing_pods_by_real_requests() {
        let ba = BalancedAllocation::new(None).unwrap();
        let mut n = NodeBuilder::new("n").cpu("4000m").memory("10000").info();
        n.add_pod(PodBuilder::new("a").cpu("1000m").memory("2000").node("n").info());
        n.add_pod(PodBuilder::new("besteffort").node("n").info()); // counts 0, not 100m/200Mi
        let pod = PodBuilder::new("p").cpu("1000m").memory("3000").info();
        // Before: cpu 0.25, memory 0.2 (97); after: 0.5 and 0.5 (100):
        // 50 + (50 + 3) / 2 = 76.
        assert_eq!(scores(&ba, &pod, &infos(vec![n])), vec![76]);
    }

    #[test]
    fn skips_best_effort_pods() {
        let ba = BalancedAllocation::new(None).unwrap();
        let s = ba.pre_score(
            &mut CycleState::new(),
            &PodBuilder::new("p").info(),
            &[],
            &convoy_api::NodeList::default(),
        );
        assert!(s.is_skip());
        // A pod requesting only a resource not balanced is best-effort here too.
        let s = ba.pre_score(
            &mut CycleState::new(),
            &PodBuilder::new("p").resource("nvidia.com/gpu", "1").info(),
            &[],
            &convoy_api::NodeList::default(),
        );
        assert!(s.is_skip());
    }

    #[test]
    fn extended_resources_when_configured() {
        let args =
            PluginArgs::NodeResourcesBalancedAllocation(NodeResourcesBalancedAllocationArgs {
                resources: vec![
                    ResourceSpec::new("cpu", 1),
                    ResourceSpec::new("memory", 1),
                    ResourceSpec::new("nvidia.com/gpu", 1),
                ],
            });
        let ba = BalancedAllocation::new(Some(&args)).unwrap();
        let nodes = infos(vec![
            NodeBuilder::new("n").cpu("10").memory("10").allocatable("nvidia.com/gpu", "10").info(),
        ]);
        // Not requested: the GPU is skipped; fractions 0.2 and 0.5 (85)
        // on an empty node (100): 50 + (50 - 15) / 2 = 67.
        let pod = PodBuilder::new("p").cpu("2").memory("5").info();
        assert_eq!(scores(&ba, &pod, &nodes), vec![67]);
        // Requested: 0.2, 0.5, 0.8 (75): 50 + (50 - 25) / 2 = 62.
        let pod = PodBuilder::new("p").cpu("2").memory("5").resource("nvidia.com/gpu", "8").info();
        assert_eq!(scores(&ba, &pod, &nodes), vec![62]);
    }
}
