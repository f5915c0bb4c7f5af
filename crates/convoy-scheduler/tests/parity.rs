//! Parity with upstream kube-scheduler on a real API server.
//!
//! Each seed generates a scenario (nodes with random labels, taints,
//! allocatable and `spec.unschedulable`, some already holding an "occupier"
//! pod with host ports and cpu; pods with random node selectors, required
//! and preferred node affinity, tolerations, host ports, resource requests
//! and scheduling gates). The same objects go to two private control planes:
//! upstream kube-scheduler v1.37 schedules one copy, Convoy the other.
//!
//! The generator keeps placements independent, so "the set of schedulable
//! pods" does not depend on the order pods are placed in: a pod either
//! requests little enough that every node with room holds all of them
//! (probes included), or more than any node has; generated pods never share
//! a host port and protocol among themselves (only with occupiers).
//!
//! Asserted, per seed:
//! - both schedulers bind the same set of pods;
//! - every node Convoy chose is feasible for upstream: a probe copy of the
//!   pod, pinned to that node with an extra `matchFields metadata.name`
//!   requirement, must be bound there by upstream.
//!
//! Seeds: `CONVOY_PARITY_SEEDS=1,2,3` overrides the defaults; every failure
//! message starts with `parity seed N`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use convoy_testenv::TestEnv;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

const DEFAULT_SEEDS: [u64; 3] = [1, 2, 3];
const NODES: usize = 16;
const PODS: usize = 40;

const NS: &str = "parity";
const UPSTREAM: &str = "default-scheduler";
const CONVOY: &str = "convoy-scheduler";
const SETTLE_TIMEOUT: Duration = Duration::from_secs(45);
/// A settled state must hold this long (a later attempt could still bind).
const STABLE_FOR: Duration = Duration::from_millis(1500);

const HOSTNAME: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";
const DISK: &str = "parity.convoy.dev/disk";
const GPU_COUNT: &str = "parity.convoy.dev/gpu-count";
const MISSING: &str = "parity.convoy.dev/missing";
const GPU: &str = "nvidia.com/gpu";
const ZONES: [&str; 4] = ["a", "b", "c", "d"];
const DISKS: [&str; 3] = ["ssd", "hdd", "nvme"];
const TAINT_KEYS: [&str; 3] =
    ["parity.convoy.dev/dedicated", "parity.convoy.dev/gpu", "parity.convoy.dev/maintenance"];
const TAINT_VALUES: [&str; 3] = ["", "a", "b"];
const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
const SHARED_PORTS: [i64; 4] = [8080, 8081, 8082, 8083];
const HOST_IPS: [&str; 3] = ["", "127.0.0.1", "10.0.0.1"];

// ---------------------------------------------------------------- generator

/// One generated scenario, as JSON objects (pods without `schedulerName`).
struct Scenario {
    nodes: Vec<Value>,
    occupiers: Vec<Value>,
    pods: Vec<Value>,
}

impl Scenario {
    fn generate(seed: u64) -> Scenario {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut nodes = Vec::new();
        let mut occupiers = Vec::new();
        for i in 0..NODES {
            let (node, occupier) = gen_node(&mut rng, i);
            nodes.push(node);
            occupiers.extend(occupier);
        }
        let names: Vec<String> = nodes.iter().map(|n| name_of(n).to_string()).collect();
        let mut used_ports = BTreeSet::new();
        let pods = (0..PODS).map(|j| gen_pod(&mut rng, j, &names, &mut used_ports)).collect();
        Scenario { nodes, occupiers, pods }
    }

    /// The nodes and occupiers, one line each, for failure messages.
    fn describe_nodes(&self) -> String {
        let mut out = String::new();
        for n in &self.nodes {
            let occupier =
                self.occupiers.iter().find(|o| o["spec"]["nodeName"] == n["metadata"]["name"]);
            out += &format!(
                "  {} labels={} spec={} allocatable={} occupier={}\n",
                name_of(n),
                n["metadata"]["labels"],
                n["spec"],
                n["status"]["allocatable"],
                occupier.map_or(Value::Null, |o| o["spec"]["containers"].clone()),
            );
        }
        out
    }
}

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().expect("generated objects are named")
}

