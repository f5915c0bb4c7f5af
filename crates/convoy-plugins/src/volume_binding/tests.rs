//! Ported from upstream `volume_binding_test.go` (v1.37.2): the cases of
//! claims that are missing, lost, bound, unbound-immediate or unbound with
//! a WaitForFirstConsumer class (the binding itself: `wfc_tests.rs`).

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{ClusterObject, NodeList};
use serde_json::json;

use super::*;
use crate::helper::volumes::testing::*;

const WAIT_SC: &str = "wait-sc";
const IMMEDIATE_SC: &str = "immediate-sc";

fn classes() -> Vec<ClusterObject> {
    // Upstream's `waitSC` has no provisioner.
    let mut wait = class(WAIT_SC, Some("WaitForFirstConsumer"));
    wait.provisioner = String::new();
    vec![obj_class(wait), obj_class(class(IMMEDIATE_SC, Some("Immediate")))]
}

/// A PV of a class, with an `In` node affinity per `(key, values)`.
fn pv(name: &str, affinity: &[(&str, &[&str])]) -> ClusterObject {
    let mut v = json!({"metadata": {"name": name}, "spec": {"storageClassName": WAIT_SC},
        "status": {"phase": "Available"}});
    if !affinity.is_empty() {
        let exprs: Vec<_> = affinity
            .iter()
            .map(|(k, vs)| json!({"key": k, "operator": "In", "values": vs}))
            .collect();
        v["spec"]["nodeAffinity"] =
            json!({"required": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}});
    }
    obj_pv(pv_json(v))
}

struct Case {
    name: &'static str,
    pod: PodBuilder,
    objects: Vec<ClusterObject>,
    nodes: Vec<NodeBuilder>,
    /// PreFilter as `Code: message`.
    pre_filter: &'static str,
    /// Filter per node, when PreFilter succeeded.
    filter: Vec<&'static str>,
}

fn fixed_binder() -> Arc<dyn convoy_api::Binder> {
    Arc::new(crate::helper::testing::FixedBinder(Ok(())))
}

fn claims_pod(claims: &[&str]) -> PodBuilder {
    pod_with(
        "pod-a",
        claims.iter().enumerate().map(|(i, c)| claim_volume(&format!("v{i}"), c)).collect(),
    )
}

fn run(c: Case) {
    let mut objects = classes();
    objects.extend(c.objects);
    let plugin = VolumeBinding::new(store(objects), fixed_binder());
    let nodes: Vec<NodeInfo> = c.nodes.into_iter().map(NodeBuilder::info).collect();
    let pod = c.pod.info();
    let mut state = CycleState::new();
    let (_, pre) = plugin.pre_filter(&mut state, &pod, &NodeList::of(nodes.clone()));
    let show = |s: &Status| format!("{:?}: {}", s.code(), s.message());
    assert_eq!(show(&pre), c.pre_filter, "{}: PreFilter", c.name);
    if pre.is_success() {
        let got: Vec<String> =
            nodes.iter().map(|n| show(&plugin.filter(&state, &pod, n))).collect();
        assert_eq!(got, c.filter, "{}: Filter", c.name);
    }
}

