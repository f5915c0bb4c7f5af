//! The ops of a `workloadTemplate`, as written (`$param` references not yet
//! resolved), one struct per opcode with upstream's field names.
//!
//! Each op is decoded strictly: an unknown opcode or field is an error that
//! names it. Upstream fields convoy-bench does not implement yet are
//! declared (so a typo and a missing feature read differently) and refused
//! by [`Op::validate`].

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::params::{check_count, check_param};

/// The opcodes convoy-bench runs.
pub const SUPPORTED_OPCODES: [&str; 16] = [
    "createNodes",
    "createNamespaces",
    "createPods",
    "createPodSets",
    "createAny",
    "updateAny",
    "createPodGroups",
    "churn",
    "barrier",
    "sleep",
    "deletePods",
    "startCollectingMetrics",
    "stopCollectingMetrics",
    "allocResourceClaims",
    super::gpu::OPCODE,
    START_SCHEDULER,
];

/// `startScheduler`, convoy-bench's own opcode (see [`StartSchedulerOp`]).
pub const START_SCHEDULER: &str = "startScheduler";

/// Upstream opcodes convoy-bench does not run yet.
pub const UNSUPPORTED_OPCODES: [&str; 8] = [
    "createResourceClaims",
    "createResourceDriver",
    "waitForPodGroups",
    "createCompositePodGroups",
    "startCollectingProfile",
    "stopCollectingProfile",
    "updateDeviceConditions",
    "createDeviceTaintRules",
];

/// One op of a workload template.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `createNodes`.
    CreateNodes(CreateNodesOp),
    /// `createNamespaces`.
    CreateNamespaces(CreateNamespacesOp),
    /// `createPods`.
    CreatePods(CreatePodsOp),
    /// `createPodSets`.
    CreatePodSets(CreatePodSetsOp),
    /// `createAny`.
    CreateAny(CreateAnyOp),
    /// `updateAny`.
    UpdateAny(UpdateAnyOp),
    /// `createPodGroups`.
    CreatePodGroups(CreatePodGroupsOp),
    /// `churn`.
    Churn(ChurnOp),
    /// `barrier`.
    Barrier(BarrierOp),
    /// `sleep`.
    Sleep(SleepOp),
    /// `deletePods`.
    DeletePods(DeletePodsOp),
    /// `startCollectingMetrics`.
    StartCollectingMetrics(StartCollectingMetricsOp),
    /// `stopCollectingMetrics`.
    StopCollectingMetrics(StopCollectingMetricsOp),
    /// `allocResourceClaims`.
    AllocResourceClaims(AllocResourceClaimsOp),
    /// `createGpuJobs` (convoy-bench's own, see [`super::gpu`]).
    CreateGpuJobs(super::gpu::CreateGpuJobsOp),
    /// `startScheduler` (convoy-bench's own).
    StartScheduler(StartSchedulerOp),
}

/// `createNodes`: `count` (or `countParam`) nodes from a template or the
/// built-in node, optionally changed by one strategy.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateNodesOp {
    /// Number of nodes.
    pub count: Option<i64>,
    /// `$param` giving the number of nodes.
    pub count_param: Option<String>,
    /// Node template (relative to the config file).
    pub node_template_path: Option<String>,
    /// Sets allocatable resources.
    pub node_allocatable_strategy: Option<NodeAllocatableStrategy>,
    /// Labels nodes round-robin with `labelValues`.
    pub label_node_prepare_strategy: Option<LabelNodePrepareStrategy>,
    /// Gives each node a unique value for `labelKey`.
    pub unique_node_label_strategy: Option<UniqueNodeLabelStrategy>,
    /// Extra template data (`$param` values resolved).
    pub template_params: Option<BTreeMap<String, Value>>,
}

/// `nodeAllocatableStrategy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeAllocatableStrategy {
    /// Resource name → quantity.
    #[serde(default)]
    pub node_allocatable: BTreeMap<String, String>,
    /// CSI driver → `{count}`: the drivers (and their volume limits) of
    /// the CSINode created for each node, as upstream's
    /// `NodeAllocatableStrategy.PrepareDependentObjects`.
    #[serde(default)]
    pub csi_node_allocatable: BTreeMap<String, CsiVolumeNodeResources>,
    /// In-tree volume plugins migrated to CSI: the CSINode's
    /// `storage.alpha.kubernetes.io/migrated-plugins` annotation.
    #[serde(default)]
    pub migrated_plugins: Vec<String>,
}

