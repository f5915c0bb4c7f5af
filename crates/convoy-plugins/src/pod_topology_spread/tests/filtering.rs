//! PreFilter state, Filter verdicts and the PreFilterExtensions, from
//! upstream's `filtering_test.go` (TestPreFilterState, TestSingleConstraint,
//! TestMultipleConstraints, TestPreFilterStateAddPod/RemovePod).

use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};

use convoy_api::testing::PodBuilder;
use convoy_api::{Code, CycleState, FilterPlugin, NodeInfoLister, PreFilterPlugin, Status};

use super::super::filtering::PreFilterState;
use super::super::{DO_NOT_SCHEDULE as DNS, SCHEDULE_ANYWAY as SA};
use super::*;

/// Per constraint: the counts by domain and the two critical paths.
type Summary = Vec<(Vec<(String, i64)>, [i64; 2])>;

fn summary(s: &PreFilterState) -> Summary {
    s.counts
        .iter()
        .map(|c| {
            let mut counts: Vec<(String, i64)> =
                c.domains.iter().map(|(v, i)| (v.to_string(), c.counts[i as usize])).collect();
            counts.sort();
            (counts, [c.paths.0[0].num, c.paths.0[1].num])
        })
        .collect()
}

/// Per constraint: the counts by domain and the two critical paths' counts.
type Want<'a> = [(&'a [(&'a str, i64)], [i64; 2])];

fn want(constraints: &Want<'_>) -> Summary {
    constraints
        .iter()
        .map(|(counts, paths)| (counts.iter().map(|(v, n)| (v.to_string(), *n)).collect(), *paths))
        .collect()
}

fn pre_filter(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    nodes: &dyn NodeInfoLister,
) -> (CycleState, Status) {
    let mut state = CycleState::new();
    let (r, s) = pl.pre_filter(&mut state, pod, nodes);
    assert!(r.is_none());
    (state, s)
}

const MAX: i64 = i32::MAX as i64;

#[test]
fn pre_filter_state() {
    let foo_pods = |spec: &[(&str, &str)]| -> Vec<Pod> {
        spec.iter().map(|(name, n)| on(name, n, &[("foo", "")])).collect()
    };
    let two_one_zero_four = foo_pods(&[
        ("p-a1", "node-a"),
        ("p-a2", "node-a"),
        ("p-b1", "node-b"),
        ("p-y1", "node-y"),
        ("p-y2", "node-y"),
        ("p-y3", "node-y"),
        ("p-y4", "node-y"),
    ]);
    let three_two = foo_pods(&[
        ("p-a1", "node-a"),
        ("p-a2", "node-a"),
        ("p-b1", "node-b"),
        ("p-y1", "node-y"),
        ("p-y2", "node-y"),
    ]);
    let foo_a = |names: &[(&str, &str)]| -> Vec<Pod> {
        names.iter().map(|(name, n)| on(name, n, &[("foo", "a")])).collect()
    };
    let three_two_a = foo_a(&[
        ("p-a1", "node-a"),
        ("p-a2", "node-a"),
        ("p-b1", "node-b"),
        ("p-y1", "node-y"),
        ("p-y2", "node-y"),
    ]);
    let inclusion_nodes = || {
        vec![
            node("node-a", &[("node", "node-a"), ("foo", "")]),
            node("node-b", &[("node", "node-b"), ("foo", "")]),
            node("node-c", &[("node", "node-c"), ("bar", "")]),
        ]
    };
    let tainted_nodes = || {
        vec![
            node("node-a", &[("node", "node-a")]),
            node("node-b", &[("node", "node-b")]),
            node("node-c", &[("node", "node-c"), ("bar", "")]).taint(
                "node.kubernetes.io/unschedulable",
                "",
                "NoSchedule",
            ),
        ]
    };
    let bar_pods = vec![
        on("p-a", "node-a", &[("bar", "")]),
        on("p-b", "node-b", &[("bar", "")]),
        on("p-c", "node-b", &[("bar", "")]),
        on("p-d", "node-c", &[]),
    ];
    let honor = || Some("Honor".to_string());
    let ignore = || Some("Ignore".to_string());
    let mut three_zones = four_nodes();
    three_zones.extend([zn("node-o", "zone3"), zn("node-p", "zone3")]);

    type Case = (&'static str, PodBuilder, Vec<NodeBuilder>, Vec<Pod>, Summary);
    let cases: Vec<Case> = vec![
        (
            "clean cluster with one spreadConstraint",
            pod(&[("foo", "")]).constraint(tsc(5, "zone", DNS, labels(&[("foo", "bar")]))),
            four_nodes(),
            vec![],
            want(&[(&[("zone1", 0), ("zone2", 0)], [0, 0])]),
        ),
        (
            "normal case with one spreadConstraint",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, foo())),
            four_nodes(),
            three_two.clone(),
            want(&[(&[("zone1", 3), ("zone2", 2)], [2, 3])]),
        ),
        (
            "normal case with null label selector",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, None)),
            four_nodes(),
            three_two.clone(),
            want(&[(&[("zone1", 0), ("zone2", 0)], [0, 0])]),
        ),
        (
            "normal case with one spreadConstraint, on a 3-zone cluster",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, foo())),
            three_zones,
            three_two.clone(),
            want(&[(&[("zone1", 3), ("zone2", 2), ("zone3", 0)], [0, 2])]),
        ),
        (
            "namespace mismatch doesn't count",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, foo())),
            four_nodes(),
            vec![
                on("p-a1", "node-a", &[("foo", "")]),
                PodBuilder::new("p-a2").namespace("ns1").node("node-a").label("foo", "").build(),
                on("p-b1", "node-b", &[("foo", "")]),
                PodBuilder::new("p-y1").namespace("ns2").node("node-y").label("foo", "").build(),
                on("p-y2", "node-y", &[("foo", "")]),
            ],
            want(&[(&[("zone1", 2), ("zone2", 1)], [1, 2])]),
        ),
        (
            "normal case with two spreadConstraints",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, foo())).constraint(tsc(
                1,
                "node",
                DNS,
                foo(),
            )),
            four_nodes(),
            two_one_zero_four.clone(),
            want(&[
                (&[("zone1", 3), ("zone2", 4)], [3, 4]),
                (&[("node-a", 2), ("node-b", 1), ("node-x", 0), ("node-y", 4)], [0, 1]),
            ]),
        ),
        (
            "soft spreadConstraints should be bypassed",
            pod(&[("foo", "")])
                .constraint(tsc(1, "zone", SA, foo()))
                .constraint(tsc(1, "zone", DNS, foo()))
                .constraint(tsc(1, "node", SA, foo()))
                .constraint(tsc(1, "node", DNS, foo())),
            vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-y", "zone2")],
            two_one_zero_four.clone(),
            want(&[
                (&[("zone1", 3), ("zone2", 4)], [3, 4]),
                (&[("node-a", 2), ("node-b", 1), ("node-y", 4)], [1, 2]),
            ]),
        ),
        (
            "different labelSelectors - complex pods",
            pod(&[("foo", ""), ("bar", "")])
                .constraint(tsc(1, "zone", DNS, foo()))
                .constraint(tsc(1, "node", DNS, bar())),
            vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-y", "zone2")],
            vec![
                on("p-a1", "node-a", &[("foo", "")]),
                on("p-a2", "node-a", &[("foo", ""), ("bar", "")]),
                on("p-b1", "node-b", &[("foo", "")]),
                on("p-y1", "node-y", &[("foo", "")]),
                on("p-y2", "node-y", &[("foo", ""), ("bar", "")]),
                on("p-y3", "node-y", &[("foo", "")]),
                on("p-y4", "node-y", &[("foo", ""), ("bar", "")]),
            ],
            want(&[
                (&[("zone1", 3), ("zone2", 4)], [3, 4]),
                (&[("node-a", 1), ("node-b", 0), ("node-y", 2)], [0, 1]),
            ]),
        ),
        (
            "two spreadConstraints, and with podAffinity",
            pod(&[("foo", "")])
                .node_affinity("node", "NotIn", &["node-x"])
                .constraint(tsc(1, "zone", DNS, foo()))
                .constraint(tsc(1, "node", DNS, foo())),
            four_nodes(),
            two_one_zero_four.clone(),
            want(&[
                (&[("zone1", 3), ("zone2", 4)], [3, 4]),
                (&[("node-a", 2), ("node-b", 1), ("node-y", 4)], [1, 2]),
            ]),
        ),
        (
            "NodeAffinityPolicy honored with labelSelectors",
            pod(&[("foo", "")]).node_selector("foo", "").constraint(tsc(1, "node", DNS, bar())),
            inclusion_nodes(),
            bar_pods.clone(),
            want(&[(&[("node-a", 1), ("node-b", 2)], [1, 2])]),
        ),
        (
            "NodeAffinityPolicy ignored with labelSelectors",
            pod(&[("foo", "")]).node_selector("foo", "").constraint(TopologySpreadConstraint {
                node_affinity_policy: ignore(),
                ..tsc(1, "node", DNS, bar())
            }),
            inclusion_nodes(),
            bar_pods.clone(),
            want(&[(&[("node-a", 1), ("node-b", 2), ("node-c", 0)], [0, 1])]),
        ),
        (
            "NodeAffinityPolicy honored with nodeAffinity",
            pod(&[("foo", "")]).node_affinity("foo", "In", &[""]).constraint(tsc(
                1,
                "node",
                DNS,
                bar(),
            )),
            inclusion_nodes(),
            bar_pods.clone(),
            want(&[(&[("node-a", 1), ("node-b", 2)], [1, 2])]),
        ),
        (
            "NodeTaintsPolicy ignored",
            pod(&[("foo", "")]).constraint(tsc(1, "node", DNS, bar())),
            tainted_nodes(),
            bar_pods.clone(),
            want(&[(&[("node-a", 1), ("node-b", 2), ("node-c", 0)], [0, 1])]),
        ),
        (
            "NodeTaintsPolicy honored",
            pod(&[("foo", "")]).constraint(TopologySpreadConstraint {
                node_taints_policy: honor(),
                ..tsc(1, "node", DNS, bar())
            }),
            tainted_nodes(),
            bar_pods.clone(),
            want(&[(&[("node-a", 1), ("node-b", 2)], [1, 2])]),
        ),
        (
            "NodeTaintsPolicy honored with tolerated taints",
            pod(&[("foo", "")])
                .toleration("node.kubernetes.io/unschedulable", None, "NoSchedule")
                .constraint(TopologySpreadConstraint {
                    node_taints_policy: honor(),
                    ..tsc(1, "node", DNS, bar())
                }),
            tainted_nodes(),
            bar_pods.clone(),
            want(&[(&[("node-a", 1), ("node-b", 2), ("node-c", 0)], [0, 1])]),
        ),
        (
            "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
            pod(&[("foo", ""), ("bar", "a")]).constraint(TopologySpreadConstraint {
                match_label_keys: Some(vec!["bar".to_string()]),
                ..tsc(1, "zone", DNS, foo())
            }),
            four_nodes(),
            vec![
                on("p-a1", "node-a", &[("foo", "")]),
                on("p-a2", "node-a", &[("foo", ""), ("bar", "a")]),
                on("p-b1", "node-b", &[("foo", "")]),
                on("p-y1", "node-y", &[("foo", ""), ("bar", "a")]),
                on("p-y2", "node-y", &[("bar", "")]),
            ],
            want(&[(&[("zone1", 1), ("zone2", 1)], [1, 1])]),
        ),
        (
            "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
            pod(&[("foo", "a")]).constraint(TopologySpreadConstraint {
                match_label_keys: Some(vec!["foo".to_string()]),
                ..tsc(1, "zone", DNS, Some(Default::default()))
            }),
            four_nodes(),
            three_two_a.clone(),
            want(&[(&[("zone1", 3), ("zone2", 2)], [2, 3])]),
        ),
        (
            "key in matchLabelKeys is ignored when LabelSelector is nil",
            pod(&[("foo", "")]).constraint(TopologySpreadConstraint {
                match_label_keys: Some(vec!["bar".to_string()]),
                ..tsc(1, "zone", DNS, None)
            }),
            four_nodes(),
            three_two_a.clone(),
            want(&[(&[("zone1", 0), ("zone2", 0)], [0, 0])]),
        ),
        (
            "key in matchLabelKeys is ignored when it isn't exist in pod.labels",
            pod(&[("foo", "")]).constraint(TopologySpreadConstraint {
                match_label_keys: Some(vec!["bar".to_string()]),
                ..tsc(1, "zone", DNS, foo())
            }),
            four_nodes(),
            three_two_a.clone(),
            want(&[(&[("zone1", 3), ("zone2", 2)], [2, 3])]),
        ),
        (
            "two spreadConstraints with the same topologyKey",
            pod(&[("foo", ""), ("bar", "")])
                .constraint(tsc(1, "zone", DNS, foo()))
                .constraint(tsc(1, "zone", DNS, bar())),
            four_nodes(),
            vec![
                on("p-a1", "node-a", &[("foo", ""), ("bar", "")]),
                on("p-b1", "node-b", &[("foo", "")]),
                on("p-x1", "node-x", &[("bar", "")]),
                on("p-y1", "node-y", &[("foo", ""), ("bar", "")]),
                on("p-y2", "node-y", &[("bar", "")]),
            ],
            want(&[
                (&[("zone1", 2), ("zone2", 1)], [1, 2]),
                (&[("zone1", 1), ("zone2", 3)], [1, 3]),
            ]),
        ),
    ];
    let pl = plugin();
    for (name, p, nodes, pods, want) in cases {
        let pod = p.info();
        let (state, s) = pre_filter(&pl, &pod, &cluster(nodes, &pods));
        assert!(s.is_success(), "{name}: {s}");
        assert_eq!(summary(state.read::<PreFilterState>().unwrap()), want, "{name}");
    }
}

