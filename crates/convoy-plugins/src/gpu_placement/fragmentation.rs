//! The fragmentation measure (after FGD, Weng et al., USENIX ATC'23) for
//! whole GPUs, and the request-size distribution it is taken against: a
//! configured prior mixed with an exponentially decayed histogram of the
//! GPU requests of the pods the plugin scored.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use super::args::{MAX_GPUS_PER_POD, SizeWeight};

/// How much an exact fit is preferred among placements of equal
/// fragmentation: a best-fit tie-break, in expected GPUs per GPU left over
/// (small enough never to outweigh a real fragmentation difference of the
/// distributions one meets, large enough to order ties).
pub const BEST_FIT_TIE_BREAK: f64 = 0.01;

/// A request-size distribution: GPUs per pod with their probabilities,
/// sorted by size, summing to 1 (empty when nothing is known).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SizeDistribution {
    sizes: Vec<(i64, f64)>,
}

impl SizeDistribution {
    /// A distribution from (size, weight) pairs; weights are normalised,
    /// non-positive ones dropped, equal sizes merged.
    pub fn from_weights(weights: impl IntoIterator<Item = (i64, f64)>) -> Self {
        let mut merged: BTreeMap<i64, f64> = BTreeMap::new();
        for (size, w) in weights {
            if size > 0 && w > 0.0 && w.is_finite() {
                *merged.entry(size).or_insert(0.0) += w;
            }
        }
        let total: f64 = merged.values().sum();
        if total <= 0.0 {
            return Self::default();
        }
        Self { sizes: merged.into_iter().map(|(s, w)| (s, w / total)).collect() }
    }

    /// The (size, probability) pairs, by size.
    pub fn sizes(&self) -> &[(i64, f64)] {
        &self.sizes
    }

    /// The fragmentation of a node with `free` of its `capacity` GPUs free:
    /// the expected number of free GPUs that a random request cannot use,
    /// `free * P(free < size <= capacity)`. Requests larger than the node's
    /// capacity never fit it whatever we do, so they do not count.
    pub fn fragmentation(&self, free: i64, capacity: i64) -> f64 {
        if free <= 0 {
            return 0.0;
        }
        let p: f64 =
            self.sizes.iter().filter(|(s, _)| *s > free && *s <= capacity).map(|(_, p)| p).sum();
        free as f64 * p
    }

    /// How placing `request` GPUs on the node changes its fragmentation
    /// (negative: the placement removes fragmentation). An exact fit
    /// (`free == request`) is never worse than any partial fit.
    pub fn delta(&self, free: i64, capacity: i64, request: i64) -> f64 {
        self.fragmentation(free - request, capacity) - self.fragmentation(free, capacity)
    }
}

/// The UIDs remembered so that a pod retried (a gang member rejected at
/// Permit, a failed bind) is counted once.
const SEEN_CAPACITY: usize = 4096;

/// Learns the request-size distribution: a prior worth `prior_weight`
/// pods, plus every observed GPU request with weight 1, decayed by half
/// every `half_life` later observations.
#[derive(Debug, Clone)]
pub struct RequestSizeLearner {
    prior: SizeDistribution,
    prior_weight: f64,
    learn: bool,
    decay: f64,
    observed: BTreeMap<i64, f64>,
    seen: HashSet<Arc<str>>,
    seen_order: VecDeque<Arc<str>>,
}

impl RequestSizeLearner {
    /// A learner with a prior; `learn == false` keeps the prior alone.
    pub fn new(prior: &[SizeWeight], prior_weight: f64, learn: bool, half_life: u32) -> Self {
        Self {
            prior: SizeDistribution::from_weights(
                prior.iter().map(|s| (i64::from(s.gpus), s.weight)),
            ),
            prior_weight,
            learn,
            decay: 0.5f64.powf(1.0 / f64::from(half_life.max(1))),
            observed: BTreeMap::new(),
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
        }
    }

