//! kube-scheduler v1.37.2's InterPodAffinity transcribed as directly as
//! possible (maps of `(key, value)` rebuilt from every pod of every node,
//! `InterPodAffinityHostnameFastPath` off): the reference the randomized
//! test compares the plugin with.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use convoy_api::ObjectLister;
use convoy_api::labels::{Labels, Selector, no_labels};
use convoy_api::{
    AffinityTerm, Code, NodeInfo, NodeInfoLister, NodeList, PodInfo, Status, WeightedAffinityTerm,
};
use convoy_config::InterPodAffinityArgs;
use convoy_objects::ClusterObjects;

use super::{AFFINITY, ANTI, EXISTING};

/// A node's labels (none for a placeholder).
fn node_labels(node: &NodeInfo) -> &Labels {
    node.node().and_then(|n| n.metadata.labels.as_ref()).unwrap_or(no_labels())
}

type Map = BTreeMap<(String, String), i64>;

/// Upstream `mergeAffinityTermNamespacesIfNotEmpty`.
fn resolve(objects: &ClusterObjects, t: &AffinityTerm) -> AffinityTerm {
    let mut t = t.clone();
    if t.namespace_selector.is_everything() {
        return t;
    }
    let mut names: BTreeSet<Arc<str>> = t.namespaces.iter().cloned().collect();
    names.extend(objects.namespaces_matching(&t.namespace_selector));
    t.namespaces = names.into_iter().collect();
    t.namespace_selector = Selector::Nothing;
    t
}

fn matches(t: &AffinityTerm, pod: &PodInfo, ns_labels: &Labels) -> bool {
    t.matches(pod.namespace(), pod.labels(), ns_labels)
}

fn matches_all(terms: &[AffinityTerm], pod: &PodInfo) -> bool {
    !terms.is_empty() && terms.iter().all(|t| matches(t, pod, no_labels()))
}

fn record(map: &mut Map, node: &NodeInfo, key: &str, n: i64) {
    if let Some(v) = node_labels(node).get(key) {
        *map.entry((key.to_string(), v.clone())).or_insert(0) += n;
    }
}

pub(super) struct RefFilter {
    affinity_terms: Vec<AffinityTerm>,
    anti_affinity_terms: Vec<AffinityTerm>,
    matches_own: bool,
    existing: Map,
    affinity: Map,
    anti_affinity: Map,
}

/// Upstream PreFilter: `Err` with its status when not Success.
pub(super) fn ref_pre_filter(
    objects: &ClusterObjects,
    pod: &PodInfo,
    list: &NodeList,
) -> Result<RefFilter, Status> {
    let a = pod.affinity.as_deref();
    if let Some(e) = a.and_then(|a| a.parse_error.as_deref()) {
        return Err(Status::unresolvable(format!("parsing pod: {e}")));
    }
    let resolve_all = |ts: Option<&Vec<AffinityTerm>>| -> Vec<AffinityTerm> {
        ts.into_iter().flatten().map(|t| resolve(objects, t)).collect()
    };
    let affinity_terms = resolve_all(a.map(|a| &a.required_affinity));
    let anti_affinity_terms = resolve_all(a.map(|a| &a.required_anti_affinity));
    let ns_labels = objects.namespace_labels(pod.namespace()).unwrap_or_default();
    let mut s = RefFilter {
        matches_own: matches_all(&affinity_terms, pod),
        affinity_terms,
        anti_affinity_terms,
        existing: Map::new(),
        affinity: Map::new(),
        anti_affinity: Map::new(),
    };
    for node in list.list() {
        for e in &node.pods {
            for t in e.affinity.iter().flat_map(|a| &a.required_anti_affinity) {
                if matches(t, pod, &ns_labels) {
                    record(&mut s.existing, node, &t.topology_key, 1);
                }
            }
            if matches_all(&s.affinity_terms, e) {
                for t in &s.affinity_terms {
                    record(&mut s.affinity, node, &t.topology_key, 1);
                }
            }
            for t in &s.anti_affinity_terms {
                if matches(t, e, no_labels()) {
                    record(&mut s.anti_affinity, node, &t.topology_key, 1);
                }
            }
        }
    }
    if s.existing.is_empty() && s.affinity_terms.is_empty() && s.anti_affinity_terms.is_empty() {
        return Err(Status::skip());
    }
    Ok(s)
}

/// Upstream Filter.
pub(super) fn ref_filter(s: &RefFilter, node: &NodeInfo) -> Status {
    let labels = node_labels(node);
    let count = |m: &Map, k: &str| {
        labels.get(k).map(|v| m.get(&(k.to_string(), v.clone())).copied().unwrap_or(0))
    };
    let mut pods_exist = true;
    for t in &s.affinity_terms {
        match count(&s.affinity, &t.topology_key) {
            None => return Status::unresolvable(AFFINITY),
            Some(c) if c <= 0 => pods_exist = false,
            Some(_) => {}
        }
    }
    if !(pods_exist || s.affinity.is_empty() && s.matches_own) {
        return Status::unresolvable(AFFINITY);
    }
    if s.anti_affinity_terms.iter().any(|t| count(&s.anti_affinity, &t.topology_key) > Some(0)) {
        return Status::unschedulable(ANTI);
    }
    if labels.iter().any(|(k, v)| s.existing.get(&(k.clone(), v.clone())).is_some_and(|&c| c > 0)) {
        return Status::unschedulable(EXISTING);
    }
    Status::success()
}

