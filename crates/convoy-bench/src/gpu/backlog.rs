//! `createGpuJobs` with `backlog: true`: the stream as a queue, for gang
//! scheduling under contention. The same seeded jobs as the loss system of
//! `driver`, run differently:
//!
//! - waves arrive every `waveInterval` of wall time, whatever the
//!   scheduler does (so every scheduler sees the same arrivals in time);
//! - a job that does not fit waits (nothing is refused): a gang competes
//!   with the single-pod jobs arriving after it, at the same priority;
//! - a job's lifetime (in waves) counts from the wave in which its last pod
//!   was seen bound;
//! - after the last wave the stream drains: no arrivals, running jobs end
//!   as their lifetimes run out, until every job was placed or every job
//!   still pending is deadlocked (it has fitted the free resources for
//!   `stallTimeout` and is still not bound) or cannot fit at all.
//!
//! The cluster is looked at every [`LOOK`] (the precision of the gang
//! latencies) and sampled at every wave, from its nodes and pods alone, so
//! every scheduler is measured the same way. What it reports
//! ([`Contention`]):
//!
//! - created to bound: per gang, from the request creating its PodGroup
//!   (its pods follow at once) to the look that saw its last member bound;
//!   p50 and p99 (nearest rank) over the gangs placed;
//! - GPU utilization: allocated GPUs over the cluster's, averaged over the
//!   arrival waves (all, and the saturated ones: where the stream offers at
//!   least the cluster's GPUs, as for fragmentation);
//! - partial gangs: gangs seen with some but not all members bound for at
//!   least [`PARTIAL_GRACE`] (binds of one gang are separate API calls, so
//!   a gang being bound is briefly partial on any scheduler), or at the
//!   end;
//! - deadlocked gangs: gangs never bound though they fitted the free
//!   resources (within one topology domain if their group requires one)
//!   for `stallTimeout` after arrivals stopped;
//! - domains per gang: the distinct topology domains each placed gang's
//!   pods landed in (also `GpuGangSpread`);
//! - one domain when one fitted: of the placed gangs whose members all
//!   fitted one topology domain, how many landed in one (the measure of a
//!   preferred topology level: `topologyKey` names the preferred level,
//!   the group may require a wider one). A gang "fitted" when, at the look
//!   that first saw it bound, the free resources of one domain plus what
//!   its own members hold there would hold all its members: everything
//!   else as it was then (pods bound after it in the same look only make
//!   the count stricter);
//! - backfill: single-pod jobs placed while a gang was waiting.
//!
//! Evictions are counted by the runner's window (`EvictedPods`), as for
//! every other workload.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use super::driver::{
    Live, Target, all, end_jobs, job_name, offered_gpus, render_group, render_pod,
};
use super::metrics::{
    GangSpan, GpuState, GpuView, Res, Summary, WaveSample, gpu_weighted_median, pod_requests,
};
use super::stream::{Job, PodShape, jobs};
use super::{GpuJobsStep, Outcome};
use crate::dataitems::DataItem;
use crate::measure::groups::latency_summary;

/// How long a gang may be seen partly bound before it counts as partial.
pub const PARTIAL_GRACE: Duration = Duration::from_secs(1);
/// How often the cluster is looked at.
pub const LOOK: Duration = Duration::from_millis(50);

/// The gang contention metrics of a backlog stream (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Contention {
    /// Gangs in the stream.
    pub gangs: usize,
    /// Gangs whose every member was bound.
    pub gangs_placed: usize,
    /// Per placed gang (in the order they were placed): created to last
    /// member bound, seconds.
    pub gang_latencies_s: Vec<f64>,
    /// Median of those, ms.
    pub latency_p50_ms: Option<f64>,
    /// 99th percentile (nearest rank), ms.
    pub latency_p99_ms: Option<f64>,
    /// Longest, ms.
    pub latency_max_ms: Option<f64>,
    /// Allocated share of the GPUs averaged over the arrival waves, %.
    pub utilization_mean_pct: f64,
    /// The same over the saturated arrival waves, % (`None`: none).
    pub utilization_saturated_pct: Option<f64>,
    /// Gangs partly bound for at least [`PARTIAL_GRACE`], or at the end.
    pub partial_gangs: usize,
    /// Gangs never bound though they fitted for `stallTimeout` once
    /// arrivals had stopped.
    pub deadlocked_gangs: usize,
    /// Other jobs left pending at the end (single-pod jobs that fitted and
    /// were not bound, or jobs that never fitted an emptied cluster).
    pub unplaced_jobs: usize,
    /// Per placed gang, the topology domains its pods landed in.
    pub gang_domains: Vec<usize>,
    /// Placed gangs whose members all fitted one topology domain, their
    /// own pods taken out, at the look that first saw them bound.
    pub one_domain_fitted: usize,
    /// Of those, the gangs that landed in one domain.
    pub one_domain_when_fitted: usize,
    /// Single-pod jobs placed while a gang was waiting.
    pub backfilled: usize,
    /// Waves with arrivals.
    pub arrival_waves: usize,
    /// Waves of the drain.
    pub drain_waves: usize,
}

