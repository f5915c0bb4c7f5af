//! `GpuPlacementArgs`, the arguments of Convoy's own `GpuPlacement` plugin (docs/gpu.md),
//! decoded like every other plugin's: serde while the YAML is read, unknown fields refused,
//! single-field checks failing with the field's position, cross-field rules in `validate`.
//!
//! Two checks stay with the plugin, which owns their rules: that each resource name is an
//! extended resource name, and the `cpu`/`memory` quantities of the prior (kept as text
//! here; convoy-api parses quantities and depends on this crate).

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

/// The `kind` the args may carry.
pub const GPU_PLACEMENT_ARGS_KIND: &str = "GpuPlacementArgs";

/// The GPU resource scored when `resourceNames` is not given.
pub const DEFAULT_RESOURCE_NAME: &str = "nvidia.com/gpu";

/// Node label keys of the topology domains when `topologyKeys` is not
/// given, narrowest first: the NVLink domain published by NVIDIA's GPU
/// feature discovery, a rack label (a convention, not a well-known label:
/// set yours), and the well-known zone label.
pub const DEFAULT_TOPOLOGY_KEYS: [&str; 3] =
    ["nvidia.com/gpu.clique", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone"];

/// The request-size prior when `requestSizePrior` is not given: GPUs per
/// pod and relative weight. Our assumption, shaped after the published
/// production traces (Alibaba PAI 2020, the FGD paper's 2023 trace): most
/// GPU pods ask for one GPU, few for a whole 8-GPU node (docs/gpu.md).
pub const DEFAULT_REQUEST_SIZE_PRIOR: [(u32, f64); 4] = [(1, 0.6), (2, 0.15), (4, 0.15), (8, 0.1)];

/// Upper bound of `requestSizePrior[].gpus` (and of learned sizes).
pub const MAX_GPUS_PER_POD: u32 = 1024;

/// What a pod without a GPU request prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CpuOnlyPods {
    /// Nodes without GPUs first, then partly used GPU nodes, fully free GPU
    /// nodes last (the default).
    PreferNonGpuNodes,
    /// No preference, except that a fully free GPU node scores lowest
    /// while another node fits.
    Neutral,
}

/// One entry of `requestSizePrior`, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestSizeArgs {
    /// GPUs per pod, 1..=[`MAX_GPUS_PER_POD`].
    #[serde(deserialize_with = "prior_gpus")]
    pub gpus: u32,
    /// CPU per pod, a quantity (`"12"`, `"500m"`); absent: 0.
    #[serde(default, deserialize_with = "quantity", skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory per pod, a quantity (`"16Gi"`); absent: 0.
    #[serde(default, deserialize_with = "quantity", skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Relative weight, positive.
    #[serde(deserialize_with = "positive_weight")]
    pub weight: f64,
}

/// `GpuPlacementArgs`, defaulted.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GpuPlacementArgs {
    /// The extended resources counted as GPUs; default `["nvidia.com/gpu"]`.
    pub resource_names: Vec<String>,
    /// The request-size distribution assumed before (and mixed with) what the plugin observes.
    pub request_size_prior: Vec<RequestSizeArgs>,
    /// How many observed pods the prior counts as; default 100.
    pub prior_weight: f64,
    /// Learn the distribution from the pods scored; default true.
    pub learn_request_sizes: bool,
    /// After this many later GPU pods an observation counts half; default 500.
    pub half_life_pods: u32,
    /// Node label keys of topology domains, narrowest first.
    pub topology_keys: Vec<String>,
    /// `PreferNonGpuNodes` (default) or `Neutral`.
    pub cpu_only_pods: CpuOnlyPods,
    /// 0..=100, default 1.
    pub fragmentation_weight: u32,
    /// 0..=100, default 2.
    pub topology_weight: u32,
    /// 0..=100, default 0 (off).
    pub gpu_memory_weight: u32,
}

impl Default for GpuPlacementArgs {
    fn default() -> Self {
        Self {
            resource_names: vec![DEFAULT_RESOURCE_NAME.to_owned()],
            request_size_prior: DEFAULT_REQUEST_SIZE_PRIOR
                .iter()
                .map(|&(gpus, weight)| RequestSizeArgs { gpus, cpu: None, memory: None, weight })
                .collect(),
            prior_weight: 100.0,
            learn_request_sizes: true,
            half_life_pods: 500,
            topology_keys: DEFAULT_TOPOLOGY_KEYS.iter().map(|k| (*k).to_owned()).collect(),
            cpu_only_pods: CpuOnlyPods::PreferNonGpuNodes,
            fragmentation_weight: 1,
            topology_weight: 2,
            gpu_memory_weight: 0,
        }
    }
}

