//! The embedded target: Convoy's real scheduler (`run_leader`, the live
//! loop, on a multi-threaded runtime with the real clock) against an
//! [`EmbeddedCluster`], with no API server. The ops create nodes and pods
//! in the cluster while the scheduler runs; binds are observed on the
//! scheduler's own update stream, as upstream's collector observes its
//! pod informer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoy_api::{ClusterUpdate, PodKey, RealClock};
use convoy_embedded::{EmbeddedBinder, EmbeddedCluster, Objects};
use convoy_scheduler::decision::{Decision, DecisionSink, Outcome};
use convoy_scheduler::{Scheduler, SchedulerOptions};
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use crate::labels::Selector;
use crate::objects::{build_nodes, build_pods};
use crate::plan::{Plan, Step};
use crate::throughput::{SampleInterval, Sampled};
use crate::tracker::PodTracker;

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
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            sample_interval: SampleInterval::Auto,
            timeout: Duration::from_secs(600),
            worker_threads: 2,
        }
    }
}

/// One measured window of a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// The namespace (`createPods`) or name (`startCollectingMetrics`).
    pub name: String,
    /// Pods bound during the window.
    pub pods: usize,
    /// Wall time of the window.
    pub duration: Duration,
    /// When the first and the last bind of the window were seen (offsets
    /// from its start).
    pub bind_span: Option<(Duration, Duration)>,
    /// Throughput samples.
    pub sampled: Sampled,
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
    /// Collection was started and never stopped.
    #[error("startCollectingMetrics without a matching stopCollectingMetrics")]
    UnfinishedWindow,
}

/// Runs one workload on a fresh embedded cluster and scheduler, returning
/// its measured windows.
pub fn run(plan: &Plan, opts: &EmbeddedOptions) -> Result<Vec<Window>, RunError> {
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

async fn run_async(plan: &Plan, opts: &EmbeddedOptions) -> Result<Vec<Window>, RunError> {
    let config = convoy_scheduler::load_config(plan.scheduler_config.as_deref())
        .map_err(|e| RunError::Scheduler(e.to_string()))?;
    let scheduler_name = config.profiles[0].scheduler_name.clone();
    let (cluster, rx) = EmbeddedCluster::new(Objects::default());
    let attempts = Arc::new(Attempts::default());
    let scheduler = Scheduler::new(SchedulerOptions {
        config,
        registry: convoy_scheduler::registry(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        clock: Arc::new(RealClock),
        sink: attempts.clone(),
        seed: None,
        framework_metrics: None,
    })
    .map_err(|e| RunError::Scheduler(e.to_string()))?;
    let tracker = Arc::new(Tracker::default());
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
    };
    let mut result = Ok(());
    for (i, step) in plan.steps.iter().enumerate() {
        if let Err(message) = exec.step(step).await {
            result = Err(RunError::Op { op: i, message });
            break;
        }
    }
    if result.is_ok() && exec.tracker.state.lock().window.is_some() {
        result = Err(RunError::UnfinishedWindow);
    }
    let _ = stop_tx.send(());
    let _ = loop_task.await;
    result.map(|()| exec.windows)
}

/// Counts attempts and keeps the last failure, to explain a timeout.
#[derive(Debug, Default)]
struct Attempts {
    last_failure: Mutex<Option<(PodKey, String)>>,
}

impl DecisionSink for Attempts {
    fn record(&self, d: &Decision) {
        match &d.outcome {
            Outcome::Scheduled { .. } => {}
            Outcome::Unschedulable { message } | Outcome::Error { message } => {
                *self.last_failure.lock() = Some((d.pod.clone(), message.clone()));
            }
        }
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

/// A pod the benchmark created and has not deleted.
#[derive(Debug)]
struct Created {
    name: String,
    labels: Option<BTreeMap<String, String>>,
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
}

impl Exec {
    async fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::CreateNodes(s) => {
                for node in build_nodes(s, &mut self.serial)? {
                    self.cluster.add_node(node).map_err(|e| e.to_string())?;
                }
            }
            Step::CreateNamespaces(names) => self.namespaces.extend(names.iter().cloned()),
            Step::CreatePods(s) => {
                // Built before the window opens: rendering is not measured.
                let pods = build_pods(s, &self.scheduler_name, &mut self.serial)?;
                if s.collect_metrics {
                    self.start_window(s.namespace.clone(), vec![s.namespace.clone()], None)?;
                }
                self.namespaces.insert(s.namespace.clone());
                let created = self.created.entry(s.namespace.clone()).or_default();
                for pod in pods {
                    created.push(Created {
                        name: pod.metadata.name.clone().unwrap_or_default(),
                        labels: pod.metadata.labels.clone(),
                    });
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
            Step::Barrier { namespaces, selector } => {
                self.wait_scheduled(namespaces, selector).await?;
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
                    self.cluster.delete_pod(namespace, name).map_err(|e| e.to_string())?;
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
