//! Upstream scheduler_perf's SchedulingBasic shape on the embedded cluster,
//! built in memory (no YAML), printing throughput, cycle latency and the
//! process's peak RSS:
//!
//! ```sh
//! cargo run --release -p convoy-scheduler --example scheduling_basic -- 5000 10000
//! ```

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::Objects;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (nodes, pods) =
        (args.first().copied().unwrap_or(5000), args.get(1).copied().unwrap_or(10000));
    let mut o = Objects::default();
    for i in 0..nodes {
        o.nodes.push(NodeBuilder::new(&format!("node-{i}")).build());
    }
    for i in 0..pods {
        o.pods.push(PodBuilder::new(&format!("pod-{i}")).cpu("100m").memory("500Mi").build());
    }
    let rss_objects = peak_rss_mib();
    let config = convoy_scheduler::load_config(None)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let r = rt.block_on(convoy_scheduler::simulate::simulate(config, o, false))?;
    let s = &r.summary;
    let l = &r.cycle_latency;
    println!(
        "SchedulingBasic {nodes} nodes, {pods} pods: {} bound in {:.3}s = {:.0} pods/s; \
         cycle p50 {:.0}µs p99 {:.0}µs; peak RSS {:.0} MiB (input objects alone {:.0} MiB)",
        s.bound,
        s.seconds,
        s.pods_per_second,
        l.p50_us,
        l.p99_us,
        peak_rss_mib(),
        rss_objects
    );
    Ok(())
}
