//! NodeVolumeLimits: a node takes no more volumes of a CSI driver than the
//! driver's `allocatable.count` in the node's CSINode (upstream
//! `plugins/nodevolumelimits/csi.go`, v1.37.2).
//!
//! Volumes are counted once each by `<driver>/<volumeHandle>`, over the
//! pods on the node; a bound claim's volume is its PV's CSI source, an
//! unbound claim's is its StorageClass's provisioner with a handle unique
//! to the claim; a PV with an in-tree source (EBS, GCE PD, Azure disk and
//! file, Cinder, vSphere, Portworx) counts against its CSI driver when the
//! node's CSINode says its plugin is migrated, as upstream's translation
//! to CSI. Not yet as upstream (see docs/configuration.md#volumes):
//! VolumeAttachments of pods already gone are not counted, and inline
//! in-tree volumes are not translated (pods with them are refused).
//!
//! A new volume's driver whose CSIDriver object sets
//! `preventPodSchedulingIfMissing` must be listed in the node's CSINode
//! (upstream's check under the VolumeLimitScaling gate, beta and on by
//! default in v1.37).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSINode;

use convoy_api::objects::volumes::ANN_MIGRATED_PLUGINS;
use convoy_api::{
    ActionType, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    NodeInfo, NodeInfoLister, ObjectLister, Plugin, PodInfo, PreFilterPlugin, PreFilterResult,
    QueueingHint, Status, names,
};

use crate::helper::volumes::{
    claim_class, claim_is_for_pod, claim_volume_name, event_csi_node, namespace_of, pod_volumes,
    pvc_not_found, queue_if_pod_uses_claim, uses_claims, volume_claim,
};
use crate::helper::{event_pod, pod_was_on_a_node};

/// Reason when the pod's volumes would exceed a driver's limit on the node.
pub const ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: &str = "node(s) exceed max volume count";

/// The in-tree provisioners migrated to CSI, and their CSI drivers
/// (upstream `csi-translation-lib`).
const MIGRATED_PROVISIONERS: &[(&str, &str)] = &[
    ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("kubernetes.io/azure-file", "file.csi.azure.com"),
    ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"),
    ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
];

/// The NodeVolumeLimits plugin (upstream's CSI limits plugin).
#[derive(Debug)]
pub struct NodeVolumeLimits {
    objects: Arc<dyn ObjectLister>,
    /// Prefixes the handles made up for unbound claims, so they cannot
    /// equal a real one (upstream: 32 random characters).
    random_volume_id_prefix: String,
}

impl NodeVolumeLimits {
    /// The plugin, reading claims, volumes, classes and CSINodes from
    /// `objects`.
    pub fn new(objects: Arc<dyn ObjectLister>) -> Self {
        use std::hash::{BuildHasher, RandomState};
        // Two randomly keyed hashes: 32 hex digits no real handle starts with.
        let random = || RandomState::new().hash_one(0u8);
        Self { objects, random_volume_id_prefix: format!("{:016x}{:016x}", random(), random()) }
    }

    /// Upstream `filterAttachableVolumes`: the CSI volumes of a pod, as
    /// [`Attachable`]s (what a node's CSINode changes is resolved later, by
    /// [`Attachable::on`]). For the pod being scheduled a missing claim is
    /// UnschedulableAndUnresolvable; for pods on the node it is skipped.
    fn attachable_volumes(
        &self,
        pod: &Pod,
        new_pod: bool,
        out: &mut Vec<Attachable>,
    ) -> Result<(), Status> {
        let namespace = namespace_of(&pod.metadata);
        for v in pod_volumes(pod) {
            let Some((name, ephemeral)) = volume_claim(pod, v) else { continue };
            if name.is_empty() {
                return Err(Status::error("PersistentVolumeClaim had no name"));
            }
            let Some(pvc) = self.objects.pvc(namespace, &name) else {
                if new_pod {
                    return Err(Status::unresolvable(format!(
                        "looking up PVC {namespace}/{name}: {}",
                        pvc_not_found(&name)
                    )));
                }
                continue;
            };
            if ephemeral {
                claim_is_for_pod(pod, &pvc).map_err(Status::error)?;
            }
            out.extend(self.csi_driver_info(&pvc));
        }
        Ok(())
    }

