//! The embedded target: Convoy's real scheduler (`run_leader`, the live
//! loop, on a multi-threaded runtime with the real clock) against an
//! [`EmbeddedCluster`], with no API server. The ops create nodes,
//! namespaces, pods and the other objects the scheduler reads in the
//! cluster while the scheduler runs; binds are observed on the scheduler's
//! own update stream, as upstream's collector observes its pod informer,
//! and failed attempts on its decision sink.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoy_api::{ClusterObject, ClusterUpdate, PodKey, RealClock};
use convoy_embedded::{EmbeddedBinder, EmbeddedCluster, Objects};
use convoy_scheduler::decision::{Decision, DecisionSink, GroupDecision, Outcome};
use convoy_scheduler::{Scheduler, SchedulerOptions};
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::ObjectMeta;
use serde_json::Value;

use crate::any::{
    EmbeddedObject, embedded_object, embedded_scope, is_crd, manifest_namespace, type_of,
};
use crate::churn::Churner;
use crate::config::Stage;
use crate::labels::Selector;
use crate::measure::Window;
use crate::measure::evictions::Evictions;
use crate::measure::throughput::SampleInterval;
use crate::objects::{PodFactory, build_nodes, literal_object, render_objects};
use crate::plan::{AnyStep, ChurnStep, Plan, PodsStep, Step};
use crate::progress::Progress;
use crate::tracker::{Created, PodTracker, selected_pods};

/// Requests in flight in a steady state (the embedded cluster answers at
/// once, so this only bounds the futures).
const CONCURRENCY: usize = 64;

/// How a run on the embedded target behaves.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// How measured windows are cut into samples.
    pub sample_interval: SampleInterval,
    /// How long a wait for pods (`createPods`, `barrier`, `deletePods`) may
    /// take (upstream: 10 minutes).
    pub timeout: Duration,
    /// Worker threads of the runtime the scheduler runs on.
    pub worker_threads: usize,
    /// Print the live progress line on stderr.
    pub progress: bool,
    /// `--prepare` manifests, created before the first op (CRDs are
    /// accepted and ignored).
    pub prepare: Vec<Value>,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            sample_interval: SampleInterval::Auto,
            timeout: Duration::from_secs(600),
            worker_threads: 2,
            progress: false,
            prepare: Vec::new(),
        }
    }
}

/// Why a workload failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The scheduler configuration could not be loaded or built.
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

/// What a workload measured on the embedded target.
#[derive(Debug, Clone)]
pub struct EmbeddedOutcome {
    /// Measured windows.
    pub windows: Vec<Window>,
    /// Bound pods removed by others (see [`crate::measure::evictions`]).
    pub evictions: Evictions,
}

/// Runs one workload on a fresh embedded cluster and scheduler, returning
/// its measured windows and evictions.
pub fn run(plan: &Plan, opts: &EmbeddedOptions) -> Result<EmbeddedOutcome, RunError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.worker_threads.max(1))
        .thread_name("convoy-bench")
        .enable_all()
        .build()
        .map_err(|e| RunError::Scheduler(format!("starting the runtime: {e}")))?;
    let result = rt.block_on(run_async(plan, opts));
    rt.shutdown_timeout(Duration::from_secs(5));
    result
}

