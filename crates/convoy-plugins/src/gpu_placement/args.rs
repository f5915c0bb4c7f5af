//! `GpuPlacementArgs`: the plugin's arguments, decoded strictly from the raw
//! `args` of its `pluginConfig` entry (`PluginArgs::Other`). Every problem
//! names the field (`GpuPlacementArgs.resourceNames[0]: must not be empty`);
//! unknown fields are errors, as in upstream's strict decoding.

use convoy_config::PluginArgs;
use serde_json::{Map, Value};

use convoy_api::resource::{parse_milli, parse_value};

use super::fragmentation::Shape;
use crate::node_resources::is_extended_resource_name;

/// The `kind` the args may carry, and the prefix of every error.
pub const KIND: &str = "GpuPlacementArgs";

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

const FIELDS: [&str; 12] = [
    "apiVersion",
    "kind",
    "resourceNames",
    "requestSizePrior",
    "priorWeight",
    "learnRequestSizes",
    "halfLifePods",
    "topologyKeys",
    "cpuOnlyPods",
    "fragmentationWeight",
    "topologyWeight",
    "gpuMemoryWeight",
];

/// What a pod without a GPU request prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuOnlyPods {
    /// Nodes without GPUs first, then partly used GPU nodes, fully free GPU
    /// nodes last (the default).
    PreferNonGpuNodes,
    /// No preference, except that a fully free GPU node scores lowest
    /// while another node fits.
    Neutral,
}

/// One entry of the request-size prior.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeWeight {
    /// GPUs per pod (`gpus`), 1..=[`MAX_GPUS_PER_POD`].
    pub gpus: u32,
    /// CPU per pod in millicores (`cpu`, a quantity; default 0: fits
    /// wherever the GPUs do).
    pub milli_cpu: i64,
    /// Memory per pod in bytes (`memory`, a quantity; default 0).
    pub memory: i64,
    /// Relative weight (`weight`), positive.
    pub weight: f64,
}

impl SizeWeight {
    /// A GPU-only entry.
    pub fn gpus(gpus: u32, weight: f64) -> Self {
        Self { gpus, milli_cpu: 0, memory: 0, weight }
    }

    /// The request shape of the entry.
    pub fn shape(&self) -> Shape {
        Shape { gpus: i64::from(self.gpus), milli_cpu: self.milli_cpu, memory: self.memory }
    }
}

/// The plugin's arguments, defaulted and validated.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuPlacementArgs {
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

impl Default for GpuPlacementArgs {
    fn default() -> Self {
        Self {
            resource_names: vec![DEFAULT_RESOURCE_NAME.to_string()],
            request_size_prior: DEFAULT_REQUEST_SIZE_PRIOR
                .iter()
                .map(|&(gpus, weight)| SizeWeight::gpus(gpus, weight))
                .collect(),
            prior_weight: 100.0,
            learn_request_sizes: true,
            half_life_pods: 500,
            topology_keys: DEFAULT_TOPOLOGY_KEYS.iter().map(|k| k.to_string()).collect(),
            cpu_only_pods: CpuOnlyPods::PreferNonGpuNodes,
            fragmentation_weight: 1,
            topology_weight: 2,
            gpu_memory_weight: 0,
        }
    }
}

/// Collects `GpuPlacementArgs.<path>: <message>` problems.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn push(&mut self, path: &str, message: impl std::fmt::Display) {
        self.0.push(format!("{KIND}.{path}: {message}"));
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn string(v: &Value, path: &str, p: &mut Problems) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        other => {
            p.push(path, format!("expected a string, got {}", type_name(other)));
            None
        }
    }
}

fn list<'a>(v: &'a Value, path: &str, p: &mut Problems) -> Option<&'a [Value]> {
    match v {
        Value::Array(a) => Some(a),
        other => {
            p.push(path, format!("expected a list, got {}", type_name(other)));
            None
        }
    }
}

