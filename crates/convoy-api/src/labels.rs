//! Label selectors (upstream `apimachinery/pkg/labels` and
//! `metav1.LabelSelectorAsSelector`): parsed once, matched many times
//! without allocating.
//!
//! Semantics as upstream: a nil `LabelSelector` selects nothing, an empty
//! one (`{}`) selects everything; `NotIn` and `DoesNotExist` match objects
//! without the key.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// An object's labels.
pub type Labels = BTreeMap<String, String>;

/// The labels of an object without any.
pub fn no_labels() -> &'static Labels {
    static EMPTY: Labels = BTreeMap::new();
    &EMPTY
}

/// A requirement's operator.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The key has one of the values (`matchLabels` entries are `In` with one value).
    In,
    /// The key is absent or has none of the values.
    NotIn,
    /// The key is present.
    Exists,
    /// The key is absent.
    DoesNotExist,
}

/// One requirement of a selector: `key op values`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: Box<str>,
    op: Operator,
    values: Box<[Box<str>]>,
}

impl Requirement {
    /// A requirement, validated as upstream's `labels.NewRequirement`: a
    /// qualified-name key, `In`/`NotIn` with at least one value,
    /// `Exists`/`DoesNotExist` with none, and valid label values.
    pub fn new(key: &str, op: Operator, values: &[String]) -> Result<Self, String> {
        validate_key(key)?;
        match op {
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(format!(
                    "{key}: for 'in', 'notin' operators, values set can't be empty"
                ));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(format!(
                    "{key}: values set must be empty for exists and does not exist"
                ));
            }
            _ => {}
        }
        for v in values {
            validate_value(key, v)?;
        }
        let mut values: Vec<Box<str>> = values.iter().map(|v| Box::from(v.as_str())).collect();
        values.sort();
        values.dedup();
        Ok(Self { key: Box::from(key), op, values: values.into_boxed_slice() })
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> &Operator {
        &self.op
    }

    /// The values (sorted, without duplicates).
    pub fn values(&self) -> &[Box<str>] {
        &self.values
    }

    /// Whether the labels satisfy this requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        let has = |v: &str| self.values.iter().any(|x| &**x == v);
        match self.op {
            Operator::In => labels.get(&*self.key).is_some_and(|v| has(v)),
            Operator::NotIn => labels.get(&*self.key).is_none_or(|v| !has(v)),
            Operator::Exists => labels.contains_key(&*self.key),
            Operator::DoesNotExist => !labels.contains_key(&*self.key),
        }
    }
}

/// A compiled label selector.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Selector {
    /// Selects nothing (a nil `LabelSelector`).
    #[default]
    Nothing,
    /// Selects objects that satisfy every requirement; no requirement
    /// selects everything (an empty `LabelSelector`).
    All(Box<[Requirement]>),
}

impl Selector {
    /// Selects every object.
    pub fn everything() -> Self {
        Selector::All(Box::new([]))
    }

    /// Upstream `metav1.LabelSelectorAsSelector`: `None` selects nothing,
    /// an empty selector everything. Errors name the offending
    /// requirement (`key: ...`).
    pub fn from_label_selector(sel: Option<&LabelSelector>) -> Result<Self, String> {
        let Some(sel) = sel else { return Ok(Selector::Nothing) };
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push(Requirement::new(k, Operator::In, std::slice::from_ref(v))?);
        }
        for e in sel.match_expressions.iter().flatten() {
            reqs.push(requirement_of(e)?);
        }
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Selector::All(reqs.into_boxed_slice()))
    }

    /// Upstream `labels.SelectorFromSet`: `key = value` for every entry; an
    /// empty set selects everything. Keys and values are not validated (the
    /// API server has).
    pub fn from_set(set: &Labels) -> Self {
        let reqs = set
            .iter()
            .map(|(k, v)| Requirement {
                key: Box::from(k.as_str()),
                op: Operator::In,
                values: Box::new([Box::from(v.as_str())]),
            })
            .collect();
        Selector::All(reqs)
    }

    /// Whether the labels match.
    pub fn matches(&self, labels: &Labels) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::All(reqs) => reqs.iter().all(|r| r.matches(labels)),
        }
    }

    /// Whether this selector selects everything (upstream `Empty()`).
    pub fn is_everything(&self) -> bool {
        matches!(self, Selector::All(r) if r.is_empty())
    }

    /// Whether this selector selects nothing.
    pub fn is_nothing(&self) -> bool {
        matches!(self, Selector::Nothing)
    }

    /// The requirements (none for [`Selector::Nothing`]).
    pub fn requirements(&self) -> &[Requirement] {
        match self {
            Selector::Nothing => &[],
            Selector::All(r) => r,
        }
    }

    /// This selector with more requirements (upstream `Selector.Add`);
    /// [`Selector::Nothing`] stays nothing.
    pub fn with(self, more: impl IntoIterator<Item = Requirement>) -> Self {
        match self {
            Selector::Nothing => Selector::Nothing,
            Selector::All(r) => {
                let mut v = r.into_vec();
                v.extend(more);
                v.sort_by(|a, b| a.key.cmp(&b.key));
                Selector::All(v.into_boxed_slice())
            }
        }
    }
}

