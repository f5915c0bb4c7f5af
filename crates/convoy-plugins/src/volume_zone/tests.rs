//! Ported from upstream `volume_zone_test.go` (v1.37.2). The NotFound
//! texts are the real listers' (`storageclass.storage.k8s.io "x" not
//! found`), not the test fakes' plural ones.

use convoy_api::testing::NodeBuilder;
use convoy_api::{ClusterObject, NodeList};
use serde_json::json;

use super::*;
use crate::helper::volumes::testing::*;

fn pv(name: &str, labels: serde_json::Value) -> ClusterObject {
    obj_pv(pv_json(json!({"metadata": {"name": name, "labels": labels}})))
}

fn bound(name: &str, volume: &str) -> ClusterObject {
    obj_pvc(pvc_json(json!({"metadata": {"name": name}, "spec": {"volumeName": volume}})))
}

fn node(labels: &[(&str, &str)]) -> NodeInfo {
    labels.iter().fold(NodeBuilder::new("host1"), |b, (k, v)| b.label(k, v)).info()
}

/// PreFilter then Filter: `(prefilter, filter)` as `Code: message`.
fn run(plugin: &VolumeZone, claim: Option<&str>, node: &NodeInfo) -> (String, String) {
    let pod = match claim {
        Some(c) => pod_with("pod_1", vec![claim_volume("v", c)]).info(),
        None => convoy_api::testing::PodBuilder::new("pod_1").info(),
    };
    let mut state = CycleState::new();
    let (_, pre) = plugin.pre_filter(&mut state, &pod, &NodeList::default());
    let show = |s: &Status| format!("{:?}: {}", s.code(), s.message());
    let filter =
        if pre.is_success() { show(&plugin.filter(&state, &pod, node)) } else { "-".into() };
    (show(&pre), filter)
}

