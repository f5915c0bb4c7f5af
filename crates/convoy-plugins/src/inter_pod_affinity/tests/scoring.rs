//! PreScore, Score and NormalizeScore (upstream `TestPreferredAffinity`,
//! `TestPreferredAffinityWithHardPodAffinitySymmetricWeight`).

use serde_json::{Value, json};

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{Code, CycleState, NodeInfoLister, NodeList, PreScorePlugin, ScorePlugin, Status};

use super::super::scoring::normalize;
use super::*;

/// PreScore, Score on every node and NormalizeScore: Err with PreScore's
/// status when it is not Success.
fn run(p: &InterPodAffinity, pod: &PodBuilder, nodes: &NodeList) -> Result<Vec<i64>, Status> {
    let pod = info(pod);
    let mut state = CycleState::new();
    let s = p.pre_score(&mut state, &pod, &convoy_api::borrowed(nodes.list()), nodes);
    if !s.is_success() {
        return Err(s);
    }
    let mut scores: Vec<i64> =
        nodes.list().iter().map(|n| p.score(&state, &pod, n).unwrap()).collect();
    assert!(p.normalize_score(&state, &pod, &mut scores).is_success());
    Ok(scores)
}

const S1: (&str, &str) = ("security", "S1");
const S2: (&str, &str) = ("security", "S2");
const CHINA: (&str, &str) = ("region", "China");
const INDIA: (&str, &str) = ("region", "India");
const AZ1: (&str, &str) = ("az", "az1");
const AZ2: (&str, &str) = ("az", "az2");

fn security_in(topology_key: &str, values: &[&str]) -> Value {
    term_in("security", topology_key, values)
}

/// Upstream's fixtures.
fn stay_with_s1_in_region() -> Value {
    preferred(vec![weighted(5, security_in("region", &["S1"]))], vec![])
}
fn stay_with_s2_in_region() -> Value {
    preferred(vec![weighted(6, security_in("region", &["S2"]))], vec![])
}
fn affinity3() -> Value {
    preferred(
        vec![
            weighted(
                8,
                term(
                    "region",
                    vec![expr("security", "NotIn", &["S1"]), expr("security", "In", &["S2"])],
                ),
            ),
            weighted(
                2,
                term(
                    "region",
                    vec![expr("security", "Exists", &[]), expr("wrongkey", "DoesNotExist", &[])],
                ),
            ),
        ],
        vec![],
    )
}
fn hard_affinity() -> Value {
    required(
        vec![
            security_in("region", &["S1", "value2"]),
            term(
                "region",
                vec![expr("security", "Exists", &[]), expr("wrongkey", "DoesNotExist", &[])],
            ),
        ],
        vec![],
    )
}
fn away_from_in_az(value: &str) -> Value {
    preferred(vec![], vec![weighted(5, security_in("az", &[value]))])
}
fn stay_with_s1_in_region_away_from_s2_in_az() -> Value {
    preferred(
        vec![weighted(8, security_in("region", &["S1"]))],
        vec![weighted(5, security_in("az", &["S2"]))],
    )
}
/// A weighted S1 term in region with a namespace selector (and, for
/// `listed`, the namespace `subteam2.team2`).
fn ns_selector_term(selector: Value, listed: bool, anti: bool) -> Value {
    let mut t = with(security_in("region", &["S1"]), "namespaceSelector", selector);
    if listed {
        t = with(t, "namespaces", json!(["subteam2.team2"]));
    }
    let terms = vec![weighted(5, t)];
    if anti { preferred(vec![], terms) } else { preferred(terms, vec![]) }
}
fn team1(op: &str) -> Value {
    json!({"matchExpressions": [expr("team", op, &["team1"])]})
}

/// An existing pod on a node, with labels.
fn on(n: &str, labels: &[(&str, &str)]) -> PodBuilder {
    pod("e", labels).node(n)
}
/// An existing pod on a node, with `spec.affinity`.
fn on_with(n: &str, labels: &[(&str, &str)], a: Value) -> PodBuilder {
    affinity(on(n, labels), a)
}
fn nodes_of(labels: &[&[(&str, &str)]]) -> Vec<NodeBuilder> {
    labels.iter().enumerate().map(|(i, l)| node(&format!("node{}", i + 1), l)).collect()
}

