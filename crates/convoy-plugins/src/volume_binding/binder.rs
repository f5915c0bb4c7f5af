//! Finding volumes for a pod's delayed claims on one node (upstream
//! `binder.go` `FindPodVolumes`, `findMatchingVolumes`,
//! `checkVolumeProvisions`, and `component-helpers/storage/volume`
//! `FindMatchingVolume`, v1.37.2). Pure: it reads what PreFilter captured.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};

use convoy_api::ClaimRef;
use convoy_api::labels::Selector;
use convoy_api::objects::volumes::ANN_SELECTED_NODE;
use convoy_api::resource::parse_value;

use crate::helper::node_affinity::CompiledNodeSelector;
use crate::helper::volumes::{namespace_of, pv_affinity_matches, pv_node_affinity};

/// Reason when no PV matches a delayed claim and it cannot be provisioned
/// on the node (upstream `ErrReasonBindConflict`).
pub const ERR_REASON_BIND_CONFLICT: &str =
    "node(s) didn't find available persistent volumes to bind";
/// Reason when the node cannot reach enough free storage for a claim to
/// provision (upstream `ErrReasonNotEnoughSpace`): the class's CSI driver
/// publishes its capacity and no CSIStorageCapacity of the class that the
/// node can reach has room for the claim.
pub const ERR_REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";

/// `kubernetes.io/no-provisioner`: a class of pre-provisioned volumes only
/// (upstream `NotSupportedProvisioner`).
pub const NOT_SUPPORTED_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// A delayed claim: unbound, its class waits for the first consumer.
#[derive(Debug, Clone)]
pub struct DelayedClaim {
    /// The claim.
    pub pvc: Arc<PersistentVolumeClaim>,
    /// Namespace, name and UID.
    pub key: ClaimRef,
    /// Its class name.
    pub class: String,
    /// `resources.requests.storage` in bytes (0 without one).
    pub request: i64,
    /// The node it was given to for provisioning: its annotation
    /// `volume.kubernetes.io/selected-node`, or an assumed one.
    pub selected_node: Option<String>,
    /// `spec.selector`, parsed (`None`: no selector).
    selector: Option<Selector>,
}

impl DelayedClaim {
    /// The claim, its class and the node assumed for it, if any.
    pub fn new(pvc: Arc<PersistentVolumeClaim>, class: &str, assumed: Option<&str>) -> Self {
        let spec = pvc.spec.as_ref();
        let request = spec
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage"))
            .and_then(|q| parse_value(&q.0).ok())
            .unwrap_or(0);
        // An invalid selector selects nothing (upstream returns an error,
        // which fails the node).
        let selector = spec
            .and_then(|s| s.selector.as_ref())
            .map(|sel| Selector::from_label_selector(Some(sel)).unwrap_or(Selector::Nothing));
        let selected_node = assumed.map(str::to_string).or_else(|| {
            pvc.metadata.annotations.as_ref().and_then(|a| a.get(ANN_SELECTED_NODE)).cloned()
        });
        let key = ClaimRef {
            namespace: namespace_of(&pvc.metadata).to_string(),
            name: pvc.metadata.name.clone().unwrap_or_default(),
            uid: pvc.metadata.uid.clone().unwrap_or_default(),
        };
        Self { key, class: class.to_string(), request, selected_node, selector, pvc }
    }

    /// Whether the claim requests storage at all (upstream checks no
    /// capacity for a claim without a request).
    fn requests_storage(&self) -> bool {
        self.pvc
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .is_some_and(|r| r.contains_key("storage"))
    }

    fn access_modes(&self) -> &[String] {
        self.pvc.spec.as_ref().and_then(|s| s.access_modes.as_deref()).unwrap_or(&[])
    }

    fn volume_mode(&self) -> &str {
        self.pvc.spec.as_ref().and_then(|s| s.volume_mode.as_deref()).unwrap_or("Filesystem")
    }

