//! `allocResourceClaims` (upstream `scheduler_perf/dra.go`,
//! `allocResourceClaimsOp`, v1.37.2): fills a cluster's devices faster than
//! scheduling pods would, by allocating claims directly.
//!
//! As upstream: every claim of the namespace not yet allocated is
//! allocated, one at a time in list order, with the structured allocator
//! (Convoy's, [`ClaimAllocator`], as DynamicResources uses it, on the slices
//! with the DeviceTaintRules applied, as upstream lists them with
//! `ListWithDeviceTaintRules`) on the first
//! node, in a fresh random order per claim, where it fits; devices held by
//! any claim allocated before (in any namespace, or earlier in this op)
//! are left out. The allocation is written into the claim's status (no
//! `reservedFor`: no pod uses the claim). A claim that fits nowhere is an
//! error naming it. The order of nodes comes from a generator seeded with
//! [`SEED`], so runs are reproducible (upstream uses Go's global
//! generator).
//!
//! The targets list the objects and write the claims; this module only
//! computes the allocations.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use convoy_api::objects::DeviceId;
use convoy_api::objects::dra::claim_devices;
use convoy_plugins::dynamic_resources::allocator::ClaimAllocator;
use convoy_plugins::dynamic_resources::cel::SelectorCache;
use convoy_plugins::dynamic_resources::pools::{SliceIndex, with_taint_rules};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceTaintRule, ResourceClaim, ResourceClaimStatus, ResourceSlice,
};
use rand::SeedableRng;
use rand::seq::SliceRandom;

/// Seed of the node order.
pub const SEED: u64 = 1;

/// What `allocResourceClaims` reads: the cluster's nodes, ResourceSlices,
/// DeviceClasses, DeviceTaintRules and every ResourceClaim (all namespaces:
/// their allocated devices are in use).
#[derive(Debug, Default)]
pub struct DraState {
    /// Nodes (the set is fixed while the op runs, as upstream assumes).
    pub nodes: Vec<Arc<Node>>,
    /// ResourceSlices.
    pub slices: Vec<Arc<ResourceSlice>>,
    /// DeviceClasses.
    pub classes: Vec<Arc<DeviceClass>>,
    /// Every ResourceClaim.
    pub claims: Vec<Arc<ResourceClaim>>,
    /// DeviceTaintRules (their taints are added to the devices they
    /// select).
    pub taint_rules: Vec<Arc<DeviceTaintRule>>,
}

