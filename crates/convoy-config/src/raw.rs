//! The file as written: strict serde types (unknown fields are errors, as upstream's strict
//! decoding) that keep YAML positions of the names later checks refer to.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_saphyr::Spanned;

use crate::args::{self, PluginArgs};
use crate::types::{ClientConnection, LeaderElection};

/// `apiVersion` and `kind` only, read before the rest so that a file of another version gets
/// a message about the version rather than about its fields.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TypeMeta {
    #[serde(default)]
    pub api_version: Option<Spanned<String>>,
    #[serde(default)]
    pub kind: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[allow(dead_code)] // checked through TypeMeta
    pub api_version: Option<String>,
    #[allow(dead_code)]
    pub kind: Option<String>,
    #[serde(default = "default_parallelism", deserialize_with = "positive_u32")]
    pub parallelism: u32,
    #[serde(default, deserialize_with = "percentage")]
    pub percentage_of_nodes_to_score: Option<u32>,
    #[serde(default = "default_initial_backoff", deserialize_with = "positive_u64")]
    pub pod_initial_backoff_seconds: u64,
    #[serde(default)]
    pub pod_max_backoff_seconds: Option<Spanned<u64>>,
    #[serde(default)]
    pub leader_election: LeaderElection,
    #[serde(default)]
    pub client_connection: ClientConnection,
    /// Refused when `true` (upstream's default when absent: absent loads).
    #[serde(default)]
    pub enable_profiling: Option<Spanned<bool>>,
    /// Refused when `true`.
    #[serde(default)]
    pub enable_contention_profiling: Option<Spanned<bool>>,
    #[serde(default)]
    pub delay_cache_until_active: bool,
    #[serde(default)]
    pub extenders: Option<Spanned<Vec<serde_json::Value>>>,
    #[serde(default)]
    pub profiles: Vec<RawProfile>,
}

fn default_parallelism() -> u32 {
    16
}

fn default_initial_backoff() -> u64 {
    1
}

fn positive_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    match u32::deserialize(d)? {
        0 => Err(de::Error::custom("must be greater than 0")),
        n => Ok(n),
    }
}

/// The longest backoff Convoy accepts, in seconds (a year). Upstream sets
/// no bound; a larger value could only mean "never retry", and would
/// overflow the clock arithmetic of the queue.
pub const MAX_BACKOFF_SECONDS: u64 = 365 * 24 * 3600;

fn positive_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match u64::deserialize(d)? {
        0 => Err(de::Error::custom("must be greater than 0")),
        n if n > MAX_BACKOFF_SECONDS => Err(de::Error::custom(format!(
            "{n} is more than Convoy accepts ({MAX_BACKOFF_SECONDS} seconds, a year)"
        ))),
        n => Ok(n),
    }
}

fn percentage<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match Option::<i64>::deserialize(d)? {
        None => Ok(None),
        Some(p @ 0..=100) => Ok(Some(p as u32)),
        Some(p) => Err(de::Error::custom(format!("{p} not in valid range [0, 100]"))),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RawProfile {
    #[serde(default)]
    pub scheduler_name: Option<Spanned<String>>,
    #[serde(default, deserialize_with = "percentage")]
    pub percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    pub plugins: RawPlugins,
    #[serde(default)]
    pub plugin_config: Vec<RawPluginConfig>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(crate) struct RawPlugins {
    multi_point: RawPluginSet,
    queue_sort: RawPluginSet,
    pre_enqueue: RawPluginSet,
    pre_filter: RawPluginSet,
    filter: RawPluginSet,
    post_filter: RawPluginSet,
    pre_score: RawPluginSet,
    score: RawPluginSet,
    reserve: RawPluginSet,
    permit: RawPluginSet,
    pre_bind: RawPluginSet,
    bind: RawPluginSet,
    post_bind: RawPluginSet,
}

impl RawPlugins {
    /// The sets in the order of [`crate::types::EXTENSION_POINTS`].
    pub(crate) fn into_sets(self) -> [RawPluginSet; 13] {
        [
            self.multi_point,
            self.queue_sort,
            self.pre_enqueue,
            self.pre_filter,
            self.filter,
            self.post_filter,
            self.pre_score,
            self.score,
            self.reserve,
            self.permit,
            self.pre_bind,
            self.bind,
            self.post_bind,
        ]
    }
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawPluginSet {
    pub enabled: Vec<RawPluginRef>,
    pub disabled: Vec<RawPluginRef>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPluginRef {
    pub name: Spanned<String>,
    #[serde(default, deserialize_with = "weight")]
    pub weight: Option<i32>,
}

fn weight<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    match Option::<i32>::deserialize(d)? {
        Some(w) if w < 0 => Err(de::Error::custom(format!(
            "weight must be at least 1 (0 means the default, 1), got {w}"
        ))),
        w => Ok(w),
    }
}

/// `pluginConfig[]` entry. The type of `args` depends on `name`, so `args` is decoded while
/// reading the entry when `name` comes first (errors keep their YAML position and path), and
/// kept as JSON for a second pass otherwise.
pub(crate) struct RawPluginConfig {
    pub name: Spanned<String>,
    pub args: RawArgs,
}

pub(crate) enum RawArgs {
    Decoded(PluginArgs),
    /// The args of a plugin without a typed args type here (out-of-tree),
    /// with the positions of their fields, for the plugin's own check.
    Other(crate::other_args::PositionedJson),
    /// `args` came before `name`.
    Deferred(serde_json::Value),
}

const PLUGIN_CONFIG_FIELDS: &[&str] = &["name", "args"];

impl<'de> Deserialize<'de> for RawPluginConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_struct("PluginConfig", PLUGIN_CONFIG_FIELDS, PluginConfigVisitor)
    }
}

struct PluginConfigVisitor;

impl<'de> Visitor<'de> for PluginConfigVisitor {
    type Value = RawPluginConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a pluginConfig entry {name, args}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut name: Option<Spanned<String>> = None;
        let mut args: Option<RawArgs> = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "name" if name.is_some() => return Err(de::Error::duplicate_field("name")),
                "name" => name = Some(map.next_value()?),
                "args" if args.is_some() => return Err(de::Error::duplicate_field("args")),
                "args" => {
                    args = Some(match &name {
                        Some(name) if PluginArgs::default_for(&name.value).is_none() => {
                            RawArgs::Other(map.next_value()?)
                        }
                        Some(name) => RawArgs::Decoded(map.next_value_seed(ArgsSeed(&name.value))?),
                        None => RawArgs::Deferred(
                            map.next_value::<Option<serde_json::Value>>()?
                                .unwrap_or(serde_json::Value::Null),
                        ),
                    });
                }
                other => return Err(de::Error::unknown_field(other, PLUGIN_CONFIG_FIELDS)),
            }
        }
        let name = name.ok_or_else(|| de::Error::missing_field("name"))?;
        let args = match args {
            Some(args) => args,
            None => RawArgs::Decoded(
                args::decode(&name.value, serde_json::Value::Null).map_err(de::Error::custom)?,
            ),
        };
        Ok(RawPluginConfig { name, args })
    }
}

struct ArgsSeed<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for ArgsSeed<'_> {
    type Value = PluginArgs;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<PluginArgs, D::Error> {
        args::decode(self.0, d)
    }
}
