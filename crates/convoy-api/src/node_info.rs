//! A node with the pods assigned to it and the resources they take.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Node, Taint};

use crate::images::{NodeImage, node_images};
use crate::pod_info::{ClaimVolumes, HostPort, PodInfo};
use crate::pod_list::PodList;
use crate::resource::Resource;

static GENERATION: AtomicU64 = AtomicU64::new(1);

/// The nodes of a list, borrowed: the form PreScore and Score take the
/// feasible nodes in (a pointer per node; no reference count touched).
pub fn borrowed(nodes: &[Arc<NodeInfo>]) -> Vec<&NodeInfo> {
    nodes.iter().map(|n| &**n).collect()
}

/// A fresh, process-wide increasing generation number. Every change to a
/// [`NodeInfo`] takes one, so a snapshot can tell which nodes changed.
pub fn next_generation() -> u64 {
    GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// The taint Convoy's cache (never the API server) puts on a node whose
/// kubelet rejected a pod Convoy bound, while the node is held out of
/// scheduling; its value is the kubelet's reason. TaintToleration's Filter
/// names it in its message.
pub const KUBELET_REJECTED_TAINT: &str = "convoy.dev/kubelet-rejected";

/// A node as the scheduler sees it: the API object, its allocatable
/// resources, and the sum of the requests of the pods assigned to it
/// (pods of every scheduler, and pods assumed but not yet bound).
#[derive(Debug, Clone)]
pub struct NodeInfo {
    node: Option<Arc<Node>>,
    name: Arc<str>,
    /// Allocatable resources (`status.allocatable`).
    pub allocatable: Resource,
    /// Sum of the requests of the pods on the node.
    pub requested: Resource,
    /// Sum of the "non-zero" requests (CPU and memory), used for scoring.
    pub non_zero_requested: Resource,
    /// Pods assigned to the node (shared between copies of the node info;
    /// see [`PodList`]).
    pub pods: PodList,
    /// The pods among `pods` with pod affinity or anti-affinity of any kind
    /// (upstream `PodsWithAffinity`).
    pub pods_with_affinity: PodList,
    /// The pods among `pods` with required pod anti-affinity (upstream
    /// `PodsWithRequiredAntiAffinity`).
    pub pods_with_required_anti_affinity: PodList,
    /// Host ports in use.
    pub used_ports: Vec<HostPort>,
    /// The sum of the pods' [`ClaimVolumes`].
    pub claim_volumes: ClaimVolumes,
    /// Bumped on every change (see [`next_generation`]).
    pub generation: u64,
    /// Why the node's allocatable (or capacity) could not be read, if it
    /// could not: an unparsable or negative amount, which the API server
    /// would have refused. No pod is placed on such a node.
    pub invalid: Option<Arc<str>>,
    /// `spec.taints`, copied here so the Filter and Score paths read them
    /// without touching the (large, cold) node object.
    taints: Vec<Taint>,
    /// `spec.unschedulable`, copied for the same reason.
    unschedulable: bool,
    /// The names of `status.images`, sorted, each once (see
    /// [`node_images`]); shared, so copying the node info does not copy them.
    images: Arc<[NodeImage]>,
}

/// A node's allocatable resources; an unparsable or negative amount in
/// `status.allocatable` or `status.capacity` is an error naming it
/// (`status.capacity[memory]: invalid quantity "-1": ...`).
fn read_allocatable(node: &Node) -> Result<Resource, String> {
    let status = node.status.as_ref();
    if let Some(capacity) = status.and_then(|s| s.capacity.as_ref()) {
        Resource::from_list(capacity)
            .map_err(|(name, e)| format!("status.capacity[{name}]: {e}"))?;
    }
    let alloc = status.and_then(|s| s.allocatable.as_ref());
    alloc
        .map(Resource::from_list)
        .transpose()
        .map(Option::unwrap_or_default)
        .map_err(|(name, e)| format!("status.allocatable[{name}]: {e}"))
}

impl NodeInfo {
    /// A node info for a node object.
    pub fn new(node: Arc<Node>) -> Self {
        let mut n = Self::placeholder(node.metadata.name.as_deref().unwrap_or(""));
        n.set_node(node);
        n
    }

    /// A node info for a name only: pods assigned to a node the scheduler
    /// has not seen yet are kept here until the node arrives.
    pub fn placeholder(name: &str) -> Self {
        Self {
            node: None,
            name: Arc::from(name),
            allocatable: Resource::default(),
            requested: Resource::default(),
            non_zero_requested: Resource::default(),
            pods: PodList::new(),
            pods_with_affinity: PodList::new(),
            pods_with_required_anti_affinity: PodList::new(),
            used_ports: Vec::new(),
            claim_volumes: ClaimVolumes::default(),
            generation: next_generation(),
            invalid: None,
            taints: Vec::new(),
            unschedulable: false,
            images: Arc::from([]),
        }
    }

    /// Replaces the node object (an update); recomputes allocatable.
    pub fn set_node(&mut self, node: Arc<Node>) {
        match read_allocatable(&node) {
            Ok(a) => {
                self.allocatable = a;
                self.invalid = None;
            }
            Err(why) => {
                self.allocatable = Resource::default();
                self.invalid = Some(Arc::from(why));
            }
        }
        self.name = Arc::from(node.metadata.name.as_deref().unwrap_or(""));
        let spec = node.spec.as_ref();
        self.taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let images = node_images(&node);
        if *self.images != *images {
            self.images = Arc::from(images);
        }
        self.node = Some(node);
        self.generation = next_generation();
    }

    /// The node object; `None` for a placeholder.
    pub fn node(&self) -> Option<&Arc<Node>> {
        self.node.as_ref()
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's name, shared.
    pub fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// The node's taints.
    pub fn taints(&self) -> &[Taint] {
        &self.taints
    }

    /// `spec.unschedulable`.
    pub fn unschedulable(&self) -> bool {
        self.unschedulable
    }

    /// The node's image names (`status.images`), sorted by name, each once
    /// with the size of the first image listing it.
    pub fn images(&self) -> &Arc<[NodeImage]> {
        &self.images
    }

    /// The node's entry for an image name, if the node has it.
    pub fn image(&self, name: &str) -> Option<&NodeImage> {
        self.images.binary_search_by(|i| (*i.name).cmp(name)).ok().map(|i| &self.images[i])
    }

    /// A label value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.node.as_ref()?.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }

    /// Accounts for a pod placed on the node.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests.requests);
        self.non_zero_requested.milli_cpu += pod.requests.non_zero_milli_cpu;
        self.non_zero_requested.memory += pod.requests.non_zero_memory;
        self.used_ports.extend(pod.host_ports.iter().cloned());
        self.claim_volumes.add(pod.claim_volumes);
        if pod.affinity.is_some() {
            self.pods_with_affinity.push(pod.clone());
            if pod.has_required_anti_affinity() {
                self.pods_with_required_anti_affinity.push(pod.clone());
            }
        }
        self.pods.push(pod);
        self.generation = next_generation();
    }

    /// Removes a pod by UID (or by key when UIDs are empty); returns it.
    ///
    /// The pod held is usually the very one given (a confirmed or forgotten
    /// assumed pod), added lately: the list is searched from its end by
    /// address first, which reads no pod, then by UID.
    pub fn remove_pod(&mut self, pod: &PodInfo) -> Option<Arc<PodInfo>> {
        let same = |p: &Arc<PodInfo>| {
            if pod.uid.is_empty() || p.uid.is_empty() { p.key == pod.key } else { p.uid == pod.uid }
        };
        let removed = match self.pods.remove_last_where(|p| std::ptr::eq(&**p, pod)) {
            Some(p) => p,
            None => self.pods.remove_last_where(same)?,
        };
        if removed.affinity.is_some() {
            for list in [&mut self.pods_with_affinity, &mut self.pods_with_required_anti_affinity] {
                list.remove_last_where(|p| Arc::ptr_eq(p, &removed));
            }
        }
        self.requested.sub(&removed.requests.requests);
        self.non_zero_requested.milli_cpu -= removed.requests.non_zero_milli_cpu;
        self.non_zero_requested.memory -= removed.requests.non_zero_memory;
        self.claim_volumes.sub(removed.claim_volumes);
        for hp in &removed.host_ports {
            if let Some(i) = self.used_ports.iter().position(|u| u == hp) {
                self.used_ports.swap_remove(i);
            }
        }
        self.generation = next_generation();
        Some(removed)
    }

    /// Free amount of a resource (allocatable minus requested).
    pub fn free(&self, resource: &str) -> i64 {
        self.allocatable.get(resource) - self.requested.get(resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, cpu: &str) -> Arc<PodInfo> {
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(p)).unwrap())
    }

    #[test]
    fn add_and_remove_keep_sums() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}
        }))
        .unwrap();
        let mut n = NodeInfo::new(Arc::new(node));
        let g0 = n.generation;
        n.add_pod(pod("a", "1"));
        n.add_pod(pod("b", "500m"));
        assert!(n.generation > g0);
        assert_eq!(n.requested.milli_cpu, 1500);
        assert_eq!(n.free("cpu"), 2500);
        assert_eq!(n.free("pods"), 108);
        n.remove_pod(&pod("a", "1")).unwrap();
        assert_eq!(n.requested.milli_cpu, 500);
        assert!(n.remove_pod(&pod("zzz", "1")).is_none());
    }

    #[test]
    fn affinity_lists_follow_the_pods() {
        use crate::testing::{NodeBuilder, PodBuilder};
        let mut n = NodeBuilder::new("n").info();
        let anti = PodBuilder::new("anti").pod_anti_affinity("zone", &[("app", "x")]).info();
        let pref =
            PodBuilder::new("pref").preferred_pod_affinity(3, "zone", &[("app", "x")]).info();
        n.add_pod(anti.clone());
        n.add_pod(pref.clone());
        n.add_pod(PodBuilder::new("plain").info());
        assert_eq!(n.pods_with_affinity.len(), 2);
        assert_eq!(n.pods_with_required_anti_affinity.len(), 1);
        n.remove_pod(&anti).unwrap();
        assert_eq!(n.pods_with_affinity.len(), 1);
        assert!(n.pods_with_required_anti_affinity.is_empty());
        n.remove_pod(&pref).unwrap();
        assert!(n.pods_with_affinity.is_empty());
    }

    #[test]
    fn invalid_allocatable_is_reported() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "four"}}
        }))
        .unwrap();
        let n = NodeInfo::new(Arc::new(node));
        assert!(n.invalid.as_deref().unwrap().starts_with("status.allocatable[cpu]"));
    }

    #[test]
    fn negative_allocatable_or_capacity_makes_the_node_unusable() {
        let node = |status: serde_json::Value| -> Node {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}, "status": status}))
                .unwrap()
        };
        let cases = [
            (
                serde_json::json!({"allocatable": {"cpu": "4", "memory": "-1Gi"}}),
                "status.allocatable[memory]",
            ),
            (
                serde_json::json!({"capacity": {"pods": "-1"}, "allocatable": {"cpu": "4"}}),
                "status.capacity[pods]",
            ),
        ];
        for (status, field) in cases {
            let n = NodeInfo::new(Arc::new(node(status)));
            let why = n.invalid.as_deref().unwrap();
            assert!(why.starts_with(field), "{why}");
            assert!(why.ends_with("must be greater than or equal to 0"), "{why}");
            assert_eq!(n.allocatable, Resource::default(), "nothing to overcommit");
        }
        // An update that fixes the node makes it usable again.
        let mut n =
            NodeInfo::new(Arc::new(node(serde_json::json!({"allocatable": {"cpu": "-4"}}))));
        n.set_node(Arc::new(node(serde_json::json!({"allocatable": {"cpu": "4"}}))));
        assert_eq!((n.invalid.clone(), n.allocatable.milli_cpu), (None, 4000));
    }
}
