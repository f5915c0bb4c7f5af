//! The embedded target: Convoy's real scheduler (`run_leader`, the live
//! loop, on a multi-threaded runtime with the real clock) against an
//! [`EmbeddedCluster`], with no API server. The runner's steps create
//! nodes, namespaces, pods and the other objects the scheduler reads in the
//! cluster while the scheduler runs; binds are observed on the scheduler's
//! own update stream, as upstream's collector observes its pod informer,
//! and failed attempts on its decision sink.

mod churn;
mod gpu;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use convoy_api::{ClusterObject, ClusterUpdate, PodKey, RealClock};
use convoy_config::SchedulerConfig;
use convoy_embedded::{EmbeddedBinder, EmbeddedCluster, Objects, PodGroupObject};
use convoy_scheduler::decision::{Decision, DecisionSink, GroupDecision, Outcome as Attempt};
use convoy_scheduler::run::Exit;
use convoy_scheduler::{Scheduler, SchedulerOptions};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::api::storage::v1::CSINode;
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use crate::any::{
    EmbeddedObject, embedded_object, embedded_scope, is_crd, manifest_namespace, type_of,
};
use crate::dra::DraState;
use crate::measure::throughput::SampleInterval;
use crate::plan::Plan;
use crate::runner::tracker::{Created, PodTracker};
use crate::runner::{self, Outcome, RunError, Target, plain_namespace};
use crate::volumes::ClaimAndVolume;
use churn::EmbeddedChurner;
use gpu::EmbeddedGpu;

/// The status subresource, which `updateAny` writes after the object.
const STATUS: &str = "status";

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
    /// accepted and ignored; custom resources of the registry's kinds are
    /// created).
    pub prepare: Vec<Value>,
    /// The plugins the scheduler is built with (`None`: Convoy's own,
    /// `convoy_scheduler::registry()`); a benchmark of your own plugins
    /// passes its registry, whose custom kinds the target then holds.
    pub registry: Option<convoy_api::Registry>,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            sample_interval: SampleInterval::Auto,
            timeout: Duration::from_secs(600),
            worker_threads: 2,
            progress: false,
            prepare: Vec::new(),
            registry: None,
        }
    }
}

/// Runs one workload on a fresh embedded cluster and scheduler, returning
/// its measured windows and evictions.
pub fn run(plan: &Plan, opts: &EmbeddedOptions) -> Result<Outcome, RunError> {
    runner::block_on(opts.worker_threads, "convoy-bench", run_async(plan, opts))
}

async fn run_async(plan: &Plan, opts: &EmbeddedOptions) -> Result<Outcome, RunError> {
    let registry = opts.registry.clone().unwrap_or_else(convoy_scheduler::registry);
    let config = convoy_scheduler::load_config_with(plan.scheduler_config.as_deref(), &registry)
        .map_err(|e| RunError::Scheduler(e.to_string()))?;
    let scheduler_name = config.profiles[0].scheduler_name.clone();
    let (cluster, rx) = EmbeddedCluster::new(Objects::default());
    let tracker = Arc::new(Mutex::new(PodTracker::default()));
    let attempts = Arc::new(Attempts { last_failure: Mutex::default(), tracker: tracker.clone() });
    let mut target = Embedded::new(cluster, tracker.clone(), attempts, scheduler_name);
    target.scheduler = Loop::Idle(Box::new(config), rx);
    target.registry = registry;
    let runner_opts =
        runner::Options::new(opts.sample_interval, opts.timeout, opts.progress, &opts.prepare);
    runner::run(plan, &mut target, &tracker, runner_opts).await
}

/// The scheduler's live loop.
enum Loop {
    /// Not started: its configuration, and the cluster's updates so far
    /// (the loop reads them all when it starts).
    Idle(Box<SchedulerConfig>, mpsc::UnboundedReceiver<ClusterUpdate>),
    /// Running: what keeps it leading, what stops it, and its task.
    Running {
        _leader: watch::Sender<bool>,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<Exit>,
    },
    /// Stopped, or never there (unit tests).
    Off,
}

/// Keeps the last failure, to explain a timeout, marks pods attempted
/// (a failed cycle: what the scheduler would report as
/// `PodScheduled=False` to an API server) and hands group cycles to the
/// group metrics.
#[derive(Debug)]
struct Attempts {
    last_failure: Mutex<Option<(PodKey, String)>>,
    tracker: Arc<Mutex<PodTracker>>,
}

impl DecisionSink for Attempts {
    fn record(&self, d: &Decision) {
        match &d.outcome {
            Attempt::Scheduled { .. } => {}
            Attempt::Unschedulable { message } | Attempt::Error { message } => {
                *self.last_failure.lock() = Some((d.pod.clone(), message.clone()));
                self.tracker.lock().attempt(&d.pod);
            }
        }
    }

