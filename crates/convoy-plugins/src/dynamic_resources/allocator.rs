//! The structured-parameters device allocator (upstream
//! `structured/internal/incubating/allocator_incubating.go`, the variant a
//! v1.37 scheduler with default feature gates uses).
//!
//! [`ClaimAllocator::new`] checks a pod's claims once per scheduling cycle
//! (classes, selectors, allocation modes, constraints); then
//! [`ClaimAllocator::allocate`] searches, for one node, depth first with
//! backtracking over claims, their requests and each request's device
//! slots, and returns the first full solution, as upstream does.
//!
//! Not implemented, refused or treated conservatively:
//! * consumable capacity: a request with `capacity.requests` is refused
//!   (`request <r>: capacity requests are not supported by this scheduler
//!   yet`); a device with `allowMultipleAllocations` is allocated
//!   exclusively, like any other device;
//! * binding conditions: devices with `bindingConditions` or `bindsToNode`
//!   are never selected (Convoy does not wait for binding conditions);
//! * derived attributes and compatibility groups (alpha, off) are refused
//!   or ignored as upstream does with those gates off;
//! * there is no time limit (upstream's `filterTimeout`): the caller bounds
//!   the work by what it asks for.
//!
//! Convoy's own addition, off by default: [`AllocatorOptions::domain_attribute`]
//! orders an `ExactCount` request's candidates so that devices of the group
//! (the attribute's value) with the fewest free matching devices come first,
//! which leaves larger groups whole for later claims.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, Device, DeviceAllocationConfiguration, DeviceAllocationResult,
    DeviceAttribute, DeviceClass, DeviceRequestAllocationResult, DeviceTaint, DeviceToleration,
    ResourceClaim,
};

use convoy_api::objects::DeviceId;

use super::cel::{DeviceSelector, SelectorCache};
use super::pools::Pool;

/// The most devices one claim's allocation may hold (upstream
/// `AllocationResultsMaxSize`).
pub const ALLOCATION_RESULTS_MAX_SIZE: usize = 32;

/// Why allocation failed, beyond "does not fit on this node" (`Ok(None)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocateError {
    /// Allocation is impossible for a reason that is not node-specific
    /// (CEL error, missing class, invalid request, "asks for all devices,
    /// but resource pool x is currently being updated", too many devices):
    /// upstream returns an error, the plugin a Filter error. Text as
    /// upstream.
    Error(String),
    /// Upstream's `ErrFailedAllocationOnNode`: nothing fits on this node
    /// and some of its pools are invalid; the plugin reports the text as
    /// unschedulable on this node.
    FailedOnNode(String),
    /// The deadline given to [`ClaimAllocator::allocate_until`] passed
    /// (upstream: the plugin reports `node <n>: timed out trying to allocate
    /// devices` as an error, so the pod goes through backoff).
    TimedOut,
}

impl std::fmt::Display for AllocateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocateError::Error(m) | AllocateError::FailedOnNode(m) => f.write_str(m),
            AllocateError::TimedOut => f.write_str("timed out trying to allocate devices"),
        }
    }
}

impl std::error::Error for AllocateError {}

/// Convoy's allocator options.
#[derive(Debug, Clone, Default)]
pub struct AllocatorOptions {
    /// A device attribute naming a device's group (for example
    /// `gpu.nvidia.com/cliqueId`; unqualified = the device's driver domain).
    /// With it, an `ExactCount` request tries first the devices of the group
    /// with the fewest free matching devices; without it, upstream order.
    pub domain_attribute: Option<String>,
}

enum Mode {
    Exact(usize),
    All,
}

/// One request without subrequests, or one subrequest.
struct Sub {
    /// The request's or the subrequest's own name.
    name: String,
    /// `<req>` or `<req>/<sub>`.
    full_name: String,
    class: Arc<DeviceClass>,
    class_selectors: Vec<Result<Arc<DeviceSelector>, String>>,
    selectors: Vec<Result<Arc<DeviceSelector>, String>>,
    mode: Mode,
    admin_access: bool,
    tolerations: Vec<DeviceToleration>,
}

struct Request {
    name: String,
    has_subs: bool,
    /// One entry (the request itself) without subrequests.
    subs: Vec<Sub>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ConstraintKind {
    Match,
    Distinct,
}

struct ConstraintSpec {
    kind: ConstraintKind,
    attribute: String,
    requests: Vec<String>,
}

struct ClaimData {
    /// `namespace/name`, as upstream's `klog.KObj`.
    display: String,
    requests: Vec<Request>,
    constraints: Vec<ConstraintSpec>,
    /// Index of the first of this claim's subs in the flat sub list.
    sub_base: Vec<usize>,
}

/// Built once per scheduling cycle for the pod's claims that need
/// allocation (upstream `NewAllocator` + the per-claim precomputation).
pub struct ClaimAllocator {
    claims: Vec<Arc<ResourceClaim>>,
    data: Vec<ClaimData>,
    num_subs: usize,
    options: AllocatorOptions,
}

impl std::fmt::Debug for ClaimAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimAllocator")
            .field("claims", &self.data.iter().map(|c| &c.display).collect::<Vec<_>>())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn display(claim: &ResourceClaim) -> String {
    let m = &claim.metadata;
    match m.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", m.name.as_deref().unwrap_or("")),
        _ => m.name.clone().unwrap_or_default(),
    }
}