    fn attributes_class(&self) -> &str {
        self.pvc.spec.as_ref().and_then(|s| s.volume_attributes_class_name.as_deref()).unwrap_or("")
    }
}

/// A PersistentVolume a delayed claim may get, as PreFilter captured it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The volume (as watched, not as assumed).
    pub pv: Arc<PersistentVolume>,
    /// Its name.
    pub name: String,
    /// Its claim: `spec.claimRef`, or the one a pod in flight assumed.
    pub claim_ref: Option<ClaimRef>,
    /// `capacity.storage` in bytes.
    pub capacity: i64,
    affinity: Option<CompiledNodeSelector>,
}

impl Candidate {
    /// The volume, with the claim a pod in flight assumed for it, if any.
    pub fn new(pv: Arc<PersistentVolume>, assumed: Option<&ClaimRef>) -> Self {
        let spec = pv.spec.as_ref();
        let claim_ref = assumed.cloned().or_else(|| {
            spec.and_then(|s| s.claim_ref.as_ref()).map(|r| ClaimRef {
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
                uid: r.uid.clone().unwrap_or_default(),
            })
        });
        let capacity = spec
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .and_then(|q| parse_value(&q.0).ok())
            .unwrap_or(0);
        Self {
            name: pv.metadata.name.clone().unwrap_or_default(),
            affinity: pv_node_affinity(&pv),
            claim_ref,
            capacity,
            pv,
        }
    }

    /// Upstream `IsVolumeBoundToClaim`.
    fn bound_to(&self, claim: &ClaimRef) -> bool {
        self.claim_ref.as_ref().is_some_and(|r| {
            r.name == claim.name
                && r.namespace == claim.namespace
                && (r.uid.is_empty() || r.uid == claim.uid)
        })
    }

    fn spec_str(
        &self,
        f: impl Fn(&k8s_openapi::api::core::v1::PersistentVolumeSpec) -> Option<&str>,
    ) -> &str {
        self.pv.spec.as_ref().and_then(f).unwrap_or("")
    }
}

/// A claim given an existing volume (upstream `BindingInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticBinding {
    /// The volume.
    pub pv: String,
    /// Its resourceVersion when chosen.
    pub resource_version: Option<String>,
    /// The claim.
    pub claim: ClaimRef,
    /// The volume's class (upstream `StorageClassName()`).
    pub class: String,
    /// The claim's request and the volume's capacity, in bytes (upstream
    /// `StorageResource()`).
    pub requested: i64,
    /// See `requested`.
    pub capacity: i64,
}

/// A claim to provision on the node (upstream `DynamicProvision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicProvision {
    /// The claim.
    pub claim: ClaimRef,
    /// Its resourceVersion when chosen.
    pub resource_version: Option<String>,
    /// Its class.
    pub class: String,
    /// Its storage request in bytes.
    pub requested: i64,
    /// `capacity` of the CSIStorageCapacity that has room for it (upstream
    /// `NodeCapacity`); `None` when the driver publishes no capacity.
    pub node_capacity: Option<i64>,
}

/// What a pod's delayed claims get on one node (upstream `PodVolumes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodVolumes {
    /// Claims bound to existing volumes.
    pub static_bindings: Vec<StaticBinding>,
    /// Claims to provision on the node.
    pub dynamic_provisions: Vec<DynamicProvision>,
}

/// The classes of the delayed claims (`None`: not found).
pub type Classes = HashMap<String, Option<Arc<StorageClass>>>;

/// One CSIStorageCapacity, as the capacity check reads it.
#[derive(Debug, Clone)]
pub struct StorageCapacity {
    /// `maximumVolumeSize`, else `capacity`, in bytes (upstream
    /// `volumeLimit`); `None`: neither is set.
    limit: Option<i64>,
    /// `capacity` in bytes (what Score compares the request to; 0 when
    /// unset).
    capacity: i64,
    /// `nodeTopology`; `None`: unset or invalid (no node reaches it).
    topology: Option<Selector>,
}

