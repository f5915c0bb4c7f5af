//! GPU placement on the embedded cluster: the bundled `config/gpu-cluster.yaml`
//! profile (GpuPlacement, GPU packing) against the default profile.

use std::collections::BTreeMap;
use std::path::PathBuf;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::Objects;
use convoy_scheduler::simulate::{Report, check, simulate};
use k8s_openapi::api::core::v1::{Node, Pod};

const GPU: &str = "nvidia.com/gpu";
const GPU_PROFILE: &str = "convoy-gpu";
const DEFAULT_PROFILE: &str = "convoy-scheduler";

fn gpu_config_path() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/gpu-cluster.yaml"))
}

fn gpu_nodes(n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| {
            NodeBuilder::new(&format!("gpu-{i}"))
                .cpu("64")
                .memory("512Gi")
                .allocatable(GPU, "8")
                .build()
        })
        .collect()
}

/// Pods asking for `sizes` GPUs, scheduled in this order (decreasing
/// priority) by `profile`.
fn gpu_pods(sizes: &[u32], profile: &str) -> Vec<Pod> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, g)| {
            PodBuilder::new(&format!("p{i:02}-{g}gpu"))
                .scheduler(profile)
                .priority(1000 - i as i32)
                .cpu("4")
                .memory("16Gi")
                .resource(GPU, &g.to_string())
                .build()
        })
        .collect()
}

async fn run(config: Option<&std::path::Path>, nodes: Vec<Node>, pods: Vec<Pod>) -> Report {
    let config = convoy_scheduler::load_config(config).unwrap();
    simulate(config, Objects { nodes, pods, ..Default::default() }, false).await.unwrap()
}

/// Free GPUs per node after the run.
fn free_gpus(r: &Report, sizes: &[u32], nodes: usize) -> BTreeMap<String, u32> {
    let mut free: BTreeMap<String, u32> = (0..nodes).map(|i| (format!("gpu-{i}"), 8)).collect();
    for (p, g) in r.pods.iter().zip(sizes) {
        if let Some(n) = &p.node {
            *free.get_mut(n).unwrap() -= g;
        }
    }
    free
}

#[tokio::test]
async fn bundled_gpu_profile_passes_check_config() {
    let config = convoy_scheduler::load_config(Some(&gpu_config_path())).unwrap();
    let pipeline = check(&config).unwrap();
    assert!(pipeline.contains("GpuPlacement (weight 5)"), "{pipeline}");
}

/// 1/2/4-GPU pods, then full-node jobs. The default profile spreads the
/// small pods (LeastAllocated on cpu/memory) and strands GPUs on every
/// node; the GPU profile packs them so that the 8-GPU jobs still fit.
#[tokio::test]
async fn gpu_profile_fragments_less_than_the_default_profile() {
    let sizes = [1, 2, 1, 4, 2, 1, 1, 4, 8, 8];
    let (nodes, total) = (4, 32);
    let default = run(None, gpu_nodes(nodes), gpu_pods(&sizes, DEFAULT_PROFILE)).await;
    let gpu = run(Some(&gpu_config_path()), gpu_nodes(nodes), gpu_pods(&sizes, GPU_PROFILE)).await;

    let placed = |r: &Report| -> u32 {
        r.pods.iter().zip(&sizes).filter(|(p, _)| p.node.is_some()).map(|(_, g)| g).sum()
    };
    assert_eq!(gpu.summary.pending, 0, "{:?}", gpu.pods);
    assert_eq!(placed(&gpu), total);
    let free = free_gpus(&gpu, &sizes, nodes);
    assert!(free.values().all(|&f| f == 0), "{free:?}");

    // The default profile leaves GPUs free but unusable by the 8-GPU jobs.
    assert!(default.summary.pending > 0, "{:?}", default.pods);
    assert!(placed(&default) < total);
    let free = free_gpus(&default, &sizes, nodes);
    let stranded: u32 = free.values().filter(|&&f| f < 8).sum();
    assert_eq!((default.summary.pending, stranded), (2, 16), "{free:?}");
    for p in default.pods.iter().filter(|p| p.node.is_none()) {
        assert!(p.name.ends_with("-8gpu"), "{p:?}");
        assert!(p.reason.as_deref().unwrap().contains("Insufficient nvidia.com/gpu"), "{p:?}");
    }
}

/// GPUs taken by pods of another scheduler are not free: a 2-GPU pod takes
/// the node where another scheduler's pod left exactly 2 free.
#[tokio::test]
async fn gpus_of_other_schedulers_pods_are_counted() {
    let theirs = PodBuilder::new("theirs")
        .scheduler("default-scheduler")
        .node("gpu-1")
        .resource(GPU, "6")
        .build();
    let ours = gpu_pods(&[2], GPU_PROFILE).remove(0);
    let r = run(Some(&gpu_config_path()), gpu_nodes(3), vec![theirs, ours]).await;
    assert_eq!(r.pods.len(), 1);
    assert_eq!(r.pods[0].node.as_deref(), Some("gpu-1"), "{:?}", r.pods);
}

/// A bad argument fails the profile, naming the plugin and the field.
#[tokio::test]
async fn bad_args_name_the_plugin_and_the_field() {
    let yaml = std::fs::read_to_string(gpu_config_path())
        .unwrap()
        .replace("resourceNames: [nvidia.com/gpu]", "resourceNames: [cpu]");
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpu-cluster-bad-args.yaml");
    std::fs::write(&path, yaml).unwrap();
    let config = convoy_scheduler::load_config(Some(&path)).unwrap();
    let err = check(&config).unwrap_err().to_string();
    assert!(
        err.starts_with(
            "profile \"convoy-gpu\": plugin GpuPlacement: GpuPlacementArgs.resourceNames[0]: \
             \"cpu\" is not an extended resource name"
        ),
        "{err}"
    );
}

