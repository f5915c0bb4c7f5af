//! Ported from upstream `csi_test.go` (v1.37.2), the CSI cases (in-tree
//! migration and VolumeAttachment cases are not implemented yet).

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_api::{ClusterObject, NodeList};
use serde_json::json;

use super::*;
use crate::helper::testing::pod_obj;
use crate::helper::volumes::testing::*;

const EBS: &str = "ebs.csi.aws.com";
const GCE: &str = "pd.csi.storage.gke.io";
const SC: &str = "csi-sc";
const NODE: &str = "node-for-max-pd-test-1";

/// Upstream `getFakeCSIPVLister` / `getFakeCSIPVCLister`: for each driver,
/// claims `csi-<driver>-<j>` bound to PVs with that handle; plus
/// `csi-4` (unbound, class `csi-sc`), `csi-5` (no class) and `csi-6`
/// (volume missing, class `csi-sc`).
fn objects(drivers: &[&str], provisioner: &str) -> Vec<ClusterObject> {
    let mut out = Vec::new();
    for d in drivers {
        for j in 0..4 {
            let h = format!("csi-{d}-{j}");
            out.push(obj_pv(pv_json(json!({"metadata": {"name": h},
                "spec": {"csi": {"driver": d, "volumeHandle": h}}}))));
            out.push(obj_pvc(pvc_json(
                json!({"metadata": {"name": h}, "spec": {"volumeName": h}}),
            )));
        }
    }
    out.push(obj_pvc(pvc("csi-4", "", SC)));
    out.push(obj_pvc(pvc_json(json!({"metadata": {"name": "csi-5"}, "spec": {}}))));
    out.push(obj_pvc(pvc_json(json!({"metadata": {"name": "csi-6"},
        "spec": {"storageClassName": SC, "volumeName": "missing-in-action"}}))));
    let mut c = class(SC, Some("Immediate"));
    c.provisioner = provisioner.to_string();
    out.push(obj_class(c));
    out
}

/// A CSINode listing the drivers, with `allocatable.count: limit` or none.
fn csi_node_with(drivers: &[&str], limit: Option<i32>) -> ClusterObject {
    let drivers: Vec<_> = drivers
        .iter()
        .map(|d| match limit {
            Some(l) => json!({"name": d, "nodeID": NODE, "allocatable": {"count": l}}),
            None => json!({"name": d, "nodeID": NODE}),
        })
        .collect();
    obj_csi_node(csi_node(json!({"metadata": {"name": NODE}, "spec": {"drivers": drivers}})))
}

fn claims_pod(name: &str, claims: &[&str]) -> PodBuilder {
    pod_with(
        name,
        claims.iter().enumerate().map(|(i, c)| claim_volume(&format!("v{i}"), c)).collect(),
    )
}

/// The ephemeral pod `test/abc` (UID 12345) with volume `xyz`, and its
/// claim `abc-xyz` (owned by the pod unless `owned` is false).
fn ephemeral_pod() -> PodBuilder {
    pod_with("abc", vec![ephemeral_volume("xyz")]).namespace("test").uid("12345")
}

fn ephemeral_claim(pod: &str, uid: &str, volume: &str, owned: bool) -> ClusterObject {
    let mut v = json!({"metadata": {"name": format!("{pod}-{volume}"), "namespace": "test"},
        "spec": {"storageClassName": SC}});
    if owned {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
            "name": pod, "uid": uid, "controller": true}]);
    }
    obj_pvc(pvc_json(v))
}

struct Case {
    name: &'static str,
    new_pod: PodBuilder,
    existing: Vec<PodBuilder>,
    drivers: &'static [&'static str],
    limit: Option<i32>,
    extra: Vec<ClusterObject>,
    want: &'static str,
}

fn run(c: Case) {
    let mut objs = objects(&[EBS, GCE], EBS);
    objs.push(csi_node_with(c.drivers, c.limit));
    objs.extend(c.extra);
    let plugin = NodeVolumeLimits::new(store(objs));
    let mut node = NodeBuilder::new(NODE).info();
    for p in c.existing {
        node.add_pod(p.node(NODE).info());
    }
    let pod = c.new_pod.info();
    let mut state = CycleState::new();
    let (_, pre) = plugin.pre_filter(&mut state, &pod, &NodeList::default());
    let got = if pre.is_skip() {
        "skip".to_string()
    } else {
        let s = plugin.filter(&state, &pod, &node);
        format!("{:?}: {}", s.code(), s.message())
    };
    assert_eq!(got, c.want, "{}", c.name);
}