#[test]
fn pre_filter_default_constraints() {
    let defaults =
        vec![tsc(3, "node", DNS, None), tsc(2, "node", SA, None), tsc(5, "rack", DNS, None)];
    let svc = [service("s", &[("foo", "bar")])];
    let list = cluster(four_nodes(), &[]);

    // Default constraints and a service: the hard ones, with the service's selector.
    let pl = plugin_with(defaults.clone(), &svc);
    let p = pod(&[("foo", "bar"), ("baz", "kar")]).info();
    let (state, s) = pre_filter(&pl, &p, &cluster(vec![], &[]));
    assert!(s.is_success(), "{s}");
    let st = state.read::<PreFilterState>().unwrap();
    let keys: Vec<(&str, i32)> =
        st.constraints.iter().map(|c| (&*c.topology_key, c.max_skew)).collect();
    assert_eq!(keys, [("node", 3), ("rack", 5)]);
    assert!(st.constraints.iter().all(|c| c.selector.to_string() == "foo=bar"));
    assert_eq!(summary(st), want(&[(&[], [MAX, MAX]), (&[], [MAX, MAX])]));

    // A service that doesn't match: no selector, no constraint.
    let pl = plugin_with(vec![tsc(3, "node", DNS, None)], &[service("s", &[("baz", "kep")])]);
    let (_, s) = pre_filter(&pl, &pod(&[("foo", "bar")]).info(), &list);
    assert!(s.is_skip());

    // The pod has constraints: the defaults do not apply.
    let pl = plugin_with(vec![tsc(2, "node", DNS, None)], &svc);
    let p = pod(&[("foo", "bar"), ("baz", "tar")])
        .constraint(tsc(1, "zone", DNS, labels(&[("baz", "tar")])))
        .constraint(tsc(2, "planet", SA, labels(&[("fot", "rok")])))
        .info();
    let (state, _) = pre_filter(&pl, &p, &cluster(vec![], &[]));
    let st = state.read::<PreFilterState>().unwrap();
    assert_eq!(st.constraints.len(), 1);
    assert_eq!(&*st.constraints[0].topology_key, "zone");

    // Soft defaults only: nothing to filter.
    let pl = plugin_with(vec![tsc(2, "node", SA, None)], &svc);
    let (_, s) = pre_filter(&pl, &pod(&[("foo", "bar")]).info(), &list);
    assert!(s.is_skip());

    // No constraint at all (System defaults are soft): Skip.
    let (_, s) = pre_filter(&plugin(), &pod(&[("foo", "")]).info(), &list);
    assert!(s.is_skip());
}

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

