//! A scheduler binary of your own: Convoy with the out-of-tree `GpuHealth`
//! plugin (`convoy-example-gpu-health`). [`plugins`] is what the binary,
//! its benchmark and its tests share: the plugin and the custom kind it
//! reads.

use convoy_api::Registry;
use convoy_example_gpu_health::{GPU_HEALTH, NAME, new};

/// The plugins this binary adds to Convoy's own, and the custom kinds they
/// read.
pub fn plugins() -> Registry {
    let mut r = Registry::new();
    r.register_with_args(NAME, new).watch_kind(GPU_HEALTH);
    r
}

/// Convoy's plugins and [`plugins`]: what the binary runs with.
pub fn registry() -> Registry {
    let mut r = convoy_scheduler::registry();
    r.merge(&plugins()).expect("GpuHealth is not an in-tree name");
    r
}
