//! VolumeZone: a pod's bound PersistentVolumes labelled with a zone or a
//! region only fit nodes in it (upstream `plugins/volumezone`, v1.37.2).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;

use convoy_api::{
    ActionType, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    NodeInfo, NodeInfoLister, ObjectLister, Plugin, PodInfo, PreFilterPlugin, PreFilterResult,
    QueueingHint, Status, names,
};

use crate::helper::volumes::{
    WAIT_FOR_FIRST_CONSUMER, claim_class, claim_volume_name, event_pv, event_storage_class,
    pod_claim_names, pv_not_found, pvc_not_found, queue_if_pod_names_claim,
    storage_class_not_found,
};

/// Reason when a node is outside a bound volume's zone or region.
pub const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";

/// `failure-domain.beta.kubernetes.io/zone` (deprecated).
pub const LABEL_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// `failure-domain.beta.kubernetes.io/region` (deprecated).
pub const LABEL_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
/// `topology.kubernetes.io/zone`.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// `topology.kubernetes.io/region`.
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";

/// The labels compared, in upstream's order.
const TOPOLOGY_LABELS: [&str; 4] = [LABEL_BETA_ZONE, LABEL_BETA_REGION, LABEL_ZONE, LABEL_REGION];

/// The VolumeZone plugin.
#[derive(Debug)]
pub struct VolumeZone {
    objects: Arc<dyn ObjectLister>,
}

impl VolumeZone {
    /// The plugin, reading claims, volumes and classes from `objects`.
    pub fn new(objects: Arc<dyn ObjectLister>) -> Self {
        Self { objects }
    }
}

/// One topology label of a bound volume: the key and the values allowed
/// (a `__`-separated set in the label value).
#[derive(Debug, Clone, PartialEq, Eq)]
struct PvTopology {
    key: &'static str,
    values: BTreeSet<String>,
}

/// PreFilter state: the topologies of the pod's bound volumes.
struct PreFilterState(Vec<PvTopology>);

/// Upstream `translateToGALabel`.
fn to_ga_label(key: &str) -> &str {
    match key {
        LABEL_BETA_REGION => LABEL_REGION,
        LABEL_BETA_ZONE => LABEL_ZONE,
        other => other,
    }
}

/// Upstream `LabelZonesToSet`: `a__b` is `{a, b}`; an empty element makes
/// the label unusable (skipped).
fn zones_to_set(value: &str) -> Option<BTreeSet<String>> {
    value
        .split("__")
        .map(|z| {
            let z = z.trim();
            (!z.is_empty()).then(|| z.to_string())
        })
        .collect()
}

/// Upstream `getPVTopologies`.
fn pv_topologies(pv: &PersistentVolume) -> Vec<PvTopology> {
    let Some(labels) = pv.metadata.labels.as_ref() else { return Vec::new() };
    TOPOLOGY_LABELS
        .iter()
        .filter_map(|key| {
            let values = zones_to_set(labels.get(*key)?)?;
            Some(PvTopology { key, values })
        })
        .collect()
}

impl VolumeZone {
    /// Upstream `getPVbyPod`.
    fn pv_topologies_of(&self, pod: &PodInfo) -> Result<Vec<PvTopology>, Status> {
        let mut out = Vec::new();
        for name in pod_claim_names(&pod.pod) {
            if name.is_empty() {
                return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
            }
            let pvc = self
                .objects
                .pvc(pod.namespace(), name)
                .ok_or_else(|| Status::unresolvable(pvc_not_found(name)))?;
            let pv_name = claim_volume_name(&pvc);
            if pv_name.is_empty() {
                let class_name = claim_class(&pvc);
                if class_name.is_empty() {
                    return Err(Status::unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name",
                    ));
                }
                let class = self
                    .objects
                    .storage_class(class_name)
                    .ok_or_else(|| Status::unresolvable(storage_class_not_found(class_name)))?;
                match class.volume_binding_mode.as_deref() {
                    None => {
                        return Err(Status::unresolvable(format!(
                            "VolumeBindingMode not set for StorageClass {class_name:?}"
                        )));
                    }
                    Some(WAIT_FOR_FIRST_CONSUMER) => continue,
                    Some(_) => return Err(Status::unresolvable("PersistentVolume had no name")),
                }
            }
            let pv = self
                .objects
                .pv(pv_name)
                .ok_or_else(|| Status::unresolvable(pv_not_found(pv_name)))?;
            out.extend(pv_topologies(&pv));
        }
        Ok(out)
    }
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        names::VOLUME_ZONE
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                EventResource::StorageClass,
                ActionType::ADD,
                is_schedulable_after_storage_class_added,
            ),
            ClusterEventWithHint::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::PersistentVolumeClaim,
                ActionType::ADD | ActionType::UPDATE,
                queue_if_pod_names_claim,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::PersistentVolume,
                ActionType::ADD | ActionType::UPDATE,
                is_schedulable_after_pv_change,
            ),
        ]
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeZone {
    /// UnschedulableAndUnresolvable when a claim, its volume or its class
    /// is missing or incomplete (upstream's texts); Skip when no bound
    /// volume has a topology label.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        match self.pv_topologies_of(pod) {
            Err(s) => (None, s),
            Ok(t) if t.is_empty() => (None, Status::skip()),
            Ok(t) => {
                state.write(PreFilterState(t));
                (None, Status::success())
            }
        }
    }
}

impl FilterPlugin for VolumeZone {
    /// UnschedulableAndUnresolvable `node(s) had no available volume zone`;
    /// a node without any zone or region label passes (single-zone
    /// clusters).
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(PreFilterState(topologies)) = state.read::<PreFilterState>() else {
            return Status::success();
        };
        let Some(labels) = node.node().and_then(|n| n.metadata.labels.as_ref()) else {
            return Status::success();
        };
        if !TOPOLOGY_LABELS.iter().any(|l| labels.contains_key(*l)) {
            return Status::success();
        }
        for t in topologies {
            let v = labels.get(t.key).or_else(|| labels.get(to_ga_label(t.key)));
            if !v.is_some_and(|v| t.values.contains(v)) {
                return Status::unresolvable(ERR_REASON_CONFLICT);
            }
        }
        Status::success()
    }
}

/// Queue when the added class binds on first consumer.
fn is_schedulable_after_storage_class_added(
    _pod: &PodInfo,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(class) = event_storage_class(new) else { return QueueingHint::Queue };
    if class.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER) {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

/// Queue when a volume is added, or its topology labels changed.
fn is_schedulable_after_pv_change(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (Some(old), Some(new)) = (event_pv(old), event_pv(new)) else {
        return QueueingHint::Queue;
    };
    if pv_topologies(old) == pv_topologies(new) { QueueingHint::Skip } else { QueueingHint::Queue }
}

#[cfg(test)]
mod tests;
