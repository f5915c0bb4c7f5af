//! VolumeBinding: a pod's PersistentVolumeClaims (and generic ephemeral
//! volumes' claims) must exist, their bound PersistentVolumes must be
//! reachable from the node, and claims whose StorageClass waits for the
//! first consumer (`WaitForFirstConsumer`) are bound on the chosen node
//! (upstream `plugins/volumebinding`, v1.37.2: `volume_binding.go`
//! PreFilter/Filter/Reserve/PreBind/Unreserve, `binder.go`).
//!
//! For a delayed claim Filter looks, per node, for the smallest available
//! PersistentVolume that fits it ([`binder::find_matching_volume`]), or
//! else checks that the class can provision one there (a provisioner,
//! `allowedTopologies`, and, when the provisioner is a CSIDriver with
//! `storageCapacity: true`, a CSIStorageCapacity of the class the node
//! reaches with room for the claim). Reserve assumes the choice in an
//! in-memory cache ([`assume::AssumeCache`]) so that no other pod in
//! flight gets the same volume; PreBind writes it through the [`Binder`]
//! (a volume's `spec.claimRef`, a claim's
//! `volume.kubernetes.io/selected-node` annotation) and waits until the
//! watched claims are bound, up to `bindTimeoutSeconds`; Unreserve forgets
//! the assumption.
//!
//! Score ([`scorer`]) rates the chosen volumes' utilization (or the
//! provisions' share of the published capacity) through the args' `shape`.
//!
//! Not done: translating a bound in-tree PV to CSI, and PreBind's check
//! that the pod still exists (the plugin sees no pods).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};

use convoy_api::objects::volumes::ANN_MIGRATED_PLUGINS;
use k8s_openapi::api::storage::v1::{CSIDriver, CSIStorageCapacity};

use convoy_api::{
    ActionType, Binder, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    NodeInfo, NodeInfoLister, ObjectLister, Plugin, PodInfo, PreBindPlugin, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, QueueingHint, ReservePlugin, ScorePlugin, Status, names,
};
use convoy_config::{PluginArgs, VolumeBindingArgs};

use crate::helper::node_affinity::CompiledNodeSelector;
use crate::helper::volumes::{
    WAIT_FOR_FIRST_CONSUMER, claim_class, claim_is_for_pod, claim_is_fully_bound,
    claim_volume_name, event_csi_driver, event_csi_node, event_csi_storage_capacity,
    event_storage_class, namespace_of, pod_volumes, pv_affinity_matches, pv_node_affinity,
    pvc_not_found, queue_if_pod_uses_claim, volume_claim,
};

/// Reason when a bound volume's node affinity excludes the node (upstream
/// `ErrReasonNodeConflict`; before v1.33 `node(s) had volume node affinity
/// conflict`).
pub const ERR_REASON_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
/// Reason when a bound claim's volume does not exist.
pub const ERR_REASON_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// PreFilter reason when a claim that should be bound already is not.
pub const ERR_REASON_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

pub mod assume;
pub mod binder;
mod prebind;
pub mod scorer;

pub use binder::{ERR_REASON_BIND_CONFLICT, ERR_REASON_NOT_ENOUGH_SPACE};

use crate::helper::shape_score::Shape;
use assume::AssumeCache;
use binder::{
    Candidate, Capacities, Classes, DelayedClaim, PodVolumes, StorageCapacity, Supply,
    find_pod_volumes,
};
#[cfg(test)]
use prebind::Written;
use prebind::bind_pod_volumes;

/// The VolumeBinding plugin.
pub struct VolumeBinding {
    objects: Arc<dyn ObjectLister>,
    /// Where PreBind writes the bindings.
    binder: Arc<dyn Binder>,
    /// `bindTimeoutSeconds` (PreBind) and `shape` (Score).
    args: VolumeBindingArgs,
    /// The Score's function, from `args.shape`.
    shape: Shape,
    /// The volumes and claims chosen for pods in flight.
    assumed: Arc<AssumeCache>,
}

impl std::fmt::Debug for VolumeBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeBinding")
            .field("args", &self.args)
            .field("assumed", &self.assumed.len())
            .finish()
    }
}

impl VolumeBinding {
    /// The plugin, reading claims, volumes and classes from `objects` and
    /// writing bindings through `binder`.
    pub fn new(objects: Arc<dyn ObjectLister>, binder: Arc<dyn Binder>) -> Self {
        let args = VolumeBindingArgs::default();
        Self {
            objects,
            binder,
            shape: Shape::new(&args.shape),
            args,
            assumed: Arc::new(AssumeCache::default()),
        }
    }

