//! `GangSchedulingArgs` (also accepted under scheduler-plugins' name
//! `CoschedulingArgs`), decoded strictly from the profile's `pluginConfig`.

use std::time::Duration;

use convoy_config::PluginArgs;
use serde::Deserialize;

use crate::state::StarvationPolicy;

/// The plugin's arguments. All fields are optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GangSchedulingArgs {
    /// How long a member may wait at the Permit barrier when its PodGroup
    /// sets no `scheduleTimeoutSeconds` (scheduler-plugins' default: 60).
    #[serde(default = "default_permit_wait")]
    pub permit_waiting_time_seconds: u64,
    /// Upper bound of the random jitter added to a failed group's backoff
    /// (default 1 s), so competing groups do not retry in lockstep.
    #[serde(default = "default_jitter_ms")]
    pub pod_group_backoff_jitter_milliseconds: u64,
    /// A failed group that has waited this long has the nodes of its
    /// reservation plan held from pods of lower or equal priority (default
    /// 5 s).
    #[serde(default = "default_threshold")]
    pub starvation_threshold_seconds: u64,
    /// ... for at most this long (default 300 s).
    #[serde(default = "default_max_hold")]
    pub starvation_max_hold_seconds: u64,
    /// Backfill on held nodes: a pod of lower or equal priority may use a
    /// node held for a starving gang if its `activeDeadlineSeconds`, plus
    /// this allowance for its start, ends before every pod the gang waits
    /// for there must be gone by its own deadline (default 2 s).
    #[serde(default = "default_backfill_start")]
    pub starvation_backfill_start_seconds: u64,
    /// scheduler-plugins' `podGroupBackoffSeconds`: accepted; Convoy's group
    /// backoff is the pods' exponential backoff plus jitter.
    #[serde(default)]
    pub pod_group_backoff_seconds: Option<u64>,
    /// scheduler-plugins' `podGroupRejectPercentage`: accepted and unused
    /// (Convoy never keeps part of a group reserved).
    #[serde(default)]
    pub pod_group_reject_percentage: Option<u64>,
}

fn default_permit_wait() -> u64 {
    60
}
fn default_jitter_ms() -> u64 {
    1000
}
fn default_threshold() -> u64 {
    5
}
fn default_max_hold() -> u64 {
    300
}
fn default_backfill_start() -> u64 {
    2
}

impl Default for GangSchedulingArgs {
    fn default() -> Self {
        serde_json::from_value(serde_json::json!({})).expect("defaults decode")
    }
}

impl GangSchedulingArgs {
    /// Decodes the args a profile gave (none: the defaults). Errors name
    /// the field.
    pub fn decode(args: Option<&PluginArgs>) -> Result<Self, String> {
        let value = match args {
            None => return Ok(Self::default()),
            Some(PluginArgs::Other(v)) => v.clone(),
            Some(other) => return Err(format!("unexpected args {other:?}")),
        };
        let mut value = value;
        if let Some(map) = value.as_object_mut() {
            map.remove("apiVersion");
            map.remove("kind");
        }
        let args: Self = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) }
        })?;
        if args.permit_waiting_time_seconds == 0 {
            return Err("permitWaitingTimeSeconds: must be positive".into());
        }
        Ok(args)
    }

    /// The starvation guard's tunables.
    pub fn starvation_policy(&self) -> StarvationPolicy {
        StarvationPolicy {
            threshold: Duration::from_secs(self.starvation_threshold_seconds),
            max_hold: Duration::from_secs(self.starvation_max_hold_seconds),
            backfill_start: Duration::from_secs(self.starvation_backfill_start_seconds),
        }
    }

    /// The jitter bound.
    pub fn backoff_jitter(&self) -> Duration {
        Duration::from_millis(self.pod_group_backoff_jitter_milliseconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_errors() {
        let d = GangSchedulingArgs::decode(None).unwrap();
        assert_eq!(d.permit_waiting_time_seconds, 60);
        assert_eq!(d.starvation_policy(), StarvationPolicy::default());
        let a = PluginArgs::Other(
            json!({"kind": "CoschedulingArgs", "permitWaitingTimeSeconds": 10, "podGroupBackoffSeconds": 1}),
        );
        assert_eq!(GangSchedulingArgs::decode(Some(&a)).unwrap().permit_waiting_time_seconds, 10);
        let bad = PluginArgs::Other(json!({"permitWaitTime": 10}));
        let e = GangSchedulingArgs::decode(Some(&bad)).unwrap_err();
        assert!(e.contains("unknown field `permitWaitTime`"), "{e}");
        let bad = PluginArgs::Other(json!({"starvationThresholdSeconds": "x"}));
        let e = GangSchedulingArgs::decode(Some(&bad)).unwrap_err();
        assert!(e.starts_with("starvationThresholdSeconds: invalid type"), "{e}");
        let bad = PluginArgs::Other(json!({"permitWaitingTimeSeconds": 0}));
        assert_eq!(
            GangSchedulingArgs::decode(Some(&bad)).unwrap_err(),
            "permitWaitingTimeSeconds: must be positive"
        );
    }
}
