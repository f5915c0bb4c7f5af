//! Telling users what happened to their pods: `Scheduled` and
//! `FailedScheduling` Events, and the `PodScheduled=False` condition on
//! pods that do not fit (upstream's `updatePod`); for PodGroups, one
//! aggregated Event per group attempt and the group's status
//! ([`crate::group_status`]).
//!
//! A member of a group that did not fit gets its `PodScheduled=False`
//! condition but no Event of its own: the group's aggregated
//! `FailedScheduling` Event on the PodGroup covers it.
//!
//! Scheduling never waits on these writes. [`StatusWriter`] queues them in
//! two bounded channels drained by one background task that writes at a
//! limited rate; when a queue is full the write is dropped and counted
//! (the pod's next attempt produces another). Events are written one after
//! the other; pods' `PodScheduled=False` conditions have a queue of their
//! own (one entry per pod, with its latest message), drained beside the
//! Events and patched up to
//! [`StatusWriterOptions::conditions_in_flight`] at once (upstream's API
//! dispatcher also patches pod statuses concurrently, beside its event
//! broadcaster), so that a burst of failed attempts shows on the pods
//! within a few round trips, not one Event and one patch per pod after
//! another. Two patches of one pod are never in flight at once: the last
//! message written is the last one decided. A pod that fails again with
//! the message it already shows is not patched again (upstream's
//! `updatePod` skips an unchanged condition), for [`CONDITION_KEPT`] after
//! the last write; a pod that churns through thousands of attempts costs
//! one patch per message, not one per attempt. Both share one rate limit.
//!
//! What explains a pod that is
//! not running (`FailedScheduling`, the `PodScheduled=False` condition,
//! `Preempted`, group Events and status) goes first; `Scheduled` Events,
//! which only repeat what the binding already recorded in the pod, wait
//! in a smaller queue of their own and are written when nothing else is
//! waiting. After a burst of thousands of bindings, a pod that does not fit
//! is therefore explained within one write, not after minutes of queued
//! `Scheduled` Events; the smaller queue drops the excess `Scheduled`
//! Events of a burst as client-go's event broadcasters do
//! (`maxQueuedEvents`, 1,000). Events go through [`crate::events`]: a
//! repeat of the same event (same pod, reason and note within 6 minutes)
//! is a `series.count` patch instead of a new object, and a new message is
//! a new Event.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use convoy_api::pod_group::POD_GROUP_LABEL;
use convoy_api::{GroupKey, PodGroupApi, PodKey};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::api::{DynamicObject, ListParams};
use kube::runtime::events::{Event, EventType, Reporter};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::events::EventRecorder;
use crate::group_status::{GroupReport, api_resource, initially_scheduled, xk8s_status};
use crate::rate::TokenBucket;

/// How long a pod's written condition is trusted to still be there: an
/// unchanged one is not patched again within this time (after it, it is
/// written again, in case another replica wrote another message).
pub const CONDITION_KEPT: Duration = Duration::from_secs(300);

/// Pods whose written conditions are remembered at most; past it, those
/// older than [`CONDITION_KEPT`] are forgotten, then all if still too many.
const CONDITIONS_REMEMBERED: usize = 100_000;

/// The `reportingController` of Convoy's events.
pub const REPORTING_CONTROLLER: &str = "convoy-scheduler";

/// Sizing of the [`StatusWriter`].
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWriterOptions {
    /// Writes queued at most, `Scheduled` Events apart; more are dropped.
    pub capacity: usize,
    /// `Scheduled` Events queued at most; more are dropped.
    pub scheduled_capacity: usize,
    /// API writes per second (an event and a status patch are one each);
    /// `<= 0` means unlimited. `convoy-scheduler` sets it to
    /// `clientConnection.qps`, as kube-scheduler's writes are limited by
    /// its client alone.
    pub qps: f32,
    /// Writes allowed at once after a quiet period (`convoy-scheduler`:
    /// `clientConnection.burst`).
    pub burst: u32,
    /// `PodScheduled` condition patches in flight at most (at least 1).
    pub conditions_in_flight: usize,
    /// The Events' `reportingInstance`: the replica's leader-election
    /// identity, so that an Event names the replica that decided (the one a
    /// binding's `convoy.dev/bound-by` names). `None`: `$HOSTNAME`, else
    /// the controller's name.
    pub instance: Option<String>,
}

