//! RequestedToCapacityRatio scoring (upstream
//! `noderesources/requested_to_capacity_ratio.go`, v1.37.2): the shape
//! function ([`Shape`], upstream `helper/shape_score.go`) of each resource's
//! utilization `requested * 100 / allocatable` (100 when over capacity),
//! weighted mean over the resources scoring above 0, rounded half away from
//! zero as Go's `math.Round`. Upstream's tables: `parity::fit`.

use crate::helper::shape_score::Shape;

const MAX_UTILIZATION: i64 = 100;

/// The shape's score of one resource.
fn resource_score(shape: &Shape, requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return shape.at(MAX_UTILIZATION);
    }
    shape.at(requested * MAX_UTILIZATION / capacity)
}

/// Weighted mean of the resources with allocatable > 0 and a positive
/// score, rounded.
pub fn score(shape: &Shape, requested: &[i64], allocatable: &[i64], weights: &[i64]) -> i64 {
    let (mut node_score, mut weight_sum) = (0i64, 0i64);
    for i in 0..requested.len() {
        if allocatable[i] == 0 {
            continue;
        }
        let s = resource_score(shape, requested[i], allocatable[i]);
        if s > 0 {
            node_score += s * weights[i];
            weight_sum += weights[i];
        }
    }
    if weight_sum == 0 { 0 } else { (node_score as f64 / weight_sum as f64).round() as i64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::helper::shape_score::testing::shape;

    #[test]
    fn upstream_numbers() {
        // Upstream requested_to_capacity_ratio_test, shape (0,10),(100,0) i.e.
        // least-allocated-like: a node with cpu 3000/4000, mem 5000/10000.
        let least = shape(&[(0, 10), (100, 0)]);
        assert_eq!(score(&least, &[3000, 5000], &[4000, 10000], &[1, 1]), 38); // (25+50)/2 = 37.5 → 38
        assert_eq!(score(&least, &[0, 0], &[4000, 10000], &[1, 1]), 100);
        // Bin packing shape (0,0),(100,10) with weights.
        let most = shape(&[(0, 0), (100, 10)]);
        assert_eq!(score(&most, &[3000, 5000], &[4000, 10000], &[1, 1]), 63); // (75+50)/2 = 62.5 → 63
        assert_eq!(score(&most, &[3000, 5000], &[4000, 10000], &[3, 1]), 69); // (225+50)/4 = 68.75
        // A zero score does not count its weight.
        assert_eq!(score(&most, &[0, 5000], &[4000, 10000], &[1, 1]), 50);
        // Over capacity scores as full utilization.
        assert_eq!(score(&most, &[5000, 0], &[4000, 0], &[1, 1]), 100);
        // An extended resource with weight 5: foo 2 of 4 → 50, cpu 10% → 10,
        // mem 20% → 20: (10 + 20 + 250) / 7 = 40.
        assert_eq!(score(&most, &[400, 2000, 2], &[4000, 10000, 4], &[1, 1, 5]), 40);
    }
}
