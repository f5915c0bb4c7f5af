//! The fragmentation measure of FGD (Weng et al., USENIX ATC'23) for whole
//! GPUs, and the request distribution it is taken against: a configured
//! prior mixed with an exponentially decayed histogram of the requests
//! (GPUs, CPU and memory) of the pods the plugin scored.
//!
//! A node's free GPUs count as fragmented for a request when the node,
//! empty, could host it but, as it is now, cannot: too few GPUs left, or
//! too little CPU or memory left beside them (the second kind is what
//! plain GPU packing does not see: a node with free GPUs and no CPU left).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use convoy_config::MAX_GPUS_PER_POD;

/// How much an exact fit is preferred among placements of equal
/// fragmentation: a best-fit tie-break, in expected GPUs per GPU left over
/// (small enough never to outweigh a real fragmentation difference of the
/// distributions one meets, large enough to order ties).
pub const BEST_FIT_TIE_BREAK: f64 = 0.01;

/// Learned CPU requests are rounded up to this many millicores, so that
/// the distribution keeps a few shapes, not one per distinct request.
pub const CPU_GRAIN_MILLI: i64 = 1000;

/// Learned memory requests are rounded up to this many bytes (1 GiB).
pub const MEMORY_GRAIN: i64 = 1 << 30;

/// At most this many distinct learned shapes are kept; a new one replaces
/// the one of least (decayed) weight.
pub const MAX_SHAPES: usize = 64;

/// A pod's request as the measure sees it: GPUs, CPU (millicores) and
/// memory (bytes). A shape of the configured prior has no CPU or memory
/// (it fits wherever its GPUs do).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    /// GPUs.
    pub gpus: i64,
    /// CPU, millicores.
    pub milli_cpu: i64,
    /// Memory, bytes.
    pub memory: i64,
}

impl Shape {
    /// A GPU-only shape.
    pub fn gpus(gpus: i64) -> Self {
        Self { gpus, milli_cpu: 0, memory: 0 }
    }

    /// Whether `self` fits into `room`.
    pub fn fits(&self, room: &Shape) -> bool {
        self.gpus <= room.gpus && self.milli_cpu <= room.milli_cpu && self.memory <= room.memory
    }

    /// `self - other`, dimension by dimension.
    pub fn minus(&self, other: &Shape) -> Shape {
        Shape {
            gpus: self.gpus - other.gpus,
            milli_cpu: self.milli_cpu - other.milli_cpu,
            memory: self.memory - other.memory,
        }
    }

    /// The shape learned from a request: CPU and memory rounded up to their
    /// grain, GPUs capped at [`MAX_GPUS_PER_POD`].
    fn learned(&self) -> Shape {
        let up = |v: i64, grain: i64| (v.max(0) + grain - 1) / grain * grain;
        Shape {
            gpus: self.gpus.min(i64::from(MAX_GPUS_PER_POD)),
            milli_cpu: up(self.milli_cpu, CPU_GRAIN_MILLI),
            memory: up(self.memory, MEMORY_GRAIN),
        }
    }
}

/// One entry of the request-size prior (the args' `requestSizePrior`):
/// a request shape and its weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeWeight {
    /// GPUs per pod (`gpus`), 1..=[`MAX_GPUS_PER_POD`].
    pub gpus: u32,
    /// CPU per pod in millicores (`cpu`, a quantity; default 0: fits
    /// wherever the GPUs do).
    pub milli_cpu: i64,
    /// Memory per pod in bytes (`memory`, a quantity; default 0).
    pub memory: i64,
    /// Relative weight (`weight`), positive.
    pub weight: f64,
}

impl SizeWeight {
    /// A GPU-only entry.
    pub fn gpus(gpus: u32, weight: f64) -> Self {
        Self { gpus, milli_cpu: 0, memory: 0, weight }
    }

    /// The request shape of the entry.
    pub fn shape(&self) -> Shape {
        Shape { gpus: i64::from(self.gpus), milli_cpu: self.milli_cpu, memory: self.memory }
    }
}

