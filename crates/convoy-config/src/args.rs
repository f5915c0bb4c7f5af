//! Typed arguments of the in-tree plugins Convoy implements, with upstream's defaults and
//! validation (`pkg/scheduler/apis/config/v1/defaults.go`, `validation/validation_pluginargs.go`).

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

use crate::args_meta::{api_version, expect_str};
use crate::gpu_args::{GpuPlacementArgs, GpuPlacementArgsRaw};
use crate::names;
use crate::spread_args::PodTopologySpreadArgs;

/// Arguments of one plugin, as its factory receives them.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum PluginArgs {
    /// `NodeResourcesFitArgs`.
    NodeResourcesFit(NodeResourcesFitArgs),
    /// `NodeResourcesBalancedAllocationArgs`.
    NodeResourcesBalancedAllocation(NodeResourcesBalancedAllocationArgs),
    /// `NodeAffinityArgs`.
    NodeAffinity(NodeAffinityArgs),
    /// `InterPodAffinityArgs`.
    InterPodAffinity(InterPodAffinityArgs),
    /// `PodTopologySpreadArgs`.
    PodTopologySpread(PodTopologySpreadArgs),
    /// `DefaultPreemptionArgs`.
    DefaultPreemption(DefaultPreemptionArgs),
    /// `VolumeBindingArgs`.
    VolumeBinding(VolumeBindingArgs),
    /// `DynamicResourcesArgs`.
    DynamicResources(DynamicResourcesArgs),
    /// `GpuPlacementArgs` (Convoy's own plugin).
    GpuPlacement(GpuPlacementArgs),
    /// Raw arguments of a plugin without typed args here (out-of-tree plugins), for its factory
    /// to decode; `apiVersion`/`kind` are kept if given.
    Other(serde_json::Value),
}

impl PluginArgs {
    /// Default args of the in-tree plugins that have typed args, `None` for others.
    pub fn default_for(plugin: &str) -> Option<Self> {
        match plugin {
            names::NODE_RESOURCES_FIT => Some(Self::NodeResourcesFit(Default::default())),
            names::NODE_RESOURCES_BALANCED_ALLOCATION => {
                Some(Self::NodeResourcesBalancedAllocation(Default::default()))
            }
            names::NODE_AFFINITY => Some(Self::NodeAffinity(Default::default())),
            names::INTER_POD_AFFINITY => Some(Self::InterPodAffinity(Default::default())),
            names::POD_TOPOLOGY_SPREAD => Some(Self::PodTopologySpread(Default::default())),
            names::DEFAULT_PREEMPTION => Some(Self::DefaultPreemption(Default::default())),
            names::VOLUME_BINDING => Some(Self::VolumeBinding(Default::default())),
            names::DYNAMIC_RESOURCES => Some(Self::DynamicResources(Default::default())),
            names::GPU_PLACEMENT => Some(Self::GpuPlacement(Default::default())),
            _ => None,
        }
    }

    /// Decodes `value` as the args of `plugin` (null: the defaults) with the loader's decoder
    /// and validation, for args built in code rather than read from a file. Errors name the
    /// field below `args` (`requestSizePrior[0].weight: must be positive`), several joined
    /// with `; `.
    pub fn from_json(plugin: &str, value: serde_json::Value) -> Result<Self, String> {
        let mut track = serde_path_to_error::Track::new();
        let de = serde_path_to_error::Deserializer::new(value, &mut track);
        let args = decode(plugin, de).map_err(|e| {
            match crate::error::join_path("", Some(&track.path())) {
                path if path.is_empty() => e.to_string(),
                path => format!("{path}: {e}"),
            }
        })?;
        let problems: Vec<String> = args
            .validate()
            .into_iter()
            .map(|(field, message)| format!("{field}: {message}"))
            .collect();
        if problems.is_empty() { Ok(args) } else { Err(problems.join("; ")) }
    }

