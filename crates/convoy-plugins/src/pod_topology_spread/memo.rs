//! Per-node counts kept between scheduling cycles (the design is in the
//! plugin's module doc): one [`Memo`] per [`MemoKey`], synced to the
//! snapshot by generation, a few of them in [`Memos`].
//!
//! Per node position a memo keeps the generation counted, whether the node
//! has every key, and per constraint a [`Slot`]: the node's domain (interned
//! for every node that may count, so PreScore can read a feasible node's
//! domain even when a policy leaves it out), its matching pods, whether
//! they are in the domain's sum, and whether the node has the key. For
//! PreScore it also keeps each position's node address and the reverse
//! index. Per constraint and domain it keeps the [`Sums`] (shared with the
//! cycles' states) and how many slots name the domain (to drop dead ones).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Toleration;

use convoy_api::{NodeInfo, NodeInfoLister, PodInfo, Selector};

use super::common::{
    AddressHasher, Constraint, Domains, count_pods_match_selector, has_all_keys, node_labels,
};
use crate::helper::node_affinity::RequiredNodeAffinity;

/// How many memos the plugin keeps (least recently used evicted): enough
/// for a few templates alternating, each in PreFilter and PreScore.
pub(super) const MEMO_CAPACITY: usize = 8;

/// A slot's "the node does not count" domain.
const NONE: u32 = u32::MAX;

/// Which extension point a memo serves: which nodes count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    /// PreFilter: nodes with every topology key; every constraint counted.
    Filter,
    /// PreScore: nodes with every key if `require_all`; hostname
    /// constraints not counted (Score counts them on the node itself).
    Score {
        /// Nodes missing a key are left out.
        require_all: bool,
    },
}

/// What a constraint's per-node counts depend on.
#[derive(Debug, Clone, PartialEq)]
struct Spec {
    topology_key: Box<str>,
    selector: Selector,
    honor_node_affinity: bool,
    honor_node_taints: bool,
}

impl Spec {
    fn of(c: &Constraint) -> Self {
        Self {
            topology_key: c.topology_key.clone(),
            selector: c.selector.clone(),
            honor_node_affinity: c.honor_node_affinity,
            honor_node_taints: c.honor_node_taints,
        }
    }

    fn is(&self, c: &Constraint) -> bool {
        self.topology_key == c.topology_key
            && self.honor_node_affinity == c.honor_node_affinity
            && self.honor_node_taints == c.honor_node_taints
            && self.selector == c.selector
    }
}

/// One cycle's question: the constraints of a pod, for an extension point.
pub(super) struct Request<'a> {
    pub(super) purpose: Purpose,
    pub(super) constraints: &'a [Constraint],
    pub(super) pod: &'a PodInfo,
    pub(super) required: &'a RequiredNodeAffinity,
}

impl Request<'_> {
    fn tolerations(&self) -> &[Toleration] {
        self.pod.spec().tolerations.as_deref().unwrap_or(&[])
    }

    fn honors_affinity(&self) -> bool {
        self.constraints.iter().any(|c| c.honor_node_affinity)
    }

    fn honors_taints(&self) -> bool {
        self.constraints.iter().any(|c| c.honor_node_taints)
    }
}

/// Everything a memo's contributions depend on besides the nodes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MemoKey {
    purpose: Purpose,
    specs: Vec<Spec>,
    namespace: Box<str>,
    /// The pod's required node affinity, when a constraint honors it.
    required: Option<RequiredNodeAffinity>,
    /// The pod's tolerations, when a constraint honors taints.
    tolerations: Option<Vec<Toleration>>,
}

impl MemoKey {
    pub(super) fn of(r: &Request<'_>) -> Self {
        Self {
            purpose: r.purpose,
            specs: r.constraints.iter().map(Spec::of).collect(),
            namespace: Box::from(r.pod.namespace()),
            required: r.honors_affinity().then(|| r.required.clone()),
            tolerations: r.honors_taints().then(|| r.tolerations().to_vec()),
        }
    }

    /// Whether this memo's counts are those of the request.
    pub(super) fn serves(&self, r: &Request<'_>) -> bool {
        self.purpose == r.purpose
            && self.specs.len() == r.constraints.len()
            && self.specs.iter().zip(r.constraints).all(|(s, c)| s.is(c))
            && *self.namespace == *r.pod.namespace()
            && self.required.as_ref() == r.honors_affinity().then_some(r.required)
            && self.tolerations.as_deref() == r.honors_taints().then(|| r.tolerations())
    }
}

/// One constraint's sums per domain index (of the memo's [`Domains`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Sums {
    /// Matching pods on the nodes that count.
    pub(super) pods: Vec<i64>,
    /// Nodes that count (a what-if's domain counts as one).
    pub(super) nodes: Vec<u32>,
    /// Domains with at least one node (upstream's map's length).
    pub(super) present: usize,
}

