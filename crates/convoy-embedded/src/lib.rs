//! An in-memory cluster, so that the very same scheduler runs with no API
//! server: `convoy-scheduler simulate`, scenario tests and benchmarks.
//!
//! [`parse_objects`] / [`load_file`] read nodes, pods, PodGroups,
//! and the other objects plugins read (namespaces, workload controllers,
//! budgets, PriorityClasses, claims, volumes, StorageClasses, CSINodes,
//! CSIDrivers, CSIStorageCapacities, and the `resource.k8s.io/v1`
//! DeviceClasses, ResourceSlices, ResourceClaims and
//! ResourceClaimTemplates) from YAML or JSON (single
//! objects, `---` streams, `kind: List` as `kubectl get -o yaml` prints it,
//! so a dump of a real cluster, whose other kinds are skipped and counted)
//! and check them up front, with errors naming the document, the object
//! and the field. [`EmbeddedCluster`] holds them,
//! produces the same [`ClusterUpdate`](convoy_api::ClusterUpdate) stream as
//! the API-server adapter (every node, every pod, then `Synced`), emulates
//! the resourceclaim controller (claims made from templates for pods,
//! released and deallocated when pods go), and
//! implements [`Binder`](convoy_api::Binder) as the API server's
//! `pods/binding` does, in O(1) and without waiting, and
//! [`PreemptionActuator`](convoy_api::PreemptionActuator) (victims deleted
//! at once, as with a zero grace period). Pods are created as
//! the API server creates them ([`prepare_pod_for_create`]: defaults, and
//! `matchLabelKeys` merged into pod affinity selectors, priority resolved
//! from the PriorityClasses as the Priority admission plugin does).
//!
//! May depend on: `convoy-api`, `k8s-openapi`, `tokio`'s sync channels, and
//! the YAML/JSON crates (`serde-saphyr`, `serde_json`,
//! `serde_path_to_error`). Never on a Kubernetes client.

pub mod admission;
pub mod cluster;
pub mod create;
pub mod load;

pub use cluster::{ClusterError, EmbeddedActuator, EmbeddedBinder, EmbeddedCluster, Eviction};
pub use create::prepare_pod_for_create;
pub use load::{
    InvalidObject, LoadError, Objects, PodGroupObject, RESOURCE_API_VERSION, load_file,
    load_file_with, parse_objects, parse_objects_with,
};
