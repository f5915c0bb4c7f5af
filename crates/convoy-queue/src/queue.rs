//! [`SchedulingQueue`]: the public face of the queue, one lock around the
//! state machine plus a [`Notify`] that wakes `pop`.

use std::pin::pin;
use std::sync::Arc;
use std::time::Instant;

use convoy_api::{
    ActionType, ClusterEvent, EventObject, EventResource, PodInfo, PodKey, QueuedPodInfo,
};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::config::QueueConfig;
use crate::metrics::{IncomingCount, IncomingEvent, PendingCounts, QueueKind};
use crate::nominator::Nominator;
use crate::state::{Failure, State};

/// The scheduling queue, shared (`Arc`) between the event handlers and the
/// scheduling loop. See the crate documentation for the life of a pod.
pub struct SchedulingQueue {
    state: Mutex<State>,
    notify: Notify,
    nominator: Arc<Nominator>,
}

impl std::fmt::Debug for SchedulingQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulingQueue").field("pending", &self.pending_counts()).finish()
    }
}

impl SchedulingQueue {
    /// An empty queue.
    pub fn new(config: QueueConfig) -> Self {
        let nominator = config.nominator.clone();
        Self { state: Mutex::new(State::new(config)), notify: Notify::new(), nominator }
    }

    /// The pods nominated to nodes. The queue keeps it in step with the
    /// pods it receives (`status.nominatedNodeName`, updates, deletions);
    /// the scheduler nominates preemptors and ends nominations of pods it
    /// assumes.
    pub fn nominator(&self) -> &Arc<Nominator> {
        &self.nominator
    }

    fn wake(&self, to_active: usize) {
        match to_active {
            0 => {}
            1 => self.notify.notify_one(),
            _ => self.notify.notify_waiters(),
        }
    }

    /// A new pending pod: runs its profile's PreEnqueue plugins, then into
    /// activeQ, or into the pool as gated if one rejects it (recorded in
    /// `unschedulable_plugins`, so that plugin's events can release it). A
    /// pod the queue already holds is updated instead.
    pub fn add(&self, pod: Arc<PodInfo>) {
        let n = {
            let mut s = self.state.lock();
            self.nominator.pod_added(&pod);
            s.add(pod, IncomingEvent::PodAdd)
        };
        self.wake(n);
    }

