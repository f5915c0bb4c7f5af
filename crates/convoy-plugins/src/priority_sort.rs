//! PrioritySort (QueueSort): pods with a higher priority first, then the one
//! queued earlier (upstream `plugins/queuesort`).

use std::sync::Arc;

use convoy_api::{Plugin, QueueSortPlugin, QueuedPodInfo, names};

/// Orders the active queue by `spec.priority` (higher first), then by the
/// time the pod was queued (earlier first).
#[derive(Debug, Default, Clone, Copy)]
pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        names::PRIORITY_SORT
    }
    fn as_queue_sort(self: Arc<Self>) -> Option<Arc<dyn QueueSortPlugin>> {
        Some(self)
    }
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (p1, p2) = (a.pod_info.priority, b.pod_info.priority);
        p1 > p2 || (p1 == p2 && a.timestamp < b.timestamp)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use convoy_api::testing::PodBuilder;

    use super::*;

    fn queued(priority: i32, at: Instant) -> QueuedPodInfo {
        QueuedPodInfo::new(PodBuilder::new("p").priority(priority).info(), at)
    }

    #[test]
    fn higher_priority_then_earlier() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        // (a, b, a before b?)
        let cases = [
            ("higher priority first", queued(10, t1), queued(5, t0), true),
            ("lower priority later", queued(5, t0), queued(10, t1), false),
            ("same priority, earlier first", queued(5, t0), queued(5, t1), true),
            ("same priority, later not first", queued(5, t1), queued(5, t0), false),
            ("identical is not less", queued(5, t0), queued(5, t0), false),
            ("negative priority", queued(-1, t0), queued(0, t1), false),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(PrioritySort.less(&a, &b), want, "{name}");
        }
    }

    #[test]
    fn sorts_a_queue() {
        let t0 = Instant::now();
        let mut q: Vec<QueuedPodInfo> = [(0, 3), (100, 2), (0, 1), (100, 5), (-5, 0)]
            .into_iter()
            .map(|(p, s)| queued(p, t0 + Duration::from_secs(s)))
            .collect();
        q.sort_by(|a, b| {
            if PrioritySort.less(a, b) {
                std::cmp::Ordering::Less
            } else if PrioritySort.less(b, a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        let got: Vec<(i32, u64)> =
            q.iter().map(|p| (p.pod_info.priority, (p.timestamp - t0).as_secs())).collect();
        assert_eq!(got, vec![(100, 2), (100, 5), (0, 1), (0, 3), (-5, 0)]);
    }
}