impl Sums {
    /// Room for one more domain index.
    pub(super) fn push_domain(&mut self) {
        self.pods.push(0);
        self.nodes.push(0);
    }

    /// The matching pods of a domain index.
    pub(super) fn pods_of(&self, d: u32) -> i64 {
        self.pods[d as usize]
    }

    /// Whether a domain index exists (has a node that counts).
    pub(super) fn is_present(&self, d: u32) -> bool {
        self.nodes[d as usize] > 0
    }

    /// The smallest count among the present domains, if any.
    pub(super) fn min(&self) -> Option<i64> {
        self.pods.iter().zip(&self.nodes).filter(|(_, n)| **n > 0).map(|(p, _)| *p).min()
    }

    /// A what-if's `delta` pods in domain `d`, which exists from then on;
    /// returns its new count.
    pub(super) fn add_what_if(&mut self, d: u32, delta: i64) -> i64 {
        let d = d as usize;
        if self.nodes[d] == 0 {
            self.nodes[d] = 1;
            self.present += 1;
        }
        self.pods[d] += delta;
        self.pods[d]
    }

    fn add(&mut self, d: u32, pods: u32) {
        let d = d as usize;
        self.pods[d] += i64::from(pods);
        self.nodes[d] += 1;
        if self.nodes[d] == 1 {
            self.present += 1;
        }
    }

    fn sub(&mut self, d: u32, pods: u32) {
        let d = d as usize;
        self.pods[d] -= i64::from(pods);
        self.nodes[d] -= 1;
        if self.nodes[d] == 0 {
            self.present -= 1;
        }
    }
}

/// One constraint's view of the cluster, as a cycle reads it.
#[derive(Debug, Clone, Default)]
pub(super) struct Counts {
    pub(super) domains: Arc<Domains>,
    pub(super) sums: Arc<Sums>,
}

/// A node's part in one constraint.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    /// The domain index of the node's value, or [`NONE`]: no node object,
    /// a key missing where every key is required, a hostname constraint
    /// of PreScore (not aggregated), or, for PreFilter, a node the
    /// inclusion policies leave out.
    pub(super) domain: u32,
    /// The node's matching pods: in the domain's sum when `counted`; for
    /// a hostname constraint of PreScore, what Score counts on the node.
    pub(super) pods: u32,
    /// Whether `pods` is in the domain's sum (the node counts).
    counted: bool,
    /// Whether the node has the constraint's key.
    pub(super) labelled: bool,
}

const EMPTY_SLOT: Slot = Slot { domain: NONE, pods: 0, counted: false, labelled: false };

impl Slot {
    /// Whether the slot names a domain.
    pub(super) fn has_domain(&self) -> bool {
        self.domain != NONE
    }
}

/// Node addresses to positions (PreScore finds its feasible nodes' slots).
type AddressIndex = HashMap<usize, u32, BuildHasherDefault<AddressHasher>>;

fn address(node: &NodeInfo) -> usize {
    std::ptr::from_ref(node) as usize
}

/// The per-node contributions and per-domain sums of one [`MemoKey`].
struct Memo {
    key: MemoKey,
    /// Per node position: the generation counted (0: nothing counted).
    generations: Vec<u64>,
    /// Per node position: whether it has a node object with every key.
    all_keys: Vec<bool>,
    /// Per node position, per constraint (`position * k + i`).
    slots: Vec<Slot>,
    /// Per constraint.
    domains: Vec<Arc<Domains>>,
    sums: Vec<Arc<Sums>>,
    /// Per constraint and domain: the slots naming it; and how many
    /// domains some slot names (the others are dead).
    refs: Vec<Vec<u32>>,
    live: Vec<usize>,
    /// PreScore's memos: per position the node's address, and the reverse.
    addresses: Vec<usize>,
    index: AddressIndex,
    last_used: u64,
}

impl Memo {
    fn new(key: MemoKey) -> Self {
        let k = key.specs.len();
        Self {
            key,
            generations: Vec::new(),
            all_keys: Vec::new(),
            slots: Vec::new(),
            domains: vec![Arc::default(); k],
            sums: vec![Arc::default(); k],
            refs: vec![Vec::new(); k],
            live: vec![0; k],
            addresses: Vec::new(),
            index: AddressIndex::default(),
            last_used: 0,
        }
    }

    fn k(&self) -> usize {
        self.key.specs.len()
    }

    fn tracks_addresses(&self) -> bool {
        self.key.purpose != Purpose::Filter
    }

