//! `convoy-scheduler`: Convoy's own plugins, the command line of
//! [`convoy_scheduler::App`]. A binary with plugins of your own is the same
//! few lines with `.with_plugin(...)` (docs/extending.md).

use std::process::ExitCode;

/// mimalloc: the scheduler allocates many small, short-lived objects per
/// cycle (node lists, statuses, pod copies); glibc malloc cost ~10% of a
/// cycle in profiles (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    convoy_scheduler::App::new().run()
}
