//! Binding through the `pods/{name}/binding` subresource, as upstream's
//! `DefaultBinder`.

use std::sync::Arc;

use convoy_api::{BindError, Binder, PodInfo};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::api::{Api, ObjectMeta, PostParams};
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
#[derive(Clone)]
pub struct ApiBinder {
    client: kube::Client,
    slots: Arc<Semaphore>,
}

impl std::fmt::Debug for ApiBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiBinder").field("free_slots", &self.slots.available_permits()).finish()
    }
}

impl ApiBinder {
    /// A binder using `client`, with at most `max_in_flight` (at least 1)
    /// binding requests outstanding.
    pub fn new(client: kube::Client, max_in_flight: usize) -> Self {
        Self { client, slots: Arc::new(Semaphore::new(max_in_flight.max(1))) }
    }
}

impl Binder for ApiBinder {
    fn bind(&self, pod: Arc<PodInfo>, node: Arc<str>) -> BoxFuture<'static, Result<(), BindError>> {
        let client = self.client.clone();
        let slots = Arc::clone(&self.slots);
        Box::pin(async move {
            let _slot =
                slots.acquire_owned().await.map_err(|e| BindError::Failed(e.to_string()))?;
            bind(client, &pod, &node).await
        })
    }
}

async fn bind(client: kube::Client, pod: &PodInfo, node: &str) -> Result<(), BindError> {
    let (ns, name) = (&*pod.key.namespace, &*pod.key.name);
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(ns.to_string()),
            uid: Some(pod.uid.to_string()),
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
