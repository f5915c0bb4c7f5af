//! The API-server target: a workload's plan run against a real
//! kube-apiserver. Nodes, namespaces and pods are created through the API
//! (64 requests in flight, client QPS/burst 5000), a scheduler runs as a
//! separate process (or, for [`SchedulerKind::Null`], as an in-process
//! binder with no logic), and binds are observed with a pod watcher: the
//! instant a pod is first seen with a `nodeName` is its bind, as upstream's
//! collector sees it in its pod informer.
//!
//! The caller provides a fresh API server per workload (see
//! [`crate::compare`]); this module only adds objects to it.

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    Binding, Namespace, Node, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;

use crate::any::{complete, type_of};
use crate::config::Stage;
use crate::dataitems::DataItem;
use crate::dynamic::{Dynamic, Placement};
use crate::labels::Selector;
use crate::measure::Window;
use crate::measure::evictions::Evictions;
use crate::measure::throughput::{SampleInterval, UPSTREAM_INTERVAL};
use crate::objects::{PodFactory, build_nodes, build_pods, literal_object, render_objects};
use crate::plan::{AnyStep, ChurnStep, Plan, PodsStep, Step};
use crate::priority::PriorityBridge;
use crate::progress::Progress;
use crate::runner::RunError;
use crate::runner::tracker::{Created, PodTracker, selected_pods};
use convoy_api::PodKey;

/// Requests in flight when creating, deleting or binding objects.
const CONCURRENCY: usize = 64;
/// Client QPS and burst of the benchmark, the schedulers and the binder.
const QPS: u32 = 5000;

/// The scheduler a workload runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedulerKind {
    /// The `convoy-scheduler` binary.
    Convoy,
    /// Upstream kube-scheduler (testenv's build).
    KubeScheduler,
    /// An in-process binder that binds pending pods round-robin over the
    /// nodes with no scheduling logic: the API server's own ceiling.
    Null,
}

impl SchedulerKind {
    /// All of them, in the order `compare` runs them.
    pub const ALL: [SchedulerKind; 3] =
        [SchedulerKind::Convoy, SchedulerKind::KubeScheduler, SchedulerKind::Null];

    /// The name used on the command line and in DataItem labels.
    pub fn name(self) -> &'static str {
        match self {
            SchedulerKind::Convoy => "convoy",
            SchedulerKind::KubeScheduler => "kube-scheduler",
            SchedulerKind::Null => "null",
        }
    }

    /// The profile (`schedulerName`) the benchmark's pods name.
    pub fn profile(self) -> &'static str {
        match self {
            SchedulerKind::Convoy => "convoy-scheduler",
            SchedulerKind::KubeScheduler => "default-scheduler",
            SchedulerKind::Null => "null-binder",
        }
    }
}

impl std::str::FromStr for SchedulerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        SchedulerKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            format!("unknown scheduler {s:?} (expected convoy, kube-scheduler or null)")
        })
    }
}

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
    pub prepare: Vec<serde_json::Value>,
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

/// Resource use of the scheduler process over a workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Peak resident set size (`VmHWM`), MiB.
    pub peak_rss_mib: f64,
    /// User + system CPU time, seconds.
    pub cpu_seconds: f64,
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
}

/// The DataItems of the scheduler's resource use: `SchedulerPeakMemory`
/// (`Max`, MiB) and `SchedulerCPUTime` (`Total`, s).
pub fn usage_items(workload: &str, scheduler: SchedulerKind, usage: &Usage) -> Vec<DataItem> {
    let item = |metric: &str, bucket: &str, value: f64, unit: &str| DataItem {
        data: [(bucket.to_string(), value)].into(),
        unit: unit.into(),
        labels: [
            ("Metric".to_string(), metric.to_string()),
            ("Name".to_string(), workload.to_string()),
            ("Scheduler".to_string(), scheduler.name().to_string()),
        ]
        .into(),
    };
    vec![
        item("SchedulerPeakMemory", "Max", usage.peak_rss_mib, "MiB"),
        item("SchedulerCPUTime", "Total", usage.cpu_seconds, "s"),
    ]
}

