//! The waves of `createGpuJobs`, over a [`Target`]: the embedded cluster
//! or an API server (nodes and pods read from reflector stores, i.e. a
//! list and a watch).
//!
//! Each wave: end the jobs whose lifetime is over, create the wave's jobs
//! (a PodGroup first for a gang), wait until the scheduler has settled,
//! sample the cluster, and delete the jobs that were not placed. "Settled"
//! is decided from the cluster alone: every pod of the wave is bound, or
//! every job with a pending pod no longer fits the free resources (within
//! a wave capacity only shrinks, so a job that does not fit now never
//! will); a wave where pods that fit stay pending for `stallTimeout` is
//! cut short and counted. With DRA devices a pending pod whose claims are
//! already allocated is being bound (PreBind wrote the allocation), so its
//! job is not judged by the fit check, and the cluster view must show the
//! claims in step with the pods (`claims_synced`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use serde_json::{Value, json};

use super::metrics::{
    GangSpan, GpuState, GpuView, Res, Summary, WaveSample, gpu_weighted_median, pod_requests,
};
use super::stream::{Job, PodShape, jobs};
use super::{GpuJobsStep, GpusAs, Outcome, dra};
use crate::template::Value as TValue;
use crate::template::{TemplateSource, env_for};

/// Requests in flight.
const CONCURRENCY: usize = 64;
/// Label naming a pod's job.
const JOB_LABEL: &str = "convoy-bench/gpu-job";
/// Label joining a pod to its PodGroup (scheduler-plugins API; pods of an
/// upstream `scheduling.k8s.io` PodGroup name it in
/// `spec.schedulingGroup.podGroupName` instead).
const GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// Longest wait for the target's view to show our own creates and deletes.
pub(crate) const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// What the op needs from a target.
pub(crate) trait Target: Send + Sync {
    /// Creates a pod.
    fn create_pod(&self, pod: Pod) -> BoxFuture<'_, Result<(), String>>;
    /// Creates a PodGroup (JSON).
    fn create_group(&self, group: Value) -> BoxFuture<'_, Result<(), String>>;
    /// Deletes a pod (gone already is fine).
    fn delete_pod(&self, namespace: String, name: String) -> BoxFuture<'_, Result<(), String>>;
    /// Writes a pod's `status.startTime` (now), as a kubelet starting it
    /// would (`declareLifetimes`).
    fn mark_started(&self, namespace: String, name: String) -> BoxFuture<'_, Result<(), String>>;
    /// Deletes a PodGroup (gone already is fine).
    fn delete_group(&self, namespace: String, name: String) -> BoxFuture<'_, Result<(), String>>;
    /// Creates a DRA object (`gpusAs: draDevices`).
    fn create_dra(&self, obj: DraObject) -> BoxFuture<'_, Result<(), String>>;
    /// The nodes and pods as the target shows them now.
    fn objects(&self) -> (Vec<Arc<Node>>, Vec<Arc<Pod>>);
    /// The ResourceSlices and ResourceClaims as the target shows them now
    /// (empty unless the target was started for DRA).
    fn devices(&self) -> (Vec<Arc<ResourceSlice>>, Vec<Arc<ResourceClaim>>);
    /// How often to look.
    fn poll(&self) -> Duration;
}

/// A DRA object the op creates.
pub(crate) enum DraObject {
    /// The DeviceClass.
    Class(Box<DeviceClass>),
    /// A node's ResourceSlice.
    Slice(Box<ResourceSlice>),
    /// A ResourceClaimTemplate.
    Template(Box<ResourceClaimTemplate>),
}

/// A job that is running.
pub(super) struct Live {
    pub(super) end: usize,
    pub(super) pods: Vec<String>,
    pub(super) group: Option<String>,
}

pub(super) fn job_name(j: &Job) -> String {
    format!("gpu-job-{}", j.index)
}

