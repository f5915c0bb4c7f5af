//! Compiled node selectors (upstream `component-helpers/scheduling/corev1/nodeaffinity`
//! and `plugins/helper/node_affinity.go`): parsed once per cycle, then
//! matched against many nodes without allocating.
//!
//! Shared by NodeAffinity (its Filter and Score), PodTopologySpread (which
//! nodes count toward a spread, `nodeAffinityPolicy: Honor`), VolumeBinding
//! and [`volumes`](super::volumes) (a PersistentVolume's node affinity) and
//! DynamicResources (the node selectors of ResourceSlices and allocations).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PreferredSchedulingTerm,
};

use convoy_api::NodeInfo;

/// What a selector looks at on a node: its name and labels, borrowed from a
/// `NodeInfo` (Filter/Score) or a `Node` (event hints).
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    name: &'a str,
    labels: Option<&'a BTreeMap<String, String>>,
    exists: bool,
}

impl<'a> NodeView<'a> {
    /// The view of a node object.
    pub fn of_node(node: &'a Node) -> Self {
        Self {
            name: node.metadata.name.as_deref().unwrap_or(""),
            labels: node.metadata.labels.as_ref(),
            exists: true,
        }
    }

    /// A view of labels alone, as upstream's `CheckNodeAffinity` builds a
    /// node for a PersistentVolume's node affinity (no name: a
    /// `metadata.name` field requirement never matches).
    pub fn of_labels(labels: Option<&'a BTreeMap<String, String>>) -> Self {
        Self { name: "", labels, exists: true }
    }

    /// The view of a node info (a placeholder without a node matches nothing).
    pub fn of_info(info: &'a NodeInfo) -> Self {
        match info.node() {
            Some(n) => Self { name: info.name(), labels: n.metadata.labels.as_ref(), exists: true },
            None => Self { name: info.name(), labels: None, exists: false },
        }
    }

    fn label(&self, key: &str) -> Option<&'a str> {
        self.labels?.get(key).map(String::as_str)
    }
}

/// The only field a `matchFields` requirement can name.
pub const OBJECT_NAME_FIELD: &str = "metadata.name";

/// A label requirement's operator, with its parsed values.
#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

/// One `matchExpressions` requirement.
#[derive(Debug, Clone, PartialEq)]
struct LabelReq {
    key: String,
    op: LabelOp,
}

impl LabelReq {
    /// Upstream `labels.NewRequirement` validation (apimachinery v0.37.2):
    /// the key is a qualified name, every value a label value, and the
    /// operator's value count holds.
    fn parse(r: &NodeSelectorRequirement) -> Result<Self, String> {
        let values = r.values.as_deref().unwrap_or(&[]);
        convoy_api::labels::validate_key(&r.key)?;
        for v in values {
            convoy_api::labels::validate_value(&r.key, v)?;
        }
        let single_int = || -> Result<i64, String> {
            match values {
                [v] => v.parse::<i64>().map_err(|_| {
                    format!("{}: for 'Gt', 'Lt' operators, the value must be an integer", r.key)
                }),
                _ => Err(format!(
                    "{}: for 'Gt', 'Lt' operators, exactly one value is required",
                    r.key
                )),
            }
        };
        let op = match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!(
                    "{}: for 'in', 'notin' operators, values set can't be empty",
                    r.key
                ));
            }
            "In" => LabelOp::In(values.to_vec()),
            "NotIn" => LabelOp::NotIn(values.to_vec()),
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!(
                    "{}: values set must be empty for exists and does not exist",
                    r.key
                ));
            }
            "Exists" => LabelOp::Exists,
            "DoesNotExist" => LabelOp::DoesNotExist,
            "Gt" => LabelOp::Gt(single_int()?),
            "Lt" => LabelOp::Lt(single_int()?),
            other => {
                return Err(format!("{}: {other:?} is not a valid label selector operator", r.key));
            }
        };
        Ok(Self { key: r.key.clone(), op })
    }

    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (LabelOp::In(vs), Some(v)) => vs.iter().any(|x| x == v),
            (LabelOp::In(_), None) => false,
            (LabelOp::NotIn(vs), Some(v)) => !vs.iter().any(|x| x == v),
            (LabelOp::NotIn(_), None) => true,
            (LabelOp::Exists, v) => v.is_some(),
            (LabelOp::DoesNotExist, v) => v.is_none(),
            (LabelOp::Gt(want), Some(v)) => v.parse::<i64>().is_ok_and(|n| n > *want),
            (LabelOp::Lt(want), Some(v)) => v.parse::<i64>().is_ok_and(|n| n < *want),
            (LabelOp::Gt(_) | LabelOp::Lt(_), None) => false,
        }
    }
}

