//! Counters the metrics layer reads: pods pending per queue
//! (`scheduler_pending_pods{queue}`) and pods entering each queue per event
//! (`scheduler_queue_incoming_pods_total{queue,event}`).

use std::collections::HashMap;
use std::fmt;

use convoy_api::ClusterEvent;

/// The queues a pending pod can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueueKind {
    /// activeQ: ready to be scheduled.
    Active,
    /// backoffQ: waiting out its backoff.
    Backoff,
    /// The unschedulable pool: waiting for a cluster event.
    Unschedulable,
    /// In the pool, held back by a PreEnqueue plugin.
    Gated,
}

impl QueueKind {
    const ALL: [QueueKind; 4] =
        [QueueKind::Active, QueueKind::Backoff, QueueKind::Unschedulable, QueueKind::Gated];

    /// The metric label (`active`, `backoff`, `unschedulable`, `gated`).
    pub fn as_str(self) -> &'static str {
        match self {
            QueueKind::Active => "active",
            QueueKind::Backoff => "backoff",
            QueueKind::Unschedulable => "unschedulable",
            QueueKind::Gated => "gated",
        }
    }
}

impl fmt::Display for QueueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a pod entered a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IncomingEvent {
    /// A new pending pod.
    PodAdd,
    /// An update of a pod the queue did not hold, or that released it.
    PodUpdate,
    /// The pod's scheduling attempt failed.
    ScheduleAttemptFailure,
    /// Its backoff ended.
    BackoffComplete,
    /// It stayed in the pool longer than the leftover limit.
    UnschedulableTimeout,
    /// `activate` moved it.
    ForceActivate,
    /// Popped from backoffQ before its backoff ended, activeQ being empty.
    PopFromBackoff,
    /// A cluster event moved it.
    Cluster(ClusterEvent),
}

impl IncomingEvent {
    const FIXED: usize = 7;

    fn fixed_index(self) -> Option<usize> {
        Some(match self {
            IncomingEvent::PodAdd => 0,
            IncomingEvent::PodUpdate => 1,
            IncomingEvent::ScheduleAttemptFailure => 2,
            IncomingEvent::BackoffComplete => 3,
            IncomingEvent::UnschedulableTimeout => 4,
            IncomingEvent::ForceActivate => 5,
            IncomingEvent::PopFromBackoff => 6,
            IncomingEvent::Cluster(_) => return None,
        })
    }

    fn from_fixed_index(i: usize) -> Self {
        [
            IncomingEvent::PodAdd,
            IncomingEvent::PodUpdate,
            IncomingEvent::ScheduleAttemptFailure,
            IncomingEvent::BackoffComplete,
            IncomingEvent::UnschedulableTimeout,
            IncomingEvent::ForceActivate,
            IncomingEvent::PopFromBackoff,
        ][i]
    }

    /// The metric label, as upstream (`PodAdd`, `NodeAdd`, ...).
    pub fn label(&self) -> String {
        match self {
            IncomingEvent::PodAdd => "PodAdd".to_string(),
            IncomingEvent::PodUpdate => "UnscheduledPodUpdate".to_string(),
            IncomingEvent::ScheduleAttemptFailure => "ScheduleAttemptFailure".to_string(),
            IncomingEvent::BackoffComplete => "BackoffComplete".to_string(),
            IncomingEvent::UnschedulableTimeout => "UnschedulableTimeout".to_string(),
            IncomingEvent::ForceActivate => "ForceActivate".to_string(),
            IncomingEvent::PopFromBackoff => "PopFromBackoffQ".to_string(),
            IncomingEvent::Cluster(e) => e.label(),
        }
    }
}

/// Pods pending in each queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingCounts {
    /// In activeQ.
    pub active: usize,
    /// In backoffQ.
    pub backoff: usize,
    /// In the unschedulable pool, not gated.
    pub unschedulable: usize,
    /// In the unschedulable pool, gated by a PreEnqueue plugin.
    pub gated: usize,
}

/// One incoming counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IncomingCount {
    /// The queue the pods entered.
    pub queue: QueueKind,
    /// Why.
    pub event: IncomingEvent,
    /// How many pods, since the queue was built.
    pub count: u64,
}

/// The incoming counters: an array for the fixed sources (the hot path),
/// a map for cluster events.
#[derive(Debug, Default)]
pub(crate) struct IncomingCounters {
    fixed: [[u64; IncomingEvent::FIXED]; 4],
    cluster: HashMap<(QueueKind, ClusterEvent), u64>,
}

impl IncomingCounters {
    /// Adds `n` pods entering `queue` because of `event`.
    pub(crate) fn add(&mut self, queue: QueueKind, event: IncomingEvent, n: u64) {
        match (event.fixed_index(), event) {
            (Some(i), _) => self.fixed[queue as usize][i] += n,
            (None, IncomingEvent::Cluster(e)) => *self.cluster.entry((queue, e)).or_insert(0) += n,
            (None, _) => unreachable!("only cluster events are not fixed"),
        }
    }

    /// The non-zero counters.
    pub(crate) fn snapshot(&self) -> Vec<IncomingCount> {
        let mut out = Vec::new();
        for q in QueueKind::ALL {
            for (i, &count) in self.fixed[q as usize].iter().enumerate() {
                if count > 0 {
                    out.push(IncomingCount {
                        queue: q,
                        event: IncomingEvent::from_fixed_index(i),
                        count,
                    });
                }
            }
        }
        for (&(queue, e), &count) in &self.cluster {
            out.push(IncomingCount { queue, event: IncomingEvent::Cluster(e), count });
        }
        out
    }
}
