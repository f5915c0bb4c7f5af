//! The custom resources of the kinds out-of-tree plugins registered
//! (`Registry::watch_kind`), as JSON by kind; a plugin reads them through
//! [`convoy_api::ObjectLister`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use convoy_api::{ApiInfo, CustomObject};

#[derive(Debug, Default)]
struct Kind {
    objects: BTreeMap<String, Arc<CustomObject>>,
    /// Bumped on every change.
    version: u64,
}

/// The custom resources of every registered kind: one writer (the
/// scheduler's event path), many readers (plugins).
#[derive(Debug, Default)]
pub struct CustomObjects {
    kinds: RwLock<HashMap<ApiInfo, Kind>>,
}

impl CustomObjects {
    /// An object was added or changed; returns the version it replaces.
    pub fn apply(&self, obj: Arc<CustomObject>) -> Option<Arc<CustomObject>> {
        let mut kinds = self.kinds.write().unwrap_or_else(|e| e.into_inner());
        let kind = kinds.entry(obj.api).or_default();
        kind.version += 1;
        kind.objects.insert(obj.key(), obj)
    }

    /// An object was deleted; returns the version that was held.
    pub fn delete(&self, obj: &CustomObject) -> Option<Arc<CustomObject>> {
        let mut kinds = self.kinds.write().unwrap_or_else(|e| e.into_inner());
        let kind = kinds.get_mut(&obj.api)?;
        let old = kind.objects.remove(&obj.key());
        if old.is_some() {
            kind.version += 1;
        }
        old
    }

    /// Every object of `api`, by `namespace/name`.
    pub fn list(&self, api: &ApiInfo) -> Vec<Arc<CustomObject>> {
        let kinds = self.kinds.read().unwrap_or_else(|e| e.into_inner());
        kinds.get(api).map(|k| k.objects.values().cloned().collect()).unwrap_or_default()
    }

    /// One object of `api` by namespace (`None` for a cluster-scoped kind)
    /// and name.
    pub fn get(
        &self,
        api: &ApiInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Arc<CustomObject>> {
        let key = match namespace {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        };
        let kinds = self.kinds.read().unwrap_or_else(|e| e.into_inner());
        kinds.get(api)?.objects.get(&key).cloned()
    }

    /// A number bumped on every change of `api`'s objects: a plugin that
    /// derives something from them recomputes it only when it changed.
    pub fn version(&self, api: &ApiInfo) -> u64 {
        let kinds = self.kinds.read().unwrap_or_else(|e| e.into_inner());
        kinds.get(api).map_or(0, |k| k.version)
    }

    /// Forgets every object of `api` (the API is no longer served); returns
    /// them.
    pub fn forget(&self, api: &ApiInfo) -> Vec<Arc<CustomObject>> {
        let mut kinds = self.kinds.write().unwrap_or_else(|e| e.into_inner());
        kinds.remove(api).map(|k| k.objects.into_values().collect()).unwrap_or_default()
    }

    /// Objects held per kind (for reports).
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let kinds = self.kinds.read().unwrap_or_else(|e| e.into_inner());
        kinds.iter().map(|(api, k)| (api.kind, k.objects.len())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HEALTH: ApiInfo = ApiInfo {
        group: "example.com",
        resource: "gpuhealths",
        kind: "GpuHealth",
        readable: &["v1alpha1"],
    };

    fn health(name: &str, rv: &str, unhealthy: u32) -> Arc<CustomObject> {
        Arc::new(CustomObject::new(
            HEALTH,
            json!({"apiVersion": "example.com/v1alpha1", "kind": "GpuHealth",
                   "metadata": {"name": name, "resourceVersion": rv, "managedFields": [{}]},
                   "spec": {"unhealthy": unhealthy}}),
        ))
    }

    #[test]
    fn apply_get_list_delete() {
        let store = CustomObjects::default();
        assert!(store.apply(health("n0", "1", 1)).is_none());
        assert!(health("n0", "1", 1).object["metadata"].get("managedFields").is_none());
        let old = store.apply(health("n0", "2", 0)).unwrap();
        assert_eq!(old.resource_version(), "1");
        store.apply(health("n1", "3", 2));
        assert_eq!(store.version(&HEALTH), 3);
        let n1 = store.get(&HEALTH, None, "n1").unwrap();
        assert_eq!(n1.pointer("/spec/unhealthy"), Some(&json!(2)));
        #[derive(serde::Deserialize)]
        struct Spec {
            unhealthy: u32,
        }
        #[derive(serde::Deserialize)]
        struct Health {
            spec: Spec,
        }
        assert_eq!(n1.decode::<Health>().unwrap().spec.unhealthy, 2);
        assert_eq!(store.list(&HEALTH).len(), 2);
        assert!(store.delete(&health("n0", "4", 0)).is_some());
        assert!(store.delete(&health("n0", "4", 0)).is_none());
        assert_eq!(store.counts()["GpuHealth"], 1);
        assert_eq!(store.forget(&HEALTH).len(), 1);
        assert!(store.list(&HEALTH).is_empty());
    }
}
