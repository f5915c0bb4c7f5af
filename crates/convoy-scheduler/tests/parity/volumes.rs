//! The volume scenario of the parity test: one fixed cluster (not seeded)
//! whose pods exercise the four volume plugins, run through upstream
//! kube-scheduler and Convoy on two control planes with
//! kube-controller-manager (its PV binder binds the pre-bound pairs, makes
//! the free volumes Available and completes the WaitForFirstConsumer
//! bindings both schedulers write in PreBind) and a
//! [`TestProvisioner`](convoy_testenv::TestProvisioner) each.
//!
//! Six nodes: `n0`, `n1` in zone `a`, `n2`, `n3` in `b`, `n4` in `c`, `n5`
//! without a zone. CSINodes give driver [`CSI_DRIVER`] an attach limit of
//! 1 on `n0` and `n2`, 2 on `n1`, 5 on `n4` (and 1 for the provisioner
//! of the capacity class, whose unbound claims count); `n3`'s CSINode has
//! no driver
//! and `n5` has none, and the driver's CSIDriver sets
//! `preventPodSchedulingIfMissing`, so neither takes its volumes. Pods already bound (scheduler `nobody`) use one CSI
//! volume on each of `n0`, `n1`, `n2`, and a ReadWriteOncePod claim on
//! `n1`.
//!
//! The pods to schedule, in order ([`PODS`]): bound zonal volumes (VolumeZone:
//! one zone, two zones `b__c`, a zone without nodes, where only the node
//! without zone labels is left; a region; the beta zone label against
//! nodes with the GA one), a bound volume with node affinity
//! (VolumeBinding), a bound volume whose zone and node affinity exclude
//! each other (both plugins' reasons), a new CSI volume (NodeVolumeLimits: the nodes at their
//! limit), the ReadWriteOncePod claim in use (VolumeRestrictions), a
//! missing claim, an unbound Immediate claim, a generic ephemeral volume
//! whose claim no controller creates, and WaitForFirstConsumer
//! claims: one claim with candidate volumes of several sizes on several
//! nodes, two claims of one class (the smallest fitting volume each,
//! summed per class in Score), a claim with a selector, a claim no volume
//! fits, ReadWriteMany, Block, a class named by the beta annotation, a
//! bound zonal claim beside a delayed one, a claim provisioned in the
//! class's allowed topology, claims of a
//! class whose CSI driver publishes its free storage (CSIDriver
//! `storageCapacity: true`; CSIStorageCapacity per zone: room, too little,
//! a maximum volume size, none; one claim, two claims sharing a pool, a
//! claim too large everywhere), and a zonal volume with a CSI volume
//! together. Each WaitForFirstConsumer pod has
//! its own class, so one pod's binding does not change another's
//! candidates: where the schedulers chose different nodes (a tie), the
//! pod is re-created in Convoy's cluster on upstream's node, as in the
//! generated scenarios, and its claims stay bound where Convoy chose.

use serde_json::{Value, json};

/// The CSI driver with attach limits.
pub const CSI_DRIVER: &str = "csi.parity.convoy.dev";
/// The namespace of every claim and pod.
pub const NAMESPACE: &str = "vol";
const ZONE: &str = "topology.kubernetes.io/zone";
const REGION: &str = "topology.kubernetes.io/region";
const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The nodes and their zones (`None`: no zone label).
const NODES: [(&str, Option<&str>); 6] = [
    ("n0", Some("a")),
    ("n1", Some("a")),
    ("n2", Some("b")),
    ("n3", Some("b")),
    ("n4", Some("c")),
    ("n5", None),
];

/// A pod to schedule: its name and its claims.
pub struct PodCase {
    /// The pod's name.
    pub name: &'static str,
    /// The claims its volumes name.
    pub claims: &'static [&'static str],
}