async fn run_async(plan: &Plan, opts: &EmbeddedOptions) -> Result<EmbeddedOutcome, RunError> {
    let config = convoy_scheduler::load_config(plan.scheduler_config.as_deref())
        .map_err(|e| RunError::Scheduler(e.to_string()))?;
    let scheduler_name = config.profiles[0].scheduler_name.clone();
    let (cluster, rx) = EmbeddedCluster::new(Objects::default());
    let tracker = Arc::new(Tracker::default());
    let attempts = Arc::new(Attempts { last_failure: Mutex::default(), tracker: tracker.clone() });
    let scheduler = Scheduler::new(SchedulerOptions {
        config,
        registry: convoy_scheduler::registry(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(convoy_embedded::EmbeddedActuator(cluster.clone())),
        clock: Arc::new(RealClock),
        sink: attempts.clone(),
        seed: None,
        framework_metrics: None,
    })
    .map_err(|e| RunError::Scheduler(e.to_string()))?;
    let observer = tracker.clone();
    let updates =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|u| (u, rx)) })
            .inspect(move |u| observer.observe(u));
    let (_leader_tx, leader_rx) = watch::channel(true);
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let loop_task = tokio::spawn(scheduler.clone().run_leader(updates, leader_rx, async {
        let _ = stop_rx.await;
    }));
    // Let the loop see the initial sync and start leading (it polls every
    // 50 ms until then); nothing is measured yet.
    while !scheduler.synced().load(std::sync::atomic::Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;

    let progress = opts.progress.then(|| {
        let t = tracker.clone();
        Progress::start(
            &plan.name,
            Arc::new(move || {
                let s = t.state.lock();
                (s.binds_total, s.pending())
            }),
        )
    });
    let mut exec = Exec {
        cluster,
        tracker,
        attempts,
        scheduler_name,
        opts: opts.clone(),
        serial: 0,
        created: HashMap::new(),
        namespaces: BTreeSet::new(),
        windows: Vec::new(),
        churns: Vec::new(),
        pod_groups: Default::default(),
    };
    let mut result = exec.prepare(&opts.prepare).map_err(RunError::Prepare);
    if result.is_ok() {
        for (i, step) in plan.steps.iter().enumerate() {
            if let Err(message) = exec.step(step).await {
                let op = plan.origins.get(i).copied().unwrap_or(i);
                result = Err(RunError::Op { op, message });
                break;
            }
        }
    }
    if result.is_ok() && exec.tracker.state.lock().window.is_some() {
        result = Err(RunError::UnfinishedWindow);
    }
    for churn in exec.churns.drain(..) {
        churn.abort();
    }
    drop(progress);
    let _ = stop_tx.send(());
    let _ = loop_task.await;
    let evictions = exec.tracker.state.lock().evictions;
    result.map(|()| EmbeddedOutcome { windows: exec.windows, evictions })
}

/// Keeps the last failure, to explain a timeout, marks pods attempted
/// (a failed cycle: what the scheduler would report as
/// `PodScheduled=False` to an API server) and hands group cycles to the
/// group metrics.
#[derive(Debug)]
struct Attempts {
    last_failure: Mutex<Option<(PodKey, String)>>,
    tracker: Arc<Tracker>,
}

impl DecisionSink for Attempts {
    fn record(&self, d: &Decision) {
        match &d.outcome {
            Outcome::Scheduled { .. } => {}
            Outcome::Unschedulable { message } | Outcome::Error { message } => {
                *self.last_failure.lock() = Some((d.pod.clone(), message.clone()));
                self.tracker.state.lock().attempt(&d.pod);
            }
        }
    }

    fn record_group(&self, d: &GroupDecision) {
        self.tracker.state.lock().groups.cycle(d);
    }
}

/// What the scheduler's update stream says about pods.
#[derive(Debug, Default)]
struct Tracker {
    state: Mutex<PodTracker>,
}

impl Tracker {
    fn observe(&self, update: &ClusterUpdate) {
        let mut s = self.state.lock();
        match update {
            // Pods bound before they were created are not scheduling work.
            ClusterUpdate::PodAdded(p) => s.seen(p, false),
            ClusterUpdate::PodUpdated { new, .. } => s.seen(new, true),
            ClusterUpdate::PodDeleted(p) => s.deleted(p),
            _ => {}
        }
    }
}

struct Exec {
    cluster: Arc<EmbeddedCluster>,
    tracker: Arc<Tracker>,
    attempts: Arc<Attempts>,
    scheduler_name: String,
    opts: EmbeddedOptions,
    serial: u64,
    created: HashMap<String, Vec<Created>>,
    namespaces: BTreeSet<String>,
    windows: Vec<Window>,
    churns: Vec<tokio::task::JoinHandle<()>>,
    /// PodGroups created: (apiVersion, namespace, name).
    pod_groups: std::collections::HashSet<(String, String, String)>,
}

