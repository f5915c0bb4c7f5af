//! Counts per topology pair `(topologyKey, value)`: upstream's
//! `topologyToMatchedTermCount` (PreFilter) and `scoreMap` (PreScore), as
//! the cycle state holds them.
//!
//! The counts of one key are an array indexed by value id ([`Domains`]),
//! taken from the plugin's memo by `Arc`: the memo copies an array (a
//! `memcpy`, 40 KB for 5,000 hostnames) only when it must change it while an
//! earlier state still holds it. A node's count is found through its row
//! ([`NodeRows`]: two array reads), or, for a node without a row, by label
//! and value id; neither allocates (Filter and Score run per node).
//!
//! As upstream's maps delete an entry whose count returns to 0, an entry
//! here exists when its count is not 0; [`TopologyCounts::is_empty`] is
//! upstream's `len(map) == 0`.

use std::sync::Arc;

use smallvec::SmallVec;

use convoy_api::NodeInfo;

use super::domains::{Domains, NodeRows, RowHint};

/// A key without a column in the rows (added by a PreFilter extension).
const NO_COLUMN: u32 = u32::MAX;

/// The counts of one topology key, by value.
#[derive(Debug, Clone)]
struct KeyCounts {
    key: Arc<str>,
    /// The key's column in [`NodeRows`] (its index in the memo's topology),
    /// or [`NO_COLUMN`].
    column: u32,
    domains: Arc<Domains>,
    /// By value id; ids past the end count 0.
    counts: Arc<Vec<i64>>,
    /// Values not in `domains` (a PreFilter extension on a node whose value
    /// the memo had not seen); non-zero counts only.
    extra: Vec<(Box<str>, i64)>,
}

impl KeyCounts {
    fn at_id(&self, id: u32) -> i64 {
        self.counts.get(id as usize).copied().unwrap_or(0)
    }

    fn at_value(&self, value: &str) -> i64 {
        match self.domains.id(value) {
            Some(id) => self.at_id(id),
            None => self.extra.iter().find(|(v, _)| &**v == value).map_or(0, |e| e.1),
        }
    }

