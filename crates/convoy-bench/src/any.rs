//! Objects of any kind, as `createAny`, `createPodGroups`, `churn` and
//! `--prepare` create them: their type, the kinds the embedded target
//! holds, and manifest files.
//!
//! The API target creates any kind through the dynamic API (its
//! `dynamic` module); the embedded cluster holds nodes, pods, PodGroups
//! and the other kinds the scheduler reads ([`ClusterObject`]: Namespaces,
//! Services, ReplicationControllers, ReplicaSets, StatefulSets), so
//! anything else is refused there with an error naming the kind.

use std::path::Path;

use std::sync::Arc;

use convoy_api::ClusterObject;
use convoy_embedded::PodGroupObject;
use convoy_embedded::load::POD_GROUP_API_VERSIONS;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use serde_json::{Value, json};

/// Decodes a typed object, errors naming the field.
pub fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_path_to_error::deserialize::<_, T>(v).map_err(|e| {
        let path = e.path().to_string();
        format!("{path}: {}", e.into_inner())
    })
}

/// Names an object: keeps `metadata.name`, else `generateName` (or
/// `default_prefix`) plus `serial`.
pub fn name_object(v: &mut Value, default_prefix: &str, serial: u64) -> String {
    let meta = v
        .as_object_mut()
        .expect("checked by Decoder")
        .entry("metadata")
        .or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    let meta = meta.as_object_mut().expect("just set");
    if let Some(Value::String(n)) = meta.get("name")
        && !n.is_empty()
    {
        return n.clone();
    }
    let prefix = match meta.get("generateName") {
        Some(Value::String(p)) if !p.is_empty() => p.clone(),
        _ => default_prefix.to_string(),
    };
    let name = format!("{prefix}{serial}");
    meta.insert("name".into(), Value::String(name.clone()));
    name
}

/// The API version `createPodGroups` creates.
pub const POD_GROUP_API_VERSION: &str = "scheduling.k8s.io/v1beta1";

/// `(apiVersion, kind)` of an object; an error when either is missing.
pub fn type_of(v: &Value) -> Result<(&str, &str), String> {
    if !v.is_object() {
        return Err(format!("a template must produce one object, got {v}"));
    }
    let field = |f: &str| v.get(f).and_then(Value::as_str).filter(|s| !s.is_empty());
    match (field("apiVersion"), field("kind")) {
        (Some(a), Some(k)) => Ok((a, k)),
        (None, _) => Err("apiVersion is required".into()),
        (_, None) => Err("kind is required".into()),
    }
}

/// The API group of upstream's PodGroup.
pub const POD_GROUP_GROUP: &str = "scheduling.k8s.io";

/// For `createPodGroups`: each object must be a `scheduling.k8s.io`
/// PodGroup, and is created as [`POD_GROUP_API_VERSION`] whatever version
/// its template names, as upstream's executor does: it decodes the template
/// into a `v1beta1` PodGroup and creates it with the typed `v1beta1` client
/// (upstream's own `templates/podgroup.yaml` says `v1alpha3`, a version its
/// API server does not serve). Returns the versions replaced, sorted.
pub fn as_pod_groups(objects: &mut [Value]) -> Result<Vec<String>, String> {
    let mut replaced = Vec::new();
    for v in objects.iter_mut() {
        let (a, k) = type_of(v)?;
        let group = a.split_once('/').map_or("", |(g, _)| g);
        if k != "PodGroup" || group != POD_GROUP_GROUP {
            return Err(format!(
                "the template makes a {k} ({a}), expected a PodGroup ({POD_GROUP_GROUP}/*, \
                 created as {POD_GROUP_API_VERSION})"
            ));
        }
        if a != POD_GROUP_API_VERSION {
            if !replaced.iter().any(|r| r == a) {
                replaced.push(a.to_string());
            }
            v["apiVersion"] = json!(POD_GROUP_API_VERSION);
        }
    }
    replaced.sort();
    Ok(replaced)
}

