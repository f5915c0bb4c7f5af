//! Preemption's part of the plugin API (upstream `framework/interface.go`'s
//! `PodNominator` and `Handle` methods, `preemption/util.go`): the
//! nominator, which remembers the node each preemptor waits for; the
//! [`FilterRunner`] a PostFilter plugin dry-runs its what-ifs with; the
//! [`PreemptionActuator`] that deletes victims; and upstream's strings.
//!
//! Nothing here does IO: the actuator is implemented by the adapters (the
//! API server's, the embedded cluster's).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;

use crate::cycle_state::CycleState;
use crate::lister::NodeInfoLister;
use crate::node_info::NodeInfo;
use crate::pod_group::GroupKey;
use crate::pod_info::PodInfo;
use crate::status::Status;

/// The pod condition type the scheduler sets on a victim before deleting
/// it (upstream `v1.DisruptionTarget`).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// The reason of that condition (upstream `v1.PodReasonPreemptionByScheduler`).
pub const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";

/// The reason of the Event on each victim.
pub const REASON_PREEMPTED: &str = "Preempted";

/// The message of the `DisruptionTarget` condition, as upstream's executor
/// writes it: `<schedulerName>: preempting to accommodate a higher priority pod`.
pub fn disruption_message(scheduler_name: &str) -> String {
    format!("{scheduler_name}: preempting to accommodate a higher priority pod")
}

/// The message of the `DisruptionTarget` condition when the preemptor is
/// a whole pod group (upstream v1.37.2's executor for a `PodGroupPostFilter`
/// candidate): `<schedulerName>: preempting to accommodate a higher priority
/// podgroup` (upstream's preemptor type name).
pub fn group_disruption_message(scheduler_name: &str) -> String {
    format!("{scheduler_name}: preempting to accommodate a higher priority podgroup")
}

/// The `Preempted` Event's note on a victim of a pod group (upstream
/// v1.37.2, whose group preemption has the whole cluster as its domain):
/// `Preempted by podgroup <PodGroup UID> on node cluster`.
pub fn group_preempted_note(group_uid: &str) -> String {
    format!("Preempted by podgroup {group_uid} on node {GROUP_DOMAIN}")
}

/// The name of a pod group preemption's domain (upstream's candidate name).
pub const GROUP_DOMAIN: &str = "cluster";

/// The preemptions being carried out: upstream's `Executor.preempting`
/// with its `lastVictimsPendingPreemption`. From the moment a preemption
/// is decided until every victim has been seen terminating (or gone) in
/// the scheduler's own view of the cluster, DefaultPreemption's PreEnqueue
/// holds its preemptors back (`waiting for the preemption for this pod to
/// be finished`). Popped earlier, a preemptor would find its victims still
/// running on its nominated node, be eligible again, and preempt again
/// elsewhere: a cascade. When the wait ends the preemptors are returned,
/// for the scheduler to activate.
///
/// A victim whose deletion failed, or that was removed in memory (waiting
/// at Permit), produces no event: [`RunningPreemptions::actuated`] is told
/// so. As a safety net against a lost event, a preemption stops holding
/// its preemptors [`RunningPreemptions::MAX_HOLD`] after its API calls
/// ended; the scheduler's periodic [`RunningPreemptions::expire`] then
/// activates them.
pub struct RunningPreemptions {
    inner: Mutex<Running>,
    clock: Arc<dyn crate::Clock>,
    /// The owners whose pods were preempted recently (for the chains; see
    /// [`RunningPreemptions::link`]).
    history: Mutex<HashMap<Arc<str>, Preempted>>,
}

/// A pod that was preempted, remembered by its controller (the owner that
/// replaces it) for [`RunningPreemptions::CHAIN_WINDOW`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preempted {
    /// When.
    pub at: std::time::Instant,
    /// The victim.
    pub victim: crate::PodKey,
    /// Its controller, `Kind namespace/name`.
    pub owner: String,
    /// The preemptor that took its place.
    pub preemptor: crate::PodKey,
    /// The depth of the chain that preemption was part of (1: the
    /// preemptor was no replacement of a preempted pod).
    pub depth: u32,
}

