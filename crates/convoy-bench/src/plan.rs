//! One workload's ops with every `$param` resolved and every template file
//! read: what a target executes. Planning is where upstream's
//! `patchParams` checks happen (undefined, mistyped and unused parameters),
//! before anything runs.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;

use crate::config::{Config, CreatePodsOp, Op, Params, Stage, TestCase, Workload, parse_duration};
use crate::labels::Selector;
use crate::template::Env;
pub use crate::template::{TemplateSource, env_for};

/// How `createNodes` changes each node.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeStrategy {
    /// Sets `status.allocatable` (and `capacity` where lower).
    Allocatable(BTreeMap<String, String>),
    /// Sets `key` to the values round-robin.
    Label {
        /// Label key.
        key: String,
        /// Values.
        values: Vec<String>,
    },
    /// Sets `key` to a random UUID per node.
    UniqueLabel {
        /// Label key.
        key: String,
    },
}

/// A resolved `createNodes`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodesStep {
    /// Index of the op in the workload template.
    pub op_index: usize,
    /// Number of nodes.
    pub count: usize,
    /// Template.
    pub template: TemplateSource,
    /// Template params (resolved).
    pub params: Env,
    /// Strategy, if any.
    pub strategy: Option<NodeStrategy>,
    /// The CSINode created for each node (`nodeAllocatableStrategy`).
    pub csi_node: Option<CsiNodeTemplate>,
}

/// The CSINode upstream's `NodeAllocatableStrategy` creates for every node
/// it prepares (`runners.go`, v1.37.2): named after the node, one driver
/// per `csiNodeAllocatable` entry (node ID: the node's name), the
/// migrated plugins joined by commas in an annotation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CsiNodeTemplate {
    /// Driver name → volume limit (`None`: the driver has no `allocatable`).
    pub drivers: BTreeMap<String, Option<i32>>,
    /// In-tree plugins migrated to CSI.
    pub migrated_plugins: Vec<String>,
}

/// `persistentVolumeTemplatePath` and `persistentVolumeClaimTemplatePath`
/// of a `createPods`: plain YAML files (not Go templates), as upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeTemplates {
    /// The PersistentVolume file.
    pub volume: TemplateSource,
    /// The PersistentVolumeClaim file.
    pub claim: TemplateSource,
}

/// A resolved `createPods`.
#[derive(Debug, Clone, PartialEq)]
pub struct PodsStep {
    /// Index of the op in the workload template.
    pub op_index: usize,
    /// Number of pods.
    pub count: usize,
    /// Namespace.
    pub namespace: String,
    /// Template.
    pub template: TemplateSource,
    /// Template params (resolved).
    pub params: Env,
    /// Measure throughput while these pods schedule.
    pub collect_metrics: bool,
    /// Do not wait for them to be scheduled.
    pub skip_wait: bool,
    /// `steadyState`: keep `count` pods present for this long, replacing
    /// each pod once it is bound.
    pub steady: Option<Duration>,
    /// Each pod's own claim and volume, bound to each other, when set.
    pub volumes: Option<VolumeTemplates>,
    /// With a template file, how many consecutive pods share a
    /// `signature` label (upstream's `signatureBatchSize`, at least 1);
    /// `None` for the built-in pod, which upstream does not label.
    pub signature_batch: Option<usize>,
}

/// A resolved `createAny` or `createPodGroups`: `count` objects from a
/// template.
#[derive(Debug, Clone, PartialEq)]
pub struct AnyStep {
    /// Index of the op in the (unrolled) workload.
    pub op_index: usize,
    /// Number of objects.
    pub count: usize,
    /// Namespace of namespaced objects (`None`: the objects must be
    /// cluster-scoped, as upstream's `createAny` requires).
    pub namespace: Option<String>,
    /// Template.
    pub template: TemplateSource,
    /// Template params (resolved).
    pub params: Env,
}

/// A resolved `updateAny`: `any.count` objects rendered from
/// `any.template`, each replacing the object of its name.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateStep {
    /// The objects, as `createAny` renders them (no template params).
    pub any: AnyStep,
    /// Updates per second (0: all at once).
    pub per_second: u32,
    /// Subresources updated instead of the object (empty: the object).
    pub subresources: Vec<String>,
}

