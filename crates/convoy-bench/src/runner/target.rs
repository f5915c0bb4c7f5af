//! What differs between targets, as the runner sees it.

use std::future::Future;
use std::time::Duration;

use convoy_api::PodKey;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::api::storage::v1::CSINode;
use serde_json::Value;

use super::churn::Churner;
use super::tracker::Created;
use crate::dra::DraState;
use crate::volumes::ClaimAndVolume;

/// What differs between targets: how the scheduler starts and stops, how
/// objects reach the cluster, how pods are deleted, how `churn` and
/// `createGpuJobs` reach it, and what a timed-out wait can add. Binds and
/// attempts are not here: the target feeds them to the
/// [`PodTracker`](super::tracker::PodTracker) it was given.
///
/// A method is `async` where an API server makes it a round trip; the
/// embedded target answers at once.
pub(crate) trait Target {
    /// What `churn` creates and deletes with.
    type Churner: Churner;
    /// What `createGpuJobs` runs against.
    type Gpu: crate::gpu::Target;
    /// How often a wait looks at the tracker.
    const POLL: Duration;
    /// Whether a wait for every pod of some namespaces may count the bound
    /// pods of those namespaces instead of looking each pod up: true where
    /// the benchmark alone writes to a fresh cluster (the embedded target,
    /// which polls every millisecond), false on an API server that may
    /// hold pods of earlier runs.
    const COUNT_PER_NAMESPACE: bool;

    /// Starts the scheduler under test: before the first step, or at
    /// `startScheduler`.
    async fn start_scheduler(&mut self) -> Result<(), String>;
    /// Stops the scheduler and what feeds the tracker, once the steps are
    /// over (the evictions are read after).
    async fn stop(&mut self);
    /// The profile (`schedulerName`) the benchmark's pods name.
    fn scheduler_name(&self) -> &str;
    /// Whether Convoy is the scheduler (what `createPodGroups` logs).
    fn runs_convoy(&self) -> bool;
    /// Creates the namespace unless it exists; as upstream's
    /// `createNamespaceIfNotPresent`, an existing one is kept as it is.
    async fn add_namespace(&mut self, ns: Namespace) -> Result<(), String>;
    /// `--prepare`: applies one manifest; returns the pods it created
    /// (namespace, pod).
    async fn prepare(
        &mut self,
        manifest: &Value,
        serial: &mut u64,
    ) -> Result<Vec<(String, Created)>, String>;
    /// Creates nodes and, for volume workloads, their CSINodes.
    async fn create_nodes(
        &mut self,
        nodes: Vec<Node>,
        csi_nodes: Vec<CSINode>,
    ) -> Result<(), String>;
    /// Creates each pod's claim and volume, bound to each other.
    async fn create_volumes(
        &mut self,
        namespace: &str,
        all: Vec<ClaimAndVolume>,
    ) -> Result<(), String>;
    /// Readies a `createPods` step's pods before its window opens.
    async fn prepare_pods(&self, _namespace: &str, _pods: &mut [Pod]) -> Result<(), String> {
        Ok(())
    }
    /// Creates one pod (of a steady state, or of [`Target::create_pods`]).
    fn create_pod(&self, pod: Pod) -> impl Future<Output = Result<(), String>>;
    /// Creates the pods of a `createPods` step, readied by
    /// [`Target::prepare_pods`]: one at a time unless the target has a
    /// better way.
    async fn create_pods(&self, _namespace: &str, pods: Vec<Pod>) -> Result<(), String> {
        for pod in pods {
            self.create_pod(pod).await?;
        }
        Ok(())
    }
    /// Deletes a pod as the API server does (one with finalizers is only
    /// marked). The caller has recorded it in `own_deletes`.
    fn delete_pod(&self, key: PodKey) -> impl Future<Output = Result<(), String>>;
    /// Deletes pods (`deletePods` at full speed): one at a time unless the
    /// target has a better way.
    async fn delete_pods(&self, keys: Vec<PodKey>) -> Result<(), String> {
        for key in keys {
            self.delete_pod(key).await?;
        }
        Ok(())
    }
    /// Creates the objects of `createAny` / `createPodGroups` (registered
    /// with the group tracker already) in `namespace` (`None` for
    /// cluster-scoped kinds); `prefix` and `serial` name unnamed objects
    /// where the target names them. Returns the pods created.
    async fn create_objects(
        &mut self,
        objects: Vec<Value>,
        namespace: Option<&str>,
        prefix: &str,
        serial: &mut u64,
    ) -> Result<Vec<(String, Created)>, String>;
    /// `updateAny`: `object` (named) replaces the object of its name in
    /// `namespace` (`None` for cluster-scoped kinds), as an update (not a
    /// patch) does on an API server; with `subresources`, only those
    /// (`status`, `resize`) are updated.
    async fn update_object(
        &mut self,
        object: Value,
        namespace: Option<&str>,
        subresources: &[String],
    ) -> Result<(), String>;
    /// What `churn` creates from `templates` in `namespace` (which exists).
    async fn churner(
        &mut self,
        templates: Vec<Value>,
        namespace: &str,
        op_index: usize,
    ) -> Result<Self::Churner, String>;
    /// What `allocResourceClaims` reads.
    async fn dra_state(&self) -> Result<DraState, String>;
    /// Writes the allocations `allocResourceClaims` computed.
    async fn write_claims(&self, claims: Vec<ResourceClaim>) -> Result<(), String>;
    /// What `createGpuJobs` runs against (`dra`: with DRA devices).
    async fn gpu_target(&self, dra: bool) -> Result<Self::Gpu, String>;
    /// What a timed-out wait adds to its message.
    fn timeout_note(&self) -> String;
    /// How the cluster shows pods a wait gave up on (none by default).
    async fn describe_pods(&self, _keys: &[PodKey]) -> Vec<String> {
        Vec::new()
    }
}
