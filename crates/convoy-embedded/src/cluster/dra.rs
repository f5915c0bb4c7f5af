//! Dynamic Resource Allocation on the embedded cluster: the
//! ResourceClaimTemplates (held here only: the scheduler does not read
//! them), DynamicResources' claim writes ([`ClaimWrite`]) as the API server
//! applies them, and kube-controller-manager's resourceclaim controller
//! (upstream `pkg/controller/resourceclaim/controller.go`, v1.37.2),
//! completed at once:
//!
//! - a pod whose `spec.resourceClaims[]` names a template gets a claim made
//!   from it (`syncPod`/`handleClaim`): name `<pod>-<entry>-<5 chars>` as the
//!   API server's `generateName` (from a deterministic sequence, so
//!   simulations are reproducible), the pod as controlling owner, the
//!   annotation `resource.kubernetes.io/pod-claim-name`, the template's
//!   labels, annotations and `spec.spec`; then the pod's
//!   `status.resourceClaimStatuses`. A missing template leaves the pod
//!   waiting (no status written) until the template is applied, as
//!   upstream's retries do. A bound pod gets its allocated, unreserved
//!   claims reserved (`reserveFor`).
//! - a pod deleted, terminal, or deleted before being scheduled is removed
//!   from its claims' `status.reservedFor` (`syncClaim`); a claim left
//!   unreserved that carries the delete-protection finalizer is
//!   deallocated and loses the finalizer; a generated claim no longer used
//!   by its done pod is deleted, and the claims a deleted pod owned are
//!   deleted as the garbage collector deletes dependents.
//!
//! Deleting a claim with the delete-protection finalizer while pods still
//! use it only marks it (`deletionTimestamp`); it goes once they are gone.
//! Upstream makes some of these changes in two writes (status, then the
//! finalizer); here each is one update.

use std::collections::BTreeMap;
use std::sync::Arc;

use convoy_api::objects::dra::{ANN_POD_CLAIM_NAME, CLAIM_FINALIZER};
use convoy_api::{BindError, ClaimWrite, ClusterObject, ClusterUpdate};
use k8s_openapi::api::core::v1::{Pod, PodResourceClaim, PodResourceClaimStatus, PodStatus};
use k8s_openapi::api::resource::v1::{
    ResourceClaim, ResourceClaimConsumerReference, ResourceClaimStatus, ResourceClaimTemplate,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use super::{ClusterError, EmbeddedCluster, State};

/// Upstream `resource.ResourceClaimReservedForMaxSize`.
const RESERVED_FOR_MAX: usize = 256;
/// The API server's `generateName` alphabet (`utilrand.String`).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn claim_key(namespace: &str, name: &str) -> (&'static str, String) {
    ("ResourceClaim", format!("{namespace}/{name}"))
}

fn claim_name(c: &ResourceClaim) -> (&str, &str) {
    (c.metadata.namespace.as_deref().unwrap_or("default"), c.metadata.name.as_deref().unwrap_or(""))
}

fn gone(name: &str) -> BindError {
    BindError::Failed(format!("resourceclaims.resource.k8s.io {name:?} not found"))
}

fn has_finalizer(c: &ResourceClaim) -> bool {
    c.metadata.finalizers.iter().flatten().any(|f| f == CLAIM_FINALIZER)
}

fn reserved_for(c: &ResourceClaim) -> &[ResourceClaimConsumerReference] {
    c.status.as_ref().and_then(|s| s.reserved_for.as_deref()).unwrap_or(&[])
}

fn is_allocated(c: &ResourceClaim) -> bool {
    c.status.as_ref().is_some_and(|s| s.allocation.is_some())
}

/// Whether a `reservedFor` entry is the pod with that UID (upstream:
/// `apiGroup: ""`, `resource: pods`).
fn is_pod_entry(r: &ResourceClaimConsumerReference, pod_uid: &str) -> bool {
    r.api_group.as_deref().unwrap_or("").is_empty() && r.resource == "pods" && r.uid == pod_uid
}

fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// Upstream `isPodDone`: terminal, or deleted before being scheduled.
pub(crate) fn is_pod_done(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let bound =
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    matches!(phase, Some("Succeeded" | "Failed"))
        || (pod.metadata.deletion_timestamp.is_some() && !bound)
}

