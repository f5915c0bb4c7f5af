//! The scenario generator: seeded, deterministic, every object as JSON.
//!
//! A scenario is a set of namespaces (some labelled, for
//! `namespaceSelector`), RuntimeClasses (one with a pod overhead),
//! heterogeneous nodes (zones, racks, hostnames, other labels, taints of the
//! three effects, `spec.unschedulable`, allocatable cpu/memory/pods/GPUs,
//! images in `status.images`), workload objects (Services, ReplicaSets,
//! StatefulSets: upstream's system default spreading), pods already bound
//! (labels, requests, host ports, their own pod affinity) and the pods to
//! schedule, one at a time: resources ([`resources`]: one or two containers
//! with or without requests, explicit zeros, init containers and sidecars,
//! pod-level requests or limits, runtime classes; contention, some that fit
//! nowhere), host ports, node selectors, required/preferred node affinity,
//! tolerations, required/preferred pod affinity and anti-affinity (several
//! namespaces, `namespaces` lists, `namespaceSelector`, `matchLabelKeys`),
//! topology spread constraints (`DoNotSchedule`/`ScheduleAnyway`,
//! `minDomains`, node inclusion policies, `matchLabelKeys`), controllers and
//! images (init containers, image volumes).
//!
//! The random draws never depend on the feature switches: a feature that is
//! off is generated and then stripped ([`Scenario::strip`]), so turning it on
//! adds to the same scenario.

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

#[path = "resources.rs"]
pub mod resources;
use resources::GPU;

/// `InterPodAffinity`: pod affinity and anti-affinity.
pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
/// `PodTopologySpread`: topology spread constraints, and system default
/// spreading (Services, ReplicaSets, StatefulSets, owner references).
pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
/// `ImageLocality`: images on nodes (`status.images`) and image volumes.
pub const IMAGE_LOCALITY: &str = "ImageLocality";
/// Every switchable feature, named after the upstream plugin that decides it.
pub const ALL_FEATURES: [&str; 3] = [INTER_POD_AFFINITY, POD_TOPOLOGY_SPREAD, IMAGE_LOCALITY];

/// The features whose Convoy plugin is on this branch. Those not listed are
/// neither generated nor run: both profiles disable their plugin.
/// `CONVOY_PARITY_FEATURES=InterPodAffinity,...` (or `all`, or `none`)
/// overrides the list for one run.
pub const IMPLEMENTED: &[&str] = &ALL_FEATURES;

/// Pods to schedule per seed.
pub const PODS: usize = 40;

pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const RACK: &str = "parity.convoy.dev/rack";
const DISK: &str = "parity.convoy.dev/disk";
const GPU_COUNT: &str = "parity.convoy.dev/gpu-count";
const MISSING: &str = "parity.convoy.dev/missing";
const ZONES: [&str; 4] = ["a", "b", "c", "d"];
const RACKS: [&str; 5] = ["r0", "r1", "r2", "r3", "r4"];
const DISKS: [&str; 3] = ["ssd", "hdd", "nvme"];
const TAINT_KEYS: [&str; 3] =
    ["parity.convoy.dev/dedicated", "parity.convoy.dev/gpu", "parity.convoy.dev/maintenance"];
const TAINT_VALUES: [&str; 3] = ["", "a", "b"];
const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
const SHARED_PORTS: [i64; 3] = [8080, 8081, 8082];
const HOST_IPS: [&str; 3] = ["", "127.0.0.1", "10.0.0.1"];

/// Namespaces and their labels; pods go to the first most often.
pub const NAMESPACES: [(&str, &[(&str, &str)]); 4] = [
    ("parity", &[("team", "core")]),
    ("team-a", &[("team", "a"), ("env", "prod")]),
    ("team-b", &[("team", "b"), ("env", "dev")]),
    ("plain", &[]),
];
const APPS: [&str; 4] = ["web", "db", "cache", "batch"];
const TIERS: [&str; 2] = ["front", "back"];
const ROLES: [&str; 2] = ["leader", "follower"];

