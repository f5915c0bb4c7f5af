//! The memo's key (what counts depend on, and nothing else) and its upkeep
//! (dead domains, memory).

use convoy_api::labels::Selector;
use std::sync::Arc;

use convoy_api::testing::NodeBuilder;
use convoy_api::{NodeInfo, NodeInfoLister, NodeList, PodInfo};

use super::super::common::{Constraint, LABEL_TOPOLOGY_ZONE as ZONE};
use super::super::memo::{MemoKey, Memos, Purpose, Request};
use super::*;
use crate::helper::node_affinity::RequiredNodeAffinity;

const HOST: &str = super::super::LABEL_HOSTNAME;

fn constraint(key: &str, labels: &[(&str, &str)]) -> Constraint {
    Constraint {
        max_skew: 1,
        topology_key: Box::from(key),
        selector: Selector::from_label_selector(Some(&convoy_api::testing::match_labels(labels)))
            .unwrap(),
        min_domains: 1,
        honor_node_affinity: true,
        honor_node_taints: true,
    }
}

fn request<'a>(
    purpose: Purpose,
    constraints: &'a [Constraint],
    pod: &'a PodInfo,
    required: &'a RequiredNodeAffinity,
) -> Request<'a> {
    Request { purpose, constraints, pod, required }
}

#[test]
fn the_key_captures_what_counts_depend_on() {
    let base = vec![constraint(ZONE, &[("app", "a")]), constraint(HOST, &[("app", "a")])];
    let pod_of = |b: PodBuilder| {
        let p = b.info();
        let r = RequiredNodeAffinity::of_pod(&p.pod);
        (p, r)
    };
    let template =
        || pod(&[("app", "a")]).node_selector("rack", "r1").toleration("t", None, "NoSchedule");
    let (p, required) = pod_of(template());
    let key = MemoKey::of(&request(Purpose::Filter, &base, &p, &required));
    let served = |purpose,
                  constraints: &[Constraint],
                  pod: &(std::sync::Arc<PodInfo>, RequiredNodeAffinity)| {
        key.serves(&request(purpose, constraints, &pod.0, &pod.1))
    };
    let same = (p.clone(), required.clone());
    assert!(served(Purpose::Filter, &base, &same));

    // Not served: anything a node's count depends on differs.
    let changed = |f: fn(&mut Vec<Constraint>)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    for (name, constraints) in [
        ("key", changed(|c| c[0].topology_key = Box::from("rack"))),
        ("selector", changed(|c| c[1].selector = Selector::everything())),
        ("affinity policy", changed(|c| c[0].honor_node_affinity = false)),
        ("taints policy", changed(|c| c[1].honor_node_taints = false)),
        ("fewer constraints", changed(|c| drop(c.pop()))),
    ] {
        assert!(!served(Purpose::Filter, &constraints, &same), "{name}");
    }
    assert!(!served(Purpose::Score { require_all: true }, &base, &same));
    let other_ns = pod_of(template().namespace("ns1"));
    assert!(!served(Purpose::Filter, &base, &other_ns), "namespace");
    let other_selector = pod_of(template().node_selector("rack", "r2"));
    assert!(!served(Purpose::Filter, &base, &other_selector), "node selector");
    let more_tolerations = pod_of(template().toleration("u", None, "NoSchedule"));
    assert!(!served(Purpose::Filter, &base, &more_tolerations), "tolerations");

    // Served: what counts do not depend on.
    let loose = changed(|c| {
        c[0].max_skew = 4;
        c[1].min_domains = 3;
    });
    assert!(served(Purpose::Filter, &loose, &same), "maxSkew, minDomains");
    let relabelled = pod_of(template().label("tier", "x"));
    assert!(served(Purpose::Filter, &base, &relabelled), "the pod's own labels");
    // Ignored policies: the affinity and tolerations do not matter then.
    let ignoring = changed(|c| {
        for c in c.iter_mut() {
            c.honor_node_affinity = false;
            c.honor_node_taints = false;
        }
    });
    let key = MemoKey::of(&request(Purpose::Filter, &ignoring, &p, &required));
    for other in [&other_selector, &more_tolerations] {
        assert!(key.serves(&request(Purpose::Filter, &ignoring, &other.0, &other.1)));
    }
}

