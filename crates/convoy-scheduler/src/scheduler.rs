//! The scheduler: profiles, queue, cache and binder wired together, fed by a
//! stream of [`ClusterUpdate`](convoy_api::ClusterUpdate)s from any adapter.
//!
//! This module holds the [`Scheduler`] and its construction; the updates
//! are applied in [`crate::handlers`], pods are scheduled in
//! [`crate::schedule_one`] and [`crate::schedule_group`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use convoy_api::{
    Binder, Clock, CycleState, GroupKey, Handle, PreemptionActuator, QueueSortPlugin,
    QueuedPodInfo, Registry, RunningPreemptions,
};
use convoy_cache::{Cache, Snapshot};
use convoy_config::SchedulerConfig;
use convoy_framework::{Framework, FrameworkOptions, PermitWait, WaitingPodsMap};
use convoy_gang::{GangSchedulingArgs, GangState};
use convoy_objects::ClusterObjects;
use convoy_queue::{Nominator, ProfileQueueing, QueueConfig, SchedulingQueue};
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::decision::{Decision, DecisionSink, GroupDecision};

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

/// A pod assumed, reserved and permitted (or waiting at Permit), whose
/// binding cycle the loop has not started yet
/// ([`Scheduler::start_bindings`]).
pub(crate) struct Binding {
    /// The pod's profile.
    pub(crate) fwk: Arc<Framework>,
    /// The pod, as popped from the queue.
    pub(crate) qpi: QueuedPodInfo,
    /// Its cycle state, written by the scheduling cycle.
    pub(crate) state: CycleState,
    /// What a Permit plugin asked the binding cycle to wait for.
    pub(crate) wait: Option<PermitWait>,
    /// The node the pod is assumed and reserved on.
    pub(crate) node: Arc<str>,
    /// The decision recorded once the binding succeeds.
    pub(crate) decision: Decision,
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
    pub(crate) bindings: Mutex<Vec<Binding>>,
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
    /// Builds every profile's framework, the queue and the cache: (1) the
    /// state every profile shares (the object store, the gang state, the
    /// pods waiting at Permit, the nominations, the running preemptions);
    /// (2) each profile's framework (`build_profiles`); (3) the queue,
    /// sorted by the first profile's QueueSort, and the cache.
    pub fn new(opts: SchedulerOptions) -> Result<Arc<Self>, BuildError> {
        let cfg = &opts.config;
        // 1. Shared by every profile.
        let shared = Shared {
            objects: Arc::new(ClusterObjects::new()),
            gang: GangState::new(),
            waiting_pods: WaitingPodsMap::new(),
            // The queue keeps it; every profile's Filter reads it.
            nominator: Arc::new(Nominator::new()),
            // Filled by `spawn_preemption`, read by DefaultPreemption's PreEnqueue.
            running_preemptions: Arc::new(RunningPreemptions::new(opts.clock.clone())),
            dra_stats: Arc::new(convoy_api::objects::DraStats::default()),
            pool: filter_pool(cfg.parallelism)?,
        };
        // 2. The profiles.
        let built = build_profiles(&opts, &shared)?;
        // 3. The queue and the cache.
        let queue = Arc::new(SchedulingQueue::new(QueueConfig {
            clock: opts.clock.clone(),
            less: built.less,
            profiles: built.queueing,
            initial_backoff: Duration::from_secs(cfg.pod_initial_backoff_seconds),
            max_backoff: Duration::from_secs(cfg.pod_max_backoff_seconds),
            max_in_unschedulable: MAX_IN_UNSCHEDULABLE,
            nominator: shared.nominator,
            pop_from_backoff: true,
        }));
        let cache = Arc::new(Cache::new(opts.clock.clone()));
        let quiet_limit =
            quiet_limit(Duration::from_secs(cfg.pod_max_backoff_seconds), &built.gang_args);
        let rng = match opts.seed {
            Some(s) => SmallRng::seed_from_u64(s),
            None => SmallRng::from_os_rng(),
        };
        Ok(Arc::new(Self {
            profiles: built.profiles,
            queue,
            cache,
            sink: opts.sink,
            loop_state: Mutex::new(LoopState { snapshot: Snapshot::default(), next_start: 0, rng }),
            binds_in_flight: Arc::new(AtomicUsize::new(0)),
            bindings: Mutex::new(Vec::new()),
            group_reports: Mutex::new(HashMap::new()),
            synced: Arc::new(AtomicBool::new(false)),
            waiting_pods: shared.waiting_pods,
            gang: shared.gang,
            gang_args: built.gang_args,
            objects: shared.objects,
            clock: opts.clock,
            actuator: opts.actuator,
            preemptions_in_flight: Arc::new(AtomicUsize::new(0)),
            running_preemptions: shared.running_preemptions,
            dra_stats: shared.dra_stats,
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

    /// The [`ClusterObject`](convoy_api::ClusterObject)s plugins read.
    pub fn objects(&self) -> &Arc<ClusterObjects> {
        &self.objects
    }

    /// The gang state (PodGroups and their members).
    pub fn gang(&self) -> &Arc<GangState> {
        &self.gang
    }
}

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

/// What every profile of one scheduler shares.
struct Shared {
    objects: Arc<ClusterObjects>,
    gang: Arc<GangState>,
    waiting_pods: Arc<WaitingPodsMap>,
    nominator: Arc<Nominator>,
    running_preemptions: Arc<RunningPreemptions>,
    dra_stats: Arc<convoy_api::objects::DraStats>,
    /// Filter's and Score's threads; `None` with one thread.
    pool: Option<Arc<rayon::ThreadPool>>,
}

/// The profiles, and what the queue needs of them.
struct BuiltProfiles {
    profiles: HashMap<String, Arc<Framework>>,
    queueing: HashMap<String, ProfileQueueing>,
    /// The gang args of the profiles that enable gang scheduling.
    gang_args: HashMap<String, GangSchedulingArgs>,
    /// The first profile's QueueSort (validation made them all the same).
    less: Arc<dyn QueueSortPlugin>,
}

/// The thread pool Filter and Score run on: `parallelism` threads, at most
/// one per core; none for one thread.
fn filter_pool(parallelism: u32) -> Result<Option<Arc<rayon::ThreadPool>>, BuildError> {
    let threads = (parallelism as usize)
        .min(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    if threads <= 1 {
        return Ok(None);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("convoy-filter-{i}"))
        .build()
        .map_err(|e| BuildError::Pool(e.to_string()))?;
    Ok(Some(Arc::new(pool)))
}

/// Builds each profile's framework on the shared state (gang scheduling's
/// factories are bound to this scheduler's gang state), and reads the gang
/// args of those that enable it (the starvation guard is cluster-wide, as
/// the capacity it saves is: the first profile's policy holds).
fn build_profiles(opts: &SchedulerOptions, shared: &Shared) -> Result<BuiltProfiles, BuildError> {
    let mut registry = opts.registry.clone();
    convoy_gang::register(&mut registry, shared.gang.clone(), opts.clock.clone());
    let mut profiles = HashMap::new();
    let mut queueing = HashMap::new();
    let mut gang_args = HashMap::new();
    let mut less = None;
    for p in &opts.config.profiles {
        let handle = Handle {
            binder: opts.binder.clone(),
            waiting_pods: shared.waiting_pods.clone(),
            profile: Arc::from(p.scheduler_name.as_str()),
            objects: shared.objects.clone(),
            groups: Some(shared.gang.clone()),
            running_preemptions: shared.running_preemptions.clone(),
            dra_stats: shared.dra_stats.clone(),
        };
        let fwk = Framework::new(
            p,
            &FrameworkOptions {
                registry: registry.clone(),
                handle,
                waiting_pods: shared.waiting_pods.clone(),
                percentage_of_nodes_to_score: opts.config.percentage_of_nodes_to_score,
                pool: shared.pool.clone(),
                metrics: opts.framework_metrics.clone(),
                nominator: Some(shared.nominator.clone() as Arc<dyn convoy_api::PodNominator>),
            },
        )?;
        less.get_or_insert_with(|| fwk.queue_sort().clone());
        let enabled = p.enabled_plugin_names();
        if let Some(name) =
            [convoy_gang::NAME, convoy_gang::COSCHEDULING].into_iter().find(|n| enabled.contains(n))
        {
            let args = GangSchedulingArgs::decode(p.plugin_args.get(name)).map_err(|e| {
                BuildError::Gang(format!("profile {:?}: {name}: {e}", p.scheduler_name))
            })?;
            if gang_args.is_empty() {
                shared.gang.set_policy(args.starvation_policy());
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
    let less = less.expect("config has at least one profile");
    Ok(BuiltProfiles { profiles, queueing, gang_args, less })
}
