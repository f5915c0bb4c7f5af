//! What Filter and Score share (upstream `podtopologyspread/common.go` and
//! `helper/spread.go`, v1.37.2): the parsed constraints, the default
//! constraints' selector, counting matching pods, node inclusion policies,
//! and the interning of topology values.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use k8s_openapi::api::core::v1::{Toleration, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use convoy_api::labels::{Labels, no_labels};
use convoy_api::{NodeInfo, ObjectLister, PodInfo, PodList, Selector};

use crate::helper::node_affinity::{NodeView, RequiredNodeAffinity};
use crate::helper::taint::find_untolerated_no_schedule_taint;

/// `kubernetes.io/hostname`: counted per node at Score time.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// `topology.kubernetes.io/zone`.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// `whenUnsatisfiable: DoNotSchedule` (Filter).
pub const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
/// `whenUnsatisfiable: ScheduleAnyway` (Score).
pub const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";
/// Node inclusion policy `Honor`.
pub const HONOR: &str = "Honor";

/// A constraint with its selector parsed (upstream `topologySpreadConstraint`).
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    /// `maxSkew`.
    pub max_skew: i32,
    /// `topologyKey`.
    pub topology_key: Box<str>,
    /// `labelSelector`, with the `matchLabelKeys` of the pod ANDed.
    pub selector: Selector,
    /// `minDomains` (nil means 1).
    pub min_domains: i32,
    /// `nodeAffinityPolicy` is Honor (nil means Honor).
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy` is Honor (nil means Ignore).
    pub honor_node_taints: bool,
}

impl Constraint {
    /// Whether the key is `kubernetes.io/hostname` (counted from the node itself at Score).
    pub fn is_hostname(&self) -> bool {
        &*self.topology_key == LABEL_HOSTNAME
    }

    /// Upstream `matchNodeInclusionPolicies`: whether the node counts for this constraint
    /// (the pod's node affinity, when honored; its tolerations, when taints are honored).
    pub fn includes_node(
        &self,
        node: &NodeInfo,
        required: &RequiredNodeAffinity,
        tolerations: &[Toleration],
    ) -> bool {
        if self.honor_node_affinity && !required.matches(NodeView::of_info(node)) {
            return false;
        }
        !(self.honor_node_taints
            && find_untolerated_no_schedule_taint(node.taints(), tolerations).is_some())
    }
}

/// Upstream `filterTopologySpreadConstraints`: the constraints with this
/// `whenUnsatisfiable`, their selectors parsed, and `matchLabelKeys`
/// (gate MatchLabelKeysInPodTopologySpread, beta, on in 1.37) ANDed as
/// `key=value` for the keys the pod has. Errors name the bad selector.
pub fn filter_constraints(
    constraints: &[TopologySpreadConstraint],
    pod_labels: &Labels,
    action: &str,
) -> Result<Vec<Constraint>, String> {
    let mut out = Vec::new();
    for c in constraints.iter().filter(|c| c.when_unsatisfiable == action) {
        let mut selector = Selector::from_label_selector(c.label_selector.as_ref())?;
        let keys = c.match_label_keys.as_deref().unwrap_or(&[]);
        if !keys.is_empty() {
            let match_labels: Labels = keys
                .iter()
                .filter_map(|k| pod_labels.get(k).map(|v| (k.clone(), v.clone())))
                .collect();
            if !match_labels.is_empty() {
                selector = merge_label_set_with_selector(&match_labels, selector);
            }
        }
        out.push(Constraint {
            max_skew: c.max_skew,
            topology_key: Box::from(c.topology_key.as_str()),
            selector,
            min_domains: c.min_domains.unwrap_or(1),
            honor_node_affinity: c.node_affinity_policy.as_deref().is_none_or(|p| p == HONOR),
            honor_node_taints: c.node_taints_policy.as_deref() == Some(HONOR),
        });
    }
    Ok(out)
}

/// Upstream `mergeLabelSetWithSelector`: `key=value` for the set, then the
/// selector's requirements; a selector of nothing stays nothing.
fn merge_label_set_with_selector(set: &Labels, selector: Selector) -> Selector {
    if selector.is_nothing() {
        return selector;
    }
    Selector::from_set(set).with(selector.requirements().iter().cloned())
}

/// Upstream `helper.DefaultSelector`: the label-merge of the selectors of
/// the Services in the pod's namespace that select the pod, plus the
/// selector of the pod's controller if it is a ReplicationController,
/// ReplicaSet or StatefulSet. Selects everything when there is none.
pub fn default_selector(pod: &PodInfo, objects: &dyn ObjectLister) -> Selector {
    let labels = pod.labels();
    let ns = pod.namespace();
    let mut set = Labels::new();
    for service in objects.service_selectors(ns) {
        if service.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            set.extend(service.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    let mut selector = Selector::from_set(&set);
    let Some(owner) = controller_of(pod) else { return selector };
    let Some((group, version)) = parse_group_version(&owner.api_version) else { return selector };
    let other = match (group, version, owner.kind.as_str()) {
        ("", "v1", "ReplicationController") => {
            if let Some(rc) = objects.replication_controller_selector(ns, &owner.name) {
                set.extend(rc.iter().map(|(k, v)| (k.clone(), v.clone())));
                selector = Selector::from_set(&set);
            }
            return selector;
        }
        ("apps", "v1", "ReplicaSet") => objects.replica_set_selector(ns, &owner.name),
        ("apps", "v1", "StatefulSet") => objects.stateful_set_selector(ns, &owner.name),
        _ => None,
    };
    match other.map(|s| Selector::from_label_selector(Some(&s))) {
        Some(Ok(other)) if !other.is_nothing() => {
            selector.with(other.requirements().iter().cloned())
        }
        _ => selector,
    }
}

/// Upstream `metav1.GetControllerOfNoCopy`: the owner reference with `controller: true`.
fn controller_of(pod: &PodInfo) -> Option<&OwnerReference> {
    pod.pod.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true))
}

/// Upstream `schema.ParseGroupVersion`: `version` or `group/version`; more
/// than one `/` is an error.
fn parse_group_version(s: &str) -> Option<(&str, &str)> {
    match s.split_once('/') {
        None => Some(("", s)),
        Some((_, version)) if version.contains('/') => None,
        Some(gv) => Some(gv),
    }
}

/// Upstream `countPodsMatchSelector`: pods of namespace `ns`, not
/// terminating, that the selector matches; 0 for a selector of everything.
pub fn count_pods_match_selector(pods: &PodList, selector: &Selector, ns: &str) -> i64 {
    if selector.is_everything() || selector.is_nothing() {
        return 0;
    }
    pods.iter()
        .filter(|p| !p.is_terminating() && p.namespace() == ns && selector.matches(p.labels()))
        .count() as i64
}

/// A node's labels (none for a placeholder).
pub fn node_labels(node: &NodeInfo) -> &Labels {
    node.node().and_then(|n| n.metadata.labels.as_ref()).unwrap_or(no_labels())
}

/// Upstream `nodeLabelsMatchSpreadConstraints`: whether the labels have
/// every constraint's topology key.
pub fn has_all_keys(labels: &Labels, constraints: &[Constraint]) -> bool {
    constraints.iter().all(|c| labels.contains_key(&*c.topology_key))
}

/// Upstream `podLabelsMatchSpreadConstraints`: whether any constraint's selector matches.
pub fn labels_match_any(constraints: &[Constraint], labels: &Labels) -> bool {
    constraints.iter().any(|c| c.selector.matches(labels))
}

/// FNV-1a: topology values are short strings looked up once per node per
/// constraint on the Filter path, where SipHash costs more than the rest.
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// Hashes node addresses (`usize`, multiples of the allocation alignment)
/// with one multiplication: they are looked up once per feasible node.
#[derive(Clone, Copy, Default)]
pub struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        // Fibonacci hashing; the high bits, which the table uses, mix all.
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(32);
    }
}

/// The domains (topology values) of one constraint, interned once per cycle
/// so that counts live in a vector indexed by domain.
#[derive(Debug, Clone, Default)]
pub struct Domains {
    index: HashMap<Box<str>, u32, BuildHasherDefault<Fnv>>,
}

impl Domains {
    /// The index of a value, if it is a domain.
    pub fn get(&self, value: &str) -> Option<u32> {
        self.index.get(value).copied()
    }

    /// The index of a value, added as a new domain if needed.
    pub fn intern(&mut self, value: &str) -> u32 {
        if let Some(i) = self.get(value) {
            return i;
        }
        let i = self.index.len() as u32;
        self.index.insert(Box::from(value), i);
        i
    }

    /// The values and their indices, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u32)> {
        self.index.iter().map(|(v, &i)| (&**v, i))
    }

    /// Bytes held: the table and the values (an estimate of the table's
    /// layout: one entry and one control byte per bucket).
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        let entry = std::mem::size_of::<(Box<str>, u32)>() + 1;
        let values: usize = self.index.keys().map(|v| v.len()).sum();
        self.index.capacity() * entry * 8 / 7 + values
    }

    /// How many domains.
    pub fn len(&self) -> usize {
        self.index.len()
    }
}
