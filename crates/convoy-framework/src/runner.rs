//! The [`FilterRunner`] a PostFilter plugin gets for one cycle: the
//! profile's PreFilter extensions and the cycle's Filter plugins, with the
//! pods nominated to each node counted (upstream's `Handle` methods of the
//! same names).

use std::sync::Arc;

use convoy_api::{
    CycleState, FilterPlugin, FilterRunner, NodeInfo, NominatedPods, PodInfo, Status,
};
use rayon::prelude::*;

use crate::framework::Framework;

/// Below this many items, [`FilterRunner::parallelize`] runs on the
/// calling thread (preemption's dry run over a few nodes is cheaper than
/// waking the pool, and stays deterministic).
const PARALLEL_MIN: usize = 256;

/// One cycle's [`FilterRunner`].
pub(crate) struct CycleRunner<'a> {
    pub(crate) fwk: &'a Framework,
    /// The Filter plugins this cycle runs (PreFilter Skips excluded).
    pub(crate) filters: Vec<&'a Arc<dyn FilterPlugin>>,
    /// The pods nominated to each node that the pod must leave room for.
    pub(crate) nominated: Option<&'a NominatedPods>,
}

impl FilterRunner for CycleRunner<'_> {
    fn run_pre_filter_extension_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_add: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.fwk.run_pre_filter_extension_add_pod(state, pod, to_add, node)
    }

    fn run_pre_filter_extension_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        to_remove: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        self.fwk.run_pre_filter_extension_remove_pod(state, pod, to_remove, node)
    }

    fn run_filter_plugins_with_nominated_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        let nominated = self.nominated.and_then(|n| n.get(node.name())).unwrap_or(&[]);
        self.fwk.run_filters_with_nominated(&self.filters, state, pod, node, nominated)
    }

    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.fwk.nominator().map(|n| n.nominated_pods_for_node(node)).unwrap_or_default()
    }

    fn nominated_node(&self, pod: &PodInfo) -> Option<Arc<str>> {
        self.fwk.nominator()?.nominated_node(pod)
    }

    fn parallelize(&self, n: usize, work: &(dyn Fn(usize) + Sync)) {
        let pool =
            self.fwk.pool.as_ref().filter(|p| p.current_num_threads() > 1 && n >= PARALLEL_MIN);
        match pool {
            Some(pool) => pool.install(|| (0..n).into_par_iter().with_min_len(8).for_each(work)),
            None => (0..n).for_each(work),
        }
    }
}
