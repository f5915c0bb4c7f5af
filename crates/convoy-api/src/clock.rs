//! Injected time: backoff, Permit timeouts and assumed-pod expiry read a
//! [`Clock`], so tests and the simulator can drive time.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now.
    fn now(&self) -> Instant;
}

/// The real monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

impl Clock for RealClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that only moves when told to (tests, simulations).
#[derive(Debug, Clone)]
pub struct FakeClock {
    now: Arc<Mutex<Instant>>,
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeClock {
    /// A fake clock starting at the real now.
    pub fn new() -> Self {
        Self { now: Arc::new(Mutex::new(Instant::now())) }
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
}
