//! The cluster objects besides nodes, pods and PodGroups that plugins read
//! (upstream's informer listers): Namespaces (their labels feed pod
//! affinity's `namespaceSelector`), and the Services, ReplicationControllers,
//! ReplicaSets and StatefulSets whose selectors make the default topology
//! spreading constraints.
//!
//! The scheduler applies every [`ClusterObject`] update to one
//! [`ClusterObjects`] store, which every profile's plugins share through the
//! [`Handle`](crate::Handle). Only what scheduling reads is kept (labels and
//! selectors), not the objects.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, ReplicationController, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::labels::{Labels, Selector};

pub mod trim;

pub use trim::ObjectKind;

/// An object of a kind the scheduler watches besides nodes, pods and
/// PodGroups.
#[derive(Debug, Clone)]
pub enum ClusterObject {
    /// A Namespace (its labels).
    Namespace(Arc<Namespace>),
    /// A Service (its selector).
    Service(Arc<Service>),
    /// A ReplicationController (its selector).
    ReplicationController(Arc<ReplicationController>),
    /// A ReplicaSet (its selector).
    ReplicaSet(Arc<ReplicaSet>),
    /// A StatefulSet (its selector).
    StatefulSet(Arc<StatefulSet>),
}

impl ClusterObject {
    /// The object's kind (`Namespace`, `Service`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            ClusterObject::Namespace(_) => "Namespace",
            ClusterObject::Service(_) => "Service",
            ClusterObject::ReplicationController(_) => "ReplicationController",
            ClusterObject::ReplicaSet(_) => "ReplicaSet",
            ClusterObject::StatefulSet(_) => "StatefulSet",
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            ClusterObject::Namespace(o) => &o.metadata,
            ClusterObject::Service(o) => &o.metadata,
            ClusterObject::ReplicationController(o) => &o.metadata,
            ClusterObject::ReplicaSet(o) => &o.metadata,
            ClusterObject::StatefulSet(o) => &o.metadata,
        }
    }

    /// `namespace/name`, or `name` for a Namespace.
    pub fn key(&self) -> String {
        let m = self.metadata();
        let name = m.name.as_deref().unwrap_or("");
        match self {
            ClusterObject::Namespace(_) => name.to_string(),
            _ => format!("{}/{name}", m.namespace.as_deref().unwrap_or("default")),
        }
    }
}

type NsName = (Arc<str>, Arc<str>);

#[derive(Debug, Default)]
struct Inner {
    namespaces: HashMap<Arc<str>, Arc<Labels>>,
    /// Bumped on every Namespace added, changed or deleted.
    namespaces_version: u64,
    /// Services with a selector, by namespace then name (a Service without
    /// a selector selects no pod).
    services: HashMap<Arc<str>, BTreeMap<Arc<str>, Arc<Labels>>>,
    replication_controllers: HashMap<NsName, Arc<Labels>>,
    replica_sets: HashMap<NsName, Arc<LabelSelector>>,
    stateful_sets: HashMap<NsName, Arc<LabelSelector>>,
}

/// The store of [`ClusterObject`]s: one writer (the scheduler's event
/// path), many readers (plugins, once per cycle at most). Reads take a
/// short read lock and return shared values.
#[derive(Debug, Default)]
pub struct ClusterObjects {
    inner: RwLock<Inner>,
}

fn ns_name(m: &ObjectMeta) -> NsName {
    (
        Arc::from(m.namespace.as_deref().unwrap_or("default")),
        Arc::from(m.name.as_deref().unwrap_or("")),
    )
}

impl ClusterObjects {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// An object was added or changed.
    pub fn apply(&self, obj: &ClusterObject) {
        let mut st = self.write();
        let m = obj.metadata();
        match obj {
            ClusterObject::Namespace(ns) => {
                let labels = ns.metadata.labels.clone().unwrap_or_default();
                st.namespaces.insert(ns_name(m).1, Arc::new(labels));
                st.namespaces_version += 1;
            }
            ClusterObject::Service(s) => {
                let (ns, name) = ns_name(m);
                match s.spec.as_ref().and_then(|s| s.selector.clone()) {
                    Some(sel) => {
                        st.services.entry(ns).or_default().insert(name, Arc::new(sel));
                    }
                    None => {
                        if let Some(by_name) = st.services.get_mut(&ns) {
                            by_name.remove(&name);
                        }
                    }
                }
            }
            ClusterObject::ReplicationController(rc) => {
                let sel = rc.spec.as_ref().and_then(|s| s.selector.clone()).unwrap_or_default();
                st.replication_controllers.insert(ns_name(m), Arc::new(sel));
            }
            ClusterObject::ReplicaSet(rs) => {
                let sel = rs.spec.selector.clone();
                st.replica_sets.insert(ns_name(m), Arc::new(sel));
            }
            ClusterObject::StatefulSet(ss) => {
                let sel = ss.spec.selector.clone();
                st.stateful_sets.insert(ns_name(m), Arc::new(sel));
            }
        }
    }

