//! Resource pools as one node sees them (upstream
//! `structured/internal/incubating/pools_incubating.go`, `GatherPools`).
//!
//! [`SliceIndex`] is built once per version of the ResourceSlices: it
//! prepares every device once (its id, its CEL view, its node selection)
//! and indexes slices by node and by pool. [`SliceIndex::pools_for_node`]
//! then gathers a node's pools; a pool built from a given set of slices is
//! cached and shared (`Arc`) between nodes and calls, so a Filter over many
//! nodes whose slices did not change builds nothing.
//!
//! Differences from upstream, all on paths API validation makes
//! unreachable: a slice (or device) whose `nodeSelector` does not parse is
//! treated as selecting no node (upstream fails the whole allocation), and
//! a counter value that is not a quantity makes its pool invalid.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The hasher of the per-node maps (looked up for every node Filter sees).
type Fast = foldhash::fast::RandomState;

use k8s_openapi::api::core::v1::{Node, NodeSelector};
use k8s_openapi::api::resource::v1::{Device, DeviceTaintRule, ResourceSlice};

use convoy_api::objects::DeviceId;
use convoy_api::resource::parse_milli;

use super::cel::{CelDevice, DeviceSelector};
use crate::helper::node_affinity::{CompiledNodeSelector, NodeView};

/// The slices with the DeviceTaintRules applied (upstream's ResourceSlice
/// tracker, `ListPatchedResourceSlices` and `applyPatches`, v0.37.2): each
/// rule's taint is appended to `devices[].taints` of every device its
/// `deviceSelector` matches. The selector's `driver`, `pool` and `device`
/// are each optional and ANDed; a rule without a selector matches nothing.
/// As upstream, neither the rule's status nor its taint's `timeAdded` or
/// effect is looked at here (the allocator ignores effect `None`). Only the
/// slices a rule touches are cloned; the others are shared.
pub fn with_taint_rules(
    slices: Vec<Arc<ResourceSlice>>,
    rules: &[Arc<DeviceTaintRule>],
) -> Vec<Arc<ResourceSlice>> {
    if rules.is_empty() {
        return slices;
    }
    slices
        .into_iter()
        .map(|slice| {
            let mut patched: Option<ResourceSlice> = None;
            for rule in rules {
                let Some(sel) = rule.spec.device_selector.as_ref() else { continue };
                if sel.driver.as_ref().is_some_and(|d| *d != slice.spec.driver)
                    || sel.pool.as_ref().is_some_and(|p| *p != slice.spec.pool.name)
                {
                    continue;
                }
                let Some(devices) = slice.spec.devices.as_ref() else { continue };
                for (i, device) in devices.iter().enumerate() {
                    if sel.device.as_ref().is_some_and(|d| *d != device.name) {
                        continue;
                    }
                    let p = patched.get_or_insert_with(|| (*slice).clone());
                    let d = &mut p.spec.devices.as_mut().expect("cloned with devices")[i];
                    d.taints.get_or_insert_with(Vec::new).push(rule.spec.taint.clone());
                }
            }
            patched.map_or(slice, Arc::new)
        })
        .collect()
}

/// How a slice, or a device of a slice with `perDeviceNodeSelection`, selects
/// nodes (upstream `NodeMatches`).
#[derive(Debug)]
pub enum NodeMatch {
    /// `nodeName`: that node only.
    Name(String),
    /// `allNodes: true`.
    All,
    /// `nodeSelector`, compiled (`None` if it does not parse: no node).
    Selector(Option<CompiledNodeSelector>),
    /// Nothing set: no node.
    Nothing,
}

impl NodeMatch {
    fn of(name: Option<&String>, all: Option<bool>, sel: Option<&NodeSelector>) -> Self {
        match (name.filter(|n| !n.is_empty()), all.unwrap_or(false), sel) {
            (Some(n), _, _) => NodeMatch::Name(n.clone()),
            (None, true, _) => NodeMatch::All,
            (None, false, Some(s)) => NodeMatch::Selector(CompiledNodeSelector::parse(s).ok()),
            _ => NodeMatch::Nothing,
        }
    }

