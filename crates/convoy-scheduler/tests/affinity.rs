//! Inter-pod affinity scenarios on the embedded cluster: the default
//! profile's InterPodAffinity plugin with the whole scheduler (queue and
//! its hints, cache, binding), no API server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use convoy_api::ClusterObject;
use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::{Objects, prepare_pod_for_create};
use convoy_scheduler::simulate::{Report, simulate};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

async fn run(objects: Objects) -> Report {
    let config = convoy_scheduler::load_config(None).unwrap();
    simulate(config, objects, false).await.unwrap()
}

fn objects(nodes: Vec<Node>, pods: Vec<Pod>) -> Objects {
    Objects { nodes, pods, ..Default::default() }
}

/// A node with its hostname label, in a zone.
fn node(name: &str, zone: &str) -> Node {
    NodeBuilder::new(name).label(HOSTNAME, name).label(ZONE, zone).build()
}

fn with_affinity(b: PodBuilder, affinity: Value) -> PodBuilder {
    let a = serde_json::from_value(affinity).unwrap();
    b.with_spec(move |s| s.affinity = Some(a))
}

fn node_of<'a>(r: &'a Report, name: &str) -> Option<&'a str> {
    r.pods.iter().find(|p| p.name == name).and_then(|p| p.node.as_deref())
}

fn zone_of(node: &str) -> String {
    // Nodes are named `<zone>-<i>` in these scenarios.
    node.split('-').next().unwrap().to_string()
}

#[tokio::test]
async fn required_anti_affinity_on_hostname_spreads_and_leaves_the_rest_pending() {
    let nodes = vec![node("n1", "a"), node("n2", "a"), node("n3", "b")];
    let pods = (0..5)
        .map(|i| {
            let b = PodBuilder::new(&format!("web-{i}")).label("app", "web");
            b.pod_anti_affinity(HOSTNAME, &[("app", "web")]).build()
        })
        .collect();
    let r = run(objects(nodes, pods)).await;
    assert_eq!((r.summary.bound, r.summary.pending), (3, 2), "{}", r.to_text());
    let used: BTreeSet<_> = r.pods.iter().filter_map(|p| p.node.clone()).collect();
    assert_eq!(used.len(), 3, "one per node: {}", r.to_text());
    for p in r.pods.iter().filter(|p| p.node.is_none()) {
        assert_eq!(
            p.reason.as_deref(),
            Some(
                "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. \
                 preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
            )
        );
    }
}

/// The web pods come first and find no database: rejected (UU), they wait
/// until the database pod is bound, whose AssignedPod/Add event the
/// plugin's hint turns into a retry; they then join it in its zone.
#[tokio::test]
async fn required_affinity_places_pods_with_their_peers() {
    let nodes = vec![
        node("a-1", "a"),
        node("a-2", "a"),
        node("b-1", "b"),
        node("b-2", "b"),
        node("c-1", "c"),
    ];
    let mut pods: Vec<Pod> = (0..4)
        .map(|i| {
            let b = PodBuilder::new(&format!("web-{i}")).label("app", "web");
            b.pod_affinity(ZONE, &[("app", "db")]).build()
        })
        .collect();
    pods.push(
        PodBuilder::new("db").label("app", "db").node_selector(ZONE, "b").priority(-1).build(),
    );
    let r = run(objects(nodes, pods)).await;
    assert_eq!((r.summary.bound, r.summary.pending), (5, 0), "{}", r.to_text());
    for i in 0..4 {
        let n = node_of(&r, &format!("web-{i}")).unwrap();
        assert_eq!(zone_of(n), "b", "web-{i} on {n}");
    }
}

#[tokio::test]
async fn affinity_without_any_peer_is_unresolvable() {
    let nodes = vec![node("a-1", "a"), node("b-1", "b")];
    let pods = vec![PodBuilder::new("web").pod_affinity(ZONE, &[("app", "db")]).build()];
    let r = run(objects(nodes, pods)).await;
    assert_eq!(
        r.pods[0].reason.as_deref(),
        Some(
            "0/2 nodes are available: 2 node(s) didn't match pod affinity rules. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );
}

/// A JobSet with `exclusive-topology: topology.kubernetes.io/zone`: its
/// webhook gives each pod affinity to its own job and anti-affinity to
/// every other job on the zone key, so each job gets a zone of its own.
#[tokio::test]
async fn jobset_exclusive_placement_gives_each_job_a_zone() {
    const JOB_KEY: &str = "jobset.sigs.k8s.io/job-key";
    let exclusive = |job: &str| {
        json!({
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchExpressions": [{"key": JOB_KEY, "operator": "In", "values": [job]}]},
                "topologyKey": ZONE
            }]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchExpressions": [
                    {"key": JOB_KEY, "operator": "Exists"},
                    {"key": JOB_KEY, "operator": "NotIn", "values": [job]}
                ]},
                "topologyKey": ZONE
            }]}
        })
    };
    let nodes: Vec<Node> = ["a", "b", "c"]
        .iter()
        .flat_map(|z| (1..=2).map(move |i| node(&format!("{z}-{i}"), z)))
        .collect();
    // Pods of the jobs interleaved, three per job; job 4 finds no zone left.
    let mut pods = Vec::new();
    for i in 0..3 {
        for job in ["j1", "j2", "j3"] {
            let b = PodBuilder::new(&format!("{job}-{i}")).label(JOB_KEY, job);
            pods.push(with_affinity(b, exclusive(job)).build());
        }
    }
    let late = with_affinity(PodBuilder::new("j4-0").label(JOB_KEY, "j4"), exclusive("j4"));
    pods.push(late.priority(-1).build());
    let r = run(objects(nodes, pods)).await;
    assert_eq!((r.summary.bound, r.summary.pending), (9, 1), "{}", r.to_text());
    let mut zones: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in r.pods.iter().filter(|p| p.node.is_some()) {
        let job = p.name.split('-').next().unwrap().to_string();
        zones.entry(job).or_default().insert(zone_of(p.node.as_deref().unwrap()));
    }
    let all: BTreeSet<_> = zones.values().flatten().cloned().collect();
    assert!(zones.values().all(|z| z.len() == 1), "one zone per job: {zones:?}");
    assert_eq!(all.len(), 3, "a zone of its own for each job: {zones:?}");
    assert_eq!(
        r.pods.iter().find(|p| p.name == "j4-0").unwrap().reason.as_deref(),
        Some(
            "0/6 nodes are available: 6 node(s) didn't match pod anti-affinity rules. \
             preemption: 0/6 nodes are available: 6 No preemption victims found for incoming pod."
        )
    );
}

