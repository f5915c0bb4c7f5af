//! The pods the queue holds, in one slab: activeQ, backoffQ and the
//! unschedulable pool refer to slots by index, so moving a pod between them
//! costs no hashing and no allocation.

use std::collections::HashMap;
use std::ops::{Index, IndexMut};
use std::time::Instant;

use convoy_api::{PodKey, QueuedPodInfo};

use crate::heap::Positions;

/// Which structure holds a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loc {
    /// In no structure (being moved).
    Detached,
    /// activeQ.
    Active,
    /// backoffQ.
    Backoff,
    /// The unschedulable pool (gated pods included).
    Pool,
}

/// One queued pod and its bookkeeping.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The pod and its queueing history.
    pub(crate) qpi: QueuedPodInfo,
    /// Index of the pod's profile (see `Profiles`).
    pub(crate) profile: usize,
    /// Where the pod is.
    pub(crate) loc: Loc,
    /// Position inside the structure named by `loc`.
    pub(crate) pos: usize,
    /// When the pod's backoff ends (meaningful in backoffQ).
    pub(crate) backoff_expiry: Instant,
    /// Bits of the plugins that rejected the pod (Unschedulable, or the
    /// gating PreEnqueue plugin when gated).
    pub(crate) reject_mask: u64,
    /// Bits of the plugins that returned Pending.
    pub(crate) pending_mask: u64,
    /// No plugin rejected the pod: any event may help it.
    pub(crate) any_event: bool,
    /// Its last attempt failed with an error (not popped from backoffQ
    /// before its backoff ends).
    pub(crate) after_error: bool,
    /// The PreEnqueue plugin holding the pod back, when gated.
    pub(crate) gating_plugin: Option<&'static str>,
    /// Arrival order in activeQ (its tie-break).
    pub(crate) seq: u64,
}

/// A slab of entries plus the index by pod key.
#[derive(Debug, Default)]
pub(crate) struct Store {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    by_key: HashMap<PodKey, usize>,
}

impl Store {
    /// Adds an entry (its key must not be present) and returns its slot.
    pub(crate) fn insert(&mut self, entry: Entry) -> usize {
        let key = entry.qpi.key().clone();
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id] = Some(entry);
                id
            }
            None => {
                self.slots.push(Some(entry));
                self.slots.len() - 1
            }
        };
        let previous = self.by_key.insert(key, id);
        debug_assert!(previous.is_none(), "pod inserted twice");
        id
    }

    /// Removes the entry in slot `id` (it must be detached from every
    /// structure).
    pub(crate) fn remove(&mut self, id: usize) -> Entry {
        let entry = self.slots[id].take().expect("live slot");
        self.by_key.remove(entry.qpi.key());
        self.free.push(id);
        entry
    }

    /// The slot of a pod, by key.
    pub(crate) fn id_of(&self, key: &PodKey) -> Option<usize> {
        self.by_key.get(key).copied()
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.by_key.len()
    }
}

impl Index<usize> for Store {
    type Output = Entry;
    fn index(&self, id: usize) -> &Entry {
        self.slots[id].as_ref().expect("live slot")
    }
}

impl IndexMut<usize> for Store {
    fn index_mut(&mut self, id: usize) -> &mut Entry {
        self.slots[id].as_mut().expect("live slot")
    }
}

impl Positions for Store {
    fn set_pos(&mut self, id: usize, pos: usize) {
        self[id].pos = pos;
    }
}