impl fmt::Display for Selector {
    /// Upstream's string form (`app=web,tier in (a,b),!legacy`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reqs = match self {
            Selector::Nothing => return f.write_str("<none>"),
            Selector::All(r) => r,
        };
        for (i, r) in reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let vals = r.values.join(",");
            match r.op {
                Operator::In if r.values.len() == 1 => write!(f, "{}={}", r.key, vals)?,
                Operator::In => write!(f, "{} in ({vals})", r.key)?,
                Operator::NotIn => write!(f, "{} notin ({vals})", r.key)?,
                Operator::Exists => write!(f, "{}", r.key)?,
                Operator::DoesNotExist => write!(f, "!{}", r.key)?,
            }
        }
        Ok(())
    }
}

fn requirement_of(e: &LabelSelectorRequirement) -> Result<Requirement, String> {
    let op = match e.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => return Err(format!("{other:?} is not a valid label selector operator")),
    };
    Requirement::new(&e.key, op, e.values.as_deref().unwrap_or(&[]))
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// A name part (≤ 63 characters, alphanumeric at both ends, `-_.` inside).
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(is_name_char)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A DNS subdomain (the optional prefix of a key).
fn valid_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Upstream `validateLabelKey` (a qualified name: `[prefix/]name`).
pub fn validate_key(key: &str) -> Result<(), String> {
    let ok = match key.split_once('/') {
        Some((prefix, name)) => valid_subdomain(prefix) && valid_name(name),
        None => valid_name(key),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "key: Invalid value: {key:?}: a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, with an optional DNS subdomain prefix and '/'"
        ))
    }
}

/// Upstream `validateLabelValue` (empty, or a name part).
pub fn validate_value(key: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || valid_name(v) {
        Ok(())
    } else {
        Err(format!(
            "values[{key}]: Invalid value: {v:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sel(v: serde_json::Value) -> Result<Selector, String> {
        let s: LabelSelector = serde_json::from_value(v).unwrap();
        Selector::from_label_selector(Some(&s))
    }

    #[test]
    fn nil_selects_nothing_and_empty_everything() {
        let l = labels(&[("app", "web")]);
        assert!(!Selector::from_label_selector(None).unwrap().matches(&l));
        let all = sel(json!({})).unwrap();
        assert!(all.is_everything());
        assert!(all.matches(&l) && all.matches(no_labels()));
    }

    #[test]
    fn operators_as_upstream() {
        let s = sel(json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "team", "operator": "Exists"}
            ]
        }))
        .unwrap();
        let cases = [
            (labels(&[("app", "web"), ("tier", "a"), ("team", "x")]), true),
            (labels(&[("app", "web"), ("tier", "c"), ("team", "x")]), false),
            (labels(&[("app", "web"), ("tier", "b"), ("team", "x"), ("legacy", "1")]), false),
            (labels(&[("app", "web"), ("tier", "b"), ("team", "x"), ("env", "prod")]), false),
            (labels(&[("app", "web"), ("tier", "b"), ("team", "x"), ("env", "dev")]), true),
            (labels(&[("app", "web"), ("tier", "b")]), false),
            (labels(&[("app", "db"), ("tier", "a"), ("team", "x")]), false),
        ];
        for (l, want) in cases {
            assert_eq!(s.matches(&l), want, "{l:?}");
        }
        assert_eq!(s.to_string(), "app=web,env notin (prod),!legacy,team,tier in (a,b)");
    }

    #[test]
    fn invalid_selectors_name_the_problem() {
        let cases = [
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
                "values set can't be empty",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "must be empty",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
                "not a valid label selector operator",
            ),
            (json!({"matchLabels": {"bad key": "x"}}), "bad key"),
            (json!({"matchLabels": {"k": "bad value"}}), "bad value"),
        ];
        for (v, want) in cases {
            let e = sel(v.clone()).unwrap_err();
            assert!(e.contains(want), "{v}: {e}");
        }
        assert!(sel(json!({"matchLabels": {"example.com/k": "v_1.2-x"}})).is_ok());
    }

    #[test]
    fn from_set_and_with() {
        let s = Selector::from_set(&labels(&[("app", "web")]));
        assert!(s.matches(&labels(&[("app", "web"), ("x", "y")])));
        assert!(Selector::from_set(&Labels::new()).is_everything());
        let r = Requirement::new("x", Operator::In, &["y".to_string()]).unwrap();
        let s = s.with([r.clone()]);
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(s.matches(&labels(&[("app", "web"), ("x", "y")])));
        assert!(Selector::Nothing.with([r]).is_nothing());
    }
}
