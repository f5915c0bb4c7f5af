//! The pod state machine: assume, confirm, forget, expire, delete.

use std::time::Duration;

use super::*;
use crate::CacheError;

#[test]
fn assume_then_confirm() {
    // (case, node assumed on, node the watch shows, expected millicores per node)
    type Case = (&'static str, &'static str, &'static str, &'static [(&'static str, i64)]);
    let cases: &[Case] = &[
        ("same node", "n1", "n1", &[("n1", 500), ("n2", 0)]),
        ("different node: moved", "n1", "n2", &[("n1", 0), ("n2", 500)]),
        ("unknown node: placeholder", "n1", "ghost", &[("n1", 0), ("ghost", 500)]),
    ];
    for (case, assumed_on, confirmed_on, want) in cases {
        let (cache, _) = new_cache();
        cache.add_node(node("n1"));
        cache.add_node(node("n2"));
        cache.assume_pod(pod("a", "500m"), assumed_on).unwrap();
        assert!(cache.is_assumed("a"), "{case}");
        assert_eq!(cpu(&cache, assumed_on), 500, "{case}");
        cache.add_pod(bound("a", "500m", confirmed_on)).unwrap();
        assert!(!cache.is_assumed("a"), "{case}");
        for (n, m) in *want {
            assert_eq!(cpu(&cache, n), *m, "{case}: node {n}");
        }
        assert_eq!(cache.pod_count(), 1, "{case}");
        assert_ok(&cache);
        // Once confirmed, the pod cannot be forgotten nor assumed again.
        assert!(matches!(
            cache.forget_pod(&pod("a", "500m")),
            Err(CacheError::PodNotAssumed { .. })
        ));
        assert!(cache.assume_pod(pod("a", "500m"), "n1").is_err(), "{case}");
    }
}

#[test]
fn confirmed_pod_replaces_assumed_object() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.assume_pod(pod("a", "500m"), "n1").unwrap();
    let confirmed = bound("a", "500m", "n1");
    cache.add_pod(confirmed.clone()).unwrap();
    let n1 = cache.node_info("n1").unwrap();
    assert!(Arc::ptr_eq(&n1.pods[0], &confirmed));
    assert_ok(&cache);
}

#[test]
fn assume_then_forget_releases_resources() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.assume_pod(pod("a", "500m"), "n1").unwrap();
    cache.assume_pod(pod("b", "250m"), "n1").unwrap();
    assert_eq!(cpu(&cache, "n1"), 750);
    cache.forget_pod(&pod("a", "500m")).unwrap();
    assert_eq!(cpu(&cache, "n1"), 250);
    assert!(!cache.is_assumed("a"));
    assert!(cache.is_assumed("b"));
    assert_eq!(cache.pod_count(), 1);
    assert_ok(&cache);
    // Forgotten is like Initial: it can be assumed again.
    cache.assume_pod(pod("a", "500m"), "n1").unwrap();
    assert_ok(&cache);
}

#[test]
fn forget_of_an_assumed_pod_on_an_unknown_node_drops_the_placeholder() {
    let (cache, _) = new_cache();
    cache.assume_pod(pod("a", "500m"), "ghost").unwrap();
    assert_eq!(cache.node_count(), 1);
    cache.forget_pod(&pod("a", "500m")).unwrap();
    assert_eq!(cache.node_count(), 0);
    assert_ok(&cache);
}

#[test]
fn expiry_after_finish_binding() {
    let (cache, clock) = new_cache();
    let cache = cache.with_ttl(Duration::from_secs(10));
    cache.add_node(node("n1"));
    cache.assume_pod(pod("finished", "100m"), "n1").unwrap();
    cache.assume_pod(pod("binding", "200m"), "n1").unwrap();
    cache.assume_pod(pod("confirmed", "400m"), "n1").unwrap();
    cache.finish_binding(&pod("finished", "100m"));
    cache.finish_binding(&pod("confirmed", "400m"));
    cache.add_pod(bound("confirmed", "400m", "n1")).unwrap();
    // finish_binding of a confirmed or unknown pod is a no-op.
    cache.finish_binding(&pod("confirmed", "400m"));
    cache.finish_binding(&pod("unknown", "400m"));

    clock.advance(Duration::from_secs(10));
    assert!(cache.cleanup_expired_assumed_pods().is_empty(), "deadline is not passed yet");
    clock.advance(Duration::from_millis(1));
    let expired = cache.cleanup_expired_assumed_pods();
    assert_eq!(expired.len(), 1);
    assert_eq!(&*expired[0].pod.key.name, "finished");
    assert_eq!(&*expired[0].node, "n1");
    assert_eq!(cpu(&cache, "n1"), 600);
    assert!(cache.is_assumed("binding"), "binding not finished: never expires");
    assert_ok(&cache);

    // The watch may still add an expired pod: it comes back as Added.
    cache.add_pod(bound("finished", "100m", "n1")).unwrap();
    assert_eq!(cpu(&cache, "n1"), 700);
    assert_ok(&cache);

    clock.advance(Duration::from_secs(3600));
    assert!(cache.cleanup_expired_assumed_pods().is_empty());
}

#[test]
fn assumed_pod_deleted_while_binding_releases_resources() {
    let (cache, clock) = new_cache();
    cache.add_node(node("n1"));
    cache.assume_pod(pod("a", "500m"), "n1").unwrap();
    cache.finish_binding(&pod("a", "500m"));
    cache.remove_pod(&bound("a", "500m", "n1")).unwrap();
    assert_eq!(cpu(&cache, "n1"), 0);
    assert!(!cache.is_assumed("a"));
    assert_eq!(cache.pod_count(), 0);
    clock.advance(Duration::from_secs(60));
    assert!(cache.cleanup_expired_assumed_pods().is_empty());
    assert_ok(&cache);
}

#[test]
fn terminal_pods_hold_no_resources() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.add_pod(bound("a", "500m", "n1")).unwrap();
    cache.add_pod(bound("b", "250m", "n1")).unwrap();
    assert_eq!(cpu(&cache, "n1"), 750);

    let done = finished("a", "500m", "n1", "Succeeded");
    cache.update_pod(&bound("a", "500m", "n1"), done.clone()).unwrap();
    assert_eq!(cpu(&cache, "n1"), 250);
    assert_eq!(cache.pod_count(), 1);
    // Later events for the terminal pod are no-ops.
    cache.update_pod(&done, done.clone()).unwrap();
    cache.remove_pod(&done).unwrap();
    // A terminal pod listed by the watch is not added.
    cache.add_pod(finished("c", "1", "n1", "Failed")).unwrap();
    assert_eq!(cpu(&cache, "n1"), 250);
    // An assumed pod confirmed as terminal leaves the cache.
    cache.assume_pod(pod("d", "1"), "n1").unwrap();
    cache.add_pod(finished("d", "1", "n1", "Failed")).unwrap();
    assert!(!cache.is_assumed("d"));
    assert_eq!(cpu(&cache, "n1"), 250);
    assert_eq!(cache.pod_count(), 1);
    assert_ok(&cache);
}

