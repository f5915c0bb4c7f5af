//! The in-memory cluster: nodes and pods behind one lock, a stream of
//! [`ClusterUpdate`]s, and a [`Binder`] that assigns pods as the API
//! server's `pods/binding` subresource does and binds volumes as the PV
//! controller would ([`volumes`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use convoy_api::objects::PriorityClassInfo;

use crate::admission::{admit_pod_group_priority, admit_priority};
use convoy_api::{
    ApiInfo, BindError, Binder, ClaimWrite, ClusterObject, ClusterUpdate, CustomObject, GroupKey,
    PodGroup, PodInfo, PodKey, PreemptionActuator, PreemptionError, VolumeWrite,
};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::create::prepare_pod_for_create;
use crate::load::{Objects, default_pod};

/// Why a mutation of the embedded cluster was refused (as the API server
/// would refuse it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// An object with that name already exists.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// No object with that name exists.
    #[error("{0} not found")]
    NotFound(String),
    /// The object has no `metadata.name`.
    #[error("{0}: metadata.name is required")]
    MissingName(&'static str),
    /// The object is invalid (the message names the field).
    #[error("{0}")]
    Invalid(String),
}

#[derive(Default)]
struct State {
    nodes: HashMap<Arc<str>, Arc<Node>>,
    pods: HashMap<PodKey, Arc<Pod>>,
    groups: HashMap<GroupKey, Arc<PodGroup>>,
    /// The [`ClusterObject`]s, by kind and key (ordered, so the objects of
    /// one kind are a range: admitting a pod reads the PriorityClasses
    /// without visiting every volume and claim).
    objects: BTreeMap<(&'static str, String), ClusterObject>,
    /// Pods with `spec.nodeName` set.
    bound: usize,
    /// Last `metadata.resourceVersion` given out.
    resource_version: u64,
    /// Pods deleted by preemption, in order.
    evictions: Vec<Eviction>,
    /// ResourceClaimTemplates by namespace and name ([`dra`]).
    templates: HashMap<(String, String), Arc<ResourceClaimTemplate>>,
    /// Claim names generated so far ([`dra`]).
    name_seq: u64,
    /// Custom resources of the kinds plugins declared, by API and key.
    custom: HashMap<(ApiInfo, String), Arc<CustomObject>>,
}

/// A pod the scheduler preempted (deleted through
/// [`PreemptionActuator::preempt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The victim.
    pub victim: PodKey,
    /// The node it ran on.
    pub node: String,
    /// The pod it made room for.
    pub preemptor: PodKey,
}

impl State {
    /// A custom resource stored with a new resourceVersion (and a UID when
    /// it has none).
    fn stamp_custom(&mut self, mut obj: CustomObject) -> Arc<CustomObject> {
        let version = self.next_version();
        let key = obj.key();
        if let Some(meta) = obj.object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.insert("resourceVersion".into(), version.into());
            meta.entry("uid").or_insert_with(|| format!("sim-{}-{key}", obj.api.resource).into());
        }
        let obj = Arc::new(obj);
        self.custom.insert((obj.api, obj.key()), obj.clone());
        obj
    }

    fn next_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// The objects of one kind.
    fn of_kind(&self, kind: &'static str) -> impl Iterator<Item = &ClusterObject> {
        self.objects
            .range((kind, String::new())..)
            .take_while(move |((k, _), _)| *k == kind)
            .map(|(_, o)| o)
    }

    /// The PriorityClasses held.
    fn priority_classes(&self) -> Vec<PriorityClassInfo> {
        self.of_kind("PriorityClass")
            .filter_map(|o| match o {
                ClusterObject::PriorityClass(pc) => Some(PriorityClassInfo::of(pc)),
                _ => None,
            })
            .collect()
    }
}

/// An in-memory cluster that runs the same scheduler as a real one: it
/// produces the [`ClusterUpdate`] stream the API-server adapter produces
/// and implements [`Binder`].
///
/// Every mutation takes one lock, changes the state and sends its update
/// while still holding it, so updates arrive in the order the changes were
/// made. Updates go to an unbounded channel: a slow consumer delays
/// nothing here. Deleting a node leaves its pods in place (the API server
/// does the same until the pod garbage collector runs).
pub struct EmbeddedCluster {
    state: Mutex<State>,
    updates: mpsc::UnboundedSender<ClusterUpdate>,
    binds: AtomicU64,
}

