//! The pods nominated to nodes by preemption, as a scheduling cycle reads
//! them: the ones Filter counts (equal or higher priority than the pod),
//! the node a pod is nominated to (which the cycle tries first), and
//! whether a nominated pod waits there for the victims of its preemption.

use std::sync::Arc;

use convoy_api::preemption::terminating_by_preemption;
use convoy_api::{CycleState, NodeInfo, NodeInfoLister, NominatedPods, PodInfo};

use crate::framework::Framework;

impl Framework {
    /// The pods nominated to nodes that `pod` must leave room for (equal
    /// or higher priority, not itself); `None` when there are none, at the
    /// cost of one atomic load when nothing is nominated.
    pub(crate) fn nominated_for(&self, pod: &PodInfo) -> Option<NominatedPods> {
        let nominator = self.nominator.as_ref().filter(|n| !n.is_empty())?;
        let nominated = nominator.nominated_pods(pod);
        (!nominated.is_empty()).then_some(nominated)
    }

    /// The node `pod` is nominated to, if it is one of `nodes`.
    pub(crate) fn nominated_node(
        &self,
        pod: &PodInfo,
        snapshot: &dyn NodeInfoLister,
        nodes: &[Arc<NodeInfo>],
    ) -> Option<Arc<NodeInfo>> {
        let nominator = self.nominator.as_ref().filter(|n| !n.is_empty())?;
        let name = nominator.nominated_node(pod)?;
        let node = snapshot.get(&name)?;
        let in_cycle =
            nodes.len() == snapshot.list().len() || nodes.iter().any(|n| Arc::ptr_eq(n, node));
        in_cycle.then(|| node.clone())
    }

    /// Whether `pod`, nominated to `node`, waits there for the victims of
    /// its preemption: the profile preempts (has PostFilter plugins the
    /// cycle runs) and the node still holds a lower-priority pod
    /// terminating because of a preemption (the test of DefaultPreemption's
    /// `not eligible due to a terminating pod on the nominated node`).
    pub(crate) fn waits_for_victims(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> bool {
        !self.post_filter.is_empty()
            && !state.skip_post_filter
            && node
                .pods
                .iter()
                .any(|p| p.priority < pod.priority && terminating_by_preemption(&p.pod))
    }
}