/// `churn` on the embedded target: nodes, pods and the kinds of
/// [`ClusterObject`].
struct EmbeddedChurner {
    cluster: Arc<EmbeddedCluster>,
    templates: Vec<Value>,
    namespace: String,
    scheduler_name: String,
    op_index: usize,
    serial: std::sync::atomic::AtomicU64,
    /// Pods it deletes are not evictions.
    own_deletes: crate::measure::evictions::OwnDeletes,
}

impl Churner for EmbeddedChurner {
    fn create(&self, template: usize) -> BoxFuture<'_, Option<String>> {
        let serial = self.serial.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let v = self.templates[template].clone();
        let ns = embedded_scope(&v).unwrap_or(false).then_some(self.namespace.as_str());
        let prefix = format!("churn-{}-", self.op_index);
        let created = match embedded_object(v, ns, &self.scheduler_name, &prefix, serial) {
            Ok(EmbeddedObject::Node(n)) => self
                .cluster
                .add_node(*n)
                .map(|n| n.metadata.name.clone())
                .map_err(|e| e.to_string()),
            Ok(EmbeddedObject::Pod(p)) => {
                self.cluster.add_pod(*p).map(|p| p.metadata.name.clone()).map_err(|e| e.to_string())
            }
            // Deleted by kind and key (`namespace/name`).
            Ok(EmbeddedObject::Object(o)) => {
                let key = o.key();
                self.cluster.apply_object(o).map(|()| Some(key)).map_err(|e| e.to_string())
            }
            // Checked when the churn op started: no PodGroups or templates.
            Ok(EmbeddedObject::PodGroup(_) | EmbeddedObject::ResourceClaimTemplate(_)) => Ok(None),
            Err(e) => Err(e),
        };
        Box::pin(std::future::ready(created.unwrap_or_else(|e| {
            tracing::warn!("churn: {e}");
            None
        })))
    }

    fn delete(&self, template: usize, name: String) -> BoxFuture<'_, ()> {
        let deleted = match type_of(&self.templates[template]) {
            Ok((_, "Node")) => self.cluster.delete_node(&name).map(drop),
            Ok((_, "Pod")) => {
                self.own_deletes.mark(&self.namespace, &name);
                self.cluster.delete_pod(&self.namespace, &name).map(drop)
            }
            Ok((_, kind)) => self.cluster.delete_object(kind, &name).map(drop),
            Err(_) => Ok(()),
        };
        if let Err(e) = deleted {
            tracing::warn!("churn: {e}");
        }
        Box::pin(std::future::ready(()))
    }
}

