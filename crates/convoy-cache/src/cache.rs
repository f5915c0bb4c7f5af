//! The cache proper: nodes with their pods, the pod state machine (see the
//! crate docs), and incremental snapshots.

use std::sync::Arc;
use std::time::Duration;

use convoy_api::{Clock, NodeInfo, PodInfo, Resource};
use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;

use crate::error::Result;
use crate::snapshot::Snapshot;
use crate::state::{ExpiredPod, State};

/// How long an assumed pod whose binding finished may wait for the watch to
/// confirm it before it expires (upstream's default, 30 s).
pub const DEFAULT_ASSUMED_POD_TTL: Duration = Duration::from_secs(30);

/// The scheduler's view of the cluster: every node, and every pod assigned to
/// a node (by any scheduler) or assumed by this one.
///
/// All methods take `&self` and lock one internal mutex for a short, bounded
/// time; share the cache in an `Arc` between the event loop (nodes and pods
/// from the watch), the scheduling loop (`update_snapshot`, `assume_pod`) and
/// binding tasks (`finish_binding`, `forget_pod`). See the crate docs for the
/// pod state machine.
pub struct Cache {
    clock: Arc<dyn Clock>,
    ttl: Duration,
    state: Mutex<State>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("Cache")
            .field("ttl", &self.ttl)
            .field("nodes", &st.nodes.len())
            .field("pods", &st.pods.len())
            .field("assumed", &st.assumed.len())
            .finish()
    }
}

