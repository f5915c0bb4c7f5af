//! `createGpuJobs` as written (convoy-bench's own op; the benchmark
//! itself is the `gpu` module): its fields, the GPU mix and gangs, and the
//! mix CSV file.

use serde::Deserialize;

use super::params::{check_count, parse_duration};

/// The default DRA driver (and DeviceClass) of `gpusAs: draDevices`.
pub const DEFAULT_DRA_DRIVER: &str = "gpu.example.com";
/// The default node label giving a node's GPU count with
/// `gpusAs: draDevices` (as NVIDIA's GPU feature discovery labels nodes).
pub const DEFAULT_GPU_COUNT_LABEL: &str = "nvidia.com/gpu.count";

/// How the cluster offers GPUs and how pods ask for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GpusAs {
    /// The extended resource (`resourceName`, default `nvidia.com/gpu`):
    /// nodes' allocatable, pods' `resources.requests` (from the templates).
    #[default]
    ExtendedResource,
    /// Dynamic Resource Allocation: one node-local ResourceSlice per node
    /// (driver `draDriver`, pool = the node's name) with as many devices as
    /// the node's `gpuCountLabel` says, one DeviceClass named after the
    /// driver, one ResourceClaimTemplate per GPU count (`gpu-<n>`, one
    /// request `gpus`: `exactly`, `ExactCount`, `count: n`), and each GPU
    /// pod's claim made from it (`spec.resourceClaims` and the first
    /// container's `resources.claims`, added by the op). The pod template
    /// must not request `resourceName`.
    DraDevices,
}

/// The opcode.
pub const OPCODE: &str = "createGpuJobs";

/// One request of the mix and its relative weight.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MixEntry {
    /// GPUs per pod (0: a CPU-only pod; at least one entry asks for GPUs).
    pub gpus: u32,
    /// CPU per pod in millicores, given to the template as `.CpuMilli`
    /// (optional: without it the template decides).
    #[serde(default, rename = "cpuMilli")]
    pub cpu_milli: Option<i64>,
    /// Memory per pod in MiB, given to the template as `.MemoryMiB`.
    #[serde(default, rename = "memoryMiB")]
    pub memory_mib: Option<i64>,
    /// Relative weight (> 0).
    pub weight: f64,
}

impl MixEntry {
    /// A GPU-only entry.
    pub fn gpus(gpus: u32, weight: f64) -> Self {
        Self { gpus, cpu_milli: None, memory_mib: None, weight }
    }
}

/// Which jobs are gangs and their shape.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GangSpec {
    /// Share of jobs that are gangs (0..=1).
    pub fraction: f64,
    /// Member counts, drawn uniformly (each >= 2).
    pub members: Vec<u32>,
    /// GPUs per member, drawn uniformly (each > 0).
    pub gpus_per_member: Vec<u32>,
    /// CPU per member in millicores (`.CpuMilli`), optional.
    #[serde(default, rename = "cpuMilli")]
    pub cpu_milli: Option<i64>,
    /// Memory per member in MiB (`.MemoryMiB`), optional.
    #[serde(default, rename = "memoryMiB")]
    pub memory_mib: Option<i64>,
}

