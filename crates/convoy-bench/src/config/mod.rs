//! Upstream's scheduler_perf configuration format: a YAML list of test
//! cases, each a `workloadTemplate` of ops run once per workload (a set of
//! `params`).
//!
//! Decoding is strict as upstream's (`UnmarshalStrict`): unknown keys are
//! errors, and so (checked when a workload is planned) is a parameter no op
//! uses. Paths are relative to the config file.

pub mod gpu;
mod ops;
mod params;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

pub use ops::{
    BarrierOp, ChurnOp, CreateAnyOp, CreateNamespacesOp, CreateNodesOp, CreatePodGroupsOp,
    CreatePodSetsOp, CreatePodsOp, CsiVolumeNodeResources, DeletePodsOp, LabelNodePrepareStrategy,
    NestedCreatePodsOp, NodeAllocatableStrategy, Op, START_SCHEDULER, SUPPORTED_OPCODES, SleepOp,
    Stage, StartCollectingMetricsOp, StartSchedulerOp, StopCollectingMetricsOp,
    UNSUPPORTED_OPCODES, UniqueNodeLabelStrategy, UpdateAnyOp,
};
pub use params::{Params, check_count, format_duration, parse_duration};

/// The metric convoy-bench measures (and the default threshold metric).
pub const SCHEDULING_THROUGHPUT: &str = "SchedulingThroughput";

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The YAML does not decode (syntax, unknown opcode or field, types).
    #[error("{file}: {message}")]
    Decode {
        /// The file.
        file: String,
        /// Where and what, as `[0].workloadTemplate[2]: createPods: unknown field ...`.
        message: String,
    },
    /// The config decodes but breaks a rule (duplicate names, no metrics, ...).
    #[error("{file}: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// What is wrong, naming the test case.
        message: String,
    },
}

/// A loaded config: its test cases and the directory paths are relative to.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file (for messages).
    pub file: String,
    /// The directory of the file.
    pub base_dir: PathBuf,
    /// The test cases, in file order.
    pub test_cases: Vec<TestCase>,
}

/// One test case (upstream `testCase`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TestCase {
    /// Unique name; results are named `<name>/<workload>/...`.
    pub name: String,
    /// Feature gates: accepted, and logged as not applicable to Convoy.
    #[serde(default)]
    pub feature_gates: BTreeMap<String, bool>,
    /// Histograms to collect (not supported yet: refused).
    pub metrics_collector_config: Option<serde_json::Value>,
    /// The ops run for each workload.
    pub workload_template: Vec<Op>,
    /// Parameter sets.
    pub workloads: Vec<Workload>,
    /// A `KubeSchedulerConfiguration` for Convoy (default: Convoy's default).
    pub scheduler_config_path: Option<String>,
    /// Pod template of `createPods` ops that name none.
    pub default_pod_template_path: Option<String>,
    /// Labels every workload inherits.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Threshold selector of workloads that set none.
    pub default_threshold_metric_selector: Option<ThresholdMetricSelector>,
}

/// One workload (upstream `Workload`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Workload {
    /// Unique within the test case.
    pub name: String,
    /// Parameters referenced by ops as `$name`.
    #[serde(default)]
    pub params: BTreeMap<String, serde_json::Value>,
    /// Labels (added to the test case's).
    #[serde(default)]
    pub labels: Vec<String>,
    /// Minimum (or, with `expectLower`, maximum) value of the selected
    /// metric; 0 disables.
    pub threshold: Option<Threshold>,
    /// Which metric and bucket the threshold applies to.
    pub threshold_metric_selector: Option<ThresholdMetricSelector>,
    /// Feature gates: accepted, and logged as not applicable to Convoy.
    #[serde(default)]
    pub feature_gates: BTreeMap<String, bool>,
}

/// A threshold: one value, or one per topic (`threshold: {dra: 64}`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Threshold {
    /// The same for every topic.
    Value(f64),
    /// Per topic.
    ByTopic(BTreeMap<String, f64>),
}

impl Threshold {
    /// The threshold for `topic`, `None` when there is none or it is 0.
    pub fn for_topic(&self, topic: &str) -> Option<f64> {
        let v = match self {
            Threshold::Value(v) => Some(*v),
            Threshold::ByTopic(m) => m.get(topic).copied(),
        };
        v.filter(|v| *v != 0.0)
    }
}

/// Upstream `thresholdMetricSelector`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ThresholdMetricSelector {
    /// The `Metric` label (only `SchedulingThroughput` is measured).
    pub name: String,
    /// Further labels the DataItem must have.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The data key (`Average`, `Perc50`, ...).
    pub data_bucket: Option<String>,
    /// The threshold is an upper bound.
    #[serde(default)]
    pub expect_lower: bool,
}

