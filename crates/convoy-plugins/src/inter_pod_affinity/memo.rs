//! Per-node counts kept between scheduling cycles, so that PreFilter and
//! PreScore cost O(nodes) cheap comparisons plus the pods of the nodes that
//! changed, instead of matching every pod of the cluster every cycle.
//!
//! Everything PreFilter and PreScore count is a sum over nodes of a
//! per-node *contribution*: for each topology key, a count at the node's
//! value of that key, computed from the node's labels and pods and from a
//! *key* describing the incoming pod (what the counts depend on: its
//! resolved terms, or its namespace, labels and namespace labels). An
//! [`Entry`] keeps, for one key, every node's contribution with the node's
//! [`generation`](convoy_api::NodeInfo::generation) when computed, and the
//! sums (per topology key, an array indexed by [`Domains`](super::domains::Domains) id). A pass
//! compares the snapshot's generations with the entry's (one linear scan of
//! two `u64` arrays, 32 at a time) and, for each node whose generation
//! differs, computes its contribution again, subtracts the old one and adds
//! the new one. Generations are process-wide and taken on every change of a
//! node info, so an equal generation at a position is the same node with the
//! same labels and pods; a node added, removed or moved in the list shows up
//! as different generations at the positions concerned.
//!
//! A [`Memo`] holds the entries of one kind of count, the [`ENTRIES`] most
//! recently used keys, so that pods of a few alternating templates do not
//! rebuild each other's. An entry with a key not seen before is built from
//! every node once (upstream's cost, once per key instead of once per
//! cycle).
//!
//! Memory: per entry, 32 bytes per node (a generation and an inline
//! contribution of one topology key; 16 bytes more per further key a node
//! contributes to) and 8 bytes per topology value per key; per node, about
//! 40 bytes of rows and, for a hostname key, about 60 bytes of interned
//! value; nothing per pod (a node's contribution has one item per topology
//! key, however many pods count there). With every entry of the three kinds
//! in use, about 530 bytes per node (`tests/perf.rs`). The interned values
//! of each key ([`Topology`]) only grow, so everything is dropped when a key
//! holds more than twice as many values as there are nodes (stale values of
//! deleted or relabelled nodes).

use std::sync::Arc;

use smallvec::SmallVec;

use convoy_api::{NodeInfo, NodeInfoLister};

use super::counts::{KeyArray, TopologyCounts};
use super::domains::Topology;

/// Entries kept per kind of count; the least recently used is dropped.
pub(super) const ENTRIES: usize = 4;

/// Groups of counts an entry keeps (PreFilter's incoming counts: affinity
/// and anti-affinity).
pub(super) const GROUPS: usize = 2;

/// The generation of a position never computed (generations start at 1).
const UNSEEN: u64 = 0;

/// Generations compared at once before looking at single positions.
const RUN: usize = 32;

/// One topology key's count at one node's value.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Item {
    /// The entry's [`Slot`].
    slot: u32,
    /// The node's value, as an id of the slot key's [`Domains`](super::domains::Domains).
    domain: u32,
    n: i64,
}

/// A node's contribution: one item per topology key the node counts at.
type Contribution = SmallVec<[Item; 1]>;

/// The sums of one topology key in one group of an entry.
#[derive(Debug)]
struct Slot {
    group: u8,
    key: Arc<str>,
    /// Index in [`Topology::keys`].
    topology_key: u32,
    /// By domain id (ids past the end count 0); shared with cycle states.
    counts: Arc<Vec<i64>>,
}

/// What a contribution function writes a node's counts to.
pub(super) struct Sink<'a> {
    node: &'a NodeInfo,
    topology: &'a mut Topology,
    slots: &'a mut Vec<Slot>,
    items: &'a mut Contribution,
}

/// The index of the slot of `key` in `group`, added if new.
fn slot(slots: &mut Vec<Slot>, topology: &mut Topology, group: u8, key: &Arc<str>) -> u32 {
    let i = match slots.iter().position(|s| s.group == group && s.key == *key) {
        Some(i) => i,
        None => {
            let topology_key = topology.key_index(key);
            slots.push(Slot { group, key: key.clone(), topology_key, counts: Arc::default() });
            slots.len() - 1
        }
    };
    u32::try_from(i).expect("fewer than 2^32 slots")
}

impl<'a> Sink<'a> {
    /// The node whose contribution is computed.
    pub(super) fn node(&self) -> &'a NodeInfo {
        self.node
    }

    /// Adds `n` in `group` at the node's value of `key`; nothing when the
    /// node does not have the label. A key counted keeps its item even when
    /// its sum is 0 (PreScore tells "some term counted" from "no term").
    pub(super) fn add(&mut self, group: u8, key: &Arc<str>, n: i64) {
        let Some(value) = self.node.label(key) else { return };
        let slot = slot(self.slots, self.topology, group, key);
        if let Some(item) = self.items.iter_mut().find(|i| i.slot == slot) {
            item.n += n;
            return;
        }
        let domain = self.topology.intern(self.slots[slot as usize].topology_key, value);
        self.items.push(Item { slot, domain, n });
    }
}

/// Every node's contribution for one key, and their sums.
#[derive(Debug)]
pub(super) struct Entry<K> {
    key: K,
    /// The pass that last used it.
    used: u64,
    /// By node position: the generation the contribution was computed at.
    generations: Vec<u64>,
    /// By node position.
    contributions: Vec<Contribution>,
    slots: Vec<Slot>,
    /// Per group, the number of non-zero counts.
    nonzero: [usize; GROUPS],
    /// The number of nodes with a contribution (some key counted).
    nodes: usize,
}