/// A request distribution: shapes with their probabilities, sorted by
/// shape, summing to 1 (empty when nothing is known).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SizeDistribution {
    shapes: Vec<(Shape, f64)>,
    /// The same, column by column, for the per-node loop of [`Self::delta`]
    /// (branch-free comparisons over plain arrays).
    columns: Columns,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Columns {
    gpus: Vec<i64>,
    milli_cpu: Vec<i64>,
    memory: Vec<i64>,
    p: Vec<f64>,
}

impl Columns {
    fn of(shapes: &[(Shape, f64)]) -> Self {
        Self {
            gpus: shapes.iter().map(|(s, _)| s.gpus).collect(),
            milli_cpu: shapes.iter().map(|(s, _)| s.milli_cpu).collect(),
            memory: shapes.iter().map(|(s, _)| s.memory).collect(),
            p: shapes.iter().map(|(_, p)| *p).collect(),
        }
    }
}

impl SizeDistribution {
    /// A distribution from (shape, weight) pairs; weights are normalised,
    /// shapes without GPUs and non-positive weights dropped, equal shapes
    /// merged.
    pub fn from_weights(weights: impl IntoIterator<Item = (Shape, f64)>) -> Self {
        let mut merged: BTreeMap<Shape, f64> = BTreeMap::new();
        for (shape, w) in weights {
            if shape.gpus > 0 && w > 0.0 && w.is_finite() {
                *merged.entry(shape).or_insert(0.0) += w;
            }
        }
        let total: f64 = merged.values().sum();
        if total <= 0.0 {
            return Self::default();
        }
        let shapes: Vec<(Shape, f64)> = merged.into_iter().map(|(s, w)| (s, w / total)).collect();
        Self { columns: Columns::of(&shapes), shapes }
    }

    /// A distribution of GPU-only shapes from (GPUs, weight) pairs.
    pub fn from_gpu_weights(weights: impl IntoIterator<Item = (i64, f64)>) -> Self {
        Self::from_weights(weights.into_iter().map(|(g, w)| (Shape::gpus(g), w)))
    }

    /// The (shape, probability) pairs, by shape.
    pub fn shapes(&self) -> &[(Shape, f64)] {
        &self.shapes
    }

    /// The probability of each GPU count, whatever the CPU and memory.
    pub fn gpu_sizes(&self) -> Vec<(i64, f64)> {
        let mut by_gpus: BTreeMap<i64, f64> = BTreeMap::new();
        for (s, p) in &self.shapes {
            *by_gpus.entry(s.gpus).or_insert(0.0) += p;
        }
        by_gpus.into_iter().collect()
    }

    /// The fragmentation of a node with `free` of its `capacity` left: the
    /// expected number of free GPUs that a random request cannot use,
    /// `free.gpus * P(request fits capacity and does not fit free)`.
    /// Requests the node could not host even empty never fit it whatever
    /// we do, so they do not count.
    pub fn fragmentation(&self, free: &Shape, capacity: &Shape) -> f64 {
        if free.gpus <= 0 {
            return 0.0;
        }
        let p: f64 = self
            .shapes
            .iter()
            .filter(|(s, _)| s.fits(capacity) && !s.fits(free))
            .map(|(_, p)| p)
            .sum();
        free.gpus as f64 * p
    }

    /// How placing `request` on the node changes its fragmentation
    /// (negative: the placement removes fragmentation). An exact fit of
    /// the GPUs is never worse than any partial fit. One pass over the
    /// shapes (this is the plugin's per-node cost).
    pub fn delta(&self, free: &Shape, capacity: &Shape, request: &Shape) -> f64 {
        let after = free.minus(request);
        let c = &self.columns;
        let (mut before_p, mut after_p) = (0.0, 0.0);
        for i in 0..c.p.len() {
            let (g, cpu, mem) = (c.gpus[i], c.milli_cpu[i], c.memory[i]);
            let fits =
                |room: &Shape| (g <= room.gpus) & (cpu <= room.milli_cpu) & (mem <= room.memory);
            let p = if fits(capacity) { c.p[i] } else { 0.0 };
            before_p += if fits(free) { 0.0 } else { p };
            after_p += if fits(&after) { 0.0 } else { p };
        }
        let frag = |gpus: i64, p: f64| if gpus <= 0 { 0.0 } else { gpus as f64 * p };
        frag(after.gpus, after_p) - frag(free.gpus, before_p)
    }
}

