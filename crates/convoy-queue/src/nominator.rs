//! [`Nominator`]: the pods nominated to each node (upstream
//! `backend/queue/nominator.go`, v1.37.2).
//!
//! A preemptor is nominated to the node its victims are leaving, so that
//! pods of equal or lower priority do not take the room meanwhile (the
//! framework's Filter counts nominated pods, see
//! [`PodNominator`](convoy_api::PodNominator)). Nominations come from two
//! places: the scheduler after a preemption ([`Nominator::nominate`], before
//! the `status.nominatedNodeName` write makes its round trip), and the
//! pods the queue sees with `status.nominatedNodeName` set (written by
//! this scheduler earlier, or by another one). They end when the pod is
//! assumed, bound or deleted, or nominated elsewhere.
//!
//! Its lock is taken after the queue's, never before (as upstream).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use convoy_api::preemption::NominationsByNode;
use convoy_api::{NominatedPods, PodInfo, PodNominator};
use parking_lot::RwLock;

#[derive(Debug, Default)]
struct Inner {
    /// Pods nominated to each node, in nomination order; shared with the
    /// cycles' [`NominatedPods`] views (copied on write while one is held).
    by_node: Arc<NominationsByNode>,
    /// The node each pod (by [`id`]) is nominated to.
    node_of: HashMap<Arc<str>, Arc<str>>,
}

/// The pods nominated to each node; see the module docs. Shared (`Arc`)
/// by the queue, the scheduling cycle and the frameworks.
#[derive(Debug, Default)]
pub struct Nominator {
    inner: RwLock<Inner>,
    /// Pods nominated, readable without the lock (the Filter fast path).
    len: AtomicUsize,
}

/// A pod's identity: its UID, or `namespace/name` when it has none (some
/// tests and simulations).
fn id(pod: &PodInfo) -> Arc<str> {
    if pod.uid.is_empty() { Arc::from(pod.key.to_string()) } else { pod.uid.clone() }
}

/// `status.nominatedNodeName`, when set.
fn status_nomination(pod: &PodInfo) -> Option<&str> {
    pod.pod.status.as_ref()?.nominated_node_name.as_deref().filter(|n| !n.is_empty())
}

impl Inner {
    fn remove(&mut self, key: &str) -> Option<(Arc<str>, Arc<PodInfo>)> {
        let node = self.node_of.remove(key)?;
        let by_node = Arc::make_mut(&mut self.by_node);
        let list = by_node.get_mut(&node)?;
        let i = list.iter().position(|p| *id(p) == *key)?;
        let pod = Arc::make_mut(list).remove(i);
        if list.is_empty() {
            by_node.remove(&node);
        }
        Some((node, pod))
    }

    fn insert(&mut self, key: Arc<str>, node: Arc<str>, pod: Arc<PodInfo>) {
        self.node_of.insert(key, node.clone());
        Arc::make_mut(Arc::make_mut(&mut self.by_node).entry(node).or_default()).push(pod);
    }
}

impl Nominator {
    /// No nomination.
    pub fn new() -> Self {
        Self::default()
    }

    fn sync_len(&self, inner: &Inner) {
        self.len.store(inner.node_of.len(), Ordering::Release);
    }

    /// Nominates `pod` to `node` (upstream `AddNominatedPod` in override
    /// mode); `None` clears its nomination.
    pub fn nominate(&self, pod: Arc<PodInfo>, node: Option<Arc<str>>) {
        let mut inner = self.inner.write();
        let key = id(&pod);
        inner.remove(&key);
        if let Some(node) = node {
            inner.insert(key, node, pod);
        }
        self.sync_len(&inner);
    }

    /// A pending pod the queue received: nominated to its
    /// `status.nominatedNodeName`, if set (an existing nomination in memory
    /// is kept otherwise).
    pub fn pod_added(&self, pod: &Arc<PodInfo>) {
        if let Some(node) = status_nomination(pod) {
            self.nominate(pod.clone(), Some(Arc::from(node)));
        }
    }

    /// A new version of a pending pod (upstream `UpdateNominatedPod`): its
    /// `status.nominatedNodeName` is followed (set, moved or cleared) —
    /// unless the pod holds a nomination made in memory whose status write
    /// has not come back yet (the version the nominator last saw named
    /// another node, or none). That nomination is kept, with the new version
    /// of the pod: the events arrive in order, so whatever this version's
    /// status says was written before that write, which will overwrite it.
    /// Upstream keeps it only when neither version names a node; Convoy
    /// writes a preemptor's nomination apart from its other status fields,
    /// so an older value comes back meanwhile (the `PodScheduled` condition
    /// of the failed attempt, another preemption's clearing of an earlier
    /// nomination), and following it would drop the newer nomination.
    pub fn pod_updated(&self, new: &Arc<PodInfo>) {
        let mut inner = self.inner.write();
        let key = id(new);
        let old = inner.remove(&key);
        let node = match old {
            Some((node, seen)) if status_nomination(&seen) != Some(&*node) => Some(node),
            _ => status_nomination(new).map(Arc::from),
        };
        if let Some(node) = node {
            inner.insert(key, node, new.clone());
        }
        self.sync_len(&inner);
    }