/// The controlling owner of a claim when it is a pod: (name, UID)
/// (upstream `owningPod`).
fn owning_pod(c: &ResourceClaim) -> Option<(&str, &str)> {
    c.metadata.owner_references.iter().flatten().find_map(|o| {
        (o.controller == Some(true) && o.api_version == "v1" && o.kind == "Pod")
            .then_some((o.name.as_str(), o.uid.as_str()))
    })
}

/// What upstream `resourceclaim.Name` says of a pod's claim entry.
#[derive(Debug, PartialEq)]
enum EntryClaim {
    /// The claim's name, and whether it must be owned by the pod (a
    /// generated one).
    Named(String, bool),
    /// Recorded as not needed (a status entry without a claim name).
    NotNeeded,
    /// Generated, not yet recorded in the pod's status.
    NotRecorded,
}

fn entry_claim(pod: &Pod, entry: &PodResourceClaim) -> EntryClaim {
    if let Some(name) = &entry.resource_claim_name {
        return EntryClaim::Named(name.clone(), false);
    }
    let statuses = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.as_deref());
    match statuses.into_iter().flatten().find(|s| s.name == entry.name) {
        Some(PodResourceClaimStatus { resource_claim_name: Some(n), .. }) => {
            EntryClaim::Named(n.clone(), true)
        }
        Some(_) => EntryClaim::NotNeeded,
        None => EntryClaim::NotRecorded,
    }
}

/// The names of the claims a pod uses (upstream `resourceclaim.PodClaims`).
fn pod_claims(pod: &Pod) -> Vec<String> {
    let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.as_deref()).unwrap_or(&[]);
    entries
        .iter()
        .filter_map(|e| match entry_claim(pod, e) {
            EntryClaim::Named(n, _) => Some(n),
            _ => None,
        })
        .collect()
}

/// The `generateName` base upstream's controller gives a generated claim:
/// `<pod>-<entry>-`, both parts cut in proportion when longer than 57.
fn generate_name_base(pod: &str, entry: &str) -> String {
    let base = format!("{pod}-{entry}-");
    const MAX_BASE: usize = 57;
    if base.len() <= MAX_BASE {
        return base;
    }
    let cut = |s: &str| {
        let mut n = s.len() * MAX_BASE / base.len();
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s[..n].to_string()
    };
    format!("{}-{}", cut(pod), cut(entry))
}

/// The claim upstream's controller creates for a pod's entry from a
/// template (before the API server names it and gives it a UID).
pub(crate) fn claim_from_template(
    pod: &Pod,
    entry: &str,
    template: &ResourceClaimTemplate,
    name: String,
) -> ResourceClaim {
    let meta = template.spec.as_ref().and_then(|s| s.metadata.clone()).unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(ANN_POD_CLAIM_NAME.to_string(), entry.to_string());
    ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: pod.metadata.namespace.clone(),
            generate_name: Some(generate_name_base(
                pod.metadata.name.as_deref().unwrap_or(""),
                entry,
            )),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod_uid(pod).to_string(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            annotations: Some(annotations),
            labels: meta.labels,
            ..Default::default()
        },
        spec: template.spec.as_ref().and_then(|s| s.spec.clone()),
        status: None,
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl State {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<ResourceClaim>> {
        match self.objects.get(&claim_key(namespace, name))? {
            ClusterObject::ResourceClaim(c) => Some(c.clone()),
            _ => None,
        }
    }

    /// A name as the API server's `generateName` makes one (base cut to 58
    /// characters, 5 characters appended), unused in the namespace; from a
    /// sequence, so that runs repeat.
    fn generate_claim_name(&mut self, namespace: &str, base: &str) -> String {
        let mut base = base.to_string();
        while base.len() > 58 {
            base.pop();
        }
        loop {
            self.name_seq += 1;
            let mut r = splitmix64(self.name_seq);
            let mut name = base.clone();
            for _ in 0..5 {
                name.push(NAME_ALPHABET[(r % NAME_ALPHABET.len() as u64) as usize] as char);
                r /= NAME_ALPHABET.len() as u64;
            }
            if self.claim(namespace, &name).is_none() {
                return name;
            }
        }
    }

    /// A claim owned by the pod that was made for its entry `entry` but not
    /// recorded in its status (upstream `findPodResourceClaim`).
    fn orphan_claim(&self, pod: &Pod, entry: &str) -> Option<Arc<ResourceClaim>> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        self.of_kind("ResourceClaim").find_map(|o| match o {
            ClusterObject::ResourceClaim(c)
                if c.metadata.namespace.as_deref() == Some(ns)
                    && owning_pod(c).is_some_and(|(_, uid)| uid == pod_uid(pod))
                    && c.metadata.annotations.as_ref().and_then(|a| a.get(ANN_POD_CLAIM_NAME))
                        == Some(&entry.to_string()) =>
            {
                Some(c.clone())
            }
            _ => None,
        })
    }
}

