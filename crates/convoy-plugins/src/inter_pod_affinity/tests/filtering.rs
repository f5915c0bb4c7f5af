//! PreFilter and Filter on one node (upstream `TestRequiredAffinitySingleNode`).

use serde_json::json;

use convoy_api::Status;
use convoy_api::testing::PodBuilder;

use super::*;

/// A case's expectation: Filter's status on node1, or `Err(())` when
/// PreFilter skips.
type Want = Result<Status, ()>;
type Case = (&'static str, PodBuilder, Vec<PodBuilder>, Want);

/// Upstream `TestRequiredAffinitySingleNode`: node1 (region r1, zone z11);
/// `Err(())` expects PreFilter to Skip.
#[test]
fn required_affinity_single_node() {
    let node1 = || vec![node("node1", &[("region", "r1"), ("zone", "z11")]), node("node2", &[])];
    let existing = || pod("pod", &[SECURITYSCAN]).node("node1");
    let with_anti = |labels: &[(&str, &str)], terms: Vec<serde_json::Value>| {
        affinity(pod("e", labels).node("node1"), required(vec![], terms))
    };
    let ns_term = |ns_selector| {
        with(
            term_in("service", "region", &["securityscan", "value2"]),
            "namespaceSelector",
            ns_selector,
        )
    };
    let team1 = json!({"matchExpressions": [expr("team", "In", &["team1"])]});
    let cases: Vec<Case> = vec![
        ("no affinity and no pods: Skip", PodBuilder::new("p"), vec![], Err(())),
        (
            "affinity In matches the existing pod",
            affinity(
                pod("p", &[S1]),
                required(vec![term_in("service", "region", &["securityscan", "value2"])], vec![]),
            ),
            vec![existing()],
            Ok(ok()),
        ),
        (
            "affinity NotIn matches the existing pod",
            affinity(
                pod("p", &[S1]),
                required(
                    vec![term(
                        "region",
                        vec![expr("service", "NotIn", &["securityscan3", "value3"])],
                    )],
                    vec![],
                ),
            ),
            vec![existing()],
            Ok(ok()),
        ),
        (
            "affinity in another namespace",
            affinity(
                pod("p", &[S1]),
                required(
                    vec![with(
                        term_in("service", "", &["securityscan", "value2"]),
                        "namespaces",
                        json!(["DiffNameSpace"]),
                    )],
                    vec![],
                ),
            ),
            vec![pod("pod", &[SECURITYSCAN]).namespace("ns").node("node1")],
            Ok(uu(AFFINITY)),
        ),
        (
            "affinity selector matches no pod",
            affinity(
                pod("p", &[SECURITYSCAN]),
                required(vec![term_in("service", "", &["antivirusscan", "value2"])], vec![]),
            ),
            vec![existing()],
            Ok(uu(AFFINITY)),
        ),
        (
            "several terms with different operators",
            affinity(
                pod("p", &[S1]),
                required(
                    vec![
                        term(
                            "region",
                            vec![
                                expr("service", "Exists", &[]),
                                expr("wrongkey", "DoesNotExist", &[]),
                            ],
                        ),
                        term(
                            "region",
                            vec![
                                expr("service", "In", &["securityscan"]),
                                expr("service", "NotIn", &["WrongValue"]),
                            ],
                        ),
                    ],
                    vec![],
                ),
            ),
            vec![existing()],
            Ok(ok()),
        ),
        (
            "requirements are ANDed",
            affinity(
                pod("p", &[S1]),
                required(
                    vec![
                        term(
                            "region",
                            vec![
                                expr("service", "Exists", &[]),
                                expr("wrongkey", "DoesNotExist", &[]),
                            ],
                        ),
                        term(
                            "region",
                            vec![
                                expr("service", "In", &["securityscan2"]),
                                expr("service", "NotIn", &["WrongValue"]),
                            ],
                        ),
                    ],
                    vec![],
                ),
            ),
            vec![existing()],
            Ok(uu(AFFINITY)),
        ),
        (
            "affinity and anti-affinity satisfied",
            affinity(
                pod("p", &[S1]),
                required(
                    vec![term_in("service", "region", &["securityscan", "value2"])],
                    vec![term_in("service", "node", &["antivirusscan", "value2"])],
                ),
            ),
            vec![existing()],
            Ok(ok()),
        ),
        (
            "affinity, anti-affinity and symmetry satisfied",
            affinity(
                pod("p", &[S1]),
                required(
                    vec![term_in("service", "region", &["securityscan", "value2"])],
                    vec![term_in("service", "node", &["antivirusscan", "value2"])],
                ),
            ),
            vec![with_anti(
                &[SECURITYSCAN],
                vec![term_in("service", "node", &["antivirusscan", "value2"])],
            )],
            Ok(ok()),
        ),
        (
            "anti-affinity not satisfied",
            affinity(
                pod("p", &[S1]),
                required(
                    vec![term_in("service", "region", &["securityscan", "value2"])],
                    vec![term_in("service", "zone", &["securityscan", "value2"])],
                ),
            ),
            vec![existing()],
            Ok(u(ANTI)),
        ),
        (
            "symmetry not satisfied",
            affinity(
                pod("p", &[SECURITYSCAN]),
                required(
                    vec![term_in("service", "region", &["securityscan", "value2"])],
                    vec![term_in("service", "node", &["antivirusscan", "value2"])],
                ),
            ),
            vec![with_anti(
                &[SECURITYSCAN],
                vec![term_in("service", "zone", &["securityscan", "value2"])],
            )],
            Ok(u(EXISTING)),
        ),
        (
            "the pod does not match its own NotIn term and no pod matches it",
            affinity(
                pod("p", &[SECURITYSCAN]),
                required(
                    vec![term(
                        "region",
                        vec![expr("service", "NotIn", &["securityscan", "value2"])],
                    )],
                    vec![],
                ),
            ),
            vec![pod("pod", &[SECURITYSCAN]).node("node2")],
            Ok(uu(AFFINITY)),
        ),
        (
            "an existing pod's anti-affinity applies to a pod without terms",
            pod("p", &[SECURITYSCAN]),
            vec![with_anti(
                &[SECURITYSCAN],
                vec![term_in("service", "zone", &["securityscan", "value2"])],
            )],
            Ok(u(EXISTING)),
        ),
        (
            "an existing pod's anti-affinity the pod does not match: Skip",
            pod("p", &[SECURITYSCAN]),
            vec![with_anti(
                &[SECURITYSCAN],
                vec![term("zone", vec![expr("service", "NotIn", &["securityscan", "value2"])])],
            )],
            Err(()),
        ),
        (
            "anti-affinity violated before symmetry is checked",
            affinity(
                pod("p", &[SECURITYSCAN]),
                required(
                    vec![],
                    vec![term_exists("service", "region"), term_exists("security", "region")],
                ),
            ),
            vec![with_anti(&[S1], vec![term_exists("security", "zone")])],
            Ok(u(ANTI)),
        ),
        (
            "symmetry a1: partial matches both ways",
            affinity(
                pod("p", &[SECURITYSCAN]),
                required(
                    vec![],
                    vec![term_exists("service", "zone"), term_exists("security", "zone")],
                ),
            ),
            vec![with_anti(&[S1], vec![term_exists("security", "zone")])],
            Ok(u(ANTI)),
        ),
        (
            "symmetry a2: partial matches both ways",
            affinity(pod("p", &[S1]), required(vec![], vec![term_exists("security", "zone")])),
            vec![with_anti(
                &[SECURITYSCAN],
                vec![term_exists("service", "zone"), term_exists("security", "zone")],
            )],
            Ok(u(EXISTING)),
        ),
        (
            "symmetry b2: partial matches both ways",
            affinity(
                pod("p", &[("def", ""), ("xyz", "")]),
                required(vec![], vec![term_exists("abc", "zone"), term_exists("def", "zone")]),
            ),
            vec![with_anti(
                &[("abc", ""), ("xyz", "")],
                vec![term_exists("abc", "zone"), term_exists("def", "zone")],
            )],
            Ok(u(ANTI)),
        ),
        (
            "affinity with a namespaceSelector",
            affinity(pod("p", &[S1]), required(vec![ns_term(team1.clone())], vec![])),
            vec![pod("pod", &[SECURITYSCAN]).namespace("subteam1.team1").node("node1")],
            Ok(ok()),
        ),
        (
            "affinity with a namespaceSelector matching no pod's namespace",
            affinity(pod("p", &[S1]), required(vec![ns_term(team1.clone())], vec![])),
            vec![pod("pod", &[SECURITYSCAN]).namespace("subteam1.team2").node("node1")],
            Ok(uu(AFFINITY)),
        ),
        (
            "anti-affinity with a namespaceSelector",
            affinity(
                pod("p", &[S1]).namespace("subteam1.team1"),
                required(vec![], vec![with(ns_term(team1.clone()), "topologyKey", json!("zone"))]),
            ),
            vec![pod("pod", &[SECURITYSCAN]).namespace("subteam2.team1").node("node1")],
            Ok(u(ANTI)),
        ),
        (
            "anti-affinity with the empty namespaceSelector selects every namespace",
            affinity(
                pod("p", &[S1]).namespace("subteam1.team1"),
                required(vec![], vec![with(ns_term(json!({})), "topologyKey", json!("zone"))]),
            ),
            vec![pod("pod", &[SECURITYSCAN]).namespace("subteam2.team1").node("node1")],
            Ok(u(ANTI)),
        ),
        (
            "anti-affinity with a namespaceSelector matching no pod's namespace",
            affinity(
                pod("p", &[S1]).namespace("subteam1.team1"),
                required(vec![], vec![with(ns_term(team1), "topologyKey", json!("zone"))]),
            ),
            vec![pod("pod", &[SECURITYSCAN]).namespace("subteam1.team2").node("node1")],
            Ok(ok()),
        ),
    ];
    for (name, incoming, pods, want) in cases {
        let nodes = snapshot(node1(), &pods);
        match (run_filter(&incoming, &nodes), want) {
            (Err(s), Err(())) => assert!(s.is_skip(), "{name}: {s}"),
            (Ok(got), Ok(want)) => assert_eq!(got[0], want, "{name}"),
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn unparsable_terms_fail_prefilter() {
    for (aff, anti) in [
        (vec![term_in("service", "region", &["{{.bad-value.}}"])], vec![]),
        (
            vec![term_in("service", "region", &["foo"])],
            vec![term_in("service", "node", &["{{.bad-value.}}"])],
        ),
    ] {
        let incoming = affinity(pod("p", &[SECURITYSCAN]), required(aff, anti));
        let s = run_filter(&incoming, &snapshot(vec![node("node1", &[])], &[])).unwrap_err();
        assert_eq!(s.code(), convoy_api::Code::UnschedulableAndUnresolvable);
        let want = r#"values[service]: Invalid value: "{{.bad-value.}}""#;
        assert!(s.message().starts_with("parsing pod: required"), "{s}");
        assert!(s.message().contains(want), "{s}");
    }
}