/// The controller of a pod (its `ownerReferences` entry with `controller:
/// true`): its UID and `Kind namespace/name`.
pub fn controller_of(pod: &k8s_openapi::api::core::v1::Pod) -> Option<(Arc<str>, String)> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| (Arc::from(o.uid.as_str()), format!("{} {ns}/{}", o.kind, o.name)))
}

impl std::fmt::Debug for RunningPreemptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningPreemptions").field("running", &self.len()).finish()
    }
}

impl Default for RunningPreemptions {
    /// An empty set on the system clock.
    fn default() -> Self {
        Self::new(Arc::new(crate::RealClock))
    }
}

#[derive(Debug, Default)]
struct Running {
    next: u64,
    entries: HashMap<u64, RunningEntry>,
    by_preemptor: HashMap<Arc<str>, u64>,
    /// A pod may be a victim of two preemptions at once (the second chose
    /// it before the first one's deletion reached the scheduler).
    by_victim: HashMap<Arc<str>, Vec<u64>>,
}

#[derive(Debug)]
struct RunningEntry {
    preemptors: Vec<(Arc<str>, crate::PodKey)>,
    pending: HashSet<Arc<str>>,
    /// When the API calls ended (`None`: still running).
    actuated: Option<std::time::Instant>,
}

impl RunningEntry {
    /// Whether its API calls ended at least [`RunningPreemptions::MAX_HOLD`]
    /// before `now`.
    fn expired(&self, now: std::time::Instant) -> bool {
        self.actuated
            .is_some_and(|t| now.saturating_duration_since(t) >= RunningPreemptions::MAX_HOLD)
    }
}

impl Running {
    /// Ends the entry if its calls are done and no victim is pending.
    fn settle(&mut self, id: u64) -> Vec<crate::PodKey> {
        let Some(e) = self.entries.get(&id) else { return Vec::new() };
        if e.actuated.is_none() || !e.pending.is_empty() {
            return Vec::new();
        }
        self.remove(id)
    }

    fn unlink_victim(&mut self, victim: &str, id: u64) {
        if let Some(ids) = self.by_victim.get_mut(victim) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.by_victim.remove(victim);
            }
        }
    }

    fn remove(&mut self, id: u64) -> Vec<crate::PodKey> {
        let Some(e) = self.entries.remove(&id) else { return Vec::new() };
        for v in &e.pending {
            self.unlink_victim(v, id);
        }
        let mut keys = Vec::with_capacity(e.preemptors.len());
        for (uid, key) in e.preemptors {
            if self.by_preemptor.get(&uid) == Some(&id) {
                self.by_preemptor.remove(&uid);
            }
            keys.push(key);
        }
        keys
    }
}

impl RunningPreemptions {
    /// How long after its API calls a preemption may hold its preemptors
    /// while waiting to see its victims terminate.
    pub const MAX_HOLD: std::time::Duration = std::time::Duration::from_secs(30);

    /// How long a preempted pod's owner is remembered: a replacement that
    /// preempts within it extends the chain.
    pub const CHAIN_WINDOW: std::time::Duration = std::time::Duration::from_secs(600);

    /// An empty set; `clock` times [`Self::MAX_HOLD`].
    pub fn new(clock: Arc<dyn crate::Clock>) -> Self {
        Self { inner: Mutex::default(), clock, history: Mutex::default() }
    }

    /// The latest preemption of a pod of `pod`'s owner within
    /// [`Self::CHAIN_WINDOW`]: `pod` is then (likely) its replacement.
    pub fn predecessor(&self, pod: &crate::PodInfo) -> Option<Preempted> {
        let (uid, _) = controller_of(&pod.pod)?;
        let now = self.clock.now();
        let h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        h.get(&uid).filter(|p| now.saturating_duration_since(p.at) < Self::CHAIN_WINDOW).cloned()
    }

