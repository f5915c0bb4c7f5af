//! The scheduler: profiles, queue, cache and binder wired together, fed by a
//! stream of [`ClusterUpdate`]s from any adapter.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use convoy_api::{
    ActionType, Binder, Clock, ClusterEvent, ClusterObjects, ClusterUpdate, EventObject,
    EventResource, GroupKey, Handle, PodInfo, PreemptionActuator, Registry, RunningPreemptions,
};
use convoy_cache::{Cache, Snapshot};
use convoy_config::SchedulerConfig;
use convoy_framework::{Framework, FrameworkOptions, WaitingPodsMap};
use convoy_gang::{GangSchedulingArgs, GangState};
use convoy_queue::{Nominator, ProfileQueueing, QueueConfig, SchedulingQueue};
use k8s_openapi::api::core::v1::{Node, Pod};
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::decision::{DecisionSink, GroupDecision};

/// Upstream's default for how long a pod may stay in the unschedulable pool
/// before the periodic flush retries it.
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

/// Building the scheduler failed (a profile could not be built).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A profile is invalid.
    #[error(transparent)]
    Framework(#[from] convoy_framework::FrameworkError),
    /// The gang scheduling args are invalid.
    #[error("{0}")]
    Gang(String),
    /// The thread pool could not start.
    #[error("starting the scheduling thread pool: {0}")]
    Pool(String),
}

/// Everything a scheduler is built from.
pub struct SchedulerOptions {
    /// The validated configuration.
    pub config: SchedulerConfig,
    /// Plugin factories (in-tree plus any out-of-tree).
    pub registry: Registry,
    /// Where bindings go.
    pub binder: Arc<dyn Binder>,
    /// Who deletes preemption victims and writes nominations
    /// ([`convoy_api::NoActuator`] for a scheduler that never preempts).
    pub actuator: Arc<dyn PreemptionActuator>,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Where decisions go.
    pub sink: Arc<dyn DecisionSink>,
    /// Seed of the tie-breaking RNG (fixed in tests, random otherwise).
    pub seed: Option<u64>,
    /// Where extension-point and plugin timings go (none in simulations).
    pub framework_metrics: Option<Arc<dyn convoy_framework::FrameworkMetrics>>,
}

impl SchedulerOptions {
    /// Options for a scheduler on an embedded cluster (tests, `simulate`,
    /// benchmarks): the cluster binds and preempts, the in-tree plugins,
    /// the tie-breaking seed fixed at 1, no framework metrics.
    pub fn embedded(
        config: SchedulerConfig,
        cluster: &Arc<convoy_embedded::EmbeddedCluster>,
        clock: Arc<dyn Clock>,
        sink: Arc<dyn DecisionSink>,
    ) -> Self {
        Self {
            config,
            registry: crate::registry(),
            binder: Arc::new(convoy_embedded::EmbeddedBinder(cluster.clone())),
            actuator: Arc::new(convoy_embedded::EmbeddedActuator(cluster.clone())),
            clock,
            sink,
            seed: Some(1),
            framework_metrics: None,
        }
    }
}

/// State only the scheduling loop touches.
pub(crate) struct LoopState {
    pub(crate) snapshot: Snapshot,
    pub(crate) next_start: usize,
    pub(crate) rng: SmallRng,
}

