//! VolumeBinding: a pod's PersistentVolumeClaims (and generic ephemeral
//! volumes' claims) must exist, and their bound PersistentVolumes must be
//! reachable from the node (upstream `plugins/volumebinding`, v1.37.2:
//! `volume_binding.go` PreFilter/Filter, `binder.go` `GetPodVolumeClaims`
//! and `checkBoundClaims`).
//!
//! What Convoy does not do yet: bind claims whose StorageClass waits for
//! the first consumer (`WaitForFirstConsumer`; upstream finds a matching
//! PV or provisions one in Filter, assumes it in Reserve and binds it in
//! PreBind). A pod with such an unbound claim is refused, with a message
//! naming the volume, never scheduled as if the claim were absent. No
//! Score either: without those bindings upstream's score is 0 on every
//! node. A bound in-tree PV is not translated to CSI (whose node affinity
//! upstream then adds on nodes that migrated the plugin).

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use convoy_api::objects::volumes::ANN_MIGRATED_PLUGINS;
use convoy_api::{
    ActionType, ClusterEventWithHint, ClusterObjects, CycleState, EventObject, EventResource,
    FilterPlugin, NodeInfo, NodeInfoLister, Plugin, PodInfo, PreFilterPlugin, PreFilterResult,
    QueueingHint, Status, names,
};
use convoy_config::{PluginArgs, VolumeBindingArgs};

use crate::node_affinity::selector::CompiledNodeSelector;
use crate::volumes::{
    WAIT_FOR_FIRST_CONSUMER, claim_class, claim_is_for_pod, claim_is_fully_bound,
    claim_volume_name, event_csi_node, event_storage_class, pod_volumes, pv_affinity_matches,
    pv_node_affinity, pvc_not_found, queue_if_pod_uses_claim, volume_claim,
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

/// The VolumeBinding plugin.
#[derive(Debug)]
pub struct VolumeBinding {
    objects: Arc<ClusterObjects>,
    /// Kept for the binding and the Score to come; nothing reads them yet.
    args: VolumeBindingArgs,
}

impl VolumeBinding {
    /// The plugin, reading claims, volumes and classes from `objects`.
    pub fn new(objects: Arc<ClusterObjects>) -> Self {
        Self { objects, args: VolumeBindingArgs::default() }
    }

    /// The plugin with `VolumeBindingArgs` (validated by the configuration;
    /// `None`: upstream's defaults).
    pub fn with_args(
        args: Option<&PluginArgs>,
        objects: Arc<ClusterObjects>,
    ) -> Result<Self, String> {
        let args = match args {
            None => VolumeBindingArgs::default(),
            Some(PluginArgs::VolumeBinding(a)) => a.clone(),
            Some(other) => return Err(format!("want VolumeBindingArgs, got {other:?}")),
        };
        Ok(Self { objects, args })
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

/// A claim of the pod: the index of the volume that uses it, whether that
/// volume is `ephemeral`, and the claim.
struct PodClaim {
    index: usize,
    ephemeral: bool,
    pvc: Arc<PersistentVolumeClaim>,
}

/// PreFilter state: the pod's bound claims' volumes, in volume order.
struct PreFilterState(Vec<BoundVolume>);

/// A claim of the pod that is not bound and whose class waits for the
/// first consumer: which volume uses it, for the refusal message.
struct Delayed {
    index: usize,
    ephemeral: bool,
    claim: String,
    class: String,
}

impl Delayed {
    /// `pod uses spec.volumes[0].persistentVolumeClaim "data" with
    /// WaitForFirstConsumer StorageClass "local", whose binding this
    /// scheduler does not perform yet`.
    fn refusal(delayed: &[Delayed]) -> String {
        let d = &delayed[0];
        let volume = if d.ephemeral {
            format!("spec.volumes[{}].ephemeral (claim {:?})", d.index, d.claim)
        } else {
            format!("spec.volumes[{}].persistentVolumeClaim {:?}", d.index, d.claim)
        };
        let more = match delayed.len() {
            1 => String::new(),
            n => format!(" (and {} more such claim{})", n - 1, if n == 2 { "" } else { "s" }),
        };
        format!(
            "pod uses {volume} with {WAIT_FOR_FIRST_CONSUMER} StorageClass {:?}{more}, whose \
             binding this scheduler does not perform yet",
            d.class
        )
    }
}

impl VolumeBinding {
    /// Upstream `podHasPVCs`: every claim exists, is not lost or being
    /// deleted, and an ephemeral volume's claim is the pod's. `Ok(None)`
    /// when the pod uses no claim.
    fn claims_of(&self, pod: &PodInfo) -> Result<Option<Vec<PodClaim>>, String> {
        let mut claims = Vec::new();
        for (i, v) in pod_volumes(&pod.pod).iter().enumerate() {
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
            claims.push(PodClaim { index: i, ephemeral, pvc });
        }
        Ok((!claims.is_empty()).then_some(claims))
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
        ]
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeBinding {
    /// Skip without claims. UnschedulableAndUnresolvable: a claim missing
    /// (`persistentvolumeclaim "x" not found`; for an ephemeral volume
    /// `waiting for ephemeral volume controller to create the
    /// persistentvolumeclaim "p-v"`), lost, being deleted, not the pod's,
    /// or unbound with a class that binds immediately (`pod has unbound
    /// immediate PersistentVolumeClaims`); and Convoy's refusal of unbound
    /// `WaitForFirstConsumer` claims. Error: a class without a binding
    /// mode.
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
        for PodClaim { index, ephemeral, pvc } in claims {
            if claim_is_fully_bound(&pvc) {
                bound.push(match self.objects.pv(claim_volume_name(&pvc)) {
                    None => BoundVolume::Missing,
                    Some(pv) => BoundVolume::Affinity(pv_node_affinity(&pv)),
                });
                continue;
            }
            match self.is_delay_binding(&pvc) {
                Err(s) => return (None, s),
                Ok(true) if claim_volume_name(&pvc).is_empty() => delayed.push(Delayed {
                    index,
                    ephemeral,
                    claim: pvc.metadata.name.clone().unwrap_or_default(),
                    class: claim_class(&pvc).to_string(),
                }),
                Ok(_) => immediate = true,
            }
        }
        if immediate {
            return (None, Status::unresolvable(ERR_REASON_UNBOUND_IMMEDIATE));
        }
        if !delayed.is_empty() {
            return (None, Status::unresolvable(Delayed::refusal(&delayed)));
        }
        state.write(PreFilterState(bound));
        (None, Status::success())
    }
}

impl FilterPlugin for VolumeBinding {
    /// UnschedulableAndUnresolvable `node(s) didn't match PersistentVolume's
    /// node affinity` or `node(s) unavailable due to one or more pvc(s)
    /// bound to non-existent pv(s)` (the first bound claim that fails
    /// decides, as upstream's `checkBoundClaims`).
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(PreFilterState(bound)) = state.read::<PreFilterState>() else {
            return Status::success();
        };
        let labels = node.node().and_then(|n| n.metadata.labels.as_ref());
        for b in bound {
            match b {
                BoundVolume::Missing => return Status::unresolvable(ERR_REASON_PV_NOT_EXIST),
                BoundVolume::Affinity(Some(a)) if !pv_affinity_matches(a, labels) => {
                    return Status::unresolvable(ERR_REASON_NODE_CONFLICT);
                }
                BoundVolume::Affinity(_) => {}
            }
        }
        Status::success()
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

#[cfg(test)]
mod tests;