fn compile(
    selectors: Option<&Vec<k8s_openapi::api::resource::v1::DeviceSelector>>,
    cache: &SelectorCache,
    what: &str,
) -> Result<Vec<Result<Arc<DeviceSelector>, String>>, AllocateError> {
    selectors
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, s)| match &s.cel {
            Some(c) => Ok(cache.get(&c.expression)),
            None => Err(AllocateError::Error(format!(
                "{what}, selector #{i}: CEL expression empty (unsupported selector type?)"
            ))),
        })
        .collect()
}

impl ClaimAllocator {
    /// Checks `claims` (claims to allocate, in pod order). `class` looks
    /// DeviceClasses up. A missing class fails with upstream's
    /// `claim <ns/c>, request <r>: could not retrieve device class <c>`.
    pub fn new(
        claims: Vec<Arc<ResourceClaim>>,
        class: &dyn Fn(&str) -> Option<Arc<DeviceClass>>,
        selectors: &SelectorCache,
    ) -> Result<Self, AllocateError> {
        let mut data = Vec::with_capacity(claims.len());
        let mut num_subs = 0;
        for claim in &claims {
            let disp = display(claim);
            let err = |m: String| AllocateError::Error(format!("claim {disp}, {m}"));
            let spec = claim.spec.as_ref().and_then(|s| s.devices.as_ref());
            let mut requests = Vec::new();
            let mut sub_base = Vec::new();
            for req in spec.and_then(|d| d.requests.as_ref()).into_iter().flatten() {
                let mut subs = Vec::new();
                let has_subs = req.first_available.as_ref().is_some_and(|f| !f.is_empty());
                // (name, full name, class, selectors, mode, count, admin, tolerations, capacity, derived)
                let mut raw = Vec::new();
                if has_subs {
                    for s in req.first_available.iter().flatten() {
                        raw.push((
                            s.name.clone(),
                            format!("{}/{}", req.name, s.name),
                            s.device_class_name.as_str(),
                            s.selectors.as_ref(),
                            s.allocation_mode.as_deref(),
                            s.count,
                            None,
                            s.tolerations.as_ref(),
                            s.capacity.is_some(),
                            s.derived_attributes.as_ref().is_some_and(|d| !d.is_empty()),
                        ));
                    }
                } else if let Some(e) = req.exactly.as_ref() {
                    raw.push((
                        req.name.clone(),
                        req.name.clone(),
                        e.device_class_name.as_str(),
                        e.selectors.as_ref(),
                        e.allocation_mode.as_deref(),
                        e.count,
                        e.admin_access,
                        e.tolerations.as_ref(),
                        e.capacity.is_some(),
                        e.derived_attributes.as_ref().is_some_and(|d| !d.is_empty()),
                    ));
                } else {
                    return Err(err(format!(
                        "request {}: missing device class name (unsupported request type?)",
                        req.name
                    )));
                }
                for (name, full, cls, sels, mode, count, admin, tols, capacity, derived) in raw {
                    if capacity {
                        return Err(AllocateError::Error(format!(
                            "request {full}: capacity requests are not supported by this scheduler yet"
                        )));
                    }
                    if derived {
                        return Err(err(format!(
                            "request {name}: cannot handle request with derived attributes, the feature is disabled"
                        )));
                    }
                    let req_selectors =
                        compile(sels, selectors, &format!("claim {disp}, request {name}"))?;
                    if cls.is_empty() {
                        return Err(err(format!(
                            "request {name}: missing device class name (unsupported request type?)"
                        )));
                    }
                    let Some(c) = class(cls) else {
                        return Err(err(format!(
                            "request {name}: could not retrieve device class {cls}"
                        )));
                    };
                    let class_selectors = compile(
                        c.spec.as_ref().and_then(|s| s.selectors.as_ref()),
                        selectors,
                        &format!("class {}", c.metadata.name.as_deref().unwrap_or("")),
                    )?;
                    let mode = match mode.unwrap_or("ExactCount") {
                        "ExactCount" | "" => {
                            let n = count.unwrap_or(1);
                            Mode::Exact(usize::try_from(n).map_err(|_| {
                                err(format!("request {name}: exact count {n} is too large"))
                            })?)
                        }
                        "All" => Mode::All,
                        m => {
                            return Err(err(format!("request {name}: unsupported count mode {m}")));
                        }
                    };
                    subs.push(Sub {
                        name,
                        full_name: full,
                        class: c,
                        class_selectors,
                        selectors: req_selectors,
                        mode,
                        admin_access: admin.unwrap_or(false),
                        tolerations: tols.cloned().unwrap_or_default(),
                    });
                }
                sub_base.push(num_subs);
                num_subs += subs.len();
                requests.push(Request { name: req.name.clone(), has_subs, subs });
            }
            let mut constraints = Vec::new();
            for (i, c) in
                spec.and_then(|d| d.constraints.as_ref()).into_iter().flatten().enumerate()
            {
                let (kind, attribute) = match (&c.match_attribute, &c.distinct_attribute) {
                    (Some(a), _) => (ConstraintKind::Match, a.clone()),
                    (None, Some(a)) => (ConstraintKind::Distinct, a.clone()),
                    (None, None) => {
                        return Err(err(format!(
                            "constraint #{i}: empty constraint (unsupported constraint type?)"
                        )));
                    }
                };
                constraints.push(ConstraintSpec {
                    kind,
                    attribute,
                    requests: c.requests.clone().unwrap_or_default(),
                });
            }
            data.push(ClaimData { display: disp, requests, constraints, sub_base });
        }
        Ok(Self { claims, data, num_subs, options: AllocatorOptions::default() })
    }

