//! The Priority admission plugin's decisions (upstream
//! `plugin/pkg/admission/priority`, v1.37.2), which the embedded cluster
//! makes as the API server would for the pods and upstream PodGroups it
//! creates or loads.

use std::sync::Arc;

use convoy_api::objects::PriorityClassInfo;

/// The PriorityClasses every API server creates at start-up
/// (`system-cluster-critical`, `system-node-critical`).
pub fn system_priority_classes() -> [PriorityClassInfo; 2] {
    [
        PriorityClassInfo {
            name: Arc::from("system-cluster-critical"),
            value: 2_000_000_000,
            global_default: false,
            preemption_policy: None,
        },
        PriorityClassInfo {
            name: Arc::from("system-node-critical"),
            value: 2_000_001_000,
            global_default: false,
            preemption_policy: None,
        },
    ]
}

/// The class the Priority admission plugin resolves `name` to: the named
/// one (the system classes are always known; an unknown name is an error
/// naming `spec.priorityClassName`), or with no name the `globalDefault`
/// class (the lowest if several), or none.
fn resolve_priority_class(
    name: &str,
    classes: &[PriorityClassInfo],
) -> Result<Option<PriorityClassInfo>, String> {
    if name.is_empty() {
        return Ok(classes.iter().filter(|c| c.global_default).min_by_key(|c| c.value).cloned());
    }
    let system = system_priority_classes();
    let found = classes.iter().chain(system.iter()).find(|c| *c.name == *name);
    found.cloned().map(Some).ok_or_else(|| {
        format!("spec.priorityClassName: no PriorityClass with name {name} was found")
    })
}

/// What the Priority admission plugin decides for a new pod (upstream
/// `plugin/pkg/admission/priority`, v1.37.2): a pod that sets
/// `spec.priority` keeps it; otherwise `spec.priorityClassName` is resolved
/// (an unknown name refuses the pod, naming the field), or the
/// `globalDefault` class (the lowest if several), or priority 0. The
/// class's `preemptionPolicy` is copied when the pod sets none. `classes`
/// are the cluster's PriorityClasses; the system classes are always known.
pub fn admit_priority(
    spec: &mut k8s_openapi::api::core::v1::PodSpec,
    classes: &[PriorityClassInfo],
) -> Result<(), String> {
    if spec.priority.is_some() {
        return Ok(());
    }
    let name = spec.priority_class_name.as_deref().unwrap_or("");
    match resolve_priority_class(name, classes)? {
        Some(c) => {
            spec.priority = Some(c.value);
            spec.priority_class_name = Some(c.name.to_string());
            if spec.preemption_policy.is_none() {
                spec.preemption_policy =
                    Some(c.preemption_policy.clone().unwrap_or("PreemptLowerPriority".into()));
            }
        }
        None => {
            spec.priority = Some(0);
            if spec.preemption_policy.is_none() {
                spec.preemption_policy = Some("PreemptLowerPriority".into());
            }
        }
    }
    Ok(())
}

