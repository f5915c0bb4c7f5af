//! DynamicResources' ResourceClaim writes through the API server
//! ([`ClaimWrite`]), as upstream v1.37.2's plugin makes them: PreBind's
//! `bindClaim` (finalizer, allocation and reservation, retried on
//! conflict), Unreserve's strategic merge patch, and PostFilter's
//! deallocation. Claims are written in the version they are watched in
//! (`v1`, or `v1beta2` on a server that serves only that; the same
//! schema).

use std::sync::Arc;

use convoy_api::objects::ObjectKind;
use convoy_api::objects::dra::CLAIM_FINALIZER;
use convoy_api::{BindError, ClaimWrite};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{
    AllocationResult, ResourceClaim, ResourceClaimConsumerReference, ResourceClaimStatus,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};

/// The claims of a namespace in the version they are served in: `v1`
/// through the typed API, another version (`v1beta2`) through the dynamic
/// API with the objects converted both ways.
enum ClaimApi {
    Typed(Api<ResourceClaim>),
    Other(Api<DynamicObject>, &'static str),
}

impl ClaimApi {
    fn new(client: kube::Client, namespace: &str, version: &'static str) -> Self {
        if version == "v1" {
            return ClaimApi::Typed(Api::namespaced(client, namespace));
        }
        let ar = crate::versioned::api_resource(&convoy_api::apis::RESOURCE_CLAIMS, version);
        ClaimApi::Other(Api::namespaced_with(client, namespace, &ar), version)
    }

    fn read(&self, obj: DynamicObject) -> kube::Result<ResourceClaim> {
        let ClaimApi::Other(_, version) = self else { unreachable!("typed claims are not read") };
        crate::versioned::convert(obj, version).ok_or_else(|| {
            kube::Error::Service(format!("cannot read a {version} ResourceClaim").into())
        })
    }

    fn write(&self, claim: &ResourceClaim) -> kube::Result<DynamicObject> {
        let ClaimApi::Other(_, version) = self else {
            unreachable!("typed claims are not written")
        };
        let mut value = serde_json::to_value(claim).map_err(kube::Error::SerdeError)?;
        value["apiVersion"] = convoy_api::apis::RESOURCE_CLAIMS.api_version(version).into();
        serde_json::from_value(value).map_err(kube::Error::SerdeError)
    }

    async fn get_opt(&self, name: &str) -> kube::Result<Option<ResourceClaim>> {
        match self {
            ClaimApi::Typed(api) => api.get_opt(name).await,
            ClaimApi::Other(api, _) => api.get_opt(name).await?.map(|o| self.read(o)).transpose(),
        }
    }

    async fn replace(&self, name: &str, claim: &ResourceClaim) -> kube::Result<ResourceClaim> {
        match self {
            ClaimApi::Typed(api) => api.replace(name, &PostParams::default(), claim).await,
            ClaimApi::Other(api, _) => {
                self.read(api.replace(name, &PostParams::default(), &self.write(claim)?).await?)
            }
        }
    }

    async fn replace_status(
        &self,
        name: &str,
        claim: &ResourceClaim,
    ) -> kube::Result<ResourceClaim> {
        match self {
            ClaimApi::Typed(api) => api.replace_status(name, &PostParams::default(), claim).await,
            ClaimApi::Other(api, _) => {
                let body = self.write(claim)?;
                self.read(api.replace_status(name, &PostParams::default(), &body).await?)
            }
        }
    }