impl Default for ThresholdMetricSelector {
    fn default() -> Self {
        Self {
            name: SCHEDULING_THROUGHPUT.into(),
            labels: BTreeMap::new(),
            data_bucket: Some("Average".into()),
            expect_lower: false,
        }
    }
}

impl<'de> Deserialize<'de> for Op {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Op::from_value(v).map_err(serde::de::Error::custom)
    }
}

impl TestCase {
    /// The labels of `workload`: the test case's and its own.
    pub fn labels_of<'a>(&'a self, workload: &'a Workload) -> Vec<&'a str> {
        let mut l: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        l.extend(workload.labels.iter().map(String::as_str));
        l
    }

    /// The threshold selector that applies to `workload`.
    pub fn selector_of(&self, workload: &Workload) -> ThresholdMetricSelector {
        workload
            .threshold_metric_selector
            .clone()
            .or_else(|| self.default_threshold_metric_selector.clone())
            .unwrap_or_default()
    }
}

/// Reads and checks a config file.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_str(&text, &path.display().to_string(), base_dir)
}

/// Parses and checks config text; `file` names it in messages and
/// `base_dir` is where relative paths start.
pub fn parse_str(text: &str, file: &str, base_dir: PathBuf) -> Result<Config, ConfigError> {
    let options = serde_saphyr::options! { with_snippet: false };
    let mut path = None;
    let test_cases: Vec<TestCase> =
        serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
            serde_path_to_error::deserialize(de).map_err(|e| {
                path = Some(e.path().to_string());
                e.into_inner()
            })
        })
        .map_err(|e| ConfigError::Decode {
            file: file.to_string(),
            message: match path.as_deref() {
                Some(p) if p != "." => format!("{p}: {e}"),
                _ => e.to_string(),
            },
        })?;
    let config = Config { file: file.to_string(), base_dir, test_cases };
    config
        .validate()
        .map_err(|message| ConfigError::Invalid { file: file.to_string(), message })?;
    Ok(config)
}

impl Config {
    /// Upstream's checks: unique test-case and workload names, at least one
    /// workload and one op, some op collecting metrics, valid ops; plus what
    /// convoy-bench cannot do yet.
    fn validate(&self) -> Result<(), String> {
        let mut names = BTreeSet::new();
        for (i, tc) in self.test_cases.iter().enumerate() {
            let at = |m: String| format!("[{i}] test case {:?}: {m}", tc.name);
            if tc.name.is_empty() {
                return Err(format!("[{i}]: test case name is required"));
            }
            if !names.insert(&tc.name) {
                return Err(at("duplicate test case name".into()));
            }
            if tc.metrics_collector_config.is_some() {
                return Err(at("metricsCollectorConfig is not supported yet (convoy-bench \
                               measures SchedulingThroughput only)"
                    .into()));
            }
            if tc.workload_template.is_empty() {
                return Err(at("workloadTemplate is empty".into()));
            }
            if tc.workloads.is_empty() {
                return Err(at("no workloads".into()));
            }
            for (j, op) in tc.workload_template.iter().enumerate() {
                op.validate().map_err(|e| at(format!("workloadTemplate[{j}]: {e}")))?;
            }
            let starts =
                tc.workload_template.iter().filter(|op| matches!(op, Op::StartScheduler(_)));
            if starts.count() > 1 {
                return Err(at(format!("{START_SCHEDULER} appears more than once")));
            }
            let collects = tc.workload_template.iter().any(|op| match op {
                Op::CreatePods(p) => p.collect_metrics,
                Op::CreatePodSets(p) => p.create_pods_op.0.collect_metrics,
                Op::StopCollectingMetrics(_) => true,
                Op::CreateGpuJobs(o) => o.collect_metrics,
                _ => false,
            });
            if !collects {
                return Err(at("no op collects metrics (set createPods.collectMetrics or use \
                               stopCollectingMetrics)"
                    .into()));
            }
            let mut workloads = BTreeSet::new();
            for w in &tc.workloads {
                if !workloads.insert(&w.name) {
                    return Err(at(format!("duplicate workload name {:?}", w.name)));
                }
                let selector = tc.selector_of(w);
                if selector.name != SCHEDULING_THROUGHPUT {
                    return Err(at(format!(
                        "workload {:?}: thresholdMetricSelector.name {:?}: convoy-bench measures \
                         only {SCHEDULING_THROUGHPUT}",
                        w.name, selector.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// A path from the config, relative to the config file.
    pub fn resolve(&self, path: &str) -> PathBuf {
        self.base_dir.join(path)
    }
}

#[cfg(test)]
mod tests;
