//! GPU fragmentation benchmark (issue 7): the `createGpuJobs` op, a
//! seeded stream of GPU jobs and gangs with lifetimes, run in waves on
//! either target, and the fragmentation metrics it reports as DataItems
//! next to throughput.
//!
//! - [`metrics`]: the cluster's GPU state and the metrics, on plain data;
//! - [`stream`]: the seeded job stream;
//! - `driver`: the waves (create, let the scheduler settle, sample,
//!   refuse what could not be placed, end finished jobs), over a small
//!   target trait implemented for the embedded cluster and an API server;
//! - [`dra`]: the DeviceClass, ResourceSlices, ResourceClaimTemplates and
//!   pod claims of `gpusAs: draDevices` (GPUs as DRA devices);
//! - [`backlog`]: the queueing stream of `backlog: true` (jobs wait
//!   instead of being refused) and its gang contention metrics.
//!
//! The metrics are computed from the cluster's nodes and pods (and with
//! DRA devices its ResourceSlices and ResourceClaims), never from the
//! scheduler, so every scheduler is measured the same way.

pub mod backlog;
pub mod dra;
mod driver;
pub mod metrics;
pub mod stream;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::config::{Params, parse_duration};
use crate::dataitems::DataItem;
use crate::template::TemplateSource;

pub use crate::config::gpu::{
    CreateGpuJobsOp, DEFAULT_DRA_DRIVER, DEFAULT_GPU_COUNT_LABEL, GangSpec, GpusAs, MixEntry,
    OPCODE, parse_mix_csv,
};
pub(crate) use driver::{DraObject, SYNC_TIMEOUT, Target, run_jobs};
pub use metrics::{GangSpan, GpuView, NodeGpus, Summary, WaveSample};

/// Where a run's outcome goes: shared by the clones of a plan, taken by
/// whoever reports the run. Always compares equal (it is not part of what
/// the step does).
#[derive(Debug, Clone, Default)]
pub struct Sink(Arc<Mutex<Vec<Outcome>>>);

impl PartialEq for Sink {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Sink {
    /// Takes the outcomes recorded so far.
    pub fn take(&self) -> Vec<Outcome> {
        std::mem::take(&mut self.0.lock())
    }

    pub(crate) fn push(&self, o: Outcome) {
        self.0.lock().push(o);
    }
}

/// What one `createGpuJobs` measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Outcome {
    /// The namespace (the window's name).
    pub namespace: String,
    /// One sample per wave.
    pub samples: Vec<WaveSample>,
    /// The gangs placed whole.
    pub gangs: Vec<GangSpan>,
    /// Waves where pods that fit stayed pending until `stallTimeout`.
    pub stalled_waves: usize,
    /// Jobs placed.
    pub accepted_jobs: usize,
    /// Gangs refused with some members bound (their GPUs were held in
    /// vain).
    pub partial_gangs: usize,
    /// The GPU-weighted median request used for stranding.
    pub median: stream::PodShape,
    /// The summary of `samples` and `gangs`.
    pub summary: Summary,
    /// Gang contention metrics (`backlog: true` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contention: Option<backlog::Contention>,
}

impl Outcome {
    /// Nothing measured yet in `namespace`, stranding measured against
    /// `median`.
    pub(crate) fn empty(namespace: &str, median: stream::PodShape) -> Self {
        Self {
            namespace: namespace.to_string(),
            samples: Vec::new(),
            gangs: Vec::new(),
            stalled_waves: 0,
            accepted_jobs: 0,
            partial_gangs: 0,
            median,
            summary: Summary::default(),
            contention: None,
        }
    }
}

/// A resolved `createGpuJobs`.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuJobsStep {
    /// Index of the op in the (unrolled) workload.
    pub op_index: usize,
    /// Jobs.
    pub jobs: usize,
    /// Jobs per wave.
    pub per_wave: usize,
    /// Seed.
    pub seed: u64,
    /// The mix.
    pub mix: Vec<MixEntry>,
    /// Gangs.
    pub gangs: Option<GangSpec>,
    /// Mean lifetime, waves.
    pub mean_lifetime: f64,
    /// Namespace.
    pub namespace: String,
    /// Pod template.
    pub pod_template: TemplateSource,
    /// PodGroup template.
    pub group_template: Option<TemplateSource>,
    /// Topology label key.
    pub topology_key: String,
    /// GPU resource name.
    pub resource: String,
    /// How GPUs are offered and asked for.
    pub gpus_as: GpusAs,
    /// The DRA driver and DeviceClass name.
    pub dra_driver: String,
    /// The node label giving a node's GPU count (DRA).
    pub gpu_count_label: String,
    /// Measure.
    pub collect_metrics: bool,
    /// Stall timeout.
    pub stall_timeout: Duration,
    /// `backlog: true`: the wall time between waves.
    pub backlog: Option<Duration>,
    /// `declareLifetimes`: pods declare their lifetime as
    /// `activeDeadlineSeconds` and are marked started when bound.
    pub declare_lifetimes: bool,
    /// Where the outcome goes.
    pub sink: Sink,
}