    /// Brings the memo to `nodes`: recounts the positions whose generation
    /// differs (and re-indexes those whose node moved, for PreScore).
    /// Rebuilds it when dead domains pile up.
    fn sync(&mut self, r: &Request<'_>, nodes: &dyn NodeInfoLister) {
        self.sync_positions(r, nodes);
        if self.too_many_dead_domains() {
            self.clear();
            self.sync_positions(r, nodes);
        }
    }

    fn sync_positions(&mut self, r: &Request<'_>, nodes: &dyn NodeInfoLister) {
        let list = nodes.list();
        let generations = nodes.generations();
        debug_assert_eq!(list.len(), generations.len());
        let k = self.k();
        let n = list.len();
        let tracks = self.tracks_addresses();
        for i in n..self.generations.len() {
            self.forget(i);
            if tracks {
                self.unindex(i);
            }
        }
        self.generations.resize(n, 0);
        self.all_keys.resize(n, false);
        self.slots.resize(n * k, EMPTY_SLOT);
        if tracks {
            self.addresses.resize(n, 0);
        }
        // Compare in chunks (a vectorized slice compare), then within the
        // chunks that differ. Addresses are read from the list's array of
        // pointers, without touching the nodes.
        const CHUNK: usize = 64;
        let mut scratch = vec![None; k];
        for start in (0..n).step_by(CHUNK) {
            let end = (start + CHUNK).min(n);
            let moved = tracks
                && !list[start..end]
                    .iter()
                    .zip(&self.addresses[start..end])
                    .all(|(node, &a)| address(node) == a);
            if !moved && self.generations[start..end] == generations[start..end] {
                continue;
            }
            for i in start..end {
                if self.generations[i] != generations[i] {
                    self.forget(i);
                    self.count(i, &list[i], r, &mut scratch);
                    self.generations[i] = generations[i];
                }
                if tracks && self.addresses[i] != address(&list[i]) {
                    self.unindex(i);
                    self.addresses[i] = address(&list[i]);
                    self.index.insert(self.addresses[i], i as u32);
                }
            }
        }
    }

    /// Drops position `i`'s address from the index (unless another
    /// position took it over).
    fn unindex(&mut self, i: usize) {
        let a = self.addresses[i];
        if self.index.get(&a) == Some(&(i as u32)) {
            self.index.remove(&a);
        }
        self.addresses[i] = 0;
    }

    /// Subtracts what position `i` contributed.
    fn forget(&mut self, i: usize) {
        let k = self.k();
        for (c, slot) in self.slots[i * k..(i + 1) * k].iter_mut().enumerate() {
            if slot.counted {
                Arc::make_mut(&mut self.sums[c]).sub(slot.domain, slot.pods);
            }
            if slot.domain != NONE {
                let refs = &mut self.refs[c][slot.domain as usize];
                *refs -= 1;
                if *refs == 0 {
                    self.live[c] -= 1;
                }
            }
            *slot = EMPTY_SLOT;
        }
        self.generations[i] = 0;
        self.all_keys[i] = false;
    }

    /// Counts `node` at position `i` (whose slots are empty). `scratch`
    /// holds, per constraint, the node's count when computed (constraints
    /// with the same selector share it).
    fn count(&mut self, i: usize, node: &NodeInfo, r: &Request<'_>, scratch: &mut [Option<u32>]) {
        if node.node().is_none() {
            return;
        }
        let labels = node_labels(node);
        let all_keys = has_all_keys(labels, r.constraints);
        self.all_keys[i] = all_keys;
        let (filter, require_all) = match r.purpose {
            Purpose::Filter => (true, true),
            Purpose::Score { require_all } => (false, require_all),
        };
        if require_all && !all_keys {
            return;
        }
        let k = self.k();
        let tolerations = r.tolerations();
        let ns = r.pod.namespace();
        scratch.fill(None);
        for (c, constraint) in r.constraints.iter().enumerate() {
            let value = labels.get(&*constraint.topology_key);
            let labelled = value.is_some();
            let pods = |scratch: &mut [Option<u32>]| {
                let same = (0..c).find(|&j| r.constraints[j].selector == constraint.selector);
                let n = same.and_then(|j| scratch[j]).unwrap_or_else(|| {
                    count_pods_match_selector(&node.pods, &constraint.selector, ns) as u32
                });
                scratch[c] = Some(n);
                n
            };
            if !filter && constraint.is_hostname() {
                // Score counts the node's own pods, whatever the policies.
                let pods = pods(scratch);
                self.slots[i * k + c] = Slot { domain: NONE, pods, counted: false, labelled };
                continue;
            }
            let counted = constraint.includes_node(node, r.required, tolerations);
            if filter && !counted {
                continue;
            }
            let pods = if counted { pods(scratch) } else { 0 };
            let d = self.intern(c, value.map_or("", String::as_str));
            if counted {
                Arc::make_mut(&mut self.sums[c]).add(d, pods);
            }
            self.slots[i * k + c] = Slot { domain: d, pods, counted, labelled };
        }
    }

