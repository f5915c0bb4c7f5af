//! `churn` on the embedded target: nodes, pods and the kinds of
//! [`ClusterObject`](convoy_api::ClusterObject), created and deleted in the cluster directly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use convoy_embedded::EmbeddedCluster;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::any::{EmbeddedObject, embedded_object, embedded_scope, type_of};
use crate::measure::evictions::OwnDeletes;
use crate::runner::churn::Churner;

/// What the background `churn` task of one op creates and deletes with.
pub(crate) struct EmbeddedChurner {
    pub(super) cluster: Arc<EmbeddedCluster>,
    pub(super) templates: Vec<Value>,
    pub(super) namespace: String,
    pub(super) scheduler_name: String,
    pub(super) op_index: usize,
    pub(super) serial: AtomicU64,
    /// Pods it deletes are not evictions.
    pub(super) own_deletes: OwnDeletes,
}

impl Churner for EmbeddedChurner {
    fn create(&self, template: usize) -> BoxFuture<'_, Option<String>> {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed) + 1;
        let v = self.templates[template].clone();
        let ns = embedded_scope(&v).unwrap_or(false).then_some(self.namespace.as_str());
        let prefix = format!("churn-{}-", self.op_index);
        let created = match embedded_object(v, ns, &self.scheduler_name, &prefix, serial) {
            Ok(EmbeddedObject::Node(n)) => self
                .cluster
                .add_node(*n)
                .map(|n| n.metadata.name.clone())
                .map_err(|e| e.to_string()),
            Ok(EmbeddedObject::Pod(p)) => {
                self.cluster.add_pod(*p).map(|p| p.metadata.name.clone()).map_err(|e| e.to_string())
            }
            // Deleted by kind and key (`namespace/name`).
            Ok(EmbeddedObject::Object(o)) => {
                let key = o.key();
                self.cluster.apply_object(o).map(|()| Some(key)).map_err(|e| e.to_string())
            }
            // Checked when the churn op started: no PodGroups or templates.
            Ok(EmbeddedObject::PodGroup(_) | EmbeddedObject::ResourceClaimTemplate(_)) => Ok(None),
            Err(e) => Err(e),
        };
        Box::pin(std::future::ready(created.unwrap_or_else(|e| {
            tracing::warn!("churn: {e}");
            None
        })))
    }

    fn delete(&self, template: usize, name: String) -> BoxFuture<'_, ()> {
        let deleted = match type_of(&self.templates[template]) {
            Ok((_, "Node")) => self.cluster.delete_node(&name).map(drop),
            Ok((_, "Pod")) => {
                self.own_deletes.mark(&self.namespace, &name);
                self.cluster.delete_pod(&self.namespace, &name).map(drop)
            }
            Ok((_, kind)) => self.cluster.delete_object(kind, &name).map(drop),
            Err(_) => Ok(()),
        };
        if let Err(e) = deleted {
            tracing::warn!("churn: {e}");
        }
        Box::pin(std::future::ready(()))
    }
}