/// Renders pod `member` of job `j`.
pub(super) fn render_pod(
    s: &GpuJobsStep,
    j: &Job,
    member: usize,
    scheduler: &str,
) -> Result<Pod, String> {
    let mut env = env_for(&Default::default(), j.index, s.jobs);
    env.insert("Gpus".into(), TValue::Int(i64::from(j.shape.gpus)));
    if let Some(c) = j.shape.cpu_milli {
        env.insert("CpuMilli".into(), TValue::Int(c));
    }
    if let Some(m) = j.shape.memory_mib {
        env.insert("MemoryMiB".into(), TValue::Int(m));
    }
    env.insert("Member".into(), TValue::Int(member as i64));
    let mut v = render(&s.pod_template, &env)?;
    let name = format!("{}-{member}", job_name(j));
    let meta = &mut v["metadata"];
    meta["name"] = json!(name);
    meta["namespace"] = json!(s.namespace);
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][JOB_LABEL] = json!(job_name(j));
    if j.gang {
        let group = render_group(s, j)?;
        let upstream =
            group["apiVersion"].as_str().is_some_and(|v| v.starts_with("scheduling.k8s.io/"));
        if upstream {
            v["spec"]["schedulingGroup"] = json!({"podGroupName": job_name(j)});
        } else {
            meta["labels"][GROUP_LABEL] = json!(job_name(j));
        }
    }
    if let (true, Some(interval)) = (s.declare_lifetimes, s.backlog) {
        v["spec"]["activeDeadlineSeconds"] = json!(declared_lifetime(j.lifetime, interval));
    }
    if v["spec"]["schedulerName"].as_str().is_none_or(str::is_empty) {
        v["spec"]["schedulerName"] = json!(scheduler);
    }
    if s.gpus_as == GpusAs::DraDevices {
        dra::add_claim(&mut v, j.shape.gpus, &s.resource)?;
    }
    crate::any::typed(v).map_err(|e| format!("pod template: {e}"))
}

/// `activeDeadlineSeconds` for a job living `waves` waves of `interval`
/// (`declareLifetimes`): its lifetime rounded up to whole seconds, plus one
/// second for the op's own delay in ending it.
pub(super) fn declared_lifetime(waves: usize, interval: Duration) -> i64 {
    (waves as f64 * interval.as_secs_f64()).ceil() as i64 + 1
}

pub(super) fn render_group(s: &GpuJobsStep, j: &Job) -> Result<Value, String> {
    let t = s.group_template.as_ref().ok_or("podGroupTemplatePath is required with gangs")?;
    let mut env = env_for(&Default::default(), j.index, s.jobs);
    env.insert("Members".into(), TValue::Int(j.pods as i64));
    let mut v = render(t, &env)?;
    v["metadata"]["name"] = json!(job_name(j));
    v["metadata"]["namespace"] = json!(s.namespace);
    Ok(v)
}

fn render(t: &TemplateSource, env: &crate::template::Env) -> Result<Value, String> {
    let TemplateSource::File { path, text } = t else {
        return Err("createGpuJobs needs template files".into());
    };
    let at = |e: String| format!("template {}: {e}", path.display());
    let text = crate::template::render(text, env).map_err(|e| at(e.to_string()))?;
    let v: Value = serde_saphyr::from_str(&text).map_err(|e| at(e.to_string()))?;
    if !v.is_object() {
        return Err(at("not a mapping".into()));
    }
    Ok(v)
}

pub(super) async fn all<F>(futs: impl IntoIterator<Item = F>) -> Result<(), String>
where
    F: std::future::Future<Output = Result<(), String>>,
{
    futures::stream::iter(futs)
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await
        .map(drop)
}

