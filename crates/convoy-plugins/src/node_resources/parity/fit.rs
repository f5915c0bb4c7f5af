//! Upstream's NodeResourcesFit score tables (v1.37.2):
//! `TestLeastAllocatedScoringStrategy`, `TestMostAllocatedScoringStrategy`,
//! `TestRequestedToCapacityRatioScoringStrategy`,
//! `TestResourceBinPackingSingleExtended`,
//! `TestResourceBinPackingMultipleExtended`, `TestFitScore` and
//! `TestResourceAllocationScorerCalculateRequests`.

use convoy_api::{CycleState, ScorePlugin};
use convoy_config::{
    NodeResourcesFitArgs, RequestedToCapacityRatioParam, ResourceSpec, ScoringStrategy,
    ScoringStrategyType, UtilizationShapePoint,
};

use super::*;
use crate::helper::testing::PreScoreOn;
use crate::node_resources::Fit;
use crate::node_resources::resource_allocation::ResourceAllocationScorer;

const NODE1: &str = "node1";
const NODE2: &str = "node2";
const EXTENDED: &str = "abc.com/xyz";

fn res(list: &[(&str, i64)]) -> Vec<ResourceSpec> {
    list.iter().map(|(n, w)| ResourceSpec::new(*n, *w)).collect()
}

fn default_resources() -> Vec<ResourceSpec> {
    res(&[("cpu", 1), ("memory", 1)])
}

fn extended_resource_set() -> Vec<ResourceSpec> {
    res(&[("cpu", 1), ("memory", 1), (EXTENDED, 1)])
}

fn fit(type_: ScoringStrategyType, resources: Vec<ResourceSpec>, shape: &[(i32, i32)]) -> Fit {
    let requested_to_capacity_ratio = (!shape.is_empty()).then(|| RequestedToCapacityRatioParam {
        shape: shape
            .iter()
            .map(|&(utilization, score)| UtilizationShapePoint { utilization, score })
            .collect(),
    });
    Fit::from_args(&NodeResourcesFitArgs {
        scoring_strategy: ScoringStrategy { type_, resources, requested_to_capacity_ratio },
        ..Default::default()
    })
    .unwrap()
}

fn scores(fit: &Fit, pod: &PodInfo, nodes: &[Arc<NodeInfo>], run_pre_score: bool) -> Vec<i64> {
    let mut state = CycleState::new();
    if run_pre_score {
        let s = fit.pre_score_on(&mut state, pod, nodes);
        assert!(s.is_success(), "{s}");
    }
    crate::helper::testing::score_each(fit, &state, pod, nodes)
}

/// `Req({"cpu": "1000", "memory": "2000"}).Req({"cpu": "2000", "memory": "3000"})`.
fn split_pod() -> Arc<PodInfo> {
    pod(&[&[("cpu", "1000"), ("memory", "2000")], &[("cpu", "2000"), ("memory", "3000")]])
}

fn cm<'a>(cpu: &'a str, memory: &'a str) -> [(&'a str, &'a str); 2] {
    [("cpu", cpu), ("memory", memory)]
}

