//! What Convoy writes on a PodGroup after a group attempt, computed without
//! IO ([`crate::status::StatusWriter`] does the writing).
//!
//! - One aggregated Event per attempt ([`GroupReport::event`]).
//! - `scheduling.k8s.io/v1beta1`: the `PodGroupInitiallyScheduled`
//!   condition ([`initially_scheduled`]): `True`/`Scheduled` once the group
//!   is placed, which is terminal (never reverts, as the API documents);
//!   `False`/`Unschedulable` with the group's message while it does not fit.
//! - `scheduling.x-k8s.io/v1alpha1`: `status` as scheduler-plugins'
//!   PodGroup controller keeps it ([`xk8s_status`]), from the member pods.
//!
//! Also where each API's PodGroups live ([`api_resource`]), which both the
//! writer and the watch ([`crate::pod_groups`]) address.

use convoy_api::{GroupKey, PodGroupApi};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, GroupVersionKind};
use serde_json::{Map, Value, json};

/// The condition type of upstream's PodGroup.
pub const INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

/// The `ApiResource` of an API's PodGroup (plural `podgroups`).
pub fn api_resource(api: PodGroupApi) -> ApiResource {
    let (group, version) = api.api_version().split_once('/').expect("group/version");
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, "PodGroup"),
        "podgroups",
    )
}

/// One group attempt, as the status writer needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupReport {
    /// The group.
    pub key: GroupKey,
    /// Its UID (empty if unknown).
    pub uid: String,
    /// How the attempt ended.
    pub outcome: GroupReportOutcome,
}

/// How a group attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupReportOutcome {
    /// Enough members were placed and handed to binding.
    Placed {
        /// Members placed, this attempt and before.
        placed: usize,
        /// Members known (placed before, plus tried now).
        members: usize,
        /// `minMember`.
        min_member: usize,
        /// Nodes used in this attempt.
        nodes: usize,
        /// The members wait at Permit for members that do not exist yet.
        waiting: bool,
    },
    /// The group does not fit; nothing was bound.
    Unschedulable {
        /// Why (the group's aggregated message).
        message: String,
    },
}

impl GroupReport {
    /// The Event: `(warning, reason, note)`.
    pub fn event(&self) -> (bool, &'static str, String) {
        match &self.outcome {
            GroupReportOutcome::Placed { waiting: false, .. } => {
                (false, "Scheduled", self.placed_message())
            }
            GroupReportOutcome::Placed { waiting: true, .. } => (
                false,
                "Waiting",
                format!(
                    "{}; waiting at Permit for the members still to come",
                    self.placed_message()
                ),
            ),
            GroupReportOutcome::Unschedulable { message } => {
                (true, "FailedScheduling", message.clone())
            }
        }
    }

    fn placed_message(&self) -> String {
        match &self.outcome {
            GroupReportOutcome::Placed { placed, members, min_member, nodes, .. } => {
                format!("placed {placed}/{members} pods (minMember {min_member}) on {nodes} nodes")
            }
            GroupReportOutcome::Unschedulable { message } => message.clone(),
        }
    }

    /// The `PodGroupInitiallyScheduled` condition this attempt calls for:
    /// `(status, reason, message)`; `None` while members wait at Permit.
    pub fn condition(&self) -> Option<(&'static str, &'static str, String)> {
        match &self.outcome {
            GroupReportOutcome::Placed { waiting: true, .. } => None,
            GroupReportOutcome::Placed { .. } => Some(("True", "Scheduled", self.placed_message())),
            GroupReportOutcome::Unschedulable { message } => {
                Some(("False", "Unschedulable", message.clone()))
            }
        }
    }
}

/// The new `status.conditions` of an upstream PodGroup whose current
/// object is `obj`, or `None` when nothing needs writing: the condition is
/// already `True` (terminal) or already says the same. Other conditions
/// are kept; `lastTransitionTime` changes only with the status.
pub fn initially_scheduled(
    obj: &Value,
    condition: (&str, &str, &str),
    now: &str,
) -> Option<Vec<Value>> {
    let (status, reason, message) = condition;
    let mut conditions: Vec<Value> =
        obj.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let existing = conditions.iter().position(|c| c["type"] == INITIALLY_SCHEDULED);
    let mut transition = now.to_string();
    if let Some(i) = existing {
        let c = &conditions[i];
        if c["status"] == "True" {
            return None;
        }
        if c["status"] == status && c["reason"] == reason && c["message"] == message {
            return None;
        }
        if let Some(t) = c["lastTransitionTime"].as_str().filter(|_| c["status"] == status) {
            transition = t.to_string();
        }
    }
    let mut c = json!({
        "type": INITIALLY_SCHEDULED,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    });
    if let Some(g) = obj.pointer("/metadata/generation").and_then(Value::as_i64) {
        c["observedGeneration"] = json!(g);
    }
    match existing {
        Some(i) => conditions[i] = c,
        None => conditions.push(c),
    }
    Some(conditions)
}