impl EmbeddedCluster {
    /// Stores a claim with a new resourceVersion and emits
    /// `ObjectApplied`.
    fn store_claim(&self, s: &mut State, mut claim: ResourceClaim) -> Arc<ResourceClaim> {
        claim.metadata.resource_version = Some(s.next_version());
        let claim = Arc::new(claim);
        let (ns, name) = claim_name(&claim);
        let obj = ClusterObject::ResourceClaim(claim.clone());
        s.objects.insert(claim_key(ns, name), obj.clone());
        self.send(ClusterUpdate::ObjectApplied(obj));
        claim
    }

    /// Removes a claim from the store; emits `ObjectDeleted`.
    fn remove_claim(&self, s: &mut State, namespace: &str, name: &str) {
        if let Some(obj) = s.objects.remove(&claim_key(namespace, name)) {
            self.send(ClusterUpdate::ObjectDeleted(obj));
        }
    }

    /// What a claim's deletion comes to: one with the delete-protection
    /// finalizer still reserved is only marked (`deletionTimestamp`); any
    /// other goes (the controller drops the finalizer of an unreserved
    /// one, deallocating it).
    pub(super) fn delete_claim(&self, s: &mut State, claim: &ResourceClaim) {
        let (ns, name) = claim_name(claim);
        if has_finalizer(claim) && !reserved_for(claim).is_empty() {
            if claim.metadata.deletion_timestamp.is_none() {
                let mut c = claim.clone();
                c.metadata.deletion_timestamp =
                    Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
                self.store_claim(s, c);
            }
            return;
        }
        self.remove_claim(s, ns, name);
    }

    /// Upstream `syncClaim`'s last step for a claim being deleted: once no
    /// pod uses it, the controller removes its allocation and finalizer
    /// and the API server removes it.
    fn finish_deletion(&self, s: &mut State, claim: &ResourceClaim) {
        if claim.metadata.deletion_timestamp.is_some() && reserved_for(claim).is_empty() {
            let (ns, name) = claim_name(claim);
            self.remove_claim(s, ns, name);
        }
    }

    /// Admits a claim applied with `apply_object` as the API server would:
    /// a UID when it has none (kept from the claim it replaces) and a new
    /// resourceVersion.
    pub(super) fn admit_claim(s: &mut State, claim: &ResourceClaim) -> ResourceClaim {
        let mut claim = claim.clone();
        if claim.metadata.uid.as_deref().is_none_or(str::is_empty) {
            let (ns, name) = claim_name(&claim);
            claim.metadata.uid = Some(
                s.claim(ns, name)
                    .and_then(|old| old.metadata.uid.clone())
                    .unwrap_or_else(|| format!("sim-claim-{ns}-{name}")),
            );
        }
        claim.metadata.resource_version = Some(s.next_version());
        claim
    }

    /// Creates or replaces a ResourceClaimTemplate (held here only: the
    /// scheduler does not read templates); pods waiting for it get their
    /// claims.
    pub fn apply_resource_claim_template(
        &self,
        mut template: ResourceClaimTemplate,
    ) -> Result<Arc<ResourceClaimTemplate>, ClusterError> {
        let name = template.metadata.name.clone().filter(|n| !n.is_empty());
        let name = name.ok_or(ClusterError::MissingName("resourceclaimtemplate"))?;
        let ns = template.metadata.namespace.get_or_insert_with(|| "default".into()).clone();
        let mut s = self.state.lock();
        template.metadata.resource_version = Some(s.next_version());
        let template = Arc::new(template);
        s.templates.insert((ns.clone(), name.clone()), template.clone());
        // Upstream `enqueueResourceClaimTemplate`: the pods that name it.
        let mut waiting: Vec<Arc<Pod>> = s
            .pods
            .values()
            .filter(|p| {
                p.metadata.namespace.as_deref() == Some(&ns)
                    && p.spec.as_ref().and_then(|s| s.resource_claims.as_ref()).is_some_and(|e| {
                        e.iter().any(|e| e.resource_claim_template_name.as_deref() == Some(&name))
                    })
            })
            .cloned()
            .collect();
        // In a fixed order: the generated names depend on it.
        waiting.sort_unstable_by_key(|p| convoy_api::PodKey::of(p));
        for pod in waiting {
            self.sync_pod_claims(&mut s, &pod, true);
        }
        Ok(template)
    }

