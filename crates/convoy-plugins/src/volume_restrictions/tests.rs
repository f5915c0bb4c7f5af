//! Ported from upstream `volume_restrictions_test.go` (v1.37.2).

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{ClusterObject, Code, NodeList};
use serde_json::json;

use super::*;
use crate::helper::testing::pod_obj;
use crate::helper::volumes::testing::*;

/// A short description of a status: `Code: message`.
fn show(s: &Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

fn node_with(pods: Vec<PodBuilder>) -> NodeInfo {
    let mut n = NodeBuilder::new("node-1").info();
    for p in pods {
        n.add_pod(p.node("node-1").info());
    }
    n
}

/// PreFilter then (if it ran) Filter, as the framework runs them.
fn run(plugin: &VolumeRestrictions, pod: &PodInfo, node: &NodeInfo) -> (String, String) {
    let mut state = CycleState::new();
    let nodes = NodeList::of([node.clone()]);
    let (_, pre) = plugin.pre_filter(&mut state, pod, &nodes);
    let filter = if pre.is_success() {
        show(&plugin.filter(&state, pod, node))
    } else if pre.is_skip() {
        "skipped".to_string()
    } else {
        "not run".to_string()
    };
    (show(&pre), filter)
}

/// Two volumes of one in-tree kind: the pod uses the first; existing pods
/// on the node use the first ("same state") or the second ("different").
fn disk_cases(kind: &str, same: serde_json::Value, other: serde_json::Value) {
    let plugin = VolumeRestrictions::new(store(vec![]));
    let vol = |name: &str, src: &serde_json::Value| volume(json!({"name": name, kind: src}));
    let pod = pod_with("p", vec![vol("v", &same)]).info();
    let ok = ("Success: ".to_string(), "Success: ".to_string());
    let conflict = ("Success: ".to_string(), format!("Unschedulable: {ERR_REASON_DISK_CONFLICT}"));
    let cases = [
        ("nothing", node_with(vec![]), &ok),
        ("one state", node_with(vec![pod_with("e", vec![vol("v", &other)])]), &ok),
        ("same state", node_with(vec![pod_with("e", vec![vol("v", &same)])]), &conflict),
        (
            "pod with a volume that doesn't have restrictions",
            node_with(vec![pod_with("e", vec![volume(json!({"name": "x", "emptyDir": {}}))])]),
            &ok,
        ),
    ];
    for (name, node, want) in cases {
        assert_eq!(&run(&plugin, &pod, &node), want, "{kind}: {name}");
    }
    let plain = PodBuilder::new("plain").info();
    assert_eq!(run(&plugin, &plain, &node_with(vec![])).0, "Skip: ", "{kind}: no volumes");
}

#[test]
fn gce_disk_conflicts() {
    disk_cases("gcePersistentDisk", json!({"pdName": "foo"}), json!({"pdName": "bar"}));
    // Both read-only: no conflict.
    let ro = json!({"pdName": "foo", "readOnly": true});
    let plugin = VolumeRestrictions::new(store(vec![]));
    let v = volume(json!({"name": "v", "gcePersistentDisk": ro}));
    let pod = pod_with("p", vec![v.clone()]).info();
    let node = node_with(vec![pod_with("e", vec![v])]);
    assert_eq!(run(&plugin, &pod, &node).1, "Success: ");
}

#[test]
fn aws_disk_conflicts() {
    disk_cases("awsElasticBlockStore", json!({"volumeID": "foo"}), json!({"volumeID": "bar"}));
}

#[test]
fn rbd_disk_conflicts() {
    disk_cases(
        "rbd",
        json!({"monitors": ["a", "b"], "pool": "foo", "image": "bar", "fsType": "ext4"}),
        json!({"monitors": ["c", "d"], "pool": "foo", "image": "bar", "fsType": "ext4"}),
    );
}

#[test]
fn iscsi_disk_conflicts() {
    disk_cases(
        "iscsi",
        json!({"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2016-12.server:storage.target01",
               "fsType": "ext4", "lun": 0}),
        json!({"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2017-12.server:storage.target01",
               "fsType": "ext4", "lun": 0}),
    );
}

#[test]
fn access_mode_conflicts() {
    let claim = |name: &str, mode: &str| {
        obj_pvc(pvc_json(json!({"metadata": {"name": name}, "spec": {"accessModes": [mode]}})))
    };
    let pvcs = || {
        vec![
            claim("claim-with-rwop-1", "ReadWriteOncePod"),
            claim("claim-with-rwop-2", "ReadWriteOncePod"),
            claim("claim-with-rwx", "ReadWriteMany"),
        ]
    };
    let with_claims = |name: &str, claims: &[&str]| {
        pod_with(name, claims.iter().map(|c| claim_volume(c, c)).collect())
    };
    let one = || with_claims("pod-with-one-pvc", &["claim-with-rwop-1"]);
    let two = || with_claims("pod-with-two-pvcs", &["claim-with-rwop-1", "claim-with-rwop-2"]);
    let rwx = || with_claims("pod-with-rwx", &["claim-with-rwx"]);
    let conflict = format!("Unschedulable: {ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT}");
    /// Name, claims held, pod, pods on the node, (PreFilter, Filter).
    type Case<'a> = (&'a str, Vec<ClusterObject>, PodBuilder, Vec<PodBuilder>, (&'a str, &'a str));
    let cases: Vec<Case> = vec![
        ("nothing", vec![], PodBuilder::new("p"), vec![], ("Skip: ", "skipped")),
        (
            "failed to get PVC",
            vec![],
            one(),
            vec![],
            (
                "UnschedulableAndUnresolvable: persistentvolumeclaim \"claim-with-rwop-1\" not found",
                "not run",
            ),
        ),
        ("no access mode conflict", pvcs(), one(), vec![rwx()], ("Skip: ", "skipped")),
        (
            "access mode conflict, unschedulable",
            pvcs(),
            with_claims("pod-with-one-conflict", &["claim-with-rwop-1"]),
            vec![one(), rwx()],
            ("Success: ", &conflict),
        ),
        (
            "two conflicts, unschedulable",
            pvcs(),
            with_claims("pod-with-two-conflicts", &["claim-with-rwop-1", "claim-with-rwop-2"]),
            vec![two(), rwx()],
            ("Success: ", &conflict),
        ),
    ];
    for (name, objects, pod, existing, want) in cases {
        let plugin = VolumeRestrictions::new(store(objects));
        let got = run(&plugin, &pod.info(), &node_with(existing));
        assert_eq!((got.0.as_str(), got.1.as_str()), want, "{name}");
    }
}