impl std::fmt::Debug for EmbeddedCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.lock();
        f.debug_struct("EmbeddedCluster")
            .field("nodes", &s.nodes.len())
            .field("pods", &s.pods.len())
            .field("bound", &s.bound)
            .finish()
    }
}

fn is_bound(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty())
}

fn node_name(node: &Node) -> Option<&str> {
    node.metadata.name.as_deref().filter(|n| !n.is_empty())
}

fn pod_key(pod: &Pod) -> Result<PodKey, ClusterError> {
    match pod.metadata.name.as_deref() {
        Some(n) if !n.is_empty() => Ok(PodKey::of(pod)),
        _ => Err(ClusterError::MissingName("pod")),
    }
}

impl EmbeddedCluster {
    /// A cluster holding `objects`, and the stream of its updates: one
    /// `ObjectApplied` per [`ClusterObject`] (Namespace, claim, ...), one
    /// `PodGroupApplied` per PodGroup, one `NodeAdded` per node, one
    /// `PodAdded` per pod (assigned pods included), then `Synced`, then
    /// every later change.
    ///
    /// The objects are expected to come from [`crate::parse_objects`]
    /// (unique names, UIDs set, PodGroups valid); a later duplicate replaces
    /// an earlier one, and a PodGroup that cannot be read is skipped. Pods
    /// are created here as the API server creates them
    /// ([`prepare_pod_for_create`]), once.
    pub fn new(objects: Objects) -> (Arc<EmbeddedCluster>, mpsc::UnboundedReceiver<ClusterUpdate>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let cluster = Arc::new(EmbeddedCluster {
            state: Mutex::new(State::default()),
            updates: tx,
            binds: AtomicU64::new(0),
        });
        {
            let mut s = cluster.state.lock();
            for obj in objects.others {
                let obj = admit(&mut s, obj);
                s.objects.insert((obj.kind(), obj.key()), obj.clone());
                cluster.send(ClusterUpdate::ObjectApplied(obj));
            }
            for obj in objects.custom {
                let obj = s.stamp_custom(obj);
                cluster.send(ClusterUpdate::CustomApplied(obj));
            }
            for mut t in objects.resource_claim_templates {
                let ns = t.metadata.namespace.get_or_insert_with(|| "default".into()).clone();
                let name = t.metadata.name.clone().unwrap_or_default();
                t.metadata.resource_version = Some(s.next_version());
                s.templates.insert((ns, name), Arc::new(t));
            }
            let classes = s.priority_classes();
            for mut g in objects.pod_groups {
                // `parse_objects` has already admitted them and refused
                // unreadable PodGroups.
                let _ = admit_pod_group_priority(&mut g.object, &classes);
                let Ok(pg) = PodGroup::from_json(&g.object) else { continue };
                let pg = Arc::new(pg);
                s.groups.insert(pg.key.clone(), pg.clone());
                cluster.send(ClusterUpdate::PodGroupApplied(pg));
            }
            for mut node in objects.nodes {
                node.metadata.resource_version = Some(s.next_version());
                let node = Arc::new(node);
                let name: Arc<str> = Arc::from(node_name(&node).unwrap_or(""));
                s.nodes.insert(name, Arc::clone(&node));
                cluster.send(ClusterUpdate::NodeAdded(node));
            }
            for mut pod in objects.pods {
                prepare_pod_for_create(&mut pod);
                // `parse_objects` has already refused unknown classes.
                if let Some(spec) = pod.spec.as_mut() {
                    let _ = admit_priority(spec, &classes);
                }
                pod.metadata.resource_version = Some(s.next_version());
                let pod = Arc::new(pod);
                if let Some(old) = s.pods.insert(PodKey::of(&pod), Arc::clone(&pod)) {
                    s.bound -= usize::from(is_bound(&old));
                }
                s.bound += usize::from(is_bound(&pod));
                cluster.send(ClusterUpdate::PodAdded(pod.clone()));
                cluster.sync_pod_claims(&mut s, &pod, false);
            }
            cluster.send(ClusterUpdate::Synced);
        }
        (cluster, rx)
    }