/// The `status` fields of a scheduler-plugins PodGroup (`obj`, as read)
/// that change, given its member pods, as a merge patch of `status`; `None`
/// when nothing changes.
///
/// The phase follows scheduler-plugins' PodGroup controller, settled in one
/// step: `Finished` and `Failed` are final; from none or `Pending`, the
/// group is `Pending` until `minMember` pods exist, then `Scheduling`
/// (and `occupiedBy` names the first pod's owners, `namespace/name`,
/// sorted); from then on, `Pending` again with fewer than `minMember` pods,
/// `Scheduling` while fewer than `minMember` pods run or succeeded,
/// `Running` once that many do, `Failed` when any failed and
/// failed + running + succeeded reach `minMember`, `Finished` when
/// `minMember` succeeded. `running`, `succeeded` and `failed` count the
/// pods by phase. `scheduleStartTime` is set at the first group attempt
/// (`attempted`) and kept.
pub fn xk8s_status(obj: &Value, pods: &[&Pod], now: &str, attempted: bool) -> Option<Value> {
    let empty = Map::new();
    let status = obj.get("status").and_then(Value::as_object).unwrap_or(&empty);
    let phase = status.get("phase").and_then(Value::as_str).unwrap_or("");
    if matches!(phase, "Finished" | "Failed") {
        return None;
    }
    let min = obj.pointer("/spec/minMember").and_then(Value::as_i64).unwrap_or(1);
    let count = |p: &str| {
        pods.iter()
            .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(p))
            .count() as i64
    };
    let (running, succeeded, failed) = (count("Running"), count("Succeeded"), count("Failed"));
    let total = pods.len() as i64;

    let mut patch = Map::new();
    let mut new_phase = phase;
    if matches!(phase, "" | "Pending") {
        new_phase = "Pending";
        if total >= min {
            new_phase = "Scheduling";
            let occupied = occupied_by(pods);
            if !occupied.is_empty() && status.get("occupiedBy").and_then(Value::as_str).is_none() {
                patch.insert("occupiedBy".into(), json!(occupied));
            }
        }
    }
    if new_phase != "Pending" {
        new_phase = if total < min {
            "Pending"
        } else if succeeded + running >= min {
            "Running"
        } else {
            "Scheduling"
        };
        if failed != 0 && failed + running + succeeded >= min {
            new_phase = "Failed";
        }
        if succeeded >= min {
            new_phase = "Finished";
        }
    }
    let mut set = |field: &str, value: Value| {
        if status.get(field) != Some(&value) && !(value == json!(0) && status.get(field).is_none())
        {
            patch.insert(field.into(), value);
        }
    };
    set("phase", json!(new_phase));
    set("running", json!(running));
    set("succeeded", json!(succeeded));
    set("failed", json!(failed));
    if attempted && status.get("scheduleStartTime").is_none_or(Value::is_null) {
        patch.insert("scheduleStartTime".into(), json!(now));
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// `namespace/owner` of the first pod (by name), sorted and joined by
/// commas; empty without owners.
fn occupied_by(pods: &[&Pod]) -> String {
    let Some(first) = pods.iter().min_by_key(|p| p.metadata.name.as_deref().unwrap_or("")) else {
        return String::new();
    };
    let ns = first.metadata.namespace.as_deref().unwrap_or("default");
    let mut refs: Vec<String> = first
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| format!("{ns}/{}", o.name))
        .collect();
    refs.sort();
    refs.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use convoy_api::PodGroupApi;

    const NOW: &str = "2026-01-02T03:04:05Z";

    fn report(outcome: GroupReportOutcome) -> GroupReport {
        GroupReport {
            key: GroupKey::new(PodGroupApi::Upstream, "ns", "g"),
            uid: "u".into(),
            outcome,
        }
    }

    fn placed(waiting: bool) -> GroupReportOutcome {
        GroupReportOutcome::Placed { placed: 8, members: 8, min_member: 8, nodes: 3, waiting }
    }

    #[test]
    fn events_and_conditions() {
        let r = report(placed(false));
        assert_eq!(
            r.event(),
            (false, "Scheduled", "placed 8/8 pods (minMember 8) on 3 nodes".to_string())
        );
        assert_eq!(r.condition().unwrap().0, "True");
        let w = report(placed(true));
        assert_eq!(w.event().1, "Waiting");
        assert_eq!(w.condition(), None);
        let f = report(GroupReportOutcome::Unschedulable { message: "7/8 pods fit".into() });
        assert_eq!(f.event(), (true, "FailedScheduling", "7/8 pods fit".to_string()));
        assert_eq!(f.condition(), Some(("False", "Unschedulable", "7/8 pods fit".into())));
    }

    #[test]
    fn initially_scheduled_is_terminal_and_idempotent() {
        let other = json!({"type": "DisruptionTarget", "status": "False", "reason": "x",
                           "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"});
        let obj = json!({"metadata": {"generation": 2}, "status": {"conditions": [other]}});
        let failed = initially_scheduled(&obj, ("False", "Unschedulable", "no room"), NOW).unwrap();
        assert_eq!(failed.len(), 2);
        assert_eq!(failed[0], other, "other conditions kept");
        assert_eq!(failed[1]["observedGeneration"], 2);
        assert_eq!(failed[1]["lastTransitionTime"], NOW);
        let obj = json!({"status": {"conditions": failed}});
        assert_eq!(initially_scheduled(&obj, ("False", "Unschedulable", "no room"), NOW), None);
        // New message, same status: transition time kept.
        let later = "2026-02-02T00:00:00Z";
        let again = initially_scheduled(&obj, ("False", "Unschedulable", "still"), later).unwrap();
        assert_eq!(again[1]["lastTransitionTime"], NOW);
        let obj = json!({"status": {"conditions": again}});
        let ok = initially_scheduled(&obj, ("True", "Scheduled", "placed"), later).unwrap();
        assert_eq!(
            (ok[1]["status"].as_str(), ok[1]["lastTransitionTime"].as_str()),
            (Some("True"), Some(later))
        );
        let obj = json!({"status": {"conditions": ok}});
        assert_eq!(initially_scheduled(&obj, ("False", "Unschedulable", "evicted"), NOW), None);
        assert_eq!(initially_scheduled(&obj, ("True", "Scheduled", "other"), NOW), None);
    }

    fn pod(name: &str, phase: &str, owner: Option<&str>) -> Pod {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "status": {"phase": phase}
        }))
        .unwrap();
        if let Some(o) = owner {
            p.metadata.owner_references = Some(vec![
                serde_json::from_value(json!({
                    "apiVersion": "batch/v1", "kind": "Job", "name": o, "uid": "j"
                }))
                .unwrap(),
            ]);
        }
        p
    }

    #[test]
    fn xk8s_phases() {
        let group = |status: Value| json!({"spec": {"minMember": 2}, "status": status});
        let pending = pod("a", "Pending", Some("job"));
        let b = pod("b", "Pending", None);
        let run = pod("b", "Running", None);
        let run_a = pod("a", "Running", None);
        let ok = pod("a", "Succeeded", None);
        let ok_b = pod("b", "Succeeded", None);
        let bad = pod("b", "Failed", None);
        let cases: Vec<(Value, Vec<&Pod>, bool, Option<Value>)> = vec![
            // New group, one pod of two: Pending, start time set.
            (
                group(json!({})),
                vec![&pending],
                true,
                Some(json!({"phase": "Pending", "scheduleStartTime": NOW})),
            ),
            // Enough pods: Scheduling, occupied by the first pod's owner.
            (
                group(json!({"phase": "Pending"})),
                vec![&pending, &b],
                true,
                Some(
                    json!({"phase": "Scheduling", "occupiedBy": "ns/job", "scheduleStartTime": NOW}),
                ),
            ),
            // Nothing changed: nothing written.
            (
                group(
                    json!({"phase": "Scheduling", "scheduleStartTime": NOW, "occupiedBy": "ns/job"}),
                ),
                vec![&pending, &b],
                true,
                None,
            ),
            (
                group(json!({"phase": "Scheduling"})),
                vec![&pending, &run],
                false,
                Some(json!({"running": 1})),
            ),
            (
                group(json!({"phase": "Scheduling", "running": 1})),
                vec![&run_a, &run],
                false,
                Some(json!({"phase": "Running", "running": 2})),
            ),
            (
                group(json!({"phase": "Running", "running": 2})),
                vec![&ok, &bad],
                false,
                Some(json!({"phase": "Failed", "running": 0, "succeeded": 1, "failed": 1})),
            ),
            (
                group(json!({"phase": "Running"})),
                vec![&ok, &ok_b],
                false,
                Some(json!({"phase": "Finished", "succeeded": 2})),
            ),
            (
                group(json!({"phase": "Running"})),
                vec![&run],
                false,
                Some(json!({"phase": "Pending", "running": 1})),
            ),
            // Final phases stay.
            (group(json!({"phase": "Finished"})), vec![], true, None),
            (group(json!({"phase": "Failed"})), vec![&run_a, &run], true, None),
        ];
        for (i, (obj, pods, attempted, want)) in cases.into_iter().enumerate() {
            assert_eq!(xk8s_status(&obj, &pods, NOW, attempted), want, "case {i}");
        }
    }
}