fn object<'a>(v: &'a Value, path: &str, p: &mut Problems) -> Option<&'a Map<String, Value>> {
    match v {
        Value::Object(m) => Some(m),
        other => {
            p.push(path, format!("expected an object, got {}", type_name(other)));
            None
        }
    }
}

fn number(v: &Value, path: &str, p: &mut Problems) -> Option<f64> {
    match v.as_f64() {
        Some(x) if x.is_finite() => Some(x),
        _ => {
            p.push(path, format!("expected a number, got {}", type_name(v)));
            None
        }
    }
}

/// An integer within `range`.
fn integer(
    v: &Value,
    path: &str,
    range: std::ops::RangeInclusive<u32>,
    p: &mut Problems,
) -> Option<u32> {
    let Some(i) = v.as_i64() else {
        p.push(path, format!("expected an integer, got {}", type_name(v)));
        return None;
    };
    match u32::try_from(i).ok().filter(|i| range.contains(i)) {
        Some(i) => Some(i),
        None => {
            p.push(path, format!("{i} is out of range {}..={}", range.start(), range.end()));
            None
        }
    }
}

/// A list of distinct non-empty strings.
fn string_list(v: &Value, path: &str, p: &mut Problems) -> Option<Vec<String>> {
    let items = list(v, path, p)?;
    let before = p.0.len();
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Some(s) = string(item, &at, p) else { continue };
        if s.is_empty() {
            p.push(&at, "must not be empty");
        } else if out.contains(&s) {
            p.push(&at, format!("duplicate {s:?}"));
        } else {
            out.push(s);
        }
    }
    (p.0.len() == before).then_some(out)
}

impl GpuPlacementArgs {
    /// The args of the plugin's factory: `None` (or null) gives the
    /// defaults; anything but `PluginArgs::Other` is an error. Problems are
    /// joined with `; `, each naming its field.
    pub fn from_plugin_args(args: Option<&PluginArgs>) -> Result<Self, String> {
        match args {
            None => Ok(Self::default()),
            Some(PluginArgs::Other(v)) => Self::from_json(v).map_err(|p| p.join("; ")),
            Some(other) => Err(format!("want args to be of type {KIND}, got {other:?}")),
        }
    }

    /// Decodes and validates raw args (null means the defaults); on failure
    /// every problem found, each naming its field.
    pub fn from_json(v: &Value) -> Result<Self, Vec<String>> {
        let mut args = Self::default();
        if v.is_null() {
            return Ok(args);
        }
        let mut p = Problems::default();
        let Some(fields) = object(v, "", &mut p) else {
            return Err(vec![format!("{KIND}: expected an object, got {}", type_name(v))]);
        };
        for (name, value) in fields {
            let path = name.as_str();
            match path {
                "apiVersion" => {
                    string(value, path, &mut p);
                }
                "kind" => {
                    if let Some(kind) = string(value, path, &mut p).filter(|k| k != KIND) {
                        p.push(path, format!("expected {KIND:?}, got {kind:?}"));
                    }
                }
                "resourceNames" => {
                    if let Some(names) = string_list(value, path, &mut p) {
                        if names.is_empty() {
                            p.push(path, "must name at least one resource");
                        }
                        for (i, n) in names.iter().enumerate() {
                            if !is_extended_resource_name(n) {
                                p.push(
                                    &format!("{path}[{i}]"),
                                    format!("{n:?} is not an extended resource name (like nvidia.com/gpu)"),
                                );
                            }
                        }
                        args.resource_names = names;
                    }
                }
                "requestSizePrior" => {
                    if let Some(prior) = decode_prior(value, path, &mut p) {
                        args.request_size_prior = prior;
                    }
                }
                "priorWeight" => {
                    match number(value, path, &mut p) {
                        Some(w) if w < 0.0 => p.push(path, "must not be negative"),
                        Some(w) => args.prior_weight = w,
                        None => {}
                    }
                }
                "learnRequestSizes" => match value {
                    Value::Bool(b) => args.learn_request_sizes = *b,
                    other => p.push(path, format!("expected a boolean, got {}", type_name(other))),
                },
                "halfLifePods" => {
                    if let Some(h) = integer(value, path, 1..=1_000_000, &mut p) {
                        args.half_life_pods = h;
                    }
                }
                "topologyKeys" => {
                    if let Some(keys) = string_list(value, path, &mut p) {
                        args.topology_keys = keys;
                    }
                }
                "cpuOnlyPods" => match string(value, path, &mut p).as_deref() {
                    Some("PreferNonGpuNodes") => args.cpu_only_pods = CpuOnlyPods::PreferNonGpuNodes,
                    Some("Neutral") => args.cpu_only_pods = CpuOnlyPods::Neutral,
                    Some(other) => p.push(
                        path,
                        format!("unknown value {other:?}, expected one of \"PreferNonGpuNodes\", \"Neutral\""),
                    ),
                    None => {}
                },
                "fragmentationWeight" | "topologyWeight" | "gpuMemoryWeight" => {
                    if let Some(w) = integer(value, path, 0..=100, &mut p) {
                        match path {
                            "fragmentationWeight" => args.fragmentation_weight = w,
                            "topologyWeight" => args.topology_weight = w,
                            _ => args.gpu_memory_weight = w,
                        }
                    }
                }
                unknown => p.push(unknown, format!("unknown field; known fields: {}", FIELDS.join(", "))),
            }
        }
        if args.fragmentation_weight + args.topology_weight + args.gpu_memory_weight == 0 {
            p.push(
                "fragmentationWeight",
                "fragmentationWeight, topologyWeight and gpuMemoryWeight are all 0: the plugin would do nothing",
            );
        }
        if p.0.is_empty() { Ok(args) } else { Err(p.0) }
    }
}