    /// Sets Convoy's options.
    pub fn with_options(mut self, options: AllocatorOptions) -> Self {
        self.options = options;
        self
    }

    /// The claims, in the order given.
    pub fn claims(&self) -> &[Arc<ResourceClaim>] {
        &self.claims
    }

    /// Allocates every claim on `node` from `pools`
    /// ([`super::pools::SliceIndex::pools_for_node`]), skipping devices for
    /// which `in_use(id)` is true (allocated cluster-wide or in flight).
    /// `Ok(Some(results))` = one AllocationResult per claim, in order:
    /// `devices.results` in allocation order (request `<req>` or
    /// `<req>/<sub>`, driver, pool, device, `adminAccess`, the request's
    /// tolerations), `devices.config` = class configs (`FromClass`) then the
    /// claim configs covering an allocated request (`FromClaim`), requests
    /// cleared when a config covers them all, and `nodeSelector` as upstream
    /// (a node-local device: `matchFields metadata.name In [node]`; only
    /// `allNodes` devices: none; slice selectors: their requirements merged).
    /// `Ok(None)` = cannot allocate on this node.
    pub fn allocate(
        &self,
        node: &Node,
        pools: &[Arc<Pool>],
        in_use: &dyn Fn(&DeviceId) -> bool,
    ) -> Result<Option<Vec<AllocationResult>>, AllocateError> {
        self.allocate_until(node, pools, in_use, None)
    }

    /// [`Self::allocate`], giving up with [`AllocateError::TimedOut`] once
    /// `deadline` has passed (upstream's `filterTimeout`; the clock is read
    /// every 256 search steps).
    pub fn allocate_until(
        &self,
        node: &Node,
        pools: &[Arc<Pool>],
        in_use: &dyn Fn(&DeviceId) -> bool,
        deadline: Option<Instant>,
    ) -> Result<Option<Vec<AllocationResult>>, AllocateError> {
        let mut offsets = Vec::with_capacity(pools.len());
        let mut total = 0;
        let mut natural = Vec::new();
        for (p, pool) in pools.iter().enumerate() {
            offsets.push(total);
            total += pool.devices.len();
            if !pool.incomplete && pool.invalid.is_none() {
                natural.extend((0..pool.devices.len()).map(|d| (p as u32, d as u32)));
            }
        }
        let mut s = Search {
            a: self,
            node,
            pools,
            in_use,
            offsets,
            total,
            natural,
            subs: (0..self.num_subs).map(|_| SubState::default()).collect(),
            allocating: HashMap::default(),
            available: vec![None; pools.len()],
            consumed: vec![None; pools.len()],
            constraints: self
                .data
                .iter()
                .map(|c| c.constraints.iter().map(|_| ConstraintState::default()).collect())
                .collect(),
            results: vec![Vec::new(); self.claims.len()],
            selected_sub: self.data.iter().map(|c| vec![0; c.requests.len()]).collect(),
            deadline,
            steps: 0,
        };
        s.prepare()?;
        match s.allocate_one(Slot::default(), false, 0) {
            Ok(true) => {}
            Ok(false) | Err(SearchError::MaxSize) => {
                if pools.iter().any(|p| p.invalid.is_some()) {
                    return Err(AllocateError::FailedOnNode(
                        "invalid resource pools were encountered".into(),
                    ));
                }
                return Ok(None);
            }
            Err(SearchError::Fail(e)) => return Err(e),
        }
        let mut out = Vec::with_capacity(self.claims.len());
        for c in 0..self.claims.len() {
            out.push(s.result(c)?);
        }
        Ok(Some(out))
    }
}

#[derive(Default)]
struct SubState {
    /// Per global device index: 0 unknown, 1 no, 2 yes.
    matches: Vec<u8>,
    /// `All` mode: the devices to allocate.
    all: Vec<(u32, u32)>,
    num_devices: usize,
    /// Domain-ordered candidates (with [`AllocatorOptions::domain_attribute`]).
    order: Option<Vec<(u32, u32)>>,
}

#[derive(Default)]
struct ConstraintState<'a> {
    value: Option<&'a DeviceAttribute>,
    count: usize,
    seen: Vec<&'a DeviceAttribute>,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    claim: usize,
    req: usize,
    sub: usize,
    dev: usize,
}

