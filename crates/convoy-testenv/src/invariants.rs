//! An invariant checker for the chaos tests: its own watches of Pods, Nodes
//! and `Scheduled` Events (`kube::runtime::watcher`, straight to the API
//! server, not through a [`crate::FaultProxy`]) and, after every event, the
//! checks a scheduler must never fail however the network and its replicas
//! misbehave:
//!
//! - **Bound once**: a pod's `spec.nodeName`, once set, never changes (per
//!   UID, also across relists and deletion).
//! - **No double scheduling**: no two scheduler instances claim a pod.
//!   From the pod itself: the replica that bound it (Convoy's
//!   `convoy.dev/bound-by` annotation, copied from the Binding by the API
//!   server) is the one its `Scheduled` Events name. From the Events (which
//!   a scheduler may drop when its queue is full, so they are a second
//!   witness, not the first): no two reporting instances, and no Event
//!   naming another node than the pod's.
//!
//! Who bound what, in the API server's commit order (the pod watch's
//! order), is kept for the fencing check of a failover:
//! [`InvariantChecker::binds_after_successor`].
//! - **No over-commit**: on every node, the requests of its bound,
//!   non-terminal pods stay within its allocatable, for every resource the
//!   node lists (cpu, memory, pods, extended resources).
//!
//! What a test asserts at the end (every pod bound in time, failover time)
//! it reads from [`InvariantChecker::unbound`] and
//! [`InvariantChecker::first_bind_after`].
//!
//! A relist (the checker's own watch expiring) is applied as one step, at
//! `InitDone`, so that a pod deleted and another bound in its place while
//! the checker was not watching never look like an over-commit.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;

mod quantity;

pub use quantity::parse_nano;

/// The annotation a Convoy binding leaves on its pod: the replica that sent
/// it (`convoy_adapters::binder::BOUND_BY_ANNOTATION`).
pub const BOUND_BY_ANNOTATION: &str = "convoy.dev/bound-by";

/// A broken invariant, with the objects involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A pod's `spec.nodeName` changed after it was set.
    Rebound {
        /// `namespace/name`.
        pod: String,
        /// The node it was bound to first.
        first: String,
        /// The node it was seen on later.
        then: String,
    },
    /// Two scheduler instances each reported binding the pod.
    ScheduledTwice {
        /// `namespace/name`.
        pod: String,
        /// The `reportingInstance` of its `Scheduled` Events.
        reporters: Vec<String>,
    },
    /// A `Scheduled` Event names another node than the pod's.
    WrongNodeInEvent {
        /// `namespace/name`.
        pod: String,
        /// The node in the Event's note.
        event_node: String,
        /// The node the pod is bound to.
        bound_node: String,
    },
    /// A node's bound pods request more than its allocatable.
    OverCommitted {
        /// Node name.
        node: String,
        /// Resource name (`cpu`, `memory`, `pods`, ...).
        resource: String,
        /// Sum of requests, in billionths of the unit.
        requested_nano: i128,
        /// Allocatable, in billionths of the unit.
        allocatable_nano: i128,
        /// The pods on the node (`namespace/name`), for the report.
        pods: Vec<String>,
    },
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::Rebound { pod, first, then } => {
                write!(f, "pod {pod} was bound to {first}, then seen on {then}")
            }
            Violation::ScheduledTwice { pod, reporters } => {
                write!(f, "pod {pod} was reported Scheduled by {}", reporters.join(" and "))
            }
            Violation::WrongNodeInEvent { pod, event_node, bound_node } => {
                write!(f, "pod {pod}: a Scheduled event says {event_node}, it is on {bound_node}")
            }
            Violation::OverCommitted { node, resource, requested_nano, allocatable_nano, pods } => {
                let unit = 1e9;
                write!(
                    f,
                    "node {node} over its allocatable {resource}: {} requested of {} by {} pods \
                     ({})",
                    *requested_nano as f64 / unit,
                    *allocatable_nano as f64 / unit,
                    pods.len(),
                    pods.join(", ")
                )
            }
        }
    }
}

/// What the checker knows of a pod.
#[derive(Debug, Clone)]
struct PodRecord {
    key: String,
    scheduler: String,
    node: Option<String>,
    /// The replica that bound it (`convoy.dev/bound-by`), if it says.
    bound_by: Option<String>,
    terminal: bool,
    requests: BTreeMap<String, i128>,
}