    /// Whether `node` is selected.
    pub fn matches(&self, node: &Node) -> bool {
        match self {
            NodeMatch::Name(n) => node.metadata.name.as_deref() == Some(n.as_str()),
            NodeMatch::All => true,
            NodeMatch::Selector(Some(s)) => s.matches(NodeView::of_node(node)),
            NodeMatch::Selector(None) | NodeMatch::Nothing => false,
        }
    }
}

/// A device of a slice, prepared once per [`SliceIndex`].
pub struct PoolDevice {
    /// Driver, pool and device name.
    pub id: DeviceId,
    /// The slice holding the device.
    pub slice: Arc<ResourceSlice>,
    /// The device's index in `slice.spec.devices`.
    pub index: usize,
    /// The device as CEL selectors see it.
    pub cel: CelDevice,
    /// With `perDeviceNodeSelection`, the device's own node selection
    /// (checked per node by the allocator); `None` otherwise.
    pub per_device: Option<NodeMatch>,
    /// Selectors already evaluated on this device and their verdicts: a
    /// device's attributes do not change while its slice does not, and a
    /// changed slice makes a new `PoolDevice`. Keeps the selector alive, so
    /// its address identifies it.
    selector_results: std::sync::Mutex<Vec<(Arc<DeviceSelector>, bool)>>,
}

/// How many selector verdicts a device keeps (the classes and requests of
/// the workloads in flight; older ones are dropped first).
const SELECTOR_RESULTS_KEPT: usize = 8;

impl PoolDevice {
    /// The device.
    pub fn device(&self) -> &Device {
        &self.slice.spec.devices.as_ref().expect("a PoolDevice's slice has devices")[self.index]
    }

    /// Whether `selector` matches the device, evaluated once per device
    /// and selector (errors are not kept: they are reported each time).
    pub fn matches(&self, selector: &Arc<DeviceSelector>) -> Result<bool, String> {
        let lock = || self.selector_results.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, v)) = lock().iter().find(|(s, _)| Arc::ptr_eq(s, selector)) {
            return Ok(*v);
        }
        let verdict = selector.matches(&self.cel)?;
        let mut kept = lock();
        if kept.len() >= SELECTOR_RESULTS_KEPT {
            kept.remove(0);
        }
        kept.push((selector.clone(), verdict));
        Ok(verdict)
    }
}

impl std::fmt::Debug for PoolDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolDevice").field("id", &self.id).finish_non_exhaustive()
    }
}

/// One shared counter set of a pool, values in thousandths of a unit.
#[derive(Debug, Clone)]
pub struct CounterSet {
    /// `sharedCounters[].name`.
    pub name: String,
    /// Counter names and values.
    pub counters: Vec<(String, i64)>,
}

/// What one device consumes from one counter: (counter set index, counter
/// index) in [`Pool::counter_sets`], and the amount in thousandths.
pub type CounterUse = (usize, usize, i64);

/// A resource pool as one node sees it (upstream `Pool`).
#[derive(Debug)]
pub struct Pool {
    /// `spec.driver`.
    pub driver: Arc<str>,
    /// `spec.pool.name`.
    pub name: Arc<str>,
    /// `spec.pool.generation` of the slices used.
    pub generation: i64,
    /// Not every slice of the pool was seen: nothing is allocated from it
    /// and `allocationMode: All` fails. Such a pool has no devices.
    pub incomplete: bool,
    /// Why the pool cannot be used (duplicate device names, bad counter
    /// references), if it cannot.
    pub invalid: Option<String>,
    /// The devices of the slices that target the node, slices sorted by
    /// name, devices in slice order.
    pub devices: Vec<Arc<PoolDevice>>,
    /// Devices of the pool's other slices (they only consume counters).
    pub other_devices: Vec<Arc<PoolDevice>>,
    /// The pool's shared counter sets.
    pub counter_sets: Vec<CounterSet>,
    /// Per entry of `devices`: its counter consumption.
    pub device_counters: Vec<Vec<CounterUse>>,
    /// Per entry of `other_devices`: its counter consumption.
    pub other_counters: Vec<Vec<CounterUse>>,
}

