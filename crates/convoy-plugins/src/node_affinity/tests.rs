use serde_json::{Value, json};

use convoy_api::Code;
use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_config::NodeAffinityArgs;

use super::*;
use crate::helper::testing::PreScoreOn;
use crate::helper::testing::{infos, node_obj};

/// A pod whose `spec.affinity.nodeAffinity` is the given JSON.
fn pod_with_affinity(node_affinity: Value) -> PodBuilder {
    let affinity = serde_json::from_value(json!({ "nodeAffinity": node_affinity })).unwrap();
    PodBuilder::new("p").with_spec(move |s| s.affinity = Some(affinity))
}

/// Required affinity with the given terms.
fn required(terms: Value) -> PodBuilder {
    pod_with_affinity(
        json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}),
    )
}

fn expr(key: &str, op: &str, values: &[&str]) -> Value {
    json!({"key": key, "operator": op, "values": values})
}

fn run_filter(plugin: &NodeAffinity, pod: &PodInfo, node: &NodeInfo) -> Status {
    let mut state = CycleState::new();
    let (_, s) = plugin.pre_filter(&mut state, pod, &convoy_api::NodeList::default());
    if s.is_skip() {
        return Status::success();
    }
    if !s.is_success() {
        return s;
    }
    plugin.filter(&state, pod, node)
}

