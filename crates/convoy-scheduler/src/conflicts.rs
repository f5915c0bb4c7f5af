//! Beside other schedulers and real kubelets: what Convoy does when its view
//! of a node and the node's own disagree.
//!
//! - **Before each binding** the node is checked against the freshest cache
//!   ([`Scheduler::room_taken`]): pods another scheduler bound there since
//!   the scheduling cycle chose it (delivered by the watch meanwhile) may
//!   have taken the room. The binding is then not sent, and the pod goes
//!   back to the queue as if Filter had rejected the node.
//!   While another scheduler is at work (a pod of its created or bound
//!   within [`CONTENTION_WINDOW`]), the binding first waits while that
//!   scheduler has pods that appeared moments ago still pending (at most
//!   [`YIELD_WINDOW`]: it goes first), then the node's pods are read from
//!   the API server ([`convoy_api::Binder::pods_on_node`], one consistent
//!   list per binding): bindings of the other scheduler that the watch has
//!   not delivered yet count too.
//! - **Another scheduler's nominations** (`status.nominatedNodeName` of its
//!   pending pods) count as Convoy's own do: Filter leaves their room free.
//! - **A kubelet's rejection** of a pod Convoy bound (phase `Failed`,
//!   message `Pod was rejected: ...`, reason `OutOfcpu`,
//!   `OutOfnvidia.com/gpu`, `NodeAffinity`, ...) is explained
//!   ([`KubeletRejection`]: a log line, a Warning Event on the pod and on
//!   the node naming the pods that took the room and who bound them, and
//!   `convoy_kubelet_rejections_total{reason}`), and the node is held out
//!   of scheduling for [`REJECTION_HOLD`]: Convoy's cache holds the node
//!   with a `NoSchedule` taint [`HOLD_TAINT`] (never written to the API
//!   server), so pods that do not tolerate every taint go elsewhere, and
//!   TaintToleration's message says why (`node(s) were held out of
//!   scheduling after their kubelet rejected a pod ...`).
//! - **A node whose allocatable drops below what its pods request** (a GPU
//!   turned unhealthy and its device plugin shrank `nvidia.com/gpu`) is
//!   reported once per drop ([`ResourceShortfall`]: a log line, a Warning
//!   Event on the node, `convoy_node_resource_shortfalls_total{resource}`);
//!   NodeResourcesFit then places nothing more that needs the resource
//!   there, and the pending pods are tried again (the update is a
//!   node-allocatable event).
//! - **A node whose device plugin and DRA driver disagree** (it reports an
//!   extended resource, and publishes ResourceSlices for the DeviceClass
//!   whose `extendedResourceName` is that resource, with another count) is
//!   reported once per difference ([`DeviceViewMismatch`]: a log line, a
//!   Warning Event on the node, `convoy_device_view_mismatches_total`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoy_api::{ActionType, ClusterEvent, EventObject, EventResource, NodeInfo, PodInfo, PodKey};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use parking_lot::Mutex;

use crate::scheduler::Scheduler;

/// The taint Convoy's cache puts on a node whose kubelet rejected a pod
/// Convoy bound, while the node is held (its value is the kubelet's
/// reason). Never written to the API server.
pub const HOLD_TAINT: &str = convoy_api::KUBELET_REJECTED_TAINT;

/// How long a node whose kubelet rejected a pod Convoy bound is held out of
/// scheduling: several watch round trips, so that the pods that took the
/// room (bound by another scheduler, or admitted before Convoy's cache saw
/// them) have reached the cache when the node is offered again.
pub const REJECTION_HOLD: Duration = Duration::from_secs(5);

/// The message prefix the kubelet gives a pod it rejects at admission
/// (`rejectPod` in `pkg/kubelet/kubelet.go`).
pub const REJECTED_PREFIX: &str = "Pod was rejected: ";

/// Pods named as having taken the room, at most.
const TAKERS_SHOWN: usize = 5;

/// A pod that was bound to a node by another scheduler (or by Convoy) and
/// is named as having taken the room a rejected pod needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taker {
    /// The pod.
    pub pod: PodKey,
    /// Its `spec.schedulerName` (who bound it).
    pub scheduler: String,
}

