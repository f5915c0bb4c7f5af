//! Args of plugins whose args type the loader does not know: out-of-tree
//! plugins, registered by a binary of the user's own
//! (`convoy_api::Registry::register_with_args`). The loader keeps them as
//! JSON with the YAML position of every field ([`PositionedJson`]), and
//! checks them with the plugin's own decoder ([`ArgsCheck`], given through
//! [`crate::KnownPlugins::with_args`]): a field of the wrong type, an
//! unknown field or a failed check is reported as for in-tree args, with
//! file, line, column and field path.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

/// Checks the args of one out-of-tree plugin: the problems found, each as
/// (field path below `args`, such as `gpus[0].weight`, or empty for `args`
/// itself; message). Empty: the args decode and validate.
pub type ArgsCheck = Arc<dyn Fn(&serde_json::Value) -> Vec<(String, String)> + Send + Sync>;

/// Decodes `value` (the `args` of a plugin; null means defaults) into the
/// plugin's own args type, naming the field of an error
/// (`gpus[0].weight: invalid type: string "x", expected u32`).
pub fn decode_args<T: serde::de::DeserializeOwned + Default>(
    value: &serde_json::Value,
) -> Result<T, (String, String)> {
    if value.is_null() {
        return Ok(T::default());
    }
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(value.clone(), &mut track);
    T::deserialize(de)
        .map_err(|e| (crate::error::join_path("", Some(&track.path())), e.to_string()))
}

/// A YAML value as JSON, with the position of each of its nodes by field
/// path (`a.b[0]`; the empty path is the value itself).
#[derive(Debug, Clone, Default)]
pub(crate) struct PositionedJson {
    pub value: serde_json::Value,
    positions: BTreeMap<String, Location>,
}

impl PositionedJson {
    /// Without positions (args read before the entry's `name`, or from
    /// JSON).
    pub(crate) fn plain(value: serde_json::Value) -> Self {
        Self { value, positions: BTreeMap::new() }
    }

    /// The position of the node at `path`, or of its nearest ancestor.
    pub(crate) fn position_of(&self, path: &str) -> Option<&Location> {
        let mut path = path;
        loop {
            if let Some(l) = self.positions.get(path) {
                return Some(l);
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }

    fn from_node(node: Spanned<Node>) -> Self {
        let mut positions = BTreeMap::new();
        let value = flatten(node, String::new(), &mut positions);
        Self { value, positions }
    }
}

impl<'de> Deserialize<'de> for PositionedJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Option::<Spanned<Node>>::deserialize(d)? {
            Some(node) => Self::from_node(node),
            None => Self::plain(serde_json::Value::Null),
        })
    }
}

fn flatten(
    node: Spanned<Node>,
    path: String,
    positions: &mut BTreeMap<String, Location>,
) -> serde_json::Value {
    use serde_json::Value;
    positions.insert(path.clone(), node.referenced);
    match node.value {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(b),
        Node::Number(n) => Value::Number(n),
        Node::Str(s) => Value::String(s),
        Node::Seq(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| flatten(item, format!("{path}[{i}]"), positions))
                .collect(),
        ),
        Node::Map(entries) => Value::Object(
            entries
                .into_iter()
                .map(|(k, v)| {
                    let child = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    (k, flatten(v, child, positions))
                })
                .collect(),
        ),
    }
}

/// One YAML node, its children with their positions.
enum Node {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    Str(String),
    Seq(Vec<Spanned<Node>>),
    Map(Vec<(String, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        serde_json::Number::from_f64(v)
            .map(Node::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a JSON number")))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Spanned<Node>>()? {
            entries.push((k, v));
        }
        Ok(Node::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Default, Debug, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Args {
        #[serde(default)]
        min_healthy: u32,
        #[serde(default)]
        labels: Vec<String>,
    }

    #[test]
    fn keeps_positions_and_decodes_with_paths() {
        let yaml = "minHealthy: 2\nlabels:\n  - a\n  - 7\nextra:\n  deep: true\n";
        let pj: PositionedJson = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(pj.value["labels"][1], 7);
        let at = |p: &str| pj.position_of(p).map(|l| (l.line(), l.column()));
        assert_eq!(at("minHealthy"), Some((1, 13)));
        assert_eq!(at("labels[1]"), Some((4, 5)));
        assert_eq!(at("extra.deep"), Some((6, 9)));
        // A path below a scalar falls back to its nearest known ancestor.
        assert_eq!(at("labels[1].x"), at("labels[1]"));

        let err = decode_args::<Args>(&pj.value).unwrap_err();
        assert_eq!(err.0, "extra", "{}", err.1);
        assert!(err.1.contains("unknown field `extra`"), "{}", err.1);
        let wrong = serde_json::json!({"labels": ["a", 7]});
        let err = decode_args::<Args>(&wrong).unwrap_err();
        assert_eq!(err.0, "labels[1]");
        assert!(err.1.contains("invalid type"), "{}", err.1);
        assert_eq!(decode_args::<Args>(&serde_json::Value::Null), Ok(Args::default()));
        let ok = serde_json::json!({"minHealthy": 3});
        assert_eq!(decode_args::<Args>(&ok).unwrap().min_healthy, 3);
    }
}
