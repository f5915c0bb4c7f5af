//! Fixture builders for tests and benchmarks:
//! `PodBuilder::new("p").cpu("500m").build()`, `NodeBuilder::new("n").cpu("4").build()`.
//!
//! They build real `k8s-openapi` objects, so what a test sets up is what the
//! scheduler would receive from the API server.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerImage, ContainerPort, Node, NodeSpec, NodeStatus, Pod,
    PodAffinityTerm, PodCondition, PodSchedulingGate, PodSpec, PodStatus, ResourceRequirements,
    Taint, Toleration, TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};

use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;

/// Builds a [`Pod`] with one container.
#[derive(Debug, Clone)]
pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    /// A pod in namespace `default` with UID = name and scheduler
    /// `convoy-scheduler`.
    pub fn new(name: &str) -> Self {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("default".to_string()),
                uid: Some(name.to_string()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                scheduler_name: Some("convoy-scheduler".to_string()),
                containers: vec![Container { name: "main".to_string(), ..Default::default() }],
                ..Default::default()
            }),
            ..Default::default()
        };
        Self { pod }
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.as_mut().expect("builder pods have a spec")
    }

    fn request(mut self, name: &str, q: &str) -> Self {
        let c = &mut self.spec().containers[0];
        c.resources
            .get_or_insert_with(ResourceRequirements::default)
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(name.to_string(), Quantity(q.to_string()));
        self
    }

    /// Namespace.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.to_string());
        self
    }
    /// UID.
    pub fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.to_string());
        self
    }
    /// CPU request.
    pub fn cpu(self, q: &str) -> Self {
        self.request("cpu", q)
    }
    /// Memory request.
    pub fn memory(self, q: &str) -> Self {
        self.request("memory", q)
    }
    /// Any resource request (`nvidia.com/gpu`, ...).
    pub fn resource(self, name: &str, q: &str) -> Self {
        self.request(name, q)
    }
    /// `spec.priority`.
    pub fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }
    /// `spec.schedulerName`.
    pub fn scheduler(mut self, name: &str) -> Self {
        self.spec().scheduler_name = Some(name.to_string());
        self
    }
    /// `spec.nodeName`.
    pub fn node(mut self, name: &str) -> Self {
        self.spec().node_name = Some(name.to_string());
        self
    }
    /// A label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.to_string(), v.to_string());
        self
    }
    /// A `spec.nodeSelector` entry.
    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(k.to_string(), v.to_string());
        self
    }
    /// A toleration (`operator` Equal when `value` is given, else Exists).
    pub fn toleration(mut self, key: &str, value: Option<&str>, effect: &str) -> Self {
        let t = Toleration {
            key: Some(key.to_string()),
            operator: Some(if value.is_some() { "Equal" } else { "Exists" }.to_string()),
            value: value.map(str::to_string),
            effect: (!effect.is_empty()).then(|| effect.to_string()),
            ..Default::default()
        };
        self.spec().tolerations.get_or_insert_with(Vec::new).push(t);
        self
    }
    /// A TCP host port on the first container.
    pub fn host_port(mut self, port: i32) -> Self {
        self.spec().containers[0].ports.get_or_insert_with(Vec::new).push(ContainerPort {
            container_port: port,
            host_port: Some(port),
            ..Default::default()
        });
        self
    }
    /// A scheduling gate.
    pub fn gate(mut self, name: &str) -> Self {
        self.spec()
            .scheduling_gates
            .get_or_insert_with(Vec::new)
            .push(PodSchedulingGate { name: name.to_string() });
        self
    }
    /// Member of the scheduler-plugins PodGroup `name` (the
    /// `scheduling.x-k8s.io/pod-group` label).
    pub fn pod_group(self, name: &str) -> Self {
        self.label(crate::pod_group::POD_GROUP_LABEL, name)
    }
    /// Member of the upstream PodGroup `name` (`spec.schedulingGroup`).
    pub fn scheduling_group(mut self, name: &str) -> Self {
        self.spec().scheduling_group = Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
            pod_group_name: Some(name.to_string()),
        });
        self
    }
    /// Member of the PodGroup `name` of `api`: [`Self::pod_group`] or
    /// [`Self::scheduling_group`].
    pub fn member_of(self, api: crate::PodGroupApi, name: &str) -> Self {
        match api {
            crate::PodGroupApi::XK8s => self.pod_group(name),
            crate::PodGroupApi::Upstream => self.scheduling_group(name),
        }
    }
    /// A required pod affinity term: pods labelled `labels` (in this pod's
    /// namespace) in the same `topology_key` domain.
    pub fn pod_affinity(mut self, topology_key: &str, labels: &[(&str, &str)]) -> Self {
        let term = affinity_term(topology_key, labels);
        let a = self.affinity().pod_affinity.get_or_insert_with(Default::default);
        a.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }
    /// A required pod anti-affinity term.
    pub fn pod_anti_affinity(mut self, topology_key: &str, labels: &[(&str, &str)]) -> Self {
        let term = affinity_term(topology_key, labels);
        let a = self.affinity().pod_anti_affinity.get_or_insert_with(Default::default);
        a.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }
    /// A preferred pod affinity term with a weight.
    pub fn preferred_pod_affinity(
        mut self,
        weight: i32,
        topology_key: &str,
        labels: &[(&str, &str)],
    ) -> Self {
        let term = WeightedPodAffinityTerm {
            weight,
            pod_affinity_term: affinity_term(topology_key, labels),
        };
        let a = self.affinity().pod_affinity.get_or_insert_with(Default::default);
        a.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }
    /// A preferred pod anti-affinity term with a weight.
    pub fn preferred_pod_anti_affinity(
        mut self,
        weight: i32,
        topology_key: &str,
        labels: &[(&str, &str)],
    ) -> Self {
        let term = WeightedPodAffinityTerm {
            weight,
            pod_affinity_term: affinity_term(topology_key, labels),
        };
        let a = self.affinity().pod_anti_affinity.get_or_insert_with(Default::default);
        a.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }
    /// A topology spread constraint over pods labelled `labels`
    /// (`when` is `DoNotSchedule` or `ScheduleAnyway`).
    pub fn spread(
        mut self,
        max_skew: i32,
        topology_key: &str,
        when: &str,
        labels: &[(&str, &str)],
    ) -> Self {
        let c = TopologySpreadConstraint {
            max_skew,
            topology_key: topology_key.to_string(),
            when_unsatisfiable: when.to_string(),
            label_selector: Some(match_labels(labels)),
            ..Default::default()
        };
        self.spec().topology_spread_constraints.get_or_insert_with(Vec::new).push(c);
        self
    }
    /// A controller owner reference (`ReplicaSet`, `StatefulSet`, ...).
    pub fn owner(mut self, kind: &str, name: &str) -> Self {
        let api_version = match kind {
            "ReplicationController" => "v1",
            _ => "apps/v1",
        };
        self.pod.metadata.owner_references.get_or_insert_with(Vec::new).push(OwnerReference {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            name: name.to_string(),
            uid: format!("{name}-uid"),
            controller: Some(true),
            ..Default::default()
        });
        self
    }
    /// The image of the first container.
    pub fn image(mut self, image: &str) -> Self {
        self.spec().containers[0].image = Some(image.to_string());
        self
    }
    fn affinity(&mut self) -> &mut Affinity {
        self.spec().affinity.get_or_insert_with(Affinity::default)
    }
    /// Applies a closure to the spec (for anything else).
    pub fn with_spec(mut self, f: impl FnOnce(&mut PodSpec)) -> Self {
        f(self.spec());
        self
    }
    /// Applies a closure to the status.
    pub fn with_status(mut self, f: impl FnOnce(&mut PodStatus)) -> Self {
        f(self.pod.status.get_or_insert_with(PodStatus::default));
        self
    }
    /// `spec.preemptionPolicy`.
    pub fn preemption_policy(self, policy: &str) -> Self {
        self.with_spec(|s| s.preemption_policy = Some(policy.to_string()))
    }
    /// `status.nominatedNodeName`.
    pub fn nominated(self, node: &str) -> Self {
        self.with_status(|s| s.nominated_node_name = Some(node.to_string()))
    }
    /// `status.startTime`, as seconds after 2026-01-01T00:00:00Z.
    pub fn started(self, seconds: i64) -> Self {
        let t = k8s_openapi::jiff::Timestamp::from_second(1_767_225_600 + seconds)
            .expect("a valid time");
        self.with_status(|s| s.start_time = Some(Time(t)))
    }
    /// `spec.activeDeadlineSeconds`.
    pub fn active_deadline(mut self, seconds: i64) -> Self {
        self.spec().active_deadline_seconds = Some(seconds);
        self
    }
    /// Being deleted after a preemption: `metadata.deletionTimestamp` and
    /// `DisruptionTarget=True`, reason `PreemptionByScheduler`.
    pub fn terminating_by_preemption(mut self) -> Self {
        let t = k8s_openapi::jiff::Timestamp::from_second(1_767_225_600).expect("a valid time");
        self.pod.metadata.deletion_timestamp = Some(Time(t));
        self.with_status(|s| {
            s.conditions.get_or_insert_with(Vec::new).push(PodCondition {
                type_: crate::preemption::DISRUPTION_TARGET.to_string(),
                status: "True".to_string(),
                reason: Some(crate::preemption::REASON_PREEMPTION_BY_SCHEDULER.to_string()),
                ..Default::default()
            })
        })
    }
    /// The pod.
    pub fn build(self) -> Pod {
        self.pod
    }
    /// The pod as a [`PodInfo`].
    ///
    /// # Panics
    /// If the pod is invalid (only with a bad quantity).
    pub fn info(self) -> Arc<PodInfo> {
        Arc::new(PodInfo::new(Arc::new(self.pod)).expect("valid test pod"))
    }
}