    /// The plugin with `VolumeBindingArgs` (validated by the configuration;
    /// `None`: upstream's defaults).
    pub fn with_args(
        args: Option<&PluginArgs>,
        objects: Arc<dyn ObjectLister>,
        binder: Arc<dyn Binder>,
    ) -> Result<Self, String> {
        let args = match args {
            None => VolumeBindingArgs::default(),
            Some(PluginArgs::VolumeBinding(a)) => a.clone(),
            Some(other) => return Err(format!("want VolumeBindingArgs, got {other:?}")),
        };
        Ok(Self { shape: Shape::new(&args.shape), args, ..Self::new(objects, binder) })
    }

    /// The volumes and claims assumed for pods in flight.
    pub fn assumed(&self) -> &AssumeCache {
        &self.assumed
    }

    /// The args the plugin was built with.
    pub fn args(&self) -> &VolumeBindingArgs {
        &self.args
    }
}

/// A bound claim's volume, as Filter checks it.
#[derive(Debug, Clone)]
enum BoundVolume {
    /// The PersistentVolume does not exist.
    Missing,
    /// Its required node affinity, if any.
    Affinity(Option<CompiledNodeSelector>),
}

/// A claim of the pod.
struct PodClaim {
    pvc: Arc<PersistentVolumeClaim>,
}

/// PreFilter state (upstream `stateData`): the pod's bound claims'
/// volumes, in volume order; its delayed claims, by increasing request;
/// the candidate volumes of their classes, the classes and their
/// published capacities.
struct PreFilterState {
    bound: Vec<BoundVolume>,
    delayed: Vec<DelayedClaim>,
    pvs: BTreeMap<String, Vec<Candidate>>,
    classes: Classes,
    capacities: Capacities,
    /// Filter's choice per node (Filter runs on many nodes at once).
    by_node: Mutex<HashMap<String, NodeChoice>>,
}

/// Filter's choice on a node, and the node (PreBind checks the bound
/// volumes' node affinity against its labels).
#[derive(Clone)]
struct NodeChoice {
    volumes: PodVolumes,
    node: Option<Arc<Node>>,
}

/// What Reserve chose for the delayed claims (absent: every claim was
/// bound already, upstream's `allBound`).
struct Reserved(NodeChoice);

impl VolumeBinding {
    /// Upstream `podHasPVCs`: every claim exists, is not lost or being
    /// deleted, and an ephemeral volume's claim is the pod's. `Ok(None)`
    /// when the pod uses no claim.
    fn claims_of(&self, pod: &PodInfo) -> Result<Option<Vec<PodClaim>>, String> {
        let mut claims = Vec::new();
        for v in pod_volumes(&pod.pod) {
            let Some((name, ephemeral)) = volume_claim(&pod.pod, v) else { continue };
            let Some(pvc) = self.objects.pvc(pod.namespace(), &name) else {
                return Err(if ephemeral {
                    format!(
                        "waiting for ephemeral volume controller to create the \
                         persistentvolumeclaim {name:?}"
                    )
                } else {
                    pvc_not_found(&name)
                });
            };
            if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
                return Err(format!(
                    "persistentvolumeclaim {name:?} bound to non-existent persistentvolume {:?}",
                    claim_volume_name(&pvc)
                ));
            }
            if pvc.metadata.deletion_timestamp.is_some() {
                return Err(format!("persistentvolumeclaim {name:?} is being deleted"));
            }
            if ephemeral {
                claim_is_for_pod(&pod.pod, &pvc)?;
            }
            claims.push(PodClaim { pvc });
        }
        Ok((!claims.is_empty()).then_some(claims))
    }

    /// The class's CSIStorageCapacities when its provisioner is a
    /// CSIDriver with `storageCapacity: true` (upstream
    /// `hasEnoughCapacity`); `None`: capacity is not checked.
    fn capacities_of(
        &self,
        class: &k8s_openapi::api::storage::v1::StorageClass,
    ) -> Option<Vec<StorageCapacity>> {
        let driver = self.objects.csi_driver(&class.provisioner)?;
        if driver.spec.storage_capacity != Some(true) {
            return None;
        }
        let name = class.metadata.name.as_deref().unwrap_or("");
        let all = self.objects.csi_storage_capacities();
        Some(
            all.iter()
                .filter(|c| c.storage_class_name == name)
                .map(|c| StorageCapacity::new(c))
                .collect(),
        )
    }

    /// Upstream `IsDelayBindingMode`: the claim's class waits for the first
    /// consumer. No class, or an unknown one, binds immediately; a class
    /// without a binding mode is an error.
    fn is_delay_binding(&self, pvc: &PersistentVolumeClaim) -> Result<bool, Status> {
        let name = claim_class(pvc);
        if name.is_empty() {
            return Ok(false);
        }
        let Some(class) = self.objects.storage_class(name) else { return Ok(false) };
        match class.volume_binding_mode.as_deref() {
            None => {
                Err(Status::error(format!("VolumeBindingMode not set for StorageClass {name:?}")))
            }
            Some(mode) => Ok(mode == WAIT_FOR_FIRST_CONSUMER),
        }
    }
}

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        names::VOLUME_BINDING
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                EventResource::StorageClass,
                ActionType::ADD | ActionType::UPDATE,
                is_schedulable_after_storage_class_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::PersistentVolumeClaim,
                ActionType::ADD | ActionType::UPDATE,
                queue_if_pod_uses_claim,
            ),
            ClusterEventWithHint::new(
                EventResource::PersistentVolume,
                ActionType::ADD | ActionType::UPDATE,
            ),
            ClusterEventWithHint::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::CSINode,
                ActionType::ADD | ActionType::UPDATE,
                is_schedulable_after_csi_node_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::CSIDriver,
                ActionType::UPDATE,
                is_schedulable_after_csi_driver_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::CSIStorageCapacity,
                ActionType::ADD | ActionType::UPDATE,
                is_schedulable_after_csi_storage_capacity_change,
            ),
        ]
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
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