/// One `matchFields` requirement: `field == value` or `field != value`.
#[derive(Debug, Clone, PartialEq)]
struct FieldReq {
    key: String,
    value: String,
    equal: bool,
}

impl FieldReq {
    /// Upstream `nodeSelectorRequirementsAsFieldSelector`: In/NotIn with one value.
    fn parse(r: &NodeSelectorRequirement) -> Result<Self, String> {
        let values = r.values.as_deref().unwrap_or(&[]);
        let equal = match r.operator.as_str() {
            "In" => true,
            "NotIn" => false,
            other => {
                return Err(format!(
                    "{}: {other:?} is not supported for matchFields (In, NotIn)",
                    r.key
                ));
            }
        };
        match values {
            [v] => Ok(Self { key: r.key.clone(), value: v.clone(), equal }),
            _ => Err(format!("{}: matchFields values must have one element", r.key)),
        }
    }

    fn matches(&self, node_name: &str) -> bool {
        // A node's only selectable field is its name; others read as "".
        let actual = if self.key == OBJECT_NAME_FIELD { node_name } else { "" };
        (actual == self.value) == self.equal
    }
}

/// A `NodeSelectorTerm`: its expressions and fields are ANDed.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Term {
    /// Whether the term has neither expressions nor fields (selects nothing).
    pub fn is_empty_term(t: &NodeSelectorTerm) -> bool {
        t.match_expressions.as_ref().is_none_or(Vec::is_empty)
            && t.match_fields.as_ref().is_none_or(Vec::is_empty)
    }

    /// Parses a term; an error names the bad requirement.
    pub fn parse(t: &NodeSelectorTerm) -> Result<Self, String> {
        let labels =
            t.match_expressions.iter().flatten().map(LabelReq::parse).collect::<Result<_, _>>()?;
        let fields =
            t.match_fields.iter().flatten().map(FieldReq::parse).collect::<Result<_, _>>()?;
        Ok(Self { labels, fields })
    }

    /// Whether the node satisfies every requirement (an empty term matches nothing).
    pub fn matches(&self, node: NodeView<'_>) -> bool {
        if self.labels.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.labels.iter().all(|r| r.matches(node.label(&r.key)))
            && self.fields.iter().all(|f| f.matches(node.name))
    }
}

/// A compiled `NodeSelector`: terms ORed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompiledNodeSelector {
    terms: Vec<Term>,
}

impl CompiledNodeSelector {
    /// Strict parse (upstream `NewNodeSelector`): any bad term is an error.
    /// Empty terms are dropped (they select nothing).
    pub fn parse(ns: &NodeSelector) -> Result<Self, String> {
        let terms = ns
            .node_selector_terms
            .iter()
            .filter(|t| !Term::is_empty_term(t))
            .map(Term::parse)
            .collect::<Result<_, _>>()?;
        Ok(Self { terms })
    }

