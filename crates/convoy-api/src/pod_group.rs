//! PodGroups: the unit of gang scheduling, read from either API Convoy
//! speaks, and how a pod names its group.
//!
//! - `scheduling.x-k8s.io/v1alpha1` `PodGroup` (scheduler-plugins'
//!   coscheduling, used by Kubeflow): pods join with the label
//!   [`POD_GROUP_LABEL`]; `spec.minMember`, `spec.minResources`,
//!   `spec.scheduleTimeoutSeconds`.
//! - `scheduling.k8s.io/v1beta1` `PodGroup` (upstream, Kubernetes 1.37): pods
//!   join with `spec.schedulingGroup.podGroupName`;
//!   `spec.schedulingPolicy.gang.minCount`, or `basic` (no gang).
//!
//! Both are normalised into one [`PodGroup`]. A pod's group is found once,
//! when its [`PodInfo`](crate::PodInfo) is built ([`group_key_of`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::resource::Resource;

/// The label a pod joins a scheduler-plugins PodGroup with.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// `apiVersion` of scheduler-plugins' PodGroup.
pub const X_K8S_API_VERSION: &str = "scheduling.x-k8s.io/v1alpha1";
/// `apiVersion` of upstream's PodGroup.
pub const UPSTREAM_API_VERSION: &str = "scheduling.k8s.io/v1beta1";
/// Annotation on a PodGroup (either API) naming a node label key: all of the
/// group's pods must be placed on nodes sharing one value of that label
/// (one topology domain), or none is placed.
pub const REQUIRED_TOPOLOGY_ANNOTATION: &str = "convoy.dev/required-topology";
/// Annotation on a PodGroup (either API) naming node label keys, separated
/// by commas: the group is placed inside one domain of the narrowest of
/// these levels that can hold it (within its required domain, if any), and
/// anywhere its required domain allows only when none can. For example
/// `cloud.provider.com/topology-rack,nvidia.com/gpu.clique` with
/// `convoy.dev/required-topology: cloud.provider.com/topology-block`.
pub const PREFERRED_TOPOLOGY_ANNOTATION: &str = "convoy.dev/preferred-topology";

/// Which API a PodGroup (and a pod's reference to it) belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodGroupApi {
    /// `scheduling.x-k8s.io/v1alpha1` (scheduler-plugins).
    XK8s,
    /// `scheduling.k8s.io/v1beta1` (upstream).
    Upstream,
}

impl PodGroupApi {
    /// The `apiVersion` string.
    pub fn api_version(self) -> &'static str {
        match self {
            Self::XK8s => X_K8S_API_VERSION,
            Self::Upstream => UPSTREAM_API_VERSION,
        }
    }

    /// The API of an `apiVersion`, if Convoy speaks it.
    pub fn from_api_version(v: &str) -> Option<Self> {
        match v {
            X_K8S_API_VERSION => Some(Self::XK8s),
            UPSTREAM_API_VERSION => Some(Self::Upstream),
            _ => None,
        }
    }

    /// The API as discovery knows it ([`crate::apis`]).
    pub fn api(self) -> crate::apis::ApiInfo {
        match self {
            Self::XK8s => crate::apis::POD_GROUPS_X_K8S,
            Self::Upstream => crate::apis::POD_GROUPS_UPSTREAM,
        }
    }

    /// Where a pod names its group of this API.
    pub fn pod_field(self) -> &'static str {
        match self {
            Self::XK8s => "metadata.labels[scheduling.x-k8s.io/pod-group]",
            Self::Upstream => "spec.schedulingGroup.podGroupName",
        }
    }
}

