//! What the queue knows of each profile: its PreEnqueue plugins and, per
//! plugin, the cluster events it registered with their hints.
//!
//! Plugins are numbered once, at construction: a pod carries the bits of
//! the plugins that rejected it, and an event is first turned into the bits
//! of the plugins that registered for it, so deciding that a pod does not
//! care is one AND. Hint functions only run for pods that pass that test.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use convoy_api::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, PodInfo,
    PreEnqueuePlugin, QueueingHint,
};

use crate::store::Entry;

/// Number of distinct plugin bits; plugins past the 63rd share the last
/// bit and are told apart by name.
pub(crate) const PLUGIN_BITS: usize = 64;
const SHARED_BIT: u64 = 1 << (PLUGIN_BITS - 1);

/// A profile's queueing plugins, as given to the queue.
#[derive(Clone, Default)]
pub struct ProfileQueueing {
    /// PreEnqueue plugins, run in order; the first rejection gates the pod.
    pub pre_enqueue: Vec<Arc<dyn PreEnqueuePlugin>>,
    /// Plugin name → the events it registered (`events_to_register`).
    pub events: HashMap<&'static str, Vec<ClusterEventWithHint>>,
}

impl std::fmt::Debug for ProfileQueueing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pre: Vec<&str> = self.pre_enqueue.iter().map(|p| p.name()).collect();
        f.debug_struct("ProfileQueueing")
            .field("pre_enqueue", &pre)
            .field("events", &self.events)
            .finish()
    }
}

/// How a pod leaves the pool, from least to most urgent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Strategy {
    /// Stay where it is.
    Skip,
    /// backoffQ if its backoff has not ended, else activeQ.
    AfterBackoff,
    /// activeQ now (a Pending plugin's hint said Queue, or activation).
    Immediately,
}

struct PluginEvents {
    name: &'static str,
    bit: u64,
    events: Vec<ClusterEventWithHint>,
}

struct Profile {
    pre_enqueue: Vec<Arc<dyn PreEnqueuePlugin>>,
    plugins: Vec<PluginEvents>,
}

/// All profiles, compiled.
pub(crate) struct Profiles {
    /// Scheduler names in profile order: a scan of a few short strings
    /// beats hashing on the add path.
    names: Vec<String>,
    /// The last one is the empty profile of unknown scheduler names.
    list: Vec<Profile>,
    bits: HashMap<&'static str, u64>,
}

impl Profiles {
    /// Numbers the plugins and indexes the profiles.
    pub(crate) fn new(profiles: HashMap<String, ProfileQueueing>) -> Self {
        let mut names: BTreeSet<&'static str> = BTreeSet::new();
        for p in profiles.values() {
            names.extend(p.events.keys().copied());
        }
        let bits: HashMap<&'static str, u64> = names
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n, if i < PLUGIN_BITS - 1 { 1 << i } else { SHARED_BIT }))
            .collect();
        let mut names = Vec::new();
        let mut list = Vec::new();
        let mut sorted: Vec<_> = profiles.into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        for (scheduler_name, p) in sorted {
            let mut plugins: Vec<PluginEvents> = p
                .events
                .into_iter()
                .map(|(name, events)| PluginEvents { name, bit: bits[name], events })
                .collect();
            plugins.sort_by_key(|p| p.name);
            names.push(scheduler_name);
            list.push(Profile { pre_enqueue: p.pre_enqueue, plugins });
        }
        list.push(Profile { pre_enqueue: Vec::new(), plugins: Vec::new() });
        Self { names, list, bits }
    }

    /// The index of a pod's profile (the empty fallback for an unknown
    /// scheduler name).
    pub(crate) fn index(&self, pod: &PodInfo) -> usize {
        let name = pod.scheduler_name();
        self.names.iter().position(|n| n == name).unwrap_or(self.list.len() - 1)
    }

    /// The bits of a set of plugin names (plugins that registered no event
    /// have none).
    pub(crate) fn mask<'a>(&self, names: impl IntoIterator<Item = &'a &'static str>) -> u64 {
        names.into_iter().filter_map(|n| self.bits.get(n)).fold(0, |m, b| m | b)
    }

    /// Recomputes an entry's plugin bits from its rejecting plugins (or its
    /// gating plugin, which alone matters while gated).
    pub(crate) fn set_masks(&self, e: &mut Entry) {
        if let Some(gate) = e.gating_plugin {
            e.reject_mask = self.mask([&gate]);
            e.pending_mask = 0;
            e.any_event = false;
        } else {
            e.reject_mask = self.mask(&e.qpi.unschedulable_plugins);
            e.pending_mask = self.mask(&e.qpi.pending_plugins);
            e.any_event =
                e.qpi.unschedulable_plugins.is_empty() && e.qpi.pending_plugins.is_empty();
        }
    }

    /// Runs the profile's PreEnqueue plugins; returns the first one that
    /// did not return Success.
    pub(crate) fn pre_enqueue(&self, profile: usize, pod: &PodInfo) -> Option<&'static str> {
        self.list[profile]
            .pre_enqueue
            .iter()
            .find(|p| !p.pre_enqueue(pod).is_success())
            .map(|p| p.name())
    }

    /// For each profile, the bits of the plugins with a registration that
    /// `event` matches (written into `out`); returns their union.
    pub(crate) fn interest(&self, event: &ClusterEvent, out: &mut Vec<u64>) -> u64 {
        out.clear();
        let mut union = 0;
        for p in &self.list {
            let mut m = 0;
            for pe in &p.plugins {
                if pe.events.iter().any(|r| event.matches(&r.event)) {
                    m |= pe.bit;
                }
            }
            union |= m;
            out.push(m);
        }
        union
    }

    /// How a pod rejected by the plugins in its entry reacts to `event`,
    /// among the plugins in `interest`. With `hints = None` hint functions
    /// are not run and count as Queue (used for events whose objects are
    /// gone, which were seen while the pod was in flight).
    pub(crate) fn strategy(
        &self,
        e: &Entry,
        event: &ClusterEvent,
        interest: u64,
        hints: Option<(Option<&EventObject>, Option<&EventObject>)>,
    ) -> Strategy {
        if e.any_event || event.resource == EventResource::WildCard {
            return Strategy::AfterBackoff;
        }
        let mask = (e.reject_mask | e.pending_mask) & interest;
        if mask == 0 {
            return Strategy::Skip;
        }
        let mut result = Strategy::Skip;
        for pe in &self.list[e.profile].plugins {
            if pe.bit & mask == 0 || !Self::rejected_by(e, pe) {
                continue;
            }
            for reg in pe.events.iter().filter(|r| event.matches(&r.event)) {
                let hint = match (&reg.hint, hints) {
                    (Some(h), Some((old, new))) => h(&e.qpi.pod_info, old, new),
                    _ => QueueingHint::Queue,
                };
                if hint == QueueingHint::Skip {
                    continue;
                }
                if e.gating_plugin.is_none()
                    && e.pending_mask & pe.bit != 0
                    && Self::pending_on(e, pe)
                {
                    // Queue from a Pending plugin: retry at once (upstream).
                    return Strategy::Immediately;
                }
                result = Strategy::AfterBackoff;
                break;
            }
        }
        result
    }

    /// Whether the plugin is one of the entry's rejectors (checked by name
    /// only for plugins sharing the last bit).
    fn rejected_by(e: &Entry, pe: &PluginEvents) -> bool {
        if pe.bit != SHARED_BIT {
            return true;
        }
        match e.gating_plugin {
            Some(g) => g == pe.name,
            None => {
                e.qpi.unschedulable_plugins.contains(pe.name)
                    || e.qpi.pending_plugins.contains(pe.name)
            }
        }
    }

    fn pending_on(e: &Entry, pe: &PluginEvents) -> bool {
        pe.bit != SHARED_BIT || e.qpi.pending_plugins.contains(pe.name)
    }
}

