//! SchedulingGates (PreEnqueue): keeps pods with `spec.schedulingGates` out
//! of the active queue until every gate is removed (upstream
//! `plugins/schedulinggates`).

use std::sync::Arc;

use convoy_api::{
    ActionType, ClusterEventWithHint, EventObject, EventResource, Plugin, PodInfo,
    PreEnqueuePlugin, QueueingHint, Status, names,
};

use crate::helper::event_pod;

/// Gates pods that still have scheduling gates.
#[derive(Debug, Default, Clone, Copy)]
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        names::SCHEDULING_GATES
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::with_hint(
            EventResource::Pod,
            ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
            is_schedulable_after_gates_eliminated,
        )]
    }

    fn as_pre_enqueue(self: Arc<Self>) -> Option<Arc<dyn PreEnqueuePlugin>> {
        Some(self)
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    /// UnschedulableAndUnresolvable `waiting for scheduling gates: [a b]`
    /// (Go's `%v` of a string slice) while the pod has gates.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let Some(gates) = pod.spec().scheduling_gates.as_deref().filter(|g| !g.is_empty()) else {
            return Status::success();
        };
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        Status::unresolvable(format!("waiting for scheduling gates: [{}]", names.join(" ")))
    }
}

/// Queue when the update is for this very pod and it has no gates left.
fn is_schedulable_after_gates_eliminated(
    pod: &PodInfo,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(modified) = event_pod(new) else { return QueueingHint::Queue };
    let same = modified.metadata.uid.as_deref().unwrap_or("") == &*pod.uid;
    let ungated = modified
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_none_or(|g| g.is_empty());
    if same && ungated { QueueingHint::Queue } else { QueueingHint::Skip }
}

#[cfg(test)]
mod tests {
    use convoy_api::Code;
    use convoy_api::testing::PodBuilder;

    use super::*;
    use crate::helper::testing::pod_obj;

    #[test]
    fn gates_message() {
        let cases = [
            ("no gates", PodBuilder::new("p"), None),
            ("one gate", PodBuilder::new("p").gate("a"), Some("waiting for scheduling gates: [a]")),
            (
                "two gates",
                PodBuilder::new("p").gate("example.com/a").gate("b"),
                Some("waiting for scheduling gates: [example.com/a b]"),
            ),
        ];
        for (name, pod, want) in cases {
            let s = SchedulingGates.pre_enqueue(&pod.info());
            match want {
                None => assert!(s.is_success(), "{name}: {s}"),
                Some(msg) => {
                    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
                    assert_eq!(s.message(), msg, "{name}");
                }
            }
        }
    }

    #[test]
    fn hint_queues_only_the_ungated_pod_itself() {
        let pod = PodBuilder::new("p").gate("a").info();
        let cases = [
            ("same pod, gates removed", PodBuilder::new("p").build(), QueueingHint::Queue),
            ("same pod, still gated", PodBuilder::new("p").gate("b").build(), QueueingHint::Skip),
            ("another pod", PodBuilder::new("q").build(), QueueingHint::Skip),
        ];
        for (name, new, want) in cases {
            let old = pod_obj(PodBuilder::new("p").gate("a").build());
            let got = is_schedulable_after_gates_eliminated(&pod, Some(&old), Some(&pod_obj(new)));
            assert_eq!(got, want, "{name}");
        }
        let events = SchedulingGates.events_to_register();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event.action, ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED);
    }
}