/// Runs one workload against the API server of `opts.kubeconfig`.
pub fn run(plan: &Plan, opts: &ApiOptions) -> Result<ApiOutcome, RunError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("convoy-bench-api")
        .enable_all()
        .build()
        .map_err(|e| RunError::Scheduler(format!("starting the runtime: {e}")))?;
    let result = rt.block_on(run_async(plan, opts));
    rt.shutdown_timeout(Duration::from_secs(5));
    result
}

async fn run_async(plan: &Plan, opts: &ApiOptions) -> Result<ApiOutcome, RunError> {
    let sched_err = |e: String| RunError::Scheduler(e);
    let client = convoy_adapters::connect(Some(&opts.kubeconfig), QPS as f32, QPS)
        .await
        .map_err(|e| sched_err(format!("connecting: {e}")))?;
    let tracker = Arc::new(Tracker::default());
    let watch_task = tokio::spawn(watch_pods(client.clone(), tracker.clone()));
    let started = Instant::now();
    while !tracker.synced.load(Ordering::Acquire) {
        if started.elapsed() > Duration::from_secs(30) {
            watch_task.abort();
            return Err(sched_err("the pod watch did not sync in 30s".into()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let workdir = tempfile::Builder::new()
        .prefix("convoy-bench-")
        .tempdir()
        .map_err(|e| sched_err(format!("work directory: {e}")))?;
    let scheduler = match start_scheduler(plan, opts, &client, workdir.path()).await {
        Ok(s) => s,
        Err(e) => {
            watch_task.abort();
            return Err(sched_err(e));
        }
    };
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
        dynamic: Arc::new(Dynamic::new(client.clone())),
        client,
        tracker,
        profile: opts.scheduler.profile(),
        opts: opts.clone(),
        serial: 0,
        created: HashMap::new(),
        namespaces: HashSet::new(),
        windows: Vec::new(),
        churns: Vec::new(),
        priorities: Arc::default(),
    };
    let mut result = exec.prepare(&opts.prepare).await.map_err(RunError::Prepare);
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
    let usage = scheduler.usage();
    drop(scheduler);
    watch_task.abort();
    let evictions = exec.tracker.state.lock().evictions;
    result.map(|()| ApiOutcome { windows: exec.windows, usage, evictions })
}

/// A running scheduler, stopped on drop.
enum Running {
    Process(Child),
    Binder(tokio::task::JoinHandle<()>),
}

impl Running {
    fn usage(&self) -> Option<Usage> {
        match self {
            Running::Process(c) => usage_of(c.id()),
            Running::Binder(_) => None,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        match self {
            Running::Process(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Running::Binder(t) => t.abort(),
        }
    }
}

/// Peak RSS and CPU time of a live process, from /proc.
fn usage_of(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces): state is
    // field 3, utime and stime are fields 14 and 15.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = rest.get(11)?.parse::<f64>().ok()? + rest.get(12)?.parse::<f64>().ok()?;
    // USER_HZ is 100 on every Linux configuration.
    Some(Usage { peak_rss_mib: kb / 1024.0, cpu_seconds: ticks / 100.0 })
}

/// A free loopback port (there is a small race until the child binds it).
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// The scheduler configuration: the test case's file (if any) with the
/// client connection, leader election and first profile's name set.
fn scheduler_config(plan: &Plan, opts: &ApiOptions) -> Result<serde_json::Value, String> {
    let mut v: serde_json::Value = match &plan.scheduler_config {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))?;
            serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
        None => serde_json::json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
        }),
    };
    let obj = v.as_object_mut().ok_or("the scheduler configuration is not a mapping")?;
    obj.insert(
        "clientConnection".into(),
        serde_json::json!({
            "kubeconfig": opts.kubeconfig.to_string_lossy(),
            "qps": QPS,
            "burst": QPS,
        }),
    );
    obj.insert("leaderElection".into(), serde_json::json!({"leaderElect": false}));
    let profiles = obj.entry("profiles").or_insert_with(|| serde_json::json!([{}]));
    match profiles.as_array_mut().and_then(|a| a.first_mut()).and_then(|p| p.as_object_mut()) {
        Some(p) => {
            p.insert("schedulerName".into(), opts.scheduler.profile().into());
        }
        None => *profiles = serde_json::json!([{"schedulerName": opts.scheduler.profile()}]),
    }
    Ok(v)
}

