//! Convoy's adapter to a real Kubernetes API server: the only crate linked
//! into the scheduler that does API IO. (Outside the scheduler,
//! `convoy-testenv` and `convoy-bench` use `kube`'s client too, as test
//! and benchmark clients.)
//!
//! - [`connect`]: a [`kube::Client`] from a kubeconfig or the in-cluster
//!   service account, with a client-go-style QPS/burst limit, and
//!   [`connect_fenced`] one guarded by a [`Fence`] that cuts it off when
//!   the replica loses its lease ([`fence`]).
//! - [`cluster_updates`]: watches Nodes, Pods, PodGroups (both APIs,
//!   through the dynamic API; [`pod_groups`]), Namespaces, Services,
//!   workload controllers, PodDisruptionBudgets, PriorityClasses, the
//!   volume kinds and the DRA kinds ([`objects`]), and yields the same
//!   [`convoy_api::ClusterUpdate`] stream as the embedded cluster. Which
//!   APIs the server serves, and in which version, comes from
//!   [`discovery`]: what it does not serve is an empty set, never a wait.
//! - [`ApiBinder`]: the [`convoy_api::Binder`] posting `pods/binding`,
//!   and writing VolumeBinding's and DynamicResources' PreBind updates.
//! - [`ApiActuator`]: the [`convoy_api::PreemptionActuator`]: victims'
//!   `DisruptionTarget` condition, DELETE and Event; nominations.
//! - [`StatusWriter`]: Events, the `PodScheduled` condition and PodGroup
//!   status, queued and rate-limited off the scheduling path.
//! - [`leader`]: leader election on a Lease.
//!
//! May depend on: `convoy-api`, `kube`, `k8s-openapi`, `tokio`, `futures`,
//! tower's traits. Scheduling logic lives elsewhere; nothing here decides.

pub mod backoff;
pub mod binder;
mod claims;
pub mod client;
mod custom;
pub mod discovery;
pub mod error;
pub mod events;
pub mod fence;
pub mod group_status;
mod initial_list;
pub mod leader;
pub mod objects;
pub mod pod_groups;
pub mod pods;
pub mod preemption;
mod rate;
pub mod status;
mod translator;
pub mod trim;
mod versioned;
pub mod watch;

pub use binder::ApiBinder;
pub use client::{RateLimit, RateLimitLayer, connect, connect_fenced};
pub use error::{AdapterError, Result};
pub use fence::{Fence, Fenced};
pub use group_status::{GroupReport, GroupReportOutcome};
pub use leader::{LeaderElection, LeaderHandle};
pub use preemption::ApiActuator;
pub use status::{StatusWriter, StatusWriterOptions};
pub use watch::{WatchOptions, cluster_updates, cluster_updates_reporting};
