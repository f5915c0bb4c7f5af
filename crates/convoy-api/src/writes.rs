//! The object writes plugins ask of the adapter besides bindings, through
//! [`Binder::write_volume`](crate::Binder::write_volume) and
//! [`Binder::write_claim`](crate::Binder::write_claim): VolumeBinding's
//! PreBind updates of PersistentVolumes and claims, and DynamicResources'
//! ResourceClaim updates. They are typed, not a generic client (upstream's
//! plugins hold a `ClientSet`), so that each adapter carries them out with
//! the API server's checks: the API adapter as updates with
//! `resourceVersion` preconditions, the embedded cluster as the same
//! checks in memory.

/// A claim, as a PersistentVolume's `spec.claimRef` names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimRef {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The claim's UID.
    pub uid: String,
}

/// One write of VolumeBinding's PreBind (upstream `BindPodVolumes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeWrite {
    /// Binds a PersistentVolume to a claim: sets its `spec.claimRef` and
    /// the annotation `pv.kubernetes.io/bound-by-controller: "yes"`, as
    /// upstream's binder updates the PV; the PV controller then binds the
    /// claim to it.
    BindVolume {
        /// The PersistentVolume.
        pv: String,
        /// Its `metadata.resourceVersion` when it was chosen: the write
        /// fails with a conflict if the volume changed since.
        resource_version: Option<String>,
        /// The claim.
        claim: ClaimRef,
    },
    /// Asks for a volume to be provisioned for a claim on a node: sets the
    /// claim's annotation `volume.kubernetes.io/selected-node`.
    SelectNode {
        /// The claim.
        claim: ClaimRef,
        /// Its `metadata.resourceVersion` when it was chosen.
        resource_version: Option<String>,
        /// The chosen node.
        node: String,
    },
}

/// One of DynamicResources' writes to a ResourceClaim (upstream
/// `bindClaim` in PreBind, `unreserve`, and PostFilter's deallocation).
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimWrite {
    /// PreBind: adds the finalizer
    /// [`CLAIM_FINALIZER`](crate::objects::dra::CLAIM_FINALIZER), sets
    /// `status.allocation` when `allocation` is given (refused if the claim
    /// was allocated meanwhile: `claim ns/x got allocated elsewhere in the
    /// meantime`, or deleted: `claim ns/x got deleted in the meantime`),
    /// and adds the pod to `status.reservedFor`.
    Reserve {
        /// The claim's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
        /// The claim's UID when it was read (a claim deleted and created
        /// again under the same name is another claim).
        uid: String,
        /// The allocation to write; `None` when the claim is allocated
        /// already and only the reservation is added.
        allocation: Option<k8s_openapi::api::resource::v1::AllocationResult>,
        /// The pod's name.
        pod_name: String,
        /// The pod's UID.
        pod_uid: String,
    },
    /// Unreserve: removes the pod from `status.reservedFor`.
    Unreserve {
        /// The claim's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
        /// The pod's UID.
        pod_uid: String,
    },
    /// PostFilter: clears `status.allocation`, `status.reservedFor` and
    /// `status.devices` of a claim no pod uses any more (upstream
    /// deallocates so that the pod can be placed elsewhere).
    Deallocate {
        /// The claim's namespace.
        namespace: String,
        /// The claim's name.
        name: String,
        /// The claim's UID when it was read.
        uid: String,
    },
}

impl ClaimWrite {
    /// `namespace/name` of the claim written.
    pub fn claim_key(&self) -> String {
        match self {
            ClaimWrite::Reserve { namespace, name, .. }
            | ClaimWrite::Unreserve { namespace, name, .. }
            | ClaimWrite::Deallocate { namespace, name, .. } => format!("{namespace}/{name}"),
        }
    }
}
