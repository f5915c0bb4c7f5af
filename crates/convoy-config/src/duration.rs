//! Go `time.Duration` strings (`metav1.Duration` in YAML): `"15s"`, `"1m30s"`, `"500ms"`, `"1.5h"`,
//! parsed by `kube_core::Duration`; formatted the way Go prints them.

use std::time::Duration;

use kube_core::duration::ParseError;
use serde::{Deserialize, Deserializer};

/// Parses a Go duration string with [`kube_core::Duration`] (kube-rs' `metav1.Duration`).
/// Negative durations are rejected: every duration in the scheduler configuration is a span
/// of time that must not be negative.
///
/// Accepted units are those of Go's `time.ParseDuration`: `ns`, `us` (`µs`, `μs`), `ms`, `s`,
/// `m`, `h`; a bare `0` is allowed, other numbers need a unit.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let invalid = |why: &str| format!("invalid duration {text:?}: {why}");
    check_bounds(text).map_err(invalid)?;
    let parsed: kube_core::Duration = text.parse().map_err(|e| {
        invalid(match e {
            ParseError::NoUnit => "missing unit (one of ns, us, ms, s, m, h)",
            ParseError::InvalidUnit => "unknown unit (expected one of ns, us, ms, s, m, h)",
            _ => "expected a Go duration such as \"15s\", \"1m30s\", \"500ms\"",
        })
    })?;
    let magnitude = Duration::from(parsed);
    if parsed.is_negative() && !magnitude.is_zero() {
        return Err(invalid("must not be negative"));
    }
    // Go's limit: a time.Duration is an int64 count of nanoseconds.
    if magnitude.as_nanos() > i64::MAX as u128 {
        return Err(invalid("too large"));
    }
    Ok(magnitude)
}

/// What `kube_core::Duration`'s parser does not refuse itself: an empty string (or a bare
/// sign), which it reads as zero and Go refuses, and input that would make it panic (it
/// multiplies `std::time::Duration`s, which panics on overflow and on a negative factor such
/// as the `-5` of `"1s-5s"`). This is not a second parser: it only bounds the input.
fn check_bounds(text: &str) -> Result<(), &'static str> {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if unsigned.is_empty() {
        return Err("expected a Go duration such as \"15s\", \"1m30s\", \"500ms\"");
    }
    if unsigned.contains(['-', '+']) {
        return Err("a sign is allowed only at the start");
    }
    // At most 15 integer digits in all keep the sum below 10^15 hours, far from an overflow
    // of std's Duration (and far beyond Go's limit of about 2562047h, checked after parsing).
    let mut integer_digits = 0;
    let mut in_fraction = false;
    for c in unsigned.chars() {
        match c {
            '.' => in_fraction = true,
            '0'..='9' if !in_fraction => integer_digits += 1,
            '0'..='9' => {}
            _ => in_fraction = false,
        }
    }
    if integer_digits > 15 {
        return Err("too large");
    }
    Ok(())
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
            ("100ms", Duration::from_millis(100)),
            ("500ms", Duration::from_millis(500)),
            ("1.5s", Duration::from_millis(1500)),
            ("1.5h", Duration::from_secs(5400)),
            ("1h2m", Duration::from_secs(3720)),
            ("2h45m", Duration::from_secs(9900)),
            ("0", Duration::ZERO),
            ("-0s", Duration::ZERO),
            ("+10s", Duration::from_secs(10)),
            ("100us", Duration::from_micros(100)),
            ("3µs", Duration::from_micros(3)),
            ("7ns", Duration::from_nanos(7)),
            (".5s", Duration::from_millis(500)),
            ("2562047h", Duration::from_secs(2562047 * 3600)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text).as_ref(), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_bad_durations() {
        let cases: &[(&str, &str)] = &[
            ("", "invalid duration \"\""),
            ("-", "invalid duration \"-\""),
            ("15", "missing unit"),
            ("15x", "unknown unit"),
            ("-5s", "must not be negative"),
            ("-1s", "must not be negative"),
            ("abc", "invalid duration \"abc\""),
            ("s", "invalid duration"),
            ("1..5s", "invalid duration"),
            ("1e3s", "unknown unit"),
            ("1s-5s", "a sign is allowed only at the start"),
            ("2562048h", "too large"),
            ("9999999999999999h", "too large"),
            ("99999999999999h99999999999999h", "too large"),
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
