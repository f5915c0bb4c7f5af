//! Pure helpers of the scheduler's group cycle: the order members are
//! placed in, the `minResources` pre-check, early abort, and topology
//! domains for groups that require one.

use std::collections::BTreeMap;
use std::sync::Arc;

use convoy_api::{NodeInfo, PodGroup, QueuedPodInfo};

/// Sorts a group's members into the order they are placed: priority
/// first, then the largest requests (GPUs, then CPU, then memory), then by
/// name, so the hardest pods pick their nodes first (first-fit decreasing)
/// and the order is deterministic.
pub fn placement_order(members: &mut [QueuedPodInfo]) {
    members.sort_by(|a, b| {
        let key = |q: &QueuedPodInfo| {
            let r = &q.pod_info.requests.requests;
            let gpus: i64 =
                r.scalar.iter().filter(|(k, _)| k.ends_with("/gpu")).map(|(_, v)| *v).sum();
            (
                std::cmp::Reverse(q.pod_info.priority),
                std::cmp::Reverse((gpus, r.milli_cpu, r.memory)),
            )
        };
        key(a).cmp(&key(b)).then_with(|| a.pod_info.key.cmp(&b.pod_info.key))
    });
}

/// Whether a group that has `placed` members placed and `remaining` still to
/// try can still reach `needed`: once it cannot, the cycle stops (upstream's
/// `PlacementFeasible` early abort).
pub fn can_still_succeed(placed: usize, remaining: usize, needed: usize) -> bool {
    placed + remaining >= needed
}

/// Checks `spec.minResources` against the free capacity of `nodes`
/// (allocatable minus requested, summed). `Err` says which resource is short.
pub fn min_resources_available(pg: &PodGroup, nodes: &[Arc<NodeInfo>]) -> Result<(), String> {
    let Some(min) = &pg.min_resources else { return Ok(()) };
    for (name, want) in min.iter_named() {
        if want <= 0 {
            continue;
        }
        let free: i64 = nodes.iter().map(|n| n.free(name).max(0)).sum();
        if free < want {
            return Err(format!(
                "pod group {}: minResources not available: {name} {want} requested, {free} free in the cluster",
                pg.key
            ));
        }
    }
    Ok(())
}

/// Whether the group could fit the cluster if nothing else ran on it: each
/// of the `needed` smallest members fits some node's allocatable alone, and
/// their summed requests fit the summed allocatable. A group that fails this
/// can never be placed by waiting, so the starvation guard ignores it (it
/// would hold the cluster back for nothing). `members` are in placement
/// order (largest first).
pub fn could_fit_empty_cluster(
    members: &[QueuedPodInfo],
    needed: usize,
    nodes: &[Arc<NodeInfo>],
) -> bool {
    let smallest = &members[members.len().saturating_sub(needed)..];
    let mut total = convoy_api::Resource::default();
    let mut capacity = convoy_api::Resource::default();
    for n in nodes {
        capacity.add(&n.allocatable);
    }
    let fits = |want: &convoy_api::Resource, have: &convoy_api::Resource| {
        want.iter_named().all(|(name, v)| name == "pods" || v <= have.get(name))
    };
    for m in smallest {
        let r = &m.pod_info.requests.requests;
        if !nodes.iter().any(|n| fits(r, &n.allocatable)) {
            return false;
        }
        total.add(r);
    }
    fits(&total, &capacity)
}

/// Whether node `n` has every label `(key, value)` of `labels` (the nodes
/// of a topology domain, or of a domain inside one).
pub fn has_labels(n: &NodeInfo, labels: &[(&str, &str)]) -> bool {
    labels.iter().all(|(k, v)| n.label(k) == Some(*v))
}

/// A topology domain: a label value and its nodes.
pub type Domain = (String, Vec<Arc<NodeInfo>>);

/// The nodes grouped by their value of the label `key` (nodes without it
/// are left out), largest domain first, then by value.
pub fn domains(nodes: &[Arc<NodeInfo>], key: &str) -> Vec<Domain> {
    let mut by: BTreeMap<&str, Vec<Arc<NodeInfo>>> = BTreeMap::new();
    for n in nodes {
        if let Some(v) = n.label(key) {
            by.entry(v).or_default().push(n.clone());
        }
    }
    let mut out: Vec<Domain> = by.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    out
}

/// The preferred topology levels `keys`, narrowest first (the key with the
/// most distinct values among `nodes`, then by name), each with its
/// domains: the order in which a group is placed and a plan is made.
pub fn narrowest_first<'k>(
    nodes: &[Arc<NodeInfo>],
    keys: &'k [Arc<str>],
) -> Vec<(&'k Arc<str>, Vec<Domain>)> {
    let mut levels: Vec<(&Arc<str>, Vec<Domain>)> =
        keys.iter().map(|k| (k, domains(nodes, k))).collect();
    levels.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(b.0)));
    levels
}

