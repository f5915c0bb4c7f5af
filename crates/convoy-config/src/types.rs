//! The effective configuration: defaults applied, plugins merged, arguments decoded.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::args::PluginArgs;

/// A validated `KubeSchedulerConfiguration` with every default applied.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerConfig {
    /// Parallelism of the scheduling algorithms (filter and score over nodes); default 16, > 0.
    pub parallelism: u32,
    /// Global share of feasible nodes to find before scoring, 0..=100; `None` or `Some(0)`
    /// means adaptive (`max(5, 50 - nodes/125)` percent, at least 100 nodes).
    pub percentage_of_nodes_to_score: Option<u32>,
    /// Initial backoff of an unschedulable pod, in seconds; default 1.
    pub pod_initial_backoff_seconds: u64,
    /// Maximum backoff, in seconds; default 10, never below the initial backoff.
    pub pod_max_backoff_seconds: u64,
    /// Leader election of replicated schedulers.
    pub leader_election: LeaderElection,
    /// How to reach the API server.
    pub client_connection: ClientConnection,
    /// `delayCacheUntilActive`: with leader election on, start the watches (and so fill the
    /// caches) only after winning the election; default false. (`enableProfiling` and
    /// `enableContentionProfiling` have no field: Convoy serves no profiling endpoints, so
    /// `true` is refused and `false` or absent loads.)
    pub delay_cache_until_active: bool,
    /// Scheduling profiles, one per `schedulerName`; never empty.
    pub profiles: Vec<Profile>,
}

/// `leaderElection` (upstream `LeaderElectionConfiguration`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LeaderElection {
    /// Whether to elect a leader before scheduling; default true.
    pub leader_elect: bool,
    /// How long a non-leader waits after the last renewal before taking over; default 15s.
    #[serde(with = "go_duration")]
    pub lease_duration: Duration,
    /// How long the leader retries renewing before giving up; default 10s, below leaseDuration.
    #[serde(with = "go_duration")]
    pub renew_deadline: Duration,
    /// Wait between attempts to acquire or renew; default 2s.
    #[serde(with = "go_duration")]
    pub retry_period: Duration,
    /// Lock object type; only `leases` is supported.
    pub resource_lock: String,
    /// Name of the Lease; default `convoy-scheduler`.
    pub resource_name: String,
    /// Namespace of the Lease; default `kube-system`.
    pub resource_namespace: String,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            leader_elect: true,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            resource_lock: "leases".to_owned(),
            resource_name: crate::DEFAULT_SCHEDULER_NAME.to_owned(),
            resource_namespace: "kube-system".to_owned(),
        }
    }
}

mod go_duration {
    use std::time::Duration;

    use serde::{Deserializer, Serializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        crate::duration::deserialize(d)
    }

    pub(super) fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::duration::format_go_duration(*value))
    }
}

/// `clientConnection` (upstream `ClientConnectionConfiguration`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClientConnection {
    /// Path of a kubeconfig file; empty means in-cluster (or the usual kubeconfig lookup).
    pub kubeconfig: String,
    /// Client-side request rate limit, requests per second; default 50.
    pub qps: f32,
    /// Burst above `qps`; default 100.
    pub burst: u32,
    /// `contentType`; kept as given (Convoy's client speaks JSON).
    pub content_type: String,
    /// `acceptContentTypes`; kept as given.
    pub accept_content_types: String,
}

impl Default for ClientConnection {
    fn default() -> Self {
        Self {
            kubeconfig: String::new(),
            qps: 50.0,
            burst: 100,
            content_type: String::new(),
            accept_content_types: String::new(),
        }
    }
}

/// One scheduling profile: a scheduler name and the plugins that serve it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    /// The `spec.schedulerName` of the pods this profile schedules.
    pub scheduler_name: String,
    /// Per-profile override of the global percentage (0 = adaptive); `None` inherits it.
    pub percentage_of_nodes_to_score: Option<u32>,
    /// Plugins after merging the user's sets with Convoy's defaults.
    pub plugins: Plugins,
    /// Arguments for every configured plugin that has them, keyed by plugin name: the given
    /// ones (defaulted), else the defaults of the enabled in-tree plugins with typed args.
    pub plugin_args: BTreeMap<String, PluginArgs>,
}

