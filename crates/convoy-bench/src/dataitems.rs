//! perf-dash DataItems, as upstream's `dataItems2JSONFile` writes them, and
//! upstream's threshold check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::ThresholdMetricSelector;

/// One result: a metric's summary values and its labels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataItem {
    /// `Average`, `Perc50`, ... (and `AverageThreshold` when checked).
    pub data: BTreeMap<String, f64>,
    /// `pods/s` for throughput.
    pub unit: String,
    /// `Metric`, `Name`, and any others.
    pub labels: BTreeMap<String, String>,
}

/// The file: `{"version": "v1", "dataItems": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataItems {
    /// Always `v1`.
    pub version: String,
    /// The results.
    #[serde(rename = "dataItems")]
    pub data_items: Vec<DataItem>,
}

impl DataItems {
    /// A `v1` set of items.
    pub fn new(data_items: Vec<DataItem>) -> Self {
        Self { version: "v1".into(), data_items }
    }

    /// Writes `BenchmarkPerfScheduling_benchmark_<topic>_<UTC time>.json`
    /// into `dir` (created if needed); returns its path.
    pub fn write(&self, dir: &Path, topic: &str) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path =
            dir.join(format!("BenchmarkPerfScheduling_benchmark_{topic}_{}.json", utc_now()));
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&path, json + "\n")?;
        Ok(path)
    }
}

/// Checks `items` against a threshold as upstream's `applyThreshold`:
/// records `<bucket>Threshold` in each selected item and fails with
/// `expected "SchedulingThroughput" "Average" to be higher: got X, want Y`.
pub fn apply_threshold(
    items: &mut [DataItem],
    threshold: f64,
    selector: &ThresholdMetricSelector,
) -> Result<(), String> {
    let bucket = selector.data_bucket.as_deref().unwrap_or("Average");
    let mut failures = Vec::new();
    for item in items.iter_mut() {
        let selected = item.labels.get("Metric") == Some(&selector.name)
            && selector.labels.iter().all(|(k, v)| item.labels.get(k) == Some(v));
        if !selected {
            continue;
        }
        let got = item.data.get(bucket).copied().unwrap_or(0.0);
        item.data.insert(format!("{bucket}Threshold"), threshold);
        let ok = if selector.expect_lower { got <= threshold } else { got >= threshold };
        if !ok {
            failures.push(format!(
                "{}: expected {:?} {:?} to be {}: got {got:.6}, want {threshold:.6}",
                item.labels.get("Name").map(String::as_str).unwrap_or(""),
                selector.name,
                bucket,
                if selector.expect_lower { "lower" } else { "higher" },
            ));
        }
    }
    if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format_utc(secs)
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (civil-from-days).
fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(avg: f64) -> DataItem {
        DataItem {
            data: [("Average".to_string(), avg)].into(),
            unit: "pods/s".into(),
            labels: [("Metric", "SchedulingThroughput"), ("Name", "Basic/5Nodes/namespace-2")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into(),
        }
    }

    #[test]
    fn threshold_message_as_upstream() {
        let mut items = vec![item(100.0)];
        let e =
            apply_threshold(&mut items, 680.0, &ThresholdMetricSelector::default()).unwrap_err();
        assert_eq!(
            e,
            "Basic/5Nodes/namespace-2: expected \"SchedulingThroughput\" \"Average\" to be \
             higher: got 100.000000, want 680.000000"
        );
        assert_eq!(items[0].data["AverageThreshold"], 680.0);
        let mut items = vec![item(700.0)];
        assert!(apply_threshold(&mut items, 680.0, &ThresholdMetricSelector::default()).is_ok());
        let lower = ThresholdMetricSelector { expect_lower: true, ..Default::default() };
        assert!(apply_threshold(&mut items, 680.0, &lower).unwrap_err().contains("to be lower"));
    }

    #[test]
    fn json_shape() {
        let json = serde_json::to_value(DataItems::new(vec![item(1.5)])).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"version": "v1", "dataItems": [{
                "data": {"Average": 1.5}, "unit": "pods/s",
                "labels": {"Metric": "SchedulingThroughput", "Name": "Basic/5Nodes/namespace-2"}}]})
        );
    }

    #[test]
    fn utc_format() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(1_709_251_199), "2024-02-29T23:59:59Z");
    }
}