    /// Upstream `getCSIDriverInfo`: the bound PV's CSI driver and handle,
    /// else the class's; `None` when either is empty.
    fn csi_driver_info(&self, pvc: &PersistentVolumeClaim) -> Option<Attachable> {
        let pv_name = claim_volume_name(pvc);
        let pv = (!pv_name.is_empty()).then(|| self.objects.pv(pv_name)).flatten();
        let Some(pv) = pv else { return self.csi_driver_info_from_class(pvc) };
        let spec = pv.spec.as_ref()?;
        if let Some(csi) = spec.csi.as_ref() {
            return Attachable::new(&csi.driver, &csi.volume_handle, None);
        }
        // An in-tree PV counts against its CSI driver when the node has
        // migrated its plugin (upstream translates the PV to CSI first).
        let (plugin, handle) = in_tree_volume(spec, pv.metadata.labels.as_ref())?;
        let (_, driver) = MIGRATED_PROVISIONERS.iter().find(|(p, _)| *p == plugin)?;
        Attachable::new(driver, &handle, Some(plugin))
    }

    /// Upstream `getCSIDriverInfoFromSC`.
    fn csi_driver_info_from_class(&self, pvc: &PersistentVolumeClaim) -> Option<Attachable> {
        let class_name = claim_class(pvc);
        if class_name.is_empty() {
            return None;
        }
        let class = self.objects.storage_class(class_name)?;
        let namespace = namespace_of(&pvc.metadata);
        let name = pvc.metadata.name.as_deref().unwrap_or("");
        let handle = format!("{}-{namespace}/{name}", self.random_volume_id_prefix);
        let provisioner = class.provisioner.as_str();
        match MIGRATED_PROVISIONERS.iter().find(|(p, _)| *p == provisioner) {
            Some((in_tree, driver)) => Attachable::new(driver, &handle, Some(in_tree)),
            None => Attachable::new(provisioner, &handle, None),
        }
    }
}

/// A CSI volume a pod attaches, as far as it is known without the node:
/// its driver and unique name (`<driver>/<handle>`), and the in-tree plugin
/// it was translated from, if any (it counts only on a node whose CSINode
/// says that plugin is migrated).
#[derive(Debug, Clone)]
struct Attachable {
    unique: String,
    driver_len: usize,
    in_tree: Option<&'static str>,
}

impl Attachable {
    /// `None` when the driver or handle is empty (upstream skips those).
    fn new(driver: &str, handle: &str, in_tree: Option<&'static str>) -> Option<Self> {
        if driver.is_empty() || handle.is_empty() {
            return None;
        }
        Some(Self { unique: format!("{driver}/{handle}"), driver_len: driver.len(), in_tree })
    }

    fn driver(&self) -> &str {
        &self.unique[..self.driver_len]
    }

    /// The volume's unique name and driver on a node with this CSINode,
    /// or `None` when it does not count there (an in-tree volume whose
    /// plugin the node has not migrated).
    fn on(&self, csi_node: Option<&CSINode>) -> Option<(&str, &str)> {
        match self.in_tree {
            Some(plugin) if !is_csi_migration_on(csi_node, plugin) => None,
            _ => Some((&self.unique, self.driver())),
        }
    }
}

/// The new pod's volumes on one node: `(unique name, driver)` (inline: a
/// Filter call allocates nothing for a pod with a few claims).
type NewVolumes<'a> = smallvec::SmallVec<[(&'a str, &'a str); 4]>;

/// What PreFilter computes once for the pod being scheduled: its volumes,
/// or the error every node would report, and for each driver whether its
/// CSIDriver sets `preventPodSchedulingIfMissing`.
#[derive(Debug)]
struct PreFilterState {
    volumes: Result<Vec<Attachable>, Status>,
    must_be_listed: Vec<(String, bool)>,
}