#[test]
fn filter_required_affinity_and_selector() {
    let node =
        || NodeBuilder::new("node-1").label("zone", "a").label("gpu", "true").label("cores", "8");
    let cases: Vec<(&str, PodBuilder, NodeBuilder, bool)> = vec![
        ("no constraints", PodBuilder::new("p"), node(), true),
        ("nodeSelector matches", PodBuilder::new("p").node_selector("zone", "a"), node(), true),
        (
            "nodeSelector other value",
            PodBuilder::new("p").node_selector("zone", "b"),
            node(),
            false,
        ),
        (
            "nodeSelector all labels must match",
            PodBuilder::new("p").node_selector("zone", "a").node_selector("x", "y"),
            node(),
            false,
        ),
        (
            "In matches",
            required(json!([{"matchExpressions": [expr("zone", "In", &["a", "b"])]}])),
            node(),
            true,
        ),
        (
            "In no match",
            required(json!([{"matchExpressions": [expr("zone", "In", &["b"])]}])),
            node(),
            false,
        ),
        (
            "In missing label",
            required(json!([{"matchExpressions": [expr("rack", "In", &["a"])]}])),
            node(),
            false,
        ),
        (
            "NotIn matches",
            required(json!([{"matchExpressions": [expr("zone", "NotIn", &["b"])]}])),
            node(),
            true,
        ),
        (
            "NotIn excluded",
            required(json!([{"matchExpressions": [expr("zone", "NotIn", &["a"])]}])),
            node(),
            false,
        ),
        (
            "NotIn missing label matches",
            required(json!([{"matchExpressions": [expr("rack", "NotIn", &["a"])]}])),
            node(),
            true,
        ),
        (
            "Exists",
            required(json!([{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}])),
            node(),
            true,
        ),
        (
            "Exists missing",
            required(json!([{"matchExpressions": [{"key": "tpu", "operator": "Exists"}]}])),
            node(),
            false,
        ),
        (
            "DoesNotExist",
            required(json!([{"matchExpressions": [{"key": "tpu", "operator": "DoesNotExist"}]}])),
            node(),
            true,
        ),
        (
            "DoesNotExist present",
            required(json!([{"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}])),
            node(),
            false,
        ),
        (
            "Gt matches",
            required(json!([{"matchExpressions": [expr("cores", "Gt", &["4"])]}])),
            node(),
            true,
        ),
        (
            "Gt equal fails",
            required(json!([{"matchExpressions": [expr("cores", "Gt", &["8"])]}])),
            node(),
            false,
        ),
        (
            "Gt non-integer label",
            required(json!([{"matchExpressions": [expr("zone", "Gt", &["1"])]}])),
            node(),
            false,
        ),
        (
            "Gt missing label",
            required(json!([{"matchExpressions": [expr("mem", "Gt", &["1"])]}])),
            node(),
            false,
        ),
        (
            "Gt invalid value: term never matches",
            required(json!([{"matchExpressions": [expr("cores", "Gt", &["x"])]}])),
            node(),
            false,
        ),
        (
            // Upstream: "Pod with an invalid value in Affinity term won't be
            // scheduled onto the node" (values are validated as label values).
            "invalid value: term never matches",
            required(
                json!([{"matchExpressions": [expr("zone", "NotIn", &["invalid value: ___@#$%^"])]}]),
            ),
            node(),
            false,
        ),
        (
            "invalid key: term never matches",
            required(json!([{"matchExpressions": [expr("invalid key", "DoesNotExist", &[])]}])),
            node(),
            false,
        ),
        (
            "Lt matches",
            required(json!([{"matchExpressions": [expr("cores", "Lt", &["16"])]}])),
            node(),
            true,
        ),
        (
            "Lt fails",
            required(json!([{"matchExpressions": [expr("cores", "Lt", &["2"])]}])),
            node(),
            false,
        ),
        (
            "expressions ANDed",
            required(
                json!([{"matchExpressions": [expr("zone", "In", &["a"]), expr("gpu", "In", &["false"])]}]),
            ),
            node(),
            false,
        ),
        (
            "terms ORed",
            required(json!([
                {"matchExpressions": [expr("zone", "In", &["b"])]},
                {"matchExpressions": [expr("gpu", "In", &["true"])]}
            ])),
            node(),
            true,
        ),
        ("empty term matches nothing", required(json!([{}])), node(), false),
        ("empty terms list matches nothing", required(json!([])), node(), false),
        (
            "invalid term skipped, valid one matches",
            required(json!([
                {"matchExpressions": [expr("zone", "In", &[])]},
                {"matchExpressions": [expr("zone", "In", &["a"])]}
            ])),
            node(),
            true,
        ),
        (
            "matchFields In",
            required(json!([{"matchFields": [expr("metadata.name", "In", &["node-1"])]}])),
            node(),
            true,
        ),
        (
            "matchFields In other",
            required(json!([{"matchFields": [expr("metadata.name", "In", &["node-2"])]}])),
            node(),
            false,
        ),
        (
            "matchFields NotIn",
            required(json!([{"matchFields": [expr("metadata.name", "NotIn", &["node-2"])]}])),
            node(),
            true,
        ),
        (
            "matchFields NotIn self",
            required(json!([{"matchFields": [expr("metadata.name", "NotIn", &["node-1"])]}])),
            node(),
            false,
        ),
        (
            "matchFields Exists unsupported",
            required(json!([{"matchFields": [{"key": "metadata.name", "operator": "Exists"}]}])),
            node(),
            false,
        ),
        (
            "matchFields AND matchExpressions",
            required(
                json!([{"matchFields": [expr("metadata.name", "In", &["node-1"])], "matchExpressions": [expr("zone", "In", &["b"])]}]),
            ),
            node(),
            false,
        ),
        (
            "nodeSelector AND affinity: selector fails",
            required(json!([{"matchExpressions": [expr("zone", "In", &["a"])]}]))
                .node_selector("gpu", "false"),
            node(),
            false,
        ),
        (
            "nodeSelector AND affinity: both match",
            required(json!([{"matchExpressions": [expr("zone", "In", &["a"])]}]))
                .node_selector("gpu", "true"),
            node(),
            true,
        ),
        (
            "node without labels",
            PodBuilder::new("p").node_selector("zone", "a"),
            NodeBuilder::new("node-1"),
            false,
        ),
    ];
    let plugin = NodeAffinity::default();
    for (name, pod, node, fits) in cases {
        let s = run_filter(&plugin, &pod.info(), &node.info());
        if fits {
            assert!(s.is_success(), "{name}: {s}");
        } else {
            assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
            assert_eq!(s.message(), ERR_REASON_POD, "{name}");
        }
    }
}

#[test]
fn pre_filter_skip_and_node_names() {
    let plugin = NodeAffinity::default();
    let names = |v: &[&str]| Some(v.iter().map(|s| Arc::from(*s)).collect());
    type Names = Option<std::collections::HashSet<Arc<str>>>;
    let cases: Vec<(&str, PodBuilder, Code, Names)> = vec![
        ("nothing to do", PodBuilder::new("p"), Code::Skip, None),
        ("nodeSelector only", PodBuilder::new("p").node_selector("a", "b"), Code::Success, None),
        (
            "one name",
            required(json!([{"matchFields": [expr("metadata.name", "In", &["n1"])]}])),
            Code::Success,
            names(&["n1"]),
        ),
        (
            "union over terms",
            required(json!([
                {"matchFields": [expr("metadata.name", "In", &["n1", "n2"])]},
                {"matchFields": [expr("metadata.name", "In", &["n3"])]}
            ])),
            Code::Success,
            names(&["n1", "n2", "n3"]),
        ),
        (
            "intersection within a term",
            required(json!([{"matchFields": [
                expr("metadata.name", "In", &["n1", "n2"]),
                expr("metadata.name", "In", &["n2", "n3"])
            ]}])),
            Code::Success,
            names(&["n2"]),
        ),
        (
            "a term without names: all nodes",
            required(json!([
                {"matchFields": [expr("metadata.name", "In", &["n1"])]},
                {"matchExpressions": [expr("zone", "In", &["a"])]}
            ])),
            Code::Success,
            None,
        ),
        (
            "conflicting names",
            required(json!([{"matchFields": [
                expr("metadata.name", "In", &["n1"]),
                expr("metadata.name", "In", &["n2"])
            ]}])),
            Code::UnschedulableAndUnresolvable,
            None,
        ),
    ];
    for (name, pod, code, want) in cases {
        let (result, s) = plugin.pre_filter(
            &mut CycleState::new(),
            &pod.info(),
            &convoy_api::NodeList::default(),
        );
        assert_eq!(s.code(), code, "{name}");
        if code == Code::UnschedulableAndUnresolvable {
            assert_eq!(s.message(), ERR_REASON_CONFLICT, "{name}");
        }
        assert_eq!(result.and_then(|r| r.node_names), want, "{name}");
    }
}

fn added_args(added: Value) -> PluginArgs {
    PluginArgs::NodeAffinity(NodeAffinityArgs { added_affinity: Some(added) })
}

#[test]
fn added_affinity_is_enforced() {
    let args = added_args(json!({
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}
        ]}
    }));
    let plugin = NodeAffinity::new(Some(&args)).unwrap();
    let pod = PodBuilder::new("p").info();
    // PreFilter does not skip: the enforced affinity applies to every pod.
    let mut state = CycleState::new();
    assert!(plugin.pre_filter(&mut state, &pod, &convoy_api::NodeList::default()).1.is_success());
    let ok = NodeBuilder::new("n").label("pool", "batch").info();
    let bad = NodeBuilder::new("n").label("pool", "web").info();
    assert!(plugin.filter(&state, &pod, &ok).is_success());
    let s = plugin.filter(&state, &pod, &bad);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.message(), ERR_REASON_ENFORCED);
    // Both the enforced and the pod's own affinity must match.
    let pod = PodBuilder::new("p").node_selector("zone", "a").info();
    let mut state = CycleState::new();
    plugin.pre_filter(&mut state, &pod, &convoy_api::NodeList::default());
    assert_eq!(plugin.filter(&state, &pod, &ok).message(), ERR_REASON_POD);

    let invalid = added_args(json!({
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "Gt", "values": ["x"]}]}
        ]}
    }));
    assert!(NodeAffinity::new(Some(&invalid)).is_err());
    assert!(NodeAffinity::new(Some(&PluginArgs::Other(Value::Null))).is_err());
}