/// Resolves the op (`$params`, template files, defaults).
pub fn plan_step(
    o: &CreateGpuJobsOp,
    op_index: usize,
    params: &mut Params,
    template: &mut impl FnMut(Option<&str>) -> Result<TemplateSource, String>,
) -> Result<GpuJobsStep, String> {
    Ok(GpuJobsStep {
        op_index,
        jobs: params.count_or("jobs", o.jobs, &o.jobs_param)?,
        per_wave: params.count_or("jobsPerWave", o.jobs_per_wave, &o.jobs_per_wave_param)?.max(1),
        seed: o.seed,
        mix: match &o.gpu_mix_path {
            Some(p) => match template(Some(p))? {
                TemplateSource::File { path, text } => {
                    parse_mix_csv(&text, &path.display().to_string())?
                }
                _ => return Err(format!("gpuMixPath {p:?}: not a file")),
            },
            None => o.gpu_mix.clone(),
        },
        gangs: o.gangs.clone(),
        mean_lifetime: o.mean_lifetime_waves,
        namespace: o.namespace.clone().unwrap_or_else(|| format!("namespace-{op_index}")),
        pod_template: template(Some(&o.pod_template_path))?,
        group_template: match &o.pod_group_template_path {
            Some(p) => Some(template(Some(p))?),
            None => None,
        },
        topology_key: o
            .topology_key
            .clone()
            .unwrap_or_else(|| "topology.kubernetes.io/rack".into()),
        resource: o.resource_name.clone().unwrap_or_else(|| "nvidia.com/gpu".into()),
        gpus_as: o.gpus_as,
        dra_driver: o.dra_driver.clone().unwrap_or_else(|| DEFAULT_DRA_DRIVER.into()),
        gpu_count_label: o
            .gpu_count_label
            .clone()
            .unwrap_or_else(|| DEFAULT_GPU_COUNT_LABEL.into()),
        collect_metrics: o.collect_metrics,
        stall_timeout: match &o.stall_timeout {
            Some(d) => parse_duration(d)?,
            None => Duration::from_secs(10),
        },
        backlog: match (&o.wave_interval, o.backlog) {
            (Some(d), true) => Some(parse_duration(d)?),
            _ => None,
        },
        declare_lifetimes: o.declare_lifetimes,
        sink: Sink::default(),
    })
}

/// The GPU DataItems of an outcome (`Name` = `<workload>/<namespace>`).
pub fn outcome_items(workload: &str, o: &Outcome) -> Vec<DataItem> {
    let s = &o.summary;
    let item = |metric: &str, unit: &str, data: Vec<(&str, f64)>| DataItem {
        data: data.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        unit: unit.into(),
        labels: [
            ("Metric".to_string(), metric.to_string()),
            ("Name".to_string(), format!("{workload}/{}", o.namespace)),
        ]
        .into(),
    };
    let pct = |v: i64| 100.0 * v as f64 / s.total_gpus.max(1) as f64;
    let mut items = vec![
        item(
            "GpuFirstFullNodeFailure",
            "GPUs",
            match s.first_full_node_failure {
                Some((gpus, wave)) => {
                    vec![("Allocated", gpus as f64), ("Percent", pct(gpus)), ("Wave", wave as f64)]
                }
                None => vec![("Never", 1.0), ("Percent", 100.0)],
            },
        ),
        item(
            "GpuStrandedAtSaturation",
            "GPUs",
            vec![
                ("Average", s.stranded_avg.unwrap_or(0.0)),
                ("Max", s.stranded_max.unwrap_or(0) as f64),
                ("SaturatedWaves", s.saturated_waves as f64),
                ("MedianRequest", f64::from(o.median.gpus)),
            ]
            .into_iter()
            .chain(o.median.cpu_milli.map(|c| ("MedianRequestCpuMilli", c as f64)))
            .chain(o.median.memory_mib.map(|m| ("MedianRequestMemoryMiB", m as f64)))
            .collect(),
        ),
        item(
            "GpuAllocatedAtSaturation",
            "%",
            vec![("Average", s.allocated_pct_at_saturation.unwrap_or(0.0))],
        ),
        item(
            "GpuUnallocatedAtSaturation",
            "GPUs",
            vec![("Average", s.unallocated_at_saturation.unwrap_or(0.0))],
        ),
        item(
            "GpuFullyFreeNodes",
            "nodes",
            vec![("Min", s.free_nodes_min as f64), ("Average", s.free_nodes_avg)],
        ),
        item(
            "GpuJobs",
            "jobs",
            vec![
                ("Accepted", o.accepted_jobs as f64),
                ("Rejected", s.rejected_jobs as f64),
                ("PartialGangs", o.partial_gangs as f64),
                ("StalledWaves", o.stalled_waves as f64),
            ],
        ),
    ];
    if let (Some(n), Some(d)) = (s.gang_nodes, s.gang_domains) {
        items.push(item(
            "GpuGangSpread",
            "nodes",
            vec![
                ("NodesAverage", n.0),
                ("NodesMax", n.1 as f64),
                ("DomainsAverage", d.0),
                ("DomainsMax", d.1 as f64),
                ("Placed", s.gangs_placed as f64),
            ],
        ));
    }
    if let Some(c) = &o.contention {
        items.extend(backlog::items(&item, c));
    }
    items
}

/// The DataItems of `outcomes` of the workload `name`, with `labels`
/// added (e.g. the scheduler).
pub fn outcomes_items(
    name: &str,
    outcomes: &[Outcome],
    labels: &BTreeMap<String, String>,
) -> Vec<DataItem> {
    let mut items = Vec::new();
    for o in outcomes {
        for mut i in outcome_items(name, o) {
            i.labels.extend(labels.clone());
            items.push(i);
        }
    }
    items
}

#[cfg(test)]
mod tests;