impl PreFilterPlugin for VolumeBinding {
    /// Skip without claims. UnschedulableAndUnresolvable: a claim missing
    /// (`persistentvolumeclaim "x" not found`; for an ephemeral volume
    /// `waiting for ephemeral volume controller to create the
    /// persistentvolumeclaim "p-v"`), lost, being deleted, not the pod's,
    /// or unbound with a class that binds immediately (`pod has unbound
    /// immediate PersistentVolumeClaims`). Error: a class without a
    /// binding mode. Otherwise Success, with the delayed claims and the
    /// candidate volumes of their classes captured (assumed ones as
    /// assumed) for Filter.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        let claims = match self.claims_of(pod) {
            Err(message) => return (None, Status::unresolvable(message)),
            Ok(None) => return (None, Status::skip()),
            Ok(Some(c)) => c,
        };
        let (mut bound, mut delayed, mut immediate) = (Vec::new(), Vec::new(), false);
        let assumed = self.assumed.view();
        for PodClaim { pvc, .. } in claims {
            if claim_is_fully_bound(&pvc) {
                bound.push(match self.objects.pv(claim_volume_name(&pvc)) {
                    None => BoundVolume::Missing,
                    Some(pv) => BoundVolume::Affinity(pv_node_affinity(&pv)),
                });
                continue;
            }
            match self.is_delay_binding(&pvc) {
                Err(s) => return (None, s),
                Ok(true) if claim_volume_name(&pvc).is_empty() => {
                    let node = assumed.claim_node(
                        namespace_of(&pvc.metadata),
                        pvc.metadata.name.as_deref().unwrap_or(""),
                    );
                    let class = claim_class(&pvc).to_string();
                    delayed.push(DelayedClaim::new(pvc, &class, node));
                }
                Ok(_) => immediate = true,
            }
        }
        if immediate {
            return (None, Status::unresolvable(ERR_REASON_UNBOUND_IMMEDIATE));
        }
        // Upstream sorts by request in `findMatchingVolumes` (not stably;
        // Convoy keeps volume order among equal requests).
        delayed.sort_by_key(|c| c.request);
        let (mut pvs, mut classes, mut capacities) =
            (BTreeMap::new(), Classes::new(), Capacities::new());
        for c in &delayed {
            if pvs.contains_key(&c.class) {
                continue;
            }
            let class = self.objects.storage_class(&c.class);
            let candidates = self
                .objects
                .pvs_of_class(&c.class)
                .into_iter()
                .map(|pv| {
                    let taken = assumed.pv_claim(pv.metadata.name.as_deref().unwrap_or(""));
                    Candidate::new(pv, taken)
                })
                .collect();
            pvs.insert(c.class.clone(), candidates);
            let tracked = class.as_ref().and_then(|class| self.capacities_of(class));
            capacities.insert(c.class.clone(), tracked);
            classes.insert(c.class.clone(), class);
        }
        drop(assumed);
        state.write(PreFilterState {
            bound,
            delayed,
            pvs,
            classes,
            capacities,
            by_node: Mutex::default(),
        });
        (None, Status::success())
    }
}