const fn case(name: &'static str, claims: &'static [&'static str]) -> PodCase {
    PodCase { name, claims }
}

/// The pods to schedule, in order.
pub const PODS: [PodCase; 25] = [
    case("zonal-a", &["zonal-a"]),
    case("zonal-bc", &["zonal-bc"]),
    case("zonal-d", &["zonal-d"]),
    case("region-r2", &["region-r2"]),
    case("beta-zone-b", &["beta-zone-b"]),
    case("affinity-n3", &["affinity-n3"]),
    case("csi-new", &["csi-new"]),
    case("mixed", &["mixed"]),
    case("rwop-second", &["rwop"]),
    case("absent", &["absent"]),
    case("immediate", &["immediate"]),
    case("ephemeral", &[]),
    case("wfc-sizes", &["wfc-sizes"]),
    case("wfc-two", &["wfc-two-small", "wfc-two-large"]),
    case("wfc-selector", &["wfc-selector"]),
    case("wfc-none", &["wfc-none"]),
    case("wfc-rwx", &["wfc-rwx"]),
    case("wfc-block", &["wfc-block"]),
    case("wfc-beta-class", &["wfc-beta-class"]),
    case("bound-and-delayed", &["zonal-b", "wfc-mixed"]),
    case("wfc-provision", &["wfc-provision"]),
    case("wfc-capacity", &["wfc-capacity"]),
    case("wfc-capacity-two", &["capacity-two-small", "capacity-two-large"]),
    case("wfc-capacity-none", &["wfc-capacity-none"]),
    case("zonal-and-csi", &["zonal-a2", "csi-new2"]),
];

/// The scenario's objects, as JSON with `apiVersion` and `kind`.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// Nodes.
    pub nodes: Vec<Value>,
    /// CSINodes.
    pub csi_nodes: Vec<Value>,
    /// StorageClasses.
    pub classes: Vec<Value>,
    /// CSIDrivers.
    pub csi_drivers: Vec<Value>,
    /// CSIStorageCapacities (in [`NAMESPACE`]).
    pub capacities: Vec<Value>,
    /// PersistentVolumes.
    pub pvs: Vec<Value>,
    /// PersistentVolumeClaims (in [`NAMESPACE`]).
    pub pvcs: Vec<Value>,
    /// Pods bound from the start.
    pub existing: Vec<Value>,
    /// The pods to schedule, in the order of [`PODS`], without
    /// `schedulerName`.
    pub pods: Vec<Value>,
}

fn node(name: &str, zone: Option<&str>) -> Value {
    let mut labels = json!({ HOSTNAME: name });
    if let Some(z) = zone {
        labels[ZONE] = json!(z);
        labels[REGION] = json!(if z == "c" { "r2" } else { "r1" });
    }
    let allocatable = json!({ "cpu": "4", "memory": "8Gi", "pods": "110" });
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": labels },
        "status": {
            "allocatable": allocatable, "capacity": allocatable,
            "conditions": [{ "type": "Ready", "status": "True" }],
        },
    })
}

fn csi_node(name: &str, limit: Option<i64>) -> Value {
    let drivers: Vec<Value> = limit
        .map(|count| {
            json!({ "name": CSI_DRIVER, "nodeID": name, "allocatable": { "count": count } })
        })
        .into_iter()
        .collect();
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": { "name": name }, "spec": { "drivers": drivers },
    })
}

fn class(name: &str, provisioner: &str, mode: &str) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": { "name": name }, "provisioner": provisioner, "volumeBindingMode": mode,
    })
}

/// A PersistentVolume: `source` is its volume source (`hostPath`, `csi`,
/// `local`), `class` its StorageClass (`""`: none); `claim` pre-binds it.
fn pv(name: &str, size: &str, class: &str, source: Value, claim: Option<&str>) -> Value {
    let mut spec = json!({
        "capacity": { "storage": size },
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": class,
        "persistentVolumeReclaimPolicy": "Retain",
    });
    let (key, value) = source.as_object().and_then(|o| o.iter().next()).expect("one source");
    spec[key] = value.clone();
    if let Some(c) = claim {
        spec["claimRef"] = json!({ "namespace": NAMESPACE, "name": c });
    }
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": { "name": name }, "spec": spec,
    })
}

fn host_path(name: &str) -> Value {
    json!({ "hostPath": { "path": format!("/mnt/{name}") } })
}

fn csi(handle: &str) -> Value {
    json!({ "csi": { "driver": CSI_DRIVER, "volumeHandle": handle } })
}

fn with_labels(mut obj: Value, labels: Value) -> Value {
    obj["metadata"]["labels"] = labels;
    obj
}

fn with_affinity(mut obj: Value, key: &str, values: &[&str]) -> Value {
    obj["spec"]["nodeAffinity"] = json!({ "required": { "nodeSelectorTerms": [
        { "matchExpressions": [{ "key": key, "operator": "In", "values": values }] }] } });
    obj
}

