//! Volumes on the embedded cluster, loaded from YAML as `simulate` loads
//! them: bound claims follow their PersistentVolume's node affinity and
//! zone; claims that are missing, unbound with an immediate class, or
//! unbound with a WaitForFirstConsumer class (whose binding Convoy does not
//! perform yet) keep their pods pending with upstream's message, or with
//! Convoy's refusal naming the volume.

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
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n1]}]
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
    assert!(
        pending("unbound-wfc").1.starts_with(
            "0/3 nodes are available: pod uses spec.volumes[0].persistentVolumeClaim \"waiting\" \
             with WaitForFirstConsumer StorageClass \"local\", whose binding this scheduler does \
             not perform yet."
        ),
        "{}",
        pending("unbound-wfc").1
    );
    assert_eq!(r.summary.bound, 2);
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
