//! Convoy against upstream kube-scheduler on a real API server (testenv), the
//! same workload on a fresh control plane for each: N nodes (4 CPU, 32Gi,
//! 110 pods) and M pods (100m, 500Mi), client QPS/burst 5000 for both.
//!
//! The pods are created first; then the scheduler starts, and a watch
//! records when each pod is first seen bound. Throughput is measured from
//! the first bind to the last (so both schedulers' start-up and initial list
//! are excluded), and each scheduler's peak RSS is read from /proc.
//!
//! ```sh
//! cargo build --release -p convoy-scheduler --bins --examples
//! target/release/examples/testenv_compare 500 5000
//! ```

use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use convoy_testenv::TestEnv;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Which {
    Convoy,
    KubeScheduler,
}

struct Outcome {
    pods_per_second: f64,
    seconds: f64,
    peak_rss_mib: f64,
}

fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn create_all<T>(api: Api<T>, objs: Vec<T>) -> Result<()>
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
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn run(which: Which, nodes: usize, pods: usize) -> Result<Outcome> {
    let env = TestEnv::start()?;
    let client = env.client().await?;
    let node_objs: Vec<Node> = (0..nodes)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("node-{i}")},
                "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"},
                           "capacity": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
            }))
            .expect("node")
        })
        .collect();
    create_all(Api::<Node>::all(client.clone()), node_objs).await?;
    let scheduler_name = match which {
        Which::Convoy => "convoy-scheduler",
        Which::KubeScheduler => "default-scheduler",
    };
    let pod_objs: Vec<Pod> = (0..pods)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("pod-{i}"), "namespace": "default"},
                "spec": {"schedulerName": scheduler_name, "containers": [{
                    "name": "pause", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]}
            }))
            .expect("pod")
        })
        .collect();
    create_all(Api::<Pod>::namespaced(client.clone(), "default"), pod_objs).await?;

    let config = env.dir().join("scheduler.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             clientConnection:\n  kubeconfig: {}\n  qps: 5000\n  burst: 5000\n\
             leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {scheduler_name}\n",
            env.kubeconfig().display()
        ),
    )?;
    // Watch before starting the scheduler so that no bind is missed.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut stream = watcher(pods_api, watcher::Config::default()).boxed();
    let (mut _convoy, mut _upstream, pid): (
        Option<Guard>,
        Option<convoy_testenv::KubeScheduler>,
        u32,
    );
    match which {
        Which::Convoy => {
            let log = std::fs::File::create(env.dir().join("convoy.log"))?;
            let child = Command::new(convoy_binary()?)
                .arg("--config")
                .arg(&config)
                .args(["--http-addr", "127.0.0.1:0"])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()?;
            pid = child.id();
            _convoy = Some(Guard(child));
            _upstream = None;
        }
        Which::KubeScheduler => {
            let ks = env.start_kube_scheduler(Path::new(&config))?;
            let started = Instant::now();
            while ks.pid().is_none() && started.elapsed() < Duration::from_secs(10) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            pid = ks.pid().context("kube-scheduler pid")?;
            _upstream = Some(ks);
            _convoy = None;
        }
    }
    let mut bound: HashSet<String> = HashSet::new();
    let (mut first, mut last) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(600);
    while bound.len() < pods {
        let ev = tokio::time::timeout_at(deadline.into(), stream.next())
            .await
            .context("timed out waiting for binds")?;
        let Some(ev) = ev else { bail!("watch ended") };
        let pod = match ev? {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => p,
            _ => continue,
        };
        if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
            && bound.insert(pod.metadata.name.clone().unwrap_or_default())
        {
            let now = Instant::now();
            first.get_or_insert(now);
            last = Some(now);
        }
    }
    let rss = peak_rss_mib(pid);
    let seconds = last.zip(first).map_or(0.0, |(l, f)| (l - f).as_secs_f64());
    Ok(Outcome {
        pods_per_second: if seconds > 0.0 { (pods - 1) as f64 / seconds } else { 0.0 },
        seconds,
        peak_rss_mib: rss,
    })
}

/// `target/<profile>/convoy-scheduler`, beside `examples/`.
fn convoy_binary() -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let bin =
        exe.parent().and_then(Path::parent).context("binary directory")?.join("convoy-scheduler");
    if !bin.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p convoy-scheduler --bins`",
            bin.display()
        );
    }
    Ok(bin)
}

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (nodes, pods) =
        (args.first().copied().unwrap_or(500), args.get(1).copied().unwrap_or(5000));
    let mut rows = Vec::new();
    for which in [Which::KubeScheduler, Which::Convoy] {
        let o = run(which, nodes, pods).await?;
        println!(
            "{which:?}: {pods} pods on {nodes} nodes bound in {:.2}s = {:.0} pods/s, peak RSS {:.0} MiB",
            o.seconds, o.pods_per_second, o.peak_rss_mib
        );
        rows.push(o);
    }
    println!(
        "ratio Convoy/kube-scheduler: throughput {:.2}x, peak RSS {:.2}x",
        rows[1].pods_per_second / rows[0].pods_per_second,
        rows[1].peak_rss_mib / rows[0].peak_rss_mib
    );
    Ok(())
}
