//! NodeName (Filter): a pod with `spec.nodeName` fits only that node
//! (upstream `plugins/nodename`).

use std::sync::Arc;

use convoy_api::{
    ActionType, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    NodeInfo, Plugin, PodInfo, QueueingHint, Status, names,
};

use crate::helper::event_node;

/// Reason when the node is not the one the pod names.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// The NodeName plugin.
#[derive(Debug, Default, Clone, Copy)]
pub struct NodeName;

fn fits(pod: &PodInfo, node_name: &str) -> bool {
    pod.node_name().is_none_or(|n| n == node_name)
}

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        names::NODE_NAME
    }

    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::with_hint(
            EventResource::Node,
            ActionType::ADD,
            is_schedulable_after_node_add,
        )]
    }

    fn as_filter(self: Arc<Self>) -> Option<Arc<dyn FilterPlugin>> {
        Some(self)
    }
}

impl FilterPlugin for NodeName {
    /// UnschedulableAndUnresolvable `node(s) didn't match the requested node name`.
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if fits(pod, node.name()) { Status::success() } else { Status::unresolvable(ERR_REASON) }
    }

    /// Nothing to do for a pod that names no node (nearly every pod).
    fn filter_nodes(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        candidates: &mut Vec<usize>,
        rejected: &mut Vec<(usize, Status)>,
    ) {
        let Some(wanted) = pod.node_name() else { return };
        convoy_api::retain_nodes(candidates, rejected, |i| {
            (nodes[i].name() != wanted).then(|| Status::unresolvable(ERR_REASON))
        });
    }
}

/// Queue when the added node is the one the pod names.
fn is_schedulable_after_node_add(
    pod: &PodInfo,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(node) = event_node(new) else { return QueueingHint::Queue };
    if fits(pod, node.metadata.name.as_deref().unwrap_or("")) {
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
    use crate::helper::testing::node_obj;

    #[test]
    fn filter_and_hint() {
        let cases = [
            ("no node name", PodBuilder::new("p"), "n1", true),
            ("same node", PodBuilder::new("p").node("n1"), "n1", true),
            ("other node", PodBuilder::new("p").node("n2"), "n1", false),
        ];
        for (name, pod, node, fits) in cases {
            let pod = pod.info();
            let s = crate::helper::testing::filter_one(
                &NodeName,
                &CycleState::new(),
                &pod,
                &NodeBuilder::new(node).info(),
            );
            if fits {
                assert!(s.is_success(), "{name}");
            } else {
                assert_eq!(s.code(), Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(s.message(), ERR_REASON, "{name}");
            }
            let hint = is_schedulable_after_node_add(
                &pod,
                None,
                Some(&node_obj(NodeBuilder::new(node).build())),
            );
            assert_eq!(hint == QueueingHint::Queue, fits, "{name}: hint");
        }
    }
}
