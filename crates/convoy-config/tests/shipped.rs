//! The configurations the repository ships load: every KubeSchedulerConfiguration under
//! `config/`. The one the Helm chart renders is checked with helm itself and
//! `convoy-scheduler check-config` (`crates/convoy-scheduler/tests/chart.rs`,
//! `chart_values.rs`).

use std::path::{Path, PathBuf};

use convoy_config::{KnownPlugins, default_multi_point, names, parse_str};

/// The default plugins, Convoy's GpuPlacement and the gang plugin's other name: the plugins
/// the shipped files may name.
fn known() -> KnownPlugins {
    let mut names: Vec<String> = default_multi_point().into_iter().map(|p| p.name).collect();
    names.extend([names::GPU_PLACEMENT.to_owned(), names::COSCHEDULING.to_owned()]);
    KnownPlugins::new(names)
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

#[test]
fn shipped_configurations_load() {
    let mut files = Vec::new();
    yaml_files(&repository().join("config"), &mut files);
    files.sort();
    let mut loaded = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        // config/ also holds cluster files for `simulate` (Nodes, Pods, ...).
        if !text.lines().any(|l| l.trim() == "kind: KubeSchedulerConfiguration") {
            continue;
        }
        let name = path.display().to_string();
        parse_str(&text, &name, &known()).unwrap_or_else(|e| panic!("{e}"));
        loaded.push(name);
    }
    assert!(!loaded.is_empty(), "no KubeSchedulerConfiguration under config/");
}
