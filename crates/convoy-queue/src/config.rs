//! [`QueueConfig`]: how to build a [`SchedulingQueue`](crate::SchedulingQueue), with
//! upstream's default durations.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use convoy_api::{Clock, QueueSortPlugin};

use crate::nominator::Nominator;
use crate::profiles::ProfileQueueing;

/// Upstream's default `podInitialBackoffSeconds`.
pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Upstream's default `podMaxBackoffSeconds`.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Upstream's default `podMaxInUnschedulablePodsDuration`.
pub const DEFAULT_MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

/// How to build a [`SchedulingQueue`](crate::SchedulingQueue).
pub struct QueueConfig {
    /// Where time comes from.
    pub clock: Arc<dyn Clock>,
    /// The QueueSort plugin (the same in every profile).
    pub less: Arc<dyn QueueSortPlugin>,
    /// Per scheduler name (profile): PreEnqueue plugins and registered
    /// events. Pods of other scheduler names get neither.
    pub profiles: HashMap<String, ProfileQueueing>,
    /// Backoff after the first failed attempt (`podInitialBackoffSeconds`);
    /// zero disables backoff.
    pub initial_backoff: Duration,
    /// Longest backoff (`podMaxBackoffSeconds`).
    pub max_backoff: Duration,
    /// How long a pod may stay in the unschedulable pool before the
    /// periodic flush retries it (`podMaxInUnschedulablePodsDuration`).
    pub max_in_unschedulable: Duration,
    /// The pods nominated to nodes (shared with the frameworks, which
    /// count them in Filter).
    pub nominator: Arc<Nominator>,
    /// When activeQ is empty, pop the pod of backoffQ whose backoff ends
    /// first instead of waiting (upstream's `SchedulerPopFromBackoffQ`
    /// feature, on by default since v1.33). Default `true`.
    pub pop_from_backoff: bool,
}

impl QueueConfig {
    /// A configuration with upstream's default durations and no profiles.
    pub fn new(clock: Arc<dyn Clock>, less: Arc<dyn QueueSortPlugin>) -> Self {
        Self {
            clock,
            less,
            profiles: HashMap::new(),
            initial_backoff: DEFAULT_INITIAL_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            max_in_unschedulable: DEFAULT_MAX_IN_UNSCHEDULABLE,
            nominator: Arc::new(Nominator::new()),
            pop_from_backoff: true,
        }
    }
}

impl std::fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueConfig")
            .field("less", &self.less.name())
            .field("profiles", &self.profiles)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("max_in_unschedulable", &self.max_in_unschedulable)
            .finish_non_exhaustive()
    }
}