/// `storage.k8s.io/v1` `VolumeNodeResources` as `csiNodeAllocatable`
/// writes it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CsiVolumeNodeResources {
    /// The driver's volume limit on the node (none: unlimited).
    pub count: Option<i32>,
}

/// `labelNodePrepareStrategy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelNodePrepareStrategy {
    /// The label key.
    pub label_key: String,
    /// Values given out round-robin.
    pub label_values: Vec<String>,
}

/// `uniqueNodeLabelStrategy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UniqueNodeLabelStrategy {
    /// The label key; each node gets a random UUID as value.
    pub label_key: String,
}

/// `createNamespaces`: `<prefix>-0` … `<prefix>-(n-1)`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateNamespacesOp {
    /// Name prefix.
    pub prefix: String,
    /// Number of namespaces.
    pub count: Option<i64>,
    /// `$param` giving the number.
    pub count_param: Option<String>,
    /// Namespace template (plain YAML, not a Go template, as upstream's
    /// `getSpecFromFile`): each namespace is a copy named `<prefix>-<i>`,
    /// so its labels reach `namespaceSelector`s.
    pub namespace_template_path: Option<String>,
}

/// `createPods`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreatePodsOp {
    /// Number of pods.
    pub count: Option<i64>,
    /// `$param` giving the number.
    pub count_param: Option<String>,
    /// `$param` the count is multiplied by (pods per group).
    pub count_multiplier_param: Option<String>,
    /// Measure SchedulingThroughput while these pods schedule.
    #[serde(default)]
    pub collect_metrics: bool,
    /// Namespace (default `namespace-<opIndex>`).
    pub namespace: Option<String>,
    /// Pod template (default: the test case's, else the built-in pod).
    pub pod_template_path: Option<String>,
    /// Do not wait for the pods to be scheduled (a later `barrier` does).
    #[serde(default)]
    pub skip_wait_to_completion: bool,
    /// Extra template data (`$param` values resolved).
    pub template_params: Option<BTreeMap<String, Value>>,
    /// Keep `count` pods present until `duration`: each pod is deleted
    /// once bound and replaced by a new one.
    #[serde(default)]
    pub steady_state: bool,
    /// `$param` (a boolean) giving `steadyState`.
    pub steady_state_param: Option<String>,
    /// How long a steady state lasts (a Go duration, `"30s"`).
    pub duration: Option<String>,
    /// `$param` giving the duration.
    pub duration_param: Option<String>,
    /// PersistentVolume file (plain YAML, as upstream's `getSpecFromFile`):
    /// with `persistentVolumeClaimTemplatePath`, each pod gets its own
    /// claim bound to its own volume (see `volumes::PodVolumes`).
    pub persistent_volume_template_path: Option<String>,
    /// PersistentVolumeClaim file (plain YAML). Without it the volume
    /// template is ignored, as upstream's `getPodStrategy` ignores it.
    pub persistent_volume_claim_template_path: Option<String>,
    /// How many consecutive pods share a `signature` label
    /// (`signature-label-<index / size>`; default 1, every pod its own), as
    /// upstream v1.37.2 labels every pod made from a template file.
    pub signature_batch_size: Option<i64>,
    /// `$param` giving `signatureBatchSize` (it wins over the literal, as
    /// upstream).
    pub signature_batch_size_param: Option<String>,
}

/// `createPodSets`: unrolled into `count` `createPods` ops, the i-th in
/// namespace `<namespacePrefix>-<i>`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreatePodSetsOp {
    /// Number of pod sets (namespaces).
    pub count: Option<i64>,
    /// `$param` giving the number.
    pub count_param: Option<String>,
    /// Namespace prefix (required).
    #[serde(default)]
    pub namespace_prefix: String,
    /// The `createPods` op repeated per namespace (its `namespace` is
    /// replaced); an `opcode` key in it, if any, must be `createPods`.
    pub create_pods_op: NestedCreatePodsOp,
}

