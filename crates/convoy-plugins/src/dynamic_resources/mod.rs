//! DynamicResources: a pod's ResourceClaims (`resource.k8s.io/v1`) must
//! exist, and the devices they ask for are allocated on the chosen node with
//! structured parameters (upstream `plugins/dynamicresources`, v1.37.2).
//!
//! - PreEnqueue: every claim the pod names exists, is not being deleted,
//!   and a claim made from a template is the pod's (its controller).
//! - PreFilter: claims already allocated restrict the nodes to their
//!   allocation's node selector; claims to allocate must name existing
//!   DeviceClasses and must not be in flight for another pod; the allocator
//!   ([`allocator::ClaimAllocator`]) is prepared once for the cycle.
//! - Filter: per node, the allocated claims' node selectors, then an
//!   allocation of the other claims from the node's pools
//!   ([`pools::SliceIndex`]), devices held by allocated claims
//!   ([`AllocatedDevices`](convoy_api::objects::AllocatedDevices)) or by claims in flight left out.
//! - Score: upstream's prioritized-list score (earlier `firstAvailable`
//!   subrequests score higher).
//! - Reserve: the node's allocation is put in flight ([`InFlight`]): no
//!   other pod gets those devices, and a shared claim is not allocated
//!   twice. Unreserve takes it back and removes a reservation PreBind wrote.
//! - PreBind: writes each claim's allocation and the pod's reservation
//!   through the [`Binder`] ([`ClaimWrite::Reserve`]), then waits until the
//!   watched claim says so, and lets the in-flight entry go.
//! - PostFilter: a claim allocated for nodes where the pod does not fit,
//!   and reserved for no other pod, is deallocated, so that the next attempt
//!   can allocate it elsewhere.
//!
//! Not done (see docs/dra.md): devices with binding conditions, consumable
//! capacity and DRA-backed extended resources. DeviceTaintRules are applied
//! to the slices before indexing ([`pools::with_taint_rules`]).

pub mod allocator;
pub mod cel;
pub mod pools;
pub mod views;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim};

use convoy_api::objects::dra::claim_devices;
use convoy_api::objects::{DeviceId, DraStats};
use convoy_api::{
    ActionType, Binder, ClaimWrite, ClusterEventWithHint, CycleState, EventObject, EventResource,
    FilterPlugin, NodeInfo, NodeInfoLister, NodeToStatus, ObjectLister, Plugin, PodInfo,
    PostFilterContext, PostFilterPlugin, PostFilterResult, PreBindPlugin, PreEnqueuePlugin,
    PreFilterPlugin, PreFilterResult, QueueingHint, ReservePlugin, ScorePlugin, Status, names,
};
use convoy_config::{DynamicResourcesArgs, PluginArgs};

use crate::helper::device_room::DeviceRoom;
use crate::helper::node_affinity::{CompiledNodeSelector, NodeView};
use allocator::{AllocateError, ClaimAllocator};
use cel::SelectorCache;
use pools::SliceIndex;

/// Filter's reason when no allocation of the pod's claims fits the node.
pub const ERR_CANNOT_ALLOCATE: &str = "cannot allocate all claims";
/// Filter's reason when an allocated claim's node selector excludes the
/// node.
pub const ERR_NOT_AVAILABLE: &str = "resourceclaim not available on the node";
/// PreFilter's reason when a claim is allocated and reserved for as many
/// consumers as the API allows, none of them this pod.
pub const ERR_IN_USE: &str = "resourceclaim in use";
/// PostFilter's message after deallocating a claim.
pub const MSG_DEALLOCATED: &str = "deallocation of ResourceClaim completed";
/// How many consumers `status.reservedFor` holds at most (upstream
/// `ResourceClaimReservedForMaxSize`).
pub const RESERVED_FOR_MAX: usize = 256;
/// The score of the first of `firstAvailable`'s subrequests (upstream
/// `FirstAvailableDeviceRequestMaxSize`); each later one scores one less.
pub const FIRST_AVAILABLE_MAX: i64 = 8;

/// How often PreBind looks whether the watched claim carries the pod's
/// reservation.
const WRITE_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long PreBind waits for the watch to show its write before it gives
/// up and fails the binding.
const WRITE_VISIBLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The versions of the ResourceSlices and of the DeviceTaintRules a slice
/// index was built from.
type IndexVersion = (u64, u64);

