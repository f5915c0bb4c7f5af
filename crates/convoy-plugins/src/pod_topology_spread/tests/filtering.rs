//! Filter verdicts, from upstream's `filtering_test.go` (TestSingleConstraint,
//! TestMultipleConstraints).

use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};

use convoy_api::testing::PodBuilder;
use convoy_api::{Code, CycleState, FilterPlugin, NodeInfoLister};

use super::super::DO_NOT_SCHEDULE as DNS;
use super::pre_filter::pre_filter;
use super::*;

/// Runs PreFilter then Filter on every node; the codes by node.
fn filter_codes(
    pl: &PodTopologySpread,
    p: PodBuilder,
    nodes: Vec<NodeBuilder>,
    pods: &[Pod],
) -> Vec<(String, Code)> {
    let pod = p.info();
    let list = cluster(nodes, pods);
    let (state, s) = pre_filter(pl, &pod, &list);
    list.list()
        .iter()
        .map(|n| {
            let code = if s.is_skip() { Code::Success } else { pl.filter(&state, &pod, n).code() };
            (n.name().to_string(), code)
        })
        .collect()
}

use Code::{Success as S, Unschedulable as U, UnschedulableAndUnresolvable as UU};

fn codes(want: &[(&str, Code)]) -> Vec<(String, Code)> {
    want.iter().map(|(n, c)| (n.to_string(), *c)).collect()
}

