//! Convoy's default plugins and upstream's `mergePlugins` (`pkg/scheduler/apis/config/v1/default_plugins.go`).

use crate::types::{PluginRef, PluginSet};

/// Plugin names this crate refers to, as upstream spells them.
pub mod names {
    /// `SchedulingGates` (PreEnqueue).
    pub const SCHEDULING_GATES: &str = "SchedulingGates";
    /// `PrioritySort` (QueueSort).
    pub const PRIORITY_SORT: &str = "PrioritySort";
    /// `NodeUnschedulable`.
    pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
    /// `NodeName`.
    pub const NODE_NAME: &str = "NodeName";
    /// `TaintToleration`.
    pub const TAINT_TOLERATION: &str = "TaintToleration";
    /// `NodeAffinity`.
    pub const NODE_AFFINITY: &str = "NodeAffinity";
    /// `NodePorts`.
    pub const NODE_PORTS: &str = "NodePorts";
    /// `NodeResourcesFit`.
    pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
    /// `InterPodAffinity`.
    pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
    /// `PodTopologySpread`.
    pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
    /// `NodeResourcesBalancedAllocation`.
    pub const NODE_RESOURCES_BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
    /// `ImageLocality` (Score).
    pub const IMAGE_LOCALITY: &str = "ImageLocality";
    /// `DefaultBinder`.
    pub const DEFAULT_BINDER: &str = "DefaultBinder";
    /// `GangScheduling` (PreEnqueue, PreFilter, Reserve, Permit): gangs of
    /// both PodGroup APIs; built by the scheduler (`convoy-gang`).
    pub const GANG_SCHEDULING: &str = "GangScheduling";
    /// `Coscheduling`: scheduler-plugins' name for the same plugin (an
    /// alias; enabling it replaces the default `GangScheduling`).
    pub const COSCHEDULING: &str = "Coscheduling";
    /// `GpuPlacement` (Convoy's own; not in the default set, enabled by a profile).
    pub const GPU_PLACEMENT: &str = "GpuPlacement";

    /// `DefaultPreemption` (PostFilter).
    pub const DEFAULT_PREEMPTION: &str = "DefaultPreemption";

    /// `VolumeBinding`: PVCs and generic ephemeral volumes (bound claims'
    /// volumes; WaitForFirstConsumer claims bound on the chosen node).
    pub const VOLUME_BINDING: &str = "VolumeBinding";
    /// `VolumeRestrictions`: in-tree disk conflicts, ReadWriteOncePod PVCs.
    pub const VOLUME_RESTRICTIONS: &str = "VolumeRestrictions";
    /// `VolumeZone`: the zones of bound PVs.
    pub const VOLUME_ZONE: &str = "VolumeZone";
    /// `NodeVolumeLimits`: CSI attach limits.
    pub const NODE_VOLUME_LIMITS: &str = "NodeVolumeLimits";

    // Upstream default plugins (v1.37) Convoy does not implement yet: named
    // by the pod-field table (`convoy_api::pod_fields`) and the framework,
    // which refuses the pods they would have to evaluate.

    /// `DynamicResources`: ResourceClaims and DRA extended resources.
    pub const DYNAMIC_RESOURCES: &str = "DynamicResources";
    /// `NodeDeclaredFeatures`: node features a pod requires (default since
    /// 1.37, when its feature gate went GA).
    pub const NODE_DECLARED_FEATURES: &str = "NodeDeclaredFeatures";
}