    /// [`add`](Self::add) a pod and [`activate`](Self::activate) others
    /// under one lock: when a new member completes its group's quorum, the
    /// scheduling loop cannot pop it before its waiting siblings are in
    /// activeQ too (the group would be tried without them).
    pub fn add_and_activate<'a>(
        &self,
        pod: Arc<PodInfo>,
        keys: impl IntoIterator<Item = &'a PodKey>,
    ) {
        let n = {
            let mut s = self.state.lock();
            self.nominator.pod_added(&pod);
            s.add(pod, IncomingEvent::PodAdd) + s.activate(keys)
        };
        self.wake(n);
    }

    /// [`update`](Self::update) a pod and [`activate`](Self::activate)
    /// others under one lock (see [`add_and_activate`](Self::add_and_activate)).
    pub fn update_and_activate<'a>(
        &self,
        pod: Arc<PodInfo>,
        keys: impl IntoIterator<Item = &'a PodKey>,
    ) {
        let n = {
            let mut s = self.state.lock();
            self.nominator.pod_updated(&pod);
            s.update(pod) + s.activate(keys)
        };
        self.wake(n);
    }

    /// Waits for a pod in activeQ and pops it (flushing backoffQ first when
    /// activeQ is empty); `None` once [`close`](Self::close) was called.
    ///
    /// The pod's `attempts` is incremented, `initial_attempt_timestamp` set
    /// on its first pop, and it is in flight until [`done`](Self::done) or
    /// [`add_unschedulable_if_not_present`](Self::add_unschedulable_if_not_present).
    pub async fn pop(&self) -> Option<QueuedPodInfo> {
        loop {
            {
                let mut s = self.state.lock();
                if s.closed {
                    return None;
                }
                if let Some(p) = s.pop() {
                    return Some(p);
                }
            }
            // Register for a wake-up before looking again, so an add
            // between the two looks is not missed.
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            {
                let mut s = self.state.lock();
                if s.closed {
                    return None;
                }
                if let Some(p) = s.pop() {
                    return Some(p);
                }
            }
            notified.await;
        }
    }

    /// Pops a pod if one is in activeQ, without waiting (simulations,
    /// benchmarks); same bookkeeping as [`pop`](Self::pop).
    pub fn try_pop(&self) -> Option<QueuedPodInfo> {
        self.state.lock().pop()
    }

    /// Takes the given pods (the other members of a pod group whose first
    /// member was just popped) out of activeQ, backoffQ or the pool,
    /// whatever their backoff, and puts them in flight as `pop` does
    /// (`attempts` incremented). Gated pods and pods the queue does not
    /// hold are skipped. The caller ends each one's attempt with
    /// [`done`](Self::done) or
    /// [`add_unschedulable_if_not_present`](Self::add_unschedulable_if_not_present).
    pub fn take<'a>(&self, keys: impl IntoIterator<Item = &'a PodKey>) -> Vec<QueuedPodInfo> {
        self.state.lock().take(keys)
    }

    /// After a failed attempt: the pod goes to the unschedulable pool, or
    /// to backoffQ (activeQ if its backoff is over) when the failure was an
    /// [`Failure::Error`], no plugin was recorded as rejecting it, or a
    /// cluster event its rejecting plugins registered arrived while it was
    /// in flight. An update of the pod seen while it was in flight replaces
    /// it (and its hints are asked); a deletion drops it.
    ///
    /// Returns where the pod went, or `None` if it was dropped (deleted
    /// meanwhile, or a pod with its key is already queued). Ends the pod's
    /// in-flight state.
    pub fn add_unschedulable_if_not_present(
        &self,
        pod: QueuedPodInfo,
        failure: Failure,
    ) -> Option<QueueKind> {
        let (kind, n) = {
            let mut s = self.state.lock();
            let kind = s.add_unschedulable(pod, failure);
            (kind, s.wakeups(usize::from(kind == Some(QueueKind::Active))))
        };
        self.wake(n);
        kind
    }

    /// The pod's attempt is over (bound, or requeued): it is no longer in
    /// flight. Idempotent.
    pub fn done(&self, uid: &str) {
        self.state.lock().done(uid);
    }

    /// A cluster event: moves every pod of the unschedulable pool that it
    /// may help. A pod moves if one of its rejecting plugins registered a
    /// matching event whose hint (if any) says Queue (a pod with no
    /// rejecting plugin moves on any event, and a WildCard event moves
    /// every pod); it goes to backoffQ if its backoff is not over, else to
    /// activeQ (straight to activeQ when the Queue came from a Pending
    /// plugin). A gated pod re-runs PreEnqueue and stays if still rejected.
    /// The event is also remembered for pods in flight.
    ///
    /// Returns the number of pods moved to activeQ.
    pub fn move_all_to_active_or_backoff(
        &self,
        event: ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> usize {
        let (n, wake) = {
            let mut s = self.state.lock();
            let n = s.move_all(event, old, new);
            (n, s.wakeups(n))
        };
        self.wake(wake);
        n
    }

    /// A pod's binding cycle failed after its reservation was undone: what
    /// it held (its node's resources, its devices in flight) is free again,
    /// and the pending pods hear of it as of an assigned pod's deletion
    /// (upstream's `handleBindingCycleError`). The pod itself is not moved
    /// (upstream's `preCheck`): it is requeued by its own failure. Pods in
    /// flight meanwhile replay this event with its object, so queueing
    /// hints run for it (the gang plugin's keeps a rejected group's
    /// members from being requeued by their own departures).
    ///
    /// Returns the number of pods moved to activeQ.
    pub fn binding_released(&self, pod: &Arc<PodInfo>) -> usize {
        let (n, wake) = {
            let mut s = self.state.lock();
            let n = s.binding_released(pod);
            (n, s.wakeups(n))
        };
        self.wake(wake);
        n
    }

    /// A pod was assigned (bound) or an assigned pod appeared.
    pub fn assigned_pod_added(&self, pod: &EventObject) -> usize {
        let event = ClusterEvent::new(EventResource::AssignedPod, ActionType::ADD);
        self.move_all_to_active_or_backoff(event, None, Some(pod))
    }

    /// An assigned pod changed; `action` says how (e.g.
    /// `ActionType::UPDATE_POD_LABEL`, or `ActionType::UPDATE` if unknown).
    pub fn assigned_pod_updated(
        &self,
        old: &EventObject,
        new: &EventObject,
        action: ActionType,
    ) -> usize {
        let event = ClusterEvent::new(EventResource::AssignedPod, action);
        self.move_all_to_active_or_backoff(event, Some(old), Some(new))
    }

    /// An assigned pod was deleted (its resources are free).
    pub fn assigned_pod_deleted(&self, pod: &EventObject) -> usize {
        let event = ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE);
        self.move_all_to_active_or_backoff(event, Some(pod), None)
    }

    /// A new version of a pending pod (the queue compares it with the
    /// version it holds). In activeQ or backoffQ the pod is updated in
    /// place; in the pool, a gated pod re-runs PreEnqueue and another moves
    /// if its plugins' hints for the update event (UnscheduledPod, with
    /// the changes as upstream's `PodSchedulingPropertiesChange`) say
    /// Queue; in flight, the update is kept for when the attempt ends. A
    /// pod the queue does not know is added.
    pub fn update(&self, new_pod: Arc<PodInfo>) {
        let n = {
            let mut s = self.state.lock();
            self.nominator.pod_updated(&new_pod);
            let n = s.update(new_pod);
            s.wakeups(n)
        };
        self.wake(n);
    }

    /// A pending pod was deleted (or bound): removed from wherever it is
    /// (an in-flight pod will not be requeued), and its nomination ends.
    pub fn delete(&self, pod: &PodInfo) {
        let mut s = self.state.lock();
        self.nominator.delete(pod);
        s.delete(pod);
    }

    /// Moves pods whose backoff is over from backoffQ to activeQ (the
    /// scheduler calls it every second; `pop` also does when activeQ is
    /// empty). Returns how many moved.
    pub fn flush_backoff_completed(&self) -> usize {
        let n = {
            let mut s = self.state.lock();
            let now = s.now();
            s.flush_backoff(now)
        };
        self.wake(n);
        n
    }

    /// Retries pods that stayed in the unschedulable pool longer than
    /// `max_in_unschedulable` (upstream flushes every 30 s): they go to
    /// backoffQ or activeQ; gated pods re-run PreEnqueue and stay if still
    /// rejected. Returns how many moved to activeQ.
    pub fn flush_unschedulable_leftover(&self) -> usize {
        let (n, wake) = {
            let mut s = self.state.lock();
            let n = s.flush_leftover();
            (n, s.wakeups(n))
        };
        self.wake(wake);
        n
    }

    /// When the earliest backoff in backoffQ ends (`None` if backoffQ is
    /// empty): a simulation advances its clock to it when nothing else can
    /// happen.
    pub fn next_backoff_expiry(&self) -> Option<Instant> {
        self.state.lock().next_backoff_expiry()
    }

    /// Moves the given pods to activeQ now, from backoffQ or the pool
    /// (gated pods re-run PreEnqueue). A pod in flight goes to activeQ if
    /// its attempt fails. Returns how many moved.
    pub fn activate<'a>(&self, keys: impl IntoIterator<Item = &'a PodKey>) -> usize {
        let n = self.state.lock().activate(keys);
        self.wake(n);
        n
    }

    /// Pods pending per queue (`scheduler_pending_pods{queue}`).
    pub fn pending_counts(&self) -> PendingCounts {
        self.state.lock().pending_counts()
    }

    /// Pods that entered each queue, per event, since the queue was built
    /// (`scheduler_queue_incoming_pods_total{queue,event}`). Pods that an
    /// event examined but left in the pool are not counted.
    pub fn incoming(&self) -> Vec<IncomingCount> {
        self.state.lock().incoming()
    }

    /// Which queue holds a pod, if any (in-flight pods are in none).
    pub fn queue_of(&self, key: &PodKey) -> Option<QueueKind> {
        self.state.lock().queue_of(key)
    }

    /// Number of pods queued (in flight excluded).
    pub fn len(&self) -> usize {
        self.state.lock().len()
    }

    /// Whether no pod is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of pods in flight.
    pub fn in_flight(&self) -> usize {
        self.state.lock().in_flight_len()
    }

    /// Closes the queue: `pop` and `try_pop` return `None` from now on.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.notify.notify_waiters();
    }
}