/// A running scheduler: one queue and one cache shared by all profiles.
pub struct Scheduler {
    pub(crate) profiles: HashMap<String, Arc<Framework>>,
    pub(crate) queue: Arc<SchedulingQueue>,
    pub(crate) cache: Arc<Cache>,
    pub(crate) sink: Arc<dyn DecisionSink>,
    pub(crate) loop_state: Mutex<LoopState>,
    pub(crate) binds_in_flight: Arc<AtomicUsize>,
    /// Pods whose binding cycle the loop starts next
    /// ([`Scheduler::start_bindings`]).
    pub(crate) bindings: Mutex<Vec<crate::schedule_one::Binding>>,
    /// Placed groups whose report (log line, Event, status, metrics) waits
    /// for their members' bindings: the decision and how many bindings are
    /// still to land. A group is reported placed once they all have, so a
    /// replica that dies between its decision and its bindings never says
    /// a group is scheduled.
    pub(crate) group_reports: Mutex<HashMap<GroupKey, (GroupDecision, usize)>>,
    pub(crate) synced: Arc<AtomicBool>,
    pub(crate) waiting_pods: Arc<WaitingPodsMap>,
    pub(crate) gang: Arc<GangState>,
    /// Profiles with gang scheduling enabled, and their args.
    pub(crate) gang_args: HashMap<String, GangSchedulingArgs>,
    /// The [`ClusterObject`](convoy_api::ClusterObject)s, shared with plugins.
    pub(crate) objects: Arc<ClusterObjects>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Deletes preemption victims, writes nominations.
    pub(crate) actuator: Arc<dyn PreemptionActuator>,
    /// Preemptions being actuated, for tests and shutdown.
    pub(crate) preemptions_in_flight: Arc<AtomicUsize>,
    /// The preemptions not over yet (DefaultPreemption's PreEnqueue holds
    /// their preemptors back meanwhile).
    pub(crate) running_preemptions: Arc<RunningPreemptions>,
    /// DynamicResources' counters, for the metrics.
    pub(crate) dra_stats: Arc<convoy_api::objects::DraStats>,
    /// How long a simulation may go on, in simulated time, without any
    /// change to the cluster ([`Scheduler::run_until_idle`]).
    pub(crate) quiet_limit: Duration,
    /// `delayCacheUntilActive` with leader election on: the live loop starts
    /// the watches (and so fills the cache) only once this replica leads.
    pub(crate) delay_cache_until_active: bool,
    /// Nodes held out of scheduling after a kubelet rejected a pod Convoy
    /// bound there (see [`crate::conflicts`]).
    pub(crate) holds: crate::conflicts::NodeHolds,
    /// Device-view mismatches already reported.
    pub(crate) device_views: crate::conflicts::DeviceViews,
    /// Set once this replica lost its lease: from then on no binding,
    /// preemption or nomination write starts (fencing; those in flight
    /// finish or time out).
    pub(crate) fenced: AtomicBool,
    /// Slots for nomination writes in flight
    /// ([`MAX_NOMINATION_WRITES`](crate::preempt::MAX_NOMINATION_WRITES)).
    pub(crate) nomination_writes: Arc<tokio::sync::Semaphore>,
    /// Whether this replica schedules (leads, or runs a simulation): only
    /// then does it report what it sees of other schedulers and kubelets.
    pub(crate) leading: AtomicBool,
    /// What Convoy knows of other schedulers at work; see
    /// [`crate::conflicts`].
    pub(crate) foreign: Mutex<crate::conflicts::Foreign>,
    /// Where bindings go (also read for the nodes' pods before a binding
    /// while another scheduler is active).
    pub(crate) binder: Arc<dyn Binder>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").field("profiles", &self.profiles.keys()).finish_non_exhaustive()
    }
}

