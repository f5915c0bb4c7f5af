//! `createGpuJobs` on the embedded target: jobs created and deleted in the
//! cluster directly, nodes and pods read from it.

use std::sync::Arc;
use std::time::Duration;

use convoy_api::{ClusterObject, GroupKey, PodGroupApi};
use convoy_embedded::EmbeddedCluster;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use crate::gpu::{DraObject, Target};
use crate::measure::evictions::OwnDeletes;

/// The embedded cluster, and where the pods it deletes are recorded (ends
/// of life are not evictions).
pub(crate) struct EmbeddedGpu(pub(super) Arc<EmbeddedCluster>, pub(super) OwnDeletes);

impl Target for EmbeddedGpu {
    fn create_pod(&self, pod: Pod) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(std::future::ready(self.0.add_pod(pod).map(drop).map_err(|e| e.to_string())))
    }
    fn create_group(&self, group: Value) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(std::future::ready(
            self.0.apply_pod_group(&group).map(drop).map_err(|e| e.to_string()),
        ))
    }
    fn delete_pod(&self, namespace: String, name: String) -> BoxFuture<'_, Result<(), String>> {
        // Not found is fine: nothing else deletes these pods.
        self.1.mark(&namespace, &name);
        let _ = self.0.delete_pod(&namespace, &name);
        Box::pin(std::future::ready(Ok(())))
    }
    fn mark_started(&self, namespace: String, name: String) -> BoxFuture<'_, Result<(), String>> {
        let r = match self.0.pod(&namespace, &name) {
            Some(pod) => {
                let mut pod = (*pod).clone();
                pod.status.get_or_insert_with(Default::default).start_time =
                    Some(Time(k8s_openapi::jiff::Timestamp::now()));
                self.0.update_pod(pod).map(drop).map_err(|e| e.to_string())
            }
            None => Ok(()), // ended already
        };
        Box::pin(std::future::ready(r))
    }
    fn delete_group(&self, namespace: String, name: String) -> BoxFuture<'_, Result<(), String>> {
        // Whichever API the group was created in (not found is fine).
        for api in [PodGroupApi::XK8s, PodGroupApi::Upstream] {
            let _ = self.0.delete_pod_group(&GroupKey::new(api, &namespace, &name));
        }
        Box::pin(std::future::ready(Ok(())))
    }
    fn create_dra(&self, obj: DraObject) -> BoxFuture<'_, Result<(), String>> {
        let r = match obj {
            DraObject::Class(c) => self.0.apply_object(ClusterObject::DeviceClass(Arc::new(*c))),
            DraObject::Slice(s) => self.0.apply_object(ClusterObject::ResourceSlice(Arc::new(*s))),
            DraObject::Template(t) => self.0.apply_resource_claim_template(*t).map(drop),
        };
        Box::pin(std::future::ready(r.map_err(|e| e.to_string())))
    }
    fn objects(&self) -> (Vec<Arc<Node>>, Vec<Arc<Pod>>) {
        (self.0.nodes(), self.0.pods())
    }
    fn devices(&self) -> (Vec<Arc<ResourceSlice>>, Vec<Arc<ResourceClaim>>) {
        let (mut slices, mut claims) = (Vec::new(), Vec::new());
        for o in self.0.objects() {
            match o {
                ClusterObject::ResourceSlice(s) => slices.push(s),
                ClusterObject::ResourceClaim(c) => claims.push(c),
                _ => {}
            }
        }
        (slices, claims)
    }
    fn poll(&self) -> Duration {
        Duration::from_millis(2)
    }
}
