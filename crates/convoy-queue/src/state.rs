//! The queue's state machine, behind the lock of [`SchedulingQueue`]:
//! every pod the queue holds is in exactly one of activeQ, backoffQ and the
//! unschedulable pool, or in flight (popped, not yet done).
//!
//! Methods that may put pods in activeQ return how many they put there, so
//! the caller can wake `pop` after releasing the lock.
//!
//! [`SchedulingQueue`]: crate::SchedulingQueue

use std::sync::Arc;
use std::time::{Duration, Instant};

use convoy_api::{
    ActionType, Clock, ClusterEvent, EventObject, EventResource, PodInfo, PodKey, QueuedPodInfo,
};

use crate::active::ActiveQ;
use crate::backoff::{BackoffQ, backoff_expiry};
use crate::config::QueueConfig;
use crate::in_flight::InFlight;
use crate::metrics::{IncomingCount, IncomingCounters, IncomingEvent, PendingCounts, QueueKind};
use crate::profiles::{Profiles, Strategy, pod_update_event};
use crate::store::{Entry, Loc, Store};
use crate::unschedulable::Pool;

/// How a scheduling attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Plugins rejected the pod (Unschedulable, UnschedulableAndUnresolvable
    /// or Pending); the rejecting plugins are in the pod's
    /// `unschedulable_plugins` and `pending_plugins`.
    Unschedulable,
    /// An internal error: the pod is retried after its backoff, whatever
    /// the events.
    Error,
}

/// Everything the lock protects.
pub(crate) struct State {
    clock: Arc<dyn Clock>,
    profiles: Profiles,
    initial_backoff: Duration,
    max_backoff: Duration,
    max_in_unschedulable: Duration,
    /// Pop from backoffQ when activeQ is empty (upstream's
    /// `SchedulerPopFromBackoffQ`).
    pop_from_backoff: bool,
    /// Pods pushed to backoffQ since the last [`State::wakeups`].
    backoff_arrivals: usize,
    store: Store,
    active: ActiveQ,
    backoff: BackoffQ,
    pool: Pool,
    in_flight: InFlight,
    counters: IncomingCounters,
    /// `close` was called.
    pub(crate) closed: bool,
    /// Reused buffers, so moving pods does not allocate.
    scratch_interest: Vec<u64>,
    scratch_moves: Vec<(usize, Strategy)>,
}

impl State {
    pub(crate) fn new(config: QueueConfig) -> Self {
        Self {
            clock: config.clock,
            profiles: Profiles::new(config.profiles),
            initial_backoff: config.initial_backoff,
            max_backoff: config.max_backoff,
            max_in_unschedulable: config.max_in_unschedulable,
            pop_from_backoff: config.pop_from_backoff,
            backoff_arrivals: 0,
            store: Store::default(),
            active: ActiveQ::new(config.less),
            backoff: BackoffQ::default(),
            pool: Pool::default(),
            in_flight: InFlight::default(),
            counters: IncomingCounters::default(),
            closed: false,
            scratch_interest: Vec::new(),
            scratch_moves: Vec::new(),
        }
    }

    fn new_entry(&self, qpi: QueuedPodInfo) -> Entry {
        let mut e = Entry {
            profile: self.profiles.index(&qpi.pod_info),
            loc: Loc::Detached,
            pos: 0,
            backoff_expiry: qpi.timestamp,
            reject_mask: 0,
            pending_mask: 0,
            any_event: false,
            after_error: false,
            gating_plugin: None,
            seq: 0,
            qpi,
        };
        self.profiles.set_masks(&mut e);
        e
    }

    /// A new pending pod (or, if known, an update of it).
    pub(crate) fn add(&mut self, pod: Arc<PodInfo>, why: IncomingEvent) -> usize {
        if self.store.id_of(&pod.key).is_some()
            || self.in_flight.get_mut(&pod.uid, &pod.key).is_some()
        {
            return self.update(pod);
        }
        let now = self.clock.now();
        let id = self.store.insert(self.new_entry(QueuedPodInfo::new(pod, now)));
        let kind = self.requeue(id, Strategy::Immediately, now);
        self.counters.add(kind, why, 1);
        usize::from(kind == QueueKind::Active)
    }

    /// Places a detached pod according to `strategy`, running PreEnqueue
    /// when it leaves the pool.
    fn requeue(&mut self, id: usize, strategy: Strategy, now: Instant) -> QueueKind {
        if strategy == Strategy::Skip || !self.admit(id) {
            self.pool.push(id, &mut self.store);
            return if self.store[id].qpi.gated {
                QueueKind::Gated
            } else {
                QueueKind::Unschedulable
            };
        }
        if strategy == Strategy::AfterBackoff {
            let e = &mut self.store[id];
            let expiry = backoff_expiry(e, self.initial_backoff, self.max_backoff);
            if expiry > now {
                e.backoff_expiry = expiry;
                self.backoff.push(id, &mut self.store);
                self.backoff_arrivals += 1;
                return QueueKind::Backoff;
            }
        }
        self.active.push(id, &mut self.store);
        QueueKind::Active
    }

