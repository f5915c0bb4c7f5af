//! VolumeRestrictions: in-tree disk conflicts between the pod and the pods
//! on a node, and ReadWriteOncePod claims already in use (upstream
//! `plugins/volumerestrictions`, v1.37.2).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Volume};

use convoy_api::{
    ActionType, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    NodeInfo, NodeInfoLister, ObjectLister, Plugin, PodInfo, PreFilterExtensions, PreFilterPlugin,
    PreFilterResult, QueueingHint, Status, names,
};

use crate::helper::event_pod;
use crate::helper::volumes::{
    claim_has_access_mode, namespace_of, pod_claim_names, pod_volumes, pvc_not_found,
    queue_if_pod_names_claim,
};

/// Reason when an in-tree disk the pod uses is in use on the node.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// Reason when a ReadWriteOncePod claim of the pod is used by another pod.
pub const ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT: &str = "node(s) unavailable due to \
     PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

/// The `ReadWriteOncePod` access mode.
const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

/// The VolumeRestrictions plugin.
#[derive(Debug)]
pub struct VolumeRestrictions {
    objects: Arc<dyn ObjectLister>,
}

impl VolumeRestrictions {
    /// The plugin, reading claims from `objects`.
    pub fn new(objects: Arc<dyn ObjectLister>) -> Self {
        Self { objects }
    }
}

/// PreFilter state: the pod's ReadWriteOncePod claims, and how many uses
/// of them by pods in the snapshot there are.
#[derive(Debug, Clone)]
struct PreFilterState {
    read_write_once_pod_pvcs: Arc<BTreeSet<String>>,
    conflicting_pvc_ref_count: i64,
}

impl PreFilterState {
    /// Upstream `conflictingPVCRefCountForPod` (by claim name, as upstream).
    fn count_for_pod(&self, pod: &Pod) -> i64 {
        pod_claim_names(pod).filter(|c| self.read_write_once_pod_pvcs.contains(*c)).count() as i64
    }
}

/// Whether a volume is one of the in-tree disks checked for conflicts.
fn needs_restrictions_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

fn have_overlap(a: &[String], b: &[String]) -> bool {
    a.iter().any(|x| b.contains(x))
}

/// Upstream `isVolumeConflict`: the volume conflicts with one of `pod`'s.
fn is_volume_conflict(v: &Volume, pod: &Pod) -> bool {
    pod_volumes(pod).iter().any(|e| {
        if let (Some(d), Some(ed)) = (&v.gce_persistent_disk, &e.gce_persistent_disk)
            && d.pd_name == ed.pd_name
            && !(d.read_only == Some(true) && ed.read_only == Some(true))
        {
            return true;
        }
        if let (Some(d), Some(ed)) = (&v.aws_elastic_block_store, &e.aws_elastic_block_store)
            && d.volume_id == ed.volume_id
        {
            return true;
        }
        if let (Some(d), Some(ed)) = (&v.iscsi, &e.iscsi)
            && d.iqn == ed.iqn
            && !(d.read_only == Some(true) && ed.read_only == Some(true))
        {
            return true;
        }
        if let (Some(d), Some(ed)) = (&v.rbd, &e.rbd)
            && have_overlap(&d.monitors, &ed.monitors)
            && d.pool == ed.pool
            && d.image == ed.image
            && !(d.read_only == Some(true) && ed.read_only == Some(true))
        {
            return true;
        }
        false
    })
}

