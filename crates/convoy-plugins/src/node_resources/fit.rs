//! NodeResourcesFit (upstream `noderesources/fit.go`): Filter rejects nodes
//! without enough free pods/cpu/memory/ephemeral-storage/extended resources;
//! Score ranks nodes with the configured strategy, as v1.37.2: the incoming
//! pod counts its containers' non-zero CPU and memory (100m and 200Mi for
//! each container that omits them) and not its pod-level requests
//! ([`fit_scoring_requests`](convoy_api::resource::fit_scoring_requests)),
//! the node its pods' `non_zero_requested`; other resources count real
//! requests, and a scalar resource the pod does not request is not scored.
//! Upstream's tables: `parity::fit`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

use k8s_openapi::api::core::v1::Pod;
use smallvec::SmallVec;

use convoy_api::resource::pod_requests;
use convoy_api::{
    ActionType, ClusterEventWithHint, Code, CycleState, EventObject, EventResource, FilterPlugin,
    NodeInfo, NodeInfoLister, Plugin, PodInfo, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    QueueingHint, Reason, Resource, ScorePlugin, Status, names,
};
use convoy_config::{NodeResourcesFitArgs, PluginArgs, ScoringStrategyType};

use super::requested_to_capacity_ratio;
use super::resource_allocation::{ResourceAllocationScorer, Values};
use super::{least_allocated, most_allocated};
use crate::helper::resource_names::{is_extended_resource_name, is_scalar_resource_name};
use crate::helper::shape_score::Shape;
use crate::helper::{event_node_arc, event_pod, pod_was_on_a_node};

/// Reason when the node has no room for one more pod.
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";
/// Reason when CPU is short.
pub const REASON_CPU: &str = "Insufficient cpu";
/// Reason when memory is short.
pub const REASON_MEMORY: &str = "Insufficient memory";
/// Reason when ephemeral storage is short.
pub const REASON_EPHEMERAL_STORAGE: &str = "Insufficient ephemeral-storage";

/// The scoring function of the configured strategy.
#[derive(Debug, Clone)]
enum Strategy {
    LeastAllocated,
    MostAllocated,
    RequestedToCapacityRatio(Shape),
}

/// The NodeResourcesFit plugin.
#[derive(Debug, Clone)]
pub struct Fit {
    ignored_resources: HashSet<String>,
    ignored_resource_groups: HashSet<String>,
    scorer: ResourceAllocationScorer,
    strategy: Strategy,
}

/// A scalar resource the pod requests, with its reason string made once.
#[derive(Debug, Clone)]
struct ScalarRequest {
    name: Arc<str>,
    quantity: i64,
    reason: Reason,
}

/// PreFilter state: the pod's requests, scalar resources already filtered
/// by the ignore lists.
#[derive(Debug, Clone)]
struct PreFilterState {
    requests: Resource,
    scalars: Vec<ScalarRequest>,
}

/// PreScore state: the pod's request of each scored resource.
struct PreScoreState(Values);

/// `Insufficient <name>` as a `&'static str`, made once per resource name
/// (a bounded set: past the bound, an owned string per rejection).
fn insufficient_reason(name: &str) -> Reason {
    const MAX_INTERNED: usize = 4096;
    static INTERNED: LazyLock<Mutex<HashMap<String, &'static str>>> =
        LazyLock::new(Default::default);
    let mut map = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = map.get(name) {
        return Cow::Borrowed(*r);
    }
    let reason = format!("Insufficient {name}");
    if map.len() >= MAX_INTERNED {
        return Cow::Owned(reason);
    }
    let leaked: &'static str = Box::leak(reason.into_boxed_str());
    map.insert(name.to_string(), leaked);
    Cow::Borrowed(leaked)
}

