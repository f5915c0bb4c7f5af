//! PreFilter state and the PreFilterExtensions, from upstream's
//! `filtering_test.go` (TestPreFilterState, TestPreFilterStateAddPod,
//! TestPreFilterStateRemovePod).

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
                c.iter().map(|(v, n)| (v.to_string(), n)).collect();
            counts.sort();
            let paths = c.paths();
            (counts, [paths.0[0].num, paths.0[1].num])
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

pub(super) fn pre_filter(
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
    assert_eq!(verdicts, [Code::Success, Code::Success, Code::Unschedulable]);

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
