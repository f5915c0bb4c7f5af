//! `convoy-bench`: Convoy's scheduler_perf. Runs benchmark configs written
//! in upstream's `test/integration/scheduler_perf` format (test cases, a
//! `workloadTemplate` of ops, `workloads` of params) against Convoy and
//! reports `SchedulingThroughput` as upstream does, as perf-dash DataItems.
//!
//! - [`config`]: the YAML format, decoded strictly (unknown opcodes and
//!   fields are errors naming them);
//! - [`template`]: the Go-template subset of node and pod templates;
//! - [`plan`]: a workload with its `$params` resolved (unused ones are
//!   errors, as upstream) and its template files read;
//! - [`priority`]: `spec.priority` of upstream's templates on an API
//!   server that runs the Priority admission plugin (PriorityClasses);
//! - [`objects`]: nodes and pods from templates, upstream's built-ins;
//! - [`dra`]: `allocResourceClaims`, claims allocated with Convoy's
//!   structured allocator;
//! - [`volumes`]: each pod's bound claim and volume, each node's CSINode
//!   (upstream's `volumes/` workloads);
//! - [`any`]: objects of any kind (`createAny`, `createPodGroups`,
//!   `churn`, `--prepare`): their type, what the embedded target holds,
//!   manifest files; the API target creates them through the dynamic API
//!   (`dynamic`);
//! - [`progress`]: the live progress line on stderr;
//! - [`runner`]: walks a plan's steps once for every target (windows,
//!   waits, steady states, churn), over the `Target` trait;
//! - [`targets`]: the embedded target, Convoy's live loop on an in-memory
//!   cluster;
//! - [`measure`]: the measured window and its figures: throughput as
//!   upstream's collector computes it, `EvictedPods` (preemption victims),
//!   pod-group latency and groups per second (gang workloads);
//! - [`gpu`]: the GPU fragmentation benchmark (`createGpuJobs`, its
//!   metrics, `convoy-bench gpu`);
//! - [`dataitems`]: the DataItems file and the threshold check;
//! - [`run`]: selection, running, results, the console table;
//! - [`report`]: the static HTML trend report of a results directory;
//! - [`gate`]: the instruction-count regression gate for CI;
//! - [`api`]: the API-server target (nodes and pods created through the
//!   API; Convoy, kube-scheduler or a null binder as the scheduler);
//! - [`compare`]: one workload with several schedulers, each on a fresh
//!   testenv control plane.
//!
//! May depend on the scheduler's library (`convoy-scheduler`) and the
//! embedded cluster; the Kubernetes client (`kube`, with
//! `convoy-adapters`' rate limit) and testenv are used by [`api`] and
//! [`compare`] only.

pub mod any;
pub mod compare;
pub mod config;
pub mod dataitems;
pub mod dra;
pub mod gate;
pub mod gpu;
pub mod gpu_compare;
pub mod labels;
pub mod measure;
pub mod objects;
pub mod plan;
pub mod progress;
pub mod report;
pub mod run;
pub mod runner;
pub mod table;
pub mod targets;
pub mod template;
pub mod volumes;

pub use config::{Config, ConfigError, load_file, parse_str};
pub use run::{Report, RunOptions, run};