#[test]
fn csi_limits() {
    let running = || claims_pod("running", &["csi-ebs.csi.aws.com-3"]);
    let ebs_one = || claims_pod("ebs-one", &["csi-ebs.csi.aws.com-0"]);
    let ebs_two = || claims_pod("ebs-two", &["csi-ebs.csi.aws.com-1", "csi-ebs.csi.aws.com-2"]);
    let gce_two =
        || claims_pod("gce-two", &["csi-pd.csi.storage.gke.io-1", "csi-pd.csi.storage.gke.io-2"]);
    let ok = "Success: ";
    let exceeded = "Unschedulable: node(s) exceed max volume count";
    let cases = vec![
        Case {
            name: "fits when node volume limit >= new pods CSI volume",
            new_pod: ebs_one(),
            existing: vec![running(), ebs_two()],
            drivers: &[EBS],
            limit: Some(4),
            extra: vec![],
            want: ok,
        },
        Case {
            name: "doesn't when node volume limit <= pods CSI volume",
            new_pod: ebs_one(),
            existing: vec![running(), ebs_two()],
            drivers: &[EBS],
            limit: Some(2),
            extra: vec![],
            want: exceeded,
        },
        Case {
            name: "should when driver does not support volume limits",
            new_pod: ebs_one(),
            existing: vec![running(), ebs_two()],
            drivers: &[EBS],
            limit: None,
            extra: vec![],
            want: ok,
        },
        Case {
            name: "count pending PVCs towards volume limit <= pods CSI volume",
            new_pod: ebs_one(),
            existing: vec![claims_pod("pending", &["csi-4"]), ebs_two()],
            drivers: &[EBS],
            limit: Some(2),
            extra: vec![],
            want: exceeded,
        },
        Case {
            name: "count multiple pending pvcs towards volume limit >= pods CSI volume",
            new_pod: ebs_one(),
            existing: vec![
                claims_pod("pending", &["csi-4"]),
                claims_pod("pending2", &["csi-4"]),
                ebs_two(),
            ],
            drivers: &[EBS],
            limit: Some(4),
            extra: vec![],
            want: ok,
        },
        Case {
            name: "should count PVCs with invalid PV name but valid SC",
            new_pod: ebs_one(),
            existing: vec![claims_pod("missing-pv", &["csi-6"]), ebs_two()],
            drivers: &[EBS],
            limit: Some(2),
            extra: vec![],
            want: exceeded,
        },
        Case {
            name: "don't count pvcs with missing SC towards volume limit",
            new_pod: ebs_one(),
            existing: vec![running(), claims_pod("no-sc", &["csi-5"])],
            drivers: &[EBS],
            limit: Some(2),
            extra: vec![],
            want: ok,
        },
        Case {
            name: "count pvcs with the same type towards volume limit",
            new_pod: ebs_one(),
            existing: vec![gce_two(), ebs_two()],
            drivers: &[EBS, GCE],
            limit: Some(2),
            extra: vec![],
            want: exceeded,
        },
        Case {
            name: "don't count pvcs with different type towards volume limit",
            new_pod: gce_two(),
            existing: vec![ebs_two(), running()],
            drivers: &[EBS, GCE],
            limit: Some(2),
            extra: vec![],
            want: ok,
        },
        Case {
            name: "ephemeral volume missing",
            new_pod: ephemeral_pod(),
            existing: vec![],
            drivers: &[EBS],
            limit: None,
            extra: vec![],
            want: "UnschedulableAndUnresolvable: looking up PVC test/abc-xyz: \
                   persistentvolumeclaim \"abc-xyz\" not found",
        },
        Case {
            name: "ephemeral volume not owned",
            new_pod: ephemeral_pod(),
            existing: vec![],
            drivers: &[EBS],
            limit: None,
            extra: vec![ephemeral_claim("abc", "12345", "xyz", false)],
            want: "Error: PVC test/abc-xyz was not created for pod test/abc (pod is not owner)",
        },
        Case {
            name: "ephemeral volume unbound",
            new_pod: ephemeral_pod(),
            existing: vec![],
            drivers: &[EBS],
            limit: None,
            extra: vec![ephemeral_claim("abc", "12345", "xyz", true)],
            want: ok,
        },
        Case {
            name: "ephemeral doesn't when node volume limit <= pods CSI volume",
            new_pod: ephemeral_pod(),
            existing: vec![running(), ebs_two()],
            drivers: &[EBS],
            limit: Some(2),
            extra: vec![ephemeral_claim("abc", "12345", "xyz", true)],
            want: exceeded,
        },
        Case {
            name: "ephemeral doesn't when node volume limit <= pods ephemeral CSI volume",
            new_pod: ebs_one(),
            existing: vec![
                running(),
                pod_with("abc", vec![ephemeral_volume("x"), ephemeral_volume("y")])
                    .namespace("test")
                    .uid("12345II"),
            ],
            drivers: &[EBS],
            limit: Some(2),
            extra: vec![
                ephemeral_claim("abc", "12345II", "x", true),
                ephemeral_claim("abc", "12345II", "y", true),
            ],
            want: exceeded,
        },
        Case {
            name: "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume",
            new_pod: ebs_one(),
            existing: vec![running(), ephemeral_pod(), ebs_two()],
            drivers: &[EBS],
            limit: Some(3),
            extra: vec![ephemeral_claim("abc", "12345", "xyz", true)],
            want: exceeded,
        },
        Case {
            name: "persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume",
            new_pod: ebs_one(),
            existing: vec![running(), ephemeral_pod(), ebs_two()],
            drivers: &[EBS],
            limit: Some(5),
            extra: vec![ephemeral_claim("abc", "12345", "xyz", true)],
            want: ok,
        },
        Case {
            name: "skip Filter when the pod only uses secrets and configmaps",
            new_pod: pod_with(
                "cm",
                vec![
                    volume(json!({"name": "a", "configMap": {"name": "c"}})),
                    volume(json!({"name": "b", "secret": {"secretName": "s"}})),
                ],
            ),
            existing: vec![],
            drivers: &[EBS],
            limit: Some(2),
            extra: vec![],
            want: "skip",
        },
    ];
    for c in cases {
        run(c);
    }
}