/// Runs the stream of `s` against `target`; the outcome goes to `s.sink`.
pub(crate) async fn run_jobs(
    s: &GpuJobsStep,
    target: &dyn Target,
    scheduler: &str,
) -> Result<(), String> {
    if let Some(interval) = s.backlog {
        return super::backlog::run(s, target, scheduler, interval).await;
    }
    let stream = jobs(s.seed, s.jobs, &s.mix, s.gangs.as_ref(), s.mean_lifetime);
    let median_shape = gpu_weighted_median(&s.mix);
    let probe = |shape: PodShape| -> Result<Res, String> {
        let j = Job { index: 0, shape, pods: 1, gang: false, lifetime: 1 };
        let mut r = pod_requests(&render_pod(s, &j, 0, scheduler)?, &s.resource);
        if s.gpus_as == GpusAs::DraDevices {
            // The claim's devices, counted as the extended resource would be.
            r.gpus = i64::from(shape.gpus);
        }
        Ok(r)
    };
    let median = probe(median_shape)?;
    let mut requests: HashMap<PodShape, Res> = HashMap::new();
    for j in &stream {
        if let std::collections::hash_map::Entry::Vacant(e) = requests.entry(j.shape) {
            e.insert(probe(j.shape)?);
        }
    }
    let (nodes, _) = target.objects();
    let full_node = match s.gpus_as {
        GpusAs::ExtendedResource => {
            let view = GpuView::extended(nodes.iter().map(|n| n.as_ref()), [], &s.resource);
            view.0.values().map(|g| g.total).max().unwrap_or(0)
        }
        GpusAs::DraDevices => i64::from(create_devices(s, target, &nodes, &stream).await?),
    };
    let offered = offered_gpus(&stream, s.per_wave);
    let mut live: Vec<Live> = Vec::new();
    let mut alive: HashSet<String> = HashSet::new();
    let mut out = Outcome::empty(&s.namespace, median_shape);
    for (wave, chunk) in stream.chunks(s.per_wave).enumerate() {
        // Jobs whose time is up finish.
        let (done, keep): (Vec<Live>, Vec<Live>) = live.into_iter().partition(|l| l.end <= wave);
        live = keep;
        end_jobs(s, target, &done, &mut alive).await?;
        // The wave arrives.
        let mut pods = Vec::new();
        for j in chunk {
            if j.gang {
                target.create_group(render_group(s, j)?).await?;
            }
            for m in 0..j.pods {
                pods.push(render_pod(s, j, m, scheduler)?);
            }
        }
        let names: Vec<Vec<String>> = chunk
            .iter()
            .map(|j| (0..j.pods).map(|m| format!("{}-{m}", job_name(j))).collect())
            .collect();
        alive.extend(names.iter().flatten().cloned());
        all(pods.into_iter().map(|p| target.create_pod(p))).await?;
        // The scheduler settles.
        let settled = settle(s, target, chunk, &names, &alive, &requests).await?;
        out.stalled_waves += usize::from(settled.stalled);
        let state = &settled.state;
        let mut sample = WaveSample {
            wave,
            allocated_gpus: state.allocated_gpus(),
            total_gpus: state.total_gpus(),
            fully_free_nodes: state.fully_free_nodes(),
            stranded_gpus: state.stranded_gpus(&median),
            offered_gpus: offered[wave],
            ..WaveSample::default()
        };
        let mut refused = Vec::new();
        for (j, pods) in chunk.iter().zip(names) {
            let placed: Vec<&str> =
                pods.iter().filter_map(|p| settled.placement.get(p).map(String::as_str)).collect();
            let group = j.gang.then(|| job_name(j));
            if placed.len() == pods.len() {
                if j.gang {
                    let (nodes, domains) = state.spans(placed);
                    out.gangs.push(GangSpan { members: j.pods, nodes, domains });
                }
                out.accepted_jobs += 1;
                live.push(Live { end: wave + j.lifetime, pods, group });
            } else {
                sample.rejected_jobs += 1;
                if !j.gang && i64::from(j.shape.gpus) >= full_node {
                    sample.rejected_full_node += 1;
                }
                if j.gang && !placed.is_empty() {
                    out.partial_gangs += 1;
                }
                refused.push(Live { end: wave, pods, group });
            }
        }
        out.samples.push(sample);
        end_jobs(s, target, &refused, &mut alive).await?;
    }
    out.summary = Summary::of(&out.samples, &out.gangs);
    s.sink.push(out);
    Ok(())
}

/// Per wave, the GPUs of the jobs that would be running had every job been
/// placed (a job of wave `w` runs in waves `w..w + lifetime`).
pub(super) fn offered_gpus(stream: &[Job], per_wave: usize) -> Vec<i64> {
    let waves = stream.len().div_ceil(per_wave.max(1));
    let mut offered = vec![0i64; waves];
    for (i, j) in stream.iter().enumerate() {
        let start = i / per_wave.max(1);
        let gpus = i64::from(j.shape.gpus) * j.pods as i64;
        for o in offered.iter_mut().skip(start).take(j.lifetime) {
            *o += gpus;
        }
    }
    offered
}

pub(super) async fn end_jobs(
    s: &GpuJobsStep,
    target: &dyn Target,
    jobs: &[Live],
    alive: &mut HashSet<String>,
) -> Result<(), String> {
    let pods = jobs.iter().flat_map(|l| &l.pods);
    all(pods.map(|p| target.delete_pod(s.namespace.clone(), p.clone()))).await?;
    for l in jobs {
        for p in &l.pods {
            alive.remove(p);
        }
        if let Some(g) = &l.group {
            target.delete_group(s.namespace.clone(), g.clone()).await?;
        }
    }
    Ok(())
}

struct Settled {
    state: GpuState,
    /// Pod name → node, for the namespace's bound pods.
    placement: HashMap<String, String>,
    stalled: bool,
}

