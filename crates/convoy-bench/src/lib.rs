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
//! - [`objects`]: nodes and pods from templates, upstream's built-ins;
//! - [`embedded`]: the embedded target, Convoy's live loop on an
//!   in-memory cluster;
//! - [`throughput`]: upstream's throughput collector, replayed over bind
//!   instants at a chosen interval;
//! - [`dataitems`]: the DataItems file and the threshold check;
//! - [`run`]: selection, running, results, the console table.
//!
//! May depend on the scheduler's library (`convoy-scheduler`) and the
//! embedded cluster; never on a Kubernetes client (the API-server target
//! will live behind its own module).

pub mod config;
pub mod dataitems;
pub mod embedded;
pub mod labels;
pub mod objects;
pub mod plan;
pub mod run;
pub mod template;
pub mod throughput;

pub use config::{Config, ConfigError, load_file, parse_str};
pub use run::{Report, RunOptions, run};
