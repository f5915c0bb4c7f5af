//! What a pod asks of a node's cpu and memory, for the generator: container
//! requests (absent, explicit zero, one resource only, small, large, GPUs,
//! more than any node has), pod-level `spec.resources` (requests or limits,
//! never below the containers' aggregate, as the API server requires), and
//! the RuntimeClasses whose `overhead.podFixed` the RuntimeClass admission
//! plugin copies into `spec.overhead` of the pods that name them.
//!
//! Every request this module writes is `<n>m` or `<n>` for cpu and `<n>Mi`,
//! `<n>Gi`, `<n>Ti` or `0` for memory; [`milli_cpu`] and [`mebibytes`] read
//! those forms back.

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Map, Value, json};

/// The extended resource nodes may offer and pods may ask for.
pub const GPU: &str = "nvidia.com/gpu";

/// RuntimeClasses (handler `runc`): name, and `overhead.podFixed` cpu and
/// memory when the class has an overhead.
pub const RUNTIME_CLASSES: [(&str, Option<(&str, &str)>); 2] =
    [("overhead", Some(("250m", "120Mi"))), ("plain", None)];

/// The RuntimeClass objects, with `apiVersion` and `kind`; they exist before
/// any pod that names them.
pub fn runtime_classes() -> Vec<Value> {
    RUNTIME_CLASSES
        .iter()
        .map(|(name, overhead)| {
            let mut class = json!({
                "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": { "name": name }, "handler": "runc",
            });
            if let Some((cpu, memory)) = overhead {
                class["overhead"] = json!({ "podFixed": { "cpu": cpu, "memory": memory } });
            }
            class
        })
        .collect()
}

/// The `runtimeClassName` of a pod, if any (mostly the class with an
/// overhead).
pub fn gen_runtime_class(rng: &mut StdRng, existing: bool) -> Option<&'static str> {
    if !rng.random_bool(if existing { 0.15 } else { 0.25 }) {
        return None;
    }
    Some(if rng.random_bool(0.75) { RUNTIME_CLASSES[0].0 } else { RUNTIME_CLASSES[1].0 })
}

fn small_cpu(rng: &mut StdRng) -> Value {
    json!(format!("{}m", rng.random_range(1..=30) * 50))
}

fn small_memory(rng: &mut StdRng) -> Value {
    json!(format!("{}Mi", rng.random_range(1..=48) * 64))
}

/// Explicit zero requests: a zero is a request of nothing, not a missing
/// request (the scorers' non-zero defaults of 100m and 200Mi do not apply).
fn zeros(rng: &mut StdRng) -> Value {
    match rng.random_range(0..4) {
        0 => json!({ "cpu": "0" }),
        1 => json!({ "cpu": "0", "memory": "0" }),
        2 => json!({ "cpu": "0", "memory": small_memory(rng) }),
        _ => json!({ "cpu": small_cpu(rng), "memory": "0" }),
    }
}

/// One container's requests, with contention: none, explicit zeros, one
/// resource only, small, large, GPUs, or more than any node has. Existing
/// (bound) pods ask for less unusual things.
pub fn gen_requests(rng: &mut StdRng, existing: bool) -> Value {
    let small = |rng: &mut StdRng| json!({ "cpu": small_cpu(rng), "memory": small_memory(rng) });
    if existing {
        return match rng.random_range(0..20) {
            0..2 => json!({}),
            2 => zeros(rng),
            3 => json!({ "cpu": small_cpu(rng) }),
            _ => small(rng),
        };
    }
    match rng.random_range(0..100) {
        0..6 => json!({}),
        6..11 => zeros(rng),
        11..17 => json!({ "memory": format!("{}Mi", rng.random_range(1..=32) * 64) }),
        17..21 => json!({ "cpu": small_cpu(rng) }),
        21..70 => small(rng),
        70..82 => json!({
            "cpu": format!("{}m", rng.random_range(15..=40) * 100),
            "memory": format!("{}Mi", rng.random_range(2..=8) * 1024),
        }),
        82..90 => {
            let mut r = small(rng);
            r[GPU] = json!(rng.random_range(1..=4).to_string());
            r
        }
        90..95 => json!({ "cpu": "64" }),
        _ => json!({ "memory": "1Ti" }),
    }
}

/// The number of init containers of a pod: mostly none; each is a sidecar
/// (`restartPolicy: Always`) or a plain init container, in any order.
pub fn gen_init_count(rng: &mut StdRng) -> usize {
    match rng.random_range(0..20) {
        0..12 => 0,
        12..17 => 1,
        17..19 => 2,
        _ => 3,
    }
}

