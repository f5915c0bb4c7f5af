//! Building a profile's pipeline from its configuration, once, and running
//! the sequential extension points.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use convoy_api::{
    ActionType, BindPlugin, ClusterEventWithHint, Code, CycleState, EventResource, FilterPlugin,
    Handle, NodeInfo, NodeInfoLister, NodeToStatus, NominatedPods, PermitPlugin, Plugin, PodInfo,
    PodNominator, PostBindPlugin, PostFilterContext, PostFilterPlugin, PostFilterResult,
    PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin, PreFilterResult, PreScorePlugin,
    QueueSortPlugin, Registry, ReservePlugin, ScorePlugin, Status, events, pod_fields,
};
use convoy_config::{PluginSet, Profile};

use crate::metrics::{FrameworkMetrics, label, timed};
use crate::waiting_pods::{PermitWait, WaitingPodsMap};

/// A profile that cannot be built; names the profile and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile {profile:?}: {message}")]
pub struct FrameworkError {
    /// The profile's scheduler name.
    pub profile: String,
    /// What is wrong.
    pub message: String,
}

/// The PreFilter plugins that narrowed the nodes to a subset in this cycle
/// (for upstream's "didn't satisfy plugin(s) [...]" message).
#[derive(Debug, Clone, Default)]
pub struct PreFilterNarrowing(pub Vec<&'static str>);

/// The longest a pod may wait at Permit (upstream `maxTimeout`).
pub const MAX_PERMIT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// One profile's plugin pipeline: each extension point's plugins, in order,
/// collected once when the profile is built.
pub struct Framework {
    pub(crate) name: Arc<str>,
    pub(crate) queue_sort: Arc<dyn QueueSortPlugin>,
    pub(crate) pre_enqueue: Vec<Arc<dyn PreEnqueuePlugin>>,
    pub(crate) pre_filter: Vec<Arc<dyn PreFilterPlugin>>,
    pub(crate) filter: Vec<Arc<dyn FilterPlugin>>,
    pub(crate) post_filter: Vec<Arc<dyn PostFilterPlugin>>,
    pub(crate) pre_score: Vec<Arc<dyn PreScorePlugin>>,
    pub(crate) score: Vec<(Arc<dyn ScorePlugin>, i64)>,
    pub(crate) reserve: Vec<Arc<dyn ReservePlugin>>,
    pub(crate) permit: Vec<Arc<dyn PermitPlugin>>,
    pub(crate) pre_bind: Vec<Arc<dyn PreBindPlugin>>,
    pub(crate) bind: Vec<Arc<dyn BindPlugin>>,
    pub(crate) post_bind: Vec<Arc<dyn PostBindPlugin>>,
    pub(crate) events: HashMap<&'static str, Vec<ClusterEventWithHint>>,
    pub(crate) percentage_of_nodes_to_score: Option<u32>,
    pub(crate) waiting_pods: Arc<WaitingPodsMap>,
    pub(crate) pool: Option<Arc<rayon::ThreadPool>>,
    pub(crate) metrics: Option<Arc<dyn FrameworkMetrics>>,
    /// The plugins reading a field Convoy refuses
    /// ([`pod_fields::refusing_plugins`]) that the profile disables: the
    /// pod fields only they read are ignored, as upstream would.
    pub(crate) disabled_upstream: Vec<&'static str>,
    /// The pods nominated to nodes (counted in Filter); `None`: none ever.
    pub(crate) nominator: Option<Arc<dyn PodNominator>>,
}

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framework").field("profile", &self.name).finish_non_exhaustive()
    }
}

/// What building a framework needs besides the profile.
#[derive(Clone)]
pub struct FrameworkOptions {
    /// Plugin factories.
    pub registry: Registry,
    /// Handed to every plugin factory.
    pub handle: Handle,
    /// The scheduler's waiting-pods map (the same as in `handle`).
    pub waiting_pods: Arc<WaitingPodsMap>,
    /// Global `percentageOfNodesToScore` (the profile's overrides it).
    pub percentage_of_nodes_to_score: Option<u32>,
    /// Thread pool for Filter and Score over nodes; `None` runs them on the
    /// calling thread.
    pub pool: Option<Arc<rayon::ThreadPool>>,
    /// Where extension-point and (sampled) plugin timings go.
    pub metrics: Option<Arc<dyn FrameworkMetrics>>,
    /// The pods nominated to nodes by preemption, which Filter counts
    /// (the scheduling queue's); `None` when nothing nominates pods.
    pub nominator: Option<Arc<dyn PodNominator>>,
}

