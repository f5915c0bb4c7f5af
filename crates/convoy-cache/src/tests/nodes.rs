//! Nodes: add, update, remove, placeholders.

use super::*;
use crate::{CacheError, Snapshot};

#[test]
fn removed_node_with_pods_stays_as_placeholder_until_its_pods_go() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.add_pod(bound("a", "500m", "n1")).unwrap();
    cache.assume_pod(pod("b", "250m"), "n1").unwrap();
    cache.remove_node("n1").unwrap();

    let n1 = cache.node_info("n1").expect("placeholder");
    assert!(n1.node().is_none());
    assert_eq!(n1.requested.milli_cpu, 750);
    assert_eq!(n1.allocatable.milli_cpu, 0);
    assert_eq!(cache.node_count(), 1);
    let mut snap = Snapshot::new();
    cache.update_snapshot(&mut snap);
    assert!(snap.is_empty(), "placeholders are not in snapshots");
    assert!(matches!(cache.remove_node("n1"), Err(CacheError::NodeNotFound { .. })));
    assert_ok(&cache);

    cache.remove_pod(&bound("a", "500m", "n1")).unwrap();
    assert_eq!(cache.node_count(), 1);
    cache.forget_pod(&pod("b", "250m")).unwrap();
    assert_eq!(cache.node_count(), 0);
    assert!(cache.node_info("n1").is_none());
    assert_ok(&cache);
}

#[test]
fn removed_node_without_pods_goes_at_once() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.remove_node("n1").unwrap();
    assert_eq!(cache.node_count(), 0);
    assert_ok(&cache);
}

#[test]
fn pod_on_unknown_node_creates_placeholder_that_the_node_fills() {
    let (cache, _) = new_cache();
    cache.add_pod(bound("a", "500m", "late")).unwrap();
    let late = cache.node_info("late").expect("placeholder");
    assert!(late.node().is_none());
    assert_eq!(late.requested.milli_cpu, 500);
    let mut snap = Snapshot::new();
    cache.update_snapshot(&mut snap);
    assert!(snap.is_empty());
    assert_ok(&cache);

    cache.add_node(node("late"));
    cache.update_snapshot(&mut snap);
    let late = snap.get("late").expect("now real");
    assert!(late.node().is_some());
    assert_eq!(late.requested.milli_cpu, 500);
    assert_eq!(late.allocatable.milli_cpu, 4000);
    assert_eq!(late.pods.len(), 1);
    assert_ok(&cache);
}

#[test]
fn removed_node_coming_back_keeps_its_pods() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.add_pod(bound("a", "500m", "n1")).unwrap();
    cache.remove_node("n1").unwrap();
    cache.update_node(node("n1"));
    assert!(cache.node_info("n1").unwrap().node().is_some());
    assert_eq!(cpu(&cache, "n1"), 500);
    assert_ok(&cache);
}

#[test]
fn update_node_replaces_allocatable_and_keeps_pods() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.add_pod(bound("a", "500m", "n1")).unwrap();
    cache.update_node(Arc::new(NodeBuilder::new("n1").cpu("8").build()));
    let n1 = cache.node_info("n1").unwrap();
    assert_eq!(n1.allocatable.milli_cpu, 8000);
    assert_eq!(n1.requested.milli_cpu, 500);
    // add_node of a known node is an update.
    cache.add_node(node("n1"));
    assert_eq!(cache.node_info("n1").unwrap().allocatable.milli_cpu, 4000);
    assert_eq!(cache.node_count(), 1);
    assert_eq!(
        cache.dump().into_iter().map(|(n, r, p)| (n, r.milli_cpu, p)).collect::<Vec<_>>(),
        [("n1".to_string(), 500, 1)]
    );
    assert_ok(&cache);
}

#[test]
fn image_counts_follow_node_add_update_and_remove() {
    use convoy_api::{ImageStateSummary, NodeInfoLister};
    let (cache, _) = new_cache();
    let with = |name: &str, images: &[(&str, i64)]| {
        Arc::new(images.iter().fold(NodeBuilder::new(name), |b, (i, s)| b.image(i, *s)).build())
    };
    let state = |snap: &Snapshot, image: &str| snap.image_state(image);
    let mut snap = Snapshot::new();
    cache.add_node(with("a", &[("x:1", 100), ("y:1", 5)]));
    cache.add_node(with("b", &[("x:1", 200)]));
    cache.add_node(node("c"));
    cache.update_snapshot(&mut snap);
    assert_eq!(state(&snap, "x:1"), Some(ImageStateSummary { size: 100, num_nodes: 2 }));
    assert_eq!(state(&snap, "y:1"), Some(ImageStateSummary { size: 5, num_nodes: 1 }));
    let before = snap.clone();

    // c pulls x; a drops y.
    cache.update_node(with("c", &[("x:1", 100)]));
    cache.update_node(with("a", &[("x:1", 100)]));
    assert_ok(&cache);
    // The snapshot taken before does not change.
    assert_eq!(state(&before, "x:1").unwrap().num_nodes, 2);
    cache.update_snapshot(&mut snap);
    assert_eq!(state(&snap, "x:1").unwrap().num_nodes, 3);
    assert_eq!(state(&snap, "y:1"), None);
    assert_eq!(state(&before, "y:1").unwrap().num_nodes, 1);

    // A removed node's images leave the counts, even while its pods keep it
    // as a placeholder.
    cache.add_pod(bound("p", "100m", "a")).unwrap();
    cache.remove_node("a").unwrap();
    cache.remove_node("b").unwrap();
    assert_ok(&cache);
    cache.update_snapshot(&mut snap);
    assert_eq!(state(&snap, "x:1"), Some(ImageStateSummary { size: 100, num_nodes: 1 }));
    // An update of the last holder with another size takes that size
    // (upstream removes then adds the node's images).
    cache.update_node(with("c", &[("x:1", 300)]));
    cache.update_snapshot(&mut snap);
    assert_eq!(state(&snap, "x:1"), Some(ImageStateSummary { size: 300, num_nodes: 1 }));
    assert_ok(&cache);
}