/// Images nodes may hold: the names the kubelet would report, and a size.
/// ImageLocality matches a container's image by exact name (after adding
/// `:latest` to an untagged one), so `nginx:1.25` and
/// `docker.io/library/nginx:1.25` are different images to it.
const NODE_IMAGES: [(&[&str], i64); 7] = [
    (&["registry.k8s.io/pause:3.10"], 300_000),
    (&["docker.io/library/nginx:1.25", "nginx:1.25"], 190_000_000),
    (&["busybox:latest"], 4_300_000),
    (&["localhost:5000/trainer:latest"], 2_600_000_000),
    (&["ghcr.io/convoy/model-server:v2"], 1_200_000_000),
    (&["python:3.12"], 1_020_000_000),
    (&["postgres:16"], 430_000_000),
];
/// Images pods ask for (some only under another name, one on no node).
const POD_IMAGES: [&str; 10] = [
    "registry.k8s.io/pause:3.10",
    "nginx:1.25",
    "docker.io/library/nginx:1.25",
    "busybox",
    "localhost:5000/trainer",
    "ghcr.io/convoy/model-server:v2",
    "python:3.12",
    "postgres:16",
    "postgres",
    "example.com/absent:1",
];

/// The switchable features turned on for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features(BTreeSet<&'static str>);

impl Features {
    /// [`IMPLEMENTED`], or `CONVOY_PARITY_FEATURES` when set.
    pub fn from_env() -> Features {
        match std::env::var("CONVOY_PARITY_FEATURES") {
            Ok(s) => Features::parse(&s),
            Err(_) => Features::of(IMPLEMENTED),
        }
    }

    /// A comma-separated list of feature names, `all` or `none`.
    pub fn parse(s: &str) -> Features {
        match s.trim() {
            "all" => Features::of(&ALL_FEATURES),
            "none" | "" => Features::of(&[]),
            list => Features::of(&list.split(',').map(str::trim).collect::<Vec<_>>()),
        }
    }

    /// The given features.
    ///
    /// # Panics
    /// On a name not in [`ALL_FEATURES`].
    pub fn of(names: &[&str]) -> Features {
        Features(
            names
                .iter()
                .map(|n| {
                    *ALL_FEATURES.iter().find(|f| *f == n).unwrap_or_else(|| {
                        panic!("unknown parity feature {n:?}; known: {ALL_FEATURES:?}")
                    })
                })
                .collect(),
        )
    }

    /// Whether `feature` is on.
    pub fn on(&self, feature: &str) -> bool {
        self.0.contains(feature)
    }

    /// The features that are off (their plugins are disabled on both sides).
    pub fn off(&self) -> Vec<&'static str> {
        ALL_FEATURES.iter().copied().filter(|f| !self.on(f)).collect()
    }
}

impl std::fmt::Display for Features {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on: Vec<&str> = self.0.iter().copied().collect();
        write!(f, "[{}]", on.join(", "))
    }
}

/// One generated scenario, as JSON objects.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Namespaces (with labels).
    pub namespaces: Vec<Value>,
    /// RuntimeClasses, with `apiVersion` and `kind`.
    pub runtime_classes: Vec<Value>,
    /// Nodes.
    pub nodes: Vec<Value>,
    /// Services, ReplicaSets and StatefulSets, with `apiVersion` and `kind`.
    pub workloads: Vec<Value>,
    /// Pods bound from the start (`spec.nodeName` set).
    pub existing: Vec<Value>,
    /// The pods to schedule, in order, without `schedulerName`.
    pub pods: Vec<Value>,
}