fn strip<T: ?Sized>(v: Vec<(Arc<T>, &convoy_config::PluginRef)>) -> Vec<Arc<T>> {
    v.into_iter().map(|(p, _)| p).collect()
}

macro_rules! expand_point {
    ($instances:expr, $profile:expr, $set:ident, $as:ident, $point:literal, $err:expr) => {{
        let mut out = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        let set: &PluginSet = &$profile.plugins.$set;
        for r in &set.enabled {
            let plugin: &Arc<dyn Plugin> = &$instances[r.name.as_str()];
            match plugin.clone().$as() {
                Some(p) => {
                    seen.insert(r.name.as_str());
                    out.push((p, r));
                }
                None => {
                    return Err($err(format!(
                        "plugins.{}.enabled: plugin {:?} does not implement {}",
                        $point, r.name, $point
                    )));
                }
            }
        }
        for r in &$profile.plugins.multi_point.enabled {
            if seen.contains(r.name.as_str()) || set.is_disabled(&r.name) {
                continue;
            }
            let plugin: &Arc<dyn Plugin> = &$instances[r.name.as_str()];
            if let Some(p) = plugin.clone().$as() {
                seen.insert(r.name.as_str());
                out.push((p, r));
            }
        }
        out
    }};
}

impl Framework {
    /// Builds the pipeline of a profile: instantiates every enabled plugin
    /// once (with its args), expands multiPoint into the points each plugin
    /// implements, and validates the result (one QueueSort, at least one
    /// Bind, positive weights).
    pub fn new(profile: &Profile, opts: &FrameworkOptions) -> Result<Self, FrameworkError> {
        let err =
            |message: String| FrameworkError { profile: profile.scheduler_name.clone(), message };
        let mut instances: HashMap<&str, Arc<dyn Plugin>> = HashMap::new();
        for name in profile.enabled_plugin_names() {
            let factory = opts.registry.get(name).ok_or_else(|| {
                let known: Vec<_> = opts.registry.names().collect();
                err(format!("unknown plugin {name:?}; known plugins: {}", known.join(", ")))
            })?;
            let plugin = factory(profile.plugin_args.get(name), &opts.handle)
                .map_err(|e| err(format!("plugin {name}: {e}")))?;
            instances.insert(name, plugin);
        }
        let p = profile;
        let queue_sort = expand_point!(instances, p, queue_sort, as_queue_sort, "queueSort", err);
        let score_refs = expand_point!(instances, p, score, as_score, "score", err);
        let mut score = Vec::new();
        for (plugin, r) in score_refs {
            // An explicit score weight wins over the multiPoint one.
            let w = p
                .plugins
                .score
                .enabled
                .iter()
                .find(|e| e.name == r.name && e.weight.is_some_and(|w| w != 0))
                .unwrap_or(r)
                .effective_weight();
            if w <= 0 {
                return Err(err(format!("plugins.score: weight of {} must be positive", r.name)));
            }
            score.push((plugin, i64::from(w)));
        }
        let mut queue_sort = strip(queue_sort);
        if queue_sort.len() != 1 {
            return Err(err(format!(
                "exactly one queueSort plugin must be enabled, found {}",
                queue_sort.len()
            )));
        }
        let bind = strip(expand_point!(instances, p, bind, as_bind, "bind", err));
        if bind.is_empty() {
            return Err(err("at least one bind plugin must be enabled".to_string()));
        }
        let mut events = HashMap::new();
        for plugin in instances.values() {
            events.insert(plugin.name(), plugin.events_to_register());
        }
        // A pod refused for a field Convoy does not evaluate (see
        // `refusal`): no cluster event helps it, only an update of the pod
        // that changes those fields. Without this entry the queue would
        // retry it on every event, as a pod no plugin rejected.
        events.insert(
            pod_fields::UNEVALUATED_FIELDS,
            vec![ClusterEventWithHint::with_hint(
                EventResource::UnscheduledPod,
                ActionType::UPDATE,
                events::unevaluated_fields_hint,
            )],
        );
        Ok(Self {
            name: Arc::from(p.scheduler_name.as_str()),
            queue_sort: queue_sort.remove(0),
            pre_enqueue: strip(expand_point!(
                instances,
                p,
                pre_enqueue,
                as_pre_enqueue,
                "preEnqueue",
                err
            )),
            pre_filter: strip(expand_point!(
                instances,
                p,
                pre_filter,
                as_pre_filter,
                "preFilter",
                err
            )),
            filter: strip(expand_point!(instances, p, filter, as_filter, "filter", err)),
            post_filter: strip(expand_point!(
                instances,
                p,
                post_filter,
                as_post_filter,
                "postFilter",
                err
            )),
            pre_score: strip(expand_point!(instances, p, pre_score, as_pre_score, "preScore", err)),
            score,
            reserve: strip(expand_point!(instances, p, reserve, as_reserve, "reserve", err)),
            permit: strip(expand_point!(instances, p, permit, as_permit, "permit", err)),
            pre_bind: strip(expand_point!(instances, p, pre_bind, as_pre_bind, "preBind", err)),
            bind,
            post_bind: strip(expand_point!(instances, p, post_bind, as_post_bind, "postBind", err)),
            events,
            percentage_of_nodes_to_score: p
                .percentage_of_nodes_to_score
                .or(opts.percentage_of_nodes_to_score),
            waiting_pods: opts.waiting_pods.clone(),
            pool: opts.pool.clone(),
            metrics: opts.metrics.clone(),
            disabled_upstream: pod_fields::refusing_plugins()
                .into_iter()
                .filter(|name| p.disables_upstream(name))
                .collect(),
            nominator: opts.nominator.clone(),
        })
    }

