//! MostAllocated scoring (upstream `noderesources/most_allocated.go`,
//! v1.37.2): favours nodes with fewer free resources (bin packing),
//! `min(requested, allocatable) * 100 / allocatable` per resource, weighted
//! mean over the scored resources, integer arithmetic throughout. Upstream's
//! tables: `parity::fit`.

use convoy_api::MAX_NODE_SCORE;

/// One resource's score; requests above capacity count as full.
pub fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// The weighted mean over the resources with allocatable > 0.
pub fn score(requested: &[i64], allocatable: &[i64], weights: &[i64]) -> i64 {
    super::resource_allocation::weighted_mean(requested, allocatable, weights, most_requested_score)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_numbers() {
        // Upstream most_allocated_test "nothing scheduled, resources requested,
        // differently sized nodes": cpu 3000/4000 mem 5000/10000 → (75+50)/2 = 62;
        // cpu 3000/6000 mem 5000/10000 → 50.
        let cases = [
            (&[3000, 5000][..], &[4000, 10000][..], &[1, 1][..], 62),
            (&[3000, 5000], &[6000, 10000], &[1, 1], 50),
            (&[0, 0], &[4000, 10000], &[1, 1], 0),
            (&[5000, 5000], &[4000, 10000], &[1, 1], 75), // cpu capped at 100
            (&[3000, 5000], &[4000, 10000], &[2, 1], 66), // (75*2 + 50)/3
            (&[2, 0], &[4, 0], &[1, 5], 50),
        ];
        for (req, alloc, w, want) in cases {
            assert_eq!(score(req, alloc, w), want, "{req:?} {alloc:?} {w:?}");
        }
    }
}
