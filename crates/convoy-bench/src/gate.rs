//! The CI regression gate: counts instructions, not time, so that it does
//! not flake on a noisy shared machine.
//!
//! `scripts/bench-gate.sh` runs [`workload`] (a fixed, fully deterministic
//! SchedulingBasic shape through `convoy_scheduler::simulate` on a
//! current-thread runtime with the fake clock and a fixed seed) under
//! `valgrind --tool=callgrind`, reads the whole-process instruction count
//! from callgrind's output ([`parse_callgrind_total`]) and compares it with
//! the baseline in `benches/baseline/gate.json` ([`compare`]).

use std::path::Path;

use convoy_api::testing::{NodeBuilder, PodBuilder};
use convoy_embedded::Objects;
use serde::{Deserialize, Serialize};

/// The fixed workload's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Nodes of 4 CPU / 32Gi / 110 pods (the builders' defaults).
    pub nodes: usize,
    /// Pods of 100m / 500Mi, all pending.
    pub pods: usize,
}

impl Default for Shape {
    fn default() -> Self {
        Self { nodes: 500, pods: 1000 }
    }
}

impl Shape {
    /// How the workload is named in the baseline.
    pub fn describe(&self) -> String {
        format!(
            "SchedulingBasic {} nodes, {} pods (convoy_scheduler::simulate, current_thread, seed 0)",
            self.nodes, self.pods
        )
    }
}

/// Runs the fixed workload once; returns the number of pods bound.
pub fn workload(shape: Shape) -> anyhow::Result<usize> {
    let mut o = Objects::default();
    for i in 0..shape.nodes {
        o.nodes.push(NodeBuilder::new(&format!("node-{i}")).build());
    }
    for i in 0..shape.pods {
        o.pods.push(PodBuilder::new(&format!("pod-{i}")).cpu("100m").memory("500Mi").build());
    }
    let config = convoy_scheduler::load_config(None)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let report = rt.block_on(convoy_scheduler::simulate::simulate(config, o, false))?;
    Ok(report.summary.bound)
}

/// The recorded baseline (`benches/baseline/gate.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// Whole-process instructions (callgrind's `Ir`).
    pub instructions: u64,
    /// How far above the baseline a measurement may be, in percent.
    pub threshold_percent: f64,
    /// What was measured.
    pub workload: String,
    /// When it was recorded (UTC).
    pub recorded: String,
}

impl Baseline {
    /// Reads a baseline file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Writes it, pretty-printed.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(self)? + "\n")?;
        Ok(())
    }
}

/// The outcome of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the measurement is within the threshold.
    pub pass: bool,
    /// `measured / baseline`.
    pub ratio: f64,
    /// One line for the CI log.
    pub message: String,
}

/// Compares a measured instruction count with the baseline: fails when it
/// is more than `threshold_percent` above it. Being below never fails (the
/// message suggests `--update` when it is far below).
pub fn compare(baseline: u64, measured: u64, threshold_percent: f64) -> Verdict {
    if baseline == 0 {
        return Verdict {
            pass: false,
            ratio: f64::INFINITY,
            message: "baseline has 0 instructions: record one with scripts/bench-gate.sh --update"
                .into(),
        };
    }
    let ratio = measured as f64 / baseline as f64;
    let change = (ratio - 1.0) * 100.0;
    let limit = baseline as f64 * (1.0 + threshold_percent / 100.0);
    let pass = measured as f64 <= limit;
    let head = format!(
        "instructions: measured {measured}, baseline {baseline}, ratio {ratio:.4} ({change:+.2}%), \
         threshold +{threshold_percent}%"
    );
    let message = if !pass {
        format!(
            "FAIL {head}: more than {threshold_percent}% above the baseline; find the cause, or \
             if the cost is intended record a new baseline with scripts/bench-gate.sh --update"
        )
    } else if change < -threshold_percent {
        format!("ok {head}: well below the baseline; consider scripts/bench-gate.sh --update")
    } else {
        format!("ok {head}")
    };
    Verdict { pass, ratio, message }
}

/// The total instruction count in a callgrind output file: its
/// `totals:` line, else its `summary:` line (first event, `Ir`).
pub fn parse_callgrind_total(text: &str) -> Option<u64> {
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    field("totals:").or_else(|| field("summary:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_table() {
        // (baseline, measured, threshold %, pass, message contains)
        let cases: [(u64, u64, f64, bool, &str); 7] = [
            (1000, 1000, 10.0, true, "ratio 1.0000 (+0.00%)"),
            (1000, 1100, 10.0, true, "ok "),
            (1000, 1101, 10.0, false, "FAIL "),
            (1000, 1500, 10.0, false, "more than 10% above the baseline"),
            (1000, 500, 10.0, true, "well below the baseline"),
            (1000, 950, 10.0, true, "(-5.00%)"),
            (0, 5, 10.0, false, "baseline has 0 instructions"),
        ];
        for (baseline, measured, threshold, pass, needle) in cases {
            let v = compare(baseline, measured, threshold);
            assert_eq!(v.pass, pass, "{baseline} {measured} {threshold}: {}", v.message);
            assert!(v.message.contains(needle), "{:?} lacks {needle:?}", v.message);
        }
        let v = compare(2_000_000_000, 2_300_000_000, 10.0);
        assert!(!v.pass);
        assert!((v.ratio - 1.15).abs() < 1e-9);
        assert!(v.message.contains("measured 2300000000, baseline 2000000000"), "{}", v.message);
        assert!(compare(2_000_000_000, 2_300_000_000, 20.0).pass);
    }

    #[test]
    fn callgrind_totals_then_summary() {
        let out = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nfl=(1) a.rs\nfn=(1) main\n\
                   3 10\nsummary: 123456789\ntotals: 123456790\n";
        assert_eq!(parse_callgrind_total(out), Some(123_456_790));
        assert_eq!(parse_callgrind_total("events: Ir\nsummary: 42\n"), Some(42));
        assert_eq!(parse_callgrind_total("events: Ir Dr\ntotals: 7 3\n"), Some(7));
        assert_eq!(parse_callgrind_total("events: Ir\n"), None);
    }

    #[test]
    fn baseline_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baseline/gate.json");
        let b = Baseline {
            instructions: 42,
            threshold_percent: 10.0,
            workload: Shape::default().describe(),
            recorded: "2024-02-29T23:59:59Z".into(),
        };
        b.save(&path).unwrap();
        assert_eq!(Baseline::load(&path).unwrap(), b);
    }

    #[test]
    fn workload_binds_every_pod() {
        assert_eq!(workload(Shape { nodes: 5, pods: 20 }).unwrap(), 20);
    }
}