impl<K> Entry<K> {
    fn new(key: K) -> Self {
        Self {
            key,
            used: 0,
            generations: Vec::new(),
            contributions: Vec::new(),
            slots: Vec::new(),
            nonzero: [0; GROUPS],
            nodes: 0,
        }
    }

    /// The sums of one group, as a cycle state holds them (read with the
    /// rows of the same pass, synced after the entry's refresh).
    pub(super) fn counts(&self, group: u8, topology: &Topology) -> TopologyCounts {
        let keys = self.slots.iter().filter(|s| s.group == group).map(|s| KeyArray {
            key: s.key.clone(),
            column: s.topology_key,
            domains: topology.domains(s.topology_key).clone(),
            counts: s.counts.clone(),
        });
        TopologyCounts::from_arrays(keys, self.nonzero[group as usize])
    }

    /// Whether some node counted some key (upstream PreScore: some node's
    /// score map is not empty).
    pub(super) fn any_node_counted(&self) -> bool {
        self.nodes > 0
    }

    /// Brings the entry up to date with the nodes of `lister`.
    fn refresh(
        &mut self,
        topology: &mut Topology,
        lister: &dyn NodeInfoLister,
        contribute: &mut dyn FnMut(&mut Sink<'_>),
    ) {
        let list = lister.list();
        let generations = lister.generations();
        debug_assert_eq!(list.len(), generations.len());
        let n = list.len();
        let Entry { generations: seen, contributions, slots, nonzero, nodes, .. } = self;
        if contributions.len() > n {
            for c in contributions.drain(n..) {
                apply(slots, nonzero, &c, -1);
                *nodes -= usize::from(!c.is_empty());
            }
            seen.truncate(n);
        }
        seen.resize(n, UNSEEN);
        contributions.resize_with(n, Contribution::new);
        let mut fresh = Contribution::new();
        for start in (0..n).step_by(RUN) {
            let end = (start + RUN).min(n);
            if seen[start..end] == generations[start..end] {
                continue;
            }
            for i in start..end {
                if seen[i] == generations[i] {
                    continue;
                }
                fresh.clear();
                contribute(&mut Sink { node: &list[i], topology, slots, items: &mut fresh });
                let old = &mut contributions[i];
                if *old != fresh {
                    apply(slots, nonzero, old, -1);
                    apply(slots, nonzero, &fresh, 1);
                    *nodes = *nodes - usize::from(!old.is_empty()) + usize::from(!fresh.is_empty());
                    std::mem::swap(old, &mut fresh);
                }
                seen[i] = generations[i];
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        let spilled: usize = self
            .contributions
            .iter()
            .filter(|c| c.spilled())
            .map(|c| c.capacity() * size_of::<Item>())
            .sum();
        self.generations.capacity() * size_of::<u64>()
            + self.contributions.capacity() * size_of::<Contribution>()
            + spilled
            + self.slots.iter().map(|s| s.counts.capacity() * size_of::<i64>()).sum::<usize>()
    }
}

/// Adds `sign` times a contribution to the sums.
fn apply(slots: &mut [Slot], nonzero: &mut [usize; GROUPS], c: &Contribution, sign: i64) {
    for item in c {
        if item.n == 0 {
            continue;
        }
        let slot = &mut slots[item.slot as usize];
        // Copied only if a cycle state still reads the previous sums.
        let counts = Arc::make_mut(&mut slot.counts);
        let d = item.domain as usize;
        if counts.len() <= d {
            counts.resize(d + 1, 0);
        }
        let before = counts[d];
        counts[d] += sign * item.n;
        let nonzero = &mut nonzero[slot.group as usize];
        match (before, counts[d]) {
            (0, _) => *nonzero += 1,
            (_, 0) => *nonzero -= 1,
            _ => {}
        }
    }
}

/// The entries of one kind of count.
#[derive(Debug)]
pub(super) struct Memo<K> {
    entries: Vec<Entry<K>>,
}

impl<K> Default for Memo<K> {
    fn default() -> Self {
        Self { entries: Vec::new() }
    }
}

impl<K> Memo<K> {
    /// The entry whose key `is` the incoming pod's (made with `key` and
    /// replacing the least recently used one when there is none), brought up
    /// to date with `lister`: `contribute` computes a node's contribution.
    /// The entry has sums for the `(group, topology key)` pairs of
    /// `declared`, even when nothing counts there.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn refresh<'m, 'k>(
        &'m mut self,
        pass: u64,
        topology: &mut Topology,
        lister: &dyn NodeInfoLister,
        is: impl Fn(&K) -> bool,
        key: impl FnOnce() -> K,
        declared: impl IntoIterator<Item = (u8, &'k Arc<str>)>,
        mut contribute: impl FnMut(&mut Sink<'_>),
    ) -> &'m Entry<K> {
        let i = match self.entries.iter().position(|e| is(&e.key)) {
            Some(i) => i,
            None if self.entries.len() < ENTRIES => {
                self.entries.push(Entry::new(key()));
                self.entries.len() - 1
            }
            None => {
                let (i, _) = self
                    .entries
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| e.used)
                    .expect("ENTRIES > 0");
                self.entries[i] = Entry::new(key());
                i
            }
        };
        let e = &mut self.entries[i];
        e.used = pass;
        for (group, key) in declared {
            slot(&mut e.slots, topology, group, key);
        }
        e.refresh(topology, lister, &mut contribute);
        e
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.entries.iter().map(Entry::heap_bytes).sum::<usize>()
            + self.entries.capacity() * size_of::<Entry<K>>()
    }
}
