//! Counts per topology pair `(topologyKey, value)`: upstream's
//! `topologyToMatchedTermCount` (PreFilter) and `scoreMap` (PreScore), as
//! the cycle state holds them.
//!
//! The values a topology key takes on nodes are interned once ([`Domains`]:
//! value → dense id, shared by the plugin's memo and every cycle state), and
//! the counts of one key are a plain array indexed by that id. A cycle state
//! takes the memo's arrays by `Arc`; the memo copies an array (a `memcpy`,
//! 40 KB for 5,000 hostnames) only when it must change it while an earlier
//! state still holds it. A lookup for a node costs one label lookup and one
//! hash of the value, with no allocation: Filter and Score run per node.
//! Values are hashed with FxHash (rustc's), several times cheaper than
//! SipHash on short label values.
//!
//! As upstream's maps delete an entry whose count returns to 0, an entry
//! here exists when its count is not 0; [`TopologyCounts::is_empty`] is
//! upstream's `len(map) == 0`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use smallvec::SmallVec;

use convoy_api::NodeInfo;

/// rustc's FxHash: one multiply per 8 bytes. Not DoS-resistant, which does
/// not matter for node label values.
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

/// The values one topology key takes on nodes, each with a dense id (in the
/// order first seen). Ids are never reused: counts indexed by them stay
/// valid as values are added. The memo drops all of them when stale values
/// (of deleted or relabelled nodes) make up most of them.
#[derive(Debug, Clone, Default)]
pub(super) struct Domains {
    ids: HashMap<Arc<str>, u32, BuildHasherDefault<FxHasher>>,
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

    /// Approximate heap bytes (for the memory report of the memo).
    pub(super) fn heap_bytes(&self) -> usize {
        let strings: usize = self.values.iter().map(|v| v.len() + 16).sum();
        strings
            + self.values.capacity() * size_of::<Arc<str>>()
            + self.ids.capacity() * (size_of::<(Arc<str>, u32)>() + 1)
    }
}

/// The counts of one topology key, by value.
#[derive(Debug, Clone)]
struct KeyCounts {
    key: Arc<str>,
    domains: Arc<Domains>,
    /// By domain id; ids past the end count 0.
    counts: Arc<Vec<i64>>,
    /// Values not in `domains` (a PreFilter extension on a node whose value
    /// the memo had not seen); non-zero counts only.
    extra: Vec<(Box<str>, i64)>,
}

impl KeyCounts {
    fn get(&self, value: &str) -> i64 {
        match self.domains.id(value) {
            Some(id) => self.counts.get(id as usize).copied().unwrap_or(0),
            None => self.extra.iter().find(|(v, _)| &**v == value).map_or(0, |e| e.1),
        }
    }

    /// Adds `n` at `value`; returns the count before and after.
    fn add(&mut self, value: &str, n: i64) -> (i64, i64) {
        match self.domains.id(value) {
            Some(id) => {
                let counts = Arc::make_mut(&mut self.counts);
                if counts.len() <= id as usize {
                    counts.resize(id as usize + 1, 0);
                }
                let c = &mut counts[id as usize];
                let before = *c;
                *c += n;
                (before, *c)
            }
            None => match self.extra.iter().position(|(v, _)| &**v == value) {
                Some(i) => {
                    let before = self.extra[i].1;
                    self.extra[i].1 += n;
                    let after = self.extra[i].1;
                    if after == 0 {
                        self.extra.swap_remove(i);
                    }
                    (before, after)
                }
                None => {
                    if n != 0 {
                        self.extra.push((Box::from(value), n));
                    }
                    (0, n)
                }
            },
        }
    }
}

/// `(topologyKey, value) -> count`, entries with count 0 absent.
#[derive(Debug, Clone, Default)]
pub(super) struct TopologyCounts {
    keys: SmallVec<[KeyCounts; 2]>,
    /// The number of entries whose count is not 0 (upstream `len(map)`).
    nonzero: usize,
}

impl TopologyCounts {
    /// Counts made of a memo's arrays: `(key, its domains, counts by domain
    /// id)` for each key, and the number of non-zero counts among them.
    pub(super) fn from_arrays(
        keys: impl IntoIterator<Item = (Arc<str>, Arc<Domains>, Arc<Vec<i64>>)>,
        nonzero: usize,
    ) -> Self {
        let keys = keys
            .into_iter()
            .map(|(key, domains, counts)| KeyCounts { key, domains, counts, extra: Vec::new() })
            .collect();
        Self { keys, nonzero }
    }

