//! GpuPlacement: places GPU pods so that the GPUs left free stay usable by
//! the requests the cluster actually sees (enough of them together, with
//! enough CPU and memory beside them), keeps CPU-only pods off GPU nodes or
//! where their CPU strands no GPU, and keeps the members of a PodGroup on
//! as few nodes and topology domains as possible. Convoy's own plugin, not in the default set: a
//! profile enables it (`config/gpu-cluster.yaml`, `docs/gpu.md`).
//!
//! - PreFilter (all nodes): where the pod's group already is
//!   ([`GroupPlacement`]). Never rejects.
//! - PreScore (feasible nodes): counts the pod's request (GPUs, CPU,
//!   memory) into the learned distribution and fixes the cycle's context.
//!   Skip when nothing would be scored (no GPU request, no GPU node, no
//!   placed sibling).
//! - Score: a weighted mean, in basis points, of the fragmentation score
//!   ([`fragmentation`]), the group closeness ([`topology`]) and the GPU
//!   memory fit ([`memory`]); NormalizeScore maps it to 0..=100 (min-max).
//!
//! The view of a node is its allocatable minus the requests of every pod
//! assigned to it, whichever scheduler placed it, plus the pods assumed in
//! this scheduler (`allocatable - requested`, as [`NodeInfo::free`]).
//!
//! A pod that takes its GPUs through ResourceClaims (DRA) instead of a GPU
//! resource is measured the same way on the node's devices from its
//! ResourceSlices ([`DeviceRoom`], which DynamicResources' Filter records
//! with the allocation it found on the node).

pub mod args;
pub mod fragmentation;
pub mod memory;
pub mod topology;

#[cfg(test)]
mod tests;

use std::ops::Deref;
use std::sync::{Arc, Mutex};

use convoy_api::{
    CycleState, MAX_NODE_SCORE, NodeInfo, NodeInfoLister, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, Status, names,
};
use convoy_config::PluginArgs;

use crate::dynamic_resources::device_room;
use crate::helper::device_room::DeviceRoom;

pub use args::{CpuOnlyPods, ResolvedGpuPlacementArgs};
pub use fragmentation::{RequestSizeLearner, Shape, SizeDistribution, SizeWeight};
pub use topology::{GroupPlacement, domain_of};

/// The scale of the per-node score before normalization (basis points).
pub const BASIS: i64 = 10_000;

/// A GPU resource's amount in `r`. GPU resources are extended resources
/// (the args check it), so this reads the scalar map directly rather than
/// through `Resource::get`, which first compares the name with `cpu`,
/// `memory` and the other built-in names: this runs several times per node
/// and pod.
fn gpus_in(r: &convoy_api::Resource, name: &str) -> i64 {
    r.scalar.get(name).copied().unwrap_or(0)
}

/// The GpuPlacement plugin.
#[derive(Debug)]
pub struct GpuPlacement {
    args: ResolvedGpuPlacementArgs,
    learner: Mutex<RequestSizeLearner>,
}

/// PreFilter state: where the pod's group is, over all nodes.
struct TopologyState(Option<GroupPlacement>);

/// A pod's GPU request: which configured resource, how many GPUs, with the
/// CPU and memory beside them.
#[derive(Debug, Clone, Copy)]
struct GpuRequest {
    resource: usize,
    shape: Shape,
}

/// PreScore state: everything Score needs that does not depend on the node.
struct ScoreState {
    request: Option<GpuRequest>,
    /// The pod takes devices through ResourceClaims (no GPU resource
    /// request): the measure runs on DynamicResources' [`DeviceRoom`]s.
    devices: bool,
    distribution: SizeDistribution,
    /// Largest GPU capacity of a feasible node (the scale of the
    /// fragmentation delta).
    max_capacity: i64,
    /// A GPU pod: a partly used feasible node can host it, so fully free
    /// nodes larger than the request are kept for larger jobs.
    /// A CPU-only pod: a feasible node that is not a fully free GPU node
    /// exists.
    spare_fully_free: bool,
    min_memory_mib: Option<i64>,
    fragmentation_weight: i64,
    topology_weight: i64,
    memory_weight: i64,
}