/// Creates the DRA objects of `gpusAs: draDevices`: the DeviceClass, a
/// ResourceSlice for each node with a GPU count label, and a
/// ResourceClaimTemplate per GPU count of the stream; then waits until the
/// target shows the slices. Returns the largest node's GPUs.
async fn create_devices(
    s: &GpuJobsStep,
    target: &dyn Target,
    nodes: &[Arc<Node>],
    stream: &[Job],
) -> Result<u32, String> {
    target.create_dra(DraObject::Class(Box::new(dra::device_class(&s.dra_driver)))).await?;
    let mut want = HashSet::new();
    let mut slices = Vec::new();
    let mut full_node = 0;
    for n in nodes {
        let name = n.metadata.name.clone().unwrap_or_default();
        if let Some(gpus) = dra::node_gpus(n, &s.gpu_count_label) {
            full_node = full_node.max(gpus);
            let slice = dra::slice(&name, gpus, &s.dra_driver);
            want.insert(slice.metadata.name.clone().unwrap_or_default());
            slices.push(slice);
        }
    }
    if slices.is_empty() {
        return Err(format!(
            "gpusAs: draDevices: no node has the label {} (its GPU count)",
            s.gpu_count_label
        ));
    }
    all(slices.into_iter().map(|sl| target.create_dra(DraObject::Slice(Box::new(sl))))).await?;
    let counts: std::collections::BTreeSet<u32> =
        stream.iter().map(|j| j.shape.gpus).filter(|&g| g > 0).collect();
    for gpus in counts {
        let t = dra::claim_template(&s.namespace, gpus, &s.dra_driver);
        target.create_dra(DraObject::Template(Box::new(t))).await?;
    }
    let start = Instant::now();
    loop {
        let (shown, _) = target.devices();
        let seen = shown
            .iter()
            .filter(|sl| sl.metadata.name.as_ref().is_some_and(|n| want.contains(n)))
            .count();
        if seen == want.len() {
            return Ok(full_node);
        }
        if start.elapsed() > SYNC_TIMEOUT {
            return Err(format!(
                "the cluster view showed {seen} of {} ResourceSlices in {SYNC_TIMEOUT:?}",
                want.len()
            ));
        }
        tokio::time::sleep(target.poll()).await;
    }
}

/// Whether the claims the target shows agree with its pods (DRA): no claim
/// of the namespace belongs to a pod we deleted (the resourceclaim
/// controller deletes generated claims of deleted pods; until it has,
/// their devices stay allocated), and every claim a bound pod of ours
/// names is shown, allocated.
fn claims_synced(
    s: &GpuJobsStep,
    pods: &[Arc<Pod>],
    claims: &[Arc<ResourceClaim>],
    alive: &HashSet<String>,
) -> bool {
    let mut shown: HashMap<&str, bool> = HashMap::new();
    for c in claims {
        if c.metadata.namespace.as_deref() != Some(s.namespace.as_str()) {
            continue;
        }
        let owner = c
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "Pod");
        if owner.is_some_and(|o| !alive.contains(&o.name)) {
            return false;
        }
        let allocated = c.status.as_ref().is_some_and(|st| st.allocation.is_some());
        shown.insert(c.metadata.name.as_deref().unwrap_or(""), allocated);
    }
    pods.iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(s.namespace.as_str()))
        .filter(|p| p.spec.as_ref().and_then(|sp| sp.node_name.as_deref()).is_some())
        .flat_map(|p| p.status.as_ref().and_then(|st| st.resource_claim_statuses.as_deref()))
        .flatten()
        .filter_map(|st| st.resource_claim_name.as_deref())
        .all(|name| shown.get(name) == Some(&true))
}

/// The pods of the namespace whose claims (as their status names them) are
/// all shown allocated.
fn pods_with_allocated_claims(
    s: &GpuJobsStep,
    pods: &[Arc<Pod>],
    claims: &[Arc<ResourceClaim>],
) -> HashSet<String> {
    let allocated: HashSet<&str> = claims
        .iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some(s.namespace.as_str()))
        .filter(|c| c.status.as_ref().is_some_and(|st| st.allocation.is_some()))
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    pods.iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(s.namespace.as_str()))
        .filter_map(|p| {
            let names: Vec<&str> = p
                .status
                .as_ref()
                .and_then(|st| st.resource_claim_statuses.as_deref())?
                .iter()
                .filter_map(|st| st.resource_claim_name.as_deref())
                .collect();
            (!names.is_empty() && names.iter().all(|n| allocated.contains(n)))
                .then(|| p.metadata.name.clone().unwrap_or_default())
        })
        .collect()
}