impl Pool {
    /// `driver/pool`, as upstream's `PoolID.String()`.
    pub fn id_string(&self) -> String {
        format!("{}/{}", self.driver, self.name)
    }
}

/// A built pool's key: its number and the slices targeting the node.
type PoolKey = (u32, Vec<u32>);

struct SliceEntry {
    slice: Arc<ResourceSlice>,
    /// Position of the pool in the (driver, pool)-sorted pool list.
    pool_no: u32,
    generation: i64,
    slice_count: i64,
    uses_compat_groups: bool,
    has_counters: bool,
    per_device_selection: bool,
    selection: NodeMatch,
    devices: Vec<Arc<PoolDevice>>,
}

/// Every ResourceSlice indexed for per-node gathering; built once per
/// slices version (the plugin caches it).
pub struct SliceIndex {
    entries: Vec<SliceEntry>,
    /// Slice indices by `spec.nodeName`.
    on_node: HashMap<String, Vec<u32>, Fast>,
    /// Slices without `spec.nodeName`.
    shared: Vec<u32>,
    /// Slice indices by pool number.
    by_pool: Vec<Vec<u32>>,
    /// Driver and name by pool number.
    pool_ids: Vec<(Arc<str>, Arc<str>)>,
    /// Pools built so far, by pool number and the slices targeting the node.
    cache: RwLock<HashMap<PoolKey, Arc<Pool>, Fast>>,
}

impl std::fmt::Debug for SliceIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceIndex")
            .field("slices", &self.entries.len())
            .field("pools", &self.pool_ids.len())
            .finish_non_exhaustive()
    }
}

