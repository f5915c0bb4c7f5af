//! Fragmentation metrics on plain data: a cluster's GPU state (nodes with
//! allocatable and used resources, pods with requests and placement) and
//! the per-wave samples a job stream records. Nothing here does IO or
//! knows which scheduler placed the pods; the targets build a
//! [`GpuState`] from the objects they hold (the embedded cluster, or the
//! API server's nodes and pods).

use std::collections::{BTreeSet, HashMap};

use convoy_api::Resource;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Serialize;

use super::MixEntry;
use super::stream::PodShape;

/// The resources the fit check looks at. CPU in millicores, memory in
/// bytes, GPUs and pods as counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Res {
    /// GPUs (the configured resource name).
    pub gpus: i64,
    /// CPU, millicores.
    pub milli_cpu: i64,
    /// Memory, bytes.
    pub memory: i64,
    /// Pods.
    pub pods: i64,
}

impl Res {
    /// The amounts the fit check looks at, out of a [`Resource`]
    /// (`allowed_pods` is the pod count: allocatable pods, or 1 for a
    /// pod's requests).
    pub fn of(r: &Resource, resource: &str) -> Self {
        Res {
            gpus: r.get(resource),
            milli_cpu: r.milli_cpu,
            memory: r.memory,
            pods: r.allowed_pods,
        }
    }

    /// How many copies of `req` fit into `self` (`i64::MAX` for an empty
    /// request).
    pub fn copies_of(&self, req: &Res) -> i64 {
        let per = |have: i64, want: i64| if want <= 0 { i64::MAX } else { have.max(0) / want };
        per(self.gpus, req.gpus)
            .min(per(self.milli_cpu, req.milli_cpu))
            .min(per(self.memory, req.memory))
            .min(per(self.pods, req.pods))
    }

    fn add(&mut self, o: &Res) {
        self.gpus += o.gpus;
        self.milli_cpu += o.milli_cpu;
        self.memory += o.memory;
        self.pods += o.pods;
    }

    fn minus(&self, o: &Res) -> Res {
        Res {
            gpus: self.gpus - o.gpus,
            milli_cpu: self.milli_cpu - o.milli_cpu,
            memory: self.memory - o.memory,
            pods: self.pods - o.pods,
        }
    }
}

/// One node: what it offers, what its assigned pods request, its domain.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeGpu {
    /// Name.
    pub name: String,
    /// Value of the topology label (`None`: unlabelled, its own domain).
    pub domain: Option<String>,
    /// Allocatable.
    pub allocatable: Res,
    /// Sum of the requests of the pods assigned to it.
    pub used: Res,
}

impl NodeGpu {
    /// What is left.
    pub fn free(&self) -> Res {
        self.allocatable.minus(&self.used)
    }

    /// Free GPUs (never negative).
    pub fn free_gpus(&self) -> i64 {
        self.free().gpus.max(0)
    }
}

/// The GPU view of a cluster at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuState {
    /// GPU nodes (allocatable GPUs > 0), by name order.
    pub nodes: Vec<NodeGpu>,
}

