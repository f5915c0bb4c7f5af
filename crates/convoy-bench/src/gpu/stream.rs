//! The job stream of `createGpuJobs`: sizes, gangs and lifetimes drawn
//! from a seeded generator (SplitMix64, so the sequence does not depend on
//! the `rand` crate's version), identical for every scheduler.

use super::{GangSpec, MixEntry};

/// What each pod of a job requests: GPUs, and CPU and memory where the mix
/// gives them (otherwise the pod template decides).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodShape {
    /// GPUs per pod (0: a CPU-only pod).
    pub gpus: u32,
    /// CPU per pod, millicores (`.CpuMilli` in the template).
    pub cpu_milli: Option<i64>,
    /// Memory per pod, MiB (`.MemoryMiB` in the template).
    pub memory_mib: Option<i64>,
}

impl PodShape {
    /// The shape of a mix entry.
    pub fn of(m: &MixEntry) -> Self {
        Self { gpus: m.gpus, cpu_milli: m.cpu_milli, memory_mib: m.memory_mib }
    }
}

/// One job of the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Index in the stream.
    pub index: usize,
    /// What each pod requests.
    pub shape: PodShape,
    /// Pods (1, or the members of a gang).
    pub pods: usize,
    /// Whether it is a gang (a PodGroup with `minMember = pods`).
    pub gang: bool,
    /// Waves it runs once placed (at least 1).
    pub lifetime: usize,
}

/// SplitMix64 (Steele, Lea and Flood, 2014).
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick<'a, T>(&mut self, items: &'a [T], weight: impl Fn(&T) -> f64) -> &'a T {
        let total: f64 = items.iter().map(&weight).sum();
        let mut x = self.unit() * total;
        for it in items {
            x -= weight(it);
            if x < 0.0 {
                return it;
            }
        }
        items.last().expect("validated non-empty")
    }
}

/// The first `n` jobs of the stream of `seed`. Lifetimes are exponential
/// with mean `mean_lifetime` waves, rounded up and capped at four times the
/// mean.
pub fn jobs(
    seed: u64,
    n: usize,
    mix: &[MixEntry],
    gangs: Option<&GangSpec>,
    mean_lifetime: f64,
) -> Vec<Job> {
    let mut r = SplitMix::new(seed);
    (0..n)
        .map(|index| {
            let gang = gangs.filter(|g| r.unit() < g.fraction);
            let (shape, pods) = match gang {
                Some(g) => {
                    let gpus = *r.pick(&g.gpus_per_member, |_| 1.0);
                    let shape = PodShape { gpus, cpu_milli: g.cpu_milli, memory_mib: g.memory_mib };
                    (shape, *r.pick(&g.members, |_| 1.0))
                }
                None => (PodShape::of(r.pick(mix, |m| m.weight)), 1),
            };
            let u = r.unit();
            let life = (-(1.0 - u).ln() * mean_lifetime).ceil().clamp(1.0, 4.0 * mean_lifetime);
            Job { index, shape, pods: pods as usize, gang: gang.is_some(), lifetime: life as usize }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix() -> Vec<MixEntry> {
        [(1, 0.6), (2, 0.15), (4, 0.15), (8, 0.1)]
            .map(|(gpus, weight)| MixEntry::gpus(gpus, weight))
            .to_vec()
    }

    #[test]
    fn deterministic_and_follows_the_mix() {
        let gangs = GangSpec {
            fraction: 0.05,
            members: vec![2, 4],
            gpus_per_member: vec![8],
            cpu_milli: None,
            memory_mib: None,
        };
        let a = jobs(7, 20_000, &mix(), Some(&gangs), 40.0);
        assert_eq!(a, jobs(7, 20_000, &mix(), Some(&gangs), 40.0));
        assert_ne!(a, jobs(8, 20_000, &mix(), Some(&gangs), 40.0));
        let singles: Vec<&Job> = a.iter().filter(|j| !j.gang).collect();
        let share =
            |g| singles.iter().filter(|j| j.shape.gpus == g).count() as f64 / singles.len() as f64;
        assert!((share(1) - 0.6).abs() < 0.02, "{}", share(1));
        assert!((share(8) - 0.1).abs() < 0.02, "{}", share(8));
        let gang_share = (a.len() - singles.len()) as f64 / a.len() as f64;
        assert!((gang_share - 0.05).abs() < 0.01, "{gang_share}");
        assert!(a.iter().filter(|j| j.gang).all(|j| j.shape.gpus == 8 && [2, 4].contains(&j.pods)));
        let mean = a.iter().map(|j| j.lifetime as f64).sum::<f64>() / a.len() as f64;
        assert!((mean - 40.5).abs() < 2.0, "{mean}");
        assert!(a.iter().all(|j| (1..=160).contains(&j.lifetime)));
    }
}