/// A job waiting for its pods to be bound.
struct Pending {
    job: Job,
    pods: Vec<String>,
    created: Instant,
    /// The node label its group requires all its pods to share, if any.
    required_key: Option<String>,
    partial_since: Option<Instant>,
    partial_counted: bool,
    fit_since: Option<Instant>,
}

/// The node label a rendered PodGroup requires all its pods to share, if
/// any (Convoy's annotation, else the first of upstream's
/// `spec.schedulingConstraints.topology`).
fn required_key(group: &Value) -> Option<String> {
    let annotated = group["metadata"]["annotations"]["convoy.dev/required-topology"].as_str();
    let upstream = || group["spec"]["schedulingConstraints"]["topology"][0]["key"].as_str();
    annotated.or_else(upstream).map(String::from)
}

/// Whether `count` pods of `req` fit the free resources, all in one
/// topology domain when `one_domain`.
fn fits(state: &GpuState, req: &Res, count: usize, one_domain: bool) -> bool {
    if !one_domain {
        return state.fits(req, count);
    }
    let mut domains: BTreeMap<Option<&str>, GpuState> = BTreeMap::new();
    for n in &state.nodes {
        let d = domains.entry(n.domain.as_deref()).or_default();
        d.nodes.push(n.clone());
    }
    domains.iter().any(|(d, s)| match d {
        Some(_) => s.fits(req, count),
        // Unlabelled nodes are each their own domain.
        None => s.nodes.iter().any(|n| n.free().copies_of(req) >= count as i64),
    })
}

/// `state` with one pod of `req` taken off each of `nodes` (a node named
/// twice loses two).
fn released(state: &GpuState, nodes: &[&str], req: &Res) -> GpuState {
    let mut out = state.clone();
    for name in nodes {
        if let Some(n) = out.nodes.iter_mut().find(|n| n.name == *name) {
            n.used = n.used.minus(req);
        }
    }
    out
}

