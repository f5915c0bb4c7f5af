//! The cache's state and its transitions, all run under the cache's lock.
//! See the crate docs for the state machine.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use convoy_api::{ImageStates, NodeInfo, PodInfo, next_generation};
use k8s_openapi::api::core::v1::Node;

use crate::error::{CacheError, Result};
use crate::node_tree::{NodeTree, zone_key};

/// An assumed pod removed by
/// [`Cache::cleanup_expired_assumed_pods`](crate::Cache::cleanup_expired_assumed_pods).
#[derive(Debug, Clone)]
pub struct ExpiredPod {
    /// The pod as it was assumed.
    pub pod: Arc<PodInfo>,
    /// The node it was assumed on.
    pub node: Arc<str>,
}

#[derive(Debug)]
pub(crate) struct NodeEntry {
    pub(crate) info: Arc<NodeInfo>,
    /// The node's zone key while it is a real node (in the tree); `None` for
    /// a placeholder.
    pub(crate) zone: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Placed by this scheduler, not yet seen bound by the watch; `deadline`
    /// is set once binding finished.
    Assumed { deadline: Option<Instant> },
    /// Seen by the watch (confirmed).
    Added,
}

impl Phase {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Assumed { .. } => "assumed",
            Phase::Added => "added",
        }
    }
}

#[derive(Debug)]
pub(crate) struct PodState {
    pub(crate) pod: Arc<PodInfo>,
    pub(crate) node: Arc<str>,
    pub(crate) phase: Phase,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) nodes: HashMap<Arc<str>, NodeEntry>,
    /// Real nodes (not placeholders), in snapshot order.
    pub(crate) tree: NodeTree,
    /// Pods in the cache (assumed or added), by [`pod_key`].
    pub(crate) pods: HashMap<Arc<str>, PodState>,
    /// Keys of assumed pods (a subset of `pods`).
    pub(crate) assumed: HashSet<Arc<str>>,
    /// Nodes changed since the last `update_snapshot`.
    pub(crate) dirty: HashSet<Arc<str>>,
    /// Whether nodes were added, removed or moved between zones since the
    /// last `update_snapshot`: the snapshot's list must be rebuilt.
    pub(crate) list_dirty: bool,
    /// Generation of the snapshot last updated; another snapshot is rebuilt
    /// from scratch.
    pub(crate) snapshot_generation: u64,
    /// Image name → size and number of real nodes with it (upstream cache's
    /// `imageStates`), updated as nodes are added, updated and removed.
    /// Shared with the snapshot and written copy-on-write: a change copies
    /// the map at most once per snapshot update.
    pub(crate) images: Arc<ImageStates>,
}

/// The key of a pod in the cache: its UID, or `namespace/name` without one
/// (simulations).
pub(crate) fn pod_key(pod: &PodInfo) -> Arc<str> {
    if pod.uid.is_empty() { Arc::from(pod.key.to_string()) } else { pod.uid.clone() }
}

impl State {
    pub(crate) fn assume(&mut self, pod: Arc<PodInfo>, node: &str) -> Result<()> {
        let key = pod_key(&pod);
        if let Some(s) = self.pods.get(&key) {
            return Err(CacheError::PodAlreadyInCache {
                pod: pod.key.clone(),
                node: s.node.to_string(),
                state: s.phase.name(),
            });
        }
        let node = self.node_name(node);
        self.add_pod_to_node(&node, pod.clone());
        self.pods
            .insert(key.clone(), PodState { pod, node, phase: Phase::Assumed { deadline: None } });
        self.assumed.insert(key);
        Ok(())
    }

    pub(crate) fn finish_binding(&mut self, pod: &PodInfo, deadline: Instant) {
        if let Some(s) = self.pods.get_mut(&*pod_key(pod))
            && let Phase::Assumed { .. } = s.phase
        {
            s.phase = Phase::Assumed { deadline: Some(deadline) };
        }
    }

