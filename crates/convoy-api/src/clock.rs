//! Injected time: backoff, Permit timeouts and assumed-pod expiry read a
//! [`Clock`], so tests and the simulator can drive time.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> Instant;

    /// Now on the wall clock, in nanoseconds since the Unix epoch: for
    /// comparing with the times objects carry (`status.startTime`).
    fn wall(&self) -> i128 {
        wall_now()
    }
}

/// The system's wall clock, in nanoseconds since the Unix epoch.
fn wall_now() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// The real monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to (tests, simulations). Its wall
/// clock starts at the real one and moves with it.
#[derive(Debug, Clone)]
pub struct FakeClock {
    now: Arc<Mutex<Instant>>,
    start: Instant,
    start_wall: i128,
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeClock {
    /// A fake clock starting at the real now.
    pub fn new() -> Self {
        let start = Instant::now();
        Self { now: Arc::new(Mutex::new(start)), start, start_wall: wall_now() }
    }

    /// Moves time forward.
    pub fn advance(&self, d: Duration) {
        *self.now.lock().expect("clock lock") += d;
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        *self.now.lock().expect("clock lock")
    }

    fn wall(&self) -> i128 {
        self.start_wall + (self.now() - self.start).as_nanos() as i128
    }
}
