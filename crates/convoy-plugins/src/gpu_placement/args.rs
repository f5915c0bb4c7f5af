//! The plugin's arguments, resolved ([`ResolvedGpuPlacementArgs`]) from the
//! `GpuPlacementArgs` the loader decodes with serde like every other
//! plugin's (`convoy_config::GpuPlacementArgs`: unknown fields, types and
//! ranges refused with the field's line and column); resolving checks what
//! the loader cannot, each problem naming its field
//! (`GpuPlacementArgs.resourceNames[1]: "cpu" is not an extended resource
//! name`): extended resource names, and the prior's quantities.

use convoy_config::{GPU_PLACEMENT_ARGS_KIND, PluginArgs, names};

use convoy_api::resource::{parse_milli, parse_value};

pub use convoy_config::{
    CpuOnlyPods, DEFAULT_REQUEST_SIZE_PRIOR, DEFAULT_RESOURCE_NAME, DEFAULT_TOPOLOGY_KEYS,
    MAX_GPUS_PER_POD,
};

use super::fragmentation::SizeWeight;
use crate::helper::resource_names::is_extended_resource_name;

/// The `kind` the args may carry, and the prefix of every error.
pub const KIND: &str = GPU_PLACEMENT_ARGS_KIND;

/// The plugin's arguments, defaulted and validated: `convoy_config::GpuPlacementArgs`
/// resolved (resource names checked, the prior's quantities parsed), the
/// form the plugin runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedGpuPlacementArgs {
    /// `resourceNames`: the extended resources counted as GPUs, default
    /// `["nvidia.com/gpu"]`. A pod's GPU request is its request of the first
    /// of these it asks for.
    pub resource_names: Vec<String>,
    /// `requestSizePrior`: the request-size distribution assumed before
    /// (and mixed with) what the plugin observes.
    pub request_size_prior: Vec<SizeWeight>,
    /// `priorWeight`: how many observed pods the prior counts as, default
    /// 100 (0 with learning on: the prior only until the first GPU pod).
    pub prior_weight: f64,
    /// `learnRequestSizes`: learn the distribution from the pods scored,
    /// default true.
    pub learn_request_sizes: bool,
    /// `halfLifePods`: after this many later GPU pods, an observation counts
    /// half, default 500.
    pub half_life_pods: u32,
    /// `topologyKeys`: node label keys of topology domains, narrowest first.
    pub topology_keys: Vec<String>,
    /// `cpuOnlyPods`: `PreferNonGpuNodes` (default) or `Neutral`.
    pub cpu_only_pods: CpuOnlyPods,
    /// `fragmentationWeight` (0..=100, default 1): weight of the
    /// fragmentation score within the plugin's score.
    pub fragmentation_weight: u32,
    /// `topologyWeight` (0..=100, default 2): weight of the gang co-location
    /// score.
    pub topology_weight: u32,
    /// `gpuMemoryWeight` (0..=100, default 0 = off): weight of the GPU
    /// memory score.
    pub gpu_memory_weight: u32,
}

impl Default for ResolvedGpuPlacementArgs {
    fn default() -> Self {
        Self::resolve(&convoy_config::GpuPlacementArgs::default()).expect("the defaults resolve")
    }
}

impl ResolvedGpuPlacementArgs {
    /// The args of the plugin's factory: `None` gives the defaults; the
    /// loader's `PluginArgs::GpuPlacement`, or raw JSON args built in code
    /// (`PluginArgs::Other`, decoded by the loader's decoder), are resolved;
    /// anything else is an error. Problems are joined with `; `, each naming
    /// its field.
    pub fn from_plugin_args(args: Option<&PluginArgs>) -> Result<Self, String> {
        match args {
            None => Ok(Self::default()),
            Some(PluginArgs::GpuPlacement(args)) => Self::resolve(args),
            Some(PluginArgs::Other(v)) => Self::from_json(v),
            Some(other) => Err(format!("want args to be of type {KIND}, got {other:?}")),
        }
    }

    /// Decodes raw args (null means the defaults) with the loader's decoder
    /// and resolves them.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        match PluginArgs::from_json(names::GPU_PLACEMENT, v.clone()) {
            Ok(PluginArgs::GpuPlacement(args)) => Self::resolve(&args),
            Ok(other) => Err(format!("want args to be of type {KIND}, got {other:?}")),
            // `field.path: message`, or a message about the args as a whole.
            Err(e) => match e.split_once(": ") {
                Some((path, _)) if path.starts_with('[') => Err(format!("{KIND}{e}")),
                Some((path, _)) if !path.contains(' ') => Err(format!("{KIND}.{e}")),
                _ => Err(format!("{KIND}: {e}")),
            },
        }
    }

    /// The plugin's form of decoded args: resource names checked, the
    /// prior's quantities parsed, its entries distinct.
    pub fn resolve(args: &convoy_config::GpuPlacementArgs) -> Result<Self, String> {
        let mut problems = Vec::new();
        for (i, name) in args.resource_names.iter().enumerate() {
            if !is_extended_resource_name(name) {
                problems.push(format!(
                    "{KIND}.resourceNames[{i}]: {name:?} is not an extended resource name (like nvidia.com/gpu)"
                ));
            }
        }
        let mut prior: Vec<SizeWeight> = Vec::with_capacity(args.request_size_prior.len());
        for (i, entry) in args.request_size_prior.iter().enumerate() {
            let at = format!("{KIND}.requestSizePrior[{i}]");
            let mut quantity = |field: &str, text: &Option<String>, parse: Parse| match text {
                None => 0,
                Some(text) => match parse(text) {
                    Ok(q) if q >= 0 => q,
                    Ok(_) => {
                        problems.push(format!("{at}.{field}: must not be negative"));
                        0
                    }
                    Err(e) => {
                        problems.push(format!("{at}.{field}: {e}"));
                        0
                    }
                },
            };
            let size = SizeWeight {
                gpus: entry.gpus,
                milli_cpu: quantity("cpu", &entry.cpu, parse_milli),
                memory: quantity("memory", &entry.memory, parse_value),
                weight: entry.weight,
            };
            if prior.iter().any(|s| s.shape() == size.shape()) {
                problems.push(format!(
                    "{at}: duplicate entry (same gpus, cpu and memory as an earlier one)"
                ));
            } else {
                prior.push(size);
            }
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        Ok(Self {
            resource_names: args.resource_names.clone(),
            request_size_prior: prior,
            prior_weight: args.prior_weight,
            learn_request_sizes: args.learn_request_sizes,
            half_life_pods: args.half_life_pods,
            topology_keys: args.topology_keys.clone(),
            cpu_only_pods: args.cpu_only_pods,
            fragmentation_weight: args.fragmentation_weight,
            topology_weight: args.topology_weight,
            gpu_memory_weight: args.gpu_memory_weight,
        })
    }
}

/// A quantity parser of convoy-api.
type Parse = fn(&str) -> Result<i64, convoy_api::resource::QuantityError>;
