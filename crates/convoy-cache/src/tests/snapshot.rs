//! Snapshots: incremental updates, list rebuilds, zone order.

use super::*;
use crate::Snapshot;

fn names(s: &Snapshot) -> Vec<&str> {
    s.nodes().iter().map(|n| n.name()).collect()
}

#[test]
fn only_changed_nodes_are_replaced() {
    let (cache, _) = new_cache();
    for n in ["n1", "n2", "n3"] {
        cache.add_node(node(n));
    }
    let mut snap = Snapshot::new();
    cache.update_snapshot(&mut snap);
    assert_eq!(names(&snap), ["n1", "n2", "n3"]);
    let before: Vec<_> = snap.nodes().to_vec();
    let g0 = snap.generation();
    assert!(snap.nodes().iter().all(|n| n.generation <= g0));

    // Nothing changed: nothing moves, same generation.
    cache.update_snapshot(&mut snap);
    assert_eq!(snap.generation(), g0);
    assert!(snap.nodes().iter().zip(&before).all(|(a, b)| Arc::ptr_eq(a, b)));

    cache.assume_pod(pod("a", "500m"), "n2").unwrap();
    // Copy-on-write: the snapshot is unchanged until the next update.
    assert_eq!(snap.get("n2").unwrap().requested.milli_cpu, 0);
    cache.update_snapshot(&mut snap);
    assert!(snap.generation() > g0);
    assert!(Arc::ptr_eq(&snap.nodes()[0], &before[0]));
    assert!(!Arc::ptr_eq(&snap.nodes()[1], &before[1]));
    assert!(Arc::ptr_eq(&snap.nodes()[2], &before[2]));
    assert_eq!(snap.get("n2").unwrap().requested.milli_cpu, 500);
    assert!(snap.get("n2").unwrap().generation > before[1].generation);
    assert_eq!(before[1].requested.milli_cpu, 0, "the old copy is untouched");
    // The snapshot shares the cache's current node.
    assert!(Arc::ptr_eq(snap.get("n2").unwrap(), &cache.node_info("n2").unwrap()));
}

#[test]
fn list_is_rebuilt_when_nodes_come_and_go() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.add_node(node("n2"));
    let mut snap = Snapshot::new();
    cache.update_snapshot(&mut snap);
    let n1 = snap.get("n1").unwrap().clone();

    cache.add_node(node("n3"));
    cache.update_snapshot(&mut snap);
    assert_eq!(names(&snap), ["n1", "n2", "n3"]);
    assert!(Arc::ptr_eq(snap.get("n1").unwrap(), &n1), "unchanged nodes are shared");

    cache.remove_node("n2").unwrap();
    cache.update_snapshot(&mut snap);
    assert_eq!(names(&snap), ["n1", "n3"]);
    assert!(snap.get("n2").is_none());
    assert_eq!(snap.len(), 2);
}

#[test]
fn a_new_or_stale_snapshot_is_filled_completely() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.add_node(node("n2"));
    let mut main = Snapshot::new();
    cache.update_snapshot(&mut main);
    let mut stale = main.clone();
    cache.assume_pod(pod("a", "500m"), "n1").unwrap();
    cache.update_snapshot(&mut main);
    cache.assume_pod(pod("b", "500m"), "n2").unwrap();

    // `stale` missed an update: it is rebuilt, not patched.
    cache.update_snapshot(&mut stale);
    let mut fresh = Snapshot::new();
    cache.update_snapshot(&mut fresh);
    // And `main`, no longer the last updated, is rebuilt as well.
    cache.update_snapshot(&mut main);
    for s in [&stale, &fresh, &main] {
        assert_eq!(names(s), ["n1", "n2"]);
        for n in s.nodes() {
            assert!(Arc::ptr_eq(n, &cache.node_info(n.name()).unwrap()));
        }
        assert_eq!(s.get("n1").unwrap().requested.milli_cpu, 500);
        assert_eq!(s.get("n2").unwrap().requested.milli_cpu, 500);
    }
}

#[test]
fn nodes_are_interleaved_across_zones() {
    let (cache, _) = new_cache();
    for (n, z) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c"), ("a3", "a"), ("b2", "b")] {
        cache.add_node(zoned(n, z));
    }
    let mut snap = Snapshot::new();
    cache.update_snapshot(&mut snap);
    assert_eq!(names(&snap), ["a1", "b1", "c1", "a2", "b2", "a3"]);

    // A node moving zone goes to the end of its new zone.
    cache.update_node(zoned("a1", "c"));
    cache.update_snapshot(&mut snap);
    assert_eq!(names(&snap), ["a2", "b1", "c1", "a3", "b2", "a1"]);

    // An emptied zone disappears; a node without zone labels has zone "".
    cache.remove_node("b1").unwrap();
    cache.remove_node("b2").unwrap();
    cache.add_node(node("plain"));
    cache.update_snapshot(&mut snap);
    assert_eq!(names(&snap), ["a2", "c1", "plain", "a3", "a1"]);
    assert_ok(&cache);
}