fn preferred(terms: Value) -> PodBuilder {
    pod_with_affinity(json!({"preferredDuringSchedulingIgnoredDuringExecution": terms}))
}

#[test]
fn score_preferred_terms() {
    // Upstream's table: node1 matches weight 2, node2 weight 2+5+? ...
    let pod = preferred(json!([
        {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}},
        {"weight": 4, "preference": {"matchExpressions": [expr("key", "In", &["value"])]}},
        {"weight": 5, "preference": {"matchExpressions": [expr("az", "In", &["az1"])]}},
        {"weight": 0, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}},
        {"weight": 7, "preference": {}}
    ]))
    .info();
    let nodes = infos(vec![
        NodeBuilder::new("n1").label("foo", "bar").info(),
        NodeBuilder::new("n2").label("foo", "bar").label("key", "value").label("az", "az1").info(),
        NodeBuilder::new("n3").label("key", "value").info(),
        NodeBuilder::new("n4").info(),
    ]);
    let plugin = NodeAffinity::default();
    let mut state = CycleState::new();
    assert!(plugin.pre_score_on(&mut state, &pod, &nodes).is_success());
    let mut scores: Vec<i64> =
        nodes.iter().map(|n| plugin.score(&state, &pod, n).unwrap()).collect();
    assert_eq!(scores, vec![2, 11, 4, 0]);
    plugin.normalize_score(&state, &pod, &mut scores);
    assert_eq!(scores, vec![18, 100, 36, 0]);

    // No preferred terms: Skip.
    assert!(
        plugin
            .pre_score(
                &mut CycleState::new(),
                &PodBuilder::new("p").info(),
                &convoy_api::borrowed(&nodes),
                &convoy_api::NodeList::default()
            )
            .is_skip()
    );
    // A bad preferred term is an error.
    let bad = preferred(
        json!([{"weight": 1, "preference": {"matchExpressions": [expr("a", "Lt", &["1", "2"])]}}]),
    )
    .info();
    assert_eq!(
        plugin
            .pre_score(
                &mut CycleState::new(),
                &bad,
                &convoy_api::borrowed(&nodes),
                &convoy_api::NodeList::default()
            )
            .code(),
        Code::Error
    );
}

