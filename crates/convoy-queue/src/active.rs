//! activeQ: the pods ready to be scheduled, ordered by the QueueSort
//! plugin's `less`.

use std::sync::Arc;

use convoy_api::QueueSortPlugin;

use crate::heap::IndexedHeap;
use crate::store::{Loc, Store};

/// A heap of slots ordered by QueueSort, then first in, first out among
/// pods QueueSort finds equal (same priority and timestamp), so the order
/// is deterministic.
pub(crate) struct ActiveQ {
    heap: IndexedHeap,
    less: Arc<dyn QueueSortPlugin>,
    next_seq: u64,
}

/// QueueSort's order, ties broken by arrival in activeQ.
fn before(less: &dyn QueueSortPlugin, s: &Store, a: usize, b: usize) -> bool {
    less.less(&s[a].qpi, &s[b].qpi) || (!less.less(&s[b].qpi, &s[a].qpi) && s[a].seq < s[b].seq)
}

impl std::fmt::Debug for ActiveQ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActiveQ").field("len", &self.heap.len()).finish()
    }
}

impl ActiveQ {
    /// An empty activeQ ordered by `less`.
    pub(crate) fn new(less: Arc<dyn QueueSortPlugin>) -> Self {
        Self { heap: IndexedHeap::default(), less, next_seq: 0 }
    }

    /// Number of pods.
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no pod is ready.
    pub(crate) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Adds a detached slot.
    pub(crate) fn push(&mut self, id: usize, store: &mut Store) {
        store[id].loc = Loc::Active;
        store[id].seq = self.next_seq;
        self.next_seq += 1;
        let less = &*self.less;
        self.heap.push(id, store, |s, a, b| before(less, s, a, b));
    }

    /// Detaches and returns the first pod's slot.
    pub(crate) fn pop(&mut self, store: &mut Store) -> Option<usize> {
        let less = &*self.less;
        let id = self.heap.pop(store, |s, a, b| before(less, s, a, b))?;
        store[id].loc = Loc::Detached;
        Some(id)
    }

    /// Detaches slot `id`, which must be in activeQ.
    pub(crate) fn remove(&mut self, id: usize, store: &mut Store) {
        let less = &*self.less;
        let pos = store[id].pos;
        self.heap.remove_at(pos, store, |s, a, b| before(less, s, a, b));
        store[id].loc = Loc::Detached;
    }

    /// Restores the order after slot `id`'s pod changed.
    pub(crate) fn fix(&mut self, id: usize, store: &mut Store) {
        let less = &*self.less;
        let pos = store[id].pos;
        self.heap.fix(pos, store, |s, a, b| less.less(&s[a].qpi, &s[b].qpi));
    }
}