impl Scenario {
    /// The scenario of `seed`, with the features that are off stripped.
    pub fn generate(seed: u64, features: &Features) -> Scenario {
        let mut rng = StdRng::seed_from_u64(seed);
        let namespaces = NAMESPACES
            .iter()
            .map(|(name, labels)| {
                let labels: Map<String, Value> =
                    labels.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
                json!({ "metadata": { "name": name, "labels": labels } })
            })
            .collect();
        let count = rng.random_range(12..=28);
        let nodes: Vec<Value> = (0..count).map(|i| gen_node(&mut rng, i)).collect();
        let names: Vec<String> = nodes.iter().map(|n| name_of(n).to_string()).collect();
        let workloads = gen_workloads(&mut rng);
        let mut existing = Vec::new();
        for node in &names {
            if rng.random_bool(0.5) {
                for k in 0..rng.random_range(1..=3) {
                    let mut pod = gen_pod(&mut rng, &format!("existing-{node}-{k}"), &names, true);
                    pod["spec"]["nodeName"] = json!(node);
                    pod["spec"]["schedulerName"] = json!("nobody");
                    existing.push(pod);
                }
            }
        }
        let pods = (0..PODS).map(|j| gen_pod(&mut rng, &format!("pod-{j:02}"), &names, false));
        let mut sc = Scenario {
            namespaces,
            runtime_classes: resources::runtime_classes(),
            nodes,
            workloads,
            existing,
            pods: pods.collect(),
        };
        sc.strip(features);
        sc
    }

    /// Removes what belongs to features that are off.
    fn strip(&mut self, features: &Features) {
        let pods = self.existing.iter_mut().chain(self.pods.iter_mut());
        for pod in pods {
            let spec = pod["spec"].as_object_mut().expect("pods have a spec");
            if !features.on(INTER_POD_AFFINITY)
                && let Some(affinity) = spec.get_mut("affinity").and_then(Value::as_object_mut)
            {
                affinity.remove("podAffinity");
                affinity.remove("podAntiAffinity");
                if affinity.is_empty() {
                    spec.remove("affinity");
                }
            }
            if !features.on(IMAGE_LOCALITY) {
                spec.remove("volumes");
                for c in spec["containers"].as_array_mut().into_iter().flatten() {
                    c.as_object_mut().expect("containers are objects").remove("volumeMounts");
                }
            }
            if !features.on(POD_TOPOLOGY_SPREAD) {
                spec.remove("topologySpreadConstraints");
                pod["metadata"]
                    .as_object_mut()
                    .expect("pods have metadata")
                    .remove("ownerReferences");
            }
        }
        if !features.on(POD_TOPOLOGY_SPREAD) {
            self.workloads.clear();
        }
        if !features.on(IMAGE_LOCALITY) {
            for node in &mut self.nodes {
                node["status"].as_object_mut().expect("nodes have a status").remove("images");
            }
        }
    }
}

/// `metadata.name` of a generated object.
pub fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().expect("generated objects are named")
}

/// `namespace/name` of a generated pod.
pub fn key_of(pod: &Value) -> String {
    format!("{}/{}", pod["metadata"]["namespace"].as_str().unwrap_or("default"), name_of(pod))
}