    /// Runs PreEnqueue; a rejection gates the pod and records the plugin.
    fn admit(&mut self, id: usize) -> bool {
        let e = &mut self.store[id];
        let gate = self.profiles.pre_enqueue(e.profile, &e.qpi.pod_info);
        match gate {
            None => {
                e.qpi.gated = false;
                if e.gating_plugin.take().is_some() {
                    self.profiles.set_masks(e);
                }
                true
            }
            Some(name) => {
                e.qpi.gated = true;
                e.qpi.unschedulable_plugins.insert(name);
                e.gating_plugin = Some(name);
                self.profiles.set_masks(e);
                false
            }
        }
    }

    /// Takes a pod out of whichever structure holds it.
    fn detach(&mut self, id: usize) {
        match self.store[id].loc {
            Loc::Active => self.active.remove(id, &mut self.store),
            Loc::Backoff => self.backoff.remove(id, &mut self.store),
            Loc::Pool => self.pool.remove(id, &mut self.store),
            Loc::Detached => {}
        }
    }

    /// How many poppers to wake after a change that moved `to_active` pods
    /// to activeQ: those, plus the pods pushed to backoffQ meanwhile when
    /// they may be popped from there.
    pub(crate) fn wakeups(&mut self, to_active: usize) -> usize {
        let arrived = std::mem::take(&mut self.backoff_arrivals);
        to_active + if self.pop_from_backoff { arrived } else { 0 }
    }

    /// Pops the first pod of activeQ, flushing backoffQ first if activeQ is
    /// empty; if activeQ is still empty, the pod of backoffQ whose backoff
    /// ends first, whatever its backoff (upstream's
    /// `SchedulerPopFromBackoffQ`, on by default since v1.33: an idle
    /// scheduler does not wait out backoffs), unless its last attempt
    /// failed with an error (no busy retry of a failing API call).
    pub(crate) fn pop(&mut self) -> Option<QueuedPodInfo> {
        if self.closed {
            return None;
        }
        if self.active.is_empty() && self.backoff.len() > 0 {
            let now = self.clock.now();
            self.flush_backoff(now);
            if self.active.is_empty()
                && self.pop_from_backoff
                && let Some(id) = self.backoff.pop_first_if(&mut self.store, |e| !e.after_error)
            {
                self.active.push(id, &mut self.store);
                self.counters.add(QueueKind::Active, IncomingEvent::PopFromBackoff, 1);
            }
        }
        let id = self.active.pop(&mut self.store)?;
        let mut qpi = self.store.remove(id).qpi;
        qpi.attempts += 1;
        if qpi.initial_attempt_timestamp.is_none() {
            qpi.initial_attempt_timestamp = Some(self.clock.now());
        }
        self.in_flight.start(qpi.pod_info.uid.clone(), qpi.key().clone());
        Some(qpi)
    }