/// Upstream PreScore, Score and NormalizeScore: `Err` with PreScore's
/// status when not Success.
pub(super) fn ref_scores(
    objects: &ClusterObjects,
    args: &InterPodAffinityArgs,
    pod: &PodInfo,
    list: &NodeList,
) -> Result<Vec<i64>, Status> {
    let spec = pod.spec().affinity.as_ref();
    let has_constraints = spec.is_some_and(|a| {
        a.pod_affinity
            .as_ref()
            .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref())
            .is_some_and(|t| !t.is_empty())
            || a.pod_anti_affinity
                .as_ref()
                .and_then(|p| p.preferred_during_scheduling_ignored_during_execution.as_ref())
                .is_some_and(|t| !t.is_empty())
    });
    if args.ignore_preferred_terms_of_existing_pods && !has_constraints {
        return Err(Status::skip());
    }
    let a = pod.affinity.as_deref();
    if let Some(e) = a.and_then(|a| a.parse_error.as_deref()) {
        return Err(Status::error(format!("failed to parse pod: {e}")));
    }
    let weighted = |ts: Option<&Vec<WeightedAffinityTerm>>| -> Vec<(AffinityTerm, i64)> {
        ts.into_iter().flatten().map(|t| (resolve(objects, &t.term), i64::from(t.weight))).collect()
    };
    let preferred = weighted(a.map(|a| &a.preferred_affinity));
    let preferred_anti = weighted(a.map(|a| &a.preferred_anti_affinity));
    let ns_labels = objects.namespace_labels(pod.namespace()).unwrap_or_default();
    let hard = i64::from(args.hard_pod_affinity_weight);
    let mut map = Map::new();
    let mut counted = false;
    let mut add = |map: &mut Map, node: &NodeInfo, key: &str, w: i64| {
        if node_labels(node).contains_key(key) {
            counted = true;
            record(map, node, key, w);
        }
    };
    for node in list.list() {
        if node_labels(node).is_empty() {
            continue;
        }
        let pods = if has_constraints { &node.pods } else { &node.pods_with_affinity };
        for e in pods {
            for (t, w) in &preferred {
                if matches(t, e, no_labels()) {
                    add(&mut map, node, &t.topology_key, *w);
                }
            }
            for (t, w) in &preferred_anti {
                if matches(t, e, no_labels()) {
                    add(&mut map, node, &t.topology_key, -*w);
                }
            }
            let Some(ea) = e.affinity.as_deref() else { continue };
            if hard > 0 {
                for t in &ea.required_affinity {
                    if matches(t, pod, &ns_labels) {
                        add(&mut map, node, &t.topology_key, hard);
                    }
                }
            }
            for t in &ea.preferred_affinity {
                if matches(&t.term, pod, &ns_labels) {
                    add(&mut map, node, &t.term.topology_key, i64::from(t.weight));
                }
            }
            for t in &ea.preferred_anti_affinity {
                if matches(&t.term, pod, &ns_labels) {
                    add(&mut map, node, &t.term.topology_key, -i64::from(t.weight));
                }
            }
        }
    }
    if !counted {
        return Err(Status::skip());
    }
    let keys: BTreeSet<&String> = map.keys().map(|(k, _)| k).collect();
    let scores: Vec<i64> = list
        .list()
        .iter()
        .map(|n| {
            let labels = node_labels(n);
            keys.iter()
                .filter_map(|k| labels.get(*k).map(|v| (*k, v)))
                .map(|(k, v)| map.get(&(k.clone(), v.clone())).copied().unwrap_or(0))
                .sum()
        })
        .collect();
    let (min, max) = (*scores.iter().min().unwrap(), *scores.iter().max().unwrap());
    Ok(scores
        .iter()
        .map(
            |&s| {
                if max > min { (100.0 * ((s - min) as f64 / (max - min) as f64)) as i64 } else { 0 }
            },
        )
        .collect())
}

/// PreFilter then Filter on every node (every node passes when PreFilter
/// skips: Filter does not run); `Err` with PreFilter's other statuses.
pub(super) fn ref_filter_result(
    objects: &ClusterObjects,
    pod: &PodInfo,
    list: &NodeList,
) -> Result<Vec<Status>, Status> {
    match ref_pre_filter(objects, pod, list) {
        Ok(s) => Ok(list.list().iter().map(|n| ref_filter(&s, n)).collect()),
        Err(s) if s.code() == Code::Skip => Ok(vec![Status::success(); list.list().len()]),
        Err(s) => Err(s),
    }
}
