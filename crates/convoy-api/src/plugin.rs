//! The extension points: one small trait each, as upstream's
//! `framework/interface.go`.
//!
//! A plugin is one type implementing [`Plugin`] plus the extension-point
//! traits it takes part in; it advertises them through the `as_*` methods
//! (`fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> { Some(self) }`).
//! The runtime collects each profile's plugins per extension point once,
//! when the profile is built.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use convoy_config::PluginArgs;
use futures::future::BoxFuture;

use crate::cycle_state::CycleState;
use crate::events::ClusterEventWithHint;
use crate::lister::NodeInfoLister;
use crate::node_info::NodeInfo;
use crate::objects::ObjectLister;
use crate::pod_info::{PodInfo, QueuedPodInfo};
use crate::preemption::PostFilterContext;
use crate::status::Status;
use crate::writes::{ClaimWrite, VolumeWrite};

/// The highest score a Score plugin may give after normalization.
pub const MAX_NODE_SCORE: i64 = 100;
/// The lowest score.
pub const MIN_NODE_SCORE: i64 = 0;

/// What every plugin implements.
pub trait Plugin: Send + Sync + 'static {
    /// The plugin's name, as used in configuration (`NodeResourcesFit`).
    fn name(&self) -> &'static str;

    /// Cluster events that may make a pod this plugin rejected schedulable
    /// (upstream `EnqueueExtensions`). A plugin that rejects pods and
    /// registers nothing leaves them to the periodic flush.
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        Vec::new()
    }

    /// QueueSort, if implemented.
    fn as_queue_sort(self: Arc<Self>) -> Option<Arc<dyn QueueSortPlugin>> {
        None
    }
    /// PreEnqueue, if implemented.
    fn as_pre_enqueue(self: Arc<Self>) -> Option<Arc<dyn PreEnqueuePlugin>> {
        None
    }
    /// PreFilter, if implemented.
    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        None
    }
    /// Filter, if implemented.
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        None
    }
    /// PostFilter, if implemented.
    fn as_post_filter(self: Arc<Self>) -> Option<Arc<dyn PostFilterPlugin>> {
        None
    }
    /// PreScore, if implemented.
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        None
    }
    /// Score (and NormalizeScore), if implemented.
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        None
    }
    /// Reserve/Unreserve, if implemented.
    fn as_reserve(self: Arc<Self>) -> Option<Arc<dyn ReservePlugin>> {
        None
    }
    /// Permit, if implemented.
    fn as_permit(self: Arc<Self>) -> Option<Arc<dyn PermitPlugin>> {
        None
    }
    /// PreBind, if implemented.
    fn as_pre_bind(self: Arc<Self>) -> Option<Arc<dyn PreBindPlugin>> {
        None
    }
    /// Bind, if implemented.
    fn as_bind(self: Arc<Self>) -> Option<Arc<dyn BindPlugin>> {
        None
    }
    /// PostBind, if implemented.
    fn as_post_bind(self: Arc<Self>) -> Option<Arc<dyn PostBindPlugin>> {
        None
    }
}

/// Orders the active queue. Exactly one per profile (and the same in every
/// profile).
pub trait QueueSortPlugin: Plugin {
    /// Whether `a` should be scheduled before `b`.
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}

/// Decides whether a pod may enter the active queue at all.
pub trait PreEnqueuePlugin: Plugin {
    /// Success lets the pod in; Unschedulable or Pending keep it in the
    /// unschedulable pool (gated) until an event this plugin registered
    /// lets its hint say Queue. Error is logged and treated as gated.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// Node subset computed by PreFilter: only these nodes are evaluated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    /// `None` means all nodes.
    pub node_names: Option<HashSet<Arc<str>>>,
}

impl PreFilterResult {
    /// Intersects two results (the runtime merges every plugin's).
    pub fn merge(self, other: PreFilterResult) -> PreFilterResult {
        match (self.node_names, other.node_names) {
            (None, b) => PreFilterResult { node_names: b },
            (a, None) => PreFilterResult { node_names: a },
            (Some(a), Some(b)) => {
                PreFilterResult { node_names: Some(a.intersection(&b).cloned().collect()) }
            }
        }
    }
}

