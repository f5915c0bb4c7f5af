//! A pod as the scheduler sees it: the API object plus what plugins need on
//! every cycle, computed once when the pod enters the scheduler.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, PodSpec};

use crate::affinity::PodAffinity;
use crate::labels::{Labels, no_labels};
use crate::pod_fields::{UnevaluatedField, unevaluated_pod_fields};
use crate::resource::{PodRequests, pod_requests};

/// `namespace/name` of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl PodKey {
    /// Builds a key.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self { namespace: Arc::from(namespace), name: Arc::from(name) }
    }

    /// The key of a pod object (empty namespace is `default`).
    pub fn of(pod: &Pod) -> Self {
        Self::new(
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or(""),
        )
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Network protocol of a host port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP (the default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

/// A host port a container asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Protocol.
    pub protocol: Protocol,
    /// Host IP; `0.0.0.0` (the default) conflicts with every IP.
    pub ip: Arc<str>,
    /// Port number.
    pub port: i32,
}

impl HostPort {
    /// Whether two host ports cannot both be used on one node.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (&*self.ip == "0.0.0.0" || &*other.ip == "0.0.0.0" || self.ip == other.ip)
    }
}

/// The host ports a pod holds on its node, as upstream's `GetHostPorts`:
/// the app containers' and the sidecars' (restartable init containers);
/// other init containers have exited by the time the pod runs.
pub fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let mut out = Vec::new();
    for c in sidecars.chain(spec.containers.iter()) {
        for p in c.ports.iter().flatten() {
            let port = p.host_port.unwrap_or(0);
            if port <= 0 {
                continue;
            }
            let protocol = match p.protocol.as_deref() {
                Some("UDP") => Protocol::Udp,
                Some("SCTP") => Protocol::Sctp,
                _ => Protocol::Tcp,
            };
            let ip = p.host_ip.as_deref().filter(|s| !s.is_empty()).unwrap_or("0.0.0.0");
            out.push(HostPort { protocol, ip: Arc::from(ip), port });
        }
    }
    out
}

/// A pod plus the data derived from it once (requests, priority, ports).
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// The API object.
    pub pod: Arc<Pod>,
    /// `namespace/name`.
    pub key: PodKey,
    /// `metadata.uid` ("" when absent, e.g. in simulations).
    pub uid: Arc<str>,
    /// Effective requests (see [`pod_requests`]).
    pub requests: PodRequests,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Host ports of its containers and sidecars (see [`host_ports`]).
    pub host_ports: Vec<HostPort>,
    /// The PodGroup the pod belongs to, if any (see
    /// [`group_key_of`](crate::pod_group::group_key_of)).
    pub group: Option<crate::pod_group::GroupKey>,
    /// Parsed `spec.affinity.podAffinity`/`podAntiAffinity` terms; `None`
    /// when the pod has neither (most pods).
    pub affinity: Option<Arc<PodAffinity>>,
    /// The fields the pod uses that Convoy does not evaluate yet (see
    /// [`pod_fields`](crate::pod_fields)); empty for most pods. The framework
    /// refuses a pending pod that has any; an assigned one counts as usual.
    pub unevaluated: Vec<UnevaluatedField>,
    /// Its volumes that name a claim (see [`ClaimVolumes`]).
    pub claim_volumes: ClaimVolumes,
}

/// What a pod's volumes ask of claims, counted once when the pod is read:
/// NodeVolumeLimits bounds a node's attached volumes by these sums (kept in
/// [`NodeInfo`](crate::NodeInfo)) before it looks any claim up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClaimVolumes {
    /// Volumes with `persistentVolumeClaim` or `ephemeral`: at most one
    /// attached volume each.
    pub count: u32,
    /// Pods (0 or 1 for a pod; a sum on a node) with an `ephemeral` volume
    /// or a `persistentVolumeClaim` without a name, whose lookups can fail
    /// on their own (an ephemeral claim owned by another pod, a claim with
    /// no name): their node's volumes are always counted exactly.
    pub pods_to_check: u32,
}

