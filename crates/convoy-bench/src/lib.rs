//! `convoy-bench`: Convoy's scheduler_perf. Runs benchmark configs written
//! in upstream's `test/integration/scheduler_perf` format (test cases, a
//! `workloadTemplate` of ops, `workloads` of params) against Convoy and
//! reports `SchedulingThroughput` as upstream does, as perf-dash DataItems.
//!
//! Its modules import one way, config → plan → runner → targets →
//! results: a module imports only modules of its own layer or of the
//! layers before it.
//!
//! 1. Formats:
//!    - [`config`]: the YAML format, decoded strictly (unknown opcodes and
//!      fields are errors naming them), and convoy-bench's own ops
//!      (`createGpuJobs`, `startScheduler`);
//!    - [`template`]: the Go-template subset of node and pod templates;
//!    - [`labels`]: workload label filters and pod label selectors;
//!    - [`dataitems`]: the DataItems file and the threshold check.
//! 2. Plan:
//!    - [`plan`]: a workload with its `$params` resolved (unused ones are
//!      errors, as upstream) and its template files read, as `Step`s;
//!    - [`objects`]: nodes and pods from templates, upstream's built-ins;
//!    - [`volumes`]: each pod's bound claim and volume, each node's CSINode
//!      (upstream's `volumes/` workloads);
//!    - [`any`]: objects of any kind (`createAny`, `createPodGroups`,
//!      `churn`, `--prepare`): their type, what the embedded target holds,
//!      manifest files;
//!    - [`dra`]: `allocResourceClaims`, claims allocated with Convoy's
//!      structured allocator;
//!    - [`gpu`]: the GPU fragmentation benchmark (`createGpuJobs`): its job
//!      stream, its waves over a small target trait, its metrics.
//! 3. [`measure`]: the measured window and its figures: throughput as
//!    upstream's collector computes it, `EvictedPods` (preemption
//!    victims), pod-group latency and groups per second (gang workloads).
//! 4. Runner:
//!    - [`runner`]: walks a plan's steps once for every target (namespaces,
//!      the pods the benchmark created, windows, waits, steady states,
//!      churn), over its `Target` trait; the pod tracker the targets feed;
//!    - [`progress`]: the live progress line on stderr.
//! 5. [`targets`]: the embedded target (Convoy's live loop on an in-memory
//!    cluster) and the API-server target (nodes and pods created through
//!    the API; Convoy, kube-scheduler or a null binder as the scheduler;
//!    PriorityClasses, the dynamic API).
//! 6. Results:
//!    - [`run`](mod@run): selection, running, results, the console tables;
//!    - [`compare`]: one workload with several schedulers, each on a fresh
//!      testenv control plane;
//!    - [`gpu_compare`]: `convoy-bench gpu`, the GPU benchmark with several
//!      schedulers and profiles;
//!    - [`report`]: the static HTML trend report of a results directory;
//!    - [`plot`]: static SVG bar charts (the docs' plots), from small data
//!      files or from result files;
//!    - [`history`]: the per-release benchmark history kept in the
//!      repository, its trend report and its regression check;
//!    - [`table`]: console table layout;
//!    - [`gate`]: the instruction-count regression gate for CI;
//!    - [`benchmark`]: convoy-bench as a library ([`Benchmark`]), for the
//!      benchmarks of a scheduler with plugins of your own.
//!
//! What each module imports (test modules aside):
//!
//! ```text
//! config      -> template            dataitems -> config
//! template, labels, any, dra, table, progress, gate: nothing
//! gpu         -> any config dataitems template
//! plan        -> any config gpu labels template
//! volumes     -> any plan
//! objects     -> any plan template volumes
//! measure     -> dataitems
//! runner      -> any config dra gpu labels measure objects plan progress volumes
//! targets     -> any dataitems dra gpu measure plan runner volumes
//! run         -> config dataitems gpu labels measure plan table targets
//! compare     -> config dataitems measure run table targets
//! report      -> config dataitems
//! gpu_compare -> any config dataitems gpu labels measure plan report run table targets
//! benchmark   -> config labels run targets
//! history     -> config dataitems report
//! plot        -> config report
//! ```
//!
//! May depend on the scheduler's library (`convoy-scheduler`) and the
//! embedded cluster; the Kubernetes client (`kube`'s `Client` and `Api`,
//! with `convoy-adapters`' rate limit) and testenv are used by the
//! API-server target, [`compare`] and [`gpu_compare`] only.

pub use benchmark::{Benchmark, Prepare, PrepareTarget};

pub mod any;
pub mod benchmark;
pub mod compare;
pub mod config;
pub mod dataitems;
pub mod dra;
pub mod gate;
pub mod gpu;
pub mod gpu_compare;
pub mod history;
pub mod labels;
pub mod measure;
pub mod objects;
pub mod plan;
pub mod plot;
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
