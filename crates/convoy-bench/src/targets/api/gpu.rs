//! `createGpuJobs` on the API-server target: jobs created and deleted
//! through the API, nodes and pods (and, with DRA devices, ResourceSlices
//! and ResourceClaims) read from reflector stores (a list, then a watch).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::Value;

use super::dynamic::{Dynamic, Placement};
use crate::gpu::{DraObject, SYNC_TIMEOUT, Target};
use crate::measure::evictions::OwnDeletes;

/// An API server: creates and deletes through the API, reads nodes and
/// pods from reflector stores (list, then watch).
pub(crate) struct ApiGpu {
    client: kube::Client,
    dynamic: Arc<Dynamic>,
    nodes: reflector::Store<Node>,
    pods: reflector::Store<Pod>,
    /// ResourceSlices and ResourceClaims (DRA only).
    dra: Option<(reflector::Store<ResourceSlice>, reflector::Store<ResourceClaim>)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// `apiVersion` of the PodGroups created (for deleting them).
    group_api: parking_lot::Mutex<Option<String>>,
    /// Where the pods it deletes are recorded (ends of life are not
    /// evictions).
    own_deletes: OwnDeletes,
}

impl ApiGpu {
    /// Starts the stores (with `dra`, ResourceSlices and ResourceClaims
    /// too) and waits until they have listed.
    pub(crate) async fn start(
        client: kube::Client,
        dynamic: Arc<Dynamic>,
        own_deletes: OwnDeletes,
        dra: bool,
    ) -> Result<Self, String> {
        let mut tasks = Vec::new();
        let nodes = watched::<Node>(&client, &mut tasks);
        let pods = watched::<Pod>(&client, &mut tasks);
        let dra = dra.then(|| {
            (
                watched::<ResourceSlice>(&client, &mut tasks),
                watched::<ResourceClaim>(&client, &mut tasks),
            )
        });
        let ready = async {
            nodes.wait_until_ready().await.map_err(|e| e.to_string())?;
            pods.wait_until_ready().await.map_err(|e| e.to_string())?;
            if let Some((slices, claims)) = &dra {
                slices.wait_until_ready().await.map_err(|e| e.to_string())?;
                claims.wait_until_ready().await.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        };
        match tokio::time::timeout(SYNC_TIMEOUT, ready).await {
            Ok(Ok(())) => Ok(Self {
                client,
                dynamic,
                nodes,
                pods,
                dra,
                tasks,
                group_api: Default::default(),
                own_deletes,
            }),
            Ok(Err(e)) => Err(format!("cluster stores: {e}")),
            Err(_) => Err("cluster stores did not sync in 60s".into()),
        }
    }
}

/// A store of every `K`, kept by a reflector task pushed to `tasks`.
fn watched<K>(
    client: &kube::Client,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let stream = reflector(writer, watcher(Api::<K>::all(client.clone()), Default::default()))
        .default_backoff()
        .for_each(|_| async {});
    tasks.push(tokio::spawn(stream));
    store
}

impl Drop for ApiGpu {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Target for ApiGpu {
    fn create_pod(&self, pod: Pod) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            Api::<Pod>::namespaced(self.client.clone(), &ns)
                .create(&PostParams::default(), &pod)
                .await
                .map(drop)
                .map_err(|e| format!("creating pod {}: {e}", pod.metadata.name.unwrap_or_default()))
        })
    }
    fn create_group(&self, group: Value) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            if let Some(v) = group["apiVersion"].as_str() {
                *self.group_api.lock() = Some(v.to_string());
            }
            let ns = group["metadata"]["namespace"].as_str().map(str::to_string);
            self.dynamic.create(&group, Placement::Strict(ns.as_deref())).await.map(drop)
        })
    }
    fn delete_pod(&self, namespace: String, name: String) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.own_deletes.mark(&namespace, &name);
            let dp = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            match Api::<Pod>::namespaced(self.client.clone(), &namespace).delete(&name, &dp).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(format!("deleting pod {name}: {e}")),
            }
        })
    }
    fn mark_started(&self, namespace: String, name: String) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let now = k8s_openapi::jiff::Timestamp::now();
            let patch = serde_json::json!({"status": {"startTime": Time(now)}});
            let api = Api::<Pod>::namespaced(self.client.clone(), &namespace);
            match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()), // ended already
                Err(e) => Err(format!("marking pod {name} started: {e}")),
            }
        })
    }
    fn delete_group(&self, namespace: String, name: String) -> BoxFuture<'_, Result<(), String>> {
        // Deleted, not left behind: a group that failed keeps counting for
        // the scheduler (Convoy's starvation guard would hold other pods
        // back for it).
        Box::pin(async move {
            let Some(api_version) = self.group_api.lock().clone() else { return Ok(()) };
            let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
            let gvk = kube::api::GroupVersionKind::gvk(group, version, "PodGroup");
            let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "podgroups");
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(self.client.clone(), &namespace, &ar);
            let dp = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            match api.delete(&name, &dp).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(format!("deleting PodGroup {name}: {e}")),
            }
        })
    }
    fn create_dra(&self, obj: DraObject) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let pp = PostParams::default();
            let c = self.client.clone();
            let r = match &obj {
                DraObject::Class(o) => Api::<DeviceClass>::all(c).create(&pp, o).await.map(drop),
                DraObject::Slice(o) => Api::<ResourceSlice>::all(c).create(&pp, o).await.map(drop),
                DraObject::Template(o) => {
                    let ns = o.metadata.namespace.as_deref().unwrap_or("default");
                    Api::<ResourceClaimTemplate>::namespaced(c, ns).create(&pp, o).await.map(drop)
                }
            };
            r.map_err(|e| {
                let (kind, name) = match &obj {
                    DraObject::Class(o) => ("DeviceClass", &o.metadata.name),
                    DraObject::Slice(o) => ("ResourceSlice", &o.metadata.name),
                    DraObject::Template(o) => ("ResourceClaimTemplate", &o.metadata.name),
                };
                format!("creating {kind} {}: {e}", name.as_deref().unwrap_or(""))
            })
        })
    }
    fn objects(&self) -> (Vec<Arc<Node>>, Vec<Arc<Pod>>) {
        (self.nodes.state(), self.pods.state())
    }
    fn devices(&self) -> (Vec<Arc<ResourceSlice>>, Vec<Arc<ResourceClaim>>) {
        self.dra.as_ref().map_or_else(Default::default, |(s, c)| (s.state(), c.state()))
    }
    fn poll(&self) -> Duration {
        Duration::from_millis(20)
    }
}