/// Upstream TestPreFilterStateAddPod / RemovePod: the counts and the
/// minimum after a what-if, and the filter verdicts that follow.
#[test]
fn add_and_remove_pod() {
    let zone_node = pod(&[("foo", "")]).constraint(tsc(1, "zone", DNS, foo())).constraint(tsc(
        1,
        "node",
        DNS,
        foo(),
    ));
    let nodes = || vec![zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2")];
    let existing = vec![on("p-a1", "node-a", &[("foo", "")]), on("p-x1", "node-x", &[("foo", "")])];
    let list = cluster(nodes(), &existing);
    let pl = plugin();
    let p = zone_node.info();
    let ext = pl.pre_filter_extensions().unwrap();

    // "node a and x both impact current min match": add on node-b.
    let (mut state, _) = pre_filter(&pl, &p, &list);
    let before = state.clone();
    let added = info(on("p-b1", "node-b", &[("foo", "")]));
    assert!(ext.add_pod(&mut state, &p, &added, &list.list()[1]).is_success());
    assert_eq!(
        summary(state.read().unwrap()),
        want(&[
            (&[("zone1", 2), ("zone2", 1)], [1, 2]),
            (&[("node-a", 1), ("node-b", 1), ("node-x", 1)], [1, 1]),
        ])
    );
    // The what-if did not touch the original (clones are independent).
    assert_eq!(
        summary(before.read().unwrap()),
        want(&[
            (&[("zone1", 1), ("zone2", 1)], [1, 1]),
            (&[("node-a", 1), ("node-b", 0), ("node-x", 1)], [0, 1]),
        ])
    );

    // A pod in another namespace, or not matching, changes nothing.
    let mut state = before.clone();
    let other_ns =
        info(PodBuilder::new("q").namespace("ns1").node("node-b").label("foo", "").build());
    let unmatched = info(on("q2", "node-b", &[("bar", "")]));
    ext.add_pod(&mut state, &p, &other_ns, &list.list()[1]);
    ext.add_pod(&mut state, &p, &unmatched, &list.list()[1]);
    assert_eq!(summary(state.read().unwrap()), summary(before.read().unwrap()));

    // Removing p-a1 from node-a makes node-a the minimum and zone1 fit again.
    let mut state = before.clone();
    let removed = info(existing[0].clone());
    assert!(ext.remove_pod(&mut state, &p, &removed, &list.list()[0]).is_success());
    assert_eq!(
        summary(state.read().unwrap()),
        want(&[
            (&[("zone1", 0), ("zone2", 1)], [0, 1]),
            (&[("node-a", 0), ("node-b", 0), ("node-x", 1)], [0, 0]),
        ])
    );
    let verdicts: Vec<Code> = list.list().iter().map(|n| pl.filter(&state, &p, n).code()).collect();
    assert_eq!(verdicts, [S, S, U]);

    // Without PreFilter state: an error.
    assert_eq!(
        ext.add_pod(&mut CycleState::new(), &p, &added, &list.list()[1]).code(),
        Code::Error
    );

    // Node inclusion: a pod added on a node the incoming pod's affinity excludes does not count.
    let p = pod(&[("foo", "")])
        .node_affinity("zone", "In", &["zone1"])
        .constraint(tsc(1, "zone", DNS, foo()))
        .info();
    let (mut state, _) = pre_filter(&pl, &p, &list);
    let on_x = info(on("q3", "node-x", &[("foo", "")]));
    ext.add_pod(&mut state, &p, &on_x, &list.list()[2]);
    assert_eq!(summary(state.read().unwrap()), want(&[(&[("zone1", 1)], [1, MAX])]));
}