impl Fit {
    /// Builds the plugin from `NodeResourcesFitArgs` (None: the defaults,
    /// LeastAllocated over cpu and memory).
    pub fn new(args: Option<&PluginArgs>) -> Result<Self, String> {
        let defaults;
        let args = match args {
            None => {
                defaults = NodeResourcesFitArgs::default();
                &defaults
            }
            Some(PluginArgs::NodeResourcesFit(a)) => a,
            Some(other) => {
                return Err(format!("want args to be of type NodeResourcesFitArgs, got {other:?}"));
            }
        };
        Self::from_args(args)
    }

    /// Builds the plugin from typed args.
    pub fn from_args(args: &NodeResourcesFitArgs) -> Result<Self, String> {
        let strategy = &args.scoring_strategy;
        let kind = match strategy.type_ {
            ScoringStrategyType::LeastAllocated => Strategy::LeastAllocated,
            ScoringStrategyType::MostAllocated => Strategy::MostAllocated,
            ScoringStrategyType::RequestedToCapacityRatio => {
                let param = strategy
                    .requested_to_capacity_ratio
                    .as_ref()
                    .filter(|p| !p.shape.is_empty())
                    .ok_or("scoringStrategy.requestedToCapacityRatio.shape: required")?;
                Strategy::RequestedToCapacityRatio(Shape::new(&param.shape))
            }
        };
        if strategy.resources.is_empty() {
            return Err("scoringStrategy.resources: resources not found".to_string());
        }
        Ok(Self {
            ignored_resources: args.ignored_resources.iter().cloned().collect(),
            ignored_resource_groups: args.ignored_resource_groups.iter().cloned().collect(),
            scorer: ResourceAllocationScorer::new(&strategy.resources, false),
            strategy: kind,
        })
    }

    fn is_ignored(&self, name: &str) -> bool {
        if !is_extended_resource_name(name) {
            return false;
        }
        if self.ignored_resources.contains(name) {
            return true;
        }
        !self.ignored_resource_groups.is_empty()
            && self.ignored_resource_groups.contains(name.split('/').next().unwrap_or(""))
    }

    fn pre_filter_state(&self, requests: &Resource) -> PreFilterState {
        let scalars = requests
            .scalar
            .iter()
            .filter(|(name, q)| **q != 0 && !self.is_ignored(name))
            .map(|(name, q)| ScalarRequest {
                name: name.clone(),
                quantity: *q,
                reason: insufficient_reason(name),
            })
            .collect();
        PreFilterState { requests: requests.clone(), scalars }
    }

    fn strategy_score(&self, requested: &[i64], allocatable: &[i64]) -> i64 {
        let w = &self.scorer.weights;
        match &self.strategy {
            Strategy::LeastAllocated => least_allocated::score(requested, allocatable, w),
            Strategy::MostAllocated => most_allocated::score(requested, allocatable, w),
            Strategy::RequestedToCapacityRatio(shape) => {
                requested_to_capacity_ratio::score(shape, requested, allocatable, w)
            }
        }
    }
}

/// Upstream `fitsRequest`: every insufficient resource, one reason each;
/// UnschedulableAndUnresolvable when a request exceeds the node's total
/// allocatable (preemption cannot help). No allocation unless a scalar
/// resource name has more than the interned reasons.
fn fits_request(s: &PreFilterState, node: &NodeInfo) -> Status {
    if fits_quick(s, node) { Status::success() } else { insufficient(s, node) }
}

/// Whether the pod fits the node, without saying why not: the common
/// answer, decided without building reasons.
#[inline]
fn fits_quick(s: &PreFilterState, node: &NodeInfo) -> bool {
    let alloc = &node.allocatable;
    let used = &node.requested;
    let r = &s.requests;
    let fits = |want: i64, alloc: i64, used: i64| want <= 0 || want <= alloc - used;
    (node.pods.len() as i64) < alloc.allowed_pods
        && fits(r.milli_cpu, alloc.milli_cpu, used.milli_cpu)
        && fits(r.memory, alloc.memory, used.memory)
        && fits(r.ephemeral_storage, alloc.ephemeral_storage, used.ephemeral_storage)
        && s.scalars.iter().all(|sc| {
            let a = alloc.scalar.get(&sc.name).copied().unwrap_or(0);
            let u = used.scalar.get(&sc.name).copied().unwrap_or(0);
            fits(sc.quantity, a, u)
        })
}