impl Exec {
    async fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::CreateNodes(s) => {
                for node in build_nodes(s, &mut self.serial)? {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    self.cluster.add_node(node).map_err(|e| e.to_string())?;
                    if let Some(t) = &s.csi_node {
                        let c = crate::volumes::csi_node(t, &name);
                        self.cluster
                            .apply_object(ClusterObject::CSINode(Arc::new(c)))
                            .map_err(|e| e.to_string())?;
                    }
                }
            }
            Step::CreateNamespaces(s) => {
                for ns in s.namespaces() {
                    self.add_namespace(ns)?;
                }
            }
            Step::CreatePods(s) if s.steady.is_some() => self.steady_state(s).await?,
            Step::CreatePods(s) => {
                // Built before the window opens: rendering is not measured.
                let pods = crate::objects::build_pods(s, &self.scheduler_name, &mut self.serial)?;
                self.ensure_namespace(&s.namespace)?;
                // Each pod's claim and volume, before the window opens
                // (see docs/benchmarks.md, "Volumes").
                if let Some(t) = &s.volumes {
                    for cv in crate::volumes::PodVolumes::new(t)?.all(&s.namespace, s.count) {
                        for o in [
                            ClusterObject::PersistentVolumeClaim(Arc::new(cv.claim)),
                            ClusterObject::PersistentVolume(Arc::new(cv.volume)),
                        ] {
                            self.cluster.apply_object(o).map_err(|e| e.to_string())?;
                        }
                    }
                }
                if s.collect_metrics {
                    self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
                }
                let created = self.created.entry(s.namespace.clone()).or_default();
                for pod in pods {
                    created.push(Created::of(&pod));
                    self.cluster.add_pod(pod).map_err(|e| e.to_string())?;
                }
                if !s.skip_wait {
                    self.wait_scheduled(std::slice::from_ref(&s.namespace), &Selector::default())
                        .await?;
                }
                if s.collect_metrics {
                    self.stop_window()?;
                }
            }
            Step::CreateAny(s) => self.create_any(s, false)?,
            Step::CreatePodGroups(s) => self.create_any(s, true)?,
            Step::Churn(s) => self.churn(s)?,
            Step::Barrier { namespaces, selector, stage: Stage::Scheduled } => {
                self.wait_scheduled(namespaces, selector).await?;
            }
            Step::Barrier { namespaces, selector, stage: Stage::Attempted } => {
                self.wait_attempted(namespaces, selector).await?;
            }
            Step::Sleep(d) => tokio::time::sleep(*d).await,
            Step::DeletePods { namespace, selector, skip_wait, per_second } => {
                let victims: Vec<String> = {
                    let list = self.created.entry(namespace.clone()).or_default();
                    let (gone, keep) = std::mem::take(list)
                        .into_iter()
                        .partition(|c| selector.matches(c.labels.as_ref()));
                    *list = keep;
                    gone.into_iter().map(|c: Created| c.name).collect()
                };
                for name in &victims {
                    self.delete_pod(namespace, name)?;
                    if *per_second > 0 {
                        tokio::time::sleep(Duration::from_secs_f64(1.0 / f64::from(*per_second)))
                            .await;
                    }
                }
                if !skip_wait {
                    let keys: Vec<PodKey> =
                        victims.iter().map(|n| PodKey::new(namespace, n)).collect();
                    self.wait_until("deleted pods to disappear", || {
                        let s = self.tracker.state.lock();
                        let left = keys.iter().filter(|k| s.present.contains(*k)).count();
                        (left == 0, format!("{left} of {} still present", keys.len()))
                    })
                    .await?;
                }
            }
            Step::StartCollecting { name, namespaces, selector } => {
                self.start_window(name.clone(), namespaces.clone(), Some(selector.clone()))?;
            }
            Step::StopCollecting => self.stop_window()?,
            Step::AllocResourceClaims { namespace } => {
                self.alloc_resource_claims(namespace.as_deref()).await?
            }
            Step::CreateGpuJobs(s) => {
                self.ensure_namespace(&s.namespace)?;
                if s.collect_metrics {
                    self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
                }
                let own = self.tracker.state.lock().own_deletes.clone();
                let target = crate::gpu::EmbeddedTarget(self.cluster.clone(), own);
                crate::gpu::run_jobs(s, &target, &self.scheduler_name).await?;
                if s.collect_metrics {
                    self.stop_window()?;
                }
            }
        }
        Ok(())
    }

    /// `--prepare`: CRDs are ignored (the embedded cluster serves no
    /// API), other objects are created as `createAny` creates them.
    fn prepare(&mut self, manifests: &[Value]) -> Result<(), String> {
        for v in manifests {
            if is_crd(v) {
                let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
                tracing::debug!("prepare: CRD {name} ignored on the embedded target");
                continue;
            }
            let ns = manifest_namespace(v)?;
            if let Some(ns) = &ns {
                self.ensure_namespace(ns)?;
            }
            self.tracker.state.lock().groups.register([v], ns.as_deref());
            self.create_object(v.clone(), ns.as_deref(), "prepare-")?;
        }
        Ok(())
    }

    fn create_object(&mut self, v: Value, ns: Option<&str>, prefix: &str) -> Result<(), String> {
        self.serial += 1;
        match embedded_object(v, ns, &self.scheduler_name, prefix, self.serial)? {
            EmbeddedObject::Node(n) => self.cluster.add_node(*n).map(drop),
            EmbeddedObject::Pod(p) => {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                self.ensure_namespace(&ns)?;
                self.created.entry(ns).or_default().push(Created::of(&p));
                self.cluster.add_pod(*p).map(drop)
            }
            EmbeddedObject::PodGroup(g) => return self.add_pod_group(g),
            EmbeddedObject::ResourceClaimTemplate(t) => {
                self.cluster.apply_resource_claim_template(*t).map(drop)
            }
            EmbeddedObject::Object(ClusterObject::Namespace(ns)) => {
                return self.add_namespace(Namespace::clone(&ns));
            }
            EmbeddedObject::Object(o) => self.cluster.apply_object(o),
        }
        .map_err(|e| e.to_string())
    }

    /// Creates the namespace unless it exists; as upstream's
    /// `createNamespaceIfNotPresent`, an existing one is kept as it is.
    /// The scheduler sees it (`ObjectApplied`): its labels are what pod
    /// affinity's `namespaceSelector` matches.
    fn add_namespace(&mut self, ns: Namespace) -> Result<(), String> {
        let name = ns.metadata.name.clone().unwrap_or_default();
        if self.namespaces.contains(&name) {
            return Ok(());
        }
        self.cluster
            .apply_object(ClusterObject::Namespace(Arc::new(ns)))
            .map_err(|e| format!("creating namespace {name}: {e}"))?;
        self.namespaces.insert(name);
        Ok(())
    }

    /// Creates a namespace with no labels unless it exists.
    fn ensure_namespace(&mut self, name: &str) -> Result<(), String> {
        if self.namespaces.contains(name) {
            return Ok(());
        }
        self.add_namespace(Namespace {
            metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
            ..Default::default()
        })
    }

    /// Deletes a pod as the API server does: one with finalizers is only
    /// marked (`deletionTimestamp`, grace period 0) and stays until they
    /// are removed, which nothing here does (upstream's
    /// SchedulingDeletedPodsWithFinalizers relies on that).
    fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), String> {
        let Some(pod) = self.cluster.pod(namespace, name) else {
            return Err(format!("pod {namespace}/{name} not found"));
        };
        self.tracker.state.lock().own_deletes.mark(namespace, name);
        if pod.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
            return self.cluster.delete_pod(namespace, name).map(drop).map_err(|e| e.to_string());
        }
        if pod.metadata.deletion_timestamp.is_some() {
            return Ok(());
        }
        let mut marked = Pod::clone(&pod);
        marked.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        marked.metadata.deletion_grace_period_seconds = Some(0);
        self.cluster.update_pod(marked).map(drop).map_err(|e| e.to_string())
    }

    /// Adds a PodGroup; as the API server, refuses one whose name is
    /// taken (the embedded cluster itself would replace it).
    fn add_pod_group(&mut self, g: convoy_embedded::PodGroupObject) -> Result<(), String> {
        let key = (g.api_version.clone(), g.namespace.clone(), g.name.clone());
        if self.pod_groups.contains(&key) {
            return Err(format!(
                "PodGroup {}/{} ({}) already exists",
                g.namespace, g.name, g.api_version
            ));
        }
        self.cluster.apply_pod_group(&g.object).map_err(|e| e.to_string())?;
        self.pod_groups.insert(key);
        Ok(())
    }

    /// `createAny` and `createPodGroups` (`pod_groups`: PodGroups only,
    /// created as `v1beta1`).
    fn create_any(&mut self, s: &AnyStep, pod_groups: bool) -> Result<(), String> {
        let mut objects = render_objects(s)?;
        if pod_groups {
            let replaced = crate::any::as_pod_groups(&mut objects)?;
            crate::any::log_pod_groups(&replaced, &objects, true);
        }
        if let Some(ns) = &s.namespace {
            self.ensure_namespace(ns)?;
        }
        let prefix = format!("object-{}-", s.op_index);
        self.tracker.state.lock().groups.register(&objects, s.namespace.as_deref());
        for v in objects {
            self.create_object(v, s.namespace.as_deref(), &prefix)?;
        }
        Ok(())
    }

    /// `churn`: starts the background task (aborted when the workload ends).
    fn churn(&mut self, s: &ChurnStep) -> Result<(), String> {
        let templates: Vec<Value> =
            s.templates.iter().map(literal_object).collect::<Result<_, _>>()?;
        for t in &templates {
            let (a, k) = type_of(t)?;
            if k == "PodGroup" || k == "ResourceClaimTemplate" {
                return Err(format!(
                    "churn: kind {k} ({a}) is not supported on the embedded target; run against \
                     an API server with --kubeconfig"
                ));
            }
            embedded_scope(t).map_err(|e| format!("churn: {e}"))?;
        }
        self.ensure_namespace(&s.namespace)?;
        let churner = EmbeddedChurner {
            cluster: self.cluster.clone(),
            templates,
            namespace: s.namespace.clone(),
            scheduler_name: self.scheduler_name.clone(),
            op_index: s.op_index,
            serial: Default::default(),
            own_deletes: self.tracker.state.lock().own_deletes.clone(),
        };
        let n = s.templates.len();
        self.churns.push(tokio::spawn(crate::churn::run(churner, n, s.mode, s.interval)));
        Ok(())
    }

    /// `createPods` with `steadyState`.
    async fn steady_state(&mut self, s: &PodsStep) -> Result<(), String> {
        let duration = s.steady.expect("checked by the caller");
        let mut factory = PodFactory::new(s, &self.scheduler_name);
        self.ensure_namespace(&s.namespace)?;
        if s.collect_metrics {
            self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
        }
        let cluster = &self.cluster;
        let outcome = crate::steady::run(
            &self.tracker.state,
            &s.namespace,
            &mut factory,
            &mut self.serial,
            s.count,
            duration,
            CONCURRENCY,
            |pod: Pod| {
                std::future::ready(cluster.add_pod(pod).map(drop).map_err(|e| e.to_string()))
            },
            |key: PodKey| {
                std::future::ready(
                    cluster
                        .delete_pod(&key.namespace, &key.name)
                        .map(drop)
                        .map_err(|e| e.to_string()),
                )
            },
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

    fn start_window(
        &mut self,
        name: String,
        namespaces: Vec<String>,
        selector: Option<Selector>,
    ) -> Result<(), String> {
        self.tracker.state.lock().start_window(name, namespaces, selector)
    }

    /// `allocResourceClaims` (see [`crate::dra`]): the claims' allocations
    /// are applied to the embedded cluster (the scheduler sees them as
    /// claim updates).
    async fn alloc_resource_claims(&mut self, namespace: Option<&str>) -> Result<(), String> {
        let mut state = crate::dra::DraState { nodes: self.cluster.nodes(), ..Default::default() };
        for o in self.cluster.objects() {
            match o {
                ClusterObject::ResourceSlice(s) => state.slices.push(s),
                ClusterObject::DeviceClass(c) => state.classes.push(c),
                ClusterObject::ResourceClaim(c) => state.claims.push(c),
                ClusterObject::DeviceTaintRule(r) => state.taint_rules.push(r),
                _ => {}
            }
        }
        // In name order, as an API server lists them.
        state.claims.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        state.nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let claims = crate::dra::allocate_claims(&state, namespace)
            .map_err(|e| format!("allocResourceClaims: {e}"))?;
        tracing::info!("allocResourceClaims: allocated {} ResourceClaims", claims.len());
        for c in claims {
            self.cluster
                .apply_object(ClusterObject::ResourceClaim(Arc::new(c)))
                .map_err(|e| format!("allocResourceClaims: {e}"))?;
        }
        Ok(())
    }

    fn stop_window(&mut self) -> Result<(), String> {
        let w = self.tracker.state.lock().stop_window(self.opts.sample_interval)?;
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
        let selected: Vec<(&String, &Vec<Created>)> =
            self.created.iter().filter(|(ns, _)| all || namespaces.contains(ns)).collect();
        let everything = *selector == Selector::default();
        let keys: Vec<PodKey> = if everything {
            Vec::new()
        } else {
            selected
                .iter()
                .flat_map(|(ns, pods)| {
                    pods.iter()
                        .filter(|c| selector.matches(c.labels.as_ref()))
                        .map(|c| PodKey::new(ns, &c.name))
                })
                .collect()
        };
        let want: usize =
            if everything { selected.iter().map(|(_, p)| p.len()).sum() } else { keys.len() };
        self.wait_until("pods to be scheduled", || {
            let s = self.tracker.state.lock();
            let got = if everything {
                selected
                    .iter()
                    .map(|(ns, _)| s.bound_per_ns.get(ns.as_str()).copied().unwrap_or(0))
                    .sum()
            } else {
                keys.iter().filter(|k| s.bound.contains(*k)).count()
            };
            (got >= want, format!("{got}/{want} scheduled"))
        })
        .await
    }

    /// Waits until every pod the benchmark created in `namespaces` (all when
    /// empty) that matches `selector` is bound or was attempted: it carries
    /// a `PodScheduled` condition (gated pods get one when created, as
    /// from the API server), or the scheduler reported a failed cycle for
    /// it (see [`Attempts`]).
    async fn wait_attempted(
        &self,
        namespaces: &[String],
        selector: &Selector,
    ) -> Result<(), String> {
        let keys = selected_pods(&self.created, namespaces, selector);
        self.wait_until("pods to be attempted", || {
            let s = self.tracker.state.lock();
            let got = keys.iter().filter(|k| s.is_attempted(k)).count();
            (got >= keys.len(), format!("{got}/{} attempted", keys.len()))
        })
        .await
    }

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
                let last = match self.attempts.last_failure.lock().as_ref() {
                    Some((pod, m)) => format!("; last failure: {pod}: {m}"),
                    None => String::new(),
                };
                return Err(format!(
                    "timed out after {:?} waiting for {what}: {progress}{last}",
                    self.opts.timeout
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::plan::{NamespacesStep, TemplateSource};

    fn exec(cluster: Arc<EmbeddedCluster>) -> Exec {
        let tracker = Arc::new(Tracker::default());
        Exec {
            cluster,
            attempts: Arc::new(Attempts {
                last_failure: Mutex::default(),
                tracker: tracker.clone(),
            }),
            tracker,
            scheduler_name: "convoy-scheduler".into(),
            opts: EmbeddedOptions::default(),
            serial: 0,
            created: HashMap::new(),
            namespaces: BTreeSet::new(),
            windows: Vec::new(),
            churns: Vec::new(),
            pod_groups: Default::default(),
        }
    }

    fn labelled(team: &str) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                labels: Some(BTreeMap::from([("team".to_string(), team.to_string())])),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The namespaces the cluster holds, with their `team` label.
    fn namespaces(cluster: &EmbeddedCluster) -> BTreeMap<String, Option<String>> {
        cluster
            .objects()
            .into_iter()
            .filter_map(|o| match o {
                ClusterObject::Namespace(ns) => Some((
                    ns.metadata.name.clone().unwrap_or_default(),
                    ns.metadata.labels.as_ref().and_then(|l| l.get("team").cloned()),
                )),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn namespaces_reach_the_cluster_with_their_labels() {
        let (cluster, _updates) = EmbeddedCluster::new(Objects::default());
        let mut exec = exec(cluster.clone());
        let create = |names: &[&str], team: &str| {
            Step::CreateNamespaces(NamespacesStep {
                names: names.iter().map(|n| n.to_string()).collect(),
                template: Box::new(labelled(team)),
            })
        };
        exec.step(&create(&["team-0", "team-1"], "devops")).await.unwrap();
        // Pods in a namespace nobody created: created plain, as upstream's
        // createNamespaceIfNotPresent.
        let pods = PodsStep {
            op_index: 1,
            count: 1,
            namespace: "namespace-1".into(),
            template: TemplateSource::Builtin,
            params: Default::default(),
            collect_metrics: false,
            skip_wait: true,
            steady: None,
            volumes: None,
        };
        exec.step(&Step::CreatePods(pods)).await.unwrap();
        // An existing namespace is kept as it is.
        exec.step(&create(&["team-1", "team-2"], "qa")).await.unwrap();
        let want = BTreeMap::from([
            ("namespace-1".to_string(), None),
            ("team-0".to_string(), Some("devops".to_string())),
            ("team-1".to_string(), Some("devops".to_string())),
            ("team-2".to_string(), Some("qa".to_string())),
        ]);
        assert_eq!(namespaces(&cluster), want);
    }

    #[tokio::test]
    async fn deleting_a_pod_with_finalizers_only_marks_it() {
        let (cluster, _updates) = EmbeddedCluster::new(Objects::default());
        let exec = exec(cluster.clone());
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.finalizers = Some(vec!["test.k8s.io/finalizer".into()]);
        cluster.add_pod(pod.clone()).unwrap();
        pod.metadata.name = Some("q".into());
        pod.metadata.finalizers = None;
        cluster.add_pod(pod).unwrap();
        exec.delete_pod("ns", "p").unwrap();
        exec.delete_pod("ns", "q").unwrap();
        let p = cluster.pod("ns", "p").expect("kept until its finalizers are removed");
        assert!(p.metadata.deletion_timestamp.is_some());
        assert_eq!(p.metadata.deletion_grace_period_seconds, Some(0));
        assert!(cluster.pod("ns", "q").is_none());
        exec.delete_pod("ns", "p").unwrap();
        assert!(exec.delete_pod("ns", "q").unwrap_err().contains("not found"));
    }

    /// Feeds the cluster's updates so far to the tracker, as the
    /// scheduler's update stream does in a run.
    fn drain(exec: &Exec, rx: &mut tokio::sync::mpsc::UnboundedReceiver<ClusterUpdate>) {
        while let Ok(u) = rx.try_recv() {
            exec.tracker.observe(&u);
        }
    }

    #[tokio::test]
    async fn evictions_are_bound_pods_the_benchmark_did_not_delete() {
        let (cluster, mut rx) = EmbeddedCluster::new(Objects::default());
        let exec = exec(cluster.clone());
        for name in ["mine", "victim", "marked"] {
            let mut pod = Pod::default();
            pod.metadata.name = Some(name.into());
            pod.metadata.namespace = Some("ns".into());
            pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                node_name: Some("node-1".into()),
                ..Default::default()
            });
            cluster.add_pod(pod).unwrap();
        }
        drain(&exec, &mut rx);
        exec.tracker.state.lock().start_window("w".into(), vec!["ns".into()], None).unwrap();
        // The benchmark's delete (deletePods): not an eviction.
        exec.delete_pod("ns", "mine").unwrap();
        // A preemptor's: deleted by someone else.
        cluster.delete_pod("ns", "victim").unwrap();
        // Marked first (DisruptionTarget), then deleted.
        let mut marked = Pod::clone(&cluster.pod("ns", "marked").unwrap());
        marked.status = Some(k8s_openapi::api::core::v1::PodStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "DisruptionTarget".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        cluster.update_pod(marked).unwrap();
        cluster.delete_pod("ns", "marked").unwrap();
        drain(&exec, &mut rx);
        let w = exec.tracker.state.lock().stop_window(SampleInterval::Auto).unwrap();
        assert_eq!(w.evictions, 2);
        let e = exec.tracker.state.lock().evictions;
        assert_eq!(e, Evictions { total: 2, in_windows: 2, disruption_target: 1 });
    }

    #[tokio::test]
    async fn churn_creates_upstreams_preemptors_with_their_priority() {
        let (cluster, _rx) = EmbeddedCluster::new(Objects::default());
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/upstream/default_preemption/templates/pod-high-priority.yaml"
        ))
        .unwrap();
        let template = serde_saphyr::from_str::<Value>(&text).unwrap();
        let churner = EmbeddedChurner {
            cluster: cluster.clone(),
            templates: vec![template],
            namespace: "namespace-2".into(),
            scheduler_name: "convoy-scheduler".into(),
            op_index: 2,
            serial: Default::default(),
            own_deletes: Default::default(),
        };
        let a = churner.create(0).await.unwrap();
        let b = churner.create(0).await.unwrap();
        assert_ne!(a, b);
        let pod = cluster.pod("namespace-2", &a).unwrap();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.priority, Some(9999999));
        assert_eq!(spec.scheduler_name.as_deref(), Some("convoy-scheduler"));
        assert_eq!(spec.termination_grace_period_seconds, Some(0));
        churner.delete(0, b.clone()).await;
        assert!(cluster.pod("namespace-2", &b).is_none());
        assert!(churner.own_deletes.contains(&PodKey::new("namespace-2", &b)));
    }
}