/// A local volume of `class` on `node`.
fn local(name: &str, size: &str, class: &str, node: &str) -> Value {
    let source = json!({ "local": { "path": format!("/mnt/{name}") } });
    with_affinity(pv(name, size, class, source, None), HOSTNAME, &[node])
}

fn pvc(name: &str, size: &str, class: &str, volume: Option<&str>) -> Value {
    let mut spec = json!({
        "storageClassName": class,
        "accessModes": ["ReadWriteOnce"],
        "resources": { "requests": { "storage": size } },
    });
    if let Some(v) = volume {
        spec["volumeName"] = json!(v);
    }
    json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "name": name, "namespace": NAMESPACE }, "spec": spec,
    })
}

/// A claim of class `""` and its volume, pre-bound to each other.
fn bound(name: &str, source: Value) -> (Value, Value) {
    (
        pv(&format!("pv-{name}"), "1Gi", "", source, Some(name)),
        pvc(name, "1Gi", "", Some(&format!("pv-{name}"))),
    )
}

/// A pod using `claims`.
pub fn pod(name: &str, claims: &[&str]) -> Value {
    let volumes: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({ "name": format!("v{i}"), "persistentVolumeClaim": { "claimName": c } }))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": {
            "containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": { "requests": { "cpu": "100m", "memory": "128Mi" } },
            }],
            "volumes": volumes,
        },
    })
}

