//! What the resource scorers share (upstream
//! `noderesources/resource_allocation.go`, v1.37.2): the pod's request and
//! the node's allocatable and allocated amount of each scored resource.
//! Resources backed by DRA (`DRAExtendedResource`) are not scored: Convoy
//! does not implement DynamicResources.

use std::sync::Arc;

use smallvec::SmallVec;

use convoy_api::resource::{CPU, EPHEMERAL_STORAGE, MEMORY, fit_scoring_requests};
use convoy_api::{NodeInfo, PodInfo};
use convoy_config::ResourceSpec;

use crate::helper::resource_names::is_scalar_resource_name;

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
    /// `calculatePodResourceRequestList`, v1.37.2): with `use_requested`
    /// (BalancedAllocation) its requests, pod-level requests included;
    /// otherwise (NodeResourcesFit) [`fit_scoring_requests`]: non-zero CPU
    /// and memory per container, pod-level requests not applied, as
    /// upstream's Fit scorer.
    pub fn pod_requests(&self, pod: &PodInfo) -> Values {
        let computed;
        let r = if self.use_requested {
            &pod.requests.requests
        } else {
            computed = fit_scoring_requests(pod.spec());
            &computed
        };
        self.resources
            .iter()
            .map(|k| match k {
                ResourceKind::Cpu => r.milli_cpu,
                ResourceKind::Memory => r.memory,
                ResourceKind::EphemeralStorage => r.ephemeral_storage,
                ResourceKind::Other { name, .. } => r.scalar.get(name).copied().unwrap_or(0),
            })
            .collect()
    }

    /// Upstream `calculateResourceAllocatableRequest`: (allocatable,
    /// allocated on the node); (0, 0) means "not scored" (also for a name
    /// that is neither cpu, memory, ephemeral-storage nor a scalar resource,
    /// such as `pods` or `storage`). Ephemeral storage and scalar resources
    /// always read real requests.
    fn allocatable_allocated(
        &self,
        node: &NodeInfo,
        kind: &ResourceKind,
        pod_request: i64,
    ) -> (i64, i64) {
        let requested = if self.use_requested { &node.requested } else { &node.non_zero_requested };
        match kind {
            ResourceKind::Other { scalar: true, .. } if pod_request == 0 => (0, 0),
            // Upstream reads other resources from the node's scalar
            // resources, which hold scalar names only (`Resource.Add`).
            ResourceKind::Other { scalar: false, .. } => (0, 0),
            ResourceKind::Cpu => (node.allocatable.milli_cpu, requested.milli_cpu),
            ResourceKind::Memory => (node.allocatable.memory, requested.memory),
            ResourceKind::EphemeralStorage => {
                (node.allocatable.ephemeral_storage, node.requested.ephemeral_storage)
            }
            ResourceKind::Other { name, .. } => match node.allocatable.scalar.get(name) {
                Some(&alloc) => (alloc, node.requested.scalar.get(name).copied().unwrap_or(0)),
                None => (0, 0),
            },
        }
    }

    /// Upstream `calculateNodeAllocatableRequest`: each scored resource's
    /// amounts on the node; all 0 for a resource that is not scored (a
    /// scalar resource the pod does not request, or allocatable 0).
    pub fn node_amounts(&self, node: &NodeInfo, pod_requests: &[i64]) -> NodeAmounts {
        let n = self.resources.len();
        let mut a = NodeAmounts {
            requested: Values::from_elem(0, n),
            allocated: Values::from_elem(0, n),
            allocatable: Values::from_elem(0, n),
        };
        self.fill(node, pod_requests, &mut a.requested, &mut a.allocated, &mut a.allocatable);
        a
    }

    /// [`node_amounts`](Self::node_amounts) handed to `f` as
    /// `(requested, allocated, allocatable)`, in arrays on the stack when
    /// at most four resources are scored (the default two always are): the
    /// Score path runs for every feasible node of every pod.
    pub fn with_node_amounts<R>(
        &self,
        node: &NodeInfo,
        pod_requests: &[i64],
        f: impl FnOnce(&[i64], &[i64], &[i64]) -> R,
    ) -> R {
        // The default (and by far the commonest) configuration: cpu and
        // memory, read straight from the node without the per-resource
        // dispatch. Same amounts as `fill`.
        if let ([ResourceKind::Cpu, ResourceKind::Memory], &[pod_cpu, pod_memory]) =
            (self.resources.as_slice(), pod_requests)
        {
            let on_node =
                if self.use_requested { &node.requested } else { &node.non_zero_requested };
            let allocatable = [node.allocatable.milli_cpu, node.allocatable.memory];
            let mut allocated = [on_node.milli_cpu, on_node.memory];
            let mut requested = [on_node.milli_cpu + pod_cpu, on_node.memory + pod_memory];
            for i in 0..2 {
                if allocatable[i] == 0 {
                    (allocated[i], requested[i]) = (0, 0);
                }
            }
            return f(&requested, &allocated, &allocatable);
        }
        const INLINE: usize = 4;
        let n = self.resources.len();
        if n > INLINE {
            let a = self.node_amounts(node, pod_requests);
            return f(&a.requested, &a.allocated, &a.allocatable);
        }
        let (mut requested, mut allocated, mut allocatable) =
            ([0; INLINE], [0; INLINE], [0; INLINE]);
        self.fill(
            node,
            pod_requests,
            &mut requested[..n],
            &mut allocated[..n],
            &mut allocatable[..n],
        );
        f(&requested[..n], &allocated[..n], &allocatable[..n])
    }

    /// Fills the three (zeroed) slices, one entry per scored resource.
    fn fill(
        &self,
        node: &NodeInfo,
        pod_requests: &[i64],
        requested: &mut [i64],
        allocated: &mut [i64],
        allocatable: &mut [i64],
    ) {
        for (i, kind) in self.resources.iter().enumerate() {
            let pod = pod_requests.get(i).copied().unwrap_or(0);
            let (alloc, on_node) = self.allocatable_allocated(node, kind, pod);
            if alloc == 0 {
                continue;
            }
            allocatable[i] = alloc;
            allocated[i] = on_node;
            requested[i] = on_node + pod;
        }
    }
}

