//! Dynamic Resource Allocation on the embedded cluster, loaded from YAML as
//! `simulate` loads it: pods with claims from templates get devices on the
//! node whose ResourceSlice satisfies them, written in the claims; a claim
//! shared by two pods places both on its device's node; a claim no device
//! satisfies keeps its pod pending with upstream's message; no device is
//! ever given to two claims; a DeviceTaintRule loaded with the cluster
//! keeps claims that do not tolerate its taint off the devices it selects.

use std::collections::{BTreeMap, BTreeSet};

use std::sync::Arc;

use convoy_api::FakeClock;
use convoy_embedded::{EmbeddedBinder, EmbeddedCluster, parse_objects};
use convoy_scheduler::decision::LogSink;
use convoy_scheduler::simulate::{Report, simulate};
use convoy_scheduler::{Scheduler, SchedulerOptions};

const DRIVER: &str = "gpu.example.com";

/// A node and its slice of `devices` GPUs of `memory`, NVLink clique
/// `clique`.
fn node(name: &str, devices: usize, memory: &str, clique: &str) -> String {
    let mut yaml = format!(
        "---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\n\
         status: {{allocatable: {{cpu: \"64\", memory: 256Gi, pods: \"110\"}}}}\n\
         ---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}-gpus}}\n\
         spec:\n  driver: {DRIVER}\n  nodeName: {name}\n  pool: {{name: {name}, generation: 1, resourceSliceCount: 1}}\n  devices:\n"
    );
    for i in 0..devices {
        yaml += &format!(
            "  - name: gpu-{i}\n    attributes: {{productName: {{string: A100-{memory}}}, cliqueId: {{string: {clique}}}}}\n    capacity: {{memory: {{value: {memory}}}}}\n"
        );
    }
    yaml
}

const CLASS: &str = r#"---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpu.example.com"'}
"#;

/// A template for `count` GPUs with a CEL selector (`""`: none).
fn template(name: &str, count: i64, selector: &str) -> String {
    let selectors = if selector.is_empty() {
        String::new()
    } else {
        format!("\n          selectors: [{{cel: {{expression: '{selector}'}}}}]")
    };
    format!(
        "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: {name}}}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpus\n        exactly:\n          deviceClassName: {DRIVER}\n          count: {count}{selectors}\n"
    )
}

/// A pod with one claim, from a template or by name.
fn pod(name: &str, template: Option<&str>, claim: Option<&str>) -> String {
    let source = match (template, claim) {
        (Some(t), _) => format!("resourceClaimTemplateName: {t}"),
        (None, Some(c)) => format!("resourceClaimName: {c}"),
        _ => unreachable!(),
    };
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  schedulerName: convoy-scheduler\n  \
         containers: [{{name: c, resources: {{requests: {{cpu: 100m}}, claims: [{{name: gpu}}]}}}}]\n  \
         resourceClaims: [{{name: gpu, {source}}}]\n"
    )
}

/// The whole scheduler (default profile) on an embedded cluster, with a
/// fake clock.
fn scheduler_on(cluster: &Arc<EmbeddedCluster>) -> (Arc<Scheduler>, FakeClock) {
    let clock = FakeClock::new();
    let scheduler = Scheduler::new(SchedulerOptions {
        config: convoy_scheduler::load_config(None).unwrap(),
        registry: convoy_scheduler::registry(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(convoy_embedded::EmbeddedActuator(cluster.clone())),
        clock: Arc::new(clock.clone()),
        sink: Arc::new(LogSink),
        seed: Some(1),
        framework_metrics: None,
    })
    .unwrap();
    (scheduler, clock)
}

async fn run(yaml: &str) -> Report {
    let objects = parse_objects(yaml, "dra.yaml").unwrap();
    let config = convoy_scheduler::load_config(None).unwrap();
    simulate(config, objects, false).await.unwrap()
}

fn outcome(r: &Report, name: &str) -> (Option<String>, String) {
    let p =
        r.pods.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name}: {}", r.to_text()));
    (p.node.clone(), p.reason.clone().unwrap_or_default())
}

