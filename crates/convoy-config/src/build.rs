//! From the file as written to the effective configuration: version check, decoding,
//! defaulting, plugin merging and validation.

use std::collections::BTreeMap;

use crate::args::{self, PluginArgs};
use crate::defaults::{UPSTREAM_ONLY_DEFAULTS, default_multi_point, merge_plugin_set};
use crate::error::{ConfigError, Problem, Problems, decode_problem, join_path};
use crate::names;
use crate::raw::{RawArgs, RawConfig, RawPluginRef, RawProfile, TypeMeta};
use crate::types::{EXTENSION_POINTS, PluginRef, PluginSet, Plugins, Profile, SchedulerConfig};
use crate::{API_VERSION, DEFAULT_SCHEDULER_NAME, KIND, KnownPlugins};

pub(crate) fn parse(
    text: &str,
    file: &str,
    known: &KnownPlugins,
) -> Result<SchedulerConfig, ConfigError> {
    check_type_meta(text, file)?;
    let raw: RawConfig = decode_yaml(text, file)?;
    build(raw, file, known)
}

fn decode_yaml<T: serde::de::DeserializeOwned>(text: &str, file: &str) -> Result<T, ConfigError> {
    let mut path = None;
    let options = serde_saphyr::options! { with_snippet: false };
    serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = Some(e.path().clone());
            e.into_inner()
        })
    })
    .map_err(|e| ConfigError::Decode(decode_problem(file, &e, path.as_ref(), "")))
}

fn check_type_meta(text: &str, file: &str) -> Result<(), ConfigError> {
    let meta: TypeMeta = decode_yaml(text, file)?;
    let mut problems = Problems::new(file);
    match &meta.api_version {
        None => problems.push("apiVersion", None, format!("required; expected {API_VERSION:?}")),
        Some(v) if v.value != API_VERSION => problems.push(
            "apiVersion",
            Some(&v.referenced),
            format!(
                "unsupported apiVersion {:?}; Convoy reads only {API_VERSION:?} \
                 (v1beta2 and v1beta3 were removed upstream in 1.28 and 1.29)",
                v.value
            ),
        ),
        Some(_) => {}
    }
    match &meta.kind {
        None => problems.push("kind", None, format!("required; expected {KIND:?}")),
        Some(k) if k.value != KIND => problems.push(
            "kind",
            Some(&k.referenced),
            format!("unsupported kind {:?}; expected {KIND:?}", k.value),
        ),
        Some(_) => {}
    }
    problems.into_result()
}