/// Everything the watches have shown so far.
#[derive(Debug, Default)]
struct State {
    /// Live pods by UID.
    pods: HashMap<String, PodRecord>,
    /// Live nodes: allocatable per resource.
    nodes: HashMap<String, BTreeMap<String, i128>>,
    /// Every node a pod (by UID) was seen bound to, kept after deletion.
    bound: HashMap<String, String>,
    /// First observation of each binding: (pod, node, when).
    binds: Vec<(String, String, Instant)>,
    /// The replica that made each binding of `binds` (same index).
    bind_authors: Vec<Option<String>>,
    /// The replica that bound each pod, by UID, for the Events check.
    authors: HashMap<String, String>,
    /// When each node was seen deleted.
    nodes_deleted: HashMap<String, Instant>,
    /// `Scheduled` Events per pod UID: (pod key, reporting instance, node).
    scheduled: HashMap<String, Vec<(String, String, String)>>,
    violations: Vec<Violation>,
    /// (node, resource) pairs reported over-committed and not yet back under.
    over: BTreeSet<(String, String)>,
    /// Relists in progress, per kind: what they listed so far.
    listing_pods: Option<HashMap<String, PodRecord>>,
    listing_nodes: Option<HashMap<String, BTreeMap<String, i128>>>,
    /// Kinds whose first list is complete (pods, nodes, events).
    synced: [bool; 3],
    /// Lists after the first, per kind.
    relists: u64,
}

/// The invariant checker; see the [module docs](self). Its watches stop
/// when it is dropped.
#[derive(Debug)]
pub struct InvariantChecker {
    state: Arc<Mutex<State>>,
    tasks: Vec<JoinHandle<()>>,
}

impl InvariantChecker {
    /// Starts watching every Pod, Node and Event of the cluster with
    /// `client` (which should reach the API server directly).
    pub fn start(client: kube::Client) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let tasks = vec![
            spawn_watch(Api::<Pod>::all(client.clone()), Arc::clone(&state), State::on_pod),
            spawn_watch(Api::<Node>::all(client.clone()), Arc::clone(&state), State::on_node),
            spawn_watch(Api::<KubeEvent>::all(client), Arc::clone(&state), State::on_event),
        ];
        Self { state, tasks }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the first lists are complete; false after `timeout`.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.lock().synced.iter().all(|s| *s) {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        true
    }

    /// The violations seen so far, in order.
    pub fn violations(&self) -> Vec<Violation> {
        self.lock().violations.clone()
    }

    /// Pods seen bound (each counted once, also after deletion).
    pub fn bound_count(&self) -> usize {
        self.lock().bound.len()
    }

    /// How long after `since` the first binding was observed, if one was.
    pub fn first_bind_after(&self, since: Instant) -> Option<Duration> {
        self.lock().binds.iter().map(|(_, _, at)| *at).find(|at| *at > since).map(|at| at - since)
    }

    /// Live, non-terminal pods of `scheduler` not bound yet, by
    /// `namespace/name`.
    pub fn unbound(&self, scheduler: &str) -> Vec<String> {
        let state = self.lock();
        let mut pending: Vec<String> = state
            .pods
            .values()
            .filter(|p| p.scheduler == scheduler && p.node.is_none() && !p.terminal)
            .map(|p| p.key.clone())
            .collect();
        pending.sort();
        pending
    }

    /// Waits until every live pod of `scheduler` is bound; on timeout,
    /// returns those still pending.
    pub async fn wait_all_bound(
        &self,
        scheduler: &str,
        timeout: Duration,
    ) -> Result<(), Vec<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let pending = self.unbound(scheduler);
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(pending);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Bindings to `node` first observed more than `grace` after the node
    /// was seen deleted: (pod, delay after the deletion).
    pub fn bound_after_node_deleted(&self, node: &str, grace: Duration) -> Vec<(String, Duration)> {
        let state = self.lock();
        let Some(deleted) = state.nodes_deleted.get(node) else { return Vec::new() };
        state
            .binds
            .iter()
            .filter(|(_, n, at)| n == node && *at > *deleted + grace)
            .map(|(pod, _, at)| (pod.clone(), *at - *deleted))
            .collect()
    }

    /// Bindings to `node` first observed after `since`: (pod, when).
    pub fn binds_to_since(&self, node: &str, since: Instant) -> Vec<(String, Instant)> {
        let state = self.lock();
        state
            .binds
            .iter()
            .filter(|(_, n, at)| n == node && *at > since)
            .map(|(pod, _, at)| (pod.clone(), *at))
            .collect()
    }