#[tokio::test]
async fn claims_get_devices_on_the_node_that_satisfies_them() {
    let mut yaml = String::from(CLASS);
    yaml += &node("small-0", 8, "40Gi", "a");
    yaml += &node("small-1", 8, "40Gi", "a");
    yaml += &node("big", 2, "80Gi", "b");
    yaml += &template(
        "two-big",
        2,
        r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) > 0"#,
    );
    yaml += &template("one", 1, "");
    yaml += &template("h100", 1, r#"device.attributes["gpu.example.com"].productName == "H100""#);
    yaml += "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: shared}\nspec:\n  devices:\n    requests:\n    - name: gpus\n      exactly: {deviceClassName: gpu.example.com}\n";
    yaml += &pod("big-job", Some("two-big"), None);
    for i in 0..15 {
        yaml += &pod(&format!("one-{i}"), Some("one"), None);
    }
    yaml += &pod("share-a", None, Some("shared"));
    yaml += &pod("share-b", None, Some("shared"));
    yaml += &pod("no-such-gpu", Some("h100"), None);
    let r = run(&yaml).await;
    assert_eq!(outcome(&r, "big-job").0.as_deref(), Some("big"), "{}", r.to_text());
    let (a, b) = (outcome(&r, "share-a").0, outcome(&r, "share-b").0);
    assert!(a.is_some() && a == b, "one shared claim, one node: {a:?} {b:?}\n{}", r.to_text());
    // The small nodes' 16 GPUs: 15 one-GPU pods and the shared claim's one.
    let ones: BTreeMap<_, usize> = (0..15).filter_map(|i| outcome(&r, &format!("one-{i}")).0).fold(
        BTreeMap::new(),
        |mut m, n| {
            *m.entry(n).or_default() += 1;
            m
        },
    );
    assert_eq!(ones.values().sum::<usize>(), 15, "{ones:?}");
    assert!(ones.keys().all(|n| n.starts_with("small")), "{ones:?}");
    let (node, reason) = outcome(&r, "no-such-gpu");
    assert_eq!(node, None);
    assert!(
        reason.starts_with("0/3 nodes are available: 3 cannot allocate all claims."),
        "{reason}"
    );
}

/// A DeviceTaintRule loaded with the cluster taints the devices it selects:
/// a claim that does not tolerate the taint gets none of them, one that
/// does gets them.
#[tokio::test]
async fn device_taint_rules_keep_untolerating_claims_off_tainted_devices() {
    let mut yaml = String::from(CLASS);
    yaml += &node("small", 2, "40Gi", "a");
    // Room for both pods on big, but for the rule.
    yaml += &node("big", 4, "80Gi", "b");
    yaml += "---\napiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {name: big-broken}\n\
             spec:\n  deviceSelector: {driver: gpu.example.com, pool: big}\n  \
             taint: {key: example.com/broken, effect: NoSchedule}\n";
    let big = r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) > 0"#;
    yaml += &template("two-big", 2, big);
    yaml += &template("two-big-tolerant", 2, big).replace(
        "          count: 2",
        "          count: 2\n          tolerations: [{key: example.com/broken, operator: Exists}]",
    );
    yaml += &pod("plain", Some("two-big"), None);
    yaml += &pod("tolerant", Some("two-big-tolerant"), None);
    let r = run(&yaml).await;
    assert_eq!(outcome(&r, "tolerant").0.as_deref(), Some("big"), "{}", r.to_text());
    let (node, reason) = outcome(&r, "plain");
    assert_eq!(node, None, "{}", r.to_text());
    assert!(
        reason.starts_with("0/2 nodes are available: 2 cannot allocate all claims."),
        "{reason}"
    );
}

