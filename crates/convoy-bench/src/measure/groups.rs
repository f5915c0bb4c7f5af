//! Pod-group metrics, next to `SchedulingThroughput`: how long a gang
//! takes to be placed and how many gangs are placed per second.
//!
//! - `PodGroupSchedulingLatency` (ms; Perc50/90/95/99, Average), in two
//!   definitions told apart by the `Definition` label:
//!   - [`DEF_CREATED_TO_BOUND`]: from the first member of the group seen
//!     created to its `minCount`-th member seen bound, as upstream's
//!     `PodGroupLatencyCollector` (kubernetes PR #138341) defines it. Both
//!     instants come from the pod tracker (the API target's pod watch, the
//!     embedded target's update stream), so the figure is the same for
//!     every scheduler on the API target.
//!   - [`DEF_GROUP_CYCLE`] (embedded target only): Convoy's own group
//!     cycle, [`GroupDecision::latency`] of the attempts that placed a
//!     group (pop of the first member to the placement decision), as
//!     `DecisionSink::record_group` reports it.
//! - `PodGroupThroughput` (groups/s): the instants at which groups reached
//!   `minCount` bound members, sampled as upstream samples pods (see
//!   [`super::throughput`]).
//!
//! Groups are known from the PodGroups the benchmark creates
//! (`createPodGroups`, `createAny`, `--prepare`), of either API
//! (`scheduling.k8s.io/v1beta1` `minCount`, `scheduling.x-k8s.io/v1alpha1`
//! `minMember`); a pod joins one as the scheduler reads it
//! ([`group_key_of`]). A window counts the groups of its namespaces that
//! reached their minimum while it was open.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use convoy_api::pod_group::{GroupKey, PodGroup, group_key_of};
use convoy_scheduler::decision::{GroupDecision, GroupOutcome};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use super::Window;
use super::throughput::{SampleInterval, Sampled, Summary, sample};
use crate::dataitems::DataItem;

/// Metric name of the group latency DataItems.
pub const POD_GROUP_SCHEDULING_LATENCY: &str = "PodGroupSchedulingLatency";
/// Metric name of the groups-per-second DataItem.
pub const POD_GROUP_THROUGHPUT: &str = "PodGroupThroughput";
/// `Definition` label: first member created to `minCount`-th bound.
pub const DEF_CREATED_TO_BOUND: &str = "created-to-minCount-bound";
/// `Definition` label: Convoy's group cycle (embedded target).
pub const DEF_GROUP_CYCLE: &str = "group-cycle";

/// Whether a DataItem's `Metric` is one of this module's.
pub fn is_group_metric(metric: &str) -> bool {
    metric == POD_GROUP_SCHEDULING_LATENCY || metric == POD_GROUP_THROUGHPUT
}

/// What one window measured about groups.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupWindow {
    /// Groups that reached `minCount` bound members during the window.
    pub placed: usize,
    /// Per such group: first member created to `minCount`-th bound.
    pub latencies: Vec<Duration>,
    /// Convoy's group cycles that placed a group during the window
    /// (embedded target only; empty elsewhere).
    pub cycles: Vec<Duration>,
    /// Group cycles that did not place their group.
    pub failed_cycles: usize,
    /// Groups per second, sampled over the instants groups were complete.
    pub sampled: Sampled,
}

/// How far one group is.
#[derive(Debug, Clone)]
struct Progress {
    first_seen: Instant,
    bound: usize,
    complete: Option<Instant>,
}

/// Per-group progress, fed by the pod tracker (pods) and, on the embedded
/// target, by the scheduler's decision sink (group cycles).
#[derive(Debug, Default)]
pub(crate) struct GroupTracker {
    /// `minCount` / `minMember` of the PodGroups created.
    min_count: HashMap<GroupKey, usize>,
    progress: HashMap<GroupKey, Progress>,
    /// When the open window started.
    window_start: Option<Instant>,
    cycles: Vec<Duration>,
    failed_cycles: usize,
}

impl GroupTracker {
    /// Whether any PodGroup is known (otherwise pods are not looked at).
    pub(crate) fn active(&self) -> bool {
        !self.min_count.is_empty()
    }

