//! Dropping what scheduling never reads before an object is kept.
//!
//! The adapter and the scheduler's cache share one `Arc` per object, so
//! what is trimmed here is memory saved for the life of the object
//! (`managedFields` alone is often half of `ObjectMeta`; container env,
//! probes and per-container status dominate the rest of a pod).

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec, PodStatus, Volume, VolumeMount};

/// Clears `metadata.managedFields`; everything else in a node (labels,
/// taints, allocatable, conditions, images) is read by plugins.
pub fn trim_node(node: &mut Node) {
    node.metadata.managed_fields = None;
}

/// Clears a pod's `metadata.managedFields`; the volumes no plugin reads
/// (see `trim_volumes`); the containers' and init
/// containers' env, envFrom, volumeMounts (unless one has
/// `bindMountOptions`, a field Convoy refuses: see `convoy_api::pod_fields`),
/// command, args, probes and lifecycle; and its status except phase,
/// conditions, nominatedNodeName, startTime (preemption spares the
/// pods that started first), resourceClaimStatuses and
/// extendedResourceClaimStatus (the names of the ResourceClaims generated
/// for the pod, which DynamicResources reads), and the reason and message
/// of a pod its kubelet rejected at admission (`Pod was rejected: ...`,
/// which Convoy explains).
pub fn trim_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    if let Some(spec) = pod.spec.as_mut() {
        trim_volumes(spec);
        spec.containers.iter_mut().for_each(trim_container);
        if let Some(init) = spec.init_containers.as_mut() {
            init.iter_mut().for_each(trim_container);
        }
    }
    if let Some(status) = pod.status.take() {
        let rejected = status.phase.as_deref() == Some("Failed")
            && status.message.as_deref().is_some_and(|m| m.starts_with("Pod was rejected: "));
        let (reason, message) =
            if rejected { (status.reason, status.message) } else { (None, None) };
        pod.status = Some(PodStatus {
            reason,
            message,
            phase: status.phase,
            conditions: status.conditions,
            nominated_node_name: status.nominated_node_name,
            start_time: status.start_time,
            resource_claim_statuses: status.resource_claim_statuses,
            extended_resource_claim_status: status.extended_resource_claim_status,
            ..Default::default()
        });
    }
}

/// Drops the volumes no plugin reads: `configMap`, `secret`, `projected`,
/// `downwardAPI` and `emptyDir`. Nearly every pod has one (the service
/// account's `kube-api-access-*` projected volume), and a k8s-openapi
/// `Volume` with its projections is about 6 KiB, half of a small pod's
/// memory. A pod with a volume Convoy refuses keeps them all: the refusal
/// names volumes by their index.
fn trim_volumes(spec: &mut PodSpec) {
    let Some(volumes) = spec.volumes.as_mut() else { return };
    if volumes.iter().any(|v| convoy_api::pod_fields::unevaluated_volume(v).is_some()) {
        return;
    }
    let unread = |v: &Volume| {
        v.config_map.is_some()
            || v.secret.is_some()
            || v.projected.is_some()
            || v.downward_api.is_some()
            || v.empty_dir.is_some()
    };
    volumes.retain(|v| !unread(v));
    if volumes.is_empty() {
        spec.volumes = None;
    }
}

