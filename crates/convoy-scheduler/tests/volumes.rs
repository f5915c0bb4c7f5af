//! Volumes on the embedded cluster, loaded from YAML as `simulate` loads
//! them: bound claims follow their PersistentVolume's node affinity and
//! zone; claims that are missing or unbound with an immediate class keep
//! their pods pending with upstream's message; claims with a
//! WaitForFirstConsumer class are bound on the pod's node (a matching
//! volume, or one provisioned there), as the PV controller and a
//! provisioner complete the scheduler's choice; a class whose CSI driver
//! publishes CSIStorageCapacity provisions only where a pool has room.

use convoy_embedded::parse_objects;
use convoy_scheduler::simulate::{Report, simulate};

const CLUSTER: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n0, labels: {kubernetes.io/hostname: n0, topology.kubernetes.io/zone: a}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1, topology.kubernetes.io/zone: b}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {kubernetes.io/hostname: n2, topology.kubernetes.io/zone: b}}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: standard}
provisioner: csi.example.com
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-n1}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: {path: /mnt/disk}
  claimRef: {namespace: default, name: bound}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n1]}]
status: {phase: Bound}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-n2}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: local
  local: {path: /mnt/disk}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n2]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: bound
  annotations: {pv.kubernetes.io/bind-completed: "yes"}
spec: {volumeName: local-n1, storageClassName: local, accessModes: [ReadWriteOnce]}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: zonal, labels: {topology.kubernetes.io/zone: b}}
spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], storageClassName: standard,
       csi: {driver: csi.example.com, volumeHandle: z}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: zonal
  annotations: {pv.kubernetes.io/bind-completed: "yes"}
spec: {volumeName: zonal, storageClassName: standard}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: waiting}
spec: {storageClassName: local}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: immediate}
spec: {storageClassName: standard}
"#;

fn pod(name: &str, claim: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  schedulerName: convoy-scheduler\n  containers: \
         [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]\n  volumes: [{{name: data, \
         persistentVolumeClaim: {{claimName: {claim}}}}}]\n"
    )
}

async fn run(yaml: &str) -> Report {
    let objects = parse_objects(yaml, "volumes.yaml").unwrap();
    let config = convoy_scheduler::load_config(None).unwrap();
    simulate(config, objects, false).await.unwrap()
}

fn outcome(r: &Report, name: &str) -> (Option<String>, String) {
    let p =
        r.pods.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name}: {}", r.to_text()));
    (p.node.clone(), p.reason.clone().unwrap_or_default())
}

#[tokio::test]
async fn claims_place_or_hold_pods_as_upstream() {
    let mut yaml = CLUSTER.to_string();
    for (name, claim) in [
        ("on-local", "bound"),
        ("on-zone", "zonal"),
        ("missing", "nope"),
        ("unbound-immediate", "immediate"),
        ("unbound-wfc", "waiting"),
    ] {
        yaml += &pod(name, claim);
    }
    let r = run(&yaml).await;
    assert_eq!(outcome(&r, "on-local").0.as_deref(), Some("n1"), "the PV's node affinity");
    let zone = outcome(&r, "on-zone").0;
    assert!(matches!(zone.as_deref(), Some("n1" | "n2")), "the PV's zone: {zone:?}");
    let pending = |name| outcome(&r, name);
    assert_eq!(pending("missing").0, None);
    assert!(
        pending("missing")
            .1
            .starts_with("0/3 nodes are available: persistentvolumeclaim \"nope\" not found."),
        "{}",
        pending("missing").1
    );
    assert!(
        pending("unbound-immediate").1.starts_with(
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        ),
        "{}",
        pending("unbound-immediate").1
    );
    assert_eq!(
        outcome(&r, "unbound-wfc").0.as_deref(),
        Some("n2"),
        "the only local volume left is on n2"
    );
    assert_eq!(r.summary.bound, 3);
}