fn gen_node(rng: &mut StdRng, i: usize) -> Value {
    let name = format!("node-{i:02}");
    let mut labels = Map::new();
    labels.insert(HOSTNAME.into(), json!(name));
    if rng.random_bool(0.85) {
        labels.insert(ZONE.into(), json!(ZONES[..3].choose(rng).unwrap()));
    }
    if rng.random_bool(0.7) {
        labels.insert(RACK.into(), json!(RACKS.choose(rng).unwrap()));
    }
    if rng.random_bool(0.7) {
        labels.insert(DISK.into(), json!(DISKS[..2].choose(rng).unwrap()));
    }
    if rng.random_bool(0.6) {
        // Now and then not a number: Gt/Lt must not match it.
        let count =
            if rng.random_bool(0.1) { "many".into() } else { rng.random_range(0..=8).to_string() };
        labels.insert(GPU_COUNT.into(), json!(count));
    }

    let mut taints: Vec<Value> = Vec::new();
    for _ in 0..*[0, 0, 0, 1, 1, 2].choose(rng).unwrap() {
        let (key, effect) = (*TAINT_KEYS.choose(rng).unwrap(), *EFFECTS.choose(rng).unwrap());
        if taints.iter().any(|t| t["key"] == key && t["effect"] == effect) {
            continue;
        }
        let mut taint = json!({ "key": key, "effect": effect });
        let value = *TAINT_VALUES.choose(rng).unwrap();
        if !value.is_empty() {
            taint["value"] = json!(value);
        }
        taints.push(taint);
    }
    let unschedulable = rng.random_bool(0.1);

    let cpu = match rng.random_range(0..10) {
        0 => format!("{}m", rng.random_range(5..=35) * 100),
        _ => rng.random_range(1..=8).to_string(),
    };
    let memory = format!("{}Mi", rng.random_range(2..=32) * 1024);
    let pods = if rng.random_bool(0.05) { "2" } else { "110" };
    let mut allocatable = json!({ "cpu": cpu, "memory": memory, "pods": pods });
    if rng.random_bool(0.3) {
        allocatable[GPU] = json!("8");
    }
    let mut images = Vec::new();
    for (names, size) in NODE_IMAGES {
        if rng.random_bool(0.35) {
            // One size per name on every node. When nodes report different
            // sizes for a name, upstream's ImageLocality takes the size of
            // the node its cache saw first, and its informer's initial list
            // arrives in map order (client-go's watch-list builds it in a
            // temporary store): the score is then not reproducible even by
            // upstream itself (docs/configuration.md, ImageLocality).
            images.push(json!({ "names": names, "sizeBytes": size }));
        }
    }
    json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "unschedulable": unschedulable, "taints": taints },
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{ "type": "Ready", "status": "True" }],
            "images": images,
        },
    })
}

/// Per namespace and app: a headless Service selecting it, a ReplicaSet, a
/// StatefulSet, or nothing.
fn gen_workloads(rng: &mut StdRng) -> Vec<Value> {
    let mut out = Vec::new();
    for (ns, _) in NAMESPACES {
        for app in APPS {
            if rng.random_bool(0.4) {
                let mut selector = json!({ "app": app });
                if rng.random_bool(0.2) {
                    selector["tier"] = json!(TIERS.choose(rng).unwrap());
                }
                out.push(json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": { "name": format!("svc-{app}"), "namespace": ns },
                    "spec": { "clusterIP": "None", "selector": selector },
                }));
            }
            let template = json!({
                "metadata": { "labels": { "app": app } },
                "spec": { "containers": [{ "name": "main", "image": "registry.k8s.io/pause:3.10" }] },
            });
            if rng.random_bool(0.5) {
                out.push(json!({
                    "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": { "name": format!("rs-{app}"), "namespace": ns },
                    "spec": { "replicas": 0, "selector": { "matchLabels": { "app": app } }, "template": template },
                }));
            }
            if rng.random_bool(0.2) {
                out.push(json!({
                    "apiVersion": "apps/v1", "kind": "StatefulSet",
                    "metadata": { "name": format!("ss-{app}"), "namespace": ns },
                    "spec": {
                        "replicas": 0, "serviceName": format!("svc-{app}"),
                        "selector": { "matchLabels": { "app": app } }, "template": template,
                    },
                }));
            }
        }
    }
    out
}

fn port_json(port: i64, protocol: &str, host_ip: &str) -> Value {
    let mut p = json!({ "containerPort": port, "hostPort": port, "protocol": protocol });
    if !host_ip.is_empty() {
        p["hostIP"] = json!(host_ip);
    }
    p
}

/// A container; one without requests has an empty `resources.requests` or
/// no `resources` at all.
fn container(rng: &mut StdRng, name: &str, existing: bool) -> Value {
    let requests = resources::gen_requests(rng, existing);
    let mut c = json!({ "name": name, "image": POD_IMAGES.choose(rng).unwrap() });
    if requests.as_object().is_some_and(|r| !r.is_empty()) || rng.random_bool(0.5) {
        c["resources"] = json!({ "requests": requests });
    }
    if let Some(gpus) = requests.get(GPU) {
        c["resources"]["limits"] = json!({ GPU: gpus });
    }
    c
}