/// A kubelet rejected at admission a pod Convoy bound.
#[derive(Debug, Clone)]
pub struct KubeletRejection {
    /// The rejected pod.
    pub pod: PodKey,
    /// Its UID.
    pub uid: Arc<str>,
    /// The profile that bound it.
    pub profile: Arc<str>,
    /// The node.
    pub node: Arc<str>,
    /// The node's UID, when the cache has the node.
    pub node_uid: Option<String>,
    /// The kubelet's reason (`OutOfcpu`, `OutOfnvidia.com/gpu`,
    /// `NodeAffinity`, ...).
    pub reason: String,
    /// The kubelet's message, without its `Pod was rejected: ` prefix.
    pub message: String,
    /// The pods on the node that need what the pod was refused, most
    /// recently bound first (at most five).
    pub takers: Vec<Taker>,
    /// How long the node is held out of scheduling.
    pub hold: Duration,
}

impl KubeletRejection {
    /// `ns/a (default-scheduler), ns/b (convoy)`, or `none that Convoy has
    /// seen yet`.
    pub fn takers_summary(&self) -> String {
        if self.takers.is_empty() {
            return "none that Convoy has seen yet".into();
        }
        names(&self.takers)
    }

    /// The note of the pod's Event.
    pub fn pod_note(&self) -> String {
        format!(
            "kubelet on node {} rejected the pod after {} bound it ({}: {}); pods bound there \
             that need the same: {}; {} keeps the node out of scheduling for {}s",
            self.node,
            self.profile,
            self.reason,
            self.message,
            self.takers_summary(),
            self.profile,
            self.hold.as_secs()
        )
    }

    /// The note of the node's Event.
    pub fn node_note(&self) -> String {
        format!(
            "kubelet rejected pod {} bound by {} ({}); the room was taken by: {}; held out of \
             {}'s scheduling for {}s",
            self.pod,
            self.profile,
            self.reason,
            self.takers_summary(),
            self.profile,
            self.hold.as_secs()
        )
    }

    /// The `reason` label of `convoy_kubelet_rejections_total`: the
    /// kubelet's reason, bounded as the kubelet bounds its own metric (its
    /// known reasons and `OutOf<resource>`; anything else is `Other`).
    pub fn reason_label(&self) -> Arc<str> {
        const KNOWN: &[&str] = &[
            "NodeAffinity",
            "NodeName",
            "NodePorts",
            "TaintToleration",
            "UnexpectedAdmissionError",
            "UnknownReason",
            "UnexpectedPredicateFailureType",
            "PodOSSelectorNodeLabelDoesNotMatch",
            "PodOSNotSupported",
            "InvalidNodeInfo",
            "InitContainerRestartPolicyForbidden",
            "SupplementalGroupsPolicyNotSupported",
            "PodLevelResourcesNotAdmitted",
            "PodFeatureUnsupported",
            "AppArmor",
            "Evicted",
            "SysctlForbidden",
            "TopologyAffinityError",
            "NodeShutdown",
            "VolumeAttachmentLimitExceeded",
        ];
        if self.reason.starts_with("OutOf") || KNOWN.contains(&self.reason.as_str()) {
            Arc::from(self.reason.as_str())
        } else {
            Arc::from("Other")
        }
    }
}

/// A node's allocatable dropped below what the pods on it request.
#[derive(Debug, Clone)]
pub struct ResourceShortfall {
    /// The node.
    pub node: Arc<str>,
    /// The node's UID.
    pub node_uid: Option<String>,
    /// The resource (`nvidia.com/gpu`).
    pub resource: String,
    /// The node's allocatable now.
    pub allocatable: i64,
    /// The sum of its pods' requests.
    pub requested: i64,
    /// The pods on the node that request the resource (at most five).
    pub pods: Vec<PodKey>,
}

impl ResourceShortfall {
    /// The note of the node's Event and the log line.
    pub fn note(&self) -> String {
        let pods = self.pods.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        format!(
            "allocatable {} dropped to {} while its pods request {} ({pods}): the device \
             plugin and the scheduler disagree (an unhealthy device?); nothing more that needs \
             {} is placed on this node until allocatable covers its pods",
            self.resource, self.allocatable, self.requested, self.resource
        )
    }
}

