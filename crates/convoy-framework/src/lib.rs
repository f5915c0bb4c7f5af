//! Convoy's framework runtime: builds each profile's plugin pipeline from its
//! configuration (once) and runs the extension points, with Filter and Score
//! over nodes in parallel and upstream's adaptive `percentageOfNodesToScore`.
//!
//! May depend on: `convoy-api`, `convoy-config`, rayon (the node-parallel
//! pool), tokio sync (Permit waits). Does no IO itself: binding goes through
//! the plugins' `Binder`.

pub mod algorithm;
pub mod framework;
pub mod metrics;
mod nominations;
mod post_filter;
pub mod waiting_pods;

pub use algorithm::{
    Diagnosis, FitError, PostFilterOutcome, SCORES_TARGET, ScheduleError, ScheduleResult,
    num_feasible_nodes_to_find, select_host, waiting_for_victims_message,
};
pub use framework::{Framework, FrameworkError, FrameworkOptions, MAX_PERMIT_TIMEOUT};
pub use metrics::FrameworkMetrics;
pub use waiting_pods::{PermitWait, WaitingPodsMap};
