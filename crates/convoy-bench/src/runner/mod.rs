//! The runner: walks a workload's [`Plan`] once, step by step, whatever
//! the target. Everything a step does besides reaching the cluster is
//! written here once: the pods the benchmark created (what a `barrier` or
//! `deletePods` selects), namespaces created on first use, measured windows
//! (`collectMetrics`, `startCollectingMetrics`), the waits with their
//! timeout, steady states (`steady`) and background churn (`churn`).
//! What differs between the embedded cluster and an API server is the
//! `Target` trait, implemented by the targets (`targets/`).
//!
//! What a target observes goes to the pod tracker (`tracker`), which
//! the runner reads: the embedded target feeds it from the scheduler's
//! update stream, the API target from a pod watch.
//!
//! May import the plan and what builds objects from it (`plan`,
//! `objects`, `volumes`, `any`, `dra`, `gpu`'s job stream) and
//! [`crate::measure`]; never a target or the results.

pub(crate) mod churn;
pub(crate) mod steady;
mod target;
pub(crate) mod tracker;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoy_api::PodKey;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use serde_json::Value;

use crate::config::Stage;
use crate::labels::Selector;
use crate::measure::Window;
use crate::measure::evictions::Evictions;
use crate::measure::throughput::SampleInterval;
use crate::objects::{PodFactory, build_nodes, build_pods, literal_object, render_objects};
use crate::plan::{AnyStep, ChurnStep, Plan, PodsStep, Step, UpdateStep};
use crate::progress::Progress;
use crate::volumes::PodVolumes;
pub(crate) use target::Target;
use tracker::{Created, PodTracker, selected_pods};

/// Requests in flight in a steady state.
pub(crate) const CONCURRENCY: usize = 64;

/// How the runner behaves, whatever the target.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options<'a> {
    /// How measured windows are cut into samples.
    pub(crate) sample_interval: SampleInterval,
    /// How long a wait for pods may take.
    pub(crate) timeout: Duration,
    /// Print the live progress line on stderr.
    pub(crate) progress: bool,
    /// `--prepare` manifests, applied before the first step.
    pub(crate) prepare: &'a [Value],
}

/// Why a workload failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The scheduler configuration could not be loaded or built, or the
    /// target could not be started.
    #[error("scheduler: {0}")]
    Scheduler(String),
    /// An op failed.
    #[error("workloadTemplate[{op}]: {message}")]
    Op {
        /// Index of the op.
        op: usize,
        /// What went wrong.
        message: String,
    },
    /// A `--prepare` manifest could not be applied.
    #[error("prepare: {0}")]
    Prepare(String),
    /// Collection was started and never stopped.
    #[error("startCollectingMetrics without a matching stopCollectingMetrics")]
    UnfinishedWindow,
}

/// What a workload measured, whatever the target.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Measured windows.
    pub windows: Vec<Window>,
    /// Bound pods removed by others (see [`crate::measure::evictions`]).
    pub evictions: Evictions,
    /// Binds per node over the whole workload (deleted pods included).
    pub binds_per_node: std::collections::BTreeMap<String, usize>,
}

impl<'a> Options<'a> {
    /// The options of a run.
    pub(crate) fn new(
        sample_interval: SampleInterval,
        timeout: Duration,
        progress: bool,
        prepare: &'a [Value],
    ) -> Self {
        Self { sample_interval, timeout, progress, prepare }
    }
}

