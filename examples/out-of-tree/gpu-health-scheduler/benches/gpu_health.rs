//! `cargo bench -p convoy-example-gpu-health-scheduler`: the GpuHealth
//! benchmark (workloads labelled `performance`) on the embedded cluster,
//! with Convoy's plugins and GpuHealth; its prepare hook registers the
//! CRD and the nodes' reports. Writes the DataItems to `target/` and fails
//! on an error or a `threshold:` violation.

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let bench =
        convoy_bench::Benchmark::new(dir.join("benches/performance-config.yaml")).map(|b| {
            b.registry(convoy_example_gpu_health_scheduler::registry())
                .topic("gpu-health")
                .prepare(prepare::reports(500))
        });
    let report = match bench.and_then(|b| b.run_embedded()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let out = dir.join("../../../target");
    match report.write(&out, "gpu-health") {
        Ok(path) => println!("DataItems: {}", path.display()),
        Err(e) => eprintln!("error writing the DataItems: {e}"),
    }
    for r in &report.results {
        for item in &r.items {
            if item.labels.get("Metric").map(String::as_str) == Some("SchedulingThroughput") {
                println!("{}: {:?}", r.name, item.data);
            }
        }
    }
    if let Err(e) = report.check() {
        eprintln!("{e}");
        std::process::exit(1);
    }
    // Placed as intended: nothing on the even-numbered nodes, whose GPUs
    // the prepare hook reported unhealthy.
    for r in &report.results {
        let on_unhealthy: usize = r
            .binds_per_node
            .iter()
            .filter(|(node, _)| {
                node.strip_prefix("gpu-")
                    .and_then(|i| i.parse::<usize>().ok())
                    .is_some_and(|i| i % 2 == 0)
            })
            .map(|(_, n)| n)
            .sum();
        if on_unhealthy > 0 {
            eprintln!("{}: {on_unhealthy} pods on nodes with unhealthy GPUs", r.name);
            std::process::exit(1);
        }
    }
}

#[path = "../tests/common/prepare.rs"]
mod prepare;
