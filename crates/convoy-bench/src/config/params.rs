//! Workload parameters (`params:`), referenced from ops as `$name`, and Go
//! duration strings.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::template::Value;

/// A workload's parameters, remembering which ones were used: as upstream,
/// a parameter no op refers to is an error.
#[derive(Debug, Clone, Default)]
pub struct Params {
    values: BTreeMap<String, serde_json::Value>,
    used: BTreeSet<String>,
}

impl Params {
    /// Parameters from a workload's `params:` map.
    pub fn new(values: BTreeMap<String, serde_json::Value>) -> Self {
        Self { values, used: BTreeSet::new() }
    }

    fn lookup(&mut self, reference: &str) -> Result<&serde_json::Value, String> {
        let name = reference.strip_prefix('$').ok_or_else(|| {
            format!("{reference:?} is not a parameter reference (must start with \"$\")")
        })?;
        let v = self.values.get(name).ok_or_else(|| format!("parameter {name} is undefined"))?;
        self.used.insert(name.to_string());
        Ok(v)
    }

    /// The integer parameter `reference` (`$name`).
    pub fn int(&mut self, reference: &str) -> Result<i64, String> {
        let v = self.lookup(reference)?;
        match v.as_i64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)) {
            Some(i) => Ok(i),
            None => Err(format!("parameter {reference} must be an integer, got {v}")),
        }
    }

    /// The non-negative count parameter `reference`.
    pub fn count(&mut self, reference: &str) -> Result<usize, String> {
        let i = self.int(reference)?;
        usize::try_from(i).map_err(|_| format!("parameter {reference} must be >= 0, got {i}"))
    }

    /// A `<field>` / `<field>Param` pair of an op: the literal when given
    /// (validated non-negative), else the count parameter it names.
    pub fn count_or(
        &mut self,
        field: &str,
        value: Option<i64>,
        param: &Option<String>,
    ) -> Result<usize, String> {
        match (value, param) {
            (Some(c), _) => Ok(c.max(0) as usize),
            (None, Some(p)) => self.count(p),
            (None, None) => Err(format!("{field} or {field}Param is required")),
        }
    }

    /// The boolean parameter `reference`.
    pub fn bool(&mut self, reference: &str) -> Result<bool, String> {
        let v = self.lookup(reference)?;
        v.as_bool().ok_or_else(|| format!("parameter {reference} must be a boolean, got {v}"))
    }

    /// The duration parameter `reference` (a Go duration string, `"10s"`).
    pub fn duration(&mut self, reference: &str) -> Result<Duration, String> {
        let v = self.lookup(reference)?;
        let s = v.as_str().ok_or_else(|| {
            format!("parameter {reference} must be a duration string such as \"10s\", got {v}")
        })?;
        parse_duration(s).map_err(|e| format!("parameter {reference}: {e}"))
    }

    /// A template parameter: a literal, or `$name` resolved from the
    /// workload's parameters, or `$name|default` (upstream's
    /// `resolveTemplateParams`: the default, YAML after the first `|`,
    /// when the workload does not define `name`).
    pub fn template_value(&mut self, v: &serde_json::Value) -> Result<Value, String> {
        let resolved = match v.as_str() {
            Some(s) if s.starts_with('$') => match s.split_once('|') {
                Some((name, default))
                    if name.len() > 1 && !self.values.contains_key(&name[1..]) =>
                {
                    // Go's yaml.Unmarshal of "" is nil (`$selectors|`).
                    if default.trim().is_empty() {
                        return Ok(Value::Null);
                    }
                    serde_saphyr::from_str::<serde_json::Value>(default)
                        .map_err(|e| format!("parameter {} default {default:?}: {e}", &name[1..]))?
                }
                Some((name, _)) if name.len() > 1 => self.lookup(name)?.clone(),
                _ => self.lookup(s)?.clone(),
            },
            _ => v.clone(),
        };
        Ok(Value::from_json(&resolved))
    }

    /// The parameters nobody used, sorted.
    pub fn unused(&self) -> Vec<&str> {
        self.values.keys().filter(|k| !self.used.contains(*k)).map(String::as_str).collect()
    }
}

