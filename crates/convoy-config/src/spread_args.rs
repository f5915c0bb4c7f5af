//! `PodTopologySpreadArgs`, with upstream's defaults (`v1/defaults.go`:
//! `defaultingType` empty means `System`) and validation
//! (`validation/validation_pluginargs.go`, `ValidatePodTopologySpreadArgs`), kube-scheduler
//! v1.37.2. Messages are upstream's field errors without the field path, which the caller
//! prepends (`defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)`).

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

/// `PodTopologySpreadArgs`: the constraints applied to pods that have none.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTopologySpreadArgs {
    /// Constraints for pods without their own (only with `defaultingType: List`); they must
    /// not carry a `labelSelector`: it is deduced for each pod from its Services and
    /// controller.
    pub default_constraints: Vec<DefaultConstraint>,
    /// Where the default constraints come from; default `System`.
    pub defaulting_type: DefaultingType,
}

/// A `v1.TopologySpreadConstraint` as written in `defaultConstraints`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DefaultConstraint {
    /// The largest allowed difference of matching pods between two domains (> 0).
    pub max_skew: i32,
    /// The node label whose values are the domains.
    pub topology_key: String,
    /// `DoNotSchedule` (a Filter) or `ScheduleAnyway` (a Score).
    pub when_unsatisfiable: String,
    /// Forbidden here (kept to report it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<serde_json::Value>,
    /// Minimum number of eligible domains (nil means 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_domains: Option<i32>,
    /// `Honor` (nil) or `Ignore`: whether nodes the pod's node affinity excludes count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_affinity_policy: Option<String>,
    /// `Honor` or `Ignore` (nil): whether nodes with taints the pod does not tolerate count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_taints_policy: Option<String>,
    /// Pod label keys whose values are ANDed to the selector.
    #[serde(skip_serializing_if = "Vec::is_empty", deserialize_with = "string_list")]
    pub match_label_keys: Vec<String>,
}

fn string_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

/// `defaultingType` of [`PodTopologySpreadArgs`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum DefaultingType {
    /// Kubernetes' built-in constraints: hostname maxSkew 3 and zone maxSkew 5, both
    /// `ScheduleAnyway`.
    #[default]
    System,
    /// The `defaultConstraints` of the args.
    List,
}

impl DefaultingType {
    const NAMES: [&'static str; 2] = ["System", "List"];
}

impl fmt::Display for DefaultingType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Self::NAMES[*self as usize])
    }
}

impl<'de> Deserialize<'de> for DefaultingType {
    /// Upstream defaults an empty value to `System` and reports others as
    /// `Unsupported value: "X": supported values: "System", "List"`.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Option::<String>::deserialize(d)?.unwrap_or_default();
        match text.as_str() {
            "" | "System" => Ok(Self::System),
            "List" => Ok(Self::List),
            _ => Err(de::Error::custom(format!(
                "Unsupported value: {text:?}: supported values: \"System\", \"List\""
            ))),
        }
    }
}

/// The two `whenUnsatisfiable` values.
const WHEN_UNSATISFIABLE: [&str; 2] = ["DoNotSchedule", "ScheduleAnyway"];

impl PodTopologySpreadArgs {
    /// Upstream's `ValidatePodTopologySpreadArgs`: `(field path below args, message)` pairs.
    pub(crate) fn validate(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if self.defaulting_type == DefaultingType::System && !self.default_constraints.is_empty() {
            problems.push((
                "defaultingType".to_owned(),
                "Invalid value: \"System\": when .defaultConstraints are not empty".to_owned(),
            ));
        }
        for (i, c) in self.default_constraints.iter().enumerate() {
            let path = format!("defaultConstraints[{i}]");
            if c.max_skew <= 0 {
                problems.push((
                    format!("{path}.maxSkew"),
                    format!("Invalid value: {}: not in valid range (0, inf)", c.max_skew),
                ));
            }
            if c.topology_key.is_empty() {
                problems.push((
                    format!("{path}.topologyKey"),
                    "Required value: can not be empty".to_owned(),
                ));
            } else {
                for message in label_key_errors(&c.topology_key) {
                    problems.push((
                        format!("{path}.topologyKey"),
                        format!("Invalid value: {:?}: {message}", c.topology_key),
                    ));
                }
            }
            if c.when_unsatisfiable.is_empty() {
                problems.push((
                    format!("{path}.whenUnsatisfiable"),
                    "Required value: can not be empty".to_owned(),
                ));
            } else if !WHEN_UNSATISFIABLE.contains(&c.when_unsatisfiable.as_str()) {
                problems.push((
                    format!("{path}.whenUnsatisfiable"),
                    format!(
                        "Unsupported value: {:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
                        c.when_unsatisfiable
                    ),
                ));
            }
            if c.label_selector.is_some() {
                problems.push((
                    format!("{path}.labelSelector"),
                    "Forbidden: constraint must not define a selector, as they deduced for each pod"
                        .to_owned(),
                ));
            }
            let repeated = self.default_constraints[..i].iter().any(|other| {
                other.topology_key == c.topology_key
                    && other.when_unsatisfiable == c.when_unsatisfiable
            });
            if repeated {
                problems.push((
                    path,
                    format!(
                        "Duplicate value: \"{{{}, {}}}\"",
                        c.topology_key, c.when_unsatisfiable
                    ),
                ));
            }
        }
        problems
    }
}