/// A node's device plugin and its DRA driver count the same devices
/// differently: `status.allocatable[resource]` against the devices its
/// ResourceSlices publish for the DeviceClass whose `extendedResourceName`
/// is that resource.
#[derive(Debug, Clone)]
pub struct DeviceViewMismatch {
    /// The node.
    pub node: Arc<str>,
    /// The node's UID.
    pub node_uid: Option<String>,
    /// The extended resource (`nvidia.com/gpu`).
    pub resource: String,
    /// The DeviceClass naming it.
    pub class: String,
    /// The node's allocatable.
    pub allocatable: i64,
    /// The devices its ResourceSlices publish for the class.
    pub devices: usize,
}

impl DeviceViewMismatch {
    /// The note of the node's Event and the log line.
    pub fn note(&self) -> String {
        format!(
            "the device plugin reports {} {} (allocatable) while ResourceSlices publish {} \
             devices of DeviceClass {} (extendedResourceName {}): one of the two views of the \
             node's devices is stale (an unhealthy device?)",
            self.allocatable, self.resource, self.devices, self.class, self.resource
        )
    }
}

/// The last mismatch reported per node and resource, so a mismatch is
/// reported once, and again only when the counts change.
#[derive(Debug, Default)]
pub(crate) struct DeviceViews {
    reported: Mutex<HashMap<NodeResource, (i64, usize)>>,
}

/// A node and an extended resource.
type NodeResource = (Arc<str>, String);

/// The kubelet's reason and message when `new` is the first version of a
/// pod showing its rejection at admission.
pub fn rejection_of(old: &Pod, new: &Pod) -> Option<(String, String)> {
    let status = new.status.as_ref()?;
    if status.phase.as_deref() != Some("Failed") {
        return None;
    }
    let was_failed = old.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
    let message = status.message.as_deref()?.strip_prefix(REJECTED_PREFIX)?;
    (!was_failed).then(|| (status.reason.clone().unwrap_or_default(), message.to_string()))
}

/// The resource an `OutOf<resource>` reason names (`OutOfcpu`: `cpu`).
fn resource_of(reason: &str) -> Option<&str> {
    reason.strip_prefix("OutOf").filter(|r| !r.is_empty())
}

/// When a pod was bound: its `PodScheduled=True` transition, else its
/// creation.
fn bound_at(pod: &Pod) -> Option<&k8s_openapi::jiff::Timestamp> {
    let scheduled = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| {
        cs.iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "True")
            .and_then(|c| c.last_transition_time.as_ref())
    });
    scheduled.or(pod.metadata.creation_timestamp.as_ref()).map(|t| &t.0)
}

/// `ns/a (default-scheduler), ns/b (convoy)`.
fn names(takers: &[Taker]) -> String {
    takers.iter().map(|t| format!("{} ({})", t.pod, t.scheduler)).collect::<Vec<_>>().join(", ")
}

/// Whether the kubelet checks `resource` on `node`: the standard resources
/// always, an extended one only where the node reports it (the kubelet
/// ignores the others, `removeMissingExtendedResources`).
fn checked(node: &NodeInfo, resource: &str) -> bool {
    matches!(resource, "cpu" | "memory" | "ephemeral-storage")
        || node.allocatable.scalar.contains_key(resource)
}

/// The pods on `node` other than `uid` that need `resource` (all of them
/// for `None`), most recently bound first.
fn takers(node: &NodeInfo, uid: &str, resource: Option<&str>) -> Vec<Taker> {
    let mut on: Vec<&Arc<PodInfo>> = node
        .pods
        .iter()
        .filter(|p| &*p.uid != uid && !p.is_terminal())
        .filter(|p| match resource {
            Some("pods") | None => true,
            Some(r) => p.requests.requests.get(r) > 0,
        })
        .collect();
    on.sort_by(|a, b| bound_at(&b.pod).cmp(&bound_at(&a.pod)));
    on.into_iter()
        .take(TAKERS_SHOWN)
        .map(|p| Taker { pod: p.key.clone(), scheduler: p.scheduler_name().to_string() })
        .collect()
}