impl GpuState {
    /// Builds the state from nodes and every pod assigned to them (pods of
    /// any scheduler and namespace count, as the kubelet would count them).
    /// Nodes without GPUs of `resource` are left out.
    pub fn build<'a>(
        nodes: impl IntoIterator<Item = &'a Node>,
        pods: impl IntoIterator<Item = &'a Pod>,
        resource: &str,
        topology_key: &str,
    ) -> GpuState {
        let mut out: Vec<NodeGpu> = nodes
            .into_iter()
            .filter_map(|n| {
                let alloc = n.status.as_ref()?.allocatable.as_ref()?;
                let allocatable = Res::of(&Resource::from_list(alloc).ok()?, resource);
                (allocatable.gpus > 0).then(|| NodeGpu {
                    name: n.metadata.name.clone().unwrap_or_default(),
                    domain: n.metadata.labels.as_ref().and_then(|l| l.get(topology_key).cloned()),
                    allocatable,
                    used: Res::default(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        let index: HashMap<String, usize> =
            out.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        for p in pods {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            let terminal = p
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|ph| ph == "Succeeded" || ph == "Failed");
            if let (Some(&i), false) = (index.get(node), terminal) {
                out[i].used.add(&pod_requests(p, resource));
            }
        }
        GpuState { nodes: out }
    }

    /// GPUs of all GPU nodes.
    pub fn total_gpus(&self) -> i64 {
        self.nodes.iter().map(|n| n.allocatable.gpus).sum()
    }

    /// GPUs requested by assigned pods.
    pub fn allocated_gpus(&self) -> i64 {
        self.nodes.iter().map(|n| n.used.gpus.min(n.allocatable.gpus)).sum()
    }

    /// Nodes none of whose GPUs is allocated.
    pub fn fully_free_nodes(&self) -> usize {
        self.nodes.iter().filter(|n| n.used.gpus <= 0).count()
    }

    /// Stranded GPUs: the free GPUs of nodes that cannot host `median`
    /// (its GPUs, CPU, memory and a pod slot).
    pub fn stranded_gpus(&self, median: &Res) -> i64 {
        self.nodes.iter().filter(|n| n.free().copies_of(median) == 0).map(NodeGpu::free_gpus).sum()
    }

    /// Whether `count` pods of `req` fit at once (identical pods: a node
    /// holds as many copies as its free resources allow, so the greedy
    /// count is exact).
    pub fn fits(&self, req: &Res, count: usize) -> bool {
        let mut left = count as i64;
        for n in &self.nodes {
            left -= n.free().copies_of(req);
            if left <= 0 {
                return true;
            }
        }
        left <= 0
    }

    /// The distinct nodes and topology domains `nodes` (the nodes of a
    /// group's members) span; a node without the label is its own domain.
    pub fn spans<'a>(&self, nodes: impl IntoIterator<Item = &'a str>) -> (usize, usize) {
        let names: BTreeSet<&str> = nodes.into_iter().collect();
        let domains: BTreeSet<String> = names
            .iter()
            .map(|n| {
                self.nodes
                    .iter()
                    .find(|x| x.name == *n)
                    .and_then(|x| x.domain.clone())
                    .unwrap_or_else(|| format!("node:{n}"))
            })
            .collect();
        (names.len(), domains.len())
    }
}

/// A pod's requests as the scheduler and the kubelet count them
/// (`convoy_api::resource::pod_requests`: containers, init containers,
/// overhead), plus one pod slot; nothing for a pod whose requests do not
/// parse.
pub fn pod_requests(p: &Pod, resource: &str) -> Res {
    let requests = p.spec.as_ref().and_then(|s| convoy_api::resource::pod_requests(s).ok());
    requests.map_or_else(Res::default, |r| Res::of(&r.requests, resource))
}

/// The request of the median requested GPU: the mix sorted by shape
/// (GPUs, then CPU, then memory), the entry at which the cumulative share
/// of GPUs (`weight * gpus`) reaches half. The median by job count would
/// be 1 GPU for any mix where most jobs ask for one, and (CPU aside) no
/// node with a free GPU fails to host a 1-GPU job, so stranding would
/// always be 0. CPU-only entries weigh nothing.
pub fn gpu_weighted_median(mix: &[MixEntry]) -> PodShape {
    let mut shapes: Vec<(PodShape, f64)> =
        mix.iter().map(|m| (PodShape::of(m), m.weight * f64::from(m.gpus))).collect();
    shapes.sort_by_key(|s| s.0);
    let total: f64 = shapes.iter().map(|s| s.1).sum();
    let mut acc = 0.0;
    for (shape, share) in &shapes {
        acc += share;
        if *share > 0.0 && acc >= total / 2.0 {
            return *shape;
        }
    }
    shapes.last().map_or(PodShape { gpus: 1, ..PodShape::default() }, |s| s.0)
}

/// What one wave of the stream left behind, sampled once the scheduler
/// settled (before rejected jobs are removed and finished ones end).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WaveSample {
    /// Wave number (0-based).
    pub wave: usize,
    /// GPUs allocated.
    pub allocated_gpus: i64,
    /// GPUs of the cluster.
    pub total_gpus: i64,
    /// Nodes with all GPUs free.
    pub fully_free_nodes: usize,
    /// Free GPUs on nodes that cannot host the median request.
    pub stranded_gpus: i64,
    /// GPUs the stream asks for in this wave: those of every job that
    /// would be running had every job been placed. The same for every
    /// scheduler; at or above `total_gpus` the wave is saturated.
    pub offered_gpus: i64,
    /// Jobs of this wave that could not be placed.
    pub rejected_jobs: usize,
    /// Of those, single-pod jobs asking for a whole node's GPUs.
    pub rejected_full_node: usize,
}

/// A placed gang: how many nodes and domains its members span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GangSpan {
    /// Members.
    pub members: usize,
    /// Distinct nodes.
    pub nodes: usize,
    /// Distinct topology domains.
    pub domains: usize,
}