/// An existing pod's required anti-affinity keeps others away (symmetry).
#[tokio::test]
async fn existing_pods_anti_affinity_is_respected() {
    let nodes = vec![node("a-1", "a"), node("b-1", "b")];
    let loner = PodBuilder::new("loner")
        .label("app", "loner")
        .node("a-1")
        .pod_anti_affinity(ZONE, &[("app", "web")])
        .build();
    let pods = vec![loner, PodBuilder::new("web").label("app", "web").build()];
    let r = run(objects(nodes, pods)).await;
    assert_eq!(node_of(&r, "web"), Some("b-1"));
}

/// `matchLabelKeys`, merged by the API server at creation (here the
/// embedded cluster's `prepare_pod_for_create`): pods of one revision
/// spread over hostnames, another revision may share their nodes.
#[tokio::test]
async fn match_label_keys_scope_anti_affinity_to_a_revision() {
    let nodes = vec![node("a-1", "a"), node("a-2", "a")];
    let pods = ["r1", "r2"]
        .iter()
        .flat_map(|rev| {
            (0..2).map(move |i| {
                let b = PodBuilder::new(&format!("web-{rev}-{i}"))
                    .label("app", "web")
                    .label("rev", rev);
                let mut pod = with_affinity(
                    b,
                    json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"app": "web"}},
                        "matchLabelKeys": ["rev"],
                        "topologyKey": HOSTNAME
                    }]}}),
                )
                .build();
                prepare_pod_for_create(&mut pod);
                pod
            })
        })
        .collect();
    let r = run(objects(nodes, pods)).await;
    assert_eq!((r.summary.bound, r.summary.pending), (4, 0), "{}", r.to_text());
    for rev in ["r1", "r2"] {
        let a = node_of(&r, &format!("web-{rev}-0"));
        let b = node_of(&r, &format!("web-{rev}-1"));
        assert_ne!(a, b, "{rev} spread over the nodes");
    }
}

/// The incoming pod's `namespaceSelector` is resolved through the watched
/// Namespaces.
#[tokio::test]
async fn namespace_selector_uses_namespace_labels() {
    let ns = |name: &str, team: &str| {
        let v = json!({"metadata": {"name": name, "labels": {"team": team}}});
        ClusterObject::Namespace(Arc::new(serde_json::from_value(v).unwrap()))
    };
    let nodes = vec![node("a-1", "a"), node("b-1", "b"), node("c-1", "c")];
    let db = |name: &str, namespace: &str, on: &str| {
        PodBuilder::new(name).namespace(namespace).label("app", "db").node(on).build()
    };
    let web = with_affinity(
        PodBuilder::new("web"),
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"app": "db"}},
            "namespaceSelector": {"matchLabels": {"team": "x"}},
            "topologyKey": ZONE
        }]}}),
    );
    let objects = Objects {
        nodes,
        pods: vec![db("db-y", "team-y", "a-1"), db("db-x", "team-x", "c-1"), web.build()],
        others: vec![ns("team-x", "x"), ns("team-y", "y")],
        ..Default::default()
    };
    let r = run(objects).await;
    assert_eq!(node_of(&r, "web"), Some("c-1"), "{}", r.to_text());
}

/// Preferred anti-affinity spreads pods over zones when it can.
#[tokio::test]
async fn preferred_anti_affinity_spreads_over_zones() {
    let nodes = vec![node("a-1", "a"), node("a-2", "a"), node("b-1", "b"), node("b-2", "b")];
    let pods = (0..2)
        .map(|i| {
            let b = PodBuilder::new(&format!("web-{i}")).label("app", "web");
            b.preferred_pod_anti_affinity(100, ZONE, &[("app", "web")]).build()
        })
        .collect();
    let r = run(objects(nodes, pods)).await;
    let zones: BTreeSet<_> = r.pods.iter().map(|p| zone_of(p.node.as_deref().unwrap())).collect();
    assert_eq!(zones.len(), 2, "{}", r.to_text());
}