fn trim_container(c: &mut Container) {
    c.env = None;
    c.env_from = None;
    let bind_options =
        |m: &VolumeMount| m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty());
    if !c.volume_mounts.iter().flatten().any(bind_options) {
        c.volume_mounts = None;
    }
    c.command = None;
    c.args = None;
    c.liveness_probe = None;
    c.readiness_probe = None;
    c.startup_probe = None;
    c.lifecycle = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(name: &str) -> serde_json::Value {
        json!({
            "name": name,
            "image": "img:1",
            "command": ["/bin/app"],
            "args": ["--flag"],
            "env": [{ "name": "A", "value": "1" }],
            "envFrom": [{ "configMapRef": { "name": "cm" } }],
            "volumeMounts": [{ "name": "v", "mountPath": "/v" }],
            "livenessProbe": { "exec": { "command": ["true"] } },
            "readinessProbe": { "exec": { "command": ["true"] } },
            "startupProbe": { "exec": { "command": ["true"] } },
            "lifecycle": { "preStop": { "exec": { "command": ["true"] } } },
            "resources": { "requests": { "cpu": "500m" }, "limits": { "memory": "1Gi" } },
            "ports": [{ "containerPort": 80, "hostPort": 8080 }],
            "restartPolicy": "Always"
        })
    }

    fn kept_container(name: &str) -> serde_json::Value {
        json!({
            "name": name,
            "image": "img:1",
            "resources": { "requests": { "cpu": "500m" }, "limits": { "memory": "1Gi" } },
            "ports": [{ "containerPort": 80, "hostPort": 8080 }],
            "restartPolicy": "Always"
        })
    }

    #[test]
    fn keeps_the_kubelets_rejection_only() {
        let status = |phase: &str, reason: &str, message: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": { "name": "p" },
                "status": { "phase": phase, "reason": reason, "message": message }
            }))
            .unwrap()
        };
        let mut rejected =
            status("Failed", "OutOfcpu", "Pod was rejected: Node didn't have enough");
        trim_pod(&mut rejected);
        let st = rejected.status.unwrap();
        assert_eq!(st.reason.as_deref(), Some("OutOfcpu"));
        assert_eq!(st.message.as_deref(), Some("Pod was rejected: Node didn't have enough"));
        let mut evicted = status("Failed", "Evicted", "The node was low on resource: memory.");
        trim_pod(&mut evicted);
        let st = evicted.status.unwrap();
        assert_eq!((st.reason, st.message), (None, None));
    }

    #[test]
    fn trims_pod_to_what_scheduling_reads() {
        let managed = json!([{ "manager": "kubectl", "operation": "Update" }]);
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                          "labels": { "app": "a" }, "managedFields": managed },
            "spec": {
                "schedulerName": "convoy-scheduler",
                "nodeSelector": { "zone": "a" },
                "containers": [container("main")],
                "initContainers": [container("init")],
                "volumes": [
                    { "name": "kube-api-access-x", "projected": { "sources": [
                        { "serviceAccountToken": { "path": "token" } },
                        { "configMap": { "name": "kube-root-ca.crt" } }
                    ] } },
                    { "name": "data", "persistentVolumeClaim": { "claimName": "data" } },
                    { "name": "cm", "configMap": { "name": "cm" } },
                    { "name": "s", "secret": { "secretName": "s" } },
                    { "name": "d", "downwardAPI": { "items": [] } },
                    { "name": "scratch", "emptyDir": {} },
                    { "name": "img", "image": { "reference": "img:2" } },
                    { "name": "disk", "iscsi": { "targetPortal": "t", "iqn": "i", "lun": 0 } }
                ]
            },
            "status": {
                "phase": "Pending",
                "conditions": [{ "type": "PodScheduled", "status": "False" }],
                "nominatedNodeName": "n1",
                "hostIP": "10.0.0.1",
                "podIP": "10.1.0.1",
                "startTime": "2026-01-01T00:00:00Z",
                "resourceClaimStatuses": [{ "name": "gpu", "resourceClaimName": "p-gpu-x7k2q" }],
                "extendedResourceClaimStatus": {
                    "resourceClaimName": "p-extended-resources-abcde",
                    "requestMappings": [{ "containerName": "main",
                                          "resourceName": "example.com/gpu",
                                          "requestName": "container-0-request-0" }]
                },
                "containerStatuses": [{ "name": "main", "image": "img:1", "imageID": "",
                                        "ready": false, "restartCount": 0 }],
                "qosClass": "Burstable"
            }
        }))
        .unwrap();
        trim_pod(&mut pod);
        let want = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": { "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                          "labels": { "app": "a" } },
            "spec": {
                "schedulerName": "convoy-scheduler",
                "nodeSelector": { "zone": "a" },
                "containers": [kept_container("main")],
                "initContainers": [kept_container("init")],
                "volumes": [
                    { "name": "data", "persistentVolumeClaim": { "claimName": "data" } },
                    { "name": "img", "image": { "reference": "img:2" } },
                    { "name": "disk", "iscsi": { "targetPortal": "t", "iqn": "i", "lun": 0 } }
                ]
            },
            "status": {
                "phase": "Pending",
                "conditions": [{ "type": "PodScheduled", "status": "False" }],
                "nominatedNodeName": "n1",
                "startTime": "2026-01-01T00:00:00Z",
                "resourceClaimStatuses": [{ "name": "gpu", "resourceClaimName": "p-gpu-x7k2q" }],
                "extendedResourceClaimStatus": {
                    "resourceClaimName": "p-extended-resources-abcde",
                    "requestMappings": [{ "containerName": "main",
                                          "resourceName": "example.com/gpu",
                                          "requestName": "container-0-request-0" }]
                }
            }
        });
        assert_eq!(serde_json::to_value(&pod).unwrap(), want);
    }

    /// What the pod-field table refuses survives the trim (the refusal
    /// needs it), indexes included.
    #[test]
    fn keeps_every_field_convoy_refuses() {
        let mut c = container("main");
        c["volumeMounts"] = json!([
            { "name": "v", "mountPath": "/v" },
            { "name": "w", "mountPath": "/w", "bindMountOptions": ["noexec"] }
        ]);
        c["resources"]["claims"] = json!([{ "name": "gpu" }]);
        c["restartPolicyRules"] = json!([{ "action": "RestartAllContainers",
                                           "exitCodes": { "operator": "In", "values": [1] } }]);
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "p" },
            "spec": {
                "hostNetwork": true,
                "hostUsers": false,
                "containers": [c.clone()],
                "initContainers": [container("plain"), c],
                "resourceClaims": [{ "name": "gpu", "resourceClaimName": "g" }],
                "volumes": [
                    { "name": "token", "projected": { "sources": [] } },
                    { "name": "v", "awsElasticBlockStore": { "volumeID": "d" } },
                    { "name": "c", "persistentVolumeClaim": { "claimName": "c" } },
                    { "name": "e", "ephemeral": { "volumeClaimTemplate": { "spec": {} } } }
                ]
            }
        }))
        .unwrap();
        let before = convoy_api::unevaluated_fields(pod.spec.as_ref().unwrap());
        assert_eq!(before.len(), 6, "{before:?}");
        let volumes = pod.spec.as_ref().unwrap().volumes.clone();
        let claims = pod.spec.as_ref().unwrap().resource_claims.clone();
        trim_pod(&mut pod);
        assert_eq!(convoy_api::unevaluated_fields(pod.spec.as_ref().unwrap()), before);
        // The volume plugins read the claims, DynamicResources the
        // resource claims.
        assert_eq!(pod.spec.as_ref().unwrap().volumes, volumes);
        assert_eq!(pod.spec.as_ref().unwrap().resource_claims, claims);
    }

    #[test]
    fn trims_node_managed_fields_only() {
        let mut node: Node = serde_json::from_value(json!({
            "metadata": { "name": "n", "labels": { "a": "b" },
                          "managedFields": [{ "manager": "kubelet" }] },
            "spec": { "taints": [{ "key": "k", "effect": "NoSchedule" }] },
            "status": { "allocatable": { "cpu": "4" },
                        "images": [{ "names": ["img:1"], "sizeBytes": 300 }] }
        }))
        .unwrap();
        trim_node(&mut node);
        assert_eq!(
            serde_json::to_value(&node).unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": { "name": "n", "labels": { "a": "b" } },
                "spec": { "taints": [{ "key": "k", "effect": "NoSchedule" }] },
                // status.images stays: ImageLocality reads it.
                "status": { "allocatable": { "cpu": "4" },
                            "images": [{ "names": ["img:1"], "sizeBytes": 300 }] }
            })
        );
    }

    #[test]
    fn trims_pod_without_status_or_spec() {
        let mut pod = Pod::default();
        trim_pod(&mut pod);
        assert_eq!(pod, Pod::default());
    }
}