/// Runs the stream of `s` as a queue against `target`, a wave every
/// `interval`; the outcome goes to `s.sink`.
pub(crate) async fn run(
    s: &GpuJobsStep,
    target: &dyn Target,
    scheduler: &str,
    interval: Duration,
) -> Result<(), String> {
    let stream = jobs(s.seed, s.jobs, &s.mix, s.gangs.as_ref(), s.mean_lifetime);
    let per_wave = s.per_wave.max(1);
    let chunks: Vec<&[Job]> = stream.chunks(per_wave).collect();
    let median_shape = gpu_weighted_median(&s.mix);
    let probe = |shape: PodShape| -> Result<Res, String> {
        let j = Job { index: 0, shape, pods: 1, gang: false, lifetime: 1 };
        Ok(pod_requests(&render_pod(s, &j, 0, scheduler)?, &s.resource))
    };
    let median = probe(median_shape)?;
    let mut requests: HashMap<PodShape, Res> = HashMap::new();
    for j in &stream {
        if let std::collections::hash_map::Entry::Vacant(e) = requests.entry(j.shape) {
            e.insert(probe(j.shape)?);
        }
    }
    let offered = offered_gpus(&stream, per_wave);
    // The drain cannot outlast the longest lifetime plus the stall timeout
    // (with some slack for slow binds).
    let longest = (4.0 * s.mean_lifetime).ceil() as usize;
    let max_drain =
        longest + (s.stall_timeout.as_secs_f64() / interval.as_secs_f64()).ceil() as usize + 20;

    let mut out = Outcome::empty(&s.namespace, median_shape);
    let mut c = Contention {
        gangs: stream.iter().filter(|j| j.gang).count(),
        arrival_waves: chunks.len(),
        ..Contention::default()
    };
    let mut pending: Vec<Pending> = Vec::new();
    let mut live: Vec<Live> = Vec::new();
    let start = Instant::now();
    let mut wave = 0usize;
    loop {
        let (nodes, pods) = target.objects();
        let view = GpuView::extended(
            nodes.iter().map(|n| n.as_ref()),
            pods.iter().map(|p| p.as_ref()),
            &s.resource,
        );
        let build = |key: &str| {
            GpuState::build(
                nodes.iter().map(|n| n.as_ref()),
                pods.iter().map(|p| p.as_ref()),
                &view,
                &s.resource,
                key,
            )
        };
        let state = build(&s.topology_key);
        // The free resources by the domains of each other required key.
        let mut by_key: HashMap<String, GpuState> = HashMap::new();
        let placement: HashMap<&str, &str> = pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(s.namespace.as_str()))
            .filter_map(|p| {
                let node = p.spec.as_ref()?.node_name.as_deref()?;
                Some((p.metadata.name.as_deref()?, node))
            })
            .collect();
        let now = Instant::now();
        // Jobs bound since the last look start running (in the current
        // wave, `wave - 1`).
        let gang_waiting = pending.iter().any(|p| p.job.gang);
        let mut still = Vec::new();
        for mut p in pending.drain(..) {
            let bound: Vec<&str> =
                p.pods.iter().filter_map(|n| placement.get(n.as_str()).copied()).collect();
            if bound.len() == p.pods.len() {
                if p.job.gang {
                    let (nodes, domains) = state.spans(bound.iter().copied());
                    out.gangs.push(GangSpan { members: p.job.pods, nodes, domains });
                    c.gang_latencies_s.push((now - p.created).as_secs_f64());
                    c.gang_domains.push(domains);
                    let req = &requests[&p.job.shape];
                    if fits(&released(&state, &bound, req), req, p.job.pods, true) {
                        c.one_domain_fitted += 1;
                        c.one_domain_when_fitted += usize::from(domains == 1);
                    }
                } else if gang_waiting {
                    c.backfilled += 1;
                }
                out.accepted_jobs += 1;
                if s.declare_lifetimes {
                    let ns = &s.namespace;
                    all(p.pods.iter().map(|n| target.mark_started(ns.clone(), n.clone()))).await?;
                }
                let group = p.job.gang.then(|| job_name(&p.job));
                live.push(Live {
                    end: wave.saturating_sub(1) + p.job.lifetime,
                    pods: p.pods,
                    group,
                });
                continue;
            }
            if p.job.gang && !bound.is_empty() {
                let since = *p.partial_since.get_or_insert(now);
                if now - since >= PARTIAL_GRACE && !p.partial_counted {
                    p.partial_counted = true;
                    c.partial_gangs += 1;
                }
            } else {
                p.partial_since = None;
            }
            let waiting = p.pods.len() - bound.len();
            let req = &requests[&p.job.shape];
            let fitted = match p.required_key.as_deref() {
                None => fits(&state, req, waiting, false),
                Some(k) if k == s.topology_key => fits(&state, req, waiting, true),
                Some(k) => {
                    let domains = by_key.entry(k.to_string()).or_insert_with(|| build(k));
                    fits(domains, req, waiting, true)
                }
            };
            if fitted {
                p.fit_since.get_or_insert(now);
            } else {
                p.fit_since = None;
            }
            still.push(p);
        }
        pending = still;

        // The drain ends when nothing waits, when everything that waits is
        // deadlocked or cannot fit an emptied cluster, or at its cap.
        if wave >= chunks.len() {
            let stuck = |p: &Pending| {
                p.fit_since.is_some_and(|t| now - t >= s.stall_timeout)
                    || (live.is_empty() && p.fit_since.is_none())
            };
            if pending.iter().all(stuck) || c.drain_waves > max_drain {
                break;
            }
        }

        // A wave is due: sample, end the jobs whose time is up, arrive.
        if now >= start + interval * wave as u32 {
            if let Some(chunk) = chunks.get(wave) {
                out.samples.push(WaveSample {
                    wave,
                    allocated_gpus: state.allocated_gpus(),
                    total_gpus: state.total_gpus(),
                    fully_free_nodes: state.fully_free_nodes(),
                    stranded_gpus: state.stranded_gpus(&median),
                    offered_gpus: offered[wave],
                    ..WaveSample::default()
                });
                let (done, keep): (Vec<Live>, Vec<Live>) =
                    live.into_iter().partition(|l| l.end <= wave);
                live = keep;
                end_jobs(s, target, &done, &mut HashSet::new()).await?;
                let mut created = Vec::new();
                for j in chunk.iter() {
                    let mut required = None;
                    if j.gang {
                        let group = render_group(s, j)?;
                        required = required_key(&group);
                        target.create_group(group).await?;
                    }
                    let names: Vec<String> =
                        (0..j.pods).map(|m| format!("{}-{m}", job_name(j))).collect();
                    for m in 0..j.pods {
                        created.push(render_pod(s, j, m, scheduler)?);
                    }
                    pending.push(Pending {
                        job: j.clone(),
                        pods: names,
                        created: Instant::now(),
                        required_key: required,
                        partial_since: None,
                        partial_counted: false,
                        fit_since: None,
                    });
                }
                all(created.into_iter().map(|p| target.create_pod(p))).await?;
            } else {
                let (done, keep): (Vec<Live>, Vec<Live>) =
                    live.into_iter().partition(|l| l.end <= wave);
                live = keep;
                end_jobs(s, target, &done, &mut HashSet::new()).await?;
                c.drain_waves += 1;
            }
            wave += 1;
        }
        let next = start + interval * wave as u32;
        tokio::time::sleep(next.saturating_duration_since(Instant::now()).min(LOOK)).await;
    }

    // What is left: partial, deadlocked or unplaced; then removed, so that
    // nothing waits for the scheduler after the op.
    let now = Instant::now();
    for p in &pending {
        if p.job.gang && p.partial_since.is_some() && !p.partial_counted {
            c.partial_gangs += 1;
        }
        let deadlocked = p.fit_since.is_some_and(|t| now - t >= s.stall_timeout);
        if p.job.gang && deadlocked {
            c.deadlocked_gangs += 1;
        } else {
            c.unplaced_jobs += 1;
        }
    }
    let left: Vec<Live> = pending
        .into_iter()
        .map(|p| Live { end: 0, group: p.job.gang.then(|| job_name(&p.job)), pods: p.pods })
        .collect();
    end_jobs(s, target, &left, &mut HashSet::new()).await?;

    out.partial_gangs = c.partial_gangs;
    out.summary = Summary::of(&out.samples, &out.gangs);
    c.utilization_saturated_pct = out.summary.allocated_pct_at_saturation;
    if !out.samples.is_empty() {
        c.utilization_mean_pct = out
            .samples
            .iter()
            .map(|w| 100.0 * w.allocated_gpus as f64 / w.total_gpus.max(1) as f64)
            .sum::<f64>()
            / out.samples.len() as f64;
    }
    let latencies: Vec<Duration> =
        c.gang_latencies_s.iter().map(|s| Duration::from_secs_f64(*s)).collect();
    if let Some(l) = latency_summary(&latencies) {
        c.latency_p50_ms = Some(l.perc50);
        c.latency_p99_ms = Some(l.perc99);
        c.latency_max_ms = latencies.iter().max().map(|d| d.as_secs_f64() * 1e3);
    }
    c.gangs_placed = c.gang_latencies_s.len();
    out.contention = Some(c);
    s.sink.push(out);
    Ok(())
}

