//! SchedulingThroughput, computed exactly as upstream's
//! `throughputCollector` does (`scheduler_perf/util.go`), from the instants
//! at which pods of the measured window were seen bound.
//!
//! Upstream ticks every second and, at each tick, counts the pods bound so
//! far. Ticks before the first bind are ignored; the first tick that sees
//! a bind is skipped too ("likely to be an outlier"); a tick that sees no
//! new bind records nothing and widens the next interval instead (the rate
//! over the widened interval is then recorded once per interval it spans,
//! so percentiles stay time-weighted); the partial interval after the last
//! tick is not sampled. `Average` is the mean of the samples (not pods over
//! time) and `PercXX = sorted[ceil(len·XX/100) − 1]`.
//!
//! Here the ticks are virtual: [`samples`] replays the bind instants
//! against ticks at `k · interval` from the window's start, so there is no
//! timer jitter. On the embedded cluster a whole workload can take less
//! than a second, so the interval is finer there (10 ms by default, see
//! [`SampleInterval`]); rates are still in pods per second.

use std::time::Duration;

/// Upstream's sampling interval.
pub const UPSTREAM_INTERVAL: Duration = Duration::from_secs(1);
/// The default interval on the embedded target.
pub const EMBEDDED_INTERVAL: Duration = Duration::from_millis(10);
/// The finest interval [`SampleInterval::Auto`] goes down to.
pub const MIN_INTERVAL: Duration = Duration::from_micros(100);
/// How many samples [`SampleInterval::Auto`] aims for at least.
pub const MIN_SAMPLES: usize = 10;

/// How the window is cut into samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleInterval {
    /// Always this interval (upstream: 1 s).
    Fixed(Duration),
    /// Start at [`EMBEDDED_INTERVAL`] and divide by 10 (down to
    /// [`MIN_INTERVAL`]) while the window yields fewer than
    /// [`MIN_SAMPLES`] samples, so that a short window is measured, never
    /// dropped.
    Auto,
}

/// The samples of one window at the interval used.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// The interval the samples were taken at.
    pub interval: Duration,
    /// Pods/s per interval, in time order.
    pub samples: Vec<f64>,
}

/// Throughput samples (pods/s) of a window of length `window` in which pods
/// were bound at `binds` (offsets from the window's start, any order).
pub fn samples(binds: &[Duration], window: Duration, interval: Duration) -> Vec<f64> {
    assert!(!interval.is_zero(), "sampling interval must be positive");
    let mut binds = binds.to_vec();
    binds.sort_unstable();
    let mut out = Vec::new();
    let (mut started, mut last_count, mut last_tick, mut skipped) = (false, 0, Duration::ZERO, 0);
    let mut tick = interval;
    while tick <= window {
        let scheduled = binds.partition_point(|b| *b <= tick);
        if !started {
            if scheduled > 0 {
                // The first sample is skipped: creation and sampling start
                // independently.
                started = true;
                last_count = scheduled;
                last_tick = tick;
            }
        } else if scheduled == last_count {
            // No 0 pods/s samples: fold this interval into the next.
            skipped += 1;
        } else {
            let rate = (scheduled - last_count) as f64 / (tick - last_tick).as_secs_f64();
            out.extend(std::iter::repeat_n(rate, skipped + 1));
            last_count = scheduled;
            last_tick = tick;
            skipped = 0;
        }
        tick += interval;
    }
    out
}

/// Samples a window as `interval` says.
pub fn sample(binds: &[Duration], window: Duration, interval: SampleInterval) -> Sampled {
    match interval {
        SampleInterval::Fixed(i) => Sampled { interval: i, samples: samples(binds, window, i) },
        SampleInterval::Auto => {
            let mut i = EMBEDDED_INTERVAL;
            loop {
                let s = samples(binds, window, i);
                if s.len() >= MIN_SAMPLES || i <= MIN_INTERVAL {
                    return Sampled { interval: i, samples: s };
                }
                i /= 10;
            }
        }
    }
}

/// Upstream's summary of the samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Mean of the samples.
    pub average: f64,
    /// Median.
    pub perc50: f64,
    /// 90th percentile.
    pub perc90: f64,
    /// 95th percentile.
    pub perc95: f64,
    /// 99th percentile.
    pub perc99: f64,
}

