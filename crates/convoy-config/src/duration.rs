//! Go `time.Duration` strings (`metav1.Duration` in YAML): `"15s"`, `"1m30s"`, `"500ms"`, `"1.5h"`.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Parses a Go duration string. Negative durations are rejected: every duration in the
/// scheduler configuration is a span of time that must not be negative.
///
/// Accepted units are those of Go's `time.ParseDuration`: `ns`, `us` (`µs`, `μs`), `ms`, `s`,
/// `m`, `h`; a bare `0` is allowed, other numbers need a unit.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let invalid = || {
        format!(
            "invalid duration {text:?} (expected a Go duration such as \"15s\", \"1m30s\", \"500ms\")"
        )
    };
    let (negative, s) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let magnitude = parse_unsigned(s, text).map_err(|e| e.unwrap_or_else(invalid))?;
    if negative && !magnitude.is_zero() {
        return Err(format!("invalid duration {text:?}: must not be negative"));
    }
    Ok(magnitude)
}

/// Parses the unsigned part `s` of Go duration `text`; `Err(None)` for a generic syntax error.
fn parse_unsigned(s: &str, text: &str) -> Result<Duration, Option<String>> {
    let invalid = || None;
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut rest = s;
    let mut total_nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_len =
            rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(|| {
                Some(format!(
                    "invalid duration {text:?}: missing unit (one of ns, us, ms, s, m, h)"
                ))
            })?;
        let number = &rest[..number_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            unit => {
                return Err(Some(format!(
                    "invalid duration {text:?}: unknown unit {unit:?} (expected one of ns, us, ms, s, m, h)"
                )));
            }
        };
        total_nanos += value * nanos_per_unit;
        rest = &rest[unit_len..];
    }
    // Go's limit: a time.Duration is an int64 count of nanoseconds.
    if total_nanos > i64::MAX as f64 {
        return Err(Some(format!("invalid duration {text:?}: too large")));
    }
    Ok(Duration::from_nanos(total_nanos.round() as u64))
}

/// Formats a duration the way Go prints it (`1m30s`, `500ms`, `0s`).
pub fn format_go_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        return if nanos.is_multiple_of(1_000_000) {
            format!("{}ms", nanos / 1_000_000)
        } else if nanos.is_multiple_of(1_000) {
            format!("{}us", nanos / 1_000)
        } else {
            format!("{nanos}ns")
        };
    }
    let secs = duration.as_secs();
    let (hours, minutes, seconds) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let sub = duration.subsec_nanos();
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    if sub == 0 {
        out.push_str(&format!("{seconds}s"));
    } else {
        let frac = format!("{sub:09}");
        out.push_str(&format!("{seconds}.{}s", frac.trim_end_matches('0')));
    }
    out
}

/// `deserialize_with` helper: a Go duration string.
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_go_duration(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        let cases: &[(&str, Duration)] = &[
            ("15s", Duration::from_secs(15)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1.5h", Duration::from_secs(5400)),
            ("2h45m", Duration::from_secs(9900)),
            ("0", Duration::ZERO),
            ("-0s", Duration::ZERO),
            ("+10s", Duration::from_secs(10)),
            ("100us", Duration::from_micros(100)),
            ("3µs", Duration::from_micros(3)),
            ("7ns", Duration::from_nanos(7)),
            (".5s", Duration::from_millis(500)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text).as_ref(), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_bad_durations() {
        let cases: &[(&str, &str)] = &[
            ("", "invalid duration"),
            ("15", "missing unit"),
            ("15x", "unknown unit \"x\""),
            ("-5s", "must not be negative"),
            ("s", "invalid duration"),
            ("1..5s", "invalid duration"),
            ("1e3s", "unknown unit \"e\""),
        ];
        for (text, want) in cases {
            let err = parse_go_duration(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(Duration, &str)] = &[
            (Duration::ZERO, "0s"),
            (Duration::from_secs(15), "15s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1.5s"),
        ];
        for (duration, want) in cases {
            assert_eq!(format_go_duration(*duration), *want);
        }
    }
}