/// A resource quantity (a string like `"12"`, `"500m"`, `"16Gi"`, or a
/// number), parsed by `parse`; 0 after a problem.
fn quantity(
    v: &Value,
    path: &str,
    parse: fn(&str) -> Result<i64, convoy_api::resource::QuantityError>,
    p: &mut Problems,
) -> i64 {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            p.push(path, format!("expected a quantity, got {}", type_name(other)));
            return 0;
        }
    };
    match parse(&text) {
        Ok(q) if q >= 0 => q,
        Ok(_) => {
            p.push(path, "must not be negative");
            0
        }
        Err(e) => {
            p.push(path, e);
            0
        }
    }
}

fn decode_prior(v: &Value, path: &str, p: &mut Problems) -> Option<Vec<SizeWeight>> {
    let items = list(v, path, p)?;
    let before = p.0.len();
    if items.is_empty() {
        p.push(path, "must have at least one entry");
    }
    let mut out: Vec<SizeWeight> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Some(entry) = object(item, &at, p) else { continue };
        let (mut gpus, mut weight, mut milli_cpu, mut memory) = (None, None, 0, 0);
        for (k, v) in entry {
            let field = format!("{at}.{k}");
            match k.as_str() {
                "gpus" => gpus = integer(v, &field, 1..=MAX_GPUS_PER_POD, p),
                "cpu" => milli_cpu = quantity(v, &field, parse_milli, p),
                "memory" => memory = quantity(v, &field, parse_value, p),
                "weight" => match number(v, &field, p) {
                    Some(w) if w <= 0.0 => p.push(&field, "must be positive"),
                    w => weight = w,
                },
                _ => p.push(&field, "unknown field; known fields: gpus, cpu, memory, weight"),
            }
        }
        if !entry.contains_key("gpus") {
            p.push(&format!("{at}.gpus"), "required");
        }
        if !entry.contains_key("weight") {
            p.push(&format!("{at}.weight"), "required");
        }
        if let (Some(gpus), Some(weight)) = (gpus, weight) {
            let entry = SizeWeight { gpus, milli_cpu, memory, weight };
            if out.iter().any(|s| s.shape() == entry.shape()) {
                p.push(&at, "duplicate entry (same gpus, cpu and memory as an earlier one)");
            } else {
                out.push(entry);
            }
        }
    }
    (p.0.len() == before).then_some(out)
}