/// Why `node` (as the cache holds it, with `pod` assumed on it) no longer
/// has room for `pod`: a resource the pod requests and the node reports is
/// over-committed. The kubelet's own check, on Convoy's freshest view.
pub fn overcommitted(node: &NodeInfo, pod: &PodInfo) -> Option<String> {
    let over = |name: &str| node.requested.get(name) > node.allocatable.get(name);
    let req = &pod.requests.requests;
    let mut short = Vec::new();
    if over("pods") {
        short.push("pods".to_string());
    }
    for (name, amount) in req.iter_named() {
        if amount <= 0 || name == "pods" {
            continue;
        }
        if checked(node, name) && over(name) {
            short.push(name.to_string());
        }
    }
    if short.is_empty() {
        return None;
    }
    let resource = short.first().map(String::as_str);
    let others = takers(node, &pod.uid, resource);
    let named = if others.is_empty() {
        String::new()
    } else {
        format!("; bound there since it was chosen, among others: {}", names(&others))
    };
    let insufficient: Vec<String> = short.iter().map(|r| format!("Insufficient {r}")).collect();
    Some(format!(
        "node {} no longer has room for the pod ({}){named}",
        node.name(),
        insufficient.join(", ")
    ))
}

/// The resources whose allocatable on `new` is below what the pods on the
/// node request, and that were not short on `old` (`None`: not known).
fn shortfalls(old: Option<&NodeInfo>, new: &NodeInfo) -> Vec<(String, i64, i64)> {
    let mut out = Vec::new();
    for (name, requested) in new.requested.iter_named() {
        if name == "pods" || requested <= 0 {
            continue;
        }
        let reported = checked(new, name);
        let allocatable = new.allocatable.get(name);
        // A node that does not report an extended resource at all (its
        // device plugin is gone) is short of all of it.
        let short = requested > allocatable
            && (reported || old.is_some_and(|o| o.allocatable.scalar.contains_key(name)));
        let was_short = old.is_some_and(|o| o.requested.get(name) > o.allocatable.get(name));
        if short && !was_short {
            out.push((name.to_string(), allocatable, requested));
        }
    }
    out
}

/// The nodes held out of scheduling after a kubelet rejection: the node
/// object as the API server has it (the cache holds a tainted copy) and
/// until when.
#[derive(Debug, Default)]
pub(crate) struct NodeHolds {
    held: Mutex<HashMap<Arc<str>, Hold>>,
}

#[derive(Debug)]
struct Hold {
    until: Instant,
    real: Arc<Node>,
    reason: String,
}

impl NodeHolds {
    /// The node to give the cache for `node` (the API server's version):
    /// a held node gets its taint back, and its real version is kept.
    pub(crate) fn cache_view(&self, node: Arc<Node>) -> Arc<Node> {
        let mut held = self.held.lock();
        let name = node.metadata.name.as_deref().unwrap_or("");
        match held.get_mut(name) {
            Some(h) => {
                h.real = node.clone();
                Arc::new(with_hold_taint(&node, &h.reason))
            }
            None => node,
        }
    }

    /// A node gone: its hold ends.
    pub(crate) fn node_deleted(&self, node: &str) {
        self.held.lock().remove(node);
    }
}

/// A copy of `node` with the hold taint (value `reason`).
fn with_hold_taint(node: &Node, reason: &str) -> Node {
    let mut copy = node.clone();
    let taints = copy.spec.get_or_insert_with(Default::default).taints.get_or_insert_with(Vec::new);
    taints.retain(|t| t.key != HOLD_TAINT);
    taints.push(Taint {
        key: HOLD_TAINT.into(),
        value: Some(reason.into()),
        effect: "NoSchedule".into(),
        time_added: None,
    });
    copy
}

/// How long after another scheduler was last seen at work (a pod of its
/// created or bound) Convoy reads a node's pods from the API server before
/// binding there.
pub const CONTENTION_WINDOW: Duration = Duration::from_secs(10);

/// How long a binding waits, at most, for another scheduler's pods that
/// appeared moments ago (within this window) to be placed before it reads
/// the node's pods.
pub const YIELD_WINDOW: Duration = Duration::from_secs(1);

/// What Convoy knows of other schedulers at work.
#[derive(Debug, Default)]
pub(crate) struct Foreign {
    /// When one of their pods was last created or bound.
    last_activity: Option<Instant>,
    /// Their pending pods, by UID, and when each was first seen (pruned
    /// after [`YIELD_WINDOW`]).
    pending: HashMap<Arc<str>, Instant>,
}