    /// Creates or replaces a PodGroup of either API from its JSON form, an
    /// upstream one's priority resolved from its PriorityClass as the
    /// Priority admission plugin does; emits `PodGroupApplied`.
    pub fn apply_pod_group(
        &self,
        object: &serde_json::Value,
    ) -> Result<Arc<PodGroup>, ClusterError> {
        let mut s = self.state.lock();
        let mut object = object.clone();
        admit_pod_group_priority(&mut object, &s.priority_classes())
            .map_err(|e| ClusterError::Invalid(format!("PodGroup: {e}")))?;
        let mut pg =
            PodGroup::from_json(&object).map_err(|e| ClusterError::Invalid(e.to_string()))?;
        pg.resource_version = s.next_version();
        let pg = Arc::new(pg);
        s.groups.insert(pg.key.clone(), pg.clone());
        self.send(ClusterUpdate::PodGroupApplied(pg.clone()));
        Ok(pg)
    }

    /// Deletes a PodGroup; emits `PodGroupDeleted`.
    pub fn delete_pod_group(&self, key: &GroupKey) -> Result<Arc<PodGroup>, ClusterError> {
        let mut s = self.state.lock();
        let pg = s
            .groups
            .remove(key)
            .ok_or_else(|| ClusterError::NotFound(format!("podgroup {key}")))?;
        self.send(ClusterUpdate::PodGroupDeleted(key.clone()));
        Ok(pg)
    }

    /// Creates or replaces a custom resource of a kind a plugin declared
    /// (its `metadata.name` required); emits `CustomApplied`.
    pub fn apply_custom(&self, obj: CustomObject) -> Result<Arc<CustomObject>, ClusterError> {
        if obj.name().is_empty() {
            return Err(ClusterError::MissingName(obj.api.kind));
        }
        let mut s = self.state.lock();
        let obj = s.stamp_custom(obj);
        self.send(ClusterUpdate::CustomApplied(obj.clone()));
        Ok(obj)
    }

    /// Deletes a custom resource by API and key (`namespace/name` or
    /// `name`); emits `CustomDeleted`.
    pub fn delete_custom(&self, api: &ApiInfo, key: &str) -> Result<(), ClusterError> {
        let mut s = self.state.lock();
        let obj = s
            .custom
            .remove(&(*api, key.to_string()))
            .ok_or_else(|| ClusterError::NotFound(format!("{} {key}", api.kind)))?;
        self.send(ClusterUpdate::CustomDeleted(obj));
        Ok(())
    }

    /// Creates or replaces a [`ClusterObject`] (a Namespace, a workload
    /// controller, a claim, a volume, a DeviceClass, a ResourceSlice, a
    /// ResourceClaim, a DeviceTaintRule, ...); emits `ObjectApplied`. A volume without phase
    /// nor claim becomes `Available`, as the PV controller makes it; a
    /// ResourceClaim gets a UID when it has none (`sim-claim-<ns>-<name>`,
    /// or the one of the claim it replaces); the DRA kinds get a new
    /// resourceVersion.
    pub fn apply_object(&self, obj: ClusterObject) -> Result<(), ClusterError> {
        if obj.metadata().name.as_deref().unwrap_or("").is_empty() {
            return Err(ClusterError::MissingName(obj.kind()));
        }
        let mut s = self.state.lock();
        let obj = admit(&mut s, obj);
        s.objects.insert((obj.kind(), obj.key()), obj.clone());
        self.send(ClusterUpdate::ObjectApplied(obj));
        Ok(())
    }

    /// Deletes an object applied with [`apply_object`](Self::apply_object)
    /// by kind and key (`namespace/name`, or `name` for a cluster-scoped
    /// kind); emits `ObjectDeleted`. A ResourceClaim with the
    /// delete-protection finalizer that pods still use is only marked
    /// deleted (`deletionTimestamp`, `ObjectApplied`) and goes when they
    /// are gone, as with the resourceclaim controller.
    pub fn delete_object(&self, kind: &str, key: &str) -> Result<ClusterObject, ClusterError> {
        let mut s = self.state.lock();
        let k = s
            .objects
            .keys()
            .find(|(k, n)| *k == kind && n == key)
            .cloned()
            .ok_or_else(|| ClusterError::NotFound(format!("{kind} {key}")))?;
        if let Some(ClusterObject::ResourceClaim(c)) = s.objects.get(&k).cloned() {
            self.delete_claim(&mut s, &c);
            return Ok(ClusterObject::ResourceClaim(c));
        }
        let obj = s.objects.remove(&k).expect("found above");
        self.send(ClusterUpdate::ObjectDeleted(obj.clone()));
        Ok(obj)
    }

