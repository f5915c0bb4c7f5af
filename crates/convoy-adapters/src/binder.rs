//! Binding through the `pods/{name}/binding` subresource, as upstream's
//! `DefaultBinder`, and VolumeBinding's PreBind writes (a
//! PersistentVolume's `spec.claimRef`, a claim's selected node) as
//! upstream's volume binder makes them, and DynamicResources'
//! ResourceClaim writes ([`crate::claims`]).

use std::sync::Arc;

use convoy_api::objects::volumes::{ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE};
use convoy_api::{BindError, Binder, ClaimWrite, PodInfo, VolumeWrite};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{
    Binding, ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod,
};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::sync::Semaphore;

/// A [`Binder`] that POSTs a `Binding` for each pod, at most
/// `max_in_flight` at a time (the rest wait for a slot).
///
/// The binding carries the pod's UID as a storage precondition, so a pod
/// deleted and recreated under the same name is never bound by mistake.
/// A `409 Conflict` is resolved by reading the pod back: already on the
/// target node → [`BindError::AlreadyBound`] (a retried bind that had
/// succeeded); gone or another UID → [`BindError::PodGone`]; anything else
/// (bound elsewhere, being deleted, gated) → [`BindError::Failed`] with the
/// server's message.
///
/// ResourceClaims are written in the version the server serves them in
/// ([`ApiBinder::follow`]): `v1` until told otherwise.
#[derive(Clone)]
pub struct ApiBinder {
    client: kube::Client,
    slots: Arc<Semaphore>,
    claims_version: Arc<std::sync::RwLock<&'static str>>,
    /// How long one binding call may take before it is given up.
    call_timeout: std::time::Duration,
    /// Written on every binding as [`BOUND_BY_ANNOTATION`].
    identity: Option<Arc<str>>,
}

/// The annotation every binding carries: the identity (leader-election
/// identity) of the replica that sent it. The API server copies a
/// Binding's annotations onto the pod, so `kubectl get pod -o yaml` tells
/// which replica bound a pod, and a check from the API server's side can
/// tell an old leader's bindings from a new one's.
pub const BOUND_BY_ANNOTATION: &str = "convoy.dev/bound-by";

/// How long a binding call may wait for its answer by default: a call whose
/// answer never comes (a connection the network dropped silently) would
/// hold its slot, and its pod's assumption in the cache, forever.
pub const BIND_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl std::fmt::Debug for ApiBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiBinder").field("free_slots", &self.slots.available_permits()).finish()
    }
}

impl ApiBinder {
    /// A binder using `client`, with at most `max_in_flight` (at least 1)
    /// binding requests outstanding.
    pub fn new(client: kube::Client, max_in_flight: usize) -> Self {
        Self {
            client,
            slots: Arc::new(Semaphore::new(max_in_flight.max(1))),
            claims_version: Arc::new(std::sync::RwLock::new("v1")),
            call_timeout: BIND_CALL_TIMEOUT,
            identity: None,
        }
    }

    /// The same binder with every binding annotated with `identity`
    /// ([`BOUND_BY_ANNOTATION`]).
    pub fn with_identity(mut self, identity: &str) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// The same binder with binding calls given up after `timeout`
    /// ([`BIND_CALL_TIMEOUT`] by default).
    pub fn with_call_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Follows what discovery found (`ClusterUpdate::ApisServed`): claims
    /// are written in the version they are watched in. Every clone of the
    /// binder follows.
    pub fn follow(&self, served: &convoy_api::ServedApis) {
        if let convoy_api::Serving::Served(v) = served.serving(&convoy_api::apis::RESOURCE_CLAIMS) {
            *self.claims_version.write().unwrap_or_else(|e| e.into_inner()) = v;
        }
    }
}

