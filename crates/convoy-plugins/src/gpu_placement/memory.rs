//! The optional GPU memory score: a pod asks for a minimum memory per GPU
//! (annotation [`GPU_MEMORY_MIN_ANNOTATION`]) and prefers the nodes whose
//! GPUs (label [`GPU_MEMORY_LABEL`], MiB per GPU, published by NVIDIA's GPU
//! feature discovery) have the least memory that is enough, keeping larger
//! GPUs for the pods that need them. A preference, not a filter: a hard
//! minimum is a required node affinity `nvidia.com/gpu.memory Gt <MiB>`.

use convoy_api::resource::parse_value;
use convoy_api::{NodeInfo, PodInfo};

/// Node label: memory of each GPU, in MiB.
pub const GPU_MEMORY_LABEL: &str = "nvidia.com/gpu.memory";
/// Node label: the GPU model (for node affinity; not scored).
pub const GPU_PRODUCT_LABEL: &str = "nvidia.com/gpu.product";
/// Pod annotation: the minimum memory per GPU the pod needs, in MiB like
/// the label (`40960`) or as a quantity with a unit (`40Gi`).
pub const GPU_MEMORY_MIN_ANNOTATION: &str = "convoy.dev/gpu-memory-min";

const MIB: i64 = 1024 * 1024;

/// The pod's minimum GPU memory in MiB; `None` without the annotation or
/// when it cannot be read (then the memory score is off for the pod).
pub fn pod_min_mib(pod: &PodInfo) -> Option<i64> {
    let v = pod.pod.metadata.annotations.as_ref()?.get(GPU_MEMORY_MIN_ANNOTATION)?.trim();
    let mib = match v.parse::<i64>() {
        Ok(mib) => mib,
        Err(_) => (parse_value(v).ok()? + MIB - 1) / MIB,
    };
    (mib > 0).then_some(mib)
}

/// The node's GPU memory in MiB, from its label.
pub fn node_mib(node: &NodeInfo) -> Option<i64> {
    node.label(GPU_MEMORY_LABEL)?.trim().parse::<i64>().ok().filter(|m| *m > 0)
}

/// The memory score in `0..=max`: `max * min / memory` on nodes with
/// enough memory per GPU (the tightest fit scores `max`), 0 on nodes with
/// too little or no label.
pub fn score(node: &NodeInfo, min_mib: i64, max: i64) -> i64 {
    match node_mib(node) {
        Some(mem) if mem >= min_mib => max * min_mib / mem,
        _ => 0,
    }
}
