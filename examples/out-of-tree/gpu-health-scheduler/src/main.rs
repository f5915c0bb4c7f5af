//! `gpu-health-scheduler`: `convoy-scheduler`'s command line (serve,
//! `simulate`, `check-config`) with the `GpuHealth` plugin.

use std::process::ExitCode;

/// As convoy-scheduler: the scheduler allocates many small objects per
/// cycle.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    convoy_scheduler::App::new()
        .with_registry(&convoy_example_gpu_health_scheduler::plugins())
        .run()
}