/// Runs once per cycle before Filter.
pub trait PreFilterPlugin: Plugin {
    /// Success continues; Skip disables this plugin's Filter for the cycle;
    /// Unschedulable/UnschedulableAndUnresolvable rejects the pod on every
    /// node; Error aborts the attempt.
    /// `nodes` is every node of the cycle's snapshot (also when the cycle
    /// considers only some of them, e.g. one topology domain of a gang).
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status);

    /// Incremental updates of the state this plugin wrote, used when
    /// preemption evaluates "what if these pods were gone". `None` when the
    /// plugin's state does not depend on other pods.
    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        None
    }
}

/// Updates PreFilter state when pods are added or removed in a what-if.
pub trait PreFilterExtensions: Send + Sync {
    /// `pod_to_add` is now considered on `node`.
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status;
    /// `pod_to_remove` is no longer considered on `node`.
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod_to_schedule: &PodInfo,
        pod_to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status;
}

/// Decides whether a pod fits one node. Called in parallel over nodes: keep
/// it allocation-free on the rejection path (static reasons).
pub trait FilterPlugin: Plugin {
    /// Success: the node fits. Unschedulable: it may after preemption.
    /// UnschedulableAndUnresolvable: it will not. Error aborts the attempt.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;

    /// Filters a batch of nodes. `candidates` holds indices into `nodes`
    /// of the nodes still in the running; on return it keeps (in the same
    /// order) those that pass, and each node that does not is pushed onto
    /// `rejected` with its status, in `candidates`' order. It must give
    /// exactly what [`filter`](Self::filter) gives node by node; the
    /// framework calls it when it does not time each node's call and
    /// names the plugin on the statuses itself. The default calls `filter`
    /// per node; a plugin on the hot path overrides it to read its
    /// CycleState once per batch, or to return at once when it cannot
    /// reject anything for this pod.
    fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        candidates: &mut Vec<usize>,
        rejected: &mut Vec<(usize, Status)>,
    ) {
        retain_nodes(candidates, rejected, |i| {
            let s = self.filter(state, pod, &nodes[i]);
            (!s.is_success()).then_some(s)
        });
    }
}

/// The loop of a [`FilterPlugin::filter_nodes`]: `rejection` gives a
/// node's status when it does not pass (`None` when it does); the nodes
/// that pass stay in `candidates`, in order, and each other one is pushed
/// onto `rejected` with its status. A plain loop compacting in place:
/// cheaper per node than `Vec::retain` with a closure, which the compiler
/// did not inline on this path.
#[inline]
pub fn retain_nodes(
    candidates: &mut Vec<usize>,
    rejected: &mut Vec<(usize, Status)>,
    mut rejection: impl FnMut(usize) -> Option<Status>,
) {
    let mut kept = 0;
    for k in 0..candidates.len() {
        let i = candidates[k];
        match rejection(i) {
            None => {
                candidates[kept] = i;
                kept += 1;
            }
            Some(s) => rejected.push((i, s)),
        }
    }
    candidates.truncate(kept);
}

/// The statuses of the nodes that did not pass Filter.
#[derive(Debug, Clone, Default)]
pub struct NodeToStatus {
    /// Status of each rejected node, by name.
    pub map: HashMap<Arc<str>, Status>,
    /// Status of nodes not in the map that were never evaluated (e.g.
    /// excluded by a PreFilter result).
    pub absent: Option<Status>,
}

/// The outcome of a PostFilter plugin (preemption), upstream's
/// `PostFilterResult` with its `NominatingInfo` in override mode.
#[derive(Debug, Clone, Default)]
pub struct PostFilterResult {
    /// The node the pod is nominated to; `None` clears the pod's
    /// nomination (preemption would not help anywhere).
    pub nominated_node_name: Option<Arc<str>>,
    /// The pods to preempt on that node, most important first; empty
    /// when clearing.
    pub victims: Vec<Arc<PodInfo>>,
}

/// Runs when no node fits (preemption lives here).
pub trait PostFilterPlugin: Plugin {
    /// Success with a nominated node and victims ends the PostFilter
    /// phase: the scheduler records the nomination, preempts the victims
    /// off the loop and requeues the pod (which still fails this cycle).
    /// Unschedulable lets the next plugin try; its message is appended to
    /// the pod's FitError. A `None` result keeps the pod's nomination, a
    /// result without a node clears it. `ctx` gives the snapshot and the
    /// profile's plugins for what-ifs on copies of nodes.
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        statuses: &NodeToStatus,
        ctx: &PostFilterContext<'_>,
    ) -> (Option<PostFilterResult>, Status);
}