/// Why `node` (as the cache holds it: its pods, and the pods Convoy has
/// assumed there, `pod` among them) has no room for `pod` once the pods the
/// API server holds there that the cache has not seen yet (`pods`, read
/// just now) are added; those are named.
fn fresh_overcommitted(node: &NodeInfo, pod: &PodInfo, pods: &[Arc<Pod>]) -> Option<String> {
    let seen: std::collections::HashSet<&str> = node.pods.iter().map(|p| &*p.uid).collect();
    let mut fresh = NodeInfo::clone(node);
    let mut unseen = Vec::new();
    for p in pods {
        let uid = p.metadata.uid.as_deref().unwrap_or("");
        if uid == &*pod.uid || seen.contains(uid) {
            continue;
        }
        let Ok(info) = PodInfo::new(p.clone()) else { continue };
        if info.is_terminal() {
            continue;
        }
        unseen.push(Taker { pod: info.key.clone(), scheduler: info.scheduler_name().into() });
        fresh.add_pod(Arc::new(info));
    }
    if unseen.is_empty() {
        return None; // nothing the cache did not know: `room_taken` decided
    }
    let why = overcommitted(&fresh, pod)?;
    Some(format!("{why}; read from the API server, not yet in Convoy's cache: {}", names(&unseen)))
}

impl Scheduler {
    /// Why the node chosen for `pod` no longer has room for it, on the
    /// freshest cache (checked just before the binding call).
    pub(crate) fn room_taken(&self, pod: &PodInfo, node: &str) -> Option<String> {
        let info = self.cache.node_info(node)?;
        overcommitted(&info, pod)
    }

    /// Another scheduler's pod `uid` was created (pending) or bound.
    pub(crate) fn foreign_pod_seen(&self, uid: &Arc<str>, pending: bool) {
        let now = self.clock.now();
        let mut f = self.foreign.lock();
        f.last_activity = Some(now);
        if pending {
            f.pending.entry(uid.clone()).or_insert(now);
        } else {
            f.pending.remove(uid);
        }
    }

    /// Another scheduler's pending pod is gone.
    pub(crate) fn foreign_pod_gone(&self, uid: &str) {
        let mut f = self.foreign.lock();
        if !f.pending.is_empty() {
            f.pending.remove(uid);
        }
    }

    /// Whether another scheduler was at work within [`CONTENTION_WINDOW`].
    pub(crate) fn contended(&self) -> bool {
        let last = self.foreign.lock().last_activity;
        last.is_some_and(|t| self.clock.now().saturating_duration_since(t) < CONTENTION_WINDOW)
    }

    /// Whether another scheduler has pods it is about to place: pending
    /// pods of its that appeared within [`YIELD_WINDOW`].
    fn foreign_in_flight(&self) -> bool {
        let now = self.clock.now();
        let mut f = self.foreign.lock();
        f.pending.retain(|_, seen| now.saturating_duration_since(*seen) < YIELD_WINDOW);
        !f.pending.is_empty()
    }

    /// While another scheduler is at work, the node's pods as the API
    /// server holds them now: why they leave no room for `pod`, if they do
    /// not. Convoy first lets the other scheduler's pods that appeared
    /// moments ago be placed (it waits while any is pending, at most
    /// [`YIELD_WINDOW`]), then reads: one consistent read per binding, and
    /// only then. The cache cannot hold the other scheduler's bindings its
    /// watch has not delivered yet.
    pub(crate) async fn room_taken_fresh(&self, pod: &PodInfo, node: &Arc<str>) -> Option<String> {
        if !self.contended() {
            return None;
        }
        let started = std::time::Instant::now();
        let mut waited = false;
        while self.foreign_in_flight() && started.elapsed() < YIELD_WINDOW {
            tokio::time::sleep(Duration::from_millis(20)).await;
            waited = true;
        }
        // The cache again: what the watch delivered while this waited.
        if waited && let Some(why) = self.room_taken(pod, node) {
            return Some(why);
        }
        let pods = self.binder.pods_on_node(node.clone()).await?;
        let info = self.cache.node_info(node)?;
        fresh_overcommitted(&info, pod, &pods)
    }

