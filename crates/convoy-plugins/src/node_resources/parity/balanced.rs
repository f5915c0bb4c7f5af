//! Upstream `TestNodeResourcesBalancedAllocation`
//! (`noderesources/balanced_allocation_test.go`, v1.37.2), the cases without
//! DRA objects.

use convoy_api::CycleState;
use convoy_config::{NodeResourcesBalancedAllocationArgs, PluginArgs, ResourceSpec};

use super::*;
use crate::helper::testing::PreScoreOn;
use crate::node_resources::BalancedAllocation;

const NODE1: &str = "node1";
const NODE2: &str = "node2";

fn cpu_only(cpu: &str) -> [(&str, &str); 1] {
    [("cpu", cpu)]
}

fn gpu(n: i64) -> [(&'static str, i64); 1] {
    [("nvidia.com/gpu", n)]
}

/// Scores of the nodes; `None` when PreScore skips the pod.
fn run(
    resources: &[&str],
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    run_pre_score: bool,
) -> Option<Vec<i64>> {
    let args = PluginArgs::NodeResourcesBalancedAllocation(NodeResourcesBalancedAllocationArgs {
        resources: resources.iter().map(|r| ResourceSpec::new(*r, 1)).collect(),
    });
    let ba = BalancedAllocation::new(Some(&args)).unwrap();
    let mut state = CycleState::new();
    if run_pre_score {
        let s = ba.pre_score_on(&mut state, pod, nodes);
        if s.is_skip() {
            return None;
        }
        assert!(s.is_success(), "{s}");
    }
    Some(crate::helper::testing::score_each(&ba, &state, pod, nodes))
}

/// (name, resources, pod, nodes, existing pods, run PreScore, scores or
/// None for Skip).
type Case<'a> =
    (&'a str, &'a [&'a str], Arc<PodInfo>, Vec<Node>, Vec<Arc<PodInfo>>, bool, Option<Vec<i64>>);

#[test]
fn node_resources_balanced_allocation() {
    let cpu_mem = ["cpu", "memory"];
    let with_gpu = ["cpu", "memory", "nvidia.com/gpu"];
    let split =
        || pod(&[&[("cpu", "1000m"), ("memory", "2000")], &[("cpu", "2000m"), ("memory", "3000")]]);
    let cases: Vec<Case> = vec![
        (
            "nothing scheduled, nothing requested, skip in PreScore",
            &cpu_mem,
            pod(&[]),
            vec![make_node(NODE1, 4000, 10000, &[]), make_node(NODE2, 4000, 10000, &[])],
            vec![],
            true,
            None,
        ),
        (
            // node1: cpu 0 -> 75%, memory 0 -> 50%: 100 -> 87; node2: 100 -> 100.
            "nothing scheduled, resources requested, differently sized nodes",
            &cpu_mem,
            split(),
            vec![make_node(NODE1, 4000, 10000, &[]), make_node(NODE2, 6000, 10000, &[])],
            vec![],
            true,
            Some(vec![68, 75]),
        ),
        (
            "resources requested, pods scheduled with resources",
            &cpu_mem,
            split(),
            vec![make_node(NODE1, 10000, 20000, &[]), make_node(NODE2, 10000, 20000, &[])],
            vec![
                pod_on(NODE1, &[&cpu_only("1000m"), &cpu_only("2000m")]),
                pod_on(
                    NODE2,
                    &[
                        &[("cpu", "1000m"), ("memory", "2000")],
                        &[("cpu", "2000m"), ("memory", "3000")],
                    ],
                ),
            ],
            true,
            Some(vec![73, 74]),
        ),
        (
            "resources requested, pods scheduled with resources, differently sized nodes",
            &cpu_mem,
            split(),
            vec![make_node(NODE1, 10000, 20000, &[]), make_node(NODE2, 10000, 50000, &[])],
            vec![
                pod_on(NODE1, &[&cpu_only("1000m"), &cpu_only("2000m")]),
                pod_on(
                    NODE2,
                    &[
                        &[("cpu", "1000m"), ("memory", "2000")],
                        &[("cpu", "2000m"), ("memory", "3000")],
                    ],
                ),
            ],
            true,
            Some(vec![73, 70]),
        ),
        (
            "resources requested, pods scheduled with resources, nodes to reach min/max score",
            &cpu_mem,
            pod(&[&[("memory", "2000")], &[("memory", "3000")]]),
            vec![make_node(NODE1, 3000, 5000, &[]), make_node(NODE2, 3000, 5000, &[])],
            vec![pod_on(NODE1, &[&cpu_only("1000m"), &cpu_only("2000m")])],
            true,
            Some(vec![100, 50]),
        ),
        (
            "requested resources at node capacity",
            &cpu_mem,
            pod(&[&cpu_only("1000m"), &cpu_only("2000m")]),
            vec![make_node(NODE1, 6000, 10000, &[]), make_node(NODE2, 6000, 10000, &[])],
            vec![
                pod_on(NODE1, &[&cpu_only("1000m"), &cpu_only("2000m")]),
                pod_on(
                    NODE2,
                    &[
                        &[("cpu", "1000m"), ("memory", "2000")],
                        &[("cpu", "2000m"), ("memory", "3000")],
                    ],
                ),
            ],
            true,
            Some(vec![62, 62]),
        ),
        (
            "scalar resource is included in the score computation if pod requests the scalar resource",
            &with_gpu,
            pod(&[&[("cpu", "0"), ("memory", "0"), ("nvidia.com/gpu", "1")]]),
            vec![make_node(NODE1, 3500, 40000, &gpu(8)), make_node(NODE2, 3500, 40000, &gpu(8))],
            vec![
                pod_on(
                    NODE1,
                    &[
                        &[("cpu", "1000m"), ("memory", "2000")],
                        &[("cpu", "2000m"), ("memory", "3000"), ("nvidia.com/gpu", "3")],
                    ],
                ),
                pod_on(
                    NODE2,
                    &[
                        &[("cpu", "1000m"), ("memory", "2000")],
                        &[("cpu", "2000m"), ("memory", "3000")],
                    ],
                ),
            ],
            true,
            Some(vec![75, 76]),
        ),
        (
            "scalar resource is not included in the score computation if pod doesn't request the scalar resource",
            &with_gpu,
            split(),
            vec![make_node(NODE1, 3500, 40000, &gpu(8)), make_node(NODE2, 3500, 40000, &[])],
            vec![],
            true,
            Some(vec![56, 56]),
        ),
        (
            "resources requested, pods scheduled with resources if PreScore not called",
            &cpu_mem,
            split(),
            vec![make_node(NODE1, 10000, 20000, &[]), make_node(NODE2, 10000, 20000, &[])],
            vec![
                pod_on(NODE1, &[&cpu_only("1000m"), &cpu_only("2000m")]),
                pod_on(
                    NODE2,
                    &[
                        &[("cpu", "1000m"), ("memory", "2000")],
                        &[("cpu", "2000m"), ("memory", "3000")],
                    ],
                ),
            ],
            false,
            Some(vec![73, 74]),
        ),
    ];
    for (name, resources, pod, nodes, existing, pre_score, want) in cases {
        let nodes = snapshot(nodes, existing);
        assert_eq!(run(resources, &pod, &nodes, pre_score), want, "{name}");
    }
}

#[test]
fn first_divergence_of_the_new_user_test() {
    // The report that led to the 1.36 formula: an empty 2-CPU/8Gi node and a
    // 250m/4Gi pod. Upstream v1.37.2 scores 65 (balance 100 -> 81); the
    // pre-1.36 `(1 - std) * 100` gave 81.
    let nodes = snapshot(vec![make_node(NODE1, 2000, 8 << 30, &[])], vec![]);
    let p = pod(&[&[("cpu", "250m"), ("memory", "4Gi")]]);
    assert_eq!(run(&["cpu", "memory"], &p, &nodes, true), Some(vec![65]));
}
