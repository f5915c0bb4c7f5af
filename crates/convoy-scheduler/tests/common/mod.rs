//! Fixtures for the end-to-end tests: a private control plane per test (at
//! most two at once), the `convoy-scheduler` binary as a child process that
//! cannot outlive its test, pod and node builders, and polling.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use convoy_testenv::TestEnv;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, SemaphorePermit};

/// The profile every test pod asks for.
pub const CONVOY: &str = "convoy-scheduler";

/// Control planes running at once: each is an etcd and a kube-apiserver,
/// and the scheduler under test runs beside them on a 2-core machine.
static CONTROL_PLANES: Semaphore = Semaphore::const_new(2);

/// A private control plane, and the slot it holds until dropped.
pub struct ControlPlane {
    /// The control plane (stopped when the last clone is dropped).
    pub env: Arc<TestEnv>,
    /// A client for the current test's runtime.
    pub client: kube::Client,
    _slot: SemaphorePermit<'static>,
}

impl ControlPlane {
    /// Waits for a free slot, then starts etcd and kube-apiserver.
    pub async fn start() -> Result<Self> {
        let slot = CONTROL_PLANES.acquire().await.context("control-plane slots closed")?;
        let env = tokio::task::spawn_blocking(TestEnv::start).await?.context("starting testenv")?;
        let client = env.client().await?;
        Ok(Self { env: Arc::new(env), client, _slot: slot })
    }

    /// Like [`ControlPlane::start`], with kube-controller-manager and KWOK
    /// (simulated kubelets for nodes made with `convoy_testenv::kwok_node`).
    pub async fn start_cluster() -> Result<Self> {
        let slot = CONTROL_PLANES.acquire().await.context("control-plane slots closed")?;
        let env = tokio::task::spawn_blocking(|| {
            TestEnv::start_with(convoy_testenv::Options::WITH_CONTROLLERS)
        })
        .await?
        .context("starting testenv with controllers")?;
        let client = env.client().await?;
        Ok(Self { env: Arc::new(env), client, _slot: slot })
    }

    /// Takes a slot for a control plane the test started itself (with
    /// options of its own).
    pub async fn adopt(env: TestEnv) -> Result<Self> {
        let slot = CONTROL_PLANES.acquire().await.context("control-plane slots closed")?;
        let client = env.client().await?;
        Ok(Self { env: Arc::new(env), client, _slot: slot })
    }

    /// Creates a namespace and returns a pod API for it.
    pub async fn namespace(&self, name: &str) -> Result<Api<Pod>> {
        self.env.create_namespace(&self.client, name).await?;
        Ok(Api::namespaced(self.client.clone(), name))
    }
}

/// Leader election settings of a [`Scheduler`]: the lease name, or none.
#[derive(Clone, Copy)]
pub enum Lease<'a> {
    /// `leaderElect: false`: always the leader.
    None,
    /// `leaderElect: true` on `default/<name>`, 3 s lease, 2 s renew deadline.
    Named(&'a str),
}

/// A `convoy-scheduler` process, killed (SIGKILL) when dropped. Its stderr
/// goes to `<testenv dir>/<name>.log`; [`Scheduler::tail`] is meant for
/// assertion messages, and with `CONVOY_E2E_LOG_DIR` set the whole log is
/// copied there when the test ends.
pub struct Scheduler {
    child: Child,
    /// Identity (leader election, and the Events' `reportingInstance`).
    pub name: String,
    log: PathBuf,
    /// Address of `/readyz` and `/metrics`.
    pub http: SocketAddr,
}

