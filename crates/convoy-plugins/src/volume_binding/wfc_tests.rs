//! WaitForFirstConsumer binding, ported from upstream `binder_test.go`
//! (`TestFindPodVolumesWithoutProvisioning`,
//! `TestFindPodVolumesWithProvisioning`, `TestAssumePodVolumes`,
//! `TestBindPodVolumes`, `TestCapacity`) and `component-helpers`
//! `TestFindMatchVolume` (v1.37.2): the cases that matter without CSI
//! migration.

use std::sync::Mutex as StdMutex;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{BindError, ClaimRef, ClusterObject, NodeList, VolumeWrite};
use serde_json::{Value, json};

use super::*;
use crate::helper::volumes::testing::*;
use convoy_objects::ClusterObjects;

const WAIT: &str = "waitClass";
const WAIT_PROVISIONER: &str = "waitClassWithProvisioner";
const TOPO_MISMATCH: &str = "topoMismatchClass";
const KEY: &str = "test.kubernetes.io/node";
const CONFLICT: &str =
    "UnschedulableAndUnresolvable: node(s) didn't find available persistent volumes to bind";

fn classes() -> Vec<ClusterObject> {
    let class = |name: &str, provisioner: &str, topology: Option<Value>| {
        let mut v = json!({"metadata": {"name": name}, "provisioner": provisioner,
            "volumeBindingMode": "WaitForFirstConsumer"});
        if let Some(t) = topology {
            v["allowedTopologies"] = t;
        }
        obj_class(serde_json::from_value(v).unwrap())
    };
    vec![
        class(WAIT, "kubernetes.io/no-provisioner", None),
        class(
            WAIT_PROVISIONER,
            "test-provisioner",
            Some(json!([{"matchLabelExpressions": [{"key": KEY,
                "values": ["node1", "reference-value"]}]}])),
        ),
        class(
            TOPO_MISMATCH,
            "test-provisioner",
            Some(json!([{"matchLabelExpressions": [{"key": KEY, "values": ["reference-value"]}]}])),
        ),
        obj_class(class_immediate()),
    ]
}

fn class_immediate() -> k8s_openapi::api::storage::v1::StorageClass {
    serde_json::from_value(json!({"metadata": {"name": "immediateClass"},
        "provisioner": "p", "volumeBindingMode": "Immediate"}))
    .unwrap()
}

/// Upstream `makeTestPVC`: an unbound claim in `testns` with a request.
fn claim(name: &str, size: &str, class: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "testns", "uid": format!("uid-{name}"),
        "resourceVersion": "1"},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": size}}}})
}

