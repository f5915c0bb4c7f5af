//! VolumeBinding's PreBind (upstream `BindPodVolumes`: `bindAPIUpdate`,
//! then `checkBindings` polled until `bindTimeout`, v1.37.2).

use std::collections::BTreeMap;
use std::time::Duration;

use convoy_api::objects::volumes::ANN_SELECTED_NODE;
use convoy_api::{Binder, ClaimRef, ObjectLister, Status, VolumeWrite};
use k8s_openapi::api::core::v1::PersistentVolume;

use super::binder::{DynamicProvision, PodVolumes, StaticBinding};
use crate::helper::volumes::{
    claim_is_fully_bound, claim_volume_name, pv_affinity_matches, pv_node_affinity, pv_not_found,
    pvc_not_found,
};

/// How often PreBind looks whether the claims are bound (upstream polls
/// every second; the check reads the watched objects only, so Convoy looks
/// more often and a binding completes sooner).
const BIND_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The writes, then the wait (upstream `bindAPIUpdate` and
/// `checkBindings` polled until `bindTimeout`).
pub(super) async fn bind_pod_volumes(
    binder: &dyn Binder,
    objects: &dyn ObjectLister,
    volumes: PodVolumes,
    node: &str,
    labels: &BTreeMap<String, String>,
    timeout: Duration,
) -> Status {
    let mut written = Written::default();
    for StaticBinding { pv, resource_version, claim, .. } in volumes.static_bindings {
        let write =
            VolumeWrite::BindVolume { pv: pv.clone(), resource_version, claim: claim.clone() };
        match binder.write_volume(write).await {
            Ok(rv) => {
                tracing::debug!(pv, claim = %format_args!("{}/{}", claim.namespace, claim.name),
                    "Updated PersistentVolume with claim. Waiting for binding to complete");
                written.pvs.push((pv, rv, claim));
            }
            Err(e) => return Status::error(e.to_string()),
        }
    }
    for DynamicProvision { claim, resource_version, .. } in volumes.dynamic_provisions {
        let write = VolumeWrite::SelectNode {
            claim: claim.clone(),
            resource_version,
            node: node.to_string(),
        };
        match binder.write_volume(write).await {
            Ok(rv) => written.claims.push((claim, rv)),
            Err(e) => return Status::error(e.to_string()),
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match written.check(objects, node, labels) {
            Ok(true) => return Status::success(),
            Ok(false) => {}
            Err(e) => return Status::error(format!("binding volumes: {e}")),
        }
        if tokio::time::Instant::now() + BIND_POLL_INTERVAL > deadline {
            return Status::error(format!(
                "binding volumes: context deadline exceeded (waited {}s for the claims to be bound)",
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(BIND_POLL_INTERVAL).await;
    }
}

/// What PreBind wrote, with the written versions.
#[derive(Default)]
pub(super) struct Written {
    /// Volumes given a claim, with the written version.
    pub(super) pvs: Vec<(String, String, ClaimRef)>,
    /// Claims given the node, with the written version.
    pub(super) claims: Vec<(ClaimRef, String)>,
}

/// Whether the watched object is older than the written version (the API
/// server's integers; a watched object without a version predates any
/// write, and a write without one is taken as seen).
fn older(watched: Option<&str>, written: &str) -> bool {
    let Ok(written) = written.parse::<u64>() else { return false };
    watched.and_then(|w| w.parse::<u64>().ok()).is_none_or(|w| w < written)
}

impl Written {
    /// Upstream `checkBindings` on the watched objects: `Ok(true)` when
    /// every claim is fully bound; an error when a binding was undone or a
    /// bound volume cannot be reached from the node (`labels`).
    pub(super) fn check(
        &self,
        objects: &dyn ObjectLister,
        node: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<bool, String> {
        for (name, rv, claim) in &self.pvs {
            let pv = objects
                .pv(name)
                .ok_or_else(|| format!("failed to check binding: {}", pv_not_found(name)))?;
            let pvc = objects.pvc(&claim.namespace, &claim.name).ok_or_else(|| {
                format!("failed to check binding: {}", pvc_not_found(&claim.name))
            })?;
            if older(pv.metadata.resource_version.as_deref(), rv) {
                return Ok(false);
            }
            affinity_matches(&pv, node, labels)?;
            let uid =
                pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).and_then(|r| r.uid.as_deref());
            if uid.is_none_or(str::is_empty) {
                return Err(format!("ClaimRef got reset for pv {name:?}"));
            }
            if !claim_is_fully_bound(&pvc) {
                return Ok(false);
            }
        }
        for (claim, rv) in &self.claims {
            let pvc = objects.pvc(&claim.namespace, &claim.name).ok_or_else(|| {
                format!("failed to check provisioning pvc: {}", pvc_not_found(&claim.name))
            })?;
            if older(pvc.metadata.resource_version.as_deref(), rv) {
                return Ok(false);
            }
            let Some(annotations) = pvc.metadata.annotations.as_ref() else {
                return Err(format!("selectedNode annotation reset for PVC {:?}", claim.name));
            };
            if annotations.get(ANN_SELECTED_NODE).map(String::as_str) != Some(node) {
                return Err(format!("provisioning failed for PVC {:?}", claim.name));
            }
            let volume = claim_volume_name(&pvc);
            if !volume.is_empty() {
                // Not watched yet: looked at again next time.
                let Some(pv) = objects.pv(volume) else { return Ok(false) };
                affinity_matches(&pv, node, labels)?;
            }
            if !claim_is_fully_bound(&pvc) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Upstream `CheckNodeAffinity` as `checkBindings` reports it.
fn affinity_matches(
    pv: &PersistentVolume,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), String> {
    match pv_node_affinity(pv) {
        Some(a) if !pv_affinity_matches(&a, Some(labels)) => Err(format!(
            "pv {:?} node affinity doesn't match node {node:?}: no matching NodeSelectorTerms",
            pv.metadata.name.as_deref().unwrap_or("")
        )),
        _ => Ok(()),
    }
}