impl StorageCapacity {
    /// The object's limit, capacity and topology.
    pub fn new(c: &CSIStorageCapacity) -> Self {
        let bytes = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
            q.and_then(|q| parse_value(&q.0).ok())
        };
        Self {
            limit: bytes(c.maximum_volume_size.as_ref().or(c.capacity.as_ref())),
            capacity: bytes(c.capacity.as_ref()).unwrap_or(0),
            topology: c
                .node_topology
                .as_ref()
                .and_then(|t| Selector::from_label_selector(Some(t)).ok()),
        }
    }

    /// Upstream `capacitySufficient` and `nodeHasAccess`.
    fn fits(&self, request: i64, labels: Option<&BTreeMap<String, String>>) -> bool {
        let no_labels = BTreeMap::new();
        self.limit.is_some_and(|l| l >= request)
            && self.topology.as_ref().is_some_and(|t| t.matches(labels.unwrap_or(&no_labels)))
    }
}

/// Per class of the delayed claims: the CSIStorageCapacities of the class,
/// in namespace and name order, when its provisioner is a CSI driver with
/// `storageCapacity: true` (`None`: capacity is not checked).
pub type Capacities = HashMap<String, Option<Vec<StorageCapacity>>>;

/// What the delayed claims of a pod may get, as PreFilter captured it:
/// the candidate volumes per class, the classes, and their capacities.
#[derive(Debug, Clone, Copy)]
pub struct Supply<'a> {
    /// Candidate volumes per class.
    pub pvs: &'a BTreeMap<String, Vec<Candidate>>,
    /// The classes.
    pub classes: &'a Classes,
    /// The classes' published capacities.
    pub capacities: &'a Capacities,
}

/// Upstream `FindPodVolumes` for the delayed claims (sorted by request,
/// as `findMatchingVolumes` sorts them): the chosen volumes and
/// provisions, or the reason the node does not fit. `Err(Err(message))`
/// is an internal error (a claim without class, a class not found).
pub fn find_pod_volumes(
    claims: &[DelayedClaim],
    supply: Supply<'_>,
    node: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<PodVolumes, Result<&'static str, String>> {
    let Supply { pvs, classes, capacities } = supply;
    let mut to_match = Vec::new();
    let mut to_provision = Vec::new();
    for c in claims {
        match &c.selected_node {
            Some(n) if n != node => return Err(Ok(ERR_REASON_BIND_CONFLICT)),
            Some(_) => to_provision.push(c),
            None => to_match.push(c),
        }
    }
    let mut result = PodVolumes::default();
    let mut chosen = HashSet::new();
    for c in to_match {
        let candidates = pvs.get(&c.class).map(Vec::as_slice).unwrap_or(&[]);
        match find_matching_volume(c, candidates, labels, &chosen) {
            Some(pv) => {
                chosen.insert(pv.name.as_str());
                result.static_bindings.push(StaticBinding {
                    pv: pv.name.clone(),
                    resource_version: pv.pv.metadata.resource_version.clone(),
                    claim: c.key.clone(),
                    class: pv.spec_str(|s| s.storage_class_name.as_deref()).to_string(),
                    requested: c.request,
                    capacity: pv.capacity,
                });
            }
            // Upstream's "no match" is replaced by the provisioning
            // check's own verdict.
            None => to_provision.push(c),
        }
    }
    for c in to_provision {
        if c.class.is_empty() {
            return Err(Err(format!("no class for claim \"{}/{}\"", c.key.namespace, c.key.name)));
        }
        let Some(Some(class)) = classes.get(&c.class) else {
            return Err(Err(format!("failed to find storage class {:?}", c.class)));
        };
        if class.provisioner.is_empty() || class.provisioner == NOT_SUPPORTED_PROVISIONER {
            return Err(Ok(ERR_REASON_BIND_CONFLICT));
        }
        if !topology_matches(class, labels) {
            return Err(Ok(ERR_REASON_BIND_CONFLICT));
        }
        // Upstream `hasEnoughCapacity`: the first capacity of the class
        // with room for the claim that the node reaches.
        let node_capacity = match capacities.get(&c.class) {
            Some(Some(list)) if c.requests_storage() => {
                match list.iter().find(|cap| cap.fits(c.request, labels)) {
                    Some(cap) => Some(cap.capacity),
                    None => return Err(Ok(ERR_REASON_NOT_ENOUGH_SPACE)),
                }
            }
            _ => None,
        };
        result.dynamic_provisions.push(DynamicProvision {
            claim: c.key.clone(),
            resource_version: c.pvc.metadata.resource_version.clone(),
            class: c.class.clone(),
            requested: c.request,
            node_capacity,
        });
    }
    Ok(result)
}