/// The `createPodsOp` of `createPodSets`: a `createPods` op, written with
/// or without its `opcode`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NestedCreatePodsOp(pub CreatePodsOp);

impl<'de> Deserialize<'de> for NestedCreatePodsOp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut v = Value::deserialize(d)?;
        if let Some(map) = v.as_object_mut() {
            match map.remove("opcode") {
                None => {}
                Some(Value::String(s)) if s == "createPods" => {}
                Some(other) => {
                    return Err(serde::de::Error::custom(format!(
                        "opcode must be createPods, got {other}"
                    )));
                }
            }
        }
        decode(v).map(NestedCreatePodsOp).map_err(serde::de::Error::custom)
    }
}

/// `createAny`: `count` objects of any kind from a template.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateAnyOp {
    /// Namespace of namespaced objects; must be empty for cluster-scoped
    /// ones.
    #[serde(default)]
    pub namespace: String,
    /// The object's template (required).
    #[serde(default)]
    pub template_path: String,
    /// Number of objects (default 1).
    pub count: Option<i64>,
    /// `$param` giving the number.
    pub count_param: Option<String>,
    /// Extra template data (`$param` values resolved).
    pub template_params: Option<BTreeMap<String, Value>>,
}

/// `updateAny` (upstream `update.go`): `count` objects rendered from a
/// template (`.Index`, `.Count`), each replacing the object of its name
/// (an update, not a patch), or only the named subresources of it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpdateAnyOp {
    /// Namespace of namespaced objects; must be empty for cluster-scoped
    /// ones.
    #[serde(default)]
    pub namespace: String,
    /// The object's template (required).
    #[serde(default)]
    pub template_path: String,
    /// Number of objects (default 1).
    pub count: Option<i64>,
    /// `$param` giving the number (it wins over the literal, as upstream).
    pub count_param: Option<String>,
    /// Objects updated per second (0, the default: all at once).
    #[serde(default)]
    pub update_per_second: i64,
    /// Subresources to update instead of the object (`status`, `resize`).
    #[serde(default)]
    pub subresources: Vec<String>,
}

/// `createPodGroups`: `count` `scheduling.k8s.io/v1beta1` PodGroups.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreatePodGroupsOp {
    /// Number of PodGroups.
    pub count: Option<i64>,
    /// `$param` giving the number.
    pub count_param: Option<String>,
    /// Namespace (default `namespace-<opIndex>`).
    pub namespace: Option<String>,
    /// The PodGroup template (required).
    #[serde(default)]
    pub template_path: String,
    /// Extra template data (`$param` values resolved).
    pub template_params: Option<BTreeMap<String, Value>>,
}

/// `churn`: objects created (and, in `recreate` mode, deleted again) in
/// the background, every `intervalMilliseconds`, while later ops run.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChurnOp {
    /// `create` or `recreate`.
    #[serde(default)]
    pub mode: String,
    /// `create`: how many times each template is created (0 = no limit);
    /// `recreate`: how many objects per template exist at most (> 0).
    #[serde(default)]
    pub number: i64,
    /// The interval (default 500).
    #[serde(default)]
    pub interval_milliseconds: i64,
    /// Namespace of namespaced objects (default `namespace-<opIndex>`).
    pub namespace: Option<String>,
    /// The object templates (at least one).
    #[serde(default)]
    pub template_paths: Vec<String>,
}

/// `barrier`: waits until the selected pods are scheduled.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BarrierOp {
    /// Namespaces (empty: all).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Label selector (`key: value` map, as upstream).
    pub label_selector: Option<BTreeMap<String, String>>,
    /// `Scheduled` (default): the pods are bound; `Attempted`: each pod
    /// is bound or went through a scheduling cycle at least once.
    pub stage_requirement: Option<String>,
}

/// What a `barrier` waits for (upstream `SchedulingStage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Stage {
    /// Every pod is bound (`Scheduled`, the default).
    #[default]
    Scheduled,
    /// Every pod is bound or was attempted: upstream's `isAttempted`, a
    /// `PodScheduled` condition of any status (set by the scheduler after
    /// a failed cycle, or by the API server on a pod created with
    /// scheduling gates).
    Attempted,
}