/// The UIDs remembered so that a pod retried (a gang member rejected at
/// Permit, a failed bind) is counted once.
const SEEN_CAPACITY: usize = 4096;

/// Learns the request distribution: a prior worth `prior_weight` pods,
/// plus every observed GPU request with weight 1, decayed by half every
/// `half_life` later observations.
#[derive(Debug, Clone)]
pub struct RequestSizeLearner {
    prior: SizeDistribution,
    prior_weight: f64,
    learn: bool,
    decay: f64,
    observed: BTreeMap<Shape, f64>,
    seen: HashSet<Arc<str>>,
    seen_order: VecDeque<Arc<str>>,
}

impl RequestSizeLearner {
    /// A learner with a prior; `learn == false` keeps the prior alone.
    pub fn new(prior: &[SizeWeight], prior_weight: f64, learn: bool, half_life: u32) -> Self {
        Self {
            prior: SizeDistribution::from_weights(prior.iter().map(|s| (s.shape(), s.weight))),
            prior_weight,
            learn,
            decay: 0.5f64.powf(1.0 / f64::from(half_life.max(1))),
            observed: BTreeMap::new(),
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
        }
    }

    /// Counts one pod's request (once per `id`; pods without GPUs are not
    /// counted). Returns whether it was counted.
    pub fn observe(&mut self, id: &Arc<str>, request: Shape) -> bool {
        if !self.learn || request.gpus <= 0 || self.seen.contains(id) {
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
        let shape = request.learned();
        if !self.observed.contains_key(&shape)
            && self.observed.len() >= MAX_SHAPES
            && let Some(lightest) =
                self.observed.iter().min_by(|a, b| a.1.total_cmp(b.1)).map(|(s, _)| *s)
        {
            self.observed.remove(&lightest);
        }
        *self.observed.entry(shape).or_insert(0.0) += 1.0;
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
                .shapes()
                .iter()
                .map(|&(s, p)| (s, p * self.prior_weight))
                .chain(self.observed.iter().map(|(&s, &w)| (s, w))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: i64 = 1 << 30;

    fn default_mix() -> SizeDistribution {
        SizeDistribution::from_gpu_weights([(1, 0.6), (2, 0.15), (4, 0.15), (8, 0.1)])
    }

    fn node(gpus: i64) -> Shape {
        Shape { gpus, milli_cpu: 96_000, memory: 512 * GIB }
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
            let got = d.fragmentation(&node(free), &node(cap));
            assert!((got - want).abs() < 1e-9, "free {free} cap {cap}: {got} != {want}");
        }
    }

    #[test]
    fn free_gpus_without_cpu_beside_them_are_fragmented() {
        // Every request: 1 GPU and 12 CPUs.
        let one = Shape { gpus: 1, milli_cpu: 12_000, memory: 16 * GIB };
        let d = SizeDistribution::from_weights([(one, 1.0)]);
        let cap = Shape { gpus: 2, milli_cpu: 16_000, memory: 120 * GIB };
        // One pod placed: 1 GPU left, but only 4 CPUs: unusable.
        let after_one = cap.minus(&one);
        assert!((d.fragmentation(&after_one, &cap) - 1.0).abs() < 1e-9);
        assert_eq!(d.fragmentation(&cap, &cap), 0.0);
        // On a CPU-rich node the same placement strands nothing.
        let rich = Shape { gpus: 2, milli_cpu: 104_000, memory: 512 * GIB };
        assert_eq!(d.fragmentation(&rich.minus(&one), &rich), 0.0);
        assert!(d.delta(&rich, &rich, &one) < d.delta(&cap, &cap, &one));
        // A request the node could not host even empty does not count.
        let fat = Shape { gpus: 1, milli_cpu: 32_000, memory: 0 };
        let d = SizeDistribution::from_weights([(fat, 1.0)]);
        assert_eq!(d.fragmentation(&after_one, &cap), 0.0);
    }

    #[test]
    fn delta_is_the_difference_of_fragmentations() {
        let d = SizeDistribution::from_weights([
            (Shape { gpus: 1, milli_cpu: 12_000, memory: 16 * GIB }, 0.5),
            (Shape { gpus: 2, milli_cpu: 4_000, memory: 0 }, 0.3),
            (Shape::gpus(8), 0.2),
        ]);
        let cap = node(8);
        for g in 0..=8 {
            for cpu in [0, 8_000, 20_000, 96_000] {
                let free = Shape { gpus: g, milli_cpu: cpu, memory: 64 * GIB };
                for req in [Shape::gpus(1), Shape { gpus: 0, milli_cpu: 6_000, memory: GIB }] {
                    let want =
                        d.fragmentation(&free.minus(&req), &cap) - d.fragmentation(&free, &cap);
                    let got = d.delta(&free, &cap, &req);
                    assert!((got - want).abs() < 1e-12, "{free:?} {req:?}: {got} != {want}");
                }
            }
        }
    }

    #[test]
    fn exact_fit_is_never_worse_than_a_partial_fit() {
        let dists = [
            default_mix(),
            SizeDistribution::from_gpu_weights([(1, 1.0)]),
            SizeDistribution::from_gpu_weights([(2, 0.5), (3, 0.2), (8, 0.3)]),
        ];
        for d in &dists {
            for g in 1..=8 {
                for f in g + 1..=8 {
                    let req = Shape::gpus(g);
                    assert!(
                        d.delta(&node(g), &node(8), &req)
                            <= d.delta(&node(f), &node(8), &req) + 1e-12,
                        "{d:?} g={g} f={f}"
                    );
                }
            }
        }
    }

    #[test]
    fn learner_mixes_prior_and_decayed_observations() {
        let prior = [SizeWeight::gpus(1, 1.0)];
        let mut l = RequestSizeLearner::new(&prior, 10.0, true, 5);
        assert_eq!(l.distribution().gpu_sizes(), vec![(1, 1.0)]);
        let id: Arc<str> = Arc::from("a");
        assert!(l.observe(&id, Shape::gpus(2)));
        assert!(!l.observe(&id, Shape::gpus(2)), "a retried pod counts once");
        let d = l.distribution();
        assert!((d.gpu_sizes()[1].1 - 1.0 / 11.0).abs() < 1e-9, "{d:?}");
        for i in 0..100 {
            l.observe(&Arc::from(format!("p{i}")), Shape::gpus(2));
        }
        // Decayed mass ~ 1/(1 - 0.5^(1/5)) ~ 7.7 pods of size 2 vs 10 of the prior.
        let p2 = l.distribution().gpu_sizes()[1].1;
        assert!(p2 > 0.4 && p2 < 0.5, "{p2}");
        let mut off = RequestSizeLearner::new(&prior, 1.0, false, 5);
        assert!(!off.observe(&id, Shape::gpus(4)));
        assert_eq!(off.distribution().gpu_sizes(), vec![(1, 1.0)]);
    }

    #[test]
    fn learned_shapes_are_rounded_and_bounded() {
        let mut l = RequestSizeLearner::new(&[], 0.0, true, 1_000);
        let req = Shape { gpus: 1, milli_cpu: 3_152, memory: 5_600 << 20 };
        l.observe(&Arc::from("a"), req);
        let d = l.distribution();
        assert_eq!(d.shapes(), &[(Shape { gpus: 1, milli_cpu: 4_000, memory: 6 * GIB }, 1.0)]);
        for i in 0..(3 * MAX_SHAPES as i64) {
            l.observe(
                &Arc::from(format!("p{i}")),
                Shape { gpus: 1, milli_cpu: i * 1000, memory: 0 },
            );
        }
        assert_eq!(l.distribution().shapes().len(), MAX_SHAPES);
        // The newest shapes survive.
        let last = Shape { gpus: 1, milli_cpu: (3 * MAX_SHAPES as i64 - 1) * 1000, memory: 0 };
        assert!(l.distribution().shapes().iter().any(|(s, _)| *s == last));
    }
}