#[test]
fn single_zone() {
    let plugin = VolumeZone::new(store(vec![
        pv("Vol_1", json!({LABEL_BETA_ZONE: "us-west1-a"})),
        pv("Vol_2", json!({LABEL_BETA_REGION: "us-west1", "uselessLabel": "none"})),
        pv("Vol_Stable_1", json!({LABEL_ZONE: "us-west1-a"})),
        pv("Vol_Stable_2", json!({LABEL_REGION: "us-west1", "uselessLabel": "none"})),
        pv("Vol_Stable_3", json!({LABEL_ZONE: "us-west1-a", LABEL_REGION: "us-west1-a"})),
        bound("PVC_1", "Vol_1"),
        bound("PVC_2", "Vol_2"),
        bound("PVC_4", "Vol_not_exist"),
        bound("PVC_Stable_1", "Vol_Stable_1"),
        bound("PVC_Stable_2", "Vol_Stable_2"),
        bound("PVC_Stable_3", "Vol_Stable_3"),
    ]));
    let ok = ("Success: ", "Success: ");
    let conflict =
        ("Success: ", "UnschedulableAndUnresolvable: node(s) had no available volume zone");
    let useless = ("uselessLabel", "none");
    /// Name, claim, node labels, (PreFilter, Filter).
    type Case<'a> = (&'a str, Option<&'a str>, Vec<(&'a str, &'a str)>, (&'a str, &'a str));
    let cases: Vec<Case> = vec![
        ("pod without volume", None, vec![(LABEL_BETA_ZONE, "us-west1-a")], ("Skip: ", "-")),
        ("node without labels", Some("PVC_1"), vec![], ok),
        (
            "beta zone label matched",
            Some("PVC_1"),
            vec![(LABEL_BETA_ZONE, "us-west1-a"), useless],
            ok,
        ),
        (
            "beta region label matched",
            Some("PVC_2"),
            vec![(LABEL_BETA_REGION, "us-west1"), useless],
            ok,
        ),
        (
            "beta region label doesn't match",
            Some("PVC_2"),
            vec![(LABEL_BETA_REGION, "no_us-west1"), useless],
            conflict,
        ),
        (
            "beta zone label doesn't match",
            Some("PVC_1"),
            vec![(LABEL_BETA_ZONE, "no_us-west1-a"), useless],
            conflict,
        ),
        ("zone label matched", Some("PVC_Stable_1"), vec![(LABEL_ZONE, "us-west1-a"), useless], ok),
        (
            "region label matched",
            Some("PVC_Stable_2"),
            vec![(LABEL_REGION, "us-west1"), useless],
            ok,
        ),
        (
            "region label doesn't match",
            Some("PVC_Stable_2"),
            vec![(LABEL_REGION, "no_us-west1"), useless],
            conflict,
        ),
        (
            "zone label doesn't match",
            Some("PVC_Stable_1"),
            vec![(LABEL_ZONE, "no_us-west1-a"), useless],
            conflict,
        ),
        (
            "pv with zone and region, node with only zone",
            Some("PVC_Stable_3"),
            vec![(LABEL_ZONE, "us-west1-a")],
            conflict,
        ),
        (
            "pv with zone, node with beta zone",
            Some("PVC_Stable_1"),
            vec![(LABEL_BETA_ZONE, "us-west1-a")],
            conflict,
        ),
        (
            "pv with beta label, node with ga label, matched",
            Some("PVC_1"),
            vec![(LABEL_ZONE, "us-west1-a")],
            ok,
        ),
        (
            "pv with beta label, node with ga label, don't match",
            Some("PVC_1"),
            vec![(LABEL_ZONE, "us-west1-b")],
            conflict,
        ),
        (
            "missing volume",
            Some("PVC_4"),
            vec![],
            ("UnschedulableAndUnresolvable: persistentvolume \"Vol_not_exist\" not found", "-"),
        ),
        (
            "missing claim",
            Some("PVC_9"),
            vec![],
            ("UnschedulableAndUnresolvable: persistentvolumeclaim \"PVC_9\" not found", "-"),
        ),
    ];
    for (name, claim, labels, want) in cases {
        let got = run(&plugin, claim, &node(&labels));
        assert_eq!((got.0.as_str(), got.1.as_str()), want, "{name}");
    }
}

#[test]
fn multi_zone() {
    let plugin = VolumeZone::new(store(vec![
        pv("Vol_1", json!({LABEL_BETA_ZONE: "us-west1-a"})),
        pv("Vol_2", json!({LABEL_BETA_ZONE: "us-west1-b", "uselessLabel": "none"})),
        pv("Vol_3", json!({LABEL_BETA_ZONE: "us-west1-c__us-west1-a"})),
        pv("Vol_Stable_1", json!({LABEL_ZONE: "us-west1-a"})),
        pv("Vol_Stable_2", json!({LABEL_ZONE: "us-west1-c__us-west1-a"})),
        bound("PVC_1", "Vol_1"),
        bound("PVC_2", "Vol_2"),
        bound("PVC_3", "Vol_3"),
        bound("PVC_Stable_1", "Vol_Stable_1"),
        bound("PVC_Stable_2", "Vol_Stable_2"),
    ]));
    let ok = ("Success: ", "Success: ");
    let conflict =
        ("Success: ", "UnschedulableAndUnresolvable: node(s) had no available volume zone");
    let cases = [
        ("beta zone label matched", "PVC_3", LABEL_BETA_ZONE, "us-west1-a", ok),
        ("beta zone label doesn't match", "PVC_1", LABEL_BETA_ZONE, "us-west1-b", conflict),
        ("zone label matched", "PVC_Stable_2", LABEL_ZONE, "us-west1-a", ok),
        ("zone label doesn't match", "PVC_Stable_1", LABEL_ZONE, "us-west1-b", conflict),
    ];
    for (name, claim, key, value, want) in cases {
        let got = run(&plugin, Some(claim), &node(&[(key, value), ("uselessLabel", "none")]));
        assert_eq!((got.0.as_str(), got.1.as_str()), want, "{name}");
    }
}