impl GpuPlacement {
    /// Builds the plugin from its args (the loader's
    /// `PluginArgs::GpuPlacement`, or raw `PluginArgs::Other` built in code;
    /// `None` gives the defaults). Errors name the field
    /// (`GpuPlacementArgs.resourceNames[1]: "cpu" is not an extended resource name`).
    pub fn new(args: Option<&PluginArgs>) -> Result<Self, String> {
        Ok(Self::from_args(ResolvedGpuPlacementArgs::from_plugin_args(args)?))
    }

    /// Builds the plugin from decoded args.
    pub fn from_args(args: ResolvedGpuPlacementArgs) -> Self {
        let learner = RequestSizeLearner::new(
            &args.request_size_prior,
            args.prior_weight,
            args.learn_request_sizes,
            args.half_life_pods,
        );
        Self { args, learner: Mutex::new(learner) }
    }

    /// The request-size distribution learned so far (mixed with the prior).
    pub fn distribution(&self) -> SizeDistribution {
        self.learner.lock().unwrap_or_else(|e| e.into_inner()).distribution()
    }

    /// The pod's request of the first configured GPU resource it asks for.
    fn gpu_request(&self, pod: &PodInfo) -> Option<GpuRequest> {
        let r = &pod.requests.requests;
        self.args.resource_names.iter().enumerate().find_map(|(resource, name)| {
            let gpus = gpus_in(r, name);
            (gpus > 0).then_some(GpuRequest {
                resource,
                shape: Shape { gpus, milli_cpu: r.milli_cpu, memory: r.memory },
            })
        })
    }

    /// Whether the node offers any configured GPU resource.
    fn has_gpus(&self, node: &NodeInfo) -> bool {
        self.args.resource_names.iter().any(|r| gpus_in(&node.allocatable, r) > 0)
    }

    /// Whether the node offers GPUs and none is requested.
    fn fully_free(&self, node: &NodeInfo) -> bool {
        self.has_gpus(node)
            && self.args.resource_names.iter().all(|r| gpus_in(&node.requested, r) == 0)
    }

    fn topology<N: Deref<Target = NodeInfo>>(&self, pod: &PodInfo, nodes: &[N]) -> TopologyState {
        TopologyState(GroupPlacement::of(pod, nodes, &self.args.topology_keys))
    }

    /// The node's room for the measure: capacity and what is free, for
    /// GPU resource `resource` with the node's CPU and memory.
    fn room(&self, resource: usize, node: &NodeInfo) -> (Shape, Shape) {
        let name = &self.args.resource_names[resource];
        let (alloc, used) = (&node.allocatable, &node.requested);
        let capacity =
            Shape { gpus: gpus_in(alloc, name), milli_cpu: alloc.milli_cpu, memory: alloc.memory };
        let free = capacity.minus(&Shape {
            gpus: gpus_in(used, name),
            milli_cpu: used.milli_cpu,
            memory: used.memory,
        });
        (capacity, free)
    }

    /// Maps a fragmentation delta (at most `max_capacity` GPUs either way)
    /// to `1..=top`, a lower delta scoring higher; 1 is the floor so that a
    /// penalised node (0) stays strictly the worst.
    fn scaled(delta: f64, max_capacity: i64, top: i64) -> i64 {
        let x = 0.5 * (1.0 - delta / max_capacity as f64);
        ((x * top as f64).round() as i64).clamp(1, top)
    }

    /// The fragmentation score of a GPU pod on a node, in `0..=BASIS`.
    fn gpu_fragmentation_score(&self, s: &ScoreState, req: GpuRequest, node: &NodeInfo) -> i64 {
        let (capacity, free) = self.room(req.resource, node);
        Self::fragmentation_score(s, capacity, free, req.shape)
    }

    /// The fragmentation score of `request` on a node of `capacity` with
    /// `free` room, in `0..=BASIS` (GPUs of a resource or DRA devices
    /// alike): 0 where it does not fit, or where it would take a fully free
    /// node larger than it while a partly used one can host it.
    fn fragmentation_score(s: &ScoreState, capacity: Shape, free: Shape, request: Shape) -> i64 {
        let gpus = request.gpus;
        if capacity.gpus <= 0 || free.gpus < gpus {
            return 0;
        }
        if s.spare_fully_free && free.gpus == capacity.gpus && capacity.gpus > gpus {
            return 0;
        }
        let leftover = (free.gpus - gpus) as f64;
        let delta = s.distribution.delta(&free, &capacity, &request)
            + fragmentation::BEST_FIT_TIE_BREAK * leftover;
        Self::scaled(delta, s.max_capacity, BASIS)
    }