fn bound_claim(name: &str, size: &str, class: &str, pv: &str) -> Value {
    let mut c = claim(name, size, class);
    c["spec"]["volumeName"] = json!(pv);
    c["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    c["status"] = json!({"phase": "Bound"});
    c
}

/// Upstream `makeTestPV`: a volume on a node (`KEY In [node]`), unbound
/// and Available unless bound to `claim`.
fn volume(name: &str, node: &str, size: &str, class: &str, bound_to: Option<&str>) -> Value {
    let mut v = json!({"metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"storageClassName": class, "capacity": {"storage": size},
                 "accessModes": ["ReadWriteOnce"],
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": KEY, "operator": "In", "values": [node]}]}]}}},
        "status": {"phase": "Available"}});
    if let Some(c) = bound_to {
        v["spec"]["claimRef"] =
            json!({"name": c, "namespace": "testns", "uid": format!("uid-{c}")});
        v["status"]["phase"] = json!("Bound");
    }
    v
}

fn objects(claims: &[Value], pvs: &[Value]) -> Arc<ClusterObjects> {
    let mut o = classes();
    o.extend(claims.iter().map(|c| obj_pvc(pvc_json(c.clone()))));
    o.extend(pvs.iter().map(|v| obj_pv(pv_json(v.clone()))));
    store(o)
}

fn pod(name: &str, claims: &[&str]) -> PodBuilder {
    pod_with(
        name,
        claims.iter().enumerate().map(|(i, c)| claim_volume(&format!("v{i}"), c)).collect(),
    )
    .namespace("testns")
    .uid(&format!("uid-{name}"))
}

fn node1() -> NodeInfo {
    NodeBuilder::new("node1").label(KEY, "node1").info()
}

fn show(s: &Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

/// PreFilter then Filter on node1: the Filter verdict, and the choice
/// (`pv <- claim` and `provision claim`) when it fits.
fn find(plugin: &VolumeBinding, pod: &PodInfo) -> (String, Vec<String>) {
    let mut state = CycleState::new();
    let node = node1();
    let (_, pre) = plugin.pre_filter(&mut state, pod, &NodeList::of(vec![node.clone()]));
    if !pre.is_success() {
        return (format!("PreFilter {}", show(&pre)), vec![]);
    }
    let status = plugin.filter(&state, pod, &node);
    let chosen = state
        .read::<PreFilterState>()
        .and_then(|st| st.by_node.lock().unwrap().get("node1").cloned())
        .map(|c| describe(&c.volumes))
        .unwrap_or_default();
    (show(&status), chosen)
}

fn describe(v: &PodVolumes) -> Vec<String> {
    let mut out: Vec<String> =
        v.static_bindings.iter().map(|b| format!("{} <- {}", b.pv, b.claim.name)).collect();
    out.extend(v.dynamic_provisions.iter().map(|p| match p.node_capacity {
        None => format!("provision {}", p.claim.name),
        Some(c) => format!("provision {} in {c}", p.claim.name),
    }));
    out
}

fn plugin(objects: Arc<ClusterObjects>) -> VolumeBinding {
    VolumeBinding::new(objects, Arc::new(crate::helper::testing::FixedBinder(Ok(()))))
}

#[test]
fn find_pod_volumes() {
    let ok = "Success: ";
    let unbound = claim("unbound-pvc", "1G", WAIT);
    let unbound2 = claim("unbound-pvc2", "5G", WAIT);
    let pv_node1a = volume("pv-node1a", "node1", "5G", WAIT, None);
    let pv_node1b = volume("pv-node1b", "node1", "10G", WAIT, None);
    let pv_node2 = volume("pv-node2", "node2", "1G", WAIT, None);
    let bound = bound_claim("bound-pvc", "1G", WAIT, "pv-bound");
    let pv_bound = volume("pv-bound", "node1", "1G", WAIT, Some("bound-pvc"));
    let provisioned = claim("provisioned-pvc", "1Gi", WAIT_PROVISIONER);
    let mut selected_node1 = provisioned.clone();
    selected_node1["metadata"]["annotations"] =
        json!({"volume.kubernetes.io/selected-node": "node1"});
    let mut selected_node2 = provisioned.clone();
    selected_node2["metadata"]["annotations"] =
        json!({"volume.kubernetes.io/selected-node": "node2"});
    type Case<'a> = (&'a str, Vec<Value>, Vec<Value>, &'a str, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        (
            "unbound-pvc,pv-same-node",
            vec![unbound.clone()],
            vec![pv_node2.clone(), pv_node1a.clone(), pv_node1b.clone()],
            ok,
            vec!["pv-node1a <- unbound-pvc"],
        ),
        (
            "unbound-pvc,pv-different-node",
            vec![unbound.clone()],
            vec![pv_node2.clone()],
            CONFLICT,
            vec![],
        ),
        (
            "two-unbound-pvcs",
            vec![unbound.clone(), unbound2.clone()],
            vec![pv_node1a.clone(), pv_node1b.clone()],
            ok,
            vec!["pv-node1a <- unbound-pvc", "pv-node1b <- unbound-pvc2"],
        ),
        (
            "two-unbound-pvcs,order-by-size",
            vec![unbound2.clone(), unbound.clone()],
            vec![pv_node1a.clone(), pv_node1b.clone()],
            ok,
            vec!["pv-node1a <- unbound-pvc", "pv-node1b <- unbound-pvc2"],
        ),
        (
            "two-unbound-pvcs,partial-match",
            vec![unbound.clone(), unbound2.clone()],
            vec![pv_node1a.clone()],
            CONFLICT,
            vec![],
        ),
        (
            "one-bound,one-unbound",
            vec![unbound.clone(), bound.clone()],
            vec![pv_bound.clone(), pv_node1a.clone()],
            ok,
            vec!["pv-node1a <- unbound-pvc"],
        ),
        (
            "one-bound,one-unbound,no-match",
            vec![unbound.clone(), bound.clone()],
            vec![pv_bound.clone(), pv_node2.clone()],
            CONFLICT,
            vec![],
        ),
        (
            "pv bound to another claim is not offered",
            vec![unbound.clone()],
            vec![volume("pv-taken", "node1", "5G", WAIT, Some("other"))],
            CONFLICT,
            vec![],
        ),
        (
            "pv pre-bound to the claim wins over a smaller one",
            vec![unbound.clone()],
            vec![
                volume("pv-small", "node1", "1G", WAIT, None),
                volume("pv-prebound", "node1", "10G", WAIT, Some("unbound-pvc")),
            ],
            ok,
            vec!["pv-prebound <- unbound-pvc"],
        ),
        (
            "one-provisioned",
            vec![provisioned.clone()],
            vec![],
            ok,
            vec!["provision provisioned-pvc"],
        ),
        (
            "two-unbound-pvcs,one-matched,one-provisioned",
            vec![unbound.clone(), provisioned.clone()],
            vec![pv_node1a.clone()],
            ok,
            vec!["pv-node1a <- unbound-pvc", "provision provisioned-pvc"],
        ),
        (
            "one-bound,one-provisioned",
            vec![bound.clone(), provisioned.clone()],
            vec![pv_bound.clone()],
            ok,
            vec!["provision provisioned-pvc"],
        ),
        (
            "one-binding,one-selected-node",
            vec![bound.clone(), selected_node1],
            vec![pv_bound.clone()],
            ok,
            vec!["provision provisioned-pvc"],
        ),
        ("selected for another node", vec![selected_node2], vec![], CONFLICT, vec![]),
        (
            "invalid-provisioner",
            vec![claim("no-provisioner-pvc", "1Gi", WAIT)],
            vec![],
            CONFLICT,
            vec![],
        ),
        (
            "volume-topology-unsatisfied",
            vec![claim("topo-mismatch-pvc", "1Gi", TOPO_MISMATCH)],
            vec![],
            CONFLICT,
            vec![],
        ),
        (
            "class not found",
            vec![claim("no-class-pvc", "1Gi", "missing")],
            vec![],
            "PreFilter UnschedulableAndUnresolvable: pod has unbound immediate PersistentVolumeClaims",
            vec![],
        ),
    ];
    for (name, claims, pvs, want, chosen) in cases {
        let names: Vec<String> =
            claims.iter().map(|c| c["metadata"]["name"].as_str().unwrap().to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let p = plugin(objects(&claims, &pvs));
        let (got, got_chosen) = find(&p, &pod("test-pod", &names).info());
        assert_eq!(got, want, "{name}");
        assert_eq!(got_chosen, chosen, "{name}: choice");
    }
}

#[test]
fn find_matching_volume_rules() {
    let base = claim("c", "1G", WAIT);
    let pv = |name: &str, size: &str| volume(name, "node1", size, WAIT, None);
    let with = |mut v: Value, path: &[&str], value: Value| {
        let mut at = &mut v;
        for p in &path[..path.len() - 1] {
            at = &mut at[*p];
        }
        at[path[path.len() - 1]] = value;
        v
    };
    type Case<'a> = (&'a str, Value, Vec<Value>, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        (
            "smallest that fits",
            base.clone(),
            vec![pv("big", "10G"), pv("small", "2G"), pv("tiny", "500M")],
            vec!["small <- c"],
        ),
        ("ties: first by name", base.clone(), vec![pv("b", "2G"), pv("a", "2G")], vec!["a <- c"]),
        (
            "access modes must be a superset",
            with(base.clone(), &["spec", "accessModes"], json!(["ReadWriteOnce", "ReadOnlyMany"])),
            vec![
                pv("rwo", "2G"),
                with(
                    pv("both", "5G"),
                    &["spec", "accessModes"],
                    json!(["ReadOnlyMany", "ReadWriteOnce"]),
                ),
            ],
            vec!["both <- c"],
        ),
        (
            "volume mode must match (unset is Filesystem)",
            with(base.clone(), &["spec", "volumeMode"], json!("Block")),
            vec![pv("fs", "2G"), with(pv("block", "5G"), &["spec", "volumeMode"], json!("Block"))],
            vec!["block <- c"],
        ),
        (
            "selector",
            with(base.clone(), &["spec", "selector"], json!({"matchLabels": {"tier": "gold"}})),
            vec![
                pv("plain", "2G"),
                with(pv("gold", "5G"), &["metadata", "labels"], json!({"tier": "gold"})),
            ],
            vec!["gold <- c"],
        ),
        (
            "phase must be Available",
            base.clone(),
            vec![
                with(pv("released", "2G"), &["status", "phase"], json!("Released")),
                pv("ok", "5G"),
            ],
            vec!["ok <- c"],
        ),
        (
            "deleted volumes are skipped",
            base.clone(),
            vec![
                with(
                    pv("gone", "2G"),
                    &["metadata", "deletionTimestamp"],
                    json!("2026-01-01T00:00:00Z"),
                ),
                pv("ok", "5G"),
            ],
            vec!["ok <- c"],
        ),
        (
            "volume attributes class must match",
            base.clone(),
            vec![
                with(pv("vac", "2G"), &["spec", "volumeAttributesClassName"], json!("fast")),
                pv("ok", "5G"),
            ],
            vec!["ok <- c"],
        ),
    ];
    for (name, c, pvs, want) in cases {
        let p = plugin(objects(&[c], &pvs));
        let (status, chosen) = find(&p, &pod("p", &["c"]).info());
        assert_eq!(status, "Success: ", "{name}");
        assert_eq!(chosen, want, "{name}");
    }
}

