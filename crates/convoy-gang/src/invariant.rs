//! The gang invariant, checkable from outside the scheduler (tests on the
//! embedded cluster and on a real API server use it): once no binding is
//! in flight, every gang PodGroup has either no member bound or at least
//! `minMember` members bound or finished.

use std::collections::HashMap;
use std::sync::Arc;

use convoy_api::pod_group::group_key_of;
use convoy_api::{GroupKey, PodGroup};
use k8s_openapi::api::core::v1::Pod;

/// The groups that break the invariant, as `ns/name: k/min bound`
/// messages (empty when it holds). Pods of groups not in `groups` are
/// ignored.
pub fn partial_groups(pods: &[Arc<Pod>], groups: &[Arc<PodGroup>]) -> Vec<String> {
    let mut bound: HashMap<GroupKey, usize> = HashMap::new();
    for pod in pods {
        let Some(key) = group_key_of(pod) else { continue };
        let assigned =
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
        if assigned {
            *bound.entry(key).or_default() += 1;
        }
    }
    let mut out = Vec::new();
    for g in groups.iter().filter(|g| g.gang) {
        let n = bound.get(&g.key).copied().unwrap_or(0);
        if n > 0 && n < g.min_member as usize {
            out.push(format!("{}: {n}/{} bound", g.key, g.min_member));
        }
    }
    out.sort();
    out
}
