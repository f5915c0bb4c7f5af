//! Every metric the scheduler exports, declared here and nowhere else, with
//! upstream kube-scheduler's names, labels and buckets
//! (`pkg/scheduler/metrics/metrics.go`), so upstream dashboards and alerts
//! work unchanged:
//!
//! | metric | labels | recorded by |
//! |---|---|---|
//! | `scheduler_schedule_attempts_total` | `result`, `profile` | [`DecisionSink::record`] |
//! | `scheduler_scheduling_attempt_duration_seconds` | `result`, `profile` | [`DecisionSink::record`] |
//! | `scheduler_pending_pods` | `queue` | [`Metrics::sync_queue`] |
//! | `scheduler_queue_incoming_pods_total` | `queue`, `event` | [`Metrics::sync_queue`] |
//! | `scheduler_pod_scheduling_sli_duration_seconds` | `attempts` | [`Metrics::observe_sli`] |
//! | `scheduler_pod_scheduling_attempts` | | [`Metrics::observe_sli`] |
//! | `scheduler_framework_extension_point_duration_seconds` | `extension_point`, `status`, `profile` | [`Metrics::observe_extension_point`] |
//! | `scheduler_plugin_execution_duration_seconds` | `plugin`, `extension_point`, `status` | [`Metrics::observe_plugin`], sampled cycles only |
//! | `scheduler_podgroup_schedule_attempts_total` | `result`, `profile` | [`DecisionSink::record_group`] |
//! | `scheduler_podgroup_scheduling_attempt_duration_seconds` | `result`, `profile` | [`DecisionSink::record_group`] |
//! | `scheduler_preemption_attempts_total` | | [`DecisionSink::record_preemption`] |
//! | `scheduler_preemption_victims` | | [`DecisionSink::record_preemption`] |
//! | `convoy_status_writes_dropped_total` | | [`Metrics::sync_status_writes_dropped`] or [`Metrics::status_write_dropped`] |
//! | `convoy_dra_allocation_attempts_total` | `result` (`allocated`, `unschedulable`, `error`) | [`Metrics::sync_dra`]: DynamicResources' per-node searches |
//! | `convoy_dra_claim_writes_total` | `write` (`allocate`, `deallocate`) | [`Metrics::sync_dra`] |
//! | `convoy_kubelet_rejections_total` | `reason` (the kubelet's: `OutOfcpu`, `NodeAffinity`, ...; else `Other`) | [`DecisionSink::record_rejection`] |
//! | `convoy_node_resource_shortfalls_total` | `resource` | [`DecisionSink::record_shortfall`] |
//! | `convoy_device_view_mismatches_total` | `resource` | [`DecisionSink::record_device_mismatch`] |
//! | `convoy_preemption_chain_depth` | | [`DecisionSink::record_preemption`]: preemptions by a replacement of a pod preempted moments ago |
//! | `leader_election_master_status` | `name` (the Lease) | [`Metrics::set_leader`], [`Metrics::follow_leader`] (client-go's name) |
//! | `convoy_build_info` | `version`, `commit`, `rust_version` | [`Metrics::new`]: always 1 |
//! | `process_*` ([`PROCESS_METRICS`]) | | [`ProcessCollector`]: `/proc/self`, read at scrape time |
//!
//! Recording is cheap: label sets hold `&'static str` and `Arc<str>`, so an
//! observation allocates nothing once its series exists; the only locks are
//! prometheus-client's (a read lock on the family, a short mutex per
//! histogram). Per-plugin timing is recorded for about one cycle in ten,
//! chosen by [`Metrics::sample_plugin_metrics`] (upstream: 10 % at random).
//! At Filter and Score the framework calls a plugin over a block of nodes
//! and a sampled cycle observes each such call once (upstream observes
//! each node's call): two clock reads and a histogram lookup per plugin
//! and node had cost a sampled cycle more than its filters and scores.
//!
//! The queue keeps cumulative counters; [`Metrics::sync_queue`], called on
//! each scrape, copies them in, so the queue needs no metrics dependency.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use convoy_queue::{IncomingCount, PendingCounts, QueueKind};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

use crate::decision::{Decision, DecisionSink, PreemptionDecision};