    /// The profile's scheduler name.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The QueueSort plugin.
    pub fn queue_sort(&self) -> &Arc<dyn QueueSortPlugin> {
        &self.queue_sort
    }

    /// The PreEnqueue plugins.
    pub fn pre_enqueue_plugins(&self) -> &[Arc<dyn PreEnqueuePlugin>] {
        &self.pre_enqueue
    }

    /// Why the pod is refused, if it uses a field Convoy does not evaluate
    /// yet ([`PodInfo::unevaluated`]) that some enabled upstream plugin
    /// would read: an UnschedulableAndUnresolvable status of
    /// [`UNEVALUATED_FIELDS`](pod_fields::UNEVALUATED_FIELDS), whose message
    /// names the fields. `None` for most pods, at the cost of one check.
    pub fn refusal(&self, pod: &PodInfo) -> Option<Status> {
        if pod.unevaluated.is_empty() {
            return None;
        }
        let mut paths = pod
            .unevaluated
            .iter()
            .filter(|u| !u.plugins.iter().all(|p| self.disabled_upstream.contains(p)))
            .map(|u| u.path.as_str())
            .peekable();
        paths.peek()?;
        let message = pod_fields::refusal_message(paths);
        Some(Status::unresolvable(message).with_plugin(pod_fields::UNEVALUATED_FIELDS))
    }