/// Upstream `TestPreferredAffinity`; `Err(code)` expects PreScore to return
/// that code.
#[test]
fn preferred_affinity() {
    let china_az1: &[(&str, &str)] = &[CHINA, AZ1];
    let incoming = |a: Option<Value>, labels: &[(&str, &str)]| {
        let b = pod("p", labels);
        match a {
            Some(a) => affinity(b, a),
            None => b,
        }
    };
    let ns = |b: PodBuilder, n: &str| b.namespace(n);
    type Case =
        (&'static str, PodBuilder, Vec<PodBuilder>, Vec<NodeBuilder>, bool, Result<Vec<i64>, Code>);
    let cases: Vec<Case> = vec![
        (
            "no affinity anywhere: Skip",
            incoming(None, &[S1]),
            vec![],
            nodes_of(&[&[CHINA], &[INDIA], &[AZ1]]),
            false,
            Err(Code::Skip),
        ),
        (
            "affinity: matching pod in a domain of the key",
            incoming(Some(stay_with_s1_in_region()), &[S1]),
            vec![on("node1", &[S1]), on("node2", &[S2]), on("node3", &[S1])],
            nodes_of(&[&[CHINA], &[INDIA], &[AZ1]]),
            false,
            Ok(vec![100, 0, 0]),
        ),
        (
            "affinity: every node of the domain scores the same",
            incoming(Some(stay_with_s1_in_region()), &[]),
            vec![on("node1", &[S1])],
            nodes_of(&[&[CHINA], china_az1, &[INDIA]]),
            false,
            Ok(vec![100, 100, 0]),
        ),
        (
            "affinity: the domain with more matching pods scores higher",
            incoming(Some(stay_with_s2_in_region()), &[S1]),
            vec![
                on("node1", &[S2]),
                on("node1", &[S2]),
                on("node2", &[S2]),
                on("node3", &[S2]),
                on("node4", &[S2]),
                on("node5", &[S2]),
            ],
            nodes_of(&[&[CHINA], &[INDIA], &[CHINA], &[CHINA], &[INDIA]]),
            false,
            Ok(vec![100, 0, 100, 100, 0]),
        ),
        (
            "affinity: several operators, some terms not matching",
            incoming(Some(affinity3()), &[S1]),
            vec![on("node1", &[S1]), on("node2", &[S2]), on("node3", &[S1])],
            nodes_of(&[&[CHINA], &[INDIA], &[AZ1]]),
            false,
            Ok(vec![20, 100, 0]),
        ),
        (
            "symmetry: existing pods' preferred affinity",
            incoming(None, &[S2]),
            vec![
                on_with("node1", &[S1], stay_with_s1_in_region()),
                on_with("node2", &[S2], stay_with_s2_in_region()),
            ],
            nodes_of(&[&[CHINA], &[INDIA], &[AZ1]]),
            false,
            Ok(vec![0, 100, 0]),
        ),
        (
            "symmetry: existing pod's affinity with a namespace selector",
            ns(incoming(None, &[S1]), "subteam1.team1"),
            vec![
                on_with("node1", &[S1], ns_selector_term(team1("In"), true, false)),
                on_with("node2", &[S2], stay_with_s2_in_region()),
            ],
            nodes_of(&[&[CHINA], &[INDIA], &[AZ1]]),
            false,
            Ok(vec![100, 0, 0]),
        ),
        (
            "symmetry: existing pod's anti-affinity with a namespace selector",
            ns(incoming(None, &[S1]), "subteam1.team1"),
            vec![
                on_with("node1", &[S1], ns_selector_term(team1("In"), true, true)),
                on_with("node2", &[S2], stay_with_s2_in_region()),
            ],
            nodes_of(&[&[CHINA], &[INDIA], &[AZ1]]),
            false,
            Ok(vec![0, 100, 100]),
        ),
        (
            "symmetry: existing pods' required affinity (hardPodAffinityWeight)",
            incoming(None, &[S1]),
            vec![
                on_with("node1", &[S1], hard_affinity()),
                on_with("node2", &[S2], hard_affinity()),
            ],
            nodes_of(&[&[CHINA], &[INDIA], &[AZ1]]),
            false,
            Ok(vec![100, 100, 0]),
        ),
        (
            "anti-affinity: a node with a matching pod scores low",
            incoming(Some(away_from_in_az("S1")), &[S1]),
            vec![on("node1", &[S1]), on("node2", &[S2])],
            nodes_of(&[&[AZ1], &[CHINA]]),
            false,
            Ok(vec![0, 100]),
        ),
        (
            "anti-affinity: a node without the key scores high",
            incoming(Some(away_from_in_az("S1")), &[S1]),
            vec![on("node1", &[S1]), on("node2", &[S1])],
            nodes_of(&[&[AZ1], &[CHINA]]),
            false,
            Ok(vec![0, 100]),
        ),
        (
            "anti-affinity symmetry",
            incoming(None, &[S2]),
            vec![
                on_with("node1", &[S1], away_from_in_az("S2")),
                on_with("node2", &[S2], away_from_in_az("S1")),
            ],
            nodes_of(&[&[AZ1], &[AZ2]]),
            false,
            Ok(vec![0, 100]),
        ),
        (
            "affinity and anti-affinity",
            incoming(Some(stay_with_s1_in_region_away_from_s2_in_az()), &[S1]),
            vec![on("node1", &[S1]), on("node2", &[S1])],
            nodes_of(&[&[CHINA], &[AZ1]]),
            false,
            Ok(vec![100, 0]),
        ),
        (
            "affinity, anti-affinity and symmetry",
            incoming(Some(stay_with_s1_in_region_away_from_s2_in_az()), &[S1]),
            vec![
                on("node1", &[S1]),
                on("node2", &[S2]),
                on_with("node3", &[], stay_with_s1_in_region_away_from_s2_in_az()),
                on_with("node4", &[], away_from_in_az("S1")),
            ],
            nodes_of(&[&[CHINA], &[AZ1], &[INDIA], &[AZ2]]),
            false,
            Ok(vec![100, 0, 100, 0]),
        ),
        (
            "only some nodes of a domain host pods with affinity",
            incoming(None, &[S1]),
            vec![
                on("node1", &[S1]),
                on_with("node2", &[], stay_with_s1_in_region_away_from_s2_in_az()),
            ],
            nodes_of(&[&[CHINA], &[CHINA]]),
            false,
            Ok(vec![0, 0]),
        ),
        (
            "unparsable affinity fails PreScore",
            incoming(
                Some(preferred(
                    vec![weighted(8, security_in("region", &["{{.bad-value.}}"]))],
                    vec![],
                )),
                &[],
            ),
            vec![],
            nodes_of(&[&[CHINA], &[CHINA]]),
            false,
            Err(Code::Error),
        ),
        (
            "the pod's terms with a namespace selector",
            ns(incoming(Some(ns_selector_term(team1("In"), true, false)), &[S1]), "subteam1.team1"),
            vec![
                on("node1", &[S1]).namespace("subteam1.team1"),
                on("node1", &[S1]).namespace("subteam1.team1"),
                on("node1", &[S1]).namespace("subteam1.team2"),
                on("node2", &[S1]).namespace("subteam2.team1"),
            ],
            nodes_of(&[&[CHINA], &[INDIA]]),
            false,
            Ok(vec![100, 0]),
        ),
        (
            "the pod's anti-affinity with namespace selector and namespaces",
            ns(incoming(Some(ns_selector_term(team1("In"), true, true)), &[S1]), "subteam1.team1"),
            vec![
                on("node1", &[S1]).namespace("subteam1.team1"),
                on("node1", &[S1]).namespace("subteam1.team1"),
                on("node1", &[S1]).namespace("subteam2.team2"),
                on("node2", &[S1]).namespace("subteam2.team1"),
            ],
            nodes_of(&[&[CHINA], &[INDIA]]),
            false,
            Ok(vec![0, 100]),
        ),
        (
            "the pod's affinity with a negative namespace selector",
            ns(
                incoming(Some(ns_selector_term(team1("NotIn"), false, false)), &[S1]),
                "subteam1.team1",
            ),
            vec![
                on("node1", &[S1]).namespace("subteam1.team1"),
                on("node1", &[S1]).namespace("subteam1.team1"),
                on("node2", &[S1]).namespace("subteam1.team2"),
            ],
            nodes_of(&[&[CHINA], &[INDIA]]),
            false,
            Ok(vec![0, 100]),
        ),
        (
            "the pod's anti-affinity with a negative namespace selector",
            ns(
                incoming(Some(ns_selector_term(team1("NotIn"), false, true)), &[S1]),
                "subteam1.team1",
            ),
            vec![
                on("node1", &[S1]).namespace("subteam1.team1"),
                on("node1", &[S1]).namespace("subteam1.team1"),
                on("node2", &[S1]).namespace("subteam1.team2"),
            ],
            nodes_of(&[&[CHINA], &[INDIA]]),
            false,
            Ok(vec![100, 0]),
        ),
        (
            "ignorePreferredTermsOfExistingPods: Skip",
            incoming(None, &[S2]),
            vec![
                on_with("node1", &[S1], stay_with_s1_in_region_away_from_s2_in_az()),
                on_with("node2", &[S2], stay_with_s2_in_region()),
            ],
            nodes_of(&[&[CHINA], &[INDIA]]),
            true,
            Err(Code::Skip),
        ),
        (
            "existing pods' preferred terms count by default",
            incoming(None, &[S2]),
            vec![
                on_with("node1", &[S1], stay_with_s1_in_region_away_from_s2_in_az()),
                on_with("node2", &[S2], stay_with_s2_in_region()),
            ],
            nodes_of(&[&[CHINA], &[INDIA]]),
            false,
            Ok(vec![0, 100]),
        ),
        ("no nodes: Skip", incoming(None, &[S2]), vec![], vec![], false, Err(Code::Skip)),
    ];
    for (name, pod, pods, nodes, ignore, want) in cases {
        let p = plugin_with(InterPodAffinityArgs {
            ignore_preferred_terms_of_existing_pods: ignore,
            ..Default::default()
        });
        let got = run(&p, &pod, &snapshot(nodes, &pods)).map_err(|s| s.code());
        assert_eq!(got, want, "{name}");
    }
}

/// `ignorePreferredTermsOfExistingPods` only skips pods without preferred
/// terms: with terms, existing pods' preferred terms still count.
#[test]
fn ignore_preferred_terms_keeps_them_for_pods_with_terms() {
    let p = plugin_with(InterPodAffinityArgs {
        ignore_preferred_terms_of_existing_pods: true,
        ..Default::default()
    });
    let incoming = affinity(pod("p", &[S2]), away_from_in_az("nothing"));
    let pods = [on_with("node1", &[S1], stay_with_s2_in_region()), on("node3", &[])];
    let nodes = nodes_of(&[&[CHINA], &[INDIA], &[AZ1]]);
    assert_eq!(run(&p, &incoming, &snapshot(nodes, &pods)), Ok(vec![100, 0, 0]));
}

/// Upstream `TestPreferredAffinityWithHardPodAffinitySymmetricWeight`.
#[test]
fn hard_pod_affinity_weight() {
    let hard = || {
        required(
            vec![with(
                with(
                    term_in("service", "region", &["S1"]),
                    "namespaces",
                    json!(["default", "subteam2.team2"]),
                ),
                "namespaceSelector",
                team1("In"),
            )],
            vec![],
        )
    };
    let existing = || vec![on_with("node1", &[], hard()), on_with("node2", &[], hard())];
    let nodes = || nodes_of(&[&[CHINA], &[INDIA], &[AZ1]]);
    let service_s1 = |ns: &str| pod("p", &[("service", "S1")]).namespace(ns);
    type Case = (&'static str, PodBuilder, i32, Result<Vec<i64>, Code>);
    let cases: Vec<Case> = vec![
        ("default weight", service_s1("default"), 1, Ok(vec![100, 100, 0])),
        ("zero weight: Skip", service_s1("default"), 0, Err(Code::Skip)),
        ("no matching namespace: Skip", service_s1("subteam1.team2"), 1, Err(Code::Skip)),
        ("matching namespace selector", service_s1("subteam1.team1"), 1, Ok(vec![100, 100, 0])),
        ("matching namespaces", service_s1("subteam2.team2"), 1, Ok(vec![100, 100, 0])),
    ];
    for (name, pod, weight, want) in cases {
        let p = plugin_with(InterPodAffinityArgs {
            hard_pod_affinity_weight: weight,
            ..Default::default()
        });
        let got = run(&p, &pod, &snapshot(nodes(), &existing())).map_err(|s| s.code());
        assert_eq!(got, want, "{name}");
    }
}

/// Raw scores may be negative; normalization maps min..max to 0..100 in
/// floating point and truncates, as upstream.
#[test]
fn normalization_as_upstream() {
    let cases: [(&[i64], &[i64]); 5] = [
        (&[-5, 0, 5], &[0, 50, 100]),
        (&[-10, -3, -1], &[0, 77, 100]),
        (&[2, 2, 2], &[0, 0, 0]),
        (&[1, 2, 4], &[0, 33, 100]),
        (&[], &[]),
    ];
    for (input, want) in cases {
        let mut s = input.to_vec();
        normalize(&mut s);
        assert_eq!(s, want, "{input:?}");
    }
}

/// A weight that sums to 0 still counts as a match: PreScore does not Skip
/// and every node scores 0 after normalization (upstream's non-empty score
/// map).
#[test]
fn terms_cancelling_out_do_not_skip() {
    let a = preferred(
        vec![weighted(5, security_in("region", &["S1"]))],
        vec![weighted(5, security_in("region", &["S1"]))],
    );
    let incoming = affinity(pod("p", &[]), a);
    let list = snapshot(nodes_of(&[&[CHINA], &[INDIA]]), &[on("node1", &[S1])]);
    assert_eq!(run(&plugin(), &incoming, &list), Ok(vec![0, 0]));
}