#[test]
fn score_with_added_preferred_terms() {
    let args = added_args(json!({
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 3, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}}
        ]
    }));
    let plugin = NodeAffinity::new(Some(&args)).unwrap();
    let pod = PodBuilder::new("p").info();
    let nodes = infos(vec![NodeBuilder::new("n1").info(), NodeBuilder::new("n2").info()]);
    let mut state = CycleState::new();
    assert!(plugin.pre_score_on(&mut state, &pod, &nodes).is_success());
    let scores: Vec<i64> = nodes.iter().map(|n| plugin.score(&state, &pod, n).unwrap()).collect();
    assert_eq!(scores, vec![0, 3]);
}

#[test]
fn hint_on_node_change() {
    let plugin = NodeAffinity::default();
    let events = plugin.events_to_register();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event.action, ActionType::ADD | ActionType::UPDATE_NODE_LABEL);
    let hint = events[0].hint.clone().unwrap();
    let pod = required(json!([{"matchExpressions": [expr("zone", "In", &["a"])]}])).info();
    let a = || node_obj(NodeBuilder::new("n").label("zone", "a").build());
    let b = || node_obj(NodeBuilder::new("n").label("zone", "b").build());
    let cases = [
        ("added, matches", None, a(), QueueingHint::Queue),
        ("added, no match", None, b(), QueueingHint::Skip),
        ("label now matches", Some(b()), a(), QueueingHint::Queue),
        ("label no longer matches", Some(a()), b(), QueueingHint::Skip),
        ("matched already", Some(a()), a(), QueueingHint::Skip),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(hint(&pod, old.as_ref(), Some(&new)), want, "{name}");
    }
}