/// A PodGroup's identity: API, namespace and name. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// The API.
    pub api: PodGroupApi,
    /// Namespace (pods join groups of their own namespace only).
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl GroupKey {
    /// A key.
    pub fn new(api: PodGroupApi, namespace: &str, name: &str) -> Self {
        Self { api, namespace: Arc::from(namespace), name: Arc::from(name) }
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The group a pod belongs to, if any: the scheduler-plugins label wins over
/// `spec.schedulingGroup` when a pod (oddly) carries both.
pub fn group_key_of(pod: &Pod) -> Option<GroupKey> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let label = pod.metadata.labels.as_ref().and_then(|l| l.get(POD_GROUP_LABEL));
    if let Some(name) = label.filter(|n| !n.is_empty()) {
        return Some(GroupKey::new(PodGroupApi::XK8s, ns, name));
    }
    let name = pod.spec.as_ref()?.scheduling_group.as_ref()?.pod_group_name.as_deref()?;
    (!name.is_empty()).then(|| GroupKey::new(PodGroupApi::Upstream, ns, name))
}

/// A PodGroup of either API, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct PodGroup {
    /// Identity.
    pub key: GroupKey,
    /// `metadata.uid` (empty if unset).
    pub uid: Arc<str>,
    /// `metadata.resourceVersion` (empty if unset).
    pub resource_version: String,
    /// Whether all-or-nothing applies (`false` for upstream's `basic`
    /// policy: its pods are scheduled one by one).
    pub gang: bool,
    /// Pods that must be placed together: `spec.minMember` or
    /// `spec.schedulingPolicy.gang.minCount` (1 for `basic`).
    pub min_member: u32,
    /// `spec.minResources` (scheduler-plugins only): the cluster must have
    /// this much free before the group is tried.
    pub min_resources: Option<Resource>,
    /// `spec.scheduleTimeoutSeconds` (scheduler-plugins only): how long
    /// members may wait at the Permit barrier.
    pub schedule_timeout: Option<Duration>,
    /// The [`REQUIRED_TOPOLOGY_ANNOTATION`] (either API) or the one
    /// `spec.schedulingConstraints.topology[].key` (upstream's), if set: a
    /// node label key whose value must be the same for every node of the
    /// group.
    pub required_topology: Option<Arc<str>>,
    /// The [`PREFERRED_TOPOLOGY_ANNOTATION`]'s keys, in the order written
    /// (empty without it).
    pub preferred_topology: Vec<Arc<str>>,
    /// `spec.priority` (upstream's API, written by the API server's
    /// `Priority` admission from `spec.priorityClassName`): the group's
    /// priority in preemption, as preemptor and as victim, as upstream's
    /// `PodGroupPriority`. `None` (scheduler-plugins' API, which has no
    /// such field): the highest priority among the members.
    pub priority: Option<i32>,
    /// `spec.preemptionPolicy: Never` (upstream's API): the group never
    /// preempts.
    pub never_preempts: bool,
}

/// The `spec` fields of upstream's PodGroup that Convoy knows (reads, or
/// refuses when set: see [`PodGroup::from_json`]); any other is refused by
/// name.
const UPSTREAM_SPEC_FIELDS: &[&str] = &[
    "parentCompositePodGroupName",
    "resourceClaims",
    "schedulingPolicy",
    "schedulingConstraints",
    "disruptionMode",
    "priorityClassName",
    "priority",
    "preemptionPolicy",
    "workloadRef",
];

/// A PodGroup object that cannot be read; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PodGroup {key}: {message}")]
pub struct InvalidPodGroup {
    /// `namespace/name` as far as known.
    pub key: String,
    /// What is wrong, naming the field.
    pub message: String,
}

