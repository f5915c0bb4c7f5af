//! The scheduler configuration and the plugin args in it.

use std::sync::Arc;

use convoy_api::{BindError, Binder, Handle, PodInfo, Registry, WaitingPods};
use convoy_config::{KnownPlugins, PluginArgs, SchedulerConfig};
use convoy_gang::GangSchedulingArgs;
use convoy_objects::ClusterObjects;

/// Loads the input as a configuration file. An accepted configuration is
/// summarised (`check-config`), and every plugin a profile enables or
/// configures is built from its args by its factory, as the scheduler
/// does; factories may refuse args (out-of-tree args are only decoded
/// there), but not panic.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let registry = convoy_scheduler::registry();
    let known = KnownPlugins::new(registry.names());
    match convoy_config::parse_str(text, "fuzz.yaml", &known) {
        Ok(config) => build_plugins(&config, &registry),
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// The input is a plugin name on the first line, then the YAML of its
/// `args`, which is placed in a configuration's `pluginConfig` (indented
/// under `args:`). Loaded and built as [`config`] does; in addition, typed
/// args the loader accepted, written as JSON (as `check-config` prints
/// them) and loaded again, give the same args.
pub fn plugin_args(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (name, args) = text.split_once('\n').unwrap_or((text, ""));
    let mut yaml = config_with_args(name, "");
    for line in args.split('\n') {
        yaml.push_str("      ");
        yaml.push_str(line);
        yaml.push('\n');
    }
    let registry = convoy_scheduler::registry();
    let known = KnownPlugins::new(registry.names());
    let config = match convoy_config::parse_str(&yaml, "fuzz.yaml", &known) {
        Ok(config) => config,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    build_plugins(&config, &registry);
    let Some(decoded) = config.profiles[0].plugin_args.get(name) else { return };
    if matches!(decoded, PluginArgs::Other(_)) {
        return;
    }
    let json = serde_json::to_string(decoded).expect("plugin args serialize");
    let again = convoy_config::parse_str(&config_with_args(name, &json), "fuzz.yaml", &known)
        .unwrap_or_else(|e| panic!("{name} args {json} do not load again: {e}"));
    assert_eq!(again.profiles[0].plugin_args.get(name), Some(decoded), "{name} args {json}");
}

/// A configuration of one profile whose `pluginConfig` gives `name` the
/// args `args` (the rest of the line after `args: `).
fn config_with_args(name: &str, args: &str) -> String {
    format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         profiles:\n- schedulerName: fuzz\n  pluginConfig:\n  - name: {}\n    args: {args}\n",
        serde_json::Value::from(name)
    )
}

/// Builds every plugin each profile enables or has args for, as the
/// scheduler does, and decodes the gang plugins' args.
fn build_plugins(config: &SchedulerConfig, registry: &Registry) {
    let _ = config.summary();
    for profile in &config.profiles {
        let handle = handle(&profile.scheduler_name);
        let mut names = profile.enabled_plugin_names();
        names.extend(profile.plugin_args.keys().map(String::as_str));
        for name in names {
            let args = profile.plugin_args.get(name);
            if let Some(factory) = registry.get(name) {
                // Refusing args is an answer; only a panic is a finding.
                let _ = factory(args, &handle);
            }
            if name == convoy_gang::NAME || name == convoy_gang::COSCHEDULING {
                let _ = GangSchedulingArgs::decode(args);
            }
        }
    }
}

fn handle(profile: &str) -> Handle {
    Handle {
        binder: Arc::new(NoBinder),
        waiting_pods: Arc::new(NoWaiting),
        profile: Arc::from(profile),
        objects: Arc::new(ClusterObjects::new()),
        groups: None,
        running_preemptions: Default::default(),
        dra_stats: Default::default(),
    }
}

/// A binder the factories may keep but never call here.
struct NoBinder;

impl Binder for NoBinder {
    fn bind(
        &self,
        _pod: Arc<PodInfo>,
        _node: Arc<str>,
    ) -> futures::future::BoxFuture<'static, Result<(), BindError>> {
        Box::pin(std::future::ready(Err(BindError::Failed("not binding while fuzzing".into()))))
    }
}

/// No pod waits at Permit.
struct NoWaiting;

impl WaitingPods for NoWaiting {
    fn allow(&self, _uid: &str, _plugin: &'static str) -> bool {
        false
    }
    fn reject(&self, _uid: &str, _plugin: &'static str, _message: &str) -> bool {
        false
    }
    fn uids(&self) -> Vec<Arc<str>> {
        Vec::new()
    }
}
