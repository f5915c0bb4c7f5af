//! `EvictedPods`: how many bound pods something other than the benchmark
//! removed during a workload, whatever the scheduler. In scheduler_perf's
//! preemption workloads nothing but the scheduler deletes pods (no kubelet,
//! no controller that evicts), so these are the preemption victims, counted
//! from the cluster's side the same way for every scheduler: the figure
//! behind "no more evictions than upstream".
//!
//! A pod counts once, when it is first seen gone (deleted) or terminating
//! (`deletionTimestamp` set: a victim with a grace period stays
//! `Terminating` forever without a kubelet), if it had been seen bound and
//! the benchmark did not delete it itself (`deletePods`, a steady state's
//! replacement, `churn`'s `recreate`, the GPU stream's ends of life: each
//! records its deletes in [`OwnDeletes`] first). Whether the pod carried a
//! `DisruptionTarget` condition when last seen is counted beside it:
//! upstream's DefaultPreemption writes one (reason `PreemptionByScheduler`)
//! before deleting a victim.

use std::collections::HashSet;
use std::sync::Arc;

use convoy_api::PodKey;
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;

use crate::dataitems::DataItem;

/// The metric's name.
pub const METRIC: &str = "EvictedPods";

/// The pods the benchmark is deleting itself, shared with whatever deletes
/// them (churners, the GPU stream's targets).
#[derive(Debug, Clone, Default)]
pub struct OwnDeletes(Arc<Mutex<HashSet<PodKey>>>);

impl OwnDeletes {
    /// The benchmark is about to delete this pod.
    pub fn mark(&self, namespace: &str, name: &str) {
        self.0.lock().insert(PodKey::new(namespace, name));
    }

    /// Whether the benchmark deleted the pod (still remembered).
    pub(crate) fn contains(&self, key: &PodKey) -> bool {
        self.0.lock().contains(key)
    }

    /// Whether the benchmark deleted the pod, forgetting it (the pod is
    /// gone).
    pub(crate) fn take(&self, key: &PodKey) -> bool {
        self.0.lock().remove(key)
    }

    /// Whether no delete is remembered.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }
}

/// Evictions of one workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evictions {
    /// Bound pods removed by others over the whole workload.
    pub total: usize,
    /// Of these, the ones removed while a window was being measured.
    pub in_windows: usize,
    /// Of `total`, the ones that carried `DisruptionTarget=True`.
    pub disruption_target: usize,
}

/// Whether the pod carries `DisruptionTarget=True`.
pub(crate) fn has_disruption_target(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "DisruptionTarget" && c.status == "True"))
}

/// The workload's `EvictedPods` DataItem (`Name` = the workload; unit
/// `pods`; `Total`, `InWindows`, `DisruptionTarget`).
pub fn item(workload: &str, e: &Evictions) -> DataItem {
    DataItem {
        data: [
            ("Total".to_string(), e.total as f64),
            ("InWindows".to_string(), e.in_windows as f64),
            ("DisruptionTarget".to_string(), e.disruption_target as f64),
        ]
        .into(),
        unit: "pods".into(),
        labels: [
            ("Metric".to_string(), METRIC.to_string()),
            ("Name".to_string(), workload.to_string()),
        ]
        .into(),
    }
}

/// Whether a DataItem is an `EvictedPods` item.
pub fn is_item(i: &DataItem) -> bool {
    i.labels.get("Metric").map(String::as_str) == Some(METRIC)
}