/// Allocates the unallocated claims of `namespace` (`None`: of every
/// namespace) and returns them with `status.allocation` set, in list order.
pub fn allocate_claims(
    state: &DraState,
    namespace: Option<&str>,
) -> Result<Vec<ResourceClaim>, String> {
    let mut in_use: HashSet<DeviceId> =
        state.claims.iter().flat_map(|c| claim_devices(c)).collect();
    let classes: HashMap<&str, Arc<DeviceClass>> = state
        .classes
        .iter()
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c.clone())))
        .collect();
    let class = |name: &str| classes.get(name).cloned();
    let index = SliceIndex::build(&with_taint_rules(state.slices.clone(), &state.taint_rules));
    let cache = SelectorCache::default();
    let mut nodes = state.nodes.clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    let todo: Vec<&Arc<ResourceClaim>> = state
        .claims
        .iter()
        .filter(|c| namespace.is_none_or(|ns| c.metadata.namespace.as_deref() == Some(ns)))
        .filter(|c| c.status.as_ref().and_then(|s| s.allocation.as_ref()).is_none())
        .collect();
    let mut out = Vec::with_capacity(todo.len());
    for (i, claim) in todo.iter().enumerate() {
        let name = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or(""),
            claim.metadata.name.as_deref().unwrap_or("")
        );
        let allocator = ClaimAllocator::new(vec![Arc::clone(claim)], &class, &cache)
            .map_err(|e| format!("claim {name}: {e}"))?;
        nodes.shuffle(&mut rng);
        let mut allocated = None;
        for node in &nodes {
            let pools = index.pools_for_node(node);
            let result = allocator
                .allocate(node, &pools, &|id| in_use.contains(id))
                .map_err(|e| format!("claim {name}: {e}"))?;
            if let Some(mut results) = result {
                allocated = results.pop();
                break;
            }
        }
        let Some(allocation) = allocated else {
            return Err(format!(
                "could not allocate claim {name} ({} of {}) on any of {} nodes",
                i + 1,
                todo.len(),
                nodes.len()
            ));
        };
        let mut claim = ResourceClaim::clone(claim);
        claim.status.get_or_insert_with(ResourceClaimStatus::default).allocation = Some(allocation);
        in_use.extend(claim_devices(&claim));
        out.push(claim);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": name}})).unwrap())
    }

    fn slice(node: &str, devices: usize) -> Arc<ResourceSlice> {
        let devices: Vec<_> = (0..devices).map(|i| json!({"name": format!("d{i}")})).collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": format!("s-{node}")},
                "spec": {"driver": "drv", "nodeName": node, "devices": devices,
                    "pool": {"name": format!("p-{node}"), "generation": 1, "resourceSliceCount": 1}}
            }))
            .unwrap(),
        )
    }

    fn claim(ns: &str, name: &str, class: &str) -> Arc<ResourceClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": ns},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": class}}]}}
            }))
            .unwrap(),
        )
    }

    fn class() -> Arc<DeviceClass> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "c"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == \"drv\""}}]}}))
            .unwrap(),
        )
    }

    #[test]
    fn allocates_each_claim_once_on_distinct_devices_until_full() {
        let mut state = DraState {
            nodes: vec![node("a"), node("b")],
            slices: vec![slice("a", 2), slice("b", 1)],
            classes: vec![class()],
            claims: (0..3).map(|i| claim("init", &format!("c{i}"), "c")).collect(),
            taint_rules: Vec::new(),
        };
        state.claims.push(claim("other", "x", "c"));
        let out = allocate_claims(&state, Some("init")).unwrap();
        assert_eq!(out.len(), 3);
        let mut devices = HashSet::new();
        for c in &out {
            assert_eq!(c.metadata.namespace.as_deref(), Some("init"));
            let alloc = c.status.as_ref().unwrap().allocation.as_ref().unwrap();
            assert!(alloc.node_selector.is_some(), "node-local devices select their node");
            assert!(c.status.as_ref().unwrap().reserved_for.is_none());
            for d in claim_devices(c) {
                assert!(devices.insert(d.to_string()), "{d} allocated twice");
            }
        }
        assert_eq!(devices.len(), 3);
        // Same seed, same result.
        assert_eq!(allocate_claims(&state, Some("init")).unwrap(), out);

        // With those allocated, the fourth claim finds no device.
        state.claims = out.into_iter().map(Arc::new).chain([claim("other", "x", "c")]).collect();
        assert!(allocate_claims(&state, Some("init")).unwrap().is_empty(), "nothing left to do");
        let e = allocate_claims(&state, None).unwrap_err();
        assert_eq!(e, "could not allocate claim other/x (1 of 1) on any of 2 nodes");

        // A missing class is an error naming the claim.
        state.claims = vec![claim("init", "y", "nope")];
        let e = allocate_claims(&state, None).unwrap_err();
        assert!(e.starts_with("claim init/y: ") && e.contains("nope"), "{e}");
    }

    /// As upstream's op lists slices with the DeviceTaintRules applied: a
    /// device a rule taints NoSchedule is not allocated.
    #[test]
    fn devices_tainted_by_a_rule_are_left_out() {
        let rule = |device: &str| -> Arc<DeviceTaintRule> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "r"},
                    "spec": {"deviceSelector": {"pool": "p-a", "device": device},
                             "taint": {"key": "k", "effect": "NoSchedule"}}}))
                .unwrap(),
            )
        };
        let mut state = DraState {
            nodes: vec![node("a")],
            slices: vec![slice("a", 2)],
            classes: vec![class()],
            claims: (0..2).map(|i| claim("init", &format!("c{i}"), "c")).collect(),
            taint_rules: Vec::new(),
        };
        assert_eq!(allocate_claims(&state, None).unwrap().len(), 2);
        state.taint_rules = vec![rule("d0")];
        let e = allocate_claims(&state, None).unwrap_err();
        assert_eq!(e, "could not allocate claim init/c1 (2 of 2) on any of 1 nodes");
    }
}