impl Stage {
    /// `stageRequirement` as written (`None`: the default).
    pub fn parse(s: Option<&str>) -> Result<Stage, String> {
        match s {
            None | Some("" | "Scheduled") => Ok(Stage::Scheduled),
            Some("Attempted") => Ok(Stage::Attempted),
            Some(other) => Err(format!(
                "barrier.stageRequirement must be Scheduled or Attempted, got {other:?}"
            )),
        }
    }
}

/// `sleep`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SleepOp {
    /// A Go duration (`"1s"`).
    pub duration: Option<String>,
    /// `$param` giving the duration.
    pub duration_param: Option<String>,
}

/// `deletePods`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeletePodsOp {
    /// Namespace.
    pub namespace: String,
    /// Label selector (`key: value` map, as upstream).
    pub label_selector: Option<BTreeMap<String, String>>,
    /// Do not wait until the pods are gone.
    #[serde(default)]
    pub skip_wait_to_completion: bool,
    /// Deletion rate; 0 deletes all at once.
    #[serde(default)]
    pub delete_pods_per_second: u32,
}

/// `startCollectingMetrics`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StartCollectingMetricsOp {
    /// Suffix of the result's `Name` label (optional, as upstream).
    #[serde(default)]
    pub name: String,
    /// Namespaces whose pods are counted (required).
    pub namespaces: Vec<String>,
    /// Label selector (`key: value` map, as upstream).
    pub label_selector: Option<BTreeMap<String, String>>,
}

/// `stopCollectingMetrics`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StopCollectingMetricsOp {}

/// `startScheduler` (convoy-bench's own, at most once per workload): the
/// scheduler under test starts here instead of before the first op, so
/// that the ops before it leave a backlog (pods created while no scheduler
/// runs) that it then works through, as a scheduler restarted on a busy
/// cluster does. An op before it must not wait for binds
/// (`skipWaitToCompletion`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StartSchedulerOp {}

/// `allocResourceClaims` (upstream's `dra.go` `allocResourceClaimsOp`):
/// allocates every unallocated ResourceClaim of the namespace with the
/// structured allocator, each on a node picked at random among those where
/// it fits, and writes the allocation into the claim's status (no
/// `reservedFor`), faster than scheduling pods to fill a cluster.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllocResourceClaimsOp {
    /// Namespace of the claims; empty: every namespace.
    #[serde(default)]
    pub namespace: String,
}

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        if path == "." { inner } else { format!("{path}: {inner}") }
    })
}

impl Op {
    /// Decodes one op from its YAML mapping.
    pub fn from_value(mut v: Value) -> Result<Op, String> {
        let Some(map) = v.as_object_mut() else {
            return Err(format!("an op must be a mapping with an opcode, got {v}"));
        };
        let opcode = match map.remove("opcode") {
            Some(Value::String(s)) => s,
            Some(other) => return Err(format!("opcode must be a string, got {other}")),
            None => return Err("missing field `opcode`".into()),
        };
        let ctx = |e: String| format!("{opcode}: {e}");
        Ok(match opcode.as_str() {
            "createNodes" => Op::CreateNodes(decode(v).map_err(ctx)?),
            "createNamespaces" => Op::CreateNamespaces(decode(v).map_err(ctx)?),
            "createPods" => Op::CreatePods(decode(v).map_err(ctx)?),
            "createPodSets" => Op::CreatePodSets(decode(v).map_err(ctx)?),
            "createAny" => Op::CreateAny(decode(v).map_err(ctx)?),
            "updateAny" => Op::UpdateAny(decode(v).map_err(ctx)?),
            "createPodGroups" => Op::CreatePodGroups(decode(v).map_err(ctx)?),
            "churn" => Op::Churn(decode(v).map_err(ctx)?),
            "barrier" => Op::Barrier(decode(v).map_err(ctx)?),
            "sleep" => Op::Sleep(decode(v).map_err(ctx)?),
            "deletePods" => Op::DeletePods(decode(v).map_err(ctx)?),
            "startCollectingMetrics" => Op::StartCollectingMetrics(decode(v).map_err(ctx)?),
            "stopCollectingMetrics" => Op::StopCollectingMetrics(decode(v).map_err(ctx)?),
            "allocResourceClaims" => Op::AllocResourceClaims(decode(v).map_err(ctx)?),
            super::gpu::OPCODE => Op::CreateGpuJobs(decode(v).map_err(ctx)?),
            START_SCHEDULER => Op::StartScheduler(decode(v).map_err(ctx)?),
            o if UNSUPPORTED_OPCODES.contains(&o) => {
                return Err(format!(
                    "opcode {o:?} is an upstream opcode convoy-bench does not support yet \
                     (supported: {})",
                    SUPPORTED_OPCODES.join(", ")
                ));
            }
            o => {
                return Err(format!(
                    "unknown opcode {o:?} (supported: {})",
                    SUPPORTED_OPCODES.join(", ")
                ));
            }
        })
    }

