//! Convoy's scheduler configuration: reads a `KubeSchedulerConfiguration`
//! (`apiVersion: kubescheduler.config.k8s.io/v1`) YAML file, applies upstream's v1 defaults
//! (restricted to the plugins Convoy implements), merges each profile's plugins with Convoy's
//! default set as upstream's `mergePlugins` does, decodes and validates plugin arguments, and
//! returns a [`SchedulerConfig`] the scheduler builds its profiles from.
//!
//! Errors name the file, the YAML line and column when known, and the field path
//! (`config.yaml:14:17: profiles[0].pluginConfig[1].args.scoringStrategy.type: unknown variant
//! ...`). Decoding is strict like upstream's: unknown fields are errors.
//!
//! Dependencies: `serde`, `serde_json`, `serde-saphyr` (YAML, as kube-rs uses it),
//! `serde_path_to_error`, `thiserror` and `kube-core` (its Go-duration type; kube-core does no
//! IO). No IO besides reading the one file, no Kubernetes client; which plugins exist is told
//! by the caller through [`KnownPlugins`].

mod args;
mod args_meta;
mod build;
mod defaults;
mod duration;
mod error;
mod gpu_args;
pub mod names;
pub mod other_args;
mod raw;
mod spread_args;
mod summary;
mod types;

use std::collections::BTreeSet;
use std::path::Path;

pub use args::{
    DEFAULT_HARD_POD_AFFINITY_WEIGHT, DefaultPreemptionArgs, DynamicResourcesArgs,
    InterPodAffinityArgs, NodeAffinityArgs, NodeResourcesBalancedAllocationArgs,
    NodeResourcesFitArgs, PluginArgs, RequestedToCapacityRatioParam, ResourceSpec, ScoringStrategy,
    ScoringStrategyType, UtilizationShapePoint, VolumeBindingArgs,
};
pub use defaults::{UPSTREAM_ONLY_DEFAULTS, default_multi_point};
pub use duration::{format_go_duration, parse_go_duration};
pub use error::{ConfigError, Problem};
pub use gpu_args::{
    CpuOnlyPods, DEFAULT_REQUEST_SIZE_PRIOR, DEFAULT_RESOURCE_NAME, DEFAULT_TOPOLOGY_KEYS,
    GPU_PLACEMENT_ARGS_KIND, GpuPlacementArgs, MAX_GPUS_PER_POD, RequestSizeArgs,
};
pub use spread_args::{DefaultConstraint, DefaultingType, PodTopologySpreadArgs};
pub use types::{
    ClientConnection, EXTENSION_POINTS, LeaderElection, PluginRef, PluginSet, Plugins, Profile,
    SchedulerConfig,
};

/// The only `apiVersion` accepted.
pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
/// The only `kind` accepted.
pub const KIND: &str = "KubeSchedulerConfiguration";
/// Name of the default profile (and of the leader-election Lease).
pub const DEFAULT_SCHEDULER_NAME: &str = "convoy-scheduler";

/// Plugin names the scheduler's registry knows (in-tree and out-of-tree), for validation and
/// for error messages listing them.
#[derive(Clone, Default)]
pub struct KnownPlugins {
    names: BTreeSet<String>,
    /// Out-of-tree plugins' checks of their args.
    args: std::collections::BTreeMap<String, other_args::ArgsCheck>,
}

impl std::fmt::Debug for KnownPlugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownPlugins")
            .field("names", &self.names)
            .field("with_args", &self.args.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl KnownPlugins {
    /// The set of the given names.
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self {
            names: names.into_iter().map(|n| n.as_ref().to_owned()).collect(),
            args: Default::default(),
        }
    }

    /// Adds the check of an out-of-tree plugin's args (its own decoder and
    /// validation), run by the loader with the positions of the fields.
    pub fn with_args(mut self, name: &str, check: other_args::ArgsCheck) -> Self {
        self.names.insert(name.to_owned());
        self.args.insert(name.to_owned(), check);
        self
    }

    /// The check of a plugin's args, if it registered one.
    pub fn args_check(&self, name: &str) -> Option<&other_args::ArgsCheck> {
        self.args.get(name)
    }

    /// Whether the registry knows `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// The names, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// The names, sorted, comma-separated (for messages).
    pub fn list(&self) -> String {
        self.iter().collect::<Vec<_>>().join(", ")
    }
}

/// Reads, decodes and validates the configuration file at `path`.
pub fn load_file(path: &Path, known: &KnownPlugins) -> Result<SchedulerConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
    parse_str(&text, &path.display().to_string(), known)
}

/// Decodes and validates a configuration; `source` names the file in messages.
pub fn parse_str(
    text: &str,
    source: &str,
    known: &KnownPlugins,
) -> Result<SchedulerConfig, ConfigError> {
    build::parse(text, source, known)
}
