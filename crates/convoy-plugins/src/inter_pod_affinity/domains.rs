//! Topology values as dense ids, and every node's ids looked up once.
//!
//! [`Domains`] interns the values one topology key takes on nodes (value →
//! id, in the order first seen); counts of that key are then arrays indexed
//! by id. [`NodeRows`] holds, for every node of the snapshot, its id for each
//! topology key the plugin met, found by the address of the node's `Node`
//! object: Filter and Score, which run per node, read a node's counts with
//! one hash of a pointer and two array reads instead of a label lookup (a
//! walk of the node's label map comparing strings) and a hash of the value.
//!
//! A `Node` object is immutable and shared (`Arc`): an update of the node
//! replaces it. The rows hold the `Arc` of every node object they describe,
//! so that no other object can take its address while they do; a lookup
//! checks that the row found still holds the same object. Any node info
//! referring to that object (the snapshot's, or a copy made for a what-if)
//! has its labels, so the ids are right for it; a node info whose object has
//! no row (none, a node the last pass did not see) is looked up by label.
//!
//! Filter and Score visit the snapshot's nodes in list order, so the row of
//! the next node is most often the one after the last row found: a
//! [`RowHint`] tries it first (one pointer comparison) before hashing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::Node;

use convoy_api::{NodeInfo, NodeInfoLister};

/// rustc's FxHash: one multiply per 8 bytes. Not DoS-resistant, which does
/// not matter for node label values and addresses.
#[derive(Default, Clone, Copy)]
pub(super) struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxBuild = BuildHasherDefault<FxHasher>;

/// The values one topology key takes on nodes, each with a dense id (in the
/// order first seen). Ids are never reused: counts indexed by them stay
/// valid as values are added. The memo drops all of them when stale values
/// (of deleted or relabelled nodes) make up most of them.
#[derive(Debug, Clone, Default)]
pub(super) struct Domains {
    ids: HashMap<Arc<str>, u32, FxBuild>,
    values: Vec<Arc<str>>,
}

impl Domains {
    /// The id of a value, if it was interned.
    pub(super) fn id(&self, value: &str) -> Option<u32> {
        self.ids.get(value).copied()
    }

    /// The id of a value, interning it if new.
    pub(super) fn intern(&mut self, value: &str) -> u32 {
        if let Some(&id) = self.ids.get(value) {
            return id;
        }
        let id = u32::try_from(self.values.len()).expect("fewer than 2^32 topology values");
        let value: Arc<str> = Arc::from(value);
        self.ids.insert(value.clone(), id);
        self.values.push(value);
        id
    }

    /// The value of an id.
    #[cfg(test)]
    pub(super) fn value(&self, id: u32) -> &str {
        &self.values[id as usize]
    }

    /// The number of values interned.
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// Approximate heap bytes.
    pub(super) fn heap_bytes(&self) -> usize {
        let strings: usize = self.values.iter().map(|v| v.len() + 16).sum();
        strings
            + self.values.capacity() * size_of::<Arc<str>>()
            + self.ids.capacity() * (size_of::<(Arc<str>, u32)>() + 1)
    }
}

/// The interned values of every topology key the plugin met.
#[derive(Debug, Default)]
pub(super) struct Topology {
    keys: Vec<(Arc<str>, Arc<Domains>)>,
}

impl Topology {
    /// The index of a key, added if new.
    pub(super) fn key_index(&mut self, key: &Arc<str>) -> u32 {
        let i = match self.keys.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.keys.push((key.clone(), Arc::default()));
                self.keys.len() - 1
            }
        };
        u32::try_from(i).expect("fewer than 2^32 topology keys")
    }

    /// The id of a key's value, interned if new.
    pub(super) fn intern(&mut self, key: u32, value: &str) -> u32 {
        let domains = &mut self.keys[key as usize].1;
        match domains.id(value) {
            Some(id) => id,
            // Copied only if a cycle state still reads the old values.
            None => Arc::make_mut(domains).intern(value),
        }
    }

    /// A key's values.
    pub(super) fn domains(&self, key: u32) -> &Arc<Domains> {
        &self.keys[key as usize].1
    }

    /// Whether some key holds more than twice as many values as there are
    /// nodes (plus `slack`): the stale ones are worth dropping.
    pub(super) fn too_large(&self, nodes: usize, slack: usize) -> bool {
        self.keys.iter().any(|(_, d)| d.len() > 2 * nodes + slack)
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.keys.iter().map(|(k, d)| k.len() + d.heap_bytes()).sum()
    }
}

/// The id of a node without the key's label.
const NO_VALUE: u32 = u32::MAX;