#[test]
fn single_constraint() {
    let foo_on = |names: &[(&str, &str)]| -> Vec<Pod> {
        names.iter().map(|(name, n)| on(name, n, &[("foo", "")])).collect()
    };
    let spread_2103 = foo_on(&[
        ("p-a1", "node-a"),
        ("p-a2", "node-a"),
        ("p-b1", "node-b"),
        ("p-y1", "node-y"),
        ("p-y2", "node-y"),
        ("p-y3", "node-y"),
    ]);
    let zone = |skew| pod(&[("foo", "")]).constraint(tsc(skew, "zone", DNS, foo()));
    let by_node = |skew| pod(&[("foo", "")]).constraint(tsc(skew, "node", DNS, foo()));
    let min_domains = |skew, key: &str, n| {
        pod(&[("foo", "")]).constraint(TopologySpreadConstraint {
            min_domains: Some(n),
            ..tsc(skew, key, DNS, foo())
        })
    };
    let three_nodes = || {
        ["node-a", "node-b", "node-c"].iter().map(|n| node(n, &[("node", n)])).collect::<Vec<_>>()
    };
    let spread_221 = foo_on(&[
        ("p-a1", "node-a"),
        ("p-a2", "node-a"),
        ("p-b1", "node-b"),
        ("p-b2", "node-b"),
        ("p-c1", "node-c"),
    ]);
    let zones_21 = foo_on(&[("p-b1", "node-a"), ("p-b2", "node-b"), ("p-y1", "node-y")]);
    type Case =
        (&'static str, PodBuilder, Vec<NodeBuilder>, Vec<Pod>, &'static [(&'static str, Code)]);
    let all_fit: &[(&str, Code)] = &[("node-a", S), ("node-b", S), ("node-x", S), ("node-y", S)];
    let cases: Vec<Case> = vec![
        ("no existing pods", zone(1), four_nodes(), vec![], all_fit),
        (
            "no existing pods, incoming pod doesn't match itself",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, bar())),
            four_nodes(),
            vec![],
            all_fit,
        ),
        (
            "existing pods in a different namespace do not count",
            zone(1),
            four_nodes(),
            vec![
                PodBuilder::new("p-a1").namespace("ns1").node("node-a").label("foo", "").build(),
                PodBuilder::new("p-b1").namespace("ns2").node("node-a").label("foo", "").build(),
                on("p-x1", "node-x", &[("foo", "")]),
                on("p-y1", "node-y", &[("foo", "")]),
            ],
            &[("node-a", S), ("node-b", S), ("node-x", U), ("node-y", U)],
        ),
        (
            "existing pods do not match null selector",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, None)),
            four_nodes(),
            foo_on(&[("p-x1", "node-x"), ("p-y1", "node-y")]),
            all_fit,
        ),
        (
            "empty selector: existing pods never count, the pod matches itself",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, Some(Default::default()))),
            four_nodes(),
            foo_on(&[("p-x1", "node-x"), ("p-x2", "node-x"), ("p-y1", "node-y")]),
            all_fit,
        ),
        (
            "pods spread across zones as 3/3, all nodes fit",
            zone(1),
            four_nodes(),
            foo_on(&[
                ("p-a1", "node-a"),
                ("p-a2", "node-a"),
                ("p-b1", "node-b"),
                ("p-y1", "node-y"),
                ("p-y2", "node-y"),
                ("p-y3", "node-y"),
            ]),
            all_fit,
        ),
        (
            "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
            zone(1),
            vec![
                zn("node-a", "zone1"),
                node("node-b", &[("zon", "zone1"), ("node", "node-b")]),
                zn("node-x", "zone2"),
                zn("node-y", "zone2"),
            ],
            foo_on(&[
                ("p-a1", "node-a"),
                ("p-b1", "node-b"),
                ("p-x1", "node-x"),
                ("p-y1", "node-y"),
            ]),
            &[("node-a", S), ("node-b", UU), ("node-x", U), ("node-y", U)],
        ),
        (
            "pod cannot be scheduled as all nodes don't have label 'rack'",
            pod(&[("foo", "")]).constraint(tsc(1, "rack", DNS, foo())),
            vec![zn("node-a", "zone1"), zn("node-x", "zone2")],
            vec![],
            &[("node-a", UU), ("node-x", UU)],
        ),
        (
            "pods spread across nodes as 2/1/0/3, only node-x fits",
            by_node(1),
            four_nodes(),
            spread_2103.clone(),
            &[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", U)],
        ),
        (
            "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
            by_node(2),
            four_nodes(),
            spread_2103.clone(),
            &[("node-a", U), ("node-b", S), ("node-x", S), ("node-y", U)],
        ),
        (
            "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
            pod(&[("bar", "")]).constraint(tsc(1, "node", DNS, foo())),
            four_nodes(),
            spread_2103.clone(),
            &[("node-a", U), ("node-b", S), ("node-x", S), ("node-y", U)],
        ),
        (
            "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
            by_node(1).node_affinity("node", "In", &["node-a", "node-y"]),
            four_nodes(),
            spread_2103.clone(),
            &[("node-a", S), ("node-b", S), ("node-x", S), ("node-y", U)],
        ),
        (
            "terminating Pods should be excluded",
            by_node(1),
            vec![node("node-a", &[("node", "node-a")]), node("node-b", &[("node", "node-b")])],
            vec![
                terminating(on("p-a", "node-a", &[("foo", "")])),
                on("p-b", "node-b", &[("foo", "")]),
            ],
            &[("node-a", S), ("node-b", U)],
        ),
        (
            "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
            zone(1).node_affinity("node", "NotIn", &["node-b"]),
            four_nodes(),
            foo_on(&[("p-b1", "node-b"), ("p-b2", "node-b"), ("p-y1", "node-y")]),
            &[("node-a", S), ("node-b", S), ("node-x", U), ("node-y", U)],
        ),
        (
            "nodes as 2/2/1, maxSkew 2, domains < minDomains: only the third node fits",
            min_domains(2, "node", 4),
            three_nodes(),
            spread_221.clone(),
            &[("node-a", U), ("node-b", U), ("node-c", S)],
        ),
        (
            "nodes as 2/2/1, maxSkew 2, domains > minDomains: all nodes fit",
            min_domains(2, "node", 2),
            three_nodes(),
            spread_221.clone(),
            &[("node-a", S), ("node-b", S), ("node-c", S)],
        ),
        (
            "zones as 2/1, maxSkew 2, domains < minDomains: zone2's nodes fit",
            min_domains(2, "zone", 3),
            four_nodes(),
            zones_21.clone(),
            &[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", S)],
        ),
        (
            "zones as 2/1, maxSkew 2, domains > minDomains: all nodes fit",
            min_domains(2, "zone", 1),
            four_nodes(),
            zones_21.clone(),
            all_fit,
        ),
    ];
    let pl = plugin();
    for (name, p, nodes, pods, want) in cases {
        assert_eq!(filter_codes(&pl, p, nodes, &pods), codes(want), "{name}");
    }
}

