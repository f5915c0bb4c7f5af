//! `GpuHealth`, an out-of-tree Convoy plugin, written as a GPU team would
//! write one: it keeps pods off the GPUs a node agent reports unhealthy.
//!
//! The agent on each node publishes a `GpuHealth` custom resource
//! (`example.com/v1alpha1`, cluster-scoped, named after its node, CRD in
//! `crd.yaml`) whose `spec.unhealthy` counts the node's GPUs that failed
//! their health checks. The node's allocatable does not always drop when a
//! GPU fails (the device plugin may still count it), so:
//!
//! - **PreFilter** reads the reports once per cycle (re-parsed only when
//!   they changed) and skips pods that ask for no GPU.
//! - **Filter** rejects a node whose healthy free GPUs (allocatable, minus
//!   what its pods hold, minus the unhealthy ones) are fewer than the pod
//!   asks for: `node(s) had unhealthy GPUs`. With `requireReport: true`, a
//!   node without a report is rejected too (`node(s) had no GPU health
//!   report`).
//! - **Score** prefers nodes with a larger healthy share of their GPUs.
//! - A report that improves (fewer unhealthy GPUs) or goes away requeues
//!   the pods it turned away (a queueing hint on the custom resource's
//!   events).
//! - While the API server does not serve `GpuHealth` (the CRD not
//!   installed) or its objects are still being listed, GPU pods are
//!   refused by name with `requireReport: true`, and placed on allocatable
//!   alone otherwise.
//!
//! It depends on `convoy-api` alone; its args are a serde type of its own,
//! checked by the configuration loader with file, line and column.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use convoy_api::serde::Deserialize;
use convoy_api::{
    ActionType, ApiInfo, ClusterEventWithHint, CustomObject, CycleState, EventObject,
    EventResource, FilterPlugin, Handle, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, ObjectLister,
    Plugin, PluginArgsType, PodInfo, PreFilterPlugin, PreFilterResult, QueueingHint, ScorePlugin,
    Status,
};

/// The plugin's name in a profile.
pub const NAME: &str = "GpuHealth";

/// The custom resource the node agents publish.
pub const GPU_HEALTH: ApiInfo = ApiInfo {
    group: "example.com",
    resource: "gpuhealths",
    kind: "GpuHealth",
    readable: &["v1alpha1"],
};

/// The CRD of [`GPU_HEALTH`], as YAML.
pub const CRD: &str = include_str!("../crd.yaml");

/// Filter's reason when the healthy GPUs do not suffice.
pub const UNHEALTHY: &str = "node(s) had unhealthy GPUs";
/// Filter's reason for a node without a report (`requireReport: true`).
pub const NO_REPORT: &str = "node(s) had no GPU health report";

/// `GpuHealthArgs`, in a profile's `pluginConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(crate = "convoy_api::serde", rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GpuHealthArgs {
    /// The extended resource the GPUs are (default `nvidia.com/gpu`).
    pub resource_name: String,
    /// Whether a node must have a report for GPU pods to go there (default
    /// false: nodes whose agent has not reported yet are trusted).
    pub require_report: bool,
}

impl Default for GpuHealthArgs {
    fn default() -> Self {
        Self { resource_name: "nvidia.com/gpu".into(), require_report: false }
    }
}

impl PluginArgsType for GpuHealthArgs {
    fn validate(&self) -> Vec<(String, String)> {
        if self.resource_name.contains('/') {
            Vec::new()
        } else {
            vec![(
                "resourceName".into(),
                format!("{:?} is not an extended resource name (domain/name)", self.resource_name),
            )]
        }
    }
}

/// The plugin.
pub struct GpuHealth {
    args: GpuHealthArgs,
    objects: Arc<dyn ObjectLister>,
    /// The parsed reports and the version of the kind they were parsed at.
    reports: Mutex<(u64, Arc<HashMap<String, i64>>)>,
}

impl std::fmt::Debug for GpuHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuHealth").field("args", &self.args).finish_non_exhaustive()
    }
}