impl Binder for ApiBinder {
    fn bind(&self, pod: Arc<PodInfo>, node: Arc<str>) -> BoxFuture<'static, Result<(), BindError>> {
        let client = self.client.clone();
        let slots = Arc::clone(&self.slots);
        let timeout = self.call_timeout;
        let identity = self.identity.clone();
        Box::pin(async move {
            let _slot =
                slots.acquire_owned().await.map_err(|e| BindError::Failed(e.to_string()))?;
            // Given up, the binding may still have landed: the watch then
            // delivers the pod bound, and the cache takes it as bound.
            let call = bind(client, &pod, &node, identity.as_deref());
            tokio::time::timeout(timeout, call).await.unwrap_or_else(|_| {
                Err(BindError::Failed(format!(
                    "the binding call got no answer in {}s",
                    timeout.as_secs_f64()
                )))
            })
        })
    }

    /// A JSON merge patch carrying the resourceVersion the plugin chose
    /// from (so a volume or claim changed since is a 409 Conflict, as
    /// upstream's Update): a volume's `spec.claimRef` and
    /// `pv.kubernetes.io/bound-by-controller: "yes"`, or a claim's
    /// `volume.kubernetes.io/selected-node`.
    fn write_volume(&self, write: VolumeWrite) -> BoxFuture<'static, Result<String, BindError>> {
        let client = self.client.clone();
        let slots = Arc::clone(&self.slots);
        Box::pin(async move {
            let _slot =
                slots.acquire_owned().await.map_err(|e| BindError::Failed(e.to_string()))?;
            write_volume(client, write).await
        })
    }

    /// As upstream's DynamicResources (v1.37.2): Reserve reads the claim
    /// (gone, another UID or being deleted: `claim ns/x got deleted in the
    /// meantime`; allocated meanwhile when an allocation is given: `claim
    /// ns/x got allocated elsewhere in the meantime`), adds the
    /// delete-protection finalizer with an update, then writes the
    /// allocation and the pod's `reservedFor` entry with a status update,
    /// reading again and retrying on a conflict (5 times). Unreserve is a
    /// strategic merge patch of the status deleting the pod's entry (a
    /// claim gone is reported as deleted in the meantime). Deallocate
    /// clears allocation, reservations and device status with a status
    /// update (the finalizer stays, as upstream; a claim reserved for more
    /// than one consumer, or for a pod bound to a node, is refused: `claim
    /// ns/x is in use by other consumers`).
    fn write_claim(
        &self,
        write: ClaimWrite,
    ) -> BoxFuture<'static, Result<Arc<k8s_openapi::api::resource::v1::ResourceClaim>, BindError>>
    {
        let client = self.client.clone();
        let slots = Arc::clone(&self.slots);
        let version = *self.claims_version.read().unwrap_or_else(|e| e.into_inner());
        Box::pin(async move {
            let _slot =
                slots.acquire_owned().await.map_err(|e| BindError::Failed(e.to_string()))?;
            crate::claims::write_claim(client, version, write).await
        })
    }

    /// A consistent list of the pods whose `spec.nodeName` is `node` (the
    /// API server answers from its watch cache once that has caught up
    /// with etcd); `None` when the read fails.
    fn pods_on_node(&self, node: Arc<str>) -> convoy_api::FreshPods {
        let client = self.client.clone();
        let slots = Arc::clone(&self.slots);
        Box::pin(async move {
            let _slot = slots.acquire_owned().await.ok()?;
            let pods: Api<Pod> = Api::all(client);
            let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
            match pods.list(&lp).await {
                Ok(list) => Some(list.items.into_iter().map(Arc::new).collect()),
                Err(e) => {
                    tracing::debug!(%node, error = %e, "reading the node's pods before binding");
                    None
                }
            }
        })
    }
}

