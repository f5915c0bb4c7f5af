//! Trimming the [`ClusterObject`] kinds to what scheduling reads, before
//! they are wrapped in an `Arc` (by the API-server adapter and the YAML
//! loader alike).
//!
//! Kept: `metadata.{name, namespace, labels, uid, resourceVersion,
//! ownerReferences}`, and a Service's, ReplicationController's,
//! ReplicaSet's or StatefulSet's `spec.selector`; a PodDisruptionBudget's
//! `spec.selector`, `status.disruptionsAllowed` and `status.disruptedPods`;
//! a PriorityClass's `value`, `globalDefault` and `preemptionPolicy`.
//! The volume kinds are trimmed in [`super::volumes`]. Dropped:
//! everything else,
//! notably pod templates, `managedFields`, annotations (often a
//! `kubectl.kubernetes.io/last-applied-configuration` copy of the whole
//! object) and status. A trimmed ReplicaSet is a few hundred bytes where
//! the listed one is often tens of kilobytes.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetSpec, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Namespace, ReplicationController, ReplicationControllerSpec, Service, ServiceSpec,
};
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::ClusterObject;

/// A kind behind [`ClusterObject`].
pub trait ObjectKind: Sized {
    /// The kind, as in `kind:` (`Namespace`, `Service`, ...).
    const KIND: &'static str;

    /// Drops everything scheduling does not read (see the module docs).
    fn trim(&mut self);

    /// Wraps the object.
    fn wrap(obj: Arc<Self>) -> ClusterObject;

    /// Whether two versions of one object differ in what scheduling reads
    /// (labels, owner references, selector); a change elsewhere, such as a
    /// ReplicaSet's status, need not be passed on.
    fn same_for_scheduling(&self, other: &Self) -> bool;
}

impl ClusterObject {
    /// Trims `obj` ([`ObjectKind::trim`]) and wraps it.
    pub fn trimmed<K: ObjectKind>(mut obj: K) -> ClusterObject {
        obj.trim();
        K::wrap(Arc::new(obj))
    }
}

/// Keeps name, namespace, labels, uid, resourceVersion and ownerReferences.
pub fn trim_meta(meta: &mut ObjectMeta) {
    let m = std::mem::take(meta);
    *meta = ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        labels: m.labels,
        uid: m.uid,
        resource_version: m.resource_version,
        owner_references: m.owner_references,
        ..Default::default()
    };
}

fn same_meta(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    a.labels == b.labels && a.owner_references == b.owner_references
}

impl ObjectKind for Namespace {
    const KIND: &'static str = "Namespace";
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.spec = None;
        self.status = None;
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::Namespace(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_meta(&self.metadata, &other.metadata)
    }
}

impl ObjectKind for Service {
    const KIND: &'static str = "Service";
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.spec =
            self.spec.take().map(|s| ServiceSpec { selector: s.selector, ..Default::default() });
        self.status = None;
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::Service(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_meta(&self.metadata, &other.metadata)
            && self.spec.as_ref().map(|s| &s.selector) == other.spec.as_ref().map(|s| &s.selector)
    }
}

impl ObjectKind for ReplicationController {
    const KIND: &'static str = "ReplicationController";
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.spec = self
            .spec
            .take()
            .map(|s| ReplicationControllerSpec { selector: s.selector, ..Default::default() });
        self.status = None;
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::ReplicationController(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_meta(&self.metadata, &other.metadata)
            && self.spec.as_ref().map(|s| &s.selector) == other.spec.as_ref().map(|s| &s.selector)
    }
}

impl ObjectKind for ReplicaSet {
    const KIND: &'static str = "ReplicaSet";
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        let selector = std::mem::take(&mut self.spec.selector);
        self.spec = ReplicaSetSpec { selector, ..Default::default() };
        self.status = None;
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::ReplicaSet(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_meta(&self.metadata, &other.metadata) && self.spec.selector == other.spec.selector
    }
}

impl ObjectKind for StatefulSet {
    const KIND: &'static str = "StatefulSet";
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        let selector = std::mem::take(&mut self.spec.selector);
        self.spec = StatefulSetSpec { selector, ..Default::default() };
        self.status = None;
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::StatefulSet(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_meta(&self.metadata, &other.metadata) && self.spec.selector == other.spec.selector
    }
}

impl ObjectKind for PodDisruptionBudget {
    const KIND: &'static str = "PodDisruptionBudget";
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.spec = self
            .spec
            .take()
            .map(|s| PodDisruptionBudgetSpec { selector: s.selector, ..Default::default() });
        self.status = self.status.take().map(|s| PodDisruptionBudgetStatus {
            disruptions_allowed: s.disruptions_allowed,
            disrupted_pods: s.disrupted_pods,
            ..Default::default()
        });
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::PodDisruptionBudget(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        let status =
            |p: &Self| p.status.as_ref().map(|s| (s.disruptions_allowed, s.disrupted_pods.clone()));
        same_meta(&self.metadata, &other.metadata)
            && self.spec.as_ref().map(|s| &s.selector) == other.spec.as_ref().map(|s| &s.selector)
            && status(self) == status(other)
    }
}

