//! The scheduling path: a cluster file (`simulate --cluster`) run through
//! the scheduler on the embedded cluster with the default profile: Filter
//! and Score of every default plugin, preemption, gangs, DRA allocation.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use convoy_api::{NodeInfo, PodInfo};
use k8s_openapi::api::core::v1::Pod;

/// The resources whose use the property checks on every node.
const CHECKED: [&str; 3] = ["cpu", "memory", "pods"];

/// Loads the input as [`crate::cluster`] does and schedules it as
/// `convoy-scheduler simulate` does (default profile, seeded). The run ends
/// (no panic, no hang), its report names every pod it considered once, and
/// what it placed is sound: each bound pod is on a node of the input, and a
/// node whose cpu, memory or pod count was within its allocatable before the
/// run still is after it (pods bound, victims evicted).
pub fn schedule(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(objects) = convoy_embedded::parse_objects(text, "fuzz.yaml") else { return };
    let config = convoy_scheduler::load_config(None).expect("the default configuration loads");
    let mut nodes: HashMap<String, NodeInfo> = objects
        .nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.clone()?, NodeInfo::new(Arc::new(n.clone())))))
        .collect();
    for pod in objects.pods.iter().filter(|p| counts(p)) {
        if let (Some(n), Ok(info)) =
            (node_of(pod).and_then(|n| nodes.get_mut(n)), PodInfo::new(Arc::new(pod.clone())))
        {
            n.add_pod(Arc::new(info));
        }
    }
    let within_before: HashSet<(String, &str)> = nodes
        .iter()
        .flat_map(|(name, n)| {
            CHECKED.iter().filter(|r| n.free(r) >= 0).map(move |r| (name.clone(), *r))
        })
        .collect();
    let by_key: HashMap<(String, String), Pod> = objects
        .pods
        .iter()
        .map(|p| {
            let m = &p.metadata;
            (
                (m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()),
                p.clone(),
            )
        })
        .collect();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let report =
        match runtime.block_on(convoy_scheduler::simulate::simulate(config, objects, false)) {
            Ok(report) => report,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        };

    let mut seen = HashSet::new();
    for result in &report.pods {
        let key = (result.namespace.clone(), result.name.clone());
        assert!(seen.insert(key.clone()), "pod {key:?} reported twice");
        let Some(node) = &result.node else { continue };
        assert!(nodes.contains_key(node), "pod {key:?} placed on {node}, not a node of the input");
        let Some(pod) = by_key.get(&key) else { continue };
        if !counts(pod) {
            continue;
        }
        let info = Arc::new(PodInfo::new(Arc::new(pod.clone())).expect("the loader checked it"));
        let n = nodes.get_mut(node).expect("checked above");
        if result.evicted {
            n.remove_pod(&info);
        } else if node_of(pod).is_none() {
            n.add_pod(info);
        }
    }
    for (name, resource) in &within_before {
        let free = nodes[name].free(resource);
        assert!(free >= 0, "node {name}: {resource} over allocatable by {} after the run", -free);
    }
}

/// The node a pod of the input is bound to.
fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref().filter(|n| !n.is_empty())
}

/// Whether a pod holds resources on its node: not terminal.
fn counts(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
}