/// A pod waiting for its claim is retried when the claim appears (the
/// PersistentVolumeClaim event and the volume plugins' hints), not at the
/// periodic flush.
#[tokio::test]
async fn a_claim_created_later_releases_the_pod() {
    use std::sync::Arc;

    use convoy_api::{ClusterObject, FakeClock};
    use convoy_embedded::{EmbeddedBinder, EmbeddedCluster};
    use convoy_scheduler::decision::LogSink;
    use convoy_scheduler::{Scheduler, SchedulerOptions};
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

    let yaml = format!(
        "{}{}",
        &CLUSTER[..CLUSTER.find("---\napiVersion: storage").unwrap()],
        pod("p", "late")
    );
    let (cluster, mut updates) = EmbeddedCluster::new(parse_objects(&yaml, "late.yaml").unwrap());
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
    scheduler.run_until_idle(&mut updates, &clock).await;
    assert_eq!(cluster.bound_count(), 0);
    assert_eq!(scheduler.queue().pending_counts().unschedulable, 1);

    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-late"},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}}
    }))
    .unwrap();
    let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "late", "namespace": "default",
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": "pv-late"}
    }))
    .unwrap();
    cluster.apply_object(ClusterObject::trimmed(pv)).unwrap();
    cluster.apply_object(ClusterObject::trimmed(pvc)).unwrap();
    scheduler.run_until_idle(&mut updates, &clock).await;
    let p = cluster.pod("default", "p").unwrap();
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n2"));
}

/// A ReadWriteOncePod claim in use rejects the pod on every node
/// (Unschedulable: preemption may help); a pod of higher priority preempts
/// the holder (DefaultPreemption's dry run removes it through
/// VolumeRestrictions' PreFilter extensions) and then binds, as upstream.
#[tokio::test]
async fn read_write_once_pod_claim_is_freed_by_preemption() {
    let mut yaml = CLUSTER[..CLUSTER.find("---\napiVersion: storage").unwrap()].to_string();
    yaml += r#"---
apiVersion: v1
kind: PersistentVolume
metadata: {name: solo}
spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOncePod], csi: {driver: d, volumeHandle: s}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: solo, annotations: {pv.kubernetes.io/bind-completed: "yes"}}
spec: {volumeName: solo, accessModes: [ReadWriteOncePod]}
"#;
    let holder = pod("holder", "solo").replace("spec:\n", "spec:\n  nodeName: n0\n  priority: 0\n");
    let same = pod("same-priority", "solo").replace("spec:\n", "spec:\n  priority: 0\n");
    yaml += &holder;
    yaml += &same;
    let r = run(&yaml).await;
    assert_eq!(outcome(&r, "same-priority").0, None, "{}", r.to_text());
    assert!(
        outcome(&r, "same-priority").1.starts_with(
            "0/3 nodes are available: 3 node(s) unavailable due to PersistentVolumeClaim with \
             ReadWriteOncePod access mode already in-use by another pod."
        ),
        "{}",
        outcome(&r, "same-priority").1
    );

    yaml += &pod("urgent", "solo").replace("spec:\n", "spec:\n  priority: 1000\n");
    let r = run(&yaml).await;
    let urgent = r.pods.iter().find(|p| p.name == "urgent").unwrap();
    assert!(urgent.node.is_some(), "{}", r.to_text());
    let holder = r.pods.iter().find(|p| p.name == "holder").unwrap();
    assert!(holder.evicted, "{}", r.to_text());
}

