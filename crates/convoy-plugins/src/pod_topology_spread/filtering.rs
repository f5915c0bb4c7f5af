//! PreFilter, Filter and the PreFilterExtensions of PodTopologySpread
//! (upstream `podtopologyspread/filtering.go`, v1.37.2).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Toleration;

use convoy_api::{
    CycleState, FilterPlugin, NodeInfo, NodeInfoLister, PodInfo, PreFilterExtensions,
    PreFilterPlugin, PreFilterResult, Status,
};

use super::common::{Constraint, Domains, count_pods_match_selector, has_all_keys, node_labels};
use super::{
    DO_NOT_SCHEDULE, ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
};
use crate::node_affinity::selector::RequiredNodeAffinity;

/// Upstream's "no domain yet" count (`math.MaxInt32`).
const MAX_MATCH_NUM: i64 = i32::MAX as i64;

/// What PreFilter computes for Filter: per hard constraint, the matching
/// pods per domain and the two smallest counts.
#[derive(Debug, Clone)]
pub(super) struct PreFilterState {
    pub(super) constraints: Arc<[Constraint]>,
    /// Per constraint.
    pub(super) counts: Vec<DomainCounts>,
    /// Per constraint: whether the incoming pod matches its own selector.
    self_match: Arc<[bool]>,
    /// The incoming pod's required node affinity (for the inclusion policy
    /// in `add_pod`/`remove_pod`).
    required: Arc<RequiredNodeAffinity>,
}

/// One constraint's counts: matching pods per domain, and the critical paths.
#[derive(Debug, Clone)]
pub(super) struct DomainCounts {
    /// The domains (shared by clones until a what-if adds one).
    pub(super) domains: Arc<Domains>,
    /// Matching pods per domain index.
    pub(super) counts: Vec<i64>,
    pub(super) paths: CriticalPaths,
}

impl DomainCounts {
    /// The matching pods of a domain (0 when it is not one).
    pub(super) fn count(&self, value: &str) -> i64 {
        self.domains.get(value).map_or(0, |d| self.counts[d as usize])
    }

    /// Upstream `minMatchNum`: the global minimum, 0 while there are fewer
    /// domains than `minDomains`.
    pub(super) fn min_match_num(&self, min_domains: i32) -> i64 {
        if (self.domains.len() as i64) < i64::from(min_domains) { 0 } else { self.paths.0[0].num }
    }

    /// `delta` more matching pods in the domain `value`.
    fn add(&mut self, value: &str, delta: i64) {
        let d = match self.domains.get(value) {
            Some(d) => d,
            None => {
                self.counts.push(0);
                Arc::make_mut(&mut self.domains).intern(value)
            }
        };
        let num = &mut self.counts[d as usize];
        *num += delta;
        self.paths.update(d, value.is_empty(), *num);
    }
}

/// Upstream `criticalPaths`: the domain with the fewest matching pods in
/// `[0]`, and one with as many or more in `[1]` (exact after PreFilter; kept
/// as upstream updates it on what-ifs, which only touch one node).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CriticalPaths(pub(super) [Path; 2]);

/// One critical path: a domain and its count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Path {
    /// `None` is upstream's initial empty topology value.
    pub(super) domain: Option<u32>,
    pub(super) num: i64,
}

impl CriticalPaths {
    fn new() -> Self {
        Self([Path { domain: None, num: MAX_MATCH_NUM }; 2])
    }

    /// Upstream `criticalPaths.update`; `is_empty_value` says whether the
    /// domain's value is "" (which the initial paths carry).
    fn update(&mut self, domain: u32, is_empty_value: bool, num: i64) {
        let p = &mut self.0;
        let same = |x: &Path| x.domain == Some(domain) || (x.domain.is_none() && is_empty_value);
        let i = if same(&p[0]) {
            Some(0)
        } else if same(&p[1]) {
            Some(1)
        } else {
            None
        };
        match i {
            Some(i) => {
                p[i] = Path { domain: Some(domain), num };
                if p[0].num > p[1].num {
                    p.swap(0, 1);
                }
            }
            None if num < p[0].num => {
                p[1] = p[0];
                p[0] = Path { domain: Some(domain), num };
            }
            None if num < p[1].num => p[1] = Path { domain: Some(domain), num },
            None => {}
        }
    }
}

fn tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.spec().tolerations.as_deref().unwrap_or(&[])
}

