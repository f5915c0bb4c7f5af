//! Fragmentation metrics on plain data: a cluster's GPU state (nodes with
//! allocatable and used resources, pods with requests and placement) and
//! the per-wave samples a job stream records. Nothing here does IO or
//! knows which scheduler placed the pods; the targets build a
//! [`GpuState`] from the objects they hold (the embedded cluster, or the
//! API server's nodes, pods, ResourceSlices and ResourceClaims).
//!
//! GPUs are counted through one per-node view, [`GpuView`] (total and
//! allocated GPUs by node), which both ways of offering GPUs fill, so that
//! every metric has one definition:
//! - an extended resource ([`GpuView::extended`]): a node's total is its
//!   allocatable `nvidia.com/gpu`, its allocated GPUs the requests of the
//!   pods assigned to it;
//! - DRA devices ([`GpuView::devices`]): a node's total is the number of
//!   devices of the driver in the ResourceSlices local to it
//!   (`spec.nodeName`), its allocated GPUs the devices of those slices
//!   that allocated ResourceClaims hold (`status.allocation.devices.results`),
//!   whether or not the pod that used the claim still exists: an allocated
//!   claim keeps its devices from every scheduler until it is deallocated
//!   or deleted, so that is what the cluster can still offer.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use convoy_api::Resource;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
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

    pub(crate) fn minus(&self, o: &Res) -> Res {
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

/// A node's GPUs: how many it offers and how many are allocated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeGpus {
    /// GPUs the node offers.
    pub total: i64,
    /// GPUs allocated on it.
    pub allocated: i64,
}

/// GPUs by node name, from whichever objects offer them (see the module
/// docs); nodes without GPUs may be absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuView(pub BTreeMap<String, NodeGpus>);

impl GpuView {
    /// GPUs as the extended resource `resource`: a node's allocatable, and
    /// the requests of the non-terminal pods assigned to it.
    pub fn extended<'a>(
        nodes: impl IntoIterator<Item = &'a Node>,
        pods: impl IntoIterator<Item = &'a Pod>,
        resource: &str,
    ) -> GpuView {
        let mut view = BTreeMap::new();
        for n in nodes {
            let Some(alloc) = n.status.as_ref().and_then(|s| s.allocatable.as_ref()) else {
                continue;
            };
            let Ok(r) = Resource::from_list(alloc) else { continue };
            let total = r.get(resource);
            if total > 0 {
                let name = n.metadata.name.clone().unwrap_or_default();
                view.insert(name, NodeGpus { total, allocated: 0 });
            }
        }
        for p in pods {
            if let (Some(g), false) =
                (assigned_node(p).and_then(|n| view.get_mut(n)), is_terminal(p))
            {
                g.allocated += pod_requests(p, resource).gpus;
            }
        }
        GpuView(view)
    }

    /// GPUs as DRA devices of `driver`: a node's total is the number of
    /// devices in the driver's ResourceSlices with `spec.nodeName` = the
    /// node, its allocated GPUs the results of allocated claims that name
    /// one of those devices (driver, pool, device). Slices of a pool's
    /// older generation are left out, as the allocator leaves them out.
    pub fn devices<'a>(
        slices: impl IntoIterator<Item = &'a ResourceSlice>,
        claims: impl IntoIterator<Item = &'a ResourceClaim>,
        driver: &str,
    ) -> GpuView {
        let slices: Vec<&ResourceSlice> =
            slices.into_iter().filter(|s| s.spec.driver == driver).collect();
        let mut newest: HashMap<&str, i64> = HashMap::new();
        for s in &slices {
            let g = newest.entry(s.spec.pool.name.as_str()).or_insert(i64::MIN);
            *g = (*g).max(s.spec.pool.generation);
        }
        let mut view: BTreeMap<String, NodeGpus> = BTreeMap::new();
        // (pool, device) -> node
        let mut where_is: HashMap<(&str, &str), &str> = HashMap::new();
        for s in slices {
            let Some(node) = s.spec.node_name.as_deref().filter(|n| !n.is_empty()) else {
                continue;
            };
            if newest.get(s.spec.pool.name.as_str()) != Some(&s.spec.pool.generation) {
                continue;
            }
            for d in s.spec.devices.iter().flatten() {
                if where_is.insert((&s.spec.pool.name, &d.name), node).is_none() {
                    view.entry(node.to_string()).or_default().total += 1;
                }
            }
        }
        let mut held: BTreeSet<(&str, &str)> = BTreeSet::new();
        for c in claims {
            let results = c
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.as_deref())
                .unwrap_or(&[]);
            for r in results.iter().filter(|r| r.driver == driver) {
                // A device held twice (not possible without shared
                // devices) counts once.
                let key = (r.pool.as_str(), r.device.as_str());
                if let Some(node) = where_is.get(&key)
                    && held.insert(key)
                {
                    view.entry(node.to_string()).or_default().allocated += 1;
                }
            }
        }
        GpuView(view)
    }
}

fn assigned_node(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())
}

fn is_terminal(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|ph| ph == "Succeeded" || ph == "Failed")
}

