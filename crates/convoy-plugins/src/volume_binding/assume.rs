//! The volumes and claims chosen for pods in flight (upstream's PV and PVC
//! assume caches, `assume_cache.go`, reduced to what they assume): a
//! volume given to a claim in Reserve is not offered to another pod, and a
//! claim given to a node for provisioning is seen as selected for it, until
//! the pod's binding completes (the watched objects then say the same) or
//! Unreserve forgets them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use convoy_api::ClaimRef;

use super::binder::PodVolumes;

/// The assumed volumes and claims, by the UID of the pod that took them.
#[derive(Debug, Default)]
pub struct AssumeCache {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Volume name → (pod UID, the claim it is assumed bound to).
    pvs: HashMap<String, (Arc<str>, ClaimRef)>,
    /// (namespace, claim) → (pod UID, the node selected for it).
    claims: HashMap<(String, String), (Arc<str>, String)>,
}

/// A read of the cache, held while PreFilter captures the candidates.
pub struct AssumedView<'a>(MutexGuard<'a, Inner>);

impl AssumedView<'_> {
    /// The claim a volume is assumed bound to.
    pub fn pv_claim(&self, pv: &str) -> Option<&ClaimRef> {
        self.0.pvs.get(pv).map(|(_, c)| c)
    }

    /// The node a claim is assumed to be provisioned on.
    pub fn claim_node(&self, namespace: &str, name: &str) -> Option<&str> {
        self.0.claims.get(&(namespace.to_string(), name.to_string())).map(|(_, n)| n.as_str())
    }
}

impl AssumeCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A view for reading.
    pub fn view(&self) -> AssumedView<'_> {
        AssumedView(self.lock())
    }

    /// Upstream `AssumePodVolumes`: the pod's volumes and claims to
    /// provision on `node`, assumed.
    pub fn assume(&self, pod_uid: &Arc<str>, volumes: &PodVolumes, node: &str) {
        let mut st = self.lock();
        for b in &volumes.static_bindings {
            st.pvs.insert(b.pv.clone(), (Arc::clone(pod_uid), b.claim.clone()));
        }
        for p in &volumes.dynamic_provisions {
            st.claims.insert(
                (p.claim.namespace.clone(), p.claim.name.clone()),
                (Arc::clone(pod_uid), node.to_string()),
            );
        }
    }

    /// Upstream `RevertAssumedPodVolumes`: forgets what the pod assumed
    /// (idempotent).
    pub fn forget(&self, pod_uid: &str) {
        let mut st = self.lock();
        st.pvs.retain(|_, (uid, _)| &**uid != pod_uid);
        st.claims.retain(|_, (uid, _)| &**uid != pod_uid);
    }

    /// How many volumes and claims are assumed (tests).
    pub fn len(&self) -> usize {
        let st = self.lock();
        st.pvs.len() + st.claims.len()
    }

    /// Whether nothing is assumed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