/// Whether any of `objects` is a PodGroup with `spec.disruptionMode:
/// single`, which Convoy evaluates as `all` (a running gang is preempted
/// whole; see docs/gang.md) where kube-scheduler evicts members one by one.
pub fn has_single_disruption_mode(objects: &[Value]) -> bool {
    objects.iter().any(|v| {
        v.get("kind").and_then(Value::as_str) == Some("PodGroup")
            && v.pointer("/spec/disruptionMode/single").is_some_and(|x| !x.is_null())
    })
}

/// Logs what `createPodGroups` changed or Convoy evaluates differently (`convoy`:
/// Convoy is the scheduler under test).
pub fn log_pod_groups(replaced: &[String], objects: &[Value], convoy: bool) {
    if !replaced.is_empty() {
        tracing::info!(
            "createPodGroups: template apiVersion {} created as {POD_GROUP_API_VERSION}, as \
             upstream's executor does (a typed v1beta1 client)",
            replaced.join(", ")
        );
    }
    if convoy && has_single_disruption_mode(objects) {
        tracing::warn!(
            "createPodGroups: PodGroup spec.disruptionMode single is evaluated by Convoy as all: \
             a running gang is preempted whole, never below its minimum (kube-scheduler evicts \
             its members one by one)"
        );
    }
}

/// Whether the object is a CustomResourceDefinition.
pub fn is_crd(v: &Value) -> bool {
    matches!(type_of(v), Ok((a, "CustomResourceDefinition")) if a.starts_with("apiextensions.k8s.io/"))
}

/// What the benchmark adds to any object it creates: a node without a
/// kubelet gets `status.allocatable` from its capacity (as `createNodes`'
/// nodes do); a pod that names no scheduler goes
/// to `scheduler_name`.
pub fn complete(v: &mut Value, scheduler_name: &str) {
    match type_of(v) {
        Ok(("v1", "Node")) => {
            if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut)
                && !status.contains_key("allocatable")
                && let Some(cap) = status.get("capacity").cloned()
            {
                status.insert("allocatable".into(), cap);
            }
        }
        Ok(("v1", "Pod")) => {
            let obj = v.as_object_mut().expect("type_of checked");
            let spec = obj.entry("spec").or_insert_with(|| json!({}));
            if let Some(spec) = spec.as_object_mut()
                && spec.get("schedulerName").and_then(Value::as_str).is_none_or(str::is_empty)
            {
                spec.insert("schedulerName".into(), scheduler_name.into());
            }
        }
        _ => {}
    }
}

/// An object the embedded cluster can hold.
#[derive(Debug, Clone)]
pub enum EmbeddedObject {
    /// A node.
    Node(Box<Node>),
    /// A pod.
    Pod(Box<Pod>),
    /// A PodGroup (either supported API version).
    PodGroup(PodGroupObject),
    /// A ResourceClaimTemplate (`EmbeddedCluster::apply_resource_claim_template`:
    /// its resourceclaim-controller emulation makes pods' claims from it).
    ResourceClaimTemplate(Box<ResourceClaimTemplate>),
    /// A Namespace, Service, ReplicationController, ReplicaSet,
    /// StatefulSet, DeviceClass, ResourceSlice, ResourceClaim or
    /// DeviceTaintRule (`EmbeddedCluster::apply_object`).
    Object(ClusterObject),
}

/// The kinds the embedded target creates, for messages.
pub const EMBEDDED_KINDS: &str = "Node, Pod, PodGroup (scheduling.x-k8s.io/v1alpha1, \
     scheduling.k8s.io/v1beta1), Namespace, Service, ReplicationController, ReplicaSet and \
     StatefulSet (apps/v1), DeviceClass, ResourceSlice, ResourceClaim, ResourceClaimTemplate and \
     DeviceTaintRule (resource.k8s.io/v1)";

/// The API group and version of the DRA kinds the embedded target holds.
pub const DRA_API_VERSION: &str = "resource.k8s.io/v1";