    /// The opcode as written.
    pub fn opcode(&self) -> &'static str {
        match self {
            Op::CreateNodes(_) => "createNodes",
            Op::CreateNamespaces(_) => "createNamespaces",
            Op::CreatePods(_) => "createPods",
            Op::CreatePodSets(_) => "createPodSets",
            Op::CreateAny(_) => "createAny",
            Op::UpdateAny(_) => "updateAny",
            Op::CreatePodGroups(_) => "createPodGroups",
            Op::Churn(_) => "churn",
            Op::Barrier(_) => "barrier",
            Op::Sleep(_) => "sleep",
            Op::DeletePods(_) => "deletePods",
            Op::StartCollectingMetrics(_) => "startCollectingMetrics",
            Op::StopCollectingMetrics(_) => "stopCollectingMetrics",
            Op::AllocResourceClaims(_) => "allocResourceClaims",
            Op::CreateGpuJobs(_) => super::gpu::OPCODE,
            Op::StartScheduler(_) => START_SCHEDULER,
        }
    }

    /// Upstream's `isValid` checks, plus refusing upstream fields
    /// convoy-bench does not implement yet.
    pub fn validate(&self) -> Result<(), String> {
        let op = self.opcode();
        let count =
            |value: Option<i64>, param: &Option<String>| check_count(op, "count", value, param, 0);
        match self {
            Op::CreateNodes(o) => {
                count(o.count, &o.count_param)?;
                let strategies = usize::from(o.node_allocatable_strategy.is_some())
                    + usize::from(o.label_node_prepare_strategy.is_some())
                    + usize::from(o.unique_node_label_strategy.is_some());
                if strategies > 1 {
                    return Err(format!("{op}: at most one node strategy may be set"));
                }
                if let Some(s) = &o.label_node_prepare_strategy
                    && s.label_values.is_empty()
                {
                    return Err(format!("{op}.labelNodePrepareStrategy.labelValues is empty"));
                }
                Ok(())
            }
            Op::CreateNamespaces(o) => count(o.count, &o.count_param),
            Op::CreatePods(o) => validate_create_pods(op, o),
            Op::CreatePodSets(o) => {
                count(o.count, &o.count_param)?;
                if o.namespace_prefix.is_empty() {
                    return Err(format!("{op}.namespacePrefix is required"));
                }
                validate_create_pods("createPodSets.createPodsOp", &o.create_pods_op.0)
            }
            Op::CreateAny(o) => {
                if o.count.is_some() || o.count_param.is_some() {
                    count(o.count, &o.count_param)?;
                }
                if o.template_path.is_empty() {
                    return Err(format!("{op}.templatePath is required"));
                }
                Ok(())
            }
            Op::UpdateAny(o) => {
                if o.count.is_some() || o.count_param.is_some() {
                    count(o.count, &o.count_param)?;
                }
                if o.template_path.is_empty() {
                    return Err(format!("{op}.templatePath is required"));
                }
                if o.update_per_second < 0 {
                    return Err(format!(
                        "{op}.updatePerSecond must be >= 0, got {}",
                        o.update_per_second
                    ));
                }
                Ok(())
            }
            Op::CreatePodGroups(o) => {
                count(o.count, &o.count_param)?;
                if o.template_path.is_empty() {
                    return Err(format!("{op}.templatePath is required"));
                }
                Ok(())
            }
            Op::Churn(o) => {
                match o.mode.as_str() {
                    "create" => {}
                    "recreate" if o.number > 0 => {}
                    "recreate" => {
                        return Err(format!(
                            "{op}.number must be > 0 in recreate mode, got {}",
                            o.number
                        ));
                    }
                    m => {
                        return Err(format!(
                            "{op}.mode must be one of create, recreate; got {m:?}"
                        ));
                    }
                }
                if o.number < 0 {
                    return Err(format!("{op}.number must be >= 0, got {}", o.number));
                }
                if o.interval_milliseconds < 0 {
                    return Err(format!(
                        "{op}.intervalMilliseconds must be >= 0, got {}",
                        o.interval_milliseconds
                    ));
                }
                if o.template_paths.is_empty() {
                    return Err(format!("{op}.templatePaths is required"));
                }
                Ok(())
            }
            Op::Barrier(o) => Stage::parse(o.stage_requirement.as_deref()).map(drop),
            Op::Sleep(o) => match (&o.duration, &o.duration_param) {
                (Some(d), _) => crate::config::parse_duration(d).map(drop),
                (None, Some(p)) if p.starts_with('$') => Ok(()),
                (None, Some(p)) => {
                    Err(format!("{op}.durationParam must be a \"$param\" reference, got {p:?}"))
                }
                (None, None) => Err(format!("{op}: duration or durationParam is required")),
            },
            Op::DeletePods(o) => {
                if o.namespace.is_empty() {
                    return Err(format!("{op}.namespace is required"));
                }
                Ok(())
            }
            Op::StartCollectingMetrics(o) => {
                if o.namespaces.is_empty() {
                    return Err(format!("{op}.namespaces is required"));
                }
                Ok(())
            }
            Op::StopCollectingMetrics(_) | Op::AllocResourceClaims(_) | Op::StartScheduler(_) => {
                Ok(())
            }
            Op::CreateGpuJobs(o) => o.validate(),
        }
    }
}