    /// Events each plugin registered, for the queue.
    pub fn events_to_register(&self) -> &HashMap<&'static str, Vec<ClusterEventWithHint>> {
        &self.events
    }

    /// Names of the plugins at each extension point (for `check-config`).
    pub fn describe(&self) -> Vec<(&'static str, Vec<String>)> {
        fn names<T: Plugin + ?Sized>(v: &[Arc<T>]) -> Vec<String> {
            v.iter().map(|p| p.name().to_string()).collect()
        }
        vec![
            ("queueSort", vec![self.queue_sort.name().to_string()]),
            ("preEnqueue", names(&self.pre_enqueue)),
            ("preFilter", names(&self.pre_filter)),
            ("filter", names(&self.filter)),
            ("postFilter", names(&self.post_filter)),
            ("preScore", names(&self.pre_score)),
            (
                "score",
                self.score.iter().map(|(p, w)| format!("{} (weight {w})", p.name())).collect(),
            ),
            ("reserve", names(&self.reserve)),
            ("permit", names(&self.permit)),
            ("preBind", names(&self.pre_bind)),
            ("bind", names(&self.bind)),
            ("postBind", names(&self.post_bind)),
        ]
    }

    /// The metrics sink for per-plugin timings, when this cycle is sampled.
    pub(crate) fn plugin_metrics(&self, state: &CycleState) -> Option<&Arc<dyn FrameworkMetrics>> {
        if state.record_plugin_metrics { self.metrics.as_ref() } else { None }
    }

    /// Starts a cycle: decides whether it records per-plugin timings.
    pub fn begin_cycle(&self, state: &mut CycleState) {
        state.record_plugin_metrics = self.metrics.as_ref().is_some_and(|m| m.sample());
    }

    /// Runs PreEnqueue; the first non-success status (with its plugin) is returned.
    pub fn run_pre_enqueue(&self, pod: &PodInfo) -> Status {
        for p in &self.pre_enqueue {
            let s = p.pre_enqueue(pod);
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Runs PreFilter: merges node subsets, records Skip, and stops at the
    /// first rejection.
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        let mut result: Option<PreFilterResult> = None;
        let mut narrowing: Vec<&'static str> = Vec::new();
        for p in &self.pre_filter {
            let (r, s) = p.pre_filter(state, pod, nodes);
            if s.is_skip() {
                state.skip_filter_plugins.push(p.name());
                continue;
            }
            if !s.is_success() {
                return (None, s.with_plugin(p.name()));
            }
            if let Some(r) = r {
                if r.node_names.is_some() {
                    narrowing.push(p.name());
                }
                result = Some(match result {
                    None => r,
                    Some(prev) => prev.merge(r),
                });
                if result.as_ref().and_then(|r| r.node_names.as_ref()).is_some_and(|n| n.is_empty())
                {
                    let msg = format!(
                        "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                        narrowing.join(" ")
                    );
                    state.write(PreFilterNarrowing(narrowing));
                    return (result, Status::unresolvable(msg).with_plugin(p.name()));
                }
            }
        }
        state.write(PreFilterNarrowing(narrowing));
        (result, Status::success())
    }

    /// The Filter plugins that run this cycle (those whose PreFilter did
    /// not Skip), computed once per cycle rather than per node.
    pub fn active_filters(&self, state: &CycleState) -> Vec<&Arc<dyn FilterPlugin>> {
        self.filter.iter().filter(|p| !state.skip_filter_plugins.contains(&p.name())).collect()
    }

    /// Runs Filter plugins on one node, stopping at the first rejection.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        run_filters(&self.active_filters(state), state, pod, node, self.plugin_metrics(state))
    }

    /// Whether the profile has PostFilter plugins.
    pub fn has_post_filter_plugins(&self) -> bool {
        !self.post_filter.is_empty()
    }

    /// The pods nominated to nodes, as this profile sees them.
    pub fn nominator(&self) -> Option<&Arc<dyn PodNominator>> {
        self.nominator.as_ref()
    }

    /// Upstream `RunPreFilterExtensionAddPod`: every PreFilter plugin's
    /// `add_pod` (plugins whose PreFilter returned Skip excepted); the
    /// first failure becomes an Error naming the plugin.
    pub fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.run_extensions(state, |ext, state| ext.add_pod(state, pod, to_add, node), "AddPod")
    }

    /// Upstream `RunPreFilterExtensionRemovePod`: every PreFilter plugin's
    /// `remove_pod`, as [`run_pre_filter_extension_add_pod`](Self::run_pre_filter_extension_add_pod).
    pub fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.run_extensions(
            state,
            |ext, state| ext.remove_pod(state, pod, to_remove, node),
            "RemovePod",
        )
    }

    fn run_extensions(
        &self,
        state: &mut CycleState,
        run: impl Fn(&dyn convoy_api::PreFilterExtensions, &mut CycleState) -> Status,
        what: &str,
    ) -> Status {
        for p in &self.pre_filter {
            let Some(ext) = p.pre_filter_extensions() else { continue };
            if state.skip_filter_plugins.contains(&p.name()) {
                continue;
            }
            let s = run(ext, state);
            if !s.is_success() {
                return Status::error(format!(
                    "running {what} on PreFilter plugin {:?}: {}",
                    p.name(),
                    s.message()
                ))
                .with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Upstream `RunFilterPluginsWithNominatedPods`, with the pods
    /// nominated to this node that the pod must leave room for (equal or
    /// higher priority, not itself) taken from `nominated`: the filters run on a copy of the
    /// node and the state with them added; if the pod fits, once more on
    /// the node as it is (a filter such as pod affinity must not pass only
    /// thanks to pods that are not there yet). With no such pods, one plain
    /// pass.
    pub(crate) fn run_filters_with_nominated(
        &self,
        filters: &[&Arc<dyn FilterPlugin>],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: Option<&NominatedPods>,
    ) -> Status {
        let metrics = self.plugin_metrics(state);
        let mut on_node = nominated.into_iter().flat_map(|n| n.on_node(node.name())).peekable();
        if on_node.peek().is_none() {
            return run_filters(filters, state, pod, node, metrics);
        }
        let mut node_with = node.clone();
        let mut state_with = state.clone();
        for p in on_node {
            node_with.add_pod(p.clone());
            let s = self.run_pre_filter_extension_add_pod(&mut state_with, pod, p, &node_with);
            if !s.is_success() {
                return s;
            }
        }
        let s = run_filters(filters, &state_with, pod, &node_with, metrics);
        if !s.is_success() {
            return s;
        }
        run_filters(filters, state, pod, node, metrics)
    }
}

/// Runs the given Filter plugins on one node, stopping at the first rejection.
pub(crate) fn run_filters(
    filters: &[&Arc<dyn FilterPlugin>],
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    metrics: Option<&Arc<dyn FrameworkMetrics>>,
) -> Status {
    if let Some(why) = &node.invalid {
        return Status::unresolvable(format!("node(s) had invalid status: {why}"));
    }
    for p in filters {
        let s = match metrics {
            None => p.filter(state, pod, node),
            Some(m) => {
                let start = std::time::Instant::now();
                let s = p.filter(state, pod, node);
                m.plugin(p.name(), "Filter", label(&s), start.elapsed());
                s
            }
        };
        if !s.is_success() {
            return s.with_plugin(p.name());
        }
    }
    Status::success()
}

/// Runs the given Filter plugins over a block of nodes, plugin by plugin:
/// `block` (indices into `nodes`) keeps the nodes that pass them all, and
/// each node that does not lands in `rejected` with the status of the
/// first plugin that rejected it (named), as [`run_filters`] per node.
/// With `metrics` (a sampled cycle), each plugin's call over the block is
/// one observation, labelled `Success` when it rejected no node and with
/// its first rejection's code otherwise: timing each node's call cost two
/// clock reads and a histogram lookup per plugin and node, more than the
/// filters themselves.
pub(crate) fn filter_block(
    filters: &[&Arc<dyn FilterPlugin>],
    state: &CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    block: &mut Vec<usize>,
    rejected: &mut Vec<(usize, Status)>,
    metrics: Option<&Arc<dyn FrameworkMetrics>>,
) {
    convoy_api::retain_nodes(block, rejected, |i| {
        let why = nodes[i].invalid.as_deref()?;
        Some(Status::unresolvable(format!("node(s) had invalid status: {why}")))
    });
    for p in filters {
        if block.is_empty() {
            return;
        }
        let before = rejected.len();
        let started = metrics.map(|_| std::time::Instant::now());
        p.filter_nodes(state, pod, nodes, block, rejected);
        if let (Some(m), Some(t)) = (metrics, started) {
            let status = rejected.get(before).map_or("Success", |(_, s)| label(s));
            m.plugin(p.name(), "Filter", status, t.elapsed());
        }
        for (_, s) in &mut rejected[before..] {
            *s = std::mem::take(s).with_plugin(p.name());
        }
    }
}

impl Framework {
    /// Runs PostFilter plugins as upstream's `RunPostFilterPlugins`: the
    /// first Success or UnschedulableAndUnresolvable ends the phase (with
    /// that plugin's result); an Error aborts it; otherwise the reasons of
    /// every plugin are joined, with the last result that said something
    /// about the nomination.
    pub fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
        ctx: &PostFilterContext<'_>,
    ) -> (Option<PostFilterResult>, Status) {
        let mut result = None;
        let mut reasons = Vec::new();
        let mut rejector = "";
        for p in &self.post_filter {
            let (r, s) = p.post_filter(state, pod, statuses, ctx);
            match s.code() {
                Code::Success | Code::UnschedulableAndUnresolvable => {
                    return (r, s.with_plugin(p.name()));
                }
                Code::Unschedulable => {}
                _ => return (None, s.with_plugin(p.name())),
            }
            if r.is_some() {
                result = r;
            }
            reasons.extend(s.reasons().iter().cloned());
            if rejector.is_empty() {
                rejector = p.name();
            }
        }
        let mut status = Status::new(Code::Unschedulable);
        for r in reasons {
            status.push_reason(r);
        }
        (result, status.with_plugin(rejector))
    }

    /// Runs PreScore, recording Skip.
    pub fn run_pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        feasible: &[&NodeInfo],
        all: &dyn NodeInfoLister,
    ) -> Status {
        for p in &self.pre_score {
            let s = p.pre_score(state, pod, feasible, all);
            if s.is_skip() {
                state.skip_score_plugins.push(p.name());
            } else if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Runs Reserve; on failure unreserves every plugin (in reverse).
    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let metrics = self.metrics.clone();
        timed(
            metrics.as_ref(),
            "Reserve",
            &self.name,
            || self.reserve_inner(state, pod, node),
            label,
        )
    }

    fn reserve_inner(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for p in &self.reserve {
            let s = p.reserve(state, pod, node);
            if !s.is_success() {
                self.run_unreserve(state, pod, node);
                return s.with_plugin(p.name());
            }
        }
        Status::success()
    }

    /// Runs Unreserve on every Reserve plugin, in reverse order.
    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for p in self.reserve.iter().rev() {
            p.unreserve(state, pod, node);
        }
    }

    /// Runs Permit. `Ok(None)`: allowed now. `Ok(Some(wait))`: the pod waits
    /// at Permit until allowed, rejected or timed out. `Err`: rejected.
    pub fn run_permit(
        &self,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        node: &str,
    ) -> Result<Option<PermitWait>, Status> {
        let metrics = self.metrics.clone();
        timed(
            metrics.as_ref(),
            "Permit",
            &self.name,
            || self.permit_inner(state, pod, node),
            |r| match r {
                Ok(None) => "Success",
                Ok(Some(_)) => "Wait",
                Err(s) => label(s),
            },
        )
    }

    fn permit_inner(
        &self,
        state: &mut CycleState,
        pod: &Arc<PodInfo>,
        node: &str,
    ) -> Result<Option<PermitWait>, Status> {
        let mut waiting = HashSet::new();
        let mut timeout = Duration::ZERO;
        for p in &self.permit {
            let (s, t) = p.permit(state, pod, node);
            match s.code() {
                convoy_api::Code::Success => {}
                convoy_api::Code::Wait => {
                    waiting.insert(p.name());
                    timeout = timeout.max(t.min(MAX_PERMIT_TIMEOUT));
                }
                _ => return Err(s.with_plugin(p.name())),
            }
        }
        if waiting.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.waiting_pods.add(pod.clone(), waiting, timeout)))
    }

    /// Runs PreBind then Bind (the first Bind plugin that does not Skip),
    /// in the binding task.
    pub async fn run_bind(
        &self,
        state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: Arc<str>,
    ) -> Status {
        let start = std::time::Instant::now();
        let s = self.bind_inner(state, pod, node).await;
        if let Some(m) = &self.metrics {
            m.extension_point("Bind", label(&s), &self.name, start.elapsed());
        }
        s
    }

    async fn bind_inner(
        &self,
        state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: Arc<str>,
    ) -> Status {
        for p in &self.pre_bind {
            let s = p.pre_bind(state.clone(), pod.clone(), node.clone()).await;
            if !s.is_success() {
                return s.with_plugin(p.name());
            }
        }
        for p in &self.bind {
            let s = p.bind(state.clone(), pod.clone(), node.clone()).await;
            if s.is_skip() {
                continue;
            }
            return s.with_plugin(p.name());
        }
        Status::error("no Bind plugin bound the pod")
    }

    /// Runs PostBind.
    pub fn run_post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        for p in &self.post_bind {
            p.post_bind(state, pod, node);
        }
    }
}