/// A node's amounts of each scored resource, in configuration order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAmounts {
    /// Allocated plus the pod's request.
    pub requested: Values,
    /// What the pods on the node request (non-zero amounts for CPU and
    /// memory unless the scorer reads real requests).
    pub allocated: Values,
    /// Allocatable.
    pub allocatable: Values,
}

/// The weighted mean of `per_resource(requested, allocatable)` over the
/// resources with allocatable > 0 (upstream's least/most-allocated scorers).
pub fn weighted_mean(
    requested: &[i64],
    allocatable: &[i64],
    weights: &[i64],
    per_resource: impl Fn(i64, i64) -> i64,
) -> i64 {
    // Two resources (the default cpu and memory), without the loop.
    if let (&[r0, r1], &[a0, a1], &[w0, w1]) = (requested, allocatable, weights) {
        let part = |r, a, w| if a == 0 { (0, 0) } else { (per_resource(r, a) * w, w) };
        let ((s0, ws0), (s1, ws1)) = (part(r0, a0, w0), part(r1, a1, w1));
        let weight_sum = ws0 + ws1;
        return if weight_sum == 0 { 0 } else { (s0 + s1) / weight_sum };
    }
    let (mut node_score, mut weight_sum) = (0, 0);
    for ((&requested, &allocatable), &weight) in requested.iter().zip(allocatable).zip(weights) {
        if allocatable == 0 {
            continue;
        }
        node_score += per_resource(requested, allocatable) * weight;
        weight_sum += weight;
    }
    if weight_sum == 0 { 0 } else { node_score / weight_sum }
}

#[cfg(test)]
mod tests {
    use convoy_api::testing::{NodeBuilder, PodBuilder};

    use super::*;

    #[test]
    fn names_that_are_not_scalar_resources_are_not_scored() {
        // `storage` and `pods` are in the node's allocatable, but upstream's
        // NodeInfo keeps only cpu, memory, ephemeral-storage, pods (as a
        // count) and scalar resources: neither is scored.
        let scorer = ResourceAllocationScorer::new(
            &[
                ResourceSpec::new("cpu", 1),
                ResourceSpec::new("storage", 1),
                ResourceSpec::new("pods", 1),
            ],
            false,
        );
        let node = NodeBuilder::new("n").cpu("2").allocatable("storage", "100").info();
        let pod = PodBuilder::new("p").cpu("1").resource("storage", "50").info();
        let a = scorer.node_amounts(&node, &scorer.pod_requests(&pod));
        assert_eq!(a.allocatable.as_slice(), [2000, 0, 0]);
        assert_eq!(a.requested.as_slice(), [1000, 0, 0]);
    }
}