/// Makes a DataItem of a metric, its unit and its data.
pub type MakeItem<'a> = &'a dyn Fn(&str, &str, Vec<(&str, f64)>) -> DataItem;

/// The contention DataItems, made by `item`.
pub fn items(item: MakeItem<'_>, c: &Contention) -> Vec<DataItem> {
    let mut out = Vec::new();
    if let (Some(p50), Some(p99)) = (c.latency_p50_ms, c.latency_p99_ms) {
        out.push(item(
            "GangCreatedToBound",
            "ms",
            vec![
                ("Perc50", p50),
                ("Perc99", p99),
                ("Max", c.latency_max_ms.unwrap_or(p99)),
                ("Placed", c.gangs_placed as f64),
                ("Gangs", c.gangs as f64),
            ],
        ));
    }
    out.push(item(
        "GpuUtilization",
        "%",
        [("MeanArrivalWaves", c.utilization_mean_pct)]
            .into_iter()
            .chain(c.utilization_saturated_pct.map(|v| ("MeanSaturatedWaves", v)))
            .collect(),
    ));
    let multi = c.gang_domains.iter().filter(|&&d| d > 1).count();
    out.push(item(
        "GangContention",
        "gangs",
        vec![
            ("Gangs", c.gangs as f64),
            ("Placed", c.gangs_placed as f64),
            ("Partial", c.partial_gangs as f64),
            ("Deadlocked", c.deadlocked_gangs as f64),
            ("UnplacedJobs", c.unplaced_jobs as f64),
            ("OverOneDomain", multi as f64),
            ("OneDomainFitted", c.one_domain_fitted as f64),
            ("InOneDomainWhenFitted", c.one_domain_when_fitted as f64),
            ("Backfilled", c.backfilled as f64),
            ("DrainWaves", c.drain_waves as f64),
        ],
    ));
    out
}