/// The scenario.
pub fn objects() -> Objects {
    let mut o = Objects {
        nodes: NODES.iter().map(|(n, z)| node(n, *z)).collect(),
        csi_nodes: vec![
            csi_node("n0", Some(1)),
            csi_node("n1", Some(2)),
            csi_node("n2", Some(1)),
            csi_node("n3", None),
            {
                // n4 also takes one volume of the capacity-publishing
                // driver: a pod's unbound claims of its class count
                // against it (NodeVolumeLimits).
                let mut n4 = csi_node("n4", Some(5));
                n4["spec"]["drivers"].as_array_mut().expect("drivers").push(json!({
                    "name": convoy_testenv::TEST_CSI_PROVISIONER, "nodeID": "n4",
                    "allocatable": { "count": 1 },
                }));
                n4
            },
        ],
        ..Objects::default()
    };
    // Pods with a volume of the driver may only go where the node's
    // CSINode lists it (NodeVolumeLimits, VolumeLimitScaling): not n3 or n5.
    o.csi_drivers.push(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": { "name": CSI_DRIVER }, "spec": { "preventPodSchedulingIfMissing": true },
    }));
    let mut add = |(v, c): (Value, Value)| {
        o.pvs.push(v);
        o.pvcs.push(c);
    };

    // Bound claims. VolumeZone reads the volume's zone label.
    let zonal = |name: &str, zone: &str| {
        let (v, c) = bound(name, host_path(name));
        (with_labels(v, json!({ ZONE: zone })), c)
    };
    add(zonal("zonal-a", "a"));
    add(zonal("zonal-a2", "a"));
    add(zonal("zonal-bc", "b__c"));
    add(zonal("zonal-d", "d"));
    add(zonal("zonal-b", "b"));
    // Region r2 (zone c's); the beta zone label, which nodes only have
    // in its GA form.
    let (v, c) = bound("region-r2", host_path("region-r2"));
    add((with_labels(v, json!({ REGION: "r2" })), c));
    let (v, c) = bound("beta-zone-b", host_path("beta-zone-b"));
    add((with_labels(v, json!({ BETA_ZONE: "b" })), c));
    let (v, c) = bound("affinity-n3", host_path("affinity-n3"));
    add((with_affinity(v, HOSTNAME, &["n3"]), c));
    // Zone a, but node affinity on n2 and n3 (zone b): no node passes
    // both; which reason a node gets follows the filters' order.
    let (v, c) = zonal("mixed", "a");
    add((with_affinity(v, HOSTNAME, &["n2", "n3"]), c));
    for name in ["csi-0", "csi-1", "csi-2", "csi-new", "csi-new2"] {
        add(bound(name, csi(name)));
    }
    let (mut v, mut c) = bound("rwop", host_path("rwop"));
    v["spec"]["accessModes"] = json!(["ReadWriteOncePod"]);
    c["spec"]["accessModes"] = json!(["ReadWriteOncePod"]);
    add((v, c));

    // Unbound claims.
    o.classes.push(class("immediate", "parity.convoy.dev/nobody", "Immediate"));
    o.pvcs.push(pvc("immediate", "1Gi", "immediate", None));
    let wfc = |name: &str| class(name, NO_PROVISIONER, "WaitForFirstConsumer");

    // One claim of 3Gi; volumes of several sizes: n0's is too small, n3
    // has two (the smaller is chosen), n5 none.
    o.classes.push(wfc("wfc-sizes"));
    o.pvcs.push(pvc("wfc-sizes", "3Gi", "wfc-sizes", None));
    for (name, size, node) in [
        ("sizes-n0", "2Gi", "n0"),
        ("sizes-n1", "4Gi", "n1"),
        ("sizes-n2", "10Gi", "n2"),
        ("sizes-n3-a", "3Gi", "n3"),
        ("sizes-n3-b", "8Gi", "n3"),
        ("sizes-n4", "5Gi", "n4"),
    ] {
        o.pvs.push(local(name, size, "wfc-sizes", node));
    }

    // Two claims of one class (1Gi and 2Gi): a node needs a volume for
    // each; n1 has only one.
    o.classes.push(wfc("wfc-two"));
    o.pvcs.push(pvc("wfc-two-small", "1Gi", "wfc-two", None));
    o.pvcs.push(pvc("wfc-two-large", "2Gi", "wfc-two", None));
    for (name, size, node) in [
        ("two-n0-a", "1Gi", "n0"),
        ("two-n0-b", "2Gi", "n0"),
        ("two-n1", "4Gi", "n1"),
        ("two-n2-a", "2Gi", "n2"),
        ("two-n2-b", "5Gi", "n2"),
        ("two-n4-a", "3Gi", "n4"),
        ("two-n4-b", "5Gi", "n4"),
    ] {
        o.pvs.push(local(name, size, "wfc-two", node));
    }

    // A claim selecting `tier: fast`.
    o.classes.push(wfc("wfc-selector"));
    let mut c = pvc("wfc-selector", "1Gi", "wfc-selector", None);
    c["spec"]["selector"] = json!({ "matchLabels": { "tier": "fast" } });
    o.pvcs.push(c);
    for (name, size, node, tier) in [
        ("selector-n0", "1Gi", "n0", "slow"),
        ("selector-n2", "2Gi", "n2", "fast"),
        ("selector-n4", "1536Mi", "n4", "fast"),
    ] {
        o.pvs.push(with_labels(local(name, size, "wfc-selector", node), json!({ "tier": tier })));
    }

    // ReadWriteMany: n0's volume is ReadWriteOnce only.
    o.classes.push(wfc("wfc-rwx"));
    let mut c = pvc("wfc-rwx", "1Gi", "wfc-rwx", None);
    c["spec"]["accessModes"] = json!(["ReadWriteMany"]);
    o.pvcs.push(c);
    o.pvs.push(local("rwx-n0", "1Gi", "wfc-rwx", "n0"));
    let mut v = local("rwx-n2", "2Gi", "wfc-rwx", "n2");
    v["spec"]["accessModes"] = json!(["ReadWriteOnce", "ReadWriteMany"]);
    o.pvs.push(v);

    // A Block claim: n0's volume is a filesystem.
    o.classes.push(wfc("wfc-block"));
    let mut c = pvc("wfc-block", "1Gi", "wfc-block", None);
    c["spec"]["volumeMode"] = json!("Block");
    o.pvcs.push(c);
    o.pvs.push(local("block-n0", "1Gi", "wfc-block", "n0"));
    let mut v = local("block-n4", "4Gi", "wfc-block", "n4");
    v["spec"]["volumeMode"] = json!("Block");
    o.pvs.push(v);

    // The class named by the beta annotation, not spec.storageClassName.
    o.classes.push(wfc("wfc-beta-class"));
    let mut c = pvc("wfc-beta-class", "1Gi", "", None);
    c["spec"].as_object_mut().expect("a spec").remove("storageClassName");
    c["metadata"]["annotations"] =
        json!({ "volume.beta.kubernetes.io/storage-class": "wfc-beta-class" });
    o.pvcs.push(c);
    o.pvs.push(local("beta-class-n1", "1Gi", "wfc-beta-class", "n1"));
    o.pvs.push(local("beta-class-n4", "2Gi", "wfc-beta-class", "n4"));

    // With the bound zone-b claim `zonal-b`: only n3's volume is in b.
    o.classes.push(wfc("wfc-mixed"));
    o.pvcs.push(pvc("wfc-mixed", "1Gi", "wfc-mixed", None));
    o.pvs.push(local("mixed-n1", "1Gi", "wfc-mixed", "n1"));
    o.pvs.push(local("mixed-n3", "2Gi", "wfc-mixed", "n3"));

    // A claim larger than every volume of its class.
    o.classes.push(wfc("wfc-none"));
    o.pvcs.push(pvc("wfc-none", "50Gi", "wfc-none", None));
    o.pvs.push(local("none-n0", "10Gi", "wfc-none", "n0"));

    // Provisioned by the test provisioner, in zones b and c only.
    let mut provision =
        class("wfc-provision", convoy_testenv::TEST_PROVISIONER, "WaitForFirstConsumer");
    provision["allowedTopologies"] =
        json!([{ "matchLabelExpressions": [{ "key": ZONE, "values": ["b", "c"] }] }]);
    o.classes.push(provision);
    o.pvcs.push(pvc("wfc-provision", "1Gi", "wfc-provision", None));

    // Provisioned by a driver that publishes its free storage: 10Gi in
    // zone a, 2Gi in b, 100Gi in c in volumes of at most 4Gi, nothing
    // for n5.
    let driver = convoy_testenv::TEST_CSI_PROVISIONER;
    o.csi_drivers.push(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": { "name": driver }, "spec": { "storageCapacity": true },
    }));
    o.classes.push(class("wfc-capacity", driver, "WaitForFirstConsumer"));
    for (zone, capacity, max) in
        [("a", "10Gi", None), ("b", "2Gi", None), ("c", "100Gi", Some("4Gi"))]
    {
        let mut c = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
            "metadata": { "name": format!("capacity-{zone}"), "namespace": NAMESPACE },
            "storageClassName": "wfc-capacity",
            "nodeTopology": { "matchLabels": { ZONE: zone } },
            "capacity": capacity,
        });
        if let Some(m) = max {
            c["maximumVolumeSize"] = json!(m);
        }
        o.capacities.push(c);
    }
    o.pvcs.push(pvc("wfc-capacity", "3Gi", "wfc-capacity", None));
    o.pvcs.push(pvc("capacity-two-small", "1Gi", "wfc-capacity", None));
    o.pvcs.push(pvc("capacity-two-large", "2Gi", "wfc-capacity", None));
    o.pvcs.push(pvc("wfc-capacity-none", "20Gi", "wfc-capacity", None));

    for (name, node, claim) in [
        ("csi-user-0", "n0", "csi-0"),
        ("csi-user-1", "n1", "csi-1"),
        ("csi-user-2", "n2", "csi-2"),
        ("rwop-user", "n1", "rwop"),
    ] {
        let mut p = pod(name, &[claim]);
        p["spec"]["nodeName"] = json!(node);
        p["spec"]["schedulerName"] = json!("nobody");
        o.existing.push(p);
    }
    o.pods = PODS.iter().map(|c| pod(c.name, c.claims)).collect();
    // A generic ephemeral volume: no ephemeral volume controller runs in
    // testenv, so its claim `ephemeral-scratch` never appears.
    let eph = o.pods.iter_mut().find(|p| p["metadata"]["name"] == "ephemeral").expect("listed");
    eph["spec"]["volumes"] = json!([{ "name": "scratch", "ephemeral": { "volumeClaimTemplate": {
        "spec": { "accessModes": ["ReadWriteOnce"], "storageClassName": "wfc-provision",
                  "resources": { "requests": { "storage": "1Gi" } } } } } }]);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_claim_a_pod_names_exists_but_the_absent_one() {
        let o = objects();
        let claims: Vec<&str> =
            o.pvcs.iter().map(|c| c["metadata"]["name"].as_str().unwrap()).collect();
        for case in PODS {
            for c in case.claims {
                assert_eq!(claims.contains(c), *c != "absent", "{c}");
            }
        }
        let pvs: Vec<&str> =
            o.pvs.iter().map(|v| v["metadata"]["name"].as_str().unwrap()).collect();
        for c in &o.pvcs {
            if let Some(v) = c["spec"]["volumeName"].as_str() {
                assert!(pvs.contains(&v), "{v}");
            }
        }
    }
}
