//! PreFilter and Filter over several nodes (upstream
//! `TestRequiredAffinityMultipleNodes`).

use serde_json::json;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{CycleState, FilterPlugin, NodeList, PodInfo, Status};

use super::*;

type Case = (&'static str, PodBuilder, Vec<PodBuilder>, Vec<NodeBuilder>, Result<Vec<Status>, ()>);

/// Upstream `TestRequiredAffinityMultipleNodes`.
#[test]
fn required_affinity_multiple_nodes() {
    let china = || node("node1", &[("region", "China")]);
    let china_az1 = || node("node2", &[("region", "China"), ("az", "az1")]);
    let india = || node("node3", &[("region", "India")]);
    let host = |n: &str, zone: &str| node(n, &[("region", "r1"), ("zone", zone), ("hostname", n)]);
    let anti_pod = |n: &str, terms| {
        affinity(PodBuilder::new(&format!("e-{n}")).node(n), required(vec![], terms))
    };
    let cases: Vec<Case> = vec![
        (
            "nodes in the domain of a matching pod fit",
            affinity(
                PodBuilder::new("p"),
                required(vec![term_in("foo", "region", &["bar"])], vec![]),
            ),
            vec![pod("p1", &[("foo", "bar")]).node("node1")],
            vec![china(), china_az1(), india()],
            Ok(vec![ok(), ok(), uu(AFFINITY)]),
        ),
        (
            "the first pod of a group with affinity to itself fits anywhere",
            affinity(
                pod("p", &[("foo", "bar"), SECURITYSCAN]),
                required(
                    vec![
                        term_in("foo", "zone", &["bar"]),
                        term_in("service", "zone", &["securityscan"]),
                    ],
                    vec![],
                ),
            ),
            vec![pod("p1", &[("foo", "bar")]).node("nodeA")],
            vec![
                node("nodeA", &[("zone", "az1"), ("hostname", "h1")]),
                node("nodeB", &[("zone", "az2"), ("hostname", "h2")]),
            ],
            Ok(vec![ok(), ok()]),
        ),
        (
            "the first pod still needs the topology keys",
            affinity(
                pod("p", &[("foo", "bar"), SECURITYSCAN]),
                required(
                    vec![
                        term_in("foo", "zone", &["bar"]),
                        term_in("service", "zone", &["securityscan"]),
                    ],
                    vec![],
                ),
            ),
            vec![pod("p1", &[("foo", "bar")]).node("nodeA")],
            vec![
                node("nodeA", &[("zoneLabel", "az1"), ("hostname", "h1")]),
                node("nodeB", &[("zoneLabel", "az2"), ("hostname", "h2")]),
            ],
            Ok(vec![uu(AFFINITY), uu(AFFINITY)]),
        ),
        (
            "anti-affinity rejects the whole domain",
            affinity(
                PodBuilder::new("p"),
                required(vec![], vec![term_in("foo", "region", &["abc"])]),
            ),
            vec![pod("p1", &[("foo", "abc")]).node("nodeA")],
            vec![host("nodeA", "z1"), host("nodeB", "z1")],
            Ok(vec![u(ANTI), u(ANTI)]),
        ),
        (
            "anti-affinity: a pod matching any term counts",
            affinity(
                PodBuilder::new("p"),
                required(
                    vec![],
                    vec![
                        term_in("foo", "region", &["abc"]),
                        term_in("service", "zone", &["securityscan"]),
                    ],
                ),
            ),
            vec![pod("p1", &[("foo", "abc"), SECURITYSCAN]).node("nodeA")],
            vec![host("nodeA", "z1"), host("nodeB", "z2")],
            Ok(vec![u(ANTI), u(ANTI)]),
        ),
        (
            "anti-affinity: a node without the key, and a pod in another namespace",
            affinity(
                pod("p", &[("foo", "123")]).namespace("NS1"),
                required(vec![], vec![term_in("foo", "region", &["bar"])]),
            ),
            vec![
                pod("p1", &[("foo", "bar")]).namespace("NS1").node("node1"),
                affinity(
                    PodBuilder::new("p2").namespace("NS2").node("node3"),
                    required(vec![], vec![term_in("foo", "region", &["123"])]),
                ),
            ],
            vec![china(), china_az1(), india()],
            Ok(vec![u(ANTI), u(ANTI), ok()]),
        ),
        (
            "an existing pod's term on a missing topology key counts nowhere: Skip",
            pod("p", &[("foo", "")]),
            vec![anti_pod("nodeA", vec![term_exists("foo", "invalid-node-label")])],
            vec![host("nodeA", "z1"), host("nodeB", "z1")],
            Err(()),
        ),
        (
            "the pod's anti-affinity term on a missing topology key rejects nothing",
            affinity(
                PodBuilder::new("p"),
                required(vec![], vec![term_exists("foo", "invalid-node-label")]),
            ),
            vec![pod("p1", &[("foo", "")]).node("nodeA")],
            vec![host("nodeA", "z1"), host("nodeB", "z1")],
            Ok(vec![ok(), ok()]),
        ),
        (
            "existing pods' terms are checked one by one",
            pod("p", &[("foo", ""), ("bar", "")]),
            vec![
                anti_pod("nodeA", vec![term_exists("foo", "zone")]),
                affinity(
                    PodBuilder::new("e2").node("nodeA"),
                    required(vec![], vec![term_exists("bar", "region")]),
                ),
            ],
            vec![host("nodeA", "z1"), host("nodeB", "z2")],
            Ok(vec![u(EXISTING), u(EXISTING)]),
        ),
        (
            "existing pod's terms: a term counts when its key and selector match",
            pod("p", &[("foo", ""), ("bar", "")]),
            vec![anti_pod(
                "nodeA",
                vec![term_exists("foo", "invalid-node-label"), term_exists("bar", "zone")],
            )],
            vec![host("nodeA", "z1"), host("nodeB", "z2")],
            Ok(vec![u(EXISTING), ok()]),
        ),
        (
            "the pod's terms: a term counts when its key and selector match",
            affinity(
                PodBuilder::new("p"),
                required(
                    vec![],
                    vec![term_exists("foo", "invalid-node-label"), term_exists("bar", "zone")],
                ),
            ),
            vec![pod("podA", &[("foo", ""), ("bar", "")]).node("nodeA")],
            vec![host("nodeA", "z1"), host("nodeB", "z2")],
            Ok(vec![u(ANTI), ok()]),
        ),
        (
            "existing pods on two nodes leave only the third",
            pod("p", &[("foo", ""), ("bar", "")]),
            vec![
                anti_pod("nodeA", vec![term_exists("foo", "zone"), term_exists("labelA", "zone")]),
                anti_pod("nodeB", vec![term_exists("bar", "zone"), term_exists("labelB", "zone")]),
            ],
            vec![host("nodeA", "z1"), host("nodeB", "z2"), host("nodeC", "z3")],
            Ok(vec![u(EXISTING), u(EXISTING), ok()]),
        ),
        (
            "affinity: one pod matches all terms",
            affinity(
                PodBuilder::new("p"),
                required(vec![term_exists("foo", "region"), term_exists("bar", "zone")], vec![]),
            ),
            vec![pod("pod1", &[("foo", ""), ("bar", "")]).node("nodeA")],
            vec![host("nodeA", "z1"), host("nodeB", "z1")],
            Ok(vec![ok(), ok()]),
        ),
        (
            "affinity: all terms must be matched by the same pod",
            affinity(
                PodBuilder::new("p"),
                required(vec![term_exists("foo", "region"), term_exists("bar", "zone")], vec![]),
            ),
            vec![
                pod("pod1", &[("foo", "")]).node("nodeA"),
                pod("pod2", &[("bar", "")]).node("nodeB"),
            ],
            vec![host("nodeA", "z1"), host("nodeB", "z2")],
            Ok(vec![uu(AFFINITY), uu(AFFINITY)]),
        ),
        (
            "hostname affinity",
            affinity(PodBuilder::new("p"), required(vec![term_exists("foo", HOSTNAME)], vec![])),
            vec![pod("pod1", &[("foo", "")]).node("nodeA")],
            vec![node("nodeA", &[(HOSTNAME, "nodeA")]), node("nodeB", &[(HOSTNAME, "nodeB")])],
            Ok(vec![ok(), uu(AFFINITY)]),
        ),
        (
            "hostname anti-affinity",
            affinity(PodBuilder::new("p"), required(vec![], vec![term_exists("foo", HOSTNAME)])),
            vec![pod("pod1", &[("foo", "")]).node("nodeA")],
            vec![node("nodeA", &[(HOSTNAME, "nodeA")]), node("nodeB", &[(HOSTNAME, "nodeB")])],
            Ok(vec![u(ANTI), ok()]),
        ),
    ];
    for (name, incoming, pods, nodes, want) in cases {
        let nodes = snapshot(nodes, &pods);
        match (run_filter(&incoming, &nodes), want) {
            (Err(s), Err(())) => assert!(s.is_skip(), "{name}: {s}"),
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

/// Assumed and terminating pods count like bound ones (upstream takes the
/// snapshot's pods as they are).
#[test]
fn terminating_pods_count() {
    let terminating = pod("t", &[SECURITYSCAN]).node("a");
    let mut t = terminating.build();
    t.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
    let mut a = node("a", &[(HOSTNAME, "a")]).info();
    a.add_pod(std::sync::Arc::new(PodInfo::new(std::sync::Arc::new(t)).unwrap()));
    let nodes = NodeList::of([a, node("b", &[(HOSTNAME, "b")]).info()]);
    let incoming = affinity(
        PodBuilder::new("p"),
        required(vec![], vec![term_in("service", HOSTNAME, &["securityscan"])]),
    );
    assert_eq!(run_filter(&incoming, &nodes).unwrap(), vec![u(ANTI), ok()]);
}

#[test]
fn filter_without_prefilter_state_is_an_error() {
    let n = node("a", &[]).info();
    let s = plugin().filter(&CycleState::new(), &PodBuilder::new("p").info(), &n);
    assert_eq!(s.code(), convoy_api::Code::Error);
}
