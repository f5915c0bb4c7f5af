//! A token bucket as client-go's `flowcontrol.NewTokenBucketRateLimiter`:
//! `burst` tokens at most, refilled at `qps` per second, one per request.

use std::time::Duration;

use tokio::time::Instant;

/// The bucket's arithmetic, with the clock passed in so it can be tested
/// without waiting.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. `qps` must be positive; `burst` is at least 1.
    pub(crate) fn new(qps: f32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self { qps: f64::from(qps), burst, tokens: burst, last: now }
    }

    /// Takes a token if one is available, else says how long until one is.
    pub(crate) fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }

    /// Waits for a token.
    pub(crate) async fn take(&mut self) {
        while let Err(wait) = self.try_take(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_qps() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 3, t0);
        for _ in 0..3 {
            assert_eq!(b.try_take(t0), Ok(()));
        }
        let wait = b.try_take(t0).expect_err("bucket empty");
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        // 50 ms later half a token has accrued: 50 ms more to wait.
        let wait = b.try_take(t0 + Duration::from_millis(50)).expect_err("half a token");
        assert!((wait.as_secs_f64() - 0.05).abs() < 1e-6, "{wait:?}");
        assert_eq!(b.try_take(t0 + Duration::from_millis(100)), Ok(()));
        // A long pause refills to burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.try_take(later), Ok(()));
        }
        assert!(b.try_take(later).is_err());
    }

    #[test]
    fn zero_burst_means_one() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 0, t0);
        assert_eq!(b.try_take(t0), Ok(()));
        assert!(b.try_take(t0).is_err());
    }
}