/// Every node's value ids, by row (a node's position in the list of the
/// last pass), found by the address of the node's `Node` object.
#[derive(Debug, Clone, Default)]
pub(super) struct NodeRows {
    by_node: HashMap<usize, u32, FxBuild>,
    /// By row: the node object described (kept alive: its address cannot be
    /// another object's while held here).
    nodes: Vec<Option<Arc<Node>>>,
    /// By topology key, by row: the node's value id, or [`NO_VALUE`].
    columns: Vec<Vec<u32>>,
}

fn address(node: &Arc<Node>) -> usize {
    Arc::as_ptr(node) as usize
}

fn labels_of(node: &Node) -> Option<&convoy_api::Labels> {
    node.metadata.labels.as_ref()
}

impl NodeRows {
    /// The row describing this node's object, if any: the row after the
    /// hint's last one if it is, else the one found by address.
    pub(super) fn row_after(&self, node: &NodeInfo, hint: &RowHint) -> Option<usize> {
        let n = node.node()?;
        let next = hint.0.load(Ordering::Relaxed) as usize;
        let row = match self.nodes.get(next) {
            Some(Some(m)) if Arc::ptr_eq(m, n) => next,
            _ => self.row(node)?,
        };
        hint.0.store(u32::try_from(row + 1).unwrap_or(0), Ordering::Relaxed);
        Some(row)
    }

    /// The row describing this node's object, if any.
    pub(super) fn row(&self, node: &NodeInfo) -> Option<usize> {
        let n = node.node()?;
        let &row = self.by_node.get(&address(n))?;
        let row = row as usize;
        // The row's object is alive, so an equal address is the same object.
        self.nodes.get(row)?.as_ref().is_some_and(|m| Arc::ptr_eq(m, n)).then_some(row)
    }

    /// The value id of `key` at `row`; `None` when the node does not have
    /// the label. `key` must have a column (see [`RowsMemo::sync`]).
    pub(super) fn value(&self, key: u32, row: usize) -> Option<u32> {
        let id = self.columns[key as usize][row];
        (id != NO_VALUE).then_some(id)
    }

    fn heap_bytes(&self) -> usize {
        self.by_node.capacity() * (size_of::<(usize, u32)>() + 1)
            + self.nodes.capacity() * size_of::<Option<Arc<Node>>>()
            + self.columns.iter().map(|c| c.capacity() * size_of::<u32>()).sum::<usize>()
    }
}

/// The row after the last one a cycle's Filter or Score found: where the
/// next node most likely is. Only a guess, checked before use; relaxed
/// atomic, so that Filter may run on several threads.
#[derive(Debug, Default)]
pub(super) struct RowHint(AtomicU32);

impl Clone for RowHint {
    fn clone(&self) -> Self {
        Self(AtomicU32::new(self.0.load(Ordering::Relaxed)))
    }
}

/// The node rows kept between cycles, and the generation of each position
/// when its row was last checked.
#[derive(Debug, Default)]
pub(super) struct RowsMemo {
    rows: Arc<NodeRows>,
    generations: Vec<u64>,
}

impl RowsMemo {
    /// Brings the rows up to date with `lister` and with every key of
    /// `topology`. Only positions whose generation changed are looked at;
    /// the rows change (and are copied, if a cycle state still holds them)
    /// only when a node object changed or a key is new.
    pub(super) fn sync(
        &mut self,
        topology: &mut Topology,
        lister: &dyn NodeInfoLister,
    ) -> Arc<NodeRows> {
        let list = lister.list();
        let generations = lister.generations();
        let n = list.len();
        let old = self.generations.len();
        // Positions whose node object is not the row's.
        let mut stale: Vec<usize> = Vec::new();
        for (start, chunk) in generations.chunks(32).enumerate() {
            let start = start * 32;
            let end = start + chunk.len();
            if end <= old && self.generations[start..end] == *chunk {
                continue;
            }
            for i in start..end {
                if i < old && self.generations[i] == generations[i] {
                    continue;
                }
                let now = list[i].node();
                let had = self.rows.nodes.get(i).and_then(Option::as_ref);
                let same = match (now, had) {
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    (None, None) => i < self.rows.nodes.len(),
                    _ => false,
                };
                if !same {
                    stale.push(i);
                }
            }
        }
        self.generations.clear();
        self.generations.extend_from_slice(generations);
        let new_keys = topology.keys.len() > self.rows.columns.len();
        if stale.is_empty() && !new_keys && self.rows.nodes.len() == n {
            return self.rows.clone();
        }
        let rows = Arc::make_mut(&mut self.rows);
        // Rows past the end, and the stale ones, forget their objects first
        // (an object may move from one row to another).
        for i in (n..rows.nodes.len()).chain(stale.iter().copied()) {
            if let Some(old) = rows.nodes.get_mut(i).and_then(Option::take) {
                let a = address(&old);
                if rows.by_node.get(&a) == Some(&(i as u32)) {
                    rows.by_node.remove(&a);
                }
            }
        }
        rows.nodes.resize(n, None);
        for c in &mut rows.columns {
            c.resize(n, NO_VALUE);
        }
        for &i in &stale {
            let node = list[i].node().cloned();
            if let Some(node) = &node {
                rows.by_node.insert(address(node), u32::try_from(i).expect("< 2^32 nodes"));
            }
            for (k, column) in rows.columns.iter_mut().enumerate() {
                column[i] = value_id(topology, k, node.as_deref());
            }
            rows.nodes[i] = node;
        }
        // Columns of new keys.
        for k in rows.columns.len()..topology.keys.len() {
            let column = rows.nodes.iter().map(|n| value_id(topology, k, n.as_deref())).collect();
            rows.columns.push(column);
        }
        self.rows.clone()
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.rows.heap_bytes() + self.generations.capacity() * size_of::<u64>()
    }
}

