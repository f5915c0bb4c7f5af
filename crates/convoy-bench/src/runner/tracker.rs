//! What the benchmark knows about its pods, whatever the target: which
//! exist, which are bound (per namespace), and the bind times of the window
//! being measured. The embedded target feeds it from the scheduler's update
//! stream, the API target from a pod watch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use convoy_api::PodKey;
use k8s_openapi::api::core::v1::Pod;

use crate::labels::Selector;
use crate::measure::Window;
use crate::measure::evictions::{Evictions, OwnDeletes, has_disruption_target};
use crate::measure::groups::GroupTracker;
use crate::measure::throughput::{SampleInterval, sample};

/// The window being measured.
#[derive(Debug)]
pub(crate) struct ActiveWindow {
    pub(crate) name: String,
    namespaces: Vec<String>,
    selector: Selector,
    start: Instant,
    binds: Vec<Duration>,
    evictions: usize,
}

/// A pod the benchmark created and has not deleted.
#[derive(Debug, Clone)]
pub(crate) struct Created {
    pub(crate) name: String,
    pub(crate) labels: Option<BTreeMap<String, String>>,
}

impl Created {
    pub(crate) fn of(pod: &Pod) -> Self {
        Self {
            name: pod.metadata.name.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone(),
        }
    }
}

/// The pods the benchmark created in `namespaces` (all when empty) that
/// `selector` matches: what a `barrier` waits for.
pub(crate) fn selected_pods(
    created: &HashMap<String, Vec<Created>>,
    namespaces: &[String],
    selector: &Selector,
) -> Vec<PodKey> {
    created
        .iter()
        .filter(|(ns, _)| namespaces.is_empty() || namespaces.contains(ns))
        .flat_map(|(ns, pods)| {
            pods.iter()
                .filter(|c| selector.matches(c.labels.as_ref()))
                .map(|c| PodKey::new(ns, &c.name))
        })
        .collect()
}

/// Where a steady-state `createPods` learns that a pod of its namespace
/// was bound.
#[derive(Debug)]
pub(crate) struct SteadyHook {
    pub(crate) namespace: String,
    pub(crate) bound: tokio::sync::mpsc::UnboundedSender<PodKey>,
}

/// Pods seen, pods bound, and the open measurement window.
#[derive(Debug, Default)]
pub(crate) struct PodTracker {
    pub(crate) present: HashSet<PodKey>,
    pub(crate) bound: HashSet<PodKey>,
    /// Pods not bound that were attempted (`barrier` with
    /// `stageRequirement: Attempted`): seen with a `PodScheduled`
    /// condition, or reported by the scheduler (embedded target).
    pub(crate) attempted: HashSet<PodKey>,
    pub(crate) bound_per_ns: HashMap<Arc<str>, usize>,
    /// Binds seen since the start (deleted pods included).
    pub(crate) binds_total: u64,
    /// Binds seen per node since the start (deleted pods included): where
    /// the scheduler put the pods, for a benchmark's own checks.
    pub(crate) binds_per_node: std::collections::BTreeMap<String, usize>,
    pub(crate) window: Option<ActiveWindow>,
    pub(crate) steady: Option<SteadyHook>,
    /// Pod-group progress (gang workloads).
    pub(crate) groups: GroupTracker,
    /// The pods the benchmark deletes itself (not evictions).
    pub(crate) own_deletes: OwnDeletes,
    /// Bound pods removed by others (see [`crate::measure::evictions`]).
    pub(crate) evictions: Evictions,
    /// Pods counted as evicted that are still present (terminating).
    evicted: HashSet<PodKey>,
}

/// Upstream's `isAttempted`: the pod has a `PodScheduled` condition,
/// whatever its status (the scheduler sets `False` after a failed cycle,
/// the API server sets `False`/`SchedulingGated` on a pod created with
/// scheduling gates, a bind sets `True`).
pub(crate) fn has_scheduled_condition(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "PodScheduled"))
}

/// Whether the pod has a node.
pub(crate) fn is_bound(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty())
}