#[test]
fn volume_binding() {
    let ok = "Success: ";
    let cases = vec![
        Case {
            name: "pod has not pvcs",
            pod: PodBuilder::new("pod-a"),
            objects: vec![],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "Skip: ",
            filter: vec![],
        },
        Case {
            name: "all bound",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_pvc(pvc("pvc-a", "pv-a", WAIT_SC)), pv("pv-a", &[])],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: ok,
            filter: vec![ok],
        },
        Case {
            name: "PVC does not exist",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "UnschedulableAndUnresolvable: persistentvolumeclaim \"pvc-a\" not found",
            filter: vec![],
        },
        Case {
            name: "Part of PVCs do not exist",
            pod: claims_pod(&["pvc-a", "pvc-b"]),
            objects: vec![obj_pvc(pvc("pvc-a", "pv-a", WAIT_SC))],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "UnschedulableAndUnresolvable: persistentvolumeclaim \"pvc-b\" not found",
            filter: vec![],
        },
        Case {
            name: "immediate claims not bound",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_pvc(pvc("pvc-a", "", IMMEDIATE_SC))],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "UnschedulableAndUnresolvable: pod has unbound immediate PersistentVolumeClaims",
            filter: vec![],
        },
        Case {
            name: "claim without a class is immediate",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_pvc(pvc_json(json!({"metadata": {"name": "pvc-a"}})))],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "UnschedulableAndUnresolvable: pod has unbound immediate PersistentVolumeClaims",
            filter: vec![],
        },
        Case {
            name: "pre-bound claim (volumeName, not bind-completed) is immediate",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_pvc(pvc_json(json!({"metadata": {"name": "pvc-a"},
                "spec": {"volumeName": "pv-a", "storageClassName": WAIT_SC}})))],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "UnschedulableAndUnresolvable: pod has unbound immediate PersistentVolumeClaims",
            filter: vec![],
        },
        Case {
            name: "unbound claims no matches",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_pvc(pvc("pvc-a", "", WAIT_SC))],
            nodes: vec![NodeBuilder::new("node-a").label("foo", "bar")],
            pre_filter: ok,
            filter: vec![
                "UnschedulableAndUnresolvable: node(s) didn't find available persistent volumes to bind",
            ],
        },
        Case {
            name: "bound and unbound unsatisfied",
            pod: claims_pod(&["pvc-a", "pvc-b"]),
            objects: vec![
                obj_pvc(pvc("pvc-a", "pv-a", WAIT_SC)),
                obj_pvc(pvc("pvc-b", "", WAIT_SC)),
                pv("pv-a", &[("foo", &["bar"])]),
            ],
            nodes: vec![NodeBuilder::new("node-a").label("foo", "barbar")],
            pre_filter: ok,
            filter: vec![
                "UnschedulableAndUnresolvable: node(s) didn't match PersistentVolume's node \
                affinity, node(s) didn't find available persistent volumes to bind",
            ],
        },
        Case {
            name: "bound volume node affinity",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_pvc(pvc("pvc-a", "pv-a", WAIT_SC)), pv("pv-a", &[("foo", &["bar"])])],
            nodes: vec![
                NodeBuilder::new("node-a").label("foo", "barbar"),
                NodeBuilder::new("node-b").label("foo", "bar"),
                NodeBuilder::new("node-c"),
            ],
            pre_filter: ok,
            filter: vec![
                "UnschedulableAndUnresolvable: node(s) didn't match PersistentVolume's node affinity",
                ok,
                "UnschedulableAndUnresolvable: node(s) didn't match PersistentVolume's node affinity",
            ],
        },
        Case {
            name: "pv not found",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_pvc(pvc("pvc-a", "pv-a", WAIT_SC))],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: ok,
            filter: vec![
                "UnschedulableAndUnresolvable: node(s) unavailable due to one or more \
                pvc(s) bound to non-existent pv(s)",
            ],
        },
        Case {
            name: "pv not found claim lost",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_pvc(pvc_json(json!({"metadata": {"name": "pvc-a",
                "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {"volumeName": "pv-a", "storageClassName": WAIT_SC},
                "status": {"phase": "Lost"}})))],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "UnschedulableAndUnresolvable: persistentvolumeclaim \"pvc-a\" bound to \
                non-existent persistentvolume \"pv-a\"",
            filter: vec![],
        },
        Case {
            name: "claim being deleted",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_pvc(pvc_json(json!({"metadata": {"name": "pvc-a",
                "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"volumeName": "pv-a"}})))],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "UnschedulableAndUnresolvable: persistentvolumeclaim \"pvc-a\" is being deleted",
            filter: vec![],
        },
        Case {
            name: "class without binding mode",
            pod: claims_pod(&["pvc-a"]),
            objects: vec![obj_class(class("no-mode", None)), obj_pvc(pvc("pvc-a", "", "no-mode"))],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "Error: VolumeBindingMode not set for StorageClass \"no-mode\"",
            filter: vec![],
        },
    ];
    for c in cases {
        run(c);
    }
}

fn ephemeral_pod() -> PodBuilder {
    pod_with("abc", vec![volume(json!({"name": "data", "emptyDir": {}})), ephemeral_volume("xyz")])
        .uid("12345")
}

fn ephemeral_claim(owner_uid: Option<&str>, pv: &str) -> ClusterObject {
    let mut v = json!({"metadata": {"name": "abc-xyz"}, "spec": {"storageClassName": WAIT_SC}});
    if let Some(uid) = owner_uid {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "abc", "uid": uid, "controller": true}]);
    }
    if !pv.is_empty() {
        v["spec"]["volumeName"] = json!(pv);
        v["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    }
    obj_pvc(pvc_json(v))
}

#[test]
fn generic_ephemeral_volumes() {
    let ok = "Success: ";
    let cases = vec![
        Case {
            name: "ephemeral claim missing",
            pod: ephemeral_pod(),
            objects: vec![],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "UnschedulableAndUnresolvable: waiting for ephemeral volume controller to \
                create the persistentvolumeclaim \"abc-xyz\"",
            filter: vec![],
        },
        Case {
            name: "ephemeral claim not owned",
            pod: ephemeral_pod(),
            objects: vec![ephemeral_claim(Some("other"), "pv-a")],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: "UnschedulableAndUnresolvable: PVC default/abc-xyz was not created for pod \
                default/abc (pod is not owner)",
            filter: vec![],
        },
        Case {
            name: "ephemeral claim bound",
            pod: ephemeral_pod(),
            objects: vec![ephemeral_claim(Some("12345"), "pv-a"), pv("pv-a", &[("zone", &["a"])])],
            nodes: vec![
                NodeBuilder::new("node-a").label("zone", "a"),
                NodeBuilder::new("node-b").label("zone", "b"),
            ],
            pre_filter: ok,
            filter: vec![
                ok,
                "UnschedulableAndUnresolvable: node(s) didn't match PersistentVolume's node affinity",
            ],
        },
        Case {
            name: "ephemeral claim unbound with WaitForFirstConsumer",
            pod: ephemeral_pod(),
            objects: vec![ephemeral_claim(Some("12345"), "")],
            nodes: vec![NodeBuilder::new("node-a")],
            pre_filter: ok,
            filter: vec![
                "UnschedulableAndUnresolvable: node(s) didn't find available persistent volumes to bind",
            ],
        },
    ];
    for c in cases {
        run(c);
    }
}

#[test]
fn hints() {
    let pod = claims_pod(&["pvc-a"]).info();
    let claim = |name: &str, ns: &str| {
        EventObject::Object(obj_pvc(pvc_json(json!({"metadata": {"name": name, "namespace": ns}}))))
    };
    let cases = [
        (
            "pod has the pvc that is being modified",
            &pod,
            claim("pvc-a", "default"),
            QueueingHint::Queue,
        ),
        (
            "pvc with the same name in a different namespace",
            &pod,
            claim("pvc-a", "other"),
            QueueingHint::Skip,
        ),
        (
            "pod has no pvc that is being modified",
            &pod,
            claim("pvc-b", "default"),
            QueueingHint::Skip,
        ),
    ];
    for (name, pod, new, want) in cases {
        assert_eq!(queue_if_pod_uses_claim(pod, None, Some(&new)), want, "{name}");
    }
    let eph = ephemeral_pod().info();
    assert_eq!(
        queue_if_pod_uses_claim(&eph, None, Some(&claim("abc-xyz", "default"))),
        QueueingHint::Queue,
        "pod has the generic ephemeral volume that is being modified"
    );

    let sc = |topologies: serde_json::Value| {
        let mut c = class("c", Some("Immediate"));
        c.allowed_topologies = serde_json::from_value(topologies).unwrap();
        EventObject::Object(obj_class(c))
    };
    let zone_a = json!([{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}]);
    let zone_b = json!([{"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]}]);
    assert_eq!(
        is_schedulable_after_storage_class_change(&pod, None, Some(&sc(zone_a.clone()))),
        QueueingHint::Queue,
        "new class"
    );
    assert_eq!(
        is_schedulable_after_storage_class_change(
            &pod,
            Some(&sc(zone_a.clone())),
            Some(&sc(zone_b))
        ),
        QueueingHint::Queue,
        "allowed topologies changed"
    );
    assert_eq!(
        is_schedulable_after_storage_class_change(
            &pod,
            Some(&sc(zone_a.clone())),
            Some(&sc(zone_a))
        ),
        QueueingHint::Skip,
        "no change"
    );

    let csi = |ann: Option<&str>| {
        let mut v = json!({"metadata": {"name": "n"}, "spec": {"drivers": []}});
        if let Some(a) = ann {
            v["metadata"]["annotations"] = json!({ANN_MIGRATED_PLUGINS: a});
        }
        EventObject::Object(obj_csi_node(csi_node(v)))
    };
    let hint = |old: Option<EventObject>, new: EventObject| {
        is_schedulable_after_csi_node_change(&pod, old.as_ref(), Some(&new))
    };
    assert_eq!(hint(None, csi(None)), QueueingHint::Queue, "CSINode is newly created");
    assert_eq!(hint(Some(csi(None)), csi(Some("kubernetes.io/aws-ebs"))), QueueingHint::Queue);
    assert_eq!(hint(Some(csi(Some("a"))), csi(Some("a,b"))), QueueingHint::Queue);
    assert_eq!(hint(Some(csi(Some("a"))), csi(Some("a"))), QueueingHint::Skip);
}

/// Upstream `TestIsSchedulableAfterCSIStorageCapacityChange` and
/// `TestIsSchedulableAfterCSIDriverChange` (v1.37.2).
#[test]
fn capacity_and_driver_hints() {
    let pod = claims_pod(&["pvc-a"]).info();
    let cap = |capacity: Option<&str>, max: Option<&str>| {
        let mut v = json!({"metadata": {"name": "c", "namespace": "default"},
                           "storageClassName": "sc"});
        if let Some(c) = capacity {
            v["capacity"] = json!(c);
        }
        if let Some(m) = max {
            v["maximumVolumeSize"] = json!(m);
        }
        EventObject::Object(ClusterObject::CSIStorageCapacity(Arc::new(
            serde_json::from_value(v).unwrap(),
        )))
    };
    let hint = |old: Option<EventObject>, new: EventObject| {
        is_schedulable_after_csi_storage_capacity_change(&pod, old.as_ref(), Some(&new))
    };
    assert_eq!(hint(None, cap(Some("1Gi"), None)), QueueingHint::Queue, "added");
    assert_eq!(hint(Some(cap(None, None)), cap(Some("1Gi"), None)), QueueingHint::Queue);
    assert_eq!(hint(Some(cap(Some("1Gi"), None)), cap(Some("2Gi"), None)), QueueingHint::Queue);
    assert_eq!(hint(Some(cap(Some("2Gi"), None)), cap(Some("1Gi"), None)), QueueingHint::Skip);
    assert_eq!(
        hint(Some(cap(Some("1Gi"), None)), cap(Some("10Gi"), Some("1Gi"))),
        QueueingHint::Skip,
        "the limit is maximumVolumeSize when set"
    );
    assert_eq!(hint(Some(cap(Some("1Gi"), None)), cap(None, None)), QueueingHint::Skip);

    let driver = |capacity: Option<bool>| {
        let mut spec = json!({});
        if let Some(c) = capacity {
            spec["storageCapacity"] = json!(c);
        }
        EventObject::Object(ClusterObject::CSIDriver(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "d"}, "spec": spec})).unwrap(),
        )))
    };
    let inline = pod_with(
        "inline",
        vec![serde_json::from_value(json!({"name": "v", "csi": {"driver": "d"}})).unwrap()],
    )
    .info();
    let hint = |pod: &PodInfo, old: EventObject, new: EventObject| {
        is_schedulable_after_csi_driver_change(pod, Some(&old), Some(&new))
    };
    assert_eq!(hint(&inline, driver(Some(true)), driver(Some(false))), QueueingHint::Queue);
    assert_eq!(hint(&inline, driver(Some(true)), driver(None)), QueueingHint::Queue);
    assert_eq!(hint(&inline, driver(Some(false)), driver(Some(true))), QueueingHint::Skip);
    assert_eq!(hint(&pod, driver(Some(true)), driver(Some(false))), QueueingHint::Skip);
}

#[test]
fn args_are_kept_and_checked() {
    let objects = store(vec![]);
    let args = VolumeBindingArgs { bind_timeout_seconds: 30, ..Default::default() };
    let p = VolumeBinding::with_args(
        Some(&PluginArgs::VolumeBinding(args.clone())),
        objects.clone(),
        fixed_binder(),
    )
    .unwrap();
    assert_eq!(p.args(), &args);
    assert_eq!(
        VolumeBinding::with_args(None, objects.clone(), fixed_binder())
            .unwrap()
            .args()
            .bind_timeout_seconds,
        600
    );
    assert!(
        VolumeBinding::with_args(Some(&PluginArgs::Other(json!(null))), objects, fixed_binder())
            .is_err()
    );
}