impl Profile {
    /// Names of the plugins enabled at some extension point (multiPoint included), in order of
    /// first appearance.
    pub fn enabled_plugin_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for (_, set) in self.plugins.points() {
            for plugin in &set.enabled {
                if !names.contains(&plugin.name.as_str()) {
                    names.push(&plugin.name);
                }
            }
        }
        names
    }

    /// Whether the profile turns off an upstream default plugin that Convoy
    /// does not implement ([`UPSTREAM_ONLY_DEFAULTS`](crate::UPSTREAM_ONLY_DEFAULTS)):
    /// disabled at multiPoint, or at both preFilter and filter (where
    /// upstream's plugins reject pods), by name or by `*`. Upstream would
    /// then not evaluate the pod fields only that plugin reads.
    pub fn disables_upstream(&self, plugin: &str) -> bool {
        let p = &self.plugins;
        p.multi_point.is_disabled(plugin)
            || (p.pre_filter.is_disabled(plugin) && p.filter.is_disabled(plugin))
    }
}

/// Plugins per extension point (upstream `Plugins`). `multi_point` is kept as a set: the
/// framework expands it into the points each plugin implements, honouring the `disabled`
/// lists of the specific points.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plugins {
    /// Plugins registered at every extension point they implement.
    pub multi_point: PluginSet,
    /// Orders the scheduling queue (one plugin, the same in all profiles).
    pub queue_sort: PluginSet,
    /// Gates pods before they enter the active queue.
    pub pre_enqueue: PluginSet,
    /// Pre-computes state or rejects a pod before filtering.
    pub pre_filter: PluginSet,
    /// Rejects nodes that cannot run the pod.
    pub filter: PluginSet,
    /// Runs when no node fits (preemption).
    pub post_filter: PluginSet,
    /// Pre-computes state for scoring.
    pub pre_score: PluginSet,
    /// Ranks feasible nodes; weights apply here.
    pub score: PluginSet,
    /// Reserves resources for the chosen node (and undoes it).
    pub reserve: PluginSet,
    /// Approves, rejects or delays binding.
    pub permit: PluginSet,
    /// Runs before binding.
    pub pre_bind: PluginSet,
    /// Binds the pod to the node.
    pub bind: PluginSet,
    /// Runs after a successful bind.
    pub post_bind: PluginSet,
}

/// The YAML names of the extension points, in the order of [`Plugins::points`].
pub const EXTENSION_POINTS: [&str; 13] = [
    "multiPoint",
    "queueSort",
    "preEnqueue",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
];

impl Plugins {
    /// Every extension point with its YAML name, multiPoint first.
    pub fn points(&self) -> [(&'static str, &PluginSet); 13] {
        let p = self;
        let sets = [
            &p.multi_point,
            &p.queue_sort,
            &p.pre_enqueue,
            &p.pre_filter,
            &p.filter,
            &p.post_filter,
            &p.pre_score,
            &p.score,
            &p.reserve,
            &p.permit,
            &p.pre_bind,
            &p.bind,
            &p.post_bind,
        ];
        let mut i = 0;
        sets.map(|set| {
            let name = EXTENSION_POINTS[i];
            i += 1;
            (name, set)
        })
    }

    /// Builds the plugins from sets in the order of [`EXTENSION_POINTS`].
    pub(crate) fn from_sets(sets: [PluginSet; 13]) -> Self {
        let [
            multi_point,
            queue_sort,
            pre_enqueue,
            pre_filter,
            filter,
            post_filter,
            pre_score,
            score,
            reserve,
            permit,
            pre_bind,
            bind,
            post_bind,
        ] = sets;
        Self {
            multi_point,
            queue_sort,
            pre_enqueue,
            pre_filter,
            filter,
            post_filter,
            pre_score,
            score,
            reserve,
            permit,
            pre_bind,
            bind,
            post_bind,
        }
    }
}

/// Enabled and disabled plugins of one extension point.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PluginSet {
    /// Plugins to run, in order.
    pub enabled: Vec<PluginRef>,
    /// Plugins the user disabled at this point (`*` for all defaults). Kept after the merge so
    /// that the multiPoint expansion can skip them at this point.
    pub disabled: Vec<PluginRef>,
}

impl PluginSet {
    /// Whether `name` is disabled here, by name or by `*`.
    pub fn is_disabled(&self, name: &str) -> bool {
        self.disabled.iter().any(|p| p.name == name || p.name == "*")
    }
}

/// A plugin named in a [`PluginSet`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PluginRef {
    /// Registry name of the plugin.
    pub name: String,
    /// Score weight (used at score and multiPoint only); `None` or 0 means the default, 1.
    pub weight: Option<i32>,
}

impl PluginRef {
    /// A reference without a weight.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), weight: None }
    }

    /// A reference with a score weight.
    pub fn weighted(name: impl Into<String>, weight: i32) -> Self {
        Self { name: name.into(), weight: Some(weight) }
    }

    /// The score weight the framework applies: the configured one, or 1 when unset or 0.
    pub fn effective_weight(&self) -> i32 {
        match self.weight {
            None | Some(0) => 1,
            Some(w) => w,
        }
    }
}