mod process;

pub use process::{PROCESS_METRICS, ProcessCollector};

/// This build's version (the workspace's), as `convoy_build_info` and
/// `--version` report it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit this build was made from (12 hex digits, or `unknown`):
/// build.rs's `CONVOY_GIT_COMMIT`.
pub const GIT_COMMIT: &str = env!("CONVOY_GIT_COMMIT");
/// The Rust compiler's version that built this binary (`1.95.0`).
pub const RUST_VERSION: &str = env!("CONVOY_RUSTC_VERSION");

/// The content type of [`Metrics::encode`]'s output.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Share of cycles whose per-plugin durations are recorded, in percent
/// (upstream's `pluginMetricsSamplePercent`).
pub const PLUGIN_METRICS_SAMPLE_PERCENT: u64 = 10;

/// The `attempts` label of the SLI histogram is capped here, as upstream
/// (`getAttemptsLabel`): "1" … "14", then "15+".
const ATTEMPTS_LABELS: [&str; 16] =
    ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15+"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
    profile: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    queue: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IncomingLabels {
    queue: &'static str,
    event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptsLabels {
    attempts: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExtensionPointLabels {
    extension_point: &'static str,
    status: &'static str,
    profile: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: &'static str,
    extension_point: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DraResultLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DraWriteLabels {
    write: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
    rust_version: &'static str,
}

/// A histogram family whose buckets are fixed by a plain function.
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The scheduler's metrics and the registry that exports them. Create one
/// per scheduler (tests may create many: there is no global state), share
/// it as `Arc<Metrics>`; every method takes `&self`.
pub struct Metrics {
    registry: Registry,
    names: Vec<String>,
    schedule_attempts: Family<ResultLabels, Counter>,
    attempt_duration: HistogramFamily<ResultLabels>,
    group_attempts: Family<ResultLabels, Counter>,
    group_attempt_duration: HistogramFamily<ResultLabels>,
    pending_pods: Family<QueueLabels, Gauge>,
    queue_incoming: Family<IncomingLabels, Counter>,
    sli_duration: HistogramFamily<AttemptsLabels>,
    pod_attempts: Histogram,
    extension_point_duration: HistogramFamily<ExtensionPointLabels>,
    plugin_duration: HistogramFamily<PluginLabels>,
    status_writes_dropped: Counter,
    dra_allocation_attempts: Family<DraResultLabels, Counter>,
    dra_claim_writes: Family<DraWriteLabels, Counter>,
    preemption_attempts: Counter,
    preemption_victims: Histogram,
    kubelet_rejections: Family<ReasonLabels, Counter>,
    resource_shortfalls: Family<ResourceLabels, Counter>,
    chain_depth: Histogram,
    device_view_mismatches: Family<ResourceLabels, Counter>,
    leader_status: Family<LeaseLabels, Gauge>,
    cycles: AtomicU64,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Declares and registers every metric. The four `scheduler_pending_pods`
    /// series exist from the start (at 0); the others appear when first
    /// recorded, as upstream.
    pub fn new() -> Self {
        let mut registry = Declare { registry: Registry::default(), names: Vec::new() };

        // Counters are registered without `_total`: the OpenMetrics encoder
        // appends it to the sample names.
        let schedule_attempts = Family::default();
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod \
             could not be scheduled, while 'error' means an internal scheduler problem",
            schedule_attempts.clone(),
        );
        let attempt_duration: HistogramFamily<ResultLabels> =
            Family::new_with_constructor(|| Histogram::new(buckets(0.001, 2.0, 15)));
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            attempt_duration.clone(),
        );
        let group_attempts = Family::default();
        registry.register(
            "scheduler_podgroup_schedule_attempts",
            "Number of attempts to schedule pod groups, by the result",
            group_attempts.clone(),
        );
        let group_attempt_duration: HistogramFamily<ResultLabels> =
            Family::new_with_constructor(|| Histogram::new(buckets(0.0001, 2.0, 18)));
        registry.register(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            "Pod group scheduling attempt latency in seconds (the whole group's cycle)",
            group_attempt_duration.clone(),
        );
        let pending_pods: Family<QueueLabels, Gauge> = Family::default();
        registry.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in \
             activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number \
             of pods in unschedulablePods that the scheduler attempted to schedule and failed; \
             'gated' is the number of unschedulable pods that the scheduler never attempted to \
             schedule because they are gated",
            pending_pods.clone(),
        );
        for q in [QueueKind::Active, QueueKind::Backoff, QueueKind::Unschedulable, QueueKind::Gated]
        {
            drop(pending_pods.get_or_create(&QueueLabels { queue: q.as_str() }));
        }
        let queue_incoming = Family::default();
        registry.register(
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type",
            queue_incoming.clone(),
        );
        let sli_duration: HistogramFamily<AttemptsLabels> =
            Family::new_with_constructor(|| Histogram::new(buckets(0.01, 2.0, 20)));
        registry.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling \
             queue and might involve multiple scheduling attempts",
            sli_duration.clone(),
        );
        let pod_attempts = Histogram::new(buckets(1.0, 2.0, 5));
        registry.register(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod",
            pod_attempts.clone(),
        );
        let extension_point_duration: HistogramFamily<ExtensionPointLabels> =
            Family::new_with_constructor(|| Histogram::new(buckets(0.0001, 2.0, 12)));
        registry.register(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point",
            extension_point_duration.clone(),
        );
        let plugin_duration: HistogramFamily<PluginLabels> =
            Family::new_with_constructor(|| Histogram::new(buckets(0.00001, 1.5, 20)));
        registry.register(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point",
            plugin_duration.clone(),
        );
        let status_writes_dropped = Counter::default();
        registry.register(
            "convoy_status_writes_dropped",
            "Pod status writes (Events and PodScheduled conditions) dropped because the \
             writer's queue was full",
            status_writes_dropped.clone(),
        );
        let dra_allocation_attempts = Family::default();
        registry.register(
            "convoy_dra_allocation_attempts",
            "DynamicResources' searches for devices on one node, by the result: 'allocated' \
             found devices for every claim, 'unschedulable' found none, 'error' failed (a CEL \
             error, the filter timeout)",
            dra_allocation_attempts.clone(),
        );
        let dra_claim_writes = Family::default();
        registry.register(
            "convoy_dra_claim_writes",
            "ResourceClaim allocations written in PreBind ('allocate') and deallocations \
             written in PostFilter ('deallocate')",
            dra_claim_writes.clone(),
        );

        let preemption_attempts = Counter::default();
        registry.register(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            preemption_attempts.clone(),
        );
        let preemption_victims = Histogram::new(buckets(1.0, 2.0, 7));
        registry.register(
            "scheduler_preemption_victims",
            "Number of selected preemption victims for preemption initiated by a single pod",
            preemption_victims.clone(),
        );

        let kubelet_rejections = Family::default();
        registry.register(
            "convoy_kubelet_rejections",
            "Pods Convoy bound that their node's kubelet rejected at admission, by the \
             kubelet's reason",
            kubelet_rejections.clone(),
        );
        let resource_shortfalls = Family::default();
        registry.register(
            "convoy_node_resource_shortfalls",
            "Times a node's allocatable dropped below what the pods on it request, by resource",
            resource_shortfalls.clone(),
        );

        let chain_depth = Histogram::new([2.0, 3.0, 4.0, 5.0, 8.0]);
        registry.register(
            "convoy_preemption_chain_depth",
            "Depth of the preemption chain a preemption extends, observed when the preemptor \
             replaces a pod (same owner) preempted within the last 10 minutes (2: one \
             replacement preempts)",
            chain_depth.clone(),
        );

        let device_view_mismatches = Family::default();
        registry.register(
            "convoy_device_view_mismatches",
            "Times a node's device plugin (allocatable) and its DRA ResourceSlices counted the \
             devices of one extended resource differently, by resource",
            device_view_mismatches.clone(),
        );

        let leader_status = Family::default();
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates \
             backup, 1 indicates master. 'name' is the string used to identify the lease. Please \
             make sure to group by name.",
            leader_status.clone(),
        );

        let build_info: Family<BuildLabels, Gauge> = Family::default();
        build_info
            .get_or_create(&BuildLabels {
                version: VERSION,
                commit: GIT_COMMIT,
                rust_version: RUST_VERSION,
            })
            .set(1);
        registry.register(
            "convoy_build_info",
            "A metric with a constant '1' value labeled by the version Convoy was built from, \
             its commit and the Rust version that built it",
            build_info,
        );

        registry.register_collector(Box::new(ProcessCollector), &PROCESS_METRICS);

        let Declare { registry, names } = registry;
        Self {
            registry,
            names,
            schedule_attempts,
            attempt_duration,
            group_attempts,
            group_attempt_duration,
            pending_pods,
            queue_incoming,
            sli_duration,
            pod_attempts,
            extension_point_duration,
            plugin_duration,
            status_writes_dropped,
            dra_allocation_attempts,
            dra_claim_writes,
            preemption_attempts,
            preemption_victims,
            kubelet_rejections,
            resource_shortfalls,
            chain_depth,
            device_view_mismatches,
            leader_status,
            cycles: AtomicU64::new(0),
        }
    }

    /// Whether this cycle records per-plugin durations: true for about
    /// [`PLUGIN_METRICS_SAMPLE_PERCENT`] % of calls. Call once per cycle.
    ///
    /// One relaxed atomic increment and a multiply: the call count is
    /// scrambled by the golden-ratio (Weyl) sequence, so the sampled cycles
    /// are spread evenly without a fixed period that a workload's own
    /// rhythm (gangs of ten, say) could alias with.
    pub fn sample_plugin_metrics(&self) -> bool {
        const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
        const THRESHOLD: u64 = u64::MAX / 100 * PLUGIN_METRICS_SAMPLE_PERCENT;
        let n = self.cycles.fetch_add(1, Ordering::Relaxed);
        n.wrapping_mul(GOLDEN) < THRESHOLD
    }

    /// Records the total time of one extension point in one cycle
    /// (`scheduler_framework_extension_point_duration_seconds`). `point` is
    /// upstream's name (`PreFilter`, `Filter`, ..., `Bind`); `status` is the
    /// aggregated status code's name (`Code::as_str()`: `Success`,
    /// `Unschedulable`, ...); `profile` is the framework's name.
    pub fn observe_extension_point(
        &self,
        point: &'static str,
        status: &'static str,
        profile: &Arc<str>,
        d: Duration,
    ) {
        let labels =
            ExtensionPointLabels { extension_point: point, status, profile: profile.clone() };
        self.extension_point_duration.get_or_create(&labels).observe(d.as_secs_f64());
    }

    /// Records one plugin's time at one extension point
    /// (`scheduler_plugin_execution_duration_seconds`). Call only in cycles
    /// for which [`Metrics::sample_plugin_metrics`] returned true.
    pub fn observe_plugin(
        &self,
        plugin: &'static str,
        point: &'static str,
        status: &'static str,
        d: Duration,
    ) {
        let labels = PluginLabels { plugin, extension_point: point, status };
        self.plugin_duration.get_or_create(&labels).observe(d.as_secs_f64());
    }

    /// Records a pod bound after `attempts` attempts, `d` after its first
    /// attempt began (`scheduler_pod_scheduling_sli_duration_seconds`, with
    /// `attempts` capped at "15+", and `scheduler_pod_scheduling_attempts`).
    pub fn observe_sli(&self, attempts: u32, d: Duration) {
        let labels = AttemptsLabels { attempts: attempts_label(attempts) };
        self.sli_duration.get_or_create(&labels).observe(d.as_secs_f64());
        self.pod_attempts.observe(f64::from(attempts));
    }

    /// Sets `leader_election_master_status{name}`: 1 while this replica
    /// holds the Lease `lease`, 0 otherwise (as client-go's elector).
    pub fn set_leader(&self, lease: &str, leading: bool) {
        let labels = LeaseLabels { name: lease.to_string() };
        self.leader_status.get_or_create(&labels).set(i64::from(leading));
    }

    /// Keeps `leader_election_master_status{name=lease}` equal to the
    /// elector's state in `leader` (true while the Lease is held), from 0
    /// at the start (a standby exports 0) until the elector ends, then 0.
    /// Spawn it beside the elector.
    pub async fn follow_leader(
        self: Arc<Self>,
        lease: String,
        mut leader: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            let leading = *leader.borrow_and_update();
            self.set_leader(&lease, leading);
            if leader.changed().await.is_err() {
                break;
            }
        }
        self.set_leader(&lease, false);
    }

    /// Counts one pod status write (an Event or a PodScheduled condition)
    /// dropped because the writer could not keep up.
    pub fn status_write_dropped(&self) {
        self.status_writes_dropped.inc();
    }

    /// Advances `convoy_status_writes_dropped_total` to `total`, a
    /// cumulative count kept by the status writer (its `dropped()`), for the
    /// refresh hook. Like [`Metrics::sync_queue`], never moves it back.
    /// Use this or [`Metrics::status_write_dropped`], not both.
    pub fn sync_status_writes_dropped(&self, total: u64) {
        self.status_writes_dropped.inner().fetch_max(total, Ordering::Relaxed);
    }

    /// Advances the DRA counters to DynamicResources' cumulative counts
    /// (the scheduler's [`DraStats`](convoy_api::objects::DraStats)), for
    /// the refresh hook; never moves them back.
    pub fn sync_dra(&self, stats: &convoy_api::objects::DraStats) {
        use convoy_api::objects::DraStats;
        for (result, counter) in [
            ("allocated", &stats.allocations_found),
            ("unschedulable", &stats.allocations_not_found),
            ("error", &stats.allocation_errors),
        ] {
            if DraStats::get(counter) > 0 {
                let c = self.dra_allocation_attempts.get_or_create(&DraResultLabels { result });
                c.inner().fetch_max(DraStats::get(counter), Ordering::Relaxed);
            }
        }
        for (write, counter) in
            [("allocate", &stats.claims_allocated), ("deallocate", &stats.claims_deallocated)]
        {
            if DraStats::get(counter) > 0 {
                let c = self.dra_claim_writes.get_or_create(&DraWriteLabels { write });
                c.inner().fetch_max(DraStats::get(counter), Ordering::Relaxed);
            }
        }
    }

    /// Copies the queue's state in: sets `scheduler_pending_pods` and
    /// advances each `scheduler_queue_incoming_pods_total` series to the
    /// queue's cumulative count, adding only what is new since the last
    /// sync. Safe to call concurrently; a count lower than the exported one
    /// (a queue rebuilt from zero) leaves the series unchanged, since a
    /// counter never goes down.
    pub fn sync_queue(&self, pending: PendingCounts, incoming: &[IncomingCount]) {
        for (q, n) in [
            (QueueKind::Active, pending.active),
            (QueueKind::Backoff, pending.backoff),
            (QueueKind::Unschedulable, pending.unschedulable),
            (QueueKind::Gated, pending.gated),
        ] {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            self.pending_pods.get_or_create(&QueueLabels { queue: q.as_str() }).set(n);
        }
        for c in incoming {
            let labels = IncomingLabels { queue: c.queue.as_str(), event: c.event.label() };
            // Only this method moves these counters, so the exported value
            // is the count at the last sync: `fetch_max` adds the difference
            // atomically, even when two scrapes sync at once.
            self.queue_incoming
                .get_or_create(&labels)
                .inner()
                .fetch_max(c.count, Ordering::Relaxed);
        }
    }

    /// The sample name of every metric declared here, counters with the
    /// `_total` their samples carry: what docs/operating.md's table lists.
    /// A family appears in [`encode`](Self::encode)'s output only once it
    /// has a series; these are all of them. Metrics registered through
    /// [`registry_mut`](Self::registry_mut) are not included.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The registry, to encode it another way.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The registry, to register more metrics (an adapter's, say) before
    /// the `Metrics` is shared.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Every metric in the OpenMetrics text format
    /// ([`OPENMETRICS_CONTENT_TYPE`]), ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