/// Upstream `satisfyVolumeConflicts`: no in-tree disk of the pod is in use
/// by a pod in `pods`.
fn satisfies_volume_conflicts<'a>(pod: &Pod, mut pods: impl Iterator<Item = &'a Pod>) -> bool {
    let disks: Vec<&Volume> =
        pod_volumes(pod).iter().filter(|v| needs_restrictions_check(v)).collect();
    disks.is_empty() || !pods.any(|e| disks.iter().any(|v| is_volume_conflict(v, e)))
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        names::VOLUME_RESTRICTIONS
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                EventResource::AssignedPod,
                ActionType::DELETE,
                is_schedulable_after_assigned_pod_deleted,
            ),
            ClusterEventWithHint::new(EventResource::Node, ActionType::ADD),
            ClusterEventWithHint::with_hint(
                EventResource::PersistentVolumeClaim,
                ActionType::ADD,
                queue_if_pod_names_claim,
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

impl PreFilterPlugin for VolumeRestrictions {
    /// UnschedulableAndUnresolvable `persistentvolumeclaim "x" not found`;
    /// Skip when the pod has no in-tree disk and none of its
    /// ReadWriteOncePod claims is in use.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        let volumes = pod_volumes(&pod.pod);
        let needs_check = volumes.iter().any(needs_restrictions_check);
        let mut rwop = BTreeSet::new();
        for name in pod_claim_names(&pod.pod) {
            let Some(pvc) = self.objects.pvc(pod.namespace(), name) else {
                return (None, Status::unresolvable(pvc_not_found(name)));
            };
            if claim_has_access_mode(&pvc, READ_WRITE_ONCE_POD) {
                rwop.insert(name.to_string());
            }
        }
        // Upstream `IsPVCUsedByPods`: a claim used by any pod in the
        // snapshot (assigned or assumed), on any node.
        let mut conflicts = 0;
        for name in &rwop {
            let used = nodes.list().iter().flat_map(|n| n.pods.iter()).any(|p| {
                p.namespace() == pod.namespace() && pod_claim_names(&p.pod).any(|c| c == name)
            });
            conflicts += i64::from(used);
        }
        if !needs_check && conflicts == 0 {
            return (None, Status::skip());
        }
        state.write(PreFilterState {
            read_write_once_pod_pvcs: Arc::new(rwop),
            conflicting_pvc_ref_count: conflicts,
        });
        (None, Status::success())
    }

    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl VolumeRestrictions {
    fn update_with_pod(&self, state: &mut CycleState, other: &PodInfo, sign: i64) -> Status {
        let Some(s) = state.read::<PreFilterState>() else {
            return Status::error("cannot read PreFilterVolumeRestrictions from cycleState");
        };
        let mut s = s.clone();
        s.conflicting_pvc_ref_count += sign * s.count_for_pod(&other.pod);
        state.write(s);
        Status::success()
    }
}

impl PreFilterExtensions for VolumeRestrictions {
    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod_to_schedule: &PodInfo,
        pod_to_add: &PodInfo,
        _node: &NodeInfo,
    ) -> Status {
        self.update_with_pod(state, pod_to_add, 1)
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod_to_schedule: &PodInfo,
        pod_to_remove: &PodInfo,
        _node: &NodeInfo,
    ) -> Status {
        self.update_with_pod(state, pod_to_remove, -1)
    }
}

impl FilterPlugin for VolumeRestrictions {
    /// Unschedulable `node(s) had no available disk`, or (on every node:
    /// only preemption can free the claim) the ReadWriteOncePod reason.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !satisfies_volume_conflicts(&pod.pod, node.pods.iter().map(|p| &*p.pod)) {
            return Status::unschedulable(ERR_REASON_DISK_CONFLICT);
        }
        match state.read::<PreFilterState>() {
            Some(s) if s.conflicting_pvc_ref_count > 0 => {
                Status::unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT)
            }
            _ => Status::success(),
        }
    }
}

/// Queue when the deleted pod (same namespace) used one of the pod's
/// in-tree disks or one of its claims.
fn is_schedulable_after_assigned_pod_deleted(
    pod: &PodInfo,
    old: Option<&EventObject>,
    _new: Option<&EventObject>,
) -> QueueingHint {
    let Some(deleted) = event_pod(old) else { return QueueingHint::Queue };
    if namespace_of(&deleted.metadata) != pod.namespace() {
        return QueueingHint::Skip;
    }
    if !satisfies_volume_conflicts(&pod.pod, std::iter::once(deleted)) {
        return QueueingHint::Queue;
    }
    let claims: BTreeSet<&str> = pod_claim_names(&pod.pod).collect();
    let shared = pod_claim_names(deleted).any(|c| claims.contains(c));
    if shared { QueueingHint::Queue } else { QueueingHint::Skip }
}

#[cfg(test)]
mod tests;