/// Reserve, Unreserve and the assume cache: a volume assumed for one pod
/// in flight is not offered to another.
#[test]
fn assumed_volumes_are_not_offered_twice() {
    let o = objects(
        &[claim("a", "1G", WAIT), claim("b", "1G", WAIT)],
        &[volume("pv-1", "node1", "1G", WAIT, None), volume("pv-2", "node1", "2G", WAIT, None)],
    );
    let p = plugin(o);
    let pod_a = pod("pod-a", &["a"]).info();
    let pod_b = pod("pod-b", &["b"]).info();
    let node = node1();
    let nodes = NodeList::of(vec![node.clone()]);

    let mut state_a = CycleState::new();
    p.pre_filter(&mut state_a, &pod_a, &nodes);
    assert!(p.filter(&state_a, &pod_a, &node).is_success());
    assert!(p.reserve(&mut state_a, &pod_a, "node1").is_success());
    assert_eq!(p.assumed().len(), 1);

    assert_eq!(find(&p, &pod_b).1, vec!["pv-2 <- b"], "pv-1 is taken by pod-a");
    p.unreserve(&mut state_a, &pod_a, "node1");
    p.unreserve(&mut state_a, &pod_a, "node1");
    assert!(p.assumed().is_empty());
    assert_eq!(find(&p, &pod_b).1, vec!["pv-1 <- b"], "pv-1 is free again");
}