fn build(raw: RawConfig, file: &str, known: &KnownPlugins) -> Result<SchedulerConfig, ConfigError> {
    let mut problems = Problems::new(file);

    let pod_max_backoff_seconds = match &raw.pod_max_backoff_seconds {
        None => 10.max(raw.pod_initial_backoff_seconds),
        Some(max) => {
            if max.value > crate::raw::MAX_BACKOFF_SECONDS {
                problems.push(
                    "podMaxBackoffSeconds",
                    Some(&max.referenced),
                    format!(
                        "{} is more than Convoy accepts ({} seconds, a year)",
                        max.value,
                        crate::raw::MAX_BACKOFF_SECONDS
                    ),
                );
            }
            if max.value < raw.pod_initial_backoff_seconds {
                problems.push(
                    "podMaxBackoffSeconds",
                    Some(&max.referenced),
                    format!(
                        "{} is less than podInitialBackoffSeconds ({})",
                        max.value, raw.pod_initial_backoff_seconds
                    ),
                );
            }
            max.value
        }
    };
    if let Some(extenders) = &raw.extenders
        && !extenders.value.is_empty()
    {
        problems.push(
            "extenders",
            Some(&extenders.referenced),
            "scheduler extenders are not supported by Convoy; use plugins",
        );
    }
    // Upstream serves /debug/pprof (and contention profiles) when these are true; Convoy
    // has no such endpoints. Absent loads (upstream's default is true, and upstream files
    // omit it), as does an explicit false.
    for (field, value) in [
        ("enableProfiling", &raw.enable_profiling),
        ("enableContentionProfiling", &raw.enable_contention_profiling),
    ] {
        if let Some(value) = value
            && value.value
        {
            problems.push(
                field,
                Some(&value.referenced),
                "profiling endpoints are not supported by Convoy; set it to false or remove it",
            );
        }
    }
    validate_leader_election(&raw.leader_election, &mut problems);

    let mut raw_profiles = raw.profiles;
    if raw_profiles.is_empty() {
        raw_profiles.push(RawProfile {
            scheduler_name: None,
            percentage_of_nodes_to_score: None,
            plugins: Default::default(),
            plugin_config: Vec::new(),
        });
    }
    let single = raw_profiles.len() == 1;
    let mut profiles = Vec::with_capacity(raw_profiles.len());
    let mut seen_names: Vec<String> = Vec::new();
    for (i, raw_profile) in raw_profiles.into_iter().enumerate() {
        let path = format!("profiles[{i}]");
        let scheduler_name = match &raw_profile.scheduler_name {
            None if single => DEFAULT_SCHEDULER_NAME.to_owned(),
            None => {
                problems.push(
                    format!("{path}.schedulerName"),
                    None,
                    "required when there is more than one profile",
                );
                String::new()
            }
            Some(name) => {
                if name.value.is_empty() {
                    problems.push(
                        format!("{path}.schedulerName"),
                        Some(&name.referenced),
                        "must not be empty",
                    );
                } else if let Some(first) = seen_names.iter().position(|n| *n == name.value) {
                    problems.push(
                        format!("{path}.schedulerName"),
                        Some(&name.referenced),
                        format!(
                            "duplicate scheduler name {:?} (also used by profiles[{first}])",
                            name.value
                        ),
                    );
                }
                name.value.clone()
            }
        };
        seen_names.push(scheduler_name.clone());
        profiles.push(build_profile(raw_profile, scheduler_name, &path, known, &mut problems));
    }
    validate_common_queue_sort(&profiles, &mut problems);
    problems.into_result()?;

    Ok(SchedulerConfig {
        parallelism: raw.parallelism,
        percentage_of_nodes_to_score: raw.percentage_of_nodes_to_score,
        pod_initial_backoff_seconds: raw.pod_initial_backoff_seconds,
        pod_max_backoff_seconds,
        leader_election: raw.leader_election,
        client_connection: raw.client_connection,
        delay_cache_until_active: raw.delay_cache_until_active,
        profiles,
    })
}

fn validate_leader_election(le: &crate::types::LeaderElection, problems: &mut Problems) {
    if !le.leader_elect {
        return;
    }
    let durations = [
        ("leaseDuration", le.lease_duration),
        ("renewDeadline", le.renew_deadline),
        ("retryPeriod", le.retry_period),
    ];
    for (field, value) in durations {
        if value.is_zero() {
            problems.push(format!("leaderElection.{field}"), None, "must be greater than zero");
        }
    }
    if le.lease_duration <= le.renew_deadline {
        problems.push("leaderElection.leaseDuration", None, "must be greater than renewDeadline");
    }
    // client-go's NewLeaderElector: a candidate retries every retryPeriod
    // stretched by up to JitterFactor (1.2).
    if !le.retry_period.is_zero()
        && le.renew_deadline.as_secs_f64() <= le.retry_period.as_secs_f64() * 1.2
    {
        problems.push(
            "leaderElection.renewDeadline",
            None,
            "must be greater than retryPeriod*JitterFactor (1.2)",
        );
    }
    if le.resource_lock != "leases" {
        problems.push(
            "leaderElection.resourceLock",
            None,
            format!("unsupported lock {:?}; only \"leases\" is supported", le.resource_lock),
        );
    }
    if le.resource_name.is_empty() {
        problems.push("leaderElection.resourceName", None, "must not be empty");
    }
    if le.resource_namespace.is_empty() {
        problems.push("leaderElection.resourceNamespace", None, "must not be empty");
    }
}