impl DecisionSink for Metrics {
    /// `scheduler_schedule_attempts_total` and
    /// `scheduler_scheduling_attempt_duration_seconds`, by result and
    /// profile.
    fn record(&self, d: &Decision) {
        let labels = ResultLabels { result: d.outcome.result_label(), profile: d.profile.clone() };
        self.schedule_attempts.get_or_create(&labels).inc();
        self.attempt_duration.get_or_create(&labels).observe(d.latency.as_secs_f64());
        if let Some(sli) = d.since_first_attempt {
            self.observe_sli(d.attempt, sli);
        }
    }

    /// `scheduler_preemption_attempts_total` (every run, as upstream's
    /// DefaultPreemption counts every PostFilter call) and
    /// `scheduler_preemption_victims` (when victims were chosen).
    fn record_preemption(&self, d: &PreemptionDecision) {
        self.preemption_attempts.inc();
        if d.node.is_some() {
            self.preemption_victims.observe(d.victims.len() as f64);
        }
        if let Some(c) = &d.chain {
            self.chain_depth.observe(f64::from(c.depth));
        }
    }

    /// `convoy_kubelet_rejections_total`.
    fn record_rejection(&self, r: &crate::decision::KubeletRejection) {
        self.kubelet_rejections.get_or_create(&ReasonLabels { reason: r.reason_label() }).inc();
    }