/// A node's value id for key `k` (interned), or [`NO_VALUE`].
fn value_id(topology: &mut Topology, k: usize, node: Option<&Node>) -> u32 {
    let key = topology.keys[k].0.clone();
    match node.and_then(labels_of).and_then(|l| l.get(&*key)) {
        Some(v) => topology.intern(k as u32, v),
        None => NO_VALUE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::NodeList;
    use convoy_api::testing::NodeBuilder;

    fn node(name: &str, zone: Option<&str>) -> Arc<NodeInfo> {
        let b = NodeBuilder::new(name).label("host", name);
        Arc::new(match zone {
            Some(z) => b.label("zone", z).info(),
            None => b.info(),
        })
    }

    /// After every sync, each node of the list has its position as row and
    /// the ids of its values.
    fn check(rows: &NodeRows, topology: &Topology, list: &NodeList) {
        let hint = RowHint::default();
        for (i, n) in list.list().iter().enumerate().chain(list.list().iter().enumerate().rev()) {
            assert_eq!(rows.row(n), Some(i), "{}", n.name());
            assert_eq!(rows.row_after(n, &hint), Some(i), "{}, with the hint", n.name());
            for k in 0..topology.keys.len() {
                let (key, domains) = &topology.keys[k];
                let want = n.label(key).map(|v| domains.id(v).unwrap());
                assert_eq!(rows.value(k as u32, i), want, "{} {key}", n.name());
            }
        }
    }

    #[test]
    fn rows_follow_the_list() {
        let mut topology = Topology::default();
        topology.key_index(&Arc::from("zone"));
        let mut memo = RowsMemo::default();
        let mut nodes = vec![node("a", Some("z1")), node("b", Some("z2")), node("c", None)];
        let sync = |memo: &mut RowsMemo, topology: &mut Topology, nodes: &[Arc<NodeInfo>]| {
            let list = NodeList::new(nodes.to_vec());
            let rows = memo.sync(topology, &list);
            check(&rows, topology, &list);
            rows
        };
        let first = sync(&mut memo, &mut topology, &nodes);
        // Pods changed: the same rows, not copied.
        let mut pod_added = (*nodes[0]).clone();
        pod_added.add_pod(convoy_api::testing::PodBuilder::new("p").node("a").info());
        nodes[0] = Arc::new(pod_added);
        let again = sync(&mut memo, &mut topology, &nodes);
        assert!(Arc::ptr_eq(&first, &again));
        // Relabelled, moved, removed, added; a new key.
        let mut relabelled = (*nodes[1]).clone();
        relabelled.set_node(Arc::new(NodeBuilder::new("b").label("zone", "z3").build()));
        nodes[1] = Arc::new(relabelled);
        nodes.swap(0, 2);
        sync(&mut memo, &mut topology, &nodes);
        topology.key_index(&Arc::from("host"));
        nodes.remove(1);
        nodes.insert(0, node("d", Some("z1")));
        nodes.push(node("e", None));
        sync(&mut memo, &mut topology, &nodes);
        nodes.truncate(1);
        sync(&mut memo, &mut topology, &nodes);
        // A node object without a row.
        let list = NodeList::new(nodes.clone());
        let rows = memo.sync(&mut topology, &list);
        let copy = node("d", Some("z1"));
        assert_eq!(rows.row(&copy), None);
    }

    #[test]
    fn fx_hash_distinguishes_values() {
        use std::hash::BuildHasher;
        let b = FxBuild::default();
        let h = |s: &str| b.hash_one(s);
        assert_ne!(h("a"), h("b"));
        assert_ne!(h("node-123456789"), h("node-123456780"));
        assert_eq!(h("zone-a"), h("zone-a"));
    }
}