#[test]
fn with_binding() {
    let plugin = VolumeZone::new(store(vec![
        obj_class(class("Class_Immediate", None)),
        obj_class(class("Class_Wait", Some("WaitForFirstConsumer"))),
        pv("Vol_1", json!({LABEL_BETA_ZONE: "us-west1-a"})),
        bound("PVC_1", "Vol_1"),
        obj_pvc(pvc("PVC_NoSC", "", "Class_0")),
        obj_pvc(pvc_json(json!({"metadata": {"name": "PVC_EmptySC"}}))),
        obj_pvc(pvc("PVC_WaitSC", "", "Class_Wait")),
        obj_pvc(pvc("PVC_ImmediateSC", "", "Class_Immediate")),
    ]));
    let n = node(&[(LABEL_BETA_ZONE, "us-west1-a"), ("uselessLabel", "none")]);
    let cases = [
        ("label zone failure domain matched", "PVC_1", ("Success: ", "Success: ")),
        (
            "unbound volume empty storage class",
            "PVC_EmptySC",
            (
                "UnschedulableAndUnresolvable: PersistentVolumeClaim had no pv name and storageClass name",
                "-",
            ),
        ),
        (
            "unbound volume no storage class",
            "PVC_NoSC",
            (
                "UnschedulableAndUnresolvable: storageclass.storage.k8s.io \"Class_0\" not found",
                "-",
            ),
        ),
        (
            "unbound volume immediate binding mode",
            "PVC_ImmediateSC",
            (
                "UnschedulableAndUnresolvable: VolumeBindingMode not set for StorageClass \"Class_Immediate\"",
                "-",
            ),
        ),
        ("unbound volume wait binding mode", "PVC_WaitSC", ("Skip: ", "-")),
    ];
    for (name, claim, want) in cases {
        let got = run(&plugin, Some(claim), &n);
        assert_eq!((got.0.as_str(), got.1.as_str()), want, "{name}");
    }
}

#[test]
fn hints() {
    let pod = pod_with("pod_1", vec![claim_volume("v", "PVC_1")]).info();
    let claim = |name: &str, ns: &str| {
        EventObject::Object(obj_pvc(pvc_json(json!({"metadata": {"name": name, "namespace": ns}}))))
    };
    assert_eq!(
        queue_if_pod_names_claim(&pod, None, Some(&claim("PVC_1", "default"))),
        QueueingHint::Queue
    );
    assert_eq!(
        queue_if_pod_names_claim(&pod, None, Some(&claim("PVC_2", "default"))),
        QueueingHint::Skip
    );
    assert_eq!(
        queue_if_pod_names_claim(&pod, None, Some(&claim("PVC_1", "other"))),
        QueueingHint::Skip
    );
    let sc = |mode| EventObject::Object(obj_class(class("c", mode)));
    assert_eq!(
        is_schedulable_after_storage_class_added(
            &pod,
            None,
            Some(&sc(Some("WaitForFirstConsumer")))
        ),
        QueueingHint::Queue
    );
    assert_eq!(
        is_schedulable_after_storage_class_added(&pod, None, Some(&sc(Some("Immediate")))),
        QueueingHint::Skip
    );
    let vol = |labels| EventObject::Object(pv("v", labels));
    let a = vol(json!({LABEL_ZONE: "a"}));
    assert_eq!(is_schedulable_after_pv_change(&pod, None, Some(&a)), QueueingHint::Queue, "added");
    assert_eq!(
        is_schedulable_after_pv_change(
            &pod,
            Some(&a),
            Some(&vol(json!({LABEL_ZONE: "a", "x": "y"})))
        ),
        QueueingHint::Skip
    );
    assert_eq!(
        is_schedulable_after_pv_change(&pod, Some(&a), Some(&vol(json!({LABEL_ZONE: "b"})))),
        QueueingHint::Queue
    );
}