    /// Adds `n` at `value`; returns the count before and after.
    fn add(&mut self, value: &str, n: i64) -> (i64, i64) {
        if let Some(id) = self.domains.id(value) {
            let counts = Arc::make_mut(&mut self.counts);
            let id = id as usize;
            if counts.len() <= id {
                counts.resize(id + 1, 0);
            }
            let before = counts[id];
            counts[id] += n;
            return (before, counts[id]);
        }
        match self.extra.iter().position(|(v, _)| &**v == value) {
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

/// Where a node's topology values are read: its row when the rows of the
/// counts' pass have one for it, else its labels.
pub(super) struct NodeValues<'a> {
    node: &'a NodeInfo,
    row: Option<(&'a NodeRows, usize)>,
}

impl<'a> NodeValues<'a> {
    /// `rows` must come from the pass that made the counts read with it.
    pub(super) fn new(rows: Option<&'a NodeRows>, node: &'a NodeInfo, hint: &RowHint) -> Self {
        Self { node, row: rows.and_then(|r| r.row_after(node, hint).map(|i| (r, i))) }
    }
}

/// One key's counts as the memo hands them over.
pub(super) struct KeyArray {
    pub(super) key: Arc<str>,
    pub(super) column: u32,
    pub(super) domains: Arc<Domains>,
    pub(super) counts: Arc<Vec<i64>>,
}

impl TopologyCounts {
    /// Counts made of a memo's arrays, with the number of non-zero counts
    /// among them.
    pub(super) fn from_arrays(keys: impl IntoIterator<Item = KeyArray>, nonzero: usize) -> Self {
        let keys = keys
            .into_iter()
            .map(|a| KeyCounts {
                key: a.key,
                column: a.column,
                domains: a.domains,
                counts: a.counts,
                extra: Vec::new(),
            })
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

    /// The index of a key's counts, if held.
    pub(super) fn key_index(&self, key: &str) -> Option<usize> {
        self.keys.iter().position(|k| &*k.key == key)
    }

    /// The count at the node's value of `k`; `None` when the node does not
    /// have the label.
    fn on(k: &KeyCounts, at: &NodeValues<'_>) -> Option<i64> {
        if k.column != NO_COLUMN
            && let Some((rows, row)) = at.row
        {
            match rows.value(k.column, row) {
                None => return None,
                // A value the counts' ids cover (the rows were synced before
                // the counts were taken, so every value of a row is).
                Some(id) if (id as usize) < k.domains.len() => return Some(k.at_id(id)),
                Some(_) => {}
            }
        }
        at.node.label(&k.key).map(|v| k.at_value(v))
    }

    /// The count at `(key, node's value of key)`, `key` being held at index
    /// `i` (see [`key_index`](Self::key_index)) or not held (`None`, every
    /// count 0); `None` when the node does not have the label.
    pub(super) fn on_node(&self, i: Option<usize>, key: &str, at: &NodeValues<'_>) -> Option<i64> {
        match i {
            Some(i) => Self::on(&self.keys[i], at),
            None => at.node.label(key).map(|_| 0),
        }
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
                    column: NO_COLUMN,
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

    /// Whether some label `(k, v)` of the node has a positive count
    /// (upstream iterates the node's labels; iterating the few keys held
    /// here and looking each up on the node gives the same answer).
    pub(super) fn any_positive_on(&self, at: &NodeValues<'_>) -> bool {
        self.keys.iter().any(|k| Self::on(k, at).is_some_and(|c| c > 0))
    }

    /// Upstream `Score`: the sum, over the keys held that the node has, of
    /// the count at the node's value.
    pub(super) fn sum_on(&self, at: &NodeValues<'_>) -> i64 {
        self.keys.iter().filter_map(|k| Self::on(k, at)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inter_pod_affinity::domains::{RowsMemo, Topology};
    use convoy_api::testing::NodeBuilder;
    use convoy_api::{NodeInfoLister, NodeList};

    #[test]
    fn update_and_lookups() {
        let zone: Arc<str> = Arc::from("zone");
        let host: Arc<str> = Arc::from("host");
        let list = NodeList::of([
            NodeBuilder::new("a").label("zone", "z1").label("host", "a").info(),
            NodeBuilder::new("b").label("zone", "z2").info(),
            NodeBuilder::new("bare").info(),
        ]);
        let mut topology = Topology::default();
        let column = topology.key_index(&zone);
        let rows = RowsMemo::default().sync(&mut topology, &list);
        let domains = topology.domains(column).clone();
        assert_eq!((domains.id("z1"), domains.id("z2")), (Some(0), Some(1)));
        let key = KeyArray { key: zone.clone(), column, domains, counts: Arc::new(vec![2, 1]) };
        let mut c = TopologyCounts::from_arrays([key], 2);
        let [a, b, bare] = [0, 1, 2].map(|i| &list.list()[i]);
        let hint = RowHint::default();
        let at = |n| NodeValues::new(Some(&rows), n, &hint);
        // A copy of a node (a what-if) has no row: looked up by label.
        let copy = NodeBuilder::new("a").label("zone", "z1").info();
        assert!(at(&copy).row.is_none() && at(a).row.is_some());
        assert!(!c.is_empty() && c.any_positive_on(&at(a)) && !c.any_positive_on(&at(bare)));
        assert!(c.any_positive_on(&at(&copy)));
        let z = c.key_index("zone");
        assert_eq!(
            (c.len(), c.on_node(z, "zone", &at(a)), c.on_node(z, "zone", &at(bare))),
            (2, Some(2), None)
        );
        assert_eq!(c.key_index("host"), None);
        assert_eq!(
            (c.on_node(None, "host", &at(a)), c.on_node(None, "host", &at(b))),
            (Some(0), None)
        );
        c.update(a, &host, 1);
        c.update(bare, &host, 1);
        assert_eq!(c.len(), 3, "a key and value outside the memo's");
        assert_eq!(c.sum_on(&at(a)), 3);
        c.update(a, &host, -1);
        c.update(a, &zone, -2);
        assert_eq!(c.len(), 1, "entries reaching 0 are gone");
        assert_eq!(c.sum_on(&at(a)), 0);
        c.update(b, &zone, -1);
        assert!(c.is_empty());
        assert!(c.pairs().is_empty());
    }
}
