//! `convoy-scheduler simulate`: the real scheduler on the embedded cluster.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use convoy_api::{FakeClock, PodInfo, PodKey};
use convoy_config::SchedulerConfig;
use convoy_embedded::{EmbeddedActuator, EmbeddedBinder, EmbeddedCluster, Objects};
use parking_lot::Mutex;
use serde::Serialize;

use crate::decision::{Decision, DecisionSink, Fanout, LogSink, Outcome};
use crate::scheduler::{Scheduler, SchedulerOptions};

/// Where each pod of the run ended.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PodResult {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The node it is bound to, if bound; for an evicted pod, the node it
    /// was evicted from.
    pub node: Option<String>,
    /// Why it stays pending, if not bound.
    pub reason: Option<String>,
    /// Deleted by preemption (only written when true).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub evicted: bool,
    /// For an evicted pod: the preemptor it made room for, `namespace/name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptor: Option<String>,
}

/// Totals of a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Pods bound by this run.
    pub bound: usize,
    /// Pods of Convoy's profiles still pending.
    pub pending: usize,
    /// Pods deleted by preemption.
    pub evicted: usize,
    /// Wall time from the first update to idle.
    pub seconds: f64,
    /// `bound / seconds`.
    pub pods_per_second: f64,
}

/// Scheduling-cycle latency (from pop to decision, binding excluded) over
/// every attempt of the run.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CycleLatency {
    /// Attempts measured.
    pub attempts: usize,
    /// Median, in microseconds.
    pub p50_us: f64,
    /// 99th percentile, in microseconds.
    pub p99_us: f64,
    /// Maximum, in microseconds.
    pub max_us: f64,
}

impl CycleLatency {
    /// The statistics of cycle latencies in microseconds, in any order
    /// (nearest-rank percentiles; all zero when there are none).
    pub fn of(mut micros: Vec<f64>) -> Self {
        if micros.is_empty() {
            return Self::default();
        }
        micros.sort_by(f64::total_cmp);
        let at =
            |q: f64| micros[((micros.len() as f64 * q).ceil() as usize).clamp(1, micros.len()) - 1];
        Self { attempts: micros.len(), p50_us: at(0.50), p99_us: at(0.99), max_us: at(1.0) }
    }
}

/// The result of a simulation, printable as text or JSON.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Every pod the run considered (pending pods of Convoy's profiles).
    pub pods: Vec<PodResult>,
    /// Totals.
    pub summary: Summary,
    /// Scheduling-cycle latency.
    pub cycle_latency: CycleLatency,
    /// Objects of kinds Convoy does not use, skipped when loading: how
    /// many of each kind.
    pub skipped: BTreeMap<String, usize>,
    /// Preemption chains: a replacement of a pod preempted in the run (a
    /// pending pod of the same owner) that preempted in turn. Omitted from
    /// the JSON when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<ChainResult>,
}

/// One link of a preemption chain found by a simulation.
#[derive(Debug, Clone, Serialize)]
pub struct ChainResult {
    /// The chain's depth with this preemption (2: one replacement
    /// preempted).
    pub depth: u32,
    /// The replacement that preempted, `namespace/name`.
    pub preemptor: String,
    /// What it preempted.
    pub victims: Vec<String>,
    /// The preemption it follows (`ns/a preempted ns/b (Kind ns/owner) Ns
    /// before`).
    pub after: String,
}

/// Keeps the last decision of each pod, and every attempt's latency.
#[derive(Default)]
struct Collect {
    last: Mutex<HashMap<PodKey, Outcome>>,
    latencies_us: Mutex<Vec<f64>>,
    chains: Mutex<Vec<ChainResult>>,
}

impl DecisionSink for Collect {
    fn record(&self, d: &Decision) {
        self.last.lock().insert(d.pod.clone(), d.outcome.clone());
        self.latencies_us.lock().push(d.latency.as_secs_f64() * 1e6);
    }

    fn record_preemption(&self, d: &crate::decision::PreemptionDecision) {
        if let Some(c) = &d.chain {
            self.chains.lock().push(ChainResult {
                depth: c.depth,
                preemptor: d.group.as_ref().map_or_else(|| d.pod.to_string(), |g| g.to_string()),
                victims: d.victims.iter().map(|(k, _)| k.to_string()).collect(),
                after: c.summary(),
            });
        }
    }
}