/// Runs once per cycle before Score, over the feasible nodes.
pub trait PreScorePlugin: Plugin {
    /// `feasible` are the nodes that passed Filter (the ones Score will
    /// see, in that order), borrowed from the snapshot (no reference count
    /// touched per node); `all` every node of the snapshot. Success
    /// continues; Skip disables this plugin's Score for the cycle; Error
    /// aborts the attempt.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        feasible: &[&NodeInfo],
        all: &dyn NodeInfoLister,
    ) -> Status;
}

/// Ranks feasible nodes. Called in parallel over nodes.
pub trait ScorePlugin: Plugin {
    /// A score for one node; after `normalize_score` it must lie in
    /// `[MIN_NODE_SCORE, MAX_NODE_SCORE]`. Err aborts the attempt.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Scores many nodes at once: `out[i]` for `nodes[i]` (same length).
    /// The framework calls this when it does not time each node's call; it
    /// must give exactly what [`score`](Self::score) gives node by node.
    /// The default calls `score` per node; a plugin on the hot path
    /// overrides it to read its CycleState once per cycle, not per node.
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        out: &mut [i64],
    ) -> Result<(), Status> {
        for (node, o) in nodes.iter().zip(out) {
            *o = self.score(state, pod, node)?;
        }
        Ok(())
    }

    /// NormalizeScore: rescales all nodes' scores (same order as the nodes
    /// scored). The default leaves them as they are.
    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [i64]) -> Status {
        Status::success()
    }
}

/// Tracks resources tentatively given to a pod before binding.
pub trait ReservePlugin: Plugin {
    /// Anything but Success unreserves every Reserve plugin and fails the
    /// attempt.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    /// Undoes `reserve`; must be idempotent and must not fail.
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

/// Holds a pod before binding (gangs).
pub trait PermitPlugin: Plugin {
    /// Success lets the pod bind; Wait holds it up to the returned timeout
    /// until allowed or rejected through the waiting-pods map; a rejection
    /// unreserves and requeues the pod.
    fn permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}

/// Runs before Bind, in the binding task (may do IO).
pub trait PreBindPlugin: Plugin {
    /// Anything but Success unreserves and requeues the pod.
    fn pre_bind(
        &self,
        state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: Arc<str>,
    ) -> BoxFuture<'static, Status>;
}

/// Binds the pod to the node (in the binding task).
pub trait BindPlugin: Plugin {
    /// Success: bound. Skip: let the next Bind plugin do it. Anything else
    /// unreserves, forgets the assumed pod and requeues it with backoff.
    fn bind(
        &self,
        state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: Arc<str>,
    ) -> BoxFuture<'static, Status>;
}

/// Informational, after a successful bind.
pub trait PostBindPlugin: Plugin {
    /// Called once the pod is bound.
    fn post_bind(&self, state: &CycleState, pod: &PodInfo, node: &str);
}

/// Why a bind failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// The pod is already bound to the node we asked for (a retried bind
    /// that had succeeded): counts as success.
    #[error("pod is already bound to this node")]
    AlreadyBound,
    /// The pod no longer exists or changed UID.
    #[error("pod is gone: {0}")]
    PodGone(String),
    /// Any other failure (network, conflict, refusal).
    #[error("{0}")]
    Failed(String),
}

