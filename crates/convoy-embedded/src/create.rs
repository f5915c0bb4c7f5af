//! What kube-apiserver does to a pod when it is created and the scheduler
//! reads: the `matchLabelKeys`/`mismatchLabelKeys` of pod (anti-)affinity
//! terms merged into their `labelSelector` (kube-apiserver v1.37.2,
//! `pkg/registry/core/pod/strategy.go`, `PrepareForCreate` →
//! `mutatePodAffinity`; gate `MatchLabelKeysInPodAffinity`, GA and locked
//! on since 1.33; the scheduler never reads those two fields itself), and
//! the `matchLabelKeys` of topology spread constraints merged into theirs
//! (`mutateTopologySpreadConstraints`, gate
//! `MatchLabelKeysInPodTopologySpreadSelectorMerge`, beta and on).
//!
//! Only at creation: an update of the pod does not merge again.

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

use crate::load::default_pod;

/// The defaults the embedded cluster sets ([`default_pod`]) and the
/// API server's creation-time mutations of `spec.affinity` (see the module
/// doc). Called once per pod, when it is created or loaded.
pub fn prepare_pod_for_create(pod: &mut Pod) {
    default_pod(pod);
    mutate_pod_affinity(pod);
    crate::load::merge_spread_match_label_keys(pod);
    set_scheduling_gated(pod);
}

/// Upstream `mutatePodAffinity`: every preferred and required term of
/// `podAffinity` and `podAntiAffinity`.
pub fn mutate_pod_affinity(pod: &mut Pod) {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let Some(affinity) = pod.spec.as_mut().and_then(|s| s.affinity.as_mut()) else { return };
    let lists = [
        affinity.pod_affinity.as_mut().map(|a| {
            (
                &mut a.preferred_during_scheduling_ignored_during_execution,
                &mut a.required_during_scheduling_ignored_during_execution,
            )
        }),
        affinity.pod_anti_affinity.as_mut().map(|a| {
            (
                &mut a.preferred_during_scheduling_ignored_during_execution,
                &mut a.required_during_scheduling_ignored_during_execution,
            )
        }),
    ];
    for (preferred, required) in lists.into_iter().flatten() {
        for t in preferred.iter_mut().flatten() {
            apply_label_keys(&mut t.pod_affinity_term, &labels);
        }
        for t in required.iter_mut().flatten() {
            apply_label_keys(t, &labels);
        }
    }
}

/// Upstream `applyMatchLabelKeysAndMismatchLabelKeys`: for each key the pod
/// carries, `key In (value)` (matchLabelKeys) or `key NotIn (value)`
/// (mismatchLabelKeys) appended to `matchExpressions`; keys the pod lacks
/// are ignored, and a term without `labelSelector` (which selects nothing)
/// is left alone.
fn apply_label_keys(
    term: &mut PodAffinityTerm,
    labels: &std::collections::BTreeMap<String, String>,
) {
    let match_keys = term.match_label_keys.as_deref().unwrap_or(&[]);
    let mismatch_keys = term.mismatch_label_keys.as_deref().unwrap_or(&[]);
    if match_keys.is_empty() && mismatch_keys.is_empty() {
        return;
    }
    let Some(selector) = term.label_selector.as_mut() else { return };
    for (keys, operator) in [(match_keys, "In"), (mismatch_keys, "NotIn")] {
        for key in keys {
            if let Some(value) = labels.get(key) {
                selector.match_expressions.get_or_insert_with(Vec::new).push(
                    LabelSelectorRequirement {
                        key: key.clone(),
                        operator: operator.to_string(),
                        values: Some(vec![value.clone()]),
                    },
                );
            }
        }
    }
}

/// The API server's `applySchedulingGatedCondition` (pod strategy,
/// `PrepareForCreate`, v1.37): a pod created with scheduling gates and no
/// `PodScheduled` condition gets `PodScheduled=False`, reason
/// `SchedulingGated`. (What upstream scheduler_perf's `Attempted` barrier
/// counts a gated pod by.)
fn set_scheduling_gated(pod: &mut Pod) {
    let gated =
        pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty());
    if !gated {
        return;
    }
    let conditions =
        pod.status.get_or_insert_with(PodStatus::default).conditions.get_or_insert_with(Vec::new);
    if conditions.iter().any(|c| c.type_ == "PodScheduled") {
        return;
    }
    conditions.push(PodCondition {
        type_: "PodScheduled".to_string(),
        status: "False".to_string(),
        reason: Some("SchedulingGated".to_string()),
        message: Some("Scheduling is blocked due to non-empty scheduling gates".to_string()),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(affinity: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"app": "web", "tenant": "t1"}},
            "spec": {"containers": [{"name": "c"}], "affinity": affinity}
        }))
        .unwrap()
    }

    fn term(selector: Value, match_keys: &[&str], mismatch_keys: &[&str]) -> Value {
        json!({
            "labelSelector": selector,
            "topologyKey": "zone",
            "matchLabelKeys": match_keys,
            "mismatchLabelKeys": mismatch_keys,
        })
    }

    #[test]
    fn merges_label_keys_as_the_api_server() {
        let mut p = pod(json!({
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    term(json!({"matchLabels": {"app": "web"}}), &["tenant", "missing"], &[]),
                    term(Value::Null, &["tenant"], &[]),
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": term(json!({}), &["app"], &[])}
                ]
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    term(json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]}), &[], &["tenant"])
                ]
            }
        }));
        prepare_pod_for_create(&mut p);
        let v = serde_json::to_value(&p.spec.as_ref().unwrap().affinity).unwrap();
        let req = &v["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(
            req[0]["labelSelector"],
            json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                {"key": "tenant", "operator": "In", "values": ["t1"]}
            ]}),
            "a key the pod lacks is ignored"
        );
        assert!(req[1].get("labelSelector").is_none(), "a nil selector stays nil");
        let pref = &v["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(
            pref["podAffinityTerm"]["labelSelector"],
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]})
        );
        let anti = &v["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(
            anti["labelSelector"]["matchExpressions"],
            json!([
                {"key": "app", "operator": "Exists"},
                {"key": "tenant", "operator": "NotIn", "values": ["t1"]}
            ])
        );
        // The fields themselves are kept, as the API server keeps them.
        assert_eq!(anti["mismatchLabelKeys"], json!(["tenant"]));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
    }

    #[test]
    fn pods_without_pod_affinity_are_untouched() {
        let mut p = pod(json!({"nodeAffinity": {}}));
        let before = p.spec.clone();
        mutate_pod_affinity(&mut p);
        assert_eq!(p.spec, before);
    }
}