impl Contention {
    /// Average topology domains per placed gang.
    pub fn domains_avg(&self) -> Option<f64> {
        (!self.gang_domains.is_empty()).then(|| {
            self.gang_domains.iter().sum::<usize>() as f64 / self.gang_domains.len() as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::metrics::NodeGpu;

    fn node(name: &str, domain: Option<&str>, free_gpus: i64) -> NodeGpu {
        NodeGpu {
            name: name.into(),
            domain: domain.map(String::from),
            allocatable: Res { gpus: 8, milli_cpu: 128_000, memory: 1 << 41, pods: 110 },
            used: Res { gpus: 8 - free_gpus, ..Res::default() },
        }
    }

    #[test]
    fn one_domain_fit_looks_at_each_domain_alone() {
        let req = Res { gpus: 8, milli_cpu: 1, memory: 1, pods: 1 };
        let state = GpuState {
            nodes: vec![
                node("a", Some("r0"), 8),
                node("b", Some("r1"), 8),
                node("c", Some("r1"), 4),
                node("d", None, 8),
            ],
        };
        assert!(fits(&state, &req, 3, false));
        assert!(!fits(&state, &req, 2, true), "two free nodes, no domain has both");
        assert!(fits(&state, &req, 1, true));
        assert!(!fits(&state, &req, 4, false));
    }

    #[test]
    fn a_placed_gang_is_judged_with_its_own_pods_taken_out() {
        let req = Res { gpus: 8, milli_cpu: 1, memory: 1, pods: 1 };
        // A gang of two bound on a (rack r0) and b (rack r1); r1's c is
        // free: with the gang's pods taken out, r1 holds both.
        let state = GpuState {
            nodes: vec![
                node("a", Some("r0"), 0),
                node("b", Some("r1"), 0),
                node("c", Some("r1"), 8),
            ],
        };
        assert!(!fits(&state, &req, 2, true));
        let before = released(&state, &["a", "b"], &req);
        assert!(fits(&before, &req, 2, true));
        assert_eq!(before.nodes[0].free().gpus, 8);
        assert!(!fits(&released(&state, &["a"], &req), &req, 2, true), "r0 has one node");
    }

    #[test]
    fn required_topology_is_read_from_either_field() {
        let annotated = serde_json::json!({"metadata": {"annotations":
            {"convoy.dev/required-topology": "topology.kubernetes.io/rack"}}});
        let upstream = serde_json::json!({"spec": {"schedulingConstraints":
            {"topology": [{"key": "topology.kubernetes.io/rack"}]}}});
        let rack = Some("topology.kubernetes.io/rack".to_string());
        assert_eq!(required_key(&annotated), rack);
        assert_eq!(required_key(&upstream), rack);
        assert_eq!(required_key(&serde_json::json!({"spec": {}})), None);
    }
}
