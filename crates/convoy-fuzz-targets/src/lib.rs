//! The untrusted inputs Convoy reads, as fuzz targets: plain functions from
//! bytes to nothing that panic when a property fails. The cargo-fuzz targets
//! in `fuzz/` call them under libFuzzer (nightly), and this crate's
//! `tests/corpus.rs` replays the committed corpus (`fuzz/corpus/<target>/`)
//! through them on stable, so `cargo test` catches a regression without
//! nightly.
//!
//! Every target checks the same property: the input is either accepted or
//! refused with an error (whose message renders); no panic, no hang. Where
//! the loader accepts, a cheap invariant is checked too (see each target).
//!
//! | target        | input                                          | reads it                                      |
//! |---------------|------------------------------------------------|-----------------------------------------------|
//! | `config`      | a `KubeSchedulerConfiguration` file            | `convoy_config::parse_str`, then every plugin factory |
//! | `plugin_args` | `PluginName\n` then that plugin's `args` YAML  | the same, for one plugin's args               |
//! | `cluster`     | a cluster file (`simulate --cluster`)          | `convoy_embedded::parse_objects`, then the embedded cluster |
//! | `quantity`    | a Kubernetes quantity (`500m`, `32Gi`)         | `convoy_api::resource::{parse_milli, parse_value}` |
//! | `schedule`    | a cluster file, as `cluster`                   | `convoy_scheduler::simulate` (default profile): Filter, Score, preemption, gangs, DRA |
//! | `cel`         | a DRA device selector expression               | `DeviceSelector::compile`, then `matches` on a few devices |

mod cel;
mod cluster;
mod config;
mod quantity;
mod schedule;

pub use cel::cel;
pub use cluster::cluster;
pub use config::{config, plugin_args};
pub use quantity::quantity;
pub use schedule::schedule;

/// A fuzz target: panics when the input breaks the target's property.
pub type Target = fn(&[u8]);

/// Every target by name; the name is the directory of its corpus
/// (`fuzz/corpus/<name>/`) and of its cargo-fuzz binary (`fuzz/fuzz_targets/<name>.rs`).
pub const TARGETS: [(&str, Target); 6] = [
    ("config", config),
    ("plugin_args", plugin_args),
    ("cluster", cluster),
    ("quantity", quantity),
    ("schedule", schedule),
    ("cel", cel),
];