/// The run's figures, from its samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Waves sampled.
    pub waves: usize,
    /// GPUs allocated at the first wave where a full-node job was refused,
    /// and that wave (`None`: never).
    pub first_full_node_failure: Option<(i64, usize)>,
    /// GPUs of the cluster.
    pub total_gpus: i64,
    /// Stranded GPUs averaged over the saturated waves (those where the
    /// stream offers at least the cluster's GPUs: the same waves for every
    /// scheduler).
    pub stranded_avg: Option<f64>,
    /// Maximum over the saturated waves.
    pub stranded_max: Option<i64>,
    /// Allocated share of GPUs averaged over the saturated waves, percent.
    pub allocated_pct_at_saturation: Option<f64>,
    /// Unallocated GPUs averaged over the saturated waves (FGD's headline
    /// metric: GPUs free while jobs are being refused).
    pub unallocated_at_saturation: Option<f64>,
    /// Saturated waves.
    pub saturated_waves: usize,
    /// Fully free nodes, minimum over all waves.
    pub free_nodes_min: usize,
    /// Fully free nodes, average over all waves.
    pub free_nodes_avg: f64,
    /// Jobs refused.
    pub rejected_jobs: usize,
    /// Gangs placed whole.
    pub gangs_placed: usize,
    /// Average and maximum nodes per placed gang.
    pub gang_nodes: Option<(f64, usize)>,
    /// Average and maximum topology domains per placed gang.
    pub gang_domains: Option<(f64, usize)>,
}

impl Summary {
    /// Summarizes the samples and gang spans of a run.
    pub fn of(samples: &[WaveSample], gangs: &[GangSpan]) -> Summary {
        let mut s = Summary { waves: samples.len(), ..Summary::default() };
        s.total_gpus = samples.first().map_or(0, |w| w.total_gpus);
        s.first_full_node_failure =
            samples.iter().find(|w| w.rejected_full_node > 0).map(|w| (w.allocated_gpus, w.wave));
        let saturated: Vec<&WaveSample> =
            samples.iter().filter(|w| w.offered_gpus >= w.total_gpus).collect();
        s.saturated_waves = saturated.len();
        if !saturated.is_empty() {
            let n = saturated.len() as f64;
            s.stranded_avg =
                Some(saturated.iter().map(|w| w.stranded_gpus as f64).sum::<f64>() / n);
            s.stranded_max = saturated.iter().map(|w| w.stranded_gpus).max();
            s.unallocated_at_saturation = Some(
                saturated.iter().map(|w| (w.total_gpus - w.allocated_gpus) as f64).sum::<f64>() / n,
            );
            s.allocated_pct_at_saturation = Some(
                saturated
                    .iter()
                    .map(|w| 100.0 * w.allocated_gpus as f64 / w.total_gpus.max(1) as f64)
                    .sum::<f64>()
                    / n,
            );
        }
        s.free_nodes_min = samples.iter().map(|w| w.fully_free_nodes).min().unwrap_or(0);
        if !samples.is_empty() {
            s.free_nodes_avg = samples.iter().map(|w| w.fully_free_nodes as f64).sum::<f64>()
                / samples.len() as f64;
        }
        s.rejected_jobs = samples.iter().map(|w| w.rejected_jobs).sum();
        s.gangs_placed = gangs.len();
        let avg_max = |f: fn(&GangSpan) -> usize| {
            (!gangs.is_empty()).then(|| {
                (
                    gangs.iter().map(|g| f(g) as f64).sum::<f64>() / gangs.len() as f64,
                    gangs.iter().map(f).max().unwrap_or(0),
                )
            })
        };
        s.gang_nodes = avg_max(|g| g.nodes);
        s.gang_domains = avg_max(|g| g.domains);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, domain: &str, gpus: i64, used_gpus: i64) -> NodeGpu {
        NodeGpu {
            name: name.into(),
            domain: Some(domain.into()),
            allocatable: Res { gpus, milli_cpu: 96_000, memory: 1 << 40, pods: 110 },
            used: Res {
                gpus: used_gpus,
                milli_cpu: used_gpus * 4000,
                memory: used_gpus << 30,
                pods: used_gpus.min(1),
            },
        }
    }

    fn job(gpus: i64) -> Res {
        Res { gpus, milli_cpu: gpus * 4000, memory: gpus << 30, pods: 1 }
    }

    #[test]
    fn stranded_counts_free_gpus_of_nodes_the_median_does_not_fit() {
        // Free: 0, 3, 4, 8, 1.
        let state = GpuState {
            nodes: vec![
                node("a", "r0", 8, 8),
                node("b", "r0", 8, 5),
                node("c", "r1", 8, 4),
                node("d", "r1", 8, 0),
                node("e", "r1", 8, 7),
            ],
        };
        let cases = [(1, 0), (2, 1), (4, 3 + 1), (8, 3 + 4 + 1)];
        for (median, want) in cases {
            assert_eq!(state.stranded_gpus(&job(median)), want, "median {median}");
        }
        assert_eq!(state.fully_free_nodes(), 1);
        assert_eq!(state.allocated_gpus(), 24);
        assert_eq!(state.total_gpus(), 40);
        // A node out of CPU strands its GPUs whatever they are.
        let mut cpu_full = node("f", "r2", 8, 0);
        cpu_full.used.milli_cpu = 96_000;
        let state = GpuState { nodes: vec![cpu_full] };
        assert_eq!(state.stranded_gpus(&job(1)), 8);
    }

