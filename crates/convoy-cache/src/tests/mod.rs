//! Cache tests: fixtures here, scenarios by concern.

mod nodes;
mod pods;
mod random;
mod snapshot;

use std::sync::Arc;

use convoy_api::k8s_openapi::api::core::v1::{Node, PodStatus};
use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{FakeClock, PodInfo};

use crate::{Cache, LABEL_ZONE};

fn new_cache() -> (Cache, FakeClock) {
    let clock = FakeClock::new();
    (Cache::new(Arc::new(clock.clone())), clock)
}

fn node(name: &str) -> Arc<Node> {
    Arc::new(NodeBuilder::new(name).build())
}

fn zoned(name: &str, zone: &str) -> Arc<Node> {
    Arc::new(NodeBuilder::new(name).label(LABEL_ZONE, zone).build())
}

/// A pending pod (no node) requesting `cpu`.
fn pod(name: &str, cpu: &str) -> Arc<PodInfo> {
    with_affinity(name, PodBuilder::new(name).cpu(cpu)).info()
}

/// The same pod as the watch shows it once bound to `node`.
fn bound(name: &str, cpu: &str, node: &str) -> Arc<PodInfo> {
    with_affinity(name, PodBuilder::new(name).cpu(cpu).node(node)).info()
}

/// Pods whose name ends in 0 have required anti-affinity, in 5 preferred
/// affinity (the snapshot keeps lists of the nodes hosting them).
fn with_affinity(name: &str, b: PodBuilder) -> PodBuilder {
    match name.chars().last() {
        Some('0') => b.pod_anti_affinity("zone", &[("app", "x")]),
        Some('5') => b.preferred_pod_affinity(1, "zone", &[("app", "x")]),
        _ => b,
    }
}

/// A bound pod in a terminal phase.
fn finished(name: &str, cpu: &str, node: &str, phase: &str) -> Arc<PodInfo> {
    let mut p = PodBuilder::new(name).cpu(cpu).node(node).build();
    p.status = Some(PodStatus { phase: Some(phase.to_string()), ..Default::default() });
    Arc::new(PodInfo::new(Arc::new(p)).unwrap())
}

/// Millicores requested on a node (0 when the cache does not hold it).
fn cpu(cache: &Cache, node: &str) -> i64 {
    cache.node_info(node).map_or(0, |n| n.requested.milli_cpu)
}

fn assert_ok(cache: &Cache) {
    if let Err(e) = cache.check_invariants() {
        panic!("invariant broken: {e}");
    }
}