impl Scheduler {
    /// Starts the binary against `env` with a configuration of its own.
    pub fn start(env: &TestEnv, name: &str, lease: Lease<'_>) -> Result<Self> {
        let election = match lease {
            Lease::None => "leaderElection:\n  leaderElect: false\n".to_string(),
            Lease::Named(resource) => format!(
                "leaderElection:\n  leaderElect: true\n  resourceName: {resource}\n  \
                 resourceNamespace: default\n  leaseDuration: 3s\n  renewDeadline: 2s\n  \
                 retryPeriod: 500ms\n"
            ),
        };
        let yaml = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\n\
             kind: KubeSchedulerConfiguration\n\
             clientConnection:\n  qps: 5000\n  burst: 5000\n{election}"
        );
        Self::start_with_config(env, name, &yaml)
    }

    /// Starts the binary against `env` with the configuration `yaml`, given
    /// whole (written to `<testenv dir>/<name>.yaml`).
    pub fn start_with_config(env: &TestEnv, name: &str, yaml: &str) -> Result<Self> {
        Self::start_with_options(env, name, yaml, &[], "info")
    }

    /// [`start_with_config`](Self::start_with_config) with extra flags and
    /// `RUST_LOG` (the log filter).
    pub fn start_with_options(
        env: &TestEnv,
        name: &str,
        yaml: &str,
        args: &[&str],
        rust_log: &str,
    ) -> Result<Self> {
        let config = env.dir().join(format!("{name}.yaml"));
        std::fs::write(&config, yaml)?;
        let exe = env!("CARGO_BIN_EXE_convoy-scheduler");
        // PDEATHSIG: should the test process die without unwinding (SIGKILL,
        // a timeout), the scheduler dies with it instead of retrying forever.
        let mut cmd = if std::path::Path::new("/usr/bin/setpriv").exists() {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args(["--pdeathsig", "KILL", exe]);
            c
        } else {
            Command::new(exe)
        };
        cmd.arg("--config")
            .arg(&config)
            .arg("--kubeconfig")
            .arg(env.kubeconfig())
            .arg("--identity")
            .arg(name)
            .env("HOSTNAME", name)
            .args(args)
            .env("RUST_LOG", rust_log);
        Self::spawn(env, name, cmd)
    }

    /// Starts `cmd`, a command line ending in `convoy-scheduler`'s flags,
    /// with `--http-addr` on a free port added and its stderr to
    /// `<testenv dir>/<name>.log`.
    pub fn spawn(env: &TestEnv, name: &str, mut cmd: Command) -> Result<Self> {
        let log = env.dir().join(format!("{name}.log"));
        let http = free_port()?;
        let child = cmd
            .arg("--http-addr")
            .arg(http.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("spawning convoy-scheduler")?;
        Ok(Self { child, name: name.to_string(), log, http })
    }

    /// Path of the log (stderr).
    pub fn log_path(&self) -> &std::path::Path {
        &self.log
    }

    /// The whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last 40 lines of the log, headed by the scheduler's name.
    pub fn tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(40);
        format!("\n--- last lines of {} ---\n{}\n---", self.name, lines[from..].join("\n"))
    }

    /// Lines of the log containing `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.log().lines().filter(|l| l.contains(needle)).count()
    }

    /// The process id (after `exec`s: the scheduler's own once started).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until `/readyz` answers 200 (the initial lists are synced).
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let http = self.http;
        let ready = eventually(timeout, || async move {
            (http_status(http, "/readyz").await == Some(200)).then_some(())
        })
        .await;
        if ready.is_none() {
            let running = self.running();
            anyhow::bail!(
                "{} not ready in {timeout:?} (running: {}){}",
                self.name,
                running,
                self.tail()
            );
        }
        Ok(())
    }

    /// Waits up to `timeout` for the process to exit on its own; its exit
    /// status, or `None` if it is still running.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL: no lease release, no flush.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.kill();
        // The testenv directory goes with the test; keep logs on request.
        if let Some(dir) = std::env::var_os("CONVOY_E2E_LOG_DIR") {
            let to = PathBuf::from(dir).join(format!(
                "{}-{}.log",
                std::thread::current().name().unwrap_or("test").replace("::", "-"),
                self.name
            ));
            let _ = std::fs::copy(&self.log, to);
        }
    }
}

fn free_port() -> Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The status code and body of one `GET path`, or `None` if there was no
/// answer within `timeout`.
async fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Option<(u16, String)> {
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let code = text.split(' ').nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Some((code, body))
    };
    tokio::time::timeout(timeout, fetch).await.ok().flatten()
}