/// A claim assumed provisioned on a node counts as selected for it.
#[test]
fn assumed_provisioning_selects_the_node() {
    let o = objects(&[claim("shared", "1Gi", WAIT_PROVISIONER)], &[]);
    let p = plugin(o);
    let pod_a = pod("pod-a", &["shared"]).info();
    let mut state = CycleState::new();
    let node = node1();
    p.pre_filter(&mut state, &pod_a, &NodeList::of(vec![node.clone()]));
    assert!(p.filter(&state, &pod_a, &node).is_success());
    assert!(p.reserve(&mut state, &pod_a, "node1").is_success());

    let pod_b = pod("pod-b", &["shared"]).info();
    let mut state_b = CycleState::new();
    let node2 = NodeBuilder::new("node2").label(KEY, "node1").info();
    p.pre_filter(&mut state_b, &pod_b, &NodeList::of(vec![node2.clone()]));
    assert_eq!(show(&p.filter(&state_b, &pod_b, &node2)), CONFLICT);
}

#[test]
fn reserve_without_delayed_claims_is_all_bound() {
    let o = objects(
        &[bound_claim("bound-pvc", "1G", WAIT, "pv-bound")],
        &[volume("pv-bound", "node1", "1G", WAIT, Some("bound-pvc"))],
    );
    let p = plugin(o);
    let pod = pod("p", &["bound-pvc"]).info();
    let mut state = CycleState::new();
    let node = node1();
    p.pre_filter(&mut state, &pod, &NodeList::of(vec![node.clone()]));
    assert!(p.filter(&state, &pod, &node).is_success());
    assert!(p.reserve(&mut state, &pod, "node1").is_success());
    assert!(p.assumed().is_empty());
    let status = futures::executor::block_on(p.pre_bind(Arc::new(state), pod, Arc::from("node1")));
    assert!(status.is_success());
}