/// Upstream's `createPodsOp.isValid`, plus refusing the fields
/// convoy-bench does not implement yet.
fn validate_create_pods(op: &str, o: &CreatePodsOp) -> Result<(), String> {
    check_count(op, "count", o.count, &o.count_param, 0)?;
    if let Some(size) = o.signature_batch_size.filter(|s| *s < 0) {
        return Err(format!("{op}.signatureBatchSize must be >= 0, got {size}"));
    }
    check_param(op, "signatureBatchSizeParam", &o.signature_batch_size_param)?;
    check_param(op, "countMultiplierParam", &o.count_multiplier_param)?;
    check_param(op, "steadyStateParam", &o.steady_state_param)?;
    check_param(op, "durationParam", &o.duration_param)?;
    if let Some(d) = &o.duration {
        crate::config::parse_duration(d).map_err(|e| format!("{op}.duration: {e}"))?;
    }
    let steady = o.steady_state || o.steady_state_param.is_some();
    if o.persistent_volume_claim_template_path.is_some() {
        if o.persistent_volume_template_path.is_none() {
            return Err(format!(
                "{op}: persistentVolumeClaimTemplatePath needs persistentVolumeTemplatePath"
            ));
        }
        if steady {
            return Err(format!(
                "{op}.persistentVolumeClaimTemplatePath with steadyState is not supported yet"
            ));
        }
    }
    if o.collect_metrics && o.skip_wait_to_completion {
        return Err(format!("{op}: collectMetrics and skipWaitToCompletion cannot both be true"));
    }
    if steady && o.skip_wait_to_completion {
        return Err(format!("{op}: skipWaitToCompletion and steadyState cannot both be true"));
    }
    let positive = o.duration.as_deref().and_then(|d| crate::config::parse_duration(d).ok());
    if o.steady_state && o.duration_param.is_none() && positive.is_none_or(|d| d.is_zero()) {
        return Err(format!("{op}: steadyState requires a positive duration or durationParam"));
    }
    Ok(())
}