/// The body of `GET path` from the scheduler's HTTP endpoints, when it
/// answers 200 within 5 s.
pub async fn http_body(addr: SocketAddr, path: &str) -> Option<String> {
    let (code, body) = http_get(addr, path, Duration::from_secs(5)).await?;
    (code == 200).then_some(body)
}

/// Status code of one `GET`, or `None` if there was no answer in 2 s.
async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    http_get(addr, path, Duration::from_secs(2)).await.map(|(code, _)| code)
}

/// Polls `check` every 100 ms until it returns `Some` or `timeout` passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A ready node with the given allocatable (and capacity) `cpu`, `memory`
/// and `pods`, as quantities.
pub fn node(name: &str, cpu: &str, memory: &str, pods: &str) -> Node {
    let resources = serde_json::json!({ "cpu": cpu, "memory": memory, "pods": pods });
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "status": {
            "allocatable": resources,
            "capacity": resources,
            "conditions": [{ "type": "Ready", "status": "True" }]
        }
    }))
    .expect("valid node")
}

/// A pending pod for `scheduler` with one container requesting `cpu` and
/// `memory`.
pub fn pod(name: &str, scheduler: &str, cpu: &str, memory: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "schedulerName": scheduler,
            "containers": [{
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": cpu, "memory": memory } }
            }]
        }
    }))
    .expect("valid pod")
}

/// Creates nodes, 32 at a time.
pub async fn create_nodes(client: &kube::Client, nodes: Vec<Node>) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    futures::stream::iter(nodes)
        .map(|n| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &n).await }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Creates pods, 32 at a time; returns them as created (with UIDs).
pub async fn create_pods(api: &Api<Pod>, pods: Vec<Pod>) -> Result<Vec<Pod>> {
    Ok(futures::stream::iter(pods)
        .map(|p| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &p).await }
        })
        .buffer_unordered(32)
        .try_collect()
        .await?)
}

/// Creates a pod, retrying for up to 20 s while the namespace's default
/// ServiceAccount (made by the controller manager) does not exist yet, or
/// the admission plugin has not yet seen a PriorityClass just created.
pub async fn create_retrying(api: &Api<Pod>, pod: &Pod) -> Result<Pod> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match api.create(&PostParams::default(), pod).await {
            Ok(p) => return Ok(p),
            Err(kube::Error::Api(s)) if tokio::time::Instant::now() < deadline && s.code != 409 => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The pod's node, if bound.
pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

/// Pods of `api` by name.
pub async fn pods_by_name(api: &Api<Pod>) -> Result<BTreeMap<String, Pod>> {
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect())
}

/// Waits until every pod named in `names` exists and is bound; on timeout,
/// the error lists the pods still pending with their `PodScheduled` message.
pub async fn wait_bound(
    api: &Api<Pod>,
    names: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, Pod>> {
    let done = eventually(timeout, || async {
        let pods = pods_by_name(api).await.ok()?;
        names.iter().all(|n| pods.get(n).is_some_and(|p| node_of(p).is_some())).then_some(pods)
    })
    .await;
    if let Some(pods) = done {
        return Ok(pods);
    }
    let pods = pods_by_name(api).await?;
    let pending: Vec<String> = names
        .iter()
        .filter(|n| pods.get(*n).is_none_or(|p| node_of(p).is_none()))
        .map(|n| format!("{n}: {}", pods.get(n).map(scheduled_message).unwrap_or_default()))
        .collect();
    anyhow::bail!(
        "{} of {} pods not bound within {timeout:?}, e.g. {:?}",
        pending.len(),
        names.len(),
        &pending[..pending.len().min(5)]
    )
}

/// The `PodScheduled` condition as `status/reason: message`.
pub fn scheduled_message(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .map(|c| {
            format!(
                "{}/{}: {}",
                c.status,
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            )
        })
        .unwrap_or_else(|| "no PodScheduled condition".into())
}

/// events.k8s.io/v1 Events of a namespace with the given reason.
pub async fn events(client: &kube::Client, ns: &str, reason: &str) -> Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let mut all = api.list(&ListParams::default()).await?.items;
    all.retain(|e| e.reason.as_deref() == Some(reason));
    Ok(all)
}

/// How many times an Event happened (a repeat is a `series.count` bump).
pub fn occurrences(e: &Event) -> i32 {
    e.series.as_ref().map_or(1, |s| s.count)
}

