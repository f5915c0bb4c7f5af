//! Gang scheduling (coscheduling): pods of a PodGroup are placed all
//! together or not at all.
//!
//! Both PodGroup APIs are spoken (scheduler-plugins'
//! `scheduling.x-k8s.io/v1alpha1` and upstream's `scheduling.k8s.io/v1beta1`,
//! normalised by `convoy_api::PodGroup`). This crate holds what the
//! scheduler knows of each group ([`GangState`]), the `GangScheduling`
//! plugin ([`GangScheduling`]: PreEnqueue quorum, PreFilter starvation
//! guard, Permit barrier, Unreserve), and the pure helpers the scheduler's
//! group cycle uses ([`group`]). The cycle itself (one snapshot, tentative
//! placements committed together or undone in reverse) lives in the
//! scheduler's `schedule_group.rs`, next to `schedule_one.rs`. The policy is
//! written in `docs/gang.md`.
//!
//! May depend on: `convoy-api`, `convoy-config`. Does no IO.

pub mod args;
pub mod group;
pub mod invariant;
pub mod plan;
pub mod plugin;
pub mod state;

use std::sync::Arc;

use convoy_api::{Clock, Registry};

pub use args::GangSchedulingArgs;
pub use plugin::{COSCHEDULING, GangScheduling, NAME};
pub use state::{GangState, GroupStatus, Place, Reservation, StarvationPolicy, Starving};

/// Registers the plugin under both names ([`NAME`], [`COSCHEDULING`]),
/// reading `state`.
pub fn register(registry: &mut Registry, state: Arc<GangState>, clock: Arc<dyn Clock>) {
    for name in [NAME, COSCHEDULING] {
        let state = state.clone();
        let clock = clock.clone();
        registry.register(name, move |args, handle| {
            let args = GangSchedulingArgs::decode(args)?;
            Ok(Arc::new(
                GangScheduling::new(
                    name,
                    state.clone(),
                    args,
                    handle.waiting_pods.clone(),
                    clock.clone(),
                )
                .serving(handle.objects.clone()),
            ))
        });
    }
}

#[cfg(test)]
mod tests;
