//! Criterion benchmark of the whole scheduler on the embedded cluster:
//! upstream's SchedulingBasic shape (nodes of 4 CPU / 32Gi / 110 pods, pods
//! of 100m / 500Mi), from the queue to the bind.

use std::hint::black_box;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::Objects;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn objects(nodes: usize, pods: usize) -> Objects {
    let mut o = Objects::default();
    for i in 0..nodes {
        o.nodes.push(NodeBuilder::new(&format!("node-{i}")).build());
    }
    for i in 0..pods {
        o.pods.push(PodBuilder::new(&format!("pod-{i}")).cpu("100m").memory("500Mi").build());
    }
    o
}

fn scheduling_basic(c: &mut Criterion) {
    let mut g = c.benchmark_group("SchedulingBasic");
    g.sample_size(10);
    for (nodes, pods) in [(500, 1000), (5000, 2000)] {
        g.throughput(Throughput::Elements(pods as u64));
        g.bench_function(format!("{nodes}Nodes/{pods}Pods"), |b| {
            b.iter_batched(
                || objects(nodes, pods),
                |o| {
                    let rt =
                        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                    let config = convoy_scheduler::load_config(None).unwrap();
                    let r = rt
                        .block_on(convoy_scheduler::simulate::simulate(config, o, false))
                        .unwrap();
                    assert_eq!(r.summary.bound, pods);
                    black_box(r)
                },
                criterion::BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, scheduling_basic);
criterion_main!(benches);
