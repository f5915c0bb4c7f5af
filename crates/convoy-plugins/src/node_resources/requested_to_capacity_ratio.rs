//! RequestedToCapacityRatio scoring (upstream
//! `noderesources/requested_to_capacity_ratio.go` and
//! `helper/shape_score.go`, v1.37.2): a piecewise-linear function (integer
//! interpolation) of each resource's utilization `requested * 100 /
//! allocatable` (100 when over capacity), weighted mean over the resources
//! scoring above 0, rounded half away from zero as Go's `math.Round`.
//! Upstream's tables: `parity::fit`.

use convoy_api::MAX_NODE_SCORE;
use convoy_config::UtilizationShapePoint;

/// Upstream `MaxCustomPriorityScore`: shape scores are 0..=10.
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;
const MAX_UTILIZATION: i64 = 100;

/// The function's points, (utilization, score) with scores scaled to
/// `0..=MAX_NODE_SCORE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape(Vec<(i64, i64)>);

impl Shape {
    /// Scales the configured points (scores ×10).
    pub fn new(points: &[UtilizationShapePoint]) -> Self {
        Self(
            points
                .iter()
                .map(|p| {
                    (
                        i64::from(p.utilization),
                        i64::from(p.score) * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE),
                    )
                })
                .collect(),
        )
    }

    /// Upstream `BuildBrokenLinearFunction`: linear between points, flat
    /// before the first and after the last.
    pub fn at(&self, p: i64) -> i64 {
        let s = &self.0;
        for i in 0..s.len() {
            if p <= s[i].0 {
                if i == 0 {
                    return s[0].1;
                }
                let (u0, v0) = s[i - 1];
                let (u1, v1) = s[i];
                return v0 + (v1 - v0) * (p - u0) / (u1 - u0);
            }
        }
        s.last().map_or(0, |l| l.1)
    }

    fn resource_score(&self, requested: i64, capacity: i64) -> i64 {
        if capacity == 0 || requested > capacity {
            return self.at(MAX_UTILIZATION);
        }
        self.at(requested * MAX_UTILIZATION / capacity)
    }

    /// Weighted mean of the resources with allocatable > 0 and a positive
    /// score, rounded.
    pub fn score(&self, requested: &[i64], allocatable: &[i64], weights: &[i64]) -> i64 {
        let (mut node_score, mut weight_sum) = (0i64, 0i64);
        for i in 0..requested.len() {
            if allocatable[i] == 0 {
                continue;
            }
            let s = self.resource_score(requested[i], allocatable[i]);
            if s > 0 {
                node_score += s * weights[i];
                weight_sum += weights[i];
            }
        }
        if weight_sum == 0 { 0 } else { (node_score as f64 / weight_sum as f64).round() as i64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(points: &[(i32, i32)]) -> Shape {
        Shape::new(
            &points
                .iter()
                .map(|&(utilization, score)| UtilizationShapePoint { utilization, score })
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn broken_linear_function() {
        // Upstream helper test: points (10,1),(30,5),(70,2) on the 0..10 scale.
        let s = shape(&[(10, 1), (30, 5), (70, 2)]);
        let cases = [(0, 10), (10, 10), (15, 20), (30, 50), (50, 35), (70, 20), (100, 20)];
        for (p, want) in cases {
            assert_eq!(s.at(p), want, "p={p}");
        }
    }

    #[test]
    fn upstream_numbers() {
        // Upstream requested_to_capacity_ratio_test, shape (0,10),(100,0) i.e.
        // least-allocated-like: a node with cpu 3000/4000, mem 5000/10000.
        let least = shape(&[(0, 10), (100, 0)]);
        assert_eq!(least.score(&[3000, 5000], &[4000, 10000], &[1, 1]), 38); // (25+50)/2 = 37.5 → 38
        assert_eq!(least.score(&[0, 0], &[4000, 10000], &[1, 1]), 100);
        // Bin packing shape (0,0),(100,10) with weights.
        let most = shape(&[(0, 0), (100, 10)]);
        assert_eq!(most.score(&[3000, 5000], &[4000, 10000], &[1, 1]), 63); // (75+50)/2 = 62.5 → 63
        assert_eq!(most.score(&[3000, 5000], &[4000, 10000], &[3, 1]), 69); // (225+50)/4 = 68.75
        // A zero score does not count its weight.
        assert_eq!(most.score(&[0, 5000], &[4000, 10000], &[1, 1]), 50);
        // Over capacity scores as full utilization.
        assert_eq!(most.score(&[5000, 0], &[4000, 0], &[1, 1]), 100);
        // An extended resource with weight 5: foo 2 of 4 → 50, cpu 10% → 10,
        // mem 20% → 20: (10 + 20 + 250) / 7 = 40.
        assert_eq!(most.score(&[400, 2000, 2], &[4000, 10000, 4], &[1, 1, 5]), 40);
    }
}