/// Pod-level `spec.resources` for a pod with `spec` (containers and init
/// containers already in it), or `None` (most pods): requests of cpu,
/// memory or both, or limits only (the API server then defaults the
/// requests). Each value is at least the containers' aggregate request of
/// that resource (the API server rejects less), sometimes exactly it.
pub fn gen_pod_level(rng: &mut StdRng, spec: &Map<String, Value>, existing: bool) -> Option<Value> {
    if !rng.random_bool(if existing { 0.1 } else { 0.25 }) {
        return None;
    }
    let (least_cpu, least_memory) = aggregate(spec);
    let cpu = |rng: &mut StdRng| {
        let extra = if rng.random_bool(0.25) { 0 } else { rng.random_range(1..=10) * 100 };
        json!(format!("{}m", least_cpu + extra))
    };
    let memory = |rng: &mut StdRng| {
        let extra = if rng.random_bool(0.25) { 0 } else { rng.random_range(1..=8) * 256 };
        json!(format!("{}Mi", least_memory + extra))
    };
    let mut list = Map::new();
    let kind = match rng.random_range(0..10) {
        0..3 => {
            list.insert("cpu".into(), cpu(rng));
            "requests"
        }
        3..5 => {
            list.insert("memory".into(), memory(rng));
            "requests"
        }
        5..8 => {
            list.insert("cpu".into(), cpu(rng));
            list.insert("memory".into(), memory(rng));
            "requests"
        }
        _ => {
            if rng.random_bool(0.5) {
                list.insert("cpu".into(), cpu(rng));
            } else {
                list.insert("memory".into(), memory(rng));
            }
            "limits"
        }
    };
    Some(json!({ kind: list }))
}

/// The containers' aggregate cpu (millicores) and memory (MiB) requests of
/// a pod spec, as upstream's `AggregateContainerRequests` (v1.37.2): app
/// containers plus sidecars, or the largest init phase (an init container
/// plus the sidecars started before it) when that is more.
pub fn aggregate(spec: &Map<String, Value>) -> (i64, i64) {
    let request = |c: &Value| {
        let r = &c["resources"]["requests"];
        (r["cpu"].as_str().map_or(0, milli_cpu), r["memory"].as_str().map_or(0, mebibytes))
    };
    let list = |key: &str| spec.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
    let (mut cpu, mut memory) = (0, 0);
    for c in list("containers") {
        let (c, m) = request(&c);
        cpu += c;
        memory += m;
    }
    let (mut side_cpu, mut side_memory) = (0, 0);
    let (mut init_cpu, mut init_memory) = (0, 0);
    for c in list("initContainers") {
        let (c_cpu, c_memory) = request(&c);
        let phase = if c["restartPolicy"] == "Always" {
            cpu += c_cpu;
            memory += c_memory;
            side_cpu += c_cpu;
            side_memory += c_memory;
            (side_cpu, side_memory)
        } else {
            (c_cpu + side_cpu, c_memory + side_memory)
        };
        init_cpu = init_cpu.max(phase.0);
        init_memory = init_memory.max(phase.1);
    }
    (cpu.max(init_cpu), memory.max(init_memory))
}

/// Millicores of a cpu quantity the generator wrote (`250m`, `4`, `0`).
pub fn milli_cpu(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or_else(|_| panic!("cpu {q:?}")),
        None => q.parse::<i64>().unwrap_or_else(|_| panic!("cpu {q:?}")) * 1000,
    }
}

/// MiB of a memory quantity the generator wrote (`64Mi`, `8Gi`, `1Ti`, `0`).
pub fn mebibytes(q: &str) -> i64 {
    let units = [("Mi", 1), ("Gi", 1 << 10), ("Ti", 1 << 20)];
    let (n, unit) = units
        .iter()
        .find_map(|(suffix, unit)| q.strip_suffix(suffix).map(|n| (n, *unit)))
        .unwrap_or((q, 0));
    let n: i64 = n.parse().unwrap_or_else(|_| panic!("memory {q:?}"));
    assert!(unit > 0 || n == 0, "memory {q:?}: not a form the generator writes");
    n * unit
}

/// A short account of a pod's requests for reports: each container's (init
/// containers and sidecars marked), the pod-level resources and the runtime
/// class.
pub fn describe(pod: &Value) -> String {
    let spec = &pod["spec"];
    let mut parts = Vec::new();
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let kind = if c["restartPolicy"] == "Always" { "sidecar" } else { "init" };
        parts.push(format!("{kind}{}", c["resources"]["requests"]));
    }
    for c in spec["containers"].as_array().into_iter().flatten() {
        parts.push(c["resources"]["requests"].to_string());
    }
    if !spec["resources"].is_null() {
        parts.push(format!("pod{}", spec["resources"]));
    }
    if let Some(class) = spec["runtimeClassName"].as_str() {
        parts.push(format!("runtimeClass {class}"));
    }
    parts.join("+")
}

