//! PodTopologySpread scenarios on the embedded cluster: the whole scheduler
//! with its default plugins, no API server.

use std::collections::BTreeMap;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::Objects;
use convoy_scheduler::simulate::{Report, simulate};
use k8s_openapi::api::core::v1::{Node, Pod, TopologySpreadConstraint};

const ZONE: &str = "topology.kubernetes.io/zone";

async fn run(nodes: Vec<Node>, pods: Vec<Pod>) -> Report {
    let config = convoy_scheduler::load_config(None).unwrap();
    simulate(config, Objects { nodes, pods, ..Default::default() }, false).await.unwrap()
}

/// The same run with PodTopologySpread disabled (to show what it changes).
async fn run_without_spread(nodes: Vec<Node>, pods: Vec<Pod>) -> Report {
    let known = convoy_config::KnownPlugins::new(convoy_scheduler::registry().names());
    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
                profiles:\n- plugins: {multiPoint: {disabled: [{name: PodTopologySpread}]}}\n";
    let config = convoy_config::parse_str(yaml, "no-spread.yaml", &known).unwrap();
    simulate(config, Objects { nodes, pods, ..Default::default() }, false).await.unwrap()
}

fn zoned(name: &str, zone: &str) -> NodeBuilder {
    NodeBuilder::new(name).label(ZONE, zone).label("kubernetes.io/hostname", name)
}

fn reason_of<'a>(r: &'a Report, name: &str) -> &'a str {
    r.pods.iter().find(|p| p.name == name).and_then(|p| p.reason.as_deref()).unwrap_or("")
}

/// Bound pods per zone (zones of the node names `<zone>-<i>`).
fn per_zone(r: &Report) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for node in r.pods.iter().filter_map(|p| p.node.as_deref()) {
        *m.entry(node.split('-').next().unwrap().to_string()).or_insert(0) += 1;
    }
    m
}

fn replica(i: usize) -> PodBuilder {
    PodBuilder::new(&format!("web-{i}")).label("app", "web").cpu("100m")
}

#[tokio::test]
async fn six_replicas_max_skew_one_over_three_zones_are_two_per_zone() {
    let nodes = ["a", "b", "c"]
        .iter()
        .flat_map(|z| (0..2).map(move |i| zoned(&format!("{z}-{i}"), z).build()))
        .collect();
    let pods =
        (0..6).map(|i| replica(i).spread(1, ZONE, "DoNotSchedule", &[("app", "web")]).build());
    let r = run(nodes, pods.collect()).await;
    assert_eq!(r.summary.bound, 6);
    let want: BTreeMap<String, usize> =
        [("a", 2), ("b", 2), ("c", 2)].into_iter().map(|(z, n)| (z.to_string(), n)).collect();
    assert_eq!(per_zone(&r), want);
}

#[tokio::test]
async fn schedule_anyway_prefers_the_emptier_zone() {
    // Zone a holds three replicas (on a-0; a-1 is empty), zone b a busy
    // node without replicas: resources alone would pick a-1, spreading
    // picks b-0.
    let nodes =
        vec![zoned("a-0", "a").build(), zoned("a-1", "a").build(), zoned("b-0", "b").build()];
    let mut pods: Vec<Pod> = (0..3).map(|i| replica(i).node("a-0").build()).collect();
    pods.push(PodBuilder::new("other").cpu("1").node("b-0").build());
    pods.push(replica(3).spread(1, ZONE, "ScheduleAnyway", &[("app", "web")]).build());
    let placed = |r: &Report| {
        r.pods.iter().find(|p| p.name == "web-3").and_then(|p| p.node.clone()).unwrap()
    };
    assert_eq!(placed(&run(nodes.clone(), pods.clone()).await), "b-0");
    assert_eq!(placed(&run_without_spread(nodes, pods).await), "a-1");
}

#[tokio::test]
async fn min_domains_blocks_until_enough_zones_exist() {
    let nodes = vec![zoned("a-0", "a").build(), zoned("b-0", "b").build()];
    let spread = |min_domains| {
        replica(9).with_spec(move |s| {
            s.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: ZONE.to_string(),
                when_unsatisfiable: "DoNotSchedule".to_string(),
                label_selector: Some(convoy_api::testing::match_labels(&[("app", "web")])),
                min_domains,
                ..Default::default()
            }])
        })
    };
    let existing = || vec![replica(0).node("a-0").build(), replica(1).node("b-0").build()];

    // Two zones, minDomains 3: the global minimum counts as 0, so the skew is 2.
    let mut pods = existing();
    pods.push(spread(Some(3)).build());
    let r = run(nodes.clone(), pods).await;
    assert_eq!(r.summary.bound, 0);
    assert_eq!(
        reason_of(&r, "web-9"),
        "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    );

    // Without minDomains the pod fits (skew 1).
    let mut pods = existing();
    pods.push(spread(None).build());
    let r = run(nodes, pods).await;
    assert_eq!(r.summary.bound, 1);
}

#[tokio::test]
async fn nodes_without_the_topology_key_are_unresolvable() {
    let nodes = vec![NodeBuilder::new("n0").build(), NodeBuilder::new("n1").build()];
    let pods = vec![replica(0).spread(1, ZONE, "DoNotSchedule", &[("app", "web")]).build()];
    let r = run(nodes, pods).await;
    assert_eq!(
        reason_of(&r, "web-0"),
        "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints (missing required label). preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

#[tokio::test]
async fn match_label_keys_spread_each_revision_on_its_own() {
    // Two revisions of a Deployment (pod-template-hash) spread separately:
    // the old revision's pods on a-0 do not push the new ones away.
    let nodes = vec![zoned("a-0", "a").build(), zoned("b-0", "b").build()];
    let mut pods: Vec<Pod> =
        (0..2).map(|i| replica(i).label("pod-template-hash", "v1").node("a-0").build()).collect();
    for i in 2..4 {
        pods.push(
            replica(i)
                .label("pod-template-hash", "v2")
                .with_spec(|s| {
                    s.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
                        max_skew: 1,
                        topology_key: ZONE.to_string(),
                        when_unsatisfiable: "DoNotSchedule".to_string(),
                        label_selector: Some(convoy_api::testing::match_labels(&[("app", "web")])),
                        match_label_keys: Some(vec!["pod-template-hash".to_string()]),
                        ..Default::default()
                    }])
                })
                .build(),
        );
    }
    let r = run(nodes, pods).await;
    assert_eq!(r.summary.bound, 2);
    let new: Vec<&str> = r.pods.iter().filter_map(|p| p.node.as_deref()).collect();
    let mut new = new;
    new.sort();
    assert_eq!(new, ["a-0", "b-0"]);
}
