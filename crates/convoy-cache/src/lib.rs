//! Convoy's cluster cache and per-cycle snapshot: upstream's
//! `pkg/scheduler/backend/cache` (`cache.go`, `snapshot.go`, `node_tree.go`).
//!
//! The [`Cache`] holds every node and every pod assigned to a node, by any
//! scheduler, plus the pods this scheduler has placed but not yet seen bound
//! ("assumed"), so that the next cycles count them. At the start of each
//! cycle the scheduling loop calls [`Cache::update_snapshot`], which copies
//! into its [`Snapshot`] only the nodes changed since the previous cycle.
//!
//! May depend on: `convoy-api` (NodeInfo, PodInfo, Clock), `k8s-openapi`
//! (object types), `parking_lot`, `thiserror`, `tracing`. Does no IO: the
//! event loop feeds it watch events and calls
//! [`Cache::cleanup_expired_assumed_pods`] periodically.
//!
//! # The pod state machine
//!
//! ```text
//!                  +-------------------------------------------+  +----+
//!                  |                 add_pod                   |  |    | update_pod
//!                  |                                           v  v    |
//!   Initial ---assume_pod---> Assumed ----add_pod----------> Added ---+
//!      ^                      |     |   (confirm; moves the     |
//!      |                      |     |    pod if the watch       | remove_pod, or
//!      +-----forget_pod-------+     |    shows another node)    | update_pod to a
//!      |   (binding failed)         |                           | terminal phase
//!      |                            |                           v
//!      |     cleanup_expired_assumed_pods                    Deleted
//!      +----- (binding finished > ttl ago, never confirmed) = Expired
//!                                   |
//!                                   +-- remove_pod (deleted while binding) --> Deleted
//! ```
//!
//! - **Initial**, **Expired**, **Forgotten** and **Deleted** pods are not in
//!   the cache; **Assumed** and **Added** pods are, and count on their node.
//! - `assume_pod` is the scheduling loop's; `finish_binding` (starts the
//!   expiry clock: now + ttl) and `forget_pod` are the binding task's; `add_pod`,
//!   `update_pod`, `remove_pod` are the watch's (the event loop's). The watch
//!   never sends an update or a delete for a pod before its add, except for a
//!   pod deleted while its binding was in flight.
//! - An Expired pod that the watch later adds comes back as Added (a normal
//!   add of an unknown pod).
//! - Terminal pods (Succeeded/Failed) hold no resources: a pod updated to a
//!   terminal phase is Deleted, and adding or removing one the cache does not
//!   hold is a no-op.
//!
//! # Nodes
//!
//! A node is real once the watch reported it. A pod on a node not seen yet
//! creates a **placeholder** for that node (counted, never in snapshots); a
//! removed node whose pods the watch has not yet removed stays as a
//! placeholder until its last pod goes (pod and node events arrive on
//! different watches, in any order).
//!
//! # Snapshots
//!
//! Nodes are stored as `Arc<NodeInfo>` and written copy-on-write
//! (`Arc::make_mut`): the snapshot shares every node with the cache, and a
//! write copies only a node the snapshot still holds. Each write bumps the
//! node's generation and records the node as changed; `update_snapshot` swaps
//! in the changed nodes only, and rebuilds the zone-interleaved node list only
//! when nodes were added, removed or changed zone. The lists of nodes hosting
//! pods with pod affinity are updated the same way: a changed node takes its
//! place in them (upstream rebuilds them whenever such a node changed, which
//! costs an `Arc` clone and drop per listed node on every cycle of a
//! workload whose pods all have affinity).

mod cache;
mod error;
mod invariants;
mod node_tree;
mod snapshot;
mod state;

pub use cache::{Cache, DEFAULT_ASSUMED_POD_TTL};
pub use error::{CacheError, Result};
pub use node_tree::{LABEL_REGION, LABEL_REGION_BETA, LABEL_ZONE, LABEL_ZONE_BETA, zone_key};
pub use snapshot::Snapshot;
pub use state::ExpiredPod;

#[cfg(test)]
mod tests;