/// Runs every pending pod of `objects` whose scheduler name is one of the
/// profiles through the scheduler on an embedded cluster. Pods preemption
/// deleted are reported too, evicted (those that were bound from the
/// start included).
pub async fn simulate(
    config: SchedulerConfig,
    objects: Objects,
    log_decisions: bool,
) -> anyhow::Result<Report> {
    simulate_with(&crate::registry(), config, objects, log_decisions).await
}

/// [`simulate`] with the plugins of `registry` (a binary of your own,
/// [`crate::App`]).
pub async fn simulate_with(
    registry: &convoy_api::Registry,
    config: SchedulerConfig,
    mut objects: Objects,
    log_decisions: bool,
) -> anyhow::Result<Report> {
    let considered: Vec<PodKey> = {
        let names: Vec<&str> = config.profiles.iter().map(|p| p.scheduler_name.as_str()).collect();
        objects
            .pods
            .iter()
            .filter(|p| {
                let s = p.spec.as_ref();
                s.and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty)
                    && names.contains(
                        &s.and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler"),
                    )
            })
            .map(PodKey::of)
            .collect()
    };
    let skipped = std::mem::take(&mut objects.skipped);
    let (cluster, mut updates) = EmbeddedCluster::new(objects);
    let collect = Arc::new(Collect::default());
    let mut sinks: Vec<Arc<dyn DecisionSink>> = vec![collect.clone()];
    if log_decisions {
        sinks.push(Arc::new(LogSink));
    }
    let clock = FakeClock::new();
    let scheduler = Scheduler::new(SchedulerOptions {
        config,
        registry: registry.clone(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(EmbeddedActuator(cluster.clone())),
        clock: Arc::new(clock.clone()),
        sink: Arc::new(Fanout(sinks)),
        seed: Some(0),
        framework_metrics: None,
    })?;
    let started = Instant::now();
    scheduler.run_until_idle(&mut updates, &clock).await;
    let seconds = started.elapsed().as_secs_f64();

    let decisions = collect.last.lock();
    let evictions: HashMap<PodKey, convoy_embedded::Eviction> =
        cluster.evictions().into_iter().map(|e| (e.victim.clone(), e)).collect();
    let mut pods = Vec::with_capacity(considered.len());
    let (mut bound, mut pending) = (0, 0);
    for key in &considered {
        if let Some(e) = evictions.get(key) {
            pods.push(evicted(e));
            continue;
        }
        let key = key.clone();
        let pod = cluster.pod(&key.namespace, &key.name);
        let node = pod.as_ref().and_then(|p| p.spec.as_ref()?.node_name.clone());
        let reason = if node.is_some() {
            bound += 1;
            None
        } else {
            pending += 1;
            Some(pending_reason(&scheduler, &key, pod, decisions.get(&key)))
        };
        pods.push(PodResult {
            namespace: key.namespace.to_string(),
            name: key.name.to_string(),
            node,
            reason,
            evicted: false,
            preemptor: None,
        });
    }
    // Victims that were bound before the run.
    let mut others: Vec<_> =
        evictions.values().filter(|e| !considered.contains(&e.victim)).collect();
    others.sort_by(|a, b| a.victim.cmp(&b.victim));
    pods.extend(others.into_iter().map(evicted));
    let evicted_count = evictions.len();
    let cycle_latency = CycleLatency::of(std::mem::take(&mut *collect.latencies_us.lock()));
    let chains = std::mem::take(&mut *collect.chains.lock());
    Ok(Report {
        pods,
        cycle_latency,
        skipped,
        chains,
        summary: Summary {
            bound,
            pending,
            evicted: evicted_count,
            seconds,
            pods_per_second: if seconds > 0.0 { bound as f64 / seconds } else { 0.0 },
        },
    })
}

fn evicted(e: &convoy_embedded::Eviction) -> PodResult {
    PodResult {
        namespace: e.victim.namespace.to_string(),
        name: e.victim.name.to_string(),
        node: Some(e.node.clone()),
        reason: None,
        evicted: true,
        preemptor: Some(e.preemptor.to_string()),
    }
}