    /// The index of a domain for one more slot.
    fn intern(&mut self, c: usize, value: &str) -> u32 {
        let d = match self.domains[c].get(value) {
            Some(d) => d,
            None => {
                Arc::make_mut(&mut self.sums[c]).push_domain();
                self.refs[c].push(0);
                Arc::make_mut(&mut self.domains[c]).intern(value)
            }
        };
        let refs = &mut self.refs[c][d as usize];
        *refs += 1;
        if *refs == 1 {
            self.live[c] += 1;
        }
        d
    }

    /// Whether the domains no slot names anymore (deleted nodes, changed
    /// labels) outnumber the others (plus some slack).
    fn too_many_dead_domains(&self) -> bool {
        self.domains.iter().zip(&self.live).any(|(d, &live)| d.len() > 2 * live + 64)
    }

    fn clear(&mut self) {
        let key = self.key.clone();
        let last_used = self.last_used;
        *self = Self::new(key);
        self.last_used = last_used;
    }

    /// Bytes held (not counting what cycles share), for the docs.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        use std::mem::size_of;
        let sums: usize =
            self.sums.iter().map(|s| s.pods.capacity() * 8 + s.nodes.capacity() * 4).sum();
        let refs: usize = self.refs.iter().map(|r| r.capacity() * 4).sum();
        let domains: usize = self.domains.iter().map(|d| d.bytes()).sum();
        let index = self.index.capacity() * (size_of::<(usize, u32)>() + 1) * 8 / 7;
        self.generations.capacity() * 8
            + self.all_keys.capacity()
            + self.slots.capacity() * size_of::<Slot>()
            + self.addresses.capacity() * 8
            + index
            + sums
            + refs
            + domains
    }
}

/// A synced memo, as PreScore reads it.
pub(super) struct View<'a> {
    memo: &'a Memo,
    list: &'a [Arc<NodeInfo>],
}

impl View<'_> {
    /// Per constraint: the domains and their sums.
    pub(super) fn counts(&self) -> Vec<Counts> {
        let m = self.memo;
        m.domains
            .iter()
            .zip(&m.sums)
            .map(|(d, s)| Counts { domains: d.clone(), sums: s.clone() })
            .collect()
    }

    /// The position of a node of the list (PreScore's memos only; `None`
    /// for a node the list does not hold).
    pub(super) fn position(&self, node: &NodeInfo) -> Option<usize> {
        let p = *self.memo.index.get(&address(node))? as usize;
        (p < self.list.len() && std::ptr::eq(&*self.list[p], node)).then_some(p)
    }

    /// Whether the node at `p` has a node object and every key.
    pub(super) fn all_keys(&self, p: usize) -> bool {
        self.memo.all_keys[p]
    }

    /// The node at `p`'s slot for constraint `c`.
    pub(super) fn slot(&self, p: usize, c: usize) -> Slot {
        self.memo.slots[p * self.memo.k() + c]
    }
}

/// The plugin's memos, least recently used evicted.
#[derive(Default)]
pub(super) struct Memos {
    memos: Vec<Memo>,
    clock: u64,
}

impl Memos {
    /// The memo of `r`'s key (created, or the least recently used one
    /// replaced, if none) synced to `nodes`, read by `f`.
    pub(super) fn with<R>(
        &mut self,
        r: &Request<'_>,
        nodes: &dyn NodeInfoLister,
        f: impl FnOnce(View<'_>) -> R,
    ) -> R {
        self.clock += 1;
        let i = match self.memos.iter().position(|m| m.key.serves(r)) {
            Some(i) => i,
            None if self.memos.len() < MEMO_CAPACITY => {
                self.memos.push(Memo::new(MemoKey::of(r)));
                self.memos.len() - 1
            }
            None => {
                let i = (0..self.memos.len())
                    .min_by_key(|&i| self.memos[i].last_used)
                    .expect("capacity is not 0");
                self.memos[i] = Memo::new(MemoKey::of(r));
                i
            }
        };
        let memo = &mut self.memos[i];
        memo.last_used = self.clock;
        memo.sync(r, nodes);
        f(View { memo, list: nodes.list() })
    }

    /// The counts of `r`'s constraints over `nodes`.
    #[cfg(test)]
    pub(super) fn counts(&mut self, r: &Request<'_>, nodes: &dyn NodeInfoLister) -> Vec<Counts> {
        self.with(r, nodes, |v| v.counts())
    }

    /// Drops every memo (after a panic left them half updated).
    pub(super) fn clear(&mut self) {
        self.memos.clear();
    }

    /// How many memos are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.memos.len()
    }

    /// Bytes held by the memos.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.memos.iter().map(Memo::bytes).sum()
    }
}