/// Writes a binding to wherever pods live: the API server, the embedded
/// cluster, or a benchmark sink.
pub trait Binder: Send + Sync + 'static {
    /// Binds the pod to the node.
    fn bind(&self, pod: Arc<PodInfo>, node: Arc<str>) -> BoxFuture<'static, Result<(), BindError>>;

    /// Writes one of VolumeBinding's PreBind updates (a PersistentVolume's
    /// claim, a claim's selected node) and returns the written object's
    /// `metadata.resourceVersion` (VolumeBinding waits until the watched
    /// object is at least that recent). The default refuses: a binder that
    /// does not hold volumes cannot bind them.
    fn write_volume(&self, write: VolumeWrite) -> BoxFuture<'static, Result<String, BindError>> {
        let what = match write {
            VolumeWrite::BindVolume { pv, .. } => format!("persistentvolume {pv:?}"),
            VolumeWrite::SelectNode { claim, .. } => {
                format!("persistentvolumeclaim {:?}", claim.name)
            }
        };
        Box::pin(std::future::ready(Err(BindError::Failed(format!(
            "this binder cannot update {what}"
        )))))
    }

    /// Writes one of DynamicResources' ResourceClaim updates and returns
    /// the claim as written (the plugin uses it until the watch catches
    /// up, as upstream's assume cache). The default refuses: a binder that
    /// does not hold claims cannot allocate them.
    fn write_claim(
        &self,
        write: ClaimWrite,
    ) -> BoxFuture<'static, Result<Arc<k8s_openapi::api::resource::v1::ResourceClaim>, BindError>>
    {
        Box::pin(std::future::ready(Err(BindError::Failed(format!(
            "this binder cannot update resourceclaim {:?}",
            write.claim_key()
        )))))
    }

    /// The pods bound to `node`, read fresh from where bindings land (a
    /// consistent read of the API server), for the check the scheduler
    /// makes before binding while another scheduler is active. `None` (the
    /// default): this binder cannot read them, and the scheduler relies on
    /// its cache alone.
    fn pods_on_node(&self, _node: Arc<str>) -> FreshPods {
        Box::pin(std::future::ready(None))
    }
}

/// What [`Binder::pods_on_node`] returns: the pods bound to a node, read
/// from the source of truth, or `None` when the binder cannot read them.
pub type FreshPods = BoxFuture<'static, Option<Vec<Arc<k8s_openapi::api::core::v1::Pod>>>>;