impl ClaimVolumes {
    /// A pod's.
    pub fn of(spec: &k8s_openapi::api::core::v1::PodSpec) -> Self {
        let mut out = Self::default();
        let mut check = false;
        for v in spec.volumes.iter().flatten() {
            if v.ephemeral.is_some() {
                check = true;
                out.count += 1;
            } else if let Some(c) = &v.persistent_volume_claim {
                check |= c.claim_name.is_empty();
                out.count += 1;
            }
        }
        out.pods_to_check = u32::from(check);
        out
    }

    /// Adds a pod's.
    pub fn add(&mut self, pod: ClaimVolumes) {
        self.count = self.count.saturating_add(pod.count);
        self.pods_to_check = self.pods_to_check.saturating_add(pod.pods_to_check);
    }

    /// Takes a pod's away.
    pub fn sub(&mut self, pod: ClaimVolumes) {
        self.count = self.count.saturating_sub(pod.count);
        self.pods_to_check = self.pods_to_check.saturating_sub(pod.pods_to_check);
    }
}

/// A pod whose spec cannot be scheduled as written; names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pod {pod}: {message}")]
pub struct InvalidPod {
    /// The pod.
    pub pod: PodKey,
    /// `metadata.uid` (empty when unset), so that the refusal is written
    /// on this pod and not on one recreated under the same name.
    pub uid: Arc<str>,
    /// What is wrong, starting with the field path.
    pub message: String,
}

impl PodInfo {
    /// Derives the scheduling data of a pod. Fails (naming the field) when
    /// the pod has no spec, or an unparsable or negative quantity in a list
    /// the API server validates ([`crate::resource::check_quantities`]).
    pub fn new(pod: Arc<Pod>) -> Result<Self, InvalidPod> {
        let key = PodKey::of(&pod);
        let uid: Arc<str> = Arc::from(pod.metadata.uid.as_deref().unwrap_or(""));
        let invalid = |message: String| InvalidPod { pod: key.clone(), uid: uid.clone(), message };
        let spec = pod.spec.as_ref().ok_or_else(|| invalid("spec: missing".to_string()))?;
        let requests = pod_requests(spec).map_err(invalid)?;
        let affinity = PodAffinity::of(&key.namespace, spec.affinity.as_ref()).map(Arc::new);
        Ok(Self {
            uid,
            priority: spec.priority.unwrap_or(0),
            key,
            requests,
            host_ports: host_ports(spec),
            group: crate::pod_group::group_key_of(&pod),
            affinity,
            unevaluated: unevaluated_pod_fields(&pod),
            claim_volumes: ClaimVolumes::of(spec),
            pod,
        })
    }

    /// `metadata.labels` (empty when unset).
    pub fn labels(&self) -> &Labels {
        self.pod.metadata.labels.as_ref().unwrap_or(no_labels())
    }

    /// `metadata.namespace` (`default` when unset).
    pub fn namespace(&self) -> &str {
        &self.key.namespace
    }

    /// Whether the pod has required pod anti-affinity terms.
    pub fn has_required_anti_affinity(&self) -> bool {
        self.affinity.as_ref().is_some_and(|a| a.has_required_anti_affinity())
    }

    /// Whether the pod is being deleted (`metadata.deletionTimestamp` set).
    pub fn is_terminating(&self) -> bool {
        self.pod.metadata.deletion_timestamp.is_some()
    }

    /// `spec.schedulerName` (`default-scheduler` when unset, as upstream).
    pub fn scheduler_name(&self) -> &str {
        self.spec().scheduler_name.as_deref().unwrap_or("default-scheduler")
    }

    /// `spec.nodeName`, when the pod is assigned.
    pub fn node_name(&self) -> Option<&str> {
        self.spec().node_name.as_deref().filter(|n| !n.is_empty())
    }