    /// The pod was deleted, bound or assumed: its nomination ends.
    /// Returns whether it was nominated.
    pub fn delete(&self, pod: &PodInfo) -> bool {
        if self.is_empty() {
            return false;
        }
        let mut inner = self.inner.write();
        let removed = inner.remove(&id(pod)).is_some();
        self.sync_len(&inner);
        removed
    }

    /// Clears the nominations of the pods nominated to `node` with a
    /// priority below `priority` (a preemptor took the room; upstream
    /// `getLowerPriorityNominatedPods`), and returns them.
    pub fn clear_lower_priority(&self, node: &str, priority: i32) -> Vec<Arc<PodInfo>> {
        let mut inner = self.inner.write();
        let lower: Vec<Arc<PodInfo>> = inner
            .by_node
            .get(node)
            .map(|l| l.iter().filter(|p| p.priority < priority).cloned().collect())
            .unwrap_or_default();
        for p in &lower {
            inner.remove(&id(p));
        }
        self.sync_len(&inner);
        lower
    }

    /// How many pods are nominated.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether no pod is nominated.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PodNominator for Nominator {
    fn is_empty(&self) -> bool {
        Nominator::is_empty(self)
    }

    fn nominated_node(&self, pod: &PodInfo) -> Option<Arc<str>> {
        if self.is_empty() {
            return None;
        }
        self.inner.read().node_of.get(&id(pod)).cloned()
    }

    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        if self.is_empty() {
            return Vec::new();
        }
        self.inner.read().by_node.get(node).map(|l| l.to_vec()).unwrap_or_default()
    }

    fn nominated_pods(&self, pod: &PodInfo) -> NominatedPods {
        if self.is_empty() {
            return NominatedPods::default();
        }
        let by_node = self.inner.read().by_node.clone();
        NominatedPods::new(by_node, pod.priority, pod.uid.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::testing::PodBuilder;

    fn nominated(pod: &str, node: &str, priority: i32) -> Arc<PodInfo> {
        PodBuilder::new(pod).priority(priority).nominated(node).info()
    }

    #[test]
    fn follows_the_pods_nominations() {
        let n = Nominator::new();
        assert!(n.is_empty());
        let a = PodBuilder::new("a").uid("a").priority(10).info();
        n.nominate(a.clone(), Some(Arc::from("n1")));
        assert_eq!(n.nominated_node(&a).as_deref(), Some("n1"));
        // An update without the status field keeps the in-memory nomination.
        let a2 = PodBuilder::new("a").uid("a").priority(10).label("v", "2").info();
        n.pod_updated(&a2);
        assert_eq!(n.nominated_pods_for_node("n1")[0].labels().get("v").unwrap(), "2");
        // The status write comes back, then is cleared.
        n.pod_updated(&nominated("a", "n1", 10));
        assert_eq!(n.nominated_node(&a).as_deref(), Some("n1"));
        n.pod_updated(&a2);
        assert!(n.is_empty(), "a nomination the status lost is cleared");
        // Moved in memory while the status still names the earlier node:
        // versions carrying the earlier node, or its clearing, keep the
        // newer nomination until its own write comes back.
        n.pod_updated(&nominated("a", "n1", 10));
        n.nominate(nominated("a", "n1", 10), Some(Arc::from("n3")));
        n.pod_updated(&nominated("a", "n1", 10));
        assert_eq!(n.nominated_node(&a).as_deref(), Some("n3"), "an older status value");
        n.pod_updated(&a2);
        assert_eq!(n.nominated_node(&a).as_deref(), Some("n3"), "the earlier node's clearing");
        n.pod_updated(&nominated("a", "n3", 10));
        n.pod_updated(&a2);
        assert!(n.is_empty(), "once the write came back, the status is followed again");
        // Another scheduler's nomination, seen when the pod arrives.
        n.pod_added(&nominated("b", "n2", 5));
        n.nominate(a.clone(), Some(Arc::from("n2")));
        let room_for = |pod: &str, priority: i32| {
            let pod = PodBuilder::new(pod).priority(priority).info();
            let view = n.nominated_pods(&pod);
            view.on_node("n2").map(|p| p.uid.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(room_for("x", 6), ["a"], "of equal or higher priority");
        assert_eq!(room_for("a", 0), ["b"], "not its own nomination");
        assert!(
            room_for("x", 11).is_empty()
                && n.nominated_pods(&PodBuilder::new("x").priority(11).info()).is_empty()
        );
        assert_eq!(
            n.clear_lower_priority("n2", 10).iter().map(|p| &*p.uid).collect::<Vec<_>>(),
            ["b"]
        );
        n.delete(&a);
        assert!(n.is_empty() && n.nominated_pods_for_node("n2").is_empty());
    }
}