/// `createGpuJobs`: a stream of `jobs` GPU jobs, `jobsPerWave` at a time.
/// After each wave is created, the op waits until the scheduler has placed
/// every pod that can be placed, samples the cluster, deletes the jobs
/// that could not be placed (refused: the stream is a loss system, so no
/// backlog carries over), and deletes the jobs whose lifetime (in waves)
/// is over.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateGpuJobsOp {
    /// Jobs in the stream.
    pub jobs: Option<i64>,
    /// `$param` giving the number of jobs.
    pub jobs_param: Option<String>,
    /// Jobs per wave.
    pub jobs_per_wave: Option<i64>,
    /// `$param` giving the jobs per wave.
    pub jobs_per_wave_param: Option<String>,
    /// Seed of the stream.
    #[serde(default)]
    pub seed: u64,
    /// Requests of single-pod jobs (this or `gpuMixPath` is required).
    #[serde(default)]
    pub gpu_mix: Vec<MixEntry>,
    /// A CSV file of the mix, relative to the config file: a header
    /// `gpus,cpu_milli,memory_mib,weight`, then one request per line
    /// (`#` starts a comment line). See [`parse_mix_csv`].
    pub gpu_mix_path: Option<String>,
    /// Gangs, if any.
    pub gangs: Option<GangSpec>,
    /// Mean lifetime in waves (exponential, >= 1).
    #[serde(default)]
    pub mean_lifetime_waves: f64,
    /// Namespace (default `namespace-<opIndex>`).
    pub namespace: Option<String>,
    /// Pod template (required), rendered with `.Index` (job), `.Gpus`,
    /// `.Member`, and `.CpuMilli` / `.MemoryMiB` where the mix gives them.
    #[serde(default)]
    pub pod_template_path: String,
    /// PodGroup template (required with `gangs`), rendered with `.Index`
    /// and `.Members`.
    pub pod_group_template_path: Option<String>,
    /// Node label of topology domains (default `topology.kubernetes.io/rack`).
    pub topology_key: Option<String>,
    /// The GPU resource (default `nvidia.com/gpu`).
    pub resource_name: Option<String>,
    /// How GPUs are offered and asked for (default `extendedResource`).
    #[serde(default)]
    pub gpus_as: GpusAs,
    /// The DRA driver and DeviceClass (`gpusAs: draDevices`; default
    /// `gpu.example.com`).
    pub dra_driver: Option<String>,
    /// The node label giving a node's GPU count (`gpusAs: draDevices`;
    /// default `nvidia.com/gpu.count`); nodes without it get no slice.
    pub gpu_count_label: Option<String>,
    /// Measure throughput over the op and report the GPU metrics.
    #[serde(default)]
    pub collect_metrics: bool,
    /// How long a wave may make no progress while pods that fit are still
    /// pending before they are refused anyway (default `10s`). With
    /// `backlog`, how long a job that fits may stay pending once arrivals
    /// have stopped before it counts as deadlocked.
    pub stall_timeout: Option<String>,
    /// A queueing stream instead of a loss system: jobs that do not fit
    /// wait (nothing is refused), waves arrive every `waveInterval` of
    /// wall time whatever the scheduler does, a job's lifetime counts from
    /// the wave in which its last pod was bound, and after the last wave
    /// the stream drains (no arrivals) until every job was placed or is
    /// deadlocked. Reports the gang contention metrics (see
    /// `gpu::backlog`).
    #[serde(default)]
    pub backlog: bool,
    /// Wall time between waves (required with `backlog`, e.g. `500ms`).
    pub wave_interval: Option<String>,
    /// With `backlog`: each pod declares its job's lifetime as
    /// `spec.activeDeadlineSeconds` (the lifetime in waves times
    /// `waveInterval`, rounded up, plus one second), and the op writes the
    /// pods' `status.startTime` when it sees the job bound, as a kubelet
    /// would when it starts them. The job still ends when its lifetime is
    /// over (before that deadline): the deadline is what a scheduler may
    /// know of it in advance.
    #[serde(default)]
    pub declare_lifetimes: bool,
}

impl CreateGpuJobsOp {
    /// Strict checks; errors name the field.
    pub fn validate(&self) -> Result<(), String> {
        let op = OPCODE;
        check_count(op, "jobs", self.jobs, &self.jobs_param, 1)?;
        check_count(op, "jobsPerWave", self.jobs_per_wave, &self.jobs_per_wave_param, 1)?;
        match (self.gpu_mix.is_empty(), &self.gpu_mix_path) {
            (true, None) => return Err(format!("{op}: gpuMix or gpuMixPath is required")),
            (false, Some(_)) => {
                return Err(format!("{op}: give gpuMix or gpuMixPath, not both"));
            }
            (true, Some(p)) if p.is_empty() => {
                return Err(format!("{op}.gpuMixPath must not be empty"));
            }
            (true, Some(_)) => {} // read and checked when the plan is made
            (false, None) => check_mix(&self.gpu_mix, &format!("{op}.gpuMix"))?,
        }
        if let Some(g) = &self.gangs {
            if !(0.0..=1.0).contains(&g.fraction) {
                return Err(format!("{op}.gangs.fraction must be in 0..=1, got {}", g.fraction));
            }
            if g.members.is_empty() || g.members.iter().any(|&m| m < 2) {
                return Err(format!("{op}.gangs.members must be non-empty, each >= 2"));
            }
            if g.gpus_per_member.is_empty() || g.gpus_per_member.contains(&0) {
                return Err(format!("{op}.gangs.gpusPerMember must be non-empty, each > 0"));
            }
            for (field, v) in [("cpuMilli", g.cpu_milli), ("memoryMiB", g.memory_mib)] {
                if v.is_some_and(|v| v <= 0) {
                    return Err(format!("{op}.gangs.{field} must be > 0"));
                }
            }
            if self.pod_group_template_path.is_none() {
                return Err(format!("{op}.podGroupTemplatePath is required with gangs"));
            }
        }
        if self.mean_lifetime_waves.is_nan() || self.mean_lifetime_waves < 1.0 {
            return Err(format!(
                "{op}.meanLifetimeWaves must be >= 1, got {}",
                self.mean_lifetime_waves
            ));
        }
        if self.pod_template_path.is_empty() {
            return Err(format!("{op}.podTemplatePath is required"));
        }
        if let Some(d) = &self.stall_timeout {
            parse_duration(d).map_err(|e| format!("{op}.stallTimeout: {e}"))?;
        }
        match (self.backlog, &self.wave_interval) {
            (true, None) => return Err(format!("{op}.waveInterval is required with backlog")),
            (false, Some(_)) => return Err(format!("{op}.waveInterval needs backlog: true")),
            (true, Some(d)) => match parse_duration(d) {
                Ok(d) if !d.is_zero() => {}
                Ok(_) => return Err(format!("{op}.waveInterval must be positive")),
                Err(e) => return Err(format!("{op}.waveInterval: {e}")),
            },
            (false, None) => {}
        }
        if self.declare_lifetimes && !self.backlog {
            return Err(format!("{op}.declareLifetimes needs backlog: true"));
        }
        if self.backlog && self.gpus_as == GpusAs::DraDevices {
            return Err(format!("{op}.backlog: not with gpusAs: draDevices"));
        }
        if self.gpus_as == GpusAs::ExtendedResource {
            for (field, v) in
                [("draDriver", &self.dra_driver), ("gpuCountLabel", &self.gpu_count_label)]
            {
                if v.is_some() {
                    return Err(format!("{op}.{field} needs gpusAs: draDevices"));
                }
            }
        }
        if self.dra_driver.as_deref().is_some_and(str::is_empty) {
            return Err(format!("{op}.draDriver must not be empty"));
        }
        if self.gpu_count_label.as_deref().is_some_and(str::is_empty) {
            return Err(format!("{op}.gpuCountLabel must not be empty"));
        }
        Ok(())
    }
}