    pub(crate) fn forget(&mut self, pod: &PodInfo) -> Result<()> {
        let key = pod_key(pod);
        match self.pods.get(&key) {
            Some(s) if matches!(s.phase, Phase::Assumed { .. }) => {
                if let Some(n) = pod.node_name()
                    && n != &*s.node
                {
                    return Err(CacheError::AssumedOnDifferentNode {
                        pod: pod.key.clone(),
                        assumed: s.node.to_string(),
                        assigned: n.to_string(),
                    });
                }
                self.remove_entry(&key);
                Ok(())
            }
            _ => Err(CacheError::PodNotAssumed { pod: pod.key.clone() }),
        }
    }

    /// Removes the assumed pods whose deadline passed before `now`.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<ExpiredPod> {
        let expired: Vec<Arc<str>> = self
            .assumed
            .iter()
            .filter(|k| {
                matches!(self.pods.get(&***k).map(|s| s.phase),
                    Some(Phase::Assumed { deadline: Some(d) }) if now > d)
            })
            .cloned()
            .collect();
        expired
            .iter()
            .filter_map(|k| self.remove_entry(k))
            .map(|s| ExpiredPod { pod: s.pod, node: s.node })
            .collect()
    }

    /// The snapshot part done under the lock. Pushes onto `buf` either every
    /// real node in snapshot order (returns `Some(true)`: replace the list)
    /// or the real nodes changed since the snapshot `snapshot_generation`
    /// was last updated (`Some(false)`: patch them in); `None` when nothing
    /// changed. Sets `*snapshot_generation` to the new generation.
    pub(crate) fn collect_for_snapshot(
        &mut self,
        snapshot_generation: &mut u64,
        buf: &mut Vec<Arc<NodeInfo>>,
    ) -> Option<bool> {
        let full = self.list_dirty
            || *snapshot_generation == 0
            || *snapshot_generation != self.snapshot_generation;
        if !full && self.dirty.is_empty() {
            return None;
        }
        if full {
            buf.reserve(self.tree.len());
            let nodes = &self.nodes;
            self.tree.for_each(|name| buf.push(nodes[&**name].info.clone()));
            self.list_dirty = false;
        } else {
            for name in &self.dirty {
                if let Some(e) = self.nodes.get(&**name)
                    && e.zone.is_some()
                {
                    buf.push(e.info.clone());
                }
            }
        }
        self.dirty.clear();
        self.snapshot_generation = next_generation();
        *snapshot_generation = self.snapshot_generation;
        Some(full)
    }

    /// The shared name of a node if the cache has it, else a new one.
    pub(crate) fn node_name(&self, name: &str) -> Arc<str> {
        match self.nodes.get_key_value(name) {
            Some((k, _)) => k.clone(),
            None => Arc::from(name),
        }
    }

    /// A node for writing: marks it changed and copies it if a snapshot still
    /// shares it.
    pub(crate) fn node_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        let entry = self.nodes.get_mut(name)?;
        if !self.dirty.contains(name) {
            self.dirty.insert(entry.info.name_arc().clone());
        }
        Some(Arc::make_mut(&mut entry.info))
    }

    pub(crate) fn upsert_node(&mut self, node: Arc<Node>) {
        let zone = zone_key(&node);
        let name = self.node_name(node.metadata.name.as_deref().unwrap_or(""));
        let was_invalid = self.nodes.get(&*name).and_then(|e| e.info.invalid.clone());
        let old_zone = match self.nodes.get(&*name) {
            None => {
                let info = Arc::new(NodeInfo::new(node));
                if !info.images().is_empty() {
                    Arc::make_mut(&mut self.images).add_node(info.images());
                }
                self.nodes.insert(name.clone(), NodeEntry { info, zone: None });
                self.dirty.insert(name.clone());
                None
            }
            Some(e) => {
                let old = e.zone.clone();
                let old_images = e.info.images().clone();
                let info = self.node_mut(&name).expect("present");
                info.set_node(node);
                let new_images = info.images().clone();
                // Upstream's UpdateNode: the old images out, the new in.
                if self.images.update_changes(&old_images, &new_images) {
                    let images = Arc::make_mut(&mut self.images);
                    images.remove_node(&old_images);
                    images.add_node(&new_images);
                }
                old
            }
        };
        let invalid = self.nodes.get(&*name).and_then(|e| e.info.invalid.clone());
        if invalid.is_some() && invalid != was_invalid {
            // Once per change: the API server would have refused the object.
            tracing::warn!(
                node = %name,
                error = invalid.as_deref().unwrap_or_default(),
                "node not usable: no pod is placed on it until its status is valid"
            );
        }
        if old_zone.as_deref() != Some(zone.as_str()) {
            if let Some(old) = &old_zone {
                self.tree.remove(&name, old);
            }
            self.tree.add(name.clone(), &zone);
            self.list_dirty = true;
            self.nodes.get_mut(&*name).expect("present").zone = Some(zone);
        }
    }

    pub(crate) fn remove_node(&mut self, name: &str) -> Result<()> {
        let not_found = || CacheError::NodeNotFound { node: name.to_string() };
        let entry = self.nodes.get_mut(name).ok_or_else(not_found)?;
        let zone = entry.zone.take().ok_or_else(not_found)?;
        if !entry.info.images().is_empty() {
            Arc::make_mut(&mut self.images).remove_node(entry.info.images());
        }
        if entry.info.pods.is_empty() {
            self.nodes.remove(name);
            self.dirty.remove(name);
        } else {
            // Keep the pods' accounting under a placeholder.
            let old = &entry.info;
            let mut p = NodeInfo::placeholder(name);
            p.requested = old.requested.clone();
            p.non_zero_requested = old.non_zero_requested.clone();
            p.pods = old.pods.clone();
            p.used_ports = old.used_ports.clone();
            entry.info = Arc::new(p);
        }
        self.tree.remove(name, &zone);
        self.list_dirty = true;
        Ok(())
    }

    /// Puts a pod on a node, creating a placeholder for an unknown node.
    pub(crate) fn add_pod_to_node(&mut self, node: &Arc<str>, pod: Arc<PodInfo>) {
        if !self.nodes.contains_key(&**node) {
            let info = Arc::new(NodeInfo::placeholder(node));
            self.nodes.insert(node.clone(), NodeEntry { info, zone: None });
        }
        self.node_mut(node).expect("present").add_pod(pod);
    }

    /// Takes a pod off a node; drops the node if it is a placeholder left
    /// empty.
    pub(crate) fn remove_pod_from_node(&mut self, node: &str, pod: &PodInfo) {
        let Some(info) = self.node_mut(node) else {
            tracing::error!(pod = %pod.key, node, "cache corrupted: pod's node is not in the cache");
            return;
        };
        if info.remove_pod(pod).is_none() {
            tracing::error!(pod = %pod.key, node, "cache corrupted: pod is not on its node");
        }
        if info.node().is_none() && info.pods.is_empty() {
            self.nodes.remove(node);
            self.dirty.remove(node);
        }
    }

    /// Replaces `old` on `old_node` by `new` on `new_node`.
    pub(crate) fn replace_pod(
        &mut self,
        old_node: &str,
        old: &PodInfo,
        new_node: &Arc<str>,
        new: Arc<PodInfo>,
    ) {
        if old_node == &**new_node {
            let info = self.node_mut(old_node).expect("pod's node is in the cache");
            info.remove_pod(old);
            info.add_pod(new);
        } else {
            self.remove_pod_from_node(old_node, old);
            self.add_pod_to_node(new_node, new);
        }
    }

    /// Drops a pod from the cache entirely.
    pub(crate) fn remove_entry(&mut self, key: &str) -> Option<PodState> {
        let s = self.pods.remove(key)?;
        self.assumed.remove(key);
        self.remove_pod_from_node(&s.node, &s.pod);
        Some(s)
    }

    pub(crate) fn add_pod(&mut self, pod: Arc<PodInfo>) -> Result<()> {
        let key = pod_key(&pod);
        let Some(s) = self.pods.get(&key) else {
            let Some(node) = pod.node_name() else {
                return Err(CacheError::PodNotAssigned { pod: pod.key.clone() });
            };
            if pod.is_terminal() {
                return Ok(());
            }
            let node = self.node_name(node);
            self.add_pod_to_node(&node, pod.clone());
            self.pods.insert(key, PodState { pod, node, phase: Phase::Added });
            return Ok(());
        };
        if s.phase == Phase::Added {
            return Err(CacheError::PodAlreadyAdded {
                pod: pod.key.clone(),
                node: s.node.to_string(),
            });
        }
        // Assumed -> Added.
        if pod.is_terminal() {
            self.remove_entry(&key);
            return Ok(());
        }
        let (old_pod, old_node) = (s.pod.clone(), s.node.clone());
        let node = match pod.node_name() {
            Some(n) if n != &*old_node => {
                tracing::info!(pod = %pod.key, assumed = %old_node, actual = n,
                    "pod was added to a different node than it was assumed");
                self.node_name(n)
            }
            _ => old_node.clone(),
        };
        if !Arc::ptr_eq(&old_pod, &pod) || node != old_node {
            self.replace_pod(&old_node, &old_pod, &node, pod.clone());
        }
        let s = self.pods.get_mut(&key).expect("present");
        *s = PodState { pod, node, phase: Phase::Added };
        self.assumed.remove(&key);
        Ok(())
    }

    pub(crate) fn update_pod(&mut self, old: &PodInfo, new: Arc<PodInfo>) -> Result<()> {
        if !old.uid.is_empty() && !new.uid.is_empty() && old.uid != new.uid {
            // A different object under the same name: delete + add.
            let _ = self.remove_pod(old, "updated");
            return self.add_pod(new);
        }
        let key = pod_key(&new);
        let Some(s) = self.pods.get(&key) else {
            if new.is_terminal() {
                return Ok(()); // already dropped when it became terminal
            }
            return Err(CacheError::PodNotFound { pod: new.key.clone(), op: "updated" });
        };
        if matches!(s.phase, Phase::Assumed { .. }) {
            return self.add_pod(new);
        }
        if new.is_terminal() {
            self.remove_entry(&key);
            return Ok(());
        }
        let (old_pod, old_node) = (s.pod.clone(), s.node.clone());
        let node = match new.node_name() {
            Some(n) if n != &*old_node => {
                tracing::error!(pod = %new.key, from = %old_node, to = n,
                    "cache corrupted: pod updated on a different node than it was added to");
                self.node_name(n)
            }
            _ => old_node.clone(),
        };
        self.replace_pod(&old_node, &old_pod, &node, new.clone());
        let s = self.pods.get_mut(&key).expect("present");
        s.pod = new;
        s.node = node;
        Ok(())
    }

    /// Removes a pod; `Ok(None)` for a terminal pod the cache no longer
    /// holds (terminal pods leave the cache when they become terminal).
    pub(crate) fn remove_pod(
        &mut self,
        pod: &PodInfo,
        op: &'static str,
    ) -> Result<Option<PodState>> {
        let key = pod_key(pod);
        let Some(s) = self.pods.get(&key) else {
            if pod.is_terminal() {
                return Ok(None);
            }
            return Err(CacheError::PodNotFound { pod: pod.key.clone(), op });
        };
        if let Some(n) = pod.node_name()
            && n != &*s.node
        {
            tracing::error!(pod = %pod.key, cached = %s.node, actual = n,
                "pod removed from a different node than the cache holds it on");
        }
        Ok(self.remove_entry(&key))
    }
}