/// The factory a scheduler binary registers:
/// `App::new().with_kind(GPU_HEALTH).with_plugin(NAME, new)`.
pub fn new(args: GpuHealthArgs, handle: &Handle) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(GpuHealth::new(args, handle.objects.clone())))
}

/// `spec.unhealthy` of a report (0 when unset or unreadable).
fn unhealthy(obj: &CustomObject) -> i64 {
    obj.pointer("/spec/unhealthy").and_then(|v| v.as_i64()).unwrap_or(0).max(0)
}

impl GpuHealth {
    /// A plugin reading the reports from `objects`.
    pub fn new(args: GpuHealthArgs, objects: Arc<dyn ObjectLister>) -> Self {
        Self { args, objects, reports: Mutex::new((u64::MAX, Arc::default())) }
    }

    /// Unhealthy GPUs by node, parsed again only when a report changed.
    fn reports(&self) -> Arc<HashMap<String, i64>> {
        let version = self.objects.custom_version(&GPU_HEALTH);
        let mut cached = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        if cached.0 != version {
            let parsed = self
                .objects
                .custom_objects(&GPU_HEALTH)
                .iter()
                .map(|r| (r.name().to_string(), unhealthy(r)))
                .collect();
            *cached = (version, Arc::new(parsed));
        }
        cached.1.clone()
    }
}

/// PreFilter's state: the pod's GPUs and the reports.
struct State {
    wanted: i64,
    /// `None`: the kind is not usable (not served, or being listed).
    reports: Option<Arc<HashMap<String, i64>>>,
}

impl Plugin for GpuHealth {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                EventResource::Custom(GPU_HEALTH),
                ActionType::ADD | ActionType::UPDATE | ActionType::DELETE,
                is_schedulable_after_report_change,
            ),
            ClusterEventWithHint::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_ALLOCATABLE,
            ),
            ClusterEventWithHint::new(EventResource::AssignedPod, ActionType::DELETE),
        ]
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

/// A report added (a node now known healthy enough, with `requireReport`),
/// improved (fewer unhealthy GPUs) or gone may help; one that got worse
/// cannot.
fn is_schedulable_after_report_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let count = |o: Option<&EventObject>| match o {
        Some(EventObject::Custom(r)) => Some(unhealthy(r)),
        _ => None,
    };
    match (count(old), count(new)) {
        (Some(before), Some(after)) if after >= before => QueueingHint::Skip,
        _ => QueueingHint::Queue,
    }
}

impl PreFilterPlugin for GpuHealth {
    /// Skip for a pod that asks for no GPU; the reports otherwise.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        let wanted = pod.requests.requests.get(&self.args.resource_name);
        if wanted == 0 {
            return (None, Status::skip());
        }
        let served = self.objects.served_apis();
        let reports = if served.is_served(&GPU_HEALTH) {
            Some(self.reports())
        } else if self.args.require_report {
            let field = format!("resources[{}]", self.args.resource_name);
            let why = served.refusal(&field, &[GPU_HEALTH]).unwrap_or_default();
            return (None, Status::unresolvable(why));
        } else {
            None
        };
        state.write(State { wanted, reports });
        (None, Status::success())
    }
}

impl FilterPlugin for GpuHealth {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>() else { return Status::success() };
        let Some(reports) = &s.reports else { return Status::success() };
        let bad = match reports.get(node.name()) {
            Some(n) => *n,
            None if self.args.require_report => return Status::unschedulable(NO_REPORT),
            None => 0,
        };
        if node.free(&self.args.resource_name) - bad < s.wanted {
            return Status::unschedulable(UNHEALTHY);
        }
        Status::success()
    }
}

impl ScorePlugin for GpuHealth {
    /// The node's healthy share of its GPUs, 0..=100.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(State { reports: Some(reports), .. }) = state.read::<State>() else {
            return Ok(MAX_NODE_SCORE);
        };
        let total = node.allocatable.get(&self.args.resource_name);
        let bad = reports.get(node.name()).copied().unwrap_or(0);
        Ok(if total <= 0 { 0 } else { MAX_NODE_SCORE * (total - bad).max(0) / total })
    }
}

#[cfg(test)]
mod tests;