/// `convoy-scheduler` beside the running executable (`target/<profile>/`;
/// test binaries live one level deeper, in `deps/`).
pub fn default_convoy_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let candidates: Vec<PathBuf> =
        exe.ancestors().skip(1).take(2).map(|d| d.join("convoy-scheduler")).collect();
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "{} not found: build it with `cargo build -p convoy-scheduler --bins` or pass \
             --convoy-binary",
            candidates[0].display()
        )
    })
}

async fn start_scheduler(
    plan: &Plan,
    opts: &ApiOptions,
    client: &kube::Client,
    dir: &Path,
) -> Result<Running, String> {
    let config_path = dir.join("scheduler-config.yaml");
    let config =
        serde_json::to_string_pretty(&scheduler_config(plan, opts)?).map_err(|e| e.to_string())?;
    std::fs::write(&config_path, config).map_err(|e| format!("writing the config: {e}"))?;
    let log = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("scheduler.log"))
            .map_err(|e| format!("scheduler log: {e}"))
    };
    let port = free_port()?;
    let (mut command, ready) = match opts.scheduler {
        SchedulerKind::Null => {
            let binder = tokio::spawn(null_binder(client.clone(), opts.scheduler.profile()));
            return Ok(Running::Binder(binder));
        }
        SchedulerKind::Convoy => {
            let bin = match &opts.convoy_binary {
                Some(b) => b.clone(),
                None => default_convoy_binary()?,
            };
            let mut c = Command::new(bin);
            c.arg("--config").arg(&config_path).arg("--http-addr").arg(format!("127.0.0.1:{port}"));
            c.env("RUST_LOG", std::env::var("CONVOY_BENCH_SCHEDULER_LOG").unwrap_or("warn".into()));
            (c, Ready::HttpReadyz(port))
        }
        SchedulerKind::KubeScheduler => {
            let bin = match &opts.kube_scheduler_binary {
                Some(b) => b.clone(),
                None => convoy_testenv::bin_dir()
                    .map_err(|e| format!("building testenv's kube-scheduler: {e}"))?
                    .join("kube-scheduler"),
            };
            let kc = opts.kubeconfig.display();
            let mut c = Command::new(bin);
            c.args([
                format!("--config={}", config_path.display()),
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!("--cert-dir={}", dir.join("pki").display()),
            ]);
            // The workload's featureGates are kube-scheduler's (upstream
            // sets them on the scheduler under test), e.g. GenericWorkload.
            if !plan.feature_gates.is_empty() {
                let gates: Vec<String> =
                    plan.feature_gates.iter().map(|(k, v)| format!("{k}={v}")).collect();
                c.arg(format!("--feature-gates={}", gates.join(",")));
            }
            (c, Ready::Listening(port))
        }
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(log()?)
        .stderr(log()?)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", opts.scheduler.name()))?;
    let mut running = Running::Process(child);
    let started = Instant::now();
    while !ready.check() {
        if let Running::Process(c) = &mut running
            && let Ok(Some(status)) = c.try_wait()
        {
            let log = std::fs::read_to_string(dir.join("scheduler.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            return Err(format!(
                "{} exited with {status}:\n{}",
                opts.scheduler.name(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!("{} not ready after 60s", opts.scheduler.name()));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(running)
}

/// How to tell that a scheduler is up.
enum Ready {
    /// Convoy: `GET /readyz` answers 200 (synced and leading).
    HttpReadyz(u16),
    /// kube-scheduler: its secure port accepts connections (it serves
    /// after its informers are set up).
    Listening(u16),
}

impl Ready {
    fn check(&self) -> bool {
        use std::io::{Read, Write};
        let port = match self {
            Ready::HttpReadyz(p) | Ready::Listening(p) => *p,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
            return false;
        };
        match self {
            Ready::Listening(_) => true,
            Ready::HttpReadyz(_) => {
                let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
                let mut out = String::new();
                s.write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n").is_ok()
                    && s.read_to_string(&mut out).is_ok()
                    && out.starts_with("HTTP/1.")
                    && out.split_whitespace().nth(1) == Some("200")
            }
        }
    }
}

/// Binds every pending pod of `profile` round-robin over the nodes, 64
/// bindings in flight, until aborted.
async fn null_binder(client: kube::Client, profile: &'static str) {
    let nodes: Arc<Mutex<Vec<String>>> = Arc::default();
    let node_list = nodes.clone();
    let node_client = client.clone();
    let node_task = tokio::spawn(async move {
        let mut s = watcher(Api::<Node>::all(node_client), watcher::Config::default()).boxed();
        while let Some(ev) = s.next().await {
            let mut list = node_list.lock();
            match ev {
                Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                    let name = n.metadata.name.unwrap_or_default();
                    if !list.contains(&name) {
                        list.push(name);
                    }
                }
                Ok(watcher::Event::Delete(n)) => {
                    list.retain(|x| Some(x) != n.metadata.name.as_ref());
                }
                _ => {}
            }
        }
    });
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(String, String, String)>();
    let pod_client = client.clone();
    let pod_task = tokio::spawn(async move {
        let cfg = watcher::Config::default().fields("spec.nodeName=");
        let mut s = watcher(Api::<Pod>::all(pod_client), cfg).boxed();
        let mut seen = HashSet::new();
        while let Some(ev) = s.next().await {
            let (Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p))) = ev else {
                continue;
            };
            let spec = p.spec.as_ref();
            // The API server refuses to bind a pod with scheduling gates.
            if spec.and_then(|s| s.scheduler_name.as_deref()) != Some(profile)
                || p.metadata.deletion_timestamp.is_some()
                || spec.and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty())
            {
                continue;
            }
            let uid = p.metadata.uid.clone().unwrap_or_default();
            if seen.insert(uid.clone()) {
                let ns = p.metadata.namespace.unwrap_or_default();
                let _ = tx.send((ns, p.metadata.name.unwrap_or_default(), uid));
            }
        }
    });
    let next = Arc::new(AtomicUsize::new(0));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|p| (p, rx)) })
        .map(|(ns, name, uid)| {
            let (client, nodes, next) = (client.clone(), nodes.clone(), next.clone());
            async move {
                let node = loop {
                    let pick = {
                        let list = nodes.lock();
                        (!list.is_empty()).then(|| {
                            list[next.fetch_add(1, Ordering::Relaxed) % list.len()].clone()
                        })
                    };
                    match pick {
                        Some(n) => break n,
                        None => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                };
                let binding = Binding {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        uid: Some(uid),
                        ..Default::default()
                    },
                    target: ObjectReference {
                        kind: Some("Node".into()),
                        name: Some(node),
                        ..Default::default()
                    },
                };
                let pods: Api<Pod> = Api::namespaced(client, &ns);
                if let Err(e) = pods
                    .create_subresource::<_, kube::core::Status>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    tracing::warn!(pod = %format!("{ns}/{name}"), "null binder: {e}");
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .for_each(|()| async {})
        .await;
    node_task.abort();
    pod_task.abort();
}

/// What the pod watch has seen.
#[derive(Debug, Default)]
struct Tracker {
    synced: AtomicBool,
    state: Mutex<PodTracker>,
}

async fn watch_pods(client: kube::Client, tracker: Arc<Tracker>) {
    let mut s = watcher(Api::<Pod>::all(client), watcher::Config::default()).boxed();
    while let Some(ev) = s.next().await {
        match ev {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                tracker.state.lock().seen(&p, true)
            }
            Ok(watcher::Event::Delete(p)) => tracker.state.lock().deleted(&p),
            Ok(watcher::Event::InitDone) => tracker.synced.store(true, Ordering::Release),
            Ok(watcher::Event::Init) => {}
            Err(e) => tracing::warn!("pod watch: {e}"),
        }
    }
}

struct Exec {
    client: kube::Client,
    dynamic: Arc<Dynamic>,
    churns: Vec<tokio::task::JoinHandle<()>>,
    tracker: Arc<Tracker>,
    profile: &'static str,
    opts: ApiOptions,
    serial: u64,
    created: HashMap<String, Vec<Created>>,
    namespaces: HashSet<String>,
    windows: Vec<Window>,
    /// Pod and PodGroup priorities on a server with the Priority admission
    /// plugin (see [`crate::priority`]).
    priorities: Arc<PriorityBridge>,
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

/// Creates each claim and its volume as upstream's
/// `CreatePodWithPersistentVolume` does: the claim, its status (`Bound`;
/// a create resets the status), the volume, its status. Claims and volumes
/// are created before the pods (and the window), see docs/benchmarks.md.
async fn create_claims_and_volumes(
    client: &kube::Client,
    namespace: &str,
    all: Vec<crate::volumes::ClaimAndVolume>,
) -> Result<(), String> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
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

impl Exec {
    /// Creates a namespace with no labels unless it exists.
    async fn ensure_namespace(&mut self, name: &str) -> Result<(), String> {
        let ns = Namespace {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            ..Default::default()
        };
        self.add_namespace(ns).await
    }

    /// Creates the namespace (with the labels of `createNamespaces`'
    /// template) unless it exists; as upstream, one that already exists
    /// is kept as it is.
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

    async fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::CreateNodes(s) => {
                let nodes = build_nodes(s, &mut self.serial)?;
                let csi_nodes: Vec<CSINode> = match &s.csi_node {
                    Some(t) => nodes
                        .iter()
                        .map(|n| {
                            crate::volumes::csi_node(t, n.metadata.name.as_deref().unwrap_or(""))
                        })
                        .collect(),
                    None => Vec::new(),
                };
                create_all(Api::<Node>::all(self.client.clone()), nodes).await?;
                create_all(Api::<CSINode>::all(self.client.clone()), csi_nodes).await?;
            }
            Step::CreateNamespaces(s) => {
                for ns in s.namespaces() {
                    self.add_namespace(ns).await?;
                }
            }
            Step::CreatePods(s) if s.steady.is_some() => self.steady_state(s).await?,
            Step::CreatePods(s) => {
                let mut pods = build_pods(s, self.profile, &mut self.serial)?;
                for p in &mut pods {
                    p.spec.get_or_insert_with(Default::default).scheduler_name =
                        Some(self.profile.into());
                }
                self.ensure_namespace(&s.namespace).await?;
                self.priorities.pods(&self.client, &s.namespace, &mut pods).await?;
                if let Some(t) = &s.volumes {
                    let all = crate::volumes::PodVolumes::new(t)?.all(&s.namespace, s.count);
                    create_claims_and_volumes(&self.client, &s.namespace, all).await?;
                }
                if s.collect_metrics {
                    self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
                }
                self.created
                    .entry(s.namespace.clone())
                    .or_default()
                    .extend(pods.iter().map(Created::of));
                create_all(Api::<Pod>::namespaced(self.client.clone(), &s.namespace), pods).await?;
                if !s.skip_wait {
                    self.wait_scheduled(std::slice::from_ref(&s.namespace), &Selector::default())
                        .await?;
                }
                if s.collect_metrics {
                    self.stop_window()?;
                }
            }
            Step::CreateAny(s) => self.create_any(s, false).await?,
            Step::CreatePodGroups(s) => self.create_any(s, true).await?,
            Step::Churn(s) => self.churn(s).await?,
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
                {
                    let s = self.tracker.state.lock();
                    for name in &victims {
                        s.own_deletes.mark(namespace, name);
                    }
                }
                // No kubelet confirms termination: delete at once.
                let dp = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
                let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
                let delete = |name: String| {
                    let (api, dp) = (api.clone(), dp.clone());
                    async move {
                        match api.delete(&name, &dp).await {
                            Ok(_) => Ok(()),
                            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                            Err(e) => Err(format!("deleting {name}: {e}")),
                        }
                    }
                };
                if *per_second > 0 {
                    for name in victims.clone() {
                        delete(name).await?;
                        tokio::time::sleep(Duration::from_secs_f64(1.0 / f64::from(*per_second)))
                            .await;
                    }
                } else {
                    futures::stream::iter(victims.clone())
                        .map(delete)
                        .buffer_unordered(CONCURRENCY)
                        .try_collect::<Vec<()>>()
                        .await?;
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
                self.ensure_namespace(&s.namespace).await?;
                if s.collect_metrics {
                    self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
                }
                let own = self.tracker.state.lock().own_deletes.clone();
                let dra = s.gpus_as == crate::gpu::GpusAs::DraDevices;
                let target = crate::gpu::ApiTarget::start(
                    self.client.clone(),
                    self.dynamic.clone(),
                    own,
                    dra,
                )
                .await?;
                crate::gpu::run_jobs(s, &target, self.profile).await?;
                if s.collect_metrics {
                    self.stop_window()?;
                }
            }
        }
        Ok(())
    }

    /// `--prepare`: each manifest in turn, CRDs waited for until
    /// `Established`.
    async fn prepare(&mut self, manifests: &[serde_json::Value]) -> Result<(), String> {
        for v in manifests {
            if let Some(ns) = v.pointer("/metadata/namespace").and_then(|n| n.as_str()) {
                self.ensure_namespace(ns).await?;
            }
            let mut v = v.clone();
            complete(&mut v, self.profile);
            self.tracker.state.lock().groups.register([&v], None);
            self.dynamic.prepare(&v).await?;
        }
        Ok(())
    }

    /// `createAny` and `createPodGroups` (`pod_groups`: PodGroups only,
    /// created as `v1beta1`), `CONCURRENCY` creates in flight.
    async fn create_any(&mut self, s: &AnyStep, pod_groups: bool) -> Result<(), String> {
        let mut objects = render_objects(s)?;
        if pod_groups {
            let replaced = crate::any::as_pod_groups(&mut objects)?;
            let convoy = self.opts.scheduler == SchedulerKind::Convoy;
            crate::any::log_pod_groups(&replaced, &objects, convoy);
        }
        if let Some(ns) = &s.namespace {
            self.ensure_namespace(ns).await?;
        }
        for v in &mut objects {
            complete(v, self.profile);
        }
        self.priorities.values(&self.client, s.namespace.as_deref(), &mut objects).await?;
        self.tracker.state.lock().groups.register(&objects, s.namespace.as_deref());
        let dynamic = &self.dynamic;
        let created: Vec<(Option<String>, String, Option<Created>)> =
            futures::stream::iter(objects)
                .map(|v| async move {
                    let (ns, name) =
                        dynamic.create(&v, Placement::Strict(s.namespace.as_deref())).await?;
                    // Pods are tracked as createPods' are, so that a later
                    // barrier or deletePods sees them (as on the embedded target).
                    let pod = matches!(type_of(&v), Ok(("v1", "Pod"))).then(|| Created {
                        name: name.clone(),
                        labels: serde_json::from_value(v["metadata"]["labels"].clone()).ok(),
                    });
                    Ok::<_, String>((ns, name, pod))
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect()
                .await?;
        for (ns, _, pod) in created {
            if let (Some(ns), Some(pod)) = (ns, pod) {
                self.created.entry(ns).or_default().push(pod);
            }
        }
        Ok(())
    }

    /// `churn`: starts the background task (aborted when the workload ends).
    async fn churn(&mut self, s: &ChurnStep) -> Result<(), String> {
        let mut templates: Vec<serde_json::Value> =
            s.templates.iter().map(literal_object).collect::<Result<_, _>>()?;
        for t in &mut templates {
            complete(t, self.profile);
        }
        self.ensure_namespace(&s.namespace).await?;
        self.priorities.values(&self.client, Some(&s.namespace), &mut templates).await?;
        let own = self.tracker.state.lock().own_deletes.clone();
        let churner = self.dynamic.clone().churner(templates, s.namespace.clone(), own).await?;
        let n = s.templates.len();
        self.churns.push(tokio::spawn(crate::runner::churn::run(churner, n, s.mode, s.interval)));
        Ok(())
    }

    /// `createPods` with `steadyState`.
    async fn steady_state(&mut self, s: &PodsStep) -> Result<(), String> {
        let duration = s.steady.expect("checked by the caller");
        let mut factory = PodFactory::new(s, self.profile);
        self.ensure_namespace(&s.namespace).await?;
        if s.collect_metrics {
            self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &s.namespace);
        let dp = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
        let (client, priorities) = (self.client.clone(), self.priorities.clone());
        let namespace = s.namespace.clone();
        let outcome = crate::runner::steady::run(
            &self.tracker.state,
            &s.namespace,
            &mut factory,
            &mut self.serial,
            s.count,
            duration,
            CONCURRENCY,
            |pod: Pod| {
                let (api, client, priorities, namespace) =
                    (api.clone(), client.clone(), priorities.clone(), namespace.clone());
                async move {
                    let mut pods = [pod];
                    priorities.pods(&client, &namespace, &mut pods).await?;
                    let [pod] = pods;
                    api.create(&PostParams::default(), &pod).await.map(drop).map_err(|e| {
                        format!("creating {}: {e}", pod.metadata.name.unwrap_or_default())
                    })
                }
            },
            |key: PodKey| {
                let (api, dp) = (api.clone(), dp.clone());
                async move {
                    match api.delete(&key.name, &dp).await {
                        Ok(_) => Ok(()),
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        Err(e) => Err(format!("deleting {}: {e}", key.name)),
                    }
                }
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

    /// `allocResourceClaims` (see [`crate::dra`]): lists nodes, slices,
    /// classes, claims and DeviceTaintRules, and writes each allocation with
    /// `replace_status` (the claim's `status` subresource), as upstream's
    /// `UpdateStatus`.
    async fn alloc_resource_claims(&mut self, namespace: Option<&str>) -> Result<(), String> {
        use k8s_openapi::api::resource::v1::{
            DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice,
        };
        let c = &self.client;
        let state = crate::dra::DraState {
            nodes: list_all::<Node>(c, "nodes").await?,
            slices: list_all::<ResourceSlice>(c, "ResourceSlices").await?,
            classes: list_all::<DeviceClass>(c, "DeviceClasses").await?,
            claims: list_all::<ResourceClaim>(c, "ResourceClaims").await?,
            taint_rules: list_all::<DeviceTaintRule>(c, "DeviceTaintRules").await?,
        };
        let claims = crate::dra::allocate_claims(&state, namespace)
            .map_err(|e| format!("allocResourceClaims: {e}"))?;
        tracing::info!("allocResourceClaims: allocating {} ResourceClaims", claims.len());
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
            .await?;
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
        let keys = selected_pods(&self.created, namespaces, selector);
        let waited = self
            .wait_until("pods to be scheduled", || {
                let s = self.tracker.state.lock();
                let got = keys.iter().filter(|k| s.bound.contains(*k)).count();
                (got >= keys.len(), format!("{got}/{} scheduled", keys.len()))
            })
            .await;
        let Err(e) = waited else { return Ok(()) };
        // Say which pods are left and what the API server shows for them
        // (a bind the watch missed would show as a node name here).
        let left: Vec<PodKey> = {
            let s = self.tracker.state.lock();
            keys.iter().filter(|k| !s.bound.contains(*k)).take(3).cloned().collect()
        };
        let mut seen = Vec::new();
        for k in &left {
            seen.push(self.describe_pod(k).await);
        }
        Err(format!("{e}; not bound: {}", seen.join("; ")))
    }

    /// A pod as the API server shows it: node, deletion, `PodScheduled`.
    async fn describe_pod(&self, key: &PodKey) -> String {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
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
                let deleting =
                    if p.metadata.deletion_timestamp.is_some() { ", deleting" } else { "" };
                format!("{key} (node {node:?}{deleting}, {scheduled})")
            }
            Err(e) => format!("{key} ({e})"),
        }
    }

    /// Waits until every pod the benchmark created in `namespaces` (all when
    /// empty) that matches `selector` is bound or was attempted, as
    /// upstream's `isAttempted` reads it from its pod informer: the watch
    /// saw a `PodScheduled` condition on it (written by the scheduler after
    /// a failed cycle, or by the API server on a pod created with
    /// scheduling gates).
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
                return Err(format!(
                    "timed out after {:?} waiting for {what}: {progress} ({} {})",
                    self.opts.timeout,
                    self.opts.scheduler.name(),
                    self.opts.scheduler.profile()
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn config_overrides_connection_and_profile() {
        let plan = Plan {
            name: "T/w".into(),
            scheduler_config: None,
            feature_gates: BTreeMap::new(),
            steps: Vec::new(),
            origins: Vec::new(),
        };
        let opts = ApiOptions::new("/k/config".into(), SchedulerKind::KubeScheduler);
        let v = scheduler_config(&plan, &opts).unwrap();
        assert_eq!(v["clientConnection"]["qps"], 5000);
        assert_eq!(v["clientConnection"]["kubeconfig"], "/k/config");
        assert_eq!(v["leaderElection"]["leaderElect"], false);
        assert_eq!(v["profiles"][0]["schedulerName"], "default-scheduler");
        assert_eq!("null".parse::<SchedulerKind>(), Ok(SchedulerKind::Null));
        assert!("x".parse::<SchedulerKind>().is_err());
    }

    #[test]
    fn usage_of_this_process() {
        let u = usage_of(std::process::id()).unwrap();
        assert!(u.peak_rss_mib > 0.0 && u.cpu_seconds >= 0.0, "{u:?}");
    }
}