/// The DynamicResources plugin.
pub struct DynamicResources {
    objects: Arc<dyn ObjectLister>,
    binder: Arc<dyn Binder>,
    args: DynamicResourcesArgs,
    selectors: SelectorCache,
    /// The slice index and the versions it was built from.
    slices: Mutex<Option<(IndexVersion, Arc<SliceIndex>)>>,
    in_flight: Arc<InFlight>,
    stats: Arc<DraStats>,
}

impl std::fmt::Debug for DynamicResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicResources").field("args", &self.args).finish_non_exhaustive()
    }
}

/// Claims allocated in Reserve and not yet seen allocated in the watched
/// store (upstream's in-flight allocations): their devices are taken, and
/// another pod sharing such a claim waits.
#[derive(Debug, Default)]
pub struct InFlight {
    inner: Mutex<HashMap<Arc<str>, InFlightClaim>>,
}

/// One claim in flight.
#[derive(Debug, Clone)]
struct InFlightClaim {
    /// The pod that allocated it.
    pod_uid: Arc<str>,
    allocation: AllocationResult,
    devices: Vec<DeviceId>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, InFlightClaim>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a claim (by UID) is in flight.
    pub fn contains(&self, claim_uid: &str) -> bool {
        self.lock().contains_key(claim_uid)
    }

    /// How many claims are in flight.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no claim is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The devices held by claims in flight.
    fn devices(&self) -> HashSet<DeviceId, foldhash::fast::RandomState> {
        self.lock().values().flat_map(|c| c.devices.iter().cloned()).collect()
    }

    fn allocation(&self, claim_uid: &str) -> Option<AllocationResult> {
        self.lock().get(claim_uid).map(|c| c.allocation.clone())
    }

    fn insert(&self, claim_uid: Arc<str>, claim: InFlightClaim) {
        self.lock().insert(claim_uid, claim);
    }

    /// Forgets the claim if `pod_uid` put it in flight.
    fn remove(&self, claim_uid: &str, pod_uid: &str) -> bool {
        let mut st = self.lock();
        if st.get(claim_uid).is_some_and(|c| &*c.pod_uid == pod_uid) {
            st.remove(claim_uid);
            return true;
        }
        false
    }
}

impl DynamicResources {
    /// The plugin with `DynamicResourcesArgs` (validated by the
    /// configuration; `None`: upstream's defaults).
    pub fn new(
        args: Option<&PluginArgs>,
        objects: Arc<dyn ObjectLister>,
        binder: Arc<dyn Binder>,
    ) -> Result<Self, String> {
        Self::with_stats(args, objects, binder, Arc::default())
    }

    /// [`new`](Self::new), counting into `stats` (the handle's, which the
    /// scheduler's metrics read).
    pub fn with_stats(
        args: Option<&PluginArgs>,
        objects: Arc<dyn ObjectLister>,
        binder: Arc<dyn Binder>,
        stats: Arc<DraStats>,
    ) -> Result<Self, String> {
        let args = match args {
            None => DynamicResourcesArgs::default(),
            Some(PluginArgs::DynamicResources(a)) => a.clone(),
            Some(other) => return Err(format!("want DynamicResourcesArgs, got {other:?}")),
        };
        Ok(Self {
            objects,
            binder,
            args,
            selectors: SelectorCache::default(),
            slices: Mutex::new(None),
            in_flight: Arc::new(InFlight::default()),
            stats,
        })
    }

    /// The claims in flight.
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// The index of the current ResourceSlices with the DeviceTaintRules
    /// applied (upstream `ListWithDeviceTaintRules`), rebuilt when either
    /// changed.
    fn slice_index(&self) -> Arc<SliceIndex> {
        let version =
            (self.objects.resource_slices_version(), self.objects.device_taint_rules_version());
        let mut cached = self.slices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((v, index)) = cached.as_ref()
            && *v == version
        {
            return index.clone();
        }
        let (slices, slices_version) = self.objects.resource_slices();
        let (rules, rules_version) = self.objects.device_taint_rules();
        let slices = pools::with_taint_rules(slices, &rules);
        let index = Arc::new(SliceIndex::build(&slices));
        *cached = Some(((slices_version, rules_version), index.clone()));
        index
    }
}