    /// Learns the minimum of every PodGroup (either API) among `objects`,
    /// created in `namespace` unless they name their own. Other objects
    /// and unreadable groups are skipped (creating them reports errors).
    pub(crate) fn register<'a>(
        &mut self,
        objects: impl IntoIterator<Item = &'a Value>,
        namespace: Option<&str>,
    ) {
        for v in objects {
            if v.get("kind").and_then(Value::as_str) != Some("PodGroup") {
                continue;
            }
            let mut v = v.clone();
            if let (Some(ns), Some(meta)) =
                (namespace, v.get_mut("metadata").and_then(Value::as_object_mut))
            {
                meta.entry("namespace").or_insert_with(|| ns.into());
            }
            match PodGroup::from_json(&v) {
                Ok(g) if g.gang => {
                    self.min_count.insert(g.key, g.min_member as usize);
                }
                Ok(_) => {}
                Err(e) => tracing::debug!("group metrics: {e}"),
            }
        }
    }

    /// A pod seen at `at`: `new` the first time it is seen, `newly_bound`
    /// the first time it is seen bound.
    pub(crate) fn pod(&mut self, pod: &Pod, new: bool, newly_bound: bool, at: Instant) {
        if !(new || newly_bound) {
            return;
        }
        let Some(key) = group_key_of(pod) else { return };
        let Some(&min) = self.min_count.get(&key) else { return };
        let p = self.progress.entry(key).or_insert(Progress {
            first_seen: at,
            bound: 0,
            complete: None,
        });
        if newly_bound {
            p.bound += 1;
            if p.bound == min && p.complete.is_none() {
                p.complete = Some(at);
            }
        }
    }

    /// A group cycle ended (embedded target); counted while a window is
    /// open.
    pub(crate) fn cycle(&mut self, d: &GroupDecision) {
        if self.window_start.is_none() {
            return;
        }
        match d.outcome {
            GroupOutcome::Placed => self.cycles.push(d.latency),
            GroupOutcome::Unschedulable { .. } => self.failed_cycles += 1,
        }
    }

    /// A window opens at `at`.
    pub(crate) fn start(&mut self, at: Instant) {
        self.window_start = Some(at);
        self.cycles.clear();
        self.failed_cycles = 0;
    }

    /// The window over `namespaces` closes after `duration`: the groups
    /// of those namespaces complete within it. `None` when no group was
    /// complete and no group cycle ran (not a gang workload).
    pub(crate) fn stop(
        &mut self,
        namespaces: &[String],
        duration: Duration,
        interval: SampleInterval,
    ) -> Option<GroupWindow> {
        let start = self.window_start.take()?;
        let end = start + duration;
        let mut latencies = Vec::new();
        let mut completions = Vec::new();
        for (key, p) in &self.progress {
            let Some(done) = p.complete else { continue };
            if done < start || done > end || !namespaces.iter().any(|n| **n == *key.namespace) {
                continue;
            }
            latencies.push(done.saturating_duration_since(p.first_seen));
            completions.push(done - start);
        }
        let cycles = std::mem::take(&mut self.cycles);
        let failed_cycles = std::mem::take(&mut self.failed_cycles);
        if latencies.is_empty() && cycles.is_empty() && failed_cycles == 0 {
            return None;
        }
        Some(GroupWindow {
            placed: latencies.len(),
            latencies,
            cycles,
            failed_cycles,
            sampled: sample(&completions, duration, interval),
        })
    }
}

/// Upstream's summary of latencies, in milliseconds: nearest-rank
/// percentiles (`sorted[ceil(len·p/100) − 1]`, as for throughput; upstream
/// interpolates histogram buckets, these are exact samples) and the mean.
pub fn latency_summary(latencies: &[Duration]) -> Option<Summary> {
    let ms: Vec<f64> = latencies.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    Summary::of(&ms)
}

/// The DataItems of a window's group metrics (none for a window without
/// groups). `Name` is `<workload>/<window>`, as for throughput.
pub fn items(workload: &str, w: &Window) -> Vec<DataItem> {
    let Some(g) = &w.groups else { return Vec::new() };
    let name = format!("{workload}/{}", w.name);
    let item = |metric: &str, definition: Option<&str>, unit: &str, s: Summary| {
        let mut labels: BTreeMap<String, String> =
            [("Metric", metric), ("Name", name.as_str())].map(|(k, v)| (k.into(), v.into())).into();
        if let Some(d) = definition {
            labels.insert("Definition".into(), d.into());
        }
        DataItem { data: s.data(), unit: unit.into(), labels }
    };
    let mut out = Vec::new();
    if let Some(s) = latency_summary(&g.latencies) {
        out.push(item(POD_GROUP_SCHEDULING_LATENCY, Some(DEF_CREATED_TO_BOUND), "ms", s));
    }
    if let Some(s) = latency_summary(&g.cycles) {
        out.push(item(POD_GROUP_SCHEDULING_LATENCY, Some(DEF_GROUP_CYCLE), "ms", s));
    }
    if let Some(s) = Summary::of(&g.sampled.samples) {
        out.push(item(POD_GROUP_THROUGHPUT, None, "groups/s", s));
    }
    out
}