/// A pod: `existing` ones are bound from the start (simpler requests, no
/// node constraints, their own pod affinity terms for symmetry and score).
fn gen_pod(rng: &mut StdRng, name: &str, nodes: &[String], existing: bool) -> Value {
    let ns = match rng.random_range(0..10) {
        0..5 => NAMESPACES[0].0,
        5..7 => NAMESPACES[1].0,
        7..9 => NAMESPACES[2].0,
        _ => NAMESPACES[3].0,
    };
    let app = *APPS.choose(rng).unwrap();
    let mut labels = json!({ "app": app, "tier": TIERS.choose(rng).unwrap() });
    if rng.random_bool(0.3) {
        labels["role"] = json!(ROLES.choose(rng).unwrap());
    }
    let mut meta = json!({ "name": name, "namespace": ns, "labels": labels });

    let mut containers = vec![container(rng, "main", existing)];
    if rng.random_bool(0.2) {
        containers.push(container(rng, "side", existing));
    }
    let mut spec = Map::new();
    let init: Vec<Value> = (0..resources::gen_init_count(rng))
        .map(|k| {
            if rng.random_bool(0.5) {
                let mut c = container(rng, &format!("sidecar-{k}"), existing);
                c["restartPolicy"] = json!("Always");
                c
            } else {
                container(rng, &format!("init-{k}"), existing)
            }
        })
        .collect();
    if !init.is_empty() {
        spec.insert("initContainers".into(), json!(init));
    }
    if rng.random_bool(if existing { 0.3 } else { 0.1 }) {
        let port = *SHARED_PORTS.choose(rng).unwrap();
        let protocol = if rng.random_bool(0.8) { "TCP" } else { "UDP" };
        containers[0]["ports"] = json!([port_json(port, protocol, HOST_IPS.choose(rng).unwrap())]);
    }
    if rng.random_bool(0.1) {
        let reference = *POD_IMAGES.choose(rng).unwrap();
        spec.insert(
            "volumes".into(),
            json!([{ "name": "model", "image": { "reference": reference, "pullPolicy": "IfNotPresent" } }]),
        );
        containers[0]["volumeMounts"] = json!([{ "name": "model", "mountPath": "/model" }]);
    }
    spec.insert("containers".into(), Value::Array(containers));
    if let Some(pod_level) = resources::gen_pod_level(rng, &spec, existing) {
        spec.insert("resources".into(), pod_level);
    }
    if let Some(class) = resources::gen_runtime_class(rng, existing) {
        spec.insert("runtimeClassName".into(), json!(class));
    }

    let mut affinity = Map::new();
    if !existing {
        if rng.random_bool(0.15) {
            let mut selector = Map::new();
            if rng.random_bool(0.7) {
                selector.insert(ZONE.into(), json!(ZONES.choose(rng).unwrap()));
            }
            if selector.is_empty() || rng.random_bool(0.4) {
                selector.insert(DISK.into(), json!(DISKS.choose(rng).unwrap()));
            }
            spec.insert("nodeSelector".into(), Value::Object(selector));
        }
        let node_affinity = gen_node_affinity(rng, nodes);
        if !node_affinity.is_empty() {
            affinity.insert("nodeAffinity".into(), Value::Object(node_affinity));
        }
        if rng.random_bool(0.5) {
            let tolerations: Vec<Value> =
                (0..rng.random_range(1..=3)).map(|_| gen_toleration(rng)).collect();
            spec.insert("tolerations".into(), json!(tolerations));
        }
    }
    let (required, preferred) = if existing { (0.1, 0.2) } else { (0.12, 0.25) };
    for kind in ["podAffinity", "podAntiAffinity"] {
        let mut terms = Map::new();
        if rng.random_bool(required) {
            let n = if rng.random_bool(0.8) { 1 } else { 2 };
            let t: Vec<Value> = (0..n).map(|_| gen_pod_affinity_term(rng, app)).collect();
            terms.insert("requiredDuringSchedulingIgnoredDuringExecution".into(), json!(t));
        }
        if rng.random_bool(preferred) {
            let t: Vec<Value> = (0..rng.random_range(1..=2))
                .map(|_| {
                    json!({
                        "weight": rng.random_range(1..=100),
                        "podAffinityTerm": gen_pod_affinity_term(rng, app),
                    })
                })
                .collect();
            terms.insert("preferredDuringSchedulingIgnoredDuringExecution".into(), json!(t));
        }
        if !terms.is_empty() {
            affinity.insert(kind.into(), Value::Object(terms));
        }
    }
    if !affinity.is_empty() {
        spec.insert("affinity".into(), Value::Object(affinity));
    }
    if !existing && rng.random_bool(0.3) {
        spec.insert("topologySpreadConstraints".into(), json!(gen_spread(rng, app)));
    }
    // A controller (system default spreading applies when it exists and the
    // pod has no constraints of its own).
    match rng.random_range(0..10) {
        0..3 => {
            meta["ownerReferences"] = json!([owner("ReplicaSet", &format!("rs-{app}"))]);
        }
        3 => {
            meta["ownerReferences"] = json!([owner("StatefulSet", &format!("ss-{app}"))]);
        }
        _ => {}
    }
    json!({ "metadata": meta, "spec": spec })
}

