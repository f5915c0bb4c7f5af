//! Every scheduling decision, explained once: a [`Decision`] goes to a
//! [`DecisionSink`], which writes the decision log line (and, with an API
//! server, the Event and the pod condition; in a simulation, the result
//! table).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use convoy_api::{GroupKey, PodKey};

pub use crate::conflicts::{DeviceViewMismatch, KubeletRejection, ResourceShortfall};

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
    /// The pod's group when the attempt was a group attempt (its Event is
    /// the group's aggregated one, see [`GroupDecision`]).
    pub group: Option<GroupKey>,
}

/// The decision recorded for a pod that cannot even enter the queue (an
/// unreadable spec): it stays pending, and the reason names the field.
pub fn invalid_pod_decision(e: &convoy_api::InvalidPod) -> Decision {
    Decision {
        pod: e.pod.clone(),
        uid: (!e.uid.is_empty()).then(|| e.uid.clone()),
        profile: Arc::from(""),
        outcome: Outcome::Unschedulable { message: format!("invalid pod: {}", e.message) },
        evaluated: 0,
        feasible: 0,
        total: 0,
        rejected: BTreeMap::new(),
        attempt: 0,
        latency: std::time::Duration::ZERO,
        since_first_attempt: None,
        group: None,
    }
}

/// How a group attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupOutcome {
    /// At least `minMember` members were placed and handed to binding.
    Placed,
    /// The group did not fit; nothing was reserved or bound.
    Unschedulable {
        /// Why, with the first failing member's aggregated message.
        message: String,
    },
}

impl GroupOutcome {
    /// The `result` label of `scheduler_podgroup_schedule_attempts_total`.
    pub fn result_label(&self) -> &'static str {
        match self {
            GroupOutcome::Placed => "scheduled",
            GroupOutcome::Unschedulable { .. } => "unschedulable",
        }
    }
}

/// One attempt to place a whole PodGroup in one cycle.
#[derive(Debug, Clone)]
pub struct GroupDecision {
    /// The group.
    pub group: GroupKey,
    /// The group's UID, when known (Events refer to it).
    pub uid: Option<std::sync::Arc<str>>,
    /// The profile.
    pub profile: Arc<str>,
    /// How it ended.
    pub outcome: GroupOutcome,
    /// Members placed in this attempt (tentatively, when it failed).
    pub placed: usize,
    /// Members tried.
    pub members: usize,
    /// Members already placed before the attempt.
    pub placed_before: usize,
    /// `minMember`.
    pub min_member: usize,
    /// Nodes used by the placed members, with the member count on each.
    pub nodes: BTreeMap<Arc<str>, usize>,
    /// Group attempts that failed before this one.
    pub failures_before: u32,
    /// Whether the members wait at the Permit barrier for members that do
    /// not exist yet.
    pub barrier: bool,
    /// From pop to the decision.
    pub latency: Duration,
}

impl GroupDecision {
    /// `n1×3 n2×2`: the nodes and how many members each got.
    pub fn nodes_summary(&self) -> String {
        self.nodes.iter().map(|(n, c)| format!("{n}×{c}")).collect::<Vec<_>>().join(" ")
    }
}

/// One run of preemption (PostFilter) for a pod that fit nowhere,
/// recorded before the pod's own (unschedulable) decision.
#[derive(Debug, Clone)]
pub struct PreemptionDecision {
    /// The preemptor.
    pub pod: PodKey,
    /// The profile.
    pub profile: Arc<str>,
    /// The preemptor's priority.
    pub priority: i32,
    /// The node the preemptor is nominated to, when victims were chosen.
    pub node: Option<Arc<str>>,
    /// The victims on that node, most important first, with their
    /// priorities.
    pub victims: Vec<(PodKey, i32)>,
    /// PostFilter's message (`preemption: ...`).
    pub message: String,
    /// When a whole pod group preempts: the group (`pod` is then one of its
    /// members, and `node` is `cluster`).
    pub group: Option<GroupKey>,
    /// When the preemptor replaces a pod preempted moments ago (same
    /// owner) and now preempts in turn: the chain so far.
    pub chain: Option<PreemptionChain>,
}

/// A preemption cascade: a pod was preempted, and its replacement (a pod
/// of the same owner) preempts others within
/// [`RunningPreemptions::CHAIN_WINDOW`](convoy_api::RunningPreemptions::CHAIN_WINDOW).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreemptionChain {
    /// The chain's depth with this preemption (2: one replacement preempts).
    pub depth: u32,
    /// The preemption this one follows.
    pub after: convoy_api::preemption::Preempted,
    /// How long before this one it was.
    pub ago: Duration,
}

impl PreemptionChain {
    /// `ns/train-0 preempted ns/infer-3 (ReplicaSet ns/infer) 12s before`.
    pub fn summary(&self) -> String {
        format!(
            "{} preempted {} ({}) {}s before",
            self.after.preemptor,
            self.after.victim,
            self.after.owner,
            self.ago.as_secs()
        )
    }
}

impl PreemptionDecision {
    /// `ns/a, ns/b`: the victims.
    pub fn victims_summary(&self) -> String {
        self.victims.iter().map(|(k, _)| k.to_string()).collect::<Vec<_>>().join(", ")
    }
}

