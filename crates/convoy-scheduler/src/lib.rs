//! Convoy: a Kubernetes scheduler for GPU clusters. This crate wires the
//! pieces into a running scheduler and hosts the `convoy-scheduler` binary.
//!
//! - [`scheduler`]: one queue and one cache shared by the profiles'
//!   frameworks, and how they are built;
//! - [`handlers`]: how each cluster update from an adapter changes the
//!   cache and the queue;
//! - [`schedule_one`]: the scheduling cycle, top to bottom (and
//!   `preempt.rs`: what a preemption leads to);
//! - [`schedule_group`]: the cycle of a whole PodGroup, one function per
//!   step (with `preempt_group.rs` and `reserve_group.rs`);
//! - [`run`]: the production loop and the simulation driver;
//! - [`decision`]: how every decision is explained;
//! - [`conflicts`]: other schedulers and kubelets that disagree with
//!   Convoy's view of a node;
//! - [`simulate`]: `convoy-scheduler simulate` on the embedded cluster;
//! - [`options`], [`http`], [`auth`], [`tls`]: kube-scheduler's flags, and
//!   the metrics and health endpoints on its secure port.
//!
//! May depend on every Convoy crate; `main.rs` only parses flags.

pub mod app;
pub mod auth;
pub mod conflicts;
pub mod decision;
pub mod handlers;
pub mod http;
pub mod metrics;
pub mod options;
mod preempt;
mod preempt_group;
mod reserve_group;
pub mod run;
pub mod schedule_group;
pub mod schedule_one;
pub mod scheduler;
pub mod serve;
pub mod simulate;
pub mod tls;

use std::path::Path;

use convoy_api::Registry;
use convoy_config::SchedulerConfig;

pub use app::App;
pub use scheduler::{Scheduler, SchedulerOptions};

/// The plugin registry of this build: every in-tree plugin. Plugins of
/// your own go in a binary of your own ([`App::with_plugin`]).
pub fn registry() -> Registry {
    let mut r = convoy_plugins::registry();
    // Placeholders naming the gang plugin for configuration checks;
    // `Scheduler::new` binds it to the scheduler's own gang state.
    convoy_gang::register(
        &mut r,
        convoy_gang::GangState::new(),
        std::sync::Arc::new(convoy_api::RealClock),
    );
    r
}

/// Loads and validates a configuration file, or returns the default
/// configuration (one profile, `convoy-scheduler`) when no file is given.
pub fn load_config(path: Option<&Path>) -> Result<SchedulerConfig, convoy_config::ConfigError> {
    load_config_with(path, &registry())
}

/// [`load_config`] knowing the plugins of `registry` (and checking the args
/// of its out-of-tree plugins).
pub fn load_config_with(
    path: Option<&Path>,
    registry: &Registry,
) -> Result<SchedulerConfig, convoy_config::ConfigError> {
    let known = registry.known_plugins();
    match path {
        Some(p) => convoy_config::load_file(p, &known),
        None => convoy_config::parse_str(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n",
            "<default>",
            &known,
        ),
    }
}
