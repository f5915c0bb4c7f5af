use serde_json::json;

use convoy_api::testing::{NodeBuilder, PodBuilder};

use super::*;
use crate::helper::testing::PreScoreOn;
use crate::helper::testing::handle;

const GPU: &str = "nvidia.com/gpu";

/// A node with `cap` GPUs of which `used` are taken by a pod of another
/// scheduler, and labels.
fn gpu_node(name: &str, cap: u32, used: u32, labels: &[(&str, &str)]) -> NodeInfo {
    let mut b = NodeBuilder::new(name).cpu("64").allocatable(GPU, &cap.to_string());
    for (k, v) in labels {
        b = b.label(k, v);
    }
    let mut n = b.info();
    if used > 0 {
        n.add_pod(
            PodBuilder::new(&format!("{name}-other"))
                .scheduler("default-scheduler")
                .node(name)
                .resource(GPU, &used.to_string())
                .info(),
        );
    }
    n
}

fn cpu_node(name: &str) -> NodeInfo {
    NodeBuilder::new(name).cpu("64").info()
}

fn gpu_pod(name: &str, gpus: u32) -> PodBuilder {
    PodBuilder::new(name).cpu("1").resource(GPU, &gpus.to_string())
}

fn plugin(args: serde_json::Value) -> GpuPlacement {
    GpuPlacement::new(Some(&PluginArgs::Other(args))).unwrap()
}

/// Runs a cycle (PreFilter over all nodes, PreScore and Score over those
/// with room for the pod's GPUs, NormalizeScore); the normalized scores by
/// node name, `None` when PreScore skipped.
fn scores(p: &GpuPlacement, pod: &PodInfo, nodes: &[NodeInfo]) -> Option<Vec<(String, i64)>> {
    let all: Vec<Arc<NodeInfo>> = nodes.iter().cloned().map(Arc::new).collect();
    let want = pod.requests.requests.get(GPU);
    let feasible: Vec<Arc<NodeInfo>> =
        all.iter().filter(|n| want == 0 || n.free(GPU) >= want).cloned().collect();
    let mut state = CycleState::new();
    let (result, s) = p.pre_filter(&mut state, pod, &convoy_api::NodeList::new(all.to_vec()));
    assert!(s.is_success() && result.is_none());
    let s = p.pre_score_on(&mut state, pod, &feasible);
    if s.is_skip() {
        return None;
    }
    assert!(s.is_success(), "{s:?}");
    let mut raw: Vec<i64> = feasible.iter().map(|n| p.score(&state, pod, n).unwrap()).collect();
    assert!(raw.iter().all(|s| (0..=BASIS).contains(s)), "{raw:?}");
    assert!(p.normalize_score(&state, pod, &mut raw).is_success());
    Some(feasible.iter().map(|n| n.name().to_string()).zip(raw).collect())
}

fn best(p: &GpuPlacement, pod: &PodInfo, nodes: &[NodeInfo]) -> String {
    let s = scores(p, pod, nodes).expect("scored");
    let max = s.iter().map(|(_, v)| *v).max().unwrap();
    let winners: Vec<_> = s.iter().filter(|(_, v)| *v == max).map(|(n, _)| n.clone()).collect();
    assert_eq!(winners.len(), 1, "a single best node: {s:?}");
    winners[0].clone()
}

