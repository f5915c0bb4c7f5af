//! Where the framework reports how long its extension points and plugins
//! take. The scheduler implements this with its Prometheus metrics; the
//! framework itself knows no metrics library.

use std::sync::Arc;
use std::time::{Duration, Instant};

use convoy_api::Status;

/// Receives timings of extension points (every cycle) and of individual
/// plugins (only in sampled cycles, as upstream).
pub trait FrameworkMetrics: Send + Sync {
    /// Whether this cycle records per-plugin timings (asked once per cycle).
    fn sample(&self) -> bool;
    /// One extension point ran for all plugins.
    fn extension_point(
        &self,
        point: &'static str,
        status: &'static str,
        profile: &Arc<str>,
        d: Duration,
    );
    /// One plugin ran at one extension point.
    fn plugin(&self, plugin: &'static str, point: &'static str, status: &'static str, d: Duration);
}

/// Times a closure returning a status and reports it as an extension point.
pub(crate) fn timed<T>(
    metrics: Option<&Arc<dyn FrameworkMetrics>>,
    point: &'static str,
    profile: &Arc<str>,
    f: impl FnOnce() -> T,
    status_of: impl FnOnce(&T) -> &'static str,
) -> T {
    match metrics {
        None => f(),
        Some(m) => {
            let start = Instant::now();
            let out = f();
            m.extension_point(point, status_of(&out), profile, start.elapsed());
            out
        }
    }
}

/// The `status` label of a status.
pub(crate) fn label(s: &Status) -> &'static str {
    s.code().as_str()
}