/// The name of the claim a pod's `spec.resourceClaims` entry refers to:
/// `Ok(Some((name, must_check_owner)))`, `Ok(None)` when the entry's claim
/// was deliberately not made (upstream `resourceclaim.Name`).
fn claim_name(pod: &Pod, entry: &k8s_openapi::api::core::v1::PodResourceClaim) -> ClaimName {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    if let Some(claim) = &entry.resource_claim_name {
        return Ok(Some((claim.clone(), false)));
    }
    if entry.resource_claim_template_name.is_some() {
        let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_ref());
        return match statuses.into_iter().flatten().find(|s| s.name == entry.name) {
            Some(s) => Ok(s.resource_claim_name.clone().map(|c| (c, true))),
            None => Err(format!("pod \"{ns}/{name}\": ResourceClaim not created yet")),
        };
    }
    Err(format!(
        "pod \"{ns}/{name}\", spec.resourceClaim {:?}: none of the supported fields are set",
        entry.name
    ))
}

type ClaimName = Result<Option<(String, bool)>, String>;

/// Upstream `resourceclaim.IsForPod`: a claim made from a template must be
/// controlled by the pod.
fn is_for_pod(pod: &PodInfo, claim: &ResourceClaim) -> Result<(), String> {
    let (ns, name) = (pod.namespace(), pod.pod.metadata.name.as_deref().unwrap_or(""));
    let claim_ns = claim.metadata.namespace.as_deref().unwrap_or("default");
    let claim_name = claim.metadata.name.as_deref().unwrap_or("");
    if claim_ns != ns {
        return Err(format!(
            "ResourceClaim {claim_ns}/{claim_name} is not in the same namespace as Pod {ns}/{name}"
        ));
    }
    let controlled = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == *pod.uid);
    if !controlled {
        return Err(format!(
            "ResourceClaim {claim_ns}/{claim_name} was not created for Pod {ns}/{name} (Pod is not owner)"
        ));
    }
    Ok(())
}

fn is_reserved_for(claim: &ResourceClaim, pod_uid: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .is_some_and(|r| r.iter().any(|c| c.uid == pod_uid))
}

fn reserved_count(claim: &ResourceClaim) -> usize {
    claim.status.as_ref().and_then(|s| s.reserved_for.as_ref()).map_or(0, Vec::len)
}

fn allocation_of(claim: &ResourceClaim) -> Option<&AllocationResult> {
    claim.status.as_ref().and_then(|s| s.allocation.as_ref())
}

/// A claim's `spec.devices.requests`.
fn requests_of(claim: &ResourceClaim) -> &[k8s_openapi::api::resource::v1::DeviceRequest] {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.as_deref())
        .unwrap_or(&[])
}

fn key_of(claim: &ResourceClaim) -> (String, String) {
    (
        claim.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        claim.metadata.name.clone().unwrap_or_default(),
    )
}

fn uid_of(claim: &ResourceClaim) -> Arc<str> {
    Arc::from(claim.metadata.uid.as_deref().unwrap_or(""))
}

/// The APIs a pod with claims needs served.
const DRA_APIS: [convoy_api::ApiInfo; 3] = [
    convoy_api::apis::RESOURCE_CLAIMS,
    convoy_api::apis::DEVICE_CLASSES,
    convoy_api::apis::RESOURCE_SLICES,
];

impl DynamicResources {
    /// Upstream `foreachPodResourceClaim`: the pod's claims, in
    /// `spec.resourceClaims` order, each checked to exist, not to be
    /// deleting, and to be the pod's when made from a template.
    fn pod_claims(&self, pod: &PodInfo) -> Result<Vec<Arc<ResourceClaim>>, String> {
        let mut claims = Vec::new();
        for entry in pod.spec().resource_claims.iter().flatten() {
            let Some((name, check_owner)) = claim_name(&pod.pod, entry)? else { continue };
            let Some(claim) = self.objects.resource_claim(pod.namespace(), &name) else {
                return Err(format!("resourceclaim.resource.k8s.io {name:?} not found"));
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return Err(format!("resourceclaim {name:?} is being deleted"));
            }
            if check_owner {
                is_for_pod(pod, &claim)?;
            }
            claims.push(claim);
        }
        Ok(claims)
    }
}

/// Filter's allocation on a node and the node's devices around it.
type NodeChoice = (Vec<AllocationResult>, DeviceRoom);