impl SliceIndex {
    /// Indexes `slices`, preparing each device once.
    pub fn build(slices: &[Arc<ResourceSlice>]) -> Self {
        let mut ids: Vec<(&str, &str)> =
            slices.iter().map(|s| (s.spec.driver.as_str(), s.spec.pool.name.as_str())).collect();
        ids.sort_unstable();
        ids.dedup();
        let pool_ids: Vec<(Arc<str>, Arc<str>)> =
            ids.iter().map(|(d, p)| (Arc::from(*d), Arc::from(*p))).collect();
        let mut by_pool = vec![Vec::new(); pool_ids.len()];
        let mut on_node: HashMap<String, Vec<u32>, Fast> = HashMap::default();
        let mut shared = Vec::new();
        let mut entries = Vec::with_capacity(slices.len());
        for (i, slice) in slices.iter().enumerate() {
            let spec = &slice.spec;
            let pool_no = ids
                .binary_search(&(spec.driver.as_str(), spec.pool.name.as_str()))
                .expect("every pool id was collected") as u32;
            let (driver, pool) = &pool_ids[pool_no as usize];
            let per_device_selection = spec.per_device_node_selection.unwrap_or(false);
            let devices = spec
                .devices
                .iter()
                .flatten()
                .enumerate()
                .map(|(index, d)| {
                    Arc::new(PoolDevice {
                        selector_results: Default::default(),
                        id: DeviceId {
                            driver: driver.clone(),
                            pool: pool.clone(),
                            device: Arc::from(d.name.as_str()),
                        },
                        slice: slice.clone(),
                        index,
                        cel: CelDevice::new(&spec.driver, d),
                        per_device: per_device_selection.then(|| {
                            NodeMatch::of(
                                d.node_name.as_ref(),
                                d.all_nodes,
                                d.node_selector.as_ref(),
                            )
                        }),
                    })
                })
                .collect();
            let uses_compat_groups = spec.devices.iter().flatten().any(|d| {
                d.consumes_counters
                    .iter()
                    .flatten()
                    .any(|c| c.compatibility_groups.as_ref().is_some_and(|g| !g.is_empty()))
            });
            let selection = if per_device_selection
                && spec.node_name.as_ref().is_none_or(|n| n.is_empty())
                && !spec.all_nodes.unwrap_or(false)
                && spec.node_selector.is_none()
            {
                NodeMatch::Nothing
            } else {
                NodeMatch::of(spec.node_name.as_ref(), spec.all_nodes, spec.node_selector.as_ref())
            };
            match spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                Some(n) => on_node.entry(n.to_string()).or_default().push(i as u32),
                None => shared.push(i as u32),
            }
            by_pool[pool_no as usize].push(i as u32);
            entries.push(SliceEntry {
                slice: slice.clone(),
                pool_no,
                generation: spec.pool.generation,
                slice_count: spec.pool.resource_slice_count,
                uses_compat_groups,
                has_counters: spec.shared_counters.as_ref().is_some_and(|c| !c.is_empty()),
                per_device_selection,
                selection,
                devices,
            });
        }
        Self { entries, on_node, shared, by_pool, pool_ids, cache: RwLock::new(HashMap::default()) }
    }

    /// Whether any slice exists at all (plugin fast path).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn relevant(&self, e: &SliceEntry, node: &Node) -> bool {
        match &e.selection {
            NodeMatch::Nothing if e.per_device_selection => {
                e.devices.iter().any(|d| d.per_device.as_ref().is_some_and(|m| m.matches(node)))
            }
            // Nothing known was set: some future extension, ignored.
            m => m.matches(node),
        }
    }

    /// Upstream `GatherPools` for one node: node-local slices
    /// (`spec.nodeName`), `allNodes` slices, slices whose `spec.nodeSelector`
    /// matches, and slices with `perDeviceNodeSelection` of which some device
    /// selects the node (the allocator then checks each device's own
    /// selection). The highest pool generation wins; a pool is incomplete
    /// when the number of its slices != `resourceSliceCount` (then the whole
    /// pool is looked at, and a newer generation elsewhere makes the pool
    /// obsolete: it is left out); invalid on duplicate device names or bad
    /// counter references. Slices whose devices use compatibility groups
    /// (alpha, off) are ignored, which leaves their pool incomplete.
    /// Pools come sorted by driver, then pool name.
    pub fn pools_for_node(&self, node: &Node) -> Vec<Arc<Pool>> {
        let name = node.metadata.name.as_deref().unwrap_or("");
        let local = self.on_node.get(name).map(Vec::as_slice).unwrap_or(&[]);
        // Relevant slices as (pool number, generation, slice), grouped by
        // pool; within a pool only the highest generation counts.
        let mut relevant: Vec<(u32, i64, u32)> = Vec::new();
        for &i in local.iter().chain(self.shared.iter()) {
            let e = &self.entries[i as usize];
            if !e.uses_compat_groups && self.relevant(e, node) {
                relevant.push((e.pool_no, e.generation, i));
            }
        }
        relevant.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        let mut found: Vec<(u32, i64, Vec<u32>)> = Vec::new();
        for (pool_no, generation, i) in relevant {
            match found.last_mut() {
                Some(f) if f.0 == pool_no => {
                    if f.1 == generation {
                        f.2.push(i);
                    }
                }
                _ => found.push((pool_no, generation, vec![i])),
            }
        }
        let mut out = Vec::with_capacity(found.len());
        for (pool_no, generation, targeting) in found {
            let key = (pool_no, targeting);
            if let Some(p) = self.cache.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
                out.push(p.clone());
                continue;
            }
            let Some(pool) = self.build_pool(pool_no, generation, &key.1) else { continue };
            let pool = Arc::new(pool);
            self.cache.write().unwrap_or_else(|e| e.into_inner()).insert(key, pool.clone());
            out.push(pool);
        }
        out
    }

    /// Builds the pool from the slices targeting the node; `None` if the
    /// pool is obsolete.
    fn build_pool(&self, pool_no: u32, generation: i64, targeting: &[u32]) -> Option<Pool> {
        let (driver, name) = self.pool_ids[pool_no as usize].clone();
        let count = self.entries[targeting[0] as usize].slice_count;
        let mut others: Vec<u32> = Vec::new();
        let mut empty = Pool {
            driver,
            name,
            generation,
            incomplete: false,
            invalid: None,
            devices: Vec::new(),
            other_devices: Vec::new(),
            counter_sets: Vec::new(),
            device_counters: Vec::new(),
            other_counters: Vec::new(),
        };
        if targeting.len() as i64 != count {
            // checkSlicesInPool: look at every slice of the pool.
            let mut all = 0i64;
            for &i in &self.by_pool[pool_no as usize] {
                let e = &self.entries[i as usize];
                if e.generation > generation {
                    return None;
                }
                if e.generation == generation && !e.uses_compat_groups {
                    all += 1;
                    if targeting.binary_search(&i).is_err() {
                        others.push(i);
                    }
                }
            }
            if all != count {
                empty.incomplete = true;
                return Some(empty);
            }
        }
        let by_name = |v: &mut Vec<u32>| {
            v.sort_by_key(|i| self.entries[*i as usize].slice.metadata.name.as_deref());
        };
        let mut targeting = targeting.to_vec();
        by_name(&mut targeting);
        by_name(&mut others);
        let mut counter_slices = Vec::new();
        let mut device_slices = Vec::new();
        let mut other_slices = Vec::new();
        for &i in &targeting {
            let e = &self.entries[i as usize];
            if e.has_counters { counter_slices.push(e) } else { device_slices.push(e) }
        }
        for &i in &others {
            let e = &self.entries[i as usize];
            if e.has_counters { counter_slices.push(e) } else { other_slices.push(e) }
        }
        let mut pool = empty;
        // validateDeviceNames (slices targeting the node only, as upstream).
        let mut names = std::collections::HashSet::new();
        for e in &device_slices {
            for d in &e.devices {
                if !names.insert(d.id.device.clone()) {
                    pool.invalid = Some(format!("duplicate device name {}", d.id.device));
                    return Some(pool);
                }
            }
        }
        pool.devices = device_slices.iter().flat_map(|e| e.devices.iter().cloned()).collect();
        pool.other_devices = other_slices.iter().flat_map(|e| e.devices.iter().cloned()).collect();
        if let Err(why) = self.counters(&mut pool, &counter_slices) {
            pool.devices.clear();
            pool.other_devices.clear();
            pool.invalid = Some(why);
        }
        Some(pool)
    }

    /// getAndValidateCounterSets + validateDeviceCounterConsumption.
    fn counters(&self, pool: &mut Pool, counter_slices: &[&SliceEntry]) -> Result<(), String> {
        for e in counter_slices {
            for set in e.slice.spec.shared_counters.iter().flatten() {
                if pool.counter_sets.iter().any(|s| s.name == set.name) {
                    return Err(format!("duplicate counter set name {}", set.name));
                }
                let mut counters = Vec::with_capacity(set.counters.len());
                for (n, c) in &set.counters {
                    let v = parse_milli(&c.value.0)
                        .map_err(|e| format!("counter set {}: {e}", set.name))?;
                    counters.push((n.clone(), v));
                }
                pool.counter_sets.push(CounterSet { name: set.name.clone(), counters });
            }
        }
        let sets = &pool.counter_sets;
        let uses = |devices: &[Arc<PoolDevice>]| -> Result<Vec<Vec<CounterUse>>, String> {
            devices
                .iter()
                .map(|d| {
                    let mut out = Vec::new();
                    for cc in d.device().consumes_counters.iter().flatten() {
                        let si = sets
                            .iter()
                            .position(|s| s.name == cc.counter_set)
                            .ok_or_else(|| format!("counter set {} not found", cc.counter_set))?;
                        for (n, c) in &cc.counters {
                            let ci =
                                sets[si].counters.iter().position(|(cn, _)| cn == n).ok_or_else(
                                    || {
                                        format!(
                                            "counter {n} not found in counter set {}",
                                            cc.counter_set
                                        )
                                    },
                                )?;
                            let v = parse_milli(&c.value.0)
                                .map_err(|e| format!("device {}: {e}", d.id))?;
                            out.push((si, ci, v));
                        }
                    }
                    Ok(out)
                })
                .collect()
        };
        let device_counters = uses(&pool.devices)?;
        let other_counters = uses(&pool.other_devices)?;
        pool.device_counters = device_counters;
        pool.other_counters = other_counters;
        Ok(())
    }
}
