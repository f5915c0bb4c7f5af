//! Every scheduling decision, explained once: a [`Decision`] goes to a
//! [`DecisionSink`], which writes the decision log line (and, with an API
//! server, the Event and the pod condition; in a simulation, the result
//! table).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use convoy_api::PodKey;

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Bound to a node.
    Scheduled {
        /// The node.
        node: Arc<str>,
        /// Its total score (0 when it was the only feasible node).
        score: i64,
    },
    /// No node fits; the message is upstream's aggregated one.
    Unschedulable {
        /// `0/N nodes are available: ...`.
        message: String,
    },
    /// An internal error or a failed bind; the pod is retried with backoff.
    Error {
        /// What went wrong.
        message: String,
    },
}

impl Outcome {
    /// The `result` label of `scheduler_schedule_attempts_total`.
    pub fn result_label(&self) -> &'static str {
        match self {
            Outcome::Scheduled { .. } => "scheduled",
            Outcome::Unschedulable { .. } => "unschedulable",
            Outcome::Error { .. } => "error",
        }
    }
}

/// One scheduling attempt of one pod.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The pod.
    pub pod: PodKey,
    /// The pod's UID, when it has one (Events refer to it).
    pub uid: Option<Arc<str>>,
    /// The profile (scheduler name).
    pub profile: Arc<str>,
    /// How it ended.
    pub outcome: Outcome,
    /// Nodes evaluated by Filter.
    pub evaluated: usize,
    /// Nodes that passed Filter.
    pub feasible: usize,
    /// Nodes in the snapshot.
    pub total: usize,
    /// Rejected nodes by reason.
    pub rejected: BTreeMap<String, usize>,
    /// Attempt number (1 for the first).
    pub attempt: u32,
    /// From pop to the decision (the binding cycle not included).
    pub latency: Duration,
    /// For a bound pod: from its first scheduling attempt to the bind (the
    /// pod scheduling SLI).
    pub since_first_attempt: Option<Duration>,
}

/// Receives decisions. Called on the scheduling loop or binding tasks:
/// implementations must be cheap and must not block.
pub trait DecisionSink: Send + Sync {
    /// Records one decision.
    fn record(&self, decision: &Decision);
}

/// Writes each decision as one log line at info level (`tracing`), JSON or
/// text according to the subscriber.
#[derive(Debug, Default, Clone, Copy)]
pub struct LogSink;

impl DecisionSink for LogSink {
    fn record(&self, d: &Decision) {
        let rejected = if d.rejected.is_empty() {
            String::new()
        } else {
            d.rejected.iter().map(|(r, n)| format!("{n} {r}")).collect::<Vec<_>>().join(", ")
        };
        let latency_us = d.latency.as_micros() as u64;
        match &d.outcome {
            Outcome::Scheduled { node, score } => tracing::info!(
                target: "convoy::decision",
                pod = %d.pod, profile = %d.profile, result = "scheduled", node = %node, score,
                feasible = d.feasible, evaluated = d.evaluated, total = d.total,
                rejected = %rejected, attempt = d.attempt, latency_us,
                "scheduled {} on {}", d.pod, node
            ),
            Outcome::Unschedulable { message } => tracing::info!(
                target: "convoy::decision",
                pod = %d.pod, profile = %d.profile, result = "unschedulable",
                feasible = d.feasible, evaluated = d.evaluated, total = d.total,
                rejected = %rejected, attempt = d.attempt, latency_us,
                "{} is unschedulable: {}", d.pod, message
            ),
            Outcome::Error { message } => tracing::warn!(
                target: "convoy::decision",
                pod = %d.pod, profile = %d.profile, result = "error",
                attempt = d.attempt, latency_us,
                "{} failed to schedule: {}", d.pod, message
            ),
        }
    }
}

/// Sends every decision to several sinks.
pub struct Fanout(pub Vec<Arc<dyn DecisionSink>>);

impl DecisionSink for Fanout {
    fn record(&self, d: &Decision) {
        for s in &self.0 {
            s.record(d);
        }
    }
}