/// A `matchLabels` selector.
pub fn match_labels(labels: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        ..Default::default()
    }
}

fn affinity_term(topology_key: &str, labels: &[(&str, &str)]) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(match_labels(labels)),
        topology_key: topology_key.to_string(),
        ..Default::default()
    }
}

/// Builds a [`Node`]; the default is upstream scheduler_perf's node:
/// 4 CPUs, 32Gi, 110 pods.
#[derive(Debug, Clone)]
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    /// A node with 4 CPUs, 32Gi memory and 110 pods allocatable.
    pub fn new(name: &str) -> Self {
        let mut node = Node {
            metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus::default()),
        };
        let alloc = node.status.as_mut().unwrap().allocatable.get_or_insert_with(BTreeMap::new);
        for (k, v) in [("cpu", "4"), ("memory", "32Gi"), ("pods", "110")] {
            alloc.insert(k.to_string(), Quantity(v.to_string()));
        }
        Self { node }
    }

    /// Sets an allocatable resource.
    pub fn allocatable(mut self, name: &str, q: &str) -> Self {
        let status = self.node.status.get_or_insert_with(NodeStatus::default);
        status
            .allocatable
            .get_or_insert_with(BTreeMap::new)
            .insert(name.to_string(), Quantity(q.to_string()));
        self
    }
    /// Allocatable CPU.
    pub fn cpu(self, q: &str) -> Self {
        self.allocatable("cpu", q)
    }
    /// Allocatable memory.
    pub fn memory(self, q: &str) -> Self {
        self.allocatable("memory", q)
    }
    /// Allocatable pods.
    pub fn pods(self, q: &str) -> Self {
        self.allocatable("pods", q)
    }
    /// A label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.node
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.to_string(), v.to_string());
        self
    }
    /// A taint.
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        let spec = self.node.spec.get_or_insert_with(NodeSpec::default);
        spec.taints.get_or_insert_with(Vec::new).push(Taint {
            key: key.to_string(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect: effect.to_string(),
            ..Default::default()
        });
        self
    }
    /// An image present on the node (`status.images`), with its size in bytes.
    pub fn image(mut self, name: &str, size_bytes: i64) -> Self {
        let status = self.node.status.get_or_insert_with(NodeStatus::default);
        status.images.get_or_insert_with(Vec::new).push(ContainerImage {
            names: Some(vec![name.to_string()]),
            size_bytes: Some(size_bytes),
        });
        self
    }
    /// `spec.unschedulable: true`.
    pub fn unschedulable(mut self) -> Self {
        self.node.spec.get_or_insert_with(NodeSpec::default).unschedulable = Some(true);
        self
    }
    /// The node.
    pub fn build(self) -> Node {
        self.node
    }
    /// The node as a [`NodeInfo`] with no pods.
    pub fn info(self) -> NodeInfo {
        NodeInfo::new(Arc::new(self.node))
    }
}

/// A small deterministic random source (splitmix64) for randomised tests:
/// the same seed gives the same sequence on every machine, so a failing
/// seed can be replayed.
#[derive(Debug, Clone)]
pub struct TestRng(pub u64);

impl TestRng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// True with probability `percent` %.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// A gang PodGroup of `api` in namespace `default` (uid `uid-<name>`) that
/// needs `min` members; an upstream group also carries `priority` in its
/// spec (a scheduler-plugins group has no priority field).
pub fn gang_pod_group(
    api: crate::PodGroupApi,
    name: &str,
    min: usize,
    priority: i32,
) -> serde_json::Value {
    let metadata =
        serde_json::json!({"name": name, "namespace": "default", "uid": format!("uid-{name}")});
    match api {
        crate::PodGroupApi::XK8s => serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": metadata,
            "spec": {"minMember": min}
        }),
        crate::PodGroupApi::Upstream => serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": metadata,
            "spec": {"schedulingPolicy": {"gang": {"minCount": min}}, "priority": priority}
        }),
    }
}