    fn record_group(&self, d: &GroupDecision) {
        self.tracker.lock().groups.cycle(d);
    }
}

/// What the scheduler's update stream says about pods.
fn observe(tracker: &Mutex<PodTracker>, update: &ClusterUpdate) {
    let mut s = tracker.lock();
    match update {
        // Pods bound before they were created are not scheduling work.
        ClusterUpdate::PodAdded(p) => s.seen(p, false),
        ClusterUpdate::PodUpdated { new, .. } => s.seen(new, true),
        ClusterUpdate::PodDeleted(p) => s.deleted(p),
        _ => {}
    }
}

/// The embedded cluster as the runner's [`Target`].
struct Embedded {
    cluster: Arc<EmbeddedCluster>,
    tracker: Arc<Mutex<PodTracker>>,
    attempts: Arc<Attempts>,
    scheduler_name: String,
    namespaces: BTreeSet<String>,
    /// PodGroups created: (apiVersion, namespace, name).
    pod_groups: HashSet<(String, String, String)>,
    /// Whether a pod with finalizers was created: only then does a delete
    /// look the pod up first (see [`Embedded::delete`]).
    finalizers: AtomicBool,
    /// The scheduler's live loop.
    scheduler: Loop,
    /// The plugins it is built with, and the custom kinds they read.
    registry: convoy_api::Registry,
}

impl Embedded {
    fn new(
        cluster: Arc<EmbeddedCluster>,
        tracker: Arc<Mutex<PodTracker>>,
        attempts: Arc<Attempts>,
        scheduler_name: String,
    ) -> Self {
        Self {
            cluster,
            tracker,
            attempts,
            scheduler_name,
            namespaces: BTreeSet::new(),
            pod_groups: HashSet::new(),
            finalizers: AtomicBool::new(false),
            scheduler: Loop::Off,
            registry: convoy_scheduler::registry(),
        }
    }

    /// The registered custom kind `v` is an object of, if any.
    fn custom_kind(&self, v: &Value) -> Option<convoy_api::ApiInfo> {
        let kind = v.get("kind")?.as_str()?;
        let (group, version) = v.get("apiVersion")?.as_str()?.split_once('/')?;
        self.registry
            .kinds()
            .iter()
            .copied()
            .find(|api| api.kind == kind && api.group == group && api.readable.contains(&version))
    }

    /// Creates the namespace unless it exists. The scheduler sees it
    /// (`ObjectApplied`): its labels are what pod affinity's
    /// `namespaceSelector` matches.
    fn apply_namespace(&mut self, ns: Namespace) -> Result<(), String> {
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

    fn add_pod(&self, pod: Pod) -> Result<(), String> {
        if pod.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
            self.finalizers.store(true, Ordering::Relaxed);
        }
        self.cluster.add_pod(pod).map(drop).map_err(|e| e.to_string())
    }

