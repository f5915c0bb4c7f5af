//! The live progress line of a long run, on stderr about once a second:
//! time since the workload started, pods bound so far (deleted ones
//! included), the bind rate over the last second and the pods waiting to
//! be scheduled. On a terminal the line is redrawn in place; otherwise
//! (`--progress` with stderr redirected) one line per second is printed.
//! It never goes to stdout or to a results file.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the line is printed.
pub const PERIOD: Duration = Duration::from_secs(1);

/// One progress line.
pub fn line(elapsed: Duration, bound: u64, rate: f64, pending: usize) -> String {
    format!(
        "[{:>7.1}s] bound {bound:>8}  {rate:>8.0} pods/s  pending {pending:>7}",
        elapsed.as_secs_f64()
    )
}

/// Prints the line until dropped (then ends it with a newline on a
/// terminal).
pub(crate) struct Progress {
    task: tokio::task::JoinHandle<()>,
    terminal: bool,
}

impl Progress {
    /// Starts printing `name`'s progress (on the current runtime);
    /// `tracker` returns the pods bound so far and the pods pending.
    pub(crate) fn start(name: &str, tracker: Arc<dyn Fn() -> (u64, usize) + Send + Sync>) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let name = name.to_string();
        let task = tokio::spawn(async move {
            let start = Instant::now();
            let (mut last_bound, mut last_at) = (tracker().0, start);
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + PERIOD, PERIOD);
            loop {
                ticker.tick().await;
                let (bound, pending) = tracker();
                let now = Instant::now();
                let rate = (bound - last_bound) as f64 / (now - last_at).as_secs_f64();
                (last_bound, last_at) = (bound, now);
                let text = format!("{name} {}", line(now - start, bound, rate, pending));
                let mut err = std::io::stderr().lock();
                let _ =
                    if terminal { write!(err, "\r\x1b[2K{text}") } else { writeln!(err, "{text}") };
                let _ = err.flush();
            }
        });
        Self { task, terminal }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
        if self.terminal {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn line_format() {
        let l = super::line(std::time::Duration::from_millis(12_340), 4520, 812.4, 380);
        assert_eq!(l, "[   12.3s] bound     4520       812 pods/s  pending     380");
    }
}
