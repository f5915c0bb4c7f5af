//! What the resource scorers share (upstream `resource_allocation.go`): the
//! pod's request and the node's allocatable/requested amount of each scored
//! resource.

use std::sync::Arc;

use smallvec::SmallVec;

use convoy_api::resource::{CPU, EPHEMERAL_STORAGE, MEMORY};
use convoy_api::{NodeInfo, PodInfo};
use convoy_config::ResourceSpec;

use super::is_scalar_resource_name;

/// Per-resource values, inline for the common handful of resources.
pub type Values = SmallVec<[i64; 4]>;

/// A scored resource, resolved once from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceKind {
    /// `cpu`, in millicores.
    Cpu,
    /// `memory`, in bytes.
    Memory,
    /// `ephemeral-storage`, in bytes.
    EphemeralStorage,
    /// Any other resource, by name; `scalar` says whether upstream treats it
    /// as a scalar resource (skipped when the pod does not request it).
    Other {
        /// The resource name.
        name: Arc<str>,
        /// Upstream `IsScalarResourceName`.
        scalar: bool,
    },
}

impl ResourceKind {
    /// Resolves a resource name.
    pub fn of(name: &str) -> Self {
        match name {
            CPU => Self::Cpu,
            MEMORY => Self::Memory,
            EPHEMERAL_STORAGE => Self::EphemeralStorage,
            other => Self::Other { name: Arc::from(other), scalar: is_scalar_resource_name(other) },
        }
    }
}

/// The resources a scorer looks at, their weights, and whether it reads
/// real requests (`use_requested`, BalancedAllocation) or the "non-zero"
/// ones that give request-less containers a default (Fit's strategies).
#[derive(Debug, Clone)]
pub struct ResourceAllocationScorer {
    /// Scored resources, in configuration order.
    pub resources: Vec<ResourceKind>,
    /// Their weights, same order.
    pub weights: Vec<i64>,
    /// Read `requested` rather than `non_zero_requested`.
    pub use_requested: bool,
}

impl ResourceAllocationScorer {
    /// A scorer over configured resources.
    pub fn new(specs: &[ResourceSpec], use_requested: bool) -> Self {
        Self {
            resources: specs.iter().map(|s| ResourceKind::of(&s.name)).collect(),
            weights: specs.iter().map(|s| s.weight).collect(),
            use_requested,
        }
    }

    /// The pod's request of each scored resource (upstream
    /// `calculatePodResourceRequestList`).
    pub fn pod_requests(&self, pod: &PodInfo) -> Values {
        let r = &pod.requests;
        self.resources
            .iter()
            .map(|k| match k {
                ResourceKind::Cpu if !self.use_requested => r.non_zero_milli_cpu,
                ResourceKind::Memory if !self.use_requested => r.non_zero_memory,
                ResourceKind::Cpu => r.requests.milli_cpu,
                ResourceKind::Memory => r.requests.memory,
                ResourceKind::EphemeralStorage => r.requests.ephemeral_storage,
                ResourceKind::Other { name, .. } => {
                    r.requests.scalar.get(name).copied().unwrap_or(0)
                }
            })
            .collect()
    }

    /// Upstream `calculateResourceAllocatableRequest`: (allocatable,
    /// requested including the pod); (0, 0) means "not scored".
    fn allocatable_request(
        &self,
        node: &NodeInfo,
        kind: &ResourceKind,
        pod_request: i64,
    ) -> (i64, i64) {
        let requested = if self.use_requested { &node.requested } else { &node.non_zero_requested };
        match kind {
            ResourceKind::Other { scalar: true, .. } if pod_request == 0 => (0, 0),
            ResourceKind::Cpu => (node.allocatable.milli_cpu, requested.milli_cpu + pod_request),
            ResourceKind::Memory => (node.allocatable.memory, requested.memory + pod_request),
            ResourceKind::EphemeralStorage => {
                (node.allocatable.ephemeral_storage, node.requested.ephemeral_storage + pod_request)
            }
            ResourceKind::Other { name, .. } => match node.allocatable.scalar.get(name) {
                Some(&alloc) => {
                    (alloc, node.requested.scalar.get(name).copied().unwrap_or(0) + pod_request)
                }
                None => (0, 0),
            },
        }
    }

    /// Requested and allocatable of each scored resource on the node; both
    /// 0 for a resource that is not scored (allocatable 0).
    pub fn requested_allocatable(&self, node: &NodeInfo, pod_requests: &[i64]) -> (Values, Values) {
        let n = self.resources.len();
        let mut requested = Values::from_elem(0, n);
        let mut allocatable = Values::from_elem(0, n);
        for (i, kind) in self.resources.iter().enumerate() {
            let (alloc, req) =
                self.allocatable_request(node, kind, pod_requests.get(i).copied().unwrap_or(0));
            if alloc == 0 {
                continue;
            }
            allocatable[i] = alloc;
            requested[i] = req;
        }
        (requested, allocatable)
    }
}

/// The weighted mean of `per_resource(requested, allocatable)` over the
/// resources with allocatable > 0 (upstream's least/most-allocated scorers).
pub fn weighted_mean(
    requested: &[i64],
    allocatable: &[i64],
    weights: &[i64],
    per_resource: impl Fn(i64, i64) -> i64,
) -> i64 {
    let (mut node_score, mut weight_sum) = (0, 0);
    for i in 0..requested.len() {
        if allocatable[i] == 0 {
            continue;
        }
        node_score += per_resource(requested[i], allocatable[i]) * weights[i];
        weight_sum += weights[i];
    }
    if weight_sum == 0 { 0 } else { node_score / weight_sum }
}