impl GpuPlacementArgs {
    pub(crate) fn from_raw(raw: GpuPlacementArgsRaw) -> Self {
        let d = Self::default();
        Self {
            resource_names: raw.resource_names.unwrap_or(d.resource_names),
            request_size_prior: raw.request_size_prior.unwrap_or(d.request_size_prior),
            prior_weight: raw.prior_weight.unwrap_or(d.prior_weight),
            learn_request_sizes: raw.learn_request_sizes.unwrap_or(d.learn_request_sizes),
            half_life_pods: raw.half_life_pods.unwrap_or(d.half_life_pods),
            topology_keys: raw.topology_keys.unwrap_or(d.topology_keys),
            cpu_only_pods: raw.cpu_only_pods.unwrap_or(d.cpu_only_pods),
            fragmentation_weight: raw.fragmentation_weight.unwrap_or(d.fragmentation_weight),
            topology_weight: raw.topology_weight.unwrap_or(d.topology_weight),
            gpu_memory_weight: raw.gpu_memory_weight.unwrap_or(d.gpu_memory_weight),
        }
    }

    pub(crate) fn validate(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if self.fragmentation_weight + self.topology_weight + self.gpu_memory_weight == 0 {
            problems.push((
                "fragmentationWeight".to_owned(),
                "fragmentationWeight, topologyWeight and gpuMemoryWeight are all 0: the plugin \
                 would do nothing"
                    .to_owned(),
            ));
        }
        problems
    }
}

/// The args as written: every field optional, unknown fields refused.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(crate) struct GpuPlacementArgsRaw {
    #[serde(deserialize_with = "crate::args_meta::api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(deserialize_with = "kind")]
    #[allow(dead_code)]
    kind: (),
    #[serde(deserialize_with = "resource_names")]
    resource_names: Option<Vec<String>>,
    #[serde(deserialize_with = "prior")]
    request_size_prior: Option<Vec<RequestSizeArgs>>,
    #[serde(deserialize_with = "prior_weight")]
    prior_weight: Option<f64>,
    learn_request_sizes: Option<bool>,
    #[serde(deserialize_with = "half_life_pods")]
    half_life_pods: Option<u32>,
    #[serde(deserialize_with = "topology_keys")]
    topology_keys: Option<Vec<String>>,
    cpu_only_pods: Option<CpuOnlyPods>,
    #[serde(deserialize_with = "score_weight")]
    fragmentation_weight: Option<u32>,
    #[serde(deserialize_with = "score_weight")]
    topology_weight: Option<u32>,
    #[serde(deserialize_with = "score_weight")]
    gpu_memory_weight: Option<u32>,
}

fn kind<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    crate::args_meta::expect_str(d, "kind", GPU_PLACEMENT_ARGS_KIND)
}

/// Distinct non-empty strings.
fn distinct<E: de::Error>(list: &[String]) -> Result<(), E> {
    for (i, s) in list.iter().enumerate() {
        if s.is_empty() {
            return Err(E::custom(format!("entry {i} must not be empty")));
        }
        if list[..i].contains(s) {
            return Err(E::custom(format!("entry {i}: duplicate {s:?}")));
        }
    }
    Ok(())
}

fn resource_names<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    if names.is_empty() {
        return Err(de::Error::custom("must name at least one resource"));
    }
    distinct(&names)?;
    Ok(Some(names))
}

fn topology_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let keys = Vec::<String>::deserialize(d)?;
    distinct(&keys)?;
    Ok(Some(keys))
}

fn prior<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<RequestSizeArgs>>, D::Error> {
    let prior = Vec::<RequestSizeArgs>::deserialize(d)?;
    if prior.is_empty() {
        return Err(de::Error::custom("must have at least one entry"));
    }
    Ok(Some(prior))
}

fn in_range<E: de::Error>(value: u64, min: u32, max: u32) -> Result<u32, E> {
    match u32::try_from(value).ok().filter(|v| (min..=max).contains(v)) {
        Some(v) => Ok(v),
        None => Err(E::custom(format!("{value} is out of range {min}..={max}"))),
    }
}

fn integer<'de, D: Deserializer<'de>>(d: D, min: u32, max: u32) -> Result<u32, D::Error> {
    let value = i64::deserialize(d)?;
    match u64::try_from(value) {
        Ok(v) => in_range(v, min, max),
        Err(_) => Err(de::Error::custom(format!("{value} is out of range {min}..={max}"))),
    }
}

fn prior_gpus<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    integer(d, 1, MAX_GPUS_PER_POD)
}

fn half_life_pods<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    integer(d, 1, 1_000_000).map(Some)
}

fn score_weight<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    integer(d, 0, 100).map(Some)
}

fn finite<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(d)?;
    if value.is_finite() { Ok(value) } else { Err(de::Error::custom("must be a finite number")) }
}

fn prior_weight<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    match finite(d)? {
        w if w < 0.0 => Err(de::Error::custom("must not be negative")),
        w => Ok(Some(w)),
    }
}

fn positive_weight<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    match finite(d)? {
        w if w <= 0.0 => Err(de::Error::custom("must be positive")),
        w => Ok(w),
    }
}

/// A quantity: a string, or a number written bare (`cpu: 12`).
fn quantity<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(
        untagged,
        expecting = "a quantity (a string such as \"500m\" or \"16Gi\", or a number)"
    )]
    enum Quantity {
        Text(String),
        Integer(i64),
        Number(f64),
    }
    Ok(Some(match Quantity::deserialize(d)? {
        Quantity::Text(s) => s,
        Quantity::Integer(i) => i.to_string(),
        Quantity::Number(n) => n.to_string(),
    }))
}