impl FilterPlugin for VolumeBinding {
    /// UnschedulableAndUnresolvable with upstream's reasons, in its order:
    /// `node(s) didn't match PersistentVolume's node affinity` (a bound
    /// claim's volume), `node(s) didn't find available persistent volumes
    /// to bind` (a delayed claim with neither a matching volume nor a
    /// provisioner for the node, or selected for another node), `node(s)
    /// unavailable due to one or more pvc(s) bound to non-existent pv(s)`.
    /// Error: a delayed claim's class does not exist.
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<PreFilterState>() else {
            return Status::success();
        };
        let labels = node.node().and_then(|n| n.metadata.labels.as_ref());
        // Upstream `checkBoundClaims`: the first bound claim that fails
        // decides.
        let (mut node_conflict, mut pv_missing) = (false, false);
        for b in &st.bound {
            match b {
                BoundVolume::Missing => {
                    pv_missing = true;
                    break;
                }
                BoundVolume::Affinity(Some(a)) if !pv_affinity_matches(a, labels) => {
                    node_conflict = true;
                    break;
                }
                BoundVolume::Affinity(_) => {}
            }
        }
        let mut reasons: Vec<&'static str> = Vec::new();
        if node_conflict {
            reasons.push(ERR_REASON_NODE_CONFLICT);
        }
        if !st.delayed.is_empty() {
            let supply = Supply { pvs: &st.pvs, classes: &st.classes, capacities: &st.capacities };
            match find_pod_volumes(&st.delayed, supply, node.name(), labels) {
                Ok(volumes) if reasons.is_empty() && !pv_missing => {
                    let choice = NodeChoice { volumes, node: node.node().cloned() };
                    st.by_node
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(node.name().to_string(), choice);
                }
                Ok(_) => {}
                Err(Ok(reason)) => reasons.push(reason),
                Err(Err(message)) => return Status::error(message),
            }
        }
        if pv_missing {
            reasons.push(ERR_REASON_PV_NOT_EXIST);
        }
        let mut reasons = reasons.into_iter();
        let Some(first) = reasons.next() else { return Status::success() };
        let mut status = Status::unresolvable(first);
        for r in reasons {
            status.push_reason(r);
        }
        status
    }
}

impl PreScorePlugin for VolumeBinding {
    /// Skip unless Filter chose existing volumes, or provisions against a
    /// published capacity, on some node (upstream, StorageCapacityScoring
    /// on, skips only pods without claims; its scores are then all 0, so
    /// skipping is the same).
    fn pre_score(
        &self,
        state: &mut CycleState,
        _pod: &PodInfo,
        _feasible: &[&NodeInfo],
        _all: &dyn NodeInfoLister,
    ) -> Status {
        // Kubernetes 1.34 to 1.36 score nothing here: the Score is behind
        // `StorageCapacityScoring`, alpha and off until 1.37. Convoy scores
        // as the server's version does.
        if !self.objects.served_apis().server_at_least(37) {
            return Status::skip();
        }
        let has_static = state.read::<PreFilterState>().is_some_and(|st| {
            st.by_node.lock().unwrap_or_else(|e| e.into_inner()).values().any(|c| {
                !c.volumes.static_bindings.is_empty()
                    || c.volumes.dynamic_provisions.iter().any(|p| p.node_capacity.is_some())
            })
        });
        if has_static { Status::success() } else { Status::skip() }
    }
}

impl ScorePlugin for VolumeBinding {
    /// [`scorer::score`] of Filter's choice on the node (0 without one).
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(st) = state.read::<PreFilterState>() else { return Ok(0) };
        let by_node = st.by_node.lock().unwrap_or_else(|e| e.into_inner());
        Ok(by_node.get(node.name()).map_or(0, |c| scorer::score(&self.shape, &c.volumes)))
    }
}

impl ReservePlugin for VolumeBinding {
    /// Upstream `AssumePodVolumes`: Filter's choice on the node for the
    /// delayed claims, assumed. Success; Error `no pod volume found for
    /// node "n"` if Filter made none there.
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        let chosen = match state.read::<PreFilterState>() {
            Some(st) if !st.delayed.is_empty() => {
                let by_node = st.by_node.lock().unwrap_or_else(|e| e.into_inner());
                match by_node.get(node) {
                    Some(c) => c.clone(),
                    None => return Status::error(format!("no pod volume found for node {node:?}")),
                }
            }
            // Every claim bound already (upstream's `allBound`): nothing to
            // assume, nothing for PreBind.
            _ => return Status::success(),
        };
        self.assumed.assume(&pod.uid, &chosen.volumes, node);
        state.write(Reserved(chosen));
        Status::success()
    }

    /// Upstream `RevertAssumedPodVolumes`.
    fn unreserve(&self, _state: &mut CycleState, pod: &PodInfo, _node: &str) {
        self.assumed.forget(&pod.uid);
    }
}

