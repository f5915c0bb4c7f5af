//! An indexed 4-ary heap: the heap holds slot ids, and every slot records
//! its own position, so a pod can be removed or re-ordered in O(log n)
//! without searching for it. Four children per node halve the depth; the
//! children's slots are compared one after the other, so their cache misses
//! overlap (pods are large and scattered in memory).

/// Children per node.
const ARITY: usize = 4;

/// Where heap members record their position in the heap.
pub(crate) trait Positions {
    /// Records that slot `id` is now at heap position `pos`.
    fn set_pos(&mut self, id: usize, pos: usize);
}

/// A min-heap of slot ids under a caller-given "less" over the slots.
#[derive(Debug, Default)]
pub(crate) struct IndexedHeap {
    ids: Vec<usize>,
}

impl IndexedHeap {
    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the heap is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The first member, if any.
    pub(crate) fn peek(&self) -> Option<usize> {
        self.ids.first().copied()
    }

    /// All members, in heap (not sorted) order.
    #[cfg(test)]
    pub(crate) fn ids(&self) -> &[usize] {
        &self.ids
    }

    /// Adds slot `id`.
    pub(crate) fn push<S: Positions>(
        &mut self,
        id: usize,
        slots: &mut S,
        less: impl Fn(&S, usize, usize) -> bool,
    ) {
        let pos = self.ids.len();
        self.ids.push(id);
        slots.set_pos(id, pos);
        self.up(pos, slots, &less);
    }

    /// Removes and returns the first member.
    pub(crate) fn pop<S: Positions>(
        &mut self,
        slots: &mut S,
        less: impl Fn(&S, usize, usize) -> bool,
    ) -> Option<usize> {
        if self.ids.is_empty() { None } else { Some(self.remove_at(0, slots, less)) }
    }

    /// Removes the member at heap position `pos` and returns its id.
    pub(crate) fn remove_at<S: Positions>(
        &mut self,
        pos: usize,
        slots: &mut S,
        less: impl Fn(&S, usize, usize) -> bool,
    ) -> usize {
        let last = self.ids.len() - 1;
        self.ids.swap(pos, last);
        let id = self.ids.pop().expect("heap is not empty");
        if pos < self.ids.len() {
            slots.set_pos(self.ids[pos], pos);
            self.fix(pos, slots, less);
        }
        id
    }

    /// Restores the order after the member at `pos` changed.
    pub(crate) fn fix<S: Positions>(
        &mut self,
        pos: usize,
        slots: &mut S,
        less: impl Fn(&S, usize, usize) -> bool,
    ) {
        if !self.up(pos, slots, &less) {
            self.down(pos, slots, &less);
        }
    }

    /// Moves the member at `pos` towards the root; true if it moved.
    fn up<S: Positions>(
        &mut self,
        mut pos: usize,
        slots: &mut S,
        less: &impl Fn(&S, usize, usize) -> bool,
    ) -> bool {
        let id = self.ids[pos];
        let start = pos;
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            let pid = self.ids[parent];
            if !less(slots, id, pid) {
                break;
            }
            self.ids[pos] = pid;
            slots.set_pos(pid, pos);
            pos = parent;
        }
        if pos != start {
            self.ids[pos] = id;
            slots.set_pos(id, pos);
        }
        pos != start
    }

    /// Moves the member at `pos` towards the leaves.
    fn down<S: Positions>(
        &mut self,
        mut pos: usize,
        slots: &mut S,
        less: &impl Fn(&S, usize, usize) -> bool,
    ) {
        let id = self.ids[pos];
        let start = pos;
        let n = self.ids.len();
        loop {
            let first = ARITY * pos + 1;
            if first >= n {
                break;
            }
            let mut child = first;
            for c in first + 1..(first + ARITY).min(n) {
                if less(slots, self.ids[c], self.ids[child]) {
                    child = c;
                }
            }
            let cid = self.ids[child];
            if !less(slots, cid, id) {
                break;
            }
            self.ids[pos] = cid;
            slots.set_pos(cid, pos);
            pos = child;
        }
        if pos != start {
            self.ids[pos] = id;
            slots.set_pos(id, pos);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots of (key, position).
    struct Slots(Vec<(i64, usize)>);

    impl Positions for Slots {
        fn set_pos(&mut self, id: usize, pos: usize) {
            self.0[id].1 = pos;
        }
    }

    fn less(s: &Slots, a: usize, b: usize) -> bool {
        s.0[a].0 < s.0[b].0
    }

    fn check(h: &IndexedHeap, s: &Slots) {
        for (pos, &id) in h.ids().iter().enumerate() {
            assert_eq!(s.0[id].1, pos, "position of slot {id}");
            if pos > 0 {
                assert!(!less(s, id, h.ids()[(pos - 1) / ARITY]), "heap order at {pos}");
            }
        }
    }

    #[test]
    fn push_pop_remove_fix_keep_order_and_positions() {
        let keys = [5i64, 3, 9, 1, 7, 3, 8, 2, 6, 0, 4];
        let mut s = Slots(keys.iter().map(|&k| (k, usize::MAX)).collect());
        let mut h = IndexedHeap::default();
        for id in 0..keys.len() {
            h.push(id, &mut s, less);
            check(&h, &s);
        }
        // Remove the slot with key 7 (id 4) from the middle.
        let pos = s.0[4].1;
        assert_eq!(h.remove_at(pos, &mut s, less), 4);
        check(&h, &s);
        // Re-key slot 2 (9 -> -1) and fix.
        s.0[2].0 = -1;
        let pos = s.0[2].1;
        h.fix(pos, &mut s, less);
        check(&h, &s);
        // Re-key slot 9 (0 -> 100) and fix.
        s.0[9].0 = 100;
        let pos = s.0[9].1;
        h.fix(pos, &mut s, less);
        check(&h, &s);
        let mut out = Vec::new();
        while let Some(id) = h.pop(&mut s, less) {
            out.push(s.0[id].0);
            check(&h, &s);
        }
        assert_eq!(out, vec![-1, 1, 2, 3, 3, 4, 5, 6, 8, 100]);
        assert!(h.is_empty());
    }
}