fn unknown_plugin(name: &str, known: &KnownPlugins) -> String {
    format!("unknown plugin {name:?}; known plugins: {}", known.list())
}

fn build_profile(
    raw: RawProfile,
    scheduler_name: String,
    path: &str,
    known: &KnownPlugins,
    problems: &mut Problems,
) -> Profile {
    let defaults = default_multi_point();
    let mut sets: [PluginSet; 13] = Default::default();
    for (k, raw_set) in raw.plugins.into_sets().into_iter().enumerate() {
        let point = EXTENSION_POINTS[k];
        let set_path = format!("{path}.plugins.{point}");
        let mut custom = PluginSet::default();
        for (j, plugin) in raw_set.enabled.into_iter().enumerate() {
            if known.contains(&plugin.name.value) {
                custom.enabled.push(plugin_ref(plugin));
            } else {
                let message = unknown_plugin(&plugin.name.value, known);
                problems.push(
                    format!("{set_path}.enabled[{j}]"),
                    Some(&plugin.name.referenced),
                    message,
                );
            }
        }
        for (j, plugin) in raw_set.disabled.into_iter().enumerate() {
            let name = plugin.name.value.as_str();
            // Upstream defaults Convoy does not implement are kept too: the
            // framework reads them (a disabled DynamicResources means claims are
            // not evaluated, as upstream).
            if name == "*" || known.contains(name) || UPSTREAM_ONLY_DEFAULTS.contains(&name) {
                custom.disabled.push(plugin_ref(plugin));
            } else {
                let message = format!("{} (cannot disable it)", unknown_plugin(name, known));
                problems.push(
                    format!("{set_path}.disabled[{j}]"),
                    Some(&plugin.name.referenced),
                    message,
                );
            }
        }
        let point_defaults: &[PluginRef] = if k == 0 { &defaults } else { &[] };
        let merged = merge_plugin_set(point_defaults, custom);
        for (j, plugin) in merged.enabled.iter().enumerate() {
            if merged.enabled[..j].iter().any(|p| p.name == plugin.name) {
                problems.push(
                    format!("{set_path}.enabled"),
                    None,
                    format!("plugin {:?} is enabled more than once", plugin.name),
                );
            }
        }
        sets[k] = merged;
    }
    // scheduler-plugins' `Coscheduling` is Convoy's `GangScheduling` under
    // its other name: a profile enabling it does not get the default too.
    if sets.iter().any(|s| s.enabled.iter().any(|p| p.name == names::COSCHEDULING)) {
        sets[0].enabled.retain(|p| p.name != names::GANG_SCHEDULING);
    }
    let plugins = Plugins::from_sets(sets);

    let mut plugin_args = BTreeMap::new();
    let mut seen: Vec<String> = Vec::new();
    for (j, entry) in raw.plugin_config.into_iter().enumerate() {
        let entry_path = format!("{path}.pluginConfig[{j}]");
        let name = entry.name.value;
        if !known.contains(&name) {
            problems.push(
                format!("{entry_path}.name"),
                Some(&entry.name.referenced),
                unknown_plugin(&name, known),
            );
            continue;
        }
        if seen.contains(&name) {
            problems.push(
                format!("{entry_path}.name"),
                Some(&entry.name.referenced),
                format!("duplicate pluginConfig for plugin {name:?}"),
            );
            continue;
        }
        seen.push(name.clone());
        let args_path = format!("{entry_path}.args");
        let decoded = match entry.args {
            RawArgs::Decoded(args) => args,
            RawArgs::Other(positioned) => {
                check_other(&name, &positioned, &args_path, known, problems);
                PluginArgs::Other(positioned.value)
            }
            RawArgs::Deferred(value) if PluginArgs::default_for(&name).is_none() => {
                let positioned = crate::other_args::PositionedJson::plain(value);
                check_other(&name, &positioned, &args_path, known, problems);
                PluginArgs::Other(positioned.value)
            }
            RawArgs::Deferred(value) => {
                match decode_deferred(&name, value, problems.file(), &args_path) {
                    Ok(args) => args,
                    Err(problem) => {
                        problems.push_problem(problem);
                        continue;
                    }
                }
            }
        };
        for (field, message) in decoded.validate() {
            problems.push(format!("{args_path}.{field}"), None, message);
        }
        plugin_args.insert(name, decoded);
    }

    let profile = Profile {
        scheduler_name,
        percentage_of_nodes_to_score: raw.percentage_of_nodes_to_score,
        plugins,
        plugin_args,
    };
    let missing: Vec<(String, PluginArgs)> = profile
        .enabled_plugin_names()
        .into_iter()
        .filter(|name| !profile.plugin_args.contains_key(*name))
        .filter_map(|name| PluginArgs::default_for(name).map(|args| (name.to_owned(), args)))
        .collect();
    let mut profile = profile;
    profile.plugin_args.extend(missing);
    profile
}