/// A PV's in-tree source as upstream's `csi-translation-lib` (v1.37.2)
/// translates it, as far as counting needs: the in-tree plugin (its CSI
/// driver is in [`MIGRATED_PROVISIONERS`]) and a handle that names the same disk for the same source (the
/// translated `volumeHandle` for EBS, Azure disk, Cinder and Portworx;
/// for GCE PD, Azure file and vSphere a handle built from the same fields,
/// equal exactly when upstream's would be).
fn in_tree_volume(
    spec: &k8s_openapi::api::core::v1::PersistentVolumeSpec,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<(&'static str, String)> {
    if let Some(v) = &spec.aws_elastic_block_store {
        // `aws://<zone>/<id>` names the volume `<id>`.
        let id = v
            .volume_id
            .strip_prefix("aws://")
            .map_or(v.volume_id.as_str(), |rest| rest.rsplit('/').next().unwrap_or(rest));
        return Some(("kubernetes.io/aws-ebs", id.to_string()));
    }
    if let Some(v) = &spec.gce_persistent_disk {
        let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        let zone = label("topology.kubernetes.io/zone")
            .or_else(|| label("failure-domain.beta.kubernetes.io/zone"))
            .unwrap_or("UNSPECIFIED");
        let handle = format!("projects/UNSPECIFIED/zones/{zone}/disks/{}", v.pd_name);
        return Some(("kubernetes.io/gce-pd", handle));
    }
    if let Some(v) = &spec.azure_disk {
        return Some(("kubernetes.io/azure-disk", v.disk_uri.clone()));
    }
    if let Some(v) = &spec.azure_file {
        let ns = v.secret_namespace.as_deref().unwrap_or("default");
        let handle = format!("#{ns}#{}#{}", v.secret_name, v.share_name);
        return Some(("kubernetes.io/azure-file", handle));
    }
    if let Some(v) = &spec.cinder {
        return Some(("kubernetes.io/cinder", v.volume_id.clone()));
    }
    if let Some(v) = &spec.vsphere_volume {
        let handle = v.volume_path.clone();
        return Some(("kubernetes.io/vsphere-volume", handle));
    }
    if let Some(v) = &spec.portworx_volume {
        return Some(("kubernetes.io/portworx-volume", v.volume_id.clone()));
    }
    None
}

/// Upstream `isCSIMigrationOn`: the CSINode's migrated-plugins annotation
/// lists the in-tree plugin.
fn is_csi_migration_on(csi_node: Option<&CSINode>, plugin: &str) -> bool {
    csi_node
        .and_then(|c| c.metadata.annotations.as_ref())
        .and_then(|a| a.get(ANN_MIGRATED_PLUGINS))
        .is_some_and(|v| v.split(',').any(|p| p == plugin))
}

/// Upstream `getVolumeLimits`: `allocatable.count` per driver.
fn volume_limits(csi_node: Option<&CSINode>) -> HashMap<&str, i64> {
    csi_node
        .into_iter()
        .flat_map(|c| c.spec.drivers.iter())
        .filter_map(|d| Some((d.name.as_str(), i64::from(d.allocatable.as_ref()?.count?))))
        .collect()
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        names::NODE_VOLUME_LIMITS
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::new(EventResource::CSINode, ActionType::ADD),
            ClusterEventWithHint::with_hint(
                EventResource::CSINode,
                ActionType::UPDATE,
                is_schedulable_after_csi_node_updated,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::AssignedPod,
                ActionType::DELETE,
                is_schedulable_after_assigned_pod_deleted,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::PersistentVolumeClaim,
                ActionType::ADD,
                queue_if_pod_uses_claim,
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

impl NodeVolumeLimits {
    /// The pod's volumes and, for each of their drivers, whether its
    /// CSIDriver sets `preventPodSchedulingIfMissing` (upstream
    /// `checkCSIDriverOnNode` reads the CSIDriver for every node; it does not
    /// depend on the node).
    fn pre_filter_state(&self, pod: &PodInfo) -> PreFilterState {
        let mut volumes = Vec::new();
        let volumes = self.attachable_volumes(&pod.pod, true, &mut volumes).map(|()| volumes);
        let mut drivers: Vec<&str> = volumes.iter().flatten().map(Attachable::driver).collect();
        drivers.sort_unstable();
        drivers.dedup();
        let must_be_listed = drivers
            .into_iter()
            .map(|d| {
                let prevent = self
                    .objects
                    .csi_driver(d)
                    .is_some_and(|c| c.spec.prevent_pod_scheduling_if_missing == Some(true));
                (d.to_string(), prevent)
            })
            .collect();
        PreFilterState { volumes, must_be_listed }
    }

    /// Upstream's count of the volumes attached to the node, after a cheap
    /// bound: the node's pods name [`NodeInfo::claim_volumes`] claims, each
    /// at most one attached volume. When that bound plus the new volumes of
    /// each driver fits its limit, no claim needs to be looked up. A node
    /// with a pod whose own lookups can fail (see
    /// [`ClaimVolumes::pods_to_check`](convoy_api::ClaimVolumes)) is always
    /// counted exactly, so that it fails as upstream's does.
    fn exceeds_limits(
        &self,
        node: &NodeInfo,
        csi_node: Option<&CSINode>,
        new_volumes: &mut NewVolumes<'_>,
    ) -> Result<bool, Status> {
        let bound = i64::from(node.claim_volumes.count);
        let exact_needed = node.claim_volumes.pods_to_check > 0;
        let over = |attached: &dyn Fn(&str) -> i64, new_volumes: &[(&str, &str)]| {
            new_volumes.iter().any(|(_, driver)| {
                limit_of(csi_node, driver).is_some_and(|limit| {
                    let new = new_volumes.iter().filter(|(_, d)| d == driver).count() as i64;
                    attached(driver) + new > limit
                })
            })
        };
        if !exact_needed && !over(&|_| bound, new_volumes) {
            return Ok(false);
        }
        let mut attached = Vec::new();
        for p in &node.pods {
            self.attachable_volumes(&p.pod, false, &mut attached)?;
        }
        let mut attached: Vec<(&str, &str)> =
            attached.iter().filter_map(|a| a.on(csi_node)).collect();
        attached.sort_unstable();
        attached.dedup();
        new_volumes.retain(|v| attached.binary_search(v).is_err());
        let count = |driver: &str| attached.iter().filter(|(_, d)| *d == driver).count() as i64;
        Ok(over(&count, new_volumes))
    }
}

/// Upstream `getVolumeLimits`: a driver's `allocatable.count` in the
/// node's CSINode.
fn limit_of(csi_node: Option<&CSINode>, driver: &str) -> Option<i64> {
    let d = csi_node?.spec.drivers.iter().find(|d| d.name == driver)?;
    Some(i64::from(d.allocatable.as_ref()?.count?))
}

impl PreFilterPlugin for NodeVolumeLimits {
    /// Skip unless the pod uses a claim (`persistentVolumeClaim` or
    /// `ephemeral`); else resolves the pod's claims once for every node.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        if !uses_claims(&pod.pod) {
            return (None, Status::skip());
        }
        state.write(self.pre_filter_state(pod));
        (None, Status::success())
    }
}

impl FilterPlugin for NodeVolumeLimits {
    /// Unschedulable `node(s) exceed max volume count`, or `<driver> CSI
    /// driver is not installed on the node` (see the module docs);
    /// UnschedulableAndUnresolvable `looking up PVC <ns>/<name>: ...` when
    /// a claim of the pod is missing; Error when an ephemeral volume's
    /// claim is not the pod's.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let computed;
        let pre = match state.read::<PreFilterState>() {
            Some(pre) => pre,
            None => {
                computed = self.pre_filter_state(pod);
                &computed
            }
        };
        let volumes = match &pre.volumes {
            Ok(volumes) => volumes,
            Err(status) => return status.clone(),
        };
        let csi_node = self.objects.csi_node(node.name());
        let csi_node = csi_node.as_deref();
        let mut new_volumes: NewVolumes<'_> =
            volumes.iter().filter_map(|v| v.on(csi_node)).collect();
        if new_volumes.is_empty() {
            return Status::success();
        }
        new_volumes.sort_unstable();
        new_volumes.dedup();
        // Upstream `checkCSIDriverOnNode`, for each new volume's driver (in
        // name order; upstream's map order is random when several fail).
        for (driver, prevent) in &pre.must_be_listed {
            let used = new_volumes.iter().any(|(_, d)| d == driver);
            let listed =
                || csi_node.is_some_and(|n| n.spec.drivers.iter().any(|x| x.name == *driver));
            if used && *prevent && !listed() {
                return Status::unschedulable(format!(
                    "{driver} CSI driver is not installed on the node"
                ));
            }
        }
        // No limit on the node: nothing to count (upstream returns before
        // walking the node's pods).
        let has_limits = csi_node.is_some_and(|c| {
            c.spec.drivers.iter().any(|d| d.allocatable.as_ref().is_some_and(|a| a.count.is_some()))
        });
        if !has_limits {
            return Status::success();
        }
        match self.exceeds_limits(node, csi_node, &mut new_volumes) {
            Ok(true) => Status::unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED),
            Ok(false) => Status::success(),
            Err(status) => status,
        }
    }
}

/// Queue when the deleted pod was on a node and used a claim.
fn is_schedulable_after_assigned_pod_deleted(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    _new: Option<&EventObject>,
) -> QueueingHint {
    let Some(deleted) = event_pod(old) else { return QueueingHint::Queue };
    if pod_was_on_a_node(deleted) && uses_claims(deleted) {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

/// Queue when some driver's limit grew.
fn is_schedulable_after_csi_node_updated(
    _pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (Some(old), Some(new)) = (event_csi_node(old), event_csi_node(new)) else {
        return QueueingHint::Queue;
    };
    let old_limits = volume_limits(Some(old));
    let grew = new.spec.drivers.iter().any(|d| {
        let limit = d.allocatable.as_ref().and_then(|a| a.count).map_or(0, i64::from);
        limit > old_limits.get(d.name.as_str()).copied().unwrap_or(0)
    });
    if grew { QueueingHint::Queue } else { QueueingHint::Skip }
}

#[cfg(test)]
mod tests;