    /// Upstream's validation of the (defaulted) args: `(field path below args, message)` pairs.
    pub(crate) fn validate(&self) -> Vec<(String, String)> {
        match self {
            Self::NodeResourcesFit(args) => args.validate(),
            Self::NodeResourcesBalancedAllocation(args) => args.validate(),
            Self::NodeAffinity(args) => args.validate(),
            // Its one range check fails at decoding, with the position.
            Self::InterPodAffinity(_) => Vec::new(),
            Self::PodTopologySpread(args) => args.validate(),
            Self::DefaultPreemption(args) => args.validate(),
            Self::VolumeBinding(args) => args.validate(),
            Self::DynamicResources(args) => args.validate(),
            Self::GpuPlacement(args) => args.validate(),
            Self::Other(_) => Vec::new(),
        }
    }
}

/// Decodes the `args` of plugin `plugin` from `deserializer` (null means defaults) and applies
/// the defaults. Range checks of single fields fail here, with the position of the field.
pub(crate) fn decode<'de, D: Deserializer<'de>>(
    plugin: &str,
    deserializer: D,
) -> Result<PluginArgs, D::Error> {
    Ok(match plugin {
        names::NODE_RESOURCES_FIT => {
            let raw = Option::<FitArgsRaw>::deserialize(deserializer)?.unwrap_or_default();
            let mut args = NodeResourcesFitArgs {
                ignored_resources: raw.ignored_resources,
                ignored_resource_groups: raw.ignored_resource_groups,
                scoring_strategy: raw.scoring_strategy.unwrap_or_default(),
            };
            args.scoring_strategy.apply_defaults();
            PluginArgs::NodeResourcesFit(args)
        }
        names::NODE_RESOURCES_BALANCED_ALLOCATION => {
            let raw = Option::<BalancedArgsRaw>::deserialize(deserializer)?.unwrap_or_default();
            let mut resources = raw.resources;
            default_resources(&mut resources);
            PluginArgs::NodeResourcesBalancedAllocation(NodeResourcesBalancedAllocationArgs {
                resources,
            })
        }
        names::NODE_AFFINITY => {
            let raw = Option::<AffinityArgsRaw>::deserialize(deserializer)?.unwrap_or_default();
            PluginArgs::NodeAffinity(NodeAffinityArgs { added_affinity: raw.added_affinity })
        }
        names::INTER_POD_AFFINITY => {
            let raw =
                Option::<InterPodAffinityArgsRaw>::deserialize(deserializer)?.unwrap_or_default();
            PluginArgs::InterPodAffinity(InterPodAffinityArgs {
                hard_pod_affinity_weight: raw
                    .hard_pod_affinity_weight
                    .unwrap_or(DEFAULT_HARD_POD_AFFINITY_WEIGHT),
                ignore_preferred_terms_of_existing_pods: raw
                    .ignore_preferred_terms_of_existing_pods
                    .unwrap_or(false),
            })
        }
        names::POD_TOPOLOGY_SPREAD => {
            let raw = Option::<SpreadArgsRaw>::deserialize(deserializer)?.unwrap_or_default();
            PluginArgs::PodTopologySpread(PodTopologySpreadArgs {
                default_constraints: raw.default_constraints.unwrap_or_default(),
                defaulting_type: raw.defaulting_type,
            })
        }
        names::DEFAULT_PREEMPTION => {
            let raw = Option::<PreemptionArgsRaw>::deserialize(deserializer)?.unwrap_or_default();
            let defaults = DefaultPreemptionArgs::default();
            PluginArgs::DefaultPreemption(DefaultPreemptionArgs {
                min_candidate_nodes_percentage: raw
                    .min_candidate_nodes_percentage
                    .unwrap_or(defaults.min_candidate_nodes_percentage),
                min_candidate_nodes_absolute: raw
                    .min_candidate_nodes_absolute
                    .unwrap_or(defaults.min_candidate_nodes_absolute),
                replacement_preemption_delay_seconds: raw
                    .replacement_preemption_delay_seconds
                    .unwrap_or(defaults.replacement_preemption_delay_seconds),
            })
        }
        names::GPU_PLACEMENT => {
            let raw = Option::<GpuPlacementArgsRaw>::deserialize(deserializer)?.unwrap_or_default();
            PluginArgs::GpuPlacement(GpuPlacementArgs::from_raw(raw))
        }
        names::VOLUME_BINDING => {
            let raw =
                Option::<VolumeBindingArgsRaw>::deserialize(deserializer)?.unwrap_or_default();
            let defaults = VolumeBindingArgs::default();
            PluginArgs::VolumeBinding(VolumeBindingArgs {
                bind_timeout_seconds: raw
                    .bind_timeout_seconds
                    .unwrap_or(defaults.bind_timeout_seconds),
                shape: raw.shape.filter(|s| !s.is_empty()).unwrap_or(defaults.shape),
            })
        }
        names::DYNAMIC_RESOURCES => {
            let raw =
                Option::<DynamicResourcesArgsRaw>::deserialize(deserializer)?.unwrap_or_default();
            let defaults = DynamicResourcesArgs::default();
            PluginArgs::DynamicResources(DynamicResourcesArgs {
                filter_timeout: raw.filter_timeout.unwrap_or(defaults.filter_timeout),
                binding_timeout: raw.binding_timeout.unwrap_or(defaults.binding_timeout),
            })
        }
        _ => PluginArgs::Other(
            Option::<serde_json::Value>::deserialize(deserializer)?
                .unwrap_or(serde_json::Value::Null),
        ),
    })
}