/// Preemption's what-if: removing the pod that holds the claim clears the
/// conflict; adding it back restores it.
#[test]
fn remove_and_add_pod_update_the_conflict_count() {
    let plugin = VolumeRestrictions::new(store(vec![obj_pvc(pvc_json(
        json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOncePod"]}}),
    ))]));
    let holder = pod_with("holder", vec![claim_volume("v", "c")]).node("node-1").info();
    let mut node = NodeBuilder::new("node-1").info();
    node.add_pod(holder.clone());
    let pod = pod_with("p", vec![claim_volume("v", "c")]).info();
    let mut state = CycleState::new();
    let (_, s) = plugin.pre_filter(&mut state, &pod, &NodeList::of([node.clone()]));
    assert!(s.is_success());
    assert_eq!(plugin.filter(&state, &pod, &node).code(), Code::Unschedulable);
    assert!(plugin.remove_pod(&mut state, &pod, &holder, &node).is_success());
    assert!(plugin.filter(&state, &pod, &node).is_success());
    assert!(plugin.add_pod(&mut state, &pod, &holder, &node).is_success());
    assert_eq!(plugin.filter(&state, &pod, &node).code(), Code::Unschedulable);
}

#[test]
fn hints() {
    let pod = pod_with(
        "p",
        vec![
            claim_volume("a", "claim"),
            volume(json!({"name": "d", "gcePersistentDisk": {"pdName": "disk"}})),
        ],
    )
    .info();
    let deleted = |p: PodBuilder| Some(pod_obj(p.node("n").build()));
    let cases = [
        (
            "pod with the same disk",
            deleted(pod_with(
                "e",
                vec![volume(json!({"name": "x",
            "gcePersistentDisk": {"pdName": "disk"}}))],
            )),
            QueueingHint::Queue,
        ),
        (
            "pod with the same claim",
            deleted(pod_with("e", vec![claim_volume("x", "claim")])),
            QueueingHint::Queue,
        ),
        (
            "unrelated pod",
            deleted(pod_with("e", vec![claim_volume("x", "other")])),
            QueueingHint::Skip,
        ),
        (
            "other namespace",
            deleted(pod_with("e", vec![claim_volume("x", "claim")]).namespace("o")),
            QueueingHint::Skip,
        ),
    ];
    for (name, old, want) in cases {
        assert_eq!(
            is_schedulable_after_assigned_pod_deleted(&pod, old.as_ref(), None),
            want,
            "{name}"
        );
    }
    let added = |name: &str, ns: &str| {
        Some(EventObject::Object(obj_pvc(pvc_json(
            json!({"metadata": {"name": name, "namespace": ns}}),
        ))))
    };
    assert_eq!(
        queue_if_pod_names_claim(&pod, None, added("claim", "default").as_ref()),
        QueueingHint::Queue
    );
    assert_eq!(
        queue_if_pod_names_claim(&pod, None, added("other", "default").as_ref()),
        QueueingHint::Skip
    );
    assert_eq!(
        queue_if_pod_names_claim(&pod, None, added("claim", "o").as_ref()),
        QueueingHint::Skip
    );
}
