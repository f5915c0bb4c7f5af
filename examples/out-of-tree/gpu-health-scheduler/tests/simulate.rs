//! The example scheduler places as intended on the embedded cluster
//! (`simulate`, through the binary itself and through the library), and
//! its configuration loader checks GpuHealth's args with positions.

use std::path::Path;
use std::process::Command;

fn here(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `gpu-health-scheduler simulate`: no GPU pod on a node whose GPUs are
/// reported unhealthy; the one that fits nowhere healthy stays pending with
/// GpuHealth's reason.
#[test]
fn the_binary_simulates_with_the_plugin() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-health-scheduler"))
        .args(["simulate", "--config"])
        .arg(here("config/gpu-health.yaml"))
        .arg("--cluster")
        .arg(here("config/cluster.yaml"))
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let placed: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.split_once("  -> "))
        .map(|(pod, node)| (pod.trim(), node.trim()))
        .collect();
    assert_eq!(placed.len(), 5, "{text}");
    for (pod, node) in &placed {
        assert_ne!(*node, "gpu-0", "{pod} on gpu-0, whose 8 GPUs are unhealthy\n{text}");
        if pod.starts_with("default/train") {
            assert!(*node == "gpu-2" || *node == "gpu-3", "{pod} on {node}\n{text}");
        }
    }
    assert!(placed.contains(&("default/small", "gpu-1")), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("default/train-4")
            && l.contains("pending")
            && l.contains("2 node(s) had unhealthy GPUs")),
        "{text}"
    );
}

/// Without the plugin (Convoy's own binary's registry), the same cluster
/// puts GPU pods on the unhealthy nodes: the test above can fail.
#[test]
fn without_the_plugin_unhealthy_gpus_are_used() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let config = convoy_scheduler::load_config_with(
        Some(&here("config/gpu-health.yaml")),
        &convoy_example_gpu_health_scheduler::registry(),
    )
    .unwrap();
    // The same profile minus GpuHealth.
    let mut plain = config.clone();
    plain.profiles[0].plugins =
        convoy_scheduler::load_config(None).unwrap().profiles[0].plugins.clone();
    let load = |kinds: &[convoy_api::ApiInfo]| {
        convoy_embedded::load_file_with(&here("config/cluster.yaml"), kinds).unwrap()
    };
    let registry = convoy_example_gpu_health_scheduler::registry();
    let without = rt
        .block_on(convoy_scheduler::simulate::simulate_with(&registry, plain, load(&[]), false))
        .unwrap();
    let on_bad = without.pods.iter().filter(|p| matches!(p.node.as_deref(), Some("gpu-0"))).count();
    assert!(on_bad > 0, "{}", without.to_text());
    let with = rt
        .block_on(convoy_scheduler::simulate::simulate_with(
            &registry,
            config,
            load(registry.kinds()),
            false,
        ))
        .unwrap();
    assert!(with.pods.iter().all(|p| p.node.as_deref() != Some("gpu-0")), "{}", with.to_text());
}

/// A wrong field in GpuHealth's args is reported with file, line, column
/// and field, as for an in-tree plugin's.
#[test]
fn bad_args_are_named_with_their_position() {
    let dir = std::env::temp_dir().join(format!("gpu-health-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    let good = std::fs::read_to_string(here("config/gpu-health.yaml")).unwrap();
    std::fs::write(&file, good.replace("requireReport: false", "requireReport: maybe")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-health-scheduler"))
        .args(["check-config", "--config"])
        .arg(&file)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let line = good.lines().position(|l| l.contains("requireReport")).unwrap() + 1;
    let want = format!(
        "{}:{line}:26: profiles[0].pluginConfig[0].args.requireReport: invalid type",
        file.display()
    );
    assert!(err.contains(&want), "{err}\nwanted {want}");
    std::fs::remove_dir_all(dir).ok();
}