    /// A pod of ours, bound, turned `Failed` by its kubelet's admission:
    /// hold its node, and explain it when `report` (this replica leads; see
    /// the module docs).
    pub(crate) fn kubelet_rejected(
        &self,
        pod: &PodInfo,
        reason: String,
        message: String,
        report: bool,
    ) {
        let Some(node) = pod.node_name().map(Arc::<str>::from) else { return };
        let info = self.cache.node_info(&node);
        // Only the resource reasons and host ports are about room others
        // took; the others (affinity, taints, the OS) name nobody.
        let takers = match (&info, resource_of(&reason)) {
            (Some(i), Some(resource)) => takers(i, &pod.uid, Some(resource)),
            (Some(i), None) if reason == "NodePorts" => takers(i, &pod.uid, None),
            _ => Vec::new(),
        };
        let node_uid = info.as_ref().and_then(|i| i.node()).and_then(|n| n.metadata.uid.clone());
        let rejection = KubeletRejection {
            pod: pod.key.clone(),
            uid: pod.uid.clone(),
            profile: Arc::from(pod.scheduler_name()),
            node: node.clone(),
            node_uid,
            reason,
            message,
            takers,
            hold: REJECTION_HOLD,
        };
        if report {
            self.sink.record_rejection(&rejection);
        }
        self.hold_node(&node, &rejection.reason);
    }

    /// Holds `node` out of scheduling for [`REJECTION_HOLD`] (from now; a
    /// second rejection extends it).
    fn hold_node(&self, node: &str, reason: &str) {
        let Some(real) = self.cache.node_info(node).and_then(|i| i.node().cloned()) else {
            return;
        };
        let until = self.clock.now() + REJECTION_HOLD;
        {
            let mut held = self.holds.held.lock();
            let real = match held.remove(node) {
                Some(h) => h.real,
                None => real,
            };
            self.cache.update_node(Arc::new(with_hold_taint(&real, reason)));
            held.insert(Arc::from(node), Hold { until, real, reason: reason.to_string() });
        }
    }

