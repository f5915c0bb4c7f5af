//! The scheduler under test on the API-server target: `convoy-scheduler`
//! or kube-scheduler started as a process with the test case's
//! configuration (client connection, leader election and first profile's
//! name set by the benchmark), or the null binder in process; and the
//! process's resource use.

use std::collections::HashSet;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;

use super::{ApiOptions, CONCURRENCY, QPS};
use crate::dataitems::DataItem;
use crate::plan::Plan;

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

/// Resource use of the scheduler process over a workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Peak resident set size (`VmHWM`), MiB.
    pub peak_rss_mib: f64,
    /// User + system CPU time, seconds.
    pub cpu_seconds: f64,
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

/// A running scheduler, stopped on drop.
pub(super) enum Running {
    Process(Child),
    Binder(tokio::task::JoinHandle<()>),
}

impl Running {
    pub(super) fn usage(&self) -> Option<Usage> {
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

pub(super) async fn start(
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