impl GpuState {
    /// Builds the state from nodes, every pod assigned to them (pods of
    /// any scheduler and namespace count, as the kubelet would count them)
    /// for CPU, memory and pod slots, and `gpus` for the GPUs. Nodes
    /// without GPUs in `gpus` are left out; a pod's requests of the
    /// extended resource `resource` do not count twice (the GPUs are
    /// `gpus`' alone).
    pub fn build<'a>(
        nodes: impl IntoIterator<Item = &'a Node>,
        pods: impl IntoIterator<Item = &'a Pod>,
        gpus: &GpuView,
        resource: &str,
        topology_key: &str,
    ) -> GpuState {
        let mut out: Vec<NodeGpu> = nodes
            .into_iter()
            .filter_map(|n| {
                let name = n.metadata.name.clone().unwrap_or_default();
                let g = gpus.0.get(&name).filter(|g| g.total > 0)?;
                let alloc = n.status.as_ref()?.allocatable.as_ref()?;
                let mut allocatable = Res::of(&Resource::from_list(alloc).ok()?, resource);
                allocatable.gpus = g.total;
                Some(NodeGpu {
                    domain: n.metadata.labels.as_ref().and_then(|l| l.get(topology_key).cloned()),
                    name,
                    allocatable,
                    used: Res { gpus: g.allocated, ..Res::default() },
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        let index: HashMap<String, usize> =
            out.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        for p in pods {
            if let (Some(&i), false) = (assigned_node(p).and_then(|n| index.get(n)), is_terminal(p))
            {
                let r = pod_requests(p, resource);
                out[i].used.add(&Res { gpus: 0, ..r });
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

    /// A claim holding `devices` (pool, device) of `driver`, or not
    /// allocated.
    fn claim(name: &str, driver: &str, devices: &[(&str, &str)], allocated: bool) -> ResourceClaim {
        let results: Vec<serde_json::Value> = devices
            .iter()
            .map(|(pool, d)| {
                serde_json::json!({"request": "gpus", "driver": driver, "pool": pool, "device": d})
            })
            .collect();
        let status = if allocated {
            serde_json::json!({"allocation": {"devices": {"results": results}}})
        } else {
            serde_json::json!({})
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn device_view_counts_slices_and_allocated_claims() {
        use super::super::dra::slice;
        let d = "gpu.example.com";
        let mut old = slice("a", 2, d);
        old.metadata.name = Some("a-old".into());
        old.spec.pool.generation = 0; // an older generation of a's pool: left out
        let mut other = slice("c", 4, "other.example.com");
        other.metadata.name = Some("c-other".into());
        let slices = [slice("a", 8, d), old, slice("b", 4, d), other];
        let claims = [
            claim("x", d, &[("a", "gpu-0"), ("a", "gpu-1")], true),
            claim("y", d, &[("b", "gpu-3")], true),
            // Not allocated: holds nothing.
            claim("z", d, &[("b", "gpu-0")], false),
            // Another driver's devices, and a device no slice has.
            claim("w", "other.example.com", &[("c", "gpu-0")], true),
            claim("v", d, &[("a", "gpu-99")], true),
            // The same device twice counts once.
            claim("u", d, &[("a", "gpu-1")], true),
        ];
        let view = GpuView::devices(slices.iter(), claims.iter(), d);
        let want: BTreeMap<String, NodeGpus> = [
            ("a".to_string(), NodeGpus { total: 8, allocated: 2 }),
            ("b".to_string(), NodeGpus { total: 4, allocated: 1 }),
        ]
        .into();
        assert_eq!(view.0, want);
    }

    #[test]
    fn both_views_give_the_same_state() {
        // Node a: 8 GPUs, one pod of 3 GPUs and 24 CPUs; as an extended
        // resource and as devices the state is the same.
        let node = |gpus: bool| -> Node {
            let mut cap = serde_json::json!({"cpu": "128", "memory": "2048Gi", "pods": "110"});
            if gpus {
                cap["nvidia.com/gpu"] = "8".into();
            }
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a", "labels": {"rack": "r0"}},
                "status": {"allocatable": cap},
            }))
            .unwrap()
        };
        let pod = |gpus: bool| -> Pod {
            let mut req = serde_json::json!({"cpu": "24", "memory": "192Gi"});
            if gpus {
                req["nvidia.com/gpu"] = "3".into();
            }
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns"},
                "spec": {"nodeName": "a", "containers": [{"name": "c", "resources": {"requests": req}}]},
            }))
            .unwrap()
        };
        let (n, p) = (node(true), pod(true));
        let ext = GpuView::extended([&n], [&p], "nvidia.com/gpu");
        let a = GpuState::build([&n], [&p], &ext, "nvidia.com/gpu", "rack");
        let d = "gpu.example.com";
        let slices = [super::super::dra::slice("a", 8, d)];
        let devices = [("a", "gpu-0"), ("a", "gpu-1"), ("a", "gpu-2")];
        let claims = [claim("p-gpus", d, &devices, true)];
        let view = GpuView::devices(slices.iter(), claims.iter(), d);
        let (n, p) = (node(false), pod(false));
        let b = GpuState::build([&n], [&p], &view, "nvidia.com/gpu", "rack");
        assert_eq!(a, b);
        assert_eq!((b.total_gpus(), b.allocated_gpus()), (8, 3));
        assert_eq!(b.nodes[0].used.milli_cpu, 24_000);
        // Without GPUs in the view the node is left out.
        let none = GpuState::build([&n], [&p], &GpuView::default(), "nvidia.com/gpu", "rack");
        assert!(none.nodes.is_empty());
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
