//! LeastAllocated scoring (upstream `noderesources/least_allocated.go`,
//! v1.37.2): favours nodes with more free resources,
//! `(allocatable - requested) * 100 / allocatable` per resource (0 when over
//! capacity), weighted mean over the scored resources, integer arithmetic
//! throughout. Upstream's tables: `parity::fit`.

use convoy_api::MAX_NODE_SCORE;

/// One resource's score: 0 when over-requested or not allocatable.
pub fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// The weighted mean over the resources with allocatable > 0.
pub fn score(requested: &[i64], allocatable: &[i64], weights: &[i64]) -> i64 {
    super::resource_allocation::weighted_mean(
        requested,
        allocatable,
        weights,
        least_requested_score,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_numbers() {
        // Upstream least_allocated_test "nothing scheduled, resources requested,
        // differently sized nodes": cpu 3000/4000 mem 5000/10000 → (25+50)/2 = 37;
        // cpu 3000/6000 mem 5000/10000 → (50+50)/2 = 50.
        let cases = [
            (&[3000, 5000][..], &[4000, 10000][..], &[1, 1][..], 37),
            (&[3000, 5000], &[6000, 10000], &[1, 1], 50),
            (&[0, 0], &[4000, 10000], &[1, 1], 100),
            (&[5000, 5000], &[4000, 10000], &[1, 1], 25), // cpu over capacity scores 0
            (&[3000, 5000], &[4000, 10000], &[2, 1], 33), // (25*2 + 50)/3
            (&[1, 0], &[4, 0], &[1, 1], 75),              // unscored resource, weight not counted
            (&[0, 0], &[0, 0], &[1, 1], 0),
        ];
        for (req, alloc, w, want) in cases {
            assert_eq!(score(req, alloc, w), want, "{req:?} {alloc:?} {w:?}");
        }
    }
}