/// Groups per second over the whole window: groups complete over the
/// window's wall time (not upstream's mean of samples; robust when a
/// window holds one or two 1 s samples).
pub fn overall_rate(w: &Window) -> Option<f64> {
    let g = w.groups.as_ref()?;
    let secs = w.duration.as_secs_f64();
    (g.placed > 0 && secs > 0.0).then(|| g.placed as f64 / secs)
}

/// Pods per second from the first bind of the window to its last (the
/// creation of the pods before the first bind left out).
pub fn bind_span_rate(w: &Window) -> Option<f64> {
    let (first, last) = w.bind_span?;
    let secs = (last - first).as_secs_f64();
    (w.pods > 1 && secs > 0.0).then(|| (w.pods - 1) as f64 / secs)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use convoy_api::pod_group::PodGroupApi;
    use serde_json::json;

    use super::*;

    fn pod(ns: &str, name: &str, group: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name},
            "spec": {"containers": [], "schedulingGroup": {"podGroupName": group}},
        }))
        .unwrap()
    }

    fn x_pod(ns: &str, name: &str, group: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name,
                         "labels": {"scheduling.x-k8s.io/pod-group": group}},
            "spec": {"containers": []},
        }))
        .unwrap()
    }

    fn upstream_group(name: &str, min: u32) -> Value {
        json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
               "metadata": {"name": name},
               "spec": {"schedulingPolicy": {"gang": {"minCount": min}}}})
    }

    fn decision(outcome: GroupOutcome, latency_us: u64) -> GroupDecision {
        GroupDecision {
            group: GroupKey::new(PodGroupApi::Upstream, "ns", "g"),
            uid: None,
            profile: Arc::from("convoy-scheduler"),
            outcome,
            placed: 3,
            members: 3,
            placed_before: 0,
            min_member: 3,
            nodes: BTreeMap::new(),
            failures_before: 0,
            barrier: false,
            latency: Duration::from_micros(latency_us),
        }
    }

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn latency_is_first_created_to_min_count_th_bound() {
        let t0 = Instant::now();
        let mut t = GroupTracker::default();
        t.register(&[upstream_group("g0", 3), upstream_group("g1", 2)], Some("ns"));
        t.start(t0);
        // g0: members created at 1, 2, 4 ms; bound at 10, 12 and 30 ms:
        // complete at the third bind, 29 ms after the first creation.
        t.pod(&pod("ns", "a", "g0"), true, false, t0 + MS(1));
        t.pod(&pod("ns", "b", "g0"), true, false, t0 + MS(2));
        t.pod(&pod("ns", "c", "g0"), true, false, t0 + MS(4));
        t.pod(&pod("ns", "a", "g0"), false, true, t0 + MS(10));
        t.pod(&pod("ns", "b", "g0"), false, true, t0 + MS(12));
        // An update that is neither new nor a bind changes nothing.
        t.pod(&pod("ns", "b", "g0"), false, false, t0 + MS(20));
        t.pod(&pod("ns", "c", "g0"), false, true, t0 + MS(30));
        // g1 (minCount 2): a pod first seen already bound counts as both.
        t.pod(&pod("ns", "d", "g1"), true, true, t0 + MS(5));
        t.pod(&pod("ns", "e", "g1"), true, true, t0 + MS(8));
        let w = t.stop(&["ns".into()], MS(40), SampleInterval::Fixed(MS(1))).unwrap();
        assert_eq!(w.placed, 2);
        let mut lat = w.latencies.clone();
        lat.sort();
        assert_eq!(lat, vec![MS(3), MS(29)]);
        assert!(w.cycles.is_empty());
    }

    #[test]
    fn groups_short_of_min_count_other_namespaces_and_plain_pods_do_not_count() {
        let t0 = Instant::now();
        let mut t = GroupTracker::default();
        t.register(&[upstream_group("g0", 3)], Some("ns"));
        let mut other = upstream_group("g0", 1);
        other["metadata"]["namespace"] = "other".into();
        t.register(&[other], Some("ns"));
        t.start(t0);
        for n in ["a", "b"] {
            t.pod(&pod("ns", n, "g0"), true, true, t0 + MS(1));
        }
        t.pod(&pod("other", "x", "g0"), true, true, t0 + MS(2));
        // Not a member of a known group.
        t.pod(&pod("ns", "p", "unknown"), true, true, t0 + MS(2));
        let w = t.stop(&["ns".into()], MS(10), SampleInterval::Fixed(MS(1)));
        assert_eq!(w, None, "g0 has 2 of 3 bound; other/g0 is outside the window");
    }

    #[test]
    fn x_k8s_groups_use_min_member_and_the_label() {
        let t0 = Instant::now();
        let mut t = GroupTracker::default();
        let g = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                       "metadata": {"name": "train", "namespace": "ml"},
                       "spec": {"minMember": 2}});
        let basic = json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                           "metadata": {"name": "b"}, "spec": {"schedulingPolicy": {"basic": {}}}});
        t.register(&[g, basic, json!({"apiVersion": "v1", "kind": "Pod"})], None);
        assert_eq!(t.min_count.len(), 1, "basic groups and other kinds are not gangs");
        t.start(t0);
        t.pod(&x_pod("ml", "w0", "train"), true, false, t0);
        t.pod(&x_pod("ml", "w1", "train"), true, false, t0 + MS(1));
        t.pod(&x_pod("ml", "w0", "train"), false, true, t0 + MS(3));
        t.pod(&x_pod("ml", "w1", "train"), false, true, t0 + MS(7));
        let w = t.stop(&["ml".into()], MS(10), SampleInterval::Fixed(MS(1))).unwrap();
        assert_eq!(w.latencies, vec![MS(7)]);
    }

    #[test]
    fn group_cycles_are_counted_while_a_window_is_open() {
        let t0 = Instant::now();
        let mut t = GroupTracker::default();
        t.register(&[upstream_group("g", 3)], Some("ns"));
        t.cycle(&decision(GroupOutcome::Placed, 999)); // before the window: ignored
        t.start(t0);
        t.cycle(&decision(GroupOutcome::Placed, 500));
        t.cycle(&decision(GroupOutcome::Placed, 1500));
        t.cycle(&decision(GroupOutcome::Unschedulable { message: "no".into() }, 100));
        let w = t.stop(&["ns".into()], MS(10), SampleInterval::Fixed(MS(1))).unwrap();
        assert_eq!(w.cycles, vec![Duration::from_micros(500), Duration::from_micros(1500)]);
        assert_eq!((w.failed_cycles, w.placed), (1, 0));
        let s = latency_summary(&w.cycles).unwrap();
        assert_eq!((s.perc50, s.perc99, s.average), (0.5, 1.5, 1.0));
    }

    #[test]
    fn items_and_groups_per_second() {
        let t0 = Instant::now();
        let mut t = GroupTracker::default();
        let groups: Vec<Value> = (0..20).map(|i| upstream_group(&format!("g{i}"), 1)).collect();
        t.register(&groups, Some("ns"));
        t.start(t0);
        // One group complete every 10 ms from 5 ms: 100 groups/s.
        for i in 0..20u64 {
            let p = pod("ns", &format!("p{i}"), &format!("g{i}"));
            t.pod(&p, true, true, t0 + MS(5 + 10 * i));
        }
        t.cycle(&decision(GroupOutcome::Placed, 2000));
        let g = t.stop(&["ns".into()], MS(200), SampleInterval::Fixed(MS(10))).unwrap();
        let w = Window {
            name: "ns".into(),
            pods: 20,
            duration: MS(200),
            bind_span: None,
            sampled: Sampled { interval: MS(10), samples: Vec::new() },
            groups: Some(g),
            evictions: 0,
        };
        assert_eq!(overall_rate(&w), Some(100.0));
        let items = items("GangScheduling/x", &w);
        let find = |m: &str, d: Option<&str>| {
            items
                .iter()
                .find(|i| i.labels["Metric"] == m && i.labels.get("Definition").map(|s| &**s) == d)
                .unwrap_or_else(|| panic!("{m} {d:?} in {items:?}"))
        };
        let tp = find(POD_GROUP_THROUGHPUT, None);
        assert_eq!((tp.unit.as_str(), tp.data["Average"]), ("groups/s", 100.0));
        assert_eq!(tp.labels["Name"], "GangScheduling/x/ns");
        let lat = find(POD_GROUP_SCHEDULING_LATENCY, Some(DEF_CREATED_TO_BOUND));
        assert_eq!((lat.unit.as_str(), lat.data["Perc99"]), ("ms", 0.0));
        let cyc = find(POD_GROUP_SCHEDULING_LATENCY, Some(DEF_GROUP_CYCLE));
        assert_eq!(cyc.data["Perc99"], 2.0);
        assert!(is_group_metric(&cyc.labels["Metric"]));
        assert!(!is_group_metric("SchedulingThroughput"));
    }
}