/// Upstream `TestNodeAffinityPriority` (`nodeaffinity/node_affinity_test.go`,
/// v1.37.2), case by case; PreScore errors are compared by code (the
/// message is Convoy's).
#[test]
fn node_affinity_priority() {
    let label1 = [("foo", "bar")];
    let label2 = [("key", "value")];
    let label3 = [("az", "az1")];
    let label4 = [("abc", "az11"), ("def", "az22")];
    let label5 = [("foo", "bar"), ("key", "value"), ("az", "az1")];
    let node = |name: &str, labels: &[(&str, &str)]| {
        labels.iter().fold(NodeBuilder::new(name), |b, (k, v)| b.label(k, v)).info()
    };
    let affinity1 = json!({"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}}
    ]});
    let affinity2 = json!({"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}},
        {"weight": 4, "preference": {"matchExpressions": [expr("key", "In", &["value"])]}},
        {"weight": 5, "preference": {"matchExpressions": [
            expr("foo", "In", &["bar"]), expr("key", "In", &["value"]), expr("az", "In", &["az1"])
        ]}}
    ]});
    let no_affinity = || PodBuilder::new("p").info();
    let broken = pod_with_affinity(json!({"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 2, "preference": {"matchExpressions": [expr("invalid key", "In", &["bar"])]}}
    ]}))
    .info();
    let added_weight3 = json!({"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 3, "preference": {"matchExpressions": [expr("key", "In", &["value"])]}}
    ]});
    // (name, pod, nodes, added affinity, run PreScore, PreScore code, scores)
    type Case<'a> = (&'a str, Arc<PodInfo>, Vec<NodeInfo>, Option<Value>, bool, Code, Vec<i64>);
    let cases: Vec<Case> = vec![
        (
            "all nodes are same priority as NodeAffinity is nil",
            no_affinity(),
            vec![node("node1", &label1), node("node2", &label2), node("node3", &label3)],
            None,
            false,
            Code::Success,
            vec![0, 0, 0],
        ),
        (
            "Skip is returned in PreScore when NodeAffinity is nil",
            no_affinity(),
            vec![node("node1", &label1)],
            None,
            true,
            Code::Skip,
            vec![],
        ),
        (
            "PreScore returns error when an incoming Pod has a broken affinity",
            broken,
            vec![node("node1", &label1)],
            None,
            true,
            Code::Error,
            vec![],
        ),
        (
            "no node matches preferred scheduling requirements in NodeAffinity of pod so all nodes' priority is zero",
            pod_with_affinity(affinity1.clone()).info(),
            vec![node("node1", &label4), node("node2", &label2), node("node3", &label3)],
            None,
            true,
            Code::Success,
            vec![0, 0, 0],
        ),
        (
            "only node1 matches the preferred scheduling requirements of pod",
            pod_with_affinity(affinity1.clone()).info(),
            vec![node("node1", &label1), node("node2", &label2), node("node3", &label3)],
            None,
            true,
            Code::Success,
            vec![100, 0, 0],
        ),
        (
            "all nodes matches the preferred scheduling requirements of pod but with different priorities",
            pod_with_affinity(affinity2.clone()).info(),
            vec![node("node1", &label1), node("node5", &label5), node("node2", &label2)],
            None,
            true,
            Code::Success,
            vec![18, 100, 36],
        ),
        (
            "added affinity",
            no_affinity(),
            vec![node("node1", &label1), node("node2", &label2)],
            Some(affinity1.clone()),
            true,
            Code::Success,
            vec![100, 0],
        ),
        (
            "added affinity and pod has default affinity",
            pod_with_affinity(affinity1.clone()).info(),
            vec![node("node1", &label1), node("node2", &label2), node("node3", &label5)],
            Some(added_weight3),
            true,
            Code::Success,
            vec![40, 60, 100],
        ),
        (
            "calculate the priorities correctly even if PreScore is not called",
            pod_with_affinity(affinity2).info(),
            vec![node("node1", &label1), node("node5", &label5), node("node2", &label2)],
            None,
            false,
            Code::Success,
            vec![18, 100, 36],
        ),
    ];
    for (name, pod, nodes, added, run_pre_score, code, want) in cases {
        let plugin = match added {
            Some(a) => NodeAffinity::new(Some(&added_args(a))).unwrap(),
            None => NodeAffinity::default(),
        };
        let nodes = infos(nodes);
        let mut state = CycleState::new();
        if run_pre_score {
            let s = plugin.pre_score_on(&mut state, &pod, &nodes);
            assert_eq!(s.code(), code, "{name}: {s}");
            if !s.is_success() {
                continue;
            }
        }
        let mut scores: Vec<i64> =
            nodes.iter().map(|n| plugin.score(&state, &pod, n).unwrap()).collect();
        assert!(plugin.normalize_score(&state, &pod, &mut scores).is_success());
        assert_eq!(scores, want, "{name}");
    }
}