async fn write_volume(client: kube::Client, write: VolumeWrite) -> Result<String, BindError> {
    let params = PatchParams::default();
    let failed = |e: kube::Error| BindError::Failed(e.to_string());
    let written = match write {
        VolumeWrite::BindVolume { pv, resource_version, claim } => {
            let mut patch = serde_json::json!({
                "metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}},
                "spec": {"claimRef": {
                    "kind": "PersistentVolumeClaim", "apiVersion": "v1",
                    "namespace": claim.namespace, "name": claim.name, "uid": claim.uid,
                }},
            });
            if let Some(rv) = resource_version {
                patch["metadata"]["resourceVersion"] = rv.into();
            }
            let api: Api<PersistentVolume> = Api::all(client);
            api.patch(&pv, &params, &Patch::Merge(&patch)).await.map_err(failed)?.metadata
        }
        VolumeWrite::SelectNode { claim, resource_version, node } => {
            let mut patch =
                serde_json::json!({"metadata": {"annotations": {ANN_SELECTED_NODE: node}}});
            if let Some(rv) = resource_version {
                patch["metadata"]["resourceVersion"] = rv.into();
            }
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client, &claim.namespace);
            api.patch(&claim.name, &params, &Patch::Merge(&patch)).await.map_err(failed)?.metadata
        }
    };
    Ok(written.resource_version.unwrap_or_default())
}

async fn bind(
    client: kube::Client,
    pod: &PodInfo,
    node: &str,
    identity: Option<&str>,
) -> Result<(), BindError> {
    let (ns, name) = (&*pod.key.namespace, &*pod.key.name);
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            uid: Some(pod.uid.to_string()),
            annotations: identity
                .map(|id| [(BOUND_BY_ANNOTATION.to_string(), id.to_string())].into()),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    let err = match pods
        .create_subresource::<_, kube::core::Status>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => return Ok(()),
        Err(e) => e,
    };
    match &err {
        kube::Error::Api(s) if s.code == 404 => Err(BindError::PodGone(s.message.clone())),
        kube::Error::Api(s) if s.code == 409 => {
            resolve_conflict(&pods, pod, node, &s.message).await
        }
        _ => Err(BindError::Failed(err.to_string())),
    }
}

/// Reads the pod back after a 409 to tell "already done" and "gone" from a
/// real refusal.
async fn resolve_conflict(
    pods: &Api<Pod>,
    pod: &PodInfo,
    node: &str,
    message: &str,
) -> Result<(), BindError> {
    let current = match pods.get(&pod.key.name).await {
        Ok(p) => p,
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Err(BindError::PodGone(format!("pod {} not found", pod.key)));
        }
        Err(e) => return Err(BindError::Failed(format!("{message} (and reading the pod: {e})"))),
    };
    if current.metadata.uid.as_deref() != Some(&*pod.uid) {
        return Err(BindError::PodGone(format!(
            "pod {} was recreated (uid {} is now {})",
            pod.key,
            pod.uid,
            current.metadata.uid.as_deref().unwrap_or("none")
        )));
    }
    match current.spec.and_then(|s| s.node_name) {
        Some(n) if n == node => Err(BindError::AlreadyBound),
        _ => Err(BindError::Failed(message.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API server that accepts the connection and never answers: the
    /// binding call is given up after the timeout, its slot freed.
    #[tokio::test]
    async fn a_binding_call_without_an_answer_is_given_up() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn); // read nothing, answer nothing
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let binder =
            ApiBinder::new(client, 1).with_call_timeout(std::time::Duration::from_millis(300));
        let pod = Arc::new(
            PodInfo::new(Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                    "spec": {"containers": [{"name": "c"}]}
                }))
                .unwrap(),
            ))
            .unwrap(),
        );
        let started = std::time::Instant::now();
        let first = binder.bind(pod.clone(), Arc::from("n1")).await;
        assert!(
            matches!(&first, Err(BindError::Failed(m)) if m.contains("no answer")),
            "{first:?}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // The slot (one) is free again: a second call gets as far as its own timeout.
        let second = binder.bind(pod, Arc::from("n1")).await;
        assert!(matches!(second, Err(BindError::Failed(_))));
    }
}
