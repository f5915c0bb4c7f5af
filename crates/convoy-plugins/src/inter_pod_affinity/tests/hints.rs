//! Queueing hints (upstream `plugin_test.go`) and registrations.

use std::sync::Arc;

use serde_json::json;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{ActionType, EventObject, EventResource, Plugin, QueueingHint};

use super::super::hints::{
    is_schedulable_after_assigned_pod_change, is_schedulable_after_node_change,
    is_schedulable_after_target_pod_update_label,
};
use super::*;

use QueueingHint::{Queue, Skip};

fn obj(b: PodBuilder) -> EventObject {
    EventObject::Pod(Arc::new(b.build()))
}

fn with_aff(b: PodBuilder, terms: Vec<serde_json::Value>) -> PodBuilder {
    affinity(b, required(terms, vec![]))
}

fn with_anti(b: PodBuilder, terms: Vec<serde_json::Value>) -> PodBuilder {
    affinity(b, required(vec![], terms))
}

/// Upstream `Test_isSchedulableAfterAssignedPodChange`.
#[test]
fn assigned_pod_change() {
    let scan = || vec![term_in("service", "region", &["securityscan", "value2"])];
    let target_aff = || with_aff(PodBuilder::new("p"), scan());
    let target_anti = || with_anti(PodBuilder::new("p"), scan());
    let two_anti = || {
        with_anti(
            PodBuilder::new("p"),
            vec![
                term_in("service", "region", &["securityscan"]),
                term_in("app", "region", &["web"]),
            ],
        )
    };
    let other = |labels: &[(&str, &str)]| pod("other", labels).node("fake-node");
    let unscheduled = |labels: &[(&str, &str)]| pod("other", labels);
    let nominated = |labels: &[(&str, &str)]| {
        let mut p = pod("other", labels).build();
        p.status = Some(serde_json::from_value(json!({"nominatedNodeName": "fake-node"})).unwrap());
        EventObject::Pod(Arc::new(p))
    };
    let scan_label = [("service", "securityscan")];
    type Case = (&'static str, PodBuilder, Option<EventObject>, Option<EventObject>, QueueingHint);
    let cases: Vec<Case> = vec![
        (
            "add a pod matching the affinity",
            target_aff(),
            None,
            Some(obj(other(&scan_label))),
            Queue,
        ),
        ("add an unscheduled pod", target_aff(), None, Some(obj(unscheduled(&scan_label))), Skip),
        (
            "add a pod not matching the affinity",
            target_aff(),
            None,
            Some(obj(other(&[("aaa", "a")]))),
            Skip,
        ),
        (
            "update a pod to match the affinity",
            target_aff(),
            Some(obj(other(&[("aaa", "a")]))),
            Some(obj(other(&scan_label))),
            Queue,
        ),
        (
            "update a pod matching the affinity before and after",
            target_aff(),
            Some(obj(other(&[("service", "value2")]))),
            Some(obj(other(&scan_label))),
            Skip,
        ),
        (
            "update an unscheduled pod",
            target_aff(),
            Some(obj(unscheduled(&[("aaa", "a")]))),
            Some(obj(unscheduled(&scan_label))),
            Skip,
        ),
        (
            "update a pod to stop matching the affinity",
            target_aff(),
            Some(obj(other(&scan_label))),
            Some(obj(other(&[("aaa", "a")]))),
            Skip,
        ),
        (
            "update a pod to match all of several terms",
            with_aff(
                PodBuilder::new("p"),
                vec![term_exists("aaa", "hostname"), term_exists("bbb", "hostname")],
            ),
            Some(obj(other(&[("aaa", "a")]))),
            Some(obj(other(&[("aaa", ""), ("bbb", "")]))),
            Queue,
        ),
        (
            "update a pod to stop matching the anti-affinity",
            target_anti(),
            Some(obj(other(&scan_label))),
            Some(obj(other(&[("service", "aaaa")]))),
            Queue,
        ),
        (
            "update a pod to match the anti-affinity",
            target_anti(),
            Some(obj(other(&[("service", "bbb")]))),
            Some(obj(other(&scan_label))),
            Skip,
        ),
        (
            "delete a pod not matching the anti-affinity",
            target_anti(),
            Some(obj(other(&[("aaa", "a")]))),
            None,
            Skip,
        ),
        (
            "delete a pod matching the anti-affinity",
            target_anti(),
            Some(obj(other(&scan_label))),
            None,
            Queue,
        ),
        (
            "delete a pod whose anti-affinity matches the pod",
            pod("p", &scan_label),
            Some(obj(with_anti(PodBuilder::new("e").node("fake-node"), scan()))),
            None,
            Queue,
        ),
        (
            "delete a pod whose anti-affinity does not match the pod",
            pod("p", &[("service", "foo")]),
            Some(obj(with_anti(PodBuilder::new("e").node("fake-node"), scan()))),
            None,
            Skip,
        ),
        (
            "delete a nominated pod not matching the anti-affinity",
            target_anti(),
            Some(nominated(&[("aaa", "a")])),
            None,
            Skip,
        ),
        (
            "delete a nominated pod matching the anti-affinity",
            target_anti(),
            Some(nominated(&scan_label)),
            None,
            Queue,
        ),
        (
            "update a pod from matching one anti-affinity term to none",
            two_anti(),
            Some(obj(other(&[("service", "securityscan"), ("app", "bar")]))),
            Some(obj(other(&[("service", "foo"), ("app", "bar")]))),
            Queue,
        ),
        (
            "update a pod still matching one anti-affinity term",
            two_anti(),
            Some(obj(other(&[("service", "securityscan"), ("app", "bar")]))),
            Some(obj(other(&[("service", "foo"), ("app", "web")]))),
            Skip,
        ),
        (
            "delete a pod matching one anti-affinity term",
            two_anti(),
            Some(obj(other(&scan_label))),
            None,
            Queue,
        ),
        (
            "delete a pod whose anti-affinity matches the pod on one term",
            pod("p", &scan_label),
            Some(obj(with_anti(
                PodBuilder::new("e").node("fake-node"),
                vec![
                    term_in("service", "region", &["securityscan"]),
                    term_in("app", "region", &["web"]),
                ],
            ))),
            None,
            Queue,
        ),
    ];
    for (name, target, old, new, want) in cases {
        let got =
            is_schedulable_after_assigned_pod_change(&info(&target), old.as_ref(), new.as_ref());
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn target_pod_label_update_always_queues() {
    let p = pod("p", &[("foo", "baz")]);
    let o = obj(p.clone());
    assert_eq!(is_schedulable_after_target_pod_update_label(&info(&p), Some(&o), Some(&o)), Queue);
}

/// Upstream `Test_isSchedulableAfterNodeChange`.
#[test]
fn node_change() {
    let n = |labels: &[(&str, &str)]| {
        let b: NodeBuilder = node("node-a", labels);
        EventObject::Node(Arc::new(b.build()))
    };
    let aff = |key: &str| {
        with_aff(PodBuilder::new("p"), vec![term_in("service", key, &["securityscan", "value2"])])
    };
    let anti = || {
        with_anti(
            PodBuilder::new("p"),
            vec![
                json!({"labelSelector": {"matchLabels": {"another": "label"}}, "topologyKey": "zone"}),
            ],
        )
    };
    let zone1 = [("zone", "zone1")];
    type Case = (&'static str, PodBuilder, Option<EventObject>, EventObject, QueueingHint);
    let cases: Vec<Case> = vec![
        ("add a node with the affinity key", aff("zone"), None, n(&zone1), Queue),
        ("add a node without the affinity key", aff("region"), None, n(&zone1), Skip),
        ("update another label", aff("zone"), Some(n(&[("aaa", "a")])), n(&[("aaa", "b")]), Skip),
        (
            "add an unrelated label",
            aff("zone"),
            Some(n(&zone1)),
            n(&[("zone", "zone1"), ("unrelated-label", "unrelated")]),
            Skip,
        ),
        (
            "change the affinity key's value",
            aff("zone"),
            Some(n(&zone1)),
            n(&[("zone", "zone2")]),
            Queue,
        ),
        ("gain the affinity key", aff("zone"), Some(n(&[("aaa", "a")])), n(&zone1), Queue),
        ("add a node with the anti-affinity key", anti(), None, n(&zone1), Queue),
        ("add a node without the anti-affinity key", anti(), None, n(&[]), Queue),
        (
            "add an unrelated label (anti-affinity)",
            anti(),
            Some(n(&zone1)),
            n(&[("zone", "zone1"), ("unrelated-label", "unrelated")]),
            Skip,
        ),
        (
            "change the anti-affinity key's value",
            anti(),
            Some(n(&zone1)),
            n(&[("zone", "zone2")]),
            Queue,
        ),
        ("gain the anti-affinity key", anti(), Some(n(&[("aaa", "a")])), n(&zone1), Skip),
        ("lose the anti-affinity key", anti(), Some(n(&zone1)), n(&[("aaa", "a")]), Queue),
    ];
    for (name, target, old, new, want) in cases {
        let got = is_schedulable_after_node_change(&info(&target), old.as_ref(), Some(&new));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn unparsable_required_terms_queue() {
    let bad = with_aff(PodBuilder::new("p"), vec![term_in("service", "zone", &["{{bad}}"])]);
    let added = obj(pod("other", &[]).node("n"));
    assert_eq!(is_schedulable_after_assigned_pod_change(&info(&bad), None, Some(&added)), Queue);
    let node_obj = EventObject::Node(Arc::new(node("n", &[]).build()));
    assert_eq!(is_schedulable_after_node_change(&info(&bad), None, Some(&node_obj)), Queue);
    // Only a preferred list failing: the required terms decide.
    let pref_bad = affinity(
        pod("p", &[]),
        preferred(vec![weighted(1, term_in("service", "zone", &["{{bad}}"]))], vec![]),
    );
    assert_eq!(
        is_schedulable_after_assigned_pod_change(&info(&pref_bad), None, Some(&added)),
        Skip
    );
}

#[test]
fn registers_upstream_events() {
    let events: Vec<_> = plugin().events_to_register().into_iter().map(|e| e.event).collect();
    let want = [
        (
            EventResource::AssignedPod,
            ActionType::ADD | ActionType::UPDATE_POD_LABEL | ActionType::DELETE,
        ),
        (EventResource::UnscheduledPod, ActionType::UPDATE_POD_LABEL),
        (EventResource::Node, ActionType::ADD | ActionType::UPDATE_NODE_LABEL),
    ];
    assert_eq!(events.len(), want.len());
    for (e, (r, a)) in events.iter().zip(want) {
        assert_eq!((e.resource, e.action), (r, a));
    }
}
