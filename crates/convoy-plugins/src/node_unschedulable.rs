//! NodeUnschedulable (Filter): rejects nodes with `spec.unschedulable` unless
//! the pod tolerates the `node.kubernetes.io/unschedulable:NoSchedule` taint
//! (upstream `plugins/nodeunschedulable`).

use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::{Node, Taint};

use convoy_api::{
    ActionType, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    NodeInfo, Plugin, PodInfo, QueueingHint, Status, names,
};

use crate::helper::taint::{NO_SCHEDULE, tolerates_taint};
use crate::helper::{event_node, event_pod};

/// Reason when the node is unschedulable.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// Key of the taint that stands for `spec.unschedulable`.
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The NodeUnschedulable plugin.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeUnschedulable;

fn is_unschedulable(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

/// The taint `spec.unschedulable` stands for, built once.
static UNSCHEDULABLE_TAINT: LazyLock<Taint> = LazyLock::new(|| Taint {
    key: TAINT_NODE_UNSCHEDULABLE.to_string(),
    effect: NO_SCHEDULE.to_string(),
    ..Default::default()
});

fn tolerations_tolerate_unschedulable(
    tolerations: &[k8s_openapi::api::core::v1::Toleration],
) -> bool {
    tolerations.iter().any(|t| tolerates_taint(t, &UNSCHEDULABLE_TAINT))
}

/// Whether the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule`.
fn tolerates_unschedulable(pod: &PodInfo) -> bool {
    tolerations_tolerate_unschedulable(pod.spec().tolerations.as_deref().unwrap_or(&[]))
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        names::NODE_UNSCHEDULABLE
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                is_schedulable_after_node_change,
            ),
            ClusterEventWithHint::with_hint(
                EventResource::Pod,
                ActionType::UPDATE_POD_TOLERATION,
                is_schedulable_after_pod_toleration_change,
            ),
        ]
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl FilterPlugin for NodeUnschedulable {
    /// UnschedulableAndUnresolvable `node(s) were unschedulable`.
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !node.unschedulable() || tolerates_unschedulable(pod) {
            return Status::success();
        }
        Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
    }

    /// The pod's tolerations read once for the whole batch.
    fn filter_nodes(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        candidates: &mut Vec<usize>,
        rejected: &mut Vec<(usize, Status)>,
    ) {
        if tolerates_unschedulable(pod) {
            return;
        }
        convoy_api::retain_nodes(candidates, rejected, |i| {
            nodes[i].unschedulable().then(|| Status::unresolvable(ERR_REASON_UNSCHEDULABLE))
        });
    }
}

/// Queue when a node is added schedulable, becomes schedulable, or the pod
/// tolerates the unschedulable taint.
fn is_schedulable_after_node_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(modified) = event_node(new) else { return QueueingHint::Queue };
    let became_schedulable = match event_node(old) {
        Some(original) => is_unschedulable(original) && !is_unschedulable(modified),
        None => !is_unschedulable(modified),
    };
    if became_schedulable || tolerates_unschedulable(pod) {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

/// Queue when the rejected pod itself now tolerates the unschedulable taint.
fn is_schedulable_after_pod_toleration_change(
    pod: &PodInfo,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(modified) = event_pod(new) else { return QueueingHint::Queue };
    if modified.metadata.uid.as_deref().unwrap_or("") != &*pod.uid {
        return QueueingHint::Skip;
    }
    let tolerations = modified.spec.as_ref().and_then(|s| s.tolerations.as_deref()).unwrap_or(&[]);
    if tolerations_tolerate_unschedulable(tolerations) {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    }
}

#[cfg(test)]
mod tests {
    use convoy_api::Code;
    use convoy_api::testing::{NodeBuilder, PodBuilder};

    use super::*;
    use crate::helper::testing::{node_obj, pod_obj};

    #[test]
    fn filter() {
        let cases = [
            ("schedulable node", NodeBuilder::new("n"), PodBuilder::new("p"), true),
            (
                "unschedulable node",
                NodeBuilder::new("n").unschedulable(),
                PodBuilder::new("p"),
                false,
            ),
            (
                "tolerated",
                NodeBuilder::new("n").unschedulable(),
                PodBuilder::new("p").toleration(TAINT_NODE_UNSCHEDULABLE, None, "NoSchedule"),
                true,
            ),
            (
                "tolerated by empty effect",
                NodeBuilder::new("n").unschedulable(),
                PodBuilder::new("p").toleration(TAINT_NODE_UNSCHEDULABLE, None, ""),
                true,
            ),
            (
                "toleration with another effect",
                NodeBuilder::new("n").unschedulable(),
                PodBuilder::new("p").toleration(TAINT_NODE_UNSCHEDULABLE, None, "NoExecute"),
                false,
            ),
        ];
        for (name, node, pod, fits) in cases {
            let s = crate::helper::testing::filter_one(
                &NodeUnschedulable,
                &CycleState::new(),
                &pod.info(),
                &node.info(),
            );
            if fits {
                assert!(s.is_success(), "{name}: {s}");
            } else {
                assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(s.message(), ERR_REASON_UNSCHEDULABLE, "{name}");
            }
        }
    }

    #[test]
    fn hints() {
        let pod = PodBuilder::new("p").info();
        let tolerating =
            PodBuilder::new("p").toleration(TAINT_NODE_UNSCHEDULABLE, None, "NoSchedule").info();
        let sched = || NodeBuilder::new("n").build();
        let unsched = || NodeBuilder::new("n").unschedulable().build();
        let cases = [
            ("add schedulable", &pod, None, sched(), QueueingHint::Queue),
            ("add unschedulable", &pod, None, unsched(), QueueingHint::Skip),
            ("add unschedulable, tolerated", &tolerating, None, unsched(), QueueingHint::Queue),
            ("became schedulable", &pod, Some(unsched()), sched(), QueueingHint::Queue),
            ("became unschedulable", &pod, Some(sched()), unsched(), QueueingHint::Skip),
            ("stayed schedulable", &pod, Some(sched()), sched(), QueueingHint::Skip),
        ];
        for (name, pod, old, new, want) in cases {
            let old = old.map(node_obj);
            let got = is_schedulable_after_node_change(pod, old.as_ref(), Some(&node_obj(new)));
            assert_eq!(got, want, "{name}");
        }
        let now_tolerating =
            pod_obj(PodBuilder::new("p").toleration(TAINT_NODE_UNSCHEDULABLE, None, "").build());
        let other =
            pod_obj(PodBuilder::new("q").toleration(TAINT_NODE_UNSCHEDULABLE, None, "").build());
        assert_eq!(
            is_schedulable_after_pod_toleration_change(&pod, None, Some(&now_tolerating)),
            QueueingHint::Queue
        );
        assert_eq!(
            is_schedulable_after_pod_toleration_change(&pod, None, Some(&other)),
            QueueingHint::Skip
        );
    }
}
