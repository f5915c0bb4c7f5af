//! The PreFilter extensions (upstream `TestPreFilterStateAddRemovePod`).

use convoy_api::testing::PodBuilder;
use convoy_api::{CycleState, FilterPlugin, NodeInfoLister, PreFilterExtensions, PreFilterPlugin};

use super::super::filtering::PreFilterState;
use super::*;

type Pairs = Vec<((&'static str, &'static str), i64)>;
type Case = (&'static str, PodBuilder, Vec<PodBuilder>, PodBuilder, Pairs, Pairs);

/// Upstream `TestPreFilterStateAddRemovePod`: adding a pod to the state of
/// the other pods gives the state of all pods; removing it gives back the
/// first state.
#[test]
fn add_and_remove_pod_update_the_counts() {
    let labels = [
        ("nodeA", [("region", "r1"), ("zone", "z11")]),
        ("nodeB", [("region", "r1"), ("zone", "z12")]),
        ("nodeC", [("region", "r2"), ("zone", "z21")]),
    ];
    let nodes = || labels.iter().map(|(n, l)| node(n, l)).collect::<Vec<_>>();
    let foo_bar = || vec![term_in("foo", "region", &["bar"])];
    let complex = || {
        vec![
            term_in("foo", "region", &["bar", "buzz"]),
            term("zone", vec![expr("service", "NotIn", &["bar", "security", "test"])]),
        ]
    };
    let selector1 = [("foo", "bar")];
    let cases: Vec<Case> = vec![
        (
            "anti-affinity terms",
            affinity(pod("pending", &selector1), required(vec![], foo_bar())),
            vec![
                pod("p1", &selector1).node("nodeA"),
                affinity(PodBuilder::new("p2").node("nodeC"), required(vec![], foo_bar())),
            ],
            affinity(pod("added", &selector1).node("nodeB"), required(vec![], foo_bar())),
            vec![(("region", "r1"), 2)],
            vec![],
        ),
        (
            "anti-affinity terms, several",
            affinity(pod("pending", &selector1), required(vec![], complex())),
            vec![
                pod("p1", &selector1).node("nodeA"),
                affinity(PodBuilder::new("p2").node("nodeC"), required(vec![], foo_bar())),
            ],
            affinity(pod("added", &selector1).node("nodeA"), required(vec![], complex())),
            vec![(("region", "r1"), 2), (("zone", "z11"), 2), (("zone", "z21"), 1)],
            vec![],
        ),
        (
            "affinity terms",
            affinity(pod("pending", &selector1), required(complex(), vec![])),
            vec![
                pod("p1", &selector1).node("nodeA"),
                affinity(PodBuilder::new("p2").node("nodeC"), required(complex(), foo_bar())),
            ],
            affinity(pod("added", &selector1).node("nodeA"), required(vec![], complex())),
            vec![],
            vec![(("region", "r1"), 2), (("zone", "z11"), 2)],
        ),
    ];
    let p = plugin();
    let prefilter = |pending: &PodBuilder, pods: &[PodBuilder]| {
        let mut state = CycleState::new();
        let list = snapshot(nodes(), pods);
        assert!(p.pre_filter(&mut state, &info(pending), &list).1.is_success());
        (state, list)
    };
    let dump = |state: &CycleState| {
        let s = state.read::<PreFilterState>().unwrap();
        (pairs(&s.existing_anti_affinity), pairs(&s.affinity), pairs(&s.anti_affinity))
    };
    let to_map =
        |v: &Pairs| v.iter().map(|((k, v), n)| ((k.to_string(), v.to_string()), *n)).collect();
    for (name, pending, existing, added, want_anti, want_affinity) in cases {
        let pending_info = info(&pending);
        let added_info = info(&added);
        let (mut state, list) = prefilter(&pending, &existing);
        let original = dump(&state);
        let on = list.get(added_info.node_name().unwrap()).unwrap().clone();
        assert!(p.add_pod(&mut state, &pending_info, &added_info, &on).is_success());
        let after_add = dump(&state);
        assert_eq!(after_add.2, to_map(&want_anti), "{name}: anti-affinity counts");
        assert_eq!(after_add.1, to_map(&want_affinity), "{name}: affinity counts");
        let mut all = existing.clone();
        all.push(added.clone());
        let (all_state, all_list) = prefilter(&pending, &all);
        assert_eq!(after_add, dump(&all_state), "{name}: add = PreFilter with the pod");
        assert!(p.remove_pod(&mut state, &pending_info, &added_info, &on).is_success());
        assert_eq!(dump(&state), original, "{name}: remove undoes add");
        let mut all_state = all_state;
        let on = all_list.get(added_info.node_name().unwrap()).unwrap().clone();
        assert!(p.remove_pod(&mut all_state, &pending_info, &added_info, &on).is_success());
        assert_eq!(dump(&all_state), original, "{name}: remove = PreFilter without the pod");
    }
}

/// Removing the only pod that matches a pod's affinity empties the counts:
/// the first-pod exception applies again (entries reaching 0 are deleted).
#[test]
fn removing_the_last_peer_restores_the_first_pod_exception() {
    let incoming = affinity(
        pod("p", &[("app", "db")]),
        required(vec![term_in("app", "zone", &["db"])], vec![]),
    );
    let peer = pod("peer", &[("app", "db")]).node("a");
    let list = snapshot(
        vec![node("a", &[("zone", "z1")]), node("b", &[("zone", "z2")])],
        std::slice::from_ref(&peer),
    );
    let p = plugin();
    let pod_info = info(&incoming);
    let mut state = CycleState::new();
    assert!(p.pre_filter(&mut state, &pod_info, &list).1.is_success());
    let b = list.get("b").unwrap().clone();
    assert_eq!(p.filter(&state, &pod_info, &b), uu(AFFINITY));
    let a = list.get("a").unwrap().clone();
    assert!(p.remove_pod(&mut state, &pod_info, &info(&peer), &a).is_success());
    assert_eq!(p.filter(&state, &pod_info, &b), ok());
    assert!(p.pre_filter_extensions().is_some());
    let fresh = CycleState::new();
    let mut fresh2 = fresh.clone();
    assert_eq!(
        p.add_pod(&mut fresh2, &pod_info, &info(&peer), &a).code(),
        convoy_api::Code::Error,
        "no PreFilter state"
    );
}

/// A pod added by an extension on a node whose label value the memo met
/// only in this cycle (the node was relabelled since the last one) counts
/// in Filter on that node.
#[test]
fn added_pod_counts_on_a_node_with_a_new_value() {
    let incoming = affinity(
        pod("p", &[("app", "db")]),
        required(vec![], vec![term_in("app", "zone", &["db"])]),
    );
    let pod_info = info(&incoming);
    let peer = pod("peer", &[("app", "db")]).node("a");
    let p = plugin();
    let nodes = vec![node("a", &[("zone", "z1")]), node("b", &[("zone", "z2")])];
    let list = snapshot(nodes, std::slice::from_ref(&peer));
    assert!(p.pre_filter(&mut CycleState::new(), &pod_info, &list).1.is_success());
    // Node b relabelled to a value never seen.
    let mut all = list.list().to_vec();
    let mut b = (*all[1]).clone();
    b.set_node(Arc::new(NodeBuilder::new("b").label("zone", "z-new").build()));
    all[1] = Arc::new(b);
    let list = NodeList::new(all);
    let mut state = CycleState::new();
    assert!(p.pre_filter(&mut state, &pod_info, &list).1.is_success());
    let b = list.get("b").unwrap().clone();
    assert_eq!(p.filter(&state, &pod_info, &b), ok());
    let added = pod("added", &[("app", "db")]).node("b");
    assert!(p.add_pod(&mut state, &pod_info, &info(&added), &b).is_success());
    assert_eq!(p.filter(&state, &pod_info, &b), u(ANTI));
}
