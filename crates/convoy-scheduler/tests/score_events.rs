//! The score events (`convoy::scores` at TRACE) on the embedded cluster.
//!
//! Alone in its test binary: `tracing` caches per call site whether anyone
//! listens, and a test subscriber installed with `set_default` races with
//! other tests' threads hitting the same call sites first.

use std::collections::BTreeMap;
use std::sync::Arc;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::Objects;
use convoy_scheduler::simulate::simulate;

/// A `tracing` writer into a shared buffer (for the score events).
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture(filter: &str) -> (Captured, tracing::subscriber::DefaultGuard) {
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(move || writer.clone())
        .finish();
    (out, tracing::subscriber::set_default(subscriber))
}

fn lines_of(out: &Captured) -> Vec<serde_json::Value> {
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Two nodes fit `p` (`c` is tainted); only `c` fits `only-c`.
async fn run() -> BTreeMap<String, Option<String>> {
    let host = "kubernetes.io/hostname";
    let nodes = vec![
        NodeBuilder::new("a").label(host, "a").cpu("2").memory("8Gi").build(),
        NodeBuilder::new("b").label(host, "b").cpu("4").memory("8Gi").build(),
        NodeBuilder::new("c")
            .label(host, "c")
            .cpu("4")
            .memory("8Gi")
            .taint("k", "v", "NoSchedule")
            .build(),
    ];
    let pods = vec![
        PodBuilder::new("p").cpu("250m").memory("4Gi").build(),
        PodBuilder::new("only-c")
            .toleration("k", Some("v"), "NoSchedule")
            .node_selector(host, "c")
            .build(),
    ];
    let config = convoy_scheduler::load_config(None).unwrap();
    let objects = Objects { nodes, pods, ..Default::default() };
    let r = simulate(config, objects, true).await.unwrap(); // with the decision lines
    r.pods.into_iter().map(|p| (p.name, p.node)).collect()
}

/// With `convoy::scores=trace`, every scored node gets one event per plugin
/// that was not skipped (normalized × weight) and one with its total, as
/// upstream's V(10) lines; a pod with one feasible node gets none. Without
/// the target, none at all.
#[tokio::test]
async fn score_events_mirror_upstreams_v10_lines() {
    let (out, guard) = capture("convoy::scores=trace");
    let placed = run().await;
    drop(guard);
    assert_eq!(placed["only-c"].as_deref(), Some("c"));

    let events = lines_of(&out);
    assert!(
        events.iter().all(|e| e["pod"] == "default/p"),
        "one feasible node, no events: {events:?}"
    );
    let mut per_node: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    let mut totals = BTreeMap::new();
    for e in &events {
        let node = e["node"].as_str().unwrap().to_string();
        let score = e["score"].as_i64().unwrap();
        match e["message"].as_str().unwrap() {
            "Plugin scored node for pod" => per_node
                .entry(node)
                .or_default()
                .push((e["plugin"].as_str().unwrap().to_string(), score)),
            "Calculated node's final score for pod" => {
                assert!(totals.insert(node, score).is_none())
            }
            m => panic!("unexpected event {m:?}"),
        }
    }
    // `c` is infeasible (taint); NodeAffinity is skipped (no preferred terms).
    assert_eq!(totals.keys().collect::<Vec<_>>(), ["a", "b"]);
    for (node, scores) in &per_node {
        let plugins: Vec<&str> = scores.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            plugins,
            // DynamicResources has no PreScore: it scores (0) every pod, as upstream.
            [
                "TaintToleration",
                "NodeResourcesFit",
                "DynamicResources",
                "NodeResourcesBalancedAllocation"
            ],
            "{node}"
        );
        assert_eq!(scores.iter().map(|(_, s)| s).sum::<i64>(), totals[node], "{node}");
        assert_eq!(scores[0].1, 300, "no PreferNoSchedule taint: 100 × weight 3");
    }
    // Upstream v1.37.2 gives NodeResourcesFit 68 on the 2-CPU/8Gi node.
    assert_eq!(per_node["a"][1].1, 68);
    let best = totals.iter().max_by_key(|(_, s)| **s).unwrap().0;
    assert_eq!(placed["p"].as_deref(), Some(best.as_str()));

    // The target off: the decision lines, no score events.
    let (out, guard) = capture("info");
    run().await;
    drop(guard);
    let events = lines_of(&out);
    assert!(events.iter().any(|e| e["target"] == "convoy::decision"), "{events:?}");
    assert!(events.iter().all(|e| e["target"] != "convoy::scores"), "{events:?}");
}