#[test]
fn gpu_pods_go_where_the_remainder_stays_usable() {
    // (case, prior args, pod GPUs, nodes as (name, capacity, used), best)
    let default = json!({});
    let no_full_node_jobs =
        json!({"requestSizePrior": [{"gpus": 1, "weight": 1}, {"gpus": 2, "weight": 1}]});
    type Case<'a> = (&'a str, &'a serde_json::Value, u32, Vec<(&'a str, u32, u32)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "exact fit beats partial fit",
            &default,
            2,
            vec![("free4", 8, 4), ("free2", 8, 6)],
            "free2",
        ),
        (
            "1 GPU: 1 free beats 3 free",
            &default,
            1,
            vec![("free3", 8, 5), ("free1", 8, 7)],
            "free1",
        ),
        (
            "a fully free node is kept for a full-node job",
            &default,
            1,
            vec![("empty", 8, 0), ("half", 8, 4)],
            "half",
        ),
        (
            "kept free even when the distribution has no full-node jobs",
            &no_full_node_jobs,
            2,
            vec![("empty", 8, 0), ("free3", 8, 5)],
            "free3",
        ),
        (
            "a full-node job takes the free node (exact fit)",
            &default,
            8,
            vec![("empty", 8, 0), ("empty16", 16, 0)],
            "empty",
        ),
        (
            "a small pod takes the small node, keeping the big one whole",
            &default,
            4,
            vec![("big", 8, 0), ("small", 4, 0)],
            "small",
        ),
        (
            "leaves 4 rather than 3 free (a 4-GPU job still fits)",
            &default,
            1,
            vec![("free4", 8, 4), ("free5", 8, 3)],
            "free5",
        ),
    ];
    for (case, args, gpus, nodes, want) in cases {
        let p = plugin(args.clone());
        let nodes: Vec<NodeInfo> = nodes.iter().map(|(n, c, u)| gpu_node(n, *c, *u, &[])).collect();
        assert_eq!(best(&p, &gpu_pod("p", gpus).info(), &nodes), want, "{case}");
    }
}

#[test]
fn cpu_only_pods_avoid_gpu_nodes() {
    let nodes =
        [gpu_node("gpu-empty", 8, 0, &[]), gpu_node("gpu-half", 8, 4, &[]), cpu_node("cpu")];
    let pod = PodBuilder::new("web").cpu("1").info();
    let cases = [
        (json!({}), [("gpu-empty", 0), ("gpu-half", 50), ("cpu", 100)]),
        (json!({"cpuOnlyPods": "Neutral"}), [("gpu-empty", 0), ("gpu-half", 100), ("cpu", 100)]),
    ];
    for (args, want) in cases {
        let got = scores(&plugin(args.clone()), &pod, &nodes).unwrap();
        let want: Vec<(String, i64)> = want.iter().map(|(n, s)| (n.to_string(), *s)).collect();
        assert_eq!(got, want, "{args}");
    }
    // Only fully free GPU nodes fit: a penalty, not a filter.
    let only_gpu = [gpu_node("a", 8, 0, &[]), gpu_node("b", 8, 0, &[])];
    assert_eq!(
        scores(&plugin(json!({})), &pod, &only_gpu).unwrap(),
        [("a".into(), 0), ("b".into(), 0)]
    );
    // No GPU node at all: nothing to say.
    assert_eq!(scores(&plugin(json!({})), &pod, &[cpu_node("x"), cpu_node("y")]), None);
}

fn member(name: &str, gpus: u32) -> PodBuilder {
    gpu_pod(name, gpus).label(convoy_api::pod_group::POD_GROUP_LABEL, "job")
}

#[test]
fn group_members_stay_close_to_their_siblings() {
    let clique = "nvidia.com/gpu.clique";
    let zone = "topology.kubernetes.io/zone";
    let with_sibling = |name: &str, gpus: u32, labels: &[(&str, &str)]| {
        let mut n = gpu_node(name, 8, 0, labels);
        n.add_pod(member(&format!("{name}-sibling"), gpus).node(name).info());
        n
    };
    let p = plugin(json!({}));
    let pod = member("w", 4).info();

    // All exact fits: the sibling's node, then its clique, then its zone.
    let nodes = [
        gpu_node("other-zone", 8, 4, &[(clique, "c"), (zone, "z2")]),
        gpu_node("same-zone", 8, 4, &[(clique, "b"), (zone, "z1")]),
        gpu_node("same-clique", 8, 4, &[(clique, "a"), (zone, "z1")]),
        with_sibling("sibling", 4, &[(clique, "a"), (zone, "z1")]),
    ];
    let got = scores(&p, &pod, &nodes).unwrap();
    let rank: Vec<i64> = got.iter().map(|(_, s)| *s).collect();
    assert!(rank.windows(2).all(|w| w[0] < w[1]), "{got:?}");

    // The sibling filled its node (not feasible): its clique still attracts.
    let nodes = [
        with_sibling("full", 8, &[(clique, "a")]),
        gpu_node("b-free", 8, 0, &[(clique, "b")]),
        gpu_node("a-free", 8, 0, &[(clique, "a")]),
    ];
    assert_eq!(best(&p, &member("w", 8).info(), &nodes), "a-free");

    // A pod of another group, or of none, is not attracted.
    let loner = gpu_pod("loner", 8).info();
    let s = scores(&p, &loner, &nodes).unwrap();
    assert_eq!(s[0].1, s[1].1, "{s:?}");
}