/// The GPU profile without GpuPlacement: plain GPU bin packing.
const PACKING_ONLY: &str = "\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: convoy-gpu
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - {name: nvidia.com/gpu, weight: 5}
        - {name: cpu, weight: 1}
        - {name: memory, weight: 1}
";

/// Packing alone puts the 1-GPU pod on the fuller node (2 free -> 1) and
/// strands a GPU on each node; GpuPlacement leaves 2 + 2 free, which the
/// 2-GPU pods that follow can use.
#[tokio::test]
async fn gpu_placement_beats_plain_packing_when_the_remainder_matters() {
    let sizes = [2, 2, 2, 5, 1, 2, 2];
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpu-packing-only.yaml");
    std::fs::write(&path, PACKING_ONLY).unwrap();
    let packing = run(Some(&path), gpu_nodes(2), gpu_pods(&sizes, GPU_PROFILE)).await;
    let gpu = run(Some(&gpu_config_path()), gpu_nodes(2), gpu_pods(&sizes, GPU_PROFILE)).await;
    assert_eq!(gpu.summary.pending, 0, "{:?}", gpu.pods);
    assert_eq!(packing.summary.pending, 1, "{:?}", packing.pods);
    let free = free_gpus(&packing, &sizes, 2);
    assert!(free.values().all(|&f| f == 1), "{free:?}");
}

/// A GPU node with capacity and what another scheduler's pod already takes.
fn loaded_node(
    name: &str,
    cpus: u32,
    gpus_used: u32,
    cpus_used: u32,
    mem_used: &str,
) -> (Node, Pod) {
    let node =
        NodeBuilder::new(name).cpu(&cpus.to_string()).memory("512Gi").allocatable(GPU, "8").build();
    let theirs = PodBuilder::new(&format!("{name}-theirs"))
        .scheduler("default-scheduler")
        .node(name)
        .cpu(&cpus_used.to_string())
        .memory(mem_used)
        .resource(GPU, &gpus_used.to_string())
        .build();
    (node, theirs)
}

/// A batch pod (60 CPUs, no GPU), then six 1-GPU pods of 12 CPUs. Packing
/// puts the batch pod on the fuller node "a" (by CPU and memory: the
/// default BalancedAllocation would tie them otherwise), whose 2 free GPUs
/// are then left with 6 CPUs: stranded, and two GPU pods stay pending.
/// GpuPlacement,
/// knowing the cluster's GPU pods ask for 12 CPUs, puts the batch pod on
/// "b", where 4 free GPUs keep 60 CPUs, and every GPU pod fits.
#[tokio::test]
async fn gpu_placement_keeps_cpu_beside_free_gpus() {
    let (a, a_theirs) = loaded_node("a", 96, 6, 30, "256Gi");
    let (b, b_theirs) = loaded_node("b", 128, 4, 8, "0");
    let mut pods = vec![
        a_theirs,
        b_theirs,
        // Placement only: these pods preempt nobody (the other
        // scheduler's pods have the default priority, 0).
        PodBuilder::new("batch")
            .scheduler(GPU_PROFILE)
            .priority(1000)
            .preemption_policy("Never")
            .cpu("60")
            .memory("64Gi")
            .build(),
    ];
    for i in 0..6 {
        pods.push(
            PodBuilder::new(&format!("gpu-{i}"))
                .scheduler(GPU_PROFILE)
                .priority(900 - i)
                .preemption_policy("Never")
                .cpu("12")
                .memory("16Gi")
                .resource(GPU, "1")
                .build(),
        );
    }
    let packing_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpu-packing-only-2.yaml");
    std::fs::write(&packing_path, PACKING_ONLY).unwrap();
    // The bundled profile with a prior that knows the GPU pods' CPU (as
    // the learned distribution would after a few hundred such pods).
    let yaml = std::fs::read_to_string(gpu_config_path()).unwrap().replace(
        "      - {gpus: 1, weight: 0.6}\n      - {gpus: 2, weight: 0.15}\n      \
         - {gpus: 4, weight: 0.15}\n      - {gpus: 8, weight: 0.1}",
        "      - {gpus: 1, cpu: \"12\", memory: 16Gi, weight: 1}",
    );
    assert!(yaml.contains("cpu: \"12\""), "the prior was not replaced");
    let gpu_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpu-cluster-cpu-prior.yaml");
    std::fs::write(&gpu_path, yaml).unwrap();

    let node_of = |r: &Report, pod: &str| {
        r.pods.iter().find(|p| p.name.ends_with(pod)).and_then(|p| p.node.clone())
    };
    let packing = run(Some(&packing_path), vec![a.clone(), b.clone()], pods.clone()).await;
    assert_eq!(node_of(&packing, "batch").as_deref(), Some("a"), "{:?}", packing.pods);
    assert_eq!(packing.summary.pending, 2, "{:?}", packing.pods);
    // Without CPU in what it knows of the requests, the measure cannot
    // tell the nodes apart and packing decides.
    let gpu_only_prior =
        run(Some(&gpu_config_path()), vec![a.clone(), b.clone()], pods.clone()).await;
    assert_eq!(node_of(&gpu_only_prior, "batch").as_deref(), Some("a"));
    let gpu = run(Some(&gpu_path), vec![a, b], pods).await;
    assert_eq!(node_of(&gpu, "batch").as_deref(), Some("b"), "{:?}", gpu.pods);
    assert_eq!(gpu.summary.pending, 0, "{:?}", gpu.pods);
}
