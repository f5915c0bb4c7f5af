use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_config::{
    RequestedToCapacityRatioParam, ResourceSpec, ScoringStrategy, UtilizationShapePoint,
};

use super::*;
use crate::helper::testing::PreScoreOn;
use crate::helper::testing::{infos, node_obj, pod_obj};

/// A node with cpu 10, memory 20 (bytes), 32 pods, and `gpus` GPUs, with
/// one existing pod of cpu 5 / memory 19 / 1 GPU (upstream's fixture shape).
fn node(gpus: &str) -> NodeInfo {
    let mut n = NodeBuilder::new("n")
        .cpu("10")
        .memory("20")
        .pods("32")
        .allocatable("nvidia.com/gpu", gpus)
        .allocatable("ephemeral-storage", "20")
        .info();
    n.add_pod(
        PodBuilder::new("existing")
            .cpu("5")
            .memory("19")
            .resource("nvidia.com/gpu", "1")
            .node("n")
            .info(),
    );
    n
}

fn run(fit: &Fit, pod: &PodInfo, node: &NodeInfo) -> Status {
    let mut state = CycleState::new();
    assert!(fit.pre_filter(&mut state, pod, &convoy_api::NodeList::default()).1.is_success());
    crate::helper::testing::filter_one(fit, &state, pod, node)
}

