//! Counts per topology pair `(topologyKey, value)`: upstream's
//! `topologyToMatchedTermCount` (PreFilter) and `scoreMap` (PreScore).
//!
//! Kept as one small map of values per distinct topology key (a pod's terms
//! use one or two keys), so that a lookup for a node costs one label lookup
//! and one hash of the value, with no allocation: Filter and Score run per
//! node. Values are hashed with FxHash (rustc's), which is several times
//! cheaper than SipHash on short label values.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use convoy_api::NodeInfo;

/// rustc's FxHash: one multiply per 8 bytes. Not DoS-resistant, which does
/// not matter for node label values within one cycle.
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

type ValueCounts = HashMap<Box<str>, i64, BuildHasherDefault<FxHasher>>;

/// `(topologyKey, value) -> count`.
#[derive(Debug, Clone, Default)]
pub(super) struct TopologyCounts {
    by_key: Vec<(Arc<str>, ValueCounts)>,
}

impl TopologyCounts {
    /// The number of pairs (upstream `len(map)`).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_key.iter().map(|(_, m)| m.len()).sum()
    }

    /// Every pair with its count, in no particular order.
    #[cfg(test)]
    pub(super) fn pairs(&self) -> impl Iterator<Item = (&str, &str, i64)> {
        self.by_key.iter().flat_map(|(k, m)| m.iter().map(move |(v, &n)| (&**k, &**v, n)))
    }

    /// Whether no pair is held.
    pub(super) fn is_empty(&self) -> bool {
        self.by_key.iter().all(|(_, m)| m.is_empty())
    }

    /// The number of topology keys with a map (upstream `len(scoreMap)`).
    pub(super) fn keys(&self) -> usize {
        self.by_key.len()
    }

    fn values_mut(&mut self, key: &Arc<str>) -> &mut ValueCounts {
        let i = match self.by_key.iter().position(|(k, _)| Arc::ptr_eq(k, key) || k == key) {
            Some(i) => i,
            None => {
                self.by_key.push((key.clone(), ValueCounts::default()));
                self.by_key.len() - 1
            }
        };
        &mut self.by_key[i].1
    }

    /// Adds `n` at `(key, value)`, keeping entries that reach 0 (upstream's
    /// PreFilter merge and PreScore sums).
    pub(super) fn add(&mut self, key: &Arc<str>, value: &str, n: i64) {
        let values = self.values_mut(key);
        match values.get_mut(value) {
            Some(c) => *c += n,
            None => {
                values.insert(Box::from(value), n);
            }
        }
    }

    /// Upstream `topologyToMatchedTermCount.update`: adds `n` at `(key,
    /// node's value of key)` when the node has the label, and deletes the
    /// entry when it reaches 0.
    pub(super) fn update(&mut self, node: &NodeInfo, key: &Arc<str>, n: i64) {
        let Some(value) = node.label(key) else { return };
        let values = self.values_mut(key);
        let c = values.entry(Box::from(value)).or_insert(0);
        *c += n;
        if *c == 0 {
            values.remove(value);
        }
    }

    /// The count at `(key, value)` (0 when absent).
    pub(super) fn get(&self, key: &str, value: &str) -> i64 {
        self.by_key
            .iter()
            .find(|(k, _)| &**k == key)
            .and_then(|(_, m)| m.get(value))
            .copied()
            .unwrap_or(0)
    }

    /// Whether some label `(k, v)` of the node has a positive count
    /// (upstream iterates the node's labels; iterating the few keys held
    /// here and looking each up on the node gives the same answer).
    pub(super) fn any_positive_on(&self, node: &NodeInfo) -> bool {
        self.by_key
            .iter()
            .any(|(k, m)| node.label(k).and_then(|v| m.get(v)).is_some_and(|&c| c > 0))
    }

    /// Upstream `Score`: the sum, over the keys held that the node has, of
    /// the count at the node's value.
    pub(super) fn sum_on(&self, node: &NodeInfo) -> i64 {
        self.by_key
            .iter()
            .filter_map(|(k, m)| node.label(k).map(|v| m.get(v).copied().unwrap_or(0)))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::testing::NodeBuilder;

    #[test]
    fn add_update_and_lookups() {
        let zone: Arc<str> = Arc::from("zone");
        let host: Arc<str> = Arc::from("host");
        let a = NodeBuilder::new("a").label("zone", "z1").label("host", "a").info();
        let bare = NodeBuilder::new("bare").info();
        let mut c = TopologyCounts::default();
        assert!(c.is_empty() && !c.any_positive_on(&a));
        c.add(&zone, "z1", 2);
        c.add(&Arc::from("zone"), "z2", 1);
        assert_eq!((c.len(), c.keys()), (2, 1));
        assert_eq!(c.get("zone", "z1"), 2);
        assert!(c.any_positive_on(&a) && !c.any_positive_on(&bare));
        c.update(&a, &host, 1);
        c.update(&bare, &host, 1);
        assert_eq!((c.len(), c.keys()), (3, 2));
        assert_eq!(c.sum_on(&a), 3);
        c.update(&a, &host, -1);
        c.update(&a, &zone, -2);
        assert_eq!(c.len(), 1, "entries reaching 0 are deleted");
        assert_eq!(c.sum_on(&a), 0);
        c.add(&zone, "z2", -1);
        assert_eq!(c.len(), 1, "add keeps zero entries");
    }

    #[test]
    fn fx_hash_distinguishes_values() {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let b = BuildHasherDefault::<FxHasher>::default();
        let h = |s: &str| b.hash_one(s);
        assert_ne!(h("a"), h("b"));
        assert_ne!(h("node-123456789"), h("node-123456780"));
        assert_eq!(h("zone-a"), h("zone-a"));
    }
}
