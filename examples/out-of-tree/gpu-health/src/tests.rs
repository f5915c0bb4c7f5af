//! The plugin's verdicts on plain data: reports in a store, nodes and pods
//! from convoy-api's builders.

use std::sync::Arc;

use convoy_api::serde_json::json;
use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{Code, NodeList, ServedApis, Serving};
use convoy_objects::ClusterObjects;

use super::*;

fn report(node: &str, unhealthy: i64) -> Arc<CustomObject> {
    Arc::new(CustomObject::new(
        GPU_HEALTH,
        json!({"apiVersion": "example.com/v1alpha1", "kind": "GpuHealth",
               "metadata": {"name": node}, "spec": {"unhealthy": unhealthy}}),
    ))
}

fn gpu_node(name: &str, gpus: &str) -> NodeInfo {
    NodeBuilder::new(name).cpu("32").memory("64Gi").allocatable("nvidia.com/gpu", gpus).info()
}

fn gpu_pod(gpus: &str) -> Arc<PodInfo> {
    PodBuilder::new("p").cpu("1").resource("nvidia.com/gpu", gpus).info()
}

/// Filter's message (or "ok") and Score on each node.
fn verdicts(plugin: &GpuHealth, pod: &PodInfo, nodes: &[NodeInfo]) -> Vec<(String, i64)> {
    let mut state = CycleState::new();
    let list = NodeList::of(nodes.to_vec());
    let (_, s) = plugin.pre_filter(&mut state, pod, &list);
    assert!(s.is_success() || s.is_skip(), "{s}");
    nodes
        .iter()
        .map(|n| {
            let f = plugin.filter(&state, pod, n);
            let v = if f.is_success() { "ok".to_string() } else { f.message() };
            (v, plugin.score(&state, pod, n).unwrap())
        })
        .collect()
}

#[test]
fn unhealthy_gpus_are_not_offered() {
    let objects = Arc::new(ClusterObjects::new());
    objects.custom().apply(report("n0", 6));
    objects.custom().apply(report("n1", 1));
    let plugin = GpuHealth::new(GpuHealthArgs::default(), objects.clone());
    let nodes = [gpu_node("n0", "8"), gpu_node("n1", "8"), gpu_node("n2", "8")];
    assert_eq!(
        verdicts(&plugin, &gpu_pod("4"), &nodes),
        [(UNHEALTHY.to_string(), 25), ("ok".to_string(), 87), ("ok".to_string(), 100)]
    );
    // A report that improves is seen at the next cycle.
    objects.custom().apply(report("n0", 0));
    assert_eq!(verdicts(&plugin, &gpu_pod("4"), &nodes)[0], ("ok".to_string(), 100));
    // A pod without GPUs is not this plugin's business.
    let mut state = CycleState::new();
    let (_, s) = plugin.pre_filter(
        &mut state,
        &PodBuilder::new("cpu").cpu("1").info(),
        &NodeList::of(vec![]),
    );
    assert!(s.is_skip());
}

#[test]
fn require_report_rejects_nodes_without_one_and_refuses_while_not_served() {
    let objects = Arc::new(ClusterObjects::new());
    objects.custom().apply(report("n0", 0));
    let args = GpuHealthArgs { require_report: true, ..Default::default() };
    let plugin = GpuHealth::new(args, objects.clone());
    let nodes = [gpu_node("n0", "8"), gpu_node("n1", "8")];
    assert_eq!(
        verdicts(&plugin, &gpu_pod("1"), &nodes).into_iter().map(|v| v.0).collect::<Vec<_>>(),
        ["ok", NO_REPORT]
    );
    let mut served = ServedApis::all();
    served.set(GPU_HEALTH, Serving::NotServed);
    objects.set_served_apis(Arc::new(served));
    let (_, s) =
        plugin.pre_filter(&mut CycleState::new(), &gpu_pod("1"), &NodeList::of(nodes.to_vec()));
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        s.message(),
        "pod uses resources[nvidia.com/gpu], which needs gpuhealths.example.com (v1alpha1); \
         this API server does not serve it"
    );
    // Without requireReport, allocatable alone decides meanwhile.
    let lenient = GpuHealth::new(GpuHealthArgs::default(), objects);
    assert_eq!(verdicts(&lenient, &gpu_pod("1"), &nodes)[1], ("ok".to_string(), 100));
}

#[test]
fn a_report_that_improves_or_goes_requeues() {
    let pod = gpu_pod("1");
    let ev = |n| Some(EventObject::Custom(report("n0", n)));
    let hint = |old: Option<EventObject>, new: Option<EventObject>| {
        is_schedulable_after_report_change(&pod, old.as_ref(), new.as_ref())
    };
    assert_eq!(hint(ev(3), ev(1)), QueueingHint::Queue);
    assert_eq!(hint(ev(1), ev(3)), QueueingHint::Skip);
    assert_eq!(hint(ev(1), ev(1)), QueueingHint::Skip);
    assert_eq!(hint(ev(1), None), QueueingHint::Queue);
    assert_eq!(hint(None, ev(0)), QueueingHint::Queue);
}

#[test]
fn args_are_checked() {
    assert!(GpuHealthArgs::default().validate().is_empty());
    let bad = GpuHealthArgs { resource_name: "gpu".into(), ..Default::default() };
    assert_eq!(bad.validate()[0].0, "resourceName");
}
