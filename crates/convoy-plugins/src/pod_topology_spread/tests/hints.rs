//! Queueing hints, from upstream's `plugin_test.go`
//! (Test_isSchedulableAfterNodeChange, ...AssignedPodChange, ...TargetPodChange),
//! run through the registered events as the queue would.

use k8s_openapi::api::core::v1::{Pod, PodStatus, TopologySpreadConstraint};

use convoy_api::testing::PodBuilder;
use convoy_api::{EventObject, EventResource, Plugin, QueueingHint};

use super::super::DO_NOT_SCHEDULE as DNS;
use super::*;
use crate::helper::testing::{node_obj, pod_obj};

use QueueingHint::{Queue as Q, Skip as S};

/// The hint of the registration for `resource`, on these objects.
fn hint(
    pl: &PodTopologySpread,
    resource: EventResource,
    pod: &PodBuilder,
    old: Option<EventObject>,
    new: Option<EventObject>,
) -> QueueingHint {
    let reg = pl.events_to_register().into_iter().find(|e| e.event.resource == resource).unwrap();
    (reg.hint.unwrap())(&pod.clone().info(), old.as_ref(), new.as_ref())
}

fn zone_pod() -> PodBuilder {
    pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, foo()))
}

fn zone_node_pod() -> PodBuilder {
    zone_pod().constraint(tsc(1, "node", DNS, foo()))
}

fn n(labels: &[(&str, &str)]) -> NodeBuilder {
    node("node-a", labels)
}

fn some(b: NodeBuilder) -> Option<EventObject> {
    Some(node_obj(b.build()))
}