/// Waits until the wave has settled (see the module docs).
async fn settle(
    s: &GpuJobsStep,
    target: &dyn Target,
    chunk: &[Job],
    names: &[Vec<String>],
    alive: &HashSet<String>,
    requests: &HashMap<PodShape, Res>,
) -> Result<Settled, String> {
    let start = Instant::now();
    let mut last_change = start;
    let mut last_bound = usize::MAX;
    let wave_pods: usize = names.iter().map(Vec::len).sum();
    let dra = s.gpus_as == GpusAs::DraDevices;
    loop {
        let (nodes, pods) = target.objects();
        let (slices, claims) = if dra { target.devices() } else { Default::default() };
        let mut present = 0;
        let mut stale = false;
        let mut placement = HashMap::new();
        for p in &pods {
            if p.metadata.namespace.as_deref() != Some(s.namespace.as_str()) {
                continue;
            }
            let name = p.metadata.name.as_deref().unwrap_or("");
            if !alive.contains(name) {
                stale = true;
                continue;
            }
            present += 1;
            if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                placement.insert(name.to_string(), node);
            }
        }
        let claims_synced = !dra || claims_synced(s, &pods, &claims, alive);
        let synced = !stale && present == alive.len() && claims_synced;
        if !synced {
            if start.elapsed() > SYNC_TIMEOUT {
                return Err(format!(
                    "the cluster view did not show our pods in {SYNC_TIMEOUT:?}: {present} of {} \
                     present, deleted ones still listed: {stale}, claims in sync: {claims_synced}",
                    alive.len()
                ));
            }
            tokio::time::sleep(target.poll()).await;
            continue;
        }
        let bound = names.iter().flatten().filter(|n| placement.contains_key(*n)).count();
        let build = || {
            let view = match s.gpus_as {
                GpusAs::ExtendedResource => GpuView::extended(
                    nodes.iter().map(|n| n.as_ref()),
                    pods.iter().map(|p| p.as_ref()),
                    &s.resource,
                ),
                GpusAs::DraDevices => GpuView::devices(
                    slices.iter().map(|s| s.as_ref()),
                    claims.iter().map(|c| c.as_ref()),
                    &s.dra_driver,
                ),
            };
            GpuState::build(
                nodes.iter().map(|n| n.as_ref()),
                pods.iter().map(|p| p.as_ref()),
                &view,
                &s.resource,
                &s.topology_key,
            )
        };
        if bound == wave_pods {
            return Ok(Settled { state: build(), placement, stalled: false });
        }
        if bound != last_bound {
            // Still binding: look again before judging.
            last_bound = bound;
            last_change = Instant::now();
            tokio::time::sleep(target.poll()).await;
            continue;
        }
        let state = build();
        // DRA: a pending pod whose claims are allocated is being bound
        // (the scheduler wrote the allocation in PreBind); its devices
        // already count as allocated, so the fit check cannot judge it.
        let binding =
            if dra { pods_with_allocated_claims(s, &pods, &claims) } else { HashSet::new() };
        let stuck = chunk.iter().zip(names).all(|(j, pods)| {
            let pending: Vec<&String> =
                pods.iter().filter(|p| !placement.contains_key(*p)).collect();
            pending.is_empty()
                || (!pending.iter().any(|p| binding.contains(p.as_str()))
                    && !state.fits(&requests[&j.shape], pending.len()))
        });
        if stuck {
            return Ok(Settled { state, placement, stalled: false });
        }
        if last_change.elapsed() > s.stall_timeout {
            let pending: Vec<String> = chunk
                .iter()
                .zip(names)
                .flat_map(|(j, pods)| {
                    pods.iter().filter(|p| !placement.contains_key(*p)).map(move |p| {
                        let gang = if j.gang { ", gang" } else { "" };
                        format!("{p} ({} GPUs{gang})", j.shape.gpus)
                    })
                })
                .take(5)
                .collect();
            tracing::warn!(
                namespace = %s.namespace,
                "createGpuJobs: pods that fit stayed pending for {:?}; refusing them: {}",
                s.stall_timeout,
                pending.join(", ")
            );
            return Ok(Settled { state, placement, stalled: true });
        }
        tokio::time::sleep(target.poll()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_load_counts_every_job_as_if_placed() {
        let job = |index, gpus, pods, lifetime| Job {
            index,
            shape: PodShape { gpus, ..PodShape::default() },
            pods,
            gang: pods > 1,
            lifetime,
        };
        // Two jobs per wave: waves 0, 0, 1, 1, 2.
        let stream =
            [job(0, 1, 1, 1), job(1, 8, 2, 3), job(2, 0, 1, 5), job(3, 4, 1, 1), job(4, 2, 1, 9)];
        assert_eq!(offered_gpus(&stream, 2), [17, 20, 18]);
    }

    #[test]
    fn a_declared_lifetime_is_an_upper_bound_in_whole_seconds() {
        let half = Duration::from_millis(500);
        assert_eq!(declared_lifetime(8, half), 5);
        assert_eq!(declared_lifetime(3, half), 3);
        assert_eq!(declared_lifetime(1, Duration::from_secs(2)), 3);
    }
}