/// Runs `plan` against `target`, which feeds `tracker`: creates the CRDs
/// among the `--prepare` manifests, starts the scheduler (unless a
/// `startScheduler` step does), applies the other manifests, then runs
/// each step in turn. When the steps are
/// over, background churn is stopped, then the target; the evictions are
/// read last.
pub(crate) async fn run<T: Target>(
    plan: &Plan,
    target: &mut T,
    tracker: &Arc<Mutex<PodTracker>>,
    opts: Options<'_>,
) -> Result<Outcome, RunError> {
    // CRDs first, before the scheduler starts, so that its discovery finds
    // them at start (a plugin's custom kind is then usable at once; found
    // later, its pods would wait up to a discovery interval).
    let mut serial = 0;
    for v in opts.prepare.iter().filter(|v| crate::any::is_crd(v)) {
        if let Err(e) = target.prepare(v, &mut serial).await {
            target.stop().await;
            return Err(RunError::Prepare(e));
        }
    }
    if !plan.starts_scheduler_late()
        && let Err(e) = target.start_scheduler().await
    {
        target.stop().await;
        return Err(RunError::Scheduler(e));
    }
    let progress = opts.progress.then(|| {
        let t = tracker.clone();
        Progress::start(
            &plan.name,
            Arc::new(move || {
                let s = t.lock();
                (s.binds_total, s.pending())
            }),
        )
    });
    let mut runner = Runner {
        target,
        tracker,
        opts,
        serial,
        created: HashMap::new(),
        windows: Vec::new(),
        churns: Vec::new(),
    };
    let mut result = runner.prepare().await.map_err(RunError::Prepare);
    if result.is_ok() {
        for (i, step) in plan.steps.iter().enumerate() {
            if let Err(message) = runner.step(step).await {
                let op = plan.origins.get(i).copied().unwrap_or(i);
                result = Err(RunError::Op { op, message });
                break;
            }
        }
    }
    if result.is_ok() && tracker.lock().window.is_some() {
        result = Err(RunError::UnfinishedWindow);
    }
    for churn in runner.churns.drain(..) {
        churn.abort();
    }
    drop(progress);
    let windows = runner.windows;
    target.stop().await;
    let (evictions, binds_per_node) = {
        let mut t = tracker.lock();
        (t.evictions, std::mem::take(&mut t.binds_per_node))
    };
    result.map(|()| Outcome { windows, evictions, binds_per_node })
}

/// One workload's bookkeeping over its target.
struct Runner<'a, T> {
    target: &'a mut T,
    tracker: &'a Mutex<PodTracker>,
    opts: Options<'a>,
    /// Numbers generated names across the workload.
    serial: u64,
    /// The pods the benchmark created and has not deleted, per namespace.
    created: HashMap<String, Vec<Created>>,
    windows: Vec<Window>,
    churns: Vec<tokio::task::JoinHandle<()>>,
}

