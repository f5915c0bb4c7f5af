//! Queueing hints of PodTopologySpread (upstream `podtopologyspread/plugin.go`,
//! v1.37.2): which cluster events may make a pod it rejected schedulable.
//! They look at the pod's `DoNotSchedule` constraints (own or default); an
//! event they cannot read, or constraints that cannot be parsed, queue.

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};

use convoy_api::labels::{Labels, no_labels};
use convoy_api::{EventObject, PodInfo, QueueingHint};

use super::common::{Constraint, has_all_keys, labels_match_any};
use super::{DO_NOT_SCHEDULE, Inner};
use crate::helper::{event_node, event_pod, pod_was_on_a_node};

fn pod_labels(pod: &Pod) -> &Labels {
    pod.metadata.labels.as_ref().unwrap_or(no_labels())
}

fn node_labels(node: &Node) -> &Labels {
    node.metadata.labels.as_ref().unwrap_or(no_labels())
}

fn tolerations(pod: &Pod) -> &[Toleration] {
    pod.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[])
}

fn taints(node: &Node) -> &[Taint] {
    node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or(&[])
}

/// Upstream `involvedInTopologySpreading`: the event's pod is on (or
/// nominated to) a node, in the rejected pod's namespace.
fn involved(event_pod: &Pod, pod: &PodInfo) -> bool {
    pod_was_on_a_node(event_pod)
        && event_pod.metadata.namespace.as_deref().unwrap_or("default") == pod.namespace()
}

/// An assigned pod was added, deleted, or relabelled: Queue when it is in
/// the pod's namespace and its labels match (or, relabelled, start or stop
/// matching) a constraint's selector.
pub(super) fn after_assigned_pod_change(
    inner: &Inner,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (original, modified) = (event_pod(old), event_pod(new));
    if original.is_none() && modified.is_none() {
        return QueueingHint::Queue;
    }
    if modified.is_some_and(|p| !involved(p, pod)) || original.is_some_and(|p| !involved(p, pod)) {
        return QueueingHint::Skip;
    }
    let Ok(constraints) = inner.constraints(pod, DO_NOT_SCHEDULE) else {
        return QueueingHint::Queue;
    };
    match (original, modified) {
        (Some(o), Some(m)) => after_pod_label_change(o, m, &constraints),
        (_, Some(p)) | (Some(p), None) => {
            if labels_match_any(&constraints, pod_labels(p)) {
                QueueingHint::Queue
            } else {
                QueueingHint::Skip
            }
        }
        (None, None) => QueueingHint::Queue,
    }
}

/// The rejected pod itself changed: Queue on new tolerations when a
/// constraint honors taints, or on a label change that flips a selector.
pub(super) fn after_target_pod_change(
    inner: &Inner,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (Some(original), Some(modified)) = (event_pod(old), event_pod(new)) else {
        return QueueingHint::Queue;
    };
    let Ok(constraints) = inner.constraints(pod, DO_NOT_SCHEDULE) else {
        return QueueingHint::Queue;
    };
    if tolerations(original) != tolerations(modified)
        && constraints.iter().any(|c| c.honor_node_taints)
    {
        return QueueingHint::Queue;
    }
    after_pod_label_change(original, modified, &constraints)
}

/// Upstream `isSchedulableAfterPodLabelChange`.
fn after_pod_label_change(
    original: &Pod,
    modified: &Pod,
    constraints: &[Constraint],
) -> QueueingHint {
    let (o, m) = (pod_labels(original), pod_labels(modified));
    if o == m {
        return QueueingHint::Skip;
    }
    if constraints.iter().any(|c| c.selector.matches(o) != c.selector.matches(m)) {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

/// A node was added, deleted, relabelled or retainted: Queue when it has
/// (or had) every topology key and that changed, a key's value changed, or
/// its taints changed.
pub(super) fn after_node_change(
    inner: &Inner,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (original, modified) = (event_node(old), event_node(new));
    if original.is_none() && modified.is_none() {
        return QueueingHint::Queue;
    }
    let Ok(constraints) = inner.constraints(pod, DO_NOT_SCHEDULE) else {
        return QueueingHint::Queue;
    };
    let matching = |n: Option<&Node>| n.is_some_and(|n| has_all_keys(node_labels(n), &constraints));
    let (was, is) = (matching(original), matching(modified));
    let queue_if = |b: bool| if b { QueueingHint::Queue } else { QueueingHint::Skip };
    match (original, modified) {
        (Some(o), Some(m)) => {
            if was != is {
                return QueueingHint::Queue;
            }
            let (ol, ml) = (node_labels(o), node_labels(m));
            let key_changed =
                constraints.iter().any(|c| ol.get(&*c.topology_key) != ml.get(&*c.topology_key));
            queue_if(is && (key_changed || taints(o) != taints(m)))
        }
        (None, Some(_)) => queue_if(is),
        (Some(_), None) => queue_if(was),
        (None, None) => QueueingHint::Queue,
    }
}
