//! Parity with kube-scheduler v1.37.2: upstream's score test tables
//! (`pkg/scheduler/framework/plugins/noderesources/*_test.go`) ported case
//! by case, with upstream's fixtures and expected numbers. Cases that need
//! DRA extended resources (NodeResourcesFit's DRA path, which Convoy's
//! NodeResourcesFit does not take: DynamicResources evaluates claims) or
//! only check args validation (convoy-config's job) are left out.

mod balanced;
mod fit;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Map, Value, json};

use convoy_api::{NodeInfo, PodInfo};

/// Requests of one container, as upstream's `Req(map)`.
type Req<'a> = &'a [(&'a str, &'a str)];

fn requests(req: Req<'_>) -> Value {
    let list: Map<String, Value> = req.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    json!({ "requests": list })
}

/// Upstream `st.MakePod()` with `.Req(r)` per entry of `containers` (one
/// container each; no container at all when empty) and `.SidecarReq(r)` per
/// entry of `sidecars`; `node` is `.Node(name)` ("" for none).
fn pod_with(node: &str, containers: &[Req<'_>], sidecars: &[Req<'_>]) -> Arc<PodInfo> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let uid = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let containers: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"name": format!("con{i}"), "resources": requests(r)}))
        .collect();
    let init: Vec<Value> = sidecars
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({"name": format!("sidecar-con{i}"), "restartPolicy": "Always", "resources": requests(r)})
        })
        .collect();
    let mut spec = json!({ "containers": containers, "initContainers": init });
    if !node.is_empty() {
        spec["nodeName"] = json!(node);
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("p{uid}"), "namespace": "default", "uid": format!("uid-{uid}")},
        "spec": spec,
    }))
    .unwrap();
    Arc::new(PodInfo::new(Arc::new(pod)).unwrap())
}

/// `st.MakePod().Req(..)...`, not assigned.
fn pod(containers: &[Req<'_>]) -> Arc<PodInfo> {
    pod_with("", containers, &[])
}

/// `st.MakePod().Node(node).Req(..)...`.
fn pod_on(node: &str, containers: &[Req<'_>]) -> Arc<PodInfo> {
    pod_with(node, containers, &[])
}

/// Upstream `st.MakeNode().Name(name).Capacity(res)`: allocatable is `res`
/// plus 32 pods.
fn node(name: &str, res: Req<'_>) -> Node {
    let mut alloc: Map<String, Value> =
        res.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    alloc.insert("pods".into(), json!("32"));
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"capacity": alloc.clone(), "allocatable": alloc}
    }))
    .unwrap()
}

/// Upstream noderesources' `makeNode(name, milliCPU, memory, extended)`.
fn make_node(name: &str, milli_cpu: i64, memory: i64, extended: &[(&str, i64)]) -> Node {
    let mut alloc = Map::new();
    alloc.insert("cpu".into(), json!(format!("{milli_cpu}m")));
    alloc.insert("memory".into(), json!(memory.to_string()));
    for (k, v) in extended {
        alloc.insert(k.to_string(), json!(v.to_string()));
    }
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"capacity": alloc.clone(), "allocatable": alloc}
    }))
    .unwrap()
}

/// Upstream `cache.NewSnapshot(existingPods, nodes)`: the nodes, in order,
/// with the existing pods assigned to them (pods on no listed node are
/// dropped).
fn snapshot(nodes: Vec<Node>, existing: Vec<Arc<PodInfo>>) -> Vec<Arc<NodeInfo>> {
    nodes
        .into_iter()
        .map(|n| {
            let mut info = NodeInfo::new(Arc::new(n));
            let name = info.name().to_string();
            for p in existing.iter().filter(|p| p.node_name() == Some(name.as_str())) {
                info.add_pod(p.clone());
            }
            Arc::new(info)
        })
        .collect()
}