/// PreFilter's state (upstream `stateData`).
struct PreFilterState {
    /// The pod's claims, in order.
    claims: Vec<Arc<ResourceClaim>>,
    /// Per claim: the node selector of its allocation (allocated claims).
    available_on: Vec<Option<CompiledNodeSelector>>,
    /// Per claim: whether it needs an allocation.
    to_allocate: Vec<bool>,
    /// The allocation search, when some claim needs one.
    search: Option<Search>,
    /// Filter's allocation per node (for Score and Reserve) and the
    /// node's devices around it (for GpuPlacement).
    node_allocations: Mutex<HashMap<Arc<str>, NodeChoice>>,
    /// Claims found unavailable on some node (PostFilter deallocates one).
    unavailable: Mutex<BTreeSet<usize>>,
    /// The claims PreBind reserved for the pod, by index (Unreserve
    /// removes the reservation).
    written: Mutex<Vec<usize>>,
    /// Whether Score scores: Kubernetes 1.35 added DynamicResources' Score
    /// (prioritized lists); on a 1.34 server Convoy scores 0, as its
    /// kube-scheduler does not score.
    scores: bool,
}

impl DeviceRoom {
    /// The room of `node` around `results`, the allocation Filter found there.
    fn of(
        node: &str,
        pools: &[Arc<pools::Pool>],
        results: &[AllocationResult],
        in_use: &dyn Fn(&DeviceId) -> bool,
    ) -> Self {
        let chosen: Vec<_> = results
            .iter()
            .flat_map(|a| a.devices.iter().flat_map(|d| d.results.iter().flatten()))
            .collect();
        let mut room = DeviceRoom::default();
        for pool in pools {
            if !chosen.iter().any(|r| *r.driver == *pool.driver) {
                continue;
            }
            for d in &pool.devices {
                if d.slice.spec.node_name.as_deref() != Some(node) {
                    continue;
                }
                room.capacity += 1;
                if !in_use(&d.id) {
                    room.free += 1;
                }
                if chosen.iter().any(|r| {
                    *r.driver == *d.id.driver && *r.pool == *d.id.pool && *r.device == *d.id.device
                }) {
                    room.requested += 1;
                }
            }
        }
        room
    }
}

/// The devices of `node` around the allocation DynamicResources' Filter
/// found there for the pod of this cycle; `None` when the pod allocates
/// nothing there (no claims, or claims allocated already).
pub fn device_room(state: &CycleState, node: &str) -> Option<DeviceRoom> {
    let s = state.read::<PreFilterState>()?;
    s.node_allocations.lock().unwrap_or_else(|e| e.into_inner()).get(node).map(|(_, room)| *room)
}

/// What Filter allocates with.
struct Search {
    allocator: ClaimAllocator,
    index: Arc<SliceIndex>,
    in_flight: HashSet<DeviceId, foldhash::fast::RandomState>,
}

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        names::DYNAMIC_RESOURCES
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::new(
                EventResource::Node,
                ActionType::ADD
                    | ActionType::UPDATE_NODE_LABEL
                    | ActionType::UPDATE_NODE_ALLOCATABLE,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::ResourceClaim,
                ActionType::ADD | ActionType::UPDATE | ActionType::DELETE,
                is_schedulable_after_claim_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::UnscheduledPod,
                ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
                is_schedulable_after_target_pod_update,
            ),
            // Not in upstream's list: a pod whose binding cycle failed is
            // forgotten as if deleted (upstream's handleBindingCycleError),
            // and the devices it held in flight are free again; without
            // this, pods turned away for those devices would wait for the
            // periodic flush.
            ClusterEventWithHint::with_hint(
                EventResource::AssignedPod,
                ActionType::DELETE,
                is_schedulable_after_claiming_pod_delete,
            ),
            ClusterEventWithHint::new(
                EventResource::DeviceClass,
                ActionType::ADD | ActionType::UPDATE,
            ),
            ClusterEventWithHint::new(
                EventResource::ResourceSlice,
                ActionType::ADD | ActionType::UPDATE,
            ),
            // Upstream hears of a rule as an update of the slices it
            // patches (the ResourceSlice tracker's events): a rule added,
            // changed or deleted changes their taints.
            ClusterEventWithHint::new(
                EventResource::DeviceTaintRule,
                ActionType::ADD | ActionType::UPDATE | ActionType::DELETE,
            ),
        ]
    }

    fn as_pre_enqueue(self: Arc<Self>) -> Option<Arc<dyn PreEnqueuePlugin>> {
        Some(self)
    }
    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
    fn as_post_filter(self: Arc<Self>) -> Option<Arc<dyn PostFilterPlugin>> {
        Some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
    fn as_reserve(self: Arc<Self>) -> Option<Arc<dyn ReservePlugin>> {
        Some(self)
    }
    fn as_pre_bind(self: Arc<Self>) -> Option<Arc<dyn PreBindPlugin>> {
        Some(self)
    }
}

