//! The benchmark's prepare hook (upstream's `WithPrepareFn`): the GpuHealth
//! CRD (created on an API server before the scheduler starts, ignored by
//! the embedded cluster) and a report for each even-numbered node, all its
//! 8 GPUs unhealthy.

#![allow(dead_code)]

use convoy_bench::Prepare;
use serde_json::{Value, json};

/// A report for node `gpu-<i>`.
pub fn report(i: usize, unhealthy: u32) -> Value {
    json!({"apiVersion": "example.com/v1alpha1", "kind": "GpuHealth",
           "metadata": {"name": format!("gpu-{i}")}, "spec": {"unhealthy": unhealthy}})
}

/// The hook for a workload of up to `nodes` nodes.
pub fn reports(nodes: usize) -> impl Fn(&mut Prepare) -> Result<(), String> + Send + Sync {
    move |ctx| {
        ctx.apply_yaml(convoy_example_gpu_health::CRD)?;
        for i in (0..nodes).step_by(2) {
            ctx.apply(report(i, 8));
        }
        Ok(())
    }
}