    /// `preemptor` preempts `victims`: the depth of the chain this
    /// preemption extends (1 when the preemptor replaces no preempted pod),
    /// with the preemption it follows; the victims' owners are remembered
    /// at that depth.
    pub fn link(
        &self,
        preemptor: &crate::PodInfo,
        victims: &[Arc<crate::PodInfo>],
    ) -> (u32, Option<Preempted>) {
        let before = self.predecessor(preemptor);
        let depth = before.as_ref().map_or(1, |p| p.depth + 1);
        let now = self.clock.now();
        let mut h = self.history.lock().unwrap_or_else(|e| e.into_inner());
        h.retain(|_, p| now.saturating_duration_since(p.at) < Self::CHAIN_WINDOW);
        for v in victims {
            if let Some((uid, owner)) = controller_of(&v.pod) {
                let entry = Preempted {
                    at: now,
                    victim: v.key.clone(),
                    owner,
                    preemptor: preemptor.key.clone(),
                    depth,
                };
                h.insert(uid, entry);
            }
        }
        (depth, before)
    }

    /// When a pod of the owner of `pod` was last preempted, if within
    /// `delay`: the cascade guard's test (`replacementPreemptionDelaySeconds`).
    pub fn replaced_within(
        &self,
        pod: &crate::PodInfo,
        delay: std::time::Duration,
    ) -> Option<(Preempted, std::time::Duration)> {
        let p = self.predecessor(pod)?;
        let ago = self.clock.now().saturating_duration_since(p.at);
        (ago < delay).then_some((p, ago))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Running> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A preemption starts: `preemptors` (a pod, or a group's members:
    /// UID and key) wait until each of `victims` (UIDs) is seen
    /// terminating or gone. Returns its ticket.
    pub fn start(&self, preemptors: &[(Arc<str>, crate::PodKey)], victims: &[Arc<str>]) -> u64 {
        let mut r = self.lock();
        r.next += 1;
        let id = r.next;
        for (uid, _) in preemptors {
            r.by_preemptor.insert(uid.clone(), id);
        }
        for v in victims {
            r.by_victim.entry(v.clone()).or_default().push(id);
        }
        let pending = victims.iter().cloned().collect();
        r.entries
            .insert(id, RunningEntry { preemptors: preemptors.to_vec(), pending, actuated: None });
        id
    }

    /// The preemption's API calls ended; `no_event` are the victims whose
    /// termination will not be seen (failed, removed in memory, already
    /// terminating). Returns the preemptors to activate if the wait is over.
    pub fn actuated(&self, ticket: u64, no_event: &[Arc<str>]) -> Vec<crate::PodKey> {
        let now = self.clock.now();
        let mut r = self.lock();
        for v in no_event {
            r.unlink_victim(v, ticket);
        }
        let Some(e) = r.entries.get_mut(&ticket) else { return Vec::new() };
        e.actuated = Some(now);
        for v in no_event {
            e.pending.remove(v);
        }
        r.settle(ticket)
    }

    /// A pod was seen terminating or deleted. Returns the preemptors to
    /// activate, if it was the last victim their preemption waited for.
    pub fn observed(&self, uid: &str) -> Vec<crate::PodKey> {
        let mut r = self.lock();
        if r.by_victim.is_empty() {
            return Vec::new();
        }
        let Some(ids) = r.by_victim.remove(uid) else { return Vec::new() };
        let mut ready = Vec::new();
        for id in ids {
            if let Some(e) = r.entries.get_mut(&id) {
                e.pending.remove(uid);
            }
            ready.extend(r.settle(id));
        }
        ready
    }

    /// Ends the preemptions whose API calls ended [`Self::MAX_HOLD`] ago
    /// or more and returns their preemptors, for the scheduler to
    /// activate (called periodically: a victim's event was lost).
    pub fn expire(&self) -> Vec<crate::PodKey> {
        let now = self.clock.now();
        let mut r = self.lock();
        let old: Vec<u64> =
            r.entries.iter().filter(|(_, e)| e.expired(now)).map(|(id, _)| *id).collect();
        old.into_iter().flat_map(|id| r.remove(id)).collect()
    }

    /// Whether the pod's preemption is still being carried out (see the
    /// type's docs).
    pub fn is_running(&self, uid: &str) -> bool {
        let mut r = self.lock();
        if r.by_preemptor.is_empty() {
            return false;
        }
        let now = self.clock.now();
        let Some(&id) = r.by_preemptor.get(uid) else { return false };
        if r.entries.get(&id).is_some_and(|e| e.expired(now)) {
            r.remove(id);
            return false;
        }
        true
    }

    /// Preemptions not yet over.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether none is running.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How preemption sees gangs (implemented by the scheduler's gang state):
/// the running pods of a gang group are one victim, taken all together or
/// not at all, at the group's priority (upstream v1.37's `DomainVictim`
/// with `disruptionMode: All`).
pub trait PreemptionGroups: Send + Sync + std::fmt::Debug {
    /// The priority `key`'s pods are preempted at, if it is a gang group
    /// (its PodGroup exists with an all-or-nothing policy); `None`: its
    /// pods are victims one by one, at their own priority.
    fn gang_priority(&self, key: &GroupKey) -> Option<i32>;
}

/// The note of the `Preempted` Event on a victim (upstream v1.37.2):
/// `Preempted by pod <preemptor UID> on node <node>`.
pub fn preempted_note(preemptor_uid: &str, node: &str) -> String {
    format!("Preempted by pod {preemptor_uid} on node {node}")
}

/// Upstream `PodTerminatingByPreemption`: the pod is being deleted and
/// carries `DisruptionTarget=True` with reason `PreemptionByScheduler`.
pub fn terminating_by_preemption(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_none() {
        return false;
    }
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    conditions.iter().find(|c| c.type_ == DISRUPTION_TARGET).is_some_and(|c| {
        c.status == "True" && c.reason.as_deref() == Some(REASON_PREEMPTION_BY_SCHEDULER)
    })
}

/// The pods nominated to each node, in nomination order (looked up once
/// per node a nominated-aware Filter pass visits: the fast hasher). Each
/// node's list is shared, so copying the map on write (while a cycle holds
/// a view of it) copies reference counts, not the lists.
pub type NominationsByNode = HashMap<Arc<str>, Arc<Vec<Arc<PodInfo>>>, foldhash::fast::RandomState>;

/// The pods nominated to each node that a pod being scheduled must leave
/// room for (those of equal or higher priority, not itself; upstream
/// `addGENominatedPods`), taken once per cycle: a view of the nominator's
/// nominations, shared with it (taking one copies nothing; the nominator
/// copies its map only if it changes while a cycle holds a view).
#[derive(Debug, Clone, Default)]
pub struct NominatedPods {
    /// Every nomination, of any priority, by node, in nomination order.
    by_node: Arc<NominationsByNode>,
    /// The priority of the pod being scheduled.
    priority: i32,
    /// Its UID (its own nomination does not count).
    uid: Arc<str>,
}

impl NominatedPods {
    /// The view of `by_node` (every nomination) for a pod of `priority`
    /// and `uid`.
    pub fn new(by_node: Arc<NominationsByNode>, priority: i32, uid: Arc<str>) -> Self {
        Self { by_node, priority, uid }
    }

    /// The pods nominated to `node` that the pod must leave room for, in
    /// nomination order.
    pub fn on_node<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a Arc<PodInfo>> + 'a {
        self.by_node.get(node).into_iter().flat_map(|l| l.iter()).filter(|p| self.counts(p))
    }

    /// Whether the pod must leave room for no nominated pod on any node.
    pub fn is_empty(&self) -> bool {
        !self.by_node.values().flat_map(|l| l.iter()).any(|p| self.counts(p))
    }

    fn counts(&self, p: &PodInfo) -> bool {
        p.priority >= self.priority && *p.uid != *self.uid
    }
}

/// Where preemptors wait: the node each pod is nominated to (upstream's
/// `PodNominator`, kept by the scheduling queue). A nomination reserves
/// room on the node against pods of equal or lower priority until the pod
/// is bound, deleted or nominated elsewhere.
pub trait PodNominator: Send + Sync {
    /// Whether no pod is nominated anywhere: the Filter fast path, read
    /// once per cycle (an atomic load).
    fn is_empty(&self) -> bool;

    /// The node a pod is nominated to.
    fn nominated_node(&self, pod: &PodInfo) -> Option<Arc<str>>;

    /// The pods nominated to a node, of any priority.
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>>;

    /// The nominated pods `pod` must leave room for (priority at least
    /// its own, not itself), by node: a view taken once per cycle.
    fn nominated_pods(&self, pod: &PodInfo) -> NominatedPods;
}

/// What a PostFilter plugin may run against the profile while it evaluates
/// what-ifs on copies of nodes (upstream `Handle`'s
/// `RunPreFilterExtensionAddPod/RemovePod`, `RunFilterPluginsWithNominatedPods`,
/// `NominatedPodsForNode` and `Parallelizer`). Implemented by the framework,
/// for one cycle: it knows which Filter plugins the cycle runs.
pub trait FilterRunner: Sync {
    /// Runs every PreFilter plugin's `add_pod` extension (plugins whose
    /// PreFilter returned Skip excepted); the first failure is returned.
    fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status;

    /// Runs every PreFilter plugin's `remove_pod` extension.
    fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status;

    /// Upstream `RunFilterPluginsWithNominatedPods`: the cycle's Filter
    /// plugins on `node` with the pods nominated to it of equal or higher
    /// priority added (and, if that passes, once more without them).
    fn run_filter_plugins_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status;

    /// The pods nominated to a node, of any priority.
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>>;

    /// The node the pod is nominated to, if any.
    fn nominated_node(&self, pod: &PodInfo) -> Option<Arc<str>>;

    /// Calls `work(i)` for every `i` in `0..n`, on the scheduler's
    /// thread pool when `n` is large enough to be worth it.
    fn parallelize(&self, n: usize, work: &(dyn Fn(usize) + Sync));
}

/// What a PostFilter plugin is handed besides the pod and the statuses.
pub struct PostFilterContext<'a> {
    /// Every node of the cycle's snapshot.
    pub nodes: &'a dyn NodeInfoLister,
    /// The profile's plugins, for what-ifs.
    pub runner: &'a dyn FilterRunner,
    /// A random number drawn for this call (preemption's random start
    /// offset), from the scheduler's seeded generator.
    pub random: u64,
}

/// Why preempting a victim or writing a nomination failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PreemptionError(pub String);

/// Carries out a preemption on the cluster (upstream's executor API
/// calls), off the scheduling loop: the API server's adapter, the embedded
/// cluster. Implementations treat a pod that is already gone as done.
pub trait PreemptionActuator: Send + Sync + 'static {
    /// Preempts `victim` so that `preemptor` fits on `node`: sets the
    /// `DisruptionTarget` condition ([`disruption_message`]), deletes the
    /// pod, and reports a `Preempted` Event ([`preempted_note`]).
    fn preempt(
        &self,
        victim: Arc<PodInfo>,
        preemptor: Arc<PodInfo>,
        node: Arc<str>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>>;

    /// Writes `status.nominatedNodeName` of a pod; `None` clears it.
    fn set_nominated_node_name(
        &self,
        pod: Arc<PodInfo>,
        node: Option<Arc<str>>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>>;

    /// Preempts `victim` for a whole pod group (`member` is one of its
    /// pods, `group_uid` the PodGroup's UID): as [`preempt`](Self::preempt)
    /// with upstream's group wording ([`group_disruption_message`],
    /// [`group_preempted_note`]). By default, `preempt` with `member` on
    /// node `cluster`.
    fn preempt_for_group(
        &self,
        victim: Arc<PodInfo>,
        member: Arc<PodInfo>,
        group_uid: Arc<str>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        let _ = group_uid;
        self.preempt(victim, member, Arc::from(GROUP_DOMAIN))
    }
}

/// An actuator that does nothing (for schedulers that never preempt, such
/// as some benchmarks and tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoActuator;

impl PreemptionActuator for NoActuator {
    fn preempt(
        &self,
        _victim: Arc<PodInfo>,
        _preemptor: Arc<PodInfo>,
        _node: Arc<str>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn set_nominated_node_name(
        &self,
        _pod: Arc<PodInfo>,
        _node: Option<Arc<str>>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {

    /// A preemption holds its preemptors until its calls are done and
    /// every victim was seen terminating, or would produce no event; after
    /// `MAX_HOLD` it lets go whatever happened.
    #[test]
    fn running_preemptions_hold_until_every_victim_is_seen() {
        let clock = crate::FakeClock::new();
        let running = RunningPreemptions::new(Arc::new(clock.clone()));
        let uid = |s: &str| Arc::<str>::from(s);
        let key = |s: &str| crate::PodKey::new("default", s);
        let preemptors = [(uid("p"), key("p")), (uid("q"), key("q"))];
        let t = running.start(&preemptors, &[uid("v1"), uid("v2"), uid("v3")]);
        assert!(running.is_running("p") && running.is_running("q"));
        assert!(!running.is_running("other"));
        assert!(running.observed("v1").is_empty(), "calls still running");
        assert!(running.actuated(t, &[uid("v3")]).is_empty(), "v2 not seen yet");
        assert!(running.is_running("p"));
        assert_eq!(running.observed("v2"), [key("p"), key("q")]);
        assert!(!running.is_running("p") && running.is_empty());
        assert!(running.observed("v2").is_empty(), "only once");

        // Seen before the calls end: released when they do.
        let t = running.start(&[(uid("p"), key("p"))], &[uid("v")]);
        assert!(running.observed("v").is_empty());
        assert_eq!(running.actuated(t, &[]), [key("p")]);

        // One victim of two preemptions (the second chose it before the
        // first one's deletion was seen): its deletion releases both.
        let t1 = running.start(&[(uid("p"), key("p"))], &[uid("v")]);
        let t2 = running.start(&[(uid("q"), key("q"))], &[uid("v"), uid("w")]);
        assert!(running.actuated(t1, &[]).is_empty());
        assert!(running.actuated(t2, &[uid("w")]).is_empty());
        let mut ready = running.observed("v");
        ready.sort();
        assert_eq!(ready, [key("p"), key("q")]);
        assert!(running.is_empty());

        // A lost event: let go after MAX_HOLD.
        let t = running.start(&[(uid("p"), key("p"))], &[uid("lost")]);
        assert!(running.actuated(t, &[]).is_empty());
        clock.advance(RunningPreemptions::MAX_HOLD - std::time::Duration::from_millis(1));
        assert!(running.is_running("p"));
        assert!(running.expire().is_empty());
        clock.advance(std::time::Duration::from_millis(1));
        assert_eq!(running.expire(), [key("p")], "the periodic release");
        assert!(!running.is_running("p") && running.is_empty());
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn terminating_by_preemption_needs_deletion_and_the_condition() {
        let pod = |deleting: bool, reason: &str| -> Pod {
            let mut v = json!({"metadata": {"name": "p"},
                "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                                           "reason": reason}]}});
            if deleting {
                v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            serde_json::from_value(v).unwrap()
        };
        assert!(terminating_by_preemption(&pod(true, REASON_PREEMPTION_BY_SCHEDULER)));
        assert!(!terminating_by_preemption(&pod(false, REASON_PREEMPTION_BY_SCHEDULER)));
        assert!(!terminating_by_preemption(&pod(true, "EvictionByEvictionAPI")));
        assert_eq!(
            disruption_message("convoy-scheduler"),
            "convoy-scheduler: preempting to accommodate a higher priority pod"
        );
        assert_eq!(preempted_note("u1", "n1"), "Preempted by pod u1 on node n1");
        assert_eq!(
            group_disruption_message("convoy-scheduler"),
            "convoy-scheduler: preempting to accommodate a higher priority podgroup"
        );
        assert_eq!(group_preempted_note("g1"), "Preempted by podgroup g1 on node cluster");
    }
}