/// Every allocated device is held by one claim only, and each claim's
/// devices are on its pod's node.
#[tokio::test]
async fn no_device_is_allocated_twice() {
    let mut yaml = String::from(CLASS);
    for i in 0..4 {
        yaml += &node(&format!("n{i}"), 4, "40Gi", "a");
    }
    yaml += &template("one", 1, "");
    yaml += &template("two", 2, "");
    for i in 0..6 {
        yaml += &pod(&format!("two-{i}"), Some("two"), None);
        yaml += &pod(&format!("one-{i}"), Some("one"), None);
    }
    let (cluster, mut updates) = EmbeddedCluster::new(parse_objects(&yaml, "dra.yaml").unwrap());
    let (scheduler, clock) = scheduler_on(&cluster);
    scheduler.run_until_idle(&mut updates, &clock).await;
    // 16 GPUs for 18 asked: every GPU is given, once.
    let mut seen = BTreeSet::new();
    for pod in cluster.pods() {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
        let status = pod.status.as_ref().and_then(|s| s.resource_claim_statuses.clone()).unwrap();
        let claim_name = status[0].resource_claim_name.clone().unwrap();
        let claim = cluster.resource_claim("default", &claim_name).unwrap();
        let results = claim.status.as_ref().unwrap().allocation.as_ref().unwrap();
        for r in results.devices.as_ref().unwrap().results.iter().flatten() {
            assert_eq!(r.pool, node, "{claim_name}'s devices are on its pod's node");
            assert!(seen.insert((r.pool.clone(), r.device.clone())), "{} given twice", r.device);
        }
        let reserved = &claim.status.as_ref().unwrap().reserved_for;
        assert_eq!(reserved.as_ref().map(Vec::len), Some(1), "{claim_name} reserved for its pod");
    }
    assert_eq!(seen.len(), 16);
}

/// With GpuPlacement (config/gpu-cluster.yaml), devices from ResourceSlices
/// are placed to strand the fewest: a 2-GPU pod goes to the node whose
/// last 2 free GPUs it takes (6 are held by an allocated claim), although
/// NodeResourcesFit's MostAllocated prefers the node whose CPUs a pod
/// without GPUs fills; an 8-GPU pod then still finds an empty node.
#[tokio::test]
async fn gpu_placement_packs_devices_from_resource_slices() {
    let mut yaml = String::from(CLASS);
    for n in ["a", "b", "c"] {
        yaml += &node(n, 8, "80Gi", "x");
    }
    let results: Vec<String> = (0..6)
        .map(|i| format!("{{request: gpus, driver: {DRIVER}, pool: b, device: gpu-{i}}}"))
        .collect();
    yaml += &format!(
        "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: held}}\n\
         spec: {{devices: {{requests: [{{name: gpus, exactly: {{deviceClassName: {DRIVER}, count: 6}}}}]}}}}\n\
         status: {{allocation: {{devices: {{results: [{}]}}}}}}\n",
        results.join(", ")
    );
    yaml += "---\napiVersion: v1\nkind: Pod\nmetadata: {name: cpu-hog}\nspec:\n  nodeName: a\n  \
             containers: [{name: c, resources: {requests: {cpu: \"48\"}}}]\n";
    yaml += &template("two", 2, "");
    yaml += &template("eight", 8, "");
    let with_scheduler = |p: String| p.replace("convoy-scheduler", "convoy-gpu");
    yaml += &with_scheduler(pod("two", Some("two"), None));
    yaml += &with_scheduler(pod("eight", Some("eight"), None));
    let objects = parse_objects(&yaml, "dra.yaml").unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/gpu-cluster.yaml");
    let config = convoy_scheduler::load_config(Some(std::path::Path::new(path))).unwrap();
    let r = simulate(config, objects, false).await.unwrap();
    assert_eq!(outcome(&r, "two").0.as_deref(), Some("b"), "{}", r.to_text());
    assert!(outcome(&r, "eight").0.is_some(), "{}", r.to_text());
}

/// A pod the taints of a DeviceTaintRule kept pending is retried when the
/// rule is deleted (DynamicResources registers DeviceTaintRule deletions;
/// upstream hears of them as slice updates), not at the periodic flush.
#[tokio::test]
async fn deleting_a_device_taint_rule_releases_the_pod() {
    let mut yaml = String::from(CLASS);
    yaml += &node("big", 2, "80Gi", "b");
    yaml += "---\napiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {name: broken}\n\
             spec:\n  deviceSelector: {device: gpu-1}\n  taint: {key: k, effect: NoExecute}\n";
    yaml += &template("two", 2, "");
    yaml += &pod("p", Some("two"), None);
    let (cluster, mut updates) = EmbeddedCluster::new(parse_objects(&yaml, "taint.yaml").unwrap());
    let (scheduler, clock) = scheduler_on(&cluster);
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(cluster.bound_count(), 0, "one of the two devices is tainted");
    assert_eq!(scheduler.queue().pending_counts().unschedulable, 1);

    cluster.delete_object("DeviceTaintRule", "broken").unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    let p = cluster.pod("default", "p").unwrap();
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("big"));
}