fn gen_node(rng: &mut StdRng, i: usize) -> (Value, Option<Value>) {
    let name = format!("node-{i:02}");
    let mut labels = Map::new();
    labels.insert(HOSTNAME.into(), json!(name));
    if rng.random_bool(0.85) {
        labels.insert(ZONE.into(), json!(ZONES[..3].choose(rng).unwrap()));
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
    for _ in 0..*[0, 0, 1, 2].choose(rng).unwrap() {
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
    let unschedulable = rng.random_bool(0.15);

    let cores: i64 = rng.random_range(1..=8);
    let mem_mi: i64 = rng.random_range(4..=32) * 1024;
    // 0-5: empty; 6-7: partly used (at least 1 cpu and 2Gi left, enough for
    // every tiny pod and probe); 8: cpu full; 9: pod count full.
    let load = rng.random_range(0..10);
    let mut allocatable = json!({
        "cpu": cores.to_string(),
        "memory": format!("{mem_mi}Mi"),
        "pods": if load == 9 { "1" } else { "110" },
    });
    if rng.random_bool(0.3) {
        allocatable[GPU] = json!("64");
    }
    let node = json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "unschedulable": unschedulable, "taints": taints },
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{ "type": "Ready", "status": "True" }],
        },
    });

    let occupier = (load >= 6).then(|| {
        let (cpu_m, mem) = match load {
            8 => (cores * 1000, rng.random_range(0..=mem_mi - 2048)),
            9 => (100, 64),
            _ => (rng.random_range(0..=(cores - 1) * 10) * 100, rng.random_range(0..=mem_mi - 2048)),
        };
        let mut ports: Vec<Value> = Vec::new();
        for _ in 0..rng.random_range(0..=2) {
            let port = *SHARED_PORTS.choose(rng).unwrap();
            let protocol = if rng.random_bool(0.8) { "TCP" } else { "UDP" };
            if ports.iter().any(|p| p["hostPort"] == port && p["protocol"] == protocol) {
                continue;
            }
            ports.push(port_json(port, protocol, HOST_IPS.choose(rng).unwrap()));
        }
        json!({
            "metadata": { "name": format!("occupier-{name}") },
            "spec": {
                "nodeName": name,
                "schedulerName": "nobody",
                "containers": [container(json!({ "cpu": format!("{cpu_m}m"), "memory": format!("{mem}Mi") }), ports)],
            },
        })
    });
    (node, occupier)
}

fn port_json(port: i64, protocol: &str, host_ip: &str) -> Value {
    let mut p = json!({ "containerPort": port, "hostPort": port, "protocol": protocol });
    if !host_ip.is_empty() {
        p["hostIP"] = json!(host_ip);
    }
    p
}

fn container(requests: Value, ports: Vec<Value>) -> Value {
    json!({
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": { "requests": requests },
        "ports": ports,
    })
}

fn tiny(rng: &mut StdRng) -> Value {
    json!({
        "cpu": format!("{}m", rng.random_range(1..=10)),
        "memory": format!("{}Mi", rng.random_range(1..=16)),
    })
}