/// The plugin with an EBS limit of `limit` on [`NODE`], that node holding
/// [`ephemeral_pod`] (its claim owned by it or not), and a pod with one
/// EBS claim to place.
fn ephemeral_pod_on_the_node(
    limit: i32,
    owned: bool,
) -> (NodeVolumeLimits, NodeInfo, std::sync::Arc<PodInfo>) {
    let mut objs = objects(&[EBS], EBS);
    objs.push(csi_node_with(&[EBS], Some(limit)));
    objs.push(ephemeral_claim("abc", "12345", "xyz", owned));
    let plugin = NodeVolumeLimits::new(store(objs));
    let mut node = NodeBuilder::new(NODE).info();
    node.add_pod(ephemeral_pod().node(NODE).info());
    (plugin, node, claims_pod("p", &["csi-ebs.csi.aws.com-0"]).info())
}

/// Far under the limit, a node is still counted exactly when a pod on it
/// has an ephemeral volume: a claim that pod does not own fails the node
/// with upstream's error, as the full count would.
#[test]
fn a_foreign_ephemeral_claim_on_the_node_fails_it_under_the_limit() {
    let (plugin, node, pod) = ephemeral_pod_on_the_node(39, false);
    let mut state = CycleState::new();
    plugin.pre_filter(&mut state, &pod, &NodeList::default());
    let s = plugin.filter(&state, &pod, &node);
    assert_eq!(
        format!("{:?}: {}", s.code(), s.message()),
        "Error: PVC test/abc-xyz was not created for pod test/abc (pod is not owner)"
    );
    // Without that pod, the bound alone passes the node.
    let mut node = NodeBuilder::new(NODE).info();
    node.add_pod(claims_pod("q", &["csi-ebs.csi.aws.com-1"]).node(NODE).info());
    assert!(plugin.filter(&state, &pod, &node).is_success());
}

/// An ephemeral volume of a pod on the node counts against the limit.
#[test]
fn existing_ephemeral_pods_keep_their_claims() {
    let (plugin, node, pod) = ephemeral_pod_on_the_node(1, true);
    assert_eq!(
        plugin.filter(&CycleState::new(), &pod, &node).message(),
        ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED
    );
}

#[test]
fn hints() {
    let pod = claims_pod("p", &["claim"]).info();
    let deleted = |p: PodBuilder| Some(pod_obj(p.build()));
    assert_eq!(
        is_schedulable_after_assigned_pod_deleted(
            &pod,
            deleted(claims_pod("e", &["x"]).node("n")).as_ref(),
            None
        ),
        QueueingHint::Queue
    );
    assert_eq!(
        is_schedulable_after_assigned_pod_deleted(
            &pod,
            deleted(PodBuilder::new("e").node("n")).as_ref(),
            None
        ),
        QueueingHint::Skip
    );
    assert_eq!(
        is_schedulable_after_assigned_pod_deleted(
            &pod,
            deleted(claims_pod("e", &["x"])).as_ref(),
            None
        ),
        QueueingHint::Skip,
        "not scheduled"
    );
    let added = |name: &str, ns: &str| {
        Some(EventObject::Object(obj_pvc(pvc_json(
            json!({"metadata": {"name": name, "namespace": ns}}),
        ))))
    };
    assert_eq!(
        queue_if_pod_uses_claim(&pod, None, added("claim", "default").as_ref()),
        QueueingHint::Queue
    );
    assert_eq!(
        queue_if_pod_uses_claim(&pod, None, added("claim", "o").as_ref()),
        QueueingHint::Skip
    );
    let eph = ephemeral_pod().info();
    assert_eq!(
        queue_if_pod_uses_claim(&eph, None, added("abc-xyz", "test").as_ref()),
        QueueingHint::Queue
    );
    let node = |limit| Some(EventObject::Object(csi_node_with(&[EBS], limit)));
    assert_eq!(
        is_schedulable_after_csi_node_updated(&pod, node(Some(1)).as_ref(), node(Some(2)).as_ref()),
        QueueingHint::Queue
    );
    assert_eq!(
        is_schedulable_after_csi_node_updated(&pod, node(Some(2)).as_ref(), node(Some(2)).as_ref()),
        QueueingHint::Skip
    );
    assert_eq!(
        is_schedulable_after_csi_node_updated(&pod, node(None).as_ref(), node(Some(1)).as_ref()),
        QueueingHint::Queue
    );
}

