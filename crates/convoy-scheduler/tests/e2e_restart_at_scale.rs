//! Restart and failover on a large cluster, beside kube-scheduler on the
//! same control plane in the same run: 5,000 nodes and 100,000 bound pods
//! (`CONVOY_SCALE_NODES`, `CONVOY_SCALE_PODS`), each with the service
//! account's projected volume a real cluster's admission adds
//! (`CONVOY_SCALE_TOKEN_VOLUME=false`: without), then for each scheduler:
//!
//! - **cold start**: a backlog of pending pods (`CONVOY_SCALE_BATCH`), the
//!   scheduler started with an empty cache: time from process start to the
//!   first bind, to steady throughput and to the last bind, and peak memory;
//! - **failover**, `CONVOY_SCALE_ROUNDS` times, with the standby's cache warm
//!   and with `delayCacheUntilActive: true`: a leader and a standby, the
//!   leader SIGKILLed (no lease release), a new backlog created at once;
//!   time from the kill to the standby's first bind, to steady throughput
//!   and to the last bind.
//!
//! Both sides run with the same lease (15 s / 10 s / 2 s, kube-scheduler's
//! and the chart's defaults), the same client budget (qps 5000, burst 5000)
//! and their default plugin sets. `make bench-restart`; the figures are in
//! docs/reliability.md. `CONVOY_SCALE_ARGS` adds flags to Convoy's command
//! line (e.g. `--streaming-lists`).

mod common;

use std::collections::HashSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;

/// The lease of both sides: kube-scheduler's defaults, and the chart's.
const LEASE: &str = "leaseDuration: 15s\n  renewDeadline: 10s\n  retryPeriod: 2s";
const LEASE_DURATION: Duration = Duration::from_secs(15);
/// kube-scheduler's profile in this test.
const UPSTREAM: &str = "kube-scheduler-scale";

fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Which scheduler a replica runs.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Side {
    Convoy,
    KubeScheduler,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Side::Convoy => "Convoy",
            Side::KubeScheduler => "kube-scheduler",
        }
    }

    fn scheduler_name(self) -> &'static str {
        match self {
            Side::Convoy => CONVOY,
            Side::KubeScheduler => UPSTREAM,
        }
    }
}

/// One running replica of either side.
enum Replica {
    Convoy(Scheduler),
    KubeScheduler(convoy_testenv::KubeScheduler),
}

impl Replica {
    /// Starts a replica with leader election on the lease `lease`.
    fn start(cp: &ControlPlane, side: Side, name: &str, lease: &str, delay: bool) -> Result<Self> {
        let election = format!(
            "leaderElection:\n  leaderElect: true\n  resourceName: {lease}\n  \
             resourceNamespace: default\n  {LEASE}\ndelayCacheUntilActive: {delay}\n"
        );
        Ok(match side {
            Side::Convoy => {
                let yaml = format!(
                    "apiVersion: kubescheduler.config.k8s.io/v1\n\
                     kind: KubeSchedulerConfiguration\n\
                     clientConnection:\n  qps: 5000\n  burst: 5000\n{election}"
                );
                // Extra flags to compare list strategies (`--streaming-lists`).
                let extra = std::env::var("CONVOY_SCALE_ARGS").unwrap_or_default();
                let args: Vec<&str> = extra.split_whitespace().collect();
                Replica::Convoy(Scheduler::start_with_options(&cp.env, name, &yaml, &args, "info")?)
            }
            Side::KubeScheduler => {
                let path = cp.env.kube_scheduler_config(
                    name,
                    &format!("{election}profiles:\n- schedulerName: {UPSTREAM}\n"),
                )?;
                Replica::KubeScheduler(cp.env.start_named_kube_scheduler(name, &path, &[])?)
            }
        })
    }

    fn pid(&self) -> Option<u32> {
        match self {
            Replica::Convoy(s) => Some(s.pid()),
            Replica::KubeScheduler(k) => k.pid(),
        }
    }