#[test]
fn node_inclusion_policies() {
    let nodes = || {
        vec![
            node("node-a", &[("node", "node-a"), ("foo", "")]),
            node("node-b", &[("node", "node-b"), ("foo", "")]),
            node("node-c", &[("node", "node-c")]).taint("foo", "", "NoSchedule"),
        ]
    };
    let pods = vec![on("p-a", "node-a", &[("foo", "")]), on("p-b", "node-b", &[("foo", "")])];
    let policy = |affinity: &str, taints: &str| TopologySpreadConstraint {
        node_affinity_policy: Some(affinity.to_string()),
        node_taints_policy: Some(taints.to_string()),
        ..tsc(1, "node", DNS, foo())
    };
    // node-c (no pods) is the global minimum only when it counts.
    type Case = (&'static str, PodBuilder, &'static [(&'static str, Code)]);
    let cases: Vec<Case> = vec![
        (
            "NodeAffinityPolicy honored with labelSelectors",
            pod(&[("foo", "")]).node_selector("foo", "").constraint(policy("Honor", "Ignore")),
            &[("node-a", S), ("node-b", S), ("node-c", S)],
        ),
        (
            "NodeAffinityPolicy ignored with labelSelectors",
            pod(&[("foo", "")]).node_selector("foo", "").constraint(policy("Ignore", "Ignore")),
            &[("node-a", U), ("node-b", U), ("node-c", S)],
        ),
        (
            "NodeTaintsPolicy honored",
            pod(&[("foo", "")]).constraint(policy("Honor", "Honor")),
            &[("node-a", S), ("node-b", S), ("node-c", S)],
        ),
        (
            "NodeTaintsPolicy ignored",
            pod(&[("foo", "")]).constraint(policy("Honor", "Ignore")),
            &[("node-a", U), ("node-b", U), ("node-c", S)],
        ),
    ];
    let pl = plugin();
    for (name, p, want) in cases {
        assert_eq!(filter_codes(&pl, p, nodes(), &pods), codes(want), "{name}");
    }
}

#[test]
fn multiple_constraints() {
    let zone_node = |zone_sel, node_sel, labels: &[(&str, &str)]| {
        pod(labels)
            .constraint(tsc(1, "zone", DNS, zone_sel))
            .constraint(tsc(1, "node", DNS, node_sel))
    };
    let foo_on = |names: &[(&str, &str)]| -> Vec<Pod> {
        names.iter().map(|(name, n)| on(name, n, &[("foo", "")])).collect()
    };
    let a1_x1_y1 = vec![
        on("p-a1", "node-a", &[("foo", "")]),
        on("p-x1", "node-x", &[("bar", "")]),
        on("p-y1", "node-y", &[("bar", "")]),
    ];
    type Case =
        (&'static str, PodBuilder, Vec<NodeBuilder>, Vec<Pod>, &'static [(&'static str, Code)]);
    let cases: Vec<Case> = vec![
        (
            "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
            zone_node(foo(), foo(), &[("foo", "")]),
            four_nodes(),
            foo_on(&[
                ("p-a1", "node-a"),
                ("p-a2", "node-a"),
                ("p-b1", "node-b"),
                ("p-y1", "node-y"),
                ("p-y2", "node-y"),
                ("p-y3", "node-y"),
            ]),
            &[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", U)],
        ),
        (
            "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
            zone_node(foo(), foo(), &[("foo", "")]),
            four_nodes(),
            foo_on(&[
                ("p-a1", "node-a"),
                ("p-a2", "node-a"),
                ("p-b1", "node-b"),
                ("p-y1", "node-y"),
                ("p-y2", "node-y"),
                ("p-y3", "node-y"),
                ("p-y4", "node-y"),
            ]),
            &[("node-a", U), ("node-b", U), ("node-x", U), ("node-y", U)],
        ),
        (
            "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
            zone_node(foo(), bar(), &[("foo", ""), ("bar", "")]),
            four_nodes(),
            vec![on("p-a1", "node-a", &[("foo", "")]), on("p-y1", "node-y", &[("bar", "")])],
            &[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", U)],
        ),
        (
            "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
            zone_node(foo(), bar(), &[("foo", ""), ("bar", "")]),
            four_nodes(),
            a1_x1_y1.clone(),
            &[("node-a", U), ("node-b", U), ("node-x", U), ("node-y", U)],
        ),
        (
            "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
            zone_node(foo(), bar(), &[("foo", ""), ("bar", "")]),
            four_nodes(),
            vec![
                on("p-a1", "node-a", &[("foo", "")]),
                on("p-a2", "node-a", &[("foo", ""), ("bar", "")]),
                on("p-y1", "node-y", &[("foo", "")]),
                on("p-y2", "node-y", &[("foo", ""), ("bar", "")]),
                on("p-y3", "node-y", &[("foo", "")]),
            ],
            &[("node-a", U), ("node-b", S), ("node-x", U), ("node-y", U)],
        ),
        (
            "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
            zone_node(foo(), bar(), &[("bar", "")]),
            four_nodes(),
            a1_x1_y1.clone(),
            &[("node-a", S), ("node-b", S), ("node-x", U), ("node-y", U)],
        ),
        (
            "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
            zone_node(foo(), foo(), &[("foo", "")]),
            vec![
                zn("node-a", "zone1"),
                zn("node-b", "zone1"),
                node("node-x", &[("zone", "zone2")]),
                zn("node-y", "zone2"),
            ],
            foo_on(&[("p-a1", "node-a"), ("p-y3", "node-y")]),
            &[("node-a", U), ("node-b", S), ("node-x", UU), ("node-y", U)],
        ),
        (
            "two Constraints on zone, spreads = [3/3, 2/1]",
            pod(&[("foo", ""), ("bar", "")])
                .constraint(tsc(1, "zone", DNS, bar()))
                .constraint(tsc(1, "zone", DNS, foo())),
            four_nodes(),
            vec![
                on("p-a1", "node-a", &[("foo", ""), ("bar", "")]),
                on("p-a2", "node-a", &[("foo", "")]),
                on("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                on("p-y1", "node-y", &[("foo", "")]),
                on("p-y2", "node-y", &[("foo", ""), ("bar", "")]),
                on("p-y3", "node-y", &[("foo", "")]),
            ],
            &[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", S)],
        ),
    ];
    let pl = plugin();
    for (name, p, nodes, pods, want) in cases {
        assert_eq!(filter_codes(&pl, p, nodes, &pods), codes(want), "{name}");
    }
}

#[test]
fn filter_messages_and_missing_state() {
    let pl = plugin();
    let p = pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, foo())).info();
    let list = cluster(
        vec![zn("node-a", "zone1"), node("node-b", &[]), zn("node-c", "zone2")],
        &[on("p1", "node-a", &[("foo", "")])],
    );
    let (state, _) = pre_filter(&pl, &p, &list);
    let a = pl.filter(&state, &p, &list.list()[0]);
    assert_eq!(a.code(), Code::Unschedulable);
    assert_eq!(a.reasons(), ["node(s) didn't match pod topology spread constraints"]);
    let b = pl.filter(&state, &p, &list.list()[1]);
    assert_eq!(b.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(
        b.reasons(),
        ["node(s) didn't match pod topology spread constraints (missing required label)"]
    );
    let none = pl.filter(&CycleState::new(), &p, &list.list()[0]);
    assert_eq!(none.code(), Code::Error);
}