const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_EXAMPLES: &str = "(e.g. 'MyName',  or 'my.name',  or '123-abc', ";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// Upstream `content.IsLabelKey` (a qualified name, `[prefix/]name`): its messages, none when
/// the key is valid.
fn label_key_errors(key: &str) -> Vec<String> {
    let key_regex_error = format!(
        "{LABEL_KEY_MSG} {LABEL_KEY_EXAMPLES}regex used for validation is '{LABEL_KEY_FMT}')"
    );
    let parts: Vec<&str> = key.split('/').collect();
    let mut errs = Vec::new();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                if prefix.len() > 253 {
                    errs.push("prefix part must be no more than 253 characters".to_owned());
                }
                if !is_dns1123_subdomain(prefix) {
                    errs.push(format!(
                        "prefix part {DNS1123_SUBDOMAIN_MSG} (e.g. 'example.com', regex used for validation is '{DNS1123_SUBDOMAIN_FMT}')"
                    ));
                }
            }
            name
        }
        _ => {
            errs.push(format!(
                "a valid label key {key_regex_error} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    if !is_label_name(name) {
        errs.push(format!("name part {key_regex_error}"));
    }
    errs
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn constraint(key: &str, when: &str) -> DefaultConstraint {
        DefaultConstraint {
            max_skew: 1,
            topology_key: key.to_owned(),
            when_unsatisfiable: when.to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn validates_like_upstream() {
        let list = |cs: Vec<DefaultConstraint>| PodTopologySpreadArgs {
            default_constraints: cs,
            defaulting_type: DefaultingType::List,
        };
        type Case = (&'static str, PodTopologySpreadArgs, Vec<(&'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            ("system, empty", PodTopologySpreadArgs::default(), vec![]),
            (
                "list, valid",
                list(vec![
                    constraint("kubernetes.io/hostname", "ScheduleAnyway"),
                    constraint("topology.kubernetes.io/zone", "DoNotSchedule"),
                ]),
                vec![],
            ),
            (
                "system with constraints",
                PodTopologySpreadArgs {
                    default_constraints: vec![constraint("zone", "ScheduleAnyway")],
                    defaulting_type: DefaultingType::System,
                },
                vec![(
                    "defaultingType",
                    "Invalid value: \"System\": when .defaultConstraints are not empty",
                )],
            ),
            (
                "maxSkew",
                list(vec![DefaultConstraint {
                    max_skew: 0,
                    ..constraint("zone", "DoNotSchedule")
                }]),
                vec![(
                    "defaultConstraints[0].maxSkew",
                    "Invalid value: 0: not in valid range (0, inf)",
                )],
            ),
            (
                "empty key and action",
                list(vec![constraint("", "")]),
                vec![
                    ("defaultConstraints[0].topologyKey", "Required value: can not be empty"),
                    ("defaultConstraints[0].whenUnsatisfiable", "Required value: can not be empty"),
                ],
            ),
            (
                "unsupported action",
                list(vec![constraint("zone", "Sometimes")]),
                vec![(
                    "defaultConstraints[0].whenUnsatisfiable",
                    "Unsupported value: \"Sometimes\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
                )],
            ),
            (
                "selector",
                list(vec![DefaultConstraint {
                    label_selector: Some(serde_json::json!({})),
                    ..constraint("zone", "DoNotSchedule")
                }]),
                vec![(
                    "defaultConstraints[0].labelSelector",
                    "Forbidden: constraint must not define a selector, as they deduced for each pod",
                )],
            ),
            (
                "repeated",
                list(vec![
                    constraint("zone", "DoNotSchedule"),
                    constraint("zone", "ScheduleAnyway"),
                    constraint("zone", "DoNotSchedule"),
                ]),
                vec![("defaultConstraints[2]", "Duplicate value: \"{zone, DoNotSchedule}\"")],
            ),
            (
                "bad key",
                list(vec![constraint("-zone", "DoNotSchedule")]),
                vec![(
                    "defaultConstraints[0].topologyKey",
                    "Invalid value: \"-zone\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                )],
            ),
        ];
        for (name, args, want) in cases {
            let got = args.validate();
            let want: Vec<(String, String)> =
                want.into_iter().map(|(f, m)| (f.to_owned(), m.to_owned())).collect();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn label_keys() {
        assert!(label_key_errors("example.com/zone").is_empty());
        assert!(label_key_errors("a").is_empty());
        assert_eq!(label_key_errors("/zone"), ["prefix part must be non-empty"]);
        assert!(label_key_errors("Example.com/zone")[0].starts_with("prefix part a lowercase"));
        assert!(label_key_errors("a/b/c")[0].starts_with("a valid label key must consist"));
        assert_eq!(label_key_errors(&"x".repeat(64)).len(), 1);
        assert_eq!(label_key_errors("zone/").len(), 2);
    }
}