    /// Peak resident memory (VmHWM), in MiB.
    fn peak_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    }

    /// SIGKILL: no lease release.
    fn kill(&mut self) {
        match self {
            Replica::Convoy(s) => s.kill(),
            Replica::KubeScheduler(k) => {
                if let Some(pid) = k.pid() {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
            }
        }
    }

    fn tail(&self) -> String {
        match self {
            Replica::Convoy(s) => s.tail(),
            Replica::KubeScheduler(_) => String::new(),
        }
    }
}

/// When each pod of a namespace was first seen bound, from a watch of its
/// own.
struct BindClock {
    binds: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl BindClock {
    fn start(api: Api<Pod>) -> Self {
        let binds = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::clone(&binds);
        let task = tokio::spawn(async move {
            let mut seen = HashSet::new();
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let pods = match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
                    _ => continue,
                };
                for p in pods {
                    if node_of(&p).is_some() && seen.insert(p.metadata.name.clone()) {
                        out.lock().unwrap().push(Instant::now());
                    }
                }
            }
        });
        Self { binds, task }
    }

    fn count(&self) -> usize {
        self.binds.lock().unwrap().len()
    }

    async fn wait_count(&self, n: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while self.count() < n {
            if Instant::now() > deadline {
                bail!("{} of {n} pods bound after {timeout:?}", self.count());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// The timings of a batch of `n` pods, all bound, from `since`.
    fn timings(&self, since: Instant, n: usize) -> Timings {
        let binds = self.binds.lock().unwrap();
        let after: Vec<f64> =
            binds.iter().filter(|t| **t >= since).map(|t| (*t - since).as_secs_f64()).collect();
        timings(&after, n)
    }
}

impl Drop for BindClock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What one start or failover took, in seconds from its origin.
#[derive(Debug, Clone, Copy)]
struct Timings {
    first: f64,
    /// The start of the first 1 s window binding at least 80 % of the
    /// steady rate.
    steady: f64,
    last: f64,
    /// Pods per second between the 25th and the 90th percentile binds.
    rate: f64,
}

/// [`Timings`] of bind times `binds` (seconds, ascending) of `n` pods.
fn timings(binds: &[f64], n: usize) -> Timings {
    let at = |q: f64| binds[((q * n as f64) as usize).min(binds.len() - 1)];
    let rate = 0.65 * n as f64 / (at(0.9) - at(0.25)).max(1e-3);
    let steady = binds
        .iter()
        .enumerate()
        .find(|(i, t)| {
            binds[*i..].iter().take_while(|u| **u < **t + 1.0).count() as f64 >= 0.8 * rate
        })
        .map_or(binds[binds.len() - 1], |(_, t)| *t);
    Timings { first: binds[0], steady, last: binds[binds.len() - 1], rate }
}

/// Creates `count` pods for `scheduler`, 64 at a time.
async fn create_batch(api: &Api<Pod>, prefix: &str, count: usize, scheduler: &str) -> Result<()> {
    let scheduler = scheduler.to_string();
    futures::stream::iter(0..count)
        .map(|i| {
            let (api, p) =
                (api.clone(), pod(&format!("{prefix}{i:05}"), &scheduler, "100m", "10Mi"));
            async move { api.create(&PostParams::default(), &p).await }
        })
        .buffer_unordered(64)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    Ok(())
}

/// Creates `count` pods already bound, round-robin over `nodes` nodes.
async fn create_resident(
    api: &Api<Pod>,
    count: usize,
    nodes: usize,
    token_volume: bool,
) -> Result<()> {
    futures::stream::iter(0..count)
        .map(|i| {
            let mut p = pod(&format!("r{i:06}"), "default-scheduler", "100m", "10Mi");
            if token_volume {
                add_token_volume(&mut p);
            }
            p.spec.as_mut().expect("spec").node_name = Some(format!("n{:04}", i % nodes));
            let api = api.clone();
            async move { api.create(&PostParams::default(), &p).await }
        })
        .buffer_unordered(64)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    Ok(())
}

/// Adds the service account, volume and mount the ServiceAccount admission plugin gives
/// every pod that does not opt out (testenv's API server runs without that
/// plugin): the `kube-api-access-*` projected volume with the token, the
/// cluster's CA and the namespace.
fn add_token_volume(pod: &mut Pod) {
    let volume = serde_json::json!({
        "name": "kube-api-access-7x2kq",
        "projected": {
            "defaultMode": 420,
            "sources": [
                { "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } },
                { "configMap": { "name": "kube-root-ca.crt",
                                 "items": [{ "key": "ca.crt", "path": "ca.crt" }] } },
                { "downwardAPI": { "items": [{ "path": "namespace", "fieldRef":
                    { "apiVersion": "v1", "fieldPath": "metadata.namespace" } }] } }
            ]
        }
    });
    let mount = serde_json::json!({
        "name": "kube-api-access-7x2kq",
        "readOnly": true,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"
    });
    let spec = pod.spec.as_mut().expect("spec");
    spec.service_account_name = Some("default".into());
    spec.volumes = Some(vec![serde_json::from_value(volume).expect("volume")]);
    spec.containers[0].volume_mounts = Some(vec![serde_json::from_value(mount).expect("mount")]);
}

/// Deletes every pod of `api` at once (no kubelet runs to confirm).
async fn clear(api: &Api<Pod>) -> Result<()> {
    api.delete_collection(
        &DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
        &ListParams::default(),
    )
    .await?;
    let gone = eventually(Duration::from_secs(120), || async {
        api.list_metadata(&ListParams::default().limit(1))
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    gone.context("pods not deleted")
}

/// Waits until the lease `name` has a holder; returns it.
async fn wait_holder(cp: &ControlPlane, name: &str, timeout: Duration) -> Result<String> {
    let leases: Api<Lease> = Api::namespaced(cp.client.clone(), "default");
    eventually(timeout, || async {
        let l = leases.get_opt(name).await.ok()??;
        l.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await
    .with_context(|| format!("lease {name} has no holder after {timeout:?}"))
}

/// One scheduler started on the full cluster with a backlog of `batch`.
async fn cold_start(cp: &ControlPlane, side: Side, batch: usize) -> Result<(Timings, f64)> {
    let ns = format!("cold-{}", side.label().to_lowercase());
    let api = cp.namespace(&ns).await?;
    create_batch(&api, "c", batch, side.scheduler_name()).await?;
    let clock = BindClock::start(api.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(clock.count() == 0, "pods bound before the scheduler started");
    let t0 = Instant::now();
    let replica = Replica::start(cp, side, &format!("{ns}-a"), &format!("{ns}-lease"), false)?;
    clock
        .wait_count(batch, Duration::from_secs(600))
        .await
        .map_err(|e| e.context(replica.tail()))?;
    let t = clock.timings(t0, batch);
    let peak = replica.peak_mib().unwrap_or(f64::NAN);
    drop(replica);
    drop(clock);
    clear(&api).await?;
    Ok((t, peak))
}

/// A leader and a standby; the leader is SIGKILLed and a backlog of
/// `batch` created at once.
async fn failover(
    cp: &ControlPlane,
    side: Side,
    delay: bool,
    round: usize,
    batch: usize,
) -> Result<(Timings, f64)> {
    let ns = format!(
        "fo-{}-{}-{round}",
        side.label().to_lowercase(),
        if delay { "delay" } else { "warm" }
    );
    let api = cp.namespace(&ns).await?;
    let lease = format!("{ns}-lease");
    let mut leader = Replica::start(cp, side, &format!("{ns}-a"), &lease, delay)?;
    wait_holder(cp, &lease, Duration::from_secs(120)).await?;
    let mut standby = Replica::start(cp, side, &format!("{ns}-b"), &lease, delay)?;
    // The leader schedules; the standby's cache (unless delayed) fills.
    let clock = BindClock::start(api.clone());
    create_batch(&api, "w", 100, side.scheduler_name()).await?;
    clock.wait_count(100, Duration::from_secs(300)).await?;
    if let (Replica::Convoy(s), false) = (&mut standby, delay) {
        // Its /readyz: the initial lists are applied.
        s.wait_ready(Duration::from_secs(120)).await?;
    }
    // kube-scheduler's standby serves no readiness of its cache; both get
    // the same settling time.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let killed = Instant::now();
    leader.kill();
    create_batch(&api, "f", batch, side.scheduler_name()).await?;
    clock
        .wait_count(100 + batch, Duration::from_secs(600))
        .await
        .map_err(|e| e.context(standby.tail()))?;
    let t = clock.timings(killed, batch);
    let peak = standby.peak_mib().unwrap_or(f64::NAN);
    drop((leader, standby, clock));
    clear(&api).await?;
    Ok((t, peak))
}

/// One line of the report.
fn line(what: &str, side: Side, t: &Timings, peak: f64) -> String {
    format!(
        "| {what} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} |",
        side.label(),
        t.first,
        t.steady,
        t.last,
        t.rate,
        peak
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement (about 15 minutes): make bench-restart"]
async fn restart_and_failover_at_scale() -> Result<()> {
    let nodes: usize = knob("CONVOY_SCALE_NODES", 5000);
    let resident: usize = knob("CONVOY_SCALE_PODS", 100_000);
    let batch: usize = knob("CONVOY_SCALE_BATCH", 5000);
    let rounds: usize = knob("CONVOY_SCALE_ROUNDS", 3);
    let token_volume: bool = knob("CONVOY_SCALE_TOKEN_VOLUME", true);
    let cp = ControlPlane::start().await?;
    let t = Instant::now();
    create_nodes(
        &cp.client,
        (0..nodes).map(|i| node(&format!("n{i:04}"), "64", "512Gi", "250")).collect(),
    )
    .await?;
    let api = cp.namespace("resident").await?;
    create_resident(&api, resident, nodes, token_volume).await?;
    eprintln!(
        "{nodes} nodes and {resident} bound pods (service account volume: {token_volume}) \
         created in {:.0} s",
        t.elapsed().as_secs_f64()
    );

    let mut rows = Vec::new();
    let mut convoy_warm = Vec::new();
    for side in [Side::Convoy, Side::KubeScheduler] {
        let (t, peak) = cold_start(&cp, side, batch).await?;
        eprintln!("{}", line("cold start", side, &t, peak));
        rows.push(line("cold start", side, &t, peak));
    }
    for round in 0..rounds {
        for delay in [false, true] {
            for side in [Side::Convoy, Side::KubeScheduler] {
                let what = if delay {
                    "failover, delayCacheUntilActive"
                } else {
                    "failover, warm standby"
                };
                let (t, peak) = failover(&cp, side, delay, round, batch).await?;
                eprintln!("{}", line(what, side, &t, peak));
                rows.push(line(what, side, &t, peak));
                if side == Side::Convoy && !delay {
                    convoy_warm.push(t.first);
                }
            }
        }
    }
    println!(
        "\n{nodes} nodes, {resident} bound pods (service account volume: {token_volume}), batches of {batch} pending pods; \
         lease 15 s / 10 s / 2 s, qps 5000; seconds from the process start (cold) or the \
         leader's SIGKILL (failover)\n\
         | case | scheduler | first bind | steady | last bind | pods/s | peak MiB |\n\
         |---|---|---|---|---|---|---|"
    );
    for r in &rows {
        println!("{r}");
    }
    // The bound docs/reliability.md states for a warm standby: the lease
    // duration after the leader's last renewal (at most a retry period
    // before the kill), plus 2 s.
    let bound = (LEASE_DURATION + Duration::from_secs(2)).as_secs_f64();
    ensure!(
        convoy_warm.iter().all(|f| *f <= bound),
        "a warm standby took {convoy_warm:?} s to its first bind (bound {bound} s)"
    );
    Ok(())
}

#[test]
fn timings_of_a_steady_stream() {
    // 100 binds: the first at 1 s, then 10 per second.
    let binds: Vec<f64> = (0..100).map(|i| 1.0 + i as f64 / 10.0).collect();
    let t = timings(&binds, 100);
    assert_eq!(t.first, 1.0);
    assert!((t.rate - 10.0).abs() < 0.5, "{t:?}");
    assert_eq!(t.steady, 1.0);
    // A slow start: 5 binds over 5 s, then 95 at 10 per second.
    let mut slow: Vec<f64> = (0..5).map(|i| i as f64).collect();
    slow.extend((0..95).map(|i| 5.0 + i as f64 / 10.0));
    let t = timings(&slow, 100);
    assert_eq!(t.steady, 5.0, "{t:?}");
    assert!((t.last - 14.4).abs() < 1e-9);
}