    /// The pod spec (always present: checked by [`PodInfo::new`]).
    pub fn spec(&self) -> &k8s_openapi::api::core::v1::PodSpec {
        self.pod.spec.as_ref().expect("PodInfo::new checks the spec")
    }

    /// Whether `spec.preemptionPolicy` is `Never`: the pod never preempts
    /// others (it still sorts by priority, and may itself be a victim).
    pub fn never_preempts(&self) -> bool {
        self.spec().preemption_policy.as_deref() == Some("Never")
    }

    /// `status.startTime`, when the pod has started.
    pub fn start_time(&self) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
        self.pod.status.as_ref()?.start_time.as_ref()
    }

    /// The start time as a sortable key: nanoseconds since the epoch, or
    /// "now" (later than any start) when the pod has not started, as
    /// upstream's `GetPodStartTime`.
    pub fn start_key(&self) -> i128 {
        self.start_time().map_or(i128::MAX, |t| t.0.as_nanosecond())
    }

    /// The latest time the pod can still hold its node by what it declares,
    /// in nanoseconds since the epoch: `status.startTime` +
    /// `spec.activeDeadlineSeconds` (the kubelet fails the pod then), or
    /// `metadata.deletionTimestamp` when it is being deleted (the time the
    /// API server gave it to be gone), whichever is earlier. `None` when it
    /// declares neither bound (it has not started, or sets no deadline, and
    /// is not being deleted): it may run for ever.
    pub fn declared_end(&self) -> Option<i128> {
        let deadline =
            self.start_time().and_then(|t| self.deadline_if_started_at(t.0.as_nanosecond()));
        let deleted = self.pod.metadata.deletion_timestamp.as_ref().map(|t| t.0.as_nanosecond());
        match (deadline, deleted) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the kubelet would fail the pod by its `spec.activeDeadlineSeconds`
    /// if it started at `start` (nanoseconds since the epoch); `None`
    /// without a deadline.
    pub fn deadline_if_started_at(&self, start: i128) -> Option<i128> {
        let d = self.spec().active_deadline_seconds?;
        Some(start.saturating_add(i128::from(d).saturating_mul(1_000_000_000)))
    }

    /// Whether the pod has `spec.schedulingGates`.
    pub fn is_gated(&self) -> bool {
        self.spec().scheduling_gates.as_ref().is_some_and(|g| !g.is_empty())
    }

    /// Whether the pod has finished (Succeeded or Failed) and so no longer
    /// holds node resources.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    }
}

/// A pod waiting in the scheduling queue, with its queueing history.
#[derive(Debug, Clone)]
pub struct QueuedPodInfo {
    /// The pod.
    pub pod_info: Arc<PodInfo>,
    /// When the pod was last added to a queue.
    pub timestamp: Instant,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When the pod was first popped for scheduling (for the SLI metric).
    pub initial_attempt_timestamp: Option<Instant>,
    /// Plugins that rejected the pod in its last attempt: only events they
    /// registered can make it schedulable again.
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// Plugins that returned Pending in its last attempt.
    pub pending_plugins: BTreeSet<&'static str>,
    /// Whether a PreEnqueue plugin holds the pod back.
    pub gated: bool,
    /// Added to the pod's backoff after its next failed attempt: the gang
    /// scheduler sets a random jitter on a failed group's members so that
    /// competing groups do not retry in lockstep.
    pub backoff_jitter: std::time::Duration,
}

impl QueuedPodInfo {
    /// A pod that has just arrived.
    pub fn new(pod_info: Arc<PodInfo>, now: Instant) -> Self {
        Self {
            pod_info,
            timestamp: now,
            attempts: 0,
            initial_attempt_timestamp: None,
            unschedulable_plugins: BTreeSet::new(),
            pending_plugins: BTreeSet::new(),
            gated: false,
            backoff_jitter: std::time::Duration::ZERO,
        }
    }

    /// The pod's key.
    pub fn key(&self) -> &PodKey {
        &self.pod_info.key
    }
}
