//! Piecewise-linear scoring shapes (upstream `plugins/helper/shape_score.go`,
//! v1.37.2), shared by NodeResourcesFit's RequestedToCapacityRatio strategy
//! and VolumeBinding's capacity scoring: points `(utilization, score)`
//! configured on a 0..=10 scale, interpolated with integer arithmetic.

use convoy_api::MAX_NODE_SCORE;
use convoy_config::UtilizationShapePoint;

/// Upstream `MaxCustomPriorityScore`: shape scores are 0..=10.
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;

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
}

/// A shape fixture for the tests of the plugins that score with one.
#[cfg(test)]
pub(crate) mod testing {
    use convoy_config::UtilizationShapePoint;

    use super::Shape;

    /// The shape of `(utilization, score)` points on the 0..=10 scale.
    pub(crate) fn shape(points: &[(i32, i32)]) -> Shape {
        Shape::new(
            &points
                .iter()
                .map(|&(utilization, score)| UtilizationShapePoint { utilization, score })
                .collect::<Vec<_>>(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::testing::shape;

    #[test]
    fn broken_linear_function() {
        // Upstream helper test: points (10,1),(30,5),(70,2) on the 0..10 scale.
        let s = shape(&[(10, 1), (30, 5), (70, 2)]);
        let cases = [(0, 10), (10, 10), (15, 20), (30, 50), (50, 35), (70, 20), (100, 20)];
        for (p, want) in cases {
            assert_eq!(s.at(p), want, "p={p}");
        }
    }
}