    async fn patch_status(
        &self,
        name: &str,
        patch: &serde_json::Value,
    ) -> kube::Result<ResourceClaim> {
        let params = PatchParams::default();
        match self {
            ClaimApi::Typed(api) => api.patch_status(name, &params, &Patch::Strategic(patch)).await,
            ClaimApi::Other(api, _) => {
                self.read(api.patch_status(name, &params, &Patch::Strategic(patch)).await?)
            }
        }
    }
}

/// How many times a write that met a `409 Conflict` is tried again after
/// reading the claim anew (upstream `retry.DefaultRetry` tries 5 times).
const CONFLICT_RETRIES: usize = 5;

/// Writes `write` and returns the claim as the API server returned it,
/// trimmed as the watched claims are.
pub(crate) async fn write_claim(
    client: kube::Client,
    version: &'static str,
    write: ClaimWrite,
) -> Result<Arc<ResourceClaim>, BindError> {
    let key = write.claim_key();
    let mut claim = match write {
        ClaimWrite::Reserve { namespace, name, uid, allocation, pod_name, pod_uid } => {
            let api = ClaimApi::new(client, &namespace, version);
            let pod = ResourceClaimConsumerReference {
                api_group: None,
                resource: "pods".into(),
                name: pod_name,
                uid: pod_uid,
            };
            with_retries(&api, &name, &uid, &key, |api, claim| {
                reserve(api, claim, allocation.clone(), pod.clone(), &key)
            })
            .await?
        }
        ClaimWrite::Unreserve { namespace, name, pod_uid } => {
            let api = ClaimApi::new(client, &namespace, version);
            unreserve(&api, &name, &pod_uid, &key).await?
        }
        ClaimWrite::Deallocate { namespace, name, uid } => {
            let api = ClaimApi::new(client.clone(), &namespace, version);
            with_retries(&api, &name, &uid, &key, |api, claim| {
                deallocate(&client, api, claim, &key)
            })
            .await?
        }
    };
    claim.trim();
    Ok(Arc::new(claim))
}

/// Reads the claim, checks it is still the one the plugin read and not
/// being deleted, and runs `step` on it; on a conflict, does it all again
/// (at most [`CONFLICT_RETRIES`] more times).
async fn with_retries<'a, F, Fut>(
    api: &'a ClaimApi,
    name: &str,
    uid: &str,
    key: &str,
    mut step: F,
) -> Result<ResourceClaim, BindError>
where
    F: FnMut(&'a ClaimApi, ResourceClaim) -> Fut,
    Fut: Future<Output = Result<ResourceClaim, StepError>>,
{
    let gone = || BindError::Failed(format!("claim {key} got deleted in the meantime"));
    let mut attempt = 0;
    loop {
        let claim = match api.get_opt(name).await {
            Ok(Some(c)) => c,
            Ok(None) => return Err(gone()),
            Err(e) => return Err(BindError::Failed(format!("get claim {key}: {e}"))),
        };
        if claim.metadata.uid.as_deref() != Some(uid) || claim.metadata.deletion_timestamp.is_some()
        {
            return Err(gone());
        }
        match step(api, claim).await {
            Err(StepError::Api(kube::Error::Api(s)))
                if s.code == 409 && attempt < CONFLICT_RETRIES =>
            {
                tracing::debug!(claim = key, attempt, "retrying claim update after conflict");
                attempt += 1;
            }
            Err(StepError::Api(kube::Error::Api(s))) if s.code == 404 => return Err(gone()),
            Err(StepError::Api(e)) => return Err(BindError::Failed(format!("claim {key}: {e}"))),
            Err(StepError::Refused(message)) => return Err(BindError::Failed(message)),
            Ok(c) => return Ok(c),
        }
    }
}

/// Why one attempt of a write failed.
enum StepError {
    /// The API server refused or could not be reached (a conflict is
    /// tried again).
    Api(kube::Error),
    /// The claim as read does not allow the write (not tried again).
    Refused(String),
}

impl From<kube::Error> for StepError {
    fn from(e: kube::Error) -> Self {
        StepError::Api(e)
    }
}

/// Upstream `bindClaim`: the finalizer (a normal update) and the
/// allocation when one is given, then the reservation (a status update).
async fn reserve(
    api: &ClaimApi,
    mut claim: ResourceClaim,
    allocation: Option<AllocationResult>,
    pod: ResourceClaimConsumerReference,
    key: &str,
) -> Result<ResourceClaim, StepError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    if let Some(allocation) = allocation {
        if claim.status.as_ref().is_some_and(|s| s.allocation.is_some()) {
            return Err(StepError::Refused(format!(
                "claim {key} got allocated elsewhere in the meantime"
            )));
        }
        let finalizers = claim.metadata.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == CLAIM_FINALIZER) {
            finalizers.push(CLAIM_FINALIZER.to_string());
            claim = api.replace(&name, &claim).await?;
        }
        claim.status.get_or_insert_with(Default::default).allocation = Some(allocation);
    }
    let status = claim.status.get_or_insert_with(Default::default);
    let reserved = status.reserved_for.get_or_insert_with(Vec::new);
    if !reserved.iter().any(|r| r.uid == pod.uid) {
        reserved.push(pod);
    }
    Ok(api.replace_status(&name, &claim).await?)
}

/// Upstream `Unreserve`: a strategic merge patch of the status deleting
/// the pod's entry (`reservedFor` merges on `uid`), which needs no fresh
/// copy of the claim. Upstream also sends the claim's UID as a
/// precondition; [`ClaimWrite::Unreserve`] does not carry it, and a claim
/// recreated under the name holds no entry of the pod to remove.
async fn unreserve(
    api: &ClaimApi,
    name: &str,
    pod_uid: &str,
    key: &str,
) -> Result<ResourceClaim, BindError> {
    let patch = serde_json::json!({
        "status": {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]},
    });
    match api.patch_status(name, &patch).await {
        Ok(c) => Ok(c),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            Err(BindError::Failed(format!("claim {key} got deleted in the meantime")))
        }
        Err(e) => Err(BindError::Failed(format!("unreserve claim {key}: {e}"))),
    }
}

/// Upstream PostFilter's deallocation: allocation, reservations and device
/// status cleared in one status update. As upstream, the delete-protection
/// finalizer stays (the resourceclaim controller removes it when the claim
/// is deleted; PreBind finds it in place when the claim is allocated
/// again).
///
/// Upstream writes the copy its PostFilter checked (unused, or reserved
/// for the pod being scheduled alone), so a claim changed since is a
/// conflict. [`ClaimWrite::Deallocate`] carries neither that version nor
/// the pod, so the claim is checked again as read: reserved for more than
/// one consumer, or for a pod bound to a node (one that runs), it is
/// refused.
async fn deallocate(
    client: &kube::Client,
    api: &ClaimApi,
    mut claim: ResourceClaim,
    key: &str,
) -> Result<ResourceClaim, StepError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let status = claim.status.get_or_insert_with(ResourceClaimStatus::default);
    let in_use = || StepError::Refused(format!("claim {key} is in use by other consumers"));
    match status.reserved_for.as_deref().unwrap_or_default() {
        [] => {}
        [only] if only.resource == "pods" && only.api_group.as_deref().unwrap_or("").is_empty() => {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let pod = pods.get_opt(&only.name).await?;
            let bound = pod.is_some_and(|p| {
                p.metadata.uid.as_deref() == Some(&*only.uid)
                    && p.spec.and_then(|s| s.node_name).is_some_and(|n| !n.is_empty())
            });
            if bound {
                return Err(in_use());
            }
        }
        _ => return Err(in_use()),
    }
    status.allocation = None;
    status.reserved_for = None;
    status.devices = None;
    Ok(api.replace_status(&name, &claim).await?)
}