    /// Deletes a pod as the API server does: one with finalizers is only
    /// marked (`deletionTimestamp`, grace period 0) and stays until they
    /// are removed, which nothing here does (upstream's
    /// SchedulingDeletedPodsWithFinalizers relies on that). The pod is
    /// looked up only when one with finalizers was created.
    fn delete(&self, namespace: &str, name: &str) -> Result<(), String> {
        if !self.finalizers.load(Ordering::Relaxed) {
            return self.cluster.delete_pod(namespace, name).map(drop).map_err(|e| e.to_string());
        }
        let Some(pod) = self.cluster.pod(namespace, name) else {
            return Err(format!("pod {namespace}/{name} not found"));
        };
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
    fn add_pod_group(&mut self, g: PodGroupObject) -> Result<(), String> {
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

    /// Creates one object of `createAny` or `--prepare`; returns the pod
    /// it created, if it is one.
    fn create_object(
        &mut self,
        v: Value,
        ns: Option<&str>,
        prefix: &str,
        serial: &mut u64,
    ) -> Result<Option<(String, Created)>, String> {
        *serial += 1;
        match embedded_object(v, ns, &self.scheduler_name, prefix, *serial)? {
            EmbeddedObject::Node(n) => self.cluster.add_node(*n).map(drop),
            EmbeddedObject::Pod(p) => {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                self.apply_namespace(plain_namespace(&ns))?;
                let created = Created::of(&p);
                self.add_pod(*p)?;
                return Ok(Some((ns, created)));
            }
            EmbeddedObject::PodGroup(g) => return self.add_pod_group(g).map(|()| None),
            EmbeddedObject::ResourceClaimTemplate(t) => {
                self.cluster.apply_resource_claim_template(*t).map(drop)
            }
            EmbeddedObject::Object(ClusterObject::Namespace(ns)) => {
                return self.apply_namespace(Namespace::clone(&ns)).map(|()| None);
            }
            EmbeddedObject::Object(o) => self.cluster.apply_object(o),
        }
        .map(|()| None)
        .map_err(|e| e.to_string())
    }
}

impl Target for Embedded {
    type Churner = EmbeddedChurner;
    type Gpu = EmbeddedGpu;
    const POLL: Duration = Duration::from_millis(1);
    const COUNT_PER_NAMESPACE: bool = true;

    fn scheduler_name(&self) -> &str {
        &self.scheduler_name
    }

    fn runs_convoy(&self) -> bool {
        true
    }

    async fn add_namespace(&mut self, ns: Namespace) -> Result<(), String> {
        self.apply_namespace(ns)
    }

    /// CRDs are ignored (the embedded cluster serves no API), other
    /// objects are created as `createAny` creates them.
    async fn prepare(
        &mut self,
        v: &Value,
        serial: &mut u64,
    ) -> Result<Vec<(String, Created)>, String> {
        if is_crd(v) {
            let name = v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            tracing::debug!("prepare: CRD {name} ignored on the embedded target");
            return Ok(Vec::new());
        }
        if let Some(api) = self.custom_kind(v) {
            if let Some(ns) = v.pointer("/metadata/namespace").and_then(Value::as_str) {
                self.apply_namespace(plain_namespace(ns))?;
            }
            let obj = convoy_api::CustomObject::new(api, v.clone());
            self.cluster.apply_custom(obj).map_err(|e| e.to_string())?;
            return Ok(Vec::new());
        }
        let ns = manifest_namespace(v)?;
        if let Some(ns) = &ns {
            self.apply_namespace(plain_namespace(ns))?;
        }
        self.tracker.lock().groups.register([v], ns.as_deref());
        Ok(self.create_object(v.clone(), ns.as_deref(), "prepare-", serial)?.into_iter().collect())
    }

    async fn create_nodes(
        &mut self,
        nodes: Vec<Node>,
        csi_nodes: Vec<CSINode>,
    ) -> Result<(), String> {
        let mut csi_nodes = csi_nodes.into_iter();
        for node in nodes {
            self.cluster.add_node(node).map_err(|e| e.to_string())?;
            if let Some(c) = csi_nodes.next() {
                self.cluster
                    .apply_object(ClusterObject::CSINode(Arc::new(c)))
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    async fn create_volumes(&mut self, _: &str, all: Vec<ClaimAndVolume>) -> Result<(), String> {
        for cv in all {
            for o in [
                ClusterObject::PersistentVolumeClaim(Arc::new(cv.claim)),
                ClusterObject::PersistentVolume(Arc::new(cv.volume)),
            ] {
                self.cluster.apply_object(o).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    fn create_pod(&self, pod: Pod) -> impl Future<Output = Result<(), String>> {
        std::future::ready(self.add_pod(pod))
    }

    fn delete_pod(&self, key: PodKey) -> impl Future<Output = Result<(), String>> {
        std::future::ready(self.delete(&key.namespace, &key.name))
    }

    async fn create_objects(
        &mut self,
        objects: Vec<Value>,
        namespace: Option<&str>,
        prefix: &str,
        serial: &mut u64,
    ) -> Result<Vec<(String, Created)>, String> {
        let mut pods = Vec::new();
        for v in objects {
            pods.extend(self.create_object(v, namespace, prefix, serial)?);
        }
        Ok(pods)
    }

    /// Nodes and pods, as upstream's `update.go` writes them to an API
    /// server: the object (or its `subresources`), then its status, two
    /// updates (see [`crate::any::updated_node`] and
    /// [`crate::any::updated_pod`]).
    async fn update_object(
        &mut self,
        object: Value,
        namespace: Option<&str>,
        subresources: &[String],
    ) -> Result<(), String> {
        if object["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            return Err("updateAny: the object has no metadata.name".into());
        }
        let e = |e: convoy_embedded::ClusterError| e.to_string();
        match embedded_object(object, namespace, &self.scheduler_name, "", 0)? {
            EmbeddedObject::Node(new) => {
                let name = new.metadata.name.clone().unwrap_or_default();
                let old =
                    self.cluster.node(&name).ok_or_else(|| format!("node {name} not found"))?;
                let node = crate::any::updated_node(&old, (*new).clone(), subresources)?;
                let node = self.cluster.update_node(node).map_err(e)?;
                let node = crate::any::updated_node(&node, *new, &[STATUS.into()])?;
                self.cluster.update_node(node).map(drop).map_err(e)
            }
            EmbeddedObject::Pod(new) => {
                let ns = new.metadata.namespace.clone().unwrap_or_default();
                let name = new.metadata.name.clone().unwrap_or_default();
                let old = self
                    .cluster
                    .pod(&ns, &name)
                    .ok_or_else(|| format!("pod {ns}/{name} not found"))?;
                let pod = crate::any::updated_pod(&old, (*new).clone(), subresources)?;
                let pod = self.cluster.update_pod(pod).map_err(e)?;
                let pod = crate::any::updated_pod(&pod, *new, &[STATUS.into()])?;
                self.cluster.update_pod(pod).map(drop).map_err(e)
            }
            _ => Err("updateAny: only Nodes and Pods are updated on the embedded target; run \
                      against an API server with --kubeconfig"
                .into()),
        }
    }

    /// Nodes, pods and the kinds of [`ClusterObject`]; not PodGroups or
    /// ResourceClaimTemplates.
    async fn churner(
        &mut self,
        templates: Vec<Value>,
        namespace: &str,
        op_index: usize,
    ) -> Result<EmbeddedChurner, String> {
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
        Ok(EmbeddedChurner {
            cluster: self.cluster.clone(),
            templates,
            namespace: namespace.to_string(),
            scheduler_name: self.scheduler_name.clone(),
            op_index,
            serial: Default::default(),
            own_deletes: self.tracker.lock().own_deletes.clone(),
        })
    }

    /// The cluster's objects, claims and nodes in name order, as an API
    /// server lists them.
    async fn dra_state(&self) -> Result<DraState, String> {
        let mut state = DraState { nodes: self.cluster.nodes(), ..Default::default() };
        for o in self.cluster.objects() {
            match o {
                ClusterObject::ResourceSlice(s) => state.slices.push(s),
                ClusterObject::DeviceClass(c) => state.classes.push(c),
                ClusterObject::ResourceClaim(c) => state.claims.push(c),
                ClusterObject::DeviceTaintRule(r) => state.taint_rules.push(r),
                _ => {}
            }
        }
        state.claims.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        state.nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(state)
    }

    /// Applied to the embedded cluster (the scheduler sees them as claim
    /// updates).
    async fn write_claims(&self, claims: Vec<ResourceClaim>) -> Result<(), String> {
        for c in claims {
            self.cluster
                .apply_object(ClusterObject::ResourceClaim(Arc::new(c)))
                .map_err(|e| format!("allocResourceClaims: {e}"))?;
        }
        Ok(())
    }

    async fn gpu_target(&self, _dra: bool) -> Result<EmbeddedGpu, String> {
        Ok(EmbeddedGpu(self.cluster.clone(), self.tracker.lock().own_deletes.clone()))
    }

    /// The scheduler's last failure.
    fn timeout_note(&self) -> String {
        match self.attempts.last_failure.lock().as_ref() {
            Some((pod, m)) => format!("; last failure: {pod}: {m}"),
            None => String::new(),
        }
    }

    /// Convoy's live loop, on the scheduler's own update stream (which
    /// feeds the tracker); returns once it leads, 100 ms after its initial
    /// sync (nothing is measured before). Nothing to start in unit tests.
    async fn start_scheduler(&mut self) -> Result<(), String> {
        let (config, rx) = match std::mem::replace(&mut self.scheduler, Loop::Off) {
            Loop::Idle(config, rx) => (config, rx),
            Loop::Off => return Ok(()),
            running @ Loop::Running { .. } => {
                self.scheduler = running;
                return Err("the scheduler is running already".into());
            }
        };
        let scheduler = Scheduler::new(SchedulerOptions {
            config: *config,
            registry: self.registry.clone(),
            binder: Arc::new(EmbeddedBinder(self.cluster.clone())),
            actuator: Arc::new(convoy_embedded::EmbeddedActuator(self.cluster.clone())),
            clock: Arc::new(RealClock),
            sink: self.attempts.clone(),
            seed: None,
            framework_metrics: None,
        })
        .map_err(|e| e.to_string())?;
        let observer = self.tracker.clone();
        let updates =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|u| (u, rx)) })
                .inspect(move |u| observe(&observer, u));
        let (leader, leader_rx) = watch::channel(true);
        let (stop, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(scheduler.clone().run_leader(updates, leader_rx, async {
            let _ = stop_rx.await;
        }));
        self.scheduler = Loop::Running { _leader: leader, stop, task };
        // Let the loop see the initial sync and start leading (it polls
        // every 50 ms until then).
        while !scheduler.synced().load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    }

    async fn stop(&mut self) {
        if let Loop::Running { _leader, stop, task } =
            std::mem::replace(&mut self.scheduler, Loop::Off)
        {
            let _ = stop.send(());
            let _ = task.await;
        }
    }
}
