//! The standard process metrics of Prometheus' client libraries
//! (client_golang's process collector: same names, types and units), read
//! from `/proc/self` at scrape time. A value that cannot be read (not
//! Linux, `/proc` not mounted) is left out, not reported as 0.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks per second of `/proc/<pid>/stat`'s times: `USER_HZ`, 100 on
/// every Linux architecture (client_golang's procfs assumes it too).
const USER_HZ: f64 = 100.0;

/// The names [`ProcessCollector`] exports (counters with their `_total`),
/// for checks against the documentation.
pub const PROCESS_METRICS: [&str; 6] = [
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
];

/// Exports the process metrics on each scrape (registered by
/// [`Metrics::new`](super::Metrics::new)).
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One reading of `/proc/self`; `None` where a file could not be read.
#[derive(Debug, Default, Clone, PartialEq)]
struct ProcessStats {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
    start_time_seconds: Option<f64>,
}

impl ProcessStats {
    fn read() -> Self {
        let mut s = Self::default();
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
            && let Some(f) = parse_stat(&stat)
        {
            s.cpu_seconds = Some((f.utime + f.stime) as f64 / USER_HZ);
            s.virtual_bytes = Some(f.vsize as f64);
            s.start_time_seconds = std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_boot_time(&t))
                .map(|boot| boot as f64 + f.starttime as f64 / USER_HZ);
        }
        s.resident_bytes = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|t| parse_vm_rss(&t))
            .map(|b| b as f64);
        s.open_fds =
            std::fs::read_dir("/proc/self/fd").ok().map(|d| d.filter(Result::is_ok).count() as f64);
        s.max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|t| parse_max_open_files(&t))
            .map(|n| n as f64);
        s
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let s = ProcessStats::read();
        if let Some(v) = s.cpu_seconds {
            // The encoder adds `_total` to a counter's samples.
            let m = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(v).encode(m)?;
        }
        for (name, help, value) in [
            ("process_resident_memory_bytes", "Resident memory size in bytes", s.resident_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes", s.virtual_bytes),
            ("process_open_fds", "Number of open file descriptors", s.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", s.max_fds),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                s.start_time_seconds,
            ),
        ] {
            if let Some(v) = value {
                let m = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
                ConstGauge::new(v).encode(m)?;
            }
        }
        Ok(())
    }
}

/// The fields of `/proc/self/stat` the metrics use (proc(5)).
#[derive(Debug, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may hold spaces and parentheses itself, so fields are counted from
/// after the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // Fields from 3 (`state`) on: field n is at index n - 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat { utime: field(14)?, stime: field(15)?, starttime: field(22)?, vsize: field(23)? })
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the epoch.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// `VmRSS` of `/proc/self/status`, in bytes (the file says kB: KiB).
fn parse_vm_rss(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// The soft limit of `Max open files` in `/proc/self/limits`; `None` when
/// unlimited.
fn parse_max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with spaces and a parenthesis, as a process may
        // name itself.
        let stat = "4242 (a b) c)) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 9 0 \
                    123456 1048576000 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 \
                    0 0 0 0 0\n";
        assert_eq!(
            parse_stat(stat),
            Some(Stat { utime: 250, stime: 75, starttime: 123_456, vsize: 1_048_576_000 })
        );
        assert_eq!(parse_stat("4242 (truncated"), None);
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
    }

    #[test]
    fn status_limits_and_boot_time_parse() {
        let status = "Name:\tconvoy\nVmSize:\t  100 kB\nVmRSS:\t    2048 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss(status), Some(2048 * 1024));
        assert_eq!(parse_vm_rss("Name:\tkthreadd\n"), None);

        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_open_files(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_open_files(unlimited), None);

        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_as_plausible() {
        let s = ProcessStats::read();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = s.start_time_seconds.expect("start time");
        // Started before now, and not before this test binary was built
        // (a day is plenty).
        assert!(start <= now + 1.0 && start > now - 86_400.0, "start {start}, now {now}");
        assert!(s.resident_bytes.expect("rss") > 1_000_000.0);
        assert!(s.virtual_bytes.expect("vsize") >= s.resident_bytes.unwrap());
        assert!(s.open_fds.expect("fds") >= 3.0);
        if let Some(max) = s.max_fds {
            assert!(max >= s.open_fds.unwrap());
        }
        assert!(s.cpu_seconds.expect("cpu") >= 0.0);
    }
}