    /// Lenient parse (upstream `NewLazyErrorNodeSelector`): a bad term never
    /// matches, the others still do.
    pub fn parse_lenient(ns: &NodeSelector) -> Self {
        let terms = ns
            .node_selector_terms
            .iter()
            .filter(|t| !Term::is_empty_term(t))
            .filter_map(|t| Term::parse(t).ok())
            .collect();
        Self { terms }
    }

    /// Whether any term matches the node.
    pub fn matches(&self, node: NodeView<'_>) -> bool {
        self.terms.iter().any(|t| t.matches(node))
    }
}

/// A pod's required placement: `spec.nodeSelector` AND the required node
/// affinity (upstream `RequiredNodeAffinity`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequiredNodeAffinity {
    node_selector: Vec<(String, String)>,
    affinity: Option<CompiledNodeSelector>,
}

impl RequiredNodeAffinity {
    /// Compiles the pod's nodeSelector and required node affinity
    /// (upstream `GetRequiredNodeAffinity`; parsing errors make a term
    /// match nothing, for compatibility).
    pub fn of_pod(pod: &Pod) -> Self {
        let Some(spec) = pod.spec.as_ref() else { return Self::default() };
        let node_selector =
            spec.node_selector.iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
        let affinity = required_terms(pod).map(CompiledNodeSelector::parse_lenient);
        Self { node_selector, affinity }
    }

    /// Whether the node satisfies the pod's nodeSelector and required affinity.
    pub fn matches(&self, node: NodeView<'_>) -> bool {
        if !node.exists {
            return false;
        }
        self.node_selector.iter().all(|(k, v)| node.label(k) == Some(v.as_str()))
            && self.affinity.as_ref().is_none_or(|a| a.matches(node))
    }
}

/// The pod's `requiredDuringSchedulingIgnoredDuringExecution`, if any.
pub fn required_terms(pod: &Pod) -> Option<&NodeSelector> {
    pod.spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

/// Upstream's node-name shortcut: when every required term names nodes by
/// `metadata.name In`, the union over terms of the names each term allows
/// (the intersection of its `In` lists). `Some(empty)` means the terms
/// conflict and no node can match; `None` means all nodes are eligible.
pub fn required_node_names(ns: &NodeSelector) -> Option<Vec<String>> {
    if ns.node_selector_terms.is_empty() {
        return None;
    }
    let mut all: Vec<String> = Vec::new();
    for t in &ns.node_selector_terms {
        let mut term_names: Option<Vec<&String>> = None;
        for r in t.match_fields.iter().flatten() {
            if r.key != OBJECT_NAME_FIELD || r.operator != "In" {
                continue;
            }
            let values = r.values.as_deref().unwrap_or(&[]);
            term_names = Some(match term_names {
                None => values.iter().collect(),
                Some(prev) => prev.into_iter().filter(|n| values.contains(n)).collect(),
            });
        }
        // A term without name fields lets every node through (terms are ORed).
        for n in term_names? {
            if !all.contains(n) {
                all.push(n.clone());
            }
        }
    }
    Some(all)
}

/// Compiled `preferredDuringSchedulingIgnoredDuringExecution` terms with
/// their weights (upstream `PreferredSchedulingTerms`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreferredTerms {
    terms: Vec<(Term, i64)>,
}

impl PreferredTerms {
    /// Strict parse; terms with weight 0 or no requirements are dropped.
    pub fn parse(terms: &[PreferredSchedulingTerm]) -> Result<Self, String> {
        let terms = terms
            .iter()
            .filter(|t| t.weight != 0 && !Term::is_empty_term(&t.preference))
            .map(|t| Term::parse(&t.preference).map(|term| (term, i64::from(t.weight))))
            .collect::<Result<_, _>>()?;
        Ok(Self { terms })
    }

    /// The sum of the weights of the terms the node matches.
    pub fn score(&self, node: NodeView<'_>) -> i64 {
        self.terms.iter().filter(|(t, _)| t.matches(node)).map(|(_, w)| w).sum()
    }

    /// Whether there is no term.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}