    /// The [`ClusterObject`]s held.
    pub fn objects(&self) -> Vec<ClusterObject> {
        self.state.lock().objects.values().cloned().collect()
    }

    /// The PodGroups held.
    pub fn pod_groups(&self) -> Vec<Arc<PodGroup>> {
        self.state.lock().groups.values().cloned().collect()
    }

    fn send(&self, update: ClusterUpdate) {
        // A dropped receiver means nobody watches any more: not an error.
        let _ = self.updates.send(update);
    }

    /// Adds a node; emits `NodeAdded`.
    pub fn add_node(&self, mut node: Node) -> Result<Arc<Node>, ClusterError> {
        let name: Arc<str> = Arc::from(node_name(&node).ok_or(ClusterError::MissingName("node"))?);
        let mut s = self.state.lock();
        if s.nodes.contains_key(&name) {
            return Err(ClusterError::AlreadyExists(format!("node {name}")));
        }
        if node.metadata.uid.as_deref().is_none_or(str::is_empty) {
            node.metadata.uid = Some(format!("sim-node-{name}"));
        }
        node.metadata.resource_version = Some(s.next_version());
        let node = Arc::new(node);
        s.nodes.insert(name, Arc::clone(&node));
        self.send(ClusterUpdate::NodeAdded(Arc::clone(&node)));
        Ok(node)
    }

    /// Replaces a node (found by name; keeps its UID when the new object
    /// has none); emits `NodeUpdated`.
    pub fn update_node(&self, mut node: Node) -> Result<Arc<Node>, ClusterError> {
        let name = node_name(&node).ok_or(ClusterError::MissingName("node"))?;
        let mut s = self.state.lock();
        let Some(old) = s.nodes.get(name).cloned() else {
            return Err(ClusterError::NotFound(format!("node {name}")));
        };
        if node.metadata.uid.as_deref().is_none_or(str::is_empty) {
            node.metadata.uid.clone_from(&old.metadata.uid);
        }
        node.metadata.resource_version = Some(s.next_version());
        let node = Arc::new(node);
        let name: Arc<str> = Arc::from(node_name(&node).unwrap_or(""));
        s.nodes.insert(name, Arc::clone(&node));
        self.send(ClusterUpdate::NodeUpdated { old, new: Arc::clone(&node) });
        Ok(node)
    }

    /// Deletes a node; emits `NodeDeleted`. Its pods stay.
    pub fn delete_node(&self, name: &str) -> Result<Arc<Node>, ClusterError> {
        let mut s = self.state.lock();
        let node =
            s.nodes.remove(name).ok_or_else(|| ClusterError::NotFound(format!("node {name}")))?;
        self.send(ClusterUpdate::NodeDeleted(Arc::clone(&node)));
        Ok(node)
    }

    /// Creates a pod as the API server would ([`prepare_pod_for_create`]:
    /// namespace `default` and a UID when absent, `matchLabelKeys` and
    /// `mismatchLabelKeys` merged into its pod affinity selectors and
    /// `matchLabelKeys` into its spread constraints' selectors; with
    /// scheduling gates, `PodScheduled=False`, reason `SchedulingGated`;
    /// its priority resolved from its PriorityClass as the Priority
    /// admission plugin does, an unknown class refused); emits `PodAdded`.
    pub fn add_pod(&self, mut pod: Pod) -> Result<Arc<Pod>, ClusterError> {
        let key = pod_key(&pod)?;
        let mut s = self.state.lock();
        if s.pods.contains_key(&key) {
            return Err(ClusterError::AlreadyExists(format!("pod {key}")));
        }
        if let Some(spec) = pod.spec.as_mut() {
            admit_priority(spec, &s.priority_classes())
                .map_err(|e| ClusterError::Invalid(format!("pod {key}: {e}")))?;
        }
        prepare_pod_for_create(&mut pod);
        pod.metadata.resource_version = Some(s.next_version());
        let pod = Arc::new(pod);
        s.bound += usize::from(is_bound(&pod));
        s.pods.insert(key, Arc::clone(&pod));
        self.send(ClusterUpdate::PodAdded(Arc::clone(&pod)));
        self.sync_pod_claims(&mut s, &pod, false);
        Ok(pod)
    }