#[test]
fn domain_of_reads_the_label() {
    let n = gpu_node("n", 8, 0, &[("rack", "r1"), ("empty", "")]);
    assert_eq!(domain_of(&n, "rack"), Some("r1"));
    assert_eq!(domain_of(&n, "empty"), None);
    assert_eq!(domain_of(&n, "zone"), None);
}

#[test]
fn learned_distribution_shifts_the_choice() {
    // Prior: only 1-GPU pods, worth one pod. Then many 2-GPU pods arrive.
    let p = plugin(json!({"requestSizePrior": [{"gpus": 1, "weight": 1}], "priorWeight": 1}));
    let nodes = [gpu_node("free3", 8, 5, &[]), gpu_node("free2", 8, 6, &[])];
    // With only 1-GPU jobs, any remainder is usable: best fit decides.
    assert_eq!(best(&p, &gpu_pod("first", 1).info(), &nodes), "free2");
    for i in 0..40 {
        scores(&p, &gpu_pod(&format!("two-{i}"), 2).info(), &nodes).unwrap();
    }
    let d = p.distribution();
    assert!(d.gpu_sizes().iter().any(|&(s, w)| s == 2 && w > 0.9), "{d:?}");
    // Now a 1-GPU pod leaves 2 free (usable by a 2-GPU job), not 1.
    assert_eq!(best(&p, &gpu_pod("later", 1).info(), &nodes), "free3");

    // A retried pod is counted once; learning can be turned off.
    let off =
        plugin(json!({"requestSizePrior": [{"gpus": 1, "weight": 1}], "learnRequestSizes": false}));
    for _ in 0..5 {
        scores(&off, &gpu_pod("same", 2).info(), &nodes).unwrap();
    }
    assert_eq!(off.distribution().gpu_sizes(), vec![(1, 1.0)]);
}

#[test]
fn gpu_view_counts_pods_of_every_scheduler() {
    // The node's requested sum includes the other scheduler's 6 GPUs.
    let theirs = gpu_node("theirs", 8, 6, &[]);
    assert_eq!(theirs.free(GPU), 2);
    assert_eq!(theirs.pods[0].scheduler_name(), "default-scheduler");
    let nodes = [gpu_node("empty", 8, 0, &[]), theirs];
    assert_eq!(best(&plugin(json!({})), &gpu_pod("p", 2).info(), &nodes), "theirs");
}

#[test]
fn gpu_memory_prefers_the_tightest_sufficient_gpu() {
    let mem = memory::GPU_MEMORY_LABEL;
    let nodes = [
        gpu_node("a100-80", 8, 4, &[(mem, "81920")]),
        gpu_node("l4", 8, 4, &[(mem, "24576")]),
        gpu_node("a100-40", 8, 4, &[(mem, "40960")]),
        gpu_node("unlabelled", 8, 4, &[]),
    ];
    let pod = |min: &str| {
        let mut p = gpu_pod("p", 2).build();
        p.metadata.annotations =
            Some([(memory::GPU_MEMORY_MIN_ANNOTATION.to_string(), min.to_string())].into());
        Arc::new(PodInfo::new(Arc::new(p)).unwrap())
    };
    let p = plugin(json!({"gpuMemoryWeight": 1}));
    for min in ["40000", "39Gi"] {
        let got = scores(&p, &pod(min), &nodes).unwrap();
        let by = |n: &str| got.iter().find(|(m, _)| m == n).unwrap().1;
        assert_eq!(by("a100-40"), 100, "{min}: {got:?}");
        assert!(by("a100-80") > by("l4"), "{min}: {got:?}");
        assert_eq!(by("l4"), by("unlabelled"), "{min}: {got:?}");
    }
    // Off by default: the annotation changes nothing.
    assert!(
        scores(&plugin(json!({})), &pod("40000"), &nodes).unwrap().iter().all(|(_, s)| *s == 0)
    );
}

