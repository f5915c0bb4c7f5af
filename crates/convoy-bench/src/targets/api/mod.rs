//! The API-server target: a workload's plan run against a real
//! kube-apiserver. Nodes, namespaces and pods are created through the API
//! (64 requests in flight, client QPS/burst 5000), a scheduler runs as a
//! separate process (or, for [`SchedulerKind::Null`], as an in-process
//! binder with no logic; see [`scheduler`]), and binds are observed with a
//! pod watcher: the instant a pod is first seen with a `nodeName` is its
//! bind, as upstream's collector sees it in its pod informer.
//!
//! The caller provides a fresh API server per workload (as `compare`
//! does); this module only adds objects to it.

pub(crate) mod dynamic;
mod gpu;
pub mod priority;
pub mod scheduler;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use convoy_api::PodKey;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use serde_json::Value;

use crate::any::{complete, type_of};
use crate::dra::DraState;
use crate::measure::Window;
use crate::measure::evictions::Evictions;
use crate::measure::throughput::{SampleInterval, UPSTREAM_INTERVAL};
use crate::plan::Plan;
use crate::runner::tracker::{Created, PodTracker};
use crate::runner::{self, RunError, Target, plain_namespace};
use crate::volumes::ClaimAndVolume;
use dynamic::{Dynamic, DynamicChurner, Placement};
use gpu::ApiGpu;
use priority::PriorityBridge;
pub use scheduler::{SchedulerKind, Usage, default_convoy_binary, usage_items};

/// Requests in flight when creating, deleting or binding objects.
const CONCURRENCY: usize = 64;
/// Client QPS and burst of the benchmark, the schedulers and the binder.
const QPS: u32 = 5000;

/// How a run on the API-server target behaves.
#[derive(Debug, Clone)]
pub struct ApiOptions {
    /// Admin kubeconfig of the API server.
    pub kubeconfig: PathBuf,
    /// The scheduler under test.
    pub scheduler: SchedulerKind,
    /// The `convoy-scheduler` binary (default: beside the running executable).
    pub convoy_binary: Option<PathBuf>,
    /// The `kube-scheduler` binary (default: testenv's build).
    pub kube_scheduler_binary: Option<PathBuf>,
    /// How windows are sampled (upstream: 1 s).
    pub sample_interval: SampleInterval,
    /// Longest wait for pods.
    pub timeout: Duration,
    /// Print the live progress line on stderr.
    pub progress: bool,
    /// `--prepare` manifests, applied before the first op (CRDs waited
    /// for until `Established`).
    pub prepare: Vec<Value>,
}

impl ApiOptions {
    /// Options with upstream's 1 s samples and 10 minute timeout.
    pub fn new(kubeconfig: PathBuf, scheduler: SchedulerKind) -> Self {
        Self {
            kubeconfig,
            scheduler,
            convoy_binary: None,
            kube_scheduler_binary: None,
            sample_interval: SampleInterval::Fixed(UPSTREAM_INTERVAL),
            timeout: Duration::from_secs(600),
            progress: false,
            prepare: Vec::new(),
        }
    }
}

/// What a workload measured on the API-server target.
#[derive(Debug, Clone)]
pub struct ApiOutcome {
    /// Measured windows.
    pub windows: Vec<Window>,
    /// The scheduler process's resource use (`None` for the in-process
    /// null binder).
    pub usage: Option<Usage>,
    /// Bound pods removed by others (see [`crate::measure::evictions`]).
    pub evictions: Evictions,
    /// Binds per node over the whole workload (deleted pods included).
    pub binds_per_node: std::collections::BTreeMap<String, usize>,
}

/// Runs one workload against the API server of `opts.kubeconfig`.
pub fn run(plan: &Plan, opts: &ApiOptions) -> Result<ApiOutcome, RunError> {
    runner::block_on(2, "convoy-bench-api", run_async(plan, opts))
}