/// Parses a Go duration (`"1h2m3.5s"`, `"300ms"`, `"10us"`, `"0"`), not negative: the
/// scheduler configuration's parser (`kube_core::Duration` underneath).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    convoy_config::parse_go_duration(s)
}

/// Formats a duration as Go does for simple values (`10ms`, `1.5s`, `250µs`).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0s".into()
    } else if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{}µs", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{}ms", ns as f64 / 1e6)
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

/// Checks a `<field>` / `<field>Param` pair: one is given, the literal is
/// at least `min` (0 or 1), the parameter is a `$param` reference.
pub fn check_count(
    op: &str,
    field: &str,
    value: Option<i64>,
    param: &Option<String>,
    min: i64,
) -> Result<(), String> {
    match (value, param) {
        (Some(c), _) if c < min => {
            let bound = if min == 1 { "> 0".to_string() } else { format!(">= {min}") };
            Err(format!("{op}.{field} must be {bound}, got {c}"))
        }
        (Some(_), _) => Ok(()),
        (None, p @ Some(_)) => check_param(op, &format!("{field}Param"), p),
        (None, None) => Err(format!("{op}: {field} or {field}Param is required")),
    }
}

pub(crate) fn check_param(op: &str, field: &str, p: &Option<String>) -> Result<(), String> {
    match p {
        Some(p) if !p.starts_with('$') => {
            Err(format!("{op}.{field} must be a \"$param\" reference, got {p:?}"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_as_go() {
        let ok = [
            ("10s", 10_000),
            ("500ms", 500),
            ("1m30s", 90_000),
            ("1.5s", 1_500),
            ("2h", 7_200_000),
            ("0", 0),
        ];
        for (s, ms) in ok {
            assert_eq!(parse_duration(s).unwrap(), Duration::from_millis(ms), "{s}");
        }
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        for bad in ["", "10", "5x", "-1s", "s", "abc"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(format_duration(Duration::from_millis(10)), "10ms");
        assert_eq!(format_duration(Duration::from_secs(1)), "1s");
        assert_eq!(format_duration(Duration::from_micros(100)), "100µs");
    }

    #[test]
    fn params_track_use_and_types() {
        let mut p = Params::new(
            serde_json::from_str(r#"{"nodes": 5, "pods": 10.0, "d": "1s", "s": "x", "unused": 1}"#)
                .unwrap(),
        );
        assert_eq!(p.count("$nodes").unwrap(), 5);
        assert_eq!(p.count("$pods").unwrap(), 10);
        assert_eq!(p.duration("$d").unwrap(), Duration::from_secs(1));
        assert!(p.int("$s").unwrap_err().contains("must be an integer"));
        assert!(p.int("nodes").unwrap_err().contains("must start with \"$\""));
        assert!(p.int("$nope").unwrap_err().contains("parameter nope is undefined"));
        assert_eq!(p.unused(), vec!["unused"]);

        // `$name|default`: the parameter when defined, else the default.
        let mut p = Params::new(serde_json::from_str(r#"{"n": 5}"#).unwrap());
        assert_eq!(p.template_value(&"$n|64".into()).unwrap(), Value::Int(5));
        assert_eq!(p.template_value(&"$m|64".into()).unwrap(), Value::Int(64));
        assert_eq!(p.template_value(&"$m|abc".into()).unwrap(), Value::Str("abc".into()));
        assert_eq!(p.template_value(&"$m|".into()).unwrap(), Value::Null);
        let list = p.template_value(&"$m|[{a: 1}]".into()).unwrap();
        assert_eq!(list, Value::List(vec![Value::Map([("a".into(), Value::Int(1))].into())]));
        assert!(p.unused().is_empty());
    }
}