#[test]
fn args_decode_with_defaults_and_every_field() {
    assert_eq!(
        ResolvedGpuPlacementArgs::from_plugin_args(None).unwrap(),
        ResolvedGpuPlacementArgs::default()
    );
    assert_eq!(
        ResolvedGpuPlacementArgs::from_json(&serde_json::Value::Null).unwrap(),
        ResolvedGpuPlacementArgs::default()
    );
    let args = ResolvedGpuPlacementArgs::from_json(&json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "GpuPlacementArgs",
        "resourceNames": ["nvidia.com/gpu", "amd.com/gpu"],
        "requestSizePrior": [
            {"gpus": 1, "weight": 3},
            {"gpus": 8, "weight": 1},
            {"gpus": 1, "cpu": "12", "memory": "16Gi", "weight": 2}
        ],
        "priorWeight": 20,
        "learnRequestSizes": false,
        "halfLifePods": 50,
        "topologyKeys": ["rack"],
        "cpuOnlyPods": "Neutral",
        "fragmentationWeight": 3,
        "topologyWeight": 0,
        "gpuMemoryWeight": 1
    }))
    .unwrap();
    assert_eq!(args.resource_names, ["nvidia.com/gpu", "amd.com/gpu"]);
    assert_eq!(args.request_size_prior[1], SizeWeight::gpus(8, 1.0));
    assert_eq!(
        args.request_size_prior[2],
        SizeWeight { gpus: 1, milli_cpu: 12_000, memory: 16 << 30, weight: 2.0 }
    );
    assert_eq!(
        (args.prior_weight, args.learn_request_sizes, args.half_life_pods),
        (20.0, false, 50)
    );
    assert_eq!(args.topology_keys, ["rack"]);
    assert_eq!(args.cpu_only_pods, CpuOnlyPods::Neutral);
    assert_eq!(
        (args.fragmentation_weight, args.topology_weight, args.gpu_memory_weight),
        (3, 0, 1)
    );
}