impl Default for StatusWriterOptions {
    fn default() -> Self {
        Self {
            capacity: 10_000,
            scheduled_capacity: 1_000,
            qps: 50.0,
            burst: 100,
            conditions_in_flight: 16,
            instance: None,
        }
    }
}

enum Work {
    Scheduled {
        pod: PodKey,
        uid: String,
        node: String,
    },
    Preempted {
        victim: PodKey,
        victim_uid: String,
        preemptor: PodKey,
        preemptor_uid: String,
        note: String,
    },
    FailedScheduling {
        pod: PodKey,
        uid: String,
        message: String,
    },
    Group(GroupReport),
    RefreshGroup(GroupKey),
    InvalidGroup {
        key: GroupKey,
        uid: String,
        message: String,
    },
    Warning(Box<Warning>),
    Flush(oneshot::Sender<()>),
}

/// A pod whose `PodScheduled=False` condition is to be written (its
/// latest message waits in [`LatestConditions`]), or a flush marker.
enum ConditionWork {
    Write { pod: PodKey },
    Flush(oneshot::Sender<()>),
}

/// The latest condition waiting to be written per pod: `(uid, message)`.
/// A pod that fails again before its condition is written replaces its
/// message here instead of queueing a second write (as upstream's API
/// dispatcher merges a pod's pending status updates), so the queue holds
/// one entry per pod and a burst of retries cannot fill it and crowd out
/// pods not explained yet.
type LatestConditions = Arc<Mutex<HashMap<PodKey, (String, String)>>>;

/// A Warning Event on any object.
struct Warning {
    regarding: ObjectReference,
    related: Option<ObjectReference>,
    reason: &'static str,
    note: String,
}

#[derive(Debug, Default)]
struct Counters {
    dropped: AtomicU64,
    failed: AtomicU64,
    /// Groups with a refresh queued (one is enough).
    refreshing: Mutex<HashSet<GroupKey>>,
}

/// Queues Events and pod-status writes for a background task; see the
/// module docs. Cheap to clone; the task ends once every clone is dropped
/// and the queues are drained.
#[derive(Debug, Clone)]
pub struct StatusWriter {
    /// Everything but `Scheduled` Events: written first.
    queue: mpsc::Sender<Work>,
    /// `Scheduled` Events, and [`StatusWriter::flush`]'s marker: written
    /// when `queue` is empty.
    scheduled: mpsc::Sender<Work>,
    /// Pods' `PodScheduled=False` conditions, written beside the Events.
    conditions: mpsc::Sender<ConditionWork>,
    /// Their messages, latest per pod.
    latest: LatestConditions,
    counters: Arc<Counters>,
}