    /// How many bindings each replica made (by `convoy.dev/bound-by`; pods
    /// bound without it are not counted).
    pub fn binds_by(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for author in self.lock().bind_authors.iter().flatten() {
            *counts.entry(author.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// The bindings `old` made that the API server committed after the
    /// first binding `new` made, in the order the checker's pod watch
    /// delivered them (the server's commit order, as long as the watch did
    /// not relist in between): an old leader's writes landing after its
    /// successor's. `(pod, node)`.
    pub fn binds_after_successor(&self, old: &str, new: &str) -> Vec<(String, String)> {
        let state = self.lock();
        let authors = &state.bind_authors;
        let Some(first) = authors.iter().position(|a| a.as_deref() == Some(new)) else {
            return Vec::new();
        };
        state.binds[first..]
            .iter()
            .zip(&authors[first..])
            .filter(|(_, a)| a.as_deref() == Some(old))
            .map(|((pod, node, _), _)| (pod.clone(), node.clone()))
            .collect()
    }

    /// When `node` was seen deleted, if it was.
    pub fn node_deleted_at(&self, node: &str) -> Option<Instant> {
        self.lock().nodes_deleted.get(node).copied()
    }

    /// How many times the checker's own watches listed again (after an
    /// expiry or a disconnection).
    pub fn relists(&self) -> u64 {
        self.lock().relists
    }
}

impl Drop for InvariantChecker {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Runs a watcher on `api` for as long as the checker lives, feeding its
/// events to `apply`.
fn spawn_watch<K>(
    api: Api<K>,
    state: Arc<Mutex<State>>,
    apply: fn(&mut State, Event<K>),
) -> JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
    K::DynamicType: Default,
{
    tokio::spawn(async move {
        let mut events =
            std::pin::pin!(watcher::watcher(api, watcher::Config::default()).backoff(Steady));
        while let Some(event) = events.next().await {
            // Errors are retried by the watcher (relisting after 410 Gone).
            if let Ok(event) = event {
                apply(&mut state.lock().unwrap_or_else(|e| e.into_inner()), event);
            }
        }
    })
}

/// The checker's retry delay: short and constant. A bind is recorded
/// when the checker sees it, so a checker whose watch backed off (client-go
/// style, up to 30 s) after an API server restart would date binds made
/// long before; retrying every 200 ms keeps its clock within a fraction
/// of a second of the server's once the server is back.
#[derive(Default)]
struct Steady;

impl Iterator for Steady {
    type Item = std::time::Duration;
    fn next(&mut self) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_millis(200))
    }
}

impl kube::runtime::utils::Backoff for Steady {
    fn reset(&mut self) {}
}

fn uid_of(meta: &kube::api::ObjectMeta) -> String {
    meta.uid.clone().unwrap_or_default()
}

fn key_of(meta: &kube::api::ObjectMeta) -> String {
    format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref().unwrap_or(""))
}

fn pod_record(pod: &Pod) -> PodRecord {
    let spec = pod.spec.as_ref();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    PodRecord {
        key: key_of(&pod.metadata),
        scheduler: spec.and_then(|s| s.scheduler_name.clone()).unwrap_or_default(),
        node: spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
        bound_by: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(BOUND_BY_ANNOTATION))
            .cloned(),
        terminal: matches!(phase, Some("Succeeded" | "Failed")),
        requests: quantity::pod_requests(pod),
    }
}

fn allocatable(node: &Node) -> BTreeMap<String, i128> {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .map(|a| a.iter().filter_map(|(name, q)| Some((name.clone(), parse_nano(&q.0)?))).collect())
        .unwrap_or_default()
}

impl State {
    fn on_pod(&mut self, event: Event<Pod>) {
        match event {
            Event::Init => {
                self.relists += u64::from(self.synced[0]);
                self.listing_pods = Some(HashMap::new());
            }
            Event::InitApply(pod) => {
                let record = pod_record(&pod);
                self.note_binding(&uid_of(&pod.metadata), &record);
                if let Some(listing) = &mut self.listing_pods {
                    listing.insert(uid_of(&pod.metadata), record);
                }
            }
            Event::InitDone => {
                if let Some(listed) = self.listing_pods.take() {
                    self.pods = listed;
                }
                self.synced[0] = true;
                let nodes: Vec<String> = self.nodes.keys().cloned().collect();
                nodes.iter().for_each(|n| self.check_node(n));
            }
            Event::Apply(pod) => {
                let uid = uid_of(&pod.metadata);
                let record = pod_record(&pod);
                self.note_binding(&uid, &record);
                let node = record.node.clone();
                self.pods.insert(uid, record);
                if let Some(node) = node {
                    self.check_node(&node);
                }
            }
            Event::Delete(pod) => {
                if let Some(node) = self.pods.remove(&uid_of(&pod.metadata)).and_then(|p| p.node) {
                    self.check_node(&node);
                }
            }
        }
    }

