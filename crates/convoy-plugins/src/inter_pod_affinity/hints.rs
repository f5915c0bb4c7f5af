//! Queueing hints (upstream `interpodaffinity/plugin.go`, v1.37.2): which
//! pod and node events may make a pod this plugin rejected schedulable.
//!
//! As upstream, the target pod's terms are matched as written (its
//! `namespaceSelector` against empty namespace labels), not resolved
//! through the Namespace store.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{Node, Pod};

use convoy_api::labels::{Labels, no_labels};
use convoy_api::{AffinityTerm, EventObject, PodInfo, QueueingHint};

use crate::helper::{event_node, event_pod, pod_was_on_a_node};

/// Upstream `fwk.GetAffinityTerms` of one list of required terms.
fn parse_terms(pod: &Pod, anti: bool) -> Result<Vec<AffinityTerm>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
    } else {
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
    };
    terms.into_iter().flatten().map(|t| AffinityTerm::new(namespace, t)).collect()
}

/// A list of terms, borrowed from a parsed pod or parsed here.
type Terms<'a> = Cow<'a, [AffinityTerm]>;

/// The target pod's required affinity and anti-affinity terms (borrowed
/// from its parsed terms); `None` when they cannot be parsed (upstream
/// returns Queue with the error).
fn target_terms(pod: &PodInfo) -> Option<(Terms<'_>, Terms<'_>)> {
    match pod.affinity.as_deref() {
        None => Some((Cow::Borrowed(&[]), Cow::Borrowed(&[]))),
        Some(a) if a.parse_error.is_none() => {
            Some((Cow::Borrowed(&a.required_affinity), Cow::Borrowed(&a.required_anti_affinity)))
        }
        // Some list failed: parse the required ones again to tell whether
        // it was one of them.
        Some(_) => Some((
            Cow::Owned(parse_terms(&pod.pod, false).ok()?),
            Cow::Owned(parse_terms(&pod.pod, true).ok()?),
        )),
    }
}

fn labels_of(pod: &Pod) -> &Labels {
    pod.metadata.labels.as_ref().unwrap_or(no_labels())
}

fn matches(t: &AffinityTerm, pod: &Pod) -> bool {
    t.matches(pod.metadata.namespace.as_deref().unwrap_or("default"), labels_of(pod), no_labels())
}

/// Upstream `podMatchesAllAffinityTerms`: false for no terms.
fn matches_all(terms: &[AffinityTerm], pod: &Pod) -> bool {
    !terms.is_empty() && terms.iter().all(|t| matches(t, pod))
}

/// Upstream `podMatchesAnyAffinityTerms`.
fn matches_any(terms: &[AffinityTerm], pod: &Pod) -> bool {
    terms.iter().any(|t| matches(t, pod))
}

/// Upstream `isSchedulableAfterAssignedPodChange`: an assigned pod added
/// matching all the pod's affinity terms, updated to match them all or to
/// stop matching its anti-affinity, or deleted while it matched the pod's
/// anti-affinity or its own anti-affinity matched the pod.
pub(super) fn is_schedulable_after_assigned_pod_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let (original, modified) = (event_pod(old), event_pod(new));
    if original.is_none() && modified.is_none() {
        return QueueingHint::Queue;
    }
    // Node name or nomination changes come as Add/Delete events.
    if modified.is_some_and(|p| !pod_was_on_a_node(p))
        || original.is_some_and(|p| !pod_was_on_a_node(p))
    {
        return QueueingHint::Skip;
    }
    let Some((terms, anti_terms)) = target_terms(pod) else { return QueueingHint::Queue };
    let queue_if = |b: bool| if b { QueueingHint::Queue } else { QueueingHint::Skip };
    match (original, modified) {
        (Some(o), Some(m)) => queue_if(
            (!matches_all(&terms, o) && matches_all(&terms, m))
                || (matches_any(&anti_terms, o) && !matches_any(&anti_terms, m)),
        ),
        (None, Some(m)) => queue_if(matches_all(&terms, m)),
        (Some(o), _) => {
            if matches_any(&anti_terms, o) {
                return QueueingHint::Queue;
            }
            match parse_terms(o, true) {
                Ok(original_anti) => queue_if(matches_any(&original_anti, &pod.pod)),
                Err(_) => QueueingHint::Queue,
            }
        }
        (None, None) => QueueingHint::Queue,
    }
}

/// Upstream `isSchedulableAfterTargetPodUpdateLabel`: the pod's own labels
/// changed (another pod's anti-affinity may no longer select it).
pub(super) fn is_schedulable_after_target_pod_update_label(
    _pod: &PodInfo,
    _old: Option<&EventObject>,
    _new: Option<&EventObject>,
) -> QueueingHint {
    QueueingHint::Queue
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// Upstream `isSchedulableAfterNodeChange`: a node added with an affinity
/// term's topology key, or updated to get one or to change its value; any
/// node added when the pod has anti-affinity, or a node updated to lose an
/// anti-affinity term's key or to change its value.
pub(super) fn is_schedulable_after_node_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(modified) = event_node(new) else { return QueueingHint::Queue };
    let original = event_node(old);
    let Some((terms, anti_terms)) = target_terms(pod) else { return QueueingHint::Queue };
    for t in terms.iter() {
        let now = label(modified, &t.topology_key);
        let Some(original) = original else {
            if now.is_some() {
                return QueueingHint::Queue;
            }
            continue;
        };
        match (label(original, &t.topology_key), now) {
            (None, Some(_)) => return QueueingHint::Queue,
            (Some(a), Some(b)) if a != b => return QueueingHint::Queue,
            _ => {}
        }
    }
    for t in anti_terms.iter() {
        let Some(original) = original else { return QueueingHint::Queue };
        match (label(original, &t.topology_key), label(modified, &t.topology_key)) {
            (Some(_), None) => return QueueingHint::Queue,
            (Some(a), Some(b)) if a != b => return QueueingHint::Queue,
            _ => {}
        }
    }
    QueueingHint::Skip
}