    /// An object was deleted.
    pub fn delete(&self, obj: &ClusterObject) {
        let mut st = self.write();
        let key = ns_name(obj.metadata());
        match obj {
            ClusterObject::Namespace(_) => {
                st.namespaces.remove(&key.1);
                st.namespaces_version += 1;
            }
            ClusterObject::Service(_) => {
                if let Some(by_name) = st.services.get_mut(&key.0) {
                    by_name.remove(&key.1);
                    if by_name.is_empty() {
                        st.services.remove(&key.0);
                    }
                }
            }
            ClusterObject::ReplicationController(_) => {
                st.replication_controllers.remove(&key);
            }
            ClusterObject::ReplicaSet(_) => {
                st.replica_sets.remove(&key);
            }
            ClusterObject::StatefulSet(_) => {
                st.stateful_sets.remove(&key);
            }
        }
    }

    /// The labels of a namespace; `None` when the namespace is unknown.
    pub fn namespace_labels(&self, name: &str) -> Option<Arc<Labels>> {
        self.read().namespaces.get(name).cloned()
    }

    /// A number that changes whenever a Namespace is added, changed or
    /// deleted: what a plugin derived from the namespaces (such as the
    /// namespaces a selector selects) stays valid while it is unchanged.
    pub fn namespaces_version(&self) -> u64 {
        self.read().namespaces_version
    }

    /// The names of the namespaces whose labels match, sorted.
    pub fn namespaces_matching(&self, selector: &Selector) -> Vec<Arc<str>> {
        let mut v: Vec<Arc<str>> = self
            .read()
            .namespaces
            .iter()
            .filter(|(_, l)| selector.matches(l))
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }

    /// The selectors of the Services in a namespace that have one, by name.
    pub fn service_selectors(&self, namespace: &str) -> Vec<Arc<Labels>> {
        self.read()
            .services
            .get(namespace)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// A ReplicationController's selector (empty when it has none).
    pub fn replication_controller_selector(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Labels>> {
        self.read().replication_controllers.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    /// A ReplicaSet's selector.
    pub fn replica_set_selector(&self, namespace: &str, name: &str) -> Option<Arc<LabelSelector>> {
        self.read().replica_sets.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    /// A StatefulSet's selector.
    pub fn stateful_set_selector(&self, namespace: &str, name: &str) -> Option<Arc<LabelSelector>> {
        self.read().stateful_sets.get(&(Arc::from(namespace), Arc::from(name))).cloned()
    }

    /// How many objects of each kind are held (for logs and tests).
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let st = self.read();
        BTreeMap::from([
            ("Namespace", st.namespaces.len()),
            ("Service", st.services.values().map(BTreeMap::len).sum()),
            ("ReplicationController", st.replication_controllers.len()),
            ("ReplicaSet", st.replica_sets.len()),
            ("StatefulSet", st.stateful_sets.len()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    macro_rules! obj {
        ($v:expr) => {
            Arc::new(serde_json::from_value($v).unwrap())
        };
    }

    #[test]
    fn keeps_labels_and_selectors() {
        let s = ClusterObjects::new();
        let ns = ClusterObject::Namespace(obj!(
            json!({"metadata": {"name": "a", "labels": {"team": "x"}}})
        ));
        s.apply(&ns);
        s.apply(&ClusterObject::Namespace(obj!(json!({"metadata": {"name": "b"}}))));
        let team = Selector::from_set(&[("team".to_string(), "x".to_string())].into());
        let v = s.namespaces_version();
        assert_eq!(s.namespaces_matching(&team), vec![Arc::from("a")]);
        assert_eq!(s.namespaces_matching(&Selector::everything()).len(), 2);
        assert_eq!(s.namespace_labels("a").unwrap().get("team").unwrap(), "x");
        s.delete(&ns);
        assert!(s.namespace_labels("a").is_none());
        assert_ne!(s.namespaces_version(), v, "a namespace change changes the version");

        let svc =
            ClusterObject::Service(obj!(json!({"metadata": {"name": "web", "namespace": "n"},
            "spec": {"selector": {"app": "web"}}})));
        s.apply(&svc);
        s.apply(&ClusterObject::Service(obj!(
            json!({"metadata": {"name": "headless", "namespace": "n"}, "spec": {}})
        )));
        assert_eq!(s.service_selectors("n").len(), 1);
        s.delete(&svc);
        assert!(s.service_selectors("n").is_empty());

        let rs =
            ClusterObject::ReplicaSet(obj!(json!({"metadata": {"name": "r", "namespace": "n"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}})));
        s.apply(&rs);
        assert!(s.replica_set_selector("n", "r").is_some());
        assert!(s.stateful_set_selector("n", "r").is_none());
        assert_eq!(rs.key(), "n/r");
        assert_eq!(s.counts()["ReplicaSet"], 1);
    }
}