/// Convoy's default multiPoint set, in order, with score weights as upstream.
pub fn default_multi_point() -> Vec<PluginRef> {
    use names::*;
    vec![
        PluginRef::new(SCHEDULING_GATES),
        PluginRef::new(PRIORITY_SORT),
        PluginRef::new(GANG_SCHEDULING),
        PluginRef::new(NODE_UNSCHEDULABLE),
        PluginRef::new(NODE_NAME),
        PluginRef::weighted(TAINT_TOLERATION, 3),
        PluginRef::weighted(NODE_AFFINITY, 2),
        PluginRef::new(NODE_PORTS),
        PluginRef::weighted(NODE_RESOURCES_FIT, 1),
        PluginRef::new(VOLUME_RESTRICTIONS),
        PluginRef::new(NODE_VOLUME_LIMITS),
        PluginRef::new(VOLUME_BINDING),
        PluginRef::new(VOLUME_ZONE),
        PluginRef::weighted(POD_TOPOLOGY_SPREAD, 2),
        PluginRef::weighted(INTER_POD_AFFINITY, 2),
        // Before DefaultPreemption, as upstream: deallocating an idle claim
        // beats evicting a pod.
        PluginRef::weighted(DYNAMIC_RESOURCES, 2),
        PluginRef::new(DEFAULT_PREEMPTION),
        PluginRef::weighted(NODE_RESOURCES_BALANCED_ALLOCATION, 1),
        PluginRef::weighted(IMAGE_LOCALITY, 1),
        PluginRef::new(DEFAULT_BINDER),
    ]
}

/// Upstream default plugins (v1.37, default feature gates) that Convoy does not implement.
/// Disabling them is accepted and kept in the profile's `disabled` lists: the pods whose fields
/// only they read are then scheduled without them, as upstream would (see
/// `convoy_api::pod_fields`). Enabling them is an error (unless the registry knows them).
pub const UPSTREAM_ONLY_DEFAULTS: &[&str] = &[names::NODE_DECLARED_FEATURES];

/// Upstream's `mergePluginSet`: the user's `disabled` entries remove defaults (`*` all of them);
/// user `enabled` entries naming a default replace it in place; the others are appended in the
/// given order. The user's `disabled` list is kept.
pub(crate) fn merge_plugin_set(defaults: &[PluginRef], custom: PluginSet) -> PluginSet {
    let disable_all = custom.disabled.iter().any(|p| p.name == "*");
    let mut replaced = vec![false; custom.enabled.len()];
    let mut enabled = Vec::new();
    if !disable_all {
        for default in defaults {
            if custom.disabled.iter().any(|p| p.name == default.name) {
                continue;
            }
            match custom.enabled.iter().position(|p| p.name == default.name) {
                Some(i) => {
                    replaced[i] = true;
                    enabled.push(custom.enabled[i].clone());
                }
                None => enabled.push(default.clone()),
            }
        }
    }
    enabled.extend(
        custom
            .enabled
            .into_iter()
            .zip(replaced)
            .filter(|(_, replaced)| !replaced)
            .map(|(plugin, _)| plugin),
    );
    PluginSet { enabled, disabled: custom.disabled }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(set: &PluginSet) -> Vec<String> {
        set.enabled
            .iter()
            .map(|p| match p.weight {
                Some(w) => format!("{}:{w}", p.name),
                None => p.name.clone(),
            })
            .collect()
    }

    #[test]
    fn merges_like_upstream() {
        let defaults = vec![PluginRef::new("A"), PluginRef::weighted("B", 2), PluginRef::new("C")];
        let cases: &[(&str, PluginSet, &[&str])] = &[
            ("no change", PluginSet::default(), &["A", "B:2", "C"]),
            (
                "disable one",
                PluginSet { enabled: vec![], disabled: vec![PluginRef::new("B")] },
                &["A", "C"],
            ),
            (
                "disable all then enable",
                PluginSet {
                    enabled: vec![PluginRef::weighted("B", 5)],
                    disabled: vec![PluginRef::new("*")],
                },
                &["B:5"],
            ),
            (
                "replace in place and append",
                PluginSet {
                    enabled: vec![PluginRef::new("X"), PluginRef::weighted("B", 7)],
                    disabled: vec![],
                },
                &["A", "B:7", "C", "X"],
            ),
            (
                "disable and re-enable moves to the end",
                PluginSet {
                    enabled: vec![PluginRef::new("A")],
                    disabled: vec![PluginRef::new("A")],
                },
                &["B:2", "C", "A"],
            ),
        ];
        for (name, custom, want) in cases {
            let merged = merge_plugin_set(&defaults, custom.clone());
            assert_eq!(names(&merged), *want, "{name}");
            assert_eq!(merged.disabled, custom.disabled, "{name}");
        }
    }
}