impl PodGroup {
    /// Reads a PodGroup from its JSON form (`apiVersion` decides the API).
    ///
    /// Upstream's fields that change where or whether the group's pods run
    /// and that Convoy does not evaluate are refused with a message naming
    /// them, never ignored: `parentCompositePodGroupName`,
    /// `resourceClaims`, more than one topology constraint, and any spec
    /// field this version does not know. `priorityClassName` without
    /// `spec.priority` is refused too: the API server's admission resolves
    /// it (the embedded cluster does the same, `convoy_embedded::admission::admit_pod_group_priority`),
    /// so its absence means the priority is unknown. `workloadRef` is read
    /// by no scheduler decision (upstream's neither) and is accepted.
    /// `disruptionMode` `single` (the API server's default) and `all` are
    /// both evaluated as `all`: a running gang is preempted whole, never
    /// left below its minimum (docs/gang.md says why).
    pub fn from_json(obj: &Value) -> Result<Self, InvalidPodGroup> {
        let meta = obj.get("metadata");
        let s = |v: Option<&Value>, k: &str| {
            v.and_then(|m| m.get(k)).and_then(Value::as_str).unwrap_or("").to_string()
        };
        let name = s(meta, "name");
        let namespace = Some(s(meta, "namespace")).filter(|n| !n.is_empty());
        let namespace = namespace.unwrap_or_else(|| "default".to_string());
        let err = |message: String| InvalidPodGroup { key: format!("{namespace}/{name}"), message };
        if name.is_empty() {
            return Err(err("metadata.name: required".into()));
        }
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let api = PodGroupApi::from_api_version(api_version).ok_or_else(|| {
            err(format!(
                "apiVersion: unsupported {api_version:?} (expected {X_K8S_API_VERSION} or {UPSTREAM_API_VERSION})"
            ))
        })?;
        let spec = obj.get("spec");
        let int = |path: &str, v: Option<&Value>| -> Result<Option<i64>, InvalidPodGroup> {
            match v {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_i64()
                    .map(Some)
                    .ok_or_else(|| err(format!("{path}: expected an integer, got {v}"))),
            }
        };
        let mut upstream = UpstreamExtras::default();
        let (gang, min_member, min_resources, schedule_timeout) = match api {
            PodGroupApi::XK8s => {
                let min = int("spec.minMember", spec.and_then(|s| s.get("minMember")))?;
                let min = min.unwrap_or(0);
                if min < 1 {
                    return Err(err(format!("spec.minMember: must be at least 1, got {min}")));
                }
                if min > i64::from(i32::MAX) {
                    return Err(err(format!("spec.minMember: must fit in 32 bits, got {min}")));
                }
                let res = match spec.and_then(|s| s.get("minResources")) {
                    None | Some(Value::Null) => None,
                    Some(v) => {
                        let list = serde_json::from_value(v.clone())
                            .map_err(|e| err(format!("spec.minResources: {e}")))?;
                        let r = Resource::from_list(&list)
                            .map_err(|(name, e)| err(format!("spec.minResources.{name}: {e}")))?;
                        Some(r)
                    }
                };
                let timeout = int(
                    "spec.scheduleTimeoutSeconds",
                    spec.and_then(|s| s.get("scheduleTimeoutSeconds")),
                )?;
                let timeout = match timeout {
                    Some(t) if t < 1 => {
                        return Err(err(format!(
                            "spec.scheduleTimeoutSeconds: must be positive, got {t}"
                        )));
                    }
                    t => t.map(|t| Duration::from_secs(t as u64)),
                };
                (true, min as u32, res, timeout)
            }
            PodGroupApi::Upstream => {
                let policy = spec.and_then(|s| s.get("schedulingPolicy"));
                let gang_policy = match (
                    policy.and_then(|p| p.get("gang")),
                    policy.and_then(|p| p.get("basic")),
                ) {
                    (Some(g), None) => {
                        let min = int("spec.schedulingPolicy.gang.minCount", g.get("minCount"))?;
                        let min = min.unwrap_or(0);
                        if min < 1 {
                            return Err(err(format!(
                                "spec.schedulingPolicy.gang.minCount: must be at least 1, got {min}"
                            )));
                        }
                        if min > i64::from(i32::MAX) {
                            return Err(err(format!(
                                "spec.schedulingPolicy.gang.minCount: must fit in 32 bits, got {min}"
                            )));
                        }
                        (true, min as u32, None, None)
                    }
                    (None, Some(_)) => (false, 1, None, None),
                    (Some(_), Some(_)) => {
                        return Err(err(
                            "spec.schedulingPolicy: exactly one of gang and basic may be set"
                                .into(),
                        ));
                    }
                    (None, None) => {
                        return Err(err(
                            "spec.schedulingPolicy: one of gang and basic is required".into(),
                        ));
                    }
                };
                upstream = UpstreamExtras::read(spec).map_err(err)?;
                gang_policy
            }
        };
        let annotated = meta
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(REQUIRED_TOPOLOGY_ANNOTATION))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(Arc::<str>::from);
        let required_topology = match (annotated, upstream.topology) {
            (Some(a), Some(t)) if a != t => {
                return Err(err(format!(
                    "spec.schedulingConstraints.topology[0].key: {t:?} differs from the \
                     {REQUIRED_TOPOLOGY_ANNOTATION} annotation {a:?}"
                )));
            }
            (a, t) => a.or(t),
        };
        let preferred_topology = match meta
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(PREFERRED_TOPOLOGY_ANNOTATION))
        {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(list)) => {
                let keys: Vec<&str> = list.split(',').map(str::trim).collect();
                if keys.iter().any(|k| k.is_empty()) {
                    return Err(err(format!(
                        "metadata.annotations[{PREFERRED_TOPOLOGY_ANNOTATION}]: {list:?} has an \
                         empty label key (expected keys separated by commas)"
                    )));
                }
                keys.into_iter().map(Arc::from).collect()
            }
            Some(other) => {
                return Err(err(format!(
                    "metadata.annotations[{PREFERRED_TOPOLOGY_ANNOTATION}]: expected a string, \
                     got {other}"
                )));
            }
        };
        Ok(Self {
            key: GroupKey::new(api, &namespace, &name),
            uid: Arc::from(s(meta, "uid")),
            resource_version: s(meta, "resourceVersion"),
            gang,
            min_member,
            min_resources,
            schedule_timeout,
            required_topology,
            preferred_topology,
            priority: upstream.priority,
            never_preempts: upstream.never_preempts,
        })
    }
}

