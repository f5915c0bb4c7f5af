//! Label filters that select workloads (`--label performance,-short`) and
//! Kubernetes label selectors that select pods (`labelSelector:` of
//! `barrier`, `deletePods` and `startCollectingMetrics`).

use std::collections::BTreeMap;

/// Upstream's workload label filter: a comma-separated list where `label`
/// or `+label` is required and `-label` is forbidden.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelFilter {
    required: Vec<String>,
    forbidden: Vec<String>,
}

impl LabelFilter {
    /// Parses `"performance,-short"`; empty items are ignored, so `""`
    /// selects everything.
    pub fn parse(s: &str) -> Self {
        let mut f = Self::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.strip_prefix('-') {
                Some(l) => f.forbidden.push(l.to_string()),
                None => f.required.push(item.trim_start_matches('+').to_string()),
            }
        }
        f
    }

    /// Whether a workload with `labels` is selected.
    pub fn matches<'a>(&self, labels: impl IntoIterator<Item = &'a str> + Clone) -> bool {
        let has = |l: &str| labels.clone().into_iter().any(|x| x == l);
        self.required.iter().all(|l| has(l)) && !self.forbidden.iter().any(|l| has(l))
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A Kubernetes label selector in its string form
/// (`app=web,tier!=db,env in (a,b),!legacy`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    /// Parses the string form; empty selects everything.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let bad = || format!("invalid label selector {s:?} at {part:?}");
            let req = if let Some(k) = part.strip_prefix('!') {
                Requirement::DoesNotExist(k.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, set)) = set_op(part, " notin ") {
                Requirement::NotIn(k, set.ok_or_else(bad)?)
            } else if let Some((k, set)) = set_op(part, " in ") {
                Requirement::In(k, set.ok_or_else(bad)?)
            } else if part.chars().all(|c| c.is_alphanumeric() || "-_./".contains(c)) {
                Requirement::Exists(part.to_string())
            } else {
                return Err(bad());
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// The selector `key=value,...` of upstream's `labelSelector:` maps.
    pub fn from_map(map: &BTreeMap<String, String>) -> Self {
        Self(map.iter().map(|(k, v)| Requirement::Equals(k.clone(), v.clone())).collect())
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v),
            Requirement::NotEquals(k, v) => get(k) != Some(v),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// `key op (a, b)`: the key and the values, `None` when the set is malformed.
fn set_op(part: &str, op: &str) -> Option<(String, Option<Vec<String>>)> {
    let (k, rest) = part.split_once(op)?;
    let set = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .map(|r| r.split(',').map(|v| v.trim().to_string()).collect());
    Some((k.trim().to_string(), set))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_filter_as_upstream() {
        let f = LabelFilter::parse("performance,-short");
        assert!(f.matches(["performance"]));
        assert!(!f.matches(["performance", "short"]));
        assert!(!f.matches(["integration-test"]));
        assert!(LabelFilter::parse("").matches(std::iter::empty::<&str>()));
        assert!(LabelFilter::parse("+short").matches(["short", "x"]));
    }

    #[test]
    fn selectors() {
        let labels: BTreeMap<String, String> =
            [("app", "web"), ("env", "prod")].map(|(k, v)| (k.into(), v.into())).into();
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=web,env=dev", false),
            ("env in (dev, prod)", true),
            ("env notin (dev,prod)", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("missing notin (x)", true),
        ];
        for (s, want) in cases {
            assert_eq!(Selector::parse(s).unwrap().matches(Some(&labels)), want, "{s}");
        }
        assert!(Selector::parse("env in dev").is_err());
        assert!(Selector::parse("a b").is_err());
    }
}