/// `NodeResourcesFitArgs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeResourcesFitArgs {
    /// Resources the Filter ignores (e.g. extended resources managed elsewhere).
    pub ignored_resources: Vec<String>,
    /// Resource groups (`example.com` for `example.com/*`) the Filter ignores.
    pub ignored_resource_groups: Vec<String>,
    /// How the Score ranks nodes.
    pub scoring_strategy: ScoringStrategy,
}

impl NodeResourcesFitArgs {
    fn validate(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        for (i, name) in self.ignored_resources.iter().enumerate() {
            if name.is_empty() {
                problems.push((format!("ignoredResources[{i}]"), "must not be empty".to_owned()));
            }
        }
        for (i, group) in self.ignored_resource_groups.iter().enumerate() {
            if group.is_empty() || group.contains('/') {
                problems.push((
                    format!("ignoredResourceGroups[{i}]"),
                    format!(
                        "resource group name {group:?} must be non-empty and must not contain '/'"
                    ),
                ));
            }
        }
        let strategy = &self.scoring_strategy;
        validate_resource_weights(&strategy.resources, "scoringStrategy.resources", &mut problems);
        match (&strategy.type_, &strategy.requested_to_capacity_ratio) {
            (ScoringStrategyType::RequestedToCapacityRatio, None) => problems.push((
                "scoringStrategy.requestedToCapacityRatio".to_owned(),
                "required when type is RequestedToCapacityRatio".to_owned(),
            )),
            (ScoringStrategyType::RequestedToCapacityRatio, Some(param)) => {
                validate_shape(
                    "scoringStrategy.requestedToCapacityRatio.shape",
                    &param.shape,
                    &mut problems,
                );
            }
            _ => {}
        }
        problems
    }
}

fn validate_resource_weights(
    resources: &[ResourceSpec],
    path: &str,
    problems: &mut Vec<(String, String)>,
) {
    for (i, resource) in resources.iter().enumerate() {
        if !(1..=100).contains(&resource.weight) {
            problems.push((
                format!("{path}[{i}].weight"),
                format!(
                    "resource weight of {} not in valid range [1, 100]: {}",
                    resource.name, resource.weight
                ),
            ));
        }
    }
}

fn validate_shape(
    path: &str,
    shape: &[UtilizationShapePoint],
    problems: &mut Vec<(String, String)>,
) {
    if shape.is_empty() {
        problems.push((path.to_owned(), "at least one point must be specified".to_owned()));
        return;
    }
    for i in 1..shape.len() {
        if shape[i - 1].utilization >= shape[i].utilization {
            problems.push((
                format!("{path}[{i}].utilization"),
                format!(
                    "utilization values must be sorted in strictly increasing order: {} follows {}",
                    shape[i].utilization,
                    shape[i - 1].utilization
                ),
            ));
            break;
        }
    }
    for (i, point) in shape.iter().enumerate() {
        if !(0..=100).contains(&point.utilization) {
            problems.push((
                format!("{path}[{i}].utilization"),
                format!("{} not in valid range [0, 100]", point.utilization),
            ));
        }
        if !(0..=10).contains(&point.score) {
            problems.push((
                format!("{path}[{i}].score"),
                format!("{} not in valid range [0, 10]", point.score),
            ));
        }
    }
}