    /// `convoy_device_view_mismatches_total`.
    fn record_device_mismatch(&self, m: &crate::decision::DeviceViewMismatch) {
        let labels = ResourceLabels { resource: Arc::from(m.resource.as_str()) };
        self.device_view_mismatches.get_or_create(&labels).inc();
    }

    /// `convoy_node_resource_shortfalls_total`.
    fn record_shortfall(&self, s: &crate::decision::ResourceShortfall) {
        let labels = ResourceLabels { resource: Arc::from(s.resource.as_str()) };
        self.resource_shortfalls.get_or_create(&labels).inc();
    }

    /// `scheduler_podgroup_schedule_attempts_total` and
    /// `scheduler_podgroup_scheduling_attempt_duration_seconds`.
    fn record_group(&self, d: &crate::decision::GroupDecision) {
        let labels = ResultLabels { result: d.outcome.result_label(), profile: d.profile.clone() };
        self.group_attempts.get_or_create(&labels).inc();
        self.group_attempt_duration.get_or_create(&labels).observe(d.latency.as_secs_f64());
    }
}

impl convoy_framework::FrameworkMetrics for Metrics {
    fn sample(&self) -> bool {
        self.sample_plugin_metrics()
    }

    fn extension_point(
        &self,
        point: &'static str,
        status: &'static str,
        profile: &Arc<str>,
        d: Duration,
    ) {
        self.observe_extension_point(point, status, profile, d);
    }

