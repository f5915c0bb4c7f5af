//! VolumeBinding's Score (upstream `scorer.go` and `Score` in
//! `volume_binding.go`, v1.37.2, StorageCapacityScoring on): for the
//! volumes Filter chose on a node, per class, the utilization `requested *
//! 100 / capacity` (100 when the capacity is 0 or exceeded) through the
//! args' `shape`, averaged over the classes and rounded as Go's
//! `math.Round`.
//!
//! The chosen static volumes (requests summed against the volumes'
//! capacities) when there are any, else the provisions against the
//! `capacity` of the CSIStorageCapacity their check matched (per class:
//! the requests summed, the capacity of the class's last provision, as
//! upstream); provisions of a driver without capacity tracking score
//! nothing, and a node with nothing to score scores 0.

use std::collections::BTreeMap;

use crate::helper::shape_score::Shape;

use super::binder::PodVolumes;

const MAX_UTILIZATION: i64 = 100;

/// The node's score for its chosen volumes.
pub fn score(shape: &Shape, volumes: &PodVolumes) -> i64 {
    let mut classes: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for b in &volumes.static_bindings {
        let c = classes.entry(b.class.as_str()).or_default();
        c.0 += b.requested;
        c.1 += b.capacity;
    }
    if volumes.static_bindings.is_empty() {
        for p in &volumes.dynamic_provisions {
            let Some(capacity) = p.node_capacity else { continue };
            let c = classes.entry(p.class.as_str()).or_default();
            c.0 += p.requested;
            // Not summed: two claims of a class share its capacity.
            c.1 = capacity;
        }
    }
    if classes.is_empty() {
        return 0;
    }
    let sum: i64 = classes
        .values()
        .map(|&(requested, capacity)| {
            if capacity == 0 || requested > capacity {
                shape.at(MAX_UTILIZATION)
            } else {
                shape.at(requested * MAX_UTILIZATION / capacity)
            }
        })
        .sum();
    (sum as f64 / classes.len() as f64).round() as i64
}