/// The kinds of request a pod has, for the report's tally of the pods whose
/// scores were compared: `sidecars`, `init containers`, `pod-level
/// resources`, `overhead`, `explicit zeros`, `containers without requests`.
pub fn shapes(pod: &Value) -> Vec<&'static str> {
    let spec = &pod["spec"];
    let init = spec["initContainers"].as_array().cloned().unwrap_or_default();
    let app = spec["containers"].as_array().cloned().unwrap_or_default();
    let requests = || init.iter().chain(&app).map(|c| &c["resources"]["requests"]);
    let mut out = Vec::new();
    if init.iter().any(|c| c["restartPolicy"] == "Always") {
        out.push("sidecars");
    }
    if init.iter().any(|c| c["restartPolicy"] != "Always") {
        out.push("init containers");
    }
    if !spec["resources"].is_null() {
        out.push("pod-level resources");
    }
    let class = spec["runtimeClassName"].as_str();
    if RUNTIME_CLASSES.iter().any(|(name, overhead)| Some(*name) == class && overhead.is_some()) {
        out.push("overhead");
    }
    if requests().any(|r| r["cpu"] == "0" || r["memory"] == "0") {
        out.push("explicit zeros");
    }
    if requests().any(|r| r.as_object().is_none_or(|r| r.is_empty())) {
        out.push("containers without requests");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{ALL_FEATURES, Features, Scenario};
    use super::*;

    fn scenarios(seeds: std::ops::Range<u64>) -> Vec<Scenario> {
        let all = Features::of(&ALL_FEATURES);
        seeds.map(|seed| Scenario::generate(seed, &all)).collect()
    }

    #[test]
    fn every_shape_is_generated_somewhere() {
        let scenarios = scenarios(1..4);
        let pods = || scenarios.iter().flat_map(|s| &s.pods);
        let has = |f: &dyn Fn(&Value) -> bool| pods().any(f);
        let containers = |p: &Value| -> Vec<Value> {
            let spec = &p["spec"];
            let all = [&spec["containers"], &spec["initContainers"]];
            all.into_iter().flat_map(|l| l.as_array().cloned().unwrap_or_default()).collect()
        };
        let any_container =
            |f: &dyn Fn(&Value) -> bool| pods().any(|p| containers(p).iter().any(f));
        assert!(has(&|p| p["spec"]["containers"].as_array().is_some_and(|c| c.len() > 1)));
        assert!(any_container(&|c| c["resources"].is_null()));
        assert!(any_container(&|c| c["resources"]["requests"] == json!({})));
        assert!(any_container(&|c| c["resources"]["requests"]["cpu"] == "0"));
        assert!(any_container(&|c| c["resources"]["requests"]["memory"] == "0"));
        assert!(any_container(&|c| {
            let r = &c["resources"]["requests"];
            !r["cpu"].is_null() && r["memory"].is_null()
        }));
        assert!(any_container(&|c| c["restartPolicy"] == "Always"));
        assert!(any_container(&|c| c["name"].as_str().is_some_and(|n| n.starts_with("init-"))));
        assert!(has(&|p| !p["spec"]["resources"]["requests"].is_null()));
        assert!(has(&|p| !p["spec"]["resources"]["limits"].is_null()));
        assert!(has(&|p| p["spec"]["runtimeClassName"] == "overhead"));
        assert!(scenarios.iter().all(|s| s.runtime_classes.len() == RUNTIME_CLASSES.len()));
    }

    #[test]
    fn pod_level_resources_are_at_least_the_containers() {
        for sc in scenarios(0..30) {
            for p in sc.existing.iter().chain(&sc.pods) {
                let (cpu, memory) = aggregate(p["spec"].as_object().expect("a spec"));
                for list in ["requests", "limits"] {
                    let l = &p["spec"]["resources"][list];
                    assert!(l["cpu"].as_str().is_none_or(|q| milli_cpu(q) >= cpu), "{p}");
                    assert!(l["memory"].as_str().is_none_or(|q| mebibytes(q) >= memory), "{p}");
                }
            }
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(milli_cpu("250m"), 250);
        assert_eq!(milli_cpu("64"), 64_000);
        assert_eq!(milli_cpu("0"), 0);
        assert_eq!(mebibytes("64Mi"), 64);
        assert_eq!(mebibytes("8Gi"), 8192);
        assert_eq!(mebibytes("1Ti"), 1 << 20);
        assert_eq!(mebibytes("0"), 0);
    }

    #[test]
    fn aggregate_as_upstream() {
        // App containers 300m; a sidecar of 50m, an init container of 1000m
        // after it (init phase 1050m), a sidecar of 20m after that: app
        // phase 300 + 50 + 20 = 370m; the init phase wins. Memory: app
        // phase 256 + 64 = 320Mi beats the init phase 64 + 100 = 164Mi.
        let spec = json!({
            "containers": [
                { "resources": { "requests": { "cpu": "100m", "memory": "256Mi" } } },
                { "resources": { "requests": { "cpu": "200m" } } },
                {},
            ],
            "initContainers": [
                { "restartPolicy": "Always", "resources": { "requests": { "cpu": "50m", "memory": "64Mi" } } },
                { "resources": { "requests": { "cpu": "1", "memory": "100Mi" } } },
                { "restartPolicy": "Always", "resources": { "requests": { "cpu": "20m" } } },
            ],
        });
        assert_eq!(aggregate(spec.as_object().unwrap()), (1050, 320));
    }
}