/// A resolved `createNamespaces`.
#[derive(Debug, Clone, PartialEq)]
pub struct NamespacesStep {
    /// `<prefix>-0` … `<prefix>-(n-1)`.
    pub names: Vec<String>,
    /// The `namespaceTemplatePath` object each namespace copies (its
    /// name replaced); an empty Namespace without a template.
    pub template: Box<Namespace>,
}

impl NamespacesStep {
    /// The namespaces to create, named.
    pub fn namespaces(&self) -> impl Iterator<Item = Namespace> + '_ {
        self.names.iter().map(|n| {
            let mut ns = Namespace::clone(&self.template);
            ns.metadata.name = Some(n.clone());
            ns
        })
    }
}

/// How `churn` treats the objects it creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChurnMode {
    /// Create one object per template at each tick, `limit` times (no
    /// limit when `None`).
    Create {
        /// Ticks that create.
        limit: Option<usize>,
    },
    /// Per template, `number` slots used round-robin: a tick creates an
    /// object in an empty slot and deletes the object of a full one, so
    /// objects live for `number` ticks.
    Recreate {
        /// Slots per template.
        number: usize,
    },
}

/// A resolved `churn`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChurnStep {
    /// Index of the op in the (unrolled) workload.
    pub op_index: usize,
    /// Mode.
    pub mode: ChurnMode,
    /// Tick interval.
    pub interval: Duration,
    /// Namespace of namespaced objects.
    pub namespace: String,
    /// The object templates (used as written, not rendered, as upstream).
    pub templates: Vec<TemplateSource>,
}

/// One resolved op.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `createNodes`.
    CreateNodes(NodesStep),
    /// `createNamespaces`.
    CreateNamespaces(NamespacesStep),
    /// `createPods` (also each pod set of `createPodSets`).
    CreatePods(PodsStep),
    /// `createAny`.
    CreateAny(AnyStep),
    /// `createPodGroups`: like `createAny`, for PodGroups only.
    CreatePodGroups(AnyStep),
    /// `updateAny`.
    UpdateAny(UpdateStep),
    /// `churn`: starts a background task that runs until the workload ends.
    Churn(ChurnStep),
    /// `barrier`.
    Barrier {
        /// Namespaces (empty: all).
        namespaces: Vec<String>,
        /// Pods to wait for.
        selector: Selector,
        /// Bound, or only attempted.
        stage: Stage,
    },
    /// `sleep`.
    Sleep(Duration),
    /// `deletePods`.
    DeletePods {
        /// Namespace.
        namespace: String,
        /// Pods to delete.
        selector: Selector,
        /// Do not wait until they are gone.
        skip_wait: bool,
        /// Rate; 0 = all at once.
        per_second: u32,
    },
    /// `startCollectingMetrics`.
    StartCollecting {
        /// Suffix of the result's name.
        name: String,
        /// Namespaces counted.
        namespaces: Vec<String>,
        /// Pods counted.
        selector: Selector,
    },
    /// `stopCollectingMetrics`.
    StopCollecting,
    /// `allocResourceClaims`: allocate the claims of a namespace.
    AllocResourceClaims {
        /// Namespace (`None`: every namespace).
        namespace: Option<String>,
    },
    /// `createGpuJobs`.
    CreateGpuJobs(Box<crate::gpu::GpuJobsStep>),
    /// `startScheduler`: the scheduler starts here, not before the first
    /// step.
    StartScheduler,
}