#[derive(Clone, Copy)]
struct Chosen {
    req: usize,
    sub: usize,
    pool: u32,
    dev: u32,
}

enum SearchError {
    /// Upstream `errAllocationResultMaxSizeExceeded`.
    MaxSize,
    Fail(AllocateError),
}

impl From<AllocateError> for SearchError {
    fn from(e: AllocateError) -> Self {
        SearchError::Fail(e)
    }
}

struct Undo {
    slot: Slot,
    pool: u32,
    dev: u32,
    counters: bool,
    constraints: usize,
}

struct Search<'a> {
    a: &'a ClaimAllocator,
    node: &'a Node,
    pools: &'a [Arc<Pool>],
    in_use: &'a dyn Fn(&DeviceId) -> bool,
    offsets: Vec<usize>,
    total: usize,
    /// Devices of complete, valid pools, in pool then device order.
    natural: Vec<(u32, u32)>,
    subs: Vec<SubState>,
    /// Global device index -> claims allocating it in this search.
    allocating: HashMap<usize, Vec<usize>, foldhash::fast::RandomState>,
    /// Per pool: counters left once devices in use are accounted for.
    available: Vec<Option<Vec<Vec<i64>>>>,
    /// Per pool: counters consumed by devices chosen in this search.
    consumed: Vec<Option<Vec<Vec<i64>>>>,
    constraints: Vec<Vec<ConstraintState<'a>>>,
    results: Vec<Vec<Chosen>>,
    selected_sub: Vec<Vec<usize>>,
    deadline: Option<Instant>,
    steps: u64,
}

fn lookup_attribute<'d>(
    device: &'d Device,
    driver: &str,
    name: &str,
) -> Option<&'d DeviceAttribute> {
    let attrs = device.attributes.as_ref()?;
    if let Some(a) = attrs.get(name) {
        return Some(a);
    }
    let (domain, id) = name.split_once('/')?;
    if domain != driver {
        return None;
    }
    attrs.get(id)
}

/// Typed equality of two attribute values (only the scalar types; list
/// types are alpha and never equal).
fn same_value(a: &DeviceAttribute, b: &DeviceAttribute) -> bool {
    if let Some(v) = &a.string {
        return b.string.as_ref() == Some(v);
    }
    if let Some(v) = a.int {
        return b.int == Some(v);
    }
    if let Some(v) = a.bool {
        return b.bool == Some(v);
    }
    if let Some(v) = &a.version {
        return b.version.as_ref() == Some(v);
    }
    false
}