impl PreBindPlugin for VolumeBinding {
    /// Upstream `BindPodVolumes`: writes each chosen volume's claim and each
    /// claim's selected node, then waits until all are bound. Success at
    /// once when nothing was to bind; Error (the pod is unreserved and
    /// retried) when a write fails, a binding is undone (`ClaimRef got
    /// reset for pv "x"`, `provisioning failed for PVC "x"`,
    /// `selectedNode annotation reset for PVC "x"`, `pv "x" node affinity
    /// doesn't match node "n": ...`) or `bindTimeoutSeconds` passes, as
    /// `binding volumes: ...`.
    fn pre_bind(
        &self,
        state: Arc<CycleState>,
        pod: Arc<PodInfo>,
        node: Arc<str>,
    ) -> BoxFuture<'static, Status> {
        let Some(Reserved(choice)) = state.read::<Reserved>() else {
            return Box::pin(std::future::ready(Status::success()));
        };
        let NodeChoice { volumes, node: node_object } = choice.clone();
        let labels = node_object.and_then(|n| n.metadata.labels.clone()).unwrap_or_default();
        let binder = Arc::clone(&self.binder);
        let objects = Arc::clone(&self.objects);
        let assumed = Arc::clone(&self.assumed);
        let timeout = Duration::from_secs(self.args.bind_timeout_seconds.max(0) as u64);
        Box::pin(async move {
            let status =
                bind_pod_volumes(&*binder, &*objects, volumes, &node, &labels, timeout).await;
            if status.is_success() {
                // The watched objects now say what was assumed.
                assumed.forget(&pod.uid);
            }
            status
        })
    }
}

/// Queue when a class is added or its allowed topologies changed.
fn is_schedulable_after_storage_class_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (Some(old), Some(new)) = (event_storage_class(old), event_storage_class(new)) else {
        return QueueingHint::Queue;
    };
    if old.allowed_topologies == new.allowed_topologies {
        QueueingHint::Skip
    } else {
        QueueingHint::Queue
    }
}

/// Queue when a CSINode is added or its migrated-plugins annotation
/// changed.
fn is_schedulable_after_csi_node_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (Some(old), Some(new)) = (event_csi_node(old), event_csi_node(new)) else {
        return QueueingHint::Queue;
    };
    let migrated = |c: &k8s_openapi::api::storage::v1::CSINode| {
        c.metadata.annotations.as_ref().and_then(|a| a.get(ANN_MIGRATED_PLUGINS)).cloned()
    };
    if migrated(old) == migrated(new) { QueueingHint::Skip } else { QueueingHint::Queue }
}

/// Queue when a CSIStorageCapacity is added or its volume limit
/// (`maximumVolumeSize`, else `capacity`) grew (upstream
/// `isSchedulableAfterCSIStorageCapacityChange`).
fn is_schedulable_after_csi_storage_capacity_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (Some(old), Some(new)) = (event_csi_storage_capacity(old), event_csi_storage_capacity(new))
    else {
        return QueueingHint::Queue;
    };
    let limit = |c: &CSIStorageCapacity| {
        c.maximum_volume_size
            .as_ref()
            .or(c.capacity.as_ref())
            .and_then(|q| convoy_api::resource::parse_value(&q.0).ok())
    };
    match (limit(old), limit(new)) {
        (_, None) => QueueingHint::Skip,
        (None, Some(_)) => QueueingHint::Queue,
        (Some(o), Some(n)) if n > o => QueueingHint::Queue,
        _ => QueueingHint::Skip,
    }
}

/// Queue when a CSIDriver that a CSI inline volume of the pod uses stops
/// publishing its capacity (upstream `isSchedulableAfterCSIDriverChange`).
fn is_schedulable_after_csi_driver_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (Some(old), Some(new)) = (event_csi_driver(old), event_csi_driver(new)) else {
        return QueueingHint::Queue;
    };
    let tracks = |d: &CSIDriver| d.spec.storage_capacity == Some(true);
    let name = new.metadata.name.as_deref().unwrap_or("");
    let uses =
        pod_volumes(&pod.pod).iter().any(|v| v.csi.as_ref().is_some_and(|c| c.driver == name));
    if uses && tracks(old) && !tracks(new) { QueueingHint::Queue } else { QueueingHint::Skip }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod wfc_tests;