/// A binder that records the writes and, like the PV controller, binds
/// volume and claim in the store (or, `complete: false`, does nothing
/// more than the write).
struct ControllerBinder {
    objects: Arc<ClusterObjects>,
    complete: bool,
    writes: StdMutex<Vec<String>>,
}

impl convoy_api::Binder for ControllerBinder {
    fn bind(
        &self,
        _pod: Arc<PodInfo>,
        _node: Arc<str>,
    ) -> BoxFuture<'static, Result<(), BindError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn write_volume(&self, write: VolumeWrite) -> BoxFuture<'static, Result<String, BindError>> {
        let (pv_name, claim, node) = match &write {
            VolumeWrite::BindVolume { pv, claim, .. } => (Some(pv.clone()), claim.clone(), None),
            VolumeWrite::SelectNode { claim, node, .. } => {
                (None, claim.clone(), Some(node.clone()))
            }
        };
        self.writes.lock().unwrap().push(match &write {
            VolumeWrite::BindVolume { pv, claim, .. } => format!("bind {pv} to {}", claim.name),
            VolumeWrite::SelectNode { claim, node, .. } => {
                format!("select {node} for {}", claim.name)
            }
        });
        let pvc = self.objects.pvc(&claim.namespace, &claim.name).unwrap();
        let mut pvc_v = serde_json::to_value(&*pvc).unwrap();
        let pv_name = pv_name.unwrap_or_else(|| format!("pvc-{}", claim.uid));
        if let Some(node) = node {
            pvc_v["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": node});
            pvc_v["metadata"]["resourceVersion"] = json!("5");
            if !self.complete {
                self.objects.apply(&obj_pvc(pvc_json(pvc_v)));
                return Box::pin(std::future::ready(Ok("5".to_string())));
            }
            self.objects.apply(&obj_pv(pv_json(volume(
                &pv_name,
                &node,
                "1Gi",
                WAIT_PROVISIONER,
                None,
            ))));
        }
        let mut pv_v = serde_json::to_value(&*self.objects.pv(&pv_name).unwrap()).unwrap();
        pv_v["spec"]["claimRef"] =
            json!({"name": claim.name, "namespace": claim.namespace, "uid": claim.uid});
        pv_v["metadata"]["resourceVersion"] = json!("6");
        self.objects.apply(&obj_pv(pv_json(pv_v)));
        if self.complete {
            let ann = pvc_v["metadata"]["annotations"].as_object_mut().cloned().unwrap_or_default();
            let mut ann = ann;
            ann.insert("pv.kubernetes.io/bind-completed".into(), json!("yes"));
            pvc_v["metadata"]["annotations"] = Value::Object(ann);
            pvc_v["spec"]["volumeName"] = json!(pv_name);
            pvc_v["metadata"]["resourceVersion"] = json!("7");
            self.objects.apply(&obj_pvc(pvc_json(pvc_v)));
        }
        Box::pin(std::future::ready(Ok("6".to_string())))
    }
}

fn bind_run(complete: bool, timeout: i64) -> (Status, Vec<String>, usize) {
    let o = objects(
        &[claim("static", "1G", WAIT), claim("dynamic", "1Gi", WAIT_PROVISIONER)],
        &[volume("pv-1", "node1", "1G", WAIT, None)],
    );
    let binder =
        Arc::new(ControllerBinder { objects: o.clone(), complete, writes: StdMutex::default() });
    let args = VolumeBindingArgs { bind_timeout_seconds: timeout, ..Default::default() };
    let p = VolumeBinding::with_args(
        Some(&PluginArgs::VolumeBinding(args)),
        o,
        binder.clone() as Arc<dyn convoy_api::Binder>,
    )
    .unwrap();
    let pod = pod("p", &["static", "dynamic"]).info();
    let mut state = CycleState::new();
    let node = node1();
    p.pre_filter(&mut state, &pod, &NodeList::of(vec![node.clone()]));
    assert!(p.filter(&state, &pod, &node).is_success());
    assert!(p.reserve(&mut state, &pod, "node1").is_success());
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let status = rt.block_on(p.pre_bind(Arc::new(state), pod, Arc::from("node1")));
    let writes = binder.writes.lock().unwrap().clone();
    (status, writes, p.assumed().len())
}