impl StatusWriter {
    /// Starts the background task (on the current tokio runtime).
    pub fn new(client: kube::Client, opts: StatusWriterOptions) -> (StatusWriter, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(opts.capacity.max(1));
        let (scheduled_tx, scheduled_rx) = mpsc::channel(opts.scheduled_capacity.max(1));
        let (conditions_tx, conditions_rx) = mpsc::channel(opts.capacity.max(1));
        let bucket = (opts.qps > 0.0)
            .then(|| TokenBucket::new(opts.qps, opts.burst, tokio::time::Instant::now()));
        let bucket = Arc::new(tokio::sync::Mutex::new(bucket));
        let counters = Arc::new(Counters::default());
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.into(),
            instance: opts
                .instance
                .clone()
                .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty())),
        };
        let task = Task {
            client: client.clone(),
            recorder: EventRecorder::new(client.clone(), reporter),
            bucket: Arc::clone(&bucket),
            counters: Arc::clone(&counters),
            conditions: HashMap::new(),
        };
        let latest = LatestConditions::default();
        let pod_conditions = PodConditions {
            latest: Arc::clone(&latest),
            client,
            bucket,
            counters: Arc::clone(&counters),
            writes: ConditionWrites::new(opts.conditions_in_flight),
            written: Arc::default(),
        };
        // One task, so that aborting it stops both.
        let handle = tokio::spawn(async move {
            tokio::join!(task.run(rx, scheduled_rx), pod_conditions.run(conditions_rx));
        });
        let writer = StatusWriter {
            queue: tx,
            scheduled: scheduled_tx,
            conditions: conditions_tx,
            latest,
            counters,
        };
        (writer, handle)
    }

    /// Queues a `Scheduled` event for a pod bound to `node`, behind every
    /// other write. False if its queue was full and the event dropped.
    pub fn scheduled(&self, pod: &PodKey, uid: &str, node: &str) -> bool {
        let work = Work::Scheduled { pod: pod.clone(), uid: uid.into(), node: node.into() };
        Self::push_to(&self.scheduled, &self.counters, work)
    }

    /// Queues the `Preempted` event on a victim (`Preempted by pod <uid> on
    /// node <node>`, action `Preempting`, related to the preemptor). False
    /// if the queue was full and the event dropped.
    pub fn preempted(
        &self,
        victim: &PodKey,
        victim_uid: &str,
        preemptor: &PodKey,
        preemptor_uid: &str,
        node: &str,
    ) -> bool {
        self.push(Work::Preempted {
            victim: victim.clone(),
            victim_uid: victim_uid.into(),
            preemptor: preemptor.clone(),
            preemptor_uid: preemptor_uid.into(),
            note: convoy_api::preemption::preempted_note(preemptor_uid, node),
        })
    }

    /// Queues the `Preempted` event on a victim of a pod group (`Preempted
    /// by podgroup <group uid> on node cluster`), related to `member`, one
    /// of the group's pods (upstream relates it to the PodGroup object).
    pub fn preempted_by_group(
        &self,
        victim: &PodKey,
        victim_uid: &str,
        member: &PodKey,
        member_uid: &str,
        group_uid: &str,
    ) -> bool {
        self.push(Work::Preempted {
            victim: victim.clone(),
            victim_uid: victim_uid.into(),
            preemptor: member.clone(),
            preemptor_uid: member_uid.into(),
            note: convoy_api::preemption::group_preempted_note(group_uid),
        })
    }

    /// Queues a `FailedScheduling` event and the `PodScheduled=False,
    /// reason=Unschedulable` condition with `message`. False if a queue
    /// was full and either was dropped.
    pub fn unschedulable(&self, pod: &PodKey, uid: &str, message: &str) -> bool {
        let condition = self.unschedulable_condition(pod, uid, message);
        let event = self.push(Work::FailedScheduling {
            pod: pod.clone(),
            uid: uid.into(),
            message: message.into(),
        });
        condition && event
    }

    /// Queues only the `PodScheduled=False, reason=Unschedulable` condition
    /// (for a member of a group that did not fit: the group's Event covers
    /// it). False if the queue was full.
    pub fn unschedulable_condition(&self, pod: &PodKey, uid: &str, message: &str) -> bool {
        let mut latest = self.latest.lock().expect("not poisoned");
        let waiting = latest.insert(pod.clone(), (uid.into(), message.into())).is_some();
        if waiting {
            return true; // its queued write takes the new message
        }
        let queued = Self::push_to(
            &self.conditions,
            &self.counters,
            ConditionWork::Write { pod: pod.clone() },
        );
        if !queued {
            latest.remove(pod);
        }
        queued
    }

    /// Queues a group attempt's Event and status write. False if the queue
    /// was full.
    pub fn group(&self, report: GroupReport) -> bool {
        self.push(Work::Group(report))
    }

    /// Queues a recount of a scheduler-plugins group's status from its
    /// member pods (a member's phase changed, or a member went away). At
    /// most one is queued per group; groups Convoy never tried (no
    /// `status.phase`) are left alone. False if nothing was queued.
    pub fn refresh_group(&self, key: &GroupKey) -> bool {
        if key.api != PodGroupApi::XK8s {
            return false;
        }
        let fresh = self.counters.refreshing.lock().expect("not poisoned").insert(key.clone());
        if !fresh {
            return false;
        }
        let queued = self.push(Work::RefreshGroup(key.clone()));
        if !queued {
            self.counters.refreshing.lock().expect("not poisoned").remove(key);
        }
        queued
    }

    /// Queues a Warning Event (`InvalidPodGroup`) on a PodGroup that cannot
    /// be read. False if the queue was full.
    pub fn invalid_pod_group(&self, key: &GroupKey, uid: &str, message: &str) -> bool {
        self.push(Work::InvalidGroup { key: key.clone(), uid: uid.into(), message: message.into() })
    }

    /// Queues a Warning Event on a pod (action `Scheduling`), related to
    /// its node. False if the queue was full.
    pub fn pod_warning(
        &self,
        pod: &PodKey,
        uid: &str,
        node: Option<(&str, Option<&str>)>,
        reason: &'static str,
        note: String,
    ) -> bool {
        self.push(Work::Warning(Box::new(Warning {
            regarding: pod_ref(pod, uid),
            related: node.map(|(name, uid)| node_ref(name, uid)),
            reason,
            note,
        })))
    }

    /// Queues a Warning Event on a node (action `Scheduling`), related to
    /// a pod when one is given. False if the queue was full.
    pub fn node_warning(
        &self,
        node: &str,
        node_uid: Option<&str>,
        pod: Option<(&PodKey, &str)>,
        reason: &'static str,
        note: String,
    ) -> bool {
        self.push(Work::Warning(Box::new(Warning {
            regarding: node_ref(node, node_uid),
            related: pod.map(|(key, uid)| pod_ref(key, uid)),
            reason,
            note,
        })))
    }

    fn push(&self, work: Work) -> bool {
        Self::push_to(&self.queue, &self.counters, work)
    }

    fn push_to<W>(queue: &mpsc::Sender<W>, counters: &Counters, work: W) -> bool {
        match queue.try_send(work) {
            Ok(()) => true,
            Err(_) => {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Writes dropped because their queue was full.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// API writes that failed (logged, not retried).
    pub fn failed(&self) -> u64 {
        self.counters.failed.load(Ordering::Relaxed)
    }

    /// Waits until everything queued before this call has been written, or
    /// `timeout` passed. True if drained.
    pub async fn flush(&self, timeout: Duration) -> bool {
        let (tx, rx) = oneshot::channel();
        let (conditions_tx, conditions_rx) = oneshot::channel();
        // Behind the `Scheduled` Events: the task takes it only once the
        // other queue is empty, so both are drained of what came before;
        // the conditions' queue has a marker of its own.
        tokio::time::timeout(timeout, async {
            self.scheduled.send(Work::Flush(tx)).await.is_ok()
                && self.conditions.send(ConditionWork::Flush(conditions_tx)).await.is_ok()
                && rx.await.is_ok()
                && conditions_rx.await.is_ok()
        })
        .await
        .unwrap_or(false)
    }
}

struct Task {
    client: kube::Client,
    recorder: EventRecorder,
    bucket: SharedBucket,
    counters: Arc<Counters>,
    /// The `PodGroupInitiallyScheduled` condition last written (or found
    /// terminal) per upstream group: `(uid, status, message)`, so that a
    /// repeated failure costs no read.
    conditions: HashMap<GroupKey, (String, String, String)>,
}

/// The writers' one rate limit (`None`: unlimited).
type SharedBucket = Arc<tokio::sync::Mutex<Option<TokenBucket>>>;

/// Waits for a token of `bucket`.
async fn take(bucket: &SharedBucket) {
    if let Some(bucket) = bucket.lock().await.as_mut() {
        bucket.take().await;
    }
}

impl Task {
    /// Writes what `first` holds before anything of `then` (see the module
    /// docs); ends once both are closed and empty.
    async fn run(mut self, mut first: mpsc::Receiver<Work>, mut then: mpsc::Receiver<Work>) {
        let mut refresh = tokio::time::interval(crate::events::SERIES_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut first_open, mut then_open) = (true, true);
        while first_open || then_open {
            let work = tokio::select! {
                biased;
                _ = refresh.tick() => {
                    self.write_pending_series().await;
                    continue;
                }
                work = first.recv(), if first_open => match work {
                    Some(work) => work,
                    None => {
                        first_open = false;
                        continue;
                    }
                },
                work = then.recv(), if then_open => match work {
                    Some(work) => work,
                    None => {
                        then_open = false;
                        continue;
                    }
                },
            };
            match work {
                Work::Scheduled { pod, uid, node } => {
                    let note = format!("Successfully assigned {pod} to {node}");
                    let r = pod_ref(&pod, &uid);
                    self.event(&r, None, EventType::Normal, "Scheduled", "Binding", note).await;
                }
                Work::Preempted { victim, victim_uid, preemptor, preemptor_uid, note } => {
                    let (r, related) =
                        (pod_ref(&victim, &victim_uid), pod_ref(&preemptor, &preemptor_uid));
                    let reason = convoy_api::preemption::REASON_PREEMPTED;
                    self.event(&r, Some(related), EventType::Normal, reason, "Preempting", note)
                        .await;
                }
                Work::FailedScheduling { pod, uid, message } => {
                    let r = pod_ref(&pod, &uid);
                    let (warning, reason) = (EventType::Warning, "FailedScheduling");
                    self.event(&r, None, warning, reason, "Scheduling", message).await;
                }
                Work::Group(report) => self.group(report).await,
                Work::RefreshGroup(key) => {
                    self.counters.refreshing.lock().expect("not poisoned").remove(&key);
                    self.xk8s_status(&key, false).await;
                }
                Work::InvalidGroup { key, uid, message } => {
                    let r = group_ref(&key, &uid);
                    let (warning, reason) = (EventType::Warning, "InvalidPodGroup");
                    self.event(&r, None, warning, reason, "Scheduling", message).await;
                }
                Work::Warning(w) => {
                    let Warning { regarding, related, reason, note } = *w;
                    let warning = EventType::Warning;
                    self.event(&regarding, related, warning, reason, "Scheduling", note).await;
                }
                Work::Flush(done) => {
                    self.write_pending_series().await;
                    let _ = done.send(());
                }
            }
        }
        self.write_pending_series().await;
    }

    /// Writes the Event series counts held in memory
    /// ([`crate::events::SERIES_REFRESH`]).
    async fn write_pending_series(&mut self) {
        for pending in self.recorder.pending() {
            self.take().await;
            let name = format!("{}/{}", pending.namespace(), pending.name());
            if let Err(e) = self.recorder.write_pending(pending).await {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(event = %name, error = %e, "writing an Event's series failed");
            }
        }
    }

    async fn take(&mut self) {
        take(&self.bucket).await;
    }

    async fn event(
        &mut self,
        regarding: &ObjectReference,
        related: Option<ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.take().await;
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: related,
        };
        if let Err(e) = self.recorder.publish(&event, regarding).await {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            let kind = regarding.kind.as_deref().unwrap_or("");
            let name = regarding.name.as_deref().unwrap_or("");
            let ns = regarding.namespace.as_deref().unwrap_or("");
            tracing::warn!(kind, object = %format!("{ns}/{name}"), reason, error = %e, "writing event failed");
        }
    }
}

/// Writes pods' `PodScheduled=False` conditions (a second part of the
/// background task, beside [`Task`]).
struct PodConditions {
    latest: LatestConditions,
    client: kube::Client,
    bucket: SharedBucket,
    counters: Arc<Counters>,
    writes: ConditionWrites,
    /// The condition each pod was last given: `(uid, message, when)`.
    written: Arc<Mutex<HashMap<PodKey, WrittenCondition>>>,
}

/// A pod's last written condition: its uid, the message, and when.
type WrittenCondition = (String, String, tokio::time::Instant);

impl PodConditions {
    /// Writes what `queue` holds; ends once it is closed and empty and
    /// every write is over.
    async fn run(mut self, mut queue: mpsc::Receiver<ConditionWork>) {
        while let Some(work) = queue.recv().await {
            match work {
                ConditionWork::Write { pod } => {
                    let latest = self.latest.lock().expect("not poisoned").remove(&pod);
                    if let Some((uid, message)) = latest {
                        self.condition(pod, uid, message).await;
                    }
                }
                ConditionWork::Flush(done) => {
                    self.writes.wait_all().await;
                    let _ = done.send(());
                }
            }
        }
        self.writes.wait_all().await;
    }

    /// Sets `PodScheduled=False, reason=Unschedulable` with a strategic
    /// merge patch (conditions merge by type), in the background (see
    /// [`ConditionWrites`]). The UID in the patch makes the server refuse
    /// it for a recreated pod.
    async fn condition(&mut self, pod: PodKey, uid: String, message: String) {
        if !self.remember(&pod, &uid, &message) {
            return;
        }
        take(&self.bucket).await;
        let key = pod.clone();
        let client = self.client.clone();
        let counters = Arc::clone(&self.counters);
        let written = Arc::clone(&self.written);
        let write = async move {
            let patch = json!({
                "metadata": { "uid": uid },
                "status": { "conditions": [{
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": null,
                    "lastTransitionTime": Time(Timestamp::now()),
                }]}
            });
            let pods: Api<Pod> = Api::namespaced(client, &pod.namespace);
            let params = PatchParams::default();
            if let Err(e) = pods.patch_status(&pod.name, &params, &Patch::Strategic(patch)).await {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%pod, error = %e, "patching PodScheduled condition failed");
                // Not there: the next failure writes it again.
                let mut written = written.lock().expect("not poisoned");
                if written.get(&pod).is_some_and(|(u, m, _)| *u == uid && *m == message) {
                    written.remove(&pod);
                }
            }
        };
        self.writes.spawn(key, write).await;
    }

    /// Records that `pod` gets `message` now; false if it has that very
    /// condition already (see [`remember_condition`]).
    fn remember(&self, pod: &PodKey, uid: &str, message: &str) -> bool {
        let mut written = self.written.lock().expect("not poisoned");
        remember_condition(&mut written, pod, uid, message, tokio::time::Instant::now())
    }
}

