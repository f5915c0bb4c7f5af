//! How a failed watch retries: client-go's reflector shape (800 ms,
//! doubling, with jitter, reset after a quiet spell) but capped at
//! [`MAX_DELAY`] instead of 30 s.
//!
//! A scheduler binds on what its watches last said. After an API server
//! outage, a watch that backed off to 30 s leaves the scheduler up to
//! 30 s on a stale view: a replica that takes the lease in that window
//! binds pods to nodes deleted while it could not see (the API server
//! accepts a binding to a node that no longer exists). With the cap, every
//! watch retries within 5 s of the server's return; a scheduler runs a
//! fixed handful of watches, so the extra requests during an outage are
//! few (measured by the chaos suite's `watches_expire_and_relist_after_a_long_cut`).

use std::time::{Duration, SystemTime};

use kube::runtime::utils::{Backoff, ResetTimerBackoff};

/// The first retry's delay.
pub const MIN_DELAY: Duration = Duration::from_millis(800);
/// The longest delay between two attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(5);
/// A watch that has not failed for this long starts again from
/// [`MIN_DELAY`] (client-go's two minutes).
pub const RESET_AFTER: Duration = Duration::from_secs(120);

/// The backoff every watcher of the adapter uses.
pub fn watch_backoff() -> ResetTimerBackoff<Capped> {
    ResetTimerBackoff::new(Capped::default(), RESET_AFTER)
}

/// Exponential from [`MIN_DELAY`] to [`MAX_DELAY`], each delay drawn in
/// its upper half (so replicas retrying together spread out).
#[derive(Debug, Clone, Default)]
pub struct Capped {
    attempts: u32,
}

impl Iterator for Capped {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let full = MIN_DELAY.saturating_mul(1 << self.attempts.min(16)).min(MAX_DELAY);
        self.attempts = self.attempts.saturating_add(1);
        // Jitter from the clock's nanoseconds: no generator to seed, and
        // two processes retrying at once read different values.
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let fraction = 0.5 + f64::from(nanos % 1000) / 2000.0;
        Some(full.mul_f64(fraction))
    }
}

impl Backoff for Capped {
    fn reset(&mut self) {
        self.attempts = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Capped::default();
        let delays: Vec<Duration> = (&mut b).take(8).collect();
        for (i, d) in delays.iter().enumerate() {
            let full = MIN_DELAY.saturating_mul(1 << i).min(MAX_DELAY);
            assert!(
                *d >= full / 2 && *d <= full,
                "attempt {i}: {d:?} not in [{full:?}/2, {full:?}]"
            );
        }
        assert!(delays[7] <= MAX_DELAY);
        b.reset();
        assert!(b.next().unwrap() <= MIN_DELAY);
    }
}
