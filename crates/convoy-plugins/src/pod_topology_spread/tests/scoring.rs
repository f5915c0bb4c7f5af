//! PreScore, Score and NormalizeScore, from upstream's `scoring_test.go`
//! (TestPodTopologySpreadScore, TestPreScoreStateEmptyNodes, TestPreScoreSkip).

use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};

use convoy_api::testing::PodBuilder;
use convoy_api::{ClusterObject, CycleState, NodeInfoLister, PreScorePlugin, ScorePlugin, Status};

use super::super::SCHEDULE_ANYWAY as SA;
use super::super::scoring::PreScoreState;
use super::*;

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

/// Runs PreScore over `feasible` (names of nodes of `all`), then Score and
/// NormalizeScore; the final scores in feasible order.
fn scores(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    all: &NodeList,
    feasible: &[&str],
) -> Result<Vec<i64>, Status> {
    let feasible: Vec<_> = feasible.iter().map(|n| all.get(n).unwrap().clone()).collect();
    let mut state = CycleState::new();
    let s = pl.pre_score(&mut state, pod, &convoy_api::borrowed(&feasible), all);
    if !s.is_success() {
        return Err(s);
    }
    let mut out = Vec::new();
    for n in &feasible {
        out.push(pl.score(&state, pod, n)?);
    }
    let s = pl.normalize_score(&state, pod, &mut out);
    assert!(s.is_success(), "{s}");
    Ok(out)
}

fn hn(name: &str) -> NodeBuilder {
    node(name, &[(HOST, name)])
}

fn zh(name: &str, zone: &str) -> NodeBuilder {
    node(name, &[("zone", zone), (HOST, name)])
}

fn foo_on(spec: &[(&str, &str)]) -> Vec<Pod> {
    spec.iter().map(|(name, n)| on(name, n, &[("foo", "")])).collect()
}