/// Records in `written` that `pod` gets `message` at `now`; false if it
/// was given that very condition less than [`CONDITION_KEPT`] before (so
/// there is nothing to write).
fn remember_condition(
    written: &mut HashMap<PodKey, WrittenCondition>,
    pod: &PodKey,
    uid: &str,
    message: &str,
    now: tokio::time::Instant,
) -> bool {
    if let Some((u, m, at)) = written.get(pod)
        && u == uid
        && m == message
        && now.duration_since(*at) < CONDITION_KEPT
    {
        return false;
    }
    if written.len() >= CONDITIONS_REMEMBERED && !written.contains_key(pod) {
        written.retain(|_, (_, _, at)| now.duration_since(*at) < CONDITION_KEPT);
        if written.len() >= CONDITIONS_REMEMBERED {
            written.clear();
        }
    }
    written.insert(pod.clone(), (uid.to_string(), message.to_string(), now));
    true
}

/// Pods' condition patches running in the background: at most `limit` at
/// once, and at most one per pod (a second write of a pod waits for the
/// first to finish, so patches of one pod land in the order decided).
struct ConditionWrites {
    slots: Arc<Semaphore>,
    running: HashMap<PodKey, JoinHandle<()>>,
}

impl ConditionWrites {
    fn new(limit: usize) -> Self {
        Self { slots: Arc::new(Semaphore::new(limit.max(1))), running: HashMap::new() }
    }

