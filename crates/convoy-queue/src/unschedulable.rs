//! The unschedulable pool: pods rejected in their last attempt, and gated
//! pods, waiting for a cluster event that may help them (or for the
//! periodic flush).
//!
//! Besides the members, the pool counts how many of them each plugin bit
//! covers, so an event no member's rejecting plugin registered for is
//! dismissed without looking at a single pod.

use crate::profiles::PLUGIN_BITS;
use crate::store::{Loc, Store};

/// The pool's members (slots) and counts.
#[derive(Debug)]
pub(crate) struct Pool {
    ids: Vec<usize>,
    gated: usize,
    any_event: usize,
    per_bit: [u32; PLUGIN_BITS],
}

impl Default for Pool {
    fn default() -> Self {
        Self { ids: Vec::new(), gated: 0, any_event: 0, per_bit: [0; PLUGIN_BITS] }
    }
}

impl Pool {
    /// Number of members, gated ones included.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the pool is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Number of gated members.
    pub(crate) fn gated(&self) -> usize {
        self.gated
    }

    /// The members, in no particular order.
    pub(crate) fn ids(&self) -> &[usize] {
        &self.ids
    }

    /// Whether some member may care about an event that the plugins in
    /// `interest` registered for.
    pub(crate) fn may_care(&self, interest: u64) -> bool {
        self.any_event > 0 || bits(interest).any(|b| self.per_bit[b] > 0)
    }

    /// Adds a detached slot.
    pub(crate) fn push(&mut self, id: usize, store: &mut Store) {
        let e = &mut store[id];
        e.loc = Loc::Pool;
        e.pos = self.ids.len();
        self.ids.push(id);
        self.count(id, store, 1);
    }

    /// Detaches slot `id`, which must be in the pool.
    pub(crate) fn remove(&mut self, id: usize, store: &mut Store) {
        self.count(id, store, -1);
        let pos = store[id].pos;
        self.ids.swap_remove(pos);
        if let Some(&moved) = self.ids.get(pos) {
            store[moved].pos = pos;
        }
        store[id].loc = Loc::Detached;
    }

    fn count(&mut self, id: usize, store: &Store, delta: i32) {
        let e = &store[id];
        let apply = |n: &mut usize| *n = n.wrapping_add_signed(delta as isize);
        if e.qpi.gated {
            apply(&mut self.gated);
        }
        if e.any_event {
            apply(&mut self.any_event);
        }
        for b in bits(e.reject_mask | e.pending_mask) {
            self.per_bit[b] = self.per_bit[b].wrapping_add_signed(delta);
        }
    }
}

/// The indices of the set bits of `mask`.
fn bits(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let b = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        Some(b)
    })
}