    /// Deletes a ResourceClaimTemplate (claims made from it stay).
    pub fn delete_resource_claim_template(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<ResourceClaimTemplate>, ClusterError> {
        self.state.lock().templates.remove(&(namespace.to_string(), name.to_string())).ok_or_else(
            || ClusterError::NotFound(format!("resourceclaimtemplate {namespace}/{name}")),
        )
    }

    /// The ResourceClaimTemplates held, sorted by namespace and name.
    pub fn resource_claim_templates(&self) -> Vec<Arc<ResourceClaimTemplate>> {
        let s = self.state.lock();
        let mut out: Vec<_> = s.templates.iter().collect();
        out.sort_unstable_by(|a, b| a.0.cmp(b.0));
        out.into_iter().map(|(_, t)| t.clone()).collect()
    }

    /// The ResourceClaim `namespace/name`.
    pub fn resource_claim(&self, namespace: &str, name: &str) -> Option<Arc<ResourceClaim>> {
        self.state.lock().claim(namespace, name)
    }

    /// The controller's `syncPod` for a pod just added or changed:
    /// claims made from templates, the pod's status recording them
    /// (`PodUpdated`), and a bound pod's allocated claims reserved for it.
    /// `may_own` says whether claims owned by the pod may exist already
    /// (not so for a pod just created with a new UID), for upstream's
    /// search for claims made but not recorded.
    pub(super) fn sync_pod_claims(&self, s: &mut State, pod: &Arc<Pod>, may_own: bool) {
        let Some(entries) = pod.spec.as_ref().and_then(|s| s.resource_claims.as_ref()) else {
            return;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            return;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let mut made: BTreeMap<String, String> = BTreeMap::new();
        for entry in entries {
            match entry_claim(pod, entry) {
                EntryClaim::NotNeeded => continue,
                EntryClaim::Named(name, check_owner) => {
                    let exists = s.claim(&ns, &name).is_some_and(|c| {
                        !check_owner || owning_pod(&c).is_some_and(|(_, u)| u == pod_uid(pod))
                    });
                    if exists {
                        continue;
                    }
                }
                EntryClaim::NotRecorded => {}
            }
            let Some(template_name) = &entry.resource_claim_template_name else { continue };
            if may_own && let Some(c) = s.orphan_claim(pod, &entry.name) {
                made.insert(entry.name.clone(), claim_name(&c).1.to_string());
                continue;
            }
            let Some(template) = s.templates.get(&(ns.clone(), template_name.clone())).cloned()
            else {
                // Upstream fails the sync and retries; the pod waits for
                // the template (see `apply_resource_claim_template`).
                tracing::info!(
                    pod = %format!("{ns}/{}", pod.metadata.name.as_deref().unwrap_or("")),
                    claim = %entry.name,
                    "resource claim template {template_name:?} not found: the pod waits for it"
                );
                return;
            };
            let base = generate_name_base(pod.metadata.name.as_deref().unwrap_or(""), &entry.name);
            let name = s.generate_claim_name(&ns, &base);
            let mut claim = claim_from_template(pod, &entry.name, &template, name.clone());
            claim.metadata.uid = Some(format!("sim-claim-{ns}-{name}"));
            self.store_claim(s, claim);
            made.insert(entry.name.clone(), name);
        }
        let mut pod = pod.clone();
        if !made.is_empty() {
            let mut new = Pod::clone(&pod);
            let status = new.status.get_or_insert_with(PodStatus::default);
            let mut merged: BTreeMap<String, String> = status
                .resource_claim_statuses
                .iter()
                .flatten()
                .filter_map(|s| Some((s.name.clone(), s.resource_claim_name.clone()?)))
                .collect();
            merged.extend(made);
            status.resource_claim_statuses = Some(
                merged
                    .into_iter()
                    .map(|(name, claim)| PodResourceClaimStatus {
                        name,
                        resource_claim_name: Some(claim),
                    })
                    .collect(),
            );
            new.metadata.resource_version = Some(s.next_version());
            let new = Arc::new(new);
            s.pods.insert(convoy_api::PodKey::of(&new), new.clone());
            self.send(ClusterUpdate::PodUpdated { old: pod, new: new.clone() });
            pod = new;
        }
        let bound =
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
        if !bound {
            // The scheduler reserves.
            return;
        }
        for name in pod_claims(&pod) {
            let Some(c) = s.claim(&ns, &name) else { continue };
            let reserved = reserved_for(&c);
            if is_allocated(&c)
                && !reserved.iter().any(|r| is_pod_entry(r, pod_uid(&pod)))
                && reserved.len() < RESERVED_FOR_MAX
            {
                let mut c = ResourceClaim::clone(&c);
                c.status
                    .get_or_insert_with(Default::default)
                    .reserved_for
                    .get_or_insert_with(Vec::new)
                    .push(pod_reference(pod.metadata.name.as_deref().unwrap_or(""), pod_uid(&pod)));
                self.store_claim(s, c);
            }
        }
    }

    /// The controller's `syncClaim` for the claims of a pod that was
    /// deleted (`deleted`) or will not run any more (see the module docs).
    /// A pod that may still run is left alone.
    pub(super) fn release_pod_claims(&self, s: &mut State, pod: &Pod, deleted: bool) {
        if !deleted && !is_pod_done(pod) {
            return;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let uid = pod_uid(pod);
        let pod_name = pod.metadata.name.as_deref().unwrap_or("");
        let mut names = pod_claims(pod);
        if deleted {
            // Claims made for entries not yet recorded (the pod waited for
            // another template): the garbage collector deletes them too.
            let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.as_deref());
            for e in entries.unwrap_or(&[]) {
                if entry_claim(pod, e) == EntryClaim::NotRecorded
                    && let Some(c) = s.orphan_claim(pod, &e.name)
                {
                    names.push(claim_name(&c).1.to_string());
                }
            }
        }
        for name in names {
            let Some(claim) = s.claim(&ns, &name) else { continue };
            let before = reserved_for(&claim);
            let remaining: Vec<_> =
                before.iter().filter(|r| !is_pod_entry(r, uid)).cloned().collect();
            let mut claim = ResourceClaim::clone(&claim);
            if remaining.len() < before.len() {
                let status = claim.status.get_or_insert_with(ResourceClaimStatus::default);
                status.reserved_for = (!remaining.is_empty()).then_some(remaining.clone());
                if remaining.is_empty() && has_finalizer(&claim) {
                    // Structured allocation: deallocated by clearing it.
                    claim.status.get_or_insert_with(Default::default).allocation = None;
                }
                if !is_allocated(&claim) {
                    claim
                        .metadata
                        .finalizers
                        .get_or_insert_with(Vec::new)
                        .retain(|f| f != CLAIM_FINALIZER);
                    if claim.metadata.finalizers.as_ref().is_some_and(Vec::is_empty) {
                        claim.metadata.finalizers = None;
                    }
                }
                let written = self.store_claim(s, claim);
                if written.metadata.deletion_timestamp.is_some() {
                    self.finish_deletion(s, &written);
                    continue;
                }
                claim = ResourceClaim::clone(&written);
            } else if has_finalizer(&claim)
                && claim.metadata.deletion_timestamp.is_some()
                && remaining.is_empty()
            {
                self.finish_deletion(s, &claim);
                continue;
            }
            let owned = owning_pod(&claim).is_some_and(|(n, _)| n == pod_name);
            if deleted {
                // The garbage collector deletes what the pod owned.
                let dependent =
                    claim.metadata.owner_references.iter().flatten().any(|o| o.uid == uid);
                if dependent {
                    self.delete_claim(s, &claim);
                }
            } else if remaining.is_empty() && owned {
                // Generated for a pod that will not run: deleted.
                self.delete_claim(s, &claim);
            }
        }
    }

    /// Applies one of DynamicResources' claim writes as the API server
    /// would (see [`ClaimWrite`]) and returns the claim as written, with a
    /// new resourceVersion; emits `ObjectApplied`. Refusals: the claim is
    /// gone (or is another with the same name, or is being deleted, for
    /// `Reserve`: `claim ns/x got deleted in the meantime`), allocated
    /// meanwhile (`claim ns/x got allocated elsewhere in the meantime`), a
    /// reservation without an allocation, the pod reserved twice, or
    /// `status.reservedFor` full (256).
    pub fn write_claim_now(&self, write: ClaimWrite) -> Result<Arc<ResourceClaim>, BindError> {
        let mut s = self.state.lock();
        match write {
            ClaimWrite::Reserve { namespace, name, uid, allocation, pod_name, pod_uid } => {
                let key = format!("{namespace}/{name}");
                let deleted =
                    || BindError::Failed(format!("claim {key} got deleted in the meantime"));
                let claim = s.claim(&namespace, &name).ok_or_else(deleted)?;
                if (!uid.is_empty() && claim.metadata.uid.as_deref() != Some(uid.as_str()))
                    || claim.metadata.deletion_timestamp.is_some()
                {
                    return Err(deleted());
                }
                let mut claim = ResourceClaim::clone(&claim);
                if let Some(allocation) = allocation {
                    if is_allocated(&claim) {
                        return Err(BindError::Failed(format!(
                            "claim {key} got allocated elsewhere in the meantime"
                        )));
                    }
                    if !has_finalizer(&claim) {
                        claim
                            .metadata
                            .finalizers
                            .get_or_insert_with(Vec::new)
                            .push(CLAIM_FINALIZER.into());
                    }
                    claim.status.get_or_insert_with(Default::default).allocation = Some(allocation);
                }
                let invalid = |msg: String| {
                    BindError::Failed(format!(
                        "add reservation to claim {key}: ResourceClaim.resource.k8s.io {name:?} is invalid: {msg}"
                    ))
                };
                if !is_allocated(&claim) {
                    return Err(invalid(
                        "status.reservedFor: Forbidden: may not be specified when `allocated` is not set".into(),
                    ));
                }
                let list = claim
                    .status
                    .get_or_insert_with(Default::default)
                    .reserved_for
                    .get_or_insert_with(Vec::new);
                if list.iter().any(|r| r.uid == pod_uid) {
                    return Err(invalid(format!(
                        "status.reservedFor[{}]: Duplicate value: {pod_uid:?}",
                        list.len()
                    )));
                }
                if list.len() >= RESERVED_FOR_MAX {
                    return Err(invalid(format!(
                        "status.reservedFor: Too many: {}: must have at most {RESERVED_FOR_MAX} items",
                        list.len() + 1
                    )));
                }
                list.push(pod_reference(&pod_name, &pod_uid));
                Ok(self.store_claim(&mut s, claim))
            }
            ClaimWrite::Unreserve { namespace, name, pod_uid } => {
                let claim = s.claim(&namespace, &name).ok_or_else(|| gone(&name))?;
                if !reserved_for(&claim).iter().any(|r| r.uid == pod_uid) {
                    // Nothing to remove: the patch changes nothing.
                    return Ok(claim);
                }
                let mut claim = ResourceClaim::clone(&claim);
                if let Some(status) = claim.status.as_mut() {
                    let list = status.reserved_for.get_or_insert_with(Vec::new);
                    list.retain(|r| r.uid != pod_uid);
                    if list.is_empty() {
                        status.reserved_for = None;
                    }
                }
                let written = self.store_claim(&mut s, claim);
                self.finish_deletion(&mut s, &written);
                Ok(written)
            }
            ClaimWrite::Deallocate { namespace, name, uid } => {
                let claim = s.claim(&namespace, &name).ok_or_else(|| gone(&name))?;
                if !uid.is_empty() && claim.metadata.uid.as_deref() != Some(uid.as_str()) {
                    return Err(BindError::Failed(format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        claim.metadata.uid.as_deref().unwrap_or("")
                    )));
                }
                let mut claim = ResourceClaim::clone(&claim);
                if let Some(status) = claim.status.as_mut() {
                    status.allocation = None;
                    status.reserved_for = None;
                    status.devices = None;
                }
                let written = self.store_claim(&mut s, claim);
                self.finish_deletion(&mut s, &written);
                Ok(written)
            }
        }
    }
}

/// A `status.reservedFor` entry for a pod.
fn pod_reference(name: &str, uid: &str) -> ResourceClaimConsumerReference {
    ResourceClaimConsumerReference {
        api_group: None,
        resource: "pods".into(),
        name: name.to_string(),
        uid: uid.to_string(),
    }
}

#[cfg(test)]
mod tests;