impl<T: Target> Runner<'_, T> {
    async fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::CreateNodes(s) => {
                let nodes = build_nodes(s, &mut self.serial)?;
                let csi_nodes = match &s.csi_node {
                    Some(t) => nodes
                        .iter()
                        .map(|n| {
                            crate::volumes::csi_node(t, n.metadata.name.as_deref().unwrap_or(""))
                        })
                        .collect(),
                    None => Vec::new(),
                };
                self.target.create_nodes(nodes, csi_nodes).await?;
            }
            Step::CreateNamespaces(s) => {
                for ns in s.namespaces() {
                    self.target.add_namespace(ns).await?;
                }
            }
            Step::CreatePods(s) if s.steady.is_some() => self.steady_state(s).await?,
            Step::CreatePods(s) => self.create_pods(s).await?,
            Step::CreateAny(s) => self.create_any(s, false).await?,
            Step::CreatePodGroups(s) => self.create_any(s, true).await?,
            Step::UpdateAny(s) => self.update_any(s).await?,
            Step::Churn(s) => self.churn(s).await?,
            Step::Barrier { namespaces, selector, stage: Stage::Scheduled } => {
                self.wait_scheduled(namespaces, selector).await?;
            }
            Step::Barrier { namespaces, selector, stage: Stage::Attempted } => {
                self.wait_attempted(namespaces, selector).await?;
            }
            Step::Sleep(d) => tokio::time::sleep(*d).await,
            Step::DeletePods { namespace, selector, skip_wait, per_second } => {
                self.delete_pods(namespace, selector, *skip_wait, *per_second).await?;
            }
            Step::StartCollecting { name, namespaces, selector } => {
                self.start_window(name.clone(), namespaces.clone(), Some(selector.clone()))?;
            }
            Step::StopCollecting => self.stop_window()?,
            Step::AllocResourceClaims { namespace } => {
                self.alloc_resource_claims(namespace.as_deref()).await?;
            }
            Step::StartScheduler => self.target.start_scheduler().await?,
            Step::CreateGpuJobs(s) => {
                self.ensure_namespace(&s.namespace).await?;
                if s.collect_metrics {
                    self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
                }
                let dra = s.gpus_as == crate::gpu::GpusAs::DraDevices;
                let target = self.target.gpu_target(dra).await?;
                crate::gpu::run_jobs(s, &target, self.target.scheduler_name()).await?;
                if s.collect_metrics {
                    self.stop_window()?;
                }
            }
        }
        Ok(())
    }

    /// `--prepare`: each manifest in turn (CRDs aside: they were created
    /// before the scheduler started), before the first step.
    async fn prepare(&mut self) -> Result<(), String> {
        for v in self.opts.prepare.iter().filter(|v| !crate::any::is_crd(v)) {
            let pods = self.target.prepare(v, &mut self.serial).await?;
            self.remember(pods);
        }
        Ok(())
    }

    /// Adds pods the target created to those a `barrier` or `deletePods`
    /// selects.
    fn remember(&mut self, pods: Vec<(String, Created)>) {
        for (ns, pod) in pods {
            self.created.entry(ns).or_default().push(pod);
        }
    }

    /// Creates a namespace with no labels unless it exists.
    async fn ensure_namespace(&mut self, name: &str) -> Result<(), String> {
        self.target.add_namespace(plain_namespace(name)).await
    }

    /// `createPods`: the pods are built (and their claims and volumes
    /// created) before the window opens: rendering is not measured.
    async fn create_pods(&mut self, s: &PodsStep) -> Result<(), String> {
        let mut pods = build_pods(s, self.target.scheduler_name(), &mut self.serial)?;
        self.ensure_namespace(&s.namespace).await?;
        self.target.prepare_pods(&s.namespace, &mut pods).await?;
        // See docs/benchmarks.md, "Volumes".
        if let Some(t) = &s.volumes {
            let all = PodVolumes::new(t)?.all(&s.namespace, s.count);
            self.target.create_volumes(&s.namespace, all).await?;
        }
        if s.collect_metrics {
            self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
        }
        self.created.entry(s.namespace.clone()).or_default().extend(pods.iter().map(Created::of));
        self.target.create_pods(&s.namespace, pods).await?;
        if !s.skip_wait {
            self.wait_scheduled(std::slice::from_ref(&s.namespace), &Selector::default()).await?;
        }
        if s.collect_metrics {
            self.stop_window()?;
        }
        Ok(())
    }

    /// `createPods` with `steadyState`.
    async fn steady_state(&mut self, s: &PodsStep) -> Result<(), String> {
        let duration = s.steady.expect("checked by the caller");
        let mut factory = PodFactory::new(s, self.target.scheduler_name());
        self.ensure_namespace(&s.namespace).await?;
        if s.collect_metrics {
            self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
        }
        let target = &*self.target;
        let outcome = steady::run(
            self.tracker,
            &s.namespace,
            &mut factory,
            &mut self.serial,
            s.count,
            duration,
            CONCURRENCY,
            |pod: Pod| target.create_pod(pod),
            |key: PodKey| target.delete_pod(key),
        )
        .await?;
        tracing::info!(namespace = %s.namespace, replaced = outcome.replaced, "steady state over");
        let list = self.created.entry(s.namespace.clone()).or_default();
        list.retain(|c| !outcome.deleted.contains(&c.name));
        list.extend(outcome.live);
        if s.collect_metrics {
            self.stop_window()?;
        }
        Ok(())
    }

    /// `createAny` and `createPodGroups` (`pod_groups`: PodGroups only,
    /// created as `v1beta1`).
    async fn create_any(&mut self, s: &AnyStep, pod_groups: bool) -> Result<(), String> {
        let mut objects = render_objects(s)?;
        if pod_groups {
            let replaced = crate::any::as_pod_groups(&mut objects)?;
            crate::any::log_pod_groups(&replaced, &objects, self.target.runs_convoy());
        }
        if let Some(ns) = &s.namespace {
            self.ensure_namespace(ns).await?;
        }
        self.tracker.lock().groups.register(&objects, s.namespace.as_deref());
        let prefix = format!("object-{}-", s.op_index);
        let pods = self
            .target
            .create_objects(objects, s.namespace.as_deref(), &prefix, &mut self.serial)
            .await?;
        self.remember(pods);
        Ok(())
    }

    /// `updateAny`: each object replaces the object of its name (or its
    /// subresources), `per_second` a second as upstream's ticker paces them
    /// (the first after one interval), or all at once.
    async fn update_any(&mut self, s: &UpdateStep) -> Result<(), String> {
        let objects = render_objects(&s.any)?;
        let mut ticker = (s.per_second > 0).then(|| {
            let mut t = tokio::time::interval(Duration::from_secs(1) / s.per_second);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        if let Some(t) = ticker.as_mut() {
            t.tick().await;
        }
        for v in objects {
            if let Some(t) = ticker.as_mut() {
                t.tick().await;
            }
            self.target.update_object(v, s.any.namespace.as_deref(), &s.subresources).await?;
        }
        Ok(())
    }

    /// `churn`: starts the background task (aborted when the workload ends).
    async fn churn(&mut self, s: &ChurnStep) -> Result<(), String> {
        let templates: Vec<Value> =
            s.templates.iter().map(literal_object).collect::<Result<_, _>>()?;
        self.ensure_namespace(&s.namespace).await?;
        let churner = self.target.churner(templates, &s.namespace, s.op_index).await?;
        let n = s.templates.len();
        self.churns.push(tokio::spawn(churn::run(churner, n, s.mode, s.interval)));
        Ok(())
    }

    /// `deletePods`: the selected pods the benchmark created, at
    /// `per_second` (0: all at once).
    async fn delete_pods(
        &mut self,
        namespace: &str,
        selector: &Selector,
        skip_wait: bool,
        per_second: u32,
    ) -> Result<(), String> {
        let victims: Vec<PodKey> = {
            let list = self.created.entry(namespace.to_string()).or_default();
            let (gone, keep) =
                std::mem::take(list).into_iter().partition(|c| selector.matches(c.labels.as_ref()));
            *list = keep;
            gone.into_iter().map(|c: Created| PodKey::new(namespace, &c.name)).collect()
        };
        {
            let s = self.tracker.lock();
            for k in &victims {
                s.own_deletes.mark(&k.namespace, &k.name);
            }
        }
        if per_second > 0 {
            for key in victims.iter().cloned() {
                self.target.delete_pod(key).await?;
                tokio::time::sleep(Duration::from_secs_f64(1.0 / f64::from(per_second))).await;
            }
        } else {
            self.target.delete_pods(victims.clone()).await?;
        }
        if !skip_wait {
            self.wait_until("deleted pods to disappear", || {
                let s = self.tracker.lock();
                let left = victims.iter().filter(|k| s.present.contains(*k)).count();
                (left == 0, format!("{left} of {} still present", victims.len()))
            })
            .await?;
        }
        Ok(())
    }

    /// `allocResourceClaims` (see [`crate::dra`]).
    async fn alloc_resource_claims(&mut self, namespace: Option<&str>) -> Result<(), String> {
        let state = self.target.dra_state().await?;
        let claims = crate::dra::allocate_claims(&state, namespace)
            .map_err(|e| format!("allocResourceClaims: {e}"))?;
        tracing::info!("allocResourceClaims: allocating {} ResourceClaims", claims.len());
        self.target.write_claims(claims).await
    }

    fn start_window(
        &mut self,
        name: String,
        namespaces: Vec<String>,
        selector: Option<Selector>,
    ) -> Result<(), String> {
        self.tracker.lock().start_window(name, namespaces, selector)
    }

    fn stop_window(&mut self) -> Result<(), String> {
        let w = self.tracker.lock().stop_window(self.opts.sample_interval)?;
        self.windows.push(w);
        Ok(())
    }

    /// Waits until every pod the benchmark created in `namespaces` (all when
    /// empty) that matches `selector` is bound.
    async fn wait_scheduled(
        &self,
        namespaces: &[String],
        selector: &Selector,
    ) -> Result<(), String> {
        let all = namespaces.is_empty();
        let selected: Vec<(&String, usize)> = self
            .created
            .iter()
            .filter(|(ns, _)| all || namespaces.contains(ns))
            .map(|(ns, pods)| (ns, pods.len()))
            .collect();
        let per_namespace = T::COUNT_PER_NAMESPACE && *selector == Selector::default();
        let keys: Vec<PodKey> = if per_namespace {
            Vec::new()
        } else {
            selected_pods(&self.created, namespaces, selector)
        };
        let want: usize =
            if per_namespace { selected.iter().map(|(_, n)| n).sum() } else { keys.len() };
        let waited = self
            .wait_until("pods to be scheduled", || {
                let s = self.tracker.lock();
                let got = if per_namespace {
                    selected
                        .iter()
                        .map(|(ns, _)| s.bound_per_ns.get(ns.as_str()).copied().unwrap_or(0))
                        .sum()
                } else {
                    keys.iter().filter(|k| s.bound.contains(*k)).count()
                };
                (got >= want, format!("{got}/{want} scheduled"))
            })
            .await;
        let Err(e) = waited else { return Ok(()) };
        // Say which pods are left, as the cluster shows them (a bind the
        // tracker missed would show as a node name).
        let left: Vec<PodKey> = {
            let s = self.tracker.lock();
            keys.iter().filter(|k| !s.bound.contains(*k)).take(3).cloned().collect()
        };
        let seen = self.target.describe_pods(&left).await;
        if seen.is_empty() { Err(e) } else { Err(format!("{e}; not bound: {}", seen.join("; "))) }
    }

    /// Waits until every pod the benchmark created in `namespaces` (all when
    /// empty) that matches `selector` is bound or was attempted (see
    /// [`PodTracker::attempted`]).
    async fn wait_attempted(
        &self,
        namespaces: &[String],
        selector: &Selector,
    ) -> Result<(), String> {
        let keys = selected_pods(&self.created, namespaces, selector);
        self.wait_until("pods to be attempted", || {
            let s = self.tracker.lock();
            let got = keys.iter().filter(|k| s.is_attempted(k)).count();
            (got >= keys.len(), format!("{got}/{} attempted", keys.len()))
        })
        .await
    }

    /// Polls `done` every [`Target::POLL`] until it says so, or fails after
    /// the timeout with its last progress.
    async fn wait_until(
        &self,
        what: &str,
        mut done: impl FnMut() -> (bool, String),
    ) -> Result<(), String> {
        let deadline = Instant::now() + self.opts.timeout;
        loop {
            let (ok, progress) = done();
            if ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "timed out after {:?} waiting for {what}: {progress}{}",
                    self.opts.timeout,
                    self.target.timeout_note()
                ));
            }
            tokio::time::sleep(T::POLL).await;
        }
    }
}

/// A namespace with no labels (what a step creates on first use, as
/// upstream's `createNamespaceIfNotPresent`).
pub(crate) fn plain_namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
        ..Default::default()
    }
}

/// Runs `run` on a fresh multi-threaded runtime of `threads` workers,
/// shut down (5 s at most) when it is over.
pub(crate) fn block_on<R>(
    threads: usize,
    name: &str,
    run: impl Future<Output = Result<R, RunError>>,
) -> Result<R, RunError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name(name)
        .enable_all()
        .build()
        .map_err(|e| RunError::Scheduler(format!("starting the runtime: {e}")))?;
    let result = rt.block_on(run);
    rt.shutdown_timeout(Duration::from_secs(5));
    result
}