/// Checks a mix; errors name the entry (`<at>[3].weight`).
fn check_mix(mix: &[MixEntry], at: &str) -> Result<(), String> {
    for (i, m) in mix.iter().enumerate() {
        if m.weight.is_nan() || m.weight <= 0.0 {
            return Err(format!("{at}[{i}].weight must be > 0, got {}", m.weight));
        }
        for (field, v) in [("cpuMilli", m.cpu_milli), ("memoryMiB", m.memory_mib)] {
            if v.is_some_and(|v| v < 0) {
                return Err(format!("{at}[{i}].{field} must not be negative"));
            }
        }
    }
    if !mix.iter().any(|m| m.gpus > 0) {
        return Err(format!("{at}: no entry asks for GPUs"));
    }
    Ok(())
}

/// Parses a mix CSV: a header naming the columns `gpus`, `cpu_milli`,
/// `memory_mib` (both optional) and `weight` in any order, then one entry
/// per line; blank lines and lines starting with `#` are skipped. Errors
/// name the line (`mix.csv:12: weight: ...`).
pub fn parse_mix_csv(text: &str, name: &str) -> Result<Vec<MixEntry>, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let (hl, header) = lines.next().ok_or_else(|| format!("{name}: no header line"))?;
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    let col = |c: &str| columns.iter().position(|h| *h == c);
    for c in &columns {
        if !["gpus", "cpu_milli", "memory_mib", "weight"].contains(c) {
            return Err(format!(
                "{name}:{hl}: unknown column {c:?}; known: gpus, cpu_milli, memory_mib, weight"
            ));
        }
    }
    let (Some(gi), Some(wi)) = (col("gpus"), col("weight")) else {
        return Err(format!("{name}:{hl}: the header must name gpus and weight"));
    };
    let (ci, mi) = (col("cpu_milli"), col("memory_mib"));
    let mut out = Vec::new();
    for (n, line) in lines {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != columns.len() {
            return Err(format!(
                "{name}:{n}: {} cells, the header has {}",
                cells.len(),
                columns.len()
            ));
        }
        let int = |i: usize| {
            cells[i].parse::<i64>().map_err(|e| format!("{name}:{n}: {}: {e}", columns[i]))
        };
        let gpus = int(gi)?;
        let gpus =
            u32::try_from(gpus).map_err(|_| format!("{name}:{n}: gpus: {gpus} is out of range"))?;
        let weight: f64 = cells[wi].parse().map_err(|e| format!("{name}:{n}: weight: {e}"))?;
        out.push(MixEntry {
            gpus,
            cpu_milli: ci.map(int).transpose()?,
            memory_mib: mi.map(int).transpose()?,
            weight,
        });
    }
    if out.is_empty() {
        return Err(format!("{name}: no entries"));
    }
    check_mix(&out, name)?;
    Ok(out)
}