fn owner(kind: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": kind, "name": name,
        "uid": "00000000-0000-0000-0000-00000000beef", "controller": true,
    })
}

fn gen_node_affinity(rng: &mut StdRng, nodes: &[String]) -> Map<String, Value> {
    let mut node_affinity = Map::new();
    if rng.random_bool(0.3) {
        let terms: Vec<Value> = (0..rng.random_range(1..=2))
            .map(|_| {
                if rng.random_bool(0.04) {
                    return json!({}); // matches no node
                }
                let mut term = json!({
                    "matchExpressions": (0..rng.random_range(1..=2)).map(|_| gen_expr(rng, nodes)).collect::<Vec<_>>(),
                });
                if rng.random_bool(0.15) {
                    let op = if rng.random_bool(0.5) { "In" } else { "NotIn" };
                    term["matchFields"] = json!([{
                        "key": "metadata.name", "operator": op, "values": [nodes.choose(rng).unwrap()],
                    }]);
                }
                term
            })
            .collect();
        node_affinity.insert(
            "requiredDuringSchedulingIgnoredDuringExecution".into(),
            json!({ "nodeSelectorTerms": terms }),
        );
    }
    if rng.random_bool(0.35) {
        let preferred: Vec<Value> = (0..rng.random_range(1..=3))
            .map(|_| {
                json!({
                    "weight": rng.random_range(1..=100),
                    "preference": { "matchExpressions": [gen_expr(rng, nodes)] },
                })
            })
            .collect();
        node_affinity
            .insert("preferredDuringSchedulingIgnoredDuringExecution".into(), json!(preferred));
    }
    node_affinity
}

fn gen_expr(rng: &mut StdRng, nodes: &[String]) -> Value {
    fn set(rng: &mut StdRng, key: &str, domain: &[&str]) -> Value {
        match rng.random_range(0..6) {
            0 => json!({ "key": key, "operator": "Exists" }),
            1 => json!({ "key": key, "operator": "DoesNotExist" }),
            r => {
                let amount = rng.random_range(1..=2);
                let values: Vec<&str> = domain.choose_multiple(rng, amount).copied().collect();
                let op = if r % 2 == 0 { "In" } else { "NotIn" };
                json!({ "key": key, "operator": op, "values": values })
            }
        }
    }
    match rng.random_range(0..11) {
        0..3 => set(rng, ZONE, &ZONES),
        3 => set(rng, RACK, &RACKS),
        4..6 => set(rng, DISK, &DISKS),
        6..9 if rng.random_bool(0.7) => {
            let op = if rng.random_bool(0.5) { "Gt" } else { "Lt" };
            json!({ "key": GPU_COUNT, "operator": op, "values": [rng.random_range(0..=8).to_string()] })
        }
        6..9 => set(rng, GPU_COUNT, &["0", "2", "4", "8", "many"]),
        9 => {
            let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
            set(rng, HOSTNAME, &names)
        }
        _ => set(rng, MISSING, &["x"]),
    }
}

