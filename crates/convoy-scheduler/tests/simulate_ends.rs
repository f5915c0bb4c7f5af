//! `simulate` always ends, and bad input is named, never a crash: pods that
//! can never fit (no nodes, terminal pods, pods and nodes the API server
//! would refuse) end as pending with their reason.
//!
//! Each run has a wall-clock limit: before the fix, a cluster of pods and
//! no nodes ran forever (the fake clock jumping from backoff to backoff).

use std::sync::mpsc;
use std::time::Duration;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::Objects;
use convoy_scheduler::simulate::{Report, simulate};
use k8s_openapi::api::core::v1::{Node, Pod};

/// Far more than any of these runs needs (they take milliseconds).
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `simulate` on its own thread and runtime; fails if it does not
/// end within [`LIMIT`].
fn run(nodes: Vec<Node>, pods: Vec<Pod>) -> Report {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let config = convoy_scheduler::load_config(None).unwrap();
        let objects = Objects { nodes, pods, ..Default::default() };
        let _ = tx.send(rt.block_on(simulate(config, objects, false)).unwrap());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(report) => report,
        Err(_) => panic!("simulate did not end within {LIMIT:?}"),
    }
}

fn reason_of<'a>(r: &'a Report, name: &str) -> &'a str {
    let p = r.pods.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name} reported"));
    assert_eq!(p.node, None, "{name} is pending");
    p.reason.as_deref().unwrap_or("")
}

#[test]
fn pods_and_no_nodes_end_as_pending() {
    let pods = (0..3).map(|i| PodBuilder::new(&format!("p{i}")).cpu("100m").build()).collect();
    let r = run(Vec::new(), pods);
    assert_eq!((r.summary.bound, r.summary.pending), (0, 3));
    for i in 0..3 {
        assert_eq!(reason_of(&r, &format!("p{i}")), "no nodes available to schedule pods");
    }
}

#[test]
fn a_pod_that_fits_nowhere_ends_as_pending() {
    let nodes = vec![NodeBuilder::new("a").cpu("1").build()];
    let pods = vec![
        PodBuilder::new("big").cpu("2").build(),
        PodBuilder::new("fits").cpu("500m").build(),
        PodBuilder::new("nowhere").node_selector("zone", "mars").build(),
    ];
    let r = run(nodes, pods);
    assert_eq!((r.summary.bound, r.summary.pending), (1, 2));
    assert!(reason_of(&r, "big").contains("Insufficient cpu"), "{}", reason_of(&r, "big"));
    assert!(reason_of(&r, "nowhere").contains("didn't match Pod's node affinity/selector"));
}

#[test]
fn terminal_pods_end_the_run() {
    let nodes = vec![NodeBuilder::new("a").cpu("1").build()];
    let phase = |name: &str, phase: &str| {
        let phase = phase.to_string();
        PodBuilder::new(name).cpu("100m").with_status(move |s| s.phase = Some(phase)).build()
    };
    let pods = vec![
        phase("failed", "Failed"),
        phase("succeeded", "Succeeded"),
        PodBuilder::new("ok").cpu("100m").build(),
    ];
    let r = run(nodes, pods);
    assert_eq!(r.pods.iter().find(|p| p.name == "ok").and_then(|p| p.node.as_deref()), Some("a"));
    assert_eq!(r.summary.bound, 1);
    assert_eq!(reason_of(&r, "failed"), "pod is Failed: a terminal pod is not scheduled");
    assert_eq!(reason_of(&r, "succeeded"), "pod is Succeeded: a terminal pod is not scheduled");
}

#[test]
fn a_pod_with_a_negative_request_is_named_and_others_are_placed() {
    let nodes = vec![NodeBuilder::new("a").cpu("1").build()];
    let pods = vec![
        PodBuilder::new("negative").cpu("-1").build(),
        PodBuilder::new("ok").cpu("500m").build(),
    ];
    let r = run(nodes, pods);
    assert_eq!(r.pods.iter().find(|p| p.name == "ok").and_then(|p| p.node.as_deref()), Some("a"));
    assert_eq!(
        reason_of(&r, "negative"),
        "invalid pod: spec.containers[0].resources.requests[cpu]: invalid quantity \"-1\": must be greater than or equal to 0"
    );
}

#[test]
fn a_node_with_negative_allocatable_is_not_used() {
    let nodes = vec![NodeBuilder::new("bad").cpu("4").allocatable("memory", "-1Gi").build()];
    let r = run(nodes, vec![PodBuilder::new("p").cpu("100m").build()]);
    let reason = reason_of(&r, "p");
    assert!(
        reason.contains(
            "node(s) had invalid status: status.allocatable[memory]: invalid quantity \"-1Gi\": must be greater than or equal to 0"
        ),
        "{reason}"
    );
}