/// `scoringStrategy` of [`NodeResourcesFitArgs`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ScoringStrategy {
    /// The scoring function; default `LeastAllocated`.
    #[serde(rename = "type")]
    pub type_: ScoringStrategyType,
    /// Resources to score and their weights; default cpu:1, memory:1; weights 1..=100 (0 means 1).
    #[serde(deserialize_with = "resources")]
    pub resources: Vec<ResourceSpec>,
    /// The shape for `RequestedToCapacityRatio` (required with that type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        Self {
            type_: ScoringStrategyType::LeastAllocated,
            resources: default_resource_specs(),
            requested_to_capacity_ratio: None,
        }
    }
}

impl ScoringStrategy {
    fn apply_defaults(&mut self) {
        default_resources(&mut self.resources);
    }
}

fn resources<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ResourceSpec>, D::Error> {
    Ok(Option::<Vec<ResourceSpec>>::deserialize(d)?.unwrap_or_default())
}

/// Upstream's defaulting of a resource list: empty means cpu:1, memory:1; weight 0 means 1.
fn default_resources(resources: &mut Vec<ResourceSpec>) {
    if resources.is_empty() {
        *resources = default_resource_specs();
    }
    for resource in resources.iter_mut() {
        if resource.weight == 0 {
            resource.weight = 1;
        }
    }
}

fn default_resource_specs() -> Vec<ResourceSpec> {
    vec![ResourceSpec::new("cpu", 1), ResourceSpec::new("memory", 1)]
}

/// The scoring function of `NodeResourcesFit`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum ScoringStrategyType {
    /// Favour nodes with the most free resources (spreading).
    #[default]
    LeastAllocated,
    /// Favour nodes with the least free resources (bin packing).
    MostAllocated,
    /// Score by a piecewise-linear function of utilization.
    RequestedToCapacityRatio,
}

impl ScoringStrategyType {
    const NAMES: [&'static str; 3] =
        ["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"];
}

impl fmt::Display for ScoringStrategyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::NAMES[*self as usize])
    }
}

impl<'de> Deserialize<'de> for ScoringStrategyType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.as_str() {
            "LeastAllocated" => Ok(Self::LeastAllocated),
            "MostAllocated" => Ok(Self::MostAllocated),
            "RequestedToCapacityRatio" => Ok(Self::RequestedToCapacityRatio),
            _ => Err(de::Error::custom(format!(
                "unknown variant {text:?}, expected one of {}",
                quoted_list(&Self::NAMES)
            ))),
        }
    }
}

fn quoted_list(names: &[&str]) -> String {
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

/// A resource and its weight in a score.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    /// Resource name (`cpu`, `memory`, `nvidia.com/gpu`, ...).
    pub name: String,
    /// Weight; 1..=100 after defaulting (0 in the file means 1).
    #[serde(default, deserialize_with = "resource_weight")]
    pub weight: i64,
}

impl ResourceSpec {
    /// A resource with a weight.
    pub fn new(name: impl Into<String>, weight: i64) -> Self {
        Self { name: name.into(), weight }
    }
}

fn resource_weight<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    in_range(i64::deserialize(d)?, 0, 100, "resource weight", " (0 means the default, 1)")
}

fn in_range<E: de::Error>(
    value: i64,
    min: i64,
    max: i64,
    what: &str,
    note: &str,
) -> Result<i64, E> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(E::custom(format!("{what} {value} not in valid range [{min}, {max}]{note}")))
    }
}

/// `requestedToCapacityRatio` of a [`ScoringStrategy`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestedToCapacityRatioParam {
    /// Points of the piecewise-linear scoring function, utilization strictly increasing.
    #[serde(default)]
    pub shape: Vec<UtilizationShapePoint>,
}

