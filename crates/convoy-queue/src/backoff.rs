//! backoffQ: pods that failed an attempt and wait out their backoff,
//! ordered by when it ends.
//!
//! The backoff grows exponentially with the pod's attempts, as upstream's
//! `calculateBackoffDuration`: `initial * 2^(attempts-1)`, capped at `max`,
//! counted from the pod's last `timestamp` (when its attempt failed). A pod
//! never attempted has no backoff.

use std::time::{Duration, Instant};

use crate::heap::IndexedHeap;
use crate::store::{Entry, Loc, Store};

/// The backoff a pod gets after `attempts` scheduling attempts.
pub(crate) fn backoff_duration(attempts: u32, initial: Duration, max: Duration) -> Duration {
    if attempts == 0 {
        return Duration::ZERO;
    }
    let mut d = initial;
    for _ in 1..attempts {
        // Compare before doubling so the sum cannot overflow.
        if d > max.saturating_sub(d) {
            return max;
        }
        d += d;
    }
    d.min(max)
}

/// When the backoff of a queued pod ends.
pub(crate) fn backoff_expiry(e: &Entry, initial: Duration, max: Duration) -> Instant {
    let wait = backoff_duration(e.qpi.attempts, initial, max).saturating_add(e.qpi.backoff_jitter);
    // A wait past what `Instant` can hold means "not in this process's life".
    e.qpi.timestamp.checked_add(wait).unwrap_or(e.qpi.timestamp + FOREVER)
}

/// A wait no process outlives (used when a backoff would overflow `Instant`).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn expires_first(s: &Store, a: usize, b: usize) -> bool {
    s[a].backoff_expiry < s[b].backoff_expiry
}

/// A heap of slots ordered by backoff expiry.
#[derive(Debug, Default)]
pub(crate) struct BackoffQ {
    heap: IndexedHeap,
}

impl BackoffQ {
    /// Number of pods.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Adds a detached slot whose `backoff_expiry` is set.
    pub(crate) fn push(&mut self, id: usize, store: &mut Store) {
        store[id].loc = Loc::Backoff;
        self.heap.push(id, store, expires_first);
    }

    /// Detaches and returns the pod whose backoff ended first, if it ended
    /// by `now`.
    pub(crate) fn pop_expired(&mut self, now: Instant, store: &mut Store) -> Option<usize> {
        let first = self.heap.peek()?;
        if store[first].backoff_expiry > now {
            return None;
        }
        let id = self.heap.pop(store, expires_first)?;
        store[id].loc = Loc::Detached;
        Some(id)
    }

    /// Detaches and returns the pod whose backoff ends first, whatever
    /// its backoff, if `ok` accepts it.
    pub(crate) fn pop_first_if(
        &mut self,
        store: &mut Store,
        ok: impl Fn(&Entry) -> bool,
    ) -> Option<usize> {
        let first = self.heap.peek()?;
        if !ok(&store[first]) {
            return None;
        }
        let id = self.heap.pop(store, expires_first)?;
        store[id].loc = Loc::Detached;
        Some(id)
    }

    /// When the first pod's backoff ends, if any pod is in backoffQ.
    pub(crate) fn next_expiry(&self, store: &Store) -> Option<Instant> {
        self.heap.peek().map(|id| store[id].backoff_expiry)
    }

    /// Detaches slot `id`, which must be in backoffQ.
    pub(crate) fn remove(&mut self, id: usize, store: &mut Store) {
        let pos = store[id].pos;
        self.heap.remove_at(pos, store, expires_first);
        store[id].loc = Loc::Detached;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_double_up_to_the_cap() {
        let s = Duration::from_secs;
        let cases = [(0, 0), (1, 1), (2, 2), (3, 4), (4, 8), (5, 10), (6, 10), (40, 10)];
        for (attempts, want) in cases {
            assert_eq!(backoff_duration(attempts, s(1), s(10)), s(want), "attempts {attempts}");
        }
        assert_eq!(backoff_duration(3, Duration::ZERO, s(10)), Duration::ZERO);
        assert_eq!(backoff_duration(u32::MAX, s(1), Duration::MAX), Duration::MAX);
        // An initial backoff above the max is capped.
        assert_eq!(backoff_duration(1, s(20), s(10)), s(10));
    }
}