    /// Replaces a pod (found by namespace/name; keeps its UID when the new
    /// object has none); emits `PodUpdated`.
    pub fn update_pod(&self, mut pod: Pod) -> Result<Arc<Pod>, ClusterError> {
        let key = pod_key(&pod)?;
        let mut s = self.state.lock();
        let Some(old) = s.pods.get(&key).cloned() else {
            return Err(ClusterError::NotFound(format!("pod {key}")));
        };
        if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
            pod.metadata.uid.clone_from(&old.metadata.uid);
        }
        default_pod(&mut pod);
        pod.metadata.resource_version = Some(s.next_version());
        let pod = Arc::new(pod);
        s.bound = s.bound - usize::from(is_bound(&old)) + usize::from(is_bound(&pod));
        s.pods.insert(key, Arc::clone(&pod));
        self.send(ClusterUpdate::PodUpdated { old, new: Arc::clone(&pod) });
        if dra::is_pod_done(&pod) {
            self.release_pod_claims(&mut s, &pod, false);
        } else {
            self.sync_pod_claims(&mut s, &pod, true);
        }
        Ok(pod)
    }

    /// Deletes a pod; emits `PodDeleted`.
    pub fn delete_pod(&self, namespace: &str, name: &str) -> Result<Arc<Pod>, ClusterError> {
        let key = PodKey::new(namespace, name);
        let mut s = self.state.lock();
        let pod =
            s.pods.remove(&key).ok_or_else(|| ClusterError::NotFound(format!("pod {key}")))?;
        s.bound -= usize::from(is_bound(&pod));
        self.send(ClusterUpdate::PodDeleted(Arc::clone(&pod)));
        self.release_pod_claims(&mut s, &pod, true);
        Ok(pod)
    }

    /// The pod `namespace/name`.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.state.lock().pods.get(&PodKey::new(namespace, name)).cloned()
    }

    /// The node `name`.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.state.lock().nodes.get(name).cloned()
    }

    /// All pods, sorted by namespace/name.
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        let mut pods: Vec<(PodKey, Arc<Pod>)> =
            self.state.lock().pods.iter().map(|(k, p)| (k.clone(), Arc::clone(p))).collect();
        pods.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        pods.into_iter().map(|(_, p)| p).collect()
    }

    /// All nodes, sorted by name.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        let mut nodes: Vec<(Arc<str>, Arc<Node>)> =
            self.state.lock().nodes.iter().map(|(k, n)| (Arc::clone(k), Arc::clone(n))).collect();
        nodes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        nodes.into_iter().map(|(_, n)| n).collect()
    }

    /// How many pods are assigned to a node (`spec.nodeName` set), however
    /// they got there.
    pub fn bound_count(&self) -> usize {
        self.state.lock().bound
    }

    /// How many binds through [`Binder::bind`] have succeeded.
    pub fn bind_count(&self) -> u64 {
        self.binds.load(Ordering::Relaxed)
    }

    /// The pods preemption deleted, in order.
    pub fn evictions(&self) -> Vec<Eviction> {
        self.state.lock().evictions.clone()
    }

    /// Preempts a pod as the API server sees upstream's executor do it:
    /// the pod (with that UID) is deleted at once (no kubelet here to wait
    /// for; its `DisruptionTarget` condition would be gone with it), and
    /// the eviction recorded; `PodDeleted` is emitted. A pod already gone
    /// or recreated under another UID is left alone.
    pub fn preempt_now(&self, victim: &PodInfo, preemptor: &PodInfo, node: &str) {
        let mut s = self.state.lock();
        let same = s.pods.get(&victim.key).is_some_and(|p| {
            victim.uid.is_empty() || p.metadata.uid.as_deref() == Some(&*victim.uid)
        });
        if !same {
            return;
        }
        let pod = s.pods.remove(&victim.key).expect("checked above");
        s.bound -= usize::from(is_bound(&pod));
        // The node it left (a gang's members run on other nodes than the
        // preemptor's).
        let left = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or(node);
        s.evictions.push(Eviction {
            victim: victim.key.clone(),
            node: left.to_string(),
            preemptor: preemptor.key.clone(),
        });
        self.send(ClusterUpdate::PodDeleted(pod.clone()));
        self.release_pod_claims(&mut s, &pod, true);
    }

    /// Writes a pod's `status.nominatedNodeName` (`None` clears it) as a
    /// status patch would; emits `PodUpdated`. A pod gone or recreated is
    /// left alone.
    pub fn set_nominated_node_name(&self, pod: &PodInfo, node: Option<&str>) {
        let mut s = self.state.lock();
        let Some(old) = s.pods.get(&pod.key).cloned() else { return };
        if !pod.uid.is_empty() && old.metadata.uid.as_deref() != Some(&*pod.uid) {
            return;
        }
        let mut new = Pod::clone(&old);
        let status = new.status.get_or_insert_with(PodStatus::default);
        if status.nominated_node_name.as_deref() == node {
            return;
        }
        status.nominated_node_name = node.map(str::to_string);
        new.metadata.resource_version = Some(s.next_version());
        let new = Arc::new(new);
        s.pods.insert(pod.key.clone(), Arc::clone(&new));
        self.send(ClusterUpdate::PodUpdated { old, new });
    }

    /// Binds a pod as the API server's `pods/binding` does; see
    /// [`Binder::bind`] (which returns this, already resolved).
    pub fn bind_now(&self, pod: &PodInfo, node: &str) -> Result<(), BindError> {
        let mut s = self.state.lock();
        let Some(old) = s.pods.get(&pod.key) else {
            return Err(BindError::PodGone(format!("pod {} not found", pod.key)));
        };
        let uid = old.metadata.uid.as_deref().unwrap_or("");
        if !pod.uid.is_empty() && *pod.uid != *uid {
            return Err(BindError::PodGone(format!(
                "pod {} has UID {uid}, not {} (it was deleted and recreated)",
                pod.key, pod.uid
            )));
        }
        let current =
            old.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty());
        match current {
            Some(n) if n == node => return Err(BindError::AlreadyBound),
            Some(n) => {
                return Err(BindError::Failed(format!(
                    "pod {} is already assigned to node \"{n}\"",
                    pod.key
                )));
            }
            None => {}
        }
        if !s.nodes.contains_key(node) {
            return Err(BindError::Failed(format!("node \"{node}\" not found")));
        }
        let old = Arc::clone(old);
        let mut new = Pod::clone(&old);
        new.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        let status = new.status.get_or_insert_with(PodStatus::default);
        set_scheduled(status);
        // As kube-apiserver v1.37 on a binding
        // (`ClearingNominatedNodeNameAfterBinding`).
        status.nominated_node_name = None;
        new.metadata.resource_version = Some(s.next_version());
        let new = Arc::new(new);
        s.pods.insert(pod.key.clone(), Arc::clone(&new));
        s.bound += 1;
        self.binds.fetch_add(1, Ordering::Relaxed);
        self.send(ClusterUpdate::PodUpdated { old, new });
        Ok(())
    }
}

