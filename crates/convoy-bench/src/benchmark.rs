//! convoy-bench as a library, for the benchmarks of a scheduler with
//! plugins of your own: upstream's
//! `perf.RunBenchmarkPerfScheduling(b, configPath, topic, outOfTreeRegistry,
//! perf.WithPrepareFn(...))` in Rust, callable from a test or a `cargo
//! bench` of your crate.
//!
//! ```no_run
//! # fn main() -> Result<(), String> {
//! let mut registry = convoy_api::Registry::new();
//! // registry.register_with_args("MyPlugin", ...); registry.watch_kind(MY_KIND);
//! let report = convoy_bench::Benchmark::new("benches/performance-config.yaml")?
//!     .registry(registry)
//!     .topic("my-plugins")
//!     .prepare(|ctx| {
//!         // Before each workload: a CRD (ignored on the embedded target) and its objects.
//!         ctx.apply(serde_json::json!({"apiVersion": "example.com/v1", "kind": "Thing",
//!                                      "metadata": {"name": "a"}}));
//!         Ok(())
//!     })
//!     .run_embedded()?;
//! report.check()?; // the workloads ran and met their `threshold:`
//! # Ok(()) }
//! ```
//!
//! The embedded target runs the scheduler with the registry given here; the
//! API-server target ([`Benchmark::run_api`]) runs the scheduler binary
//! given there (yours, built with `convoy_scheduler::App`). Each workload's
//! DataItems carry upstream's `threshold:` check; [`Report::check`] fails
//! on any error or threshold violation, and [`Report::write`] writes the
//! DataItems file perf-dash reads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::config::Config;

use crate::labels::LabelFilter;
use crate::run::{Report, RunOptions};
use crate::targets::api::{ApiOptions, SchedulerKind};
use crate::targets::embedded::EmbeddedOptions;

/// Where the workloads run, for a prepare hook that differs between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareTarget {
    /// The embedded cluster: CRDs are not needed (and are ignored), custom
    /// resources of the registry's kinds are held.
    Embedded,
    /// A real API server: CRDs are created and waited for until
    /// `Established`, then the objects.
    ApiServer,
}

/// What a prepare hook creates before each workload (upstream's
/// `WithPrepareFn`): manifests, applied in order on the target.
#[derive(Debug)]
pub struct Prepare {
    target: PrepareTarget,
    manifests: Vec<Value>,
}

impl Prepare {
    /// Where the workloads run.
    pub fn target(&self) -> PrepareTarget {
        self.target
    }

    /// Creates `manifest` (any kind the target holds: a CRD, a custom
    /// resource of a registered kind, a Namespace, ...) before the first
    /// op of each workload. CRDs are created before the scheduler starts,
    /// so that it finds their kinds at once.
    pub fn apply(&mut self, manifest: Value) -> &mut Self {
        self.manifests.push(manifest);
        self
    }

    /// [`apply`](Self::apply) of every object of YAML (or JSON) text:
    /// documents separated by `---`, `kind: List` expanded.
    pub fn apply_yaml(&mut self, text: &str) -> Result<&mut Self, String> {
        self.manifests.extend(crate::any::parse_manifests(text, "prepare")?);
        Ok(self)
    }
}

type Hook = Arc<dyn Fn(&mut Prepare) -> Result<(), String> + Send + Sync>;

/// A scheduler_perf-format benchmark run from code (see the module docs).
#[derive(Clone)]
pub struct Benchmark {
    config: Config,
    registry: Option<convoy_api::Registry>,
    topic: String,
    filter: Option<String>,
    labels: String,
    timeout: Duration,
    prepare: Option<Hook>,
}

impl std::fmt::Debug for Benchmark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Benchmark")
            .field("topic", &self.topic)
            .field("filter", &self.filter)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