/// The rejection of a pod [`fits_quick`] found not to fit: one reason per
/// short resource.
#[cold]
#[inline(never)]
fn insufficient(s: &PreFilterState, node: &NodeInfo) -> Status {
    let mut reasons: SmallVec<[Reason; 4]> = SmallVec::new();
    let mut unresolvable = false;
    let alloc = &node.allocatable;
    let used = &node.requested;
    if node.pods.len() as i64 + 1 > alloc.allowed_pods {
        reasons.push(Cow::Borrowed(REASON_TOO_MANY_PODS));
    }
    let r = &s.requests;
    if r.milli_cpu != 0 || r.memory != 0 || r.ephemeral_storage != 0 || !s.scalars.is_empty() {
        let mut check = |want: i64, alloc: i64, used: i64, reason: &Reason| {
            if want > 0 && want > alloc - used {
                reasons.push(reason.clone());
                unresolvable |= want > alloc;
            }
        };
        check(r.milli_cpu, alloc.milli_cpu, used.milli_cpu, &Cow::Borrowed(REASON_CPU));
        check(r.memory, alloc.memory, used.memory, &Cow::Borrowed(REASON_MEMORY));
        check(
            r.ephemeral_storage,
            alloc.ephemeral_storage,
            used.ephemeral_storage,
            &Cow::Borrowed(REASON_EPHEMERAL_STORAGE),
        );
        for sc in &s.scalars {
            let a = alloc.scalar.get(&sc.name).copied().unwrap_or(0);
            let u = used.scalar.get(&sc.name).copied().unwrap_or(0);
            check(sc.quantity, a, u, &sc.reason);
        }
    }
    if reasons.is_empty() {
        return Status::success();
    }
    let code = if unresolvable { Code::UnschedulableAndUnresolvable } else { Code::Unschedulable };
    let mut status = Status::new(code);
    for reason in reasons {
        status.push_reason(reason);
    }
    status
}

impl Plugin for Fit {
    fn name(&self) -> &'static str {
        names::NODE_RESOURCES_FIT
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let fit = Arc::new(self.clone());
        vec![
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::DELETE | ActionType::UPDATE_POD_SCALE_DOWN,
                is_schedulable_after_pod_event,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_ALLOCATABLE,
                move |pod, old, new| fit.is_schedulable_after_node_change(pod, old, new),
            ),
        ]
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        Some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for Fit {
    /// Always Success: stores the pod's requests.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        state.write(self.pre_filter_state(&pod.requests.requests));
        (None, Status::success())
    }
}

impl FilterPlugin for Fit {
    /// Unschedulable with one reason per short resource (`Too many pods`,
    /// `Insufficient cpu`, `Insufficient nvidia.com/gpu`, ...);
    /// UnschedulableAndUnresolvable when a request exceeds the node's total.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.read::<PreFilterState>() {
            Some(s) => fits_request(s, node),
            None => fits_request(&self.pre_filter_state(&pod.requests.requests), node),
        }
    }

    /// [`filter`](Self::filter) over a batch, the state read once.
    fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        candidates: &mut Vec<usize>,
        rejected: &mut Vec<(usize, Status)>,
    ) {
        let computed;
        let s = match state.read::<PreFilterState>() {
            Some(s) => s,
            None => {
                computed = self.pre_filter_state(&pod.requests.requests);
                &computed
            }
        };
        convoy_api::retain_nodes(candidates, rejected, |i| {
            (!fits_quick(s, &nodes[i])).then(|| insufficient(s, &nodes[i]))
        });
    }
}

impl PreScorePlugin for Fit {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[&NodeInfo],
        _all: &dyn NodeInfoLister,
    ) -> Status {
        state.write(PreScoreState(self.scorer.pod_requests(pod)));
        Status::success()
    }
}

