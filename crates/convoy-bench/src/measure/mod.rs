//! What a workload measures, whatever the target: the measured [`Window`]
//! and the figures it carries. The runner fills windows, the targets feed
//! the pod tracker behind them, the results turn them into DataItems and
//! tables; this module imports neither (only [`crate::dataitems`], for the
//! DataItems of its metrics).
//!
//! - [`throughput`]: upstream's throughput collector, replayed over bind
//!   instants at a chosen interval;
//! - [`evictions`]: `EvictedPods`, bound pods removed by someone other
//!   than the benchmark (preemption victims);
//! - [`groups`]: pod-group latency and groups per second (gang
//!   workloads).

use std::time::Duration;

pub mod evictions;
pub mod groups;
pub mod throughput;

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
    pub sampled: throughput::Sampled,
    /// Pod-group metrics, for a window in which groups were placed.
    pub groups: Option<groups::GroupWindow>,
    /// Bound pods removed by others while the window was open (see
    /// [`evictions`]).
    pub evictions: usize,
}