    /// The fragmentation score of a pod taking devices through claims, in
    /// `0..=BASIS`: the node's devices from its ResourceSlices are the
    /// capacity, those no claim holds the free room, the pod's allocation
    /// there the request (CPU and memory as for GPU pods).
    fn device_fragmentation_score(
        &self,
        s: &ScoreState,
        pod: &PodInfo,
        node: &NodeInfo,
        room: DeviceRoom,
    ) -> i64 {
        let (alloc, used) = (&node.allocatable, &node.requested);
        let capacity =
            Shape { gpus: room.capacity, milli_cpu: alloc.milli_cpu, memory: alloc.memory };
        let free = Shape {
            gpus: room.free,
            milli_cpu: alloc.milli_cpu - used.milli_cpu,
            memory: alloc.memory - used.memory,
        };
        let r = &pod.requests.requests;
        let request = Shape { gpus: room.requested, milli_cpu: r.milli_cpu, memory: r.memory };
        Self::fragmentation_score(s, capacity, free, request)
    }

    /// The score of a CPU-only pod on a node, in `0..=BASIS`: nodes without
    /// GPUs first (with `PreferNonGpuNodes`), fully free GPU nodes last
    /// while another node fits, and among the other GPU nodes those where
    /// the pod's CPU and memory strand the fewest free GPUs (the delta of
    /// the measure for a request of no GPUs).
    fn cpu_only_score(&self, s: &ScoreState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let Some(resource) =
            self.args.resource_names.iter().position(|r| gpus_in(&node.allocatable, r) > 0)
        else {
            return BASIS;
        };
        if s.spare_fully_free && self.fully_free(node) {
            return 0;
        }
        let top = match self.args.cpu_only_pods {
            CpuOnlyPods::PreferNonGpuNodes => BASIS / 2,
            CpuOnlyPods::Neutral => BASIS,
        };
        let (capacity, free) = self.room(resource, node);
        let r = &pod.requests.requests;
        let request = Shape { gpus: 0, milli_cpu: r.milli_cpu, memory: r.memory };
        // delta >= 0 here (the pod frees nothing): map [0, max] to top..1.
        let delta = s.distribution.delta(&free, &capacity, &request);
        Self::scaled(2.0 * delta - s.max_capacity as f64, s.max_capacity, top)
    }
}

impl Plugin for GpuPlacement {
    fn name(&self) -> &'static str {
        names::GPU_PLACEMENT
    }

    fn as_pre_filter(self: Arc<Self>) -> Option<Arc<dyn PreFilterPlugin>> {
        Some(self)
    }
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        Some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl PreFilterPlugin for GpuPlacement {
    /// Always Success with no node subset: records where the pod's group
    /// is over all nodes (PreScore sees only the feasible ones, and a node
    /// a sibling filled is not feasible but still marks its domains).
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &dyn NodeInfoLister,
    ) -> (Option<PreFilterResult>, Status) {
        if self.args.topology_weight > 0 {
            state.write(self.topology(pod, nodes.list()));
        }
        (None, Status::success())
    }
}