fn gen_toleration(rng: &mut StdRng) -> Value {
    match rng.random_range(0..20) {
        0 => json!({ "operator": "Exists" }),
        1 => json!({ "key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule" }),
        2 => json!({ "key": UNSCHEDULABLE_TAINT, "operator": "Exists" }),
        _ => {
            let mut t = json!({ "key": TAINT_KEYS.choose(rng).unwrap() });
            if rng.random_bool(0.4) {
                t["operator"] = json!("Exists");
            } else {
                t["operator"] = json!("Equal");
                t["value"] = json!(TAINT_VALUES.choose(rng).unwrap());
            }
            let effect = *["", "NoSchedule", "PreferNoSchedule", "NoExecute"].choose(rng).unwrap();
            if !effect.is_empty() {
                t["effect"] = json!(effect);
            }
            if effect == "NoExecute" && rng.random_bool(0.3) {
                t["tolerationSeconds"] = json!(300);
            }
            t
        }
    }
}

/// A label selector over pod labels; never names `tier`, which
/// `matchLabelKeys`/`mismatchLabelKeys` use (the API rejects a key in both).
fn gen_selector(rng: &mut StdRng, own_app: &str) -> Value {
    match rng.random_range(0..10) {
        0..3 => json!({ "matchLabels": { "app": own_app } }),
        3..5 => json!({ "matchLabels": { "app": APPS.choose(rng).unwrap() } }),
        5..7 => {
            let values: Vec<&str> = APPS.choose_multiple(rng, 2).copied().collect();
            json!({ "matchExpressions": [{ "key": "app", "operator": "In", "values": values }] })
        }
        7 => {
            json!({ "matchExpressions": [{ "key": "app", "operator": "NotIn", "values": [own_app] }] })
        }
        8 => {
            let op = if rng.random_bool(0.5) { "Exists" } else { "DoesNotExist" };
            json!({ "matchExpressions": [{ "key": "role", "operator": op }] })
        }
        _ => json!({}),
    }
}

fn gen_pod_affinity_term(rng: &mut StdRng, own_app: &str) -> Value {
    let key = match rng.random_range(0..10) {
        0..4 => HOSTNAME,
        4..8 => ZONE,
        _ => RACK,
    };
    let mut term = json!({ "topologyKey": key, "labelSelector": gen_selector(rng, own_app) });
    let all: Vec<&str> = NAMESPACES.iter().map(|(n, _)| *n).collect();
    match rng.random_range(0..10) {
        0..2 => {
            let n = rng.random_range(1..=2);
            term["namespaces"] = json!(all.choose_multiple(rng, n).collect::<Vec<_>>());
        }
        2 => term["namespaceSelector"] = json!({}),
        3 => term["namespaceSelector"] = json!({ "matchLabels": { "team": "a" } }),
        4 => {
            term["namespaceSelector"] = json!({ "matchExpressions": [{ "key": "env", "operator": "In", "values": ["prod", "dev"] }] });
            term["namespaces"] = json!([all[0]]);
        }
        _ => {}
    }
    match rng.random_range(0..10) {
        0 => term["matchLabelKeys"] = json!(["tier"]),
        1 => term["mismatchLabelKeys"] = json!(["tier"]),
        _ => {}
    }
    term
}