/// What the Priority admission plugin decides for a new upstream
/// (`scheduling.k8s.io`) PodGroup, its JSON form changed in place (upstream
/// `admitPodGroup`, v1.37.2): as [`admit_priority`] for pods, a group that
/// sets `spec.priority` keeps it; otherwise `spec.priorityClassName` is
/// resolved (an unknown name refuses the group, naming the field), or the
/// `globalDefault` class, or priority 0; the class's `preemptionPolicy` is
/// copied when the group sets none. Objects of other APIs are unchanged.
pub fn admit_pod_group_priority(
    group: &mut serde_json::Value,
    classes: &[PriorityClassInfo],
) -> Result<(), String> {
    use serde_json::Value;
    if group.get("apiVersion").and_then(Value::as_str)
        != Some(convoy_api::pod_group::UPSTREAM_API_VERSION)
    {
        return Ok(());
    }
    let Some(root) = group.as_object_mut() else { return Ok(()) };
    let spec = root.entry("spec").or_insert_with(|| Value::Object(Default::default()));
    let Some(spec) = spec.as_object_mut() else { return Ok(()) };
    if spec.get("priority").is_some_and(|p| !p.is_null()) {
        return Ok(());
    }
    let name = spec.get("priorityClassName").and_then(Value::as_str).unwrap_or("");
    let (value, class_name, policy) = match resolve_priority_class(name, classes)? {
        Some(c) => (c.value, c.name.to_string(), c.preemption_policy.clone()),
        None => (0, String::new(), None),
    };
    spec.insert("priority".into(), Value::from(value));
    if !class_name.is_empty() {
        spec.insert("priorityClassName".into(), Value::from(class_name));
    }
    if let Some(policy) = policy {
        spec.entry("preemptionPolicy").or_insert(Value::from(policy));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Upstream PodGroups get their priority as the Priority admission
    /// plugin gives it; scheduler-plugins' are left alone.
    #[test]
    fn pod_group_priority_is_admitted_from_its_class() {
        let class = |name: &str, value, default, policy: Option<&str>| PriorityClassInfo {
            name: Arc::from(name),
            value,
            global_default: default,
            preemption_policy: policy.map(String::from),
        };
        let classes = [class("urgent", 1000, false, Some("Never")), class("base", 5, true, None)];
        let group = |spec: serde_json::Value| json!({"apiVersion": "scheduling.k8s.io/v1beta1", "metadata": {"name": "g"}, "spec": spec});
        let admit = |mut g: serde_json::Value, classes: &[PriorityClassInfo]| {
            admit_pod_group_priority(&mut g, classes).map(|()| g["spec"].clone())
        };
        let spec = admit(group(json!({"priorityClassName": "urgent"})), &classes).unwrap();
        assert_eq!(
            spec,
            json!({"priorityClassName": "urgent", "priority": 1000, "preemptionPolicy": "Never"})
        );
        let spec = admit(group(json!({})), &classes).unwrap();
        assert_eq!(spec, json!({"priorityClassName": "base", "priority": 5}));
        assert_eq!(admit(group(json!({})), &[]).unwrap(), json!({"priority": 0}));
        let kept = json!({"priorityClassName": "gone", "priority": 7});
        assert_eq!(admit(group(kept.clone()), &[]).unwrap(), kept, "a dump keeps its priority");
        let err = admit(group(json!({"priorityClassName": "gone"})), &classes).unwrap_err();
        assert_eq!(err, "spec.priorityClassName: no PriorityClass with name gone was found");
        let x = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "spec": {"minMember": 2}});
        assert_eq!(admit(x.clone(), &classes).unwrap(), x["spec"]);
    }

    #[test]
    fn admits_priorities_as_the_api_server() {
        let classes = [
            PriorityClassInfo {
                name: Arc::from("high"),
                value: 1000,
                global_default: false,
                preemption_policy: Some("Never".into()),
            },
            PriorityClassInfo {
                name: Arc::from("low"),
                value: 10,
                global_default: true,
                preemption_policy: None,
            },
        ];
        let admit = |spec: serde_json::Value, classes: &[PriorityClassInfo]| {
            let mut spec: k8s_openapi::api::core::v1::PodSpec =
                serde_json::from_value(spec).unwrap();
            admit_priority(&mut spec, classes)
                .map(|()| (spec.priority, spec.preemption_policy, spec.priority_class_name))
        };
        let s = |v: &str| Some(v.to_string());
        let cases: Vec<(serde_json::Value, &[PriorityClassInfo], Result<_, String>)> = vec![
            (json!({"containers": [], "priority": 7}), &classes[..], Ok((Some(7), None, None))),
            (
                json!({"containers": [], "priorityClassName": "high"}),
                &classes[..],
                Ok((Some(1000), s("Never"), s("high"))),
            ),
            (
                json!({"containers": []}),
                &classes[..],
                Ok((Some(10), s("PreemptLowerPriority"), s("low"))),
            ),
            (json!({"containers": []}), &[][..], Ok((Some(0), s("PreemptLowerPriority"), None))),
            (
                json!({"containers": [], "priorityClassName": "system-node-critical"}),
                &[][..],
                Ok((Some(2_000_001_000), s("PreemptLowerPriority"), s("system-node-critical"))),
            ),
            (
                json!({"containers": [], "priorityClassName": "nope"}),
                &classes[..],
                Err("spec.priorityClassName: no PriorityClass with name nope was found".to_string()),
            ),
        ];
        for (spec, classes, want) in cases {
            assert_eq!(admit(spec.clone(), classes), want, "{spec}");
        }
    }
}