#[test]
fn after_node_change() {
    let taint = |b: NodeBuilder, key: &str| b.taint(key, "bbb", "NoSchedule");
    let both = &[("zone", "zone1"), ("node", "node1")];
    type Case = (&'static str, PodBuilder, Option<NodeBuilder>, Option<NodeBuilder>, QueueingHint);
    let cases: Vec<Case> = vec![
        (
            "node updates label which matches topologyKey",
            zone_pod(),
            Some(n(&[("zone", "zone1")])),
            Some(n(&[("zone", "zone2")])),
            Q,
        ),
        (
            "node that doesn't match topologySpreadConstraints updates non-related label",
            zone_pod(),
            Some(n(&[("foo", "bar1")])),
            Some(n(&[("foo", "bar2")])),
            S,
        ),
        (
            "node that match topologySpreadConstraints adds non-related label",
            zone_node_pod(),
            Some(n(&[("zone", "zone1"), ("node", "node1"), ("foo", "bar")])),
            Some(n(both)),
            S,
        ),
        ("create node with non-related labels", zone_pod(), None, Some(n(&[("foo", "bar")])), S),
        ("create node with related labels", zone_pod(), None, Some(n(&[("zone", "zone1")])), Q),
        ("delete node with non-related labels", zone_pod(), Some(n(&[("foo", "bar")])), None, S),
        ("delete node with related labels", zone_pod(), Some(n(&[("zone", "zone1")])), None, Q),
        (
            "add node with related labels that only match one of topologySpreadConstraints",
            zone_node_pod(),
            None,
            Some(n(&[("zone", "zone1")])),
            S,
        ),
        (
            "add node with related labels that match all topologySpreadConstraints",
            zone_node_pod(),
            None,
            Some(n(both)),
            Q,
        ),
        (
            "update node with related labels that only match one of topologySpreadConstraints",
            zone_node_pod(),
            Some(n(&[("zone", "zone1")])),
            Some(n(&[("zone", "zone1")])),
            S,
        ),
        (
            "update node with related labels that match all topologySpreadConstraints",
            zone_node_pod(),
            Some(n(both)),
            Some(n(&[("zone", "zone1"), ("node", "node2")])),
            Q,
        ),
        (
            "update node with different taints that match all topologySpreadConstraints",
            zone_node_pod(),
            Some(taint(n(both), "aaa")),
            Some(taint(n(both), "ccc")),
            Q,
        ),
        (
            "update node with different taints that only match one of topologySpreadConstraints",
            zone_node_pod(),
            Some(taint(n(&[("node", "node1")]), "aaa")),
            Some(taint(n(&[("node", "node1")]), "ccc")),
            S,
        ),
    ];
    let pl = plugin_with(vec![], &[]);
    for (name, p, old, new, want) in cases {
        let got = hint(&pl, EventResource::Node, &p, old.and_then(some), new.and_then(some));
        assert_eq!(got, want, "{name}");
    }
}

/// `st.MakePod().UID("p2")` with labels, on a node or nominated to one.
fn p2(node: Option<&str>, nominated: Option<&str>, labels: &[(&str, &str)]) -> Pod {
    let b = labels.iter().fold(PodBuilder::new("p2"), |b, (k, v)| b.label(k, v));
    let mut p = match node {
        Some(n) => b.node(n).build(),
        None => b.build(),
    };
    if let Some(n) = nominated {
        p.status =
            Some(PodStatus { nominated_node_name: Some(n.to_string()), ..Default::default() });
    }
    p
}

#[test]
fn after_assigned_pod_change() {
    let on_node = |labels: &[(&str, &str)]| Some(p2(Some("fake-node"), None, labels));
    let unscheduled = |labels: &[(&str, &str)]| Some(p2(None, None, labels));
    let nominated = |labels: &[(&str, &str)]| Some(p2(None, Some("fake-node"), labels));
    let zone_and_bar = || zone_pod().constraint(tsc(1, "node", DNS, bar()));
    let other_ns = PodBuilder::new("p2")
        .node("fake-node")
        .namespace("fake-namespace")
        .label("foo", "")
        .build();
    type Case = (&'static str, PodBuilder, Option<Pod>, Option<Pod>, QueueingHint);
    let cases: Vec<Case> = vec![
        (
            "add pod with labels match topologySpreadConstraints selector",
            zone_pod(),
            None,
            on_node(&[("foo", "")]),
            Q,
        ),
        ("add un-scheduled pod", zone_pod(), None, unscheduled(&[("foo", "")]), S),
        (
            "update un-scheduled pod",
            zone_pod(),
            unscheduled(&[("bar", "")]),
            unscheduled(&[("foo", "")]),
            S,
        ),
        ("delete un-scheduled pod", zone_pod(), unscheduled(&[("foo", "")]), None, S),
        ("add pod with different namespace", zone_pod(), None, Some(other_ns), S),
        (
            "add pod with labels don't match topologySpreadConstraints selector",
            zone_pod(),
            None,
            on_node(&[("bar", "")]),
            S,
        ),
        (
            "delete pod with labels that match topologySpreadConstraints selector",
            zone_pod(),
            on_node(&[("foo", "")]),
            None,
            Q,
        ),
        (
            "delete nominated pod with labels that don't match topologySpreadConstraints selector",
            zone_pod(),
            nominated(&[("bar", "")]),
            None,
            S,
        ),
        (
            "delete nominated pod with labels that match topologySpreadConstraints selector",
            zone_pod(),
            nominated(&[("foo", "")]),
            None,
            Q,
        ),
        (
            "delete pod with labels that don't match topologySpreadConstraints selector",
            zone_pod(),
            on_node(&[("bar", "")]),
            None,
            S,
        ),
        (
            "update pod's non-related label",
            zone_pod(),
            on_node(&[("foo", ""), ("bar", "bar1")]),
            on_node(&[("foo", ""), ("bar", "bar2")]),
            S,
        ),
        (
            "add pod's label that matches topologySpreadConstraints selector",
            zone_pod(),
            on_node(&[]),
            on_node(&[("foo", "")]),
            Q,
        ),
        (
            "delete pod label that matches topologySpreadConstraints selector",
            zone_pod(),
            on_node(&[("foo", "")]),
            on_node(&[]),
            Q,
        ),
        (
            "change pod's label that matches topologySpreadConstraints selector",
            zone_pod(),
            on_node(&[("foo", "foo1")]),
            on_node(&[("foo", "foo2")]),
            S,
        ),
        (
            "add pod's label that matches topologySpreadConstraints selector with multi topologySpreadConstraints",
            zone_and_bar(),
            on_node(&[("foo", "")]),
            on_node(&[("foo", ""), ("bar", "bar2")]),
            Q,
        ),
        (
            "change pod's label that doesn't match topologySpreadConstraints selector with multi topologySpreadConstraints",
            zone_and_bar(),
            on_node(&[("foo", "")]),
            on_node(&[("foo", ""), ("baz", "")]),
            S,
        ),
        (
            "change pod's label that match topologySpreadConstraints selector with multi topologySpreadConstraints",
            zone_and_bar(),
            on_node(&[("foo", ""), ("bar", "")]),
            on_node(&[("foo", ""), ("bar", "bar2")]),
            S,
        ),
    ];
    let pl = plugin_with(vec![], &[]);
    for (name, p, old, new, want) in cases {
        let got = hint(&pl, EventResource::AssignedPod, &p, old.map(pod_obj), new.map(pod_obj));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn after_target_pod_change() {
    let target = |zone_taints: &str| {
        pod(&[("foo", "")])
            .constraint(TopologySpreadConstraint {
                node_taints_policy: Some(zone_taints.to_string()),
                ..tsc(1, "zone", DNS, foo())
            })
            .constraint(tsc(1, "node", DNS, bar()))
    };
    let plain = |labels: &[(&str, &str)]| pod(labels);
    let tolerant =
        pod(&[("foo", "")]).toleration("node.kubernetes.io/unschedulable", None, "NoSchedule");
    let cases: Vec<(&str, PodBuilder, PodBuilder, PodBuilder, QueueingHint)> = vec![
        (
            "the unschedulable Pod has topologySpreadConstraint with NodeTaintsPolicy:Honor and has got a new toleration",
            target("Honor"),
            plain(&[("foo", "")]),
            tolerant.clone(),
            Q,
        ),
        (
            "the unschedulable Pod has topologySpreadConstraint without NodeTaintsPolicy:Honor and has got a new toleration",
            target("Ignore"),
            plain(&[("foo", "")]),
            tolerant.clone(),
            S,
        ),
        (
            "the unschedulable Pod has topologySpreadConstraint and has got a new label matching the selector of the constraint",
            target("Ignore"),
            plain(&[]),
            plain(&[("foo", "")]),
            Q,
        ),
        (
            "the unschedulable Pod has topologySpreadConstraint and has got a new unrelated label",
            target("Ignore"),
            plain(&[]),
            plain(&[("unrelated", "")]),
            S,
        ),
    ];
    let pl = plugin_with(vec![], &[]);
    for (name, p, old, new, want) in cases {
        let got = hint(
            &pl,
            EventResource::UnscheduledPod,
            &p,
            Some(pod_obj(old.build())),
            Some(pod_obj(new.build())),
        );
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn registered_events() {
    use convoy_api::ActionType as A;
    let events: Vec<_> = plugin().events_to_register().into_iter().map(|e| e.event).collect();
    let want = [
        (EventResource::AssignedPod, A::ADD | A::UPDATE_POD_LABEL | A::DELETE),
        (EventResource::UnscheduledPod, A::UPDATE_POD_TOLERATION | A::UPDATE_POD_LABEL),
        (EventResource::Node, A::ADD | A::DELETE | A::UPDATE_NODE_LABEL | A::UPDATE_NODE_TAINT),
    ];
    assert_eq!(events.len(), want.len());
    for (e, (r, a)) in events.iter().zip(want) {
        assert_eq!((e.resource, e.action), (r, a));
    }
    // A pod with default constraints only: node hints look at the default keys.
    let pl = plugin_with(vec![tsc(1, "rack", DNS, None)], &[service("s", &[("app", "x")])]);
    let p = pod(&[("app", "x")]);
    let with_rack = Some(node_obj(node("n", &[("rack", "r1")]).build()));
    assert_eq!(hint(&pl, EventResource::Node, &p, None, with_rack), Q);
    let without = Some(node_obj(node("n", &[]).build()));
    assert_eq!(hint(&pl, EventResource::Node, &p, None, without), S);
}