impl Cache {
    /// An empty cache reading `clock`, with [`DEFAULT_ASSUMED_POD_TTL`].
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self { clock, ttl: DEFAULT_ASSUMED_POD_TTL, state: Mutex::new(State::default()) }
    }

    /// Sets how long an assumed pod may wait for confirmation after its
    /// binding finished.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The assumed-pod TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    // ---- Nodes -------------------------------------------------------------

    /// A node was added (or is already known: same as [`Cache::update_node`]).
    /// A placeholder holding pods for this node becomes the real node.
    pub fn add_node(&self, node: Arc<Node>) {
        self.state.lock().upsert_node(node);
    }

    /// A node changed (or is new: same as [`Cache::add_node`]).
    pub fn update_node(&self, node: Arc<Node>) {
        self.state.lock().upsert_node(node);
    }

    /// A node was deleted. It leaves snapshots at once; if pods are still on
    /// it (their deletions arrive on another watch), it stays as a placeholder
    /// until the last one goes.
    pub fn remove_node(&self, name: &str) -> Result<()> {
        self.state.lock().remove_node(name)
    }

    // ---- Pods from the watch -------------------------------------------------

    /// A pod assigned to a node was seen by the watch. If it was assumed, it
    /// is confirmed (and moved if the watch shows another node than the one
    /// assumed). A pod on a node not seen yet creates a placeholder for it.
    /// A terminal pod (Succeeded/Failed) holds no resources: it is not added,
    /// and an assumed one is removed.
    pub fn add_pod(&self, pod: Arc<PodInfo>) -> Result<()> {
        self.state.lock().add_pod(pod)
    }

    /// An assigned pod changed. Its node entry is replaced; a pod that became
    /// terminal is removed (its resources are freed). An update of an assumed
    /// pod confirms it, as [`Cache::add_pod`]. A UID change is a deletion
    /// followed by an addition.
    pub fn update_pod(&self, old: &PodInfo, new: Arc<PodInfo>) -> Result<()> {
        self.state.lock().update_pod(old, new)
    }

    /// An assigned pod was deleted, or an assumed pod was deleted while its
    /// binding was in flight: its resources are released. Removing a terminal
    /// pod the cache no longer holds is not an error.
    pub fn remove_pod(&self, pod: &PodInfo) -> Result<()> {
        self.state.lock().remove_pod(pod, "removed").map(drop)
    }

    // ---- In-flight bindings --------------------------------------------------

    /// The scheduling cycle placed `pod` on `node`: the pod counts on the node
    /// from now on, for the next cycles, until the watch confirms it
    /// ([`Cache::add_pod`]), binding fails ([`Cache::forget_pod`]) or it
    /// expires. Fails when the pod is already in the cache.
    pub fn assume_pod(&self, pod: Arc<PodInfo>, node: &str) -> Result<()> {
        self.state.lock().assume(pod, node)
    }

    /// The binding of an assumed pod finished (the API call returned): the
    /// pod expires if the watch has not confirmed it within the TTL. No-op
    /// for a pod that is not assumed.
    pub fn finish_binding(&self, pod: &PodInfo) {
        let deadline = self.clock.now() + self.ttl;
        self.state.lock().finish_binding(pod, deadline);
    }

    /// Undoes [`Cache::assume_pod`] (Reserve was undone, or binding failed):
    /// the pod's resources are released. Fails when the pod is not assumed,
    /// or its `spec.nodeName` names another node than the one assumed.
    pub fn forget_pod(&self, pod: &PodInfo) -> Result<()> {
        self.state.lock().forget(pod)
    }

    /// Removes assumed pods whose binding finished more than the TTL ago and
    /// that the watch never confirmed; returns them for logging. The event
    /// loop calls this periodically (upstream: every second).
    pub fn cleanup_expired_assumed_pods(&self) -> Vec<ExpiredPod> {
        let now = self.clock.now();
        self.state.lock().expire(now)
    }

    /// Whether the pod with this UID (`namespace/name` for a pod without a
    /// UID) is assumed.
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.state.lock().assumed.contains(uid)
    }

    // ---- Snapshot ----------------------------------------------------------

    /// Brings `snapshot` up to date, in time proportional to the number of
    /// nodes changed since the last call: changed nodes are replaced by the
    /// cache's current `Arc`; the node list is rebuilt (in zone-interleaved
    /// order) only when nodes were added, removed or changed zone, and the
    /// lists of nodes with pod-affinity pods only when a changed node has or
    /// had such pods. The image counts are shared (an `Arc` clone).
    ///
    /// Change tracking assumes one consumer (the scheduling loop). A snapshot
    /// that is not the one last updated (a new one, a clone, or one used by
    /// another caller) is rebuilt in full, so the result is always correct.
    pub fn update_snapshot(&self, snapshot: &mut Snapshot) {
        let mut buf = std::mem::take(&mut snapshot.scratch);
        debug_assert!(buf.is_empty());
        // Room for a full list, allocated outside the lock.
        buf.reserve(snapshot.nodes.len() + 16);
        let (full, images) = {
            let mut st = self.state.lock();
            let full = st.collect_for_snapshot(&mut snapshot.generation, &mut buf);
            (full, st.images.clone())
        };
        snapshot.images = images;
        // Outside the lock: install the nodes (the replaced Arcs are dropped
        // here too, and with them any node copy only the snapshot held).
        match full {
            None => {}
            Some(true) => {
                std::mem::swap(&mut snapshot.nodes, &mut buf);
                snapshot.rebuild_index();
                snapshot.rebuild_affinity_lists();
            }
            Some(false) => {
                for n in buf.iter_mut() {
                    match snapshot.index.get(n.name()) {
                        Some(&i) => {
                            let old = &snapshot.nodes[i];
                            let affinity = !old.pods_with_affinity.is_empty()
                                || !n.pods_with_affinity.is_empty();
                            snapshot.generations[i] = n.generation;
                            std::mem::swap(&mut snapshot.nodes[i], n);
                            if affinity {
                                snapshot.update_affinity_lists(i);
                            }
                        }
                        None => {
                            // A real node the list does not know: cannot
                            // happen (adding a node rebuilds the list); force
                            // a full update next time.
                            debug_assert!(
                                false,
                                "node {} changed but not in the snapshot",
                                n.name()
                            );
                            snapshot.generation = 0;
                        }
                    }
                }
            }
        }
        buf.clear();
        snapshot.scratch = buf;
    }

    // ---- Queries (tests, debugging) ----------------------------------------

    /// Number of nodes held, placeholders included (as upstream's
    /// `NodeCount`).
    pub fn node_count(&self) -> usize {
        self.state.lock().nodes.len()
    }

    /// Number of pods held (assumed or added).
    pub fn pod_count(&self) -> usize {
        self.state.lock().pods.len()
    }

    /// A node as the cache holds it now (placeholders included; a placeholder
    /// has `node() == None`).
    pub fn node_info(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.state.lock().nodes.get(name).map(|e| e.info.clone())
    }

    /// Every node (placeholders included), sorted by name, with the sum of
    /// its pods' requests and its pod count.
    pub fn dump(&self) -> Vec<(String, Resource, usize)> {
        let mut v: Vec<_> = {
            let st = self.state.lock();
            st.nodes.values().map(|e| e.info.clone()).collect::<Vec<_>>()
        }
        .into_iter()
        .map(|n| (n.name().to_string(), n.requested.clone(), n.pods.len()))
        .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Checks the cache's invariants: every node's `requested` is the sum of
    /// its pods' requests; every pod is on exactly one node, the one its state
    /// records; assumed pods are all present and in the assumed phase; no
    /// empty placeholder remains; the zone tree holds exactly the real nodes.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.state.lock().check_invariants()
    }
}
