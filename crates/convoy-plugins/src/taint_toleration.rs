//! TaintToleration: Filter rejects nodes with a NoSchedule/NoExecute taint
//! the pod does not tolerate; Score prefers nodes with fewer untolerated
//! PreferNoSchedule taints (upstream `plugins/tainttoleration`, v1.37.2).
//!
//! Score, as v1.37.2: the number of the node's PreferNoSchedule taints not
//! tolerated by the pod's tolerations with effect PreferNoSchedule or none,
//! then `DefaultNormalizeScore(100, reverse)`: `100 - 100 * count / max`,
//! integer division, all 100 when no node has such a taint. Upstream's
//! table: `tests::taint_toleration_score`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration};

use convoy_api::{
    ActionType, ClusterEventWithHint, CycleState, EventObject, EventResource, FilterPlugin,
    MAX_NODE_SCORE, NodeInfo, NodeInfoLister, Plugin, PodInfo, PreScorePlugin, QueueingHint,
    ScorePlugin, Status, names,
};

use crate::helper::taint::{
    PREFER_NO_SCHEDULE, find_untolerated_no_schedule_taint, tolerations_tolerate_taint,
};
use crate::helper::{default_normalize_score, event_node, event_pod};

fn pod_tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.spec().tolerations.as_deref().unwrap_or(&[])
}

fn node_taints(node: &k8s_openapi::api::core::v1::Node) -> &[Taint] {
    node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or(&[])
}

/// The TaintToleration plugin.
#[derive(Debug, Default, Clone, Copy)]
pub struct TaintToleration;

/// Filter's reason, as upstream's.
pub const UNTOLERATED: &str = "node(s) had untolerated taint(s)";

/// Filter's reason for a node Convoy holds out of scheduling after its
/// kubelet rejected a pod Convoy bound (the taint
/// [`convoy_api::KUBELET_REJECTED_TAINT`] exists in Convoy's cache only, so
/// upstream's wording would point users at a taint `kubectl` cannot show).
pub const HELD: &str = "node(s) were held out of scheduling after their kubelet rejected a pod \
                        (taint convoy.dev/kubelet-rejected, in Convoy's cache only)";

/// PreScore state: the pod's tolerations that can apply to PreferNoSchedule.
struct PreScoreState {
    tolerations_prefer_no_schedule: Vec<Toleration>,
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        names::TAINT_TOLERATION
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
    fn as_pre_score(self: Arc<Self>) -> Option<Arc<dyn PreScorePlugin>> {
        Some(self)
    }
    fn as_score(self: Arc<Self>) -> Option<Arc<dyn ScorePlugin>> {
        Some(self)
    }
}

impl FilterPlugin for TaintToleration {
    /// UnschedulableAndUnresolvable `node(s) had untolerated taint(s)`, as
    /// v1.37.2 (`taint_toleration.go`; the taint itself goes to a debug log
    /// line, as upstream's V(4) line).
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match find_untolerated_no_schedule_taint(node.taints(), pod_tolerations(pod)) {
            None => Status::success(),
            Some(taint) => {
                tracing::debug!(
                    node = node.name(),
                    pod = %pod.key,
                    taint.key = %taint.key,
                    taint.value = taint.value.as_deref().unwrap_or(""),
                    taint.effect = %taint.effect,
                    "node had untolerated taints"
                );
                if taint.key == convoy_api::KUBELET_REJECTED_TAINT {
                    return Status::unresolvable(HELD);
                }
                Status::unresolvable(UNTOLERATED)
            }
        }
    }

    /// A node without taints passes without looking at the pod.
    fn filter_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        candidates: &mut Vec<usize>,
        rejected: &mut Vec<(usize, Status)>,
    ) {
        convoy_api::retain_nodes(candidates, rejected, |i| {
            if nodes[i].taints().is_empty() {
                return None;
            }
            let s = self.filter(state, pod, &nodes[i]);
            (!s.is_success()).then_some(s)
        });
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[&NodeInfo],
        _all: &dyn NodeInfoLister,
    ) -> Status {
        let tolerations_prefer_no_schedule = pod_tolerations(pod)
            .iter()
            .filter(|t| {
                let e = t.effect.as_deref().unwrap_or("");
                e.is_empty() || e == PREFER_NO_SCHEDULE
            })
            .cloned()
            .collect();
        state.write(PreScoreState { tolerations_prefer_no_schedule });
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    /// The number of PreferNoSchedule taints the pod does not tolerate
    /// (reversed by `normalize_score`).
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(match state.read::<PreScoreState>() {
            Some(s) => intolerable_prefer_no_schedule(node, &s.tolerations_prefer_no_schedule),
            None => intolerable_prefer_no_schedule(node, pod_tolerations(pod)),
        })
    }

    /// [`score`](Self::score) for every node, the state read once.
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        out: &mut [i64],
    ) -> Result<(), Status> {
        let tolerations = match state.read::<PreScoreState>() {
            Some(s) => &s.tolerations_prefer_no_schedule[..],
            None => pod_tolerations(pod),
        };
        for (node, o) in nodes.iter().zip(out) {
            *o = intolerable_prefer_no_schedule(node, tolerations);
        }
        Ok(())
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores)
    }
}