/// Sets the `PodScheduled=True` condition, as the API server does on a
/// binding (without a transition time, so simulations are reproducible).
fn set_scheduled(status: &mut PodStatus) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let scheduled = PodCondition {
        type_: "PodScheduled".to_string(),
        status: "True".to_string(),
        ..Default::default()
    };
    match conditions.iter_mut().find(|c| c.type_ == "PodScheduled") {
        Some(c) => *c = scheduled,
        None => conditions.push(scheduled),
    }
}

impl Binder for EmbeddedCluster {
    /// Binds at once; the future is ready immediately. Errors as the API
    /// server's: `PodGone` when the pod (with that UID) no longer exists,
    /// `AlreadyBound` when it is bound to this node, `Failed` when it is
    /// bound elsewhere (409 Conflict) or the node does not exist.
    fn bind(&self, pod: Arc<PodInfo>, node: Arc<str>) -> BoxFuture<'static, Result<(), BindError>> {
        Box::pin(std::future::ready(self.bind_now(&pod, &node)))
    }

    /// The pods bound to the node in the cluster now (whether or not their
    /// updates have been applied by the scheduler yet).
    fn pods_on_node(&self, node: Arc<str>) -> convoy_api::FreshPods {
        let pods = self
            .pods()
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&*node))
            .collect();
        Box::pin(std::future::ready(Some(pods)))
    }

    /// [`EmbeddedCluster::write_volume_now`]: the write and, at once, what
    /// the PV controller and a provisioner make of it; ready immediately.
    fn write_volume(&self, write: VolumeWrite) -> BoxFuture<'static, Result<String, BindError>> {
        Box::pin(std::future::ready(self.write_volume_now(write)))
    }

    /// [`EmbeddedCluster::write_claim_now`]; ready immediately.
    fn write_claim(
        &self,
        write: ClaimWrite,
    ) -> BoxFuture<'static, Result<Arc<ResourceClaim>, BindError>> {
        Box::pin(std::future::ready(self.write_claim_now(write)))
    }
}