#[test]
fn pre_bind_writes_and_waits_until_bound() {
    let (status, writes, assumed) = bind_run(true, 600);
    assert_eq!(show(&status), "Success: ");
    assert_eq!(writes, ["bind pv-1 to static", "select node1 for dynamic"]);
    assert_eq!(assumed, 0, "forgotten once bound");
}

#[test]
fn pre_bind_times_out() {
    let (status, _, assumed) = bind_run(false, 0);
    assert_eq!(status.code(), convoy_api::Code::Error);
    assert!(status.message().starts_with("binding volumes: "), "{}", status.message());
    assert_eq!(assumed, 2, "kept for Unreserve");
}

#[test]
fn check_reports_undone_bindings() {
    let o = objects(
        &[claim("c", "1G", WAIT), claim("d", "1Gi", WAIT_PROVISIONER)],
        &[volume("pv-1", "node1", "1G", WAIT, None)],
    );
    let claim_ref =
        |n: &str| ClaimRef { namespace: "testns".into(), name: n.into(), uid: format!("uid-{n}") };
    let labels = BTreeMap::from([(KEY.to_string(), "node1".to_string())]);
    let w = Written { pvs: vec![("pv-1".into(), "1".into(), claim_ref("c"))], claims: vec![] };
    assert_eq!(w.check(&*o, "node1", &labels), Err("ClaimRef got reset for pv \"pv-1\"".into()));
    let w = Written { pvs: vec![], claims: vec![(claim_ref("d"), "1".into())] };
    assert_eq!(
        w.check(&*o, "node1", &labels),
        Err("selectedNode annotation reset for PVC \"d\"".into())
    );
    let w = Written { pvs: vec![], claims: vec![(claim_ref("d"), "9".into())] };
    assert_eq!(
        w.check(&*o, "node1", &labels),
        Ok(false),
        "the watched claim is older than the write"
    );
    let mut d = claim("d", "1Gi", WAIT_PROVISIONER);
    d["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": "node2"});
    o.apply(&obj_pvc(pvc_json(d)));
    let w = Written { pvs: vec![], claims: vec![(claim_ref("d"), "1".into())] };
    assert_eq!(w.check(&*o, "node1", &labels), Err("provisioning failed for PVC \"d\"".into()));
}