/// Whether `v`'s kind is namespaced on the embedded target; an error
/// naming the kind when the embedded cluster cannot hold it.
pub fn embedded_scope(v: &Value) -> Result<bool, String> {
    match type_of(v)? {
        ("v1", "Node" | "Namespace") => Ok(false),
        ("v1", "Pod" | "Service" | "ReplicationController") => Ok(true),
        ("apps/v1", "ReplicaSet" | "StatefulSet") => Ok(true),
        (a, "PodGroup") if POD_GROUP_API_VERSIONS.contains(&a) => Ok(true),
        (DRA_API_VERSION, "DeviceClass" | "ResourceSlice" | "DeviceTaintRule") => Ok(false),
        (DRA_API_VERSION, "ResourceClaim" | "ResourceClaimTemplate") => Ok(true),
        (a, k) => Err(format!(
            "kind {k} ({a}) is not supported on the embedded target (it holds {EMBEDDED_KINDS}); \
             run against an API server with --kubeconfig"
        )),
    }
}

/// The namespace a `--prepare` manifest goes to on the embedded target:
/// its own, `default` when a namespaced object names none.
pub fn manifest_namespace(v: &Value) -> Result<Option<String>, String> {
    Ok(embedded_scope(v)?.then(|| {
        v.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or("default").to_string()
    }))
}

/// What an API server keeps of node `new` when it replaces `old` (an
/// update of the object, or of its `status` subresource): the object keeps
/// its UID and, unless `status` is updated, its status (a node's status is
/// written only through that subresource).
pub fn updated_node(old: &Node, mut new: Node, subresources: &[String]) -> Result<Node, String> {
    let name = new.metadata.name.clone().unwrap_or_default();
    match subresources {
        [] => {
            new.metadata.uid.clone_from(&old.metadata.uid);
            new.status.clone_from(&old.status);
            Ok(new)
        }
        [s] if s == "status" => Ok(Node { status: new.status, ..old.clone() }),
        _ => Err(format!(
            "updateAny: node {name}: subresources {subresources:?} are not supported on the \
             embedded target (status is)"
        )),
    }
}

/// What an API server keeps of pod `new` when it replaces `old`: an update
/// of the object keeps its UID, status and priority, and may not move it
/// to another node; `resize` takes only the containers' resources from
/// `new`; `status` only its status.
pub fn updated_pod(old: &Pod, mut new: Pod, subresources: &[String]) -> Result<Pod, String> {
    let key = format!(
        "{}/{}",
        new.metadata.namespace.as_deref().unwrap_or_default(),
        new.metadata.name.as_deref().unwrap_or_default()
    );
    match subresources {
        [] => {
            let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
            if node(old) != node(&new) {
                return Err(format!("updateAny: pod {key}: spec.nodeName may not be changed"));
            }
            new.metadata.uid.clone_from(&old.metadata.uid);
            new.status.clone_from(&old.status);
            if let (Some(spec), Some(was)) = (new.spec.as_mut(), old.spec.as_ref())
                && spec.priority.is_none()
            {
                spec.priority = was.priority;
            }
            Ok(new)
        }
        [s] if s == "resize" => {
            let mut pod = old.clone();
            let resources: std::collections::HashMap<String, _> = new
                .spec
                .into_iter()
                .flat_map(|s| s.containers)
                .map(|c| (c.name, c.resources))
                .collect();
            for c in pod.spec.iter_mut().flat_map(|s| s.containers.iter_mut()) {
                if let Some(r) = resources.get(&c.name) {
                    c.resources.clone_from(r);
                }
            }
            Ok(pod)
        }
        [s] if s == "status" => Ok(Pod { status: new.status, ..old.clone() }),
        _ => Err(format!(
            "updateAny: pod {key}: subresources {subresources:?} are not supported on the \
             embedded target (resize and status are)"
        )),
    }
}

