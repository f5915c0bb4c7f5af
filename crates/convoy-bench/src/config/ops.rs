//! The ops of a `workloadTemplate`, as written (`$param` references not yet
//! resolved), one struct per opcode with upstream's field names.
//!
//! Each op is decoded strictly: an unknown opcode or field is an error that
//! names it. Upstream fields convoy-bench does not implement yet are
//! declared (so a typo and a missing feature read differently) and refused
//! by [`Op::check_supported`].

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// The opcodes convoy-bench runs.
pub const SUPPORTED_OPCODES: [&str; 8] = [
    "createNodes",
    "createNamespaces",
    "createPods",
    "barrier",
    "sleep",
    "deletePods",
    "startCollectingMetrics",
    "stopCollectingMetrics",
];

/// Upstream opcodes convoy-bench does not run yet.
pub const UNSUPPORTED_OPCODES: [&str; 14] = [
    "allocResourceClaims",
    "createAny",
    "createPodSets",
    "createResourceClaims",
    "createResourceDriver",
    "churn",
    "updateAny",
    "createPodGroups",
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
    /// CSI driver → `{count}` (CSINode objects; not supported yet).
    pub csi_node_allocatable: Option<Value>,
    /// Migrated in-tree plugins (CSINode annotation; not supported yet).
    pub migrated_plugins: Option<Value>,
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
    /// Namespace template (not supported yet).
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
    /// Not supported yet.
    pub steady_state: Option<Value>,
    /// Not supported yet.
    pub steady_state_param: Option<Value>,
    /// Not supported yet.
    pub duration: Option<Value>,
    /// Not supported yet.
    pub duration_param: Option<Value>,
    /// Not supported yet.
    pub persistent_volume_template_path: Option<Value>,
    /// Not supported yet.
    pub persistent_volume_claim_template_path: Option<Value>,
    /// Not supported yet.
    pub signature_batch_size: Option<Value>,
    /// Not supported yet.
    pub signature_batch_size_param: Option<Value>,
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
    /// `Scheduled` (default); `Attempted` is not supported yet.
    pub stage_requirement: Option<String>,
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
    /// Suffix of the result's `Name` label.
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
            "barrier" => Op::Barrier(decode(v).map_err(ctx)?),
            "sleep" => Op::Sleep(decode(v).map_err(ctx)?),
            "deletePods" => Op::DeletePods(decode(v).map_err(ctx)?),
            "startCollectingMetrics" => Op::StartCollectingMetrics(decode(v).map_err(ctx)?),
            "stopCollectingMetrics" => Op::StopCollectingMetrics(decode(v).map_err(ctx)?),
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
            Op::Barrier(_) => "barrier",
            Op::Sleep(_) => "sleep",
            Op::DeletePods(_) => "deletePods",
            Op::StartCollectingMetrics(_) => "startCollectingMetrics",
            Op::StopCollectingMetrics(_) => "stopCollectingMetrics",
        }
    }

    /// Upstream's `isValid` checks, plus refusing upstream fields
    /// convoy-bench does not implement yet.
    pub fn validate(&self) -> Result<(), String> {
        let op = self.opcode();
        let unsupported = |field: &str| {
            Err(format!("{op}.{field} is an upstream field convoy-bench does not support yet"))
        };
        let count = |count: Option<i64>, param: &Option<String>| match (count, param) {
            (Some(c), _) if c < 0 => Err(format!("{op}.count must be >= 0, got {c}")),
            (Some(_), _) => Ok(()),
            (None, Some(p)) if p.starts_with('$') => Ok(()),
            (None, Some(p)) => {
                Err(format!("{op}.countParam must be a \"$param\" reference, got {p:?}"))
            }
            (None, None) => Err(format!("{op}: count or countParam is required")),
        };
        match self {
            Op::CreateNodes(o) => {
                count(o.count, &o.count_param)?;
                let strategies = usize::from(o.node_allocatable_strategy.is_some())
                    + usize::from(o.label_node_prepare_strategy.is_some())
                    + usize::from(o.unique_node_label_strategy.is_some());
                if strategies > 1 {
                    return Err(format!("{op}: at most one node strategy may be set"));
                }
                if let Some(s) = &o.node_allocatable_strategy {
                    if s.csi_node_allocatable.is_some() {
                        return unsupported("nodeAllocatableStrategy.csiNodeAllocatable");
                    }
                    if s.migrated_plugins.is_some() {
                        return unsupported("nodeAllocatableStrategy.migratedPlugins");
                    }
                }
                if let Some(s) = &o.label_node_prepare_strategy
                    && s.label_values.is_empty()
                {
                    return Err(format!("{op}.labelNodePrepareStrategy.labelValues is empty"));
                }
                Ok(())
            }
            Op::CreateNamespaces(o) => {
                count(o.count, &o.count_param)?;
                if o.namespace_template_path.is_some() {
                    return unsupported("namespaceTemplatePath");
                }
                Ok(())
            }
            Op::CreatePods(o) => {
                count(o.count, &o.count_param)?;
                let fields = [
                    ("steadyState", o.steady_state.is_some()),
                    ("steadyStateParam", o.steady_state_param.is_some()),
                    ("duration", o.duration.is_some()),
                    ("durationParam", o.duration_param.is_some()),
                    ("persistentVolumeTemplatePath", o.persistent_volume_template_path.is_some()),
                    (
                        "persistentVolumeClaimTemplatePath",
                        o.persistent_volume_claim_template_path.is_some(),
                    ),
                    ("signatureBatchSize", o.signature_batch_size.is_some()),
                    ("signatureBatchSizeParam", o.signature_batch_size_param.is_some()),
                ];
                if let Some((f, _)) = fields.iter().find(|(_, set)| *set) {
                    return unsupported(f);
                }
                if o.collect_metrics && o.skip_wait_to_completion {
                    return Err(format!(
                        "{op}: collectMetrics and skipWaitToCompletion cannot both be true"
                    ));
                }
                if let Some(p) = &o.count_multiplier_param
                    && !p.starts_with('$')
                {
                    return Err(format!(
                        "{op}.countMultiplierParam must be a \"$param\" reference, got {p:?}"
                    ));
                }
                Ok(())
            }
            Op::Barrier(o) => match o.stage_requirement.as_deref() {
                None | Some("Scheduled") => Ok(()),
                Some("Attempted") => unsupported("stageRequirement: Attempted"),
                Some(other) => Err(format!(
                    "{op}.stageRequirement must be Scheduled or Attempted, got {other:?}"
                )),
            },
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
            Op::StopCollectingMetrics(_) => Ok(()),
        }
    }
}
