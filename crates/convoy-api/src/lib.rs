//! Convoy's plugin API: what a scheduling plugin sees and implements.
//!
//! Status codes ([`Status`], [`Code`]), one trait per extension point
//! ([`FilterPlugin`], [`ScorePlugin`], ...), the typed [`CycleState`],
//! [`NodeInfo`] and [`PodInfo`], resource arithmetic, the cluster events
//! plugins register for requeueing, and which pod fields Convoy evaluates
//! ([`pod_fields`]). Out-of-tree plugins depend on this crate alone.
//!
//! May depend on: `k8s-openapi` (object types), `convoy-config` (plugin
//! args), small pure crates. Does no IO and never depends on a client.

pub mod affinity;
pub mod apis;
pub mod clock;
pub mod cluster;
pub mod cycle_state;
pub mod events;
pub mod images;
pub mod labels;
pub mod lister;
pub mod names;
pub mod node_info;
pub mod objects;
pub mod plugin;
pub mod pod_fields;
pub mod pod_group;
pub mod pod_info;
pub mod pod_list;
pub mod preemption;
pub mod resource;
pub mod status;
/// Fixture builders for tests and benchmarks (`PodBuilder`, `NodeBuilder`,
/// `TestRng`, ...). Not part of the plugin API: compiled only for this
/// crate's own tests or with the `testing` cargo feature, which a crate
/// enables in its `[dev-dependencies]`:
/// `convoy-api = { workspace = true, features = ["testing"] }`.
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod writes;

pub use affinity::{AffinityTerm, PodAffinity, WeightedAffinityTerm};
pub use apis::{ApiInfo, ServedApis, Serving};
pub use clock::{Clock, FakeClock, RealClock};
pub use cluster::ClusterUpdate;
pub use cycle_state::{CycleState, StateData};
pub use events::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, QueueingHint,
    QueueingHintFn,
};
pub use images::{ImageStateSummary, ImageStates, NodeImage};
pub use labels::{Labels, Selector};
pub use lister::{NodeInfoLister, NodeList};
pub use node_info::{KUBELET_REJECTED_TAINT, NodeInfo, borrowed, next_generation};
pub use objects::{ClusterObject, CustomObject, ObjectLister};
pub use plugin::*;
pub use pod_fields::{UnevaluatedField, unevaluated_fields};
pub use pod_group::{GroupKey, InvalidPodGroup, PodGroup, PodGroupApi};
pub use pod_info::{ClaimVolumes, HostPort, InvalidPod, PodInfo, PodKey, Protocol, QueuedPodInfo};
pub use pod_list::PodList;
pub use preemption::{
    FilterRunner, NoActuator, NominatedPods, PodNominator, PostFilterContext, PreemptionActuator,
    PreemptionError, PreemptionGroups, RunningPreemptions,
};
pub use resource::{PodRequests, Resource};
pub use status::{Code, Reason, Status};
pub use writes::{ClaimRef, ClaimWrite, VolumeWrite};

/// Re-export of the Kubernetes object types plugins work with.
pub use k8s_openapi;
/// Re-export of serde, for an out-of-tree plugin's args type
/// (`#[derive(convoy_api::serde::Deserialize)]` with
/// `#[serde(crate = "convoy_api::serde")]`), so the plugin depends on
/// convoy-api alone.
pub use serde;
/// Re-export of serde_json (custom resources are JSON).
pub use serde_json;