/// Converts `v` for the embedded cluster: named (`generateName` or
/// `default_prefix` plus `serial`), completed, and checked against its
/// scope as upstream's `createAny` checks it (a namespace for a namespaced
/// kind, none for a cluster-scoped one).
pub fn embedded_object(
    mut v: Value,
    namespace: Option<&str>,
    scheduler_name: &str,
    default_prefix: &str,
    serial: u64,
) -> Result<EmbeddedObject, String> {
    let (api_version, kind) = type_of(&v).map(|(a, k)| (a.to_string(), k.to_string()))?;
    let namespaced = embedded_scope(&v)?;
    match (namespace, namespaced) {
        (Some(ns), false) => {
            return Err(format!(
                "namespace {ns} was set for an object of kind {kind} which is cluster-scoped"
            ));
        }
        (None, true) => {
            return Err(format!(
                "namespace was not set for an object of kind {kind} which is namespaced"
            ));
        }
        _ => {}
    }
    complete(&mut v, scheduler_name);
    let name = name_object(&mut v, default_prefix, serial);
    if let Some(ns) = namespace {
        v["metadata"]["namespace"] = json!(ns);
    }
    let at = |e: String| format!("{kind} {name}: {e}");
    Ok(match kind.as_str() {
        "Node" => EmbeddedObject::Node(Box::new(typed(v).map_err(at)?)),
        "Pod" => EmbeddedObject::Pod(Box::new(typed(v).map_err(at)?)),
        "Namespace" => {
            EmbeddedObject::Object(ClusterObject::Namespace(Arc::new(typed(v).map_err(at)?)))
        }
        "Service" => {
            EmbeddedObject::Object(ClusterObject::Service(Arc::new(typed(v).map_err(at)?)))
        }
        "ReplicationController" => EmbeddedObject::Object(ClusterObject::ReplicationController(
            Arc::new(typed(v).map_err(at)?),
        )),
        "ReplicaSet" => {
            EmbeddedObject::Object(ClusterObject::ReplicaSet(Arc::new(typed(v).map_err(at)?)))
        }
        "StatefulSet" => {
            EmbeddedObject::Object(ClusterObject::StatefulSet(Arc::new(typed(v).map_err(at)?)))
        }
        "DeviceClass" => {
            EmbeddedObject::Object(ClusterObject::DeviceClass(Arc::new(typed(v).map_err(at)?)))
        }
        "ResourceSlice" => {
            EmbeddedObject::Object(ClusterObject::ResourceSlice(Arc::new(typed(v).map_err(at)?)))
        }
        "ResourceClaim" => {
            EmbeddedObject::Object(ClusterObject::ResourceClaim(Arc::new(typed(v).map_err(at)?)))
        }
        "DeviceTaintRule" => {
            EmbeddedObject::Object(ClusterObject::DeviceTaintRule(Arc::new(typed(v).map_err(at)?)))
        }
        "ResourceClaimTemplate" => {
            EmbeddedObject::ResourceClaimTemplate(Box::new(typed(v).map_err(at)?))
        }
        _ => EmbeddedObject::PodGroup(PodGroupObject {
            api_version,
            name,
            namespace: namespace.unwrap_or_default().to_string(),
            object: v,
        }),
    })
}

/// Reads a manifest file for `--prepare`: YAML documents separated by
/// `---` (or JSON), `kind: List` expanded, empty documents skipped. Errors
/// name the file and the document.
pub fn load_manifests(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_manifests(&text, &path.display().to_string())
}