    fn plugin(&self, plugin: &'static str, point: &'static str, status: &'static str, d: Duration) {
        self.observe_plugin(plugin, point, status, d);
    }
}

/// The registry while [`Metrics::new`] declares metrics, keeping each one's
/// sample name for [`Metrics::names`].
struct Declare {
    registry: Registry,
    names: Vec<String>,
}

impl Declare {
    fn register(&mut self, name: &str, help: &str, metric: impl Metric) {
        let suffix = match metric.metric_type() {
            MetricType::Counter => "_total",
            MetricType::Info => "_info",
            _ => "",
        };
        self.names.push(format!("{name}{suffix}"));
        self.registry.register(name, help, metric);
    }

    fn register_collector(&mut self, collector: Box<dyn Collector>, names: &[&str]) {
        self.names.extend(names.iter().map(|n| n.to_string()));
        self.registry.register_collector(collector);
    }
}

/// `start × factor^i` for `i` in `0..n`, as upstream's `ExponentialBuckets`,
/// rounded to 12 significant digits so the `le` labels read `0.0000225`
/// rather than `0.000022500000000000005`.
fn buckets(start: f64, factor: f64, n: u16) -> impl Iterator<Item = f64> {
    exponential_buckets(start, factor, n).map(|b| format!("{b:.11e}").parse().unwrap_or(b))
}

/// Upstream's `getAttemptsLabel`: the count, capped at "15+".
fn attempts_label(attempts: u32) -> &'static str {
    ATTEMPTS_LABELS[(attempts as usize).min(ATTEMPTS_LABELS.len() - 1)]
}

#[cfg(test)]
mod tests;