fn gen_pod(
    rng: &mut StdRng,
    j: usize,
    nodes: &[String],
    used_ports: &mut BTreeSet<(i64, &'static str)>,
) -> Value {
    // Host port: unique (port, protocol) among generated pods; it may be
    // one occupiers use.
    let mut ports = Vec::new();
    if rng.random_bool(0.35) {
        let free: Vec<(i64, &str)> = SHARED_PORTS
            .iter()
            .flat_map(|&p| [(p, "TCP"), (p, "UDP")])
            .filter(|c| !used_ports.contains(c))
            .collect();
        let (port, protocol) = match free.choose(rng) {
            Some(&c) if rng.random_bool(0.6) => c,
            _ => (9000 + j as i64, if rng.random_bool(0.8) { "TCP" } else { "UDP" }),
        };
        used_ports.insert((port, protocol));
        ports.push(port_json(port, protocol, HOST_IPS.choose(rng).unwrap()));
    }

    // Requests: none, tiny, or more than any node has.
    let containers = match rng.random_range(0..100) {
        0..12 => vec![container(json!({}), ports)],
        12..20 => vec![container(json!({ "memory": "8Mi" }), ports)],
        20..62 => vec![container(tiny(rng), ports)],
        62..70 => {
            let mut c = container(tiny(rng), ports);
            c["resources"]["requests"][GPU] = json!("1");
            c["resources"]["limits"] = json!({ GPU: "1" });
            vec![c]
        }
        70..74 => {
            let mut c = container(tiny(rng), ports);
            c["resources"]["requests"][GPU] = json!("100");
            c["resources"]["limits"] = json!({ GPU: "100" });
            vec![c]
        }
        74..84 => vec![container(json!({ "cpu": "64" }), ports)],
        84..90 => vec![container(json!({ "memory": "1Ti" }), ports)],
        _ => {
            let mut second = container(tiny(rng), vec![]);
            second["name"] = json!("side");
            vec![container(tiny(rng), ports), second]
        }
    };
    let mut spec = Map::new();
    spec.insert("containers".into(), Value::Array(containers));

    if rng.random_bool(0.25) {
        let mut selector = Map::new();
        if rng.random_bool(0.7) {
            selector.insert(ZONE.into(), json!(ZONES.choose(rng).unwrap()));
        }
        if selector.is_empty() || rng.random_bool(0.4) {
            selector.insert(DISK.into(), json!(DISKS.choose(rng).unwrap()));
        }
        spec.insert("nodeSelector".into(), Value::Object(selector));
    }

    let mut node_affinity = Map::new();
    if rng.random_bool(0.45) {
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
    if rng.random_bool(0.3) {
        let preferred: Vec<Value> = (0..rng.random_range(1..=2))
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
    if !node_affinity.is_empty() {
        spec.insert("affinity".into(), json!({ "nodeAffinity": node_affinity }));
    }

    if rng.random_bool(0.5) {
        let tolerations: Vec<Value> =
            (0..rng.random_range(1..=3)).map(|_| gen_toleration(rng)).collect();
        spec.insert("tolerations".into(), json!(tolerations));
    }
    if rng.random_bool(0.05) {
        spec.insert("schedulingGates".into(), json!([{ "name": "parity.convoy.dev/gate" }]));
    }
    json!({ "metadata": { "name": format!("pod-{j:02}") }, "spec": spec })
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
    match rng.random_range(0..10) {
        0..3 => set(rng, ZONE, &ZONES),
        3..5 => set(rng, DISK, &DISKS),
        5..8 if rng.random_bool(0.7) => {
            let op = if rng.random_bool(0.5) { "Gt" } else { "Lt" };
            json!({ "key": GPU_COUNT, "operator": op, "values": [rng.random_range(0..=8).to_string()] })
        }
        5..8 => set(rng, GPU_COUNT, &["0", "2", "4", "8", "many"]),
        8 => {
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

/// A copy of `pod` that upstream may only place on `node`: `matchFields
/// metadata.name In [node]` is ANDed into every required term. Empty terms
/// stay empty (they match no node, with or without the field).
fn probe_of(pod: &Value, node: &str) -> Value {
    let mut probe = pod.clone();
    probe["metadata"]["name"] = json!(format!("probe-{}", name_of(pod)));
    probe["spec"]["schedulerName"] = json!(UPSTREAM);
    let pin = json!({ "key": "metadata.name", "operator": "In", "values": [node] });
    let required = &mut probe["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    match required["nodeSelectorTerms"].as_array_mut() {
        Some(terms) => {
            for term in terms {
                let empty = |k: &str| term[k].as_array().is_none_or(Vec::is_empty);
                if empty("matchExpressions") && empty("matchFields") {
                    continue;
                }
                if term["matchFields"].is_null() {
                    term["matchFields"] = json!([]);
                }
                term["matchFields"].as_array_mut().unwrap().push(pin.clone());
            }
        }
        None => *required = json!({ "nodeSelectorTerms": [{ "matchFields": [pin] }] }),
    }
    probe
}

// ---------------------------------------------------------------- clusters

/// Where a pod ended up: bound to a node, or not, with the reason given.
#[derive(Debug, Clone, PartialEq)]
enum Placement {
    Bound(String),
    Pending(String),
    /// Neither bound nor marked unschedulable by the timeout.
    Undecided,
}

impl Placement {
    fn node(&self) -> Option<&str> {
        match self {
            Placement::Bound(n) => Some(n),
            Placement::Pending(_) | Placement::Undecided => None,
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placement::Bound(n) => write!(f, "bound to {n}"),
            Placement::Pending(why) => write!(f, "not bound: {why}"),
            Placement::Undecided => write!(f, "undecided after {SETTLE_TIMEOUT:?}"),
        }
    }
}

async fn create_objects(
    env: &TestEnv,
    client: &kube::Client,
    sc: &Scenario,
    scheduler: &str,
) -> Result<()> {
    env.create_namespace(client, NS).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pp = PostParams::default();
    for n in &sc.nodes {
        nodes
            .create(&pp, &serde_json::from_value(n.clone())?)
            .await
            .with_context(|| format!("node {}", name_of(n)))?;
    }
    for o in &sc.occupiers {
        pods.create(&pp, &serde_json::from_value(o.clone())?)
            .await
            .with_context(|| format!("{}", o))?;
    }
    for p in &sc.pods {
        let mut p = p.clone();
        p["spec"]["schedulerName"] = json!(scheduler);
        pods.create(&pp, &serde_json::from_value(p.clone())?)
            .await
            .with_context(|| format!("{p}"))?;
    }
    Ok(())
}

fn placement(pod: &Pod) -> Option<Placement> {
    let spec = pod.spec.as_ref()?;
    if let Some(node) = &spec.node_name {
        return Some(Placement::Bound(node.clone()));
    }
    if spec.scheduling_gates.as_ref().is_some_and(|g| !g.is_empty()) {
        return Some(Placement::Pending("scheduling gates".into()));
    }
    let cond =
        pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled")?;
    (cond.status == "False").then(|| {
        Placement::Pending(format!(
            "{}: {}",
            cond.reason.as_deref().unwrap_or(""),
            cond.message.as_deref().unwrap_or("")
        ))
    })
}

/// Waits until every named pod is bound, gated, or marked unschedulable,
/// and the bindings stayed the same for [`STABLE_FOR`]. Pods still
/// undecided at the timeout are reported as such.
async fn settle(client: &kube::Client, names: &[String]) -> Result<BTreeMap<String, Placement>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
    let mut stable: Option<(tokio::time::Instant, BTreeMap<String, Option<String>>)> = None;
    loop {
        let listed: BTreeMap<String, Pod> = pods
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
        let mut out = BTreeMap::new();
        let mut settled = true;
        for name in names {
            let p = listed.get(name).and_then(placement);
            settled &= p.is_some();
            out.insert(name.clone(), p.unwrap_or(Placement::Undecided));
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(out);
        }
        if settled {
            let bindings: BTreeMap<_, _> =
                out.iter().map(|(k, v)| (k.clone(), v.node().map(str::to_string))).collect();
            match &stable {
                Some((since, b)) if *b == bindings => {
                    if now - *since >= STABLE_FOR {
                        return Ok(out);
                    }
                }
                _ => stable = Some((now, bindings)),
            }
        } else {
            stable = None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn upstream_config(env: &TestEnv) -> Result<PathBuf> {
    let path = env.dir().join("kube-scheduler-config.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\n\
             kind: KubeSchedulerConfiguration\n\
             clientConnection:\n  kubeconfig: {}\n  qps: 5000\n  burst: 5000\n\
             leaderElection:\n  leaderElect: false\n\
             profiles:\n- schedulerName: {UPSTREAM}\n",
            env.kubeconfig().display()
        ),
    )?;
    Ok(path)
}

/// The Convoy binary running against a testenv; killed on drop.
struct Convoy {
    child: Child,
    log: PathBuf,
}

impl Convoy {
    fn start(env: &TestEnv) -> Result<Convoy> {
        let config = env.dir().join("convoy-config.yaml");
        std::fs::write(
            &config,
            "apiVersion: kubescheduler.config.k8s.io/v1\n\
             kind: KubeSchedulerConfiguration\n\
             clientConnection:\n  qps: 5000\n  burst: 5000\n\
             leaderElection:\n  leaderElect: false\n",
        )?;
        let log = env.dir().join("convoy-scheduler.log");
        let out = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_convoy-scheduler"))
            .arg("--config")
            .arg(&config)
            .arg("--kubeconfig")
            .arg(env.kubeconfig())
            .args(["--http-addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting convoy-scheduler")?;
        Ok(Convoy { child, log })
    }

    fn describe(&mut self) -> String {
        let status = match self.child.try_wait() {
            Ok(Some(s)) => format!("exited: {s}"),
            _ => "running".into(),
        };
        format!("convoy-scheduler ({status}), log tail:\n{}", tail(&self.log, 40))
    }
}

impl Drop for Convoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

async fn start_env() -> Result<TestEnv> {
    Ok(tokio::task::spawn_blocking(TestEnv::start).await??)
}

// ---------------------------------------------------------------- the test

/// Runs one seed; returns what did not match (empty when in parity).
async fn check_seed(seed: u64) -> Result<Vec<String>> {
    let sc = Scenario::generate(seed);
    let (env_a, env_b) = tokio::try_join!(start_env(), start_env())?;
    let (client_a, client_b) = (env_a.client().await?, env_b.client().await?);
    tokio::try_join!(
        create_objects(&env_a, &client_a, &sc, UPSTREAM),
        create_objects(&env_b, &client_b, &sc, CONVOY),
    )
    .with_context(|| format!("parity seed {seed}: creating the scenario"))?;

    let _upstream = env_a.start_kube_scheduler(&upstream_config(&env_a)?)?;
    let mut convoy = Convoy::start(&env_b)?;
    let names: Vec<String> = sc.pods.iter().map(|p| name_of(p).to_string()).collect();
    let (upstream, ours) = tokio::try_join!(settle(&client_a, &names), settle(&client_b, &names))?;

    let pod_spec =
        |name: &str| sc.pods.iter().find(|p| name_of(p) == name).map(|p| p["spec"].to_string());
    let mut problems = Vec::new();
    for name in &names {
        let (u, c) = (&upstream[name], &ours[name]);
        let undecided = *u == Placement::Undecided || *c == Placement::Undecided;
        if undecided || u.node().is_some() != c.node().is_some() {
            problems.push(format!(
                "parity seed {seed}: {name} upstream {u}; convoy {c}\n    spec: {}",
                pod_spec(name).unwrap_or_default()
            ));
        }
    }

    // Feasibility of Convoy's choices, asked of upstream with pinned probes.
    // A probe never meets its original: the original is on another node.
    let pods_a: Api<Pod> = Api::namespaced(client_a.clone(), NS);
    let mut probes = Vec::new();
    for (pod, name) in sc.pods.iter().zip(&names) {
        let Some(node) = ours[name].node() else { continue };
        if upstream[name].node() == Some(node) {
            continue;
        }
        let probe = probe_of(pod, node);
        pods_a.create(&PostParams::default(), &serde_json::from_value(probe.clone())?).await?;
        probes.push((name.clone(), name_of(&probe).to_string(), node.to_string()));
    }
    let probe_names: Vec<String> = probes.iter().map(|(_, p, _)| p.clone()).collect();
    let probed = settle(&client_a, &probe_names).await?;
    for (name, probe, node) in &probes {
        if probed[probe].node() != Some(node.as_str()) {
            problems.push(format!(
                "parity seed {seed}: convoy bound {name} to {node}, upstream finds it infeasible \
                 (probe {}; upstream placed the original: {})\n    spec: {}",
                probed[probe],
                upstream[name],
                pod_spec(name).unwrap_or_default()
            ));
        }
    }

    let bound = |m: &BTreeMap<String, Placement>| m.values().filter(|p| p.node().is_some()).count();
    eprintln!(
        "parity seed {seed}: {} nodes, {} pods; upstream bound {}, convoy bound {}, {} probes",
        sc.nodes.len(),
        names.len(),
        bound(&upstream),
        bound(&ours),
        probes.len()
    );
    if !problems.is_empty() {
        problems.push(format!("parity seed {seed}: nodes\n{}", sc.describe_nodes()));
        problems.push(format!("parity seed {seed}: {}", convoy.describe()));
    }
    Ok(problems)
}

fn seeds() -> Vec<u64> {
    match std::env::var("CONVOY_PARITY_SEEDS") {
        Ok(s) if !s.trim().is_empty() => s
            .split(',')
            .map(|x| {
                x.trim().parse().unwrap_or_else(|_| panic!("CONVOY_PARITY_SEEDS: bad seed {x:?}"))
            })
            .collect(),
        _ => DEFAULT_SEEDS.to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convoy_matches_upstream_on_generated_scenarios() {
    let mut report = Vec::new();
    for seed in seeds() {
        match check_seed(seed).await {
            Ok(problems) => report.extend(problems),
            Err(e) => report.push(format!("parity seed {seed}: {e:#}")),
        }
    }
    assert!(report.is_empty(), "{}\n(rerun with CONVOY_PARITY_SEEDS=<seed>)", report.join("\n"));
}

/// The generator alone (no cluster): a seed always gives the same scenario,
/// and no two generated pods share a host port and protocol.
#[test]
fn generator_is_deterministic_and_keeps_host_ports_apart() {
    for seed in 0..200 {
        let (a, b) = (Scenario::generate(seed), Scenario::generate(seed));
        assert_eq!((&a.nodes, &a.occupiers, &a.pods), (&b.nodes, &b.occupiers, &b.pods));
        let mut seen = BTreeSet::new();
        for pod in &a.pods {
            for c in pod["spec"]["containers"].as_array().unwrap() {
                for p in c["ports"].as_array().unwrap() {
                    let key = (p["hostPort"].as_i64(), p["protocol"].to_string());
                    assert!(seen.insert(key), "parity seed {seed}: {} reuses {p}", name_of(pod));
                }
            }
        }
    }
}

#[test]
fn probe_pins_every_non_empty_term_to_the_node() {
    let pin = json!({ "key": "metadata.name", "operator": "In", "values": ["n1"] });
    let expr = json!({ "key": ZONE, "operator": "Exists" });
    let pod = json!({
        "metadata": { "name": "p" },
        "spec": { "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{}, { "matchExpressions": [expr] }],
        }}}},
    });
    let probe = probe_of(&pod, "n1");
    assert_eq!(probe["metadata"]["name"], "probe-p");
    assert_eq!(probe["spec"]["schedulerName"], UPSTREAM);
    let required = &probe["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(
        required["nodeSelectorTerms"],
        json!([{}, { "matchExpressions": [expr], "matchFields": [pin] }])
    );

    let plain = json!({ "metadata": { "name": "q" }, "spec": { "containers": [] } });
    let required = &probe_of(&plain, "n1")["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(required["nodeSelectorTerms"], json!([{ "matchFields": [pin] }]));
}