fn gen_spread(rng: &mut StdRng, own_app: &str) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for _ in 0..rng.random_range(1..=2) {
        let key = match rng.random_range(0..10) {
            0..4 => ZONE,
            4..8 => HOSTNAME,
            _ => RACK,
        };
        let hard = rng.random_bool(0.5);
        let when = if hard { "DoNotSchedule" } else { "ScheduleAnyway" };
        // One constraint per (topologyKey, whenUnsatisfiable).
        if out.iter().any(|c| c["topologyKey"] == key && c["whenUnsatisfiable"] == when) {
            continue;
        }
        let selector = if rng.random_bool(0.7) {
            json!({ "matchLabels": { "app": own_app } })
        } else {
            gen_selector(rng, own_app)
        };
        let mut c = json!({
            "maxSkew": rng.random_range(1..=3),
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": selector,
        });
        if hard && rng.random_bool(0.25) {
            c["minDomains"] = json!(rng.random_range(2..=5));
        }
        if rng.random_bool(0.3) {
            c["nodeAffinityPolicy"] = json!(if rng.random_bool(0.5) { "Honor" } else { "Ignore" });
        }
        if rng.random_bool(0.3) {
            c["nodeTaintsPolicy"] = json!(if rng.random_bool(0.5) { "Honor" } else { "Ignore" });
        }
        if rng.random_bool(0.15) {
            c["matchLabelKeys"] = json!(["tier"]);
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_features_only_strip() {
        let all = Features::of(&ALL_FEATURES);
        let none = Features::of(&[]);
        for seed in 0..30 {
            let a = Scenario::generate(seed, &all);
            assert_eq!(a, Scenario::generate(seed, &all), "seed {seed}");
            let b = Scenario::generate(seed, &none);
            // Same objects, fewer fields.
            assert_eq!(a.nodes.len(), b.nodes.len());
            assert_eq!(a.pods.len(), b.pods.len());
            assert!(b.workloads.is_empty());
            for p in b.existing.iter().chain(&b.pods) {
                let spec = &p["spec"];
                assert!(spec["topologySpreadConstraints"].is_null(), "{p}");
                assert!(spec["affinity"]["podAffinity"].is_null(), "{p}");
                assert!(spec["affinity"]["podAntiAffinity"].is_null(), "{p}");
                assert!(spec["volumes"].is_null(), "{p}");
                assert!(p["metadata"]["ownerReferences"].is_null(), "{p}");
            }
            assert!(b.nodes.iter().all(|n| n["status"]["images"].is_null()));
        }
    }

    #[test]
    fn every_feature_is_generated_somewhere() {
        let all = Features::of(&ALL_FEATURES);
        let scenarios: Vec<Scenario> = (1..=3).map(|s| Scenario::generate(s, &all)).collect();
        let pods = || scenarios.iter().flat_map(|s| &s.pods);
        let has = |f: &dyn Fn(&Value) -> bool| pods().any(f);
        assert!(has(&|p| !p["spec"]["affinity"]["podAffinity"].is_null()));
        assert!(has(&|p| !p["spec"]["affinity"]["podAntiAffinity"].is_null()));
        assert!(has(&|p| !p["spec"]["topologySpreadConstraints"].is_null()));
        assert!(has(&|p| !p["spec"]["volumes"].is_null()));
        assert!(has(&|p| !p["metadata"]["ownerReferences"].is_null()));
        assert!(has(&|p| p["metadata"]["namespace"] != "parity"));
        assert!(scenarios.iter().all(|s| {
            s.nodes.iter().any(|n| n["status"]["images"].as_array().is_some_and(|i| !i.is_empty()))
        }));
    }

    #[test]
    fn features_parse() {
        assert_eq!(Features::parse("all"), Features::of(&ALL_FEATURES));
        assert_eq!(Features::parse(" none "), Features::of(&[]));
        let f = Features::parse("ImageLocality, InterPodAffinity");
        assert!(f.on(IMAGE_LOCALITY) && f.on(INTER_POD_AFFINITY) && !f.on(POD_TOPOLOGY_SPREAD));
        assert_eq!(f.off(), vec![POD_TOPOLOGY_SPREAD]);
    }
}
