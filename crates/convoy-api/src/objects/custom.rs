//! Custom resources that out-of-tree plugins read: the kinds a plugin
//! registered (`Registry::watch_kind`), watched from the API server as
//! discovery finds them, loaded from a `simulate` cluster file on the
//! embedded cluster, and kept as JSON for the plugins, which read them
//! through [`ObjectLister::custom_objects`](super::ObjectLister::custom_objects)
//! and its siblings. A change of
//! one is a cluster event (`EventResource::Custom`), so a plugin's queueing
//! hints can release the pods it rejected.

use crate::apis::ApiInfo;

/// One custom resource: its API as registered and the object as JSON
/// (`apiVersion`, `kind`, `metadata`, `spec`, `status`; managed fields
/// left out).
#[derive(Debug, Clone, PartialEq)]
pub struct CustomObject {
    /// The API it belongs to.
    pub api: ApiInfo,
    /// The object.
    pub object: serde_json::Value,
}

impl CustomObject {
    /// An object of `api` (its `metadata.managedFields` dropped).
    pub fn new(api: ApiInfo, mut object: serde_json::Value) -> Self {
        if let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("managedFields");
        }
        Self { api, object }
    }

    fn meta(&self, field: &str) -> Option<&str> {
        self.object.get("metadata")?.get(field)?.as_str()
    }

    /// `metadata.name` (empty when unset).
    pub fn name(&self) -> &str {
        self.meta("name").unwrap_or("")
    }

    /// `metadata.namespace`, for a namespaced kind.
    pub fn namespace(&self) -> Option<&str> {
        self.meta("namespace")
    }

    /// `metadata.resourceVersion` (empty when unset).
    pub fn resource_version(&self) -> &str {
        self.meta("resourceVersion").unwrap_or("")
    }

    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn key(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{ns}/{}", self.name()),
            None => self.name().to_string(),
        }
    }

    /// The value at a JSON pointer (`/spec/unhealthy`).
    pub fn pointer(&self, pointer: &str) -> Option<&serde_json::Value> {
        self.object.pointer(pointer)
    }

    /// The object decoded into a type of the plugin's own.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.object)
    }
}