/// Upstream `isSchedulableAfterClaimChange`: a deallocation may free
/// devices for any pod; otherwise only a change of a claim the pod uses
/// (created, or its status changed) can help.
fn is_schedulable_after_claim_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let claim = |o: Option<&EventObject>| match o {
        Some(EventObject::Object(convoy_api::ClusterObject::ResourceClaim(c))) => Some(c.clone()),
        _ => None,
    };
    let (old, new) = (claim(old), claim(new));
    let Some(new) = new else {
        // Deleted: only an allocated claim frees devices.
        return match old {
            Some(old) if allocation_of(&old).is_none() => QueueingHint::Skip,
            _ => QueueingHint::Queue,
        };
    };
    if old.as_ref().is_some_and(|o| allocation_of(o).is_some()) && allocation_of(&new).is_none() {
        return QueueingHint::Queue;
    }
    let (ns, name) = key_of(&new);
    let uses = pod.namespace() == ns
        && pod
            .spec()
            .resource_claims
            .iter()
            .flatten()
            .any(|e| matches!(claim_name(&pod.pod, e), Ok(Some((n, _))) if n == name));
    if !uses {
        return QueueingHint::Skip;
    }
    match old {
        None => QueueingHint::Queue,
        Some(old) if old.status == new.status => QueueingHint::Skip,
        Some(_) => QueueingHint::Queue,
    }
}

/// A deleted (or forgotten) pod that had resource claims may have held
/// devices.
fn is_schedulable_after_claiming_pod_delete(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    _new: Option<&EventObject>,
) -> QueueingHint {
    let Some(EventObject::Pod(old)) = old else { return QueueingHint::Skip };
    let claims = old.spec.as_ref().and_then(|s| s.resource_claims.as_ref());
    if claims.is_some_and(|c| !c.is_empty()) { QueueingHint::Queue } else { QueueingHint::Skip }
}

/// Upstream `isSchedulableAfterTargetPodUpdate`: the pod's own update
/// (its generated claims recorded in its status) may let it in.
fn is_schedulable_after_target_pod_update(
    pod: &PodInfo,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(EventObject::Pod(new)) = new else { return QueueingHint::Skip };
    if new.metadata.uid.as_deref() != Some(&*pod.uid) {
        return QueueingHint::Skip;
    }
    let resolved = new
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
        .all(|e| claim_name(new, e).is_ok());
    if resolved { QueueingHint::Queue } else { QueueingHint::Skip }
}

impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if pod.spec().resource_claims.as_ref().is_none_or(Vec::is_empty) {
            return Status::success();
        }
        // The claims' API is not served: PreFilter refuses the pod by name,
        // in its status and Events, rather than it waiting unseen here.
        if !DRA_APIS.iter().all(|a| self.objects.served_apis().is_served(a)) {
            return Status::success();
        }
        match self.pod_claims(pod) {
            Ok(_) => Status::success(),
            Err(e) => Status::unresolvable(e),
        }
    }
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        if pod.spec().resource_claims.as_ref().is_none_or(Vec::is_empty) {
            return (None, Status::skip());
        }
        // On a server that does not serve DRA's kinds (or only in versions
        // Convoy does not read), the claims can be neither read nor
        // allocated: say so rather than wait for claims that never come.
        if let Some(refusal) = self.objects.served_apis().refusal("spec.resourceClaims", &DRA_APIS)
        {
            return (None, Status::unresolvable(refusal));
        }
        let claims = match self.pod_claims(pod) {
            Ok(c) => c,
            Err(e) => return (None, Status::unresolvable(e)),
        };
        if claims.is_empty() {
            return (None, Status::skip());
        }
        let mut available_on = Vec::with_capacity(claims.len());
        let mut to_allocate = Vec::with_capacity(claims.len());
        for claim in &claims {
            let (ns, name) = key_of(claim);
            if let Some(alloc) = allocation_of(claim) {
                if reserved_count(claim) >= RESERVED_FOR_MAX && !is_reserved_for(claim, &pod.uid) {
                    return (None, Status::unresolvable(ERR_IN_USE));
                }
                let selector = match alloc.node_selector.as_ref().map(CompiledNodeSelector::parse) {
                    Some(Ok(s)) => Some(s),
                    Some(Err(e)) => return (None, Status::error(e)),
                    None => None,
                };
                available_on.push(selector);
                to_allocate.push(false);
                continue;
            }
            if self.in_flight.contains(&uid_of(claim)) {
                return (
                    None,
                    Status::unresolvable(format!(
                        "resource claim {ns}/{name} is in the process of being allocated"
                    )),
                );
            }
            if let Err(status) = self.validate_classes(claim) {
                return (None, status);
            }
            available_on.push(None);
            to_allocate.push(true);
        }
        let search = if to_allocate.iter().any(|&a| a) {
            let pending: Vec<_> = claims
                .iter()
                .zip(&to_allocate)
                .filter(|(_, a)| **a)
                .map(|(c, _)| c.clone())
                .collect();
            let objects = self.objects.clone();
            let class = move |name: &str| objects.device_class(name);
            match ClaimAllocator::new(pending, &class, &self.selectors) {
                Ok(allocator) => Some(Search {
                    allocator,
                    index: self.slice_index(),
                    in_flight: self.in_flight.devices(),
                }),
                Err(e) => return (None, Status::error(e.to_string())),
            }
        } else {
            None
        };
        let scores = self.objects.served_apis().server_at_least(35);
        state.write(PreFilterState {
            claims,
            available_on,
            to_allocate,
            search,
            node_allocations: Mutex::default(),
            unavailable: Mutex::default(),
            written: Mutex::default(),
            scores,
        });
        (None, Status::success())
    }
}

impl DynamicResources {
    /// Every request's DeviceClass exists (upstream `validateDeviceClass`).
    fn validate_classes(&self, claim: &ResourceClaim) -> Result<(), Status> {
        let (ns, name) = key_of(claim);
        let missing = |class: &str, request: &str| {
            Status::unresolvable(format!("request {request}: device class {class} does not exist"))
        };
        for request in requests_of(claim) {
            if let Some(exactly) = &request.exactly {
                if self.objects.device_class(&exactly.device_class_name).is_none() {
                    return Err(missing(&exactly.device_class_name, &request.name));
                }
            } else if let Some(subs) = request.first_available.as_ref().filter(|s| !s.is_empty()) {
                for sub in subs {
                    if self.objects.device_class(&sub.device_class_name).is_none() {
                        let qualified = format!("{}/{}", request.name, sub.name);
                        return Err(missing(&sub.device_class_name, &qualified));
                    }
                }
            } else {
                return Err(Status::unresolvable(format!(
                    "resource claim {ns}/{name}, request {}: unknown request type",
                    request.name
                )));
            }
        }
        Ok(())
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>() else { return Status::success() };
        let Some(k8s_node) = node.node() else { return Status::unresolvable(ERR_NOT_AVAILABLE) };
        let mut unavailable = Vec::new();
        for (i, selector) in s.available_on.iter().enumerate() {
            if let Some(sel) = selector
                && !sel.matches(NodeView::of_node(k8s_node))
            {
                unavailable.push(i);
            }
        }
        if !unavailable.is_empty() {
            s.unavailable.lock().unwrap_or_else(|e| e.into_inner()).extend(unavailable);
            return Status::unresolvable(ERR_NOT_AVAILABLE);
        }
        let Some(search) = &s.search else { return Status::success() };
        let pools = search.index.pools_for_node(k8s_node);
        let deadline = (!self.args.filter_timeout.is_zero())
            .then(|| std::time::Instant::now() + self.args.filter_timeout);
        // Devices held by allocated claims (read under the store's lock,
        // never copied) or by claims in flight.
        let found = self.objects.with_allocated_devices(|allocated| {
            let in_use = |id: &DeviceId| allocated.contains(id) || search.in_flight.contains(id);
            let found = search.allocator.allocate_until(k8s_node, &pools, &in_use, deadline);
            found.map(|r| {
                r.map(|results| {
                    let room = DeviceRoom::of(node.name(), &pools, &results, &in_use);
                    (results, room)
                })
            })
        });
        DraStats::inc(match &found {
            Ok(Some(_)) => &self.stats.allocations_found,
            Ok(None) | Err(AllocateError::FailedOnNode(_)) => &self.stats.allocations_not_found,
            Err(_) => &self.stats.allocation_errors,
        });
        match found {
            Ok(Some(choice)) => {
                s.node_allocations
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(node.name_arc().clone(), choice);
                Status::success()
            }
            Ok(None) => Status::unresolvable(ERR_CANNOT_ALLOCATE),
            Err(AllocateError::FailedOnNode(e)) => Status::unresolvable(e),
            Err(AllocateError::TimedOut) => {
                Status::error(format!("node {}: timed out trying to allocate devices", node.name()))
            }
            Err(AllocateError::Error(e)) => Status::error(e),
        }
    }
}