#[test]
fn update_pod_replaces_requests_and_handles_uid_change() {
    let (cache, _) = new_cache();
    cache.add_node(node("n1"));
    cache.add_pod(bound("a", "500m", "n1")).unwrap();
    cache.update_pod(&bound("a", "500m", "n1"), bound("a", "800m", "n1")).unwrap();
    assert_eq!(cpu(&cache, "n1"), 800);
    // Same name, new object (deleted and recreated).
    let new = PodBuilder::new("a").uid("a-2").cpu("100m").node("n1").info();
    cache.update_pod(&bound("a", "800m", "n1"), new).unwrap();
    assert_eq!(cpu(&cache, "n1"), 100);
    assert_eq!(cache.pod_count(), 1);
    assert_ok(&cache);
    // An update of an assumed pod confirms it.
    cache.assume_pod(pod("b", "1"), "n1").unwrap();
    cache.update_pod(&bound("b", "1", "n1"), bound("b", "1", "n1")).unwrap();
    assert!(!cache.is_assumed("b"));
    assert_eq!(cpu(&cache, "n1"), 1100);
    assert_ok(&cache);
}

#[test]
fn errors_name_the_pod_and_node() {
    type Op = fn(&Cache) -> crate::Result<()>;
    let cases: &[(&str, Op, &str)] = &[
        (
            "assume twice",
            |c| {
                c.assume_pod(pod("a", "1"), "n1")?;
                c.assume_pod(pod("a", "1"), "n2")
            },
            "pod default/a is already in the cache (assumed on node n1), so it cannot be assumed",
        ),
        (
            "assume an added pod",
            |c| {
                c.add_pod(bound("a", "1", "n1"))?;
                c.assume_pod(pod("a", "1"), "n1")
            },
            "pod default/a is already in the cache (added on node n1), so it cannot be assumed",
        ),
        (
            "forget unknown",
            |c| c.forget_pod(&pod("a", "1")),
            "pod default/a was not assumed, so it cannot be forgotten",
        ),
        (
            "forget on another node",
            |c| {
                c.assume_pod(pod("a", "1"), "n1")?;
                c.forget_pod(&bound("a", "1", "n2"))
            },
            "pod default/a was assumed on node n1 but is assigned to node n2",
        ),
        (
            "add twice",
            |c| {
                c.add_pod(bound("a", "1", "n1"))?;
                c.add_pod(bound("a", "1", "n1"))
            },
            "pod default/a was already added on node n1",
        ),
        (
            "add without node",
            |c| c.add_pod(pod("a", "1")),
            "pod default/a has no spec.nodeName and was not assumed, so it cannot be added",
        ),
        (
            "update unknown",
            |c| c.update_pod(&bound("a", "1", "n1"), bound("a", "1", "n1")),
            "pod default/a is not in the cache, so it cannot be updated",
        ),
        (
            "remove unknown",
            |c| c.remove_pod(&bound("a", "1", "n1")),
            "pod default/a is not in the cache, so it cannot be removed",
        ),
        (
            "remove unknown node",
            |c| c.remove_node("n9"),
            "node n9 is not in the cache, so it cannot be removed",
        ),
    ];
    for (case, op, want) in cases {
        let (cache, _) = new_cache();
        cache.add_node(node("n1"));
        let err = op(&cache).expect_err(case);
        assert_eq!(err.to_string(), *want, "{case}");
        assert_ok(&cache);
    }
}
