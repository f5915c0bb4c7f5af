//! PreFilter, Filter and the PreFilterExtensions of PodTopologySpread
//! (upstream `podtopologyspread/filtering.go`, v1.37.2).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Toleration;

use convoy_api::{
    CycleState, FilterPlugin, NodeInfo, NodeInfoLister, PodInfo, PreFilterExtensions,
    PreFilterPlugin, PreFilterResult, Status,
};

use super::common::{Constraint, Domains, has_all_keys, node_labels};
use super::memo::{Counts, Purpose, Request, Sums};
use super::{
    DO_NOT_SCHEDULE, ERR_REASON_CONSTRAINTS_NOT_MATCH, ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
};
use crate::helper::node_affinity::RequiredNodeAffinity;

/// Upstream's "no domain yet" count (`math.MaxInt32`).
const MAX_MATCH_NUM: i64 = i32::MAX as i64;

/// What PreFilter computes for Filter: per hard constraint, the matching
/// pods per domain and the smallest count.
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

/// One constraint's counts (upstream `TpValueToMatchNum[i]` and
/// `CriticalPaths[i]`): shared with the plugin's memo until a what-if
/// changes them.
#[derive(Debug, Clone)]
pub(super) struct DomainCounts {
    domains: Arc<Domains>,
    sums: Arc<Sums>,
    /// The critical paths' first count: the smallest count of a domain
    /// (`MAX_MATCH_NUM` when there is none).
    min: i64,
    /// Upstream's critical paths, made by the first what-if (Filter only
    /// needs `min` until then).
    paths: Option<CriticalPaths>,
}

impl DomainCounts {
    fn new(counts: Counts) -> Self {
        let min = counts.sums.min().unwrap_or(MAX_MATCH_NUM);
        Self { domains: counts.domains, sums: counts.sums, min, paths: None }
    }

    /// The matching pods of a domain (0 when it is not one).
    pub(super) fn count(&self, value: &str) -> i64 {
        self.domains.get(value).map_or(0, |d| self.sums.pods_of(d))
    }

    /// Upstream `minMatchNum`: the global minimum, 0 while there are fewer
    /// domains than `minDomains`.
    pub(super) fn min_match_num(&self, min_domains: i32) -> i64 {
        if (self.sums.present as i64) < i64::from(min_domains) { 0 } else { self.min }
    }

    /// The domains and their counts, in no particular order (upstream's map).
    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.domains
            .iter()
            .filter(|(_, d)| self.sums.is_present(*d))
            .map(|(v, d)| (v, self.sums.pods_of(d)))
    }

    /// Upstream's critical paths: as its PreFilter makes them, iterating
    /// over the domains in the order of their values (upstream's order is
    /// that of a Go map, unspecified; Filter reads only the minimum, which
    /// does not depend on it, and so do what-ifs on one node).
    pub(super) fn paths(&self) -> CriticalPaths {
        self.paths.unwrap_or_else(|| {
            let mut present: Vec<(&str, u32)> =
                self.domains.iter().filter(|(_, d)| self.sums.is_present(*d)).collect();
            present.sort_unstable();
            let mut paths = CriticalPaths::new();
            for (value, d) in present {
                paths.update(d, value.is_empty(), self.sums.pods_of(d));
            }
            paths
        })
    }

    /// `delta` more matching pods in the domain `value` (which exists from
    /// then on, as upstream's map entry would).
    fn add(&mut self, value: &str, delta: i64) {
        let mut paths = self.paths();
        let d = match self.domains.get(value) {
            Some(d) => d,
            None => {
                Arc::make_mut(&mut self.sums).push_domain();
                Arc::make_mut(&mut self.domains).intern(value)
            }
        };
        let num = Arc::make_mut(&mut self.sums).add_what_if(d, delta);
        paths.update(d, value.is_empty(), num);
        self.min = paths.0[0].num;
        self.paths = Some(paths);
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
        // Upstream `calPreFilterState`: the counts over every node of the
        // snapshot, from the memo.
        let required = RequiredNodeAffinity::of_pod(&pod.pod);
        let request = Request {
            purpose: Purpose::Filter,
            constraints: &constraints,
            pod,
            required: &required,
        };
        let counts =
            self.inner.counts(&request, nodes).into_iter().map(DomainCounts::new).collect();
        let self_match = constraints.iter().map(|c| c.selector.matches(pod.labels())).collect();
        state.write(PreFilterState {
            constraints: constraints.into(),
            counts,
            self_match,
            required: Arc::new(required),
        });
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