    #[test]
    fn fits_counts_copies_per_node() {
        let state = GpuState { nodes: vec![node("a", "r", 8, 2), node("b", "r", 8, 5)] };
        // 4-GPU pods: 1 on a (6 free), 0 on b (3 free).
        assert!(state.fits(&job(4), 1));
        assert!(!state.fits(&job(4), 2));
        // 3-GPU pods: 2 on a, 1 on b.
        assert!(state.fits(&job(3), 3));
        assert!(!state.fits(&job(3), 4));
        assert!(!state.fits(&job(8), 1));
        assert!(state.fits(&job(1), 9));
    }

    #[test]
    fn spans_count_nodes_and_domains() {
        let mut c = node("c", "r1", 8, 0);
        c.domain = None;
        let state = GpuState { nodes: vec![node("a", "r0", 8, 0), node("b", "r0", 8, 0), c] };
        assert_eq!(state.spans(["a", "a", "b"]), (2, 1));
        assert_eq!(state.spans(["a", "c"]), (2, 2));
        assert_eq!(state.spans(["c", "c"]), (1, 1));
    }

    #[test]
    fn weighted_median() {
        // GPU shares 0.6, 0.3, 0.6, 0.8 of 2.3: half is reached at 4.
        let median = |mix: &[(u32, f64)]| {
            let mix: Vec<MixEntry> = mix.iter().map(|&(g, w)| MixEntry::gpus(g, w)).collect();
            gpu_weighted_median(&mix).gpus
        };
        assert_eq!(median(&[(1, 0.6), (2, 0.15), (4, 0.15), (8, 0.1)]), 4);
        assert_eq!(median(&[(1, 1.0)]), 1);
        assert_eq!(median(&[(8, 0.5), (1, 0.5)]), 8);
        assert_eq!(median(&[(0, 0.9), (1, 0.1)]), 1, "CPU-only pods weigh nothing");
        // Shapes: by GPUs, then CPU.
        let e = |gpus, cpu, weight| MixEntry {
            gpus,
            cpu_milli: Some(cpu),
            memory_mib: Some(1024),
            weight,
        };
        let mix = [e(1, 16_000, 0.4), e(1, 4_000, 0.2), e(2, 8_000, 0.1)];
        assert_eq!(
            gpu_weighted_median(&mix),
            PodShape { gpus: 1, cpu_milli: Some(16_000), memory_mib: Some(1024) }
        );
    }

    /// A sample of an 80-GPU cluster.
    fn wave(
        wave: usize,
        (allocated, offered): (i64, i64),
        free: usize,
        stranded: i64,
        rej: usize,
        full: usize,
    ) -> WaveSample {
        WaveSample {
            wave,
            allocated_gpus: allocated,
            total_gpus: 80,
            fully_free_nodes: free,
            stranded_gpus: stranded,
            offered_gpus: offered,
            rejected_jobs: rej,
            rejected_full_node: full,
        }
    }

    #[test]
    fn summary_first_full_node_failure_and_saturation() {
        let samples = [
            wave(0, (20, 30), 7, 0, 0, 0),
            // Refusals before saturation (a large job that did not fit)
            // do not make a wave saturated; the offered load does.
            wave(1, (50, 70), 4, 2, 1, 0),
            wave(2, (60, 100), 2, 6, 2, 1),
            wave(3, (70, 100), 1, 4, 1, 1),
            wave(4, (40, 80), 3, 0, 0, 0),
        ];
        let gangs = [
            GangSpan { members: 2, nodes: 2, domains: 1 },
            GangSpan { members: 4, nodes: 3, domains: 2 },
        ];
        let s = Summary::of(&samples, &gangs);
        assert_eq!(s.first_full_node_failure, Some((60, 2)));
        assert_eq!(s.saturated_waves, 3);
        assert_eq!(s.stranded_avg, Some(10.0 / 3.0));
        assert_eq!(s.stranded_max, Some(6));
        assert_eq!(s.allocated_pct_at_saturation, Some(100.0 * 170.0 / 240.0));
        assert_eq!(s.unallocated_at_saturation, Some(70.0 / 3.0));
        assert_eq!(s.free_nodes_min, 1);
        assert!((s.free_nodes_avg - 3.4).abs() < 1e-9);
        assert_eq!(s.rejected_jobs, 4);
        assert_eq!(s.gang_nodes, Some((2.5, 3)));
        assert_eq!(s.gang_domains, Some((1.5, 2)));
        let never = Summary::of(&samples[..2], &[]);
        assert_eq!(never.first_full_node_failure, None);
        assert_eq!(never.gang_nodes, None);
    }
}