/// `n` nodes named `{prefix}-{i}` (hostname label too) in three zones, one
/// pod each.
fn nodes(prefix: &str, n: usize) -> NodeList {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let builders = names
        .iter()
        .enumerate()
        .map(|(i, name)| node(name, &[(HOST, name), (ZONE, ["z1", "z2", "z3"][i % 3])]));
    let pods: Vec<_> = names.iter().map(|n| on(&format!("p-{n}"), n, &[("app", "a")])).collect();
    cluster(builders.collect(), &pods)
}

#[test]
fn dead_domains_are_dropped() {
    let constraints = vec![constraint(HOST, &[("app", "a")])];
    let p = pod(&[("app", "a")]).info();
    let required = RequiredNodeAffinity::default();
    let r = request(Purpose::Filter, &constraints, &p, &required);
    let mut memos = Memos::default();
    for round in 0..100 {
        // Every node replaced by one with another name: their hostnames are
        // domains no node counts for anymore.
        let list = nodes(&format!("r{round}"), 10);
        let counts = memos.counts(&r, &list);
        assert_eq!(counts[0].sums.present, 10);
        assert!(counts[0].domains.len() <= 2 * 10 + 64 + 10, "{}", counts[0].domains.len());
    }
    assert_eq!(memos.len(), 1);
}

/// The memory a memo holds per node (for docs/benchmarks.md): printed with
/// `--nocapture`. Nothing is held per pod.
#[test]
fn memory_per_node() {
    let list = nodes("node", 5000);
    let p = pod(&[("app", "a")]).info();
    let required = RequiredNodeAffinity::default();
    let zone = vec![constraint(ZONE, &[("app", "a")])];
    let both = vec![constraint(HOST, &[("app", "a")]), constraint(ZONE, &[("app", "a")])];
    let score = Purpose::Score { require_all: false };
    let mut bytes = Vec::new();
    for (name, purpose, constraints) in [
        ("PreFilter, zone", Purpose::Filter, &zone),
        ("PreFilter, hostname and zone", Purpose::Filter, &both),
        ("PreScore, zone", score, &zone),
        ("PreScore, hostname and zone (System defaults)", score, &both),
    ] {
        let mut memos = Memos::default();
        memos.counts(&request(purpose, constraints, &p, &required), &list);
        eprintln!("{name}: {} B per node", memos.bytes() / 5000);
        bytes.push(memos.bytes() / 5000);
    }
    assert!(bytes.iter().all(|&b| b < 120), "{bytes:?}");
}

/// PreScore finds its feasible nodes' slots by address: after nodes move,
/// are copied (same generation, another address), change, or go.
#[test]
fn nodes_are_found_by_address() {
    let constraints = vec![constraint(ZONE, &[("app", "a")]), constraint(HOST, &[("app", "a")])];
    let p = pod(&[("app", "a")]).info();
    let required = RequiredNodeAffinity::default();
    let r = request(Purpose::Score { require_all: true }, &constraints, &p, &required);
    let mut memos = Memos::default();
    let mut nodes = nodes("n", 200).list().to_vec();
    let check = |memos: &mut Memos, nodes: &[Arc<NodeInfo>]| {
        let list = NodeList::new(nodes.to_vec());
        memos.with(&r, &list, |view| {
            for (i, n) in list.list().iter().enumerate() {
                assert_eq!(view.position(n), Some(i), "{}", n.name());
                assert!(view.all_keys(i));
                assert_eq!(view.slot(i, 1).pods, n.pods.len() as u32);
            }
            let outside = Arc::new(NodeBuilder::new("outside").info());
            assert_eq!(view.position(&outside), None);
        });
    };
    check(&mut memos, &nodes);
    nodes.reverse();
    check(&mut memos, &nodes);
    for i in (0..nodes.len()).step_by(3) {
        // A copy: the same generation at another address.
        nodes[i] = Arc::new((*nodes[i]).clone());
    }
    check(&mut memos, &nodes);
    for i in (0..nodes.len()).step_by(7) {
        let name = nodes[i].name().to_string();
        Arc::make_mut(&mut nodes[i]).add_pod(info(on(&format!("q-{i}"), &name, &[("app", "a")])));
    }
    nodes.truncate(150);
    nodes.swap(3, 140);
    check(&mut memos, &nodes);
    nodes.extend(self::nodes("extra", 20).list().iter().cloned());
    check(&mut memos, &nodes);
}