/// Runs an out-of-tree plugin's own check of its args, if it has one
/// ([`KnownPlugins::with_args`]), each problem at its field's position.
fn check_other(
    name: &str,
    args: &crate::other_args::PositionedJson,
    args_path: &str,
    known: &KnownPlugins,
    problems: &mut Problems,
) {
    let Some(check) = known.args_check(name) else { return };
    for (field, message) in check(&args.value) {
        let path = if field.is_empty() {
            args_path.to_owned()
        } else if field.starts_with('[') {
            format!("{args_path}{field}")
        } else {
            format!("{args_path}.{field}")
        };
        problems.push(path, args.position_of(&field), message);
    }
}

fn plugin_ref(raw: RawPluginRef) -> PluginRef {
    PluginRef { name: raw.name.value, weight: raw.weight }
}

/// Second pass over `args` that came before `name` in the file: no YAML position left, but
/// the path is kept.
fn decode_deferred(
    name: &str,
    value: serde_json::Value,
    file: &str,
    args_path: &str,
) -> Result<PluginArgs, Problem> {
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(value, &mut track);
    args::decode(name, de).map_err(|e| Problem {
        file: file.to_owned(),
        position: None,
        field: join_path(args_path, Some(&track.path())),
        message: e.to_string(),
    })
}

/// Upstream's `validateCommonQueueSort`: the queueSort point names at most one plugin, and the
/// same plugin with the same args in every profile.
fn validate_common_queue_sort(profiles: &[Profile], problems: &mut Problems) {
    let queue_sort = |p: &Profile| p.plugins.queue_sort.enabled.first().map(|r| r.name.clone());
    for (i, profile) in profiles.iter().enumerate() {
        let count = profile.plugins.queue_sort.enabled.len();
        if count > 1 {
            problems.push(
                format!("profiles[{i}].plugins.queueSort.enabled"),
                None,
                format!("only one queue sort plugin can be enabled, got {count}"),
            );
        }
    }
    let Some(first) = profiles.first() else { return };
    let canon = queue_sort(first);
    let canon_args = canon.as_ref().and_then(|n| first.plugin_args.get(n));
    for (i, profile) in profiles.iter().enumerate().skip(1) {
        let current = queue_sort(profile);
        if current != canon {
            problems.push(
                format!("profiles[{i}].plugins.queueSort.enabled[0]"),
                None,
                format!(
                    "queue sort plugin {} must be the same for all profiles (profiles[0] uses {})",
                    describe(current.as_deref()),
                    describe(canon.as_deref())
                ),
            );
        } else if let Some(name) = &current
            && profile.plugin_args.get(name) != canon_args
        {
            problems.push(
                format!("profiles[{i}].pluginConfig"),
                None,
                format!("args of queue sort plugin {name:?} must be the same for all profiles"),
            );
        }
    }
}

fn describe(name: Option<&str>) -> String {
    match name {
        Some(name) => format!("{name:?}"),
        None => "(the default)".to_owned(),
    }
}