impl Summary {
    /// The summary, `None` without samples (upstream: "Failed to measure
    /// SchedulingThroughput").
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let perc = |p: usize| s[(s.len() * p).div_ceil(100) - 1];
        Some(Summary {
            average: s.iter().sum::<f64>() / s.len() as f64,
            perc50: perc(50),
            perc90: perc(90),
            perc95: perc(95),
            perc99: perc(99),
        })
    }

    /// The data buckets by name (`Average`, `Perc50`, ...), as a
    /// DataItem's `data` holds them.
    pub fn buckets(&self) -> [(&'static str, f64); 5] {
        [
            ("Average", self.average),
            ("Perc50", self.perc50),
            ("Perc90", self.perc90),
            ("Perc95", self.perc95),
            ("Perc99", self.perc99),
        ]
    }

    /// The buckets as a DataItem's `data`.
    pub fn data(&self) -> std::collections::BTreeMap<String, f64> {
        self.buckets().into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// The value of a data bucket (`Average`, `Perc50`, ...).
    pub fn bucket(&self, name: &str) -> Option<f64> {
        self.buckets().into_iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn first_sample_is_skipped() {
        // Ticks at 1s, 2s, 3s; 10 pods by 1s (skipped), 20 more by 2s, 30 more by 3s.
        let mut binds = vec![500; 10];
        binds.extend([1500; 20]);
        binds.extend([2500; 30]);
        let s = samples(&ms(&binds), Duration::from_secs(3), Duration::from_secs(1));
        assert_eq!(s, vec![20.0, 30.0]);
    }

    #[test]
    fn ticks_before_the_first_bind_are_ignored() {
        // Nothing until 2.5s: ticks 1 and 2 ignored, tick 3 is the skipped first sample.
        let mut binds = vec![2500; 5];
        binds.extend([3500; 7]);
        let s = samples(&ms(&binds), Duration::from_secs(4), Duration::from_secs(1));
        assert_eq!(s, vec![7.0]);
    }

    #[test]
    fn empty_intervals_fold_into_the_next() {
        // First at tick 1 (skipped); nothing new at ticks 2 and 3; 30 pods by tick 4:
        // 30 pods over 3 s = 10 pods/s, recorded for each of the 3 intervals.
        let mut binds = vec![100];
        binds.extend([3900; 30]);
        binds.extend([4200; 5]);
        let s = samples(&ms(&binds), Duration::from_secs(5), Duration::from_secs(1));
        assert_eq!(s, vec![10.0, 10.0, 10.0, 5.0]);
    }

    #[test]
    fn trailing_partial_interval_is_not_sampled() {
        let binds = ms(&[100, 1100, 1200, 2100]);
        // Window ends at 2.5s: only ticks 1 (skipped) and 2; the bind at 2.1s
        // falls in the unsampled remainder.
        let s = samples(&binds, Duration::from_millis(2500), Duration::from_secs(1));
        assert_eq!(s, vec![2.0]);
    }

    #[test]
    fn rates_scale_to_pods_per_second() {
        let binds = ms(&[5, 15, 16, 25, 26, 27]);
        let s = samples(&binds, Duration::from_millis(30), Duration::from_millis(10));
        assert_eq!(s, vec![200.0, 300.0]);
    }

    #[test]
    fn auto_interval_refines_short_windows() {
        // 100 pods over 2 ms: 10 ms ticks see nothing, 100 µs ticks do.
        let binds: Vec<Duration> = (0..100).map(|i| Duration::from_micros(20 * i)).collect();
        let s = sample(&binds, Duration::from_millis(2), SampleInterval::Auto);
        assert_eq!(s.interval, Duration::from_micros(100));
        assert!(s.samples.len() >= MIN_SAMPLES, "{s:?}");
        let long: Vec<Duration> = (0..1000).map(|i| Duration::from_micros(200 * i)).collect();
        let s = sample(&long, Duration::from_millis(200), SampleInterval::Auto);
        assert_eq!(s.interval, EMBEDDED_INTERVAL);
    }

    #[test]
    fn summary_as_upstream() {
        let samples: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = Summary::of(&samples).unwrap();
        assert_eq!(s.average, 5.5);
        assert_eq!(s.perc50, 5.0);
        assert_eq!(s.perc90, 9.0);
        assert_eq!(s.perc95, 10.0);
        assert_eq!(s.perc99, 10.0);
        assert_eq!(Summary::of(&[]), None);
        let one = Summary::of(&[42.0]).unwrap();
        assert_eq!((one.perc50, one.perc99), (42.0, 42.0));
    }
}