/// Upstream `TestVolumeBinding` "local volumes with close capacity are
/// preferred" (one claim, then one per class), StorageCapacityScoring on:
/// the default shape prefers the node whose volumes the claims fill most.
#[test]
fn score_prefers_volumes_with_close_capacity() {
    let hdd = serde_json::from_value(json!({"metadata": {"name": "wait-hdd-sc"},
        "volumeBindingMode": "WaitForFirstConsumer", "provisioner": ""}))
    .unwrap();
    let pv = |name: &str, class: &str, size: &str, node: &str| {
        obj_pv(pv_json(json!({"metadata": {"name": name},
            "spec": {"storageClassName": class, "capacity": {"storage": size},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
            "status": {"phase": "Available"}})))
    };
    let claim = |name: &str, class: &str, size: &str| {
        obj_pvc(pvc_json(json!({"metadata": {"name": name},
            "spec": {"storageClassName": class, "resources": {"requests": {"storage": size}}}})))
    };
    let mut objects = vec![obj_class(hdd), obj_class(class_without_provisioner(WAIT))];
    for (node, size) in [("node-a", "200Gi"), ("node-b", "100Gi")] {
        let n = &node[5..];
        objects.push(pv(&format!("pv-{n}-0"), WAIT, size, node));
        objects.push(pv(&format!("pv-{n}-1"), WAIT, size, node));
        objects.push(pv(&format!("pv-{n}-2"), "wait-hdd-sc", size, node));
        objects.push(pv(&format!("pv-{n}-3"), "wait-hdd-sc", size, node));
    }
    objects.push(claim("pvc-a", WAIT, "50Gi"));
    objects.push(claim("pvc-0", WAIT, "50Gi"));
    objects.push(claim("pvc-1", "wait-hdd-sc", "100Gi"));
    let p = plugin(store(objects));
    let nodes: Vec<NodeInfo> = ["node-a", "node-b", "node-c"]
        .iter()
        .map(|n| NodeBuilder::new(n).label("kubernetes.io/hostname", n).info())
        .collect();
    for (claims, want) in [(&["pvc-a"][..], [75, 50, 0]), (&["pvc-0", "pvc-1"][..], [63, 25, 0])] {
        let pod = pod_with(
            "pod-a",
            claims.iter().enumerate().map(|(i, c)| claim_volume(&format!("v{i}"), c)).collect(),
        )
        .info();
        let mut state = CycleState::new();
        let all = NodeList::of(nodes.clone());
        assert!(p.pre_filter(&mut state, &pod, &all).1.is_success());
        let fits: Vec<bool> =
            nodes.iter().map(|n| p.filter(&state, &pod, n).is_success()).collect();
        assert_eq!(fits, [true, true, false], "{claims:?}");
        assert!(p.pre_score(&mut state, &pod, &[], &all).is_success());
        let scores: Vec<i64> = nodes.iter().map(|n| p.score(&state, &pod, n).unwrap()).collect();
        assert_eq!(scores, want, "{claims:?}");
    }
}

#[test]
fn score_is_skipped_without_static_bindings_or_published_capacity() {
    let p = plugin(objects(&[claim("provisioned", "1Gi", WAIT_PROVISIONER)], &[]));
    let pod = pod("p", &["provisioned"]).info();
    let mut state = CycleState::new();
    let node = node1();
    let all = NodeList::of(vec![node.clone()]);
    p.pre_filter(&mut state, &pod, &all);
    assert!(p.filter(&state, &pod, &node).is_success());
    assert!(p.pre_score(&mut state, &pod, &[], &all).is_skip());
}

/// Upstream `makeCapacity`: a CSIStorageCapacity of `class` reached from
/// `node` (every node: `None`), with `capacity` and `maximumVolumeSize`
/// when not empty.
fn capacity(name: &str, class: &str, node: Option<&str>, cap: &str, max: &str) -> ClusterObject {
    let mut c = json!({"metadata": {"name": name, "namespace": "kube-system"},
        "storageClassName": class, "nodeTopology": {}});
    if let Some(n) = node {
        c["nodeTopology"] = json!({"matchLabels": {KEY: n}});
    }
    if !cap.is_empty() {
        c["capacity"] = json!(cap);
    }
    if !max.is_empty() {
        c["maximumVolumeSize"] = json!(max);
    }
    ClusterObject::CSIStorageCapacity(Arc::new(serde_json::from_value(c).unwrap()))
}

fn csi_driver(name: &str, storage_capacity: bool) -> ClusterObject {
    ClusterObject::CSIDriver(Arc::new(
        serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": {"storageCapacity": storage_capacity}}),
        )
        .unwrap(),
    ))
}

/// Upstream `TestCapacity`: a claim to provision on node1 needs a
/// CSIStorageCapacity of its class that node1 reaches with room for it,
/// when the class's provisioner is a CSIDriver with `storageCapacity:
/// true`; otherwise capacity is not checked.
#[test]
fn capacity_is_checked_when_the_driver_publishes_it() {
    let ok = "Success: ";
    let space = "UnschedulableAndUnresolvable: node(s) did not have enough free storage";
    let net = |name| capacity(name, WAIT_PROVISIONER, None, "1Gi", "");
    let on = |name, node| capacity(name, WAIT_PROVISIONER, Some(node), "1Gi", "");
    let one = |cap: &str, max: &str| vec![capacity("c", WAIT_PROVISIONER, Some("node1"), cap, max)];
    let in_1gi = "provision provisioned-pvc in 1073741824";
    type Case<'a> = (&'a str, Vec<ClusterObject>, &'a str, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        ("network-attached", vec![net("net")], ok, vec![in_1gi]),
        ("local-storage", vec![on("n1", "node1")], ok, vec![in_1gi]),
        (
            "multiple",
            vec![on("a-n2", "node2"), on("b-n1", "node1"), net("c-net")],
            ok,
            vec![in_1gi],
        ),
        ("no-storage", vec![], space, vec![]),
        ("wrong-node", vec![on("n2", "node2")], space, vec![]),
        ("wrong-storage-class", vec![capacity("c", WAIT, Some("node1"), "1Gi", "")], space, vec![]),
        ("insufficient-storage", one("1Mi", ""), space, vec![]),
        ("insufficient-volume-size", one("1Gi", "1Mi"), space, vec![]),
        ("zero-storage", one("0Mi", ""), space, vec![]),
        ("zero-volume-size", one("", "0Mi"), space, vec![]),
        ("nil-storage", one("", ""), space, vec![]),
    ];
    for opt_in in [true, false] {
        for (name, capacities, want, chosen) in &cases {
            let mut objects = classes();
            objects.push(obj_pvc(pvc_json(claim("provisioned-pvc", "1Gi", WAIT_PROVISIONER))));
            objects.push(csi_driver("test-provisioner", opt_in));
            objects.extend(capacities.iter().cloned());
            let p = plugin(store(objects));
            let got = find(&p, &pod("test-pod", &["provisioned-pvc"]).info());
            let want = if opt_in {
                (want.to_string(), chosen.iter().map(|c| c.to_string()).collect())
            } else {
                (ok.to_string(), vec!["provision provisioned-pvc".to_string()])
            };
            assert_eq!(got, want, "{name}, storageCapacity {opt_in}");
        }
    }
}