/// Receives decisions. Called on the scheduling loop or binding tasks:
/// implementations must be cheap and must not block.
pub trait DecisionSink: Send + Sync {
    /// Records one decision.
    fn record(&self, decision: &Decision);

    /// Records one group attempt (before the per-pod decisions of its
    /// members). Ignored by default.
    fn record_group(&self, _decision: &GroupDecision) {}

    /// Records one run of preemption (before the preemptor's decision).
    /// Ignored by default.
    fn record_preemption(&self, _decision: &PreemptionDecision) {}

    /// Records a kubelet's rejection of a pod Convoy bound. Ignored by
    /// default.
    fn record_rejection(&self, _rejection: &KubeletRejection) {}

    /// Records a node whose allocatable dropped below what its pods
    /// request. Ignored by default.
    fn record_shortfall(&self, _shortfall: &ResourceShortfall) {}

    /// Records a node whose device plugin and DRA driver count its devices
    /// differently. Ignored by default.
    fn record_device_mismatch(&self, _mismatch: &DeviceViewMismatch) {}
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

    fn record_preemption(&self, d: &PreemptionDecision) {
        match (&d.node, &d.group) {
            (Some(_), Some(group)) => tracing::info!(
                target: "convoy::decision",
                group = %group, profile = %d.profile, result = "preempting",
                priority = d.priority, victims = %d.victims_summary(),
                victim_count = d.victims.len(),
                "pod group {} preempts {} pod(s): {}", group, d.victims.len(), d.victims_summary()
            ),
            (None, Some(group)) => tracing::debug!(
                target: "convoy::decision",
                group = %group, profile = %d.profile, result = "not preempting",
                "pod group {}: {}", group, d.message
            ),
            (Some(node), None) => tracing::info!(
                target: "convoy::decision",
                pod = %d.pod, profile = %d.profile, result = "preempting", node = %node,
                priority = d.priority, victims = %d.victims_summary(),
                victim_count = d.victims.len(),
                "{} preempts {} pod(s) on {}: {}", d.pod, d.victims.len(), node, d.victims_summary()
            ),
            (None, None) => tracing::debug!(
                target: "convoy::decision",
                pod = %d.pod, profile = %d.profile, result = "not preempting",
                "{}: {}", d.pod, d.message
            ),
        }
        if let Some(c) = &d.chain {
            tracing::warn!(
                target: "convoy::decision",
                pod = %d.pod, profile = %d.profile, result = "preemption chain",
                chain_depth = c.depth, after = %c.summary(),
                "preemption chain of depth {}: {}; its replacement {} now preempts {}",
                c.depth, c.summary(), d.pod, d.victims_summary()
            );
        }
    }

    fn record_rejection(&self, r: &KubeletRejection) {
        tracing::warn!(
            target: "convoy::decision",
            pod = %r.pod, profile = %r.profile, result = "rejected by kubelet", node = %r.node,
            reason = %r.reason, takers = %r.takers_summary(),
            "{}: {}", r.pod, r.pod_note()
        );
    }

    fn record_shortfall(&self, s: &ResourceShortfall) {
        tracing::warn!(
            node = %s.node, resource = %s.resource, allocatable = s.allocatable,
            requested = s.requested, "node {}: {}", s.node, s.note()
        );
    }

    fn record_device_mismatch(&self, m: &DeviceViewMismatch) {
        tracing::warn!(
            node = %m.node, resource = %m.resource, class = %m.class,
            allocatable = m.allocatable, devices = m.devices, "node {}: {}", m.node, m.note()
        );
    }

    fn record_group(&self, d: &GroupDecision) {
        let latency_us = d.latency.as_micros() as u64;
        let placed = d.placed_before + d.placed;
        let nodes = d.nodes_summary();
        match &d.outcome {
            GroupOutcome::Placed => tracing::info!(
                target: "convoy::decision",
                group = %d.group, profile = %d.profile, result = "scheduled",
                placed, members = d.members, min_member = d.min_member, nodes = %nodes,
                node_count = d.nodes.len(), barrier = d.barrier, attempt = d.failures_before + 1, latency_us,
                "pod group {} placed: {}/{} pods (minMember {}) on {} nodes [{}]{}",
                d.group, placed, d.placed_before + d.members, d.min_member, d.nodes.len(), nodes,
                if d.barrier { "; waiting at Permit for the members still to come" } else { "" }
            ),
            GroupOutcome::Unschedulable { message } => tracing::info!(
                target: "convoy::decision",
                group = %d.group, profile = %d.profile, result = "unschedulable",
                placed, members = d.members, min_member = d.min_member,
                attempt = d.failures_before + 1, latency_us,
                "pod group {} is unschedulable: {}", d.group, message
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

    fn record_preemption(&self, d: &PreemptionDecision) {
        for s in &self.0 {
            s.record_preemption(d);
        }
    }

    fn record_group(&self, d: &GroupDecision) {
        for s in &self.0 {
            s.record_group(d);
        }
    }

    fn record_rejection(&self, r: &KubeletRejection) {
        for s in &self.0 {
            s.record_rejection(r);
        }
    }

    fn record_shortfall(&self, r: &ResourceShortfall) {
        for s in &self.0 {
            s.record_shortfall(r);
        }
    }

    fn record_device_mismatch(&self, m: &DeviceViewMismatch) {
        for s in &self.0 {
            s.record_device_mismatch(m);
        }
    }
}