/// [`load_manifests`] of text; `source` names it in messages.
pub fn parse_manifests(text: &str, source: &str) -> Result<Vec<Value>, String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line == "---" || line.starts_with("--- ") {
            docs.push(String::new());
        } else {
            let doc = docs.last_mut().expect("never empty");
            doc.push_str(line);
            doc.push('\n');
        }
    }
    let mut out = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let at = |e: String| format!("{source}: document {}: {e}", i + 1);
        let v: Value = serde_saphyr::from_str(doc).map_err(|e| at(e.to_string()))?;
        let items = match v {
            Value::Null => continue,
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                m.get("items").and_then(Value::as_array).cloned().unwrap_or_default()
            }
            v => vec![v],
        };
        for item in items {
            type_of(&item).map_err(at)?;
            out.push(item);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `updateAny` on the embedded target writes what an API server keeps:
    /// an update of a node keeps its status (only the status write after
    /// it changes it); a pod keeps its UID, status and node, `resize` takes
    /// only the containers' resources.
    #[test]
    fn updates_keep_what_an_api_server_keeps() {
        let node = |cpu: &str, taint: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n", "uid": "u1"},
                "spec": {"taints": [{"key": taint, "effect": "NoSchedule"}]},
                "status": {"capacity": {"cpu": cpu}}}))
            .unwrap()
        };
        let old = node("1", "a");
        let mut new = node("4", "b");
        new.metadata.uid = None;
        let updated = updated_node(&old, new.clone(), &[]).unwrap();
        assert_eq!(updated.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(updated.spec.as_ref().unwrap().taints.as_ref().unwrap()[0].key, "b");
        assert_eq!(updated.status, old.status, "an update of the object keeps the status");
        let status = updated_node(&updated, new, &["status".into()]).unwrap();
        assert_eq!(status.status.unwrap().capacity.unwrap()["cpu"].0, "4");
        assert_eq!(status.spec.unwrap().taints.unwrap()[0].key, "b");

        let pod = |cpu: &str, node: Option<&str>| -> Pod {
            serde_json::from_value(
                json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u2"},
                "spec": {"nodeName": node, "tolerations": [],
                         "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
                "status": {"phase": "Running"}}),
            )
            .unwrap()
        };
        let old = pod("2", Some("n"));
        let e = updated_pod(&old, pod("2", None), &[]).unwrap_err();
        assert!(e.contains("spec.nodeName may not be changed"), "{e}");
        let mut new = pod("1", Some("n"));
        new.status = None;
        new.spec.as_mut().unwrap().tolerations = None;
        let resized = updated_pod(&old, new.clone(), &["resize".into()]).unwrap();
        let requests = |p: &Pod| p.spec.as_ref().unwrap().containers[0].resources.clone();
        assert_eq!(requests(&resized), requests(&new));
        assert_eq!(resized.status, old.status);
        assert_eq!(resized.spec.unwrap().tolerations, Some(vec![]), "only the resources change");
        let e = updated_pod(&old, new, &["ephemeralcontainers".into()]).unwrap_err();
        assert!(e.contains("not supported on the embedded target"), "{e}");
    }

    #[test]
    fn embedded_objects_by_kind_and_scope() {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"generateName": "n-"}, "status": {"capacity": {"cpu": "4"}}});
        let EmbeddedObject::Node(n) = embedded_object(node.clone(), None, "s", "x-", 3).unwrap()
        else {
            panic!()
        };
        assert_eq!(n.metadata.name.as_deref(), Some("n-3"));
        assert_eq!(n.status.unwrap().allocatable.unwrap()["cpu"].0, "4");
        let e = embedded_object(node, Some("ns"), "s", "x-", 1).unwrap_err();
        assert!(e.contains("namespace ns was set for an object of kind Node"), "{e}");

        let pod = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": []}});
        let EmbeddedObject::Pod(p) =
            embedded_object(pod.clone(), Some("a"), "me", "p-", 1).unwrap()
        else {
            panic!()
        };
        assert_eq!(p.metadata.namespace.as_deref(), Some("a"));
        assert_eq!(p.spec.unwrap().scheduler_name.as_deref(), Some("me"));
        let e = embedded_object(pod, None, "s", "p-", 1).unwrap_err();
        assert!(e.contains("namespace was not set for an object of kind Pod"), "{e}");

        for api in POD_GROUP_API_VERSIONS {
            let pg = json!({"apiVersion": api, "kind": "PodGroup", "metadata": {"name": "g"}});
            let EmbeddedObject::PodGroup(g) = embedded_object(pg, Some("a"), "s", "", 1).unwrap()
            else {
                panic!()
            };
            assert_eq!((g.name.as_str(), g.namespace.as_str()), ("g", "a"));
        }
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"selector": {"app": "a"}}});
        let EmbeddedObject::Object(o) = embedded_object(svc, Some("a"), "s", "", 1).unwrap() else {
            panic!()
        };
        assert_eq!((o.kind(), o.key().as_str()), ("Service", "a/s"));
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"generateName": "ns-", "labels": {"team": "devops"}}});
        let EmbeddedObject::Object(o) = embedded_object(ns.clone(), None, "s", "", 2).unwrap()
        else {
            panic!()
        };
        assert_eq!((o.kind(), o.key().as_str()), ("Namespace", "ns-2"));
        let e = embedded_object(ns, Some("a"), "s", "", 1).unwrap_err();
        assert!(e.contains("namespace a was set for an object of kind Namespace"), "{e}");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let e = embedded_object(cm, Some("a"), "s", "", 1).unwrap_err();
        assert!(
            e.starts_with("kind ConfigMap (v1) is not supported on the embedded target"),
            "{e}"
        );
        let dra = |kind: &str, extra: Value| {
            let mut v = json!({"apiVersion": "resource.k8s.io/v1", "kind": kind,
                "metadata": {"name": "x"}, "spec": {}});
            if let Value::Object(m) = extra {
                v.as_object_mut().unwrap().extend(m);
            }
            v
        };
        for kind in ["DeviceClass", "ResourceSlice", "DeviceTaintRule"] {
            let spec = match kind {
                "ResourceSlice" => json!({"spec": {"driver": "d", "pool": {"name": "p",
                    "generation": 1, "resourceSliceCount": 1}, "allNodes": true}}),
                "DeviceTaintRule" => json!({"spec": {"deviceSelector": {"driver": "d"},
                    "taint": {"key": "k", "effect": "NoSchedule"}}}),
                _ => json!({}),
            };
            let v = dra(kind, spec);
            let EmbeddedObject::Object(o) = embedded_object(v.clone(), None, "s", "", 1).unwrap()
            else {
                panic!()
            };
            assert_eq!((o.kind(), o.key().as_str()), (kind, "x"));
            let e = embedded_object(v, Some("a"), "s", "", 1).unwrap_err();
            assert!(e.contains(&format!("object of kind {kind} which is cluster-scoped")), "{e}");
        }
        let EmbeddedObject::Object(o) =
            embedded_object(dra("ResourceClaim", json!({})), Some("a"), "s", "", 1).unwrap()
        else {
            panic!()
        };
        assert_eq!((o.kind(), o.key().as_str()), ("ResourceClaim", "a/x"));
        let t = dra("ResourceClaimTemplate", json!({"spec": {"spec": {}}}));
        let EmbeddedObject::ResourceClaimTemplate(t) =
            embedded_object(t, Some("a"), "s", "", 1).unwrap()
        else {
            panic!()
        };
        assert_eq!(t.metadata.namespace.as_deref(), Some("a"));
        let rule = json!({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule",
            "metadata": {"name": "r"}});
        let e = embedded_object(rule, None, "s", "", 1).unwrap_err();
        assert!(
            e.starts_with("kind DeviceTaintRule (resource.k8s.io/v1alpha3) is not supported"),
            "{e}"
        );
        let e = embedded_object(json!({"kind": "Pod"}), None, "s", "", 1).unwrap_err();
        assert_eq!(e, "apiVersion is required");
    }

    #[test]
    fn manifests_split_documents_and_lists() {
        let text = "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n# empty\n---\n\
                    apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: p}}\n\
                    - {apiVersion: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, metadata: {name: x}}\n";
        let m = parse_manifests(text, "f.yaml").unwrap();
        assert_eq!(m.len(), 3);
        assert!(is_crd(&m[2]) && !is_crd(&m[0]));
        let e = parse_manifests("a: 1\n---\nkind: Pod\n", "f.yaml").unwrap_err();
        assert_eq!(e, "f.yaml: document 1: apiVersion is required");
    }
}