/// The domains of the preferred topology levels `keys` to try a group in,
/// among `nodes` (already restricted to the group's required domain, if
/// any): the narrowest level first (the key with the most distinct values),
/// and within a level the domain with the least free room that can still
/// hold the members first (best fit, so large domains stay whole for large
/// groups). Free room is counted in the resource the members need most of
/// relative to what the nodes offer (each member's requests summed); a
/// domain with less free than the members need in any of their resources
/// is left out. Returns `(key, value)` pairs.
pub fn preferred_domains(
    nodes: &[Arc<NodeInfo>],
    keys: &[Arc<str>],
    members: &[QueuedPodInfo],
) -> Vec<(Arc<str>, String)> {
    let mut need = convoy_api::Resource::default();
    for m in members {
        need.add(&m.pod_info.requests.requests);
    }
    let free_of = |ns: &[Arc<NodeInfo>]| {
        let mut free = convoy_api::Resource::default();
        for n in ns {
            free.add(&n.allocatable);
            free.sub(&n.requested);
        }
        free
    };
    // The resource the members need most of, relative to the cluster.
    let total = free_of(nodes);
    let dominant = need
        .iter_named()
        .filter(|(_, v)| *v > 0)
        .max_by(|a, b| {
            let share = |(name, v): &(&str, i64)| *v as f64 / total.get(name).max(1) as f64;
            share(a).total_cmp(&share(b))
        })
        .map(|(name, _)| name.to_string());
    let mut out = Vec::new();
    for (key, doms) in narrowest_first(nodes, keys) {
        let mut fitting: Vec<(i64, String)> = doms
            .into_iter()
            .filter_map(|(value, ns)| {
                let free = free_of(&ns);
                let enough = need.iter_named().all(|(name, v)| v <= free.get(name));
                let room = dominant.as_deref().map_or(0, |d| free.get(d));
                enough.then_some((room, value))
            })
            .collect();
        fitting.sort();
        out.extend(fitting.into_iter().map(|(_, v)| (key.clone(), v)));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use convoy_api::testing::{NodeBuilder, PodBuilder};
    use convoy_api::{PodInfo, QueuedPodInfo};

    use super::*;

    fn q(b: PodBuilder) -> QueuedPodInfo {
        QueuedPodInfo::new(Arc::new(PodInfo::new(Arc::new(b.build())).unwrap()), Instant::now())
    }

    #[test]
    fn order_is_priority_then_size_then_name() {
        let mut m = vec![
            q(PodBuilder::new("b").cpu("1")),
            q(PodBuilder::new("a").cpu("1")),
            q(PodBuilder::new("big").cpu("4")),
            q(PodBuilder::new("gpu").cpu("1").resource("nvidia.com/gpu", "2")),
            q(PodBuilder::new("hi").cpu("1").priority(10)),
        ];
        placement_order(&mut m);
        let names: Vec<&str> = m.iter().map(|q| &*q.pod_info.key.name).collect();
        assert_eq!(names, ["hi", "gpu", "big", "a", "b"]);
    }

    #[test]
    fn fits_empty_cluster() {
        let nodes: Vec<Arc<NodeInfo>> =
            (0..2).map(|i| Arc::new(NodeBuilder::new(&format!("n{i}")).cpu("4").info())).collect();
        let members = |cpus: &[&str]| {
            let mut m: Vec<QueuedPodInfo> = cpus
                .iter()
                .enumerate()
                .map(|(i, c)| q(PodBuilder::new(&format!("p{i}")).cpu(c)))
                .collect();
            placement_order(&mut m);
            m
        };
        assert!(could_fit_empty_cluster(&members(&["3", "3"]), 2, &nodes));
        assert!(!could_fit_empty_cluster(&members(&["3", "3", "3"]), 3, &nodes), "9 CPUs > 8");
        assert!(could_fit_empty_cluster(&members(&["3", "3", "3"]), 2, &nodes), "two of three");
        assert!(!could_fit_empty_cluster(&members(&["5"]), 1, &nodes), "no node has 5 CPUs");
    }

    #[test]
    fn early_abort() {
        assert!(can_still_succeed(3, 5, 8));
        assert!(!can_still_succeed(3, 4, 8));
    }

    #[test]
    fn min_resources_and_domains() {
        let nodes: Vec<Arc<NodeInfo>> = (0..3)
            .map(|i| {
                let n = NodeBuilder::new(&format!("n{i}"))
                    .cpu("4")
                    .label("zone", if i < 2 { "a" } else { "b" })
                    .build();
                Arc::new(NodeInfo::new(Arc::new(n)))
            })
            .collect();
        let pg = |cpu: &str| {
            PodGroup::from_json(&serde_json::json!({
                "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                "metadata": {"name": "g"},
                "spec": {"minMember": 2, "minResources": {"cpu": cpu}}
            }))
            .unwrap()
        };
        assert!(min_resources_available(&pg("12"), &nodes).is_ok());
        assert_eq!(
            min_resources_available(&pg("13"), &nodes).unwrap_err(),
            "pod group default/g: minResources not available: cpu 13000 requested, 12000 free in the cluster"
        );
        let d = domains(&nodes, "zone");
        assert_eq!(
            d.iter().map(|(v, n)| (v.as_str(), n.len())).collect::<Vec<_>>(),
            [("a", 2), ("b", 1)]
        );
    }
}