/// Upstream `TestVolumeLimitScalingGate` (the gate on, as by default in
/// v1.37): a CSIDriver with `preventPodSchedulingIfMissing` keeps the pod
/// off a node whose CSINode does not list the driver.
#[test]
fn prevent_pod_scheduling_if_missing() {
    let driver = |prevent: Option<bool>| {
        let mut spec = json!({});
        if let Some(p) = prevent {
            spec["preventPodSchedulingIfMissing"] = json!(p);
        }
        ClusterObject::CSIDriver(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": EBS}, "spec": spec})).unwrap(),
        ))
    };
    let missing = "Unschedulable: ebs.csi.aws.com CSI driver is not installed on the node";
    /// Name, the CSIDriver's `preventPodSchedulingIfMissing` (outer `None`:
    /// no CSIDriver), the CSINode's drivers and limit, the verdict.
    type Gate<'a> = (&'a str, Option<Option<bool>>, &'a [&'a str], Option<i32>, &'a str);
    let cases: [Gate; 5] = [
        ("CSIDriver without the field", Some(None), &[], None, "Success: "),
        ("not installed, prevented", Some(Some(true)), &[], None, missing),
        ("explicitly allowed", Some(Some(false)), &[], None, "Success: "),
        ("installed within its limit", Some(Some(true)), &[EBS], Some(2), "Success: "),
        ("no CSIDriver object", None, &[], None, "Success: "),
    ];
    for (name, d, drivers, limit, want) in cases {
        run(Case {
            name,
            new_pod: claims_pod("p", &["csi-ebs.csi.aws.com-0"]),
            existing: vec![],
            drivers,
            limit,
            extra: d.map(driver).into_iter().collect(),
            want,
        });
    }
}

/// In-tree PVs count against their CSI driver's limit when the node's
/// CSINode lists their plugin as migrated (upstream translates them to CSI
/// first), once per disk; without migration they are not counted.
#[test]
fn migrated_in_tree_volumes_count_against_the_csi_limit() {
    let ebs_pv = |name: &str, id: &str| {
        obj_pv(pv_json(json!({"metadata": {"name": name},
            "spec": {"awsElasticBlockStore": {"volumeID": id}}})))
    };
    let claim = |name: &str| {
        obj_pvc(pvc_json(json!({"metadata": {"name": name}, "spec": {"volumeName": name}})))
    };
    let check = |migrated: bool, existing_id: &str| {
        let annotations = if migrated {
            json!({"storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs"})
        } else {
            json!({})
        };
        let objs = vec![
            ebs_pv("a", existing_id),
            ebs_pv("b", "vol-b"),
            claim("a"),
            claim("b"),
            obj_csi_node(csi_node(json!({
                "metadata": {"name": NODE, "annotations": annotations},
                "spec": {"drivers": [{"name": EBS, "nodeID": NODE, "allocatable": {"count": 1}}]}
            }))),
        ];
        let plugin = NodeVolumeLimits::new(store(objs));
        let mut node = NodeBuilder::new(NODE).info();
        node.add_pod(claims_pod("running", &["a"]).node(NODE).info());
        let pod = claims_pod("new", &["b"]).info();
        let mut state = CycleState::new();
        let (_, pre) = plugin.pre_filter(&mut state, &pod, &NodeList::default());
        assert!(!pre.is_skip());
        let s = plugin.filter(&state, &pod, &node);
        format!("{:?}: {}", s.code(), s.message())
    };
    let exceeded = "Unschedulable: node(s) exceed max volume count";
    assert_eq!(check(true, "vol-a"), exceeded);
    assert_eq!(check(true, "aws://us-east-1a/vol-b"), "Success: ", "the same disk counts once");
    assert_eq!(check(false, "vol-a"), "Success: ", "not migrated: not counted");
}