impl PodTracker {
    /// The pod exists (added or updated); if it is bound for the first time,
    /// count it, and, when `measure` is set, record the bind in the open
    /// window if the pod belongs to it.
    pub(crate) fn seen(&mut self, pod: &Pod, measure: bool) {
        let key = PodKey::of(pod);
        if self.groups.active() {
            let new = !self.present.contains(&key);
            let newly_bound = is_bound(pod) && !self.bound.contains(&key);
            self.groups.pod(pod, new, newly_bound, Instant::now());
        }
        if is_bound(pod) && self.bound.insert(key.clone()) {
            self.attempted.remove(&key);
            *self.bound_per_ns.entry(key.namespace.clone()).or_default() += 1;
            self.binds_total += 1;
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                match self.binds_per_node.get_mut(node) {
                    Some(n) => *n += 1,
                    None => {
                        self.binds_per_node.insert(node.to_string(), 1);
                    }
                }
            }
            if let Some(h) = &self.steady
                && *h.namespace == *key.namespace
            {
                let _ = h.bound.send(key.clone());
            }
            if measure
                && let Some(w) = &mut self.window
                && w.namespaces.iter().any(|n| **n == *key.namespace)
                && w.selector.matches(pod.metadata.labels.as_ref())
            {
                w.binds.push(w.start.elapsed());
            }
        }
        if has_scheduled_condition(pod) && !self.bound.contains(&key) {
            self.attempted.insert(key.clone());
        }
        if pod.metadata.deletion_timestamp.is_some()
            && self.bound.contains(&key)
            && !self.own_deletes.contains(&key)
            && self.evicted.insert(key.clone())
        {
            self.count_eviction(pod);
        }
        self.present.insert(key);
    }

    fn count_eviction(&mut self, pod: &Pod) {
        self.evictions.total += 1;
        if has_disruption_target(pod) {
            self.evictions.disruption_target += 1;
        }
        if let Some(w) = &mut self.window {
            w.evictions += 1;
            self.evictions.in_windows += 1;
        }
    }

    /// The scheduler went through a cycle for the pod (the embedded
    /// target's stand-in for the `PodScheduled=False` status write, which
    /// it does not make). Ignored for a pod not present (deleted since).
    pub(crate) fn attempt(&mut self, key: &PodKey) {
        if self.present.contains(key) && !self.bound.contains(key) {
            self.attempted.insert(key.clone());
        }
    }

    /// Whether the pod is bound or was attempted.
    pub(crate) fn is_attempted(&self, key: &PodKey) -> bool {
        self.bound.contains(key) || self.attempted.contains(key)
    }

    /// The pod is gone.
    pub(crate) fn deleted(&mut self, pod: &Pod) {
        let key = PodKey::of(pod);
        let own = self.own_deletes.take(&key);
        let counted = self.evicted.remove(&key);
        if self.bound.contains(&key) && !own && !counted {
            self.count_eviction(pod);
        }
        self.present.remove(&key);
        self.attempted.remove(&key);
        if self.bound.remove(&key)
            && let Some(n) = self.bound_per_ns.get_mut(&key.namespace)
        {
            *n -= 1;
        }
    }

    /// Pods present and not bound.
    pub(crate) fn pending(&self) -> usize {
        self.present.len().saturating_sub(self.bound.len())
    }

    /// Opens a measurement window (`startCollectingMetrics`).
    pub(crate) fn start_window(
        &mut self,
        name: String,
        namespaces: Vec<String>,
        selector: Option<Selector>,
    ) -> Result<(), String> {
        if let Some(w) = &self.window {
            return Err(format!("metrics collection is already started (window {:?})", w.name));
        }
        self.groups.start(Instant::now());
        self.window = Some(ActiveWindow {
            name,
            namespaces,
            selector: selector.unwrap_or_default(),
            start: Instant::now(),
            binds: Vec::new(),
            evictions: 0,
        });
        Ok(())
    }

    /// Closes the window (`stopCollectingMetrics`) and samples its binds.
    pub(crate) fn stop_window(&mut self, interval: SampleInterval) -> Result<Window, String> {
        let w = self.window.take().ok_or("stopCollectingMetrics without startCollectingMetrics")?;
        let duration = w.start.elapsed();
        let sampled = sample(&w.binds, duration, interval);
        let bind_span = w.binds.iter().min().zip(w.binds.iter().max()).map(|(a, b)| (*a, *b));
        let groups = self.groups.stop(&w.namespaces, duration, interval);
        Ok(Window {
            name: w.name,
            pods: w.binds.len(),
            duration,
            bind_span,
            sampled,
            groups,
            evictions: w.evictions,
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::measure::evictions::Evictions;
    use crate::measure::throughput::SampleInterval;

    fn pod(name: &str, node: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.spec = Some(PodSpec { node_name: node.map(str::to_string), ..Default::default() });
        p
    }

    fn terminating(mut p: Pod, disruption_target: bool) -> Pod {
        p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        if disruption_target {
            p.status = Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "DisruptionTarget".into(),
                    status: "True".into(),
                    reason: Some("PreemptionByScheduler".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        p
    }

    #[test]
    fn evictions_are_bound_pods_others_remove() {
        let mut t = PodTracker::default();
        for n in ["a", "b", "c", "d", "e", "f"] {
            t.seen(&pod(n, None), true);
            t.seen(&pod(n, Some("node-1")), true);
        }
        t.seen(&pod("pending", None), true);
        // The benchmark's own delete is no eviction.
        t.own_deletes.mark("ns", "a");
        t.deleted(&pod("a", Some("node-1")));
        // Neither is a pod that was never bound.
        t.deleted(&pod("pending", None));
        // Deleted by someone else, gone at once (grace period 0).
        t.deleted(&pod("b", Some("node-1")));
        // Marked by the scheduler, then gone: counted once.
        t.seen(&terminating(pod("c", Some("node-1")), true), true);
        t.deleted(&terminating(pod("c", Some("node-1")), true));
        assert_eq!(t.evictions, Evictions { total: 2, in_windows: 0, disruption_target: 1 });
        // Inside a window: terminating forever (grace period, no kubelet)
        // counts when first seen terminating.
        t.start_window("w".into(), vec!["ns".into()], None).unwrap();
        t.seen(&terminating(pod("d", Some("node-1")), false), true);
        t.seen(&terminating(pod("d", Some("node-1")), false), true);
        t.deleted(&terminating(pod("e", Some("node-1")), true));
        // The benchmark's delete of a pod with finalizers: terminating, then
        // gone, never counted.
        t.own_deletes.mark("ns", "f");
        t.seen(&terminating(pod("f", Some("node-1")), false), true);
        t.deleted(&terminating(pod("f", Some("node-1")), false));
        let w = t.stop_window(SampleInterval::Auto).unwrap();
        assert_eq!(w.evictions, 2);
        assert_eq!(t.evictions, Evictions { total: 4, in_windows: 2, disruption_target: 2 });
        t.deleted(&terminating(pod("d", Some("node-1")), false));
        assert_eq!(t.evictions.total, 4, "d was counted when it started terminating");
        assert!(t.own_deletes.is_empty() && t.evicted.is_empty());
    }
}