/// The event an update of a pending pod amounts to, as upstream's
/// `PodSchedulingPropertiesChange`: the changes that may matter to
/// scheduling, or `UpdatePodOther`.
pub(crate) fn pod_update_event(old: &PodInfo, new: &PodInfo) -> ClusterEvent {
    let mut action = ActionType(0);
    if old.pod.metadata.labels != new.pod.metadata.labels {
        action |= ActionType::UPDATE_POD_LABEL;
    }
    let (o, n) = (&old.requests.requests, &new.requests.requests);
    let scalar_down = o.scalar.iter().any(|(k, v)| n.scalar.get(k).copied().unwrap_or(0) < *v);
    if n.milli_cpu < o.milli_cpu
        || n.memory < o.memory
        || n.ephemeral_storage < o.ephemeral_storage
        || scalar_down
    {
        action |= ActionType::UPDATE_POD_SCALE_DOWN;
    }
    if old.is_gated() && !new.is_gated() {
        action |= ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED;
    }
    if old.spec().tolerations != new.spec().tolerations {
        action |= ActionType::UPDATE_POD_TOLERATION;
    }
    if generated_claims(old) != generated_claims(new) {
        action |= ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM;
    }
    if action.0 == 0 {
        action = ActionType::UPDATE_OTHER;
    }
    ClusterEvent::new(EventResource::UnscheduledPod, action)
}

/// The pod's `status.resourceClaimStatuses` and
/// `status.extendedResourceClaimStatus`, an absent list and an empty one
/// alike (upstream `resourceclaim.PodStatusEqual` and
/// `PodExtendedStatusEqual`).
fn generated_claims(
    pod: &PodInfo,
) -> (
    &[convoy_api::k8s_openapi::api::core::v1::PodResourceClaimStatus],
    Option<&convoy_api::k8s_openapi::api::core::v1::PodExtendedResourceClaimStatus>,
) {
    let status = pod.pod.status.as_ref();
    (
        status.and_then(|s| s.resource_claim_statuses.as_deref()).unwrap_or_default(),
        status.and_then(|s| s.extended_resource_claim_status.as_ref()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::k8s_openapi::api::core::v1::{Pod, PodResourceClaimStatus, PodStatus};

    fn pod(claims: Option<Vec<(&str, Option<&str>)>>) -> PodInfo {
        let mut p = Pod::default();
        p.metadata.name = Some("p".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("u".into());
        p.spec = Some(Default::default());
        p.status = Some(PodStatus {
            resource_claim_statuses: claims.map(|c| {
                c.into_iter()
                    .map(|(name, claim)| PodResourceClaimStatus {
                        name: name.into(),
                        resource_claim_name: claim.map(Into::into),
                    })
                    .collect()
            }),
            ..Default::default()
        });
        PodInfo::new(Arc::new(p)).unwrap()
    }

    #[test]
    fn generated_claim_changes_are_their_own_update() {
        let generated = ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM;
        let none = pod(None);
        let empty = pod(Some(vec![]));
        let pending = pod(Some(vec![("gpu", None)]));
        let created = pod(Some(vec![("gpu", Some("p-gpu-x7k2q"))]));
        assert_eq!(pod_update_event(&none, &empty).action, ActionType::UPDATE_OTHER);
        assert_eq!(pod_update_event(&none, &pending).action, generated);
        assert_eq!(pod_update_event(&pending, &created).action, generated);
        assert_eq!(pod_update_event(&created, &created).action, ActionType::UPDATE_OTHER);
        assert_eq!(pod_update_event(&created, &created).resource, EventResource::UnscheduledPod);
    }
}