impl PreemptionActuator for EmbeddedCluster {
    /// [`EmbeddedCluster::preempt_now`]; ready at once.
    fn preempt(
        &self,
        victim: Arc<PodInfo>,
        preemptor: Arc<PodInfo>,
        node: Arc<str>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        self.preempt_now(&victim, &preemptor, &node);
        Box::pin(std::future::ready(Ok(())))
    }

    /// [`EmbeddedCluster::set_nominated_node_name`]; ready at once.
    fn set_nominated_node_name(
        &self,
        pod: Arc<PodInfo>,
        node: Option<Arc<str>>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        EmbeddedCluster::set_nominated_node_name(self, &pod, node.as_deref());
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The embedded cluster as a [`PreemptionActuator`] of its own type.
#[derive(Debug, Clone)]
pub struct EmbeddedActuator(pub Arc<EmbeddedCluster>);

impl PreemptionActuator for EmbeddedActuator {
    /// As [`EmbeddedCluster`]'s.
    fn preempt(
        &self,
        victim: Arc<PodInfo>,
        preemptor: Arc<PodInfo>,
        node: Arc<str>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        self.0.preempt(victim, preemptor, node)
    }

    /// As [`EmbeddedCluster`]'s.
    fn set_nominated_node_name(
        &self,
        pod: Arc<PodInfo>,
        node: Option<Arc<str>>,
    ) -> BoxFuture<'static, Result<(), PreemptionError>> {
        PreemptionActuator::set_nominated_node_name(&*self.0, pod, node)
    }
}

/// The embedded cluster as a [`Binder`], for code that wants a binder type
/// of its own (`Arc<EmbeddedCluster>` is a binder too).
#[derive(Debug, Clone)]
pub struct EmbeddedBinder(pub Arc<EmbeddedCluster>);

impl Binder for EmbeddedBinder {
    /// As [`EmbeddedCluster`]'s `bind`.
    fn bind(&self, pod: Arc<PodInfo>, node: Arc<str>) -> BoxFuture<'static, Result<(), BindError>> {
        self.0.bind(pod, node)
    }

    /// As [`EmbeddedCluster`]'s `write_volume`.
    fn write_volume(&self, write: VolumeWrite) -> BoxFuture<'static, Result<String, BindError>> {
        self.0.write_volume(write)
    }

    /// As [`EmbeddedCluster`]'s `write_claim`.
    fn write_claim(
        &self,
        write: ClaimWrite,
    ) -> BoxFuture<'static, Result<Arc<ResourceClaim>, BindError>> {
        self.0.write_claim(write)
    }

    /// As [`EmbeddedCluster`]'s `pods_on_node`.
    fn pods_on_node(&self, node: Arc<str>) -> convoy_api::FreshPods {
        self.0.pods_on_node(node)
    }
}

/// What the API server and the controllers make of an object applied:
/// see [`EmbeddedCluster::apply_object`].
fn admit(s: &mut State, obj: ClusterObject) -> ClusterObject {
    match obj {
        ClusterObject::ResourceClaim(c) => {
            ClusterObject::ResourceClaim(Arc::new(EmbeddedCluster::admit_claim(s, &c)))
        }
        ClusterObject::DeviceClass(c) => {
            let mut c = k8s_openapi::api::resource::v1::DeviceClass::clone(&c);
            c.metadata.resource_version = Some(s.next_version());
            ClusterObject::DeviceClass(Arc::new(c))
        }
        ClusterObject::ResourceSlice(c) => {
            let mut c = k8s_openapi::api::resource::v1::ResourceSlice::clone(&c);
            c.metadata.resource_version = Some(s.next_version());
            ClusterObject::ResourceSlice(Arc::new(c))
        }
        ClusterObject::DeviceTaintRule(c) => {
            let mut c = k8s_openapi::api::resource::v1::DeviceTaintRule::clone(&c);
            c.metadata.resource_version = Some(s.next_version());
            ClusterObject::DeviceTaintRule(Arc::new(c))
        }
        other => volumes::admit(other),
    }
}

mod dra;
#[cfg(test)]
mod tests;
mod volumes;