async fn run_async(plan: &Plan, opts: &ApiOptions) -> Result<ApiOutcome, RunError> {
    let sched_err = |e: String| RunError::Scheduler(e);
    let client = convoy_adapters::connect(Some(&opts.kubeconfig), QPS as f32, QPS)
        .await
        .map_err(|e| sched_err(format!("connecting: {e}")))?;
    let tracker = Arc::new(Mutex::new(PodTracker::default()));
    let synced = Arc::new(AtomicBool::new(false));
    let watch_task = tokio::spawn(watch_pods(client.clone(), tracker.clone(), synced.clone()));
    let started = Instant::now();
    while !synced.load(Ordering::Acquire) {
        if started.elapsed() > Duration::from_secs(30) {
            watch_task.abort();
            return Err(sched_err("the pod watch did not sync in 30s".into()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let workdir = match tempfile::Builder::new().prefix("convoy-bench-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            watch_task.abort();
            return Err(sched_err(format!("work directory: {e}")));
        }
    };
    let mut target = ApiServer {
        plan,
        opts,
        workdir,
        dynamic: Arc::new(Dynamic::new(client.clone())),
        client,
        tracker: tracker.clone(),
        scheduler: opts.scheduler,
        running: None,
        watch_task,
        usage: None,
        namespaces: HashSet::new(),
        priorities: Arc::default(),
    };
    let runner_opts =
        runner::Options::new(opts.sample_interval, opts.timeout, opts.progress, &opts.prepare);
    let outcome = runner::run(plan, &mut target, &tracker, runner_opts).await?;
    let usage = target.usage;
    Ok(ApiOutcome {
        windows: outcome.windows,
        usage,
        evictions: outcome.evictions,
        binds_per_node: outcome.binds_per_node,
    })
}

/// Feeds the tracker from a watch of every pod; `synced` once the initial
/// list is in.
async fn watch_pods(
    client: kube::Client,
    tracker: Arc<Mutex<PodTracker>>,
    synced: Arc<AtomicBool>,
) {
    let mut s = watcher(Api::<Pod>::all(client), watcher::Config::default()).boxed();
    while let Some(ev) = s.next().await {
        match ev {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                tracker.lock().seen(&p, true)
            }
            Ok(watcher::Event::Delete(p)) => tracker.lock().deleted(&p),
            Ok(watcher::Event::InitDone) => synced.store(true, Ordering::Release),
            Ok(watcher::Event::Init) => {}
            Err(e) => tracing::warn!("pod watch: {e}"),
        }
    }
}

/// The API server as the runner's [`Target`].
struct ApiServer<'a> {
    plan: &'a Plan,
    opts: &'a ApiOptions,
    /// The scheduler's configuration and log.
    workdir: tempfile::TempDir,
    client: kube::Client,
    dynamic: Arc<Dynamic>,
    tracker: Arc<Mutex<PodTracker>>,
    scheduler: SchedulerKind,
    /// The scheduler under test, stopped on drop.
    running: Option<scheduler::Running>,
    /// The pod watch that feeds the tracker.
    watch_task: tokio::task::JoinHandle<()>,
    /// The scheduler process's resource use, read when it is stopped.
    usage: Option<Usage>,
    /// Namespaces created (or found) by this workload.
    namespaces: HashSet<String>,
    /// Pod and PodGroup priorities on a server with the Priority admission
    /// plugin (see [`priority`]).
    priorities: Arc<PriorityBridge>,
}

impl Target for ApiServer<'_> {
    type Churner = DynamicChurner;
    type Gpu = ApiGpu;
    const POLL: Duration = Duration::from_millis(5);
    const COUNT_PER_NAMESPACE: bool = false;

    fn scheduler_name(&self) -> &str {
        self.scheduler.profile()
    }

    fn runs_convoy(&self) -> bool {
        self.scheduler == SchedulerKind::Convoy
    }

    /// One that exists already (409) is kept as it is.
    async fn add_namespace(&mut self, ns: Namespace) -> Result<(), String> {
        let name = ns.metadata.name.clone().unwrap_or_default();
        if self.namespaces.contains(&name) {
            return Ok(());
        }
        match Api::<Namespace>::all(self.client.clone()).create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(format!("creating namespace {name}: {e}")),
        }
        self.namespaces.insert(name);
        Ok(())
    }

    /// Applied in its own namespace, CRDs waited for until `Established`;
    /// its pods are not the benchmark's (a `barrier` does not wait for
    /// them).
    async fn prepare(&mut self, v: &Value, _: &mut u64) -> Result<Vec<(String, Created)>, String> {
        if let Some(ns) = v.pointer("/metadata/namespace").and_then(|n| n.as_str()) {
            self.add_namespace(plain_namespace(ns)).await?;
        }
        let mut v = v.clone();
        complete(&mut v, self.scheduler_name());
        self.tracker.lock().groups.register([&v], None);
        self.dynamic.prepare(&v).await?;
        Ok(Vec::new())
    }

    async fn create_nodes(
        &mut self,
        nodes: Vec<Node>,
        csi_nodes: Vec<CSINode>,
    ) -> Result<(), String> {
        create_all(Api::<Node>::all(self.client.clone()), nodes).await?;
        create_all(Api::<CSINode>::all(self.client.clone()), csi_nodes).await
    }

    /// As upstream's `CreatePodWithPersistentVolume`: the claim, its status
    /// (`Bound`; a create resets the status), the volume, its status.
    async fn create_volumes(
        &mut self,
        namespace: &str,
        all: Vec<ClaimAndVolume>,
    ) -> Result<(), String> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let pp = PostParams::default();
        futures::stream::iter(all)
            .map(|cv| {
                let (claims, volumes, pp) = (claims.clone(), volumes.clone(), pp.clone());
                async move {
                    let claim = cv.claim.metadata.name.clone().unwrap_or_default();
                    let volume = cv.volume.metadata.name.clone().unwrap_or_default();
                    let at = |what: &str, e: kube::Error| format!("{what} {volume}/{claim}: {e}");
                    claims.create(&pp, &cv.claim).await.map_err(|e| at("creating claim", e))?;
                    claims
                        .replace_status(&claim, &pp, &cv.claim)
                        .await
                        .map_err(|e| at("updating claim status", e))?;
                    volumes.create(&pp, &cv.volume).await.map_err(|e| at("creating volume", e))?;
                    volumes
                        .replace_status(&volume, &pp, &cv.volume)
                        .await
                        .map_err(|e| at("updating volume status", e))?;
                    Ok::<(), String>(())
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    }

    /// The pods go to the scheduler under test, with PriorityClasses where
    /// the server needs them.
    async fn prepare_pods(&self, namespace: &str, pods: &mut [Pod]) -> Result<(), String> {
        for p in pods.iter_mut() {
            p.spec.get_or_insert_with(Default::default).scheduler_name =
                Some(self.scheduler_name().into());
        }
        self.priorities.pods(&self.client, namespace, pods).await
    }

    /// With its PriorityClass where the server needs one.
    async fn create_pod(&self, pod: Pod) -> Result<(), String> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let mut pods = [pod];
        self.priorities.pods(&self.client, &namespace, &mut pods).await?;
        let [pod] = pods;
        Api::<Pod>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &pod)
            .await
            .map(drop)
            .map_err(|e| format!("creating {}: {e}", pod.metadata.name.unwrap_or_default()))
    }

    async fn create_pods(&self, namespace: &str, pods: Vec<Pod>) -> Result<(), String> {
        create_all(Api::<Pod>::namespaced(self.client.clone(), namespace), pods).await
    }

    /// With grace period 0: no kubelet confirms termination. One that is
    /// gone already is fine.
    fn delete_pod(&self, key: PodKey) -> impl Future<Output = Result<(), String>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        async move {
            let dp = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            match api.delete(&key.name, &dp).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(format!("deleting {}: {e}", key.name)),
            }
        }
    }

    async fn delete_pods(&self, keys: Vec<PodKey>) -> Result<(), String> {
        futures::stream::iter(keys)
            .map(|k| self.delete_pod(k))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    }

    /// Through the dynamic API (`CONCURRENCY` creates in flight), named by
    /// the API server (`generateName`).
    async fn create_objects(
        &mut self,
        mut objects: Vec<Value>,
        namespace: Option<&str>,
        _: &str,
        _: &mut u64,
    ) -> Result<Vec<(String, Created)>, String> {
        for v in &mut objects {
            complete(v, self.scheduler_name());
        }
        self.priorities.values(&self.client, namespace, &mut objects).await?;
        let dynamic = &self.dynamic;
        let created: Vec<Option<(String, Created)>> = futures::stream::iter(objects)
            .map(|v| async move {
                let (ns, name) = dynamic.create(&v, Placement::Strict(namespace)).await?;
                // Pods are tracked as createPods' are, so that a later
                // barrier or deletePods sees them (as on the embedded target).
                let pod = matches!(type_of(&v), Ok(("v1", "Pod"))).then(|| Created {
                    name,
                    labels: serde_json::from_value(v["metadata"]["labels"].clone()).ok(),
                });
                Ok::<_, String>(ns.zip(pod))
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await?;
        Ok(created.into_iter().flatten().collect())
    }

    /// Any kind, through the dynamic API; a pod that names no scheduler
    /// names the one under test, as when it was created.
    async fn update_object(
        &mut self,
        mut object: Value,
        namespace: Option<&str>,
        subresources: &[String],
    ) -> Result<(), String> {
        complete(&mut object, self.scheduler_name());
        self.dynamic.update(&object, namespace, subresources).await
    }

    /// Any kind, through the dynamic API.
    async fn churner(
        &mut self,
        mut templates: Vec<Value>,
        namespace: &str,
        _: usize,
    ) -> Result<DynamicChurner, String> {
        for t in &mut templates {
            complete(t, self.scheduler_name());
        }
        self.priorities.values(&self.client, Some(namespace), &mut templates).await?;
        let own = self.tracker.lock().own_deletes.clone();
        self.dynamic.clone().churner(templates, namespace.to_string(), own).await
    }

    /// Lists nodes, slices, classes, claims and DeviceTaintRules.
    async fn dra_state(&self) -> Result<DraState, String> {
        let c = &self.client;
        Ok(DraState {
            nodes: list_all::<Node>(c, "nodes").await?,
            slices: list_all::<ResourceSlice>(c, "ResourceSlices").await?,
            classes: list_all::<DeviceClass>(c, "DeviceClasses").await?,
            claims: list_all::<ResourceClaim>(c, "ResourceClaims").await?,
            taint_rules: list_all::<DeviceTaintRule>(c, "DeviceTaintRules").await?,
        })
    }

    /// Each allocation with `replace_status` (the claim's `status`
    /// subresource), as upstream's `UpdateStatus`.
    async fn write_claims(&self, claims: Vec<ResourceClaim>) -> Result<(), String> {
        let c = &self.client;
        futures::stream::iter(claims)
            .map(|claim| async move {
                let ns = claim.metadata.namespace.clone().unwrap_or_default();
                let name = claim.metadata.name.clone().unwrap_or_default();
                Api::<ResourceClaim>::namespaced(c.clone(), &ns)
                    .replace_status(&name, &PostParams::default(), &claim)
                    .await
                    .map(drop)
                    .map_err(|e| format!("allocResourceClaims: writing claim {ns}/{name}: {e}"))
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await
            .map(drop)
    }

    async fn gpu_target(&self, dra: bool) -> Result<ApiGpu, String> {
        let own = self.tracker.lock().own_deletes.clone();
        ApiGpu::start(self.client.clone(), self.dynamic.clone(), own, dra).await
    }

    /// The scheduler and its profile.
    fn timeout_note(&self) -> String {
        format!(" ({} {})", self.scheduler.name(), self.scheduler.profile())
    }

    /// Node, deletion and `PodScheduled` as the API server shows them (a
    /// bind the watch missed would show as a node name).
    async fn describe_pods(&self, keys: &[PodKey]) -> Vec<String> {
        let mut seen = Vec::new();
        for k in keys {
            seen.push(describe_pod(&self.client, k).await);
        }
        seen
    }

    /// As a process, or the null binder in process (see [`scheduler`]).
    async fn start_scheduler(&mut self) -> Result<(), String> {
        if self.running.is_some() {
            return Err("the scheduler is running already".into());
        }
        let running = scheduler::start(self.plan, self.opts, &self.client, self.workdir.path());
        self.running = Some(running.await?);
        Ok(())
    }

    /// Reads the scheduler's resource use, stops it, then the watch.
    async fn stop(&mut self) {
        if let Some(running) = self.running.take() {
            self.usage = running.usage();
        }
        self.watch_task.abort();
    }
}

async fn create_all<T>(api: Api<T>, objs: Vec<T>) -> Result<(), String>
where
    T: kube::Resource
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    futures::stream::iter(objs)
        .map(|o| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &o).await.map(|_| ()) }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// A pod as the API server shows it: node, deletion, `PodScheduled`.
async fn describe_pod(client: &kube::Client, key: &PodKey) -> String {
    let api: Api<Pod> = Api::namespaced(client.clone(), &key.namespace);
    match api.get(&key.name).await {
        Ok(p) => {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            let scheduled = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
                .map(|c| {
                    format!(
                        "PodScheduled={} {}: {}",
                        c.status,
                        c.reason.as_deref().unwrap_or(""),
                        c.message.as_deref().unwrap_or("")
                    )
                })
                .unwrap_or_else(|| "no PodScheduled condition".into());
            let deleting = if p.metadata.deletion_timestamp.is_some() { ", deleting" } else { "" };
            format!("{key} (node {node:?}{deleting}, {scheduled})")
        }
        Err(e) => format!("{key} ({e})"),
    }
}

/// Every object of a cluster-wide list, for `allocResourceClaims`.
async fn list_all<K>(client: &kube::Client, what: &str) -> Result<Vec<Arc<K>>, String>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = Api::<K>::all(client.clone()).list(&kube::api::ListParams::default()).await;
    let list = list.map_err(|e| format!("allocResourceClaims: listing {what}: {e}"))?;
    Ok(list.items.into_iter().map(Arc::new).collect())
}