/// One point of the `RequestedToCapacityRatio` function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationShapePoint {
    /// Utilization in percent, 0..=100.
    #[serde(deserialize_with = "utilization")]
    pub utilization: i32,
    /// Score at that utilization, 0..=10.
    #[serde(deserialize_with = "shape_score")]
    pub score: i32,
}

fn utilization<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    in_range(i32::deserialize(d)?.into(), 0, 100, "utilization", "").map(|v| v as i32)
}

fn shape_score<'de, D: Deserializer<'de>>(d: D) -> Result<i32, D::Error> {
    in_range(i32::deserialize(d)?.into(), 0, 10, "score", "").map(|v| v as i32)
}

/// `NodeResourcesBalancedAllocationArgs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeResourcesBalancedAllocationArgs {
    /// Resources to balance; default cpu:1, memory:1; upstream requires weight 1.
    pub resources: Vec<ResourceSpec>,
}

impl Default for NodeResourcesBalancedAllocationArgs {
    fn default() -> Self {
        Self { resources: default_resource_specs() }
    }
}

impl NodeResourcesBalancedAllocationArgs {
    fn validate(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        for (i, resource) in self.resources.iter().enumerate() {
            if self.resources[..i].iter().any(|r| r.name == resource.name) {
                problems.push((
                    format!("resources[{i}].name"),
                    format!("duplicate resource {:?}", resource.name),
                ));
            }
            if resource.weight != 1 {
                problems.push((
                    format!("resources[{i}].weight"),
                    format!("must be 1, got {}", resource.weight),
                ));
            }
        }
        problems
    }
}

/// `NodeAffinityArgs`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinityArgs {
    /// A v1 `NodeAffinity` object added to every pod's affinity, kept as JSON for the plugin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_affinity: Option<serde_json::Value>,
}

impl NodeAffinityArgs {
    fn validate(&self) -> Vec<(String, String)> {
        const FIELDS: [&str; 2] = [
            "requiredDuringSchedulingIgnoredDuringExecution",
            "preferredDuringSchedulingIgnoredDuringExecution",
        ];
        match &self.added_affinity {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::Object(fields)) => fields
                .keys()
                .filter(|key| !FIELDS.contains(&key.as_str()))
                .map(|key| {
                    (
                        format!("addedAffinity.{key}"),
                        format!("unknown field, expected one of {}", quoted_list(&FIELDS)),
                    )
                })
                .collect(),
            Some(_) => {
                vec![("addedAffinity".to_owned(), "must be a NodeAffinity object".to_owned())]
            }
        }
    }
}

/// Upstream's default `hardPodAffinityWeight` (`v1/defaults.go`).
pub const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i32 = 1;

/// `InterPodAffinityArgs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InterPodAffinityArgs {
    /// Score weight of an existing pod's required affinity term the
    /// incoming pod matches (symmetry); 0..=100, default 1, 0 disables it.
    pub hard_pod_affinity_weight: i32,
    /// Skip scoring existing pods' preferred terms when the incoming pod has
    /// no preferred terms of its own (default false).
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        Self {
            hard_pod_affinity_weight: DEFAULT_HARD_POD_AFFINITY_WEIGHT,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

/// Upstream `validateHardPodAffinityWeight`: `[0, 100]` (null means the
/// default).
fn hard_pod_affinity_weight<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    match Option::<i64>::deserialize(d)? {
        None => Ok(None),
        Some(w @ 0..=100) => Ok(Some(w as i32)),
        Some(w) => Err(de::Error::custom(format!("{w} not in valid range [0, 100]"))),
    }
}