impl Benchmark {
    /// The benchmark of a scheduler_perf config file (upstream's format,
    /// Convoy's additions allowed); every workload labelled `performance`
    /// runs unless [`filter`](Self::filter) or [`labels`](Self::labels)
    /// say otherwise.
    pub fn new(config: impl AsRef<Path>) -> Result<Self, String> {
        let config = crate::config::load_file(config.as_ref()).map_err(|e| e.to_string())?;
        Ok(Self {
            config,
            registry: None,
            topic: "benchmark".into(),
            filter: None,
            labels: "performance".into(),
            timeout: Duration::from_secs(600),
            prepare: None,
        })
    }

    /// The plugins of the scheduler on the embedded target: Convoy's and
    /// yours (`convoy_scheduler::registry()` merged with your
    /// registrations), with the custom kinds they read.
    pub fn registry(mut self, registry: convoy_api::Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The topic: names the DataItems file and selects per-topic
    /// thresholds (upstream's `topicName`).
    pub fn topic(mut self, topic: &str) -> Self {
        self.topic = topic.into();
        self
    }

    /// Only `TESTCASE[/WORKLOAD]` (unanchored matches, as Go's `-bench`);
    /// every label then.
    pub fn filter(mut self, filter: &str) -> Self {
        self.filter = Some(filter.into());
        self.labels = String::new();
        self
    }

    /// The workload label filter (upstream's `-perf-scheduling-label-filter`).
    pub fn labels(mut self, labels: &str) -> Self {
        self.labels = labels.into();
        self
    }

    /// The longest wait for pods (upstream: 10 minutes).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A hook run before each workload (upstream's `WithPrepareFn`): what
    /// it applies is created on the target first.
    pub fn prepare(
        mut self,
        hook: impl Fn(&mut Prepare) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.prepare = Some(Arc::new(hook));
        self
    }

    fn manifests(&self, target: PrepareTarget) -> Result<Vec<Value>, String> {
        let mut p = Prepare { target, manifests: Vec::new() };
        if let Some(hook) = &self.prepare {
            hook(&mut p).map_err(|e| format!("prepare: {e}"))?;
        }
        Ok(p.manifests)
    }

    fn options(&self, prepare: Vec<Value>) -> RunOptions {
        RunOptions {
            filter: self.filter.clone(),
            labels: LabelFilter::parse(&self.labels),
            topic: self.topic.clone(),
            embedded: EmbeddedOptions {
                timeout: self.timeout,
                prepare,
                registry: self.registry.clone(),
                ..Default::default()
            },
        }
    }

    /// Runs the workloads on the embedded cluster with the registry's
    /// plugins. An error only when a workload cannot be planned; failures
    /// of a workload are in the report ([`Report::check`]).
    pub fn run_embedded(&self) -> Result<Report, String> {
        let opts = self.options(self.manifests(PrepareTarget::Embedded)?);
        if crate::run::select(&self.config, &opts).is_empty() {
            return Err(format!("no workload matches the filter and labels {:?}", self.labels));
        }
        crate::run::run(&self.config, &opts)
    }

    /// Runs the workloads on the API server of `kubeconfig` (a testenv
    /// control plane, say) with `scheduler`, your `convoy-scheduler`-like
    /// binary, as the scheduler (configured by each workload's scheduler
    /// config). State is not reset between workloads: give each its own
    /// control plane, or run one.
    pub fn run_api(&self, kubeconfig: &Path, scheduler: &Path) -> Result<Report, String> {
        let prepare = self.manifests(PrepareTarget::ApiServer)?;
        let opts = self.options(Vec::new());
        let mut api = ApiOptions::new(PathBuf::from(kubeconfig), SchedulerKind::Convoy);
        api.convoy_binary = Some(scheduler.to_path_buf());
        api.timeout = self.timeout;
        api.prepare = prepare;
        crate::run::run_api(&self.config, &opts, &api)
    }
}

impl Report {
    /// `Ok` when every workload ran and met its `threshold:`; otherwise
    /// each failure, one per line.
    pub fn check(&self) -> Result<(), String> {
        let failures: Vec<String> = self
            .results
            .iter()
            .filter_map(|r| {
                let why = r.error.as_deref().or(r.threshold_failure.as_deref())?;
                Some(format!("{}: {why}", r.name))
            })
            .collect();
        if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
    }
}