impl ScorePlugin for DynamicResources {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreFilterState>().filter(|s| s.scores) else { return Ok(0) };
        let allocations = s.node_allocations.lock().unwrap_or_else(|e| e.into_inner());
        let Some((results, _)) = allocations.get(node.name()) else { return Ok(0) };
        let mut next = results.iter();
        let mut score = 0;
        for (claim, &allocate) in s.claims.iter().zip(&s.to_allocate) {
            let allocation = if allocate { next.next() } else { allocation_of(claim) };
            let Some(allocation) = allocation else {
                return Err(Status::error(
                    "number of allocations is smaller than number of claims needing allocation",
                ));
            };
            score += first_available_score(claim, allocation);
        }
        Ok(score)
    }

    /// [`score`](Self::score) for every node; a pod without claims scores 0
    /// everywhere without a per-node lookup.
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        out: &mut [i64],
    ) -> Result<(), Status> {
        if state.read::<PreFilterState>().is_none_or(|s| s.claims.is_empty() || !s.scores) {
            out.fill(0);
            return Ok(());
        }
        for (node, o) in nodes.iter().zip(out) {
            *o = self.score(state, pod, node)?;
        }
        Ok(())
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        crate::helper::default_normalize_score(convoy_api::MAX_NODE_SCORE, false, scores)
    }
}

/// Upstream `computeScore` for one claim: each allocated subrequest at
/// index `i` of its request's `firstAvailable` adds `8 - i`.
fn first_available_score(claim: &ResourceClaim, allocation: &AllocationResult) -> i64 {
    let allocated: HashSet<&str> = allocation
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .map(|r| r.request.as_str())
        .filter(|r| r.contains('/'))
        .collect();
    let mut score = 0;
    for request in requests_of(claim) {
        for (i, sub) in request.first_available.iter().flatten().enumerate() {
            if allocated.contains(format!("{}/{}", request.name, sub.name).as_str()) {
                score += FIRST_AVAILABLE_MAX - i as i64;
            }
        }
    }
    score
}

impl ReservePlugin for DynamicResources {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let Some(s) = state.read::<PreFilterState>() else { return Status::success() };
        if s.search.is_none() {
            return Status::success();
        }
        let allocations = s.node_allocations.lock().unwrap_or_else(|e| e.into_inner());
        let Some((results, _)) = allocations.get(node) else {
            return Status::error("claim allocation not found for node");
        };
        let pending: Vec<_> =
            s.claims.iter().zip(&s.to_allocate).filter(|(_, a)| **a).map(|(c, _)| c).collect();
        if pending.len() != results.len() {
            return Status::error(format!(
                "internal error, have {} allocations, want {} claims",
                results.len(),
                pending.len()
            ));
        }
        for (claim, allocation) in pending.into_iter().zip(results) {
            let mut with = (**claim).clone();
            with.status.get_or_insert_with(Default::default).allocation = Some(allocation.clone());
            let entry = InFlightClaim {
                pod_uid: pod.uid.clone(),
                allocation: allocation.clone(),
                devices: claim_devices(&with),
            };
            self.in_flight.insert(uid_of(claim), entry);
        }
        Status::success()
    }

    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, _node: &str) {
        let Some(s) = state.read::<PreFilterState>() else { return };
        for claim in &s.claims {
            self.in_flight.remove(&uid_of(claim), &pod.uid);
        }
        let written: Vec<usize> =
            std::mem::take(&mut *s.written.lock().unwrap_or_else(|e| e.into_inner()));
        if written.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(pod = %pod.key, "unreserve: no runtime to remove the claims' reservations");
            return;
        };
        for i in written {
            let (namespace, name) = key_of(&s.claims[i]);
            let write = ClaimWrite::Unreserve { namespace, name, pod_uid: pod.uid.to_string() };
            let binder = self.binder.clone();
            let key = write.claim_key();
            runtime.spawn(async move {
                if let Err(e) = binder.write_claim(write).await {
                    tracing::warn!(claim = %key, error = %e, "unreserve");
                }
            });
        }
    }
}