    fn on_node(&mut self, event: Event<Node>) {
        let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
        match event {
            Event::Init => {
                self.relists += u64::from(self.synced[1]);
                self.listing_nodes = Some(HashMap::new());
            }
            Event::InitApply(node) => {
                if let Some(listing) = &mut self.listing_nodes {
                    listing.insert(name(&node), allocatable(&node));
                }
            }
            Event::InitDone => {
                if let Some(listed) = self.listing_nodes.take() {
                    let now = Instant::now();
                    for gone in self.nodes.keys().filter(|n| !listed.contains_key(*n)) {
                        self.nodes_deleted.entry(gone.clone()).or_insert(now);
                    }
                    self.nodes = listed;
                }
                self.synced[1] = true;
                let nodes: Vec<String> = self.nodes.keys().cloned().collect();
                nodes.iter().for_each(|n| self.check_node(n));
            }
            Event::Apply(node) => {
                let name = name(&node);
                self.nodes.insert(name.clone(), allocatable(&node));
                self.check_node(&name);
            }
            Event::Delete(node) => {
                let name = name(&node);
                self.nodes.remove(&name);
                self.nodes_deleted.entry(name).or_insert_with(Instant::now);
            }
        }
    }

    fn on_event(&mut self, event: Event<KubeEvent>) {
        let (Event::Apply(e) | Event::InitApply(e)) = event else {
            if matches!(event, Event::InitDone) {
                self.synced[2] = true;
            }
            return;
        };
        if e.reason.as_deref() != Some("Scheduled") {
            return;
        }
        let Some(regarding) = e.regarding.as_ref() else { return };
        let uid = regarding.uid.clone().unwrap_or_default();
        let pod = format!(
            "{}/{}",
            regarding.namespace.as_deref().unwrap_or(""),
            regarding.name.as_deref().unwrap_or("")
        );
        let reporter = e.reporting_instance.clone().unwrap_or_default();
        // "Successfully assigned ns/pod to node".
        let node = e.note.as_deref().and_then(|n| n.rsplit_once(" to ")).map(|(_, n)| n);
        let node = node.unwrap_or_default().to_string();
        let seen = self.scheduled.entry(uid.clone()).or_default();
        // The same Event object again (a series update, a relist).
        if seen.iter().any(|(_, r, n)| *r == reporter && *n == node) {
            return;
        }
        seen.push((pod.clone(), reporter, node.clone()));
        let mut reporters: BTreeSet<&String> = seen.iter().map(|(_, r, _)| r).collect();
        let author = self.authors.get(&uid);
        reporters.extend(author);
        if reporters.len() > 1 {
            let reporters = reporters.into_iter().cloned().collect();
            self.violations.push(Violation::ScheduledTwice { pod: pod.clone(), reporters });
        }
        if let Some(bound) = self.bound.get(&uid)
            && *bound != node
        {
            let bound_node = bound.clone();
            self.violations.push(Violation::WrongNodeInEvent { pod, event_node: node, bound_node });
        }
    }

    /// Records the first binding of a pod and checks that it never changes.
    fn note_binding(&mut self, uid: &str, record: &PodRecord) {
        let Some(node) = &record.node else { return };
        match self.bound.get(uid) {
            None => {
                self.bound.insert(uid.to_string(), node.clone());
                self.binds.push((record.key.clone(), node.clone(), Instant::now()));
                self.bind_authors.push(record.bound_by.clone());
                if let Some(author) = &record.bound_by {
                    self.authors.insert(uid.to_string(), author.clone());
                    let reporters: BTreeSet<&String> = self
                        .scheduled
                        .get(uid)
                        .into_iter()
                        .flatten()
                        .map(|(_, r, _)| r)
                        .chain([author])
                        .collect();
                    if reporters.len() > 1 {
                        let reporters = reporters.into_iter().cloned().collect();
                        let pod = record.key.clone();
                        self.violations.push(Violation::ScheduledTwice { pod, reporters });
                    }
                }
                for (_, _, event_node) in self.scheduled.get(uid).into_iter().flatten() {
                    if event_node != node {
                        self.violations.push(Violation::WrongNodeInEvent {
                            pod: record.key.clone(),
                            event_node: event_node.clone(),
                            bound_node: node.clone(),
                        });
                    }
                }
            }
            Some(first) if first != node => self.violations.push(Violation::Rebound {
                pod: record.key.clone(),
                first: first.clone(),
                then: node.clone(),
            }),
            Some(_) => {}
        }
    }