/// The node's `PreferNoSchedule` taints that `tolerations` do not tolerate
/// (TaintToleration's raw score, upstream `countIntolerableTaintsPreferNoSchedule`).
fn intolerable_prefer_no_schedule(node: &NodeInfo, tolerations: &[Toleration]) -> i64 {
    node.taints()
        .iter()
        .filter(|t| t.effect == PREFER_NO_SCHEDULE)
        .filter(|t| !tolerations_tolerate_taint(tolerations, t))
        .count() as i64
}

/// Queue when the node goes from untolerated (or absent) to tolerated.
fn is_schedulable_after_node_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(modified) = event_node(new) else { return QueueingHint::Queue };
    let tolerations = pod_tolerations(pod);
    let was_untolerated = event_node(old)
        .is_none_or(|n| find_untolerated_no_schedule_taint(node_taints(n), tolerations).is_some());
    let is_untolerated =
        find_untolerated_no_schedule_taint(node_taints(modified), tolerations).is_some();
    if was_untolerated && !is_untolerated { QueueingHint::Queue } else { QueueingHint::Skip }
}

/// Queue when the pod whose tolerations changed is the rejected pod.
fn is_schedulable_after_pod_toleration_change(
    pod: &PodInfo,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> QueueingHint {
    let Some(modified) = event_pod(new) else { return QueueingHint::Queue };
    if modified.metadata.uid.as_deref().unwrap_or("") == &*pod.uid {
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
    use crate::helper::taint::NO_SCHEDULE;
    use crate::helper::taint::testing::tol;
    use crate::helper::testing::PreScoreOn;
    use crate::helper::testing::{node_obj, pod_obj};

    #[test]
    fn filter() {
        let cases = [
            ("no taints", NodeBuilder::new("n"), PodBuilder::new("p"), None),
            (
                "NoSchedule not tolerated",
                NodeBuilder::new("n").taint("gpu", "true", "NoSchedule"),
                PodBuilder::new("p"),
                Some(UNTOLERATED),
            ),
            (
                "NoExecute not tolerated, empty value",
                NodeBuilder::new("n").taint("dedicated", "", "NoExecute"),
                PodBuilder::new("p"),
                Some(UNTOLERATED),
            ),
            (
                "PreferNoSchedule never filters",
                NodeBuilder::new("n").taint("soft", "x", "PreferNoSchedule"),
                PodBuilder::new("p"),
                None,
            ),
            (
                "tolerated by Equal",
                NodeBuilder::new("n").taint("gpu", "true", "NoSchedule"),
                PodBuilder::new("p").toleration("gpu", Some("true"), "NoSchedule"),
                None,
            ),
            (
                "tolerated by Exists with empty effect",
                NodeBuilder::new("n").taint("gpu", "true", "NoSchedule").taint(
                    "gpu",
                    "x",
                    "NoExecute",
                ),
                PodBuilder::new("p").toleration("gpu", None, ""),
                None,
            ),
            (
                "first untolerated of several reported",
                NodeBuilder::new("n").taint("a", "1", "NoSchedule").taint("b", "2", "NoExecute"),
                PodBuilder::new("p").toleration("a", None, "NoSchedule"),
                Some(UNTOLERATED),
            ),
            (
                "Equal with another value",
                NodeBuilder::new("n").taint("gpu", "true", "NoSchedule"),
                PodBuilder::new("p").toleration("gpu", Some("false"), "NoSchedule"),
                Some(UNTOLERATED),
            ),
            (
                "empty key Exists tolerates everything",
                NodeBuilder::new("n").taint("a", "1", "NoSchedule").taint("b", "2", "NoExecute"),
                PodBuilder::new("p")
                    .with_spec(|s| s.tolerations = Some(vec![tol("", "Exists", "", "")])),
                None,
            ),
        ];
        for (name, node, pod, want) in cases {
            let s = crate::helper::testing::filter_one(
                &TaintToleration,
                &CycleState::new(),
                &pod.info(),
                &node.info(),
            );
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
    fn score_prefer_no_schedule() {
        // Upstream test: nodes with 0, 1 and 2 intolerable PreferNoSchedule taints.
        let pod = PodBuilder::new("p")
            .toleration("foo", Some("bar"), "PreferNoSchedule")
            .toleration("cpu-type", Some("arm64"), "") // empty effect: applies
            .toleration("ignored", None, "NoSchedule") // wrong effect: not used for score
            .info();
        let nodes = crate::helper::testing::infos(vec![
            NodeBuilder::new("a").taint("foo", "bar", "PreferNoSchedule").info(),
            NodeBuilder::new("b")
                .taint("foo", "bar", "PreferNoSchedule")
                .taint("x", "1", "PreferNoSchedule")
                .info(),
            NodeBuilder::new("c")
                .taint("x", "1", "PreferNoSchedule")
                .taint("ignored", "", "PreferNoSchedule")
                .taint("hard", "", "NoSchedule")
                .info(),
            NodeBuilder::new("d").taint("cpu-type", "arm64", "PreferNoSchedule").info(),
        ]);
        let mut state = CycleState::new();
        assert!(TaintToleration.pre_score_on(&mut state, &pod, &nodes).is_success());
        let mut scores: Vec<i64> =
            crate::helper::testing::score_each(&TaintToleration, &state, &pod, &nodes);
        assert_eq!(scores, vec![0, 1, 2, 0]);
        TaintToleration.normalize_score(&state, &pod, &mut scores);
        assert_eq!(scores, vec![100, 50, 0, 100]);
    }

    /// Upstream `TestTaintTolerationScore` (`tainttoleration/taint_toleration_test.go`,
    /// v1.37.2), case by case. The Gt/Lt cases run with
    /// `TaintTolerationComparisonOperators` on upstream, which is how Convoy
    /// always matches (the API server rejects such tolerations while the
    /// gate is off, its 1.37 default).
    #[test]
    fn taint_toleration_score() {
        fn t<'a>(key: &'a str, value: &'a str, effect: &'a str) -> (&'a str, &'a str, &'a str) {
            (key, value, effect)
        }
        let pref = "PreferNoSchedule";
        type Taints<'a> = &'a [(&'a str, &'a str, &'a str)];
        let node = |name: &str, taints: Taints<'_>| {
            taints.iter().fold(NodeBuilder::new(name), |b, (k, v, e)| b.taint(k, v, e)).info()
        };
        type Case<'a> = (&'a str, Vec<Toleration>, Vec<NodeInfo>, Vec<i64>);
        let cases: Vec<Case> = vec![
            (
                "node with taints tolerated by the pod, gets a higher score than those node with intolerable taints",
                vec![tol("foo", "Equal", "bar", pref)],
                vec![
                    node("nodeA", &[t("foo", "bar", pref)]),
                    node("nodeB", &[t("foo", "blah", pref)]),
                ],
                vec![100, 0],
            ),
            (
                "the nodes that all of their taints are tolerated by the pod, get the same score, no matter how many tolerable taints a node has",
                vec![
                    tol("cpu-type", "Equal", "arm64", pref),
                    tol("disk-type", "Equal", "ssd", pref),
                ],
                vec![
                    node("nodeA", &[]),
                    node("nodeB", &[t("cpu-type", "arm64", pref)]),
                    node("nodeC", &[t("cpu-type", "arm64", pref), t("disk-type", "ssd", pref)]),
                ],
                vec![100, 100, 100],
            ),
            (
                "the more intolerable taints a node has, the lower score it gets.",
                vec![tol("foo", "Equal", "bar", pref)],
                vec![
                    node("nodeA", &[]),
                    node("nodeB", &[t("cpu-type", "arm64", pref)]),
                    node("nodeC", &[t("cpu-type", "arm64", pref), t("disk-type", "ssd", pref)]),
                ],
                vec![100, 50, 0],
            ),
            (
                "only taints and tolerations that have effect PreferNoSchedule are checked by taints-tolerations priority function",
                vec![
                    tol("cpu-type", "Equal", "arm64", NO_SCHEDULE),
                    tol("disk-type", "Equal", "ssd", NO_SCHEDULE),
                ],
                vec![
                    node("nodeA", &[]),
                    node("nodeB", &[t("cpu-type", "arm64", NO_SCHEDULE)]),
                    node("nodeC", &[t("cpu-type", "arm64", pref), t("disk-type", "ssd", pref)]),
                ],
                vec![100, 100, 0],
            ),
            (
                "Default behaviour No taints and tolerations, lands on node with no taints",
                vec![],
                vec![node("nodeA", &[]), node("nodeB", &[t("cpu-type", "arm64", pref)])],
                vec![100, 0],
            ),
            (
                "Numeric Gt operator: pod with Gt toleration prefers nodes with matching SLA taint",
                vec![tol("node.kubernetes.io/sla", "Gt", "950", pref)],
                vec![
                    node("nodeA", &[t("node.kubernetes.io/sla", "800", pref)]),
                    node("nodeB", &[t("node.kubernetes.io/sla", "999", pref)]),
                ],
                vec![0, 100],
            ),
            (
                "Numeric Lt operator: pod with Lt toleration prefers nodes with matching SLA taint",
                vec![tol("node.kubernetes.io/sla", "Lt", "800", pref)],
                vec![
                    node("nodeA", &[t("node.kubernetes.io/sla", "950", pref)]),
                    node("nodeB", &[t("node.kubernetes.io/sla", "700", pref)]),
                ],
                vec![0, 100],
            ),
        ];
        for (name, tolerations, nodes, want) in cases {
            let pod =
                PodBuilder::new("pod1").with_spec(|s| s.tolerations = Some(tolerations)).info();
            let nodes = crate::helper::testing::infos(nodes);
            let mut state = CycleState::new();
            let s = TaintToleration.pre_score_on(&mut state, &pod, &nodes);
            assert!(s.is_success(), "{name}: {s}");
            let mut scores: Vec<i64> =
                crate::helper::testing::score_each(&TaintToleration, &state, &pod, &nodes);
            assert!(TaintToleration.normalize_score(&state, &pod, &mut scores).is_success());
            assert_eq!(scores, want, "{name}");
        }
    }

    #[test]
    fn hints() {
        let pod = PodBuilder::new("p").toleration("a", None, "NoSchedule").info();
        let tainted = || NodeBuilder::new("n").taint("b", "", "NoSchedule").build();
        let tolerated = || NodeBuilder::new("n").taint("a", "", "NoSchedule").build();
        let cases = [
            ("add tolerated", None, tolerated(), QueueingHint::Queue),
            ("add untolerated", None, tainted(), QueueingHint::Skip),
            ("taint removed", Some(tainted()), tolerated(), QueueingHint::Queue),
            ("taint added", Some(tolerated()), tainted(), QueueingHint::Skip),
            ("already tolerated", Some(tolerated()), tolerated(), QueueingHint::Skip),
        ];
        for (name, old, new, want) in cases {
            let old = old.map(node_obj);
            let got = is_schedulable_after_node_change(&pod, old.as_ref(), Some(&node_obj(new)));
            assert_eq!(got, want, "{name}");
        }
        let same = pod_obj(PodBuilder::new("p").build());
        let other = pod_obj(PodBuilder::new("q").build());
        assert_eq!(
            is_schedulable_after_pod_toleration_change(&pod, None, Some(&same)),
            QueueingHint::Queue
        );
        assert_eq!(
            is_schedulable_after_pod_toleration_change(&pod, None, Some(&other)),
            QueueingHint::Skip
        );
    }
}