fn tolerates(t: &DeviceToleration, taint: &DeviceTaint) -> bool {
    if t.effect.as_deref().is_some_and(|e| !e.is_empty() && e != taint.effect) {
        return false;
    }
    if t.key.as_deref().is_some_and(|k| !k.is_empty() && k != taint.key) {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

fn taint_prevents(device: &Device, tolerations: &[DeviceToleration]) -> bool {
    device.taints.iter().flatten().any(|taint| {
        matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerations.iter().any(|t| tolerates(t, taint))
    })
}

impl<'a> Search<'a> {
    fn sub(&self, s: Slot) -> &'a Sub {
        &self.a.data[s.claim].requests[s.req].subs[s.sub]
    }

    fn key(&self, s: Slot) -> usize {
        self.a.data[s.claim].sub_base[s.req] + s.sub
    }

    fn global(&self, p: u32, d: u32) -> usize {
        self.offsets[p as usize] + d as usize
    }

    /// The per-node part of upstream's precomputation: `All` devices and the
    /// device-count limit.
    fn prepare(&mut self) -> Result<(), AllocateError> {
        let a = self.a;
        for (ci, claim) in a.data.iter().enumerate() {
            let mut min_claim = 0usize;
            for (ri, req) in claim.requests.iter().enumerate() {
                let mut min_req = usize::MAX;
                for (si, sub) in req.subs.iter().enumerate() {
                    let slot = Slot { claim: ci, req: ri, sub: si, dev: 0 };
                    let key = self.key(slot);
                    let n = match sub.mode {
                        Mode::Exact(n) => n,
                        Mode::All => {
                            let mut all = Vec::new();
                            for (p, pool) in self.pools.iter().enumerate() {
                                let reason = if pool.incomplete {
                                    Some("is currently being updated")
                                } else if pool.invalid.is_some() {
                                    Some("is currently invalid")
                                } else {
                                    None
                                };
                                if let Some(r) = reason {
                                    return Err(AllocateError::Error(format!(
                                        "claim {}, request {}: asks for all devices, but resource pool {} {r}",
                                        claim.display,
                                        sub.name,
                                        pool.id_string()
                                    )));
                                }
                                for d in 0..pool.devices.len() {
                                    if self.selectable(slot, p as u32, d as u32)? {
                                        all.push((p as u32, d as u32));
                                    }
                                }
                            }
                            let n = all.len();
                            self.subs[key].all = all;
                            n
                        }
                    };
                    self.subs[key].num_devices = n;
                    min_req = min_req.min(n);
                }
                if req.subs.is_empty() {
                    min_req = 0;
                }
                if min_req > ALLOCATION_RESULTS_MAX_SIZE - min_claim {
                    return Err(AllocateError::Error(format!(
                        "claim {}, request {}: adding {min_req} devices exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}, with {min_claim} already accounted for",
                        claim.display, req.name
                    )));
                }
                min_claim += min_req;
            }
        }
        Ok(())
    }

    fn in_use_any(&self, g: usize, id: &DeviceId) -> bool {
        self.allocating.get(&g).is_some_and(|c| !c.is_empty()) || (self.in_use)(id)
    }

    fn allocating_for_claim(&self, g: usize, claim: usize) -> bool {
        self.allocating.get(&g).is_some_and(|c| c.contains(&claim))
    }

    /// Class selectors, request selectors and per-device node selection
    /// (upstream `isSelectable`), cached per (device, request).
    fn selectable(&mut self, s: Slot, p: u32, d: u32) -> Result<bool, AllocateError> {
        let pd = &self.pools[p as usize].devices[d as usize];
        let device = pd.device();
        if device.binding_conditions.as_ref().is_some_and(|b| !b.is_empty())
            || device.binds_to_node == Some(true)
        {
            return Ok(false);
        }
        let key = self.key(s);
        let g = self.global(p, d);
        let st = &mut self.subs[key];
        if st.matches.is_empty() {
            st.matches = vec![0; self.total];
        }
        match st.matches[g] {
            1 => return Ok(false),
            2 => return Ok(true),
            _ => {}
        }
        let sub = self.sub(s);
        let class_name = sub.class.metadata.name.as_deref().unwrap_or("");
        let mut ok = true;
        for (i, sel) in sub.class_selectors.iter().enumerate() {
            let sel = sel.as_ref().map_err(|e| {
                AllocateError::Error(format!(
                    "class {class_name}: selector #{i}: CEL compile error: {e}"
                ))
            })?;
            if !pd.matches(sel).map_err(|e| {
                AllocateError::Error(format!(
                    "class {class_name}: selector #{i} on device {}: CEL runtime error: {e}",
                    pd.id
                ))
            })? {
                ok = false;
                break;
            }
        }
        if ok {
            let disp = &self.a.data[s.claim].display;
            for (i, sel) in sub.selectors.iter().enumerate() {
                let sel = sel.as_ref().map_err(|e| {
                    AllocateError::Error(format!(
                        "claim {disp}: selector #{i}: CEL compile error: {e}"
                    ))
                })?;
                if !pd.matches(sel).map_err(|e| {
                    AllocateError::Error(format!(
                        "claim {disp}: selector #{i} on device {}: CEL runtime error: {e}",
                        pd.id
                    ))
                })? {
                    ok = false;
                    break;
                }
            }
        }
        if ok && let Some(m) = &pd.per_device {
            ok = m.matches(self.node);
        }
        self.subs[key].matches[g] = if ok { 2 } else { 1 };
        Ok(ok)
    }

    /// Candidates of an `ExactCount` slot: upstream order, or with a domain
    /// attribute, the free matching devices of the smallest groups first.
    fn candidates(&mut self, s: Slot) -> Result<Option<usize>, AllocateError> {
        let Some(attr) = self.a.options.domain_attribute.as_deref() else { return Ok(None) };
        let key = self.key(s);
        if self.subs[key].order.is_none() {
            let admin = self.sub(s).admin_access;
            let mut cands: Vec<(u32, u32, Option<&'a DeviceAttribute>)> = Vec::new();
            for i in 0..self.natural.len() {
                let (p, d) = self.natural[i];
                let pd: &'a Arc<_> = &self.pools[p as usize].devices[d as usize];
                if !admin && (self.in_use)(&pd.id) {
                    continue;
                }
                if self.selectable(s, p, d)? {
                    cands.push((p, d, lookup_attribute(pd.device(), &pd.id.driver, attr)));
                }
            }
            // Groups in order of first appearance, with their sizes.
            let mut groups: Vec<(&DeviceAttribute, usize)> = Vec::new();
            let group_of = |groups: &mut Vec<(&'a DeviceAttribute, usize)>,
                            v: &'a DeviceAttribute| {
                match groups.iter().position(|(g, _)| same_value(g, v)) {
                    Some(i) => i,
                    None => {
                        groups.push((v, 0));
                        groups.len() - 1
                    }
                }
            };
            let idx: Vec<Option<usize>> = cands
                .iter()
                .map(|c| {
                    c.2.map(|v| {
                        let i = group_of(&mut groups, v);
                        groups[i].1 += 1;
                        i
                    })
                })
                .collect();
            let mut order: Vec<usize> = (0..cands.len()).collect();
            order.sort_by_key(|&i| match idx[i] {
                Some(g) => (groups[g].1, g),
                None => (usize::MAX, usize::MAX),
            });
            self.subs[key].order =
                Some(order.into_iter().map(|i| (cands[i].0, cands[i].1)).collect());
        }
        Ok(Some(key))
    }

    fn allocate_one(
        &mut self,
        r: Slot,
        allocate_sub: bool,
        start: usize,
    ) -> Result<bool, SearchError> {
        self.steps += 1;
        if self.steps.is_multiple_of(256) && self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(SearchError::Fail(AllocateError::TimedOut));
        }
        let a = self.a;
        if r.claim >= a.data.len() {
            return Ok(true);
        }
        let claim = &a.data[r.claim];
        if r.req >= claim.requests.len() {
            return match self.allocate_one(Slot { claim: r.claim + 1, ..Slot::default() }, false, 0)
            {
                Err(SearchError::MaxSize) => Ok(false),
                x => x,
            };
        }
        let request = &claim.requests[r.req];
        if !allocate_sub && request.has_subs {
            let mut all_exceeded = true;
            for si in 0..request.subs.len() {
                match self.allocate_one(Slot { sub: si, ..r }, true, 0) {
                    Err(SearchError::MaxSize) => continue,
                    Err(e) => return Err(e),
                    Ok(ok) => {
                        all_exceeded = false;
                        if ok {
                            self.selected_sub[r.claim][r.req] = si;
                            return Ok(true);
                        }
                    }
                }
            }
            return if all_exceeded { Err(SearchError::MaxSize) } else { Ok(false) };
        }
        let sub = &request.subs[r.sub];
        let key = self.key(r);
        let all = matches!(sub.mode, Mode::All);
        if all && self.subs[key].all.is_empty() {
            return Ok(false);
        }
        let num = self.subs[key].num_devices;
        if r.dev >= num {
            return self.allocate_one(
                Slot { claim: r.claim, req: r.req + 1, sub: 0, dev: 0 },
                false,
                0,
            );
        }
        if num - r.dev > ALLOCATION_RESULTS_MAX_SIZE - self.results[r.claim].len() {
            return Err(SearchError::MaxSize);
        }
        let next = Slot { dev: r.dev + 1, ..r };
        if all {
            let (p, d) = self.subs[key].all[r.dev];
            let Some(undo) = self.allocate_device(r, p, d, true)? else { return Ok(false) };
            let res = self.allocate_one(next, allocate_sub, 0);
            if !matches!(res, Ok(true)) {
                self.undo(undo);
            }
            return res;
        }
        let ordered = self.candidates(r)?;
        let len = match ordered {
            Some(k) => self.subs[k].order.as_ref().map_or(0, Vec::len),
            None => self.natural.len(),
        };
        for pos in start..len {
            let (p, d) = match ordered {
                Some(k) => self.subs[k].order.as_ref().expect("order was computed")[pos],
                None => self.natural[pos],
            };
            let g = self.global(p, d);
            let id = &self.pools[p as usize].devices[d as usize].id;
            if sub.admin_access {
                if self.allocating_for_claim(g, r.claim) {
                    continue;
                }
            } else if self.in_use_any(g, id) {
                continue;
            }
            if !self.selectable(r, p, d)? {
                continue;
            }
            let Some(undo) = self.allocate_device(r, p, d, false)? else { continue };
            match self.allocate_one(next, allocate_sub, pos + 1) {
                Ok(true) => return Ok(true),
                res => {
                    self.undo(undo);
                    res?;
                }
            }
        }
        Ok(false)
    }

    /// Availability, counters, taints and constraints for one selectable
    /// candidate (upstream `allocateDevice`); on success the device is
    /// recorded and the returned [`Undo`] takes it back.
    fn allocate_device(
        &mut self,
        r: Slot,
        p: u32,
        d: u32,
        must: bool,
    ) -> Result<Option<Undo>, AllocateError> {
        let sub = self.sub(r);
        let pool: &'a Pool = &self.pools[p as usize];
        let pd = &pool.devices[d as usize];
        let g = self.global(p, d);
        if sub.admin_access {
            if self.allocating_for_claim(g, r.claim) {
                return Ok(None);
            }
        } else if self.in_use_any(g, &pd.id) {
            return Ok(None);
        }
        let uses = &pool.device_counters[d as usize];
        let counters = !uses.is_empty();
        if counters && !self.reserve_counters(p, d) {
            return Ok(None);
        }
        let mut undo = Undo { slot: r, pool: p, dev: d, counters, constraints: 0 };
        let device: &'a Device = pd.device();
        if taint_prevents(device, &sub.tolerations) {
            self.undo_partial(&undo);
            return Ok(None);
        }
        let request = &self.a.data[r.claim].requests[r.req];
        let sub_name = request.has_subs.then_some(sub.full_name.as_str());
        for i in 0..self.constraints[r.claim].len() {
            if !self.constraint_add(r.claim, i, &request.name, sub_name, device, &pd.id.driver) {
                self.undo_partial(&undo);
                if must {
                    return Err(AllocateError::Error(format!(
                        "claim {}, request {}: cannot add device {} because a claim constraint would not be satisfied",
                        self.a.data[r.claim].display, sub.name, pd.id
                    )));
                }
                return Ok(None);
            }
            undo.constraints += 1;
        }
        self.allocating.entry(g).or_default().push(r.claim);
        self.results[r.claim].push(Chosen { req: r.req, sub: r.sub, pool: p, dev: d });
        Ok(Some(undo))
    }

    fn applies(spec: &ConstraintSpec, base: &str, sub: Option<&str>) -> bool {
        spec.requests.is_empty()
            || spec.requests.iter().any(|x| x == base || Some(x.as_str()) == sub)
    }

    fn constraint_add(
        &mut self,
        claim: usize,
        i: usize,
        base: &str,
        sub: Option<&str>,
        device: &'a Device,
        driver: &str,
    ) -> bool {
        let spec = &self.a.data[claim].constraints[i];
        if !Self::applies(spec, base, sub) {
            return true;
        }
        let Some(v) = lookup_attribute(device, driver, &spec.attribute) else { return false };
        let st = &mut self.constraints[claim][i];
        match spec.kind {
            ConstraintKind::Match => {
                if st.count == 0 {
                    st.value = Some(v);
                } else if !st.value.is_some_and(|first| same_value(v, first)) {
                    return false;
                }
                st.count += 1;
            }
            ConstraintKind::Distinct => {
                let known = v.string.is_some()
                    || v.int.is_some()
                    || v.bool.is_some()
                    || v.version.is_some();
                if !known || st.seen.iter().any(|s| same_value(v, s)) {
                    return false;
                }
                st.seen.push(v);
            }
        }
        true
    }

    fn constraint_remove(&mut self, claim: usize, i: usize, base: &str, sub: Option<&str>) {
        let spec = &self.a.data[claim].constraints[i];
        if !Self::applies(spec, base, sub) {
            return;
        }
        let st = &mut self.constraints[claim][i];
        match spec.kind {
            ConstraintKind::Match => st.count -= 1,
            ConstraintKind::Distinct => {
                st.seen.pop();
            }
        }
    }

    /// Takes back counters and constraints (a rejected candidate).
    fn undo_partial(&mut self, u: &Undo) {
        let request = &self.a.data[u.slot.claim].requests[u.slot.req];
        let sub_name = request.has_subs.then_some(request.subs[u.slot.sub].full_name.as_str());
        for i in (0..u.constraints).rev() {
            self.constraint_remove(u.slot.claim, i, &request.name, sub_name);
        }
        if u.counters {
            self.release_counters(u.pool, u.dev);
        }
    }

    /// Takes back an allocated candidate (backtracking).
    fn undo(&mut self, u: Undo) {
        self.results[u.slot.claim].pop();
        let g = self.global(u.pool, u.dev);
        if let Some(c) = self.allocating.get_mut(&g)
            && let Some(i) = c.iter().rposition(|&x| x == u.slot.claim)
        {
            c.swap_remove(i);
        }
        self.undo_partial(&u);
    }

    /// upstream `checkAvailableCounters`.
    fn reserve_counters(&mut self, p: u32, d: u32) -> bool {
        let pool: &'a Pool = &self.pools[p as usize];
        if self.available[p as usize].is_none() {
            let mut avail: Vec<Vec<i64>> = pool
                .counter_sets
                .iter()
                .map(|s| s.counters.iter().map(|c| c.1).collect())
                .collect();
            let all = pool.devices.iter().zip(&pool.device_counters);
            for (dev, uses) in all.chain(pool.other_devices.iter().zip(&pool.other_counters)) {
                if uses.is_empty() || !(self.in_use)(&dev.id) {
                    continue;
                }
                for &(s, c, v) in uses {
                    avail[s][c] -= v;
                }
            }
            self.available[p as usize] = Some(avail);
        }
        let consumed = self.consumed[p as usize].get_or_insert_with(|| {
            pool.counter_sets.iter().map(|s| vec![0; s.counters.len()]).collect()
        });
        for &(s, c, v) in &pool.device_counters[d as usize] {
            consumed[s][c] += v;
        }
        let avail = self.available[p as usize].as_ref().expect("computed above");
        let fits =
            avail.iter().zip(consumed.iter()).all(|(a, c)| a.iter().zip(c).all(|(a, c)| a >= c));
        if !fits {
            self.release_counters(p, d);
        }
        fits
    }

    fn release_counters(&mut self, p: u32, d: u32) {
        let pool: &'a Pool = &self.pools[p as usize];
        if let Some(consumed) = self.consumed[p as usize].as_mut() {
            for &(s, c, v) in &pool.device_counters[d as usize] {
                consumed[s][c] -= v;
            }
        }
    }

    /// The AllocationResult of claim `c` once the search succeeded.
    fn result(&self, c: usize) -> Result<AllocationResult, AllocateError> {
        let data = &self.a.data[c];
        let claim = &self.a.claims[c];
        let results = self.results[c]
            .iter()
            .map(|ch| {
                let sub = &data.requests[ch.req].subs[ch.sub];
                let id = &self.pools[ch.pool as usize].devices[ch.dev as usize].id;
                DeviceRequestAllocationResult {
                    request: sub.full_name.clone(),
                    driver: id.driver.to_string(),
                    pool: id.pool.to_string(),
                    device: id.device.to_string(),
                    admin_access: sub.admin_access.then_some(true),
                    tolerations: (!sub.tolerations.is_empty()).then(|| sub.tolerations.clone()),
                    ..Default::default()
                }
            })
            .collect();
        let chosen_sub = |ri: usize| {
            let req = &data.requests[ri];
            &req.subs[if req.has_subs { self.selected_sub[c][ri] } else { 0 }]
        };
        let mut config: Vec<DeviceAllocationConfiguration> = Vec::new();
        let mut class_ranges: HashMap<&str, (usize, usize)> = HashMap::new();
        for ri in 0..data.requests.len() {
            let sub = chosen_sub(ri);
            let class_name = sub.class.metadata.name.as_deref().unwrap_or("");
            if let Some(&(s, e)) = class_ranges.get(class_name) {
                for cfg in &mut config[s..e] {
                    cfg.requests.get_or_insert_with(Vec::new).push(sub.full_name.clone());
                }
                continue;
            }
            let start = config.len();
            for cc in sub.class.spec.iter().flat_map(|s| s.config.iter().flatten()) {
                config.push(DeviceAllocationConfiguration {
                    source: "FromClass".into(),
                    requests: Some(vec![sub.full_name.clone()]),
                    opaque: cc.opaque.clone(),
                });
            }
            class_ranges.insert(class_name, (start, config.len()));
        }
        let claim_configs =
            claim.spec.as_ref().and_then(|s| s.devices.as_ref()).and_then(|d| d.config.as_ref());
        for cfg in claim_configs.into_iter().flatten() {
            let reqs = cfg.requests.as_deref().unwrap_or(&[]);
            let covered = reqs.is_empty()
                || data.requests.iter().enumerate().any(|(ri, req)| {
                    reqs.contains(&req.name)
                        || (req.has_subs && reqs.contains(&chosen_sub(ri).full_name))
                });
            if covered {
                config.push(DeviceAllocationConfiguration {
                    source: "FromClaim".into(),
                    requests: cfg.requests.clone(),
                    opaque: cfg.opaque.clone(),
                });
            }
        }
        for cfg in &mut config {
            let Some(reqs) = cfg.requests.as_ref().filter(|r| !r.is_empty()) else { continue };
            let to_all = data.requests.iter().enumerate().all(|(ri, req)| {
                reqs.contains(&req.name)
                    || (req.has_subs && reqs.contains(&chosen_sub(ri).full_name))
            });
            if to_all {
                cfg.requests = None;
            }
        }
        let node_selector = self.node_selector(c).map_err(|e| {
            AllocateError::Error(format!(
                "create NodeSelector for claim {}: {e}",
                claim.metadata.name.as_deref().unwrap_or("")
            ))
        })?;
        Ok(AllocationResult {
            devices: Some(DeviceAllocationResult {
                results: Some(results),
                config: (!config.is_empty()).then_some(config),
            }),
            node_selector,
            ..Default::default()
        })
    }

    /// upstream `createNodeSelector`.
    fn node_selector(&self, c: usize) -> Result<Option<NodeSelector>, String> {
        let mut term = NodeSelectorTerm::default();
        for ch in &self.results[c] {
            let pd = &self.pools[ch.pool as usize].devices[ch.dev as usize];
            let spec = &pd.slice.spec;
            let device = pd.device();
            let (name, sel) = if spec.per_device_node_selection.unwrap_or(false) {
                (device.node_name.as_ref(), device.node_selector.as_ref())
            } else {
                (spec.node_name.as_ref(), spec.node_selector.as_ref())
            };
            if name.is_some() || device.binds_to_node == Some(true) {
                return Ok(Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_fields: Some(vec![NodeSelectorRequirement {
                            key: "metadata.name".into(),
                            operator: "In".into(),
                            values: Some(vec![self.node.metadata.name.clone().unwrap_or_default()]),
                        }]),
                        ..Default::default()
                    }],
                }));
            }
            if let Some(sel) = sel {
                match sel.node_selector_terms.as_slice() {
                    [] => {}
                    [t] => {
                        add_requirements(t.match_fields.as_deref(), &mut term.match_fields);
                        add_requirements(
                            t.match_expressions.as_deref(),
                            &mut term.match_expressions,
                        );
                    }
                    ts => {
                        return Err(format!(
                            "unsupported ResourceSlice.NodeSelector with {} terms",
                            ts.len()
                        ));
                    }
                }
            }
        }
        if term.match_fields.is_some() || term.match_expressions.is_some() {
            return Ok(Some(NodeSelector { node_selector_terms: vec![term] }));
        }
        Ok(None)
    }
}

fn add_requirements(
    from: Option<&[NodeSelectorRequirement]>,
    to: &mut Option<Vec<NodeSelectorRequirement>>,
) {
    for r in from.unwrap_or(&[]) {
        let same_values = |a: &NodeSelectorRequirement| {
            let (mut x, mut y) =
                (a.values.clone().unwrap_or_default(), r.values.clone().unwrap_or_default());
            x.sort();
            x.dedup();
            y.sort();
            y.dedup();
            x == y
        };
        let list = to.get_or_insert_with(Vec::new);
        if !list.iter().any(|e| e.key == r.key && e.operator == r.operator && same_values(e)) {
            list.push(r.clone());
        }
    }
}

#[cfg(test)]
#[path = "allocator_tests.rs"]
mod tests;