/// Occurrences of `Scheduled` Events per pod UID.
pub async fn scheduled_per_uid(client: &kube::Client, ns: &str) -> Result<BTreeMap<String, i32>> {
    let mut per_uid = BTreeMap::new();
    for e in events(client, ns, "Scheduled").await? {
        let uid = e.regarding.as_ref().and_then(|r| r.uid.clone()).unwrap_or_default();
        *per_uid.entry(uid).or_insert(0) += occurrences(&e);
    }
    Ok(per_uid)
}

/// A quantity in thousandths of its unit (`"100m"` is 100, `"1Gi"` is
/// 1073741824000). Covers the suffixes the tests write.
pub fn milli(q: &str) -> i64 {
    let (num, mult): (&str, f64) = [
        ("Ki", 1024.0 * 1000.0),
        ("Mi", 1024.0 * 1024.0 * 1000.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0 * 1000.0),
        ("k", 1e6),
        ("M", 1e9),
        ("G", 1e12),
        ("m", 1.0),
    ]
    .iter()
    .find_map(|(s, m)| q.strip_suffix(s).map(|n| (n, *m)))
    .unwrap_or((q, 1000.0));
    (num.parse::<f64>().unwrap_or_else(|_| panic!("quantity {q:?}")) * mult).round() as i64
}

/// Sum of the pod's container requests for `resource`, in thousandths.
pub fn request(p: &Pod, resource: &str) -> i64 {
    p.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get(resource))
        .map(|q| milli(&q.0))
        .sum()
}

/// A node's allocatable `resource`, in thousandths.
pub fn allocatable(n: &Node, resource: &str) -> i64 {
    n.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .map_or(0, |q| milli(&q.0))
}

/// One `scheduled <ns>/<pod> on <node>` decision line of a log.
#[derive(Debug, Clone)]
pub struct Placed {
    /// The line's timestamp (logged once the binding succeeded).
    pub at: Timestamp,
    /// Pod name.
    pub pod: String,
    /// Node name.
    pub node: String,
}

/// The decision lines for pods of namespace `ns`, in log order.
pub fn placements(log: &str, ns: &str) -> Vec<Placed> {
    let marker = format!(" scheduled {ns}/");
    log.lines()
        .filter_map(|l| {
            let (head, rest) = l.split_once(&marker)?;
            let mut words = rest.split(' ');
            let pod = words.next()?.to_string();
            let node = words.nth(1)?.to_string();
            let at = head.split_whitespace().next()?.parse().ok()?;
            Some(Placed { at, pod, node })
        })
        .collect()
}

/// Waits up to 10 s until `sched` logged at least `n` decision lines for
/// pods of `ns`: a line is written once the bind call returned, a moment
/// after a watch sees the pod bound.
pub async fn wait_decisions(sched: &Scheduler, ns: &str, n: usize) {
    eventually(Duration::from_secs(10), || async {
        (placements(&sched.log(), ns).len() >= n).then_some(())
    })
    .await;
}

/// Decision lines per pod name.
pub fn placements_per_pod(log: &str, ns: &str) -> BTreeMap<String, usize> {
    let mut per_pod = BTreeMap::new();
    for p in placements(log, ns) {
        *per_pod.entry(p.pod).or_default() += 1;
    }
    per_pod
}

/// Installs scheduler-plugins' PodGroup CRD with testenv's kubectl and
/// waits until it is established.
pub fn install_crd(cp: &ControlPlane) -> Result<()> {
    let kubectl = convoy_testenv::bin_dir()?.join("kubectl");
    let crd =
        convoy_testenv::repo_root().join("charts/convoy/crds/scheduling.x-k8s.io_podgroups.yaml");
    let kubeconfig = cp.env.kubeconfig();
    for args in [
        vec!["apply", "-f", crd.to_str().context("CRD path")?],
        vec![
            "wait",
            "--for=condition=Established",
            "crd/podgroups.scheduling.x-k8s.io",
            "--timeout=30s",
        ],
    ] {
        let out = std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(&args)
            .output()
            .context("running kubectl")?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