impl Plan {
    /// Takes the outcomes of every `createGpuJobs` step.
    pub fn take_gpu_outcomes(&self) -> Vec<crate::gpu::Outcome> {
        self.steps
            .iter()
            .filter_map(|s| match s {
                Step::CreateGpuJobs(s) => Some(s.sink.take()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// Whether a `startScheduler` step starts the scheduler (otherwise it
    /// starts before the first step).
    pub fn starts_scheduler_late(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::StartScheduler))
    }
}

/// A workload ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// `<test case>/<workload>`.
    pub name: String,
    /// The scheduler configuration file, if the test case names one.
    pub scheduler_config: Option<PathBuf>,
    /// Feature gates of test case and workload (not applicable to Convoy).
    pub feature_gates: BTreeMap<String, bool>,
    /// The steps (`createPodSets` unrolled, as upstream does).
    pub steps: Vec<Step>,
    /// For each step, the index of its op in `workloadTemplate` (they
    /// differ after a `createPodSets`).
    pub origins: Vec<usize>,
}

/// Resolves `workload` of `tc`: parameters, default namespaces, template
/// files. Errors name the op.
pub fn plan(config: &Config, tc: &TestCase, workload: &Workload) -> Result<Plan, String> {
    let name = format!("{}/{}", tc.name, workload.name);
    let mut params = Params::new(workload.params.clone());
    let mut texts: HashMap<PathBuf, Arc<str>> = HashMap::new();
    let mut template = |path: Option<&str>| -> Result<TemplateSource, String> {
        let Some(p) = path else { return Ok(TemplateSource::Builtin) };
        let path = config.resolve(p);
        if let Some(text) = texts.get(&path) {
            return Ok(TemplateSource::File { path, text: text.clone() });
        }
        let text: Arc<str> = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading template {}: {e}", path.display()))?
            .into();
        texts.insert(path.clone(), text.clone());
        Ok(TemplateSource::File { path, text })
    };
    let mut steps = Vec::with_capacity(tc.workload_template.len());
    let mut origins = Vec::with_capacity(tc.workload_template.len());
    for (t, op) in tc.workload_template.iter().enumerate() {
        // Upstream numbers ops after unrolling `createPodSets`: default
        // namespaces and node names use that index.
        let i = steps.len();
        let at = |e: String| format!("{name}: workloadTemplate[{t}] ({}): {e}", op.opcode());
        let count = |params: &mut Params, c: Option<i64>, p: &Option<String>| {
            params.count_or("count", c, p)
        };
        let template_params =
            |params: &mut Params, tp: &Option<BTreeMap<String, serde_json::Value>>| {
                let mut env = Env::new();
                for (k, v) in tp.iter().flatten() {
                    env.insert(k.clone(), params.template_value(v)?);
                }
                Ok::<_, String>(env)
            };
        let step = match op {
            Op::CreateNodes(o) => Step::CreateNodes(NodesStep {
                op_index: i,
                count: count(&mut params, o.count, &o.count_param).map_err(at)?,
                template: template(o.node_template_path.as_deref()).map_err(at)?,
                params: template_params(&mut params, &o.template_params).map_err(at)?,
                strategy: if let Some(s) = &o.node_allocatable_strategy {
                    Some(NodeStrategy::Allocatable(s.node_allocatable.clone()))
                } else if let Some(s) = &o.label_node_prepare_strategy {
                    Some(NodeStrategy::Label {
                        key: s.label_key.clone(),
                        values: s.label_values.clone(),
                    })
                } else {
                    o.unique_node_label_strategy
                        .as_ref()
                        .map(|s| NodeStrategy::UniqueLabel { key: s.label_key.clone() })
                },
                csi_node: o.node_allocatable_strategy.as_ref().map(|s| CsiNodeTemplate {
                    drivers: s
                        .csi_node_allocatable
                        .iter()
                        .map(|(d, r)| (d.clone(), r.count))
                        .collect(),
                    migrated_plugins: s.migrated_plugins.clone(),
                }),
            }),
            Op::CreateNamespaces(o) => {
                let n = count(&mut params, o.count, &o.count_param).map_err(at)?;
                let template = match o.namespace_template_path.as_deref() {
                    None => Box::default(),
                    Some(p) => {
                        Box::new(namespace_template(&template(Some(p)).map_err(at)?).map_err(at)?)
                    }
                };
                Step::CreateNamespaces(NamespacesStep {
                    names: (0..n).map(|j| format!("{}-{j}", o.prefix)).collect(),
                    template,
                })
            }
            Op::CreatePods(o) => {
                let ns = o.namespace.clone().unwrap_or_else(|| format!("namespace-{i}"));
                let default = tc.default_pod_template_path.as_deref();
                Step::CreatePods(
                    pods_step(&mut params, &mut template, o, i, ns, default).map_err(at)?,
                )
            }
            Op::CreatePodSets(o) => {
                let n = count(&mut params, o.count, &o.count_param).map_err(at)?;
                let default = tc.default_pod_template_path.as_deref();
                if n == 0 {
                    // Still resolve the nested op's params, so that they count as used.
                    pods_step(
                        &mut params,
                        &mut template,
                        &o.create_pods_op.0,
                        i,
                        String::new(),
                        default,
                    )
                    .map_err(at)?;
                }
                for j in 0..n {
                    let ns = format!("{}-{j}", o.namespace_prefix);
                    let op_index = steps.len();
                    let s = pods_step(
                        &mut params,
                        &mut template,
                        &o.create_pods_op.0,
                        op_index,
                        ns,
                        default,
                    )
                    .map_err(at)?;
                    steps.push(Step::CreatePods(s));
                    origins.push(t);
                }
                continue;
            }
            Op::CreateAny(o) => Step::CreateAny(AnyStep {
                op_index: i,
                count: match (o.count, &o.count_param) {
                    (None, None) => 1,
                    (c, p) => count(&mut params, c, p).map_err(at)?,
                },
                namespace: Some(o.namespace.clone()).filter(|n| !n.is_empty()),
                template: template(Some(&o.template_path)).map_err(at)?,
                params: template_params(&mut params, &o.template_params).map_err(at)?,
            }),
            Op::UpdateAny(o) => Step::UpdateAny(UpdateStep {
                any: AnyStep {
                    op_index: i,
                    count: match &o.count_param {
                        Some(p) => params.count(p).map_err(at)?,
                        None => o.count.unwrap_or(1).max(0) as usize,
                    },
                    namespace: Some(o.namespace.clone()).filter(|n| !n.is_empty()),
                    template: template(Some(&o.template_path)).map_err(at)?,
                    params: Env::new(),
                },
                per_second: u32::try_from(o.update_per_second).unwrap_or(u32::MAX),
                subresources: o.subresources.clone(),
            }),
            Op::CreatePodGroups(o) => Step::CreatePodGroups(AnyStep {
                op_index: i,
                count: count(&mut params, o.count, &o.count_param).map_err(at)?,
                namespace: Some(o.namespace.clone().unwrap_or_else(|| format!("namespace-{i}"))),
                template: template(Some(&o.template_path)).map_err(at)?,
                params: template_params(&mut params, &o.template_params).map_err(at)?,
            }),
            Op::Churn(o) => Step::Churn(ChurnStep {
                op_index: i,
                mode: match o.mode.as_str() {
                    "recreate" => ChurnMode::Recreate { number: o.number.max(1) as usize },
                    _ => ChurnMode::Create { limit: (o.number > 0).then_some(o.number as usize) },
                },
                interval: Duration::from_millis(if o.interval_milliseconds == 0 {
                    500
                } else {
                    o.interval_milliseconds as u64
                }),
                namespace: o.namespace.clone().unwrap_or_else(|| format!("namespace-{i}")),
                templates: o
                    .template_paths
                    .iter()
                    .map(|p| template(Some(p)))
                    .collect::<Result<_, _>>()
                    .map_err(at)?,
            }),
            Op::Barrier(o) => Step::Barrier {
                namespaces: o.namespaces.clone(),
                selector: o.label_selector.as_ref().map(Selector::from_map).unwrap_or_default(),
                stage: Stage::parse(o.stage_requirement.as_deref()).map_err(at)?,
            },
            Op::Sleep(o) => Step::Sleep(match (&o.duration, &o.duration_param) {
                (Some(d), _) => parse_duration(d).map_err(at)?,
                (None, Some(p)) => params.duration(p).map_err(at)?,
                (None, None) => return Err(at("duration or durationParam is required".into())),
            }),
            Op::DeletePods(o) => Step::DeletePods {
                namespace: o.namespace.clone(),
                selector: o.label_selector.as_ref().map(Selector::from_map).unwrap_or_default(),
                skip_wait: o.skip_wait_to_completion,
                per_second: o.delete_pods_per_second,
            },
            Op::StartCollectingMetrics(o) => Step::StartCollecting {
                name: o.name.clone(),
                namespaces: o.namespaces.clone(),
                selector: o.label_selector.as_ref().map(Selector::from_map).unwrap_or_default(),
            },
            Op::StopCollectingMetrics(_) => Step::StopCollecting,
            Op::AllocResourceClaims(o) => Step::AllocResourceClaims {
                namespace: Some(o.namespace.clone()).filter(|n| !n.is_empty()),
            },
            Op::StartScheduler(_) => Step::StartScheduler,
            Op::CreateGpuJobs(o) => Step::CreateGpuJobs(Box::new(
                crate::gpu::plan_step(o, i, &mut params, &mut template).map_err(at)?,
            )),
        };
        steps.push(step);
        origins.push(t);
    }
    let unused = params.unused();
    if !unused.is_empty() {
        return Err(format!("{name}: parameters defined but unused: {}", unused.join(", ")));
    }
    let mut feature_gates = tc.feature_gates.clone();
    feature_gates.extend(workload.feature_gates.clone());
    Ok(Plan {
        name,
        scheduler_config: tc.scheduler_config_path.as_deref().map(|p| config.resolve(p)),
        feature_gates,
        steps,
        origins,
    })
}

/// A `namespaceTemplatePath` file: plain YAML decoded into a Namespace
/// (upstream's `getSpecFromFile`, no Go template).
fn namespace_template(t: &TemplateSource) -> Result<Namespace, String> {
    let TemplateSource::File { path, text } = t else {
        return Ok(Namespace::default());
    };
    let at = |e: String| format!("namespace template {}: {e}", path.display());
    let v: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| at(e.to_string()))?;
    if let Some(kind) = v.get("kind").and_then(serde_json::Value::as_str)
        && kind != "Namespace"
    {
        return Err(at(format!("kind {kind}, expected Namespace")));
    }
    crate::any::typed(v).map_err(at)
}