impl Scheduler {
    /// Builds every profile's framework, the queue and the cache.
    pub fn new(opts: SchedulerOptions) -> Result<Arc<Self>, BuildError> {
        let cfg = &opts.config;
        let threads = (cfg.parallelism as usize)
            .min(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
        let pool = if threads > 1 {
            Some(Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("convoy-filter-{i}"))
                    .build()
                    .map_err(|e| BuildError::Pool(e.to_string()))?,
            ))
        } else {
            None
        };
        let waiting_pods = WaitingPodsMap::new();
        // Gang scheduling needs state shared between its plugin and the
        // group cycle: its factories are bound to this scheduler's state.
        let gang = GangState::new();
        let mut registry = opts.registry.clone();
        convoy_gang::register(&mut registry, gang.clone(), opts.clock.clone());
        let mut gang_args = HashMap::new();
        let mut profiles = HashMap::new();
        let mut queueing = HashMap::new();
        let mut less = None;
        let objects = Arc::new(ClusterObjects::new());
        // The queue keeps it; every profile's Filter reads it.
        let nominator = Arc::new(Nominator::new());
        // Filled by `spawn_preemption`, read by DefaultPreemption's PreEnqueue.
        let running_preemptions = Arc::new(RunningPreemptions::new(opts.clock.clone()));
        let dra_stats = Arc::new(convoy_api::objects::DraStats::default());
        for p in &cfg.profiles {
            let handle = Handle {
                binder: opts.binder.clone(),
                waiting_pods: waiting_pods.clone(),
                profile: Arc::from(p.scheduler_name.as_str()),
                objects: objects.clone(),
                groups: Some(gang.clone()),
                running_preemptions: running_preemptions.clone(),
                dra_stats: dra_stats.clone(),
            };
            let fwk = Framework::new(
                p,
                &FrameworkOptions {
                    registry: registry.clone(),
                    handle,
                    waiting_pods: waiting_pods.clone(),
                    percentage_of_nodes_to_score: cfg.percentage_of_nodes_to_score,
                    pool: pool.clone(),
                    metrics: opts.framework_metrics.clone(),
                    nominator: Some(nominator.clone() as Arc<dyn convoy_api::PodNominator>),
                },
            )?;
            less.get_or_insert_with(|| fwk.queue_sort().clone());
            let enabled = p.enabled_plugin_names();
            if let Some(name) = [convoy_gang::NAME, convoy_gang::COSCHEDULING]
                .into_iter()
                .find(|n| enabled.contains(n))
            {
                let args = GangSchedulingArgs::decode(p.plugin_args.get(name)).map_err(|e| {
                    BuildError::Gang(format!("profile {:?}: {name}: {e}", p.scheduler_name))
                })?;
                if gang_args.is_empty() {
                    // The guard is cluster-wide, as the capacity it saves is.
                    gang.set_policy(args.starvation_policy());
                }
                gang_args.insert(p.scheduler_name.clone(), args);
            }
            queueing.insert(
                p.scheduler_name.clone(),
                ProfileQueueing {
                    pre_enqueue: fwk.pre_enqueue_plugins().to_vec(),
                    events: fwk.events_to_register().clone(),
                },
            );
            profiles.insert(p.scheduler_name.clone(), Arc::new(fwk));
        }
        let queue = Arc::new(SchedulingQueue::new(QueueConfig {
            clock: opts.clock.clone(),
            less: less.expect("config has at least one profile"),
            profiles: queueing,
            initial_backoff: Duration::from_secs(cfg.pod_initial_backoff_seconds),
            max_backoff: Duration::from_secs(cfg.pod_max_backoff_seconds),
            max_in_unschedulable: MAX_IN_UNSCHEDULABLE,
            nominator,
            pop_from_backoff: true,
        }));
        let cache = Arc::new(Cache::new(opts.clock.clone()));
        let quiet_limit = quiet_limit(Duration::from_secs(cfg.pod_max_backoff_seconds), &gang_args);
        let rng = match opts.seed {
            Some(s) => SmallRng::seed_from_u64(s),
            None => SmallRng::from_os_rng(),
        };
        Ok(Arc::new(Self {
            profiles,
            queue,
            cache,
            sink: opts.sink,
            loop_state: Mutex::new(LoopState { snapshot: Snapshot::default(), next_start: 0, rng }),
            binds_in_flight: Arc::new(AtomicUsize::new(0)),
            bindings: Mutex::new(Vec::new()),
            group_reports: Mutex::new(HashMap::new()),
            synced: Arc::new(AtomicBool::new(false)),
            waiting_pods,
            gang,
            gang_args,
            objects,
            clock: opts.clock,
            actuator: opts.actuator,
            preemptions_in_flight: Arc::new(AtomicUsize::new(0)),
            running_preemptions,
            dra_stats,
            quiet_limit,
            delay_cache_until_active: cfg.delay_cache_until_active
                && cfg.leader_election.leader_elect,
            holds: Default::default(),
            device_views: Default::default(),
            fenced: AtomicBool::new(false),
            nomination_writes: Arc::new(tokio::sync::Semaphore::new(
                crate::preempt::MAX_NOMINATION_WRITES,
            )),
            leading: AtomicBool::new(false),
            foreign: Mutex::default(),
            binder: opts.binder,
        }))
    }

    /// DynamicResources' counters (allocation searches, claim writes).
    pub fn dra_stats(&self) -> &convoy_api::objects::DraStats {
        &self.dra_stats
    }

    /// This replica lost its lease: nothing that writes to the API server
    /// starts any more (bindings, preemptions, nomination writes).
    pub fn fence(&self) {
        self.fenced.store(true, Ordering::Release);
        self.leading.store(false, Ordering::Release);
    }

    /// Whether [`fence`](Self::fence) was called.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// The scheduling queue.
    pub fn queue(&self) -> &Arc<SchedulingQueue> {
        &self.queue
    }

    /// The cluster cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// The profiles' frameworks by scheduler name.
    pub fn profiles(&self) -> &HashMap<String, Arc<Framework>> {
        &self.profiles
    }

    /// Whether the initial lists have been applied (`/readyz`).
    pub fn synced(&self) -> &Arc<AtomicBool> {
        &self.synced
    }

    /// Bindings started and not yet finished.
    pub fn binds_in_flight(&self) -> usize {
        self.binds_in_flight.load(Ordering::Acquire)
    }

    /// Preemptions whose victims are still being deleted (their API calls
    /// in flight).
    pub fn preemptions_in_flight(&self) -> usize {
        self.preemptions_in_flight.load(Ordering::Acquire)
    }

    /// Whether a pod is one of ours (its scheduler name is a profile).
    pub fn is_ours(&self, pod: &Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        self.profiles.contains_key(name)
    }

    /// Applies one cluster update to the cache and the queue, as upstream's
    /// event handlers do.
    pub fn handle_update(&self, update: ClusterUpdate) {
        match update {
            ClusterUpdate::NodeAdded(node) => {
                self.cache.add_node(node.clone());
                self.move_all(
                    EventResource::Node,
                    ActionType::ADD,
                    None,
                    Some(EventObject::Node(node)),
                );
            }
            ClusterUpdate::NodeUpdated { old, new } => {
                let action = node_update_action(&old, &new);
                let name = new.metadata.name.as_deref().unwrap_or("");
                let shrunk = action.0 & ActionType::UPDATE_NODE_ALLOCATABLE.0 != 0;
                let before = shrunk.then(|| self.cache.node_info(name)).flatten();
                self.cache.update_node(self.holds.cache_view(new.clone()));
                if shrunk && self.leading.load(Ordering::Acquire) {
                    self.check_shortfall(before, name);
                    self.check_device_views(name);
                }
                if action.0 != 0 {
                    self.move_all(
                        EventResource::Node,
                        action,
                        Some(EventObject::Node(old)),
                        Some(EventObject::Node(new)),
                    );
                }
            }
            ClusterUpdate::NodeDeleted(node) => {
                self.holds.node_deleted(node.metadata.name.as_deref().unwrap_or(""));
                log_cache_error(
                    self.cache.remove_node(node.metadata.name.as_deref().unwrap_or("")),
                );
            }
            ClusterUpdate::PodAdded(pod) => self.pod_added(pod),
            ClusterUpdate::PodUpdated { old, new } => self.pod_updated(old, new),
            ClusterUpdate::PodDeleted(pod) => self.pod_deleted(pod),
            ClusterUpdate::PodGroupApplied(pg) => {
                let quorum = self.gang.apply_group(pg);
                self.queue.activate(&quorum);
            }
            ClusterUpdate::PodGroupDeleted(key) => self.gang.delete_group(&key),
            ClusterUpdate::ObjectApplied(obj) => {
                let old = self.objects.apply(&obj);
                self.slice_changed(&obj);
                // The volume kinds can make pods the volume plugins
                // rejected schedulable (a claim created or bound, a CSINode
                // limit raised); deletions cannot, as upstream.
                if let Some(resource) = EventResource::of_object(&obj) {
                    let action = if old.is_some() { ActionType::UPDATE } else { ActionType::ADD };
                    self.move_all(
                        resource,
                        action,
                        old.map(EventObject::Object),
                        Some(EventObject::Object(obj)),
                    );
                }
            }
            ClusterUpdate::ObjectDeleted(obj) => {
                self.objects.delete(&obj);
                self.slice_changed(&obj);
                // A DeviceTaintRule gone takes its taints off devices
                // (upstream hears of it as an update of the slices it
                // patched).
                if matches!(obj, convoy_api::ClusterObject::DeviceTaintRule(_)) {
                    self.move_all(
                        EventResource::DeviceTaintRule,
                        ActionType::DELETE,
                        Some(EventObject::Object(obj)),
                        None,
                    );
                }
            }
            ClusterUpdate::CustomApplied(obj) => {
                let old = self.objects.custom().apply(obj.clone());
                let action = if old.is_some() { ActionType::UPDATE } else { ActionType::ADD };
                self.move_all(
                    EventResource::Custom(obj.api),
                    action,
                    old.map(EventObject::Custom),
                    Some(EventObject::Custom(obj)),
                );
            }
            ClusterUpdate::CustomDeleted(obj) => {
                if let Some(old) = self.objects.custom().delete(&obj) {
                    self.move_all(
                        EventResource::Custom(obj.api),
                        ActionType::DELETE,
                        Some(EventObject::Custom(old)),
                        None,
                    );
                }
            }
            ClusterUpdate::ApisServed(served) => {
                // A pod refused for an API the server did not serve may be
                // placeable now (a CRD installed, the server upgraded); such
                // changes are rare, so every pending pod is tried again.
                if self.objects.set_served_apis(served) {
                    self.move_all(EventResource::WildCard, ActionType::ALL, None, None);
                }
            }
            ClusterUpdate::Synced => {
                if !self.synced.swap(true, Ordering::AcqRel) {
                    tracing::info!(
                        nodes = self.cache.node_count(),
                        pods = self.cache.pod_count(),
                        "initial lists synced: scheduling may start"
                    );
                }
            }
        }
    }

    /// A group whose pods name different schedulers is rejected (its
    /// members stay gated, see GangScheduling's PreEnqueue); say so once,
    /// as a group decision (the PodGroup's Event), on behalf of the first
    /// of those schedulers that is one of our profiles.
    fn report_mixed_schedulers(&self, pod: &PodInfo) {
        let Some(key) = &pod.group else { return };
        let Some(names) = self.gang.mixed_schedulers_to_report(key) else { return };
        let Some(profile) = names.iter().find(|n| self.gang_args.contains_key(&***n)) else {
            return;
        };
        let Some(st) = self.gang.status(key) else { return };
        let list: Vec<&str> = names.iter().map(|n| &**n).collect();
        self.sink.record_group(&crate::decision::GroupDecision {
            group: key.clone(),
            uid: st.spec.as_ref().map(|s| s.uid.clone()).filter(|u| !u.is_empty()),
            profile: profile.clone(),
            outcome: crate::decision::GroupOutcome::Unschedulable {
                message: format!(
                    "pod group {key} is rejected: its pods name different schedulers ({})",
                    list.join(", ")
                ),
            },
            placed: 0,
            members: st.members,
            placed_before: st.placed(),
            min_member: st.min_member(),
            nodes: Default::default(),
            failures_before: st.failures,
            barrier: false,
            latency: std::time::Duration::ZERO,
        });
    }

    /// The [`ClusterObject`](convoy_api::ClusterObject)s plugins read.
    pub fn objects(&self) -> &Arc<ClusterObjects> {
        &self.objects
    }

    /// The gang state (PodGroups and their members).
    pub fn gang(&self) -> &Arc<GangState> {
        &self.gang
    }

    /// A pod left (deleted or finished): its group forgets it, and a
    /// starving group whose reservation plan waited for it last is tried
    /// at once (its members' backoff would otherwise delay it).
    fn gang_pod_left(&self, pod: &PodInfo) {
        self.gang.pod_removed(pod);
        if let Some(group) = self.gang.waited_pod_left(&pod.key) {
            tracing::debug!(%group, "the pods its reservation plan waited for are gone: trying the group");
            let members = self.gang.pending_members(&group);
            self.queue.activate(&members);
        }
    }

    /// Activates the pods the starvation guard turned away, once it has
    /// let go (called after a group is placed and by the periodic tick).
    pub fn release_held_pods(&self) {
        let held = self.gang.release_held(self.clock.now());
        if !held.is_empty() {
            self.queue.activate(&held);
        }
    }

    fn move_all(
        &self,
        resource: EventResource,
        action: ActionType,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) {
        self.queue.move_all_to_active_or_backoff(
            ClusterEvent::new(resource, action),
            old.as_ref(),
            new.as_ref(),
        );
    }

    fn pod_info(&self, pod: Arc<Pod>) -> Option<Arc<PodInfo>> {
        match PodInfo::new(pod) {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                tracing::warn!(error = %e, "ignoring a pod the scheduler cannot read");
                None
            }
        }
    }

    /// A pending pod of ours that cannot be read (the API server would
    /// have refused it, or a newer client wrote what this version cannot
    /// evaluate): it stays pending with the field named (decision, Event,
    /// condition) and a warning, and blocks nothing.
    fn refuse(&self, e: &convoy_api::InvalidPod) {
        tracing::warn!(pod = %e.pod, error = %e.message, "refusing a pod the scheduler cannot read");
        self.sink.record(&crate::schedule_one::invalid_pod_decision(e));
    }

    fn pod_added(&self, pod: Arc<Pod>) {
        let assigned =
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
        if !self.is_ours(&pod)
            && !is_terminal(&pod)
            && let Some(uid) = pod.metadata.uid.as_deref()
        {
            self.foreign_pod_seen(&Arc::from(uid), !assigned);
        }
        if assigned {
            let Some(info) = self.pod_info(pod.clone()) else { return };
            if info.is_terminal() {
                self.gang_pod_left(&info);
                return;
            }
            // A bound member may complete its group's quorum: the pending
            // members PreEnqueue held (they were listed before it) go.
            let quorum = self.gang.pod_upsert(&info);
            log_cache_error(self.cache.add_pod(info));
            if !quorum.is_empty() {
                self.queue.activate(&quorum);
            }
            self.move_all(
                EventResource::AssignedPod,
                ActionType::ADD,
                None,
                Some(EventObject::Pod(pod)),
            );
        } else if !self.is_ours(&pod) {
            // Another scheduler's pending pod still counts in its group
            // (a group whose pods name different schedulers is rejected),
            // and its nomination keeps room free as ours do.
            let member = !is_terminal(&pod) && convoy_api::pod_group::group_key_of(&pod).is_some();
            let nominated = !is_terminal(&pod) && nomination(&pod).is_some();
            if let Some(info) = (member || nominated).then(|| self.pod_info(pod)).flatten() {
                if nominated {
                    self.queue.nominator().pod_added(&info);
                }
                if member {
                    self.gang.pod_upsert(&info);
                    self.report_mixed_schedulers(&info);
                }
            }
        } else if !is_terminal(&pod) {
            match PodInfo::new(pod) {
                Ok(info) => {
                    let info = Arc::new(info);
                    // Members join their group first, so PreEnqueue counts them.
                    let quorum = self.gang.pod_upsert(&info);
                    self.report_mixed_schedulers(&info);
                    self.queue.add_and_activate(info, &quorum);
                }
                Err(e) => self.refuse(&e),
            }
        }
    }

    fn pod_updated(&self, old: Arc<Pod>, new: Arc<Pod>) {
        let was_assigned =
            old.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
        let assigned =
            new.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
        match (was_assigned, assigned) {
            (false, true) => {
                // Bound (by us or another scheduler): no longer pending.
                if let Some(info) = self.pod_info(old.clone()) {
                    self.queue.delete(&info);
                }
                self.pod_added(new);
            }
            (true, true) => {
                let (Some(o), Some(n)) = (self.pod_info(old.clone()), self.pod_info(new.clone()))
                else {
                    return;
                };
                if n.is_terminal() {
                    self.gang_pod_left(&n);
                } else {
                    self.gang.pod_upsert(&n);
                }
                if let Some((reason, message)) = crate::conflicts::rejection_of(&old, &new)
                    && self.is_ours(&new)
                {
                    self.kubelet_rejected(
                        &n,
                        reason,
                        message,
                        self.leading.load(Ordering::Acquire),
                    );
                }
                let terminating = new.metadata.deletion_timestamp.is_some().then(|| n.uid.clone());
                log_cache_error(self.cache.update_pod(&o, n));
                // After the cache: `spawn_preemption` reads it (see there).
                if let Some(uid) = terminating {
                    self.victim_observed(&uid);
                }
                self.move_all(
                    EventResource::AssignedPod,
                    ActionType::UPDATE,
                    Some(EventObject::Pod(old)),
                    Some(EventObject::Pod(new)),
                );
            }
            _ => {
                if !self.is_ours(&new) {
                    self.others_nomination(&old, new);
                    return;
                }
                let o = PodInfo::new(old).ok().map(Arc::new);
                let n = match PodInfo::new(new.clone()) {
                    Ok(n) => Arc::new(n),
                    Err(e) => {
                        // Refused when it was added or became unreadable;
                        // its later updates (its refusal's own condition
                        // among them) change nothing.
                        if let Some(o) = o {
                            self.gang_pod_left(&o);
                            self.queue.delete(&o);
                            self.refuse(&e);
                        }
                        return;
                    }
                };
                let Some(o) = o else {
                    // Readable now: as if just created.
                    self.pod_added(new);
                    return;
                };
                if n.is_terminal() {
                    self.gang_pod_left(&n);
                    self.queue.delete(&o);
                } else {
                    let quorum = self.gang.pod_upsert(&n);
                    self.queue.update_and_activate(n, &quorum);
                }
            }
        }
    }

    /// A ResourceSlice of a node changed: its device views are compared.
    fn slice_changed(&self, obj: &convoy_api::ClusterObject) {
        if let convoy_api::ClusterObject::ResourceSlice(s) = obj
            && let Some(node) = s.spec.node_name.as_deref()
            && self.leading.load(Ordering::Acquire)
        {
            self.check_device_views(node);
        }
    }

    /// Another scheduler's pending pod changed: its nomination (set,
    /// moved, cleared, or ended with the pod) follows.
    fn others_nomination(&self, old: &Pod, new: Arc<Pod>) {
        if nomination(old).is_none() && nomination(&new).is_none() {
            return;
        }
        let Some(info) = self.pod_info(new.clone()) else { return };
        if info.is_terminal() {
            self.queue.nominator().delete(&info);
        } else {
            self.queue.nominator().pod_updated(&info);
        }
        if nomination(old).is_some() && nomination(old) != nomination(&new) {
            self.nomination_released(old);
        }
    }

    /// A pod's nomination ended without the pod taking the room (it was
    /// deleted, or its nomination cleared or moved): the pods that room
    /// turned away are told, as upstream tells them of a nominated pod's
    /// deletion (an assigned pod's deletion).
    fn nomination_released(&self, pod: &Pod) {
        self.move_all(
            EventResource::AssignedPod,
            ActionType::DELETE,
            Some(EventObject::Pod(Arc::new(pod.clone()))),
            None,
        );
    }

    /// Preemptions that held their preemptors too long after their API
    /// calls (a victim's event was lost): their preemptors are released.
    pub(crate) fn release_expired_preemptions(&self) {
        let expired = self.running_preemptions.expire();
        if !expired.is_empty() {
            tracing::warn!(
                preemptors = ?expired.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "preemptions released {}s after their API calls without seeing every victim terminate",
                RunningPreemptions::MAX_HOLD.as_secs()
            );
            self.queue.activate(expired.iter());
        }
    }

    /// A pod seen terminating or gone: if it was the last victim a
    /// preemption waited for, its preemptors are released.
    fn victim_observed(&self, uid: &str) {
        let ready = self.running_preemptions.observed(uid);
        if !ready.is_empty() {
            self.queue.activate(ready.iter());
        }
    }

    fn pod_deleted(&self, pod: Arc<Pod>) {
        if let Some(uid) = pod.metadata.uid.as_deref() {
            self.foreign_pod_gone(uid);
        }
        let Some(info) = self.pod_info(pod.clone()) else { return };
        self.gang_pod_left(&info);
        let assigned = info.node_name().is_some();
        if !assigned {
            self.queue.delete(&info);
            let waiting =
                convoy_api::WaitingPods::reject(&*self.waiting_pods, &info.uid, "", "pod deleted");
            if !waiting && nomination(&pod).is_some() {
                self.nomination_released(&pod);
            }
        }
        // An assigned pod, or one deleted while its binding was in flight
        // (assumed): give back what it holds, and tell the pods it blocked.
        if assigned || self.cache.is_assumed(&info.uid) {
            log_cache_error(self.cache.remove_pod(&info));
            // After the cache: `spawn_preemption` reads it (see there).
            self.victim_observed(&info.uid);
            self.move_all(
                EventResource::AssignedPod,
                ActionType::DELETE,
                Some(EventObject::Pod(pod)),
                None,
            );
        }
    }
}