fn pending_reason(
    scheduler: &Scheduler,
    key: &PodKey,
    pod: Option<Arc<k8s_openapi::api::core::v1::Pod>>,
    last: Option<&Outcome>,
) -> String {
    match last {
        Some(Outcome::Unschedulable { message } | Outcome::Error { message }) => message.clone(),
        Some(Outcome::Scheduled { node, .. }) => format!("binding to {node} did not complete"),
        None => {
            // Never attempted: held back before the queue (PreEnqueue).
            let Some(pod) = pod else { return format!("pod {key} was deleted") };
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if let Some(phase @ ("Succeeded" | "Failed")) = phase {
                return format!("pod is {phase}: a terminal pod is not scheduled");
            }
            let info = match PodInfo::new(pod) {
                Ok(info) => info,
                Err(e) => return format!("invalid pod: {}", e.message),
            };
            let Some(fwk) = scheduler.profiles().get(info.scheduler_name()) else {
                return "no profile".to_string();
            };
            let s = fwk.run_pre_enqueue(&info);
            if s.is_success() { "never attempted".to_string() } else { s.message() }
        }
    }
}

impl Report {
    /// The human-readable table and summary, after one note per kind of
    /// object skipped when loading.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let notes = convoy_embedded::load::skipped_notes(&self.skipped);
        for note in &notes {
            writeln!(out, "{note}").unwrap();
        }
        if !notes.is_empty() {
            out.push('\n');
        }
        let width = self
            .pods
            .iter()
            .map(|p| p.namespace.len() + p.name.len() + 1)
            .max()
            .unwrap_or(3)
            .max(3);
        for p in &self.pods {
            let key = format!("{}/{}", p.namespace, p.name);
            if p.evicted {
                let node = p.node.as_deref().unwrap_or("");
                let by = p.preemptor.as_deref().unwrap_or("");
                writeln!(out, "{key:width$}  evicted from {node} by {by}").unwrap();
                continue;
            }
            match (&p.node, &p.reason) {
                (Some(node), _) => writeln!(out, "{key:width$}  -> {node}").unwrap(),
                (None, Some(reason)) => writeln!(out, "{key:width$}  pending: {reason}").unwrap(),
                (None, None) => writeln!(out, "{key:width$}  pending").unwrap(),
            }
        }
        for c in &self.chains {
            writeln!(
                out,
                "preemption chain of depth {}: {}; its replacement {} then preempted {}",
                c.depth,
                c.after,
                c.preemptor,
                c.victims.join(", ")
            )
            .unwrap();
        }
        let s = &self.summary;
        let l = &self.cycle_latency;
        let evicted =
            if s.evicted > 0 { format!(", {} evicted", s.evicted) } else { String::new() };
        writeln!(
            out,
            "\n{} bound, {} pending{evicted} in {:.3}s ({:.0} pods/s); scheduling cycle p50 {:.0}µs, p99 {:.0}µs",
            s.bound, s.pending, s.seconds, s.pods_per_second, l.p50_us, l.p99_us
        )
        .unwrap();
        out
    }
}

/// Builds every profile's framework (without running anything), so that
/// `check-config` reports what only the framework can check, such as a
/// plugin enabled at an extension point it does not implement. Returns the
/// pipeline of each profile, extension point by extension point.
pub fn check(config: &SchedulerConfig) -> anyhow::Result<String> {
    check_with(config, &crate::registry())
}

/// [`check`] with the plugins of `registry`.
pub fn check_with(
    config: &SchedulerConfig,
    registry: &convoy_api::Registry,
) -> anyhow::Result<String> {
    use std::fmt::Write;
    let (cluster, _updates) = EmbeddedCluster::new(Objects::default());
    let scheduler = Scheduler::new(SchedulerOptions {
        config: config.clone(),
        registry: registry.clone(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(EmbeddedActuator(cluster)),
        clock: Arc::new(FakeClock::new()),
        sink: Arc::new(Collect::default()),
        seed: Some(0),
        framework_metrics: None,
    })?;
    let mut out = String::new();
    for p in &config.profiles {
        let fwk = &scheduler.profiles()[&p.scheduler_name];
        writeln!(out, "pipeline of profile {:?}:", p.scheduler_name)?;
        for (point, plugins) in fwk.describe() {
            if !plugins.is_empty() {
                writeln!(out, "  {point}: {}", plugins.join(", "))?;
            }
        }
    }
    Ok(out)
}