/// `DefaultPreemptionArgs` (upstream `v1/defaults.go`,
/// `validation_pluginargs.go`, v1.37.2): how many candidate nodes
/// preemption keeps from its dry run, at least
/// `max(nodes × minCandidateNodesPercentage / 100, minCandidateNodesAbsolute)`
/// (capped at the number of nodes tried).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DefaultPreemptionArgs {
    /// Percentage of the potential nodes; `[0, 100]`, default 10.
    pub min_candidate_nodes_percentage: i32,
    /// Absolute number; `>= 0`, default 100. Not both 0.
    pub min_candidate_nodes_absolute: i32,
    /// Convoy's extension, the cascade guard: for this many seconds after a
    /// pod was preempted, the pods of the same owner (its replacements)
    /// may not preempt; `>= 0`, default 0 (off: upstream's behaviour).
    pub replacement_preemption_delay_seconds: i64,
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        Self {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
            replacement_preemption_delay_seconds: 0,
        }
    }
}

impl DefaultPreemptionArgs {
    fn validate(&self) -> Vec<(String, String)> {
        const PCT: &str = "minCandidateNodesPercentage";
        const ABS: &str = "minCandidateNodesAbsolute";
        let (pct, abs) = (self.min_candidate_nodes_percentage, self.min_candidate_nodes_absolute);
        let mut problems = Vec::new();
        if !(0..=100).contains(&pct) {
            problems.push((PCT.to_owned(), format!("{pct} not in valid range [0, 100]")));
        }
        if abs < 0 {
            problems.push((ABS.to_owned(), format!("{abs} not in valid range [0, inf)")));
        }
        if pct == 0 && abs == 0 {
            problems.push((PCT.to_owned(), format!("cannot be zero at the same time as {ABS}")));
            problems.push((ABS.to_owned(), format!("cannot be zero at the same time as {PCT}")));
        }
        let delay = self.replacement_preemption_delay_seconds;
        if !(0..=86_400).contains(&delay) {
            problems.push((
                "replacementPreemptionDelaySeconds".to_owned(),
                format!("{delay} not in valid range [0, 86400]"),
            ));
        }
        problems
    }
}

/// `VolumeBindingArgs` (upstream v1.37.2 defaults, with the
/// StorageCapacityScoring gate on as it is by default). Decoded and
/// validated as upstream; VolumeBinding's PreBind reads
/// `bindTimeoutSeconds`, the `shape` waits for the Score to come.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeBindingArgs {
    /// How long PreBind waits for the volumes to be bound; `>= 0`, default
    /// 600.
    pub bind_timeout_seconds: i64,
    /// The score of a node by the utilization of its storage; default
    /// `{0 → 10, 100 → 0}` (prefer the emptier).
    pub shape: Vec<UtilizationShapePoint>,
}

impl Default for VolumeBindingArgs {
    fn default() -> Self {
        Self {
            bind_timeout_seconds: 600,
            shape: vec![
                UtilizationShapePoint { utilization: 0, score: 10 },
                UtilizationShapePoint { utilization: 100, score: 0 },
            ],
        }
    }
}

impl VolumeBindingArgs {
    fn validate(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if self.bind_timeout_seconds < 0 {
            problems.push((
                "bindTimeoutSeconds".to_owned(),
                format!(
                    "{}: invalid BindTimeoutSeconds, should not be a negative value",
                    self.bind_timeout_seconds
                ),
            ));
        }
        validate_shape("shape", &self.shape, &mut problems);
        problems
    }
}

/// `DynamicResourcesArgs` (upstream v1.37.2 defaults under default feature
/// gates: `DRASchedulerFilterTimeout`, `DRADeviceBindingConditions` and
/// `DRAResourceClaimDeviceStatus` are on).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicResourcesArgs {
    /// How long Filter may search for an allocation on one node before the
    /// node is given up (`timed out trying to allocate devices`); zero:
    /// no limit. Default 10 s.
    #[serde(serialize_with = "serialize_duration")]
    pub filter_timeout: std::time::Duration,
    /// How long PreBind waits for devices' binding conditions; at least
    /// 1 s, default 600 s. Convoy does not allocate devices with binding
    /// conditions (they are not selectable), so nothing waits on it yet.
    #[serde(serialize_with = "serialize_duration")]
    pub binding_timeout: std::time::Duration,
}

impl Default for DynamicResourcesArgs {
    fn default() -> Self {
        Self {
            filter_timeout: std::time::Duration::from_secs(10),
            binding_timeout: std::time::Duration::from_secs(600),
        }
    }
}