impl ObjectKind for PriorityClass {
    const KIND: &'static str = "PriorityClass";
    fn trim(&mut self) {
        trim_meta(&mut self.metadata);
        self.description = None;
    }
    fn wrap(obj: Arc<Self>) -> ClusterObject {
        ClusterObject::PriorityClass(obj)
    }
    fn same_for_scheduling(&self, other: &Self) -> bool {
        same_meta(&self.metadata, &other.metadata)
            && self.value == other.value
            && self.global_default == other.global_default
            && self.preemption_policy == other.preemption_policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn meta() -> Value {
        json!({
            "name": "web", "namespace": "prod", "uid": "u1", "resourceVersion": "7",
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                 "uid": "d1", "controller": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}],
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "generation": 3,
            "finalizers": ["f"]
        })
    }

    fn kept_meta() -> Value {
        json!({
            "name": "web", "namespace": "prod", "uid": "u1", "resourceVersion": "7",
            "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                 "uid": "d1", "controller": true}]
        })
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}},
               "spec": {"containers": [{"name": "c", "image": "img", "env": [{"name": "A"}]}]}})
    }

    fn trimmed<K>(v: Value) -> Value
    where
        K: ObjectKind + k8s_openapi::serde::de::DeserializeOwned + k8s_openapi::serde::Serialize,
    {
        let mut obj: K = serde_json::from_value(v).unwrap();
        obj.trim();
        serde_json::to_value(&obj).unwrap()
    }

    #[test]
    fn keeps_what_scheduling_reads() {
        let selector = json!({"matchLabels": {"app": "web"}});
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "Namespace",
                trimmed::<Namespace>(json!({"metadata": meta(),
                    "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})),
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": kept_meta()}),
            ),
            (
                "Service",
                trimmed::<Service>(json!({"metadata": meta(),
                    "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}],
                             "clusterIP": "10.0.0.1", "type": "ClusterIP"},
                    "status": {"loadBalancer": {}}})),
                json!({"apiVersion": "v1", "kind": "Service", "metadata": kept_meta(),
                       "spec": {"selector": {"app": "web"}}}),
            ),
            (
                "ReplicationController",
                trimmed::<ReplicationController>(json!({"metadata": meta(),
                    "spec": {"selector": {"app": "web"}, "replicas": 3, "template": template()},
                    "status": {"replicas": 3}})),
                json!({"apiVersion": "v1", "kind": "ReplicationController",
                       "metadata": kept_meta(), "spec": {"selector": {"app": "web"}}}),
            ),
            (
                "ReplicaSet",
                trimmed::<ReplicaSet>(json!({"metadata": meta(),
                    "spec": {"selector": selector, "replicas": 3, "template": template()},
                    "status": {"replicas": 3}})),
                json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": kept_meta(),
                       "spec": {"selector": selector}}),
            ),
            (
                "StatefulSet",
                trimmed::<StatefulSet>(json!({"metadata": meta(),
                    "spec": {"selector": selector, "serviceName": "web", "template": template(),
                             "volumeClaimTemplates": [{"metadata": {"name": "data"}}]},
                    "status": {"replicas": 3}})),
                json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": kept_meta(),
                       "spec": {"selector": selector, "template": {}}}),
            ),
            (
                "PodDisruptionBudget",
                trimmed::<PodDisruptionBudget>(json!({"metadata": meta(),
                    "spec": {"selector": selector, "minAvailable": 2},
                    "status": {"disruptionsAllowed": 1, "currentHealthy": 3,
                               "desiredHealthy": 2, "expectedPods": 3, "observedGeneration": 4,
                               "disruptedPods": {"web-1": "2026-01-01T00:00:00Z"}}})),
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                       "metadata": kept_meta(), "spec": {"selector": selector},
                       "status": {"disruptionsAllowed": 1,
                                  "disruptedPods": {"web-1": "2026-01-01T00:00:00Z"}}}),
            ),
            (
                "PriorityClass",
                trimmed::<PriorityClass>(json!({"metadata": meta(), "value": 1000,
                    "globalDefault": true, "preemptionPolicy": "Never",
                    "description": "a long text"})),
                json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": kept_meta(), "value": 1000, "globalDefault": true,
                       "preemptionPolicy": "Never"}),
            ),
        ];
        for (kind, got, want) in cases {
            assert_eq!(got, want, "{kind}");
        }
    }

    #[test]
    fn same_for_scheduling_ignores_versions_and_status() {
        let rs = |rv: &str, app: &str, replicas: i32| -> ReplicaSet {
            let mut o: ReplicaSet = serde_json::from_value(json!({
                "metadata": {"name": "r", "namespace": "n", "resourceVersion": rv,
                             "labels": {"app": "web"}},
                "spec": {"selector": {"matchLabels": {"app": app}}, "replicas": replicas},
                "status": {"replicas": replicas}
            }))
            .unwrap();
            o.trim();
            o
        };
        assert!(rs("1", "web", 1).same_for_scheduling(&rs("2", "web", 5)));
        assert!(!rs("1", "web", 1).same_for_scheduling(&rs("2", "api", 1)));
        let ns = |labels: Value| -> Namespace {
            serde_json::from_value(json!({"metadata": {"name": "a", "labels": labels}})).unwrap()
        };
        assert!(ns(json!({"t": "x"})).same_for_scheduling(&ns(json!({"t": "x"}))));
        assert!(!ns(json!({"t": "x"})).same_for_scheduling(&ns(json!({"t": "y"}))));
        let obj = ClusterObject::trimmed(rs("1", "web", 1));
        assert_eq!((obj.kind(), obj.key()), ("ReplicaSet", "n/r".to_string()));
    }
}