#[test]
fn pod_topology_spread_score() {
    let host = |skew| pod(&[("foo", "")]).constraint(tsc(skew, HOST, SA, foo()));
    let abcd = || vec![hn("node-a"), hn("node-b"), hn("node-c"), hn("node-d")];
    let spread_2103 = foo_on(&[
        ("p-a1", "node-a"),
        ("p-a2", "node-a"),
        ("p-b1", "node-b"),
        ("p-d1", "node-d"),
        ("p-d2", "node-d"),
        ("p-d3", "node-d"),
    ]);
    let spread_4321 = foo_on(&[
        ("p-a1", "node-a"),
        ("p-a2", "node-a"),
        ("p-a3", "node-a"),
        ("p-a4", "node-a"),
        ("p-b1", "node-b"),
        ("p-b2", "node-b"),
        ("p-b3", "node-b"),
        ("p-c1", "node-c"),
        ("p-c2", "node-c"),
        ("p-d1", "node-d"),
    ]);
    let spread_4213 = foo_on(&[
        ("p-a1", "node-a"),
        ("p-a2", "node-a"),
        ("p-a3", "node-a"),
        ("p-a4", "node-a"),
        ("p-b1", "node-b"),
        ("p-b2", "node-b"),
        ("p-x1", "node-x"),
        ("p-y1", "node-y"),
        ("p-y2", "node-y"),
        ("p-y3", "node-y"),
    ]);
    let inclusion_nodes = || {
        vec![
            node("node-a", &[("node", "node-a"), ("foo", "")]),
            node("node-b", &[("node", "node-b"), ("foo", "")]),
            node("node-c", &[("node", "node-c")]),
        ]
    };
    let tainted = || {
        vec![
            node("node-a", &[("node", "node-a")]),
            node("node-b", &[("node", "node-b")]),
            node("node-c", &[("node", "node-c")]).taint(
                "node.kubernetes.io/unschedulable",
                "",
                "NoSchedule",
            ),
        ]
    };
    let inclusion_pods =
        foo_on(&[("p-a1", "node-a"), ("p-a2", "node-a"), ("p-b1", "node-b"), ("p-c1", "node-c")]);
    let policy = |affinity: Option<&str>, taints: Option<&str>| TopologySpreadConstraint {
        node_affinity_policy: affinity.map(str::to_string),
        node_taints_policy: taints.map(str::to_string),
        ..tsc(1, "node", SA, foo())
    };
    let match_keys = |c: TopologySpreadConstraint, key: &str| TopologySpreadConstraint {
        match_label_keys: Some(vec![key.to_string()]),
        ..c
    };
    let abcd_zones = || {
        vec![
            zh("node-a", "zone1"),
            zh("node-b", "zone1"),
            zh("node-c", "zone2"),
            zh("node-d", "zone2"),
        ]
    };

    // (name, pod, nodes, pods, feasible nodes, objects, want)
    type Case = (
        &'static str,
        PodBuilder,
        Vec<NodeBuilder>,
        Vec<Pod>,
        &'static [&'static str],
        Vec<ClusterObject>,
        &'static [i64],
    );
    let cases: Vec<Case> = vec![
        (
            "one constraint on node, no existing pods",
            host(1),
            vec![hn("node-a"), hn("node-b")],
            vec![],
            &["node-a", "node-b"],
            vec![],
            &[100, 100],
        ),
        (
            "one constraint on node, only one node is candidate",
            host(1),
            vec![hn("node-a"), hn("node-b")],
            foo_on(&[("p-a1", "node-a"), ("p-a2", "node-a"), ("p-b1", "node-b")]),
            &["node-a"],
            vec![],
            &[100],
        ),
        (
            "one constraint on node, all nodes have the same number of matching pods",
            host(1),
            vec![hn("node-a"), hn("node-b")],
            foo_on(&[("p-a1", "node-a"), ("p-b1", "node-b")]),
            &["node-a", "node-b"],
            vec![],
            &[100, 100],
        ),
        (
            "one constraint on node, all 4 nodes are candidates",
            host(1),
            abcd(),
            spread_2103.clone(),
            &["node-a", "node-b", "node-c", "node-d"],
            vec![],
            &[20, 60, 100, 0],
        ),
        (
            "one constraint on node, null selector",
            pod(&[("foo", "")]).constraint(tsc(1, HOST, SA, None)),
            abcd(),
            spread_2103.clone(),
            &["node-a", "node-b", "node-c", "node-d"],
            vec![],
            &[100, 100, 100, 100],
        ),
        (
            "one constraint on node, all 4 nodes are candidates, maxSkew=2",
            host(2),
            abcd(),
            spread_2103.clone(),
            &["node-a", "node-b", "node-c", "node-d"],
            vec![],
            &[33, 66, 100, 16],
        ),
        (
            "one constraint on node, all 4 nodes are candidates, maxSkew=3",
            host(3),
            abcd(),
            spread_4321.clone(),
            &["node-a", "node-b", "node-c", "node-d"],
            vec![],
            &[44, 66, 77, 100],
        ),
        (
            "system defaulting, nodes don't have zone, pods match service",
            pod(&[("foo", "")]),
            abcd(),
            spread_4321.clone(),
            &["node-a", "node-b", "node-c", "node-d"],
            vec![service("s", &[("foo", "")])],
            &[44, 66, 77, 100],
        ),
        (
            "one constraint on node, 3 out of 4 nodes are candidates",
            host(1),
            vec![hn("node-a"), hn("node-b"), hn("node-x"), hn("node-y")],
            spread_4213.clone(),
            &["node-a", "node-b", "node-x"],
            vec![],
            &[33, 83, 100],
        ),
        (
            "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
            host(1),
            vec![hn("node-a"), node("node-b", &[("n", "node-b")]), hn("node-x"), hn("node-y")],
            spread_4213.clone(),
            &["node-a", "node-b", "node-x"],
            vec![],
            &[16, 0, 100],
        ),
        (
            "one constraint on zone, 3 out of 4 nodes are candidates",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", SA, foo())),
            vec![
                zh("node-a", "zone1"),
                zh("node-b", "zone1"),
                zh("node-x", "zone2"),
                zh("node-y", "zone2"),
            ],
            spread_4213.clone(),
            &["node-a", "node-b", "node-x"],
            vec![],
            &[75, 75, 100],
        ),
        (
            "two Constraints on zone and node, 2 out of 4 nodes are candidates",
            pod(&[("foo", "")]).constraint(tsc(1, "zone", SA, foo())).constraint(tsc(
                1,
                HOST,
                SA,
                foo(),
            )),
            vec![
                zh("node-a", "zone1"),
                zh("node-b", "zone1"),
                zh("node-x", "zone2"),
                zh("node-y", "zone2"),
            ],
            foo_on(&[
                ("p-a1", "node-a"),
                ("p-a2", "node-a"),
                ("p-b1", "node-b"),
                ("p-x1", "node-x"),
                ("p-x2", "node-x"),
                ("p-y1", "node-y"),
                ("p-y2", "node-y"),
                ("p-y3", "node-y"),
                ("p-y4", "node-y"),
            ]),
            &["node-a", "node-x"],
            vec![],
            &[100, 63],
        ),
        (
            "two Constraints on zone, 2 out of 4 nodes are candidates",
            pod(&[("foo", ""), ("bar", "")]).constraint(tsc(1, "zone", SA, foo())).constraint(tsc(
                1,
                "zone",
                SA,
                bar(),
            )),
            vec![
                node("node-a", &[("zone", "zone1")]),
                node("node-b", &[("zone", "zone1")]),
                node("node-x", &[("zone", "zone2")]),
                node("node-y", &[("zone", "zone2")]),
            ],
            vec![
                on("p-a1", "node-a", &[("foo", ""), ("bar", "")]),
                on("p-a2", "node-a", &[("foo", "")]),
                on("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                on("p-y1", "node-y", &[("foo", "")]),
                on("p-y2", "node-y", &[("foo", ""), ("bar", "")]),
                on("p-y3", "node-y", &[("foo", "")]),
            ],
            &["node-a", "node-x"],
            vec![],
            &[85, 100],
        ),
        (
            "two Constraints on zone and node, with different labelSelectors",
            pod(&[("foo", ""), ("bar", "")]).constraint(tsc(1, "zone", SA, foo())).constraint(tsc(
                1,
                HOST,
                SA,
                bar(),
            )),
            vec![
                zh("node-a", "zone1"),
                zh("node-b", "zone1"),
                zh("node-x", "zone2"),
                zh("node-y", "zone2"),
            ],
            vec![
                on("p-a1", "node-a", &[("foo", "")]),
                on("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                on("p-y1", "node-y", &[("foo", "")]),
                on("p-y2", "node-y", &[("bar", "")]),
            ],
            &["node-a", "node-b", "node-x", "node-y"],
            vec![],
            &[60, 20, 100, 60],
        ),
        (
            "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
            pod(&[("foo", ""), ("bar", "")]).constraint(tsc(1, "zone", SA, foo())).constraint(tsc(
                1,
                HOST,
                SA,
                bar(),
            )),
            vec![
                zh("node-a", "zone1"),
                zh("node-b", "zone1"),
                zh("node-x", "zone2"),
                zh("node-y", "zone2"),
            ],
            vec![
                on("p-a1", "node-a", &[("foo", "")]),
                on("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                on("p-y1", "node-y", &[("foo", "")]),
                on("p-y2", "node-y", &[("bar", "")]),
            ],
            &["node-a", "node-b", "node-x"],
            vec![],
            &[50, 25, 100],
        ),
        (
            "existing pods in a different namespace do not count",
            host(1),
            vec![hn("node-a"), hn("node-b")],
            vec![
                PodBuilder::new("p-a1").namespace("ns1").node("node-a").label("foo", "").build(),
                on("p-a2", "node-a", &[("foo", "")]),
                on("p-b1", "node-b", &[("foo", "")]),
                on("p-b2", "node-b", &[("foo", "")]),
            ],
            &["node-a", "node-b"],
            vec![],
            &[100, 33],
        ),
        (
            "terminating Pods should be excluded",
            host(1),
            vec![hn("node-a"), hn("node-b")],
            vec![
                terminating(on("p-a", "node-a", &[("foo", "")])),
                on("p-b", "node-b", &[("foo", "")]),
            ],
            &["node-a", "node-b"],
            vec![],
            &[100, 0],
        ),
        (
            "minDomains has no effect when ScheduleAnyway",
            pod(&[("foo", "")]).constraint(TopologySpreadConstraint {
                min_domains: Some(10),
                ..tsc(2, "node", SA, foo())
            }),
            vec![
                node("node-a", &[("node", "node-a")]),
                node("node-b", &[("node", "node-b")]),
                node("node-c", &[("node", "node-c")]),
            ],
            foo_on(&[
                ("p-a1", "node-a"),
                ("p-a2", "node-a"),
                ("p-b1", "node-b"),
                ("p-b2", "node-b"),
                ("p-c1", "node-c"),
            ]),
            &["node-a", "node-b", "node-c"],
            vec![],
            &[75, 75, 100],
        ),
        (
            "NodeAffinityPolicy honored with labelSelectors",
            pod(&[("foo", "")]).node_selector("foo", "").constraint(policy(None, None)),
            inclusion_nodes(),
            inclusion_pods.clone(),
            &["node-a", "node-b", "node-c"],
            vec![],
            &[0, 33, 100],
        ),
        (
            "NodeAffinityPolicy ignored with labelSelectors",
            pod(&[("foo", "")]).node_selector("foo", "").constraint(policy(Some("Ignore"), None)),
            inclusion_nodes(),
            inclusion_pods.clone(),
            &["node-a", "node-b", "node-c"],
            vec![],
            &[66, 100, 100],
        ),
        (
            "NodeAffinityPolicy honored with nodeAffinity",
            pod(&[("foo", "")]).node_affinity("foo", "In", &[""]).constraint(policy(None, None)),
            inclusion_nodes(),
            inclusion_pods.clone(),
            &["node-a", "node-b", "node-c"],
            vec![],
            &[0, 33, 100],
        ),
        (
            "NodeTaintsPolicy honored",
            pod(&[("foo", "")]).constraint(policy(None, Some("Honor"))),
            tainted(),
            inclusion_pods.clone(),
            &["node-a", "node-b", "node-c"],
            vec![],
            &[0, 33, 100],
        ),
        (
            "NodeTaintsPolicy ignored",
            pod(&[("foo", "")]).constraint(policy(None, None)),
            tainted(),
            inclusion_pods.clone(),
            &["node-a", "node-b", "node-c"],
            vec![],
            &[66, 100, 100],
        ),
        (
            "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
            pod(&[("foo", ""), ("bar", "")])
                .constraint(match_keys(tsc(1, "zone", SA, Some(Default::default())), "foo"))
                .constraint(match_keys(tsc(1, HOST, SA, Some(Default::default())), "bar")),
            abcd_zones(),
            vec![
                on("p-a1", "node-a", &[("foo", "")]),
                on("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                on("p-y1", "node-c", &[("foo", "")]),
                on("p-y2", "node-c", &[("bar", "")]),
            ],
            &["node-a", "node-b", "node-c", "node-d"],
            vec![],
            &[60, 20, 60, 100],
        ),
        (
            "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
            pod(&[("foo", ""), ("bar", ""), ("baz", "")])
                .constraint(tsc(1, "zone", SA, foo()))
                .constraint(match_keys(tsc(1, HOST, SA, bar()), "baz")),
            abcd_zones(),
            vec![
                on("p-a1", "node-a", &[("foo", "")]),
                on("p-b1", "node-b", &[("foo", ""), ("bar", ""), ("baz", "")]),
                on("p-c1", "node-c", &[("foo", "")]),
                on("p-c2", "node-c", &[("bar", "")]),
                on("p-d3", "node-c", &[("bar", ""), ("baz", "")]),
            ],
            &["node-a", "node-b", "node-c", "node-d"],
            vec![],
            &[60, 20, 60, 100],
        ),
    ];
    for (name, p, nodes, pods, feasible, objects, want) in cases {
        let pl = plugin_args(Default::default(), &objects);
        let all = cluster(nodes, &pods);
        assert_eq!(scores(&pl, &p.info(), &all, feasible).unwrap(), want, "{name}");
    }
}

#[test]
fn pre_score_state_and_defaults() {
    // Node-x lacks the zone key: ignored, scored 0; hostname weight counts
    // only the nodes not ignored.
    let p = pod(&[("foo", "")])
        .constraint(tsc(1, "zone", SA, foo()))
        .constraint(tsc(1, HOST, SA, bar()))
        .info();
    let all = cluster(vec![zh("node-a", "zone1"), zh("node-b", "zone1"), hn("node-x")], &[]);
    let pl = plugin_with(vec![], &[]);
    let mut state = CycleState::new();
    let feasible = all.list().to_vec();
    assert!(pl.pre_score(&mut state, &p, &convoy_api::borrowed(&feasible), &all).is_success());
    let s = state.read::<PreScoreState>().unwrap();
    assert_eq!(s.ignored, [false, false, true]);
    // One zone among the feasible nodes; hostname: two nodes not ignored.
    assert_eq!(s.weights, [3f64.ln(), 4f64.ln()]);

    // System defaults with a ReplicaSet: hostname 3 and zone 5; nodes
    // without a zone are not ignored but form the zone "".
    let rs = workload("ReplicaSet", "rs1", &[("foo", "tar")]);
    let p = pod(&[("foo", "tar"), ("baz", "sup")]).owner("ReplicaSet", "rs1").info();
    let all = cluster(
        vec![
            node("node-a", &[(HOST, "node-a"), (ZONE, "mars")]),
            node("node-b", &[(HOST, "node-b"), (ZONE, "mars")]),
            hn("node-c"),
            hn("node-d"),
        ],
        &[],
    );
    let pl = plugin_args(Default::default(), std::slice::from_ref(&rs));
    let mut state = CycleState::new();
    let feasible = all.list().to_vec();
    assert!(pl.pre_score(&mut state, &p, &convoy_api::borrowed(&feasible), &all).is_success());
    let s = state.read::<PreScoreState>().unwrap();
    let keys: Vec<(&str, i32)> =
        s.constraints.iter().map(|c| (&*c.topology_key, c.max_skew)).collect();
    assert_eq!(keys, [(HOST, 3), (ZONE, 5)]);
    assert_eq!(s.constraints[0].selector.to_string(), "foo=tar");
    assert!(s.ignored.is_empty() && !s.require_all);
    // Hostname: four nodes; zone: "mars" and "".
    assert_eq!(s.weights, [6f64.ln(), 4f64.ln()]);

    // Listed defaults with a ReplicaSet: only the soft ones, nodes ignored when missing a key.
    let pl = plugin_with(
        vec![
            tsc(1, HOST, SA, None),
            tsc(2, "rack", "DoNotSchedule", None),
            tsc(2, "planet", SA, None),
        ],
        &[rs],
    );
    let all = cluster(
        vec![node("node-a", &[("rack", "rack1"), (HOST, "node-a"), ("planet", "mars")])],
        &[],
    );
    let mut state = CycleState::new();
    assert!(pl.pre_score(&mut state, &p, &convoy_api::borrowed(all.list()), &all).is_success());
    let s = state.read::<PreScoreState>().unwrap();
    let keys: Vec<&str> = s.constraints.iter().map(|c| &*c.topology_key).collect();
    assert_eq!(keys, [HOST, "planet"]);
    assert!(s.require_all);
    assert_eq!(s.weights, [3f64.ln(), 3f64.ln()]);
}

#[test]
fn default_selectors_from_services_and_controllers() {
    // The pods of a StatefulSet spread by the default (System) constraints.
    let ss = workload("StatefulSet", "db", &[("app", "db")]);
    let p = pod(&[("app", "db")]).owner("StatefulSet", "db").info();
    let nodes = vec![
        node("node-a", &[(HOST, "node-a"), (ZONE, "z1")]),
        node("node-b", &[(HOST, "node-b"), (ZONE, "z2")]),
    ];
    let pods = vec![on("db-0", "node-a", &[("app", "db")]), on("db-1", "node-a", &[("app", "db")])];
    let all = cluster(nodes, &pods);
    let pl = plugin_args(Default::default(), &[ss]);
    // node-a: round(2·ln4 + 2 + 2·ln4 + 4) = 12, node-b: 6; 100·(18 − s)/12.
    assert_eq!(scores(&pl, &p, &all, &["node-a", "node-b"]).unwrap(), [50, 100]);

    // Without its StatefulSet (or any Service), the pod has no constraint: Skip.
    let pl = plugin();
    let mut state = CycleState::new();
    assert!(pl.pre_score(&mut state, &p, &convoy_api::borrowed(all.list()), &all).is_skip());

    // A ReplicaSet that doesn't exist: no selector, Skip (upstream TestPreScoreSkip).
    let p = pod(&[("foo", "bar"), ("baz", "sup")]).owner("ReplicaSet", "rs2").info();
    let pl = plugin_with(
        vec![tsc(2, "planet", SA, None)],
        &[workload("ReplicaSet", "rs1", &[("tar", "x")])],
    );
    let all = cluster(vec![node("node-a", &[("planet", "mars")])], &[]);
    assert!(
        pl.pre_score(&mut CycleState::new(), &p, &convoy_api::borrowed(all.list()), &all).is_skip()
    );

    // Services matching the pod merge; one that doesn't is left out.
    let p = pod(&[("app", "web"), ("tier", "fe")]).info();
    let pl = plugin_with(
        vec![tsc(1, "zone", SA, None)],
        &[
            service("a", &[("app", "web")]),
            service("b", &[("tier", "fe")]),
            service("c", &[("app", "db")]),
        ],
    );
    let all = cluster(vec![zh("node-a", "zone1")], &[]);
    let mut state = CycleState::new();
    assert!(pl.pre_score(&mut state, &p, &convoy_api::borrowed(all.list()), &all).is_success());
    let s = state.read::<PreScoreState>().unwrap();
    assert_eq!(s.constraints[0].selector.to_string(), "app=web,tier=fe");

    // No soft constraint, no node: Skip.
    let p = pod(&[]).info();
    assert!(plugin_with(vec![], &[]).pre_score(&mut CycleState::new(), &p, &[], &all).is_skip());
    let p = pod(&[("foo", "")]).constraint(tsc(1, HOST, SA, foo())).info();
    let empty = NodeList::default();
    assert!(plugin().pre_score(&mut CycleState::new(), &p, &[], &empty).is_skip());
}

#[test]
fn normalize_like_upstream() {
    // Ignored nodes get 0 and are left out of min and max; max 0 gives 100.
    let pl = plugin();
    let p = pod(&[("foo", "")]).constraint(tsc(1, "zone", SA, foo())).info();
    let all = cluster(vec![zh("node-a", "zone1"), hn("node-b"), zh("node-c", "zone2")], &[]);
    let feasible = all.list().to_vec();
    let mut state = CycleState::new();
    assert!(pl.pre_score(&mut state, &p, &convoy_api::borrowed(&feasible), &all).is_success());
    let mut raw = vec![4, 0, 1];
    assert!(pl.normalize_score(&state, &p, &mut raw).is_success());
    // 100 * (4 + 1 - s) / 4, truncated.
    assert_eq!(raw, [25, 0, 100]);
    let mut zeros = vec![0, 7, 0];
    pl.normalize_score(&state, &p, &mut zeros);
    assert_eq!(zeros, [100, 0, 100]);
    // Missing state: errors.
    assert!(pl.score(&CycleState::new(), &p, &feasible[0]).is_err());
    assert!(!pl.normalize_score(&CycleState::new(), &p, &mut raw).is_success());
}

/// PreScore scores the feasible nodes ahead, by address; a node changed in
/// place afterwards (same address, new generation) is scored from what it
/// holds then, as upstream's Score reads the node.
#[test]
fn a_node_changed_after_pre_score_is_scored_afresh() {
    let pl = plugin();
    let p = pod(&[("foo", "")]).constraint(tsc(1, HOST, SA, foo())).info();
    let all = cluster(vec![hn("node-a"), hn("node-b")], &[]);
    let mut feasible = all.list().to_vec();
    let mut state = CycleState::new();
    assert!(pl.pre_score(&mut state, &p, &convoy_api::borrowed(&feasible), &all).is_success());
    // ln(4) for two hostnames: 0 pods score 0.
    assert_eq!(pl.score(&state, &p, &feasible[0]).unwrap(), 0);
    drop(all);
    let node = Arc::get_mut(&mut feasible[0]).expect("only the feasible list holds it");
    for i in 0..3 {
        node.add_pod(info(on(&format!("p{i}"), "node-a", &[("foo", "")])));
    }
    // round(3·ln 4) = 4.
    assert_eq!(pl.score(&state, &p, &feasible[0]).unwrap(), 4);
    assert_eq!(pl.score(&state, &p, &feasible[1]).unwrap(), 0);
}
