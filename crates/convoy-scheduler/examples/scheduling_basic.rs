//! Upstream scheduler_perf's SchedulingBasic shape on the embedded cluster,
//! built in memory (no YAML), printing throughput, cycle latency, and the
//! memory of the scheduler apart from the memory of its input:
//!
//! ```sh
//! cargo run --release -p convoy-scheduler --example scheduling_basic -- 5000 50000
//! ```
//!
//! Memory is counted by the allocator (live heap bytes, every allocation
//! and free through the `cap` crate's counting wrapper around mimalloc;
//! the peak sampled every millisecond), at four moments:
//! the input objects built; the embedded cluster holding them (what an
//! API server would hold); the run's end, scheduler alive; and the
//! scheduler dropped, the cluster alone with every pod bound. The
//! scheduler's own memory (cache, queue, snapshot, plugin state, decision
//! records) is the third minus the fourth; its peak is bounded by the
//! run's peak minus the larger of the cluster's two sizes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use cap::Cap;

use convoy_api::FakeClock;
use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::{EmbeddedActuator, EmbeddedBinder, EmbeddedCluster, Objects};
use convoy_scheduler::decision::{Decision, DecisionSink};
use convoy_scheduler::simulate::CycleLatency;
use convoy_scheduler::{Scheduler, SchedulerOptions};
use parking_lot::Mutex;

/// mimalloc, counting the live heap bytes.
#[global_allocator]
static GLOBAL: Cap<mimalloc::MiMalloc> = Cap::new(mimalloc::MiMalloc, usize::MAX);

fn live() -> isize {
    GLOBAL.allocated() as isize
}

/// The largest [`live`] seen by a thread sampling it every millisecond
/// until `stop` is set.
fn sample_peak(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<isize> {
    std::thread::spawn(move || {
        let mut peak = live();
        while !stop.load(Ordering::Relaxed) {
            peak = peak.max(live());
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        peak.max(live())
    })
}

fn mib(bytes: isize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Each attempt's latency, nothing else.
#[derive(Default)]
struct Latencies(Mutex<Vec<f64>>);

impl DecisionSink for Latencies {
    fn record(&self, d: &Decision) {
        self.0.lock().push(d.latency.as_secs_f64() * 1e6);
    }
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
    let input = live();
    let config = convoy_scheduler::load_config(None)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (cluster, mut updates) = EmbeddedCluster::new(o);
    let loaded = live();
    let latencies = Arc::new(Latencies::default());
    let clock = FakeClock::new();
    let scheduler = Scheduler::new(SchedulerOptions {
        config,
        registry: convoy_scheduler::registry(),
        binder: Arc::new(EmbeddedBinder(cluster.clone())),
        actuator: Arc::new(EmbeddedActuator(cluster.clone())),
        clock: Arc::new(clock.clone()),
        sink: latencies.clone(),
        seed: Some(0),
        framework_metrics: None,
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_peak(stop.clone());
    let started = Instant::now();
    rt.block_on(scheduler.run_until_idle(&mut updates, &clock));
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.join().unwrap_or(0);
    let end = live();
    let bound = cluster
        .pods()
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count();
    let cycle = CycleLatency::of(std::mem::take(&mut *latencies.0.lock()));
    let (p50, p99) = (cycle.p50_us, cycle.p99_us);
    drop(scheduler);
    while updates.try_recv().is_ok() {}
    let cluster_alone = live();
    println!(
        "SchedulingBasic {nodes} nodes, {pods} pods: {bound} bound in {seconds:.3}s = {:.0} pods/s; \
         cycle p50 {p50:.0}µs p99 {p99:.0}µs",
        bound as f64 / seconds
    );
    println!(
        "memory (live heap): input objects {:.0} MiB; embedded cluster loaded {:.0} MiB; \
         end of run {:.0} MiB, of which the cluster alone (pods bound) {:.0} MiB and the \
         scheduler {:.0} MiB; run's peak {:.0} MiB, so the scheduler's peak at most {:.0} MiB; \
         process peak RSS {:.0} MiB",
        mib(input),
        mib(loaded),
        mib(end),
        mib(cluster_alone),
        mib(end - cluster_alone),
        mib(peak),
        mib(peak - loaded.max(cluster_alone)),
        peak_rss_mib(),
    );
    Ok(())
}