    /// Takes the given pods out of whichever queue holds them and puts them
    /// in flight with the same bookkeeping as `pop`; gated pods and pods
    /// not queued are skipped.
    pub(crate) fn take<'a>(
        &mut self,
        keys: impl IntoIterator<Item = &'a PodKey>,
    ) -> Vec<QueuedPodInfo> {
        let now = self.clock.now();
        let mut out = Vec::new();
        for key in keys {
            let Some(id) = self.store.id_of(key) else { continue };
            if self.store[id].qpi.gated {
                continue;
            }
            self.detach(id);
            let mut qpi = self.store.remove(id).qpi;
            qpi.attempts += 1;
            qpi.initial_attempt_timestamp.get_or_insert(now);
            self.in_flight.start(qpi.pod_info.uid.clone(), qpi.key().clone());
            out.push(qpi);
        }
        out
    }

    /// A pod whose attempt failed: back to the pool, or to backoffQ/activeQ
    /// if it failed with an error or an event that may help it arrived
    /// while it was in flight.
    pub(crate) fn add_unschedulable(
        &mut self,
        mut qpi: QueuedPodInfo,
        failure: Failure,
    ) -> Option<QueueKind> {
        let uid = qpi.pod_info.uid.clone();
        let record = self
            .in_flight
            .get_mut(&uid, qpi.key())
            .map(|r| (r.since, r.updated.clone(), r.deleted, r.activated));
        if record.as_ref().is_some_and(|r| r.2) || self.store.id_of(qpi.key()).is_some() {
            self.in_flight.finish(&uid, Some(qpi.key()));
            return None;
        }
        let now = self.clock.now();
        let popped = qpi.pod_info.clone();
        if let Some(updated) = record.as_ref().and_then(|r| r.1.clone()) {
            qpi.pod_info = updated;
        }
        qpi.timestamp = now;
        qpi.gated = false;
        let mut entry = self.new_entry(qpi);
        entry.after_error = failure == Failure::Error;
        let strategy = match record {
            Some((_, _, _, true)) => Strategy::Immediately,
            Some((since, updated, _, _))
                if failure == Failure::Unschedulable && !entry.any_event =>
            {
                let mut s = Strategy::Skip;
                for ev in self.in_flight.events_since(since) {
                    s = s.max(self.profiles.strategy(&entry, ev, u64::MAX, None));
                }
                for (ev, old) in self.in_flight.released_since(since) {
                    let hints = Some((Some(old), None));
                    s = s.max(self.profiles.strategy(&entry, ev, u64::MAX, hints));
                }
                if let Some(new) = updated {
                    let ev = pod_update_event(&popped, &new);
                    let old = EventObject::Pod(popped.pod.clone());
                    let new = EventObject::Pod(new.pod.clone());
                    let hints = Some((Some(&old), Some(&new)));
                    s = s.max(self.profiles.strategy(&entry, &ev, u64::MAX, hints));
                }
                s
            }
            // An error, no rejecting plugin, or no record of the attempt:
            // retry after the backoff.
            _ => Strategy::AfterBackoff,
        };
        self.in_flight.finish(&uid, Some(entry.qpi.key()));
        let id = self.store.insert(entry);
        let kind = self.requeue(id, strategy, now);
        self.counters.add(kind, IncomingEvent::ScheduleAttemptFailure, 1);
        Some(kind)
    }

    /// The pod's attempt is over.
    pub(crate) fn done(&mut self, uid: &str) {
        self.in_flight.finish(uid, None);
    }

    /// Moves the pool's pods that `event` may help.
    pub(crate) fn move_all(
        &mut self,
        event: ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> usize {
        self.in_flight.record(event);
        self.move_pool(event, old, new, None)
    }

    /// See [`SchedulingQueue::binding_released`](crate::SchedulingQueue::binding_released).
    pub(crate) fn binding_released(&mut self, pod: &Arc<PodInfo>) -> usize {
        let event = ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE);
        let old = EventObject::Pod(pod.pod.clone());
        let moved = self.move_pool(event, Some(&old), None, Some(&pod.uid));
        self.in_flight.record_released(event, old);
        moved
    }

    /// Moves the pool's pods that `event` may help, except the pod with
    /// UID `except`.
    fn move_pool(
        &mut self,
        event: ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        except: Option<&str>,
    ) -> usize {
        if self.pool.is_empty() {
            return 0;
        }
        let mut interest = std::mem::take(&mut self.scratch_interest);
        let mut moves = std::mem::take(&mut self.scratch_moves);
        moves.clear();
        let wildcard = event.resource == EventResource::WildCard;
        let union = self.profiles.interest(&event, &mut interest);
        if wildcard || self.pool.may_care(union) {
            for &id in self.pool.ids() {
                let e = &self.store[id];
                if except.is_some_and(|uid| *e.qpi.pod_info.uid == *uid) {
                    continue;
                }
                let s = self.profiles.strategy(e, &event, interest[e.profile], Some((old, new)));
                if s != Strategy::Skip {
                    moves.push((id, s));
                }
            }
        }
        let moved = self.apply_moves(&moves, IncomingEvent::Cluster(event));
        self.scratch_interest = interest;
        self.scratch_moves = moves;
        moved
    }

    /// Takes the given pods out of the pool and requeues them.
    fn apply_moves(&mut self, moves: &[(usize, Strategy)], why: IncomingEvent) -> usize {
        if moves.is_empty() {
            return 0;
        }
        let now = self.clock.now();
        let (mut to_active, mut to_backoff) = (0, 0);
        for &(id, s) in moves {
            self.pool.remove(id, &mut self.store);
            match self.requeue(id, s, now) {
                QueueKind::Active => to_active += 1,
                QueueKind::Backoff => to_backoff += 1,
                // Still gated: it stays, and did not come in.
                QueueKind::Unschedulable | QueueKind::Gated => {}
            }
        }
        if to_active > 0 {
            self.counters.add(QueueKind::Active, why, to_active);
        }
        if to_backoff > 0 {
            self.counters.add(QueueKind::Backoff, why, to_backoff);
        }
        to_active as usize
    }

    /// A new version of a pending pod.
    pub(crate) fn update(&mut self, new: Arc<PodInfo>) -> usize {
        if let Some(r) = self.in_flight.get_mut(&new.uid, &new.key) {
            r.updated = Some(new);
            return 0;
        }
        let Some(id) = self.store.id_of(&new.key) else {
            return self.add(new, IncomingEvent::PodUpdate);
        };
        let old = std::mem::replace(&mut self.store[id].qpi.pod_info, new.clone());
        match self.store[id].loc {
            Loc::Active => {
                self.active.fix(id, &mut self.store);
                0
            }
            Loc::Backoff | Loc::Detached => 0,
            Loc::Pool => {
                let e = &self.store[id];
                // A gated pod re-runs PreEnqueue on any update of itself
                // (its verdict is a function of the pod); the others ask
                // their plugins' hints about the update event.
                let s = if e.qpi.gated {
                    Strategy::AfterBackoff
                } else {
                    let ev = pod_update_event(&old, &new);
                    let old = EventObject::Pod(old.pod.clone());
                    let new = EventObject::Pod(new.pod.clone());
                    self.profiles.strategy(e, &ev, u64::MAX, Some((Some(&old), Some(&new))))
                };
                if s == Strategy::Skip {
                    return 0;
                }
                self.apply_moves(&[(id, s)], IncomingEvent::PodUpdate)
            }
        }
    }

    /// Removes a pod from wherever it is; an in-flight pod will not be
    /// requeued.
    pub(crate) fn delete(&mut self, pod: &PodInfo) {
        if let Some(r) = self.in_flight.get_mut(&pod.uid, &pod.key) {
            r.deleted = true;
        }
        if let Some(id) = self.store.id_of(&pod.key) {
            self.detach(id);
            self.store.remove(id);
        }
    }

    /// When the first backoff in backoffQ ends.
    pub(crate) fn next_backoff_expiry(&self) -> Option<Instant> {
        self.backoff.next_expiry(&self.store)
    }

    /// Moves pods whose backoff ended to activeQ.
    pub(crate) fn flush_backoff(&mut self, now: Instant) -> usize {
        let mut n = 0;
        while let Some(id) = self.backoff.pop_expired(now, &mut self.store) {
            self.active.push(id, &mut self.store);
            n += 1;
        }
        if n > 0 {
            self.counters.add(QueueKind::Active, IncomingEvent::BackoffComplete, n as u64);
        }
        n
    }

    /// Moves pods that stayed in the pool too long (gated pods re-run
    /// PreEnqueue and stay if still rejected).
    pub(crate) fn flush_leftover(&mut self) -> usize {
        let now = self.clock.now();
        let mut moves = std::mem::take(&mut self.scratch_moves);
        moves.clear();
        for &id in self.pool.ids() {
            if now.saturating_duration_since(self.store[id].qpi.timestamp)
                > self.max_in_unschedulable
            {
                moves.push((id, Strategy::AfterBackoff));
            }
        }
        let moved = self.apply_moves(&moves, IncomingEvent::UnschedulableTimeout);
        self.scratch_moves = moves;
        moved
    }

    /// Moves the given pods to activeQ now; in-flight ones will go to
    /// activeQ when their attempt fails.
    pub(crate) fn activate<'a>(&mut self, keys: impl IntoIterator<Item = &'a PodKey>) -> usize {
        let now = self.clock.now();
        let mut n = 0;
        for key in keys {
            match self.store.id_of(key) {
                Some(id) if self.store[id].loc == Loc::Active => {}
                Some(id) => {
                    self.detach(id);
                    if self.requeue(id, Strategy::Immediately, now) == QueueKind::Active {
                        n += 1;
                    }
                }
                None => {
                    if let Some(r) = self.in_flight.find_by_key(key) {
                        r.activated = true;
                    }
                }
            }
        }
        if n > 0 {
            self.counters.add(QueueKind::Active, IncomingEvent::ForceActivate, n as u64);
        }
        n
    }

    /// Pods pending per queue.
    pub(crate) fn pending_counts(&self) -> PendingCounts {
        PendingCounts {
            active: self.active.len(),
            backoff: self.backoff.len(),
            unschedulable: self.pool.len() - self.pool.gated(),
            gated: self.pool.gated(),
        }
    }

    /// The incoming counters.
    pub(crate) fn incoming(&self) -> Vec<IncomingCount> {
        self.counters.snapshot()
    }

    /// Number of pods in flight.
    pub(crate) fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// Where a pod is, if the queue holds it.
    pub(crate) fn queue_of(&self, key: &PodKey) -> Option<QueueKind> {
        let id = self.store.id_of(key)?;
        let e = &self.store[id];
        Some(match e.loc {
            Loc::Active | Loc::Detached => QueueKind::Active,
            Loc::Backoff => QueueKind::Backoff,
            Loc::Pool if e.qpi.gated => QueueKind::Gated,
            Loc::Pool => QueueKind::Unschedulable,
        })
    }

    /// The clock's now.
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Number of pods held (in flight excluded).
    pub(crate) fn len(&self) -> usize {
        self.store.len()
    }
}