/// Upstream `Score` with StorageCapacityScoring: provisions only score
/// against the capacity their check matched (requests summed per class,
/// the capacity not: upstream's "cannot be +="); the default shape
/// prefers the emptier pool.
#[test]
fn provisions_score_against_the_published_capacity() {
    let mut objects = classes();
    for c in ["small", "large"] {
        objects.push(obj_pvc(pvc_json(claim(
            c,
            if c == "small" { "1Gi" } else { "3Gi" },
            WAIT_PROVISIONER,
        ))));
    }
    objects.push(csi_driver("test-provisioner", true));
    objects.push(capacity("pool-1", WAIT_PROVISIONER, Some("node1"), "8Gi", ""));
    objects.push(capacity("pool-2", WAIT_PROVISIONER, Some("node2"), "5Gi", ""));
    let p = plugin(store(objects));
    let nodes: Vec<NodeInfo> = ["node1", "node2", "node3"]
        .iter()
        .map(|n| NodeBuilder::new(n).label(KEY, n).info())
        .collect();
    let pod = pod("p", &["small", "large"]).info();
    let mut state = CycleState::new();
    let all = NodeList::of(nodes.clone());
    assert!(p.pre_filter(&mut state, &pod, &all).1.is_success());
    let fits: Vec<String> = nodes.iter().map(|n| show(&p.filter(&state, &pod, n))).collect();
    // node3 is outside the class's allowed topology (node1 and
    // reference-value), node2 too.
    assert_eq!(fits[0], "Success: ");
    assert_eq!(fits[1], CONFLICT);
    assert!(p.pre_score(&mut state, &pod, &[], &all).is_success());
    // 4Gi of 8Gi: utilization 50, score 50.
    assert_eq!(p.score(&state, &pod, &nodes[0]).unwrap(), 50);
    assert_eq!(p.score(&state, &pod, &nodes[1]).unwrap(), 0);
}

fn class_without_provisioner(name: &str) -> k8s_openapi::api::storage::v1::StorageClass {
    serde_json::from_value(json!({"metadata": {"name": name},
        "volumeBindingMode": "WaitForFirstConsumer", "provisioner": ""}))
    .unwrap()
}

#[test]
fn check_reports_a_bound_volume_the_node_cannot_reach() {
    let mut c = claim("d", "1Gi", WAIT_PROVISIONER);
    c["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": "node1",
        "pv.kubernetes.io/bind-completed": "yes"});
    c["spec"]["volumeName"] = json!("pv-elsewhere");
    let o = objects(&[c], &[volume("pv-elsewhere", "node2", "1Gi", WAIT_PROVISIONER, Some("d"))]);
    let claim_ref = ClaimRef { namespace: "testns".into(), name: "d".into(), uid: "uid-d".into() };
    let w = Written { pvs: vec![], claims: vec![(claim_ref, "1".into())] };
    let labels = BTreeMap::from([(KEY.to_string(), "node1".to_string())]);
    assert_eq!(
        w.check(&*o, "node1", &labels),
        Err("pv \"pv-elsewhere\" node affinity doesn't match node \"node1\": no matching \
             NodeSelectorTerms"
            .into())
    );
    let labels = BTreeMap::from([(KEY.to_string(), "node2".to_string())]);
    assert_eq!(w.check(&*o, "node1", &labels), Ok(true));
}