#[test]
fn args_errors_name_the_field() {
    // Decoding (the loader's serde decoder: convoy-config's tests check the
    // positions) and what the plugin resolves, both naming the field.
    let cases = [
        (
            json!({"resourceNames": [""]}),
            "GpuPlacementArgs.resourceNames: entry 0 must not be empty",
        ),
        (
            json!({"resourceNames": ["nvidia.com/gpu", "cpu"]}),
            "GpuPlacementArgs.resourceNames[1]: \"cpu\" is not an extended resource name",
        ),
        (
            json!({"resourceNames": "nvidia.com/gpu"}),
            "GpuPlacementArgs.resourceNames: invalid type: string \"nvidia.com/gpu\", expected a sequence",
        ),
        (
            json!({"resourceNames": []}),
            "GpuPlacementArgs.resourceNames: must name at least one resource",
        ),
        (
            json!({"resourceNames": ["a.io/g", "a.io/g"]}),
            "GpuPlacementArgs.resourceNames: entry 1: duplicate \"a.io/g\"",
        ),
        (
            json!({"resourceName": ["nvidia.com/gpu"]}),
            "GpuPlacementArgs.resourceName: unknown field `resourceName`, expected one of `apiVersion`",
        ),
        (
            json!({"requestSizePrior": [{"gpus": 1, "weight": 1}, {"gpus": 0, "weight": 1}]}),
            "GpuPlacementArgs.requestSizePrior[1].gpus: 0 is out of range 1..=1024",
        ),
        (
            json!({"requestSizePrior": [{"gpus": 2}]}),
            "GpuPlacementArgs.requestSizePrior[0]: missing field `weight`",
        ),
        (
            json!({"requestSizePrior": [{"gpus": 2, "weight": -1}]}),
            "GpuPlacementArgs.requestSizePrior[0].weight: must be positive",
        ),
        (
            json!({"requestSizePrior": [{"gpus": 2, "weight": 1, "size": 3}]}),
            "GpuPlacementArgs.requestSizePrior[0].size: unknown field `size`, expected one of `gpus`, `cpu`, `memory`, `weight`",
        ),
        (
            json!({"requestSizePrior": [{"gpus": 1, "cpu": "lots", "weight": 1}]}),
            "GpuPlacementArgs.requestSizePrior[0].cpu: invalid quantity \"lots\"",
        ),
        (
            json!({"requestSizePrior": [{"gpus": 1, "memory": true, "weight": 1}]}),
            "GpuPlacementArgs.requestSizePrior[0].memory: ",
        ),
        (
            json!({"requestSizePrior": [
                {"gpus": 1, "cpu": "8", "weight": 1},
                {"gpus": 1, "cpu": "8000m", "weight": 2}
            ]}),
            "GpuPlacementArgs.requestSizePrior[1]: duplicate entry",
        ),
        (
            json!({"requestSizePrior": []}),
            "GpuPlacementArgs.requestSizePrior: must have at least one entry",
        ),
        (json!({"priorWeight": -1}), "GpuPlacementArgs.priorWeight: must not be negative"),
        (
            json!({"halfLifePods": 0}),
            "GpuPlacementArgs.halfLifePods: 0 is out of range 1..=1000000",
        ),
        (
            json!({"learnRequestSizes": "yes"}),
            "GpuPlacementArgs.learnRequestSizes: invalid type: string \"yes\", expected a boolean",
        ),
        (
            json!({"topologyKeys": ["rack", ""]}),
            "GpuPlacementArgs.topologyKeys: entry 1 must not be empty",
        ),
        (
            json!({"cpuOnlyPods": "Avoid"}),
            "GpuPlacementArgs.cpuOnlyPods: unknown variant `Avoid`, expected `PreferNonGpuNodes` or `Neutral`",
        ),
        (
            json!({"topologyWeight": 101}),
            "GpuPlacementArgs.topologyWeight: 101 is out of range 0..=100",
        ),
        (
            json!({"gpuMemoryWeight": 1.5}),
            "GpuPlacementArgs.gpuMemoryWeight: invalid type: floating point `1.5`, expected i64",
        ),
        (
            json!({"fragmentationWeight": 0, "topologyWeight": 0}),
            "GpuPlacementArgs.fragmentationWeight: fragmentationWeight, topologyWeight and gpuMemoryWeight are all 0",
        ),
        (
            json!({"kind": "NodeResourcesFitArgs"}),
            "GpuPlacementArgs.kind: kind must be \"GpuPlacementArgs\"",
        ),
        // serde reads a struct from a list too, by position: refused all the same.
        (json!(["nvidia.com/gpu"]), "GpuPlacementArgs[0]: apiVersion must be"),
        (json!("nvidia.com/gpu"), "GpuPlacementArgs: invalid type: string"),
    ];
    let mut failures = Vec::new();
    for (args, want) in cases {
        match ResolvedGpuPlacementArgs::from_json(&args) {
            Err(err) if err.starts_with(want) => {}
            other => failures.push(format!("{args}: {other:?}\n  want: {want}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // What the plugin resolves is reported in full, joined, through the
    // registry's factory.
    let factory = crate::registry();
    let factory = factory.get(names::GPU_PLACEMENT).unwrap();
    let bad = PluginArgs::Other(json!({
        "resourceNames": ["cpu", "memory"],
        "requestSizePrior": [{"gpus": 1, "cpu": "x", "weight": 1}]
    }));
    let err = factory(Some(&bad), &handle()).err().unwrap();
    assert!(err.contains("GpuPlacementArgs.resourceNames[0]: \"cpu\" is not"), "{err}");
    assert!(err.contains("; GpuPlacementArgs.resourceNames[1]: \"memory\" is not"), "{err}");
    assert!(err.contains("; GpuPlacementArgs.requestSizePrior[0].cpu: "), "{err}");
    let typed = PluginArgs::default_for(names::NODE_RESOURCES_FIT).unwrap();
    assert!(
        factory(Some(&typed), &handle())
            .err()
            .unwrap()
            .starts_with("want args to be of type GpuPlacementArgs")
    );
    // The loader's typed args, defaults included.
    let loaded = PluginArgs::default_for(names::GPU_PLACEMENT).unwrap();
    assert!(factory(Some(&loaded), &handle()).is_ok());
}

#[test]
fn score_without_pre_score_is_an_error() {
    let p = plugin(json!({}));
    let pod = gpu_pod("p", 1).info();
    let s = p.score(&CycleState::new(), &pod, &gpu_node("n", 8, 0, &[])).unwrap_err();
    assert_eq!(s.code(), convoy_api::Code::Error);
}

/// A node of 8 GPUs and 96 CPUs where another scheduler's pod takes
/// `gpus_used` GPUs and `cpu_used` CPUs.
fn loaded_node(name: &str, gpus_used: &str, cpu_used: &str) -> NodeInfo {
    let mut n = NodeBuilder::new(name).cpu("96").allocatable(GPU, "8").info();
    n.add_pod(
        PodBuilder::new(&format!("{name}-other"))
            .scheduler("default-scheduler")
            .node(name)
            .cpu(cpu_used)
            .resource(GPU, gpus_used)
            .info(),
    );
    n
}

#[test]
fn cpu_left_beside_free_gpus_counts() {
    // Two nodes with 2 free GPUs each; on "cpu-poor" only 12 CPUs are
    // left beside them, on "cpu-rich" 60. The cluster's pods ask for 1 GPU
    // and 12 CPUs: on cpu-poor the pod would leave a GPU no CPU to run
    // with; on cpu-rich both remainders stay usable.
    let nodes = [loaded_node("cpu-poor", "6", "84"), loaded_node("cpu-rich", "6", "36")];
    let prior = json!({"requestSizePrior": [{"gpus": 1, "cpu": "12", "weight": 1}]});
    let pod = PodBuilder::new("p").cpu("12").resource(GPU, "1").info();
    assert_eq!(best(&plugin(prior), &pod, &nodes), "cpu-rich");
    // Learned, not configured: the same once the plugin has seen such pods.
    let p = plugin(json!({"requestSizePrior": [{"gpus": 1, "weight": 1}], "priorWeight": 1}));
    for i in 0..20 {
        let seen = PodBuilder::new(&format!("seen-{i}")).cpu("12").resource(GPU, "1").info();
        scores(&p, &seen, &nodes).unwrap();
    }
    assert_eq!(best(&p, &pod, &nodes), "cpu-rich");
    // GPU alone cannot tell the two apart.
    let gpu_only =
        plugin(json!({"requestSizePrior": [{"gpus": 1, "weight": 1}], "learnRequestSizes": false}));
    let s = scores(&gpu_only, &pod, &nodes).unwrap();
    assert_eq!(s[0].1, s[1].1, "{s:?}");
}

#[test]
fn cpu_only_pods_take_cpu_where_it_strands_no_gpu() {
    // "gpus-free": 2 GPUs free with 24 CPUs beside them; "gpus-taken": no
    // GPU free, 56 CPUs. The GPU pods ask for 1 GPU and 12 CPUs each: a
    // 16-CPU pod on gpus-free would leave its 2 GPUs with 8 CPUs.
    let nodes = [loaded_node("gpus-free", "6", "72"), loaded_node("gpus-taken", "8", "40")];
    let p = plugin(json!({"requestSizePrior": [{"gpus": 1, "cpu": "12", "weight": 1}]}));
    let pod = PodBuilder::new("batch").cpu("16").info();
    assert_eq!(best(&p, &pod, &nodes), "gpus-taken");
    // A small pod strands nothing on either: no preference.
    let small = PodBuilder::new("small").cpu("4").info();
    let s = scores(&p, &small, &nodes).unwrap();
    assert_eq!(s[0].1, s[1].1, "{s:?}");
}
