//! The PostFilter phase (preemption) of a cycle that found no node, and the
//! [`FilterRunner`] a PostFilter plugin gets for that cycle: the profile's
//! PreFilter extensions and the cycle's Filter plugins, with the pods
//! nominated to each node counted (upstream's `Handle` methods of the same
//! names).

use std::sync::Arc;

use convoy_api::{
    CycleState, FilterPlugin, FilterRunner, NodeInfo, NodeInfoLister, NominatedPods, PodInfo,
    PostFilterContext, Status,
};
use rand::Rng;
use rayon::prelude::*;

use crate::algorithm::{Diagnosis, PostFilterOutcome};
use crate::framework::Framework;
use crate::metrics::{label, timed};

/// Below this many items, [`FilterRunner::parallelize`] runs on the
/// calling thread (preemption's dry run over a few nodes is cheaper than
/// waking the pool, and stays deterministic).
const PARALLEL_MIN: usize = 256;

impl Framework {
    /// Runs PostFilter (preemption) for a pod that fits nowhere, in the
    /// cycle that [`Framework::schedule_pod`] failed with `diagnosis`
    /// (`state` and `snapshot` as it left them), unless the profile has no
    /// PostFilter plugin or the cycle skips them, and records what it
    /// decided in `diagnosis`.
    pub fn post_filter_phase(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &dyn NodeInfoLister,
        diagnosis: &mut Diagnosis,
        rng: &mut impl Rng,
    ) {
        if self.post_filter.is_empty() || state.skip_post_filter {
            return;
        }
        let nominated = self.nominated_for(pod);
        let nominated = nominated.as_ref();
        let runner = CycleRunner { fwk: self, filters: self.active_filters(state), nominated };
        let ctx = PostFilterContext { nodes: snapshot, runner: &runner, random: rng.random() };
        let metrics = self.metrics.clone();
        let (result, status) = timed(
            metrics.as_ref(),
            "PostFilter",
            &self.name,
            || self.run_post_filter(state, pod, &diagnosis.node_to_status, &ctx),
            |(_, s)| label(s),
        );
        if !status.reasons().is_empty() {
            diagnosis.post_filter_msg = status.message();
        }
        diagnosis.post_filter = Some(PostFilterOutcome { result, status });
    }
}

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
        self.fwk.run_filters_with_nominated(&self.filters, state, pod, node, self.nominated)
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