    /// Starts `write` for pod `key` once a slot is free and the pod's
    /// previous write (if any) is over.
    async fn spawn(&mut self, key: PodKey, write: impl Future<Output = ()> + Send + 'static) {
        if let Some(previous) = self.running.remove(&key) {
            let _ = previous.await;
        }
        let Ok(slot) = Arc::clone(&self.slots).acquire_owned().await else { return };
        if self.running.len() >= 1024 {
            self.running.retain(|_, h| !h.is_finished());
        }
        let handle = tokio::spawn(async move {
            write.await;
            drop(slot);
        });
        self.running.insert(key, handle);
    }

    /// Waits for every write started so far.
    async fn wait_all(&mut self) {
        for (_, handle) in self.running.drain() {
            let _ = handle.await;
        }
    }
}

fn pod_ref(pod: &PodKey, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.to_string()),
        name: Some(pod.name.to_string()),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

fn node_ref(name: &str, uid: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.into()),
        uid: uid.map(Into::into),
        ..Default::default()
    }
}

fn group_ref(key: &GroupKey, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(key.api.api_version().into()),
        kind: Some("PodGroup".into()),
        namespace: Some(key.namespace.to_string()),
        name: Some(key.name.to_string()),
        uid: (!uid.is_empty()).then(|| uid.to_string()),
        ..Default::default()
    }
}

fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Writing a PodGroup's status (a second part of [`Task`]).
impl Task {
    async fn group(&mut self, report: GroupReport) {
        let (warning, reason, note) = report.event();
        let type_ = if warning { EventType::Warning } else { EventType::Normal };
        let action = if reason == "Scheduled" { "Binding" } else { "Scheduling" };
        let r = group_ref(&report.key, &report.uid);
        self.event(&r, None, type_, reason, action, note).await;
        match report.key.api {
            PodGroupApi::Upstream => self.upstream_condition(&report).await,
            PodGroupApi::XK8s => self.xk8s_status(&report.key, true).await,
        }
    }

    fn groups(&self, key: &GroupKey) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &key.namespace, &api_resource(key.api))
    }

    /// Reads the group (`None`, logged, when that fails; quietly when it
    /// is gone).
    async fn read_group(&mut self, key: &GroupKey) -> Option<serde_json::Value> {
        self.take().await;
        match self.groups(key).get_opt(&key.name).await {
            Ok(obj) => obj.and_then(|o| serde_json::to_value(o).ok()),
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(group = %key, error = %e, "reading PodGroup failed");
                None
            }
        }
    }

    /// Merge-patches `status` with the resourceVersion read, so that a
    /// concurrent writer makes it fail (409) rather than be overwritten.
    /// True when written or when retrying is pointless.
    async fn patch_group_status(
        &mut self,
        key: &GroupKey,
        obj: &serde_json::Value,
        status: serde_json::Value,
    ) -> bool {
        self.take().await;
        let rv = obj.pointer("/metadata/resourceVersion").cloned().unwrap_or_default();
        let patch = json!({ "metadata": { "resourceVersion": rv }, "status": status });
        match self
            .groups(key)
            .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.code == 409 => false,
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(group = %key, error = %e, "patching PodGroup status failed");
                true
            }
        }
    }

    /// `PodGroupInitiallyScheduled` on an upstream group.
    async fn upstream_condition(&mut self, report: &GroupReport) {
        let Some((status, reason, message)) = report.condition() else { return };
        let key = &report.key;
        if let Some((uid, last_status, last_message)) = self.conditions.get(key) {
            let same = *uid == report.uid
                && (last_status == "True" || (*last_status == status && *last_message == message));
            if same {
                return;
            }
        }
        for _ in 0..2 {
            let Some(obj) = self.read_group(key).await else { return };
            let uid = obj.pointer("/metadata/uid").and_then(|u| u.as_str()).unwrap_or("");
            if !report.uid.is_empty() && uid != report.uid {
                return; // recreated meanwhile: this report is not about it
            }
            let Some(conditions) = initially_scheduled(&obj, (status, reason, &message), &now())
            else {
                let current = obj
                    .pointer("/status/conditions")
                    .and_then(|c| c.as_array())
                    .and_then(|cs| {
                        cs.iter().find(|c| c["type"] == crate::group_status::INITIALLY_SCHEDULED)
                    })
                    .map(|c| {
                        (
                            c["status"].as_str().unwrap_or("").to_string(),
                            c["message"].as_str().unwrap_or("").to_string(),
                        )
                    });
                if let Some((s, m)) = current {
                    self.remember(key, uid, s, m);
                }
                return;
            };
            if self.patch_group_status(key, &obj, json!({ "conditions": conditions })).await {
                self.remember(key, uid, status.to_string(), message.clone());
                return;
            }
        }
    }

    fn remember(&mut self, key: &GroupKey, uid: &str, status: String, message: String) {
        if self.conditions.len() >= 10_000 {
            self.conditions.clear();
        }
        self.conditions.insert(key.clone(), (uid.to_string(), status, message));
    }

    /// scheduler-plugins' `status` of an x-k8s group, recounted from its
    /// member pods. Without `attempted` (a refresh), groups that have no
    /// phase yet are left alone.
    async fn xk8s_status(&mut self, key: &GroupKey, attempted: bool) {
        for _ in 0..2 {
            let Some(obj) = self.read_group(key).await else { return };
            let phase = obj.pointer("/status/phase").and_then(|p| p.as_str()).unwrap_or("");
            if (!attempted && phase.is_empty()) || matches!(phase, "Finished" | "Failed") {
                return;
            }
            self.take().await;
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
            let selector = format!("{POD_GROUP_LABEL}={}", key.name);
            let pods = match pods.list(&ListParams::default().labels(&selector)).await {
                Ok(list) => list.items,
                Err(e) => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(group = %key, error = %e, "listing PodGroup members failed");
                    return;
                }
            };
            let pods: Vec<&Pod> = pods.iter().collect();
            let Some(status) = xk8s_status(&obj, &pods, &now(), attempted) else { return };
            if self.patch_group_status(key, &obj, status).await {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Runs 40 writes over `pods` pods through `ConditionWrites::new(limit)`;
    /// returns the most that ran at once, whether two writes of one pod
    /// ever overlapped, and the order in which they ended.
    async fn run(limit: usize, pods: usize) -> (usize, bool, Vec<usize>) {
        let mut writes = ConditionWrites::new(limit);
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let busy = Arc::new(Mutex::new(HashSet::new()));
        let overlapped = Arc::new(AtomicUsize::new(0));
        for i in 0..40 {
            let pod = i % pods;
            let key = PodKey::new("ns", &format!("p{pod}"));
            let (running, peak, order) = (running.clone(), peak.clone(), order.clone());
            let (busy, overlapped) = (busy.clone(), overlapped.clone());
            let write = async move {
                if !busy.lock().expect("not poisoned").insert(pod) {
                    overlapped.fetch_add(1, Ordering::SeqCst);
                }
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                // Later writes are quicker: without the wait for a pod's
                // previous write, they would overtake it.
                tokio::time::sleep(Duration::from_millis(50 - i as u64)).await;
                order.lock().expect("not poisoned").push(i);
                busy.lock().expect("not poisoned").remove(&pod);
                running.fetch_sub(1, Ordering::SeqCst);
            };
            writes.spawn(key, write).await;
        }
        writes.wait_all().await;
        let order = order.lock().expect("not poisoned").clone();
        (peak.load(Ordering::SeqCst), overlapped.load(Ordering::SeqCst) > 0, order)
    }

    /// Writes of different pods run at once, up to the limit.
    #[tokio::test]
    async fn condition_writes_run_concurrently_up_to_the_limit() {
        let (peak, _, order) = run(4, 40).await;
        assert_eq!(order.len(), 40, "every write ran");
        assert_eq!(peak, 4, "concurrent, at most the limit");
    }

    /// Never two writes of one pod at once, and a pod's writes end in the
    /// order they were started.
    #[tokio::test]
    async fn condition_writes_of_one_pod_run_one_after_the_other() {
        let (peak, overlapped, order) = run(16, 10).await;
        assert!(!overlapped, "two writes of one pod ran at once");
        assert_eq!(peak, 10, "one write per pod at once");
        for pod in 0..10 {
            let of_pod: Vec<_> = order.iter().filter(|&&i| i % 10 == pod).copied().collect();
            assert_eq!(of_pod, vec![pod, pod + 10, pod + 20, pod + 30], "pod {pod}'s writes");
        }
    }

    /// A pod that fails again with the message it shows is not patched
    /// again until [`CONDITION_KEPT`] has passed; a new message, or a new
    /// pod of the same name, is.
    #[test]
    fn an_unchanged_condition_is_written_once() {
        let mut written = HashMap::new();
        let t0 = tokio::time::Instant::now();
        let p = PodKey::new("ns", "p");
        let (m1, m2) = ("0/3 nodes are available: 3 Insufficient cpu.", "0/3 nodes: other");
        assert!(remember_condition(&mut written, &p, "u1", m1, t0), "first write");
        let soon = t0 + Duration::from_secs(10);
        assert!(!remember_condition(&mut written, &p, "u1", m1, soon), "unchanged");
        assert!(remember_condition(&mut written, &p, "u1", m2, soon), "new message");
        assert!(remember_condition(&mut written, &p, "u1", m1, soon), "back to the first");
        assert!(remember_condition(&mut written, &p, "u2", m1, soon), "recreated pod");
        let later = soon + CONDITION_KEPT;
        assert!(remember_condition(&mut written, &p, "u2", m1, later), "written again after");
        let q = PodKey::new("ns", "q");
        assert!(remember_condition(&mut written, &q, "u3", m1, later), "another pod");
    }
}
