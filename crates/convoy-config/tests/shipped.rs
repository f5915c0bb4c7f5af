//! The configurations the repository ships load: every KubeSchedulerConfiguration under
//! `config/`, and the one the Helm chart renders with its default values.

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

    let chart = render_chart_config();
    parse_str(&chart, "charts/convoy (default values)", &known())
        .unwrap_or_else(|e| panic!("{e}\n--- rendered:\n{chart}"));
}

/// The chart's `config.yaml` rendered with its default values, for the few template
/// constructs the ConfigMap uses; any other construct fails the test (extend this then).
fn render_chart_config() -> String {
    let chart = repository().join("charts/convoy");
    let values: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart.join("values.yaml")).unwrap())
            .unwrap();
    let value = |path: &str| -> &serde_json::Value {
        path.trim_start_matches(".Values.")
            .split('.')
            .fold(&values, |v, key| v.get(key).unwrap_or_else(|| panic!("no value {path}")))
    };
    let template = std::fs::read_to_string(chart.join("templates/configmap.yaml")).unwrap();
    let body = template.split_once("config.yaml: |\n").expect("config.yaml in the ConfigMap").1;
    let mut out = String::new();
    // One flag per open `if`: whether its current branch is kept.
    let mut keep: Vec<bool> = Vec::new();
    for line in body.lines() {
        let line = line.strip_prefix("    ").unwrap_or(line);
        let directive = line.trim();
        if let Some(cond) = directive.strip_prefix("{{- if ").and_then(|d| d.strip_suffix(" }}")) {
            keep.push(value(cond).as_bool().expect("a boolean condition"));
            continue;
        }
        if directive == "{{- else }}" {
            let last = keep.last_mut().expect("else inside if");
            *last = !*last;
            continue;
        }
        if directive == "{{- end }}" {
            keep.pop().expect("end of an if");
            continue;
        }
        if !keep.iter().all(|k| *k) {
            continue;
        }
        if directive.starts_with("{{- toYaml ") {
            let (_, rest) = directive.split_once("toYaml ").unwrap();
            let path = rest.split_whitespace().next().unwrap();
            // JSON is YAML: the value on the line after its key.
            out.push_str(&format!("  {}\n", value(path)));
            continue;
        }
        let mut rendered = line
            .replace("{{ include \"convoy.fullname\" . }}", "convoy")
            .replace("{{ .Release.Namespace }}", "kube-system");
        while let Some(start) = rendered.find("{{ .Values.") {
            let end = start + rendered[start..].find(" }}").expect("closing }}");
            let path = &rendered[start + 3..end];
            let text = match value(path) {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            rendered.replace_range(start..end + 3, &text);
        }
        assert!(!rendered.contains("{{"), "unhandled template construct: {line}");
        out.push_str(&rendered);
        out.push('\n');
    }
    out
}