/// Cache errors on the event path mean the event stream and the cache
/// disagree (a relist, a missed event): log and go on, never crash.
/// How long a simulation goes on without a change to the cluster before it
/// ends (see [`Scheduler::run_until_idle`]): longer than every timer that
/// can change an outcome by itself. Within two maximum backoffs every pod
/// in backoff has been retried once after the last change; the gang
/// starvation guard holds pods back for at most its threshold plus its
/// maximum hold. One second more for rounding.
fn quiet_limit(max_backoff: Duration, gang_args: &HashMap<String, GangSchedulingArgs>) -> Duration {
    let gang = gang_args
        .values()
        .map(|a| a.starvation_threshold_seconds.saturating_add(a.starvation_max_hold_seconds))
        .max()
        .unwrap_or(0);
    max_backoff
        .saturating_mul(2)
        .max(Duration::from_secs(gang))
        .saturating_add(Duration::from_secs(1))
}

fn log_cache_error(r: convoy_cache::Result<()>) {
    if let Err(e) = r {
        tracing::warn!(error = %e, "cache update");
    }
}

/// A pod's `status.nominatedNodeName`, when set.
pub(crate) fn nomination(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.nominated_node_name.as_deref().filter(|n| !n.is_empty())
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// Which node-update actions a change carries (upstream `nodeSchedulingPropertiesChange`).
pub fn node_update_action(old: &Node, new: &Node) -> ActionType {
    let mut a = ActionType(0);
    let alloc = |n: &Node| n.status.as_ref().and_then(|s| s.allocatable.clone());
    if alloc(old) != alloc(new) {
        a |= ActionType::UPDATE_NODE_ALLOCATABLE;
    }
    if old.metadata.labels != new.metadata.labels {
        a |= ActionType::UPDATE_NODE_LABEL;
    }
    let taints =
        |n: &Node| n.spec.as_ref().map(|s| (s.taints.clone(), s.unschedulable)).unwrap_or_default();
    if taints(old) != taints(new) {
        a |= ActionType::UPDATE_NODE_TAINT;
    }
    let conds = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|c| c.iter().map(|c| (c.type_.clone(), c.status.clone())).collect::<Vec<_>>())
    };
    if conds(old) != conds(new) {
        a |= ActionType::UPDATE_NODE_CONDITION;
    }
    if old.metadata.annotations != new.metadata.annotations {
        a |= ActionType::UPDATE_NODE_ANNOTATION;
    }
    a
}