impl ScorePlugin for Fit {
    /// The strategy's score, 0..=100 (no normalization).
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

impl Fit {
    /// Each node's strategy score into `out`, the pod's requests taken once
    /// (from PreScore, or computed when PreScore did not run).
    fn score_into<'a>(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: impl Iterator<Item = &'a NodeInfo>,
        out: &mut [i64],
    ) {
        let computed;
        let pod_requests = match state.read::<PreScoreState>() {
            Some(s) => &s.0,
            None => {
                computed = self.scorer.pod_requests(pod);
                &computed
            }
        };
        for (node, o) in nodes.zip(out) {
            *o = self.scorer.with_node_amounts(node, pod_requests, |requested, _, allocatable| {
                self.strategy_score(requested, allocatable)
            });
        }
    }
}

impl Fit {
    /// Queue when the new node could hold the pod on its own and, for an
    /// update, a resource the pod requests (or the pod count) grew.
    fn is_schedulable_after_node_change(
        &self,
        pod: &PodInfo,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> QueueingHint {
        let Some(modified) = event_node_arc(new) else { return QueueingHint::Queue };
        let modified = NodeInfo::new(modified.clone());
        if !fits_request(&self.pre_filter_state(&pod.requests.requests), &modified).is_success() {
            return QueueingHint::Skip;
        }
        let Some(original) = event_node_arc(old) else { return QueueingHint::Queue };
        let original = NodeInfo::new(original.clone());
        if any_requested_resource_increased(&pod.requests.requests, &original, &modified) {
            QueueingHint::Queue
        } else {
            QueueingHint::Skip
        }
    }
}

/// Upstream `haveAnyRequestedResourcesIncreased`.
fn any_requested_resource_increased(
    req: &Resource,
    original: &NodeInfo,
    modified: &NodeInfo,
) -> bool {
    let (a, b) = (&original.allocatable, &modified.allocatable);
    if b.allowed_pods > a.allowed_pods {
        return true;
    }
    (req.milli_cpu > 0 && b.milli_cpu > a.milli_cpu)
        || (req.memory > 0 && b.memory > a.memory)
        || (req.ephemeral_storage > 0 && b.ephemeral_storage > a.ephemeral_storage)
        || req.scalar.iter().any(|(name, q)| {
            *q != 0
                && b.scalar.get(name).copied().unwrap_or(0)
                    > a.scalar.get(name).copied().unwrap_or(0)
        })
}

fn requests_of(pod: &Pod) -> Option<Resource> {
    pod.spec.as_ref().and_then(|s| pod_requests(s).ok()).map(|r| r.requests)
}

/// A deleted pod that was on a node may free resources; a scale-down helps
/// when it is the pod itself, or an assigned pod shrank a resource the pod
/// requests.
fn is_schedulable_after_pod_event(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(original) = event_pod(old) else { return QueueingHint::Queue };
    let Some(modified) = event_pod(new) else {
        return if pod_was_on_a_node(original) { QueueingHint::Queue } else { QueueingHint::Skip };
    };
    if modified.metadata.uid.as_deref().unwrap_or("") == &*pod.uid {
        return QueueingHint::Queue;
    }
    if modified.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("").is_empty() {
        return QueueingHint::Skip;
    }
    let (Some(before), Some(after)) = (requests_of(original), requests_of(modified)) else {
        return QueueingHint::Queue;
    };
    let want = &pod.requests.requests;
    let shrank = (want.milli_cpu != 0 && before.milli_cpu > after.milli_cpu)
        || (want.memory != 0 && before.memory > after.memory)
        || (want.ephemeral_storage != 0 && before.ephemeral_storage > after.ephemeral_storage)
        || want.scalar.iter().any(|(name, q)| {
            *q != 0 && is_scalar_resource_name(name) && before.get(name) > after.get(name)
        });
    if shrank { QueueingHint::Queue } else { QueueingHint::Skip }
}

#[cfg(test)]
mod tests;