    /// Checks one node's bound pods against its allocatable.
    fn check_node(&mut self, node: &str) {
        // Mid-relist, or a node that is gone (its pods stay bound to it).
        if self.listing_pods.is_some() || self.listing_nodes.is_some() {
            return;
        }
        let Some(allocatable) = self.nodes.get(node) else { return };
        let on_node: Vec<&PodRecord> =
            self.pods.values().filter(|p| p.node.as_deref() == Some(node) && !p.terminal).collect();
        let mut found = Vec::new();
        for (resource, limit) in allocatable {
            let requested: i128 = if resource == "pods" {
                on_node.len() as i128 * 1_000_000_000
            } else {
                on_node.iter().filter_map(|p| p.requests.get(resource)).sum()
            };
            let key = (node.to_string(), resource.clone());
            if requested > *limit {
                if self.over.insert(key) {
                    let mut pods: Vec<String> = on_node.iter().map(|p| p.key.clone()).collect();
                    pods.sort();
                    found.push(Violation::OverCommitted {
                        node: node.to_string(),
                        resource: resource.clone(),
                        requested_nano: requested,
                        allocatable_nano: *limit,
                        pods,
                    });
                }
            } else {
                self.over.remove(&key);
            }
        }
        self.violations.extend(found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: &str, pods: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name },
            "status": { "allocatable": { "cpu": cpu, "pods": pods } }
        }))
        .unwrap()
    }

    fn pod(name: &str, uid: &str, cpu: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": "ns", "uid": uid },
            "spec": {
                "schedulerName": "convoy",
                "nodeName": node,
                "containers": [{ "name": "c", "resources": { "requests": { "cpu": cpu } } }]
            }
        }))
        .unwrap()
    }

    fn synced() -> State {
        let mut s = State::default();
        s.on_node(Event::Init);
        s.on_node(Event::InitApply(node("n1", "1", "2")));
        s.on_node(Event::InitDone);
        s.on_pod(Event::Init);
        s.on_pod(Event::InitDone);
        s
    }

    #[test]
    fn over_commit_is_reported_once_with_the_pods() {
        let mut s = synced();
        s.on_pod(Event::Apply(pod("a", "1", "600m", Some("n1"))));
        assert!(s.violations.is_empty());
        s.on_pod(Event::Apply(pod("b", "2", "600m", Some("n1"))));
        s.on_pod(Event::Apply(pod("b", "2", "600m", Some("n1"))));
        assert_eq!(s.violations.len(), 1, "{:?}", s.violations);
        let text = s.violations[0].to_string();
        assert!(text.contains("node n1 over its allocatable cpu: 1.2 requested of 1"), "{text}");
        assert!(text.contains("ns/a, ns/b"), "{text}");
    }

    #[test]
    fn pod_count_is_a_resource() {
        let mut s = synced();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            s.on_pod(Event::Apply(pod(name, &i.to_string(), "1m", Some("n1"))));
        }
        assert!(
            matches!(&s.violations[..], [Violation::OverCommitted { resource, .. }] if resource == "pods")
        );
    }

    #[test]
    fn a_relist_is_applied_as_one_step() {
        let mut s = synced();
        s.on_pod(Event::Apply(pod("a", "1", "600m", Some("n1"))));
        // While the checker was away, a was deleted and b bound in its place.
        s.on_pod(Event::Init);
        s.on_pod(Event::InitApply(pod("b", "2", "600m", Some("n1"))));
        s.on_pod(Event::InitDone);
        assert!(s.violations.is_empty(), "{:?}", s.violations);
        assert_eq!(s.relists, 1);
        assert_eq!(s.bound.len(), 2);
    }

    #[test]
    fn rebinding_is_reported_also_after_deletion() {
        let mut s = synced();
        s.on_pod(Event::Apply(pod("a", "1", "1m", None)));
        s.on_pod(Event::Apply(pod("a", "1", "1m", Some("n1"))));
        s.on_pod(Event::Apply(pod("a", "1", "1m", Some("n1"))));
        assert!(s.violations.is_empty());
        s.on_pod(Event::Delete(pod("a", "1", "1m", Some("n1"))));
        s.on_pod(Event::Apply(pod("a", "1", "1m", Some("n2"))));
        assert_eq!(
            s.violations,
            [Violation::Rebound { pod: "ns/a".into(), first: "n1".into(), then: "n2".into() }]
        );
        // Same name, new UID: a new pod, free to go anywhere.
        s.on_pod(Event::Apply(pod("a", "2", "1m", Some("n2"))));
        assert_eq!(s.violations.len(), 1);
    }

    fn scheduled(uid: &str, reporter: &str, node: &str) -> KubeEvent {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": format!("e-{reporter}"), "namespace": "ns" },
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reason": "Scheduled",
            "reportingInstance": reporter,
            "note": format!("Successfully assigned ns/a to {node}"),
            "regarding": { "kind": "Pod", "namespace": "ns", "name": "a", "uid": uid }
        }))
        .unwrap()
    }

    #[test]
    fn scheduled_events_must_agree_with_the_binding() {
        let mut s = synced();
        s.on_event(Event::Apply(scheduled("1", "convoy-a", "n2")));
        s.on_event(Event::Apply(scheduled("1", "convoy-a", "n2")));
        assert!(s.violations.is_empty());
        s.on_pod(Event::Apply(pod("a", "1", "1m", Some("n1"))));
        assert!(
            matches!(&s.violations[..], [Violation::WrongNodeInEvent { event_node, .. }] if event_node == "n2")
        );
        s.on_event(Event::Apply(scheduled("1", "convoy-b", "n1")));
        assert!(
            matches!(&s.violations[1], Violation::ScheduledTwice { reporters, .. } if reporters.len() == 2)
        );
    }

    fn bound_by(mut pod: Pod, replica: &str) -> Pod {
        pod.metadata.annotations =
            Some([(BOUND_BY_ANNOTATION.to_string(), replica.to_string())].into());
        pod
    }

    #[test]
    fn the_replica_that_bound_a_pod_must_be_the_one_its_events_name() {
        let mut s = synced();
        s.on_pod(Event::Apply(bound_by(pod("a", "1", "1m", Some("n1")), "convoy-a")));
        s.on_event(Event::Apply(scheduled("1", "convoy-a", "n1")));
        assert!(s.violations.is_empty(), "{:?}", s.violations);
        // One Event from another replica suffices: the first witness is the
        // pod, not a second Event that could have been dropped.
        s.on_event(Event::Apply(scheduled("1", "convoy-b", "n1")));
        assert!(
            matches!(&s.violations[..], [Violation::ScheduledTwice { reporters, .. }] if reporters.len() == 2),
            "{:?}",
            s.violations
        );
        // And the other way round: the Event first, then the binding.
        let mut s = synced();
        s.on_event(Event::Apply(scheduled("2", "convoy-b", "n1")));
        s.on_pod(Event::Apply(bound_by(pod("a", "2", "1m", Some("n1")), "convoy-a")));
        assert!(
            matches!(&s.violations[..], [Violation::ScheduledTwice { .. }]),
            "{:?}",
            s.violations
        );
    }

    #[test]
    fn bindings_of_an_old_leader_after_its_successors_first_are_listed_in_commit_order() {
        let mut s = synced();
        s.on_node(Event::Apply(node("n2", "100", "100")));
        let bind = |s: &mut State, name: &str, uid: &str, by: &str| {
            s.on_pod(Event::Apply(bound_by(pod(name, uid, "1m", Some("n2")), by)));
        };
        bind(&mut s, "a", "1", "old");
        bind(&mut s, "b", "2", "old");
        bind(&mut s, "c", "3", "new");
        bind(&mut s, "d", "4", "old");
        bind(&mut s, "e", "5", "new");
        let checker = InvariantChecker { state: Arc::new(Mutex::new(s)), tasks: Vec::new() };
        assert_eq!(checker.binds_after_successor("old", "new"), [("ns/d".into(), "n2".into())]);
        // "new" bound c and e after old's first binding (a).
        assert_eq!(checker.binds_after_successor("new", "old").len(), 2);
        assert!(checker.binds_after_successor("old", "nobody").is_empty());
        assert_eq!(checker.binds_by(), [("new".to_string(), 2), ("old".to_string(), 3)].into());
    }

    #[test]
    fn unbound_and_terminal_pods_do_not_count() {
        let mut s = synced();
        s.on_pod(Event::Apply(pod("a", "1", "2", None)));
        let mut done = pod("b", "2", "2", Some("n1"));
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        s.on_pod(Event::Apply(done));
        assert!(s.violations.is_empty(), "{:?}", s.violations);
    }
}
