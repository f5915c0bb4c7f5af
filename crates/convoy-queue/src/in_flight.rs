//! Pods being scheduled ("in flight") and the cluster events seen while
//! they were, so a pod that fails is not parked in the pool after an event
//! that could have helped it went by (upstream `inFlightPods` /
//! `inFlightEvents`).
//!
//! Events are kept by type only, each with the sequence number of its last
//! occurrence: the map stays as small as the set of event types, whatever
//! the event rate. The price is that hints are not run for these events
//! (their objects are not kept): a matching event type counts as Queue, so
//! the pod is retried after its backoff. The pod's own updates are kept
//! in full (its latest version), and their hints do run. So do the hints of
//! the releases of failed binding cycles (rare, kept with their pod until no
//! pod in flight is older than them), which a rejected pod group raises
//! for each of its members: without them, the group's members would be
//! requeued by their own departures.

use std::collections::HashMap;
use std::sync::Arc;

use convoy_api::{ClusterEvent, EventObject, PodInfo, PodKey};

/// One pod being scheduled.
#[derive(Debug)]
pub(crate) struct InFlightPod {
    /// The pod's key (checked on look-ups, in case UIDs are not unique).
    pub(crate) key: PodKey,
    /// Event sequence number when the pod was popped.
    pub(crate) since: u64,
    /// The pod's latest version, if it was updated meanwhile.
    pub(crate) updated: Option<Arc<PodInfo>>,
    /// The pod was deleted meanwhile: do not requeue it.
    pub(crate) deleted: bool,
    /// `activate` asked for the pod meanwhile: requeue it to activeQ.
    pub(crate) activated: bool,
}

/// In-flight pods by UID, and the event types seen while any was in flight.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    pods: HashMap<Arc<str>, InFlightPod>,
    events: Vec<(ClusterEvent, u64)>,
    /// Releases of failed binding cycles, with the pod released, by
    /// sequence number.
    released: Vec<(ClusterEvent, EventObject, u64)>,
    seq: u64,
}

impl InFlight {
    /// Number of pods in flight.
    pub(crate) fn len(&self) -> usize {
        self.pods.len()
    }

    /// Records that a pod was popped.
    pub(crate) fn start(&mut self, uid: Arc<str>, key: PodKey) {
        let pod =
            InFlightPod { key, since: self.seq, updated: None, deleted: false, activated: false };
        self.pods.insert(uid, pod);
    }

    /// Records an event if any pod is in flight.
    pub(crate) fn record(&mut self, event: ClusterEvent) {
        if self.pods.is_empty() {
            return;
        }
        self.seq += 1;
        match self.events.iter_mut().find(|(e, _)| *e == event) {
            Some(slot) => slot.1 = self.seq,
            None => self.events.push((event, self.seq)),
        }
    }

    /// Records the release of a failed binding cycle (with its pod) if any
    /// pod is in flight; forgets the releases no pod in flight can need.
    pub(crate) fn record_released(&mut self, event: ClusterEvent, old: EventObject) {
        if self.pods.is_empty() {
            return;
        }
        self.seq += 1;
        self.released.push((event, old, self.seq));
        if self.released.len() > 64 {
            let oldest = self.pods.values().map(|p| p.since).min().unwrap_or(self.seq);
            self.released.retain(|(_, _, s)| *s > oldest);
        }
    }

    /// The releases recorded after sequence number `since`.
    pub(crate) fn released_since(
        &self,
        since: u64,
    ) -> impl Iterator<Item = (&ClusterEvent, &EventObject)> {
        self.released.iter().filter(move |(_, _, s)| *s > since).map(|(e, o, _)| (e, o))
    }

    /// The in-flight record of a pod, if it is in flight.
    pub(crate) fn get_mut(&mut self, uid: &str, key: &PodKey) -> Option<&mut InFlightPod> {
        self.pods.get_mut(uid).filter(|p| p.key == *key)
    }

    /// The in-flight pod with this key, if any (a scan: in-flight pods are
    /// few).
    pub(crate) fn find_by_key(&mut self, key: &PodKey) -> Option<&mut InFlightPod> {
        self.pods.values_mut().find(|p| p.key == *key)
    }

    /// Ends a pod's attempt and returns its record.
    pub(crate) fn finish(&mut self, uid: &str, key: Option<&PodKey>) -> Option<InFlightPod> {
        let matches = self.pods.get(uid).is_some_and(|p| key.is_none_or(|k| p.key == *k));
        let pod = if matches { self.pods.remove(uid) } else { None };
        if self.pods.is_empty() {
            self.events.clear();
            self.released.clear();
        }
        pod
    }

    /// The event types seen after sequence number `since`.
    pub(crate) fn events_since(&self, since: u64) -> impl Iterator<Item = &ClusterEvent> {
        self.events.iter().filter(move |(_, s)| *s > since).map(|(e, _)| e)
    }
}