    /// The number of pairs (upstream `len(map)`).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.nonzero
    }

    /// Every pair with a non-zero count, in no particular order.
    #[cfg(test)]
    pub(super) fn pairs(&self) -> Vec<(&str, &str, i64)> {
        let mut out = Vec::new();
        for k in &self.keys {
            for (id, &n) in k.counts.iter().enumerate() {
                if n != 0 {
                    out.push((&*k.key, k.domains.value(id as u32), n));
                }
            }
            out.extend(k.extra.iter().map(|(v, n)| (&*k.key, &**v, *n)));
        }
        out
    }

    /// Whether no pair is held (upstream `len(map) == 0`).
    pub(super) fn is_empty(&self) -> bool {
        self.nonzero == 0
    }

    fn key(&self, key: &str) -> Option<&KeyCounts> {
        self.keys.iter().find(|k| &*k.key == key)
    }

    /// Upstream `topologyToMatchedTermCount.update`: adds `n` at `(key,
    /// node's value of key)` when the node has the label; the entry is
    /// gone when it reaches 0.
    pub(super) fn update(&mut self, node: &NodeInfo, key: &Arc<str>, n: i64) {
        let Some(value) = node.label(key) else { return };
        let i = match self.keys.iter().position(|k| k.key == *key) {
            Some(i) => i,
            None => {
                self.keys.push(KeyCounts {
                    key: key.clone(),
                    domains: Arc::default(),
                    counts: Arc::default(),
                    extra: Vec::new(),
                });
                self.keys.len() - 1
            }
        };
        match self.keys[i].add(value, n) {
            (0, after) if after != 0 => self.nonzero += 1,
            (before, 0) if before != 0 => self.nonzero -= 1,
            _ => {}
        }
    }

    /// The count at `(key, value)` (0 when absent).
    pub(super) fn get(&self, key: &str, value: &str) -> i64 {
        self.key(key).map_or(0, |k| k.get(value))
    }

    /// Whether some label `(k, v)` of the node has a positive count
    /// (upstream iterates the node's labels; iterating the few keys held
    /// here and looking each up on the node gives the same answer).
    pub(super) fn any_positive_on(&self, node: &NodeInfo) -> bool {
        self.keys.iter().any(|k| node.label(&k.key).is_some_and(|v| k.get(v) > 0))
    }

    /// Upstream `Score`: the sum, over the keys held that the node has, of
    /// the count at the node's value.
    pub(super) fn sum_on(&self, node: &NodeInfo) -> i64 {
        self.keys.iter().filter_map(|k| node.label(&k.key).map(|v| k.get(v))).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::testing::NodeBuilder;

    #[test]
    fn update_and_lookups() {
        let zone: Arc<str> = Arc::from("zone");
        let host: Arc<str> = Arc::from("host");
        let a = NodeBuilder::new("a").label("zone", "z1").label("host", "a").info();
        let b = NodeBuilder::new("b").label("zone", "z2").info();
        let bare = NodeBuilder::new("bare").info();
        let mut domains = Domains::default();
        assert_eq!((domains.intern("z1"), domains.intern("z2"), domains.intern("z1")), (0, 1, 0));
        let mut c = TopologyCounts::from_arrays(
            [(zone.clone(), Arc::new(domains), Arc::new(vec![2, 1]))],
            2,
        );
        assert!(!c.is_empty() && c.any_positive_on(&a) && !c.any_positive_on(&bare));
        assert_eq!((c.len(), c.get("zone", "z1"), c.get("zone", "z3")), (2, 2, 0));
        c.update(&a, &host, 1);
        c.update(&bare, &host, 1);
        assert_eq!(c.len(), 3, "a value outside the domains");
        assert_eq!(c.sum_on(&a), 3);
        c.update(&a, &host, -1);
        c.update(&a, &zone, -2);
        assert_eq!(c.len(), 1, "entries reaching 0 are gone");
        assert_eq!(c.sum_on(&a), 0);
        c.update(&b, &zone, -1);
        assert!(c.is_empty());
        assert!(c.pairs().is_empty());
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