impl DynamicResourcesArgs {
    fn validate(&self) -> Vec<(String, String)> {
        // Negative durations fail at decoding, with their position.
        let mut problems = Vec::new();
        if self.binding_timeout < std::time::Duration::from_secs(1) {
            problems.push((
                "bindingTimeout".to_owned(),
                format!(
                    "{}: must be at least 1 second",
                    crate::duration::format_go_duration(self.binding_timeout)
                ),
            ));
        }
        problems
    }
}

fn serialize_duration<S: serde::Serializer>(
    d: &std::time::Duration,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::duration::format_go_duration(*d))
}

fn optional_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    crate::duration::deserialize(d).map(Some)
}

// Raw forms of the top-level args: they accept `apiVersion` and `kind`.

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct DynamicResourcesArgsRaw {
    #[serde(deserialize_with = "api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(deserialize_with = "kind_dynamic_resources")]
    #[allow(dead_code)]
    kind: (),
    #[serde(deserialize_with = "optional_duration")]
    filter_timeout: Option<std::time::Duration>,
    #[serde(deserialize_with = "optional_duration")]
    binding_timeout: Option<std::time::Duration>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct VolumeBindingArgsRaw {
    #[serde(deserialize_with = "api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(deserialize_with = "kind_volume_binding")]
    #[allow(dead_code)]
    kind: (),
    bind_timeout_seconds: Option<i64>,
    shape: Option<Vec<UtilizationShapePoint>>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct PreemptionArgsRaw {
    #[serde(deserialize_with = "api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(deserialize_with = "kind_preemption")]
    #[allow(dead_code)]
    kind: (),
    min_candidate_nodes_percentage: Option<i32>,
    min_candidate_nodes_absolute: Option<i32>,
    replacement_preemption_delay_seconds: Option<i64>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct FitArgsRaw {
    #[serde(deserialize_with = "api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(deserialize_with = "kind_fit")]
    #[allow(dead_code)]
    kind: (),
    ignored_resources: Vec<String>,
    ignored_resource_groups: Vec<String>,
    scoring_strategy: Option<ScoringStrategy>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct BalancedArgsRaw {
    #[serde(deserialize_with = "api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(deserialize_with = "kind_balanced")]
    #[allow(dead_code)]
    kind: (),
    #[serde(deserialize_with = "resources")]
    resources: Vec<ResourceSpec>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct AffinityArgsRaw {
    #[serde(deserialize_with = "api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(deserialize_with = "kind_affinity")]
    #[allow(dead_code)]
    kind: (),
    added_affinity: Option<serde_json::Value>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct InterPodAffinityArgsRaw {
    #[serde(deserialize_with = "api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(deserialize_with = "kind_inter_pod_affinity")]
    #[allow(dead_code)]
    kind: (),
    #[serde(deserialize_with = "hard_pod_affinity_weight")]
    hard_pod_affinity_weight: Option<i32>,
    ignore_preferred_terms_of_existing_pods: Option<bool>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct SpreadArgsRaw {
    #[serde(deserialize_with = "api_version")]
    #[allow(dead_code)]
    api_version: (),
    #[serde(deserialize_with = "kind_spread")]
    #[allow(dead_code)]
    kind: (),
    default_constraints: Option<Vec<crate::spread_args::DefaultConstraint>>,
    defaulting_type: crate::spread_args::DefaultingType,
}

fn kind_fit<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, "kind", "NodeResourcesFitArgs")
}

fn kind_balanced<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, "kind", "NodeResourcesBalancedAllocationArgs")
}

fn kind_inter_pod_affinity<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, "kind", "InterPodAffinityArgs")
}

fn kind_affinity<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, "kind", "NodeAffinityArgs")
}

fn kind_preemption<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, "kind", "DefaultPreemptionArgs")
}

fn kind_spread<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, "kind", "PodTopologySpreadArgs")
}

fn kind_volume_binding<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, "kind", "VolumeBindingArgs")
}

fn kind_dynamic_resources<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    expect_str(d, "kind", "DynamicResourcesArgs")
}