/// Upstream `calPreFilterState`: counts over every node of the snapshot.
fn compute_state(
    constraints: Vec<Constraint>,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
) -> PreFilterState {
    let required = RequiredNodeAffinity::of_pod(&pod.pod);
    let tolerations = tolerations(pod);
    let ns = pod.namespace();
    let n = constraints.len();
    // A constraint whose selector equals an earlier one's reuses its count on each node.
    let same_as: Vec<Option<usize>> = (0..n)
        .map(|i| (0..i).find(|&j| constraints[j].selector == constraints[i].selector))
        .collect();
    let mut domains: Vec<Domains> = constraints
        .iter()
        .map(|c| Domains::with_capacity(if c.is_hostname() { nodes.len() } else { 0 }))
        .collect();
    let mut counts: Vec<Vec<i64>> = vec![Vec::new(); n];
    let mut on_node: Vec<Option<i64>> = vec![None; n];
    for node in nodes {
        let labels = node_labels(node);
        if node.node().is_none() || !has_all_keys(labels, &constraints) {
            continue;
        }
        on_node.fill(None);
        for (i, c) in constraints.iter().enumerate() {
            if !c.includes_node(node, &required, tolerations) {
                continue;
            }
            let found = same_as[i].and_then(|j| on_node[j]);
            let count =
                found.unwrap_or_else(|| count_pods_match_selector(&node.pods, &c.selector, ns));
            on_node[i] = Some(count);
            let value = labels.get(&*c.topology_key).map_or("", String::as_str);
            let d = domains[i].intern(value) as usize;
            if d == counts[i].len() {
                counts[i].push(0);
            }
            counts[i][d] += count;
        }
    }
    let self_match = constraints.iter().map(|c| c.selector.matches(pod.labels())).collect();
    let counts = domains
        .into_iter()
        .zip(counts)
        .map(|(domains, counts)| {
            let mut paths = CriticalPaths::new();
            let empty = domains.get("");
            for (d, &num) in counts.iter().enumerate() {
                let d = d as u32;
                paths.update(d, empty == Some(d), num);
            }
            DomainCounts { domains: Arc::new(domains), counts, paths }
        })
        .collect();
    PreFilterState {
        constraints: constraints.into(),
        counts,
        self_match,
        required: Arc::new(required),
    }
}

impl PreFilterPlugin for PodTopologySpread {
    /// Skip when the pod has no `DoNotSchedule` constraint (own or
    /// default); Error when a selector cannot be parsed.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        let constraints = match self.inner.constraints(pod, DO_NOT_SCHEDULE) {
            Ok(c) => c,
            Err(e) => return (None, Status::error(format!("get constraints from pod: {e}"))),
        };
        if constraints.is_empty() {
            return (None, Status::skip());
        }
        state.write(compute_state(constraints, pod, nodes.list()));
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

const NO_PRE_FILTER_STATE: &str =
    "reading \"PreFilterPodTopologySpread\" from cycleState: not found";

impl FilterPlugin for PodTopologySpread {
    /// UnschedulableAndUnresolvable when the node lacks a topology key;
    /// Unschedulable when `matching + self − global minimum > maxSkew`.
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>() else {
            return Status::error(NO_PRE_FILTER_STATE);
        };
        let labels = node_labels(node);
        for (i, c) in s.constraints.iter().enumerate() {
            let Some(value) = labels.get(&*c.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let counts = &s.counts[i];
            let skew = counts.count(value) + i64::from(s.self_match[i])
                - counts.min_match_num(c.min_domains);
            if skew > i64::from(c.max_skew) {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }
}

impl PodTopologySpread {
    /// Upstream `updateWithPod`: `delta` matching pods on `node` for every
    /// constraint whose selector matches `updated` and whose inclusion
    /// policies admit the node.
    fn update_with_pod(
        &self,
        state: &mut CycleState,
        preemptor: &PodInfo,
        updated: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) -> Status {
        let Some(s) = state.read::<PreFilterState>() else {
            return Status::error(NO_PRE_FILTER_STATE);
        };
        let labels = node_labels(node);
        if updated.namespace() != preemptor.namespace()
            || node.node().is_none()
            || !has_all_keys(labels, &s.constraints)
        {
            return Status::success();
        }
        let mut s = s.clone();
        let tolerations = tolerations(preemptor);
        for (i, c) in s.constraints.iter().enumerate() {
            if !c.selector.matches(updated.labels())
                || !c.includes_node(node, &s.required, tolerations)
            {
                continue;
            }
            let value = labels.get(&*c.topology_key).map_or("", String::as_str);
            s.counts[i].add(value, delta);
        }
        state.write(s);
        Status::success()
    }
}

impl PreFilterExtensions for PodTopologySpread {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.update_with_pod(state, pod_to_schedule, pod_to_add, node, 1)
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.update_with_pod(state, pod_to_schedule, pod_to_remove, node, -1)
    }
}
