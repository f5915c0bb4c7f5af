//! Convoy's default plugins and upstream's `mergePlugins` (`pkg/scheduler/apis/config/v1/default_plugins.go`).

use crate::names;
use crate::types::{PluginRef, PluginSet};

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