    /// Ends the holds that are over: the cache gets the node as the API
    /// server has it, and the pods its taint turned away are tried again.
    pub fn release_node_holds(&self) {
        let now = self.clock.now();
        let released: Vec<(Arc<Node>, Arc<Node>)> = {
            let mut held = self.holds.held.lock();
            let over: Vec<Arc<str>> =
                held.iter().filter(|(_, h)| h.until <= now).map(|(n, _)| n.clone()).collect();
            over.into_iter()
                .filter_map(|n| held.remove(&n))
                .filter_map(|h| {
                    let tainted = self.cache.node_info(h.real.metadata.name.as_deref()?)?;
                    let tainted = tainted.node()?.clone();
                    self.cache.update_node(h.real.clone());
                    Some((tainted, h.real))
                })
                .collect()
        };
        for (old, new) in released {
            tracing::info!(
                node = new.metadata.name.as_deref().unwrap_or(""),
                "node offered to scheduling again after its kubelet's rejection"
            );
            self.queue.move_all_to_active_or_backoff(
                ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_TAINT),
                Some(&EventObject::Node(old)),
                Some(&EventObject::Node(new)),
            );
        }
    }

    /// After a change to a node or its ResourceSlices: report where its
    /// device plugin and its DRA driver disagree (see
    /// [`DeviceViewMismatch`]).
    pub(crate) fn check_device_views(&self, node: &str) {
        let Some(info) = self.cache.node_info(node) else { return };
        // Only resources the device plugin reports: where DRA alone
        // publishes the devices, there is nothing to compare.
        let reports = |r: &str| info.allocatable.scalar.contains_key(r);
        let views =
            convoy_plugins::dynamic_resources::views::class_devices(&*self.objects, node, reports);
        let mut reported = self.device_views.reported.lock();
        for v in views {
            let allocatable = info.allocatable.get(&v.resource);
            let key = (info.name_arc().clone(), v.resource.clone());
            if allocatable == v.devices as i64 {
                reported.remove(&key);
                continue;
            }
            if reported.get(&key) == Some(&(allocatable, v.devices)) {
                continue;
            }
            reported.insert(key, (allocatable, v.devices));
            self.sink.record_device_mismatch(&DeviceViewMismatch {
                node: info.name_arc().clone(),
                node_uid: info.node().and_then(|n| n.metadata.uid.clone()),
                resource: v.resource,
                class: v.class,
                allocatable,
                devices: v.devices,
            });
        }
    }

    /// After a node update: report the resources whose allocatable dropped
    /// below what the node's pods request.
    pub(crate) fn check_shortfall(&self, before: Option<Arc<NodeInfo>>, name: &str) {
        let Some(after) = self.cache.node_info(name) else { return };
        for (resource, allocatable, requested) in shortfalls(before.as_deref(), &after) {
            // In name order, so the note reads the same whichever pod
            // the cache saw first.
            let mut pods: Vec<PodKey> = after
                .pods
                .iter()
                .filter(|p| p.requests.requests.get(&resource) > 0)
                .map(|p| p.key.clone())
                .collect();
            pods.sort();
            pods.truncate(TAKERS_SHOWN);
            self.sink.record_shortfall(&ResourceShortfall {
                node: after.name_arc().clone(),
                node_uid: after.node().and_then(|n| n.metadata.uid.clone()),
                resource,
                allocatable,
                requested,
                pods,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use convoy_api::testing::{NodeBuilder, PodBuilder};

    use super::*;

    fn failed(reason: &str, message: &str) -> Pod {
        PodBuilder::new("p")
            .node("n1")
            .with_status(|s| {
                s.phase = Some("Failed".into());
                s.reason = Some(reason.into());
                s.message = Some(message.into());
            })
            .build()
    }

    #[test]
    fn only_the_kubelets_admission_rejections_count() {
        let running = PodBuilder::new("p").node("n1").build();
        let r = failed("OutOfnvidia.com/gpu", "Pod was rejected: Node didn't have enough resource");
        assert_eq!(
            rejection_of(&running, &r),
            Some(("OutOfnvidia.com/gpu".into(), "Node didn't have enough resource".into()))
        );
        assert_eq!(rejection_of(&r, &r), None, "reported once, when it turns Failed");
        let crashed = failed("Error", "container exited 1");
        assert_eq!(rejection_of(&running, &crashed), None);
    }

    #[test]
    fn reason_labels_are_bounded() {
        let label = |reason: &str| {
            KubeletRejection {
                pod: PodKey::new("ns", "p"),
                uid: Arc::from("u"),
                profile: Arc::from("convoy"),
                node: Arc::from("n1"),
                node_uid: None,
                reason: reason.into(),
                message: String::new(),
                takers: Vec::new(),
                hold: REJECTION_HOLD,
            }
            .reason_label()
        };
        assert_eq!(&*label("OutOfcpu"), "OutOfcpu");
        assert_eq!(&*label("TaintToleration"), "TaintToleration");
        assert_eq!(&*label("SomethingNew"), "Other");
    }

    /// Convoy's own pods assumed on the node (their bindings in flight,
    /// not yet in the API server's list) still count beside the pods only
    /// the API server knows.
    #[test]
    fn the_fresh_read_adds_to_what_the_cache_holds() {
        let mut node = NodeBuilder::new("n1").cpu("1").info();
        let ours_in_flight = PodBuilder::new("a").cpu("500m").info();
        let pod = PodBuilder::new("p").cpu("250m").info();
        node.add_pod(ours_in_flight);
        node.add_pod(pod.clone());
        let theirs = PodBuilder::new("x").cpu("500m").scheduler("ks").node("n1").build();
        let why = fresh_overcommitted(&node, &pod, &[Arc::new(theirs)]).expect("no room");
        assert!(why.ends_with("not yet in Convoy's cache: default/x (ks)"), "{why}");
        let small = PodBuilder::new("y").cpu("250m").scheduler("ks").node("n1").build();
        assert_eq!(fresh_overcommitted(&node, &pod, &[Arc::new(small)]), None);
    }

    #[test]
    fn missing_extended_resources_are_ignored_as_the_kubelet_does() {
        let mut node = NodeBuilder::new("n1").cpu("4").info();
        let pod = PodBuilder::new("p").cpu("1").resource("example.com/fpga", "1").info();
        node.add_pod(pod.clone());
        assert_eq!(overcommitted(&node, &pod), None);
        let other = PodBuilder::new("o").cpu("4").scheduler("default-scheduler").info();
        node.add_pod(other);
        assert_eq!(
            overcommitted(&node, &pod).as_deref(),
            Some(
                "node n1 no longer has room for the pod (Insufficient cpu); bound there since \
                 it was chosen, among others: default/o (default-scheduler)"
            )
        );
    }
}