fn fit_with(ignored: &[&str], groups: &[&str]) -> Fit {
    Fit::from_args(&NodeResourcesFitArgs {
        ignored_resources: ignored.iter().map(|s| s.to_string()).collect(),
        ignored_resource_groups: groups.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn filter() {
    let fit = Fit::new(None).unwrap();
    let cases: Vec<(&str, PodBuilder, &str, Code, &[&str])> = vec![
        ("no requests", PodBuilder::new("p"), "2", Code::Success, &[]),
        ("fits", PodBuilder::new("p").cpu("5").memory("1"), "2", Code::Success, &[]),
        (
            "cpu short",
            PodBuilder::new("p").cpu("6").memory("1"),
            "2",
            Code::Unschedulable,
            &["Insufficient cpu"],
        ),
        (
            "memory short",
            PodBuilder::new("p").cpu("1").memory("2"),
            "2",
            Code::Unschedulable,
            &["Insufficient memory"],
        ),
        (
            "cpu and memory short, both reported",
            PodBuilder::new("p").cpu("6").memory("2"),
            "2",
            Code::Unschedulable,
            &["Insufficient cpu", "Insufficient memory"],
        ),
        (
            "more than the node has: unresolvable",
            PodBuilder::new("p").cpu("11"),
            "2",
            Code::UnschedulableAndUnresolvable,
            &["Insufficient cpu"],
        ),
        (
            "ephemeral storage short",
            PodBuilder::new("p").resource("ephemeral-storage", "21"),
            "2",
            Code::UnschedulableAndUnresolvable,
            &["Insufficient ephemeral-storage"],
        ),
        ("gpu fits", PodBuilder::new("p").resource("nvidia.com/gpu", "1"), "2", Code::Success, &[]),
        (
            "gpu short",
            PodBuilder::new("p").resource("nvidia.com/gpu", "2"),
            "2",
            Code::Unschedulable,
            &["Insufficient nvidia.com/gpu"],
        ),
        (
            "resource the node lacks",
            PodBuilder::new("p").resource("example.com/foo", "1"),
            "2",
            Code::UnschedulableAndUnresolvable,
            &["Insufficient example.com/foo"],
        ),
        (
            "hugepages are checked too",
            PodBuilder::new("p").resource("hugepages-2Mi", "1Mi"),
            "2",
            Code::UnschedulableAndUnresolvable,
            &["Insufficient hugepages-2Mi"],
        ),
    ];
    for (name, pod, gpus, code, reasons) in cases {
        let s = run(&fit, &pod.info(), &node(gpus));
        assert_eq!(s.code(), code, "{name}: {s}");
        assert_eq!(s.reasons(), reasons, "{name}");
    }
}

#[test]
fn too_many_pods() {
    let fit = Fit::new(None).unwrap();
    let mut n = NodeBuilder::new("n").pods("1").info();
    let pod = PodBuilder::new("p").info();
    assert!(run(&fit, &pod, &n).is_success());
    n.add_pod(PodBuilder::new("other").node("n").info());
    let s = run(&fit, &pod, &n);
    assert_eq!(s.code(), Code::Unschedulable);
    assert_eq!(s.reasons(), ["Too many pods"]);
    // Reported along with the resources.
    let s = run(&fit, &PodBuilder::new("p").cpu("5").info(), &n);
    assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
    assert_eq!(s.reasons(), ["Too many pods", "Insufficient cpu"]);
}

#[test]
fn ignored_resources_and_groups() {
    let pod = || {
        PodBuilder::new("p").resource("example.com/foo", "1").resource("nvidia.com/gpu", "5").info()
    };
    let cases: Vec<(&str, Fit, &[&str])> = vec![
        (
            "nothing ignored",
            fit_with(&[], &[]),
            &["Insufficient example.com/foo", "Insufficient nvidia.com/gpu"],
        ),
        ("resource ignored", fit_with(&["example.com/foo"], &[]), &["Insufficient nvidia.com/gpu"]),
        ("group ignored", fit_with(&[], &["nvidia.com"]), &["Insufficient example.com/foo"]),
        ("both", fit_with(&["example.com/foo"], &["nvidia.com"]), &[]),
        // Only extended resources can be ignored.
        (
            "native names are never ignored",
            fit_with(&["cpu"], &[]),
            &["Insufficient example.com/foo", "Insufficient nvidia.com/gpu"],
        ),
    ];
    for (name, fit, reasons) in cases {
        let s = run(&fit, &pod(), &node("2"));
        assert_eq!(s.reasons(), reasons, "{name}");
    }
    let s = run(&fit_with(&["cpu"], &[]), &PodBuilder::new("p").cpu("6").info(), &node("2"));
    assert_eq!(s.reasons(), ["Insufficient cpu"]);
}

fn strategy_fit(
    type_: ScoringStrategyType,
    resources: Vec<ResourceSpec>,
    shape: &[(i32, i32)],
) -> Fit {
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

fn cpu_mem() -> Vec<ResourceSpec> {
    vec![ResourceSpec::new("cpu", 1), ResourceSpec::new("memory", 1)]
}

fn scores(fit: &Fit, pod: &PodInfo, nodes: &[Arc<NodeInfo>]) -> Vec<i64> {
    let mut state = CycleState::new();
    assert!(fit.pre_score_on(&mut state, pod, nodes).is_success());
    nodes.iter().map(|n| fit.score(&state, pod, n).unwrap()).collect()
}

/// Upstream's scoring fixture: node1 cpu 4000m / mem 10000, node2 cpu 6000m
/// / mem 10000, each running a pod of 1000m / 2000 (as in upstream's
/// "resources requested, pods scheduled with resources" cases).
fn scoring_nodes() -> Vec<Arc<NodeInfo>> {
    let mk = |name: &str, cpu: &str| {
        let mut n = NodeBuilder::new(name).cpu(cpu).memory("10000").info();
        n.add_pod(
            PodBuilder::new(&format!("on-{name}")).cpu("1000m").memory("2000").node(name).info(),
        );
        n
    };
    infos(vec![mk("node1", "4000m"), mk("node2", "6000m")])
}

#[test]
fn score_strategies() {
    let pod = PodBuilder::new("p").cpu("1000m").memory("2000").info();
    let nodes = scoring_nodes();
    // node1: cpu 2000/4000, mem 4000/10000; node2: cpu 2000/6000, mem 4000/10000.
    let least = strategy_fit(ScoringStrategyType::LeastAllocated, cpu_mem(), &[]);
    assert_eq!(scores(&least, &pod, &nodes), vec![55, 63]); // (50+60)/2, (66+60)/2
    let most = strategy_fit(ScoringStrategyType::MostAllocated, cpu_mem(), &[]);
    assert_eq!(scores(&most, &pod, &nodes), vec![45, 36]); // (50+40)/2, (33+40)/2
    let weighted = strategy_fit(
        ScoringStrategyType::MostAllocated,
        vec![ResourceSpec::new("cpu", 3), ResourceSpec::new("memory", 1)],
        &[],
    );
    assert_eq!(scores(&weighted, &pod, &nodes), vec![47, 34]); // (150+40)/4, (99+40)/4
    let rtcr = strategy_fit(
        ScoringStrategyType::RequestedToCapacityRatio,
        cpu_mem(),
        &[(0, 0), (100, 10)],
    );
    assert_eq!(scores(&rtcr, &pod, &nodes), vec![45, 37]); // (50+40)/2, (33+40)/2 = 36.5 → 37
}

#[test]
fn score_uses_non_zero_requests_for_cpu_and_memory() {
    // A pod without requests counts 100m / 200Mi for scoring.
    let pod = PodBuilder::new("p").info();
    let nodes = infos(vec![NodeBuilder::new("n").cpu("1000m").memory("1000Mi").info()]);
    let least = strategy_fit(ScoringStrategyType::LeastAllocated, cpu_mem(), &[]);
    assert_eq!(scores(&least, &pod, &nodes), vec![85]); // (90 + 80) / 2
}

#[test]
fn score_skips_extended_resources_not_requested() {
    let resources = vec![
        ResourceSpec::new("cpu", 1),
        ResourceSpec::new("memory", 1),
        ResourceSpec::new("nvidia.com/gpu", 5),
    ];
    let most = strategy_fit(ScoringStrategyType::MostAllocated, resources, &[]);
    let nodes = infos(vec![
        NodeBuilder::new("n").cpu("1000m").memory("1000").allocatable("nvidia.com/gpu", "4").info(),
    ]);
    // Not requested: the GPU is not scored, its weight not counted.
    let pod = PodBuilder::new("p").cpu("500m").memory("500").info();
    assert_eq!(scores(&most, &pod, &nodes), vec![50]);
    // Requested: 3 of 4 GPUs → 75 with weight 5: (50 + 50 + 375) / 7 = 67.
    let pod = PodBuilder::new("p").cpu("500m").memory("500").resource("nvidia.com/gpu", "3").info();
    assert_eq!(scores(&most, &pod, &nodes), vec![67]);
}

#[test]
fn hints() {
    let fit = Fit::new(None).unwrap();
    let events = fit.events_to_register();
    let node_hint = events[1].hint.clone().unwrap();
    let pod_hint = events[0].hint.clone().unwrap();
    let pod = PodBuilder::new("p").cpu("2").resource("nvidia.com/gpu", "1").info();
    let small =
        || node_obj(NodeBuilder::new("n").cpu("1").allocatable("nvidia.com/gpu", "1").build());
    let big =
        || node_obj(NodeBuilder::new("n").cpu("4").allocatable("nvidia.com/gpu", "1").build());
    let big_more_mem = || {
        node_obj(
            NodeBuilder::new("n")
                .cpu("4")
                .memory("64Gi")
                .allocatable("nvidia.com/gpu", "1")
                .build(),
        )
    };
    let cases = [
        ("added, fits", None, big(), QueueingHint::Queue),
        ("added, too small", None, small(), QueueingHint::Skip),
        ("grew cpu", Some(small()), big(), QueueingHint::Queue),
        (
            "grew a resource the pod does not request",
            Some(big()),
            big_more_mem(),
            QueueingHint::Skip,
        ),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(node_hint(&pod, old.as_ref(), Some(&new)), want, "{name}");
    }

    let assigned = || PodBuilder::new("o").cpu("2").node("n");
    let cases = [
        ("assigned pod deleted", Some(pod_obj(assigned().build())), None, QueueingHint::Queue),
        (
            "unassigned pod deleted",
            Some(pod_obj(PodBuilder::new("o").build())),
            None,
            QueueingHint::Skip,
        ),
        (
            "assigned pod scaled down cpu",
            Some(pod_obj(assigned().build())),
            Some(pod_obj(PodBuilder::new("o").cpu("1").node("n").build())),
            QueueingHint::Queue,
        ),
        (
            "scaled down a resource the pod does not request",
            Some(pod_obj(assigned().memory("2Gi").build())),
            Some(pod_obj(assigned().memory("1Gi").build())),
            QueueingHint::Skip,
        ),
        (
            "the pod itself scaled down",
            Some(pod_obj(PodBuilder::new("p").cpu("2").build())),
            Some(pod_obj(PodBuilder::new("p").cpu("1").build())),
            QueueingHint::Queue,
        ),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(pod_hint(&pod, old.as_ref(), new.as_ref()), want, "{name}");
    }
}

#[test]
fn bad_args() {
    assert!(Fit::new(Some(&PluginArgs::Other(serde_json::Value::Null))).is_err());
    let mut args = NodeResourcesFitArgs::default();
    args.scoring_strategy.type_ = ScoringStrategyType::RequestedToCapacityRatio;
    assert!(Fit::from_args(&args).is_err(), "shape required");
}
