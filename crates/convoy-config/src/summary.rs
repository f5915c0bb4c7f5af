//! Human-readable print of the effective configuration (`convoy-scheduler check-config`).

use std::fmt::Write;

use crate::duration::format_go_duration;
use crate::types::{PluginRef, SchedulerConfig};

impl SchedulerConfig {
    /// The effective configuration: global settings, then per profile its scheduler name, the
    /// plugins per extension point after the merge with the defaults (score weights in
    /// parentheses, disabled entries listed) and the args every configured plugin receives.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let percentage = |p: Option<u32>| match p {
            None | Some(0) => "adaptive".to_owned(),
            Some(p) => format!("{p}%"),
        };
        let _ = writeln!(out, "parallelism: {}", self.parallelism);
        let _ = writeln!(
            out,
            "percentageOfNodesToScore: {}",
            percentage(self.percentage_of_nodes_to_score)
        );
        let _ = writeln!(
            out,
            "pod backoff: {}s initial, {}s max",
            self.pod_initial_backoff_seconds, self.pod_max_backoff_seconds
        );
        let le = &self.leader_election;
        if le.leader_elect {
            let _ = writeln!(
                out,
                "leader election: {} {}/{} (lease {}, renew {}, retry {})",
                le.resource_lock,
                le.resource_namespace,
                le.resource_name,
                format_go_duration(le.lease_duration),
                format_go_duration(le.renew_deadline),
                format_go_duration(le.retry_period)
            );
        } else {
            let _ = writeln!(out, "leader election: off");
        }
        let cc = &self.client_connection;
        let kubeconfig = if cc.kubeconfig.is_empty() { "(in-cluster)" } else { &cc.kubeconfig };
        let _ =
            writeln!(out, "client: kubeconfig {kubeconfig}, qps {}, burst {}", cc.qps, cc.burst);
        for profile in &self.profiles {
            let _ = writeln!(out, "profile {:?}:", profile.scheduler_name);
            if profile.percentage_of_nodes_to_score.is_some() {
                let _ = writeln!(
                    out,
                    "  percentageOfNodesToScore: {}",
                    percentage(profile.percentage_of_nodes_to_score)
                );
            }
            for (point, set) in profile.plugins.points() {
                if set.enabled.is_empty() && set.disabled.is_empty() {
                    continue;
                }
                let _ = write!(out, "  {point}: {}", plugin_list(&set.enabled, true));
                if !set.disabled.is_empty() {
                    let _ = write!(out, " (disabled: {})", plugin_list(&set.disabled, false));
                }
                out.push('\n');
            }
            if !profile.plugin_args.is_empty() {
                let _ = writeln!(out, "  args:");
            }
            for (name, args) in &profile.plugin_args {
                let json = serde_json::to_string(args).unwrap_or_else(|e| format!("<{e}>"));
                let _ = writeln!(out, "    {name}: {json}");
            }
        }
        out
    }
}

fn plugin_list(plugins: &[PluginRef], weights: bool) -> String {
    if plugins.is_empty() {
        return "(none)".to_owned();
    }
    plugins
        .iter()
        .map(|p| match p.weight {
            Some(w) if weights => format!("{}({w})", p.name),
            _ => p.name.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