type Case = (&'static str, Vec<ResourceSpec>, Arc<PodInfo>, Vec<Node>, Vec<Arc<PodInfo>>, [i64; 2]);

/// (name, pod, nodes, existing pods, scores).
type BinCase = (&'static str, Arc<PodInfo>, Vec<Node>, Vec<Arc<PodInfo>>, [i64; 2]);

/// (name, plugin, pod, nodes, existing pods, run PreScore, scores).
type FitCase = (&'static str, Fit, Arc<PodInfo>, Vec<Node>, Vec<Arc<PodInfo>>, bool, [i64; 2]);

fn strategy_cases(type_: ScoringStrategyType, cases: Vec<Case>) {
    for (name, resources, pod, nodes, existing, want) in cases {
        let f = fit(type_, resources, &[]);
        let nodes = snapshot(nodes, existing);
        assert_eq!(scores(&f, &pod, &nodes, true), want, "{name}");
    }
}

#[test]
fn least_allocated_scoring_strategy() {
    let n = |name, cpu, mem| node(name, &[("cpu", cpu), ("memory", mem)]);
    strategy_cases(
        ScoringStrategyType::LeastAllocated,
        vec![
            (
                "nothing scheduled, nothing requested",
                default_resources(),
                pod(&[]),
                vec![n(NODE1, "4000", "10000"), n(NODE2, "4000", "10000")],
                vec![],
                [100, 100],
            ),
            (
                "nothing scheduled, resources requested, differently sized nodes",
                default_resources(),
                split_pod(),
                vec![n(NODE1, "4000", "10000"), n(NODE2, "6000", "10000")],
                vec![],
                [37, 50],
            ),
            (
                "no resources requested, pods scheduled",
                default_resources(),
                pod(&[]),
                vec![n(NODE1, "4000", "10000"), n(NODE2, "4000", "10000")],
                vec![
                    pod_on(NODE1, &[]),
                    pod_on(NODE1, &[]),
                    pod_on(NODE2, &[]),
                    pod_on(NODE2, &[]),
                ],
                [100, 100],
            ),
            (
                "no resources requested, pods scheduled with resources",
                default_resources(),
                pod(&[]),
                vec![n(NODE1, "10000", "20000"), n(NODE2, "10000", "20000")],
                vec![
                    pod_on(NODE1, &[&cm("3000", "0")]),
                    pod_on(NODE1, &[&cm("3000", "0")]),
                    pod_on(NODE2, &[&cm("3000", "0")]),
                    pod_on(NODE2, &[&cm("3000", "5000")]),
                ],
                [70, 57],
            ),
            (
                "resources requested, pods scheduled with resources",
                default_resources(),
                split_pod(),
                vec![n(NODE1, "10000", "20000"), n(NODE2, "10000", "20000")],
                vec![pod_on(NODE1, &[&cm("3000", "0")]), pod_on(NODE2, &[&cm("3000", "5000")])],
                [57, 45],
            ),
            (
                "resources requested, pods scheduled with resources, differently sized nodes",
                default_resources(),
                split_pod(),
                vec![n(NODE1, "10000", "20000"), n(NODE2, "10000", "50000")],
                vec![pod_on(NODE1, &[&cm("3000", "0")]), pod_on(NODE2, &[&cm("3000", "5000")])],
                [57, 60],
            ),
            (
                "requested resources exceed node capacity",
                default_resources(),
                pod(&[&cm("3000", "0")]),
                vec![n(NODE1, "4000", "10000"), n(NODE2, "4000", "10000")],
                vec![pod_on(NODE1, &[&cm("3000", "0")]), pod_on(NODE2, &[&cm("3000", "5000")])],
                [50, 25],
            ),
            (
                "zero node resources, pods scheduled with resources",
                default_resources(),
                pod(&[]),
                vec![node(NODE1, &[]), node(NODE2, &[])],
                vec![pod_on(NODE1, &[&cm("3000", "0")]), pod_on(NODE2, &[&cm("3000", "5000")])],
                [0, 0],
            ),
            (
                "nothing scheduled, resources requested with different weight on CPU and memory, differently sized nodes",
                res(&[("memory", 2), ("cpu", 1)]),
                split_pod(),
                vec![n(NODE1, "4000", "10000"), n(NODE2, "6000", "10000")],
                vec![],
                [41, 50],
            ),
            (
                "bypass extended resource if the pod does not request",
                extended_resource_set(),
                split_pod(),
                vec![
                    n(NODE1, "6000", "10000"),
                    node(NODE2, &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")]),
                ],
                vec![],
                [50, 50],
            ),
            (
                "honor extended resource if the pod requests",
                extended_resource_set(),
                pod(&[&[("cpu", "3000"), ("memory", "5000"), (EXTENDED, "2")]]),
                vec![
                    node(NODE1, &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")]),
                    node(NODE2, &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "10")]),
                ],
                vec![],
                [50, 60],
            ),
            (
                "if the node doesn't have a resource",
                res(&[(EXTENDED, 2), ("cpu", 1), ("memory", 1)]),
                pod(&[&cm("3000", "4000")]),
                vec![
                    n(NODE1, "6000", "10000"),
                    node(NODE2, &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")]),
                ],
                vec![],
                [55, 55],
            ),
        ],
    );
}

#[test]
fn most_allocated_scoring_strategy() {
    let n = |name, cpu, mem| node(name, &[("cpu", cpu), ("memory", mem)]);
    let requestless = |node: &str| pod_with(node, &[&[]], &[]);
    strategy_cases(
        ScoringStrategyType::MostAllocated,
        vec![
            (
                "nothing scheduled, nothing requested",
                default_resources(),
                pod(&[]),
                vec![n(NODE1, "4000", "10000"), n(NODE2, "4000", "10000")],
                vec![],
                [0, 0],
            ),
            (
                "nothing scheduled, resources requested, differently sized nodes",
                default_resources(),
                split_pod(),
                vec![n(NODE1, "4000", "10000"), n(NODE2, "6000", "10000")],
                vec![],
                [62, 50],
            ),
            (
                "no resources requested, pods scheduled with resources",
                default_resources(),
                pod(&[]),
                vec![n(NODE1, "10000", "20000"), n(NODE2, "10000", "20000")],
                vec![
                    pod_on(NODE1, &[&cm("3000", "0")]),
                    pod_on(NODE1, &[&cm("3000", "0")]),
                    pod_on(NODE2, &[&cm("3000", "0")]),
                    pod_on(NODE2, &[&cm("3000", "5000")]),
                ],
                [30, 42],
            ),
            (
                "resources requested, pods scheduled with resources",
                default_resources(),
                split_pod(),
                vec![n(NODE1, "10000", "20000"), n(NODE2, "10000", "20000")],
                vec![pod_on(NODE1, &[&cm("3000", "0")]), pod_on(NODE2, &[&cm("3000", "5000")])],
                [42, 55],
            ),
            (
                "resources requested equal node capacity",
                default_resources(),
                pod(&[&cm("2000", "4000"), &cm("3000", "5000")]),
                vec![n(NODE1, "5000", "10000"), n(NODE2, "10000", "9000")],
                vec![],
                [95, 75],
            ),
            (
                "nothing scheduled, resources requested, differently sized nodes (weights 2 and 1)",
                res(&[("memory", 2), ("cpu", 1)]),
                split_pod(),
                vec![n(NODE1, "4000", "10000"), n(NODE2, "6000", "10000")],
                vec![],
                [58, 50],
            ),
            (
                "no resources requested, pods scheduled, nonzero request for resource",
                default_resources(),
                requestless(""),
                vec![n(NODE1, "250m", "1000Mi"), n(NODE2, "250m", "1000Mi")],
                vec![requestless(NODE1), requestless(NODE1)],
                [80, 30],
            ),
            (
                "bypass extended resource if the pod does not request",
                extended_resource_set(),
                split_pod(),
                vec![
                    n(NODE1, "6000", "10000"),
                    node(NODE2, &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")]),
                ],
                vec![],
                [50, 50],
            ),
            (
                "honor extended resource if the pod request",
                extended_resource_set(),
                pod(&[&[("cpu", "3000"), ("memory", "5000"), (EXTENDED, "2")]]),
                vec![
                    node(NODE1, &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")]),
                    node(NODE2, &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "10")]),
                ],
                vec![],
                [50, 40],
            ),
            (
                "if the node doesn't have a resource",
                res(&[(EXTENDED, 2), ("cpu", 1), ("memory", 1)]),
                pod(&[&cm("3000", "4000")]),
                vec![
                    n(NODE1, "6000", "10000"),
                    node(NODE2, &[("cpu", "6000"), ("memory", "10000"), (EXTENDED, "4")]),
                ],
                vec![],
                [45, 45],
            ),
        ],
    );
}

#[test]
fn requested_to_capacity_ratio_scoring_strategy() {
    let n = |name, cpu, mem| node(name, &[("cpu", cpu), ("memory", mem)]);
    let shape = [(0, 10), (100, 0)];
    let cases: Vec<Case> = vec![
        (
            "nothing scheduled, nothing requested (default - least requested nodes have priority)",
            default_resources(),
            pod(&[]),
            vec![n(NODE1, "4000", "10000"), n(NODE2, "4000", "10000")],
            vec![pod_on(NODE1, &[]), pod_on(NODE1, &[])],
            [100, 100],
        ),
        (
            "nothing scheduled, resources requested, differently sized nodes (default - least requested nodes have priority)",
            default_resources(),
            split_pod(),
            vec![n(NODE1, "4000", "10000"), n(NODE2, "6000", "10000")],
            vec![pod_on(NODE1, &[]), pod_on(NODE1, &[])],
            [38, 50],
        ),
        (
            "no resources requested, pods scheduled with resources (default - least requested nodes have priority)",
            default_resources(),
            pod(&[]),
            vec![n(NODE1, "4000", "10000"), n(NODE2, "6000", "10000")],
            vec![pod_on(NODE1, &[&cm("3000", "5000")]), pod_on(NODE2, &[&cm("3000", "5000")])],
            [38, 50],
        ),
    ];
    for (name, resources, pod, nodes, existing, want) in cases {
        let f = fit(ScoringStrategyType::RequestedToCapacityRatio, resources, &shape);
        let nodes = snapshot(nodes, existing);
        assert_eq!(scores(&f, &pod, &nodes, true), want, "{name}");
    }
}

fn bin_packing(resources: Vec<ResourceSpec>, cases: Vec<BinCase>) {
    for (name, pod, nodes, existing, want) in cases {
        let f = fit(
            ScoringStrategyType::RequestedToCapacityRatio,
            resources.clone(),
            &[(0, 0), (100, 1)],
        );
        let nodes = snapshot(nodes, existing);
        assert_eq!(scores(&f, &pod, &nodes, true), want, "{name}");
    }
}

#[test]
fn resource_bin_packing_single_extended() {
    const MI: i64 = 1024 * 1024;
    let nodes = || {
        vec![
            make_node(NODE1, 4000, 10000 * MI, &[("intel.com/foo", 8)]),
            make_node(NODE2, 4000, 10000 * MI, &[("intel.com/foo", 4)]),
        ]
    };
    let foo = |n| pod(&[&[("intel.com/foo", n)]]);
    bin_packing(
        res(&[("intel.com/foo", 1)]),
        vec![
            ("nothing scheduled, nothing requested", pod(&[]), nodes(), vec![], [0, 0]),
            (
                "resources requested, pods scheduled with less resources",
                foo("2"),
                nodes(),
                vec![pod(&[])],
                [2, 5],
            ),
            (
                "resources requested, pods scheduled with resources, on node with existing pod running",
                foo("2"),
                nodes(),
                vec![pod_on(NODE2, &[&[("intel.com/foo", "2")]])],
                [2, 10],
            ),
            (
                "resources requested, pods scheduled with more resources",
                foo("4"),
                nodes(),
                vec![pod(&[])],
                [5, 10],
            ),
        ],
    );
}

#[test]
fn resource_bin_packing_multiple_extended() {
    const MI: i64 = 1024 * 1024;
    let nodes = || {
        vec![
            make_node(NODE1, 4000, 10000 * MI, &[("intel.com/foo", 8), ("intel.com/bar", 4)]),
            make_node(NODE2, 4000, 10000 * MI, &[("intel.com/foo", 4), ("intel.com/bar", 8)]),
        ]
    };
    let pod1: [(&str, &str); 2] = [("intel.com/foo", "2"), ("intel.com/bar", "2")];
    let pod2: [(&str, &str); 2] = [("intel.com/foo", "4"), ("intel.com/bar", "2")];
    bin_packing(
        res(&[("intel.com/foo", 3), ("intel.com/bar", 5)]),
        vec![
            ("nothing scheduled, nothing requested", pod(&[]), nodes(), vec![], [0, 0]),
            (
                "resources requested, pods scheduled with less resources",
                pod(&[&pod1]),
                nodes(),
                vec![pod(&[])],
                [4, 3],
            ),
            (
                "resources requested, pods scheduled with resources, on node with existing pod running",
                pod(&[&pod1]),
                nodes(),
                vec![pod_on(NODE2, &[&pod2])],
                [4, 7],
            ),
            (
                "resources requested, pods scheduled with more resources",
                pod(&[&pod2]),
                nodes(),
                vec![pod(&[])],
                [5, 5],
            ),
        ],
    );
}

#[test]
fn fit_score() {
    let n = |name, cpu| node(name, &[("cpu", cpu), ("memory", "10000")]);
    let existing =
        || vec![pod_on(NODE1, &[&cm("2000", "4000")]), pod_on(NODE2, &[&cm("1000", "2000")])];
    let rtcr = |shape: &[(i32, i32)]| {
        fit(ScoringStrategyType::RequestedToCapacityRatio, default_resources(), shape)
    };
    let least = || fit(ScoringStrategyType::LeastAllocated, default_resources(), &[]);
    let most = || fit(ScoringStrategyType::MostAllocated, default_resources(), &[]);
    let small = || pod(&[&cm("1000", "2000")]);
    let large = || pod(&[&cm("3000", "5000")]);
    let sidecar_existing = || {
        vec![
            pod_with(NODE1, &[&cm("1000", "2000")], &[&cm("1000", "2000")]),
            pod_on(NODE2, &[&cm("1000", "2000")]),
        ]
    };
    let cases: Vec<FitCase> = vec![
        (
            "RequestedToCapacityRatio case1",
            rtcr(&[(0, 10), (100, 0)]),
            large(),
            vec![n(NODE1, "4000"), n(NODE2, "6000")],
            existing(),
            true,
            [10, 32],
        ),
        (
            "RequestedToCapacityRatio case2",
            rtcr(&[(0, 0), (100, 10)]),
            large(),
            vec![n(NODE1, "4000"), n(NODE2, "6000")],
            existing(),
            true,
            [95, 68],
        ),
        (
            "MostAllocated",
            most(),
            small(),
            vec![n(NODE1, "4000"), n(NODE2, "6000")],
            existing(),
            true,
            [67, 36],
        ),
        (
            "LeastAllocated",
            least(),
            small(),
            vec![n(NODE1, "4000"), n(NODE2, "6000")],
            existing(),
            true,
            [32, 63],
        ),
        (
            "RequestedToCapacityRatio case1 if PreScore is not called",
            rtcr(&[(0, 10), (100, 0)]),
            large(),
            vec![n(NODE1, "4000"), n(NODE2, "6000")],
            existing(),
            false,
            [10, 32],
        ),
        (
            "MostAllocated if PreScore is not called",
            most(),
            small(),
            vec![n(NODE1, "4000"), n(NODE2, "6000")],
            existing(),
            false,
            [67, 36],
        ),
        (
            "LeastAllocated if PreScore is not called",
            least(),
            small(),
            vec![n(NODE1, "4000"), n(NODE2, "6000")],
            existing(),
            false,
            [32, 63],
        ),
        (
            "MostAllocated with sidecar container",
            most(),
            small(),
            vec![n(NODE1, "4000"), n(NODE2, "4000")],
            sidecar_existing(),
            true,
            [67, 45],
        ),
        (
            "LeastAllocated with sidecar container",
            least(),
            small(),
            vec![n(NODE1, "4000"), n(NODE2, "4000")],
            sidecar_existing(),
            true,
            [32, 55],
        ),
    ];
    for (name, f, pod, nodes, existing, pre_score, want) in cases {
        let nodes = snapshot(nodes, existing);
        assert_eq!(scores(&f, &pod, &nodes, pre_score), want, "{name}");
    }
}

#[test]
fn resource_allocation_scorer_calculate_requests() {
    const MI: i64 = 1 << 20;
    const CPU: i64 = convoy_api::resource::DEFAULT_MILLI_CPU_REQUEST;
    const MEM: i64 = convoy_api::resource::DEFAULT_MEMORY_REQUEST;
    let scorer = ResourceAllocationScorer::new(&default_resources(), false);
    let spec = |v: Value| -> Arc<PodInfo> {
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": v})).unwrap();
        Arc::new(PodInfo::new(Arc::new(pod)).unwrap())
    };
    let c = |cpu: &str, mem: &str| {
        let mut r = Map::new();
        if !cpu.is_empty() {
            r.insert("cpu".into(), json!(cpu));
        }
        if !mem.is_empty() {
            r.insert("memory".into(), json!(mem));
        }
        json!({"name": "c", "resources": {"requests": r}})
    };
    let none = json!({"name": "c"});
    let overhead = json!({"cpu": "1", "memory": "1Mi"});
    let cases = [
        ("overhead only", json!({"containers": [], "overhead": overhead}), [1000, MI]),
        ("1x requestless container", json!({"containers": [none]}), [CPU, MEM]),
        ("2x requestless container", json!({"containers": [none, none]}), [2 * CPU, 2 * MEM]),
        (
            "request container + requestless container",
            json!({"containers": [c("1", "1Mi"), none]}),
            [1000 + CPU, MI + MEM],
        ),
        (
            "container + requestless container + overhead",
            json!({"overhead": overhead, "containers": [c("1", "1Mi"), none]}),
            [2000 + CPU, 2 * MI + MEM],
        ),
        (
            "init container + container + requestless container + overhead",
            json!({"overhead": overhead, "initContainers": [c("3", "")], "containers": [c("1", "1Mi"), none]}),
            [4000, 2 * MI + MEM],
        ),
        (
            "requestless init container + small init container + small container",
            json!({"initContainers": [none, c("1m", "1")], "containers": [c("3m", "3")]}),
            [CPU, MEM],
        ),
        (
            "requestless init container + small init container + small container + requestless container",
            json!({"initContainers": [none, c("1m", "1")], "containers": [c("3m", "3"), none]}),
            [3 + CPU, 3 + MEM],
        ),
    ];
    for (name, v, want) in cases {
        assert_eq!(scorer.pod_requests(&spec(v)).as_slice(), want, "{name}");
    }
}

/// Measured against kube-scheduler v1.37.2 (no upstream table covers it):
/// NodeResourcesFit's scorer ignores pod-level requests, BalancedAllocation's
/// counts them. An empty 8-CPU/32Gi node, a pod of 450m/2688Mi and
/// 300m/2688Mi containers with pod-level 3300m/12416Mi: upstream scored
/// NodeResourcesFit 86 ((90 + 83) / 2, the containers) and
/// NodeResourcesBalancedAllocation 74 (the pod level).
#[test]
fn pod_level_requests_count_for_balance_not_for_fit() {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "c0", "resources": {"requests": {"cpu": "450m", "memory": "2688Mi"}}},
                {"name": "c1", "resources": {"requests": {"cpu": "300m", "memory": "2688Mi"}}}
            ],
            "resources": {"requests": {"cpu": "3300m", "memory": "12416Mi"}}
        }
    }))
    .unwrap();
    let pod = PodInfo::new(Arc::new(pod)).unwrap();
    let nodes = snapshot(vec![node(NODE1, &[("cpu", "8"), ("memory", "32Gi")])], vec![]);
    let least = fit(ScoringStrategyType::LeastAllocated, default_resources(), &[]);
    assert_eq!(scores(&least, &pod, &nodes, true), [86]);
    let ba = crate::node_resources::BalancedAllocation::new(None).unwrap();
    let mut state = CycleState::new();
    assert!(ba.pre_score_on(&mut state, &pod, &nodes).is_success());
    assert_eq!(ba.score(&state, &pod, &nodes[0]).unwrap(), 74);
}