/// Resolves a `createPods` op (also one pod set of `createPodSets`).
fn pods_step(
    params: &mut Params,
    template: &mut impl FnMut(Option<&str>) -> Result<TemplateSource, String>,
    o: &CreatePodsOp,
    op_index: usize,
    namespace: String,
    default_template: Option<&str>,
) -> Result<PodsStep, String> {
    let mut n = params.count_or("count", o.count, &o.count_param)?;
    if let Some(m) = &o.count_multiplier_param {
        n *= params.count(m)?;
    }
    let steady_state = match &o.steady_state_param {
        Some(p) => params.bool(p)?,
        None => o.steady_state,
    };
    let duration = match (&o.duration, &o.duration_param) {
        (Some(d), _) => Some(parse_duration(d)?),
        (None, Some(p)) => Some(params.duration(p)?),
        (None, None) => None,
    };
    let steady = match (steady_state, duration) {
        (false, _) => None,
        (true, Some(d)) if !d.is_zero() => Some(d),
        (true, _) => return Err("steadyState requires a positive duration".into()),
    };
    let mut env = Env::new();
    for (k, v) in o.template_params.iter().flatten() {
        env.insert(k.clone(), params.template_value(v)?);
    }
    let batch = match &o.signature_batch_size_param {
        Some(p) => params.count(p)?,
        None => o.signature_batch_size.unwrap_or(0).max(0) as usize,
    };
    let pod_template = template(o.pod_template_path.as_deref().or(default_template))?;
    Ok(PodsStep {
        op_index,
        count: n,
        namespace,
        signature_batch: matches!(pod_template, TemplateSource::File { .. })
            .then_some(batch.max(1)),
        template: pod_template,
        params: env,
        collect_metrics: o.collect_metrics,
        skip_wait: o.skip_wait_to_completion,
        steady,
        volumes: match (
            &o.persistent_volume_template_path,
            &o.persistent_volume_claim_template_path,
        ) {
            (Some(v), Some(c)) => {
                Some(VolumeTemplates { volume: template(Some(v))?, claim: template(Some(c))? })
            }
            _ => None,
        },
    })
}