/// Upstream `FindMatchingVolume` on the scheduler's path (a node given,
/// delayed binding, VolumeAttributesClass on): a volume pre-bound to the
/// claim wins (none if its node affinity fails); otherwise the smallest
/// available volume of the class with enough capacity, the claim's volume
/// mode, attributes class and access modes, matching the claim's selector
/// and the node. Ties: the first in name order.
pub fn find_matching_volume<'a>(
    claim: &DelayedClaim,
    candidates: &'a [Candidate],
    labels: Option<&BTreeMap<String, String>>,
    excluded: &HashSet<&str>,
) -> Option<&'a Candidate> {
    let mut smallest: Option<&Candidate> = None;
    for pv in candidates {
        if excluded.contains(pv.name.as_str()) {
            continue;
        }
        if pv.claim_ref.is_some() && !pv.bound_to(&claim.key) {
            continue;
        }
        if pv.capacity < claim.request {
            continue;
        }
        let mode = pv.spec_str(|s| s.volume_mode.as_deref());
        if (if mode.is_empty() { "Filesystem" } else { mode }) != claim.volume_mode() {
            continue;
        }
        if pv.spec_str(|s| s.volume_attributes_class_name.as_deref()) != claim.attributes_class() {
            continue;
        }
        if pv.pv.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let affinity_ok = pv.affinity.as_ref().is_none_or(|a| pv_affinity_matches(a, labels));
        if pv.bound_to(&claim.key) {
            return affinity_ok.then_some(pv);
        }
        let phase = pv.pv.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Available") {
            continue;
        }
        if let Some(sel) = &claim.selector {
            let no_labels = BTreeMap::new();
            if !sel.matches(pv.pv.metadata.labels.as_ref().unwrap_or(&no_labels)) {
                continue;
            }
        }
        if pv.spec_str(|s| s.storage_class_name.as_deref()) != claim.class || !affinity_ok {
            continue;
        }
        let modes = pv.pv.spec.as_ref().and_then(|s| s.access_modes.as_deref()).unwrap_or(&[]);
        if !claim.access_modes().iter().all(|m| modes.contains(m)) {
            continue;
        }
        if smallest.is_none_or(|s| s.capacity > pv.capacity) {
            smallest = Some(pv);
        }
    }
    smallest
}

/// Upstream `MatchTopologySelectorTerms`: no terms match every node;
/// otherwise some non-empty term whose every expression's key is a node
/// label with one of its values (an empty term selects nothing).
pub fn topology_matches(class: &StorageClass, labels: Option<&BTreeMap<String, String>>) -> bool {
    let terms = class.allowed_topologies.as_deref().unwrap_or(&[]);
    if terms.is_empty() {
        return true;
    }
    terms.iter().any(|t| {
        let exprs = t.match_label_expressions.as_deref().unwrap_or(&[]);
        !exprs.is_empty()
            && exprs
                .iter()
                .all(|e| labels.and_then(|l| l.get(&e.key)).is_some_and(|v| e.values.contains(v)))
    })
}