impl PreBindPlugin for DynamicResources {
    fn pre_bind(
        &self,
        state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        _node: Arc<str>,
    ) -> BoxFuture<'static, Status> {
        let binder = self.binder.clone();
        let objects = self.objects.clone();
        let in_flight = self.in_flight.clone();
        let stats = self.stats.clone();
        Box::pin(async move {
            let Some(s) = state.read::<PreFilterState>() else { return Status::success() };
            for (i, claim) in s.claims.iter().enumerate() {
                if is_reserved_for(claim, &pod.uid) {
                    continue;
                }
                let uid = uid_of(claim);
                let allocation = if s.to_allocate[i] { in_flight.allocation(&uid) } else { None };
                if s.to_allocate[i] && allocation.is_none() {
                    return Status::error(format!(
                        "claim {}/{}: allocation lost before binding",
                        key_of(claim).0,
                        key_of(claim).1
                    ));
                }
                let (namespace, name) = key_of(claim);
                let allocates = allocation.is_some();
                let write = ClaimWrite::Reserve {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    uid: uid.to_string(),
                    allocation,
                    pod_name: pod.pod.metadata.name.clone().unwrap_or_default(),
                    pod_uid: pod.uid.to_string(),
                };
                if let Err(e) = binder.write_claim(write).await {
                    return Status::error(e.to_string());
                }
                if allocates {
                    DraStats::inc(&stats.claims_allocated);
                }
                s.written.lock().unwrap_or_else(|e| e.into_inner()).push(i);
                // The allocation stays in flight until the watched claim
                // holds it, so that no other pod takes its devices.
                let deadline = tokio::time::Instant::now() + WRITE_VISIBLE_TIMEOUT;
                loop {
                    let seen = objects
                        .resource_claim(&namespace, &name)
                        .is_some_and(|c| uid_of(&c) == uid && is_reserved_for(&c, &pod.uid));
                    if seen {
                        break;
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Status::error(format!(
                            "claim {namespace}/{name}: the reservation was written but not seen \
                             within {}s",
                            WRITE_VISIBLE_TIMEOUT.as_secs()
                        ));
                    }
                    tokio::time::sleep(WRITE_POLL_INTERVAL).await;
                }
                in_flight.remove(&uid, &pod.uid);
            }
            Status::success()
        })
    }
}

impl PostFilterPlugin for DynamicResources {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        _statuses: &NodeToStatus,
        _ctx: &PostFilterContext<'_>,
    ) -> (Option<PostFilterResult>, Status) {
        let Some(s) = state.read::<PreFilterState>() else {
            return (None, Status::new(convoy_api::Code::Unschedulable));
        };
        let unavailable = s.unavailable.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for i in unavailable {
            let claim = &s.claims[i];
            let reserved: Vec<_> =
                claim.status.iter().flat_map(|st| st.reserved_for.iter().flatten()).collect();
            let free = reserved.is_empty() || (reserved.len() == 1 && reserved[0].uid == *pod.uid);
            if !free {
                continue;
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else { break };
            let (namespace, name) = key_of(claim);
            let write = ClaimWrite::Deallocate { namespace, name, uid: uid_of(claim).to_string() };
            let key = write.claim_key();
            tracing::info!(pod = %pod.key, claim = %key, "Deallocation of ResourceClaim");
            let binder = self.binder.clone();
            let stats = self.stats.clone();
            runtime.spawn(async move {
                match binder.write_claim(write).await {
                    Ok(_) => DraStats::inc(&stats.claims_deallocated),
                    Err(e) => tracing::warn!(claim = %key, error = %e, "deallocating"),
                }
            });
            return (None, Status::unschedulable(MSG_DEALLOCATED));
        }
        (None, Status::new(convoy_api::Code::Unschedulable))
    }
}

#[cfg(test)]
mod tests;