/// WaitForFirstConsumer on the embedded cluster: a StatefulSet-like set of
/// three pods, each with its own claim of a provisioned zonal class
/// restricted to zone b, gets volumes provisioned on its node with that
/// node's zone; a static local volume brings its claim's pod to its node;
/// a second pod wanting a local volume when none is left stays pending
/// with upstream's message.
#[tokio::test]
async fn wait_for_first_consumer_claims_are_bound_on_the_pods_node() {
    use std::sync::Arc;

    use convoy_api::{ClusterObject, FakeClock};
    use convoy_embedded::{EmbeddedBinder, EmbeddedCluster};
    use convoy_scheduler::decision::LogSink;
    use convoy_scheduler::{Scheduler, SchedulerOptions};

    let mut yaml = CLUSTER.to_string();
    yaml += r#"---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: zonal-wfc}
provisioner: csi.example.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [b]}]
"#;
    for i in 0..3 {
        yaml += &format!(
            "---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data-web-{i}}}\n\
             spec: {{storageClassName: zonal-wfc, accessModes: [ReadWriteOnce], \
             resources: {{requests: {{storage: 2Gi}}}}}}\n"
        );
        yaml += &pod(&format!("web-{i}"), &format!("data-web-{i}"));
    }
    yaml += &pod("local-user", "waiting");
    yaml += "---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: waiting-2}\n\
             spec: {storageClassName: local}\n";
    yaml += &pod("no-local-left", "waiting-2");

    let (cluster, mut updates) = EmbeddedCluster::new(parse_objects(&yaml, "wfc.yaml").unwrap());
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
    scheduler.run_until_idle(&mut updates, &clock).await;

    let node_of = |name: &str| {
        cluster.pod("default", name).and_then(|p| p.spec.as_ref().unwrap().node_name.clone())
    };
    let objects = cluster.objects();
    let pvc = |name: &str| {
        objects
            .iter()
            .find_map(|o| match o {
                ClusterObject::PersistentVolumeClaim(c)
                    if c.metadata.name.as_deref() == Some(name) =>
                {
                    Some(c.clone())
                }
                _ => None,
            })
            .unwrap()
    };
    let pv = |name: &str| {
        objects
            .iter()
            .find_map(|o| match o {
                ClusterObject::PersistentVolume(v) if v.metadata.name.as_deref() == Some(name) => {
                    Some(v.clone())
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("no PersistentVolume {name}"))
    };
    for i in 0..3 {
        let node = node_of(&format!("web-{i}"));
        assert!(matches!(node.as_deref(), Some("n1" | "n2")), "web-{i} in zone b: {node:?}");
        let claim = pvc(&format!("data-web-{i}"));
        assert_eq!(claim.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
        let annotations = claim.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations.get("volume.kubernetes.io/selected-node").map(String::as_str),
            node.as_deref()
        );
        let volume = pv(claim.spec.as_ref().unwrap().volume_name.as_deref().unwrap());
        let spec = volume.spec.as_ref().unwrap();
        assert_eq!(spec.capacity.as_ref().unwrap()["storage"].0, "2Gi");
        let term =
            &spec.node_affinity.as_ref().unwrap().required.as_ref().unwrap().node_selector_terms[0];
        let expr = &term.match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (expr.key.as_str(), expr.values.as_deref()),
            ("topology.kubernetes.io/zone", Some(&["b".to_string()][..]))
        );
        assert_eq!(
            spec.claim_ref.as_ref().unwrap().name.as_deref(),
            Some(claim.metadata.name.as_deref().unwrap())
        );
    }

    assert_eq!(node_of("local-user").as_deref(), Some("n2"), "the local volume's node");
    let waiting = pvc("waiting");
    assert_eq!(waiting.spec.as_ref().unwrap().volume_name.as_deref(), Some("local-n2"));
    let local = pv("local-n2");
    assert_eq!(local.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
    assert_eq!(
        local.spec.as_ref().unwrap().claim_ref.as_ref().unwrap().name.as_deref(),
        Some("waiting")
    );
    assert_eq!(node_of("no-local-left"), None);
    assert_eq!(scheduler.queue().pending_counts().unschedulable, 1);
}

/// A class whose provisioner is a CSIDriver with `storageCapacity: true`:
/// a claim is provisioned only on a node some CSIStorageCapacity of its
/// class reaches with room for it (zone a: 10Gi; zone b: 1Gi); too large
/// everywhere, the pod waits with upstream's reason.
#[tokio::test]
async fn published_storage_capacity_limits_provisioning() {
    let mut yaml = CLUSTER.to_string();
    yaml += r#"---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: csi.tracked.example.com}
spec: {storageCapacity: true}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: tracked}
provisioner: csi.tracked.example.com
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: tracked-a, namespace: kube-system}
storageClassName: tracked
nodeTopology: {matchLabels: {topology.kubernetes.io/zone: a}}
capacity: 10Gi
---
apiVersion: storage.k8s.io/v1
kind: CSIStorageCapacity
metadata: {name: tracked-b, namespace: kube-system}
storageClassName: tracked
nodeTopology: {matchLabels: {topology.kubernetes.io/zone: b}}
capacity: 1Gi
"#;
    for (claim, size) in [("fits-a", "4Gi"), ("too-large", "20Gi")] {
        yaml += &format!(
            "---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {claim}}}\n\
             spec: {{storageClassName: tracked, accessModes: [ReadWriteOnce], \
             resources: {{requests: {{storage: {size}}}}}}}\n"
        );
        yaml += &pod(claim, claim);
    }
    let r = run(&yaml).await;
    assert_eq!(outcome(&r, "fits-a").0.as_deref(), Some("n0"), "{}", r.to_text());
    assert_eq!(
        outcome(&r, "too-large"),
        (
            None,
            "0/3 nodes are available: 3 node(s) did not have enough free storage. preemption: \
             0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                .to_string()
        ),
        "{}",
        r.to_text()
    );
}