    /// Counts one pod's GPU request (once per `id`). Returns whether it was
    /// counted.
    pub fn observe(&mut self, id: &Arc<str>, gpus: i64) -> bool {
        if !self.learn || gpus <= 0 || self.seen.contains(id) {
            return false;
        }
        if self.seen_order.len() == SEEN_CAPACITY
            && let Some(old) = self.seen_order.pop_front()
        {
            self.seen.remove(&old);
        }
        self.seen.insert(id.clone());
        self.seen_order.push_back(id.clone());
        for w in self.observed.values_mut() {
            *w *= self.decay;
        }
        self.observed.retain(|_, w| *w > 1e-6);
        *self.observed.entry(gpus.min(i64::from(MAX_GPUS_PER_POD))).or_insert(0.0) += 1.0;
        true
    }

    /// The current distribution: prior and observations mixed by weight;
    /// the prior alone while nothing is observed.
    pub fn distribution(&self) -> SizeDistribution {
        if self.observed.is_empty() {
            return self.prior.clone();
        }
        SizeDistribution::from_weights(
            self.prior
                .sizes()
                .iter()
                .map(|&(s, p)| (s, p * self.prior_weight))
                .chain(self.observed.iter().map(|(&s, &w)| (s, w))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_mix() -> SizeDistribution {
        SizeDistribution::from_weights([(1, 0.6), (2, 0.15), (4, 0.15), (8, 0.1)])
    }

    #[test]
    fn fragmentation_counts_free_gpus_too_few_for_a_request() {
        let d = default_mix();
        let cases = [
            // (free, capacity, expected)
            (0, 8, 0.0),
            (1, 8, 0.4),  // 1 GPU left: 2, 4 and 8-GPU requests cannot use it
            (3, 8, 0.75), // 3 * P(4 or 8)
            (8, 8, 0.0),  // a free 8-GPU node serves every request
            (3, 4, 0.45), // on a 4-GPU node, 8-GPU requests do not count
        ];
        for (free, cap, want) in cases {
            let got = d.fragmentation(free, cap);
            assert!((got - want).abs() < 1e-9, "free {free} cap {cap}: {got} != {want}");
        }
    }

    #[test]
    fn exact_fit_is_never_worse_than_a_partial_fit() {
        let dists = [
            default_mix(),
            SizeDistribution::from_weights([(1, 1.0)]),
            SizeDistribution::from_weights([(2, 0.5), (3, 0.2), (8, 0.3)]),
        ];
        for d in &dists {
            for g in 1..=8 {
                for f in g + 1..=8 {
                    assert!(d.delta(g, 8, g) <= d.delta(f, 8, g) + 1e-12, "{d:?} g={g} f={f}");
                }
            }
        }
    }

    #[test]
    fn learner_mixes_prior_and_decayed_observations() {
        let mut l = RequestSizeLearner::new(&[SizeWeight { gpus: 1, weight: 1.0 }], 10.0, true, 5);
        assert_eq!(l.distribution().sizes(), &[(1, 1.0)]);
        let id: Arc<str> = Arc::from("a");
        assert!(l.observe(&id, 2));
        assert!(!l.observe(&id, 2), "a retried pod counts once");
        let d = l.distribution();
        assert!((d.sizes()[1].1 - 1.0 / 11.0).abs() < 1e-9, "{d:?}");
        for i in 0..100 {
            l.observe(&Arc::from(format!("p{i}")), 2);
        }
        // Decayed mass ~ 1/(1 - 0.5^(1/5)) ~ 7.7 pods of size 2 vs 10 of the prior.
        let p2 = l.distribution().sizes()[1].1;
        assert!(p2 > 0.4 && p2 < 0.5, "{p2}");
        let mut off =
            RequestSizeLearner::new(&[SizeWeight { gpus: 1, weight: 1.0 }], 1.0, false, 5);
        assert!(!off.observe(&id, 4));
        assert_eq!(off.distribution().sizes(), &[(1, 1.0)]);
    }
}