impl PreScorePlugin for GpuPlacement {
    /// Success, or Skip when no part of the score applies to the pod.
    /// Counts a GPU pod's request into the learned distribution (once per
    /// pod).
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        _all: &dyn NodeInfoLister,
    ) -> Status {
        let request = self.gpu_request(pod);
        // A pod without a GPU resource request may take devices through
        // its claims: DynamicResources' Filter measured them per node.
        let rooms: Vec<DeviceRoom> = if request.is_none() {
            nodes.iter().filter_map(|n| device_room(state, n.name())).collect()
        } else {
            Vec::new()
        };
        let devices = !rooms.is_empty();
        let distribution = {
            let mut learner = self.learner.lock().unwrap_or_else(|e| e.into_inner());
            let observed = match request {
                Some(r) => Some(r.shape),
                None => rooms.iter().map(|r| r.requested).max().filter(|&g| g > 0).map(|gpus| {
                    let r = &pod.requests.requests;
                    Shape { gpus, milli_cpu: r.milli_cpu, memory: r.memory }
                }),
            };
            if let Some(shape) = observed {
                let id = if pod.uid.is_empty() {
                    Arc::from(pod.key.to_string())
                } else {
                    pod.uid.clone()
                };
                learner.observe(&id, shape);
            }
            learner.distribution()
        };
        let (max_capacity, spare_fully_free, fragmentation_applies) = match request {
            None if devices => {
                let max = rooms.iter().map(|r| r.capacity).max().unwrap_or(0);
                let partly_used_fits =
                    rooms.iter().any(|r| r.free < r.capacity && r.free >= r.requested);
                (max.max(1), partly_used_fits, true)
            }
            Some(r) => {
                let name = &self.args.resource_names[r.resource];
                // One pass: the largest capacity, and whether a partly used
                // node can host the pod.
                let (mut max, mut partly_used_fits) = (0, false);
                for n in nodes {
                    let (alloc, used) =
                        (gpus_in(&n.allocatable, name), gpus_in(&n.requested, name));
                    max = max.max(alloc);
                    partly_used_fits |= used > 0 && alloc - used >= r.shape.gpus;
                }
                (max.max(1), partly_used_fits, true)
            }
            None => {
                let any_gpu_node = nodes.iter().any(|n| self.has_gpus(n));
                let other_fits = nodes.iter().any(|n| !self.fully_free(n));
                let max = nodes
                    .iter()
                    .flat_map(|n| {
                        self.args.resource_names.iter().map(|r| gpus_in(&n.allocatable, r))
                    })
                    .max()
                    .unwrap_or(0);
                (max.max(1), other_fits, any_gpu_node)
            }
        };
        let topology_weight = if self.args.topology_weight == 0 {
            0
        } else {
            if state.read::<TopologyState>().is_none() {
                // Not run at PreFilter: the feasible nodes are all we see.
                state.write(self.topology(pod, nodes));
            }
            match state.read::<TopologyState>() {
                Some(TopologyState(Some(_))) => i64::from(self.args.topology_weight),
                _ => 0,
            }
        };
        let min_memory_mib = match request {
            Some(_) if self.args.gpu_memory_weight > 0 => memory::pod_min_mib(pod),
            _ => None,
        };
        let s = ScoreState {
            request,
            devices,
            distribution,
            max_capacity,
            spare_fully_free,
            min_memory_mib,
            fragmentation_weight: if fragmentation_applies {
                i64::from(self.args.fragmentation_weight)
            } else {
                0
            },
            topology_weight,
            memory_weight: if min_memory_mib.is_some() {
                i64::from(self.args.gpu_memory_weight)
            } else {
                0
            },
        };
        if s.fragmentation_weight + s.topology_weight + s.memory_weight == 0 {
            return Status::skip();
        }
        state.write(s);
        Status::success()
    }
}

impl ScorePlugin for GpuPlacement {
    /// The weighted mean of the parts that apply, in `0..=BASIS`; Error
    /// when PreScore did not run (enable the plugin in multiPoint, or at
    /// preScore and score).
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<ScoreState>() else {
            return Err(Status::error(
                "GpuPlacement: no PreScore state; enable the plugin at preScore and score",
            ));
        };
        let (mut total, mut weights) = (0, 0);
        if s.fragmentation_weight > 0 {
            let part = match (s.request, s.devices) {
                (Some(r), _) => self.gpu_fragmentation_score(s, r, node),
                (None, true) => match device_room(state, node.name()) {
                    Some(room) => self.device_fragmentation_score(s, pod, node, room),
                    None => 0,
                },
                (None, false) => self.cpu_only_score(s, pod, node),
            };
            total += s.fragmentation_weight * part;
            weights += s.fragmentation_weight;
        }
        if s.topology_weight > 0
            && let Some(TopologyState(Some(g))) = state.read::<TopologyState>()
        {
            total += s.topology_weight * g.closeness(node, &self.args.topology_keys, BASIS);
            weights += s.topology_weight;
        }
        if let (Some(min), true) = (s.min_memory_mib, s.memory_weight > 0) {
            total += s.memory_weight * memory::score(node, min, BASIS);
            weights += s.memory_weight;
        }
        Ok(if weights == 0 { 0 } else { total / weights })
    }

    /// Min-max over the nodes: the best becomes 100, the worst 0 (all 0
    /// when every node scored the same).
    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        let (Some(&min), Some(&max)) = (scores.iter().min(), scores.iter().max()) else {
            return Status::success();
        };
        for s in scores.iter_mut() {
            *s = if max == min { 0 } else { MAX_NODE_SCORE * (*s - min) / (max - min) };
        }
        Status::success()
    }
}
