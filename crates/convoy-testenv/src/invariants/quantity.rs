//! Resource quantities as exact integers (billionths of the unit), and a
//! pod's effective requests, for the over-commit check.
//!
//! Deliberately independent of the scheduler's own code
//! (`convoy_api::resource::parse_milli`, `convoy_api::resource::pod_requests`):
//! the checker is an oracle for the scheduler's results, so a bug in what it
//! checks must not be copied into the check. convoy-testenv depends on no
//! Convoy crate for the same reason.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

/// A Kubernetes quantity (`"500m"`, `"1.5Gi"`, `"2e3"`, `"8"`) in
/// billionths of its unit, rounded up; `None` when it does not parse.
///
/// An independent oracle, not a copy to merge: written apart from
/// convoy-api's `parse_milli` (which the scheduler counts with) so that the
/// invariant checker does not share the parser whose results it checks.
pub fn parse_nano(q: &str) -> Option<i128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    // (binary multiplier, decimal exponent) of the suffix.
    let (binary, exponent): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        s if s.starts_with(['e', 'E']) => (1, s[1..].parse().ok()?),
        _ => return None,
    };
    let (negative, number) = match number.strip_prefix('-') {
        Some(n) => (true, n),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits: i128 = format!("{whole}{fraction}").parse().ok()?;
    let exponent = 9 + exponent - i32::try_from(fraction.len()).ok()?;
    let scaled = digits.checked_mul(binary)?;
    let value = if exponent >= 0 {
        scaled.checked_mul(10i128.checked_pow(exponent.unsigned_abs())?)?
    } else {
        let divisor = 10i128.checked_pow(exponent.unsigned_abs())?;
        (scaled + divisor - 1) / divisor
    };
    Some(if negative { -value } else { value })
}

fn requests_of(c: &Container) -> impl Iterator<Item = (String, i128)> + '_ {
    c.resources
        .iter()
        .filter_map(|r| r.requests.as_ref())
        .flatten()
        .filter_map(|(name, q)| Some((name.clone(), parse_nano(&q.0)?)))
}

/// A pod's effective requests as the scheduler counts them: per resource,
/// the larger of the containers' sum and the largest init container, plus
/// the pod overhead. (Restartable init containers, "sidecars", are counted
/// as plain init containers: none of the chaos tests uses them.)
pub(crate) fn pod_requests(pod: &Pod) -> BTreeMap<String, i128> {
    let mut total: BTreeMap<String, i128> = BTreeMap::new();
    let Some(spec) = &pod.spec else { return total };
    for (name, q) in spec.containers.iter().flat_map(requests_of) {
        *total.entry(name).or_default() += q;
    }
    for (name, q) in spec.init_containers.iter().flatten().flat_map(requests_of) {
        let entry = total.entry(name).or_default();
        *entry = (*entry).max(q);
    }
    for (name, q) in spec.overhead.iter().flatten() {
        if let Some(q) = parse_nano(&q.0) {
            *total.entry(name.clone()).or_default() += q;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quantities() {
        let table = [
            ("1", Some(1_000_000_000)),
            ("500m", Some(500_000_000)),
            ("0.5", Some(500_000_000)),
            ("1.5Gi", Some(1_610_612_736_000_000_000)),
            ("100Mi", Some(104_857_600_000_000_000)),
            ("2k", Some(2_000_000_000_000)),
            ("2e3", Some(2_000_000_000_000)),
            ("1n", Some(1)),
            ("0.1n", Some(1)),
            ("-1", Some(-1_000_000_000)),
            ("", None),
            ("1X", None),
            ("abc", None),
        ];
        for (q, want) in table {
            assert_eq!(parse_nano(q), want, "{q}");
        }
    }

    #[test]
    fn pod_requests_take_init_containers_and_overhead() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "p" },
            "spec": {
                "containers": [
                    { "name": "a", "resources": { "requests": { "cpu": "100m", "memory": "1Gi" } } },
                    { "name": "b", "resources": { "requests": { "cpu": "200m" } } }
                ],
                "initContainers": [
                    { "name": "i", "resources": { "requests": { "cpu": "1", "example.com/gpu": "1" } } }
                ],
                "overhead": { "cpu": "10m" }
            }
        }))
        .unwrap();
        let r = pod_requests(&pod);
        assert_eq!(r["cpu"], 1_010_000_000);
        assert_eq!(r["memory"], (1i128 << 30) * 1_000_000_000);
        assert_eq!(r["example.com/gpu"], 1_000_000_000);
    }
}