/// What upstream's PodGroup says beyond its scheduling policy.
#[derive(Debug, Default)]
struct UpstreamExtras {
    priority: Option<i32>,
    never_preempts: bool,
    topology: Option<Arc<str>>,
}

impl UpstreamExtras {
    /// Reads them, refusing what Convoy does not evaluate (see
    /// [`PodGroup::from_json`]); the error names the field.
    fn read(spec: Option<&Value>) -> Result<Self, String> {
        let Some(spec) = spec.and_then(Value::as_object) else { return Ok(Self::default()) };
        let set = |k: &str| spec.get(k).filter(|v| !v.is_null());
        if let Some(v) = set("parentCompositePodGroupName") {
            return Err(format!(
                "spec.parentCompositePodGroupName: {v}: CompositePodGroups are not evaluated by \
                 this scheduler yet"
            ));
        }
        if set("resourceClaims").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            return Err("spec.resourceClaims: PodGroup ResourceClaims are not evaluated by this \
                        scheduler yet"
                .into());
        }
        if let Some(k) = spec.keys().find(|k| !UPSTREAM_SPEC_FIELDS.contains(&k.as_str())) {
            return Err(format!("spec.{k}: not evaluated by this scheduler"));
        }
        let mut out = Self::default();
        if let Some(mode) = set("disruptionMode") {
            // `single` (the API server's default) is evaluated as `all`:
            // a running gang is never left below its minimum.
            if mode.get("all").is_some() == mode.get("single").is_some() {
                return Err("spec.disruptionMode: exactly one of single and all must be set".into());
            }
        }
        out.priority = match set("priority") {
            None => None,
            Some(v) => Some(
                v.as_i64()
                    .and_then(|p| i32::try_from(p).ok())
                    .ok_or_else(|| format!("spec.priority: expected a 32-bit integer, got {v}"))?,
            ),
        };
        let class = set("priorityClassName").and_then(Value::as_str).unwrap_or("");
        if out.priority.is_none() && !class.is_empty() {
            return Err(format!(
                "spec.priorityClassName: {class:?} without spec.priority (the API server's \
                 Priority admission resolves the class into spec.priority; without it the \
                 group's priority is unknown)"
            ));
        }
        out.never_preempts = match set("preemptionPolicy") {
            None => false,
            Some(v) => match v.as_str() {
                Some("Never") => true,
                Some("PreemptLowerPriority") => false,
                _ => {
                    return Err(format!(
                        "spec.preemptionPolicy: expected Never or PreemptLowerPriority, got {v}"
                    ));
                }
            },
        };
        if let Some(c) = set("schedulingConstraints") {
            let topology = c.get("topology").filter(|t| !t.is_null());
            let list = match topology {
                None => Vec::new(),
                Some(t) => t.as_array().cloned().ok_or_else(|| {
                    format!("spec.schedulingConstraints.topology: expected a list, got {t}")
                })?,
            };
            if let Some(k) = c.as_object().and_then(|o| o.keys().find(|k| *k != "topology")) {
                return Err(format!(
                    "spec.schedulingConstraints.{k}: not evaluated by this scheduler"
                ));
            }
            match list.as_slice() {
                [] => {}
                [one] => {
                    let key = one.get("key").and_then(Value::as_str).unwrap_or("");
                    if key.is_empty() {
                        return Err("spec.schedulingConstraints.topology[0].key: required".into());
                    }
                    out.topology = Some(Arc::from(key));
                }
                _ => {
                    return Err(format!(
                        "spec.schedulingConstraints.topology: {} constraints; this scheduler \
                         evaluates one",
                        list.len()
                    ));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_both_apis() {
        let x = PodGroup::from_json(&json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml",
                         "annotations": {"convoy.dev/required-topology": "topology.kubernetes.io/zone"}},
            "spec": {"minMember": 8, "minResources": {"cpu": "4", "nvidia.com/gpu": "8"},
                     "scheduleTimeoutSeconds": 30}
        }))
        .unwrap();
        assert_eq!(x.key, GroupKey::new(PodGroupApi::XK8s, "ml", "train"));
        assert!(x.gang);
        assert_eq!(x.min_member, 8);
        assert_eq!(x.min_resources.as_ref().unwrap().get("cpu"), 4000);
        assert_eq!(x.min_resources.as_ref().unwrap().get("nvidia.com/gpu"), 8);
        assert_eq!(x.schedule_timeout, Some(Duration::from_secs(30)));
        assert_eq!(x.required_topology.as_deref(), Some("topology.kubernetes.io/zone"));

        let u = PodGroup::from_json(&json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}
        }))
        .unwrap();
        assert_eq!(u.key, GroupKey::new(PodGroupApi::Upstream, "default", "g"));
        assert_eq!((u.gang, u.min_member), (true, 3));

        let b = PodGroup::from_json(&json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "b"}, "spec": {"schedulingPolicy": {"basic": {}}}
        }))
        .unwrap();
        assert_eq!((b.gang, b.min_member), (false, 1));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "metadata": {"name": "g"}, "spec": {"minMember": 0}}),
                "PodGroup default/g: spec.minMember: must be at least 1, got 0",
            ),
            (
                json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "metadata": {"name": "g"}, "spec": {"minMember": -3}}),
                "PodGroup default/g: spec.minMember: must be at least 1, got -3",
            ),
            (
                // Not truncated to 1 (2^32 + 1 as a u32).
                json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "metadata": {"name": "g"}, "spec": {"minMember": 4_294_967_297_i64}}),
                "PodGroup default/g: spec.minMember: must fit in 32 bits, got 4294967297",
            ),
            (
                json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "metadata": {"name": "g"},
                       "spec": {"minMember": 2, "minResources": {"memory": "-1Gi"}}}),
                "PodGroup default/g: spec.minResources.memory: invalid quantity \"-1Gi\": must be greater than or equal to 0",
            ),
            (
                json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "metadata": {"name": "g"}, "spec": {"minMember": "8"}}),
                "PodGroup default/g: spec.minMember: expected an integer, got \"8\"",
            ),
            (
                json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "metadata": {"name": "g"},
                       "spec": {"minMember": 2, "minResources": {"cpu": "lots"}}}),
                "PodGroup default/g: spec.minResources.cpu: ",
            ),
            (
                json!({"apiVersion": "scheduling.k8s.io/v1beta1", "metadata": {"name": "g", "namespace": "n"}, "spec": {}}),
                "PodGroup n/g: spec.schedulingPolicy: one of gang and basic is required",
            ),
            (
                json!({"apiVersion": "scheduling.k8s.io/v1beta1", "metadata": {"name": "g"},
                       "spec": {"schedulingPolicy": {"gang": {"minCount": -1}}}}),
                "PodGroup default/g: spec.schedulingPolicy.gang.minCount: must be at least 1, got -1",
            ),
            (
                json!({"apiVersion": "scheduling.k8s.io/v1beta1", "metadata": {"name": "g"},
                       "spec": {"schedulingPolicy": {"gang": {"minCount": 1_i64 << 40}}}}),
                "PodGroup default/g: spec.schedulingPolicy.gang.minCount: must fit in 32 bits",
            ),
            (
                json!({"apiVersion": "example.com/v1", "metadata": {"name": "g"}}),
                "PodGroup default/g: apiVersion: unsupported \"example.com/v1\"",
            ),
        ];
        for (obj, want) in cases {
            let got = PodGroup::from_json(&obj).unwrap_err().to_string();
            assert!(got.starts_with(want), "{got} does not start with {want}");
        }
    }

    #[test]
    fn preferred_topology_levels_from_the_annotation() {
        let g = PodGroup::from_json(&json!({
            "apiVersion": UPSTREAM_API_VERSION, "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "annotations": {
                PREFERRED_TOPOLOGY_ANNOTATION: "rack, nvlink"}},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                     "schedulingConstraints": {"topology": [{"key": "block"}]}}
        }))
        .unwrap();
        assert_eq!(g.required_topology.as_deref(), Some("block"));
        let keys: Vec<&str> = g.preferred_topology.iter().map(|k| &**k).collect();
        assert_eq!(keys, ["rack", "nvlink"]);
        let err = PodGroup::from_json(&json!({
            "apiVersion": X_K8S_API_VERSION, "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "annotations": {
                PREFERRED_TOPOLOGY_ANNOTATION: "rack,,nvlink"}},
            "spec": {"minMember": 2}
        }))
        .unwrap_err();
        assert!(
            err.message.contains("metadata.annotations[convoy.dev/preferred-topology]"),
            "{err}"
        );
    }

    /// Upstream's priority, preemption policy and topology constraint are
    /// read; what Convoy does not evaluate is refused by name.
    #[test]
    fn upstream_fields_are_read_or_refused() {
        let up = |spec: Value| {
            let mut spec = spec;
            spec["schedulingPolicy"] = json!({"gang": {"minCount": 2}});
            PodGroup::from_json(&json!({
                "apiVersion": "scheduling.k8s.io/v1beta1", "metadata": {"name": "g"}, "spec": spec
            }))
        };
        let g = up(json!({
            "priorityClassName": "urgent", "priority": 1000, "preemptionPolicy": "Never",
            "disruptionMode": {"all": {}}, "workloadRef": {"name": "w"},
            "schedulingConstraints": {"topology": [{"key": "rack"}]}
        }))
        .unwrap();
        assert_eq!((g.priority, g.never_preempts), (Some(1000), true));
        assert_eq!(g.required_topology.as_deref(), Some("rack"));
        let g = up(
            json!({"preemptionPolicy": "PreemptLowerPriority", "disruptionMode": {"single": {}}}),
        )
        .unwrap();
        assert_eq!((g.priority, g.never_preempts, g.required_topology), (None, false, None));

        let refused = [
            (json!({"disruptionMode": {}}), "spec.disruptionMode: exactly one of single and all"),
            (
                json!({"parentCompositePodGroupName": "p"}),
                "spec.parentCompositePodGroupName: \"p\": CompositePodGroups",
            ),
            (
                json!({"resourceClaims": [{"name": "c"}]}),
                "spec.resourceClaims: PodGroup ResourceClaims",
            ),
            (
                json!({"priorityClassName": "urgent"}),
                "spec.priorityClassName: \"urgent\" without spec.priority",
            ),
            (json!({"priority": "high"}), "spec.priority: expected a 32-bit integer"),
            (json!({"preemptionPolicy": "Sometimes"}), "spec.preemptionPolicy: expected Never or"),
            (
                json!({"schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]}}),
                "spec.schedulingConstraints.topology: 2 constraints",
            ),
            (
                json!({"schedulingConstraints": {"topology": [{}]}}),
                "spec.schedulingConstraints.topology[0].key: required",
            ),
            (json!({"futureField": 1}), "spec.futureField: not evaluated by this scheduler"),
        ];
        for (spec, want) in refused {
            let got = up(spec.clone()).unwrap_err().message;
            assert!(got.starts_with(want), "{spec}: {got}");
        }
        // The annotation and the constraint must agree.
        let err = PodGroup::from_json(&json!({
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "metadata": {"name": "g", "annotations": {REQUIRED_TOPOLOGY_ANNOTATION: "zone"}},
            "spec": {"schedulingPolicy": {"basic": {}}, "schedulingConstraints": {"topology": [{"key": "rack"}]}}
        }))
        .unwrap_err();
        assert!(err.message.contains("differs from the convoy.dev/required-topology"), "{err}");
    }

    #[test]
    fn pods_name_their_group() {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("ml".into());
        assert_eq!(group_key_of(&pod), None);
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            scheduling_group: Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
                pod_group_name: Some("up".into()),
            }),
            ..Default::default()
        });
        assert_eq!(group_key_of(&pod), Some(GroupKey::new(PodGroupApi::Upstream, "ml", "up")));
        pod.metadata.labels = Some([(POD_GROUP_LABEL.to_string(), "x".to_string())].into());
        assert_eq!(group_key_of(&pod), Some(GroupKey::new(PodGroupApi::XK8s, "ml", "x")));
    }
}