/// Access to the pods waiting at Permit, for plugins (gangs) that allow or
/// reject them.
pub trait WaitingPods: Send + Sync {
    /// Allows the pod on behalf of `plugin`; true if the pod was waiting.
    fn allow(&self, uid: &str, plugin: &'static str) -> bool;
    /// Rejects the pod; true if the pod was waiting.
    fn reject(&self, uid: &str, plugin: &'static str, message: &str) -> bool;
    /// UIDs of the waiting pods.
    fn uids(&self) -> Vec<Arc<str>>;
}

/// What the framework hands each plugin factory.
#[derive(Clone)]
pub struct Handle {
    /// Where bindings go.
    pub binder: Arc<dyn Binder>,
    /// The pods waiting at Permit.
    pub waiting_pods: Arc<dyn WaitingPods>,
    /// The profile's scheduler name.
    pub profile: Arc<str>,
    /// The other watched objects (namespaces, selectors, budgets,
    /// PriorityClasses, the volume kinds), shared by every profile.
    pub objects: Arc<dyn ObjectLister>,
    /// Which running pods preemption takes together (gangs); `None`: every
    /// pod is a victim alone.
    pub groups: Option<Arc<dyn crate::preemption::PreemptionGroups>>,
    /// The preemptors whose victims are being preempted (shared by every
    /// profile and the scheduler, which fills it).
    pub running_preemptions: Arc<crate::preemption::RunningPreemptions>,
    /// DynamicResources' counters (shared by every profile; the
    /// scheduler's metrics read them).
    pub dra_stats: Arc<crate::objects::DraStats>,
}

/// Builds a plugin from its (already validated) args.
pub type PluginFactory =
    Arc<dyn Fn(Option<&PluginArgs>, &Handle) -> Result<Arc<dyn Plugin>, String> + Send + Sync>;

/// The args of an out-of-tree plugin: a serde type the plugin declares
/// (its fields in upstream's camelCase, `#[serde(default)]` for optional
/// ones). The configuration loader decodes a profile's `pluginConfig` args
/// into it and reports an error with its file, line, column and field, as
/// for in-tree args; the factory receives the decoded value (the
/// [`Default`] when the profile gives no args).
pub trait PluginArgsType: serde::de::DeserializeOwned + Default + Send + Sync + 'static {
    /// Checks beyond decoding, each problem as (field path below `args`,
    /// such as `thresholds[1]`, message); none by default.
    fn validate(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// A plugin factory's args of no type ([`Registry::register_with_args`]
/// plugins without args use it).
impl PluginArgsType for () {}

/// Plugin factories by name, and the custom resource kinds plugins read.
/// The in-tree plugins register themselves in `convoy_plugins::registry()`;
/// an out-of-tree plugin is one more line, with args of its own type:
/// `registry.register_with_args("MyPlugin", |args: MyArgs, handle| Ok(Arc::new(MyPlugin::new(args, handle))))`.
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<&'static str, PluginFactory>,
    /// Out-of-tree plugins' checks of their args.
    checks: BTreeMap<&'static str, convoy_config::other_args::ArgsCheck>,
    /// Custom resource kinds plugins read ([`Registry::watch_kind`]).
    kinds: Vec<crate::apis::ApiInfo>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("plugins", &self.names().collect::<Vec<_>>())
            .field("kinds", &self.kinds)
            .finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a factory; a later registration of the same name replaces it.
    pub fn register<F>(&mut self, name: &'static str, factory: F) -> &mut Self
    where
        F: Fn(Option<&PluginArgs>, &Handle) -> Result<Arc<dyn Plugin>, String>
            + Send
            + Sync
            + 'static,
    {
        self.factories.insert(name, Arc::new(factory));
        self
    }

    /// Adds an out-of-tree plugin whose args are a type of its own
    /// ([`PluginArgsType`]): the loader checks them (with positions), and
    /// `factory` gets them decoded. A later registration of the same name
    /// replaces it.
    pub fn register_with_args<A, F>(&mut self, name: &'static str, factory: F) -> &mut Self
    where
        A: PluginArgsType,
        F: Fn(A, &Handle) -> Result<Arc<dyn Plugin>, String> + Send + Sync + 'static,
    {
        use convoy_config::other_args::decode_args;
        self.checks.insert(
            name,
            Arc::new(|value: &serde_json::Value| match decode_args::<A>(value) {
                Ok(args) => args.validate(),
                Err(problem) => vec![problem],
            }),
        );
        self.register(name, move |args, handle| {
            let null = serde_json::Value::Null;
            let value = match args {
                None => &null,
                Some(PluginArgs::Other(value)) => value,
                Some(other) => {
                    return Err(format!("{name}: args of another type given: {other:?}"));
                }
            };
            let args = decode_args::<A>(value).map_err(|(field, message)| {
                if field.is_empty() { message } else { format!("{field}: {message}") }
            })?;
            if let Some((field, message)) = args.validate().into_iter().next() {
                return Err(format!("{field}: {message}"));
            }
            factory(args, handle)
        })
    }

    /// Declares a custom resource kind plugins read: the scheduler watches
    /// it (in the first of `api.readable` the server serves, as discovery
    /// finds it; never waiting for it), `simulate` loads its objects from a
    /// cluster file, and plugins read them through
    /// [`ObjectLister::custom_objects`] in their [`Handle`]. A change of one is
    /// an [`EventResource::Custom`](crate::EventResource::Custom) event.
    pub fn watch_kind(&mut self, api: crate::apis::ApiInfo) -> &mut Self {
        if !self.kinds.contains(&api) {
            self.kinds.push(api);
        }
        self
    }

    /// The custom resource kinds plugins declared.
    pub fn kinds(&self) -> &[crate::apis::ApiInfo] {
        &self.kinds
    }

    /// Adds every plugin and kind of `other`; a name registered in both is
    /// an error (upstream's `Registry.Merge`).
    pub fn merge(&mut self, other: &Registry) -> Result<(), String> {
        if let Some(name) = other.names().find(|n| self.factories.contains_key(n)) {
            return Err(format!("a plugin named {name} already exists"));
        }
        self.factories.extend(other.factories.iter().map(|(k, v)| (*k, v.clone())));
        self.checks.extend(other.checks.iter().map(|(k, v)| (*k, v.clone())));
        for api in &other.kinds {
            self.watch_kind(*api);
        }
        Ok(())
    }

    /// What the configuration loader needs to know of this registry: the
    /// names, and the out-of-tree plugins' checks of their args.
    pub fn known_plugins(&self) -> convoy_config::KnownPlugins {
        self.checks.iter().fold(convoy_config::KnownPlugins::new(self.names()), |k, (n, c)| {
            k.with_args(n, c.clone())
        })
    }

    /// The factory for a name.
    pub fn get(&self, name: &str) -> Option<&PluginFactory> {
        self.factories.get(name)
    }

    /// All registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.factories.keys().copied()
    }
}
