//! The cluster file of `convoy-scheduler simulate --cluster`.

use std::sync::Arc;

use convoy_api::{ClusterUpdate, NodeInfo, PodInfo};
use convoy_embedded::EmbeddedCluster;

/// Loads the input as `simulate` loads its cluster file, then starts the
/// embedded cluster on the objects as `simulate` does. The loader promises
/// to refuse, at load time, what the scheduler could not read: every pod it
/// accepts has readable scheduling data, and every PodGroup it accepts
/// reaches the scheduler.
pub fn cluster(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let objects = match convoy_embedded::parse_objects(text, "fuzz.yaml") {
        Ok(objects) => objects,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = objects.notes();
    for pod in &objects.pods {
        if let Err(e) = PodInfo::new(Arc::new(pod.clone())) {
            panic!("the loader accepted a pod the scheduler cannot read: {e}");
        }
    }
    for node in &objects.nodes {
        let _ = NodeInfo::new(Arc::new(node.clone()));
    }
    let groups = objects.pod_groups.len();
    let (_cluster, mut updates) = EmbeddedCluster::new(objects);
    let mut applied = 0;
    while let Ok(update) = updates.try_recv() {
        applied += usize::from(matches!(update, ClusterUpdate::PodGroupApplied(_)));
    }
    assert_eq!(applied, groups, "PodGroups the loader accepted but the cluster dropped");
}
